//! The one place where what went wrong becomes a `tonic::Status`.
//!
//! Every status message starts with a stable machine-readable reason and `": "`
//! (`not_found: webhook not found`), and the details carry the same reason as a
//! `google.rpc.ErrorInfo` (domain [`DOMAIN`]) whose metadata holds only flat values, plus
//! `BadRequest` field violations for bad arguments, a `PreconditionFailure` naming why a plan
//! is stale, `RetryInfo` for waits, and our `RefusalDetails` for lists (problems, faults,
//! queues). Internal context (SQL, driver errors, router addresses) is logged here and never
//! sent.

use std::collections::HashMap;
use std::time::Duration;

use switchboard_proto::router::v1::Problem;
use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};

use crate::error::Error;
use crate::routing::RoutingError;
use crate::rule_packs::Details;
use switchboard_proto::control::v1::RefusalDetails;

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

/// A refusal with typed details: each kind of detail in its own `google.rpc` message, lists
/// in our `RefusalDetails`. Rule-pack errors keep their SPEC-0031 code as the reason.
fn refusal(reason: Reason, message: &str, d: Details) -> Status {
    let mut metadata: HashMap<String, String> = d
        .facts
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect();
    let mut details = match d.retry_after {
        Some(delay) => {
            metadata.insert("retry_after_ms".into(), delay.as_millis().to_string());
            ErrorDetails::with_retry_info(Some(delay))
        }
        None => ErrorDetails::new(),
    };
    for (field, description) in d.fields {
        details.add_bad_request_violation(field, description);
    }
    if let Some((cause, subject)) = d.stale {
        details.add_precondition_failure_violation(cause.as_str(), subject, cause.words());
    }
    switchboard_proto::refusal::with_refusal(
        with_reason(reason, message, metadata, details),
        &d.lists,
    )
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
                refusal(
                    Reason::InvalidConfiguration,
                    &message,
                    Details::problems(&problems),
                )
            }
            ApiError::RulePack(e) => refusal(e.reason, &e.message, *e.details),
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
            cause,
        } => {
            let mut metadata = HashMap::new();
            let mut details = ErrorDetails::new();
            let message = match current_version {
                Some(v) => {
                    metadata.insert("current_version".to_string(), v.to_string());
                    if cause.is_none() {
                        details.add_precondition_failure_violation(
                            reason.as_str(),
                            "configuration",
                            format!("the saved configuration is at version {v}"),
                        );
                    }
                    format!("the saved configuration is at version {v}")
                }
                None => message,
            };
            if let Some(cause) = cause {
                details.add_precondition_failure_violation(cause.as_str(), "plan", cause.words());
            }
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
        } => refusal(
            Reason::GrantNotAllowed,
            &message,
            Details::none()
                .fact("owner_scope", owner_scope)
                .lists(RefusalDetails {
                    outside,
                    allowed,
                    ..RefusalDetails::default()
                }),
        ),
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
                Error::version_mismatch(Some(4)).into(),
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
        let info = s.get_error_details().error_info().cloned().expect("info");
        assert_eq!(info.metadata["owner_scope"], "team:ops");
        let lists = switchboard_proto::refusal::refusal_of(&s).expect("typed details");
        assert_eq!(
            (lists.outside, lists.allowed),
            (vec!["pager".to_string()], vec!["forge".to_string()])
        );
        assert_metadata_is_flat(&s);
    }

    /// Issue 49: ErrorInfo.metadata holds flat values only, never JSON text.
    fn assert_metadata_is_flat(s: &Status) {
        for (key, value) in s
            .get_error_details()
            .error_info()
            .map(|i| i.metadata.clone())
            .unwrap_or_default()
        {
            assert!(
                !value.starts_with('{') && !value.starts_with('['),
                "{key} holds JSON text: {value}"
            );
        }
    }

    /// Issue 49: a mistyped param and an out-of-range replay limit name their field in a
    /// `BadRequest`, as every other bad argument does.
    #[test]
    fn rule_pack_refusals_of_arguments_carry_bad_request_violations() {
        let violations = |e: crate::rule_packs::PackError| {
            let s = Status::from(ApiError::RulePack(e));
            assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
            assert_metadata_is_flat(&s);
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
        let typed = crate::rule_packs::PackError::from(
            switchboard_packs::merge::MergeError::InvalidParams {
                param: "keep_ci_success".into(),
                message: "expected a boolean, got a string".into(),
            },
        );
        assert_eq!(
            violations(typed),
            [(
                "params.keep_ci_success".to_string(),
                "expected a boolean, got a string".to_string()
            )]
        );
        let limit = crate::rule_packs::PackError::new(
            Reason::InvalidArgument,
            "replay.limit must be between 1 and 1000",
            Details::none()
                .fact("field", "replay.limit")
                .field("replay.limit", "must be between 1 and 1000"),
        );
        assert_eq!(
            violations(limit),
            [(
                "replay.limit".to_string(),
                "must be between 1 and 1000".to_string()
            )]
        );
    }

    /// Issue 49: a stale plan says why in a PreconditionFailure; the lists of a refusal
    /// travel in RefusalDetails; nothing is JSON inside ErrorInfo.
    #[test]
    fn a_stale_plan_names_its_cause_and_lists_travel_typed() {
        use switchboard_model::plan::StaleCause;
        let s = Status::from(ApiError::from(Error::stale_at(9)));
        assert_eq!(s.code(), Code::FailedPrecondition);
        let failure = s
            .get_error_details()
            .precondition_failure()
            .cloned()
            .expect("precondition failure");
        assert_eq!(failure.violations[0].r#type, "configuration_changed");
        assert_eq!(
            s.get_error_details()
                .error_info()
                .map(|i| i.metadata["current_version"].clone()),
            Some("9".to_string())
        );
        let e = crate::rule_packs::PackError::from(Error::stale(StaleCause::Used));
        assert_eq!(
            e.message,
            "the plan is stale: it was already applied; plan again"
        );
        let faults = crate::rule_packs::PackError::new(
            Reason::PackRuleFaults,
            "pack rule r faults",
            Details::none().lists(RefusalDetails {
                faults: vec![switchboard_proto::control::v1::RuleFault {
                    rule: "r".into(),
                    count: 1,
                    event_ids: vec!["ev_1".into()],
                }],
                ..RefusalDetails::default()
            }),
        );
        let s = Status::from(ApiError::RulePack(faults));
        assert_metadata_is_flat(&s);
        let lists = switchboard_proto::refusal::refusal_of(&s).expect("typed details");
        assert_eq!(lists.faults[0].event_ids, ["ev_1"]);
    }

    #[test]
    fn details_carry_what_a_client_acts_on() {
        let s = Status::from(ApiError::from(Error::version_mismatch(Some(7))));
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
        assert_metadata_is_flat(&s);
        let lists = switchboard_proto::refusal::refusal_of(&s).expect("typed details");
        assert_eq!(lists.problems.len(), 2);
        assert_eq!(lists.problems[0].code, "parse_error");
        assert_eq!(lists.problems[1].rule_index, Some(-1));
        assert_eq!(
            s.get_error_details()
                .bad_request()
                .map(|b| b.field_violations.len()),
            Some(2)
        );
    }
}
