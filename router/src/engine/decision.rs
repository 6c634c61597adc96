//! Decisions and per-rule counters, in the router's wire types so every path reports alike.

pub use switchboard_proto::router::v1::{Decision, Outcome, RuleCount, RuleCounters};

use super::config::Action;

/// Fault codes a decision can carry (defined with the model, which control shares).
pub use switchboard_model::fault;

/// A decision made by a rule's (or the default's) action.
pub fn from_action(action: &Action, rule_id: &str, by_default_action: bool) -> Decision {
    let (outcome, queue) = match action {
        Action::Queue(q) => (Outcome::Queue, q.clone()),
        Action::Drop => (Outcome::Drop, String::new()),
        Action::Quarantine => (Outcome::Quarantine, String::new()),
    };
    Decision {
        outcome: outcome as i32,
        queue,
        rule_id: rule_id.to_string(),
        by_default_action,
        ..Default::default()
    }
}

/// No rule matched and no default_action: the webhook's default queue.
pub fn default_queue(queue: &str) -> Decision {
    Decision {
        outcome: Outcome::Default as i32,
        queue: queue.to_string(),
        ..Default::default()
    }
}

/// A fault of `rule_id` (empty when no rule is to blame). `reason` never holds payload text.
pub fn fault(rule_id: &str, code: &str, reason: impl Into<String>) -> Decision {
    Decision {
        outcome: Outcome::Fault as i32,
        rule_id: rule_id.to_string(),
        fault_code: code.to_string(),
        reason: reason.into(),
        ..Default::default()
    }
}

/// Per-rule first matches and faults over `decisions`, one entry per rule id in order.
pub fn count_rules<'a>(
    digest: &str,
    rule_ids: &[String],
    decisions: impl IntoIterator<Item = &'a Decision>,
) -> RuleCounters {
    let mut rules: Vec<RuleCount> = rule_ids
        .iter()
        .map(|id| RuleCount {
            rule_id: id.clone(),
            first_matches: 0,
            faults: 0,
        })
        .collect();
    for d in decisions {
        if d.rule_id.is_empty() || d.by_default_action {
            continue;
        }
        if let Some(c) = rules.iter_mut().find(|c| c.rule_id == d.rule_id) {
            if d.outcome == Outcome::Fault as i32 {
                c.faults += 1;
            } else {
                c.first_matches += 1;
            }
        }
    }
    RuleCounters {
        digest: digest.to_string(),
        rules,
    }
}
