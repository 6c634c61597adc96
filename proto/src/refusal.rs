//! A refusal's typed details on the wire (issue 49): our `RefusalDetails` message packed as a
//! `google.protobuf.Any` beside the standard `google.rpc` details (ErrorInfo, BadRequest,
//! PreconditionFailure, RetryInfo), and read back out. Control writes them, the shared client
//! reads them, so neither parses JSON out of a string map.

use prost::{Message, Name};
use tonic::Status;
use tonic_types::pb::Status as RpcStatus;

use crate::control::v1::{ConfigurationProblem, RefusalDetails};
use crate::router::v1::Problem;

impl RefusalDetails {
    /// Whether it says nothing (then it is not sent).
    pub fn is_empty(&self) -> bool {
        *self == RefusalDetails::default()
    }
}

impl From<&Problem> for ConfigurationProblem {
    fn from(p: &Problem) -> Self {
        ConfigurationProblem {
            code: p.code.clone(),
            message: p.message.clone(),
            field: p.field.clone(),
            rule_id: p.rule_id.clone(),
            rule_index: Some(p.rule_index),
        }
    }
}

/// `status` with `refusal` added to its details; `status` itself when `refusal` is empty or
/// the details cannot be read (then the standard details still stand).
pub fn with_refusal(status: Status, refusal: &RefusalDetails) -> Status {
    if refusal.is_empty() {
        return status;
    }
    let Ok(mut rpc) = RpcStatus::decode(status.details()) else {
        return status;
    };
    rpc.code = status.code() as i32;
    rpc.message = status.message().to_string();
    match prost_types::Any::from_msg(refusal) {
        Ok(any) => rpc.details.push(any),
        Err(_) => return status,
    }
    Status::with_details_and_metadata(
        status.code(),
        status.message(),
        rpc.encode_to_vec().into(),
        status.metadata().clone(),
    )
}

/// The `RefusalDetails` a status carries, if it carries one that decodes.
pub fn refusal_of(status: &Status) -> Option<RefusalDetails> {
    let rpc = RpcStatus::decode(status.details()).ok()?;
    rpc.details
        .iter()
        .find(|any| any.type_url == RefusalDetails::type_url())
        .and_then(|any| any.to_msg::<RefusalDetails>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::v1::RuleFault;
    use tonic::Code;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn a_refusal_travels_beside_the_standard_details() {
        let mut details = ErrorDetails::new();
        details.set_error_info(
            "pack_rule_faults",
            "switchboard",
            std::collections::HashMap::new(),
        );
        let status = Status::with_error_details(Code::FailedPrecondition, "x: y", details);
        let refusal = RefusalDetails {
            faults: vec![RuleFault {
                rule: "r1".into(),
                count: 2,
                event_ids: vec!["ev_1".into(), "fixture:ok".into()],
            }],
            ..RefusalDetails::default()
        };
        let status = with_refusal(status, &refusal);
        assert_eq!(refusal_of(&status), Some(refusal));
        assert_eq!(
            status
                .get_error_details()
                .error_info()
                .map(|i| i.reason.as_str()),
            Some("pack_rule_faults"),
            "the standard details still read"
        );
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(
            RefusalDetails::type_url(),
            "type.googleapis.com/switchboard.control.v1.RefusalDetails"
        );
    }

    #[test]
    fn an_empty_refusal_adds_nothing() {
        let status = Status::with_error_details(Code::NotFound, "n", ErrorDetails::new());
        let same = with_refusal(status.clone(), &RefusalDetails::default());
        assert_eq!(same.details(), status.details());
        assert_eq!(refusal_of(&same), None);
    }
}
