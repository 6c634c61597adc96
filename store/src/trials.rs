//! Trials (issue 45): a plan's candidate running beside a webhook's live rules on its live
//! deliveries, routing nothing. A trial is kept with the forecast of the plan it came from
//! and what it observed so far, pre-aggregated (deliveries seen and evaluated; per
//! transition a count and up to [`EXAMPLES`] event ids), so its report reads counts and never
//! a delivery. Scoped like the webhook: another scope's trial is `not_found`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;
use sqlx::Row;
use sqlx::any::AnyRow;
use switchboard_model::guard::GuardTerms;
use switchboard_model::plan::{Routed, StoredPlan};
use switchboard_model::trial::{Forecast, Move, Observed, RuleTally, TrialEnd, TrialLimits};
use switchboard_model::{Configuration, Label};

use crate::error::{Error, Result};
use crate::scope::OwnerScope;
use crate::secrets::new_id;
use crate::webhooks::configuration_text;
use crate::{Store, json_col};

/// Example event ids kept per transition.
pub const EXAMPLES: usize = 20;

/// A trial to start: the candidate of plan `plan_id`, beside the saved configuration whose
/// digest is `base_config_digest`.
#[derive(Clone, Debug)]
pub struct NewTrial {
    pub webhook_id: String,
    pub owner_scope: OwnerScope,
    pub plan_id: String,
    pub candidate: Configuration,
    pub base_config_digest: String,
    pub forecast: Forecast,
    pub limits: TrialLimits,
    /// Who started it: an endpoint id or a person's login.
    pub started_by: String,
    /// The plan it started from, kept so it can be promoted after the plan's token expired.
    pub plan: StoredPlan,
}

/// A trial as stored, with what it observed so far.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    pub id: String,
    pub webhook_id: String,
    pub owner_scope: OwnerScope,
    pub plan_id: String,
    pub candidate: Configuration,
    pub candidate_digest: String,
    pub base_config_digest: String,
    pub forecast: Forecast,
    pub limits: TrialLimits,
    pub started_at: i64,
    pub started_by: String,
    pub ended_at: Option<i64>,
    pub end: Option<TrialEnd>,
    pub observed: Observed,
    /// Up to [`EXAMPLES`] event ids per observed transition.
    pub examples: BTreeMap<Move, Vec<String>>,
    /// The plan it started from; none for a trial started before plans were kept with it.
    pub plan: Option<StoredPlan>,
    /// A guard's terms (issue 46: the replaced configuration in the shadow of the confirmed
    /// one); none for a trial.
    pub guard: Option<GuardTerms>,
}

impl Trial {
    pub fn running(&self) -> bool {
        self.ended_at.is_none()
    }
}

/// What one batch of a trial's deliveries adds: counts and, per transition, the event ids.
#[derive(Clone, Debug, Default)]
pub struct TrialBatch {
    pub observed: Observed,
    pub examples: BTreeMap<Move, Vec<String>>,
}

impl TrialBatch {
    /// Counts one delivery (`after`: the candidate's decision; `None`: shed).
    pub fn record(&mut self, event_id: &str, before: &Label<'_>, after: Option<&Routed>) {
        self.observed.record(before, after);
        if let Some(after) = after.filter(|a| a.label != *before) {
            let ids = self
                .examples
                .entry((before.clone().into_owned(), after.label.clone()))
                .or_default();
            if ids.len() < EXAMPLES {
                ids.push(event_id.to_string());
            }
        }
    }
}

/// The forecast as stored: tuple keys are no JSON object keys.
#[derive(Serialize, Deserialize)]
struct StoredForecast {
    deliveries: u64,
    transitions: Vec<StoredMove>,
}

#[derive(Serialize, Deserialize)]
struct StoredMove {
    from: Label<'static>,
    to: Label<'static>,
    count: u64,
}

impl From<&Forecast> for StoredForecast {
    fn from(f: &Forecast) -> Self {
        StoredForecast {
            deliveries: f.deliveries,
            transitions: f
                .transitions
                .iter()
                .map(|((from, to), count)| StoredMove {
                    from: from.clone(),
                    to: to.clone(),
                    count: *count,
                })
                .collect(),
        }
    }
}

impl From<StoredForecast> for Forecast {
    fn from(f: StoredForecast) -> Self {
        Forecast {
            deliveries: f.deliveries,
            transitions: f
                .transitions
                .into_iter()
                .map(|m| ((m.from, m.to), m.count))
                .collect(),
        }
    }
}

