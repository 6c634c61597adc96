//! Rate limits kept in the database, so every control replica counts against the same
//! budget: fixed windows aligned to the epoch, one row per (subject, kind).
//!
//! A fixed window can let up to twice the limit through around a window boundary; in exchange
//! a take is one atomic statement on both backends. `try_take` holds no lock across round
//! trips; ingest's grant holds its row until its group commit commits.
//!
//! Ingest's per-webhook budget is taken in blocks ([`Store::try_take_held`]): one statement
//! grants up to a block of hits, which this process then spends from memory. So a delivery
//! costs a database write for its rate limit once per block instead of every time, and every
//! replica still counts against the one budget in the database. The grant is a write of
//! ingest's group commit (`group_commit`), so the grants of many webhooks starting a window at
//! once share a commit. The price: hits a replica holds when its window ends are not spent, so
//! with several replicas near a webhook's limit, up to one block per replica per window is
//! refused early. Never more than the limit is let through.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::{Store, duration_ms};

/// The replay limit of SPEC-0031: each endpoint may start at most 10 replays per minute.
pub const REPLAYS_PER_MINUTE: u32 = 10;

/// How many locks grants are spread over (by their (subject, kind)).
const GRANT_STRIPES: usize = 64;

/// Hits granted by the database and not yet spent, per (subject, kind), for one window.
#[derive(Debug)]
pub struct HeldHits {
    held: Mutex<HashMap<(String, String), Held>>,
    /// One grant at a time per (subject, kind): takers that find nothing held wait for the
    /// grant in flight and spend from it, instead of each asking for a block of their own
    /// (which would take the whole budget out of the database while most of it sat unspent
    /// here). Striped, not one lock: a webhook's first delivery of a window waits for its own
    /// grant, not for every other webhook's (with thousands of webhooks, most deliveries are
    /// a window's first).
    granting: Vec<tokio::sync::Mutex<()>>,
}

impl Default for HeldHits {
    fn default() -> Self {
        Self {
            held: Mutex::default(),
            granting: (0..GRANT_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        }
    }
}

#[derive(Debug)]
struct Held {
    window_start: i64,
    left: u64,
}

/// A fixed window, and where in it a take happens (all in epoch milliseconds).
struct WindowAt {
    now: i64,
    start: i64,
    length: i64,
}

impl WindowAt {
    /// The refusal: the budget is spent until this window ends.
    fn exhausted(&self) -> Error {
        exhausted_until(self.now, self.start + self.length)
    }
}

/// The refusal of a take at `now` whose budget frees up at `free_at` (epoch ms).
fn exhausted_until(now: i64, free_at: i64) -> Error {
    let left = (free_at - now).max(1);
    Error::ResourceExhausted {
        retry_after: Duration::from_millis(u64::try_from(left).unwrap_or(1)),
    }
}

/// How many hits one grant asks for: a twentieth of the limit, 1 to 32.
pub fn block_size(limit: u32) -> u32 {
    (limit / 20).clamp(1, 32)
}

/// A block of one budget's hits asked of the database: what [`grant_in`] writes.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) subject: String,
    pub(crate) kind: String,
    pub(crate) window_start: i64,
    pub(crate) block: i64,
    pub(crate) limit: i64,
}

/// Writes `grant` in `conn`'s transaction and answers how many hits it granted (0: the window's
/// budget is spent). Same window: up to a block more, never past the limit; a newer window
/// restarts at one block (`last_grant` is how many this statement granted; SET reads the old
/// row). A replica whose clock lags counts into the newer window it finds.
pub(crate) async fn grant_in(conn: &mut sqlx::AnyConnection, grant: &Grant) -> Result<i64> {
    let rows = sqlx::query(
        "INSERT INTO rate_limits (subject, kind, window_start, hits, last_grant) \
         VALUES ($1, $2, $3, $4, $4) \
         ON CONFLICT (subject, kind) DO UPDATE SET \
         hits = CASE WHEN rate_limits.window_start < excluded.window_start THEN $4 \
           WHEN rate_limits.hits + $4 > $5 THEN $5 ELSE rate_limits.hits + $4 END, \
         last_grant = CASE WHEN rate_limits.window_start < excluded.window_start THEN $4 \
           WHEN rate_limits.hits + $4 > $5 THEN $5 - rate_limits.hits ELSE $4 END, \
         window_start = CASE WHEN rate_limits.window_start < excluded.window_start \
           THEN excluded.window_start ELSE rate_limits.window_start END \
         WHERE rate_limits.window_start < excluded.window_start OR rate_limits.hits < $5 \
         RETURNING last_grant",
    )
    .bind(&grant.subject)
    .bind(&grant.kind)
    .bind(grant.window_start)
    .bind(grant.block)
    .bind(grant.limit)
    // Read to the end: SQLite's statement is finished before the transaction goes on.
    .fetch_all(conn)
    .await?;
    match rows.first() {
        Some(row) => Ok(sqlx::Row::try_get(row, 0)?),
        None => Ok(0),
    }
}

impl HeldHits {
    /// The lock a grant for `key` takes.
    fn granting(&self, key: &(String, String)) -> &tokio::sync::Mutex<()> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        let stripe = usize::try_from(hash % GRANT_STRIPES as u64).unwrap_or(0);
        &self.granting[stripe]
    }

    /// Spends one held hit of this window, if any is left.
    fn spend(&self, key: &(String, String), window_start: i64) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.get_mut(key) {
            Some(h) if h.window_start == window_start && h.left > 0 => {
                h.left -= 1;
                true
            }
            _ => false,
        }
    }

    /// Keeps `granted` new hits of this window (adding to any a concurrent grant left).
    fn keep(&self, key: (String, String), window_start: i64, granted: u64) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        // Other windows' leftovers are dead weight: drop them while the lock is held anyway.
        held.retain(|_, h| h.window_start >= window_start);
        let h = held.entry(key).or_insert(Held {
            window_start,
            left: 0,
        });
        if h.window_start != window_start {
            *h = Held {
                window_start,
                left: 0,
            };
        }
        h.left += granted;
    }
}

