//! Trials (issue 45) in the store: started beside the saved configuration, at most so many
//! running per webhook, scoped like the webhook, ended once, and counted in batches that are
//! exact or not counted at all.

use std::collections::BTreeMap;

use switchboard_model::Label;
use switchboard_model::plan::{Routed, StoredPlan};
use switchboard_model::trial::{Forecast, RuleTally, TrialEnd, TrialLimits};
use switchboard_store::{Error, OwnerScope, Page, TRIAL_EXAMPLES, TrialBatch};

use crate::harness::{
    ALL_MIGRATIONS, TestDb, applied_migrations, config_routing_to, human, invalid, new_trial,
    not_found, webhook,
};

fn q(name: &str) -> Label<'static> {
    Label::queue(name).into_owned()
}

/// The candidate's decision, by `rule` when given.
fn to(label: Label<'static>, rule: Option<&str>) -> Routed {
    Routed {
        label,
        rule_id: rule.map(str::to_string),
    }
}

/// A started trial reads back as started, with its forecast and limits; another scope's
/// read, list and stop answer `not_found` like an unknown id; a second trial on the same
/// webhook is a conflict naming the first, until the first is stopped.
pub async fn a_trial_starts_once_per_webhook_and_is_scoped_like_it(db: TestDb) {
    let alice = human(&db, "alice").await;
    let bob = human(&db, "bob").await;
    let wh = webhook(&db, &alice).await;
    let started = db.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    assert!(started.id.starts_with("tr_") && started.running());
    assert_eq!(started.candidate, config_routing_to("review"));
    assert_eq!(
        started.candidate_digest,
        config_routing_to("review").digest()
    );
    assert_eq!(started.forecast, new_trial(&alice, &wh).forecast);
    assert_eq!(started.limits.max_deliveries, Some(1000));
    assert_eq!((started.observed.seen, started.observed.evaluated), (0, 0));
    assert_eq!(db.get_trial(&alice, &started.id).await.unwrap(), started);

    let other = not_found(db.get_trial(&bob, &started.id).await, "trial");
    assert_eq!(
        other,
        not_found(db.get_trial(&bob, "tr_unknown").await, "trial")
    );
    // A person's read (the console): among their scopes, and not_found outside them exactly
    // as for an unknown id.
    let both = [bob.clone(), alice.clone()];
    assert_eq!(
        db.trial_for_person(&started.id, &both).await.unwrap(),
        started
    );
    let theirs = not_found(
        db.trial_for_person(&started.id, std::slice::from_ref(&bob))
            .await,
        "trial",
    );
    assert_eq!(
        theirs,
        not_found(db.trial_for_person("tr_unknown", &both).await, "trial")
    );
    not_found(db.trial_for_person(&started.id, &[]).await, "trial");
    not_found(
        db.end_trial(&bob, &started.id, TrialEnd::Stopped).await,
        "trial",
    );
    not_found(db.list_trials(&bob, &wh.id).await, "webhook");
    not_found(db.start_trial(new_trial(&bob, &wh), 1).await, "webhook");

    let second = db.start_trial(new_trial(&alice, &wh), 1).await.unwrap_err();
    assert!(
        matches!(&second, Error::Conflict { message } if message.contains(&started.id)),
        "{second:?}"
    );
    let stopped = db
        .end_trial(&alice, &started.id, TrialEnd::Stopped)
        .await
        .unwrap();
    assert_eq!(stopped.end, Some(TrialEnd::Stopped));
    assert!(!stopped.running());
    // Its first end stands.
    let again = db
        .end_trial(&alice, &started.id, TrialEnd::Stale)
        .await
        .unwrap();
    assert_eq!(
        (again.end, again.ended_at),
        (Some(TrialEnd::Stopped), stopped.ended_at)
    );

    let next = db.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    assert_eq!(
        db.running_trials(&wh.id)
            .await
            .unwrap()
            .iter()
            .map(|t| t.id.clone())
            .collect::<Vec<_>>(),
        vec![next.id.clone()]
    );
    let listed = db.list_trials(&alice, &wh.id).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().any(|t| t.id == started.id && !t.running()));
}

