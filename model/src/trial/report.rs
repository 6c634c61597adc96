//! The trial report (`get_rule_trial`): the plan's own report, made from a trial's live
//! deliveries instead of a replay, beside the evidence against the plan's forecast. Built from
//! pre-aggregated counts only, so it costs the same over ten deliveries or ten million, and
//! holds decisions, counts and event ids — never payload text (REQ-5).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{
    Forecast, Insufficient, Move, Observed, TransitionEvidence, TrialEnd, TrialLimits, compare,
    insufficient,
};
use crate::plan::report::{Report, RuleReport, TodosPerDay, Transition};
use crate::{Label, rfc3339_millis, write_canonical};

/// What a trial report is made from: the trial as stored, with its tallies.
pub struct TrialFacts<'a> {
    pub trial_id: &'a str,
    pub webhook_id: &'a str,
    pub plan_id: &'a str,
    pub started_at_ms: i64,
    pub started_by: &'a str,
    pub ended_at_ms: Option<i64>,
    pub end: Option<TrialEnd>,
    pub limits: TrialLimits,
    pub candidate_digest: &'a str,
    pub base_config_digest: &'a str,
    pub forecast: &'a Forecast,
    pub observed: &'a Observed,
    /// Up to 20 event ids per observed transition.
    pub examples: &'a BTreeMap<Move, Vec<String>>,
    /// The candidate's rule ids, in order.
    pub candidate_rule_ids: &'a [String],
    /// The pack a candidate rule comes from, if any.
    pub from_pack: &'a dyn Fn(&str) -> Option<String>,
    /// The webhook quarantines faults (trusted actors), so a fault delivers no work.
    pub fail_closed: bool,
}

/// Whether a trial still runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TrialState {
    #[default]
    Running,
    Ended,
}

/// A trial's live deliveries: each is seen, and evaluated unless it was shed under load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct TrialDeliveries {
    pub seen: u64,
    pub evaluated: u64,
    /// Seen but not evaluated (shed under load, or left unevaluated by a router): counted
    /// apart, never as unchanged.
    pub not_evaluated: u64,
}

/// A trial as its owner reads it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct TrialReport {
    pub trial_id: String,
    pub webhook_id: String,
    /// The plan whose candidate is on trial.
    pub plan_id: String,
    pub state: TrialState,
    /// Why it ended, once it has.
    pub end: Option<TrialEnd>,
    /// RFC 3339.
    pub started_at: String,
    /// The endpoint or person who started it.
    pub started_by: String,
    pub ended_at: Option<String>,
    /// When it ends by itself (its max_duration), unless it ends before.
    pub ends_at: String,
    /// It ends by itself after this many deliveries seen, if set.
    pub max_deliveries: Option<u64>,
    /// The candidate on trial and the saved configuration it runs beside (sha256 hex).
    pub candidate_digest: String,
    pub base_config_digest: String,
    pub deliveries: TrialDeliveries,
    /// The plan's report over the trial's evaluated deliveries: before is the live decision,
    /// after the candidate's; the window is the trial's time so far.
    pub report: Report,
    /// Deliveries the plan's replay saw (its forecast's sample).
    pub forecast_deliveries: u64,
    /// Each transition the replay forecast or the trial observed: lost work first, then
    /// what the replay never saw.
    pub evidence: Vec<TransitionEvidence>,
    /// The evidence is enough to promote on without an explicit opt-in.
    pub sufficient: bool,
    /// Why it is not (empty when it is).
    pub insufficient: Vec<Insufficient>,
    /// sha256 (hex) of the trial's counts: a promotion's token binds it.
    pub digest: String,
}

