//! `switchboard.control.v1.RulePacks`: list, install and remove rule packs. Installs and
//! removals stream replay progress and then the plan or the applied result; a caller that
//! goes away stops the replay.

use serde_json::{Map, Value};
use switchboard_proto::control::v1::rule_packs_server::RulePacks as RulePacksService;
use switchboard_proto::control::v1::{
    ConfirmRulePackPlanRequest, GetRulePackPlanRequest, InstallRulePackRequest,
    ListRulePacksRequest, PlanKind, PlanState, RemoveRulePackRequest, ReplayProgress, ReplayWindow,
    RulePackEvent, RulePackPlanStatus, RulePacksResult, rule_pack_event,
};
use tonic::{Request, Response, Status};

use super::auth::{Caller, authorize};
use super::status::ApiError;
use super::streaming::{self, with_progress};
use crate::rule_packs::{
    self, InstallArgs, PackAnswer, PackError, Progress, RemoveArgs, RulePacks,
};
use crate::state::ControlState;

type EventStream = streaming::EventStream<RulePackEvent>;

pub struct RulePacksApi {
    state: ControlState,
    packs: RulePacks,
}

impl RulePacksApi {
    pub fn new(state: ControlState, packs: RulePacks) -> Self {
        Self { state, packs }
    }
}

pub(super) fn caller(c: &Caller) -> rule_packs::Caller {
    rule_packs::Caller {
        endpoint_id: c.endpoint.id.clone(),
        human: c.endpoint.human_login.clone(),
        scope: c.endpoint.owner_scope.clone(),
    }
}

/// A request's replay window; `since` given both ways must agree (`invalid_argument` on
/// `replay.since`).
pub(super) fn window(w: Option<ReplayWindow>) -> Result<rule_packs::ReplayWindow, ApiError> {
    let w = w.unwrap_or_default();
    // The deprecated `since_ms` is read for one release (0: not given).
    #[allow(deprecated)]
    let since_ms = (w.since_ms > 0).then_some(w.since_ms);
    Ok(rule_packs::ReplayWindow {
        limit: (w.limit > 0).then_some(w.limit),
        since: super::convert::time_bound("replay.since", since_ms, w.since.as_ref())?,
    })
}

/// What a planning call asks of its guard, checked before anything is replayed (the webhook's
/// own default is applied when the plan is made).
pub(super) fn guard_options(
    g: Option<switchboard_proto::control::v1::GuardOptions>,
) -> Result<switchboard_model::guard::GuardOptions, ApiError> {
    let options = g
        .map(switchboard_model::guard::GuardOptions::from)
        .unwrap_or_default();
    let one_delivery = switchboard_model::trial::Forecast {
        deliveries: 1,
        ..Default::default()
    };
    switchboard_model::guard::GuardPlan::new(&one_delivery, &options, None)
        .map_err(|e| ApiError::invalid(e.field, e.message))?;
    Ok(options)
}

/// The request's params: the `Struct`, or (deprecated, for one release) the JSON text a gateway
/// of the previous release sends; never both.
fn params(
    typed: Option<prost_types::Struct>,
    text: Option<String>,
) -> Result<Option<Map<String, Value>>, ApiError> {
    match (typed, text.filter(|s| !s.trim().is_empty())) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "params",
            "give params or params_json, not both",
        )),
        (Some(s), None) => Ok(Some(switchboard_proto::convert::json::from_struct(s))),
        (None, None) => Ok(None),
        (None, Some(text)) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => Ok(Some(m)),
            _ => Err(ApiError::invalid(
                "params_json",
                "must be a JSON object of params",
            )),
        },
    }
}

