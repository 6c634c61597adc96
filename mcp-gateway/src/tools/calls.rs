//! One handler per tool: each takes its typed params and returns its typed output, and the
//! catalog (`super::CATALOG`) binds each tool's name, schemas and annotations to its handler
//! in one entry — a tool without a handler, or with a handler of other types than its
//! schemas, does not compile.

use rmcp::RoleServer;
use rmcp::model::{JsonObject, ProgressNotificationParam};
use rmcp::service::RequestContext;
use serde_json::Value;
use switchboard_control_client::views::*;
use switchboard_control_client::{Bearer, CallError, ControlClient, convert};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::rule_pack_event::Event;
use switchboard_proto::convert::{json, time};
use tonic::{Status, Streaming};

use super::params::*;
use crate::errors;

/// One tool call: the control client, the caller's own bearer, and the MCP request (for
/// progress notifications).
pub struct Call {
    pub tool: &'static str,
    pub control: ControlClient,
    pub bearer: Bearer,
    pub context: RequestContext<RoleServer>,
}

impl Call {
    /// A control status as this tool's error.
    fn status(&self, s: &Status) -> CallError {
        errors::from_status(self.tool, s)
    }
}

/// The arguments as the tool's typed params, or an error naming what does not fit.
pub fn parse<P: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: JsonObject,
) -> Result<P, CallError> {
    if let Some(moved) = moved_to_confirm(tool, &arguments) {
        return Err(moved);
    }
    serde_json::from_value(Value::Object(arguments)).map_err(|e| errors::invalid_arguments(tool, e))
}

/// `confirm` and `allow_unproven` moved from the planning tools to confirm_rule_pack_plan, so
/// that a plan call changes nothing (its annotations say so). An agent still sending them is
/// told where they went rather than only that the field is unknown; nothing is planned.
fn moved_to_confirm(tool: &str, arguments: &JsonObject) -> Option<CallError> {
    if !matches!(
        tool,
        "install_rule_pack" | "remove_rule_pack" | "plan_webhook_rules"
    ) {
        return None;
    }
    let field = ["confirm", "allow_unproven"]
        .into_iter()
        .find(|f| arguments.contains_key(*f))?;
    Some(
        errors::invalid_arguments(
            tool,
            format!(
                "`{field}` is not an argument of {tool}, which only plans: apply a plan with confirm_rule_pack_plan"
            ),
        )
        .with("field", field)
        .with(
            "next",
            "confirm_rule_pack_plan {webhook_id, plan_token, allow_unproven}",
        ),
    )
}

/// A tool's typed output as the call's structured result.
pub fn to_value<T: serde::Serialize>(out: T) -> Result<Value, CallError> {
    serde_json::to_value(out).map_err(CallError::internal)
}

fn replay_window(w: ReplayParams) -> pb::ReplayWindow {
    pb::ReplayWindow {
        limit: w.limit.unwrap_or(0),
        since: bound(w.since_ms),
        ..Default::default()
    }
}

/// An agent's `since_ms`/`until_ms` as the Timestamp control reads; 0, as it always did, is
/// no bound.
fn bound(ms: Option<i64>) -> Option<time::Timestamp> {
    ms.filter(|&ms| ms != 0).map(time::from_millis)
}

/// An agent's configuration as control's typed message. A shape problem (not an object, an
/// unknown field, an action that is none) is `invalid_configuration`, as control reports the
/// problems it finds, so an agent reads one kind of answer whoever found it.
fn configuration(tool: &str, value: &Value) -> Result<pb::Configuration, CallError> {
    if !value.is_object() {
        return Err(
            errors::invalid_arguments(tool, "`configuration` must be a JSON object")
                .with("field", "configuration"),
        );
    }
    json::parse_configuration(value).map_err(errors::configuration_shape)
}

/// An agent's rule patch as control's typed message, or an error naming what does not fit.
fn rule_patch(tool: &str, value: &Value) -> Result<pb::RulePatch, CallError> {
    json::parse_rule_patch(value)
        .map_err(|e| errors::invalid_arguments(tool, format!("rule: {e}")).with("field", "rule"))
}

/// One event of a streamed call: replay progress, or the call's result.
enum Step<R> {
    Progress(pb::ReplayProgress),
    Done(R),
}

