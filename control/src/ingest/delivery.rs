//! What ingest reads from a delivery besides its signature: the event kind, the delivery id,
//! and the headers to store. Pure and total: hostile headers and bodies give a fallback value,
//! never an error or a panic.

use std::borrow::Cow;

use axum::http::{HeaderMap, HeaderValue};

use switchboard_model::kind;

use crate::store::SourceType;

/// Longest delivery id taken from a header; a longer one is replaced by a generated id.
const MAX_DELIVERY_ID: usize = 200;

fn header_text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The event name from the source's headers, or the source's default, or `unknown`.
pub fn event_name(source: SourceType, headers: &HeaderMap) -> String {
    kind::event(source, |name| header_text(headers, name))
        .unwrap_or_else(|| kind::UNKNOWN_EVENT.to_string())
}

/// The request's first `Content-Type`, as text exactly as it is stored (see
/// [`stored_headers`]): the router reads it back from the stored headers, so both must see
/// the same text, whatever bytes a sender put in it.
pub fn content_type(headers: &HeaderMap) -> Option<Cow<'_, str>> {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .map(value_text)
}

/// `<event>` or `<event>.<action>`, the payload decoded from `body` here.
pub fn kind(source: SourceType, headers: &HeaderMap, body: &[u8]) -> String {
    let payload = switchboard_model::payload_json(content_type(headers).as_deref(), body);
    kind_of_payload(source, headers, &payload)
}

/// `<event>` or `<event>.<action>`, given the payload's JSON text.
pub fn kind_of_payload(source: SourceType, headers: &HeaderMap, payload: &[u8]) -> String {
    kind::kind(&event_name(source, headers), payload)
}

/// The forge's delivery id when it sends a usable one (1–200 printable ASCII characters),
/// else `None` and the caller generates one.
pub fn delivery_id(source: SourceType, headers: &HeaderMap) -> Option<String> {
    source
        .delivery_headers()
        .iter()
        .find_map(|name| header_text(headers, name))
        .filter(|id| id.len() <= MAX_DELIVERY_ID && id.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
}

/// Headers as received, in order, for storage. Names come lower-case (HTTP/2 requires it and
/// the HTTP/1 parser normalizes them); a value that is not UTF-8 is kept byte for byte as
/// ISO-8859-1 text, HTTP's historical header charset, so nothing is lost or replaced.
pub fn stored_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str().to_string(), value_text(value).into_owned()))
        .collect()
}

