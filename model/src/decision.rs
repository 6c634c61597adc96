//! What an event records of its routing — the decision and, when it faulted, the fault — as
//! stored with the event (and with each redrive's before and after), typed. The JSON is the
//! same the event rows have always held (keys in this order, absent ones left out), so rows
//! written by any earlier landing read back into these types.

use serde::{Deserialize, Serialize};

use crate::label::Label;

/// A recorded decision: `{by_default_action?, decision, fault_code?, queue?, reason?,
/// rule_id?}`, where `decision` is the label and `queue` the queue a todo went to (the
/// rule's, or the default queue for `default` and for a fault that failed open).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RecordedDecision {
    /// No rule matched and the webhook's default action decided.
    #[serde(default, skip_serializing_if = "is_false")]
    pub by_default_action: bool,
    pub decision: Label<'static>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !b
}

impl RecordedDecision {
    /// A decision with only its label set.
    pub fn new(decision: Label<'static>) -> Self {
        Self {
            by_default_action: false,
            decision,
            fault_code: None,
            queue: None,
            reason: None,
            rule_id: None,
        }
    }

    /// A decision to queue `name` (its todo goes there).
    pub fn to_queue(name: &str) -> Self {
        Self {
            queue: Some(name.to_string()),
            ..Self::new(Label::Queue(name.to_string().into()))
        }
    }

    /// The same decision, naming the rule that made it.
    pub fn by_rule(mut self, rule_id: &str) -> Self {
        self.rule_id = Some(rule_id.to_string());
        self
    }
}

/// A recorded fault, beside the `fault` decision it explains: `{code, disposition?, reason,
/// rule_id}` (`rule_id` null when no rule is to blame).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RecordedFault {
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disposition: Option<Disposition>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub rule_id: Option<String>,
}

/// Where a faulted delivery went: held in quarantine (fail closed, with the trusted-actors
/// capability) or into the webhook's default queue, marked faulted (fail open).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    Quarantine,
    Default,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shapes event rows hold, read and written back byte for byte.
    #[test]
    fn recorded_decisions_and_faults_read_and_write_the_stored_json() {
        for stored in [
            r#"{"decision":"queue:forge","queue":"forge","rule_id":"r-1"}"#,
            r#"{"by_default_action":true,"decision":"drop"}"#,
            r#"{"decision":"fault","fault_code":"rule_fault","queue":"inbox","reason":"not a boolean","rule_id":"r-2"}"#,
            r#"{"decision":"default","queue":"inbox"}"#,
            r#"{"decision":"quarantine","rule_id":"r-3"}"#,
        ] {
            let d: RecordedDecision = serde_json::from_str(stored).expect(stored);
            assert_eq!(serde_json::to_string(&d).expect("writes"), stored);
        }
        for stored in [
            r#"{"code":"budget_exceeded","disposition":"quarantine","reason":"spent","rule_id":"r-1"}"#,
            r#"{"code":"invalid_decision","disposition":"default","reason":"none","rule_id":null}"#,
        ] {
            let f: RecordedFault = serde_json::from_str(stored).expect(stored);
            assert_eq!(serde_json::to_string(&f).expect("writes"), stored);
        }
        assert_eq!(
            serde_json::to_value(RecordedDecision::to_queue("forge").by_rule("r-1"))
                .expect("writes"),
            json!({"decision": "queue:forge", "queue": "forge", "rule_id": "r-1"})
        );
    }

    /// A stored decision whose label is no label is an error, never a guess.
    #[test]
    fn a_stored_decision_that_names_no_label_does_not_read() {
        assert!(serde_json::from_str::<RecordedDecision>(r#"{"decision":"queue:"}"#).is_err());
        assert!(serde_json::from_str::<RecordedDecision>(r#"{"queue":"x"}"#).is_err());
    }
}
