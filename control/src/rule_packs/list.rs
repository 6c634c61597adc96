//! `list_rule_packs` (REQ-2): the catalog, and what a webhook has installed with its drift.

use super::*;

impl RulePacks {
    /// `list_rule_packs {webhook_id?}` (REQ-2).
    pub async fn list(
        &self,
        caller: &Caller,
        webhook_id: Option<&str>,
    ) -> Result<Listing, PackError> {
        let caps = self.capabilities();
        let webhook = match webhook_id {
            Some(id) => Some(self.state.store.get_webhook(&caller.scope, id).await?),
            None => None,
        };
        let installed = webhook
            .as_ref()
            .map(|w| w.provenance.clone())
            .unwrap_or_default();
        let saved: Configuration = match &webhook {
            Some(w) => w.configuration.clone(),
            None => Configuration::default(),
        };
        let mut names: Vec<&str> = self
            .catalog
            .packs()
            .iter()
            .map(|p| p.pack.name.as_str())
            .collect();
        names.dedup();
        let mut packs = Vec::new();
        for name in names {
            let versions = self.catalog.versions(name);
            let Some(newest) = versions.last() else {
                continue;
            };
            let version_list: Vec<PackVersion> = versions
                .iter()
                .map(|cp| {
                    let a = self.catalog.availability(cp, &caps);
                    PackVersion {
                        version: cp.pack.version.clone(),
                        available: a.available,
                        missing_capabilities: a.missing_capabilities,
                        retired: a.retired,
                        superseded_by: a.superseded_by,
                        upgrade_note: a.upgrade_note,
                        params_schema: serde_json::to_value(&cp.pack.params_schema)
                            .unwrap_or_default(),
                        param_checks: cp
                            .pack
                            .param_checks
                            .iter()
                            .map(|c| ParamCheckSummary {
                                id: c.id.clone(),
                                message: c.message.clone(),
                            })
                            .collect(),
                        requires: cp.pack.requires.clone(),
                        placement: Some(cp.pack.placement),
                        rules: cp
                            .pack
                            .rules
                            .iter()
                            .map(|r| PackRule {
                                id: r.id.clone().unwrap_or_default(),
                                description: r.description.clone(),
                                action: r.action.clone(),
                            })
                            .collect(),
                        default_action: cp.pack.default_action.clone(),
                        fixtures: cp.pack.fixtures.len() as u64,
                    }
                })
                .collect();
            let installed_here = installed.iter().find(|p| p.name == name).map(|i| {
                let upgrade = versions.iter().rev().find(|cp| {
                    cp.pack.semver() > semver_of(&i.version)
                        && self.catalog.availability(cp, &caps).available
                });
                installed_entry(
                    i,
                    &saved,
                    upgrade.map(|u| u.pack.version.clone()),
                    self.catalog.find(&i.name, &i.version).is_some(),
                )
            });
            packs.push(ListedPack {
                name: name.to_string(),
                title: Some(newest.pack.title.clone()),
                summary: Some(newest.pack.summary.clone()),
                source: Some(newest.source.label().to_string()),
                available: versions
                    .iter()
                    .any(|cp| self.catalog.availability(cp, &caps).available),
                unavailable_reason: None,
                versions: version_list,
                installed: webhook.is_some().then_some(installed_here),
            });
        }
        // Installed packs the catalog no longer has at all (an external source dropped at
        // restart): still listed, so an owner sees what routes and can remove it.
        for i in installed
            .iter()
            .filter(|i| self.catalog.versions(&i.name).is_empty())
        {
            packs.push(ListedPack {
                name: i.name.clone(),
                title: None,
                summary: None,
                source: None,
                available: false,
                unavailable_reason: Some(gone_from_catalog(i)),
                versions: Vec::new(),
                installed: Some(Some(installed_entry(i, &saved, None, false))),
            });
        }
        Ok(Listing { packs })
    }
}

/// An installed pack as `list_rule_packs {webhook_id}` shows it, from its provenance alone
/// (its manifest may have left the catalog).
fn installed_entry(
    i: &provenance::InstalledPack,
    saved: &Configuration,
    upgrade_to: Option<String>,
    in_catalog: bool,
) -> InstalledStatus {
    InstalledStatus {
        version: i.version.clone(),
        available: in_catalog,
        unavailable_reason: (!in_catalog).then(|| gone_from_catalog(i)),
        upgrade_available: upgrade_to.is_some(),
        upgrade_to,
        proven: i.proven,
        truncated: i.truncated,
        last_replay: i.replay.replayed_at.clone(),
        installed_at: i.installed_at.clone(),
        installed_by: i.installed_by.clone(),
        rule_ids: i.rule_ids.clone(),
        owned_params: i.owned_params.clone(),
        drift: drift(i, saved),
    }
}

/// Why an installed version has no manifest here, and what an owner can still do.
fn gone_from_catalog(i: &provenance::InstalledPack) -> String {
    format!(
        "{}@{} is no longer in this instance's catalog (the source that provided it is not configured, or it stopped offering that version); its rules keep routing as installed, remove_rule_pack still removes them, and installing another listed version upgrades it",
        i.name, i.version
    )
}

fn semver_of(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v).ok()
}
