//! A trial's report as `RuleTrial`, both ways: control sends it (alone, or inside a
//! promotion's plan) and the surfaces read it back into the model's [`TrialReport`].

use switchboard_model::Label;
use switchboard_model::plan::Report;
use switchboard_model::trial::{
    Insufficient, TransitionEvidence, TrialDeliveries, TrialEnd, TrialReport, TrialState,
};

use crate::control::v1 as pb;
use crate::convert::time;
use pb::insufficient::Reason as Why;

impl From<TrialEnd> for pb::TrialEnd {
    fn from(e: TrialEnd) -> Self {
        match e {
            TrialEnd::Stopped => pb::TrialEnd::Stopped,
            TrialEnd::MaxDeliveries => pb::TrialEnd::MaxDeliveries,
            TrialEnd::MaxDuration => pb::TrialEnd::MaxDuration,
            TrialEnd::Stale => pb::TrialEnd::Stale,
            TrialEnd::Promoted => pb::TrialEnd::Promoted,
            TrialEnd::Breached => pb::TrialEnd::Breached,
        }
    }
}

/// A wire end as the typed one; unspecified (or one this build does not know) is none.
pub fn trial_end(e: i32) -> Option<TrialEnd> {
    match pb::TrialEnd::try_from(e).ok()? {
        pb::TrialEnd::Unspecified => None,
        pb::TrialEnd::Stopped => Some(TrialEnd::Stopped),
        pb::TrialEnd::MaxDeliveries => Some(TrialEnd::MaxDeliveries),
        pb::TrialEnd::MaxDuration => Some(TrialEnd::MaxDuration),
        pb::TrialEnd::Stale => Some(TrialEnd::Stale),
        pb::TrialEnd::Promoted => Some(TrialEnd::Promoted),
        pb::TrialEnd::Breached => Some(TrialEnd::Breached),
    }
}

/// A label control sent; one this build does not know is left out, not guessed.
fn label(text: &str) -> Option<Label<'static>> {
    text.parse().ok()
}

impl From<&TrialReport> for pb::RuleTrial {
    // The deprecated RFC 3339 text fields are filled beside their Timestamps for one release.
    #[allow(deprecated)]
    fn from(t: &TrialReport) -> Self {
        pb::RuleTrial {
            trial_id: t.trial_id.clone(),
            webhook_id: t.webhook_id.clone(),
            plan_id: t.plan_id.clone(),
            state: match t.state {
                TrialState::Running => pb::TrialState::Running,
                TrialState::Ended => pb::TrialState::Ended,
            } as i32,
            end: t.end.map_or(pb::TrialEnd::Unspecified, pb::TrialEnd::from) as i32,
            started_at: t.started_at.clone(),
            started_by: t.started_by.clone(),
            ended_at: t.ended_at.clone(),
            ends_at: t.ends_at.clone(),
            started_at_time: time::from_rfc3339_opt(&t.started_at),
            ended_at_time: t.ended_at.as_deref().and_then(time::from_rfc3339_opt),
            ends_at_time: time::from_rfc3339_opt(&t.ends_at),
            max_deliveries: t.max_deliveries,
            candidate_digest: t.candidate_digest.clone(),
            base_config_digest: t.base_config_digest.clone(),
            deliveries: Some(pb::TrialDeliveries {
                seen: t.deliveries.seen,
                evaluated: t.deliveries.evaluated,
                not_evaluated: t.deliveries.not_evaluated,
            }),
            report: Some(pb::ReplayReport::from(&t.report)),
            forecast_deliveries: t.forecast_deliveries,
            evidence: t
                .evidence
                .iter()
                .map(|e| pb::TransitionEvidence {
                    from: e.from.to_string(),
                    to: e.to.to_string(),
                    forecast_count: e.forecast_count,
                    observed_count: e.observed_count,
                    forecast_rate: e.forecast_rate,
                    observed_rate: e.observed_rate,
                    interval_low: e.interval[0],
                    interval_high: e.interval[1],
                    outside: e.outside,
                    unforeseen: e.unforeseen,
                    unobserved: e.unobserved,
                    loses_work: e.loses_work,
                })
                .collect(),
            sufficient: t.sufficient,
            insufficient: t
                .insufficient
                .iter()
                .map(|i| pb::Insufficient {
                    reason: Some(match i {
                        Insufficient::TooFewDeliveries { evaluated, minimum } => {
                            Why::TooFewDeliveries(pb::TooFewDeliveries {
                                evaluated: *evaluated,
                                minimum: *minimum,
                            })
                        }
                        Insufficient::PredictedNotObserved { from, to } => {
                            Why::PredictedNotObserved(pb::PredictedNotObserved {
                                from: from.to_string(),
                                to: to.to_string(),
                            })
                        }
                    }),
                })
                .collect(),
            digest: t.digest.clone(),
        }
    }
}

