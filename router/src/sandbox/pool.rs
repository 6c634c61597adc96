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

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{BufMut, Bytes};
use rustix::io::{FdFlags, fcntl_setfd};

use switchboard_proto::router::v1::{
    ChildReady, ChildRequest, ChildResponse, Configuration, Decision, DeliveryDecisions,
    EvaluateResponse, Problem, RoutingContext, StoredDelivery, ValidateRequest, ValidateResponse,
    child_request, child_response,
};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::{Instant, sleep_until, timeout};

use super::confine::ChildLimits;
use super::frame::{FrameReader, write_frame_async};
use super::memory;
use super::progress::{PROGRESS_FD_ARG, Progress, ProgressBoard, cpu_ns_of, now_ns};
use super::schedule::{Class, Queued, Schedule};
use crate::engine::compile::rule_id;
use crate::engine::config::{Action, Configuration as Config, Rule};
use crate::engine::decision::{self, count_rules, fault};
use crate::engine::validate::{check_structure, parse_configuration};

/// Evaluate requests a child holds at once: the one it runs and the next, already in its
/// pipe, so it never waits for the parent between two chunks.
pub const DEPTH: usize = 2;

/// Capacity asked for the pipe to a child's stdin (the default is 64 KiB; 1 MiB is what an
/// unprivileged process may ask for), so most of a chunk's request (1–2 MB) is in the pipe
/// before the child gets to it and it reads it in a few reads rather than ~27, each of which
/// had to wait for the parent to be scheduled and write more.
const STDIN_PIPE_BYTES: usize = 1 << 20;

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
}

/// How busy a pool is at one moment ([`SandboxPool::occupancy`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occupancy {
    pub busy: usize,
    pub idle: usize,
    pub queued: [(Class, usize); 3],
}

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
/// What a call needs to know of one of its configurations besides evaluating it. Parsing
/// and hashing a 32-rule configuration cost the router more than a one-delivery call's own
/// work, and ingest sends the same saved configuration call after call, so each pool keeps
/// them by the configuration's text ([`Inner::terms_of`]).
#[derive(Debug, Default)]
struct Terms {
    /// Per rule, the id a fault names (`#<index>` for a rule without one).
    rule_ids: Vec<String>,
    /// Per rule, the id its counters carry (empty for a rule without one).
    counted_ids: Vec<String>,
    /// Empty for a configuration that does not parse (its units all fault anyway).
    digest: String,
}

impl Terms {
    fn of(json: &str) -> Self {
        match parse_configuration(json) {
            Ok(cfg) => Terms {
                rule_ids: cfg
                    .rules
                    .iter()
                    .enumerate()
                    .map(|(i, r)| rule_id(r, i))
                    .collect(),
                counted_ids: cfg
                    .rules
                    .iter()
                    .map(|r| r.id.clone().unwrap_or_default())
                    .collect(),
                digest: cfg.digest(),
            },
            Err(_) => Terms::default(),
        }
    }
}

/// Configurations' [`Terms`] kept by a pool, at most this many (then it starts over): a
/// router serves the saved configurations of the webhooks receiving deliveries now.
const TERMS_KEPT: usize = 256;

struct Call {
    class: Class,
    tenant: String,
    /// What every chunk's request carries besides its deliveries.
    ctx: RoutingContext,
    configurations: Vec<Configuration>,
    /// Per configuration, what the call needs to know of it (the ids of its rules, to name
    /// the rule a fault interrupted, and its digest).
    terms: Vec<Arc<Terms>>,
    max_child_faults: u32,
    child_faults: AtomicU32,
}

impl Call {
    fn stopped(&self) -> bool {
        self.max_child_faults > 0
            && self.child_faults.load(Ordering::Relaxed) >= self.max_child_faults
    }
}

/// Deaths not of a unit's doing a chunk may see before the unit the child was running is
/// blamed after all (so a unit that keeps its child from living cannot loop forever).
const MAX_LOST_CHILDREN_PER_CHUNK: u32 = 2;

/// Signals a unit brings on itself: jaq's abort on deep recursion, a stack overflow,
/// running out of its address space (an allocation failure aborts), a forbidden call.
fn unit_caused(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    matches!(
        status.signal(),
        Some(
            libc::SIGABRT
                | libc::SIGSEGV
                | libc::SIGBUS
                | libc::SIGILL
                | libc::SIGFPE
                | libc::SIGSYS
                | libc::SIGTRAP
        )
    )
}

struct ChildProcess {
    pid: u32,
    child: Child,
    stdin: ChildStdin,
    stdout: FrameReader<ChildStdout>,
    board: ProgressBoard,
    /// Evaluate requests written to this child. The child counts the ones it reads the same
    /// way and shows the ordinal of the one it runs on its board.
    sent: u64,
    /// The class of work this child runs, and only that: it was started at that class's
    /// nice value, and a fault in one class's work never costs another class its child.
    class: Class,
}

impl ChildProcess {
    async fn send(&mut self, req: child_request::Request) -> std::io::Result<()> {
        write_frame_async(&mut self.stdin, &ChildRequest { request: Some(req) }).await
    }

