//! A webhook's trusted actors: the logins its rules may trust (`.actor.trusted`), per kind of
//! actor. One typed value for the store, the API, the router's context and pack installs.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `{humans, agents, bots}`: logins listed per kind of actor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedActors {
    #[serde(default)]
    pub humans: Vec<String>,
    #[serde(default)]
    pub agents: Vec<String>,
    #[serde(default)]
    pub bots: Vec<String>,
}

impl TrustedActors {
    /// Read leniently, as stored rows and plans hold it: a list that is missing or not a
    /// list is empty, and entries that are not strings are skipped (never an error: a
    /// webhook whose stored value is odd still routes, trusting fewer actors, not more).
    pub fn from_value(value: &Value) -> TrustedActors {
        let list = |key: &str| string_list(value.get(key));
        TrustedActors {
            humans: list("humans"),
            agents: list("agents"),
            bots: list("bots"),
        }
    }

    /// The lists a pack's params name (`sets_trusted_actors`), each read as [`from_value`]
    /// reads a list.
    ///
    /// [`from_value`]: TrustedActors::from_value
    pub fn from_params(
        params: &Map<String, Value>,
        humans: Option<&str>,
        agents: Option<&str>,
        bots: Option<&str>,
    ) -> TrustedActors {
        let list = |name: Option<&str>| string_list(name.and_then(|n| params.get(n)));
        TrustedActors {
            humans: list(humans),
            agents: list(agents),
            bots: list(bots),
        }
    }

    /// As stored and as a plan carries it: `{"agents": […], "bots": […], "humans": […]}`.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn odd_stored_values_trust_fewer_actors_never_fail() {
        let t = TrustedActors::from_value(&json!({
            "humans": ["octocat", 7, null],
            "bots": "dependabot[bot]",
        }));
        assert_eq!(t.humans, ["octocat"]);
        assert!(t.agents.is_empty() && t.bots.is_empty());
        assert_eq!(
            TrustedActors::from_value(&json!(null)),
            TrustedActors::default()
        );
    }

    #[test]
    fn the_stored_shape_reads_back() {
        let t = TrustedActors {
            humans: vec!["alice".into()],
            agents: vec![],
            bots: vec!["ci[bot]".into()],
        };
        assert_eq!(
            t.to_value(),
            json!({"humans": ["alice"], "agents": [], "bots": ["ci[bot]"]})
        );
        assert_eq!(TrustedActors::from_value(&t.to_value()), t);
    }

    #[test]
    fn pack_params_name_the_lists() {
        let params = json!({"maintainers": ["alice"], "agents": ["a1"], "n": 3});
        let params = params.as_object().cloned().unwrap_or_default();
        let t = TrustedActors::from_params(&params, Some("maintainers"), None, Some("n"));
        assert_eq!(t.humans, ["alice"]);
        assert!(t.agents.is_empty() && t.bots.is_empty());
    }
}
