//! A trial's evidence beside its plan's forecast: for each transition, the rate the plan's
//! replay predicted per 100 deliveries, the rate the trial observed on live deliveries, the
//! 95 % interval the observed rate should fall in if the forecast holds, and flags where it
//! does not — above all a transition the replay never saw.
//!
//! The interval accounts for both samples: the replay's `m` deliveries (the forecast is an
//! estimate too) and the trial's `n`. It is centred on the forecast rate `p` with half-width
//! `1.96 · √(p̃(1 − p̃)(1/m + 1/n))`, where `p̃ = (k + 2)/(m + 4)` (Agresti–Coull) keeps a
//! transition the replay saw rarely or never from getting an interval of zero width.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Forecast, Move, Observed};
use crate::Label;

/// z for a two-sided 95 % interval.
const Z95: f64 = 1.959_964;

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

impl std::fmt::Display for Insufficient {
    /// Why, in words, as every surface says it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Insufficient::TooFewDeliveries { evaluated, minimum } => write!(
                f,
                "too few deliveries: {evaluated} evaluated, at least {minimum} are needed"
            ),
            Insufficient::PredictedNotObserved { from, to } => write!(
                f,
                "the replay predicted {from} → {to}, and the trial never observed it"
            ),
        }
    }
}

/// A flag of a transition's evidence, as every surface names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    LostWork,
    Unforeseen,
    Outside,
    Unobserved,
}

impl Flag {
    /// The flag in words.
    pub const fn words(self) -> &'static str {
        match self {
            Flag::LostWork => "lost work",
            Flag::Unforeseen => "unforeseen",
            Flag::Outside => "outside the interval",
            Flag::Unobserved => "not observed",
        }
    }
}

impl TransitionEvidence {
    /// Its flags, in the order they are shown: lost work, unforeseen, outside, unobserved.
    pub fn flags(&self) -> Vec<Flag> {
        [
            (self.loses_work, Flag::LostWork),
            (self.unforeseen, Flag::Unforeseen),
            (self.outside, Flag::Outside),
            (self.unobserved, Flag::Unobserved),
        ]
        .into_iter()
        .filter_map(|(set, flag)| set.then_some(flag))
        .collect()
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
