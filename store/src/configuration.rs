//! Saving a webhook's configuration and its history (RFC-0003: changes are facts).
//!
//! Every save runs in one transaction under the webhook's row lock: check the plan (when the
//! save confirms one), check `expected_version`, skip a change that equals what is saved
//! (`duplicate: true`, nothing written), then bump the version, store the configuration and
//! digest, and append the history record. A failure anywhere rolls all of it back.

use sqlx::Row;
use sqlx::any::AnyRow;
use switchboard_model::Configuration;
use switchboard_model::provenance::Provenance;
use switchboard_model::{ChangeProvenance, ConfigurationChange, TrustedActors};

use crate::error::{Error, Result};
use crate::plans::consume_plan_in;
use crate::scope::OwnerScope;
use crate::secrets::canonical_json;
use crate::webhooks::{ConfirmPolicy, configuration_text, webhook, webhook_columns};
use crate::{Actor, Page, Paged, Store, dialect, json_col, json_opt};

/// Provenance is a claim recorded with a change, at most this many bytes of JSON.
pub const MAX_PROVENANCE_BYTES: usize = 4096;

/// A change to save. Only `configuration`, `actor` and `change` are required in spirit; the
/// rest is `None` for an ordinary edit.
#[derive(Clone, Debug, Default)]
pub struct SaveConfiguration {
    /// When given, the save applies only if the saved version is still this one.
    pub expected_version: Option<i64>,
    /// The whole new configuration, already validated.
    pub configuration: Configuration,
    pub actor: Actor,
    /// What the change was, e.g. `{"op": "update_webhook_rule", "rule_id": "r-1"}`.
    pub change: ConfigurationChange,
    /// Where the change came from (a pack, a plan); at most 4 KiB.
    pub provenance: Option<ChangeProvenance>,
    /// Replaces the webhook's installed-pack provenance when given.
    pub installed_packs: Option<Provenance>,
    /// Replaces the webhook's first-class trusted actors when given (`Some(None)` clears them).
    pub trusted_actors: Option<Option<TrustedActors>>,
    /// The SHA-256 hex of a plan token: the save then consumes that plan in the same
    /// transaction, and is refused as `plan_stale` unless the plan was made for this webhook at
    /// its current version and for exactly this configuration.
    pub plan_token_hash: Option<String>,
}

/// The outcome of a save.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saved {
    /// The change equals what is saved: nothing was written.
    pub duplicate: bool,
    /// The version now saved.
    pub version: i64,
    pub digest: String,
}

/// One saved version of a webhook's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryRecord {
    pub webhook_id: String,
    pub version: i64,
    pub actor: Actor,
    pub change: ConfigurationChange,
    pub provenance: Option<ChangeProvenance>,
    /// `None` for version 1, which had nothing before it.
    pub digest_before: Option<String>,
    pub digest_after: String,
    /// The configuration as saved at this version: rolling back is saving it again.
    pub configuration: Configuration,
    pub saved_at: i64,
}

fn history(row: &AnyRow) -> Result<HistoryRecord> {
    Ok(HistoryRecord {
        webhook_id: row.try_get("webhook_id")?,
        version: row.try_get("version")?,
        actor: Actor {
            endpoint_id: row.try_get("actor_endpoint")?,
            human_login: row.try_get("actor_human")?,
        },
        change: json_col(row, "change")?,
        provenance: json_opt(row, "provenance")?,
        digest_before: row.try_get("digest_before")?,
        digest_after: row.try_get("digest_after")?,
        configuration: json_col(row, "configuration")?,
        saved_at: row.try_get("saved_at")?,
    })
}

/// The most versions [`Store::versions_saved_since`] answers: more marks than a week's chart
/// can show apart.
pub const MARKED_VERSIONS: i64 = 500;

