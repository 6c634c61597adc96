//! Guards (issue 46) in control: a confirm starts one (the replaced configuration runs in the
//! shadow of the confirmed one, counted by the live runner as a trial is), the runner asks
//! [`judge_after_batch`] after every batch it counts, and a breach reverts the change — the
//! replaced version saved again through the same locked write as a confirm — and recovers what
//! it lost with a redrive (applied at once under `confirm_policy: self`; waiting for a person
//! under `person`); on `alert`, or when the webhook changed again since the confirm, the breach
//! is only recorded. The judge itself is pure (`switchboard_model::guard`).

use switchboard_model::guard::{
    GuardPlan, GuardReport, GuardTerms, OnBreach, Recovery, RecoveryState, judge,
};
use switchboard_model::trial::{Forecast, TrialLimits};
use switchboard_model::{ChangeProvenance, ConfigurationChange};

use crate::error::{Error, Result};
use crate::secrets::sha256_hex;
use crate::store::{
    Actor, ConfirmPolicy, NewGuard, Redrivable, RedriveFilter, SaveConfiguration, Store, Trial,
    Webhook,
};
use crate::trials::Asker;

/// How long a recovery waits for a person before its redrive plan expires.
pub const RECOVERY_WAITS_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// The most deliveries one recovery redrives (the redrive limit); the oldest first.
const RECOVERY_LIMIT: u32 = crate::store::REDRIVE_MAX_LIMIT;

/// A confirmed change, as a guard watches it.
pub struct Confirmed<'a> {
    /// The webhook as the confirm read it: its configuration is the one replaced.
    pub webhook: &'a Webhook,
    pub plan_id: &'a str,
    /// The plan's replay, reduced to counts: what the person approved.
    pub forecast: Forecast,
    /// The guard the plan carried; none for a plan stored before guards were planned (then
    /// the defaults, with the webhook's on-breach).
    pub guard: Option<GuardPlan>,
    pub confirmed_version: i64,
    pub confirmed_digest: &'a str,
    /// Who confirmed (or accepted) it.
    pub started_by: &'a str,
}

/// Starts the guard of a confirmed change. A guard that cannot start is logged, never a
/// reason to undo the confirm: the change is saved either way.
pub async fn start(store: &Store, c: Confirmed<'_>) -> Option<Trial> {
    let webhook = c.webhook;
    let plan = match c.guard {
        Some(plan) => plan,
        None => GuardPlan::new(&c.forecast, &Default::default(), webhook.guard_on_breach)
            .unwrap_or_default(),
    };
    let started = store
        .start_guard(NewGuard {
            webhook_id: webhook.id.clone(),
            owner_scope: webhook.owner_scope.clone(),
            plan_id: c.plan_id.to_string(),
            replaced: webhook.configuration.clone(),
            confirmed_digest: c.confirmed_digest.to_string(),
            forecast: c.forecast,
            limits: TrialLimits {
                max_deliveries: Some(plan.max_deliveries),
                max_duration_ms: plan.max_duration_ms,
            },
            started_by: c.started_by.to_string(),
            terms: GuardTerms {
                on_breach: plan.on_breach,
                on_breach_from: plan.on_breach_from,
                confirmed_version: c.confirmed_version,
                replaced_version: webhook.config_version,
                thresholds: plan.thresholds,
                replaced_packs: webhook.provenance.clone(),
                replaced_trusted_actors: webhook.trusted_actors.clone(),
                breach: None,
                reverted_version: None,
                recovery: None,
            },
        })
        .await;
    match started {
        Ok(guard) => Some(guard),
        Err(e) => {
            tracing::warn!(webhook = %webhook.id, plan = %c.plan_id, error = %e.log_text(), "guard not started");
            None
        }
    }
}

