//! Todos: the work a queue decision produces. The once-key `(webhook_id, delivery_id,
//! verified)` makes a redelivery of the same delivery create no second todo, while an
//! unverified delivery that names a real delivery id first (a forgery) cannot make the genuine,
//! verified one a redelivery of itself (migration 0003, docs/ingest.md).
//!
//! Claims are leases (issue 21, migration 0009), so a crashed agent strands nothing: a claim
//! lasts until `claim_expires_at`, after which the todo is back in its queue. A lapsed claim
//! nobody took over still lets its holder complete the todo; once another endpoint claims it,
//! it is theirs. Every transition is one conditional `UPDATE`, so of racing calls exactly one
//! wins and the others read what it did.

use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use crate::dialect::WriteTx;
use crate::error::{Error, Result};
use crate::multi_row;
use crate::scope::OwnerScope;
use crate::secrets::new_ordered_id;
use crate::{Listing, Page, Paged, Store, cursor_for, into_page, parse_col};

/// What a queue decision adds to an event to make a todo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTodo {
    pub queue: String,
    /// The rule that decided; `None` for a `default` decision.
    pub rule_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Todo {
    pub id: String,
    pub owner_scope: OwnerScope,
    pub webhook_id: String,
    pub event_id: String,
    pub delivery_id: String,
    pub queue: String,
    pub rule_id: Option<String>,
    pub created_at: i64,
    /// The endpoint that claimed it; after `claim_expires_at`, the one whose claim lapsed.
    pub claimed_by: Option<String>,
    pub claimed_at: Option<i64>,
    /// When the claim lapses (ms); renewed by claiming again.
    pub claim_expires_at: Option<i64>,
    pub completed_by: Option<String>,
    pub completed_at: Option<i64>,
}

impl Todo {
    /// Whether an endpoint holds a claim that has not lapsed at `now_ms`. A todo without
    /// one is in its queue (if not completed): anyone may claim it.
    pub fn claim_live(&self, now_ms: i64) -> bool {
        self.claimed_by.is_some() && self.claim_expires_at.is_none_or(|end| end > now_ms)
    }
}

/// The longest claim lease, per webhook or instance-wide: 30 days. A lease is for a crashed
/// agent's work to come back, not a way to keep work forever.
pub const MAX_CLAIM_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Checks a claim lease length: whole seconds, 1 second to [`MAX_CLAIM_TTL`].
pub(crate) fn check_claim_ttl(ttl: Duration) -> Result<i64> {
    if ttl.subsec_nanos() != 0 || ttl.is_zero() || ttl > MAX_CLAIM_TTL {
        return Err(Error::invalid(
            "claim_ttl",
            format!(
                "whole seconds from 1 to {} (30 days)",
                MAX_CLAIM_TTL.as_secs()
            ),
        ));
    }
    i64::try_from(ttl.as_secs()).map_err(|_| Error::invalid("claim_ttl", "too long"))
}

/// The todo for a delivery and whether this call created it (`false`: a redelivery found the
/// todo the first delivery made).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TodoInsert {
    pub todo: Todo,
    pub inserted: bool,
}

/// Which todos a listing returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TodoFilter {
    /// Not completed (claimed or not): the default.
    #[default]
    Open,
    /// Not completed and not held by a live claim (never claimed, released, or lapsed): what
    /// an agent may take.
    Unclaimed,
    All,
}

macro_rules! todo_columns {
    () => {
        "id, owner_scope, webhook_id, event_id, delivery_id, queue, rule_id, created_at, claimed_by, claimed_at, \
         completed_by, completed_at"
    };
}

/// [`todo_columns`] and the claim's expiry (migration 0009): what every read and write of a
/// todo selects, except ingest's insert, which upgrade tests run at older schemas.
macro_rules! leased_todo_columns {
    () => {
        concat!(todo_columns!(), ", claim_expires_at")
    };
}

