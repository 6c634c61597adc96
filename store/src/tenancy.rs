//! Humans, teams and memberships, and the one question tenancy asks: which role does this
//! human have in this owner scope?

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::acts::{AuditRecord, OperatorAction};
use crate::error::{Error, Result, is_unique_violation};
use crate::scope::{OwnerScope, Role, is_login, is_slug};
use crate::{Store, parse_col};

/// Does the human or team behind `scope` exist?
pub(crate) async fn owner_exists(
    conn: &mut sqlx::AnyConnection,
    scope: &OwnerScope,
) -> Result<bool> {
    let found = match scope {
        OwnerScope::Human(login) => {
            sqlx::query("SELECT 1 FROM humans WHERE login = $1").bind(login.as_str())
        }
        OwnerScope::Team(slug) => {
            sqlx::query("SELECT 1 FROM teams WHERE slug = $1").bind(slug.as_str())
        }
    }
    .fetch_optional(conn)
    .await?;
    Ok(found.is_some())
}

/// What offboarding a human or a team removed besides it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offboarded {
    /// Endpoints deleted: their credentials authenticate no more.
    pub endpoints: u64,
    /// Team memberships removed.
    pub memberships: u64,
}

/// What offboarding one owner deletes, in its own words: every statement takes the owner's
/// key (a login or a slug) as `$1`.
struct Offboarding<'a> {
    scope: OwnerScope,
    /// The resource an unknown key is not found as.
    missing: &'static str,
    key: &'a str,
    endpoints: &'static str,
    memberships: &'static str,
    also: &'static [&'static str],
    owner: &'static str,
    action: OperatorAction,
}

/// Refuses to offboard a scope that still owns webhooks: their deliveries, todos and history
/// would go with it; deleting them is its own, explicit act.
async fn refuse_while_owning_webhooks(
    conn: &mut sqlx::AnyConnection,
    scope: &OwnerScope,
) -> Result<()> {
    let owned: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhooks WHERE owner_scope = $1")
        .bind(scope.to_string())
        .fetch_one(conn)
        .await?;
    if owned > 0 {
        return Err(Error::conflict(format!(
            "{scope} still owns {owned} webhook(s); delete them first (switchboard admin webhook delete), nothing was changed"
        )));
    }
    Ok(())
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Human {
    pub login: String,
    pub display_name: Option<String>,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team {
    pub slug: String,
    pub name: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub team_slug: String,
    pub human_login: String,
    pub role: Role,
    pub created_at: i64,
}

fn human(row: &AnyRow) -> Result<Human> {
    Ok(Human {
        login: row.try_get("login")?,
        display_name: row.try_get("display_name")?,
        created_at: row.try_get("created_at")?,
    })
}

fn team(row: &AnyRow) -> Result<Team> {
    Ok(Team {
        slug: row.try_get("slug")?,
        name: row.try_get("name")?,
        created_at: row.try_get("created_at")?,
    })
}

fn membership(row: &AnyRow) -> Result<Membership> {
    Ok(Membership {
        team_slug: row.try_get("team_slug")?,
        human_login: row.try_get("human_login")?,
        role: parse_col(row, "role")?,
        created_at: row.try_get("created_at")?,
    })
}

/// A display or team name: 1–200 characters, no control characters.
pub(crate) fn check_name(field: &'static str, name: &str) -> Result<()> {
    if name.trim().is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            field,
            "1–200 characters, no control characters",
        ));
    }
    Ok(())
}

impl Store {
    pub async fn create_human(&self, login: &str, display_name: Option<&str>) -> Result<Human> {
        if !is_login(login) {
            return Err(Error::invalid(
                "login",
                "1–64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            ));
        }
        if let Some(name) = display_name {
            check_name("display_name", name)?;
        }
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "INSERT INTO humans (login, display_name, created_at) VALUES ($1, $2, $3) \
             RETURNING login, display_name, created_at",
        )
        .bind(login)
        .bind(display_name)
        .bind(self.now())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&mut *tx)
        .await
        .and_then(|rows| rows.into_iter().next().ok_or(sqlx::Error::RowNotFound))
        .map_err(|e| {
            if is_unique_violation(&e) {
                Error::conflict("a human with this login exists")
            } else {
                e.into()
            }
        })?;
        let made = human(&row)?;
        let record = AuditRecord::new(OperatorAction::CreateHuman, format!("human:{}", made.login));
        self.record_act(&mut tx, None, record).await?;
        tx.commit().await?;
        Ok(made)
    }

    pub async fn get_human(&self, login: &str) -> Result<Human> {
        let row =
            sqlx::query("SELECT login, display_name, created_at FROM humans WHERE login = $1")
                .bind(login)
                .fetch_optional(&self.pool)
                .await?;
        row.as_ref()
            .map(human)
            .unwrap_or(Err(Error::not_found("human")))
    }

