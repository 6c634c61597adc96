//! Guarded changes (issue 46), with real routers and real ingest: a confirm starts a guard (the
//! replaced configuration in the shadow of the confirmed one); deliveries of a kind the plan's
//! replay never held, which the new configuration drops and the old one queued, breach it; the
//! change is reverted to exactly the version it replaced, named in its history.

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_control::store::TodoFilter;
use switchboard_control::store::{Page, SourceType};
use switchboard_model::Label;
use switchboard_model::guard::RecoveryState;
use switchboard_model::guard::{Breach, OnBreach};
use switchboard_model::trial::TrialEnd;
use switchboard_proto::control::v1::rule_pack_event::Event;
use switchboard_proto::control::v1::{
    ConfirmRulePackPlanRequest, GetRuleGuardRequest, GetRulePackPlanRequest, GuardOptions,
    InstallRulePackRequest, PlanState,
};

use crate::control_harness::{
    Control, ControlSetup, TestDb, eventually, eventually_some, on_every_backend, save_rules,
    webhook,
};
use crate::ingest::{router, routing_config};
use crate::pack_api::{Api, owner};
use crate::support::payloads;
use crate::trials::{CI_KINDS, CI_RULE, send};

on_every_backend! {
    a_change_that_drops_work_its_replay_never_saw_is_reverted_to_exactly_the_replaced_version,
    a_second_change_after_the_confirm_is_never_reverted_over,
    two_control_replicas_and_a_router_killed_mid_window_revert_once_and_recover_each_delivery_once,
    a_plan_sets_its_guard_and_a_webhook_whose_default_is_alert_keeps_a_breached_change,
    a_breach_judged_after_a_later_change_alerts_and_never_reverts_over_it,
}

/// What every guard test starts from: a webhook whose rules send CI deliveries to `triage` (a
/// queue its past never fed), its owner's API, and the GitHub payloads split into CI kinds
/// and the rest. The past holds no CI delivery, so a drop-ci-noise plan's replay never sees
/// the CI drops it will make.
struct Scene {
    _router: crate::support::RouterProcess,
    control: Control,
    scope: switchboard_control::OwnerScope,
    api: Api,
    hook: switchboard_control::store::Webhook,
    ci: Vec<crate::support::Payload>,
    rest: Vec<crate::support::Payload>,
}

/// The webhook and payloads of a [`Scene`], without a control: its owner and credential, the
/// webhook, and the GitHub payloads split into CI kinds and the rest.
struct Parts {
    scope: switchboard_control::OwnerScope,
    credential: String,
    hook: switchboard_control::store::Webhook,
    ci: Vec<crate::support::Payload>,
    rest: Vec<crate::support::Payload>,
}

async fn parts(db: &TestDb) -> Parts {
    let (scope, credential) = owner(
        &db.store,
        "alice",
        &["webhooks", "webhook-rules", "rule-pack-confirm"],
    )
    .await;
    let mut routing = routing_config();
    routing["rules"]
        .as_array_mut()
        .expect("rules")
        .push(json!({"id": "ci", "when": CI_RULE, "action": {"queue": "triage"}}));
    let hook = webhook(&db.store, &scope, SourceType::Github, Some(routing)).await;
    let (ci, rest): (Vec<_>, Vec<_>) = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .partition(|p| CI_KINDS.contains(&p.event.as_str()));
    Parts {
        scope,
        credential,
        hook,
        ci,
        rest,
    }
}

async fn scene(db: &TestDb) -> Scene {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let Parts {
        scope,
        credential,
        hook,
        ci,
        rest,
    } = parts(db).await;
    let api = Api::connect(control.grpc, &credential).await;
    send(&control, &hook, &rest, "past", 1).await;
    Scene {
        _router: router,
        control,
        scope,
        api,
        hook,
        ci,
        rest,
    }
}

