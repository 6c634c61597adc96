//! Scale, end to end (issue 7): several `switchboard router` processes behind one control, a
//! router killed in the middle of a replay, every router stopped while ingest goes on, and two
//! `switchboard control` processes sharing one database. Every process is the real binary
//! and is killed when its guard drops, also when a test fails. Each test runs on SQLite and,
//! when `SWITCHBOARD_TEST_DATABASE_URL` is set, on PostgreSQL (the two-control tests are the
//! ones issue 7 requires on PostgreSQL; on SQLite the two processes share one file).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use switchboard_control::ingest::RetryOptions;
use switchboard_control::store::{NewEvent, Page, SourceType, Webhook};
use switchboard_control::{OwnerScope, Store};
use switchboard_proto::control::v1::{
    InstallRulePackRequest, ReplayWindow, TestReplay, TestWebhookRulesRequest, rule_pack_event,
};
use tonic::{Code, Status};
use tonic_types::StatusExt;

use crate::control_harness::{
    Control, ControlSetup, TestDb, eventually, on_every_backend, router_on, signed, webhook,
};
use crate::ingest::{alices_routed_github_webhook, decision_for, events_of, router, todos};
use crate::pack_api::{Api, owner};
use crate::rule_packs::{ALL, ControlProcess, confirm_req, plan_req};
use crate::support::{RouterProcess, payloads, tree_cpu_ticks};

on_every_backend! {
    a_replay_over_three_routers_reports_what_one_router_reports,
    a_router_killed_mid_replay_still_completes_the_same_report,
    a_router_killed_at_any_point_of_a_replay_leaves_the_plan_as_one_router_makes_it,
    with_every_router_stopped_ingest_stores_then_routes_when_one_returns,
    fifty_concurrent_confirms_across_two_controls_succeed_once,
    two_replays_of_one_webhook_at_once_one_answers_busy,
}

/// Deliveries in the replay window of the router tests: the most a replay may read (REQ-4).
const REPLAYED: usize = 1000;

/// The pack every plan here installs: it turns some of the saved configuration's queue and
/// default decisions into drops, so the report has transitions, rule counts and totals to
/// compare, not only zeros.
const PACK: &str = "drop-ci-noise";

/// A rule that never matches and never faults but costs a millisecond or so per envelope
/// (it sorts the characters of the payload's JSON text), so a 1,000-delivery replay keeps
/// every router busy for a while: long enough to kill one mid-replay, to see each router's
/// share of the work in its CPU time, and to observe a replay's lease while it is held.
const COSTLY_RULE: &str = "(.payload | tojson | split(\"\") | sort | length) < 0";

/// Per-envelope budget control asks of the routers in the replay tests, instead of the 50 ms
/// default. The costly rule takes about a millisecond of CPU, but the routers here share two
/// cores with each other, control and whatever else runs; a unit preempted past 50 ms of wall
/// time would fault `budget_exceeded`, and the reports under comparison would then differ by
/// scheduling, not by routing.
const BUDGET_MS: &str = "2000";

/// Environment of the control processes in the replay tests: the budget above, and a router
/// call timeout above any chunk's run time on a loaded machine (a timeout would be retried
/// elsewhere and only cost time, but it is not what these tests are about).
const REPLAY_CONTROL_ENV: &[(&str, &str)] = &[
    ("SWITCHBOARD_EVALUATION_BUDGET_MS", BUDGET_MS),
    ("SWITCHBOARD_ROUTER_TIMEOUT_MS", "30000"),
];

/// A router for the replay tests: one sandbox child (so its share of a replay runs in
/// sequence and is still running when it is killed), held to the same budget as control asks.
fn replay_router() -> RouterProcess {
    RouterProcess::spawn(&["--children", "1", "--budget-ms", BUDGET_MS])
}

