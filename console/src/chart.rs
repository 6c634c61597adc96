//! The forecast-versus-observed chart of a trial, as inline SVG (no script, no external
//! reference, no style attribute: the CSP allows none, `style.css` styles it by class). One
//! row per transition in the evidence's own order (lost work first): the 95 % interval the
//! observed rate should fall in if the forecast holds as a bar, the forecast rate as a
//! mark, the observed rate as a dot, on one axis from 0 to a round maximum, per 100
//! deliveries. A row flagged unforeseen or outside its interval has the `flagged` class and
//! says so in words, so the chart reads without colour.
//!
//! [`layout`] is the geometry (pure numbers, unit-tested); [`evidence_chart`] draws it with
//! maud, which escapes the labels (queue names are a tenant's words).

use maud::{Markup, html};
use switchboard_model::trial::TransitionEvidence;

/// The frame, in SVG user units: the labels, the plot, the flags.
const WIDTH: f64 = 940.0;
const PLOT_X0: f64 = 230.0;
const PLOT_WIDTH: f64 = 360.0;
const FLAGS_X: f64 = PLOT_X0 + PLOT_WIDTH + 18.0;
const TOP: f64 = 6.0;
const ROW_HEIGHT: f64 = 28.0;
const AXIS_HEIGHT: f64 = 36.0;
pub(crate) const DOT_RADIUS: f64 = 4.5;
/// A row's label is cut to this many characters (the table beside it has it whole).
const LABEL_CHARS: usize = 32;

/// Where everything of the chart goes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Layout {
    /// The axis runs from 0 to this, per 100 deliveries.
    pub max: f64,
    /// Axis ticks: (value, x).
    pub ticks: Vec<(f64, f64)>,
    pub rows: Vec<RowLayout>,
    pub height: f64,
}

/// One transition's row.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RowLayout {
    /// The top of the row.
    pub y: f64,
    /// `from → to`, cut to [`LABEL_CHARS`].
    pub label: String,
    /// The interval's bar, left and right x.
    pub bar: (f64, f64),
    pub forecast_x: f64,
    pub observed_x: f64,
    /// `row`, then `lost`, `flagged`, `unforeseen`, `outside`, `unobserved` as they apply.
    pub class: String,
    /// The flags in words (the row's text beside the plot).
    pub flags: Vec<&'static str>,
    /// Everything the row says, as one sentence (its SVG `<title>`).
    pub title: String,
}

/// The evidence's flags in words, in the order they are shown.
pub(crate) fn flags(e: &TransitionEvidence) -> Vec<&'static str> {
    e.flags().into_iter().map(|f| f.words()).collect()
}

/// A row is drawn apart when the trial disagrees with the forecast.
pub(crate) fn flagged(e: &TransitionEvidence) -> bool {
    e.unforeseen || e.outside
}

/// A rate per 100 as people read it: one decimal.
pub(crate) fn rate(v: f64) -> String {
    format!("{v:.1}")
}

/// The axis: the smallest of 1, 2 and 5 times a power of ten at or above `v` (at least 1,
/// at most 100: rates are per 100), so it ends on a round number, and its tick step (a
/// quarter of a 2, a fifth of a 1 or a 5).
fn axis(v: f64) -> (f64, f64) {
    let mut base = 1.0;
    loop {
        for (step, parts) in [(1.0, 5.0), (2.0, 4.0), (5.0, 5.0)] {
            let max = step * base;
            if v.is_nan() || v <= max || max >= 100.0 {
                return (max, max / parts);
            }
        }
        base *= 10.0;
    }
}

fn cut(text: &str) -> String {
    if text.chars().count() <= LABEL_CHARS {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(LABEL_CHARS - 1).collect();
        s.push('…');
        s
    }
}

/// The chart's geometry. An observed rate outside its interval is drawn outside the bar,
/// a dot's width clear of it, whatever the scale: the picture never contradicts the flag.
pub(crate) fn layout(evidence: &[TransitionEvidence]) -> Layout {
    let highest = evidence
        .iter()
        .flat_map(|e| [e.forecast_rate, e.observed_rate, e.interval[1]])
        .fold(0.0_f64, f64::max);
    let (max, step) = axis(highest);
    let x = |v: f64| PLOT_X0 + v.clamp(0.0, max) / max * PLOT_WIDTH;
    let ticks = (0..=5)
        .map(|i| f64::from(i) * step)
        .take_while(|v| *v <= max + 1e-9)
        .map(|v| (v, x(v)))
        .collect();
    let rows = evidence
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let bar = (
                x(e.interval[0]),
                x(e.interval[1]).max(x(e.interval[0]) + 1.0),
            );
            let clear = DOT_RADIUS + 1.0;
            let mut observed_x = x(e.observed_rate);
            if e.outside {
                if e.observed_rate < e.interval[0] {
                    observed_x = observed_x.min(bar.0 - clear);
                } else {
                    observed_x = observed_x.max(bar.1 + clear);
                }
            }
            let mut class = String::from("row");
            for (on, name) in [
                (e.loses_work, "lost"),
                (flagged(e), "flagged"),
                (e.unforeseen, "unforeseen"),
                (e.outside, "outside"),
                (e.unobserved, "unobserved"),
            ] {
                if on {
                    class.push(' ');
                    class.push_str(name);
                }
            }
            let flags = flags(e);
            let label = format!("{} → {}", e.from, e.to);
            let mut title = format!(
                "{label}: forecast {}, observed {} per 100 deliveries (95 % interval {} to {})",
                rate(e.forecast_rate),
                rate(e.observed_rate),
                rate(e.interval[0]),
                rate(e.interval[1]),
            );
            if !flags.is_empty() {
                title.push_str("; ");
                title.push_str(&flags.join(", "));
            }
            RowLayout {
                y: TOP + ROW_HEIGHT * i as f64,
                label: cut(&label),
                bar,
                forecast_x: x(e.forecast_rate),
                observed_x,
                class,
                flags,
                title,
            }
        })
        .collect();
    Layout {
        max,
        ticks,
        rows,
        height: TOP + ROW_HEIGHT * evidence.len() as f64 + AXIS_HEIGHT,
    }
}

