//! Building a candidate (REQ-6, REQ-7): the configuration an install, upgrade or removal
//! would produce, with its rule and param diffs. Pure: the caller supplies the saved
//! configuration, the provenance and the catalog's manifests.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use switchboard_model::{Action, Configuration, MAX_RULES, Rule};
use switchboard_proto::reason::Reason;

pub use switchboard_model::diff::{DefaultActionChange, ParamDiff, RuleDiff, VersionDiff};

use crate::manifest::{Pack, Placement};
use crate::provenance::{
    InstalledPack, Provenance, backfilled, drift, installed_digest, placement, required_packs,
    rule_digest,
};

/// Why no candidate can be built. Each maps to a SPEC-0031 error code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error("{pack} requires {missing}, which is not installed on this webhook; install it first")]
    RequiresPack { pack: String, missing: String },
    /// The mirror of `RequiresPack`: removing a pack that installed packs require.
    #[error("{pack} is required by {}, installed on this webhook; remove {} first", dependents.join(", "), if dependents.len() == 1 { "it" } else { "them" })]
    RequiredByPack {
        pack: String,
        dependents: Vec<String>,
    },
    #[error("{holder} already sets this webhook's default_action; at most one installed pack may")]
    DefaultConflict { holder: String },
    #[error("the candidate has {total} rules; a configuration holds at most {max}")]
    TooManyRules {
        total: usize,
        max: usize,
        packs: Vec<(String, usize)>,
        hand_written: usize,
    },
    #[error("params.{param}: {message}")]
    InvalidParams { param: String, message: String },
    #[error("{field}: {message}")]
    InvalidArgument { field: String, message: String },
    #[error("rules of {pack} were edited or removed since install: {}", rules.join(", "))]
    LocalEdits { pack: String, rules: Vec<String> },
    #[error("{0} is not installed on this webhook")]
    NotInstalled(String),
}

impl MergeError {
    /// The SPEC-0031 error code.
    pub fn reason(&self) -> Reason {
        match self {
            MergeError::RequiresPack { .. } => Reason::RequiresPack,
            MergeError::RequiredByPack { .. } => Reason::RequiredByPack,
            MergeError::DefaultConflict { .. } => Reason::DefaultConflict,
            MergeError::TooManyRules { .. } => Reason::TooManyRules,
            MergeError::InvalidParams { .. } => Reason::InvalidParams,
            MergeError::InvalidArgument { .. } => Reason::InvalidArgument,
            MergeError::LocalEdits { .. } => Reason::LocalEdits,
            MergeError::NotInstalled(_) => Reason::NotFound,
        }
    }
}

/// A candidate configuration and everything a plan says about how it was built.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The pack installed or removed, and its version (the installed one for a removal).
    pub pack_name: String,
    pub pack_version: String,
    pub configuration: Configuration,
    /// The provenance the confirm will save (install time and actor filled in then).
    pub provenance: Provenance,
    pub rule_diff: RuleDiff,
    pub param_diff: ParamDiff,
    pub version_diff: Option<VersionDiff>,
    /// The rule ids this candidate installs (empty for a removal).
    pub pack_rule_ids: Vec<String>,
    /// Trusted actors to set on the webhook (packs with `sets_trusted_actors`).
    pub trusted_actors: Option<switchboard_model::TrustedActors>,
}

/// What the caller asked an install to do.
#[derive(Clone, Debug, Default)]
pub struct InstallRequest {
    pub params: Map<String, Value>,
    pub replaces: Vec<String>,
    pub overwrite_local_edits: bool,
    /// Orphaned params to keep on the webhook rather than remove.
    pub keep_params: Vec<String>,
}

