//! The envelope: what a rule sees as `.`, rebuilt identically from a stored delivery at
//! ingest, in dry runs, in replays and for pack fixtures. This is the one function that
//! builds it.

use std::borrow::Cow;

use bytes::Bytes;
use jaq_json::{Map, Val};
use switchboard_proto::router::v1::{RoutingContext, StoredDelivery};

use super::payload::parse_payload_reading;
use super::projection::Projection;

/// Header names never shown to rules: credentials and signatures.
fn is_secret_header(lower: &str) -> bool {
    matches!(
        lower,
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || lower.contains("signature")
        || lower.contains("secret")
        || lower.contains("token")
        || lower.contains("password")
        || lower.contains("api-key")
        || lower.contains("apikey")
}

fn s(text: &str) -> Val {
    Val::from(text.to_string())
}

/// `<event>` and `<action>` from a kind `<event>` or `<event>.<action>`.
pub fn split_kind(kind: &str) -> (&str, Option<&str>) {
    match kind.split_once('.') {
        Some((event, action)) => (event, Some(action)),
        None => (kind, None),
    }
}

pub use switchboard_model::rfc3339_millis;

fn get<'v>(v: &'v Val, key: &str) -> Option<&'v Val> {
    match v {
        Val::Obj(m) => m.get(&s(key)),
        _ => None,
    }
}

fn get_str(v: &Val, key: &str) -> Option<String> {
    match get(v, key) {
        Some(Val::TStr(b) | Val::BStr(b)) => Some(String::from_utf8_lossy(&b[..]).into_owned()),
        _ => None,
    }
}

/// `.actor` for the trusted-actors capability: who acted, which kind of actor, and whether
/// the webhook trusts them. Trusted needs a verified delivery and a login on the list of
/// the actor's kind.
fn actor(delivery: &StoredDelivery, payload: &Val, ctx: &RoutingContext) -> Val {
    let (login, declared_kind) = if delivery.source == "cairn" {
        let a = get(payload, "actor");
        (
            a.and_then(|a| get_str(a, "login")),
            a.and_then(|a| get_str(a, "kind")),
        )
    } else {
        let sender = get(payload, "sender");
        let bot = sender
            .and_then(|s| get_str(s, "type"))
            .is_some_and(|t| t == "Bot");
        (
            sender.and_then(|s| get_str(s, "login")),
            bot.then(|| "bot".to_string()),
        )
    };
    let lists = ctx.trusted_actors.clone().unwrap_or_default();
    let login_str = login.clone().unwrap_or_default();
    let on = |list: &[String]| !login_str.is_empty() && list.contains(&login_str);
    let (kind, listed) = if on(&lists.bots) {
        ("bot", true)
    } else if on(&lists.agents) {
        ("agent", true)
    } else if on(&lists.humans) {
        ("human", true)
    } else {
        match declared_kind.as_deref() {
            Some("agent") => ("agent", false),
            Some("bot") => ("bot", false),
            _ => ("human", false),
        }
    };
    let mut m = Map::default();
    m.insert(s("login"), login.map(|l| s(&l)).unwrap_or(Val::Null));
    m.insert(s("kind"), s(kind));
    m.insert(s("trusted"), Val::Bool(listed && delivery.verified));
    Val::obj(m)
}

/// The delivery's `Content-Type` as stored (the first one, as ingest reads it).
fn content_type(delivery: &StoredDelivery) -> Option<&str> {
    delivery
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-type"))
        .map(|h| h.value.as_str())
}

/// Builds the envelope `{source, kind, event, action, delivery_id, received_at, verified,
/// headers, payload}` (+ `actor` with the trusted-actors capability) from a stored delivery.
///
/// `.payload` is the JSON the body carries ([`switchboard_model::payload_json`]): a
/// form-encoded delivery's `payload` field, so it reaches rules exactly as its JSON twin.
pub fn build_envelope(delivery: &StoredDelivery, ctx: &RoutingContext) -> Val {
    build_envelope_reading(delivery, ctx, &Projection::Whole)
}

/// What building the envelope itself reads of the payload: the actor's login and kind.
pub fn envelope_reads() -> Projection {
    Projection::reading(&[
        &["payload", "actor", "login"],
        &["payload", "actor", "kind"],
        &["payload", "sender", "login"],
        &["payload", "sender", "type"],
    ])
}

