//! The control plane's storage: one [`Store`] over SQLite or PostgreSQL through sqlx's `Any`
//! driver, with runtime queries (`$N` placeholders) so no database is needed at build time.
//!
//! One module per aggregate; the few statements that differ between the backends live in
//! [`dialect`]. Every scoped read filters by id *and* owner scope in the same single query, so
//! an unknown, malformed or other-scope id takes the same path and answers the same `not_found`.
//!
//! Writes that return rows (`INSERT/UPDATE … RETURNING`) outside a transaction are read with
//! `fetch_all`, never `fetch_optional`/`fetch_one`: on PostgreSQL such a statement commits
//! only after its last message, so a row taken early could be acted on (an event routed, a
//! 202 answered) before another connection can see it. Found by benches/ingest.rs: 18–31 of
//! 6,288 events were not yet visible to the next statement on another connection.
//!
//! A crate of its own (issue 44), control's lowest floor: it depends on the model, the protos
//! (for the reasons errors carry) and telemetry, never on control, packs or a surface. With it
//! live what the store needs of control and control re-exports unchanged: the one [`Error`]
//! (`error`), owner scopes (`scope`), sealing (`sealing`) and ids and tokens (`secrets`). The
//! migrations, one tree per backend, are `migrations/{sqlite,postgres}` beside this folder.

#![forbid(unsafe_code)]

mod acts;
mod allowances;
mod approvals;
mod change_log;
mod configuration;
mod console;
mod dialect;
mod endpoints;
pub mod error;
mod events;
mod group_commit;
mod leases;
mod multi_row;
mod operators;
mod plans;
mod rate_limits;
mod redrives;
mod retention;
pub mod scope;
pub mod sealing;
pub mod secrets;
mod tenancy;
mod todos;
mod trials;
mod webhook_cache;
mod webhooks;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::AnyPool;
use sqlx::any::AnyRow;
use sqlx::{Executor, Row};

pub use error::{Error, Result};
pub use scope::{OwnerScope, Role};
pub use sealing::SealingKey;

pub use acts::{AuditRecord, OperatorAction};
pub use allowances::{GrantAllowance, is_queue_name, within_allowance};
pub use change_log::ChangeQuery;
pub use configuration::{HistoryRecord, MAX_PROVENANCE_BYTES, SaveConfiguration, Saved};
pub use console::{SESSION_PREFIX, SIGN_IN_PREFIX};
pub use dialect::Backend;
pub use endpoints::{CREDENTIAL_PREFIX, Endpoint, NewEndpoint, VendedEndpoint};
pub use events::{
    Backlog, DecidedBy, DecisionClass, DraftEvent, Event, EventFilter, EventSummary, LOAD_BYTES,
    Loaded, MAX_REPLAY_EVENTS, NewEvent, RecordDecision,
};
pub use group_commit::{Bounds as GroupCommitBounds, GroupCommitTally};
pub use operators::{
    AuditEntry, MintedOperatorCredential, OPERATOR_CREDENTIAL_PREFIX, OperatorCredential,
};
pub use plans::{NewPlan, PLAN_GRACE, PLAN_TOKEN_PREFIX, Plan, new_plan_token};
pub use rate_limits::{REPLAYS_PER_MINUTE, block_size};
pub use redrives::{
    Candidate, NewRedrive, PlannedTodo, REDRIVE_DEFAULT_LIMIT, REDRIVE_MAX_LIMIT, Redrivable,
    Redrive, RedriveEntry, RedriveFilter, RedriveOutcome, redrive_limit,
};
pub use retention::{Retention, Window as RetentionWindow};
pub use tenancy::{Human, Membership, Offboarded, Team};
pub use todos::{MAX_CLAIM_TTL, NewTodo, Todo, TodoFilter, TodoInsert};
pub use trials::{EXAMPLES as TRIAL_EXAMPLES, NewGuard, NewTrial, Trial, TrialBatch};
pub use webhook_cache::{IngestWebhook, is_stale_webhook};
pub use webhooks::{ConfirmPolicy, MAX_CONFIGURATION_BYTES, NewWebhook, SourceType, Webhook};

