//! The rules of evaluation (BASE.md "Rules and evaluation", SPEC-0020 and SPEC-0026), one
//! test per rule, run in-process over envelopes built from real webhook payloads.

use jaq_json::Val;
use serde_json::{Value, json};
use switchboard_proto::router::v1::{
    Decision, Header, Outcome, RoutingContext, StoredDelivery, TrustedActors,
};
use switchboard_router::engine::decision::{self, fault};
use switchboard_router::engine::{CompiledConfiguration, Configuration, build_envelope};

use switchboard_testkit::forge_headers::form_body;
use switchboard_testkit::payloads_dir::webhooks_dir;

/// 2026-11-29T23:59:10.123Z
const RECEIVED_AT_MS: i64 = 1_795_996_750_123;
const SIGNATURE_HEX: &str = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
const DELIVERY_ID: &str = "72d3162e-cc78-11e3-81ab-4c9367dc0958";

fn read_payload(file: &str) -> Vec<u8> {
    let path = format!("{}/{file}", webhooks_dir().display());
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// `<event>` or `<event>.<action>` from a data file name `<event>[.<action>[.<qualifier>]].json`.
fn kind_of(file: &str) -> String {
    let name = file.rsplit('/').next().unwrap_or(file);
    let stem = name.strip_suffix(".json").unwrap_or(name);
    stem.split('.').take(2).collect::<Vec<_>>().join(".")
}

fn header(name: &str, value: &str) -> Header {
    Header {
        name: name.to_string(),
        value: value.to_string(),
    }
}

/// The headers each forge sends with a delivery (testkit/data/webhooks/headers.md), in the
/// forge's own casing, signatures and an `Authorization` header included.
fn forge_headers(forge: &str, event: &str) -> Vec<Header> {
    let sha256 = format!("sha256={SIGNATURE_HEX}");
    let sha1 = "sha1=0123456789abcdef0123456789abcdef01234567";
    let mut h = vec![header("Content-Type", "application/json")];
    match forge {
        "github" => h.extend([
            header("User-Agent", "GitHub-Hookshot/044aadd"),
            header("X-GitHub-Event", event),
            header("X-GitHub-Delivery", DELIVERY_ID),
            header("X-GitHub-Hook-ID", "292430182"),
            header("X-GitHub-Hook-Installation-Target-Type", "repository"),
            header("X-GitHub-Hook-Installation-Target-ID", "79929171"),
            header("X-Hub-Signature", sha1),
            header("X-Hub-Signature-256", &sha256),
        ]),
        "gitea" | "forgejo" => {
            h.extend([
                header("X-Gitea-Delivery", DELIVERY_ID),
                header("X-Gogs-Delivery", DELIVERY_ID),
                header("X-GitHub-Delivery", DELIVERY_ID),
                header("X-Gitea-Event", event),
                header("X-Gogs-Event", event),
                header("X-GitHub-Event", event),
                header("X-Gitea-Event-Type", event),
                header("X-Gogs-Event-Type", event),
                header("X-GitHub-Event-Type", event),
                header("X-Gitea-Signature", SIGNATURE_HEX),
                header("X-Gogs-Signature", SIGNATURE_HEX),
                header("X-Hub-Signature-256", &sha256),
                header("X-Hub-Signature", sha1),
                header("Authorization", "Bearer hunter2-webhook-credential"),
            ]);
            if forge == "forgejo" {
                h.extend([
                    header("X-Forgejo-Delivery", DELIVERY_ID),
                    header("X-Forgejo-Event", event),
                    header("X-Forgejo-Event-Type", event),
                    header("X-Forgejo-Signature", SIGNATURE_HEX),
                ]);
            }
        }
        other => panic!("no headers for {other}"),
    }
    h
}

/// A verified delivery of the data file `<forge>/<file>`, as control would store it.
fn delivery(file: &str) -> StoredDelivery {
    let forge = file.split('/').next().unwrap_or_default();
    let kind = kind_of(file);
    let event = kind.split('.').next().unwrap_or_default().to_string();
    StoredDelivery {
        event_id: format!("evt-{kind}"),
        source: forge.to_string(),
        kind,
        headers: forge_headers(forge, &event),
        body: read_payload(file).into(),
        verified: true,
        delivery_id: DELIVERY_ID.to_string(),
        received_at_ms: RECEIVED_AT_MS,
    }
}

/// Grant `forge` (the default queue) and `triage`, with the trusted-actors capability.
fn ctx() -> RoutingContext {
    RoutingContext {
        grant: vec!["forge".into(), "triage".into()],
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

fn envelope(file: &str) -> Val {
    build_envelope(&delivery(file), &ctx())
}

/// The envelope as serde JSON, through jaq's own JSON writer.
fn as_json(v: &Val) -> Value {
    let text = v.to_string();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("envelope is not JSON ({e}): {text}"))
}

fn compile(config: &Value) -> CompiledConfiguration {
    let parsed = Configuration::from_json(&config.to_string()).expect("configuration parses");
    CompiledConfiguration::compile(&parsed).expect("configuration compiles")
}

fn rule(id: &str, when: &str, action: Value) -> Value {
    json!({"id": id, "when": when, "action": action})
}

/// One rule `r` routing to `forge`, no default_action, evaluated over `env`.
fn decide(when: &str, env: &Val) -> Decision {
    compile(&json!({"rules": [rule("r", when, json!({"queue": "forge"}))]})).evaluate(&ctx(), env)
}

fn queued(queue: &str, rule_id: &str) -> Decision {
    Decision {
        outcome: Outcome::Queue as i32,
        queue: queue.into(),
        rule_id: rule_id.into(),
        ..Default::default()
    }
}

fn default_queue(queue: &str) -> Decision {
    Decision {
        outcome: Outcome::Default as i32,
        queue: queue.into(),
        ..Default::default()
    }
}

fn by_default(outcome: Outcome, queue: &str) -> Decision {
    Decision {
        outcome: outcome as i32,
        queue: queue.into(),
        by_default_action: true,
        ..Default::default()
    }
}

#[track_caller]
fn assert_fault(d: &Decision, rule_id: &str, code: &str) {
    assert_eq!(
        d.outcome,
        Outcome::Fault as i32,
        "expected a fault, got {d:?}"
    );
    assert_eq!(d.rule_id, rule_id, "{d:?}");
    assert_eq!(d.fault_code, code, "{d:?}");
    assert!(!d.reason.is_empty(), "a fault carries a reason: {d:?}");
    assert_eq!(d.label().to_string(), "fault");
}

const PR_OPENED: &str = "github/pull_request.opened.json";

#[test]
fn first_output_true_matches() {
    let env = envelope(PR_OPENED);
    for when in [
        "true",
        ".kind == \"pull_request.opened\"",
        ".verified",
        ".payload.pull_request.labels | any(.name == \"bug\")",
        ".payload.sender.login | ascii_downcase | startswith(\"codertocat\")",
        "try error(\"x\") catch true",
        "if .payload.pull_request.draft then false else true end",
    ] {
        let d = decide(when, &env);
        assert_eq!(d, queued("forge", "r"), "{when}");
        assert_eq!(d.label().to_string(), "queue:forge");
    }
}

#[test]
fn false_null_and_empty_do_not_match() {
    let env = envelope(PR_OPENED);
    for when in [
        "false",
        "null",
        "empty",
        "select(false)",
        ".payload.no_such_field",
        ".payload.pull_request.labels[] | select(.name == \"nope\")",
        ".payload.pull_request.draft",
        "try error(\"x\")",
        "first(empty)",
    ] {
        assert_eq!(decide(when, &env), default_queue("forge"), "{when}");
    }
}

#[test]
fn any_other_first_output_faults() {
    let env = envelope(PR_OPENED);
    for (when, what) in [
        ("1", "a number"),
        ("0", "a number"),
        (".payload.number", "a number"),
        ("\"true\"", "a string"),
        ("\"\"", "a string"),
        (".payload.action", "a string"),
        ("[]", "an array"),
        ("[true]", "an array"),
        (".payload.pull_request.labels", "an array"),
        ("{}", "an object"),
        (".payload.sender", "an object"),
    ] {
        let d = decide(when, &env);
        assert_fault(&d, "r", fault::RULE_FAULT);
        assert!(d.reason.contains(what), "{when}: {}", d.reason);
    }
}

#[test]
fn an_error_faults() {
    let env = envelope(PR_OPENED);
    for when in [
        "error",
        "error(\"x\")",
        "error(null)",
        "error({})",
        ".payload.sender.login.x",
        ".payload.number | test(\"2\")",
        ".payload.action + 1",
        ".payload.action | startswith(1)",
        "null | .[]",
        ".payload.no_such_field | map(.name) | any(. == \"ci\")",
        "\"x\" | test(\"(\")",
        "\"aa\" | test(\"(a)\\\\1\")",
    ] {
        let d = decide(when, &env);
        assert_fault(&d, "r", fault::RULE_FAULT);
        assert_eq!(d.reason, "the expression raised an error", "{when}");
    }
}

#[test]
fn a_fault_stops_evaluation() {
    let env = envelope(PR_OPENED);
    for faulty in [".payload.number", "error(\"boom\")"] {
        let config = json!({
            "rules": [
                rule("before", "false", json!({"queue": "triage"})),
                rule("faulty", faulty, json!({"queue": "triage"})),
                rule("after", "true", json!({"queue": "forge"})),
            ],
            "default_action": {"drop": true},
        });
        let d = compile(&config).evaluate(&ctx(), &env);
        assert_fault(&d, "faulty", fault::RULE_FAULT);
        assert!(!d.by_default_action);
        assert_eq!(d.queue, "");
    }
}

#[test]
fn first_match_decides() {
    let env = envelope(PR_OPENED);
    let rules = [
        rule("miss", ".event == \"issues\"", json!({"queue": "triage"})),
        rule(
            "opened",
            ".payload.action == \"opened\"",
            json!({"queue": "forge"}),
        ),
        rule(
            "labelled",
            ".payload.pull_request.labels | length > 0",
            json!({"drop": true}),
        ),
    ];
    let d = compile(&json!({"rules": rules})).evaluate(&ctx(), &env);
    assert_eq!(d, queued("forge", "opened"));

    let reordered = [rules[0].clone(), rules[2].clone(), rules[1].clone()];
    let d = compile(&json!({"rules": reordered})).evaluate(&ctx(), &env);
    assert_eq!(
        d,
        Decision {
            outcome: Outcome::Drop as i32,
            rule_id: "labelled".into(),
            ..Default::default()
        }
    );
    assert_eq!(d.label().to_string(), "drop");
}

#[test]
fn no_match_takes_default_action() {
    let env = envelope(PR_OPENED);
    let rules = [rule(
        "miss",
        ".event == \"push\"",
        json!({"queue": "forge"}),
    )];
    for (default_action, expected) in [
        (json!({"drop": true}), by_default(Outcome::Drop, "")),
        (
            json!({"queue": "triage"}),
            by_default(Outcome::Queue, "triage"),
        ),
        (
            json!({"quarantine": true}),
            by_default(Outcome::Quarantine, ""),
        ),
    ] {
        let config = json!({"rules": rules, "default_action": default_action});
        let d = compile(&config).evaluate(&ctx(), &env);
        assert_eq!(d, expected, "{default_action}");
        assert_eq!(d.rule_id, "", "no rule decided");
    }
}

#[test]
fn no_match_without_default_action_is_the_default_queue() {
    let env = envelope(PR_OPENED);
    let config = compile(&json!({"rules": [rule("miss", "false", json!({"queue": "triage"}))]}));
    assert_eq!(config.evaluate(&ctx(), &env), default_queue("forge"));
    // The default queue is the first queue of the grant, whatever it is.
    let reversed = RoutingContext {
        grant: vec!["triage".into(), "forge".into()],
        ..ctx()
    };
    let d = config.evaluate(&reversed, &env);
    assert_eq!(d, default_queue("triage"));
    assert_eq!(d.label().to_string(), "default");
    // A configuration without rules decides `default` too.
    assert_eq!(
        compile(&json!({})).evaluate(&ctx(), &env),
        default_queue("forge")
    );
}

#[test]
fn grant_is_reenforced_at_evaluation() {
    // Compiling does not check the grant: the grant may have shrunk since the save.
    let env = envelope(PR_OPENED);
    let config = json!({"rules": [rule("wide", "true", json!({"queue": "elsewhere"}))]});
    let d = compile(&config).evaluate(&ctx(), &env);
    assert_fault(&d, "wide", fault::NOT_GRANTED);
    assert_eq!(d.queue, "", "a fault routes nowhere by itself");

    let config = json!({"rules": [], "default_action": {"queue": "elsewhere"}});
    let d = compile(&config).evaluate(&ctx(), &env);
    assert_fault(&d, "", fault::NOT_GRANTED);

    // An ungranted action that does not decide does not matter.
    let config = json!({
        "rules": [
            rule("miss", "false", json!({"queue": "elsewhere"})),
            rule("hit", "true", json!({"queue": "triage"})),
        ],
        "default_action": {"queue": "elsewhere"},
    });
    assert_eq!(
        compile(&config).evaluate(&ctx(), &env),
        queued("triage", "hit")
    );
}

#[test]
fn quarantine_needs_the_trusted_actors_capability() {
    let env = envelope(PR_OPENED);
    let by_rule = compile(&json!({"rules": [rule("q", "true", json!({"quarantine": true}))]}));
    assert_eq!(
        by_rule.evaluate(&ctx(), &env),
        Decision {
            outcome: Outcome::Quarantine as i32,
            rule_id: "q".into(),
            ..Default::default()
        }
    );
    assert_fault(
        &by_rule.evaluate(&without_capability(), &env),
        "q",
        fault::CAPABILITY_MISSING,
    );

    let by_default_action = compile(&json!({"default_action": {"quarantine": true}}));
    assert_eq!(
        by_default_action.evaluate(&ctx(), &env),
        by_default(Outcome::Quarantine, "")
    );
    assert_fault(
        &by_default_action.evaluate(&without_capability(), &env),
        "",
        fault::CAPABILITY_MISSING,
    );
}

#[test]
fn only_the_first_output_counts() {
    let env = envelope(PR_OPENED);
    for when in [
        "(true, error(\"x\"))",
        "(true, 1)",
        "(true, false)",
        ".payload.pull_request.labels[] | .name == \"bug\"",
        "any(.payload.action == (\"closed\", \"opened\"); .)",
    ] {
        assert_eq!(decide(when, &env), queued("forge", "r"), "{when}");
    }
    for when in [
        "(false, true)",
        "(null, true)",
        "(empty, false, true)",
        // The classic trap: the first output compares with "closed" only.
        ".payload.action == (\"closed\", \"opened\")",
    ] {
        assert_eq!(decide(when, &env), default_queue("forge"), "{when}");
    }
    for when in [
        "(error(\"x\"), true)",
        "(1, true)",
        "(empty, \"yes\", true)",
    ] {
        assert_fault(&decide(when, &env), "r", fault::RULE_FAULT);
    }
}

#[test]
fn params_are_visible_as_dollar_params() {
    let params = json!({
        "bots": ["dependabot[bot]", "octocoders-linter[bot]"],
        "humans": {"Codertocat": {"team": "core"}},
        "min_number": 2,
    });
    let config = |when: &str| {
        compile(&json!({
            "rules": [rule("r", when, json!({"queue": "forge"}))],
            "params": params,
        }))
    };
    let bot_rule = config(".payload.sender.login as $l | $params.bots | index($l) != null");
    let by_bot = envelope("github/check_suite.rerequested.json");
    assert_eq!(bot_rule.evaluate(&ctx(), &by_bot), queued("forge", "r"));
    assert_eq!(
        bot_rule.evaluate(&ctx(), &envelope(PR_OPENED)),
        default_queue("forge")
    );

    let env = envelope(PR_OPENED);
    for when in [
        "$params.humans[.payload.sender.login].team == \"core\"",
        ".payload.number >= $params.min_number",
        "$params | keys == [\"bots\", \"humans\", \"min_number\"]",
        "$params.no_such_param == null",
        ".payload.sender.login as $l | any($params.bots[]?; . == $l) | not",
    ] {
        assert_eq!(
            config(when).evaluate(&ctx(), &env),
            queued("forge", "r"),
            "{when}"
        );
    }
    // Without params, `$params` is the empty object.
    assert_eq!(decide("$params == {}", &env), queued("forge", "r"));
}

#[test]
fn envelope_fields() {
    let env = envelope(PR_OPENED);
    let v = as_json(&env);
    let payload: Value =
        serde_json::from_slice(&read_payload(PR_OPENED)).expect("the data file is JSON");

    assert_eq!(v["source"], "github");
    assert_eq!(v["kind"], "pull_request.opened");
    assert_eq!(v["event"], "pull_request");
    assert_eq!(v["action"], "opened");
    assert_eq!(v["delivery_id"], DELIVERY_ID);
    assert_eq!(v["received_at"], "2026-11-29T23:59:10.123Z");
    assert_eq!(v["verified"], true);
    assert_eq!(v["payload"], payload);
    assert_eq!(
        v["headers"],
        json!({
            "content-type": "application/json",
            "user-agent": "GitHub-Hookshot/044aadd",
            "x-github-event": "pull_request",
            "x-github-delivery": DELIVERY_ID,
            "x-github-hook-id": "292430182",
            "x-github-hook-installation-target-type": "repository",
            "x-github-hook-installation-target-id": "79929171",
        })
    );
    assert_eq!(
        v["actor"],
        json!({"login": "Codertocat", "kind": "human", "trusted": true})
    );
    let mut keys: Vec<&str> = v
        .as_object()
        .expect("an object")
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "action",
            "actor",
            "delivery_id",
            "event",
            "headers",
            "kind",
            "payload",
            "received_at",
            "source",
            "verified"
        ]
    );

    // Rules see the same thing.
    for when in [
        ".headers[\"x-github-event\"] == .event",
        ".headers | has(\"x-hub-signature-256\") or has(\"x-hub-signature\") | not",
        ".received_at | test(\"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\\\.[0-9]{3}Z$\")",
        ".payload.action == .action",
        "keys_unsorted[0:4] == [\"source\", \"kind\", \"event\", \"action\"]",
    ] {
        assert_eq!(decide(when, &env), queued("forge", "r"), "{when}");
    }

    // Rebuilt identically from the same stored delivery (ingest, dry run, replay).
    assert_eq!(envelope(PR_OPENED).to_string(), env.to_string());

    // A kind without an action, an unverified delivery, repeated and mixed-case headers.
    let mut push = delivery("github/push.json");
    push.verified = false;
    push.headers.push(header("X-Custom", "one"));
    push.headers.push(header("x-custom", "two"));
    push.received_at_ms = 0;
    let v = as_json(&build_envelope(&push, &ctx()));
    assert_eq!(v["kind"], "push");
    assert_eq!(v["event"], "push");
    assert_eq!(v["action"], Value::Null);
    assert_eq!(v["verified"], false);
    assert_eq!(v["received_at"], "1970-01-01T00:00:00.000Z");
    assert_eq!(v["headers"]["x-custom"], "one, two");
}

