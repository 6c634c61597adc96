//! Errors an agent can act on. A business error (the call was well formed and control, or
//! the gateway's own allowlist check, said no) comes back as a tool result with
//! `isError: true` and ONE text block `{"error": {"code", "message", "details"}}`, without
//! `structuredContent`: the code is stable (control's reason), the message says what was
//! wrong, and `details.next` names the next call to make. Protocol faults (malformed JSON-RPC,
//! an unknown tool or method) stay JSON-RPC errors; rmcp answers those itself.
//!
//! The error itself is the shared client's [`CallError`], read from control's status the same
//! way for every surface; what is the gateway's own is here: the `next` hints (they name MCP
//! tools), the errors about a tool's arguments and the endpoint's budget, and the tool result.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};
use switchboard_control_client::error::{CallError, did_not_answer};
use switchboard_proto::reason::Reason;
use tonic::Status;

/// The arguments did not fit the tool's input schema.
pub fn invalid_arguments(tool: &str, problem: impl std::fmt::Display) -> CallError {
    CallError::new(
        Reason::InvalidArgument,
        format!("the arguments do not fit {tool}'s input schema: {problem}"),
    )
    .with("tool", tool)
    .with(
        "next",
        format!("call {tool} again with arguments that match its inputSchema (tools/list)"),
    )
}

/// An agent's configuration that is not one (its JSON shape), reported as control reports
/// the problems it finds, with what to do about them.
pub fn configuration_shape(problem: String) -> CallError {
    CallError::configuration_shape(problem).with("next", FIX_CONFIGURATION)
}

/// The endpoint's request budget is spent: wait, then call `tool` again.
pub fn rate_limited(tool: &str, retry_after_ms: u64) -> CallError {
    CallError::new(
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
    CallError::from_status(status)
        .details
        .get("retry_after_ms")
        .and_then(Value::as_u64)
        .unwrap_or(1000)
}

/// A control status turned into what the agent can act on, for a call of `tool`: the shared
/// reading of the status, and the call to make next.
pub fn from_status(tool: &str, status: &Status) -> CallError {
    let mut error = CallError::from_status(status);
    if did_not_answer(status) {
        return error.with("next", format!("retry {tool} in a few seconds"));
    }
    if !error.details.contains_key("next")
        && let Some(next) = next_call(tool, &error)
    {
        error.details.insert("next".into(), Value::String(next));
    }
    error
}

/// The JSON the agent reads: `{"error": {"code", "message", "details"}}`.
pub fn to_json(error: &CallError) -> Value {
    json!({"error": {"code": error.code, "message": error.message, "details": error.details}})
}

/// A call's error as an MCP tool result, the gateway's own form of it.
pub trait IntoToolResult {
    /// `isError: true`, one JSON text block, no `structuredContent`.
    fn into_result(self) -> CallToolResult;
}

impl IntoToolResult for CallError {
    fn into_result(self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(to_json(&self).to_string())])
    }
}

/// What to do about an `invalid_configuration`, whoever found the problems.
const FIX_CONFIGURATION: &str =
    "fix every listed problem and call again; check a candidate first with test_webhook_rules";

/// The call an agent should make next, for the codes where the gateway knows it.
fn next_call(tool: &str, error: &CallError) -> Option<String> {
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
                "a plan_token is valid only for the owner scope and webhook that planned it: check the webhook id with list_webhooks, or plan again with install_rule_pack, remove_rule_pack or plan_webhook_rules"
                    .into()
            }
            "plan_webhook_rules" => "check the webhook id with list_webhooks".into(),
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
        Reason::PlanStale if tool == "promote_rule_trial" => {
            "the saved configuration changed since the trial started, so its evidence no longer describes the live rules: plan again, start a new trial with start_rule_trial, and promote that"
                .into()
        }
        Reason::PlanStale => {
            "plan again with the call that made the plan (install_rule_pack, remove_rule_pack or plan_webhook_rules), check the new plan, then call confirm_rule_pack_plan with its plan_token"
                .into()
        }
        Reason::Unproven => {
            "if the plan is acceptable without proof, call confirm_rule_pack_plan again with the same plan_token and allow_unproven: true"
                .into()
        }
        Reason::InsufficientTrial => {
            "the trial saw too few deliveries or never saw a transition its replay predicted (see the plan's trial.insufficient): let a new trial run longer, or, if the evidence is acceptable, call confirm_rule_pack_plan again with the same plan_token and allow_insufficient_trial: true"
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

    use switchboard_control_client::error::CONTROL_DOMAIN;
    use tonic::Code;
    use tonic_types::{ErrorDetails, StatusExt};

    use super::*;

    use switchboard_control_client::error::control_status as status;

    fn next(e: &CallError) -> &str {
        e.details["next"].as_str().unwrap_or_default()
    }

    #[test]
    fn a_not_found_names_the_listing_to_check() {
        let e = from_status(
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
        assert!(next(&e).contains("list_webhooks"), "{e:?}");
    }

    #[test]
    fn local_edits_point_at_overwriting_them() {
        let e = from_status(
            "install_rule_pack",
            &status(
                Code::FailedPrecondition,
                "local_edits",
                "rules were edited",
                &[("pack", "drop-ci-noise")],
            ),
        );
        assert_eq!(e.details["pack"], "drop-ci-noise");
        assert!(next(&e).contains("overwrite_local_edits"), "{e:?}");
    }

    #[test]
    fn rate_limits_say_how_long_to_wait() {
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
        let e = from_status("list_todos", &s);
        assert_eq!(e.details["retry_after_ms"], 1500);
        assert_eq!(next(&e), "wait 1500 ms, then call list_todos again");
        assert_eq!(retry_after_ms(&s), 1500);
        assert_eq!(retry_after_ms(&Status::resource_exhausted("busy")), 1000);
    }

    #[test]
    fn transport_failures_say_control_did_not_answer() {
        let e = from_status("list_webhooks", &Status::unavailable("tcp connect error"));
        assert_eq!(e.code, "control_unavailable");
        assert!(!e.message.contains("tcp"));
        assert_eq!(next(&e), "retry list_webhooks in a few seconds");
        assert_eq!(e.details.len(), 1);
    }

    #[test]
    fn a_configuration_shape_says_how_to_fix_it() {
        let e = configuration_shape("not an object".into());
        assert_eq!(e.code, "invalid_configuration");
        assert_eq!(e.details["problems"][0]["rule_index"], -1);
        assert_eq!(next(&e), FIX_CONFIGURATION);
    }

    #[test]
    fn the_result_is_one_json_block_without_structured_content() {
        let r = CallError::new(Reason::PlanStale, "stale").into_result();
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
