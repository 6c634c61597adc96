//! The typed error a call returns: control's reason as a stable `code`, a message that says
//! what was wrong, and `details` read from the status's typed details (never out of its text).
//! Every surface reads a refusal the same way; what each adds (the gateway's `next` hints and
//! its MCP tool result, the CLI's exit code) is the surface's own.

use std::fmt;

use serde_json::{Map, Value, json};
use switchboard_proto::reason::Reason;
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// The `ErrorInfo.domain` of every error control answers.
pub const CONTROL_DOMAIN: &str = "switchboard";

/// A call that did not work, as its caller sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct CallError {
    pub code: String,
    pub message: String,
    pub details: Map<String, Value>,
}

impl CallError {
    /// An error a surface itself answers, with a reason of the one vocabulary.
    pub fn new(reason: Reason, message: impl Into<String>) -> CallError {
        CallError {
            code: reason.as_str().to_string(),
            message: message.into(),
            details: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> CallError {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// Control answered something that cannot be read; `context` is logged, never sent.
    pub fn internal(context: impl fmt::Display) -> CallError {
        tracing::error!(error = %context, "unreadable answer from control");
        CallError::new(Reason::Internal, "internal error").with("next", "retry shortly")
    }

    /// A configuration that is not one (its JSON shape), reported as control reports the
    /// problems it finds: one configuration-wide `invalid_configuration` problem.
    pub fn configuration_shape(problem: String) -> CallError {
        CallError::new(
            Reason::InvalidConfiguration,
            format!("the configuration has 1 problem: {problem} (invalid_configuration)"),
        )
        .with(
            "problems",
            json!([{"code": "invalid_configuration", "message": problem, "rule_index": -1}]),
        )
    }

    /// For a command line, whose user gave the address: a `control_unavailable` names it (and
    /// carries it as `control`), so a script's log says which control did not answer. Only
    /// the CLIs call this; what an agent reads never names an internal address.
    pub fn at_control(mut self, address: &str) -> CallError {
        if self.code == Reason::ControlUnavailable.as_str() {
            self.message = format!("control at {address} did not answer; nothing was changed");
            self.details
                .insert("control".into(), Value::String(address.to_string()));
        }
        self
    }

    /// A control status as a typed error: the reason from its `ErrorInfo` (a status without
    /// one, the transport's own, is named by its gRPC code), the message without the reason's
    /// prefix, and the details as data.
    pub fn from_status(status: &Status) -> CallError {
        if did_not_answer(status) {
            return CallError::new(
                Reason::ControlUnavailable,
                "control did not answer; nothing was changed",
            );
        }
        let details = status.get_error_details();
        let info = details
            .error_info()
            .filter(|info| info.domain == CONTROL_DOMAIN);
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
                out.insert(key.clone(), scalar(value));
            }
        }
        // Lists and records (problems, faults, queues) arrive as our typed RefusalDetails.
        if let Some(refusal) = switchboard_proto::refusal::refusal_of(status) {
            match switchboard_proto::message_json::sparse_message_json(&refusal) {
                Ok(Value::Object(map)) => out.extend(map),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "unreadable refusal details from control"),
            }
        }
        if code == Reason::GrantNotAllowed.as_str() {
            // An empty allowance is an answer ("the scope may grant nothing"), not an absence.
            for key in ["outside", "allowed"] {
                out.entry(key).or_insert_with(|| json!([]));
            }
        }
        if let Some(delay) = details.retry_info().and_then(|r| r.retry_delay) {
            out.entry("retry_after_ms")
                .or_insert_with(|| json!(delay.as_millis() as u64));
        }
        if let Some(failure) = details.precondition_failure()
            && !failure.violations.is_empty()
        {
            // Why a plan is stale, as a word to branch on (`configuration_changed`).
            if code == Reason::PlanStale.as_str() {
                out.insert("cause".into(), json!(failure.violations[0].r#type));
            }
            let violations: Vec<Value> = failure
                .violations
                .iter()
                .map(|v| json!({"type": v.r#type, "subject": v.subject, "description": v.description}))
                .collect();
            out.insert("precondition_violations".into(), Value::Array(violations));
        }
        if code == Reason::InvalidConfiguration.as_str() {
            // Its problems arrived whole (`problems`), above.
        } else if let Some(bad) = details.bad_request()
            && !bad.field_violations.is_empty()
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
        CallError {
            code,
            message,
            details: out,
        }
    }
}

/// `code: message`, as the CLI prints it.
impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for CallError {}

/// Control did not answer: the call failed as unavailable with no `ErrorInfo` of control's
/// (the connection was refused or dropped). Nothing was changed.
pub fn did_not_answer(status: &Status) -> bool {
    status.code() == Code::Unavailable
        && status
            .get_error_details()
            .error_info()
            .is_none_or(|info| info.domain != CONTROL_DOMAIN)
}

/// Numbers and truths in ErrorInfo metadata (`current_version`, `retry_after_ms`,
/// `proven`) stay numbers and booleans.
fn scalar(value: &str) -> Value {
    match value {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => value
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(value.to_string())),
    }
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

/// A failure as control answers it (docs/errors.md): `<reason>: <message>` and an
/// `ErrorInfo` in [`CONTROL_DOMAIN`] with the reason and its metadata. What the surfaces'
/// tests feed [`CallError::from_status`], so they read exactly control's shape.
pub fn control_status(
    code: Code,
    reason: &str,
    message: &str,
    metadata: &[(&str, &str)],
) -> Status {
    let mut details = tonic_types::ErrorDetails::new();
    let metadata: std::collections::HashMap<String, String> = metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    details.set_error_info(reason, CONTROL_DOMAIN, metadata);
    <Status as tonic_types::StatusExt>::with_error_details(
        code,
        format!("{reason}: {message}"),
        details,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use tonic_types::ErrorDetails;

    use super::*;

    use super::control_status as status;

    #[test]
    fn the_reason_becomes_the_code_and_the_prefix_goes() {
        let e = CallError::from_status(&status(
            Code::NotFound,
            "not_found",
            "webhook not found",
            &[("resource", "webhook")],
        ));
        assert_eq!(e.code, "not_found");
        assert_eq!(e.message, "webhook not found");
        assert_eq!(e.details["resource"], "webhook");
        assert_eq!(e.to_string(), "not_found: webhook not found");
    }

    #[test]
    fn lists_arrive_typed_and_flat_values_as_metadata() {
        let s = switchboard_proto::refusal::with_refusal(
            status(
                Code::FailedPrecondition,
                "local_edits",
                "rules were edited",
                &[("pack", "drop-ci-noise"), ("proven", "false")],
            ),
            &switchboard_proto::control::v1::RefusalDetails {
                rules: vec!["drop-ci-noise--a".into()],
                ..Default::default()
            },
        );
        let e = CallError::from_status(&s);
        assert_eq!(e.code, "local_edits");
        assert_eq!(e.details["pack"], "drop-ci-noise");
        assert_eq!(e.details["proven"], false);
        assert_eq!(e.details["rules"][0], "drop-ci-noise--a");
        // Only what the refusal sets: no empty lists of other reasons.
        assert!(!e.details.contains_key("faults"), "{:?}", e.details);
    }

    #[test]
    fn a_stale_plan_names_its_cause() {
        let mut details = ErrorDetails::new();
        details.set_error_info("plan_stale", CONTROL_DOMAIN, HashMap::new());
        details.add_precondition_failure_violation(
            "configuration_changed",
            "plan",
            "the webhook's rules changed since it was made",
        );
        let s = Status::with_error_details(Code::FailedPrecondition, "plan_stale: stale", details);
        let e = CallError::from_status(&s);
        assert_eq!(e.details["cause"], "configuration_changed");
        assert_eq!(e.details["precondition_violations"][0]["subject"], "plan");
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
        let e = CallError::from_status(&s);
        assert_eq!(e.code, "rate_limited");
        assert_eq!(e.details["retry_after_ms"], 1500);
    }

    #[test]
    fn configuration_problems_are_listed_as_data() {
        let s = switchboard_proto::refusal::with_refusal(
            status(
                Code::InvalidArgument,
                "invalid_configuration",
                "the configuration has 1 problem: bad (parse_error)",
                &[],
            ),
            &switchboard_proto::control::v1::RefusalDetails {
                problems: vec![switchboard_proto::control::v1::ConfigurationProblem {
                    code: "parse_error".into(),
                    message: "bad".into(),
                    rule_index: Some(0),
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        let e = CallError::from_status(&s);
        assert_eq!(e.code, "invalid_configuration");
        // The reason's prefix goes; the problems come from the details, not the text.
        assert_eq!(
            e.message,
            "the configuration has 1 problem: bad (parse_error)"
        );
        assert_eq!(e.details["problems"][0]["code"], "parse_error");
        // Rule 0 is a rule, not "unset".
        assert_eq!(e.details["problems"][0]["rule_index"], 0);
    }

    #[test]
    fn transport_failures_say_control_did_not_answer() {
        let s = Status::unavailable("tcp connect error");
        assert!(did_not_answer(&s));
        let e = CallError::from_status(&s);
        assert_eq!(e.code, "control_unavailable");
        assert_eq!(e.message, "control did not answer; nothing was changed");
        assert!(e.details.is_empty());
        // Control's own `unavailable` (a router that did not answer) is control's answer.
        let routers = status(Code::Unavailable, "router_unavailable", "no router", &[]);
        assert!(!did_not_answer(&routers));
        assert_eq!(CallError::from_status(&routers).code, "router_unavailable");
    }

    #[test]
    fn internal_context_is_not_passed_on() {
        let e = CallError::from_status(&Status::internal("SELECT * FROM x"));
        assert_eq!(e.code, "internal");
        assert_eq!(e.message, "internal error");
    }
}
