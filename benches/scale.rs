//! Cost at scale (issue 50; results in docs/benchmarks.md, "Cost at scale"): what a user
//! waits on, on a database holding `SCALE_BENCH_EVENTS` deliveries (default 1,000,000) across
//! `SCALE_BENCH_WEBHOOKS` webhooks (default 10,000) in `SCALE_BENCH_SCOPES` owner scopes
//! (default 1,000), against the same operation on a database holding only the webhook being
//! read, in the same run.
//!
//! Both databases hold one "hot" webhook with 6,000 deliveries (so its 100th page of 50
//! exists); the big one adds the bulk. Deliveries are the vendored real payloads (kinds and
//! bodies), spread over 30 days on a manual clock, decided a third each to a queue (with its
//! todo), a drop and a quarantine, and stored through the store's own batched write
//! (`store_event`, group commit: multi-row inserts, the triggers that keep each webhook's
//! count), by 32 writers at once. Then, as the median of `SCALE_BENCH_READS` (default 21):
//! the hot webhook's first events page and its 100th (by cursor), one event (what explain
//! reads), a replay's load (the newest 1,000 deliveries, what a plan over 1,000 replays), its
//! queue's first todos page, the retention count pass; once: opening the store (control's
//! start-up reads), a retention pass deleting the oldest 1 % of all events, and disk per
//! stored delivery.
//!
//! Not here yet (issue 50 item 1): ingest throughput and p99 through the real binary at 8
//! and 32 senders (`benches/ingest.rs` measures them on an empty database), a plan through a
//! router (its store read is the replay's load above), and control's RSS.
//!
//! Run: `cargo bench --bench scale` (SQLite; PostgreSQL too when
//! `SWITCHBOARD_TEST_DATABASE_URL` is set). Nothing here asserts on time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_control::store::{
    Clock, LOAD_BYTES, NewEvent, NewTodo, NewWebhook, Page, RecordDecision, SourceType, Store,
    TodoFilter,
};
use switchboard_control::{OwnerScope, SealingKey};
use switchboard_model::{Label, RecordedDecision};
use switchboard_testkit::database::TestDatabase;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// The hot webhook's deliveries: its 100th page of 50 exists.
const HOT_EVENTS: usize = 6_000;
const WRITERS: usize = 32;
/// When the bench's clock starts: the oldest delivery is received here.
const START_MS: i64 = 1_800_000_000_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// The vendored payloads: (kind, body).
fn payloads() -> Vec<(String, bytes::Bytes)> {
    let dir = switchboard_testkit::payloads_dir::webhooks_dir().join("github");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the vendored payloads")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let kind = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("push")
                .split('.')
                .take(2)
                .collect::<Vec<_>>()
                .join(".");
            let body = std::fs::read(p).expect("a payload");
            (kind, bytes::Bytes::from(body))
        })
        .collect()
}

fn decision(i: usize) -> RecordDecision {
    let (decision, todo) = match i % 3 {
        0 => (
            RecordedDecision::to_queue("forge"),
            Some(NewTodo {
                queue: "forge".into(),
                rule_id: Some("r-forge".into()),
            }),
        ),
        1 => (RecordedDecision::new(Label::Drop), None),
        _ => (RecordedDecision::new(Label::Quarantine), None),
    };
    RecordDecision {
        decision,
        fault: None,
        todo,
        decided_by: None,
    }
}

fn new_webhook(scope: &OwnerScope) -> NewWebhook {
    NewWebhook {
        owner_scope: scope.clone(),
        source_type: SourceType::Github,
        secret: None,
        grant: vec!["forge".into(), "review".into()],
        reject_unverified: false,
        name: None,
        configuration: None,
        actor: switchboard_control::store::Actor::operator(),
    }
}

/// Stores `count` deliveries for `webhooks` (round robin), each received `step` after the
/// one before, by [`WRITERS`] writers at once.
async fn fill(
    store: &Store,
    (clock, step): (&Clock, Duration),
    webhooks: Arc<Vec<String>>,
    count: usize,
    tag: &str,
    payloads: Arc<Vec<(String, bytes::Bytes)>>,
) {
    let writers = (0..WRITERS).map(|w| {
        let (store, clock, webhooks, payloads, tag) = (
            store.clone(),
            clock.clone(),
            webhooks.clone(),
            payloads.clone(),
            tag.to_string(),
        );
        tokio::spawn(async move {
            for i in (w..count).step_by(WRITERS) {
                let (kind, body) = &payloads[i % payloads.len()];
                let draft = store
                    .draft_event(NewEvent {
                        webhook_id: webhooks[i % webhooks.len()].clone(),
                        delivery_id: format!("{tag}-{i}"),
                        kind: kind.clone(),
                        headers: vec![],
                        body: body.clone(),
                        verified: true,
                    })
                    .expect("a draft");
                clock.advance(step);
                store
                    .store_event(draft, Some(decision(i)))
                    .await
                    .expect("stored");
            }
        })
    });
    for writer in futures::future::join_all(writers).await {
        writer.expect("a writer");
    }
}

