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
    use switchboard_store::ConfirmPolicy;
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
    // (A grant: the confirm policy's statement reads columns of later migrations.)
    old.by_operator(&operator.credential.id)
        .set_webhook_grant(&alice, &wh.id, &["forge".into()])
        .await
        .expect("set, and audited the old way");
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
    assert!(kinds.contains(&ChangeKind::Grant), "{kinds:?}");
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
    new.by_operator(&operator.credential.id)
        .set_confirm_policy(&alice, &wh.id, ConfirmPolicy::SelfConfirm)
        .await
        .expect("set, and logged");
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
    db.by_person("alice")
        .set_confirm_policy(&alice, &wh.id, ConfirmPolicy::Person)
        .await
        .expect("set");
    let bob = human(&db, "bob").await;
    let refused = db
        .by_person("bob")
        .set_confirm_policy(&bob, &wh.id, ConfirmPolicy::SelfConfirm)
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

/// Every act an operator makes through the Operators API goes through `Store::by_operator`,
/// and the store records it in the change's own transaction: one entry per act, which the
/// operator audit lists (its view of the log, newest first, with the entry's seq as its id),
/// nothing in the old audit table, none for a refused act, and none for an act that changed
/// nothing (a second revoke, clearing no allowance).
pub async fn an_operators_acts_are_logged_in_their_own_transaction_and_the_audit_lists_them(
    db: TestDb,
) {
    use switchboard_model::approval::ApprovalRule;
    use switchboard_model::guard::OnBreach;
    use switchboard_store::{ConfirmPolicy, NewEndpoint, OwnerScope, Page, Role};
    let op = db
        .create_operator_credential("ops", None)
        .await
        .expect("bootstrap");
    let by = db.by_operator(&op.credential.id);
    by.create_human("alice", None).await.expect("human");
    let team = OwnerScope::Team("infra".into());
    by.create_team("infra", "Infra").await.expect("team");
    by.set_membership("infra", "alice", Role::Editor)
        .await
        .expect("member");
    by.set_grant_allowance(&team, &["forge".into()])
        .await
        .expect("allowance");
    let wh = by
        .create_webhook(crate::harness::new_webhook(&team))
        .await
        .expect("webhook");
    by.set_webhook_grant(&team, &wh.id, &["forge".into()])
        .await
        .expect("grant");
    by.set_confirm_policy(&team, &wh.id, ConfirmPolicy::Person)
        .await
        .expect("policy");
    by.set_guard_on_breach(&team, &wh.id, Some(OnBreach::Alert))
        .await
        .expect("guard default");
    let rule = ApprovalRule {
        required: 2,
        ..ApprovalRule::default()
    };
    by.set_approval_rule(&team, &wh.id, Some(&rule))
        .await
        .expect("rule");
    by.set_claim_ttl(&team, &wh.id, Some(std::time::Duration::from_secs(600)))
        .await
        .expect("ttl");
    let vended = by
        .vend_endpoint(NewEndpoint {
            name: "agent".into(),
            human_login: "alice".into(),
            owner_scope: team.clone(),
            verbs: vec!["webhooks".into()],
        })
        .await
        .expect("vend");
    by.revoke_endpoint(&vended.endpoint.id)
        .await
        .expect("revoke");
    by.create_sign_in_link("alice", 60_000).await.expect("link");
    by.clear_grant_allowance(&team).await.expect("clear");
    let entries_after_acts = db.list_changes(None, 0, 1000).await.expect("read").len();

    // Refused, or changing nothing: no entry.
    let nobody = OwnerScope::human("nobody");
    assert!(matches!(
        by.set_webhook_grant(&nobody, &wh.id, &["forge".into()])
            .await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        by.set_membership("nope", "alice", Role::Viewer).await,
        Err(Error::NotFound { .. })
    ));
    assert!(
        by.set_grant_allowance(&nobody, &["forge".into()])
            .await
            .is_err()
    );
    assert!(
        by.create_team("infra", "Again").await.is_err(),
        "a duplicate"
    );
    assert!(matches!(
        by.revoke_endpoint("ep_nope").await,
        Err(Error::NotFound { .. })
    ));
    by.revoke_endpoint(&vended.endpoint.id)
        .await
        .expect("revoked twice");
    assert!(!by.clear_grant_allowance(&team).await.expect("cleared none"));
    let all = db.list_changes(None, 0, 1000).await.expect("read");
    assert_eq!(
        all.len(),
        entries_after_acts,
        "refusals and no-ops record nothing"
    );

    let audit = db
        .list_audit_entries(&Page::first(100))
        .await
        .expect("audit");
    let actions: Vec<&str> = audit
        .items
        .iter()
        .rev()
        .map(|e| e.action.as_str())
        .collect();
    assert_eq!(
        actions,
        [
            "bootstrap_operator_credential",
            "create_human",
            "create_team",
            "set_team_member",
            "set_grant_allowance",
            "create_webhook",
            "set_webhook_grant",
            "set_webhook_confirm_policy",
            "set_webhook_guard_default",
            "set_webhook_approval_rule",
            "set_webhook_claim_ttl",
            "vend_endpoint",
            "revoke_endpoint",
            "create_sign_in_link",
            "clear_grant_allowance",
        ]
    );
    assert_eq!(audit.items.last().expect("bootstrap").operator_id, None);
    for act in &audit.items[..audit.items.len() - 1] {
        assert_eq!(act.operator_id.as_deref(), Some(op.credential.id.as_str()));
        // Its id is its entry's seq, and the entry is the operator's.
        let seq: u64 = act.id.parse().expect("a seq");
        let sealed = all.iter().find(|e| e.seq == seq).expect("its entry");
        let entry: ChangeEntry = serde_json::from_str(&sealed.text).expect("an entry");
        assert_eq!(
            entry.actor.operator.as_deref(),
            Some(op.credential.id.as_str())
        );
        assert_eq!(entry.detail.get("action"), Some(&act.action));
    }
    let rule_act = audit
        .items
        .iter()
        .find(|e| e.action == "set_webhook_approval_rule")
        .expect("the rule");
    assert_eq!(rule_act.target, wh.id);
    assert_eq!(rule_act.detail["rule"], rule.words());
    // An act on a scope names it, so the scope's owners read it in their log.
    let allowance = all
        .iter()
        .map(|e| serde_json::from_str::<ChangeEntry>(&e.text).expect("an entry"))
        .find(|e| e.detail.get("action").map(String::as_str) == Some("set_grant_allowance"))
        .expect("the allowance");
    assert_eq!(allowance.owner_scope.as_deref(), Some("team:infra"));
    assert_eq!(allowance.kind, ChangeKind::GrantAllowance);
    let old_table: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM operator_audit")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(
        old_table, 0,
        "the audit is the log's view: nothing written twice"
    );

    // Paged, newest first, one at a time equals the whole.
    let mut paged = Vec::new();
    let mut page = Page::first(1);
    loop {
        let got = db.list_audit_entries(&page).await.expect("page");
        paged.extend(got.items);
        match got.next_cursor {
            Some(next) => page = Page::after(next, 1),
            None => break,
        }
    }
    assert_eq!(paged, audit.items);
    assert!(db.verify_change_log().await.expect("read").is_ok());
}

