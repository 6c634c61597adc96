//! The replay report (REQ-5) computed: what would change if the candidate replaced the saved
//! configuration, aggregated from both configurations' decisions over the same deliveries.
//! The report's types are the model's ([`switchboard_model::plan`]).

use std::collections::BTreeMap;

use switchboard_model::Label;
use switchboard_model::plan::{
    Replayed, Report, RuleFaults, RuleReport, RuleShift, TodosPerDay, Transition,
};

/// Example event ids kept per transition group and per faulting rule.
pub const MAX_EXAMPLES: usize = 20;

/// Aggregates a replay. `from_pack` names the pack of a candidate rule id; `fail_closed`
/// (the trusted-actors capability) quarantines faults instead of queueing them.
pub fn aggregate(
    replayed: &[Replayed],
    candidate_rule_ids: &[String],
    from_pack: &dyn Fn(&str) -> Option<String>,
    fail_closed: bool,
    truncated: bool,
    rfc3339: &dyn Fn(i64) -> String,
) -> Report {
    let mut r = Report {
        events_replayed: replayed.len() as u64,
        truncated,
        ..Default::default()
    };
    type Pair = (Label<'static>, Label<'static>);
    let mut groups: BTreeMap<Pair, Transition> = BTreeMap::new();
    type Shifts = BTreeMap<(Option<String>, Option<String>), u64>;
    let mut shifts: BTreeMap<Pair, Shifts> = BTreeMap::new();
    let mut first: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let (mut work_before, mut work_after) = (0u64, 0u64);
    for e in replayed {
        *r.totals.before.entry(e.before.label.clone()).or_default() += 1;
        *r.totals.after.entry(e.after.label.clone()).or_default() += 1;
        if e.before.label != e.after.label {
            r.changed += 1;
            let g = groups
                .entry((e.before.label.clone(), e.after.label.clone()))
                .or_insert_with(|| Transition {
                    from: e.before.label.clone(),
                    to: e.after.label.clone(),
                    count: 0,
                    example_event_ids: Vec::new(),
                    by_rules: Vec::new(),
                });
            g.count += 1;
            *shifts
                .entry((e.before.label.clone(), e.after.label.clone()))
                .or_default()
                .entry((e.before.rule_id.clone(), e.after.rule_id.clone()))
                .or_default() += 1;
            if g.example_event_ids.len() < MAX_EXAMPLES {
                g.example_event_ids.push(e.event_id.clone());
            }
        }
        if let Some(rule) = &e.after.rule_id {
            let c = first.entry(rule.as_str()).or_default();
            if e.after.label == Label::Fault {
                c.1 += 1;
            } else {
                c.0 += 1;
            }
        }
        work_before += u64::from(e.before.label.delivers_work(fail_closed));
        work_after += u64::from(e.after.label.delivers_work(fail_closed));
    }
    for (key, t) in groups.iter_mut() {
        let mut by_rules: Vec<RuleShift> = shifts
            .remove(key)
            .unwrap_or_default()
            .into_iter()
            .map(|((before_rule, after_rule), count)| RuleShift {
                before_rule,
                after_rule,
                count,
            })
            .collect();
        // Most deliveries first; ties in rule order (the map's), so plans compare exactly.
        by_rules.sort_by_key(|s| std::cmp::Reverse(s.count));
        t.by_rules = by_rules;
    }
    let mut transitions: Vec<Transition> = groups.into_values().collect();
    transitions.sort_by(Transition::report_order);
    r.transitions = transitions;
    r.rules = candidate_rule_ids
        .iter()
        .map(|id| {
            let (m, f) = first.get(id.as_str()).copied().unwrap_or_default();
            RuleReport {
                id: id.clone(),
                first_matches: m,
                faults: f,
                from_pack: from_pack(id),
                never_matched: m == 0,
            }
        })
        .collect();
    let from = replayed.iter().map(|e| e.received_at_ms).min();
    let to = replayed.iter().map(|e| e.received_at_ms).max();
    r.window_from = from.map(rfc3339);
    r.window_to = to.map(rfc3339);
    // Extrapolated from the window; a window under an hour counts as an hour.
    let span_ms = match (from, to) {
        (Some(f), Some(t)) => (t - f).max(3_600_000) as f64,
        _ => 86_400_000.0,
    };
    let per_day = |n: u64| ((n as f64) * 86_400_000.0 / span_ms * 10.0).round() / 10.0;
    r.todos_per_day = TodosPerDay {
        before: per_day(work_before),
        after: per_day(work_after),
    };
    r
}

