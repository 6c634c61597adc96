//! The sandbox children: same decisions as in-process, budgets enforced from the parent,
//! children replaced when they overrun or die, and confinement required.

use std::time::Duration;

use proptest::prelude::*;
use switchboard_proto::router::v1::{Configuration, Outcome};
use switchboard_router::engine::decision::fault;
use switchboard_router::sandbox::{SandboxConfig, SandboxError, SandboxPool};

use crate::support::{binary, context, deliveries, in_process, own_children, pool};

/// A configuration in the style of the built-in packs, used across these tests.
pub const REALISTIC: &str = r#"{
  "rules": [
    {"id": "drop-unverified", "when": ".verified | not", "action": {"drop": true}},
    {"id": "drop-bots", "when": ".payload.sender.login as $l | any($params.bot_actors[]?; . == $l)", "action": {"drop": true}},
    {"id": "drop-ci", "when": ".event | test(\"^(check_run|check_suite|workflow_job|workflow_run|status)$\")", "action": {"drop": true}},
    {"id": "review", "when": ".kind | IN_KINDS", "action": {"queue": "review"}},
    {"id": "labels", "when": "(.payload.issue.labels // .payload.pull_request.labels // []) | map(.name) | index(\"bug\") != null", "action": {"queue": "triage"}},
    {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}},
    {"id": "untrusted", "when": ".actor.trusted | not", "action": {"quarantine": true}}
  ],
  "params": {"bot_actors": ["dependabot[bot]", "renovate[bot]"]}
}"#;

