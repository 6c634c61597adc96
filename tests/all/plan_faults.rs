//! Issue 42, "a plan never hides a fault": a pack rule that faults on any replayed delivery or
//! fixture refuses the plan with `pack_rule_faults` naming the rule and event ids (SPEC-0031
//! REQ-4), whether the replay ran to its end or a router stopped its call at the call's
//! `max_child_faults`; the same rules as a hand-written candidate are reported per rule
//! (REQ-5) with the stop said. End to end through real router processes on both backends,
//! and a property over a real sandbox pool: refused if and only if a pack rule faulted on a
//! delivery that was evaluated.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use switchboard_control::store::Webhook;
use switchboard_packs::Catalog;
use switchboard_packs::manifest::{Fixture, FixtureDelivery};
use switchboard_packs::plan::{Delivered, Evidence};
use switchboard_proto::router::v1::{Configuration, StoredDelivery};
use switchboard_router::engine::decision::fault;
use switchboard_router::sandbox::{Class, SandboxConfig, SandboxPool, Work};

use crate::control_harness::{TestDb, on_every_backend};
use crate::rule_packs::{ALL, Env, Options, details, install, plan_req, reason, replay_report};
use crate::support::{binary, context, deliveries};

/// Runs past any budget (or dies on the child's address-space limit) on any envelope.
const SLOW: &str = r#"((. as $p | [$p,$p,$p,$p,$p,$p,$p,$p] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | tojson | length) > 0)"#;

/// Holds far more than a unit's memory budget (128 MiB by default) within a few milliseconds.
const HOARD: &str = r#"(("x" * 400000000 | length) > 0)"#;

/// Deleted issue comments: the deliveries the faulting pack rules below meet.
const DELETED: &str = r#".event == "issue_comment" and .action == "deleted""#;

on_every_backend!(
    a_pack_rule_over_the_budget_on_any_number_of_deliveries_refuses_the_plan,
    a_pack_rule_that_exhausts_its_memory_refuses_the_plan,
    a_pack_rule_that_faults_only_on_a_fixture_refuses_the_plan,
    an_upgrade_whose_new_rule_faults_is_refused,
);

/// Control with `catalog` and a real router process.
async fn with_catalog(db: &TestDb, catalog: Catalog) -> Env {
    Env::start(
        db,
        Options {
            catalog,
            ..Options::default()
        },
    )
    .await
}

/// drop-ci-noise@1.0.0 under `name`@`version`, with one more rule first: `id`, deciding
/// `when`. Added to the built-in catalog.
fn pack_with(catalog: &mut Catalog, name: &str, version: &str, id: &str, when: &str) {
    let mut pack = catalog
        .find("drop-ci-noise", "1.0.0")
        .expect("drop-ci-noise@1")
        .pack
        .clone();
    pack.name = name.into();
    pack.version = version.into();
    pack.rules.insert(
        0,
        switchboard_model::Rule {
            id: Some(id.into()),
            description: Some("faults on what it meets".into()),
            when: when.into(),
            action: switchboard_model::Action::Drop,
        },
    );
    catalog
        .add_external(pack, "test")
        .expect("structurally valid");
}

/// `faulting` deleted comments among `total` deliveries (the rest opened issues and pull
/// requests), spread through the window: the faulting deliveries' event ids.
async fn history(env: &Env, w: &Webhook, faulting: usize, total: usize) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let every = total / faulting.max(1);
    for n in 0..total {
        if n % every == 0 && ids.len() < faulting {
            ids.insert(
                env.deliver(w, "github", "issue_comment.deleted.json", n)
                    .await,
            );
        } else {
            let other = ["issues.opened.json", "pull_request.opened.json"][n % 2];
            env.deliver(w, "github", other, n).await;
        }
    }
    ids
}