impl Store {
    /// Like [`Store::try_take`], spending hits this process already holds when it can, and
    /// otherwise taking a block of them from the database in one statement (module docs).
    pub async fn try_take_held(
        &self,
        subject: &str,
        kind: &str,
        limit: u32,
        window: Duration,
    ) -> Result<()> {
        let at = self.window_at(limit, window)?;
        let window_start = at.start;
        let key = (subject.to_string(), kind.to_string());
        if self.held_hits.spend(&key, window_start) {
            return Ok(());
        }
        let _granting = self.held_hits.granting(&key).lock().await;
        // A grant that finished while this one waited may have left hits to spend.
        if self.held_hits.spend(&key, window_start) {
            return Ok(());
        }
        let grant = Grant {
            subject: subject.to_string(),
            kind: kind.to_string(),
            window_start,
            block: i64::from(block_size(limit)),
            limit: i64::from(limit),
        };
        // In ingest's group commit: the first deliveries of a window to many webhooks share
        // one commit for their grants (and with other deliveries' writes), instead of a write
        // transaction each. Answered once committed: a grant is durable before it is spent.
        let granted = self.grant(grant).await?;
        if granted <= 0 {
            return Err(at.exhausted());
        }
        // One for this take; the rest are held for the next ones.
        self.held_hits
            .keep(key, window_start, u64::try_from(granted - 1).unwrap_or(0));
        Ok(())
    }

    /// Takes one unit of `subject`'s `kind` budget (`limit` per `window`), or answers
    /// `ResourceExhausted` with the time until the window ends. `subject` is usually an
    /// endpoint id (or a webhook id, for ingest); `kind` names the budget, e.g. `"replay"`.
    pub async fn try_take(
        &self,
        subject: &str,
        kind: &str,
        limit: u32,
        window: Duration,
    ) -> Result<()> {
        let at = self.window_at(limit, window)?;
        let window_start = at.start;
        // A row from an earlier window restarts at 1; a replica whose clock lags counts into
        // the newer window it finds instead of resetting it.
        let _turn = self.write_turn().await?;
        let done = sqlx::query(
            "INSERT INTO rate_limits (subject, kind, window_start, hits) VALUES ($1, $2, $3, 1) \
             ON CONFLICT (subject, kind) DO UPDATE SET \
             hits = CASE WHEN rate_limits.window_start < excluded.window_start THEN 1 ELSE rate_limits.hits + 1 END, \
             window_start = CASE WHEN rate_limits.window_start < excluded.window_start \
             THEN excluded.window_start ELSE rate_limits.window_start END \
             WHERE rate_limits.window_start < excluded.window_start OR rate_limits.hits < $4",
        )
        .bind(subject)
        .bind(kind)
        .bind(window_start)
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(at.exhausted())
        }
    }

    /// Takes one hit of `limit` per sliding `window`: refused while `limit` hits were taken
    /// within the last `window`, whenever they were (a fixed window lets twice the limit
    /// through around its boundary). Every replica counts against the same log: the take
    /// runs in one write transaction that locks the subject's `rate_limits` row first.
    pub async fn try_take_sliding(
        &self,
        subject: &str,
        kind: &str,
        limit: u32,
        window: Duration,
    ) -> Result<()> {
        let at = self.window_at(limit, window)?;
        let (now, length) = (at.now, at.length);
        let mut tx = self.begin_write().await?;
        // The lock anchor: one row per (subject, kind), locked until the commit.
        sqlx::query(
            "INSERT INTO rate_limits (subject, kind, window_start, hits) VALUES ($1, $2, 0, 0) \
             ON CONFLICT (subject, kind) DO NOTHING",
        )
        .bind(subject)
        .bind(kind)
        .execute(&mut *tx)
        .await?;
        sqlx::query(crate::dialect::for_update!(
            self.backend,
            "SELECT hits FROM rate_limits WHERE subject = $1 AND kind = $2"
        ))
        .bind(subject)
        .bind(kind)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM rate_limit_log WHERE subject = $1 AND kind = $2 AND at <= $3")
            .bind(subject)
            .bind(kind)
            .bind(now - length)
            .execute(&mut *tx)
            .await?;
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM rate_limit_log \
             WHERE subject = $1 AND kind = $2",
        )
        .bind(subject)
        .bind(kind)
        .fetch_one(&mut *tx)
        .await?;
        let taken: i64 = sqlx::Row::try_get(&row, "n")?;
        if taken >= i64::from(limit) {
            let oldest: Option<i64> = sqlx::Row::try_get(&row, "oldest")?;
            tx.commit().await?;
            return Err(exhausted_until(now, oldest.unwrap_or(now) + length));
        }
        sqlx::query("INSERT INTO rate_limit_log (subject, kind, at) VALUES ($1, $2, $3)")
            .bind(subject)
            .bind(kind)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The window `now` falls in, after checking the budget's shape.
    fn window_at(&self, limit: u32, window: Duration) -> Result<WindowAt> {
        if limit == 0 {
            return Err(Error::invalid("limit", "must be positive"));
        }
        let length = duration_ms(window);
        if length <= 0 {
            return Err(Error::invalid("window", "must be at least a millisecond"));
        }
        let now = self.now();
        Ok(WindowAt {
            now,
            start: now - now.rem_euclid(length),
            length,
        })
    }
}