/// A webhook's trials list newest first one page at a time: the pages walk exactly what the
/// whole list holds, the last page has no cursor, another listing's cursor is refused, and
/// another scope's webhook is `not_found`.
pub async fn a_webhooks_trials_list_in_pages(db: TestDb) {
    let alice = human(&db, "alice").await;
    let bob = human(&db, "bob").await;
    let wh = webhook(&db, &alice).await;
    for _ in 0..5 {
        let t = db.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
        db.end_trial(&alice, &t.id, TrialEnd::Stopped)
            .await
            .unwrap();
    }
    let whole: Vec<String> = db
        .list_trials(&alice, &wh.id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(whole.len(), 5);
    let mut walked = Vec::new();
    let mut page = Page::first(2);
    let mut pages = 0;
    loop {
        let got = db.list_trials_page(&alice, &wh.id, &page).await.unwrap();
        pages += 1;
        assert!(got.items.len() <= 2);
        walked.extend(got.items.into_iter().map(|t| t.id));
        match got.next_cursor {
            Some(cursor) => page = Page::after(cursor, 2),
            None => break,
        }
    }
    assert_eq!((walked, pages), (whole, 3));
    not_found(
        db.list_trials_page(&bob, &wh.id, &Page::first(2)).await,
        "webhook",
    );
    webhook(&db, &alice).await;
    let webhooks = db
        .list_webhooks_page(&alice, &Page::first(1))
        .await
        .unwrap();
    let foreign = webhooks.next_cursor.expect("two webhooks: a next page");
    invalid(
        db.list_trials_page(&alice, &wh.id, &Page::after(foreign, 2))
            .await,
        "cursor",
    );
}

/// A trial read while its batches commit adds up at every read: its counts and its pairs
/// are read in one snapshot, never across a commit (on PostgreSQL each statement of a plain
/// read sees a newer moment).
pub async fn a_trial_read_while_batches_commit_adds_up(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let t = db.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    const BATCHES: usize = 150;
    let writer = {
        let store: switchboard_store::Store = (*db).clone();
        let id = t.id.clone();
        tokio::spawn(async move {
            for i in 0..BATCHES {
                let mut batch = TrialBatch::default();
                for j in 0..4 {
                    let after = if j % 2 == 0 { Label::Drop } else { q("forge") };
                    batch.record(&format!("ev_{i}_{j}"), &q("forge"), Some(&to(after, None)));
                }
                store.record_trial(&id, &batch).await.unwrap();
            }
        })
    };
    let mut reads = 0;
    loop {
        let done = writer.is_finished();
        let read = db.get_trial(&alice, &t.id).await.unwrap();
        let o = &read.observed;
        let pairs: u64 = o.transitions.values().sum::<u64>() + o.unchanged.values().sum::<u64>();
        assert_eq!(pairs, o.evaluated, "read {reads}: {o:?}");
        reads += 1;
        if done {
            assert_eq!(o.evaluated, 4 * BATCHES as u64);
            break;
        }
    }
    writer.await.unwrap();
    assert!(reads > 1, "read while the batches committed");
}

/// Limits that could never end a trial well are refused, naming the field.
pub async fn a_trial_with_an_empty_limit_is_refused(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let mut zero = new_trial(&alice, &wh);
    zero.limits.max_deliveries = Some(0);
    invalid(db.start_trial(zero, 1).await, "max_deliveries");
    let mut never = new_trial(&alice, &wh);
    never.limits.max_duration_ms = 0;
    invalid(db.start_trial(never, 1).await, "max_duration");
}

/// Batches add up exactly, shed evaluations count as seen and not evaluated, examples stop
/// at the cap, and a trial that ended takes no more.
pub async fn a_trials_batches_add_up_and_an_ended_trial_takes_none(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let t = db.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    let mut total = 0u64;
    for b in 0..3 {
        let mut batch = TrialBatch::default();
        for i in 0..15 {
            let id = format!("ev-{b}-{i}");
            match i % 5 {
                0 => batch.record(&id, &q("forge"), Some(&to(Label::Drop, Some("bots")))),
                1 => batch.record(&id, &q("forge"), None),
                _ => batch.record(&id, &q("forge"), Some(&to(q("forge"), None))),
            }
            total += 1;
        }
        assert!(db.record_trial(&t.id, &batch).await.unwrap().is_some());
    }
    let read = db.get_trial(&alice, &t.id).await.unwrap();
    assert_eq!(read.observed.seen, total);
    assert_eq!(read.observed.not_evaluated(), 9);
    let drops = (q("forge"), Label::Drop);
    assert_eq!(
        read.observed.transitions,
        BTreeMap::from([(drops.clone(), 9)])
    );
    assert_eq!(read.examples[&drops].len(), 9);
    assert_eq!(read.examples[&drops][0], "ev-0-0");
    // Unchanged decisions count toward the totals, and each rule's first matches too.
    assert_eq!(read.observed.unchanged, BTreeMap::from([(q("forge"), 27)]));
    assert_eq!(
        read.observed.rules,
        BTreeMap::from([(
            "bots".to_string(),
            RuleTally {
                first_matches: 9,
                faults: 0
            }
        )])
    );
    assert_eq!(read.plan, Some(StoredPlan::default()));

    let mut many = TrialBatch::default();
    for i in 0..50 {
        many.record(
            &format!("more-{i}"),
            &q("forge"),
            Some(&to(Label::Fault, Some("bots"))),
        );
    }
    assert_eq!(
        db.record_trial(&t.id, &many).await.unwrap(),
        Some(total + 50)
    );
    let read = db.get_trial(&alice, &t.id).await.unwrap();
    let faults = (q("forge"), Label::Fault);
    assert_eq!(read.observed.transitions[&faults], 50);
    assert_eq!(read.examples[&faults].len(), TRIAL_EXAMPLES);
    assert_eq!(read.observed.rules["bots"].faults, 50);

    db.end_trial(&alice, &t.id, TrialEnd::MaxDeliveries)
        .await
        .unwrap();
    assert!(db.record_trial(&t.id, &many).await.unwrap().is_none());
    let ended = db.get_trial(&alice, &t.id).await.unwrap();
    assert_eq!(
        ended.observed, read.observed,
        "nothing counted after the end"
    );
}

/// A database of the previous landing (migration 0014) upgrades with its webhooks and
/// events as they were, and takes trials.
pub async fn upgrading_from_0014_keeps_webhooks_and_takes_trials(db: TestDb) {
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 14).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    assert_eq!(new.get_webhook(&alice, &wh.id).await.unwrap(), wh);
    let t = new.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    assert_eq!(
        new.get_trial(&alice, &t.id).await.unwrap().webhook_id,
        wh.id
    );
    new.close().await;
}

