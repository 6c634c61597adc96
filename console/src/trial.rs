//! The trial page (issue 45): a plan's candidate tried beside the live rules on live
//! deliveries — its state, its deliveries, whether its evidence is enough, the forecast
//! beside what it observed, and the plan's report made from its deliveries. Also what the
//! webhook page lists of a trial and the section a promotion's plan page shows. Counts and
//! event ids only: a trial keeps no payload.

use maud::{Markup, html};
use switchboard_model::trial::{TrialEnd, TrialReport, TrialState};

use crate::chart::{evidence_chart, flagged, flags, rate};
use crate::layout::{Chrome, page, webhook_link};
use crate::report::{Source, rules, todos_chart, totals, transitions};

/// Everything the trial page shows: the report as control builds it for a viewer of the
/// trial's scope.
#[derive(Clone, Debug)]
pub struct TrialView<'a> {
    pub chrome: &'a Chrome,
    pub owner_scope: String,
    /// The webhook's display name; empty when it has none.
    pub webhook_name: String,
    pub report: &'a TrialReport,
}

/// One trial on the webhook page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrialRow {
    pub trial_id: String,
    pub running: bool,
    /// `running`, or `ended` and why, in words.
    pub state: String,
    /// RFC 3339.
    pub started_at: String,
    pub seen: u64,
    pub evaluated: u64,
    /// Evaluated deliveries the candidate would have lost (the one definition of lost work).
    pub lost_work: u64,
    pub sufficient: bool,
}

impl From<&TrialReport> for TrialRow {
    fn from(r: &TrialReport) -> Self {
        TrialRow {
            trial_id: r.trial_id.clone(),
            running: r.state == TrialState::Running,
            state: state_text(r),
            started_at: r.started_at.clone(),
            seen: r.deliveries.seen,
            evaluated: r.deliveries.evaluated,
            lost_work: r.report.lost_work(),
            sufficient: r.sufficient,
        }
    }
}

/// A webhook's trials as its page lists them: running first, then ended, each newest
/// first (a running trial is what a person most needs to see).
pub fn trial_rows(reports: &[TrialReport]) -> Vec<TrialRow> {
    let mut rows: Vec<(&str, TrialRow)> = reports
        .iter()
        .map(|r| (r.started_at.as_str(), TrialRow::from(r)))
        .collect();
    // RFC 3339 in UTC with millis, as the model writes it: ordered as text.
    rows.sort_by(|(a_at, a), (b_at, b)| {
        b.running
            .cmp(&a.running)
            .then(b_at.cmp(a_at))
            .then(b.trial_id.cmp(&a.trial_id))
    });
    rows.into_iter().map(|(_, row)| row).collect()
}

/// Why a trial ended, as a code (`data-end`) and in words.
fn end_words(end: TrialEnd) -> (&'static str, &'static str) {
    match end {
        TrialEnd::Stopped => ("stopped", "stopped by its owner"),
        TrialEnd::MaxDeliveries => ("max_deliveries", "saw its maximum of deliveries"),
        TrialEnd::MaxDuration => ("max_duration", "ran for its maximum duration"),
        TrialEnd::Promoted => ("promoted", "promoted: a plan makes its candidate live"),
        TrialEnd::Breached => (
            "breached",
            "breached: the change it guarded lost more work than its forecast allowed",
        ),
        TrialEnd::Stale => (
            "stale",
            "stale: the saved configuration moved, so its evidence no longer describes the live rules",
        ),
    }
}

fn state_text(r: &TrialReport) -> String {
    match (r.state, r.end) {
        (TrialState::Running, _) => "running".into(),
        (TrialState::Ended, Some(end)) => format!("ended: {}", end_words(end).0),
        (TrialState::Ended, None) => "ended".into(),
    }
}

/// Seen, evaluated and not evaluated, as one sentence.
fn deliveries(id: &str, r: &TrialReport) -> Markup {
    let d = &r.deliveries;
    html! {
        p #(id) {
            strong { (d.seen) } " live deliveries seen, "
            strong { (d.evaluated) } " evaluated, "
            strong { (d.not_evaluated) } " not evaluated (shed under load; never counted as unchanged)."
        }
    }
}

/// Whether the evidence is enough, with the reasons when it is not. On a plan page the
/// warning says what accepting does.
fn sufficiency(r: &TrialReport, on_plan: bool) -> Markup {
    html! {
        @if r.sufficient {
            p #sufficiency {
                span.badge.proven { "sufficient" }
                " Enough deliveries evaluated, and every transition the replay predicted was observed."
            }
        } @else {
            div.warning #sufficiency {
                p { span.badge.unproven { "insufficient" } " " strong { "The trial's evidence is insufficient:" } }
                ul #insufficient { @for why in &r.insufficient { li { (why.to_string()) } } }
                @if on_plan {
                    p { strong { "Accepting applies this plan anyway" } ": your acceptance is the opt-in an agent's confirm needs (allow_insufficient_trial)." }
                } @else {
                    p { "Promoting it anyway needs an explicit opt-in: allow_insufficient_trial on the confirm, or a person's acceptance in this console." }
                }
            }
        }
    }
}

