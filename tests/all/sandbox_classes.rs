//! Tenants isolated in the sandbox pool (issue 17), with real sandbox children: live work goes
//! ahead of replays, tenants take turns within a class, budgets are CPU time (a unit paused
//! or preempted past its budget is not blamed), every fault names the rule it interrupted, a
//! call stops at its `max_child_faults`, spare children are ready when a fault kills one, each
//! class runs on children of its own (so interactive work neither delays nor kills a live
//! delivery's child), and the CPU children spend is counted per tenant.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use switchboard_proto::router::v1::{Configuration, EvaluateResponse, Outcome, StoredDelivery};
use switchboard_router::engine::decision::fault;
use switchboard_router::sandbox::{Class, SandboxConfig, SandboxPool, Work};

use crate::support::{binary, context, deliveries, in_process};

/// Grows without bound: runs past any budget, or dies on the address-space limit.
const SLOW: &str = r#"((. as $p | [$p,$p,$p,$p,$p,$p,$p,$p] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | tojson | length) > 0)"#;

/// Never matches, costs some milliseconds of CPU per envelope.
const BUSY: &str = r#"((. as $p | [$p,$p,$p,$p] | [.,.,.,.] | [.,.,.,.] | tojson | length) < 0)"#;

async fn pool(
    children: usize,
    budget: Duration,
    max_chunk: usize,
    spares: usize,
) -> Arc<SandboxPool> {
    let mut config = SandboxConfig::new(binary());
    config.children = children;
    config.budget = budget;
    config.max_chunk = max_chunk;
    config.spares = spares;
    SandboxPool::start(config)
        .await
        .expect("sandbox pool starts")
}

fn config(rules: serde_json::Value) -> Configuration {
    Configuration::text(serde_json::json!({ "rules": rules }).to_string())
}

/// A configuration whose rule `busy` costs CPU on every envelope and decides nothing.
fn busy() -> Configuration {
    config(serde_json::json!([
        {"id": "busy", "when": BUSY, "action": {"drop": true}},
        {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}}
    ]))
}

fn work(class: Class, tenant: &str) -> Work {
    Work {
        class: Some(class),
        tenant: tenant.into(),
        ..Work::default()
    }
}

/// Runs one call on its own task: what it answered, and when it ended.
fn spawn_call(
    pool: &Arc<SandboxPool>,
    configuration: Configuration,
    ds: Vec<StoredDelivery>,
    work: Work,
) -> tokio::task::JoinHandle<(EvaluateResponse, Instant)> {
    let pool = pool.clone();
    tokio::spawn(async move {
        let resp = pool
            .evaluate_as(&context(), &[configuration], &ds, &work)
            .await
            .expect("evaluates");
        (resp, Instant::now())
    })
}

/// One delivery of a quiet tenant's live webhook (one cheap rule): its answer, how long it
/// took, and when it ended.
async fn one_live_delivery(pool: &Arc<SandboxPool>) -> (EvaluateResponse, Duration, Instant) {
    let started = Instant::now();
    let trivial = config(serde_json::json!([
        {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}}
    ]));
    let (resp, done) = spawn_call(
        pool,
        trivial,
        deliveries(1),
        work(Class::Live, "team:quiet"),
    )
    .await
    .expect("joins");
    (resp, done - started, done)
}

fn faults(resp: &EvaluateResponse) -> Vec<&switchboard_proto::router::v1::Decision> {
    resp.results
        .iter()
        .flat_map(|r| &r.decisions)
        .filter(|d| d.outcome == Outcome::Fault as i32)
        .collect()
}

/// The nice value of process `pid` (field 19 of /proc/<pid>/stat).
/// Every delivery but `victim` is decided exactly as in-process.
fn others_as_in_process(
    resp: &EvaluateResponse,
    ds: &[StoredDelivery],
    configuration: &Configuration,
    victim: usize,
) {
    let others: Vec<StoredDelivery> = ds
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, d)| d.clone())
        .collect();
    let want = in_process(&configuration.json, &context(), &others);
    let got = resp
        .results
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, r)| &r.decisions[0]);
    for (i, (g, w)) in got.zip(&want).enumerate() {
        assert_eq!(g, w, "delivery {i} of the others");
    }
}

fn nice_of(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(16)?.parse().ok()
}

