//! Endpoints: credentials vended to agents. The credential is shown once (returned by
//! [`Store::vend_endpoint`]) and stored only as its SHA-256 hex; authentication hashes what the
//! caller presents, looks the hash up, and compares in constant time.

use std::fmt;

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::acts::{AuditRecord, OperatorAction};
use crate::error::{Error, Result};
use crate::scope::OwnerScope;
use crate::secrets::{hashes_match, mint_credential, new_id, sha256_hex};
use crate::tenancy::check_name;
use crate::{Store, parse_col};
use switchboard_model::verb;

/// The prefix of every endpoint credential, so a leaked one is recognizable in logs and scanners.
pub const CREDENTIAL_PREFIX: &str = "sbe_";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub id: String,
    pub name: String,
    /// The human the endpoint acts for.
    pub human_login: String,
    pub owner_scope: OwnerScope,
    /// Expanded verbs, in family-table order.
    pub verbs: Vec<String>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

impl Endpoint {
    /// Is `verb` on this endpoint's allowlist?
    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

/// What an operator asks for when vending: `verbs` may name families or single verbs.
#[derive(Clone, Debug)]
pub struct NewEndpoint {
    pub name: String,
    pub human_login: String,
    pub owner_scope: OwnerScope,
    pub verbs: Vec<String>,
}

/// The one moment the credential exists in the clear.
#[derive(Clone)]
pub struct VendedEndpoint {
    pub endpoint: Endpoint,
    pub credential: String,
}

impl fmt::Debug for VendedEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VendedEndpoint")
            .field("endpoint", &self.endpoint)
            .field("credential", &"<redacted>")
            .finish()
    }
}