/// A trial past its `max_duration` ends on time even when it sees no delivery; one within
/// it keeps running.
pub async fn an_overdue_trial_ends_without_a_delivery(db: TestDb) {
    let alice = human(&db, "alice").await;
    let (wh, other) = (webhook(&db, &alice).await, webhook(&db, &alice).await);
    let mut short = new_trial(&alice, &wh);
    short.limits.max_duration_ms = 1;
    let short = db.start_trial(short, 1).await.unwrap();
    let long = db.start_trial(new_trial(&alice, &other), 1).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(db.end_overdue_trials().await.unwrap(), vec![wh.id.clone()]);
    let ended = db.get_trial(&alice, &short.id).await.unwrap();
    assert_eq!(ended.end, Some(TrialEnd::MaxDuration));
    assert!(db.get_trial(&alice, &long.id).await.unwrap().running());
    assert!(db.end_overdue_trials().await.unwrap().is_empty());

    // Retention: an ended trial goes with its tallies once it ended before the bound; a
    // running one stays, whatever its age.
    let mut batch = TrialBatch::default();
    batch.record("ev_1", &q("forge"), Some(&to(Label::Drop, Some("r"))));
    db.record_trial(&long.id, &batch).await.unwrap();
    db.end_trial(&alice, &long.id, TrialEnd::Stopped)
        .await
        .unwrap();
    let running = db.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    let ended_at = db
        .get_trial(&alice, &long.id)
        .await
        .unwrap()
        .ended_at
        .unwrap();
    assert_eq!(
        db.purge_trials_ended_before(ended_at, 10).await.unwrap(),
        1,
        "the older one"
    );
    assert_eq!(
        db.purge_trials_ended_before(ended_at + 1, 10)
            .await
            .unwrap(),
        1
    );
    not_found(db.get_trial(&alice, &long.id).await, "trial");
    assert!(db.get_trial(&alice, &running.id).await.unwrap().running());
    let left: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM trial_transitions WHERE trial_id = $1")
            .bind(long.id.as_str())
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(left, 0, "its tallies went with it");
}