#[test]
fn envelope_headers_never_carry_credentials_for_any_forge() {
    for file in [
        "github/pull_request.opened.json",
        "gitea/pull_request.opened.json",
        "forgejo/pull_request.reopened.json",
    ] {
        let mut d = delivery(file);
        d.headers.extend([
            header("Cookie", "session=hunter2"),
            header("X-Gitlab-Token", "hunter2"),
            header("X-Webhook-Secret", "hunter2"),
            header("Proxy-Authorization", "Basic aHVudGVyMg=="),
        ]);
        let text = build_envelope(&d, &ctx()).to_string();
        for secret in [SIGNATURE_HEX, "hunter2", "aHVudGVyMg==", "sha1=0123"] {
            assert!(
                !text.contains(secret),
                "{file}: {secret} reached the envelope"
            );
        }
        let v = as_json(&build_envelope(&d, &ctx()));
        let headers = v["headers"].as_object().expect("headers are an object");
        for name in headers.keys() {
            assert_eq!(name, &name.to_ascii_lowercase(), "{file}");
            for word in ["signature", "secret", "token", "authorization", "cookie"] {
                assert!(!name.contains(word), "{file}: {name}");
            }
        }
        let event = v["event"].as_str().expect("event");
        assert_eq!(headers["x-github-event"], event, "{file}");
        if !file.starts_with("github/") {
            assert_eq!(headers["x-gitea-event-type"], event, "{file}");
        }
    }
}