/// The pool's children running at `nice`: the children of one class.
fn children_at(pool: &SandboxPool, nice: i64) -> Vec<u32> {
    pool.child_pids()
        .into_iter()
        .filter(|p| nice_of(*p) == Some(nice))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_fault_names_the_rule_it_interrupted_and_counts_against_it() {
    let pool = pool(1, Duration::from_millis(100), 128, 0).await;
    let ds = deliveries(10);
    let victim = format!("{:012}", 3);
    let configuration = config(serde_json::json!([
        {"id": "never-a", "when": "false", "action": {"drop": true}},
        {"id": "never-b", "when": ".event == \"no-such-event\"", "action": {"drop": true}},
        {"id": "slow", "when": format!("(.delivery_id | endswith(\"{victim}\")) and {SLOW}"), "action": {"drop": true}},
        {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}}
    ]));
    let resp = pool
        .evaluate_as(
            &context(),
            std::slice::from_ref(&configuration),
            &ds,
            &work(Class::Interactive, "human:alice"),
        )
        .await
        .expect("evaluates");
    let faulted = faults(&resp);
    assert_eq!(faulted.len(), 1, "{faulted:?}");
    let d = faulted[0];
    assert!(
        d.fault_code == fault::BUDGET_EXCEEDED || d.fault_code == fault::SANDBOX_CRASHED,
        "{d:?}"
    );
    assert_eq!(
        d.rule_id, "slow",
        "the third rule was running, not the first"
    );
    assert_eq!(resp.results[3].decisions[0], *d);
    let counted = resp.counters[0]
        .rules
        .iter()
        .find(|c| c.rule_id == "slow")
        .expect("the rule is counted");
    assert_eq!(counted.faults, 1, "the plan's per-rule counts can blame it");
    // Every other delivery is decided as in-process (where the victim would run unbounded).
    others_as_in_process(&resp, &ds, &configuration, 3);
}

