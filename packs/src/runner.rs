//! The fixture runner: validates a pack's rules and param checks as a save would, and routes
//! every fixture to its expected decision, in-process and through a sandbox child. The
//! repository test and `switchboard packs test <dir>` both use it, so an author sees exactly
//! what CI sees.

use std::collections::BTreeSet;

use switchboard_proto::router::v1::Configuration as WireConfiguration;
use switchboard_router::engine::{CompiledConfiguration, build_envelope};
use switchboard_router::sandbox::SandboxPool;

use crate::admission;
use crate::fixtures::{fixture_context, fixture_delivery};
use crate::manifest::Pack;

/// Every way the pack disagrees with its fixtures or fails validation, each naming pack,
/// version and fixture. Empty means the pack is good.
pub async fn check_pack(pack: &Pack, pool: &SandboxPool) -> Vec<String> {
    let mut failures = Vec::new();
    let base = pack.fixture_configuration(&Default::default());
    let ctx = fixture_context(pack, &base);
    // Rules and param checks validate as a save would (`admission::to_validate`).
    for v in admission::to_validate(pack) {
        match pool
            .validate(&WireConfiguration::from(&v.configuration), &ctx)
            .await
        {
            Ok(resp) => failures.extend(resp.problems.iter().map(|p| {
                format!(
                    "{}: {} {}: {} ({})",
                    pack.label(),
                    v.what,
                    p.rule_id,
                    p.message,
                    p.code
                )
            })),
            Err(e) => failures.push(format!("{}: cannot validate: {e}", pack.label())),
        }
    }
    let mut covered = BTreeSet::new();
    for (n, fixture) in pack.fixtures.iter().enumerate() {
        let config = pack.fixture_configuration(&fixture.params);
        let ctx = fixture_context(pack, &config);
        let delivery = fixture_delivery(fixture, n);
        let name = format!("{} fixture {}", pack.label(), fixture.name);
        let in_process = match CompiledConfiguration::compile(&config) {
            Ok(c) => c.evaluate(&ctx, &build_envelope(&delivery, &ctx)),
            Err(e) => {
                failures.push(format!("{name}: does not compile: {e}"));
                continue;
            }
        };
        let wire = WireConfiguration::from(&config);
        let sandboxed = match pool
            .evaluate(&ctx, &[wire], std::slice::from_ref(&delivery), None)
            .await
        {
            Ok(resp) => resp
                .results
                .into_iter()
                .next()
                .and_then(|r| r.decisions.into_iter().next()),
            Err(e) => {
                failures.push(format!("{name}: sandbox: {e}"));
                continue;
            }
        };
        let default_queue = ctx.grant.first().map(String::as_str).unwrap_or_default();
        let (judged, local) = admission::judge_fixture(
            pack,
            fixture,
            &in_process.label().to_string(),
            &in_process.rule_id,
            default_queue,
        );
        failures.extend(
            judged
                .into_iter()
                .map(|f| format!("{f} in-process ({})", describe(&in_process))),
        );
        match &sandboxed {
            Some(d) if d == &in_process => {}
            Some(d) => failures.push(format!(
                "{name}: the sandbox child decided {} but in-process decided {}",
                describe(d),
                describe(&in_process)
            )),
            None => failures.push(format!("{name}: no decision from the sandbox child")),
        }
        covered.extend(local);
    }
    failures.extend(admission::uncovered(pack, &covered));
    failures
}

fn describe(d: &switchboard_proto::router::v1::Decision) -> String {
    let mut s = d.label().to_string();
    if !d.rule_id.is_empty() {
        s.push_str(&format!(" by {}", d.rule_id));
    }
    if !d.fault_code.is_empty() {
        s.push_str(&format!(" ({}: {})", d.fault_code, d.reason));
    }
    s
}