/// The saved configuration of the replay tests' webhook.
fn saved_configuration() -> Value {
    json!({"rules": [
        {"id": "prs", "when": ".event == \"pull_request\"", "action": {"queue": "review"}},
        {"id": "pings", "when": ".event == \"ping\"", "action": {"drop": true}},
        {"id": "unverified-issues", "when": ".event == \"issues\" and (.verified | not)", "action": {"queue": "triage"}},
        {"id": "costly", "when": COSTLY_RULE, "action": {"drop": true}}
    ], "params": {}})
}

/// Stores `count` real payloads (every forge's files, in turn; every fifth unverified) as
/// deliveries of `hook`, as ingest would have: the forge's headers, the body byte for byte,
/// the kind ingest computes.
pub(crate) async fn store_deliveries(store: &Store, hook: &Webhook, count: usize) {
    let stored = futures::stream::iter(crate::support::deliveries(count).into_iter().map(|d| {
        let store = store.clone();
        let webhook_id = hook.id.clone();
        async move {
            store
                .insert_event(NewEvent {
                    webhook_id,
                    delivery_id: d.delivery_id,
                    kind: d.kind,
                    headers: d.headers.into_iter().map(|h| (h.name, h.value)).collect(),
                    body: d.body.clone(),
                    verified: d.verified,
                })
                .await
                .expect("store a delivery")
        }
    }))
    .buffer_unordered(8)
    .count()
    .await;
    assert_eq!(stored, count);
}

/// An owner with an endpoint allowed every webhook verb, and a GitHub webhook of theirs with
/// the saved configuration and `count` stored deliveries.
async fn seeded(store: &Store, count: usize) -> (OwnerScope, String, Webhook) {
    let (scope, credential) = owner(store, "alice", ALL).await;
    let hook = webhook(
        store,
        &scope,
        SourceType::Github,
        Some(saved_configuration()),
    )
    .await;
    store_deliveries(store, &hook, count).await;
    (scope, credential, hook)
}

/// A plan of `PACK` over the most recent `REPLAYED` deliveries.
fn replay_plan_req(hook: &Webhook) -> InstallRulePackRequest {
    InstallRulePackRequest {
        replay: Some(ReplayWindow {
            limit: REPLAYED as u32,
            ..Default::default()
        }),
        ..plan_req(hook, PACK)
    }
}

/// A plan, minus what differs between two plans of one candidate over the same stored
/// deliveries whatever routed them, and nothing else:
/// - `plan_token`: a fresh random secret for every plan;
/// - `expires_at`: the time the plan was made, plus 15 minutes;
/// - `confirm_with.note`: prose for the caller that quotes `expires_at`.
///
/// Everything else — `events_replayed`, the window, the totals, `changed`, the transitions
/// with their example event ids, the per-rule counts, `todos_per_day`, the fixtures, the rule
/// and param diffs, `proven`, `truncated`, `confirm_with.tool` and `arguments` — must be equal.
/// A plan carries no plan id and no timing. Each dropped key must be there, so a renamed
/// field cannot silently widen what is compared less.
fn comparable(plan: &Value) -> Value {
    let mut p = plan.clone();
    let o = p.as_object_mut().expect("a plan is an object");
    for key in ["plan_token", "expires_at"] {
        assert!(o.remove(key).is_some(), "the plan has no {key}: {plan}");
    }
    let confirm = o
        .get_mut("confirm_with")
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("the plan has no confirm_with: {plan}"));
    assert!(confirm.remove("note").is_some(), "no confirm_with.note");
    // The age bound moves with the clock between two plans.
    let retention = o
        .get_mut("retention")
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("the plan has no retention: {plan}"));
    assert!(
        retention.remove("kept_since").is_some(),
        "no retention.kept_since"
    );
    p
}

