//! Signature verification as each forge signs (`testkit/data/webhooks/headers.md`): HMAC-SHA256
//! keyed with the webhook's secret, in the forge's own header, over what that forge signs.
//! GitHub (and cairn and generic senders) sign the body as delivered, form-encoded or not.
//! Gitea and Forgejo sign the JSON text: for a form-encoded delivery (`payload=<JSON>`) that
//! is the decoded `payload` field ([`switchboard_model::payload_json`]), not the form body.
//!
//! Pure and total: every header value, however malformed, answers `false`, never an error.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::store::SourceType;

type HmacSha256 = Hmac<Sha256>;

/// How one header carries a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    /// `sha256=<hex>` (GitHub's `X-Hub-Signature-256`, also sent by Gitea and Forgejo).
    Prefixed,
    /// `<hex>` with no prefix (`X-Gitea-Signature`, `X-Forgejo-Signature`).
    Bare,
}

/// The headers a webhook of this source type accepts, most specific first. Gitea and Forgejo
/// also send GitHub's header, so it is accepted for them; the legacy SHA-1 headers never are.
fn accepted_headers(source: SourceType) -> &'static [(&'static str, Scheme)] {
    match source {
        SourceType::Forgejo => &[
            ("x-forgejo-signature", Scheme::Bare),
            ("x-gitea-signature", Scheme::Bare),
            ("x-hub-signature-256", Scheme::Prefixed),
        ],
        SourceType::Gitea => &[
            ("x-gitea-signature", Scheme::Bare),
            ("x-hub-signature-256", Scheme::Prefixed),
        ],
        SourceType::Github | SourceType::Cairn | SourceType::Generic => {
            &[("x-hub-signature-256", Scheme::Prefixed)]
        }
    }
}

/// The bytes a forge of this source type signs: Gitea and Forgejo sign the payload's JSON
/// text (a form delivery's `payload` field), everyone else the body as delivered.
fn signed_bytes<'a>(source: SourceType, body: &'a [u8], payload: &'a [u8]) -> &'a [u8] {
    match source {
        SourceType::Gitea | SourceType::Forgejo => payload,
        SourceType::Github | SourceType::Cairn | SourceType::Generic => body,
    }
}

/// Is the delivery signed with `secret`? [`verify_payload`] with the payload decoded here.
pub fn verify(source: SourceType, secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let payload =
        switchboard_model::payload_json(super::delivery::content_type(headers).as_deref(), body);
    verify_payload(source, secret, headers, body, &payload)
}

/// Is the delivery signed with `secret`, given its `payload` as
/// [`switchboard_model::payload_json`] makes it? True when any accepted header carries the
/// right HMAC: each is a proof of the secret on its own, so a wrong or empty one beside a
/// right one (Gitea sends empty digests when it has no secret) does not matter.
pub fn verify_payload(
    source: SourceType,
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    payload: &[u8],
) -> bool {
    let signed = signed_bytes(source, body, payload);
    accepted_headers(source).iter().any(|(name, scheme)| {
        headers.get_all(*name).iter().any(|value| {
            value
                .to_str()
                .is_ok_and(|v| matches(*scheme, v, secret, signed))
        })
    })
}

fn matches(scheme: Scheme, value: &str, secret: &str, body: &[u8]) -> bool {
    let hex_digest = match scheme {
        Scheme::Prefixed => match value.trim().strip_prefix("sha256=") {
            Some(rest) => rest,
            None => return false,
        },
        Scheme::Bare => value.trim(),
    };
    // A SHA-256 digest is exactly 64 hex characters; anything else is not a signature.
    if hex_digest.len() != 64 {
        return false;
    }
    let Ok(expected) = hex::decode(hex_digest) else {
        return false;
    };
    let Ok(mut mac) = HmacSha256::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&expected).is_ok()
}