/// A refusal names `rule` with event ids, every one of them among `faulting`.
fn refused_naming(err: &tonic::Status, rule: &str, faulting: &BTreeSet<String>, case: &str) {
    assert_eq!(reason(err), "pack_rule_faults", "{case}: {err:?}");
    assert!(
        err.message().contains(rule),
        "{case}: names the rule: {err:?}"
    );
    let faults = details(err)["faults"].clone();
    let named = faults
        .as_array()
        .and_then(|f| f.iter().find(|f| f["rule"] == rule))
        .unwrap_or_else(|| panic!("{case}: {rule} in the details: {faults}"));
    let ids: Vec<&str> = named["event_ids"]
        .as_array()
        .expect("event ids")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        ids.iter().any(|id| faulting.contains(*id)),
        "{case}: names a delivery it faulted on: {named}"
    );
    for id in &ids {
        // drop-ci-noise's fixtures hold a deleted comment too.
        assert!(
            faulting.contains(*id) || id.starts_with("fixture:"),
            "{case}: {id} is a delivery the rule faulted on"
        );
        assert!(
            err.message().contains(id),
            "{case}: the message names {id}: {err:?}"
        );
    }
}

/// The hand-written candidate: the faulting rule, then a rule that decides the rest.
fn hand_written(when: &str) -> Value {
    json!({"rules": [
        {"id": "faulty", "when": when, "action": {"drop": true}},
        {"id": "prs", "when": ".event == \"pull_request\"", "action": {"queue": "review"}}
    ]})
}

/// The replay report of the same rule as a hand-written candidate: its faults per rule, and
/// whether (and why) it stopped. A call stops after its third child fault (the default).
async fn reported_per_rule(
    env: &Env,
    cred: &str,
    w: &Webhook,
    when: &str,
    faulting: usize,
    case: &str,
) {
    let report = replay_report(env, cred, w, hand_written(when)).await;
    let rule = report["rules"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["id"] == "faulty"))
        .unwrap_or_else(|| panic!("{case}: the rule is reported: {report}"))
        .clone();
    let faults = rule["faults"].as_u64().expect("faults");
    let stopped = report["stopped"].as_str().unwrap_or_default();
    if stopped.is_empty() {
        // Ran to the end (fewer than three faults, or the last fault came after the rest).
        assert_eq!(
            faults, faulting as u64,
            "{case}: every fault counted: {report}"
        );
        assert_eq!(report["truncated"], false, "{case}: {report}");
        assert!(
            faulting <= 3,
            "{case}: a replay this faulty stops: {report}"
        );
    } else {
        assert!(
            (3..=faulting as u64).contains(&faults),
            "{case}: the faults that stopped the replay are counted: {report}"
        );
        assert!(
            stopped.contains("stopped after 3") && stopped.contains("candidate rule faulty"),
            "{case}: the report says it stopped early, and which rule stopped it: {report}"
        );
        assert_eq!(report["truncated"], true, "{case}: {report}");
    }
}

async fn a_pack_rule_over_the_budget_on_any_number_of_deliveries_refuses_the_plan(db: TestDb) {
    let mut catalog = Catalog::builtin();
    let when = format!("{DELETED} and {SLOW}");
    pack_with(
        &mut catalog,
        "slow-noise",
        "1.0.0",
        "deleted-comments",
        &when,
    );
    let env = with_catalog(&db, catalog).await;
    for (faulting, total) in [(1, 12), (2, 12), (3, 12), (10, 20), (200, 200)] {
        let case = format!("{faulting} of {total} over the budget");
        let (scope, cred) = env.owner(&format!("owner-{faulting}"), ALL).await;
        let w = env.webhook(&scope, None).await;
        let ids = history(&env, &w, faulting, total).await;
        let err = install(&env, &cred, plan_req(&w, "slow-noise"))
            .await
            .expect_err("a pack rule over the budget refuses the plan (REQ-4)");
        refused_naming(&err, "slow-noise--deleted-comments", &ids, &case);
        let saved = env.store.get_webhook(&scope, &w.id).await.expect("webhook");
        assert_eq!(
            saved.config_version, w.config_version,
            "{case}: nothing saved"
        );
        reported_per_rule(&env, &cred, &w, &when, faulting, &case).await;
        if faulting == 10 {
            the_cli_says_it(
                &env,
                &cred,
                &w,
                "slow-noise",
                "slow-noise--deleted-comments",
                &ids,
            )
            .await;
        }
    }
}