    async fn recv(&mut self, within: Duration) -> Result<child_response::Response, Failure> {
        match timeout(within, self.stdout.next::<ChildResponse>()).await {
            Err(_) => Err(Failure::Timeout),
            Ok(Err(_)) => Err(Failure::Died),
            Ok(Ok(ChildResponse { response: Some(r) })) => Ok(r),
            Ok(Ok(ChildResponse { response: None })) => Err(Failure::Died),
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    Timeout,
    Died,
}

/// Why a child stopped answering, and which unit of which request is to blame, when the
/// progress board says.
struct Stopped {
    failure: Failure,
    /// (request ordinal, unit relative to that request, the rule it ran).
    at: Option<At>,
    /// Whether what the child wrote may still be read (it was killed by the parent, or
    /// went away while the parent wrote to it), rather than its output having ended or gone
    /// wrong already.
    drain: bool,
}

type Answers = Result<Vec<Option<Decision>>, SandboxError>;

/// One chunk of one call: its deliveries, the answers so far, and where they go.
///
/// The request is encoded when a lane takes the job, not when the call is queued: a call's
/// bodies are held once (shared, as the decoded call holds them), and only the chunks in a
/// child's pipe exist a second time, encoded.
struct Job {
    deliveries: Vec<StoredDelivery>,
    /// Configurations per delivery.
    configurations: usize,
    units: Vec<Option<Decision>>,
    budget: Duration,
    reply: oneshot::Sender<Answers>,
    call: Arc<Call>,
    /// Children lost under this chunk to something other than its units.
    lost_children: u32,
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
    /// The request that gives a child every unit still undecided, and the unit its first
    /// delivery starts at; `None` when every unit is decided.
    fn next_request(&self) -> Option<(Bytes, usize)> {
        let start = self.units.iter().position(Option::is_none)?;
        // After a failure (rare), only what is left: from the first undecided unit's
        // delivery, skipping its decided units and omitting any decided later.
        let n = self.configurations.max(1);
        let first = start / n;
        let base = first * n;
        let omit: Vec<u32> = (start..self.units.len())
            .filter(|u| self.units[*u].is_some())
            .map(|u| (u - base) as u32)
            .collect();
        let request = encode_evaluate(
            &self.call.ctx,
            &self.call.configurations,
            &self.deliveries[first.min(self.deliveries.len())..],
            (start - base) as u32,
            &omit,
        );
        Some((request, base))
    }

    fn finish(self, stats: &SandboxStats) {
        stats
            .units
            .fetch_add(self.units.len() as u64, Ordering::Relaxed);
        let _ = self.reply.send(Ok(self.units));
    }

    /// The job, or `None` when its call stopped and nothing of it is left to run ([`Job::stop`]).
    fn unless_done(self, stats: &SandboxStats) -> Option<Self> {
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
    fn rule_of(&self, unit: usize, rule: Option<usize>) -> &str {
        let config = unit % self.configurations.max(1);
        rule.and_then(|r| self.call.terms.get(config)?.rule_ids.get(r))
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// The framed `ChildRequest` evaluating `configurations` over `deliveries`, encoded from
/// borrowed parts (the same bytes as encoding the message, without cloning the deliveries).
fn encode_evaluate(
    ctx: &RoutingContext,
    configurations: &[Configuration],
    deliveries: &[StoredDelivery],
    skip_units: u32,
    omit_units: &[u32],
) -> Bytes {
    use prost::encoding::{
        WireType, encode_key, encode_varint, encoded_len_varint, key_len, message, uint32,
    };
    // proto3 leaves default values out; so does this, to stay byte-identical.
    let skip_len = if skip_units == 0 {
        0
    } else {
        uint32::encoded_len(4, &skip_units)
    };
    let inner = message::encoded_len(1, ctx)
        + message::encoded_len_repeated(2, configurations)
        + message::encoded_len_repeated(3, deliveries)
        + skip_len
        + uint32::encoded_len_packed(5, omit_units);
    let outer = key_len(2) + encoded_len_varint(inner as u64) + inner;
    let mut buf = Vec::with_capacity(4 + outer);
    buf.put_u32_le(outer as u32);
    encode_key(2, WireType::LengthDelimited, &mut buf);
    encode_varint(inner as u64, &mut buf);
    message::encode(1, ctx, &mut buf);
    message::encode_repeated(2, configurations, &mut buf);
    message::encode_repeated(3, deliveries, &mut buf);
    if skip_units != 0 {
        uint32::encode(4, &skip_units, &mut buf);
    }
    uint32::encode_packed(5, omit_units, &mut buf);
    buf.into()
}

/// A request written to a child and not yet answered in full.
struct InFlight {
    job: Job,
    ordinal: u64,
    /// The chunk's unit the request's first delivery starts at.
    base: usize,
    compiled: bool,
    /// When it became the oldest request in flight (its compile budget runs from there).
    since: Instant,
}

/// What the pool shares with its lanes.
struct Inner {
    config: SandboxConfig,
    /// [`Terms`] by configuration text. Keys are tenants' text: a seeded hash, so no tenant
    /// can choose texts that collide.
    terms: Mutex<HashMap<String, Arc<Terms>, foldhash::fast::RandomState>>,
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
    /// Process ids of live children, for operators (and tests) to find them.
    live: Mutex<Vec<u32>>,
    queue: Mutex<Queue>,
    /// Woken when a job is queued.
    queued: Notify,
    /// Validations waiting for a child slot: lanes take no new jobs meanwhile, finish what
    /// they have and give their slot up, so a validation waits at most two chunks.
    validations_waiting: AtomicUsize,
}

/// Chunks waiting for a lane, by class and tenant ([`Schedule`]), and lanes started for
/// them that have not taken one yet.
#[derive(Default)]
struct Queue {
    jobs: Schedule<Job>,
    /// Lanes started and not yet at work: a busy lane leaves them the jobs they were started
    /// for instead of queueing them behind its own (children in parallel before pipelining).
    hungry: usize,
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
            queue: Mutex::new(Queue::default()),
            queued: Notify::new(),
            validations_waiting: AtomicUsize::new(0),
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
        lock(&self.inner.live).clone()
    }

    /// Validates a configuration in a child. If the child dies on it, the rules are
    /// validated one by one so the problem names the rule that killed it.
    pub async fn validate(
        &self,
        json: &str,
        ctx: &RoutingContext,
    ) -> Result<ValidateResponse, SandboxError> {
        match self.validate_in_child(json, ctx).await? {
            Some(resp) => Ok(resp),
            None => self.validate_rule_by_rule(json, ctx).await,
        }
    }

    async fn validate_in_child(
        &self,
        json: &str,
        ctx: &RoutingContext,
    ) -> Result<Option<ValidateResponse>, SandboxError> {
        let pool = &self.inner;
        let _slot = {
            let waiting = Waiting::new(pool);
            // A validation is interactive: while replays run, the interactive reserve slot if
            // it is free, so it does not wait for a replay's chunks; else the next child slot.
            let reserved = pool
                .may_reserve(Class::Interactive)
                .then(|| pool.reserve_interactive.clone().try_acquire_owned().ok())
                .flatten();
            let permit = match reserved {
                Some(permit) => permit,
                None => pool
                    .permits
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| SandboxError::Spawn(e.to_string()))?,
            };
            drop(waiting);
            // Lanes that gave their slot up for this one may have left jobs behind.
            pool.kick();
            Slot {
                pool: pool.clone(),
                permit: Some(permit),
            }
        };
        let mut child = pool.checkout(Class::Interactive).await?;
        let req = ValidateRequest {
            configuration: Some(Configuration {
                json: json.to_string(),
            }),
            context: Some(ctx.clone()),
        };
        if child
            .send(child_request::Request::Validate(req))
            .await
            .is_err()
        {
            pool.stats.crashed.fetch_add(1, Ordering::Relaxed);
            pool.forget(child.pid);
            return Ok(None);
        }
        match child.recv(pool.config.compile_budget).await {
            Ok(child_response::Response::Validated(resp)) => {
                pool.checkin(child);
                Ok(Some(resp))
            }
            _ => {
                pool.stats.crashed.fetch_add(1, Ordering::Relaxed);
                pool.forget(child.pid);
                Ok(None)
            }
        }
    }

    async fn validate_rule_by_rule(
        &self,
        json: &str,
        ctx: &RoutingContext,
    ) -> Result<ValidateResponse, SandboxError> {
        let config = match parse_configuration(json) {
            Ok(c) => c,
            Err(p) => {
                return Ok(ValidateResponse {
                    valid: false,
                    problems: vec![p],
                    digest: String::new(),
                });
            }
        };
        let mut problems = check_structure(&config, ctx);
        for (i, rule) in config.rules.iter().enumerate() {
            let id = rule.id.clone().unwrap_or_default();
            if problems
                .iter()
                .any(|p| p.rule_index == i as i32 && p.field.ends_with(".when"))
            {
                continue;
            }
            let alone = Config {
                rules: vec![Rule {
                    id: Some("r".into()),
                    description: None,
                    when: rule.when.clone(),
                    action: Action::Drop,
                }],
                ..Default::default()
            };
            let alone_json = serde_json::to_string(&alone).unwrap_or_default();
            match self.validate_in_child(&alone_json, ctx).await? {
                Some(resp) => problems.extend(
                    resp.problems
                        .into_iter()
                        .filter(|p| p.field.ends_with(".when"))
                        .map(|p| Problem {
                            rule_id: id.clone(),
                            rule_index: i as i32,
                            field: format!("rules[{i}].when"),
                            ..p
                        }),
                ),
                None => problems.push(Problem {
                    rule_id: id.clone(),
                    rule_index: i as i32,
                    code: "sandbox_crashed".into(),
                    message: "the expression crashed or stalled the validator; simplify it".into(),
                    field: format!("rules[{i}].when"),
                }),
            }
        }
        Ok(ValidateResponse {
            valid: problems.is_empty(),
            problems,
            digest: config.digest(),
        })
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
            terms: configurations
                .iter()
                .map(|c| pool.terms_of(&c.json))
                .collect(),
            max_child_faults: work.max_child_faults,
            child_faults: AtomicU32::new(0),
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

/// One call's evaluation, begun with [`SandboxPool::begin`]: its chunks are on the pool's
/// queue from the moment their part is pushed; [`Evaluation::finish`] waits for them all.
/// Dropped unfinished, its queued chunks are abandoned (lanes skip them).
pub struct Evaluation<'p> {
    pool: &'p Arc<Inner>,
    call: Arc<Call>,
    budget: Duration,
    answers: Vec<oneshot::Receiver<Answers>>,
    /// Per delivery pushed so far, in order: the results name them.
    event_ids: Vec<String>,
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
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SandboxError::Spawn(
                "no tokio runtime to run lanes on".into(),
            ));
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
                budget: self.budget,
                reply,
                call: self.call.clone(),
                lost_children: 0,
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
        for answer in self.answers {
            units.extend(answer.await.map_err(|_| {
                SandboxError::Spawn("the sandbox pool stopped before answering".into())
            })??);
        }
        let mut it = units.into_iter();
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

/// Counts a validation waiting for a child slot while it waits.
struct Waiting<'a>(&'a Inner);

impl<'a> Waiting<'a> {
    fn new(pool: &'a Inner) -> Self {
        pool.validations_waiting.fetch_add(1, Ordering::SeqCst);
        Self(pool)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.validations_waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A validation's child slot: given back, then lanes started for any queued jobs.
struct Slot {
    pool: Arc<Inner>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.pool.kick();
    }
}

impl Inner {
    fn forget(&self, pid: u32) {
        lock(&self.live).retain(|p| *p != pid);
    }

    /// Starts a child for work of `class`, at that class's nice value.
    async fn spawn(&self, class: Class) -> Result<(ChildProcess, ChildReady), SandboxError> {
        let board = ProgressBoard::create()
            .map_err(|e| SandboxError::Spawn(format!("progress board: {e}")))?;
        let board_fd = board.fd().as_raw_fd();
        let mut args = self.config.args.clone();
        args.extend(self.config.limits.to_args());
        args.push(format!("{PROGRESS_FD_ARG}{board_fd}"));
        let mut command = Command::new(&self.config.program);
        // SAFETY: runs between fork and exec; it only clears FD_CLOEXEC on the board's
        // descriptor (fcntl is async-signal-safe), so this child alone inherits it.
        unsafe {
            command.pre_exec(move || {
                let fd = BorrowedFd::borrow_raw(board_fd);
                fcntl_setfd(fd, FdFlags::empty()).map_err(std::io::Error::from)
            });
        }
        let mut child = command
            .args(&args)
            // The router's environment (database URLs, secrets) never reaches a child.
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SandboxError::Spawn(format!("{}: {e}", self.config.program.display())))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(SandboxError::Spawn("child pipes missing".into()));
        };
        // Best effort: a smaller pipe only costs more reads.
        let _ = rustix::pipe::fcntl_setpipe_size(&stdin, STDIN_PIPE_BYTES);
        let pid = child.id().unwrap_or_default();
        let mut proc = ChildProcess {
            pid,
            child,
            stdin,
            stdout: FrameReader::new(stdout, 1 << 16),
            board,
            sent: 0,
            class,
        };
        let nice = self.config.nice(class);
        if nice != 0
            && let Err(e) = rustix::process::setpriority_process(
                rustix::process::Pid::from_raw(pid as i32),
                nice,
            )
        {
            // Best effort: the work then only yields at chunk boundaries.
            tracing::debug!(pid, error = %e, class = class.label(), "could not lower a child's priority");
        }
        self.stats.spawned.fetch_add(1, Ordering::Relaxed);
        lock(&self.live).push(pid);
        match proc.recv(self.config.compile_budget).await {
            Ok(child_response::Response::Ready(ready)) => Ok((proc, ready)),
            _ => {
                self.forget(pid);
                Err(SandboxError::Spawn("the child did not report ready".into()))
            }
        }
    }

    /// An idle child for `class` that is still alive, or a new one; then spares are topped
    /// up in the background.
    async fn checkout(self: &Arc<Self>, class: Class) -> Result<ChildProcess, SandboxError> {
        let found = loop {
            let next = {
                let mut idle = lock(&self.idle);
                idle.iter()
                    .rposition(|c| c.class == class)
                    .map(|i| idle.swap_remove(i))
            };
            match next {
                Some(mut c) => {
                    if c.alive() {
                        break Some(c);
                    }
                    self.forget(c.pid);
                }
                None => break None,
            }
        };
        let child = match found {
            Some(c) => c,
            None => {
                self.stats.spawned_on_demand.fetch_add(1, Ordering::Relaxed);
                self.spawn(class).await.map(|(c, _)| c)?
            }
        };
        self.refill();
        Ok(child)
    }

    /// Starts spare children in the background until `spares` live ones are idle or on
    /// their way, so live work never waits for a child to start (other classes start theirs
    /// when they need one: a fault in their work never takes live work's spare).
    fn refill(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let idle = lock(&self.idle)
            .iter()
            .filter(|c| c.class == Class::Live)
            .count();
        let wanted = self.config.spares.saturating_sub(idle);
        let spawning = self.spawning.load(Ordering::SeqCst);
        for _ in spawning..wanted {
            self.spawning.fetch_add(1, Ordering::SeqCst);
            let pool = self.clone();
            runtime.spawn(async move {
                let spawned = pool.spawn(Class::Live).await;
                pool.spawning.fetch_sub(1, Ordering::SeqCst);
                match spawned {
                    Ok((child, _)) => pool.checkin(child),
                    Err(e) => tracing::warn!(error = %e, "could not start a spare sandbox child"),
                }
            });
        }
    }

    fn checkin(&self, mut child: ChildProcess) {
        // A child that exited on its own is not worth keeping.
        if child.alive() {
            lock(&self.idle).push(child);
        } else {
            self.forget(child.pid);
        }
    }

    /// Queues a job and makes sure a lane will take it.
    fn submit(self: &Arc<Self>, job: Job) {
        lock(&self.queue).jobs.push(job);
        self.queued.notify_waiters();
        self.kick();
    }

    /// Puts jobs a failed child did not finish back at the head of the queue, in order.
    fn requeue(self: &Arc<Self>, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        {
            let mut queue = lock(&self.queue);
            for job in jobs.into_iter().rev() {
                queue.jobs.push_front(job);
            }
        }
        self.queued.notify_waiters();
        self.kick();
    }

    /// Starts a lane for each queued job while child slots are free. Under the queue's lock,
    /// so a lane that leaves (under the same lock, when it finds the queue empty) is either
    /// seen leaving here or sees the job.
    fn kick(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut queue = lock(&self.queue);
        while queue.jobs.len() > queue.hungry {
            if let Ok(permit) = self.permits.clone().try_acquire_owned() {
                queue.hungry += 1;
                runtime.spawn(lane(self.clone(), permit, None));
                continue;
            }
            // Every child slot is taken, less urgent work among them: what outranks it takes
            // a reserve slot (a delivery never waits for a fixture's or a replay's units).
            let reserved = [Class::Live, Class::Interactive].into_iter().find_map(|r| {
                if queue.jobs.len_of(|c| c <= r && self.may_reserve(c)) == 0 {
                    return None;
                }
                let slot = match r {
                    Class::Live => &self.reserve_live,
                    _ => &self.reserve_interactive,
                };
                slot.clone().try_acquire_owned().ok().map(|p| (r, p))
            });
            if let Some((r, permit)) = reserved {
                queue.hungry += 1;
                runtime.spawn(lane(self.clone(), permit, Some(r)));
                continue;
            }
            break;
        }
    }

    /// Whether work of `class` may run on a reserve slot now: live work while lanes run
    /// interactive work or replays, interactive work while lanes run replays.
    /// The [`Terms`] of the configuration `json`, parsed once while kept.
    fn terms_of(&self, json: &str) -> Arc<Terms> {
        if let Some(terms) = lock(&self.terms).get(json) {
            return terms.clone();
        }
        // Parsed outside the lock: a big configuration does not hold up other calls.
        let terms = Arc::new(Terms::of(json));
        let mut kept = lock(&self.terms);
        if kept.len() >= TERMS_KEPT {
            kept.clear();
        }
        kept.insert(json.to_string(), terms.clone());
        terms
    }

    fn may_reserve(&self, class: Class) -> bool {
        let replays = self.replay_lanes.load(Ordering::SeqCst) > 0;
        match class {
            Class::Live => replays || self.interactive_lanes.load(Ordering::SeqCst) > 0,
            Class::Interactive => replays,
            Class::Replay => false,
        }
    }

    /// Counts the CPU `pid` spent since `mark` as `call`'s, and moves the mark.
    fn charge(&self, call: &Call, pid: u32, mark: &mut Option<u64>) {
        let now = cpu_ns_of(pid);
        if let (Some(before), Some(after)) = (*mark, now) {
            let spent = Duration::from_nanos(after.saturating_sub(before));
            *lock(&self.cpu)
                .entry((call.tenant.clone(), call.class))
                .or_default() += spent;
            switchboard_telemetry::metrics().sandbox_cpu(&call.tenant, call.class.label(), spent);
        }
        *mark = now;
    }

    /// Lanes give their slot up while a validation waits.
    fn yielding(&self) -> bool {
        self.validations_waiting.load(Ordering::SeqCst) > 0
    }

    /// The next job for a lane whose child (running `class`) runs `in_flight` requests
    /// already, of the class that child runs: none while a validation waits, none to queue
    /// behind its own while a lane started for it has not taken it yet, and none while more
    /// urgent work waits (less urgent work yields at chunk boundaries).
    fn next_job(&self, in_flight: usize, class: Class) -> Option<Job> {
        if self.yielding() {
            return None;
        }
        let mut queue = lock(&self.queue);
        if in_flight > 0 && queue.jobs.len() <= queue.hungry {
            return None;
        }
        if queue.jobs.len_of(|c| c < class) > 0 {
            return None;
        }
        queue.jobs.take(|c| c == class)
    }
}

/// One child slot at work: takes jobs off the queue, most urgent class first, and runs them
/// on a child of their kind until none is left, then checks the child in and gives the slot
/// up. A lane on the `reserve` slot opened for a class takes only that class or more urgent
/// work, and only while it may run there ([`Inner::may_reserve`]).
async fn lane(pool: Arc<Inner>, permit: OwnedSemaphorePermit, reserve: Option<Class>) {
    let mut child: Option<ChildProcess> = None;
    let mut started = true;
    // Counts this lane in `replay_lanes` or `interactive_lanes` by what it runs.
    let mut running = Running {
        pool: pool.clone(),
        class: Class::Live,
    };
    loop {
        let job = {
            let mut queue = lock(&pool.queue);
            if std::mem::take(&mut started) {
                queue.hungry = queue.hungry.saturating_sub(1);
            }
            let allowed =
                |class: Class| reserve.is_none_or(|r| class <= r && pool.may_reserve(class));
            match (!pool.yielding())
                .then(|| queue.jobs.take(allowed))
                .flatten()
            {
                Some(job) => job,
                None => {
                    // The child goes back before the slot does, so no lane starts another.
                    if let Some(c) = child.take() {
                        pool.checkin(c);
                    }
                    drop(permit);
                    return;
                }
            }
        };
        let Some(job) = job.unless_done(&pool.stats) else {
            continue;
        };
        let class = job.class();
        running.set(class);
        let kept = child.take().and_then(|mut c| {
            if !c.alive() {
                pool.forget(c.pid);
                None
            } else if c.class != class {
                pool.checkin(c);
                None
            } else {
                Some(c)
            }
        });
        let c = match kept {
            Some(c) => c,
            None => match pool.checkout(class).await {
                Ok(c) => c,
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                    continue;
                }
            },
        };
        child = run(&pool, c, job).await;
    }
}

/// A lane counted in `replay_lanes` or `interactive_lanes` while it runs that class (and not
/// after it ends).
struct Running {
    pool: Arc<Inner>,
    class: Class,
}

impl Running {
    fn counter(&self, class: Class) -> Option<&AtomicUsize> {
        match class {
            Class::Live => None,
            Class::Interactive => Some(&self.pool.interactive_lanes),
            Class::Replay => Some(&self.pool.replay_lanes),
        }
    }

