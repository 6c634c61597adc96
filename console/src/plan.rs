//! The plan page: everything the plan carries (SPEC-0031 REQ-5), lost work first, and the
//! Accept and Reject forms when this person may decide. No payload text: the plan carries
//! none, and nothing else is read for this page.

use maud::{Markup, html};
use switchboard_model::plan::{Plan, PlanState, StaleReason};

use crate::guard::plan_guard_section;
use crate::layout::{Chrome, page};
use crate::report::{Source, rules, todos_chart, totals, transitions};
use crate::trial::plan_trial_section;

/// A person's decision, once made.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    pub by: String,
    /// Set when it was a rejection: the reason given.
    pub rejected: Option<String>,
}

/// Everything the plan page shows.
#[derive(Clone, Debug)]
pub struct PlanView<'a> {
    pub chrome: &'a Chrome,
    pub plan_id: String,
    pub owner_scope: String,
    pub plan: &'a Plan,
    pub state: PlanState,
    pub stale_reason: Option<StaleReason>,
    pub proposed_by_endpoint: String,
    pub proposed_by_human: String,
    /// RFC 3339; empty when the plan was never put before a person.
    pub approval_expires_at: String,
    pub decision: Option<Decision>,
    /// The person holds the editor role in the plan's scope: the forms are shown.
    pub may_decide: bool,
    /// What just happened (after a form), shown at the top.
    pub notice: Option<String>,
    /// Once applied: the guard its confirm started (issue 46).
    pub guard: Option<switchboard_model::guard::GuardReport>,
    /// Once put before a person: how many must accept it, and who has (issue 47).
    pub approvals: Option<switchboard_model::approval::Tally>,
}

pub fn plan_page(v: &PlanView<'_>) -> Markup {
    let p = v.plan;
    let title = p.kind.title(&p.pack.name, &p.pack.version);
    let recover_action = format!("/console/plans/{}/recover", v.plan_id);
    page(
        &title,
        Some(v.chrome),
        html! {
            h1 { (title) " " span.badge.state #plan-state data-state=(v.state.as_str()) { (v.state.as_str()) } }
            @if let Some(notice) = &v.notice { p.notice #notice { (notice) } }
            dl.facts {
                dt { "Webhook" } dd { a href={ "/console/webhooks/" (p.webhook_id) } { code { (p.webhook_id) } } " (" (v.owner_scope) ")" }
                @if let Some(from) = &p.pack.from_version { dt { "Installed now" } dd { (p.pack.name) "@" (from) } }
                dt { "Proposed by" } dd { (v.proposed_by_human) " via " code { (v.proposed_by_endpoint) } }
                @if !v.approval_expires_at.is_empty() { dt { "Decide by" } dd { (v.approval_expires_at) } }
                dt { "Evidence" } dd #evidence {
                    (p.report.events_replayed) " stored deliveries replayed"
                    @if let (Some(from), Some(to)) = (&p.report.window_from, &p.report.window_to) { " (" (from) " to " (to) ")" }
                    "; "
                    @if p.proven { span.badge.proven { "proven" } } @else { span.badge.unproven { "unproven" } }
                    @if p.report.truncated { " " span.badge.unproven { "truncated" } }
                    @if let Some(stopped) = &p.report.stopped { " stopped: " (stopped) }
                }
            }
            (decision_block(v))
            (crate::approval::plan_approvals(v.approvals.as_ref()))
            (plan_guard_section(
                p.guard.as_ref(),
                v.guard.as_ref(),
                v.may_decide.then_some((recover_action.as_str(), v.chrome.csrf.as_str())),
            ))
            h2 { "Decisions before and after" }
            (totals(&p.report, Source::Replay))
            h2 { "What changes" }
            (transitions(&p.report, Source::Replay))
            @if let Some(trial) = &p.trial {
                h2 #trial-heading { "Trial on live deliveries" }
                (plan_trial_section(trial))
            }
            h2 { "Todos per day" }
            (todos_chart(&p.report.todos_per_day))
            h2 { "Rules" }
            (rules(&p.report))
            @if !p.fixtures.is_empty() {
                h2 { "Fixtures" }
                (fixtures(p))
            }
            h2 { "Rule and param diffs" }
            (diffs(p))
        },
    )
}

fn decision_block(v: &PlanView<'_>) -> Markup {
    let id = &v.plan_id;
    html! {
        section.decision #decision {
            @match v.state {
                PlanState::PendingApproval if v.may_decide => {
                    @let needed = v.approvals.as_ref().map_or(1, |t| t.still_needed);
                    @if needed > 1 {
                        p { "Accepting records your approval of exactly this plan; it goes live, once, when " (needed) " more people have accepted it. Rejecting it means it can never be applied." }
                    } @else {
                        p { "Accepting puts exactly this plan live, once (if your approval counts). Rejecting it means it can never be applied." }
                    }
                    @if v.plan.trial_sufficient == Some(false) {
                        p.warning #accept-insufficient {
                            strong { "The trial behind this plan is insufficient" }
                            " (see " a href="#trial-heading" { "Trial on live deliveries" } "): accepting applies it anyway."
                        }
                    }
                    form.inline method="post" action={ "/console/plans/" (id) "/accept" } {
                        input type="hidden" name="csrf" value=(v.chrome.csrf);
                        button #accept.accept type="submit" { "Accept" }
                    }
                    form.inline method="post" action={ "/console/plans/" (id) "/reject" } {
                        input type="hidden" name="csrf" value=(v.chrome.csrf);
                        label for="reason" { "Reason " }
                        input #reason type="text" name="reason" maxlength="500" required;
                        button #reject.reject type="submit" { "Reject" }
                    }
                }
                PlanState::PendingApproval => {
                    p #no-decision { "You can read this plan, but accepting or rejecting it needs the editor role in " (v.owner_scope) "." }
                }
                PlanState::Applied => {
                    p #applied { "Applied" @if let Some(d) = &v.decision { ", accepted by " strong { (d.by) } } "." }
                }
                PlanState::Rejected => {
                    @if let Some(d) = &v.decision {
                        p { "Rejected by " strong { (d.by) } @if let Some(r) = &d.rejected { ": " q { (r) } } }
                    }
                }
                PlanState::Stale => {
                    p #stale { "This plan is stale ("
                        (v.stale_reason.map_or("", StaleReason::as_str))
                        "): it can no longer be applied. Ask the agent to plan again." }
                }
                PlanState::Planned => {
                    p { "Nobody has proposed this plan for acceptance yet." }
                }
                PlanState::Reverted => {
                    p #reverted { "Applied" @if let Some(d) = &v.decision { ", accepted by " strong { (d.by) } } ", then reverted by its guard: the change lost more work than this plan forecast, and the configuration it replaced was saved again (see " a href="#guard-heading" { "Guard" } ")." }
                }
            }
        }
    }
}

