//! A saved configuration as control's message: rules with their actions as decision labels
//! (`queue:<name>`, `drop`, `quarantine`), the default action likewise, params as a Struct.

use switchboard_model::Configuration;

use crate::control::v1 as pb;

impl From<&Configuration> for pb::Configuration {
    fn from(c: &Configuration) -> Self {
        pb::Configuration {
            rules: c
                .rules
                .iter()
                .map(|r| pb::Rule {
                    id: r.id.clone().unwrap_or_default(),
                    description: r.description.clone(),
                    when: r.when.clone(),
                    action: r.action.label().to_string(),
                })
                .collect(),
            default_action: c.default_action.as_ref().map(|a| a.label().to_string()),
            params: Some(crate::json::to_struct(&c.params)),
        }
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
                crate::json::configuration(&value),
                "{text}"
            );
        }
    }
}