/// `switchboard packs install` (the CLI for people) prints the refusal with the rule and
/// example event ids, exits 4 (refused until you act), and offers no confirm.
async fn the_cli_says_it(
    env: &Env,
    cred: &str,
    w: &Webhook,
    pack: &str,
    rule: &str,
    faulting: &BTreeSet<String>,
) {
    let (addr, cred, webhook, pack) = (
        env.addr.clone(),
        cred.to_string(),
        w.id.clone(),
        pack.to_string(),
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(binary())
            .args(["packs", "install", &webhook, &pack])
            .env("SWITCHBOARD_CONTROL", &addr)
            .env("SWITCHBOARD_TOKEN", &cred)
            .env("SWITCHBOARD_LOG", "warn")
            .output()
            .expect("switchboard runs")
    })
    .await
    .expect("joins");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(4), "{stdout}{stderr}");
    assert!(
        stderr.contains("pack_rule_faults") && stderr.contains(rule),
        "{stderr}"
    );
    assert!(
        faulting.iter().any(|id| stderr.contains(id.as_str())),
        "names example events: {stderr}"
    );
    assert!(!stdout.contains("confirm"), "nothing to confirm: {stdout}");
}

async fn a_pack_rule_that_exhausts_its_memory_refuses_the_plan(db: TestDb) {
    let mut catalog = Catalog::builtin();
    let when = format!("{DELETED} and {HOARD}");
    pack_with(&mut catalog, "hoarding-noise", "1.0.0", "hoard", &when);
    let env = with_catalog(&db, catalog).await;
    for (faulting, total) in [(3, 12), (12, 12)] {
        let case = format!("{faulting} of {total} over the memory budget");
        let (scope, cred) = env.owner(&format!("hoarder-{faulting}"), ALL).await;
        let w = env.webhook(&scope, None).await;
        let ids = history(&env, &w, faulting, total).await;
        let err = install(&env, &cred, plan_req(&w, "hoarding-noise"))
            .await
            .expect_err("a pack rule that kills its child refuses the plan (REQ-4)");
        refused_naming(&err, "hoarding-noise--hoard", &ids, &case);
        reported_per_rule(&env, &cred, &w, &when, faulting, &case).await;
    }
}

async fn a_pack_rule_that_faults_only_on_a_fixture_refuses_the_plan(db: TestDb) {
    let mut catalog = Catalog::builtin();
    // Only a body that says so meets the slow part: no real delivery does, one fixture does.
    let when = format!(".payload.fixture_trap == true and {SLOW}");
    pack_with(&mut catalog, "fixture-trap", "1.0.0", "trap", &when);
    let mut pack = catalog
        .find("fixture-trap", "1.0.0")
        .expect("added")
        .pack
        .clone();
    pack.version = "1.0.1".into();
    pack.fixtures.push(Fixture {
        name: "the-trap".into(),
        delivery: FixtureDelivery {
            source: "github".into(),
            event: "issues".into(),
            headers: Default::default(),
            body: json!({"action": "opened", "fixture_trap": true}),
            verified: true,
        },
        params: Default::default(),
        want: "drop".into(),
        rule: Some("trap".into()),
    });
    catalog
        .add_external(pack, "test")
        .expect("structurally valid");
    let env = with_catalog(&db, catalog).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w, 0, 8).await;
    let mut req = plan_req(&w, "fixture-trap");
    req.version = "1.0.1".into();
    let err = install(&env, &cred, req)
        .await
        .expect_err("a pack rule that faults on a fixture refuses the plan (REQ-4)");
    let fixture = BTreeSet::from(["fixture:the-trap".to_string()]);
    refused_naming(&err, "fixture-trap--trap", &fixture, "a fixture");
    // The version without that fixture replays the same deliveries and is planned.
    let mut req = plan_req(&w, "fixture-trap");
    req.version = "1.0.0".into();
    let plan = install(&env, &cred, req).await.expect("no fault, a plan");
    assert_eq!(plan["events_replayed"], 8, "{plan}");
}

