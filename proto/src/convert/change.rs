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

/// A change-log entry as its message: the typed fields read from the canonical text, which is
/// carried whole (the bytes its hash is over). A text this build cannot read still travels,
/// with its typed fields empty.
impl From<&switchboard_model::change_log::Sealed> for pb::ChangeLogEntry {
    fn from(s: &switchboard_model::change_log::Sealed) -> Self {
        let entry: Option<switchboard_model::change_log::ChangeEntry> =
            serde_json::from_str(&s.text).ok();
        let mut out = pb::ChangeLogEntry {
            seq: s.seq,
            canonical: s.text.clone(),
            hash: s.hash.clone(),
            ..Default::default()
        };
        if let Some(e) = entry {
            out.kind = serde_json::to_value(e.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            // `at_ms` is filled beside `at` for one release.
            #[allow(deprecated)]
            {
                out.at_ms = e.at_ms;
            }
            out.at = Some(super::time::from_millis(e.at_ms));
            out.owner_scope = e.owner_scope.unwrap_or_default();
            out.webhook_id = e.webhook_id.unwrap_or_default();
            out.version = e.version;
            out.actor_endpoint = e.actor.endpoint.unwrap_or_default();
            out.actor_human = e.actor.human.unwrap_or_default();
            out.actor_operator = e.actor.operator.unwrap_or_default();
            out.approvers = e.approvers;
            out.digest_before = e.digest_before.unwrap_or_default();
            out.digest_after = e.digest_after.unwrap_or_default();
            out.evidence = e.evidence.into_iter().collect();
            out.detail = e.detail.into_iter().collect();
            out.prev_hash = e.prev_hash;
        }
        out
    }
}
