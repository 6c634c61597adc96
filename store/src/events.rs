//! Events: deliveries exactly as received (headers and raw body), stored before routing so
//! nothing is lost when no router answers, and the decision recorded on them afterwards.

use bytes::Bytes;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};
use switchboard_model::{RecordedDecision, RecordedFault};

use crate::dialect::WriteTx;
use crate::error::{Error, Result};
use crate::multi_row;
use crate::scope::OwnerScope;
use crate::secrets::new_ordered_id;
use crate::todos::{NewTodo, TodoInsert, TodoRow, insert_todos_in};
use crate::{Listing, Page, Paged, Store, cursor_for, flag, into_page, json_opt};

/// Replay reads at most this many events (SPEC-0031 REQ-4).
pub const MAX_REPLAY_EVENTS: u32 = 1000;

/// A delivery as received. The source is the webhook's source type; the owner scope is the
/// webhook's; `received_at` is the store's clock.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub webhook_id: String,
    /// The forge's delivery id: with the webhook, the once-key of the todo it may create.
    pub delivery_id: String,
    /// `<event>` or `<event>.<action>`.
    pub kind: String,
    /// Headers in the order received, names as received, stored as JSON `[[name, value], …]`.
    /// JSON holds text only: ingest decides what to do with a value that is not UTF-8.
    pub headers: Vec<(String, String)>,
    /// The body byte for byte: signatures are over these bytes. Shared, not copied: the same
    /// bytes are stored, hashed and sent to a router.
    pub body: Bytes,
    pub verified: bool,
}

/// A delivery with the id and arrival time it will be stored under ([`Store::draft_event`]).
#[derive(Clone, Debug)]
pub struct DraftEvent {
    pub id: String,
    pub received_at: i64,
    pub new: NewEvent,
    /// The webhook row's revision the delivery was verified and routed under (ingest's copy,
    /// `webhook_cache`): stored only while the row is still at it. `None`: stored whatever it is.
    pub webhook_revision: Option<i64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub id: String,
    pub webhook_id: String,
    pub owner_scope: OwnerScope,
    pub delivery_id: String,
    pub source: String,
    pub kind: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub verified: bool,
    pub received_at: i64,
    pub decision: Option<RecordedDecision>,
    pub fault: Option<RecordedFault>,
    /// False until a decision is recorded: such events are routed again when a router returns.
    pub routed: bool,
    pub routed_at: Option<i64>,
}

/// An event in a listing: everything but headers and body, which only `get_event` returns.
#[derive(Clone, Debug, PartialEq)]
pub struct EventSummary {
    pub id: String,
    pub webhook_id: String,
    pub delivery_id: String,
    pub source: String,
    pub kind: String,
    pub verified: bool,
    pub received_at: i64,
    pub decision: Option<RecordedDecision>,
    pub fault: Option<RecordedFault>,
    pub routed: bool,
}

/// Which events a filtered listing keeps ([`Store::list_events_where`]); every field unset
/// keeps all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub decision: Option<DecisionClass>,
    /// The event's kind exactly (`pull_request.opened`).
    pub kind: Option<String>,
    /// Received at or after, and before, in ms since the epoch.
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

/// What was decided, as a person filters by it: a todo (any queue, the webhook's default
/// queue included), a drop, a quarantine, a fault, the default queue alone (no rule matched),
/// or not routed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecisionClass {
    Todo,
    Drop,
    Quarantine,
    Fault,
    Default,
    Pending,
}

impl DecisionClass {
    pub const ALL: [DecisionClass; 6] = [
        DecisionClass::Todo,
        DecisionClass::Drop,
        DecisionClass::Quarantine,
        DecisionClass::Fault,
        DecisionClass::Default,
        DecisionClass::Pending,
    ];

    /// The word in a URL (`?decision=drop`).
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionClass::Todo => "todo",
            DecisionClass::Drop => "drop",
            DecisionClass::Quarantine => "quarantine",
            DecisionClass::Fault => "fault",
            DecisionClass::Default => "default",
            DecisionClass::Pending => "pending",
        }
    }

    /// The stored label it matches, for the classes that are one label.
    fn label(self) -> &'static str {
        match self {
            DecisionClass::Drop => "drop",
            DecisionClass::Quarantine => "quarantine",
            DecisionClass::Fault => "fault",
            _ => "default",
        }
    }

    pub fn parse(word: &str) -> Option<DecisionClass> {
        DecisionClass::ALL.into_iter().find(|c| c.as_str() == word)
    }
}

/// What [`Store::backlog`] counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    pub unrouted: u64,
    /// (queue, open todos), by queue name.
    pub open_todos: Vec<(String, u64)>,
    pub quarantined: u64,
    /// Guards running (issue 46): changes still watched by the rules they replaced.
    pub guards_running: u64,
}

/// The outcome of routing one event: the decision (`queue:<name>`, `drop`, … as JSON), an
/// optional fault, and the todo a queue decision creates.
#[derive(Clone, Debug)]
pub struct RecordDecision {
    pub decision: RecordedDecision,
    pub fault: Option<RecordedFault>,
    pub todo: Option<NewTodo>,
    /// The configuration the router evaluated for this decision, so it can be explained later
    /// (`explain_webhook_event`). Routing always knows it; `None` (fixtures, older schemas)
    /// leaves the event's configuration columns untouched.
    pub decided_by: Option<DecidedBy>,
}

