//! `switchboard trials start|show|list|stop|promote`: a plan's candidate beside the live rules
//! on live deliveries (issue 45). A trial is rendered as plans are — lost work first — with
//! each transition's forecast (the plan's replay) beside what live traffic did, flagged where
//! it falls outside its 95 % interval or the replay never saw it. `promote` prints the plan
//! that makes the candidate live and the exact `switchboard packs confirm` command.

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use switchboard_control_client::views::{ListRuleTrialsOut, RuleTrialOut};
use switchboard_model::trial::{TrialReport, TrialState};
use switchboard_proto::control::v1 as pb;

use super::packs::{follow_plan, plan_table};
use super::paint::{self, styled};
use super::reports::trial_lines;
use super::{Common, Failure, Session, Table, emit, exit, facts};

#[derive(Args, Debug)]
pub struct TrialsArgs {
    #[command(subcommand)]
    command: TrialsCommand,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum TrialsCommand {
    /// Start a trial of a plan (its token, as `packs install` printed it): its candidate runs
    /// beside the live rules on live deliveries and routes nothing (start_rule_trial).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Start {
        webhook_id: String,
        plan_token: String,
        /// End after this many live deliveries (default: no count limit).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_deliveries: Option<u64>,
        /// End after this many hours (default: 7 days).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=8784))]
        max_hours: Option<u64>,
    },
    /// A trial's report: forecast beside observed, lost work first (get_rule_trial).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Show { trial_id: String },
    /// A webhook's trials, newest first (list_rule_trials).
    #[command(after_help = super::EXIT_CODES_HELP)]
    List { webhook_id: String },
    /// Stop a running trial; its evidence stays (stop_rule_trial).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Stop { trial_id: String },
    /// Plan making a trial's candidate live: ends the trial and prints the plan, with the
    /// trial beside the replay, and the confirm command (promote_rule_trial).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Promote {
        trial_id: String,
        /// Replay the most recent N stored deliveries (default: control's).
        #[arg(long)]
        limit: Option<u32>,
        #[command(flatten)]
        guard: super::guards::GuardFlags,
    },
}

pub async fn run(args: TrialsArgs) -> Result<u8, Failure> {
    let common = &args.common;
    match args.command {
        TrialsCommand::Start {
            webhook_id,
            plan_token,
            max_deliveries,
            max_hours,
        } => {
            let s = Session::open("start_rule_trial", common)?;
            let r = s
                .client
                .start_rule_trial(
                    &s.bearer,
                    pb::StartRuleTrialRequest {
                        webhook_id,
                        plan_token,
                        max_deliveries,
                        max_duration_ms: max_hours.map(|h| h.saturating_mul(3_600_000)),
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let out: RuleTrialOut = r.into();
            emit(s.output, &out, trial_table)?;
            Ok(exit::OK)
        }
        TrialsCommand::Show { trial_id } => {
            let s = Session::open("get_rule_trial", common)?;
            let r = s
                .client
                .get_rule_trial(&s.bearer, pb::GetRuleTrialRequest { trial_id })
                .await
                .map_err(|e| s.status(e))?;
            let out: RuleTrialOut = r.into();
            emit(s.output, &out, trial_table)?;
            Ok(exit::OK)
        }
        TrialsCommand::List { webhook_id } => {
            let s = Session::open("list_rule_trials", common)?;
            let trials = s
                .client
                .all_rule_trials(&s.bearer, &webhook_id)
                .await
                .map_err(|e| s.status(e))?;
            let out = ListRuleTrialsOut {
                trials: trials.into_iter().map(Into::into).collect(),
            };
            emit(s.output, &out, list_table)?;
            Ok(exit::OK)
        }
        TrialsCommand::Stop { trial_id } => {
            let s = Session::open("stop_rule_trial", common)?;
            let r = s
                .client
                .stop_rule_trial(&s.bearer, pb::StopRuleTrialRequest { trial_id })
                .await
                .map_err(|e| s.status(e))?;
            let out: RuleTrialOut = r.into();
            emit(s.output, &out, trial_table)?;
            Ok(exit::OK)
        }
        TrialsCommand::Promote {
            trial_id,
            limit,
            guard,
        } => {
            let s = Session::open("promote_rule_trial", common)?;
            let stream = s
                .client
                .promote_rule_trial(
                    &s.bearer,
                    pb::PromoteRuleTrialRequest {
                        trial_id,
                        replay: limit.map(|limit| pb::ReplayWindow {
                            limit,
                            ..Default::default()
                        }),
                        guard: guard.options(),
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let plan = follow_plan(&s, stream).await?;
            emit(s.output, &plan, plan_table)?;
            Ok(exit::OK)
        }
    }
}

fn state_text(t: &TrialReport) -> String {
    match (t.state, t.end) {
        (TrialState::Running, _) => "running".into(),
        (TrialState::Ended, Some(end)) => match serde_json::to_value(end) {
            Ok(serde_json::Value::String(why)) => format!("ended ({why})"),
            _ => "ended".into(),
        },
        (TrialState::Ended, None) => "ended".into(),
    }
}

fn trial_table(t: &RuleTrialOut) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        styled(
            paint::HEADING,
            &format!(
                "trial {} on {}: {}",
                t.trial_id,
                t.webhook_id,
                state_text(t)
            )
        )
    );
    out.push_str(&facts(&[
        ("plan", t.plan_id.clone()),
        ("started", format!("{} by {}", t.started_at, t.started_by)),
        (
            "ends",
            t.ended_at
                .clone()
                .unwrap_or_else(|| format!("by {}", t.ends_at)),
        ),
    ]));
    out.push('\n');
    out.push_str(&trial_lines(t));
    out
}

fn list_table(o: &ListRuleTrialsOut) -> String {
    if o.trials.is_empty() {
        return "no trials\n".into();
    }
    let mut t = Table::new(&[
        "trial",
        "state",
        "started",
        "seen",
        "evaluated",
        "changed",
        "lost work",
        "sufficient",
    ]);
    for tr in &o.trials {
        let lost: u64 = tr
            .report
            .transitions
            .iter()
            .filter(|x| x.loses_work())
            .map(|x| x.count)
            .sum();
        t.styled_row(
            (lost > 0).then_some(paint::LOST),
            [
                tr.trial_id.clone(),
                state_text(tr),
                tr.started_at.clone(),
                tr.deliveries.seen.to_string(),
                tr.deliveries.evaluated.to_string(),
                tr.report.changed.to_string(),
                lost.to_string(),
                if tr.sufficient { "yes" } else { "no" }.to_string(),
            ],
        );
    }
    t.render(0)
}
