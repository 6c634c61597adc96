//! Validation at save time (SPEC-0020) through `engine::validate::validate`: every problem
//! code, all problems reported together, and realistic pack-style rules passing clean.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use switchboard_proto::router::v1::{
    Decision, Outcome, Problem, RoutingContext, StoredDelivery, TrustedActors, ValidateResponse,
};
use switchboard_router::engine::config::{MAX_EXPRESSION_BYTES, MAX_PARAMS_BYTES, MAX_RULES};
use switchboard_router::engine::dialect::ALLOWED_CALLS;
use switchboard_router::engine::prescan::{MAX_BODY_DEPTH, MAX_EXPRESSION_DEPTH};
use switchboard_router::engine::validate::validate;
use switchboard_router::engine::{CompiledConfiguration, Configuration, build_envelope};

use switchboard_testkit::payloads_dir::webhooks_dir;
const DIALECT_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/routing/dialect.md");

fn ctx() -> RoutingContext {
    RoutingContext {
        grant: vec![
            "forge".into(),
            "ci".into(),
            "triage".into(),
            "security".into(),
        ],
        trusted_actors_capability: true,
        trusted_actors: Some(TrustedActors {
            humans: vec!["Codertocat".into()],
            agents: vec![],
            bots: vec![],
        }),
    }
}

fn without_capability() -> RoutingContext {
    RoutingContext {
        trusted_actors_capability: false,
        trusted_actors: None,
        ..ctx()
    }
}

fn check(config: &Value, ctx: &RoutingContext) -> ValidateResponse {
    validate(&config.to_string(), ctx)
}

fn one_rule(when: &str) -> Value {
    json!({"rules": [{"id": "r", "when": when, "action": {"queue": "forge"}}]})
}

/// (code, rule_index, rule_id, field) of every problem, order ignored.
fn summary(resp: &ValidateResponse) -> BTreeSet<(String, i32, String, String)> {
    resp.problems
        .iter()
        .map(|p| {
            (
                p.code.clone(),
                p.rule_index,
                p.rule_id.clone(),
                p.field.clone(),
            )
        })
        .collect()
}

fn p(code: &str, index: i32, rule_id: &str, field: &str) -> (String, i32, String, String) {
    (code.into(), index, rule_id.into(), field.into())
}

#[track_caller]
fn assert_valid(config: &Value, ctx: &RoutingContext) {
    let resp = check(config, ctx);
    assert!(
        resp.valid && resp.problems.is_empty(),
        "{config}: {:?}",
        resp.problems
    );
    assert!(!resp.digest.is_empty());
}

/// The expression `when` of rule `r` has exactly one problem, of `code`, naming `mentions`.
#[track_caller]
fn assert_expression_problem(when: &str, code: &str, mentions: &str) {
    let resp = check(&one_rule(when), &ctx());
    assert!(!resp.valid, "{when} validated");
    let problems: Vec<&Problem> = resp.problems.iter().collect();
    assert!(
        problems
            .iter()
            .any(|p| p.code == code && p.message.contains(mentions)),
        "{when}: expected {code} naming {mentions:?}, got {problems:?}"
    );
    for p in &problems {
        assert_eq!(
            (p.rule_index, p.rule_id.as_str(), p.field.as_str()),
            (0, "r", "rules[0].when")
        );
    }
}

#[test]
fn parse_error() {
    for when in [
        ".payload.action ==",
        "(.a",
        ".a |",
        "\"unterminated",
        "if . then true",
        ".a as [$x, | $x",
        "}",
        "",
        // jq's destructuring alternative `?//` is not jaq syntax.
        ". as [$a] ?// $a | true",
    ] {
        let resp = check(&one_rule(when), &ctx());
        assert_eq!(
            summary(&resp),
            BTreeSet::from([p("parse_error", 0, "r", "rules[0].when")]),
            "{when}: {:?}",
            resp.problems
        );
        assert!(!resp.problems[0].message.is_empty());
    }
}

#[test]
fn forbidden_builtin() {
    for (when, name) in [
        ("input", "input"),
        ("inputs", "inputs"),
        ("[inputs] | length > 0", "inputs"),
        ("env.HOME == \"/root\"", "env"),
        ("debug", "debug"),
        ("debug(\"x\") | true", "debug"),
        ("stderr", "stderr"),
        ("input_filename == null", "input_filename"),
        ("halt", "halt"),
        ("halt_error", "halt_error"),
        ("halt_error(1)", "halt_error"),
        ("repeat(.) | false", "repeat"),
        ("recurse | false", "recurse"),
        ("recurse(.[]?) | false", "recurse"),
        ("recurse(.[]?; true) | false", "recurse"),
        ("while(false; .) | false", "while"),
        ("until(true; .)", "until"),
        ("range(3) == 1", "range"),
        ("range(1; 3) == 1", "range"),
        ("now > 0", "now"),
        ("\"{}\" | fromjson | . == {}", "fromjson"),
        ("\"1\" | tonumber == 1", "tonumber"),
        // Not in the allowlist.
        (".payload.action | IN(\"opened\", \"closed\")", "IN/1"),
        (".payload.action | splits(\"e\")", "splits/1"),
        (".payload.action | sub(\"o\"; \"\") == \"pened\"", "sub/2"),
        (".payload.action | ascii_downcase | ascii", "ascii/0"),
        ("walk(.) | true", "walk/1"),
        ("del(.payload) | true", "del/1"),
        ("[paths] | length > 0", "paths/0"),
        ("tostream | false", "tostream/0"),
        ("@base64 == \"\"", "@base64/0"),
        ("ltrimstr", "ltrimstr/0"),
        ("split(\"a\"; \"g\") | true", "split/2"),
        ("getpath([\"a\"]; 1)", "getpath/2"),
        ("no_such_builtin", "no_such_builtin/0"),
    ] {
        assert_expression_problem(when, "forbidden_builtin", name);
    }
}

