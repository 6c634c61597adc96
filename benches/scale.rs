//! Cost at scale (issue 50; results in docs/benchmarks.md, "Cost at scale"): what a user
//! waits on, on a database holding `SCALE_BENCH_EVENTS` deliveries (default 1,000,000) across
//! `SCALE_BENCH_WEBHOOKS` webhooks (default 10,000) in `SCALE_BENCH_SCOPES` owner scopes
//! (default 1,000), against the same operation on a database holding the same webhooks but
//! only the deliveries of the one being read, in the same run.
//!
//! Both databases hold every webhook, and one "hot" webhook with 6,000 deliveries (so its 100th
//! page of 50 exists); the big one adds the bulk's deliveries. Every webhook has the same three
//! hand-written rules and a signing secret. Deliveries are the vendored real payloads (kinds
//! and bodies), spread over 30 days on a manual clock, decided a third each to a queue (with
//! its todo), a drop and a quarantine under the rules' version 1, and stored through the
//! store's own batched write (`store_event`, group commit: multi-row inserts, the triggers that
//! keep each webhook's count), by 32 writers at once.
//!
//! Store level, as the median of `SCALE_BENCH_READS` (default 21): the hot webhook's first
//! events page and its 100th (by cursor), one event (what explain reads), a replay's load (the
//! newest 1,000 deliveries), its queue's first todos page, the retention count pass; once:
//! opening the store, a retention pass deleting the oldest 1 % of all events, and disk per
//! stored delivery.
//!
//! Through control: the store closed, a real `switchboard control` process is started on the
//! database (the bench's binary, routing through one `switchboard router` process started
//! once), as an operator runs it: its logs at info (discarded), with the ingest rate limit and
//! the endpoint request budget raised so that neither refuses the bench, and the retention
//! task's interval at an hour so that no pass lands among the timings. Then:
//! - **start-up**: from spawning control to its first answered gRPC call (`WhoAmI`), the
//!   median of `SCALE_BENCH_STARTS` (default 3) starts;
//! - the gRPC reads a user waits on, over control's gRPC listener with an endpoint's
//!   credential, as the median of `SCALE_BENCH_READS`: `ListWebhookEvents` first page and
//!   100th (by cursor), `ExplainWebhookEvent` of an event on the 100th page (its recorded
//!   version's rules evaluated again on the router), `ListTodos` first page, `ListRulePacks`
//!   of the hot webhook (drop-ci-noise@1 installed there by plan and confirm beforehand, with a
//!   guard of one delivery or 1 ms so no guard runs during ingest; the listing reports its
//!   drift and upgrade);
//! - **a plan**: `InstallRulePack` drop-ci-noise@2.0.0 (an upgrade) replaying the hot webhook's
//!   newest 1,000 deliveries through the router, median of `SCALE_BENCH_PLANS` (default 5),
//!   each by an endpoint of its own (a replay limit is per endpoint);
//! - **control's RSS** after those reads and plans: `VmRSS` of the control process itself
//!   (`/proc/<pid>/status`; it is a child process, so the bench's own memory is not in it),
//!   and its peak (`VmHWM`) after ingest;
//! - **ingest**: `SCALE_BENCH_DELIVERIES` (default 2,000) signed deliveries per sender count in
//!   `SCALE_BENCH_SENDERS` (default `8,32`), after 64 untimed, POSTed to control's HTTP ingest
//!   over keep-alive connections, one per sender: deliveries/s and p99. Every other delivery
//!   goes to the hot webhook and the rest spread over the bulk's webhooks, in the same order on
//!   both databases, so the writes land among the bulk (while the bulk has more webhooks than
//!   the run sends it deliveries, each goes to a webhook control has had no delivery for since
//!   it started); the two halves' latencies are printed apart. Answers that are not a decision
//!   in time (`pending`, `unrouted`) or not a 202 are counted and printed, not hidden.
//!
//! - **the trial and guard reports**: a trial of the last plan's candidate runs on the hot
//!   webhook through ingest; afterwards `GetRuleTrial`, `ListRuleTrials` (first page) and
//!   `GetRuleGuard` (drop-ci-noise@1's confirm's guard), each the median of
//!   `SCALE_BENCH_READS`.
//!
//! Run: `cargo bench --bench scale` (SQLite; PostgreSQL too when
//! `SWITCHBOARD_TEST_DATABASE_URL` is set; `SCALE_BENCH_LOG=1` shows control's log). Nothing
//! here asserts on time.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_control::ingest::signature::sign;
use switchboard_control::store::{
    Clock, DecidedBy, LOAD_BYTES, NewEndpoint, NewEvent, NewTodo, NewWebhook, Page, RecordDecision,
    SourceType, Store, TodoFilter,
};
use switchboard_control::{OwnerScope, SealingKey};
use switchboard_model::{Label, RecordedDecision};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::identity_client::IdentityClient;
use switchboard_proto::control::v1::rule_packs_client::RulePacksClient;
use switchboard_proto::control::v1::rule_trials_client::RuleTrialsClient;
use switchboard_proto::control::v1::todos_client::TodosClient;
use switchboard_proto::control::v1::webhooks_client::WebhooksClient;
use switchboard_testkit::database::TestDatabase;
use switchboard_testkit::forge_headers::forge_headers;
use switchboard_testkit::procfs::status_kib;
use switchboard_testkit::router_process::RouterProcess;
use tonic::transport::Channel;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// The hot webhook's deliveries: its 100th page of 50 exists.
const HOT_EVENTS: usize = 6_000;
const WRITERS: usize = 32;
/// When the bench's clock starts: the oldest delivery is received here.
const START_MS: i64 = 1_800_000_000_000;
/// Every webhook's signing secret: one, so each payload is signed once.
const SECRET: &str = "scale-bench-secret-0123456789abcdef";
/// What a plan replays: the hot webhook's newest deliveries.
const REPLAYED: u32 = 1_000;
/// Untimed deliveries before each timed ingest run (caches, connections, the router's).
const WARMUP: usize = 64;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// One vendored GitHub payload.
struct Payload {
    /// `<event>` or `<event>.<action>`, as stored.
    kind: String,
    /// `X-GitHub-Event`.
    event: String,
    body: bytes::Bytes,
    /// HMAC-SHA256 of the body with [`SECRET`].
    digest: String,
}

