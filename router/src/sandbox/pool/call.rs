//! A call and its chunks: [`Work`] (how a caller wants its evaluation run), the [`Call`]
//! its chunks share, a [`Job`] (one chunk: its deliveries, the answers so far, the request
//! that asks a child for what is left, and how a job of a call stopped at its
//! `max_child_faults` is answered `not_evaluated`), and [`Evaluation`], the caller's handle
//! that pushes a call's parts onto the queue as chunks and gathers their answers. These are
//! the data the rest of the pool passes around, so they live apart from the code that runs
//! them on children.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use switchboard_proto::router::v1::{
    Configuration, Decision, DeliveryDecisions, EvaluateResponse, RoutingContext, StoredDelivery,
};
use tokio::sync::oneshot;

use super::encode::encode_evaluate;
use super::terms::Terms;
use super::{Inner, SandboxError, SandboxStats};
use crate::engine::decision::{self, count_rules, fault};
use crate::sandbox::schedule::{Class, Queued};

/// How one evaluate call wants its work done.
#[derive(Clone, Debug, Default)]
pub struct Work {
    /// Per unit, of the child's CPU time; `None` takes the pool's.
    pub budget: Option<Duration>,
    pub class: Option<Class>,
    /// Whose work it is (an owner scope); empty for work shared between tenants.
    pub tenant: String,
    /// Stop after this many units exceeded their budget or crashed their child (0: never).
    pub max_child_faults: u32,
}

/// What the chunks of one call share.
pub(super) struct Call {
    pub(super) class: Class,
    pub(super) tenant: String,
    /// What every chunk's request carries besides its deliveries.
    pub(super) ctx: RoutingContext,
    pub(super) configurations: Vec<Configuration>,
    /// Per configuration, what the call needs to know of it (the ids of its rules, to name
    /// the rule a fault interrupted, and its digest).
    pub(super) terms: Vec<Arc<Terms>>,
    pub(super) max_child_faults: u32,
    pub(super) child_faults: AtomicU32,
    /// What one unit of this call costs, in nanoseconds of a child's CPU time (0 until the
    /// first request of it is answered): how many deliveries a lane gives a child at once.
    pub(super) unit_ns: AtomicU64,
}

/// About how much CPU one request of a call may take before the next tenant's turn: a lane
/// gives a child at most this much of a call's work at once ([`Call::slice`]), so a cheap
/// call waits behind slices this long, never behind another tenant's whole chunk.
pub(super) const SLICE: Duration = Duration::from_millis(20);

/// Deliveries in a call's first request, before its cost is known.
const FIRST_SLICE: usize = 1;

impl Call {
    /// Deliveries to give a child in one request: about [`SLICE`] of CPU by what the call's
    /// units have cost so far (at least one delivery).
    pub(super) fn slice(&self) -> usize {
        let n = self.configurations.len().max(1) as u64;
        match self.unit_ns.load(Ordering::Relaxed) {
            0 => FIRST_SLICE,
            ns => (SLICE.as_nanos() as u64 / ns.saturating_mul(n)).max(1) as usize,
        }
    }

    /// A request of `units` units cost `spent`: the call's estimate moves a quarter of the
    /// way to it (the first sets it).
    pub(super) fn observe(&self, spent: Duration, units: usize) {
        if units == 0 {
            return;
        }
        let sample = (spent.as_nanos() as u64 / units as u64).max(1);
        let old = self.unit_ns.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample
        } else {
            (old * 3 + sample) / 4
        };
        self.unit_ns.store(new.max(1), Ordering::Relaxed);
    }

    pub(super) fn stopped(&self) -> bool {
        self.max_child_faults > 0
            && self.child_faults.load(Ordering::Relaxed) >= self.max_child_faults
    }
}

type Answers = Result<Answered, SandboxError>;

/// A chunk's answers: per unit its decision, and the CPU time its rules took in the child.
pub(super) struct Answered {
    pub(super) units: Vec<Option<Decision>>,
    pub(super) spent_ns: Vec<u64>,
}