/// Judges a running guard after a batch was counted; on a breach, acts on it once (the replica
/// that ends the guard as breached reverts and recovers; any other finds it ended and does
/// nothing).
pub async fn judge_after_batch(ctx: &crate::redrive::Ctx<'_>, guard: &Trial) {
    let store = ctx.store;
    if guard.guard.is_none() {
        return;
    }
    let read = match store.get_guard(&guard.owner_scope, &guard.id).await {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(guard = %guard.id, error = %e.log_text(), "guard not read");
            return;
        }
    };
    let Some(mut terms) = read.guard.clone().filter(|_| read.running()) else {
        return;
    };
    let Some(breach) = judge(&read.forecast, &read.observed.reversed(), &terms.thresholds) else {
        return;
    };
    terms.breach = Some(breach.clone());
    match store.breach_guard(&read.id, &terms).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(guard = %read.id, error = %e.log_text(), "guard breach not recorded");
            return;
        }
    }
    tracing::warn!(guard = %read.id, webhook = %read.webhook_id, plan = %read.plan_id, breach = %breach, "guard breached");
    let reverted = match terms.on_breach {
        OnBreach::Alert => None,
        OnBreach::Revert => revert(store, &read, &terms, &breach.to_string()).await,
    };
    let metrics = switchboard_telemetry::metrics();
    let Some(version) = reverted else {
        metrics.guard_breach("alerted");
        return;
    };
    metrics.guard_breach("reverted");
    terms.reverted_version = Some(version);
    if let Err(e) = store.mark_plan_reverted(&read.plan_id).await {
        tracing::warn!(guard = %read.id, plan = %read.plan_id, error = %e.log_text(), "plan not marked reverted");
    }
    // Recorded before the recovery, so a reader sees the revert at once.
    record_terms(store, &read, &terms).await;
    terms.recovery = recover(ctx, &read, &terms).await;
    if let Some(r) = &terms.recovery {
        metrics.guard_recovered(r.state.as_str(), r.todos_created);
    }
    record_terms(store, &read, &terms).await;
}

async fn record_terms(store: &Store, guard: &Trial, terms: &GuardTerms) {
    if let Err(e) = store.set_guard_terms(&guard.id, terms).await {
        tracing::warn!(guard = %guard.id, error = %e.log_text(), "guard terms not recorded");
    }
}

/// Saves the replaced version again, if the confirmed one is still saved; the new version,
/// or `None` when the webhook changed again since the confirm (the guard never reverts over
/// a later change) or the save failed.
async fn revert(store: &Store, guard: &Trial, terms: &GuardTerms, why: &str) -> Option<i64> {
    let saved = store
        .save_configuration(
            &guard.owner_scope,
            &guard.webhook_id,
            SaveConfiguration {
                expected_version: Some(terms.confirmed_version),
                configuration: guard.candidate.clone(),
                actor: Actor::operator(),
                change: ConfigurationChange::op("guard_revert"),
                provenance: Some(ChangeProvenance {
                    plan: guard.plan_id.clone(),
                    reverted_by: Some("guard".into()),
                    guard: Some(guard.id.clone()),
                    breach: Some(why.to_string()),
                    ..ChangeProvenance::default()
                }),
                installed_packs: Some(terms.replaced_packs.clone()),
                trusted_actors: Some(terms.replaced_trusted_actors.clone()),
                plan_token_hash: None,
            },
        )
        .await;
    match saved {
        Ok(saved) => Some(saved.version),
        Err(Error::FailedPrecondition { .. }) => {
            tracing::warn!(guard = %guard.id, "the webhook changed after the confirm: breach recorded, not reverted");
            None
        }
        Err(e) => {
            tracing::warn!(guard = %guard.id, error = %e.log_text(), "revert failed");
            None
        }
    }
}

/// After a revert: a redrive of the deliveries the reverted configuration decided other than
/// by a todo (drops, quarantines, faults), re-routed under the restored one, oldest first. A
/// delivery with a todo is never selected; each is re-routed once. Applied at once on a `self`
/// webhook; on a `person` one the plan waits for a person (the console's guard section).
async fn recover(
    ctx: &crate::redrive::Ctx<'_>,
    guard: &Trial,
    terms: &GuardTerms,
) -> Option<Recovery> {
    let store = ctx.store;
    let attempt = async {
        let webhook = store
            .get_webhook(&guard.owner_scope, &guard.webhook_id)
            .await?;
        let filter = RedriveFilter {
            states: vec![Redrivable::Drop, Redrivable::Quarantine, Redrivable::Fault],
            since: Some(guard.started_at),
            config_version: Some(terms.confirmed_version),
            ..RedriveFilter::default()
        }
        .checked()?;
        let expires_at = store.clock().now_ms() + RECOVERY_WAITS_MS;
        let planned = crate::redrive::plan(ctx, &webhook, &filter, RECOVERY_LIMIT, expires_at)
            .await
            .map_err(|e| match e {
                crate::redrive::PlanError::Store(e) => e,
                crate::redrive::PlanError::Routing(e) => {
                    Error::internal(format!("recovery redrive: {}", e.log_text()))
                }
            })?;
        let changes = planned
            .redrive
            .entries
            .iter()
            .filter(|e| e.changes())
            .count() as u64;
        let mut recovery = Recovery {
            redrive_id: planned.redrive.id.clone(),
            state: RecoveryState::AwaitingPerson,
            changes,
            ..Recovery::default()
        };
        if changes == 0 {
            recovery.state = RecoveryState::NothingToRecover;
        } else if webhook.confirm_policy == ConfirmPolicy::SelfConfirm {
            let (_, outcomes) = crate::redrive::confirm(
                store,
                (&webhook.owner_scope, &webhook.id),
                &sha256_hex(&planned.token),
            )
            .await?;
            applied(&mut recovery, &outcomes);
        }
        Ok::<_, Error>(recovery)
    };
    match attempt.await {
        Ok(recovery) => Some(recovery),
        Err(e) => {
            tracing::warn!(guard = %guard.id, error = %e.log_text(), "recovery not planned");
            None
        }
    }
}

