#![forbid(unsafe_code)]
//! The product's vocabulary: the configuration (rules, `default_action`, `params`, and the
//! limits every save obeys), decision labels, and what a rule-pack change reports — plans,
//! listings, provenance and diffs. Every surface (the MCP gateway, the console, the CLI)
//! reads these types and nothing of the core's insides.
//!
//! Pure data with no jaq in it, so control can hold, merge and digest configurations
//! without linking anything that parses tenant expressions.

pub mod body;
pub mod change;
pub mod change_log;
pub mod decision;
pub mod diff;
pub mod fault;
pub mod form;
pub mod guard;
pub mod kind;
pub mod label;
pub mod listing;
pub mod manifest;
pub mod plan;
pub mod provenance;
pub mod role;
pub mod trial;
pub mod trusted;
pub mod verb;
pub mod webhook_name;

pub use change::{ChangeProvenance, ConfigurationChange, ProposedBy};
pub use decision::{Disposition, RecordedDecision, RecordedFault};
pub use form::payload_json;
pub use kind::SourceType;
pub use label::{Label, UnknownLabel};
/// Approvals live beside the plan they count (`plan::approval`); named here as well.
pub use plan::approval;
pub use role::Role;
pub use trusted::TrustedActors;
pub use verb::{Family, Verb};
pub use webhook_name::WebhookName;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// At most this many rules in one configuration (SPEC-0020).
pub const MAX_RULES: usize = 32;
/// An expression is at most this many bytes.
pub const MAX_EXPRESSION_BYTES: usize = 4096;
/// Serialized params are at most this many bytes.
pub const MAX_PARAMS_BYTES: usize = 64 * 1024;
/// Rule ids are at most this many characters.
pub const MAX_RULE_ID_CHARS: usize = 64;

/// A webhook configuration: ordered rules, an optional default, and params seen as `$params`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Configuration {
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<Action>,
    #[serde(default)]
    pub params: Map<String, Value>,
}

/// One routing rule: when `when`'s first output is `true`, `action` decides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub when: String,
    pub action: Action,
}

/// Where a matched delivery goes: `{"queue": "<name>"}`, `{"drop": true}` or `{"quarantine": true}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Queue(String),
    Drop,
    Quarantine,
}

impl Action {
    /// The decision label used in plans and totals: `queue:<name>`, `drop`, `quarantine`.
    pub fn label(&self) -> Label<'_> {
        match self {
            Action::Queue(q) => Label::queue(q),
            Action::Drop => Label::Drop,
            Action::Quarantine => Label::Quarantine,
        }
    }

    /// The action a label names: `queue:<name>`, `drop`, `quarantine`; `default` and
    /// `fault` are decisions no rule can take.
    pub fn from_label(label: &Label<'_>) -> Option<Action> {
        match label {
            Label::Queue(q) => Some(Action::Queue(q.to_string())),
            Label::Drop => Some(Action::Drop),
            Label::Quarantine => Some(Action::Quarantine),
            Label::Default | Label::Fault => None,
        }
    }
}

impl Serialize for Action {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = Map::new();
        match self {
            Action::Queue(q) => m.insert("queue".into(), Value::String(q.clone())),
            Action::Drop => m.insert("drop".into(), Value::Bool(true)),
            Action::Quarantine => m.insert("quarantine".into(), Value::Bool(true)),
        };
        m.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let m = Map::<String, Value>::deserialize(d)?;
        if m.len() != 1 {
            return Err(D::Error::custom(
                "an action is exactly one of {\"queue\": \"<name>\"}, {\"drop\": true}, {\"quarantine\": true}",
            ));
        }
        match m.iter().next() {
            Some((k, Value::String(q))) if k == "queue" => Ok(Action::Queue(q.clone())),
            Some((k, Value::Bool(true))) if k == "drop" => Ok(Action::Drop),
            Some((k, Value::Bool(true))) if k == "quarantine" => Ok(Action::Quarantine),
            _ => Err(D::Error::custom(
                "an action is exactly one of {\"queue\": \"<name>\"}, {\"drop\": true}, {\"quarantine\": true}",
            )),
        }
    }
}