/// What any correct plan over the seeded webhook reports, whoever routed it.
fn check_plan(plan: &Value) {
    assert_eq!(plan["kind"], "install", "{plan}");
    assert_eq!(plan["events_replayed"], REPLAYED as u64, "{plan}");
    assert_eq!(plan["truncated"], false, "{plan}");
    assert_eq!(plan["proven"], true, "{plan}");
    for side in ["before", "after"] {
        let totals = plan["totals"][side].as_object().expect("totals");
        let sum: u64 = totals.values().filter_map(Value::as_u64).sum();
        assert_eq!(sum, REPLAYED as u64, "{side}: {totals:?}");
        assert!(
            !totals.contains_key("fault"),
            "no envelope faults (a budget fault would make reports differ by scheduling): {plan}"
        );
    }
    assert!(plan["changed"].as_u64().unwrap_or(0) > 0, "{plan}");
    assert!(
        !plan["transitions"]
            .as_array()
            .expect("transitions")
            .is_empty(),
        "{plan}"
    );
    assert!(plan["plan_token"].as_str().is_some_and(|t| !t.is_empty()));
}

/// `--routers` for these routers.
fn router_list(routers: &[RouterProcess]) -> String {
    routers
        .iter()
        .map(|r| r.addr.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The replay plan made by a control process of its own routing through `router` alone:
/// the reference report.
async fn plan_through_one_router(
    url: &str,
    router: &RouterProcess,
    credential: &str,
    hook: &Webhook,
) -> Value {
    let control = ControlProcess::spawn(url, &router.addr, REPLAY_CONTROL_ENV);
    let api = Api::connect(control.grpc.parse().expect("addr"), credential).await;
    api.install(replay_plan_req(hook))
        .await
        .expect("the plan with one router")
}

/// CPU ticks below this are what starting, validating and fixture routing cost a router;
/// a router that did part of a 1,000-delivery replay of the costly rule used far more.
const REPLAY_SHARE_TICKS: u64 = 10;

async fn a_replay_over_three_routers_reports_what_one_router_reports(db: TestDb) {
    let routers = [replay_router(), replay_router(), replay_router()];
    let (_, credential, hook) = seeded(&db.store, REPLAYED).await;

    let started = Instant::now();
    let one = { plan_through_one_router(&db.url, &routers[0], &credential, &hook).await };
    let one_router = started.elapsed();
    check_plan(&one);

    let control = ControlProcess::spawn(&db.url, &router_list(&routers), REPLAY_CONTROL_ENV);
    let api = Api::connect(control.grpc.parse().expect("addr"), &credential).await;
    let before: Vec<u64> = routers
        .iter()
        .map(|r| tree_cpu_ticks(r.child.id()))
        .collect();
    let started = Instant::now();
    let three = api
        .install(replay_plan_req(&hook))
        .await
        .expect("the plan with three routers");
    let three_routers = started.elapsed();
    let used: Vec<u64> = routers
        .iter()
        .zip(&before)
        .map(|(r, b)| tree_cpu_ticks(r.child.id()).saturating_sub(*b))
        .collect();
    eprintln!(
        "1,000-delivery plan: one router {one_router:?}, three routers {three_routers:?}; \
         CPU ticks per router with three: {used:?}"
    );
    check_plan(&three);
    // Control spread the replay's chunks over every router, not only the first.
    for (r, ticks) in routers.iter().zip(&used) {
        assert!(
            *ticks >= REPLAY_SHARE_TICKS,
            "router {} did no share of the replay: {used:?} ticks",
            r.addr
        );
    }
    assert_ne!(one["plan_token"], three["plan_token"]);
    assert_eq!(comparable(&one), comparable(&three));
}

/// What a streamed plan call ended with, and when.
struct Finished {
    at: Instant,
    result: Result<Value, Status>,
    /// The progress reports seen before the result: (replayed, total).
    progress: Vec<(u64, u64)>,
}

/// Reads a rule-pack stream to its end in a task of its own.
fn read_plan_stream(
    mut stream: tonic::Streaming<switchboard_proto::control::v1::RulePackEvent>,
) -> tokio::task::JoinHandle<Finished> {
    tokio::spawn(async move {
        let mut progress = Vec::new();
        loop {
            let result = match stream.message().await {
                Ok(Some(ev)) => match ev.event {
                    Some(rule_pack_event::Event::Progress(p)) => {
                        progress.push((p.replayed, p.total));
                        continue;
                    }
                    Some(event) => match crate::support::typed::pack_event(&event) {
                        Some(json) => Ok(json),
                        None => continue,
                    },
                    None => continue,
                },
                Ok(None) => Err(Status::internal("the stream ended without a result")),
                Err(status) => Err(status),
            };
            return Finished {
                at: Instant::now(),
                result,
                progress,
            };
        }
    })
}

async fn a_router_killed_mid_replay_still_completes_the_same_report(db: TestDb) {
    let (_, credential, hook) = seeded(&db.store, REPLAYED).await;
    let mut routers = [replay_router(), replay_router(), replay_router()];

    // The reference: the same plan through one router.
    let reference = { plan_through_one_router(&db.url, &routers[0], &credential, &hook).await };
    check_plan(&reference);

    let control = ControlProcess::spawn(&db.url, &router_list(&routers), REPLAY_CONTROL_ENV);
    let api = Api::connect(control.grpc.parse().expect("addr"), &credential).await;
    let victim = 1;
    let victim_addr = routers[victim].addr.clone();
    let victim_pid = routers[victim].child.id();
    let baseline = tree_cpu_ticks(victim_pid);
    let started = Instant::now();
    let stream = api
        .packs()
        .install_rule_pack(replay_plan_req(&hook))
        .await
        .expect("the plan starts")
        .into_inner();
    let reader = read_plan_stream(stream);

    // Killed once its sandbox child is seen working on its share of the replay (which, with
    // one child, runs chunk after chunk: the rest of its share is still queued behind it).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            !reader.is_finished(),
            "the plan ended before router {victim_addr} was seen working on the replay"
        );
        assert!(
            Instant::now() < deadline,
            "router {victim_addr} never worked on the replay"
        );
        if tree_cpu_ticks(victim_pid).saturating_sub(baseline) >= REPLAY_SHARE_TICKS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let in_flight = !reader.is_finished();
    let used = tree_cpu_ticks(victim_pid).saturating_sub(baseline);
    routers[victim].child.kill().expect("SIGKILL the router");
    let killed_at = Instant::now();
    let status = routers[victim].child.wait().expect("the router is reaped");
    assert!(in_flight, "the plan ended before the kill");
    eprintln!(
        "router {victim_addr} killed ({status}) after {used} ticks of replay work, \
         {:?} after the plan started",
        killed_at - started
    );

    let finished = reader.await.expect("the reader");
    assert!(
        finished.at > killed_at,
        "the plan returned before the router was killed"
    );
    let plan = finished
        .result
        .unwrap_or_else(|e| panic!("the plan failed after a router was killed: {e:?}"));
    check_plan(&plan);
    assert_eq!(comparable(&plan), comparable(&reference));
    if let Some(&(replayed, total)) = finished.progress.last() {
        assert_eq!((replayed, total), (REPLAYED as u64, REPLAYED as u64));
    }
    // Control saw the dead router fail a call, ejected it and took the call elsewhere.
    let retried: Vec<Value> = control
        .logged("WARN")
        .into_iter()
        .filter(|l| {
            l["fields"]["router"] == victim_addr.as_str()
                && l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("router ejected"))
        })
        .collect();
    assert!(
        !retried.is_empty(),
        "no call to the killed router {victim_addr} was retried; warnings: {:?}",
        control.logged("WARN")
    );
}

