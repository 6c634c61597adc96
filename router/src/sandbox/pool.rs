//! The parent side: a pool of sandbox children, each held to a per-envelope budget.
//!
//! A batch is split into chunks spread over the children. Each child marks the
//! (delivery, configuration) unit it runs on its progress board and sends answers in
//! batches; the parent's watchdog looks at the board once per budget. A child whose unit
//! overruns is killed and that unit faults `budget_exceeded`; a child that dies faults the
//! unit it was running `sandbox_crashed`. Either way a fresh child takes the units left.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::io::{FdFlags, fcntl_setfd};

use switchboard_proto::router::v1::{
    ChildEvaluate, ChildReady, ChildRequest, ChildResponse, Configuration, Decision,
    DeliveryDecisions, EvaluateResponse, Problem, RoutingContext, StoredDelivery, ValidateRequest,
    ValidateResponse, child_request, child_response,
};
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::{Instant, sleep_until, timeout};

use super::confine::ChildLimits;
use super::frame::{read_frame_async, write_frame_async};
use super::progress::{PROGRESS_FD_ARG, Progress, ProgressBoard, now_ns};
use crate::engine::config::{Action, Configuration as Config, Rule};
use crate::engine::decision::{self, count_rules, fault};
use crate::engine::validate::{check_structure, parse_configuration};

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
}

struct ChildProcess {
    pid: u32,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    board: ProgressBoard,
}

impl ChildProcess {
    async fn send(&mut self, req: child_request::Request) -> std::io::Result<()> {
        write_frame_async(&mut self.stdin, &ChildRequest { request: Some(req) }).await
    }

    async fn recv(&mut self, within: Duration) -> Result<child_response::Response, Failure> {
        match timeout(within, read_frame_async::<ChildResponse>(&mut self.stdout)).await {
            Err(_) => Err(Failure::Timeout),
            Ok(Err(_)) => Err(Failure::Died),
            Ok(Ok(ChildResponse { response: Some(r) })) => Ok(r),
            Ok(Ok(ChildResponse { response: None })) => Err(Failure::Died),
        }
    }
}

enum Failure {
    Timeout,
    Died,
}

/// Why a child stopped answering in the middle of a batch, and which unit (relative to the
/// request) is to blame, when the progress board says.
struct Stopped {
    failure: Failure,
    unit: Option<usize>,
}

impl From<Failure> for Stopped {
    fn from(failure: Failure) -> Self {
        Self {
            failure,
            unit: None,
        }
    }
}

/// A pool of sandbox children.
pub struct SandboxPool {
    config: SandboxConfig,
    idle: Mutex<Vec<ChildProcess>>,
    permits: Semaphore,
    stats: SandboxStats,
    /// Process ids of live children, for operators (and tests) to find them.
    live: std::sync::Mutex<Vec<u32>>,
}

