//! What a plan's page and a trial's page both show of a report (the plan report's shape):
//! totals before and after, the transitions, per-rule counts and todos per day. Only the
//! deliveries differ: replayed for a plan, live and evaluated for a trial.

use std::collections::BTreeSet;

use maud::{Markup, PreEscaped, html};
use switchboard_model::plan::{Report, TodosPerDay};
use switchboard_model::{Configuration, Label};

use crate::layout::{lost_mark, scroll};

/// Where a report's deliveries come from: a plan's replay of stored ones, or a trial's
/// live ones (a trial's transitions carry no per-rule shifts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Replay,
    Trial,
}

impl Source {
    /// The deliveries, as the page names them.
    fn deliveries(self) -> &'static str {
        match self {
            Source::Replay => "replayed",
            Source::Trial => "evaluated",
        }
    }
}

/// Deliveries per decision, before and after.
pub(crate) fn totals(r: &Report, source: Source) -> Markup {
    let labels: BTreeSet<&Label> = r
        .totals
        .before
        .keys()
        .chain(r.totals.after.keys())
        .collect();
    let count =
        |m: &std::collections::BTreeMap<Label, u64>, l: &Label| m.get(l).copied().unwrap_or(0);
    html! {
        (scroll("Decisions before and after", html! {
        table #totals {
            thead { tr { th scope="col" { "Decision" } th.num scope="col" { "Before" } th.num scope="col" { "After" } } }
            tbody {
                @for label in labels {
                    @let (before, after) = (count(&r.totals.before, label), count(&r.totals.after, label));
                    tr.changed[before != after] { td { code { (label.to_string()) } } td.num { (before) } td.num { (after) } }
                }
            }
        }
        }))
        p { (r.changed) " of " (r.events_replayed) " " (source.deliveries()) " deliveries change decision." }
    }
}

/// The deliveries whose decision changes, lost work first, with example event ids (ids
/// only: nothing links to a payload).
pub(crate) fn transitions(r: &Report, source: Source) -> Markup {
    let by_rules = source == Source::Replay;
    html! {
        @if r.transitions.is_empty() {
            p #no-transitions { "No " (source.deliveries()) " delivery changes decision." }
        } @else {
            (scroll("What changes", html! {
            table #transitions {
                thead { tr { th scope="col" { "From" } th scope="col" { "To" } th.num scope="col" { "Deliveries" } @if by_rules { th scope="col" { "Which rule took them" } } th scope="col" { "Example events" } } }
                tbody {
                    @for t in &r.transitions {
                        tr.lost[t.loses_work()] {
                            td { code { (t.from.to_string()) } } td { code { (t.to.to_string()) } @if t.loses_work() { " " (lost_mark()) } } td.num { (t.count) }
                            @if by_rules {
                                td { ul { @for s in &t.by_rules {
                                    li { (s.before_rule.as_deref().unwrap_or("(default)")) " → " (s.after_rule.as_deref().unwrap_or("(default)")) ": " (s.count) }
                                } } }
                            }
                            td { @for id in &t.example_event_ids { code { (id) } " " } }
                        }
                    }
                }
            }
            }))
        }
    }
}

/// Each candidate rule, in order: its condition and action (from the candidate, when the
/// page has it), deliveries it decided first, faults, never matched.
pub(crate) fn rules(report: &Report, candidate: Option<&Configuration>) -> Markup {
    let rule_of =
        |id: &str| candidate.and_then(|c| c.rules.iter().find(|r| r.id.as_deref() == Some(id)));
    scroll(
        "Rules",
        html! {
            table #rules {
                thead { tr {
                    th scope="col" { "Rule" } th scope="col" { "Pack" }
                    @if candidate.is_some() { th scope="col" { "When" } th scope="col" { "Action" } }
                    th.num scope="col" { "First matches" } th.num scope="col" { "Faults" } th scope="col" { "Notes" }
                } }
                tbody {
                    @for r in &report.rules {
                        tr.faulted[r.faults > 0] {
                            td { code { (r.id) } } td { (r.from_pack.as_deref().unwrap_or("yours")) }
                            @if candidate.is_some() {
                                @let rule = rule_of(&r.id);
                                td { @if let Some(rule) = rule { code.expr { (rule.when) } } }
                                td { @if let Some(rule) = rule { code { (rule.action.label().to_string()) } } }
                            }
                            td.num { (r.first_matches) } td.num { (r.faults) }
                            td {
                                @if r.faults > 0 { span.badge.stale { "faulted" } " " }
                                @if r.never_matched { span.badge.stale { "never matched" } }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// Two horizontal bars, before and after, scaled to the larger: inline SVG, no script.
pub(crate) fn todos_chart(t: &TodosPerDay) -> Markup {
    let max = t.before.max(t.after).max(f64::EPSILON);
    let width = |v: f64| (v / max * 300.0).max(1.0);
    let bar = |y: u32, label: &str, value: f64, class: &str| {
        format!(
            r#"<text x="0" y="{ty}" class="label">{label}</text><rect x="60" y="{y}" width="{w:.1}" height="18" class="{class}"/><text x="{tx:.1}" y="{ty}" class="value">{value:.1}</text>"#,
            ty = y + 14,
            w = width(value),
            tx = 66.0 + width(value),
        )
    };
    let svg = format!(
        r#"<svg id="todos-chart" role="img" aria-label="Todos per day: {b:.1} before, {a:.1} after" width="420" height="56" viewBox="0 0 420 56" xmlns="http://www.w3.org/2000/svg">{}{}</svg>"#,
        bar(4, "before", t.before, "before"),
        bar(30, "after", t.after, "after"),
        b = t.before,
        a = t.after,
    );
    // Only numbers and fixed words are formatted into it: nothing a tenant wrote.
    PreEscaped(svg)
}