/// A database of the previous landing (0020), where operators' acts were written to the old
/// audit table and to the log: after the upgrade the audit (now the log's view) lists the
/// same acts with the same operator, action, target, detail and time, the log verifies, and
/// the next act is listed first without a row in the old table.
pub async fn upgrading_from_0020_the_audit_lists_the_same_acts_from_the_log(db: TestDb) {
    use switchboard_store::{ConfirmPolicy, Page};
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 20).await;
    let op = old
        .create_operator_credential("ops", None)
        .await
        .expect("bootstrap");
    let by = old.by_operator(&op.credential.id);
    let alice = human(&by, "alice").await;
    let wh = webhook(&by, &alice).await;
    by.set_confirm_policy(&alice, &wh.id, ConfirmPolicy::Person)
        .await
        .expect("policy");
    let before = old
        .list_audit_entries(&Page::first(100))
        .await
        .expect("the old audit");
    assert_eq!(before.items.len(), 4, "{before:?}");
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade");
    let after = new
        .list_audit_entries(&Page::first(100))
        .await
        .expect("the view");
    let fields = |e: &switchboard_store::AuditEntry| {
        (
            e.at,
            e.operator_id.clone(),
            e.action.clone(),
            e.target.clone(),
            e.detail.clone(),
        )
    };
    assert_eq!(
        after.items.iter().map(fields).collect::<Vec<_>>(),
        before.items.iter().map(fields).collect::<Vec<_>>()
    );
    new.by_operator(&op.credential.id)
        .set_confirm_policy(&alice, &wh.id, ConfirmPolicy::SelfConfirm)
        .await
        .expect("policy");
    let newest = new.list_audit_entries(&Page::first(1)).await.expect("read");
    assert_eq!(newest.items[0].detail["policy"], "self");
    let old_table: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM operator_audit")
        .fetch_one(new.pool())
        .await
        .expect("count");
    assert_eq!(old_table, 4, "kept as written, and not written again");
    assert!(new.verify_change_log().await.expect("read").is_ok());
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}

/// Deleting a webhook appends one entry naming who deleted it and the version it had, in the
/// deletion's transaction; its earlier entries stay. A refused deletion (an agent's, while a
/// person confirms) and one of an unknown webhook append none.
pub async fn a_webhooks_deletion_appends_one_entry_and_keeps_its_entries(db: TestDb) {
    use switchboard_store::ConfirmPolicy;
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    db.save_configuration(&alice, &wh.id, save("triage", None))
        .await
        .expect("saved");
    db.set_confirm_policy(&alice, &wh.id, ConfirmPolicy::Person)
        .await
        .expect("policy");
    let agent = db.by_endpoint("ep_agent", "alice");
    let before = db.list_changes(None, 0, 1000).await.expect("read").len();
    assert!(matches!(
        agent.delete_webhook_by_endpoint(&alice, &wh.id).await,
        Err(Error::ApprovalRequired { .. })
    ));
    assert!(matches!(
        agent.delete_webhook_by_endpoint(&alice, "wh_nope").await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(
        db.list_changes(None, 0, 1000).await.expect("read").len(),
        before,
        "refusals append nothing"
    );
    db.set_confirm_policy(&alice, &wh.id, ConfirmPolicy::SelfConfirm)
        .await
        .expect("policy");
    agent
        .delete_webhook_by_endpoint(&alice, &wh.id)
        .await
        .expect("deleted");
    let all = db.list_changes(None, 0, 1000).await.expect("read");
    assert_eq!(all.len(), before + 1);
    let entries: Vec<ChangeEntry> = all
        .iter()
        .map(|e| serde_json::from_str(&e.text).expect("an entry"))
        .collect();
    let last = entries.last().expect("the deletion");
    assert_eq!(last.kind, ChangeKind::WebhookDelete);
    assert_eq!(last.actor.endpoint.as_deref(), Some("ep_agent"));
    assert_eq!(last.actor.human.as_deref(), Some("alice"));
    assert_eq!(last.version, Some(2));
    assert_eq!(
        entries
            .iter()
            .filter(|e| e.webhook_id.as_deref() == Some(wh.id.as_str()))
            .count(),
        3,
        "its creation, its save and its deletion"
    );
    assert!(db.verify_change_log().await.expect("read").is_ok());
}
