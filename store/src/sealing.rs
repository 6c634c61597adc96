//! Webhook signing secrets sealed at rest (issue 16): XChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`) under a 256-bit key the operator holds outside the database, so a
//! dump or a backup lets no one forge deliveries.
//!
//! A sealed secret is text, `sealed:v1:<key id>:<base64 of nonce ‖ ciphertext>`: a fresh
//! random 192-bit nonce each time, and the webhook's id as associated data, so a sealed value
//! copied onto another row does not open. The key id (the first 16 hex digits of the key's
//! SHA-256) names which key sealed it, so opening with another key is a clear error that
//! says which key is needed, never a silent `verified: false`.
//!
//! The key is 64 hex digits: in a file (`switchboard up` creates one, mode 0600, in its data
//! directory) or in `SWITCHBOARD_SECRET_KEY`.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// What every sealed secret starts with.
pub const SEALED_PREFIX: &str = "sealed:v1:";
const NONCE_BYTES: usize = 24;

/// The key that seals webhook secrets. Never printed: `Debug` shows its id only.
#[derive(Clone)]
pub struct SealingKey {
    cipher: XChaCha20Poly1305,
    id: String,
}

impl fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealingKey").field("id", &self.id).finish()
    }
}

fn key_error(message: impl Into<String>) -> Error {
    Error::invalid("secret_key", message)
}

impl SealingKey {
    fn from_bytes(bytes: &[u8; 32]) -> Self {
        let digest = hex::encode(Sha256::digest(bytes));
        Self {
            cipher: XChaCha20Poly1305::new(bytes.into()),
            id: digest[..16].to_string(),
        }
    }

    /// A fresh key from the operating system's random source.
    pub fn generate() -> Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::internal(format!("os random source: {e}")))?;
        Ok(Self::from_bytes(&bytes))
    }

    /// A fresh key in its text form (64 hex digits), for a key file or the environment.
    pub fn generate_hex() -> Result<String> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::internal(format!("os random source: {e}")))?;
        Ok(hex::encode(bytes))
    }

    /// A key from its text form: 64 hex digits, surrounding whitespace ignored.
    pub fn from_hex(text: &str) -> Result<Self> {
        let text = text.trim();
        let bytes =
            hex::decode(text).map_err(|_| key_error("a secret key is 64 hex digits (256 bits)"))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| key_error("a secret key is 64 hex digits (256 bits)"))?;
        Ok(Self::from_bytes(&bytes))
    }

    /// Reads a key file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            key_error(format!(
                "cannot read the secret key file {}: {e}",
                path.display()
            ))
        })?;
        Self::from_hex(&text)
            .map_err(|_| key_error(format!("{}: not 64 hex digits", path.display())))
    }

    /// Reads the key file at `path`, or creates it (mode 0600) with a fresh key.
    pub fn load_or_create(path: &Path) -> Result<Self> {
        if path.exists() {
            return Self::load(path);
        }
        let text = Self::generate_hex()?;
        write_private(path, &format!("{text}\n"))?;
        Self::from_hex(&text)
    }

    /// The key's id: which key sealed a secret, without revealing the key.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Seals `secret` for the row `owner` (the webhook id).
    pub fn seal(&self, owner: &str, secret: &str) -> Result<String> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce)
            .map_err(|e| Error::internal(format!("os random source: {e}")))?;
        let sealed = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: secret.as_bytes(),
                    aad: owner.as_bytes(),
                },
            )
            .map_err(|_| Error::internal("sealing a secret failed"))?;
        let mut blob = nonce.to_vec();
        blob.extend_from_slice(&sealed);
        Ok(format!(
            "{SEALED_PREFIX}{}:{}",
            self.id,
            STANDARD_NO_PAD.encode(blob)
        ))
    }

    /// Opens what [`SealingKey::seal`] made for `owner`.
    pub fn open(&self, owner: &str, sealed: &str) -> Result<String> {
        let rest = sealed.strip_prefix(SEALED_PREFIX).ok_or_else(|| {
            Error::internal(
                "a webhook secret is not sealed (the start-up sealing pass did not run)",
            )
        })?;
        let (id, blob) = rest
            .split_once(':')
            .ok_or_else(|| Error::internal("a sealed webhook secret is malformed"))?;
        if id != self.id {
            return Err(Error::internal(format!(
                "a webhook secret was sealed with key {id}, and this key is {}",
                self.id
            )));
        }
        let blob = STANDARD_NO_PAD
            .decode(blob)
            .map_err(|_| Error::internal("a sealed webhook secret is malformed"))?;
        if blob.len() < NONCE_BYTES {
            return Err(Error::internal("a sealed webhook secret is malformed"));
        }
        let (nonce, ciphertext) = blob.split_at(NONCE_BYTES);
        let plain = self
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: owner.as_bytes(),
                },
            )
            .map_err(|_| Error::internal("a sealed webhook secret does not open with this key"))?;
        String::from_utf8(plain).map_err(|_| Error::internal("a sealed webhook secret is not text"))
    }
}

/// The key id a sealed value names, if it is sealed.
pub fn sealed_by(sealed: &str) -> Option<&str> {
    sealed
        .strip_prefix(SEALED_PREFIX)
        .and_then(|rest| rest.split_once(':'))
        .map(|(id, _)| id)
}

/// Writes `text` to a new file only its owner can read (0600 from creation, never wider).
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| key_error(format!("cannot create {}: {e}", path.display())))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| key_error(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_its_row() {
        let key = SealingKey::generate().unwrap();
        let sealed = key.seal("wh_1", "s3cret-s3cret-s3cret").unwrap();
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("s3cret"));
        assert_eq!(sealed_by(&sealed), Some(key.id()));
        assert_eq!(key.open("wh_1", &sealed).unwrap(), "s3cret-s3cret-s3cret");
        // Another row's associated data, another key, a tampered byte: refused, clearly.
        assert!(key.open("wh_2", &sealed).is_err());
        let other = SealingKey::generate().unwrap();
        let e = other.open("wh_1", &sealed).unwrap_err();
        assert!(e.log_text().contains(key.id()), "{}", e.log_text());
        let mut tampered = sealed.clone();
        tampered.pop();
        tampered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert!(key.open("wh_1", &tampered).is_err());
        assert!(key.open("wh_1", "plain-text-secret").is_err());
    }

    #[test]
    fn each_seal_uses_a_fresh_nonce() {
        let key = SealingKey::generate().unwrap();
        assert_ne!(
            key.seal("wh_1", "x").unwrap(),
            key.seal("wh_1", "x").unwrap()
        );
    }

    #[test]
    fn keys_read_from_hex_and_files() {
        let key = SealingKey::generate().unwrap();
        assert!(SealingKey::from_hex("abc").is_err());
        assert!(SealingKey::from_hex(&"z".repeat(64)).is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.key");
        let made = SealingKey::load_or_create(&path).unwrap();
        let again = SealingKey::load_or_create(&path).unwrap();
        assert_eq!(made.id(), again.id(), "the file is reused");
        assert_ne!(made.id(), key.id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let sealed = made.seal("wh_1", "secret").unwrap();
        assert_eq!(again.open("wh_1", &sealed).unwrap(), "secret");
    }
}
