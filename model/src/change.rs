//! What a saved configuration version records of its change (RFC-0003: changes are facts):
//! the change itself and, when a plan applied it, the plan's provenance. Stored with each
//! history row as canonical JSON; these types read every row an earlier landing wrote.

use serde::{Deserialize, Serialize};

/// What a save changed: `op` (`create_webhook`, `set_webhook_rules`, `update_webhook_rule`,
/// `delete_webhook_rule`, or a pack verb such as `install_rule_pack`) and what it names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigurationChange {
    pub op: String,
    /// The rule an update or a delete names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// The fields an update set, sorted (present on every update, even an empty one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
    /// The id an update gave the rule, when it renamed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_rule_id: Option<String>,
    /// Ids minted for rules that came without one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minted_rule_ids: Vec<String>,
    /// The pack, its version and the plan's kind (`install`, `upgrade`, `remove`), for a
    /// pack change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl ConfigurationChange {
    /// A change that names nothing but its op.
    pub fn op(op: &str) -> Self {
        Self {
            op: op.to_string(),
            ..Self::default()
        }
    }

    /// How a person reads it in one line: `install_rule_pack drop-ci-noise@2.0.0`, or the op.
    pub fn summary(&self) -> String {
        match (&self.pack, &self.version) {
            (Some(pack), Some(version)) => format!("{} {pack}@{version}", self.op),
            _ => self.op.clone(),
        }
    }
}

/// The plan a confirm applied, recorded with the change it made: which pack at which
/// version, whether its replay was proven or truncated, and — when a person accepted it —
/// who proposed it and who approved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeProvenance {
    #[serde(default)]
    pub plan: String,
    #[serde(default)]
    pub pack: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub proven: bool,
    #[serde(default)]
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_by: Option<ProposedBy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// Every person whose approval counted (issue 47), in the order given; `approved_by` is
    /// the last of them, whose approval met the rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// The digest of the plan the approvals were bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_digest: Option<String>,
    /// A promotion's trial (issue 45): the candidate saved is the one that trial ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<String>,
    /// A revert (issue 46): `guard`, with the guard that breached and why; `plan` names the
    /// plan whose change was reverted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breach: Option<String>,
}

/// The endpoint that proposed a plan and the human it acts for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposedBy {
    #[serde(default)]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub human: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shapes history rows hold read into these types and write back the same JSON.
    #[test]
    fn changes_and_provenance_read_and_write_the_stored_json() {
        for stored in [
            json!({"op": "create_webhook"}),
            json!({"op": "set_webhook_rules", "minted_rule_ids": ["r-1"]}),
            json!({"op": "update_webhook_rule", "rule_id": "r-1", "fields": []}),
            json!({"op": "update_webhook_rule", "rule_id": "r-1", "fields": ["id", "when"], "new_rule_id": "r-9"}),
            json!({"op": "delete_webhook_rule", "rule_id": "r-1"}),
            json!({"op": "install_rule_pack", "pack": "drop-ci-noise", "version": "2.0.0", "kind": "install"}),
        ] {
            let c: ConfigurationChange = serde_json::from_value(stored.clone()).expect("reads");
            assert_eq!(serde_json::to_value(&c).expect("writes"), stored);
        }
        for stored in [
            json!({"plan": "pl_1", "pack": "p", "version": "1.0.0", "proven": true, "truncated": false}),
            json!({"plan": "pl_1", "pack": "p", "version": "1.0.0", "proven": false, "truncated": true,
                   "proposed_by": {"endpoint": "ep_1", "human": "alice"}, "approved_by": "bob"}),
            json!({"plan": "pl_1", "pack": "p", "version": "1.0.0", "proven": true, "truncated": false,
                   "proposed_by": {"endpoint": null, "human": "alice"}, "approved_by": "bob"}),
        ] {
            let p: ChangeProvenance = serde_json::from_value(stored.clone()).expect("reads");
            assert_eq!(serde_json::to_value(&p).expect("writes"), stored);
        }
        assert_eq!(
            serde_json::from_value::<ConfigurationChange>(
                json!({"op": "install_rule_pack", "pack": "p", "version": "1.0.0"})
            )
            .expect("reads")
            .summary(),
            "install_rule_pack p@1.0.0"
        );
        // An update that renamed its rule to nothing (a null id) reads as no new id.
        let c: ConfigurationChange = serde_json::from_value(
            json!({"op": "update_webhook_rule", "rule_id": "r-1", "fields": ["id"], "new_rule_id": null}),
        )
        .expect("reads");
        assert_eq!(c.new_rule_id, None);
    }
}
