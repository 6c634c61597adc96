//! Approvals of pending plans (issue 47): each person's acceptance, bound to the digest of
//! the plan they read. Counting them is `switchboard_model::approval::tally`'s; the store only
//! records (once per person and plan) and reads them back.

use sqlx::Row;
use switchboard_model::approval::Approval;
use switchboard_model::plan::StaleCause;

use crate::Store;
use crate::error::{Error, Result};
use crate::scope::OwnerScope;

impl Store {
    /// Records `person`'s approval of a pending plan, bound to `plan_digest`, and answers every
    /// approval the plan now has. Approving twice records once (the first stands). A plan that
    /// is no longer pending (applied, rejected, past its deadline) is `plan_stale`; another
    /// scope's is `not_found`.
    pub async fn record_approval(
        &self,
        plan_id: &str,
        scope: &OwnerScope,
        person: &str,
        plan_digest: &str,
    ) -> Result<Vec<Approval>> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "SELECT used_at, rejected_at, pending_at, expires_at FROM plans \
             WHERE id = $1 AND owner_scope = $2",
        )
        .bind(crate::lookup_id(plan_id))
        .bind(scope.to_string())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| Error::not_found("plan"))?;
        let used: Option<i64> = row.try_get("used_at")?;
        let rejected: Option<i64> = row.try_get("rejected_at")?;
        let pending: Option<i64> = row.try_get("pending_at")?;
        let expires: i64 = row.try_get("expires_at")?;
        let cause = if used.is_some() {
            Some(StaleCause::Used)
        } else if rejected.is_some() {
            Some(StaleCause::Rejected)
        } else if pending.is_none() {
            Some(StaleCause::NotPending)
        } else if expires <= now {
            Some(StaleCause::ApprovalExpired)
        } else {
            None
        };
        if let Some(cause) = cause {
            return Err(Error::stale(cause));
        }
        sqlx::query(
            "INSERT INTO plan_approvals (plan_id, person, plan_digest, approved_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (plan_id, person) DO NOTHING",
        )
        .bind(plan_id)
        .bind(person)
        .bind(plan_digest)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.plan_approvals(plan_id).await
    }

    /// Every approval recorded for a plan, in the order given (none on a database from
    /// before approvals).
    pub async fn plan_approvals(&self, plan_id: &str) -> Result<Vec<Approval>> {
        if !self.approvals {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT person, plan_digest, approved_at FROM plan_approvals WHERE plan_id = $1 \
             ORDER BY approved_at, person",
        )
        .bind(plan_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Approval {
                    person: row.try_get("person")?,
                    plan_digest: row.try_get("plan_digest")?,
                    at_ms: row.try_get("approved_at")?,
                })
            })
            .collect()
    }

    /// The approvals of every plan pending in `scopes` (what the inbox lists), by plan id:
    /// one query per scope rather than one per plan.
    pub async fn pending_approvals(
        &self,
        scopes: &[crate::OwnerScope],
    ) -> Result<std::collections::HashMap<String, Vec<Approval>>> {
        let mut by_plan: std::collections::HashMap<String, Vec<Approval>> = Default::default();
        if !self.approvals {
            return Ok(by_plan);
        }
        for scope in scopes {
            let rows = sqlx::query(
                "SELECT a.plan_id, a.person, a.plan_digest, a.approved_at FROM plan_approvals a \
                 JOIN plans p ON p.id = a.plan_id WHERE p.owner_scope = $1 \
                 AND p.pending_at IS NOT NULL AND p.used_at IS NULL AND p.rejected_at IS NULL \
                 AND p.expires_at > $2 ORDER BY a.approved_at, a.person",
            )
            .bind(scope.to_string())
            .bind(self.now())
            .fetch_all(&self.pool)
            .await?;
            for row in &rows {
                by_plan
                    .entry(row.try_get("plan_id")?)
                    .or_default()
                    .push(Approval {
                        person: row.try_get("person")?,
                        plan_digest: row.try_get("plan_digest")?,
                        at_ms: row.try_get("approved_at")?,
                    });
            }
        }
        Ok(by_plan)
    }

    /// Deletes the approvals of plans that are gone (purged by retention).
    pub(crate) async fn purge_orphan_approvals(&self) -> Result<u64> {
        if !self.approvals {
            return Ok(0);
        }
        let _turn = self.write_turn().await?;
        let done =
            sqlx::query("DELETE FROM plan_approvals WHERE plan_id NOT IN (SELECT id FROM plans)")
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected())
    }
}
