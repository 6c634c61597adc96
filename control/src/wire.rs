//! Conversions between the store's records and the router's wire types: one definition of
//! each, shared by ingest, the API and rule packs, and below all three (they import it; it
//! imports none of them).

use switchboard_model::{Disposition, Label, RecordedDecision, RecordedFault};
use switchboard_proto::router::v1::{
    Decision, Header, Outcome, RoutingContext, StoredDelivery, TrustedActors,
};

use crate::capabilities::Capabilities;
use crate::store::{DecidedBy, DraftEvent, Event, NewTodo, RecordDecision, Webhook};

/// What the webhook allows and what this instance can do, as routers take it.
pub fn routing_context(webhook: &Webhook, capabilities: &Capabilities) -> RoutingContext {
    let trusted_actors = if capabilities.trusted_actors {
        webhook.trusted_actors.as_ref().map(TrustedActors::from)
    } else {
        None
    };
    RoutingContext {
        grant: webhook.grant.clone(),
        trusted_actors_capability: capabilities.trusted_actors,
        trusted_actors,
    }
}

/// A stored event as routers rebuild its envelope from it.
pub fn stored_delivery(event: &Event) -> StoredDelivery {
    StoredDelivery {
        event_id: event.id.clone(),
        source: event.source.clone(),
        kind: event.kind.clone(),
        headers: headers(&event.headers),
        body: event.body.clone(),
        verified: event.verified,
        delivery_id: event.delivery_id.clone(),
        received_at_ms: event.received_at,
    }
}

/// A delivery not stored yet (ingest routes it first), exactly as [`stored_delivery`] will
/// give it once it is stored: the same envelope, so the decision is the one a replay makes.
pub fn drafted_delivery(draft: &DraftEvent, webhook: &Webhook) -> StoredDelivery {
    StoredDelivery {
        event_id: draft.id.clone(),
        source: webhook.source_type.as_str().to_string(),
        kind: draft.new.kind.clone(),
        headers: headers(&draft.new.headers),
        body: draft.new.body.clone(),
        verified: draft.new.verified,
        delivery_id: draft.new.delivery_id.clone(),
        received_at_ms: draft.received_at,
    }
}

fn headers(headers: &[(String, String)]) -> Vec<Header> {
    headers
        .iter()
        .map(|(name, value)| Header {
            name: name.clone(),
            value: value.clone(),
        })
        .collect()
}

/// The configuration a decision is made under: the one in the webhook row read for this
/// routing, which is exactly what the router is sent (`route_events`).
fn decided_by(webhook: &Webhook) -> DecidedBy {
    DecidedBy {
        version: webhook.config_version,
        digest: webhook.config_digest.clone(),
    }
}

/// The decision to record (its label is the recorded decision's) and the todo it makes. The decision is recorded in the
/// shape every decision of the API carries ([`RecordedDecision`]).
///
/// A fault (BASE.md): with the trusted_actors capability the delivery is quarantined
/// (fail-closed); without it, it goes to the default queue, and the event is marked faulted
/// either way (`fault: {rule_id, code, reason, disposition}`). A router answer this version
/// does not know is treated as a fault too.
pub fn record_for(
    decision: &Decision,
    webhook: &Webhook,
    capabilities: &Capabilities,
) -> RecordDecision {
    let rule_id = (!decision.rule_id.is_empty()).then(|| decision.rule_id.clone());
    let outcome = Outcome::try_from(decision.outcome).unwrap_or(Outcome::Unspecified);
    let usable = match outcome {
        Outcome::Queue => !decision.queue.is_empty(),
        Outcome::Unspecified => false,
        _ => true,
    };
    if outcome == Outcome::Fault || !usable {
        let (code, reason) = if usable {
            (decision.fault_code.as_str(), decision.reason.as_str())
        } else {
            ("invalid_decision", "the router answered no usable decision")
        };
        let quarantine = capabilities.trusted_actors;
        let queue = (!quarantine)
            .then(|| webhook.default_queue().map(str::to_string))
            .flatten();
        let disposition = if quarantine {
            Disposition::Quarantine
        } else {
            Disposition::Default
        };
        let record = RecordDecision {
            decision: RecordedDecision {
                fault_code: Some(code.to_string()).filter(|c| !c.is_empty()),
                queue: queue.clone(),
                reason: Some(reason.to_string()).filter(|r| !r.is_empty()),
                rule_id: rule_id.clone(),
                ..RecordedDecision::new(Label::Fault)
            },
            fault: Some(RecordedFault {
                code: code.to_string(),
                disposition: Some(disposition),
                reason: reason.to_string(),
                rule_id,
            }),
            todo: queue.map(|queue| NewTodo {
                queue,
                rule_id: None,
            }),
            decided_by: Some(decided_by(webhook)),
        };
        return record;
    }
    // Usable and not a fault: a queue, the default, a drop or a quarantine.
    let queue = match outcome {
        Outcome::Queue => Some(decision.queue.clone()),
        Outcome::Default if decision.queue.is_empty() => {
            webhook.default_queue().map(str::to_string)
        }
        Outcome::Default => Some(decision.queue.clone()),
        _ => None,
    };
    RecordDecision {
        decision: RecordedDecision {
            queue: queue.clone(),
            ..RecordedDecision::from(decision)
        },
        fault: None,
        todo: queue.map(|queue| NewTodo { queue, rule_id }),
        decided_by: Some(decided_by(webhook)),
    }
}
