//! Guards (issue 46) in control: a confirm starts one (the replaced configuration runs in the
//! shadow of the confirmed one, counted by the live runner as a trial is), the runner asks
//! [`judge_after_batch`] after every batch it counts, and a breach reverts the change — the
//! replaced version saved again through the same locked write as a confirm — or, on `alert`,
//! or when the webhook changed again since the confirm, only records it. The judge itself is
//! pure (`switchboard_model::guard`).

use switchboard_model::guard::{GuardTerms, OnBreach, Thresholds, judge};
use switchboard_model::trial::{Forecast, TrialLimits};
use switchboard_model::{ChangeProvenance, ConfigurationChange};

use crate::error::Error;
use crate::store::{Actor, NewGuard, SaveConfiguration, Store, Trial, Webhook};

/// The bake window when a plan names none: 1,000 deliveries or 7 days, whichever first.
pub const BAKE_DELIVERIES: u64 = 1000;
pub const BAKE_DURATION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// A confirmed change, as a guard watches it.
pub struct Confirmed<'a> {
    /// The webhook as the confirm read it: its configuration is the one replaced.
    pub webhook: &'a Webhook,
    pub plan_id: &'a str,
    /// The plan's replay, reduced to counts: what the person approved.
    pub forecast: Forecast,
    pub confirmed_version: i64,
    pub confirmed_digest: &'a str,
    /// Who confirmed (or accepted) it.
    pub started_by: &'a str,
}

/// What a breach of a change with this forecast does. A forecast of no deliveries (an
/// unproven plan over an empty window, confirmed with `allow_unproven`) promised nothing to
/// hold the change to: every drop would be "unforeseen", so a revert would undo a pack the
/// moment it did its job. Such a guard alerts. (The per-webhook default an operator sets is
/// not built yet: every other guard reverts.)
fn on_breach(forecast: &Forecast) -> OnBreach {
    if forecast.deliveries == 0 {
        OnBreach::Alert
    } else {
        OnBreach::Revert
    }
}

/// Starts the guard of a confirmed change. A guard that cannot start is logged, never a
/// reason to undo the confirm: the change is saved either way.
pub async fn start(store: &Store, c: Confirmed<'_>) -> Option<Trial> {
    let webhook = c.webhook;
    let on_breach = on_breach(&c.forecast);
    let started = store
        .start_guard(NewGuard {
            webhook_id: webhook.id.clone(),
            owner_scope: webhook.owner_scope.clone(),
            plan_id: c.plan_id.to_string(),
            replaced: webhook.configuration.clone(),
            confirmed_digest: c.confirmed_digest.to_string(),
            forecast: c.forecast,
            limits: TrialLimits {
                max_deliveries: Some(BAKE_DELIVERIES),
                max_duration_ms: BAKE_DURATION_MS,
            },
            started_by: c.started_by.to_string(),
            terms: GuardTerms {
                on_breach,
                confirmed_version: c.confirmed_version,
                replaced_version: webhook.config_version,
                thresholds: Thresholds::default(),
                replaced_packs: webhook.provenance.clone(),
                replaced_trusted_actors: webhook.trusted_actors.clone(),
                breach: None,
                reverted_version: None,
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
/// that ends the guard as breached reverts; any other finds it ended and does nothing).
pub async fn judge_after_batch(store: &Store, guard: &Trial) {
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
    let outcome = match terms.on_breach {
        OnBreach::Alert => "alerted",
        OnBreach::Revert => match revert(store, &read, &terms, &breach.to_string()).await {
            Some(version) => {
                terms.reverted_version = Some(version);
                if let Err(e) = store.set_guard_terms(&read.id, &terms).await {
                    tracing::warn!(guard = %read.id, error = %e.log_text(), "reverted version not recorded");
                }
                "reverted"
            }
            None => "alerted",
        },
    };
    switchboard_telemetry::metrics().guard_breach(outcome);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_without_a_forecast_alerts_and_one_with_a_forecast_reverts() {
        assert_eq!(on_breach(&Forecast::default()), OnBreach::Alert);
        let seen = Forecast {
            deliveries: 40,
            ..Forecast::default()
        };
        assert_eq!(on_breach(&seen), OnBreach::Revert);
    }
}