/// Which saved configuration made a decision: the webhook's `config_version` and
/// `config_digest` as read for the routing that decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecidedBy {
    pub version: i64,
    pub digest: String,
}

macro_rules! event_columns {
    () => {
        concat!(event_columns_but_body!(), ", body")
    };
}

/// What `insert_event` reads back: the body it has already, it does not read again.
macro_rules! event_columns_but_body {
    () => {
        "id, webhook_id, owner_scope, delivery_id, source, kind, headers, verified, received_at, \
         decision, fault, routed, routed_at"
    };
}

macro_rules! summary_columns {
    () => {
        "id, webhook_id, delivery_id, source, kind, verified, received_at, decision, fault, routed"
    };
}

/// The most body bytes one read of many events holds (a replay window, an unrouted batch):
/// 1,000 deliveries of 25 MiB would be 25 GB in one process.
pub const LOAD_BYTES: usize = 256 * 1024 * 1024;

/// Events read under a byte bound.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub events: Vec<Event>,
    /// The bound left out events that the count and the filter would have read.
    pub capped: bool,
}

/// `SELECT` of event columns `FROM <from> ORDER BY <order> LIMIT <limit>`, keeping the body of
/// each row only while the running total of bodies before it is under `<max_bytes>`; later
/// rows come back with a NULL body and [`loaded`] leaves them out. The first row always
/// keeps its body.
macro_rules! within_bytes {
    ($from:literal, $order:literal, $limit:literal, $max_bytes:literal) => {
        concat!(
            "SELECT ",
            event_columns_but_body!(),
            ", CASE WHEN upto - LENGTH(body) < ",
            $max_bytes,
            " THEN body END AS body FROM (SELECT ",
            event_columns!(),
            ", SUM(LENGTH(body)) OVER (ORDER BY ",
            $order,
            " ROWS UNBOUNDED PRECEDING) AS upto FROM (SELECT ",
            event_columns!(),
            " FROM ",
            $from,
            " ORDER BY ",
            $order,
            " LIMIT ",
            $limit,
            ") AS picked) AS counted ORDER BY ",
            $order
        )
    };
}

/// The rows of a [`within_bytes!`] query.
fn loaded(rows: &[AnyRow]) -> Result<Loaded> {
    let mut events = Vec::with_capacity(rows.len());
    let mut capped = false;
    for row in rows {
        match row.try_get::<Option<Vec<u8>>, _>("body")? {
            Some(body) => events.push(event_with(row, Bytes::from(body))?),
            None => capped = true,
        }
    }
    Ok(Loaded { events, capped })
}

fn event(row: &AnyRow) -> Result<Event> {
    let body: Vec<u8> = row.try_get("body")?;
    event_with(row, Bytes::from(body))
}

fn event_with(row: &AnyRow, body: Bytes) -> Result<Event> {
    let headers: String = row.try_get("headers")?;
    Ok(Event {
        id: row.try_get("id")?,
        webhook_id: row.try_get("webhook_id")?,
        owner_scope: crate::parse_col(row, "owner_scope")?,
        delivery_id: row.try_get("delivery_id")?,
        source: row.try_get("source")?,
        kind: row.try_get("kind")?,
        headers: serde_json::from_str(&headers)?,
        body,
        verified: flag(row, "verified")?,
        received_at: row.try_get("received_at")?,
        decision: json_opt(row, "decision")?,
        fault: json_opt(row, "fault")?,
        routed: flag(row, "routed")?,
        routed_at: row.try_get("routed_at")?,
    })
}

fn summary(row: &AnyRow) -> Result<EventSummary> {
    Ok(EventSummary {
        id: row.try_get("id")?,
        webhook_id: row.try_get("webhook_id")?,
        delivery_id: row.try_get("delivery_id")?,
        source: row.try_get("source")?,
        kind: row.try_get("kind")?,
        verified: flag(row, "verified")?,
        received_at: row.try_get("received_at")?,
        decision: json_opt(row, "decision")?,
        fault: json_opt(row, "fault")?,
        routed: flag(row, "routed")?,
    })
}

/// An event to insert in a group commit: its id and arrival time are chosen before the first
/// try, so applying it again (a failed batch's writes, one by one) stores the same row. With
/// `decided`, the row is stored routed, with its decision and todo, in the same statement run:
/// one write instead of an insert and an update.
pub(crate) struct EventRow<'a> {
    pub draft: &'a DraftEvent,
    pub decided: Option<&'a RecordDecision>,
}