/// HMAC-SHA256 of `body` keyed with `secret`, lower-case hex: what a forge puts in its header.
/// For operators' tools and tests that sign deliveries (a Gitea or Forgejo form delivery
/// signs its JSON, not the form body).
pub fn sign(secret: &str, body: &[u8]) -> String {
    match HmacSha256::new_from_slice(secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(body);
            hex::encode(mac.finalize().into_bytes())
        }
        // HMAC takes keys of any length; this arm is never reached.
        Err(_) => String::new(),
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

    /// The official vector from GitHub's "Validating webhook deliveries" page.
    #[test]
    fn github_documented_vector() {
        let secret = "It's a Secret to Everybody";
        let body = b"Hello, World!";
        let digest = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(sign(secret, body), digest);
        let h = headers(&[("X-Hub-Signature-256", &format!("sha256={digest}"))]);
        assert!(verify(SourceType::Github, secret, &h, body));
        assert!(!verify(SourceType::Github, secret, &h, b"Hello, World?"));
        assert!(!verify(SourceType::Github, "another secret", &h, body));
    }

    #[test]
    fn each_forge_reads_its_own_header() {
        let secret = "IsWishesWereHorsesWedAllBeEatingSteak!";
        let body = br#"{"a":1}"#;
        let digest = sign(secret, body);
        let gitea = headers(&[("X-Gitea-Signature", &digest)]);
        let forgejo = headers(&[("X-Forgejo-Signature", &digest)]);
        let hub = headers(&[("X-Hub-Signature-256", &format!("sha256={digest}"))]);
        assert!(verify(SourceType::Gitea, secret, &gitea, body));
        assert!(verify(SourceType::Gitea, secret, &hub, body));
        assert!(verify(SourceType::Forgejo, secret, &forgejo, body));
        assert!(verify(SourceType::Forgejo, secret, &hub, body));
        assert!(verify(SourceType::Cairn, secret, &hub, body));
        assert!(verify(SourceType::Generic, secret, &hub, body));
        // GitHub signs only with X-Hub-Signature-256.
        assert!(!verify(SourceType::Github, secret, &gitea, body));
        assert!(!verify(SourceType::Gitea, secret, &forgejo, body));
    }

    #[test]
    fn malformed_signatures_are_simply_unverified() {
        let secret = "a secret of some length";
        let body = b"{}";
        let digest = sign(secret, body);
        let upper = digest.to_uppercase();
        for (name, value) in [
            ("X-Hub-Signature-256", String::new()),
            ("X-Hub-Signature-256", "sha256=".to_string()),
            ("X-Hub-Signature-256", "sha256=abc".to_string()),
            ("X-Hub-Signature-256", format!("sha256={}", &digest[..63])),
            ("X-Hub-Signature-256", format!("sha256={digest}00")),
            ("X-Hub-Signature-256", format!("sha256={}zz", &digest[..62])),
            ("X-Hub-Signature-256", format!("sha1={digest}")),
            ("X-Hub-Signature-256", digest.clone()),
            ("X-Hub-Signature-256", format!("SHA256={digest}")),
            ("X-Gitea-Signature", format!("sha256={digest}")),
            ("X-Gitea-Signature", "é".repeat(32)),
        ] {
            let h = headers(&[(name, &value)]);
            assert!(
                !verify(SourceType::Gitea, secret, &h, body),
                "{name}: {value}"
            );
        }
        // Hex case does not change the bytes it stands for.
        let h = headers(&[("X-Gitea-Signature", &upper)]);
        assert!(verify(SourceType::Gitea, secret, &h, body));
    }

    #[test]
    fn a_right_signature_beside_empty_ones_verifies() {
        let secret = "a secret of some length";
        let body = b"{}";
        let h = headers(&[
            ("X-Gitea-Signature", ""),
            ("X-Hub-Signature-256", "sha256="),
            (
                "X-Hub-Signature-256",
                &format!("sha256={}", sign(secret, body)),
            ),
        ]);
        assert!(verify(SourceType::Gitea, secret, &h, body));
    }

    /// Form-encoded (`payload=<JSON>`): GitHub signs the body as delivered, Gitea and Forgejo
    /// the JSON inside it, in every header they sign with.
    #[test]
    fn form_deliveries_are_verified_as_each_forge_signs_them() {
        let secret = "a secret of some length";
        let json = br#"{"action":"opened","n":1}"#;
        let form = b"payload=%7B%22action%22%3A%22opened%22%2C%22n%22%3A1%7D";
        let form_type = (
            "Content-Type",
            "application/x-www-form-urlencoded; charset=utf-8",
        );
        let over_json = sign(secret, json);
        let over_form = sign(secret, form);

        let github = |digest: &str| {
            headers(&[
                form_type,
                ("X-Hub-Signature-256", &format!("sha256={digest}")),
            ])
        };
        assert!(verify(
            SourceType::Github,
            secret,
            &github(&over_form),
            form
        ));
        assert!(!verify(
            SourceType::Github,
            secret,
            &github(&over_json),
            form
        ));
        for source in [SourceType::Cairn, SourceType::Generic] {
            assert!(verify(source, secret, &github(&over_form), form));
            assert!(!verify(source, secret, &github(&over_json), form));
        }

        for (source, header) in [
            (SourceType::Gitea, "X-Gitea-Signature"),
            (SourceType::Forgejo, "X-Forgejo-Signature"),
            (SourceType::Forgejo, "X-Gitea-Signature"),
        ] {
            let bare = |digest: &str| headers(&[form_type, (header, digest)]);
            assert!(verify(source, secret, &bare(&over_json), form), "{header}");
            assert!(!verify(source, secret, &bare(&over_form), form), "{header}");
            assert!(verify(source, secret, &github(&over_json), form));
            assert!(!verify(source, secret, &github(&over_form), form));
            // Without the form content type the body is what is signed, as for JSON.
            let plain = headers(&[(header, &over_form)]);
            assert!(verify(source, secret, &plain, form), "{header}");
            let plain = headers(&[(header, &over_json)]);
            assert!(!verify(source, secret, &plain, form), "{header}");
            // A form with no usable `payload` field is signed as its body.
            let junk = b"payload=%FF";
            let h = headers(&[form_type, (header, &sign(secret, junk))]);
            assert!(verify(source, secret, &h, junk), "{header}");
        }
    }

    /// The vectors go-playground/webhooks uses over the real Gitea payloads (headers.md §4).
    #[test]
    fn gitea_vectors_over_real_payloads() {
        let dir = switchboard_testkit::payloads_dir::webhooks_dir().join("gitea");
        let secret = "IsWishesWereHorsesWedAllBeEatingSteak!";
        for (file, digest) in [
            (
                "create.json",
                "6f250ac7a090096574758e31bd31770eab63dfd0459404f0c18431f1c6b9024a",
            ),
            (
                "issues.opened.json",
                "98c44fd0ae42ca4208eac6f81e59b436837740abc8693bf828366b32d33b1cbc",
            ),
            (
                "pull_request.opened.json",
                "65c18a212efc7bde0f336acaec87f596fe20e80b2a0e7e51a790dd38393ff771",
            ),
        ] {
            let Ok(body) = std::fs::read(dir.join(file)) else {
                panic!(
                    "the real payloads are beside the repository: {}",
                    dir.display()
                );
            };
            assert_eq!(sign(secret, &body), digest, "{file}");
            let h = headers(&[("X-Gitea-Signature", digest)]);
            assert!(verify(SourceType::Gitea, secret, &h, &body), "{file}");
        }
    }
}
