//! Redrives (issue 21 item 6): re-routing a webhook's quarantined, faulted, pending or (when
//! asked: issue 46, recovering dropped work) dropped events under its current configuration, planned and confirmed like a pack install. The plan's
//! token is stored only as its SHA-256 hex, bound to the webhook, its owner scope and the
//! configuration version planned against; it expires and is consumed once. The plan keeps, per
//! event, the decision it saw, so the old decision stays readable after a confirm replaced it.

use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;
use switchboard_model::plan::StaleCause;
use switchboard_model::{Label, RecordedDecision, RecordedFault};

use crate::error::{Error, Result};
use crate::scope::OwnerScope;
use crate::secrets::{hashes_match, new_id};
use crate::todos::{NewTodo, TodoInsert, insert_todo_in};
use crate::{Store, dialect, flag, json_opt};

/// Events one redrive plans when the caller names no limit.
pub const REDRIVE_DEFAULT_LIMIT: u32 = 100;
/// The most events one redrive plans: each is evaluated on a router while the owner waits.
pub const REDRIVE_MAX_LIMIT: u32 = 1000;
/// The most event ids a filter names.
const MAX_FILTER_IDS: usize = REDRIVE_MAX_LIMIT as usize;

/// Where an event stands that a redrive may select: the decisions that made no todo, and
/// events no router has decided yet. `Drop` is selected only when asked for: dropping is
/// usually meant; recovering what a change dropped by mistake is the exception.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Redrivable {
    Quarantine,
    Fault,
    Pending,
    Drop,
}

impl Redrivable {
    /// The name in filters and plans (`pending`: not routed yet; otherwise the decision label).
    pub fn as_str(self) -> &'static str {
        match self {
            Redrivable::Quarantine => "quarantine",
            Redrivable::Fault => "fault",
            Redrivable::Pending => "pending",
            Redrivable::Drop => "drop",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Self::Quarantine, Self::Fault, Self::Pending, Self::Drop]
            .into_iter()
            .find(|r| r.as_str() == name)
    }
}

/// Which events a redrive plans: of the states in `states`, received in `[since, until]`
/// (ms, inclusive), decided by configuration version `config_version` when given, and, when
/// `event_ids` is not empty, only those.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedriveFilter {
    pub states: Vec<Redrivable>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub event_ids: Vec<String>,
    /// Only events decided by this version of the webhook's configuration.
    pub config_version: Option<i64>,
}

impl RedriveFilter {
    /// Checks the filter, naming the field at fault. No states means quarantine, fault and
    /// pending (never drop unless named).
    pub fn checked(mut self) -> Result<Self> {
        if self.states.is_empty() {
            self.states = vec![
                Redrivable::Quarantine,
                Redrivable::Fault,
                Redrivable::Pending,
            ];
        }
        self.states.sort_unstable();
        self.states.dedup();
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since > until
        {
            return Err(Error::invalid("filter.until", "must not be before since"));
        }
        if self.event_ids.len() > MAX_FILTER_IDS {
            return Err(Error::invalid(
                "filter.event_ids",
                format!("at most {MAX_FILTER_IDS} ids"),
            ));
        }
        if self
            .event_ids
            .iter()
            .any(|id| id.is_empty() || id.len() > 200)
        {
            return Err(Error::invalid("filter.event_ids", "ids are 1–200 bytes"));
        }
        if self.config_version.is_some_and(|v| v < 1) {
            return Err(Error::invalid(
                "filter.config_version",
                "a configuration version is 1 or more",
            ));
        }
        Ok(self)
    }
}

/// Checks a redrive's limit: 0 is the default, more than [`REDRIVE_MAX_LIMIT`] is refused.
pub fn redrive_limit(limit: u32) -> Result<u32> {
    match limit {
        0 => Ok(REDRIVE_DEFAULT_LIMIT),
        1..=REDRIVE_MAX_LIMIT => Ok(limit),
        _ => Err(Error::invalid(
            "limit",
            format!("at most {REDRIVE_MAX_LIMIT} (0: {REDRIVE_DEFAULT_LIMIT})"),
        )),
    }
}

