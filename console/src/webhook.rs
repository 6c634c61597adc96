//! The webhook page: its rules in order, installed packs (version, drift, upgrades), the
//! configuration history with who proposed and who approved, and recent events with their
//! decision (never their payload).

use maud::{Markup, html};
use switchboard_model::listing::InstalledStatus;

use crate::events::EventRow;
use crate::layout::{Chrome, Notice, heading_name, notice, page, scroll, webhook_title};
use crate::trial::TrialRow;

#[derive(Clone, Debug, Default)]
pub struct RuleRow {
    pub id: String,
    pub description: Option<String>,
    pub when: String,
    /// The action as a decision label (`queue:review`, `drop`, `quarantine`).
    pub action: String,
}

#[derive(Clone, Debug, Default)]
pub struct HistoryRow {
    pub version: i64,
    /// RFC 3339.
    pub saved_at: String,
    /// What changed (`install_rule_pack drop-ci-noise@2.0.0`, `set_webhook_rules`, …).
    pub change: String,
    /// Who saved it: an endpoint and its human, a person, or an operator.
    pub saved_by: String,
    /// Set when a person accepted an agent's plan.
    pub proposed_by: Option<String>,
    pub approved_by: Option<String>,
    /// Set when it made a trial's candidate live: the trial, linked.
    pub trial: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct WebhookView {
    pub webhook_id: String,
    /// Its display name; empty when it has none.
    pub name: String,
    pub owner_scope: String,
    pub source_type: String,
    pub config_version: i64,
    pub confirm_policy: String,
    pub grant: Vec<String>,
    pub rules: Vec<RuleRow>,
    pub default_action: Option<String>,
    /// (pack name, its status on this webhook).
    pub installed: Vec<(String, InstalledStatus)>,
    pub history: Vec<HistoryRow>,
    pub events: Vec<EventRow>,
    /// Its trials, running first, then ended, newest first ([`crate::trial_rows`]).
    pub trials: Vec<TrialRow>,
    /// The person is an editor of the webhook's scope: they may change who confirms.
    pub may_edit: bool,
    /// What the last action on this page did.
    pub notice: Option<Notice>,
    /// Its newest guard (issue 46): a breach shows as a banner.
    pub guard: Option<switchboard_model::guard::GuardReport>,
    /// How many people must accept a plan here, and whether that is the default (issue 47).
    pub approval_rule: switchboard_model::approval::ApprovalRule,
    pub approval_rule_default: bool,
    /// Its change-log entries, newest first.
    pub changes: Vec<crate::ChangeRow>,
    /// Its deliveries per hour by decision over the last days, configuration changes marked.
    pub activity: crate::Activity,
}

/// The two confirm policies, as the form offers them.
const POLICIES: [(&str, &str); 2] = [
    ("self", "self: the agent that planned may confirm"),
    ("person", "person: a person accepts every agent's plan here"),
];

pub fn webhook_page(chrome: &Chrome, v: &WebhookView) -> Markup {
    page(
        &format!("Webhook {}", webhook_title(&v.webhook_id, &v.name)),
        Some(chrome),
        html! {
            h1 { @if v.name.is_empty() { "Webhook " code { (v.webhook_id) } } @else { (heading_name(&v.webhook_id, &v.name)) } }
            (crate::guard::breach_banner(v.guard.as_ref()))
            (notice(v.notice.as_ref()))
            dl.facts {
                dt { "Name" } dd {
                    span #webhook-name { @if v.name.is_empty() { "none" } @else { (v.name) } }
                    @if v.may_edit {
                        " · "
                        form.inline #rename-form method="post" action={ "/console/webhooks/" (v.webhook_id) "/name" } {
                            input type="hidden" name="csrf" value=(chrome.csrf);
                            label for="name" { "Rename to " }
                            input #name type="text" name="name" value=(v.name) maxlength="80" autocomplete="off";
                            " "
                            button #save-name type="submit" { "Rename" }
                        }
                    }
                }
                dt { "Scope" } dd { (v.owner_scope) }
                dt { "Source" } dd { (v.source_type) }
                dt { "Configuration version" } dd #config-version { (v.config_version) }
                dt { "Who confirms plans" } dd {
                    span #confirm-policy { (v.confirm_policy) }
                    @if v.may_edit {
                        " · "
                        form.inline #confirm-policy-form method="post" action={ "/console/webhooks/" (v.webhook_id) "/confirm-policy" } {
                            input type="hidden" name="csrf" value=(chrome.csrf);
                            label for="policy" { "Change to " }
                            select #policy name="policy" {
                                @for (value, label) in POLICIES {
                                    option value=(value) selected[value == v.confirm_policy] { (label) }
                                }
                            }
                            " "
                            button #save-policy type="submit" { "Save" }
                        }
                    }
                }
                dt { "Who must accept" } dd { (crate::approval::rule_line(&v.approval_rule, v.approval_rule_default)) }
                dt { "Grant" } dd { @for q in &v.grant { code { (q) } " " } }
                dt { "Default action" } dd { (v.default_action.as_deref().unwrap_or("none (the first granted queue)")) }
            }
            h2 #activity-heading { "Deliveries over the last " (v.activity.hours.len() / 24) " days" }
            (crate::activity::activity(&v.activity))
            p { a href={ "/console/webhooks/" (v.webhook_id) "/events" } { "Every event, with filters and what decided each" } }
            h2 { "Rules, in order" }
            @if v.rules.is_empty() { p { "No rules." } } @else {
                (scroll("Rules, in order", html! { table #webhook-rules {
                    thead { tr { th scope="col" { "#" } th scope="col" { "Rule" } th scope="col" { "When" } th scope="col" { "Action" } } }
                    tbody { @for (i, r) in v.rules.iter().enumerate() {
                        tr {
                            td.num { (i + 1) }
                            td { code { (r.id) } @if let Some(d) = &r.description { br; small { (d) } } }
                            td { code.expr { (r.when) } }
                            td { code { (r.action) } }
                        }
                    } }
                } }))
            }
            h2 { "Installed rule packs" }
            @if v.installed.is_empty() { p { "None." } } @else {
                (scroll("Installed rule packs", html! { table #installed {
                    thead { tr { th scope="col" { "Pack" } th scope="col" { "Version" } th scope="col" { "Drift" } th scope="col" { "Upgrade" } th scope="col" { "Installed by" } } }
                    tbody { @for (name, s) in &v.installed {
                        tr {
                            td { (name) } td { (s.version) }
                            td { (s.drift.state) @for id in s.drift.rule_ids() { " " code { (id) } } }
                            td { @if s.upgrade_available { (s.upgrade_to.as_deref().unwrap_or("available")) } @else { "—" } }
                            td { (s.installed_by.human) " via " code { (s.installed_by.endpoint) } }
                        }
                    } }
                } }))
            }
            (crate::guard::webhook_guard_section(v.guard.as_ref()))
            h2 { "Trials" }
            @if v.trials.is_empty() { p #no-trials { "No trials." } } @else {
                (scroll("Trials", html! { table #trials {
                    thead { tr {
                        th scope="col" { "Trial" } th scope="col" { "State" } th scope="col" { "Started" } th.num scope="col" { "Seen" } th.num scope="col" { "Evaluated" }
                        th.num scope="col" { "Lost work" } th scope="col" { "Evidence" }
                    } }
                    tbody { @for t in &v.trials {
                        tr.trial-row.lost[t.lost_work > 0] {
                            td { a href={ "/console/trials/" (t.trial_id) } { code { (t.trial_id) } } }
                            td { (t.state) } td { (t.started_at) }
                            td.num { (t.seen) } td.num { (t.evaluated) } td.num { (t.lost_work) }
                            td { @if t.sufficient { span.badge.proven { "sufficient" } } @else { span.badge.unproven { "insufficient" } } }
                        }
                    } }
                } }))
            }
            h2 { "Configuration history" }
            (scroll("Configuration history", html! { table #history {
                thead { tr { th.num scope="col" { "Version" } th scope="col" { "Saved" } th scope="col" { "Change" } th scope="col" { "Saved by" } th scope="col" { "Proposed by" } th scope="col" { "Approved by" } } }
                tbody { @for h in &v.history {
                    tr {
                        td.num { (h.version) } td { (h.saved_at) }
                        td { (h.change) @if let Some(t) = &h.trial { " from trial " a href={ "/console/trials/" (t) } { code { (t) } } } }
                        td { (h.saved_by) }
                        td { (h.proposed_by.as_deref().unwrap_or("")) } td { (h.approved_by.as_deref().unwrap_or("")) }
                    }
                } }
            } }))
            (crate::approval::change_log(&v.changes))
            h2 { "Recent events" }
            @if v.events.is_empty() { p { "No deliveries yet." } } @else {
                (scroll("Recent events", html! { table #events {
                    thead { tr { th scope="col" { "Event" } th scope="col" { "Received" } th scope="col" { "Kind" } th scope="col" { "Signed" } th scope="col" { "Decision" } } }
                    tbody { @for e in &v.events {
                        tr {
                            td { code { (e.id) } } td { (e.received_at) } td { (e.kind) }
                            td { @if e.verified { "yes" } @else { "no" } }
                            td { code { (e.decision) } @if e.decision != "pending" { " by " (crate::events::decided_by(e)) } }
                        }
                    } }
                } }))
            }
        },
    )
}
