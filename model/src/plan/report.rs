//! The replay report (REQ-5): what would change if the candidate replaced the saved
//! configuration, from both configurations' decisions over the same deliveries. Decisions,
//! counts and event ids only — never payload text or header values. Aggregated in the
//! `packs` crate.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Label;

/// One configuration's decision on one delivery, reduced to what a plan reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed {
    /// `queue:<name>`, `drop`, `quarantine`, `default` or `fault`.
    pub label: Label<'static>,
    /// The rule that matched or faulted, if any (not set for a default_action decision).
    pub rule_id: Option<String>,
}

/// One replayed delivery: the saved configuration's decision and the candidate's.
#[derive(Clone, Debug)]
pub struct Replayed {
    pub event_id: String,
    pub received_at_ms: i64,
    pub source: String,
    pub before: Routed,
    pub after: Routed,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Totals {
    pub before: BTreeMap<Label<'static>, u64>,
    pub after: BTreeMap<Label<'static>, u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Transition {
    // The schema's default stays the one it had as text (`Label`'s is `default`).
    #[cfg_attr(feature = "schema", schemars(extend("default" = "")))]
    pub from: Label<'static>,
    #[cfg_attr(feature = "schema", schemars(extend("default" = "")))]
    pub to: Label<'static>,
    pub count: u64,
    pub example_event_ids: Vec<String>,
    /// Which rule decided these deliveries before and which decides them after (`null`: no
    /// rule, the default), most deliveries first: which rule now takes whose deliveries.
    pub by_rules: Vec<RuleShift>,
}

impl Transition {
    /// Lost work, the one definition ([`Label::loses_work`]).
    pub fn loses_work(&self) -> bool {
        Label::loses_work(&self.from, &self.to)
    }

    /// The order every report lists transitions in: lost work first, then by count, ties by
    /// label, so equal reports list alike.
    pub fn report_order(a: &Transition, b: &Transition) -> std::cmp::Ordering {
        b.loses_work()
            .cmp(&a.loses_work())
            .then(b.count.cmp(&a.count))
            .then(a.from.cmp(&b.from))
            .then(a.to.cmp(&b.to))
    }
}

/// Deliveries of one transition that moved from one deciding rule to another.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RuleShift {
    pub before_rule: Option<String>,
    pub after_rule: Option<String>,
    pub count: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RuleReport {
    pub id: String,
    pub first_matches: u64,
    pub faults: u64,
    /// The pack that installed (or would install) the rule; null for hand-written rules.
    pub from_pack: Option<String>,
    /// No replayed delivery was decided by this rule.
    pub never_matched: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct TodosPerDay {
    pub before: f64,
    pub after: f64,
}

/// The replay half of a plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Report {
    pub events_replayed: u64,
    pub window_from: Option<String>,
    pub window_to: Option<String>,
    pub totals: Totals,
    pub changed: u64,
    /// Lost work first (a queue or the default to drop, quarantine or fault), then by count.
    pub transitions: Vec<Transition>,
    /// Every rule of the candidate, in order.
    pub rules: Vec<RuleReport>,
    pub todos_per_day: TodosPerDay,
    pub truncated: bool,
    /// Why the replay stopped before the window's end (a rule kept exceeding its budget):
    /// such a plan is refused anyway, and the report says so.
    pub stopped: Option<String>,
    /// Which deliveries retention still leaves a replay to see.
    pub retention: Option<Retention>,
}

impl Report {
    /// How many deliveries the change turns from work into none: the sum of the transitions
    /// that lose work ([`Transition::loses_work`]), the one count a plan, a trial and the
    /// inbox show.
    pub fn lost_work(&self) -> u64 {
        self.transitions
            .iter()
            .filter(|t| t.loses_work())
            .map(|t| t.count)
            .sum()
    }
}

/// The window retention leaves a webhook, as replays and plans say it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Retention {
    pub max_age_days: u64,
    pub max_events_per_webhook: u64,
    /// RFC 3339: deliveries received before this are gone.
    pub kept_since: String,
    /// RFC 3339: the oldest delivery still stored, if any.
    pub oldest_stored: Option<String>,
}

/// Rules that faulted, with up to 20 example event ids each.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuleFaults {
    pub rule: String,
    pub count: u64,
    pub event_ids: Vec<String>,
}
