use sqlx::Row;
use switchboard_store::Backend;
use switchboard_store::{Error, Store};

use crate::harness::{ALL_MIGRATIONS, TestDb, applied_migrations};

pub async fn migrations_apply_once_and_reconnect(db: TestDb) {
    crate::harness::human(&db, "alice").await;
    // A second process (or replica) opening the same database runs the migrator again: a no-op.
    let again = Store::connect(&db.url, db.store.sealing_key())
        .await
        .expect("reconnect");
    assert_eq!(
        again.get_human("alice").await.expect("data kept").login,
        "alice"
    );
    // Every migration once: 0001 (the schema), 0002 (rate-limit grants), 0003 (the once-key),
    // 0004 (events by age), 0005 (the sliding replay limit's log), 0006 (grant allowances),
    // 0007 (plan approval), 0008 (console sessions), 0009 (todo leases), 0010 (the
    // configuration a decision was made under), 0011 (operator credentials and audit), 0012
    // (redrives).
    assert_eq!(applied_migrations(&again).await, ALL_MIGRATIONS);
    again.close().await;
}

pub async fn sqlite_runs_in_wal_mode(db: TestDb) {
    if db.backend() != Backend::Sqlite {
        return;
    }
    let mode: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(db.pool())
        .await
        .expect("pragma")
        .try_get(0)
        .expect("mode");
    assert_eq!(mode.to_lowercase(), "wal");
    let sync: i64 = sqlx::query("PRAGMA synchronous")
        .fetch_one(db.pool())
        .await
        .expect("pragma")
        .try_get(0)
        .expect("sync");
    assert_eq!(sync, 1, "synchronous=NORMAL");
    let busy: i64 = sqlx::query("PRAGMA busy_timeout")
        .fetch_one(db.pool())
        .await
        .expect("pragma")
        .try_get(0)
        .expect("busy");
    assert!(busy >= 5000);
}

pub async fn unknown_database_url_is_refused(db: TestDb) {
    match Store::connect("mysql://localhost/x", db.store.sealing_key()).await {
        Err(Error::InvalidArgument {
            field: "database_url",
            ..
        }) => {}
        other => panic!("expected invalid database_url, got {other:?}"),
    }
}

/// Issue 15's migration (0003), from a database written at 0002 with data in it: todos, their
/// claims and the webhook's secret are kept; the once-key now tells verified deliveries from
/// unverified ones, so a forgery that came first leaves the genuine delivery its own todo.
pub async fn upgrading_from_0002_keeps_todos_and_a_forgery_no_longer_takes_the_once_key(
    db: TestDb,
) {
    use switchboard_store::{NewEvent, NewTodo, RecordDecision};

    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 2).await;
    let alice = crate::harness::human(&old, "alice").await;
    let hook = crate::harness::webhook(&old, &alice).await;
    let event = |delivery_id: &str, verified: bool| NewEvent {
        webhook_id: hook.id.clone(),
        delivery_id: delivery_id.into(),
        kind: "pull_request.opened".into(),
        headers: vec![("x-github-event".into(), "pull_request".into())],
        body: b"{\"action\":\"opened\"}".to_vec().into(),
        verified,
    };
    let forged = old.insert_event(event("d-1", false)).await.expect("event");
    let genuine_before = old.insert_event(event("d-2", true)).await.expect("event");
    // Todos as 0002 wrote them: no verified column; one of them claimed.
    for (todo, ev, delivery, claimed) in [
        ("td_old_forged", &forged, "d-1", None),
        ("td_old_genuine", &genuine_before, "d-2", Some("ep_1")),
    ] {
        sqlx::query(
            "INSERT INTO todos (id, owner_scope, webhook_id, event_id, delivery_id, queue, rule_id, \
             created_at, claimed_by, claimed_at) VALUES ($1, $2, $3, $4, $5, 'forge', NULL, 1, $6, $7)",
        )
        .bind(todo)
        .bind(alice.to_string())
        .bind(hook.id.as_str())
        .bind(ev.id.as_str())
        .bind(delivery)
        .bind(claimed)
        .bind(claimed.map(|_| 2_i64))
        .execute(old.pool())
        .await
        .expect("a todo in the 0002 shape");
    }
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    assert_eq!(
        new.webhook_for_ingest(&hook.id).await.expect("kept").secret,
        hook.secret,
        "the signing secret still verifies"
    );
    let kept = new
        .list_todos(
            &alice,
            "forge",
            switchboard_store::TodoFilter::All,
            &switchboard_store::Page::first(10),
        )
        .await
        .expect("todos")
        .items;
    let mut ids: Vec<&str> = kept.iter().map(|t| t.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["td_old_forged", "td_old_genuine"]);
    let claimed = kept
        .iter()
        .find(|t| t.id == "td_old_genuine")
        .expect("kept");
    assert_eq!(claimed.claimed_by.as_deref(), Some("ep_1"));

    let decide = || RecordDecision {
        decision: switchboard_model::RecordedDecision::new(switchboard_model::Label::Default),
        fault: None,
        todo: Some(NewTodo {
            queue: "forge".into(),
            rule_id: None,
        }),
        decided_by: None,
    };
    // The genuine d-1, signed, after the forgery took d-1 before the upgrade: its own todo.
    let genuine = new.insert_event(event("d-1", true)).await.expect("event");
    let todo = new
        .record_decision(&genuine.id, decide())
        .await
        .expect("decided")
        .expect("a todo");
    assert!(todo.inserted, "the verified delivery gets its own todo");
    assert_eq!(todo.todo.event_id, genuine.id);
    // A signed redelivery of d-2 still finds the todo written before the upgrade …
    let again = new.insert_event(event("d-2", true)).await.expect("event");
    let todo = new
        .record_decision(&again.id, decide())
        .await
        .expect("decided")
        .expect("a todo");
    assert!(!todo.inserted);
    assert_eq!(todo.todo.id, "td_old_genuine");
    // … and an unsigned one of d-1 the forgery's.
    let forged_again = new.insert_event(event("d-1", false)).await.expect("event");
    let todo = new
        .record_decision(&forged_again.id, decide())
        .await
        .expect("decided")
        .expect("a todo");
    assert_eq!(todo.todo.id, "td_old_forged");
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}
