//! The parent side: a pool of sandbox children, each held to a per-envelope budget.
//!
//! A batch is split into chunks, and every chunk becomes a job on the pool's queue, shared
//! by every call. A **lane** (at most one per child slot) owns one child and keeps it busy:
//! it writes a job's request, and while the child evaluates it writes the next one, so the
//! next request is already in the child's pipe when the current one ends (at most
//! [`DEPTH`] requests per child). Answers are read strictly in order.
//!
//! Each child marks the (delivery, configuration) unit it runs, and the ordinal of the
//! request that unit belongs to, on its progress board, and sends answers in batches; the
//! parent's watchdog looks at the board once per budget. A child whose unit overruns is
//! killed and that unit faults `budget_exceeded`; a child that dies faults the unit it was
//! running `sandbox_crashed`. Either way what the child answered before is kept, and the
//! units left (of the request it ran and of the one queued behind it) go back to the queue
//! for a fresh child. Budgets are CPU time, so a unit preempted on a busy machine is never
//! blamed for the wait; a child killed from outside (not by its unit) blames nothing and its
//! units are run again elsewhere.
//!
//! Queued chunks are taken by class (live, interactive, replay) and, within a class, by
//! tenants in turn ([`super::schedule`]). Replays run on children at a lower CPU priority,
//! and one lane beyond `children` serves only live and interactive work, so a replay never
//! holds every child while a delivery waits (docs/sandbox.md, "Classes and shares").
//!
//! Here: the pool's configuration, its public API and what it shares with its lanes
//! (`Inner`). The rest, by concern: `call` (a call, its chunks and the caller's
//! [`Evaluation`]), `queue` (where chunks wait and which lane takes them), `lanes` (a lane
//! running chunks on its child, pipelined), `children` (starting, checking out and in the
//! children; the parent's half of their protocol), `watchdog` (budgets and blame),
//! `validation`, `terms` (configurations' rule ids and digests, kept by text) and `encode`
//! (a child's evaluate request, from borrowed parts).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use switchboard_proto::router::v1::{
    Configuration, EvaluateResponse, RoutingContext, StoredDelivery,
};
use tokio::sync::{Notify, Semaphore};

use super::confine::ChildLimits;
use super::schedule::Class;
use call::Call;
use children::ChildProcess;
use queue::Queue;
use terms::Terms;

mod call;
mod children;
mod encode;
mod lanes;
mod queue;
mod terms;
mod validation;
mod watchdog;

pub use call::{Evaluation, Work};

/// Evaluate requests a child holds at once: the one it runs and the next, already in its
/// pipe, so it never waits for the parent between two chunks.
pub const DEPTH: usize = 2;

/// How sandbox children are started and held to account.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// The binary to run (the router's own) and the arguments that make it a child.
    pub program: PathBuf,
    pub args: Vec<String>,
    /// How many children evaluate at once.
    pub children: usize,
    /// Per envelope, per configuration.
    pub budget: Duration,
    /// For compiling a batch's configurations, and for a whole validation.
    pub compile_budget: Duration,
    pub limits: ChildLimits,
    /// Refuse to run when the kernel does not accept the seccomp filter or Landlock.
    pub require_confinement: bool,
    /// Most deliveries sent to one child in one message.
    pub max_chunk: usize,
    /// Idle children kept started and ready beyond those at work, so a lane whose child was
    /// killed (a budget fault, a crash) goes on at once instead of waiting for a new one.
    pub spares: usize,
    /// The nice value replays run at (children for replays are started with it): on a
    /// busy machine the kernel gives live and interactive work the CPU first.
    pub replay_nice: i32,
    /// The nice value interactive work runs at (fixtures, dry runs and validations evaluate
    /// a tenant's own rules): on a busy machine live deliveries get the CPU first.
    pub interactive_nice: i32,
}

impl SandboxConfig {
    /// Children of `program` run as `program sandbox-child …`.
    pub fn new(program: PathBuf) -> Self {
        Self {
            program,
            args: vec!["sandbox-child".into()],
            children: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            budget: Duration::from_millis(50),
            compile_budget: Duration::from_secs(5),
            limits: ChildLimits::default(),
            require_confinement: true,
            max_chunk: 128,
            spares: 1,
            replay_nice: 10,
            interactive_nice: 5,
        }
    }

