//! Validation at save time (SPEC-0020): every problem of a configuration, reported together,
//! each naming its rule. Split in two so the half that needs no parser can run anywhere.

use std::collections::HashSet;

use switchboard_proto::router::v1::{
    Configuration as Message, Problem, RoutingContext, ValidateResponse,
};

use super::compile::{compile_expression, to_problems};
use super::config::{Action, Configuration, MAX_PARAMS_BYTES, MAX_RULES, is_valid_rule_id};
use super::prescan::prescan_expression;

fn problem(
    index: Option<usize>,
    rule_id: &str,
    code: &str,
    field: String,
    message: String,
) -> Problem {
    Problem {
        rule_id: rule_id.to_string(),
        rule_index: index.map(|i| i as i32).unwrap_or(-1),
        code: code.to_string(),
        message,
        field,
    }
}

fn check_action(
    ctx: &RoutingContext,
    action: &Action,
    index: Option<usize>,
    rule_id: &str,
    field: String,
    out: &mut Vec<Problem>,
) {
    match action {
        Action::Queue(q) if q.is_empty() => {
            out.push(problem(index, rule_id, "invalid_action", field, "the queue name is empty".into()))
        }
        Action::Queue(q) if !ctx.grant.iter().any(|g| g == q) => out.push(problem(
            index,
            rule_id,
            "not_granted",
            field,
            format!("queue {q} is not in the webhook's grant ({})", ctx.grant.join(", ")),
        )),
        Action::Quarantine if !ctx.trusted_actors_capability => out.push(problem(
            index,
            rule_id,
            "capability_missing",
            field,
            "the quarantine action needs the trusted_actors capability, which this instance does not have".into(),
        )),
        _ => {}
    }
}

/// Everything that can be checked without parsing an expression: limits, ids, actions,
/// the grant, params size, and the pre-scan of every expression. Total on any input.
pub fn check_structure(config: &Configuration, ctx: &RoutingContext) -> Vec<Problem> {
    let mut out = Vec::new();
    if config.rules.len() > MAX_RULES {
        out.push(problem(
            None,
            "",
            "too_many_rules",
            "rules".into(),
            format!(
                "{} rules; a configuration holds at most {MAX_RULES}",
                config.rules.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    for (i, rule) in config.rules.iter().enumerate() {
        let id = rule.id.as_deref().unwrap_or("");
        match &rule.id {
            None => out.push(problem(
                Some(i),
                "",
                "invalid_rule_id",
                format!("rules[{i}].id"),
                "the rule has no id".into(),
            )),
            Some(id) if !is_valid_rule_id(id) => out.push(problem(
                Some(i),
                id,
                "invalid_rule_id",
                format!("rules[{i}].id"),
                "rule ids match ^[a-z0-9]+(-{1,2}[a-z0-9]+)*$ and have at most 64 characters"
                    .into(),
            )),
            Some(id) if !seen.insert(id.clone()) => out.push(problem(
                Some(i),
                id,
                "duplicate_rule_id",
                format!("rules[{i}].id"),
                format!("the id {id} is used by an earlier rule"),
            )),
            Some(_) => {}
        }
        if let Some((code, message)) = prescan_expression(&rule.when) {
            out.push(problem(
                Some(i),
                id,
                code,
                format!("rules[{i}].when"),
                message,
            ));
        }
        check_action(
            ctx,
            &rule.action,
            Some(i),
            id,
            format!("rules[{i}].action"),
            &mut out,
        );
    }
    if let Some(action) = &config.default_action {
        check_action(ctx, action, None, "", "default_action".into(), &mut out);
    }
    let params_len = serde_json::to_string(&config.params)
        .map(|s| s.len())
        .unwrap_or(usize::MAX);
    if params_len > MAX_PARAMS_BYTES {
        out.push(problem(
            None,
            "",
            "params_too_large",
            "params".into(),
            format!("params are {params_len} bytes; at most {MAX_PARAMS_BYTES} are allowed"),
        ));
    }
    out
}

/// Parses a configuration's JSON; a malformed one is a single configuration-wide problem.
pub fn parse_configuration(json: &str) -> Result<Configuration, Problem> {
    Configuration::from_json(json).map_err(invalid_configuration)
}

/// Reads a configuration message (typed, or the previous release's JSON text); one that
/// does not read is a single configuration-wide problem, as for [`parse_configuration`].
pub fn read_configuration(message: &Message) -> Result<Configuration, Problem> {
    message.read().map_err(invalid_configuration)
}

fn invalid_configuration(message: String) -> Problem {
    problem(None, "", "invalid_configuration", String::new(), message)
}

/// [`validate_configuration`] of a configuration's JSON text.
pub fn validate(json: &str, ctx: &RoutingContext) -> ValidateResponse {
    validated(parse_configuration(json), ctx)
}

/// The whole validation: structure, then every expression that passed its pre-scan is
/// parsed, checked against the dialect and compiled. Parses tenant text: sandbox only.
pub fn validate_configuration(message: &Message, ctx: &RoutingContext) -> ValidateResponse {
    validated(read_configuration(message), ctx)
}

fn validated(read: Result<Configuration, Problem>, ctx: &RoutingContext) -> ValidateResponse {
    let config = match read {
        Ok(c) => c,
        Err(p) => {
            return ValidateResponse {
                valid: false,
                problems: vec![p],
                digest: String::new(),
            };
        }
    };
    let mut problems = check_structure(&config, ctx);
    for (i, rule) in config.rules.iter().enumerate() {
        if prescan_expression(&rule.when).is_some() {
            continue;
        }
        if let Err(ps) = compile_expression(&rule.when) {
            problems.extend(to_problems(i, rule.id.as_deref().unwrap_or(""), ps));
        }
    }
    ValidateResponse {
        valid: problems.is_empty(),
        problems,
        digest: config.digest(),
    }
}