/// Follows a streamed call: progress events become MCP progress notifications (when the
/// request carried a progressToken), the result ends it. `step` reads one event (`None` for
/// an event that says nothing).
async fn follow<M, R>(
    cx: &Call,
    mut stream: Streaming<M>,
    step: impl Fn(M) -> Option<Step<R>>,
) -> Result<R, CallError> {
    let token = cx.context.meta.get_progress_token();
    loop {
        let event = stream.message().await.map_err(|s| cx.status(&s))?;
        let Some(event) = event else {
            return Err(CallError::internal(format!(
                "{}: control ended the stream without a result",
                cx.tool
            )));
        };
        match step(event) {
            Some(Step::Progress(p)) => {
                if let Some(token) = &token {
                    let note = ProgressNotificationParam::new(token.clone(), p.replayed as f64)
                        .with_total(p.total as f64)
                        .with_message(format!("replayed {} of {} deliveries", p.replayed, p.total));
                    if let Err(e) = cx.context.peer.notify_progress(note).await {
                        tracing::debug!(error = %e, "a progress notification was not delivered");
                    }
                }
            }
            Some(Step::Done(result)) => return Ok(result),
            None => {}
        }
    }
}

/// Follows a plan's stream: the typed plan is the tool's result, as the same type control
/// built it from serializes it. The gateway never sends a confirm on a planning call, so an
/// applied or pending answer would be control's mistake.
async fn follow_plan(
    cx: &Call,
    stream: Streaming<pb::RulePackEvent>,
) -> Result<PlanOut, CallError> {
    follow(cx, stream, |e| match e.event {
        Some(Event::Progress(p)) => Some(Step::Progress(p)),
        Some(Event::Plan(plan)) => Some(Step::Done(Ok(plan.into()))),
        Some(Event::Applied(_) | Event::Pending(_)) => Some(Step::Done(Err(CallError::internal(
            "control answered a plan with a confirm's result",
        )))),
        None => None,
    })
    .await?
}

/// A confirm's one event as the tool's result.
fn confirm_result(event: pb::RulePackEvent) -> Result<ConfirmOut, CallError> {
    match event.event {
        Some(Event::Applied(applied)) => Ok(ConfirmOut::Applied(Box::new(applied.into()))),
        Some(Event::Pending(pending)) => Ok(ConfirmOut::Pending(Box::new(pending.into()))),
        _ => Err(CallError::internal(
            "control answered a confirm with no result",
        )),
    }
}