/// A database of the previous landing (migration 0015) with a trial that counted deliveries
/// upgrades with the trial's counts and transitions as they were: it reads (without a plan,
/// so it cannot be promoted) and keeps counting.
pub async fn upgrading_from_0015_keeps_trials_and_their_counts(db: TestDb) {
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 15).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let trial_id = "tr_00000000000000000000000000000015";
    let now = 1_700_000_000_000i64;
    sqlx::query(
        "INSERT INTO trials (id, webhook_id, owner_scope, plan_id, candidate, candidate_digest, \
         base_config_digest, forecast, max_deliveries, max_duration_ms, started_at, started_by, \
         seen, evaluated) VALUES ($1, $2, $3, 'pl_old', $4, 'c', $5, \
         '{\"deliveries\":10,\"transitions\":[]}', NULL, 604800000, $6, 'alice', 12, 11)",
    )
    .bind(trial_id)
    .bind(wh.id.as_str())
    .bind(alice.to_string())
    .bind(serde_json::to_string(&config_routing_to("review")).unwrap())
    .bind(wh.config_digest.as_str())
    .bind(now)
    .execute(old.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO trial_transitions (trial_id, from_label, to_label, count, examples) \
         VALUES ($1, 'queue:forge', 'drop', 4, '[\"ev_1\"]')",
    )
    .bind(trial_id)
    .execute(old.pool())
    .await
    .unwrap();
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    let t = new.get_trial(&alice, trial_id).await.unwrap();
    assert_eq!((t.observed.seen, t.observed.evaluated), (12, 11));
    let drops = (q("forge"), Label::Drop);
    assert_eq!(t.observed.transitions, BTreeMap::from([(drops.clone(), 4)]));
    assert_eq!(t.examples[&drops], ["ev_1"]);
    assert_eq!(t.plan, None);
    let mut batch = TrialBatch::default();
    batch.record("ev_2", &q("forge"), Some(&to(Label::Drop, Some("r"))));
    assert_eq!(new.record_trial(trial_id, &batch).await.unwrap(), Some(13));
    new.close().await;
}

/// Issue 45: deliveries a trial was never offered (a control killed with offers queued, or a
/// delivery its router decided late) are counted when the trial ends: every delivery its
/// webhook stored in the trial's window is seen, the ones not evaluated counted so, and none
/// stored before it started or on another webhook. A larger count already kept stands.
pub async fn an_ended_trial_has_seen_every_delivery_stored_in_its_window(db: TestDb) {
    use switchboard_store::NewEvent;
    let alice = human(&db, "alice").await;
    let (wh, other) = (webhook(&db, &alice).await, webhook(&db, &alice).await);
    let event = |webhook_id: &str, delivery: String| NewEvent {
        webhook_id: webhook_id.into(),
        delivery_id: delivery,
        kind: "issues.opened".into(),
        headers: vec![("X-GitHub-Event".into(), "issues".into())],
        body: b"{\"action\":\"opened\"}".to_vec().into(),
        verified: true,
    };
    db.insert_event(event(&wh.id, "before".into()))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let trial = db.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    for i in 0..7 {
        db.insert_event(event(&wh.id, format!("during-{i}")))
            .await
            .unwrap();
    }
    db.insert_event(event(&other.id, "elsewhere".into()))
        .await
        .unwrap();
    // Three were offered and evaluated, the other four never offered.
    let mut batch = TrialBatch::default();
    for id in ["ev_1", "ev_2", "ev_3"] {
        batch.record(id, &q("forge"), Some(&to(q("forge"), Some("r"))));
    }
    db.record_trial(&trial.id, &batch).await.unwrap();
    let ended = db
        .end_trial(&alice, &trial.id, TrialEnd::Stopped)
        .await
        .unwrap();
    assert_eq!(ended.observed.seen, 7, "{:?}", ended.observed);
    assert_eq!(ended.observed.evaluated, 3);
    assert_eq!(ended.observed.not_evaluated(), 4);
    // Deliveries after the end change nothing.
    db.insert_event(event(&wh.id, "after".into()))
        .await
        .unwrap();
    let again = db
        .end_trial(&alice, &trial.id, TrialEnd::Stopped)
        .await
        .unwrap();
    assert_eq!(again.observed, ended.observed);

    // A trial that counted more than its window's stored deliveries (offers it was made of
    // deliveries stored a moment before it started) keeps its count.
    let mut short = new_trial(&alice, &other);
    short.limits.max_duration_ms = 1;
    let counted = db.start_trial(short, 1).await.unwrap();
    let mut batch = TrialBatch::default();
    for id in ["ev_a", "ev_b"] {
        batch.record(id, &q("forge"), None);
    }
    db.record_trial(&counted.id, &batch).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(
        db.end_overdue_trials().await.unwrap(),
        vec![other.id.clone()]
    );
    let ended = db.get_trial(&alice, &counted.id).await.unwrap();
    assert_eq!(ended.observed.seen, 2, "{:?}", ended.observed);
}

