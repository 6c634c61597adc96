//! A rule's shortcut (`router/src/engine/shortcut.rs`) decides without jaq only what jaq
//! itself would answer: over random expressions of the shapes it reads (static paths of the
//! envelope or of `$params` compared with literals, `and`, `or`, `| not`) mixed with terms it must leave to jaq (errors, numbers,
//! optional and computed paths, several outputs, no output), over random envelopes, every
//! decision it makes equals jaq's first output. `router/tests/projection.rs` holds every
//! shipped rule to the same over real deliveries.

use jaq_json::Val;
use proptest::prelude::*;
use serde_json::{Value, json};
use switchboard_proto::router::v1::RoutingContext;
use switchboard_router::engine::{CompiledConfiguration, Configuration, build_envelope};
use switchboard_testkit::seed_cases::raw_delivery;

fn expression() -> impl Strategy<Value = String> {
    let path = prop_oneof![
        Just(".event"),
        Just(".payload.a"),
        Just(".payload.b"),
        Just(".payload.a.b"),
        Just(".payload.a.c.b"),
        Just(".payload[\"b\"]"),
        Just(".payload.a?"),
        Just(".payload.a[0]"),
        Just(".missing.deeper"),
        Just("$params.p"),
        Just("$params.p.a"),
        Just("$params.q.r"),
    ];
    let literal = prop_oneof![
        Just("\"a\""),
        Just("\"issues\""),
        Just("\"1\""),
        Just("true"),
        Just("false"),
        Just("null"),
        Just("1"),
        Just("(\"a\", \"b\")"),
        Just("empty"),
    ];
    let compare = (path, literal, any::<bool>(), any::<bool>()).prop_map(|(p, l, eq, flip)| {
        let op = if eq { "==" } else { "!=" };
        if flip {
            format!("{l} {op} {p}")
        } else {
            format!("{p} {op} {l}")
        }
    });
    let leaf = prop_oneof![
        4 => compare,
        1 => Just("error(\"opaque\")".to_string()),
        1 => Just("(.payload.a | length) > 0".to_string()),
        1 => Just("(true, false)".to_string()),
        1 => Just("empty".to_string()),
        1 => Just(".payload.b".to_string()),
        1 => Just("true".to_string()),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} and {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} or {b})")),
            inner.prop_map(|a| format!("({a} | not)")),
        ]
    })
}

fn payload() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (0i64..2).prop_map(Value::from),
        prop_oneof![Just("a"), Just("1"), Just("issues")].prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(String::from),
                inner,
                0..3
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A configuration of the one rule `when`, with `params`.
fn one_rule(when: &str, params: Value) -> CompiledConfiguration {
    let text = json!({
        "rules": [{"id": "r", "when": when, "action": {"queue": "forge"}}],
        "params": params,
    })
    .to_string();
    let config = Configuration::from_json(&text).expect("parses");
    CompiledConfiguration::compile(&config).expect("compiles")
}

fn ctx() -> RoutingContext {
    RoutingContext {
        grant: vec!["forge".into()],
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn a_shortcut_decides_only_what_jaq_answers(
        code in expression(),
        body in payload(),
        params in payload(),
        event in prop_oneof![Just("issues"), Just("push")],
    ) {
        let config = one_rule(&code, json!({"p": params}));
        let delivery = raw_delivery("github", event, body.to_string().into_bytes(), true, "d");
        let envelope = build_envelope(&delivery, &ctx());
        if let Some(decided) = config.shortcut(0, &envelope) {
            prop_assert_eq!(config.outputs(0, &envelope, 1), vec![Some(Val::Bool(decided))]);
        }
    }
}

/// The generator reaches the cases that matter: decisions both ways, and expressions left
/// to jaq (so the property above is not vacuous).
#[test]
fn the_shortcut_decides_often_and_defers_sometimes() {
    let cases = [
        (".event == \"push\" and error(\"x\")", Some(false)),
        (".event == \"issues\" or error(\"x\")", Some(true)),
        (".event == \"issues\" and error(\"x\")", None),
        ("error(\"x\") or .event == \"issues\"", None),
        (".payload.a.b == \"1\"", None),
        (".payload.b == null and .missing.deeper == null", Some(true)),
        ("$params.flag == true and .event == \"issues\"", Some(true)),
        ("$params.flag == false and error(\"x\")", Some(false)),
    ];
    let body = json!({"a": "text", "b": null});
    let delivery = raw_delivery("github", "issues", body.to_string().into_bytes(), true, "d");
    let envelope = build_envelope(&delivery, &ctx());
    for (code, want) in cases {
        let config = one_rule(code, json!({"flag": true}));
        assert_eq!(config.shortcut(0, &envelope), want, "{code}");
        if let Some(decided) = want {
            assert_eq!(
                config.outputs(0, &envelope, 1),
                vec![Some(Val::Bool(decided))]
            );
        } else {
            assert!(
                config.outputs(0, &envelope, 1)[0].is_none(),
                "{code}: jaq errors"
            );
        }
    }
}