/// Issue 17: a router's death is invisible in results. The plan is made through two routers,
/// one of them killed at another point of the replay each time (as the plan starts, while its
/// children work, late, and after the plan has ended), with three routers' children and
/// control sharing two cores. Each time the plan must equal the one made through one router:
/// no unit of the dead router turns into a fault. The budget is the replay tests' (the costly
/// rule's own CPU time on the biggest payloads comes near 50 ms on a loaded machine, and a
/// fault of its own would differ between runs for reasons that are not the router's death).
async fn a_router_killed_at_any_point_of_a_replay_leaves_the_plan_as_one_router_makes_it(
    db: TestDb,
) {
    const DELIVERIES: usize = 600;
    const ENV: &[(&str, &str)] = REPLAY_CONTROL_ENV;
    let (_, credential, hook) = seeded(&db.store, DELIVERIES).await;
    let req = || InstallRulePackRequest {
        replay: Some(ReplayWindow {
            limit: DELIVERIES as u32,
            ..Default::default()
        }),
        ..plan_req(&hook, PACK)
    };
    let survivor = replay_router();
    let reference = {
        let control = ControlProcess::spawn(&db.url, &survivor.addr, ENV);
        let api = Api::connect(control.grpc.parse().expect("addr"), &credential).await;
        api.install(req())
            .await
            .expect("the plan through one router")
    };
    assert_eq!(reference["events_replayed"], DELIVERIES as u64);
    assert!(
        !reference["totals"]["before"]
            .as_object()
            .is_some_and(|t| t.contains_key("fault")),
        "{reference}"
    );
    for kill_after_ms in [0u64, 80, 250, 600, 5_000] {
        let mut victim = replay_router();
        let routers = format!("{},{}", survivor.addr, victim.addr);
        let control = ControlProcess::spawn(&db.url, &routers, ENV);
        let api = Api::connect(control.grpc.parse().expect("addr"), &credential).await;
        let stream = api
            .packs()
            .install_rule_pack(req())
            .await
            .expect("the plan starts")
            .into_inner();
        let reader = read_plan_stream(stream);
        let until = Instant::now() + Duration::from_millis(kill_after_ms);
        while Instant::now() < until && !reader.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let in_flight = !reader.is_finished();
        victim.child.kill().expect("SIGKILL the router");
        let _ = victim.child.wait();
        let plan = reader
            .await
            .expect("the reader")
            .result
            .unwrap_or_else(|e| panic!("killed after {kill_after_ms} ms: the plan failed: {e:?}"));
        eprintln!("router killed {kill_after_ms} ms into the plan (in flight: {in_flight})");
        assert_eq!(
            comparable(&plan),
            comparable(&reference),
            "killed {kill_after_ms} ms into the plan (in flight: {in_flight})"
        );
    }
}