    /// The nice value children running `class` are started with.
    pub fn nice(&self, class: Class) -> i32 {
        match class {
            Class::Live => 0,
            Class::Interactive => self.interactive_nice,
            Class::Replay => self.replay_nice,
        }
    }
}

/// Why the pool could not do its work at all (as opposed to a faulted envelope).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot start a sandbox child: {0}")]
    Spawn(String),
    #[error("sandbox children run unconfined ({0}); allow unconfined sandboxes to run anyway")]
    Unconfined(String),
}

/// Counters an operator watches.
#[derive(Debug, Default)]
pub struct SandboxStats {
    pub spawned: AtomicU64,
    pub budget_exceeded: AtomicU64,
    pub crashed: AtomicU64,
    pub units: AtomicU64,
    /// Children that died of something not their unit's doing (killed from outside, their
    /// lifetime CPU limit): their units were run again, nothing was blamed.
    pub lost_children: AtomicU64,
    /// Units answered `not_evaluated` because their call reached its `max_child_faults`.
    pub not_evaluated: AtomicU64,
    /// Children started while work waited for them (no spare was ready).
    pub spawned_on_demand: AtomicU64,
    /// Units that ran past their budget beside other work and were run again alone.
    pub rerun_alone: AtomicU64,
    /// Of those, the ones that kept within their budget alone: no fault (issue 43).
    pub cleared_alone: AtomicU64,
}

/// How busy a pool is at one moment ([`SandboxPool::occupancy`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occupancy {
    pub busy: usize,
    pub idle: usize,
    pub queued: [(Class, usize); 3],
}

