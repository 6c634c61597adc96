//! A sandbox child builds only the parts of `.payload` its configurations' rules can read
//! (`router/src/engine/projection.rs`). These tests hold it to its promise: over real forge
//! deliveries, the seed cases and random payloads, every rule we ship and random expressions
//! yield the same outputs — as far as routing can observe them — over the projected envelope
//! as over the whole one.

use std::path::Path;

use jaq_json::Val;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use switchboard_proto::router::v1::{RoutingContext, StoredDelivery, TrustedActors};
use switchboard_router::engine::{
    CompiledConfiguration, Configuration, build_envelope, build_envelope_reading,
};
use switchboard_testkit::forge_headers::form_body;
use switchboard_testkit::seed_cases::{Seed, raw_delivery, real_payloads};

/// How many outputs of each rule are compared (evaluation itself takes only the first).
const OUTPUTS: usize = 16;

fn ctx(capability: bool) -> RoutingContext {
    RoutingContext {
        grant: vec!["forge".into()],
        trusted_actors_capability: capability,
        trusted_actors: capability.then(|| TrustedActors {
            humans: vec!["Codertocat".into(), "lunny".into()],
            agents: vec!["switchboard-agent".into()],
            bots: vec!["dependabot[bot]".into()],
        }),
    }
}

/// An output as far as the projection promises it: routing itself sees only `true`,
/// `false`, `null`, another value's type, or an error; scalars are compared whole too (a
/// projection keeps every scalar, so a number or string a rule yields — a length, a key — is
/// the same), arrays and objects by type (one a rule passes on untouched keeps only what is
/// read).
fn observed(output: &Option<Val>) -> String {
    match output {
        None => "error".into(),
        Some(v @ (Val::Bool(_) | Val::Null | Val::Num(_) | Val::TStr(_) | Val::BStr(_))) => {
            format!("{v:?}")
        }
        Some(Val::Arr(_)) => "an array".into(),
        Some(Val::Obj(_)) => "an object".into(),
    }
}

