//! The MCP server: `tools/list` filtered by the caller's allowlist, and `tools/call` as one
//! control RPC with the caller's own bearer. The caller comes from the request (the gate put
//! it in the HTTP request's extensions), never from a session, so any gateway instance can
//! answer any request and one credential's identity is never used for another's request.

use std::future::Future;
use std::sync::Arc;
use switchboard_proto::reason::Reason;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, Implementation,
    InitializeResult, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::rule_pack_event::Event;
use switchboard_telemetry::propagation;
use tonic::{Status, Streaming};
use tracing::Instrument;

use crate::auth::{Caller, CallerState};
use crate::control::ControlClient;
use crate::errors::ToolError;
use crate::tools::params::*;
use crate::tools::{self, ToolSpec, convert};

/// What an operator decides about a gateway's tools.
#[derive(Clone, Debug)]
pub struct ToolPolicy {
    /// Offer (and serve) only read-only tools.
    pub read_only: bool,
    /// The largest `arguments` object a tool call may carry, serialized.
    pub max_argument_bytes: usize,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        ToolPolicy {
            read_only: false,
            max_argument_bytes: 1024 * 1024,
        }
    }
}

/// The gateway's MCP handler. Cheap to clone: one per request in stateless serving.
#[derive(Clone)]
pub struct Gateway {
    control: ControlClient,
    policy: Arc<ToolPolicy>,
    /// For in-process transports without HTTP (tests, embedding): the one caller of the
    /// connection. Never consulted for a request that came over HTTP.
    fixed: Option<CallerState>,
}

const INSTRUCTIONS: &str = "Switchboard routes webhook deliveries (from forges and other systems) to queues with ordered jq rules; each queue decision becomes a todo. \
These tools act for one endpoint: one human, in one owner scope, limited to its allowlist. \
Start with list_webhooks, then list_webhook_rules or list_rule_packs. Dry-run rule changes with test_webhook_rules before saving them. \
Rule packs install in two calls: install_rule_pack without confirm saves nothing and returns a plan with a plan_token; calling it again with confirm: <plan_token> applies exactly that plan. \
Errors come back as one JSON text block {\"error\": {\"code\", \"message\", \"details\"}} whose details.next names the next call to make.";

impl Gateway {
    /// A handler that reads each request's caller from the HTTP request (the gate's work).
    pub fn new(control: ControlClient, policy: ToolPolicy) -> Gateway {
        Gateway {
            control,
            policy: Arc::new(policy),
            fixed: None,
        }
    }

    /// A handler bound to one caller, for transports without HTTP requests (in-process
    /// tests, embedding): every request acts as `caller`.
    pub fn for_caller(control: ControlClient, policy: ToolPolicy, caller: Caller) -> Gateway {
        Gateway {
            control,
            policy: Arc::new(policy),
            fixed: Some(CallerState::Known(Arc::new(caller))),
        }
    }

    fn caller(&self, context: &RequestContext<RoleServer>) -> Option<CallerState> {
        match context.extensions.get::<http::request::Parts>() {
            // Over HTTP only the gate's answer counts: no fallback to a fixed caller.
            Some(parts) => parts.extensions.get::<CallerState>().cloned(),
            None => self.fixed.clone(),
        }
    }