/// The pack rules that fault on any replayed delivery (REQ-4 `pack_rule_faults`).
pub fn pack_rule_faults(replayed: &[Replayed], pack_rule_ids: &[String]) -> Vec<RuleFaults> {
    rule_faults(
        replayed
            .iter()
            .filter(|e| e.after.label == Label::Fault)
            .filter_map(|e| Some((e.event_id.as_str(), e.after.rule_id.as_deref()?)))
            .filter(|(_, rule)| pack_rule_ids.iter().any(|p| p == rule)),
    )
}

/// Faults grouped by rule, in the order each rule first faulted, with up to
/// [`MAX_EXAMPLES`] event ids each.
pub fn rule_faults<'a>(faults: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<RuleFaults> {
    let mut out: Vec<RuleFaults> = Vec::new();
    for (event_id, rule) in faults {
        match out.iter_mut().find(|f| f.rule == rule) {
            Some(f) => {
                f.count += 1;
                if f.event_ids.len() < MAX_EXAMPLES {
                    f.event_ids.push(event_id.to_string());
                }
            }
            None => out.push(RuleFaults {
                rule: rule.to_string(),
                count: 1,
                event_ids: vec![event_id.to_string()],
            }),
        }
    }
    out
}

/// Proven: the window held a delivery of one of the pack's source types (any, when the pack
/// names none), and the replay was not truncated.
pub fn proven(replayed: &[Replayed], source_types: &[String], truncated: bool) -> bool {
    !truncated
        && replayed
            .iter()
            .any(|e| source_types.is_empty() || source_types.contains(&e.source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_model::plan::Routed;

    fn routed(label: &str, rule: Option<&str>) -> Routed {
        Routed {
            label: label.parse().expect("a label"),
            rule_id: rule.map(str::to_string),
        }
    }

    fn event(n: i64, before: Routed, after: Routed) -> Replayed {
        Replayed {
            event_id: format!("ev-{n}"),
            received_at_ms: n * 3_600_000,
            source: "github".into(),
            before,
            after,
        }
    }

    #[test]
    fn lost_work_is_listed_first_and_counts_are_exact() {
        let mut events = Vec::new();
        for n in 0..30 {
            events.push(event(
                n,
                routed("queue:review", Some("a")),
                routed("queue:triage", Some("x--b")),
            ));
        }
        for n in 30..35 {
            events.push(event(
                n,
                routed("queue:forge", Some("a")),
                routed("drop", Some("x--c")),
            ));
        }
        events.push(event(
            35,
            routed("drop", None),
            routed("drop", Some("x--c")),
        ));
        let ids = vec![
            "x--b".to_string(),
            "x--c".to_string(),
            "x--dead".to_string(),
        ];
        let pack = |id: &str| id.split_once("--").map(|(p, _)| p.to_string());
        let r = aggregate(&events, &ids, &pack, false, false, &|ms| ms.to_string());
        assert_eq!(r.events_replayed, 36);
        assert_eq!(
            r.transitions[1].by_rules,
            [RuleShift {
                before_rule: Some("a".into()),
                after_rule: Some("x--b".into()),
                count: 30,
            }]
        );
        assert_eq!(r.changed, 35);
        assert_eq!(r.transitions[0].from, Label::queue("forge"));
        assert_eq!(r.transitions[0].to, Label::Drop);
        assert_eq!(r.transitions[0].count, 5);
        assert_eq!(r.transitions[1].count, 30);
        assert_eq!(r.transitions[1].example_event_ids.len(), MAX_EXAMPLES);
        assert_eq!(r.totals.before[&Label::queue("review")], 30);
        assert_eq!(r.totals.after[&Label::Drop], 6);
        let dead = r.rules.iter().find(|x| x.id == "x--dead").unwrap();
        assert!(dead.never_matched);
        assert_eq!(dead.from_pack.as_deref(), Some("x"));
        assert_eq!(r.rules[1].first_matches, 6);
        // 35 work items over 35 hours before, 30 after.
        assert_eq!(r.todos_per_day.before, 24.0);
        assert!(
            (r.todos_per_day.after - 20.6).abs() < 0.01,
            "{}",
            r.todos_per_day.after
        );
    }

    /// Issue 44: one definition of lost work. Work a change quarantines or faults is lost too,
    /// listed before a bigger change that keeps every delivery in a queue (before, only
    /// `→ drop` came first here, while the console and the CLI marked all three).
    #[test]
    fn work_quarantined_or_faulted_is_lost_work_and_listed_first() {
        let mut events = Vec::new();
        for n in 0..10 {
            events.push(event(
                n,
                routed("default", None),
                routed("queue:review", Some("r")),
            ));
        }
        for n in 10..13 {
            events.push(event(
                n,
                routed("queue:forge", Some("a")),
                routed("quarantine", Some("q")),
            ));
        }
        events.push(event(
            13,
            routed("default", None),
            routed("fault", Some("f")),
        ));
        let r = aggregate(&events, &[], &|_| None, false, false, &|ms| ms.to_string());
        let order: Vec<(Label, Label)> = r
            .transitions
            .iter()
            .map(|t| (t.from.clone(), t.to.clone()))
            .collect();
        assert_eq!(
            order,
            [
                (Label::queue("forge"), Label::Quarantine),
                (Label::Default, Label::Fault),
                (Label::Default, Label::queue("review"))
            ]
        );
    }

    #[test]
    fn faults_of_pack_rules_are_named_with_examples() {
        let events: Vec<Replayed> = (0..25)
            .map(|n| event(n, routed("default", None), routed("fault", Some("p--bad"))))
            .collect();
        let f = pack_rule_faults(&events, &["p--bad".into()]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].count, 25);
        assert_eq!(f[0].event_ids.len(), MAX_EXAMPLES);
        assert!(pack_rule_faults(&events, &["p--other".into()]).is_empty());
    }

    #[test]
    fn proven_needs_a_delivery_of_the_packs_source_types() {
        let events = vec![event(1, routed("default", None), routed("default", None))];
        assert!(proven(&events, &["github".into()], false));
        assert!(!proven(&events, &["cairn".into()], false));
        assert!(!proven(&events, &["github".into()], true));
        assert!(!proven(&[], &[], false));
    }

    #[test]
    fn a_transition_names_which_rule_takes_whose_deliveries() {
        let mut events = Vec::new();
        for n in 0..3 {
            events.push(event(
                n,
                routed("queue:forge", Some("a")),
                routed("drop", Some("p--noise")),
            ));
        }
        events.push(event(
            3,
            routed("queue:forge", None),
            routed("drop", Some("p--noise")),
        ));
        for n in 4..6 {
            events.push(event(
                n,
                routed("queue:forge", Some("b")),
                routed("drop", Some("p--bots")),
            ));
        }
        let ids = vec!["p--noise".to_string(), "p--bots".to_string()];
        let r = aggregate(&events, &ids, &|_| None, false, false, &|ms| ms.to_string());
        assert_eq!(r.transitions.len(), 1);
        let shift = |before: Option<&str>, after: &str, count| RuleShift {
            before_rule: before.map(str::to_string),
            after_rule: Some(after.to_string()),
            count,
        };
        assert_eq!(
            r.transitions[0].by_rules,
            [
                shift(Some("a"), "p--noise", 3),
                shift(Some("b"), "p--bots", 2),
                shift(None, "p--noise", 1),
            ]
        );
    }
}
