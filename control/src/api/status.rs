//! The one place where what went wrong becomes a `tonic::Status`.
//!
//! Every status message starts with a stable machine-readable reason and `": "`
//! (`not_found: webhook not found`), and the details carry the same reason as a
//! `google.rpc.ErrorInfo` (domain [`DOMAIN`]), plus `BadRequest` field violations for bad
//! arguments and `RetryInfo` for limits. Internal context (SQL, driver errors, router
//! addresses) is logged here and never sent.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use switchboard_proto::router::v1::Problem;
use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};

use crate::error::Error;
use crate::routing::RoutingError;

/// The `ErrorInfo.domain` of every error control answers.
pub const DOMAIN: &str = "switchboard";

/// The reasons a caller can branch on: one vocabulary for every surface (docs/errors.md).
pub use switchboard_proto::reason::Reason;

/// Everything an API call can fail with.
#[derive(Debug)]
pub enum ApiError {
    /// The storage layer and the domain rules.
    Control(Error),
    /// The router plane.
    Routing(RoutingError),
    /// No, or no valid, bearer credential.
    Unauthenticated(&'static str),
    /// The verb is off the allowlist, or the human lacks the role.
    PermissionDenied(String),
    /// A configuration failed validation: every problem, together.
    InvalidConfiguration(Vec<Problem>),
    /// Declared in the API for later, not served yet.
    Unimplemented(&'static str),
    /// A rule-pack failure (SPEC-0031 codes: plan_stale, pack_rule_faults, invalid_params, …).
    RulePack(crate::rule_packs::PackError),
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::Control(e)
    }
}

impl From<RoutingError> for ApiError {
    fn from(e: RoutingError) -> Self {
        ApiError::Routing(e)
    }
}

impl ApiError {
    /// A bad argument, naming the field.
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        ApiError::Control(Error::InvalidArgument {
            field,
            message: message.into(),
        })
    }

    /// Something inside control failed; `context` is logged, never sent.
    pub fn internal(context: impl Into<String>) -> Self {
        ApiError::Control(Error::Internal {
            context: context.into(),
        })
    }
}

/// A validation problem as callers see it in `invalid_configuration` errors.
#[derive(Serialize)]
struct ProblemJson<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    field: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    rule_id: &'a str,
    /// -1 for configuration-wide problems.
    rule_index: i32,
}

/// The problems as the JSON list put in the status message.
pub fn problems_json(problems: &[Problem]) -> String {
    let list: Vec<ProblemJson<'_>> = problems
        .iter()
        .map(|p| ProblemJson {
            code: &p.code,
            message: &p.message,
            field: &p.field,
            rule_id: &p.rule_id,
            rule_index: p.rule_index,
        })
        .collect();
    serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
}

/// The status of `reason`: its code from the one table (`switchboard_proto::reason`), the
/// reason as the message's prefix and in `ErrorInfo`.
fn with_reason(
    reason: Reason,
    message: &str,
    metadata: HashMap<String, String>,
    mut details: ErrorDetails,
) -> Status {
    details.set_error_info(reason.as_str(), DOMAIN, metadata);
    Status::with_error_details(reason.grpc_code(), format!("{reason}: {message}"), details)
}

/// Rule-pack errors keep their SPEC-0031 code as the reason; the structured details travel
/// as JSON in the ErrorInfo metadata under `details`.
fn rule_pack_status(e: crate::rule_packs::PackError) -> Status {
    let mut metadata = HashMap::new();
    if !e.details.is_null() {
        metadata.insert("details".to_string(), e.details.to_string());
    }
    let mut details = match e
        .details
        .get("retry_after_ms")
        .and_then(serde_json::Value::as_u64)
    {
        Some(ms) => {
            metadata.insert("retry_after_ms".to_string(), ms.to_string());
            ErrorDetails::with_retry_info(Some(Duration::from_millis(ms)))
        }
        None => ErrorDetails::new(),
    };
    for (field, description) in field_violations(e.reason, &e.details, &e.message) {
        details.add_bad_request_violation(field, description);
    }
    with_reason(e.reason, &e.message, metadata, details)
}