/// Inserts `rows` in their order, a run of them per statement, then the todos of the decided
/// ones; each comes back as its stored event with its todo, or `not_found` when its webhook is
/// gone (that row inserts nothing and the others go on). `Err` is a failed statement: the
/// transaction cannot commit.
pub(crate) async fn insert_events_in(
    tx: &mut WriteTx,
    rows: &[EventRow<'_>],
) -> Result<Vec<Result<(Event, Option<TodoInsert>)>>> {
    let mut out = Vec::with_capacity(rows.len());
    for run in multi_row::runs(rows.len(), multi_row::MAX_RUN) {
        let run = &rows[run];
        let columns = InsertColumns::of(run, false);
        let texts = run
            .iter()
            .map(|row| RowTexts::of(row, columns))
            .collect::<Result<Vec<_>>>()?;
        let mut query = sqlx::query(AssertSqlSafe(events_insert(run.len(), columns)));
        for (ord, (row, texts)) in run.iter().zip(&texts).enumerate() {
            query = bind_row(query, row, texts, ord, columns);
        }
        // To the end of the statement: see `store` (writes that return rows).
        let stored = query.fetch_all(&mut **tx).await?;
        let mut by_id = std::collections::HashMap::with_capacity(stored.len());
        for row in &stored {
            let id: String = row.try_get("id")?;
            by_id.insert(id, row);
        }
        // A row not inserted: its webhook is gone, or (a copy's revision named) moved on.
        let missed: Vec<&str> = run
            .iter()
            .filter(|r| r.draft.webhook_revision.is_some() && !by_id.contains_key(&r.draft.id))
            .map(|r| r.draft.new.webhook_id.as_str())
            .collect();
        let webhooks = existing(tx, "webhooks", &missed).await?;
        for row in run {
            out.push(match by_id.get(row.draft.id.as_str()) {
                Some(stored) => event_with(stored, row.draft.new.body.clone()),
                None if webhooks.contains(&row.draft.new.webhook_id) => {
                    Err(crate::webhook_cache::stale_webhook())
                }
                None => Err(Error::not_found("webhook")),
            });
        }
    }
    // The todos of the decided rows that were stored, once-keyed as a decision's are.
    let todos: Vec<TodoRow> = rows
        .iter()
        .zip(&out)
        .filter(|(_, stored)| stored.is_ok())
        .filter_map(|(row, _)| {
            Some(TodoRow {
                event_id: &row.draft.id,
                new: row.decided?.todo.as_ref()?,
                now: row.draft.received_at,
            })
        })
        .collect();
    let mut made = insert_todos_in(tx, &todos).await?.into_iter();
    Ok(out
        .into_iter()
        .zip(rows)
        .map(|(stored, row)| {
            let event = stored?;
            match row.decided.and_then(|d| d.todo.as_ref()) {
                Some(_) => made
                    .next()
                    .unwrap_or_else(|| Err(Error::internal("a todo row was not answered")))
                    .map(|todo| (event, Some(todo))),
                None => Ok((event, None)),
            }
        })
        .collect())
}

/// Which optional columns a statement inserting events names. `decided_by`: the configuration
/// a decision was made under (0010's columns); without, they are not named, as in the statement
/// older schemas know (`decisions_update` does the same). `at_revision`: a row naming a webhook
/// revision (`DraftEvent::webhook_revision`) is inserted only while its webhook is at it
/// (migration 0014's column, likewise named only then). `todos`: each row also carries the todo
/// its decision makes, for the one-statement write ([`insert_events_at_once`]).
#[derive(Clone, Copy)]
struct InsertColumns {
    decided_by: bool,
    at_revision: bool,
    todos: bool,
}

impl InsertColumns {
    fn of(rows: &[EventRow<'_>], todos: bool) -> InsertColumns {
        InsertColumns {
            decided_by: rows
                .iter()
                .any(|r| r.decided.is_some_and(|d| d.decided_by.is_some())),
            at_revision: rows.iter().any(|r| r.draft.webhook_revision.is_some()),
            todos,
        }
    }

    fn width(self) -> usize {
        13 + 2 * usize::from(self.decided_by)
            + usize::from(self.at_revision)
            + 3 * usize::from(self.todos)
    }
}

/// The texts one row stores: its headers, its decision and fault when decided, and with
/// [`InsertColumns::todos`] the id of the todo its decision makes.
struct RowTexts {
    headers: String,
    decision: Option<String>,
    fault: Option<String>,
    todo_id: Option<String>,
}

impl RowTexts {
    fn of(row: &EventRow<'_>, columns: InsertColumns) -> Result<RowTexts> {
        let todo = row.decided.and_then(|d| d.todo.as_ref());
        if todo.is_some_and(|t| t.queue.is_empty()) {
            return Err(Error::invalid("queue", "must not be empty"));
        }
        let (decision, fault) = match row.decided {
            Some(d) => (
                Some(serde_json::to_string(&d.decision)?),
                d.fault.as_ref().map(serde_json::to_string).transpose()?,
            ),
            None => (None, None),
        };
        Ok(RowTexts {
            headers: serde_json::to_string(&row.draft.new.headers)?,
            decision,
            fault,
            todo_id: match todo {
                Some(_) if columns.todos => Some(new_ordered_id("td_")?),
                _ => None,
            },
        })
    }
}

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;

/// Binds one row of the `n` list [`events_values`] declares, in its column order.
fn bind_row<'q>(
    query: AnyQuery<'q>,
    row: &'q EventRow<'_>,
    texts: &'q RowTexts,
    ord: usize,
    columns: InsertColumns,
) -> AnyQuery<'q> {
    let draft = row.draft;
    let mut query = query
        .bind(draft.id.as_str())
        .bind(draft.new.delivery_id.as_str())
        .bind(draft.new.kind.as_str())
        .bind(texts.headers.as_str())
        .bind(draft.new.body.as_ref())
        .bind(i32::from(draft.new.verified))
        .bind(draft.received_at)
        .bind(draft.new.webhook_id.as_str())
        .bind(ord as i64)
        .bind(texts.decision.as_deref())
        .bind(texts.fault.as_deref())
        .bind(i32::from(row.decided.is_some()))
        .bind(row.decided.map(|_| draft.received_at));
    if columns.decided_by {
        let by = row.decided.and_then(|d| d.decided_by.as_ref());
        query = query
            .bind(by.map(|by| by.version))
            .bind(by.map(|by| by.digest.as_str()));
    }
    if columns.at_revision {
        query = query.bind(draft.webhook_revision);
    }
    if columns.todos {
        let todo = row.decided.and_then(|d| d.todo.as_ref());
        query = query
            .bind(texts.todo_id.as_deref())
            .bind(todo.map(|t| t.queue.as_str()))
            .bind(todo.and_then(|t| t.rule_id.as_deref()));
    }
    query
}

