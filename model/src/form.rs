//! Form-encoded deliveries: GitHub, Gitea and Forgejo can POST
//! `application/x-www-form-urlencoded` with the body `payload=<url-encoded JSON>`.
//!
//! The stored event keeps the body as received; what the payload *is* (for rules, for the
//! kind, for Gitea's and Forgejo's signatures) is derived from it here, and only here, so live
//! ingest, dry runs and replays of stored events all see the same JSON.

use std::borrow::Cow;

/// The media type of a form-encoded delivery.
pub const FORM_URLENCODED: &str = "application/x-www-form-urlencoded";

/// The form field a forge puts the JSON in.
const PAYLOAD_FIELD: &str = "payload";

/// Is `content_type` form-encoded? Compares the media type, before any `;` parameters
/// (`; charset=utf-8`), case-insensitively, as HTTP defines media types.
pub fn is_form_urlencoded(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(FORM_URLENCODED))
}

/// The JSON text a delivery's payload is: for a form-encoded body, the url-decoded `payload`
/// field; otherwise the body itself.
///
/// Total: a form body without a `payload` field, or whose field is not UTF-8 once decoded,
/// gives the body unchanged (rules then see it as text, as any body that is not JSON). The
/// result is not checked to be JSON; callers parse it as they parse any body.
pub fn payload_json<'a>(content_type: Option<&str>, body: &'a [u8]) -> Cow<'a, [u8]> {
    if !is_form_urlencoded(content_type) {
        return Cow::Borrowed(body);
    }
    match form_field(body, PAYLOAD_FIELD) {
        Some(json) => Cow::Owned(json.into_bytes()),
        None => Cow::Borrowed(body),
    }
}

/// The first field called `name`, decoded, when it decodes to UTF-8 exactly.
///
/// Pairs are split as `form_urlencoded` splits them (on `&`, empty ones skipped, the name
/// ending at the first `=`), one at a time, so the field's raw text is at hand for
/// [`decoded_exactly`].
fn form_field(body: &[u8], name: &str) -> Option<String> {
    let (pair, value) = body
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .find_map(|pair| {
            let (key, value) = form_urlencoded::parse(pair).next()?;
            (key == name).then_some((pair, value))
        })?;
    let raw = pair.splitn(2, |&b| b == b'=').nth(1).unwrap_or_default();
    decoded_exactly(raw, &value).then(|| value.into_owned())
}

