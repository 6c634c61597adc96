//! The metrics every role reports, by name. Instruments come from the global meter provider,
//! which is a no-op unless OTLP export is on ([`crate::init`]), so recording costs next to
//! nothing when nobody collects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, ObservableGauge};

/// The backlog gauges: name and description. Their values are what a role's scrape sampler
/// last set with [`Metrics::observe`].
pub const GAUGES: [(&str, &str); 7] = [
    (
        "switchboard.backlog.unrouted_events",
        "Stored deliveries without a decision yet: pending (no router answered in time) or deferred (over the webhook's rate). Read from the database by control",
    ),
    (
        "switchboard.backlog.open_todos",
        "Todos not completed, by queue (claimed or not). Read from the database by control",
    ),
    (
        "switchboard.backlog.quarantined_events",
        "Deliveries quarantined in the last 24 hours. Read from the database by control",
    ),
    (
        "switchboard.sandbox.children",
        "Sandbox children of a pool (a router's, or the pack checker's), by state (busy, idle: spares and children between calls)",
    ),
    (
        "switchboard.sandbox.queued_chunks",
        "Evaluation chunks waiting for a sandbox child, by class (live, interactive, replay: the replay queue's depth)",
    ),
    (
        "switchboard.guards.running",
        "Guards running (issue 46): confirmed changes still watched by the configuration they replaced. Read from the database by control",
    ),
    (
        "switchboard.change_log.head",
        "The change log's last entry (issue 47): its seq as the value, its SHA-256 as the hash attribute, for an operator to publish or pin. Read from the database by control",
    ),
];

/// One gauge's readings: each with its attributes.
pub type Readings = Vec<(Vec<KeyValue>, f64)>;

/// Ingest's buckets, in seconds: 1 ms to 30 s (issue 49). OpenTelemetry's default boundaries
/// (0, 5, 10, 25 … 10000) are for milliseconds; on a histogram in seconds every delivery fell
/// in the first bucket and no quantile could be read.
pub const INGEST_SECONDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A replay's buckets, in seconds: 10 ms to 2 minutes.
pub const REPLAY_SECONDS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];

/// All instruments, created once (after [`crate::init`] has installed the provider).
pub struct Metrics {
    deliveries: Counter<u64>,
    ingest_duration: Histogram<f64>,
    replay_duration: Histogram<f64>,
    replay_truncations: Counter<u64>,
    child_restarts: Counter<u64>,
    budget_faults: Counter<u64>,
    sandbox_cpu: Counter<f64>,
    plan_confirms: Counter<u64>,
    guard_breaches: Counter<u64>,
    guard_recovered: Counter<u64>,
    ingest_refusals: Counter<u64>,
    ingest_stored: Counter<u64>,
    router_ejections: Counter<u64>,
    retention_purged: Counter<u64>,
    trial_deliveries: Counter<u64>,
    trial_evaluations: Counter<u64>,
    /// The webhooks trial metrics name, at most [`TRIAL_WEBHOOKS`]; the rest are `other`.
    trial_webhooks: Mutex<std::collections::HashSet<String>>,
    group_commit_writes: Histogram<u64>,
    observed: Arc<Mutex<HashMap<(&'static str, String), Readings>>>,
    _gauges: Vec<ObservableGauge<f64>>,
}

/// Webhooks a process names in trial metrics; more count as `other`.
pub const TRIAL_WEBHOOKS: usize = 64;

/// Why a sandbox child is replaced (`switchboard.sandbox.child_restarts`' `reason`).
pub const CHILD_RESTART_REASONS: [&str; 3] = ["budget_exceeded", "sandbox_crashed", "lost"];

/// Why ingest refuses a request before storing it (`switchboard.ingest.refusals`' `reason`).
pub const INGEST_REFUSAL_REASONS: [&str; 5] = [
    "connections",
    "body_too_large",
    "slow_body",
    "backlog_full",
    "rate_limited",
];

/// What retention purges (`switchboard.retention.purged`' `what`).
pub const RETENTION_PURGES: [&str; 4] = ["event", "plan", "redrive", "trial"];

/// How ingest stored a delivery (`switchboard.ingest.stored`' `how`).
pub const INGEST_STORED_HOW: [&str; 2] = ["with_decision", "before_decision"];

/// What a breached guard did (`switchboard.guard.breaches`' `outcome`).
pub const GUARD_BREACH_OUTCOMES: [&str; 2] = ["reverted", "alerted"];

/// Where a trial's candidate is evaluated (`switchboard.trial.evaluations`' `where`).
pub const TRIAL_EVALUATION_PLACES: [&str; 2] = ["live_call", "apart"];

/// The process's instruments. Counters an operator alerts on start at zero for each of their
/// label values, so a query finds the series before the first event (issue 49).
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let made = instruments();
        for reason in CHILD_RESTART_REASONS {
            made.child_restarts
                .add(0, &[KeyValue::new("reason", reason)]);
        }
        for reason in INGEST_REFUSAL_REASONS {
            made.ingest_refusals
                .add(0, &[KeyValue::new("reason", reason)]);
        }
        for what in RETENTION_PURGES {
            made.retention_purged.add(0, &[KeyValue::new("what", what)]);
        }
        for how in INGEST_STORED_HOW {
            made.ingest_stored.add(0, &[KeyValue::new("how", how)]);
        }
        for outcome in GUARD_BREACH_OUTCOMES {
            made.guard_breaches
                .add(0, &[KeyValue::new("outcome", outcome)]);
        }
        made.plan_confirms
            .add(0, &[KeyValue::new("outcome", "applied")]);
        for place in TRIAL_EVALUATION_PLACES {
            made.trial_evaluations
                .add(0, &[KeyValue::new("where", place)]);
        }
        made.router_ejections.add(0, &[]);
        made.budget_faults.add(0, &[]);
        made.replay_truncations.add(0, &[]);
        made
    })
}