/// A unit that holds more memory than its budget is stopped by its child's allocator, long
/// before its CPU budget: it faults `budget_exceeded`, naming the rule and the memory budget,
/// and every other delivery (a rule holding memory within the budget included) is decided.
#[tokio::test(flavor = "multi_thread")]
async fn a_unit_over_its_memory_budget_faults_naming_its_rule() {
    let mut sandbox = SandboxConfig::new(binary());
    sandbox.children = 1;
    sandbox.spares = 0;
    // A CPU budget far away: only the memory budget can stop the victim in time.
    sandbox.budget = Duration::from_secs(20);
    sandbox.limits.unit_memory_mb = 16;
    let pool = SandboxPool::start(sandbox)
        .await
        .expect("sandbox pool starts");
    let ds = deliveries(6);
    let victim = format!("{:012}", 2);
    let configuration = config(serde_json::json!([
        {"id": "within", "when": "([.,.,.,.] | tojson | length) < 0", "action": {"drop": true}},
        {"id": "hoard", "when": format!("(.delivery_id | endswith(\"{victim}\")) and {SLOW}"), "action": {"drop": true}},
        {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}}
    ]));
    let started = Instant::now();
    let resp = pool
        .evaluate_as(
            &context(),
            std::slice::from_ref(&configuration),
            &ds,
            &work(Class::Interactive, "human:alice"),
        )
        .await
        .expect("evaluates");
    let faulted = faults(&resp);
    assert_eq!(faulted.len(), 1, "{faulted:?}");
    let d = faulted[0];
    assert_eq!(d.fault_code, fault::BUDGET_EXCEEDED, "{d:?}");
    assert_eq!(d.rule_id, "hoard");
    assert!(
        d.reason.contains("memory budget of 16 MiB"),
        "the reason says which budget: {d:?}"
    );
    assert_eq!(resp.results[2].decisions[0], *d);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped by memory, not by the 20 s CPU budget"
    );
    assert_eq!(pool.stats().budget_exceeded.load(Ordering::Relaxed), 1);
    others_as_in_process(&resp, &ds, &configuration, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_stops_at_its_max_child_faults_and_leaves_the_rest_not_evaluated() {
    let pool = pool(1, Duration::from_millis(50), 128, 1).await;
    let ds = deliveries(12);
    let every = config(serde_json::json!([
        {"id": "always-slow", "when": SLOW, "action": {"drop": true}}
    ]));
    let resp = pool
        .evaluate_as(
            &context(),
            &[every],
            &ds,
            &Work {
                max_child_faults: 2,
                ..work(Class::Replay, "human:alice")
            },
        )
        .await
        .expect("evaluates");
    let decisions: Vec<_> = resp.results.iter().map(|r| &r.decisions[0]).collect();
    let blamed: Vec<_> = decisions
        .iter()
        .filter(|d| d.fault_code != fault::NOT_EVALUATED)
        .collect();
    assert_eq!(blamed.len(), 2, "{decisions:?}");
    for d in &blamed {
        assert!(
            d.fault_code == fault::BUDGET_EXCEEDED || d.fault_code == fault::SANDBOX_CRASHED,
            "{d:?}"
        );
        assert_eq!(d.rule_id, "always-slow");
    }
    let rest: Vec<_> = decisions
        .iter()
        .filter(|d| d.fault_code == fault::NOT_EVALUATED)
        .collect();
    assert_eq!(rest.len(), 10);
    assert!(
        rest.iter()
            .all(|d| d.rule_id.is_empty() && d.reason.contains("stopped after 2")),
        "{rest:?}"
    );
    let stats = pool.stats();
    assert_eq!(stats.not_evaluated.load(Ordering::Relaxed), 10);
    assert_eq!(
        stats.budget_exceeded.load(Ordering::Relaxed) + stats.crashed.load(Ordering::Relaxed),
        2,
        "two children killed, not twelve"
    );
}

/// Issue 42: a replay evaluates the saved configuration and the candidate on each delivery.
/// When the candidate's rule stops the call, every delivery it faulted on is answered whole
/// (the saved decision too, though the child that decided it was killed before sending it),
/// so a plan can count those faults; the deliveries the call never reached are not evaluated
/// on either side.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_call_answers_every_delivery_it_faulted_on_whole() {
    for (children, count, max_faults) in [(2, 3, 3), (2, 12, 2), (1, 8, 3), (2, 40, 3)] {
        let pool = pool(children, Duration::from_millis(50), 128, 1).await;
        let ds = deliveries(count);
        let saved = config(serde_json::json!([
            {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}}
        ]));
        let candidate = config(serde_json::json!([
            {"id": "always-slow", "when": SLOW, "action": {"drop": true}},
            {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "forge"}}
        ]));
        let resp = pool
            .evaluate_as(
                &context(),
                &[saved.clone(), candidate],
                &ds,
                &Work {
                    max_child_faults: max_faults,
                    ..work(Class::Replay, "human:alice")
                },
            )
            .await
            .expect("evaluates");
        let case = format!("{children} children, {count} deliveries, stop after {max_faults}");
        let not_evaluated =
            |d: &switchboard_proto::router::v1::Decision| d.fault_code == fault::NOT_EVALUATED;
        let mut blamed = 0;
        for (r, d) in resp.results.iter().zip(&ds) {
            let (before, after) = (&r.decisions[0], &r.decisions[1]);
            assert_eq!(
                not_evaluated(before),
                not_evaluated(after),
                "{case}: a delivery is answered whole or not at all: {r:?}"
            );
            if not_evaluated(after) {
                continue;
            }
            assert!(
                after.fault_code == fault::BUDGET_EXCEEDED
                    || after.fault_code == fault::SANDBOX_CRASHED,
                "{case}: {after:?}"
            );
            assert_eq!(after.rule_id, "always-slow", "{case}");
            let alone = in_process(&saved.json, &context(), std::slice::from_ref(d));
            assert_eq!(
                before, &alone[0],
                "{case}: the saved decision is the one it makes alone"
            );
            blamed += 1;
        }
        assert!(
            blamed >= max_faults as usize,
            "{case}: the faults that stopped the call are answered: {blamed}"
        );
        assert!(
            count <= max_faults as usize || blamed < count,
            "{case}: the call stopped early: {blamed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spare_child_is_ready_when_a_fault_kills_one() {
    let ds = deliveries(20);
    let on = |n: usize| format!("(.delivery_id | endswith(\"{n:012}\"))");
    let three = config(serde_json::json!([
        {"id": "slow", "when": format!("({} or {} or {}) and {SLOW}", on(2), on(8), on(14)), "action": {"drop": true}}
    ]));
    let mut on_demand = Vec::new();
    // Three spares: a fault needs three replacements in quick succession (the unit's child,
    // then those of its two runs alone), and a loaded machine may not have started the next
    // in between.
    for spares in [0, 3] {
        let pool = pool(1, Duration::from_millis(300), 128, spares).await;
        let resp = pool
            .evaluate_as(
                &context(),
                std::slice::from_ref(&three),
                &ds,
                &work(Class::Live, "human:alice"),
            )
            .await
            .expect("evaluates");
        assert_eq!(faults(&resp).len(), 3, "spares {spares}");
        on_demand.push(pool.stats().spawned_on_demand.load(Ordering::Relaxed));
    }
    // Without a spare, the first child and the replacements the work waits for are started
    // on demand (up to ten: one and three per fault; fewer when the pool's refill wins the
    // race); with spares, none.
    assert!(
        (2..=10).contains(&on_demand[0]) && on_demand[1] == 0,
        "children started while work waited, without spares and with: {on_demand:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_unit_paused_past_its_budget_is_not_blamed() {
    // 100 ms of CPU per unit; the child is stopped for 600 ms of wall time mid-batch, as a
    // preempted child on a busy machine would be: it spent no CPU meanwhile.
    let pool = pool(1, Duration::from_millis(100), 128, 0).await;
    let ds = deliveries(60);
    let call = spawn_call(
        &pool,
        busy(),
        ds.clone(),
        work(Class::Replay, "human:alice"),
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The replay's child, the pool's only one (without spares it keeps no live child).
    let pids = children_at(&pool, 10);
    assert_eq!(pids.len(), 1, "{:?}", pool.child_pids());
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &pids[0].to_string()])
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill {sig}");
    };
    signal("-STOP");
    tokio::time::sleep(Duration::from_millis(600)).await;
    signal("-CONT");
    let (resp, _) = call.await.expect("joins");
    assert!(faults(&resp).is_empty(), "{:?}", faults(&resp));
    let want = in_process(&busy().json, &context(), &ds);
    for (i, (r, w)) in resp.results.iter().zip(&want).enumerate() {
        assert_eq!(&r.decisions[0], w, "delivery {i}");
    }
    assert!(
        pool.child_pids().contains(&pids[0]),
        "the same child went on"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn live_work_goes_ahead_of_a_replay_that_holds_every_child() {
    let pool = pool(1, Duration::from_secs(2), 4, 1).await;
    let replay_started = Instant::now();
    let replay = spawn_call(
        &pool,
        busy(),
        deliveries(600),
        work(Class::Replay, "team:noisy"),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The replay's child runs at the replay priority.
    let niced = children_at(&pool, 10);
    assert!(
        !niced.is_empty(),
        "a replay child at nice 10: {:?}",
        pool.child_pids()
    );

    let (live_resp, live_took, live_done) = one_live_delivery(&pool).await;
    let (replay_resp, replay_done) = replay.await.expect("joins");
    assert!(faults(&live_resp).is_empty() && faults(&replay_resp).is_empty());
    let replay_took = replay_done - replay_started;
    assert!(
        live_done < replay_done,
        "the delivery was answered while the replay ran (live {live_took:?}, replay {replay_took:?})"
    );
    assert!(
        live_took < Duration::from_secs(1) && live_took * 4 < replay_took,
        "live {live_took:?} against the replay's {replay_took:?}"
    );
    // The delivery did not run on the replay's child: niced children run replays only.
    let by = pool.cpu_by_tenant();
    assert!(
        by.iter()
            .any(|(t, c, d)| t == "team:quiet" && *c == Class::Live && !d.is_zero()),
        "{by:?}"
    );
}

/// Field 6 of /proc/<pid>/stat: the session id.
fn session_of(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// A replay child's nice would count only inside the router's session where the kernel
/// schedules sessions as groups (autogroup): so it has a session of its own, whose group
/// runs at the replay's nice; a live child stays in the router's session at the router's
/// priority.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_child_runs_in_a_session_and_scheduling_group_of_its_own() {
    let pool = pool(1, Duration::from_secs(2), 4, 1).await;
    let (resp, _, _) = one_live_delivery(&pool).await;
    assert!(faults(&resp).is_empty());
    let replay = spawn_call(
        &pool,
        busy(),
        deliveries(200),
        work(Class::Replay, "team:noisy"),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ours = session_of(std::process::id()).expect("our session");
    let replaying = children_at(&pool, 10);
    assert!(!replaying.is_empty(), "{:?}", pool.child_pids());
    let live = children_at(&pool, 0);
    assert!(!live.is_empty(), "{:?}", pool.child_pids());
    for pid in &replaying {
        let session = session_of(*pid).expect("a replay child's session");
        assert_eq!(
            session,
            i64::from(*pid),
            "child {pid} leads its own session"
        );
        assert_ne!(session, ours);
        // `/autogroup-<n> nice <k>`, where the kernel has autogroups (retried: a process
        // without CAP_SYS_ADMIN may set it ten times a second).
        if let Ok(group) = std::fs::read_to_string(format!("/proc/{pid}/autogroup")) {
            let mut group = group;
            for _ in 0..20 {
                if group.trim().ends_with("nice 10") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                group =
                    std::fs::read_to_string(format!("/proc/{pid}/autogroup")).unwrap_or_default();
            }
            assert!(group.trim().ends_with("nice 10"), "child {pid}: {group:?}");
        }
    }
    for pid in &live {
        assert_eq!(
            session_of(*pid),
            Some(ours),
            "live child {pid} stays in our session"
        );
    }
    let (resp, _) = replay.await.expect("joins");
    assert!(faults(&resp).is_empty());
}

/// Costs a hundred milliseconds of CPU or more per envelope (sorting the envelope's
/// characters over and over) and decides nothing.
fn heavy() -> String {
    let copies = vec!["$e"; 48].join(",");
    format!("((tojson | split(\"\")) as $e | [{copies}] | map(sort) | length) < 0")
}

#[tokio::test(flavor = "multi_thread")]
async fn live_work_goes_ahead_of_interactive_work_that_holds_every_child() {
    // One child slot; every chunk one delivery, each costing a long unit.
    let pool = pool(1, Duration::from_secs(10), 1, 1).await;
    let heavy = config(serde_json::json!([
        {"id": "heavy", "when": heavy(), "action": {"drop": true}}
    ]));
    let fixtures_started = Instant::now();
    let fixtures = spawn_call(
        &pool,
        heavy,
        deliveries(4),
        work(Class::Interactive, "team:noisy"),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The interactive work runs at its own, lower priority, not on a live child.
    let interactive = children_at(&pool, 5);
    assert_eq!(interactive.len(), 1, "{:?}", pool.child_pids());

    let (live_resp, live_took, _) = one_live_delivery(&pool).await;
    let (fixtures_resp, fixtures_done) = fixtures.await.expect("joins");
    assert!(faults(&live_resp).is_empty(), "{:?}", faults(&live_resp));
    assert!(
        faults(&fixtures_resp).is_empty(),
        "{:?}",
        faults(&fixtures_resp)
    );
    let fixtures_took = fixtures_done - fixtures_started;
    // Without the live reserve slot the delivery waits for the unit running and the one in
    // the child's pipe behind it: half the interactive call.
    assert!(
        live_took * 4 < fixtures_took,
        "live {live_took:?} against the interactive call's {fixtures_took:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fault_in_interactive_work_never_costs_live_work_its_child() {
    let pool = pool(1, Duration::from_millis(300), 128, 1).await;
    let (resp, _, _) = one_live_delivery(&pool).await;
    assert!(faults(&resp).is_empty());
    let live_children = children_at(&pool, 0);
    assert!(!live_children.is_empty(), "{:?}", pool.child_pids());

    // A dry run whose rule exceeds the budget on three deliveries: three children killed.
    let on = |n: usize| format!("(.delivery_id | endswith(\"{n:012}\"))");
    let three = config(serde_json::json!([
        {"id": "slow", "when": format!("({} or {} or {}) and {SLOW}", on(1), on(4), on(7)), "action": {"drop": true}}
    ]));
    let (resp, _) = spawn_call(
        &pool,
        three,
        deliveries(9),
        work(Class::Interactive, "team:noisy"),
    )
    .await
    .expect("joins");
    assert_eq!(faults(&resp).len(), 3, "{:?}", faults(&resp));

    // Every live child (the one that worked and the spare) is still there, and live work
    // never had to start one.
    let alive = pool.child_pids();
    for pid in &live_children {
        assert!(alive.contains(pid), "live child {pid} gone: {alive:?}");
    }
    let on_demand = pool.stats().spawned_on_demand.load(Ordering::Relaxed);
    let (resp, _, _) = one_live_delivery(&pool).await;
    assert!(faults(&resp).is_empty());
    assert_eq!(
        pool.stats().spawned_on_demand.load(Ordering::Relaxed),
        on_demand,
        "the delivery found a live child ready"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_take_turns_within_replays_and_their_cpu_is_counted_apart() {
    let pool = pool(1, Duration::from_secs(2), 4, 0).await;
    let a_started = Instant::now();
    let a = spawn_call(&pool, busy(), deliveries(48), work(Class::Replay, "team:a"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b_started = Instant::now();
    let b = spawn_call(&pool, busy(), deliveries(8), work(Class::Replay, "team:b"));
    let (_, b_done) = b.await.expect("joins");
    let (_, a_done) = a.await.expect("joins");
    let (a_took, b_took) = (a_done - a_started, b_done - b_started);
    assert!(
        b_done < a_done,
        "B's two chunks took turns with A's twelve rather than queueing behind them (A {a_took:?}, B {b_took:?})"
    );
    assert!(b_took * 2 < a_took, "A {a_took:?}, B {b_took:?}");
    let by = pool.cpu_by_tenant();
    let spent = |tenant: &str| {
        by.iter()
            .filter(|(t, c, _)| t == tenant && *c == Class::Replay)
            .map(|(_, _, d)| *d)
            .sum::<Duration>()
    };
    assert!(
        spent("team:a") > spent("team:b") && !spent("team:b").is_zero(),
        "{by:?}"
    );
}
