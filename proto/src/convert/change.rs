//! A history record's change and provenance as control's messages.

use switchboard_model::{ChangeProvenance, ConfigurationChange};

use crate::control::v1 as pb;

impl From<&ConfigurationChange> for pb::ConfigurationChange {
    fn from(c: &ConfigurationChange) -> Self {
        pb::ConfigurationChange {
            op: c.op.clone(),
            rule_id: c.rule_id.clone(),
            fields: c.fields.clone().unwrap_or_default(),
            minted_rule_ids: c.minted_rule_ids.clone(),
            pack: c.pack.clone(),
            version: c.version.clone(),
            kind: c.kind.clone(),
            new_rule_id: c.new_rule_id.clone(),
        }
    }
}

/// `proposed_by_*` and `approved_by` are empty unless a person accepted the plan.
impl From<&ChangeProvenance> for pb::ChangeProvenance {
    fn from(p: &ChangeProvenance) -> Self {
        let proposed = p.proposed_by.clone().unwrap_or_default();
        pb::ChangeProvenance {
            plan: p.plan.clone(),
            pack: p.pack.clone(),
            version: p.version.clone(),
            proven: p.proven,
            truncated: p.truncated,
            proposed_by_endpoint: proposed.endpoint.unwrap_or_default(),
            proposed_by_human: proposed.human.unwrap_or_default(),
            approved_by: p.approved_by.clone().unwrap_or_default(),
            trial: p.trial.clone().unwrap_or_default(),
            reverted_by: p.reverted_by.clone().unwrap_or_default(),
            guard: p.guard.clone().unwrap_or_default(),
            breach: p.breach.clone().unwrap_or_default(),
        }
    }
}