#[test]
fn forbidden_builtins_are_found_wherever_they_hide() {
    for when in [
        "any(.[]; input)",
        "[.[] | select(env)] | length > 0",
        "\"\\(now)\" == \"\"",
        "try halt catch true",
        "if true then debug else . end",
        "{a: input} | true",
        ".[input] == null",
        ".payload.action[0:now] == \"\"",
        ". as [$a] | now",
        ". as {(now | tostring): $x} | true",
        ".a // range(3)",
        "-input",
        "(input)?",
        "first(inputs)",
    ] {
        let resp = check(&one_rule(when), &ctx());
        assert!(
            resp.problems.iter().any(|p| p.code == "forbidden_builtin"),
            "{when}: {:?}",
            resp.problems
        );
    }
}

#[test]
fn unknown_variable() {
    for (when, var) in [
        ("$ENV.HOME == \"/root\"", "$ENV"),
        ("$__loc__.line == 1", "$__loc__"),
        ("{$__loc__} | true", "$__loc__"),
        ("$x == 1", "$x"),
        ("(.a as $x | .) | $x", "$x"),
        ("$__prog_args == []", "$__prog_args"),
    ] {
        assert_expression_problem(when, "unknown_variable", var);
    }
    // Bound variables and `$params` are fine.
    for when in [
        "$params == {}",
        ". as $e | $e.kind == \"x\"",
        ". as [$a, $b] | $a == $b",
        ". as {kind: $k, payload: {action: $a}} | $k == $a",
        ". as {$kind} | $kind == \"x\"",
        ".a as $x | .b as $y | [$x, $y] == [null, null]",
    ] {
        assert_valid(&one_rule(when), &ctx());
    }
}

#[test]
fn forbidden_syntax() {
    for (when, what) in [
        ("def f: .; f", "def"),
        ("def f: f; f", "def"),
        ("reduce .[] as $x (0; . + 1) > 0", "reduce"),
        ("foreach .[] as $x (0; . + 1) > 0", "foreach"),
        ("label $out | true", "label"),
        ("label $out | break $out", "label"),
        ("[..] | length > 0", "`..`"),
        (".payload | .. | false", "`..`"),
        (".a = 1 | true", "assignment"),
        (".a |= 1 | true", "assignment"),
        (".a += 1 | true", "assignment"),
        (".a -= 1 | true", "assignment"),
        (".a //= 1 | true", "assignment"),
        ("{a: 1} | with_entries(.value += 1) | .a == 2", "assignment"),
        ("@base64 \"x\\(.kind)\" == \"\"", "@base64"),
        ("@json \"\\(.kind)\" == \"\"", "@json"),
        ("@text \"x\" == \"x\"", "@text"),
        (". as $params | true", "$params"),
        (". as $ENV | true", "$ENV"),
        (". as $__loc__ | true", "$__loc__"),
    ] {
        assert_expression_problem(when, "forbidden_syntax", what);
    }
}

#[test]
fn expression_too_long() {
    // Padding lives in a string, so the expression stays shallow and parses if admitted.
    let sized = |n: usize| {
        let head = ".payload.action == \"";
        format!("{head}{}\"", "a".repeat(n - head.len() - 1))
    };
    let at_limit = sized(MAX_EXPRESSION_BYTES);
    assert_eq!(at_limit.len(), 4096);
    assert_valid(&one_rule(&at_limit), &ctx());

    let over = sized(MAX_EXPRESSION_BYTES + 1);
    let resp = check(&one_rule(&over), &ctx());
    assert_eq!(
        summary(&resp),
        BTreeSet::from([p("expression_too_long", 0, "r", "rules[0].when")])
    );
    assert!(
        resp.problems[0].message.contains("4097"),
        "{:?}",
        resp.problems
    );

    // Bytes, not characters; and a too-long expression is never parsed (no parse_error too).
    let wide = format!(".a == \"{}\" | (", "é".repeat(2046));
    assert!(wide.chars().count() <= 4096 && wide.len() > 4096);
    let resp = check(&one_rule(&wide), &ctx());
    assert_eq!(
        summary(&resp),
        BTreeSet::from([p("expression_too_long", 0, "r", "rules[0].when")])
    );
}

