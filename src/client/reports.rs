//! Reports for people, shared by the commands that print them: a replay report (plans,
//! `rules test`) and a trial's evidence and report (`trials`, a promotion's plan). Lost work
//! first, always.

use std::fmt::Write as _;

use switchboard_model::plan::{Report, Transition};
use switchboard_model::trial::{Flag, TrialReport};

use super::Table;
use super::paint::{self, styled};

/// At most three example ids, then how many more.
fn examples(ids: &[String], count: u64) -> String {
    let shown: Vec<&str> = ids.iter().take(3).map(String::as_str).collect();
    let rest = count.saturating_sub(shown.len() as u64);
    let mut out = shown.join(", ");
    if rest > 0 {
        let _ = write!(out, " (+{rest} more)");
    }
    out
}

fn transitions_table(ts: &[&Transition], style: Option<anstyle::Style>) -> String {
    let mut t = Table::new(&[
        "from",
        "to",
        "deliveries",
        "which rule took them",
        "examples",
    ]);
    for tr in ts {
        let rules: Vec<String> = tr
            .by_rules
            .iter()
            .map(|s| {
                format!(
                    "{} -> {}: {}",
                    s.before_rule.as_deref().unwrap_or("(default)"),
                    s.after_rule.as_deref().unwrap_or("(default)"),
                    s.count
                )
            })
            .collect();
        t.styled_row(
            style,
            [
                tr.from.to_string(),
                tr.to.to_string(),
                tr.count.to_string(),
                rules.join("; "),
                examples(&tr.example_event_ids, tr.count),
            ],
        );
    }
    t.render(2)
}

/// A replay report for people: what was replayed, lost work first, every other change, the
/// totals before and after, todos per day and each rule's counts. Shared by plans and
/// `rules test`.
pub fn report_lines(r: &Report) -> String {
    report_lines_of(r, Sample::Replay)
}

/// Where a report's deliveries came from: a replay of stored ones, or a trial's live ones.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    Replay,
    Trial,
}

impl Sample {
    /// How the report's deliveries are named in its lines.
    fn deliveries(self) -> &'static str {
        match self {
            Sample::Replay => "replayed",
            Sample::Trial => "live",
        }
    }
}

/// A report's lines, naming its deliveries as `sample`'s.
pub fn report_lines_of(r: &Report, sample: Sample) -> String {
    let mut out = String::new();
    let mut replayed = match sample {
        Sample::Replay => format!("{} stored deliveries replayed", r.events_replayed),
        Sample::Trial => format!("{} live deliveries evaluated", r.events_replayed),
    };
    if let (Some(from), Some(to)) = (&r.window_from, &r.window_to) {
        let _ = write!(replayed, " (received {from} to {to})");
    }
    if r.truncated {
        replayed.push_str("; truncated: not every delivery in the window was replayed");
    }
    let _ = writeln!(out, "{replayed}");
    if let Some(stopped) = &r.stopped {
        let _ = writeln!(
            out,
            "{}",
            styled(paint::LOST, &format!("stopped: {stopped}"))
        );
    }
    // Lost work, the one definition (`Label::loses_work`): work that stops reaching a queue.
    let (lost, other): (Vec<&Transition>, Vec<&Transition>) =
        r.transitions.iter().partition(|t| t.loses_work());
    let lost_count: u64 = lost.iter().map(|t| t.count).sum();
    out.push('\n');
    if lost.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            styled(
                paint::HEADING,
                "lost work: none (every delivery that made a todo still makes one)"
            )
        );
    } else {
        let _ = writeln!(
            out,
            "{}",
            styled(
                paint::LOST,
                &format!(
                    "LOST WORK: {lost_count} {} {} that made a todo would no longer make one",
                    sample.deliveries(),
                    if lost_count == 1 {
                        "delivery"
                    } else {
                        "deliveries"
                    }
                )
            )
        );
        out.push_str(&transitions_table(&lost, Some(paint::LOST)));
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{}",
        styled(
            paint::HEADING,
            &format!(
                "changes: {} of {} {} deliveries change decision",
                r.changed,
                r.events_replayed,
                sample.deliveries()
            )
        )
    );
    if !other.is_empty() {
        out.push_str(&transitions_table(&other, Some(paint::CHANGED)));
    }
    out.push('\n');
    let labels: std::collections::BTreeSet<&switchboard_model::Label> = r
        .totals
        .before
        .keys()
        .chain(r.totals.after.keys())
        .collect();
    let mut t = Table::new(&["decision", "before", "after"]);
    for label in labels {
        let before = r.totals.before.get(label).copied().unwrap_or(0);
        let after = r.totals.after.get(label).copied().unwrap_or(0);
        t.styled_row(
            (before != after).then_some(paint::CHANGED),
            [label.to_string(), before.to_string(), after.to_string()],
        );
    }
    out.push_str(&t.render(0));
    let _ = writeln!(
        out,
        "todos per day  {:.1} -> {:.1}",
        r.todos_per_day.before, r.todos_per_day.after
    );
    if !r.rules.is_empty() {
        out.push('\n');
        let mut t = Table::new(&["rule", "pack", "first matches", "faults", "note"]);
        for rule in &r.rules {
            t.styled_row(
                (rule.faults > 0).then_some(paint::REMOVED),
                [
                    rule.id.clone(),
                    rule.from_pack.clone().unwrap_or_else(|| "-".into()),
                    rule.first_matches.to_string(),
                    rule.faults.to_string(),
                    if rule.never_matched {
                        "never matched".into()
                    } else {
                        String::new()
                    },
                ],
            );
        }
        out.push_str(&t.render(0));
    }
    out
}

