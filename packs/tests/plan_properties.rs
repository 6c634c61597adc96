//! Properties of plan aggregation (REQ-5) over random replays: totals add up, transitions
//! partition what changed, lost work (the one definition, `Label::loses_work`) comes first,
//! per-rule counts are exact, and a candidate's faults are counted whether or not the saved
//! side was evaluated (issue 42).

use proptest::prelude::*;
use switchboard_model::Label;
use switchboard_packs::plan::{
    Delivered, Evidence, MAX_EXAMPLES, Replayed, Routed, aggregate, pack_rule_faults,
};
use switchboard_proto::router::v1::{Decision, Outcome};

const RULES: [&str; 4] = ["hand", "p--a", "p--b", "p--c"];

fn label() -> impl Strategy<Value = Label<'static>> {
    prop_oneof![
        Just(Label::queue("review")),
        Just(Label::queue("triage")),
        Just(Label::Default),
        Just(Label::Drop),
        Just(Label::Quarantine),
        Just(Label::Fault),
    ]
}

fn routed() -> impl Strategy<Value = Routed> {
    (
        label(),
        proptest::option::of(proptest::sample::select(RULES.to_vec())),
    )
        .prop_map(|(label, rule)| Routed {
            // A default decision names no rule.
            rule_id: rule.filter(|_| label != Label::Default).map(str::to_string),
            label,
        })
}

fn replay() -> impl Strategy<Value = Vec<Replayed>> {
    proptest::collection::vec((routed(), routed(), 0i64..10_000_000), 0..120).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(n, (before, after, at))| Replayed {
                event_id: format!("ev-{n}"),
                received_at_ms: at,
                source: "github".into(),
                before,
                after,
            })
            .collect()
    })
}

fn ids() -> Vec<String> {
    RULES.iter().map(|r| r.to_string()).collect()
}

proptest! {
    #[test]
    fn totals_add_up_and_transitions_partition_what_changed(replayed in replay(), fail_closed in any::<bool>()) {
        let r = aggregate(&replayed, &ids(), &|_| None, fail_closed, false, &|ms| ms.to_string());
        let n = replayed.len() as u64;
        prop_assert_eq!(r.events_replayed, n);
        prop_assert_eq!(r.totals.before.values().sum::<u64>(), n);
        prop_assert_eq!(r.totals.after.values().sum::<u64>(), n);
        let changed = replayed.iter().filter(|e| e.before.label != e.after.label).count() as u64;
        prop_assert_eq!(r.changed, changed);
        prop_assert_eq!(r.transitions.iter().map(|t| t.count).sum::<u64>(), changed);
        let mut seen = std::collections::BTreeSet::new();
        for t in &r.transitions {
            prop_assert!(t.from != t.to);
            prop_assert!(seen.insert((t.from.clone(), t.to.clone())), "one group per pair");
            let members: Vec<&Replayed> = replayed
                .iter()
                .filter(|e| e.before.label == t.from && e.after.label == t.to)
                .collect();
            prop_assert_eq!(t.count, members.len() as u64);
            prop_assert_eq!(t.by_rules.iter().map(|s| s.count).sum::<u64>(), t.count);
            prop_assert!(t.example_event_ids.len() <= MAX_EXAMPLES);
            prop_assert_eq!(t.example_event_ids.len(), members.len().min(MAX_EXAMPLES));
            for id in &t.example_event_ids {
                prop_assert!(members.iter().any(|e| &e.event_id == id));
            }
        }
    }

    #[test]
    fn lost_work_comes_first_by_the_one_definition(replayed in replay()) {
        let r = aggregate(&replayed, &ids(), &|_| None, false, false, &|ms| ms.to_string());
        let lost: Vec<bool> = r
            .transitions
            .iter()
            .map(|t| t.loses_work())
            .collect();
        // Every lost-work group precedes every other group.
        prop_assert!(lost.windows(2).all(|w| w[0] || !w[1]), "{:?}", r.transitions);
        for t in &r.transitions {
            // The definition read off the labels' text, independently of `Label`.
            let works = |l: &Label| {
                let text = l.to_string();
                text.starts_with("queue:") || text == "default"
            };
            prop_assert_eq!(t.loses_work(), works(&t.from) && !works(&t.to));
        }
    }

    #[test]
    fn per_rule_counts_are_exact(replayed in replay()) {
        let r = aggregate(&replayed, &ids(), &|_| None, false, false, &|ms| ms.to_string());
        prop_assert_eq!(r.rules.len(), RULES.len());
        for rule in &r.rules {
            let decided: Vec<&Replayed> = replayed
                .iter()
                .filter(|e| e.after.rule_id.as_deref() == Some(rule.id.as_str()))
                .collect();
            let faults = decided.iter().filter(|e| e.after.label == Label::Fault).count() as u64;
            prop_assert_eq!(rule.faults, faults);
            prop_assert_eq!(rule.first_matches, decided.len() as u64 - faults);
            prop_assert_eq!(rule.never_matched, rule.first_matches == 0);
        }
        let packs: Vec<String> = vec!["p--a".into(), "p--b".into()];
        for f in pack_rule_faults(&replayed, &packs) {
            let expected = r.rules.iter().find(|x| x.id == f.rule).map(|x| x.faults);
            prop_assert_eq!(Some(f.count), expected);
            prop_assert!(packs.contains(&f.rule));
        }
    }

    /// Issue 42: a candidate fault whose saved side the router did not evaluate counts
    /// against its rule (refusing a pack plan), in no transition.
    #[test]
    fn a_candidate_fault_counts_with_or_without_its_saved_decision(
        rows in proptest::collection::vec((any::<bool>(), any::<bool>(), proptest::sample::select(RULES.to_vec())), 0..60)
    ) {
        let skipped = Decision {
            outcome: Outcome::Fault as i32,
            fault_code: switchboard_model::fault::NOT_EVALUATED.into(),
            reason: "not evaluated: stopped".into(),
            ..Default::default()
        };
        let queued = Decision {
            outcome: Outcome::Queue as i32,
            queue: "review".into(),
            rule_id: "hand".into(),
            ..Default::default()
        };
        let mut evidence = Evidence::default();
        let mut faults_of = std::collections::BTreeMap::<&str, u64>::new();
        for (n, (saved_evaluated, faulted, rule)) in rows.iter().enumerate() {
            let after = if *faulted {
                Decision {
                    outcome: Outcome::Fault as i32,
                    rule_id: rule.to_string(),
                    fault_code: switchboard_model::fault::BUDGET_EXCEEDED.into(),
                    ..Default::default()
                }
            } else {
                queued.clone()
            };
            if *faulted {
                *faults_of.entry(rule).or_default() += 1;
            }
            let before = if *saved_evaluated { &queued } else { &skipped };
            evidence.read(
                Delivered { event_id: &format!("ev-{n}"), received_at_ms: n as i64, source: "github" },
                before,
                &after,
            );
        }
        let report = evidence.report(&ids(), &|_| None, false, &|ms| ms.to_string());
        for rule in &report.rules {
            prop_assert_eq!(rule.faults, faults_of.get(rule.id.as_str()).copied().unwrap_or(0));
        }
        let refused = evidence.pack_rule_faults(&["p--a".into()]);
        prop_assert_eq!(refused.is_empty(), !faults_of.contains_key("p--a"));
        let paired = rows.iter().filter(|(s, _, _)| *s).count() as u64;
        prop_assert_eq!(report.events_replayed, paired);
        prop_assert_eq!(report.stopped.is_some(), paired < rows.len() as u64);
    }
}