impl Store {
    /// Saves a new configuration version (see the module docs for the order of checks).
    pub async fn save_configuration(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        save: SaveConfiguration,
    ) -> Result<Saved> {
        let config_text = configuration_text(&save.configuration)?;
        let digest_after = save.configuration.digest();
        let provenance = match &save.provenance {
            Some(p) => {
                let text = canonical_json(&serde_json::to_value(p)?);
                if text.len() > MAX_PROVENANCE_BYTES {
                    return Err(Error::invalid(
                        "provenance",
                        format!("larger than {MAX_PROVENANCE_BYTES} bytes"),
                    ));
                }
                Some(text)
            }
            None => None,
        };
        let change = canonical_json(&serde_json::to_value(&save.change)?);
        let now = self.now();

        let mut tx = self.begin_write().await?;
        // An endpoint's save reads the confirm policy in the same locked read, so a person's
        // switch to `person` can never be overtaken by a save that read the policy before it.
        // (Other actors' saves select only the columns every schema has: upgrade tests write
        // through this path into databases from before 0007.)
        let by_endpoint = save.actor.endpoint_id.is_some();
        let select = if by_endpoint {
            dialect::for_update!(
                self.backend,
                "SELECT ",
                webhook_columns!(),
                // Only the policy this save decides by: the rest of the policy columns are
                // newer than some databases upgrade tests write through this path.
                ", confirm_policy",
                " FROM webhooks WHERE id = $1 AND owner_scope = $2"
            )
        } else {
            dialect::for_update!(
                self.backend,
                "SELECT ",
                webhook_columns!(),
                " FROM webhooks WHERE id = $1 AND owner_scope = $2"
            )
        };
        let row = sqlx::query(select)
            .bind(crate::lookup_id(webhook_id))
            .bind(scope.to_string())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            return Err(Error::not_found("webhook"));
        };
        let current = webhook(&row, &self.sealing)?;
        // ADR-0028: under `person` an agent's call puts nothing live; only a person's
        // acceptance (a save with no endpoint) changes the configuration.
        if by_endpoint && current.confirm_policy == ConfirmPolicy::Person {
            return Err(Error::ApprovalRequired {
                webhook_id: current.id,
            });
        }

        if let Some(token_hash) = &save.plan_token_hash {
            // A save by a person (no endpoint) is an acceptance: the plan records who decided.
            let person = match (&save.actor.endpoint_id, &save.actor.human_login) {
                (None, Some(login)) => Some(login.as_str()),
                _ => None,
            };
            let plan =
                consume_plan_in(&mut tx, self.backend, token_hash, scope, now, person).await?;
            if plan.webhook_id != current.id {
                return Err(Error::not_found("plan"));
            }
            if plan.base_config_version != current.config_version
                || plan.candidate_digest != digest_after
            {
                return Err(Error::stale_at(current.config_version));
            }
        }
        let same_packs = save
            .installed_packs
            .as_ref()
            .is_none_or(|p| *p == current.provenance);
        let same_actors = save
            .trusted_actors
            .as_ref()
            .is_none_or(|t| *t == current.trusted_actors);
        if digest_after == current.config_digest && same_packs && same_actors {
            // Dropping the transaction rolls back, which also un-consumes a plan token.
            return Ok(Saved {
                duplicate: true,
                version: current.config_version,
                digest: current.config_digest,
            });
        }
        // After the duplicate check (RFC-0003): a retried write that is already applied
        // answers `duplicate: true`, not a mismatch with the version it itself created.
        if let Some(expected) = save.expected_version
            && expected != current.config_version
        {
            return Err(Error::version_mismatch(Some(current.config_version)));
        }

