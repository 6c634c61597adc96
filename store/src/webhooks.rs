//! Webhooks (SPEC-0006): id, owner scope, source type, signing secret, grant, the
//! reject-unverified switch, and the saved configuration with its version and digest.
//! Configuration changes after creation go through [`Store::save_configuration`].

use std::fmt;

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::acts::{AuditRecord, OperatorAction};
use crate::allowances::check_queues;
use crate::error::{Error, Result};
use crate::scope::OwnerScope;
use crate::sealing::{SealingKey, sealed_by};
use crate::secrets::{new_id, random_hex};
use crate::tenancy::owner_exists;
use crate::{Actor, Store, flag, json_opt, parse_col};

pub use switchboard_model::SourceType;
use switchboard_model::approval::ApprovalRule;
use switchboard_model::guard::OnBreach;
use switchboard_model::provenance::{self, Provenance};
use switchboard_model::{Configuration, TrustedActors, WebhookName};

#[derive(Clone, PartialEq)]
pub struct Webhook {
    /// `wh_` and 128 random bits: the id is in the public ingest URL, so it must not be guessable.
    pub id: String,
    /// What a person calls it (issue 48), shown beside the id; `None`: unnamed.
    pub name: Option<WebhookName>,
    pub owner_scope: OwnerScope,
    pub source_type: SourceType,
    /// The HMAC signing secret, opened from its sealed form (`crate::sealing`): in memory in
    /// the clear because verifying a signature needs it, never at rest.
    pub secret: String,
    /// The queues this webhook may route to; the first is the default queue.
    pub grant: Vec<String>,
    /// Reject unverified deliveries at the door (401, nothing stored) instead of storing them.
    pub reject_unverified: bool,
    /// The saved configuration, read once at the row (a row that does not read is an internal
    /// error naming the webhook, never an empty configuration).
    pub configuration: Configuration,
    pub config_version: i64,
    pub config_digest: String,
    /// Installed packs' provenance, in install order.
    pub provenance: Provenance,
    pub trusted_actors: Option<TrustedActors>,
    pub created_at: i64,
    /// Who may put a plan live on this webhook (issue 20).
    pub confirm_policy: ConfirmPolicy,
    /// How long a claim on one of its todos lasts; `None`: the instance default (issue 21).
    pub claim_ttl: Option<std::time::Duration>,
    /// What a guard does on a breach when its plan does not say, set by an operator
    /// (issue 46); `None`: revert.
    pub guard_on_breach: Option<OnBreach>,
    /// How many people must accept a plan, set by an operator (issue 47); `None`: the
    /// default rule.
    pub approval_rule: Option<ApprovalRule>,
}

impl Webhook {
    /// The approval rule plans here are counted under: the operator's, or the default for
    /// the webhook's kind of scope ([`ApprovalRule::default_for`]).
    pub fn approval_rule(&self) -> ApprovalRule {
        self.approval_rule.clone().unwrap_or_else(|| {
            ApprovalRule::default_for(matches!(self.owner_scope, OwnerScope::Human(_)))
        })
    }
}

/// Who may put a rule-pack plan live on a webhook. ADR-0028: "an agent's acceptance puts
/// nothing live" is `Person`; `SelfConfirm` keeps the endpoint that planned able to confirm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConfirmPolicy {
    /// The endpoint that planned may confirm (the default, and the behaviour before issue 20).
    #[default]
    SelfConfirm,
    /// An endpoint's confirm puts the plan before a person, who accepts or rejects it; any
    /// other save by an endpoint is refused `approval_required`.
    Person,
}

impl ConfirmPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfirmPolicy::SelfConfirm => "self",
            ConfirmPolicy::Person => "person",
        }
    }
}

impl std::str::FromStr for ConfirmPolicy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "self" => Ok(ConfirmPolicy::SelfConfirm),
            "person" => Ok(ConfirmPolicy::Person),
            other => Err(format!("{other:?} is no confirm policy: self or person")),
        }
    }
}

impl fmt::Display for ConfirmPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Webhook {
    /// Its display name, empty when it has none (how pages and listings show "no name").
    pub fn display_name(&self) -> &str {
        self.name.as_ref().map_or("", WebhookName::as_str)
    }

    /// The queue a `default` decision goes to.
    pub fn default_queue(&self) -> Option<&str> {
        self.grant.first().map(String::as_str)
    }
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("owner_scope", &self.owner_scope)
            .field("source_type", &self.source_type)
            .field("secret", &"<redacted>")
            .field("grant", &self.grant)
            .field("reject_unverified", &self.reject_unverified)
            .field("config_version", &self.config_version)
            .field("config_digest", &self.config_digest)
            .field("created_at", &self.created_at)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug)]
