//! Pipelining in the sandbox pool: a child holds the next request in its pipe while it runs
//! the current one, and the pool's children are shared by every call. Blame still lands on
//! the exact unit of the exact request, the answers a failed child gave are kept, what it
//! left undone (of its own call or another) runs elsewhere, and every call gets exactly its
//! own decisions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use switchboard_proto::router::v1::{
    Configuration, Decision, EvaluateResponse, Outcome, RoutingContext, StoredDelivery,
};
use switchboard_router::engine::decision::fault;
use switchboard_router::sandbox::{SandboxConfig, SandboxPool};

use crate::router_sandbox::realistic;
use crate::support::in_process;
use crate::support::{binary, context, deliveries, own_children};

/// Grows without bound: runs past any budget, or dies on the address-space limit.
const SLOW: &str = r#"((. as $p | [$p,$p,$p,$p,$p,$p,$p,$p] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | tojson | length) > 0)"#;
/// Asks for a gigabyte at once: the child dies on its address-space limit (or overruns
/// filling it).
const CRASH: &str = r#"(("x" * 1000000000) | length > 0)"#;

/// A pool of `children` slots and no spare children, so the tests below count exactly the
/// children their work started (spares have tests of their own).
async fn pool_with(children: usize, budget: Duration, max_chunk: usize) -> Arc<SandboxPool> {
    let mut config = SandboxConfig::new(binary());
    config.children = children;
    config.budget = budget;
    config.max_chunk = max_chunk;
    config.spares = 0;
    SandboxPool::start(config)
        .await
        .expect("sandbox pool starts")
}

/// One call of its own on the shared pool: the deliveries it sent and what it got back.
fn spawn_call(
    pool: &Arc<SandboxPool>,
    ctx: &RoutingContext,
    json: String,
    ds: Vec<StoredDelivery>,
) -> tokio::task::JoinHandle<(Vec<StoredDelivery>, EvaluateResponse)> {
    let (pool, ctx) = (pool.clone(), ctx.clone());
    tokio::spawn(async move {
        let got = pool
            .evaluate(&ctx, &[Configuration::text(json)], &ds, None)
            .await
            .expect("evaluates");
        (ds, got)
    })
}

/// The victim's decision: faulted by the sandbox (overrun or crash), naming the rule that
/// was running (`bad-<tag>`, see [`with_bad_rule`]).
fn assert_sandbox_fault(d: &Decision, tag: &str, what: &str) {
    assert!(is_fault(d), "{what}: {d:?}");
    assert!(
        d.fault_code == fault::BUDGET_EXCEEDED || d.fault_code == fault::SANDBOX_CRASHED,
        "{what}: {d:?}"
    );
    assert_eq!(
        d.rule_id,
        format!("bad-{tag}"),
        "{what}: the fault names its rule"
    );
}

/// The realistic configuration with `bad` (on the delivery numbered `victim` only) as its
/// first rule, and every rule id marked with `tag` so decisions tell calls apart.
fn with_bad_rule(tag: &str, bad: Option<(&str, usize)>) -> String {
    let mut config: serde_json::Value =
        serde_json::from_str(&realistic()).expect("realistic configuration is JSON");
    if let Some(rules) = config["rules"].as_array_mut() {
        for rule in rules.iter_mut() {
            let id = rule["id"].as_str().unwrap_or_default().to_string();
            rule["id"] = format!("{id}-{tag}").into();
        }
        if let Some((expr, victim)) = bad {
            rules.insert(
                0,
                serde_json::json!({
                    "id": format!("bad-{tag}"),
                    "when": format!("(.delivery_id | endswith(\"{victim:012}\")) and {expr}"),
                    "action": {"drop": true}
                }),
            );
        }
    }
    config.to_string()
}

fn replaced(pool: &SandboxPool) -> u64 {
    pool.stats().budget_exceeded.load(Ordering::Relaxed)
        + pool.stats().crashed.load(Ordering::Relaxed)
}

fn is_fault(d: &Decision) -> bool {
    d.outcome == Outcome::Fault as i32
}