/// Params of `leaving` that no pack in `staying` owns and `staying_schema` does not declare,
/// present on the webhook: removed from `params` unless kept. Refuses a kept key that is
/// not orphaned, so a typo does not pass silently.
fn orphan_params(
    leaving: &InstalledPack,
    staying: &[&InstalledPack],
    declared: &dyn Fn(&str) -> bool,
    keep: &[String],
    params: &mut Map<String, Value>,
    diff: &mut ParamDiff,
) -> Result<(), MergeError> {
    for key in &leaving.owned_params {
        if declared(key)
            || staying.iter().any(|o| o.owned_params.contains(key))
            || !params.contains_key(key)
        {
            continue;
        }
        diff.orphaned.push(key.clone());
        if keep.contains(key) {
            diff.kept.push(key.clone());
        } else {
            params.remove(key);
            diff.removed.push(key.clone());
        }
    }
    if let Some(stray) = keep.iter().find(|k| !diff.orphaned.contains(k)) {
        return Err(MergeError::InvalidArgument {
            field: "keep_params".into(),
            message: format!(
                "{stray} is not a param this change would remove (orphaned: {})",
                if diff.orphaned.is_empty() {
                    "none".to_string()
                } else {
                    diff.orphaned.join(", ")
                }
            ),
        });
    }
    Ok(())
}

fn owner_of<'a>(provenance: &'a Provenance, rule_id: &str) -> Option<&'a InstalledPack> {
    provenance
        .iter()
        .find(|p| p.rule_ids.iter().any(|r| r == rule_id))
}

/// Orders installed-pack blocks so every pack follows the packs it requires; otherwise
/// keeps the given order.
fn order_blocks(
    blocks: Vec<(String, Vec<Rule>)>,
    requires: &BTreeMap<String, Vec<String>>,
) -> Vec<(String, Vec<Rule>)> {
    let mut out: Vec<(String, Vec<Rule>)> = Vec::new();
    let mut pending = blocks;
    while !pending.is_empty() {
        let names: BTreeSet<String> = pending.iter().map(|(n, _)| n.clone()).collect();
        let pos = pending
            .iter()
            .position(|(n, _)| {
                requires
                    .get(n)
                    .is_none_or(|rs| rs.iter().all(|r| !names.contains(r) || r == n))
            })
            .unwrap_or(0);
        out.push(pending.remove(pos));
    }
    out
}