/// The median of `reads` runs of `op`.
async fn median<F, Fut, T>(reads: usize, mut op: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut took = Vec::with_capacity(reads);
    for _ in 0..reads {
        let started = Instant::now();
        std::hint::black_box(op().await);
        took.push(started.elapsed());
    }
    took.sort();
    took[took.len() / 2]
}

/// What was measured on one database.
#[derive(Default)]
struct Figures {
    events: u64,
    rows: Vec<(&'static str, Duration)>,
    bytes_per_event: Option<f64>,
}

async fn stored_bytes(store: &Store, database: &TestDatabase) -> Option<u64> {
    match database.backend() {
        switchboard_testkit::database::Backend::Sqlite => {
            let path = database.url().strip_prefix("sqlite://")?;
            let path = path.split('?').next()?;
            let size = |p: String| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            Some(size(path.to_string()) + size(format!("{path}-wal")))
        }
        switchboard_testkit::database::Backend::Postgres => {
            let n: i64 = sqlx::query_scalar(
                "SELECT (pg_total_relation_size('events') + pg_total_relation_size('todos'))::BIGINT",
            )
            .fetch_one(store.pool())
            .await
            .ok()?;
            u64::try_from(n).ok()
        }
    }
}

async fn measure(
    database: &TestDatabase,
    key: &SealingKey,
    store: &Store,
    hot: (&OwnerScope, &str),
    reads: usize,
) -> Figures {
    let (scope, hot) = hot;
    let events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(store.pool())
        .await
        .expect("count");
    let mut f = Figures {
        events: u64::try_from(events).unwrap_or(0),
        ..Figures::default()
    };
    // The 100th page's cursor, walked to once.
    let mut page = Page::first(50);
    for _ in 0..99 {
        let p = store.list_events(scope, hot, &page).await.expect("a page");
        page = Page::after(p.next_cursor.expect("a next page"), 50);
    }
    let middle = store
        .list_events(scope, hot, &page)
        .await
        .expect("page 100")
        .items[0]
        .id
        .clone();
    let first = Page::first(50);
    f.rows.push((
        "events, first page",
        median(reads, || store.list_events(scope, hot, &first)).await,
    ));
    f.rows.push((
        "events, 100th page",
        median(reads, || store.list_events(scope, hot, &page)).await,
    ));
    f.rows.push((
        "one event (explain's read)",
        median(reads, || store.get_event(scope, &middle)).await,
    ));
    f.rows.push((
        "a replay's load (newest 1,000)",
        median(reads, || {
            store.recent_events_within(scope, hot, 1000, None, LOAD_BYTES)
        })
        .await,
    ));
    f.rows.push((
        "todos, first page",
        median(reads, || {
            store.list_todos(scope, "forge", TodoFilter::Open, &first)
        })
        .await,
    ));
    f.rows.push((
        "retention count pass",
        median(reads, || store.webhooks_over_event_count(100_000)).await,
    ));
    let started = Instant::now();
    let again = Store::connect(database.url(), key)
        .await
        .expect("open again");
    f.rows
        .push(("opening the store (start-up)", started.elapsed()));
    again.close().await;
    if let Some(bytes) = stored_bytes(store, database).await {
        f.bytes_per_event = Some(bytes as f64 / events.max(1) as f64);
    }
    // The oldest 1 % of everything, by age, in the retention pass's batches.
    let cutoff: i64 =
        sqlx::query_scalar("SELECT received_at FROM events ORDER BY received_at LIMIT 1 OFFSET $1")
            .bind(events / 100)
            .fetch_one(store.pool())
            .await
            .expect("the 1 % cutoff");
    let started = Instant::now();
    let mut deleted = 0u64;
    loop {
        let n = store
            .purge_events_received_before(cutoff, 1000)
            .await
            .expect("a batch");
        if n == 0 {
            break;
        }
        deleted += n;
    }
    let took = started.elapsed();
    f.rows.push(("retention: the oldest 1 % deleted", took));
    println!(
        "  deleted {deleted} events in {:.1} ms ({:.1} µs each)",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / deleted.max(1) as f64
    );
    f
}

async fn one_database(
    database: TestDatabase,
    bulk: usize,
    webhooks: usize,
    scopes: usize,
    reads: usize,
    payloads: Arc<Vec<(String, bytes::Bytes)>>,
) -> Figures {
    let key = SealingKey::generate().expect("a key");
    let clock = Clock::manual(START_MS);
    let store = Store::connect(database.url(), &key)
        .await
        .expect("store")
        .with_clock(clock.clone());
    store.create_human("hot", None).await.expect("human");
    let scope = OwnerScope::human("hot");
    let hot = store
        .create_webhook(new_webhook(&scope))
        .await
        .expect("the hot webhook");
    let started = Instant::now();
    // 30 days from the oldest delivery to the newest, the bulk and the hot webhook's
    // deliveries interleaved in time.
    let total = u64::try_from(bulk + HOT_EVENTS).unwrap_or(u64::MAX).max(1);
    let step = Duration::from_millis((30 * DAY_MS as u64 / total).max(1));
    let timed = (&clock, step);
    if bulk > 0 {
        let mut ids = Vec::with_capacity(webhooks);
        for s in 0..scopes {
            store
                .create_human(&format!("u{s}"), None)
                .await
                .expect("a human");
        }
        for w in 0..webhooks {
            let scope = OwnerScope::human(format!("u{}", w % scopes));
            ids.push(
                store
                    .create_webhook(new_webhook(&scope))
                    .await
                    .expect("a webhook")
                    .id,
            );
        }
        let ids = Arc::new(ids);
        let chunk = bulk / 10;
        for part in 0..10 {
            let count = if part == 9 { bulk - chunk * 9 } else { chunk };
            fill(
                &store,
                timed,
                ids.clone(),
                count,
                &format!("bulk{part}"),
                payloads.clone(),
            )
            .await;
            fill(
                &store,
                timed,
                Arc::new(vec![hot.id.clone()]),
                HOT_EVENTS / 10,
                &format!("hot{part}"),
                payloads.clone(),
            )
            .await;
        }
    } else {
        fill(
            &store,
            timed,
            Arc::new(vec![hot.id.clone()]),
            HOT_EVENTS,
            "hot",
            payloads.clone(),
        )
        .await;
    }
    println!(
        "  filled in {:.1} s ({} webhooks, {} scopes)",
        started.elapsed().as_secs_f64(),
        if bulk > 0 { webhooks + 1 } else { 1 },
        if bulk > 0 { scopes + 1 } else { 1 }
    );
    let figures = measure(&database, &key, &store, (&scope, &hot.id), reads).await;
    store.close().await;
    database.remove().await;
    figures
}

fn report(name: &str, empty: &Figures, big: &Figures) {
    println!(
        "\n{name}: {} events against {} (median of the reads; ratio big / empty)",
        big.events, empty.events
    );
    println!("| operation | empty | big | ratio |");
    println!("| --- | ---: | ---: | ---: |");
    for ((op, a), (_, b)) in empty.rows.iter().zip(&big.rows) {
        println!(
            "| {op} | {:.2} ms | {:.2} ms | {:.2}× |",
            a.as_secs_f64() * 1e3,
            b.as_secs_f64() * 1e3,
            b.as_secs_f64() / a.as_secs_f64().max(1e-9)
        );
    }
    if let (Some(a), Some(b)) = (empty.bytes_per_event, big.bytes_per_event) {
        println!(
            "| bytes per stored delivery (events and todos, indexes included) | {a:.0} | {b:.0} | |"
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("scale: bench");
        return;
    }
    let bulk = env_usize("SCALE_BENCH_EVENTS", 1_000_000);
    let webhooks = env_usize("SCALE_BENCH_WEBHOOKS", 10_000);
    let scopes = env_usize("SCALE_BENCH_SCOPES", 1_000);
    let reads = env_usize("SCALE_BENCH_READS", 21);
    let payloads = Arc::new(payloads());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let compare = |name: &'static str, base: Option<String>| {
        let payloads = payloads.clone();
        async move {
            let make = || async {
                match &base {
                    None => TestDatabase::sqlite(),
                    Some(base) => TestDatabase::postgres_in(base, "scalebench").await,
                }
            };
            println!("{name}, empty:");
            let empty = one_database(make().await, 0, 0, 0, reads, payloads.clone()).await;
            println!("{name}, {bulk} events:");
            let big = one_database(make().await, bulk, webhooks, scopes, reads, payloads).await;
            report(name, &empty, &big);
        }
    };
    rt.block_on(async {
        compare("sqlite", None).await;
        if let Ok(base) = std::env::var("SWITCHBOARD_TEST_DATABASE_URL") {
            compare("postgres", Some(base)).await;
        }
    });
}
