//! Plans and their single-use tokens (SPEC-0031 REQ-3): the token is stored only as its
//! SHA-256 hex, bound to one webhook and owner scope, expires, and is consumed exactly once.

use sqlx::Row;
use sqlx::any::AnyRow;
use switchboard_model::Configuration;
use switchboard_model::plan::{StaleCause, StoredPlan};

use crate::dialect::WriteTx;
use crate::error::{Error, Result};
use crate::scope::OwnerScope;
use crate::secrets::{hashes_match, new_id, new_token, sha256_hex};
use crate::webhooks::configuration_text;
use crate::{Backend, Store, dialect, json_col, parse_col};

/// The prefix of every plan token.
pub const PLAN_TOKEN_PREFIX: &str = "sbp_";

/// A fresh plan token and the hash to store: the token goes to the caller, only the hash is kept.
pub fn new_plan_token() -> Result<(String, String)> {
    let token = new_token(PLAN_TOKEN_PREFIX)?;
    let hash = sha256_hex(&token);
    Ok((token, hash))
}

#[derive(Clone, Debug)]
pub struct NewPlan {
    pub webhook_id: String,
    pub owner_scope: OwnerScope,
    /// SHA-256 hex of the token handed to the caller (see [`crate::secrets::new_token`]).
    pub token_hash: String,
    pub pack_name: String,
    pub pack_version: String,
    pub params_digest: String,
    /// The configuration the confirm will save; its digest binds the token.
    pub candidate: Configuration,
    /// The configuration version the plan was made against; any save since makes it stale.
    pub base_config_version: i64,
    pub expires_at: i64,
    /// The plan report (REQ-5) as returned to the caller, and how to apply it.
    pub plan: StoredPlan,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub id: String,
    pub webhook_id: String,
    pub owner_scope: OwnerScope,
    pub pack_name: String,
    pub pack_version: String,
    pub params_digest: String,
    pub candidate: Configuration,
    pub candidate_digest: String,
    pub base_config_version: i64,
    pub plan: StoredPlan,
    pub created_at: i64,
    /// When the token stops confirming; a plan put before a person lives until the approval
    /// deadline instead.
    pub expires_at: i64,
    pub used_at: Option<i64>,
    /// The endpoint (and the human it acts for) whose confirm put the plan before a person.
    pub proposed_by_endpoint: Option<String>,
    pub proposed_by_human: Option<String>,
    pub pending_at: Option<i64>,
    pub approval_expires_at: Option<i64>,
    /// The person who accepted or rejected it.
    pub decided_by: Option<String>,
    pub rejected_at: Option<i64>,
    pub reject_reason: Option<String>,
    /// When its guard reverted the change it applied (issue 46).
    pub reverted_at: Option<i64>,
}

impl Plan {
    /// What is recorded of the plan, for its state (`switchboard_model::plan::PlanFacts`).
    pub fn facts(&self) -> switchboard_model::plan::PlanFacts {
        switchboard_model::plan::PlanFacts {
            expires_at: self.expires_at,
            used_at: self.used_at,
            rejected_at: self.rejected_at,
            pending_at: self.pending_at,
            approval_expires_at: self.approval_expires_at,
            base_config_version: self.base_config_version,
            reverted_at: self.reverted_at,
        }
    }
}

macro_rules! plan_columns {
    () => {
        "id, token_hash, webhook_id, owner_scope, pack_name, pack_version, params_digest, candidate, \
         candidate_digest, base_config_version, plan, created_at, expires_at, used_at, \
         proposed_by_endpoint, proposed_by_human, pending_at, approval_expires_at, decided_by, \
         rejected_at, reject_reason, reverted_at"
    };
}

fn plan(row: &AnyRow) -> Result<Plan> {
    Ok(Plan {
        id: row.try_get("id")?,
        webhook_id: row.try_get("webhook_id")?,
        owner_scope: parse_col(row, "owner_scope")?,
        pack_name: row.try_get("pack_name")?,
        pack_version: row.try_get("pack_version")?,
        params_digest: row.try_get("params_digest")?,
        candidate: json_col(row, "candidate")?,
        candidate_digest: row.try_get("candidate_digest")?,
        base_config_version: row.try_get("base_config_version")?,
        plan: json_col(row, "plan")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        used_at: row.try_get("used_at")?,
        proposed_by_endpoint: row.try_get("proposed_by_endpoint")?,
        proposed_by_human: row.try_get("proposed_by_human")?,
        pending_at: row.try_get("pending_at")?,
        approval_expires_at: row.try_get("approval_expires_at")?,
        decided_by: row.try_get("decided_by")?,
        rejected_at: row.try_get("rejected_at")?,
        reject_reason: row.try_get("reject_reason")?,
        reverted_at: row.try_get("reverted_at")?,
    })
}