#[test]
fn every_real_payload_builds_an_envelope() {
    let mut seen = 0;
    for forge in ["github", "gitea", "forgejo"] {
        let dir = format!("{}/{forge}", webhooks_dir().display());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        for name in names {
            let file = format!("{forge}/{name}");
            let v = as_json(&envelope(&file));
            let payload: Value = serde_json::from_slice(&read_payload(&file)).expect("JSON");
            assert_eq!(v["payload"], payload, "{file}");
            assert_eq!(v["source"], forge, "{file}");
            assert_eq!(v["kind"], kind_of(&file), "{file}");
            assert_eq!(
                v["action"],
                payload.get("action").cloned().unwrap_or(Value::Null),
                "{file}"
            );
            assert_eq!(v["actor"]["login"], payload["sender"]["login"], "{file}");
            seen += 1;
        }
    }
    assert_eq!(seen, 77, "the data set has 77 payloads");
}

#[test]
fn non_json_payload_is_a_string() {
    let form = b"payload=%7B%22action%22%3A%22opened%22%7D".to_vec();
    let truncated = read_payload(PR_OPENED)[..200].to_vec();
    let too_deep = format!("{}{}", "[".repeat(129), "]".repeat(129)).into_bytes();
    for body in [form, truncated, too_deep, b"".to_vec(), b"1 2".to_vec()] {
        let mut d = delivery(PR_OPENED);
        d.body = body.clone().into();
        let env = build_envelope(&d, &ctx());
        let v = as_json(&env);
        let text = String::from_utf8(body).expect("utf-8");
        assert_eq!(v["payload"], Value::String(text.clone()), "{text}");
        assert_eq!(
            decide(".payload | type == \"string\"", &env),
            queued("forge", "r")
        );
        // Indexing a string raises an error: an unguarded rule faults, a guarded one
        // (`?`) does not match.
        assert_fault(
            &decide(".payload.action == \"opened\"", &env),
            "r",
            fault::RULE_FAULT,
        );
        assert_eq!(
            decide(".payload.action? == \"opened\"", &env),
            default_queue("forge")
        );
    }
    // 128 levels is still JSON.
    let mut d = delivery(PR_OPENED);
    d.body = format!("{}{}", "[".repeat(128), "]".repeat(128))
        .into_bytes()
        .into();
    assert_eq!(
        decide(".payload | type == \"array\"", &build_envelope(&d, &ctx())),
        queued("forge", "r")
    );
}

