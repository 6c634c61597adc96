//! A child's evaluate request encoded straight from borrowed parts (the call's context and
//! configurations, a slice of a chunk's deliveries), byte for byte what encoding the
//! message would give, without cloning the deliveries into one. Apart because it is wire
//! format, checked against prost's own encoding by its test.

use bytes::{BufMut, Bytes};
use switchboard_proto::router::v1::{Configuration, RoutingContext, StoredDelivery};

/// The framed `ChildRequest` evaluating `configurations` over `deliveries`, encoded from
/// borrowed parts (the same bytes as encoding the message, without cloning the deliveries).
pub(super) fn encode_evaluate(
    ctx: &RoutingContext,
    configurations: &[Configuration],
    deliveries: &[StoredDelivery],
    skip_units: u32,
    omit_units: &[u32],
) -> Bytes {
    use prost::encoding::{
        WireType, encode_key, encode_varint, encoded_len_varint, key_len, message, uint32,
    };
    // proto3 leaves default values out; so does this, to stay byte-identical.
    let skip_len = if skip_units == 0 {
        0
    } else {
        uint32::encoded_len(4, &skip_units)
    };
    let inner = message::encoded_len(1, ctx)
        + message::encoded_len_repeated(2, configurations)
        + message::encoded_len_repeated(3, deliveries)
        + skip_len
        + uint32::encoded_len_packed(5, omit_units);
    let outer = key_len(2) + encoded_len_varint(inner as u64) + inner;
    let mut buf = Vec::with_capacity(4 + outer);
    buf.put_u32_le(outer as u32);
    encode_key(2, WireType::LengthDelimited, &mut buf);
    encode_varint(inner as u64, &mut buf);
    message::encode(1, ctx, &mut buf);
    message::encode_repeated(2, configurations, &mut buf);
    message::encode_repeated(3, deliveries, &mut buf);
    if skip_units != 0 {
        uint32::encode(4, &skip_units, &mut buf);
    }
    uint32::encode_packed(5, omit_units, &mut buf);
    buf.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use switchboard_proto::router::v1::{ChildEvaluate, ChildRequest, Header, child_request};

    #[test]
    fn a_request_encoded_from_borrowed_parts_is_the_message() {
        let ctx = RoutingContext {
            trusted_actors_capability: true,
            ..Default::default()
        };
        let configurations = vec![
            Configuration::text("{\"rules\":[]}"),
            Configuration::text("{}"),
        ];
        let deliveries: Vec<StoredDelivery> = (0..3)
            .map(|i| StoredDelivery {
                event_id: format!("ev-{i}"),
                kind: "push".into(),
                headers: vec![Header {
                    name: "X-GitHub-Event".into(),
                    value: "push".into(),
                }],
                body: Bytes::from(vec![b'x'; 300 * i]),
                verified: i % 2 == 0,
                ..Default::default()
            })
            .collect();
        let want = ChildRequest {
            request: Some(child_request::Request::Evaluate(ChildEvaluate {
                context: Some(ctx.clone()),
                configurations: configurations.clone(),
                deliveries: deliveries.clone(),
                skip_units: 0,
                omit_units: vec![],
            })),
        };
        let mut framed = (want.encoded_len() as u32).to_le_bytes().to_vec();
        framed.extend(want.encode_to_vec());
        assert_eq!(
            encode_evaluate(&ctx, &configurations, &deliveries, 0, &[]).as_ref(),
            &framed[..]
        );
        let want = ChildRequest {
            request: Some(child_request::Request::Evaluate(ChildEvaluate {
                context: Some(ctx.clone()),
                configurations: configurations.clone(),
                deliveries: deliveries[1..].to_vec(),
                skip_units: 1,
                omit_units: vec![2, 4],
            })),
        };
        let mut framed = (want.encoded_len() as u32).to_le_bytes().to_vec();
        framed.extend(want.encode_to_vec());
        assert_eq!(
            encode_evaluate(&ctx, &configurations, &deliveries[1..], 1, &[2, 4]).as_ref(),
            &framed[..]
        );
    }
}
