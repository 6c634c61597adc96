//! The plan (REQ-3…REQ-5) as typed values: what a plan call answers ([`Plan`]), what the
//! store keeps to apply it ([`StoredPlan`]), and what a confirm answers ([`Applied`]). The
//! MCP tools' JSON is these types' serde form; the gRPC messages are converted from them in
//! proto's `convert::plan`, so agents and services read one definition. Plans are made (the
//! replay aggregated, candidates merged) in the `packs` crate.

pub mod approval;
pub mod report;
mod state;

pub use report::*;
pub use state::{PlanFacts, PlanState, StaleCause, StaleReason};

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::diff::{ParamDiff, RuleDiff, VersionDiff};
use crate::provenance::{self, InstalledPack, Provenance};
use crate::trial::TrialReport;
use crate::{Configuration, Label, TrustedActors};

/// What `plan_token` holds in `confirm_with.arguments`: where the caller puts the token.
pub const TOKEN_PLACEHOLDER: &str = "<plan_token>";

/// The call that applies a plan (`confirm_with.tool`): a verb of its own, so that planning
/// changes nothing and an endpoint may be allowed to plan but not to confirm.
pub const CONFIRM_TOOL: &str = "confirm_rule_pack_plan";

/// What a plan would do to the installed pack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum PlanKind {
    /// The pack is not installed yet.
    #[default]
    Install,
    Upgrade,
    Downgrade,
    /// The same version again (new params, or to repair hand edits).
    Reinstall,
    Remove,
    /// A hand-written configuration (`plan_webhook_rules`): no pack.
    Rules,
}

impl PlanKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanKind::Install => "install",
            PlanKind::Upgrade => "upgrade",
            PlanKind::Downgrade => "downgrade",
            PlanKind::Reinstall => "reinstall",
            PlanKind::Remove => "remove",
            PlanKind::Rules => "rules",
        }
    }

    /// What a person reads a plan of this kind as: `install drop-ci-noise@2.0.0`, or
    /// `hand-written rules` (no pack). One wording for the console, the CLI and the inbox.
    pub fn title(self, pack: &str, version: &str) -> String {
        match self {
            PlanKind::Rules => "hand-written rules".to_string(),
            kind => format!("{} {pack}@{version}", kind.as_str()),
        }
    }

    /// The verb that plans (and confirms) this kind of change.
    pub fn verb(self) -> &'static str {
        match self {
            PlanKind::Remove => "remove_rule_pack",
            PlanKind::Rules => "plan_webhook_rules",
            _ => "install_rule_pack",
        }
    }
}

/// The pack a plan installs, upgrades or removes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct PlanPack {
    pub name: String,
    pub version: String,
    /// The version installed now, if any.
    pub from_version: Option<String>,
}

/// One pack fixture routed through the candidate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct FixtureOutcome {
    pub name: String,
    // The schema's default stays the one it had as text (`Label`'s is `default`).
    /// What the fixture expects (`drop`, `default`, `queue:<name>`, …).
    #[cfg_attr(feature = "schema", schemars(extend("default" = "")))]
    pub want: Label<'static>,
    /// What the candidate decided.
    #[cfg_attr(feature = "schema", schemars(extend("default" = "")))]
    pub got: Label<'static>,
    /// The rule that decided, if any.
    pub rule: Option<String>,
    pub passed: bool,
}

/// How to apply the plan: the call to make (`confirm_rule_pack_plan`, a tool of its own so
/// the planning call changes nothing), with the token in place of `<plan_token>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ConfirmWith {
    pub tool: String,
    pub arguments: ConfirmArguments,
    pub note: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ConfirmArguments {
    pub webhook_id: String,
    pub plan_token: String,
    /// `true` when the plan is unproven (the confirm needs it), else null.
    pub allow_unproven: Option<bool>,
    /// `true` when the plan's trial is insufficient (the confirm needs it); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_insufficient_trial: Option<bool>,
}