macro_rules! trial_columns {
    () => {
        "id, webhook_id, owner_scope, plan_id, candidate, candidate_digest, base_config_digest, \
         forecast, max_deliveries, max_duration_ms, started_at, started_by, ended_at, end_reason, \
         seen, evaluated, plan, guard"
    };
}

fn count(row: &AnyRow, column: &str) -> Result<u64> {
    let n: i64 = row.try_get(column)?;
    u64::try_from(n).map_err(|_| Error::internal(format!("trials.{column} is negative")))
}

fn end_reason(text: Option<String>) -> Result<Option<TrialEnd>> {
    text.map(|t| {
        serde_json::from_value(serde_json::Value::String(t.clone()))
            .map_err(|_| Error::internal(format!("trials.end_reason {t:?} is no end")))
    })
    .transpose()
}

fn end_text(end: TrialEnd) -> String {
    match serde_json::to_value(end) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn trial(row: &AnyRow) -> Result<Trial> {
    let candidate: Configuration = json_col(row, "candidate")?;
    let forecast: StoredForecast = json_col(row, "forecast")?;
    let max_deliveries: Option<i64> = row.try_get("max_deliveries")?;
    let plan: Option<String> = row.try_get("plan")?;
    // A plan that no longer reads leaves the trial readable, only not promotable.
    let plan = plan.and_then(|text| serde_json::from_str::<StoredPlan>(&text).ok());
    let guard: Option<String> = row.try_get("guard")?;
    let guard = guard
        .map(|text| serde_json::from_str::<GuardTerms>(&text))
        .transpose()?;
    Ok(Trial {
        id: row.try_get("id")?,
        webhook_id: row.try_get("webhook_id")?,
        owner_scope: crate::parse_col(row, "owner_scope")?,
        plan_id: row.try_get("plan_id")?,
        candidate,
        candidate_digest: row.try_get("candidate_digest")?,
        base_config_digest: row.try_get("base_config_digest")?,
        forecast: forecast.into(),
        limits: TrialLimits {
            max_deliveries: max_deliveries.and_then(|n| u64::try_from(n).ok()),
            max_duration_ms: row.try_get("max_duration_ms")?,
        },
        started_at: row.try_get("started_at")?,
        started_by: row.try_get("started_by")?,
        ended_at: row.try_get("ended_at")?,
        end: end_reason(row.try_get("end_reason")?)?,
        observed: Observed {
            seen: count(row, "seen")?,
            evaluated: count(row, "evaluated")?,
            ..Observed::default()
        },
        examples: BTreeMap::new(),
        plan,
        guard,
    })
}

fn label(row: &AnyRow, column: &str) -> Result<Label<'static>> {
    let text: String = row.try_get(column)?;
    text.parse()
        .map_err(|e| Error::internal(format!("trial_transitions.{column}: {e}")))
}

impl Store {
    /// Starts a trial on the scope's webhook. At most `max_running` run at once per webhook:
    /// one more is a conflict that names the running one.
    pub async fn start_trial(&self, new: NewTrial, max_running: u32) -> Result<Trial> {
        if new.limits.max_duration_ms <= 0 {
            return Err(Error::invalid("max_duration", "must be positive"));
        }
        if new.limits.max_deliveries == Some(0) {
            return Err(Error::invalid("max_deliveries", "must be positive"));
        }
        let plan = serde_json::to_string(&new.plan)?;
        let id = new_id("tr_")?;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        require_owned(&mut tx, &new.webhook_id, &new.owner_scope).await?;
        let running = sqlx::query(
            "SELECT id FROM trials WHERE webhook_id = $1 AND ended_at IS NULL AND kind = 'trial' \
             ORDER BY started_at",
        )
        .bind(new.webhook_id.as_str())
        .fetch_all(&mut *tx)
        .await?;
        if running.len() >= max_running as usize {
            let ids: Vec<String> = running
                .iter()
                .map(|r| r.try_get("id"))
                .collect::<std::result::Result<_, _>>()?;
            return Err(Error::Conflict {
                message: format!(
                    "webhook {} already runs {} trial(s) ({}), the most it may; stop one first",
                    new.webhook_id,
                    ids.len(),
                    ids.join(", ")
                ),
            });
        }
        let started = insert(
            &mut tx,
            Watch {
                id: &id,
                kind: "trial",
                webhook_id: &new.webhook_id,
                owner_scope: &new.owner_scope,
                plan_id: &new.plan_id,
                candidate: &new.candidate,
                base_config_digest: &new.base_config_digest,
                forecast: &new.forecast,
                limits: &new.limits,
                started_at: now,
                started_by: &new.started_by,
                plan: Some(plan),
                guard: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(started)
    }

    /// A trial of the scope's, with everything it observed: `not_found` for an unknown id
    /// and for another scope's, alike.
    pub async fn get_trial(&self, scope: &OwnerScope, id: &str) -> Result<Trial> {
        let mut tx = self.snapshot().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE id = $1 AND owner_scope = $2 AND kind = 'trial'"
        ))
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        watch_of(&mut tx, row, "trial").await
    }

