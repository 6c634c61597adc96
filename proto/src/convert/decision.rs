//! A routing decision and its fault: the router's message, the model's recorded types and
//! control's messages, each from the other in one place.

use switchboard_model::{RecordedDecision, RecordedFault, UnknownLabel};

use crate::control::v1 as pb;
use crate::router::v1 as router;

/// A router's decision as an event records it: its label, and each of queue, rule, fault
/// code and reason only when set.
impl From<&router::Decision> for RecordedDecision {
    fn from(d: &router::Decision) -> Self {
        let set = |s: &String| (!s.is_empty()).then(|| s.clone());
        RecordedDecision {
            by_default_action: d.by_default_action,
            decision: d.label().into_owned(),
            fault_code: set(&d.fault_code),
            queue: set(&d.queue),
            reason: set(&d.reason),
            rule_id: set(&d.rule_id),
        }
    }
}

impl From<&RecordedDecision> for pb::Decision {
    fn from(d: &RecordedDecision) -> Self {
        pb::Decision {
            decision: d.decision.to_string(),
            queue: d.queue.clone(),
            rule_id: d.rule_id.clone(),
            fault_code: d.fault_code.clone(),
            reason: d.reason.clone(),
            by_default_action: d.by_default_action,
        }
    }
}

/// Control's message as the decision it records: the one place its label text is read.
impl TryFrom<&pb::Decision> for RecordedDecision {
    type Error = UnknownLabel;

    fn try_from(d: &pb::Decision) -> Result<Self, UnknownLabel> {
        Ok(RecordedDecision {
            by_default_action: d.by_default_action,
            decision: d.decision.parse()?,
            fault_code: d.fault_code.clone(),
            queue: d.queue.clone(),
            reason: d.reason.clone(),
            rule_id: d.rule_id.clone(),
        })
    }
}

/// A router's decision as control's message: as it would be recorded.
impl From<&router::Decision> for pb::Decision {
    fn from(d: &router::Decision) -> Self {
        pb::Decision::from(&RecordedDecision::from(d))
    }
}

/// A recorded fault as control's message (where the delivery went is the decision's).
impl From<&RecordedFault> for pb::Fault {
    fn from(f: &RecordedFault) -> Self {
        pb::Fault {
            rule_id: f.rule_id.clone().filter(|r| !r.is_empty()),
            code: f.code.clone(),
            reason: f.reason.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use router::Outcome;
    use switchboard_model::Label;

    /// What the JSON conversion it replaces gave, for each shape a router answers.
    #[test]
    fn a_router_decision_records_as_the_spec_names_it_and_reads_back_as_the_message() {
        let d = router::Decision {
            outcome: Outcome::Queue as i32,
            queue: "forge".into(),
            rule_id: "r-1".into(),
            ..Default::default()
        };
        let recorded = RecordedDecision::from(&d);
        assert_eq!(recorded, RecordedDecision::to_queue("forge").by_rule("r-1"));
        assert_eq!(
            pb::Decision::from(&recorded),
            pb::Decision {
                decision: "queue:forge".into(),
                queue: Some("forge".into()),
                rule_id: Some("r-1".into()),
                ..Default::default()
            }
        );
        let d = router::Decision {
            outcome: Outcome::Fault as i32,
            rule_id: "r-2".into(),
            fault_code: "rule_fault".into(),
            reason: "not a boolean".into(),
            ..Default::default()
        };
        let recorded = RecordedDecision::from(&d);
        assert_eq!(recorded.decision, Label::Fault);
        assert_eq!(
            serde_json::to_value(&recorded).expect("writes"),
            serde_json::json!({"decision": "fault", "rule_id": "r-2", "fault_code": "rule_fault", "reason": "not a boolean"})
        );
        let d = router::Decision {
            outcome: Outcome::Drop as i32,
            by_default_action: true,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(RecordedDecision::from(&d)).expect("writes"),
            serde_json::json!({"decision": "drop", "by_default_action": true})
        );
        // A queue decision naming no queue is a fault, as ingest records it.
        let d = router::Decision {
            outcome: Outcome::Queue as i32,
            ..Default::default()
        };
        assert_eq!(RecordedDecision::from(&d).decision, Label::Fault);
    }
}