/// A plan as its caller reads it: the replay report, the fixtures, the diffs and how to
/// confirm. Nothing in it is payload text (REQ-5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Plan {
    #[serde(flatten)]
    pub report: Report,
    pub kind: PlanKind,
    pub webhook_id: String,
    pub pack: PlanPack,
    /// The pack's fixtures through the candidate (none for a removal).
    pub fixtures: Vec<FixtureOutcome>,
    pub rule_diff: RuleDiff,
    pub param_diff: ParamDiff,
    /// Between the installed and the planned version, for an upgrade or downgrade.
    pub version_diff: Option<VersionDiff>,
    /// A delivery of the pack's source types was replayed and the replay was complete.
    pub proven: bool,
    /// Always true: a plan saves nothing.
    pub nothing_saved: bool,
    /// RFC 3339: the token is refused after this.
    pub expires_at: String,
    pub confirm_with: ConfirmWith,
    /// The single-use token that applies exactly this plan; only in the plan call's answer
    /// (the store keeps its hash).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_token: Option<String>,
    /// A promotion (`promote_rule_trial`): the trial's report, frozen when it was promoted,
    /// beside the replay. The token binds its digest as well as the candidate's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial: Option<TrialReport>,
    /// With `trial`: whether its evidence is enough (enough deliveries, every predicted
    /// transition observed). When false, the confirm needs `allow_insufficient_trial`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial_sufficient: Option<bool>,
    /// The guard a confirm starts (issue 46): accepted with the change. Absent only in plans
    /// stored before guards were planned (their confirm starts the default guard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard: Option<crate::guard::GuardPlan>,
}

/// `test_webhook_rules` with `replay` (REQ-8): a hand-written candidate's replay report,
/// with no token: nothing is saved and nothing can be confirmed from it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct CandidateReplay {
    #[serde(flatten)]
    pub report: Report,
    /// Ids given to candidate rules that had none, in rule order.
    pub minted_rule_ids: Vec<String>,
    pub rule_diff: RuleDiff,
    /// Always true.
    pub nothing_saved: bool,
}

/// The arguments a confirm is checked against, each on its own (REQ-3). Its canonical JSON
/// is what `binding_digest` hashes, so its shape is fixed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Binding {
    Remove {
        remove: String,
        #[serde(default)]
        keep_params: Vec<String>,
    },
    /// A hand-written configuration: the candidate's digest (it has no other arguments).
    /// Before `Install`, whose fields all have defaults and would read it.
    Rules { rules: String },
    Install {
        #[serde(default)]
        params: Map<String, Value>,
        #[serde(default)]
        replaces: Vec<String>,
        #[serde(default)]
        overwrite_local_edits: bool,
        /// Absent in plans stored before the argument existed: none kept.
        #[serde(default)]
        keep_params: Vec<String>,
    },
}

impl Binding {
    pub fn keep_params(&self) -> &[String] {
        match self {
            Binding::Remove { keep_params, .. } | Binding::Install { keep_params, .. } => {
                keep_params
            }
            Binding::Rules { .. } => &[],
        }
    }
}

/// What the store keeps to apply a plan, beside the plan itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Apply {
    /// The candidate (the store's `candidate` column is what a confirm saves; this copy is
    /// read leniently so an odd one never makes a plan unreadable).
    #[serde(deserialize_with = "lenient_configuration")]
    pub configuration: Configuration,
    /// The provenance the confirm saves (install time and actor filled in then).
    #[serde(deserialize_with = "lenient_provenance")]
    pub provenance: Provenance,
    /// Set on the webhook when the plan sets them; left as they are otherwise.
    #[serde(deserialize_with = "lenient_trusted_actors")]
    pub trusted_actors: Option<TrustedActors>,
    pub proven: bool,
    pub truncated: bool,
    pub kind: PlanKind,
    /// sha256 of the canonical binding.
    pub binding_digest: String,
    /// Absent in plans stored before it was kept whole: then only the digest is checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
    /// A promotion's trial: the confirm is stale unless the trial still reads as promoted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial: Option<TrialBinding>,
}

/// The trial a promotion was made from, as its token binds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrialBinding {
    pub trial_id: String,
    /// The trial report's digest when promoted.
    pub digest: String,
    pub sufficient: bool,
}

/// A stored plan: the plan as its caller read it (without the token) and how to apply it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredPlan {
    #[serde(flatten)]
    pub plan: Plan,
    pub apply: Apply,
}

