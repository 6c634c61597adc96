//! Where a stored plan stands (issue 20, docs/approval.md): one pure function from the plan's
//! recorded facts and the webhook's current configuration version, so the gateway's
//! `get_rule_pack_plan`, the console and a confirm never disagree about it. Nothing here is
//! stored; the state is derived every time it is asked.

use serde::{Deserialize, Serialize};

/// A plan's state as a caller sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanState {
    /// Made, not used, still current: its token confirms it.
    #[default]
    Planned,
    /// An endpoint confirmed it under `confirm_policy: person`; a person has yet to decide.
    PendingApproval,
    /// Confirmed (or accepted by a person): its configuration was saved.
    Applied,
    /// A person rejected it.
    Rejected,
    /// Its TTL passed or the configuration it was made against moved on.
    Stale,
    /// Applied, then undone by its guard (issue 46): the change lost more work than it
    /// promised and the configuration it replaced was saved again.
    Reverted,
}

/// Why a plan is stale, for the message a caller reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum StaleReason {
    /// The plan's own TTL passed before anyone confirmed it.
    Expired,
    /// A person did not decide within the approval TTL.
    ApprovalExpired,
    /// The webhook's configuration was saved since the plan was made.
    ConfigurationChanged,
}

impl PlanState {
    /// The word agents read (`pending_approval`).
    pub fn as_str(self) -> &'static str {
        match self {
            PlanState::Planned => "planned",
            PlanState::PendingApproval => "pending_approval",
            PlanState::Applied => "applied",
            PlanState::Rejected => "rejected",
            PlanState::Stale => "stale",
            PlanState::Reverted => "reverted",
        }
    }

    /// What a person reads it as (the console, the CLI's tables).
    pub fn words(self) -> &'static str {
        match self {
            PlanState::Planned => "planned, not proposed",
            PlanState::PendingApproval => "waiting for approval",
            PlanState::Applied => "applied",
            PlanState::Rejected => "rejected",
            PlanState::Stale => "stale",
            PlanState::Reverted => "reverted by its guard",
        }
    }
}

impl StaleReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StaleReason::Expired => "expired",
            StaleReason::ApprovalExpired => "approval_expired",
            StaleReason::ConfigurationChanged => "configuration_changed",
        }
    }

    /// Why, as a person reads it: `the webhook's rules changed since it was made`.
    pub fn words(self) -> &'static str {
        match self {
            StaleReason::Expired => "it expired before anyone confirmed it",
            StaleReason::ApprovalExpired => "nobody decided before its deadline",
            StaleReason::ConfigurationChanged => "the webhook's rules changed since it was made",
        }
    }
}

/// Why a plan (a trial's, a redrive's) can no longer be applied: the cause a `plan_stale`
/// refusal names as its `PreconditionFailure` type, so a caller learns it without reading
/// the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaleCause {
    /// It was already applied (by this call's twin, or another).
    Used,
    /// A person rejected it.
    Rejected,
    /// Its TTL passed.
    Expired,
    /// A person did not decide within the approval TTL.
    ApprovalExpired,
    /// The webhook's configuration was saved since it was made.
    ConfigurationChanged,
    /// Only a plan waiting for a person can be accepted or rejected.
    NotPending,
    /// The trial behind it changed or is gone, so its evidence no longer holds.
    TrialChanged,
}

impl StaleCause {
    /// Every cause, for the docs and tests.
    pub const ALL: [StaleCause; 7] = [
        StaleCause::Used,
        StaleCause::Rejected,
        StaleCause::Expired,
        StaleCause::ApprovalExpired,
        StaleCause::ConfigurationChanged,
        StaleCause::NotPending,
        StaleCause::TrialChanged,
    ];

    /// The word a caller branches on (`configuration_changed`).
    pub fn as_str(self) -> &'static str {
        match self {
            StaleCause::Used => "used",
            StaleCause::Rejected => "rejected",
            StaleCause::Expired => "expired",
            StaleCause::ApprovalExpired => "approval_expired",
            StaleCause::ConfigurationChanged => "configuration_changed",
            StaleCause::NotPending => "not_pending",
            StaleCause::TrialChanged => "trial_changed",
        }
    }

    /// Why, in words.
    pub fn words(self) -> &'static str {
        match self {
            StaleCause::Used => "it was already applied",
            StaleCause::Rejected => "a person rejected it",
            StaleCause::NotPending => "it is not waiting for a person",
            StaleCause::TrialChanged => "the trial behind it changed or is gone",
            StaleCause::Expired => StaleReason::Expired.words(),
            StaleCause::ApprovalExpired => StaleReason::ApprovalExpired.words(),
            StaleCause::ConfigurationChanged => StaleReason::ConfigurationChanged.words(),
        }
    }

    /// The cause of a plan that cannot be applied, from its recorded facts: what
    /// [`PlanFacts::state`] says, with used and rejected plans named as such.
    pub fn of(facts: &PlanFacts, now: i64, current_version: i64) -> Option<StaleCause> {
        if facts.rejected_at.is_some() {
            return Some(StaleCause::Rejected);
        }
        if facts.used_at.is_some() {
            return Some(StaleCause::Used);
        }
        match facts.state(now, current_version) {
            (PlanState::Stale, Some(reason)) => Some(reason.into()),
            _ => None,
        }
    }
}