/// Coordinates and tick values are written to a tenth, whole ones without a decimal.
fn n(v: f64) -> String {
    let tenths = (v * 10.0).round();
    if tenths % 10.0 == 0.0 {
        format!("{:.0}", tenths / 10.0)
    } else {
        format!("{:.1}", tenths / 10.0)
    }
}

/// The chart as inline SVG with element id `id`; a sentence instead when there is no
/// transition to draw.
pub(crate) fn evidence_chart(id: &str, evidence: &[TransitionEvidence]) -> Markup {
    if evidence.is_empty() {
        return html! {
            p #(id) { "No transition was forecast or observed: the candidate decides every evaluated delivery as the live rules do." }
        };
    }
    let l = layout(evidence);
    let flagged_rows = evidence.iter().filter(|e| flagged(e)).count();
    let summary = format!(
        "Forecast versus observed, per 100 deliveries: {} transitions, {} flagged (unforeseen or outside the interval)",
        evidence.len(),
        flagged_rows
    );
    let axis_y = TOP + ROW_HEIGHT * evidence.len() as f64 + 4.0;
    html! {
        svg #(id) .evidence-chart role="img" aria-label=(summary)
            width=(n(WIDTH)) height=(n(l.height)) viewBox={ "0 0 " (n(WIDTH)) " " (n(l.height)) }
            xmlns="http://www.w3.org/2000/svg" {
            title { (summary) }
            @for (value, tx) in &l.ticks {
                line .grid x1=(n(*tx)) x2=(n(*tx)) y1=(n(TOP)) y2=(n(axis_y)) {}
                text .tick x=(n(*tx)) y=(n(axis_y + 14.0)) text-anchor="middle" { (n(*value)) }
            }
            g .axis {
                line x1=(n(PLOT_X0)) x2=(n(PLOT_X0 + PLOT_WIDTH)) y1=(n(axis_y)) y2=(n(axis_y)) {}
                text .caption x=(n(PLOT_X0 + PLOT_WIDTH / 2.0)) y=(n(axis_y + 30.0)) text-anchor="middle" {
                    "per 100 deliveries (0 to " (n(l.max)) ")"
                }
            }
            @for row in &l.rows {
                @let mid = row.y + ROW_HEIGHT / 2.0;
                g class=(row.class) {
                    title { (row.title) }
                    rect .band x="0" y=(n(row.y)) width=(n(WIDTH)) height=(n(ROW_HEIGHT)) {}
                    text .label x="4" y=(n(mid + 4.0)) { (row.label) }
                    rect .interval x=(n(row.bar.0)) y=(n(row.y + 7.0)) width=(n(row.bar.1 - row.bar.0)) height="14" {}
                    line .forecast x1=(n(row.forecast_x)) x2=(n(row.forecast_x)) y1=(n(row.y + 3.0)) y2=(n(row.y + ROW_HEIGHT - 3.0)) {}
                    circle .observed cx=(n(row.observed_x)) cy=(n(mid)) r=(n(DOT_RADIUS)) {}
                    @if !row.flags.is_empty() {
                        text .flags x=(n(FLAGS_X)) y=(n(mid + 4.0)) { (row.flags.join(", ")) }
                    }
                }
            }
        }
        p .legend {
            "Each row is a transition, per 100 deliveries: the bar is where the observed rate falls 95 % of the time if the forecast holds, the line is the forecast rate (the plan's replay), the dot the observed rate (the trial's live deliveries)."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_model::Label;

    fn evidence(forecast: f64, observed: f64, interval: [f64; 2]) -> TransitionEvidence {
        TransitionEvidence {
            from: Label::queue("forge").into_owned(),
            to: Label::Drop,
            forecast_count: 10,
            observed_count: 10,
            forecast_rate: forecast,
            observed_rate: observed,
            interval,
            outside: observed < interval[0] || observed > interval[1],
            unforeseen: false,
            unobserved: false,
            loses_work: true,
        }
    }

    /// An observed rate outside its interval is drawn outside the bar, on the side it falls,
    /// a dot's width clear of it even when it is a hair outside; inside, it is on the bar.
    #[test]
    fn an_observed_rate_outside_its_interval_is_drawn_outside_the_bar() {
        let rows = [
            evidence(10.0, 14.0, [8.0, 12.0]),
            evidence(10.0, 7.999, [8.0, 12.0]),
            evidence(10.0, 12.001, [8.0, 12.0]),
            evidence(10.0, 11.0, [8.0, 12.0]),
        ];
        let l = layout(&rows);
        assert_eq!(l.max, 20.0, "14 rounds up to 20");
        let [above, hair_below, hair_above, inside] = &l.rows[..] else {
            panic!("four rows: {l:?}")
        };
        assert!(above.observed_x > above.bar.1 + DOT_RADIUS, "{above:?}");
        assert!(
            hair_below.observed_x + DOT_RADIUS < hair_below.bar.0,
            "{hair_below:?}"
        );
        assert!(
            hair_above.observed_x - DOT_RADIUS > hair_above.bar.1,
            "{hair_above:?}"
        );
        assert!(
            inside.bar.0 <= inside.observed_x && inside.observed_x <= inside.bar.1,
            "{inside:?}"
        );
        // The forecast mark sits in its interval, and the scale is linear from 0.
        assert!(inside.bar.0 < inside.forecast_x && inside.forecast_x < inside.bar.1);
        assert_eq!(l.ticks.first(), Some(&(0.0, PLOT_X0)));
        assert_eq!(l.ticks.last(), Some(&(20.0, PLOT_X0 + PLOT_WIDTH)));
        assert_eq!(inside.forecast_x, PLOT_X0 + PLOT_WIDTH / 2.0);
        for r in &l.rows[..3] {
            assert!(r.class.contains("flagged") && r.class.contains("outside"));
        }
        assert!(!inside.class.contains("flagged"), "{inside:?}");
    }

    /// An unforeseen transition (the replay never saw it) is drawn flagged and says so in
    /// words; a predicted one the trial never saw says "not observed".
    #[test]
    fn an_unforeseen_row_has_its_class_and_its_words() {
        let mut ci = evidence(0.0, 5.0, [0.0, 1.5]);
        ci.from = Label::queue("ci").into_owned();
        ci.unforeseen = true;
        let mut missing = evidence(2.0, 0.0, [0.5, 3.5]);
        missing.loses_work = false;
        missing.unobserved = true;
        let l = layout(&[ci.clone(), missing]);
        let row = &l.rows[0];
        assert_eq!(row.class, "row lost flagged unforeseen outside");
        assert_eq!(
            row.flags,
            ["lost work", "unforeseen", "outside the interval"]
        );
        assert_eq!(row.label, "queue:ci → drop");
        assert_eq!(l.rows[1].class, "row flagged outside unobserved");
        assert!(l.rows[1].observed_x < l.rows[1].bar.0);
        let svg = evidence_chart("chart", &[ci]).into_string();
        assert!(
            svg.contains(r#"<g class="row lost flagged unforeseen outside">"#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"role="img""#) && svg.contains("<title>"),
            "{svg}"
        );
        assert!(
            svg.contains("lost work, unforeseen, outside the interval"),
            "{svg}"
        );
        assert!(
            !svg.contains("style="),
            "the CSP forbids style attributes: {svg}"
        );
    }

    /// Labels are a tenant's words: escaped, and cut to fit.
    #[test]
    fn labels_are_escaped_and_cut() {
        let mut e = evidence(1.0, 1.0, [0.5, 1.5]);
        e.from = Label::queue("<script>alert(1)</script>-and-a-very-long-queue-name").into_owned();
        let svg = evidence_chart("chart", &[e]).into_string();
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"), "{svg}");
        let l = layout(&[evidence(1.0, 1.0, [0.5, 1.5])]);
        assert!(l.rows[0].label.chars().count() <= LABEL_CHARS);
        assert_eq!(l.max, 2.0);
        assert_eq!(
            l.ticks.iter().map(|t| t.0).collect::<Vec<_>>(),
            [0.0, 0.5, 1.0, 1.5, 2.0]
        );
    }

    #[test]
    fn the_axis_ends_on_a_round_number() {
        for (v, want) in [
            (0.0, 1.0),
            (0.3, 1.0),
            (1.2, 2.0),
            (3.0, 5.0),
            (7.0, 10.0),
            (14.0, 20.0),
            (42.0, 50.0),
            (51.0, 100.0),
            (100.0, 100.0),
        ] {
            assert_eq!(axis(v).0, want, "{v}");
        }
        assert_eq!(axis(14.0), (20.0, 5.0));
        assert_eq!(axis(42.0), (50.0, 10.0));
        assert_eq!(axis(f64::NAN).0, 1.0);
        assert!(
            evidence_chart("chart", &[])
                .into_string()
                .contains("No transition")
        );
    }
}
