//! `explain_webhook_event` (issue 21 item 3): why a stored delivery was decided as it was.
//!
//! The decision records the configuration version and digest it was made under (migration
//! 0010); the configuration history holds that version's rules. Control never reads a rule
//! itself, so a router evaluates, over the one stored delivery: each rule of the recorded
//! version alone (a one-rule configuration without default action: matched, not matched or
//! fault), the recorded version whole (does it still decide the same?) and the current
//! configuration whole, and the candidate of each trial that ran beside the deciding
//! configuration when the delivery arrived (issue 45). A router takes at most two
//! configurations per call, so these go in pairs, a few calls at a time. Nothing is written.

use futures::{StreamExt, TryStreamExt};
use serde_json::Map;
use switchboard_model::{Configuration, Rule};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::router::v1::{
    Configuration as RouterConfiguration, Decision, EvaluateRequest, Outcome, StoredDelivery,
    WorkClass,
};

use super::auth::Caller;
use super::convert;
use super::status::ApiError;
use crate::state::ControlState;
use crate::store::{DecidedBy, Webhook};

/// A router answers at most this many configurations per call (saved and candidate).
const CONFIGURATIONS_PER_CALL: usize = 2;
/// Router calls of one explanation in flight at once: a 32-rule version is 17 calls, and one
/// caller's question should not take every router's interactive turn.
const CALLS_IN_FLIGHT: usize = 4;

/// Explains `event_id` for `caller`: another scope's event answers `not_found` exactly like an
/// unknown id (the one scoped read decides).
pub async fn explain(
    state: &ControlState,
    caller: &Caller,
    event_id: &str,
) -> Result<pb::ExplainWebhookEventResponse, ApiError> {
    let store = &state.store;
    let (event, decided_by) = store.get_event_decided_by(caller.scope(), event_id).await?;
    let webhook = store.get_webhook(caller.scope(), &event.webhook_id).await?;
    let recorded_decision = event
        .decision
        .as_ref()
        .filter(|_| event.routed)
        .map(pb::Decision::from);
    let (status, recorded) = recorded_configuration(state, caller, &webhook, &decided_by).await?;

    // The rules to explain: up to and including the one the recorded decision names; every
    // rule when none does (the default decided, or the name is not in that version).
    let deciding_at = recorded.as_ref().and_then(|c| {
        let id = recorded_decision.as_ref()?.rule_id.as_deref()?;
        c.rules.iter().position(|r| r.id.as_deref() == Some(id))
    });
    let explained: &[Rule] = match (&recorded, deciding_at) {
        (Some(c), Some(at)) => &c.rules[..=at],
        (Some(c), None) => &c.rules,
        (None, _) => &[],
    };

    let mut configurations: Vec<RouterConfiguration> = Vec::with_capacity(explained.len() + 2);
    if let Some(c) = &recorded {
        for rule in explained {
            configurations.push(RouterConfiguration::from(&alone(rule, &c.params)));
        }
        configurations.push(RouterConfiguration::from(c));
    }
    configurations.push(RouterConfiguration::from(&webhook.configuration));
    // Trials that ran beside the configuration that decided it when it arrived.
    let trials: Vec<_> = store
        .trials_running_at(caller.scope(), &webhook.id, event.received_at)
        .await?
        .into_iter()
        .filter(|t| {
            decided_by
                .as_ref()
                .is_none_or(|d| d.digest == t.base_config_digest)
        })
        .collect();
    for t in &trials {
        configurations.push(RouterConfiguration::from(&t.candidate));
    }
    let mut decisions = evaluate(
        state,
        &webhook,
        convert::stored_delivery(&event),
        configurations,
    )
    .await?
    .into_iter();

    let rules = explained
        .iter()
        .enumerate()
        .zip(decisions.by_ref())
        .map(|((index, rule), decision)| {
            explained_rule(index, rule, &decision, deciding_at == Some(index))
        })
        .collect();
    let reevaluated = match recorded {
        Some(_) => decisions.next().map(|d| typed(&d)),
        None => None,
    };
    let current = decisions
        .next()
        .map(|d| typed(&d))
        .ok_or_else(|| ApiError::internal("a router answered an explanation short"))?;
    let label = |d: &Option<pb::Decision>| d.as_ref().map(|d| d.decision.clone());
    let trials = trials
        .iter()
        .zip(decisions.by_ref())
        .map(|(t, d)| {
            let d = typed(&d);
            pb::ExplainedTrial {
                trial_id: t.id.clone(),
                plan_id: t.plan_id.clone(),
                differs: Some(d.decision.as_str())
                    != recorded_decision.as_ref().map(|r| r.decision.as_str()),
                decision: Some(d),
            }
        })
        .collect();
    Ok(pb::ExplainWebhookEventResponse {
        event_id: event.id.clone(),
        webhook_id: event.webhook_id.clone(),
        kind: event.kind.clone(),
        recorded_version_status: status as i32,
        recorded_version: decided_by.as_ref().map(|d| d.version),
        recorded_digest: decided_by.as_ref().map(|d| d.digest.clone()),
        rules,
        reevaluation_differs: reevaluated.is_some()
            && label(&reevaluated) != label(&recorded_decision),
        reevaluated_decision: reevaluated,
        current_version: webhook.config_version,
        current_digest: webhook.config_digest.clone(),
        current_differs: Some(current.decision.as_str())
            != recorded_decision.as_ref().map(|d| d.decision.as_str()),
        current_decision: Some(current),
        recorded_decision,
        trials,
    })
}