/// Issue 46: a database of the previous landing (migration 0016) with a running trial
/// upgrades with the trial as it was (a trial, not a guard); a guard then starts beside it
/// without taking its place, ends an earlier guard of the webhook, is no trial to the trial
/// reads, and ends once as breached.
pub async fn upgrading_from_0016_keeps_trials_and_guards_start_beside_them(db: TestDb) {
    use switchboard_model::guard::{Breach, GuardTerms};
    use switchboard_store::NewGuard;
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 16).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let trial_id = "tr_00000000000000000000000000000016";
    // As the previous landing wrote a trial (its code cannot run here: it reads no `kind`).
    sqlx::query(
        "INSERT INTO trials (id, webhook_id, owner_scope, plan_id, candidate, candidate_digest, \
         base_config_digest, forecast, max_deliveries, max_duration_ms, started_at, started_by, \
         seen, evaluated, plan) VALUES ($1, $2, $3, 'pl_old', $4, 'c', $5, \
         '{\"deliveries\":10,\"transitions\":[]}', NULL, 604800000, $6, 'alice', 3, 3, NULL)",
    )
    .bind(trial_id)
    .bind(wh.id.as_str())
    .bind(alice.to_string())
    .bind(serde_json::to_string(&config_routing_to("review")).unwrap())
    .bind(wh.config_digest.as_str())
    .bind(1_700_000_000_000i64)
    .execute(old.pool())
    .await
    .unwrap();
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    let kept = new.get_trial(&alice, trial_id).await.unwrap();
    assert!(kept.running() && kept.guard.is_none());
    assert_eq!(kept.observed.seen, 3);
    let guard = |version: i64| NewGuard {
        webhook_id: wh.id.clone(),
        owner_scope: alice.clone(),
        plan_id: format!("pl_{version}"),
        replaced: config_routing_to("forge"),
        confirmed_digest: wh.config_digest.clone(),
        forecast: Forecast::default(),
        limits: TrialLimits::default(),
        started_by: "alice".into(),
        terms: GuardTerms {
            confirmed_version: version,
            replaced_version: version - 1,
            ..GuardTerms::default()
        },
    };
    let first = new.start_guard(guard(2)).await.unwrap();
    let second = new.start_guard(guard(3)).await.unwrap();
    assert!(first.id.starts_with("gd_"));
    assert_eq!(
        new.get_guard(&alice, &first.id).await.unwrap().end,
        Some(TrialEnd::Stale),
        "a newer change's guard ends the older one"
    );
    // The trial reads and the trial limit see trials only; the live runner sees both.
    assert_eq!(new.list_trials(&alice, &wh.id).await.unwrap().len(), 1);
    not_found(new.get_trial(&alice, &second.id).await, "trial");
    not_found(new.get_guard(&alice, trial_id).await, "guard");
    let running = new.running_trials(&wh.id).await.unwrap();
    assert_eq!(running.len(), 2, "{running:?}");
    // The trial verbs cannot stop a guard; the live runner ends it at its window.
    assert!(
        new.end_trial(&alice, &second.id, TrialEnd::Stopped)
            .await
            .is_err()
    );
    assert!(new.get_guard(&alice, &second.id).await.unwrap().running());
    // Another scope's guard is the one not_found.
    let bob = human(&new, "bob").await;
    not_found(new.get_guard(&bob, &second.id).await, "guard");
    // Breached once: a second breach (another replica) finds it ended.
    let terms = GuardTerms {
        breach: Some(Breach::UnforeseenLostWork {
            from: q("forge"),
            to: Label::Drop,
            count: 3,
        }),
        ..second.guard.clone().unwrap()
    };
    assert!(new.breach_guard(&second.id, &terms).await.unwrap());
    assert!(!new.breach_guard(&second.id, &terms).await.unwrap());
    // The live runner's end keeps the first one.
    new.end_running(&alice, &second.id, TrialEnd::MaxDeliveries)
        .await
        .unwrap();
    let ended = new.get_guard(&alice, &second.id).await.unwrap();
    assert_eq!(ended.end, Some(TrialEnd::Breached));
    assert_eq!(ended.guard.unwrap().breach, terms.breach);
    assert_eq!(
        new.guard_of_plan(&alice, "pl_3")
            .await
            .unwrap()
            .map(|g| g.id),
        Some(second.id.clone())
    );
    new.close().await;
}

