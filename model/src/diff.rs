//! What a change does to a webhook's configuration, as a plan reports it: the rule diff, the
//! param diff and, between two versions of a pack, the version diff. Computed by the
//! `packs` crate's merge; read by every surface.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::label::Label;

/// The rule diff between the saved configuration and the candidate, by id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct RuleDiff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    /// Hand-written rules the pack takes over (`replaces`).
    pub replaced: Vec<String>,
    /// Whether the default_action changes, and to what.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_action: Option<DefaultActionChange>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct DefaultActionChange {
    // The default action's label before and after (`None`: the webhook's default queue); a
    // comment, not a doc comment, so the tools' output schemas read as before.
    pub before: Option<Label<'static>>,
    pub after: Option<Label<'static>>,
}

impl DefaultActionChange {
    /// Before and after as a person reads them: the label, or `none` for no default action.
    pub fn texts(&self) -> (String, String) {
        let text = |l: &Option<Label<'static>>| l.as_ref().map_or("none".into(), Label::to_string);
        (text(&self.before), text(&self.after))
    }
}

/// The param diff: keys only, never values of other owners' secrets in a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ParamDiff {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    /// Keys the pack took over from values already on the webhook.
    pub adopted: Vec<String>,
    /// Keys the change leaves owned by no installed pack (a version that no longer declares
    /// them, a removed pack's): removed with the change unless listed in `kept`.
    pub orphaned: Vec<String>,
    /// Orphaned keys the owner asked to keep (`keep_params`): they stay, owned by no pack.
    pub kept: Vec<String>,
    /// For every changed or adopted key, the installed packs that own it (this one included).
    pub owners: BTreeMap<String, Vec<String>>,
}

/// Between the installed version and the target version of the same pack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VersionDiff {
    pub from: String,
    pub to: String,
    pub rules_added: Vec<String>,
    pub rules_removed: Vec<String>,
    pub rules_changed: Vec<String>,
    pub params_added: Vec<String>,
    pub params_removed: Vec<String>,
    pub params_changed: Vec<String>,
}