impl From<pb::RuleTrial> for TrialReport {
    fn from(t: pb::RuleTrial) -> Self {
        let deliveries = t.deliveries.unwrap_or_default();
        TrialReport {
            trial_id: t.trial_id,
            webhook_id: t.webhook_id,
            plan_id: t.plan_id,
            state: match pb::TrialState::try_from(t.state) {
                Ok(pb::TrialState::Ended) => TrialState::Ended,
                _ => TrialState::Running,
            },
            end: trial_end(t.end),
            started_at: time::to_rfc3339_or_empty(t.started_at_time.as_ref()),
            started_by: t.started_by,
            ended_at: time::to_rfc3339_opt(t.ended_at_time.as_ref()),
            ends_at: time::to_rfc3339_or_empty(t.ends_at_time.as_ref()),
            max_deliveries: t.max_deliveries,
            candidate_digest: t.candidate_digest,
            base_config_digest: t.base_config_digest,
            deliveries: TrialDeliveries {
                seen: deliveries.seen,
                evaluated: deliveries.evaluated,
                not_evaluated: deliveries.not_evaluated,
            },
            report: t.report.map(Report::from).unwrap_or_default(),
            forecast_deliveries: t.forecast_deliveries,
            evidence: t
                .evidence
                .into_iter()
                .filter_map(|e| {
                    Some(TransitionEvidence {
                        from: label(&e.from)?,
                        to: label(&e.to)?,
                        forecast_count: e.forecast_count,
                        observed_count: e.observed_count,
                        forecast_rate: e.forecast_rate,
                        observed_rate: e.observed_rate,
                        interval: [e.interval_low, e.interval_high],
                        outside: e.outside,
                        unforeseen: e.unforeseen,
                        unobserved: e.unobserved,
                        loses_work: e.loses_work,
                    })
                })
                .collect(),
            sufficient: t.sufficient,
            insufficient: t
                .insufficient
                .into_iter()
                .filter_map(|i| match i.reason? {
                    Why::TooFewDeliveries(r) => Some(Insufficient::TooFewDeliveries {
                        evaluated: r.evaluated,
                        minimum: r.minimum,
                    }),
                    Why::PredictedNotObserved(r) => Some(Insufficient::PredictedNotObserved {
                        from: label(&r.from)?,
                        to: label(&r.to)?,
                    }),
                })
                .collect(),
            digest: t.digest,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use switchboard_model::plan::Routed;
    use switchboard_model::trial::{Forecast, Observed, TrialFacts, TrialLimits};

    use super::*;

    /// A trial report through the message and back is the same report, as JSON.
    #[test]
    fn a_trial_report_survives_the_wire() {
        let forge = Label::queue("forge").into_owned();
        let mut observed = Observed::default();
        for i in 0..30 {
            let after = Routed {
                label: if i % 3 == 0 {
                    Label::Drop
                } else {
                    forge.clone()
                },
                rule_id: (i % 3 == 0).then(|| "bots".to_string()),
            };
            observed.record(&forge, Some(&after));
        }
        observed.record(&Label::Default, None);
        let forecast = Forecast {
            deliveries: 50,
            transitions: BTreeMap::from([((Label::Default, Label::Quarantine), 5)]),
        };
        let examples = BTreeMap::from([((forge.clone(), Label::Drop), vec!["ev_1".into()])]);
        let rules = vec!["bots".to_string()];
        let report = TrialReport::build(
            &TrialFacts {
                trial_id: "tr_1",
                webhook_id: "wh_1",
                plan_id: "pl_1",
                started_at_ms: 1_000,
                started_by: "ep_1",
                ended_at_ms: Some(90_000_000),
                end: Some(TrialEnd::Promoted),
                limits: TrialLimits {
                    max_deliveries: Some(500),
                    ..TrialLimits::default()
                },
                candidate_digest: "c",
                base_config_digest: "b",
                forecast: &forecast,
                observed: &observed,
                examples: &examples,
                candidate_rule_ids: &rules,
                from_pack: &|_| Some("drop-ci-noise".into()),
                fail_closed: false,
            },
            100_000_000,
            200,
        );
        assert_eq!(report.insufficient.len(), 2, "{:?}", report.insufficient);
        let json = serde_json::to_value(&report).expect("json");
        let back = TrialReport::from(pb::RuleTrial::from(&report));
        assert_eq!(serde_json::to_value(&back).expect("json"), json);
    }
}