/// What a confirm answers: the saved configuration's version and the pack's provenance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Applied {
    /// Always true: the configuration was saved.
    pub saved: bool,
    pub kind: PlanKind,
    pub webhook_id: String,
    /// The configuration version the confirm saved.
    pub version: i64,
    /// sha256 (hex) of the saved configuration.
    pub digest: String,
    pub pack: AppliedPack,
    /// The pack's provenance as saved; null after a removal.
    pub provenance: Option<InstalledPack>,
    /// The guard the confirm started (`get_rule_guard` reads it); null if none could start.
    pub guard_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct AppliedPack {
    pub name: String,
    pub version: String,
}

/// A confirm on a webhook whose `confirm_policy` is `person` (issue 20): nothing was saved;
/// the plan waits for a person to accept or reject it at `console_url`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Pending {
    /// Always false: nothing was saved; a person puts the plan live.
    pub saved: bool,
    /// Always `pending_approval`.
    pub state: PlanState,
    pub plan_id: String,
    pub webhook_id: String,
    pub kind: PlanKind,
    pub pack: AppliedPack,
    /// Where a person reviews the plan and accepts or rejects it.
    pub console_url: String,
    /// RFC 3339: unless a person accepts it by then, the plan is stale.
    pub approval_expires_at: String,
    /// How many people must accept it, how many more are needed, and from whom they cannot
    /// come (issue 47).
    pub approvals: approval::Tally,
}

/// Stored provenance is read as [`provenance::from_json`] reads it: odd is none, not an
/// error, so a plan stored by an older release still applies.
fn lenient_provenance<'de, D: Deserializer<'de>>(d: D) -> Result<Provenance, D::Error> {
    Ok(provenance::from_json(&Value::deserialize(d)?))
}

fn lenient_configuration<'de, D: Deserializer<'de>>(d: D) -> Result<Configuration, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).unwrap_or_default())
}

fn lenient_trusted_actors<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<TrustedActors>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok((!value.is_null()).then(|| TrustedActors::from_value(&value)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_binding_keeps_the_json_its_digest_was_taken_over() {
        let install = json!({"params": {"a": 1}, "replaces": ["x"], "overwrite_local_edits": false, "keep_params": []});
        let b: Binding = serde_json::from_value(install.clone()).expect("install");
        assert!(matches!(b, Binding::Install { .. }));
        assert_eq!(serde_json::to_value(&b).expect("json"), install);
        let rules = json!({"rules": "ab12"});
        let b: Binding = serde_json::from_value(rules.clone()).expect("rules");
        assert!(matches!(b, Binding::Rules { .. }), "{b:?}");
        assert_eq!(serde_json::to_value(&b).expect("json"), rules);
        let remove = json!({"remove": "drop-ci-noise", "keep_params": ["k"]});
        let b: Binding = serde_json::from_value(remove.clone()).expect("remove");
        assert_eq!(b.keep_params(), ["k".to_string()]);
        assert_eq!(serde_json::to_value(&b).expect("json"), remove);
    }

    #[test]
    fn a_plan_stored_by_an_older_release_still_reads() {
        // No binding, no retention, no stopped, no by_rules, odd trusted actors.
        let stored = json!({
            "kind": "upgrade", "webhook_id": "w", "events_replayed": 3,
            "transitions": [{"from": "queue:a", "to": "drop", "count": 3, "example_event_ids": ["e"]}],
            "apply": {"configuration": {"rules": [], "unknown": 1}, "provenance": "odd", "trusted_actors": {"humans": "x"},
                      "proven": true, "truncated": false, "kind": "upgrade", "binding_digest": "d"}
        });
        let p: StoredPlan = serde_json::from_value(stored).expect("reads");
        assert_eq!(p.plan.kind, PlanKind::Upgrade);
        assert_eq!(p.plan.report.transitions[0].count, 3);
        assert!(p.plan.report.transitions[0].by_rules.is_empty());
        assert!(p.apply.binding.is_none());
        assert!(p.apply.provenance.is_empty());
        assert_eq!(p.apply.trusted_actors, Some(TrustedActors::default()));
    }
}
