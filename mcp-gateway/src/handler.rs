//! The MCP server: `tools/list` filtered by the caller's allowlist, and `tools/call` as one
//! control RPC with the caller's own bearer. The caller comes from the request (the gate put
//! it in the HTTP request's extensions), never from a session, so any gateway instance can
//! answer any request and one credential's identity is never used for another's request.

use std::future::Future;
use std::sync::Arc;
use switchboard_proto::reason::Reason;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use switchboard_control_client::{CallError, ControlClient};
use switchboard_telemetry::propagation;
use tracing::Instrument;

use crate::auth::{Caller, CallerState};
use crate::errors::{self, IntoToolResult};
use crate::tools::{self, ToolSpec};

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
Rule packs install in two calls: install_rule_pack (or remove_rule_pack) saves nothing and returns a plan with a plan_token; confirm_rule_pack_plan with that plan_token applies exactly that plan (on a webhook whose confirm_policy is person, a person accepts it in the console). \
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
            .filter(|spec| caller.allows(spec.name()))
            .filter(|spec| !self.policy.read_only || spec.verb.read_only())
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
                return Ok(errors::rate_limited(name, retry_after_ms).into_result());
            }
            None => return Err(no_caller()),
        };
        if !caller.allows(spec.name()) {
            return Ok(CallError::new(
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
        if self.policy.read_only && !spec.verb.read_only() {
            return Ok(CallError::new(
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
            return Ok(CallError::new(
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
        let call = tools::calls::Call {
            tool: spec.name(),
            control: self.control.clone(),
            bearer: caller.bearer.clone(),
            context,
        };
        let work = (spec.call)(call, arguments);
        let outcome = tokio::select! {
            // A cancelled request (the client cancelled, or went away) drops the control
            // call, and with it any replay control was streaming.
            _ = ct.cancelled() => Err(CallError::new(Reason::Cancelled, "the request was cancelled; nothing more was done")),
            outcome = work => outcome,
        };
        Ok(match outcome {
            Ok(value) => CallToolResult::structured(value),
            Err(error) => error.into_result(),
        })
    }
}

fn no_caller() -> ErrorData {
    ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        "no authenticated caller for this request",
        None,
    )
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
            let retry_after_ms = errors::retry_after_ms(&status);
            return Ok(CallToolResponse::from(
                errors::rate_limited(&name, retry_after_ms).into_result(),
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