/// A trial's evidence and report for people; a promotion's plan shows it too.
pub fn trial_lines(t: &TrialReport) -> String {
    let mut out = String::new();
    let d = &t.deliveries;
    let _ = writeln!(
        out,
        "{} live deliveries seen, {} evaluated, {} not evaluated (shed under load)",
        d.seen, d.evaluated, d.not_evaluated
    );
    let _ = writeln!(
        out,
        "{}",
        if t.sufficient {
            styled(
                paint::HEADING,
                "sufficient: enough deliveries, every predicted transition observed",
            )
        } else {
            styled(
                paint::CHANGED,
                &format!(
                    "INSUFFICIENT: {} (a promotion's confirm needs --allow-insufficient-trial)",
                    t.insufficient
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            )
        }
    );
    out.push('\n');
    let _ = writeln!(
        out,
        "{}",
        styled(
            paint::HEADING,
            &format!(
                "forecast (replay of {} deliveries) beside observed, per 100 deliveries",
                t.forecast_deliveries
            )
        )
    );
    if t.evidence.is_empty() {
        out.push_str(
            "  no transition forecast or observed: the candidate decides as the live rules do\n",
        );
    } else {
        let mut table = Table::new(&[
            "from",
            "to",
            "forecast",
            "observed",
            "95% interval",
            "flags",
        ]);
        for e in &t.evidence {
            // Lost work and the unforeseen in capitals, as a terminal without colour shows them.
            let flags: Vec<String> = e
                .flags()
                .into_iter()
                .map(|f| match f {
                    Flag::LostWork | Flag::Unforeseen => f.words().to_uppercase(),
                    _ => f.words().to_string(),
                })
                .collect();
            let style = if e.loses_work {
                Some(paint::LOST)
            } else if e.unforeseen || e.outside {
                Some(paint::CHANGED)
            } else {
                None
            };
            table.styled_row(
                style,
                [
                    e.from.to_string(),
                    e.to.to_string(),
                    format!("{:.2} ({})", e.forecast_rate, e.forecast_count),
                    format!("{:.2} ({})", e.observed_rate, e.observed_count),
                    format!("{:.2}-{:.2}", e.interval[0], e.interval[1]),
                    flags.join(", "),
                ],
            );
        }
        out.push_str(&table.render(2));
    }
    out.push('\n');
    out.push_str(&report_lines_of(&t.report, Sample::Trial));
    out
}
