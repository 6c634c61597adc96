//! What every control-plane handler shares: the store, the routers, and the instance's
//! capabilities and limits. Cheap to clone.

use std::sync::Arc;
use std::time::Duration;

pub use crate::capabilities::Capabilities;
use crate::routing::Routers;
use crate::store::{Retention, Store};
use crate::trials::live::Trials;

/// Limits an operator may tune.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Per-envelope evaluation budget asked of routers.
    pub evaluation_budget: Duration,
    /// Deliveries per Evaluate call when a replay is split over routers.
    pub replay_chunk: usize,
    /// Verified deliveries per webhook per minute routed at once; more are deferred.
    pub ingest_per_webhook_per_minute: u32,
    /// Unverified deliveries per webhook per minute; more answer 429. Their own budget, so a
    /// flood of unsigned junk never spends what signed deliveries need.
    pub ingest_unverified_per_webhook_per_minute: u32,
    /// Deferred and unrouted events a webhook may have waiting; past it a signed delivery
    /// over the rate answers 429.
    pub ingest_backlog_per_webhook: u32,
    /// A delivery is answered within this of its body being read: routed, or `pending`.
    pub ingest_deadline: Duration,
    /// How long a delivery waits for its decision before it is stored unrouted (at most a
    /// quarter of `ingest_deadline`); zero stores every delivery before routing it.
    pub ingest_decide_before_store: Duration,
    /// Requests per endpoint per minute on the vended surface.
    pub requests_per_endpoint_per_minute: u32,
    /// The total time budget of one replay (SPEC-0031 REQ-4); past it a plan is truncated.
    pub replay_budget: Duration,
    /// Units of one replay call that may exceed their budget or crash their child before the
    /// router stops it (and control the whole replay, reported as `stopped`): a rule that
    /// blows the budget on every delivery costs a few budgets, not one per delivery.
    pub replay_max_child_faults: u32,
    /// How long and how many events each webhook keeps (`retention.rs`).
    pub retention: Retention,
    /// How long a plan put before a person (`confirm_policy: person`) waits for one.
    pub approval_ttl: Duration,
    /// How long a todo claim lasts on a webhook that sets no lease of its own: past it a
    /// crashed agent's todo is back in its queue.
    pub claim_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            evaluation_budget: Duration::from_millis(50),
            replay_chunk: 100,
            ingest_per_webhook_per_minute: 600,
            ingest_unverified_per_webhook_per_minute: 60,
            ingest_backlog_per_webhook: 10_000,
            ingest_deadline: Duration::from_secs(2),
            ingest_decide_before_store: Duration::from_millis(250),
            requests_per_endpoint_per_minute: 600,
            replay_budget: Duration::from_secs(30),
            replay_max_child_faults: 3,
            retention: Retention::default(),
            approval_ttl: Duration::from_secs(24 * 60 * 60),
            claim_ttl: Duration::from_secs(30 * 60),
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
    /// Where people reach the console (`http://host:port`), for the link a pending plan's
    /// answer carries; `None`: the link is a path on control's HTTP listener.
    pub console_base: Option<String>,
    /// The running trials' evaluations of live deliveries (issue 45).
    pub trials: Arc<Trials>,
}

impl ControlState {
    /// What the trial verbs and reports need of this state.
    pub fn trials_ctx(&self) -> crate::trials::Ctx<'_> {
        crate::trials::Ctx {
            store: &self.store,
            runner: &self.trials,
            fail_closed: self.capabilities.trusted_actors,
        }
    }

    /// What planning a redrive needs of this state.
    pub fn redrive_ctx(&self) -> crate::redrive::Ctx<'_> {
        crate::redrive::Ctx {
            store: &self.store,
            routers: &self.routers,
            capabilities: &self.capabilities,
            budget_ms: u32::try_from(self.limits.evaluation_budget.as_millis()).unwrap_or(u32::MAX),
            chunk: self.limits.replay_chunk,
        }
    }

    /// The console page where a person reviews plan `plan_id`.
    pub fn console_plan_url(&self, plan_id: &str) -> String {
        format!(
            "{}/console/plans/{plan_id}",
            self.console_base
                .as_deref()
                .unwrap_or("")
                .trim_end_matches('/')
        )
    }
}