/// The rows to insert, as `WITH n (…) AS (VALUES …)`, and the `INSERT INTO events` that takes
/// them (without its `RETURNING`): one definition for both ways of writing a batch.
fn events_values(rows: usize, columns: InsertColumns) -> (String, String) {
    let (by_columns, by_values) = if columns.decided_by {
        (
            ", config_version, config_digest",
            ", n.config_version, n.config_digest",
        )
    } else {
        ("", "")
    };
    let (revision, check) = if columns.at_revision {
        (
            ", revision",
            " WHERE n.revision IS NULL OR n.revision = w.revision",
        )
    } else {
        ("", "")
    };
    let todo = if columns.todos {
        ", new_todo_id, queue, rule_id"
    } else {
        ""
    };
    (
        format!(
            "WITH n (id, delivery_id, kind, headers, body, verified, received_at, webhook_id, ord, \
             decision, fault, routed, routed_at{by_columns}{revision}{todo}) AS (VALUES {})",
            multi_row::values(rows, columns.width()),
        ),
        format!(
            "INSERT INTO events (id, webhook_id, owner_scope, delivery_id, source, kind, headers, \
             body, verified, received_at, decision, fault, routed, routed_at{by_columns}) \
             SELECT n.id, w.id, w.owner_scope, n.delivery_id, w.source_type, n.kind, n.headers, \
             n.body, n.verified, n.received_at, n.decision, n.fault, n.routed, \
             n.routed_at{by_values} FROM n JOIN webhooks w ON w.id = n.webhook_id{check} \
             ORDER BY n.ord"
        ),
    )
}

/// The statement inserting `rows` events, answering each stored one.
fn events_insert(rows: usize, columns: InsertColumns) -> String {
    let (with_n, insert) = events_values(rows, columns);
    format!("{with_n} {insert} RETURNING {}", event_columns_but_body!())
}

/// PostgreSQL only: the events and the todos of the decided ones in one statement (a
/// data-modifying `WITH`), answering one row per `n` row: `draft_id`, `webhook_found` (its
/// webhook's id, or NULL when gone), the stored event's columns (NULL when not inserted) and its
/// new todo's, named `todo_…` (NULL when none was made).
fn events_and_todos_insert(rows: usize, columns: InsertColumns) -> String {
    let (with_n, insert) = events_values(rows, columns);
    format!(
        "{with_n}, e AS ({insert} RETURNING {}), \
         t AS (INSERT INTO todos (id, owner_scope, webhook_id, event_id, delivery_id, verified, \
         queue, rule_id, created_at) \
         SELECT n.new_todo_id, e.owner_scope, e.webhook_id, e.id, e.delivery_id, e.verified, \
         n.queue, n.rule_id, n.received_at FROM n JOIN e ON e.id = n.id \
         WHERE n.queue IS NOT NULL ORDER BY n.ord \
         ON CONFLICT (webhook_id, delivery_id, verified) DO NOTHING RETURNING {}) \
         SELECT n.id AS draft_id, w.id AS webhook_found, e.*, t.* FROM n \
         LEFT JOIN webhooks w ON w.id = n.webhook_id LEFT JOIN e ON e.id = n.id \
         LEFT JOIN t ON t.todo_event_id = n.id ORDER BY n.ord",
        event_columns_but_body!(),
        crate::todos::todo_columns_beside_event(),
    )
}

