//! A guard (issue 46) as its messages, both ways: the guard a plan carries, what a planning
//! call asks of it, and a guard's report. Control sends them; the surfaces read them back.

use switchboard_model::Label;
use switchboard_model::guard::{
    Breach, GuardForecast, GuardOptions, GuardPlan, GuardReport, OnBreach, OnBreachFrom,
    RateBreach, Recovery, RecoveryState, Thresholds,
};
use switchboard_model::trial::TrialReport;

use crate::control::v1 as pb;

impl From<OnBreach> for pb::OnBreach {
    fn from(o: OnBreach) -> Self {
        match o {
            OnBreach::Revert => pb::OnBreach::Revert,
            OnBreach::Alert => pb::OnBreach::Alert,
        }
    }
}

/// A wire on-breach as the typed one; unspecified is none (the webhook's default).
pub fn on_breach(o: i32) -> Option<OnBreach> {
    match pb::OnBreach::try_from(o).ok()? {
        pb::OnBreach::Unspecified => None,
        pb::OnBreach::Revert => Some(OnBreach::Revert),
        pb::OnBreach::Alert => Some(OnBreach::Alert),
    }
}

fn on_breach_from(word: &str) -> OnBreachFrom {
    match word {
        "plan" => OnBreachFrom::Plan,
        "no_forecast" => OnBreachFrom::NoForecast,
        _ => OnBreachFrom::WebhookDefault,
    }
}

fn on_breach_from_word(from: OnBreachFrom) -> &'static str {
    match from {
        OnBreachFrom::WebhookDefault => "webhook_default",
        OnBreachFrom::Plan => "plan",
        OnBreachFrom::NoForecast => "no_forecast",
    }
}

impl From<&GuardOptions> for pb::GuardOptions {
    fn from(o: &GuardOptions) -> Self {
        pb::GuardOptions {
            max_deliveries: o.max_deliveries,
            max_duration_ms: o.max_duration_ms,
            on_breach: o
                .on_breach
                .map_or(pb::OnBreach::Unspecified, pb::OnBreach::from)
                as i32,
        }
    }
}

impl From<pb::GuardOptions> for GuardOptions {
    fn from(o: pb::GuardOptions) -> Self {
        GuardOptions {
            max_deliveries: o.max_deliveries,
            max_duration_ms: o.max_duration_ms,
            on_breach: on_breach(o.on_breach),
        }
    }
}

impl From<&GuardForecast> for pb::GuardForecast {
    fn from(f: &GuardForecast) -> Self {
        pb::GuardForecast {
            deliveries: f.deliveries,
            lost_work: f.lost_work,
            faults: f.faults,
            lost_work_per_100: f.lost_work_per_100,
            faults_per_100: f.faults_per_100,
        }
    }
}

impl From<pb::GuardForecast> for GuardForecast {
    fn from(f: pb::GuardForecast) -> Self {
        GuardForecast {
            deliveries: f.deliveries,
            lost_work: f.lost_work,
            faults: f.faults,
            lost_work_per_100: f.lost_work_per_100,
            faults_per_100: f.faults_per_100,
        }
    }
}

impl From<&GuardPlan> for pb::GuardPlan {
    fn from(g: &GuardPlan) -> Self {
        pb::GuardPlan {
            max_deliveries: g.max_deliveries,
            max_duration_ms: u64::try_from(g.max_duration_ms).unwrap_or_default(),
            on_breach: pb::OnBreach::from(g.on_breach) as i32,
            on_breach_from: on_breach_from_word(g.on_breach_from).into(),
            forecast: Some(pb::GuardForecast::from(&g.forecast)),
            thresholds: Some(pb::GuardThresholds {
                min_count: g.thresholds.min_count,
                unforeseen_count: g.thresholds.unforeseen_count,
                z: g.thresholds.z,
            }),
        }
    }
}

impl From<pb::GuardPlan> for GuardPlan {
    fn from(g: pb::GuardPlan) -> Self {
        let t = g.thresholds.unwrap_or_default();
        GuardPlan {
            max_deliveries: g.max_deliveries,
            max_duration_ms: i64::try_from(g.max_duration_ms).unwrap_or(i64::MAX),
            on_breach: on_breach(g.on_breach).unwrap_or_default(),
            on_breach_from: on_breach_from(&g.on_breach_from),
            forecast: g.forecast.map(GuardForecast::from).unwrap_or_default(),
            thresholds: Thresholds {
                min_count: t.min_count,
                unforeseen_count: t.unforeseen_count,
                z: t.z,
            },
        }
    }
}

impl From<&Breach> for pb::GuardBreach {
    fn from(b: &Breach) -> Self {
        let text = b.to_string();
        let rate = |reason: &str, r: &RateBreach| pb::GuardBreach {
            reason: reason.into(),
            text: text.clone(),
            forecast_count: r.forecast_count,
            forecast_deliveries: r.forecast_deliveries,
            observed_count: r.observed_count,
            observed_deliveries: r.observed_deliveries,
            forecast_rate: r.forecast_rate,
            observed_rate: r.observed_rate,
            allowed_rate: r.allowed_rate,
            ..Default::default()
        };
        match b {
            Breach::LostWork(r) => rate("lost_work", r),
            Breach::Faults(r) => rate("faults", r),
            Breach::UnforeseenLostWork { from, to, count } => pb::GuardBreach {
                reason: "unforeseen_lost_work".into(),
                text: text.clone(),
                from: from.to_string(),
                to: to.to_string(),
                count: *count,
                ..Default::default()
            },
        }
    }
}

