//! The replay lease: at most one replay per webhook at a time across every control replica.
//! It lives in the database, and it expires, so a replica that crashed mid-replay does not
//! hold it forever.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::{Store, duration_ms};

impl Store {
    /// Takes the webhook's replay lease for `holder` for `ttl`, if it is free, expired, or
    /// already `holder`'s (which renews it). One statement, so two racing replicas cannot
    /// both win.
    pub async fn try_acquire_replay_lease(
        &self,
        webhook_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool> {
        if ttl.is_zero() {
            return Err(Error::invalid("ttl", "must be positive"));
        }
        let now = self.now();
        let _turn = self.write_turn().await?;
        let done = sqlx::query(
            "INSERT INTO replay_leases (webhook_id, holder, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (webhook_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE replay_leases.expires_at <= $4 OR replay_leases.holder = excluded.holder",
        )
        .bind(crate::lookup_id(webhook_id))
        .bind(holder)
        .bind(now.saturating_add(duration_ms(ttl)))
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::ForeignKeyViolation => {
                Error::not_found("webhook")
            }
            _ => e.into(),
        })?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives the lease back; only its holder can. Returns whether it was held.
    pub async fn release_replay_lease(&self, webhook_id: &str, holder: &str) -> Result<bool> {
        let _turn = self.write_turn().await?;
        let done = sqlx::query("DELETE FROM replay_leases WHERE webhook_id = $1 AND holder = $2")
            .bind(crate::lookup_id(webhook_id))
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}
