//! Serving control: ingest (HTTP, axum) on one listener and the control gRPC API (tonic) on
//! another, the unrouted-event retry beside them, and one graceful shutdown for all three.
//!
//! Shutdown order: readiness goes first (gRPC health `NOT_SERVING`, `/readyz` 503), so
//! balancers stop sending; after `readiness_grace`, both listeners stop accepting and in-flight
//! requests drain; the retry task stops last (a pass it was in is transactional per event).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tonic::transport::server::TcpIncoming;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

use crate::ingest::{self, HttpLimits, RetryOptions};
use crate::retention::RetentionOptions;
use crate::state::ControlState;

/// Largest gRPC message control takes or sends.
pub const MAX_GRPC_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How control serves, beyond its addresses.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Time between flipping readiness and closing the listeners, so load balancers notice.
    pub readiness_grace: Duration,
    /// The unrouted-event retry; `None` runs none (another replica may).
    pub retry: Option<RetryOptions>,
    /// The retention task; `None` runs none.
    pub retention: Option<RetentionOptions>,
    /// The HTTP listener's bounds: open connections, header and body pace.
    pub http: HttpLimits,
    /// A gRPC connection older than this is asked to go (HTTP/2 GOAWAY) and reconnects, so
    /// long-lived clients (gateways, services) spread over replicas added since they connected.
    pub grpc_max_connection_age: Duration,
    /// How long calls in flight on a connection asked to go may still finish.
    pub grpc_max_connection_age_grace: Duration,
    /// How the console signs people in (issue 20).
    pub console: crate::console::ConsoleSettings,
}

/// Five minutes: a new replica gets connections within minutes, and a client reconnects a few
/// times an hour (one TLS-less HTTP/2 handshake each).
pub const DEFAULT_MAX_CONNECTION_AGE: Duration = Duration::from_secs(300);

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            readiness_grace: Duration::ZERO,
            retry: Some(RetryOptions::default()),
            retention: Some(RetentionOptions::default()),
            http: HttpLimits::default(),
            grpc_max_connection_age: DEFAULT_MAX_CONNECTION_AGE,
            grpc_max_connection_age_grace: DEFAULT_MAX_CONNECTION_AGE,
            console: crate::console::ConsoleSettings::default(),
        }
    }
}

/// Control bound to its two addresses, ready to serve. Binding first lets a caller print the
/// addresses actually bound (port 0 picks free ports) before serving starts.
pub struct BoundControl {
    state: ControlState,
    http: TcpListener,
    grpc: TcpListener,
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    health: HealthReporter,
}

/// Why control could not bind or serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("grpc: {0}")]
    Grpc(String),
}

impl BoundControl {
    pub async fn bind(
        state: ControlState,
        http_addr: SocketAddr,
        grpc_addr: SocketAddr,
    ) -> Result<Self, ServeError> {
        let http = TcpListener::bind(http_addr).await?;
        let grpc = TcpListener::bind(grpc_addr).await?;
        let health = HealthReporter::new();
        Ok(Self {
            http_addr: http.local_addr()?,
            grpc_addr: grpc.local_addr()?,
            state,
            http,
            grpc,
            health,
        })
    }

    /// Where people reach the console, now that the HTTP port is known (`switchboard up`
    /// binds port 0): the links pending plans carry point here unless one was configured.
    pub fn console_base_or(&mut self, base: String) {
        self.state.console_base.get_or_insert(base);
    }

    /// The state this control serves with, for building its gRPC routes.
    pub fn state(&self) -> &ControlState {
        &self.state
    }

    /// The gRPC health reporter, for services that report their own status.
    pub fn health(&self) -> HealthReporter {
        self.health.clone()
    }

