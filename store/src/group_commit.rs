//! Group commit (issue 22): ingest's writes — an event stored with its decision and todo, or
//! (when routing is late or no router answers) the event and later its decision — from many
//! concurrent deliveries share one transaction and one commit.
//!
//! Why: every delivery used to pay for two write transactions of its own (on PostgreSQL, two
//! fsyncs; on SQLite, two turns at the one write lock and two WAL appends). One committer task
//! per store takes the writes that queued while its previous commit ran, applies them in
//! arrival order in one transaction — a few multi-row statements for the whole batch
//! (`multi_row`), not a few per write — commits, and only then answers each caller: an answer
//! still means the write is durable. The batching clocks itself: with one sender a batch is
//! one write and adds no wait; under load a batch holds what arrived during one commit, up to
//! [`Bounds`]. Nothing waits on a timer.
//!
//! A write refused on its own (its webhook or event gone, its event routed already) writes
//! nothing and the rest of its batch commits. A batch that fails as a whole (a failed
//! statement, a failed commit) is rolled back and each of
//! its writes is applied again alone, in its own transaction, so one bad write never costs the
//! others their answer. Writes are idempotent across that retry: the event id and arrival time
//! are chosen before the first try, the decision is an UPDATE of that event, the todo is the
//! once-key insert.
//!
//! A rate-limit grant (`rate_limits`: a webhook's first delivery of a window asks the database
//! for a block of hits) is a write of the same kind: with thousands of webhooks most
//! deliveries are a window's first, and a grant of its own per delivery cost as much as the
//! delivery's write. A grant is not idempotent: a batch rolled back and retried alone grants
//! once, but a commit that failed to answer after it held would grant again when retried.
//! That spends a block more of the budget, so it can refuse early, never let more through.
//!
//! On PostgreSQL a batch of events alone (ingest's, when its router answered in time) skips the
//! transaction: one statement writes the events and their todos and commits by itself
//! (`events::insert_events_at_once`), on a connection the committer keeps between batches —
//! one round trip per batch instead of five.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool};
use tokio::sync::{mpsc, oneshot};

use crate::dialect::{self, Backend, WriteTurns, WriteTx};
use crate::error::{Error, Result};
use crate::events::{
    DecisionRow, DraftEvent, EventRow, RecordDecision, insert_events_at_once, insert_events_in,
    record_decisions_in,
};
use crate::rate_limits::{Grant, grant_in};
use crate::todos::TodoInsert;
use crate::{Event, Store};

/// How much one batch may hold. A batch ends at whichever bound comes first, so one webhook's
/// big bodies cannot hold another's small deliveries in a long transaction: a write that would
/// take the batch over `max_bytes` waits for the next one (a write bigger than the bound goes
/// alone). `max_writes` of 1 turns group commit off: each write is its own transaction, in
/// its caller's task, as before issue 22 (the benchmark's single-row baseline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_writes: usize,
    pub max_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_writes: 64,
            max_bytes: 4 * 1024 * 1024,
        }
    }
}

/// The writes that share a commit, as the store offers them.
impl Store {
    /// Stores a drafted delivery, durably: unrouted, or with `decided` already recorded on it
    /// and the todo it makes — one write, all of it or none. Shares a commit with other
    /// deliveries' writes (`group_commit`) and answers once that commit holds it.
    pub async fn store_event(
        &self,
        draft: DraftEvent,
        decided: Option<RecordDecision>,
    ) -> Result<(Event, Option<TodoInsert>)> {
        if let Some(RecordDecision { todo: Some(t), .. }) = &decided
            && t.queue.is_empty()
        {
            return Err(Error::invalid("queue", "must not be empty"));
        }
        self.group_commit
            .submit(&self.pool, self.backend, &self.write_turns, |reply| {
                Write::Event {
                    draft,
                    decided,
                    reply,
                }
            })
            .await
    }

    /// Records the routing decision on an event and, for a queue decision, creates its todo,
    /// in one transaction: either both are stored or neither, so a crash leaves the event
    /// unrouted and it is routed again (the once-key keeps that from doubling the todo). The
    /// transaction is shared with other deliveries' writes (`group_commit`).
    pub async fn record_decision(
        &self,
        event_id: &str,
        outcome: RecordDecision,
    ) -> Result<Option<TodoInsert>> {
        let now = self.now();
        let event_id = event_id.to_string();
        self.group_commit
            .submit(&self.pool, self.backend, &self.write_turns, |reply| {
                Write::Decision {
                    event_id,
                    outcome,
                    now,
                    reply,
                }
            })
            .await
    }

