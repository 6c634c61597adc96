//! What the router did over time, on the webhook page (issue 48): deliveries per hour over the
//! last days by decision — todos (a queue's or the webhook's default queue), drops,
//! quarantines, faults, and deliveries not routed yet — as stacked bars in inline SVG, rendered here (no script, no
//! style attribute: `style.css` colours it by class), with every configuration saved in the
//! window marked on the time axis. The same counts follow per day as a table, so the chart
//! reads without colour and without sight.

use maud::{Markup, html};
use switchboard_model::Label;

use crate::layout::scroll;

const HOUR_MS: i64 = 3_600_000;
/// The frame, in SVG user units.
const AXIS_X: f64 = 44.0;
const BAR: f64 = 5.0;
const PLOT_HEIGHT: f64 = 140.0;
const TOP: f64 = 18.0;
const BOTTOM: f64 = 22.0;

/// One hour's deliveries by what was decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HourCounts {
    pub todos: u64,
    pub drops: u64,
    pub quarantines: u64,
    pub faults: u64,
    /// Not routed yet (no router answered so far).
    pub pending: u64,
}

impl HourCounts {
    /// Counts `n` deliveries decided `label` (`None`: not routed yet).
    pub fn add(&mut self, label: Option<&Label<'_>>, n: u64) {
        let slot = match label {
            // The default is the webhook's default queue: a todo too.
            Some(Label::Queue(_) | Label::Default) => &mut self.todos,
            Some(Label::Drop) => &mut self.drops,
            Some(Label::Quarantine) => &mut self.quarantines,
            Some(Label::Fault) => &mut self.faults,
            None => &mut self.pending,
        };
        *slot += n;
    }

    pub fn total(&self) -> u64 {
        self.todos + self.drops + self.quarantines + self.faults + self.pending
    }

    /// The classes bottom to top, as the chart stacks them: (class, words, count).
    fn parts(&self) -> [(&'static str, &'static str, u64); 5] {
        [
            ("todos", "todos", self.todos),
            ("drops", "drops", self.drops),
            ("quarantines", "quarantines", self.quarantines),
            ("faults", "faults", self.faults),
            ("pending", "not routed yet", self.pending),
        ]
    }

    fn plus(mut self, o: &HourCounts) -> HourCounts {
        self.todos += o.todos;
        self.drops += o.drops;
        self.quarantines += o.quarantines;
        self.faults += o.faults;
        self.pending += o.pending;
        self
    }
}

/// The webhook's decisions per hour from `start_ms` (a whole hour, UTC), one entry per hour,
/// and the configuration versions saved meanwhile.
#[derive(Clone, Debug, Default)]
pub struct Activity {
    pub start_ms: i64,
    pub hours: Vec<HourCounts>,
    /// (saved at, ms since the epoch; version).
    pub changes: Vec<(i64, i64)>,
}

impl Activity {
    /// The first hour of the window: midnight (UTC) `days - 1` days before `now_ms`'s day, so
    /// the window is `days` whole days, today's hours to come left empty.
    pub fn start_of(now_ms: i64, days: u32) -> i64 {
        let day = 24 * HOUR_MS;
        (now_ms.div_euclid(day) - (days as i64 - 1)) * day
    }