/// A pack call's stream: replay progress, then the typed plan or applied result.
pub(super) fn stream<F>(work: impl FnOnce(Progress) -> F + Send + 'static) -> EventStream
where
    F: std::future::Future<Output = Result<PackAnswer, PackError>> + Send + 'static,
{
    with_progress(
        move |progress| async move { work(progress).await.map_err(ApiError::RulePack) },
        |replayed, total| RulePackEvent {
            event: Some(rule_pack_event::Event::Progress(ReplayProgress {
                replayed,
                total,
            })),
        },
        |answer: PackAnswer| event(&answer),
    )
}

/// A plan, an applied result or a pending approval as the stream's last event.
fn event(answer: &PackAnswer) -> RulePackEvent {
    let result = match answer {
        PackAnswer::Plan(plan) => rule_pack_event::Event::Plan(plan.as_ref().into()),
        PackAnswer::Applied(applied) => rule_pack_event::Event::Applied(applied.as_ref().into()),
        PackAnswer::Pending(pending) => rule_pack_event::Event::Pending(pending.as_ref().into()),
    };
    RulePackEvent {
        event: Some(result),
    }
}

/// A confirm needs `confirm_rule_pack_plan` on the allowlist as well as the planning verb
/// (issue 20): an endpoint without it plans and proposes only.
fn may_confirm(c: &Caller) -> Result<(), Status> {
    if c.endpoint.allows(CONFIRM_VERB) {
        Ok(())
    } else {
        Err(ApiError::PermissionDenied(format!(
            "{CONFIRM_VERB} is not on this endpoint's allowlist: it may plan and propose, not put a plan live"
        ))
        .into())
    }
}

const CONFIRM_VERB: &str = "confirm_rule_pack_plan";

#[tonic::async_trait]
impl RulePacksService for RulePacksApi {
    async fn list_rule_packs(
        &self,
        request: Request<ListRulePacksRequest>,
    ) -> Result<Response<RulePacksResult>, Status> {
        super::respond(async {
            let c = authorize(&self.state, request.metadata(), "list_rule_packs").await?;
            let webhook_id = request.get_ref().webhook_id.trim();
            let listing = self
                .packs
                .list(&caller(&c), (!webhook_id.is_empty()).then_some(webhook_id))
                .await
                .map_err(ApiError::RulePack)?;
            Ok(RulePacksResult {
                listing: Some((&listing).into()),
            })
        })
        .await
    }

    type InstallRulePackStream = EventStream;

    async fn install_rule_pack(
        &self,
        request: Request<InstallRulePackRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let c = authorize(&self.state, request.metadata(), "install_rule_pack")
            .await
            .map_err(Status::from)?;
        let r = request.into_inner();
        // An empty webhook id goes on to the one `not_found` of an unknown id, as every verb's.
        if r.name.trim().is_empty() {
            return Err(ApiError::invalid("name", "required").into());
        }
        if !r.confirm.trim().is_empty() {
            may_confirm(&c)?;
        }
        // The deprecated text form is still read, for one release (see `params`).
        #[allow(deprecated)]
        let params = params(r.params, r.params_json).map_err(Status::from)?;
        let args = InstallArgs {
            webhook_id: r.webhook_id,
            name: r.name,
            version: (!r.version.trim().is_empty()).then_some(r.version),
            params,
            replaces: (!r.replaces.is_empty()).then_some(r.replaces),
            keep_params: (!r.keep_params.is_empty()).then_some(r.keep_params),
            replay: window(r.replay).map_err(Status::from)?,
            confirm: (!r.confirm.trim().is_empty()).then_some(r.confirm),
            allow_unproven: r.allow_unproven,
            overwrite_local_edits: r.overwrite_local_edits,
            guard: guard_options(r.guard).map_err(Status::from)?,
        };
        let packs = self.packs.clone();
        let who = caller(&c);
        Ok(Response::new(stream(move |progress| async move {
            packs.install(&who, args, Some(progress)).await
        })))
    }

    type RemoveRulePackStream = EventStream;

    async fn remove_rule_pack(
        &self,
        request: Request<RemoveRulePackRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let c = authorize(&self.state, request.metadata(), "remove_rule_pack")
            .await
            .map_err(Status::from)?;
        let r = request.into_inner();
        // An empty webhook id goes on to the one `not_found` of an unknown id, as every verb's.
        if r.name.trim().is_empty() {
            return Err(ApiError::invalid("name", "required").into());
        }
        if !r.confirm.trim().is_empty() {
            may_confirm(&c)?;
        }
        let args = RemoveArgs {
            webhook_id: r.webhook_id,
            name: r.name,
            replay: window(r.replay).map_err(Status::from)?,
            confirm: (!r.confirm.trim().is_empty()).then_some(r.confirm),
            allow_unproven: r.allow_unproven,
            keep_params: (!r.keep_params.is_empty()).then_some(r.keep_params),
            guard: guard_options(r.guard).map_err(Status::from)?,
        };
        let packs = self.packs.clone();
        let who = caller(&c);
        Ok(Response::new(stream(move |progress| async move {
            packs.remove(&who, args, Some(progress)).await
        })))
    }

    async fn get_rule_pack_plan(
        &self,
        request: Request<GetRulePackPlanRequest>,
    ) -> Result<Response<RulePackPlanStatus>, Status> {
        super::respond(async {
            let c = authorize(&self.state, request.metadata(), "get_rule_pack_plan").await?;
            let token = request.get_ref().plan_token.trim();
            let status = self
                .packs
                .plan_status(&caller(&c), token)
                .await
                .map_err(ApiError::RulePack)?;
            let plan = &status.plan;
            // `expires_at` is filled beside `expires_at_time` for one release.
            #[allow(deprecated)]
            Ok(RulePackPlanStatus {
                plan_id: plan.id.clone(),
                webhook_id: plan.webhook_id.clone(),
                state: PlanState::from(status.state) as i32,
                stale_reason: status
                    .stale_reason
                    .map(|r| r.as_str().to_string())
                    .unwrap_or_default(),
                pack_name: plan.pack_name.clone(),
                pack_version: plan.pack_version.clone(),
                kind: PlanKind::from(status.kind) as i32,
                expires_at: crate::rule_packs::rfc3339(plan.expires_at),
                expires_at_time: Some(switchboard_proto::convert::time::from_millis(
                    plan.expires_at,
                )),
                console_url: status.console_url.clone().unwrap_or_default(),
                proposed_by_endpoint: plan.proposed_by_endpoint.clone().unwrap_or_default(),
                proposed_by_human: plan.proposed_by_human.clone().unwrap_or_default(),
                decided_by: plan.decided_by.clone().unwrap_or_default(),
                reject_reason: plan.reject_reason.clone().unwrap_or_default(),
                guard: status
                    .guard
                    .as_ref()
                    .map(switchboard_proto::control::v1::RuleGuard::from),
                approvals: status
                    .approvals
                    .as_ref()
                    .map(switchboard_proto::control::v1::PlanApprovals::from),
            })
        })
        .await
    }

    async fn confirm_rule_pack_plan(
        &self,
        request: Request<ConfirmRulePackPlanRequest>,
    ) -> Result<Response<RulePackEvent>, Status> {
        super::respond(async {
            let c = authorize(&self.state, request.metadata(), CONFIRM_VERB).await?;
            let r = request.get_ref();
            let answer = self
                .packs
                .confirm_token(
                    &caller(&c),
                    &r.webhook_id,
                    r.plan_token.trim(),
                    crate::rule_packs::Allow {
                        unproven: r.allow_unproven,
                        insufficient_trial: r.allow_insufficient_trial,
                    },
                )
                .await
                .map_err(ApiError::RulePack)?;
            Ok(event(&answer))
        })
        .await
    }
}
