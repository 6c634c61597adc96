//! Conversions between the store's records and the router's wire types: one definition of
//! each, shared by ingest, the API and rule packs, and below all three (they import it; it
//! imports none of them).

use serde_json::{Map, Value, json};
use switchboard_proto::router::v1::{
    Decision, Header, RoutingContext, StoredDelivery, TrustedActors,
};

use crate::state::Capabilities;
use crate::store::{DraftEvent, Event, Webhook};

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

/// A router decision as the JSON every `*decision_json` field carries:
/// `{decision, queue?, rule_id?, fault_code?, reason?, by_default_action?}`, where
/// `decision` is `queue:<name>`, `drop`, `quarantine`, `default` or `fault`.
pub fn decision_json(d: &Decision) -> Value {
    let label = d.label().to_string();
    let mut m = Map::new();
    m.insert("decision".into(), json!(label));
    for (key, value) in [
        ("queue", &d.queue),
        ("rule_id", &d.rule_id),
        ("fault_code", &d.fault_code),
        ("reason", &d.reason),
    ] {
        if !value.is_empty() {
            m.insert(key.into(), json!(value));
        }
    }
    if d.by_default_action {
        m.insert("by_default_action".into(), json!(true));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_proto::router::v1::Outcome;

    #[test]
    fn decisions_read_as_the_spec_names_them() {
        let d = Decision {
            outcome: Outcome::Queue as i32,
            queue: "forge".into(),
            rule_id: "r-1".into(),
            ..Default::default()
        };
        assert_eq!(
            decision_json(&d),
            json!({"decision": "queue:forge", "queue": "forge", "rule_id": "r-1"})
        );
        let d = Decision {
            outcome: Outcome::Fault as i32,
            rule_id: "r-2".into(),
            fault_code: "rule_fault".into(),
            reason: "not a boolean".into(),
            ..Default::default()
        };
        assert_eq!(
            decision_json(&d),
            json!({"decision": "fault", "rule_id": "r-2", "fault_code": "rule_fault", "reason": "not a boolean"})
        );
        let d = Decision {
            outcome: Outcome::Drop as i32,
            by_default_action: true,
            ..Default::default()
        };
        assert_eq!(
            decision_json(&d),
            json!({"decision": "drop", "by_default_action": true})
        );
    }
}