/// Two requests in one child's pipe (one child, chunks of 20, 40 deliveries, two
/// configurations): a unit that overruns or crashes the child in the first or the second
/// request faults exactly that unit; every other unit of both requests is decided as
/// in-process.
#[tokio::test(flavor = "multi_thread")]
async fn a_failure_in_either_pipelined_request_blames_exactly_its_unit() {
    let ctx = context();
    let ds = deliveries(40);
    let other = r#"{"rules":[{"id":"issues","when":".event == \"issues\"","action":{"queue":"forge"}}],"default_action":{"drop":true}}"#;
    let want_other = in_process(other, &ctx, &ds);
    for (name, expr, victim) in [
        ("overrun in the second request", SLOW, 27),
        ("crash in the second request", CRASH, 33),
        ("overrun in the first request", SLOW, 7),
        ("crash in the first request", CRASH, 12),
    ] {
        let pool = pool_with(1, Duration::from_millis(200), 20).await;
        let json = with_bad_rule("p", Some((expr, victim)));
        // The bad rule matches nothing but the victim, and never answers there.
        let want = in_process(&with_bad_rule("p", None), &ctx, &ds);
        let resp = pool
            .evaluate(
                &ctx,
                &[
                    Configuration::text(json.clone()),
                    Configuration::text(other),
                ],
                &ds,
                None,
            )
            .await
            .expect("evaluates");
        assert_eq!(resp.results.len(), ds.len(), "{name}");
        for (i, r) in resp.results.iter().enumerate() {
            assert_eq!(r.event_id, ds[i].event_id, "{name}");
            assert_eq!(
                r.decisions[1], want_other[i],
                "{name}: delivery {i}, second configuration"
            );
            let d = &r.decisions[0];
            if i == victim {
                assert_sandbox_fault(d, "p", &format!("{name}: delivery {i}"));
            } else {
                assert!(!is_fault(d), "{name}: delivery {i}: {d:?}");
                assert_eq!(d.queue, want[i].queue, "{name}: delivery {i}");
                assert_eq!(d.outcome, want[i].outcome, "{name}: delivery {i}");
                assert_eq!(d.rule_id, want[i].rule_id, "{name}: delivery {i}");
            }
        }
        assert_eq!(replaced(&pool), 1, "{name}: one child replaced");
        assert_eq!(
            pool.child_pids().len(),
            1,
            "{name}: {:?}",
            pool.child_pids()
        );
    }
}

/// Many calls at once over two children, chunks of 8: each call gets exactly its own
/// decisions (its own rule ids, its own deliveries, in its own order), validations running
/// in between get their child too, and no more children run than the pool has slots.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_calls_over_two_children_each_get_their_own_decisions() {
    let ctx = context();
    let pool = pool_with(2, Duration::from_secs(2), 8).await;
    let all = deliveries(120);
    let (mut calls, mut validations) = (Vec::new(), Vec::new());
    for call in 0..12usize {
        let json = with_bad_rule(&format!("c{call}"), None);
        let ds: Vec<StoredDelivery> = all[call * 5..call * 5 + 9 + call * 4].to_vec();
        let want = in_process(&json, &ctx, &ds);
        calls.push((call, want, spawn_call(&pool, &ctx, json, ds)));
        if call % 4 == 1 {
            let (p, c) = (pool.clone(), ctx.clone());
            validations.push(tokio::spawn(async move {
                let v = p
                    .validate(&Configuration::text(realistic()), &c)
                    .await
                    .expect("validates");
                assert!(v.valid, "{:?}", v.problems);
            }));
        }
    }
    for v in validations {
        v.await.expect("a validation");
    }
    let mut seen = BTreeMap::new();
    for (call, want, handle) in calls {
        let (ds, got) = handle.await.expect("joins");
        assert_eq!(got.results.len(), ds.len(), "call {call}");
        for ((d, r), w) in ds.iter().zip(&got.results).zip(&want) {
            assert_eq!(r.event_id, d.event_id, "call {call}");
            assert_eq!(&r.decisions[0], w, "call {call}, {}", d.event_id);
            assert!(
                r.decisions[0].rule_id.is_empty()
                    || r.decisions[0].rule_id.ends_with(&format!("-c{call}")),
                "call {call}: {:?}",
                r.decisions[0]
            );
        }
        seen.insert(call, got.results.len());
    }
    assert_eq!(seen.len(), 12);
    assert_eq!(replaced(&pool), 0);
    assert!(pool.child_pids().len() <= 2, "{:?}", pool.child_pids());
}

