//! Approvals that separate duties (issue 47, docs/approval.md): how many distinct people must
//! accept a plan on a `confirm_policy: person` webhook before it applies, and whose
//! acceptance does not count. Pure: the store keeps the rule and the approvals given, the
//! console and the API show the [`Tally`], and the accept applies the plan only when the one
//! function here, [`tally`], says the rule is met.
//!
//! The lines drawn (GitHub's rule for its coding agent, LaunchDarkly's and Flagsmith's
//! required approvals with self-approval off): the human the proposing endpoint acts for may
//! accept, and it is recorded, but it does not count; a person accepting twice counts once; an
//! approval is bound to the plan's digest, and a new plan (a re-plan) starts with none.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{PlanKind, Report, StoredPlan};
use crate::{Action, Configuration, Label};

/// The most approvals a rule may require: more people than any team has is a plan that can
/// never apply.
pub const MAX_REQUIRED: u32 = 10;

/// What makes a plan riskier than an ordinary change, so its rule may require more people.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// The replay shows lost work (the one definition, [`Label::loses_work`]).
    LostWork,
    /// The plan removes a rule pack.
    RemovesPack,
    /// The candidate's `default_action` is not the saved one's.
    DefaultAction,
    /// More is quarantined: the replay moves deliveries into quarantine, or the candidate
    /// adds a quarantine rule (or a quarantining default) the saved configuration lacks.
    WidensQuarantine,
}

impl Risk {
    pub const ALL: [Risk; 4] = [
        Risk::LostWork,
        Risk::RemovesPack,
        Risk::DefaultAction,
        Risk::WidensQuarantine,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Risk::LostWork => "lost_work",
            Risk::RemovesPack => "removes_pack",
            Risk::DefaultAction => "default_action",
            Risk::WidensQuarantine => "widens_quarantine",
        }
    }

    pub fn parse(word: &str) -> Option<Risk> {
        Risk::ALL.into_iter().find(|r| r.as_str() == word)
    }

    /// How a person reads it on the plan page and in the CLI.
    pub fn describe(self) -> &'static str {
        match self {
            Risk::LostWork => "loses work",
            Risk::RemovesPack => "removes a pack",
            Risk::DefaultAction => "changes the default action",
            Risk::WidensQuarantine => "widens what is quarantined",
        }
    }
}

/// A webhook's approval rule, set by an operator. The default ([`ApprovalRule::default`],
/// for a team's webhooks): one person, two for any risk, and the human the proposing
/// endpoint acts for does not count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ApprovalRule {
    /// How many distinct people must accept any plan.
    pub required: u32,
    /// How many a plan with each risk needs (a risk not named needs `required`).
    pub tiers: BTreeMap<Risk, u32>,
    /// Whether the human the proposing endpoint acts for counts. False by default (GitHub's
    /// rule for its coding agent); true only where nobody else could ever decide.
    #[serde(default)]
    pub proposer_counts: bool,
}

impl Default for ApprovalRule {
    fn default() -> Self {
        ApprovalRule {
            required: 1,
            tiers: Risk::ALL.into_iter().map(|r| (r, 2)).collect(),
            proposer_counts: false,
        }
    }
}

/// A rule that cannot be met or asks for nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be from 1 to {MAX_REQUIRED}, not {value}")]
pub struct BadRule {
    pub field: String,
    pub value: u32,
}

impl ApprovalRule {
    /// The rule of a webhook no operator set one for. A person's own scope has one person who
    /// may decide, its owner: there the default is that person, once (a rule nobody else can
    /// meet would leave every plan pending). A team's webhooks get [`ApprovalRule::default`].
    pub fn default_for(personal_scope: bool) -> ApprovalRule {
        if personal_scope {
            ApprovalRule {
                required: 1,
                tiers: BTreeMap::new(),
                proposer_counts: true,
            }
        } else {
            ApprovalRule::default()
        }
    }

