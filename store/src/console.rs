//! Console sign-in (issue 20): one-time sign-in links an operator issues for a human, and the
//! sessions they open. Both tokens are stored only as SHA-256 hashes and compared in constant
//! time; a link works once and briefly, a session until it expires or its person signs out.

use sqlx::Row;

use crate::Store;
use crate::error::{Error, Result};
use crate::secrets::{hashes_match, new_token, sha256_hex};

/// The prefix of a sign-in link's token.
pub const SIGN_IN_PREFIX: &str = "sbl_";
/// The prefix of a console session's token (the cookie's value).
pub const SESSION_PREFIX: &str = "sbs_";

impl Store {
    /// A single-use sign-in token for `login`, valid for `ttl_ms`. `not_found` for an unknown
    /// human.
    pub async fn create_sign_in_link(&self, login: &str, ttl_ms: i64) -> Result<String> {
        let token = new_token(SIGN_IN_PREFIX)?;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "INSERT INTO sign_in_links (token_hash, human_login, created_at, expires_at) \
             SELECT $1, login, $2, $3 FROM humans WHERE login = $4",
        )
        .bind(sha256_hex(&token))
        .bind(now)
        .bind(now.saturating_add(ttl_ms))
        .bind(login)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(Error::not_found("human"));
        }
        let record = crate::acts::AuditRecord::new(
            crate::acts::OperatorAction::CreateSignInLink,
            format!("human:{login}"),
        );
        self.record_act(&mut tx, None, record).await?;
        tx.commit().await?;
        Ok(token)
    }

    /// Uses a sign-in token once and opens a session of `session_ttl_ms` for its human:
    /// `(login, session token)`. A used, expired or unknown token is `not_found`, all alike.
    pub async fn redeem_sign_in_link(
        &self,
        token: &str,
        session_ttl_ms: i64,
    ) -> Result<(String, String)> {
        let hash = sha256_hex(token);
        let now = self.now();
        let session = new_token(SESSION_PREFIX)?;
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "SELECT token_hash, human_login, expires_at, used_at FROM sign_in_links WHERE token_hash = $1",
        )
        .bind(hash.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(Error::not_found("sign-in link"));
        };
        let stored: String = row.try_get("token_hash")?;
        let login: String = row.try_get("human_login")?;
        let expires_at: i64 = row.try_get("expires_at")?;
        let used_at: Option<i64> = row.try_get("used_at")?;
        if !hashes_match(&stored, &hash) || used_at.is_some() || expires_at <= now {
            return Err(Error::not_found("sign-in link"));
        }
        // Of two redemptions at once, exactly one marks it used.
        let done = sqlx::query(
            "UPDATE sign_in_links SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL",
        )
        .bind(now)
        .bind(hash.as_str())
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(Error::not_found("sign-in link"));
        }
        sqlx::query(
            "INSERT INTO console_sessions (token_hash, human_login, created_at, expires_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(sha256_hex(&session))
        .bind(login.as_str())
        .bind(now)
        .bind(now.saturating_add(session_ttl_ms))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((login, session))
    }

    /// The person a session token belongs to, while it is open.
    pub async fn console_session(&self, token: &str) -> Result<Option<String>> {
        let hash = sha256_hex(token);
        let row = sqlx::query(
            "SELECT token_hash, human_login, expires_at FROM console_sessions WHERE token_hash = $1",
        )
        .bind(hash.as_str())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let stored: String = row.try_get("token_hash")?;
        let expires_at: i64 = row.try_get("expires_at")?;
        Ok((hashes_match(&stored, &hash) && expires_at > self.now())
            .then(|| row.try_get("human_login"))
            .transpose()?)
    }

    /// Signs a session out: its token opens nothing after this.
    pub async fn end_console_session(&self, token: &str) -> Result<()> {
        let _turn = self.write_turn().await?;
        sqlx::query("DELETE FROM console_sessions WHERE token_hash = $1")
            .bind(sha256_hex(token))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The owner scopes in which `login` holds at least `role`: their own `human:` scope
    /// (admin there) and the teams where their membership role is high enough.
    pub async fn scopes_with_role(
        &self,
        login: &str,
        role: crate::scope::Role,
    ) -> Result<Vec<crate::scope::OwnerScope>> {
        let mut scopes = Vec::new();
        let own = crate::scope::OwnerScope::human(login);
        if self
            .role_in_scope(login, &own)
            .await?
            .is_some_and(|r| r >= role)
        {
            scopes.push(own);
        }
        let rows = sqlx::query(
            "SELECT team_slug, role FROM memberships WHERE human_login = $1 ORDER BY team_slug",
        )
        .bind(login)
        .fetch_all(&self.pool)
        .await?;
        for row in &rows {
            let held: crate::scope::Role = crate::parse_col(row, "role")?;
            if held >= role {
                let slug: String = row.try_get("team_slug")?;
                scopes.push(crate::scope::OwnerScope::team(slug));
            }
        }
        Ok(scopes)
    }
}
