//! The events page: a webhook's deliveries newest first, filtered by decision, kind and time,
//! each with what decided it — the rule and the configuration version (the explain a person
//! needs at a glance); never a body.

use maud::{Markup, html};

use crate::layout::{Chrome, heading_name, page, scroll, webhook_title, when};

/// An event as the webhook page and the events page list it: never its body.
#[derive(Clone, Debug, Default)]
pub struct EventRow {
    pub id: String,
    pub received_at: String,
    pub kind: String,
    pub verified: bool,
    /// The decision label, or `pending` when not routed yet.
    pub decision: String,
    pub rule_id: Option<String>,
    /// The saved configuration version that decided it, when recorded.
    pub version: Option<i64>,
}

/// The filters as the person set them (echoed into the form).
#[derive(Clone, Debug, Default)]
pub struct EventsFilter {
    /// `todo`, `drop`, `quarantine`, `fault`, `default`, `pending`, or empty for all.
    pub decision: String,
    pub kind: String,
    /// `YYYY-MM-DD` (UTC), inclusive; empty for no bound.
    pub since: String,
    pub until: String,
}

#[derive(Clone, Debug, Default)]
pub struct EventsView {
    pub webhook_id: String,
    /// The webhook's display name; empty when it has none.
    pub webhook_name: String,
    pub owner_scope: String,
    pub filter: EventsFilter,
    pub rows: Vec<EventRow>,
    /// The next page's URL, when there is one.
    pub next: Option<String>,
    /// A filter that did not read (a date that is not one), said in words; nothing is listed.
    pub problem: Option<String>,
    pub now_ms: i64,
}

const DECISIONS: [(&str, &str); 7] = [
    ("", "any decision"),
    ("todo", "todos (any queue, the default too)"),
    ("drop", "drops"),
    ("quarantine", "quarantines"),
    ("fault", "faults"),
    ("default", "the default queue (no rule matched)"),
    ("pending", "not routed yet"),
];

/// What decided an event, in words: `rule ci-noise of version 4`.
pub(crate) fn decided_by(e: &EventRow) -> Markup {
    html! {
        @if e.decision == "pending" { "not routed yet" } @else {
            @match &e.rule_id {
                Some(rule) => { "rule " code { (rule) } }
                None => { "the default action" }
            }
            @if let Some(v) = e.version { " of version " (v) }
        }
    }
}

pub fn events_page(chrome: &Chrome, v: &EventsView) -> Markup {
    let f = &v.filter;
    page(
        &format!(
            "Events of {}",
            webhook_title(&v.webhook_id, &v.webhook_name)
        ),
        Some(chrome),
        html! {
            h1 { "Events of " (heading_name(&v.webhook_id, &v.webhook_name)) }
            p { a href={ "/console/webhooks/" (v.webhook_id) } { "Back to the webhook" } " · " (v.owner_scope) }
            form.filters #event-filters method="get" action={ "/console/webhooks/" (v.webhook_id) "/events" } {
                label for="f-decision" { "Decision " }
                select #f-decision name="decision" {
                    @for (value, words) in DECISIONS {
                        option value=(value) selected[value == f.decision] { (words) }
                    }
                }
                " "
                label for="f-kind" { "Kind " }
                input #f-kind type="text" name="kind" value=(f.kind) placeholder="pull_request.opened" maxlength="200";
                " "
                label for="f-since" { "From " }
                input #f-since type="date" name="since" value=(f.since);
                " "
                label for="f-until" { "To " }
                input #f-until type="date" name="until" value=(f.until);
                " "
                button #apply-filters type="submit" { "Filter" }
            }
            @if let Some(problem) = &v.problem {
                div.notice.refused role="alert" { span.icon aria-hidden="true" { "✕" } " " span #notice { (problem) } }
            } @else if v.rows.is_empty() {
                p #no-events { "No event matches." }
            } @else {
                (scroll("Events", html! {
                    table #event-list {
                        thead { tr {
                            th scope="col" { "Event" } th scope="col" { "Received" } th scope="col" { "Kind" }
                            th scope="col" { "Signed" } th scope="col" { "Decision" } th scope="col" { "Decided by" }
                        } }
                        tbody { @for e in &v.rows {
                            tr.event-row data-decision=(e.decision) {
                                td { code { (e.id) } } td.when { (when(&e.received_at, v.now_ms)) } td { (e.kind) }
                                td { @if e.verified { "yes" } @else { "no" } }
                                td { code { (e.decision) } }
                                td.decided-by { (decided_by(e)) }
                            }
                        } }
                    }
                }))
                @if let Some(next) = &v.next { p { a #next-page href=(next) { "Older events" } } }
            }
        },
    )
}
