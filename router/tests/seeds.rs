//! The hand-written fleet configuration of issue 5, routed in-process over its cases.
//!
//! Before packs the team ran two hand-written configurations, `fleet.json` and
//! `pool-review.json`; SPEC-0031 REQ-9 defines the built-in packs by what they did, and once
//! the packs routed every case to its `want` (`packs/tests/seeds_proof.rs`,
//! `tests/all/seed_packs.rs`) both left `docs/routing/rule-packs/` (CHANGELOG.md). The fleet's
//! 27 rules stay as test data, `router/tests/data/routing/fleet/hand-written.json`: the
//! configuration the adoption scenario (REQ-6) pastes in by hand before installing
//! trusted-actors@1 and handoff-lanes@1 with `replaces`. This file keeps that copy honest.
//!
//! The cases (`router/tests/data/routing/<seed>/cases.json`, see the README there) are read
//! with `switchboard-testkit`, which builds each delivery from a real forge payload in
//! `testkit/data/webhooks/` (with the few edits the case needs) or an inline Cairn hand-off.
//! Besides the decisions, this file checks that the hand-written rules validate against the
//! grant the cases document, that their params are the cases' params, that every rule decides
//! at least one case and the default is reached, that no rule faults on any delivery shape or
//! malformed param, and that they decide the same when the trusted-actor rules are moved in
//! front of the lane rules (the order trusted-actors@1 and handoff-lanes@1 install them in).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};
use switchboard_proto::router::v1::{Decision, Outcome, RoutingContext, StoredDelivery};
use switchboard_router::engine::validate::validate;
use switchboard_router::engine::{Action, CompiledConfiguration, Configuration, build_envelope};
use switchboard_testkit::seed_cases::{self, CAIRN_DOC, Seed, kind_of, raw_delivery};

/// Fleet rules 1, 3, 17 and 18 (1-based) do what trusted-actors@1 does; the rest are
/// handoff-lanes@1's.
const FLEET_TRUSTED_ACTOR_RULES: [usize; 4] = [1, 3, 17, 18];

/// The fleet cases with the hand-written configuration they were written against.
struct HandWritten {
    seed: Seed,
    /// The configuration's path, relative to the repository root.
    path: String,
    text: String,
    config: Configuration,
}