/// A configuration of `rules` (each queueing to `forge`) with `params`.
fn configuration(rules: &[String], params: &Value) -> CompiledConfiguration {
    let rules: Vec<Value> = rules
        .iter()
        .enumerate()
        .map(|(i, when)| json!({"id": format!("r{i}"), "when": when, "action": {"queue": "forge"}}))
        .collect();
    let text = json!({"rules": rules, "params": params}).to_string();
    let config = Configuration::from_json(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    CompiledConfiguration::compile(&config).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Every output of every rule of `config`, over the whole envelope and over the envelope
/// built as far as `config` reads; the first difference, if any.
fn difference(
    config: &CompiledConfiguration,
    delivery: &StoredDelivery,
    ctx: &RoutingContext,
) -> Option<String> {
    let whole = build_envelope(delivery, ctx);
    let projected = build_envelope_reading(delivery, ctx, config.reads());
    for (i, id) in config.rule_ids().iter().enumerate() {
        // Where a rule's shortcut decides, it decides what jaq's first output is.
        for envelope in [&whole, &projected] {
            if let Some(decided) = config.shortcut(i, envelope) {
                let first = config.outputs(i, envelope, 1);
                if first != [Some(Val::Bool(decided))] {
                    return Some(format!(
                        "rule {id} over {} ({}): the shortcut decides {decided}, jaq's first output is {:?}",
                        delivery.delivery_id,
                        delivery.kind,
                        first.first().map(observed)
                    ));
                }
            }
        }
        let a: Vec<String> = config
            .outputs(i, &whole, OUTPUTS)
            .iter()
            .map(observed)
            .collect();
        let b: Vec<String> = config
            .outputs(i, &projected, OUTPUTS)
            .iter()
            .map(observed)
            .collect();
        if a != b {
            return Some(format!(
                "rule {id} over {} ({}): whole envelope {a:?}, projected {b:?}",
                delivery.delivery_id, delivery.kind
            ));
        }
    }
    None
}

/// Every `when` in a JSON document (a pack manifest, a hand-written configuration).
fn whens(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(w)) = m.get("when") {
                out.push(w.clone());
            }
            m.values().for_each(|v| whens(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| whens(v, out)),
        _ => {}
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The packs' manifests (`packs/catalog/<name>/<version>/pack.json`).
fn pack_manifests() -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packs/catalog");
    let mut out = Vec::new();
    for pack in std::fs::read_dir(&root).expect("packs/catalog/") {
        let pack = pack.expect("entry").path();
        let Ok(versions) = std::fs::read_dir(&pack) else {
            continue;
        };
        for version in versions {
            let manifest = version.expect("entry").path().join("pack.json");
            if manifest.is_file() {
                out.push(read_json(&manifest));
            }
        }
    }
    assert!(out.len() >= 4, "only {} pack manifests", out.len());
    out
}

/// Every delivery the tests route: each real forge payload as JSON and as a form (with and
/// without a verified signature), the seed cases' deliveries, and bodies that are not JSON.
fn deliveries() -> Vec<StoredDelivery> {
    let mut out = Vec::new();
    for (i, p) in real_payloads().expect("payloads").into_iter().enumerate() {
        let json = raw_delivery(
            p.forge,
            &p.event,
            p.body.clone(),
            i % 3 != 0,
            &format!("p{i}"),
        );
        let mut form = raw_delivery(
            p.forge,
            &p.event,
            form_body(&p.body),
            true,
            &format!("f{i}"),
        );
        for h in &mut form.headers {
            if h.name.eq_ignore_ascii_case("content-type") {
                h.value = "application/x-www-form-urlencoded".into();
            }
        }
        out.extend([json, form]);
    }
    for seed in ["fleet", "pool-review"] {
        let seed = Seed::load(seed).unwrap_or_else(|e| panic!("{e}"));
        out.extend(seed.deliveries().unwrap_or_else(|e| panic!("{e}")));
    }
    for (i, body) in [
        &b"not json at all"[..],
        b"",
        b"[1, 2, {\"action\": \"opened\"}]",
        b"{\"action\": \"opened\", \"action\": \"closed\", \"sender\": {\"login\": 7}}",
        b"{\"pull_request\": \"a string\", \"labels\": {\"name\": \"bug\"}}",
        b"{\"action\": \"opened\"} trailing",
    ]
    .into_iter()
    .enumerate()
    {
        out.push(raw_delivery(
            "github",
            "issues",
            body.to_vec(),
            true,
            &format!("x{i}"),
        ));
    }
    out
}

/// Expressions that lean on what the analysis must not get wrong: values passed on and
/// then measured, iteration next to keys, variables, type filters, error handling.
const TRICKY: &[&str] = &[
    ".payload.pull_request | select(.draft) | .title | strings | test(\"WIP\")",
    ".payload.pull_request.labels // [] | map(.name) | index(\"bug\") != null",
    "any(.payload.commits[]?; .message | test(\"docs\"))",
    ".payload.sender.login as $who | any($params.trusted[]?; . == $who)",
    ".payload.repository | length > 3",
    ".payload.repository.owner | keys | index(\"login\") != null",
    "(.payload | tojson | length) > 100",
    ".payload.pull_request.labels[0].name == \"bug\"",
    "[.payload.issue.labels[]?.name] | length > 0",
    "(.payload.repository | to_entries | map(.key) | index(\"private\")) != null",
    ".payload.action as $a | .payload.issue.title as $t | ($a == \"opened\") and ($t | test(\"a\"))",
    "try (.payload.repository.owner.login | test(\"x\")) catch (. | test(\"cannot\"))",
    "(.payload.repository.owner.login | test(\"x\"))?",
    "try (.payload.commits.x) catch (tostring | length > 100)",
    ".payload | has(\"pull_request\")",
    ".payload.pull_request.head.repo.full_name == .payload.repository.full_name",
    "if .payload.issue then .payload.issue.state == \"open\" else .payload.action == \"closed\" end",
    ".payload.commits | length > 0",
    "first(.payload.commits[]?.added[]?) | startswith(\"docs/\")",
    ".payload[\"repository\"].name == \"Hello-World\"",
    ".payload.repository.\"full_name\" | endswith(\"World\")",
    "{a: .payload.action} | .a == \"opened\"",
    ".payload.repository | {name, private} | .name != null",
    ".payload.pull_request.requested_reviewers // [] | any(.login == \"x\")",
    ".payload.issue.labels | map(select(.name | test(\"^bug\"))) | length == 0",
    ".payload.sender | .login, .type | . == \"Bot\"",
    ".payload.action | not",
    "$params.x | . == .",
    "isempty(.payload.commits[]?) | not",
    "limit(2; .payload.commits[]?.id) | length > 3",
    ".headers[\"x-github-event\"] == \"push\" and .payload.ref == \"refs/heads/main\"",
    ".actor.trusted or .actor.kind == \"bot\"",
    ".headers | keys | length > 3",
    ".headers[\"content-type\"] | test(\"json\")",
    "any(.headers[]; test(\"Hookshot\"))",
    ".headers.\"x-github-delivery\" // .headers.\"x-gitea-delivery\" | length == 36",
    ".payload.pull_request.labels | any",
    ". as {payload: {action: $a}} | $a == \"opened\"",
    ".payload.repository.owner.login + \"/\" | length > 2",
    ".payload.forkee // .payload.repository | .fork",
];

/// Every rule of every pack (with its parameters' defaults and with the seed fleet's
/// parameters), the hand-written fleet configuration and the tricky expressions, alone and
/// all together, over every delivery, with and without the trusted-actors capability.
#[test]
fn every_shipped_rule_decides_alike_over_the_projected_envelope() {
    let fleet = read_json(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/routing/fleet/hand-written.json"),
    );
    let fleet_params = fleet.get("params").cloned().unwrap_or(json!({}));
    let mut sets: Vec<(Vec<String>, Value)> = Vec::new();
    for manifest in pack_manifests() {
        let mut rules = Vec::new();
        whens(&manifest["rules"], &mut rules);
        let mut defaults = Map::new();
        if let Some(schema) = manifest.get("params_schema").and_then(Value::as_object) {
            for (k, v) in schema {
                defaults.insert(k.clone(), v.get("default").cloned().unwrap_or(Value::Null));
            }
        }
        assert!(!rules.is_empty(), "no rules in {}", manifest["name"]);
        sets.push((rules.clone(), Value::Object(defaults)));
        sets.push((rules, fleet_params.clone()));
    }
    let mut fleet_rules = Vec::new();
    whens(&fleet["rules"], &mut fleet_rules);
    sets.push((fleet_rules, fleet_params.clone()));
    let tricky: Vec<String> = TRICKY.iter().map(|s| s.to_string()).collect();
    let tricky_params = json!({"trusted": ["octocat", "Codertocat"], "x": {"a": 1}});
    sets.push((tricky.clone(), tricky_params.clone()));
    let rules: usize = sets.iter().map(|(r, _)| r.len()).sum();
    assert!(rules > 80, "only {rules} rules");

    let deliveries = deliveries();
    let mut configs = Vec::new();
    for (rules, params) in &sets {
        // Each rule alone reads least: the strictest test of what it reads.
        for rule in rules {
            configs.push(configuration(std::slice::from_ref(rule), params));
        }
        configs.push(configuration(rules, params));
    }
    let mut projected = 0;
    for config in &configs {
        if !config.reads().is_whole() {
            projected += 1;
        }
        for capability in [true, false] {
            let ctx = ctx(capability);
            for d in &deliveries {
                if let Some(diff) = difference(config, d, &ctx) {
                    panic!("{diff}");
                }
            }
        }
    }
    // The analysis must actually project: most rules read a few fields.
    assert!(
        projected * 10 > configs.len() * 8,
        "only {projected} of {} configurations read less than the whole envelope",
        configs.len()
    );
}

/// An expression over keys `a`, `b`, `c`, built from what rules use.
fn expression() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(".".to_string()),
        Just(".payload".to_string()),
        Just(".payload.a".to_string()),
        Just(".payload.b".to_string()),
        Just("$params.p".to_string()),
        Just("$v".to_string()),
        Just("\"a\"".to_string()),
        Just("1".to_string()),
        Just("null".to_string()),
        Just("true".to_string()),
    ];
    leaf.prop_recursive(5, 48, 2, |inner| {
        let one = inner.clone().prop_flat_map(|f| {
            prop_oneof![
                Just(format!("{f}.a")),
                Just(format!("{f}.b")),
                Just(format!("{f}.c?")),
                Just(format!("{f}[]?")),
                Just(format!("{f}[0]?")),
                Just(format!("({f} | keys)")),
                Just(format!("({f} | length)")),
                Just(format!("({f} | tojson)")),
                Just(format!("({f} | tostring)")),
                Just(format!("({f} | type)")),
                Just(format!("({f} | not)")),
                Just(format!("({f} | strings)")),
                Just(format!("({f} | values)")),
                Just(format!("({f} | has(\"a\"))")),
                Just(format!("({f} | to_entries)")),
                Just(format!("select({f})")),
                Just(format!("map({f})")),
                Just(format!("first({f})")),
                Just(format!("isempty({f})")),
                Just(format!("any({f})")),
                Just(format!("[{f}]")),
                Just(format!("{{k: {f}}}")),
                Just(format!("try {f}")),
                Just(format!("({f})?")),
                Just(format!("try {f} catch (. | tostring)")),
                Just(format!("try ({f}.a) catch (. | tostring)")),
                Just(format!("({f} | test(\"1\"))")),
            ]
        });
        let two = (inner.clone(), inner).prop_flat_map(|(f, g)| {
            prop_oneof![
                Just(format!("({f} | {g})")),
                Just(format!("({f}, {g})")),
                Just(format!("({f} // {g})")),
                Just(format!("({f} == {g})")),
                Just(format!("({f} and {g})")),
                Just(format!("({f} + {g})")),
                Just(format!("if {f} then {g} else .payload.c end")),
                Just(format!("if {f} then {g} end")),
                Just(format!("({f} as $v | {g})")),
                Just(format!("any({f}; {g})")),
                Just(format!("all({f}; {g})")),
                Just(format!("limit(2; {f}, {g})")),
            ]
        });
        prop_oneof![one, two]
    })
}

/// A JSON value over keys `a`, `b`, `c` (and one other), as payloads.
fn payload() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..3).prop_map(Value::from),
        prop_oneof![Just("a"), Just("1"), Just("x1")].prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![Just("a"), Just("b"), Just("c"), Just("z")].prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_expressions_decide_alike_over_the_projected_envelope(
        code in expression(),
        body in payload(),
        params in payload(),
    ) {
        let code = format!(".payload.a as $v | {code}");
        let rules = [code];
        let text = json!({
            "rules": [{"id": "r", "when": rules[0], "action": {"queue": "forge"}}],
            "params": {"p": params},
        })
        .to_string();
        let config = Configuration::from_json(&text).expect("parses");
        // Some generated expressions are outside the dialect; those are refused before any
        // envelope is built.
        let Ok(config) = CompiledConfiguration::compile(&config) else {
            return Ok(());
        };
        let delivery = raw_delivery("github", "issues", body.to_string().into_bytes(), true, "d");
        prop_assert_eq!(difference(&config, &delivery, &ctx(true)), None);
    }
}