fn payloads() -> Vec<Payload> {
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
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("push");
            let kind = stem.split('.').take(2).collect::<Vec<_>>().join(".");
            let event = stem.split('.').next().unwrap_or("push").to_string();
            let body = std::fs::read(p).expect("a payload");
            Payload {
                kind,
                event,
                digest: sign(SECRET, &body),
                body: bytes::Bytes::from(body),
            }
        })
        .collect()
}

/// Every webhook's rules: what ingest's router decides, and what explain evaluates again.
fn rules() -> switchboard_model::Configuration {
    serde_json::from_value(json!({"rules": [
        {"id": "hand-bots", "when": r#"(.payload.sender.login // "") | test("\\[bot\\]$")"#,
         "action": {"drop": true}},
        {"id": "hand-pulls", "when": r#".event | startswith("pull_request")"#,
         "action": {"queue": "review"}},
        {"id": "hand-issues", "when": r#".event == "issues" or .event == "issue_comment""#,
         "action": {"queue": "forge"}},
    ]}))
    .expect("the bench's rules")
}

fn decision(i: usize, decided_by: &DecidedBy) -> RecordDecision {
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
        decided_by: Some(decided_by.clone()),
    }
}

fn new_webhook(scope: &OwnerScope) -> NewWebhook {
    NewWebhook {
        owner_scope: scope.clone(),
        source_type: SourceType::Github,
        secret: Some(SECRET.into()),
        grant: vec!["forge".into(), "review".into()],
        reject_unverified: false,
        name: None,
        configuration: Some(rules()),
        actor: switchboard_control::store::Actor::operator(),
    }
}

