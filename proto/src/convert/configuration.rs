//! A saved configuration as control's message and as the router's: rules with their
//! actions as decision labels (`queue:<name>`, `drop`, `quarantine`), the default action
//! likewise; params as a Struct for control's callers and as exact JSON text for routers.

use switchboard_model::{Action, Configuration, Label, Rule};

use crate::control::v1 as pb;
use crate::router::v1 as router;

/// A rule as either package's `Rule` message: the same four fields, the action as its label.
macro_rules! rule_message {
    ($message:path, $rule:expr) => {{
        let r: &Rule = $rule;
        $message {
            id: r.id.clone().unwrap_or_default(),
            description: r.description.clone(),
            when: r.when.clone(),
            action: r.action.label().to_string(),
        }
    }};
}

impl From<&Configuration> for pb::Configuration {
    fn from(c: &Configuration) -> Self {
        pb::Configuration {
            rules: c.rules.iter().map(|r| rule_message!(pb::Rule, r)).collect(),
            default_action: c.default_action.as_ref().map(|a| a.label().to_string()),
            params: Some(crate::convert::json::to_struct(&c.params)),
        }
    }
}

/// The configuration a router evaluates, typed (the `json` field, the previous release's
/// form, left empty).
impl From<&Configuration> for router::Configuration {
    fn from(c: &Configuration) -> Self {
        let mut params_json = String::new();
        if !c.params.is_empty() {
            switchboard_model::write_canonical(
                &serde_json::Value::Object(c.params.clone()),
                &mut params_json,
            );
        }
        router::Configuration {
            json: String::new(),
            rules: c
                .rules
                .iter()
                .map(|r| rule_message!(router::Rule, r))
                .collect(),
            default_action: c.default_action.as_ref().map(|a| a.label().to_string()),
            params_json,
        }
    }
}

impl router::Configuration {
    /// The previous release's form, the whole configuration as JSON text: what a control of
    /// that release sends, and how a test gives a router text that is no configuration.
    pub fn text(json: impl Into<String>) -> Self {
        router::Configuration {
            json: json.into(),
            ..Default::default()
        }
    }

    /// The configuration this message carries: its JSON text when set (a control of the
    /// previous release), else its typed fields. The error is the problem a tenant reads
    /// (`invalid_configuration`'s message), naming the field.
    pub fn read(&self) -> Result<Configuration, String> {
        if !self.json.is_empty() {
            return Configuration::from_json(&self.json);
        }
        let action = |at: String, label: &str| {
            Label::parse(label)
                .ok()
                .as_ref()
                .and_then(Action::from_label)
                .ok_or_else(|| {
                    format!(
                        "not a configuration: {at} {label:?} is no action (queue:<name>, drop or quarantine)"
                    )
                })
        };
        let rules = self
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                Ok(Rule {
                    id: (!r.id.is_empty()).then(|| r.id.clone()),
                    description: r.description.clone(),
                    when: r.when.clone(),
                    action: action(format!("rules[{i}].action"), &r.action)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let default_action = self
            .default_action
            .as_deref()
            .map(|a| action("default_action".into(), a))
            .transpose()?;
        let params = if self.params_json.is_empty() {
            serde_json::Map::new()
        } else {
            serde_json::from_str(&self.params_json)
                .map_err(|e| format!("not a configuration: params must be an object: {e}"))?
        };
        Ok(Configuration {
            rules,
            default_action,
            params,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same message the JSON conversion gives for the configuration's stored JSON.
    #[test]
    fn a_configuration_converts_as_its_stored_json_does() {
        for text in [
            r#"{"rules":[],"params":{}}"#,
            r#"{"rules":[{"id":"a","description":"d","when":"true","action":{"queue":"forge"}},{"id":"b","when":"false","action":{"drop":true}}],"default_action":{"quarantine":true},"params":{"n":1,"s":["x"]}}"#,
        ] {
            let typed = Configuration::from_json(text).expect("a configuration");
            let value: serde_json::Value = serde_json::from_str(text).expect("json");
            assert_eq!(
                pb::Configuration::from(&typed),
                crate::convert::json::configuration(&value),
                "{text}"
            );
        }
    }

    /// A router reads the typed form and the previous release's text as the same
    /// configuration, params exact (`1.0` stays `1.0`, big integers whole).
    #[test]
    fn the_typed_form_and_the_text_read_as_the_same_configuration() {
        for text in [
            r#"{"rules":[]}"#,
            r#"{"rules":[{"id":"a","description":"d","when":".event == \"x\"","action":{"queue":"forge"}},{"when":"false","action":{"drop":true}}],"default_action":{"quarantine":true},"params":{"big":12345678901234567890,"f":1.0,"n":1,"s":["x",{"y":null}]}}"#,
        ] {
            let saved = Configuration::from_json(text).expect("a configuration");
            let typed = router::Configuration::from(&saved);
            assert!(typed.json.is_empty());
            assert_eq!(typed.read(), Ok(saved.clone()), "{text}");
            assert_eq!(router::Configuration::text(text).read(), Ok(saved.clone()));
            assert_eq!(typed.read().map(|c| c.digest()), Ok(saved.digest()));
        }
    }

    /// A typed configuration whose action is no action, or whose params are no object, is
    /// refused naming the field, as a text one is.
    #[test]
    fn a_typed_configuration_that_names_no_action_is_refused() {
        let bad = router::Configuration {
            rules: vec![router::Rule {
                when: "true".into(),
                action: "default".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(bad.read().unwrap_err().contains("rules[0].action"));
        let bad = router::Configuration {
            default_action: Some("queue:".into()),
            ..Default::default()
        };
        assert!(bad.read().unwrap_err().contains("default_action"));
        let bad = router::Configuration {
            params_json: "[1]".into(),
            ..Default::default()
        };
        assert!(bad.read().unwrap_err().contains("params"));
        assert!(router::Configuration::text("{").read().is_err());
    }
}
