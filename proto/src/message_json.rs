//! Any API message as protobuf JSON (the canonical mapping, with the `.proto` field names):
//! what `switchboard admin --output json` prints, the same object the API answers, read from
//! the descriptors compiled into this crate rather than written by hand per message.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};

fn pool() -> Result<&'static DescriptorPool, String> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// `message` as protobuf JSON: `.proto` field names (`next_cursor`), every field present
/// (defaults included, so a script reads `0` and `""` rather than a missing key), enums by
/// name, 64-bit integers as strings (as the mapping says).
pub fn message_json<M: prost::Message + prost::Name>(
    message: &M,
) -> Result<serde_json::Value, String> {
    to_json(message, false)
}

/// `message` as protobuf JSON with only the fields it sets: a refusal's details as an agent
/// reads them (`details.faults`), without the empty lists of every other reason.
pub fn sparse_message_json<M: prost::Message + prost::Name>(
    message: &M,
) -> Result<serde_json::Value, String> {
    to_json(message, true)
}

fn to_json<M: prost::Message + prost::Name>(
    message: &M,
    skip_defaults: bool,
) -> Result<serde_json::Value, String> {
    let descriptor = pool()?
        .get_message_by_name(&M::full_name())
        .ok_or_else(|| format!("no descriptor for {}", M::full_name()))?;
    let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
        .map_err(|e| e.to_string())?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(skip_defaults);
    dynamic
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::v1 as pb;

    #[test]
    fn a_message_prints_with_its_proto_field_names_and_defaults() {
        let json = message_json(&pb::ListHumansResponse {
            humans: vec![pb::Human {
                login: "alice".into(),
                ..Default::default()
            }],
            next_cursor: String::new(),
        })
        .expect("json");
        assert_eq!(json["humans"][0]["login"], "alice");
        assert_eq!(json["next_cursor"], "");
        let deleted = message_json(&pb::DeleteHumanResponse {
            login: "bob".into(),
            endpoints_deleted: 2,
            memberships_removed: 0,
        })
        .expect("json");
        assert_eq!(
            deleted["endpoints_deleted"], "2",
            "64-bit integers as strings"
        );
    }

    #[test]
    fn a_timestamp_prints_as_rfc_3339_text() {
        let json = message_json(&pb::Endpoint {
            created_at: Some(crate::convert::time::from_millis(1_800_000_030_123)),
            ..Default::default()
        })
        .expect("json");
        assert_eq!(json["created_at"], "2027-01-15T08:00:30.123Z");
        assert_eq!(
            json.get("revoked_at"),
            None,
            "an absent time is left out: {json}"
        );
    }
}