/// The handle every control component shares. Cheap to clone: a pool, a backend tag, a clock,
/// and the rate-limit hits this process holds (`rate_limits.rs`).
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    clock: Clock,
    held_hits: std::sync::Arc<rate_limits::HeldHits>,
    write_turns: dialect::WriteTurns,
    /// Ingest's writes share transactions (`group_commit`).
    group_commit: group_commit::GroupCommit,
    /// Seals webhook secrets on write and opens them on read (`sealing`).
    sealing: std::sync::Arc<SealingKey>,
    /// The webhook rows ingest read, checked at the write (`webhook_cache`).
    webhook_cache: std::sync::Arc<webhook_cache::WebhookCache>,
    /// The schema has the change log (migration 0019): its changes append entries. False
    /// only for a store opened at an earlier schema (upgrade tests write the old way).
    change_log: bool,
    /// The schema has approvals (migration 0020).
    approvals: bool,
    /// The change log indexes operators' acts, and the operator audit is its view (0021).
    audit_view: bool,
    /// Schema 22: plans carry who dismissed them (issue 48).
    dismissals: bool,
    /// Schema 23: webhooks have display names (issue 48).
    names: bool,
    /// Schema 24: each webhook's event count is kept by triggers (issue 50).
    event_counts: bool,
    /// Who this handle's writes are made by, recorded with each change in its own
    /// transaction ([`Store::by_operator`], [`Store::by_person`]).
    acting: Option<acts::Acting>,
}

/// Pool settings. SQLite serializes writers anyway, so its pool stays small.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    /// SQLite: this process's writers take turns in arrival order instead of sleeping in
    /// SQLite's busy handler (`dialect::WriteTurns`). On by default; off only to measure.
    pub queue_sqlite_writers: bool,
    /// The key webhook secrets are sealed with. Required: a store without one refuses to open.
    pub sealing_key: Option<SealingKey>,
    /// Apply the embedded migrations only up to this version. `None` (always, in a running
    /// Switchboard) applies all; upgrade tests open a database at an earlier schema with it.
    pub migrations_up_to: Option<i64>,
    /// How much one group commit of ingest's writes may hold (`group_commit`).
    pub group_commit: GroupCommitBounds,
    /// PostgreSQL: a group commit of events alone goes in one statement that commits by itself
    /// (`events::insert_events_at_once`). On by default; off only to measure.
    pub postgres_one_statement: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(30),
            queue_sqlite_writers: true,
            migrations_up_to: None,
            sealing_key: None,
            group_commit: GroupCommitBounds::default(),
            postgres_one_statement: true,
        }
    }
}

impl Store {
    /// Connects to `database_url` (`sqlite://path?mode=rwc` or `postgres://…`) and applies
    /// the migrations embedded in the binary.
    pub async fn connect(database_url: &str, key: &SealingKey) -> Result<Store> {
        Store::connect_with(
            database_url,
            StoreOptions {
                sealing_key: Some(key.clone()),
                ..StoreOptions::default()
            },
        )
        .await
    }

    /// Connects with `options`, applies the migrations, then seals any webhook secret still in
    /// the clear (a database written before sealing) and checks that every sealed one is this
    /// key's: a wrong or missing key is an error here, at start, never a silent
    /// `verified: false` later.
    pub async fn connect_with(database_url: &str, options: StoreOptions) -> Result<Store> {
        let Some(key) = options.sealing_key.clone() else {
            return Err(Error::invalid(
                "secret_key",
                "no secret key: webhook secrets are sealed at rest (set SWITCHBOARD_SECRET_KEY or --secret-key-file)",
            ));
        };
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(database_url)?;
        let mut pool = dialect::pool_options(backend)
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.acquire_timeout);
        if backend == Backend::Sqlite {
            pool = pool.after_connect(|conn, _meta| {
                Box::pin(async move {
                    for pragma in dialect::SQLITE_CONNECTION_PRAGMAS {
                        conn.execute(*pragma).await?;
                    }
                    Ok(())
                })
            });
        }
        let pool = pool
            .connect(database_url)
            .await
            .map_err(|e| Error::internal(format!("connect to the database: {e}")))?;
        dialect::migrator(backend, options.migrations_up_to)
            .run(&pool)
            .await?;
        let store = Store {
            pool,
            backend,
            clock: Clock::system(),
            held_hits: Default::default(),
            write_turns: dialect::WriteTurns::new(backend, options.queue_sqlite_writers),
            group_commit: group_commit::GroupCommit::new(
                options.group_commit,
                match backend {
                    Backend::Sqlite => 1,
                    // At most half the pool, so reads always find connections.
                    Backend::Postgres => (options.max_connections / 2).clamp(1, 4) as usize,
                },
                backend == Backend::Postgres && options.postgres_one_statement,
            ),
            sealing: std::sync::Arc::new(key),
            webhook_cache: Default::default(),
            change_log: options.migrations_up_to.is_none_or(|v| v >= 19),
            approvals: options.migrations_up_to.is_none_or(|v| v >= 20),
            audit_view: options.migrations_up_to.is_none_or(|v| v >= 21),
            dismissals: options.migrations_up_to.is_none_or(|v| v >= 22),
            names: options.migrations_up_to.is_none_or(|v| v >= 23),
            event_counts: options.migrations_up_to.is_none_or(|v| v >= 24),
            acting: None,
        };
        if options.migrations_up_to.is_none() {
            store.seal_plaintext_secrets().await?;
            store.check_sealing_key().await?;
            store.start_change_log().await?;
        }
        Ok(store)
    }

    /// The same store reading time from `clock`; tests use a manual clock to move through
    /// rate windows, lease expiry and plan expiry without sleeping.
    pub fn with_clock(mut self, clock: Clock) -> Store {
        self.clock = clock;
        self
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The pool, for health checks and for tests that look at what is stored at rest.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// How many commits ingest's writes have taken so far (`group_commit`).
    pub fn group_commit_tally(&self) -> GroupCommitTally {
        self.group_commit.tally()
    }

    /// Closes every connection; in-flight calls finish first.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A transaction that will write, in this process's write turn (`dialect::WriteTurns`).
    async fn begin_write(&self) -> Result<dialect::WriteTx> {
        dialect::begin_write(&self.pool, self.backend, &self.write_turns).await
    }

    /// A read-only transaction that sees one moment ([`dialect::begin_snapshot`]).
    async fn snapshot(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        dialect::begin_snapshot(&self.pool, self.backend).await
    }

    /// The write turn for a single-statement write; hold it until the statement is done.
    async fn write_turn(&self) -> Result<Option<tokio::sync::OwnedSemaphorePermit>> {
        self.write_turns.take().await
    }
}

