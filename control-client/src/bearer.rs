//! The caller's own credential, carried on each call to control. A client holds no credential
//! of its own, so it can do nothing its caller could not do by calling control directly.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tonic::Status;
use tonic::metadata::{Ascii, MetadataValue};

/// An endpoint credential as the caller presented it. Never logged: `Debug` shows only a
/// short digest, enough to tell two callers apart in a trace.
///
/// It also counts the control calls made with it: the gateway makes one `Bearer` per HTTP
/// request, so it knows whether a request reached control (and so paid its unit of the
/// endpoint's budget).
#[derive(Clone)]
pub struct Bearer(String, Arc<AtomicUsize>);

impl PartialEq for Bearer {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for Bearer {}

impl Bearer {
    /// The credential from an `Authorization` header value, if it is `Bearer <credential>`.
    pub fn from_header(value: &str) -> Option<Bearer> {
        let (scheme, credential) = value.trim().split_once(' ')?;
        let credential = credential.trim();
        let well_formed = scheme.eq_ignore_ascii_case("bearer")
            && !credential.is_empty()
            && credential.bytes().all(|b| b.is_ascii_graphic());
        well_formed.then(|| Bearer::new(credential))
    }

    pub fn new(credential: impl Into<String>) -> Bearer {
        Bearer(credential.into(), Arc::default())
    }

    /// How many control calls were made with this bearer.
    pub fn control_calls(&self) -> usize {
        self.1.load(Ordering::Relaxed)
    }

    /// sha256 of the credential (hex): what may appear in logs and keys, never the credential.
    pub fn digest(&self) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(self.0.as_bytes()))
    }

    /// The `authorization` header value of a call.
    pub(crate) fn metadata(&self) -> Result<MetadataValue<Ascii>, Status> {
        format!("Bearer {}", self.0)
            .parse()
            .map_err(|_| Status::unauthenticated("the credential is not valid header text"))
    }

    /// Counts one control call made with this bearer.
    pub(crate) fn count_call(&self) {
        self.1.fetch_add(1, Ordering::Relaxed);
    }
}

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digest = self.digest();
        write!(f, "Bearer(sha256:{}…)", &digest[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_is_read_strictly() {
        assert_eq!(
            Bearer::from_header("Bearer sbe_x"),
            Some(Bearer::new("sbe_x"))
        );
        assert_eq!(
            Bearer::from_header("bearer  sbe_x "),
            Some(Bearer::new("sbe_x"))
        );
        assert_eq!(Bearer::from_header("Basic sbe_x"), None);
        assert_eq!(Bearer::from_header("Bearer "), None);
        assert_eq!(Bearer::from_header("sbe_x"), None);
        assert_eq!(Bearer::from_header("Bearer a b"), None);
    }

    #[test]
    fn debug_never_shows_the_credential() {
        let b = Bearer::new("sbe_supersecret");
        let shown = format!("{b:?}");
        assert!(!shown.contains("supersecret"), "{shown}");
        assert!(shown.starts_with("Bearer(sha256:"), "{shown}");
    }
}
