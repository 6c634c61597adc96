//! The one vocabulary of failure reasons ([`Reason`], `errors.proto`) and what each means on
//! every surface: its gRPC code, its HTTP status, and whether the same call may succeed if
//! simply made again. Control's status mapping, ingest's HTTP answers and the MCP gateway's
//! tool errors all read this table; docs/errors.md is rendered from it and checked by a test.

use tonic::Code;

pub use crate::control::v1::Reason;

/// The exit codes of the `switchboard` command lines (docs/cli.md), one table for the CLI for
/// people and `switchboard admin`; [`Reason::exit_code`] gives a refusal's.
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// Anything else: control unreachable, an internal error, a retryable refusal.
    pub const OTHER: u8 = 1;
    /// Bad usage: a bad flag or argument, no credential, an input control refused as invalid.
    pub const USAGE: u8 = 2;
    /// Not found or not permitted: an unknown id, another scope's, a verb or role the
    /// endpoint lacks.
    pub const NOT_FOUND: u8 = 3;
    /// A refusal the user must act on: the plan is stale, unproven or refused, it waits for a
    /// person's approval, or the configuration changed underneath (conflict).
    pub const REFUSED: u8 = 4;
    /// The credential itself was refused (unknown, revoked, expired): a script tells a bad
    /// token from a missing object without reading stderr (issue 49).
    pub const UNAUTHENTICATED: u8 = 5;
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Reason {
    /// Every reason a caller can see (all but `REASON_UNSPECIFIED`), in the proto's order.
    pub const ALL: [Reason; 31] = [
        Reason::Unauthenticated,
        Reason::PermissionDenied,
        Reason::GrantNotAllowed,
        Reason::NotFound,
        Reason::InvalidArgument,
        Reason::InvalidConfiguration,
        Reason::InvalidParams,
        Reason::VersionMismatch,
        Reason::PlanStale,
        Reason::PackRuleFaults,
        Reason::Unproven,
        Reason::LocalEdits,
        Reason::RequiresPack,
        Reason::RequiredByPack,
        Reason::DefaultConflict,
        Reason::TooManyRules,
        Reason::UnavailableVersion,
        Reason::Busy,
        Reason::Conflict,
        Reason::RateLimited,
        Reason::RouterUnavailable,
        Reason::Unavailable,
        Reason::ControlUnavailable,
        Reason::DeadlineExceeded,
        Reason::PayloadTooLarge,
        Reason::MethodNotAllowed,
        Reason::Cancelled,
        Reason::Unimplemented,
        Reason::Internal,
        Reason::ApprovalRequired,
        Reason::InsufficientTrial,
    ];

    /// The reason as callers read it: the proto name without `REASON_`, in lower case.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Unspecified => "internal",
            Reason::Unauthenticated => "unauthenticated",
            Reason::PermissionDenied => "permission_denied",
            Reason::GrantNotAllowed => "grant_not_allowed",
            Reason::NotFound => "not_found",
            Reason::InvalidArgument => "invalid_argument",
            Reason::InvalidConfiguration => "invalid_configuration",
            Reason::InvalidParams => "invalid_params",
            Reason::VersionMismatch => "version_mismatch",
            Reason::PlanStale => "plan_stale",
            Reason::PackRuleFaults => "pack_rule_faults",
            Reason::Unproven => "unproven",
            Reason::LocalEdits => "local_edits",
            Reason::RequiresPack => "requires_pack",
            Reason::RequiredByPack => "required_by_pack",
            Reason::DefaultConflict => "default_conflict",
            Reason::TooManyRules => "too_many_rules",
            Reason::UnavailableVersion => "unavailable_version",
            Reason::Busy => "busy",
            Reason::Conflict => "conflict",
            Reason::RateLimited => "rate_limited",
            Reason::RouterUnavailable => "router_unavailable",
            Reason::Unavailable => "unavailable",
            Reason::ControlUnavailable => "control_unavailable",
            Reason::DeadlineExceeded => "deadline_exceeded",
            Reason::PayloadTooLarge => "payload_too_large",
            Reason::MethodNotAllowed => "method_not_allowed",
            Reason::Cancelled => "cancelled",
            Reason::Unimplemented => "unimplemented",
            Reason::Internal => "internal",
            Reason::ApprovalRequired => "approval_required",
            Reason::InsufficientTrial => "insufficient_trial",
        }
    }

    /// The reason a caller's text names, if it is one.
    pub fn parse(text: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// The gRPC code a status with this reason carries.
    pub const fn grpc_code(self) -> Code {
        match self {
            Reason::Unauthenticated => Code::Unauthenticated,
            Reason::PermissionDenied | Reason::GrantNotAllowed => Code::PermissionDenied,
            Reason::NotFound => Code::NotFound,
            Reason::InvalidArgument
            | Reason::InvalidConfiguration
            | Reason::InvalidParams
            | Reason::PayloadTooLarge => Code::InvalidArgument,
            // A lost test-and-set, and a replay already running: retried at a higher level
            // (AIP-154, google.rpc.Code).
            Reason::VersionMismatch | Reason::Busy => Code::Aborted,
            Reason::PlanStale
            | Reason::PackRuleFaults
            | Reason::Unproven
            | Reason::LocalEdits
            | Reason::RequiresPack
            | Reason::RequiredByPack
            | Reason::DefaultConflict
            | Reason::TooManyRules
            | Reason::UnavailableVersion
            | Reason::Conflict
            | Reason::ApprovalRequired
            | Reason::InsufficientTrial => Code::FailedPrecondition,
            Reason::RateLimited => Code::ResourceExhausted,
            Reason::RouterUnavailable | Reason::Unavailable | Reason::ControlUnavailable => {
                Code::Unavailable
            }
            Reason::DeadlineExceeded => Code::DeadlineExceeded,
            Reason::MethodNotAllowed | Reason::Unimplemented => Code::Unimplemented,
            Reason::Cancelled => Code::Cancelled,
            Reason::Unspecified | Reason::Internal => Code::Internal,
        }
    }

    /// The HTTP status of an answer with this reason (ingest's, and any HTTP surface's).
    pub const fn http_status(self) -> u16 {
        match self {
            Reason::Unauthenticated => 401,
            Reason::PermissionDenied | Reason::GrantNotAllowed => 403,
            Reason::NotFound => 404,
            Reason::InvalidArgument | Reason::InvalidConfiguration | Reason::InvalidParams => 400,
            Reason::VersionMismatch
            | Reason::PlanStale
            | Reason::PackRuleFaults
            | Reason::Unproven
            | Reason::LocalEdits
            | Reason::RequiresPack
            | Reason::RequiredByPack
            | Reason::DefaultConflict
            | Reason::TooManyRules
            | Reason::UnavailableVersion
            | Reason::Busy
            | Reason::Conflict
            | Reason::ApprovalRequired
            | Reason::InsufficientTrial => 409,
            Reason::RateLimited => 429,
            Reason::RouterUnavailable | Reason::Unavailable | Reason::ControlUnavailable => 503,
            // A body that arrived too slowly: the client's request timed out.
            Reason::DeadlineExceeded => 408,
            Reason::PayloadTooLarge => 413,
            Reason::MethodNotAllowed => 405,
            Reason::Cancelled => 499,
            Reason::Unimplemented => 501,
            Reason::Unspecified | Reason::Internal => 500,
        }
    }

    /// The exit code of a `switchboard` command line that this reason refused ([`exit`],
    /// docs/cli.md): what a script branches on without reading stderr.
    pub const fn exit_code(self) -> u8 {
        match self {
            Reason::Unauthenticated => exit::UNAUTHENTICATED,
            Reason::PermissionDenied | Reason::NotFound => exit::NOT_FOUND,
            Reason::InvalidArgument
            | Reason::InvalidConfiguration
            | Reason::InvalidParams
            | Reason::GrantNotAllowed
            | Reason::TooManyRules
            | Reason::PayloadTooLarge => exit::USAGE,
            Reason::PlanStale
            | Reason::Unproven
            | Reason::Conflict
            | Reason::VersionMismatch
            | Reason::LocalEdits
            | Reason::RequiresPack
            | Reason::RequiredByPack
            | Reason::DefaultConflict
            | Reason::PackRuleFaults
            | Reason::UnavailableVersion
            | Reason::ApprovalRequired
            | Reason::InsufficientTrial => exit::REFUSED,
            Reason::Busy
            | Reason::RateLimited
            | Reason::RouterUnavailable
            | Reason::Unavailable
            | Reason::ControlUnavailable
            | Reason::DeadlineExceeded
            | Reason::MethodNotAllowed
            | Reason::Cancelled
            | Reason::Unimplemented
            | Reason::Unspecified
            | Reason::Internal => exit::OTHER,
        }
    }

    /// Whether the same call, made again unchanged, may succeed: the state that refused it
    /// passes by itself (a budget refills, a replay ends, a router or control comes back).
    /// Every other reason needs the caller to change something first.
    pub const fn retryable(self) -> bool {
        matches!(
            self,
            Reason::Busy
                | Reason::RateLimited
                | Reason::RouterUnavailable
                | Reason::Unavailable
                | Reason::ControlUnavailable
                | Reason::DeadlineExceeded
        )
    }

    /// What a refusal with this reason carries in its gRPC status details beside the
    /// `ErrorInfo` (docs/errors.md): the standard `google.rpc` messages, our `RefusalDetails`
    /// fields, and the `ErrorInfo.metadata` keys (flat strings, never JSON).
    pub const fn details(self) -> &'static str {
        match self {
            Reason::Unauthenticated | Reason::PermissionDenied | Reason::Cancelled => "—",
            Reason::GrantNotAllowed => {
                "metadata `owner_scope`; RefusalDetails `outside`, `allowed`"
            }
            Reason::NotFound => {
                "metadata `resource` (a pack: `name`, `version`); nothing that tells another scope's id from an unknown one"
            }
            Reason::InvalidArgument => "BadRequest, a violation per field; metadata `field`",
            Reason::InvalidConfiguration => {
                "BadRequest, a violation per problem (`rules[0].when`, or `configuration`); RefusalDetails `problems`"
            }
            Reason::InvalidParams => {
                "BadRequest, a violation per param (`params.<name>`); metadata `param`; RefusalDetails `failures` (param checks)"
            }
            Reason::VersionMismatch => {
                "PreconditionFailure `version_mismatch` on `configuration`; metadata `current_version`"
            }
            Reason::PlanStale => {
                "PreconditionFailure whose type is the cause (`used`, `rejected`, `expired`, `approval_expired`, `configuration_changed`, `not_pending`, `trial_changed`) on `plan`, `trial:<id>` or `redrive`; metadata `current_version`, `trial_id`, `state` when known"
            }
            Reason::PackRuleFaults => "RefusalDetails `faults` (rule, count, event ids)",
            Reason::Unproven => "metadata `proven`, `truncated`",
            Reason::LocalEdits => "metadata `pack`, `next`; RefusalDetails `rules`",
            Reason::RequiresPack => "metadata `pack`; RefusalDetails `requires`",
            Reason::RequiredByPack => "metadata `pack`; RefusalDetails `required_by`",
            Reason::DefaultConflict => "metadata `holder`",
            Reason::TooManyRules => {
                "metadata `total`, `max`, `hand_written`; RefusalDetails `packs`"
            }
            Reason::UnavailableVersion => "metadata `name`, `version`, `reason`, `upgrade_note`",
            Reason::Busy | Reason::RateLimited | Reason::RouterUnavailable => {
                "RetryInfo; metadata `retry_after_ms`"
            }
            Reason::Conflict | Reason::Unavailable | Reason::DeadlineExceeded => "—",
            Reason::ControlUnavailable => {
                "— (the gateway's and the CLIs' own: control did not answer)"
            }
            Reason::PayloadTooLarge | Reason::MethodNotAllowed => "— (ingest, HTTP only)",
            Reason::Unimplemented | Reason::Internal => "—",
            Reason::ApprovalRequired => {
                "PreconditionFailure `approval_required` on `confirm_policy`; metadata `webhook_id`"
            }
            Reason::InsufficientTrial => "metadata `trial_id`",
            Reason::Unspecified => "—",
        }
    }

    /// docs/errors.md's table: every reason with its gRPC code, HTTP status, MCP tool error
    /// code, whether a retry may succeed, the CLI's exit code and the status details.
    pub fn table_markdown() -> String {
        let mut out = String::from(
            "| reason | gRPC code | HTTP status | MCP tool error `code` | retry the same call? | CLI exit code | details |\n| --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for r in Reason::ALL {
            out.push_str(&format!(
                "| `{}` | {} | {} | `{}` | {} | {} | {} |\n",
                r.as_str(),
                code_name(r.grpc_code()),
                r.http_status(),
                r.as_str(),
                if r.retryable() { "yes" } else { "no" },
                r.exit_code(),
                r.details(),
            ));
        }
        out
    }
}

