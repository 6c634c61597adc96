//! The one error type of control and its store: defined here, in the store's crate (issue 44),
//! and re-exported by control as `switchboard_control::error`.
//!
//! Each variant maps to one gRPC code at the API edge. The `Display` text is the external
//! message a caller may see; anything internal (SQL text, driver errors, file paths) lives in
//! `Internal::context` and is only for logs.

use std::time::Duration;

/// Shorthand for results in the store and in control.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Unknown, malformed and other-scope ids all land here, with one message shape, so the
    /// answer never tells a caller that someone else's resource exists.
    #[error("{resource} not found")]
    NotFound { resource: &'static str },

    /// The state the caller based its request on is gone: a configuration version that moved on
    /// (`current_version` says where it is now) or a stale plan.
    #[error("{reason}")]
    FailedPrecondition {
        reason: Reason,
        current_version: Option<i64>,
        /// Why a plan is stale (`plan_stale` only), for the refusal's `PreconditionFailure`.
        cause: Option<StaleCause>,
    },

    /// The webhook's `confirm_policy` is `person` and an endpoint tried to change its
    /// configuration or delete it: only a person's acceptance of a plan changes what is live
    /// (ADR-0028).
    #[error(
        "webhook {webhook_id} takes changes only from a person (confirm_policy: person); nothing was changed. \
         Plan a rule change as a rule pack install, upgrade or removal: a person accepts the plan in the console"
    )]
    ApprovalRequired { webhook_id: String },

    /// The request collides with existing state (a duplicate name, a todo claimed by another).
    #[error("{message}")]
    Conflict { message: String },

    /// The caller sent something unusable; `field` names the argument.
    #[error("invalid {field}: {message}")]
    InvalidArgument {
        field: &'static str,
        message: String,
    },

    /// An agent's `create_webhook` named queues outside the grant allowance an operator set
    /// for its owner scope (`allowed` is empty when the scope has no allowance at all). Only
    /// the API path is checked: operators set grants (BASE: agents never widen a grant).
    #[error("{}", grant_not_allowed_message(owner_scope, outside, allowed))]
    GrantNotAllowed {
        owner_scope: String,
        /// The grant's queues the allowance does not hold, in grant order.
        outside: Vec<String>,
        /// The scope's allowance, sorted; empty when it has none.
        allowed: Vec<String>,
    },

    /// A limit was reached; try again after `retry_after`.
    #[error("rate limit reached, retry after {} ms", retry_after.as_millis())]
    ResourceExhausted { retry_after: Duration },

    /// Something failed inside control. The context is logged, never shown to the caller.
    #[error("internal error")]
    Internal { context: String },
}

pub use switchboard_proto::reason::Reason;

use switchboard_model::plan::StaleCause;

impl Error {
    /// A plan (a trial's, a redrive's, a recovery's) that can no longer be applied, and why.
    pub fn stale(cause: StaleCause) -> Error {
        Error::FailedPrecondition {
            reason: PLAN_STALE,
            current_version: None,
            cause: Some(cause),
        }
    }

    /// A plan made against a configuration that has since moved to `current_version`.
    pub fn stale_at(current_version: i64) -> Error {
        Error::FailedPrecondition {
            reason: PLAN_STALE,
            current_version: Some(current_version),
            cause: Some(StaleCause::ConfigurationChanged),
        }
    }

    /// A lost test-and-set: the saved configuration is at `current_version`, when known.
    pub fn version_mismatch(current_version: Option<i64>) -> Error {
        Error::FailedPrecondition {
            reason: VERSION_MISMATCH,
            current_version,
            cause: None,
        }
    }
}

/// `FailedPrecondition` reason when `expected_version` differs from the saved version.
pub const VERSION_MISMATCH: Reason = Reason::VersionMismatch;
/// `FailedPrecondition` reason for a plan that was used, expired, or no longer matches the webhook.
pub const PLAN_STALE: Reason = Reason::PlanStale;