fn instruments() -> Metrics {
    {
        let meter = opentelemetry::global::meter("switchboard");
        let observed: Arc<Mutex<HashMap<(&'static str, String), Readings>>> = Arc::default();
        let gauges = GAUGES
            .iter()
            .map(|&(name, description)| {
                let observed = observed.clone();
                meter
                    .f64_observable_gauge(name)
                    .with_description(description)
                    .with_callback(move |gauge| {
                        if let Ok(all) = observed.lock() {
                            let readings = all.iter().filter(|((n, _), _)| *n == name);
                            for (_, readings) in readings {
                                for (attributes, value) in readings {
                                    gauge.observe(*value, attributes);
                                }
                            }
                        }
                    })
                    .build()
            })
            .collect();
        Metrics {
            observed,
            _gauges: gauges,
            deliveries: meter
                .u64_counter("switchboard.ingest.deliveries")
                .with_description("Deliveries ingested, by decision (queue, default, drop, quarantine, fault, unrouted) and verification")
                .build(),
            ingest_duration: meter
                .f64_histogram("switchboard.ingest.duration")
                .with_unit("s")
                .with_boundaries(INGEST_SECONDS.to_vec())
                .with_description("Time from a delivery's arrival to its answer (stored and, when a router answered, routed)")
                .build(),
            replay_duration: meter
                .f64_histogram("switchboard.replay.duration")
                .with_unit("s")
                .with_boundaries(REPLAY_SECONDS.to_vec())
                .with_description("Time a replay (plan or dry run) took over a webhook's stored deliveries")
                .build(),
            replay_truncations: meter
                .u64_counter("switchboard.replay.truncations")
                .with_description("Replays cut short by their time budget")
                .build(),
            child_restarts: meter
                .u64_counter("switchboard.sandbox.child_restarts")
                .with_description("Sandbox children replaced, by reason (budget_exceeded, sandbox_crashed, …)")
                .build(),
            budget_faults: meter
                .u64_counter("switchboard.sandbox.budget_faults")
                .with_description("Envelopes faulted because their evaluation exceeded the budget")
                .build(),
            sandbox_cpu: meter
                .f64_counter("switchboard.sandbox.cpu")
                .with_unit("s")
                .with_description("CPU time sandbox children spent on evaluations, by tenant (owner scope; empty for calls shared between tenants) and class (live, interactive, replay)")
                .build(),
            plan_confirms: meter
                .u64_counter("switchboard.plan.confirms")
                .with_description("Plan confirms, by outcome (applied, or the refusal's code such as plan_stale)")
                .build(),
            guard_breaches: meter
                .u64_counter("switchboard.guard.breaches")
                .with_description("Guards that breached (issue 46), by outcome (reverted, or alerted: on alert, or when the webhook changed again after the confirm)")
                .build(),
            guard_recovered: meter
                .u64_counter("switchboard.guard.recovered")
                .with_description("Todos a guard's recovery redrive made after a revert (issue 46), by state (applied at once, or applied later by a person)")
                .build(),
            ingest_refusals: meter
                .u64_counter("switchboard.ingest.refusals")
                .with_description("Ingest requests refused before a delivery was stored, by reason (connections, slow_body, rate_limited, backlog_full)")
                .build(),
            ingest_stored: meter
                .u64_counter("switchboard.ingest.stored")
                .with_description("Deliveries stored on the routing path, by how: with_decision (one write) or before_decision (routing late or no router: stored first, decided later)")
                .build(),
            router_ejections: meter
                .u64_counter("switchboard.routing.ejections")
                .with_description("Routers ejected from the balancer for a while, late or failing")
                .build(),
            trial_deliveries: meter
                .u64_counter("switchboard.trial.deliveries")
                .with_description("Live deliveries a trial saw, by webhook (the first 64 a process meets; the rest as other) and outcome: agreed or disagreed (the candidate decided as the live rules did, or otherwise) or not_evaluated (shed under load)")
                .build(),
            trial_evaluations: meter
                .u64_counter("switchboard.trial.evaluations")
                .with_description("Evaluations of a trial's candidate (or a guard's replaced configuration) on live deliveries, by where: live_call (in the delivery's own router call, on the payload already parsed) or apart (a replay-priority call of its own: the candidate is costly, faulted, or is a webhook's second trial)")
                .build(),
            trial_webhooks: Mutex::default(),
            retention_purged: meter
                .u64_counter("switchboard.retention.purged")
                .with_description("Rows purged by retention, by what (event, plan, redrive)")
                .build(),
            group_commit_writes: meter
                .u64_histogram("switchboard.store.group_commit_writes")
                .with_description("Ingest writes (events, decisions) each group commit held: 1 when deliveries arrive one at a time, more under load")
                .with_boundaries(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
                .build(),
        }
    }
}

impl Metrics {
    /// Replaces what `source` (a pool, the database) last read for the backlog gauge `name`
    /// (one of [`GAUGES`]); a sampler calls it at each scrape. Sources in one process (a
    /// router's pool and the packs' pool under `switchboard up`) keep their own readings,
    /// told apart by their attributes.
    pub fn observe(&self, name: &'static str, source: &str, readings: Readings) {
        debug_assert!(GAUGES.iter().any(|(n, _)| *n == name), "{name}");
        if let Ok(mut all) = self.observed.lock() {
            all.insert((name, source.to_string()), readings);
        }
    }

    /// Puts the series whose labels are product words — each delivery decision × verified,
    /// each recovery state — on the page at zero (issue 49). The words are the domain's
    /// (`Label::FAMILIES`, ingest's own outcomes, `RecoveryState::ALL`), so control passes
    /// them at start. Histograms (ingest's and replays' durations) appear with their first
    /// observation: an instrument cannot observe nothing.
    pub fn start_at_zero(&self, decisions: &[&'static str], recovery_states: &[&'static str]) {
        for decision in decisions {
            for verified in [true, false] {
                self.deliveries.add(
                    0,
                    &[
                        KeyValue::new("decision", *decision),
                        KeyValue::new("verified", verified),
                    ],
                );
            }
        }
        for state in recovery_states {
            self.guard_recovered
                .add(0, &[KeyValue::new("state", *state)]);
        }
    }

    /// One group commit of ingest's writes, holding `writes` of them.
    pub fn group_commit(&self, writes: usize) {
        self.group_commit_writes.record(writes as u64, &[]);
    }

    /// One ingested delivery: `decision` is `queue`, `default`, `drop`, `quarantine`,
    /// `fault`, `unrouted`, `pending` (past the ingest deadline) or `deferred` (over the rate).
    pub fn delivery(&self, decision: &'static str, verified: bool, took: Duration) {
        let attributes = [
            KeyValue::new("decision", decision),
            KeyValue::new("verified", verified),
        ];
        self.deliveries.add(1, &attributes);
        self.ingest_duration
            .record(took.as_secs_f64(), &attributes[..1]);
    }

    /// One replay (a plan's or a dry run's: they replay alike, so no label tells them
    /// apart), and whether its budget cut it short.
    pub fn replay(&self, took: Duration, truncated: bool) {
        self.replay_duration.record(took.as_secs_f64(), &[]);
        if truncated {
            self.replay_truncations.add(1, &[]);
        }
    }

    /// A sandbox child replaced; `reason` says why.
    pub fn child_restart(&self, reason: &'static str) {
        self.child_restarts
            .add(1, &[KeyValue::new("reason", reason)]);
    }

    /// An envelope faulted with `budget_exceeded`.
    pub fn budget_fault(&self) {
        self.budget_faults.add(1, &[]);
    }

    /// CPU time a sandbox child spent on one tenant's work of one class.
    pub fn sandbox_cpu(&self, tenant: &str, class: &'static str, spent: Duration) {
        self.sandbox_cpu.add(
            spent.as_secs_f64(),
            &[
                KeyValue::new("tenant", tenant.to_string()),
                KeyValue::new("class", class),
            ],
        );
    }

    /// An ingest request refused before anything was stored; `reason` says why.
    pub fn ingest_refusal(&self, reason: &'static str) {
        self.ingest_refusals
            .add(1, &[KeyValue::new("reason", reason)]);
    }

    /// A delivery stored on the routing path: `with_decision` (decided in time, one write) or
    /// `before_decision` (stored first: routing was late or no router answered).
    pub fn ingest_stored(&self, how: &'static str) {
        self.ingest_stored.add(1, &[KeyValue::new("how", how)]);
    }

    /// A router ejected from the balancer.
    pub fn router_ejection(&self) {
        self.router_ejections.add(1, &[]);
    }

    /// Rows retention purged: `what` is `event` or `plan`.
    pub fn retention_purged(&self, what: &'static str, n: u64) {
        if n > 0 {
            self.retention_purged.add(n, &[KeyValue::new("what", what)]);
        }
    }

    /// `n` live deliveries of a trial on `webhook`: `agreed`, `disagreed` or `not_evaluated`.
    /// Webhooks label the counter up to [`TRIAL_WEBHOOKS`] per process, so a tenant with many
    /// trials cannot grow the series without bound.
    pub fn trial_deliveries(&self, webhook: &str, outcome: &'static str, n: u64) {
        if n == 0 {
            return;
        }
        let named = {
            let mut known = self
                .trial_webhooks
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if known.contains(webhook) {
                true
            } else if known.len() < TRIAL_WEBHOOKS {
                known.insert(webhook.to_string());
                true
            } else {
                false
            }
        };
        let webhook = if named { webhook } else { "other" };
        self.trial_deliveries.add(
            n,
            &[
                KeyValue::new("webhook", webhook.to_string()),
                KeyValue::new("outcome", outcome),
            ],
        );
    }

    /// `n` evaluations of trials' candidates, `place` one of [`TRIAL_EVALUATION_PLACES`].
    pub fn trial_evaluations(&self, place: &'static str, n: u64) {
        if n > 0 {
            self.trial_evaluations
                .add(n, &[KeyValue::new("where", place)]);
        }
    }

    /// A guard that breached: `reverted` or `alerted`.
    pub fn guard_breach(&self, outcome: &'static str) {
        self.guard_breaches
            .add(1, &[KeyValue::new("outcome", outcome)]);
    }

    /// A recovery after a revert, in the state it reached, with the todos it made.
    pub fn guard_recovered(&self, state: &'static str, todos: u64) {
        self.guard_recovered
            .add(todos, &[KeyValue::new("state", state)]);
    }

    /// A plan confirm: `applied`, or the refusal's code.
    pub fn plan_confirm(&self, outcome: &str) {
        self.plan_confirms
            .add(1, &[KeyValue::new("outcome", outcome.to_string())]);
    }
}
