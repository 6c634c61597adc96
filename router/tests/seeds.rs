//! The hand-written seed configurations of issue 5, `docs/routing/rule-packs/fleet.json` and
//! `docs/routing/rule-packs/pool-review.json`, routed in-process over their cases in
//! `router/tests/data/routing/<seed>/cases.json` (see the README there).
//!
//! Each case is a delivery built from a real forge payload in `shared/data/webhooks/` (with
//! the few edits the case needs) or an inline Cairn hand-off, and the decision the seed must
//! reach. Besides the decisions, this file checks that the seeds validate against the grant
//! their cases file documents, that every rule decides at least one case and the default is
//! reached, that no rule faults on any delivery shape or malformed param, and that the fleet
//! seed decides the same when its trusted-actor rules are moved in front of its lane rules
//! (the order trusted-actors@1 and handoff-lanes@1 install them in, SPEC-0031 REQ-6).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use switchboard_proto::router::v1::{Decision, Header, Outcome, RoutingContext, StoredDelivery};
use switchboard_router::engine::decision;
use switchboard_router::engine::validate::validate;
use switchboard_router::engine::{CompiledConfiguration, Configuration, build_envelope};

/// The repository root (`/work/main`).
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// The shared data set: `/work/main/router/../../shared/data/webhooks`.
const WEBHOOKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/webhooks");
/// The cases: `router/tests/data/routing/<seed>/cases.json`.
const CASES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/routing");
/// The Cairn hand-off delivery shape, with examples.
const CAIRN_DOC: &str = "docs/routing/cairn-handoffs.md";

/// 2026-11-29T23:59:10.123Z
const RECEIVED_AT_MS: i64 = 1_795_996_750_123;
/// Any 64 hex digits: signature headers never reach a rule, `verified` is the case's own.
const SIGNATURE_HEX: &str = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

/// Fleet rules 1, 3, 17 and 18 (1-based) do what trusted-actors@1 does; the rest are
/// handoff-lanes@1's.
const FLEET_TRUSTED_ACTOR_RULES: [usize; 4] = [1, 3, 17, 18];

/// A cases file: what it tests, the grant the seed is validated and routed with, the cases.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    about: Vec<String>,
    configuration: String,
    grant: Vec<String>,
    cases: Vec<Value>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    note: Option<String>,
    source: String,
    /// The event header's value (`X-GitHub-Event`, `X-Gitea-Event`, `X-Forgejo-Event`,
    /// `X-Switchboard-Event`).
    event: String,
    /// Extra headers, or replacements for the source's usual ones (names case-insensitive).
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// A payload relative to the shared webhooks folder, e.g. `github/issues.opened.json`.
    #[serde(default)]
    body_file: Option<String>,
    /// An inline body (Cairn hand-offs), sent as its JSON text.
    #[serde(default)]
    body: Option<Value>,
    /// Changes to the real payload: each path must already exist in it.
    #[serde(default)]
    edits: Vec<Edit>,
    verified: bool,
    /// Params replaced (key by key) for this case only.
    #[serde(default)]
    params_override: Option<Map<String, Value>>,
    /// `queue:<name>`, `drop` or `default`.
    want: String,
    /// The rule expected to decide, or null when the default decides.
    rule: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Edit {
    path: Vec<Value>,
    value: Value,
}