#[test]
fn actor_present_only_with_capability() {
    let trusting = |humans: &[&str], agents: &[&str], bots: &[&str]| RoutingContext {
        trusted_actors: Some(TrustedActors {
            humans: humans.iter().map(|s| s.to_string()).collect(),
            agents: agents.iter().map(|s| s.to_string()).collect(),
            bots: bots.iter().map(|s| s.to_string()).collect(),
        }),
        ..ctx()
    };
    let actor =
        |d: &StoredDelivery, c: &RoutingContext| as_json(&build_envelope(d, c))["actor"].clone();
    let pr = delivery(PR_OPENED);

    // Without the capability there is no `.actor` at all, even with lists configured.
    let off = RoutingContext {
        trusted_actors_capability: false,
        ..trusting(&["Codertocat"], &[], &[])
    };
    let env = build_envelope(&pr, &off);
    assert!(as_json(&env).get("actor").is_none());
    let rule = compile(&json!({"rules": [rule("r", "has(\"actor\")", json!({"queue": "forge"}))]}));
    assert_eq!(rule.evaluate(&off, &env), default_queue("forge"));
    assert_eq!(
        rule.evaluate(&ctx(), &envelope(PR_OPENED)),
        queued("forge", "r")
    );

    // Trusted: verified and listed.
    let listed = trusting(&["Codertocat"], &[], &[]);
    assert_eq!(
        actor(&pr, &listed),
        json!({"login": "Codertocat", "kind": "human", "trusted": true})
    );
    let unverified = StoredDelivery {
        verified: false,
        ..pr.clone()
    };
    assert_eq!(
        actor(&unverified, &listed),
        json!({"login": "Codertocat", "kind": "human", "trusted": false})
    );
    for unlisted in [trusting(&[], &[], &[]), trusting(&["octocat"], &[], &[])] {
        assert_eq!(
            actor(&pr, &unlisted),
            json!({"login": "Codertocat", "kind": "human", "trusted": false})
        );
    }
    let no_lists = RoutingContext {
        trusted_actors: None,
        ..ctx()
    };
    assert_eq!(actor(&pr, &no_lists)["trusted"], false);
    // Listing names the kind.
    assert_eq!(
        actor(&pr, &trusting(&[], &["Codertocat"], &[]))["kind"],
        "agent"
    );

    // A GitHub App sender (`type: Bot`) is a bot, trusted only when listed as a bot.
    let bot = delivery("github/check_suite.rerequested.json");
    assert_eq!(
        actor(&bot, &listed),
        json!({"login": "octocoders-linter[bot]", "kind": "bot", "trusted": false})
    );
    assert_eq!(
        actor(&bot, &trusting(&[], &[], &["octocoders-linter[bot]"])),
        json!({"login": "octocoders-linter[bot]", "kind": "bot", "trusted": true})
    );

    // Gitea and Forgejo senders carry no type: humans unless listed otherwise.
    let gitea = delivery("gitea/pull_request.opened.json");
    assert_eq!(
        actor(&gitea, &trusting(&["example2"], &[], &[])),
        json!({"login": "example2", "kind": "human", "trusted": true})
    );

    // Cairn hand-offs name their actor in the payload.
    let cairn = StoredDelivery {
        source: "cairn".into(),
        kind: "handoff.created".into(),
        headers: vec![],
        body: br#"{"handoff":{"id":"h-1","from":"planner","to":"builder","repo":"acme/app","title":"Fix the flaky test"},"actor":{"login":"planner-agent","kind":"agent"}}"#
            .to_vec()
            .into(),
        ..pr.clone()
    };
    assert_eq!(
        actor(&cairn, &listed),
        json!({"login": "planner-agent", "kind": "agent", "trusted": false})
    );
    assert_eq!(
        actor(&cairn, &trusting(&[], &["planner-agent"], &[])),
        json!({"login": "planner-agent", "kind": "agent", "trusted": true})
    );

    // A payload without a sender: no login, never trusted.
    let mut anonymous = pr.clone();
    anonymous.body = br#"{"action":"opened"}"#.to_vec().into();
    assert_eq!(
        actor(&anonymous, &listed),
        json!({"login": null, "kind": "human", "trusted": false})
    );
}

