//! Approvals and the change log in the console (issue 47): how many people a plan needs and
//! who has accepted it (plan page, inbox), the webhook's approval rule, and its change log
//! with who proposed, who approved and what changed.

use maud::{Markup, html};

use crate::layout::scroll;
use switchboard_model::approval::{ApprovalRule, NotCounted, Risk, Tally};

/// The plan page's approvals: required, given (and whether each counts), still needed, and
/// from whom they cannot come.
pub(crate) fn plan_approvals(tally: Option<&Tally>) -> Markup {
    let Some(t) = tally else {
        return html! {};
    };
    html! {
        section.approvals #approvals data-required=(t.required) data-counted=(t.counted) data-still-needed=(t.still_needed) {
            h2 { "Approvals" }
            p #approvals-summary {
                strong { (t.counted) " of " (t.required) } " approvals count"
                @if t.still_needed > 0 { "; " strong { (t.still_needed) " more needed" } }
                @if !t.risks.is_empty() {
                    " (this plan " (risk_words(&t.risks)) ")"
                }
                "."
            }
            @if !t.given.is_empty() {
                ul #approvals-given {
                    @for g in &t.given {
                        li.approval data-person=(g.person) data-counts=(g.counts) {
                            strong { (g.person) }
                            @match g.not_counted {
                                Some(NotCounted::Proposer) => { " — recorded, does not count: the proposing agent acts for them" }
                                Some(NotCounted::OtherPlan) => { " — recorded for another plan, does not count" }
                                None => { " — counts" }
                            }
                        }
                    }
                }
            }
            @if t.still_needed > 0 && !t.cannot_come_from.is_empty() {
                p #approvals-not-from { "Cannot come from: " (t.cannot_come_from.join(", ")) "." }
            }
        }
    }
}

/// `loses work and removes a pack`.
fn risk_words(risks: &[Risk]) -> String {
    let words: Vec<&str> = risks.iter().map(|r| r.describe()).collect();
    match words.as_slice() {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The webhook's approval rule in one line: `1 person; 2 when a plan loses work, …`.
pub(crate) fn rule_line(rule: &ApprovalRule, is_default: bool) -> Markup {
    let tiers: Vec<String> = rule
        .tiers
        .iter()
        .filter(|(_, n)| **n > rule.required)
        .map(|(risk, n)| format!("{n} when it {}", risk.describe()))
        .collect();
    html! {
        span #approval-rule data-required=(rule.required) {
            (rule.required) @if rule.required == 1 { " person" } @else { " people" }
            @if !tiers.is_empty() { "; " (tiers.join("; ")) }
            @if rule.proposer_counts { ". The person the proposing agent acts for counts." }
            @else { ". The person the proposing agent acts for does not count." }
            @if is_default { " " small { "(the default; an operator sets it with " code { "switchboard admin webhook approvals" } ")" } }
        }
    }
}

/// One change-log entry as the webhook page lists it.
#[derive(Clone, Debug, Default)]
pub struct ChangeRow {
    pub seq: u64,
    /// RFC 3339.
    pub at: String,
    /// `configuration`, `approval_rules`, …
    pub kind: String,
    /// Who made it: an endpoint and its human, a person, or an operator.
    pub actor: String,
    pub proposed_by: Option<String>,
    pub approvers: Vec<String>,
    /// What changed: the version saved and its op, or the operator's act.
    pub what: String,
    /// The entry's hash, shortened.
    pub hash: String,
}

pub(crate) fn change_log(rows: &[ChangeRow]) -> Markup {
    html! {
        h2 #change-log-heading { "Change log" }
        @if rows.is_empty() { p #no-changes { "No changes recorded." } } @else {
            (scroll("Change log", html! { table #change-log {
                thead { tr {
                    th.num scope="col" { "#" } th scope="col" { "When" } th scope="col" { "Kind" } th scope="col" { "By" } th scope="col" { "Proposed by" }
                    th scope="col" { "Approved by" } th scope="col" { "What changed" } th scope="col" { "Hash" }
                } }
                tbody { @for r in rows {
                    tr.change-row data-seq=(r.seq) {
                        td.num { (r.seq) } td { (r.at) } td { (r.kind) } td { (r.actor) }
                        td { (r.proposed_by.as_deref().unwrap_or("")) }
                        td.approvers { (r.approvers.join(", ")) }
                        td { (r.what) }
                        td { code { (r.hash) } }
                    }
                } }
            } }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn risks_read_as_a_sentence() {
        assert_eq!(risk_words(&[Risk::LostWork]), "loses work");
        assert_eq!(
            risk_words(&[Risk::LostWork, Risk::RemovesPack, Risk::DefaultAction]),
            "loses work, removes a pack and changes the default action"
        );
    }
}