/// The fleet cases and `hand-written.json`; every rule a case names is one of its rules.
fn fleet() -> HandWritten {
    let seed = Seed::load("fleet").unwrap_or_else(|e| panic!("{e}"));
    let (path, text) = seed.hand_written().unwrap_or_else(|e| panic!("{e}"));
    let config = Configuration::from_json(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    for case in &seed.cases {
        if let Some(rule) = &case.rule {
            assert!(
                config.rules.iter().any(|r| r.id.as_deref() == Some(rule)),
                "fleet/{}: {path} has no rule {rule}",
                case.name
            );
        }
    }
    HandWritten {
        seed,
        path,
        text,
        config,
    }
}

fn delivery(seed: &Seed, index: usize) -> StoredDelivery {
    seed.delivery(index).unwrap_or_else(|e| panic!("{e}"))
}

fn ctx(grant: &[String], capability: bool) -> RoutingContext {
    RoutingContext {
        grant: grant.to_vec(),
        trusted_actors_capability: capability,
        trusted_actors: None,
    }
}

fn with_params(config: &Configuration, changes: Option<&Map<String, Value>>) -> Configuration {
    let mut c = config.clone();
    for (k, v) in changes.into_iter().flatten() {
        c.params.insert(k.clone(), v.clone());
    }
    c
}

fn compile(config: &Configuration) -> CompiledConfiguration {
    CompiledConfiguration::compile(config).unwrap_or_else(|e| panic!("does not compile: {e}"))
}

fn is_fault(d: &Decision) -> bool {
    d.outcome == Outcome::Fault as i32
}

/// What a decision says, for messages: `drop by unverified`, `queue:triage by default`.
fn describe(d: &Decision) -> String {
    let by = if d.rule_id.is_empty() {
        "the default".to_string()
    } else {
        d.rule_id.clone()
    };
    if is_fault(d) {
        format!("fault {} in {by}: {}", d.fault_code, d.reason)
    } else {
        format!("{} by {by}", d.label())
    }
}

/// Routes every case with and without the trusted-actors capability (the hand-written rules
/// never read `.actor`, so both must agree) and checks want, the deciding rule, faults and
/// coverage. Returns the decisions by case name.
fn route_cases(hw: &HandWritten) -> BTreeMap<String, Decision> {
    let seed = &hw.seed;
    let base = compile(&hw.config);
    let mut failures = Vec::new();
    let mut decided: BTreeMap<String, usize> = BTreeMap::new();
    let mut defaults = 0;
    let mut out = BTreeMap::new();
    for (i, case) in seed.cases.iter().enumerate() {
        let d = delivery(seed, i);
        let compiled;
        let config = match &case.params_override {
            Some(changes) => {
                compiled = compile(&with_params(&hw.config, Some(changes)));
                &compiled
            }
            None => &base,
        };
        let with_actor = config.evaluate(
            &ctx(&seed.grant, true),
            &build_envelope(&d, &ctx(&seed.grant, true)),
        );
        let without = config.evaluate(
            &ctx(&seed.grant, false),
            &build_envelope(&d, &ctx(&seed.grant, false)),
        );
        if with_actor != without {
            failures.push(format!(
                "{}: decides {} with the trusted_actors capability and {} without",
                case.name,
                describe(&with_actor),
                describe(&without)
            ));
        }
        let got = with_actor;
        let label = got.label().to_string();
        let rule_ok = match &case.rule {
            Some(r) => got.rule_id == *r && !got.by_default_action,
            None => got.rule_id.is_empty(),
        };
        if is_fault(&got) || label != case.want || !rule_ok {
            failures.push(format!(
                "{} ({} {}): want {} by {}, got {}",
                case.name,
                case.source,
                d.kind,
                case.want,
                case.rule.as_deref().unwrap_or("the default"),
                describe(&got)
            ));
        }
        if got.rule_id.is_empty() {
            defaults += 1;
        } else {
            *decided.entry(got.rule_id.clone()).or_default() += 1;
        }
        out.insert(case.name.clone(), got);
    }
    for rule in &hw.config.rules {
        let id = rule.id.as_deref().unwrap_or_default();
        if !decided.contains_key(id) {
            failures.push(format!("rule {id} decides no case"));
        }
    }
    if defaults == 0 {
        failures.push("no case reaches the default".into());
    }
    assert!(
        failures.is_empty(),
        "{}: {} of {} cases or checks fail:\n  {}",
        seed.name,
        failures.len(),
        seed.cases.len(),
        failures.join("\n  ")
    );
    out
}

/// Deliveries of every shape; the first `wellformed` are real payloads, the documented
/// Cairn examples and the cases, the rest hostile bodies.
struct Corpus {
    deliveries: Vec<StoredDelivery>,
    wellformed: usize,
}

fn corpus_delivery(
    out: &[StoredDelivery],
    source: &str,
    event: &str,
    body: Vec<u8>,
    verified: bool,
) -> StoredDelivery {
    raw_delivery(
        source,
        event,
        body,
        verified,
        &format!("corpus-{:05}", out.len()),
    )
}

/// Every delivery shape a rule must survive: each real payload, verified and not; each
/// Cairn example of the docs; each case of both cases files; and hostile bodies (not JSON,
/// the wrong JSON types where objects, strings and lists belong) under every source and many
/// events.
fn corpus() -> Corpus {
    let mut out = Vec::new();
    let payloads = seed_cases::real_payloads().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(payloads.len(), 77, "the data set has 77 payloads");
    for p in payloads {
        for verified in [true, false] {
            let d = corpus_delivery(&out, p.forge, &p.event, p.body.clone(), verified);
            out.push(d);
        }
    }
    for example in cairn_doc_examples() {
        let body = serde_json::to_vec(&example).expect("JSON");
        let d = corpus_delivery(&out, "cairn", "handoff", body, true);
        out.push(d);
    }
    for name in ["fleet", "pool-review"] {
        let seed = Seed::load(name).unwrap_or_else(|e| panic!("{e}"));
        out.extend(seed.deliveries().unwrap_or_else(|e| panic!("{e}")));
    }
    let wellformed = out.len();
    let wrong = json!([
        "a string",
        7,
        null,
        [1, "x", null, {"name": 5}],
        {"login": 5, "name": ["x"], "labels": "hold", "user": "mallory"},
        true
    ]);
    let mut bodies: Vec<Vec<u8>> = vec![
        b"payload=%7B%22action%22%3A%22opened%22%7D".to_vec(),
        b"".to_vec(),
        b"{\"action\": \"opened\", \"issue\": ".to_vec(),
        b"[]".to_vec(),
        b"null".to_vec(),
        b"\"handoff\"".to_vec(),
        b"42".to_vec(),
    ];
    for action in [
        None,
        Some("opened"),
        Some("labeled"),
        Some("label_updated"),
        Some("review_requested"),
        Some("synchronize"),
        Some("completed"),
        Some("reviewed"),
        Some("created"),
    ] {
        for w in wrong.as_array().expect("list") {
            let mut body = json!({
                "handoff": w, "actor": w, "issue": w, "pull_request": w, "sender": w,
                "repository": w, "requested_reviewer": w, "label": w, "review": w,
                "state": w, "check_run": w, "check_suite": w, "workflow_run": w,
                "workflow_job": w, "comment": w,
            });
            if let Some(a) = action {
                body["action"] = json!(a);
            }
            bodies.push(serde_json::to_vec(&body).expect("JSON"));
            // The same with the wrong value one level down.
            let nested = json!({"login": w, "user": w, "labels": w, "state": w,
                "full_name": w, "repo": w, "lane": w, "from": w, "to": w, "id": w,
                "conclusion": w, "name": w});
            let mut body = json!({
                "handoff": nested, "actor": nested, "issue": nested,
                "pull_request": nested, "sender": nested, "repository": nested,
                "requested_reviewer": nested, "check_run": nested, "check_suite": nested,
                "workflow_run": nested, "workflow_job": nested, "state": w,
            });
            if let Some(a) = action {
                body["action"] = json!(a);
            }
            bodies.push(serde_json::to_vec(&body).expect("JSON"));
        }
    }
    let pairs = [
        ("cairn", "handoff"),
        ("cairn", "issues"),
        ("github", "issues"),
        ("github", "pull_request"),
        ("github", "label"),
        ("github", "pull_request_review"),
        ("github", "status"),
        ("github", "check_run"),
        ("github", "workflow_job"),
        ("gitea", "issue_comment"),
        ("gitea", "pull_request_approved"),
        ("forgejo", "pull_request"),
        ("generic", "handoff"),
    ];
    for body in &bodies {
        for (source, event) in pairs {
            let d = corpus_delivery(&out, source, event, body.clone(), true);
            out.push(d);
        }
    }
    Corpus {
        deliveries: out,
        wellformed,
    }
}

fn cairn_doc_examples() -> Vec<Value> {
    seed_cases::cairn_doc_examples().unwrap_or_else(|e| panic!("{e}"))
}

/// Malformed values every param is tried with.
fn malformed_values() -> Vec<Value> {
    vec![
        json!("alice"),
        Value::Null,
        json!(42),
        json!({"alice": "alice", "Codertocat": 1}),
        json!([1, null, "Codertocat", {"author": "reviewer-b"}]),
        json!([]),
    ]
}

/// Each rule alone, with the seed's params and with every param it reads replaced by each
/// malformed value, over the whole corpus: no fault anywhere.
fn assert_no_rule_faults(hw: &HandWritten, corpus: &Corpus) {
    let grant = &hw.seed.grant;
    let envelopes: Vec<_> = corpus
        .deliveries
        .iter()
        .map(|d| (d, build_envelope(d, &ctx(grant, true))))
        .collect();
    let mut failures = Vec::new();
    for rule in &hw.config.rules {
        let id = rule.id.clone().unwrap_or_default();
        let read: Vec<&String> = hw
            .config
            .params
            .keys()
            .filter(|k| rule.when.contains(&format!("$params.{k}")))
            .collect();
        let mut variants: Vec<(String, Map<String, Value>)> =
            vec![("the cases' params".into(), Map::new())];
        for key in &read {
            for bad in malformed_values() {
                let mut m = Map::new();
                m.insert((*key).clone(), bad.clone());
                variants.push((format!("{key} = {bad}"), m));
            }
        }
        for (what, changes) in variants {
            let mut one = with_params(&hw.config, Some(&changes));
            one.rules = vec![rule.clone()];
            one.default_action = None;
            let compiled = compile(&one);
            // The seed's params meet every shape; a malformed param meets the real
            // payloads, the documented examples and the cases, which reach every path of
            // every rule.
            let shapes = if changes.is_empty() {
                &envelopes[..]
            } else {
                &envelopes[..corpus.wellformed]
            };
            for (d, env) in shapes {
                let got = compiled.evaluate(&ctx(grant, true), env);
                if is_fault(&got) {
                    failures.push(format!(
                        "{id} faults ({}) with {what} on {} {} ({})",
                        got.reason, d.source, d.kind, d.event_id
                    ));
                }
            }
        }
    }
    failures.truncate(40);
    assert!(
        failures.is_empty(),
        "{}: rules fault:\n  {}",
        hw.path,
        failures.join("\n  ")
    );
}

fn is_queue_name(q: &str) -> bool {
    !q.is_empty()
        && q.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// What the hand-written configuration must be: valid against the grant its cases document
/// (with and without the trusted-actors capability), hand-written ids (no `--`), lower-case
/// queue names, each granted queue used, and the cases' params.
fn assert_well_formed(hw: &HandWritten) {
    let seed = &hw.seed;
    for capability in [true, false] {
        let v = validate(&hw.text, &ctx(&seed.grant, capability));
        assert!(
            v.valid,
            "{} does not validate (capability {capability}): {:?}",
            hw.path, v.problems
        );
    }
    assert!(
        seed.grant.iter().all(|q| is_queue_name(q)),
        "{}: queue names are lower-case [a-z0-9-]: {:?}",
        hw.path,
        seed.grant
    );
    let mut used = BTreeSet::new();
    for rule in &hw.config.rules {
        let id = rule.id.as_deref().unwrap_or_default();
        assert!(
            !id.contains("--"),
            "{}: {id} is a pack-style id; seeds are hand-written",
            hw.path
        );
        assert!(
            rule.description.as_deref().is_some_and(|d| !d.is_empty()),
            "{}: {id} says what it is for",
            hw.path
        );
        if let Action::Queue(q) = &rule.action {
            used.insert(q.clone());
        }
    }
    if let Some(Action::Queue(q)) = &hw.config.default_action {
        used.insert(q.clone());
    }
    assert_eq!(
        hw.config.params, seed.params,
        "{}: the params are the cases' params",
        hw.path
    );
    for q in &seed.grant {
        assert!(
            used.contains(q) || seed.grant.first() == Some(q),
            "{}: the grant lists {q}, which nothing routes to",
            hw.path
        );
    }
}

fn string_list(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
}

fn string_map(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.values().all(Value::is_string))
}

#[test]
fn fleet_is_27_rules_with_typed_params() {
    let hw = fleet();
    assert_well_formed(&hw);
    let c = &hw.config;
    assert_eq!(c.rules.len(), 27, "the fleet has exactly 27 rules");
    assert_eq!(
        c.default_action,
        Some(Action::Drop),
        "the fleet drops what no rule routes"
    );
    let p = &c.params;
    assert!(p["require_verified"].is_boolean());
    for key in [
        "trusted_humans",
        "trusted_agents",
        "cairn_actors",
        "hold_labels",
    ] {
        assert!(string_list(&p[key]), "{key} is a list of strings");
    }
    for key in ["repo_prefixes", "lane_queues"] {
        assert!(string_map(&p[key]), "{key} maps names to strings");
    }
    // Every lane's queue is granted and has rules that route to it.
    for (lane, q) in p["lane_queues"].as_object().expect("object") {
        let q = q.as_str().expect("string");
        assert!(
            hw.seed.grant.iter().any(|g| g == q),
            "lane {lane}: {q} is not granted"
        );
    }
    for lane in p["repo_prefixes"].as_object().expect("object").values() {
        assert!(
            p["lane_queues"]
                .get(lane.as_str().expect("string"))
                .is_some(),
            "repo_prefixes names lane {lane}, which lane_queues does not map"
        );
    }
    // Every param is read by some rule.
    for key in p.keys() {
        assert!(
            c.rules
                .iter()
                .any(|r| r.when.contains(&format!("$params.{key}"))),
            "no fleet rule reads $params.{key}"
        );
    }
}

#[test]
fn fleet_routes_every_case() {
    let hw = fleet();
    assert!(hw.seed.cases.len() >= 80, "at least 80 fleet cases");
    let forges: BTreeSet<&str> = hw.seed.cases.iter().map(|c| c.source.as_str()).collect();
    for source in ["github", "gitea", "forgejo", "cairn"] {
        assert!(forges.contains(source), "no fleet case from {source}");
    }
    route_cases(&hw);
}

/// A delivery to route, its name, and the params it overrides.
type Named = (String, StoredDelivery, Option<Map<String, Value>>);

/// trusted-actors@1 and handoff-lanes@1 install the fleet's rules in another order: the
/// four trusted-actor rules first, then the lane rules. The adoption of REQ-6 replays with
/// `changed: 0` only if that order decides alike, on the cases and on every other shape.
#[test]
fn fleet_in_pack_order_decides_alike() {
    let hw = fleet();
    let seed = &hw.seed;
    let mut reordered = hw.config.clone();
    let (ta, hl): (Vec<_>, Vec<_>) = hw
        .config
        .rules
        .iter()
        .cloned()
        .enumerate()
        .partition(|(i, _)| FLEET_TRUSTED_ACTOR_RULES.contains(&(i + 1)));
    reordered.rules = ta.into_iter().chain(hl).map(|(_, r)| r).collect();
    assert_ne!(reordered.rules, hw.config.rules);

    let mut deliveries: Vec<Named> = seed
        .cases
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.clone(), delivery(seed, i), c.params_override.clone()))
        .collect();
    for d in corpus().deliveries {
        deliveries.push((d.event_id.clone(), d, None));
    }
    let grant = &seed.grant;
    let (a, b) = (compile(&hw.config), compile(&reordered));
    let mut differ = Vec::new();
    for (name, d, changes) in &deliveries {
        let env = build_envelope(d, &ctx(grant, true));
        let (x, y) = match changes {
            None => (
                a.evaluate(&ctx(grant, true), &env),
                b.evaluate(&ctx(grant, true), &env),
            ),
            Some(m) => (
                compile(&with_params(&hw.config, Some(m))).evaluate(&ctx(grant, true), &env),
                compile(&with_params(&reordered, Some(m))).evaluate(&ctx(grant, true), &env),
            ),
        };
        if x.label().to_string() != y.label().to_string() {
            differ.push(format!("{name}: {} vs {}", describe(&x), describe(&y)));
        }
    }
    assert!(
        differ.is_empty(),
        "pack order decides differently:\n  {}",
        differ.join("\n  ")
    );
}

