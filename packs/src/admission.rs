//! Admitting a pack: one definition of "a pack is good", shared by the repository's catalog
//! test and `switchboard packs test` (`runner.rs`, in-process and in a sandbox child) and by
//! control's admission of external packs (through its routers). Pure: the caller validates
//! and evaluates with whatever it has, and this module says what must be validated and judges
//! what came back (REQ-1: "the same validation and fixture checks as built-in packs").

use std::collections::BTreeSet;

use switchboard_model::{Action, Configuration, Label, Rule};

use crate::manifest::{Fixture, Pack};

/// A configuration admission validates as a save would: the pack's rules (`what` is
/// `rule`), or one param check held to the same expression restrictions (`what` is
/// `param_check <id>`).
pub struct ToValidate {
    pub what: String,
    pub configuration: Configuration,
}

/// Everything of `pack` that must validate: its rules with default params, then each param
/// check as a probe rule.
pub fn to_validate(pack: &Pack) -> Vec<ToValidate> {
    let mut out = vec![ToValidate {
        what: "rule".into(),
        configuration: pack.fixture_configuration(&Default::default()),
    }];
    for check in &pack.param_checks {
        out.push(ToValidate {
            what: format!("param_check {}", check.id),
            configuration: Configuration {
                rules: vec![Rule {
                    id: Some(check.id.clone()),
                    description: None,
                    when: param_check_expression(&check.expr),
                    action: Action::Drop,
                }],
                ..Default::default()
            },
        });
    }
    out
}

/// A param check as a rule that matches when the check fails: `.payload` is the checked
/// value (the element, with `each`; else null).
pub fn param_check_expression(expr: &str) -> String {
    format!(".payload | ({expr}) | not")
}

/// Whether a fixture's decision is the one it wants: the same label, or both the default
/// queue however it was reached (`default`: no rule matched; `queue:<default queue>`: a rule
/// routed there). One definition for the catalog's test, external packs at start and plans.
pub fn fixture_passes(want: &Label<'_>, got: &Label<'_>, default_queue: &str) -> bool {
    let is_default = |label: &Label<'_>| match label {
        Label::Default => true,
        Label::Queue(q) => q == default_queue,
        _ => false,
    };
    got == want || (is_default(want) && is_default(got))
}

/// Judges one fixture's decision (its label and the rule id that decided, empty for none):
/// the failures (each naming pack, version and fixture), and the pack-local id of the rule
/// that decided, for [`uncovered`].
pub fn judge_fixture(
    pack: &Pack,
    fixture: &Fixture,
    label: &str,
    rule_id: &str,
    default_queue: &str,
) -> (Vec<String>, Option<String>) {
    let name = format!("{} fixture {}", pack.label(), fixture.name);
    let mut failures = Vec::new();
    let got = label;
    // A text that is no label (no decision at all) passes nothing.
    let passed = match (Label::parse(&fixture.want), Label::parse(got)) {
        (Ok(want), Ok(got)) => fixture_passes(&want, &got, default_queue),
        _ => false,
    };
    if !passed {
        failures.push(format!("{name}: want {}, got {got}", fixture.want));
    }
    let local = rule_id
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
    (failures, local)
}

/// The pack's rules that no fixture was decided by: every rule must be shown working.
pub fn uncovered(pack: &Pack, covered: &BTreeSet<String>) -> Vec<String> {
    let mut failures = Vec::new();
    if pack.fixtures.is_empty() {
        failures.push(format!("{}: ships no fixtures", pack.label()));
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

#[cfg(test)]
mod tests {
    use switchboard_model::Label;

    fn fixture_passes(want: &str, got: &str, default_queue: &str) -> bool {
        let label = |text| Label::parse(text).expect("a label");
        super::fixture_passes(&label(want), &label(got), default_queue)
    }

    #[test]
    fn a_fixture_passes_on_its_label_or_on_the_default_queue_however_reached() {
        // The same label passes; a different queue, drop or fault does not.
        assert!(fixture_passes("queue:review", "queue:review", "triage"));
        assert!(!fixture_passes("queue:review", "queue:ops", "triage"));
        assert!(!fixture_passes("drop", "quarantine", "triage"));
        assert!(!fixture_passes("queue:review", "fault", "triage"));
        // The default queue, whether no rule matched or a rule routed there, either way
        // round (the catalog's test and plans used to disagree on `queue:<default>`).
        for (want, got) in [
            ("default", "default"),
            ("default", "queue:triage"),
            ("queue:triage", "default"),
            ("queue:triage", "queue:triage"),
        ] {
            assert!(fixture_passes(want, got, "triage"), "{want} / {got}");
        }
        assert!(!fixture_passes("default", "queue:review", "triage"));
        assert!(!fixture_passes("default", "drop", "triage"));
    }
}
