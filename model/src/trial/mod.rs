//! Trials (issue 45): a plan's candidate running beside a webhook's live rules on its live
//! deliveries, routing nothing. What a trial observed is tallied as deliveries come
//! ([`Observed`]), so everything it reports is arithmetic over counts and never reads a
//! delivery: [`evidence`] sets each transition's observed rate beside the rate the plan's
//! replay forecast, and [`report`] assembles the trial report in the plan report's own terms.
//! docs/rule-packs/trials.md explains it for people.

mod evidence;
mod report;

pub use evidence::*;
pub use report::*;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Label;
use crate::plan::report::{Report, Routed, Totals};

/// The trial deliveries below which a trial says too little (issue 45's default).
pub const DEFAULT_MIN_DELIVERIES: u64 = 200;

/// A transition: what the live rules decided (`from`) and what the candidate decides (`to`).
pub type Move = (Label<'static>, Label<'static>);

/// What the plan's replay predicted: over how many deliveries, how many made each
/// transition (unchanged decisions are not transitions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forecast {
    pub deliveries: u64,
    pub transitions: BTreeMap<Move, u64>,
}

impl Forecast {
    /// The forecast a plan's replay report makes.
    pub fn of(report: &Report) -> Self {
        let mut transitions = BTreeMap::new();
        for t in &report.transitions {
            *transitions
                .entry((t.from.clone(), t.to.clone()))
                .or_default() += t.count;
        }
        Forecast {
            deliveries: report.events_replayed,
            transitions,
        }
    }
}

/// What a trial observed, pre-aggregated as deliveries come: how many it saw, how many it
/// evaluated (the rest were shed under load and are reported as not evaluated, never as
/// unchanged), how many of the evaluated ones made each transition or kept their decision,
/// and per candidate rule how many it decided first or faulted on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub seen: u64,
    pub evaluated: u64,
    /// Evaluated deliveries whose decision the candidate changes, per transition.
    pub transitions: BTreeMap<Move, u64>,
    /// Evaluated deliveries the candidate decides as the live rules did, per label.
    pub unchanged: BTreeMap<Label<'static>, u64>,
    /// Per candidate rule id: deliveries it decided first, and faults.
    pub rules: BTreeMap<String, RuleTally>,
}

/// One candidate rule's share of a trial's evaluated deliveries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleTally {
    /// Deliveries the rule decided (the first rule that matched).
    pub first_matches: u64,
    /// Deliveries the rule faulted on.
    pub faults: u64,
}

impl Observed {
    /// Counts one live delivery: `before` is the live decision; `after` the candidate's,
    /// `None` when the trial evaluation was shed or left unevaluated.
    pub fn record(&mut self, before: &Label<'_>, after: Option<&Routed>) {
        self.seen += 1;
        let Some(after) = after else {
            return;
        };
        self.evaluated += 1;
        if *before == after.label {
            *self
                .unchanged
                .entry(before.clone().into_owned())
                .or_default() += 1;
        } else {
            *self
                .transitions
                .entry((before.clone().into_owned(), after.label.clone()))
                .or_default() += 1;
        }
        if let Some(rule) = &after.rule_id {
            let tally = self.rules.entry(rule.clone()).or_default();
            if after.label == Label::Fault {
                tally.faults += 1;
            } else {
                tally.first_matches += 1;
            }
        }
    }

    /// Deliveries the trial saw but did not evaluate (shed under load).
    pub fn not_evaluated(&self) -> u64 {
        self.seen.saturating_sub(self.evaluated)
    }

    /// Evaluated deliveries per label, under the live rules (`before`) and the candidate.
    pub fn totals(&self) -> Totals {
        let mut totals = Totals::default();
        for (label, n) in &self.unchanged {
            *totals.before.entry(label.clone()).or_default() += n;
            *totals.after.entry(label.clone()).or_default() += n;
        }
        for ((from, to), n) in &self.transitions {
            *totals.before.entry(from.clone()).or_default() += n;
            *totals.after.entry(to.clone()).or_default() += n;
        }
        totals
    }