    /// Writes a rate-limit grant and answers the hits it granted, once committed
    /// ([`Store::try_take_held`]).
    pub(crate) async fn grant(&self, grant: Grant) -> Result<i64> {
        self.group_commit
            .submit(&self.pool, self.backend, &self.write_turns, |reply| {
                Write::Grant { grant, reply }
            })
            .await
    }
}

/// One write waiting for its commit, and where its answer goes.
pub(crate) enum Write {
    /// A delivery, stored unrouted or with its decision (and todo) already made.
    Event {
        draft: DraftEvent,
        decided: Option<RecordDecision>,
        reply: oneshot::Sender<Result<(Event, Option<TodoInsert>)>>,
    },
    Decision {
        event_id: String,
        outcome: RecordDecision,
        now: i64,
        reply: oneshot::Sender<Result<Option<TodoInsert>>>,
    },
    /// A block of a budget's hits, answered with how many were granted.
    Grant {
        grant: Grant,
        reply: oneshot::Sender<Result<i64>>,
    },
}

/// What a write came to, before its answer is sent.
// One per write, held only between its commit and its answer: boxing would cost an
// allocation per write to save bytes nobody keeps.
#[allow(clippy::large_enum_variant)]
enum Done {
    Event(Result<(Event, Option<TodoInsert>)>),
    Decision(Result<Option<TodoInsert>>),
    Grant(Result<i64>),
}

impl Done {
    fn is_err(&self) -> bool {
        match self {
            Done::Event(r) => r.is_err(),
            Done::Decision(r) => r.is_err(),
            Done::Grant(r) => r.is_err(),
        }
    }
}

impl Write {
    /// The bytes it writes, as far as batching cares: the body of an event.
    fn weight(&self) -> usize {
        match self {
            Write::Event { draft, .. } => draft.new.body.len(),
            Write::Decision { .. } | Write::Grant { .. } => 0,
        }
    }

    fn answer(self, done: Done) {
        // A caller that stopped waiting (its client hung up) finds its write committed all
        // the same: the event is stored and the retry task routes it.
        match (self, done) {
            (Write::Event { reply, .. }, Done::Event(r)) => {
                let _ = reply.send(r);
            }
            (Write::Decision { reply, .. }, Done::Decision(r)) => {
                let _ = reply.send(r);
            }
            (Write::Grant { reply, .. }, Done::Grant(r)) => {
                let _ = reply.send(r);
            }
            (write, _) => write.fail(Error::internal("group commit: answer of the wrong kind")),
        }
    }

    fn fail(self, error: Error) {
        let done = self.failed(error);
        self.answer(done);
    }
}

/// Takes writes from `queue` for one batch: `first`, then whatever is already waiting, up to
/// `bounds`. A write that does not fit is returned to start the next batch. Pure apart from
/// the non-blocking reads, so the bounds are tested without a database.
pub(crate) fn gather<T>(
    first: T,
    weight: impl Fn(&T) -> usize,
    mut next: impl FnMut() -> Option<T>,
    bounds: Bounds,
) -> (Vec<T>, Option<T>) {
    let mut bytes = weight(&first);
    let mut batch = vec![first];
    while batch.len() < bounds.max_writes {
        let Some(write) = next() else { break };
        let w = weight(&write);
        if bytes.saturating_add(w) > bounds.max_bytes {
            return (batch, Some(write));
        }
        bytes += w;
        batch.push(write);
    }
    (batch, None)
}

/// The committer's side: what it needs to write, and nothing of the `Store` (which holds the
/// sender), so the task ends when the last `Store` clone is dropped.
struct Committer {
    pool: AnyPool,
    backend: Backend,
    turns: WriteTurns,
    bounds: Bounds,
    tally: Arc<Tally>,
    /// PostgreSQL: batches of events alone go in one statement (`in_one_statement`).
    one_statement: bool,
    /// PostgreSQL: the connection this committer writes batches of events on with one
    /// statement each, kept from one batch to the next (no pool checkout and ping per batch).
    /// Closed after any failure on it, and let go when the pool closes.
    held: Option<PoolConnection<Any>>,
}

/// What a committer waited for.
enum Next {
    Batch(Vec<Write>),
    /// Every `Store` is gone: nothing more will come.
    Ended,
    /// The pool is closing: let go of the connection held.
    Closing,
}

/// The writes waiting, shared by the committers, and the one a batch left for the next.
struct Intake {
    queue: mpsc::UnboundedReceiver<Write>,
    carried: Option<Write>,
}

/// Writes and the commits that held them, since the store opened: how much batching there is.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    commits: AtomicU64,
    writes: AtomicU64,
    grants: AtomicU64,
}