    pub async fn list_humans(&self) -> Result<Vec<Human>> {
        let rows = sqlx::query("SELECT login, display_name, created_at FROM humans ORDER BY login")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(human).collect()
    }

    pub async fn create_team(&self, slug: &str, name: &str) -> Result<Team> {
        if !is_slug(slug) {
            return Err(Error::invalid(
                "slug",
                "1–64 lower-case letters, digits or '-', starting with a letter or digit",
            ));
        }
        check_name("name", name)?;
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "INSERT INTO teams (slug, name, created_at) VALUES ($1, $2, $3) RETURNING slug, name, created_at",
        )
        .bind(slug)
        .bind(name)
        .bind(self.now())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&mut *tx)
        .await
        .and_then(|rows| rows.into_iter().next().ok_or(sqlx::Error::RowNotFound))
        .map_err(|e| if is_unique_violation(&e) { Error::conflict("a team with this slug exists") } else { e.into() })?;
        let made = team(&row)?;
        let record = AuditRecord::new(OperatorAction::CreateTeam, format!("team:{}", made.slug))
            .with("name", made.name.as_str());
        let scope = OwnerScope::Team(made.slug.clone());
        self.record_act(&mut tx, Some(&scope), record).await?;
        tx.commit().await?;
        Ok(made)
    }

    pub async fn get_team(&self, slug: &str) -> Result<Team> {
        let row = sqlx::query("SELECT slug, name, created_at FROM teams WHERE slug = $1")
            .bind(slug)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref()
            .map(team)
            .unwrap_or(Err(Error::not_found("team")))
    }

    /// Humans by login, one page at a time (issue 49: every listing is paged).
    pub async fn list_humans_page(&self, page: &crate::Page) -> Result<crate::Paged<Human>> {
        let size = page.size()?;
        let after = page.opened(crate::Listing::Humans)?.unwrap_or_default();
        let rows = sqlx::query(
            "SELECT login, display_name, created_at FROM humans WHERE login > $1 ORDER BY login LIMIT $2",
        )
        .bind(after)
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(human).collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |h| {
            crate::cursor(crate::Listing::Humans, &h.login)
        }))
    }

    /// Teams by slug, one page at a time.
    pub async fn list_teams_page(&self, page: &crate::Page) -> Result<crate::Paged<Team>> {
        let size = page.size()?;
        let after = page.opened(crate::Listing::Teams)?.unwrap_or_default();
        let rows = sqlx::query(
            "SELECT slug, name, created_at FROM teams WHERE slug > $1 ORDER BY slug LIMIT $2",
        )
        .bind(after)
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(team).collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |t| {
            crate::cursor(crate::Listing::Teams, &t.slug)
        }))
    }

    /// Offboards a human (issue 49): their endpoints are deleted (every credential they hold
    /// stops at once, in every scope), their console sessions and sign-in links end, their
    /// memberships and their own scope's grant allowance go, and the human is deleted; audited.
    /// Refused (`conflict`, nothing changed) while their own scope still owns webhooks, so no
    /// delivery, todo or history is lost by it. `not_found` for an unknown login.
    pub async fn delete_human(&self, login: &str) -> Result<Offboarded> {
        self.offboard(Offboarding {
            scope: OwnerScope::Human(login.to_string()),
            missing: "human",
            key: login,
            endpoints: "DELETE FROM endpoints WHERE human_login = $1",
            memberships: "DELETE FROM memberships WHERE human_login = $1",
            // (Both would go with the human by cascade; said here so it holds on any schema.)
            also: &[
                "DELETE FROM console_sessions WHERE human_login = $1",
                "DELETE FROM sign_in_links WHERE human_login = $1",
            ],
            owner: "DELETE FROM humans WHERE login = $1",
            action: OperatorAction::DeleteHuman,
        })
        .await
    }

    /// Deletes a team: its endpoints (agents acting in it) are deleted, its memberships and
    /// grant allowance go; audited. Refused (`conflict`) while it still owns webhooks.
    pub async fn delete_team(&self, slug: &str) -> Result<Offboarded> {
        self.offboard(Offboarding {
            scope: OwnerScope::Team(slug.to_string()),
            missing: "team",
            key: slug,
            // A team's endpoints are those in its scope, whoever they act for.
            endpoints: "DELETE FROM endpoints WHERE owner_scope = 'team:' || $1",
            memberships: "DELETE FROM memberships WHERE team_slug = $1",
            also: &[],
            owner: "DELETE FROM teams WHERE slug = $1",
            action: OperatorAction::DeleteTeam,
        })
        .await
    }

    /// One offboarding, in one transaction: refused unless the owner exists and its scope owns
    /// no webhook; then its endpoints, memberships, the rest, its scope's grant allowance and
    /// the owner itself go, and the act is audited with the counts.
    async fn offboard(&self, o: Offboarding<'_>) -> Result<Offboarded> {
        let mut tx = self.begin_write().await?;
        if !owner_exists(&mut tx, &o.scope).await? {
            return Err(Error::not_found(o.missing));
        }
        refuse_while_owning_webhooks(&mut tx, &o.scope).await?;
        let endpoints = sqlx::query(o.endpoints)
            .bind(o.key)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let memberships = sqlx::query(o.memberships)
            .bind(o.key)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        for statement in o.also.iter().copied() {
            sqlx::query(statement).bind(o.key).execute(&mut *tx).await?;
        }
        sqlx::query("DELETE FROM grant_allowances WHERE owner_scope = $1")
            .bind(o.scope.to_string())
            .execute(&mut *tx)
            .await?;
        sqlx::query(o.owner).bind(o.key).execute(&mut *tx).await?;
        let record = AuditRecord::new(o.action, o.scope.to_string())
            .with("endpoints", endpoints.to_string())
            .with("memberships", memberships.to_string());
        self.record_act(&mut tx, Some(&o.scope), record).await?;
        tx.commit().await?;
        Ok(Offboarded {
            endpoints,
            memberships,
        })
    }

    pub async fn list_teams(&self) -> Result<Vec<Team>> {
        let rows = sqlx::query("SELECT slug, name, created_at FROM teams ORDER BY slug")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(team).collect()
    }

    /// Gives `login` the `role` in `team`, replacing any role it had there.
    pub async fn set_membership(
        &self,
        team_slug: &str,
        login: &str,
        role: Role,
    ) -> Result<Membership> {
        let mut tx = self.begin_write().await?;
        let team_exists = sqlx::query("SELECT 1 FROM teams WHERE slug = $1")
            .bind(team_slug)
            .fetch_optional(&mut *tx)
            .await?;
        if team_exists.is_none() {
            return Err(Error::not_found("team"));
        }
        let human_exists = sqlx::query("SELECT 1 FROM humans WHERE login = $1")
            .bind(login)
            .fetch_optional(&mut *tx)
            .await?;
        if human_exists.is_none() {
            return Err(Error::not_found("human"));
        }
        let row = sqlx::query(
            "INSERT INTO memberships (team_slug, human_login, role, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (team_slug, human_login) DO UPDATE SET role = excluded.role \
             RETURNING team_slug, human_login, role, created_at",
        )
        .bind(team_slug)
        .bind(login)
        .bind(role.as_str())
        .bind(self.now())
        .fetch_one(&mut *tx)
        .await?;
        let m = membership(&row)?;
        let record = AuditRecord::new(
            OperatorAction::SetTeamMember,
            format!("team:{}", m.team_slug),
        )
        .with("human", m.human_login.as_str())
        .with("role", m.role.as_str());
        let scope = OwnerScope::Team(m.team_slug.clone());
        self.record_act(&mut tx, Some(&scope), record).await?;
        tx.commit().await?;
        Ok(m)
    }

    /// Takes `login` out of `team_slug`: from now on they hold no role there, so their
    /// endpoints in the team's scope are refused at once. `not_found` when not a member.
    pub async fn remove_membership(&self, team_slug: &str, login: &str) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM memberships WHERE team_slug = $1 AND human_login = $2")
            .bind(team_slug)
            .bind(login)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("membership"));
        }
        let record = AuditRecord::new(
            OperatorAction::RemoveTeamMember,
            format!("team:{team_slug}"),
        )
        .with("human", login);
        let scope = OwnerScope::Team(team_slug.to_string());
        self.record_act(&mut tx, Some(&scope), record).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn list_memberships(&self, team_slug: &str) -> Result<Vec<Membership>> {
        let rows = sqlx::query(
            "SELECT team_slug, human_login, role, created_at FROM memberships WHERE team_slug = $1 ORDER BY human_login",
        )
        .bind(team_slug)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(membership).collect()
    }

    /// The role `login` holds in `scope`: admin of its own `human:` scope, its membership role
    /// in a `team:` scope, and `None` anywhere else (including for an unknown human).
    pub async fn role_in_scope(&self, login: &str, scope: &OwnerScope) -> Result<Option<Role>> {
        match scope {
            OwnerScope::Human(owner) => {
                let exists = sqlx::query("SELECT 1 FROM humans WHERE login = $1")
                    .bind(login)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok((owner == login && exists.is_some()).then_some(Role::Admin))
            }
            OwnerScope::Team(slug) => {
                let row = sqlx::query(
                    "SELECT role FROM memberships WHERE team_slug = $1 AND human_login = $2",
                )
                .bind(slug.as_str())
                .bind(login)
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(|r| parse_col(r, "role")).transpose()
            }
        }
    }
}
