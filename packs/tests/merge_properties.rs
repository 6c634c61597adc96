//! Properties of merge and composition (REQ-6), removal (REQ-7) and drift over random
//! webhooks and packs: hand-written rules and params survive any sequence of installs in
//! their order, pack rules are `<name>--<local-id>` in their placement's group, params follow
//! supplied > current > default, removing every pack gives the hand-written rules back, and
//! drift names exactly the installed rules edited or removed by hand.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};
use switchboard_model::Configuration;
use switchboard_packs::Pack;
use switchboard_packs::merge::{InstallRequest, install_candidate, removal_candidate};
use switchboard_packs::provenance::{Provenance, drift};

/// Param keys packs and hand-written configurations share.
const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];

#[derive(Clone, Debug)]
struct PackShape {
    append: bool,
    rules: usize,
    /// Declared keys with their defaults.
    declared: BTreeMap<String, i64>,
    /// Params the caller supplies at install.
    supplied: BTreeMap<String, i64>,
}

fn pack_shape() -> impl Strategy<Value = PackShape> {
    (
        any::<bool>(),
        1usize..4,
        proptest::collection::btree_map(proptest::sample::select(KEYS.to_vec()), 0i64..100, 0..3),
        proptest::collection::btree_map(proptest::sample::select(KEYS.to_vec()), 100i64..200, 0..3),
    )
        .prop_map(|(append, rules, declared, supplied)| {
            let declared: BTreeMap<String, i64> = declared
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            // Only declared params may be supplied.
            let supplied = supplied
                .into_iter()
                .filter(|(k, _)| declared.contains_key(*k))
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            PackShape {
                append,
                rules,
                declared,
                supplied,
            }
        })
}

fn manifest(name: &str, shape: &PackShape) -> Pack {
    let rules: Vec<Value> = (0..shape.rules)
        .map(|i| json!({"id": format!("r{i}"), "when": format!(".n == {i}"), "action": {"drop": true}}))
        .collect();
    let schema: serde_json::Map<String, Value> = shape
        .declared
        .iter()
        .map(|(k, d)| {
            (
                k.clone(),
                json!({"type": "int", "default": d, "description": "d"}),
            )
        })
        .collect();
    serde_json::from_value(json!({
        "name": name, "version": "1.0.0", "title": "t", "summary": "s",
        "placement": if shape.append { "append" } else { "prepend" },
        "rules": rules, "params_schema": schema,
    }))
    .expect("pack")
}

fn hand_written() -> impl Strategy<Value = Configuration> {
    (
        0usize..5,
        proptest::collection::btree_map(proptest::sample::select(KEYS.to_vec()), 0i64..100, 0..3),
    )
        .prop_map(|(n, params)| {
            let rules: Vec<Value> = (0..n)
                .map(|i| json!({"id": format!("h{i}"), "when": format!(".h == {i}"), "action": {"queue": "forge"}}))
                .collect();
            serde_json::from_value(json!({"rules": rules, "params": params})).expect("configuration")
        })
}