impl TrialReport {
    /// The report at `now_ms`, insufficient below `minimum` evaluated deliveries.
    pub fn build(facts: &TrialFacts<'_>, now_ms: i64, minimum: u64) -> TrialReport {
        let observed = facts.observed;
        let until = facts.ended_at_ms.unwrap_or(now_ms).max(facts.started_at_ms);
        let mut transitions: Vec<Transition> = observed
            .transitions
            .iter()
            .map(|(mv, n)| Transition {
                from: mv.0.clone(),
                to: mv.1.clone(),
                count: *n,
                example_event_ids: facts.examples.get(mv).cloned().unwrap_or_default(),
                by_rules: Vec::new(),
            })
            .collect();
        transitions.sort_by(Transition::report_order);
        let totals = observed.totals();
        let work = |side: &BTreeMap<Label<'static>, u64>| -> u64 {
            side.iter()
                .filter(|(l, _)| l.delivers_work(facts.fail_closed))
                .map(|(_, n)| n)
                .sum()
        };
        // A trial under an hour old counts as an hour, as a replay window does.
        let span_ms = (until - facts.started_at_ms).max(3_600_000) as f64;
        let per_day = |n: u64| ((n as f64) * 86_400_000.0 / span_ms * 10.0).round() / 10.0;
        let report = Report {
            events_replayed: observed.evaluated,
            window_from: Some(rfc3339_millis(facts.started_at_ms)),
            window_to: Some(rfc3339_millis(until)),
            todos_per_day: TodosPerDay {
                before: per_day(work(&totals.before)),
                after: per_day(work(&totals.after)),
            },
            totals,
            changed: observed.transitions.values().sum(),
            transitions,
            rules: facts
                .candidate_rule_ids
                .iter()
                .map(|id| {
                    let tally = observed.rules.get(id).copied().unwrap_or_default();
                    RuleReport {
                        id: id.clone(),
                        first_matches: tally.first_matches,
                        faults: tally.faults,
                        from_pack: (facts.from_pack)(id),
                        never_matched: tally.first_matches == 0,
                    }
                })
                .collect(),
            truncated: false,
            stopped: None,
            retention: None,
        };
        let evidence = compare(facts.forecast, observed);
        let why = insufficient(&evidence, observed, minimum);
        TrialReport {
            trial_id: facts.trial_id.to_string(),
            webhook_id: facts.webhook_id.to_string(),
            plan_id: facts.plan_id.to_string(),
            state: if facts.ended_at_ms.is_some() {
                TrialState::Ended
            } else {
                TrialState::Running
            },
            end: facts.end,
            started_at: rfc3339_millis(facts.started_at_ms),
            started_by: facts.started_by.to_string(),
            ended_at: facts.ended_at_ms.map(rfc3339_millis),
            ends_at: rfc3339_millis(
                facts
                    .started_at_ms
                    .saturating_add(facts.limits.max_duration_ms),
            ),
            max_deliveries: facts.limits.max_deliveries,
            candidate_digest: facts.candidate_digest.to_string(),
            base_config_digest: facts.base_config_digest.to_string(),
            deliveries: TrialDeliveries {
                seen: observed.seen,
                evaluated: observed.evaluated,
                not_evaluated: observed.not_evaluated(),
            },
            digest: digest(facts, &report),
            report,
            forecast_deliveries: facts.forecast.deliveries,
            sufficient: why.is_empty(),
            insufficient: why,
            evidence,
        }
    }
}