    fn set(&mut self, class: Class) {
        if class != self.class {
            if let Some(c) = self.counter(self.class) {
                c.fetch_sub(1, Ordering::SeqCst);
            }
            if let Some(c) = self.counter(class) {
                c.fetch_add(1, Ordering::SeqCst);
            }
            self.class = class;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.set(Class::Live);
    }
}

/// What a lane waits for.
enum Event {
    Frame(std::io::Result<ChildResponse>),
    Wrote(std::io::Result<usize>),
    Deadline,
    Queued,
}

/// Writes some of a pending request; never resolves when there is none.
async fn write_some(
    stdin: &mut ChildStdin,
    pending: Option<&(Bytes, usize)>,
) -> std::io::Result<usize> {
    match pending {
        Some((bytes, at)) => stdin.write(&bytes[*at..]).await,
        None => std::future::pending().await,
    }
}

/// Applies one frame to the oldest request in flight; returns that request's job once the
/// child says it is done.
fn on_frame(
    inflight: &mut VecDeque<InFlight>,
    frame: ChildResponse,
) -> Result<Option<Job>, Failure> {
    let Some(front) = inflight.front_mut() else {
        return Err(Failure::Died);
    };
    match frame.response {
        Some(child_response::Response::Compiled(_)) if !front.compiled => {
            front.compiled = true;
            Ok(None)
        }
        Some(child_response::Response::Units(batch)) if front.compiled => {
            let n = front.job.configurations.max(1);
            for u in batch.units {
                let c = u.configuration_index as usize;
                let index = front.base + u.delivery_index as usize * n + c;
                if c >= n || index >= front.job.units.len() {
                    return Err(Failure::Died);
                }
                front.job.units[index] = u.decision;
            }
            Ok(None)
        }
        Some(child_response::Response::Done(_)) if front.compiled => {
            let done = inflight.pop_front().map(|f| f.job);
            if let Some(next) = inflight.front_mut() {
                next.since = Instant::now();
            }
            Ok(done)
        }
        _ => Err(Failure::Died),
    }
}

/// Where a child stopped: (request ordinal, unit relative to that request, the rule it ran).
type At = (u64, usize, Option<usize>);

/// A unit's wall time past which it is blamed whatever CPU it spent: a backstop only (a unit
/// does no I/O, so it waits only for a CPU), generous enough for a replay child at its low
/// priority on a busy machine.
fn wall_backstop(budget: Duration, idle: Duration) -> Duration {
    (budget * 100).max(idle)
}

/// How soon to look again at a unit that has CPU budget left.
const MIN_RECHECK: Duration = Duration::from_millis(1);

/// Holds the unit on a child's board to its budget, in the child's CPU time.
struct Watch {
    seen: Progress,
    seen_at: Instant,
    deadline: Instant,
}

impl Watch {
    fn start(board: &ProgressBoard, inflight: &VecDeque<InFlight>, idle: Duration) -> Self {
        let seen = board.read();
        let seen_at = Instant::now();
        let deadline = next_deadline(&seen, seen_at, budget_of(inflight, seen.request), idle);
        Self {
            seen,
            seen_at,
            deadline,
        }
    }