impl From<StaleReason> for StaleCause {
    fn from(reason: StaleReason) -> Self {
        match reason {
            StaleReason::Expired => StaleCause::Expired,
            StaleReason::ApprovalExpired => StaleCause::ApprovalExpired,
            StaleReason::ConfigurationChanged => StaleCause::ConfigurationChanged,
        }
    }
}

/// What is recorded of a plan, in milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanFacts {
    pub expires_at: i64,
    pub used_at: Option<i64>,
    pub rejected_at: Option<i64>,
    /// Set when an endpoint's confirm put the plan before a person.
    pub pending_at: Option<i64>,
    pub approval_expires_at: Option<i64>,
    pub base_config_version: i64,
    /// Set when its guard reverted the change it applied.
    pub reverted_at: Option<i64>,
}

impl PlanFacts {
    /// The plan's state at `now` against the webhook's `current_version`, and why it is stale
    /// when it is. Applied and rejected are final: nothing that happens later changes them.
    pub fn state(&self, now: i64, current_version: i64) -> (PlanState, Option<StaleReason>) {
        if self.used_at.is_some() {
            if self.reverted_at.is_some() {
                return (PlanState::Reverted, None);
            }
            return (PlanState::Applied, None);
        }
        if self.rejected_at.is_some() {
            return (PlanState::Rejected, None);
        }
        if self.base_config_version != current_version {
            return (PlanState::Stale, Some(StaleReason::ConfigurationChanged));
        }
        match self.pending_at {
            // A pending plan lives by the approval TTL, not the plan's own.
            Some(_) => match self.approval_expires_at {
                Some(until) if now >= until => {
                    (PlanState::Stale, Some(StaleReason::ApprovalExpired))
                }
                _ => (PlanState::PendingApproval, None),
            },
            None if now >= self.expires_at => (PlanState::Stale, Some(StaleReason::Expired)),
            None => (PlanState::Planned, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> PlanFacts {
        PlanFacts {
            expires_at: 1_000,
            base_config_version: 3,
            ..PlanFacts::default()
        }
    }

    #[test]
    fn a_fresh_plan_is_planned_until_it_expires() {
        assert_eq!(fresh().state(999, 3), (PlanState::Planned, None));
        assert_eq!(
            fresh().state(1_000, 3),
            (PlanState::Stale, Some(StaleReason::Expired))
        );
    }

    #[test]
    fn a_save_since_the_plan_makes_it_stale_even_while_pending() {
        assert_eq!(
            fresh().state(10, 4),
            (PlanState::Stale, Some(StaleReason::ConfigurationChanged))
        );
        let pending = PlanFacts {
            pending_at: Some(5),
            approval_expires_at: Some(86_400_000),
            ..fresh()
        };
        assert_eq!(
            pending.state(10, 4),
            (PlanState::Stale, Some(StaleReason::ConfigurationChanged))
        );
    }

    #[test]
    fn a_pending_plan_outlives_its_token_ttl_until_the_approval_ttl() {
        let pending = PlanFacts {
            pending_at: Some(500),
            approval_expires_at: Some(5_000),
            ..fresh()
        };
        assert_eq!(pending.state(2_000, 3), (PlanState::PendingApproval, None));
        assert_eq!(
            pending.state(5_000, 3),
            (PlanState::Stale, Some(StaleReason::ApprovalExpired))
        );
    }

    #[test]
    fn applied_and_rejected_are_final() {
        let applied = PlanFacts {
            used_at: Some(10),
            ..fresh()
        };
        assert_eq!(applied.state(99_999, 9), (PlanState::Applied, None));
        let reverted = PlanFacts {
            reverted_at: Some(20),
            ..applied
        };
        assert_eq!(reverted.state(99_999, 9), (PlanState::Reverted, None));
        let rejected = PlanFacts {
            pending_at: Some(5),
            rejected_at: Some(10),
            ..fresh()
        };
        assert_eq!(rejected.state(99_999, 9), (PlanState::Rejected, None));
    }

    #[test]
    fn states_read_as_the_words_agents_see() {
        let words: Vec<String> = [
            PlanState::Planned,
            PlanState::PendingApproval,
            PlanState::Applied,
            PlanState::Rejected,
            PlanState::Stale,
            PlanState::Reverted,
        ]
        .iter()
        .map(|s| {
            let word = serde_json::to_value(s)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string();
            assert_eq!(word, s.as_str());
            word
        })
        .collect();
        assert_eq!(
            words,
            [
                "planned",
                "pending_approval",
                "applied",
                "rejected",
                "stale",
                "reverted"
            ]
        );
    }

    #[test]
    fn a_plan_that_cannot_be_applied_names_its_cause() {
        let used = PlanFacts {
            used_at: Some(10),
            ..fresh()
        };
        assert_eq!(StaleCause::of(&used, 5, 3), Some(StaleCause::Used));
        let rejected = PlanFacts {
            rejected_at: Some(10),
            ..fresh()
        };
        assert_eq!(StaleCause::of(&rejected, 5, 3), Some(StaleCause::Rejected));
        assert_eq!(
            StaleCause::of(&fresh(), 1_000, 3),
            Some(StaleCause::Expired)
        );
        assert_eq!(
            StaleCause::of(&fresh(), 5, 4),
            Some(StaleCause::ConfigurationChanged)
        );
        assert_eq!(StaleCause::of(&fresh(), 5, 3), None);
        let words: std::collections::BTreeSet<&str> =
            StaleCause::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            words.len(),
            StaleCause::ALL.len(),
            "each cause has its own word"
        );
    }
}
