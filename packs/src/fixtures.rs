//! Fixtures as the router sees them: a stored delivery and the routing context a pack's
//! fixtures are routed in. Shared by the repository test, `switchboard packs test`, and
//! control (plans, external packs at start).

use std::collections::BTreeSet;

use bytes::Bytes;
use serde_json::Value;
use switchboard_model::{Action, Configuration};
use switchboard_proto::router::v1::{Header, RoutingContext, StoredDelivery, TrustedActors};

use crate::manifest::{Fixture, Pack};

/// A fixture as a stored delivery, as ingest would have stored it.
pub fn fixture_delivery(fixture: &Fixture, n: usize) -> StoredDelivery {
    let body = fixture.delivery.body_bytes();
    StoredDelivery {
        event_id: format!("fixture-{n}"),
        source: fixture.delivery.source.clone(),
        kind: fixture.delivery.kind(),
        headers: fixture
            .delivery
            .headers
            .iter()
            .map(|(k, v)| Header {
                name: k.clone(),
                value: v.clone(),
            })
            .collect(),
        body: Bytes::from(body),
        verified: fixture.delivery.verified,
        delivery_id: format!("fixture-{n}"),
        received_at_ms: 1_790_000_000_000,
    }
}

/// The routing context a fixture is routed in: every queue the pack can name is granted,
/// the pack's capabilities are on, and trusted actors come from the params the pack says.
pub fn fixture_context(pack: &Pack, config: &Configuration) -> RoutingContext {
    let mut grant: BTreeSet<String> = BTreeSet::new();
    grant.insert("default".into());
    let actions = config
        .rules
        .iter()
        .map(|r| &r.action)
        .chain(config.default_action.iter());
    for a in actions {
        if let Action::Queue(q) = a {
            grant.insert(q.clone());
        }
    }
    for f in &pack.fixtures {
        if let Ok(switchboard_model::Label::Queue(q)) = switchboard_model::Label::parse(&f.want) {
            grant.insert(q.to_string());
        }
    }
    // Queues named by params (lane maps and the like) are grantable too.
    for v in config.params.values() {
        if let Some(m) = v.as_object() {
            grant.extend(m.values().filter_map(Value::as_str).map(str::to_string));
        }
    }
    let mut grant: Vec<String> = grant.into_iter().collect();
    // The default queue is the first in the grant.
    grant.retain(|q| q != "default");
    grant.insert(0, "default".into());
    let capability = pack
        .requires
        .capabilities
        .iter()
        .any(|c| c == "trusted_actors");
    let trusted_actors = pack
        .sets_trusted_actors
        .as_ref()
        .map(|t| TrustedActors::from(&t.resolve(&config.params)));
    RoutingContext {
        grant,
        trusted_actors_capability: capability,
        trusted_actors,
    }
}