/// The canonical upper-case name of a gRPC code, as the gRPC docs write it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_as_its_proto_name() {
        let listed: Vec<i32> = Reason::ALL.iter().map(|r| *r as i32).collect();
        // Every value of the proto enum but UNSPECIFIED is listed, once, in order.
        let all: Vec<i32> = (1..=i32::MAX)
            .take_while(|v| Reason::try_from(*v).is_ok())
            .collect();
        assert_eq!(listed, all);
        for r in Reason::ALL {
            let name = r.as_str_name();
            assert_eq!(
                Some(r.as_str().to_ascii_uppercase().as_str()),
                name.strip_prefix("REASON_"),
            );
            assert_eq!(Reason::parse(r.as_str()), Some(r));
        }
        assert_eq!(Reason::parse("resource_exhausted"), None);
    }

    /// docs/errors.md holds the table as rendered here; `UPDATE_GOLDEN=1` rewrites it.
    #[test]
    fn the_error_table_is_docs_errors_md() {
        const BEGIN: &str = "<!-- reasons: begin (generated by proto/src/reason.rs) -->\n";
        const END: &str = "<!-- reasons: end -->";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/errors.md");
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        let table = Reason::table_markdown();
        let (Some(start), Some(end)) = (doc.find(BEGIN), doc.find(END)) else {
            panic!("{path} lacks the table's markers")
        };
        let current = &doc[start + BEGIN.len()..end];
        if current != table {
            if std::env::var_os("UPDATE_GOLDEN").is_some() {
                let updated = format!("{}{BEGIN}{table}{}", &doc[..start], &doc[end..]);
                std::fs::write(path, updated).expect("docs/errors.md is written");
            } else {
                panic!(
                    "docs/errors.md's table is out of date: rerun with UPDATE_GOLDEN=1\n{table}"
                );
            }
        }
    }
}
