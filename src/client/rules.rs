//! `switchboard rules list|test|history`: a webhook's saved rules, a candidate's replay over
//! its stored deliveries (nothing saved), and the configuration history.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use switchboard_control_client::CallError;
use switchboard_control_client::convert;
use switchboard_control_client::views::{
    ListWebhookHistoryOut, ListWebhookRulesOut, TestWebhookRulesOut,
};
use switchboard_model::Configuration;
use switchboard_model::plan::CandidateReplay;
use switchboard_proto::control::v1 as pb;

use super::packs::diff_lines;
use super::reports::report_lines;
use super::{Common, Failure, Session, Table, emit, exit, facts, list, time};

#[derive(Args, Debug)]
pub struct RulesArgs {
    #[command(subcommand)]
    command: RulesCommand,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum RulesCommand {
    /// A webhook's saved rules in order, its default action and params (list_webhook_rules).
    #[command(after_help = super::EXIT_CODES_HELP)]
    List {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
    },
    /// Replays a candidate configuration over the webhook's stored deliveries and reports
    /// what would change; nothing is saved (test_webhook_rules with replay).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Test {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
        /// The candidate: a JSON configuration `{rules: [{id?, when, action}], default_action?,
        /// params?}` (`-` reads standard input).
        #[arg(long)]
        file: PathBuf,
        /// Replay the most recent N stored deliveries (1–1000; control's default is 200).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: Option<u32>,
    },
    /// Plans a hand-written configuration like a pack's change: replayed, nothing saved.
    /// Prints the plan with its token: `switchboard packs confirm` applies it, `switchboard
    /// trials start` runs it beside the live rules first (plan_webhook_rules).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Plan {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
        /// The new configuration: a JSON configuration `{rules: [{id?, when, action}],
        /// default_action?, params?}` (`-` reads standard input).
        #[arg(long)]
        file: PathBuf,
        /// Replay the most recent N stored deliveries (1–1000; control's default is 200).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: Option<u32>,
        #[command(flatten)]
        guard: super::guards::GuardFlags,
    },
    /// The saved versions of a webhook's configuration, newest first (list_webhook_history).
    #[command(after_help = super::EXIT_CODES_HELP)]
    History {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
        /// At most this many versions (1–200).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=200))]
        limit: u32,
    },
}

pub async fn run(args: RulesArgs) -> Result<u8, Failure> {
    match args.command {
        RulesCommand::List { webhook_id } => {
            let s = Session::open("list_webhook_rules", &args.common)?;
            let r = s
                .client
                .list_webhook_rules(&s.bearer, pb::ListWebhookRulesRequest { webhook_id })
                .await
                .map_err(|e| s.status(e))?;
            let out = convert::list_rules(r).map_err(Failure::call)?;
            emit(s.output, &out, list_table)?;
        }
        RulesCommand::Test {
            webhook_id,
            file,
            limit,
        } => {
            let configuration = read_configuration(&file)?;
            let s = Session::open("test_webhook_rules", &args.common)?;
            let request = pb::TestWebhookRulesRequest {
                webhook_id,
                replay: Some(pb::TestReplay {
                    limit: limit.unwrap_or(0),
                    ..Default::default()
                }),
                configuration: Some(configuration),
                ..Default::default()
            };
            let mut stream = s
                .client
                .test_webhook_rules_stream(&s.bearer, request)
                .await
                .map_err(|e| s.status(e))?;
            let result = loop {
                match stream.message().await.map_err(|e| s.status(e))? {
                    Some(pb::TestWebhookRulesEvent {
                        event: Some(pb::test_webhook_rules_event::Event::Result(r)),
                    }) => break r,
                    Some(_) => {}
                    None => {
                        return Err(Failure::call(CallError::internal(
                            "control ended the replay without a result",
                        )));
                    }
                }
            };
            let out = convert::test(result).map_err(Failure::call)?;
            emit(s.output, &out, test_table)?;
        }
        RulesCommand::Plan {
            webhook_id,
            file,
            limit,
            guard,
        } => {
            let configuration = read_configuration(&file)?;
            let s = Session::open("plan_webhook_rules", &args.common)?;
            let stream = s
                .client
                .plan_webhook_rules(
                    &s.bearer,
                    pb::PlanWebhookRulesRequest {
                        webhook_id,
                        configuration: Some(configuration),
                        replay: limit.map(|limit| pb::ReplayWindow {
                            limit,
                            ..Default::default()
                        }),
                        guard: guard.options(),
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let plan = super::packs::follow_plan(&s, stream).await?;
            emit(s.output, &plan, super::packs::plan_table)?;
        }
        RulesCommand::History { webhook_id, limit } => {
            let s = Session::open("list_webhook_history", &args.common)?;
            let r = s
                .client
                .list_webhook_history(
                    &s.bearer,
                    pb::ListWebhookHistoryRequest {
                        webhook_id,
                        cursor: String::new(),
                        limit,
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let out = convert::history(r).map_err(Failure::call)?;
            emit(s.output, &out, history_table)?;
        }
    }
    Ok(exit::OK)
}

/// A configuration from a file (`-`: standard input), shaped as control takes it.
fn read_configuration(file: &std::path::Path) -> Result<pb::Configuration, Failure> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    }
    .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "invalid_configuration: {} is not JSON: {e}",
            file.display()
        ))
    })?;
    switchboard_proto::convert::json::parse_configuration(&value)
        .map_err(|e| Failure::call(CallError::configuration_shape(e)))
}

