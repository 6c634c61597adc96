use sqlx::Row;
use switchboard_control::store::Backend;
use switchboard_control::{Error, Store};

use crate::harness::TestDb;

pub async fn migrations_apply_once_and_reconnect(db: TestDb) {
    crate::harness::human(&db, "alice").await;
    // A second process (or replica) opening the same database runs the migrator again: a no-op.
    let again = Store::connect(&db.url).await.expect("reconnect");
    assert_eq!(
        again.get_human("alice").await.expect("data kept").login,
        "alice"
    );
    let applied: i64 = sqlx::query("SELECT COUNT(*) AS n FROM _sqlx_migrations")
        .fetch_one(again.pool())
        .await
        .expect("count migrations")
        .try_get("n")
        .expect("n");
    // Every migration once: 0001 (the schema) and 0002 (rate-limit grants).
    assert_eq!(applied, 2);
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

pub async fn unknown_database_url_is_refused(_db: TestDb) {
    match Store::connect("mysql://localhost/x").await {
        Err(Error::InvalidArgument {
            field: "database_url",
            ..
        }) => {}
        other => panic!("expected invalid database_url, got {other:?}"),
    }
}