/// The configuration the decision was recorded under, from the history, when it is known and
/// still there with the recorded digest.
async fn recorded_configuration(
    state: &ControlState,
    caller: &Caller,
    webhook: &Webhook,
    decided_by: &Option<DecidedBy>,
) -> Result<(pb::RecordedVersion, Option<Configuration>), ApiError> {
    let Some(decided_by) = decided_by else {
        return Ok((pb::RecordedVersion::Unknown, None));
    };
    let found = state
        .store
        .history_version(caller.scope(), &webhook.id, decided_by.version)
        .await?;
    match found {
        Some(h) if h.digest_after == decided_by.digest => {
            Ok((pb::RecordedVersion::Known, Some(h.configuration)))
        }
        _ => Ok((pb::RecordedVersion::NotInHistory, None)),
    }
}

/// `rule` as a configuration of its own: no default action, so "no match" answers `default`.
/// The params stay: rules read them as `$params`.
fn alone(rule: &Rule, params: &Map<String, serde_json::Value>) -> Configuration {
    Configuration {
        rules: vec![rule.clone()],
        default_action: None,
        params: params.clone(),
    }
}

/// Every configuration over the one delivery, in order: interactive work (someone waits),
/// in pairs, [`CALLS_IN_FLIGHT`] calls at a time.
async fn evaluate(
    state: &ControlState,
    webhook: &Webhook,
    delivery: StoredDelivery,
    configurations: Vec<RouterConfiguration>,
) -> Result<Vec<Decision>, ApiError> {
    let context = convert::routing_context(state, webhook);
    let budget_ms = u32::try_from(state.limits.evaluation_budget.as_millis()).unwrap_or(u32::MAX);
    let tenant = webhook.owner_scope.to_string();
    let requests: Vec<EvaluateRequest> = configurations
        .chunks(CONFIGURATIONS_PER_CALL)
        .map(|pair| EvaluateRequest {
            context: Some(context.clone()),
            configurations: pair.to_vec(),
            deliveries: vec![delivery.clone()],
            budget_ms,
            work_class: WorkClass::Interactive as i32,
            tenant: tenant.clone(),
            max_child_faults: 0,
        })
        .collect();
    let answers: Vec<Vec<Decision>> = futures::stream::iter(requests)
        .map(|req| async move {
            let asked = req.configurations.len();
            let results = state.routers.evaluate(req).await?;
            match <[_; 1]>::try_from(results) {
                Ok([one]) if one.decisions.len() == asked => Ok(one.decisions),
                _ => Err(ApiError::internal(
                    "a router answered an explanation with the wrong number of decisions",
                )),
            }
        })
        .buffered(CALLS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(answers.into_iter().flatten().collect())
}

/// A router decision as the API's typed decision (as an event records it).
fn typed(d: &Decision) -> pb::Decision {
    pb::Decision::from(d)
}

/// How one rule alone answered: its action when it matched, "not matched" when the lone rule's
/// configuration fell through to the default, and the fault otherwise.
fn explained_rule(index: usize, rule: &Rule, d: &Decision, deciding: bool) -> pb::ExplainedRule {
    let outcome = match Outcome::try_from(d.outcome).unwrap_or(Outcome::Unspecified) {
        Outcome::Queue | Outcome::Drop | Outcome::Quarantine => pb::RuleOutcome::Matched,
        Outcome::Default => pb::RuleOutcome::NotMatched,
        Outcome::Fault | Outcome::Unspecified => pb::RuleOutcome::Fault,
    };
    let fault = outcome == pb::RuleOutcome::Fault;
    let text = |s: &str| (fault && !s.is_empty()).then(|| s.to_string());
    pb::ExplainedRule {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        rule_id: rule.id.clone().unwrap_or_default(),
        outcome: outcome as i32,
        action: rule.action.label().to_string(),
        fault_code: if fault {
            Some(text(&d.fault_code).unwrap_or_else(|| "invalid_decision".into()))
        } else {
            None
        },
        reason: text(&d.reason),
        deciding,
    }
}
