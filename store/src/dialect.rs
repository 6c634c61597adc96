//! Everything that differs between SQLite and PostgreSQL, in one place.
//!
//! The rest of the store is portable SQL: `$N` placeholders, `ON CONFLICT … DO NOTHING/UPDATE`,
//! `RETURNING`, row-value comparisons and partial indexes all mean the same on both.
//! What differs: how a write transaction starts (SQLite must take the write lock up front with
//! `BEGIN IMMEDIATE`, or a read-then-write transaction fails at once with "database is locked"),
//! row locks (`SELECT … FOR UPDATE` on PostgreSQL, a syntax error on SQLite, where the database
//! lock taken by `BEGIN IMMEDIATE` already serializes writers), connection pragmas, and the
//! migrations tree. Single-statement writes run in autocommit, which SQLite also executes under
//! the write lock from the statement's start.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{Any, AnyConnection, SqlSafeStr, Transaction};
use sqlx::{AnyPool, any::AnyPoolOptions};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// Which database a [`crate::Store`] talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub(crate) fn from_url(url: &str) -> Result<Backend> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Backend::Postgres)
        } else {
            Err(Error::invalid(
                "database_url",
                "must start with sqlite: or postgres:",
            ))
        }
    }
}

/// Run on every new SQLite connection. WAL lets readers run beside the one writer;
/// synchronous=NORMAL is durable across process crashes in WAL mode (an OS crash may lose the
/// last commits, never corrupt); busy_timeout makes a writer wait for the lock instead of failing.
pub(crate) const SQLITE_CONNECTION_PRAGMAS: &[&str] = &[
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA busy_timeout = 10000",
    "PRAGMA foreign_keys = ON",
    // A deleted or rewritten row's bytes are zeroed in its page (issue 49 item 7: a secret
    // sealed in place leaves no clear copy behind). FAST: without the extra I/O of zeroing
    // whole freed pages, which only large rows (event bodies, never a secret) free.
    "PRAGMA secure_delete = FAST",
];

