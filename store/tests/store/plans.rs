use std::time::Duration;

use switchboard_model::Configuration;
use switchboard_model::plan::StoredPlan;
use switchboard_store::error::PLAN_STALE;
use switchboard_store::{Actor, NewPlan, SaveConfiguration, Webhook, new_plan_token};
use switchboard_store::{Clock, Error, OwnerScope, Store};

use crate::harness::{TestDb, config_routing_to, human, not_found, webhook};

/// Inserts a plan for `wh` (candidate: route to `forge`), returning (token, token hash).
async fn plan_for(store: &Store, wh: &Webhook) -> (String, String) {
    let (token, hash) = new_plan_token().unwrap();
    let plan = store
        .insert_plan(NewPlan {
            webhook_id: wh.id.clone(),
            owner_scope: wh.owner_scope.clone(),
            token_hash: hash.clone(),
            pack_name: "drop-ci-noise".into(),
            pack_version: "1.0.0".into(),
            params_digest: "p".into(),
            candidate: config_routing_to("forge"),
            base_config_version: wh.config_version,
            expires_at: store.clock().now_ms() + 15 * 60 * 1000,
            plan: StoredPlan::default(),
        })
        .await
        .unwrap();
    assert_eq!(plan.candidate_digest, config_routing_to("forge").digest());
    assert_eq!(plan.used_at, None);
    (token, hash)
}

#[track_caller]
fn assert_stale<T: std::fmt::Debug>(r: Result<T, Error>) {
    match r {
        Err(Error::FailedPrecondition { reason, .. }) if reason == PLAN_STALE => {}
        other => panic!("expected plan_stale, got {other:?}"),
    }
}

pub async fn a_plan_is_consumed_once(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let (token, hash) = plan_for(&db, &wh).await;
    assert_ne!(token, hash, "only the hash is stored");
    let read = db.plan_by_token(&hash, &alice).await.unwrap();
    assert_eq!(
        (
            read.pack_name.as_str(),
            read.base_config_version,
            read.used_at
        ),
        ("drop-ci-noise", 1, None)
    );
    let used = db.consume_plan(&hash, &alice).await.unwrap();
    assert!(used.used_at.is_some());
    assert_eq!(used.id, read.id);
    assert_stale(db.consume_plan(&hash, &alice).await);
    not_found(db.consume_plan(&"0".repeat(64), &alice).await, "plan");
}

pub async fn twenty_concurrent_consumers_one_wins(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let (_, hash) = plan_for(&db, &wh).await;
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (store, scope, hash) = (db.store.clone(), alice.clone(), hash.clone());
            tokio::spawn(async move { store.consume_plan(&hash, &scope).await })
        })
        .collect();
    let (mut won, mut stale) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(Error::FailedPrecondition { reason, .. }) if reason == PLAN_STALE => stale += 1,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((won, stale), (1, 19));
}

pub async fn another_scopes_token_is_not_found(db: TestDb) {
    let alice = human(&db, "alice").await;
    let bob = human(&db, "bob").await;
    let wh = webhook(&db, &alice).await;
    let bobs = webhook(&db, &bob).await;
    let (_, hash) = plan_for(&db, &wh).await;
    let crossing = not_found(db.consume_plan(&hash, &bob).await, "plan");
    let unknown = not_found(db.consume_plan("not-a-hash", &bob).await, "plan");
    assert_eq!(crossing, unknown);
    not_found(db.plan_by_token(&hash, &bob).await, "plan");
    // Presenting alice's token on bob's own webhook saves nothing either.
    let confirm = SaveConfiguration {
        configuration: config_routing_to("forge"),
        plan_token_hash: Some(hash.clone()),
        ..Default::default()
    };
    not_found(db.save_configuration(&bob, &bobs.id, confirm).await, "plan");
    assert_eq!(
        db.get_webhook(&bob, &bobs.id).await.unwrap().config_version,
        1
    );
    // A plan for a webhook the scope does not own is refused at insert.
    let mut foreign = NewPlan {
        webhook_id: wh.id.clone(),
        owner_scope: bob.clone(),
        token_hash: "h".into(),
        pack_name: "x".into(),
        pack_version: "1".into(),
        params_digest: "p".into(),
        candidate: Configuration::default(),
        base_config_version: 1,
        expires_at: 0,
        plan: StoredPlan::default(),
    };
    not_found(db.insert_plan(foreign.clone()).await, "webhook");
    foreign.owner_scope = OwnerScope::team("nobody");
    not_found(db.insert_plan(foreign).await, "webhook");
    // None of that used alice's plan up.
    assert!(db.consume_plan(&hash, &alice).await.is_ok());
}

