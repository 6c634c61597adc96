//! Guards (issue 46): after a confirm, the configuration it replaced keeps running in the
//! shadow on live deliveries, and what the new configuration decides is set beside what the
//! old one would have — in the plan's own terms: a transition goes from the old decision to
//! the new one. This module is the judge: given the forecast the person approved (the plan's
//! replay) and what the guard observed, has the change lost more work, or faulted more, than
//! it promised? Pure arithmetic over counts; docs/rule-packs/guards.md states the statistics
//! for people.
//!
//! A guard breaches on any of:
//! - **lost work above the forecast**: the observed lost-work rate exceeds the forecast's by
//!   more than a one-sided bound, and at least `min_count` deliveries were lost;
//! - **faults above the forecast**: the same for deliveries the new configuration faults on;
//! - **unforeseen lost work**: a lost-work transition the replay never saw reaches
//!   `unforeseen_count` deliveries.
//!
//! The bound is the two-sample one the trial's interval uses (the forecast is an estimate too):
//! `z · √(p̃(1 − p̃)(1/m + 1/n))` with `p̃ = (k + 2)/(m + 4)` (Agresti–Coull), `m` replayed and
//! `n` observed deliveries. `z` is one-sided at 99.9 % (3.09), not 95 %: the guard looks again
//! after every batch, and each look is another chance of a false revert.

use serde::{Deserialize, Serialize};

use crate::Label;
use crate::trial::{Forecast, Move, Observed};

/// One-sided z at 99.9 %.
pub const Z_ONE_SIDED_999: f64 = 3.090_232;

/// When a guard judges, and how sure it must be.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Thresholds {
    /// Lost (or faulted) deliveries below which the rate test never breaches: one delivery
    /// cannot trip a guard.
    pub min_count: u64,
    /// Deliveries of one lost-work transition the replay never saw that breach by themselves.
    pub unforeseen_count: u64,
    /// One-sided z of the rate test.
    pub z: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_count: 5,
            unforeseen_count: 3,
            z: Z_ONE_SIDED_999,
        }
    }
}

/// What a breach does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum OnBreach {
    /// The webhook's configuration becomes again the version the change replaced.
    #[default]
    Revert,
    /// The breach is shown and counted; the configuration stays.
    Alert,
}

/// What a guard holds beside its counts: the change it watches, what a breach does, and once
/// it breached, why and what was done.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct GuardTerms {
    pub on_breach: OnBreach,
    /// The configuration version the confirm saved, and the one it replaced.
    pub confirmed_version: i64,
    pub replaced_version: i64,
    pub thresholds: Thresholds,
    /// What a revert restores beside the configuration: the installed packs and trusted
    /// actors of the replaced version.
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub replaced_packs: crate::provenance::Provenance,
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub replaced_trusted_actors: Option<crate::TrustedActors>,
    pub breach: Option<Breach>,
    /// The version the revert saved (none: not reverted, e.g. on `alert`, or because the
    /// webhook changed again after the confirm).
    pub reverted_version: Option<i64>,
}

/// Why a guard breached, with the numbers that decided it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Breach {
    /// More work lost than the forecast allows.
    LostWork(RateBreach),
    /// More faults than the forecast allows.
    Faults(RateBreach),
    /// A lost-work transition the replay never saw, seen `count` times.
    UnforeseenLostWork {
        from: Label<'static>,
        to: Label<'static>,
        count: u64,
    },
}

/// A rate over its bound: counts, rates per 100, and the highest rate the forecast allowed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RateBreach {
    pub forecast_count: u64,
    pub forecast_deliveries: u64,
    pub observed_count: u64,
    pub observed_deliveries: u64,
    pub forecast_rate: f64,
    pub observed_rate: f64,
    /// Per 100: the observed rate breaches above this.
    pub allowed_rate: f64,
}

impl std::fmt::Display for Breach {
    /// The breach in words, as every surface says it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = |f: &mut std::fmt::Formatter<'_>, what: &str, r: &RateBreach| {
            write!(
                f,
                "{what}: {} of {} deliveries ({:.1} per 100) against a forecast of {:.1} per 100 (at most {:.1} allowed)",
                r.observed_count,
                r.observed_deliveries,
                r.observed_rate,
                r.forecast_rate,
                r.allowed_rate
            )
        };
        match self {
            Breach::LostWork(r) => rate(f, "lost work above its forecast", r),
            Breach::Faults(r) => rate(f, "faults above their forecast", r),
            Breach::UnforeseenLostWork { from, to, count } => write!(
                f,
                "{count} deliveries went {from} -> {to}, lost work the replay never saw"
            ),
        }
    }
}