#[test]
fn fault_reasons_never_contain_payload_text() {
    let env = envelope(PR_OPENED);
    let secrets = [
        "Codertocat",
        "Update the README",
        "pretty simple change",
        "Hello-World",
    ];
    for when in [
        "error(.payload.sender.login)",
        ".payload.sender.login | error",
        "error({login: .payload.sender.login})",
        ".payload.pull_request.title | error",
        ".payload.pull_request.body | error",
        ".payload.sender.login + 1",
        ".payload.sender.login | .[0]",
        ".payload.sender.login | .x",
        ".payload.sender.login | startswith(1)",
        ".payload.sender.login | test(\"(\")",
        ".payload.sender.login",
        ".payload.repository.full_name",
        ".payload.sender",
        "[.payload.pull_request.title]",
    ] {
        let d = decide(when, &env);
        assert_fault(&d, "r", fault::RULE_FAULT);
        let text = format!("{d:?}");
        for s in secrets {
            assert!(!text.contains(s), "{when}: {s} leaked into {text}");
        }
    }
}

#[test]
fn per_rule_counters() {
    let config = compile(&json!({
        "rules": [
            rule("prs", ".event == \"pull_request\"", json!({"queue": "forge"})),
            rule("issues", ".event == \"issues\"", json!({"drop": true})),
            rule("commits", "if .event == \"push\" then .payload.commits else false end", json!({"drop": true})),
            rule("never", "false", json!({"drop": true})),
            rule("labels", ".event == \"label\"", json!({"queue": "elsewhere"})),
        ],
    }));
    let dir = format!("{}/github", webhooks_dir().display());
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .map(|n| format!("github/{n}"))
        .collect();
    files.sort();
    let decisions: Vec<Decision> = files
        .iter()
        .map(|f| config.evaluate(&ctx(), &envelope(f)))
        .collect();

    let events: Vec<String> = files
        .iter()
        .map(|f| kind_of(f).split('.').next().unwrap_or_default().to_string())
        .collect();
    let count = |event: &str| events.iter().filter(|e| *e == event).count() as u64;
    let (prs, issues, pushes, labels) = (
        count("pull_request"),
        count("issues"),
        count("push"),
        count("label"),
    );
    assert_eq!(
        (prs, issues, pushes, labels),
        (11, 7, 1, 3),
        "the data set changed"
    );

    let counters = decision::count_rules(&config.digest, &config.rule_ids(), &decisions);
    assert_eq!(counters.digest, config.digest);
    let got: Vec<(&str, u64, u64)> = counters
        .rules
        .iter()
        .map(|c| (c.rule_id.as_str(), c.first_matches, c.faults))
        .collect();
    assert_eq!(
        got,
        [
            ("prs", prs, 0),
            ("issues", issues, 0),
            ("commits", 0, pushes),
            ("never", 0, 0),
            ("labels", 0, labels),
        ]
    );

    let labels_of = |label: &str| decisions.iter().filter(|d| d.label() == label).count() as u64;
    assert_eq!(labels_of("queue:forge"), prs);
    assert_eq!(labels_of("drop"), issues);
    assert_eq!(labels_of("fault"), pushes + labels);
    assert_eq!(
        labels_of("default"),
        files.len() as u64 - prs - issues - pushes - labels
    );

    // Decisions made by default_action are no rule's first match.
    let with_default = compile(&json!({
        "rules": [rule("never", "false", json!({"drop": true}))],
        "default_action": {"queue": "triage"},
    }));
    let decisions: Vec<Decision> = files
        .iter()
        .map(|f| with_default.evaluate(&ctx(), &envelope(f)))
        .collect();
    let counters =
        decision::count_rules(&with_default.digest, &with_default.rule_ids(), &decisions);
    assert_eq!(counters.rules.len(), 1);
    assert_eq!(
        (counters.rules[0].first_matches, counters.rules[0].faults),
        (0, 0)
    );
    assert!(
        decisions
            .iter()
            .all(|d| d.label() == "queue:triage" && d.by_default_action)
    );
    // Even a default_action decision that names a rule is not that rule's match.
    let named = Decision {
        rule_id: "never".into(),
        ..by_default(Outcome::Queue, "triage")
    };
    let counters = decision::count_rules("d", &with_default.rule_ids(), [&named]);
    assert_eq!(
        (counters.rules[0].first_matches, counters.rules[0].faults),
        (0, 0)
    );
}