/// One chunk of one call: its deliveries, the answers so far, and where they go.
///
/// The request is encoded when a lane takes the job, not when the call is queued: a call's
/// bodies are held once (shared, as the decoded call holds them), and only the chunks in a
/// child's pipe exist a second time, encoded.
pub(super) struct Job {
    pub(super) deliveries: Vec<StoredDelivery>,
    /// Configurations per delivery.
    pub(super) configurations: usize,
    pub(super) units: Vec<Option<Decision>>,
    /// Per unit, the CPU time its rules took in the child (0 where the parent decided it).
    pub(super) spent_ns: Vec<u64>,
    pub(super) budget: Duration,
    pub(super) reply: oneshot::Sender<Answers>,
    pub(super) call: Arc<Call>,
    /// Children lost under this chunk to something other than its units.
    pub(super) lost_children: u32,
    /// A unit that ran past its budget while other work ran beside it: it is run again
    /// alone ([`super::lanes`], `confirm`) before it is called a fault, so a budget fault is
    /// a property of the rule, not of the neighbours (issue 43).
    pub(super) suspect: Option<usize>,
    /// This job is such a re-run: a unit over its budget here is a fault...
    pub(super) confirming: bool,
    /// ...unless another run alone follows: then the overrun is recorded in its decision
    /// but neither counted nor logged as a fault.
    pub(super) then_again: bool,
    /// Units its request in flight asks for (what the CPU it costs is divided by).
    pub(super) asked: usize,
}

impl Queued for Job {
    fn class(&self) -> Class {
        self.call.class
    }
    fn tenant(&self) -> &str {
        &self.call.tenant
    }
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

impl Job {
    /// The request that gives a child the undecided units of at most `deliveries`
    /// deliveries, the unit its first delivery starts at, and how many units it asks for;
    /// `None` when every unit is decided. What it leaves undecided runs in a later request.
    pub(super) fn next_request(&self, deliveries: usize) -> Option<(Bytes, usize, usize)> {
        let start = self.units.iter().position(Option::is_none)?;
        // After a failure (rare), only what is left: from the first undecided unit's
        // delivery, skipping its decided units and omitting any decided later.
        let n = self.configurations.max(1);
        let first = start / n;
        let base = first * n;
        let last = first
            .saturating_add(deliveries.max(1))
            .min(self.deliveries.len());
        let end = (last * n).min(self.units.len());
        let omit: Vec<u32> = (start..end)
            .filter(|u| self.units[*u].is_some())
            .map(|u| (u - base) as u32)
            .collect();
        let asked = (start..end).len() - omit.len();
        let request = encode_evaluate(
            &self.call.ctx,
            &self.call.configurations,
            &self.deliveries[first.min(last)..last],
            (start - base) as u32,
            &omit,
        );
        Some((request, base, asked))
    }

    /// Whether every unit has its decision.
    pub(super) fn decided(&self) -> bool {
        self.units.iter().all(Option::is_some)
    }

    /// The job that runs unit `unit` of this one alone (its delivery, every other unit of it
    /// left out), to confirm a fault; its answer goes to the receiver.
    pub(super) fn alone(&self, unit: usize) -> (Self, oneshot::Receiver<Answers>) {
        let n = self.configurations.max(1);
        let (reply, answer) = oneshot::channel();
        let mut units = vec![Some(Decision::default()); n];
        units[unit % n] = None;
        let job = Job {
            deliveries: self.deliveries.get(unit / n).cloned().into_iter().collect(),
            configurations: self.configurations,
            spent_ns: vec![0; units.len()],
            units,
            budget: self.budget,
            reply,
            call: self.call.clone(),
            lost_children: 0,
            suspect: None,
            confirming: true,
            then_again: false,
            asked: 0,
        };
        (job, answer)
    }

    pub(super) fn finish(self, stats: &SandboxStats) {
        stats
            .units
            .fetch_add(self.units.len() as u64, Ordering::Relaxed);
        let _ = self.reply.send(Ok(Answered {
            units: self.units,
            spent_ns: self.spent_ns,
        }));
    }

    /// The job, or `None` when its call stopped and nothing of it is left to run ([`Job::stop`]).
    pub(super) fn unless_done(self, stats: &SandboxStats) -> Option<Self> {
        if self.call.stopped() {
            self.stop(stats)
        } else {
            Some(self)
        }
    }

    /// Its call stopped at its `max_child_faults`: every unit of a delivery none of whose
    /// units was answered is `not_evaluated`. A delivery already partly answered (the
    /// saved configuration decided, the candidate faulted, or a child was killed before it
    /// sent what it had) keeps its remaining units to run, so the faults that stopped the
    /// call are answered whole, as they would be had it not stopped. Returns the job when
    /// such units remain; otherwise the chunk is done without a child.
    fn stop(mut self, stats: &SandboxStats) -> Option<Self> {
        let reason = format!(
            "not evaluated: the call stopped after {} of its evaluations exceeded their budget or crashed their child",
            self.call.max_child_faults
        );
        let n = self.configurations.max(1);
        let mut remaining = false;
        for delivery in self.units.chunks_mut(n) {
            if delivery.iter().all(Option::is_none) {
                for unit in delivery.iter_mut() {
                    stats.not_evaluated.fetch_add(1, Ordering::Relaxed);
                    *unit = Some(decision::fault("", fault::NOT_EVALUATED, reason.clone()));
                }
            } else {
                remaining |= delivery.iter().any(Option::is_none);
            }
        }
        if remaining {
            return Some(self);
        }
        self.finish(stats);
        None
    }