#[test]
fn expression_too_deep() {
    let nest =
        |open: &str, close: &str, n: usize| format!("{}true{}", open.repeat(n), close.repeat(n));
    let limit = MAX_EXPRESSION_DEPTH;
    assert_eq!(limit, 32);
    for (open, close) in [
        ("(", ")"),
        ("[", "] | true"),
        ("if true then ", " else false end"),
    ] {
        let ok = nest(open, close, limit);
        let deep = nest(open, close, limit + 1);
        let resp = check(&one_rule(&ok), &ctx());
        assert!(
            resp.problems
                .iter()
                .all(|p| p.code != "expression_too_deep"),
            "{ok}"
        );
        let resp = check(&one_rule(&deep), &ctx());
        assert_eq!(
            summary(&resp),
            BTreeSet::from([p("expression_too_deep", 0, "r", "rules[0].when")]),
            "{deep}"
        );
    }
    // Objects and string interpolations count too.
    let objects = format!("{}true{} | true", "{a: ".repeat(33), "}".repeat(33));
    let strings = format!("{}1{} == \"\"", "\"\\(".repeat(33), ")\"".repeat(33));
    for deep in [objects, strings] {
        let resp = check(&one_rule(&deep), &ctx());
        assert_eq!(
            summary(&resp),
            BTreeSet::from([p("expression_too_deep", 0, "r", "rules[0].when")])
        );
    }
    // Far past what jaq's parser survives on a test thread's 2 MiB stack: refused before
    // any parser sees it, so this test finishing at all is the point.
    for deep in [
        "(".repeat(4000),
        format!("{}1{}", "[".repeat(2000), "]".repeat(2000)),
    ] {
        let resp = check(&one_rule(&deep), &ctx());
        assert_eq!(
            summary(&resp),
            BTreeSet::from([p("expression_too_deep", 0, "r", "rules[0].when")])
        );
    }
    // Brackets inside strings and comments are not nesting.
    assert_valid(&one_rule(&format!(".a != \"{}\"", "(".repeat(100))), &ctx());
    assert_valid(&one_rule(&format!("true # {}", "[".repeat(100))), &ctx());
}

#[test]
fn params_too_large() {
    let envelope_bytes = r#"{"blob":""}"#.len();
    let fits =
        json!({"rules": [], "params": {"blob": "x".repeat(MAX_PARAMS_BYTES - envelope_bytes)}});
    assert_valid(&fits, &ctx());
    let over =
        json!({"rules": [], "params": {"blob": "x".repeat(MAX_PARAMS_BYTES - envelope_bytes + 1)}});
    let resp = check(&over, &ctx());
    assert_eq!(
        summary(&resp),
        BTreeSet::from([p("params_too_large", -1, "", "params")])
    );
    assert!(
        resp.problems[0].message.contains("65537"),
        "{:?}",
        resp.problems
    );
}

#[test]
fn too_many_rules() {
    let rules = |n: usize| -> Vec<Value> {
        (1..=n)
            .map(|i| json!({"id": format!("r-{i}"), "when": "false", "action": {"drop": true}}))
            .collect()
    };
    assert_eq!(MAX_RULES, 32);
    assert_valid(&json!({"rules": rules(32)}), &ctx());
    let resp = check(&json!({"rules": rules(33)}), &ctx());
    assert_eq!(
        summary(&resp),
        BTreeSet::from([p("too_many_rules", -1, "", "rules")])
    );
}

#[test]
fn invalid_rule_id() {
    let long = "a".repeat(65);
    for id in [
        "Bad",
        "a_b",
        "-a",
        "a-",
        "a---b",
        "a b",
        "",
        "r.1",
        long.as_str(),
    ] {
        let config = json!({"rules": [{"id": id, "when": "true", "action": {"drop": true}}]});
        let resp = check(&config, &ctx());
        assert_eq!(
            summary(&resp),
            BTreeSet::from([p("invalid_rule_id", 0, id, "rules[0].id")]),
            "{id:?}"
        );
    }
    // A rule without an id (control mints one before saving; validation alone refuses it).
    let resp = check(
        &json!({"rules": [{"when": "true", "action": {"drop": true}}]}),
        &ctx(),
    );
    assert_eq!(
        summary(&resp),
        BTreeSet::from([p("invalid_rule_id", 0, "", "rules[0].id")])
    );
    let max = "a".repeat(64);
    for id in [
        "a",
        "r-1",
        "x9",
        "drop-bots",
        "no-self-review--drop-bots",
        max.as_str(),
    ] {
        assert_valid(
            &json!({"rules": [{"id": id, "when": "true", "action": {"drop": true}}]}),
            &ctx(),
        );
    }
}

#[test]
fn duplicate_rule_id() {
    let config = json!({"rules": [
        {"id": "same", "when": "true", "action": {"drop": true}},
        {"id": "other", "when": "true", "action": {"drop": true}},
        {"id": "same", "when": "false", "action": {"queue": "forge"}},
    ]});
    let resp = check(&config, &ctx());
    assert_eq!(
        summary(&resp),
        BTreeSet::from([p("duplicate_rule_id", 2, "same", "rules[2].id")])
    );
}

#[test]
fn invalid_action() {
    let config = json!({"rules": [{"id": "r", "when": "true", "action": {"queue": ""}}]});
    let resp = check(&config, &ctx());
    assert_eq!(
        summary(&resp),
        BTreeSet::from([p("invalid_action", 0, "r", "rules[0].action")])
    );
    let config = json!({"default_action": {"queue": ""}});
    assert_eq!(
        summary(&check(&config, &ctx())),
        BTreeSet::from([p("invalid_action", -1, "", "default_action")])
    );
}

