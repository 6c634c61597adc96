//! `list_rule_packs` (REQ-2) as typed values: the catalog's packs with their versions and,
//! for a webhook, what is installed there with its drift. The MCP tool's JSON is their serde
//! form; the gRPC listing is converted from them in proto's `convert::plan`.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::Action;
use crate::manifest::{Placement, Requires};
use crate::provenance::{Drift, InstalledBy};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Listing {
    pub packs: Vec<ListedPack>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ListedPack {
    pub name: String,
    /// The newest version's; null for an installed pack the catalog no longer has.
    pub title: Option<String>,
    pub summary: Option<String>,
    pub source: Option<String>,
    /// Some version can be planned on this instance.
    pub available: bool,
    pub unavailable_reason: Option<String>,
    pub versions: Vec<PackVersion>,
    /// Absent when the listing names no webhook; null when the pack is not installed on it.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_or_null"
    )]
    pub installed: Option<Option<InstalledStatus>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct PackVersion {
    pub version: String,
    /// This version can be planned here.
    pub available: bool,
    pub missing_capabilities: Vec<String>,
    pub retired: bool,
    pub superseded_by: Option<String>,
    pub upgrade_note: Option<String>,
    /// The params' JSON Schema.
    pub params_schema: Value,
    pub param_checks: Vec<ParamCheckSummary>,
    pub requires: Requires,
    pub placement: Option<Placement>,
    pub rules: Vec<PackRule>,
    /// `{"queue": "<name>"}`, `{"drop": true}` or `{"quarantine": true}`, if the pack sets one.
    #[cfg_attr(feature = "schema", schemars(with = "Option<serde_json::Value>"))]
    pub default_action: Option<Action>,
    /// How many fixtures prove it.
    pub fixtures: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ParamCheckSummary {
    pub id: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PackRule {
    pub id: String,
    #[serde(default)]
    pub description: Option<String>,
    /// `{"queue": "<name>"}`, `{"drop": true}` or `{"quarantine": true}`.
    #[cfg_attr(feature = "schema", schemars(with = "serde_json::Value"))]
    pub action: Action,
}

/// An installed pack as listed for its webhook, from its provenance alone (its manifest may
/// have left the catalog).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct InstalledStatus {
    pub version: String,
    /// The installed version's manifest is still in this instance's catalog (not whether it
    /// can be planned: that is `versions[].available`).
    pub available: bool,
    pub unavailable_reason: Option<String>,
    pub upgrade_available: bool,
    pub upgrade_to: Option<String>,
    pub proven: bool,
    pub truncated: bool,
    /// When the replay behind the install ran (RFC 3339).
    pub last_replay: String,
    pub installed_at: String,
    pub installed_by: InstalledBy,
    pub rule_ids: Vec<String>,
    pub owned_params: Vec<String>,
    pub drift: Drift,
}

/// A key that is absent stays `None` (by `default`); a key that is present is `Some`, even
/// when it is null.
fn present_or_null<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn installed_is_absent_null_or_an_object_as_the_listing_was_asked() {
        let absent: ListedPack = serde_json::from_value(json!({"name": "a"})).expect("absent");
        assert_eq!(absent.installed, None);
        assert!(
            serde_json::to_value(&absent)
                .expect("json")
                .get("installed")
                .is_none()
        );
        let null: ListedPack =
            serde_json::from_value(json!({"name": "a", "installed": null})).expect("null");
        assert_eq!(null.installed, Some(None));
        assert_eq!(
            serde_json::to_value(&null).expect("json")["installed"],
            json!(null)
        );
        let there: ListedPack =
            serde_json::from_value(json!({"name": "a", "installed": {"version": "1.0.0"}}))
                .expect("there");
        assert_eq!(
            there.installed.flatten().map(|i| i.version).as_deref(),
            Some("1.0.0")
        );
    }
}