    /// The id of the rule `rule` of the configuration unit `unit` evaluates.
    pub(super) fn rule_of(&self, unit: usize, rule: Option<usize>) -> &str {
        let config = unit % self.configurations.max(1);
        rule.and_then(|r| self.call.terms.get(config)?.rule_ids.get(r))
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// One call's evaluation, begun with [`SandboxPool::begin`]: its chunks are on the pool's
/// queue from the moment their part is pushed; [`Evaluation::finish`] waits for them all.
/// Dropped unfinished, its queued chunks are abandoned (lanes skip them).
///
/// [`SandboxPool::begin`]: super::SandboxPool::begin
pub struct Evaluation<'p> {
    pub(super) pool: &'p Arc<Inner>,
    pub(super) call: Arc<Call>,
    pub(super) budget: Duration,
    pub(super) answers: Vec<oneshot::Receiver<Answers>>,
    /// Per delivery pushed so far, in order: the results name them.
    pub(super) event_ids: Vec<String>,
}

impl Evaluation<'_> {
    /// Deliveries pushed so far.
    pub fn deliveries(&self) -> usize {
        self.event_ids.len()
    }

    /// Queues `deliveries` (the next part of the call, in order) for the children.
    pub fn push(&mut self, deliveries: &[StoredDelivery]) -> Result<(), SandboxError> {
        let pool = self.pool;
        let n = self.call.configurations.len();
        self.event_ids
            .extend(deliveries.iter().map(|d| d.event_id.clone()));
        if n == 0 || deliveries.is_empty() {
            return Ok(());
        }
        let children = pool.config.children.max(1);
        let chunk = deliveries
            .len()
            .div_ceil(children)
            .clamp(1, pool.config.max_chunk.max(1));
        // Big bodies make smaller messages: a child's frame stays near CHUNK_BYTES.
        let chunks = switchboard_model::body::chunk_ranges(
            deliveries.iter().map(|d| d.body.len()),
            chunk,
            switchboard_model::body::CHUNK_BYTES,
        );
        for c in chunks.into_iter().map(|r| &deliveries[r]) {
            let (reply, answer) = oneshot::channel();
            pool.submit(Job {
                // Bodies are shared, not copied: a clone holds the same buffer.
                deliveries: c.to_vec(),
                configurations: n,
                units: vec![None; c.len() * n],
                spent_ns: vec![0; c.len() * n],
                budget: self.budget,
                reply,
                call: self.call.clone(),
                lost_children: 0,
                suspect: None,
                confirming: false,
                then_again: false,
                asked: 0,
            });
            self.answers.push(answer);
        }
        Ok(())
    }