/// Issue 46: a database of the previous landing (migration 0017) with an applied plan and a
/// running guard (terms without a recovery) upgrades with both as they were; the webhook reads
/// with no guard default, an operator then sets one, and the plan is marked reverted once.
pub async fn upgrading_from_0017_keeps_plans_and_guards_and_reads_their_new_columns(db: TestDb) {
    use switchboard_model::guard::OnBreach;
    use switchboard_model::plan::PlanState;
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 17).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let routing = serde_json::to_string(&config_routing_to("review")).unwrap();
    // As the previous landing wrote them: an applied plan and its confirm's guard.
    sqlx::query(
        "INSERT INTO plans (id, token_hash, webhook_id, owner_scope, pack_name, pack_version, \
         params_digest, candidate, candidate_digest, base_config_version, plan, created_at, \
         expires_at, used_at) VALUES ('pl_0017', 'hash17', $1, $2, 'drop-ci-noise', '2.0.0', \
         'p', $3, 'c', 1, '{}', 1700000000000, 1700000900000, 1700000100000)",
    )
    .bind(wh.id.as_str())
    .bind(alice.to_string())
    .bind(routing.as_str())
    .execute(old.pool())
    .await
    .unwrap();
    let guard_id = "gd_00000000000000000000000000000017";
    sqlx::query(
        "INSERT INTO trials (id, webhook_id, owner_scope, plan_id, candidate, candidate_digest, \
         base_config_digest, forecast, max_deliveries, max_duration_ms, started_at, started_by, \
         seen, evaluated, plan, kind, guard) VALUES ($1, $2, $3, 'pl_0017', $4, 'c', $5, \
         '{\"deliveries\":10,\"transitions\":[]}', 1000, 604800000, $6, 'alice', 4, 4, NULL, \
         'guard', '{\"on_breach\":\"revert\",\"confirmed_version\":2,\"replaced_version\":1}')",
    )
    .bind(guard_id)
    .bind(wh.id.as_str())
    .bind(alice.to_string())
    .bind(routing.as_str())
    .bind(wh.config_digest.as_str())
    .bind(1_700_000_000_000i64)
    .execute(old.pool())
    .await
    .unwrap();
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    let read = new.get_webhook(&alice, &wh.id).await.unwrap();
    assert_eq!(read.guard_on_breach, None, "no default set: revert");
    let set = new
        .set_guard_on_breach(&alice, &wh.id, Some(OnBreach::Alert))
        .await
        .unwrap();
    assert_eq!(set.guard_on_breach, Some(OnBreach::Alert));
    not_found(
        new.set_guard_on_breach(&OwnerScope::human("bob"), &wh.id, None)
            .await,
        "webhook",
    );
    let guard = new.get_guard(&alice, guard_id).await.unwrap();
    let terms = guard.guard.clone().unwrap();
    assert_eq!(
        (terms.confirmed_version, terms.recovery),
        (2, None),
        "old terms read with the new fields empty"
    );
    assert_eq!(guard.observed.seen, 4);
    assert_eq!(
        new.newest_guard(&alice, &wh.id)
            .await
            .unwrap()
            .map(|g| g.id),
        Some(guard_id.to_string())
    );
    let plan = new.plan_in_scope(&alice, "pl_0017").await.unwrap();
    assert_eq!(plan.reverted_at, None);
    assert_eq!(plan.facts().state(0, 99).0, PlanState::Applied);
    new.mark_plan_reverted("pl_0017").await.unwrap();
    let reverted = new.plan_in_scope(&alice, "pl_0017").await.unwrap();
    let first = reverted.reverted_at;
    assert!(first.is_some());
    assert_eq!(reverted.facts().state(0, 99).0, PlanState::Reverted);
    new.mark_plan_reverted("pl_0017").await.unwrap();
    assert_eq!(
        new.plan_in_scope(&alice, "pl_0017")
            .await
            .unwrap()
            .reverted_at,
        first,
        "marked once"
    );
    new.close().await;
}