fn applied(recovery: &mut Recovery, outcomes: &[crate::store::RedriveOutcome]) {
    recovery.state = RecoveryState::Applied;
    recovery.applied = outcomes.iter().filter(|o| o.applied).count() as u64;
    recovery.todos_created = outcomes.iter().filter(|o| o.todo_created).count() as u64;
}

/// A person applies a recovery waiting for them (the console): exactly its redrive plan,
/// once. `plan_stale` when the webhook's configuration moved since the revert, or the plan
/// expired or was applied.
pub async fn apply_recovery(store: &Store, guard: &Trial) -> Result<Recovery> {
    let mut terms = guard.guard.clone().unwrap_or_default();
    let Some(mut recovery) = terms.recovery.clone() else {
        return Err(Error::NotFound {
            resource: "recovery",
        });
    };
    if recovery.state != RecoveryState::AwaitingPerson {
        return Err(Error::stale(match recovery.state {
            RecoveryState::Applied => switchboard_model::plan::StaleCause::Used,
            _ => switchboard_model::plan::StaleCause::NotPending,
        }));
    }
    let hash = store
        .redrive_token_hash(&guard.owner_scope, &recovery.redrive_id)
        .await?;
    let confirmed =
        crate::redrive::confirm(store, (&guard.owner_scope, &guard.webhook_id), &hash).await;
    match confirmed {
        Ok((_, outcomes)) => applied(&mut recovery, &outcomes),
        Err(Error::FailedPrecondition { .. }) => recovery.state = RecoveryState::Stale,
        Err(e) => return Err(e),
    }
    terms.recovery = Some(recovery.clone());
    store.set_guard_terms(&guard.id, &terms).await?;
    switchboard_telemetry::metrics()
        .guard_recovered(recovery.state.as_str(), recovery.todos_created);
    Ok(recovery)
}

/// A guard's report: its tallies read the change's way round (from the replaced
/// configuration's decision to the confirmed one's), in the trial report's terms.
pub fn report(ctx: &crate::trials::Ctx<'_>, guard: &Trial) -> GuardReport {
    let terms = guard.guard.clone().unwrap_or_default();
    let turned = Trial {
        observed: guard.observed.reversed(),
        examples: guard
            .examples
            .iter()
            .map(|((from, to), ids)| ((to.clone(), from.clone()), ids.clone()))
            .collect(),
        ..guard.clone()
    };
    GuardReport {
        report: crate::trials::report(ctx, &turned),
        on_breach: terms.on_breach,
        confirmed_version: terms.confirmed_version,
        replaced_version: terms.replaced_version,
        forecast: switchboard_model::guard::GuardForecast::of(&guard.forecast),
        breach_text: terms.breach.as_ref().map(ToString::to_string),
        breach: terms.breach,
        reverted_version: terms.reverted_version,
        recovery: terms.recovery,
    }
}

/// `get_rule_guard`: a guard of the caller's webhook by id, or its newest when `guard_id` is
/// empty. Another scope's, or another webhook's, is `not_found`, like an unknown one.
pub async fn get(
    ctx: &crate::trials::Ctx<'_>,
    caller: &Asker,
    webhook_id: &str,
    guard_id: &str,
) -> Result<GuardReport> {
    let guard = if guard_id.trim().is_empty() {
        ctx.store
            .newest_guard(&caller.scope, webhook_id.trim())
            .await?
            .ok_or(Error::NotFound { resource: "guard" })?
    } else {
        let guard = ctx.store.get_guard(&caller.scope, guard_id.trim()).await?;
        if guard.webhook_id != webhook_id.trim() {
            return Err(Error::NotFound { resource: "guard" });
        }
        guard
    };
    Ok(report(ctx, &guard))
}