    /// Refuses a count of 0 (a plan nobody accepts would apply) or above [`MAX_REQUIRED`].
    pub fn check(&self) -> Result<(), BadRule> {
        let bad = |field: String, value: u32| {
            (value == 0 || value > MAX_REQUIRED).then_some(BadRule { field, value })
        };
        if let Some(e) = bad("required".into(), self.required) {
            return Err(e);
        }
        for (risk, n) in &self.tiers {
            if let Some(e) = bad(format!("tiers.{}", risk.as_str()), *n) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The rule in a line, as the audit and the change log record it:
    /// `required=1 lost_work=2 …`, then `proposer_counts` when the proposer's human counts.
    pub fn words(&self) -> String {
        let mut words = vec![format!("required={}", self.required)];
        for (risk, n) in &self.tiers {
            words.push(format!("{}={n}", risk.as_str()));
        }
        if self.proposer_counts {
            words.push("proposer_counts".to_string());
        }
        words.join(" ")
    }

    /// How many distinct people a plan with `risks` needs: the most any of them asks, never
    /// fewer than `required`.
    pub fn needed(&self, risks: &[Risk]) -> u32 {
        risks
            .iter()
            .filter_map(|r| self.tiers.get(r))
            .copied()
            .fold(self.required, u32::max)
    }
}

/// The risks of a plan: from its replay, its kind, and the configuration it replaces
/// (`before`, the webhook's saved one) and saves (`after`).
pub fn risks(
    report: &Report,
    kind: PlanKind,
    before: &Configuration,
    after: &Configuration,
) -> Vec<Risk> {
    let mut found = Vec::new();
    if report
        .transitions
        .iter()
        .any(|t| t.count > 0 && t.loses_work())
    {
        found.push(Risk::LostWork);
    }
    if kind == PlanKind::Remove {
        found.push(Risk::RemovesPack);
    }
    if before.default_action != after.default_action {
        found.push(Risk::DefaultAction);
    }
    let moved_in = report
        .transitions
        .iter()
        .any(|t| t.count > 0 && t.to == Label::Quarantine && t.from != Label::Quarantine);
    let (was, now) = (quarantining(before), quarantining(after));
    let new_rule = now.iter().any(|w| !was.contains(w));
    let new_default = after.default_action == Some(Action::Quarantine)
        && before.default_action != Some(Action::Quarantine);
    if moved_in || new_rule || new_default {
        found.push(Risk::WidensQuarantine);
    }
    found
}

/// The `when` of each quarantine rule: a rule is the same rule where its condition is.
fn quarantining(c: &Configuration) -> Vec<&str> {
    c.rules
        .iter()
        .filter(|r| r.action == Action::Quarantine)
        .map(|r| r.when.as_str())
        .collect()
}

/// The digest an approval is bound to: SHA-256 of the stored plan's canonical JSON and the
/// candidate's digest. A plan never changes, so this only ever differs for another plan.
pub fn plan_digest(plan: &StoredPlan, candidate_digest: &str) -> String {
    let mut text = String::new();
    let value = serde_json::to_value(plan).unwrap_or_default();
    crate::write_canonical(&value, &mut text);
    text.push('\n');
    text.push_str(candidate_digest);
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// An approval as recorded: who accepted, when, and the digest of the plan they read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Approval {
    pub person: String,
    pub at_ms: i64,
    pub plan_digest: String,
}

/// Why a recorded approval does not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum NotCounted {
    /// The person is the human the proposing endpoint acts for.
    Proposer,
    /// It was given for another plan digest.
    OtherPlan,
}

impl NotCounted {
    pub fn as_str(self) -> &'static str {
        match self {
            NotCounted::Proposer => "proposer",
            NotCounted::OtherPlan => "other_plan",
        }
    }
}

/// One approval given, and whether it counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Given {
    pub person: String,
    pub at_ms: i64,
    pub counts: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_counted: Option<NotCounted>,
}

/// Where a plan's approvals stand: what its `pending_approval` says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Tally {
    /// How many distinct people must accept this plan.
    pub required: u32,
    /// Why it needs more than the rule's base count (empty: an ordinary change).
    pub risks: Vec<Risk>,
    /// Every approval recorded, in the order given.
    pub given: Vec<Given>,
    /// How many of `given` count.
    pub counted: u32,
    /// How many more are needed; 0: the rule is met.
    pub still_needed: u32,
    /// Who cannot give a counting approval: the proposer's human and everyone who already
    /// approved.
    pub cannot_come_from: Vec<String>,
}

impl Tally {
    pub fn met(&self) -> bool {
        self.still_needed == 0
    }

    /// The people whose approvals counted, in the order given: the change log's approvers.
    pub fn approvers(&self) -> Vec<String> {
        self.given
            .iter()
            .filter(|g| g.counts)
            .map(|g| g.person.clone())
            .collect()
    }
}