#[test]
fn not_granted() {
    let config = json!({
        "rules": [
            {"id": "ok", "when": "true", "action": {"queue": "ci"}},
            {"id": "wide", "when": "true", "action": {"queue": "payroll"}},
        ],
        "default_action": {"queue": "payroll"},
    });
    let resp = check(&config, &ctx());
    assert_eq!(
        summary(&resp),
        BTreeSet::from([
            p("not_granted", 1, "wide", "rules[1].action"),
            p("not_granted", -1, "", "default_action"),
        ])
    );
    assert!(resp.problems.iter().all(|p| p.message.contains("payroll")));
    // Queue names match exactly.
    let config = json!({"rules": [{"id": "r", "when": "true", "action": {"queue": "Forge"}}]});
    assert_eq!(
        summary(&check(&config, &ctx())),
        BTreeSet::from([p("not_granted", 0, "r", "rules[0].action")])
    );
}

#[test]
fn capability_missing() {
    let config = json!({
        "rules": [{"id": "q", "when": ".actor.trusted | not", "action": {"quarantine": true}}],
        "default_action": {"quarantine": true},
    });
    assert_valid(&config, &ctx());
    let resp = check(&config, &without_capability());
    assert_eq!(
        summary(&resp),
        BTreeSet::from([
            p("capability_missing", 0, "q", "rules[0].action"),
            p("capability_missing", -1, "", "default_action"),
        ])
    );
}

#[test]
fn invalid_configuration() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let huge_nesting = format!(r#"{{"params": {{"a": {deep}}}}}"#);
    for text in [
        "{",
        "",
        "null",
        r#"{"rules": {}}"#,
        r#"{"rulez": []}"#,
        r#"{"rules": [{"id": "r", "when": "true", "action": {"drop": true}, "then": 1}]}"#,
        r#"{"rules": [{"id": "r", "action": {"drop": true}}]}"#,
        r#"{"rules": [{"id": "r", "when": "true"}]}"#,
        r#"{"rules": [{"id": "r", "when": 1, "action": {"drop": true}}]}"#,
        r#"{"rules": [{"id": "r", "when": "true", "action": {"drop": false}}]}"#,
        r#"{"rules": [{"id": "r", "when": "true", "action": {"drop": true, "queue": "forge"}}]}"#,
        r#"{"rules": [{"id": "r", "when": "true", "action": {"forward": "x"}}]}"#,
        r#"{"default_action": "drop"}"#,
        r#"{"params": []}"#,
        huge_nesting.as_str(),
    ] {
        let resp = validate(text, &ctx());
        assert!(!resp.valid, "{text}");
        assert_eq!(
            summary(&resp),
            BTreeSet::from([p("invalid_configuration", -1, "", "")]),
            "{}",
            &text[..text.len().min(80)]
        );
        assert!(!resp.problems[0].message.is_empty());
        assert_eq!(resp.digest, "", "no digest for what is not a configuration");
    }
}

#[test]
fn all_problems_are_reported_together() {
    let mut rules = vec![
        json!({"id": "Bad_Id", "when": "input", "action": {"queue": "forge"}}),
        json!({"id": "dup", "when": "true", "action": {"queue": "elsewhere"}}),
        json!({"id": "dup", "when": "def f: .; f", "action": {"quarantine": true}}),
        json!({"when": format!("{}true{}", "(".repeat(40), ")".repeat(40)), "action": {"queue": ""}}),
        json!({"id": "long", "when": format!("\"{}\"", "x".repeat(5000)), "action": {"drop": true}}),
        json!({"id": "broken", "when": ".a ==", "action": {"drop": true}}),
        json!({"id": "vars", "when": "$ENV.HOME == $x", "action": {"drop": true}}),
        json!({"id": "fine", "when": ".kind == \"push\"", "action": {"queue": "forge"}}),
    ];
    for i in rules.len()..33 {
        rules.push(json!({"id": format!("pad-{i}"), "when": "false", "action": {"drop": true}}));
    }
    let config = json!({
        "rules": rules,
        "default_action": {"queue": "nowhere"},
        "params": {"blob": "x".repeat(70_000)},
    });
    let resp = check(&config, &without_capability());
    assert!(!resp.valid);
    assert_eq!(
        resp.digest,
        Configuration::from_json(&config.to_string())
            .expect("parses")
            .digest(),
        "an invalid configuration still has a digest"
    );
    assert_eq!(
        summary(&resp),
        BTreeSet::from([
            p("too_many_rules", -1, "", "rules"),
            p("invalid_rule_id", 0, "Bad_Id", "rules[0].id"),
            p("forbidden_builtin", 0, "Bad_Id", "rules[0].when"),
            p("not_granted", 1, "dup", "rules[1].action"),
            p("duplicate_rule_id", 2, "dup", "rules[2].id"),
            p("forbidden_syntax", 2, "dup", "rules[2].when"),
            p("capability_missing", 2, "dup", "rules[2].action"),
            p("invalid_rule_id", 3, "", "rules[3].id"),
            p("expression_too_deep", 3, "", "rules[3].when"),
            p("invalid_action", 3, "", "rules[3].action"),
            p("expression_too_long", 4, "long", "rules[4].when"),
            p("parse_error", 5, "broken", "rules[5].when"),
            p("unknown_variable", 6, "vars", "rules[6].when"),
            p("not_granted", -1, "", "default_action"),
            p("params_too_large", -1, "", "params"),
        ])
    );
    // Two unknown variables in one rule are two problems.
    let vars: Vec<&Problem> = resp
        .problems
        .iter()
        .filter(|p| p.rule_id == "vars")
        .collect();
    assert_eq!(vars.len(), 2, "{vars:?}");
    assert!(
        vars.iter().any(|p| p.message.contains("$ENV"))
            && vars.iter().any(|p| p.message.contains("$x"))
    );
    assert!(resp.problems.iter().all(|p| !p.message.is_empty()));
}