    /// A trial in any of a person's `scopes` (the console's read), with everything it
    /// observed: `not_found` for an unknown id and for one in no scope of theirs, alike.
    pub async fn trial_for_person(&self, id: &str, scopes: &[OwnerScope]) -> Result<Trial> {
        let mut tx = self.snapshot().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE id = $1 AND kind = 'trial'"
        ))
        .bind(crate::lookup_id(id))
        .fetch_optional(&mut *tx)
        .await?;
        let found = row.as_ref().map(trial).transpose()?;
        let Some(mut t) = found.filter(|t| scopes.contains(&t.owner_scope)) else {
            return Err(Error::not_found("trial"));
        };
        read_transitions(&mut tx, &mut t).await?;
        Ok(t)
    }

    /// The trials of the scope's webhook, running and ended, newest first, each with
    /// everything it observed.
    pub async fn list_trials(&self, scope: &OwnerScope, webhook_id: &str) -> Result<Vec<Trial>> {
        self.require_webhook(scope, webhook_id).await?;
        let mut tx = self.snapshot().await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE webhook_id = $1 AND owner_scope = $2 AND kind = 'trial' \
             ORDER BY started_at DESC, id DESC"
        ))
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .fetch_all(&mut *tx)
        .await?;
        observed_trials(&mut tx, &rows).await
    }

    /// The trials of the scope's webhook, running and ended, newest first, one page at a
    /// time, each with everything it observed: a webhook tried for months reads one page.
    pub async fn list_trials_page(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        page: &crate::Page,
    ) -> Result<crate::Paged<Trial>> {
        self.require_webhook(scope, webhook_id).await?;
        let size = page.size()?;
        let (before_ms, before_id) = page
            .position(crate::Listing::Trials)?
            .unwrap_or((i64::MAX, String::new()));
        let mut tx = self.snapshot().await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE webhook_id = $1 AND owner_scope = $2 AND kind = 'trial' \
             AND (started_at, id) < ($3, $4) ORDER BY started_at DESC, id DESC LIMIT $5"
        ))
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .bind(before_ms)
        .bind(before_id)
        .bind(size + 1)
        .fetch_all(&mut *tx)
        .await?;
        let trials = observed_trials(&mut tx, &rows).await?;
        Ok(crate::into_page(trials, size, |t| {
            crate::cursor_for(crate::Listing::Trials, t.started_at, &t.id)
        }))
    }

    /// The trials of the scope's webhook that were running at `at`, newest first (explain's
    /// read: a delivery's trials, however many the webhook had), without what they observed.
    pub async fn trials_running_at(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
        at: i64,
    ) -> Result<Vec<Trial>> {
        // Two halves, each by an index that holds only its own (migration 0025): those still
        // running, and those that ended after `at` — not the webhook's whole history. No
        // ORDER BY: SQLite would read the half in order by the index that has it instead
        // (`trials_by_kind`); the few rows are sorted here. `+started_at` keeps the second
        // half off the indexes by start.
        let rows = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE webhook_id = $1 AND owner_scope = $2 AND kind = 'trial' \
             AND ended_at IS NULL AND started_at <= $3 \
             UNION ALL SELECT ",
            trial_columns!(),
            " FROM trials WHERE webhook_id = $1 AND owner_scope = $2 AND kind = 'trial' \
             AND ended_at IS NOT NULL AND ended_at >= $3 AND +started_at <= $3"
        ))
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .bind(at)
        .fetch_all(&self.pool)
        .await?;
        let mut trials = rows.iter().map(trial).collect::<Result<Vec<_>>>()?;
        trials.sort_by(|a, b| (b.started_at, &b.id).cmp(&(a.started_at, &a.id)));
        Ok(trials)
    }

    /// The trials and guards running on a webhook (ingest's read: no scope, the webhook is
    /// its own): the live runner counts both alike.
    pub async fn running_trials(&self, webhook_id: &str) -> Result<Vec<Trial>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            // `+started_at`: by the running ones' index (and a sort of those few), not by the
            // webhook's whole history in start order.
            " FROM trials WHERE webhook_id = $1 AND ended_at IS NULL ORDER BY +started_at, id"
        ))
        .bind(crate::lookup_id(webhook_id))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(trial).collect()
    }

    /// Ends a trial of the scope's for `end`. Ending one that has ended changes nothing and
    /// answers it as it is (its first end stands).
    pub async fn end_trial(&self, scope: &OwnerScope, id: &str, end: TrialEnd) -> Result<Trial> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let rows = sqlx::query(
            "SELECT id, webhook_id, started_at, base_config_digest FROM trials \
             WHERE id = $1 AND owner_scope = $2 AND ended_at IS NULL AND kind = 'trial'",
        )
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        .fetch_all(&mut *tx)
        .await?;
        for row in &rows {
            end_in(&mut tx, row, now, end).await?;
        }
        tx.commit().await?;
        self.get_trial(scope, id).await
    }

    /// Ends a running trial or guard of the scope's for `end` (the live runner's end: its
    /// limits, or a moved configuration). One that has ended keeps its first end.
    pub async fn end_running(&self, scope: &OwnerScope, id: &str, end: TrialEnd) -> Result<()> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let rows = sqlx::query(
            "SELECT id, webhook_id, started_at, base_config_digest FROM trials \
             WHERE id = $1 AND owner_scope = $2 AND ended_at IS NULL",
        )
        .bind(id)
        .bind(scope.to_string())
        .fetch_all(&mut *tx)
        .await?;
        for row in &rows {
            end_in(&mut tx, row, now, end).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Ends every running trial whose `max_duration` has passed (a trial that sees no
    /// delivery ends on time too). Returns the webhooks whose trials ended.
    pub async fn end_overdue_trials(&self) -> Result<Vec<String>> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let rows = sqlx::query(
            "SELECT id, webhook_id, started_at, base_config_digest FROM trials \
             WHERE ended_at IS NULL AND started_at + max_duration_ms <= $1",
        )
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        let mut webhooks = Vec::with_capacity(rows.len());
        for row in &rows {
            end_in(&mut tx, row, now, TrialEnd::MaxDuration).await?;
            webhooks.push(row.try_get("webhook_id")?);
        }
        tx.commit().await?;
        Ok(webhooks)
    }

    /// Deletes up to `batch` trials that ended before `before` (ms), with their tallies (the
    /// foreign keys cascade); returns how many. Retention bounds what trials keep as it bounds
    /// the deliveries they watched.
    pub async fn purge_trials_ended_before(&self, before: i64, batch: u32) -> Result<u64> {
        let _turn = self.write_turn().await?;
        let done = sqlx::query(
            "DELETE FROM trials WHERE id IN \
             (SELECT id FROM trials WHERE ended_at IS NOT NULL AND ended_at < $1 \
              ORDER BY ended_at, id LIMIT $2)",
        )
        .bind(before)
        .bind(i64::from(batch.max(1)))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Adds a batch of a running trial's deliveries to its counts, in one transaction: the
    /// counts stay exact or the batch is not counted at all. The deliveries the trial has
    /// seen now; `None` for a trial that has ended, which takes nothing more.
    pub async fn record_trial(&self, trial_id: &str, batch: &TrialBatch) -> Result<Option<u64>> {
        let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let mut tx = self.begin_write().await?;
        let updated = sqlx::query(
            "UPDATE trials SET seen = seen + $1, evaluated = evaluated + $2 \
             WHERE id = $3 AND ended_at IS NULL RETURNING seen",
        )
        .bind(signed(batch.observed.seen))
        .bind(signed(batch.observed.evaluated))
        .bind(trial_id)
        .fetch_all(&mut *tx)
        .await?;
        let Some(row) = updated.first() else {
            return Ok(None);
        };
        let seen = count(row, "seen")?;
        // Unchanged decisions are kept as pairs from a label to itself, without examples.
        let unchanged = batch
            .observed
            .unchanged
            .iter()
            .map(|(label, n)| ((label.clone(), label.clone()), n));
        for (mv, n) in batch
            .observed
            .transitions
            .iter()
            .map(|(m, n)| (m.clone(), n))
            .chain(unchanged)
        {
            let (from, to) = (mv.0.to_string(), mv.1.to_string());
            let kept: Option<String> = sqlx::query(
                "SELECT examples FROM trial_transitions \
                 WHERE trial_id = $1 AND from_label = $2 AND to_label = $3",
            )
            .bind(trial_id)
            .bind(from.as_str())
            .bind(to.as_str())
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| r.try_get("examples"))
            .transpose()?;
            let mut examples: Vec<String> = match &kept {
                Some(text) => serde_json::from_str(text)?,
                None => Vec::new(),
            };
            for id in batch.examples.get(&mv).into_iter().flatten() {
                if examples.len() < EXAMPLES {
                    examples.push(id.clone());
                }
            }
            let examples = serde_json::to_string(&examples)?;
            let sql = if kept.is_some() {
                "UPDATE trial_transitions SET count = count + $4, examples = $5 \
                 WHERE trial_id = $1 AND from_label = $2 AND to_label = $3"
            } else {
                "INSERT INTO trial_transitions (trial_id, from_label, to_label, count, examples) \
                 VALUES ($1, $2, $3, $4, $5)"
            };
            sqlx::query(sql)
                .bind(trial_id)
                .bind(from.as_str())
                .bind(to.as_str())
                .bind(signed(*n))
                .bind(examples)
                .execute(&mut *tx)
                .await?;
        }
        for (rule, tally) in &batch.observed.rules {
            sqlx::query(
                "INSERT INTO trial_rules (trial_id, rule_id, first_matches, faults) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (trial_id, rule_id) DO UPDATE SET \
                 first_matches = trial_rules.first_matches + excluded.first_matches, \
                 faults = trial_rules.faults + excluded.faults",
            )
            .bind(trial_id)
            .bind(rule.as_str())
            .bind(signed(tally.first_matches))
            .bind(signed(tally.faults))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Some(seen))
    }
}