pub async fn expired_plan_is_stale(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let (_, hash) = plan_for(&store, &wh).await;
    clock.advance(Duration::from_secs(15 * 60));
    assert_stale(store.consume_plan(&hash, &alice).await);
    assert_eq!(
        store.plan_by_token(&hash, &alice).await.unwrap().used_at,
        None,
        "an expired plan is not used"
    );
    assert_eq!(
        store.purge_expired_plans(clock.now_ms() + 1).await.unwrap(),
        1
    );
    not_found(store.plan_by_token(&hash, &alice).await, "plan");
}

pub async fn confirm_saves_exactly_the_planned_candidate(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let (_, hash) = plan_for(&db, &wh).await;
    let confirm = |configuration| SaveConfiguration {
        configuration,
        actor: Actor::operator(),
        change: switchboard_model::ConfigurationChange {
            pack: Some("drop-ci-noise".into()),
            ..switchboard_model::ConfigurationChange::op("install_rule_pack")
        },
        provenance: Some(switchboard_model::ChangeProvenance {
            pack: "drop-ci-noise".into(),
            version: "1.0.0".into(),
            ..Default::default()
        }),
        plan_token_hash: Some(hash.clone()),
        ..Default::default()
    };
    // Another candidate than the plan's is refused and leaves the token usable.
    assert_stale(
        db.save_configuration(&alice, &wh.id, confirm(config_routing_to("triage")))
            .await,
    );
    assert_eq!(db.plan_by_token(&hash, &alice).await.unwrap().used_at, None);
    let saved = db
        .save_configuration(&alice, &wh.id, confirm(config_routing_to("forge")))
        .await
        .unwrap();
    assert_eq!((saved.version, saved.duplicate), (2, false));
    assert!(
        db.plan_by_token(&hash, &alice)
            .await
            .unwrap()
            .used_at
            .is_some()
    );
    // The same token again: used, so stale, and nothing more is saved.
    assert_stale(
        db.save_configuration(&alice, &wh.id, confirm(config_routing_to("forge")))
            .await,
    );
    assert_eq!(
        db.get_webhook(&alice, &wh.id).await.unwrap().config_version,
        2
    );
}

pub async fn confirm_refuses_a_plan_the_webhook_moved_past(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let (_, hash) = plan_for(&db, &wh).await;
    // Another session adds a rule after the plan was made.
    let edit = SaveConfiguration {
        configuration: config_routing_to("triage"),
        ..Default::default()
    };
    db.save_configuration(&alice, &wh.id, edit).await.unwrap();
    let confirm = SaveConfiguration {
        configuration: config_routing_to("forge"),
        plan_token_hash: Some(hash.clone()),
        ..Default::default()
    };
    match db.save_configuration(&alice, &wh.id, confirm).await {
        Err(Error::FailedPrecondition {
            reason,
            current_version: Some(2),
            ..
        }) => assert_eq!(reason, PLAN_STALE),
        other => panic!("expected plan_stale, got {other:?}"),
    }
    let now = db.get_webhook(&alice, &wh.id).await.unwrap();
    assert_eq!(
        (now.config_version, now.configuration),
        (2, config_routing_to("triage"))
    );
}