#[test]
fn a_valid_configuration_has_no_problems_and_its_digest() {
    let config = json!({
        "rules": [{"id": "prs", "when": ".event == \"pull_request\"", "action": {"queue": "forge"}}],
        "default_action": {"drop": true},
        "params": {"b": 1, "a": [1, 2]},
    });
    let resp = check(&config, &ctx());
    assert!(resp.valid && resp.problems.is_empty());
    let digest = Configuration::from_json(&config.to_string())
        .expect("parses")
        .digest();
    assert_eq!(resp.digest, digest);
    assert_eq!(resp.digest.len(), 64);
    // Key order does not change the digest.
    let reordered = r#"{"params": {"a": [1, 2], "b": 1}, "default_action": {"drop": true},
        "rules": [{"action": {"queue": "forge"}, "when": ".event == \"pull_request\"", "id": "prs"}]}"#;
    assert_eq!(validate(reordered, &ctx()).digest, digest);
}

/// Rules in the style of built-in packs, written to be safe on every payload shape.
fn pack_style_configuration() -> Value {
    let rules = [
        ("ping--drop", ".event == \"ping\"", json!({"drop": true})),
        ("unverified--drop", ".verified | not", json!({"drop": true})),
        (
            "bots--drop",
            ".payload.sender.login as $l | $params.bots | index($l) != null",
            json!({"drop": true}),
        ),
        (
            "bots--by-type",
            ".payload.sender.type? == \"Bot\"",
            json!({"drop": true}),
        ),
        (
            "ci--checks",
            ".event | test(\"^check_\")",
            json!({"queue": "ci"}),
        ),
        (
            "ci--failed-runs",
            "(.payload.workflow_run // .payload.workflow_job).conclusion? == \"failure\"",
            json!({"queue": "ci"}),
        ),
        (
            "ci--status",
            ".event == \"status\" and .payload.state != \"success\"",
            json!({"queue": "ci"}),
        ),
        (
            "ci--label",
            ".event == \"pull_request\" and (.payload.pull_request.labels | map(.name) | any(. == \"ci\"))",
            json!({"queue": "ci"}),
        ),
        (
            "ci--retest",
            ".payload.comment.body? // \"\" | test(\"^/(retest|rerun)\\\\b\")",
            json!({"queue": "ci"}),
        ),
        (
            "security--label",
            "[.payload.issue.labels[]?.name, .payload.pull_request.labels[]?.name] | any(. == \"security\")",
            json!({"queue": "security"}),
        ),
        (
            "drafts--drop",
            ".payload.pull_request.draft? == true",
            json!({"drop": true}),
        ),
        (
            "wip--drop",
            ".payload.pull_request.title? // \"\" | ascii_downcase | test(\"^\\\\[?wip\\\\b\")",
            json!({"drop": true}),
        ),
        (
            "merged--drop",
            ".kind == \"pull_request.closed\" and .payload.pull_request.merged == true",
            json!({"drop": true}),
        ),
        (
            "noise--actions",
            ".payload.action as $a | $params.ignored_actions | index($a) != null",
            json!({"drop": true}),
        ),
        (
            "deps--dependabot-branches",
            ".payload.pull_request.head.ref? // \"\" | startswith(\"dependabot/\")",
            json!({"drop": true}),
        ),
        (
            "review--trusted-humans",
            ".kind == \"pull_request.opened\" and (.payload.sender.login as $l | any($params.trusted_humans[]?; . == $l))",
            json!({"queue": "forge"}),
        ),
        (
            "review--requested",
            ".payload.pull_request.requested_reviewers? // [] | any(.login == \"octocat\")",
            json!({"queue": "forge"}),
        ),
        (
            "review--new-or-reopened",
            ".event == \"pull_request\" and (.payload.action as $a | any(\"opened\", \"reopened\", \"synchronize\", \"synchronized\"; . == $a))",
            json!({"queue": "forge"}),
        ),
        (
            "review--reviews",
            ".event | startswith(\"pull_request_\")",
            json!({"queue": "forge"}),
        ),
        (
            "triage--issues",
            ".event == \"issues\" and ([.payload.action] | inside([\"opened\", \"reopened\", \"labeled\"]))",
            json!({"queue": "triage"}),
        ),
        (
            "triage--pr-comments",
            ".event == \"issue_comment\" and (.payload.issue.pull_request != null or .payload.is_pull == true)",
            json!({"queue": "forge"}),
        ),
        (
            "triage--watched-repos",
            ".payload.repository.full_name? as $r | $params.watched_repos | index($r) != null",
            json!({"queue": "triage"}),
        ),
        (
            "pushes--main",
            ".event == \"push\" and (.payload.ref? // \"\" | endswith(\"/main\"))",
            json!({"queue": "ci"}),
        ),
        (
            "pushes--big",
            ".event == \"push\" and ((.payload.commits // []) | length) > 10",
            json!({"queue": "triage"}),
        ),
        (
            "forges--gitea-review-type",
            ".headers[\"x-gitea-event-type\"]? // \"\" | test(\"^pull_request_review\")",
            json!({"queue": "forge"}),
        ),
        (
            "cairn--to-reviewer",
            ".source == \"cairn\" and .payload.handoff.to? == \"reviewer\"",
            json!({"queue": "forge"}),
        ),
        (
            "actors--untrusted",
            ".actor.trusted | not",
            json!({"quarantine": true}),
        ),
        (
            "labels--by-param",
            "(.payload.pull_request.labels // []) | map(.name) | any(. as $n | $params.ci_labels | index($n) != null)",
            json!({"queue": "ci"}),
        ),
        (
            "misc--has-body",
            ".payload.pull_request // {} | has(\"body\") and (.body // \"\" | length > 0)",
            json!({"queue": "forge"}),
        ),
        (
            "misc--first-label",
            ".payload.pull_request.labels | first | .name? == \"bug\"",
            json!({"queue": "triage"}),
        ),
        (
            "misc--number-parity",
            "(.payload.number // 1) % 2 == 0 and (.payload.number | tostring | length) < 6",
            json!({"queue": "triage"}),
        ),
        ("misc--catch-all", "true", json!({"queue": "triage"})),
    ];
    let rules: Vec<Value> = rules
        .into_iter()
        .map(|(id, when, action)| json!({"id": id, "when": when, "action": action}))
        .collect();
    json!({
        "rules": rules,
        "default_action": {"queue": "triage"},
        "params": {
            "bots": ["dependabot[bot]", "renovate[bot]", "octocoders-linter[bot]"],
            "trusted_humans": ["Codertocat", "octocat"],
            "ci_labels": ["ci", "needs-ci"],
            "watched_repos": ["Codertocat/Hello-World"],
            "ignored_actions": ["edited", "deleted"],
        },
    })
}

