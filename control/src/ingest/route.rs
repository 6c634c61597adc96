//! Routing stored events: the saved configuration and the webhook's routing context go to a
//! router (`Routers::evaluate`), and its decision is recorded on the event with the todo a
//! queue decision creates. Control never reads the rules itself. Ingest routes a delivery
//! before storing it and stores it with its decision ([`route_then_store`]);
//! [`spawn_unrouted_retry`] routes the events no router could take.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use switchboard_proto::router::v1::{
    Configuration, Decision, DeliveryDecisions, Outcome, StoredDelivery,
};
use tokio::sync::oneshot;

use switchboard_model::Label;

use crate::error::Error;
use crate::routing::RoutingError;
use crate::state::ControlState;
use crate::store::{DraftEvent, Event, IngestWebhook, RecordDecision, TodoInsert, Webhook};
pub use crate::wire::record_for;
use crate::wire::{drafted_delivery, routing_context, stored_delivery};

/// The most a caller may ask a router to spend on one envelope (the router's own ceiling).
const MAX_BUDGET_MS: u32 = 10_000;

/// What routing one event came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routed {
    /// A router decided and the decision is recorded: its label and the todo, if the
    /// decision made (or found) one.
    Decided {
        label: Label<'static>,
        todo: Option<Box<TodoInsert>>,
    },
    /// No router answered: the event stays stored and unrouted, for the retry task.
    Unrouted,
}

fn budget_ms(state: &ControlState) -> u32 {
    u32::try_from(state.limits.evaluation_budget.as_millis())
        .unwrap_or(MAX_BUDGET_MS)
        .clamp(1, MAX_BUDGET_MS)
}

/// One fresh delivery of `webhook` on a router (ingest): it may share a call with others
/// arriving now (`Routers::evaluate_one`).
async fn evaluate_one(
    state: &ControlState,
    webhook: &Webhook,
    configurations: &[Configuration],
    delivery: StoredDelivery,
) -> Result<DeliveryDecisions, RoutingError> {
    state
        .routers
        .evaluate_one(
            &routing_context(webhook, &state.capabilities),
            configurations,
            delivery,
            budget_ms(state),
            &webhook.owner_scope.to_string(),
        )
        .await
}

/// Evaluates `events` (all of `webhook`) on a router and records each decision. Events whose
/// decision could not be recorded (deleted meanwhile) are skipped.
///
/// `Err` means no router answered, or a router refused the request: the events stay
/// unrouted and nothing is recorded.
pub async fn route_events(
    state: &ControlState,
    webhook: &Webhook,
    events: &[Event],
) -> Result<Vec<(String, Routed)>, RoutingError> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let context = routing_context(webhook, &state.capabilities);
    let configuration = Configuration::from(&webhook.configuration);
    let mut deliveries: Vec<StoredDelivery> = events.iter().map(stored_delivery).collect();
    let results = match deliveries.pop() {
        // One fresh delivery (ingest): it may share a call with others arriving now.
        Some(one) if deliveries.is_empty() => {
            vec![evaluate_one(state, webhook, std::slice::from_ref(&configuration), one).await?]
        }
        Some(last) => {
            deliveries.push(last);
            state
                .routers
                .evaluate_chunked(
                    &context,
                    &[configuration],
                    deliveries,
                    state.limits.replay_chunk,
                    budget_ms(state),
                    &webhook.owner_scope.to_string(),
                )
                .await?
        }
        None => Vec::new(),
    };
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        let decision = results
            .iter()
            .find(|r| r.event_id == event.id)
            .and_then(|r| r.decisions.first());
        let Some(decision) = decision else {
            tracing::warn!(event = %event.id, "the router answered no decision for an event; left unrouted");
            out.push((event.id.clone(), Routed::Unrouted));
            continue;
        };
        if let Some(routed) = record(state, webhook, &event.id, decision).await {
            out.push((event.id.clone(), routed));
        }
    }
    Ok(out)
}

