//! Operator credentials and the operator audit (issue 21 item 1, migration 0011).
//!
//! An operator credential (`sbo_…`) is its own kind: made like an endpoint credential
//! ([`crate::secrets::mint_credential`]), stored only as its SHA-256 hex, compared in constant
//! time, and kept in its own table, so an endpoint credential is never an operator's and an
//! operator credential never opens the endpoint API. Every change an operator makes is recorded
//! in the change log with the change ([`crate::acts`]); the audit listed here is the log's view
//! of those acts: who, which action, on what, and typed detail (never a secret).

use std::collections::BTreeMap;
use std::fmt;

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::acts::{AuditRecord, BOOTSTRAP, OperatorAction};
use crate::error::{Error, Result};
use crate::secrets::{hashes_match, mint_credential, new_id, sha256_hex};
use crate::tenancy::check_name;
use crate::{Page, Paged, Store};

/// The prefix of every operator credential, distinct from endpoints' `sbe_`.
pub const OPERATOR_CREDENTIAL_PREFIX: &str = "sbo_";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorCredential {
    /// `op_` and 32 hex characters.
    pub id: String,
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// The operator credential that made it; `None` when bootstrapped from the database.
    pub created_by: Option<String>,
}

/// The one moment an operator credential exists in the clear.
#[derive(Clone)]
pub struct MintedOperatorCredential {
    pub credential: OperatorCredential,
    pub token: String,
}

impl fmt::Debug for MintedOperatorCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MintedOperatorCredential")
            .field("credential", &self.credential)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// A stored audit row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub id: String,
    pub at: i64,
    /// The operator credential that acted; `None` for a bootstrap from the database.
    pub operator_id: Option<String>,
    pub action: String,
    pub target: String,
    pub detail: BTreeMap<String, String>,
}

fn credential(row: &AnyRow) -> Result<OperatorCredential> {
    Ok(OperatorCredential {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
        created_by: row.try_get("created_by")?,
    })
}

fn audit_entry(row: &AnyRow) -> Result<AuditEntry> {
    let detail: String = row.try_get("detail")?;
    Ok(AuditEntry {
        id: row.try_get("id")?,
        at: row.try_get("at")?,
        operator_id: row.try_get("operator_id")?,
        action: row.try_get("action")?,
        target: row.try_get("target")?,
        detail: serde_json::from_str(&detail)?,
    })
}

