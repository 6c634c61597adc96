//! Logs, traces and metrics for every Switchboard role.
//!
//! - [`init`]: the one setup a process calls first (JSON logs when stderr is not a terminal,
//!   spans with trace ids, OTLP export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set).
//! - [`propagation`]: W3C trace context in gRPC metadata and MCP `_meta`.
//! - [`metrics`]: the named instruments (deliveries by decision, ingest latency, replays,
//!   sandbox restarts and budget faults, plan confirms, backlog gauges).
//! - [`scrape`]: the same instruments as a Prometheus `/metrics` page.

pub mod metrics;
pub mod propagation;
pub mod scrape;
pub mod server_metrics;
mod setup;

pub use metrics::metrics;
pub use setup::{Export, OTLP_ENDPOINT_ENV, Telemetry, init};