impl Tally {
    /// Counts `batch`'s writes as answered: deliveries' writes and grants apart.
    fn answered(&self, batch: &[Write]) {
        let grants = grants_in(batch);
        self.grants.fetch_add(grants as u64, Ordering::Relaxed);
        self.writes
            .fetch_add((batch.len() - grants) as u64, Ordering::Relaxed);
    }

    /// Counts one commit of `batch`, and its deliveries' writes in the metric (which shows
    /// how deliveries batch; a commit of grants alone is not one).
    fn committed(&self, batch: &[Write]) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        let writes = batch.len() - grants_in(batch);
        if writes > 0 {
            switchboard_telemetry::metrics().group_commit(writes);
        }
    }
}

fn grants_in(batch: &[Write]) -> usize {
    batch
        .iter()
        .filter(|w| matches!(w, Write::Grant { .. }))
        .count()
}

/// [`Tally`] read at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCommitTally {
    /// Transactions committed (a batch, or one write of a failed batch applied alone), those
    /// that held only grants included.
    pub commits: u64,
    /// Deliveries' writes answered (an event stored, a decision recorded).
    pub writes: u64,
    /// Rate-limit grants answered (`rate_limits`): a webhook's first delivery of a window.
    pub grants: u64,
}

impl Committer {
    /// Takes a batch while no other committer is taking one, then commits it while the next
    /// committer takes the next: PostgreSQL's commits (each an fsync) overlap; SQLite's one
    /// committer gathers while nothing else can write anyway.
    async fn run(mut self, intake: Arc<tokio::sync::Mutex<Intake>>) {
        loop {
            let bounds = self.bounds;
            let next = async {
                let mut intake = intake.lock().await;
                let first = match intake.carried.take() {
                    Some(w) => w,
                    None => match intake.queue.recv().await {
                        Some(w) => w,
                        None => return Next::Ended,
                    },
                };
                let queue = &mut intake.queue;
                let (batch, rest) = gather(first, Write::weight, || queue.try_recv().ok(), bounds);
                intake.carried = rest;
                Next::Batch(batch)
            };
            // Both waits are cancel-safe: a write is taken from the queue only once nothing
            // else can stop the gathering.
            let next = if self.held.is_some() {
                let closing = self.pool.close_event();
                tokio::select! {
                    biased;
                    () = closing => Next::Closing,
                    next = next => next,
                }
            } else {
                next.await
            };
            let batch = match next {
                Next::Batch(batch) => batch,
                Next::Ended => return,
                Next::Closing => {
                    self.held = None;
                    continue;
                }
            };
            self.tally.answered(&batch);
            self.commit(batch).await;
        }
    }

    /// One statement or one transaction for the whole batch; if anything in it fails, each
    /// write alone.
    async fn commit(&mut self, batch: Vec<Write>) {
        let written = if self.in_one_statement(&batch) {
            Some(self.at_once(&batch).await)
        } else if batch.len() > 1 {
            Some(self.together(&batch).await)
        } else {
            None
        };
        if let Some(written) = written {
            match written {
                Ok(results) => {
                    for (write, done) in batch.into_iter().zip(results) {
                        write.answer(done);
                    }
                    return;
                }
                Err(e) => tracing::warn!(
                    error = %e.log_text(),
                    writes = batch.len(),
                    "group commit: the batch failed; applying its writes one by one"
                ),
            }
        }
        for write in batch {
            let done = alone(&self.pool, self.backend, &self.turns, &write).await;
            if !done.is_err() {
                self.tally.committed(std::slice::from_ref(&write));
            }
            write.answer(done);
        }
    }

    // `&mut`: the committer holds a connection, which is `Send` but not `Sync`.
    async fn together(&mut self, batch: &[Write]) -> Result<Vec<Done>> {
        let mut tx = dialect::begin_write(&self.pool, self.backend, &self.turns).await?;
        // A write refused on its own (its webhook or event gone, its event routed already)
        // wrote nothing, and the others commit without it; a failed statement drops the
        // transaction, which rolls it back.
        let results = apply(&mut tx, batch).await?;
        tx.commit().await?;
        self.tally.committed(batch);
        Ok(results)
    }

    /// A batch of events alone, on PostgreSQL, goes in one statement that commits by itself
    /// (`insert_events_at_once`): what ingest writes when its router answers in time. A batch
    /// longer than one statement's run (`--group-commit-writes` over 64) takes the transaction.
    fn in_one_statement(&self, batch: &[Write]) -> bool {
        self.one_statement
            && batch.len() <= crate::multi_row::MAX_RUN
            && batch.iter().all(|w| matches!(w, Write::Event { .. }))
    }

