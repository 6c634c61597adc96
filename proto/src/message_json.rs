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
    let descriptor = pool()?
        .get_message_by_name(&M::full_name())
        .ok_or_else(|| format!("no descriptor for {}", M::full_name()))?;
    let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
        .map_err(|e| e.to_string())?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false);
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
}
