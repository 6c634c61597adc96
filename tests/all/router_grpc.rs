//! The router service as operators run it: a `switchboard router` process over gRPC, with
//! health, reflection, typed errors, several instances side by side, and a graceful stop.

use std::time::Duration;

use switchboard_proto::router::v1::router_client::RouterClient;
use switchboard_proto::router::v1::{
    Configuration, EvaluateRequest, EvaluateResponse, Outcome, ValidateRequest,
};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::router_sandbox::realistic;
use crate::support::{RouterProcess, context, deliveries, payload, stored};

async fn client(router: &RouterProcess) -> RouterClient<tonic::transport::Channel> {
    RouterClient::connect(router.url())
        .await
        .expect("connects")
        .max_decoding_message_size(128 << 20)
        .max_encoding_message_size(128 << 20)
}

fn evaluate_request(configs: &[&str], n: usize) -> EvaluateRequest {
    EvaluateRequest {
        context: Some(context()),
        configurations: configs
            .iter()
            .map(|c| Configuration {
                json: c.to_string(),
            })
            .collect(),
        deliveries: deliveries(n),
        // Decisions, not speed, are under test; a loaded CI machine must not fault them.
        budget_ms: 5_000,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn evaluate_over_grpc_routes_real_deliveries() {
    let router = RouterProcess::spawn(&["--children", "2"]);
    let mut c = client(&router).await;
    let saved = realistic();
    let candidate = r#"{"rules":[{"id":"drop-all","when":"true","action":{"drop":true}}]}"#;
    let resp: EvaluateResponse = c
        .evaluate(evaluate_request(&[&saved, candidate], 120))
        .await
        .expect("evaluates")
        .into_inner();
    assert_eq!(resp.results.len(), 120);
    assert_eq!(resp.counters.len(), 2);
    for r in &resp.results {
        assert_eq!(r.decisions.len(), 2);
        assert_eq!(r.decisions[1].outcome, Outcome::Drop as i32);
        assert_eq!(r.decisions[1].rule_id, "drop-all");
        assert_ne!(r.decisions[0].outcome, Outcome::Fault as i32, "{r:?}");
    }
    assert_eq!(resp.counters[1].rules[0].first_matches, 120);
}

#[tokio::test(flavor = "multi_thread")]
async fn validate_over_grpc_reports_typed_problems() {
    let router = RouterProcess::spawn(&["--children", "1"]);
    let mut c = client(&router).await;
    let json = serde_json::json!({"rules": [
        {"id": "a", "when": "input", "action": {"drop": true}},
        {"id": "a", "when": "def f: f; f", "action": {"queue": "elsewhere"}}
    ], "params": {"big": "x".repeat(70_000)}})
    .to_string();
    let resp = c
        .validate(ValidateRequest {
            configuration: Some(Configuration { json }),
            context: Some(context()),
        })
        .await
        .expect("validates")
        .into_inner();
    assert!(!resp.valid);
    let codes: Vec<&str> = resp.problems.iter().map(|p| p.code.as_str()).collect();
    for want in [
        "forbidden_builtin",
        "duplicate_rule_id",
        "forbidden_syntax",
        "not_granted",
        "params_too_large",
    ] {
        assert!(codes.contains(&want), "{want} not in {codes:?}");
    }
    let ok = c
        .validate(ValidateRequest {
            configuration: Some(Configuration { json: realistic() }),
            context: Some(context()),
        })
        .await
        .expect("validates")
        .into_inner();
    assert!(ok.valid, "{:?}", ok.problems);
    assert_eq!(ok.digest.len(), 64);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_are_invalid_argument_and_the_router_keeps_serving() {
    let router = RouterProcess::spawn(&["--children", "1"]);
    let mut c = client(&router).await;
    let none = c
        .evaluate(evaluate_request(&[], 1))
        .await
        .expect_err("no configuration");
    assert_eq!(none.code(), Code::InvalidArgument);
    let three = c
        .evaluate(evaluate_request(&["{}", "{}", "{}"], 1))
        .await
        .expect_err("three");
    assert_eq!(three.code(), Code::InvalidArgument);
    let mut big = evaluate_request(&["{}"], 1);
    big.deliveries[0].body = bytes::Bytes::from(vec![
        b' ';
        switchboard_model::body::MAX_BODY_BYTES_CEILING
            + 1
    ]);
    assert_eq!(
        c.evaluate(big).await.expect_err("big body").code(),
        Code::InvalidArgument
    );
    let missing = c
        .validate(ValidateRequest::default())
        .await
        .expect_err("no configuration");
    assert_eq!(missing.code(), Code::InvalidArgument);
    // A malformed configuration is not a transport error: every delivery faults, typed.
    let resp = c
        .evaluate(evaluate_request(&["{not json"], 3))
        .await
        .expect("evaluates")
        .into_inner();
    assert!(
        resp.results
            .iter()
            .all(|r| r.decisions[0].fault_code == "invalid_configuration")
    );
    // Still serving.
    let ok = c
        .evaluate(evaluate_request(&[&realistic()], 5))
        .await
        .expect("evaluates")
        .into_inner();
    assert_eq!(ok.results.len(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_json_payload_reaches_rules_as_a_string() {
    let router = RouterProcess::spawn(&["--children", "1"]);
    let mut c = client(&router).await;
    let mut d = stored(&payload("github", "push.json"), 1);
    d.body = bytes::Bytes::from_static(b"payload=%7B%22a%22%3A1%7D");
    let json = r#"{"rules":[{"id":"is-string","when":".payload | type == \"string\"","action":{"queue":"triage"}}]}"#;
    let req = EvaluateRequest {
        context: Some(context()),
        configurations: vec![Configuration { json: json.into() }],
        deliveries: vec![d],
        budget_ms: 0,
        ..Default::default()
    };
    let resp = c.evaluate(req).await.expect("evaluates").into_inner();
    assert_eq!(resp.results[0].decisions[0].queue, "triage");
}

#[tokio::test(flavor = "multi_thread")]
async fn health_and_reflection_are_served() {
    let router = RouterProcess::spawn(&["--children", "1"]);
    let channel = tonic::transport::Endpoint::from_shared(router.url())
        .expect("url")
        .connect()
        .await
        .expect("connects");
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "switchboard.router.v1.Router"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health answers")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    // Exactly what a router serves, through v1 and v1alpha: not control's services.
    let (v1, v1alpha) = crate::support::reflected_services(channel).await;
    let want: std::collections::BTreeSet<String> = ["switchboard.router.v1.Router"]
        .into_iter()
        .chain(crate::support::REFLECTED_BY_EVERY_ROLE)
        .map(str::to_string)
        .collect();
    assert_eq!(v1, want);
    assert_eq!(v1alpha, want);
}

#[tokio::test(flavor = "multi_thread")]
async fn several_routers_side_by_side_give_the_same_decisions() {
    let a = RouterProcess::spawn(&["--children", "1"]);
    let b = RouterProcess::spawn(&["--children", "2"]);
    let req = evaluate_request(&[&realistic()], 100);
    let ra = client(&a)
        .await
        .evaluate(req.clone())
        .await
        .expect("a")
        .into_inner();
    let rb = client(&b)
        .await
        .evaluate(req)
        .await
        .expect("b")
        .into_inner();
    assert_eq!(ra, rb);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_in_flight_work_then_exits_cleanly() {
    let mut router = RouterProcess::spawn(&["--children", "1"]);
    let mut c = client(&router).await;
    // Slow enough per envelope that the call is still running when SIGTERM arrives.
    let busy = r#"{"rules":[{"id":"busy","when":"(. as $p | [$p,$p,$p,$p] | [.,.,.,.] | [.,.,.,.] | tojson | length) < 0","action":{"drop":true}}]}"#;
    let mut req = evaluate_request(&[busy], 300);
    req.budget_ms = 5_000;
    let call = tokio::spawn(async move { c.evaluate(req).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    router.terminate();
    let resp = call
        .await
        .expect("joins")
        .expect("in-flight call completes")
        .into_inner();
    assert_eq!(resp.results.len(), 300);
    assert!(
        resp.results
            .iter()
            .all(|r| r.decisions[0].outcome != Outcome::Fault as i32)
    );
    let status = router
        .wait_exit(Duration::from_secs(10))
        .expect("router exits");
    assert!(status.success(), "{status:?}");
}