/// One migrations tree per backend, embedded at build time (no database needed to build).
/// Versions and descriptions follow sqlx's `<version>_<description>.sql` file names, so the
/// checksums are the ones `sqlx::migrate!` or sqlx-cli would compute over the same trees.
const SQLITE_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "control",
        include_str!("../migrations/sqlite/0001_control.sql"),
    ),
    (
        2,
        "rate_limit_grants",
        include_str!("../migrations/sqlite/0002_rate_limit_grants.sql"),
    ),
    (
        3,
        "once_key_by_verified",
        include_str!("../migrations/sqlite/0003_once_key_by_verified.sql"),
    ),
    (
        4,
        "events_by_age",
        include_str!("../migrations/sqlite/0004_events_by_age.sql"),
    ),
    (
        5,
        "rate_limit_log",
        include_str!("../migrations/sqlite/0005_rate_limit_log.sql"),
    ),
    (
        6,
        "grant_allowances",
        include_str!("../migrations/sqlite/0006_grant_allowances.sql"),
    ),
    (
        7,
        "plan_approval",
        include_str!("../migrations/sqlite/0007_plan_approval.sql"),
    ),
    (
        8,
        "console_sessions",
        include_str!("../migrations/sqlite/0008_console_sessions.sql"),
    ),
    (
        9,
        "todo_leases",
        include_str!("../migrations/sqlite/0009_todo_leases.sql"),
    ),
    (
        10,
        "decision_config",
        include_str!("../migrations/sqlite/0010_decision_config.sql"),
    ),
    (
        11,
        "operators",
        include_str!("../migrations/sqlite/0011_operators.sql"),
    ),
    (
        12,
        "redrives",
        include_str!("../migrations/sqlite/0012_redrives.sql"),
    ),
    (
        13,
        "body_compression",
        include_str!("../migrations/sqlite/0013_body_compression.sql"),
    ),
    (
        14,
        "webhook_revision",
        include_str!("../migrations/sqlite/0014_webhook_revision.sql"),
    ),
    (
        15,
        "trials",
        include_str!("../migrations/sqlite/0015_trials.sql"),
    ),
    (
        16,
        "trial_reports",
        include_str!("../migrations/sqlite/0016_trial_reports.sql"),
    ),
    (
        17,
        "guards",
        include_str!("../migrations/sqlite/0017_guards.sql"),
    ),
    (
        18,
        "guard_plans",
        include_str!("../migrations/sqlite/0018_guard_plans.sql"),
    ),
    (
        19,
        "change_log",
        include_str!("../migrations/sqlite/0019_change_log.sql"),
    ),
    (
        20,
        "approvals",
        include_str!("../migrations/sqlite/0020_approvals.sql"),
    ),
    (
        21,
        "operator_audit_view",
        include_str!("../migrations/sqlite/0021_operator_audit_view.sql"),
    ),
    (
        22,
        "plan_dismissals",
        include_str!("../migrations/sqlite/0022_plan_dismissals.sql"),
    ),
    (
        23,
        "webhook_names",
        include_str!("../migrations/sqlite/0023_webhook_names.sql"),
    ),
    (
        24,
        "event_counts",
        include_str!("../migrations/sqlite/0024_event_counts.sql"),
    ),
    (
        25,
        "trial_indexes",
        include_str!("../migrations/sqlite/0025_trial_indexes.sql"),
    ),
];
const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "control",
        include_str!("../migrations/postgres/0001_control.sql"),
    ),
    (
        2,
        "rate_limit_grants",
        include_str!("../migrations/postgres/0002_rate_limit_grants.sql"),
    ),
    (
        3,
        "once_key_by_verified",
        include_str!("../migrations/postgres/0003_once_key_by_verified.sql"),
    ),
    (
        4,
        "events_by_age",
        include_str!("../migrations/postgres/0004_events_by_age.sql"),
    ),
    (
        5,
        "rate_limit_log",
        include_str!("../migrations/postgres/0005_rate_limit_log.sql"),
    ),
    (
        6,
        "grant_allowances",
        include_str!("../migrations/postgres/0006_grant_allowances.sql"),
    ),
    (
        7,
        "plan_approval",
        include_str!("../migrations/postgres/0007_plan_approval.sql"),
    ),
    (
        8,
        "console_sessions",
        include_str!("../migrations/postgres/0008_console_sessions.sql"),
    ),
    (
        9,
        "todo_leases",
        include_str!("../migrations/postgres/0009_todo_leases.sql"),
    ),
    (
        10,
        "decision_config",
        include_str!("../migrations/postgres/0010_decision_config.sql"),
    ),
    (
        11,
        "operators",
        include_str!("../migrations/postgres/0011_operators.sql"),
    ),
    (
        12,
        "redrives",
        include_str!("../migrations/postgres/0012_redrives.sql"),
    ),
    (
        13,
        "body_compression",
        include_str!("../migrations/postgres/0013_body_compression.sql"),
    ),
    (
        14,
        "webhook_revision",
        include_str!("../migrations/postgres/0014_webhook_revision.sql"),
    ),
    (
        15,
        "trials",
        include_str!("../migrations/postgres/0015_trials.sql"),
    ),
    (
        16,
        "trial_reports",
        include_str!("../migrations/postgres/0016_trial_reports.sql"),
    ),
    (
        17,
        "guards",
        include_str!("../migrations/postgres/0017_guards.sql"),
    ),
    (
        18,
        "guard_plans",
        include_str!("../migrations/postgres/0018_guard_plans.sql"),
    ),
    (
        19,
        "change_log",
        include_str!("../migrations/postgres/0019_change_log.sql"),
    ),
    (
        20,
        "approvals",
        include_str!("../migrations/postgres/0020_approvals.sql"),
    ),
    (
        21,
        "operator_audit_view",
        include_str!("../migrations/postgres/0021_operator_audit_view.sql"),
    ),
    (
        22,
        "plan_dismissals",
        include_str!("../migrations/postgres/0022_plan_dismissals.sql"),
    ),
    (
        23,
        "webhook_names",
        include_str!("../migrations/postgres/0023_webhook_names.sql"),
    ),
    (
        24,
        "event_counts",
        include_str!("../migrations/postgres/0024_event_counts.sql"),
    ),
    (
        25,
        "trial_indexes",
        include_str!("../migrations/postgres/0025_trial_indexes.sql"),
    ),
];

