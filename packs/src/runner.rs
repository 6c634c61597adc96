//! The fixture runner: validates a pack's rules and param checks as a save would, and routes
//! every fixture to its expected decision, in-process and through a sandbox child. The
//! repository test and `switchboard packs test <dir>` both use it, so an author sees exactly
//! what CI sees.

use std::collections::BTreeSet;

use switchboard_model::{Action, Configuration};
use switchboard_proto::router::v1::Configuration as WireConfiguration;
use switchboard_router::engine::decision::label;
use switchboard_router::engine::{CompiledConfiguration, build_envelope};
use switchboard_router::sandbox::SandboxPool;

use crate::fixtures::{fixture_context, fixture_delivery};
use crate::manifest::Pack;

/// The label a fixture expects: a `queue:default` decision is written `default`.
fn normalized(label: &str) -> String {
    if label == "queue:default" {
        "default".into()
    } else {
        label.to_string()
    }
}

/// Every way the pack disagrees with its fixtures or fails validation, each naming pack,
/// version and fixture. Empty means the pack is good.
pub async fn check_pack(pack: &Pack, pool: &SandboxPool) -> Vec<String> {
    let mut failures = Vec::new();
    let base = pack.fixture_configuration(&Default::default());
    let ctx = fixture_context(pack, &base);
    // Rules validate as a save would.
    let json = serde_json::to_string(&base).unwrap_or_default();
    match pool.validate(&json, &ctx).await {
        Ok(resp) => failures.extend(resp.problems.iter().map(|p| {
            format!(
                "{}: rule {}: {} ({})",
                pack.label(),
                p.rule_id,
                p.message,
                p.code
            )
        })),
        Err(e) => failures.push(format!("{}: cannot validate: {e}", pack.label())),
    }
    // Param checks are held to the same restrictions.
    for check in &pack.param_checks {
        let probe = Configuration {
            rules: vec![switchboard_model::Rule {
                id: Some(check.id.clone()),
                description: None,
                when: param_check_expression(&check.expr),
                action: Action::Drop,
            }],
            ..Default::default()
        };
        let json = serde_json::to_string(&probe).unwrap_or_default();
        if let Ok(resp) = pool.validate(&json, &ctx).await {
            failures.extend(resp.problems.iter().map(|p| {
                format!(
                    "{}: param_check {}: {} ({})",
                    pack.label(),
                    check.id,
                    p.message,
                    p.code
                )
            }));
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
        let wire = WireConfiguration {
            json: serde_json::to_string(&config).unwrap_or_default(),
        };
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
        let got = normalized(&label(&in_process));
        if got != fixture.want {
            failures.push(format!(
                "{name}: want {}, got {got} in-process ({})",
                fixture.want,
                describe(&in_process)
            ));
        }
        match &sandboxed {
            Some(d) if d == &in_process => {}
            Some(d) => failures.push(format!(
                "{name}: the sandbox child decided {} but in-process decided {}",
                describe(d),
                describe(&in_process)
            )),
            None => failures.push(format!("{name}: no decision from the sandbox child")),
        }
        let local = in_process
            .rule_id
            .strip_prefix(&format!("{}--", pack.name))
            .map(str::to_string);
        if let Some(want_rule) = &fixture.rule
            && local.as_deref() != Some(want_rule.as_str())
        {
            failures.push(format!(
                "{name}: want rule {want_rule} to decide, got {}",
                local.clone().unwrap_or_else(|| "no rule".into())
            ));
        }
        if let Some(l) = local {
            covered.insert(l);
        }
    }
    for rule in &pack.rules {
        let id = rule.id.clone().unwrap_or_default();
        if !covered.contains(&id) {
            failures.push(format!(
                "{}: no fixture is decided by rule {id}",
                pack.label()
            ));
        }
    }
    failures
}

fn describe(d: &switchboard_proto::router::v1::Decision) -> String {
    let mut s = label(d);
    if !d.rule_id.is_empty() {
        s.push_str(&format!(" by {}", d.rule_id));
    }
    if !d.fault_code.is_empty() {
        s.push_str(&format!(" ({}: {})", d.fault_code, d.reason));
    }
    s
}

/// A param check as a rule that matches when the check fails: `.payload` is the checked
/// value (the element, with `each`; else null).
pub fn param_check_expression(expr: &str) -> String {
    format!(".payload | ({expr}) | not")
}
