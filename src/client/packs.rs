//! `switchboard packs list|install|remove|plan|confirm` (and the authors' `packs test`).
//! `install` and `remove` only plan: the plan is rendered for a person — lost work first
//! (deliveries that made a todo and would no longer make one), then every other transition,
//! the decision totals, per-rule counts, fixtures and diffs — ending with its token and the
//! exact `switchboard packs confirm` command that applies exactly that plan.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use switchboard_control_client::CallError;
use switchboard_control_client::convert;
use switchboard_control_client::views::{ConfirmOut, ListRulePacksOut, PlanOut, RulePackPlanOut};
use switchboard_model::diff::{ParamDiff, RuleDiff, VersionDiff};
use switchboard_model::plan::{PlanKind, PlanState};
use switchboard_model::provenance::DriftState;
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::rule_pack_event::Event;

use super::guards::{GuardFlags, plan_guard_lines};
use super::paint::{self, styled};
use super::reports::{report_lines, trial_lines};
use super::{Common, Failure, Session, Table, emit, exit, facts, list};

#[derive(Args, Debug)]
pub struct PacksArgs {
    #[command(subcommand)]
    pub command: PacksCommand,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Subcommand, Debug)]
pub enum PacksCommand {
    /// Validate a pack directory (`pack.json` + `fixtures/`) or a tree of
    /// `<name>/<version>/` directories, and route every fixture to its expected decision.
    /// Runs locally; no control, no credential.
    Test {
        /// The directory to test.
        dir: PathBuf,
    },
    /// The rule-pack catalog; with --webhook, what is installed there (list_rule_packs).
    #[command(after_help = super::EXIT_CODES_HELP)]
    List {
        /// Show what is installed on this webhook: version, upgrade, drift.
        #[arg(long)]
        webhook: Option<String>,
    },
    /// Plan installing (or upgrading) a pack: nothing is saved. Prints the plan and the
    /// `switchboard packs confirm` command that applies it (install_rule_pack).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Install {
        webhook_id: String,
        /// The pack's name, e.g. `drop-ci-noise`.
        name: String,
        /// `2`, `2.1` or `2.1.0`; default: the newest available.
        #[arg(long)]
        version: Option<String>,
        /// The pack's params: a file holding a JSON object.
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// A hand-written rule id the pack takes over (repeat for more).
        #[arg(long, value_name = "RULE_ID")]
        replaces: Vec<String>,
        /// An orphaned param to keep on the webhook (repeat for more).
        #[arg(long, value_name = "KEY")]
        keep_param: Vec<String>,
        /// Upgrade over hand edits of this pack's installed rules, replacing them.
        #[arg(long)]
        overwrite_local_edits: bool,
        /// Replay the most recent N stored deliveries (default: control's).
        #[arg(long)]
        limit: Option<u32>,
        #[command(flatten)]
        guard: GuardFlags,
    },
    /// Plan removing an installed pack: nothing is saved (remove_rule_pack).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Remove {
        webhook_id: String,
        name: String,
        /// An orphaned param to keep on the webhook (repeat for more).
        #[arg(long, value_name = "KEY")]
        keep_param: Vec<String>,
        /// Replay the most recent N stored deliveries (default: control's).
        #[arg(long)]
        limit: Option<u32>,
        #[command(flatten)]
        guard: GuardFlags,
    },
    /// Where a plan stands: planned, pending_approval, applied, rejected or stale
    /// (get_rule_pack_plan).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Plan {
        /// The plan's token (`sbp_…`), as install or remove printed it.
        plan_token: String,
    },
    /// Apply exactly the plan a token names (confirm_rule_pack_plan). On a webhook whose
    /// confirm policy is `person`, the plan waits for a person's approval instead (exit 4).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Confirm {
        webhook_id: String,
        plan_token: String,
        /// Needed for a plan that is unproven or truncated.
        #[arg(long)]
        allow_unproven: bool,
        /// Needed for a trial's promotion whose trial is insufficient.
        #[arg(long)]
        allow_insufficient_trial: bool,
    },
}