/// The migrator of `backend`'s tree, up to `up_to` when given (upgrade tests).
pub(crate) fn migrator(backend: Backend, up_to: Option<i64>) -> Migrator {
    let tree = match backend {
        Backend::Sqlite => SQLITE_MIGRATIONS,
        Backend::Postgres => POSTGRES_MIGRATIONS,
    };
    Migrator::with_migrations(
        tree.iter()
            .filter(|(version, _, _)| up_to.is_none_or(|last| *version <= last))
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*description),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

/// Pool settings per backend. SQLite's connections are in-process: a ping before each use
/// (sqlx's default) is a round trip to the connection's thread that can find nothing wrong.
pub(crate) fn pool_options(backend: Backend) -> AnyPoolOptions {
    let options = AnyPoolOptions::new();
    match backend {
        Backend::Sqlite => options.test_before_acquire(false),
        Backend::Postgres => options,
    }
}

/// Turns at SQLite's one write lock, taken in this process before writing.
///
/// Why: a SQLite writer that finds the lock taken waits in SQLite's busy handler, which
/// *sleeps* 1, 2, 5, 10 … 100 ms between tries, so the lock sits idle while writers sleep and
/// an unlucky one waits 100 ms and more (ingest's p99 at 8 senders was 108–113 ms,
/// docs/benchmarks.md). Writers of this process queue here instead, in arrival order, and find
/// the lock free when their turn comes. `busy_timeout` still covers other processes writing the
/// same file (an operator's CLI). PostgreSQL locks rows, not the database: no turns there.
#[derive(Clone, Debug, Default)]
pub(crate) struct WriteTurns(Option<Arc<Semaphore>>);

impl WriteTurns {
    pub(crate) fn new(backend: Backend, queue_writers: bool) -> WriteTurns {
        WriteTurns(
            (backend == Backend::Sqlite && queue_writers).then(|| Arc::new(Semaphore::new(1))),
        )
    }

    /// Waits for this process's turn to write; the turn ends when the returned value drops.
    pub(crate) async fn take(&self) -> Result<Option<OwnedSemaphorePermit>> {
        match &self.0 {
            None => Ok(None),
            Some(turns) => Arc::clone(turns)
                .acquire_owned()
                .await
                .map(Some)
                .map_err(|e| Error::internal(format!("write turns closed: {e}"))),
        }
    }
}

/// A transaction that will write, holding its write turn until it commits or drops.
pub(crate) struct WriteTx {
    // Declared first: the transaction ends (or its rollback is queued) before the turn passes.
    tx: Transaction<'static, Any>,
    _turn: Option<OwnedSemaphorePermit>,
}

impl WriteTx {
    pub(crate) async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }
}

impl Deref for WriteTx {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        &self.tx
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }
}

/// Starts a transaction that will write, in its write turn: `BEGIN IMMEDIATE` on SQLite,
/// plain `BEGIN` on PostgreSQL (where rows are locked with [`for_update!`]).
pub(crate) async fn begin_write(
    pool: &AnyPool,
    backend: Backend,
    turns: &WriteTurns,
) -> Result<WriteTx> {
    let turn = turns.take().await?;
    let tx = match backend {
        Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await?,
        Backend::Postgres => pool.begin().await?,
    };
    Ok(WriteTx { tx, _turn: turn })
}

/// Starts a read-only transaction whose reads all see one moment, so rows read together
/// (a trial and its counts) agree even while a writer commits between them: a deferred
/// `BEGIN` on SQLite (WAL keeps the snapshot of its first read), `REPEATABLE READ` on
/// PostgreSQL (where each statement of a plain transaction sees a newer one).
pub(crate) async fn begin_snapshot(
    pool: &AnyPool,
    backend: Backend,
) -> Result<Transaction<'static, Any>> {
    let mut tx = pool.begin().await?;
    if backend == Backend::Postgres {
        // The transaction's first statement, as PostgreSQL requires; a plain `BEGIN` first,
        // the one sqlx tracks everywhere else.
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
    }
    Ok(tx)
}

/// A `SELECT` that locks the rows it reads until the transaction ends: `FOR UPDATE` on
/// PostgreSQL; on SQLite the statement as written, since `BEGIN IMMEDIATE` already holds the
/// database's write lock.
/// The SQL is given as `concat!` pieces: `for_update!(backend, "SELECT … WHERE id = $1")`.
macro_rules! for_update {
    ($backend:expr, $($sql:tt)+) => {
        match $backend {
            $crate::Backend::Sqlite => concat!($($sql)+),
            $crate::Backend::Postgres => concat!($($sql)+, " FOR UPDATE"),
        }
    };
}
pub(crate) use for_update;