/// Records a router's `decision` on the stored, unrouted event `event_id`. `None`: the event
/// was deleted meanwhile.
async fn record(
    state: &ControlState,
    webhook: &Webhook,
    event_id: &str,
    decision: &Decision,
) -> Option<Routed> {
    let record = record_for(decision, webhook, &state.capabilities);
    let label = record.decision.decision.clone();
    match state.store.record_decision(event_id, record).await {
        Ok(todo) => Some(Routed::Decided {
            label,
            todo: todo.map(Box::new),
        }),
        Err(Error::NotFound { .. }) => {
            tracing::info!(event = %event_id, "event deleted before its decision was recorded");
            None
        }
        // Another pass (the retry task, a redrive) recorded a decision first: it stands,
        // and it is what this routing answers.
        Err(Error::Conflict { .. }) => {
            Some(standing(state, event_id).await.unwrap_or(Routed::Unrouted))
        }
        Err(e) => {
            tracing::error!(event = %event_id, error = %e.log_text(), "recording a decision failed; left unrouted");
            Some(Routed::Unrouted)
        }
    }
}

/// The decision another pass recorded on `event_id`, as this routing's answer: its label, and
/// its todo, made by this delivery when the todo's event is this one.
async fn standing(state: &ControlState, event_id: &str) -> Option<Routed> {
    let (decision, todo) = match state.store.standing_decision(event_id).await {
        Ok(standing) => standing,
        Err(e) => {
            tracing::warn!(event = %event_id, error = %e.log_text(), "reading the decision that stands failed");
            return None;
        }
    };
    let label = decision?.decision;
    tracing::info!(event = %event_id, decision = %label, "event routed by another pass; its decision stands");
    Some(Routed::Decided {
        label,
        todo: todo.map(|todo| {
            Box::new(TodoInsert {
                inserted: todo.event_id == event_id,
                todo,
            })
        }),
    })
}

/// Routes one freshly stored event; `Unrouted` when no router answers.
pub async fn route_one(state: &ControlState, webhook: &Webhook, event: &Event) -> Routed {
    match route_events(state, webhook, std::slice::from_ref(event)).await {
        Ok(mut routed) => routed.pop().map(|(_, r)| r).unwrap_or(Routed::Unrouted),
        Err(e) => {
            tracing::warn!(event = %event.id, webhook = %webhook.id, error = %e.log_text(), "event stored unrouted");
            Routed::Unrouted
        }
    }
}