pub async fn get_rule_pack_plan(
    cx: &Call,
    p: PlanTokenParams,
) -> Result<RulePackPlanOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .get_rule_pack_plan(
            b,
            pb::GetRulePackPlanRequest {
                plan_token: p.plan_token,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(convert::plan_status(r))
}

pub async fn confirm_rule_pack_plan(
    cx: &Call,
    p: ConfirmRulePackPlanParams,
) -> Result<ConfirmOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .confirm_rule_pack_plan(
            b,
            pb::ConfirmRulePackPlanRequest {
                webhook_id: p.webhook_id,
                plan_token: p.plan_token,
                allow_unproven: p.allow_unproven,
                allow_insufficient_trial: p.allow_insufficient_trial,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    confirm_result(r)
}

pub async fn start_rule_trial(
    cx: &Call,
    p: StartRuleTrialParams,
) -> Result<RuleTrialOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .start_rule_trial(
            b,
            pb::StartRuleTrialRequest {
                webhook_id: p.webhook_id,
                plan_token: p.plan_token,
                max_deliveries: p.max_deliveries,
                max_duration_ms: p.max_duration_ms,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(r.into())
}

pub async fn stop_rule_trial(cx: &Call, p: TrialIdParams) -> Result<RuleTrialOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .stop_rule_trial(
            b,
            pb::StopRuleTrialRequest {
                trial_id: p.trial_id,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(r.into())
}

pub async fn get_rule_trial(cx: &Call, p: TrialIdParams) -> Result<RuleTrialOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .get_rule_trial(
            b,
            pb::GetRuleTrialRequest {
                trial_id: p.trial_id,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(r.into())
}

pub async fn get_rule_guard(cx: &Call, p: GuardIdParams) -> Result<RuleGuardOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .get_rule_guard(
            b,
            pb::GetRuleGuardRequest {
                webhook_id: p.webhook_id,
                guard_id: p.guard_id.unwrap_or_default(),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(r.into())
}

/// A plan's guard options as the request carries them.
fn guard_options(g: GuardParams) -> pb::GuardOptions {
    pb::GuardOptions::from(&switchboard_model::guard::GuardOptions {
        max_deliveries: g.max_deliveries,
        max_duration_ms: g.max_duration_ms,
        on_breach: g.on_breach,
    })
}

pub async fn list_rule_trials(
    cx: &Call,
    p: WebhookIdParams,
) -> Result<ListRuleTrialsOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let trials = c
        .all_rule_trials(b, &p.webhook_id)
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(ListRuleTrialsOut {
        trials: trials.into_iter().map(Into::into).collect(),
    })
}

pub async fn promote_rule_trial(
    cx: &Call,
    p: PromoteRuleTrialParams,
) -> Result<PlanOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let stream = c
        .promote_rule_trial(
            b,
            pb::PromoteRuleTrialRequest {
                trial_id: p.trial_id,
                replay: p.replay.map(replay_window),
                guard: p.guard.map(guard_options),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    follow_plan(cx, stream).await
}

pub async fn create_webhook(
    cx: &Call,
    p: CreateWebhookParams,
) -> Result<CreateWebhookOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .create_webhook(
            b,
            pb::CreateWebhookRequest {
                source_type: source_type(p.source_type) as i32,
                grant: p.grant,
                secret: p.secret,
                reject_unverified: p.reject_unverified,
                name: p.name.unwrap_or_default(),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(CreateWebhookOut {
        webhook: convert::webhook(convert::required("webhook", r.webhook)?)?,
        secret: r.secret,
    })
}

pub async fn list_webhooks(cx: &Call, _: NoParams) -> Result<ListWebhooksOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let webhooks = c.all_webhooks(b).await.map_err(|s| cx.status(&s))?;
    Ok(ListWebhooksOut {
        webhooks: webhooks
            .into_iter()
            .map(convert::webhook)
            .collect::<Result<_, _>>()?,
    })
}

pub async fn get_webhook(cx: &Call, p: WebhookIdParams) -> Result<GetWebhookOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .get_webhook(
            b,
            pb::GetWebhookRequest {
                webhook_id: p.webhook_id,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(GetWebhookOut {
        webhook: convert::webhook(convert::required("webhook", r.webhook)?)?,
    })
}

pub async fn delete_webhook(cx: &Call, p: WebhookIdParams) -> Result<DeleteWebhookOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .delete_webhook(
            b,
            pb::DeleteWebhookRequest {
                webhook_id: p.webhook_id,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(DeleteWebhookOut {
        webhook_id: r.webhook_id,
    })
}

pub async fn rename_webhook(cx: &Call, p: RenameWebhookParams) -> Result<GetWebhookOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .rename_webhook(
            b,
            pb::RenameWebhookRequest {
                webhook_id: p.webhook_id,
                name: p.name,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(GetWebhookOut {
        webhook: convert::webhook(convert::required("webhook", r.webhook)?)?,
    })
}

pub async fn rotate_webhook_secret(
    cx: &Call,
    p: RotateWebhookSecretParams,
) -> Result<RotateWebhookSecretOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .rotate_webhook_secret(
            b,
            pb::RotateWebhookSecretRequest {
                webhook_id: p.webhook_id,
                secret: p.secret,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(RotateWebhookSecretOut {
        webhook: convert::webhook(convert::required("webhook", r.webhook)?)?,
        secret: r.secret,
    })
}

pub async fn list_webhook_events(
    cx: &Call,
    p: ListWebhookEventsParams,
) -> Result<ListWebhookEventsOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .list_webhook_events(
            b,
            pb::ListWebhookEventsRequest {
                webhook_id: p.webhook_id,
                cursor: p.cursor.unwrap_or_default(),
                limit: p.limit.unwrap_or(0),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(ListWebhookEventsOut {
        events: r
            .events
            .into_iter()
            .map(convert::event_summary)
            .collect::<Result<_, _>>()?,
        next_cursor: (!r.next_cursor.is_empty()).then_some(r.next_cursor),
        retention: r.retention.map(convert::retention),
    })
}

pub async fn get_webhook_event(
    cx: &Call,
    p: GetWebhookEventParams,
) -> Result<GetWebhookEventOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .get_webhook_event(
            b,
            pb::GetWebhookEventRequest {
                event_id: p.event_id,
                webhook_id: p.webhook_id.unwrap_or_default(),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::get_event(r)
}

pub async fn explain_webhook_event(
    cx: &Call,
    p: ExplainWebhookEventParams,
) -> Result<ExplainWebhookEventOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .explain_webhook_event(
            b,
            pb::ExplainWebhookEventRequest {
                event_id: p.event_id,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::explain_event(r)
}

pub async fn redrive_webhook_events(
    cx: &Call,
    p: RedriveWebhookEventsParams,
) -> Result<RedrivePlanOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .redrive_webhook_events(
            b,
            pb::RedriveWebhookEventsRequest {
                webhook_id: p.webhook_id,
                filter: Some(pb::RedriveFilter {
                    decisions: p.filter.decisions,
                    since: p.filter.since_ms.map(time::from_millis),
                    until: p.filter.until_ms.map(time::from_millis),
                    event_ids: p.filter.event_ids,
                    config_version: p.filter.config_version,
                    ..Default::default()
                }),
                limit: p.limit.unwrap_or(0),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::redrive_plan(r)
}

pub async fn confirm_webhook_redrive(
    cx: &Call,
    p: ConfirmWebhookRedriveParams,
) -> Result<ConfirmWebhookRedriveOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .confirm_webhook_redrive(
            b,
            pb::ConfirmWebhookRedriveRequest {
                webhook_id: p.webhook_id,
                plan_token: p.plan_token,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(convert::confirm_redrive(r))
}

pub async fn list_webhook_rules(
    cx: &Call,
    p: WebhookIdParams,
) -> Result<ListWebhookRulesOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .list_webhook_rules(
            b,
            pb::ListWebhookRulesRequest {
                webhook_id: p.webhook_id,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::list_rules(r)
}

pub async fn set_webhook_rules(
    cx: &Call,
    p: SetWebhookRulesParams,
) -> Result<SaveRulesOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let configuration = configuration(cx.tool, &p.configuration)?;
    let r = c
        .set_webhook_rules(
            b,
            pb::SetWebhookRulesRequest {
                webhook_id: p.webhook_id,
                expected_version: p.expected_version,
                configuration: Some(configuration),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::save(r)
}

pub async fn update_webhook_rule(
    cx: &Call,
    p: UpdateWebhookRuleParams,
) -> Result<SaveRulesOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let patch = rule_patch(cx.tool, &p.rule)?;
    let r = c
        .update_webhook_rule(
            b,
            pb::UpdateWebhookRuleRequest {
                webhook_id: p.webhook_id,
                rule_id: p.rule_id,
                expected_version: p.expected_version,
                patch: Some(patch),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::save(r)
}

pub async fn delete_webhook_rule(
    cx: &Call,
    p: DeleteWebhookRuleParams,
) -> Result<SaveRulesOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .delete_webhook_rule(
            b,
            pb::DeleteWebhookRuleRequest {
                webhook_id: p.webhook_id,
                rule_id: p.rule_id,
                expected_version: p.expected_version,
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::save(r)
}

pub async fn test_webhook_rules(
    cx: &Call,
    p: TestWebhookRulesParams,
) -> Result<TestWebhookRulesOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let configuration = p
        .configuration
        .as_ref()
        .map(|c| configuration(cx.tool, c))
        .transpose()?;
    let payload = p
        .payload
        .map(|d| {
            Ok::<_, CallError>(pb::TestPayload {
                payload_json: serde_json::to_string(&d.body)
                    .map_err(|e| errors::invalid_arguments(cx.tool, e))?,
                kind: d.kind.unwrap_or_default(),
                headers: d
                    .headers
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(name, value)| pb::Header { name, value })
                    .collect(),
                verified: d.verified,
                delivery_id: d.delivery_id.unwrap_or_default(),
            })
        })
        .transpose()?;
    let request = pb::TestWebhookRulesRequest {
        webhook_id: p.webhook_id,
        event_id: p.event_id.unwrap_or_default(),
        payload,
        replay: p.replay.map(|w| pb::TestReplay {
            limit: w.limit.unwrap_or(0),
            since: bound(w.since_ms),
            ..Default::default()
        }),
        configuration,
    };
    // A replay streams, so its progress reaches the agent; a dry run does not.
    let r = if request.replay.is_some() {
        let stream = c
            .test_webhook_rules_stream(b, request)
            .await
            .map_err(|s| cx.status(&s))?;
        follow(cx, stream, |e| match e.event {
            Some(pb::test_webhook_rules_event::Event::Progress(p)) => Some(Step::Progress(p)),
            Some(pb::test_webhook_rules_event::Event::Result(r)) => Some(Step::Done(r)),
            None => None,
        })
        .await?
    } else {
        c.test_webhook_rules(b, request)
            .await
            .map_err(|s| cx.status(&s))?
    };
    convert::test(r)
}

pub async fn list_webhook_history(
    cx: &Call,
    p: ListWebhookHistoryParams,
) -> Result<ListWebhookHistoryOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .list_webhook_history(
            b,
            pb::ListWebhookHistoryRequest {
                webhook_id: p.webhook_id,
                cursor: p.cursor.unwrap_or_default(),
                limit: p.limit.unwrap_or(0),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::history(r)
}

pub async fn list_webhook_changes(
    cx: &Call,
    p: ListWebhookChangesParams,
) -> Result<ListWebhookChangesOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .list_webhook_changes(
            b,
            pb::ListWebhookChangesRequest {
                webhook_id: p.webhook_id.unwrap_or_default(),
                after_seq: p.after_seq.unwrap_or(0),
                limit: p.limit.unwrap_or(0),
                actor: p.actor.unwrap_or_default(),
                since: bound(p.since_ms),
                until: bound(p.until_ms),
                ..Default::default()
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::changes(r)
}

pub async fn list_rule_packs(
    cx: &Call,
    p: ListRulePacksParams,
) -> Result<ListRulePacksOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .list_rule_packs(
            b,
            pb::ListRulePacksRequest {
                webhook_id: p.webhook_id.unwrap_or_default(),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    convert::rule_packs(r)
}

pub async fn install_rule_pack(cx: &Call, p: InstallRulePackParams) -> Result<PlanOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let stream = c
        .install_rule_pack(
            b,
            pb::InstallRulePackRequest {
                webhook_id: p.webhook_id,
                name: p.name,
                version: p.version.unwrap_or_default(),
                replaces: p.replaces.unwrap_or_default(),
                replay: p.replay.map(replay_window),
                // Planning only: a plan is confirmed with confirm_rule_pack_plan.
                confirm: String::new(),
                allow_unproven: false,
                overwrite_local_edits: p.overwrite_local_edits,
                keep_params: p.keep_params.unwrap_or_default(),
                params: p.params.as_ref().map(json::to_struct),
                guard: p.guard.map(guard_options),
                // Not the deprecated `params_json`: control reads the Struct.
                ..Default::default()
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    follow_plan(cx, stream).await
}

pub async fn plan_webhook_rules(
    cx: &Call,
    p: PlanWebhookRulesParams,
) -> Result<PlanOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let configuration = configuration(cx.tool, &p.configuration)?;
    let stream = c
        .plan_webhook_rules(
            b,
            pb::PlanWebhookRulesRequest {
                webhook_id: p.webhook_id,
                configuration: Some(configuration),
                replay: p.replay.map(replay_window),
                guard: p.guard.map(guard_options),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    follow_plan(cx, stream).await
}

pub async fn remove_rule_pack(cx: &Call, p: RemoveRulePackParams) -> Result<PlanOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let stream = c
        .remove_rule_pack(
            b,
            pb::RemoveRulePackRequest {
                webhook_id: p.webhook_id,
                name: p.name,
                replay: p.replay.map(replay_window),
                // Planning only: a plan is confirmed with confirm_rule_pack_plan.
                confirm: String::new(),
                allow_unproven: false,
                keep_params: p.keep_params.unwrap_or_default(),
                guard: p.guard.map(guard_options),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    follow_plan(cx, stream).await
}

pub async fn list_todos(cx: &Call, p: ListTodosParams) -> Result<ListTodosOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .list_todos(
            b,
            pb::ListTodosRequest {
                queue: p.queue,
                filter: todo_filter(p.filter) as i32,
                cursor: p.cursor.unwrap_or_default(),
                limit: p.limit.unwrap_or(0),
            },
        )
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(ListTodosOut {
        todos: r.todos.into_iter().map(convert::todo).collect(),
        next_cursor: (!r.next_cursor.is_empty()).then_some(r.next_cursor),
    })
}

pub async fn claim_todo(cx: &Call, p: TodoIdParams) -> Result<TodoResultOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .claim_todo(b, pb::ClaimTodoRequest { todo_id: p.todo_id })
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(TodoResultOut {
        todo: convert::todo(convert::required("todo", r.todo)?),
    })
}

pub async fn release_todo(cx: &Call, p: TodoIdParams) -> Result<TodoResultOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .release_todo(b, pb::ReleaseTodoRequest { todo_id: p.todo_id })
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(TodoResultOut {
        todo: convert::todo(convert::required("todo", r.todo)?),
    })
}

pub async fn complete_todo(cx: &Call, p: TodoIdParams) -> Result<TodoResultOut, CallError> {
    let (c, b) = (&cx.control, &cx.bearer);
    let r = c
        .complete_todo(b, pb::CompleteTodoRequest { todo_id: p.todo_id })
        .await
        .map_err(|s| cx.status(&s))?;
    Ok(TodoResultOut {
        todo: convert::todo(convert::required("todo", r.todo)?),
    })
}