/// The plan row for a token hash, if the scope owns it; the stored hash is compared in
/// constant time. Another scope's token is `not_found`, exactly like an unknown one.
fn owned_plan(row: Option<AnyRow>, token_hash: &str, scope: &OwnerScope) -> Result<Plan> {
    let Some(row) = row else {
        return Err(Error::not_found("plan"));
    };
    let stored: String = row.try_get("token_hash")?;
    let found = plan(&row)?;
    if !hashes_match(&stored, token_hash) || found.owner_scope != *scope {
        return Err(Error::not_found("plan"));
    }
    Ok(found)
}

/// Why a plan can no longer be applied at `now`, if it cannot: the model's one rule, judged
/// against the plan's own base version (the caller checks the webhook's version itself).
fn refused(plan: &Plan, now: i64) -> Option<StaleCause> {
    StaleCause::of(&plan.facts(), now, plan.base_config_version)
}

/// Marks the plan used inside `tx`, after locking its row: of any number of concurrent
/// consumers exactly one gets the plan; the others see it used and get `plan_stale`. A
/// rejected plan is stale too. `person` is the person accepting it, when one is.
pub(crate) async fn consume_plan_in(
    tx: &mut WriteTx,
    backend: Backend,
    token_hash: &str,
    scope: &OwnerScope,
    now: i64,
    person: Option<&str>,
) -> Result<Plan> {
    let row = sqlx::query(dialect::for_update!(
        backend,
        "SELECT ",
        plan_columns!(),
        " FROM plans WHERE token_hash = $1"
    ))
    .bind(token_hash)
    .fetch_optional(&mut **tx)
    .await?;
    let mut found = owned_plan(row, token_hash, scope)?;
    if let Some(cause) = refused(&found, now) {
        return Err(Error::stale(cause));
    }
    let done = sqlx::query(
        "UPDATE plans SET used_at = $1, decided_by = COALESCE($2, decided_by) \
         WHERE id = $3 AND used_at IS NULL AND rejected_at IS NULL",
    )
    .bind(now)
    .bind(person)
    .bind(found.id.as_str())
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() != 1 {
        return Err(Error::stale(StaleCause::Used));
    }
    found.used_at = Some(now);
    if let Some(person) = person {
        found.decided_by = Some(person.to_string());
    }
    Ok(found)
}

/// A plan (a rule pack's or a redrive's) is kept this long past its expiry, so a late confirm
/// still hears "expired" rather than "not found", and a person still sees in the inbox that a
/// plan lapsed; retention deletes it after.
pub const PLAN_GRACE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

impl Store {
    /// Stores a plan for a webhook the scope owns.
    pub async fn insert_plan(&self, new: NewPlan) -> Result<Plan> {
        let candidate = configuration_text(&new.candidate)?;
        let candidate_digest = new.candidate.digest();
        let plan_text = serde_json::to_string(&new.plan)?;
        let id = new_id("pl_")?;
        let _turn = self.write_turn().await?;
        let row = sqlx::query(concat!(
            "INSERT INTO plans (id, token_hash, webhook_id, owner_scope, pack_name, pack_version, params_digest, \
             candidate, candidate_digest, base_config_version, plan, created_at, expires_at) \
             SELECT $1, $2, id, owner_scope, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM webhooks \
             WHERE id = $12 AND owner_scope = $13 RETURNING ",
            plan_columns!()
        ))
        .bind(id.as_str())
        .bind(new.token_hash.as_str())
        .bind(new.pack_name.as_str())
        .bind(new.pack_version.as_str())
        .bind(new.params_digest.as_str())
        .bind(candidate.as_str())
        .bind(candidate_digest.as_str())
        .bind(new.base_config_version)
        .bind(plan_text.as_str())
        .bind(self.now())
        .bind(new.expires_at)
        .bind(new.webhook_id.as_str())
        .bind(new.owner_scope.to_string())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .next();
        row.as_ref()
            .map(plan)
            .unwrap_or(Err(Error::not_found("webhook")))
    }