/// The configuration JSON an answer carries, read back as the model's type (it was written
/// from control's typed message, so it always reads; an empty one is shown otherwise).
fn model(object: &serde_json::Map<String, serde_json::Value>) -> Configuration {
    serde_json::from_value(serde_json::Value::Object(object.clone())).unwrap_or_default()
}

fn list_table(o: &ListWebhookRulesOut) -> String {
    let c = model(&o.configuration);
    let installed: Vec<String> = o
        .installed_packs
        .iter()
        .map(|(name, p)| format!("{name}@{}", p["version"].as_str().unwrap_or("?")))
        .collect();
    let params: Vec<String> = c.params.keys().cloned().collect();
    let mut out = facts(&[
        ("webhook", o.webhook_id.clone()),
        ("version", format!("{} ({})", o.version, o.digest)),
        ("grant", list(&o.grant)),
        ("packs", list(&installed)),
        (
            "default",
            c.default_action
                .as_ref()
                .map(|a| a.label().to_string())
                .unwrap_or_else(|| {
                    format!(
                        "{} (the default queue)",
                        switchboard_model::Label::queue(first(&o.grant))
                    )
                }),
        ),
        ("params", list(&params)),
    ]);
    if c.rules.is_empty() {
        out.push_str("no rules: every delivery takes the default\n");
        return out;
    }
    out.push('\n');
    let mut t = Table::new(&["#", "rule", "action", "when"]);
    for (i, r) in c.rules.iter().enumerate() {
        t.row([
            i.to_string(),
            r.id.clone().unwrap_or_default(),
            r.action.label().to_string(),
            r.when.clone(),
        ]);
    }
    out.push_str(&t.render(0));
    out
}

fn first(grant: &[String]) -> &str {
    grant.first().map_or("?", String::as_str)
}

fn test_table(o: &TestWebhookRulesOut) -> String {
    let mut out = facts(&[
        ("webhook", o.webhook_id.clone()),
        (
            "candidate",
            format!(
                "replayed against saved version {} (nothing saved)",
                o.saved_version
            ),
        ),
        ("minted ids", list(&o.minted_rule_ids)),
    ]);
    let Some(report) = &o.replay_report else {
        return out;
    };
    let replay: CandidateReplay =
        serde_json::from_value(serde_json::Value::Object(report.clone())).unwrap_or_default();
    out.push('\n');
    out.push_str(&report_lines(&replay.report));
    let diff = diff_lines(&replay.rule_diff, None, None);
    if !diff.is_empty() {
        out.push_str("\nrule diff\n");
        out.push_str(&diff);
    }
    out
}

fn history_table(o: &ListWebhookHistoryOut) -> String {
    if o.records.is_empty() {
        return "no history\n".into();
    }
    let mut t = Table::new(&["version", "saved", "by", "change", "digest"]);
    for h in &o.records {
        let change = &h.change;
        let mut what = change["op"].as_str().unwrap_or("?").to_string();
        for key in ["rule_id", "pack", "version", "kind"] {
            if let Some(v) = change[key].as_str() {
                what.push_str(&format!(" {v}"));
            }
        }
        t.row([
            h.version.to_string(),
            time(Some(h.saved_at_ms)),
            h.actor_human
                .clone()
                .or_else(|| h.actor_endpoint_id.clone())
                .unwrap_or_else(|| "operator".into()),
            what,
            h.digest_after.chars().take(12).collect(),
        ]);
    }
    t.render(0)
}