/// Milliseconds since the Unix epoch, from the system or from a hand-moved test clock.
#[derive(Clone, Debug, Default)]
pub struct Clock(Option<Arc<AtomicI64>>);

impl Clock {
    pub fn system() -> Clock {
        Clock(None)
    }

    /// A clock that stands still at `start_ms` until moved.
    pub fn manual(start_ms: i64) -> Clock {
        Clock(Some(Arc::new(AtomicI64::new(start_ms))))
    }

    pub fn now_ms(&self) -> i64 {
        match &self.0 {
            Some(t) => t.load(Ordering::SeqCst),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .unwrap_or(0),
        }
    }

    /// Moves a manual clock forward; the system clock ignores it.
    pub fn advance(&self, by: Duration) {
        if let Some(t) = &self.0 {
            t.fetch_add(duration_ms(by), Ordering::SeqCst);
        }
    }
}

/// Who made a change: the endpoint and its owning human, or neither for an operator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Actor {
    pub endpoint_id: Option<String>,
    pub human_login: Option<String>,
}

impl Actor {
    /// An operator acting through the CLI or the admin API, not through an endpoint.
    pub fn operator() -> Actor {
        Actor::default()
    }

    pub fn endpoint(endpoint: &Endpoint) -> Actor {
        Actor {
            endpoint_id: Some(endpoint.id.clone()),
            human_login: Some(endpoint.human_login.clone()),
        }
    }
}

/// A page request: an opaque cursor from the previous page, and how many items at most.
#[derive(Clone, Debug, Default)]
pub struct Page {
    pub cursor: Option<String>,
    pub limit: Option<u32>,
}

/// One page of results and the cursor for the next, `None` on the last page.
#[derive(Clone, Debug)]
pub struct Paged<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// Items per page when the caller names no limit.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// The most items one page may hold.
pub const MAX_PAGE_SIZE: u32 = 200;

impl Page {
    pub fn first(limit: u32) -> Page {
        Page {
            cursor: None,
            limit: Some(limit),
        }
    }

    pub fn after(cursor: impl Into<String>, limit: u32) -> Page {
        Page {
            cursor: Some(cursor.into()),
            limit: Some(limit),
        }
    }

    fn size(&self) -> Result<i64> {
        match self.limit {
            None => Ok(i64::from(DEFAULT_PAGE_SIZE)),
            Some(n) if (1..=MAX_PAGE_SIZE).contains(&n) => Ok(i64::from(n)),
            Some(_) => Err(Error::invalid(
                "limit",
                format!("must be between 1 and {MAX_PAGE_SIZE}"),
            )),
        }
    }

