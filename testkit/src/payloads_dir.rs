//! Where the real forge payloads are: `testkit/data/webhooks/`, vendored into the repository
//! with their licenses (that folder's README says where each payload came from), so a clone
//! needs nothing beside it. `SWITCHBOARD_WEBHOOK_DATA` points tests and benches elsewhere.

use std::path::PathBuf;

/// The environment variable that overrides the payload folder.
pub const ENV: &str = "SWITCHBOARD_WEBHOOK_DATA";

/// The vendored payloads, found from this crate's manifest, wherever the checkout is.
pub const VENDORED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/webhooks");

/// The payload folder: `SWITCHBOARD_WEBHOOK_DATA` when set and not empty, else [`VENDORED`].
pub fn webhooks_dir() -> PathBuf {
    std::env::var_os(ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(VENDORED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_folder_holds_every_forge_and_its_licenses() {
        let dir = PathBuf::from(VENDORED);
        for part in [
            "github",
            "gitea",
            "forgejo",
            "LICENSES",
            "README.md",
            "headers.md",
        ] {
            assert!(
                dir.join(part).exists(),
                "{} is missing",
                dir.join(part).display()
            );
        }
    }
}
