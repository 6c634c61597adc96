//! What every control-plane handler shares: the store, the routers, and the instance's
//! capabilities and limits. Cheap to clone.

use std::sync::Arc;
use std::time::Duration;

use crate::routing::Routers;
use crate::store::Store;

/// What this instance can do (BASE.md: capabilities are operator switches).
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// SPEC-0026: `.actor`, first-class trusted_actors, quarantine, fail-closed faults.
    pub trusted_actors: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            trusted_actors: true,
        }
    }
}

/// Limits an operator may tune.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Per-envelope evaluation budget asked of routers.
    pub evaluation_budget: Duration,
    /// Deliveries per Evaluate call when a replay is split over routers.
    pub replay_chunk: usize,
    /// Ingest requests per webhook per minute.
    pub ingest_per_webhook_per_minute: u32,
    /// Requests per endpoint per minute on the vended surface.
    pub requests_per_endpoint_per_minute: u32,
    /// The total time budget of one replay (SPEC-0031 REQ-4); past it a plan is truncated.
    pub replay_budget: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            evaluation_budget: Duration::from_millis(50),
            replay_chunk: 100,
            ingest_per_webhook_per_minute: 600,
            requests_per_endpoint_per_minute: 600,
            replay_budget: Duration::from_secs(30),
        }
    }
}

/// Shared state of one control process.
#[derive(Clone)]
pub struct ControlState {
    pub store: Store,
    pub routers: Arc<Routers>,
    pub capabilities: Capabilities,
    pub limits: Limits,
    /// The rule-pack catalog: built-ins plus external packs loaded once at start.
    pub catalog: Arc<switchboard_packs::Catalog>,
}
