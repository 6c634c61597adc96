//! What a trial's candidate costs, and so where it runs (issues 45 and 46): apart, in a
//! replay-priority call of its own, until it has shown itself cheap; then in the live call,
//! beside the live rules, until it shows itself costly; then apart for good (in this
//! process). Pure: the live runner feeds it each evaluation's decision and CPU time.

use std::time::Duration;

use switchboard_model::fault;
use switchboard_proto::router::v1::Decision;

/// The most a candidate's rules may take per delivery, on average, and still ride in the
/// live call: about what a call of its own costs the router to decode and parse a delivery
/// again (docs/benchmarks.md, "Trials"), so beside the live rules it never costs more than
/// apart, and the live answer waits at most that for it.
pub const IN_CALL_MAX: Duration = Duration::from_micros(250);

/// The most one evaluation counts in a candidate's average: one this slow never takes a
/// candidate out of the live call, three in a row do.
const IN_CALL_SAMPLE_MAX: Duration = Duration::from_micros(1500);

/// The average past which a candidate in the live call leaves it: twice the average it
/// entered under, so one that costs about [`IN_CALL_MAX`] does not go in and out.
const IN_CALL_LEAVE: Duration = Duration::from_micros(500);

/// Evaluations a candidate runs apart, its average under [`IN_CALL_MAX`], before it may ride
/// in the live call: a candidate over its budget never enters it.
pub const IN_CALL_PROOF: u64 = 16;

/// What a trial's candidate costs, and so where it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// A moving average of its rules' CPU time per delivery (an eighth per sample), in ns.
    mean_ns: u64,
    samples: u64,
    place: Place,
    /// Evaluations in this process, by where they ran.
    pub evaluated: Places,
}

/// Evaluations of one trial's candidate by where they ran (this process's, since start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Places {
    pub live_call: u64,
    pub apart: u64,
}

/// Where a candidate runs: apart until it has shown itself cheap, then in the live call
/// until it shows itself costly, then apart for good (in this process).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Place {
    #[default]
    Proving,
    InCall,
    Apart,
}

impl Cost {
    /// Whether the candidate may ride in the live call.
    pub fn in_call(&self) -> bool {
        self.place == Place::InCall
    }

    /// One evaluation (in the live call or apart): its decision and its rules' CPU time.
    /// A fault that is the candidate's cost (over its budget, a crashed child) sends it apart
    /// for good; so does, once it is in the live call, an average past [`IN_CALL_LEAVE`]. It
    /// enters the live call after [`IN_CALL_PROOF`] evaluations with the average under
    /// [`IN_CALL_MAX`].
    /// Each sample counts at most [`IN_CALL_SAMPLE_MAX`] in the average, so one slow first
    /// evaluation in a fresh child (a pattern compiled on first use) is not a verdict.
    pub fn observe(&mut self, after: &Decision, unit_ns: u64) {
        if self.place == Place::Apart {
            return;
        }
        let limit = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let sample = unit_ns.min(limit(IN_CALL_SAMPLE_MAX));
        self.mean_ns = if self.samples == 0 {
            sample
        } else {
            self.mean_ns - self.mean_ns / 8 + sample / 8
        };
        self.samples += 1;
        let costly_fault = after.fault_code == fault::BUDGET_EXCEEDED
            || after.fault_code == fault::SANDBOX_CRASHED;
        self.place = match self.place {
            _ if costly_fault => Place::Apart,
            Place::InCall if self.mean_ns > limit(IN_CALL_LEAVE) => Place::Apart,
            Place::Proving
                if self.mean_ns <= limit(IN_CALL_MAX) && self.samples >= IN_CALL_PROOF =>
            {
                Place::InCall
            }
            place => place,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided() -> Decision {
        Decision {
            outcome: switchboard_proto::router::v1::Outcome::Drop as i32,
            ..Default::default()
        }
    }

    fn faulted(code: &str) -> Decision {
        Decision {
            outcome: switchboard_proto::router::v1::Outcome::Fault as i32,
            fault_code: code.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_cheap_candidate_enters_the_live_call_only_once_proven_apart() {
        let mut cost = Cost::default();
        for _ in 1..IN_CALL_PROOF {
            cost.observe(&decided(), 20_000);
            assert!(
                !cost.in_call(),
                "not before {IN_CALL_PROOF} cheap evaluations"
            );
        }
        cost.observe(&decided(), 20_000);
        assert!(cost.in_call());
        // A rule fault is the rule's answer, not its cost: it stays.
        cost.observe(&faulted(fault::RULE_FAULT), 20_000);
        assert!(cost.in_call());
    }

    #[test]
    fn a_sign_of_cost_sends_the_candidate_apart_for_good() {
        let proven = || {
            let mut cost = Cost::default();
            for _ in 0..IN_CALL_PROOF {
                cost.observe(&decided(), 10_000);
            }
            assert!(cost.in_call());
            cost
        };
        for sign in [
            vec![(faulted(fault::BUDGET_EXCEEDED), 0)],
            vec![(faulted(fault::SANDBOX_CRASHED), 0)],
            vec![(decided(), 6_000_000); 3],
        ] {
            let mut cost = proven();
            for (after, ns) in &sign {
                cost.observe(after, *ns);
            }
            assert!(!cost.in_call(), "{sign:?}");
            for _ in 0..100 {
                cost.observe(&decided(), 1_000);
            }
            assert!(!cost.in_call(), "for good: {sign:?}");
        }
        // An average past the limit, each evaluation under the single limit.
        let mut cost = proven();
        for _ in 0..40 {
            cost.observe(&decided(), 600_000);
        }
        assert!(!cost.in_call());
        // Between the two limits: it does not enter, and once in, it does not leave.
        let mut cost = Cost::default();
        for _ in 0..40 {
            cost.observe(&decided(), 400_000);
        }
        assert!(!cost.in_call(), "over {IN_CALL_MAX:?} on average: not in");
        let mut cost = proven();
        for _ in 0..40 {
            cost.observe(&decided(), 400_000);
        }
        assert!(
            cost.in_call(),
            "under {IN_CALL_LEAVE:?} on average: not out"
        );
    }

    #[test]
    fn one_slow_evaluation_is_not_a_verdict() {
        // The first evaluation in a fresh child compiles a pattern: slow once, then cheap.
        let mut cost = Cost::default();
        cost.observe(&decided(), 8_000_000);
        for _ in 1..IN_CALL_PROOF {
            cost.observe(&decided(), 20_000);
        }
        assert!(cost.in_call(), "{cost:?}");
        // And in the live call, one slow evaluation among cheap ones keeps it there.
        cost.observe(&decided(), 8_000_000);
        assert!(cost.in_call(), "{cost:?}");
    }

    #[test]
    fn a_candidate_over_its_budget_never_enters_the_live_call() {
        let mut cost = Cost::default();
        cost.observe(&faulted(fault::BUDGET_EXCEEDED), 0);
        for _ in 0..100 {
            cost.observe(&decided(), 1_000);
        }
        assert!(!cost.in_call());
    }
}
