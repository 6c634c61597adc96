//! A confirmed change's guard (issue 46) on the console: on the plan page, the guard the plan
//! carries (what a person accepts with the change) and, once applied, its report — forecast
//! beside observed, any breach as an alert, the revert and the recovery, with the form that
//! recovers lost work a `person` webhook's revert left waiting; on the webhook page, a banner
//! while its newest guard stands breached.

use maud::{Markup, html};
use switchboard_model::guard::{GuardPlan, GuardReport, OnBreach, OnBreachFrom, RecoveryState};

fn window(max_deliveries: u64, max_duration_ms: i64) -> String {
    let hours = max_duration_ms / 3_600_000;
    let span = if hours >= 24 && hours % 24 == 0 {
        format!("{} days", hours / 24)
    } else {
        format!("{hours} hours")
    };
    format!("{max_deliveries} live deliveries or {span}, whichever comes first")
}

/// The plan page's guard section. `recover_to`: the form's action and CSRF token when this
/// person may apply a waiting recovery.
pub fn plan_guard_section(
    planned: Option<&GuardPlan>,
    report: Option<&GuardReport>,
    recover_to: Option<(&str, &str)>,
) -> Markup {
    html! {
        h2 #guard-heading { "Guard" }
        @if let Some(r) = report {
            @if let Some(text) = &r.breach_text {
                div.warning #guard-breach role="alert" {
                    p { strong { "Breached: " } (text) "." }
                    @match r.reverted_version {
                        Some(v) => p #guard-reverted { "Reverted: the replaced configuration was saved again as version " (v) "." },
                        None => p { "Not reverted (" (match r.on_breach { OnBreach::Alert => "this guard only alerts", OnBreach::Revert => "the webhook changed again after the confirm" }) ")." },
                    }
                }
            }
            @if let Some(rec) = &r.recovery {
                @match rec.state {
                    RecoveryState::AwaitingPerson => {
                        div.warning #recovery role="status" {
                            p { strong { (rec.changes) " deliveries" } " the reverted change decided differently wait to be re-routed under the restored rules (lost work first, each once)." }
                            @if let Some((action, csrf)) = recover_to {
                                form.inline method="post" action=(action) {
                                    input type="hidden" name="csrf" value=(csrf);
                                    button #recover type="submit" { "Recover " (rec.changes) " deliveries" }
                                }
                            } @else {
                                p { "Recovering them needs the editor role in this webhook's scope." }
                            }
                        }
                    }
                    RecoveryState::Applied => p.notice #recovery role="status" { "Recovered: " (rec.applied) " deliveries re-routed, " (rec.todos_created) " todos made." },
                    RecoveryState::NothingToRecover => p #recovery { "Nothing to recover: every delivery the reverted change decided reads the same under the restored rules." },
                    RecoveryState::Stale => p #recovery { "The recovery is stale: the webhook changed before it was applied. Redrive its dropped deliveries by version." },
                }
            }
            dl.facts #guard {
                dt { "Watching" } dd { "version " (r.confirmed_version) " beside the replaced version " (r.replaced_version) }
                dt { "State" } dd #guard-state { @if r.report.ended_at.is_some() { "ended" } @else { "running" } }
                dt { "Deliveries" } dd { (r.report.deliveries.seen) " seen, " (r.report.deliveries.evaluated) " evaluated" }
                dt { "Forecast" } dd { (format!("{:.1}", r.forecast.lost_work_per_100)) " lost work, " (format!("{:.1}", r.forecast.faults_per_100)) " faults per 100 deliveries" }
                dt { "On a breach" } dd { (r.on_breach.as_str()) }
            }
        } @else if let Some(g) = planned {
            p #guard { "After it is applied, the replaced rules keep running beside the new ones for " (window(g.max_deliveries, g.max_duration_ms)) ". If the change loses more work than this plan forecast ("
                (format!("{:.1}", g.forecast.lost_work_per_100)) " lost work and " (format!("{:.1}", g.forecast.faults_per_100)) " faults per 100 deliveries), it is "
                @match g.on_breach {
                    OnBreach::Revert => { strong { "reverted" } " and the lost work recovered" }
                    OnBreach::Alert => { strong { "shown as an alert" } " (not reverted)" }
                }
                @match g.on_breach_from {
                    OnBreachFrom::WebhookDefault => " (the webhook's default).",
                    OnBreachFrom::Plan => " (asked by this plan).",
                    OnBreachFrom::NoForecast => " (the replay held no deliveries, so there is nothing to revert on).",
                }
            }
        } @else {
            p #guard { "This plan was made before guards were planned: its confirm starts the default guard." }
        }
    }
}

/// The webhook page's banner while its newest guard stands breached.
pub fn breach_banner(report: Option<&GuardReport>) -> Markup {
    html! {
        @if let Some(r) = report {
            @if let Some(text) = &r.breach_text {
                div.warning #breach-banner role="alert" {
                    p { strong { "A change here breached its guard: " } (text) "." }
                    p {
                        @match r.reverted_version {
                            Some(v) => { "It was reverted (version " (v) "). " }
                            None => { "It was not reverted. " }
                        }
                        a href={ "/console/plans/" (r.report.plan_id) "#guard-heading" } { "See the plan and its guard" }
                    }
                }
            }
        }
    }
}

/// The webhook page's guard section: its newest guard in one line, linked to its plan.
pub fn webhook_guard_section(report: Option<&GuardReport>) -> Markup {
    html! {
        h2 { "Guard" }
        @match report {
            None => p #webhook-guard { "No change here has been guarded yet: a guard starts when a plan is applied." },
            Some(r) => p #webhook-guard {
                @if r.report.ended_at.is_none() { "Running: " } @else { "Ended: " }
                "version " (r.confirmed_version) " beside the replaced version " (r.replaced_version) ", "
                (r.report.deliveries.seen) " live deliveries seen; on a breach it would " (r.on_breach.as_str())
                @if r.breach_text.is_some() { " (it breached)" }
                ". "
                a href={ "/console/plans/" (r.report.plan_id) "#guard-heading" } { "The plan and its guard" }
            },
        }
    }
}