pub struct NewWebhook {
    pub owner_scope: OwnerScope,
    /// Its display name, if the creator gave one.
    pub name: Option<WebhookName>,
    pub source_type: SourceType,
    /// The forge's secret when the forge side already has one; `None` generates 256 bits.
    pub secret: Option<String>,
    pub grant: Vec<String>,
    pub reject_unverified: bool,
    /// The first configuration (version 1); `None` is no rules and no params.
    pub configuration: Option<Configuration>,
    pub actor: Actor,
}

macro_rules! webhook_columns {
    () => {
        "id, owner_scope, source_type, secret, grant_queues, reject_unverified, configuration, \
         config_version, config_digest, provenance, trusted_actors, created_at"
    };
}
pub(crate) use webhook_columns;

/// A webhook row, its sealed secret opened with `key` (the row's id is the associated data).
pub(crate) fn webhook(row: &AnyRow, key: &SealingKey) -> Result<Webhook> {
    let grant: String = row.try_get("grant_queues")?;
    let id: String = row.try_get("id")?;
    let sealed: String = row.try_get("secret")?;
    let configuration: String = row.try_get("configuration")?;
    let configuration = serde_json::from_str(&configuration).map_err(|e| {
        Error::internal(format!(
            "the stored configuration of webhook {id} does not read: {e}"
        ))
    })?;
    let provenance: String = row.try_get("provenance")?;
    let provenance = provenance::read(&provenance).map_err(|e| {
        Error::internal(format!(
            "the stored provenance of webhook {id} does not read: {e}"
        ))
    })?;
    Ok(Webhook {
        secret: key.open(&id, &sealed)?,
        // Read where selected (migration 0023, with the policy columns); only checked names
        // are written, so one that does not read is ours.
        name: match row.try_get::<Option<String>, _>("name") {
            Ok(text) => text
                .map(|t| {
                    WebhookName::parse(&t)
                        .map_err(|e| Error::internal(format!("stored webhook name: {e}")))
                })
                .transpose()?
                .flatten(),
            Err(sqlx::Error::ColumnNotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        id,
        owner_scope: parse_col(row, "owner_scope")?,
        source_type: parse_col(row, "source_type")?,
        grant: serde_json::from_str(&grant)?,
        reject_unverified: flag(row, "reject_unverified")?,
        configuration,
        config_version: row.try_get("config_version")?,
        config_digest: row.try_get("config_digest")?,
        provenance,
        trusted_actors: json_opt::<serde_json::Value>(row, "trusted_actors")?
            .filter(|v| !v.is_null())
            .map(|v| TrustedActors::from_value(&v)),
        created_at: row.try_get("created_at")?,
        // Read where the query selects it (`get_webhook`, `set_confirm_policy`); elsewhere the
        // default, so writes keep working on a database not yet at 0007 (upgrade tests).
        confirm_policy: match row.try_get::<String, _>("confirm_policy") {
            Ok(text) => text
                .parse()
                .map_err(|e| Error::internal(format!("stored confirm_policy: {e}")))?,
            Err(_) => ConfirmPolicy::default(),
        },
        // Likewise read where selected (migration 0009); a stored value out of range is ours.
        claim_ttl: match row.try_get::<Option<i64>, _>("claim_ttl_secs") {
            Ok(secs) => secs
                .map(|s| {
                    u64::try_from(s)
                        .map(std::time::Duration::from_secs)
                        .map_err(|_| Error::internal(format!("stored claim_ttl_secs {s}")))
                })
                .transpose()?,
            Err(sqlx::Error::ColumnNotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        // Likewise (migration 0018).
        guard_on_breach: match row.try_get::<Option<String>, _>("guard_on_breach") {
            Ok(word) => word
                .map(|w| {
                    OnBreach::parse(&w)
                        .ok_or_else(|| Error::internal(format!("stored guard_on_breach {w:?}")))
                })
                .transpose()?,
            Err(sqlx::Error::ColumnNotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        // Likewise (migration 0020); a stored rule that does not read is ours.
        approval_rule: match row.try_get::<Option<String>, _>("approval_rule") {
            Ok(text) => text
                .map(|t| {
                    serde_json::from_str(&t)
                        .map_err(|e| Error::internal(format!("stored approval_rule: {e}")))
                })
                .transpose()?,
            Err(sqlx::Error::ColumnNotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
    })
}

/// The columns only a database at the current schema has, selected where a webhook is read
/// for what they decide (`confirm_policy`, 0007; `claim_ttl_secs`, 0009; `guard_on_breach`,
/// 0018; `approval_rule`, 0020).
macro_rules! webhook_policy_columns {
    () => {
        ", confirm_policy, claim_ttl_secs, guard_on_breach, approval_rule"
    };
}

/// A statement that reads a whole webhook: `$head`, every column ([`webhook_columns`], the
/// policy columns, and the name where the schema has it, 0023), then `$tail`. Chosen by
/// `$names` (the store's schema flag), so a store opened at an earlier schema (upgrade tests)
/// still reads and writes the old way.
macro_rules! whole_webhook_sql {
    ($names:expr, $head:expr, $tail:expr) => {
        if $names {
            concat!(
                $head,
                webhook_columns!(),
                webhook_policy_columns!(),
                ", name",
                $tail
            )
        } else {
            concat!($head, webhook_columns!(), webhook_policy_columns!(), $tail)
        }
    };
    // Statements that upgrade tests run at any earlier schema read the base columns there.
    ($names:expr, $head:expr, $tail:expr, base before names) => {
        if $names {
            concat!(
                $head,
                webhook_columns!(),
                webhook_policy_columns!(),
                ", name",
                $tail
            )
        } else {
            concat!($head, webhook_columns!(), $tail)
        }
    };
}

/// How long a rewrite of secrets on PostgreSQL waits for older transactions before it drops
/// the dead rows (`Store::scrub_rewritten_secrets`).
const SCRUB_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A stored configuration is at most this large; the router's own limits (32 rules, 4 KiB
/// expressions, 64 KiB params) stay well inside it.
pub const MAX_CONFIGURATION_BYTES: usize = 512 * 1024;

/// The canonical text to store, within the size the store allows. Rule validation proper
/// (expressions, ids, the grant) is the router's, before this.
pub(crate) fn configuration_text(configuration: &Configuration) -> Result<String> {
    let text = configuration.canonical_json();
    if text.len() > MAX_CONFIGURATION_BYTES {
        return Err(Error::invalid(
            "configuration",
            format!("larger than {MAX_CONFIGURATION_BYTES} bytes"),
        ));
    }
    Ok(text)
}

fn grant_text(grant: &[String]) -> Result<String> {
    check_queues(
        "grant",
        grant,
        "name at least one queue; the first is the default queue",
    )?;
    Ok(serde_json::to_string(grant)?)
}

/// A given signing secret: 16–256 characters, so an HMAC over it means something.
fn secret_or_new(secret: Option<String>) -> Result<String> {
    match secret {
        None => random_hex(32),
        Some(s) if (16..=256).contains(&s.len()) && !s.chars().any(char::is_control) => Ok(s),
        Some(_) => Err(Error::invalid(
            "secret",
            "16–256 characters, no control characters",
        )),
    }
}

impl Store {
    /// Creates a webhook at configuration version 1 and records that version in its history.
    /// An operator's act (the CLI, `switchboard up`): the grant is taken as given. Agents
    /// create webhooks through [`Store::create_webhook_within_allowance`].
    pub async fn create_webhook(&self, new: NewWebhook) -> Result<Webhook> {
        self.insert_webhook(new, false).await
    }

    /// Creates a webhook as [`Store::create_webhook`] does, for an agent (the API's
    /// `CreateWebhook`): refused with [`Error::GrantNotAllowed`], nothing written, unless every
    /// queue of the grant is in the grant allowance an operator set for the owner scope
    /// ([`crate::within_allowance`]; a scope without one may create none). The allowance is
    /// read, locked, in the transaction that inserts the webhook.
    pub async fn create_webhook_within_allowance(&self, new: NewWebhook) -> Result<Webhook> {
        self.insert_webhook(new, true).await
    }

    async fn insert_webhook(&self, new: NewWebhook, within_allowance: bool) -> Result<Webhook> {
        let grant = grant_text(&new.grant)?;
        let secret = secret_or_new(new.secret)?;
        let configuration = new.configuration.unwrap_or_default();
        let config_text = configuration_text(&configuration)?;
        let digest = configuration.digest();
        let id = new_id("wh_")?;
        let now = self.now();
        let scope = new.owner_scope.to_string();

        let mut tx = self.begin_write().await?;
        if !owner_exists(&mut tx, &new.owner_scope).await? {
            return Err(Error::invalid("owner_scope", "no such human or team"));
        }
        if within_allowance {
            let allowed = crate::allowances::locked_allowance(&mut tx, self.backend, &scope)
                .await?
                .unwrap_or_default();
            if let Err(outside) = crate::within_allowance(&new.grant, &allowed) {
                // Dropped, not committed: nothing is written.
                return Err(Error::GrantNotAllowed {
                    owner_scope: scope,
                    outside,
                    allowed,
                });
            }
        }
        // A database before 0023 (upgrade tests write the old way) has no name column.
        let insert = if self.names {
            concat!(
                "INSERT INTO webhooks (id, owner_scope, source_type, secret, grant_queues, reject_unverified, \
                 configuration, config_version, config_digest, provenance, trusted_actors, created_at, name) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, '{}', NULL, $9, $10) RETURNING ",
                webhook_columns!(),
                ", name"
            )
        } else {
            concat!(
                "INSERT INTO webhooks (id, owner_scope, source_type, secret, grant_queues, reject_unverified, \
                 configuration, config_version, config_digest, provenance, trusted_actors, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, '{}', NULL, $9) RETURNING ",
                webhook_columns!()
            )
        };
        let mut query = sqlx::query(insert)
            .bind(id.as_str())
            .bind(scope.as_str())
            .bind(new.source_type.as_str())
            .bind(self.sealing.seal(&id, &secret)?.as_str())
            .bind(grant.as_str())
            .bind(i32::from(new.reject_unverified))
            .bind(config_text.as_str())
            .bind(digest.as_str())
            .bind(now);
        if self.names {
            query = query.bind(new.name.as_ref().map(WebhookName::as_str));
        }
        let row = query.fetch_one(&mut *tx).await?;
        let created = webhook(&row, &self.sealing)?;
        sqlx::query(
            "INSERT INTO configuration_history (webhook_id, version, owner_scope, actor_endpoint, actor_human, \
             change, provenance, digest_before, digest_after, configuration, saved_at) \
             VALUES ($1, 1, $2, $3, $4, $5, NULL, NULL, $6, $7, $8)",
        )
        .bind(id.as_str())
        .bind(scope.as_str())
        .bind(new.actor.endpoint_id.as_deref())
        .bind(new.actor.human_login.as_deref())
        .bind(r#"{"op":"create_webhook"}"#)
        .bind(digest.as_str())
        .bind(config_text.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        // Its first version is a change to what routes where like any other (issue 47),
        // whoever created it: the entry the log's start from history would have written.
        if self.change_log {
            let entry = crate::change_log::configuration_entry(crate::change_log::Version {
                at: now,
                scope: &scope,
                webhook_id: &id,
                version: 1,
                digest_before: None,
                digest_after: Some(digest.clone()),
                endpoint: new.actor.endpoint_id.clone(),
                human: new.actor.human_login.clone(),
                provenance: Default::default(),
                op: "create_webhook".to_string(),
            });
            self.append_change(&mut tx, entry).await?;
        }
        let mut record = AuditRecord::new(OperatorAction::CreateWebhook, created.id.as_str())
            .with("owner_scope", scope.as_str())
            .with("source", created.source_type.to_string())
            .with("grant", created.grant.join(","))
            .with("reject_unverified", created.reject_unverified.to_string());
        if let Some(name) = &created.name {
            record = record.with("name", name.as_str());
        }
        self.record_act(&mut tx, Some(&new.owner_scope), record)
            .await?;
        tx.commit().await?;
        Ok(created)
    }

    /// A webhook the scope owns. Unknown, malformed and other-scope ids are all `not_found`.
    pub async fn get_webhook(&self, scope: &OwnerScope, id: &str) -> Result<Webhook> {
        let row = sqlx::query(whole_webhook_sql!(
            self.names,
            "SELECT ",
            " FROM webhooks WHERE id = $1 AND owner_scope = $2"
        ))
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(|r| webhook(r, &self.sealing))
            .unwrap_or(Err(Error::not_found("webhook")))
    }

    /// A webhook by id alone, for ingest: a forge delivery carries no scope, only the id.
    pub async fn webhook_for_ingest(&self, id: &str) -> Result<Webhook> {
        let row = sqlx::query(concat!(
            "SELECT ",
            webhook_columns!(),
            " FROM webhooks WHERE id = $1"
        ))
        .bind(crate::lookup_id(id))
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(|r| webhook(r, &self.sealing))
            .unwrap_or(Err(Error::not_found("webhook")))
    }

    /// The scope's webhooks, oldest first, one page at a time (the operators' listing).
    pub async fn list_webhooks_page(
        &self,
        scope: &OwnerScope,
        page: &crate::Page,
    ) -> Result<crate::Paged<Webhook>> {
        let size = page.size()?;
        let (after_ms, after_id) = page
            .position(crate::Listing::ScopeWebhooks)?
            .unwrap_or((i64::MIN, String::new()));
        let rows = sqlx::query(whole_webhook_sql!(
            self.names,
            "SELECT ",
            " FROM webhooks WHERE owner_scope = $1 AND (created_at, id) > ($2, $3) \
              ORDER BY created_at, id LIMIT $4"
        ))
        .bind(scope.to_string())
        .bind(after_ms)
        .bind(after_id)
        .bind(size + 1)
        .fetch_all(&self.pool)
        .await?;
        let items = rows
            .iter()
            .map(|r| webhook(r, &self.sealing))
            .collect::<Result<Vec<_>>>()?;
        Ok(crate::into_page(items, size, |w| {
            crate::cursor_for(crate::Listing::ScopeWebhooks, w.created_at, &w.id)
        }))
    }

    /// The scope's webhooks, oldest first.
    pub async fn list_webhooks(&self, scope: &OwnerScope) -> Result<Vec<Webhook>> {
        let rows = sqlx::query(whole_webhook_sql!(
            self.names,
            "SELECT ",
            " FROM webhooks WHERE owner_scope = $1 ORDER BY created_at, id"
        ))
        .bind(scope.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| webhook(r, &self.sealing)).collect()
    }

    /// Deletes a webhook with its events, todos, history, plans and lease; its change-log
    /// entries stay, and the deletion appends one (naming whoever this handle acts for).
    pub async fn delete_webhook(&self, scope: &OwnerScope, id: &str) -> Result<()> {
        self.delete_webhook_where(scope, id, false).await
    }

    /// [`Store::delete_webhook`] for an endpoint: refused `approval_required` while the
    /// webhook's `confirm_policy` is `person` (ADR-0028: an agent's call takes nothing live
    /// away either). One conditional statement, so a switch to `person` cannot be overtaken.
    pub async fn delete_webhook_by_endpoint(&self, scope: &OwnerScope, id: &str) -> Result<()> {
        self.delete_webhook_where(scope, id, true).await
    }

    async fn delete_webhook_where(
        &self,
        scope: &OwnerScope,
        id: &str,
        unless_person_confirms: bool,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let statement = if unless_person_confirms {
            "DELETE FROM webhooks WHERE id = $1 AND owner_scope = $2 AND confirm_policy = 'self' \
             RETURNING id, config_version, config_digest"
        } else {
            "DELETE FROM webhooks WHERE id = $1 AND owner_scope = $2 \
             RETURNING id, config_version, config_digest"
        };
        let deleted = sqlx::query(statement)
            .bind(crate::lookup_id(id))
            .bind(scope.to_string())
            // To the end of the statement: see `store` (writes that return rows).
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .next();
        let Some(row) = deleted else {
            drop(tx);
            let kept = sqlx::query("SELECT id FROM webhooks WHERE id = $1 AND owner_scope = $2")
                .bind(crate::lookup_id(id))
                .bind(scope.to_string())
                .fetch_optional(&self.pool)
                .await?;
            return match kept {
                Some(row) if unless_person_confirms => Err(Error::ApprovalRequired {
                    webhook_id: row.try_get("id")?,
                }),
                _ => Err(Error::not_found("webhook")),
            };
        };
        let webhook_id: String = row.try_get("id")?;
        let version: i64 = row.try_get("config_version")?;
        let digest: String = row.try_get("config_digest")?;
        if self.change_log {
            let entry = switchboard_model::change_log::ChangeEntry {
                seq: 0,
                at_ms: self.now(),
                kind: switchboard_model::change_log::ChangeKind::WebhookDelete,
                actor: self.acting_actor(),
                approvers: Vec::new(),
                owner_scope: Some(scope.to_string()),
                webhook_id: Some(webhook_id.clone()),
                version: Some(version),
                digest_before: Some(digest),
                digest_after: None,
                evidence: Default::default(),
                detail: std::collections::BTreeMap::from([
                    ("action".to_string(), "delete_webhook".to_string()),
                    ("target".to_string(), webhook_id),
                ]),
                prev_hash: String::new(),
            };
            self.append_change(&mut tx, entry).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Replaces the signing secret with `secret`, or with 256 fresh random bits.
    pub async fn rotate_webhook_secret(
        &self,
        scope: &OwnerScope,
        id: &str,
        secret: Option<String>,
    ) -> Result<Webhook> {
        let secret = self.sealing.seal(id, &secret_or_new(secret)?)?;
        let query = sqlx::query(whole_webhook_sql!(
            self.names,
            "UPDATE webhooks SET secret = $1 WHERE id = $2 AND owner_scope = $3 RETURNING ",
            "",
            base before names
        ))
        .bind(secret.as_str());
        self.set_one(query, scope, id, |_| None).await
    }

    /// Sets the queues a webhook may route to (an operator's act; agents never widen a grant).
    pub async fn set_webhook_grant(
        &self,
        scope: &OwnerScope,
        id: &str,
        grant: &[String],
    ) -> Result<Webhook> {
        let grant = grant_text(grant)?;
        let query = sqlx::query(whole_webhook_sql!(
            self.names,
            "UPDATE webhooks SET grant_queues = $1 WHERE id = $2 AND owner_scope = $3 RETURNING ",
            "",
            base before names
        ))
        .bind(grant.as_str());
        self.set_one(query, scope, id, |w| {
            Some(
                AuditRecord::new(OperatorAction::SetWebhookGrant, w.id.as_str())
                    .with("grant", w.grant.join(",")),
            )
        })
        .await
    }

    /// Sets who may put a plan live: an operator's act ([`Store::by_operator`]), or an
    /// editor's on the console ([`Store::by_person`]); an agent never relaxes it.
    pub async fn set_confirm_policy(
        &self,
        scope: &OwnerScope,
        id: &str,
        policy: ConfirmPolicy,
    ) -> Result<Webhook> {
        let query = sqlx::query(whole_webhook_sql!(
            self.names,
            "UPDATE webhooks SET confirm_policy = $1 WHERE id = $2 AND owner_scope = $3 RETURNING ",
            ""
        ))
        .bind(policy.as_str());
        self.set_one(query, scope, id, |w| {
            Some(
                AuditRecord::new(OperatorAction::SetWebhookConfirmPolicy, w.id.as_str())
                    .with("policy", w.confirm_policy.as_str()),
            )
        })
        .await
    }

    /// Names the webhook, or with `None` clears its name (issue 48). Display only, so an
    /// editor's act (a person in the console, an endpoint with `rename_webhook`, an operator);
    /// audited like the other settings, never a change to what routes where.
    pub async fn set_webhook_name(
        &self,
        scope: &OwnerScope,
        id: &str,
        name: Option<&WebhookName>,
    ) -> Result<Webhook> {
        let query = sqlx::query(whole_webhook_sql!(
            self.names,
            "UPDATE webhooks SET name = $1 WHERE id = $2 AND owner_scope = $3 RETURNING ",
            ""
        ))
        .bind(name.map(WebhookName::as_str));
        self.set_one(query, scope, id, |w| {
            Some(
                AuditRecord::new(OperatorAction::RenameWebhook, w.id.as_str())
                    .with("name", w.name.as_ref().map_or("", WebhookName::as_str)),
            )
        })
        .await
    }

    /// Sets what a guard does on a breach when its plan does not say (issue 46); `None`
    /// returns it to the default, `revert`. An operator's act, like the confirm policy.
    pub async fn set_guard_on_breach(
        &self,
        scope: &OwnerScope,
        id: &str,
        on_breach: Option<OnBreach>,
    ) -> Result<Webhook> {
        let query = sqlx::query(whole_webhook_sql!(
            self.names,
            "UPDATE webhooks SET guard_on_breach = $1 WHERE id = $2 AND owner_scope = $3 RETURNING ",
            ""
        ))
        .bind(on_breach.map(OnBreach::as_str));
        self.set_one(query, scope, id, |w| {
            Some(
                AuditRecord::new(OperatorAction::SetWebhookGuardDefault, w.id.as_str()).with(
                    "on_breach",
                    w.guard_on_breach.map_or("default", OnBreach::as_str),
                ),
            )
        })
        .await
    }

    /// Sets how many people must accept a plan on this webhook (issue 47); `None` returns it
    /// to the default rule. An operator's act: refused `invalid_argument` when it cannot be
    /// met.
    pub async fn set_approval_rule(
        &self,
        scope: &OwnerScope,
        id: &str,
        rule: Option<&ApprovalRule>,
    ) -> Result<Webhook> {
        if let Some(rule) = rule {
            rule.check()
                .map_err(|e| Error::invalid("approval_rule", e.to_string()))?;
        }
        let text = rule
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| Error::internal(format!("approval rule: {e}")))?;
        let query = sqlx::query(whole_webhook_sql!(
            self.names,
            "UPDATE webhooks SET approval_rule = $1 WHERE id = $2 AND owner_scope = $3 RETURNING ",
            ""
        ))
        .bind(text);
        self.set_one(query, scope, id, |w| {
            Some(
                AuditRecord::new(OperatorAction::SetWebhookApprovalRule, w.id.as_str()).with(
                    "rule",
                    w.approval_rule
                        .as_ref()
                        .map_or_else(|| "default".to_string(), ApprovalRule::words),
                ),
            )
        })
        .await
    }

    /// Sets how long a claim on this webhook's todos lasts; `None` returns it to the
    /// instance default. An operator's act: the lease is how long a crashed agent's work
    /// stays stranded, so an agent does not choose it. Claims already made keep their expiry.
    pub async fn set_claim_ttl(
        &self,
        scope: &OwnerScope,
        id: &str,
        ttl: Option<std::time::Duration>,
    ) -> Result<Webhook> {
        let secs = ttl.map(crate::todos::check_claim_ttl).transpose()?;
        let query = sqlx::query(whole_webhook_sql!(
            self.names,
            "UPDATE webhooks SET claim_ttl_secs = $1 WHERE id = $2 AND owner_scope = $3 RETURNING ",
            ""
        ))
        .bind(secs);
        self.set_one(query, scope, id, |w| {
            Some(
                AuditRecord::new(OperatorAction::SetWebhookClaimTtl, w.id.as_str()).with(
                    "ttl_secs",
                    w.claim_ttl
                        .map_or("default".to_string(), |t| t.as_secs().to_string()),
                ),
            )
        })
        .await
    }

    /// Turns rejecting unverified deliveries at the door on or off.
    pub async fn set_reject_unverified(
        &self,
        scope: &OwnerScope,
        id: &str,
        reject: bool,
    ) -> Result<Webhook> {
        let query = sqlx::query(whole_webhook_sql!(
            self.names,
            "UPDATE webhooks SET reject_unverified = $1 WHERE id = $2 AND owner_scope = $3 RETURNING ",
            "",
            base before names
        ))
        .bind(i32::from(reject));
        self.set_one(query, scope, id, |_| None).await
    }
}

impl Store {
    /// Runs an `UPDATE webhooks SET … = $1 WHERE id = $2 AND owner_scope = $3 RETURNING …`
    /// whose `$1` is bound, and reads the webhook back: `not_found` for an unknown id or
    /// another scope's, alike. `act` names the change for the record of whoever this handle
    /// acts for ([`Store::by_operator`]), written in the same transaction.
    async fn set_one<'q>(
        &self,
        query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
        scope: &OwnerScope,
        id: &'q str,
        act: impl FnOnce(&Webhook) -> Option<AuditRecord> + Send,
    ) -> Result<Webhook> {
        let mut tx = self.begin_write().await?;
        let row = query
            .bind(crate::lookup_id(id))
            .bind(scope.to_string())
            // To the end of the statement: see `store` (writes that return rows).
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .next();
        let updated = row
            .as_ref()
            .map(|r| webhook(r, &self.sealing))
            .unwrap_or(Err(Error::not_found("webhook")))?;
        if let Some(record) = act(&updated) {
            self.record_act(&mut tx, Some(scope), record).await?;
        }
        tx.commit().await?;
        Ok(updated)
    }
}

impl Store {
    /// The key this store seals webhook secrets with.
    pub fn sealing_key(&self) -> &SealingKey {
        &self.sealing
    }

    /// Seals, in place and in one transaction, every webhook secret still in the clear: a
    /// database written before secrets were sealed keeps verifying its webhooks' deliveries.
    /// Returns how many were sealed (none after the first start).
    pub(crate) async fn seal_plaintext_secrets(&self) -> Result<usize> {
        let mut tx = self.begin_write().await?;
        let rows = sqlx::query("SELECT id, secret FROM webhooks WHERE secret NOT LIKE 'sealed:%'")
            .fetch_all(&mut *tx)
            .await?;
        for row in &rows {
            let id: String = row.try_get("id")?;
            let plain: String = row.try_get("secret")?;
            sqlx::query("UPDATE webhooks SET secret = $1 WHERE id = $2")
                .bind(self.sealing.seal(&id, &plain)?.as_str())
                .bind(id.as_str())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        if !rows.is_empty() {
            self.scrub_rewritten_secrets().await?;
            tracing::info!(sealed = rows.len(), "webhook secrets sealed at rest");
        }
        Ok(rows.len())
    }

    /// After secrets were rewritten in place (sealed, or sealed again with a new key), leaves
    /// no earlier copy in the database's files: SQLite zeroes the old cells as it writes
    /// (`secure_delete`), `VACUUM` writes the file anew without the free pages an earlier
    /// release left unzeroed, and a truncating checkpoint drops the WAL's older page images;
    /// PostgreSQL rewrites the table (`VACUUM FULL`), so its dead rows go with the old file.
    ///
    /// PostgreSQL keeps a dead row that a transaction begun before the rewrite may still see, so
    /// the rewrite first waits (at most [`SCRUB_WAIT`]) for such transactions of this database
    /// to end; one still running after that keeps its rows until the next rotation.
    async fn scrub_rewritten_secrets(&self) -> Result<()> {
        match self.backend {
            crate::Backend::Sqlite => {
                // secure_delete zeroes what is deleted from now on; a database an earlier
                // release wrote holds freed pages it never zeroed (a deleted webhook's secret,
                // a rotated one). VACUUM writes the file anew, without free pages; the
                // checkpoint then empties the WAL of every older page image.
                sqlx::query("VACUUM").execute(&self.pool).await?;
                // A reader still on an older snapshot (another process on the file) blocks
                // the truncation: the checkpoint answers busy. Tried again for a while, and
                // said if the WAL could still not be emptied.
                let deadline = std::time::Instant::now() + SCRUB_WAIT;
                loop {
                    let busy: i64 = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                        .fetch_one(&self.pool)
                        .await?
                        .try_get(0)?;
                    if busy == 0 {
                        break;
                    }
                    if std::time::Instant::now() >= deadline {
                        tracing::warn!(
                            "the WAL still holds the secrets' earlier page images: another connection is reading the database; they go at its next checkpoint"
                        );
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
            crate::Backend::Postgres => {
                let since: f64 =
                    sqlx::query_scalar("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8")
                        .fetch_one(&self.pool)
                        .await?;
                let deadline = std::time::Instant::now() + SCRUB_WAIT;
                loop {
                    let older: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
                         AND pid <> pg_backend_pid() AND xact_start < to_timestamp($1)",
                    )
                    .bind(since)
                    .fetch_one(&self.pool)
                    .await?;
                    if older == 0 || std::time::Instant::now() >= deadline {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                sqlx::query("VACUUM FULL webhooks")
                    .execute(&self.pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// Refuses to start with a key that did not seal the stored secrets, naming the key that
    /// did (by id), so a wrong key is found at start, not as unverified deliveries.
    pub(crate) async fn check_sealing_key(&self) -> Result<()> {
        let rows = sqlx::query("SELECT secret FROM webhooks WHERE secret NOT LIKE $1 LIMIT 1")
            .bind(format!("sealed:v1:{}:%", self.sealing.id()))
            .fetch_all(&self.pool)
            .await?;
        if let Some(row) = rows.first() {
            let other: String = row.try_get("secret")?;
            return Err(Error::invalid(
                "secret_key",
                format!(
                    "the webhook secrets in this database were sealed with key {}, not with the key given ({}); start with the key that sealed them",
                    sealed_by(&other).unwrap_or("unknown"),
                    self.sealing.id()
                ),
            ));
        }
        Ok(())
    }

    /// Seals every webhook secret again with `new` in one transaction (key rotation: the
    /// store's own key opens them). Afterwards only `new` opens this database's secrets.
    pub async fn reseal_secrets(&self, new: &SealingKey) -> Result<usize> {
        let mut tx = self.begin_write().await?;
        let rows = sqlx::query("SELECT id, secret FROM webhooks")
            .fetch_all(&mut *tx)
            .await?;
        for row in &rows {
            let id: String = row.try_get("id")?;
            let sealed: String = row.try_get("secret")?;
            let plain = self.sealing.open(&id, &sealed)?;
            sqlx::query("UPDATE webhooks SET secret = $1 WHERE id = $2")
                .bind(new.seal(&id, &plain)?.as_str())
                .bind(id.as_str())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        self.scrub_rewritten_secrets().await?;
        Ok(rows.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_need_a_default_and_no_repeats() {
        assert!(grant_text(&[]).is_err());
        assert!(grant_text(&["a".into(), "a".into()]).is_err());
        assert_eq!(
            grant_text(&["a".into(), "b".into()]).unwrap(),
            r#"["a","b"]"#
        );
    }

    #[test]
    fn source_types_round_trip() {
        for t in SourceType::ALL {
            assert_eq!(t.as_str().parse::<SourceType>().unwrap(), t);
        }
        assert!("gitlab".parse::<SourceType>().is_err());
    }
}