    /// The same tally read the other way round. A guard (issue 46) is counted as a trial is,
    /// live decision first and shadow's second; the live rules are the confirmed ones and the
    /// shadow the replaced ones, so its transitions read as the change's — from the old
    /// decision to the new one — once reversed. Rule tallies stay the shadow's.
    pub fn reversed(&self) -> Observed {
        Observed {
            transitions: self
                .transitions
                .iter()
                .map(|((from, to), n)| ((to.clone(), from.clone()), *n))
                .collect(),
            ..self.clone()
        }
    }

    /// Two tallies as one (each replica of control keeps its own).
    pub fn merge(&mut self, other: &Observed) {
        self.seen += other.seen;
        self.evaluated += other.evaluated;
        for (m, n) in &other.transitions {
            *self.transitions.entry(m.clone()).or_default() += n;
        }
        for (l, n) in &other.unchanged {
            *self.unchanged.entry(l.clone()).or_default() += n;
        }
        for (r, t) in &other.rules {
            let mine = self.rules.entry(r.clone()).or_default();
            mine.first_matches += t.first_matches;
            mine.faults += t.faults;
        }
    }
}

/// How long a trial runs when its start names no limit: a week (issue 45).
pub const DEFAULT_MAX_DURATION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// What ends a trial on its own, set when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TrialLimits {
    /// Ends after this many live deliveries seen; none: no count limit.
    pub max_deliveries: Option<u64>,
    /// Ends this long after it started.
    pub max_duration_ms: i64,
}

impl Default for TrialLimits {
    fn default() -> Self {
        TrialLimits {
            max_deliveries: None,
            max_duration_ms: DEFAULT_MAX_DURATION_MS,
        }
    }
}

/// Why a trial ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TrialEnd {
    /// Its owner stopped it (`stop_rule_trial`).
    Stopped,
    /// It saw `max_deliveries`.
    MaxDeliveries,
    /// `max_duration` passed.
    MaxDuration,
    /// Promoted (`promote_rule_trial`): its evidence is frozen in the plan that makes its
    /// candidate live.
    Promoted,
    /// The saved configuration is no longer the one the trial ran beside: its evidence
    /// compares the candidate with rules that are not live any more.
    Stale,
    /// A guard's (issue 46): the change it watched lost more work than its forecast allowed.
    Breached,
}

impl TrialLimits {
    /// Whether a running trial ends now, and why: stale first (whatever else, its evidence
    /// no longer describes the live rules), then its limits.
    pub fn ended(
        &self,
        started_at_ms: i64,
        now_ms: i64,
        seen: u64,
        base_digest: &str,
        saved_digest: &str,
    ) -> Option<TrialEnd> {
        if base_digest != saved_digest {
            Some(TrialEnd::Stale)
        } else if self.max_deliveries.is_some_and(|max| seen >= max) {
            Some(TrialEnd::MaxDeliveries)
        } else if now_ms.saturating_sub(started_at_ms) >= self.max_duration_ms {
            Some(TrialEnd::MaxDuration)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str) -> Label<'static> {
        Label::queue(name).into_owned()
    }

    /// The candidate's decision by no rule (the default's, or a label only).
    fn to(label: &Label<'static>) -> Routed {
        Routed {
            label: label.clone(),
            rule_id: None,
        }
    }