fn ids(c: &Configuration) -> Vec<String> {
    c.rules.iter().filter_map(|r| r.id.clone()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn installs_compose_and_removals_give_the_hand_written_rules_back(
        saved in hand_written(),
        shapes in proptest::collection::vec(pack_shape(), 1..4),
    ) {
        let hand_ids = ids(&saved);
        let packs: Vec<Pack> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| manifest(&format!("p{i}"), s))
            .collect();
        let find = |n: &str, v: &str| packs.iter().find(|p| p.name == n && p.version == v).cloned();
        let (mut config, mut prov): (Configuration, Provenance) = (saved.clone(), Vec::new());
        for (pack, shape) in packs.iter().zip(&shapes) {
            let before = config.clone();
            let mut req = InstallRequest::default();
            for (k, v) in &shape.supplied {
                req.params.insert(k.clone(), json!(v));
            }
            let c = install_candidate(&config, &prov, pack, &req, &find)
                .map_err(|e| TestCaseError::fail(format!("{} installs: {e}", pack.name)))?;
            // Params: supplied > the webhook's current value > the schema default.
            for (k, default) in &shape.declared {
                let want = shape
                    .supplied
                    .get(k)
                    .map(|v| json!(v))
                    .or_else(|| before.params.get(k).cloned())
                    .unwrap_or(json!(default));
                prop_assert_eq!(c.configuration.params.get(k), Some(&want), "param {}", k);
            }
            // Every param the pack does not declare is kept as it was.
            for (k, v) in &before.params {
                if !shape.declared.contains_key(k) {
                    prop_assert_eq!(c.configuration.params.get(k), Some(v));
                }
            }
            // Every rule already there is kept, in its relative order.
            let now = ids(&c.configuration);
            let was = ids(&before);
            let kept: Vec<&String> = now.iter().filter(|id| was.contains(id)).collect();
            prop_assert_eq!(kept, was.iter().collect::<Vec<_>>());
            // The pack's rules are `<name>--<local-id>`, in the manifest's order, together.
            let own: Vec<String> = (0..shape.rules).map(|i| format!("{}--r{i}", pack.name)).collect();
            prop_assert_eq!(&c.pack_rule_ids, &own);
            let at: Vec<usize> = own
                .iter()
                .map(|id| now.iter().position(|x| x == id).expect("installed"))
                .collect();
            prop_assert!(at.windows(2).all(|w| w[1] == w[0] + 1), "{:?}", now);
            // Prepend packs before every hand-written rule, append packs after them.
            let hand_at: Vec<usize> = hand_ids
                .iter()
                .map(|id| now.iter().position(|x| x == id).expect("kept"))
                .collect();
            if shape.append {
                prop_assert!(hand_at.iter().all(|h| at.iter().all(|a| a > h)), "{:?}", now);
            } else {
                prop_assert!(hand_at.iter().all(|h| at.iter().all(|a| a < h)), "{:?}", now);
            }
            // A fresh install has no drift.
            let installed = c.provenance.iter().find(|p| p.name == pack.name).expect("provenance");
            let fresh = drift(installed, &c.configuration);
            prop_assert_eq!(fresh.state.as_str(), "none");
            config = c.configuration;
            prov = c.provenance;
        }
        // Removing every pack, newest first, leaves the hand-written rules as they were.
        for pack in packs.iter().rev() {
            let c = removal_candidate(&config, &prov, &pack.name, &[], &find)
                .map_err(|e| TestCaseError::fail(format!("{} removes: {e}", pack.name)))?;
            prop_assert!(c.pack_rule_ids.is_empty());
            config = c.configuration;
            prov = c.provenance;
        }
        prop_assert_eq!(ids(&config), hand_ids);
        prop_assert!(prov.is_empty());
        // A hand-written param no pack declared is still there.
        for (k, v) in &saved.params {
            if !shapes.iter().any(|s| s.declared.contains_key(k)) {
                prop_assert_eq!(config.params.get(k), Some(v));
            }
        }
    }

    #[test]
    fn drift_names_exactly_the_installed_rules_edited_or_removed(
        saved in hand_written(),
        shape in pack_shape(),
        edits in proptest::collection::vec(0u8..3, 1..4),
    ) {
        let pack = manifest("p", &shape);
        let find = |_: &str, _: &str| None;
        let c = install_candidate(&saved, &Vec::new(), &pack, &InstallRequest::default(), &find)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let installed = c.provenance[0].clone();
        let mut config = c.configuration.clone();
        let (mut edited, mut removed) = (Vec::new(), Vec::new());
        // Per installed rule: 0 untouched, 1 its condition edited, 2 removed.
        for (i, id) in c.pack_rule_ids.iter().enumerate() {
            match edits.get(i).copied().unwrap_or(0) {
                1 => {
                    let rule = config.rules.iter_mut().find(|r| r.id.as_ref() == Some(id)).expect("rule");
                    rule.when = format!("({}) and true", rule.when);
                    edited.push(id.clone());
                }
                2 => {
                    config.rules.retain(|r| r.id.as_ref() != Some(id));
                    removed.push(id.clone());
                }
                _ => {}
            }
        }
        // Editing a hand-written rule is nobody's drift.
        if let Some(h) = config.rules.iter_mut().find(|r| r.id.as_deref().is_some_and(|id| id.starts_with('h'))) {
            h.when = "true".into();
        }
        let d = drift(&installed, &config);
        prop_assert_eq!(&d.edited, &edited);
        prop_assert_eq!(&d.removed, &removed);
        let state = if !removed.is_empty() { "removed" } else if !edited.is_empty() { "edited" } else { "none" };
        prop_assert_eq!(d.state.as_str(), state);
        prop_assert_eq!(d.has_drift(), state != "none");
    }
}