pub fn realistic() -> String {
    REALISTIC.replace(
        ".kind | IN_KINDS",
        r#"[.kind] | inside([\"pull_request.opened\", \"pull_request.synchronize\", \"pull_request.review_requested\"])"#,
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A configuration sent typed (what control sends) and as the previous release's JSON text
/// (what a control not yet upgraded sends) is one configuration to a router: the same
/// digest when validated, the same decision for every delivery, in one call side by side.
#[tokio::test(flavor = "multi_thread")]
async fn a_typed_configuration_and_its_previous_release_text_decide_alike() {
    let ctx = context();
    let json = realistic();
    let saved = switchboard_model::Configuration::from_json(&json).expect("a configuration");
    let typed = Configuration::from(&saved);
    assert!(typed.json.is_empty() && typed.rules.len() == saved.rules.len());
    let text = Configuration::text(json.clone());
    let pool = pool(2, Duration::from_millis(500)).await;
    let (by_type, by_text) = (
        pool.validate(&typed, &ctx).await.expect("validates"),
        pool.validate(&text, &ctx).await.expect("validates"),
    );
    assert!(by_type.valid, "{:?}", by_type.problems);
    assert_eq!(by_type.digest, saved.digest());
    assert_eq!(by_type, by_text);
    let ds = deliveries(150);
    let resp = pool
        .evaluate(&ctx, &[typed, text], &ds, None)
        .await
        .expect("evaluates");
    let expected = in_process(&json, &ctx, &ds);
    let labels: std::collections::BTreeSet<String> =
        expected.iter().map(|d| d.label().to_string()).collect();
    assert!(
        labels.len() >= 3,
        "the deliveries reach several labels: {labels:?}"
    );
    for (r, want) in resp.results.iter().zip(&expected) {
        assert_eq!(&r.decisions[0], want, "typed, {}", r.event_id);
        assert_eq!(&r.decisions[1], want, "text, {}", r.event_id);
    }
    // A typed action that names no action is the same configuration-wide problem a text
    // one is, named.
    let mut bad = Configuration::from(&saved);
    bad.rules[0].action = "default".into();
    let resp = pool.validate(&bad, &ctx).await.expect("validates");
    assert!(!resp.valid);
    assert_eq!(resp.problems[0].code, "invalid_configuration");
    assert!(
        resp.problems[0].message.contains("rules[0].action"),
        "{:?}",
        resp.problems
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_and_in_process_agree_on_real_payloads() {
    let ctx = context();
    let json = realistic();
    let ds = deliveries(150);
    let expected = in_process(&json, &ctx, &ds);
    let pool = pool(2, Duration::from_millis(500)).await;
    let resp = pool
        .evaluate(&ctx, &[Configuration::text(json.clone())], &ds, None)
        .await
        .expect("evaluates");
    assert_eq!(resp.results.len(), ds.len());
    for ((d, r), want) in ds.iter().zip(&resp.results).zip(&expected) {
        assert_eq!(r.event_id, d.event_id);
        assert_eq!(&r.decisions[0], want, "{} ({})", d.event_id, d.kind);
    }
    // The realistic configuration routes real payloads everywhere, and faults on none.
    let labels: std::collections::BTreeSet<String> =
        expected.iter().map(|d| d.label().to_string()).collect();
    assert!(!labels.contains("fault"), "{labels:?}");
    for want in ["drop", "queue:review", "queue:forge", "quarantine"] {
        assert!(labels.contains(want), "no {want} among {labels:?}");
    }
    // Counters count first matches per rule.
    let counters = &resp.counters[0];
    let total: u64 = counters.rules.iter().map(|r| r.first_matches).sum();
    let by_rule = expected.iter().filter(|d| !d.rule_id.is_empty()).count() as u64;
    assert_eq!(total, by_rule);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_configurations_see_the_same_envelope() {
    let ctx = context();
    let saved = realistic();
    let candidate = r#"{"rules":[{"id":"all","when":".event == \"issues\"","action":{"drop":true}}],"default_action":{"queue":"forge"}}"#;
    let ds = deliveries(60);
    let pool = pool(2, Duration::from_millis(500)).await;
    let configs = [
        Configuration::text(saved.clone()),
        Configuration::text(candidate),
    ];
    let resp = pool
        .evaluate(&ctx, &configs, &ds, None)
        .await
        .expect("evaluates");
    let want_saved = in_process(&saved, &ctx, &ds);
    let want_candidate = in_process(candidate, &ctx, &ds);
    for (i, r) in resp.results.iter().enumerate() {
        assert_eq!(r.decisions.len(), 2);
        assert_eq!(r.decisions[0], want_saved[i]);
        assert_eq!(r.decisions[1], want_candidate[i]);
        // Each unit's rules' time, per configuration: what control reads to tell a cheap
        // candidate from a costly one. Real (above zero), and far below the 500 ms budget.
        assert_eq!(r.unit_ns.len(), 2, "{r:?}");
        assert!(
            r.unit_ns.iter().all(|ns| (1..500_000_000).contains(ns)),
            "{r:?}"
        );
    }
    assert_eq!(resp.counters.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn budget_exceeded_faults_one_envelope_and_the_batch_completes() {
    let ctx = context();
    // Slow only for one delivery: an exponential value built from the payload.
    let slow = r#".delivery_id | endswith("000000000007") and ((. as $p | [$p,$p,$p,$p,$p,$p,$p,$p] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | tojson | length) > 0)"#;
    let json = serde_json::json!({"rules": [
        {"id": "slow", "when": slow, "action": {"drop": true}},
        {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}}
    ]})
    .to_string();
    let ds = deliveries(20);
    let pool = pool(1, Duration::from_millis(50)).await;
    let resp = pool
        .evaluate(&ctx, &[Configuration::text(json.clone())], &ds, None)
        .await
        .expect("evaluates");
    for (i, r) in resp.results.iter().enumerate() {
        let d = &r.decisions[0];
        if i == 7 {
            assert_eq!(d.outcome, Outcome::Fault as i32, "{d:?}");
            assert_eq!(
                r.unit_ns,
                [0],
                "a unit the router decided has no time of the child's"
            );
            assert!(
                d.fault_code == fault::BUDGET_EXCEEDED || d.fault_code == fault::SANDBOX_CRASHED,
                "{d:?}"
            );
            assert_eq!(d.rule_id, "slow", "the fault names the rule that ran");
        } else {
            assert_ne!(d.outcome, Outcome::Fault as i32, "delivery {i}: {d:?}");
        }
    }
    let stats = pool.stats();
    let replaced = stats
        .budget_exceeded
        .load(std::sync::atomic::Ordering::Relaxed)
        + stats.crashed.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(replaced, 1);
    // The replacement child serves the next batch as usual.
    let again = pool
        .evaluate(&ctx, &[Configuration::text(json)], &ds[..5], None)
        .await
        .expect("evaluates");
    assert!(
        again
            .results
            .iter()
            .all(|r| r.decisions[0].outcome != Outcome::Fault as i32)
    );
}

/// A child killed from outside (an operator, the OOM killer) did nothing wrong, and neither
/// did the unit it was running: nothing is blamed, and every envelope is answered exactly as
/// in-process, as if nothing had happened (issue 17: a death not of the unit's doing never
/// turns into a fault of the tenant's rules).
#[tokio::test(flavor = "multi_thread")]
async fn a_child_killed_from_outside_mid_batch_blames_nothing_and_every_envelope_is_answered() {
    let ctx = context();
    // Every envelope takes a few milliseconds, so the batch is still running when we kill.
    let busy = r#"(. as $p | [$p,$p,$p,$p] | [.,.,.,.] | [.,.,.,.] | tojson | length) < 0"#;
    let json = serde_json::json!({"rules": [
        {"id": "busy", "when": busy, "action": {"drop": true}},
        {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}}
    ]})
    .to_string();
    let ds = deliveries(200);
    let pool = pool(1, Duration::from_secs(5)).await;
    let run = {
        let pool = pool.clone();
        let ctx = ctx.clone();
        let ds = ds.clone();
        let json = json.clone();
        tokio::spawn(async move {
            pool.evaluate(&ctx, &[Configuration::text(json)], &ds, None)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let victims = pool.child_pids();
    assert_eq!(victims.len(), 1, "one child: {victims:?}");
    assert!(own_children().contains(&victims[0]), "the child is ours");
    let status = std::process::Command::new("kill")
        .args(["-KILL", &victims[0].to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    let resp = run.await.expect("joins").expect("evaluates");
    let want = in_process(&json, &ctx, &ds);
    for (i, (r, w)) in resp.results.iter().zip(&want).enumerate() {
        assert_eq!(&r.decisions[0], w, "delivery {i}");
    }
    let stats = pool.stats();
    assert_eq!(
        stats
            .lost_children
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the child was lost, not blamed"
    );
    assert_eq!(
        stats.crashed.load(std::sync::atomic::Ordering::Relaxed)
            + stats
                .budget_exceeded
                .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert!(
        !pool.child_pids().contains(&victims[0]),
        "a new child took over"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unconfined_child_is_refused_unless_allowed() {
    let mut config = SandboxConfig::new(binary());
    config.args.push("--no-confinement".into());
    match SandboxPool::start(config.clone()).await {
        Err(SandboxError::Unconfined(why)) => assert!(why.contains("seccomp: off"), "{why}"),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("an unconfined child must be refused"),
    }
    config.require_confinement = false;
    assert!(SandboxPool::start(config).await.is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_binary_is_a_clear_error() {
    let config = SandboxConfig::new("/nonexistent/switchboard".into());
    match SandboxPool::start(config).await {
        Err(SandboxError::Spawn(why)) => assert!(why.contains("/nonexistent/switchboard"), "{why}"),
        other => panic!("expected a spawn error, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn validation_in_the_sandbox_reports_every_problem() {
    let pool = pool(1, Duration::from_millis(50)).await;
    let json = serde_json::json!({"rules": [
        {"id": "ok", "when": ".event == \"issues\"", "action": {"queue": "forge"}},
        {"id": "env", "when": "env.DATABASE_URL != null", "action": {"drop": true}},
        {"id": "bad-parse", "when": ".a ==", "action": {"drop": true}},
        {"id": "deep", "when": "(".repeat(900) + &")".repeat(900), "action": {"drop": true}},
        {"id": "widen", "when": "true", "action": {"queue": "elsewhere"}}
    ]})
    .to_string();
    let resp = pool
        .validate(&Configuration::text(json.clone()), &context())
        .await
        .expect("validates");
    assert!(!resp.valid);
    let got: Vec<(String, String)> = resp
        .problems
        .iter()
        .map(|p| (p.rule_id.clone(), p.code.clone()))
        .collect();
    for want in [
        ("env", "forbidden_builtin"),
        ("bad-parse", "parse_error"),
        ("deep", "expression_too_deep"),
        ("widen", "not_granted"),
    ] {
        assert!(
            got.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} not in {got:?}"
        );
    }
    assert!(!got.iter().any(|(id, _)| id == "ok"));
}

/// Rule templates for generated configurations: each valid in the dialect.
const TEMPLATES: &[&str] = &[
    ".event == \"issues\"",
    ".verified",
    ".action == \"opened\"",
    ".payload.sender.login as $l | any($params.logins[]?; . == $l)",
    ".payload.sender.type == \"Bot\"",
    "(.payload.pull_request.labels // []) | length > 0",
    ".kind | startswith(\"pull_request\")",
    ".payload.repository.full_name | test(\"^[a-z]\")",
    ".headers[\"x-github-event\"] == \"push\"",
    ".payload.action",
    ".payload.number > 1",
    ".actor.trusted",
    "(.payload.issue.title // \"\") | ascii_downcase | contains(\"bug\")",
    "[.payload.commits[]?.id] | length >= 2",
    "error(\"nope\")",
];
const ACTIONS: &[&str] = &[
    r#"{"drop":true}"#,
    r#"{"queue":"forge"}"#,
    r#"{"queue":"review"}"#,
    r#"{"quarantine":true}"#,
    r#"{"queue":"nowhere"}"#,
];

fn generated(rules: &[(usize, usize)], default: Option<usize>) -> String {
    let rules: Vec<String> = rules
        .iter()
        .enumerate()
        .map(|(i, (t, a))| {
            format!(
                r#"{{"id":"r-{i}","when":{},"action":{}}}"#,
                serde_json::Value::String(TEMPLATES[*t].to_string()),
                ACTIONS[*a]
            )
        })
        .collect();
    let default = default
        .map(|a| format!(r#","default_action":{}"#, ACTIONS[a]))
        .unwrap_or_default();
    format!(
        r#"{{"rules":[{}]{default},"params":{{"logins":["Codertocat","octocat"]}}}}"#,
        rules.join(",")
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// In-process and sandbox-child evaluation give the same decisions on generated
    /// configurations over the real payloads.
    #[test]
    fn in_process_and_sandbox_agree_on_generated_configurations(
        rules in proptest::collection::vec((0..TEMPLATES.len(), 0..ACTIONS.len()), 1..8),
        default in proptest::option::of(0..ACTIONS.len()),
        capability in any::<bool>(),
    ) {
        let rt = runtime();
        let json = generated(&rules, default);
        let mut ctx = context();
        ctx.trusted_actors_capability = capability;
        let ds = deliveries(90);
        let want = in_process(&json, &ctx, &ds);
        let got = rt.block_on(async {
            let pool = pool(2, Duration::from_secs(2)).await;
            pool.evaluate(&ctx, &[Configuration::text(json.clone())], &ds, None).await
        }).expect("evaluates");
        for (r, w) in got.results.iter().zip(&want) {
            prop_assert_eq!(&r.decisions[0], w);
        }
    }
}