/// The one count of a plan's approvals: each person at most once (their first approval),
/// none from `proposer` (the human the proposing endpoint acts for) unless the rule lets the
/// proposer count, none given for another digest than `digest`.
pub fn tally(
    rule: &ApprovalRule,
    risks: &[Risk],
    proposer: Option<&str>,
    digest: &str,
    approvals: &[Approval],
) -> Tally {
    let required = rule.needed(risks);
    let proposer = proposer.filter(|_| !rule.proposer_counts);
    let mut given: Vec<Given> = Vec::new();
    let mut ordered: Vec<&Approval> = approvals.iter().collect();
    ordered.sort_by(|a, b| a.at_ms.cmp(&b.at_ms).then(a.person.cmp(&b.person)));
    for a in ordered {
        if given.iter().any(|g| g.person == a.person) {
            continue;
        }
        let not_counted = if proposer == Some(a.person.as_str()) {
            Some(NotCounted::Proposer)
        } else if a.plan_digest != digest {
            Some(NotCounted::OtherPlan)
        } else {
            None
        };
        given.push(Given {
            person: a.person.clone(),
            at_ms: a.at_ms,
            counts: not_counted.is_none(),
            not_counted,
        });
    }
    let counted = u32::try_from(given.iter().filter(|g| g.counts).count()).unwrap_or(u32::MAX);
    let mut cannot_come_from: Vec<String> = proposer.map(str::to_string).into_iter().collect();
    for g in &given {
        if !cannot_come_from.contains(&g.person) {
            cannot_come_from.push(g.person.clone());
        }
    }
    Tally {
        required,
        risks: risks.to_vec(),
        counted,
        still_needed: required.saturating_sub(counted),
        given,
        cannot_come_from,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Transition;

    fn approval(person: &str, at: i64, digest: &str) -> Approval {
        Approval {
            person: person.into(),
            at_ms: at,
            plan_digest: digest.into(),
        }
    }

    #[test]
    fn the_default_rule_asks_one_person_and_two_for_any_risk() {
        let rule = ApprovalRule::default();
        assert_eq!(rule.needed(&[]), 1);
        for risk in Risk::ALL {
            assert_eq!(rule.needed(&[risk]), 2, "{risk:?}");
        }
        let strict = ApprovalRule {
            required: 2,
            tiers: BTreeMap::from([(Risk::LostWork, 3)]),
            proposer_counts: false,
        };
        assert_eq!(strict.needed(&[Risk::RemovesPack]), 2);
        assert_eq!(strict.needed(&[Risk::RemovesPack, Risk::LostWork]), 3);
    }

    #[test]
    fn the_proposer_is_recorded_but_does_not_count_and_twice_counts_once() {
        let rule = ApprovalRule::default();
        let t = tally(
            &rule,
            &[Risk::LostWork],
            Some("alice"),
            "d",
            &[
                approval("alice", 1, "d"),
                approval("bob", 2, "d"),
                approval("bob", 3, "d"),
            ],
        );
        assert_eq!(t.required, 2);
        assert_eq!(t.counted, 1);
        assert_eq!(t.still_needed, 1);
        assert!(!t.met());
        assert_eq!(t.given.len(), 2);
        assert_eq!(t.given[0].not_counted, Some(NotCounted::Proposer));
        assert_eq!(t.cannot_come_from, vec!["alice", "bob"]);
        let t = tally(
            &rule,
            &[Risk::LostWork],
            Some("alice"),
            "d",
            &[approval("bob", 2, "d"), approval("carol", 4, "d")],
        );
        assert!(t.met());
        assert_eq!(t.approvers(), vec!["bob", "carol"]);
    }

    #[test]
    fn in_a_personal_scope_the_owner_alone_may_accept_their_agents_plan() {
        let rule = ApprovalRule::default_for(true);
        let t = tally(
            &rule,
            &[Risk::LostWork],
            Some("dev"),
            "d",
            &[approval("dev", 1, "d")],
        );
        assert!(t.met(), "{t:?}");
        assert_eq!(ApprovalRule::default_for(false), ApprovalRule::default());
    }

    #[test]
    fn an_approval_of_another_digest_does_not_count() {
        let t = tally(
            &ApprovalRule::default(),
            &[],
            None,
            "new",
            &[approval("bob", 1, "old")],
        );
        assert_eq!(t.given[0].not_counted, Some(NotCounted::OtherPlan));
        assert_eq!(t.still_needed, 1);
    }

    #[test]
    fn a_rule_of_zero_or_more_than_ten_is_refused() {
        let mut rule = ApprovalRule::default();
        assert!(rule.check().is_ok());
        rule.required = 0;
        assert_eq!(rule.check().map_err(|e| e.field), Err("required".into()));
        rule.required = 1;
        rule.tiers.insert(Risk::LostWork, 11);
        assert_eq!(
            rule.check().map_err(|e| e.field),
            Err("tiers.lost_work".into())
        );
    }

    #[test]
    fn risks_come_from_the_replay_the_kind_and_the_two_configurations() {
        let config = |default_action: Option<Action>, quarantine_when: Option<&str>| {
            let mut c = Configuration {
                default_action,
                ..Configuration::default()
            };
            if let Some(w) = quarantine_when {
                c.rules.push(crate::Rule {
                    id: None,
                    description: None,
                    when: w.into(),
                    action: Action::Quarantine,
                });
            }
            c
        };
        let mut report = Report::default();
        let plain = config(None, None);
        assert!(risks(&report, PlanKind::Install, &plain, &plain).is_empty());
        assert_eq!(
            risks(&report, PlanKind::Remove, &plain, &plain),
            vec![Risk::RemovesPack]
        );
        assert_eq!(
            risks(
                &report,
                PlanKind::Rules,
                &plain,
                &config(Some(Action::Drop), None)
            ),
            vec![Risk::DefaultAction]
        );
        assert_eq!(
            risks(&report, PlanKind::Rules, &plain, &config(None, Some(".x"))),
            vec![Risk::WidensQuarantine]
        );
        report.transitions.push(Transition {
            from: Label::Default,
            to: Label::Drop,
            count: 3,
            ..Transition::default()
        });
        assert_eq!(
            risks(&report, PlanKind::Install, &plain, &plain),
            vec![Risk::LostWork]
        );
    }
}
