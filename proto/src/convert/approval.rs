//! Approvals (issue 47) as their messages, both ways: a webhook's approval rule and where a
//! plan's approvals stand. Control sends them; the surfaces read them back.

use std::collections::BTreeMap;

use switchboard_model::approval::{ApprovalRule, Given, NotCounted, Risk, Tally};

use super::time;
use crate::control::v1 as pb;

impl From<Risk> for pb::ApprovalRisk {
    fn from(r: Risk) -> Self {
        match r {
            Risk::LostWork => pb::ApprovalRisk::LostWork,
            Risk::RemovesPack => pb::ApprovalRisk::RemovesPack,
            Risk::DefaultAction => pb::ApprovalRisk::DefaultAction,
            Risk::WidensQuarantine => pb::ApprovalRisk::WidensQuarantine,
        }
    }
}

/// A wire risk as the typed one; unspecified or unknown is none.
pub fn risk(r: i32) -> Option<Risk> {
    match pb::ApprovalRisk::try_from(r).ok()? {
        pb::ApprovalRisk::Unspecified => None,
        pb::ApprovalRisk::LostWork => Some(Risk::LostWork),
        pb::ApprovalRisk::RemovesPack => Some(Risk::RemovesPack),
        pb::ApprovalRisk::DefaultAction => Some(Risk::DefaultAction),
        pb::ApprovalRisk::WidensQuarantine => Some(Risk::WidensQuarantine),
    }
}

impl From<&ApprovalRule> for pb::ApprovalRule {
    fn from(r: &ApprovalRule) -> Self {
        pb::ApprovalRule {
            required: r.required,
            tiers: r
                .tiers
                .iter()
                .map(|(risk, n)| pb::ApprovalTier {
                    risk: pb::ApprovalRisk::from(*risk) as i32,
                    required: *n,
                })
                .collect(),
            proposer_counts: r.proposer_counts,
        }
    }
}

/// A wire rule as the typed one; a tier naming no known risk is `Err` with its number.
pub fn approval_rule(r: &pb::ApprovalRule) -> Result<ApprovalRule, i32> {
    let mut tiers = BTreeMap::new();
    for t in &r.tiers {
        tiers.insert(risk(t.risk).ok_or(t.risk)?, t.required);
    }
    Ok(ApprovalRule {
        required: r.required,
        tiers,
        proposer_counts: r.proposer_counts,
    })
}

impl From<&Tally> for pb::PlanApprovals {
    // `at_ms` is filled beside `at` for one release.
    #[allow(deprecated)]
    fn from(t: &Tally) -> Self {
        pb::PlanApprovals {
            required: t.required,
            risks: t
                .risks
                .iter()
                .map(|r| pb::ApprovalRisk::from(*r) as i32)
                .collect(),
            given: t
                .given
                .iter()
                .map(|g| pb::PlanApproval {
                    person: g.person.clone(),
                    at_ms: g.at_ms,
                    at: Some(time::from_millis(g.at_ms)),
                    counts: g.counts,
                    not_counted: g
                        .not_counted
                        .map(|n| n.as_str().to_string())
                        .unwrap_or_default(),
                })
                .collect(),
            counted: t.counted,
            still_needed: t.still_needed,
            cannot_come_from: t.cannot_come_from.clone(),
        }
    }
}

impl From<pb::PlanApprovals> for Tally {
    fn from(t: pb::PlanApprovals) -> Self {
        Tally {
            required: t.required,
            risks: t.risks.into_iter().filter_map(risk).collect(),
            given: t
                .given
                .into_iter()
                .map(|g| Given {
                    person: g.person,
                    at_ms: time::to_millis_or_zero(g.at.as_ref()),
                    counts: g.counts,
                    not_counted: match g.not_counted.as_str() {
                        "proposer" => Some(NotCounted::Proposer),
                        "other_plan" => Some(NotCounted::OtherPlan),
                        _ => None,
                    },
                })
                .collect(),
            counted: t.counted,
            still_needed: t.still_needed,
            cannot_come_from: t.cannot_come_from,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_and_a_tally_survive_the_wire() {
        let rule = ApprovalRule::default();
        assert_eq!(approval_rule(&pb::ApprovalRule::from(&rule)), Ok(rule));
        let tally = Tally {
            required: 2,
            risks: vec![Risk::LostWork, Risk::WidensQuarantine],
            given: vec![Given {
                person: "alice".into(),
                at_ms: 5,
                counts: false,
                not_counted: Some(NotCounted::Proposer),
            }],
            counted: 0,
            still_needed: 2,
            cannot_come_from: vec!["alice".into()],
        };
        assert_eq!(Tally::from(pb::PlanApprovals::from(&tally)), tally);
    }
}