/// Ingest's routing: a router decides the delivery before it is stored, and the event goes to
/// the store with its decision and todo — one write, one commit, where storing first and
/// recording the decision after took two (issue 22). Until `decide_by` only: when routing is
/// later than that, or no router answers, the event is stored unrouted at once, durably, and a
/// late decision is recorded on it when it comes (the retry task routes what none decides).
///
/// `stored` gets the event as soon as it is durable (or why it could not be stored); the
/// return value is how routing ended. Run it in a task of its own: a sender that hangs up
/// must not stop a delivery half way between routed and stored.
pub async fn route_then_store(
    state: ControlState,
    row: Arc<IngestWebhook>,
    draft: DraftEvent,
    decide_by: tokio::time::Instant,
    stored: oneshot::Sender<crate::Result<Event>>,
) -> Routed {
    let webhook = &row.webhook;
    let mut configurations = vec![Configuration::from(&webhook.configuration)];
    let delivery = drafted_delivery(&draft, webhook);
    // The webhook's trials (issue 45): a cheap candidate rides in the live call as its second
    // configuration; for any other, a copy of the delivery is kept to evaluate apart.
    let beside = state.trials.beside_live(webhook, budget_ms(&state));
    if let Some(trial) = &beside.in_call {
        configurations.push(trial.candidate().clone());
    }
    let for_trials = beside.apart.then(|| delivery.clone());
    // Lazy: nothing is sent to a router until it is polled.
    let evaluation = evaluate_one(&state, webhook, &configurations, delivery);
    tokio::pin!(evaluation);
    // No time to decide first (`ingest_decide_before_store` of zero): stored before routing.
    let early = if tokio::time::Instant::now() >= decide_by {
        None
    } else {
        tokio::time::timeout_at(decide_by, &mut evaluation)
            .await
            .ok()
    };
    let Some(answer) = early else {
        // Late: durable now, whatever the router does; its decision is recorded when it comes.
        let Some((event_id, _)) = store_draft(&state, draft, None, stored).await else {
            return Routed::Unrouted;
        };
        let decision = decision_of(evaluation.await, &event_id, &webhook.id);
        return match decision {
            Some(decision) => record(&state, webhook, &event_id, &decision)
                .await
                .unwrap_or(Routed::Unrouted),
            None => Routed::Unrouted,
        };
    };
    // The candidate's answer, when the live call carried one (a router that answered none
    // for it leaves the delivery seen and not evaluated, never uncounted).
    let in_call = answer.as_ref().ok().and_then(|a| {
        let trial = beside.in_call.clone()?;
        let after = a.decisions.get(1).cloned().unwrap_or_else(|| Decision {
            outcome: Outcome::Fault as i32,
            fault_code: switchboard_model::fault::NOT_EVALUATED.into(),
            ..Default::default()
        });
        Some((trial, after, a.unit_ns.get(1).copied().unwrap_or(0)))
    });
    let Some(decision) = decision_of(answer, &draft.id, &webhook.id) else {
        store_draft(&state, draft, None, stored).await;
        return Routed::Unrouted;
    };
    let record = record_for(&decision, webhook, &state.capabilities);
    let label = record.decision.decision.clone();
    let event_id = draft.id.clone();
    match store_draft(&state, draft, Some(record), stored).await {
        Some((_, todo)) => {
            if let Some((trial, after, unit_ns)) = &in_call {
                state
                    .trials
                    .offer_decided(trial, webhook, &label, &event_id, after, *unit_ns);
            }
            if let Some(delivery) = for_trials {
                let in_call = in_call.map(|(trial, _, _)| trial.id().to_string());
                offer_to_trials(&state, &row, &label, delivery, in_call);
            }
            Routed::Decided {
                label,
                todo: todo.map(Box::new),
            }
        }
        None => Routed::Unrouted,
    }
}

/// Hands a delivery stored with its live decision to the webhook's running trials, in a
/// task of its own: nothing of ingest waits for a trial.
fn offer_to_trials(
    state: &ControlState,
    row: &Arc<IngestWebhook>,
    live: &Label<'static>,
    delivery: StoredDelivery,
    in_call: Option<String>,
) {
    let (trials, row, live) = (state.trials.clone(), row.clone(), live.clone());
    let context = routing_context(&row.webhook, &state.capabilities);
    tokio::spawn(async move {
        trials
            .offer(&row.webhook, &context, &live, delivery, in_call.as_deref())
            .await;
    });
}

/// The decision a router's answer holds for one delivery; `None`, and a warning, when no
/// router answered or the answer holds none: the event is (or stays) stored unrouted.
fn decision_of(
    answer: Result<DeliveryDecisions, RoutingError>,
    event_id: &str,
    webhook_id: &str,
) -> Option<Decision> {
    match answer {
        Ok(results) => {
            let decision = results.decisions.into_iter().next();
            if decision.is_none() {
                tracing::warn!(event = %event_id, "the router answered no decision for an event; left unrouted");
            }
            decision
        }
        Err(e) => {
            tracing::warn!(event = %event_id, webhook = %webhook_id, error = %e.log_text(), "event stored unrouted");
            None
        }
    }
}

/// Stores `draft` as [`route_then_store`] does and hands the stored event to `stored`; its id
/// and todo when it is stored.
async fn store_draft(
    state: &ControlState,
    draft: DraftEvent,
    decided: Option<RecordDecision>,
    stored: oneshot::Sender<crate::Result<Event>>,
) -> Option<(String, Option<TodoInsert>)> {
    let [with_decision, before_decision] = switchboard_telemetry::metrics::INGEST_STORED_HOW;
    let how = if decided.is_some() {
        with_decision
    } else {
        before_decision
    };
    match state.store.store_event(draft, decided).await {
        Ok((event, todo)) => {
            switchboard_telemetry::metrics().ingest_stored(how);
            let event_id = event.id.clone();
            let _ = stored.send(Ok(event));
            Some((event_id, todo))
        }
        Err(e) => {
            let _ = stored.send(Err(e));
            None
        }
    }
}