        let version = current.config_version + 1;
        let installed_packs = canonical_json(&serde_json::to_value(
            save.installed_packs.as_ref().unwrap_or(&current.provenance),
        )?);
        let trusted_actors = save
            .trusted_actors
            .as_ref()
            .unwrap_or(&current.trusted_actors)
            .as_ref()
            .map(|t| canonical_json(&t.to_value()));
        sqlx::query(
            "UPDATE webhooks SET configuration = $1, config_version = $2, config_digest = $3, provenance = $4, \
             trusted_actors = $5 WHERE id = $6",
        )
        .bind(config_text.as_str())
        .bind(version)
        .bind(digest_after.as_str())
        .bind(installed_packs.as_str())
        .bind(trusted_actors.as_deref())
        .bind(crate::lookup_id(webhook_id))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO configuration_history (webhook_id, version, owner_scope, actor_endpoint, actor_human, \
             change, provenance, digest_before, digest_after, configuration, saved_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(crate::lookup_id(webhook_id))
        .bind(version)
        .bind(scope.to_string())
        .bind(save.actor.endpoint_id.as_deref())
        .bind(save.actor.human_login.as_deref())
        .bind(change.as_str())
        .bind(provenance.as_deref())
        .bind(current.config_digest.as_str())
        .bind(digest_after.as_str())
        .bind(config_text.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if self.change_log {
            let entry = crate::change_log::configuration_entry(crate::change_log::Version {
                at: now,
                scope: &scope.to_string(),
                webhook_id: &current.id,
                version,
                digest_before: Some(current.config_digest.clone()),
                digest_after: Some(digest_after.clone()),
                endpoint: save.actor.endpoint_id.clone(),
                human: save.actor.human_login.clone(),
                provenance: save.provenance.clone().unwrap_or_default(),
                op: save.change.op.clone(),
            });
            self.append_change(&mut tx, entry).await?;
        }
        tx.commit().await?;
        Ok(Saved {
            duplicate: false,
            version,
            digest: digest_after,
        })
    }

    /// A webhook's history, newest version first. The cursor is the version to continue below.
    /// The versions saved at or after `since_ms` (ms), newest first, as (saved at, version):
    /// what the console's chart marks on its time axis. At most [`MARKED_VERSIONS`]; no
    /// configuration text is read.
    pub async fn versions_saved_since(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        since_ms: i64,
    ) -> Result<Vec<(i64, i64)>> {
        let rows = sqlx::query(
            "SELECT version, saved_at FROM configuration_history \
             WHERE webhook_id = $1 AND owner_scope = $2 AND saved_at >= $3 \
             ORDER BY version DESC LIMIT $4",
        )
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .bind(since_ms)
        .bind(MARKED_VERSIONS)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("saved_at")?, r.try_get("version")?)))
            .collect()
    }

    pub async fn list_history(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        page: &Page,
    ) -> Result<Paged<HistoryRecord>> {
        let size = page.size()?;
        let below = match page.opened(crate::Listing::History)? {
            None => i64::MAX,
            Some(v) => v
                .parse::<i64>()
                .map_err(|_| Error::invalid("cursor", "not a cursor from a previous page"))?,
        };
        self.require_webhook(scope, webhook_id).await?;
        let rows = sqlx::query(
            "SELECT webhook_id, version, actor_endpoint, actor_human, change, provenance, digest_before, digest_after, \
             configuration, saved_at FROM configuration_history \
             WHERE webhook_id = $1 AND owner_scope = $2 AND version < $3 ORDER BY version DESC LIMIT $4",
        )
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .bind(below)
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows.iter().map(history).collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |h| {
            crate::cursor(crate::Listing::History, &h.version.to_string())
        }))
    }

    /// One saved version of a webhook's configuration, for its owner only; `None` when the
    /// history no longer holds it (or never did).
    pub async fn history_version(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        version: i64,
    ) -> Result<Option<HistoryRecord>> {
        let row = sqlx::query(
            "SELECT webhook_id, version, actor_endpoint, actor_human, change, provenance, digest_before, digest_after, \
             configuration, saved_at FROM configuration_history \
             WHERE webhook_id = $1 AND owner_scope = $2 AND version = $3",
        )
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .bind(version)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(history).transpose()
    }
}
