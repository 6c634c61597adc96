//! `/metrics`: the process's instruments in the Prometheus text format, for operators who
//! scrape rather than receive OTLP. Every role serves it on its HTTP listener.
//!
//! Backlog gauges need fresh readings (a database count, a pool's state) at the moment of a
//! scrape: each role registers a *sampler* with [`on_scrape`], and [`scrape`] runs them all
//! before it encodes. The gauges themselves are OpenTelemetry observable gauges reading what
//! the samplers last set ([`crate::metrics::Metrics::observe`]), so OTLP export sees the same
//! values.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

/// The content type of the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a sampler returns: a reading to wait for before encoding.
pub type Sampling = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Takes fresh readings of one role's gauges.
pub type Sampler = Arc<dyn Fn() -> Sampling + Send + Sync>;

pub(crate) fn registry() -> &'static prometheus::Registry {
    static REGISTRY: OnceLock<prometheus::Registry> = OnceLock::new();
    REGISTRY.get_or_init(prometheus::Registry::new)
}

fn samplers() -> &'static Mutex<Vec<Sampler>> {
    static SAMPLERS: OnceLock<Mutex<Vec<Sampler>>> = OnceLock::new();
    SAMPLERS.get_or_init(|| Mutex::new(Vec::new()))
}

/// Registers a sampler that every scrape runs first (one per role in the process).
pub fn on_scrape(sampler: Sampler) {
    if let Ok(mut all) = samplers().lock() {
        all.push(sampler);
    }
}

/// Runs every sampler, then encodes every instrument of the process.
pub async fn scrape() -> String {
    let all: Vec<Sampler> = samplers().lock().map(|s| s.clone()).unwrap_or_default();
    for sample in all {
        sample().await;
    }
    encode()
}

/// The registry's current values in the text format (empty when [`crate::init`] has not
/// installed the exporter, as in a test that runs a role in-process).
pub fn encode() -> String {
    let families = registry().gather();
    prometheus::TextEncoder::new()
        .encode_to_string(&families)
        .unwrap_or_else(|e| format!("# encoding failed: {e}\n"))
}

/// `GET /metrics` as an axum-free handler: the content type and the page.
pub async fn page() -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", CONTENT_TYPE)], scrape().await)
}

/// Serves `/metrics` (and `/healthz`) on a listener of its own until `shutdown`: kept apart
/// from a role's public listener (ingest, MCP), because the page names tenants and queues.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(page))
        .route("/healthz", axum::routing::get(|| async { "ok" }));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
