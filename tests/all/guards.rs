//! Guarded changes (issue 46), with real routers and real ingest: a confirm starts a guard (the
//! replaced configuration in the shadow of the confirmed one); deliveries of a kind the plan's
//! replay never held, which the new configuration drops and the old one queued, breach it; the
//! change is reverted to exactly the version it replaced, named in its history.

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_control::store::{Page, SourceType};
use switchboard_model::Label;
use switchboard_model::guard::{Breach, OnBreach};
use switchboard_model::trial::TrialEnd;
use switchboard_proto::control::v1::rule_pack_event::Event;
use switchboard_proto::control::v1::{ConfirmRulePackPlanRequest, InstallRulePackRequest};

use crate::control_harness::{
    Control, ControlSetup, TestDb, eventually, on_every_backend, save_rules, webhook,
};
use crate::ingest::{router, routing_config};
use crate::pack_api::{Api, owner};
use crate::support::payloads;
use crate::trials::{CI_KINDS, CI_RULE, send};

on_every_backend! {
    a_change_that_drops_work_its_replay_never_saw_is_reverted_to_exactly_the_replaced_version,
    a_second_change_after_the_confirm_is_never_reverted_over,
}

async fn a_change_that_drops_work_its_replay_never_saw_is_reverted_to_exactly_the_replaced_version(
    db: TestDb,
) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let (scope, credential) = owner(
        &db.store,
        "alice",
        &["webhooks", "webhook-rules", "rule-pack-confirm"],
    )
    .await;
    // CI deliveries, when they come, go to triage: a queue the history never fed.
    let mut routing = routing_config();
    routing["rules"]
        .as_array_mut()
        .expect("rules")
        .push(json!({"id": "ci", "when": CI_RULE, "action": {"queue": "triage"}}));
    let hook = webhook(&db.store, &scope, SourceType::Github, Some(routing)).await;
    let replaced = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    let api = Api::connect(control.grpc, &credential).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    let (ci, rest): (Vec<_>, Vec<_>) = github
        .iter()
        .cloned()
        .partition(|p| CI_KINDS.contains(&p.event.as_str()));
    // The past holds no CI delivery: the plan loses no work over its window.
    send(&control, &hook, &rest, "past", 1).await;
    let plan = api
        .install(InstallRulePackRequest {
            webhook_id: hook.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        })
        .await
        .expect("a plan");
    let applied = api
        .packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: plan["plan_token"].as_str().expect("token").into(),
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
    let Some(Breach::UnforeseenLostWork { from, to, count }) = terms.breach.clone() else {
        panic!("not the unforeseen breach: {:?}", terms.breach);
    };
    assert_eq!(
        (from, to),
        (Label::queue("triage").into_owned(), Label::Drop)
    );
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
    assert!(
        provenance
            .breach
            .as_deref()
            .is_some_and(|b| b.contains("lost work the replay never saw")),
        "{provenance:?}"
    );
    // Measured, not timed: issue 46's bound is 5 s from the breach.
    eprintln!("CI deliveries sent to reverted: {reverted_in:?}");
    control.stop().await;
}

/// Issue 46: the webhook changes again after the confirm (a hand edit). Deliveries the change
/// would have dropped then come, decided by the later rules: they are not the guard's evidence,
/// the guard ends (`stale`) without a breach, and nothing reverts over the later change.
async fn a_second_change_after_the_confirm_is_never_reverted_over(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
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
    let api = Api::connect(control.grpc, &credential).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    let (ci, rest): (Vec<_>, Vec<_>) = github
        .iter()
        .cloned()
        .partition(|p| CI_KINDS.contains(&p.event.as_str()));
    send(&control, &hook, &rest, "past", 1).await;
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