impl Configuration {
    /// Parses a configuration from JSON; serde_json's recursion limit keeps hostile nesting an error.
    pub fn from_json(text: &str) -> Result<Self, String> {
        // Derived deserializers also take arrays for structs; a configuration and its rules
        // are objects, nothing else.
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("not a configuration: {e}"))?;
        let rules_are_objects = match value.get("rules") {
            None => true,
            Some(Value::Array(rules)) => rules.iter().all(Value::is_object),
            Some(_) => false,
        };
        if !value.is_object() || !rules_are_objects {
            return Err("not a configuration: expected an object {rules, default_action?, params?} whose rules are objects".into());
        }
        serde_json::from_value(value).map_err(|e| format!("not a configuration: {e}"))
    }

    /// Canonical JSON: object keys sorted at every level, whatever serde_json's map order is.
    pub fn canonical_json(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(Value::Null);
        let mut out = String::new();
        write_canonical(&value, &mut out);
        out
    }

    /// sha256 of the canonical JSON, lower-case hex. Equal configurations have equal digests.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_json().as_bytes()))
    }

    /// Gives every id-less rule an id `r-<n>` (n = its 1-based position, bumped past ids in
    /// use), so the same input always mints the same ids. Returns the minted ids.
    pub fn mint_rule_ids(&mut self) -> Vec<String> {
        let mut taken: std::collections::HashSet<String> =
            self.rules.iter().filter_map(|r| r.id.clone()).collect();
        let mut minted = Vec::new();
        for (i, rule) in self.rules.iter_mut().enumerate() {
            if rule.id.is_some() {
                continue;
            }
            let mut n = i + 1;
            let id = loop {
                let candidate = format!("r-{n}");
                if !taken.contains(&candidate) {
                    break candidate;
                }
                n += 1;
            };
            taken.insert(id.clone());
            minted.push(id.clone());
            rule.id = Some(id);
        }
        minted
    }
}

/// Writes `value` as compact JSON with object keys sorted, so digests never depend on map order.
pub fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Is `id` a well-formed rule id: `^[a-z0-9]+(-{1,2}[a-z0-9]+)*$`, at most 64 characters.
pub fn is_valid_rule_id(id: &str) -> bool {
    if id.is_empty() || id.len() > MAX_RULE_ID_CHARS {
        return false;
    }
    let bytes = id.as_bytes();
    if bytes[0] == b'-' || bytes[bytes.len() - 1] == b'-' {
        return false;
    }
    let mut dashes = 0;
    for &b in bytes {
        match b {
            b'a'..=b'z' | b'0'..=b'9' => dashes = 0,
            b'-' => {
                dashes += 1;
                if dashes > 2 {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// Pack rule ids carry `--` (`<pack>--<local-id>`); hand-written ids may not.
pub fn is_pack_rule_id(id: &str) -> bool {
    id.contains("--")
}

/// Milliseconds since the epoch as RFC 3339 UTC (`2026-11-29T23:59:10.123Z`).
pub fn rfc3339_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_follow_spec_0020() {
        for ok in ["a", "r-1", "no-self-review--drop-bots", "x9", "a-b-c"] {
            assert!(is_valid_rule_id(ok), "{ok}");
        }
        let long = "a".repeat(65);
        for bad in ["", "-a", "a-", "A", "a_b", "a---b", "a b", long.as_str()] {
            assert!(!is_valid_rule_id(bad), "{bad}");
        }
    }

    #[test]
    fn actions_round_trip_and_reject_other_shapes() {
        for text in [
            r#"{"queue":"forge"}"#,
            r#"{"drop":true}"#,
            r#"{"quarantine":true}"#,
        ] {
            let a: Action = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&a).unwrap(), text);
        }
        for bad in [
            r#"{"drop":false}"#,
            r#"{"queue":1}"#,
            r#"{}"#,
            r#"{"drop":true,"queue":"a"}"#,
        ] {
            assert!(serde_json::from_str::<Action>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn minted_ids_are_deterministic_and_skip_taken_ids() {
        let text = r#"{"rules":[{"when":"true","action":{"drop":true}},{"id":"r-1","when":"true","action":{"drop":true}},{"when":"false","action":{"drop":true}}]}"#;
        let mut a = Configuration::from_json(text).unwrap();
        let mut b = Configuration::from_json(text).unwrap();
        assert_eq!(a.mint_rule_ids(), vec!["r-2", "r-3"]);
        b.mint_rule_ids();
        assert_eq!(a, b);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn digest_ignores_param_key_order() {
        let a = Configuration::from_json(r#"{"params":{"a":1,"b":{"y":1,"x":2}}}"#).unwrap();
        let b = Configuration::from_json(r#"{"params":{"b":{"x":2,"y":1},"a":1}}"#).unwrap();
        assert_eq!(a.digest(), b.digest());
    }
}