    /// Waits for every unit pushed: one result per delivery, in push order, and the
    /// configurations' rule counters.
    pub async fn finish(self) -> Result<EvaluateResponse, SandboxError> {
        let n = self.call.configurations.len();
        let mut units = Vec::with_capacity(self.event_ids.len() * n);
        let mut spent = Vec::with_capacity(self.event_ids.len() * n);
        for answer in self.answers {
            let answered = answer.await.map_err(|_| {
                SandboxError::Spawn("the sandbox pool stopped before answering".into())
            })??;
            units.extend(answered.units);
            spent.extend(answered.spent_ns);
        }
        let mut it = units.into_iter();
        let mut spent = spent.into_iter();
        let results = self
            .event_ids
            .into_iter()
            .map(|event_id| DeliveryDecisions {
                event_id,
                decisions: (0..n)
                    .map(|_| {
                        it.next().flatten().unwrap_or_else(|| {
                            decision::fault("", fault::SANDBOX_CRASHED, "no answer")
                        })
                    })
                    .collect(),
                unit_ns: (0..n).map(|_| spent.next().unwrap_or(0)).collect(),
            })
            .collect::<Vec<_>>();
        let counters = self
            .call
            .terms
            .iter()
            .enumerate()
            .map(|(j, terms)| {
                count_rules(
                    &terms.digest,
                    &terms.counted_ids,
                    results.iter().filter_map(|r| r.decisions.get(j)),
                )
            })
            .collect();
        Ok(EvaluateResponse { results, counters })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use switchboard_proto::router::v1::{ChildRequest, child_request};

    #[test]
    fn a_retry_asks_only_for_what_is_left() {
        let deliveries: Vec<StoredDelivery> = (0..4)
            .map(|i| StoredDelivery {
                event_id: format!("ev-{i}"),
                ..Default::default()
            })
            .collect();
        let configurations = vec![Configuration::default(), Configuration::default()];
        let (reply, _answer) = oneshot::channel();
        let first = encode_evaluate(
            &RoutingContext::default(),
            &configurations,
            &deliveries,
            0,
            &[],
        );
        let mut job = Job {
            deliveries,
            configurations: 2,
            units: vec![None; 8],
            spent_ns: vec![0; 8],
            budget: Duration::from_millis(50),
            reply,
            call: Arc::new(Call {
                class: Class::Replay,
                tenant: "human:alice".into(),
                terms: [vec!["a", "b"], vec!["c"]]
                    .into_iter()
                    .map(|ids| {
                        Arc::new(Terms {
                            rule_ids: ids.iter().map(|id| id.to_string()).collect(),
                            ..Terms::default()
                        })
                    })
                    .collect(),
                max_child_faults: 0,
                child_faults: AtomicU32::new(0),
                unit_ns: AtomicU64::new(0),
                ctx: RoutingContext::default(),
                configurations,
            }),
            lost_children: 0,
            suspect: None,
            confirming: false,
            then_again: false,
            asked: 0,
        };
        assert_eq!(job.next_request(usize::MAX), Some((first, 0, 8)));
        // Unit 5 is delivery 2's candidate (configuration 1): its rule 0 is "c".
        assert_eq!(job.rule_of(5, Some(0)), "c");
        assert_eq!(job.rule_of(4, Some(1)), "b");
        assert_eq!(
            job.rule_of(4, None),
            "",
            "no rule when the board named none"
        );
        assert_eq!(job.rule_of(5, Some(7)), "", "out of range names none");
        // Units 0–2 answered, 4 faulted: ask from delivery 1 (unit 2), skipping one unit
        // and omitting the faulted one.
        for u in [0, 1, 2, 4] {
            job.units[u] = Some(Decision::default());
        }
        let (request, base, asked) = job.next_request(usize::MAX).expect("units are left");
        assert_eq!((base, asked), (2, 4));
        let req = ChildRequest::decode(request.slice(4..)).expect("decodes");
        let Some(child_request::Request::Evaluate(e)) = req.request else {
            panic!("an evaluate request");
        };
        let ids: Vec<&str> = e.deliveries.iter().map(|d| d.event_id.as_str()).collect();
        assert_eq!(ids, ["ev-1", "ev-2", "ev-3"]);
        assert_eq!(e.skip_units, 1);
        assert_eq!(e.omit_units, [2]);
        // A slice of two deliveries: delivery 1's unit 3 and delivery 2's unit 5.
        let (request, base, asked) = job.next_request(2).expect("units are left");
        assert_eq!((base, asked), (2, 2));
        let req = ChildRequest::decode(request.slice(4..)).expect("decodes");
        let Some(child_request::Request::Evaluate(e)) = req.request else {
            panic!("an evaluate request");
        };
        let ids: Vec<&str> = e.deliveries.iter().map(|d| d.event_id.as_str()).collect();
        assert_eq!(ids, ["ev-1", "ev-2"]);
        assert_eq!((e.skip_units, e.omit_units), (1, vec![2]));
        // Unit 5 alone: delivery 2, its other unit left out.
        let (alone, _answer) = job.alone(5);
        assert!(alone.confirming);
        assert_eq!(alone.deliveries[0].event_id, "ev-2");
        assert_eq!(alone.units, [Some(Decision::default()), None]);
        let (request, base, asked) = alone.next_request(usize::MAX).expect("one unit");
        assert_eq!((base, asked), (0, 1));
        let req = ChildRequest::decode(request.slice(4..)).expect("decodes");
        let Some(child_request::Request::Evaluate(e)) = req.request else {
            panic!("an evaluate request");
        };
        assert_eq!((e.deliveries.len(), e.skip_units), (1, 1));
        for u in [3, 5, 6, 7] {
            job.units[u] = Some(Decision::default());
        }
        assert!(job.decided());
        assert!(job.next_request(usize::MAX).is_none());
    }
}
