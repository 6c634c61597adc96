//! `switchboard.control.v1.RuleTrials` (issue 45): start, stop, read and list trials, and
//! promote one (a plan, streamed like an install's). Starting and stopping route nothing;
//! another scope's trial is the one `not_found`.

use switchboard_proto::control::v1::rule_trials_server::RuleTrials as RuleTrialsService;
use switchboard_proto::control::v1::{
    GetRuleGuardRequest, GetRuleTrialRequest, ListRuleTrialsRequest, ListRuleTrialsResponse,
    PromoteRuleTrialRequest, RuleGuard, RuleTrial, StartRuleTrialRequest, StopRuleTrialRequest,
};
use tonic::{Request, Response, Status};

use super::auth::authorize;
use super::rule_packs::{caller, stream, window};
use crate::rule_packs::RulePacks;
use crate::state::ControlState;
use crate::trials::{self, Asker, StartArgs};

pub struct RuleTrialsApi {
    state: ControlState,
    packs: RulePacks,
}

/// The caller as the trial verbs take it.
fn asker(c: &super::auth::Caller) -> Asker {
    Asker {
        scope: c.endpoint.owner_scope.clone(),
        who: c.endpoint.id.clone(),
    }
}

impl RuleTrialsApi {
    pub fn new(state: ControlState, packs: RulePacks) -> Self {
        Self { state, packs }
    }
}

#[tonic::async_trait]
impl RuleTrialsService for RuleTrialsApi {
    async fn start_rule_trial(
        &self,
        request: Request<StartRuleTrialRequest>,
    ) -> Result<Response<RuleTrial>, Status> {
        super::respond(async {
            let c = authorize(&self.state, request.metadata(), "start_rule_trial").await?;
            let r = request.into_inner();
            let report = trials::start(
                &self.state.trials_ctx(),
                &asker(&c),
                StartArgs {
                    webhook_id: r.webhook_id,
                    plan_token: r.plan_token,
                    max_deliveries: r.max_deliveries,
                    max_duration_ms: r.max_duration_ms,
                },
            )
            .await?;
            Ok(RuleTrial::from(&report))
        })
        .await
    }

    async fn stop_rule_trial(
        &self,
        request: Request<StopRuleTrialRequest>,
    ) -> Result<Response<RuleTrial>, Status> {
        super::respond(async {
            let c = authorize(&self.state, request.metadata(), "stop_rule_trial").await?;
            let report = trials::stop(
                &self.state.trials_ctx(),
                &asker(&c),
                &request.get_ref().trial_id,
            )
            .await?;
            Ok(RuleTrial::from(&report))
        })
        .await
    }

    async fn get_rule_trial(
        &self,
        request: Request<GetRuleTrialRequest>,
    ) -> Result<Response<RuleTrial>, Status> {
        super::respond(async {
            let c = authorize(&self.state, request.metadata(), "get_rule_trial").await?;
            let report = trials::get(
                &self.state.trials_ctx(),
                &asker(&c),
                &request.get_ref().trial_id,
            )
            .await?;
            Ok(RuleTrial::from(&report))
        })
        .await
    }

    async fn list_rule_trials(
        &self,
        request: Request<ListRuleTrialsRequest>,
    ) -> Result<Response<ListRuleTrialsResponse>, Status> {
        super::respond(async {
            let c = authorize(&self.state, request.metadata(), "list_rule_trials").await?;
            let r = request.get_ref();
            let page = super::convert::page_or_all(&r.cursor, r.limit);
            let (reports, next_cursor) = trials::list(
                &self.state.trials_ctx(),
                &asker(&c),
                &r.webhook_id,
                page.as_ref(),
            )
            .await?;
            Ok(ListRuleTrialsResponse {
                trials: reports.iter().map(RuleTrial::from).collect(),
                next_cursor: next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn get_rule_guard(
        &self,
        request: Request<GetRuleGuardRequest>,
    ) -> Result<Response<RuleGuard>, Status> {
        super::respond(async {
            let c = authorize(&self.state, request.metadata(), "get_rule_guard").await?;
            let r = request.get_ref();
            let report = crate::trials::guards::get(
                &self.state.trials_ctx(),
                &asker(&c),
                &r.webhook_id,
                &r.guard_id,
            )
            .await?;
            Ok(RuleGuard::from(&report))
        })
        .await
    }

    type PromoteRuleTrialStream =
        super::streaming::EventStream<switchboard_proto::control::v1::RulePackEvent>;

    async fn promote_rule_trial(
        &self,
        request: Request<PromoteRuleTrialRequest>,
    ) -> Result<Response<Self::PromoteRuleTrialStream>, Status> {
        let c = authorize(&self.state, request.metadata(), "promote_rule_trial")
            .await
            .map_err(Status::from)?;
        let r = request.into_inner();
        let packs = self.packs.clone();
        let who = caller(&c);
        let replay = window(r.replay).map_err(Status::from)?;
        let guard = super::rule_packs::guard_options(r.guard).map_err(Status::from)?;
        Ok(Response::new(stream(move |progress| async move {
            packs
                .promote_trial(&who, &r.trial_id, replay, guard, Some(progress))
                .await
        })))
    }
}
