//! The headers each forge sends with a delivery, for tests and benchmarks that POST real
//! payloads to ingest (testkit/data/webhooks/headers.md).

/// The headers `forge` sends with a delivery, signed with `digest` (lower-case hex HMAC-SHA256
/// of the body) the way that forge signs: GitHub in `X-Hub-Signature-256: sha256=<hex>`;
/// Gitea in `X-Gitea-Signature` (and the Gogs and Hub copies); Forgejo in
/// `X-Forgejo-Signature` and every Gitea header too (headers.md).
pub fn forge_headers(
    forge: &str,
    event: &str,
    delivery_id: &str,
    digest: &str,
) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = vec![("Content-Type".into(), "application/json".into())];
    let mut add = |name: &str, value: &str| h.push((name.to_string(), value.to_string()));
    match forge {
        "github" => {
            add("User-Agent", "GitHub-Hookshot/044aadd");
            add("X-GitHub-Hook-ID", "292430182");
            add("X-GitHub-Event", event);
            add("X-GitHub-Delivery", delivery_id);
            add("X-Hub-Signature-256", &format!("sha256={digest}"));
        }
        "gitea" | "forgejo" => {
            if forge == "forgejo" {
                add("X-Forgejo-Delivery", delivery_id);
                add("X-Forgejo-Event", event);
                add("X-Forgejo-Event-Type", event);
                add("X-Forgejo-Signature", digest);
            }
            add("X-Gitea-Delivery", delivery_id);
            add("X-Gitea-Event", event);
            add("X-Gitea-Event-Type", event);
            add("X-Gitea-Signature", digest);
            add("X-Gogs-Delivery", delivery_id);
            add("X-Gogs-Event", event);
            add("X-Gogs-Event-Type", event);
            add("X-Gogs-Signature", digest);
            add("X-GitHub-Delivery", delivery_id);
            add("X-GitHub-Event", event);
            add("X-GitHub-Event-Type", event);
            add("X-Hub-Signature-256", &format!("sha256={digest}"));
        }
        // Test support: an unknown forge is a typo in a test.
        other => panic!("no forge {other}"),
    }
    h
}

/// A form-encoded delivery's body: `payload=` and `json` encoded as Go's `url.Values.Encode`
/// does (Gitea, Forgejo): unreserved bytes kept, space as `+`, every other byte `%XX`.
/// Written apart from the decoder the tests check (`switchboard_model::payload_json`).
pub fn form_body(json: &[u8]) -> Vec<u8> {
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
