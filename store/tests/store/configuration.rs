use serde_json::json;
use sqlx::Row;
use switchboard_model::{ChangeProvenance, ConfigurationChange};
use switchboard_store::error::VERSION_MISMATCH;
use switchboard_store::{Actor, NewEvent, Page, SaveConfiguration};
use switchboard_store::{Error, OwnerScope};

use crate::harness::{
    TestDb, config_routing_to, decision_refused_mid_transaction, endpoint, human, invalid, webhook,
};

/// A configuration written as JSON, typed as the store takes it.
fn typed(configuration: serde_json::Value) -> switchboard_model::Configuration {
    serde_json::from_value(configuration).expect("a configuration")
}

/// A plan's provenance, as a confirm records it.
fn from_chat() -> ChangeProvenance {
    ChangeProvenance {
        plan: "pl_12".into(),
        pack: "chat".into(),
        version: "1.0.0".into(),
        proven: true,
        ..ChangeProvenance::default()
    }
}

fn save(configuration: switchboard_model::Configuration, actor: &Actor) -> SaveConfiguration {
    SaveConfiguration {
        configuration,
        actor: actor.clone(),
        change: ConfigurationChange::op("set_webhook_rules"),
        ..Default::default()
    }
}

pub async fn save_bumps_version_and_appends_history(db: TestDb) {
    let alice = human(&db, "alice").await;
    let ep = endpoint(&db, "alice").await;
    let actor = Actor::endpoint(&ep);
    let wh = webhook(&db, &alice).await;
    let config = config_routing_to("forge");
    let saved = db
        .save_configuration(
            &alice,
            &wh.id,
            SaveConfiguration {
                provenance: Some(from_chat()),
                ..save(config.clone(), &actor)
            },
        )
        .await
        .unwrap();
    assert_eq!(
        saved,
        switchboard_store::Saved {
            duplicate: false,
            version: 2,
            digest: config.digest()
        }
    );
    let now = db.get_webhook(&alice, &wh.id).await.unwrap();
    assert_eq!(
        (now.config_version, &now.config_digest, &now.configuration),
        (2, &saved.digest, &config)
    );

    let history = db
        .list_history(&alice, &wh.id, &Page::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        history.iter().map(|h| h.version).collect::<Vec<_>>(),
        vec![2, 1],
        "newest first"
    );
    let v2 = &history[0];
    assert_eq!(v2.actor, actor);
    assert_eq!(v2.actor.human_login.as_deref(), Some("alice"));
    assert_eq!(v2.change, ConfigurationChange::op("set_webhook_rules"));
    assert_eq!(v2.provenance, Some(from_chat()));
    assert_eq!(v2.digest_before.as_deref(), Some(wh.config_digest.as_str()));
    assert_eq!(v2.digest_after, saved.digest);
    assert_eq!(v2.configuration, config);
    let v1 = &history[1];
    assert_eq!(
        (v1.digest_before.as_deref(), v1.digest_after.as_str()),
        (None, wh.config_digest.as_str())
    );
    assert_eq!(v1.change, ConfigurationChange::op("create_webhook"));
    assert_eq!(v1.actor, Actor::operator());

    // Rolling back is saving an earlier version again: a new version, not a rewrite.
    let back = db
        .save_configuration(&alice, &wh.id, save(v1.configuration.clone(), &actor))
        .await
        .unwrap();
    assert_eq!(
        (back.version, back.duplicate, back.digest.as_str()),
        (3, false, wh.config_digest.as_str())
    );
}

