//! The inbox: plans awaiting a decision across the person's scopes, each row saying what the
//! plan does, where, how much work it changes and loses, who proposed it and what it still
//! needs; plans that can no longer be accepted listed apart.

use maud::{Markup, html};
use switchboard_model::plan::{PlanKind, StaleReason};

use crate::layout::{
    Chrome, Notice, lost_mark, notice, page, scroll, webhook_link, webhook_title, when,
};
use crate::plan::what_it_does;

/// One plan awaiting a person.
#[derive(Clone, Debug, Default)]
pub struct InboxItem {
    pub plan_id: String,
    pub webhook_id: String,
    /// The webhook's display name; empty when it has none.
    pub webhook_name: String,
    pub owner_scope: String,
    pub kind: PlanKind,
    pub pack_name: String,
    pub pack_version: String,
    /// The version installed now, for an upgrade or a downgrade.
    pub from_version: Option<String>,
    /// Who proposed it: the endpoint (its id and name) and the human it acts for.
    pub proposed_by_endpoint: String,
    pub proposed_by_endpoint_name: String,
    pub proposed_by_human: String,
    /// RFC 3339.
    pub proposed_at: String,
    pub approval_expires_at: String,
    /// Set when the webhook's configuration moved since the plan, or its deadline passed: it
    /// can no longer be accepted, and why.
    pub stale: Option<StaleReason>,
    /// (approvals that count, approvals required) (issue 47).
    pub approvals: (u32, u32),
    /// Replayed deliveries, how many change decision, and how many of those lose work.
    pub replayed: u64,
    pub changed: u64,
    pub lost_work: u64,
    /// The person may read it but not decide it (a viewer of its scope).
    pub read_only: bool,
}

/// `now_ms` is the page's clock, for the relative times; `notice` what the last form did.
pub fn inbox(chrome: &Chrome, items: &[InboxItem], now_ms: i64, said: Option<&Notice>) -> Markup {
    let (stale, current): (Vec<&InboxItem>, Vec<&InboxItem>) =
        items.iter().partition(|i| i.stale.is_some());
    page(
        "Inbox",
        Some(chrome),
        html! {
            h1 { "Plans awaiting your decision" }
            (notice(said))
            @if current.is_empty() {
                p.empty #inbox-empty { "Nothing is waiting for you." }
            } @else {
                (table("inbox", "Plans awaiting a decision", &current, now_ms, None))
            }
            @if !stale.is_empty() {
                h2 #stale-heading { "No longer current" }
                p { "These plans can no longer be accepted: the webhook's rules changed since they were made, or nobody decided before the deadline (those stay here for a day). Ask the agent to plan again, or dismiss them: a dismissed plan is kept, and leaves every inbox." }
                (table("inbox-stale", "Plans no longer current", &stale, now_ms, Some(&chrome.csrf)))
            }
        },
    )
}

/// With `dismiss` (the CSRF token), each row a person may decide has a Dismiss form.
fn table(
    id: &str,
    label: &str,
    items: &[&InboxItem],
    now_ms: i64,
    dismiss: Option<&str>,
) -> Markup {
    scroll(
        label,
        html! {
            table id=(id) {
                thead { tr {
                    th scope="col" { "Plan" } th scope="col" { "Webhook" } th.num scope="col" { "Changes" }
                    th.num scope="col" { "Lost work" } th scope="col" { "Proposed by" }
                    th scope="col" { "Proposed" } th scope="col" { "Decide by" } th scope="col" { "Approvals" }
                    @if dismiss.is_some() { th scope="col" { "Dismiss" } }
                } }
                tbody {
                    @for item in items {
                        tr.plan-row.lost[item.lost_work > 0] data-plan=(item.plan_id) {
                            td {
                                a href={ "/console/plans/" (item.plan_id) } {
                                    (item.kind.title(&item.pack_name, &item.pack_version))
                                }
                                br;
                                small { "This plan " (what_it_does(item.kind, &item.pack_name, &item.pack_version, item.from_version.as_deref())) }
                                @if let Some(why) = item.stale {
                                    " " span.badge.stale { @if why == StaleReason::ConfigurationChanged { "stale" } @else { "expired" } }
                                    br; small.stale-why { "No longer current: " (why.words()) "." }
                                }
                                @if item.read_only { " " span.badge.read-only { "read-only" } }
                            }
                            td { (webhook_link(&item.webhook_id, &item.webhook_name)) br; small { (item.owner_scope) } }
                            td.num.changed { (item.changed) " of " (item.replayed) }
                            td.num.lost-work { @if item.lost_work > 0 { (lost_mark()) ": " (item.lost_work) } @else { "none" } }
                            td { (item.proposed_by_human) br; small { "via " (crate::layout::endpoint(&item.proposed_by_endpoint, &item.proposed_by_endpoint_name)) } }
                            td.when { (when(&item.proposed_at, now_ms)) }
                            td.when { (when(&item.approval_expires_at, now_ms)) }
                            td.approvals { (item.approvals.0) " of " (item.approvals.1) }
                            @if let Some(csrf) = dismiss {
                                td { @if !item.read_only {
                                    form.inline method="post" action={ "/console/plans/" (item.plan_id) "/dismiss" } {
                                        input type="hidden" name="csrf" value=(csrf);
                                        button.dismiss type="submit" aria-label={ "Dismiss " (item.kind.title(&item.pack_name, &item.pack_version)) " on " (webhook_title(&item.webhook_id, &item.webhook_name)) } { "Dismiss" }
                                    }
                                } }
                            }
                        }
                    }
                }
            }
        },
    )
}
