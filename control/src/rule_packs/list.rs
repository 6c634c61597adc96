//! `list_rule_packs` (REQ-2): the catalog, and what a webhook has installed with its drift.

use super::*;

impl RulePacks {
    /// `list_rule_packs {webhook_id?}` (REQ-2).
    pub async fn list(
        &self,
        caller: &Caller,
        webhook_id: Option<&str>,
    ) -> Result<Value, PackError> {
        let caps = self.capabilities();
        let webhook = match webhook_id {
            Some(id) => Some(self.state.store.get_webhook(&caller.scope, id).await?),
            None => None,
        };
        let installed = webhook
            .as_ref()
            .map(|w| provenance::from_json(&w.provenance))
            .unwrap_or_default();
        let saved: Configuration = webhook
            .as_ref()
            .and_then(|w| serde_json::from_value(w.configuration.clone()).ok())
            .unwrap_or_default();
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
            let version_list: Vec<Value> = versions
                .iter()
                .map(|cp| {
                    let a = self.catalog.availability(cp, &caps);
                    json!({
                        "version": cp.pack.version,
                        "available": a.available,
                        "missing_capabilities": a.missing_capabilities,
                        "retired": a.retired,
                        "superseded_by": a.superseded_by,
                        "upgrade_note": a.upgrade_note,
                        "params_schema": cp.pack.params_schema,
                        "param_checks": cp.pack.param_checks.iter().map(|c| json!({"id": c.id, "message": c.message})).collect::<Vec<_>>(),
                        "requires": cp.pack.requires,
                        "placement": cp.pack.placement,
                        "rules": cp.pack.rules.iter().map(|r| json!({"id": r.id, "description": r.description, "action": r.action})).collect::<Vec<_>>(),
                        "default_action": cp.pack.default_action,
                        "fixtures": cp.pack.fixtures.len(),
                    })
                })
                .collect();
            let mut entry = json!({
                "name": name,
                "title": newest.pack.title,
                "summary": newest.pack.summary,
                "source": newest.source.label(),
                "available": versions.iter().any(|cp| self.catalog.availability(cp, &caps).available),
                "unavailable_reason": Value::Null,
                "versions": version_list,
            });
            if let Some(i) = installed.iter().find(|p| p.name == name) {
                let upgrade = versions.iter().rev().find(|cp| {
                    cp.pack.semver() > semver_of(&i.version)
                        && self.catalog.availability(cp, &caps).available
                });
                entry["installed"] = installed_entry(
                    i,
                    &saved,
                    upgrade.map(|u| u.pack.version.clone()),
                    self.catalog.find(&i.name, &i.version).is_some(),
                );
            } else if webhook.is_some() {
                entry["installed"] = Value::Null;
            }
            packs.push(entry);
        }
        // Installed packs the catalog no longer has at all (an external source dropped at
        // restart): still listed, so an owner sees what routes and can remove it.
        for i in installed
            .iter()
            .filter(|i| self.catalog.versions(&i.name).is_empty())
        {
            packs.push(json!({
                "name": i.name,
                "title": Value::Null,
                "summary": Value::Null,
                "source": Value::Null,
                "available": false,
                "unavailable_reason": gone_from_catalog(i),
                "versions": [],
                "installed": installed_entry(i, &saved, None, false),
            }));
        }
        Ok(json!({"packs": packs}))
    }
}

/// An installed pack as `list_rule_packs {webhook_id}` shows it, from its provenance alone
/// (its manifest may have left the catalog).
pub(super) fn installed_entry(
    i: &provenance::InstalledPack,
    saved: &Configuration,
    upgrade_to: Option<String>,
    in_catalog: bool,
) -> Value {
    json!({
        "version": i.version,
        "available": in_catalog,
        "unavailable_reason": (!in_catalog).then(|| gone_from_catalog(i)),
        "upgrade_available": upgrade_to.is_some(),
        "upgrade_to": upgrade_to,
        "proven": i.proven,
        "truncated": i.truncated,
        "last_replay": i.replay.replayed_at,
        "installed_at": i.installed_at,
        "installed_by": i.installed_by,
        "rule_ids": i.rule_ids,
        "owned_params": i.owned_params,
        "drift": drift(i, saved),
    })
}

/// Why an installed version has no manifest here, and what an owner can still do.
pub(super) fn gone_from_catalog(i: &provenance::InstalledPack) -> String {
    format!(
        "{}@{} is no longer in this instance's catalog (the source that provided it is not configured, or it stopped offering that version); its rules keep routing as installed, remove_rule_pack still removes them, and installing another listed version upgrades it",
        i.name, i.version
    )
}

pub(super) fn semver_of(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v).ok()
}
