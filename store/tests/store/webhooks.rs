use serde_json::json;
use sqlx::Row;
use switchboard_store::OwnerScope;
use switchboard_store::secrets::configuration_digest;
use switchboard_store::{
    Actor, NewEvent, NewTodo, NewWebhook, Page, RecordDecision, SaveConfiguration, SourceType,
};

use crate::harness::{TestDb, human, invalid, not_found, queued, webhook};

pub async fn create_sets_version_one_and_a_strong_id(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    // `wh_` and 128 random bits as 32 lower-case hex characters.
    assert!(wh.id.starts_with("wh_") && wh.id.len() == 35, "{}", wh.id);
    assert!(
        wh.id[3..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(wh.secret.len(), 64, "a generated secret carries 256 bits");
    assert!(
        !format!("{wh:?}").contains(&wh.secret),
        "Debug must not print the secret"
    );
    assert_eq!(wh.config_version, 1);
    assert_eq!(
        wh.configuration,
        switchboard_model::Configuration::default()
    );
    assert_eq!(
        wh.config_digest,
        configuration_digest(&json!({"rules": [], "params": {}}))
    );
    assert_eq!(wh.grant, vec!["forge", "triage"]);
    assert_eq!(wh.default_queue(), Some("forge"));
    assert_eq!(wh.source_type, SourceType::Github);
    assert!(!wh.reject_unverified);
    assert_eq!(wh.trusted_actors, None);
    assert_eq!(db.get_webhook(&alice, &wh.id).await.unwrap(), wh);
    assert_eq!(db.webhook_for_ingest(&wh.id).await.unwrap(), wh);
    assert_eq!(db.list_webhooks(&alice).await.unwrap(), vec![wh.clone()]);

    let given = db
        .create_webhook(NewWebhook {
            owner_scope: alice.clone(),
            source_type: SourceType::Forgejo,
            secret: Some("It's a Secret to Everybody".into()),
            grant: vec!["forge".into()],
            reject_unverified: true,
            name: None,
            configuration: Some(
                switchboard_model::Configuration::from_json(r#"{"params": {"x": 1}}"#)
                    .expect("a configuration"),
            ),
            actor: Actor::operator(),
        })
        .await
        .unwrap();
    assert_eq!(given.secret, "It's a Secret to Everybody");
    assert!(given.reject_unverified);
    assert_eq!(given.configuration.params["x"], 1);
    assert_ne!(given.id, wh.id);
    assert_eq!(db.list_webhooks(&alice).await.unwrap().len(), 2);
}

pub async fn another_scopes_id_is_not_found_like_an_unknown_or_malformed_one(db: TestDb) {
    let alice = human(&db, "alice").await;
    let bob = human(&db, "bob").await;
    let wh = webhook(&db, &alice).await;
    let event = db
        .insert_event(NewEvent {
            webhook_id: wh.id.clone(),
            delivery_id: "d-1".into(),
            kind: "ping".into(),
            headers: vec![],
            body: b"{}".to_vec().into(),
            verified: true,
        })
        .await
        .unwrap();
    let todo = db
        .insert_todo(
            &event.id,
            NewTodo {
                queue: "forge".into(),
                rule_id: None,
            },
        )
        .await
        .unwrap()
        .todo;

    let other_scope = not_found(db.get_webhook(&bob, &wh.id).await, "webhook");
    let unknown = not_found(
        db.get_webhook(&alice, "wh_00000000000000000000000000000000")
            .await,
        "webhook",
    );
    let malformed = not_found(
        db.get_webhook(&alice, "'; DROP TABLE webhooks; --").await,
        "webhook",
    );
    let empty = not_found(db.get_webhook(&alice, "").await, "webhook");
    assert!(other_scope == unknown && unknown == malformed && malformed == empty);

    not_found(
        db.rotate_webhook_secret(&bob, &wh.id, None).await,
        "webhook",
    );
    not_found(
        db.set_webhook_grant(&bob, &wh.id, &["x".into()]).await,
        "webhook",
    );
    not_found(
        db.set_reject_unverified(&bob, &wh.id, true).await,
        "webhook",
    );
    not_found(
        db.list_events(&bob, &wh.id, &Page::default()).await,
        "webhook",
    );
    not_found(db.recent_events(&bob, &wh.id, 10, None).await, "webhook");
    not_found(
        db.list_history(&bob, &wh.id, &Page::default()).await,
        "webhook",
    );
    not_found(db.get_event(&bob, &event.id).await, "event");
    not_found(db.get_todo(&bob, &todo.id).await, "todo");
    not_found(
        db.claim_todo(&bob, &todo.id, "ep_x", crate::harness::CLAIM_TTL)
            .await,
        "todo",
    );
    not_found(db.release_todo(&bob, &todo.id, "ep_x").await, "todo");
    not_found(db.complete_todo(&bob, &todo.id, "ep_x").await, "todo");
    let save = SaveConfiguration {
        configuration: switchboard_model::Configuration::from_json(r#"{"params": {"a": 1}}"#)
            .expect("a configuration"),
        ..Default::default()
    };
    not_found(db.save_configuration(&bob, &wh.id, save).await, "webhook");
    not_found(db.delete_webhook(&bob, &wh.id).await, "webhook");
    assert!(db.list_webhooks(&bob).await.unwrap().is_empty());
    assert!(
        db.list_todos(&bob, "forge", Default::default(), &Page::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Nothing above touched alice's webhook.
    assert_eq!(db.get_webhook(&alice, &wh.id).await.unwrap(), wh);
}

pub async fn rotate_grant_and_switches(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let rotated = db
        .rotate_webhook_secret(&alice, &wh.id, None)
        .await
        .unwrap();
    assert_ne!(rotated.secret, wh.secret);
    assert_eq!(rotated.secret.len(), 64);
    let given = db
        .rotate_webhook_secret(&alice, &wh.id, Some("a-new-secret-of-some-length".into()))
        .await
        .unwrap();
    assert_eq!(given.secret, "a-new-secret-of-some-length");
    assert_eq!(given.config_version, 1, "a secret is not configuration");
    let granted = db
        .set_webhook_grant(&alice, &wh.id, &["review".into(), "forge".into()])
        .await
        .unwrap();
    assert_eq!(granted.default_queue(), Some("review"));
    assert!(
        db.set_reject_unverified(&alice, &wh.id, true)
            .await
            .unwrap()
            .reject_unverified
    );
    assert!(
        !db.set_reject_unverified(&alice, &wh.id, false)
            .await
            .unwrap()
            .reject_unverified
    );
}

pub async fn delete_takes_events_todos_and_history_along(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let keep = webhook(&db, &alice).await;
    for w in [&wh, &keep] {
        let event = db
            .insert_event(NewEvent {
                webhook_id: w.id.clone(),
                delivery_id: "d-1".into(),
                kind: "ping".into(),
                headers: vec![],
                body: vec![].into(),
                verified: false,
            })
            .await
            .unwrap();
        let todo = Some(NewTodo {
            queue: "forge".into(),
            rule_id: None,
        });
        db.record_decision(
            &event.id,
            RecordDecision {
                decision: switchboard_model::RecordedDecision::new(
                    switchboard_model::Label::Default,
                ),
                fault: None,
                todo,
                decided_by: None,
            },
        )
        .await
        .unwrap();
        assert!(
            db.try_acquire_replay_lease(&w.id, "replica-1", std::time::Duration::from_secs(30))
                .await
                .unwrap()
        );
        // A plan of each (issue 49: a deleted webhook takes its plans along).
        let (_, token_hash) = switchboard_store::new_plan_token().unwrap();
        db.insert_plan(switchboard_store::NewPlan {
            webhook_id: w.id.clone(),
            owner_scope: w.owner_scope.clone(),
            token_hash,
            pack_name: "drop-ci-noise".into(),
            pack_version: "1.0.0".into(),
            params_digest: "p".into(),
            candidate: crate::harness::config_routing_to("forge"),
            base_config_version: w.config_version,
            expires_at: db.clock().now_ms() + 15 * 60 * 1000,
            plan: switchboard_model::plan::StoredPlan::default(),
        })
        .await
        .unwrap();
    }
    db.delete_webhook(&alice, &wh.id).await.unwrap();
    not_found(db.get_webhook(&alice, &wh.id).await, "webhook");
    not_found(db.delete_webhook(&alice, &wh.id).await, "webhook");
    for table in [
        "events",
        "todos",
        "configuration_history",
        "replay_leases",
        "plans",
    ] {
        let sql = match table {
            "events" => "SELECT COUNT(*) AS n FROM events WHERE webhook_id = $1",
            "todos" => "SELECT COUNT(*) AS n FROM todos WHERE webhook_id = $1",
            "plans" => "SELECT COUNT(*) AS n FROM plans WHERE webhook_id = $1",
            "configuration_history" => {
                "SELECT COUNT(*) AS n FROM configuration_history WHERE webhook_id = $1"
            }
            _ => "SELECT COUNT(*) AS n FROM replay_leases WHERE webhook_id = $1",
        };
        let gone: i64 = sqlx::query(sql)
            .bind(wh.id.as_str())
            .fetch_one(db.pool())
            .await
            .unwrap()
            .try_get("n")
            .unwrap();
        let kept: i64 = sqlx::query(sql)
            .bind(keep.id.as_str())
            .fetch_one(db.pool())
            .await
            .unwrap()
            .try_get("n")
            .unwrap();
        assert_eq!((gone, kept), (0, 1), "{table}");
    }
}

pub async fn bad_webhook_arguments_are_refused(db: TestDb) {
    let alice = human(&db, "alice").await;
    let base = NewWebhook {
        owner_scope: alice.clone(),
        source_type: SourceType::Generic,
        secret: None,
        grant: vec!["forge".into()],
        reject_unverified: false,
        name: None,
        configuration: None,
        actor: Actor::operator(),
    };
    invalid(
        db.create_webhook(NewWebhook {
            grant: vec![],
            ..base.clone()
        })
        .await,
        "grant",
    );
    invalid(
        db.create_webhook(NewWebhook {
            grant: vec!["Forge!".into()],
            ..base.clone()
        })
        .await,
        "grant",
    );
    invalid(
        db.create_webhook(NewWebhook {
            grant: vec!["a".into(), "a".into()],
            ..base.clone()
        })
        .await,
        "grant",
    );
    invalid(
        db.create_webhook(NewWebhook {
            secret: Some("short".into()),
            ..base.clone()
        })
        .await,
        "secret",
    );
    invalid(
        db.create_webhook(NewWebhook {
            owner_scope: OwnerScope::team("ghosts"),
            ..base.clone()
        })
        .await,
        "owner_scope",
    );
    invalid(
        db.rotate_webhook_secret(&alice, "wh_x", Some("tiny".into()))
            .await,
        "secret",
    );
    assert!(
        db.list_webhooks(&alice).await.unwrap().is_empty(),
        "no refused webhook was stored"
    );
}

/// Ingest's copy of a webhook row (issue 22, `webhook_cache`): every change to the row moves its
/// revision — through this store, another replica's, or plain SQL — and an event stored naming
/// a revision the row has left is refused as stale and stores nothing; at the current revision,
/// or naming none, it is stored. The copy is kept until asked for anew.
pub async fn a_webhook_copy_is_trusted_only_at_its_revision(db: TestDb) {
    use switchboard_store::is_stale_webhook;
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let copy = db.webhook_for_ingest_cached(&wh.id, false).await.unwrap();
    assert_eq!(copy.webhook, wh);
    let elsewhere = switchboard_store::Store::connect(&db.url, db.store.sealing_key())
        .await
        .expect("another replica's store");
    let mut revisions = vec![copy.revision];
    let current = |store: switchboard_store::Store, id: String| async move {
        store.webhook_for_ingest_cached(&id, true).await.unwrap()
    };
    elsewhere
        .set_reject_unverified(&alice, &wh.id, true)
        .await
        .unwrap();
    revisions.push(current(db.store.clone(), wh.id.clone()).await.revision);
    elsewhere
        .rotate_webhook_secret(&alice, &wh.id, None)
        .await
        .unwrap();
    revisions.push(current(db.store.clone(), wh.id.clone()).await.revision);
    sqlx::query("UPDATE webhooks SET reject_unverified = 0 WHERE id = $1")
        .bind(wh.id.as_str())
        .execute(elsewhere.pool())
        .await
        .unwrap();
    let now = current(db.store.clone(), wh.id.clone()).await;
    revisions.push(now.revision);
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "each change moves the revision: {revisions:?}"
    );
    assert!(!now.webhook.reject_unverified && now.webhook.secret != wh.secret);
    // A fresh read replaced the copy; asked for without `fresh`, it is the new one.
    let kept = db.webhook_for_ingest_cached(&wh.id, false).await.unwrap();
    assert_eq!(kept.revision, now.revision);

    let event = |delivery: &str| NewEvent {
        webhook_id: wh.id.clone(),
        delivery_id: delivery.into(),
        kind: "push".into(),
        headers: vec![],
        body: b"{}".to_vec().into(),
        verified: true,
    };
    let to_forge = queued("forge");
    for decided in [None, Some(to_forge.clone())] {
        let mut draft = db.draft_event(event("stale")).unwrap();
        draft.webhook_revision = Some(copy.revision);
        let refused = db.store_event(draft, decided.clone()).await;
        assert!(refused.as_ref().is_err_and(is_stale_webhook), "{refused:?}");
    }
    let count = |sql: &'static str| {
        let pool = db.pool().clone();
        async move {
            let row = sqlx::query(sql).fetch_one(&pool).await.unwrap();
            row.try_get::<i64, _>("n").unwrap()
        }
    };
    assert_eq!(count("SELECT COUNT(*) AS n FROM events").await, 0);
    assert_eq!(count("SELECT COUNT(*) AS n FROM todos").await, 0);
    let mut draft = db.draft_event(event("current")).unwrap();
    draft.webhook_revision = Some(now.revision);
    let (stored, todo) = db.store_event(draft, Some(to_forge.clone())).await.unwrap();
    assert!(stored.routed && todo.is_some());
    let draft = db.draft_event(event("any")).unwrap();
    assert!(
        db.store_event(draft, None).await.is_ok(),
        "no revision named"
    );

    // Gone: `not_found`, not stale, with or without a revision.
    elsewhere.delete_webhook(&alice, &wh.id).await.unwrap();
    let mut draft = db.draft_event(event("gone")).unwrap();
    draft.webhook_revision = Some(now.revision);
    not_found(db.store_event(draft, None).await, "webhook");
    not_found(db.webhook_for_ingest_cached(&wh.id, true).await, "webhook");
    elsewhere.close().await;
}

/// Migration 0014 from a database written at 0013 with a webhook and events in it: everything
/// is kept, the webhook starts at revision 0, and a change made the way an older replica makes
/// it (an `UPDATE` that knows nothing of revisions) still moves it.
pub async fn upgrading_from_0013_gives_webhooks_a_revision_every_change_moves(db: TestDb) {
    use crate::harness::{ALL_MIGRATIONS, applied_migrations};
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 13).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let before = old
        .insert_event(NewEvent {
            webhook_id: wh.id.clone(),
            delivery_id: "d-before".into(),
            kind: "push".into(),
            headers: vec![("X-GitHub-Event".into(), "push".into())],
            body: b"{\"ref\":\"main\"}".to_vec().into(),
            verified: true,
        })
        .await
        .unwrap();
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    assert_eq!(new.webhook_for_ingest(&wh.id).await.unwrap(), wh);
    assert_eq!(new.get_event(&alice, &before.id).await.unwrap(), before);
    let copy = new.webhook_for_ingest_cached(&wh.id, false).await.unwrap();
    assert_eq!(copy.revision, 0);
    sqlx::query("UPDATE webhooks SET grant_queues = '[\"forge\"]' WHERE id = $1")
        .bind(wh.id.as_str())
        .execute(new.pool())
        .await
        .unwrap();
    let read = new.webhook_for_ingest_cached(&wh.id, true).await.unwrap();
    assert_eq!(read.revision, 1);
    assert_eq!(read.webhook.grant, vec!["forge"]);
    new.close().await;
}

/// An endpoint's delete of a `person` webhook is refused `approval_required` and deletes
/// nothing; another scope's (and an unknown) id is `not_found` as ever; under `self` it goes.
pub async fn an_endpoint_deletes_a_webhook_only_under_self(db: TestDb) {
    use switchboard_store::ConfirmPolicy;
    use switchboard_store::Error;
    let alice = human(&db, "alice").await;
    let bob = human(&db, "bob").await;
    let wh = webhook(&db, &alice).await;
    db.set_confirm_policy(&alice, &wh.id, ConfirmPolicy::Person)
        .await
        .unwrap();
    let refused = db
        .delete_webhook_by_endpoint(&alice, &wh.id)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::ApprovalRequired { webhook_id } if *webhook_id == wh.id),
        "{refused:?}"
    );
    assert!(db.get_webhook(&alice, &wh.id).await.is_ok(), "still there");
    not_found(db.delete_webhook_by_endpoint(&bob, &wh.id).await, "webhook");
    not_found(
        db.delete_webhook_by_endpoint(&alice, "wh_unknown").await,
        "webhook",
    );
    db.set_confirm_policy(&alice, &wh.id, ConfirmPolicy::SelfConfirm)
        .await
        .unwrap();
    db.delete_webhook_by_endpoint(&alice, &wh.id).await.unwrap();
    not_found(db.get_webhook(&alice, &wh.id).await, "webhook");
}

/// A stored provenance or decision that does not read is an internal error naming what did
/// not read — never a webhook with no packs installed, nor an event with no decision.
pub async fn a_stored_row_that_does_not_read_is_an_internal_error(db: TestDb) {
    use switchboard_store::Error;
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    assert!(
        db.get_webhook(&alice, &wh.id)
            .await
            .unwrap()
            .provenance
            .is_empty()
    );
    sqlx::query("UPDATE webhooks SET provenance = $1 WHERE id = $2")
        .bind(r#"{"drop-ci-noise": {"version": "1.0.0"}}"#)
        .bind(wh.id.as_str())
        .execute(db.store.pool())
        .await
        .unwrap();
    match db.get_webhook(&alice, &wh.id).await {
        Err(Error::Internal { context }) => {
            assert!(context.contains(&wh.id), "{context}")
        }
        other => panic!("{other:?}"),
    }
    sqlx::query("UPDATE webhooks SET provenance = '{}' WHERE id = $1")
        .bind(wh.id.as_str())
        .execute(db.store.pool())
        .await
        .unwrap();
    let stored = db
        .insert_event(NewEvent {
            webhook_id: wh.id.clone(),
            delivery_id: "odd".into(),
            kind: "issues.opened".into(),
            headers: vec![],
            body: b"{}".to_vec().into(),
            verified: true,
        })
        .await
        .unwrap();
    db.record_decision(&stored.id, queued("forge"))
        .await
        .unwrap();
    assert!(
        db.get_event(&alice, &stored.id)
            .await
            .unwrap()
            .decision
            .is_some()
    );
    sqlx::query("UPDATE events SET decision = $1 WHERE id = $2")
        .bind(r#"{"queue": "forge"}"#)
        .bind(stored.id.as_str())
        .execute(db.store.pool())
        .await
        .unwrap();
    match db.get_event(&alice, &stored.id).await {
        Err(Error::Internal { context }) => assert!(context.contains("decision"), "{context}"),
        other => panic!("{other:?}"),
    }
}

/// Issue 48: a database written before webhooks had names (0022) keeps every webhook, unnamed;
/// a person names one, the name is listed and read, audited in the change log, and a blank
/// name clears it. Names are display only: two webhooks may share one.
pub async fn upgrading_from_0022_keeps_webhooks_and_a_person_names_one(db: TestDb) {
    use switchboard_model::WebhookName;
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 22).await;
    let alice = human(&old, "alice").await;
    let before = webhook(&old, &alice).await;
    assert_eq!(before.name, None);
    old.close().await;

    let new = switchboard_store::Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    let kept = new.get_webhook(&alice, &before.id).await.expect("kept");
    assert_eq!(
        (kept.name.clone(), kept.config_version, kept.secret.clone()),
        (None, 1, before.secret.clone())
    );
    assert_eq!(kept.display_name(), "");

    let name = WebhookName::parse("  acme/payments (prod) ")
        .expect("a name")
        .expect("not blank");
    let named = new
        .by_person("alice")
        .set_webhook_name(&alice, &before.id, Some(&name))
        .await
        .expect("named");
    assert_eq!(named.display_name(), "acme/payments (prod)");
    assert_eq!(named.config_version, 1, "a name is no configuration change");
    assert_eq!(
        new.list_webhooks(&alice).await.expect("listed")[0].name,
        Some(name.clone())
    );
    // Another scope's person cannot: not_found, like an unknown id.
    let bob = human(&new, "bob").await;
    not_found(
        new.by_person("bob")
            .set_webhook_name(&bob, &before.id, Some(&name))
            .await,
        "webhook",
    );

    // Created with a name, the same one: names need not be unique.
    let twin = new
        .create_webhook(NewWebhook {
            name: Some(name.clone()),
            ..crate::harness::new_webhook(&alice)
        })
        .await
        .expect("created with a name");
    assert_eq!(twin.name, Some(name.clone()));
    assert_eq!(
        new.get_webhook(&alice, &twin.id).await.expect("read").name,
        Some(name)
    );

    // The rename is in the change log, by the person, naming the webhook.
    let entries = new.list_changes(Some(&alice), 0, 100).await.expect("log");
    let renamed: Vec<switchboard_model::change_log::ChangeEntry> = entries
        .iter()
        .map(|e| serde_json::from_str(&e.text).expect("an entry"))
        .filter(|e: &switchboard_model::change_log::ChangeEntry| {
            e.detail.get("action").map(String::as_str) == Some("rename_webhook")
        })
        .collect();
    assert_eq!(renamed.len(), 1, "{entries:?}");
    assert_eq!(renamed[0].actor.human.as_deref(), Some("alice"));
    assert_eq!(renamed[0].webhook_id.as_deref(), Some(before.id.as_str()));
    assert_eq!(
        renamed[0].detail.get("name").map(String::as_str),
        Some("acme/payments (prod)")
    );

    let cleared = new
        .by_person("alice")
        .set_webhook_name(&alice, &before.id, None)
        .await
        .expect("cleared");
    assert_eq!(cleared.name, None);
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}
