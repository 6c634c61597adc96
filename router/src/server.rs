//! Serving the router: the Router service, `grpc.health.v1`, server reflection, and a
//! shutdown that reports NOT_SERVING first and then drains in-flight calls.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tonic::transport::server::TcpIncoming;

use switchboard_proto::router::v1::router_server::RouterServer;
use tokio::net::TcpListener;

use crate::sandbox::{SandboxConfig, SandboxPool};
use crate::service::RouterService;

/// Largest gRPC message a router takes or sends: a chunk of stored deliveries.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// HTTP/2 flow-control windows for batch traffic, on the router's server and its clients.
pub const STREAM_WINDOW_BYTES: u32 = 8 * 1024 * 1024;
pub const CONNECTION_WINDOW_BYTES: u32 = 16 * 1024 * 1024;
/// The largest HTTP/2 frame a caller may send the router (the default is 16 KiB, so a
/// 13.7 MiB call was ~880 frames, each read, checked and copied on its own; docs/benchmarks.md
/// measured the router's CPU for decoding one such call 30 % lower with 1 MiB frames).
pub const MAX_FRAME_BYTES: u32 = 1024 * 1024;

/// A router bound to its address, with its children started, ready to serve.
/// How long a drain may take by default: the 30 s replay budget and a margin.
pub const DEFAULT_DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(35);

pub struct BoundRouter {
    listener: TcpListener,
    pool: Arc<SandboxPool>,
    pub local_addr: SocketAddr,
    /// Time between reporting NOT_SERVING and closing the listener at shutdown, so balancers
    /// (control's DNS refresh, Kubernetes endpoints) stop sending first.
    pub readiness_grace: std::time::Duration,
    /// The longest the drain may take once the listener is closed: a client that never closes
    /// its connection must not keep a stopping router alive.
    pub drain_timeout: std::time::Duration,
}

impl BoundRouter {
    /// Binds `addr` and starts the sandbox pool; fails early when children cannot start or
    /// would run unconfined against the operator's wishes.
    pub async fn bind(addr: SocketAddr, sandbox: SandboxConfig) -> anyhow::Result<Self> {
        let pool = SandboxPool::start(sandbox).await?;
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        Ok(Self {
            listener,
            pool,
            local_addr,
            readiness_grace: std::time::Duration::ZERO,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        })
    }

    pub fn pool(&self) -> Arc<SandboxPool> {
        self.pool.clone()
    }

    /// Serves until `shutdown` resolves, then flips health to NOT_SERVING and drains.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter.set_serving::<RouterServer<RouterService>>().await;
        let (reflection, reflection_v1alpha) = switchboard_proto::reflection::services(&[
            <RouterServer<RouterService> as tonic::server::NamedService>::NAME,
        ])?;
        let router = RouterServer::new(RouterService::new(self.pool.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let grace = self.readiness_grace;
        let (draining, drain_started) = tokio::sync::oneshot::channel::<()>();
        let drain = async move {
            shutdown.await;
            // Readiness goes first, so balancers stop sending before in-flight work ends.
            reporter
                .set_not_serving::<RouterServer<RouterService>>()
                .await;
            reporter
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            tracing::info!(grace_ms = grace.as_millis() as u64, "router draining");
            tokio::time::sleep(grace).await;
            let _ = draining.send(());
        };
        let drain_timeout = self.drain_timeout;
        let deadline = async move {
            if drain_started.await.is_ok() {
                tokio::time::sleep(drain_timeout).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let serving = tonic::transport::Server::builder()
            // One span per call, continuing the caller's trace (health checks get none).
            .trace_fn(switchboard_telemetry::propagation::grpc_request_span)
            // Each call timed by method and status (`rpc.server.call.duration`).
            .layer(switchboard_telemetry::server_metrics::ServerMetricsLayer::grpc())
            // Batches are megabytes: HTTP/2's default 64 KiB windows cost a round trip per
            // 64 KiB (docs/benchmarks.md measured a 1,000-delivery call 20–35 % faster).
            .initial_stream_window_size(Some(STREAM_WINDOW_BYTES))
            .initial_connection_window_size(Some(CONNECTION_WINDOW_BYTES))
            .max_frame_size(Some(MAX_FRAME_BYTES))
            .add_service(health)
            .add_service(reflection)
            .add_service(reflection_v1alpha)
            .add_service(router)
            .serve_with_incoming_shutdown(
                // TCP_NODELAY: otherwise an answer's trailers wait for a delayed ACK (~40 ms a call).
                TcpIncoming::from(self.listener).with_nodelay(Some(true)),
                drain,
            );
        tokio::select! {
            served = serving => served?,
            () = deadline => tracing::warn!(
                timeout_ms = drain_timeout.as_millis() as u64,
                "router drain timed out; closing the connections still open"
            ),
        }
        tracing::info!("router stopped");
        Ok(())
    }
}
