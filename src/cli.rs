//! Command-line roles: flags, environment (`SWITCHBOARD_*`) and defaults, in that order.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use switchboard_router::sandbox::{ChildLimits, SandboxConfig};
use switchboard_router::server::BoundRouter;

#[derive(Parser, Debug)]
#[command(
    name = "switchboard",
    version,
    about = "A webhook router: ordered jq rules route every delivery to a queue, a drop or a quarantine"
)]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// Run a router: validates and evaluates configurations in sandbox children (gRPC).
    Router(RouterArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RouterArgs {
    /// Address to serve gRPC on (port 0 picks a free port; the chosen address is printed).
    #[arg(
        long,
        env = "SWITCHBOARD_ROUTER_LISTEN",
        default_value = "127.0.0.1:7701"
    )]
    pub listen: SocketAddr,
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
    /// Run children even where the kernel refuses seccomp or Landlock (not recommended).
    #[arg(long, env = "SWITCHBOARD_ROUTER_ALLOW_UNCONFINED_SANDBOX")]
    pub allow_unconfined_sandbox: bool,
}

impl RouterArgs {
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
            ..ChildLimits::default()
        };
        config.require_confinement = !self.allow_unconfined_sandbox;
        Ok(config)
    }
}

fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHBOARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() {
        builder.init();
    } else {
        builder.json().init();
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn run_router(args: RouterArgs) -> anyhow::Result<()> {
    let router = BoundRouter::bind(args.listen, args.sandbox_config()?).await?;
    // Tests and operators read the bound address from this line.
    println!("router listening on {}", router.local_addr);
    tracing::info!(addr = %router.local_addr, children = router.pool().config().children, "router serving");
    router.serve(shutdown_signal()).await
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchboard: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.role {
            Role::Router(args) => run_router(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchboard: {e:#}");
            ExitCode::FAILURE
        }
    }
}