    /// `days` UTC days of hours ending with today ([`Activity::start_of`]), filled from the
    /// store's `(hour since the epoch, label, count)` rows; rows outside the window are left out.
    pub fn from_counts(
        now_ms: i64,
        days: u32,
        counts: &[(i64, Option<Label<'_>>, u64)],
        changes: Vec<(i64, i64)>,
    ) -> Activity {
        let hours = days as i64 * 24;
        let first = Activity::start_of(now_ms, days) / HOUR_MS;
        let mut out = vec![HourCounts::default(); hours as usize];
        for (hour, label, n) in counts {
            if let Ok(i) = usize::try_from(hour - first)
                && let Some(slot) = out.get_mut(i)
            {
                slot.add(label.as_ref(), *n);
            }
        }
        let start_ms = first * HOUR_MS;
        Activity {
            start_ms,
            hours: out,
            changes: changes
                .into_iter()
                .filter(|(at, _)| *at >= start_ms)
                .collect(),
        }
    }

    /// The counts per UTC day: (the day as `2026-12-05`, its counts).
    pub fn days(&self) -> Vec<(String, HourCounts)> {
        self.hours
            .chunks(24)
            .enumerate()
            .map(|(d, hours)| {
                let at = self.start_ms + d as i64 * 24 * HOUR_MS;
                let sum = hours.iter().fold(HourCounts::default(), |a, h| a.plus(h));
                (day(at), sum)
            })
            .collect()
    }
}

/// `2026-12-05` for a time in ms since the epoch (UTC).
fn day(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

/// A round maximum for the axis: 1, 2, 5 × 10ⁿ at or above `max`.
pub(crate) fn round_max(max: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            if m * step >= max.max(1) {
                return m * step;
            }
        }
        step = step.saturating_mul(10);
    }
}

/// Each hour's bar, stacked bottom to top in [`HourCounts::parts`]' order: (class, x, top,
/// height); nothing for a class with no deliveries.
fn bars(a: &Activity, max: f64) -> Vec<(&'static str, f64, f64, f64)> {
    let y = |v: u64| TOP + PLOT_HEIGHT - v as f64 / max * PLOT_HEIGHT;
    let mut out = Vec::new();
    for (i, h) in a.hours.iter().enumerate() {
        let x = AXIS_X + BAR * i as f64 + 0.5;
        let mut base = 0;
        for (class, _, n) in h.parts() {
            if n > 0 {
                let (bottom, top) = (y(base), y(base + n));
                out.push((class, x, top, (bottom - top).max(0.5)));
                base += n;
            }
        }
    }
    out
}

/// The chart, the legend and the per-day table.
pub(crate) fn activity(a: &Activity) -> Markup {
    let peak = a.hours.iter().map(HourCounts::total).max().unwrap_or(0);
    let max = round_max(peak) as f64;
    let width = AXIS_X + BAR * a.hours.len() as f64 + 8.0;
    let height = TOP + PLOT_HEIGHT + BOTTOM;
    let total: u64 = a.hours.iter().map(HourCounts::total).sum();
    let days = a.days();
    let summary = format!(
        "{total} deliveries over the last {} days, at most {peak} in an hour; {} configuration changes",
        days.len(),
        a.changes.len()
    );
    html! {
        figure.activity #activity {
            svg.activity-chart role="img" aria-labelledby="activity-title" width=(width) height=(height)
                viewBox={ "0 0 " (width) " " (height) } xmlns="http://www.w3.org/2000/svg" {
                title #activity-title { (summary) }
                g.axis {
                    line x1=(AXIS_X) y1=(TOP) x2=(AXIS_X) y2=(TOP + PLOT_HEIGHT) {}
                    line x1=(AXIS_X) y1=(TOP + PLOT_HEIGHT) x2=(width - 8.0) y2=(TOP + PLOT_HEIGHT) {}
                    text x=(AXIS_X - 4.0) y=(TOP + 4.0) text-anchor="end" { (max as u64) }
                    text x=(AXIS_X - 4.0) y=(TOP + PLOT_HEIGHT) text-anchor="end" { "0" }
                    @for (d, (name, _)) in days.iter().enumerate() {
                        @let x = AXIS_X + BAR * 24.0 * d as f64;
                        line.day x1=(x) y1=(TOP) x2=(x) y2=(TOP + PLOT_HEIGHT + 4.0) {}
                        text x=(x + 2.0) y=(TOP + PLOT_HEIGHT + 16.0) { (name.get(5..).unwrap_or(name)) }
                    }
                }
                @for (class, x, top, h) in bars(a, max) {
                    rect class=(class) x=(x) y=(top) width=(BAR - 1.0) height=(h) {}
                }
                @for (at, version) in &a.changes {
                    @let x = AXIS_X + BAR * ((at - a.start_ms) as f64 / HOUR_MS as f64);
                    g.change data-version=(version) {
                        line x1=(x) y1=(TOP - 4.0) x2=(x) y2=(TOP + PLOT_HEIGHT) {}
                        text x=(x + 2.0) y=(TOP - 6.0) { "v" (version) }
                    }
                }
            }
            figcaption.legend {
                @for (class, words, _) in HourCounts::default().parts() {
                    span.key { span class={ "swatch " (class) } aria-hidden="true" {} " " (words) } " "
                }
                span.key { span.swatch.change aria-hidden="true" {} " a configuration saved (its version)" }
            }
        }
        (scroll("Deliveries per day", html! {
            table #activity-days {
                caption { "Deliveries per day (UTC) by decision" }
                thead { tr {
                    th scope="col" { "Day" } th.num scope="col" { "Todos" } th.num scope="col" { "Drops" }
                    th.num scope="col" { "Quarantines" } th.num scope="col" { "Faults" } th.num scope="col" { "Not routed yet" }
                    th.num scope="col" { "All" }
                } }
                tbody { @for (name, c) in &days {
                    tr data-day=(name) {
                        th scope="row" { (name) } td.num { (c.todos) } td.num { (c.drops) } td.num { (c.quarantines) }
                        td.num { (c.faults) } td.num { (c.pending) } td.num { (c.total()) }
                    }
                } }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_457_600_000 + 30 * 60_000; // 2026-12-05T08:30Z

    #[test]
    fn counts_fill_their_hours_and_days_and_leave_out_what_is_outside_the_window() {
        let last = NOW / HOUR_MS;
        let counts = [
            (last, Some(Label::Drop), 2),
            (last, None, 1),
            (last - 24, Some(Label::queue("forge")), 3),
            (last - 7 * 24, Some(Label::Fault), 9),
        ];
        let a = Activity::from_counts(NOW, 7, &counts, vec![(NOW - 60_000, 4), (0, 1)]);
        assert_eq!(a.hours.len(), 168);
        // From midnight six days before: 2026-11-29T00:00Z; now is hour 6 × 24 + 8.
        assert_eq!(day(a.start_ms), "2026-11-29");
        assert_eq!(a.start_ms % (24 * HOUR_MS), 0);
        let newest = a.hours[6 * 24 + 8];
        assert_eq!((newest.drops, newest.pending, newest.total()), (2, 1, 3));
        assert_eq!(a.hours[5 * 24 + 8].todos, 3);
        assert_eq!(
            a.hours.iter().map(HourCounts::total).sum::<u64>(),
            6,
            "the fault a week ago is outside"
        );
        assert_eq!(a.changes, vec![(NOW - 60_000, 4)]);
        let days = a.days();
        assert_eq!(days.len(), 7);
        assert_eq!(days[6].0, "2026-12-05");
        assert_eq!(days[6].1.total(), 3);
        assert_eq!(days[5].1.todos, 3);
    }

    #[test]
    fn the_axis_ends_at_a_round_number() {
        let got: Vec<u64> = [0, 1, 3, 7, 10, 11, 240, 5000]
            .into_iter()
            .map(round_max)
            .collect();
        assert_eq!(got, vec![1, 1, 5, 10, 10, 20, 500, 5000]);
    }

    #[test]
    fn bars_stack_to_their_hour_and_changes_are_marked() {
        let last = NOW / HOUR_MS;
        let counts = [
            (last, Some(Label::Drop), 4),
            (last, Some(Label::Quarantine), 1),
        ];
        let a = Activity::from_counts(NOW, 7, &counts, vec![(NOW, 9)]);
        let html = activity(&a).into_string();
        assert_eq!(html.matches("<rect class=\"drops\"").count(), 1, "{html}");
        assert_eq!(html.matches("<rect class=\"quarantines\"").count(), 1);
        assert!(html.contains("data-version=\"9\""), "{html}");
        assert!(html.contains(">v9</text>"), "{html}");
        assert!(html.contains("5 deliveries over the last 7 days"), "{html}");
        assert!(
            html.contains("<tr data-day=\"2026-12-05\"><th scope=\"row\">2026-12-05</th><td class=\"num\">0</td><td class=\"num\">4</td><td class=\"num\">1</td>"),
            "{html}"
        );
    }
}
