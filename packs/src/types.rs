//! Param types: the five basic ones and the registered shared types. A shared param name
//! means the same thing (and has the same type) in every pack that declares it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A param's declared type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamType {
    String,
    Bool,
    Int,
    StringList,
    Object,
    /// `[{author, reviewer}]`: author and reviewer logins (no-self-review's `pairs`).
    LoginPairs,
    /// `{login: family}`: which model family a login belongs to (no-self-review's `families`).
    LoginFamilies,
    /// `{name: queue}`: a map from a name (a lane, a repo prefix) to a string.
    StringMap,
}

impl ParamType {
    pub fn name(&self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Bool => "bool",
            ParamType::Int => "int",
            ParamType::StringList => "string_list",
            ParamType::Object => "object",
            ParamType::LoginPairs => "login_pairs",
            ParamType::LoginFamilies => "login_families",
            ParamType::StringMap => "string_map",
        }
    }

    /// Does `value` have this type? `Err` says what is wrong, for `invalid_params`.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        let ok = match self {
            ParamType::String => value.is_string(),
            ParamType::Bool => value.is_boolean(),
            ParamType::Int => value.is_i64() || value.is_u64(),
            ParamType::StringList => value
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string)),
            ParamType::Object => value.is_object(),
            ParamType::LoginPairs => value.as_array().is_some_and(|a| {
                a.iter().all(|p| {
                    p.as_object().is_some_and(|o| {
                        o.len() == 2
                            && o.get("author").is_some_and(Value::is_string)
                            && o.get("reviewer").is_some_and(Value::is_string)
                    })
                })
            }),
            ParamType::LoginFamilies | ParamType::StringMap => value
                .as_object()
                .is_some_and(|o| o.values().all(Value::is_string)),
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "expected {}, got {}",
                self.describe(),
                json_type(value)
            ))
        }
    }

    /// What a value of this type looks like, for error messages.
    pub fn describe(&self) -> &'static str {
        match self {
            ParamType::String => "a string",
            ParamType::Bool => "a boolean",
            ParamType::Int => "an integer",
            ParamType::StringList => "a list of strings",
            ParamType::Object => "an object",
            ParamType::LoginPairs => "a list of {\"author\": login, \"reviewer\": login}",
            ParamType::LoginFamilies => "an object mapping logins to family names",
            ParamType::StringMap => "an object mapping names to strings",
        }
    }
}

/// The JSON type of a value, for messages (never the value itself).
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_accept_their_values_and_refuse_others() {
        let cases = [
            (ParamType::String, json!("a"), json!(1)),
            (ParamType::Bool, json!(true), json!("true")),
            (ParamType::Int, json!(3), json!(3.5)),
            (ParamType::StringList, json!(["a", "b"]), json!("alice")),
            (ParamType::Object, json!({}), json!([])),
            (
                ParamType::LoginPairs,
                json!([{"author": "a", "reviewer": "b"}]),
                json!([{"author": "a"}]),
            ),
            (
                ParamType::LoginFamilies,
                json!({"a": "claude"}),
                json!({"a": 1}),
            ),
            (
                ParamType::StringMap,
                json!({"lane": "queue"}),
                json!(["lane"]),
            ),
        ];
        for (t, good, bad) in cases {
            assert!(t.check(&good).is_ok(), "{t:?} {good}");
            let err = t.check(&bad).unwrap_err();
            assert!(err.contains(t.describe()), "{err}");
        }
    }
}
