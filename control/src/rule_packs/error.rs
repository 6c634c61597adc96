//! A rule-pack failure an agent can act on, and how the store's, the routers' and the
//! merge's errors become one.

use super::*;
use switchboard_proto::control::v1::{PackRules, RefusalDetails};
use switchboard_proto::router::v1::Problem;

/// A rule-pack failure an agent can act on: a SPEC-0031 code, a message naming what was
/// wrong and the next call to make, and typed details. Never payload text.
#[derive(Debug)]
pub struct PackError {
    pub reason: Reason,
    pub message: String,
    /// Boxed: errors stay small on the happy path's `Result`s.
    pub details: Box<Details>,
}

impl PackError {
    pub(crate) fn new(reason: Reason, message: impl Into<String>, details: Details) -> Self {
        Self {
            reason,
            message: message.into(),
            details: Box::new(details),
        }
    }
}

/// What a refusal says beyond its reason and message, typed as it travels (docs/errors.md):
/// flat facts become `ErrorInfo.metadata`, bad fields a `BadRequest`, a stale plan's cause a
/// `PreconditionFailure`, a wait a `RetryInfo`, and lists our `RefusalDetails`.
#[derive(Debug, Default)]
pub struct Details {
    /// Ids, names, counts, versions: flat strings, never JSON.
    pub facts: Vec<(&'static str, String)>,
    /// The arguments refused: (field, what is wrong with it).
    pub fields: Vec<(String, String)>,
    /// Why a plan is stale, and of what (`plan`, `trial:<id>`, `redrive`).
    pub stale: Option<(StaleCause, String)>,
    pub retry_after: Option<Duration>,
    pub lists: RefusalDetails,
}

impl Details {
    pub fn none() -> Details {
        Details::default()
    }

    pub fn fact(mut self, key: &'static str, value: impl ToString) -> Details {
        self.facts.push((key, value.to_string()));
        self
    }

    pub fn field(mut self, field: impl Into<String>, description: impl Into<String>) -> Details {
        self.fields.push((field.into(), description.into()));
        self
    }

    pub fn stale(mut self, cause: StaleCause, subject: impl Into<String>) -> Details {
        self.stale = Some((cause, subject.into()));
        self
    }

    pub fn retry_after(mut self, delay: Duration) -> Details {
        self.retry_after = Some(delay);
        self
    }

    pub fn lists(mut self, lists: RefusalDetails) -> Details {
        self.lists = lists;
        self
    }

    /// An `invalid_configuration`'s: each problem a field violation (the configuration as a
    /// whole when it names no field) and, whole, in `RefusalDetails.problems`.
    pub fn problems(problems: &[Problem]) -> Details {
        let mut details = Details::none();
        for p in problems {
            let field = if p.field.is_empty() {
                "configuration"
            } else {
                p.field.as_str()
            };
            details = details.field(field, format!("{}: {}", p.code, p.message));
        }
        details.lists(RefusalDetails {
            problems: problems.iter().map(Into::into).collect(),
            ..RefusalDetails::default()
        })
    }
}

impl From<Error> for PackError {
    fn from(e: Error) -> Self {
        match &e {
            Error::NotFound { resource } => PackError::new(
                Reason::NotFound,
                e.to_string(),
                Details::none().fact("resource", resource),
            ),
            Error::FailedPrecondition {
                reason,
                current_version,
                cause,
            } if *reason == crate::error::PLAN_STALE
                || *reason == crate::error::VERSION_MISMATCH =>
            {
                let cause = cause.unwrap_or(StaleCause::ConfigurationChanged);
                let mut details = Details::none().stale(cause, "plan");
                if let Some(v) = current_version {
                    details = details.fact("current_version", v);
                }
                PackError::new(
                    Reason::PlanStale,
                    format!("the plan is stale: {}; plan again", cause.words()),
                    details,
                )
            }
            Error::InvalidArgument { field, message } => PackError::new(
                Reason::InvalidArgument,
                e.to_string(),
                Details::none().fact("field", field).field(*field, message),
            ),
            Error::ResourceExhausted { retry_after } => PackError::new(
                Reason::RateLimited,
                e.to_string(),
                Details::none().retry_after(*retry_after),
            ),
            Error::Internal { context } => {
                tracing::error!(context = %context, "rule pack operation failed");
                PackError::new(Reason::Internal, "internal error", Details::none())
            }
            _ => PackError::new(e.reason(), e.to_string(), Details::none()),
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
            Details::none(),
        )
    }
}

impl From<MergeError> for PackError {
    fn from(e: MergeError) -> Self {
        let none = Details::none();
        let details = match &e {
            MergeError::RequiresPack { pack, missing } => {
                none.fact("pack", pack).lists(RefusalDetails {
                    requires: vec![missing.clone()],
                    ..RefusalDetails::default()
                })
            }
            MergeError::RequiredByPack { pack, dependents } => {
                none.fact("pack", pack).lists(RefusalDetails {
                    required_by: dependents.clone(),
                    ..RefusalDetails::default()
                })
            }
            MergeError::DefaultConflict { holder } => none.fact("holder", holder),
            MergeError::TooManyRules {
                total,
                max,
                packs,
                hand_written,
            } => none
                .fact("total", total)
                .fact("max", max)
                .fact("hand_written", hand_written)
                .lists(RefusalDetails {
                    packs: packs
                        .iter()
                        .map(|(name, rules)| PackRules {
                            name: name.clone(),
                            rules: u32::try_from(*rules).unwrap_or(u32::MAX),
                        })
                        .collect(),
                    ..RefusalDetails::default()
                }),
            MergeError::InvalidParams { param, message } => none
                .fact("param", param)
                .field(format!("params.{param}"), message),
            MergeError::InvalidArgument { field, message } => {
                none.fact("field", field).field(field, message)
            }
            MergeError::LocalEdits { pack, rules } => none
                .fact("pack", pack)
                .fact(
                    "next",
                    "plan again with overwrite_local_edits: true to replace the edits",
                )
                .lists(RefusalDetails {
                    rules: rules.clone(),
                    ..RefusalDetails::default()
                }),
            MergeError::NotInstalled(name) => none.fact("resource", "pack").fact("pack", name),
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