/// A header value as text: UTF-8 as it is, anything else one ISO-8859-1 character per byte.
fn value_text(value: &HeaderValue) -> Cow<'_, str> {
    match std::str::from_utf8(value.as_bytes()) {
        Ok(t) => Cow::Borrowed(t),
        Err(_) => Cow::Owned(value.as_bytes().iter().map(|&b| char::from(b)).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn forge_headers_come_before_githubs() {
        let h = headers(&[
            ("X-GitHub-Event", "pull_request"),
            ("X-Gitea-Event", "pull_request_approved"),
        ]);
        assert_eq!(event_name(SourceType::Gitea, &h), "pull_request_approved");
        let h = headers(&[
            ("X-GitHub-Event", "push"),
            ("X-Gitea-Event", "push"),
            ("X-Forgejo-Event", "pull_request"),
        ]);
        assert_eq!(event_name(SourceType::Forgejo, &h), "pull_request");
        let h = headers(&[("X-GitHub-Event", "check_run")]);
        assert_eq!(event_name(SourceType::Github, &h), "check_run");
    }

    #[test]
    fn an_empty_coarse_event_falls_back_to_the_event_type() {
        let h = headers(&[
            ("X-Gitea-Event", ""),
            ("X-Gitea-Event-Type", "package"),
            ("X-GitHub-Event", ""),
        ]);
        assert_eq!(event_name(SourceType::Gitea, &h), "package");
    }

    #[test]
    fn cairn_and_generic_defaults() {
        assert_eq!(event_name(SourceType::Cairn, &HeaderMap::new()), "handoff");
        assert_eq!(
            event_name(SourceType::Generic, &HeaderMap::new()),
            "unknown"
        );
        assert_eq!(event_name(SourceType::Github, &HeaderMap::new()), "unknown");
        let h = headers(&[("X-Switchboard-Event", "deploy")]);
        assert_eq!(event_name(SourceType::Generic, &h), "deploy");
    }

    #[test]
    fn kinds_join_event_and_action() {
        let h = headers(&[("X-GitHub-Event", "pull_request")]);
        assert_eq!(
            kind(SourceType::Github, &h, br#"{"action":"opened","number":1}"#),
            "pull_request.opened"
        );
        assert_eq!(
            kind(SourceType::Github, &h, br#"{"ref":"main"}"#),
            "pull_request"
        );
        assert_eq!(
            kind(SourceType::Github, &h, br#"{"action":7}"#),
            "pull_request"
        );
        assert_eq!(
            kind(SourceType::Github, &h, b"payload=%7B%7D"),
            "pull_request"
        );
        assert_eq!(kind(SourceType::Github, &h, b"[1,2]"), "pull_request");
        assert_eq!(kind(SourceType::Github, &h, b""), "pull_request");
    }

    #[test]
    fn a_form_delivery_takes_its_action_from_the_payload_field() {
        let form = "application/x-www-form-urlencoded; charset=utf-8";
        let body = b"payload=%7B%22action%22%3A%22opened%22%2C%22number%22%3A1%7D";
        let h = headers(&[("X-GitHub-Event", "pull_request"), ("Content-Type", form)]);
        assert_eq!(kind(SourceType::Github, &h, body), "pull_request.opened");
        let h = headers(&[("X-Gitea-Event", "issues"), ("Content-Type", form)]);
        assert_eq!(kind(SourceType::Gitea, &h, body), "issues.opened");
        // The same body sent as JSON, or a form with no JSON in it, has no action.
        let h = headers(&[
            ("X-GitHub-Event", "issues"),
            ("Content-Type", "application/json"),
        ]);
        assert_eq!(kind(SourceType::Github, &h, body), "issues");
        let h = headers(&[("X-GitHub-Event", "issues"), ("Content-Type", form)]);
        assert_eq!(kind(SourceType::Github, &h, b"other=1"), "issues");
        assert_eq!(kind(SourceType::Github, &h, b"payload=%FF"), "issues");
        // A Content-Type that is not visible ASCII is read as it is stored, so ingest and
        // the router (which reads the stored headers) agree on it.
        let mut odd = HeaderMap::new();
        odd.append("x-github-event", HeaderValue::from_static("issues"));
        odd.append(
            "content-type",
            HeaderValue::from_bytes(b"application/x-www-form-urlencoded; charset=\xe9").unwrap(),
        );
        assert_eq!(kind(SourceType::Github, &odd, body), "issues.opened");
        let stored = stored_headers(&odd);
        let stored = stored.iter().find(|(name, _)| name == "content-type");
        assert_eq!(
            content_type(&odd).as_deref(),
            stored.map(|(_, value)| value.as_str())
        );
        // A "form" with no `payload` field is its body, whatever that is.
        assert_eq!(
            kind(SourceType::Github, &h, br#"{"action":"opened"}"#),
            "issues.opened"
        );
    }

    #[test]
    fn hostile_names_are_cleaned_and_cut() {
        let h = headers(&[("X-GitHub-Event", "a.b c")]);
        assert_eq!(
            kind(SourceType::Github, &h, br#"{"action":"x.y"}"#),
            "a_b_c.x_y"
        );
        let long = "e".repeat(500);
        let h = headers(&[("X-GitHub-Event", &long)]);
        assert_eq!(event_name(SourceType::Github, &h).len(), 64);
    }

    #[test]
    fn a_deep_body_has_no_action_and_does_not_panic() {
        let deep = format!(
            r#"{{"action":"opened","x":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(kind::action(deep.as_bytes()), None);
        let h = headers(&[("X-GitHub-Event", "issues")]);
        assert_eq!(kind(SourceType::Github, &h, deep.as_bytes()), "issues");
    }

    #[test]
    fn delivery_ids_are_read_or_refused() {
        let h = headers(&[("X-GitHub-Delivery", "gh-1"), ("X-Gitea-Delivery", "gt-1")]);
        assert_eq!(delivery_id(SourceType::Gitea, &h).as_deref(), Some("gt-1"));
        let h = headers(&[("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")]);
        assert_eq!(
            delivery_id(SourceType::Github, &h).as_deref(),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
        let long = "d".repeat(201);
        for bad in ["", "has space", long.as_str()] {
            let h = headers(&[("X-GitHub-Delivery", bad)]);
            assert_eq!(delivery_id(SourceType::Github, &h), None, "{bad:?}");
        }
    }

    #[test]
    fn header_values_that_are_not_utf8_are_kept_byte_for_byte() {
        let mut h = HeaderMap::new();
        h.append(
            "x-odd",
            HeaderValue::from_bytes(&[b'a', 0xE9, b'b']).unwrap(),
        );
        h.append("x-utf8", HeaderValue::from_bytes("é".as_bytes()).unwrap());
        let stored = stored_headers(&h);
        assert_eq!(stored[0], ("x-odd".to_string(), "a\u{e9}b".to_string()));
        assert_eq!(stored[1], ("x-utf8".to_string(), "é".to_string()));
    }
}
