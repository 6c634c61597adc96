//! `switchboard gateway`: the MCP gateway. Agents reach every verb their endpoint allows as an
//! MCP tool at `http://<listen>/mcp` (streamable HTTP, `Authorization: Bearer <endpoint
//! credential>`); each tool call is one control RPC carrying that same bearer. Stateless: run
//! as many as you like behind one address.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;
use switchboard_mcp_gateway::{BoundGateway, GatewayConfig, loopback_hosts, loopback_origins};

use super::shutdown_signal;

#[derive(Args, Debug, Clone)]
pub struct GatewayArgs {
    /// Address to serve `/mcp` on (port 0 picks a free port; the URL is printed).
    #[arg(
        long,
        env = "SWITCHBOARD_GATEWAY_LISTEN",
        default_value = "127.0.0.1:8090"
    )]
    pub listen: SocketAddr,
    /// Control's gRPC address (`host:port` or `http://host:port`).
    #[arg(long, env = "SWITCHBOARD_CONTROL", default_value = "127.0.0.1:7700")]
    pub control: String,
    /// A `Host` the gateway answers besides loopback (`name` or `name:port`); repeat for more.
    /// Requests for any other host are refused (DNS-rebinding protection).
    #[arg(
        long = "allowed-host",
        env = "SWITCHBOARD_GATEWAY_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// A browser `Origin` allowed besides loopback pages (`https://app.example.com`, `:*` for
    /// any port); repeat for more. Requests without an Origin are not affected.
    #[arg(
        long = "allowed-origin",
        env = "SWITCHBOARD_GATEWAY_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,
    /// Offer and serve only read-only tools (lists, gets, dry runs).
    #[arg(long, env = "SWITCHBOARD_GATEWAY_READ_ONLY")]
    pub read_only: bool,
    /// The largest `arguments` of one tool call, in bytes.
    #[arg(
        long,
        env = "SWITCHBOARD_GATEWAY_MAX_ARGUMENT_BYTES",
        default_value_t = 1024 * 1024
    )]
    pub max_argument_bytes: usize,
    /// Time between reporting not-ready (`/readyz` 503) and closing the listener at shutdown,
    /// milliseconds; calls keep being served meanwhile.
    #[arg(
        long,
        env = "SWITCHBOARD_GATEWAY_READINESS_GRACE_MS",
        default_value_t = 0
    )]
    pub readiness_grace_ms: u64,
    #[command(flatten)]
    pub metrics: super::MetricsArgs,
}

impl GatewayArgs {
    /// The gateway configuration these flags describe: loopback plus what the operator allowed.
    pub fn config(&self) -> GatewayConfig {
        let mut config = GatewayConfig::new(self.listen, self.control.clone());
        config.allowed_hosts = loopback_hosts();
        config
            .allowed_hosts
            .extend(self.allowed_hosts.iter().map(|h| h.trim().to_string()));
        config.allowed_origins = loopback_origins();
        config
            .allowed_origins
            .extend(self.allowed_origins.iter().map(|o| o.trim().to_string()));
        config.read_only = self.read_only;
        config.max_argument_bytes = self.max_argument_bytes.max(1024);
        config.readiness_grace = std::time::Duration::from_millis(self.readiness_grace_ms);
        config
    }
}

pub async fn run(args: GatewayArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal();
    if !args.listen.ip().is_loopback() && args.allowed_hosts.is_empty() {
        tracing::warn!(
            listen = %args.listen,
            "the gateway answers only loopback Host names; allow the name agents use with --allowed-host"
        );
    }
    let bound = BoundGateway::bind(args.config())
        .await
        .context("starting the gateway")?;
    println!("mcp listening on {}", bound.url());
    args.metrics.start().await?;
    tracing::info!(url = %bound.url(), control = %args.control, read_only = args.read_only, "gateway serving");
    bound.serve(shutdown).await.context("serving the gateway")
}