    /// The keyset position `(milliseconds, id)` a `listing` cursor points past.
    fn position(&self, listing: Listing) -> Result<Option<(i64, String)>> {
        let Some(position) = self.opened(listing)? else {
            return Ok(None);
        };
        let (ms, id) = position.split_once(':').ok_or_else(bad_cursor)?;
        let ms = ms.parse::<i64>().map_err(|_| bad_cursor())?;
        if id.is_empty() {
            return Err(bad_cursor());
        }
        Ok(Some((ms, id.to_string())))
    }

    /// What a `listing` cursor holds, `None` on the first page. A cursor of another listing,
    /// or one edited by hand, is refused as not a cursor.
    fn opened(&self, listing: Listing) -> Result<Option<String>> {
        use base64::Engine as _;
        let Some(cursor) = &self.cursor else {
            return Ok(None);
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| bad_cursor())?;
        let text = String::from_utf8(bytes).map_err(|_| bad_cursor())?;
        let position = text
            .strip_prefix(listing.tag())
            .and_then(|rest| rest.strip_prefix('|'))
            .ok_or_else(bad_cursor)?;
        Ok(Some(position.to_string()))
    }
}

/// Which listing a cursor belongs to: cursors are opaque (AIP-158), and one listing's cursor
/// is not another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listing {
    Events,
    Todos,
    History,
    Audit,
    Humans,
    Teams,
    ScopeWebhooks,
    Trials,
    Endpoints,
    OperatorCredentials,
    GrantAllowances,
}

impl Listing {
    fn tag(self) -> &'static str {
        match self {
            Listing::Events => "e1",
            Listing::Todos => "t1",
            Listing::History => "h1",
            Listing::Audit => "a1",
            Listing::Humans => "u1",
            Listing::Teams => "g1",
            Listing::ScopeWebhooks => "w1",
            Listing::Trials => "r1",
            Listing::Endpoints => "n1",
            Listing::OperatorCredentials => "o1",
            Listing::GrantAllowances => "l1",
        }
    }
}

fn bad_cursor() -> Error {
    Error::invalid("cursor", "not a cursor from a previous page")
}

/// An opaque cursor: base64url of the listing's tag and the position, so callers neither
/// build nor edit one, and what a position is can change without breaking them.
fn cursor(listing: Listing, position: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}|{position}", listing.tag()))
}

fn cursor_for(listing: Listing, ms: i64, id: &str) -> String {
    cursor(listing, &format!("{ms}:{id}"))
}

/// Cuts the `size + 1` rows fetched down to a page, with a cursor when more rows exist.
fn into_page<T>(mut rows: Vec<T>, size: i64, key: impl Fn(&T) -> String) -> Paged<T> {
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    if rows.len() > size {
        rows.truncate(size);
        let next_cursor = rows.last().map(&key);
        Paged {
            items: rows,
            next_cursor,
        }
    } else {
        Paged {
            items: rows,
            next_cursor: None,
        }
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Reads a JSON-as-TEXT column into its type (an internal error naming the column when the
/// stored text does not read).
fn json_col<T: serde::de::DeserializeOwned>(row: &AnyRow, column: &str) -> Result<T> {
    let text: String = row.try_get(column)?;
    serde_json::from_str(&text).map_err(|e| Error::internal(format!("stored {column}: {e}")))
}

/// Reads a nullable JSON-as-TEXT column into its type. A stored text that does not read is
/// an internal error naming the column, never a default.
fn json_opt<T: serde::de::DeserializeOwned>(row: &AnyRow, column: &str) -> Result<Option<T>> {
    let text: Option<String> = row.try_get(column)?;
    text.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| Error::internal(format!("stored {column}: {e}")))
}

/// Reads an INTEGER 0/1 flag.
fn flag(row: &AnyRow, column: &str) -> Result<bool> {
    let v: i64 = row.try_get(column)?;
    Ok(v != 0)
}

/// Parses a stored value with `FromStr`; a bad stored value is an internal error, not the caller's.
fn parse_col<T: std::str::FromStr>(row: &AnyRow, column: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    let text: String = row.try_get(column)?;
    text.parse()
        .map_err(|e| Error::internal(format!("stored {column} {text:?}: {e}")))
}

/// An id as a lookup binds it: text PostgreSQL cannot hold (a NUL) or far longer than any
/// id becomes the empty id, which matches nothing — so a malformed id costs the same query
/// and answers the same `not_found` as an unknown one, on every backend.
pub(crate) fn lookup_id(id: &str) -> &str {
    if id.len() > 256 || id.contains('\0') {
        ""
    } else {
        id
    }
}
