//! REQ-1: every catalog version validates and routes every one of its fixtures to its
//! expected decision, both in-process and through a sandbox child.

use std::time::Duration;

use switchboard_packs::runner::check_pack;
use switchboard_packs::{Catalog, Pack};

use crate::support::pool;

#[tokio::test(flavor = "multi_thread")]
async fn every_catalog_version_validates_and_routes_its_fixtures() {
    let catalog = Catalog::builtin();
    assert!(!catalog.packs().is_empty());
    let pool = pool(2, Duration::from_secs(1)).await;
    let mut failures = Vec::new();
    for cp in catalog.packs() {
        failures.extend(check_pack(&cp.pack, &pool).await);
    }
    assert!(
        failures.is_empty(),
        "catalog failures:\n{}",
        failures.join("\n")
    );
}

/// Scenario: A pack that contradicts its fixtures does not build.
#[tokio::test(flavor = "multi_thread")]
async fn a_pack_that_contradicts_its_fixtures_does_not_build() {
    let catalog = Catalog::builtin();
    let original = &catalog.versions("drop-ci-noise")[0].pack;
    let mut changed: Pack = original.clone();
    // Change a rule so that one fixture no longer routes to its expected decision.
    let rule = changed
        .rules
        .iter_mut()
        .find(|r| r.id.as_deref() == Some("deleted"))
        .expect("rule");
    rule.when = "false".into();
    let pool = pool(1, Duration::from_secs(1)).await;
    let failures = check_pack(&changed, &pool).await;
    let named = failures
        .iter()
        .find(|f| {
            f.contains("drop-ci-noise@1.0.0") && f.contains("fixture deleted-comment-dropped")
        })
        .unwrap_or_else(|| panic!("no failure names the pack, version and fixture: {failures:?}"));
    assert!(named.contains("want drop"), "{named}");
    assert!(check_pack(original, &pool).await.is_empty());
}

/// `switchboard packs test <dir>` runs the same checks for authors of external packs.
#[test]
fn packs_test_command_checks_an_external_pack_directory() {
    let good = std::process::Command::new(crate::support::binary())
        .args([
            "packs",
            "test",
            concat!(env!("CARGO_MANIFEST_DIR"), "/packs/catalog/drop-ci-noise"),
        ])
        .output()
        .expect("runs");
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    assert!(String::from_utf8_lossy(&good.stdout).contains("ok   drop-ci-noise@1.0.0"));
    // A copy whose fixture expects the wrong decision fails, naming pack, version and fixture.
    let dir = tempfile::tempdir().expect("tempdir");
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packs/catalog/drop-ci-noise/1.0.0");
    let dst = dir.path().join("ext-noise/1.0.0");
    std::fs::create_dir_all(dst.join("fixtures")).expect("mkdir");
    let manifest = std::fs::read_to_string(src.join("pack.json"))
        .expect("manifest")
        .replace("\"drop-ci-noise\"", "\"ext-noise\"");
    std::fs::write(dst.join("pack.json"), manifest).expect("write");
    for entry in std::fs::read_dir(src.join("fixtures"))
        .expect("fixtures")
        .flatten()
    {
        let mut text = std::fs::read_to_string(entry.path()).expect("fixture");
        if entry.file_name() == "deleted-comment-dropped.json" {
            text = text.replace("\"want\": \"drop\"", "\"want\": \"default\"");
        }
        std::fs::write(dst.join("fixtures").join(entry.file_name()), text).expect("write");
    }
    let bad = std::process::Command::new(crate::support::binary())
        .args(["packs", "test"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("ext-noise@1.0.0 fixture deleted-comment-dropped"),
        "{stderr}"
    );
}
