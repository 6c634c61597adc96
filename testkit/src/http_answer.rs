//! Reading a raw HTTP/1.1 answer the benches' hand-written clients received (`Connection:
//! close`, so the bytes are the whole answer): its status and its JSON body.

use serde_json::Value;

/// The status code and the body as JSON (`Null` when the body is not JSON). Panics (this is
/// bench support) when the bytes are not an HTTP answer.
pub fn status_and_json(answer: &[u8]) -> (u16, Value) {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let status = String::from_utf8_lossy(&answer[..split])
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let json = serde_json::from_slice(&answer[split + 4..]).unwrap_or(Value::Null);
    (status, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_body_are_read() {
        let (status, json) =
            status_and_json(b"HTTP/1.1 202 Accepted\r\nContent-Length: 9\r\n\r\n{\"a\":1}  ");
        assert_eq!((status, json), (202, serde_json::json!({"a": 1})));
        assert_eq!(
            status_and_json(b"HTTP/1.1 413 x\r\n\r\nnot json").1,
            Value::Null
        );
    }
}