/// Stores `count` deliveries for `webhooks` (round robin), each received `step` after the
/// one before, by [`WRITERS`] writers at once, decided under `decided_by`.
async fn fill(
    store: &Store,
    (clock, step): (&Clock, Duration),
    webhooks: Arc<Vec<String>>,
    (count, tag): (usize, &str),
    payloads: Arc<Vec<Payload>>,
    decided_by: &DecidedBy,
) {
    let writers = (0..WRITERS).map(|w| {
        let (store, clock, webhooks, payloads, tag, decided_by) = (
            store.clone(),
            clock.clone(),
            webhooks.clone(),
            payloads.clone(),
            tag.to_string(),
            decided_by.clone(),
        );
        tokio::spawn(async move {
            for i in (w..count).step_by(WRITERS) {
                let p = &payloads[i % payloads.len()];
                let draft = store
                    .draft_event(NewEvent {
                        webhook_id: webhooks[i % webhooks.len()].clone(),
                        delivery_id: format!("{tag}-{i}"),
                        kind: p.kind.clone(),
                        headers: vec![],
                        body: p.body.clone(),
                        verified: true,
                    })
                    .expect("a draft");
                clock.advance(step);
                store
                    .store_event(draft, Some(decision(i, &decided_by)))
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
async fn median<F, Fut, T>(reads: usize, op: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    median_and_last(reads, op).await.0
}

/// The median of `reads` runs of `op`, and what the last one answered.
async fn median_and_last<F, Fut, T>(reads: usize, mut op: F) -> (Duration, T)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut took = Vec::with_capacity(reads);
    let mut last = None;
    for _ in 0..reads.max(1) {
        let started = Instant::now();
        last = Some(std::hint::black_box(op().await));
        took.push(started.elapsed());
    }
    took.sort();
    (took[took.len() / 2], last.expect("one run at least"))
}

/// One measured figure.
enum Figure {
    Time(Duration),
    PerSecond(f64),
    MiB(f64),
}

impl Figure {
    fn value(&self) -> f64 {
        match self {
            Figure::Time(d) => d.as_secs_f64(),
            Figure::PerSecond(x) | Figure::MiB(x) => *x,
        }
    }

    fn show(&self) -> String {
        match self {
            Figure::Time(d) => format!("{:.2} ms", d.as_secs_f64() * 1e3),
            Figure::PerSecond(x) => format!("{x:.0}/s"),
            Figure::MiB(x) => format!("{x:.1} MiB"),
        }
    }
}

/// What was measured on one database.
#[derive(Default)]
struct Figures {
    events: u64,
    rows: Vec<(String, Figure)>,
    bytes_per_event: Option<f64>,
}

impl Figures {
    fn push(&mut self, name: impl Into<String>, figure: Figure) {
        self.rows.push((name.into(), figure));
    }
}

async fn stored_bytes(store: &Store, database: &TestDatabase) -> Option<u64> {
    match database.backend() {
        switchboard_testkit::database::Backend::Sqlite => {
            // The write-ahead log folded into the file first: its size is what was written
            // since the last checkpoint, not what is stored.
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(store.pool())
                .await
                .ok()?;
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

/// The store-level rows.
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
    let took = median(reads, || store.list_events(scope, hot, &first)).await;
    f.push("events, first page", Figure::Time(took));
    let took = median(reads, || store.list_events(scope, hot, &page)).await;
    f.push("events, 100th page", Figure::Time(took));
    let took = median(reads, || store.get_event(scope, &middle)).await;
    f.push("one event (explain's read)", Figure::Time(took));
    let took = median(reads, || {
        store.recent_events_within(scope, hot, REPLAYED, None, LOAD_BYTES)
    })
    .await;
    f.push("a replay's load (newest 1,000)", Figure::Time(took));
    let took = median(reads, || {
        store.list_todos(scope, "forge", TodoFilter::Open, &first)
    })
    .await;
    f.push("todos, first page", Figure::Time(took));
    let took = median(reads, || store.webhooks_over_event_count(100_000)).await;
    f.push("retention count pass", Figure::Time(took));
    let started = Instant::now();
    let again = Store::connect(database.url(), key)
        .await
        .expect("open again");
    f.push("opening the store", Figure::Time(started.elapsed()));
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
    f.push("retention: the oldest 1 % deleted", Figure::Time(took));
    println!(
        "  deleted {deleted} events in {:.1} ms ({:.1} µs each)",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / deleted.max(1) as f64
    );
    f
}

// ---------------------------------------------------------------------------------------------
// Control, as `switchboard control` runs.

/// A `switchboard control` process; killed when dropped.
struct Control {
    child: Child,
    http: SocketAddr,
    grpc: String,
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `switchboard control` on `url` and waits for the two lines naming its listeners.
fn spawn_control(url: &str, key_hex: &str, router: &str) -> Control {
    let log = std::env::var("SCALE_BENCH_LOG").is_ok_and(|v| v == "1");
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["control", "--database-url", url, "--routers", router])
        .args([
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        // Neither limit may refuse the bench; no retention pass among the timings.
        .args(["--ingest-per-minute", "1000000000"])
        .args(["--requests-per-endpoint-per-minute", "1000000000"])
        .args(["--retention-interval-ms", "3600000"])
        .env("SWITCHBOARD_SECRET_KEY", key_hex)
        .env("SWITCHBOARD_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if log { Stdio::inherit() } else { Stdio::null() })
        .spawn()
        .expect("control starts");
    let stdout = child.stdout.take().expect("control's stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (mut http, mut grpc) = (None, None);
    while http.is_none() || grpc.is_none() {
        let line = lines
            .next()
            .expect("control printed its listeners before it stopped (SCALE_BENCH_LOG=1 shows why)")
            .expect("a line of control's");
        if let Some(addr) = line.strip_prefix("ingest listening on http://") {
            http = Some(addr.trim().parse().expect("an address"));
        } else if let Some(addr) = line.strip_prefix("control grpc listening on ") {
            grpc = Some(addr.trim().to_string());
        }
    }
    // Read to the end, so control never waits on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Control {
        child,
        http: http.expect("ingest's address"),
        grpc: grpc.expect("the gRPC address"),
    }
}

/// `message` with the endpoint's credential, as every gRPC call carries it.
fn call<T>(message: T, credential: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let value = format!("Bearer {credential}").parse().expect("ASCII");
    request.metadata_mut().insert("authorization", value);
    request
}

/// A plan of drop-ci-noise@`version` over the hot webhook's newest [`REPLAYED`] deliveries,
/// its guard (if confirmed) over after one delivery or 1 ms.
async fn plan(
    packs: &mut RulePacksClient<Channel>,
    credential: &str,
    webhook_id: &str,
    version: &str,
) -> pb::Plan {
    let request = pb::InstallRulePackRequest {
        webhook_id: webhook_id.to_string(),
        name: "drop-ci-noise".into(),
        version: version.into(),
        replay: Some(pb::ReplayWindow {
            limit: REPLAYED,
            ..Default::default()
        }),
        guard: Some(pb::GuardOptions {
            max_deliveries: Some(1),
            max_duration_ms: Some(1),
            on_breach: pb::OnBreach::Alert as i32,
        }),
        ..Default::default()
    };
    let mut stream = packs
        .install_rule_pack(call(request, credential))
        .await
        .expect("a plan")
        .into_inner();
    let mut last = None;
    while let Some(event) = stream.message().await.expect("the plan's stream") {
        last = event.event;
    }
    match last {
        Some(pb::rule_pack_event::Event::Plan(plan)) => plan,
        other => panic!("expected a plan, got {other:?}"),
    }
}

/// What the control rows need of one database.
struct Hot {
    id: String,
    /// The bulk's webhooks (none in the empty database).
    bulk: Arc<Vec<String>>,
    /// One per plan and one for the rest: a replay limit is per endpoint.
    credentials: Vec<String>,
}

/// Starts control on `database` and waits for its first answered gRPC call (`WhoAmI`):
/// control, a channel to it, and how long that took from the spawn.
async fn start_control(
    database: &TestDatabase,
    key_hex: &str,
    setup: &Setup,
    credential: &str,
) -> (Control, Channel, Duration) {
    let started = Instant::now();
    let (url, key, router) = (
        database.url().to_string(),
        key_hex.to_string(),
        setup.router.clone(),
    );
    let control = tokio::task::spawn_blocking(move || spawn_control(&url, &key, &router))
        .await
        .expect("control's listeners");
    let channel = Channel::from_shared(format!("http://{}", control.grpc))
        .expect("a URL")
        .connect()
        .await
        .expect("connect to control");
    let mut identity = IdentityClient::new(channel.clone());
    loop {
        match identity
            .who_am_i(call(pb::WhoAmIRequest::default(), credential))
            .await
        {
            Ok(_) => return (control, channel, started.elapsed()),
            Err(_) if started.elapsed() < Duration::from_secs(120) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("control never answered: {e}"),
        }
    }
}

/// The rows measured through a `switchboard control` process on `database`.
async fn through_control(
    database: &TestDatabase,
    key_hex: &str,
    hot: &Hot,
    setup: &Setup,
    f: &mut Figures,
) {
    let credential = hot.credentials[0].as_str();
    // The median of a few starts (the first also pages the binary in); the last stays up.
    let mut starts = Vec::new();
    let (control, channel) = loop {
        let (control, channel, took) = start_control(database, key_hex, setup, credential).await;
        starts.push(took);
        if starts.len() >= setup.starts {
            break (control, channel);
        }
    };
    starts.sort();
    f.push(
        format!(
            "control start-up, spawn to first answered call (median of {})",
            starts.len()
        ),
        Figure::Time(starts[starts.len() / 2]),
    );
    let mut packs = RulePacksClient::new(channel.clone());
    install_drop_ci_noise(&mut packs, credential, &hot.id).await;
    grpc_reads(&channel, credential, &hot.id, setup.reads, f).await;
    let mut took = Vec::new();
    let mut last = None;
    for credential in &hot.credentials[1..] {
        let started = Instant::now();
        let plan = plan(&mut packs, credential, &hot.id, "2.0.0").await;
        took.push(started.elapsed());
        let replayed = plan.report.as_ref().map_or(0, |r| r.events_replayed);
        assert_eq!(replayed, u64::from(REPLAYED), "the plan replays {REPLAYED}");
        last = Some((credential.as_str(), plan.plan_token));
    }
    took.sort();
    f.push(
        format!(
            "gRPC plan, drop-ci-noise@2 over the newest 1,000 (median of {})",
            took.len()
        ),
        Figure::Time(took[took.len() / 2]),
    );
    let mib = |field| status_kib(control.child.id(), field).unwrap_or(0) as f64 / 1024.0;
    f.push(
        "control RSS after the reads and plans",
        Figure::MiB(mib("VmRSS")),
    );
    // The last plan's candidate on trial beside the live rules through ingest: the trial
    // report read afterwards is over every hot delivery ingest sent.
    let (planner, token) = last.expect("at least one plan");
    let mut trials = RuleTrialsClient::new(channel.clone());
    let request = pb::StartRuleTrialRequest {
        webhook_id: hot.id.clone(),
        plan_token: token,
        ..Default::default()
    };
    let trial = trials
        .start_rule_trial(call(request, planner))
        .await
        .expect("a trial")
        .into_inner();
    ingest_rows(control.http, hot, setup, f).await;
    f.push(
        "control peak RSS (VmHWM, after ingest)",
        Figure::MiB(mib("VmHWM")),
    );
    reports(&channel, planner, &hot.id, &trial.trial_id, setup.reads, f).await;
}

/// The trial and guard reports on the hot webhook, each the median of `reads` calls: the
/// trial started before ingest, and the guard of drop-ci-noise@1's confirm.
async fn reports(
    channel: &Channel,
    credential: &str,
    hot: &str,
    trial_id: &str,
    reads: usize,
    f: &mut Figures,
) {
    let trials = RuleTrialsClient::new(channel.clone());
    let (took, trial) = median_and_last(reads, || {
        let request = pb::GetRuleTrialRequest {
            trial_id: trial_id.to_string(),
        };
        let mut c = trials.clone();
        async move {
            c.get_rule_trial(call(request, credential))
                .await
                .expect("the trial")
                .into_inner()
        }
    })
    .await;
    f.push("gRPC GetRuleTrial (after ingest)", Figure::Time(took));
    let took = median(reads, || {
        let request = pb::ListRuleTrialsRequest {
            webhook_id: hot.to_string(),
            limit: 50,
            ..Default::default()
        };
        let mut c = trials.clone();
        async move {
            c.list_rule_trials(call(request, credential))
                .await
                .expect("the trials")
        }
    })
    .await;
    f.push("gRPC ListRuleTrials, first page", Figure::Time(took));
    let (took, guard) = median_and_last(reads, || {
        let request = pb::GetRuleGuardRequest {
            webhook_id: hot.to_string(),
            ..Default::default()
        };
        let mut c = trials.clone();
        async move {
            c.get_rule_guard(call(request, credential))
                .await
                .expect("the guard")
                .into_inner()
        }
    })
    .await;
    f.push("gRPC GetRuleGuard", Figure::Time(took));
    let seen = |d: Option<&pb::TrialDeliveries>| d.map_or((0, 0), |d| (d.seen, d.evaluated));
    println!(
        "  trial: seen/evaluated {:?}; guard: seen/evaluated {:?}",
        seen(trial.deliveries.as_ref()),
        seen(guard.report.as_ref().and_then(|r| r.deliveries.as_ref()))
    );
}

/// drop-ci-noise@1 on the hot webhook by plan and confirm, for the listing to report on.
async fn install_drop_ci_noise(
    packs: &mut RulePacksClient<Channel>,
    credential: &str,
    webhook_id: &str,
) {
    let planned = plan(packs, credential, webhook_id, "1.0.0").await;
    let confirm = pb::ConfirmRulePackPlanRequest {
        webhook_id: webhook_id.to_string(),
        plan_token: planned.plan_token,
        allow_unproven: true,
        ..Default::default()
    };
    let applied = packs
        .confirm_rule_pack_plan(call(confirm, credential))
        .await
        .expect("the confirm")
        .into_inner();
    assert!(
        matches!(applied.event, Some(pb::rule_pack_event::Event::Applied(_))),
        "drop-ci-noise@1 applied: {applied:?}"
    );
}

/// The gRPC reads a user waits on, each the median of `reads` calls.
async fn grpc_reads(channel: &Channel, credential: &str, hot: &str, reads: usize, f: &mut Figures) {
    let webhooks = WebhooksClient::new(channel.clone());
    let page = |cursor: String| {
        let request = pb::ListWebhookEventsRequest {
            webhook_id: hot.to_string(),
            cursor,
            limit: 50,
        };
        let mut c = webhooks.clone();
        async move {
            c.list_webhook_events(call(request, credential))
                .await
                .expect("a page")
                .into_inner()
        }
    };
    let mut cursor = String::new();
    for _ in 0..99 {
        cursor = page(cursor).await.next_cursor;
    }
    let middle = page(cursor.clone()).await.events[0].id.clone();
    let took = median(reads, || page(String::new())).await;
    f.push("gRPC ListWebhookEvents, first page", Figure::Time(took));
    let took = median(reads, || page(cursor.clone())).await;
    f.push("gRPC ListWebhookEvents, 100th page", Figure::Time(took));
    let (took, explained) = median_and_last(reads, || {
        let request = pb::ExplainWebhookEventRequest {
            event_id: middle.clone(),
        };
        let mut c = webhooks.clone();
        async move {
            c.explain_webhook_event(call(request, credential))
                .await
                .expect("explain")
                .into_inner()
        }
    })
    .await;
    f.push("gRPC ExplainWebhookEvent", Figure::Time(took));
    let took = median(reads, || {
        let request = pb::ListTodosRequest {
            queue: "forge".into(),
            filter: pb::TodoFilter::Open as i32,
            cursor: String::new(),
            limit: 50,
        };
        let mut c = TodosClient::new(channel.clone());
        async move {
            c.list_todos(call(request, credential))
                .await
                .expect("todos")
        }
    })
    .await;
    f.push("gRPC ListTodos, first page", Figure::Time(took));
    let (took, listing) = median_and_last(reads, || {
        let request = pb::ListRulePacksRequest {
            webhook_id: hot.to_string(),
        };
        let mut c = RulePacksClient::new(channel.clone());
        async move {
            c.list_rule_packs(call(request, credential))
                .await
                .expect("the listing")
                .into_inner()
        }
    })
    .await;
    f.push("gRPC ListRulePacks (installed, drift)", Figure::Time(took));
    // What the explain and the listing did, said once.
    let installed: Vec<String> = listing
        .listing
        .iter()
        .flat_map(|l| &l.packs)
        .filter_map(|p| {
            let i = p.installed.as_ref()?;
            let drift = i.drift.as_ref().map_or("?", |d| d.state.as_str());
            Some(format!("{}@{} (drift {drift})", p.name, i.version))
        })
        .collect();
    println!(
        "  explain: recorded version {:?}, {} rules evaluated again; installed: {installed:?}",
        explained.recorded_version_status(),
        explained.rules.len()
    );
}

/// Ingest at each sender count: deliveries/s and p99.
async fn ingest_rows(http: SocketAddr, hot: &Hot, setup: &Setup, f: &mut Figures) {
    let p = |sorted: &[Duration]| {
        let (p50, p99) = (percentile(sorted, 0.5), percentile(sorted, 0.99));
        format!("p50 {:.1} ms, p99 {:.1} ms", ms(p50), ms(p99))
    };
    let mut seq = 0usize;
    for &senders in &setup.senders {
        let mut batch = |n: usize| {
            seq += n;
            deliveries(http, &setup.payloads, hot, seq - n, n)
        };
        let (warmup, timed) = (batch(WARMUP), batch(setup.deliveries));
        send(http, warmup, senders).await;
        let run = send(http, timed, senders).await;
        println!(
            "  ingest, {senders} senders: {:.0} deliveries/s, {}; {} not decided in time (pending, unrouted), {} not 202",
            run.rate,
            p(&run.latencies),
            run.late,
            run.refused
        );
        if !run.bulk.is_empty() {
            println!(
                "    to the hot webhook {}; to the bulk's webhooks {}",
                p(&run.hot),
                p(&run.bulk)
            );
        }
        let rate = Figure::PerSecond(run.rate);
        f.push(format!("ingest, {senders} senders: deliveries/s"), rate);
        let p99 = Figure::Time(percentile(&run.latencies, 0.99));
        f.push(format!("ingest, {senders} senders: p99"), p99);
    }
}

// ---------------------------------------------------------------------------------------------
// Ingest: signed deliveries over HTTP/1.1 keep-alive connections.

/// `n` signed requests from sequence number `from`, each with whether it goes to the hot
/// webhook: on the big database every other one does and the rest spread over the bulk; on
/// the empty one all do.
fn deliveries(
    http: SocketAddr,
    payloads: &[Payload],
    hot: &Hot,
    from: usize,
    n: usize,
) -> Vec<(bool, Vec<u8>)> {
    (from..from + n)
        .map(|i| {
            let p = &payloads[(i * 7) % payloads.len()];
            let webhook = match hot.bulk.len() {
                0 => &hot.id,
                _ if i % 2 == 0 => &hot.id,
                len => &hot.bulk[(i / 2 * 7919) % len],
            };
            let delivery_id = format!("5ca1e000-0000-4000-8000-{i:012}");
            let mut head = format!(
                "POST /hooks/{webhook} HTTP/1.1\r\nHost: {http}\r\nContent-Length: {}\r\n",
                p.body.len()
            );
            for (name, value) in forge_headers("github", &p.event, &delivery_id, &p.digest) {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let mut request = head.into_bytes();
            request.extend_from_slice(&p.body);
            (webhook == &hot.id, request)
        })
        .collect()
}

#[path = "support/keep_alive.rs"]
mod keep_alive;
use keep_alive::Conn;

/// One ingest run.
struct Ingested {
    rate: f64,
    /// Sorted: every delivery's, and those to the hot webhook and to the bulk apart.
    latencies: Vec<Duration>,
    hot: Vec<Duration>,
    bulk: Vec<Duration>,
    /// Answered 202 without a decision in time: `pending` or `unrouted`.
    late: usize,
    /// Not answered 202.
    refused: usize,
}

/// Sends `requests` by `senders` connections at once, each taking the next request.
async fn send(http: SocketAddr, requests: Vec<(bool, Vec<u8>)>, senders: usize) -> Ingested {
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    // Opened now: control closes a connection idle past its header timeout.
    let mut conns = Vec::with_capacity(senders);
    for _ in 0..senders {
        conns.push(Conn::open(http).await);
    }
    let started = Instant::now();
    let workers = conns.into_iter().map(|mut conn| {
        let (requests, next) = (requests.clone(), next.clone());
        tokio::spawn(async move {
            let (mut latencies, mut late, mut refused) = (Vec::new(), 0, 0);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((to_hot, request)) = requests.get(i) else {
                    break;
                };
                let t = Instant::now();
                let (status, body) = conn.round_trip(request).await;
                latencies.push((*to_hot, t.elapsed()));
                let answer: serde_json::Value =
                    serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                if status != 202 {
                    if refused == 0 {
                        println!("  ingest answered {status}: {answer}");
                    }
                    refused += 1;
                } else if matches!(answer["decision"].as_str(), Some("pending" | "unrouted")) {
                    late += 1;
                }
            }
            (latencies, late, refused)
        })
    });
    let mut run = Ingested {
        rate: 0.0,
        latencies: Vec::new(),
        hot: Vec::new(),
        bulk: Vec::new(),
        late: 0,
        refused: 0,
    };
    for worker in futures::future::join_all(workers).await {
        let (latencies, late, refused) = worker.expect("a sender");
        for (to_hot, took) in latencies {
            run.latencies.push(took);
            if to_hot { &mut run.hot } else { &mut run.bulk }.push(took);
        }
        run.late += late;
        run.refused += refused;
    }
    run.rate = requests.len() as f64 / started.elapsed().as_secs_f64();
    for sorted in [&mut run.latencies, &mut run.hot, &mut run.bulk] {
        sorted.sort();
    }
    run
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------------

/// What every database's run shares.
struct Setup {
    reads: usize,
    /// Control start-ups timed per database.
    starts: usize,
    plans: usize,
    deliveries: usize,
    senders: Vec<usize>,
    /// The `switchboard router` control routes through.
    router: String,
    payloads: Arc<Vec<Payload>>,
}

async fn one_database(
    database: TestDatabase,
    (bulk, webhooks, scopes): (usize, usize, usize),
    setup: &Setup,
) -> Figures {
    let key_hex = SealingKey::generate_hex().expect("a key");
    let key = SealingKey::from_hex(&key_hex).expect("the key");
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
    // Every webhook has the same rules: one version 1, one digest.
    let decided_by = DecidedBy {
        version: hot.config_version,
        digest: hot.config_digest.clone(),
    };
    let started = Instant::now();
    // 30 days from the oldest delivery to the newest, the bulk and the hot webhook's
    // deliveries interleaved in time.
    let total = u64::try_from(bulk + HOT_EVENTS).unwrap_or(u64::MAX).max(1);
    let step = Duration::from_millis((30 * DAY_MS as u64 / total).max(1));
    let timed = (&clock, step);
    let payloads = setup.payloads.clone();
    let hot_only = Arc::new(vec![hot.id.clone()]);
    // Both databases hold every webhook: ingest sends both the same deliveries to the same
    // webhooks, so the two differ only in the deliveries stored before.
    let mut ids = Vec::with_capacity(webhooks);
    {
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
    }
    if bulk > 0 {
        let ids = Arc::new(ids.clone());
        let chunk = bulk / 10;
        for part in 0..10 {
            let count = if part == 9 { bulk - chunk * 9 } else { chunk };
            let tag = format!("bulk{part}");
            fill(
                &store,
                timed,
                ids.clone(),
                (count, &tag),
                payloads.clone(),
                &decided_by,
            )
            .await;
            let tag = format!("hot{part}");
            let hot_part = (HOT_EVENTS / 10, tag.as_str());
            fill(
                &store,
                timed,
                hot_only.clone(),
                hot_part,
                payloads.clone(),
                &decided_by,
            )
            .await;
        }
    } else {
        let all = (HOT_EVENTS, "hot");
        fill(&store, timed, hot_only, all, payloads.clone(), &decided_by).await;
    }
    println!(
        "  filled in {:.1} s ({} webhooks, {} scopes)",
        started.elapsed().as_secs_f64(),
        webhooks + 1,
        scopes + 1
    );
    let mut figures = measure(&database, &key, &store, (&scope, &hot.id), setup.reads).await;
    let mut credentials = Vec::new();
    for n in 0..=setup.plans {
        let vended = store
            .vend_endpoint(NewEndpoint {
                name: format!("bench-{n}"),
                human_login: "hot".into(),
                owner_scope: scope.clone(),
                verbs: [
                    "webhooks",
                    "webhook-rules",
                    "rule-pack-confirm",
                    "rule-trials",
                    "todos",
                ]
                .iter()
                .map(|v| v.to_string())
                .collect(),
            })
            .await
            .expect("an endpoint");
        credentials.push(vended.credential);
    }
    store.close().await;
    let hot = Hot {
        id: hot.id,
        bulk: Arc::new(ids),
        credentials,
    };
    through_control(&database, &key_hex, &hot, setup, &mut figures).await;
    database.remove().await;
    figures
}

/// The machine's load average (1, 5, 15 min): other work on the machine shows in the timings.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn report(name: &str, empty: &Figures, big: &Figures) {
    println!(
        "\n{name}: {} events against {} (ratio big / empty; load average now {})",
        big.events,
        empty.events,
        load_average()
    );
    println!("| operation | empty | big | ratio |");
    println!("| --- | ---: | ---: | ---: |");
    for (op, a) in &empty.rows {
        let Some((_, b)) = big.rows.iter().find(|(o, _)| o == op) else {
            continue;
        };
        println!(
            "| {op} | {} | {} | {:.2}× |",
            a.show(),
            b.show(),
            b.value() / a.value().max(1e-9)
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
    let router = RouterProcess::start(std::path::Path::new(env!("CARGO_BIN_EXE_switchboard")), &[]);
    let setup = Setup {
        reads: env_usize("SCALE_BENCH_READS", 21),
        starts: env_usize("SCALE_BENCH_STARTS", 3),
        plans: env_usize("SCALE_BENCH_PLANS", 5),
        deliveries: env_usize("SCALE_BENCH_DELIVERIES", 2_000),
        senders: std::env::var("SCALE_BENCH_SENDERS")
            .unwrap_or_else(|_| "8,32".into())
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .filter(|n| *n > 0)
            .collect(),
        router: router.addr.clone(),
        payloads: Arc::new(payloads()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let compare = |name: &'static str, base: Option<String>| {
        let setup = &setup;
        async move {
            let make = || async {
                match &base {
                    None => TestDatabase::sqlite(),
                    Some(base) => TestDatabase::postgres_in(base, "scalebench").await,
                }
            };
            println!("{name}, empty (load average {}):", load_average());
            let empty = one_database(make().await, (0, webhooks, scopes), setup).await;
            println!("{name}, {bulk} events (load average {}):", load_average());
            let big = one_database(make().await, (bulk, webhooks, scopes), setup).await;
            report(name, &empty, &big);
        }
    };
    rt.block_on(async {
        compare("sqlite", None).await;
        if let Ok(base) = std::env::var("SWITCHBOARD_TEST_DATABASE_URL") {
            compare("postgres", Some(base)).await;
        }
    });
    drop(router);
}