    /// Serves ingest and `grpc_routes` (the control API; health and reflection are added
    /// here) until `shutdown` resolves, then flips readiness and drains.
    pub async fn serve(
        self,
        grpc_routes: tonic::service::Routes,
        options: ServeOptions,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let ready = Arc::new(AtomicBool::new(true));
        crate::api::report_health(&self.health, ServingStatus::Serving).await;
        switchboard_telemetry::metrics().start_at_zero(
            &ingest::delivery_decisions(),
            &switchboard_model::guard::RecoveryState::ALL.map(|s| s.as_str()),
        );

        // One shutdown signal, two listeners: readiness first, then both drain.
        let (drain_tx, drain_rx) = tokio::sync::watch::channel(false);
        let health = self.health.clone();
        let ready_flag = ready.clone();
        let grace = options.readiness_grace;
        tokio::spawn(async move {
            shutdown.await;
            ready_flag.store(false, Ordering::SeqCst);
            crate::api::report_health(&health, ServingStatus::NotServing).await;
            tracing::info!("control not ready; draining");
            if !grace.is_zero() {
                tokio::time::sleep(grace).await;
            }
            let _ = drain_tx.send(true);
        });
        let drained = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            // A dropped sender also means stop.
            let _ = rx.wait_for(|d| *d).await;
        };

        let retry = options
            .retry
            .map(|o| ingest::spawn_unrouted_retry(self.state.clone(), o));
        let retention = options
            .retention
            .map(|o| crate::retention::spawn_retention(self.state.clone(), o));

        let http_app = ingest::router_with(self.state.clone(), &options.http)
            .merge(
                axum::Router::new()
                    .route("/healthz", get(|| async { "ok" }))
                    .route("/readyz", get(readyz))
                    .with_state(ready),
            )
            .merge(crate::console::router(
                self.state.clone(),
                options.console.clone(),
            ))
            // After every route: each request timed by its matched route (OpenTelemetry's
            // `http.server.request.duration`).
            .layer(switchboard_telemetry::server_metrics::ServerMetricsLayer::http());
        let http =
            ingest::serve::serve(self.http, http_app, options.http, drained(drain_rx.clone()));

        let (reflection, reflection_v1alpha) =
            switchboard_proto::reflection::services(&crate::api::SERVICE_NAMES)
                .map_err(|e| ServeError::Grpc(format!("reflection: {e}")))?;
        let grpc = tonic::transport::Server::builder()
            // One span per call, continuing the caller's trace (health checks get none).
            .trace_fn(switchboard_telemetry::propagation::grpc_request_span)
            // Each call timed by method and status (`rpc.server.call.duration`).
            .layer(switchboard_telemetry::server_metrics::ServerMetricsLayer::grpc())
            .max_connection_age(options.grpc_max_connection_age)
            .max_connection_age_grace(options.grpc_max_connection_age_grace)
            .add_routes(grpc_routes)
            .add_service(HealthServer::new(HealthService::from_health_reporter(
                self.health.clone(),
            )))
            .add_service(reflection)
            .add_service(reflection_v1alpha)
            .serve_with_incoming_shutdown(
                // TCP_NODELAY: otherwise an answer's trailers wait for a delayed ACK (~40 ms a call).
                TcpIncoming::from(self.grpc).with_nodelay(Some(true)),
                drained(drain_rx),
            );

        let (http_result, grpc_result) = tokio::join!(http, grpc);
        for task in [retry, retention].into_iter().flatten() {
            task.abort();
        }
        http_result?;
        grpc_result.map_err(|e| ServeError::Grpc(e.to_string()))?;
        tracing::info!("control stopped");
        Ok(())
    }
}

async fn readyz(State(ready): State<Arc<AtomicBool>>) -> (StatusCode, &'static str) {
    if ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    }
}

/// Binds and serves in one call; see [`BoundControl`] to learn the bound addresses first.
pub async fn serve_control(
    state: ControlState,
    http_addr: SocketAddr,
    grpc_addr: SocketAddr,
    grpc_routes: tonic::service::Routes,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    BoundControl::bind(state, http_addr, grpc_addr)
        .await?
        .serve(grpc_routes, ServeOptions::default(), shutdown)
        .await
}
