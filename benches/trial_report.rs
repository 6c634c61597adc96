//! The trial report over 100,000 trial deliveries (issue 45; results in docs/benchmarks.md,
//! "Trials"). A trial's counts are pre-aggregated as its deliveries come, so reading its
//! report — `Store::get_trial` (the trial row, its transition pairs and its rules' tallies)
//! and `TrialReport::build` — should cost the same after ten deliveries or a hundred
//! thousand. This bench records `TRIAL_BENCH_DELIVERIES` (default 100,000) deliveries into one
//! trial in the live runner's batches of 64, over 6 queues, 30 candidate rules and every kind
//! of transition, then times the report (median and max of `TRIAL_BENCH_READS`, default 50)
//! against the same report after 1,000 deliveries, and states the storage per trial.
//!
//! Run: `cargo bench --bench trial_report` (SQLite; PostgreSQL too when
//! `SWITCHBOARD_TEST_DATABASE_URL` is set). Nothing here asserts on time.

use std::time::{Duration, Instant};

use switchboard_control::store::{NewTrial, NewWebhook, SourceType, Store, TrialBatch};
use switchboard_control::{OwnerScope, SealingKey};
use switchboard_model::plan::Routed;
use switchboard_model::trial::{DEFAULT_MIN_DELIVERIES, Forecast, TrialFacts, TrialReport};
use switchboard_model::{Action, Configuration, Label, Rule};
use switchboard_testkit::database::TestDatabase;

const BATCH: usize = 64;
const QUEUES: [&str; 6] = ["forge", "review", "triage", "ci", "docs", "ops"];
const RULES: usize = 30;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn candidate() -> Configuration {
    Configuration {
        rules: (0..RULES)
            .map(|i| Rule {
                id: Some(format!("r{i}")),
                description: None,
                when: format!(".n == {i}"),
                action: if i % 3 == 0 {
                    Action::Drop
                } else {
                    Action::Queue(QUEUES[i % QUEUES.len()].into())
                },
            })
            .collect(),
        default_action: None,
        params: Default::default(),
    }
}

/// Delivery `i`'s live label and the candidate's decision (deterministic, every pair).
fn decided(i: usize) -> (Label<'static>, Option<Routed>) {
    let live = Label::queue(QUEUES[i % QUEUES.len()]).into_owned();
    if i.is_multiple_of(97) {
        return (live, None);
    }
    let rule = (i / 7) % RULES;
    let label = match rule % 5 {
        0 => Label::Drop,
        1 => Label::Fault,
        2 => Label::Quarantine,
        _ => Label::queue(QUEUES[(i / 3) % QUEUES.len()]).into_owned(),
    };
    (
        live,
        Some(Routed {
            label,
            rule_id: Some(format!("r{rule}")),
        }),
    )
}

async fn fill(store: &Store, trial: &str, from: usize, to: usize) {
    let mut i = from;
    while i < to {
        let mut batch = TrialBatch::default();
        for j in i..(i + BATCH).min(to) {
            let (live, after) = decided(j);
            batch.record(&format!("ev_{j:032}"), &live, after.as_ref());
        }
        store.record_trial(trial, &batch).await.expect("recorded");
        i += BATCH;
    }
}

async fn time_reports(
    store: &Store,
    scope: &OwnerScope,
    trial: &str,
    reads: usize,
) -> (Duration, Duration) {
    let ids: Vec<String> = candidate()
        .rules
        .iter()
        .filter_map(|r| r.id.clone())
        .collect();
    let mut took = Vec::with_capacity(reads);
    for _ in 0..reads {
        let started = Instant::now();
        let t = store.get_trial(scope, trial).await.expect("trial");
        let report = TrialReport::build(
            &TrialFacts {
                trial_id: &t.id,
                webhook_id: &t.webhook_id,
                plan_id: &t.plan_id,
                started_at_ms: t.started_at,
                started_by: &t.started_by,
                ended_at_ms: t.ended_at,
                end: t.end,
                limits: t.limits,
                candidate_digest: &t.candidate_digest,
                base_config_digest: &t.base_config_digest,
                forecast: &t.forecast,
                observed: &t.observed,
                examples: &t.examples,
                candidate_rule_ids: &ids,
                from_pack: &|_| None,
                fail_closed: true,
            },
            store.clock().now_ms(),
            DEFAULT_MIN_DELIVERIES,
        );
        took.push(started.elapsed());
        std::hint::black_box(report);
    }
    took.sort();
    (took[took.len() / 2], took[took.len() - 1])
}

async fn bench(name: &str, database: TestDatabase, deliveries: usize, reads: usize) {
    let key = SealingKey::generate().expect("a key");
    let store = Store::connect(database.url(), &key).await.expect("store");
    store.create_human("bench", None).await.expect("human");
    let scope = OwnerScope::human("bench");
    let webhook = store
        .create_webhook(NewWebhook {
            owner_scope: scope.clone(),
            source_type: SourceType::Github,
            secret: None,
            grant: QUEUES.iter().map(|q| q.to_string()).collect(),
            reject_unverified: false,
            name: None,
            configuration: None,
            actor: switchboard_control::store::Actor::operator(),
        })
        .await
        .expect("webhook");
    let trial = store
        .start_trial(
            NewTrial {
                webhook_id: webhook.id.clone(),
                owner_scope: scope.clone(),
                plan_id: "pl_bench".into(),
                candidate: candidate(),
                base_config_digest: webhook.config_digest.clone(),
                forecast: Forecast::default(),
                limits: Default::default(),
                started_by: "bench".into(),
                plan: Default::default(),
            },
            1,
        )
        .await
        .expect("trial")
        .id;
    let small = 1_000.min(deliveries);
    let started = Instant::now();
    fill(&store, &trial, 0, small).await;
    let (small_median, small_max) = time_reports(&store, &scope, &trial, reads).await;
    fill(&store, &trial, small, deliveries).await;
    let filled = started.elapsed();
    let (median, max) = time_reports(&store, &scope, &trial, reads).await;
    let t = store.get_trial(&scope, &trial).await.expect("trial");
    let pairs = t.observed.transitions.len() + t.observed.unchanged.len();
    let examples: usize = t.examples.values().map(Vec::len).sum();
    println!(
        "{name}: {} deliveries recorded in {:.1} s ({} evaluated); report after 1,000: median {:.2} ms, max {:.2} ms; after {}: median {:.2} ms, max {:.2} ms ({reads} reads); stored: 1 trial row, {pairs} transition rows ({examples} example ids), {} rule rows",
        t.observed.seen,
        filled.as_secs_f64(),
        t.observed.evaluated,
        small_median.as_secs_f64() * 1e3,
        small_max.as_secs_f64() * 1e3,
        t.observed.seen,
        median.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        t.observed.rules.len(),
    );
    store.close().await;
    database.remove().await;
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("trial_report: bench");
        return;
    }
    let deliveries = env_usize("TRIAL_BENCH_DELIVERIES", 100_000);
    let reads = env_usize("TRIAL_BENCH_READS", 50);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        bench("sqlite", TestDatabase::sqlite(), deliveries, reads).await;
        if let Ok(base) = std::env::var("SWITCHBOARD_TEST_DATABASE_URL") {
            bench(
                "postgres",
                TestDatabase::postgres_in(&base, "trialbench").await,
                deliveries,
                reads,
            )
            .await;
        }
    });
}
