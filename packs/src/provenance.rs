//! Provenance (REQ-7): the record, on the webhook, of each installed pack — what was
//! installed, by whom, with what evidence — and drift against it (REQ-2).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use switchboard_model::{Action, Configuration, Rule};

use crate::manifest::{Pack, Placement, Requires};

/// Who confirmed an install: the endpoint and its owning human.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InstalledBy {
    pub endpoint: String,
    pub human: String,
}

/// What the replay behind an install saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReplaySummary {
    pub events_replayed: u64,
    pub window_from: Option<String>,
    pub window_to: Option<String>,
    pub changed: u64,
    pub replayed_at: String,
}

/// One installed pack on one webhook.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InstalledPack {
    pub name: String,
    pub version: String,
    /// Installed rule ids (`<name>--<local-id>`), in order.
    pub rule_ids: Vec<String>,
    /// Digest of the installed rules and any default_action as installed.
    pub digest: String,
    /// Per-rule digests as installed, so drift can name the edited rule.
    pub rule_digests: BTreeMap<String, String>,
    /// Whether this pack set the webhook's default_action.
    pub sets_default_action: bool,
    /// Param keys this pack owns.
    pub owned_params: Vec<String>,
    /// What the manifest required and where it placed its rules, kept so listing, removal
    /// and other packs' installs still work when the manifest has left the catalog. Absent
    /// in provenance written before they were recorded: then the catalog's manifest is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires: Option<Requires>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    pub installed_at: String,
    pub installed_by: InstalledBy,
    pub proven: bool,
    pub truncated: bool,
    pub replay: ReplaySummary,
}

impl InstalledPack {
    /// The packs this one requires: as recorded, else as its manifest says, else none.
    pub fn required_packs(&self, manifest: Option<&Pack>) -> Vec<String> {
        match (&self.requires, manifest) {
            (Some(r), _) => r.packs.clone(),
            (None, Some(m)) => m.requires.packs.clone(),
            (None, None) => Vec::new(),
        }
    }

    /// Where its rules stand: as recorded, else as its manifest says, else `prepend`.
    pub fn placement(&self, manifest: Option<&Pack>) -> Placement {
        self.placement
            .or(manifest.map(|m| m.placement))
            .unwrap_or(Placement::Prepend)
    }

    /// Fills what older provenance did not record from the manifest, when there is one.
    pub fn backfilled(mut self, manifest: Option<&Pack>) -> Self {
        if let Some(m) = manifest {
            self.requires.get_or_insert_with(|| m.requires.clone());
            self.placement.get_or_insert(m.placement);
        }
        self
    }
}

/// The webhook's provenance: installed packs in install order.
pub type Provenance = Vec<InstalledPack>;

/// Reads provenance stored as JSON; anything else is no provenance.
pub fn from_json(value: &serde_json::Value) -> Provenance {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

pub fn rule_digest(rule: &Rule) -> String {
    let mut text = String::new();
    switchboard_model::write_canonical(&serde_json::to_value(rule).unwrap_or_default(), &mut text);
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Digest of a set of installed rules and the default action they came with.
pub fn installed_digest(rules: &[Rule], default_action: Option<&Action>) -> String {
    let value = serde_json::json!({"rules": rules, "default_action": default_action});
    let mut text = String::new();
    switchboard_model::write_canonical(&value, &mut text);
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Drift of one installed pack against the configuration as it is now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Drift {
    /// `none`, `edited` or `removed` (removed wins when both apply).
    pub state: String,
    pub edited: Vec<String>,
    pub removed: Vec<String>,
}

impl Drift {
    pub fn has_drift(&self) -> bool {
        !self.edited.is_empty() || !self.removed.is_empty()
    }

    /// Every drifted rule id, edited first.
    pub fn rule_ids(&self) -> Vec<String> {
        self.edited
            .iter()
            .chain(self.removed.iter())
            .cloned()
            .collect()
    }
}

pub fn drift(installed: &InstalledPack, config: &Configuration) -> Drift {
    let mut d = Drift::default();
    for id in &installed.rule_ids {
        match config
            .rules
            .iter()
            .find(|r| r.id.as_deref() == Some(id.as_str()))
        {
            None => d.removed.push(id.clone()),
            Some(rule) => {
                if installed
                    .rule_digests
                    .get(id)
                    .is_some_and(|want| *want != rule_digest(rule))
                {
                    d.edited.push(id.clone());
                }
            }
        }
    }
    d.state = if !d.removed.is_empty() {
        "removed"
    } else if !d.edited.is_empty() {
        "edited"
    } else {
        "none"
    }
    .into();
    d
}
