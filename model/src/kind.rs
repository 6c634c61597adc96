//! A delivery's kind, `<event>` or `<event>.<action>`: one definition for ingest, dry runs
//! and pack fixtures, so a payload is classified the same way wherever it is routed.
//!
//! Pure and total: hostile headers and bodies give a fallback value, never an error or a panic.

use std::fmt;
use std::str::FromStr;

use crate::body::{MAX_BODY_DEPTH, json_depth};

/// Longest event or action name kept; longer ones are cut (a kind is at most 129 bytes).
const MAX_NAME: usize = 64;

/// The event of a delivery from a forge or sender that names none.
pub const UNKNOWN_EVENT: &str = "unknown";

/// The forge (or internal system) a webhook receives deliveries from; decides how signatures
/// are checked and how the event kind is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceType {
    Forgejo,
    Gitea,
    Github,
    Cairn,
    Generic,
}

impl SourceType {
    pub const ALL: [SourceType; 5] = [
        SourceType::Forgejo,
        SourceType::Gitea,
        SourceType::Github,
        SourceType::Cairn,
        SourceType::Generic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceType::Forgejo => "forgejo",
            SourceType::Gitea => "gitea",
            SourceType::Github => "github",
            SourceType::Cairn => "cairn",
            SourceType::Generic => "generic",
        }
    }

    /// Headers naming the event, in the order they are read. Gitea and Forgejo also send
    /// `X-GitHub-Event`, so their own headers come first (docs/headers.md); an empty coarse
    /// event (Gitea's `package`, Forgejo's `schedule`) falls back to the fine event type.
    pub fn event_headers(self) -> &'static [&'static str] {
        match self {
            SourceType::Github | SourceType::Gitea | SourceType::Forgejo => &[
                "x-forgejo-event",
                "x-forgejo-event-type",
                "x-gitea-event",
                "x-gitea-event-type",
                "x-github-event",
            ],
            SourceType::Cairn | SourceType::Generic => &["x-switchboard-event", "x-github-event"],
        }
    }

    /// Headers carrying the sender's delivery id, most specific first.
    pub fn delivery_headers(self) -> &'static [&'static str] {
        match self {
            SourceType::Github | SourceType::Gitea | SourceType::Forgejo => &[
                "x-forgejo-delivery",
                "x-gitea-delivery",
                "x-github-delivery",
            ],
            SourceType::Cairn | SourceType::Generic => {
                &["x-switchboard-delivery", "x-github-delivery"]
            }
        }
    }

    /// The event of a delivery no header names, when the source has one of its own (a cairn
    /// webhook's deliveries are hand-offs).
    pub fn default_event(self) -> Option<&'static str> {
        match self {
            SourceType::Cairn => Some("handoff"),
            _ => None,
        }
    }
}

impl fmt::Display for SourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SourceType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        SourceType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                format!("{s:?} is not a source type (forgejo, gitea, github, cairn, generic)")
            })
    }
}

/// The event a delivery names: the first of the source's event headers with a value
/// (`header` looks one up by its lower-case name), else the source's own default; `None`
/// when neither names one (ingest then records [`UNKNOWN_EVENT`]).
pub fn event<'h>(source: SourceType, header: impl Fn(&str) -> Option<&'h str>) -> Option<String> {
    source
        .event_headers()
        .iter()
        .find_map(|name| header(name).map(str::trim).filter(|v| !v.is_empty()))
        .and_then(clean_name)
        .or_else(|| source.default_event().map(str::to_string))
}

/// `<event>` or `<event>.<action>`: `action` is the payload's top-level `action` when the
/// payload (what [`crate::payload_json`] makes of the body) is a JSON object whose `action`
/// is a string.
pub fn kind(event: &str, payload: &[u8]) -> String {
    let event = clean_name(event).unwrap_or_else(|| UNKNOWN_EVENT.to_string());
    match action(payload) {
        Some(a) => format!("{event}.{a}"),
        None => event,
    }
}

/// A name safe inside a kind: letters, digits, `_` and `-` kept, anything else (a `.` would
/// split the kind) becomes `_`; cut to 64 characters.
fn clean_name(raw: &str) -> Option<String> {
    let cleaned: String = raw
        .chars()
        .take(MAX_NAME)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (!cleaned.is_empty()).then_some(cleaned)
}

/// The top-level `action` of a payload's JSON text. A payload nested deeper than the router
/// reads ([`MAX_BODY_DEPTH`]) has none, as the router's envelope sees it as text; so has one
/// that is not JSON (plain text, a form without a `payload` field). Only `action` is kept
/// while reading: everything else is skipped, so a 25 MiB push costs no parsed copy.
pub fn action(payload: &[u8]) -> Option<String> {
    if json_depth(payload) > MAX_BODY_DEPTH {
        return None;
    }
    let TopAction(action) = serde_json::from_slice(payload).ok()?;
    action.as_deref().and_then(clean_name)
}

/// A JSON object's top-level `action` when it is a string; any other JSON has none.
struct TopAction(Option<String>);

impl<'de> serde::Deserialize<'de> for TopAction {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = TopAction;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<TopAction, A::Error> {
                let mut action = None;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "action" {
                        // The last one wins, as in a parsed value.
                        action = map
                            .next_value::<serde_json::Value>()?
                            .as_str()
                            .map(str::to_string);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(TopAction(action))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<TopAction, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(TopAction(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<TopAction, E> {
                Ok(TopAction(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<TopAction, E> {
                Ok(TopAction(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<TopAction, E> {
                Ok(TopAction(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<TopAction, E> {
                Ok(TopAction(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<TopAction, E> {
                Ok(TopAction(None))
            }
            fn visit_unit<E>(self) -> Result<TopAction, E> {
                Ok(TopAction(None))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_from_the_sources_headers_in_order() {
        let headers = [
            ("x-github-event", "pull_request"),
            ("x-gitea-event", "issues"),
        ];
        let header = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(event(SourceType::Gitea, header).as_deref(), Some("issues"));
        assert_eq!(event(SourceType::Github, header).as_deref(), Some("issues"));
        // A generic webhook reads its own header first, then GitHub's.
        assert_eq!(
            event(SourceType::Generic, header).as_deref(),
            Some("pull_request")
        );
        assert_eq!(
            event(SourceType::Cairn, |_| None).as_deref(),
            Some("handoff")
        );
        assert_eq!(event(SourceType::Github, |_| None), None);
        assert_eq!(event(SourceType::Github, |_| Some("  ")), None);
    }

    #[test]
    fn kinds_join_a_clean_event_and_a_string_action() {
        assert_eq!(kind("issues", br#"{"action":"opened"}"#), "issues.opened");
        assert_eq!(kind("issues", br#"{"action":""}"#), "issues");
        assert_eq!(kind("issues", br#"{"action":1}"#), "issues");
        assert_eq!(kind("a.b c", br#"{"action":"x.y"}"#), "a_b_c.x_y");
        assert_eq!(kind("", b"not json"), UNKNOWN_EVENT);
        assert_eq!(kind(&"e".repeat(500), b"{}").len(), MAX_NAME);
    }

    #[test]
    fn source_types_read_back_from_their_names() {
        for t in SourceType::ALL {
            assert_eq!(t.as_str().parse::<SourceType>(), Ok(t));
        }
        assert!("gitlab".parse::<SourceType>().is_err());
    }
}