fn assert_corpus_is_broad(corpus: &Corpus) {
    assert!(
        corpus.deliveries.len() > 1000 && corpus.wellformed > 300,
        "a corpus of {} deliveries",
        corpus.deliveries.len()
    );
}

#[test]
fn no_fleet_rule_faults_on_any_shape_or_malformed_param() {
    let corpus = corpus();
    assert_corpus_is_broad(&corpus);
    assert_no_rule_faults(&fleet(), &corpus);
}

/// A malformed allowlist admits no one, whatever else is right (trusted-actors@1).
#[test]
fn fleet_malformed_allowlists_admit_no_one() {
    let hw = fleet();
    let seed = &hw.seed;
    let issue = seed
        .position("gh-issue-opened-lane-by-prefix")
        .unwrap_or_else(|e| panic!("{e}"));
    let handoff = seed
        .position("handoff-explicit-lane-router")
        .unwrap_or_else(|e| panic!("{e}"));
    for (list, at, rule) in [
        ("trusted_humans", issue, "issue-untrusted-author"),
        ("cairn_actors", handoff, "cairn-untrusted-actor"),
    ] {
        let d = delivery(seed, at);
        let env = build_envelope(&d, &ctx(&seed.grant, true));
        let good = compile(&hw.config).evaluate(&ctx(&seed.grant, true), &env);
        assert!(
            good.label().to_string().starts_with("queue:"),
            "{list}: {}",
            describe(&good)
        );
        let login = match list {
            "trusted_humans" => "Codertocat",
            _ => "cairn-planner",
        };
        for bad in [
            json!(login),
            Value::Null,
            json!(7),
            json!({ login: login }),
            json!([login, 7]),
            json!([[login]]),
            json!(format!("[\"{login}\"]")),
        ] {
            let mut m = Map::new();
            m.insert(list.into(), bad.clone());
            let got =
                compile(&with_params(&hw.config, Some(&m))).evaluate(&ctx(&seed.grant, true), &env);
            assert_eq!(
                (got.label().to_string().as_str(), got.rule_id.as_str()),
                ("drop", rule),
                "{list} = {bad}: {}",
                describe(&got)
            );
        }
    }
}

