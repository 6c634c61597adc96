//! Provenance (REQ-7) logic: digests of installed rules, drift against the configuration as
//! it is now (REQ-2), and what an installed pack's record means read beside its manifest. The
//! record's types are the model's ([`switchboard_model::provenance`]).

use sha2::{Digest, Sha256};
use switchboard_model::{Action, Configuration, Rule};

pub use switchboard_model::provenance::{
    Drift, DriftState, InstalledBy, InstalledPack, Provenance, ReplaySummary, from_json,
};

use crate::manifest::{Pack, Placement};

/// The packs `installed` requires: as recorded, else as its manifest says, else none.
pub fn required_packs(installed: &InstalledPack, manifest: Option<&Pack>) -> Vec<String> {
    match (&installed.requires, manifest) {
        (Some(r), _) => r.packs.clone(),
        (None, Some(m)) => m.requires.packs.clone(),
        (None, None) => Vec::new(),
    }
}

/// Where `installed`'s rules stand: as recorded, else as its manifest says, else `prepend`.
pub fn placement(installed: &InstalledPack, manifest: Option<&Pack>) -> Placement {
    installed
        .placement
        .or(manifest.map(|m| m.placement))
        .unwrap_or(Placement::Prepend)
}

/// `installed` with what older provenance did not record filled from the manifest, when
/// there is one.
pub fn backfilled(mut installed: InstalledPack, manifest: Option<&Pack>) -> InstalledPack {
    if let Some(m) = manifest {
        installed.requires.get_or_insert_with(|| m.requires.clone());
        installed.placement.get_or_insert(m.placement);
    }
    installed
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
    d.state = DriftState::of(&d.edited, &d.removed);
    d
}