#[test]
fn realistic_pack_rules_validate() {
    let config = pack_style_configuration();
    assert_eq!(config["rules"].as_array().map(Vec::len), Some(MAX_RULES));
    assert_valid(&config, &ctx());
    // The idioms the brief names, as written.
    for when in [
        ".kind == \"pull_request.opened\"",
        ".payload.sender.login as $l | $params.bots | index($l) != null",
        ".payload.sender.login as $l | any($params.trusted_humans[]?; . == $l)",
        ".payload.pull_request.labels | map(.name) | any(. == \"ci\")",
        ".event | test(\"^check_\")",
        ".payload.action as $a | any(\"opened\", \"reopened\"; . == $a)",
        "any(.payload.action == (\"opened\", \"reopened\"); .)",
        "[.payload.action] | inside([\"opened\", \"reopened\"])",
    ] {
        assert_valid(&one_rule(when), &ctx());
    }
}

fn delivery(file: &str) -> StoredDelivery {
    let path = format!("{}/{file}", webhooks_dir().display());
    let body = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let name = file.rsplit('/').next().unwrap_or(file);
    let kind = name
        .trim_end_matches(".json")
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    StoredDelivery {
        event_id: file.into(),
        source: file.split('/').next().unwrap_or_default().into(),
        kind,
        headers: vec![],
        body: body.into(),
        verified: true,
        delivery_id: "d-1".into(),
        received_at_ms: 0,
    }
}

#[test]
fn realistic_pack_rules_never_fault_on_real_payloads() {
    let config = pack_style_configuration();
    let compiled = CompiledConfiguration::compile(
        &Configuration::from_json(&config.to_string()).expect("parses"),
    )
    .expect("compiles");
    let mut decided = Vec::new();
    for forge in ["github", "gitea", "forgejo"] {
        let dir = format!("{}/{forge}", webhooks_dir().display());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let file = format!("{forge}/{name}");
            let d: Decision = compiled.evaluate(&ctx(), &build_envelope(&delivery(&file), &ctx()));
            assert_ne!(d.outcome, Outcome::Fault as i32, "{file}: {d:?}");
            decided.push((file, d.rule_id));
        }
    }
    assert_eq!(decided.len(), 77);
    let rule_for = |file: &str| {
        decided
            .iter()
            .find(|(f, _)| f == file)
            .map(|(_, r)| r.as_str())
            .unwrap_or_default()
    };
    assert_eq!(rule_for("github/ping.json"), "ping--drop");
    assert_eq!(
        rule_for("github/check_suite.rerequested.json"),
        "bots--drop"
    );
    assert_eq!(rule_for("github/check_run.created.json"), "ci--checks");
    assert_eq!(
        rule_for("github/workflow_job.completed.failure.json"),
        "ci--failed-runs"
    );
    assert_ne!(
        rule_for("github/workflow_job.completed.success.json"),
        "ci--failed-runs"
    );
    assert_eq!(rule_for("github/issues.edited.json"), "noise--actions");
    assert_eq!(
        rule_for("github/pull_request.opened.json"),
        "review--trusted-humans"
    );
    assert_eq!(
        rule_for("gitea/pull_request.opened.json"),
        "review--new-or-reopened"
    );
    assert_eq!(
        rule_for("gitea/issue_comment.created.on-pull-request.json"),
        "triage--pr-comments"
    );
    // Every github/gitea/forgejo sender except Codertocat is untrusted here.
    assert_eq!(rule_for("gitea/push.json"), "actors--untrusted");
}

#[test]
fn every_allowed_builtin_compiles_in_jaq() {
    for (name, arity) in ALLOWED_CALLS {
        let when = if *arity == 0 {
            format!("{name} | true")
        } else {
            format!("{name}({}) | true", vec!["."; *arity].join("; "))
        };
        let resp = check(&one_rule(&when), &ctx());
        assert!(resp.valid, "{name}/{arity}: {:?}", resp.problems);
    }
}