impl Store {
    /// Mints an operator credential named `name`, made by `created_by` (`None`: bootstrapped
    /// from the database), and audits it in the same transaction. The token is not kept.
    pub async fn create_operator_credential(
        &self,
        name: &str,
        created_by: Option<&str>,
    ) -> Result<MintedOperatorCredential> {
        check_name("name", name)?;
        let id = new_id("op_")?;
        let (token, hash) = mint_credential(OPERATOR_CREDENTIAL_PREFIX)?;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "INSERT INTO operator_credentials (id, name, credential_hash, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id, name, created_at, revoked_at, created_by",
        )
        .bind(id.as_str())
        .bind(name)
        .bind(hash.as_str())
        .bind(now)
        .bind(created_by)
        .fetch_one(&mut *tx)
        .await?;
        let made = credential(&row)?;
        let action = if created_by.is_some() {
            OperatorAction::CreateOperatorCredential
        } else {
            OperatorAction::BootstrapOperatorCredential
        };
        self.audit_in(
            &mut tx,
            now,
            created_by,
            None,
            &AuditRecord::new(action, format!("operator:{}", made.id)).with("name", name),
        )
        .await?;
        tx.commit().await?;
        Ok(MintedOperatorCredential {
            credential: made,
            token,
        })
    }

    /// The operator credential a bearer token belongs to, or `None` for an unknown or revoked
    /// one — and for any endpoint credential, which lives in another table.
    pub async fn authenticate_operator(&self, token: &str) -> Result<Option<OperatorCredential>> {
        let presented = sha256_hex(token);
        let row = sqlx::query(
            "SELECT id, name, created_at, revoked_at, created_by, credential_hash FROM operator_credentials WHERE credential_hash = $1"
        )
        .bind(presented.as_str())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let stored: String = row.try_get("credential_hash")?;
        if !hashes_match(&stored, &presented) {
            return Ok(None);
        }
        let found = credential(&row)?;
        Ok(found.revoked_at.is_none().then_some(found))
    }

    /// Every operator credential, oldest first (never a token).
    pub async fn list_operator_credentials(&self) -> Result<Vec<OperatorCredential>> {
        let rows = sqlx::query(
            "SELECT id, name, created_at, revoked_at, created_by FROM operator_credentials ORDER BY created_at, id"
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(credential).collect()
    }

    /// Every operator credential, oldest first, one page at a time (never a token).
    pub async fn list_operator_credentials_page(
        &self,
        page: &Page,
    ) -> Result<Paged<OperatorCredential>> {
        let size = page.size()?;
        let (at, id) = page
            .position(crate::Listing::OperatorCredentials)?
            .unwrap_or((i64::MIN, String::new()));
        let rows = sqlx::query(
            "SELECT id, name, created_at, revoked_at, created_by FROM operator_credentials \
             WHERE created_at > $1 OR (created_at = $1 AND id > $2) ORDER BY created_at, id LIMIT $3",
        )
        .bind(at)
        .bind(id)
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(credential).collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |c| {
            crate::cursor_for(crate::Listing::OperatorCredentials, c.created_at, &c.id)
        }))
    }

    /// Revokes an operator credential at once, audited in the same transaction; revoking
    /// twice keeps the first time. `not_found` for an unknown id.
    pub async fn revoke_operator_credential(
        &self,
        id: &str,
        by: &str,
    ) -> Result<OperatorCredential> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "UPDATE operator_credentials SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 \
             RETURNING id, name, created_at, revoked_at, created_by",
        )
        .bind(now)
        .bind(crate::lookup_id(id))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(Error::not_found("operator credential"));
        };
        let revoked = credential(&row)?;
        self.audit_in(
            &mut tx,
            now,
            Some(by),
            None,
            &AuditRecord::new(
                OperatorAction::RevokeOperatorCredential,
                format!("operator:{}", revoked.id),
            )
            .with("name", revoked.name.as_str()),
        )
        .await?;
        tx.commit().await?;
        Ok(revoked)
    }

    /// The audit, newest first, in pages: the change log's entries of operators' acts (a view
    /// of the log, issue 47), or on a schema before it the `operator_audit` table. An entry's
    /// id is its seq in the log.
    pub async fn list_audit_entries(&self, page: &Page) -> Result<Paged<AuditEntry>> {
        if self.audit_view {
            return self.audit_view_page(page).await;
        }
        let size = page.size()?;
        let (at, id) = page
            .position(crate::Listing::Audit)?
            .unwrap_or((i64::MAX, String::new()));
        let rows = if id.is_empty() {
            sqlx::query(
                "SELECT id, at, operator_id, action, target, detail FROM operator_audit \
                 ORDER BY at DESC, id DESC LIMIT $1",
            )
            .bind(size + 1)
            .fetch_all(&self.pool)
            .await?
        } else {
            sqlx::query(
                "SELECT id, at, operator_id, action, target, detail FROM operator_audit \
                 WHERE at < $1 OR (at = $1 AND id < $2) ORDER BY at DESC, id DESC LIMIT $3",
            )
            .bind(at)
            .bind(id.as_str())
            .bind(size + 1)
            .fetch_all(&self.pool)
            .await?
        };
        let items = rows.iter().map(audit_entry).collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |e| {
            crate::cursor_for(crate::Listing::Audit, e.at, &e.id)
        }))
    }

    async fn audit_view_page(&self, page: &Page) -> Result<Paged<AuditEntry>> {
        let size = page.size()?;
        let before = match page.position(crate::Listing::Audit)? {
            None => i64::MAX,
            Some((_, seq)) => seq
                .parse::<i64>()
                .map_err(|_| Error::invalid("cursor", "not a cursor this listing gave"))?,
        };
        let rows = sqlx::query(
            "SELECT seq, entry FROM change_log WHERE operator_id IS NOT NULL AND seq < $1 \
             ORDER BY seq DESC LIMIT $2",
        )
        .bind(before)
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(logged_act).collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |e| {
            crate::cursor_for(crate::Listing::Audit, e.at, &e.id)
        }))
    }
}

/// An operator's act as the audit lists it, read from its change-log entry: the entry's
/// `action` and `target` are the audit's, the rest of its detail the audit's detail.
fn logged_act(row: &AnyRow) -> Result<AuditEntry> {
    let seq: i64 = row.try_get("seq")?;
    let text: String = row.try_get("entry")?;
    let entry: switchboard_model::change_log::ChangeEntry = serde_json::from_str(&text)?;
    let mut detail = entry.detail;
    Ok(AuditEntry {
        id: seq.to_string(),
        at: entry.at_ms,
        // A bootstrap from the database acted without a credential.
        operator_id: entry.actor.operator.filter(|o| o != BOOTSTRAP),
        action: detail.remove("action").unwrap_or_default(),
        target: detail.remove("target").unwrap_or_default(),
        detail,
    })
}
