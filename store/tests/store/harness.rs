//! One fresh database per test: a temp SQLite file always, and a fresh PostgreSQL schema when
//! `SWITCHBOARD_TEST_DATABASE_URL` is set (dropped afterwards, even when the test panics).

use std::future::Future;
use std::ops::Deref;
use std::sync::Once;

use serde_json::json;
use sqlx::AssertSqlSafe;
use switchboard_store::Error;
use switchboard_store::OwnerScope;
use switchboard_store::{Actor, NewEndpoint, NewWebhook, SourceType, StoreOptions, Webhook};
use switchboard_store::{Result, Store};

/// The instance-wide claim lease the tests claim with (control's default).
pub const CLAIM_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// What a suite test gets: the store and the URL it was opened with (to reconnect).
pub struct TestDb {
    pub store: Store,
    pub url: String,
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
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("control.db").display()
    );
    let key = switchboard_store::SealingKey::generate().expect("a key");
    let store = Store::connect(&url, &key)
        .await
        .expect("open the sqlite store");
    let outcome = tokio::spawn(test(TestDb {
        store: store.clone(),
        url,
    }))
    .await;
    store.close().await;
    drop(dir);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

pub async fn run_postgres<F, Fut>(test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Ok(base) = std::env::var("SWITCHBOARD_TEST_DATABASE_URL") else {
        static NOTE: Once = Once::new();
        NOTE.call_once(|| {
            eprintln!("SWITCHBOARD_TEST_DATABASE_URL is unset: the postgres suite checks nothing")
        });
        return;
    };
    sqlx::any::install_default_drivers();
    let schema = format!(
        "t_{}",
        switchboard_store::secrets::random_hex(8).expect("random")
    );
    let admin = sqlx::AnyPool::connect(&base)
        .await
        .expect("connect to the test database");
    sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .expect("create the test schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
    let store = Store::connect_with(
        &url,
        StoreOptions {
            max_connections: 8,
            sealing_key: Some(switchboard_store::SealingKey::generate().expect("a key")),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("open the postgres store");
    let outcome = tokio::spawn(test(TestDb {
        store: store.clone(),
        url,
    }))
    .await;
    store.close().await;
    sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&admin)
        .await
        .expect("drop the test schema");
    admin.close().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
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
/// second PostgreSQL schema), for opening a database at an earlier schema. The SQLite file
/// goes with the temp dir; call [`drop_second_database`] for the schema.
pub async fn second_database(db: &TestDb) -> String {
    match db.store.backend() {
        switchboard_store::Backend::Sqlite => db.url.replace("control.db", "upgrade.db"),
        switchboard_store::Backend::Postgres => {
            let (base, _) = db
                .url
                .split_once("search_path%3D")
                .expect("a schema-scoped url");
            let schema = format!(
                "u_{}",
                switchboard_store::secrets::random_hex(8).expect("random")
            );
            sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                .execute(db.store.pool())
                .await
                .expect("create the second schema");
            format!("{base}search_path%3D{schema}")
        }
    }
}

/// Drops what [`second_database`] made on PostgreSQL.
pub async fn drop_second_database(db: &TestDb, url: &str) {
    if let Some((_, schema)) = url.split_once("search_path%3D") {
        sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(db.store.pool())
            .await
            .expect("drop the second schema");
    }
}

/// How many migrations the binary embeds: what a database upgraded to the current schema has
/// applied. One number to move when a migration is added.
pub const ALL_MIGRATIONS: i64 = 14;

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