#[test]
fn dialect_doc_lists_exactly_the_allowed_builtins() {
    let doc = std::fs::read_to_string(DIALECT_DOC).unwrap_or_else(|e| panic!("{DIALECT_DOC}: {e}"));
    let start = doc
        .find("<!-- allowlist:start -->")
        .expect("allowlist start marker");
    let end = doc
        .find("<!-- allowlist:end -->")
        .expect("allowlist end marker");
    let documented: BTreeSet<String> = doc[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.contains('/'))
        .map(str::to_string)
        .collect();
    let allowed: BTreeSet<String> = ALLOWED_CALLS
        .iter()
        .map(|(n, a)| format!("{n}/{a}"))
        .collect();
    assert_eq!(
        documented, allowed,
        "docs/routing/dialect.md and dialect::ALLOWED_CALLS disagree"
    );
    // The limits the doc states are the engine's.
    for limit in [
        format!("{MAX_RULES} rules"),
        format!("{MAX_EXPRESSION_BYTES} bytes"),
        format!("depth {MAX_EXPRESSION_DEPTH}"),
        format!("{MAX_PARAMS_BYTES} bytes"),
        format!("{MAX_BODY_DEPTH} levels"),
    ] {
        assert!(
            doc.contains(&limit),
            "docs/routing/dialect.md does not state {limit:?}"
        );
    }
}

/// Evaluates `when` as rule `r` over github/pull_request.opened.json.
fn decide_on_pr_opened(when: &str) -> Decision {
    let env = build_envelope(&delivery("github/pull_request.opened.json"), &ctx());
    let config = Configuration::from_json(&one_rule(when).to_string()).expect("parses");
    let compiled =
        CompiledConfiguration::compile(&config).unwrap_or_else(|e| panic!("{when}: {e}"));
    compiled.evaluate(&ctx(), &env)
}

/// Section 5 of docs/routing/dialect.md: every construct it lists validates and runs.
#[test]
fn allowed_syntax_in_dialect_md() {
    for when in [
        ".payload.pull_request.head.ref == \"changes\"",
        "{\"a-b\": 1} | .[\"a-b\"] == 1",
        ".payload.pull_request.labels[0].name == \"bug\"",
        ".payload.pull_request.labels[-1].name == \"bug\"",
        ".payload.pull_request.title[0:6] == \"Update\"",
        "[.payload.pull_request.labels[].name] == [\"bug\"]",
        ".payload.nope?.deeper? == null and ([.payload.nope[]?] == [])",
        "{kind, event} == {kind: \"pull_request.opened\", event: \"pull_request\"}",
        "{(.event): 1} | has(\"pull_request\")",
        ".action as $x | {$x} | .x == \"opened\"",
        "\"\\(.event):\\(.action)\" == \"pull_request:opened\"",
        "(.payload.number + 1) * 2 - 4 == 2 and (7 % 4) == 3 and -(.payload.number) == -2",
        ".payload.number >= 2 and .payload.number <= 2 and .payload.number != 3",
        "(.payload.pull_request.draft | not) or false",
        ".payload.pull_request.merged_at // \"never\" == \"never\"",
        "if .event == \"push\" then false elif .event == \"pull_request\" then true else false end",
        "if .verified then true end",
        "try error(\"x\") catch (. == \"x\")",
        "(try error(\"x\")) // true",
        "(.payload.sender.login.x)? // true",
        ". as [$a, $b] | $a == $b",
        ". as {kind: $k, payload: {action: $a}} | $k == \"pull_request.\\($a)\"",
        ". as {$kind} | $kind == \"pull_request.opened\"",
        "true # a comment, with (((( and [[[[ in it",
    ] {
        assert_valid(&one_rule(when), &ctx());
        assert_eq!(
            decide_on_pr_opened(when).outcome,
            Outcome::Queue as i32,
            "{when}"
        );
    }
}

/// Section 10 (and sections 4 and 6) of docs/routing/dialect.md, checked against the engine.
#[test]
fn jaq_differences_documented_in_dialect_md() {
    let matches = |when: &str| decide_on_pr_opened(when).outcome == Outcome::Queue as i32;
    let faults = |when: &str| decide_on_pr_opened(when).outcome == Outcome::Fault as i32;
    for when in [
        "{\"a\": 1} | .[0] == null",
        "{} | .[null] == null",
        "{(1): \"x\"} | keys == [1]",
        "null | has(\"a\") == false",
        "[{name: \"a\", value: 1}] | from_entries | keys == [null]",
        "[1, null, \"a\"] | join(\",\") == \"1,null,a\"",
        "\"abc\" | abs == \"abc\"",
        "\"a\" * 0 == null",
        "1e3 | tostring == \"1e3\"",
        "4 / 2 | tostring == \"2.0\"",
        "1 / 0 | . > 1e308",
        "\"äa\" | index(\"a\") == 1",
        "[limit(-1; 1, 2)] == []",
        "if .verified then true end",
        "1 == 1.0",
        "(false and error(\"x\")) | not",
        "true or error(\"x\")",
        "\"x\" | [.a?] == []",
        "\"AbC\" | test(\"abc\"; \"i\")",
        "\"ab\" | test(\"a b\"; \"x\")",
        "\"a1\" | test(\"\\\\d\")",
        "\"a1\" | test(\"[[:digit:]]\")",
        "\"ab\" | test(\"\\\\bab\\\\b\")",
        ".payload | keys_unsorted[0:2] == [\"action\", \"number\"]",
        "any(.payload.action == (\"opened\", \"reopened\"); .)",
        "[.payload.action] | inside([\"opened\", \"reopened\"])",
    ] {
        assert!(matches(when), "{when}: {:?}", decide_on_pr_opened(when));
    }
    for when in [
        "1 | ltrimstr(\"a\") == 1",
        "1 | startswith(\"a\")",
        "\"ab\" | reverse == \"ba\"",
        "\"aa\" | test(\"(a)\\\\1\")",
        "\"ab\" | test(\"(?<=a)b\")",
        "\"ab\" | test(\"a(?=b)\")",
        "null | .[] | true",
        "null | map(.) | true",
        "null | any",
        "null | keys",
        "null | add",
        "null | ascii_downcase",
        "null | test(\"a\")",
        "null | startswith(\"a\")",
        "null | split(\",\")",
        "null | join(\",\")",
        "\"abc\" | .x",
        ".payload.no_such | map(.name) | any(. == \"ci\")",
    ] {
        assert!(faults(when), "{when}: {:?}", decide_on_pr_opened(when));
    }
    // The first output of `==` with a comma compares with the first value only.
    assert_eq!(
        decide_on_pr_opened(".payload.action == (\"closed\", \"opened\")").outcome,
        Outcome::Default as i32
    );
}