pub async fn run(command: PacksCommand, common: Common) -> Result<u8, Failure> {
    match command {
        PacksCommand::Test { .. } => Err(Failure::usage("packs test runs locally")),
        PacksCommand::List { webhook } => {
            let s = Session::open("list_rule_packs", &common)?;
            let r = s
                .client
                .list_rule_packs(
                    &s.bearer,
                    pb::ListRulePacksRequest {
                        webhook_id: webhook.unwrap_or_default(),
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let out = convert::rule_packs(r).map_err(Failure::call)?;
            emit(s.output, &out, list_table)?;
            Ok(exit::OK)
        }
        PacksCommand::Install {
            webhook_id,
            name,
            version,
            params,
            replaces,
            keep_param,
            overwrite_local_edits,
            limit,
            guard,
        } => {
            let params = match params {
                None => None,
                Some(path) => {
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        Failure::usage(format!("cannot read {}: {e}", path.display()))
                    })?;
                    match serde_json::from_str::<serde_json::Value>(&text) {
                        Ok(serde_json::Value::Object(map)) => {
                            Some(switchboard_proto::convert::json::to_struct(&map))
                        }
                        _ => {
                            return Err(Failure::usage(format!(
                                "invalid_params: {} does not hold a JSON object",
                                path.display()
                            )));
                        }
                    }
                }
            };
            let s = Session::open("install_rule_pack", &common)?;
            let stream = s
                .client
                .install_rule_pack(
                    &s.bearer,
                    pb::InstallRulePackRequest {
                        webhook_id,
                        name,
                        version: version.unwrap_or_default(),
                        replaces,
                        replay: limit.map(|limit| pb::ReplayWindow {
                            limit,
                            ..Default::default()
                        }),
                        // Planning only: `packs confirm` applies a plan.
                        confirm: String::new(),
                        allow_unproven: false,
                        overwrite_local_edits,
                        keep_params: keep_param,
                        params,
                        guard: guard.options(),
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let plan = follow_plan(&s, stream).await?;
            emit(s.output, &plan, plan_table)?;
            Ok(exit::OK)
        }
        PacksCommand::Remove {
            webhook_id,
            name,
            keep_param,
            limit,
            guard,
        } => {
            let s = Session::open("remove_rule_pack", &common)?;
            let stream = s
                .client
                .remove_rule_pack(
                    &s.bearer,
                    pb::RemoveRulePackRequest {
                        webhook_id,
                        name,
                        replay: limit.map(|limit| pb::ReplayWindow {
                            limit,
                            ..Default::default()
                        }),
                        confirm: String::new(),
                        allow_unproven: false,
                        keep_params: keep_param,
                        guard: guard.options(),
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let plan = follow_plan(&s, stream).await?;
            emit(s.output, &plan, plan_table)?;
            Ok(exit::OK)
        }
        PacksCommand::Plan { plan_token } => {
            let s = Session::open("get_rule_pack_plan", &common)?;
            let r = s
                .client
                .get_rule_pack_plan(&s.bearer, pb::GetRulePackPlanRequest { plan_token })
                .await
                .map_err(|e| s.status(e))?;
            let out = convert::plan_status(r);
            emit(s.output, &out, status_table)?;
            Ok(exit::OK)
        }
        PacksCommand::Confirm {
            webhook_id,
            plan_token,
            allow_unproven,
            allow_insufficient_trial,
        } => {
            let s = Session::open("confirm_rule_pack_plan", &common)?;
            let r = s
                .client
                .confirm_rule_pack_plan(
                    &s.bearer,
                    pb::ConfirmRulePackPlanRequest {
                        webhook_id,
                        plan_token,
                        allow_unproven,
                        allow_insufficient_trial,
                    },
                )
                .await
                .map_err(|e| s.status(e))?;
            let out = match r.event {
                Some(Event::Applied(a)) => ConfirmOut::Applied(Box::new(a.into())),
                Some(Event::Pending(p)) => ConfirmOut::Pending(Box::new(p.into())),
                _ => {
                    return Err(Failure::call(CallError::internal(
                        "control answered a confirm with no result",
                    )));
                }
            };
            emit(s.output, &out, confirm_table)?;
            // Pending: nothing applied yet; a script must wait for the person.
            Ok(match out {
                ConfirmOut::Applied(_) => exit::OK,
                ConfirmOut::Pending(_) => exit::REFUSED,
            })
        }
    }
}

/// Reads a plan's stream to its plan (progress events are skipped).
pub(super) async fn follow_plan(
    s: &Session,
    mut stream: tonic::Streaming<pb::RulePackEvent>,
) -> Result<PlanOut, Failure> {
    loop {
        match stream.message().await.map_err(|e| s.status(e))? {
            Some(pb::RulePackEvent {
                event: Some(Event::Plan(plan)),
            }) => return Ok(plan.into()),
            Some(pb::RulePackEvent {
                event: Some(Event::Applied(_) | Event::Pending(_)),
            }) => {
                return Err(Failure::call(CallError::internal(
                    "control answered a plan with a confirm's result",
                )));
            }
            Some(_) => {}
            None => {
                return Err(Failure::call(CallError::internal(
                    "control ended the plan without a result",
                )));
            }
        }
    }
}

fn list_table(o: &ListRulePacksOut) -> String {
    if o.packs.is_empty() {
        return "no rule packs\n".into();
    }
    let for_webhook = o.packs.iter().any(|p| p.installed.is_some());
    let mut header = vec!["pack", "versions", "source", "available"];
    if for_webhook {
        header.push("installed");
    }
    header.push("summary");
    let mut t = Table::new(&header);
    for p in &o.packs {
        let versions: Vec<String> = p.versions.iter().map(|v| v.version.clone()).collect();
        let mut row = vec![
            p.name.clone(),
            list(&versions),
            p.source.clone().unwrap_or_else(|| "-".into()),
            if p.available {
                "yes".into()
            } else {
                format!("no ({})", p.unavailable_reason.as_deref().unwrap_or("?"))
            },
        ];
        if for_webhook {
            row.push(match &p.installed {
                Some(Some(i)) => {
                    let mut cell = i.version.clone();
                    if let Some(to) = &i.upgrade_to {
                        cell.push_str(&format!(", upgrade to {to}"));
                    }
                    if i.drift.state != DriftState::None {
                        cell.push_str(&format!(", drift: {}", i.drift.state));
                    }
                    if !i.proven {
                        cell.push_str(", unproven");
                    }
                    cell
                }
                _ => "-".into(),
            });
        }
        row.push(p.summary.clone().unwrap_or_default());
        t.row(row);
    }
    t.render(0)
}

/// Rule, param and version diffs as `+`/`-`/`~` lines (green, red, yellow on a terminal);
/// empty when nothing differs.
pub fn diff_lines(
    rules: &RuleDiff,
    params: Option<&ParamDiff>,
    version: Option<&VersionDiff>,
) -> String {
    let mut out = String::new();
    let mut line = |mark: &str, style: anstyle::Style, what: &str, ids: &[String]| {
        for id in ids {
            let _ = writeln!(out, "  {}", styled(style, &format!("{mark} {what} {id}")));
        }
    };
    line("+", paint::ADDED, "rule", &rules.added);
    line("-", paint::REMOVED, "rule", &rules.removed);
    line("~", paint::CHANGED, "rule", &rules.changed);
    line(
        "~",
        paint::CHANGED,
        "hand-written rule taken over:",
        &rules.replaced,
    );
    if let Some(p) = params {
        line("+", paint::ADDED, "param", &p.added);
        line("-", paint::REMOVED, "param", &p.removed);
        line("~", paint::CHANGED, "param", &p.changed);
        line("~", paint::CHANGED, "param adopted:", &p.adopted);
        line(
            "-",
            paint::REMOVED,
            "param left without an owner:",
            &p.orphaned,
        );
        line("=", paint::DIM, "param kept:", &p.kept);
    }
    if let Some(v) = version {
        let _ = writeln!(
            out,
            "  {}",
            styled(paint::CHANGED, &format!("~ version {} -> {}", v.from, v.to))
        );
    }
    if let Some(change) = &rules.default_action {
        let _ = writeln!(
            out,
            "  {}",
            styled(paint::CHANGED, &{
                let (before, after) = change.texts();
                format!("~ default action {before} -> {after}")
            })
        );
    }
    out
}

/// A plan for people, lost work first, ending with how to apply it.
pub fn plan_table(p: &PlanOut) -> String {
    let mut out = String::new();
    let mut title = format!(
        "plan: {} on {}",
        p.kind.title(&p.pack.name, &p.pack.version),
        p.webhook_id
    );
    if let Some(from) = &p.pack.from_version {
        let _ = write!(title, " (installed now: {from})");
    }
    let _ = writeln!(out, "{}", styled(paint::HEADING, &title));
    let _ = writeln!(
        out,
        "{}",
        if p.proven && p.kind == PlanKind::Rules {
            "proven: deliveries were replayed and the replay was complete".to_string()
        } else if p.proven {
            "proven: a delivery of the pack's sources was replayed and the replay was complete"
                .to_string()
        } else {
            styled(
                paint::CHANGED,
                "UNPROVEN: no delivery of the pack's sources was replayed, or the replay was cut short (confirm needs --allow-unproven)",
            )
        }
    );
    out.push_str("nothing is saved until the plan is confirmed\n\n");
    out.push_str(&report_lines(&p.report));
    if let Some(trial) = &p.trial {
        out.push('\n');
        let _ = writeln!(
            out,
            "{}",
            styled(
                paint::HEADING,
                &format!("trial {} (promoted)", trial.trial_id)
            )
        );
        out.push_str(&trial_lines(trial));
    }
    if let Some(guard) = &p.guard {
        out.push('\n');
        out.push_str(&plan_guard_lines(guard));
    }
    if !p.fixtures.is_empty() {
        out.push('\n');
        let mut t = Table::new(&["fixture", "wants", "got", "rule", "result"]);
        for f in &p.fixtures {
            t.styled_row(
                (!f.passed).then_some(paint::REMOVED),
                [
                    f.name.clone(),
                    f.want.to_string(),
                    f.got.to_string(),
                    f.rule.clone().unwrap_or_else(|| "-".into()),
                    if f.passed { "passed" } else { "FAILED" }.to_string(),
                ],
            );
        }
        out.push_str(&t.render(0));
    }
    let diff = diff_lines(&p.rule_diff, Some(&p.param_diff), p.version_diff.as_ref());
    if !diff.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "{}", styled(paint::HEADING, "diff"));
        out.push_str(&diff);
    }
    out.push('\n');
    let token = p.plan_token.as_deref().unwrap_or("<plan_token>");
    let mut confirm = format!("switchboard packs confirm {} {token}", p.webhook_id);
    if p.confirm_with.arguments.allow_unproven == Some(true) {
        confirm.push_str(" --allow-unproven");
    }
    if p.confirm_with.arguments.allow_insufficient_trial == Some(true) {
        confirm.push_str(" --allow-insufficient-trial");
    }
    out.push_str(&facts(&[
        ("expires", p.expires_at.clone()),
        ("token", token.to_string()),
        ("confirm", confirm),
    ]));
    out
}

fn status_table(o: &RulePackPlanOut) -> String {
    let state = match o.state {
        PlanState::Stale => format!(
            "stale ({}): plan again",
            o.stale_reason.as_deref().unwrap_or("?")
        ),
        PlanState::PendingApproval => "pending_approval: a person decides in the console".into(),
        other => other.as_str().to_string(),
    };
    let mut pairs = vec![
        ("plan", o.plan_id.clone()),
        ("webhook", o.webhook_id.clone()),
        (
            "change",
            format!("{} {}@{}", o.kind.as_str(), o.pack.name, o.pack.version),
        ),
        ("state", state),
        ("expires", o.expires_at.clone()),
    ];
    let mut by = o.proposed_by_human.clone().unwrap_or_default();
    if let Some(e) = &o.proposed_by_endpoint {
        let _ = write!(by, " via {e}");
    }
    if !by.is_empty() {
        pairs.push(("proposed by", by.trim().to_string()));
    }
    if let Some(url) = &o.console_url {
        pairs.push(("console", url.clone()));
    }
    if let Some(d) = &o.decided_by {
        pairs.push(("decided by", d.clone()));
    }
    if let Some(r) = &o.reject_reason {
        pairs.push(("rejected", r.clone()));
    }
    facts(&pairs)
}

fn confirm_table(o: &ConfirmOut) -> String {
    match o {
        ConfirmOut::Applied(a) => facts(&[
            (
                "applied",
                format!(
                    "{} {}@{} on {}",
                    a.kind.as_str(),
                    a.pack.name,
                    a.pack.version,
                    a.webhook_id
                ),
            ),
            ("version", format!("{} ({})", a.version, a.digest)),
            (
                "guard",
                a.guard_id.as_ref().map_or_else(
                    || "none started".to_string(),
                    |g| format!("{g}: the replaced rules run beside the new ones (switchboard guard {} --guard {g})", a.webhook_id),
                ),
            ),
        ]),
        ConfirmOut::Pending(p) => facts(&[
            (
                "pending",
                format!(
                    "{} {}@{} on {} waits for a person's approval; nothing is saved yet",
                    p.kind.as_str(),
                    p.pack.name,
                    p.pack.version,
                    p.webhook_id
                ),
            ),
            ("console", p.console_url.clone()),
            ("decide by", p.approval_expires_at.clone()),
            ("approvals", super::approvals::tally_words(&p.approvals)),
        ]),
    }
}