/// The Cairn hand-off examples are the documented shape.
#[test]
fn cairn_doc_examples_have_the_documented_shape() {
    let examples = cairn_doc_examples();
    assert!(
        (3..=6).contains(&examples.len()),
        "{CAIRN_DOC} has {} examples",
        examples.len()
    );
    for (i, e) in examples.iter().enumerate() {
        let o = e.as_object().expect("an object");
        assert_eq!(
            o.keys().collect::<Vec<_>>(),
            ["actor", "handoff"],
            "example {i}"
        );
        let h = e["handoff"].as_object().expect("handoff is an object");
        for key in ["id", "from", "to", "repo", "title"] {
            assert!(h[key].is_string(), "example {i}: handoff.{key}");
        }
        for key in h.keys() {
            assert!(
                ["id", "from", "to", "repo", "title", "lane"].contains(&key.as_str()),
                "example {i}: handoff.{key} is not in the shape"
            );
        }
        if let Some(lane) = h.get("lane") {
            assert!(lane.is_string(), "example {i}: lane");
        }
        assert!(e["actor"]["login"].is_string(), "example {i}");
        assert!(
            ["human", "agent", "bot"].contains(&e["actor"]["kind"].as_str().unwrap_or("")),
            "example {i}: actor.kind"
        );
        assert_eq!(e["actor"].as_object().expect("object").len(), 2);
        assert_eq!(
            kind_of("handoff", &serde_json::to_vec(e).expect("JSON")),
            "handoff"
        );
    }
}
