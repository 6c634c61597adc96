//! `switchboard router`: one router instance, and the sandbox flags `switchboard up` shares.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use switchboard_router::sandbox::{ChildLimits, SandboxConfig};
use switchboard_router::server::BoundRouter;

use super::shutdown_signal;

#[derive(Args, Debug, Clone)]
pub struct RouterArgs {
    /// Address to serve gRPC on (port 0 picks a free port; the chosen address is printed).
    #[arg(
        long,
        env = "SWITCHBOARD_ROUTER_LISTEN",
        default_value = "127.0.0.1:7701"
    )]
    pub listen: SocketAddr,
    /// Time between reporting not-ready (gRPC health NOT_SERVING) and closing the listener at
    /// shutdown, milliseconds: long enough for control's router refresh to drop this router.
    #[arg(
        long,
        env = "SWITCHBOARD_ROUTER_READINESS_GRACE_MS",
        default_value_t = 0
    )]
    pub readiness_grace_ms: u64,
    /// The longest the drain may take after the listener closes, milliseconds; connections
    /// still open then are closed.
    #[arg(
        long,
        env = "SWITCHBOARD_ROUTER_DRAIN_TIMEOUT_MS",
        default_value_t = 35_000
    )]
    pub drain_timeout_ms: u64,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub metrics: super::MetricsArgs,
}

/// How a router runs its sandbox children.
#[derive(Args, Debug, Clone)]
pub struct SandboxArgs {
    /// Sandbox children evaluating at once (default: one per core).
    #[arg(long, env = "SWITCHBOARD_ROUTER_CHILDREN")]
    pub children: Option<usize>,
    /// Per-envelope, per-configuration evaluation budget in milliseconds.
    #[arg(long, env = "SWITCHBOARD_ROUTER_BUDGET_MS", default_value_t = 50)]
    pub budget_ms: u64,
    /// Address space of each child, MiB.
    #[arg(
        long,
        env = "SWITCHBOARD_ROUTER_CHILD_ADDRESS_SPACE_MB",
        default_value_t = 1024
    )]
    pub child_address_space_mb: u64,
    /// CPU seconds over a child's life before the kernel stops it.
    #[arg(
        long,
        env = "SWITCHBOARD_ROUTER_CHILD_CPU_SECONDS",
        default_value_t = 3600
    )]
    pub child_cpu_seconds: u64,
    /// Memory one evaluation (one delivery under one configuration) may hold in a child, MiB;
    /// past it the child is replaced and the evaluation faults `budget_exceeded`, naming its
    /// rule. 0 turns the budget off.
    #[arg(long, env = "SWITCHBOARD_ROUTER_UNIT_MEMORY_MB", default_value_t = 128)]
    pub unit_memory_mb: u64,
    /// Run children even where the kernel refuses seccomp or Landlock (not recommended).
    #[arg(long, env = "SWITCHBOARD_ROUTER_ALLOW_UNCONFINED_SANDBOX")]
    pub allow_unconfined_sandbox: bool,
    /// Idle children kept started beyond those at work, so a lane whose child a budget fault
    /// killed goes on at once.
    #[arg(long, env = "SWITCHBOARD_ROUTER_SPARE_CHILDREN", default_value_t = 1)]
    pub spare_children: usize,
    /// The nice value of the children that run replays (0–19): on a busy machine live and
    /// interactive work get the CPU first.
    #[arg(long, env = "SWITCHBOARD_ROUTER_REPLAY_NICE", default_value_t = 10,
          value_parser = clap::value_parser!(i32).range(0..=19))]
    pub replay_nice: i32,
    /// The nice value of the children that run interactive work (fixtures, dry runs,
    /// validations; 0–19): on a busy machine live deliveries get the CPU first.
    #[arg(long, env = "SWITCHBOARD_ROUTER_INTERACTIVE_NICE", default_value_t = 5,
          value_parser = clap::value_parser!(i32).range(0..=19))]
    pub interactive_nice: i32,
}

impl SandboxArgs {
    /// The sandbox configuration these flags describe, with children of this very binary.
    pub fn sandbox_config(&self) -> anyhow::Result<SandboxConfig> {
        let exe: PathBuf = std::env::current_exe()?;
        let mut config = SandboxConfig::new(exe);
        if let Some(n) = self.children {
            config.children = n.max(1);
        }
        config.budget = Duration::from_millis(self.budget_ms.max(1));
        config.limits = ChildLimits {
            address_space_mb: self.child_address_space_mb,
            cpu_seconds: self.child_cpu_seconds,
            unit_memory_mb: self.unit_memory_mb,
            ..ChildLimits::default()
        };
        config.require_confinement = !self.allow_unconfined_sandbox;
        config.spares = self.spare_children;
        config.replay_nice = self.replay_nice;
        config.interactive_nice = self.interactive_nice;
        Ok(config)
    }
}

pub async fn run(args: RouterArgs) -> anyhow::Result<()> {
    let mut router = BoundRouter::bind(args.listen, args.sandbox.sandbox_config()?).await?;
    router.readiness_grace = Duration::from_millis(args.readiness_grace_ms);
    router.drain_timeout = Duration::from_millis(args.drain_timeout_ms.max(1));
    switchboard_telemetry::scrape::on_scrape(switchboard_router::metrics::sampler(
        &router.pool(),
        router.local_addr.to_string(),
    ));
    args.metrics.start().await?;
    let stop = shutdown_signal();
    // Tests and operators read the bound address from this line.
    println!("router listening on {}", router.local_addr);
    tracing::info!(addr = %router.local_addr, children = router.pool().config().children, "router serving");
    router.serve(stop).await
}
