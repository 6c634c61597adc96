//! Rule packs in control (SPEC-0031): listing, plan → replay → confirm for installs,
//! upgrades and removals, and replays of hand-written candidates (REQ-8). The pure parts
//! (merge, report, drift) live in `switchboard-packs`; this module does the I/O: the store,
//! the replay lease and rate limit, and the routers.
//!
//! One file per step: `list` (REQ-2), `plan` (install and remove without `confirm`),
//! `replay` (the saved configuration and a candidate over stored deliveries, for plans and
//! REQ-8), `confirm` (applying exactly a plan), `external` (packs from
//! `SWITCHBOARD_RULE_PACK_SOURCES`), `error` (what an agent is told).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use switchboard_model::guard::{GuardOptions, GuardPlan};
use switchboard_model::listing::{
    InstalledStatus, ListedPack, Listing, PackRule, PackVersion, ParamCheckSummary,
};
use switchboard_model::plan::StaleCause;
use switchboard_model::{Configuration, Label};
use switchboard_packs::merge::{
    Candidate, InstallRequest, MergeError, install_candidate, removal_candidate,
};
use switchboard_packs::plan::{
    Applied, AppliedPack, Apply, Binding, CONFIRM_TOOL, CandidateReplay, ConfirmArguments,
    ConfirmWith, Delivered, Evidence, FixtureOutcome, Pending, Plan, PlanKind, PlanPack, PlanState,
    Report, Retention, Routed, StaleReason, StoredPlan, TOKEN_PLACEHOLDER, proven, routed,
};
use switchboard_packs::provenance::{self, InstalledBy, ReplaySummary, drift};
use switchboard_packs::{Catalog, Pack, ResolveError};
use switchboard_proto::router::v1::{
    Configuration as WireConfiguration, Decision, Outcome, RoutingContext, StoredDelivery,
    WorkClass,
};

use crate::error::Error;
use crate::error::Reason;
use crate::routing::RoutingError;
use crate::scope::OwnerScope;
use crate::state::ControlState;
use crate::store::Actor;
use crate::store::{ConfirmPolicy, REPLAYS_PER_MINUTE, SaveConfiguration, Webhook};
use crate::store::{NewPlan, new_plan_token};
use crate::wire::{routing_context, stored_delivery};

mod confirm;
mod error;
mod external;
mod list;
mod plan;
mod promote;
mod replay;

use self::{confirm::*, plan::*, promote::*, replay::*};
pub use confirm::{Accepted, Allow, PlanStatus, approval_tally};
pub use error::{Details, PackError};
pub use external::load_catalog;
pub use replay::Replayer;

/// Replay window defaults (REQ-4).
pub const DEFAULT_REPLAY_LIMIT: u32 = 200;
pub const MAX_REPLAY_LIMIT: u32 = 1000;
/// A plan token lives this long.
pub const PLAN_TTL: Duration = Duration::from_secs(15 * 60);

/// Who is calling: an endpoint, the human it acts for, and its owner scope.
#[derive(Clone, Debug)]
pub struct Caller {
    pub endpoint_id: String,
    pub human: String,
    pub scope: OwnerScope,
}

/// `replay: {limit?, since?}`.
#[derive(Clone, Debug, Default)]
pub struct ReplayWindow {
    pub limit: Option<u32>,
    /// Milliseconds since the epoch.
    pub since: Option<i64>,
}

/// `install_rule_pack` arguments.
#[derive(Clone, Debug, Default)]
pub struct InstallArgs {
    pub webhook_id: String,
    pub name: String,
    pub version: Option<String>,
    pub params: Option<Map<String, Value>>,
    pub replaces: Option<Vec<String>>,
    pub replay: ReplayWindow,
    pub confirm: Option<String>,
    pub allow_unproven: bool,
    pub overwrite_local_edits: bool,
    /// Params the change orphans that stay on the webhook (`param_diff.orphaned`).
    pub keep_params: Option<Vec<String>>,
    /// What the plan's guard asks (planning only).
    pub guard: GuardOptions,
}

/// `remove_rule_pack` arguments.
#[derive(Clone, Debug, Default)]
pub struct RemoveArgs {
    pub webhook_id: String,
    pub name: String,
    pub replay: ReplayWindow,
    pub confirm: Option<String>,
    pub allow_unproven: bool,
    /// Params the removal orphans that stay on the webhook.
    pub keep_params: Option<Vec<String>>,
    pub guard: GuardOptions,
}

/// What a pack call answers: a plan (nothing saved), or a confirm's applied result.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum PackAnswer {
    Plan(Box<Plan>),
    Applied(Box<Applied>),
    /// A confirm on a `person` webhook: nothing saved; the plan waits for a person.
    Pending(Box<Pending>),
}

/// Reports replay progress: (deliveries replayed, total).
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// The rule-pack service of one control process.
#[derive(Clone)]
pub struct RulePacks {
    state: ControlState,
    catalog: Arc<Catalog>,
    /// The replay plans are made from.
    replayer: Replayer,
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn canonical(v: &Value) -> String {
    let mut s = String::new();
    switchboard_model::write_canonical(v, &mut s);
    s
}

pub(crate) fn rfc3339(ms: i64) -> String {
    switchboard_model::rfc3339_millis(ms)
}

impl RulePacks {
    pub fn new(state: ControlState, catalog: Arc<Catalog>) -> Self {
        Self {
            replayer: Replayer::new(state.clone()),
            state,
            catalog,
        }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub(super) fn capabilities(&self) -> Vec<String> {
        if self.state.capabilities.trusted_actors {
            vec!["trusted_actors".to_string()]
        } else {
            Vec::new()
        }
    }

    pub(super) fn manifest(&self, name: &str, version: &str) -> Option<Pack> {
        self.catalog.find(name, version).map(|c| c.pack.clone())
    }
}
