//! `switchboard explain <event_id>`: why a stored delivery was routed where it went, for
//! people at a terminal. One call to control's gRPC API (`ExplainWebhookEvent`) with an
//! endpoint's bearer credential: it can show nothing that endpoint could not read itself.
//!
//! Exit codes as every people's command (`super::exit`).

use clap::Args;
use switchboard_control_client::convert::explain_event;
use switchboard_control_client::views::{
    ExplainWebhookEventOut, RecordedVersionOut, RuleOutcomeOut,
};
use switchboard_proto::control::v1 as pb;

use super::{Common, Failure, Session, decision_cell, emit, exit};

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The stored delivery's id (`ev_…`, as list_webhook_events and the ingest answer show it).
    pub event_id: String,
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: ExplainArgs) -> Result<u8, Failure> {
    let s = Session::open("explain_webhook_event", &args.common)?;
    let response = s
        .client
        .explain_webhook_event(
            &s.bearer,
            pb::ExplainWebhookEventRequest {
                event_id: args.event_id,
            },
        )
        .await
        .map_err(|e| s.status(e))?;
    let explained = explain_event(response).map_err(Failure::call)?;
    emit(s.output, &explained, table)?;
    Ok(exit::OK)
}

/// The table people read: the recorded decision and its version, one line per rule (position,
/// id, outcome, action), the re-evaluation when it differs, and the current decision.
pub fn table(e: &ExplainWebhookEventOut) -> String {
    let mut out = String::new();
    out.push_str(&format!("event     {} ({})\n", e.event_id, e.kind));
    out.push_str(&format!("webhook   {}\n", e.webhook_id));
    out.push_str(&format!(
        "recorded  {}\n",
        decision_cell(e.recorded_decision.as_ref())
    ));
    let version = match (&e.recorded_version_status, e.recorded_version) {
        (RecordedVersionOut::Known, Some(v)) => format!("{v}"),
        (RecordedVersionOut::NotInHistory, Some(v)) => {
            format!("{v} (no longer in the configuration history: rules cannot be shown)")
        }
        _ => "unknown (decided before versions were recorded, or not routed yet)".into(),
    };
    out.push_str(&format!("version   {version}\n"));
    if !e.rules.is_empty() {
        out.push_str(&format!(
            "{:<4} {:<32} {:<12} {}\n",
            "#", "rule", "outcome", "action"
        ));
        for r in &e.rules {
            let outcome = match r.outcome {
                RuleOutcomeOut::Matched => "matched".to_string(),
                RuleOutcomeOut::NotMatched => "not matched".to_string(),
                RuleOutcomeOut::Fault => {
                    format!("fault ({})", r.fault_code.as_deref().unwrap_or("?"))
                }
            };
            out.push_str(&format!(
                "{:<4} {:<32} {:<12} {}{}\n",
                r.index,
                r.rule_id,
                outcome,
                r.action,
                if r.deciding { "  <- decided" } else { "" }
            ));
        }
    }
    if e.reevaluation_differs {
        out.push_str(&format!(
            "again     {} (version {} decides otherwise today)\n",
            decision_cell(e.reevaluated_decision.as_ref()),
            e.recorded_version.unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "current   {} under version {}{}\n",
        decision_cell(Some(&e.current_decision)),
        e.current_version,
        if e.current_differs {
            " (differs)"
        } else {
            " (same)"
        }
    ));
    for t in &e.trials {
        out.push_str(&format!(
            "trial     {} under {} ({}, plan {})\n",
            decision_cell(Some(&t.decision)),
            t.trial_id,
            if t.differs { "differs" } else { "same" },
            t.plan_id
        ));
    }
    out
}