/// The `BadRequest` field violations of a rule-pack refusal of an argument (issue 49): a
/// param as `params.<name>` (each failed param check, or the param whose type is wrong), any
/// other argument by its field (`replay.limit`), so a client learns which field from typed
/// details rather than from JSON inside `ErrorInfo`.
fn field_violations(
    reason: Reason,
    details: &serde_json::Value,
    message: &str,
) -> Vec<(String, String)> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or(message).to_string();
    match reason {
        Reason::InvalidParams => {
            let one = |d: &serde_json::Value| {
                let field = match d.get("param").and_then(serde_json::Value::as_str) {
                    Some(param) => format!("params.{param}"),
                    None => "params".to_string(),
                };
                (
                    field,
                    text(d.get("message").unwrap_or(&serde_json::Value::Null)),
                )
            };
            match details
                .get("failures")
                .and_then(serde_json::Value::as_array)
            {
                Some(failures) if !failures.is_empty() => failures.iter().map(one).collect(),
                _ => vec![one(details)],
            }
        }
        Reason::InvalidArgument => {
            let field = details
                .get("field")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("request");
            vec![(
                field.to_string(),
                text(details.get("message").unwrap_or(&serde_json::Value::Null)),
            )]
        }
        _ => Vec::new(),
    }
}

fn retry_after(delay: Duration) -> (HashMap<String, String>, ErrorDetails) {
    let metadata = HashMap::from([("retry_after_ms".to_string(), delay.as_millis().to_string())]);
    (metadata, ErrorDetails::with_retry_info(Some(delay)))
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        match e {
            ApiError::Control(e) => control_status(e),
            ApiError::Routing(RoutingError::Unavailable(context)) => {
                tracing::warn!(error = %context, "no router answered an api call");
                let (metadata, details) = retry_after(Duration::from_secs(1));
                with_reason(
                    Reason::RouterUnavailable,
                    "no router answered; nothing was changed, try again shortly",
                    metadata,
                    details,
                )
            }
            ApiError::Routing(RoutingError::Refused(context)) => {
                tracing::error!(error = %context, "a router refused an api request");
                with_reason(
                    Reason::Internal,
                    "internal error",
                    HashMap::new(),
                    ErrorDetails::new(),
                )
            }
            ApiError::Unauthenticated(message) => with_reason(
                Reason::Unauthenticated,
                message,
                HashMap::new(),
                ErrorDetails::new(),
            ),
            ApiError::PermissionDenied(message) => with_reason(
                Reason::PermissionDenied,
                &message,
                HashMap::new(),
                ErrorDetails::new(),
            ),
            ApiError::InvalidConfiguration(problems) => {
                let mut details = ErrorDetails::new();
                for p in &problems {
                    let field = if p.field.is_empty() {
                        "configuration"
                    } else {
                        p.field.as_str()
                    };
                    details.add_bad_request_violation(field, format!("{}: {}", p.code, p.message));
                }
                // The problems travel as data (`details.problems`, as rule-pack errors carry
                // theirs), never to be parsed back out of the message.
                let metadata = HashMap::from([(
                    "details".to_string(),
                    format!("{{\"problems\":{}}}", problems_json(&problems)),
                )]);
                let message = format!(
                    "the configuration has {} problem{}: {}",
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" },
                    problems
                        .iter()
                        .map(|p| format!("{} ({})", p.message, p.code))
                        .collect::<Vec<_>>()
                        .join("; ")
                );
                with_reason(Reason::InvalidConfiguration, &message, metadata, details)
            }
            ApiError::RulePack(e) => rule_pack_status(e),
            ApiError::Unimplemented(message) => with_reason(
                Reason::Unimplemented,
                message,
                HashMap::new(),
                ErrorDetails::new(),
            ),
        }
    }
}