fn endpoint(row: &AnyRow) -> Result<Endpoint> {
    let verbs: String = row.try_get("verbs")?;
    Ok(Endpoint {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        human_login: row.try_get("human_login")?,
        owner_scope: parse_col(row, "owner_scope")?,
        verbs: serde_json::from_str(&verbs)?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

impl Store {
    /// Vends an endpoint for a human who holds a role in the scope. Returns the credential,
    /// which is not kept and cannot be shown again.
    pub async fn vend_endpoint(&self, new: NewEndpoint) -> Result<VendedEndpoint> {
        check_name("name", &new.name)?;
        let verbs = verb::expand(&new.verbs).map_err(|m| Error::invalid("verbs", m))?;
        if verbs.is_empty() {
            return Err(Error::invalid("verbs", "name at least one verb or family"));
        }
        if self
            .role_in_scope(&new.human_login, &new.owner_scope)
            .await?
            .is_none()
        {
            return Err(Error::invalid(
                "owner_scope",
                "the human holds no role in this scope",
            ));
        }
        let id = new_id("ep_")?;
        let (credential, credential_hash) = mint_credential(CREDENTIAL_PREFIX)?;
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "INSERT INTO endpoints (id, name, human_login, owner_scope, verbs, credential_hash, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             RETURNING id, name, human_login, owner_scope, verbs, created_at, revoked_at",
        )
        .bind(id.as_str())
        .bind(new.name.as_str())
        .bind(new.human_login.as_str())
        .bind(new.owner_scope.to_string())
        .bind(serde_json::to_string(&verbs)?)
        .bind(credential_hash.as_str())
        .bind(self.now())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .next()
        .ok_or(sqlx::Error::RowNotFound)?;
        let vended = endpoint(&row)?;
        let record = AuditRecord::new(OperatorAction::VendEndpoint, vended.id.as_str())
            .with("human", vended.human_login.as_str())
            .with("owner_scope", vended.owner_scope.to_string())
            .with("verbs", vended.verbs.join(","));
        self.record_act(&mut tx, Some(&new.owner_scope), record)
            .await?;
        tx.commit().await?;
        Ok(VendedEndpoint {
            endpoint: vended,
            credential,
        })
    }

    /// The endpoint a bearer credential belongs to, or `None` for an unknown or revoked one.
    pub async fn authenticate(&self, credential: &str) -> Result<Option<Endpoint>> {
        let presented = sha256_hex(credential);
        let row = sqlx::query(
            "SELECT id, name, human_login, owner_scope, verbs, created_at, revoked_at, credential_hash \
             FROM endpoints WHERE credential_hash = $1",
        )
        .bind(presented.as_str())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let stored: String = row.try_get("credential_hash")?;
        if !hashes_match(&stored, &presented) {
            return Ok(None);
        }
        let found = endpoint(&row)?;
        Ok(found.revoked_at.is_none().then_some(found))
    }

    /// Revokes an endpoint; revoking twice keeps the first revocation time.
    pub async fn revoke_endpoint(&self, id: &str) -> Result<Endpoint> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "UPDATE endpoints SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 \
             RETURNING id, name, human_login, owner_scope, verbs, created_at, revoked_at",
        )
        .bind(now)
        .bind(crate::lookup_id(id))
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .next();
        let revoked = row
            .as_ref()
            .map(endpoint)
            .unwrap_or(Err(Error::not_found("endpoint")))?;
        // A second revoke changes nothing, and records nothing.
        if revoked.revoked_at == Some(now) {
            let record = AuditRecord::new(OperatorAction::RevokeEndpoint, revoked.id.as_str())
                .with("owner_scope", revoked.owner_scope.to_string());
            self.record_act(&mut tx, Some(&revoked.owner_scope), record)
                .await?;
        }
        tx.commit().await?;
        Ok(revoked)
    }

    /// The endpoint with `id`, revoked or not.
    pub async fn get_endpoint(&self, id: &str) -> Result<Endpoint> {
        let row = sqlx::query("SELECT id, name, human_login, owner_scope, verbs, created_at, revoked_at FROM endpoints WHERE id = $1")
            .bind(crate::lookup_id(id))
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref()
            .map(endpoint)
            .unwrap_or(Err(Error::not_found("endpoint")))
    }

    /// Every endpoint, or those of one scope, oldest first.
    pub async fn list_endpoints(&self, scope: Option<&OwnerScope>) -> Result<Vec<Endpoint>> {
        let rows = match scope {
            Some(scope) => {
                sqlx::query(
                    "SELECT id, name, human_login, owner_scope, verbs, created_at, revoked_at FROM endpoints \
                     WHERE owner_scope = $1 ORDER BY created_at, id",
                )
                .bind(scope.to_string())
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT id, name, human_login, owner_scope, verbs, created_at, revoked_at FROM endpoints \
                     ORDER BY created_at, id",
                )
                .fetch_all(&self.pool)
                .await?
            }
        };
        rows.iter().map(endpoint).collect()
    }

    /// Every endpoint, or those of one scope, oldest first, one page at a time (issue 49:
    /// every listing is paged).
    pub async fn list_endpoints_page(
        &self,
        scope: Option<&OwnerScope>,
        page: &crate::Page,
    ) -> Result<crate::Paged<Endpoint>> {
        let size = page.size()?;
        let (at, id) = page
            .position(crate::Listing::Endpoints)?
            .unwrap_or((i64::MIN, String::new()));
        // An empty scope filter matches every scope (no scope is empty).
        let rows = sqlx::query(
            "SELECT id, name, human_login, owner_scope, verbs, created_at, revoked_at FROM endpoints \
             WHERE ($1 = '' OR owner_scope = $1) AND (created_at > $2 OR (created_at = $2 AND id > $3)) \
             ORDER BY created_at, id LIMIT $4",
        )
        .bind(scope.map(ToString::to_string).unwrap_or_default())
        .bind(at)
        .bind(id)
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(endpoint).collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |e| {
            crate::cursor_for(crate::Listing::Endpoints, e.created_at, &e.id)
        }))
    }
}