/// What the pool shares with its lanes.
struct Inner {
    config: SandboxConfig,
    /// [`Terms`] by configuration message (its bytes). Keys are tenants' text: a seeded hash,
    /// so no tenant can choose texts that collide.
    terms: Mutex<HashMap<Vec<u8>, Arc<Terms>, foldhash::fast::RandomState>>,
    idle: Mutex<Vec<ChildProcess>>,
    /// One per child slot: held by a lane, or by a validation.
    permits: Arc<Semaphore>,
    /// Two slots beyond `children`, so that work never waits behind less urgent work that
    /// holds every child: one for live work (while interactive work or replays hold
    /// slots), one for live or interactive work (while replays do).
    reserve_live: Arc<Semaphore>,
    reserve_interactive: Arc<Semaphore>,
    /// Spare children being started now.
    spawning: AtomicUsize,
    /// Lanes running replays now: both reserve slots open.
    replay_lanes: AtomicUsize,
    /// Lanes running interactive work now: the live reserve slot opens.
    interactive_lanes: AtomicUsize,
    stats: SandboxStats,
    /// CPU time children spent per tenant and class.
    cpu: Mutex<HashMap<(String, Class), Duration>>,
    /// Process ids of the children alive, with the class each runs: for operators (and
    /// tests) to find them, and to pause them while a unit is confirmed alone.
    live: Mutex<Vec<(u32, Class)>>,
    /// Held while a unit over its budget runs again alone: one such re-run at a time.
    alone: tokio::sync::Mutex<()>,
    /// The children paused while it runs (`None` when none is paused).
    paused: Mutex<Option<Vec<u32>>>,
    queue: Mutex<Queue>,
    /// Woken when a job is queued.
    queued: Notify,
    /// Validations waiting for a child slot: lanes take no new jobs meanwhile, finish what
    /// they have and give their slot up, so a validation waits at most two chunks.
    validations_waiting: AtomicUsize,
    /// The runtime the pool was started on: lanes and spares run there, wherever a call's
    /// parts are pushed from (a replay's are decoded on the background runtime, whose
    /// low-priority threads must not run a lane that may next take live work).
    runtime: tokio::runtime::Handle,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A pool of sandbox children.
pub struct SandboxPool {
    inner: Arc<Inner>,
}

impl SandboxPool {
    /// Starts the pool and one child to check that children start and are confined.
    pub async fn start(config: SandboxConfig) -> Result<Arc<Self>, SandboxError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| SandboxError::Spawn("no tokio runtime to run lanes on".into()))?;
        let inner = Arc::new(Inner {
            terms: Mutex::default(),
            permits: Arc::new(Semaphore::new(config.children.max(1))),
            reserve_live: Arc::new(Semaphore::new(1)),
            reserve_interactive: Arc::new(Semaphore::new(1)),
            spawning: AtomicUsize::new(0),
            replay_lanes: AtomicUsize::new(0),
            interactive_lanes: AtomicUsize::new(0),
            cpu: Mutex::new(HashMap::new()),
            config,
            idle: Mutex::new(Vec::new()),
            stats: SandboxStats::default(),
            live: Mutex::new(Vec::new()),
            alone: tokio::sync::Mutex::new(()),
            paused: Mutex::new(None),
            queue: Mutex::new(Queue::default()),
            queued: Notify::new(),
            validations_waiting: AtomicUsize::new(0),
            runtime,
        });
        let (first, ready) = inner.spawn(Class::Live).await?;
        if inner.config.require_confinement && (!ready.seccomp || ready.landlock == "none") {
            return Err(SandboxError::Unconfined(format!(
                "seccomp: {}, landlock: {}{}",
                if ready.seccomp { "on" } else { "off" },
                ready.landlock,
                if ready.detail.is_empty() {
                    String::new()
                } else {
                    format!("; {}", ready.detail)
                }
            )));
        }
        // The first child is the first live spare; without spares each class starts its
        // children when its work needs them.
        if inner.config.spares > 0 {
            lock(&inner.idle).push(first);
        } else {
            inner.forget(first.pid);
            drop(first);
        }
        inner.refill();
        Ok(Arc::new(Self { inner }))
    }

    /// CPU time children spent on each tenant's work of each class, so far.
    pub fn cpu_by_tenant(&self) -> Vec<(String, Class, Duration)> {
        let mut spent: Vec<_> = lock(&self.inner.cpu)
            .iter()
            .map(|((tenant, class), d)| (tenant.clone(), *class, *d))
            .collect();
        spent.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        spent
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    pub fn stats(&self) -> &SandboxStats {
        &self.inner.stats
    }

    /// The pool's state now, for `/metrics`: children at work and idle (spares and children
    /// between calls), and chunks queued per class.
    pub fn occupancy(&self) -> Occupancy {
        let alive = lock(&self.inner.live).len();
        let idle = lock(&self.inner.idle).len();
        let queue = lock(&self.inner.queue);
        Occupancy {
            busy: alive.saturating_sub(idle),
            idle,
            queued: Class::ALL.map(|class| (class, queue.jobs.len_of(|c| c == class))),
        }
    }

    /// Process ids of the children alive now.
    pub fn child_pids(&self) -> Vec<u32> {
        lock(&self.inner.live).iter().map(|(pid, _)| *pid).collect()
    }

    /// Evaluates one or two configurations over every delivery as interactive work of no
    /// tenant in particular; every unit gets a decision.
    pub async fn evaluate(
        &self,
        ctx: &RoutingContext,
        configurations: &[Configuration],
        deliveries: &[StoredDelivery],
        budget: Option<Duration>,
    ) -> Result<EvaluateResponse, SandboxError> {
        let work = Work {
            budget,
            ..Work::default()
        };
        self.evaluate_as(ctx, configurations, deliveries, &work)
            .await
    }

    /// Evaluates one or two configurations over every delivery, queued as `work` says;
    /// every unit gets a decision.
    pub async fn evaluate_as(
        &self,
        ctx: &RoutingContext,
        configurations: &[Configuration],
        deliveries: &[StoredDelivery],
        work: &Work,
    ) -> Result<EvaluateResponse, SandboxError> {
        let mut evaluation = self.begin(ctx, configurations, work);
        evaluation.push(deliveries)?;
        evaluation.finish().await
    }

    /// Starts a call whose deliveries arrive in parts ([`Evaluation::push`]): each part's
    /// chunks are queued as soon as it arrives, so children start on the first part while
    /// the caller is still sending the rest.
    pub fn begin(
        &self,
        ctx: &RoutingContext,
        configurations: &[Configuration],
        work: &Work,
    ) -> Evaluation<'_> {
        let pool = &self.inner;
        let call = Arc::new(Call {
            class: work.class.unwrap_or(Class::Interactive),
            tenant: work.tenant.clone(),
            terms: configurations.iter().map(|c| pool.terms_of(c)).collect(),
            max_child_faults: work.max_child_faults,
            child_faults: AtomicU32::new(0),
            unit_ns: AtomicU64::new(0),
            ctx: ctx.clone(),
            configurations: configurations.to_vec(),
        });
        Evaluation {
            pool,
            call,
            budget: work.budget.unwrap_or(pool.config.budget),
            answers: Vec::new(),
            event_ids: Vec::new(),
        }
    }
}