/// Waits for `router` to exit, at most `within`, without blocking a runtime worker: control
/// runs in this runtime, and its connection to the router must keep being served for the
/// router's graceful drain to finish (`RouterProcess::wait_exit` sleeps the thread).
async fn exit_of(router: &mut RouterProcess, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = router.child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn with_every_router_stopped_ingest_stores_then_routes_when_one_returns(db: TestDb) {
    let mut routers = [router(), router(), router()];
    let addrs: Vec<String> = routers.iter().map(|r| r.addr.clone()).collect();
    let list: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let setup = ControlSetup {
        retry: Some(RetryOptions {
            interval: Duration::from_millis(100),
            min_age: Duration::ZERO,
            batch: 100,
        }),
        ..ControlSetup::default()
    };
    let control = Control::start(&db.store, &list, setup).await;
    let (scope, hook) = alices_routed_github_webhook(&db.store).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    let deliver = |n: usize| {
        let p = &github[n % github.len()];
        let headers = signed(
            "github",
            &p.event,
            &format!("outage-{n}"),
            &hook.secret,
            &p.body,
        );
        let (control, id, body) = (&control, hook.id.clone(), p.body.clone());
        async move { control.deliver(&id, &headers, &body).await }
    };
    // What `routing_config` decides, as queue → todos.
    let queue_of = |n: usize| match github[n % github.len()].event.as_str() {
        "pull_request" => Some("review"),
        "ping" => None,
        _ => Some("forge"),
    };

    // With the three up, a delivery is routed as it arrives.
    let answer = deliver(0).await;
    assert_eq!(answer.status, 202, "{answer:?}");
    assert_ne!(answer.json()["decision"], "unrouted", "{answer:?}");

    // Every router stops, as Kubernetes stops a pod: SIGTERM, drain, exit.
    for r in &routers {
        r.terminate();
    }
    for r in &mut routers {
        let status = exit_of(r, Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("router {} did not exit", r.addr));
        assert!(status.success(), "router {} exited {status}", r.addr);
    }

    // Ingest keeps answering and storing: every delivery of the outage is stored, unrouted.
    let outage = 1..=github.len();
    for n in outage.clone() {
        let answer = deliver(n).await;
        assert_eq!(answer.status, 202, "{answer:?}");
        let body = answer.json();
        assert_eq!(body["decision"], "unrouted", "{body}");
        assert_eq!(body["verified"], true, "{body}");
        assert!(body.get("todo_id").is_none(), "{body}");
    }
    let unrouted = db.store.unrouted_events(200).await.expect("unrouted");
    assert_eq!(
        unrouted.len(),
        github.len(),
        "every outage delivery is stored"
    );
    assert!(unrouted.iter().all(|e| e.decision.is_none() && !e.routed));
    assert_eq!(
        events_of(&db.store, &scope, &hook.id).await,
        github.len() + 1
    );
    let routed_before = |q: &str| usize::from(queue_of(0) == Some(q));
    for q in ["review", "forge"] {
        assert_eq!(
            todos(&db.store, &scope, q).await.len(),
            routed_before(q),
            "no todo in {q} while no router answers"
        );
    }

    // One router comes back, on the second of the three addresses; two stay dead.
    let _back = router_on(&addrs[1]);
    eventually(
        Duration::from_secs(30),
        "the outage backlog routed",
        || async {
            db.store
                .unrouted_events(200)
                .await
                .map(|e| e.is_empty())
                .unwrap_or(false)
        },
    )
    .await;
    for q in ["review", "forge"] {
        let want = (0..=github.len())
            .filter(|&n| queue_of(n) == Some(q))
            .count();
        assert!(want > 0, "{q}");
        assert_eq!(
            todos(&db.store, &scope, q).await.len(),
            want,
            "one todo per delivery routed to {q}"
        );
    }
    // Each stored delivery now carries the decision its rules give it.
    for e in &unrouted {
        let event = db.store.get_event(&scope, &e.id).await.expect("stored");
        assert!(event.routed, "{}", e.id);
        let decision = event.decision.expect("a decision").decision.to_string();
        let want = decision_for(e.kind.split('.').next().unwrap_or_default());
        assert_eq!(decision, want, "{} ({})", e.id, e.kind);
    }
    control.stop().await;
}

/// The stable reason and domain a refusal carries in its `google.rpc.ErrorInfo`.
fn error_info(s: &Status) -> (String, String) {
    s.get_error_details()
        .error_info()
        .map(|i| (i.reason.clone(), i.domain.clone()))
        .unwrap_or_default()
}

async fn fifty_concurrent_confirms_across_two_controls_succeed_once(db: TestDb) {
    let router = RouterProcess::spawn(&["--children", "2"]);
    let (scope, credential) = owner(&db.store, "alice", ALL).await;
    let hook = webhook(&db.store, &scope, SourceType::Github, None).await;
    store_deliveries(&db.store, &hook, 60).await;
    let controls = [
        ControlProcess::spawn(&db.url, &router.addr, &[]),
        ControlProcess::spawn(&db.url, &router.addr, &[]),
    ];
    let mut apis = Vec::new();
    for c in &controls {
        apis.push(Arc::new(
            Api::connect(c.grpc.parse().expect("addr"), &credential).await,
        ));
    }
    let plan = apis[0]
        .install(plan_req(&hook, PACK))
        .await
        .expect("the plan");
    assert_eq!(plan["proven"], true, "{plan}");
    let plan_id = db
        .store
        .plan_by_token(
            &switchboard_control::secrets::sha256_hex(plan["plan_token"].as_str().expect("token")),
            &scope,
        )
        .await
        .expect("the plan is stored")
        .id;

    const CONFIRMS: usize = 50;
    let barrier = Arc::new(tokio::sync::Barrier::new(CONFIRMS));
    let tasks: Vec<_> = (0..CONFIRMS)
        .map(|i| {
            let api = apis[i % 2].clone();
            let barrier = barrier.clone();
            let req = confirm_req(&hook, PACK, &plan, false);
            tokio::spawn(async move {
                barrier.wait().await;
                (i % 2, api.install(req).await)
            })
        })
        .collect();
    let mut saved = Vec::new();
    let mut refused = [0usize; 2];
    for t in tasks {
        let (control, answer) = t.await.expect("join");
        match answer {
            Ok(done) => saved.push((control, done)),
            Err(e) => {
                assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
                assert!(e.message().starts_with("plan_stale: "), "{e:?}");
                assert_eq!(
                    error_info(&e),
                    ("plan_stale".to_string(), "switchboard".to_string()),
                    "{e:?}"
                );
                refused[control] += 1;
            }
        }
    }
    eprintln!(
        "confirmed by control {:?}; plan_stale from each: {refused:?}",
        saved.iter().map(|(c, _)| c).collect::<Vec<_>>()
    );
    assert_eq!(saved.len(), 1, "exactly one confirm saves: {saved:?}");
    assert_eq!(refused[0] + refused[1], CONFIRMS - 1);
    assert!(
        refused.iter().all(|&r| r >= CONFIRMS / 2 - 1),
        "both controls answered: {refused:?}"
    );
    let (_, done) = &saved[0];
    assert_eq!(done["saved"], true, "{done}");
    assert_eq!(done["version"], hook.config_version + 1, "{done}");

    // Written once: the version moved by one, one history record, the plan used.
    let now = db
        .store
        .get_webhook(&scope, &hook.id)
        .await
        .expect("webhook");
    assert_eq!(now.config_version, hook.config_version + 1);
    let installed = now.provenance.clone();
    assert_eq!(installed.len(), 1, "{installed:?}");
    assert_eq!(installed[0].name, PACK);
    let history = db
        .store
        .list_history(&scope, &hook.id, &Page::first(100))
        .await
        .expect("history")
        .items;
    let written: Vec<_> = history
        .iter()
        .filter(|h| h.version > hook.config_version)
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0].change.op, "install_rule_pack");
    assert_eq!(
        written[0].provenance.as_ref().map(|p| p.plan.clone()),
        Some(plan_id.to_string())
    );
    assert_eq!(history.len(), 2, "the first version and the install");
}

