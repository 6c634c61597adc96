//! The plan page: everything the plan carries (SPEC-0031 REQ-5), lost work first, and the
//! Accept and Reject forms when this person may decide. No payload text: the plan carries
//! none, and nothing else is read for this page.

use maud::{Markup, html};
use switchboard_model::Configuration;
use switchboard_model::plan::{Plan, PlanKind, PlanState, StaleReason};

use crate::guard::plan_guard_section;
use crate::layout::{Chrome, Notice, lost_mark, notice, page, scroll, webhook_link, when};
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
    /// The webhook's display name; empty when it has none.
    pub webhook_name: String,
    pub plan: &'a Plan,
    /// The configuration the plan would save: the rules' conditions and the params' values.
    pub candidate: Option<&'a Configuration>,
    pub state: PlanState,
    pub stale_reason: Option<StaleReason>,
    pub proposed_by_endpoint: String,
    /// The endpoint's name (`claude-desktop`), as the person who vended it chose it.
    pub proposed_by_endpoint_name: String,
    pub proposed_by_human: String,
    /// RFC 3339; empty when the plan was never put before a person.
    pub approval_expires_at: String,
    pub decision: Option<Decision>,
    /// The person holds the editor role in the plan's scope: the forms are shown.
    pub may_decide: bool,
    /// What just happened (after a form), shown at the top.
    pub notice: Option<Notice>,
    /// Once applied: the guard its confirm started (issue 46).
    pub guard: Option<switchboard_model::guard::GuardReport>,
    /// Once put before a person: how many must accept it, and who has (issue 47).
    pub approvals: Option<switchboard_model::approval::Tally>,
    /// The page's clock (ms since the epoch), for relative times.
    pub now_ms: i64,
}

/// What a plan of `kind` does, as a sentence's verb phrase: `installs drop-ci-noise 2.0.0`.
pub(crate) fn what_it_does(
    kind: PlanKind,
    pack: &str,
    version: &str,
    from: Option<&str>,
) -> String {
    match (kind, from) {
        (PlanKind::Install, _) => format!("installs {pack} {version}"),
        (PlanKind::Upgrade, Some(from)) => format!("upgrades {pack} from {from} to {version}"),
        (PlanKind::Upgrade, None) => format!("upgrades {pack} to {version}"),
        (PlanKind::Downgrade, Some(from)) => format!("downgrades {pack} from {from} to {version}"),
        (PlanKind::Downgrade, None) => format!("downgrades {pack} to {version}"),
        (PlanKind::Reinstall, _) => format!("reinstalls {pack} {version}"),
        (PlanKind::Remove, _) => format!("removes {pack} {version}"),
        (PlanKind::Rules, _) => "saves hand-written rules".to_string(),
    }
}

/// Deliveries whose decision the plan turns from work into none (dropped, quarantined, …).
pub(crate) fn lost_work(p: &Plan) -> u64 {
    p.report.lost_work()
}