/// The evidence as a table: the chart's numbers, for reading and for screen readers.
fn evidence_table(r: &TrialReport) -> Markup {
    html! {
        @if !r.evidence.is_empty() {
            table #evidence-table {
                thead { tr {
                    th scope="col" { "From" } th scope="col" { "To" }
                    th.num scope="col" { "Forecast" } th.num scope="col" { "Observed" } th.num scope="col" { "95 % interval" } th scope="col" { "Flags" }
                } }
                tbody { @for e in &r.evidence {
                    tr.lost[e.loses_work].flagged[flagged(e)] {
                        td { code { (e.from.to_string()) } } td { code { (e.to.to_string()) } }
                        td.num { (rate(e.forecast_rate)) " (" (e.forecast_count) ")" }
                        td.num { (rate(e.observed_rate)) " (" (e.observed_count) ")" }
                        td.num { (rate(e.interval[0])) " – " (rate(e.interval[1])) }
                        td { (flags(e).join(", ")) }
                    }
                } }
            }
            p { "Rates per 100 deliveries (counts in brackets): the forecast over the plan's "
                (r.forecast_deliveries) " replayed deliveries, the observed over the trial's "
                (r.deliveries.evaluated) " evaluated ones." }
        }
    }
}

/// The forecast-versus-observed chart with its sample sizes.
fn chart(r: &TrialReport) -> Markup {
    evidence_chart("evidence-chart", &r.evidence)
}

pub fn trial_page(v: &TrialView<'_>) -> Markup {
    let r = v.report;
    let title = format!("Trial {}", r.trial_id);
    let state = match r.state {
        TrialState::Running => "running",
        TrialState::Ended => "ended",
    };
    page(
        &title,
        Some(v.chrome),
        html! {
            h1 { "Trial " code { (r.trial_id) } " " span.badge.state #trial-state data-state=(state) { (state) } }
            dl.facts {
                dt { "Webhook" } dd { (webhook_link(&r.webhook_id, &v.webhook_name)) " in " (v.owner_scope) }
                dt { "Plan tried" } dd { a href={ "/console/plans/" (r.plan_id) } { code { (r.plan_id) } } }
                dt { "Started" } dd { (r.started_at) " by " code { (r.started_by) } }
                @match (r.state, &r.ended_at, r.end) {
                    (TrialState::Ended, Some(at), end) => {
                        dt { "Ended" } dd #trial-end data-end=(end.map_or("", |e| end_words(e).0)) {
                            (at) @if let Some(e) = end { ": " (end_words(e).1) }
                        }
                    }
                    _ => {
                        dt { "Ends" } dd #trial-end {
                            "by " (r.ends_at)
                            @if let Some(max) = r.max_deliveries { ", or after " (max) " deliveries seen" }
                            ", unless stopped, promoted, or made stale by a change to the saved configuration"
                        }
                    }
                }
                dt { "Candidate" } dd { code { (r.candidate_digest) } }
                dt { "Beside the saved configuration" } dd { code { (r.base_config_digest) } }
            }
            (deliveries("trial-deliveries", r))
            (sufficiency(r, false))
            h2 { "Forecast versus observed" }
            (chart(r))
            (evidence_table(r))
            h2 { "Decisions before and after" }
            p { "Before is the live rules' decision, after the candidate's, over the evaluated deliveries." }
            (totals(&r.report, Source::Trial))
            h2 { "What changes" }
            (transitions(&r.report, Source::Trial))
            h2 { "Todos per day" }
            (todos_chart(&r.report.todos_per_day))
            h2 { "Rules" }
            (rules(&r.report, None))
        },
    )
}

/// A promotion's plan page: the trial it makes live, its deliveries, whether its evidence
/// is enough (a warning when not: accepting applies it anyway), and the chart.
pub(crate) fn plan_trial_section(r: &TrialReport) -> Markup {
    html! {
        section #trial {
            p {
                "This plan makes live the candidate tried by trial "
                a href={ "/console/trials/" (r.trial_id) } { code { (r.trial_id) } }
                " beside the live rules, from " (r.started_at)
                @if let Some(at) = &r.ended_at { " to " (at) }
                ". Its evidence is frozen in this plan: accepting applies exactly the candidate tried, on exactly this evidence."
            }
            (deliveries("trial-deliveries", r))
            (sufficiency(r, true))
            (chart(r))
            (evidence_table(r))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(id: &str, started_at: &str, running: bool) -> TrialReport {
        TrialReport {
            trial_id: id.into(),
            started_at: started_at.into(),
            state: if running {
                TrialState::Running
            } else {
                TrialState::Ended
            },
            end: (!running).then_some(TrialEnd::Stopped),
            ..TrialReport::default()
        }
    }

    /// Running first, then ended, each newest first.
    #[test]
    fn a_webhooks_trials_list_running_first_then_newest_first() {
        let rows = trial_rows(&[
            report("tr_old_ended", "2026-01-01T00:00:00.000Z", false),
            report("tr_running", "2026-01-02T00:00:00.000Z", true),
            report("tr_new_ended", "2026-01-03T00:00:00.000Z", false),
        ]);
        assert_eq!(
            rows.iter().map(|r| r.trial_id.as_str()).collect::<Vec<_>>(),
            ["tr_running", "tr_new_ended", "tr_old_ended"]
        );
        assert_eq!(rows[0].state, "running");
        assert_eq!(rows[1].state, "ended: stopped");
    }
}
