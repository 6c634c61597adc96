//! Serving the gateway: one axum app with `/mcp` (rmcp's streamable HTTP service behind the
//! gate), `/healthz` (liveness) and `/readyz` (readiness: 503 from the start of shutdown). Stateless: every request carries its bearer, is checked with
//! control and served on its own, so any instance answers any request. Clients speaking the
//! session-based protocol versions get their `initialize` answered without a session id,
//! and clients of the newest (2026-07-28) stateless protocol are served directly.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use switchboard_control_client::ControlClient;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::{Gate, gate};
use crate::handler::{Gateway, ToolPolicy};

/// Hosts a gateway answers by default: loopback only (DNS-rebinding protection). A deployment
/// behind a name must allow that name.
pub fn loopback_hosts() -> Vec<String> {
    ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .map(String::from)
        .collect()
}

/// Browser origins allowed by default: loopback pages on any port. Requests without an
/// `Origin` (agents, CLIs) are never refused for it.
pub fn loopback_origins() -> Vec<String> {
    [
        "http://localhost:*",
        "http://127.0.0.1:*",
        "http://[::1]:*",
        "https://localhost:*",
        "https://127.0.0.1:*",
        "https://[::1]:*",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

/// How one gateway serves.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Where `/mcp` listens (port 0 picks a free port; [`BoundGateway::local_addr`] tells).
    pub listen: SocketAddr,
    /// Control's gRPC address: `host:port` or `http://host:port`.
    pub control: String,
    /// `Host` values accepted, `name` or `name:port`; empty accepts any (not recommended).
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted, `scheme://host[:port|:*]`.
    pub allowed_origins: Vec<String>,
    /// Offer and serve only read-only tools.
    pub read_only: bool,
    /// The largest serialized `arguments` of one tool call.
    pub max_argument_bytes: usize,
    /// Time between reporting not-ready (`/readyz` 503) and closing the listener at
    /// shutdown, so load balancers stop sending first.
    pub readiness_grace: Duration,
}

impl GatewayConfig {
    /// Loopback hosts and origins, every tool, 1 MiB of arguments.
    pub fn new(listen: SocketAddr, control: impl Into<String>) -> GatewayConfig {
        GatewayConfig {
            listen,
            control: control.into(),
            allowed_hosts: loopback_hosts(),
            allowed_origins: loopback_origins(),
            read_only: false,
            max_argument_bytes: ToolPolicy::default().max_argument_bytes,
            readiness_grace: Duration::ZERO,
        }
    }

    /// The largest request body: room for the largest arguments and the envelope around
    /// them; past it, 413 before anything is parsed.
    pub fn max_request_bytes(&self) -> usize {
        self.max_argument_bytes.saturating_mul(2).max(64 * 1024)
    }
}

/// Why the gateway could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The axum app: `/mcp` behind the gate, `/healthz` for probes. `cancel` ends open
/// response streams at shutdown.
pub fn app(config: &GatewayConfig, control: ControlClient, cancel: CancellationToken) -> Router {
    let policy = ToolPolicy {
        read_only: config.read_only,
        max_argument_bytes: config.max_argument_bytes,
    };
    let handler = Gateway::new(control.clone(), policy);
    let mut mcp_config = StreamableHttpServerConfig::default()
        // Stateless: no session to pin a caller to an instance, or a credential to a session.
        .with_legacy_session_mode(false)
        // Plain JSON for plain answers; a call that sends progress switches to SSE itself.
        .with_json_response(true)
        .with_allowed_origins(config.allowed_origins.clone())
        .with_max_request_body_bytes(config.max_request_bytes())
        .with_sse_keep_alive(Some(Duration::from_secs(15)))
        .with_cancellation_token(cancel);
    mcp_config = if config.allowed_hosts.is_empty() {
        mcp_config.disable_allowed_hosts()
    } else {
        mcp_config.with_allowed_hosts(config.allowed_hosts.clone())
    };
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        mcp_config,
    );
    let gate_state = Arc::new(Gate {
        control,
        allowed_hosts: config.allowed_hosts.clone(),
        allowed_origins: config.allowed_origins.clone(),
        max_request_bytes: config.max_request_bytes(),
    });
    Router::new()
        .route_service("/mcp", mcp)
        // Every /mcp request passes the gate first: host, bearer, body, identity.
        .route_layer(axum::middleware::from_fn_with_state(gate_state, gate))
        .route("/healthz", get(|| async { "ok" }))
}

/// A gateway bound to its address, ready to serve. Binding first lets a caller print the
/// address actually bound (port 0) before serving starts.
pub struct BoundGateway {
    listener: TcpListener,
    app: Router,
    cancel: CancellationToken,
    ready: Arc<AtomicBool>,
    readiness_grace: Duration,
    pub local_addr: SocketAddr,
}

impl BoundGateway {
    pub async fn bind(config: GatewayConfig) -> Result<BoundGateway, GatewayError> {
        let control = ControlClient::connect_lazy(&config.control).map_err(GatewayError::Config)?;
        let listener = TcpListener::bind(config.listen).await?;
        let local_addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        let ready = Arc::new(AtomicBool::new(true));
        let app = app(&config, control, cancel.child_token())
            .route(
                "/readyz",
                get({
                    let ready = ready.clone();
                    move || async move {
                        if ready.load(Ordering::SeqCst) {
                            (StatusCode::OK, "ready")
                        } else {
                            (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
                        }
                    }
                }),
            )
            // After every route: each request timed by its matched route (OpenTelemetry's
            // `http.server.request.duration`).
            .layer(switchboard_telemetry::server_metrics::ServerMetricsLayer::http());
        Ok(BoundGateway {
            listener,
            app,
            cancel,
            ready,
            readiness_grace: config.readiness_grace,
            local_addr,
        })
    }

    /// `http://<addr>/mcp`, what agents are configured with.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.local_addr)
    }

    /// Serves until `shutdown` resolves; then reports not-ready, waits the readiness grace
    /// (still serving), ends open response streams and drains.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), GatewayError> {
        let cancel = self.cancel.clone();
        let ready = self.ready.clone();
        let grace = self.readiness_grace;
        axum::serve(self.listener, self.app)
            .with_graceful_shutdown(async move {
                shutdown.await;
                ready.store(false, Ordering::SeqCst);
                tracing::info!(grace_ms = grace.as_millis() as u64, "gateway draining");
                tokio::time::sleep(grace).await;
                cancel.cancel();
            })
            .await?;
        Ok(())
    }
}

/// Binds and serves a gateway until `shutdown` resolves: what `switchboard gateway` and
/// `switchboard up` run. Prints nothing; [`BoundGateway`] is there for callers that want to
/// print the address first.
pub async fn serve(
    config: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GatewayError> {
    BoundGateway::bind(config).await?.serve(shutdown).await
}