/// Issue 50: migration 0025 indexes running and ended trials apart, and explain's read of the
/// trials running at a delivery reads the two halves by those indexes. Trials written at 0024
/// — one ended before a delivery, one ended after it, one still running — are found after the
/// upgrade exactly as before: running for ingest, running at a moment for explain (newest
/// first, from both halves at once), the ended ones for retention.
pub async fn upgrading_from_0024_finds_running_and_ended_trials_as_before(db: TestDb) {
    let url = crate::harness::second_database(&db).await;
    let clock = switchboard_store::Clock::manual(1_800_000_000_000);
    let old = crate::harness::open_at(&db, &url, 24)
        .await
        .with_clock(clock.clone());
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let minute = std::time::Duration::from_secs(60);
    let early = old.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    clock.advance(minute);
    old.end_trial(&alice, &early.id, TrialEnd::Stopped)
        .await
        .unwrap();
    clock.advance(minute);
    let spanning = old.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    clock.advance(minute);
    let delivery_at = clock.now_ms();
    clock.advance(minute);
    // The next starts in the very millisecond this one ends.
    let handover = clock.now_ms();
    old.end_trial(&alice, &spanning.id, TrialEnd::Stopped)
        .await
        .unwrap();
    let running = old.start_trial(new_trial(&alice, &wh), 1).await.unwrap();
    clock.advance(minute);
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema")
        .with_clock(clock.clone());
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    let ids = |trials: Vec<switchboard_store::Trial>| -> Vec<String> {
        trials.into_iter().map(|t| t.id).collect()
    };
    let at = |when| new.trials_running_at(&alice, &wh.id, when);
    assert_eq!(
        ids(new.running_trials(&wh.id).await.unwrap()),
        vec![running.id.clone()]
    );
    assert_eq!(
        ids(at(delivery_at).await.unwrap()),
        vec![spanning.id.clone()],
        "the trial that ended after the delivery; not the one that ended before"
    );
    assert_eq!(
        ids(at(clock.now_ms()).await.unwrap()),
        vec![running.id.clone()]
    );
    // At the handover both were running (an end is inclusive): one from each half, newest
    // first.
    assert_eq!(
        ids(at(handover).await.unwrap()),
        vec![running.id.clone(), spanning.id.clone()]
    );
    // A second trial while one runs is still refused (the start counts the running ones).
    assert!(matches!(
        new.start_trial(new_trial(&alice, &wh), 1).await,
        Err(Error::Conflict { .. })
    ));
    // Retention takes the two ended ones, oldest end first, and never the running one.
    assert_eq!(
        new.purge_trials_ended_before(delivery_at, 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        new.purge_trials_ended_before(clock.now_ms() + 1, 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        ids(new.list_trials(&alice, &wh.id).await.unwrap()),
        vec![running.id.clone()]
    );
    new.close().await;
}