/// A wire breach as the typed one; one this build cannot read is none (its text still
/// reaches the reader through `breach_text`).
fn breach(b: &pb::GuardBreach) -> Option<Breach> {
    let rate = || RateBreach {
        forecast_count: b.forecast_count,
        forecast_deliveries: b.forecast_deliveries,
        observed_count: b.observed_count,
        observed_deliveries: b.observed_deliveries,
        forecast_rate: b.forecast_rate,
        observed_rate: b.observed_rate,
        allowed_rate: b.allowed_rate,
    };
    match b.reason.as_str() {
        "lost_work" => Some(Breach::LostWork(rate())),
        "faults" => Some(Breach::Faults(rate())),
        "unforeseen_lost_work" => Some(Breach::UnforeseenLostWork {
            from: b.from.parse::<Label<'static>>().ok()?,
            to: b.to.parse::<Label<'static>>().ok()?,
            count: b.count,
        }),
        _ => None,
    }
}

fn recovery_state(word: &str) -> RecoveryState {
    match word {
        "applied" => RecoveryState::Applied,
        "nothing_to_recover" => RecoveryState::NothingToRecover,
        "stale" => RecoveryState::Stale,
        _ => RecoveryState::AwaitingPerson,
    }
}

impl From<&GuardReport> for pb::RuleGuard {
    fn from(g: &GuardReport) -> Self {
        pb::RuleGuard {
            report: Some(pb::RuleTrial::from(&g.report)),
            on_breach: pb::OnBreach::from(g.on_breach) as i32,
            confirmed_version: g.confirmed_version,
            replaced_version: g.replaced_version,
            forecast: Some(pb::GuardForecast::from(&g.forecast)),
            breach: g.breach.as_ref().map(|b| {
                let mut wire = pb::GuardBreach::from(b);
                if let Some(text) = &g.breach_text {
                    wire.text = text.clone();
                }
                wire
            }),
            reverted_version: g.reverted_version,
            recovery: g.recovery.as_ref().map(|r| pb::GuardRecovery {
                redrive_id: r.redrive_id.clone(),
                state: r.state.as_str().into(),
                changes: r.changes,
                applied: r.applied,
                todos_created: r.todos_created,
            }),
        }
    }
}

impl From<pb::RuleGuard> for GuardReport {
    fn from(g: pb::RuleGuard) -> Self {
        GuardReport {
            report: g.report.map(TrialReport::from).unwrap_or_default(),
            on_breach: on_breach(g.on_breach).unwrap_or_default(),
            confirmed_version: g.confirmed_version,
            replaced_version: g.replaced_version,
            forecast: g.forecast.map(GuardForecast::from).unwrap_or_default(),
            breach: g.breach.as_ref().and_then(breach),
            breach_text: g.breach.map(|b| b.text),
            reverted_version: g.reverted_version,
            recovery: g.recovery.map(|r| Recovery {
                redrive_id: r.redrive_id,
                state: recovery_state(&r.state),
                changes: r.changes,
                applied: r.applied,
                todos_created: r.todos_created,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use switchboard_model::trial::Forecast;

    use super::*;

    /// A plan's guard, and a breached guard's report, through their messages and back.
    #[test]
    fn a_guard_survives_the_wire() {
        let forecast = Forecast {
            deliveries: 200,
            transitions: BTreeMap::from([((Label::queue("review").into_owned(), Label::Drop), 6)]),
        };
        let plan = GuardPlan::new(
            &forecast,
            &GuardOptions {
                max_deliveries: Some(300),
                on_breach: Some(OnBreach::Alert),
                ..GuardOptions::default()
            },
            None,
        )
        .expect("in range");
        assert_eq!(plan.on_breach_from, OnBreachFrom::Plan);
        assert_eq!(plan.forecast.lost_work, 6);
        assert_eq!(GuardPlan::from(pb::GuardPlan::from(&plan)), plan);

        let breach = Breach::UnforeseenLostWork {
            from: Label::queue("ci").into_owned(),
            to: Label::Drop,
            count: 3,
        };
        let report = GuardReport {
            on_breach: OnBreach::Revert,
            confirmed_version: 4,
            replaced_version: 3,
            forecast: plan.forecast.clone(),
            breach_text: Some(breach.to_string()),
            breach: Some(breach),
            reverted_version: Some(5),
            recovery: Some(Recovery {
                redrive_id: "rd_1".into(),
                state: RecoveryState::Applied,
                changes: 3,
                applied: 3,
                todos_created: 3,
            }),
            ..GuardReport::default()
        };
        assert_eq!(GuardReport::from(pb::RuleGuard::from(&report)), report);
    }
}
