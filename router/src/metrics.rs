//! The sandbox gauges of `/metrics`: children busy and idle, chunks queued per class (the
//! replay queue's depth among them), read from a pool at each scrape.

use std::sync::{Arc, Weak};

use switchboard_telemetry::metrics::{self, KeyValue};
use switchboard_telemetry::scrape::Sampler;

use crate::sandbox::SandboxPool;

/// The sampler for one pool, named `pool` in the gauges' attributes. It holds the pool
/// weakly: a stopped pool reads as nothing rather than being kept alive.
pub fn sampler(pool: &Arc<SandboxPool>, name: String) -> Sampler {
    let pool: Weak<SandboxPool> = Arc::downgrade(pool);
    Arc::new(move || {
        let m = metrics::metrics();
        let source = format!("pool:{name}");
        let Some(pool) = pool.upgrade() else {
            m.observe("switchboard.sandbox.children", &source, Vec::new());
            m.observe("switchboard.sandbox.queued_chunks", &source, Vec::new());
            return Box::pin(async {});
        };
        let now = pool.occupancy();
        let at = |k: &'static str, v: &'static str| {
            vec![KeyValue::new("pool", name.clone()), KeyValue::new(k, v)]
        };
        m.observe(
            "switchboard.sandbox.children",
            &source,
            vec![
                (at("state", "busy"), now.busy as f64),
                (at("state", "idle"), now.idle as f64),
            ],
        );
        m.observe(
            "switchboard.sandbox.queued_chunks",
            &source,
            now.queued
                .iter()
                .map(|(class, n)| (at("class", class.label()), *n as f64))
                .collect(),
        );
        Box::pin(async {})
    })
}