impl SandboxPool {
    /// Starts the pool and one child to check that children start and are confined.
    pub async fn start(config: SandboxConfig) -> Result<Arc<Self>, SandboxError> {
        let pool = Arc::new(Self {
            permits: Semaphore::new(config.children.max(1)),
            config,
            idle: Mutex::new(Vec::new()),
            stats: SandboxStats::default(),
            live: std::sync::Mutex::new(Vec::new()),
        });
        let (first, ready) = pool.spawn().await?;
        if pool.config.require_confinement && (!ready.seccomp || ready.landlock == "none") {
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
        pool.idle.lock().await.push(first);
        Ok(pool)
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    pub fn stats(&self) -> &SandboxStats {
        &self.stats
    }

    /// Process ids of the children alive now.
    pub fn child_pids(&self) -> Vec<u32> {
        self.live.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn forget(&self, pid: u32) {
        if let Ok(mut live) = self.live.lock() {
            live.retain(|p| *p != pid);
        }
    }

    async fn spawn(&self) -> Result<(ChildProcess, ChildReady), SandboxError> {
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
        let pid = child.id().unwrap_or_default();
        let mut proc = ChildProcess {
            pid,
            child,
            stdin,
            stdout: BufReader::with_capacity(1 << 16, stdout),
            board,
        };
        self.stats.spawned.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut live) = self.live.lock() {
            live.push(pid);
        }
        match proc.recv(self.config.compile_budget).await {
            Ok(child_response::Response::Ready(ready)) => Ok((proc, ready)),
            _ => Err(SandboxError::Spawn("the child did not report ready".into())),
        }
    }

    async fn checkout(&self) -> Result<ChildProcess, SandboxError> {
        if let Some(c) = self.idle.lock().await.pop() {
            return Ok(c);
        }
        self.spawn().await.map(|(c, _)| c)
    }

    async fn checkin(&self, mut child: ChildProcess) {
        // A child that exited on its own is not worth keeping.
        if matches!(child.child.try_wait(), Ok(None)) {
            self.idle.lock().await.push(child);
        } else {
            self.forget(child.pid);
        }
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
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| SandboxError::Spawn(e.to_string()))?;
        let mut child = self.checkout().await?;
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
            self.stats.crashed.fetch_add(1, Ordering::Relaxed);
            self.forget(child.pid);
            return Ok(None);
        }
        match child.recv(self.config.compile_budget).await {
            Ok(child_response::Response::Validated(resp)) => {
                self.checkin(child).await;
                Ok(Some(resp))
            }
            _ => {
                self.stats.crashed.fetch_add(1, Ordering::Relaxed);
                self.forget(child.pid);
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

    /// Evaluates one or two configurations over every delivery; every unit gets a decision.
    pub async fn evaluate(
        &self,
        ctx: &RoutingContext,
        configurations: &[Configuration],
        deliveries: &[StoredDelivery],
        budget: Option<Duration>,
    ) -> Result<EvaluateResponse, SandboxError> {
        let budget = budget.unwrap_or(self.config.budget);
        let children = self.config.children.max(1);
        let chunk = deliveries
            .len()
            .div_ceil(children)
            .clamp(1, self.config.max_chunk.max(1));
        let chunks = deliveries
            .chunks(chunk)
            .map(|c| self.evaluate_chunk(ctx, configurations, c, budget));
        let mut per_delivery: Vec<Vec<Decision>> = Vec::with_capacity(deliveries.len());
        for result in futures::future::join_all(chunks).await {
            per_delivery.extend(result?);
        }
        let results = deliveries
            .iter()
            .zip(per_delivery)
            .map(|(d, decisions)| DeliveryDecisions {
                event_id: d.event_id.clone(),
                decisions,
            })
            .collect::<Vec<_>>();
        let counters = configurations
            .iter()
            .enumerate()
            .map(|(j, c)| {
                let (digest, ids) = match parse_configuration(&c.json) {
                    Ok(cfg) => (
                        cfg.digest(),
                        cfg.rules
                            .iter()
                            .map(|r| r.id.clone().unwrap_or_default())
                            .collect(),
                    ),
                    Err(_) => (String::new(), Vec::new()),
                };
                count_rules(
                    &digest,
                    &ids,
                    results.iter().filter_map(|r| r.decisions.get(j)),
                )
            })
            .collect();
        Ok(EvaluateResponse { results, counters })
    }

    async fn evaluate_chunk(
        &self,
        ctx: &RoutingContext,
        configurations: &[Configuration],
        deliveries: &[StoredDelivery],
        budget: Duration,
    ) -> Result<Vec<Vec<Decision>>, SandboxError> {
        let n = configurations.len();
        let total = deliveries.len() * n;
        let mut units: Vec<Option<Decision>> = vec![None; total];
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| SandboxError::Spawn(e.to_string()))?;
        // Each pass gives every unit still undecided to one child; a pass ends with all of
        // them answered or with one more unit faulted, so this ends.
        while let Some(start) = units.iter().position(Option::is_none) {
            let mut child = self.checkout().await?;
            let first = start / n;
            let base = first * n;
            let req = ChildEvaluate {
                context: Some(ctx.clone()),
                configurations: configurations.to_vec(),
                deliveries: deliveries[first..].to_vec(),
                skip_units: (start - base) as u32,
                omit_units: (start..total)
                    .filter(|u| units[*u].is_some())
                    .map(|u| (u - base) as u32)
                    .collect(),
            };
            match self
                .run_units(&mut child, req, base, budget, &mut units)
                .await
            {
                Ok(()) => self.checkin(child).await,
                Err(stopped) => {
                    let (code, reason, counter) = match stopped.failure {
                        Failure::Timeout => (
                            fault::BUDGET_EXCEEDED,
                            format!(
                                "evaluation exceeded its budget of {} ms",
                                budget.as_millis()
                            ),
                            &self.stats.budget_exceeded,
                        ),
                        Failure::Died => (
                            fault::SANDBOX_CRASHED,
                            "the sandbox child died during evaluation".to_string(),
                            &self.stats.crashed,
                        ),
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    let metrics = switchboard_telemetry::metrics();
                    metrics.child_restart(code);
                    if code == fault::BUDGET_EXCEEDED {
                        metrics.budget_fault();
                    }
                    tracing::warn!(
                        pid = child.pid,
                        fault = code,
                        unit = ?stopped.unit,
                        "sandbox child replaced"
                    );
                    let _ = child.child.start_kill();
                    self.forget(child.pid);
                    // The unit the board names; failing that, the first one unanswered.
                    let blamed = stopped
                        .unit
                        .map(|u| base + u)
                        .filter(|u| *u < total && units[*u].is_none())
                        .or_else(|| units.iter().position(Option::is_none));
                    if let Some(u) = blamed {
                        units[u] = Some(decision::fault("", code, reason));
                    }
                }
            }
        }
        self.stats.units.fetch_add(total as u64, Ordering::Relaxed);
        let mut out = Vec::with_capacity(deliveries.len());
        let mut it = units.into_iter();
        for _ in 0..deliveries.len() {
            out.push(
                (0..n)
                    .map(|_| {
                        it.next().flatten().unwrap_or_else(|| {
                            decision::fault("", fault::SANDBOX_CRASHED, "no answer")
                        })
                    })
                    .collect(),
            );
        }
        Ok(out)
    }

    /// Sends one request and takes its answers until the child says it is done, while a
    /// watchdog holds the unit on the child's board to the budget.
    async fn run_units(
        &self,
        child: &mut ChildProcess,
        req: ChildEvaluate,
        base: usize,
        budget: Duration,
        units: &mut [Option<Decision>],
    ) -> Result<(), Stopped> {
        let n = req.configurations.len().max(1);
        child
            .send(child_request::Request::Evaluate(req))
            .await
            .map_err(|_| Failure::Died)?;
        match child.recv(self.config.compile_budget).await? {
            child_response::Response::Compiled(_) => {}
            _ => return Err(Failure::Died.into()),
        }
        let ChildProcess { stdout, board, .. } = child;
        let board = &*board;
        let reading = async {
            loop {
                match read_frame_async::<ChildResponse>(stdout).await {
                    Ok(ChildResponse {
                        response: Some(child_response::Response::Units(batch)),
                    }) => {
                        for u in batch.units {
                            let c = u.configuration_index as usize;
                            let index = base + u.delivery_index as usize * n + c;
                            if c >= n || index >= units.len() {
                                return Err(Failure::Died);
                            }
                            units[index] = u.decision;
                        }
                    }
                    Ok(ChildResponse {
                        response: Some(child_response::Response::Done(_)),
                    }) => return Ok(()),
                    _ => return Err(Failure::Died),
                }
            }
        };
        let watching = watch(board, budget, self.config.compile_budget);
        let outcome = tokio::select! {
            biased;
            read = reading => read.map_err(|failure| (failure, None)),
            stalled = watching => Err(stalled),
        };
        outcome.map_err(|(failure, unit)| {
            // A child that died names the unit it was running on its board.
            let unit = unit.or_else(|| {
                let p = board.read();
                p.in_unit().then_some(p.unit as usize)
            });
            Stopped { failure, unit }
        })
    }
}

/// Resolves when the child stalls: a unit running past the budget (blamed by its index),
/// or no progress at all between units for `idle_limit` (nothing to blame but the child).
async fn watch(
    board: &ProgressBoard,
    budget: Duration,
    idle_limit: Duration,
) -> (Failure, Option<usize>) {
    let mut seen = board.read();
    let mut seen_at = Instant::now();
    let mut deadline = next_deadline(&seen, seen_at, budget, idle_limit);
    loop {
        sleep_until(deadline).await;
        let now = board.read();
        if now.seq != seen.seq {
            seen = now;
            seen_at = Instant::now();
            deadline = next_deadline(&seen, seen_at, budget, idle_limit);
            continue;
        }
        if now.in_unit() {
            return (Failure::Timeout, Some(now.unit as usize));
        }
        if seen_at.elapsed() >= idle_limit {
            return (Failure::Timeout, None);
        }
        deadline = seen_at + idle_limit;
    }
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
