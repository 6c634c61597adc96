//! Issue 47: the change log's rows. Every saved configuration version appends exactly one
//! entry in the save's own transaction (a duplicate or refused save appends none), the chain
//! verifies from the database, and an entry changed, deleted or moved in the database
//! directly is named by the verify.

use switchboard_model::ConfigurationChange;
use switchboard_model::change_log::{BrokenWhy, ChangeEntry, ChangeKind};
use switchboard_store::{Actor, Error, SaveConfiguration};

use crate::harness::{TestDb, config_routing_to, human, webhook};

fn save(queue: &str, expected: Option<i64>) -> SaveConfiguration {
    SaveConfiguration {
        configuration: config_routing_to(queue),
        actor: Actor {
            endpoint_id: Some("ep_agent".into()),
            human_login: Some("alice".into()),
        },
        change: ConfigurationChange::op("set_webhook_rules"),
        expected_version: expected,
        ..Default::default()
    }
}

/// Three versions saved, one duplicate and one refused: three entries, chained and verified.
async fn three_saves(db: &TestDb) -> (switchboard_store::Webhook, Vec<i64>) {
    let alice = human(db, "alice").await;
    let wh = webhook(db, &alice).await;
    let mut versions = Vec::new();
    for queue in ["forge", "triage", "forge"] {
        let saved = db
            .save_configuration(&alice, &wh.id, save(queue, None))
            .await
            .expect("saved");
        versions.push(saved.version);
    }
    let again = db
        .save_configuration(&alice, &wh.id, save("forge", None))
        .await
        .expect("a duplicate");
    assert!(again.duplicate);
    let refused = db
        .save_configuration(&alice, &wh.id, save("triage", Some(1)))
        .await;
    assert!(
        matches!(refused, Err(Error::FailedPrecondition { .. })),
        "{refused:?}"
    );
    (wh, versions)
}

pub async fn every_saved_version_appends_one_entry_and_the_log_verifies(db: TestDb) {
    let (wh, versions) = three_saves(&db).await;
    let all = db.list_changes(None, 0, 100).await.expect("entries");
    assert_eq!(
        all.len(),
        4,
        "the webhook's creation (version 1), then one per saved version, none for the others"
    );
    let created: ChangeEntry = serde_json::from_str(&all[0].text).expect("an entry");
    assert_eq!(created.version, Some(1));
    assert_eq!(created.digest_before, None);
    assert_eq!(
        created.digest_after.as_deref(),
        Some(wh.config_digest.as_str())
    );
    assert_eq!(
        created.detail.get("op").map(String::as_str),
        Some("create_webhook")
    );
    let entries = &all[1..];
    let read: Vec<ChangeEntry> = entries
        .iter()
        .map(|e| serde_json::from_str(&e.text).expect("an entry"))
        .collect();
    assert_eq!(
        read.iter()
            .map(|e| e.version.unwrap_or(0))
            .collect::<Vec<_>>(),
        versions
    );
    let first = &read[0];
    assert_eq!(first.kind, ChangeKind::Configuration);
    assert_eq!(first.webhook_id.as_deref(), Some(wh.id.as_str()));
    assert_eq!(
        first.digest_before.as_deref(),
        Some(wh.config_digest.as_str())
    );
    assert_eq!(
        first.digest_after,
        Some(config_routing_to("forge").digest()),
        "the saved configuration's digest"
    );
    assert_eq!(first.actor.human.as_deref(), Some("alice"));
    assert_eq!(
        read[1].digest_before, read[0].digest_after,
        "chained versions"
    );
    let head = db
        .verify_change_log()
        .await
        .expect("read")
        .expect("a clean log")
        .expect("a head");
    assert_eq!(
        (head.seq, head.hash.as_str()),
        (4, entries[2].hash.as_str())
    );
    // Another scope sees none of them.
    let bob = switchboard_store::OwnerScope::human("bob");
    assert!(
        db.list_changes(Some(&bob), 0, 100)
            .await
            .expect("bob")
            .is_empty()
    );
}

pub async fn an_entry_changed_deleted_or_moved_in_the_database_is_named(db: TestDb) {
    three_saves(&db).await;
    let second: String = sqlx::query_scalar("SELECT entry FROM change_log WHERE seq = 2")
        .fetch_one(db.pool())
        .await
        .expect("entry 2");
    let broken = |db: &TestDb| {
        let db = db.store.clone();
        async move {
            db.verify_change_log()
                .await
                .expect("read")
                .expect_err("found")
        }
    };

    // A changed byte.
    sqlx::query("UPDATE change_log SET entry = $1 WHERE seq = 2")
        .bind(second.replacen("alice", "alicf", 1))
        .execute(db.pool())
        .await
        .expect("edit");
    let found = broken(&db).await;
    assert_eq!((found.seq, found.why), (2, BrokenWhy::Edited));
    sqlx::query("UPDATE change_log SET entry = $1 WHERE seq = 2")
        .bind(second.as_str())
        .execute(db.pool())
        .await
        .expect("restore");
    assert!(db.verify_change_log().await.expect("read").is_ok());

    // Two entries swapped: their places exchanged.
    for (from, to) in [(2, -2), (3, 2), (-2, 3)] {
        sqlx::query("UPDATE change_log SET seq = $1 WHERE seq = $2")
            .bind(to as i64)
            .bind(from as i64)
            .execute(db.pool())
            .await
            .expect("swap");
    }
    let found = broken(&db).await;
    assert_eq!(
        (found.seq, found.why),
        (3, BrokenWhy::OutOfPlace { expected: 2 })
    );
    for (from, to) in [(2, -2), (3, 2), (-2, 3)] {
        sqlx::query("UPDATE change_log SET seq = $1 WHERE seq = $2")
            .bind(to as i64)
            .bind(from as i64)
            .execute(db.pool())
            .await
            .expect("swap back");
    }
    assert!(db.verify_change_log().await.expect("read").is_ok());

    // An entry deleted.
    sqlx::query("DELETE FROM change_log WHERE seq = 2")
        .execute(db.pool())
        .await
        .expect("delete");
    let found = broken(&db).await;
    assert_eq!(
        (found.seq, found.why),
        (3, BrokenWhy::OutOfPlace { expected: 2 })
    );
}