fn control_status(e: Error) -> Status {
    let message = e.to_string();
    match e {
        Error::NotFound { resource } => with_reason(
            Reason::NotFound,
            &message,
            HashMap::from([("resource".to_string(), resource.to_string())]),
            ErrorDetails::new(),
        ),
        Error::FailedPrecondition {
            reason,
            current_version,
        } => {
            let mut metadata = HashMap::new();
            let mut details = ErrorDetails::new();
            let message = match current_version {
                Some(v) => {
                    metadata.insert("current_version".to_string(), v.to_string());
                    details.add_precondition_failure_violation(
                        reason.as_str(),
                        "configuration",
                        format!("the saved configuration is at version {v}"),
                    );
                    format!("the saved configuration is at version {v}")
                }
                None => message,
            };
            // The table gives a lost test-and-set (`version_mismatch`) ABORTED (AIP-154) and
            // a stale plan FAILED_PRECONDITION: it must be looked at again, not retried.
            with_reason(reason, &message, metadata, details)
        }
        Error::ApprovalRequired { webhook_id } => {
            let mut details = ErrorDetails::new();
            details.add_precondition_failure_violation(
                Reason::ApprovalRequired.as_str(),
                "confirm_policy",
                "the webhook's confirm_policy is person",
            );
            with_reason(
                Reason::ApprovalRequired,
                &message,
                HashMap::from([("webhook_id".to_string(), webhook_id)]),
                details,
            )
        }
        Error::Conflict { .. } => with_reason(
            Reason::Conflict,
            &message,
            HashMap::new(),
            ErrorDetails::new(),
        ),
        Error::GrantNotAllowed {
            owner_scope,
            outside,
            allowed,
        } => {
            let details = serde_json::json!({
                "owner_scope": owner_scope,
                "outside": outside,
                "allowed": allowed,
            });
            with_reason(
                Reason::GrantNotAllowed,
                &message,
                HashMap::from([("details".to_string(), details.to_string())]),
                ErrorDetails::new(),
            )
        }
        Error::InvalidArgument { field, .. } => with_reason(
            Reason::InvalidArgument,
            &message,
            HashMap::from([("field".to_string(), field.to_string())]),
            ErrorDetails::with_bad_request_violation(field, message.clone()),
        ),
        Error::ResourceExhausted { retry_after: delay } => {
            let (metadata, details) = retry_after(delay);
            with_reason(Reason::RateLimited, &message, metadata, details)
        }
        Error::Internal { context } => {
            tracing::error!(error = %context, "api call failed inside control");
            with_reason(
                Reason::Internal,
                "internal error",
                HashMap::new(),
                ErrorDetails::new(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn reason_of(s: &Status) -> String {
        s.get_error_details()
            .error_info()
            .map(|i| i.reason.clone())
            .unwrap_or_default()
    }

    #[test]
    fn internal_context_never_reaches_the_caller() {
        let s = Status::from(ApiError::internal("SELECT secret FROM webhooks"));
        assert_eq!(s.code(), Code::Internal);
        assert_eq!(s.message(), "internal: internal error");
        assert!(!format!("{s:?}").contains("SELECT"));
        let s = Status::from(ApiError::Routing(RoutingError::Unavailable(
            "10.0.0.7:7701: connection refused".into(),
        )));
        assert_eq!(s.code(), Code::Unavailable);
        assert!(!s.message().contains("10.0.0.7"));
        let s = Status::from(ApiError::Routing(RoutingError::Refused("secret".into())));
        assert!(!s.message().contains("secret"));
    }

    #[test]
    fn every_status_starts_with_its_reason() {
        let cases: Vec<(ApiError, Code, &str)> = vec![
            (
                Error::NotFound {
                    resource: "webhook",
                }
                .into(),
                Code::NotFound,
                "not_found: webhook not found",
            ),
            (
                Error::FailedPrecondition {
                    reason: crate::error::VERSION_MISMATCH,
                    current_version: Some(4),
                }
                .into(),
                Code::Aborted,
                "version_mismatch: the saved configuration is at version 4",
            ),
            (
                ApiError::invalid("limit", "must be between 1 and 200"),
                Code::InvalidArgument,
                "invalid_argument: invalid limit: must be between 1 and 200",
            ),
            (
                Error::ResourceExhausted {
                    retry_after: Duration::from_millis(1500),
                }
                .into(),
                Code::ResourceExhausted,
                "rate_limited: rate limit reached, retry after 1500 ms",
            ),
            (
                ApiError::Unauthenticated("no bearer credential"),
                Code::Unauthenticated,
                "unauthenticated: no bearer credential",
            ),
        ];
        for (e, code, message) in cases {
            let s = Status::from(e);
            assert_eq!((s.code(), s.message()), (code, message));
            assert_eq!(
                Some(reason_of(&s).as_str()),
                message.split(':').next(),
                "{message}"
            );
        }
    }

    #[test]
    fn a_grant_outside_the_allowance_is_permission_denied_with_its_queues() {
        let s = Status::from(ApiError::from(Error::GrantNotAllowed {
            owner_scope: "team:ops".into(),
            outside: vec!["pager".into()],
            allowed: vec!["forge".into()],
        }));
        assert_eq!(s.code(), Code::PermissionDenied);
        assert_eq!(reason_of(&s), "grant_not_allowed");
        assert!(
            s.message()
                .starts_with("grant_not_allowed: the grant names pager")
        );
        let details: serde_json::Value = serde_json::from_str(
            &s.get_error_details()
                .error_info()
                .map(|i| i.metadata["details"].clone())
                .unwrap_or_default(),
        )
        .unwrap();
        assert_eq!(
            details,
            serde_json::json!({"owner_scope": "team:ops", "outside": ["pager"], "allowed": ["forge"]})
        );
    }

    /// Issue 49: a mistyped param and an out-of-range replay limit name their field in a
    /// `BadRequest`, as every other bad argument does.
    #[test]
    fn rule_pack_refusals_of_arguments_carry_bad_request_violations() {
        let violations = |e: crate::rule_packs::PackError| {
            let s = Status::from(ApiError::RulePack(e));
            assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
            s.get_error_details()
                .bad_request()
                .map(|b| {
                    b.field_violations
                        .iter()
                        .map(|v| (v.field.clone(), v.description.clone()))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let typed = crate::rule_packs::PackError::new(
            Reason::InvalidParams,
            "invalid params",
            serde_json::json!({"param": "keep_ci_success", "message": "expected a boolean, got a string"}),
        );
        assert_eq!(
            violations(typed),
            [(
                "params.keep_ci_success".to_string(),
                "expected a boolean, got a string".to_string()
            )]
        );
        let checks = crate::rule_packs::PackError::new(
            Reason::InvalidParams,
            "param check failed",
            serde_json::json!({"failures": [
                {"param_check": "c1", "param": "lanes", "message": "a lane needs a queue"},
                {"param_check": "c2", "message": "two lanes share a label"},
            ]}),
        );
        assert_eq!(
            violations(checks)
                .into_iter()
                .map(|(f, _)| f)
                .collect::<Vec<_>>(),
            ["params.lanes", "params"]
        );
        let limit = crate::rule_packs::PackError::new(
            Reason::InvalidArgument,
            "replay.limit must be between 1 and 1000",
            serde_json::json!({"field": "replay.limit"}),
        );
        assert_eq!(
            violations(limit),
            [(
                "replay.limit".to_string(),
                "replay.limit must be between 1 and 1000".to_string()
            )]
        );
    }

    #[test]
    fn details_carry_what_a_client_acts_on() {
        let s = Status::from(ApiError::from(Error::FailedPrecondition {
            reason: crate::error::VERSION_MISMATCH,
            current_version: Some(7),
        }));
        let d = s.get_error_details();
        assert_eq!(
            d.error_info()
                .map(|i| i.metadata["current_version"].as_str()),
            Some("7")
        );
        let s = Status::from(ApiError::from(Error::ResourceExhausted {
            retry_after: Duration::from_secs(3),
        }));
        assert_eq!(
            s.get_error_details()
                .retry_info()
                .and_then(|r| r.retry_delay),
            Some(Duration::from_secs(3))
        );
        let problems = vec![
            Problem {
                rule_id: "a".into(),
                rule_index: 0,
                code: "parse_error".into(),
                message: "bad".into(),
                field: "rules[0].when".into(),
            },
            Problem {
                rule_id: String::new(),
                rule_index: -1,
                code: "params_too_large".into(),
                message: "big".into(),
                field: "params".into(),
            },
        ];
        let s = Status::from(ApiError::InvalidConfiguration(problems));
        assert_eq!(s.code(), Code::InvalidArgument);
        let info = s.get_error_details().error_info().cloned().expect("info");
        let details: serde_json::Value =
            serde_json::from_str(&info.metadata["details"]).expect("details are JSON");
        let list = details["problems"].as_array().cloned().unwrap_or_default();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["code"], "parse_error");
        assert_eq!(
            s.get_error_details()
                .bad_request()
                .map(|b| b.field_violations.len()),
            Some(2)
        );
    }
}