/// An event a redrive selected and what its plan saw on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub event: crate::Event,
    pub state: Redrivable,
    /// The redrive that recorded the decision the plan saw (`None`: ingest did, or none yet).
    pub seen_redrive: Option<String>,
}

/// One event of a redrive plan: what it was and what the current configuration decides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RedriveEntry {
    pub event_id: String,
    pub kind: String,
    pub received_at: i64,
    pub before: Redrivable,
    /// The decision recorded before the redrive (absent for a pending event): kept here so it
    /// is not lost when the confirm records the new one.
    pub before_decision: Option<RecordedDecision>,
    pub before_fault: Option<RecordedFault>,
    pub seen_redrive: Option<String>,
    /// The label the current configuration gives it (`queue:<name>`, `drop`, …).
    pub after: Label<'static>,
    pub decision: RecordedDecision,
    pub fault: Option<RecordedFault>,
    /// The todo a queue decision makes.
    pub todo: Option<PlannedTodo>,
}

impl RedriveEntry {
    /// A change is a decision with another label, or any decision for a pending event; a
    /// confirm records changes only and leaves the rest as they are.
    pub fn changes(&self) -> bool {
        self.before == Redrivable::Pending || self.after != self.before.as_str()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedTodo {
    pub queue: String,
    pub rule_id: Option<String>,
}

#[derive(Clone, Debug)]
pub struct NewRedrive {
    pub webhook_id: String,
    pub owner_scope: OwnerScope,
    pub token_hash: String,
    pub base_config_version: i64,
    pub base_config_digest: String,
    pub entries: Vec<RedriveEntry>,
    pub expires_at: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Redrive {
    pub id: String,
    pub webhook_id: String,
    pub owner_scope: OwnerScope,
    pub base_config_version: i64,
    pub base_config_digest: String,
    pub entries: Vec<RedriveEntry>,
    pub created_at: i64,
    pub expires_at: i64,
    pub used_at: Option<i64>,
}

/// What a confirm did with one planned change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveOutcome {
    pub event_id: String,
    /// False: something routed the event after the plan saw it (ingest's retry loop, another
    /// redrive) or it was deleted; it was left as it is.
    pub applied: bool,
    pub todo_id: Option<String>,
    /// The todo is new (false: the delivery already had one, which is kept, not doubled).
    pub todo_created: bool,
}

macro_rules! redrive_columns {
    () => {
        "id, webhook_id, owner_scope, base_config_version, base_config_digest, plan, created_at, \
         expires_at, used_at, token_hash"
    };
}

/// A confirm's update of one event, to be completed with the guard that it is still as seen.
macro_rules! set_decision {
    () => {
        "UPDATE events SET decision = $1, fault = $2, routed = 1, routed_at = $3, \
         config_version = $4, config_digest = $5, redrive_id = $6 WHERE id = $7 AND "
    };
}

fn redrive(row: &AnyRow) -> Result<Redrive> {
    let plan: String = row.try_get("plan")?;
    Ok(Redrive {
        id: row.try_get("id")?,
        webhook_id: row.try_get("webhook_id")?,
        owner_scope: crate::parse_col(row, "owner_scope")?,
        base_config_version: row.try_get("base_config_version")?,
        base_config_digest: row.try_get("base_config_digest")?,
        entries: serde_json::from_str(&plan)?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        used_at: row.try_get("used_at")?,
    })
}

fn stale(found: &Redrive, now: i64) -> Error {
    Error::stale(if found.used_at.is_some() || found.expires_at > now {
        StaleCause::Used
    } else {
        StaleCause::Expired
    })
}

/// Where a stored event stands, if a redrive may select it.
fn redrivable(routed: bool, decision: Option<&RecordedDecision>) -> Option<Redrivable> {
    if !routed {
        return Some(Redrivable::Pending);
    }
    match decision?.decision {
        Label::Quarantine => Some(Redrivable::Quarantine),
        Label::Fault => Some(Redrivable::Fault),
        Label::Drop => Some(Redrivable::Drop),
        _ => None,
    }
}

impl Store {
    /// The events of the scope's webhook a redrive selects, oldest first: in the filter's
    /// states, without a todo for their delivery (work already made is never redriven), at most
    /// `limit`, holding at most [`crate::LOAD_BYTES`] of bodies. The flag: more matched.
    pub async fn redrive_candidates(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        filter: &RedriveFilter,
        limit: u32,
    ) -> Result<(Vec<Candidate>, bool)> {
        self.require_webhook(scope, webhook_id).await?;
        // Static text either way (no SQL is assembled from input): with or without the
        // configuration version's condition.
        macro_rules! candidates {
            ($by_version:literal) => {
                concat!(
                    "SELECT e.id, e.routed, e.decision, e.redrive_id, CAST(LENGTH(e.body) AS BIGINT) AS size FROM events e \
                     WHERE e.webhook_id = $1 AND e.owner_scope = $2 AND e.received_at >= $3 AND e.received_at <= $4 ",
                    $by_version,
                    "AND NOT EXISTS (SELECT 1 FROM todos t WHERE t.webhook_id = e.webhook_id \
                       AND t.delivery_id = e.delivery_id AND t.verified = e.verified) \
                     ORDER BY e.received_at, e.id"
                )
            };
        }
        let sql = if filter.config_version.is_some() {
            candidates!("AND e.config_version = $5 ")
        } else {
            candidates!("")
        };
        let mut query = sqlx::query(sql)
            .bind(crate::lookup_id(webhook_id))
            .bind(scope.to_string())
            .bind(filter.since.unwrap_or(i64::MIN))
            .bind(filter.until.unwrap_or(i64::MAX));
        if let Some(version) = filter.config_version {
            query = query.bind(version);
        }
        let rows = query.fetch_all(&self.pool).await?;
        let mut picked = Vec::new();
        let mut more = false;
        let mut bytes = 0usize;
        for row in &rows {
            let id: String = row.try_get("id")?;
            if !filter.event_ids.is_empty() && !filter.event_ids.contains(&id) {
                continue;
            }
            let decision = json_opt(row, "decision")?;
            let Some(state) = redrivable(flag(row, "routed")?, decision.as_ref()) else {
                continue;
            };
            if !filter.states.contains(&state) {
                continue;
            }
            let size = usize::try_from(row.try_get::<i64, _>("size")?).unwrap_or(usize::MAX);
            if picked.len() == limit as usize
                || (!picked.is_empty() && bytes.saturating_add(size) > crate::LOAD_BYTES)
            {
                more = true;
                break;
            }
            bytes = bytes.saturating_add(size);
            picked.push((id, state, row.try_get::<Option<String>, _>("redrive_id")?));
        }
        let mut candidates = Vec::with_capacity(picked.len());
        for (id, state, seen_redrive) in picked {
            // Deleted meanwhile (retention): not planned.
            match self.get_event(scope, &id).await {
                Ok(event) => candidates.push(Candidate {
                    event,
                    state,
                    seen_redrive,
                }),
                Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok((candidates, more))
    }

    /// Stores a redrive plan for a webhook the scope owns.
    pub async fn insert_redrive(&self, new: NewRedrive) -> Result<Redrive> {
        let plan = serde_json::to_string(&new.entries)?;
        let id = new_id("rd_")?;
        let _turn = self.write_turn().await?;
        let row = sqlx::query(concat!(
            "INSERT INTO redrives (id, token_hash, webhook_id, owner_scope, base_config_version, \
             base_config_digest, plan, created_at, expires_at) \
             SELECT $1, $2, id, owner_scope, $3, $4, $5, $6, $7 FROM webhooks \
             WHERE id = $8 AND owner_scope = $9 RETURNING ",
            redrive_columns!()
        ))
        .bind(id.as_str())
        .bind(new.token_hash.as_str())
        .bind(new.base_config_version)
        .bind(new.base_config_digest.as_str())
        .bind(plan.as_str())
        .bind(self.now())
        .bind(new.expires_at)
        .bind(crate::lookup_id(&new.webhook_id))
        .bind(new.owner_scope.to_string())
        // To the end of the statement: see `store` (writes that return rows).
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .next();
        row.as_ref()
            .map(redrive)
            .unwrap_or(Err(Error::not_found("webhook")))
    }

    /// Applies exactly the plan of `token_hash` on `webhook_id`, in one transaction:
    /// `not_found` for an unknown token or another scope's or webhook's; `plan_stale` for a
    /// used or expired one, or when the webhook's configuration version moved since the plan
    /// (`current_version` says to what). Each planned change is recorded only while the event
    /// is still as the plan saw it (a conditional update), so no event is routed twice; a queue
    /// decision makes its todo unless the delivery has one.
    pub async fn confirm_redrive(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        token_hash: &str,
    ) -> Result<(Redrive, Vec<RedriveOutcome>)> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(dialect::for_update!(
            self.backend,
            "SELECT ",
            redrive_columns!(),
            " FROM redrives WHERE token_hash = $1"
        ))
        .bind(token_hash)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(Error::not_found("plan"));
        };
        let stored: String = row.try_get("token_hash")?;
        let mut found = redrive(&row)?;
        if !hashes_match(&stored, token_hash)
            || found.owner_scope != *scope
            || found.webhook_id != webhook_id
        {
            return Err(Error::not_found("plan"));
        }
        if found.used_at.is_some() || found.expires_at <= now {
            return Err(stale(&found, now));
        }
        let version: Option<i64> = sqlx::query(dialect::for_update!(
            self.backend,
            "SELECT config_version FROM webhooks WHERE id = $1 AND owner_scope = $2"
        ))
        .bind(found.webhook_id.as_str())
        .bind(scope.to_string())
        .fetch_optional(&mut *tx)
        .await?
        .map(|r| r.try_get("config_version"))
        .transpose()?;
        let Some(version) = version else {
            return Err(Error::not_found("webhook"));
        };
        if version != found.base_config_version {
            return Err(Error::stale_at(version));
        }
        let mut outcomes = Vec::new();
        for entry in found.entries.iter().filter(|e| e.changes()) {
            let decision = serde_json::to_string(&entry.decision)?;
            let fault = entry
                .fault
                .as_ref()
                .map(serde_json::to_string)
                .transpose()?;
            // Still as the plan saw it: unrouted, or decided by the same hand (ingest, or the
            // same earlier redrive) — never by a routing since.
            let sql = match entry.before {
                Redrivable::Pending => concat!(set_decision!(), "routed = 0"),
                _ => concat!(
                    set_decision!(),
                    "routed = 1 AND COALESCE(redrive_id, '') = $8"
                ),
            };
            let mut update = sqlx::query(sql)
                .bind(decision.as_str())
                .bind(fault.as_deref())
                .bind(now)
                .bind(found.base_config_version)
                .bind(found.base_config_digest.as_str())
                .bind(found.id.as_str())
                .bind(entry.event_id.as_str());
            if entry.before != Redrivable::Pending {
                update = update.bind(entry.seen_redrive.clone().unwrap_or_default());
            }
            let applied = update.execute(&mut *tx).await?.rows_affected() == 1;
            let todo: Option<TodoInsert> = match (&entry.todo, applied) {
                (Some(t), true) => Some(
                    insert_todo_in(
                        &mut tx,
                        &entry.event_id,
                        &NewTodo {
                            queue: t.queue.clone(),
                            rule_id: t.rule_id.clone(),
                        },
                        now,
                    )
                    .await?,
                ),
                _ => None,
            };
            outcomes.push(RedriveOutcome {
                event_id: entry.event_id.clone(),
                applied,
                todo_id: todo.as_ref().map(|t| t.todo.id.clone()),
                todo_created: todo.as_ref().is_some_and(|t| t.inserted),
            });
        }
        let result = serde_json::to_string(&outcomes)?;
        let done = sqlx::query(
            "UPDATE redrives SET used_at = $1, result = $2 WHERE id = $3 AND used_at IS NULL",
        )
        .bind(now)
        .bind(result.as_str())
        .bind(found.id.as_str())
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(Error::stale(StaleCause::Used));
        }
        // Issue 47: decisions re-recorded are a change to what routed where.
        {
            let applied = outcomes.iter().filter(|o| o.applied).count();
            let todos = outcomes.iter().filter(|o| o.todo_created).count();
            let entry = switchboard_model::change_log::ChangeEntry {
                seq: 0,
                at_ms: now,
                kind: switchboard_model::change_log::ChangeKind::Redrive,
                actor: self.acting_actor(),
                approvers: Vec::new(),
                owner_scope: Some(found.owner_scope.to_string()),
                webhook_id: Some(found.webhook_id.clone()),
                version: Some(found.base_config_version),
                digest_before: None,
                digest_after: Some(found.base_config_digest.clone()),
                evidence: std::collections::BTreeMap::from([(
                    "redrive".to_string(),
                    found.id.clone(),
                )]),
                detail: std::collections::BTreeMap::from([
                    ("applied".to_string(), applied.to_string()),
                    ("todos_created".to_string(), todos.to_string()),
                ]),
                prev_hash: String::new(),
            };
            self.append_change(&mut tx, entry).await?;
        }
        tx.commit().await?;
        found.used_at = Some(now);
        Ok((found, outcomes))
    }

    /// The token hash of the scope's redrive plan `id`: a guard's recovery (issue 46) is
    /// confirmed by a person who never held its token.
    pub async fn redrive_token_hash(&self, scope: &OwnerScope, id: &str) -> Result<String> {
        let row = sqlx::query("SELECT token_hash FROM redrives WHERE id = $1 AND owner_scope = $2")
            .bind(crate::lookup_id(id))
            .bind(scope.to_string())
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(row) => Ok(row.try_get("token_hash")?),
            None => Err(Error::not_found("redrive")),
        }
    }