/// Plans the candidate for installing (or upgrading to) `pack` on a webhook.
/// `manifests` finds the manifest of an installed pack version (for requires, placement and
/// the version diff).
pub fn install_candidate(
    saved: &Configuration,
    provenance: &Provenance,
    pack: &Pack,
    request: &InstallRequest,
    manifests: &dyn Fn(&str, &str) -> Option<Pack>,
) -> Result<Candidate, MergeError> {
    for required in &pack.requires.packs {
        if !provenance.iter().any(|p| &p.name == required) {
            return Err(MergeError::RequiresPack {
                pack: pack.name.clone(),
                missing: required.clone(),
            });
        }
    }
    let previous = provenance.iter().find(|p| p.name == pack.name);
    if let Some(prev) = previous {
        let d = drift(prev, saved);
        if d.has_drift() && !request.overwrite_local_edits {
            return Err(MergeError::LocalEdits {
                pack: pack.name.clone(),
                rules: d.rule_ids(),
            });
        }
    }
    // Params: supplied > current value > schema default; unknown keys are refused.
    for key in request.params.keys() {
        if !pack.params_schema.contains_key(key) {
            return Err(MergeError::InvalidParams {
                param: key.clone(),
                message: format!("{} declares no such param", pack.label()),
            });
        }
    }
    let mut params = saved.params.clone();
    let mut diff = ParamDiff::default();
    for (key, spec) in &pack.params_schema {
        let current = saved.params.get(key);
        let value = if let Some(v) = request.params.get(key) {
            Some(v.clone())
        } else if let Some(v) = current {
            let owned_by_this = previous.is_some_and(|p| p.owned_params.contains(key));
            if !owned_by_this {
                diff.adopted.push(key.clone());
            }
            Some(v.clone())
        } else {
            spec.default.clone()
        };
        match value {
            Some(v) => {
                spec.ty.check(&v).map_err(|m| MergeError::InvalidParams {
                    param: key.clone(),
                    message: m,
                })?;
                match current {
                    None => diff.added.push(key.clone()),
                    Some(c) if *c != v => diff.changed.push(key.clone()),
                    Some(_) => {}
                }
                params.insert(key.clone(), v);
            }
            None if spec.required => {
                return Err(MergeError::InvalidParams {
                    param: key.clone(),
                    message: format!(
                        "is required by {} and has no current value or default",
                        pack.label()
                    ),
                });
            }
            None => {}
        }
    }
    match previous {
        Some(prev) => {
            let staying: Vec<&InstalledPack> =
                provenance.iter().filter(|p| p.name != pack.name).collect();
            orphan_params(
                prev,
                &staying,
                &|k| pack.params_schema.contains_key(k),
                &request.keep_params,
                &mut params,
                &mut diff,
            )?;
        }
        None if !request.keep_params.is_empty() => {
            return Err(MergeError::InvalidArgument {
                field: "keep_params".into(),
                message: format!(
                    "{} is not installed, so installing it removes no param",
                    pack.name
                ),
            });
        }
        None => {}
    }
    for key in diff.changed.iter().chain(diff.adopted.iter()) {
        let mut owners: Vec<String> = provenance
            .iter()
            .filter(|p| p.owned_params.contains(key) && p.name != pack.name)
            .map(|p| p.name.clone())
            .collect();
        owners.push(pack.name.clone());
        diff.owners.insert(key.clone(), owners);
    }
    // Replaced rules: hand-written rules on the webhook.
    for id in &request.replaces {
        if !saved
            .rules
            .iter()
            .any(|r| r.id.as_deref() == Some(id.as_str()))
        {
            return Err(MergeError::InvalidArgument {
                field: "replaces".into(),
                message: format!("{id} is not a rule on this webhook"),
            });
        }
        if let Some(owner) = owner_of(provenance, id) {
            return Err(MergeError::InvalidArgument {
                field: "replaces".into(),
                message: format!(
                    "{id} was installed by {}; upgrade or remove that pack instead",
                    owner.name
                ),
            });
        }
    }
    // Default action: one installed pack at most.
    if pack.default_action.is_some()
        && let Some(holder) = provenance
            .iter()
            .find(|p| p.sets_default_action && p.name != pack.name)
    {
        return Err(MergeError::DefaultConflict {
            holder: holder.name.clone(),
        });
    }
    let default_action = match (&pack.default_action, previous) {
        (Some(a), _) => Some(a.clone()),
        (None, Some(prev)) if prev.sets_default_action => None,
        (None, _) => saved.default_action.clone(),
    };
    // Blocks: installed packs (other than this one) by current position, hand-written rules.
    let mut requires: BTreeMap<String, Vec<String>> = BTreeMap::new();
    requires.insert(pack.name.clone(), pack.requires.packs.clone());
    let mut placement_of: BTreeMap<String, Placement> = BTreeMap::new();
    placement_of.insert(pack.name.clone(), pack.placement);
    for p in provenance.iter().filter(|p| p.name != pack.name) {
        let m = manifests(&p.name, &p.version);
        requires.insert(p.name.clone(), required_packs(p, m.as_ref()));
        placement_of.insert(p.name.clone(), placement(p, m.as_ref()));
    }
    let mut prepend: Vec<(String, Vec<Rule>)> = Vec::new();
    let mut append: Vec<(String, Vec<Rule>)> = Vec::new();
    let mut hand_written: Vec<Rule> = Vec::new();
    let new_rules = pack.installed_rules();
    let mut placed_new = false;
    for rule in &saved.rules {
        let id = rule.id.clone().unwrap_or_default();
        if request.replaces.contains(&id) {
            continue;
        }
        match owner_of(provenance, &id) {
            Some(owner) if owner.name == pack.name => {
                // The installed version's block is replaced where it stood.
                if !placed_new {
                    let group = if pack.placement == Placement::Prepend {
                        &mut prepend
                    } else {
                        &mut append
                    };
                    group.push((pack.name.clone(), new_rules.clone()));
                    placed_new = true;
                }
            }
            Some(owner) => {
                let group = match placement_of.get(&owner.name) {
                    Some(Placement::Append) => &mut append,
                    _ => &mut prepend,
                };
                match group.iter_mut().find(|(n, _)| *n == owner.name) {
                    Some((_, rules)) => rules.push(rule.clone()),
                    None => group.push((owner.name.clone(), vec![rule.clone()])),
                }
            }
            None => hand_written.push(rule.clone()),
        }
    }
    if !placed_new {
        let group = if pack.placement == Placement::Prepend {
            &mut prepend
        } else {
            &mut append
        };
        // Before the first pack that requires this one, else at the end of its group.
        let pos = group
            .iter()
            .position(|(n, _)| requires.get(n).is_some_and(|r| r.contains(&pack.name)))
            .unwrap_or(group.len());
        group.insert(pos, (pack.name.clone(), new_rules.clone()));
    }
    let prepend = order_blocks(prepend, &requires);
    let append = order_blocks(append, &requires);
    let mut rules: Vec<Rule> = Vec::new();
    let mut counts: Vec<(String, usize)> = Vec::new();
    for (name, block) in &prepend {
        counts.push((name.clone(), block.len()));
        rules.extend(block.iter().cloned());
    }
    rules.extend(hand_written.iter().cloned());
    for (name, block) in &append {
        counts.push((name.clone(), block.len()));
        rules.extend(block.iter().cloned());
    }
    if rules.len() > MAX_RULES {
        return Err(MergeError::TooManyRules {
            total: rules.len(),
            max: MAX_RULES,
            packs: counts,
            hand_written: hand_written.len(),
        });
    }
    let configuration = Configuration {
        rules,
        default_action,
        params,
    };
    let mut rule_diff = rule_diff(saved, &configuration, &request.replaces);
    rule_diff.default_action = default_action_change(
        saved.default_action.as_ref(),
        configuration.default_action.as_ref(),
    );
    // The provenance the confirm will save.
    let mut new_provenance: Provenance = provenance
        .iter()
        .filter(|p| p.name != pack.name)
        .map(|p| backfilled(p.clone(), manifests(&p.name, &p.version).as_ref()))
        .collect();
    new_provenance.push(InstalledPack {
        name: pack.name.clone(),
        version: pack.version.clone(),
        rule_ids: new_rules.iter().filter_map(|r| r.id.clone()).collect(),
        digest: installed_digest(&new_rules, pack.default_action.as_ref()),
        rule_digests: new_rules
            .iter()
            .map(|r| (r.id.clone().unwrap_or_default(), rule_digest(r)))
            .collect(),
        sets_default_action: pack.default_action.is_some(),
        owned_params: pack.params_schema.keys().cloned().collect(),
        requires: Some(pack.requires.clone()),
        placement: Some(pack.placement),
        installed_at: String::new(),
        installed_by: Default::default(),
        proven: false,
        truncated: false,
        replay: Default::default(),
    });
    let version_diff = previous.map(|prev| {
        version_diff(
            manifests(&prev.name, &prev.version).as_ref(),
            &prev.version,
            pack,
        )
    });
    let trusted_actors = pack
        .sets_trusted_actors
        .as_ref()
        .map(|t| t.resolve(&configuration.params));
    Ok(Candidate {
        pack_name: pack.name.clone(),
        pack_version: pack.version.clone(),
        pack_rule_ids: new_rules.iter().filter_map(|r| r.id.clone()).collect(),
        configuration,
        provenance: new_provenance,
        rule_diff,
        param_diff: diff,
        version_diff,
        trusted_actors,
    })
}

