//! The parent side: a pool of sandbox children, each held to a per-envelope budget.
//!
//! A batch is split into chunks spread over the children. Each child streams one frame per
//! (delivery, configuration) unit; the parent waits at most the budget for the next one. A
//! child that overruns is killed and its unit faults `budget_exceeded`; a child that dies
//! faults its unit `sandbox_crashed`. Either way a fresh child takes the rest of the chunk.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use switchboard_proto::router::v1::{
    ChildEvaluate, ChildReady, ChildRequest, ChildResponse, Configuration, Decision,
    DeliveryDecisions, EvaluateResponse, Problem, RoutingContext, StoredDelivery, ValidateRequest,
    ValidateResponse, child_request, child_response,
};
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::timeout;

use super::confine::ChildLimits;
use super::frame::{read_frame_async, write_frame_async};
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
        let mut args = self.config.args.clone();
        args.extend(self.config.limits.to_args());
        let mut child = Command::new(&self.config.program)
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
        let mut next = 0usize;
        while next < total {
            let mut child = self.checkout().await?;
            let first = next / n;
            let req = ChildEvaluate {
                context: Some(ctx.clone()),
                configurations: configurations.to_vec(),
                deliveries: deliveries[first..].to_vec(),
                skip_units: (next % n) as u32,
            };
            let outcome = self
                .run_units(&mut child, req, first, n, budget, &mut units, &mut next)
                .await;
            match outcome {
                Ok(()) => self.checkin(child).await,
                Err(failure) => {
                    // The unit in progress is the one to blame; the child is replaced.
                    let (code, reason, counter) = match failure {
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
                    let _ = child.child.start_kill();
                    self.forget(child.pid);
                    if next < total {
                        units[next] = Some(decision::fault("", code, reason));
                        next += 1;
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

    #[allow(clippy::too_many_arguments)]
    async fn run_units(
        &self,
        child: &mut ChildProcess,
        req: ChildEvaluate,
        first: usize,
        n: usize,
        budget: Duration,
        units: &mut [Option<Decision>],
        next: &mut usize,
    ) -> Result<(), Failure> {
        child
            .send(child_request::Request::Evaluate(req))
            .await
            .map_err(|_| Failure::Died)?;
        match child.recv(self.config.compile_budget).await? {
            child_response::Response::Compiled(_) => {}
            _ => return Err(Failure::Died),
        }
        loop {
            match child.recv(budget).await? {
                child_response::Response::Unit(u) => {
                    let index =
                        (first + u.delivery_index as usize) * n + u.configuration_index as usize;
                    if index >= units.len() {
                        return Err(Failure::Died);
                    }
                    units[index] = u.decision;
                    *next = index + 1;
                }
                child_response::Response::Done(_) => return Ok(()),
                _ => return Err(Failure::Died),
            }
        }
    }
}