/// Did `form_urlencoded` decode `raw` to `decoded` without replacing anything?
///
/// It decodes bytes that are not UTF-8 to U+FFFD rather than failing. A U+FFFD the text
/// spells, as the character itself or as `%EF%BF%BD` (any case), always decodes to exactly
/// one (its first byte starts a sequence, so nothing before it can swallow it); every other
/// U+FFFD stands for bytes that are not UTF-8. So the decoding is exact when the raw text is
/// UTF-8 and the counts agree.
fn decoded_exactly(raw: &[u8], decoded: &str) -> bool {
    let Ok(raw) = std::str::from_utf8(raw) else {
        return false;
    };
    let replaced = decoded.matches('\u{FFFD}').count();
    if replaced == 0 {
        return true;
    }
    let spelled =
        raw.matches('\u{FFFD}').count() + raw.to_ascii_uppercase().matches("%EF%BF%BD").count();
    replaced == spelled
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORM: Option<&str> = Some(FORM_URLENCODED);

    /// Encodes as Go's `url.Values.Encode` does (Gitea and Forgejo), independently of the
    /// decoder under test: unreserved bytes kept, space as `+`, the rest `%XX`.
    fn form_body(json: &[u8]) -> Vec<u8> {
        let mut out = b"payload=".to_vec();
        for &b in json {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b),
                b' ' => out.push(b'+'),
                _ => out.extend_from_slice(format!("%{b:02X}").as_bytes()),
            }
        }
        out
    }

    #[test]
    fn json_bodies_are_the_payload_as_they_are() {
        let body = br#"{"action":"opened"}"#;
        for ct in [None, Some("application/json"), Some(""), Some("text/plain")] {
            let got = payload_json(ct, body);
            assert!(matches!(got, Cow::Borrowed(_)), "{ct:?}");
            assert_eq!(&got[..], body);
        }
        // A JSON delivery whose body looks like a form is still its body.
        assert_eq!(
            &payload_json(Some("application/json"), b"payload=%7B%7D")[..],
            b"payload=%7B%7D"
        );
    }

    #[test]
    fn the_form_content_type_is_matched_as_a_media_type() {
        for ct in [
            "application/x-www-form-urlencoded",
            "application/x-www-form-urlencoded; charset=utf-8",
            "Application/X-WWW-Form-URLEncoded;charset=UTF-8",
            "  application/x-www-form-urlencoded ; charset=utf-8",
        ] {
            assert!(is_form_urlencoded(Some(ct)), "{ct}");
            assert_eq!(
                &payload_json(Some(ct), b"payload=%7B%7D")[..],
                b"{}",
                "{ct}"
            );
        }
        for ct in [
            "application/x-www-form-urlencodedx",
            "application/json; x=application/x-www-form-urlencoded",
            "multipart/form-data",
            "",
        ] {
            assert!(!is_form_urlencoded(Some(ct)), "{ct}");
        }
        assert!(!is_form_urlencoded(None));
    }

    #[test]
    fn a_form_body_gives_the_decoded_payload_field() {
        let json = "{\n  \"action\": \"opened\",\n  \"title\": \"a+b & c=d 100% é ✓ \u{FFFD}\"\n}";
        let body = form_body(json.as_bytes());
        assert_eq!(&payload_json(FORM, &body)[..], json.as_bytes());
        // Other fields around it, `+` for spaces, lower-case escapes, an encoded name.
        assert_eq!(
            &payload_json(FORM, b"a=1&&payload=%7b%22x%22%3A+1%7D&b=2")[..],
            br#"{"x": 1}"#
        );
        assert_eq!(&payload_json(FORM, b"pay%6Coad=%5B%5D")[..], b"[]");
        // The first `payload` field is the one.
        assert_eq!(&payload_json(FORM, b"payload=1&payload=2")[..], b"1");
        // A spelled U+FFFD, literally or escaped, is kept.
        assert_eq!(
            &payload_json(FORM, "payload=\u{FFFD}%ef%bf%bd".as_bytes())[..],
            "\u{FFFD}\u{FFFD}".as_bytes()
        );
        // An empty field is an empty payload, not the body.
        assert_eq!(&payload_json(FORM, b"payload=")[..], b"");
        assert_eq!(&payload_json(FORM, b"payload")[..], b"");
        assert_eq!(&payload_json(FORM, b"%70ayload")[..], b"");
    }

    #[test]
    fn a_form_body_without_a_usable_payload_field_is_the_body() {
        let cases: Vec<&[u8]> = vec![
            b"",
            b"&&&",
            b"other=%7B%7D",
            b"payloadx=1",
            b"not a form at all",
            br#"{"action":"opened"}"#,
            // Not UTF-8 once decoded, or not UTF-8 at all.
            b"payload=%FF",
            b"payload=%C3",
            b"payload=%C3%28",
            b"payload=%ED%A0%80",
            b"payload=%EF%BF",
            b"payload=%EF%BF%EF%BF%BD",
            b"payload=%E0%EF%BF%BD",
            b"payload=%25EF%BF%BD",
            b"payload=\xff",
            b"payload=\xef\xbf\xbd%80",
            b"x=%EF%BF%BD&payload=%FF",
            b"payload=%FF&payload=%7B%7D",
        ];
        for body in cases {
            let got = payload_json(FORM, body);
            assert!(
                matches!(got, Cow::Borrowed(_)),
                "{:?}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(&got[..], body);
        }
        // A dangling or broken escape is kept as text, as form decoding defines.
        assert_eq!(&payload_json(FORM, b"payload=%zz%2")[..], b"%zz%2");
    }

    #[test]
    fn the_real_payloads_round_trip_through_a_form() {
        // testkit/src/payloads_dir.rs, which this crate does not depend on.
        let dir = std::env::var_os("SWITCHBOARD_WEBHOOK_DATA")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testkit/data/webhooks")
            });
        let mut seen = 0;
        for forge in ["github", "gitea", "forgejo"] {
            let Ok(files) = std::fs::read_dir(dir.join(forge)) else {
                panic!("the real payloads are in {}", dir.display());
            };
            for file in files.flatten() {
                let Ok(json) = std::fs::read(file.path()) else {
                    continue;
                };
                let body = form_body(&json);
                assert_eq!(
                    &payload_json(FORM, &body)[..],
                    &json[..],
                    "{}",
                    file.path().display()
                );
                seen += 1;
            }
        }
        assert!(seen > 50, "{seen} payloads");
    }

    #[test]
    fn nothing_panics_on_any_short_input() {
        let alphabet: &[u8] = b"pa=&%+EFBD\xef\xbf\xbd\xff0";
        let mut body = Vec::new();
        for n in 0u32..20_000 {
            body.clear();
            let mut k = n;
            for _ in 0..6 {
                body.push(alphabet[(k as usize) % alphabet.len()]);
                k /= alphabet.len() as u32;
            }
            let mut form = b"payload=".to_vec();
            form.extend_from_slice(&body);
            for input in [&body, &form] {
                let got = payload_json(FORM, input);
                // The result is the body, or UTF-8.
                assert!(
                    matches!(got, Cow::Borrowed(_)) || std::str::from_utf8(&got).is_ok(),
                    "{input:?}"
                );
            }
        }
    }
}