/// The external message of [`Error::GrantNotAllowed`]: which queues, what the scope may
/// grant, and the operator command that would allow them.
fn grant_not_allowed_message(scope: &str, outside: &[String], allowed: &[String]) -> String {
    let outside_list = outside.join(", ");
    if allowed.is_empty() {
        format!(
            "{scope} has no grant allowance, so no webhook can be created over the API (the grant names {outside_list}); \
             nothing was created. An operator sets the allowance with \
             `switchboard admin scope allow --scope {scope} --queues {}`",
            outside.join(",")
        )
    } else {
        let mut widened: Vec<&str> = allowed.iter().chain(outside).map(String::as_str).collect();
        widened.sort_unstable();
        widened.dedup();
        format!(
            "the grant names {outside_list}, outside the queues an operator allowed {scope} ({}); \
             nothing was created. Grant only allowed queues, or have an operator widen the allowance with \
             `switchboard admin scope allow --scope {scope} --queues {}`",
            allowed.join(", "),
            widened.join(",")
        )
    }
}

impl Error {
    pub(crate) fn not_found(resource: &'static str) -> Self {
        Error::NotFound { resource }
    }

    /// An [`Error::InvalidArgument`] naming `field`. Public: control refuses arguments too.
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field,
            message: message.into(),
        }
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Error::Conflict {
            message: message.into(),
        }
    }

    /// An [`Error::Internal`] with `context` for the logs. Public: control's failures too.
    pub fn internal(context: impl Into<String>) -> Self {
        Error::Internal {
            context: context.into(),
        }
    }

    /// The reason callers see (docs/errors.md): the precondition's own for a failed one
    /// (`version_mismatch`, `plan_stale`).
    pub fn reason(&self) -> Reason {
        match self {
            Error::NotFound { .. } => Reason::NotFound,
            Error::FailedPrecondition { reason, .. } => *reason,
            Error::Conflict { .. } => Reason::Conflict,
            Error::ApprovalRequired { .. } => Reason::ApprovalRequired,
            Error::GrantNotAllowed { .. } => Reason::GrantNotAllowed,
            Error::InvalidArgument { .. } => Reason::InvalidArgument,
            Error::ResourceExhausted { .. } => Reason::RateLimited,
            Error::Internal { .. } => Reason::Internal,
        }
    }

    /// The text for logs: the external message plus internal context when there is one.
    pub fn log_text(&self) -> String {
        match self {
            Error::Internal { context } => format!("internal error: {context}"),
            Error::FailedPrecondition {
                reason,
                current_version: Some(v),
                ..
            } => {
                format!("{reason} (current version {v})")
            }
            other => other.to_string(),
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::internal(format!("database: {e}"))
    }
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        Error::internal(format!("migrations: {e}"))
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::internal(format!("stored json: {e}"))
    }
}

/// Is this a unique-constraint violation (a duplicate key) on either backend?
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_context_never_reaches_the_external_message() {
        let e = Error::internal("SELECT secret FROM webhooks: syntax error");
        assert_eq!(e.to_string(), "internal error");
        assert!(e.log_text().contains("SELECT"));
    }

    #[test]
    fn not_found_has_one_shape() {
        assert_eq!(Error::not_found("webhook").to_string(), "webhook not found");
        assert_eq!(Error::not_found("webhook").reason(), Reason::NotFound);
        let stale = Error::stale(StaleCause::Expired);
        assert_eq!(stale.reason(), Reason::PlanStale);
    }

    #[test]
    fn a_grant_not_allowed_names_the_queues_and_the_operator_command() {
        let outside = Error::GrantNotAllowed {
            owner_scope: "team:ops".into(),
            outside: vec!["pager".into()],
            allowed: vec!["forge".into(), "review".into()],
        };
        assert_eq!(outside.reason(), Reason::GrantNotAllowed);
        let text = outside.to_string();
        assert!(text.contains("the grant names pager"), "{text}");
        assert!(text.contains("(forge, review)"), "{text}");
        assert!(
            text.contains(
                "switchboard admin scope allow --scope team:ops --queues forge,pager,review"
            ),
            "{text}"
        );
        let none = Error::GrantNotAllowed {
            owner_scope: "human:alice".into(),
            outside: vec!["forge".into()],
            allowed: vec![],
        };
        let text = none.to_string();
        assert!(
            text.contains("human:alice has no grant allowance"),
            "{text}"
        );
        assert!(
            text.contains("switchboard admin scope allow --scope human:alice --queues forge"),
            "{text}"
        );
    }
}
