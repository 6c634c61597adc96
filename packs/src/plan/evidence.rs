//! What a replay's router calls answered, read into a plan's evidence (REQ-4, REQ-5): both
//! configurations' decision on each delivery, the candidate's faults where the saved
//! configuration's decision is unknown, and why the replay stopped early. A plan never hides
//! a fault: a call the router stopped at its `max_child_faults` still blames its rule.

use switchboard_model::plan::{Replayed, Report, Routed, RuleFaults};
use switchboard_model::{Label, fault};
use switchboard_proto::router::v1::Decision;

use super::aggregate::{aggregate, rule_faults};

/// Example event ids a stop note names per rule (the refusal and the report name more).
const NOTE_EXAMPLES: usize = 5;

/// A decision reduced to what a plan reports.
pub fn routed(d: &Decision) -> Routed {
    let label = d.label().into_owned();
    let rule_id = (!d.rule_id.is_empty() && !d.by_default_action).then(|| d.rule_id.clone());
    Routed { label, rule_id }
}

/// The stored delivery a decision pair is about.
#[derive(Clone, Copy, Debug)]
pub struct Delivered<'a> {
    pub event_id: &'a str,
    pub received_at_ms: i64,
    pub source: &'a str,
}

/// A candidate fault on a delivery whose saved decision the router did not give (the saved
/// configuration's own call stopped first): it counts against the candidate's rule, in no
/// transition, since what it changes from is unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unpaired {
    pub event_id: String,
    pub rule_id: Option<String>,
}

/// A replay's decisions as plans and `test_webhook_rules` read them.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Deliveries both configurations decided.
    pub replayed: Vec<Replayed>,
    pub unpaired_faults: Vec<Unpaired>,
    /// Deliveries the replay did not evaluate (its call stopped before them).
    pub not_evaluated: u64,
    /// The window was cut short (bytes, the total time budget, or a stopped call): unproven.
    pub truncated: bool,
    /// The router's reason when it stopped a call at its `max_child_faults`.
    pub stopped: Option<String>,
}

impl Evidence {
    /// Reads one delivery's saved (`before`) and candidate (`after`) decisions. A side the
    /// router did not evaluate says nothing about the delivery; a candidate fault is kept
    /// whatever the other side says.
    pub fn read(&mut self, e: Delivered<'_>, before: &Decision, after: &Decision) {
        let skipped = |d: &Decision| d.fault_code == fault::NOT_EVALUATED;
        if let Some(d) = [before, after].into_iter().find(|d| skipped(d)) {
            self.stopped.get_or_insert_with(|| d.reason.clone());
            self.truncated = true;
        }
        match (skipped(before), skipped(after)) {
            (false, false) => self.replayed.push(Replayed {
                event_id: e.event_id.to_string(),
                received_at_ms: e.received_at_ms,
                source: e.source.to_string(),
                before: routed(before),
                after: routed(after),
            }),
            (true, false) if after.label() == Label::Fault => self.unpaired_faults.push(Unpaired {
                event_id: e.event_id.to_string(),
                rule_id: routed(after).rule_id,
            }),
            _ => self.not_evaluated += 1,
        }
    }

    /// Every candidate fault, paired or not: (event id, the rule that faulted).
    fn candidate_faults(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        let paired = self
            .replayed
            .iter()
            .filter(|e| e.after.label == Label::Fault)
            .map(|e| (e.event_id.as_str(), e.after.rule_id.as_deref()));
        let unpaired = self
            .unpaired_faults
            .iter()
            .map(|u| (u.event_id.as_str(), u.rule_id.as_deref()));
        paired.chain(unpaired)
    }