async fn a_change_that_drops_work_its_replay_never_saw_is_reverted_to_exactly_the_replaced_version(
    db: TestDb,
) {
    let Scene {
        _router,
        control,
        scope,
        api,
        hook,
        ci,
        rest,
    } = scene(&db).await;
    let replaced = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    let plan = api
        .install(InstallRulePackRequest {
            webhook_id: hook.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        })
        .await
        .expect("a plan");
    // The guard is part of the plan: a person accepts it with the change.
    let planned_guard = &plan["guard"];
    assert_eq!(planned_guard["max_deliveries"], 1000, "{planned_guard}");
    assert_eq!(planned_guard["max_duration_ms"], 7 * 24 * 3_600_000i64);
    assert_eq!(planned_guard["on_breach"], "revert");
    assert_eq!(planned_guard["on_breach_from"], "webhook_default");
    // Held to the lost work the replay showed (the pack's bot drops), whatever it is.
    assert!(
        planned_guard["forecast"]["lost_work"].is_u64(),
        "{planned_guard}"
    );
    assert!(planned_guard["forecast"]["deliveries"].as_u64() > Some(0));
    let token = plan["plan_token"].as_str().expect("token").to_string();
    let applied = api
        .packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: token.clone(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("applied")
        .into_inner();
    let Some(Event::Applied(applied)) = applied.event else {
        panic!("not applied: {applied:?}");
    };
    let guard = db
        .store
        .running_trials(&hook.id)
        .await
        .expect("running")
        .into_iter()
        .find(|t| t.guard.is_some())
        .expect("a guard started at the confirm");
    assert_eq!(applied.guard_id, guard.id, "the confirm names its guard");
    assert_eq!(guard.limits.max_deliveries, Some(1000), "the plan's window");
    let terms = guard.guard.clone().expect("terms");
    assert_eq!(terms.on_breach, OnBreach::Revert);
    assert_eq!(
        (terms.replaced_version, terms.confirmed_version),
        (replaced.config_version, applied.version)
    );
    assert_eq!(
        guard.candidate, replaced.configuration,
        "the old rules in the shadow"
    );
    assert_eq!(guard.base_config_digest, applied.digest);
    // A guard is no trial: the trial verbs do not see it, and it takes no trial's place.
    assert!(
        db.store
            .list_trials(&scope, &hook.id)
            .await
            .expect("trials")
            .is_empty()
    );

    // Ordinary deliveries first: what the forecast said; no breach.
    send(&control, &hook, &rest, "ordinary", 1).await;
    // Then CI deliveries, which the new rules drop and the old ones queued.
    let sent_at = Instant::now();
    send(&control, &hook, &ci, "ci", 1).await;
    eventually(
        Duration::from_secs(20),
        "the guard reverted the change",
        || async {
            db.store
                .get_webhook(&scope, &hook.id)
                .await
                .is_ok_and(|w| w.config_digest == replaced.config_digest)
        },
    )
    .await;
    let reverted_in = sent_at.elapsed();
    let now = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    assert_eq!(
        now.configuration, replaced.configuration,
        "exactly the replaced version"
    );
    assert_eq!(
        now.provenance, replaced.provenance,
        "its packs as they were"
    );
    let ended = db
        .store
        .get_guard(&scope, &guard.id)
        .await
        .expect("the guard");
    assert_eq!(ended.end, Some(TrialEnd::Breached));
    let terms = ended.guard.expect("terms");
    assert_eq!(terms.reverted_version, Some(now.config_version));
    // Lost work: the CI drops the replay never saw, judged unforeseen after the third, or
    // above the forecast's rate when one batch held them all.
    let count = match terms.breach.clone() {
        Some(Breach::UnforeseenLostWork { from, to, count }) => {
            assert_eq!(
                (from, to),
                (Label::queue("triage").into_owned(), Label::Drop)
            );
            count
        }
        Some(Breach::LostWork(rate)) => rate.observed_count.min(3),
        other => panic!("not a lost-work breach: {other:?}"),
    };
    assert!(count >= 3, "{count}");
    let history = db
        .store
        .list_history(&scope, &hook.id, &Page::first(1))
        .await
        .expect("history");
    let last = &history.items[0];
    assert_eq!(last.change.op, "guard_revert");
    let provenance = last.provenance.clone().expect("provenance");
    assert_eq!(provenance.reverted_by.as_deref(), Some("guard"));
    assert_eq!(provenance.guard.as_deref(), Some(guard.id.as_str()));
    assert_eq!(
        provenance.breach,
        terms.breach.as_ref().map(ToString::to_string),
        "the breach in words"
    );
    // Issue 47: the revert is one entry of the change log, naming its guard and breach, in
    // the revert's own transaction; the log verifies.
    let reverts: Vec<switchboard_model::change_log::ChangeEntry> = db
        .store
        .list_changes(None, 0, 1000)
        .await
        .expect("the log")
        .iter()
        .map(|e| serde_json::from_str(&e.text).expect("an entry"))
        .filter(|e: &switchboard_model::change_log::ChangeEntry| {
            e.detail.get("op").map(String::as_str) == Some("guard_revert")
        })
        .collect();
    assert_eq!(reverts.len(), 1, "{reverts:?}");
    assert_eq!(reverts[0].version, Some(last.version));
    assert_eq!(reverts[0].evidence.get("guard"), Some(&guard.id));
    assert_eq!(
        reverts[0].evidence.get("breach"),
        provenance.breach.as_ref()
    );
    assert!(db.store.verify_change_log().await.expect("read").is_ok());
    // Measured, not timed: issue 46's bound is 5 s from the breach.
    eprintln!("CI deliveries sent to reverted: {reverted_in:?}");

    // The plan reads as reverted, and its status carries the guard's report.
    let status = api
        .packs()
        .get_rule_pack_plan(GetRulePackPlanRequest {
            plan_token: token.clone(),
        })
        .await
        .expect("status")
        .into_inner();
    assert_eq!(status.state, PlanState::Reverted as i32);
    let reported = status.guard.expect("the plan's guard");
    assert_eq!(reported.reverted_version, Some(now.config_version));
    assert!(
        reported
            .breach
            .as_ref()
            .is_some_and(|b| b.reason.ends_with("lost_work")),
        "{reported:?}"
    );

    // The lost work is recovered by itself (confirm_policy self): every CI delivery the
    // confirmed rules dropped is re-routed under the restored ones, once each, oldest first.
    let recovery = eventually_some(Duration::from_secs(20), "the recovery applied", || async {
        db.store
            .get_guard(&scope, &guard.id)
            .await
            .ok()
            .and_then(|g| g.guard?.recovery)
            .filter(|r| r.state == RecoveryState::Applied)
    })
    .await;
    assert!(recovery.todos_created >= count, "{recovery:?}");
    assert_eq!(recovery.applied, recovery.changes, "{recovery:?}");
    let (redrive, outcomes) = db
        .store
        .get_redrive(&scope, &recovery.redrive_id)
        .await
        .expect("the recovery redrive");
    assert_eq!(redrive.base_config_version, now.config_version);
    let arrival: Vec<i64> = redrive.entries.iter().map(|e| e.received_at).collect();
    assert!(arrival.windows(2).all(|w| w[0] <= w[1]), "oldest first");
    // What the reverted rules decided other than a todo: the CI drops the replay never saw
    // (back to triage) and the bot drops it forecast (back to their queues) alike.
    let triaged = redrive
        .entries
        .iter()
        .filter(|e| e.changes() && e.after == Label::queue("triage").into_owned())
        .count() as u64;
    assert!(triaged >= count, "{triaged} CI deliveries recovered");
    assert!(
        redrive
            .entries
            .iter()
            .all(|e| ["drop", "quarantine", "fault"].contains(&e.before.as_str())),
        "never a delivery with a todo"
    );
    assert_eq!(outcomes.expect("applied").len() as u64, recovery.changes);
    // Every CI delivery has exactly one triage todo: none lost, none twice.
    let triage = db
        .store
        .list_todos(&scope, "triage", TodoFilter::All, &Page::first(200))
        .await
        .expect("todos");
    assert_eq!(triage.items.len(), ci.len(), "one todo per CI delivery");
    let mut events: Vec<&str> = triage.items.iter().map(|t| t.event_id.as_str()).collect();
    events.sort_unstable();
    events.dedup();
    assert_eq!(events.len(), ci.len(), "no delivery twice");

    // get_rule_guard reads the same: the change's way round, breach, revert, recovery.
    let read = api
        .trials()
        .get_rule_guard(GetRuleGuardRequest {
            webhook_id: hook.id.clone(),
            guard_id: String::new(),
        })
        .await
        .expect("the guard")
        .into_inner();
    let report = read.report.clone().expect("report");
    assert_eq!(report.trial_id, guard.id);
    assert_eq!(
        read.recovery.as_ref().map(|r| r.state.as_str()),
        Some("applied")
    );
    let lost = report
        .evidence
        .iter()
        .find(|e| e.from == "queue:triage")
        .expect("the CI drops' evidence");
    assert_eq!(
        (lost.to.as_str(), lost.unforeseen, lost.loses_work),
        ("drop", true, true),
        "from the replaced rules' decision to the confirmed rules'"
    );
    control.stop().await;
}

/// Issue 46: the webhook changes again after the confirm (a hand edit). Deliveries the change
/// would have dropped then come, decided by the later rules: they are not the guard's evidence,
/// the guard ends (`stale`) without a breach, and nothing reverts over the later change.
async fn a_second_change_after_the_confirm_is_never_reverted_over(db: TestDb) {
    let Scene {
        _router,
        control,
        scope,
        api,
        hook,
        ci,
        ..
    } = scene(&db).await;
    let plan = api
        .install(InstallRulePackRequest {
            webhook_id: hook.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        })
        .await
        .expect("a plan");
    api.packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: plan["plan_token"].as_str().expect("token").into(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("applied");
    let guard = db
        .store
        .running_trials(&hook.id)
        .await
        .expect("running")
        .into_iter()
        .find(|t| t.guard.is_some())
        .expect("a guard");
    // A hand edit after the confirm: CI goes nowhere at all now.
    let mut later = db
        .store
        .get_webhook(&scope, &hook.id)
        .await
        .expect("hook")
        .configuration;
    later.rules.retain(|r| r.id.as_deref() != Some("ci"));
    save_rules(
        &db.store,
        &scope,
        &hook.id,
        serde_json::to_value(&later).expect("json"),
    )
    .await;
    let edited = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    send(&control, &hook, &ci, "ci", 1).await;
    eventually(Duration::from_secs(20), "the guard ended", || async {
        db.store
            .get_guard(&scope, &guard.id)
            .await
            .is_ok_and(|g| !g.running())
    })
    .await;
    let ended = db.store.get_guard(&scope, &guard.id).await.expect("guard");
    assert_eq!(ended.end, Some(TrialEnd::Stale));
    let terms = ended.guard.expect("terms");
    assert_eq!((terms.breach, terms.reverted_version), (None, None));
    let now = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    assert_eq!(
        now.config_digest, edited.config_digest,
        "the later change stands"
    );
    let history = db
        .store
        .list_history(&scope, &hook.id, &Page::first(10))
        .await
        .expect("history");
    assert!(history.items.iter().all(|h| h.change.op != "guard_revert"));
    control.stop().await;
}

/// Issue 46 with the parts a deployment has: two control processes ingesting the same
/// webhook's deliveries (each runs the guard's shadow on what it ingests, and judges after its
/// own batches), two routers of which one is killed mid-window. The change is reverted once —
/// one replica ends the guard as breached, the other finds it ended — and every CI delivery the
/// change dropped is recovered once: each has exactly one triage todo.
async fn two_control_replicas_and_a_router_killed_mid_window_revert_once_and_recover_each_delivery_once(
    db: TestDb,
) {
    use crate::control_harness::{post, signed};
    use crate::rule_packs::ControlProcess;
    let routers = [router(), router()];
    let both = format!("{},{}", routers[0].addr, routers[1].addr);
    let Parts {
        scope,
        credential,
        hook,
        ci,
        rest,
    } = parts(&db).await;
    let replaced = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    let env = [("SWITCHBOARD_INGEST_PER_WEBHOOK_PER_MINUTE", "100000")];
    let replicas = [
        ControlProcess::spawn(&db.url, &both, &env),
        ControlProcess::spawn(&db.url, &both, &env),
    ];
    // Deliveries alternate between the replicas, as a load balancer spreads them.
    let spread = |payloads: Vec<crate::support::Payload>, tag: &'static str| {
        let hook = hook.clone();
        let ingest: Vec<std::net::SocketAddr> = replicas
            .iter()
            .map(|r| r.http.parse().expect("ingest address"))
            .collect();
        async move {
            for (i, p) in payloads.iter().enumerate() {
                let headers = signed(
                    "github",
                    &p.event,
                    &format!("{tag}-{i}"),
                    &hook.secret,
                    &p.body,
                );
                let answer = post(
                    ingest[i % 2],
                    &format!("/hooks/{}", hook.id),
                    &headers,
                    &p.body,
                )
                .await;
                assert_eq!(answer.status, 202, "{answer:?}");
            }
            payloads.len()
        }
    };
    spread(rest.clone(), "past").await;
    let grpc: std::net::SocketAddr = replicas[0].grpc.parse().expect("grpc address");
    let api = Api::connect(grpc, &credential).await;
    let plan = api
        .install(InstallRulePackRequest {
            webhook_id: hook.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        })
        .await
        .expect("a plan");
    api.packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: plan["plan_token"].as_str().expect("token").into(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("applied");

    // Ordinary deliveries through both replicas while one router is killed.
    let mut doomed = routers;
    let pid = doomed[0].child.id();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    });
    let ordinary: Vec<_> = rest.iter().cycle().take(60).cloned().collect();
    spread(ordinary, "ordinary").await;
    killer.await.expect("killed");
    let _ = doomed[0].child.wait();
    // Then CI deliveries, through both replicas: the new rules drop them.
    let ci_sent: Vec<_> = ci
        .iter()
        .cycle()
        .take(ci.len().max(4) * 2)
        .cloned()
        .collect();
    let ci_count = spread(ci_sent, "ci").await;

    eventually(Duration::from_secs(30), "the change reverted", || async {
        db.store
            .get_webhook(&scope, &hook.id)
            .await
            .is_ok_and(|w| w.config_digest == replaced.config_digest)
    })
    .await;
    let guard = db
        .store
        .newest_guard(&scope, &hook.id)
        .await
        .expect("read")
        .expect("a guard");
    let recovery = eventually_some(Duration::from_secs(30), "the recovery applied", || async {
        db.store
            .get_guard(&scope, &guard.id)
            .await
            .ok()
            .and_then(|g| g.guard?.recovery)
            .filter(|r| r.state == RecoveryState::Applied)
    })
    .await;
    assert_eq!(recovery.applied, recovery.changes, "{recovery:?}");
    let history = db
        .store
        .list_history(&scope, &hook.id, &Page::first(50))
        .await
        .expect("history");
    assert_eq!(
        history
            .items
            .iter()
            .filter(|h| h.change.op == "guard_revert")
            .count(),
        1,
        "reverted once"
    );
    // Every CI delivery ends with exactly one triage todo: recovered or routed after the
    // revert, never both, never none. Wait for deliveries the killed router left pending.
    eventually(
        Duration::from_secs(30),
        "every CI delivery has its todo",
        || async {
            db.store
                .list_todos(&scope, "triage", TodoFilter::All, &Page::first(200))
                .await
                .is_ok_and(|t| t.items.len() >= ci_count)
        },
    )
    .await;
    let triage = db
        .store
        .list_todos(&scope, "triage", TodoFilter::All, &Page::first(200))
        .await
        .expect("todos");
    let mut events: Vec<&str> = triage.items.iter().map(|t| t.event_id.as_str()).collect();
    events.sort_unstable();
    events.dedup();
    assert_eq!(
        (triage.items.len(), events.len()),
        (ci_count, ci_count),
        "one todo per CI delivery"
    );
}

