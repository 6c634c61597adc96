//! One fresh database per test, from testkit (`switchboard_testkit::database`): a temp SQLite
//! file always, and a fresh PostgreSQL schema when `SWITCHBOARD_TEST_DATABASE_URL` is set
//! (dropped afterwards, even when the test panics).

use std::future::Future;
use std::ops::Deref;

use serde_json::json;
use switchboard_store::Error;
use switchboard_store::OwnerScope;
use switchboard_store::{Actor, NewEndpoint, NewWebhook, SourceType, StoreOptions, Webhook};
use switchboard_store::{Result, Store};
use switchboard_testkit::database::{Backend, Beside, TestDatabase};

/// The instance-wide claim lease the tests claim with (control's default).
pub const CLAIM_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// What a suite test gets: the store and the URL it was opened with (to reconnect).
pub struct TestDb {
    pub store: Store,
    pub url: String,
    /// Makes the databases [`second_database`] hands out, removed with the test's.
    beside: Beside,
}

impl Deref for TestDb {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

pub async fn run_sqlite<F, Fut>(test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    run(Backend::Sqlite, test).await;
}

pub async fn run_postgres<F, Fut>(test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    run(Backend::Postgres, test).await;
}

/// Opens a store with a fresh key on a fresh database of `backend` and runs `test` on it;
/// PostgreSQL checks nothing unless `SWITCHBOARD_TEST_DATABASE_URL` is set.
async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(database) = TestDatabase::create(backend).await else {
        return;
    };
    let key = switchboard_store::SealingKey::generate().expect("a key");
    let store = Store::connect(database.url(), &key)
        .await
        .expect("open the store");
    let db = TestDb {
        store: store.clone(),
        url: database.url().to_string(),
        beside: database.beside(),
    };
    database
        .run(test(db), async move { store.close().await })
        .await;
}

/// Asserts a `not_found` for `resource`, and returns its external message for comparisons.
#[track_caller]
pub fn not_found<T: std::fmt::Debug>(result: Result<T>, resource: &str) -> String {
    match result {
        Err(e @ Error::NotFound { resource: r }) if r == resource => e.to_string(),
        other => panic!("expected {resource} not found, got {other:?}"),
    }
}

/// Asserts an `invalid_argument` naming `field`.
#[track_caller]
pub fn invalid<T: std::fmt::Debug>(result: Result<T>, field: &str) {
    match result {
        Err(Error::InvalidArgument { field: f, .. }) if f == field => {}
        other => panic!("expected invalid {field}, got {other:?}"),
    }
}

/// A human with its own scope.
pub async fn human(store: &Store, login: &str) -> OwnerScope {
    store.create_human(login, None).await.expect("create human");
    OwnerScope::human(login)
}

/// A github webhook in `scope` routing to `forge` (default) and `triage`.
pub async fn webhook(store: &Store, scope: &OwnerScope) -> Webhook {
    store
        .create_webhook(new_webhook(scope))
        .await
        .expect("create webhook")
}

/// What [`webhook`] creates.
pub fn new_webhook(scope: &OwnerScope) -> NewWebhook {
    NewWebhook {
        owner_scope: scope.clone(),
        source_type: SourceType::Github,
        secret: None,
        grant: vec!["forge".into(), "triage".into()],
        reject_unverified: false,
        name: None,
        configuration: None,
        actor: Actor::operator(),
    }
}

/// An endpoint for `login` in its own scope with every verb.
pub async fn endpoint(store: &Store, login: &str) -> switchboard_store::Endpoint {
    store
        .vend_endpoint(NewEndpoint {
            name: format!("{login}-agent"),
            human_login: login.into(),
            owner_scope: OwnerScope::human(login),
            verbs: vec![
                "webhooks".into(),
                "webhook-rules".into(),
                "rule-pack-confirm".into(),
                "todos".into(),
            ],
        })
        .await
        .expect("vend endpoint")
        .endpoint
}

/// A configuration with one rule routing to `queue`.
pub fn config_routing_to(queue: &str) -> switchboard_model::Configuration {
    serde_json::from_value(json!({"rules": [{"id": "r-1", "when": ".kind == \"pull_request.opened\"", "action": {"queue": queue}}], "params": {}}))
        .expect("a configuration")
}

