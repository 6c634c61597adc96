//! `switchboard explain <event_id>`: why a stored delivery was routed where it went, for
//! people at a terminal. One call to control's gRPC API (`ExplainWebhookEvent`) with an
//! endpoint's bearer credential: it can show nothing that endpoint could not read itself.
//!
//! Exit codes: 0 explained, 2 bad usage (no credential, a bad flag), 3 not found or not
//! permitted (unknown event, another scope's, a verb or role the endpoint lacks, an unknown
//! or revoked credential), 1 anything else (control unreachable, an internal error).

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use switchboard_mcp_gateway::tools::convert::explain_event;
use switchboard_mcp_gateway::tools::output::{
    ExplainWebhookEventOut, RecordedVersionOut, RuleOutcomeOut,
};
use switchboard_mcp_gateway::{Bearer, ControlClient};
use switchboard_proto::control::v1 as pb;
use tonic::Code;

/// Explained (0), bad usage (2), not found or not permitted (3), anything else (1).
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_NOT_FOUND: u8 = 3;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The stored delivery's id (`ev_…`, as list_webhook_events and the ingest answer show it).
    pub event_id: String,
    /// Control's gRPC address (`host:port` or `http://host:port`).
    #[arg(long, env = "SWITCHBOARD_CONTROL", default_value = "127.0.0.1:7700")]
    pub control: String,
    /// `table` (for people) or `json` (the same object the MCP tool returns).
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// The endpoint credential comes from the environment only: a flag would put it in the
/// process list and shell history.
const TOKEN_ENV: &str = "SWITCHBOARD_TOKEN";

pub async fn run(args: ExplainArgs) -> ExitCode {
    let token = match std::env::var(TOKEN_ENV) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => {
            eprintln!(
                "switchboard explain: set {TOKEN_ENV} to an endpoint credential (sbe_…) that may call explain_webhook_event"
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let client = match ControlClient::connect_lazy(&args.control) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("switchboard explain: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let answer = client
        .explain_webhook_event(
            &Bearer::new(token),
            pb::ExplainWebhookEventRequest {
                event_id: args.event_id.clone(),
            },
        )
        .await;
    let response = match answer {
        Ok(r) => r,
        Err(status) => {
            eprintln!("switchboard explain: {}", status.message());
            return ExitCode::from(match status.code() {
                Code::NotFound | Code::PermissionDenied | Code::Unauthenticated => EXIT_NOT_FOUND,
                Code::InvalidArgument => EXIT_USAGE,
                _ => 1,
            });
        }
    };
    let explained = match explain_event(response) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("switchboard explain: {}", e.message);
            return ExitCode::FAILURE;
        }
    };
    match args.output {
        Output::Json => match serde_json::to_string_pretty(&explained) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("switchboard explain: {e}");
                return ExitCode::FAILURE;
            }
        },
        Output::Table => print!("{}", table(&explained)),
    }
    ExitCode::SUCCESS
}

/// A decision as one word-ish cell: its label, and the rule that made it.
fn decision_cell(d: Option<&serde_json::Value>) -> String {
    let Some(d) = d else {
        return "(none: not routed yet)".into();
    };
    let label = d["decision"].as_str().unwrap_or("?");
    let mut out = label.to_string();
    if let Some(rule) = d["rule_id"].as_str() {
        out.push_str(&format!(" by rule {rule}"));
    } else if d["by_default_action"].as_bool() == Some(true) {
        out.push_str(" by the default action");
    } else if label == "default" {
        out.push_str(" (no rule matched)");
    }
    if let Some(code) = d["fault_code"].as_str() {
        out.push_str(&format!(" ({code})"));
    }
    out
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
    out
}
