//! Random ids, credentials and tokens, their SHA-256 hashes, and the configuration digest.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{Error, Result};

/// `n` random bytes from the operating system, hex-encoded.
pub fn random_hex(n: usize) -> Result<String> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).map_err(|e| Error::internal(format!("os random source: {e}")))?;
    Ok(hex::encode(buf))
}

/// A fresh id: `prefix` and 128 random bits, so ids can't be guessed or enumerated.
pub fn new_id(prefix: &str) -> Result<String> {
    Ok(format!("{prefix}{}", random_hex(16)?))
}

/// A fresh id that sorts by when it was made: `prefix`, the time in milliseconds (12 hex
/// digits) and 80 random bits — as long as [`new_id`]'s, as unguessable in practice. For the
/// rows made at ingest's rate (events, todos): a random id puts each new row's index entry on
/// a page of its own, so a batch of deliveries dirtied and wrote a page per delivery in every
/// index keyed by id, and more of them the bigger the table; a time-ordered one appends.
pub fn new_ordered_id(prefix: &str) -> Result<String> {
    // 12 hex digits hold milliseconds until the year 10889.
    let ms = u64::try_from(crate::Clock::system().now_ms()).unwrap_or(0) & 0xffff_ffff_ffff;
    Ok(format!("{prefix}{ms:012x}{}", random_hex(10)?))
}

/// A fresh bearer secret (endpoint credential, plan token): `prefix` and 256 random bits.
pub fn new_token(prefix: &str) -> Result<String> {
    Ok(format!("{prefix}{}", random_hex(32)?))
}

/// A fresh bearer credential of the kind `prefix` names (`sbe_` endpoints, `sbo_` operators)
/// and the hash stored in its place: the one way every credential kind is made.
pub fn mint_credential(prefix: &str) -> Result<(String, String)> {
    let credential = new_token(prefix)?;
    let hash = sha256_hex(&credential);
    Ok((credential, hash))
}

/// SHA-256 of `text`, lower-case hex: what is stored in place of a credential or token.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Compares two hashes in constant time, so a lookup leaks nothing about how much matched.
pub fn hashes_match(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The digest of a configuration: SHA-256 of its canonical JSON (keys sorted at every level).
///
/// Written to agree with the router's `Configuration::digest` when given the serialized form
/// of a router `Configuration`, so a digest means the same thing on both planes.
pub fn configuration_digest(value: &serde_json::Value) -> String {
    sha256_hex(&canonical_json(value))
}

/// Compact JSON with object keys sorted, so equal values always serialize the same — the
/// model's canonical form, so control's digests agree with the router's.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    switchboard_model::write_canonical(value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ordered_ids_are_as_long_as_random_ones_and_sort_by_time() {
        let a = new_ordered_id("ev_").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_ordered_id("ev_").unwrap();
        assert_eq!(a.len(), new_id("ev_").unwrap().len());
        assert!(a.starts_with("ev_") && a[3..].bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(a < b, "{a} then {b}");
        assert_ne!(a[15..], b[15..], "the random part differs");
    }

    #[test]
    fn ids_and_tokens_carry_enough_randomness() {
        let id = new_id("wh_").unwrap();
        assert_eq!(id.len(), 3 + 32);
        let token = new_token("sbe_").unwrap();
        assert_eq!(token.len(), 4 + 64);
        assert_ne!(new_id("wh_").unwrap(), id);
    }

    #[test]
    fn hashes_compare_exactly() {
        let h = sha256_hex("x");
        assert!(hashes_match(&h, &sha256_hex("x")));
        assert!(!hashes_match(&h, &sha256_hex("y")));
        assert!(!hashes_match(&h, ""));
    }

    #[test]
    fn digest_ignores_key_order() {
        let a = json!({"rules": [], "params": {"a": 1, "b": [1, {"y": 1, "x": 2}]}});
        let b = json!({"params": {"b": [1, {"x": 2, "y": 1}], "a": 1}, "rules": []});
        assert_eq!(configuration_digest(&a), configuration_digest(&b));
        assert_ne!(
            configuration_digest(&a),
            configuration_digest(&json!({"rules": []}))
        );
        assert_eq!(
            canonical_json(&b),
            r#"{"params":{"a":1,"b":[1,{"x":2,"y":1}]},"rules":[]}"#
        );
    }
}