/// PostgreSQL only: stores `rows` — each event, and the todo of each decided one — with one
/// statement sent on its own, so it commits by itself: one round trip and one WAL flush for
/// the whole batch, where [`insert_events_in`] takes `BEGIN`, a statement per run, the todos'
/// and `COMMIT`. The answers are [`insert_events_in`]'s. `Err` is a failed statement, which
/// wrote nothing.
pub(crate) async fn insert_events_at_once(
    conn: &mut sqlx::AnyConnection,
    rows: &[EventRow<'_>],
) -> Result<Vec<Result<(Event, Option<TodoInsert>)>>> {
    let columns = InsertColumns::of(rows, true);
    let texts = rows
        .iter()
        .map(|row| RowTexts::of(row, columns))
        .collect::<Result<Vec<_>>>()?;
    let sql = events_and_todos_insert(rows.len(), columns);
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for (ord, (row, texts)) in rows.iter().zip(&texts).enumerate() {
        query = bind_row(query, row, texts, ord, columns);
    }
    let answered = query.fetch_all(&mut *conn).await?;
    // Committed from here on: whatever goes wrong now is answered per row, never as `Err`,
    // which would have the batch written again write by write.
    let mut answered = answered.iter();
    let mut out: Vec<Result<(Event, Option<TodoInsert>)>> = rows
        .iter()
        .map(|row| match answered.next() {
            Some(answer) => stored_at_once(row, answer),
            None => Err(Error::internal("the batch's statement answered fewer rows")),
        })
        .collect();
    // A decided row whose todo was not made: its delivery's once-key had one already (a
    // redelivery), now committed; it is read as the transactional path reads it.
    let redelivered: Vec<&str> = rows
        .iter()
        .zip(&out)
        .filter(|(row, stored)| {
            row.decided.is_some_and(|d| d.todo.is_some()) && matches!(stored, Ok((_, None)))
        })
        .map(|(row, _)| row.draft.id.as_str())
        .collect();
    if !redelivered.is_empty() {
        let mut found = crate::todos::todos_of_events(conn, &redelivered).await;
        for (row, stored) in rows.iter().zip(out.iter_mut()) {
            if !redelivered.contains(&row.draft.id.as_str()) {
                continue;
            }
            let existing = match &mut found {
                Ok(found) => found
                    .remove(row.draft.id.as_str())
                    .ok_or_else(|| Error::not_found("event")),
                Err(e) => Err(Error::internal(format!(
                    "reading a redelivery's todo: {}",
                    e.log_text()
                ))),
            };
            match (existing, stored.as_mut()) {
                (Ok(existing), Ok((_, todo))) => {
                    *todo = Some(TodoInsert {
                        todo: existing,
                        inserted: false,
                    })
                }
                (Err(e), _) => *stored = Err(e),
                (Ok(_), Err(_)) => {}
            }
        }
    }
    Ok(out)
}

/// One row of [`events_and_todos_insert`]'s answer: the stored event and the todo it made
/// (`None` for a redelivery's, read after), or why the row was not stored.
fn stored_at_once(row: &EventRow<'_>, answer: &AnyRow) -> Result<(Event, Option<TodoInsert>)> {
    let draft_id: String = answer.try_get("draft_id")?;
    if draft_id != row.draft.id {
        return Err(Error::internal(
            "the batch's statement answered out of order",
        ));
    }
    let stored: Option<String> = answer.try_get("id")?;
    if stored.is_none() {
        let found: Option<String> = answer.try_get("webhook_found")?;
        return Err(if found.is_some() && row.draft.webhook_revision.is_some() {
            crate::webhook_cache::stale_webhook()
        } else {
            Error::not_found("webhook")
        });
    }
    let event = event_with(answer, row.draft.new.body.clone())?;
    let made: Option<String> = answer.try_get("todo_id")?;
    let todo = match (row.decided.and_then(|d| d.todo.as_ref()), made) {
        (Some(_), Some(_)) => Some(TodoInsert {
            todo: crate::todos::todo_beside_event(answer)?,
            inserted: true,
        }),
        _ => None,
    };
    Ok((event, todo))
}

/// A decision to record in a group commit, on an event not routed yet.
pub(crate) struct DecisionRow<'a> {
    pub event_id: &'a str,
    pub outcome: &'a RecordDecision,
    pub now: i64,
}

/// Records each decision (and the todo a queue decision makes) on an event not routed yet, a
/// run of them per statement; each comes back as its todo, `conflict` when its event was
/// routed already (the first decision stands), `not_found` when the event is gone — and then
/// that row wrote nothing. Two rows for one event: the first is recorded, the second is a
/// conflict, as if one came after the other. `Err` is a failed statement.
pub(crate) async fn record_decisions_in(
    tx: &mut WriteTx,
    rows: &[DecisionRow<'_>],
) -> Result<Vec<Result<Option<TodoInsert>>>> {
    let mut out: Vec<Option<Result<Option<TodoInsert>>>> = (0..rows.len()).map(|_| None).collect();
    // The rows each statement updates: first occurrences of their event, grouped by whether
    // they name the configuration they were made under. Without one, 0010's columns are not
    // named at all: they stay NULL ("unknown"), and the statement is the one older schemas know.
    let mut first_of = std::collections::HashMap::with_capacity(rows.len());
    let mut repeats = Vec::new();
    let (mut with_config, mut without) = (Vec::new(), Vec::new());
    for (i, row) in rows.iter().enumerate() {
        if let Some(todo) = &row.outcome.todo
            && todo.queue.is_empty()
        {
            out[i] = Some(Err(Error::invalid("queue", "must not be empty")));
        } else if let Some(&first) = first_of.get(row.event_id) {
            repeats.push((i, first));
        } else {
            first_of.insert(row.event_id, i);
            if row.outcome.decided_by.is_some() {
                with_config.push(i);
            } else {
                without.push(i);
            }
        }
    }
    let mut updated = std::collections::HashSet::with_capacity(rows.len());
    for (group, decided_by) in [(&with_config, true), (&without, false)] {
        for run in multi_row::runs(group.len(), multi_row::MAX_RUN) {
            let run = &group[run];
            let sql = decisions_update(run.len(), decided_by);
            let mut texts = Vec::with_capacity(run.len());
            for &i in run {
                let outcome = rows[i].outcome;
                let fault = outcome
                    .fault
                    .as_ref()
                    .map(serde_json::to_string)
                    .transpose()?;
                texts.push((serde_json::to_string(&outcome.decision)?, fault));
            }
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (&i, (decision, fault)) in run.iter().zip(&texts) {
                let row = &rows[i];
                query = query
                    .bind(crate::lookup_id(row.event_id))
                    .bind(decision.as_str())
                    .bind(fault.as_deref())
                    .bind(row.now);
                if let Some(by) = &row.outcome.decided_by {
                    query = query.bind(by.version).bind(by.digest.as_str());
                }
            }
            for done in query.fetch_all(&mut **tx).await? {
                updated.insert(done.try_get::<String, _>("id")?);
            }
        }
    }
    // Rows that updated nothing: routed already (a conflict) or gone.
    let missed: Vec<&str> = with_config
        .iter()
        .chain(&without)
        .map(|&i| rows[i].event_id)
        .filter(|id| !updated.contains(*id))
        .collect();
    let still_stored = existing(tx, "events", &missed).await?;
    let (mut todo_of, mut todos) = (Vec::new(), Vec::new());
    for &i in with_config.iter().chain(&without) {
        let row = &rows[i];
        if !updated.contains(row.event_id) {
            out[i] = Some(Err(if still_stored.contains(row.event_id) {
                Error::conflict("the event was routed already")
            } else {
                Error::not_found("event")
            }));
            continue;
        }
        match &row.outcome.todo {
            Some(new) => {
                todo_of.push(i);
                todos.push(TodoRow {
                    event_id: row.event_id,
                    new,
                    now: row.now,
                });
            }
            None => out[i] = Some(Ok(None)),
        }
    }
    let made = insert_todos_in(tx, &todos).await?;
    for (i, todo) in todo_of.into_iter().zip(made) {
        out[i] = Some(todo.map(Some));
    }
    // A second row for an event is answered as if it came after the first.
    for (i, first) in repeats {
        out[i] = Some(Err(match &out[first] {
            Some(Err(Error::NotFound { .. })) => Error::not_found("event"),
            _ => Error::conflict("the event was routed already"),
        }));
    }
    Ok(out
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(Error::internal("a decision row was not answered"))))
        .collect())
}