/// `delivery` as its forge sends it form-encoded: the same JSON in a `payload=` body, under a
/// form `Content-Type` (in the forge's casing, or another).
fn form_twin(delivery: &StoredDelivery, content_type: &str) -> StoredDelivery {
    let mut twin = delivery.clone();
    twin.body = form_body(&delivery.body).into();
    for h in &mut twin.headers {
        if h.name.eq_ignore_ascii_case("content-type") {
            h.value = content_type.to_string();
        }
    }
    twin
}

/// The envelope without `.headers["content-type"]`, the one thing a form twin differs in.
fn without_content_type(v: &Val) -> Value {
    let mut v = as_json(v);
    if let Some(headers) = v["headers"].as_object_mut() {
        headers.remove("content-type");
    }
    v
}

/// A form-encoded delivery's envelope is its JSON twin's: same `.payload`, `.actor` and
/// everything else but the `Content-Type` it was sent with, so every rule decides the same.
#[test]
fn a_form_delivery_has_the_envelope_of_its_json_twin() {
    let mut files = Vec::new();
    for forge in ["github", "gitea", "forgejo"] {
        let dir = webhooks_dir().join(forge);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        files.extend(names.into_iter().map(|n| format!("{forge}/{n}")));
    }
    assert!(files.len() > 50, "{} payloads", files.len());
    let rules = compile(&json!({"rules": [
        rule("prs", ".payload.pull_request.number > 0", json!({"queue": "triage"})),
        rule("acted", ".payload.action == .action and .action != null", json!({"drop": true})),
        rule("repo", ".payload.repository.full_name | type == \"string\"", json!({"quarantine": true})),
    ]}));
    for file in &files {
        let json_twin = delivery(file);
        let json_env = build_envelope(&json_twin, &ctx());
        let want = without_content_type(&json_env);
        assert!(want["payload"].is_object(), "{file}");
        for content_type in [
            "application/x-www-form-urlencoded",
            "application/x-www-form-urlencoded; charset=utf-8",
            "Application/X-WWW-Form-Urlencoded",
        ] {
            let form = form_twin(&json_twin, content_type);
            assert_ne!(form.body, json_twin.body);
            let form_env = build_envelope(&form, &ctx());
            assert_eq!(
                without_content_type(&form_env),
                want,
                "{file} as {content_type}"
            );
            // The headers are shown as received.
            assert_eq!(as_json(&form_env)["headers"]["content-type"], content_type);
            for context in [ctx(), without_capability()] {
                assert_eq!(
                    rules.evaluate(&context, &build_envelope(&form, &context)),
                    rules.evaluate(&context, &build_envelope(&json_twin, &context)),
                    "{file}"
                );
            }
        }
    }

    // The form body sent as JSON is text: the content type is what makes it a form.
    let mut mislabelled = form_twin(&delivery(PR_OPENED), "application/json");
    mislabelled.kind = "pull_request".into();
    let v = as_json(&build_envelope(&mislabelled, &ctx()));
    assert!(v["payload"].is_string());
    // A form without a `payload` field is its body, as text.
    let mut no_field = form_twin(&delivery(PR_OPENED), "application/x-www-form-urlencoded");
    no_field.body = b"other=%7B%7D".to_vec().into();
    let v = as_json(&build_envelope(&no_field, &ctx()));
    assert_eq!(v["payload"], "other=%7B%7D");
}