/// Judges what a guard observed (transitions from the old configuration's decision to the new
/// one's) against the plan's forecast. `None`: no breach (yet). The first breach found, in the
/// order the module lists them.
pub fn judge(forecast: &Forecast, observed: &Observed, t: &Thresholds) -> Option<Breach> {
    let lost = |mv: &Move| Label::loses_work(&mv.0, &mv.1);
    let faults = |mv: &Move| mv.1 == Label::Fault;
    if let Some(b) = rate_breach(forecast, observed, t, lost) {
        return Some(Breach::LostWork(b));
    }
    if let Some(b) = rate_breach(forecast, observed, t, faults) {
        return Some(Breach::Faults(b));
    }
    observed
        .transitions
        .iter()
        .filter(|(mv, count)| {
            lost(mv)
                && **count >= t.unforeseen_count.max(1)
                && forecast.transitions.get(*mv).copied().unwrap_or(0) == 0
        })
        .max_by_key(|(_, count)| **count)
        .map(|((from, to), count)| Breach::UnforeseenLostWork {
            from: from.clone(),
            to: to.clone(),
            count: *count,
        })
}

/// The rate test over the transitions `which` selects.
fn rate_breach(
    forecast: &Forecast,
    observed: &Observed,
    t: &Thresholds,
    which: impl Fn(&Move) -> bool,
) -> Option<RateBreach> {
    let sum = |map: &std::collections::BTreeMap<Move, u64>| -> u64 {
        map.iter().filter(|(mv, _)| which(mv)).map(|(_, n)| n).sum()
    };
    let (k, m) = (sum(&forecast.transitions), forecast.deliveries);
    let (o, n) = (sum(&observed.transitions), observed.evaluated);
    if o < t.min_count.max(1) || n == 0 {
        return None;
    }
    let allowed = allowed_rate(k, m, n, t.z);
    let observed_rate = o as f64 / n as f64;
    (observed_rate > allowed).then(|| RateBreach {
        forecast_count: k,
        forecast_deliveries: m,
        observed_count: o,
        observed_deliveries: n,
        forecast_rate: if m == 0 {
            0.0
        } else {
            100.0 * k as f64 / m as f64
        },
        observed_rate: 100.0 * observed_rate,
        allowed_rate: 100.0 * allowed,
    })
}