async fn an_upgrade_whose_new_rule_faults_is_refused(db: TestDb) {
    let mut catalog = Catalog::builtin();
    pack_with(&mut catalog, "noise", "1.0.0", "deleted-comments", DELETED);
    pack_with(
        &mut catalog,
        "noise",
        "1.1.0",
        "deleted-comments",
        &format!("{DELETED} and {SLOW}"),
    );
    let env = with_catalog(&db, catalog).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    let ids = history(&env, &w, 5, 15).await;
    let mut req = plan_req(&w, "noise");
    req.version = "1.0.0".into();
    let plan = install(&env, &cred, req).await.expect("1.0.0 never faults");
    let mut confirm = crate::rule_packs::confirm_req(&w, "noise", &plan, false);
    confirm.version = "1.0.0".into();
    install(&env, &cred, confirm).await.expect("confirmed");
    let mut req = plan_req(&w, "noise");
    req.version = "1.1.0".into();
    let err = install(&env, &cred, req)
        .await
        .expect_err("an upgrade whose rule faults is refused (REQ-4)");
    refused_naming(&err, "noise--deleted-comments", &ids, "an upgrade");
}

/// What a rule of the property's configurations does on the deliveries it is aimed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    /// Matches: routes to a queue.
    Decide,
    /// Raises an error: a rule fault, the child lives on.
    Error,
    /// Runs past the budget: the child is killed and the call counts a child fault.
    Slow,
}

#[derive(Clone, Debug)]
struct PropRule {
    effect: Effect,
    /// Delivery indices it is aimed at.
    on: BTreeSet<usize>,
}

impl PropRule {
    fn when(&self) -> String {
        let on: Vec<String> = self
            .on
            .iter()
            .map(|n| format!("(.delivery_id | endswith(\"{n:012}\"))"))
            .collect();
        let aimed = if on.is_empty() {
            "false".to_string()
        } else {
            format!("({})", on.join(" or "))
        };
        match self.effect {
            Effect::Decide => aimed,
            Effect::Error => format!("{aimed} and error(\"boom\")"),
            Effect::Slow => format!("{aimed} and {SLOW}"),
        }
    }
}

fn prop_rule(deliveries: usize, effects: Vec<Effect>) -> impl Strategy<Value = PropRule> {
    (
        proptest::sample::select(effects),
        proptest::collection::btree_set(0..deliveries, 0..=3),
    )
        .prop_map(|(effect, on)| PropRule { effect, on })
}

/// A case: the deliveries, the saved (hand-written) rules, the pack's rules and where they go
/// among them, and the call's `max_child_faults`.
fn case() -> impl Strategy<Value = (usize, Vec<PropRule>, Vec<PropRule>, usize, u32)> {
    (1usize..=16).prop_flat_map(|n| {
        (
            Just(n),
            // Hand-written rules never run past the budget here: a stop they cause would hide
            // nothing of the pack's that the property could not see.
            proptest::collection::vec(prop_rule(n, vec![Effect::Decide, Effect::Error]), 0..3),
            proptest::collection::vec(
                prop_rule(n, vec![Effect::Decide, Effect::Error, Effect::Slow]),
                1..4,
            ),
            0usize..3,
            1u32..=3,
        )
    })
}

fn configuration(rules: &[(String, &PropRule)]) -> Configuration {
    let rules: Vec<Value> = rules
        .iter()
        .map(|(id, r)| json!({"id": id, "when": r.when(), "action": {"queue": "forge"}}))
        .collect();
    Configuration::text(json!({ "rules": rules }).to_string())
}