/// A seed with its cases, loaded and checked for form.
struct Seed {
    name: &'static str,
    text: String,
    config: Configuration,
    grant: Vec<String>,
    cases: Vec<Case>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn load(name: &'static str) -> Seed {
    let cases_path = format!("{CASES}/{name}/cases.json");
    let file: CaseFile = serde_json::from_str(&read(&cases_path))
        .unwrap_or_else(|e| panic!("{cases_path} is not a cases file: {e}"));
    assert!(
        !file.about.is_empty(),
        "{cases_path}: say what the cases are"
    );
    assert_eq!(
        file.configuration,
        format!("docs/routing/rule-packs/{name}.json"),
        "{cases_path}"
    );
    let text = read(&format!("{ROOT}/{}", file.configuration));
    let config =
        Configuration::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", file.configuration));
    let mut names = BTreeSet::new();
    let cases: Vec<Case> = file
        .cases
        .into_iter()
        .enumerate()
        .map(|(i, raw)| {
            let label = raw["name"].as_str().unwrap_or("?").to_string();
            assert!(
                raw.get("rule").is_some(),
                "{name} case {i} ({label}): name the deciding rule, or null for the default"
            );
            serde_json::from_value(raw)
                .unwrap_or_else(|e| panic!("{name} case {i} ({label}) is malformed: {e}"))
        })
        .collect();
    for case in &cases {
        let n = &case.name;
        assert!(names.insert(n.clone()), "{name}: two cases are named {n}");
        assert!(
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{name}: case names are lower-case words joined by dashes: {n}"
        );
        assert!(
            case.body_file.is_some() != case.body.is_some(),
            "{name}/{n}: exactly one of body_file and body"
        );
        assert!(
            case.edits.is_empty() || case.body_file.is_some(),
            "{name}/{n}: edits apply to a real payload (body_file)"
        );
        let want_ok = match case.want.strip_prefix("queue:") {
            Some(q) => file.grant.iter().any(|g| g == q),
            None => case.want == "drop" || case.want == "default",
        };
        assert!(
            want_ok,
            "{name}/{n}: want is queue:<a granted queue>, drop or default, not {}",
            case.want
        );
        if let Some(rule) = &case.rule {
            assert!(
                config.rules.iter().any(|r| r.id.as_deref() == Some(rule)),
                "{name}/{n}: there is no rule {rule}"
            );
        }
        if let Some(note) = &case.note {
            assert!(!note.is_empty(), "{name}/{n}: an empty note");
        }
    }
    Seed {
        name,
        text,
        config,
        grant: file.grant,
        cases,
    }
}

fn ctx(grant: &[String], capability: bool) -> RoutingContext {
    RoutingContext {
        grant: grant.to_vec(),
        trusted_actors_capability: capability,
        trusted_actors: None,
    }
}

fn header(name: &str, value: &str) -> Header {
    Header {
        name: name.to_string(),
        value: value.to_string(),
    }
}

/// A name as ingest keeps it in a kind: letters, digits, `_` and `-`; anything else `_`.
fn clean_name(raw: &str) -> String {
    raw.trim()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `<event>` or `<event>.<action>`, as ingest computes it: the body's top-level `action`
/// counts when the body is a JSON object and `action` is a string.
fn kind_of(event: &str, body: &[u8]) -> String {
    let event = clean_name(event);
    let action = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("action").and_then(Value::as_str).map(clean_name))
        .filter(|a| !a.is_empty());
    match action {
        Some(a) => format!("{event}.{a}"),
        None => event,
    }
}

/// Gitea's and Forgejo's fine-grained event type for a kind (headers.md, "Event header
/// mapping").
fn gitea_event_type(kind: &str, payload: &Value) -> String {
    let (event, action) = kind.split_once('.').unwrap_or((kind, ""));
    let fine = match (event, action) {
        ("issues", "assigned" | "unassigned") => "issue_assign",
        ("issues", "label_updated" | "label_cleared") => "issue_label",
        ("issues", "milestoned" | "demilestoned") => "issue_milestone",
        ("pull_request", "assigned" | "unassigned") => "pull_request_assign",
        ("pull_request", "label_updated" | "label_cleared") => "pull_request_label",
        ("pull_request", "milestoned" | "demilestoned") => "pull_request_milestone",
        ("pull_request", "synchronized") => "pull_request_sync",
        ("pull_request", "review_requested" | "review_request_removed") => {
            "pull_request_review_request"
        }
        ("issue_comment", _) if payload["is_pull"] == true => "pull_request_comment",
        ("pull_request_approved", _) => "pull_request_review_approved",
        ("pull_request_rejected", _) => "pull_request_review_rejected",
        ("pull_request_comment", _) => "pull_request_review_comment",
        _ => event,
    };
    fine.to_string()
}

/// The headers each source sends (shared/data/webhooks/headers.md, docs/routing/cairn-handoffs.md).
fn source_headers(source: &str, event: &str, kind: &str, payload: &Value, id: &str) -> Vec<Header> {
    let sha256 = format!("sha256={SIGNATURE_HEX}");
    let mut h = vec![header("Content-Type", "application/json")];
    match source {
        "github" => h.extend([
            header("User-Agent", "GitHub-Hookshot/044aadd"),
            header("X-GitHub-Event", event),
            header("X-GitHub-Delivery", id),
            header("X-GitHub-Hook-ID", "292430182"),
            header("X-Hub-Signature-256", &sha256),
        ]),
        "gitea" | "forgejo" => {
            let fine = gitea_event_type(kind, payload);
            h.extend([
                header("X-Gitea-Delivery", id),
                header("X-GitHub-Delivery", id),
                header("X-Gitea-Event", event),
                header("X-GitHub-Event", event),
                header("X-Gitea-Event-Type", &fine),
                header("X-GitHub-Event-Type", &fine),
                header("X-Gitea-Signature", SIGNATURE_HEX),
                header("X-Hub-Signature-256", &sha256),
            ]);
            if source == "forgejo" {
                h.extend([
                    header("X-Forgejo-Delivery", id),
                    header("X-Forgejo-Event", event),
                    header("X-Forgejo-Event-Type", &fine),
                    header("X-Forgejo-Signature", SIGNATURE_HEX),
                ]);
            }
        }
        "cairn" | "generic" => h.extend([
            header("User-Agent", "Cairn-Handoff/2.3"),
            header("X-Switchboard-Event", event),
            header("X-Switchboard-Delivery", id),
            header("X-Hub-Signature-256", &sha256),
        ]),
        other => panic!("no headers for source {other}"),
    }
    h
}

/// Sets `value` at `path` inside `doc`; the path must already exist.
fn apply_edit(doc: &mut Value, edit: &Edit) -> Result<(), String> {
    let mut at = doc;
    for step in &edit.path {
        at = match (step, at) {
            (Value::String(k), Value::Object(m)) => m
                .get_mut(k)
                .ok_or_else(|| format!("no key {k:?} at {:?}", edit.path))?,
            (Value::Number(n), Value::Array(a)) => {
                let i = n.as_u64().ok_or("an index is a non-negative integer")? as usize;
                a.get_mut(i)
                    .ok_or_else(|| format!("no index {i} at {:?}", edit.path))?
            }
            (step, _) => return Err(format!("cannot step {step} in {:?}", edit.path)),
        };
    }
    *at = edit.value.clone();
    Ok(())
}

/// The stored delivery a case describes, as control would store it.
fn delivery(seed: &str, index: usize, case: &Case) -> StoredDelivery {
    let body: Vec<u8> = match (&case.body_file, &case.body) {
        (Some(file), None) => {
            let path = format!("{WEBHOOKS}/{file}");
            let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
            if case.edits.is_empty() {
                raw
            } else {
                let mut doc: Value = serde_json::from_slice(&raw)
                    .unwrap_or_else(|e| panic!("{seed}/{}: {file} is not JSON: {e}", case.name));
                for edit in &case.edits {
                    apply_edit(&mut doc, edit)
                        .unwrap_or_else(|e| panic!("{seed}/{}: {file}: {e}", case.name));
                }
                serde_json::to_vec_pretty(&doc).expect("JSON")
            }
        }
        (None, Some(inline)) => serde_json::to_vec(inline).expect("JSON"),
        _ => unreachable!("checked at load"),
    };
    let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let kind = kind_of(&case.event, &body);
    let id = format!("5eed{index:04x}-0000-4000-8000-000000000000");
    let mut headers = source_headers(&case.source, &case.event, &kind, &payload, &id);
    for (name, value) in &case.headers {
        headers.retain(|h| !h.name.eq_ignore_ascii_case(name));
        headers.push(header(name, value));
    }
    StoredDelivery {
        event_id: format!("evt-{seed}-{index}"),
        source: case.source.clone(),
        kind,
        headers,
        body: body.into(),
        verified: case.verified,
        delivery_id: id,
        received_at_ms: RECEIVED_AT_MS,
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
        format!("{} by {by}", decision::label(d))
    }
}

/// Routes every case of a seed with and without the trusted-actors capability (the seeds
/// never read `.actor`, so both must agree) and checks want, the deciding rule, faults and
/// coverage. Returns the decisions by case name.
fn route_cases(seed: &Seed) -> BTreeMap<String, Decision> {
    let base = compile(&seed.config);
    let mut failures = Vec::new();
    let mut decided: BTreeMap<String, usize> = BTreeMap::new();
    let mut defaults = 0;
    let mut out = BTreeMap::new();
    for (i, case) in seed.cases.iter().enumerate() {
        let d = delivery(seed.name, i, case);
        let compiled;
        let config = match &case.params_override {
            Some(changes) => {
                compiled = compile(&with_params(&seed.config, Some(changes)));
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
        let label = decision::label(&got);
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
    for rule in &seed.config.rules {
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

/// Every JSON payload of the shared data set, as `<forge>/<file>`.
fn real_payload_files() -> Vec<String> {
    let mut files = Vec::new();
    for forge in ["github", "gitea", "forgejo"] {
        let dir = format!("{WEBHOOKS}/{forge}");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        files.extend(names.into_iter().map(|n| format!("{forge}/{n}")));
    }
    assert_eq!(files.len(), 77, "the data set has 77 payloads");
    files
}

/// The JSON examples of the Cairn hand-off document (fenced ```json blocks).
fn cairn_doc_examples() -> Vec<Value> {
    let text = read(&format!("{ROOT}/{CAIRN_DOC}"));
    let mut examples = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```json") => block = Some(String::new()),
            (Some(b), "```") => {
                let v: Value = serde_json::from_str(b)
                    .unwrap_or_else(|e| panic!("{CAIRN_DOC}: a json block does not parse: {e}"));
                examples.push(v);
                block = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    examples
}

fn raw_delivery(
    source: &str,
    event: &str,
    body: Vec<u8>,
    verified: bool,
    n: usize,
) -> StoredDelivery {
    let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let kind = kind_of(event, &body);
    let id = format!("c0a5{n:04x}-0000-4000-8000-000000000000");
    StoredDelivery {
        event_id: format!("evt-corpus-{n}"),
        source: source.to_string(),
        headers: source_headers(source, event, &kind, &payload, &id),
        kind,
        body: body.into(),
        verified,
        delivery_id: id,
        received_at_ms: RECEIVED_AT_MS,
    }
}

/// Deliveries of every shape; the first `wellformed` are real payloads, the documented
/// Cairn examples and the cases, the rest hostile bodies.
struct Corpus {
    deliveries: Vec<StoredDelivery>,
    wellformed: usize,
}

/// Every delivery shape a rule must survive: each real payload, verified and not; each
/// Cairn example of the docs; each case of both seeds; and hostile bodies (not JSON, the
/// wrong JSON types where objects, strings and lists belong) under every source and many
/// events.
fn corpus() -> Corpus {
    let mut out = Vec::new();
    for file in real_payload_files() {
        let (forge, name) = file.split_once('/').expect("forge/name");
        let event = name.split('.').next().expect("event");
        let body = std::fs::read(format!("{WEBHOOKS}/{file}")).expect("payload");
        for verified in [true, false] {
            let n = out.len();
            out.push(raw_delivery(forge, event, body.clone(), verified, n));
        }
    }
    for example in cairn_doc_examples() {
        let n = out.len();
        out.push(raw_delivery(
            "cairn",
            "handoff",
            serde_json::to_vec(&example).expect("JSON"),
            true,
            n,
        ));
    }
    for seed in ["fleet", "pool-review"] {
        let s = load(seed);
        for (i, case) in s.cases.iter().enumerate() {
            out.push(delivery(seed, i, case));
        }
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
            let n = out.len();
            out.push(raw_delivery(source, event, body.clone(), true, n));
        }
    }
    Corpus {
        deliveries: out,
        wellformed,
    }
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
fn assert_no_rule_faults(seed: &Seed, corpus: &Corpus) {
    let grant = &seed.grant;
    let envelopes: Vec<_> = corpus
        .deliveries
        .iter()
        .map(|d| (d, build_envelope(d, &ctx(grant, true))))
        .collect();
    let mut failures = Vec::new();
    for rule in &seed.config.rules {
        let id = rule.id.clone().unwrap_or_default();
        let read: Vec<&String> = seed
            .config
            .params
            .keys()
            .filter(|k| rule.when.contains(&format!("$params.{k}")))
            .collect();
        let mut variants: Vec<(String, Map<String, Value>)> =
            vec![("seed params".into(), Map::new())];
        for key in &read {
            for bad in malformed_values() {
                let mut m = Map::new();
                m.insert((*key).clone(), bad.clone());
                variants.push((format!("{key} = {bad}"), m));
            }
        }
        for (what, changes) in variants {
            let mut one = with_params(&seed.config, Some(&changes));
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
        seed.name,
        failures.join("\n  ")
    );
}

fn is_queue_name(q: &str) -> bool {
    !q.is_empty()
        && q.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// What every seed must be: valid against its documented grant (with and without the
/// trusted-actors capability), hand-written ids (no `--`), lower-case queue names, and each
/// granted queue used.
fn assert_well_formed(seed: &Seed) {
    for capability in [true, false] {
        let v = validate(&seed.text, &ctx(&seed.grant, capability));
        assert!(
            v.valid,
            "{} does not validate (capability {capability}): {:?}",
            seed.name, v.problems
        );
    }
    assert!(
        seed.grant.iter().all(|q| is_queue_name(q)),
        "{}: queue names are lower-case [a-z0-9-]: {:?}",
        seed.name,
        seed.grant
    );
    let mut used = BTreeSet::new();
    for rule in &seed.config.rules {
        let id = rule.id.as_deref().unwrap_or_default();
        assert!(
            !id.contains("--"),
            "{}: {id} is a pack-style id; seeds are hand-written",
            seed.name
        );
        assert!(
            rule.description.as_deref().is_some_and(|d| !d.is_empty()),
            "{}: {id} says what it is for",
            seed.name
        );
        if let switchboard_router::engine::Action::Queue(q) = &rule.action {
            used.insert(q.clone());
        }
    }
    if let Some(switchboard_router::engine::Action::Queue(q)) = &seed.config.default_action {
        used.insert(q.clone());
    }
    for q in &seed.grant {
        assert!(
            used.contains(q) || seed.grant.first() == Some(q),
            "{}: the grant lists {q}, which nothing routes to",
            seed.name
        );
    }
}

fn forges_used(seed: &Seed) -> BTreeSet<String> {
    seed.cases.iter().map(|c| c.source.clone()).collect()
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
    let seed = load("fleet");
    assert_well_formed(&seed);
    let c = &seed.config;
    assert_eq!(c.rules.len(), 27, "fleet.json has exactly 27 rules");
    assert_eq!(
        c.default_action,
        Some(switchboard_router::engine::Action::Drop),
        "fleet.json drops what no rule routes"
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
            seed.grant.iter().any(|g| g == q),
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
fn pool_review_is_identity_mode_with_typed_params() {
    let seed = load("pool-review");
    assert_well_formed(&seed);
    let c = &seed.config;
    assert_eq!(
        c.default_action, None,
        "the review pool keeps what no rule drops: the webhook's default queue"
    );
    assert_eq!(
        seed.grant,
        ["review"],
        "the pool routes to one queue, review"
    );
    assert!(
        c.rules
            .iter()
            .all(|r| r.action == switchboard_router::engine::Action::Drop),
        "every pool-review rule drops"
    );
    let p = &c.params;
    assert!(p["identity"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(
        p["pairs"].as_array().is_some_and(|a| !a.is_empty()
            && a.iter()
                .all(|pair| pair.as_object().is_some_and(|o| o.len() == 2
                    && o["author"].is_string()
                    && o["reviewer"].is_string()))),
        "pairs is a list of {{author, reviewer}}"
    );
    assert!(
        string_map(&p["families"]),
        "families maps logins to families"
    );
    assert_eq!(p["require_cross_family"], true);
    assert!(string_list(&p["bot_actors"]));
    assert_eq!(p["drop_deleted"], false);
    assert_eq!(p["keep_ci_success"], true);
    // The pairs obey require_cross_family, as no-self-review's param check demands.
    let families = p["families"].as_object().expect("object");
    for pair in p["pairs"].as_array().expect("list") {
        let (a, r) = (&pair["author"], &pair["reviewer"]);
        let fam = |login: &Value| families.get(login.as_str().expect("string"));
        assert!(
            fam(a).is_none() || fam(a) != fam(r),
            "the pair {a} → {r} is within one family"
        );
    }
    // drop_deleted is read by no rule: deleted deliveries are kept because nothing drops
    // them, and the param is there so installing drop-ci-noise adopts `false`.
    for key in p.keys().filter(|k| *k != "drop_deleted") {
        assert!(
            c.rules
                .iter()
                .any(|r| r.when.contains(&format!("$params.{key}"))),
            "no pool-review rule reads $params.{key}"
        );
    }
}

#[test]
fn fleet_routes_every_case() {
    let seed = load("fleet");
    assert!(seed.cases.len() >= 80, "at least 80 fleet cases");
    let forges = forges_used(&seed);
    for source in ["github", "gitea", "forgejo", "cairn"] {
        assert!(forges.contains(source), "no fleet case from {source}");
    }
    route_cases(&seed);
}

#[test]
fn pool_review_routes_every_case() {
    let seed = load("pool-review");
    assert!(seed.cases.len() >= 60, "at least 60 pool-review cases");
    let forges = forges_used(&seed);
    for source in ["github", "gitea", "forgejo"] {
        assert!(forges.contains(source), "no pool-review case from {source}");
    }
    route_cases(&seed);
}

/// A delivery to route, its name, and the params it overrides.
type Named = (String, StoredDelivery, Option<Map<String, Value>>);

/// trusted-actors@1 and handoff-lanes@1 install the fleet's rules in another order: the
/// four trusted-actor rules first, then the lane rules. The adoption of REQ-6 replays with
/// `changed: 0` only if that order decides alike, on the cases and on every other shape.
#[test]
fn fleet_in_pack_order_decides_alike() {
    let seed = load("fleet");
    let mut reordered = seed.config.clone();
    let (ta, hl): (Vec<_>, Vec<_>) = seed
        .config
        .rules
        .iter()
        .cloned()
        .enumerate()
        .partition(|(i, _)| FLEET_TRUSTED_ACTOR_RULES.contains(&(i + 1)));
    reordered.rules = ta.into_iter().chain(hl).map(|(_, r)| r).collect();
    assert_ne!(reordered.rules, seed.config.rules);

    let mut deliveries: Vec<Named> = seed
        .cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                c.name.clone(),
                delivery("fleet", i, c),
                c.params_override.clone(),
            )
        })
        .collect();
    for d in corpus().deliveries {
        deliveries.push((d.event_id.clone(), d, None));
    }
    let grant = &seed.grant;
    let (a, b) = (compile(&seed.config), compile(&reordered));
    let mut differ = Vec::new();
    for (name, d, changes) in &deliveries {
        let env = build_envelope(d, &ctx(grant, true));
        let (x, y) = match changes {
            None => (
                a.evaluate(&ctx(grant, true), &env),
                b.evaluate(&ctx(grant, true), &env),
            ),
            Some(m) => (
                compile(&with_params(&seed.config, Some(m))).evaluate(&ctx(grant, true), &env),
                compile(&with_params(&reordered, Some(m))).evaluate(&ctx(grant, true), &env),
            ),
        };
        if decision::label(&x) != decision::label(&y) {
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
    assert_no_rule_faults(&load("fleet"), &corpus);
}

#[test]
fn no_pool_review_rule_faults_on_any_shape_or_malformed_param() {
    let corpus = corpus();
    assert_corpus_is_broad(&corpus);
    assert_no_rule_faults(&load("pool-review"), &corpus);
}

/// A malformed allowlist admits no one, whatever else is right (trusted-actors@1).
#[test]
fn fleet_malformed_allowlists_admit_no_one() {
    let seed = load("fleet");
    let issue = seed
        .cases
        .iter()
        .position(|c| c.name == "gh-issue-opened-lane-by-prefix")
        .expect("the case exists");
    let handoff = seed
        .cases
        .iter()
        .position(|c| c.name == "handoff-explicit-lane-router")
        .expect("the case exists");
    for (list, at, rule) in [
        ("trusted_humans", issue, "issue-untrusted-author"),
        ("cairn_actors", handoff, "cairn-untrusted-actor"),
    ] {
        let d = delivery("fleet", at, &seed.cases[at]);
        let env = build_envelope(&d, &ctx(&seed.grant, true));
        let good = compile(&seed.config).evaluate(&ctx(&seed.grant, true), &env);
        assert!(
            decision::label(&good).starts_with("queue:"),
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
            let got = compile(&with_params(&seed.config, Some(&m)))
                .evaluate(&ctx(&seed.grant, true), &env);
            assert_eq!(
                (decision::label(&got).as_str(), got.rule_id.as_str()),
                ("drop", rule),
                "{list} = {bad}: {}",
                describe(&got)
            );
        }
    }
}

/// Before packs there were no install-time param checks, so pool-review refuses a
/// same-family pair when it evaluates: with require_cross_family, a pair whose author and
/// reviewer map to one family does not count (no-self-review@1 refuses such params at
/// install instead, so no case uses them).
#[test]
fn pool_review_ignores_same_family_pairs() {
    let seed = load("pool-review");
    let at = seed
        .cases
        .iter()
        .position(|c| c.name == "gh-pr-opened-by-paired-author-kept")
        .expect("the case exists");
    let d = delivery("pool-review", at, &seed.cases[at]);
    let env = build_envelope(&d, &ctx(&seed.grant, true));
    let decide = |changes: Value| {
        let m = changes.as_object().expect("object").clone();
        compile(&with_params(&seed.config, Some(&m))).evaluate(&ctx(&seed.grant, true), &env)
    };
    let same_family = json!({"families": {"Codertocat": "gpt", "reviewer-b": "gpt"}});
    let got = decide(same_family.clone());
    assert_eq!(
        (decision::label(&got).as_str(), got.rule_id.as_str()),
        ("drop", "unpaired-author"),
        "{}",
        describe(&got)
    );
    let mut relaxed = same_family;
    relaxed["require_cross_family"] = json!(false);
    assert_eq!(decision::label(&decide(relaxed)), "default");
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