/// Plans the candidate for removing `name`: its installed rules, its default_action if it
/// set one, and the params it alone owns (unless kept). Needs only the provenance, so a pack
/// whose manifest has left the catalog can still be removed; `manifest` is read only for
/// provenance written before requirements were recorded.
pub fn removal_candidate(
    saved: &Configuration,
    provenance: &Provenance,
    name: &str,
    keep_params: &[String],
    manifest: &dyn Fn(&str, &str) -> Option<Pack>,
) -> Result<Candidate, MergeError> {
    let installed = provenance
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| MergeError::NotInstalled(name.to_string()))?;
    // An installed pack that requires this one would be left without it (its rules assume
    // what this one decides first): refused, naming them.
    let dependents: Vec<String> = provenance
        .iter()
        .filter(|p| p.name != name)
        .filter(|p| {
            required_packs(p, manifest(&p.name, &p.version).as_ref())
                .iter()
                .any(|r| r == name)
        })
        .map(|p| p.name.clone())
        .collect();
    if !dependents.is_empty() {
        return Err(MergeError::RequiredByPack {
            pack: name.to_string(),
            dependents,
        });
    }
    let rules: Vec<Rule> = saved
        .rules
        .iter()
        .filter(|r| {
            !r.id
                .as_ref()
                .is_some_and(|id| installed.rule_ids.contains(id))
        })
        .cloned()
        .collect();
    let others: Vec<&InstalledPack> = provenance.iter().filter(|p| p.name != name).collect();
    let mut params = saved.params.clone();
    let mut diff = ParamDiff::default();
    orphan_params(
        installed,
        &others,
        &|_| false,
        keep_params,
        &mut params,
        &mut diff,
    )?;
    let default_action = if installed.sets_default_action {
        None
    } else {
        saved.default_action.clone()
    };
    let configuration = Configuration {
        rules,
        default_action,
        params,
    };
    let mut rule_diff = rule_diff(saved, &configuration, &[]);
    rule_diff.default_action = default_action_change(
        saved.default_action.as_ref(),
        configuration.default_action.as_ref(),
    );
    Ok(Candidate {
        pack_name: installed.name.clone(),
        pack_version: installed.version.clone(),
        configuration,
        provenance: others
            .into_iter()
            .map(|p| backfilled(p.clone(), manifest(&p.name, &p.version).as_ref()))
            .collect(),
        rule_diff,
        param_diff: diff,
        version_diff: None,
        pack_rule_ids: Vec::new(),
        trusted_actors: None,
    })
}