    /// Each fault of a pack rule on a delivery the replay evaluated, stopped call or not:
    /// (event id, rule).
    pub fn pack_faults<'a>(
        &'a self,
        pack_rule_ids: &'a [String],
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.candidate_faults()
            .filter_map(|(event, rule)| Some((event, rule?)))
            .filter(|(_, rule)| pack_rule_ids.iter().any(|p| p == rule))
    }

    /// The pack rules that faulted on any delivery the replay evaluated (REQ-4
    /// `pack_rule_faults`), grouped by rule.
    pub fn pack_rule_faults(&self, pack_rule_ids: &[String]) -> Vec<RuleFaults> {
        rule_faults(self.pack_faults(pack_rule_ids))
    }

    /// The report (REQ-5) of this evidence, for a candidate whose rules are
    /// `candidate_rule_ids`: unpaired faults count in their rule's `faults`, and a stopped
    /// replay says which rules stopped it.
    pub fn report(
        &self,
        candidate_rule_ids: &[String],
        from_pack: &dyn Fn(&str) -> Option<String>,
        fail_closed: bool,
        rfc3339: &dyn Fn(i64) -> String,
    ) -> Report {
        let mut report = aggregate(
            &self.replayed,
            candidate_rule_ids,
            from_pack,
            fail_closed,
            self.truncated,
            rfc3339,
        );
        for u in &self.unpaired_faults {
            if let Some(rule) = report
                .rules
                .iter_mut()
                .find(|r| Some(r.id.as_str()) == u.rule_id.as_deref())
            {
                rule.faults += 1;
            }
        }
        report.stopped = self.stop_note();
        report
    }

    /// Why the replay stopped, with the rules whose faults stopped it (candidate and saved)
    /// and how many deliveries it left unevaluated.
    pub fn stop_note(&self) -> Option<String> {
        let reason = self.stopped.as_ref()?;
        let mut blamed: Vec<String> = Vec::new();
        let saved_faults = self
            .replayed
            .iter()
            .filter(|e| e.before.label == Label::Fault)
            .map(|e| (e.event_id.as_str(), e.before.rule_id.as_deref()));
        for (side, faults) in [
            (
                "candidate",
                rule_faults(self.candidate_faults().filter_map(|(e, r)| Some((e, r?)))),
            ),
            (
                "saved",
                rule_faults(saved_faults.filter_map(|(e, r)| Some((e, r?)))),
            ),
        ] {
            for f in faults {
                let shown = &f.event_ids[..f.event_ids.len().min(NOTE_EXAMPLES)];
                blamed.push(format!(
                    "{side} rule {} faulted on {} (e.g. {})",
                    f.rule,
                    f.count,
                    shown.join(", ")
                ));
            }
        }
        blamed.push(format!("{} deliveries not evaluated", self.not_evaluated));
        Some(format!("{reason}; {}", blamed.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_proto::router::v1::Outcome;

    fn queue(rule: &str) -> Decision {
        Decision {
            outcome: Outcome::Queue as i32,
            queue: "forge".into(),
            rule_id: rule.into(),
            ..Default::default()
        }
    }

    fn faulted(rule: &str, code: &str) -> Decision {
        Decision {
            outcome: Outcome::Fault as i32,
            rule_id: rule.into(),
            fault_code: code.into(),
            reason: format!("{code} here"),
            ..Default::default()
        }
    }

    fn skipped() -> Decision {
        faulted("", fault::NOT_EVALUATED)
    }

    fn at(id: &str) -> Delivered<'_> {
        Delivered {
            event_id: id,
            received_at_ms: 0,
            source: "github",
        }
    }

    #[test]
    fn a_candidate_fault_counts_whatever_the_saved_side_says() {
        let mut e = Evidence::default();
        e.read(
            at("a"),
            &queue("h"),
            &faulted("p--slow", fault::BUDGET_EXCEEDED),
        );
        e.read(
            at("b"),
            &skipped(),
            &faulted("p--slow", fault::SANDBOX_CRASHED),
        );
        e.read(at("c"), &skipped(), &skipped());
        e.read(at("d"), &skipped(), &queue("h"));
        e.read(at("e"), &faulted("h", fault::BUDGET_EXCEEDED), &skipped());
        assert_eq!(e.replayed.len(), 1);
        assert_eq!(
            e.unpaired_faults,
            [Unpaired {
                event_id: "b".into(),
                rule_id: Some("p--slow".into()),
            }]
        );
        assert_eq!(
            e.not_evaluated, 3,
            "c, d and e say nothing of the candidate"
        );
        assert!(e.truncated);
        let faults = e.pack_rule_faults(&["p--slow".into()]);
        assert_eq!(faults.len(), 1);
        assert_eq!(faults[0].count, 2);
        assert_eq!(faults[0].event_ids, ["a", "b"]);
        assert!(e.pack_rule_faults(&["p--other".into()]).is_empty());
        let report = e.report(&["p--slow".into(), "h".into()], &|_| None, false, &|ms| {
            ms.to_string()
        });
        assert_eq!(report.rules[0].faults, 2, "paired and unpaired");
        assert_eq!(
            report.events_replayed, 1,
            "only a paired delivery is a transition"
        );
        let note = report.stopped.expect("stopped");
        assert!(note.starts_with("not_evaluated here"), "{note}");
        assert!(
            note.contains("candidate rule p--slow faulted on 2 (e.g. a, b)"),
            "{note}"
        );
        assert!(note.ends_with("3 deliveries not evaluated"), "{note}");
    }

    #[test]
    fn a_replay_that_ran_to_its_end_has_no_stop_note() {
        let mut e = Evidence::default();
        e.read(at("a"), &queue("h"), &faulted("p--x", fault::RULE_FAULT));
        assert!(!e.truncated);
        assert_eq!(e.stop_note(), None);
        assert_eq!(e.pack_rule_faults(&["p--x".into()])[0].event_ids, ["a"]);
    }
}