fn all_payload_files() -> Vec<String> {
    let mut files = Vec::new();
    for forge in ["github", "gitea", "forgejo"] {
        let dir = format!("{}/{forge}", webhooks_dir().display());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        files.extend(names.into_iter().map(|n| format!("{forge}/{n}")));
    }
    files
}

/// Section 4 of docs/routing/dialect.md: the idioms it calls safe never fault on any real
/// payload, and the ones it says fault on a push do.
#[test]
fn dialect_md_idioms_are_safe_on_every_real_payload() {
    let doc = std::fs::read_to_string(DIALECT_DOC).unwrap_or_else(|e| panic!("{DIALECT_DOC}: {e}"));
    let params = json!({"trusted_humans": ["Codertocat"], "actions": ["opened"], "bots": []});
    let compile = |when: &str| {
        let config = json!({"rules": [{"id": "r", "when": when, "action": {"queue": "forge"}}], "params": params});
        let resp = check(&config, &ctx());
        assert!(resp.valid, "{when}: {:?}", resp.problems);
        CompiledConfiguration::compile(
            &Configuration::from_json(&config.to_string()).expect("parses"),
        )
        .expect("compiles")
    };
    let envelopes: Vec<(String, jaq_json::Val)> = all_payload_files()
        .into_iter()
        .map(|f| (f.clone(), build_envelope(&delivery(&f), &ctx())))
        .collect();
    assert_eq!(envelopes.len(), 77);
    for when in [
        ".kind == \"pull_request.opened\"",
        ".event | test(\"^check_\")",
        ".payload.sender.login as $l | any($params.trusted_humans[]?; . == $l)",
        ".payload.sender.type? == \"Bot\"",
        ".payload.comment.body? // \"\" | test(\"^/(retest|rerun)\\\\b\")",
        ".payload.pull_request.title? // \"\" | ascii_downcase | test(\"^\\\\[?wip\\\\b\")",
        ".event == \"push\" and (.payload.ref? // \"\" | endswith(\"/main\"))",
        ".event == \"issue_comment\" and (.payload.issue.pull_request != null or .payload.is_pull == true)",
        "(.payload.workflow_run // .payload.workflow_job).conclusion? == \"failure\"",
        ".headers[\"x-gitea-event-type\"]? // \"\" | test(\"^pull_request_review\")",
        ".actor.trusted | not",
        ".event == \"pull_request\" and (.payload.pull_request.labels | map(.name) | any(. == \"ci\"))",
        "(.payload.pull_request.labels // []) | map(.name) | any(. == \"ci\")",
        "[.payload.pull_request.labels[]?.name] | any(. == \"ci\")",
        ".payload.pull_request.title // \"\" | ascii_downcase | test(\"wip\")",
        ".payload.action as $a | any(\"opened\", \"reopened\"; . == $a)",
        "any(.payload.action == (\"opened\", \"reopened\"); .)",
        "[.payload.action] | inside([\"opened\", \"reopened\"])",
        ".payload.action as $a | $params.actions | index($a) != null",
        ".payload.sender.login as $l | $params.bots | index($l) != null",
    ] {
        assert!(
            doc.contains(when),
            "docs/routing/dialect.md no longer shows {when}"
        );
        let compiled = compile(when);
        for (file, env) in &envelopes {
            let d = compiled.evaluate(&ctx(), env);
            assert_ne!(d.outcome, Outcome::Fault as i32, "{when} on {file}: {d:?}");
        }
    }
    let push = &envelopes
        .iter()
        .find(|(f, _)| f == "github/push.json")
        .expect("push.json")
        .1;
    for when in [
        ".payload.pull_request.labels | map(.name) | any(. == \"ci\")",
        ".payload.pull_request.title | ascii_downcase | test(\"wip\")",
    ] {
        assert!(
            doc.contains(when),
            "docs/routing/dialect.md no longer shows {when}"
        );
        assert_eq!(
            compile(when).evaluate(&ctx(), push).outcome,
            Outcome::Fault as i32,
            "{when}"
        );
    }
}
