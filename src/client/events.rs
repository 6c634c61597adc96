//! `switchboard events list|show|redrive|redrive-confirm`: a webhook's stored deliveries and
//! their decisions, and re-routing the quarantined, faulted or pending ones after a fix
//! (planned, then confirmed: docs/redrive.md).

use clap::{Args, Subcommand};
use switchboard_control_client::convert;
use switchboard_control_client::views::{
    ConfirmWebhookRedriveOut, EventSummaryOut, GetWebhookEventOut, ListWebhookEventsOut,
    RedrivePlanOut,
};
use switchboard_model::Label;
use switchboard_proto::control::v1 as pb;

use super::paint::{self, styled};
use super::{Common, Failure, Session, Table, decision_cell, emit, exit, facts, printable, time};

#[derive(Args, Debug)]
pub struct EventsArgs {
    #[command(subcommand)]
    command: EventsCommand,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum EventsCommand {
    /// A webhook's stored deliveries, newest first (list_webhook_events).
    #[command(after_help = super::EXIT_CODES_HELP)]
    List {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
        /// Only deliveries with this decision: a label (`queue:<name>`, `drop`,
        /// `quarantine`, `default`, `fault`), `queue` for any queue, or `unrouted`.
        #[arg(long, value_parser = decision_filter)]
        decision: Option<DecisionFilter>,
        /// At most this many deliveries (1–1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// One stored delivery: its decision, headers and body (get_webhook_event).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Show {
        /// The delivery's id (`ev_…`).
        event_id: String,
    },
    /// Plans re-routing a webhook's quarantined, faulted or pending deliveries under its
    /// current rules (redrive_webhook_events). Changes nothing: prints what would change and
    /// the exact `switchboard events redrive-confirm` command that applies it.
    #[command(after_help = super::EXIT_CODES_HELP)]
    Redrive {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
        /// Which deliveries: `quarantine`, `fault`, `pending`, `drop` (to recover work a change
        /// dropped), comma-separated (default: quarantine, fault, pending).
        #[arg(long, value_delimiter = ',')]
        decision: Vec<String>,
        /// Only deliveries decided by this configuration version (`rules history` lists them).
        #[arg(long)]
        config_version: Option<i64>,
        /// Only deliveries received at or after this time (RFC 3339, e.g. 2026-12-06T10:00:00Z).
        #[arg(long)]
        since: Option<String>,
        /// Only deliveries received at or before this time (RFC 3339).
        #[arg(long)]
        until: Option<String>,
        /// Only these deliveries (`ev_…`), comma-separated.
        #[arg(long, value_delimiter = ',')]
        event: Vec<String>,
        /// At most this many deliveries (1–1000; control's default 100).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: Option<u32>,
    },
    /// Applies a redrive plan exactly as planned (confirm_webhook_redrive).
    #[command(after_help = super::EXIT_CODES_HELP)]
    RedriveConfirm {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
        /// The plan's token (`sbp_…`), as `events redrive` printed it.
        plan_token: String,
    },
}

/// Largest page control serves.
const PAGE: u32 = 200;

/// A `--decision` value: a decision label, `queue` for any queue, or `unrouted`.
#[derive(Clone, Debug)]
enum DecisionFilter {
    Label(Label<'static>),
    AnyQueue,
    Unrouted,
}

/// Reads a `--decision` value; anything else is a usage error rather than a filter that
/// silently matches nothing.
fn decision_filter(value: &str) -> Result<DecisionFilter, String> {
    match value {
        "queue" => Ok(DecisionFilter::AnyQueue),
        "unrouted" => Ok(DecisionFilter::Unrouted),
        label => label.parse().map(DecisionFilter::Label).map_err(|_| {
            "expected queue:<name>, queue, drop, quarantine, default, fault or unrouted".into()
        }),
    }
}

/// Whether an event's decision is the one asked for.
fn decided(e: &EventSummaryOut, wanted: &DecisionFilter) -> bool {
    let label = e.decision.as_ref().map(|d| &d.decision);
    match wanted {
        DecisionFilter::Unrouted => !e.routed,
        DecisionFilter::AnyQueue => matches!(label, Some(Label::Queue(_))),
        DecisionFilter::Label(wanted) => label == Some(wanted),
    }
}

pub async fn run(args: EventsArgs) -> Result<u8, Failure> {
    match args.command {
        EventsCommand::List {
            webhook_id,
            decision,
            limit,
        } => {
            let s = Session::open("list_webhook_events", &args.common)?;
            // Pages of control's, filtered here: `--decision` has no server-side filter, so
            // pages are read until `limit` match or the deliveries end.
            let mut out = ListWebhookEventsOut {
                events: Vec::new(),
                next_cursor: None,
                retention: None,
            };
            let mut cursor = String::new();
            loop {
                let want = limit - out.events.len() as u32;
                let page = if decision.is_some() {
                    PAGE
                } else {
                    want.min(PAGE)
                };
                let r = s
                    .client
                    .list_webhook_events(
                        &s.bearer,
                        pb::ListWebhookEventsRequest {
                            webhook_id: webhook_id.clone(),
                            cursor: cursor.clone(),
                            limit: page,
                        },
                    )
                    .await
                    .map_err(|e| s.status(e))?;
                out.retention = r.retention.map(convert::retention);
                let mut events = r.events.into_iter();
                for e in events.by_ref() {
                    let e = convert::event_summary(e).map_err(Failure::call)?;
                    if decision.as_ref().is_none_or(|d| decided(&e, d)) {
                        out.events.push(e);
                        if out.events.len() as u32 == limit {
                            break;
                        }
                    }
                }
                let consumed_page = events.next().is_none();
                let full = out.events.len() as u32 == limit;
                if full || r.next_cursor.is_empty() {
                    // An answer that stopped mid-page has no cursor to go on from.
                    out.next_cursor = (full && consumed_page && !r.next_cursor.is_empty())
                        .then_some(r.next_cursor);
                    break;
                }
                cursor = r.next_cursor;
            }
            emit(s.output, &out, list_table)?;
        }
        EventsCommand::Show { event_id } => {
            let s = Session::open("get_webhook_event", &args.common)?;
            let r = s
                .client
                .get_webhook_event(
                    &s.bearer,
                    pb::GetWebhookEventRequest {
                        event_id,
                        webhook_id: String::new(),
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let out = convert::get_event(r).map_err(Failure::call)?;
            emit(s.output, &out, show)?;
        }
        EventsCommand::Redrive {
            webhook_id,
            decision,
            config_version,
            since,
            until,
            event,
            limit,
        } => {
            let since_ms = since.as_deref().map(|t| millis("--since", t)).transpose()?;
            let until_ms = until.as_deref().map(|t| millis("--until", t)).transpose()?;
            let s = Session::open("redrive_webhook_events", &args.common)?;
            let r = s
                .client
                .redrive_webhook_events(
                    &s.bearer,
                    pb::RedriveWebhookEventsRequest {
                        webhook_id,
                        filter: Some(pb::RedriveFilter {
                            decisions: decision,
                            since: since_ms.map(switchboard_proto::convert::time::from_millis),
                            until: until_ms.map(switchboard_proto::convert::time::from_millis),
                            event_ids: event,
                            config_version,
                            ..Default::default()
                        }),
                        limit: limit.unwrap_or(0),
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let out = convert::redrive_plan(r).map_err(Failure::call)?;
            emit(s.output, &out, redrive_plan)?;
        }
        EventsCommand::RedriveConfirm {
            webhook_id,
            plan_token,
        } => {
            let s = Session::open("confirm_webhook_redrive", &args.common)?;
            let r = s
                .client
                .confirm_webhook_redrive(
                    &s.bearer,
                    pb::ConfirmWebhookRedriveRequest {
                        webhook_id,
                        plan_token,
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let out = convert::confirm_redrive(r);
            emit(s.output, &out, redrive_confirmed)?;
        }
    }
    Ok(exit::OK)
}

/// A redrive plan for people: lost work (deliveries a confirm would drop) first, then the
/// other moves, each delivery, and the command that applies it.
fn redrive_plan(p: &RedrivePlanOut) -> String {
    let mut out = format!(
        "redrive plan for {} under configuration version {}\nnothing is changed until the plan is confirmed\n\n",
        p.webhook_id, p.config_version
    );
    if p.events.is_empty() {
        out.push_str("no quarantined, faulted or pending deliveries matched\n");
        return out;
    }
    let (lost, moved): (Vec<_>, Vec<_>) = p
        .transitions
        .iter()
        .partition(|t| Label::redrive_gives_up(&t.to));
    let moves = |ts: &[&switchboard_control_client::views::RedriveTransitionOut]| {
        let mut t = Table::new(&["from", "to", "deliveries", "examples"]);
        for tr in ts {
            t.row([
                tr.from.clone(),
                tr.to.to_string(),
                tr.count.to_string(),
                tr.example_event_ids
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        t.render(2)
    };
    if !lost.is_empty() {
        let n: u64 = lost.iter().map(|t| t.count).sum();
        out.push_str(&styled(
            paint::LOST,
            &format!("LOST WORK: {n} would be dropped"),
        ));
        out.push('\n');
        out.push_str(&moves(&lost));
        out.push('\n');
    }
    out.push_str(&format!(
        "changes: {} of {} selected deliveries would be recorded{}\n",
        p.changes,
        p.events.len(),
        if p.truncated {
            " (more matched than the limit: redrive again after confirming)"
        } else {
            ""
        }
    ));
    if !moved.is_empty() {
        out.push_str(&moves(&moved));
    }
    out.push('\n');
    let mut t = Table::new(&["event", "received", "kind", "now", "after", "changes"]);
    for e in &p.events {
        let style = (Label::redrive_gives_up(&e.after) && e.changes).then_some(paint::LOST);
        t.styled_row(
            style,
            [
                e.event_id.clone(),
                time(Some(e.received_at_ms)),
                e.kind.clone(),
                e.before.clone(),
                e.after.to_string(),
                if e.changes { "yes" } else { "no" }.to_string(),
            ],
        );
    }
    out.push_str(&t.render(0));
    out.push('\n');
    out.push_str(&facts(&[
        ("expires", p.expires_at.clone()),
        ("token", p.plan_token.clone()),
        (
            "confirm",
            format!(
                "switchboard events redrive-confirm {} {}",
                p.webhook_id, p.plan_token
            ),
        ),
    ]));
    out
}

fn redrive_confirmed(o: &ConfirmWebhookRedriveOut) -> String {
    let mut out = format!(
        "redrive {} applied to {} under configuration version {}: {} re-routed\n\n",
        o.redrive_id, o.webhook_id, o.config_version, o.applied
    );
    let mut t = Table::new(&["event", "before", "after", "applied", "todo"]);
    for e in &o.events {
        t.row([
            e.event_id.clone(),
            e.before.clone(),
            e.after.clone(),
            if e.applied {
                "yes".to_string()
            } else {
                "no: routed since the plan".to_string()
            },
            match (&e.todo_id, e.todo_created) {
                (Some(id), true) => format!("{id} (new)"),
                (Some(id), false) => id.clone(),
                (None, _) => "-".into(),
            },
        ]);
    }
    out.push_str(&t.render(0));
    out
}

fn list_table(o: &ListWebhookEventsOut) -> String {
    if o.events.is_empty() {
        return "no deliveries\n".into();
    }
    let mut t = Table::new(&["id", "received", "kind", "verified", "decision"]);
    for e in &o.events {
        t.row([
            e.id.clone(),
            time(Some(e.received_at_ms)),
            e.kind.clone(),
            if e.verified { "yes" } else { "no" }.to_string(),
            if e.routed {
                decision_cell(e.decision.as_ref())
            } else {
                "(not routed yet)".into()
            },
        ]);
    }
    t.render(0)
}

fn show(o: &GetWebhookEventOut) -> String {
    let e = &o.event;
    let mut out = facts(&[
        ("event", e.id.clone()),
        ("webhook", e.webhook_id.clone()),
        ("delivery", e.delivery_id.clone()),
        ("source", e.source.clone()),
        ("kind", e.kind.clone()),
        ("verified", if e.verified { "yes" } else { "no" }.into()),
        ("received", time(Some(e.received_at_ms))),
        (
            "decision",
            if e.routed {
                decision_cell(e.decision.as_ref())
            } else {
                "(not routed yet)".into()
            },
        ),
    ]);
    if let Some(f) = &e.fault {
        out.push_str(&format!(
            "fault     {} in rule {}: {}\n",
            f["code"].as_str().unwrap_or("?"),
            f["rule_id"].as_str().unwrap_or("?"),
            f["reason"].as_str().unwrap_or("")
        ));
    }
    out.push_str("\nheaders\n");
    for h in &o.headers {
        out.push_str(&format!(
            "  {}: {}\n",
            printable(&h.name),
            printable(&h.value)
        ));
    }
    out.push_str("\nbody\n");
    match (&o.payload, &o.body) {
        (Some(p), _) => {
            out.push_str(&serde_json::to_string_pretty(p).unwrap_or_default());
            out.push('\n');
        }
        (None, Some(b)) => {
            if o.body_encoding.as_deref() == Some("base64") {
                out.push_str("(not UTF-8; base64)\n");
            }
            out.push_str(&printable(b));
            out.push('\n');
        }
        (None, None) => out.push_str("(empty)\n"),
    }
    out
}

/// A time a person typed (RFC 3339) as milliseconds since the epoch.
fn millis(flag: &str, text: &str) -> Result<i64, Failure> {
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|e| {
            Failure::usage(format!(
                "{flag} {text:?} is not an RFC 3339 time (e.g. 2026-12-06T10:00:00Z): {e}"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::millis;

    #[test]
    fn a_typed_time_is_read_as_rfc_3339_and_a_bad_one_names_its_flag() {
        assert_eq!(
            millis("--since", "2026-12-06T10:00:00Z").ok(),
            Some(1_796_551_200_000)
        );
        assert_eq!(
            millis("--since", "2026-12-06T10:00:00.250+01:00").ok(),
            Some(1_796_547_600_250)
        );
        let Err(bad) = millis("--until", "yesterday") else {
            panic!("not a time");
        };
        assert!(format!("{bad:?}").contains("--until"), "{bad:?}");
    }
}