    /// At the deadline: `None` while the child makes progress; else a unit that spent its
    /// budget of CPU time (blamed by request, index and rule), or no progress at all between
    /// units for `idle` (nothing to blame but the child).
    fn check(
        &mut self,
        board: &ProgressBoard,
        pid: u32,
        inflight: &VecDeque<InFlight>,
        idle: Duration,
    ) -> Option<Option<At>> {
        let now = board.read();
        if now.seq != self.seen.seq {
            self.seen = now;
            self.seen_at = Instant::now();
            self.deadline = next_deadline(
                &self.seen,
                self.seen_at,
                budget_of(inflight, now.request),
                idle,
            );
            return None;
        }
        if now.in_unit() {
            let budget = budget_of(inflight, now.request);
            let wall = Duration::from_nanos(now_ns().saturating_sub(now.started_ns));
            let at = Some((now.request, now.unit as usize, now.rule));
            if wall >= wall_backstop(budget, idle) {
                return Some(at);
            }
            // Gone (its exit shows on the pipe next) or preempted: look again later.
            let Some(cpu) = cpu_ns_of(pid) else {
                self.deadline = Instant::now() + MIN_RECHECK * 10;
                return None;
            };
            let spent = Duration::from_nanos(cpu.saturating_sub(now.started_cpu_ns));
            if spent >= budget {
                return Some(at);
            }
            // CPU time runs no faster than the wall clock: it cannot run out before then.
            self.deadline = Instant::now() + (budget - spent).max(MIN_RECHECK);
            return None;
        }
        if self.seen_at.elapsed() >= idle {
            return Some(None);
        }
        self.deadline = self.seen_at + idle;
        None
    }
}

/// The budget of the request with this ordinal (the oldest one's if it is not in flight).
fn budget_of(inflight: &VecDeque<InFlight>, ordinal: u64) -> Duration {
    inflight
        .iter()
        .find(|f| f.ordinal == ordinal)
        .or(inflight.front())
        .map(|f| f.job.budget)
        .unwrap_or_default()
}

/// Runs `first` and every job it can take after it on `child`, keeping up to [`DEPTH`]
/// requests in the child's pipe. Returns the child when no job is left for it, or `None`
/// when it failed (after keeping its answers and queueing what it left undone).
async fn run(pool: &Arc<Inner>, mut child: ChildProcess, first: Job) -> Option<ChildProcess> {
    let idle = pool.config.compile_budget;
    let mut inflight: VecDeque<InFlight> = VecDeque::with_capacity(DEPTH);
    let mut writing: Option<(Bytes, usize)> = None;
    let mut watch: Option<Watch> = None;
    let mut first = Some(first);
    // The child's CPU time when its current request began: what it spends is the tenant's.
    let mut cpu_mark = cpu_ns_of(child.pid);
    let stopped = loop {
        let queued = pool.queued.notified();
        tokio::pin!(queued);
        queued.as_mut().enable();
        if writing.is_none()
            && inflight.len() < DEPTH
            && let Some(job) = first
                .take()
                .or_else(|| pool.next_job(inflight.len(), child.class))
        {
            let Some(job) = job.unless_done(&pool.stats) else {
                continue;
            };
            if inflight.is_empty() && child.sent > 0 && !child.alive() {
                // Exited on its own between jobs: nothing to blame, a new child runs it.
                // (A child that never ran a job is held to it instead, so a child that
                // cannot start is blamed rather than replaced forever.)
                pool.forget(child.pid);
                pool.requeue(vec![job]);
                return None;
            }
            match job.next_request() {
                Some((request, base)) => {
                    child.sent += 1;
                    inflight.push_back(InFlight {
                        job,
                        ordinal: child.sent,
                        base,
                        compiled: false,
                        since: Instant::now(),
                    });
                    writing = Some((request, 0));
                }
                None => job.finish(&pool.stats),
            }
            continue;
        }
        let Some(front) = inflight.front() else {
            return Some(child);
        };
        let deadline = match (&watch, front.compiled) {
            (Some(w), true) => w.deadline,
            _ => front.since + pool.config.compile_budget,
        };
        let can_take = writing.is_none() && inflight.len() < DEPTH;
        let event = tokio::select! {
            biased;
            frame = child.stdout.next::<ChildResponse>() => Event::Frame(frame),
            wrote = write_some(&mut child.stdin, writing.as_ref()) => Event::Wrote(wrote),
            _ = sleep_until(deadline) => Event::Deadline,
            _ = &mut queued, if can_take => Event::Queued,
        };
        match event {
            Event::Frame(Ok(frame)) => match on_frame(&mut inflight, frame) {
                Ok(Some(done)) => {
                    watch = None;
                    pool.charge(&done.call, child.pid, &mut cpu_mark);
                    done.finish(&pool.stats);
                }
                Ok(None) => {
                    if watch.is_none() && inflight.front().is_some_and(|f| f.compiled) {
                        watch = Some(Watch::start(&child.board, &inflight, idle));
                    }
                }
                Err(failure) => {
                    break Stopped {
                        failure,
                        at: None,
                        drain: false,
                    };
                }
            },
            Event::Frame(Err(_)) => {
                break Stopped {
                    failure: Failure::Died,
                    at: None,
                    drain: false,
                };
            }
            Event::Wrote(Ok(n)) if n > 0 => {
                if let Some((bytes, at)) = writing.as_mut() {
                    *at += n;
                    if *at >= bytes.len() {
                        writing = None;
                    }
                }
            }
            Event::Wrote(_) => {
                break Stopped {
                    failure: Failure::Died,
                    at: None,
                    drain: true,
                };
            }
            Event::Deadline => match watch.as_mut() {
                Some(w) if front_compiled(&inflight) => {
                    if let Some(at) = w.check(&child.board, child.pid, &inflight, idle) {
                        break Stopped {
                            failure: Failure::Timeout,
                            at,
                            drain: true,
                        };
                    }
                }
                _ => {
                    break Stopped {
                        failure: Failure::Timeout,
                        at: None,
                        drain: true,
                    };
                }
            },
            Event::Queued => {}
        }
    };
    if let Some(front) = inflight.front() {
        pool.charge(&front.job.call, child.pid, &mut cpu_mark);
    }
    fail(pool, child, inflight, stopped).await;
    None
}

fn front_compiled(inflight: &VecDeque<InFlight>) -> bool {
    inflight.front().is_some_and(|f| f.compiled)
}

/// How long a child that died is waited for, to learn what it died of.
const EXIT_WAIT: Duration = Duration::from_millis(200);

/// A child stopped: kill it, keep every answer it wrote, fault the unit to blame (naming the
/// rule it ran), and queue the rest of its requests (the one it ran and any behind it) for
/// another child. A child that died of something its unit did not do (killed from outside,
/// its lifetime CPU limit) blames nothing: its units run again elsewhere.
async fn fail(
    pool: &Arc<Inner>,
    mut child: ChildProcess,
    mut inflight: VecDeque<InFlight>,
    stopped: Stopped,
) {
    // What it died of, before a kill of ours could hide it.
    let mut lost = false;
    let mut over_memory = false;
    if stopped.failure == Failure::Died
        && let Ok(Ok(status)) = timeout(EXIT_WAIT, child.child.wait()).await
    {
        over_memory = status.code() == Some(memory::EXIT_CODE);
        lost = !over_memory && !unit_caused(&status);
    }
    let _ = child.child.start_kill();
    pool.forget(child.pid);
    if stopped.drain {
        // What it wrote before it went is still in the pipe, up to the end of its output.
        let _ = timeout(pool.config.compile_budget, async {
            while !inflight.is_empty() {
                let Ok(frame) = child.stdout.next::<ChildResponse>().await else {
                    break;
                };
                match on_frame(&mut inflight, frame) {
                    Ok(Some(done)) => done.finish(&pool.stats),
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
        })
        .await;
    }
    // A child that died names the unit it was running, and the rule, on its board.
    let at = stopped.at.or_else(|| {
        let p = child.board.read();
        (stopped.failure == Failure::Died && p.in_unit()).then_some((
            p.request,
            p.unit as usize,
            p.rule,
        ))
    });
    // The unit the board names; failing that, the first one unanswered (no rule known).
    let named = at.and_then(|(ordinal, unit, rule)| {
        let i = inflight.iter().position(|f| f.ordinal == ordinal)?;
        let u = inflight[i].base + unit;
        inflight[i]
            .job
            .units
            .get(u)
            .is_some_and(Option::is_none)
            .then_some((i, u, rule))
    });
    let blamed = named.or_else(|| {
        inflight.iter().enumerate().find_map(|(i, f)| {
            f.job
                .units
                .iter()
                .position(Option::is_none)
                .map(|u| (i, u, None))
        })
    });
    let metrics = switchboard_telemetry::metrics();
    let mut blame = blamed.is_some();
    if lost {
        pool.stats.lost_children.fetch_add(1, Ordering::Relaxed);
        metrics.child_restart("lost");
        if let Some((i, _, _)) = blamed {
            let job = &mut inflight[i].job;
            job.lost_children += 1;
            blame = job.lost_children > MAX_LOST_CHILDREN_PER_CHUNK;
        }
        tracing::warn!(
            pid = child.pid,
            "sandbox child lost to something other than its unit; its units run again"
        );
    }
    if blame && let Some((i, u, rule)) = blamed {
        let (code, counter) = match stopped.failure {
            Failure::Died if !over_memory => (fault::SANDBOX_CRASHED, &pool.stats.crashed),
            _ => (fault::BUDGET_EXCEEDED, &pool.stats.budget_exceeded),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics.child_restart(code);
        if code == fault::BUDGET_EXCEEDED {
            metrics.budget_fault();
        }
        let job = &mut inflight[i].job;
        let rule_id = job.rule_of(u, rule).to_string();
        tracing::warn!(
            pid = child.pid,
            fault = code,
            request = ?at.map(|(r, _, _)| r),
            unit = ?at.map(|(_, u, _)| u),
            rule = %rule_id,
            "sandbox child replaced"
        );
        let reason = match stopped.failure {
            Failure::Timeout => format!(
                "evaluation exceeded its budget of {} ms of CPU time",
                job.budget.as_millis()
            ),
            Failure::Died if over_memory => format!(
                "evaluation exceeded its memory budget of {} MiB",
                pool.config.limits.unit_memory_mb
            ),
            Failure::Died => "the sandbox child died during evaluation".to_string(),
        };
        job.units[u] = Some(decision::fault(&rule_id, code, reason));
        job.call.child_faults.fetch_add(1, Ordering::Relaxed);
    }
    let mut undone = Vec::new();
    for f in inflight {
        if f.job.units.iter().all(Option::is_some) {
            f.job.finish(&pool.stats);
        } else {
            undone.push(f.job);
        }
    }
    pool.requeue(undone);
    pool.refill();
}

/// When to look at the board next: when the running unit's budget runs out, or (between
/// units) after a budget, to see what runs then.
fn next_deadline(
    seen: &Progress,
    seen_at: Instant,
    budget: Duration,
    idle_limit: Duration,
) -> Instant {
    if seen.in_unit() {
        let elapsed = Duration::from_nanos(now_ns().saturating_sub(seen.started_ns));
        seen_at + budget.saturating_sub(elapsed)
    } else {
        seen_at + budget.min(idle_limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use switchboard_proto::router::v1::{ChildEvaluate, Header};

    #[test]
    fn a_request_encoded_from_borrowed_parts_is_the_message() {
        let ctx = RoutingContext {
            trusted_actors_capability: true,
            ..Default::default()
        };
        let configurations = vec![
            Configuration {
                json: "{\"rules\":[]}".into(),
            },
            Configuration { json: "{}".into() },
        ];
        let deliveries: Vec<StoredDelivery> = (0..3)
            .map(|i| StoredDelivery {
                event_id: format!("ev-{i}"),
                kind: "push".into(),
                headers: vec![Header {
                    name: "X-GitHub-Event".into(),
                    value: "push".into(),
                }],
                body: Bytes::from(vec![b'x'; 300 * i]),
                verified: i % 2 == 0,
                ..Default::default()
            })
            .collect();
        let want = ChildRequest {
            request: Some(child_request::Request::Evaluate(ChildEvaluate {
                context: Some(ctx.clone()),
                configurations: configurations.clone(),
                deliveries: deliveries.clone(),
                skip_units: 0,
                omit_units: vec![],
            })),
        };
        let mut framed = (want.encoded_len() as u32).to_le_bytes().to_vec();
        framed.extend(want.encode_to_vec());
        assert_eq!(
            encode_evaluate(&ctx, &configurations, &deliveries, 0, &[]).as_ref(),
            &framed[..]
        );
        let want = ChildRequest {
            request: Some(child_request::Request::Evaluate(ChildEvaluate {
                context: Some(ctx.clone()),
                configurations: configurations.clone(),
                deliveries: deliveries[1..].to_vec(),
                skip_units: 1,
                omit_units: vec![2, 4],
            })),
        };
        let mut framed = (want.encoded_len() as u32).to_le_bytes().to_vec();
        framed.extend(want.encode_to_vec());
        assert_eq!(
            encode_evaluate(&ctx, &configurations, &deliveries[1..], 1, &[2, 4]).as_ref(),
            &framed[..]
        );
    }

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
                ctx: RoutingContext::default(),
                configurations,
            }),
            lost_children: 0,
        };
        assert_eq!(job.next_request(), Some((first, 0)));
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
        let (request, base) = job.next_request().expect("units are left");
        assert_eq!(base, 2);
        let req = ChildRequest::decode(request.slice(4..)).expect("decodes");
        let Some(child_request::Request::Evaluate(e)) = req.request else {
            panic!("an evaluate request");
        };
        let ids: Vec<&str> = e.deliveries.iter().map(|d| d.event_id.as_str()).collect();
        assert_eq!(ids, ["ev-1", "ev-2", "ev-3"]);
        assert_eq!(e.skip_units, 1);
        assert_eq!(e.omit_units, [2]);
        for u in [3, 5, 6, 7] {
            job.units[u] = Some(Decision::default());
        }
        assert!(job.next_request().is_none());
    }
}