    /// Reads a plan by token without consuming it, so a confirm can compare its arguments
    /// with the plan's first.
    pub async fn plan_by_token(&self, token_hash: &str, scope: &OwnerScope) -> Result<Plan> {
        let row = sqlx::query(concat!(
            "SELECT ",
            plan_columns!(),
            " FROM plans WHERE token_hash = $1"
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        owned_plan(row, token_hash, scope)
    }

    /// The stored token hash of plan `id`, for consuming it by id (a person's acceptance).
    /// Public: control's console accepts a plan by id (`rule_packs/confirm.rs`).
    pub async fn plan_token_hash(&self, id: &str) -> Result<String> {
        let row = sqlx::query("SELECT token_hash FROM plans WHERE id = $1")
            .bind(crate::lookup_id(id))
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => Ok(row.try_get("token_hash")?),
            None => Err(Error::not_found("plan")),
        }
    }

    /// Consumes a plan: `not_found` for an unknown or other-scope token, `plan_stale` for a used
    /// or expired one. To consume and save together, pass the token to `save_configuration`.
    pub async fn consume_plan(&self, token_hash: &str, scope: &OwnerScope) -> Result<Plan> {
        let mut tx = self.begin_write().await?;
        let consumed =
            consume_plan_in(&mut tx, self.backend, token_hash, scope, self.now(), None).await?;
        tx.commit().await?;
        Ok(consumed)
    }

    /// Puts a plan before a person (issue 20): an endpoint confirmed it on a webhook whose
    /// policy is `person`. The plan now lives until `until` (the approval deadline) instead of
    /// its token's TTL. Confirming again changes nothing: the first proposal stands. A used,
    /// rejected or expired plan is `plan_stale`.
    pub async fn mark_plan_pending(
        &self,
        token_hash: &str,
        scope: &OwnerScope,
        proposer: &crate::Actor,
        until: i64,
    ) -> Result<Plan> {
        let now = self.now();
        let _turn = self.write_turn().await?;
        let row = sqlx::query(concat!(
            "UPDATE plans SET pending_at = COALESCE(pending_at, $1), \
             approval_expires_at = COALESCE(approval_expires_at, $2), \
             expires_at = COALESCE(approval_expires_at, $2), \
             proposed_by_endpoint = COALESCE(proposed_by_endpoint, $3), \
             proposed_by_human = COALESCE(proposed_by_human, $4) \
             WHERE token_hash = $5 AND owner_scope = $6 AND used_at IS NULL AND rejected_at IS NULL \
             AND expires_at > $1 RETURNING ",
            plan_columns!()
        ))
        .bind(now)
        .bind(until)
        .bind(proposer.endpoint_id.as_deref())
        .bind(proposer.human_login.as_deref())
        .bind(token_hash)
        .bind(scope.to_string())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .next();
        match row {
            Some(row) => plan(&row),
            // Why not: read after the refusal, so the common path stays one statement.
            None => Err(match self.plan_by_token(token_hash, scope).await {
                Ok(found) => Error::stale(refused(&found, now).unwrap_or(StaleCause::Used)),
                Err(e) => e,
            }),
        }
    }

    /// A plan by its id, for a person: `not_found` unless its owner scope is one of `scopes`,
    /// the same answer as for an id that does not exist.
    pub async fn plan_for_person(&self, id: &str, scopes: &[OwnerScope]) -> Result<Plan> {
        let row = sqlx::query(concat!(
            "SELECT ",
            plan_columns!(),
            " FROM plans WHERE id = $1"
        ))
        .bind(crate::lookup_id(id))
        .fetch_optional(&self.pool)
        .await?;
        let found = row.as_ref().map(plan).transpose()?;
        found
            .filter(|p| scopes.contains(&p.owner_scope))
            .ok_or_else(|| Error::not_found("plan"))
    }

    /// The plans awaiting a person in any of `scopes`, newest proposal first: pending, not
    /// decided, not dismissed, and not past the approval deadline by more than [`PLAN_GRACE`]
    /// (a plan nobody decided in time stays listed, for a person to see it lapsed and dismiss
    /// it, until retention deletes it). Whether one is stale, expired or moved past is the
    /// caller's to tell from the plan's state.
    pub async fn pending_plans(&self, scopes: &[OwnerScope]) -> Result<Vec<Plan>> {
        let mut plans = Vec::new();
        let sql = if self.dismissals {
            concat!(
                "SELECT ",
                plan_columns!(),
                " FROM plans WHERE owner_scope = $1 AND pending_at IS NOT NULL \
                  AND used_at IS NULL AND rejected_at IS NULL AND expires_at > $2 \
                  AND dismissed_at IS NULL ORDER BY pending_at DESC, id LIMIT 200"
            )
        } else {
            concat!(
                "SELECT ",
                plan_columns!(),
                " FROM plans WHERE owner_scope = $1 AND pending_at IS NOT NULL \
                  AND used_at IS NULL AND rejected_at IS NULL AND expires_at > $2 \
                  ORDER BY pending_at DESC, id LIMIT 200"
            )
        };
        for scope in scopes {
            let rows = sqlx::query(sql)
                .bind(scope.to_string())
                .bind(self.now() - PLAN_GRACE.as_millis() as i64)
                .fetch_all(&self.pool)
                .await?;
            for row in &rows {
                plans.push(plan(row)?);
            }
        }
        plans.sort_by(|a, b| b.pending_at.cmp(&a.pending_at).then(a.id.cmp(&b.id)));
        Ok(plans)
    }

    /// A person dismisses a plan still awaiting a decision that can no longer be accepted (the
    /// caller has found it stale): it stays as it was, with who dismissed it and when, and
    /// [`Store::pending_plans`] lists it no more. `not_found` for another scope's plan, and for
    /// one already decided or dismissed.
    pub async fn dismiss_plan(&self, id: &str, scope: &OwnerScope, person: &str) -> Result<()> {
        let _turn = self.write_turn().await?;
        let done = sqlx::query(
            "UPDATE plans SET dismissed_at = $1, dismissed_by = $2 \
             WHERE id = $3 AND owner_scope = $4 AND pending_at IS NOT NULL AND used_at IS NULL \
             AND rejected_at IS NULL AND dismissed_at IS NULL",
        )
        .bind(self.now())
        .bind(person)
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("plan"));
        }
        Ok(())
    }

    /// A person rejects a plan awaiting them, saying why; it can never be applied after.
    /// `plan_stale` when it is no longer pending (used, rejected, or past its deadline).
    pub async fn reject_plan(
        &self,
        id: &str,
        scope: &OwnerScope,
        person: &str,
        reason: &str,
    ) -> Result<Plan> {
        let now = self.now();
        let _turn = self.write_turn().await?;
        let row = sqlx::query(concat!(
            "UPDATE plans SET rejected_at = $1, decided_by = $2, reject_reason = $3 \
             WHERE id = $4 AND owner_scope = $5 AND pending_at IS NOT NULL AND used_at IS NULL \
             AND rejected_at IS NULL AND expires_at > $1 RETURNING ",
            plan_columns!()
        ))
        .bind(now)
        .bind(person)
        .bind(reason)
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .next();
        match row {
            Some(row) => plan(&row),
            None => Err(match self.plan_in_scope(scope, id).await {
                Ok(found) => Error::stale(refused(&found, now).unwrap_or(StaleCause::NotPending)),
                Err(e) => e,
            }),
        }
    }

    /// Marks an applied plan as reverted by its guard (issue 46); its state reads `reverted`
    /// from then on. Marking one twice keeps the first time.
    pub async fn mark_plan_reverted(&self, id: &str) -> Result<()> {
        let now = self.now();
        let _turn = self.write_turn().await?;
        sqlx::query(
            "UPDATE plans SET reverted_at = $1 WHERE id = $2 AND used_at IS NOT NULL \
             AND reverted_at IS NULL",
        )
        .bind(now)
        .bind(crate::lookup_id(id))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A plan by id within one scope (a guard's plan): `not_found` otherwise.
    pub async fn plan_in_scope(&self, scope: &OwnerScope, id: &str) -> Result<Plan> {
        self.plan_for_person(id, std::slice::from_ref(scope)).await
    }

    /// Deletes plans that expired before `before` (ms), used or not; returns how many.
    pub async fn purge_expired_plans(&self, before: i64) -> Result<u64> {
        self.purge_plans_expired_before(before, u32::MAX).await
    }

    /// Deletes up to `batch` of the plans that expired before `before` (ms), used or not (a
    /// used plan expires like any other); returns how many.
    pub async fn purge_plans_expired_before(&self, before: i64, batch: u32) -> Result<u64> {
        let _turn = self.write_turn().await?;
        let done = sqlx::query(
            "DELETE FROM plans WHERE id IN \
             (SELECT id FROM plans WHERE expires_at < $1 ORDER BY expires_at, id LIMIT $2)",
        )
        .bind(before)
        .bind(i64::from(batch.max(1)))
        .execute(&self.pool)
        .await?;
        drop(_turn);
        if done.rows_affected() > 0 {
            self.purge_orphan_approvals().await?;
        }
        Ok(done.rows_affected())
    }
}
