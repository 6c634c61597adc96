//! The backlog gauges of `/metrics` that live in the database (unrouted deliveries, open
//! todos per queue, recent quarantines), read at each scrape. Every control replica reports
//! the same database: aggregate them with `max`, not `sum`.

use std::sync::Arc;

use switchboard_telemetry::metrics;
use switchboard_telemetry::metrics::KeyValue;
use switchboard_telemetry::scrape::Sampler;

use crate::store::Store;

/// How far back `switchboard.backlog.quarantined_events` counts.
pub const QUARANTINE_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;

/// The sampler a control process registers with `switchboard_telemetry::scrape::on_scrape`.
pub fn sampler(store: Store) -> Sampler {
    Arc::new(move || {
        let store = store.clone();
        Box::pin(async move { sample(&store).await })
    })
}

async fn sample(store: &Store) {
    let since = store.clock().now_ms() - QUARANTINE_WINDOW_MS;
    let backlog = match store.backlog(since).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: reading the backlog failed");
            return;
        }
    };
    let m = metrics();
    let source = "database";
    m.observe(
        "switchboard.backlog.unrouted_events",
        source,
        vec![(Vec::new(), backlog.unrouted as f64)],
    );
    m.observe(
        "switchboard.backlog.open_todos",
        source,
        backlog
            .open_todos
            .into_iter()
            .map(|(queue, n)| (vec![KeyValue::new("queue", queue)], n as f64))
            .collect(),
    );
    m.observe(
        "switchboard.backlog.quarantined_events",
        source,
        vec![(Vec::new(), backlog.quarantined as f64)],
    );
    m.observe(
        "switchboard.guards.running",
        source,
        vec![(Vec::new(), backlog.guards_running as f64)],
    );
    match store.change_log_head().await {
        Ok(head) => m.observe(
            "switchboard.change_log.head",
            source,
            head.map(|h| (vec![KeyValue::new("hash", h.hash)], h.seq as f64))
                .into_iter()
                .collect(),
        ),
        Err(e) => tracing::warn!(error = %e, "metrics: reading the change log's head failed"),
    }
}
