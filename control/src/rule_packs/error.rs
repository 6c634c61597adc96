//! A rule-pack failure an agent can act on, and how the store's, the routers' and the
//! merge's errors become one.

use super::*;

/// A rule-pack failure an agent can act on: a SPEC-0031 code, a message naming what was
/// wrong and the next call to make, and structured details. Never payload text.
#[derive(Debug)]
pub struct PackError {
    pub reason: Reason,
    pub message: String,
    pub details: Value,
}

impl PackError {
    pub(crate) fn new(reason: Reason, message: impl Into<String>, details: Value) -> Self {
        Self {
            reason,
            message: message.into(),
            details,
        }
    }
}

impl From<Error> for PackError {
    fn from(e: Error) -> Self {
        match &e {
            Error::NotFound { .. } => PackError::new(Reason::NotFound, e.to_string(), Value::Null),
            Error::FailedPrecondition { reason, .. }
                if *reason == crate::error::PLAN_STALE
                    || *reason == crate::error::VERSION_MISMATCH =>
            {
                PackError::new(
                    Reason::PlanStale,
                    "the plan is stale: the webhook's configuration changed, the token expired, or it was used; plan again",
                    Value::Null,
                )
            }
            Error::InvalidArgument { field, message } => PackError::new(
                Reason::InvalidArgument,
                e.to_string(),
                json!({"field": field, "message": message}),
            ),
            Error::ResourceExhausted { retry_after } => PackError::new(
                Reason::RateLimited,
                e.to_string(),
                json!({"retry_after_ms": retry_after.as_millis() as u64}),
            ),
            Error::Internal { context } => {
                tracing::error!(context = %context, "rule pack operation failed");
                PackError::new(Reason::Internal, "internal error", Value::Null)
            }
            _ => PackError::new(e.reason(), e.to_string(), Value::Null),
        }
    }
}

impl From<RoutingError> for PackError {
    fn from(e: RoutingError) -> Self {
        // The detail names routers' addresses: it goes to the log, never to the caller.
        tracing::warn!(error = %e.log_text(), "a rule-pack call found no router");
        PackError::new(
            Reason::RouterUnavailable,
            format!("{e}; nothing was changed, retry shortly"),
            Value::Null,
        )
    }
}

impl From<MergeError> for PackError {
    fn from(e: MergeError) -> Self {
        let details = match &e {
            MergeError::RequiresPack { pack, missing } => {
                json!({"pack": pack, "requires": missing})
            }
            MergeError::RequiredByPack { pack, dependents } => {
                json!({"pack": pack, "required_by": dependents})
            }
            MergeError::DefaultConflict { holder } => json!({"holder": holder}),
            MergeError::TooManyRules {
                total,
                max,
                packs,
                hand_written,
            } => json!({
                "total": total, "max": max, "hand_written": hand_written,
                "packs": packs.iter().map(|(n, c)| json!({"name": n, "rules": c})).collect::<Vec<_>>(),
            }),
            MergeError::InvalidParams { param, message } => {
                json!({"param": param, "message": message})
            }
            MergeError::InvalidArgument { field, message } => {
                json!({"field": field, "message": message})
            }
            MergeError::LocalEdits { pack, rules } => {
                json!({"pack": pack, "rules": rules, "next": "plan again with overwrite_local_edits: true to replace the edits"})
            }
            MergeError::NotInstalled(name) => json!({"pack": name}),
        };
        PackError::new(e.reason(), e.to_string(), details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_router_failure_names_no_router() {
        let pack = PackError::from(RoutingError::Unavailable(
            "10.0.0.7:7701: timeout expired".into(),
        ));
        assert_eq!(pack.reason, Reason::RouterUnavailable);
        assert!(!pack.message.contains("10.0.0.7"), "{}", pack.message);
        assert!(!pack.message.contains("7701"), "{}", pack.message);
    }
}
