//! External packs (`SWITCHBOARD_RULE_PACK_SOURCES`): read once at start, each validated and
//! its fixtures routed through the routers before it joins the catalog.

use super::*;

/// The catalog this instance serves: the built-ins, plus the external packs named by
/// `SWITCHBOARD_RULE_PACK_SOURCES` (unset by default: then nothing is read or fetched) that
/// validate and route every fixture to its expected decision through the routers. `file://`
/// directories and `https://` pack documents (`crate::pack_sources`) are read once, here, at
/// start and never refetched; a failing source or pack is skipped with a logged error naming
/// it, and control starts all the same.
pub async fn load_catalog(
    sources: Option<&str>,
    options: &crate::pack_sources::FetchOptions,
    routers: &crate::routing::Routers,
) -> Catalog {
    let mut catalog = Catalog::builtin();
    let Some(spec) = sources.map(str::trim).filter(|s| !s.is_empty()) else {
        return catalog;
    };
    let (packs, skipped) = crate::pack_sources::read_sources(spec, options).await;
    for s in skipped {
        tracing::error!(origin = %s.origin, reason = %s.reason, "external rule pack skipped");
    }
    for (origin, pack) in packs {
        match check_external(&pack, routers).await {
            Ok(()) => match catalog.add_external(pack.clone(), &origin) {
                Ok(()) => {
                    tracing::info!(pack = %pack.label(), origin = %origin, "external rule pack loaded")
                }
                Err(reason) => {
                    tracing::error!(pack = %pack.label(), origin = %origin, reason = %reason, "external rule pack skipped")
                }
            },
            Err(reason) => {
                tracing::error!(pack = %pack.label(), origin = %origin, reason = %reason, "external rule pack skipped")
            }
        }
    }
    catalog
}

/// The built-in validation and fixture routing, through the production routers.
pub(super) async fn check_external(
    pack: &Pack,
    routers: &crate::routing::Routers,
) -> Result<(), String> {
    use switchboard_packs::admission;
    use switchboard_packs::fixtures::{fixture_context, fixture_delivery};
    let problems = switchboard_packs::manifest::check_pack(pack, None);
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    // The same admission as the repository's own catalog test (`packs/src/admission.rs`):
    // rules and param checks validate, every fixture routes to its decision by its rule, and
    // every rule decides some fixture.
    let mut failures = Vec::new();
    let base = pack.fixture_configuration(&Map::new());
    let ctx = fixture_context(pack, &base);
    for v in admission::to_validate(pack) {
        let resp = routers
            .validate(&v.configuration, &ctx)
            .await
            .map_err(|e| e.to_string())?;
        failures.extend(resp.problems.iter().map(|p| {
            format!(
                "{} {} does not validate: {} ({})",
                v.what, p.rule_id, p.message, p.code
            )
        }));
    }
    let mut covered = std::collections::BTreeSet::new();
    for (n, f) in pack.fixtures.iter().enumerate() {
        let config = pack.fixture_configuration(&f.params);
        let ctx = fixture_context(pack, &config);
        let default_queue = ctx.grant.first().cloned().unwrap_or_default();
        let results = routers
            .evaluate(switchboard_proto::router::v1::EvaluateRequest {
                context: Some(ctx),
                configurations: vec![WireConfiguration::from(&config)],
                deliveries: vec![fixture_delivery(f, n)],
                budget_ms: 0,
                work_class: WorkClass::Interactive as i32,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let decision = results.first().and_then(|r| r.decisions.first());
        let label = decision.map(|d| d.label().to_string()).unwrap_or_default();
        let rule_id = decision.map(|d| d.rule_id.as_str()).unwrap_or_default();
        let (judged, local) = admission::judge_fixture(pack, f, &label, rule_id, &default_queue);
        failures.extend(judged);
        covered.extend(local);
    }
    failures.extend(admission::uncovered(pack, &covered));
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}