/// The page reads top to bottom: what the plan does in one sentence, the work it would lose,
/// then the evidence (totals, transitions, rules with their conditions, fixtures with why one
/// routes differently, params with their values, diffs), and the decision at the end, offered
/// too in a bar that stays in view at the bottom of the window while the person reads.
pub fn plan_page(v: &PlanView<'_>) -> Markup {
    let p = v.plan;
    let title = p.kind.title(&p.pack.name, &p.pack.version);
    let recover_action = format!("/console/plans/{}/recover", v.plan_id);
    let lost = lost_work(p);
    let pending = v.state == PlanState::PendingApproval && v.may_decide;
    page(
        &title,
        Some(v.chrome),
        html! {
            h1 { "Plan: " (title) " " span.badge.state #plan-state data-state=(v.state.as_str()) { (v.state.words()) } }
            (notice(v.notice.as_ref()))
            p.summary #summary {
                "This plan " (what_it_does(p.kind, &p.pack.name, &p.pack.version, p.pack.from_version.as_deref()))
                " on webhook " (webhook_link(&p.webhook_id, &v.webhook_name)) ". "
                "Of " (p.report.events_replayed) " stored deliveries replayed, " strong { (p.report.changed) } " change decision"
                @if lost > 0 { " and " strong { (lost) } " would lose work" } @else { "; none would lose work" } "."
            }
            @if lost > 0 {
                section.lost-work #lost-work aria-labelledby="lost-work-heading" {
                    h2 #lost-work-heading { span.icon aria-hidden="true" { "⚠" } " Lost work: " (lost) " deliveries" }
                    ul { @for t in p.report.transitions.iter().filter(|t| t.loses_work()) {
                        li { strong { (t.count) } " that went to " code { (t.from.to_string()) } " would go to " code { (t.to.to_string()) } }
                    } }
                }
            }
            dl.facts {
                dt { "Webhook" } dd { (webhook_link(&p.webhook_id, &v.webhook_name)) " in " (v.owner_scope) }
                @if let Some(from) = &p.pack.from_version { dt { "Installed now" } dd { (p.pack.name) "@" (from) } }
                dt { "Proposed by" } dd #proposed-by { (v.proposed_by_human) " via " (crate::layout::endpoint(&v.proposed_by_endpoint, &v.proposed_by_endpoint_name)) }
                @if !v.approval_expires_at.is_empty() { dt { "Decide by" } dd { (when(&v.approval_expires_at, v.now_ms)) } }
                dt { "Evidence" } dd #evidence {
                    (p.report.events_replayed) " stored deliveries replayed"
                    @if let (Some(from), Some(to)) = (&p.report.window_from, &p.report.window_to) { " (" (from) " to " (to) ")" }
                    "; "
                    @if p.proven { span.badge.proven { "proven" } } @else { span.badge.unproven { "unproven" } }
                    @if p.report.truncated { " " span.badge.unproven { "truncated" } }
                    @if let Some(stopped) = &p.report.stopped { " stopped: " (stopped) }
                }
            }
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
            (rules(&p.report, v.candidate))
            @if !p.fixtures.is_empty() {
                h2 { "Fixtures" }
                (fixtures(p))
            }
            @if let Some(c) = v.candidate && !c.params.is_empty() {
                h2 { "Params" }
                (params(c))
            }
            h2 { "Rule and param diffs" }
            (diffs(p))
            // Before the decision in the page, so it stays in view while the person reads and
            // rides above the decision (never over it) once that scrolls into view.
            @if pending {
                footer.sticky #decide-bar aria-label="Decide this plan" {
                    span { "Waiting for your decision"
                        @if lost > 0 { " · " (lost_mark()) ": " (lost) } }
                    form.inline method="post" action={ "/console/plans/" (v.plan_id) "/accept" } {
                        input type="hidden" name="csrf" value=(v.chrome.csrf);
                        button #accept-bar.accept type="submit" { "Accept" }
                    }
                    a href="#decision" { "Reject or read the terms" }
                }
            }
            h2 #decision-heading { "Decision" }
            (decision_block(v))
        },
    )
}

fn decision_block(v: &PlanView<'_>) -> Markup {
    let id = &v.plan_id;
    html! {
        section.decision #decision aria-labelledby="decision-heading" {
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
                    @if v.plan.fixtures.iter().any(|f| !f.passed) {
                        p.warning #accept-fixtures {
                            strong { "Some of the pack's fixtures route differently on this webhook" }
                            " (see the fixtures above for why): accepting applies it anyway."
                        }
                    }
                    form.inline method="post" action={ "/console/plans/" (id) "/accept" } {
                        input type="hidden" name="csrf" value=(v.chrome.csrf);
                        button #accept.accept type="submit" { "Accept" }
                    }
                    form.inline #reject-form method="post" action={ "/console/plans/" (id) "/reject" } {
                        input type="hidden" name="csrf" value=(v.chrome.csrf);
                        label for="reason" { "Reason " }
                        input #reason type="text" name="reason" maxlength="500" required;
                        " "
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
                    p #stale { "This plan is stale: "
                        (v.stale_reason.map_or("it can no longer be applied", StaleReason::words))
                        ". It can no longer be applied; ask the agent to plan again." }
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

/// The candidate's params with their values (JSON, as the pack reads them).
fn params(c: &Configuration) -> Markup {
    scroll(
        "Params",
        html! {
            table #params {
                thead { tr { th scope="col" { "Param" } th scope="col" { "Value" } } }
                tbody { @for (name, value) in &c.params {
                    tr { td { code { (name) } } td { code { (value.to_string()) } } }
                } }
            }
        },
    )
}

/// The pack's fixtures through the candidate. One that routes differently says why when the
/// plan can tell: the webhook's own rule decided first, or no rule matched.
fn fixtures(p: &Plan) -> Markup {
    let own_rule = |id: &str| {
        p.report
            .rules
            .iter()
            .any(|r| r.id == id && r.from_pack.as_deref() != Some(p.pack.name.as_str()))
    };
    scroll(
        "Fixtures",
        html! {
            table #fixtures {
                thead { tr { th scope="col" { "Fixture" } th scope="col" { "Wants" } th scope="col" { "Got" } th scope="col" { "Rule" } th scope="col" { "Result" } } }
                tbody {
                    @for f in &p.fixtures {
                        tr.failed[!f.passed] {
                            td { (f.name) } td { code { (f.want.to_string()) } } td { code { (f.got.to_string()) } }
                            td { (f.rule.as_deref().unwrap_or("")) }
                            td {
                                @if f.passed { "passed" } @else {
                                    strong { "routes differently" }
                                    @match f.rule.as_deref() {
                                        Some(rule) if own_rule(rule) => { ": your rule " code { (rule) } " comes first" }
                                        Some(_) => {}
                                        None => { ": no rule matched, so the default action decided" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
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