/// Migration 0007 from a database written at 0006: an endpoint that could install or remove
/// packs keeps the right to confirm (`confirm_rule_pack_plan`) and may read a plan's state; one
/// that could only list packs may read states; others gain nothing; webhooks keep confirming
/// as before (`self`).
pub async fn upgrading_from_0006_keeps_every_endpoints_right_to_confirm(db: TestDb) {
    use switchboard_store::{ConfirmPolicy, NewEndpoint};
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 6).await;
    let alice = human(&old, "alice").await;
    let hook = webhook(&old, &alice).await;
    let mut ids = Vec::new();
    for verbs in [
        vec!["install_rule_pack", "list_rule_packs"],
        vec!["remove_rule_pack"],
        vec!["list_rule_packs"],
        vec!["list_todos"],
    ] {
        let vended = old
            .vend_endpoint(NewEndpoint {
                name: format!("agent-{}", ids.len()),
                human_login: "alice".into(),
                owner_scope: alice.clone(),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
            })
            .await
            .expect("vend");
        ids.push(vended.endpoint.id);
    }
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    let mut held = Vec::new();
    for id in &ids {
        let e = new.get_endpoint(id).await.expect("kept");
        held.push((
            e.allows("confirm_rule_pack_plan"),
            e.allows("get_rule_pack_plan"),
        ));
    }
    assert_eq!(
        held,
        vec![(true, true), (true, true), (false, true), (false, false)]
    );
    let first = new.get_endpoint(&ids[0]).await.expect("kept");
    assert!(first.allows("install_rule_pack") && first.allows("list_rule_packs"));
    assert_eq!(
        new.get_webhook(&alice, &hook.id)
            .await
            .expect("kept")
            .confirm_policy,
        ConfirmPolicy::SelfConfirm
    );
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}

/// Migration 0020 from a database written at 0019 (issue 47): a plan pending there stays
/// pending with no approvals, its webhook reads the default rule, approvals are recorded once
/// per person, and an approval rule set afterwards reads back; the change log still verifies.
pub async fn upgrading_from_0019_keeps_pending_plans_and_records_approvals(db: TestDb) {
    use switchboard_model::approval::{ApprovalRule, Risk};
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 19).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let (_, hash) = plan_for(&old, &wh).await;
    let proposer = Actor {
        endpoint_id: Some("ep_x".into()),
        human_login: Some("alice".into()),
    };
    let until = old.clock().now_ms() + 60 * 60 * 1000;
    let pending = old
        .mark_plan_pending(&hash, &alice, &proposer, until)
        .await
        .expect("pending at 0019");
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    let read = new.get_webhook(&alice, &wh.id).await.expect("kept");
    assert_eq!(read.approval_rule, None, "no rule set: the default");
    assert_eq!(new.plan_approvals(&pending.id).await.expect("none"), vec![]);
    for _ in 0..2 {
        let given = new
            .record_approval(&pending.id, &alice, "bob", "digest")
            .await
            .expect("recorded");
        assert_eq!(given.len(), 1, "once per person: {given:?}");
        assert_eq!(given[0].person, "bob");
    }
    let mut rule = ApprovalRule::default();
    rule.tiers.insert(Risk::LostWork, 3);
    let set = new
        .set_approval_rule(&alice, &wh.id, Some(&rule))
        .await
        .expect("set");
    assert_eq!(set.approval_rule, Some(rule.clone()));
    assert_eq!(
        new.get_webhook(&alice, &wh.id)
            .await
            .expect("kept")
            .approval_rule,
        Some(rule)
    );
    // Another scope's plan is not found; a decided plan takes no approval.
    let other = human(&new, "mallory").await;
    assert!(matches!(
        new.record_approval(&pending.id, &other, "mallory", "d")
            .await,
        Err(Error::NotFound { .. })
    ));
    new.reject_plan(&pending.id, &alice, "carol", "no")
        .await
        .expect("rejected");
    assert_stale(new.record_approval(&pending.id, &alice, "dan", "d").await);
    assert!(new.verify_change_log().await.expect("verify").is_ok());
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}

