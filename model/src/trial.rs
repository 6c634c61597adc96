//! A trial's evidence beside its plan's forecast (issue 45): for each transition, the rate
//! the plan's replay predicted per 100 deliveries, the rate the trial observed on live
//! deliveries, the 95 % interval the observed rate should fall in if the forecast holds,
//! and flags where it does not — above all a transition the replay never saw. Pure
//! arithmetic over counts, so the report reads pre-aggregated tallies and never a delivery.
//!
//! The interval accounts for both samples: the replay's `m` deliveries (the forecast is an
//! estimate too) and the trial's `n`. It is centred on the forecast rate `p` with half-width
//! `1.96 · √(p̃(1 − p̃)(1/m + 1/n))`, where `p̃ = (k + 2)/(m + 4)` (Agresti–Coull) keeps a
//! transition the replay saw rarely or never from getting an interval of zero width.
//! docs/rule-packs/trials.md explains it for people.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::Label;
use crate::plan::Report;

/// z for a two-sided 95 % interval.
const Z95: f64 = 1.959_964;

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
/// unchanged), and how many of the evaluated ones made each transition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub seen: u64,
    pub evaluated: u64,
    pub transitions: BTreeMap<Move, u64>,
}

impl Observed {
    /// Counts one live delivery: `after` is the candidate's decision, `None` when the trial
    /// evaluation was shed.
    pub fn record(&mut self, before: &Label<'_>, after: Option<&Label<'_>>) {
        self.seen += 1;
        let Some(after) = after else {
            return;
        };
        self.evaluated += 1;
        if before != after {
            *self
                .transitions
                .entry((before.clone().into_owned(), after.clone().into_owned()))
                .or_default() += 1;
        }
    }

    /// Deliveries the trial saw but did not evaluate (shed under load).
    pub fn not_evaluated(&self) -> u64 {
        self.seen - self.evaluated
    }

    /// Two tallies as one (each replica of control keeps its own).
    pub fn merge(&mut self, other: &Observed) {
        self.seen += other.seen;
        self.evaluated += other.evaluated;
        for (m, n) in &other.transitions {
            *self.transitions.entry(m.clone()).or_default() += n;
        }
    }
}

/// One transition's forecast beside what the trial observed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TransitionEvidence {
    pub from: Label<'static>,
    pub to: Label<'static>,
    /// Deliveries the replay saw make it, and the trial.
    pub forecast_count: u64,
    pub observed_count: u64,
    /// Per 100 deliveries.
    pub forecast_rate: f64,
    pub observed_rate: f64,
    /// Where the observed rate (per 100) falls 95 % of the time if the forecast holds.
    pub interval: [f64; 2],
    /// The observed rate falls outside the interval.
    pub outside: bool,
    /// The replay never saw this transition; the trial did.
    pub unforeseen: bool,
    /// The replay predicted it; the trial has not seen it.
    pub unobserved: bool,
    /// Lost work ([`Label::loses_work`]).
    pub loses_work: bool,
}

/// Why a trial's evidence is not enough to promote on without an explicit opt-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Insufficient {
    /// Fewer evaluated deliveries than the minimum.
    TooFewDeliveries { evaluated: u64, minimum: u64 },
    /// A transition the replay predicted that the trial never observed.
    PredictedNotObserved {
        from: Label<'static>,
        to: Label<'static>,
    },
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
    /// The saved configuration is no longer the one the trial ran beside: its evidence
    /// compares the candidate with rules that are not live any more.
    Stale,
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

/// Each transition either side saw, forecast beside observed: lost work first, then what
/// the replay never saw, then the rest by how many the trial observed.
pub fn compare(forecast: &Forecast, observed: &Observed) -> Vec<TransitionEvidence> {
    let moves: BTreeSet<&Move> = forecast
        .transitions
        .keys()
        .chain(observed.transitions.keys())
        .collect();
    let (m, n) = (forecast.deliveries, observed.evaluated);
    let mut out: Vec<TransitionEvidence> = moves
        .into_iter()
        .map(|mv| {
            let k = forecast.transitions.get(mv).copied().unwrap_or(0);
            let o = observed.transitions.get(mv).copied().unwrap_or(0);
            let observed_rate = per_100(o, n);
            let interval = interval(k, m, n);
            TransitionEvidence {
                from: mv.0.clone(),
                to: mv.1.clone(),
                forecast_count: k,
                observed_count: o,
                forecast_rate: per_100(k, m),
                observed_rate,
                interval,
                outside: n > 0 && (observed_rate < interval[0] || observed_rate > interval[1]),
                unforeseen: k == 0 && o > 0,
                unobserved: k > 0 && o == 0,
                loses_work: Label::loses_work(&mv.0, &mv.1),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.loses_work
            .cmp(&a.loses_work)
            .then(b.unforeseen.cmp(&a.unforeseen))
            .then(b.observed_count.cmp(&a.observed_count))
            .then(b.forecast_count.cmp(&a.forecast_count))
    });
    out
}

/// Why the evidence is not enough (empty: it is): too few evaluated deliveries, or a
/// predicted transition the trial never observed.
pub fn insufficient(
    evidence: &[TransitionEvidence],
    observed: &Observed,
    minimum: u64,
) -> Vec<Insufficient> {
    let mut why = Vec::new();
    if observed.evaluated < minimum {
        why.push(Insufficient::TooFewDeliveries {
            evaluated: observed.evaluated,
            minimum,
        });
    }
    why.extend(evidence.iter().filter(|e| e.unobserved).map(|e| {
        Insufficient::PredictedNotObserved {
            from: e.from.clone(),
            to: e.to.clone(),
        }
    }));
    why
}

fn per_100(count: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        100.0 * count as f64 / of as f64
    }
}

/// The 95 % interval (per 100) for a trial of `n` deliveries if `k` of the replay's `m`
/// made the transition (module docs). Without a replay or a trial, anything goes.
fn interval(k: u64, m: u64, n: u64) -> [f64; 2] {
    if m == 0 || n == 0 {
        return [0.0, 100.0];
    }
    let p = k as f64 / m as f64;
    let adjusted = (k as f64 + 2.0) / (m as f64 + 4.0);
    let half = Z95 * (adjusted * (1.0 - adjusted) * (1.0 / m as f64 + 1.0 / n as f64)).sqrt();
    [100.0 * (p - half).max(0.0), 100.0 * (p + half).min(1.0)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str) -> Label<'static> {
        Label::queue(name).into_owned()
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
            observed.record(&before, Some(&after));
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
            observed.record(&q("ci"), Some(&Label::Drop));
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
            observed.record(&q("forge"), Some(&q("forge")));
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
            let after = if i % 3 == 0 { Label::Drop } else { q("x") };
            let shed = i % 7 == 0;
            let tally = if i % 2 == 0 { &mut a } else { &mut b };
            tally.record(&q("x"), (!shed).then_some(&after));
            all.record(&q("x"), (!shed).then_some(&after));
        }
        a.merge(&b);
        assert_eq!(a, all);
    }
}