/// A decision for `queue` that makes a todo there (no rule, no configuration named).
pub fn queued(queue: &str) -> switchboard_store::RecordDecision {
    switchboard_store::RecordDecision {
        decision: switchboard_model::RecordedDecision::to_queue(queue),
        fault: None,
        todo: Some(switchboard_store::NewTodo {
            queue: queue.into(),
            rule_id: None,
        }),
        decided_by: None,
    }
}

/// A decision whose todo is refused (an empty queue) after its UPDATE of the event ran, so
/// the transaction is dropped, not committed.
pub fn decision_refused_mid_transaction() -> switchboard_store::RecordDecision {
    switchboard_store::RecordDecision {
        decision: switchboard_model::RecordedDecision::to_queue(""),
        fault: None,
        todo: Some(switchboard_store::NewTodo {
            queue: String::new(),
            rule_id: None,
        }),
        decided_by: None,
    }
}

/// Another empty database beside the test's (a second SQLite file in the same temp dir, or a
/// second PostgreSQL schema), for opening a database at an earlier schema. It goes with the
/// test's database; [`drop_second_database`] removes it sooner.
pub async fn second_database(db: &TestDb) -> String {
    db.beside.create().await
}

/// Removes what [`second_database`] made on PostgreSQL now.
pub async fn drop_second_database(db: &TestDb, url: &str) {
    db.beside.remove(url).await;
}

/// How many migrations the binary embeds: what a database upgraded to the current schema has
/// applied. One number to move when a migration is added.
pub const ALL_MIGRATIONS: i64 = 25;

/// A second store on `url` (from [`second_database`]) with migrations applied up to
/// `version` only: the previous landing's schema, for an upgrade test to write data into.
pub async fn open_at(db: &TestDb, url: &str, version: i64) -> Store {
    Store::connect_with(
        url,
        StoreOptions {
            migrations_up_to: Some(version),
            max_connections: 2,
            sealing_key: Some(db.store.sealing_key().clone()),
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("open at {version:04}: {e}"))
}

/// The migrations `store`'s database has applied.
pub async fn applied_migrations(store: &Store) -> i64 {
    let row = sqlx::query("SELECT COUNT(*) AS n FROM _sqlx_migrations")
        .fetch_one(store.pool())
        .await
        .expect("count migrations");
    sqlx::Row::try_get(&row, "n").expect("n")
}

/// Issue 50: the per-webhook event counts the triggers keep (migration 0024) are exactly what
/// counting the events table says, webhook by webhook (a webhook whose events are all gone
/// may keep a row at zero), and none is negative.
pub async fn assert_event_counts_agree(store: &Store) {
    use sqlx::Row;
    store.fold_event_counts().await.expect("fold the counts");
    let read = |sql: &'static str| {
        let pool = store.pool().clone();
        async move {
            sqlx::query(sql)
                .fetch_all(&pool)
                .await
                .expect("read counts")
                .iter()
                .map(|r| {
                    (
                        r.try_get::<String, _>("webhook_id").expect("webhook_id"),
                        r.try_get::<i64, _>("n").expect("n"),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let kept = read(
        "SELECT webhook_id, events AS n FROM webhook_event_counts WHERE events <> 0 \
         ORDER BY webhook_id",
    )
    .await;
    let counted = read(
        "SELECT webhook_id, COUNT(*) AS n FROM events GROUP BY webhook_id ORDER BY webhook_id",
    )
    .await;
    assert_eq!(kept, counted, "the kept counts are the events' counts");
    assert!(
        kept.iter().all(|(_, n)| *n > 0),
        "no count below zero: {kept:?}"
    );
}

/// A trial of `wh` routing everything to `review`, with a forecast and a limit to read back.
pub fn new_trial(scope: &OwnerScope, wh: &Webhook) -> switchboard_store::NewTrial {
    switchboard_store::NewTrial {
        webhook_id: wh.id.clone(),
        owner_scope: scope.clone(),
        plan_id: "pl_test".into(),
        candidate: config_routing_to("review"),
        base_config_digest: wh.config_digest.clone(),
        forecast: switchboard_model::trial::Forecast {
            deliveries: 400,
            transitions: std::collections::BTreeMap::from([(
                (
                    switchboard_model::Label::queue("forge").into_owned(),
                    switchboard_model::Label::Drop,
                ),
                40,
            )]),
        },
        limits: switchboard_model::trial::TrialLimits {
            max_deliveries: Some(1000),
            ..switchboard_model::trial::TrialLimits::default()
        },
        started_by: "alice".into(),
        plan: switchboard_model::plan::StoredPlan::default(),
    }
}