/// The rule that decides (or faults on) delivery `d` under `rules`, first match wins.
fn deciding<'a>(rules: &'a [(String, &PropRule)], d: usize) -> Option<(&'a str, Effect)> {
    rules
        .iter()
        .find(|(_, r)| r.on.contains(&d))
        .map(|(id, r)| (id.as_str(), r.effect))
}

/// A plan is refused (`pack_rule_faults`) if and only if some pack rule faulted on a delivery
/// the router evaluated; each fault names the rule that faulted; and when no hand-written rule
/// faults, a pack rule that faults anywhere always refuses it (a stop keeps its blame).
#[test]
fn a_plan_is_refused_if_and_only_if_a_pack_rule_faulted_on_an_evaluated_delivery() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let pool: Arc<SandboxPool> = runtime.block_on(async {
        let mut config = SandboxConfig::new(binary());
        config.children = 2;
        config.budget = Duration::from_millis(20);
        config.spares = 1;
        SandboxPool::start(config)
            .await
            .expect("sandbox pool starts")
    });
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 40,
        failure_persistence: None,
        ..Default::default()
    });
    runner
        .run(&case(), |(n, hand, pack, at, max_faults)| {
            let ds: Vec<StoredDelivery> = deliveries(n);
            let saved: Vec<(String, &PropRule)> = hand
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("hand-{i}"), r))
                .collect();
            let pack_ids: Vec<String> = (0..pack.len()).map(|i| format!("p--{i}")).collect();
            let mut candidate = saved.clone();
            let at = at.min(candidate.len());
            for (i, r) in pack.iter().enumerate().rev() {
                candidate.insert(at, (pack_ids[i].clone(), r));
            }
            let resp = runtime
                .block_on(pool.evaluate_as(
                    &context(),
                    &[configuration(&saved), configuration(&candidate)],
                    &ds,
                    &Work {
                        class: Some(Class::Replay),
                        tenant: "human:prop".into(),
                        max_child_faults: max_faults,
                        ..Work::default()
                    },
                ))
                .expect("evaluates");
            let mut evidence = Evidence::default();
            for (i, r) in resp.results.iter().enumerate() {
                evidence.read(
                    Delivered {
                        event_id: &format!("ev-{i}"),
                        received_at_ms: i as i64,
                        source: "github",
                    },
                    &r.decisions[0],
                    &r.decisions[1],
                );
            }
            let refused = !evidence.pack_rule_faults(&pack_ids).is_empty();
            // The oracle: which evaluated deliveries a pack rule faults on, from the rules
            // alone.
            let mut pack_faulted = false;
            let mut pack_faults_anywhere = false;
            for (i, r) in resp.results.iter().enumerate() {
                let after = &r.decisions[1];
                let expected = deciding(&candidate, i);
                let pack_fault = expected.is_some_and(|(id, effect)| {
                    effect != Effect::Decide && pack_ids.iter().any(|p| p == id)
                });
                pack_faults_anywhere |= pack_fault;
                if after.fault_code == fault::NOT_EVALUATED {
                    continue;
                }
                pack_faulted |= pack_fault;
                match expected {
                    Some((id, Effect::Decide)) => {
                        prop_assert_eq!(&after.rule_id, id, "delivery {}: {:?}", i, after)
                    }
                    Some((id, _)) => {
                        prop_assert!(!after.fault_code.is_empty(), "delivery {}: {:?}", i, after);
                        prop_assert_eq!(
                            &after.rule_id,
                            id,
                            "the fault names its rule: {:?}",
                            after
                        );
                    }
                    None => prop_assert!(after.fault_code.is_empty(), "{:?}", after),
                }
            }
            prop_assert_eq!(
                refused,
                pack_faulted,
                "refused iff a pack rule faulted: {:?}",
                evidence
            );
            prop_assert_eq!(
                refused,
                pack_faults_anywhere,
                "no hand-written rule runs past the budget, so a stop hides no pack fault: {:?}",
                evidence
            );
            Ok(())
        })
        .expect("property holds");
}