fn fixtures(p: &Plan) -> Markup {
    html! {
        table #fixtures {
            thead { tr { th { "Fixture" } th { "Wants" } th { "Got" } th { "Rule" } th { "" } } }
            tbody {
                @for f in &p.fixtures {
                    tr.failed[!f.passed] {
                        td { (f.name) } td { code { (f.want.to_string()) } } td { code { (f.got.to_string()) } }
                        td { (f.rule.as_deref().unwrap_or("")) }
                        td { @if f.passed { "passed" } @else { strong { "failed" } } }
                    }
                }
            }
        }
    }
}

fn id_list(title: &str, ids: &[String]) -> Markup {
    html! {
        @if !ids.is_empty() {
            dt { (title) } dd { @for id in ids { code { (id) } " " } }
        }
    }
}

fn diffs(p: &Plan) -> Markup {
    let r = &p.rule_diff;
    let d = &p.param_diff;
    html! {
        dl.diff #rule-diff {
            (id_list("Rules added", &r.added))
            (id_list("Rules removed", &r.removed))
            (id_list("Rules changed", &r.changed))
            (id_list("Hand-written rules taken over", &r.replaced))
            @if let Some(change) = &r.default_action {
                dt { "Default action" }
                @let (before, after) = change.texts();
                dd { (before) " → " (after) }
            }
            (id_list("Params added", &d.added))
            (id_list("Params changed", &d.changed))
            (id_list("Params removed", &d.removed))
            (id_list("Params adopted", &d.adopted))
            (id_list("Params left without an owner", &d.orphaned))
            (id_list("Params kept", &d.kept))
            @if let Some(v) = &p.version_diff {
                dt { "Version" } dd { (v.from) " → " (v.to) }
                (id_list("Pack rules added", &v.rules_added))
                (id_list("Pack rules removed", &v.rules_removed))
                (id_list("Pack rules changed", &v.rules_changed))
            }
        }
    }
}