    async fn at_once(&mut self, batch: &[Write]) -> Result<Vec<Done>> {
        let mut conn = match self.held.take() {
            Some(conn) => conn,
            None => self.pool.acquire().await?,
        };
        let rows: Vec<EventRow<'_>> = batch
            .iter()
            .filter_map(|write| match write {
                Write::Event { draft, decided, .. } => Some(EventRow {
                    draft,
                    decided: decided.as_ref(),
                }),
                Write::Decision { .. } | Write::Grant { .. } => None,
            })
            .collect();
        match insert_events_at_once(&mut conn, &rows).await {
            Ok(stored) => {
                self.held = Some(conn);
                self.tally.committed(batch);
                Ok(stored.into_iter().map(Done::Event).collect())
            }
            Err(e) => {
                // Whatever failed, the next batch starts on a connection the pool has checked.
                conn.close_on_drop();
                Err(e)
            }
        }
    }
}

/// Applies `writes` in `tx` with a few statements for all of them (`multi_row`): the events
/// in one run of inserts, the decisions with their todos in another. Each write's own outcome
/// comes back in its place; `Err` is a statement that failed, and the transaction with it.
async fn apply(tx: &mut WriteTx, writes: &[Write]) -> Result<Vec<Done>> {
    let mut events = Vec::new();
    let mut decisions = Vec::new();
    let mut grants = Vec::new();
    for write in writes {
        match write {
            Write::Event { draft, decided, .. } => events.push(EventRow {
                draft,
                decided: decided.as_ref(),
            }),
            Write::Decision {
                event_id,
                outcome,
                now,
                ..
            } => decisions.push(DecisionRow {
                event_id,
                outcome,
                now: *now,
            }),
            Write::Grant { grant, .. } => grants.push(grant),
        }
    }
    // A statement each: a batch holds a few grants at most (one per webhook starting a
    // window). In the order of their rows, so two replicas' batches lock them in one order
    // and never deadlock each other on PostgreSQL.
    let mut order: Vec<usize> = (0..grants.len()).collect();
    order.sort_by(|&a, &b| {
        (&grants[a].subject, &grants[a].kind).cmp(&(&grants[b].subject, &grants[b].kind))
    });
    let mut granted = vec![0; grants.len()];
    for i in order {
        granted[i] = grant_in(tx, grants[i]).await?;
    }
    let mut granted = granted.into_iter();
    let mut events = insert_events_in(tx, &events).await?.into_iter();
    let mut decisions = record_decisions_in(tx, &decisions).await?.into_iter();
    let mut out = Vec::with_capacity(writes.len());
    for write in writes {
        let done = match write {
            Write::Event { .. } => events.next().map(Done::Event),
            Write::Decision { .. } => decisions.next().map(Done::Decision),
            Write::Grant { .. } => granted.next().map(|g| Done::Grant(Ok(g))),
        };
        out.push(done.unwrap_or_else(|| write.failed(Error::internal("a write was not answered"))));
    }
    Ok(out)
}

/// One write in a transaction of its own: a failed batch's writes, or every write when group
/// commit is off.
async fn alone(pool: &AnyPool, backend: Backend, turns: &WriteTurns, write: &Write) -> Done {
    let mut tx = match dialect::begin_write(pool, backend, turns).await {
        Ok(tx) => tx,
        Err(e) => return write.failed(e),
    };
    let done = match apply(&mut tx, std::slice::from_ref(write)).await {
        Ok(mut done) => done
            .pop()
            .unwrap_or_else(|| write.failed(Error::internal("the write was not answered"))),
        Err(e) => return write.failed(e),
    };
    if done.is_err() {
        return done;
    }
    match tx.commit().await {
        Ok(()) => done,
        Err(e) => write.failed(e),
    }
}

impl Write {
    fn failed(&self, error: Error) -> Done {
        match self {
            Write::Event { .. } => Done::Event(Err(error)),
            Write::Decision { .. } => Done::Decision(Err(error)),
            Write::Grant { .. } => Done::Grant(Err(error)),
        }
    }
}

/// The store's handle on its committer, started at the first write (inside the runtime that
/// makes it) and shared by every clone of the store.
#[derive(Clone, Default)]
pub(crate) struct GroupCommit {
    queue: Arc<Mutex<Option<mpsc::UnboundedSender<Write>>>>,
    bounds: Bounds,
    committers: usize,
    /// PostgreSQL: a batch of events alone is written with one statement.
    one_statement: bool,
    tally: Arc<Tally>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("bounds", &self.bounds)
            .field("committers", &self.committers)
            .field("one_statement", &self.one_statement)
            .finish()
    }
}

