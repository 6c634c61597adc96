//! Rate limits kept in the database, so every control replica counts against the same
//! budget: fixed windows aligned to the epoch, one row per (subject, kind).
//!
//! A fixed window can let up to twice the limit through around a window boundary; in exchange
//! a take is one atomic statement on both backends, with no lock held across round trips.

use std::time::Duration;

use super::{Store, duration_ms};
use crate::error::{Error, Result};

/// The replay limit of SPEC-0031: each endpoint may start at most 10 replays per minute.
pub const REPLAYS_PER_MINUTE: u32 = 10;

impl Store {
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
        if limit == 0 {
            return Err(Error::invalid("limit", "must be positive"));
        }
        let window_ms = duration_ms(window);
        if window_ms <= 0 {
            return Err(Error::invalid("window", "must be at least a millisecond"));
        }
        let now = self.now();
        let window_start = now - now.rem_euclid(window_ms);
        // A row from an earlier window restarts at 1; a replica whose clock lags counts into
        // the newer window it finds instead of resetting it.
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
            let left = (window_start + window_ms - now).max(1);
            Err(Error::ResourceExhausted {
                retry_after: Duration::from_millis(u64::try_from(left).unwrap_or(1)),
            })
        }
    }
}