/// The highest observed rate (a fraction) consistent with `k` of `m` forecast, over `n`.
/// Without a replay the forecast says nothing, so only the unforeseen rule and the minimum
/// count stand: a rate of 0 is allowed to grow to the bound of an empty replay.
fn allowed_rate(k: u64, m: u64, n: u64, z: f64) -> f64 {
    let (k, m, n) = (k as f64, m as f64, n as f64);
    let p = if m == 0.0 { 0.0 } else { k / m };
    let adjusted = (k + 2.0) / (m + 4.0);
    let spread = if m == 0.0 { 1.0 / 4.0 } else { 1.0 / m };
    (p + z * (adjusted * (1.0 - adjusted) * (spread + 1.0 / n)).sqrt()).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn q(name: &str) -> Label<'static> {
        Label::queue(name).into_owned()
    }

    /// 200 replayed deliveries: 10 review -> drop (lost work, 5 %), 2 review -> fault (1 %).
    fn forecast() -> Forecast {
        Forecast {
            deliveries: 200,
            transitions: BTreeMap::from([
                ((q("review"), Label::Drop), 10),
                ((q("review"), Label::Fault), 2),
            ]),
        }
    }

    fn observed(n: u64, moves: &[(Move, u64)]) -> Observed {
        Observed {
            seen: n,
            evaluated: n,
            transitions: moves.iter().cloned().collect(),
            ..Observed::default()
        }
    }

    /// splitmix64: a stated, dependency-free stream of numbers for the simulations.
    struct Seeded(u64);
    impl Seeded {
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// 1,000 live deliveries drawn at the forecast's own rates, judged after every batch of
    /// 64 as the guard does: whether any look breached.
    fn simulate(seed: u64) -> Option<Breach> {
        let f = forecast();
        let mut rng = Seeded(seed);
        let mut seen = Observed::default();
        for n in 1..=1000u64 {
            let x = rng.next();
            let to = if x < 0.05 {
                Some(Label::Drop)
            } else if x < 0.06 {
                Some(Label::Fault)
            } else {
                None
            };
            seen.seen += 1;
            seen.evaluated += 1;
            if let Some(to) = to {
                *seen.transitions.entry((q("review"), to)).or_default() += 1;
            }
            if (n % 64 == 0 || n == 1000)
                && let Some(b) = judge(&f, &seen, &Thresholds::default())
            {
                return Some(b);
            }
        }
        None
    }

    #[test]
    fn deliveries_that_match_the_forecast_never_breach_with_the_stated_seed() {
        assert_eq!(simulate(46), None);
    }

    #[test]
    fn false_breaches_over_a_thousand_seeds_stay_rare() {
        // docs/rule-packs/guards.md states this rate.
        let false_breaches = (0..1000u64).filter(|s| simulate(*s).is_some()).count();
        eprintln!("false breaches: {false_breaches} of 1,000 runs");
        assert!(
            false_breaches <= 10,
            "{false_breaches} of 1,000 runs breached"
        );
    }

    #[test]
    fn lost_work_at_three_times_the_forecast_breaches_and_a_little_above_does_not() {
        let f = forecast();
        let t = Thresholds::default();
        let tripled = observed(300, &[((q("review"), Label::Drop), 45)]);
        let Some(Breach::LostWork(b)) = judge(&f, &tripled, &t) else {
            panic!("15 per 100 against 5 breaches");
        };
        assert_eq!((b.observed_count, b.observed_deliveries), (45, 300));
        // Lost work is the drops and the faults of queued work: 12 of 200.
        assert!((b.forecast_rate - 6.0).abs() < 1e-9, "{b:?}");
        assert!(b.allowed_rate > 6.0 && b.allowed_rate < 15.0, "{b:?}");
        // The borderline documented: 7 per 100 over 300 is within the bound.
        let above = observed(300, &[((q("review"), Label::Drop), 21)]);
        assert_eq!(judge(&f, &above, &t), None);
    }

    #[test]
    fn faults_above_their_forecast_breach() {
        let f = forecast();
        let faults = observed(400, &[((Label::Drop, Label::Fault), 30)]);
        assert!(matches!(
            judge(&f, &faults, &Thresholds::default()),
            Some(Breach::Faults(_))
        ));
    }

    #[test]
    fn unforeseen_lost_work_breaches_at_its_count_and_one_delivery_never_does() {
        let f = forecast();
        let t = Thresholds::default();
        let ci = (q("triage"), Label::Drop);
        assert_eq!(judge(&f, &observed(1000, &[(ci.clone(), 1)]), &t), None);
        assert_eq!(judge(&f, &observed(1000, &[(ci.clone(), 2)]), &t), None);
        let breach = judge(&f, &observed(1000, &[(ci.clone(), 3)]), &t);
        assert_eq!(
            breach,
            Some(Breach::UnforeseenLostWork {
                from: q("triage"),
                to: Label::Drop,
                count: 3
            })
        );
        assert_eq!(
            breach.map(|b| b.to_string()).as_deref(),
            Some("3 deliveries went queue:triage -> drop, lost work the replay never saw")
        );
        // Not lost work (a drop now queued), however many: no breach.
        let found = (Label::Drop, q("triage"));
        assert_eq!(judge(&f, &observed(1000, &[(found, 500)]), &t), None);
    }

    #[test]
    fn one_lost_delivery_never_trips_a_guard_whose_forecast_lost_none() {
        let none_lost = Forecast {
            deliveries: 200,
            transitions: BTreeMap::new(),
        };
        let t = Thresholds {
            unforeseen_count: 1000,
            ..Thresholds::default()
        };
        let one = observed(1, &[((q("review"), Label::Drop), 1)]);
        assert_eq!(judge(&none_lost, &one, &t), None, "below min_count");
        let many = observed(100, &[((q("review"), Label::Drop), 20)]);
        assert!(matches!(
            judge(&none_lost, &many, &t),
            Some(Breach::LostWork(_))
        ));
    }
}
