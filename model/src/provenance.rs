//! Provenance (REQ-7): the record, on the webhook, of each installed pack — what was
//! installed, by whom, with what evidence — and its drift (REQ-2) as listings show it. Drift
//! is computed, and a manifest read beside the record, in the `packs` crate.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::manifest::{Placement, Requires};

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

/// The webhook's provenance: installed packs in install order.
pub type Provenance = Vec<InstalledPack>;

/// Reads provenance stored as JSON; anything else is no provenance. Only for the copy a
/// stored plan carries (an older release's plan still applies); a webhook's own provenance is
/// read with [`read`].
pub fn from_json(value: &serde_json::Value) -> Provenance {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

/// Reads a webhook's stored provenance: `{}` (what a new webhook stores) and `null` are no
/// packs; anything else that is not a list of installed packs is an error — never read as
/// "no packs installed", which would let a plan install over packs it cannot see.
pub fn read(text: &str) -> Result<Provenance, serde_json::Error> {
    match serde_json::from_str::<serde_json::Value>(text)? {
        serde_json::Value::Null => Ok(Vec::new()),
        serde_json::Value::Object(m) if m.is_empty() => Ok(Vec::new()),
        other => serde_json::from_value(other),
    }
}

/// Drift of one installed pack against the configuration as it is now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Drift {
    /// `none`, `edited` or `removed` (removed wins when both apply).
    pub state: DriftState,
    pub edited: Vec<String>,
    pub removed: Vec<String>,
}

/// Where an installed pack's rules stand against the configuration as it is now: untouched,
/// some edited by hand, or some removed (which wins when both apply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DriftState {
    #[default]
    None,
    Edited,
    Removed,
}

impl DriftState {
    pub fn as_str(self) -> &'static str {
        match self {
            DriftState::None => "none",
            DriftState::Edited => "edited",
            DriftState::Removed => "removed",
        }
    }

    /// The state of a pack with these rules edited and removed: the one definition.
    pub fn of(edited: &[String], removed: &[String]) -> DriftState {
        if !removed.is_empty() {
            DriftState::Removed
        } else if !edited.is_empty() {
            DriftState::Edited
        } else {
            DriftState::None
        }
    }

    /// The state a text names; an empty text (a message that left it out) is no drift.
    pub fn parse(text: &str) -> Option<DriftState> {
        match text {
            "none" | "" => Some(DriftState::None),
            "edited" => Some(DriftState::Edited),
            "removed" => Some(DriftState::Removed),
            _ => None,
        }
    }
}

impl std::fmt::Display for DriftState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DriftState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Read from its text; a text that names no state is an error, never a guess.
impl<'de> Deserialize<'de> for DriftState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        DriftState::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?} is not a drift state (none, edited or removed)"
            ))
        })
    }
}

/// A string in JSON, so its schema is a string's: output schemas read as before.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for DriftState {
    fn inline_schema() -> bool {
        <String as schemars::JsonSchema>::inline_schema()
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        <String as schemars::JsonSchema>::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        <String as schemars::JsonSchema>::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <String as schemars::JsonSchema>::json_schema(generator)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A drift state is its text in JSON; a message that left it out is no drift, and a text
    /// that names no state does not read.
    #[test]
    fn drift_states_read_and_write_as_their_text() {
        for (state, text) in [
            (DriftState::None, "none"),
            (DriftState::Edited, "edited"),
            (DriftState::Removed, "removed"),
        ] {
            assert_eq!(serde_json::to_value(state).expect("writes"), text);
            assert_eq!(
                serde_json::from_value::<DriftState>(text.into()).expect("reads"),
                state
            );
        }
        assert_eq!(DriftState::parse(""), Some(DriftState::None));
        assert!(serde_json::from_value::<DriftState>("gone".into()).is_err());
        let (a, none) = (vec!["a".to_string()], Vec::new());
        assert_eq!(DriftState::of(&a, &a), DriftState::Removed);
        assert_eq!(DriftState::of(&a, &none), DriftState::Edited);
        assert_eq!(DriftState::of(&none, &none), DriftState::None);
    }

    /// A new webhook stores `{}`; a confirm stores the list. Anything else is an error the
    /// store reports naming the webhook, never "no packs installed".
    #[test]
    fn a_webhook_provenance_reads_as_its_packs_or_does_not_read() {
        assert_eq!(read("{}").expect("a new webhook's"), Vec::new());
        assert_eq!(read("null").expect("null"), Vec::new());
        assert_eq!(read("[]").expect("no packs left"), Vec::new());
        let one = r#"[{"name":"p","version":"1.0.0","rule_ids":["p--a"],"digest":"ab",
            "rule_digests":{"p--a":"cd"},"sets_default_action":false,"owned_params":[],
            "installed_at":"2026-12-01T00:00:00Z","installed_by":{"endpoint":"ep","human":"al"},
            "proven":true,"truncated":false,"replay":{"events_replayed":3,"window_from":null,
            "window_to":null,"changed":0,"replayed_at":"2026-12-01T00:00:00Z"}}]"#;
        let packs = read(one).expect("one pack");
        assert_eq!((packs.len(), packs[0].name.as_str()), (1, "p"));
        for odd in [
            r#"{"p": {"version": "1.0.0"}}"#,
            r#"[{"name": "p"}]"#,
            "7",
            "not json",
        ] {
            assert!(read(odd).is_err(), "{odd}");
        }
    }
}