/// SIGSTOPs a process while held, SIGCONTs it when dropped.
struct Paused(u32);

impl Paused {
    fn new(pid: u32) -> Paused {
        signal("-STOP", pid);
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal("-CONT", self.0);
    }
}

fn signal(sig: &str, pid: u32) {
    let status = Command::new("kill").args([sig, &pid.to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "kill {sig} {pid}");
}

/// The holder of the webhook's replay lease, if one holds it.
async fn lease_holder(store: &Store, webhook_id: &str) -> Option<String> {
    use sqlx::Row;
    sqlx::query("SELECT holder FROM replay_leases WHERE webhook_id = $1")
        .bind(webhook_id)
        .fetch_optional(store.pool())
        .await
        .expect("read the lease")
        .map(|row| row.try_get::<String, _>("holder").expect("holder"))
}

/// A `busy` refusal as SPEC-0031 REQ-4 and the API report it.
fn assert_busy(e: &Status) {
    assert_eq!(e.code(), Code::Aborted, "{e:?}");
    assert!(e.message().starts_with("busy: "), "{e:?}");
    assert_eq!(
        error_info(e),
        ("busy".to_string(), "switchboard".to_string()),
        "{e:?}"
    );
    assert_eq!(
        e.get_error_details()
            .retry_info()
            .and_then(|r| r.retry_delay),
        Some(Duration::from_secs(2)),
        "{e:?}"
    );
}

async fn two_replays_of_one_webhook_at_once_one_answers_busy(db: TestDb) {
    let (_, credential, hook) = seeded(&db.store, REPLAYED).await;
    // Each control has its own router, so the first replay can be held mid-way by pausing
    // its router while the second control still validates through its own.
    let router_a = RouterProcess::spawn(&["--children", "2", "--budget-ms", BUDGET_MS]);
    let router_b = replay_router();
    let a = ControlProcess::spawn(&db.url, &router_a.addr, REPLAY_CONTROL_ENV);
    let b = ControlProcess::spawn(&db.url, &router_b.addr, REPLAY_CONTROL_ENV);
    let api_a = Api::connect(a.grpc.parse().expect("addr"), &credential).await;
    let api_b = Api::connect(b.grpc.parse().expect("addr"), &credential).await;

    // The first replay, on control A; it holds the lease in the database while it runs.
    let stream = api_a
        .packs()
        .install_rule_pack(replay_plan_req(&hook))
        .await
        .expect("the first replay starts")
        .into_inner();
    let first = read_plan_stream(stream);
    eventually(
        Duration::from_secs(30),
        "the first replay holding the lease",
        || async {
            assert!(
                !first.is_finished(),
                "the first replay ended before its lease was seen"
            );
            lease_holder(&db.store, &hook.id).await.is_some()
        },
    )
    .await;
    // Its router paused, the first replay cannot finish: its lease stays held (it expires
    // only after the 30 s budget plus 30 s) until the router is let go.
    let held = {
        let paused = Paused::new(router_a.child.id());
        let holder = lease_holder(&db.store, &hook.id)
            .await
            .expect("the lease is still held with A's router paused");
        assert!(!first.is_finished(), "the first replay ended");

        // The second replay, on control B, started while the first runs: busy, whether it is
        // a plan or a replay of hand-written rules.
        let second = api_b
            .install(replay_plan_req(&hook))
            .await
            .expect_err("a second replay of the webhook while the first runs");
        assert_busy(&second);
        let third = api_b
            .rules()
            .test_webhook_rules(TestWebhookRulesRequest {
                webhook_id: hook.id.clone(),
                replay: Some(TestReplay {
                    limit: REPLAYED as u32,
                    ..Default::default()
                }),
                configuration: crate::support::typed::config(&saved_configuration()),
                ..Default::default()
            })
            .await
            .expect_err("a rules replay of the webhook while the first runs");
        assert_busy(&third);
        assert_eq!(
            lease_holder(&db.store, &hook.id).await.as_deref(),
            Some(holder.as_str()),
            "the refused replays left the first one's lease alone"
        );
        assert!(!first.is_finished(), "the first replay ended");
        drop(paused);
        holder
    };

    // The first completes, over the whole window, and gives the lease back.
    let finished = first.await.expect("the reader");
    let plan = finished
        .result
        .unwrap_or_else(|e| panic!("the first replay failed: {e:?}"));
    check_plan(&plan);
    assert_eq!(lease_holder(&db.store, &hook.id).await, None, "was {held}");

    // Then a replay on B runs: the lease is free for every control again (a short window:
    // what is checked is that B may replay, not what it reports).
    let after = api_b
        .rules()
        .test_webhook_rules(TestWebhookRulesRequest {
            webhook_id: hook.id.clone(),
            replay: Some(TestReplay {
                limit: 50,
                ..Default::default()
            }),
            configuration: crate::support::typed::config(&saved_configuration()),
            ..Default::default()
        })
        .await
        .expect("a replay on B once the first finished")
        .into_inner();
    let report: Value = crate::support::typed::replay_report(&after);
    assert_eq!(report["events_replayed"], 50, "{report}");
    assert_eq!(
        report["changed"], 0,
        "the saved configuration against itself"
    );
}