    /// The tools this caller is offered: its allowlist, read-only ones on a read-only
    /// gateway, in name order.
    pub fn tools_for(&self, caller: &Caller) -> Vec<Tool> {
        tools::CATALOG
            .iter()
            .filter(|spec| caller.allows(spec.name))
            .filter(|spec| !self.policy.read_only || spec.read_only)
            .map(ToolSpec::tool)
            .collect()
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let name = request.name.as_ref();
        let Some(spec) = tools::find(name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "tool not found: {name}; tools/list shows the tools this endpoint may call"
                ),
                Some(json!({"tool": name})),
            ));
        };
        let caller = match self.caller(&context) {
            Some(CallerState::Known(caller)) => caller,
            Some(CallerState::RateLimited { retry_after_ms }) => {
                return Ok(ToolError::rate_limited(name, retry_after_ms).into_result());
            }
            None => return Err(no_caller()),
        };
        if !caller.allows(spec.name) {
            return Ok(ToolError::new(
                Reason::PermissionDenied,
                format!("{name} is not on this endpoint's allowlist"),
            )
            .with("allowed", caller.verbs.clone())
            .with(
                "next",
                "call one of the allowed tools; an operator can vend an endpoint whose allowlist has this verb",
            )
            .into_result());
        }
        if self.policy.read_only && !spec.read_only {
            return Ok(ToolError::new(
                Reason::PermissionDenied,
                format!("this gateway serves read-only tools only, and {name} changes state"),
            )
            .with(
                "next",
                "use a read-only tool, or a gateway that is not read-only",
            )
            .into_result());
        }
        let arguments = request.arguments.unwrap_or_default();
        let size = serde_json::to_vec(&arguments).map_or(usize::MAX, |b| b.len());
        if size > self.policy.max_argument_bytes {
            return Ok(ToolError::new(
                Reason::PayloadTooLarge,
                format!(
                    "the arguments are {size} bytes; at most {} are accepted",
                    self.policy.max_argument_bytes
                ),
            )
            .with("size_bytes", size as u64)
            .with("limit_bytes", self.policy.max_argument_bytes as u64)
            .with("next", format!("call {name} with smaller arguments"))
            .into_result());
        }
        let ct = context.ct.clone();
        let work = self.dispatch(spec, arguments, &caller, &context);
        let outcome = tokio::select! {
            // A cancelled request (the client cancelled, or went away) drops the control
            // call, and with it any replay control was streaming.
            _ = ct.cancelled() => Err(ToolError::new(Reason::Cancelled, "the request was cancelled; nothing more was done")),
            outcome = work => outcome,
        };
        Ok(match outcome {
            Ok(value) => CallToolResult::structured(value),
            Err(error) => error.into_result(),
        })
    }

    async fn dispatch(
        &self,
        spec: &ToolSpec,
        arguments: JsonObject,
        caller: &Caller,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let name = spec.name;
        let c = &self.control;
        let b = &caller.bearer;
        let st = |s: Status| ToolError::from_status(name, &s);
        match name {
            "create_webhook" => {
                let p: CreateWebhookParams = parse(name, arguments)?;
                let r = c
                    .create_webhook(
                        b,
                        pb::CreateWebhookRequest {
                            source_type: convert::source_type(p.source_type) as i32,
                            grant: p.grant,
                            secret: p.secret,
                            reject_unverified: p.reject_unverified,
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(tools::output::CreateWebhookOut {
                    webhook: convert::webhook(convert::required("webhook", r.webhook)?)?,
                    secret: r.secret,
                })
            }
            "list_webhooks" => {
                let _: NoParams = parse(name, arguments)?;
                let r = c
                    .list_webhooks(b, pb::ListWebhooksRequest {})
                    .await
                    .map_err(st)?;
                to_value(tools::output::ListWebhooksOut {
                    webhooks: r
                        .webhooks
                        .into_iter()
                        .map(convert::webhook)
                        .collect::<Result<_, _>>()?,
                })
            }
            "get_webhook" => {
                let p: WebhookIdParams = parse(name, arguments)?;
                let r = c
                    .get_webhook(
                        b,
                        pb::GetWebhookRequest {
                            webhook_id: p.webhook_id,
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(tools::output::GetWebhookOut {
                    webhook: convert::webhook(convert::required("webhook", r.webhook)?)?,
                })
            }
            "delete_webhook" => {
                let p: WebhookIdParams = parse(name, arguments)?;
                let r = c
                    .delete_webhook(
                        b,
                        pb::DeleteWebhookRequest {
                            webhook_id: p.webhook_id,
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(tools::output::DeleteWebhookOut {
                    webhook_id: r.webhook_id,
                })
            }
            "rotate_webhook_secret" => {
                let p: RotateWebhookSecretParams = parse(name, arguments)?;
                let r = c
                    .rotate_webhook_secret(
                        b,
                        pb::RotateWebhookSecretRequest {
                            webhook_id: p.webhook_id,
                            secret: p.secret,
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(tools::output::RotateWebhookSecretOut {
                    webhook: convert::webhook(convert::required("webhook", r.webhook)?)?,
                    secret: r.secret,
                })
            }
            "list_webhook_events" => {
                let p: ListWebhookEventsParams = parse(name, arguments)?;
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
                    .map_err(st)?;
                to_value(tools::output::ListWebhookEventsOut {
                    events: r
                        .events
                        .into_iter()
                        .map(convert::event_summary)
                        .collect::<Result<_, _>>()?,
                    next_cursor: (!r.next_cursor.is_empty()).then_some(r.next_cursor),
                    retention: r.retention.map(convert::retention),
                })
            }
            "get_webhook_event" => {
                let p: GetWebhookEventParams = parse(name, arguments)?;
                let r = c
                    .get_webhook_event(
                        b,
                        pb::GetWebhookEventRequest {
                            event_id: p.event_id,
                            webhook_id: p.webhook_id.unwrap_or_default(),
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(convert::get_event(r)?)
            }
            "list_webhook_rules" => {
                let p: WebhookIdParams = parse(name, arguments)?;
                let r = c
                    .list_webhook_rules(
                        b,
                        pb::ListWebhookRulesRequest {
                            webhook_id: p.webhook_id,
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(convert::list_rules(r)?)
            }
            "set_webhook_rules" => {
                let p: SetWebhookRulesParams = parse(name, arguments)?;
                let configuration_json = object_text(name, "configuration", &p.configuration)?;
                let r = c
                    .set_webhook_rules(
                        b,
                        pb::SetWebhookRulesRequest {
                            webhook_id: p.webhook_id,
                            configuration_json,
                            expected_version: p.expected_version,
                            // The agent's own JSON, validated exactly as written.
                            configuration: None,
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(convert::save(r)?)
            }
            "update_webhook_rule" => {
                let p: UpdateWebhookRuleParams = parse(name, arguments)?;
                let rule_json = object_text(name, "rule", &p.rule)?;
                let r = c
                    .update_webhook_rule(
                        b,
                        pb::UpdateWebhookRuleRequest {
                            webhook_id: p.webhook_id,
                            rule_id: p.rule_id,
                            rule_json,
                            expected_version: p.expected_version,
                            patch: None,
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(convert::save(r)?)
            }
            "delete_webhook_rule" => {
                let p: DeleteWebhookRuleParams = parse(name, arguments)?;
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
                    .map_err(st)?;
                to_value(convert::save(r)?)
            }
            "test_webhook_rules" => {
                let p: TestWebhookRulesParams = parse(name, arguments)?;
                let configuration_json = match &p.configuration {
                    Some(c) => object_text(name, "configuration", c)?,
                    None => String::new(),
                };
                let payload = p
                    .payload
                    .map(|d| {
                        Ok::<_, ToolError>(pb::TestPayload {
                            payload_json: serde_json::to_string(&d.body)
                                .map_err(|e| ToolError::invalid_arguments(name, e))?,
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
                        since_ms: w.since_ms.unwrap_or(0),
                    }),
                    configuration_json,
                    configuration: None,
                };
                // A replay streams, so its progress reaches the agent; a dry run does not.
                let r = if request.replay.is_some() {
                    let stream = c.test_webhook_rules_stream(b, request).await.map_err(st)?;
                    follow(name, stream, context, |e| match e.event {
                        Some(pb::test_webhook_rules_event::Event::Progress(p)) => {
                            Some(Step::Progress(p))
                        }
                        Some(pb::test_webhook_rules_event::Event::Result(r)) => Some(Step::Done(r)),
                        None => None,
                    })
                    .await?
                } else {
                    c.test_webhook_rules(b, request).await.map_err(st)?
                };
                to_value(convert::test(r)?)
            }
            "list_webhook_history" => {
                let p: ListWebhookHistoryParams = parse(name, arguments)?;
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
                    .map_err(st)?;
                to_value(convert::history(r)?)
            }
            "list_rule_packs" => {
                let p: ListRulePacksParams = parse(name, arguments)?;
                let r = c
                    .list_rule_packs(
                        b,
                        pb::ListRulePacksRequest {
                            webhook_id: p.webhook_id.unwrap_or_default(),
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(convert::rule_packs(r)?)
            }
            "install_rule_pack" => {
                let p: InstallRulePackParams = parse(name, arguments)?;
                let params_json = p
                    .params
                    .as_ref()
                    .map(serde_json::to_string)
                    .transpose()
                    .map_err(|e| ToolError::invalid_arguments(name, e))?;
                let stream = c
                    .install_rule_pack(
                        b,
                        pb::InstallRulePackRequest {
                            webhook_id: p.webhook_id,
                            name: p.name,
                            version: p.version.unwrap_or_default(),
                            params_json,
                            replaces: p.replaces.unwrap_or_default(),
                            replay: p.replay.map(replay_window),
                            confirm: p.confirm.unwrap_or_default(),
                            allow_unproven: p.allow_unproven,
                            overwrite_local_edits: p.overwrite_local_edits,
                            keep_params: p.keep_params.unwrap_or_default(),
                        },
                    )
                    .await
                    .map_err(st)?;
                follow_plan(name, stream, context).await
            }
            "remove_rule_pack" => {
                let p: RemoveRulePackParams = parse(name, arguments)?;
                let stream = c
                    .remove_rule_pack(
                        b,
                        pb::RemoveRulePackRequest {
                            webhook_id: p.webhook_id,
                            name: p.name,
                            replay: p.replay.map(replay_window),
                            confirm: p.confirm.unwrap_or_default(),
                            allow_unproven: p.allow_unproven,
                            keep_params: p.keep_params.unwrap_or_default(),
                        },
                    )
                    .await
                    .map_err(st)?;
                follow_plan(name, stream, context).await
            }
            "list_todos" => {
                let p: ListTodosParams = parse(name, arguments)?;
                let r = c
                    .list_todos(
                        b,
                        pb::ListTodosRequest {
                            queue: p.queue,
                            filter: convert::todo_filter(p.filter) as i32,
                            cursor: p.cursor.unwrap_or_default(),
                            limit: p.limit.unwrap_or(0),
                        },
                    )
                    .await
                    .map_err(st)?;
                to_value(tools::output::ListTodosOut {
                    todos: r.todos.into_iter().map(convert::todo).collect(),
                    next_cursor: (!r.next_cursor.is_empty()).then_some(r.next_cursor),
                })
            }
            "claim_todo" => {
                let p: TodoIdParams = parse(name, arguments)?;
                let r = c
                    .claim_todo(b, pb::ClaimTodoRequest { todo_id: p.todo_id })
                    .await
                    .map_err(st)?;
                to_value(tools::output::TodoResultOut {
                    todo: convert::todo(convert::required("todo", r.todo)?),
                })
            }
            "complete_todo" => {
                let p: TodoIdParams = parse(name, arguments)?;
                let r = c
                    .complete_todo(b, pb::CompleteTodoRequest { todo_id: p.todo_id })
                    .await
                    .map_err(st)?;
                to_value(tools::output::TodoResultOut {
                    todo: convert::todo(convert::required("todo", r.todo)?),
                })
            }
            other => Err(ToolError::internal(format!("no dispatch for tool {other}"))),
        }
    }
}

fn no_caller() -> ErrorData {
    ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        "no authenticated caller for this request",
        None,
    )
}

fn replay_window(w: ReplayParams) -> pb::ReplayWindow {
    pb::ReplayWindow {
        limit: w.limit.unwrap_or(0),
        since_ms: w.since_ms.unwrap_or(0),
    }
}

/// The arguments as the tool's typed params, or an error naming what does not fit.
fn parse<P: DeserializeOwned>(tool: &str, arguments: JsonObject) -> Result<P, ToolError> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|e| ToolError::invalid_arguments(tool, e))
}

/// A JSON object argument as the JSON text control takes.
fn object_text(tool: &str, field: &str, value: &Value) -> Result<String, ToolError> {
    if !value.is_object() {
        return Err(
            ToolError::invalid_arguments(tool, format!("`{field}` must be a JSON object"))
                .with("field", field),
        );
    }
    serde_json::to_string(value).map_err(|e| ToolError::invalid_arguments(tool, e))
}

fn to_value<T: Serialize>(out: T) -> Result<Value, ToolError> {
    serde_json::to_value(out).map_err(ToolError::internal)
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
    tool: &str,
    mut stream: Streaming<M>,
    context: &RequestContext<RoleServer>,
    step: impl Fn(M) -> Option<Step<R>>,
) -> Result<R, ToolError> {
    let token = context.meta.get_progress_token();
    loop {
        let event = stream
            .message()
            .await
            .map_err(|s| ToolError::from_status(tool, &s))?;
        let Some(event) = event else {
            return Err(ToolError::internal(format!(
                "{tool}: control ended the stream without a result"
            )));
        };
        match step(event) {
            Some(Step::Progress(p)) => {
                if let Some(token) = &token {
                    let note = ProgressNotificationParam::new(token.clone(), p.replayed as f64)
                        .with_total(p.total as f64)
                        .with_message(format!("replayed {} of {} deliveries", p.replayed, p.total));
                    if let Err(e) = context.peer.notify_progress(note).await {
                        tracing::debug!(error = %e, "a progress notification was not delivered");
                    }
                }
            }
            Some(Step::Done(result)) => return Ok(result),
            None => {}
        }
    }
}

/// Follows a plan's stream: the typed plan or applied result is the tool's result, as the
/// same types control built it from serialize it. (The deprecated JSON text that follows it,
/// for older gateways, is not read.)
async fn follow_plan(
    tool: &str,
    stream: Streaming<pb::RulePackEvent>,
    context: &RequestContext<RoleServer>,
) -> Result<Value, ToolError> {
    let answer = follow(tool, stream, context, |e| match e.event {
        Some(Event::Progress(p)) => Some(Step::Progress(p)),
        Some(Event::Plan(plan)) => {
            Some(Step::Done(convert::PackAnswer::Plan(Box::new(plan.into()))))
        }
        Some(Event::Applied(applied)) => Some(Step::Done(convert::PackAnswer::Applied(Box::new(
            applied.into(),
        )))),
        #[allow(deprecated)]
        Some(Event::ResultJson(_)) | None => None,
    })
    .await?;
    to_value(answer)
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        let mut info = InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(INSTRUCTIONS);
        info.server_info =
            Implementation::new("switchboard-mcp-gateway", env!("CARGO_PKG_VERSION"))
                .with_title("Switchboard");
        info
    }

    fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListToolsResult, ErrorData>> + Send + '_ {
        let result = match self.caller(&context) {
            Some(CallerState::Known(caller)) => {
                Ok(ListToolsResult::with_all_items(self.tools_for(&caller))
                    // The list depends on who asks: no shared cache may serve it to another caller.
                    .with_cache_scope(CacheScope::Private)
                    .with_ttl_ms(0))
            }
            Some(CallerState::RateLimited { retry_after_ms }) => Err(ErrorData::new(
                ErrorCode(-32000),
                format!(
                    "rate_limited: this endpoint's request budget is spent; retry after {retry_after_ms} ms"
                ),
                Some(json!({"code": "rate_limited", "retry_after_ms": retry_after_ms})),
            )),
            None => Err(no_caller()),
        };
        std::future::ready(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&context);
        let name = request.name.to_string();
        let span = tool_call_span(&name, &context);
        let result = self.call(request, context).instrument(span).await;
        // A tool call whose WhoAmI was uncharged pays its unit with its verb; one refused
        // before reaching control (unknown tool, not allowed, bad arguments) pays it here.
        if let Some(CallerState::Known(caller)) = caller
            && caller.uncharged
            && caller.bearer.control_calls() <= 1
            && let Err(status) = self.control.who_am_i(&caller.bearer, true).await
            && status.code() == tonic::Code::ResourceExhausted
        {
            let retry_after_ms = ToolError::retry_after_ms(&status);
            return Ok(CallToolResponse::from(
                ToolError::rate_limited(&name, retry_after_ms).into_result(),
            ));
        }
        result.map(CallToolResponse::from)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::find(name).map(ToolSpec::tool)
    }
}

/// The span of one tool call. It continues the agent's trace: from `traceparent` in the
/// request's `_meta` when given, else from the HTTP request's `traceparent` header.
fn tool_call_span(name: &str, context: &RequestContext<RoleServer>) -> tracing::Span {
    let span = tracing::info_span!(
        "mcp tools/call",
        otel.name = format!("tools/call {name}"),
        mcp.tool = name,
        trace_id = tracing::field::Empty
    );
    let meta = &context.meta.0.0;
    if meta.contains_key("traceparent") {
        propagation::continue_from_meta(&span, meta);
    } else if let Some(parts) = context.extensions.get::<http::request::Parts>() {
        propagation::continue_from_headers(&span, &parts.headers);
    } else {
        propagation::record_trace_id(&span);
    }
    span
}
