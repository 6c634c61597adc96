//! Grant allowances: per owner scope, the queues an operator allows that scope's agents to
//! grant when they create a webhook over the API (issue 18 item 9; BASE: grants are set by
//! operators and agents never widen them). Operators set, show and clear them with
//! `switchboard admin scope …`; only [`Store::create_webhook_within_allowance`] consults
//! them. A scope without an allowance may create no webhook over the API (closed by default).
//!
//! Migration 0006 seeded every scope that had webhooks with the union of their grants, so a
//! database written before allowances existed keeps working as it did.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::acts::{AuditRecord, OperatorAction};
use crate::error::{Error, Result};
use crate::scope::OwnerScope;
use crate::tenancy::owner_exists;
use crate::{Backend, Store, dialect, parse_col};

/// The queues a scope's agents may grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantAllowance {
    pub owner_scope: OwnerScope,
    /// Sorted, each once.
    pub queues: Vec<String>,
    pub updated_at: i64,
}

/// A queue name: 1–64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit.
pub fn is_queue_name(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// Checks a list of queues as grants and grant allowances name them: at least one (`empty`
/// says why when there is none), each a queue name ([`is_queue_name`]), none twice. `field`
/// names the argument in the error.
pub(crate) fn check_queues(field: &'static str, queues: &[String], empty: &str) -> Result<()> {
    if queues.is_empty() {
        return Err(Error::invalid(field, empty));
    }
    for (i, q) in queues.iter().enumerate() {
        if !is_queue_name(q) {
            return Err(Error::invalid(field, format!("{q:?} is not a queue name")));
        }
        if queues[..i].contains(q) {
            return Err(Error::invalid(field, format!("{q:?} is named twice")));
        }
    }
    Ok(())
}

/// Checks a grant against an allowance: `Err` with the grant's queues the allowance does
/// not hold, in grant order. The one definition of "within the allowance".
pub fn within_allowance(grant: &[String], allowance: &[String]) -> Result<(), Vec<String>> {
    let outside: Vec<String> = grant
        .iter()
        .filter(|q| !allowance.contains(q))
        .cloned()
        .collect();
    if outside.is_empty() {
        Ok(())
    } else {
        Err(outside)
    }
}

fn allowance(row: &AnyRow) -> Result<GrantAllowance> {
    let queues: String = row.try_get("queues")?;
    let mut queues: Vec<String> = serde_json::from_str(&queues)?;
    queues.sort();
    Ok(GrantAllowance {
        owner_scope: parse_col(row, "owner_scope")?,
        queues,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The scope's allowed queues, the row locked until the transaction ends, so the allowance
/// cannot be cleared or narrowed between the check and the insert it guards.
pub(super) async fn locked_allowance(
    conn: &mut sqlx::AnyConnection,
    backend: Backend,
    scope: &str,
) -> Result<Option<Vec<String>>> {
    let row = sqlx::query(dialect::for_update!(
        backend,
        "SELECT owner_scope, queues, updated_at FROM grant_allowances WHERE owner_scope = $1"
    ))
    .bind(scope)
    .fetch_optional(conn)
    .await?;
    Ok(row.as_ref().map(allowance).transpose()?.map(|a| a.queues))
}

impl Store {
    /// Replaces the queues `scope`'s agents may grant (an operator's act). Each must be a
    /// queue name, none twice, at least one (clear an allowance with
    /// [`Store::clear_grant_allowance`]); the human or team must exist. Existing webhooks keep
    /// their grants: the allowance gates only creating webhooks over the API.
    pub async fn set_grant_allowance(
        &self,
        scope: &OwnerScope,
        queues: &[String],
    ) -> Result<GrantAllowance> {
        check_queues(
            "queues",
            queues,
            "name at least one queue (to allow none, clear the allowance)",
        )?;
        let mut sorted = queues.to_vec();
        sorted.sort();
        let text = serde_json::to_string(&sorted)?;
        let mut tx = self.begin_write().await?;
        if !owner_exists(&mut tx, scope).await? {
            return Err(Error::invalid("owner_scope", "no such human or team"));
        }
        let row = sqlx::query(
            "INSERT INTO grant_allowances (owner_scope, queues, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (owner_scope) DO UPDATE SET queues = excluded.queues, updated_at = excluded.updated_at \
             RETURNING owner_scope, queues, updated_at",
        )
        .bind(scope.to_string())
        .bind(text.as_str())
        .bind(self.now())
        .fetch_one(&mut *tx)
        .await?;
        let set = allowance(&row)?;
        let record = AuditRecord::new(OperatorAction::SetGrantAllowance, scope.to_string())
            .with("queues", set.queues.join(","));
        self.record_act(&mut tx, Some(scope), record).await?;
        tx.commit().await?;
        Ok(set)
    }

    /// The queues `scope`'s agents may grant; `None` when an operator set none.
    pub async fn grant_allowance(&self, scope: &OwnerScope) -> Result<Option<GrantAllowance>> {
        let row = sqlx::query(
            "SELECT owner_scope, queues, updated_at FROM grant_allowances WHERE owner_scope = $1",
        )
        .bind(scope.to_string())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(allowance).transpose()
    }

    /// Removes `scope`'s allowance: its agents can create no webhook over the API from now
    /// on. Whether there was one to remove.
    pub async fn clear_grant_allowance(&self, scope: &OwnerScope) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM grant_allowances WHERE owner_scope = $1")
            .bind(scope.to_string())
            .execute(&mut *tx)
            .await?;
        let cleared = done.rows_affected() > 0;
        // Clearing what was not there changes nothing, and records nothing.
        if cleared {
            let record = AuditRecord::new(OperatorAction::ClearGrantAllowance, scope.to_string());
            self.record_act(&mut tx, Some(scope), record).await?;
        }
        tx.commit().await?;
        Ok(cleared)
    }

    /// Every allowance, by owner scope.
    pub async fn list_grant_allowances(&self) -> Result<Vec<GrantAllowance>> {
        let rows = sqlx::query(
            "SELECT owner_scope, queues, updated_at FROM grant_allowances ORDER BY owner_scope",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(allowance).collect()
    }

    /// Every allowance, by owner scope, one page at a time.
    pub async fn list_grant_allowances_page(
        &self,
        page: &crate::Page,
    ) -> Result<crate::Paged<GrantAllowance>> {
        let size = page.size()?;
        let after = page
            .opened(crate::Listing::GrantAllowances)?
            .unwrap_or_default();
        let rows = sqlx::query(
            "SELECT owner_scope, queues, updated_at FROM grant_allowances WHERE owner_scope > $1 \
             ORDER BY owner_scope LIMIT $2",
        )
        .bind(after)
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(allowance).collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |a| {
            crate::cursor(crate::Listing::GrantAllowances, &a.owner_scope.to_string())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names() {
        assert!(is_queue_name("forge"));
        assert!(is_queue_name("triage.high_2-x"));
        assert!(!is_queue_name(""));
        assert!(!is_queue_name("Forge"));
        assert!(!is_queue_name("-x"));
        assert!(!is_queue_name(&"q".repeat(65)));
    }

    fn queues(list: &[&str]) -> Vec<String> {
        list.iter().map(|q| q.to_string()).collect()
    }

    #[test]
    fn a_grant_is_within_an_allowance_that_holds_every_queue() {
        let allowed = queues(&["forge", "review", "triage"]);
        assert_eq!(
            within_allowance(&queues(&["review", "forge"]), &allowed),
            Ok(())
        );
        assert_eq!(
            within_allowance(&queues(&["pager", "forge", "audit"]), &allowed),
            Err(queues(&["pager", "audit"]))
        );
        assert_eq!(
            within_allowance(&queues(&["forge"]), &[]),
            Err(queues(&["forge"])),
            "no allowance allows nothing"
        );
    }
}
