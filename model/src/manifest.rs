//! What a pack's manifest says that outlives the manifest: where its rules stand and what it
//! requires. Provenance records both and listings show them, so they are product vocabulary;
//! the manifest itself (rules, params, fixtures) is the `packs` crate's.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// Before every hand-written rule.
    Prepend,
    /// After every hand-written rule.
    Append,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Requires {
    #[serde(default)]
    pub source_types: Vec<String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default)]
    pub packs: Vec<String>,
}
