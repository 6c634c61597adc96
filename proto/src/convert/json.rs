//! The control API's typed messages and the JSON an agent reads and writes, both ways: one
//! place, so the MCP gateway's JSON and the gRPC messages say the same thing, and a typed
//! request goes through exactly the validation its JSON form does. Beside the model's
//! conversions (the other files of `convert/`), which a JSON form reads through where the
//! model has the noun.

use prost_types::value::Kind;
use serde_json::{Map, Number, Value, json};

use crate::control::v1 as pb;

/// JSON as `google.protobuf.Struct`: for values that are free-form by nature (params, a schema).
pub fn to_struct(m: &Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: m.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

pub fn to_value(v: &Value) -> prost_types::Value {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        Value::Object(m) => Kind::StructValue(to_struct(m)),
    };
    prost_types::Value { kind: Some(kind) }
}

pub fn from_struct(s: prost_types::Struct) -> Map<String, Value> {
    s.fields
        .into_iter()
        .map(|(k, v)| (k, from_value(v)))
        .collect()
}

/// Numbers come back as integers where they are whole (a param's `3` stays `3`).
pub fn from_value(v: prost_types::Value) -> Value {
    match v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::NumberValue(n)) => {
            if n.fract() == 0.0 && n.abs() < 9.0e15 {
                Value::Number(Number::from(n as i64))
            } else {
                Number::from_f64(n).map_or(Value::Null, Value::Number)
            }
        }
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.into_iter().map(from_value).collect()),
        Some(Kind::StructValue(s)) => Value::Object(from_struct(s)),
    }
}

/// An action's JSON (`{"queue": "x"}`, `{"drop": true}`, `{"quarantine": true}`) as its
/// decision label; anything else as its JSON text, so it is never silently lost.
fn action_label(action: &Value) -> String {
    match serde_json::from_value::<switchboard_model::Action>(action.clone()) {
        Ok(a) => a.label().to_string(),
        Err(_) => action.to_string(),
    }
}

/// A decision label as an action's JSON; a label that is no action is kept as given, for
/// the configuration's validation to refuse with its own message.
fn action_json(label: &str) -> Value {
    match switchboard_model::Label::parse(label) {
        Ok(switchboard_model::Label::Drop) => json!({"drop": true}),
        Ok(switchboard_model::Label::Quarantine) => json!({"quarantine": true}),
        Ok(switchboard_model::Label::Queue(q)) => json!({"queue": q}),
        _ => Value::String(label.to_string()),
    }
}

/// Whether a decision label names an action (`queue:<name>`, `drop`, `quarantine`).
pub fn is_action_label(label: &str) -> bool {
    !matches!(action_json(label), Value::String(_))
}

/// The first action label of a configuration message that is no action, as
/// `(where, label)`: a typed request is refused on it, naming it, before anything else.
pub fn bad_action_label(c: &pb::Configuration) -> Option<(String, String)> {
    let bad = |label: &str| !is_action_label(label);
    c.rules
        .iter()
        .enumerate()
        .find(|(_, r)| bad(&r.action))
        .map(|(i, r)| (format!("rules[{i}].action"), r.action.clone()))
        .or_else(|| {
            c.default_action
                .as_deref()
                .filter(|a| bad(a))
                .map(|a| ("default_action".to_string(), a.to_string()))
        })
}