/// Issue 46: the guard is set per plan and by the webhook's operator-set default. Options out
/// of range are refused before anything is replayed, naming the field; a plan that names
/// none takes the webhook's default (here `alert`), one that names `on_breach` keeps it. A
/// breach of an `alert` guard is recorded and shown, and the change stays: no revert, no
/// recovery, the plan still applied.
async fn a_plan_sets_its_guard_and_a_webhook_whose_default_is_alert_keeps_a_breached_change(
    db: TestDb,
) {
    let Scene {
        _router,
        control,
        scope,
        api,
        hook,
        ci,
        ..
    } = scene(&db).await;
    let plan_with = |guard: Option<GuardOptions>| InstallRulePackRequest {
        webhook_id: hook.id.clone(),
        name: "drop-ci-noise".into(),
        guard,
        ..Default::default()
    };
    for (bad, field) in [
        (
            GuardOptions {
                max_deliveries: Some(0),
                ..GuardOptions::default()
            },
            "guard.max_deliveries",
        ),
        (
            GuardOptions {
                max_duration_ms: Some(31 * 24 * 3_600_000),
                ..GuardOptions::default()
            },
            "guard.max_duration",
        ),
    ] {
        let refused = api
            .install(plan_with(Some(bad)))
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(refused.message().contains(field), "{refused:?}");
    }
    db.store
        .set_guard_on_breach(&scope, &hook.id, Some(OnBreach::Alert))
        .await
        .expect("an operator's default");
    let asked = api
        .install(plan_with(Some(GuardOptions {
            max_deliveries: Some(50),
            on_breach: switchboard_proto::control::v1::OnBreach::Revert as i32,
            ..GuardOptions::default()
        })))
        .await
        .expect("a plan");
    assert_eq!(
        (
            &asked["guard"]["on_breach"],
            &asked["guard"]["on_breach_from"],
            &asked["guard"]["max_deliveries"]
        ),
        (&json!("revert"), &json!("plan"), &json!(50)),
        "{asked}"
    );
    let plan = api.install(plan_with(None)).await.expect("a plan");
    assert_eq!(
        (
            &plan["guard"]["on_breach"],
            &plan["guard"]["on_breach_from"]
        ),
        (&json!("alert"), &json!("webhook_default")),
        "{plan}"
    );
    let token = plan["plan_token"].as_str().expect("token").to_string();
    api.packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: token.clone(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("applied");
    let confirmed = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    send(&control, &hook, &ci, "ci", 1).await;
    let guard = eventually_some(Duration::from_secs(20), "the guard breached", || async {
        db.store
            .newest_guard(&scope, &hook.id)
            .await
            .ok()
            .flatten()
            .filter(|g| g.end == Some(TrialEnd::Breached))
    })
    .await;
    let terms = guard.guard.expect("terms");
    assert_eq!(terms.on_breach, OnBreach::Alert);
    assert!(terms.breach.is_some());
    assert_eq!((terms.reverted_version, terms.recovery), (None, None));
    let now = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    assert_eq!(
        now.config_digest, confirmed.config_digest,
        "the change stays"
    );
    let status = api
        .packs()
        .get_rule_pack_plan(GetRulePackPlanRequest { plan_token: token })
        .await
        .expect("status")
        .into_inner();
    assert_eq!(status.state, PlanState::Applied as i32);
    assert!(
        status.guard.and_then(|g| g.breach).is_some(),
        "the breach is shown"
    );
    control.stop().await;
}

/// Issue 46: a guard that breaches on what it counted before the webhook changed again (the
/// later save landing between its batch and its judgement) alerts: the breach is recorded and
/// shown, and the later change stands — the revert's conditional save refuses to go over it.
async fn a_breach_judged_after_a_later_change_alerts_and_never_reverts_over_it(db: TestDb) {
    use switchboard_control::store::TrialBatch;
    use switchboard_model::plan::Routed;
    let Scene {
        _router,
        control,
        scope,
        api,
        hook,
        ..
    } = scene(&db).await;
    let plan = api
        .install(InstallRulePackRequest {
            webhook_id: hook.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        })
        .await
        .expect("a plan");
    let token = plan["plan_token"].as_str().expect("token").to_string();
    api.packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: token.clone(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("applied");
    let guard = db
        .store
        .newest_guard(&scope, &hook.id)
        .await
        .expect("read")
        .expect("a guard");
    // What the guard counted: six deliveries the confirmed rules dropped and the replaced
    // ones sent to triage (live decision first, the shadow's second, as the runner counts).
    let mut batch = TrialBatch::default();
    let triage = Routed {
        label: Label::queue("triage").into_owned(),
        rule_id: Some("ci".into()),
    };
    for n in 0..6 {
        batch.record(&format!("ev_{n}"), &Label::Drop, Some(&triage));
    }
    db.store
        .record_trial(&guard.id, &batch)
        .await
        .expect("counted");
    // A hand edit lands before the judgement.
    let mut later = db
        .store
        .get_webhook(&scope, &hook.id)
        .await
        .expect("hook")
        .configuration;
    later.rules.retain(|r| r.id.as_deref() != Some("ci"));
    save_rules(
        &db.store,
        &scope,
        &hook.id,
        serde_json::to_value(&later).expect("json"),
    )
    .await;
    let edited = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    let capabilities = switchboard_control::state::Capabilities::default();
    let ctx = switchboard_control::redrive::Ctx {
        store: &db.store,
        routers: &control.routers,
        capabilities: &capabilities,
        budget_ms: 50,
        chunk: 100,
    };
    switchboard_control::trials::guards::judge_after_batch(&ctx, &guard).await;
    let judged = db.store.get_guard(&scope, &guard.id).await.expect("guard");
    assert_eq!(judged.end, Some(TrialEnd::Breached));
    let terms = judged.guard.expect("terms");
    assert!(terms.breach.is_some(), "the breach is recorded");
    assert_eq!((terms.reverted_version, terms.recovery), (None, None));
    let now = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    assert_eq!(
        now.config_digest, edited.config_digest,
        "the later change stands"
    );
    let history = db
        .store
        .list_history(&scope, &hook.id, &Page::first(10))
        .await
        .expect("history");
    assert!(history.items.iter().all(|h| h.change.op != "guard_revert"));
    let status = api
        .packs()
        .get_rule_pack_plan(GetRulePackPlanRequest { plan_token: token })
        .await
        .expect("status")
        .into_inner();
    assert_eq!(status.state, PlanState::Applied as i32, "not reverted");
    control.stop().await;
}