/// How the retry task looks for unrouted events.
#[derive(Clone, Debug)]
pub struct RetryOptions {
    /// Time between passes.
    pub interval: Duration,
    /// Events younger than this are left to the ingest call that stored them.
    pub min_age: Duration,
    /// Events taken per pass, oldest first.
    pub batch: u32,
}

impl Default for RetryOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            min_age: Duration::from_secs(10),
            batch: 500,
        }
    }
}

/// One pass: routes up to `batch` unrouted events, webhook by webhook. Returns how many were
/// routed; stops early (keeping the rest for the next pass) when no router answers.
pub async fn route_unrouted(state: &ControlState, options: &RetryOptions) -> crate::Result<usize> {
    let events = state.store.unrouted_events(options.batch).await?;
    let now = state.store.clock().now_ms();
    let min_age = i64::try_from(options.min_age.as_millis()).unwrap_or(i64::MAX);
    let mut by_webhook: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    for event in events {
        if now.saturating_sub(event.received_at) >= min_age {
            by_webhook
                .entry(event.webhook_id.clone())
                .or_default()
                .push(event);
        }
    }
    let mut routed = 0;
    for (webhook_id, events) in by_webhook {
        let webhook = match state.store.webhook_for_ingest(&webhook_id).await {
            Ok(w) => w,
            // Deleted meanwhile: its events went with it.
            Err(Error::NotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        match route_events(state, &webhook, &events).await {
            Ok(results) => {
                routed += results
                    .iter()
                    .filter(|(_, r)| matches!(r, Routed::Decided { .. }))
                    .count();
            }
            Err(RoutingError::Unavailable(reason)) => {
                tracing::debug!(reason = %reason, "still no router; unrouted events wait");
                break;
            }
            Err(RoutingError::Refused(reason)) => {
                tracing::error!(webhook = %webhook_id, reason = %reason, "a router refused unrouted events; they wait");
            }
        }
    }
    if routed > 0 {
        tracing::info!(routed, "unrouted events routed");
    }
    Ok(routed)
}

/// Routes events stored while no router answered, every `interval`, until the task is aborted.
/// Nothing is lost: an event stays unrouted until a decision is recorded on it, and the todo
/// once-key makes routing an event twice (two replicas, a race with ingest) harmless.
pub fn spawn_unrouted_retry(
    state: ControlState,
    options: RetryOptions,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(options.interval).await;
            if let Err(e) = route_unrouted(&state, &options).await {
                tracing::warn!(error = %e.log_text(), "routing unrouted events failed");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::Capabilities;
    use crate::scope::OwnerScope;
    use crate::store::SourceType;
    use crate::store::{DecidedBy, NewTodo};
    use serde_json::json;
    use switchboard_model::Disposition;
    use switchboard_proto::router::v1::Outcome;

    fn hook() -> Webhook {
        Webhook {
            confirm_policy: Default::default(),
            claim_ttl: None,
            guard_on_breach: None,
            approval_rule: None,
            id: "wh_x".into(),
            name: None,
            owner_scope: OwnerScope::human("alice"),
            source_type: SourceType::Github,
            secret: "s".repeat(16),
            grant: vec!["forge".into(), "review".into()],
            reject_unverified: false,
            configuration: switchboard_model::Configuration::default(),
            config_version: 1,
            config_digest: String::new(),
            provenance: Vec::new(),
            trusted_actors: Some(switchboard_model::TrustedActors::from_value(
                &json!({"humans": ["octocat", 7], "bots": ["dependabot[bot]"]}),
            )),
            created_at: 0,
        }
    }

    fn decision(outcome: Outcome, queue: &str, rule: &str) -> Decision {
        Decision {
            outcome: outcome as i32,
            queue: queue.into(),
            rule_id: rule.into(),
            ..Decision::default()
        }
    }

    const FAIL_CLOSED: Capabilities = Capabilities {
        trusted_actors: true,
    };
    const OPEN: Capabilities = Capabilities {
        trusted_actors: false,
    };

    #[test]
    fn queue_and_default_decisions_make_todos() {
        let r = record_for(
            &decision(Outcome::Queue, "review", "r-1"),
            &hook(),
            &FAIL_CLOSED,
        );
        let label = r.decision.decision.to_string();
        assert_eq!(label, "queue:review");
        assert_eq!(
            r.todo,
            Some(NewTodo {
                queue: "review".into(),
                rule_id: Some("r-1".into())
            })
        );
        assert_eq!(r.decision.decision, "queue:review");
        assert!(r.fault.is_none());

        let r = record_for(&decision(Outcome::Default, "", ""), &hook(), &FAIL_CLOSED);
        let label = r.decision.decision.to_string();
        assert_eq!(label, "default");
        assert_eq!(r.todo.map(|t| t.queue), Some("forge".to_string()));
    }

    #[test]
    fn every_decision_records_the_configuration_it_was_made_under() {
        let mut w = hook();
        w.config_version = 7;
        w.config_digest = "ab".repeat(32);
        let mut faulted = decision(Outcome::Fault, "", "r-3");
        faulted.fault_code = "rule_fault".into();
        for d in [decision(Outcome::Queue, "review", "r-1"), faulted] {
            let r = record_for(&d, &w, &OPEN);
            assert_eq!(
                r.decided_by,
                Some(DecidedBy {
                    version: 7,
                    digest: "ab".repeat(32)
                })
            );
        }
    }

    #[test]
    fn drop_and_quarantine_make_none() {
        for (outcome, label) in [(Outcome::Drop, "drop"), (Outcome::Quarantine, "quarantine")] {
            let r = record_for(&decision(outcome, "", "r-2"), &hook(), &FAIL_CLOSED);
            let l = r.decision.decision.to_string();
            assert_eq!(l, label);
            assert!(r.todo.is_none() && r.fault.is_none());
            assert_eq!(r.decision.rule_id.as_deref(), Some("r-2"));
        }
    }

    #[test]
    fn faults_fail_closed_or_go_to_the_default_queue() {
        let mut d = decision(Outcome::Fault, "", "r-3");
        d.fault_code = "budget_exceeded".into();
        d.reason = "over 50 ms".into();
        let r = record_for(&d, &hook(), &FAIL_CLOSED);
        let label = r.decision.decision.to_string();
        assert_eq!(label, "fault");
        assert!(r.todo.is_none());
        let fault = r.fault.expect("fault");
        assert_eq!(fault.disposition, Some(Disposition::Quarantine));
        assert_eq!(fault.code, "budget_exceeded");

        let r = record_for(&d, &hook(), &OPEN);
        let label = r.decision.decision.to_string();
        assert_eq!(label, "fault");
        assert_eq!(
            r.todo,
            Some(NewTodo {
                queue: "forge".into(),
                rule_id: None
            })
        );
        assert_eq!(r.decision.queue.as_deref(), Some("forge"));
        assert_eq!(
            r.fault.expect("fault").disposition,
            Some(Disposition::Default)
        );
    }

    #[test]
    fn an_unusable_answer_is_a_fault() {
        for d in [
            decision(Outcome::Unspecified, "", ""),
            decision(Outcome::Queue, "", "r-1"),
            Decision {
                outcome: 99,
                ..Decision::default()
            },
        ] {
            let r = record_for(&d, &hook(), &FAIL_CLOSED);
            let label = r.decision.decision.to_string();
            assert_eq!(label, "fault");
            assert_eq!(r.fault.expect("fault").code, "invalid_decision");
        }
    }

    #[test]
    fn routing_context_carries_trusted_actors_only_with_the_capability() {
        let ctx = routing_context(&hook(), &FAIL_CLOSED);
        assert_eq!(ctx.grant, vec!["forge", "review"]);
        let actors = ctx.trusted_actors.expect("actors");
        assert_eq!(actors.humans, vec!["octocat"], "non-strings are skipped");
        assert_eq!(actors.bots, vec!["dependabot[bot]"]);
        assert!(actors.agents.is_empty());
        let ctx = routing_context(&hook(), &OPEN);
        assert!(!ctx.trusted_actors_capability && ctx.trusted_actors.is_none());
    }
}