/// A configuration's JSON (as stored and validated) as the typed message.
pub fn configuration(v: &Value) -> pb::Configuration {
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    pb::Configuration {
        rules: v
            .get("rules")
            .and_then(Value::as_array)
            .map(|rules| {
                rules
                    .iter()
                    .map(|r| pb::Rule {
                        id: str_of(r, "id").unwrap_or_default(),
                        description: str_of(r, "description"),
                        when: str_of(r, "when").unwrap_or_default(),
                        action: r.get("action").map(action_label).unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        default_action: v
            .get("default_action")
            .filter(|a| !a.is_null())
            .map(action_label),
        params: v.get("params").and_then(Value::as_object).map(to_struct),
    }
}

/// The typed message as a configuration's JSON, for the same parsing and validation a
/// `configuration_json` gets.
pub fn configuration_json(c: pb::Configuration) -> Value {
    let rules: Vec<Value> = c
        .rules
        .into_iter()
        .map(|r| {
            let mut rule = Map::new();
            if !r.id.is_empty() {
                rule.insert("id".into(), Value::String(r.id));
            }
            if let Some(d) = r.description {
                rule.insert("description".into(), Value::String(d));
            }
            rule.insert("when".into(), Value::String(r.when));
            rule.insert("action".into(), action_json(&r.action));
            Value::Object(rule)
        })
        .collect();
    let mut out = Map::new();
    out.insert("rules".into(), Value::Array(rules));
    if let Some(a) = c.default_action {
        out.insert("default_action".into(), action_json(&a));
    }
    if let Some(p) = c.params {
        out.insert("params".into(), Value::Object(from_struct(p)));
    }
    Value::Object(out)
}

/// An agent's configuration JSON as the typed message, through the one parser a configuration
/// has (`Configuration::from_json`: objects only, no unknown fields, actions as written). The
/// error is the problem an agent reads, `invalid_configuration`'s message.
pub fn parse_configuration(v: &Value) -> Result<pb::Configuration, String> {
    let parsed = switchboard_model::Configuration::from_json(&v.to_string())?;
    Ok(pb::Configuration::from(&parsed))
}

/// The fields of a rule a patch may give.
const RULE_FIELDS: [&str; 4] = ["id", "description", "when", "action"];

/// An agent's rule patch (`{"id"?, "description"?: string | null, "when"?, "action"?}`) as the
/// typed message, checked for shape before anything is read. The error names what is wrong.
pub fn parse_rule_patch(v: &Value) -> Result<pb::RulePatch, String> {
    let Value::Object(fields) = v else {
        return Err("give an object of the fields to change: id, description, when, action".into());
    };
    let mut patch = pb::RulePatch::default();
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("id", Value::String(id)) => patch.id = Some(id.clone()),
            ("when", Value::String(when)) => patch.when = Some(when.clone()),
            ("description", Value::String(d)) => patch.description = Some(d.clone()),
            ("description", Value::Null) => patch.clear_description = true,
            ("action", action) => {
                let action: switchboard_model::Action = serde_json::from_value(action.clone())
                    .map_err(|e| format!("action must be {e}"))?;
                patch.action = Some(action.label().to_string());
            }
            ("id" | "when", _) => return Err(format!("{key} must be a string")),
            ("description", _) => {
                return Err("description must be a string, or null to remove it".into());
            }
            _ => {
                return Err(format!(
                    "{key:?} is not a rule field ({})",
                    RULE_FIELDS.join(", ")
                ));
            }
        }
    }
    Ok(patch)
}

/// A rule patch as the JSON object `update_webhook_rule` reads (`description: null` removes it).
pub fn rule_patch_json(p: pb::RulePatch) -> Value {
    let mut out = Map::new();
    if let Some(id) = p.id {
        out.insert("id".into(), Value::String(id));
    }
    if p.clear_description {
        out.insert("description".into(), Value::Null);
    } else if let Some(d) = p.description {
        out.insert("description".into(), Value::String(d));
    }
    if let Some(w) = p.when {
        out.insert("when".into(), Value::String(w));
    }
    if let Some(a) = p.action {
        out.insert("action".into(), action_json(&a));
    }
    Value::Object(out)
}

/// The typed decision as the JSON agents read (keys absent when not set).
pub fn decision_json(d: &pb::Decision) -> Value {
    let mut out = Map::new();
    out.insert("decision".into(), Value::String(d.decision.clone()));
    for (k, v) in [
        ("queue", &d.queue),
        ("rule_id", &d.rule_id),
        ("fault_code", &d.fault_code),
        ("reason", &d.reason),
    ] {
        if let Some(v) = v {
            out.insert(k.into(), Value::String(v.clone()));
        }
    }
    if d.by_default_action {
        out.insert("by_default_action".into(), Value::Bool(true));
    }
    Value::Object(out)
}

/// The typed change as the JSON history records carry (`fields` on an update, the rest
/// when set).
pub fn change_json(c: &pb::ConfigurationChange) -> Value {
    let mut out = Map::new();
    out.insert("op".into(), Value::String(c.op.clone()));
    for (k, v) in [
        ("rule_id", &c.rule_id),
        ("new_rule_id", &c.new_rule_id),
        ("pack", &c.pack),
        ("version", &c.version),
        ("kind", &c.kind),
    ] {
        if let Some(v) = v {
            out.insert(k.into(), Value::String(v.clone()));
        }
    }
    if c.op == "update_webhook_rule" || !c.fields.is_empty() {
        out.insert("fields".into(), json!(c.fields));
    }
    if !c.minted_rule_ids.is_empty() {
        out.insert("minted_rule_ids".into(), json!(c.minted_rule_ids));
    }
    Value::Object(out)
}

/// The typed provenance of a change as the JSON history records carry.
/// `proposed_by` and `approved_by` appear only when a person accepted the plan.
pub fn change_provenance_json(p: &pb::ChangeProvenance) -> Value {
    let mut out = json!({"plan": p.plan, "pack": p.pack, "version": p.version, "proven": p.proven, "truncated": p.truncated});
    if !p.approved_by.is_empty() {
        out["proposed_by"] =
            json!({"endpoint": p.proposed_by_endpoint, "human": p.proposed_by_human});
        out["approved_by"] = Value::String(p.approved_by.clone());
    }
    // A promotion's trial (issue 45), as the model's ChangeProvenance names it.
    if !p.trial.is_empty() {
        out["trial"] = Value::String(p.trial.clone());
    }
    // A guard's revert (issue 46).
    if !p.reverted_by.is_empty() {
        out["reverted_by"] = Value::String(p.reverted_by.clone());
        out["guard"] = Value::String(p.guard.clone());
        out["breach"] = Value::String(p.breach.clone());
    }
    out
}

/// The typed fault as the JSON events carry (`rule_id` absent when no rule faulted).
pub fn fault_json(f: &pb::Fault) -> Value {
    let mut out = Map::new();
    if let Some(r) = &f.rule_id {
        out.insert("rule_id".into(), Value::String(r.clone()));
    }
    out.insert("code".into(), Value::String(f.code.clone()));
    out.insert("reason".into(), Value::String(f.reason.clone()));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A history record's provenance names the promotion's trial, and only then.
    #[test]
    fn a_promotions_provenance_names_its_trial() {
        let mut p = pb::ChangeProvenance {
            plan: "pl_1".into(),
            pack: "drop-ci-noise".into(),
            ..Default::default()
        };
        assert!(change_provenance_json(&p).get("trial").is_none());
        p.trial = "tr_1".into();
        assert_eq!(change_provenance_json(&p)["trial"], "tr_1");
    }

    #[test]
    fn a_configuration_round_trips_through_the_message() {
        let config = json!({
            "rules": [
                {"id": "a", "description": "d", "when": ".kind == \"x\"", "action": {"queue": "review"}},
                {"id": "b", "when": "true", "action": {"drop": true}},
                {"id": "c", "when": "false", "action": {"quarantine": true}},
            ],
            "default_action": {"drop": true},
            "params": {"bots": ["ci-bot"], "n": 3, "on": true},
        });
        assert_eq!(configuration_json(configuration(&config)), config);
        let bare = json!({"rules": []});
        assert_eq!(configuration_json(configuration(&bare)), bare);
    }

    #[test]
    fn a_label_that_is_no_action_is_kept_for_validation_to_refuse() {
        let c = pb::Configuration {
            rules: vec![pb::Rule {
                when: "true".into(),
                action: "default".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(configuration_json(c)["rules"][0]["action"], "default");
    }

    #[test]
    fn a_decision_round_trips_and_omits_what_is_not_set() {
        for d in [
            json!({"decision": "queue:review", "queue": "review", "rule_id": "r"}),
            json!({"decision": "default", "queue": "forge", "by_default_action": true}),
            json!({"decision": "fault", "rule_id": "r", "fault_code": "budget_exceeded", "reason": "slow"}),
        ] {
            let recorded: switchboard_model::RecordedDecision =
                serde_json::from_value(d.clone()).expect("a stored decision");
            assert_eq!(decision_json(&pb::Decision::from(&recorded)), d);
        }
    }

    #[test]
    fn history_changes_and_faults_round_trip() {
        for c in [
            json!({"op": "set_webhook_rules", "minted_rule_ids": ["r-1"]}),
            json!({"op": "update_webhook_rule", "rule_id": "a", "fields": ["id", "when"], "new_rule_id": "b"}),
            json!({"op": "delete_webhook_rule", "rule_id": "a"}),
            json!({"op": "install_rule_pack", "pack": "p", "version": "1.0.0", "kind": "install"}),
            json!({"op": "create_webhook"}),
        ] {
            let stored: switchboard_model::ConfigurationChange =
                serde_json::from_value(c.clone()).expect("a stored change");
            assert_eq!(change_json(&pb::ConfigurationChange::from(&stored)), c);
        }
        let p = json!({"plan": "pl_1", "pack": "p", "version": "1.0.0", "proven": true, "truncated": false});
        let stored: switchboard_model::ChangeProvenance =
            serde_json::from_value(p.clone()).expect("a stored provenance");
        assert_eq!(
            change_provenance_json(&pb::ChangeProvenance::from(&stored)),
            p
        );
        // The view leaves out where the delivery went: that is the decision's.
        let f = json!({"rule_id": "r", "code": "budget_exceeded", "reason": "slow", "disposition": "default"});
        let stored: switchboard_model::RecordedFault =
            serde_json::from_value(f).expect("a stored fault");
        assert_eq!(
            fault_json(&pb::Fault::from(&stored)),
            json!({"rule_id": "r", "code": "budget_exceeded", "reason": "slow"})
        );
    }

    #[test]
    fn a_patch_clears_or_sets_the_description() {
        let clear = rule_patch_json(pb::RulePatch {
            clear_description: true,
            action: Some("queue:x".into()),
            ..Default::default()
        });
        assert_eq!(
            clear,
            json!({"description": null, "action": {"queue": "x"}})
        );
    }

    #[test]
    fn an_agents_configuration_is_parsed_by_the_one_parser() {
        let config = json!({
            "rules": [{"when": "true", "action": {"queue": "review"}}],
            "default_action": {"drop": true},
        });
        let typed = parse_configuration(&config).expect("a configuration");
        assert_eq!(typed.rules[0].action, "queue:review");
        assert_eq!(typed.default_action.as_deref(), Some("drop"));
        for bad in [
            json!([]),
            json!({"rules": {}}),
            json!({"rules": [], "extra": 1}),
            json!({"rules": [{"when": "true", "action": {"drop": false}}]}),
            json!({"rules": ["r"]}),
        ] {
            let e = parse_configuration(&bad).expect_err("refused");
            assert!(e.starts_with("not a configuration"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_rule_patch_is_checked_for_shape_and_typed() {
        let p = parse_rule_patch(&json!({"id": "x", "description": null, "when": "true", "action": {"quarantine": true}}))
            .expect("a patch");
        assert_eq!(
            (
                p.id.as_deref(),
                p.clear_description,
                p.when.as_deref(),
                p.action.as_deref()
            ),
            (Some("x"), true, Some("true"), Some("quarantine"))
        );
        assert_eq!(rule_patch_json(p)["description"], Value::Null);
        for (bad, said) in [
            (json!([]), "give an object"),
            (json!({"whenn": "true"}), "\"whenn\" is not a rule field"),
            (json!({"when": 1}), "when must be a string"),
            (json!({"description": 2}), "description must be a string"),
            (json!({"action": {"drop": false}}), "action must be"),
            (json!({"action": "drop"}), "action must be"),
        ] {
            let e = parse_rule_patch(&bad).expect_err("refused");
            assert!(e.contains(said), "{bad}: {e}");
        }
    }
}