/// Saves on ten webhooks at once: every one appends its entry, one chain without a gap.
pub async fn concurrent_saves_append_one_chain_without_a_gap(db: TestDb) {
    let alice = human(&db, "alice").await;
    let mut hooks = Vec::new();
    for _ in 0..10 {
        hooks.push(webhook(&db, &alice).await);
    }
    let saves = hooks.iter().map(|wh| {
        let (store, alice, id) = (db.store.clone(), alice.clone(), wh.id.clone());
        tokio::spawn(async move {
            store
                .save_configuration(&alice, &id, save("triage", None))
                .await
        })
    });
    for saved in futures::future::join_all(saves).await {
        saved.expect("joined").expect("saved");
    }
    let head = db
        .verify_change_log()
        .await
        .expect("read")
        .expect("a clean log")
        .expect("a head");
    assert_eq!(head.seq, 20, "ten creations, then ten saves");
}

/// A database of the previous landing (migration 0018) with configuration versions and
/// operator-audit rows: the upgrade starts the log with one entry per version and audit row,
/// in time order, chained, and it verifies; the next save and the next operator act append
/// after them, and a second connect writes nothing more.
pub async fn upgrading_from_0018_starts_the_log_with_every_version_and_audit_row(db: TestDb) {
    use switchboard_store::{AuditRecord, OperatorAction};
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 18).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    for queue in ["forge", "triage"] {
        old.save_configuration(&alice, &wh.id, save(queue, None))
            .await
            .expect("saved the old way");
    }
    let operator = old
        .create_operator_credential("ops", None)
        .await
        .expect("an operator credential");
    old.record_operator_action(
        &operator.credential.id,
        &AuditRecord::new(OperatorAction::SetWebhookConfirmPolicy, wh.id.as_str())
            .with("policy", "person"),
    )
    .await
    .expect("audited");
    let versions: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM configuration_history")
        .fetch_one(old.pool())
        .await
        .expect("count");
    let audited: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM operator_audit")
        .fetch_one(old.pool())
        .await
        .expect("count");
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade");
    let started = (versions + audited) as u64;
    let head = new
        .verify_change_log()
        .await
        .expect("read")
        .expect("verifies")
        .expect("a head");
    assert_eq!(head.seq, started, "one entry per version and audit row");
    let entries = new.list_changes(None, 0, 1000).await.expect("entries");
    let kinds: Vec<ChangeKind> = entries
        .iter()
        .map(|e| {
            serde_json::from_str::<ChangeEntry>(&e.text)
                .expect("entry")
                .kind
        })
        .collect();
    assert!(kinds.contains(&ChangeKind::ConfirmPolicy), "{kinds:?}");
    assert!(kinds.contains(&ChangeKind::OperatorCredential), "{kinds:?}");
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == ChangeKind::Configuration)
            .count() as i64,
        versions
    );
    new.save_configuration(&alice, &wh.id, save("forge", None))
        .await
        .expect("saved");
    new.record_operator_action(
        &operator.credential.id,
        &AuditRecord::new(OperatorAction::SetWebhookConfirmPolicy, wh.id.as_str())
            .with("policy", "self"),
    )
    .await
    .expect("audited");
    new.close().await;
    let again = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("reconnect");
    let head = again
        .verify_change_log()
        .await
        .expect("read")
        .expect("verifies")
        .expect("a head");
    assert_eq!(
        head.seq,
        started + 2,
        "appended after, nothing written twice"
    );
    again.close().await;
}

/// A person's change of who confirms (the console's form) appends one entry in its own
/// transaction, naming the person; one for a webhook that is not theirs appends none.
pub async fn a_persons_confirm_policy_change_appends_one_entry(db: TestDb) {
    use switchboard_store::ConfirmPolicy;
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let before = db.list_changes(None, 0, 100).await.expect("entries").len();
    db.person_sets_confirm_policy(&alice, &wh.id, ConfirmPolicy::Person, "alice")
        .await
        .expect("set");
    let bob = human(&db, "bob").await;
    let refused = db
        .person_sets_confirm_policy(&bob, &wh.id, ConfirmPolicy::SelfConfirm, "bob")
        .await;
    assert!(
        matches!(refused, Err(Error::NotFound { .. })),
        "{refused:?}"
    );
    let all = db.list_changes(None, 0, 100).await.expect("entries");
    assert_eq!(
        all.len(),
        before + 1,
        "one for the change, none for the refusal"
    );
    let entry: ChangeEntry = serde_json::from_str(&all[before].text).expect("an entry");
    assert_eq!(entry.kind, ChangeKind::ConfirmPolicy);
    assert_eq!(entry.actor.human.as_deref(), Some("alice"));
    assert_eq!(entry.webhook_id.as_deref(), Some(wh.id.as_str()));
    assert_eq!(
        entry.detail.get("policy").map(String::as_str),
        Some("person")
    );
    assert!(db.verify_change_log().await.expect("read").is_ok());
}
