//! `switchboard guard <webhook>`: a confirmed change's guard (issue 46) — the replaced rules in
//! its shadow on live deliveries, forecast beside observed, lost work first, any breach, the
//! revert and the recovery. Also what every planning command shares about guards: the flags
//! that set a plan's guard, and the lines a plan's guard is printed as.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use switchboard_control_client::views::RuleGuardOut;
use switchboard_model::guard::{GuardOptions, GuardPlan, OnBreach, RecoveryState};
use switchboard_proto::control::v1 as pb;

use super::paint::{self, styled};
use super::reports::trial_lines;
use super::{Common, Failure, Session, emit, exit, facts};

/// What a plan asks of the guard its confirm starts.
#[derive(Args, Debug, Clone, Default)]
pub struct GuardFlags {
    /// The guard watches this many live deliveries after the confirm (default 1,000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub guard_deliveries: Option<u64>,
    /// ... or this many hours, whichever comes first (default 7 days; at most 720).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=720))]
    pub guard_hours: Option<u64>,
    /// On a breach: revert (the replaced rules are saved again and the lost work recovered)
    /// or alert; default: the webhook's.
    #[arg(long, value_enum)]
    pub on_breach: Option<OnBreachFlag>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnBreachFlag {
    Revert,
    Alert,
}

impl GuardFlags {
    /// The request's guard options; none when no flag was given.
    pub fn options(&self) -> Option<pb::GuardOptions> {
        let options = GuardOptions {
            max_deliveries: self.guard_deliveries,
            max_duration_ms: self.guard_hours.map(|h| h.saturating_mul(3_600_000)),
            on_breach: self.on_breach.map(|o| match o {
                OnBreachFlag::Revert => OnBreach::Revert,
                OnBreachFlag::Alert => OnBreach::Alert,
            }),
        };
        (options != GuardOptions::default()).then(|| pb::GuardOptions::from(&options))
    }
}

#[derive(Args, Debug)]
pub struct GuardsArgs {
    /// The webhook's id (`wh_…`).
    webhook_id: String,
    /// The guard's id (`gd_…`, as `packs confirm` printed it); default: the webhook's newest.
    #[arg(long)]
    guard: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// `switchboard guard <webhook> [--guard <id>]` (get_rule_guard).
pub async fn run(args: GuardsArgs) -> Result<u8, Failure> {
    let s = Session::open("get_rule_guard", &args.common)?;
    let r = s
        .client
        .get_rule_guard(
            &s.bearer,
            pb::GetRuleGuardRequest {
                webhook_id: args.webhook_id,
                guard_id: args.guard.unwrap_or_default(),
            },
        )
        .await
        .map_err(|e| s.status(e))?;
    let out: RuleGuardOut = r.into();
    emit(s.output, &out, guard_table)?;
    Ok(exit::OK)
}

fn hours(ms: i64) -> String {
    let h = ms / 3_600_000;
    if h >= 24 && h % 24 == 0 {
        format!("{} days", h / 24)
    } else {
        format!("{h} hours")
    }
}

/// A plan's guard, as a plan prints it: what a person accepts with the change.
pub fn plan_guard_lines(g: &GuardPlan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "guard: after the confirm the replaced rules keep running beside the new ones for {} live deliveries or {}, whichever comes first",
        g.max_deliveries,
        hours(g.max_duration_ms)
    );
    let _ = writeln!(
        out,
        "  held to the forecast: {:.1} lost work and {:.1} faults per 100 deliveries (of {} replayed)",
        g.forecast.lost_work_per_100, g.forecast.faults_per_100, g.forecast.deliveries
    );
    let why = match g.on_breach_from {
        switchboard_model::guard::OnBreachFrom::WebhookDefault => "the webhook's default",
        switchboard_model::guard::OnBreachFrom::Plan => "asked by this plan",
        switchboard_model::guard::OnBreachFrom::NoForecast => {
            "the replay held no deliveries, so there is no forecast to revert on"
        }
    };
    let _ = writeln!(
        out,
        "  on a breach: {} ({why})",
        match g.on_breach {
            OnBreach::Revert => "revert to the replaced rules and recover the lost work",
            OnBreach::Alert => "alert only",
        }
    );
    out
}

fn guard_table(g: &RuleGuardOut) -> String {
    let t = &g.report;
    let mut out = String::new();
    let state = match (&g.breach_text, g.reverted_version) {
        (Some(_), Some(v)) => format!("BREACHED, reverted (version {v})"),
        (Some(_), None) => "BREACHED, not reverted".to_string(),
        (None, _) if t.ended_at.is_none() => "running".to_string(),
        (None, _) => "ended, no breach".to_string(),
    };
    let _ = writeln!(
        out,
        "{}",
        styled(
            paint::HEADING,
            &format!("guard {} on {}: {state}", t.trial_id, t.webhook_id)
        )
    );
    if let Some(text) = &g.breach_text {
        let _ = writeln!(
            out,
            "{}",
            styled(paint::REMOVED, &format!("breach: {text}"))
        );
    }
    let mut pairs = vec![
        ("plan", t.plan_id.clone()),
        (
            "change",
            format!(
                "version {} replaced version {}",
                g.confirmed_version, g.replaced_version
            ),
        ),
        ("on breach", g.on_breach.as_str().to_string()),
        (
            "forecast",
            format!(
                "{:.1} lost work, {:.1} faults per 100 (of {} replayed)",
                g.forecast.lost_work_per_100, g.forecast.faults_per_100, g.forecast.deliveries
            ),
        ),
        ("started", format!("{} by {}", t.started_at, t.started_by)),
        (
            "ends",
            t.ended_at
                .clone()
                .unwrap_or_else(|| format!("by {}", t.ends_at)),
        ),
    ];
    if let Some(r) = &g.recovery {
        let text = match r.state {
            RecoveryState::Applied => format!(
                "applied: {} deliveries re-routed, {} todos made (redrive {})",
                r.applied, r.todos_created, r.redrive_id
            ),
            RecoveryState::AwaitingPerson => format!(
                "{} deliveries wait for a person to recover them in the console (redrive {})",
                r.changes, r.redrive_id
            ),
            RecoveryState::NothingToRecover => "nothing to recover".to_string(),
            RecoveryState::Stale => format!(
                "stale: the webhook changed before a person applied it (redrive {})",
                r.redrive_id
            ),
        };
        pairs.push(("recovery", text));
    }
    out.push_str(&facts(&pairs));
    out.push('\n');
    out.push_str("before: the replaced rules' decision; after: the confirmed rules'\n");
    out.push_str(&trial_lines(t));
    out
}