impl GroupCommit {
    /// `committers` batches may be committing at once: one on SQLite (one writer at a time
    /// is all it has), a few on PostgreSQL (rows are locked, not the database, and a commit's
    /// fsync is worth overlapping with gathering and writing the next batch).
    pub(crate) fn new(bounds: Bounds, committers: usize, one_statement: bool) -> GroupCommit {
        GroupCommit {
            queue: Arc::default(),
            bounds,
            committers: committers.max(1),
            one_statement,
            tally: Arc::default(),
        }
    }

    pub(crate) fn tally(&self) -> GroupCommitTally {
        GroupCommitTally {
            commits: self.tally.commits.load(Ordering::Relaxed),
            writes: self.tally.writes.load(Ordering::Relaxed),
            grants: self.tally.grants.load(Ordering::Relaxed),
        }
    }

    /// Queues `write` for the next batch and waits for its commit. The queue is unbounded on
    /// purpose: every write in it has a caller waiting, so its length is bounded by the
    /// requests in flight, which ingest already limits.
    pub(crate) async fn submit<T>(
        &self,
        pool: &AnyPool,
        backend: Backend,
        turns: &WriteTurns,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Write,
    ) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        let write = make(reply);
        if self.bounds.max_writes <= 1 {
            // Off: each write in a transaction of its own, in the caller's task.
            let done = alone(pool, backend, turns, &write).await;
            if !done.is_err() {
                self.tally.committed(std::slice::from_ref(&write));
            }
            self.tally.answered(std::slice::from_ref(&write));
            write.answer(done);
            return answer
                .await
                .map_err(|_| Error::internal("group commit: no answer"))?;
        }
        let sent = {
            let mut queue = self
                .queue
                .lock()
                .map_err(|_| Error::internal("group commit: queue lock poisoned"))?;
            let sender = match queue.as_ref() {
                Some(s) if !s.is_closed() => s.clone(),
                // First write, or the runtime that ran the committer is gone (a test's):
                // start one here.
                _ => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let intake = Arc::new(tokio::sync::Mutex::new(Intake {
                        queue: rx,
                        carried: None,
                    }));
                    for _ in 0..self.committers {
                        let committer = Committer {
                            pool: pool.clone(),
                            backend,
                            turns: turns.clone(),
                            bounds: self.bounds,
                            tally: Arc::clone(&self.tally),
                            one_statement: self.one_statement,
                            held: None,
                        };
                        tokio::spawn(committer.run(Arc::clone(&intake)));
                    }
                    *queue = Some(tx.clone());
                    tx
                }
            };
            sender.send(write)
        };
        if let Err(mpsc::error::SendError(write)) = sent {
            write.fail(Error::internal("group commit: the committer stopped"));
        }
        answer
            .await
            .map_err(|_| Error::internal("group commit: the committer stopped before answering"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(weights: &[usize], bounds: Bounds) -> Vec<Vec<usize>> {
        let mut queue: std::collections::VecDeque<usize> = weights.iter().copied().collect();
        let mut batches = Vec::new();
        let mut carried = None;
        loop {
            let first = match carried.take().or_else(|| queue.pop_front()) {
                Some(w) => w,
                None => return batches,
            };
            let (batch, rest) = gather(first, |w| *w, || queue.pop_front(), bounds);
            carried = rest;
            batches.push(batch);
        }
    }

    #[test]
    fn a_batch_takes_what_is_waiting_up_to_its_count() {
        let bounds = Bounds {
            max_writes: 3,
            max_bytes: 1000,
        };
        assert_eq!(
            run(&[1, 1, 1, 1, 1, 1, 1], bounds),
            vec![vec![1, 1, 1], vec![1, 1, 1], vec![1]]
        );
    }

    #[test]
    fn a_big_body_does_not_hold_small_deliveries_in_its_batch() {
        let bounds = Bounds {
            max_writes: 64,
            max_bytes: 100,
        };
        // Small writes queued before the big one commit without it; the big one goes alone
        // (it is over the bound by itself); the small ones after it start the next batch.
        assert_eq!(
            run(&[10, 10, 500, 10, 10, 90, 10], bounds),
            vec![vec![10, 10], vec![500], vec![10, 10], vec![90, 10]]
        );
    }

    #[test]
    fn one_write_alone_is_a_batch_of_one() {
        assert_eq!(run(&[7], Bounds::default()), vec![vec![7]]);
    }
}