/// The statement recording `rows` decisions at once. With `decided_by`, each row also names the
/// configuration it was made under (0010's columns); without, those columns are not named at
/// all and stay NULL ("unknown"), as in the statement older schemas know.
fn decisions_update(rows: usize, decided_by: bool) -> String {
    let (columns, sets) = if decided_by {
        (
            ", new_version, new_digest",
            ", config_version = v.new_version, config_digest = v.new_digest",
        )
    } else {
        ("", "")
    };
    let width = if decided_by { 6 } else { 4 };
    format!(
        "WITH v (event_id, new_decision, new_fault, new_routed_at{columns}) AS (VALUES {}) \
         UPDATE events SET decision = v.new_decision, fault = v.new_fault, routed = 1, \
         routed_at = v.new_routed_at{sets} FROM v WHERE events.id = v.event_id AND events.routed = 0 \
         RETURNING id",
        multi_row::values(rows, width)
    )
}

/// Which of `ids` name a row of `table` (`events` or `webhooks`).
async fn existing(
    tx: &mut WriteTx,
    table: &'static str,
    ids: &[&str],
) -> Result<std::collections::HashSet<String>> {
    let mut found = std::collections::HashSet::new();
    for run in multi_row::runs(ids.len(), multi_row::MAX_RUN) {
        let ids = &ids[run];
        let sql = format!(
            "WITH v (row_id) AS (VALUES {}) SELECT id FROM {table} JOIN v ON {table}.id = v.row_id",
            multi_row::values(ids.len(), 1)
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for id in ids {
            query = query.bind(crate::lookup_id(id));
        }
        for row in query.fetch_all(&mut **tx).await? {
            found.insert(row.try_get::<String, _>("id")?);
        }
    }
    Ok(found)
}

impl Store {
    /// Stores a delivery, durably, before anything routes it. The insert shares a commit
    /// with other deliveries arriving at the same time (`group_commit`); the answer comes
    /// once that commit holds it.
    pub async fn insert_event(&self, new: NewEvent) -> Result<Event> {
        let draft = self.draft_event(new)?;
        Ok(self.store_event(draft, None).await?.0)
    }

    /// A delivery given its event id and arrival time (the store's clock) before it is stored,
    /// so a router can decide it first and [`Store::store_event`] store it with its decision.
    pub fn draft_event(&self, new: NewEvent) -> Result<DraftEvent> {
        if new.delivery_id.is_empty() || new.delivery_id.len() > 200 {
            return Err(Error::invalid("delivery_id", "1–200 bytes"));
        }
        if new.kind.is_empty() || new.kind.len() > 200 {
            return Err(Error::invalid("kind", "1–200 bytes"));
        }
        Ok(DraftEvent {
            id: new_ordered_id("ev_")?,
            received_at: self.now(),
            new,
            webhook_revision: None,
        })
    }

    pub async fn list_events(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        page: &Page,
    ) -> Result<Paged<EventSummary>> {
        let size = page.size()?;
        let (before_ms, before_id) = page
            .position(Listing::Events)?
            .unwrap_or((i64::MAX, String::new()));
        self.require_webhook(scope, webhook_id).await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            summary_columns!(),
            " FROM events WHERE webhook_id = $1 AND owner_scope = $2 AND (received_at, id) < ($3, $4) \
             ORDER BY received_at DESC, id DESC LIMIT $5"
        ))
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .bind(before_ms)
        .bind(before_id.as_str())
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(summary).collect::<Result<Vec<_>>>()?;
        Ok(into_page(items, size, |e| {
            cursor_for(Listing::Events, e.received_at, &e.id)
        }))
    }

    /// The webhook's events newest first, only those `filter` keeps, each with the saved
    /// configuration version that decided it (the console's events page: what decided each,
    /// without reading bodies). Paged like [`Store::list_events`].
    pub async fn list_events_where(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        filter: &EventFilter,
        page: &Page,
    ) -> Result<Paged<(EventSummary, Option<i64>)>> {
        let size = page.size()?;
        let (before_ms, before_id) = page
            .position(Listing::Events)?
            .unwrap_or((i64::MAX, String::new()));
        self.require_webhook(scope, webhook_id).await?;
        let label = match self.backend {
            crate::Backend::Sqlite => "json_extract(decision, '$.decision')",
            crate::Backend::Postgres => "(decision::jsonb ->> 'decision')",
        };
        // Only fixed fragments go into the text; every value is bound.
        let mut sql = format!(
            "SELECT {}, config_version FROM events WHERE webhook_id = $1 AND owner_scope = $2 \
             AND (received_at, id) < ($3, $4) AND received_at >= $5 AND received_at < $6",
            summary_columns!()
        );
        match filter.decision {
            None => {}
            Some(DecisionClass::Pending) => sql.push_str(" AND decision IS NULL"),
            // The labels that make a todo (`Label::delivers_work` with faults failing closed:
            // a fault is its own class here), in SQL.
            Some(DecisionClass::Todo) => sql.push_str(&format!(
                " AND ({label} LIKE 'queue:%' OR {label} = 'default')"
            )),
            Some(class) => sql.push_str(&format!(" AND {label} = '{}'", class.label())),
        }
        // Placeholders $1–$6 are fixed above; the optional ones are numbered as they come.
        let mut next = 7;
        if filter.kind.is_some() {
            sql.push_str(&format!(" AND kind = ${next}"));
            next += 1;
        }
        sql.push_str(&format!(
            " ORDER BY received_at DESC, id DESC LIMIT ${next}"
        ));
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(crate::lookup_id(webhook_id))
            .bind(scope.to_string())
            .bind(before_ms)
            .bind(before_id.as_str())
            .bind(filter.since_ms.unwrap_or(i64::MIN))
            .bind(filter.until_ms.unwrap_or(i64::MAX));
        if let Some(kind) = &filter.kind {
            query = query.bind(kind.as_str());
        }
        let rows = query.bind(size + 1).fetch_all(&self.pool).await?;
        let items = rows
            .iter()
            .map(|row| {
                Ok((
                    summary(row)?,
                    row.try_get::<Option<i64>, _>("config_version")?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(into_page(items, size, |(e, _)| {
            cursor_for(Listing::Events, e.received_at, &e.id)
        }))
    }

    /// How many of the webhook's deliveries since `since_ms` each decision label took, per
    /// hour (hours since the Unix epoch); `None` for deliveries not routed yet. Counted in the
    /// database over the window's index range, so the answer is one row per hour and label
    /// however many deliveries there were (the console's decisions-over-time chart).
    pub async fn decisions_per_hour(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        since_ms: i64,
    ) -> Result<Vec<(i64, Option<String>, u64)>> {
        self.require_webhook(scope, webhook_id).await?;
        let sql = match self.backend {
            crate::Backend::Sqlite => {
                "SELECT received_at / 3600000 AS hour, json_extract(decision, '$.decision') AS label, \
                 COUNT(*) AS n FROM events WHERE webhook_id = $1 AND owner_scope = $2 AND received_at >= $3 \
                 GROUP BY hour, label"
            }
            crate::Backend::Postgres => {
                "SELECT received_at / 3600000 AS hour, (decision::jsonb ->> 'decision') AS label, \
                 COUNT(*) AS n FROM events WHERE webhook_id = $1 AND owner_scope = $2 AND received_at >= $3 \
                 GROUP BY hour, label"
            }
        };
        let rows = sqlx::query(sql)
            .bind(crate::lookup_id(webhook_id))
            .bind(scope.to_string())
            .bind(since_ms)
            .fetch_all(&self.pool)
            .await?;
        let mut counted = rows
            .iter()
            .map(|row| {
                let n: i64 = row.try_get("n")?;
                Ok((
                    row.try_get::<i64, _>("hour")?,
                    row.try_get::<Option<String>, _>("label")?,
                    u64::try_from(n).unwrap_or(0),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        // One order on both backends (they sort NULL apart).
        counted.sort();
        Ok(counted)
    }

    /// One event with its headers and body, for its owner only.
    pub async fn get_event(&self, scope: &OwnerScope, event_id: &str) -> Result<Event> {
        let row = sqlx::query(concat!(
            "SELECT ",
            event_columns!(),
            " FROM events WHERE id = $1 AND owner_scope = $2"
        ))
        .bind(crate::lookup_id(event_id))
        .bind(scope.to_string())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(event)
            .unwrap_or(Err(Error::not_found("event")))
    }

    /// One event with the configuration its decision was recorded under (`None`: unknown —
    /// not routed yet, or decided before that was recorded), for its owner only. The columns
    /// of 0010 are read here alone, so the event reads of older schemas stay as they were.
    pub async fn get_event_decided_by(
        &self,
        scope: &OwnerScope,
        event_id: &str,
    ) -> Result<(Event, Option<DecidedBy>)> {
        let row = sqlx::query(concat!(
            "SELECT ",
            event_columns!(),
            ", config_version, config_digest FROM events WHERE id = $1 AND owner_scope = $2"
        ))
        .bind(crate::lookup_id(event_id))
        .bind(scope.to_string())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Err(Error::not_found("event"));
        };
        let version: Option<i64> = row.try_get("config_version")?;
        let digest: Option<String> = row.try_get("config_digest")?;
        let decided_by = version.map(|version| DecidedBy {
            version,
            digest: digest.unwrap_or_default(),
        });
        Ok((event(&row)?, decided_by))
    }

    /// The replay window: the webhook's most recent `limit` events (at most 1,000), newest
    /// first, received at or after `since` when given, holding at most [`LOAD_BYTES`] of
    /// bodies. Reads only this webhook's events.
    pub async fn recent_events(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        limit: u32,
        since: Option<i64>,
    ) -> Result<Vec<Event>> {
        Ok(self
            .recent_events_within(scope, webhook_id, limit, since, LOAD_BYTES)
            .await?
            .events)
    }

    /// [`Store::recent_events`] holding at most `max_bytes` of bodies (always the newest
    /// event, whatever its size), and whether that bound left events out.
    pub async fn recent_events_within(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        limit: u32,
        since: Option<i64>,
        max_bytes: usize,
    ) -> Result<Loaded> {
        if !(1..=MAX_REPLAY_EVENTS).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be between 1 and {MAX_REPLAY_EVENTS}"),
            ));
        }
        self.require_webhook(scope, webhook_id).await?;
        let rows = sqlx::query(within_bytes!(
            "events WHERE webhook_id = $1 AND owner_scope = $2 AND received_at >= $3",
            "received_at DESC, id DESC",
            "$4",
            "$5"
        ))
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .bind(since.unwrap_or(i64::MIN))
        .bind(i64::from(limit))
        .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        loaded(&rows)
    }

    /// Events stored without a recorded decision, oldest first, holding at most
    /// [`LOAD_BYTES`] of bodies: the backlog to route when a router answers again.
    pub async fn unrouted_events(&self, limit: u32) -> Result<Vec<Event>> {
        let rows = sqlx::query(within_bytes!(
            "events WHERE routed = 0",
            "received_at, id",
            "$1",
            "$2"
        ))
        .bind(i64::from(limit.clamp(1, MAX_REPLAY_EVENTS)))
        .bind(i64::try_from(LOAD_BYTES).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        Ok(loaded(&rows)?.events)
    }

    /// How many of a webhook's events wait for a decision (deferred over its rate, or stored
    /// while no router answered): the backlog ingest bounds.
    pub async fn unrouted_count(&self, webhook_id: &str) -> Result<u64> {
        let row =
            sqlx::query("SELECT COUNT(*) AS n FROM events WHERE webhook_id = $1 AND routed = 0")
                .bind(crate::lookup_id(webhook_id))
                .fetch_one(&self.pool)
                .await?;
        let n: i64 = row.try_get("n")?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The backlog operators watch (`/metrics`), across every webhook: deliveries stored
    /// without a decision, open todos per queue, and deliveries quarantined since `since`
    /// (ms). Each count walks an index (`events_unrouted`, `todos_by_queue`, `events_by_age`).
    pub async fn backlog(&self, since: i64) -> Result<Backlog> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM events WHERE routed = 0")
            .fetch_one(&self.pool)
            .await?;
        let unrouted: i64 = row.try_get("n")?;
        let rows = sqlx::query(
            "SELECT queue, COUNT(*) AS n FROM todos WHERE completed_at IS NULL GROUP BY queue ORDER BY queue",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut open_todos = Vec::with_capacity(rows.len());
        for row in &rows {
            let n: i64 = row.try_get("n")?;
            open_todos.push((row.try_get("queue")?, u64::try_from(n).unwrap_or(0)));
        }
        // The decision is stored as compact JSON written by serde_json: its label is the
        // string `"decision":"quarantine"`, whatever the key order.
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM events WHERE received_at >= $1 AND decision LIKE '%\"decision\":\"quarantine\"%'",
        )
        .bind(since)
        .fetch_one(&self.pool)
        .await?;
        let quarantined: i64 = row.try_get("n")?;
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM trials WHERE kind = 'guard' AND ended_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        let guards: i64 = row.try_get("n")?;
        Ok(Backlog {
            unrouted: u64::try_from(unrouted).unwrap_or(0),
            open_todos,
            quarantined: u64::try_from(quarantined).unwrap_or(0),
            guards_running: u64::try_from(guards).unwrap_or(0),
        })
    }

    /// `not_found` unless the scope owns the webhook: one query, the same for an unknown id and
    /// another scope's.
    pub(crate) async fn require_webhook(&self, scope: &OwnerScope, webhook_id: &str) -> Result<()> {
        let found = sqlx::query("SELECT 1 FROM webhooks WHERE id = $1 AND owner_scope = $2")
            .bind(crate::lookup_id(webhook_id))
            .bind(scope.to_string())
            .fetch_optional(&self.pool)
            .await?;
        found.map(|_| ()).ok_or(Error::not_found("webhook"))
    }
}
