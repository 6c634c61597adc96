//! Errors an agent can act on. A business error (the call was well formed and control, or
//! the gateway's own allowlist check, said no) comes back as a tool result with
//! `isError: true` and ONE text block `{"error": {"code", "message", "details"}}`, without
//! `structuredContent`: the code is stable (control's reason), the message says what was
//! wrong, and `details.next` names the next call to make. Protocol faults (malformed JSON-RPC,
//! an unknown tool or method) stay JSON-RPC errors; rmcp answers those itself.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value, json};
use switchboard_proto::reason::Reason;
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// The `ErrorInfo.domain` of every error control answers.
pub const CONTROL_DOMAIN: &str = "switchboard";

/// A tool call that did not work, as the agent sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolError {
    pub code: String,
    pub message: String,
    pub details: Map<String, Value>,
}

impl ToolError {
    /// An error the gateway itself answers, with a reason of the one vocabulary.
    pub fn new(reason: Reason, message: impl Into<String>) -> ToolError {
        ToolError {
            code: reason.as_str().to_string(),
            message: message.into(),
            details: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> ToolError {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// The arguments did not fit the tool's input schema.
    pub fn invalid_arguments(tool: &str, problem: impl std::fmt::Display) -> ToolError {
        ToolError::new(
            Reason::InvalidArgument,
            format!("the arguments do not fit {tool}'s input schema: {problem}"),
        )
        .with("tool", tool)
        .with(
            "next",
            format!("call {tool} again with arguments that match its inputSchema (tools/list)"),
        )
    }

    /// Control answered something the gateway cannot read; `context` is logged, never sent.
    pub fn internal(context: impl std::fmt::Display) -> ToolError {
        tracing::error!(error = %context, "unreadable answer from control");
        ToolError::new(Reason::Internal, "internal error").with("next", "retry shortly")
    }

    /// The JSON the agent reads: `{"error": {"code", "message", "details"}}`.
    pub fn to_json(&self) -> Value {
        json!({"error": {"code": self.code, "message": self.message, "details": self.details}})
    }

    /// The tool result: `isError: true`, one JSON text block, no `structuredContent`.
    pub fn into_result(self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(self.to_json().to_string())])
    }

    /// An agent's configuration that is not one (its JSON shape), reported as control reports
    /// the problems it finds: one configuration-wide `invalid_configuration` problem.
    pub fn configuration_shape(problem: String) -> ToolError {
        ToolError::new(
            Reason::InvalidConfiguration,
            format!("the configuration has 1 problem: {problem} (invalid_configuration)"),
        )
        .with(
            "problems",
            json!([{"code": "invalid_configuration", "message": problem, "rule_index": -1}]),
        )
        .with("next", FIX_CONFIGURATION)
    }

    /// The endpoint's request budget is spent: wait, then call `tool` again.
    pub fn rate_limited(tool: &str, retry_after_ms: u64) -> ToolError {
        ToolError::new(
            Reason::RateLimited,
            format!("this endpoint's request budget is spent; retry after {retry_after_ms} ms"),
        )
        .with("retry_after_ms", retry_after_ms)
        .with(
            "next",
            format!("wait {retry_after_ms} ms, then call {tool} again"),
        )
    }

    /// How long a `rate_limited` status from control asks the caller to wait (1 s if unsaid).
    pub fn retry_after_ms(status: &Status) -> u64 {
        ToolError::from_status("tools", status)
            .details
            .get("retry_after_ms")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(1000)
    }

    /// A control status turned into what the agent can act on, for a call of `tool`.
    pub fn from_status(tool: &str, status: &Status) -> ToolError {
        let details = status.get_error_details();
        let info = details
            .error_info()
            .filter(|info| info.domain == CONTROL_DOMAIN);
        // The reason is read from the status details (`ErrorInfo`), never out of the text;
        // a status without one (the transport's own) is named by its code.
        let code = info
            .map(|info| info.reason.clone())
            .unwrap_or_else(|| fallback_code(status.code()).as_str().to_string());
        let mut message = status
            .message()
            .strip_prefix(&format!("{code}: "))
            .unwrap_or(status.message())
            .to_string();
        let mut out = Map::new();
        if let Some(info) = info {
            for (key, value) in &info.metadata {
                if key == "details" {
                    // Rule-pack errors carry their structured details as JSON.
                    match serde_json::from_str::<Value>(value) {
                        Ok(Value::Object(map)) => out.extend(map),
                        Ok(Value::Null) => {}
                        Ok(other) => {
                            out.insert(key.clone(), other);
                        }
                        Err(_) => {
                            out.insert(key.clone(), Value::String(value.clone()));
                        }
                    }
                } else {
                    out.insert(key.clone(), scalar(value));
                }
            }
        }
        if let Some(delay) = details.retry_info().and_then(|r| r.retry_delay) {
            out.entry("retry_after_ms")
                .or_insert_with(|| json!(delay.as_millis() as u64));
        }
        if code == Reason::InvalidConfiguration.as_str() {
            // Its problems arrived as data (`details.problems`), above.
        } else if let Some(bad) = details.bad_request()
            && !bad.field_violations.is_empty()
            && !out.contains_key("field")
        {
            let violations: Vec<Value> = bad
                .field_violations
                .iter()
                .map(|v| json!({"field": v.field, "description": v.description}))
                .collect();
            out.insert("field_violations".into(), Value::Array(violations));
        }
        if code == Reason::Internal.as_str() {
            // Control never sends internal context; say no more than it did.
            message = "internal error".into();
        }
        if status.code() == Code::Unavailable && info.is_none() {
            return ToolError::new(
                Reason::ControlUnavailable,
                "control did not answer; nothing was changed",
            )
            .with("next", format!("retry {tool} in a few seconds"));
        }
        let mut error = ToolError {
            code,
            message,
            details: out,
        };
        if !error.details.contains_key("next")
            && let Some(next) = next_call(tool, &error)
        {
            error.details.insert("next".into(), Value::String(next));
        }
        error
    }
}

/// Numbers in ErrorInfo metadata (`current_version`, `retry_after_ms`) stay numbers.
fn scalar(value: &str) -> Value {
    value
        .parse::<i64>()
        .map(Value::from)
        .unwrap_or_else(|_| Value::String(value.to_string()))
}

/// The reason of a status that carries none (the transport's own, or a peer's).
fn fallback_code(code: Code) -> Reason {
    match code {
        Code::NotFound => Reason::NotFound,
        Code::InvalidArgument | Code::OutOfRange => Reason::InvalidArgument,
        Code::PermissionDenied => Reason::PermissionDenied,
        Code::Unauthenticated => Reason::Unauthenticated,
        Code::ResourceExhausted => Reason::RateLimited,
        Code::FailedPrecondition | Code::Aborted | Code::AlreadyExists => Reason::Conflict,
        Code::Unimplemented => Reason::Unimplemented,
        Code::DeadlineExceeded => Reason::DeadlineExceeded,
        Code::Unavailable => Reason::ControlUnavailable,
        Code::Cancelled => Reason::Cancelled,
        _ => Reason::Internal,
    }
}

/// What to do about an `invalid_configuration`, whoever found the problems.
const FIX_CONFIGURATION: &str =
    "fix every listed problem and call again; check a candidate first with test_webhook_rules";

/// The call an agent should make next, for the codes where the gateway knows it.
fn next_call(tool: &str, error: &ToolError) -> Option<String> {
    let detail = |key: &str| error.details.get(key).cloned().unwrap_or(Value::Null);
    Some(match Reason::parse(&error.code)? {
        Reason::NotFound => match tool {
            "get_webhook_event" | "explain_webhook_event" => {
                "check the event id with list_webhook_events (and the webhook id with list_webhooks)"
                    .into()
            }
            "claim_todo" | "release_todo" | "complete_todo" => {
                "check the todo id with list_todos".into()
            }
            "install_rule_pack" | "remove_rule_pack" | "list_rule_packs" => {
                "check the webhook id with list_webhooks and the pack name with list_rule_packs"
                    .into()
            }
            "confirm_rule_pack_plan" | "get_rule_pack_plan" => {
                "a plan_token is valid only for the owner scope and webhook that planned it: check the webhook id with list_webhooks, or plan again with install_rule_pack or remove_rule_pack"
                    .into()
            }
            "update_webhook_rule" | "delete_webhook_rule" => {
                "check the webhook id with list_webhooks and the rule id with list_webhook_rules"
                    .into()
            }
            _ => "check the id with list_webhooks".into(),
        },
        Reason::VersionMismatch => format!(
            "call list_webhook_rules to read the saved configuration (version {}), apply your change to it, and call {tool} again with that expected_version",
            detail("current_version")
        ),
        Reason::PlanStale if tool == "confirm_webhook_redrive" => {
            "plan again with redrive_webhook_events, check the new plan, then call confirm_webhook_redrive with its plan_token"
                .into()
        }
        Reason::PlanStale => {
            "plan again with the call that made the plan (install_rule_pack or remove_rule_pack), check the new plan, then call confirm_rule_pack_plan with its plan_token"
                .into()
        }
        Reason::Unproven => {
            "if the plan is acceptable without proof, call confirm_rule_pack_plan again with the same plan_token and allow_unproven: true"
                .into()
        }
        Reason::LocalEdits => format!(
            "inspect the edited rules with list_webhook_rules; to replace the edits, plan again with {tool} and overwrite_local_edits: true"
        ),
        Reason::InvalidConfiguration => FIX_CONFIGURATION.into(),
        Reason::InvalidParams => {
            "fix the named param (see the pack's params_schema in list_rule_packs) and plan again"
                .into()
        }
        Reason::PackRuleFaults => {
            "inspect the named events with get_webhook_event; the pack cannot be installed on this webhook as it is"
                .into()
        }
        Reason::RequiresPack => {
            "install the required pack first (install_rule_pack), then plan this one again".into()
        }
        Reason::RequiredByPack => {
            "remove the packs named in details.required_by first (remove_rule_pack), then plan this removal again"
                .into()
        }
        Reason::TooManyRules => {
            "remove rules (delete_webhook_rule) or packs (remove_rule_pack) to make room, or adopt hand-written rules with replaces"
                .into()
        }
        Reason::DefaultConflict => {
            "another installed pack already sets default_action: remove it first with remove_rule_pack"
                .into()
        }
        Reason::GrantNotAllowed => {
            "grant only queues in details.allowed (an operator sets them per owner scope with `switchboard admin scope allow`), or ask an operator to allow the queues in details.outside"
                .into()
        }
        Reason::UnavailableVersion => "pick an available version from list_rule_packs".into(),
        Reason::Busy => format!(
            "another replay is running on this webhook; call {tool} again in a few seconds"
        ),
        Reason::RateLimited => match error.details.get("retry_after_ms") {
            Some(ms) => format!("wait {ms} ms, then call {tool} again"),
            None => format!("wait a little, then call {tool} again"),
        },
        Reason::RouterUnavailable | Reason::ControlUnavailable | Reason::Internal => {
            format!("nothing was changed; retry {tool} shortly")
        }
        Reason::PermissionDenied => {
            "this endpoint may not make this call: use a tool from tools/list, or ask an operator for an endpoint whose allowlist and role permit it"
                .into()
        }
        Reason::Unauthenticated => {
            "the endpoint credential is unknown or revoked: ask an operator for a new endpoint"
                .into()
        }
        Reason::Conflict => match tool {
            "claim_todo" | "release_todo" | "complete_todo" => {
                "another endpoint holds this todo, or it is completed: pick another with list_todos filter unclaimed"
                    .into()
            }
            _ => "read the current state again and retry".into(),
        },
        Reason::ApprovalRequired if tool == "delete_webhook" => {
            "this webhook is under a person's oversight (confirm_policy: person): an agent cannot delete it; ask your user, and an editor of its scope can switch the policy on the console's webhook page"
                .into()
        }
        Reason::ApprovalRequired => {
            "this webhook takes configuration changes only from a person: propose the change as a plan (install_rule_pack or remove_rule_pack, then confirm_rule_pack_plan, which puts it before a person) and tell your user it awaits their approval in the console"
                .into()
        }
        Reason::InvalidArgument => format!("fix the named argument and call {tool} again"),
        Reason::Unimplemented => "this instance does not serve that yet".into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use tonic_types::ErrorDetails;

    use super::*;

    fn status(code: Code, reason: &str, message: &str, metadata: &[(&str, &str)]) -> Status {
        let mut details = ErrorDetails::new();
        let metadata: HashMap<String, String> = metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        details.set_error_info(reason, CONTROL_DOMAIN, metadata);
        Status::with_error_details(code, format!("{reason}: {message}"), details)
    }

    #[test]
    fn the_reason_becomes_the_code_and_the_prefix_goes() {
        let e = ToolError::from_status(
            "get_webhook",
            &status(
                Code::NotFound,
                "not_found",
                "webhook not found",
                &[("resource", "webhook")],
            ),
        );
        assert_eq!(e.code, "not_found");
        assert_eq!(e.message, "webhook not found");
        assert_eq!(e.details["resource"], "webhook");
        assert!(
            e.details["next"]
                .as_str()
                .unwrap()
                .contains("list_webhooks")
        );
    }

    #[test]
    fn rule_pack_details_are_json() {
        let e = ToolError::from_status(
            "install_rule_pack",
            &status(
                Code::FailedPrecondition,
                "local_edits",
                "rules were edited",
                &[(
                    "details",
                    r#"{"pack":"drop-ci-noise","rules":["drop-ci-noise--a"]}"#,
                )],
            ),
        );
        assert_eq!(e.code, "local_edits");
        assert_eq!(e.details["pack"], "drop-ci-noise");
        assert_eq!(e.details["rules"][0], "drop-ci-noise--a");
        assert!(
            e.details["next"]
                .as_str()
                .unwrap()
                .contains("overwrite_local_edits")
        );
    }

    #[test]
    fn rate_limits_carry_the_retry_hint() {
        let mut details = ErrorDetails::with_retry_info(Some(Duration::from_millis(1500)));
        details.set_error_info(
            "rate_limited",
            CONTROL_DOMAIN,
            HashMap::from([("retry_after_ms".to_string(), "1500".to_string())]),
        );
        let s = Status::with_error_details(
            Code::ResourceExhausted,
            "rate_limited: rate limit reached, retry after 1500 ms",
            details,
        );
        let e = ToolError::from_status("list_todos", &s);
        assert_eq!(e.code, "rate_limited");
        assert_eq!(e.details["retry_after_ms"], 1500);
        assert_eq!(
            e.details["next"],
            "wait 1500 ms, then call list_todos again"
        );
    }

    #[test]
    fn configuration_problems_are_listed_as_data() {
        let s = status(
            Code::InvalidArgument,
            "invalid_configuration",
            "the configuration has 1 problem: bad (parse_error)",
            &[(
                "details",
                r#"{"problems":[{"code":"parse_error","message":"bad","rule_index":0}]}"#,
            )],
        );
        let e = ToolError::from_status("set_webhook_rules", &s);
        assert_eq!(e.code, "invalid_configuration");
        // The reason's prefix goes; the problems come from the details, not the text.
        assert_eq!(
            e.message,
            "the configuration has 1 problem: bad (parse_error)"
        );
        assert_eq!(e.details["problems"][0]["code"], "parse_error");
    }

    #[test]
    fn transport_failures_say_control_did_not_answer() {
        let e = ToolError::from_status("list_webhooks", &Status::unavailable("tcp connect error"));
        assert_eq!(e.code, "control_unavailable");
        assert!(!e.message.contains("tcp"));
    }

    #[test]
    fn internal_context_is_not_passed_on() {
        let e = ToolError::from_status("list_webhooks", &Status::internal("SELECT * FROM x"));
        assert_eq!(e.code, "internal");
        assert_eq!(e.message, "internal error");
    }

    #[test]
    fn the_result_is_one_json_block_without_structured_content() {
        let r = ToolError::new(Reason::PlanStale, "stale").into_result();
        assert_eq!(r.is_error, Some(true));
        assert!(r.structured_content.is_none());
        assert_eq!(r.content.len(), 1);
        let text = r.content[0].as_text().map(|t| t.text.clone()).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], "plan_stale");
        assert_eq!(v["error"]["message"], "stale");
        assert!(v["error"]["details"].is_object());
    }
}