/// A todo from a row naming its columns `<prefix><column>`: as stored (`""`), or beside an
/// event's columns (`"todo_"`).
macro_rules! todo_from {
    ($row:expr, $prefix:literal) => {
        Todo {
            id: $row.try_get(concat!($prefix, "id"))?,
            owner_scope: parse_col($row, concat!($prefix, "owner_scope"))?,
            webhook_id: $row.try_get(concat!($prefix, "webhook_id"))?,
            event_id: $row.try_get(concat!($prefix, "event_id"))?,
            delivery_id: $row.try_get(concat!($prefix, "delivery_id"))?,
            queue: $row.try_get(concat!($prefix, "queue"))?,
            rule_id: $row.try_get(concat!($prefix, "rule_id"))?,
            created_at: $row.try_get(concat!($prefix, "created_at"))?,
            claimed_by: $row.try_get(concat!($prefix, "claimed_by"))?,
            claimed_at: $row.try_get(concat!($prefix, "claimed_at"))?,
            // Read where selected (`leased_todo_columns`); ingest's insert leaves it out.
            claim_expires_at: match $row.try_get(concat!($prefix, "claim_expires_at")) {
                Err(sqlx::Error::ColumnNotFound(_)) => None,
                other => other?,
            },
            completed_by: $row.try_get(concat!($prefix, "completed_by"))?,
            completed_at: $row.try_get(concat!($prefix, "completed_at"))?,
        }
    };
}

fn todo(row: &AnyRow) -> Result<Todo> {
    Ok(todo_from!(row, ""))
}

/// A todo returned beside an event's columns ([`todo_columns_beside_event`]).
pub(crate) fn todo_beside_event(row: &AnyRow) -> Result<Todo> {
    Ok(todo_from!(row, "todo_"))
}

/// [`todo_columns!`] named `todo_<column>`, for a statement answering an event's columns and
/// its todo's in one row.
pub(crate) fn todo_columns_beside_event() -> &'static str {
    static COLUMNS: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| each_todo_column(|c| format!("{c} AS todo_{c}")));
    &COLUMNS
}