    /// A trial that sees what the replay saw, at the same rates, is inside every interval;
    /// a transition the replay never saw is flagged and listed right after lost work.
    #[test]
    fn a_trial_like_its_replay_is_inside_and_an_unforeseen_transition_is_flagged() {
        let forecast = Forecast {
            deliveries: 1000,
            transitions: BTreeMap::from([
                ((q("forge"), Label::Drop), 100),
                ((Label::Default, q("forge")), 50),
            ]),
        };
        let mut observed = Observed::default();
        for i in 0..2000 {
            let (before, after) = match i % 20 {
                0 | 1 => (q("forge"), Label::Drop),
                2 => (Label::Default, q("forge")),
                _ => (q("ci"), q("ci")),
            };
            observed.record(&before, Some(&to(&after)));
        }
        let evidence = compare(&forecast, &observed);
        assert_eq!(evidence.len(), 2);
        assert!(
            evidence.iter().all(|e| !e.outside && !e.unforeseen),
            "{evidence:?}"
        );
        assert!(evidence[0].loses_work);
        assert_eq!(
            (evidence[0].forecast_rate, evidence[0].observed_rate),
            (10.0, 10.0)
        );
        assert!(insufficient(&evidence, &observed, DEFAULT_MIN_DELIVERIES).is_empty());

        // check_suite deliveries arrive that the window never held, and the candidate drops
        // them: unforeseen, outside, and lost work.
        for _ in 0..100 {
            observed.record(&q("ci"), Some(&to(&Label::Drop)));
        }
        let evidence = compare(&forecast, &observed);
        let ci = evidence
            .iter()
            .find(|e| e.from == q("ci"))
            .expect("the new transition");
        assert!(ci.unforeseen && ci.outside && ci.loses_work, "{ci:?}");
        assert_eq!(ci.forecast_count, 0);
        assert_eq!(evidence[0].from, q("ci"), "unforeseen lost work first");
    }

    /// Too few deliveries, or a predicted transition never observed, is insufficient; a
    /// shed evaluation counts as seen, not as unchanged.
    #[test]
    fn a_short_trial_or_a_missing_transition_is_insufficient() {
        let forecast = Forecast {
            deliveries: 500,
            transitions: BTreeMap::from([((q("forge"), Label::Quarantine), 25)]),
        };
        let mut observed = Observed::default();
        for _ in 0..150 {
            observed.record(&q("forge"), Some(&to(&q("forge"))));
        }
        observed.record(&q("forge"), None);
        assert_eq!(
            (observed.seen, observed.evaluated, observed.not_evaluated()),
            (151, 150, 1)
        );
        let evidence = compare(&forecast, &observed);
        assert!(
            evidence[0].unobserved && evidence[0].outside,
            "{evidence:?}"
        );
        assert_eq!(
            insufficient(&evidence, &observed, DEFAULT_MIN_DELIVERIES),
            vec![
                Insufficient::TooFewDeliveries {
                    evaluated: 150,
                    minimum: 200
                },
                Insufficient::PredictedNotObserved {
                    from: q("forge"),
                    to: Label::Quarantine
                },
            ]
        );
    }

    /// A trial ends as stale when the saved configuration moved, whatever its limits; else at
    /// its delivery count or its duration (a week by default).
    #[test]
    fn a_trial_ends_stale_first_then_at_its_limits() {
        let week = TrialLimits::default();
        assert_eq!(week.ended(0, 1000, 10, "a", "a"), None);
        assert_eq!(
            week.ended(0, DEFAULT_MAX_DURATION_MS, 10, "a", "a"),
            Some(TrialEnd::MaxDuration)
        );
        let thousand = TrialLimits {
            max_deliveries: Some(1000),
            ..TrialLimits::default()
        };
        assert_eq!(thousand.ended(0, 1, 999, "a", "a"), None);
        assert_eq!(
            thousand.ended(0, 1, 1000, "a", "a"),
            Some(TrialEnd::MaxDeliveries)
        );
        assert_eq!(thousand.ended(0, 1, 1000, "a", "b"), Some(TrialEnd::Stale));
        assert_eq!(
            serde_json::to_string(&TrialEnd::MaxDeliveries).expect("json"),
            r#""max_deliveries""#
        );
    }

    /// Two replicas' tallies merged are the tally of all their deliveries.
    #[test]
    fn tallies_merge() {
        let (mut a, mut b, mut all) = (
            Observed::default(),
            Observed::default(),
            Observed::default(),
        );
        for i in 0..30u32 {
            let after = Routed {
                label: if i % 3 == 0 { Label::Drop } else { q("x") },
                rule_id: Some(format!("r{}", i % 4)),
            };
            let shed = i % 7 == 0;
            let tally = if i % 2 == 0 { &mut a } else { &mut b };
            tally.record(&q("x"), (!shed).then_some(&after));
            all.record(&q("x"), (!shed).then_some(&after));
        }
        a.merge(&b);
        assert_eq!(a, all);
    }
}
