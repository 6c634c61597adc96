//! Conversions between the store's records and the router's wire types: one definition of
//! each, shared by ingest, the API and rule packs, and below all three (they import it; it
//! imports none of them).

use switchboard_proto::router::v1::{Header, RoutingContext, StoredDelivery, TrustedActors};

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