/// [`todo_columns!`], each written as `column` writes it, comma-separated.
fn each_todo_column(column: impl Fn(&str) -> String) -> String {
    todo_columns!()
        .split(',')
        .map(|c| column(c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The todo each of `event_ids`' deliveries has under its once-key, by event id: what a
/// redelivery finds when the first delivery made it.
pub(crate) async fn todos_of_events(
    conn: &mut sqlx::AnyConnection,
    event_ids: &[&str],
) -> Result<std::collections::HashMap<String, Todo>> {
    let mut found = std::collections::HashMap::with_capacity(event_ids.len());
    for run in multi_row::runs(event_ids.len(), multi_row::MAX_RUN) {
        let ids = &event_ids[run];
        // Without the claim's expiry, so ingest runs at every schema since 0003 (upgrade
        // tests route deliveries on a database not yet migrated). Ingest needs only the
        // id; the todo a redelivery finds comes back with `claim_expires_at: None`,
        // `get_todo` reads it whole.
        let sql = format!(
            "WITH n (event_id) AS (VALUES {}) \
             SELECT {}, e.id AS for_event FROM n JOIN events e ON e.id = n.event_id \
             JOIN todos t ON t.webhook_id = e.webhook_id AND t.delivery_id = e.delivery_id \
             AND t.verified = e.verified",
            multi_row::values(ids.len(), 1),
            qualified_todo_columns()
        );
        let mut read = sqlx::query(AssertSqlSafe(sql));
        for id in ids {
            read = read.bind(crate::lookup_id(id));
        }
        for row in read.fetch_all(&mut *conn).await? {
            let for_event: String = row.try_get("for_event")?;
            found.insert(for_event, todo(&row)?);
        }
    }
    Ok(found)
}

/// A todo to insert for an event, unless its delivery's once-key already has one.
#[derive(Clone, Copy)]
pub(crate) struct TodoRow<'a> {
    pub event_id: &'a str,
    pub new: &'a NewTodo,
    pub now: i64,
}

/// Inserts the todo for `event_id` unless its once-key already has one; both ways returns it.
pub(crate) async fn insert_todo_in(
    tx: &mut WriteTx,
    event_id: &str,
    new: &NewTodo,
    now: i64,
) -> Result<TodoInsert> {
    insert_todos_in(tx, &[TodoRow { event_id, new, now }])
        .await?
        .pop()
        .unwrap_or_else(|| Err(Error::internal("no todo answered")))
}

/// Inserts each row's todo unless its once-key already has one (an earlier row of the same
/// delivery included: the first row inserts, the rest find its todo), a run per statement, and
/// returns each todo either way; `not_found` for a row whose event is gone. `Err` is a failed
/// statement.
pub(crate) async fn insert_todos_in(
    tx: &mut WriteTx,
    rows: &[TodoRow<'_>],
) -> Result<Vec<Result<TodoInsert>>> {
    let mut out = Vec::with_capacity(rows.len());
    for run in multi_row::runs(rows.len(), multi_row::MAX_RUN) {
        let run = &rows[run];
        let mut ids = Vec::with_capacity(run.len());
        for row in run {
            if row.new.queue.is_empty() {
                return Err(Error::invalid("queue", "must not be empty"));
            }
            ids.push(new_ordered_id("td_")?);
        }
        // The WHERE clause is needed: it keeps SQLite from reading ON CONFLICT as a join
        // constraint. RETURNING answers the todos this statement made; only a row whose
        // once-key had one already (a redelivery) needs the read after it.
        let sql = format!(
            "WITH n (todo_id, event_id, queue, rule_id, created_at, ord) AS (VALUES {}) \
             INSERT INTO todos (id, owner_scope, webhook_id, event_id, delivery_id, verified, queue, \
             rule_id, created_at) \
             SELECT n.todo_id, e.owner_scope, e.webhook_id, e.id, e.delivery_id, e.verified, n.queue, \
             n.rule_id, n.created_at FROM n JOIN events e ON e.id = n.event_id WHERE true ORDER BY n.ord \
             ON CONFLICT (webhook_id, delivery_id, verified) DO NOTHING RETURNING {}",
            multi_row::values(run.len(), 6),
            todo_columns!()
        );
        let mut insert = sqlx::query(AssertSqlSafe(sql));
        for (ord, (row, id)) in run.iter().zip(&ids).enumerate() {
            insert = insert
                .bind(id.as_str())
                .bind(crate::lookup_id(row.event_id))
                .bind(row.new.queue.as_str())
                .bind(row.new.rule_id.as_deref())
                .bind(row.now)
                .bind(ord as i64);
        }
        let mut found = std::collections::HashMap::with_capacity(run.len());
        // To the end of the statement: see `store` (writes that return rows).
        for row in insert.fetch_all(&mut **tx).await? {
            let todo = todo(&row)?;
            found.insert(todo.event_id.clone(), todo);
        }
        let waiting: Vec<&str> = run
            .iter()
            .map(|r| r.event_id)
            .filter(|id| !found.contains_key(*id))
            .collect();
        if !waiting.is_empty() {
            found.extend(todos_of_events(tx, &waiting).await?);
        }
        for (row, id) in run.iter().zip(&ids) {
            out.push(match found.get(row.event_id) {
                Some(todo) => Ok(TodoInsert {
                    inserted: todo.id == *id,
                    todo: todo.clone(),
                }),
                None => Err(Error::not_found("event")),
            });
        }
    }
    Ok(out)
}

/// [`todo_columns!`] of the table named `t`, for reads that join it.
fn qualified_todo_columns() -> &'static str {
    static COLUMNS: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| each_todo_column(|c| format!("t.{c}")));
    &COLUMNS
}

impl Store {
    /// The decision that stands on an event (`None`: not routed) and the todo its delivery
    /// has, if any: what ingest answers when another pass recorded the event's decision first.
    pub async fn standing_decision(
        &self,
        event_id: &str,
    ) -> Result<(Option<switchboard_model::RecordedDecision>, Option<Todo>)> {
        let Some(row) = sqlx::query("SELECT decision FROM events WHERE id = $1")
            .bind(crate::lookup_id(event_id))
            .fetch_optional(&self.pool)
            .await?
        else {
            return Err(Error::not_found("event"));
        };
        let decision = crate::json_opt(&row, "decision")?;
        let row = sqlx::query(concat!(
            "SELECT ",
            todo_columns!(),
            " FROM todos WHERE (webhook_id, delivery_id, verified) IN \
             (SELECT webhook_id, delivery_id, verified FROM events WHERE id = $1)"
        ))
        .bind(crate::lookup_id(event_id))
        .fetch_optional(&self.pool)
        .await?;
        Ok((decision, row.as_ref().map(todo).transpose()?))
    }

    /// Creates the todo for an event unless its delivery already has one (the once-key).
    pub async fn insert_todo(&self, event_id: &str, new: NewTodo) -> Result<TodoInsert> {
        let mut tx = self.begin_write().await?;
        let inserted = insert_todo_in(&mut tx, event_id, &new, self.now()).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    /// A queue's todos in the scope, oldest first (work is taken in arrival order).
    pub async fn list_todos(
        &self,
        scope: &OwnerScope,
        queue: &str,
        filter: TodoFilter,
        page: &Page,
    ) -> Result<Paged<Todo>> {
        let size = page.size()?;
        let (after_ms, after_id) = page
            .position(Listing::Todos)?
            .unwrap_or((i64::MIN, String::new()));
        let (open_only, unclaimed_only) = match filter {
            TodoFilter::Open => (1, 0),
            TodoFilter::Unclaimed => (1, 1),
            TodoFilter::All => (0, 0),
        };
        let rows = sqlx::query(concat!(
            "SELECT ",
            leased_todo_columns!(),
            " FROM todos WHERE owner_scope = $1 AND queue = $2 AND (created_at, id) > ($3, $4) \
             AND ($5 = 0 OR completed_at IS NULL) \
             AND ($6 = 0 OR claimed_by IS NULL OR claim_expires_at <= $8) \
             ORDER BY created_at, id LIMIT $7"
        ))
        .bind(scope.to_string())
        .bind(queue)
        .bind(after_ms)
        .bind(after_id.as_str())
        .bind(open_only)
        .bind(unclaimed_only)
        .bind(size + 1)
        .bind(self.now())
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(todo).collect::<Result<Vec<_>>>()?;
        Ok(into_page(items, size, |t| {
            cursor_for(Listing::Todos, t.created_at, &t.id)
        }))
    }

    pub async fn get_todo(&self, scope: &OwnerScope, id: &str) -> Result<Todo> {
        let row = sqlx::query(concat!(
            "SELECT ",
            leased_todo_columns!(),
            " FROM todos WHERE id = $1 AND owner_scope = $2"
        ))
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(todo)
            .unwrap_or(Err(Error::not_found("todo")))
    }

    /// Claims a todo for `endpoint_id` for the webhook's claim lease (`claim_ttl_secs`), or
    /// `default_ttl` when the webhook sets none. Takes an open todo nobody holds a live claim
    /// on; claiming again by the holder renews the lease (from now). Atomic: of two
    /// concurrent claims one wins and the other gets `Conflict`.
    pub async fn claim_todo(
        &self,
        scope: &OwnerScope,
        id: &str,
        endpoint_id: &str,
        default_ttl: Duration,
    ) -> Result<Todo> {
        let default_secs = check_claim_ttl(default_ttl)?;
        let now = self.now();
        let _turn = self.write_turn().await?;
        // A renewal keeps `claimed_at`: it says since when the holder has had the todo.
        let row = sqlx::query(concat!(
            "UPDATE todos SET claimed_by = $1, \
             claimed_at = CASE WHEN claimed_by = $1 THEN claimed_at ELSE $2 END, \
             claim_expires_at = $2 + 1000 * COALESCE( \
               (SELECT w.claim_ttl_secs FROM webhooks w WHERE w.id = todos.webhook_id), $3) \
             WHERE id = $4 AND owner_scope = $5 AND completed_at IS NULL \
             AND (claimed_by IS NULL OR claimed_by = $1 OR claim_expires_at <= $2) RETURNING ",
            leased_todo_columns!()
        ))
        .bind(endpoint_id)
        .bind(now)
        .bind(default_secs)
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .next();
        if let Some(row) = row {
            return todo(&row);
        }
        let current = self.get_todo(scope, id).await?;
        if current.completed_at.is_some() {
            Err(Error::conflict("the todo is already completed"))
        } else {
            Err(held_by_another(&current))
        }
    }

    /// Gives up `endpoint_id`'s claim: the todo is back in its queue, unclaimed. Releasing a
    /// todo nobody holds a live claim on changes nothing; one another endpoint holds, or one
    /// already completed, is a `Conflict`. A holder's lapsed claim nobody took over is still
    /// its own to release.
    pub async fn release_todo(
        &self,
        scope: &OwnerScope,
        id: &str,
        endpoint_id: &str,
    ) -> Result<Todo> {
        let _turn = self.write_turn().await?;
        let row = sqlx::query(concat!(
            "UPDATE todos SET claimed_by = NULL, claimed_at = NULL, claim_expires_at = NULL \
             WHERE id = $1 AND owner_scope = $2 AND completed_at IS NULL AND claimed_by = $3 \
             RETURNING ",
            leased_todo_columns!()
        ))
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        .bind(endpoint_id)
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .next();
        if let Some(row) = row {
            return todo(&row);
        }
        let current = self.get_todo(scope, id).await?;
        if current.completed_at.is_some() {
            Err(Error::conflict("the todo is already completed"))
        } else if current.claim_live(self.now()) {
            Err(held_by_another(&current))
        } else {
            Ok(current)
        }
    }

    /// Completes a todo that is in its queue (unclaimed, or its claim lapsed) or claimed by
    /// `endpoint_id` — a lapsed claim included, as long as no other endpoint has claimed the
    /// todo since. Completing again by the same endpoint is a no-op.
    pub async fn complete_todo(
        &self,
        scope: &OwnerScope,
        id: &str,
        endpoint_id: &str,
    ) -> Result<Todo> {
        let _turn = self.write_turn().await?;
        let row = sqlx::query(concat!(
            "UPDATE todos SET completed_by = $1, completed_at = $2 \
             WHERE id = $3 AND owner_scope = $4 AND completed_at IS NULL \
             AND (claimed_by IS NULL OR claimed_by = $1 OR claim_expires_at <= $2) RETURNING ",
            leased_todo_columns!()
        ))
        .bind(endpoint_id)
        .bind(self.now())
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .next();
        if let Some(row) = row {
            return todo(&row);
        }
        let current = self.get_todo(scope, id).await?;
        if current.completed_by.as_deref() == Some(endpoint_id) {
            Ok(current)
        } else if current.completed_at.is_some() {
            Err(Error::conflict("the todo is already completed"))
        } else {
            Err(held_by_another(&current))
        }
    }
}

/// The conflict of a call on a todo another endpoint holds a live claim on. The caller may be
/// a holder whose claim lapsed and was taken over since; the message says so, since that
/// caller's work on it is now the other endpoint's.
fn held_by_another(current: &Todo) -> Error {
    let until = current
        .claim_expires_at
        .map(|ms| format!(" until {}", switchboard_model::rfc3339_millis(ms)))
        .unwrap_or_default();
    Error::conflict(format!(
        "the todo is claimed by another endpoint{until}; a claim of yours on it, if you held one, \
         expired and the todo was claimed again since"
    ))
}
