//! The inbox: plans awaiting this person's decision, across their scopes.

use maud::{Markup, html};
use switchboard_model::plan::PlanKind;

use crate::layout::{Chrome, page};

/// One plan awaiting a person.
#[derive(Clone, Debug, Default)]
pub struct InboxItem {
    pub plan_id: String,
    pub webhook_id: String,
    pub owner_scope: String,
    pub kind: PlanKind,
    pub pack_name: String,
    pub pack_version: String,
    /// Who proposed it: the endpoint and the human it acts for.
    pub proposed_by_endpoint: String,
    pub proposed_by_human: String,
    /// RFC 3339.
    pub proposed_at: String,
    pub approval_expires_at: String,
    /// Set when the webhook's configuration moved since the plan: it can no longer be accepted.
    pub stale: bool,
    /// (approvals that count, approvals required) (issue 47).
    pub approvals: (u32, u32),
}

pub fn inbox(chrome: &Chrome, items: &[InboxItem]) -> Markup {
    page(
        "Inbox",
        Some(chrome),
        html! {
            h1 { "Plans awaiting your decision" }
            @if items.is_empty() {
                p.empty #inbox-empty { "Nothing is waiting for you." }
            } @else {
                table #inbox {
                    thead { tr {
                        th { "Plan" } th { "Webhook" } th { "Scope" } th { "Proposed by" }
                        th { "Proposed" } th { "Decide by" } th { "Approvals" }
                    } }
                    tbody {
                        @for item in items {
                            tr.plan-row data-plan=(item.plan_id) {
                                td {
                                    a href={ "/console/plans/" (item.plan_id) } {
                                        (item.kind.title(&item.pack_name, &item.pack_version))
                                    }
                                    @if item.stale { " " span.badge.stale { "stale" } }
                                }
                                td { a href={ "/console/webhooks/" (item.webhook_id) } { code { (item.webhook_id) } } }
                                td { (item.owner_scope) }
                                td { (item.proposed_by_human) " via " code { (item.proposed_by_endpoint) } }
                                td { (item.proposed_at) }
                                td { (item.approval_expires_at) }
                                td.approvals { (item.approvals.0) " of " (item.approvals.1) }
                            }
                        }
                    }
                }
            }
        },
    )
}