fn default_action_change(
    before: Option<&Action>,
    after: Option<&Action>,
) -> Option<DefaultActionChange> {
    (before != after).then(|| DefaultActionChange {
        before: before.map(|a| a.label().into_owned()),
        after: after.map(|a| a.label().into_owned()),
    })
}

/// Added, removed and changed rule ids between two configurations; `replaced` ids are
/// listed as replaced rather than removed.
pub fn rule_diff(before: &Configuration, after: &Configuration, replaced: &[String]) -> RuleDiff {
    let by_id = |c: &Configuration| -> BTreeMap<String, Rule> {
        c.rules
            .iter()
            .map(|r| (r.id.clone().unwrap_or_default(), r.clone()))
            .collect()
    };
    let (b, a) = (by_id(before), by_id(after));
    let mut d = RuleDiff::default();
    for r in &after.rules {
        let id = r.id.clone().unwrap_or_default();
        match b.get(&id) {
            None => d.added.push(id),
            Some(old) if old != r => d.changed.push(id),
            Some(_) => {}
        }
    }
    for r in &before.rules {
        let id = r.id.clone().unwrap_or_default();
        if !a.contains_key(&id) {
            if replaced.contains(&id) {
                d.replaced.push(id);
            } else {
                d.removed.push(id);
            }
        }
    }
    d
}

fn version_diff(from: Option<&Pack>, from_version: &str, to: &Pack) -> VersionDiff {
    let mut d = VersionDiff {
        from: from_version.to_string(),
        to: to.version.clone(),
        ..Default::default()
    };
    let Some(from) = from else {
        d.rules_added = to.rules.iter().filter_map(|r| r.id.clone()).collect();
        d.params_added = to.params_schema.keys().cloned().collect();
        return d;
    };
    let old: BTreeMap<String, &Rule> = from
        .rules
        .iter()
        .map(|r| (r.id.clone().unwrap_or_default(), r))
        .collect();
    let new: BTreeMap<String, &Rule> = to
        .rules
        .iter()
        .map(|r| (r.id.clone().unwrap_or_default(), r))
        .collect();
    for (id, r) in &new {
        match old.get(id) {
            None => d.rules_added.push(id.clone()),
            Some(o) if o != r => d.rules_changed.push(id.clone()),
            Some(_) => {}
        }
    }
    d.rules_removed = old
        .keys()
        .filter(|k| !new.contains_key(*k))
        .cloned()
        .collect();
    for (k, spec) in &to.params_schema {
        match from.params_schema.get(k) {
            None => d.params_added.push(k.clone()),
            Some(o) if o != spec => d.params_changed.push(k.clone()),
            Some(_) => {}
        }
    }
    d.params_removed = from
        .params_schema
        .keys()
        .filter(|k| !to.params_schema.contains_key(*k))
        .cloned()
        .collect();
    d
}
