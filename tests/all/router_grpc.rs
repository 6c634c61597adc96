//! The router service as operators run it: a `switchboard router` process over gRPC, with
//! health, reflection, typed errors, several instances side by side, and a graceful stop.

use std::time::Duration;

use switchboard_proto::router::v1::router_client::RouterClient;
use switchboard_proto::router::v1::{
    Configuration, EvaluateRequest, EvaluateResponse, Outcome, StoredDelivery, ValidateRequest,
};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::router_sandbox::realistic;
use crate::support::{
    RouterProcess, children_of, context, cpu_ticks, decisions_only, deliveries, payload, stored,
};

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
            .map(|c| Configuration::text(c.to_string()))
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
            configuration: Some(Configuration::text(json)),
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
            configuration: Some(Configuration::text(realistic())),
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

/// `request` sent as an `EvaluateStream`: the first message carries the call and the first
/// part's deliveries, each later message the next part's.
fn streamed(request: &EvaluateRequest, parts: &[usize]) -> Vec<EvaluateRequest> {
    let mut rest = request.deliveries.as_slice();
    parts
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let (part, after) = rest.split_at(n.min(rest.len()));
            rest = after;
            let deliveries = part.to_vec();
            if i == 0 {
                EvaluateRequest {
                    deliveries,
                    ..request.clone()
                }
            } else {
                EvaluateRequest {
                    deliveries,
                    ..Default::default()
                }
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_call_answers_exactly_as_the_same_call_in_one_message() {
    let router = RouterProcess::spawn(&["--children", "2"]);
    let mut c = client(&router).await;
    let saved = realistic();
    let candidate = r#"{"rules":[{"id":"drop-prs","when":".event == \"pull_request\"","action":{"drop":true}}]}"#;
    let request = evaluate_request(&[&saved, candidate], 300);
    let whole = c
        .evaluate(request.clone())
        .await
        .expect("evaluates")
        .into_inner();
    assert_eq!(whole.results.len(), 300);
    // Parts of every shape: one delivery with the call, an empty part, a part bigger than
    // a chunk, and the first message carrying no delivery at all.
    for parts in [vec![1, 0, 57, 130, 112], vec![0, 300], vec![300]] {
        let got = c
            .evaluate_stream(futures::stream::iter(streamed(&request, &parts)))
            .await
            .expect("evaluates")
            .into_inner();
        assert_eq!(
            decisions_only(got),
            decisions_only(whole.clone()),
            "parts {parts:?}"
        );
    }
    // One configuration too.
    let one = evaluate_request(&[&saved], 40);
    let whole = c
        .evaluate(one.clone())
        .await
        .expect("evaluates")
        .into_inner();
    let got = c
        .evaluate_stream(futures::stream::iter(streamed(&one, &[10, 10, 20])))
        .await
        .expect("evaluates")
        .into_inner();
    assert_eq!(decisions_only(got), decisions_only(whole));
}

/// CPU ticks a router's sandbox children have used so far (those alive now).
fn children_ticks(router: &RouterProcess) -> u64 {
    children_of(router.child.id())
        .into_iter()
        .map(cpu_ticks)
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_call_is_evaluated_while_its_caller_is_still_sending() {
    let router = RouterProcess::spawn(&["--children", "2", "--spare-children", "0"]);
    let mut c = client(&router).await;
    let request = evaluate_request(&[&realistic()], 600);
    let whole = c
        .evaluate(request.clone())
        .await
        .expect("evaluates")
        .into_inner();
    // What the first part costs the children, measured as one call of its own.
    let mut first = request.clone();
    first.deliveries.truncate(500);
    let before = children_ticks(&router);
    c.evaluate(first).await.expect("evaluates");
    let cost = children_ticks(&router).saturating_sub(before);
    // The first message goes out; the caller holds the last one back.
    let before = children_ticks(&router);
    let (send, parts) = tokio::sync::mpsc::channel(2);
    let mut messages = streamed(&request, &[500, 100]).into_iter();
    for m in messages.by_ref().take(1) {
        send.send(m)
            .await
            .expect("the call takes its first message");
    }
    let call = tokio::spawn({
        let mut c = c.clone();
        async move {
            c.evaluate_stream(tokio_stream::wrappers::ReceiverStream::new(parts))
                .await
        }
    });
    // None of this CPU is spent if the router waits for the stream's end.
    tokio::time::timeout(Duration::from_secs(60), async {
        while children_ticks(&router).saturating_sub(before) < (cost / 2).max(2) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!("the children evaluate the first part before the call has ended ({cost} ticks as a call of its own)")
    });
    assert!(!call.is_finished(), "the call waits for its last part");
    for m in messages {
        send.send(m).await.expect("the call takes its last message");
    }
    drop(send);
    let got = call
        .await
        .expect("the call task completes")
        .expect("evaluates")
        .into_inner();
    assert_eq!(decisions_only(got), decisions_only(whole));
}

/// `messages` sent as one `EvaluateStream`, which must be refused as `INVALID_ARGUMENT`: the
/// refusal's message.
async fn refused(
    c: &mut RouterClient<tonic::transport::Channel>,
    messages: Vec<EvaluateRequest>,
    what: &str,
) -> String {
    let e = c
        .evaluate_stream(futures::stream::iter(messages))
        .await
        .map(|_| ())
        .expect_err(what);
    assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
    e.message().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_call_is_refused_when_a_later_part_sets_terms_or_the_whole_breaks_a_limit() {
    let router = RouterProcess::spawn(&["--children", "1"]);
    let mut c = client(&router).await;
    let request = evaluate_request(&[&realistic()], 4);
    // No message at all.
    refused(&mut c, Vec::new(), "an empty stream").await;
    // A later message that sets the call's terms again: each field on its own.
    let later_sets: [fn(&mut EvaluateRequest); 6] = [
        |m| m.context = Some(context()),
        |m| m.configurations = vec![Configuration::text("{}")],
        |m| m.budget_ms = 10,
        |m| m.work_class = 3,
        |m| m.tenant = "someone-else".into(),
        |m| m.max_child_faults = 1,
    ];
    for set in later_sets {
        let mut messages = streamed(&request, &[2, 2]);
        set(&mut messages[1]);
        let message = refused(&mut c, messages, "a later message with terms").await;
        assert!(message.contains("deliveries only"), "{message}");
    }
    // The first message's terms are checked as Evaluate checks them.
    let mut none = streamed(&request, &[4]);
    none[0].configurations.clear();
    refused(&mut c, none, "no configuration").await;
    // A body over the limit in a later part, named by its index in the whole call.
    let mut big = streamed(&request, &[2, 2]);
    big[1].deliveries[1].body = bytes::Bytes::from(vec![
        b' ';
        switchboard_model::body::MAX_BODY_BYTES_CEILING
            + 1
    ]);
    let message = refused(&mut c, big, "a big body").await;
    assert!(message.contains("deliveries[3].body"), "{message}");
    // More deliveries than one call may carry, over the whole stream (small bodies).
    let mut many = evaluate_request(&["{}"], 1);
    let one = many.deliveries[0].clone();
    many.deliveries = vec![
        StoredDelivery {
            body: bytes::Bytes::from_static(b"{}"),
            ..one
        };
        switchboard_router::service::MAX_DELIVERIES_PER_CALL + 1
    ];
    let parts = streamed(&many, &[2_500, 2_500, 1]);
    let message = refused(&mut c, parts, "too many deliveries").await;
    assert!(
        message.contains("at most 5000 per call, got 5001"),
        "{message}"
    );
    // Still serving, streamed and not.
    let ok = c
        .evaluate_stream(futures::stream::iter(streamed(&request, &[1, 3])))
        .await
        .expect("evaluates")
        .into_inner();
    assert_eq!(ok.results.len(), 4);
    assert!(
        ok.results
            .iter()
            .all(|r| r.decisions[0].outcome != Outcome::Fault as i32)
    );
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
        configurations: vec![Configuration::text(json)],
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
    assert_eq!(decisions_only(ra), decisions_only(rb));
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