/// A call whose unit overruns while other calls share the children: the failed child's
/// request queued behind the bad one (perhaps another call's) runs on another child, and
/// only the bad unit faults.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_child_hands_other_calls_requests_on_untouched() {
    let ctx = context();
    let pool = pool_with(2, Duration::from_millis(300), 8).await;
    let all = deliveries(90);
    let mut calls = Vec::new();
    for call in 0..6usize {
        let ds: Vec<StoredDelivery> = all[call * 15..call * 15 + 15].to_vec();
        // Call 2's third delivery (numbered 32) overruns.
        let bad = (call == 2).then_some((SLOW, 32));
        let json = with_bad_rule(&format!("c{call}"), bad);
        let want = in_process(&with_bad_rule(&format!("c{call}"), None), &ctx, &ds);
        calls.push((call, want, spawn_call(&pool, &ctx, json, ds)));
    }
    for (call, want, handle) in calls {
        let (ds, got) = handle.await.expect("joins");
        for ((d, r), w) in ds.iter().zip(&got.results).zip(&want) {
            let got = &r.decisions[0];
            if d.event_id == "ev-32" {
                assert_sandbox_fault(got, "c2", &format!("call {call}, {}", d.event_id));
            } else {
                assert!(!is_fault(got), "call {call}, {}: {got:?}", d.event_id);
                assert_eq!(got.rule_id, w.rule_id, "call {call}, {}", d.event_id);
                assert_eq!(got.queue, w.queue, "call {call}, {}", d.event_id);
            }
        }
    }
    assert_eq!(replaced(&pool), 1);
    // The pool goes on serving.
    let again = pool
        .evaluate(&ctx, &[Configuration::text(realistic())], &all[..20], None)
        .await
        .expect("evaluates");
    assert!(again.results.iter().all(|r| !is_fault(&r.decisions[0])));
}

/// A child that exits on its own while idle is replaced, not blamed.
#[tokio::test(flavor = "multi_thread")]
async fn a_child_that_exits_between_jobs_is_replaced_without_blame() {
    let ctx = context();
    let pool = pool_with(1, Duration::from_secs(2), 16).await;
    let ds = deliveries(30);
    let json = realistic();
    pool.evaluate(&ctx, &[Configuration::text(json.clone())], &ds, None)
        .await
        .expect("evaluates");
    let pids = pool.child_pids();
    assert_eq!(pids.len(), 1);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pids[0].to_string()])
        .status();
    assert!(killed.is_ok_and(|s| s.success()));
    // Give the kernel a moment to make it a zombie.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resp = pool
        .evaluate(&ctx, &[Configuration::text(json.clone())], &ds, None)
        .await
        .expect("evaluates");
    let want = in_process(&json, &ctx, &ds);
    for (r, w) in resp.results.iter().zip(&want) {
        assert_eq!(&r.decisions[0], w);
    }
    assert_eq!(replaced(&pool), 0);
    let now = pool.child_pids();
    assert_eq!(now.len(), 1);
    assert_ne!(now[0], pids[0]);
}

fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // A zombie ("Z") has exited; the runtime reaps it in its own time.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Dropping the pool (the router's graceful shutdown) hangs nothing and stops its children.
#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_pool_stops_its_children() {
    let ctx = context();
    let pool = pool_with(2, Duration::from_secs(2), 16).await;
    let ds = deliveries(64);
    pool.evaluate(&ctx, &[Configuration::text(realistic())], &ds, None)
        .await
        .expect("evaluates");
    let pids = pool.child_pids();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(pids.iter().all(|p| own_children().contains(p)));
    // A call still running when the pool goes: its caller gives up, and nothing waits on it.
    let running = {
        let pool = pool.clone();
        let (ctx, ds) = (ctx.clone(), ds.clone());
        tokio::spawn(async move {
            pool.evaluate(&ctx, &[Configuration::text(realistic())], &ds, None)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    running.abort();
    let _ = running.await;
    drop(pool);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|p| gone(*p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "children still running: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A call whose deliveries arrive in parts (the router's `EvaluateStream`): children are at
/// work on the first part before the second exists, and the answer is the whole call's, in
/// order, decided as in-process evaluation decides.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_in_parts_is_evaluated_as_its_parts_arrive() {
    let pool = pool_with(2, Duration::from_secs(5), 16).await;
    let ctx = context();
    let json = realistic();
    let all = deliveries(90);
    let configurations = [Configuration::text(json.clone())];
    let mut evaluation = pool.begin(&ctx, &configurations, &Default::default());
    evaluation.push(&all[..40]).expect("queued");
    // The first part is answered while the call is still open.
    let done = pool.stats().units.load(Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(60), async {
        while pool.stats().units.load(Ordering::Relaxed) < done + 40 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the children evaluate the first part before the call ends");
    assert_eq!(evaluation.deliveries(), 40);
    evaluation.push(&[]).expect("an empty part is nothing");
    evaluation.push(&all[40..]).expect("queued");
    let got = evaluation.finish().await.expect("evaluates");
    let want = in_process(&json, &ctx, &all);
    assert_eq!(got.results.len(), all.len());
    for ((r, d), w) in got.results.iter().zip(&all).zip(&want) {
        assert_eq!(r.event_id, d.event_id);
        assert_eq!(r.decisions, vec![w.clone()], "{}", d.event_id);
    }
    let whole = pool
        .evaluate(&ctx, &configurations, &all, Some(Duration::from_secs(5)))
        .await
        .expect("evaluates");
    assert_eq!(
        crate::support::decisions_only(got),
        crate::support::decisions_only(whole),
        "the same call in one part"
    );
}

/// A pool keeps what it parsed of each configuration (its rules' ids, its digest) between
/// calls: a call with another configuration, or a configuration that does not parse, still
/// gets exactly its own counters and fault names.
#[tokio::test(flavor = "multi_thread")]
async fn each_call_counts_its_own_configuration_when_the_pool_has_seen_others() {
    let pool = pool_with(1, Duration::from_secs(5), 16).await;
    let ctx = context();
    let ds = deliveries(6);
    let config = |id: &str, when: &str| {
        Configuration::text(format!(
            r#"{{"rules":[{{"id":"{id}","when":"{when}","action":{{"drop":true}}}}]}}"#
        ))
    };
    let a = config("all", "true");
    let b = config("none", "false");
    let bad = Configuration::text("{not json");
    let faulting = Configuration::text(
        r#"{"rules":[{"id":"boom","when":"error(\"boom\")","action":{"drop":true}}]}"#,
    );
    for c in [&a, &b, &a, &bad, &faulting, &b] {
        let got = pool
            .evaluate(&ctx, std::slice::from_ref(c), &ds, None)
            .await
            .expect("evaluates");
        let counters = &got.counters[0];
        match switchboard_model::Configuration::from_json(&c.json) {
            Ok(parsed) => {
                assert_eq!(counters.digest, parsed.digest(), "{}", c.json);
                let id = parsed.rules[0].id.clone().unwrap_or_default();
                assert_eq!(counters.rules.len(), 1);
                assert_eq!(counters.rules[0].rule_id, id);
                let (matched, faults) = match id.as_str() {
                    "all" => (6, 0),
                    "boom" => (0, 6),
                    _ => (0, 0),
                };
                assert_eq!(counters.rules[0].first_matches, matched, "{}", c.json);
                assert_eq!(counters.rules[0].faults, faults, "{}", c.json);
                if id == "boom" {
                    assert!(got.results.iter().all(|r| r.decisions[0].rule_id == "boom"));
                }
            }
            Err(_) => {
                assert_eq!(counters.digest, "", "{}", c.json);
                assert!(got.results.iter().all(|r| is_fault(&r.decisions[0])));
            }
        }
    }
}
