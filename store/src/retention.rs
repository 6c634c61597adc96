//! Retention: stored events are kept for an age and a count per webhook, then purged in small
//! batches, oldest first. Never purged: an event not yet routed (a deferred or unrouted
//! delivery is not lost to retention) and an event an open todo points at (the todo's
//! worker still reads it). An event's completed todos go with it.

use std::time::Duration;

use sqlx::Row;

use crate::Store;
use crate::error::Result;

/// How long and how many events a webhook keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Events received longer ago than this are purged.
    pub max_age: Duration,
    /// Past this many events, a webhook's oldest are purged.
    pub max_events_per_webhook: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(30 * 24 * 3600),
            max_events_per_webhook: 100_000,
        }
    }
}

impl Retention {
    /// The oldest `received_at` (ms) kept at `now_ms`.
    pub fn kept_since(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(i64::try_from(self.max_age.as_millis()).unwrap_or(i64::MAX))
    }
}

/// What a webhook's stored events cover now: the bounds, where the age bound stands, and its
/// oldest event. What replays and listings tell a caller about the window that remains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub retention: Retention,
    /// Events received before this (ms) are past the age bound.
    pub kept_since_ms: i64,
    /// The webhook's oldest stored event (ms), if it has any.
    pub oldest_event_at_ms: Option<i64>,
}

/// What a purge may take (of `events e`): routed, and no open todo needs it.
macro_rules! purgeable {
    () => {
        "e.routed = 1 AND NOT EXISTS \
         (SELECT 1 FROM todos t WHERE t.event_id = e.id AND t.completed_at IS NULL)"
    };
}

impl Store {
    /// Purges up to `batch` of the oldest purgeable events received before `before_ms`, across
    /// every webhook; returns how many.
    pub async fn purge_events_received_before(&self, before_ms: i64, batch: u32) -> Result<u64> {
        let _turn = self.write_turn().await?;
        let done = sqlx::query(concat!(
            "DELETE FROM events WHERE id IN (SELECT e.id FROM events e WHERE e.received_at < $1 AND ",
            purgeable!(),
            " ORDER BY e.received_at, e.id LIMIT $2)"
        ))
            .bind(before_ms)
            .bind(i64::from(batch.max(1)))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Folds what stored and deleted events changed since the last fold into each webhook's
    /// count (PostgreSQL, migration 0024: its triggers append changes rather than update a
    /// shared row); its cost follows the events stored and deleted since, not the table. On
    /// SQLite the triggers keep the counts themselves and there is nothing to fold.
    pub async fn fold_event_counts(&self) -> Result<()> {
        if !self.event_counts || self.backend != crate::Backend::Postgres {
            return Ok(());
        }
        // One statement: the deltas it deletes are exactly the ones it adds, in webhook order;
        // a webhook deleted since is not counted again.
        sqlx::query(
            "WITH folded AS (DELETE FROM event_count_deltas RETURNING webhook_id, delta) \
             INSERT INTO webhook_event_counts AS c (webhook_id, events) \
             SELECT f.webhook_id, SUM(f.delta) FROM folded f \
             WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.id = f.webhook_id) \
             GROUP BY f.webhook_id ORDER BY f.webhook_id \
             ON CONFLICT (webhook_id) DO UPDATE SET events = c.events + EXCLUDED.events",
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The webhooks holding more than `keep` events: read from the counts kept since
    /// migration 0024, one row per webhook, whatever the size of the events table; counted
    /// over every event only at an older schema.
    pub async fn webhooks_over_event_count(&self, keep: u64) -> Result<Vec<String>> {
        self.fold_event_counts().await?;
        let sql = if self.event_counts {
            "SELECT webhook_id FROM webhook_event_counts WHERE events > $1 ORDER BY webhook_id"
        } else {
            "SELECT webhook_id FROM events GROUP BY webhook_id HAVING COUNT(*) > $1 \
             ORDER BY webhook_id"
        };
        let rows = sqlx::query(sql)
            .bind(i64::try_from(keep).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<String, _>("webhook_id")?))
            .collect()
    }

    /// Purges up to `batch` of the oldest purgeable events of `webhook_id` that are not among
    /// its newest `keep`; returns how many.
    pub async fn purge_events_past_count(
        &self,
        webhook_id: &str,
        keep: u64,
        batch: u32,
    ) -> Result<u64> {
        // The newest event past the bound: it and everything older are over the count.
        let edge = sqlx::query(
            "SELECT received_at, id FROM events WHERE webhook_id = $1 \
             ORDER BY received_at DESC, id DESC LIMIT 1 OFFSET $2",
        )
        .bind(webhook_id)
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .fetch_optional(&self.pool)
        .await?;
        let Some(edge) = edge else {
            return Ok(0);
        };
        let (at, id): (i64, String) = (edge.try_get("received_at")?, edge.try_get("id")?);
        let _turn = self.write_turn().await?;
        let done = sqlx::query(concat!(
            "DELETE FROM events WHERE id IN (SELECT e.id FROM events e WHERE e.webhook_id = $1 \
             AND (e.received_at < $2 OR (e.received_at = $2 AND e.id <= $3)) AND ",
            purgeable!(),
            " ORDER BY e.received_at, e.id LIMIT $4)"
        ))
        .bind(webhook_id)
        .bind(at)
        .bind(id.as_str())
        .bind(i64::from(batch.max(1)))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// The window `retention` leaves `webhook_id` at the store's clock now.
    pub async fn retention_window(&self, retention: Retention, webhook_id: &str) -> Result<Window> {
        Ok(Window {
            retention,
            kept_since_ms: retention.kept_since(self.clock().now_ms()),
            oldest_event_at_ms: self.oldest_event_at(webhook_id).await?,
        })
    }

    /// When a webhook's oldest stored event was received (ms), if it has any: with the
    /// retention bounds, the window a replay or a listing can still see.
    pub async fn oldest_event_at(&self, webhook_id: &str) -> Result<Option<i64>> {
        let row = sqlx::query(
            "SELECT received_at FROM events WHERE webhook_id = $1 ORDER BY received_at, id LIMIT 1",
        )
        .bind(webhook_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get("received_at")).transpose()?)
    }
}
