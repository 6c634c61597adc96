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