/// Ends one running trial (`row`: its id, webhook_id, started_at and base digest) at `now`.
/// Its count of deliveries seen becomes at least the deliveries its webhook stored in the
/// trial's window, decided by the configuration it ran beside or not decided yet: an offer a
/// killed control never made (queued in memory, or never queued because the router decided
/// late) is then seen and not evaluated, as the report says of a shed one, never missing.
/// Deliveries decided by rules saved after it started are not its. A batch another replica
/// counted meanwhile is kept: the larger count stands, row-locked by the update.
async fn end_in(
    tx: &mut crate::dialect::WriteTx,
    row: &AnyRow,
    now: i64,
    end: TrialEnd,
) -> Result<()> {
    let id: String = row.try_get("id")?;
    let webhook_id: String = row.try_get("webhook_id")?;
    let started_at: i64 = row.try_get("started_at")?;
    let base: String = row.try_get("base_config_digest")?;
    let stored: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM events WHERE webhook_id = $1 AND received_at >= $2 \
         AND received_at <= $3 AND (config_digest IS NULL OR config_digest = $4)",
    )
    .bind(webhook_id.as_str())
    .bind(started_at)
    .bind(now)
    .bind(base.as_str())
    .fetch_one(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE trials SET ended_at = $1, end_reason = $2, \
         seen = CASE WHEN seen > $3 THEN seen ELSE $3 END \
         WHERE id = $4 AND ended_at IS NULL",
    )
    .bind(now)
    .bind(end_text(end))
    .bind(stored)
    .bind(id.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A guard to start (issue 46): at a confirm, the configuration it replaced (`replaced`)
/// beside the one it saved (digest `confirmed_digest`), held to the plan's forecast.
#[derive(Clone, Debug)]
pub struct NewGuard {
    pub webhook_id: String,
    pub owner_scope: OwnerScope,
    pub plan_id: String,
    pub replaced: Configuration,
    pub confirmed_digest: String,
    pub forecast: Forecast,
    /// The bake window.
    pub limits: TrialLimits,
    /// Who confirmed (or accepted) the change.
    pub started_by: String,
    pub terms: GuardTerms,
}

impl Store {
    /// Starts a guard on the scope's webhook. A guard of an earlier change still running
    /// ends (`stale`): the configuration it watched is not the live one any more. Guards do
    /// not count against `--max-trials-per-webhook`.
    pub async fn start_guard(&self, new: NewGuard) -> Result<Trial> {
        if new.limits.max_duration_ms <= 0 {
            return Err(Error::invalid("max_duration", "must be positive"));
        }
        let terms = serde_json::to_string(&new.terms)?;
        let id = new_id("gd_")?;
        let now = self.now();
        let mut tx = self.begin_write().await?;
        require_owned(&mut tx, &new.webhook_id, &new.owner_scope).await?;
        let earlier = sqlx::query(
            "SELECT id, webhook_id, started_at, base_config_digest FROM trials \
             WHERE webhook_id = $1 AND ended_at IS NULL AND kind = 'guard'",
        )
        .bind(new.webhook_id.as_str())
        .fetch_all(&mut *tx)
        .await?;
        for row in &earlier {
            end_in(&mut tx, row, now, TrialEnd::Stale).await?;
        }
        let started = insert(
            &mut tx,
            Watch {
                id: &id,
                kind: "guard",
                webhook_id: &new.webhook_id,
                owner_scope: &new.owner_scope,
                plan_id: &new.plan_id,
                candidate: &new.replaced,
                base_config_digest: &new.confirmed_digest,
                forecast: &new.forecast,
                limits: &new.limits,
                started_at: now,
                started_by: &new.started_by,
                plan: None,
                guard: Some(terms),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(started)
    }

    /// A guard of the scope's with everything it observed: `not_found` for an unknown id and
    /// for another scope's, alike.
    pub async fn get_guard(&self, scope: &OwnerScope, id: &str) -> Result<Trial> {
        let mut tx = self.snapshot().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE id = $1 AND owner_scope = $2 AND kind = 'guard'"
        ))
        .bind(crate::lookup_id(id))
        .bind(scope.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        watch_of(&mut tx, row, "guard").await
    }

    /// The guard a plan's confirm started, if any (the newest).
    pub async fn guard_of_plan(&self, scope: &OwnerScope, plan_id: &str) -> Result<Option<Trial>> {
        let mut tx = self.snapshot().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE plan_id = $1 AND owner_scope = $2 AND kind = 'guard' \
             ORDER BY started_at DESC, id DESC LIMIT 1"
        ))
        .bind(plan_id)
        .bind(scope.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        match row {
            Some(row) => watch_of(&mut tx, Some(row), "guard").await.map(Some),
            None => Ok(None),
        }
    }

    /// The newest guard of the scope's webhook, if any; `not_found` for another scope's
    /// webhook, like an unknown one.
    pub async fn newest_guard(
        &self,
        scope: &OwnerScope,
        webhook_id: &str,
    ) -> Result<Option<Trial>> {
        self.require_webhook(scope, webhook_id).await?;
        let mut tx = self.snapshot().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE webhook_id = $1 AND owner_scope = $2 AND kind = 'guard' \
             ORDER BY started_at DESC, id DESC LIMIT 1"
        ))
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        match row {
            Some(row) => watch_of(&mut tx, Some(row), "guard").await.map(Some),
            None => Ok(None),
        }
    }

    /// Rewrites a guard's terms (what its breach did, once done).
    pub async fn set_guard_terms(&self, id: &str, terms: &GuardTerms) -> Result<()> {
        let terms = serde_json::to_string(terms)?;
        let _turn = self.write_turn().await?;
        sqlx::query("UPDATE trials SET guard = $1 WHERE id = $2 AND kind = 'guard'")
            .bind(terms)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Ends a running guard as breached with its terms as they now stand (the breach, and the
    /// version a revert saved). `false`: it had ended already (another replica judged first).
    pub async fn breach_guard(&self, id: &str, terms: &GuardTerms) -> Result<bool> {
        let terms = serde_json::to_string(terms)?;
        let _turn = self.write_turn().await?;
        let done = sqlx::query(
            "UPDATE trials SET ended_at = $1, end_reason = $2, guard = $3 \
             WHERE id = $4 AND kind = 'guard' AND ended_at IS NULL",
        )
        .bind(self.now())
        .bind(end_text(TrialEnd::Breached))
        .bind(terms)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

/// `not_found` unless the scope owns the webhook, inside the write that starts a trial or a
/// guard (the same answer for an unknown webhook and another scope's).
async fn require_owned(
    tx: &mut crate::dialect::WriteTx,
    webhook_id: &str,
    scope: &OwnerScope,
) -> Result<()> {
    let owned = sqlx::query("SELECT 1 FROM webhooks WHERE id = $1 AND owner_scope = $2")
        .bind(crate::lookup_id(webhook_id))
        .bind(scope.to_string())
        .fetch_optional(&mut **tx)
        .await?;
    match owned {
        Some(_) => Ok(()),
        None => Err(Error::not_found("webhook")),
    }
}

/// What a trial and a guard are stored as alike: a candidate beside a base, on live deliveries.
struct Watch<'a> {
    id: &'a str,
    /// `trial` or `guard`.
    kind: &'static str,
    webhook_id: &'a str,
    owner_scope: &'a OwnerScope,
    plan_id: &'a str,
    candidate: &'a Configuration,
    base_config_digest: &'a str,
    forecast: &'a Forecast,
    limits: &'a TrialLimits,
    started_at: i64,
    started_by: &'a str,
    /// A trial's plan, as JSON.
    plan: Option<String>,
    /// A guard's terms, as JSON.
    guard: Option<String>,
}

async fn insert(tx: &mut crate::dialect::WriteTx, w: Watch<'_>) -> Result<Trial> {
    let row = sqlx::query(concat!(
        "INSERT INTO trials (id, webhook_id, owner_scope, plan_id, candidate, candidate_digest, \
         base_config_digest, forecast, max_deliveries, max_duration_ms, started_at, started_by, \
         plan, kind, guard) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING ",
        trial_columns!()
    ))
    .bind(w.id)
    .bind(w.webhook_id)
    .bind(w.owner_scope.to_string())
    .bind(w.plan_id)
    .bind(configuration_text(w.candidate)?)
    .bind(w.candidate.digest())
    .bind(w.base_config_digest)
    .bind(serde_json::to_string(&StoredForecast::from(w.forecast))?)
    .bind(
        w.limits
            .max_deliveries
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
    )
    .bind(w.limits.max_duration_ms)
    .bind(w.started_at)
    .bind(w.started_by)
    .bind(w.plan)
    .bind(w.kind)
    .bind(w.guard)
    .fetch_all(&mut **tx)
    .await?;
    match row.first() {
        Some(row) => trial(row),
        None => Err(Error::internal("a started trial returned no row")),
    }
}

/// A trial or guard row with everything it observed, or `not_found` naming `what`. Read in
/// the same snapshot as the row, so its counts add up even while a batch commits.
async fn watch_of(
    conn: &mut AnyConnection,
    row: Option<AnyRow>,
    what: &'static str,
) -> Result<Trial> {
    let Some(row) = row else {
        return Err(Error::not_found(what));
    };
    let mut t = trial(&row)?;
    read_transitions(conn, &mut t).await?;
    Ok(t)
}

/// Trial rows with everything each observed, read on `conn` (one snapshot).
async fn observed_trials(conn: &mut AnyConnection, rows: &[AnyRow]) -> Result<Vec<Trial>> {
    let mut trials = Vec::with_capacity(rows.len());
    for row in rows {
        let mut t = trial(row)?;
        read_transitions(conn, &mut t).await?;
        trials.push(t);
    }
    Ok(trials)
}

/// What a trial observed beyond its row: its transitions with their examples, and its rules.
async fn read_transitions(conn: &mut AnyConnection, t: &mut Trial) -> Result<()> {
    let rows = sqlx::query(
        "SELECT from_label, to_label, count, examples FROM trial_transitions WHERE trial_id = $1",
    )
    .bind(t.id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    for row in &rows {
        let (from, to) = (label(row, "from_label")?, label(row, "to_label")?);
        let n = count(row, "count")?;
        if from == to {
            t.observed.unchanged.insert(from, n);
            continue;
        }
        let mv = (from, to);
        t.observed.transitions.insert(mv.clone(), n);
        t.examples.insert(mv, json_col(row, "examples")?);
    }
    let rules =
        sqlx::query("SELECT rule_id, first_matches, faults FROM trial_rules WHERE trial_id = $1")
            .bind(t.id.as_str())
            .fetch_all(&mut *conn)
            .await?;
    for row in &rules {
        t.observed.rules.insert(
            row.try_get("rule_id")?,
            RuleTally {
                first_matches: count(row, "first_matches")?,
                faults: count(row, "faults")?,
            },
        );
    }
    Ok(())
}