/// [`build_envelope`] with `.payload` built only as far as `reads` reaches: what a sandbox
/// child evaluates. `reads` is what the configurations evaluated read of the envelope
/// ([`CompiledConfiguration::reads`](super::CompiledConfiguration::reads), which includes
/// [`envelope_reads`]); no rule can tell the result from the whole envelope.
pub fn build_envelope_reading(
    delivery: &StoredDelivery,
    ctx: &RoutingContext,
    reads: &Projection,
) -> Val {
    static TYPE_ONLY: Projection = Projection::TYPE;
    let payload_reads = reads.member(b"payload").unwrap_or(&TYPE_ONLY);
    let payload = match switchboard_model::payload_json(content_type(delivery), &delivery.body) {
        // The body itself: read in place, its plain strings shared rather than copied.
        Cow::Borrowed(_) => parse_payload_reading(&delivery.body, payload_reads),
        Cow::Owned(json) => parse_payload_reading(&Bytes::from(json), payload_reads),
    };
    let (event, action) = split_kind(&delivery.kind);
    // Only the headers some rule can read (`.headers["x-github-event"]`), all of them when a
    // rule can see the whole object.
    let mut headers = Map::default();
    if let Some(header_reads) = reads.member(b"headers") {
        for h in &delivery.headers {
            let name = h.name.to_ascii_lowercase();
            if is_secret_header(&name) || header_reads.member(name.as_bytes()).is_none() {
                continue;
            }
            let key = s(&name);
            let value = match headers.get(&key) {
                Some(Val::TStr(prev) | Val::BStr(prev)) => {
                    format!("{}, {}", String::from_utf8_lossy(&prev[..]), h.value)
                }
                _ => h.value.clone(),
            };
            headers.insert(key, s(&value));
        }
    }
    let mut m = Map::default();
    m.insert(s("source"), s(&delivery.source));
    m.insert(s("kind"), s(&delivery.kind));
    m.insert(s("event"), s(event));
    m.insert(s("action"), action.map(s).unwrap_or(Val::Null));
    m.insert(s("delivery_id"), s(&delivery.delivery_id));
    m.insert(
        s("received_at"),
        s(&rfc3339_millis(delivery.received_at_ms)),
    );
    m.insert(s("verified"), Val::Bool(delivery.verified));
    m.insert(s("headers"), Val::obj(headers));
    if ctx.trusted_actors_capability {
        m.insert(s("actor"), actor(delivery, &payload, ctx));
    }
    m.insert(s("payload"), payload);
    Val::obj(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_795_996_750_123),
            "2026-11-29T23:59:10.123Z"
        );
        assert_eq!(rfc3339_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn kinds_split_at_the_first_dot() {
        assert_eq!(
            split_kind("pull_request.opened"),
            ("pull_request", Some("opened"))
        );
        assert_eq!(split_kind("status"), ("status", None));
    }

    #[test]
    fn a_form_body_reaches_rules_as_its_payload_field() {
        use switchboard_proto::router::v1::Header;
        let header = |name: &str, value: &str| Header {
            name: name.into(),
            value: value.into(),
        };
        let mut delivery = StoredDelivery {
            kind: "issues.opened".into(),
            headers: vec![header("content-type", "application/x-www-form-urlencoded")],
            body: b"payload=%7B%22action%22%3A%22opened%22%7D".to_vec().into(),
            ..StoredDelivery::default()
        };
        let payload = |d: &StoredDelivery| {
            get(&build_envelope(d, &RoutingContext::default()), "payload").cloned()
        };
        let want =
            super::super::payload::parse_payload(&Bytes::from_static(br#"{"action":"opened"}"#));
        assert_eq!(payload(&delivery), Some(want.clone()));
        // Stored headers in any casing; the first Content-Type is the one.
        delivery.headers = vec![
            header(
                "Content-Type",
                "application/x-www-form-urlencoded; charset=utf-8",
            ),
            header("content-type", "application/json"),
        ];
        assert_eq!(payload(&delivery), Some(want));
        delivery.headers.reverse();
        assert!(matches!(payload(&delivery), Some(Val::TStr(_))));
    }
}
