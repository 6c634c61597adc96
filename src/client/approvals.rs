//! Approvals (issue 47) as the CLI prints them: a webhook's approval rule, and where a
//! plan's approvals stand.

use switchboard_model::approval::{Risk, Tally};
use switchboard_proto::control::v1 as pb;

/// `approvals: 1 person; 2 when it loses work, …` for a webhook's rule as the wire carries it.
pub fn rule_words(rule: Option<&pb::ApprovalRule>, is_default: bool) -> String {
    let Some(rule) = rule else {
        return "approvals: the default rule".to_string();
    };
    let mut words = vec![format!(
        "approvals: {} {}",
        rule.required,
        if rule.required == 1 {
            "person"
        } else {
            "people"
        }
    )];
    for t in &rule.tiers {
        if let Some(risk) = switchboard_proto::convert::approval::risk(t.risk)
            && t.required > rule.required
        {
            words.push(format!("{} when a plan {}", t.required, risk.describe()));
        }
    }
    if rule.proposer_counts {
        words.push("the proposer's human counts".to_string());
    }
    let mut text = words.join("; ");
    text.push_str(if is_default {
        " (the default)"
    } else {
        " (set by an operator)"
    });
    text
}

/// `1 of 2 count; 1 more needed, not from alice, bob (a plan that loses work)`.
pub fn tally_words(t: &Tally) -> String {
    let mut text = format!("{} of {} count", t.counted, t.required);
    if t.still_needed > 0 {
        text.push_str(&format!("; {} more needed", t.still_needed));
        if !t.cannot_come_from.is_empty() {
            text.push_str(&format!(", not from {}", t.cannot_come_from.join(", ")));
        }
    }
    if !t.risks.is_empty() {
        let risks: Vec<&str> = t.risks.iter().map(|r: &Risk| r.describe()).collect();
        text.push_str(&format!(" (a plan that {})", risks.join(", ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_reads_as_who_is_still_needed() {
        let t = Tally {
            required: 2,
            risks: vec![Risk::LostWork],
            counted: 0,
            still_needed: 2,
            cannot_come_from: vec!["alice".into()],
            ..Tally::default()
        };
        assert_eq!(
            tally_words(&t),
            "0 of 2 count; 2 more needed, not from alice (a plan that loses work)"
        );
        let rule = pb::ApprovalRule::from(&switchboard_model::approval::ApprovalRule::default());
        assert_eq!(
            rule_words(Some(&rule), true),
            "approvals: 1 person; 2 when a plan loses work; 2 when a plan removes a pack; 2 when a plan changes the default action; 2 when a plan widens what is quarantined (the default)"
        );
    }
}