/// The trial's counts and what they were counted against, hashed: equal while nothing more
/// is counted, so a promotion made from an ended trial stays bound to exactly its evidence.
fn digest(facts: &TrialFacts<'_>, report: &Report) -> String {
    let counted = serde_json::json!({
        "trial_id": facts.trial_id,
        "candidate_digest": facts.candidate_digest,
        "base_config_digest": facts.base_config_digest,
        "seen": facts.observed.seen,
        "evaluated": facts.observed.evaluated,
        "totals": report.totals,
        "transitions": report.transitions,
        "rules": report.rules,
        "ended_at": facts.ended_at_ms,
    });
    let mut text = String::new();
    write_canonical(&counted, &mut text);
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::report::Routed;

    fn routed(label: Label<'static>, rule: Option<&str>) -> Routed {
        Routed {
            label,
            rule_id: rule.map(str::to_string),
        }
    }

    /// The report reads as a plan's: totals over both sides, lost work first, per-rule first
    /// matches and faults with never-matched rules named, todos per day over the trial's
    /// time; the digest moves with the counts and nothing else.
    #[test]
    fn a_trial_reports_in_the_plan_reports_terms() {
        let forge = Label::queue("forge").into_owned();
        let mut observed = Observed::default();
        for i in 0..48u64 {
            let after = match i % 4 {
                0 => routed(Label::Drop, Some("bots")),
                1 => routed(Label::Fault, Some("slow")),
                _ => routed(forge.clone(), None),
            };
            observed.record(&forge, Some(&after));
        }
        observed.record(&forge, None);
        let examples = BTreeMap::from([((forge.clone(), Label::Drop), vec!["ev_1".to_string()])]);
        let forecast = Forecast {
            deliveries: 100,
            transitions: BTreeMap::from([((forge.clone(), Label::Drop), 25)]),
        };
        let rules = vec!["bots".to_string(), "slow".to_string(), "never".to_string()];
        let from_pack = |id: &str| (id == "bots").then(|| "drop-ci-noise".to_string());
        let facts = TrialFacts {
            trial_id: "tr_1",
            webhook_id: "wh_1",
            plan_id: "pl_1",
            started_at_ms: 0,
            started_by: "ep_1",
            ended_at_ms: None,
            end: None,
            limits: TrialLimits::default(),
            candidate_digest: "c",
            base_config_digest: "b",
            forecast: &forecast,
            observed: &observed,
            examples: &examples,
            candidate_rule_ids: &rules,
            from_pack: &from_pack,
            fail_closed: false,
        };
        // Two days in: 48 deliveries to a queue before, 24 after (faults still deliver
        // work when the webhook does not fail closed).
        let r = TrialReport::build(&facts, 2 * 86_400_000, 200);
        assert_eq!(
            r.deliveries,
            TrialDeliveries {
                seen: 49,
                evaluated: 48,
                not_evaluated: 1
            }
        );
        assert_eq!(r.report.events_replayed, 48);
        assert_eq!(r.report.totals.before.get(&forge), Some(&48));
        assert_eq!(r.report.totals.after.get(&Label::Drop), Some(&12));
        assert_eq!(r.report.changed, 24);
        assert_eq!(r.report.transitions[0].to, Label::Drop, "lost work first");
        assert_eq!(r.report.transitions[0].example_event_ids, ["ev_1"]);
        assert_eq!(
            r.report
                .rules
                .iter()
                .map(|r| (r.id.as_str(), r.first_matches, r.faults, r.never_matched))
                .collect::<Vec<_>>(),
            [
                ("bots", 12, 0, false),
                ("slow", 0, 12, true),
                ("never", 0, 0, true)
            ]
        );
        assert_eq!(
            r.report.rules[0].from_pack.as_deref(),
            Some("drop-ci-noise")
        );
        assert_eq!(r.report.todos_per_day.before, 24.0);
        assert_eq!(r.report.todos_per_day.after, 18.0);
        assert_eq!(r.state, TrialState::Running);
        assert!(!r.sufficient);
        assert!(matches!(
            r.insufficient[0],
            Insufficient::TooFewDeliveries { evaluated: 48, .. }
        ));
        // The digest is the counts': the same at another time, another with one more.
        let later = TrialReport::build(&facts, 3 * 86_400_000, 200);
        assert_eq!(later.digest, r.digest);
        let mut more = observed.clone();
        more.record(&forge, Some(&routed(forge.clone(), None)));
        let facts_more = TrialFacts {
            observed: &more,
            ..facts
        };
        assert_ne!(TrialReport::build(&facts_more, 0, 200).digest, r.digest);
    }
}