pub async fn version_mismatch_names_the_current_version(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let actor = Actor::operator();
    let first = SaveConfiguration {
        expected_version: Some(1),
        ..save(config_routing_to("forge"), &actor)
    };
    assert_eq!(
        db.save_configuration(&alice, &wh.id, first)
            .await
            .unwrap()
            .version,
        2
    );
    let stale = SaveConfiguration {
        expected_version: Some(1),
        ..save(config_routing_to("triage"), &actor)
    };
    match db.save_configuration(&alice, &wh.id, stale).await {
        Err(Error::FailedPrecondition {
            reason,
            current_version: Some(2),
            ..
        }) => assert_eq!(reason, VERSION_MISMATCH),
        other => panic!("expected a version mismatch naming version 2, got {other:?}"),
    }
    let now = db.get_webhook(&alice, &wh.id).await.unwrap();
    assert_eq!(
        (now.config_version, now.configuration),
        (2, config_routing_to("forge"))
    );
    assert_eq!(
        db.list_history(&alice, &wh.id, &Page::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
}

pub async fn duplicate_save_writes_nothing(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let actor = Actor::operator();
    db.save_configuration(
        &alice,
        &wh.id,
        save(
            typed(json!({"rules": [], "params": {"a": 1, "b": 2}})),
            &actor,
        ),
    )
    .await
    .unwrap();
    // Same configuration, keys in another order: equal digests, so a duplicate.
    let again = db
        .save_configuration(
            &alice,
            &wh.id,
            SaveConfiguration {
                expected_version: Some(2),
                ..save(
                    typed(json!({"params": {"b": 2, "a": 1}, "rules": []})),
                    &actor,
                )
            },
        )
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.version, 2);
    assert_eq!(
        db.get_webhook(&alice, &wh.id).await.unwrap().config_version,
        2
    );
    assert_eq!(
        db.list_history(&alice, &wh.id, &Page::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    // RFC-0003: duplicates are checked before expected_version, so the retry of a save that
    // succeeded (its expected_version now one behind) is a duplicate, not a conflict …
    let retried = SaveConfiguration {
        expected_version: Some(1),
        ..save(
            typed(json!({"rules": [], "params": {"a": 1, "b": 2}})),
            &actor,
        )
    };
    let retried = db
        .save_configuration(&alice, &wh.id, retried)
        .await
        .unwrap();
    assert!(retried.duplicate);
    assert_eq!(retried.version, 2);
    // … while a change on a stale version is still refused.
    let stale = SaveConfiguration {
        expected_version: Some(1),
        ..save(typed(json!({"rules": [], "params": {"a": 2}})), &actor)
    };
    assert!(matches!(
        db.save_configuration(&alice, &wh.id, stale).await,
        Err(Error::FailedPrecondition { .. })
    ));
}

pub async fn provenance_is_limited_to_4_kib(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let big = SaveConfiguration {
        provenance: Some(ChangeProvenance {
            plan: "x".repeat(4096),
            ..ChangeProvenance::default()
        }),
        ..save(config_routing_to("forge"), &Actor::operator())
    };
    invalid(
        db.save_configuration(&alice, &wh.id, big).await,
        "provenance",
    );
    let fits = SaveConfiguration {
        provenance: Some(ChangeProvenance {
            plan: "x".repeat(4000),
            ..ChangeProvenance::default()
        }),
        ..save(config_routing_to("forge"), &Actor::operator())
    };
    assert_eq!(
        db.save_configuration(&alice, &wh.id, fits)
            .await
            .unwrap()
            .version,
        2
    );
    // A configuration is a configuration by its type; the store still bounds its size.
    let huge = typed(json!({"params": {"big": "x".repeat(600 * 1024)}}));
    invalid(
        db.save_configuration(&alice, &wh.id, save(huge, &Actor::operator()))
            .await,
        "configuration",
    );
}

pub async fn failed_save_leaves_nothing_partial(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    // Occupy the history slot of version 2, so the save fails after it has updated the webhook
    // row; the transaction must take that update back with it.
    sqlx::query(
        "INSERT INTO configuration_history (webhook_id, version, owner_scope, change, digest_after, configuration, saved_at) \
         VALUES ($1, 2, $2, '{}', 'x', '{}', 0)",
    )
    .bind(wh.id.as_str())
    .bind(alice.to_string())
    .execute(db.pool())
    .await
    .unwrap();
    match db
        .save_configuration(
            &alice,
            &wh.id,
            save(config_routing_to("forge"), &Actor::operator()),
        )
        .await
    {
        Err(e @ Error::Internal { .. }) => assert_eq!(
            e.to_string(),
            "internal error",
            "no SQL in the external message"
        ),
        other => panic!("expected an internal error, got {other:?}"),
    }
    let now = db.get_webhook(&alice, &wh.id).await.unwrap();
    assert_eq!(now, wh, "version, digest and configuration unchanged");
}

pub async fn failed_decision_leaves_the_event_unrouted(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let event = db
        .insert_event(NewEvent {
            webhook_id: wh.id.clone(),
            delivery_id: "d-1".into(),
            kind: "ping".into(),
            headers: vec![],
            body: vec![].into(),
            verified: true,
        })
        .await
        .unwrap();
    // The todo is refused after the decision was written: neither may remain.
    invalid(
        db.record_decision(&event.id, decision_refused_mid_transaction())
            .await,
        "queue",
    );
    let after = db.get_event(&alice, &event.id).await.unwrap();
    assert!(!after.routed && after.decision.is_none());
    assert_eq!(db.unrouted_events(10).await.unwrap().len(), 1);
    let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM todos")
        .fetch_one(db.pool())
        .await
        .unwrap()
        .try_get("n")
        .unwrap();
    assert_eq!(n, 0);
}

pub async fn history_pages_newest_first(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    for i in 0..4 {
        db.save_configuration(
            &alice,
            &wh.id,
            save(
                typed(json!({"rules": [], "params": {"i": i}})),
                &Actor::operator(),
            ),
        )
        .await
        .unwrap();
    }
    let first = db
        .list_history(&alice, &wh.id, &Page::first(2))
        .await
        .unwrap();
    assert_eq!(
        first.items.iter().map(|h| h.version).collect::<Vec<_>>(),
        vec![5, 4]
    );
    // A history cursor is not an events cursor, nor is the version it holds a cursor.
    invalid(
        db.list_events(
            &alice,
            &wh.id,
            &Page::after(first.next_cursor.clone().expect("more"), 2),
        )
        .await,
        "cursor",
    );
    invalid(
        db.list_history(&alice, &wh.id, &Page::after("4", 2)).await,
        "cursor",
    );
    let second = db
        .list_history(
            &alice,
            &wh.id,
            &Page::after(first.next_cursor.expect("more"), 2),
        )
        .await
        .unwrap();
    assert_eq!(
        second.items.iter().map(|h| h.version).collect::<Vec<_>>(),
        vec![3, 2]
    );
    let third = db
        .list_history(
            &alice,
            &wh.id,
            &Page::after(second.next_cursor.expect("more"), 2),
        )
        .await
        .unwrap();
    assert_eq!((third.items.len(), third.next_cursor), (1, None));
    invalid(
        db.list_history(&alice, &wh.id, &Page::after("v3", 2)).await,
        "cursor",
    );
    crate::harness::not_found(
        db.list_history(&OwnerScope::human("bob"), &wh.id, &Page::default())
            .await,
        "webhook",
    );
}

pub async fn packs_and_trusted_actors_are_saved_with_the_configuration(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let packs: switchboard_model::provenance::Provenance = serde_json::from_value(json!([{
        "name": "trusted-actors", "version": "2.0.0", "rule_ids": ["trusted-actors--gate"],
        "digest": "ab", "rule_digests": {"trusted-actors--gate": "cd"}, "sets_default_action": false,
        "owned_params": [], "installed_at": "2026-12-01T00:00:00Z",
        "installed_by": {"endpoint": "ep_1", "human": "alice"}, "proven": true, "truncated": false,
        "replay": {"events_replayed": 3, "window_from": null, "window_to": null, "changed": 0,
                   "replayed_at": "2026-12-01T00:00:00Z"}
    }]))
    .expect("installed packs");
    let actors = switchboard_model::TrustedActors {
        humans: vec!["alice".into()],
        agents: vec![],
        bots: vec!["ci[bot]".into()],
    };
    let change = SaveConfiguration {
        installed_packs: Some(packs.clone()),
        trusted_actors: Some(Some(actors.clone())),
        ..save(config_routing_to("forge"), &Actor::operator())
    };
    assert_eq!(
        db.save_configuration(&alice, &wh.id, change)
            .await
            .unwrap()
            .version,
        2
    );
    let now = db.get_webhook(&alice, &wh.id).await.unwrap();
    assert_eq!(
        (now.provenance, now.trusted_actors),
        (packs.clone(), Some(actors.clone()))
    );
    // Only the trusted actors change: not a duplicate, even though the rules are the same.
    let clear = SaveConfiguration {
        trusted_actors: Some(None),
        ..save(config_routing_to("forge"), &Actor::operator())
    };
    let saved = db.save_configuration(&alice, &wh.id, clear).await.unwrap();
    assert_eq!((saved.duplicate, saved.version), (false, 3));
    let now = db.get_webhook(&alice, &wh.id).await.unwrap();
    assert_eq!((now.provenance, now.trusted_actors), (packs, None));
    let same = SaveConfiguration {
        trusted_actors: Some(None),
        ..save(config_routing_to("forge"), &Actor::operator())
    };
    assert!(
        db.save_configuration(&alice, &wh.id, same)
            .await
            .unwrap()
            .duplicate
    );
}

/// ADR-0028 in the store: under `confirm_policy: person` a save by an endpoint is refused
/// `approval_required` inside the save's own locked read (so a switch to `person` is never
/// overtaken by a save that read `self` before it), writing nothing; a person's save (an
/// acceptance) and an operator's still save.
pub async fn under_person_only_a_person_or_an_operator_saves(db: TestDb) {
    use switchboard_store::ConfirmPolicy;
    let alice = human(&db, "alice").await;
    let ep = endpoint(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    db.set_confirm_policy(&alice, &wh.id, ConfirmPolicy::Person)
        .await
        .unwrap();
    let refused = db
        .save_configuration(
            &alice,
            &wh.id,
            save(config_routing_to("forge"), &Actor::endpoint(&ep)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::ApprovalRequired { webhook_id } if *webhook_id == wh.id),
        "{refused:?}"
    );
    assert_eq!(refused.reason().as_str(), "approval_required");
    let now = db.get_webhook(&alice, &wh.id).await.unwrap();
    assert_eq!(now.config_version, 1, "nothing saved");
    let history = db
        .list_history(&alice, &wh.id, &Page::default())
        .await
        .unwrap()
        .items;
    assert_eq!(history.len(), 1, "no history written");

    let person = Actor {
        endpoint_id: None,
        human_login: Some("alice".into()),
    };
    let accepted = db
        .save_configuration(&alice, &wh.id, save(config_routing_to("forge"), &person))
        .await
        .unwrap();
    assert_eq!(accepted.version, 2);
    let by_operator = db
        .save_configuration(
            &alice,
            &wh.id,
            save(config_routing_to("review"), &Actor::operator()),
        )
        .await
        .unwrap();
    assert_eq!(by_operator.version, 3);

    db.set_confirm_policy(&alice, &wh.id, ConfirmPolicy::SelfConfirm)
        .await
        .unwrap();
    let by_endpoint = db
        .save_configuration(
            &alice,
            &wh.id,
            save(config_routing_to("forge"), &Actor::endpoint(&ep)),
        )
        .await
        .unwrap();
    assert_eq!(by_endpoint.version, 4);
}
