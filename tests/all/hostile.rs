//! The hostile corpus (docs/routing/hostile-corpus.md): expressions and inputs written to
//! hang, exhaust or crash an evaluator. Each gets a typed refusal at Validate, or faults
//! within its budget in a sandbox child while the pool keeps serving. Forbidden ones are
//! also refused when sent straight to Evaluate, without a Validate first.

use std::time::{Duration, Instant};

use switchboard_proto::router::v1::{Configuration, Outcome};
use switchboard_router::engine::decision::fault;

use crate::router_sandbox::realistic;
use crate::support::{context, deliveries, payload, pool, stored};

/// What an entry of the corpus gets.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Gets {
    /// Refused at Validate with this problem code.
    Refused(&'static str),
    /// Valid, and faults at evaluation within budget (over budget, or the child dies).
    FaultsWithinBudget,
    /// Valid, and evaluates normally (the defence is elsewhere, e.g. the body depth limit).
    Evaluates,
}

fn corpus() -> Vec<(&'static str, String, Gets)> {
    use Gets::*;
    let doubling_tojson = format!(".payload{} | length > 0", " | tojson".repeat(24));
    let long_chain = format!("({}1) > 0", "1+".repeat(1900));
    let deep = format!("{}true{}", "(".repeat(900), ")".repeat(900));
    vec![
        ("infinite recursion", "def f: f; f".into(), Refused("forbidden_syntax")),
        ("stack-overflow recursion", "def f: 1 + f; f".into(), Refused("forbidden_syntax")),
        ("huge range collected", "[range(1e9)] | length > 0".into(), Refused("forbidden_builtin")),
        ("huge range walked", "last(range(1e12)) > 0".into(), Refused("forbidden_builtin")),
        ("repeat", "first(repeat(.)) | false".into(), Refused("forbidden_builtin")),
        ("limit over repeat", "[limit(1e9; repeat(1))] | length > 0".into(), Refused("forbidden_builtin")),
        ("until that never ends", "until(false; .)".into(), Refused("forbidden_builtin")),
        ("while that never ends", "[while(true; .)] | length > 0".into(), Refused("forbidden_builtin")),
        ("unbounded recurse", "[recurse(. + 1)] | length > 0".into(), Refused("forbidden_builtin")),
        ("recursive descent", "[..] | length > 0".into(), Refused("forbidden_syntax")),
        ("reduce over a huge range", "reduce range(1e9) as $x (0; . + $x) | . > 0".into(), Refused("forbidden_syntax")),
        ("label/foreach tricks", "label $out | foreach (1,2) as $x (0; . + $x; if . > 1 then ., break $out else empty end) | . > 0".into(), Refused("forbidden_syntax")),
        ("parser-aborting nesting", deep, Refused("expression_too_deep")),
        ("environment exfiltration", "env.SWITCHBOARD_DATABASE_URL != null".into(), Refused("forbidden_builtin")),
        ("$ENV exfiltration", "$ENV.HOME != null".into(), Refused("unknown_variable")),
        ("other inputs", "input | false".into(), Refused("forbidden_builtin")),
        ("halt the process", "halt_error".into(), Refused("forbidden_builtin")),
        ("reader-aborting text", "(\"[\" * 100000) | tonumber > 0".into(), Refused("forbidden_builtin")),
        ("reader-aborting fromjson", "(\"[\" * 100000) | fromjson | false".into(), Refused("forbidden_builtin")),
        ("shell format string", "@sh \"rm \\(.payload.x)\" | length > 0".into(), Refused("forbidden_syntax")),
        ("source location", "$__loc__.line > 0".into(), Refused("unknown_variable")),
        ("exponential string growth", "(\"x\" * 1000000000) | length > 0".into(), FaultsWithinBudget),
        (
            "exponential array growth",
            ". as $p | [$p,$p,$p,$p,$p,$p,$p,$p] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | tojson | length > 0".into(),
            FaultsWithinBudget,
        ),
        ("escape doubling", doubling_tojson, FaultsWithinBudget),
        ("regex over a huge input", "((.payload | tostring) * 3000) | test(\"(a|aa)+$\")".into(), FaultsWithinBudget),
        ("long operator chain", long_chain, Evaluates),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hostile_corpus_is_refused_or_faults_within_budget() {
    let ctx = context();
    let budget = Duration::from_millis(50);
    let pool = pool(2, budget).await;
    let d = vec![stored(&payload("github", "pull_request.opened.json"), 1)];
    let entries = corpus();
    assert!(entries.len() >= 15);
    for (name, when, gets) in entries {
        let json = serde_json::json!({"rules": [{"id": "hostile", "when": when, "action": {"drop": true}}]}).to_string();
        let validated = pool
            .validate(&Configuration::text(json.clone()), &ctx)
            .await
            .expect("validates");
        let codes: Vec<&str> = validated.problems.iter().map(|p| p.code.as_str()).collect();
        let started = Instant::now();
        let evaluated = pool
            .evaluate(&ctx, &[Configuration::text(json.clone())], &d, None)
            .await
            .expect("evaluates");
        let elapsed = started.elapsed();
        let decision = &evaluated.results[0].decisions[0];
        match gets {
            Gets::Refused(code) => {
                assert!(
                    codes.contains(&code),
                    "{name}: expected {code}, got {codes:?}"
                );
                // Sent straight to Evaluate, the child refuses to compile it.
                assert_eq!(
                    decision.fault_code,
                    fault::INVALID_CONFIGURATION,
                    "{name}: {decision:?}"
                );
            }
            Gets::FaultsWithinBudget => {
                assert!(validated.valid, "{name}: expected valid, got {codes:?}");
                assert_eq!(
                    decision.outcome,
                    Outcome::Fault as i32,
                    "{name}: {decision:?}"
                );
                assert!(
                    [fault::BUDGET_EXCEEDED, fault::SANDBOX_CRASHED]
                        .contains(&decision.fault_code.as_str()),
                    "{name}: {decision:?}"
                );
                // The budget, a child restart and scheduling slack: well under a second.
                assert!(elapsed < Duration::from_secs(2), "{name}: took {elapsed:?}");
            }
            Gets::Evaluates => {
                assert!(validated.valid, "{name}: expected valid, got {codes:?}");
                assert_ne!(
                    decision.outcome,
                    Outcome::Fault as i32,
                    "{name}: {decision:?}"
                );
            }
        }
    }
    // After all of that, the pool still routes ordinary deliveries.
    let ds = deliveries(40);
    // A generous budget here: this checks the pool still serves, not how fast a loaded
    // machine is.
    let ok = pool
        .evaluate(
            &ctx,
            &[Configuration::text(realistic())],
            &ds,
            Some(Duration::from_secs(5)),
        )
        .await
        .expect("evaluates");
    assert!(
        ok.results
            .iter()
            .all(|r| r.decisions[0].outcome != Outcome::Fault as i32)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_bodies_reach_rules_safely() {
    let ctx = context();
    let pool = pool(1, Duration::from_millis(200)).await;
    let base = payload("github", "issues.opened.json");
    let mut bodies: Vec<(&str, Vec<u8>)> = vec![
        (
            "nested 5,000 levels",
            format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes(),
        ),
        (
            "nested objects 3,000 levels",
            format!("{}1{}", "{\"a\":".repeat(3000), "}".repeat(3000)).into_bytes(),
        ),
        ("not JSON", b"payload=%7B%7D".to_vec()),
        ("invalid UTF-8", vec![0xff, 0xfe, b'{', 0x80]),
        ("empty", Vec::new()),
        ("truncated JSON", base.body[..base.body.len() / 2].to_vec()),
    ];
    bodies.push(("a real payload", base.body.clone()));
    let json = r#"{"rules":[{"id":"type","when":".payload | type == \"string\"","action":{"queue":"triage"}}],"default_action":{"queue":"forge"}}"#;
    for (name, body) in bodies {
        let mut d = stored(&base, 1);
        d.body = bytes::Bytes::from(body);
        let resp = pool
            .evaluate(&ctx, &[Configuration::text(json)], &[d], None)
            .await
            .expect("evaluates");
        let decision = &resp.results[0].decisions[0];
        let want = if name == "a real payload" {
            "forge"
        } else {
            "triage"
        };
        assert_eq!(decision.queue, want, "{name}: {decision:?}");
    }
}
