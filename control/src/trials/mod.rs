//! Trials (issue 45): a plan's candidate running beside a webhook's live rules on its live
//! deliveries, routing nothing, until stopped, `max_deliveries`, `max_duration`, promoted,
//! or until the saved configuration moves (`stale`). `live` evaluates ingest's deliveries;
//! this module starts, stops, reads and lists trials for the verbs, and builds their report
//! (the model's [`TrialReport`]) from the store's tallies. Promotion is a plan, so it lives
//! with the plans (`rule_packs::promote`).

pub mod cost;
pub mod guards;
pub mod live;

pub use cost::Places;
pub use live::{TrialOptions, Trials};

use switchboard_model::plan::StaleCause;
use switchboard_model::trial::{
    DEFAULT_MIN_DELIVERIES, Forecast, TrialEnd, TrialFacts, TrialLimits, TrialReport,
};

use crate::error::{Error, Result};
use crate::scope::OwnerScope;
use crate::secrets::sha256_hex;
use crate::store::{NewTrial, Page, Store, Trial};

/// What the trial verbs need of control: its store, its trial runner, and whether the
/// webhook's faults deliver no work (the trusted-actors capability quarantines them).
/// `ControlState::trials_ctx` makes one; taking these rather than the state keeps this module
/// below the state, which holds the runner.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub store: &'a Store,
    pub runner: &'a Trials,
    pub fail_closed: bool,
}

/// Who asks: the owner scope they act in, and who they are (an endpoint id, or a person's
/// login), recorded as the trial's `started_by`.
#[derive(Clone, Debug)]
pub struct Asker {
    pub scope: OwnerScope,
    pub who: String,
}

/// `start_rule_trial`'s arguments.
#[derive(Clone, Debug, Default)]
pub struct StartArgs {
    pub webhook_id: String,
    pub plan_token: String,
    pub max_deliveries: Option<u64>,
    pub max_duration_ms: Option<u64>,
}

/// The report of a trial as stored, at the store clock's now.
pub fn report(ctx: &Ctx<'_>, trial: &Trial) -> TrialReport {
    let ids: Vec<String> = trial
        .candidate
        .rules
        .iter()
        .filter_map(|r| r.id.clone())
        .collect();
    let provenance = trial
        .plan
        .as_ref()
        .map(|p| p.apply.provenance.clone())
        .unwrap_or_default();
    let from_pack = |id: &str| {
        provenance
            .iter()
            .find(|p| p.rule_ids.iter().any(|r| r == id))
            .map(|p| p.name.clone())
    };
    TrialReport::build(
        &TrialFacts {
            trial_id: &trial.id,
            webhook_id: &trial.webhook_id,
            plan_id: &trial.plan_id,
            started_at_ms: trial.started_at,
            started_by: &trial.started_by,
            ended_at_ms: trial.ended_at,
            end: trial.end,
            limits: trial.limits,
            candidate_digest: &trial.candidate_digest,
            base_config_digest: &trial.base_config_digest,
            forecast: &trial.forecast,
            observed: &trial.observed,
            examples: &trial.examples,
            candidate_rule_ids: &ids,
            from_pack: &from_pack,
            fail_closed: ctx.fail_closed,
        },
        ctx.store.clock().now_ms(),
        DEFAULT_MIN_DELIVERIES,
    )
}

/// `start_rule_trial`: a trial of the candidate of the plan `plan_token` names, which must be
/// a plan of this webhook that could still be confirmed (planned, or awaiting a person). The
/// plan is not consumed. Another scope's token is `not_found`, like an unknown one.
pub async fn start(ctx: &Ctx<'_>, caller: &Asker, args: StartArgs) -> Result<TrialReport> {
    let token = args.plan_token.trim();
    if token.is_empty() {
        return Err(Error::invalid("plan_token", "required"));
    }
    let max_duration_ms = match args.max_duration_ms {
        None => TrialLimits::default().max_duration_ms,
        Some(0) => return Err(Error::invalid("max_duration", "must be positive")),
        Some(ms) => i64::try_from(ms).map_err(|_| Error::invalid("max_duration", "is too long"))?,
    };
    let webhook = ctx
        .store
        .get_webhook(&caller.scope, &args.webhook_id)
        .await?;
    let plan = ctx
        .store
        .plan_by_token(&sha256_hex(token), &caller.scope)
        .await?;
    if plan.webhook_id != webhook.id {
        return Err(Error::invalid(
            "webhook_id",
            "does not match the plan's; start the trial on the webhook the plan was made for",
        ));
    }
    let now = ctx.store.clock().now_ms();
    if let Some(cause) = StaleCause::of(&plan.facts(), now, webhook.config_version) {
        return Err(Error::stale(cause));
    }
    let trial = ctx
        .store
        .start_trial(
            NewTrial {
                webhook_id: webhook.id.clone(),
                owner_scope: caller.scope.clone(),
                plan_id: plan.id.clone(),
                candidate: plan.candidate.clone(),
                base_config_digest: webhook.config_digest.clone(),
                forecast: Forecast::of(&plan.plan.plan.report),
                limits: TrialLimits {
                    max_deliveries: args.max_deliveries,
                    max_duration_ms,
                },
                started_by: caller.who.clone(),
                plan: plan.plan.clone(),
            },
            ctx.runner.options().max_per_webhook,
        )
        .await?;
    ctx.runner.forget(&webhook.id);
    Ok(report(ctx, &trial))
}

/// `stop_rule_trial`: ends a running trial; one that has ended answers as it is.
pub async fn stop(ctx: &Ctx<'_>, caller: &Asker, trial_id: &str) -> Result<TrialReport> {
    let trial = ctx
        .store
        .end_trial(&caller.scope, trial_id.trim(), TrialEnd::Stopped)
        .await?;
    ctx.runner.forget(&trial.webhook_id);
    Ok(report(ctx, &trial))
}

/// `get_rule_trial`.
pub async fn get(ctx: &Ctx<'_>, caller: &Asker, trial_id: &str) -> Result<TrialReport> {
    let trial = ctx.store.get_trial(&caller.scope, trial_id.trim()).await?;
    Ok(report(ctx, &trial))
}

/// `list_rule_trials`: the webhook's trials, newest first, each with its report: one page
/// and the cursor for the next, or every trial when `page` is `None` (the deprecated
/// unpaged call).
pub async fn list(
    ctx: &Ctx<'_>,
    caller: &Asker,
    webhook_id: &str,
    page: Option<&Page>,
) -> Result<(Vec<TrialReport>, Option<String>)> {
    let (listed, next_cursor) = match page {
        Some(page) => {
            let paged = ctx
                .store
                .list_trials_page(&caller.scope, webhook_id, page)
                .await?;
            (paged.items, paged.next_cursor)
        }
        None => (
            ctx.store.list_trials(&caller.scope, webhook_id).await?,
            None,
        ),
    };
    Ok((listed.iter().map(|t| report(ctx, t)).collect(), next_cursor))
}