    /// A webhook's redrive by id, with what its confirm did (`None` before a confirm), for the
    /// scope that owns it: the record of every decision a redrive replaced.
    pub async fn get_redrive(
        &self,
        scope: &OwnerScope,
        id: &str,
    ) -> Result<(Redrive, Option<Vec<RedriveOutcome>>)> {
        let row = sqlx::query(concat!(
            "SELECT ",
            redrive_columns!(),
            ", result FROM redrives WHERE id = $1 AND owner_scope = $2"
        ))
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Err(Error::not_found("redrive"));
        };
        let result: Option<String> = row.try_get("result")?;
        let outcomes = result.map(|r| serde_json::from_str(&r)).transpose()?;
        Ok((redrive(&row)?, outcomes))
    }

    /// Deletes up to `batch` of the redrive plans never confirmed that expired before `before`
    /// (ms); returns how many. A confirmed redrive stays (until its webhook goes): it is the
    /// record of the decisions it replaced, and its events name it.
    pub async fn purge_redrives_expired_before(&self, before: i64, batch: u32) -> Result<u64> {
        let _turn = self.write_turn().await?;
        let done = sqlx::query(
            "DELETE FROM redrives WHERE id IN \
             (SELECT id FROM redrives WHERE used_at IS NULL AND expires_at < $1 \
              ORDER BY expires_at, id LIMIT $2)",
        )
        .bind(before)
        .bind(i64::from(batch.max(1)))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_checked_field_by_field() {
        let all = RedriveFilter::default()
            .checked()
            .expect("no filter is every state");
        assert_eq!(all.states.len(), 3);
        let backwards = RedriveFilter {
            since: Some(2),
            until: Some(1),
            ..Default::default()
        };
        assert!(matches!(
            backwards.checked(),
            Err(Error::InvalidArgument {
                field: "filter.until",
                ..
            })
        ));
        assert_eq!(redrive_limit(0).ok(), Some(REDRIVE_DEFAULT_LIMIT));
        assert!(matches!(
            redrive_limit(REDRIVE_MAX_LIMIT + 1),
            Err(Error::InvalidArgument { field: "limit", .. })
        ));
        assert_eq!(Redrivable::parse("fault"), Some(Redrivable::Fault));
        assert_eq!(Redrivable::parse("queue:x"), None);
    }
}