/// Migration 0022 (issue 48) from a 0021 database with a pending plan in it: the plan is still
/// pending after the upgrade; a person dismisses it and the inbox's listing drops it, once;
/// another scope cannot, and the plan itself is kept as it was.
pub async fn upgrading_from_0021_keeps_pending_plans_and_a_person_dismisses_one(db: TestDb) {
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 21).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let proposer = Actor {
        endpoint_id: Some("ep_x".into()),
        human_login: Some("alice".into()),
    };
    let until = old.clock().now_ms() + 60 * 60 * 1000;
    let mut pending = Vec::new();
    for _ in 0..2 {
        let (_, hash) = plan_for(&old, &wh).await;
        let plan = old
            .mark_plan_pending(&hash, &alice, &proposer, until)
            .await
            .expect("pending at 0021");
        pending.push(plan.id);
    }
    assert_eq!(
        old.pending_plans(std::slice::from_ref(&alice))
            .await
            .expect("listed")
            .len(),
        2
    );
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    let listed = |store: Store| {
        let alice = alice.clone();
        async move {
            let mut ids: Vec<String> = store
                .pending_plans(std::slice::from_ref(&alice))
                .await
                .expect("listed")
                .into_iter()
                .map(|p| p.id)
                .collect();
            ids.sort();
            ids
        }
    };
    let mut all = pending.clone();
    all.sort();
    assert_eq!(listed(new.clone()).await, all, "kept through the upgrade");
    let mallory = human(&new, "mallory").await;
    assert!(matches!(
        new.dismiss_plan(&pending[0], &mallory, "mallory").await,
        Err(Error::NotFound { .. })
    ));
    new.dismiss_plan(&pending[0], &alice, "alice")
        .await
        .expect("dismissed");
    assert_eq!(listed(new.clone()).await, vec![pending[1].clone()]);
    assert!(
        matches!(
            new.dismiss_plan(&pending[0], &alice, "alice").await,
            Err(Error::NotFound { .. })
        ),
        "once"
    );
    let kept = new
        .plan_for_person(&pending[0], std::slice::from_ref(&alice))
        .await
        .expect("the plan itself is kept");
    assert!(kept.used_at.is_none() && kept.rejected_at.is_none());
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}

/// Issue 48: a plan nobody decided before its deadline stays in the inbox's list (for the
/// console to show apart, as expired) until retention's grace ends, and a person may dismiss
/// it; past the grace it is listed no more.
pub async fn a_plan_nobody_decided_stays_listed_until_its_grace_ends(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let proposer = Actor {
        endpoint_id: Some("ep_x".into()),
        human_login: Some("alice".into()),
    };
    let hour = Duration::from_secs(3600);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (_, hash) = plan_for(&store, &wh).await;
        let until = clock.now_ms() + 3_600_000;
        ids.push(
            store
                .mark_plan_pending(&hash, &alice, &proposer, until)
                .await
                .expect("pending")
                .id,
        );
    }
    let listed = |store: Store| {
        let alice = alice.clone();
        async move {
            let mut ids: Vec<String> = store
                .pending_plans(std::slice::from_ref(&alice))
                .await
                .expect("listed")
                .into_iter()
                .map(|p| p.id)
                .collect();
            ids.sort();
            ids
        }
    };
    let mut both = ids.clone();
    both.sort();
    clock.advance(2 * hour);
    let lapsed = store
        .plan_for_person(&ids[0], std::slice::from_ref(&alice))
        .await
        .expect("kept");
    assert_eq!(
        lapsed.facts().state(clock.now_ms(), wh.config_version),
        (
            switchboard_model::plan::PlanState::Stale,
            Some(switchboard_model::plan::StaleReason::ApprovalExpired)
        )
    );
    assert_eq!(listed(store.clone()).await, both, "lapsed, still listed");
    store
        .dismiss_plan(&ids[0], &alice, "alice")
        .await
        .expect("a lapsed plan is dismissed");
    assert_eq!(listed(store.clone()).await, vec![ids[1].clone()]);
    // Past the grace, retention's to delete: listed no more.
    clock.advance(switchboard_store::PLAN_GRACE);
    assert!(listed(store.clone()).await.is_empty());
}
