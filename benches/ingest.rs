//! The control-plane ingest benchmark (issue 3; results and how to read them in
//! docs/benchmarks.md, "Control plane: ingest").
//!
//! Sustained ingest — verify, store, route, todo — in deliveries/s, against the raw insert
//! rate of the same rows through the same store and pool, on SQLite (a temp file, always) and
//! on PostgreSQL (a fresh schema, when `INGEST_BENCH_DATABASE_URL` or
//! `SWITCHBOARD_TEST_DATABASE_URL` is set). Everything is the real thing: control served
//! in-process exactly as `switchboard control` serves it (`BoundControl`, axum ingest, the
//! store with `switchboard control`'s default pool of 8 connections), a real
//! `switchboard router` process with its sandbox children, and deliveries built from the real
//! payloads in `testkit/data/webhooks`, signed as each forge signs them, each with its own
//! delivery id, POSTed over HTTP/1.1 keep-alive connections by N concurrent clients.
//!
//! Seven rows per backend and client count, each run on a fresh database:
//! - **raw rows**: `Store::insert_event` then `Store::record_decision` (the decision and the
//!   todo ingest records for that delivery, in one transaction), per delivery, with group
//!   commit off — exactly the rows ingest writes, one transaction each, with nothing else:
//!   the single-row rate issue 22's target is measured against;
//! - **ingest's statements**: every statement ingest runs, in its order — `webhook_for_ingest`,
//!   `try_take_held` (the rate limit, taken from the database a block at a time), `insert_event`, `record_decision` — without HTTP, signature
//!   or router;
//! - **route only**: the router call ingest makes per delivery (`Routers::evaluate_chunked` of
//!   one stored delivery), no database;
//! - **ingest**: `POST /hooks/<id>` end to end;
//! - **ingest-trial**: ingest with a trial (issue 45) running on every webhook, its candidate
//!   the rules with a first rule that drops issue events: each delivery is also evaluated by the
//!   candidate after its answer, in a replay-priority router call, and counted;
//! - **ingest-guard**: ingest with a guard (issue 46) running on every webhook: the configuration
//!   a confirm replaced (the same first rule that drops issues) evaluated beside the live one
//!   and judged after every batch, as after a confirm;
//! - route only and ingest again, diagnostic, against the router's own service served from
//!   this process (the `-nodelay` rows). Both routers set TCP_NODELAY on accepted sockets
//!   (`switchboard router` through tonic's `TcpIncoming::with_nodelay`, which sets it on every
//!   accepted stream); what differs is the layout: the diagnostic router shares this process
//!   and its runtime with control (issue 43, docs/benchmarks.md).
//!
//! Raw and statements rows retry a `record_decision` that finds no event: on PostgreSQL an
//! `insert_event` through sqlx's `Any` driver returns before its commit (docs/benchmarks.md).
//!
//! Rows run in interleaved rounds, each round in a new shuffled order. No criterion: `Instant`,
//! medians over rounds, latency percentiles over every timed delivery. Nothing here asserts
//! on time; the bench stops with a message only when ingest answers or stores something other
//! than what the same delivery must give (a status, a decision, a row count).
//!
//! Run: `cargo bench --bench ingest`. Environment: `INGEST_BENCH_DELIVERIES` (timed deliveries
//! per run, default 2,000), `INGEST_BENCH_CLIENTS` (default `8,32`), `INGEST_BENCH_ROUNDS`
//! (default 3), `INGEST_BENCH_BACKENDS` (default `sqlite,postgres`), `INGEST_BENCH_MODES`
//! (any of `raw,statements,route,route-nodelay,ingest,ingest-nodelay,ingest-trial,ingest-guard`), `INGEST_BENCH_DATABASE_URL` (PostgreSQL; else
//! `SWITCHBOARD_TEST_DATABASE_URL`), `INGEST_BENCH_ROUTER_CHILDREN` (default: the router's own,
//! one per core), `INGEST_BENCH_ROUTERS` (router processes control balances over, default 1),
//! `INGEST_BENCH_DB_CONNECTIONS` (the store's pool, default 8 as `switchboard control`'s),
//! `INGEST_BENCH_WRITE_TURNS` (`0`: SQLite writers wait in SQLite's busy handler instead),
//! `INGEST_BENCH_LOG` (`1`: control's logs on stderr instead of discarded),
//! `INGEST_BENCH_DECIDE_BEFORE_STORE_MS` (control's `--ingest-decide-before-store-ms`; `0`:
//! every delivery stored before it is routed, two writes each),
//! `INGEST_BENCH_ONE_STATEMENT` (`0`: on PostgreSQL a group commit of events takes `BEGIN`,
//! its inserts and `COMMIT` instead of one statement),
//! `INGEST_BENCH_GROUP_COMMIT_WRITES` (the writes one group commit may hold in every row but
//! raw, default 64 as `switchboard control`'s; `1`: group commit off),
//! `INGEST_BENCH_HUNG` (`1`: the first of the routers is SIGSTOPped for every run: the
//! hung-router rows of issue 15),
//! `SWITCHBOARD_WEBHOOK_DATA` (the payloads).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use switchboard_control::ingest::route::record_for;
use switchboard_control::ingest::signature::sign;
use switchboard_control::ingest::{RATE_LIMIT_KIND, RetryOptions, delivery};
use switchboard_control::routing::{RouterSource, Routers};
use switchboard_control::server::{BoundControl, ServeOptions};
use switchboard_control::state::{Capabilities, ControlState, Limits};
use switchboard_control::store::{
    Actor, Event, GroupCommitBounds, NewEvent, NewWebhook, RecordDecision, SourceType, Webhook,
};
use switchboard_control::wire::{routing_context, stored_delivery};
use switchboard_control::{OwnerScope, Store, StoreOptions};
use switchboard_proto::router::v1::{Configuration, Decision};
use switchboard_testkit::database::TestDatabase;
use switchboard_testkit::forge_headers::forge_headers;
use switchboard_testkit::procfs::processes;
use switchboard_testkit::router_process::RouterProcess;

/// The same allocator as the `switchboard` binary: control here runs as it runs there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FORGES: [&str; 3] = ["github", "gitea", "forgejo"];
/// Untimed deliveries before each timed run, through the same path: opens the pool's
/// connections and the router channel, warms caches.
const WARMUP: usize = 96;
/// Every webhook's signing secret (a fixed one, so signatures are computed once per payload).
const SECRET: &str = "ingest-bench-secret-0123456789abcdef";
/// The rate limit, raised so that it never refuses a delivery here (it is still taken, one
/// upsert per delivery, as in production).
const INGEST_PER_MINUTE: u32 = 1_000_000_000;

/// The webhook's queues; the first is the default queue.
const GRANT: [&str; 5] = ["triage", "forge", "review", "ops", "ci"];

/// A handful of rules in the style of the built-in packs: drop noise, route the rest to work
/// queues. No `default_action`, so an unmatched delivery becomes a todo in `triage`.
fn configuration() -> switchboard_model::Configuration {
    let rules = [
        ("unverified", json!({"drop": true}), ".verified != true"),
        ("deleted", json!({"drop": true}), r#".action == "deleted""#),
        (
            "bots",
            json!({"drop": true}),
            r#".payload.sender.type == "Bot" or ((.payload.sender.login // "") | test("\\[bot\\]$"))"#,
        ),
        (
            "ci-failures",
            json!({"queue": "ci"}),
            r#"(.event | startswith("check_") or startswith("workflow_")) and .action == "completed" and ([.payload.check_run.conclusion, .payload.check_suite.conclusion, .payload.workflow_run.conclusion, .payload.workflow_job.conclusion] | index("failure") != null)"#,
        ),
        (
            "ci-noise",
            json!({"drop": true}),
            r#".event as $e | any($params.ci_events[]; . == $e)"#,
        ),
        (
            "security",
            json!({"queue": "ops"}),
            r#"(.payload.issue.labels // .payload.pull_request.labels // []) | map(.name // "") | any(.[]; test("^(security|cve)"; "i"))"#,
        ),
        (
            "release-push",
            json!({"queue": "forge"}),
            r#".event == "push" and ((.payload.ref // "") | test("^refs/(heads/release/|tags/v)"))"#,
        ),
        (
            "merged",
            json!({"queue": "forge"}),
            r#".event == "pull_request" and .action == "closed" and .payload.pull_request.merged == true"#,
        ),
        (
            "pull-requests",
            json!({"queue": "review"}),
            r#".event | startswith("pull_request")"#,
        ),
        (
            "issues",
            json!({"queue": "triage"}),
            r#".event == "issues" or .event == "issue_comment""#,
        ),
    ];
    let rules: Vec<Value> = rules
        .iter()
        .map(|(id, action, when)| json!({"id": id, "when": when, "action": action}))
        .collect();
    serde_json::from_value(json!({
        "rules": rules,
        "params": {"ci_events": ["check_run", "check_suite", "workflow_run", "workflow_job", "status"]}
    }))
    .expect("the bench's configuration")
}

// ---------------------------------------------------------------------------------------------
// Deliveries.

/// One real payload, with what is computed once for it.
struct Sample {
    forge: &'static str,
    file: String,
    event: String,
    body: Arc<Vec<u8>>,
    /// HMAC-SHA256 of the body with [`SECRET`], lower-case hex.
    digest: String,
}

fn load_samples() -> Result<Vec<Sample>, String> {
    let dir = switchboard_testkit::payloads_dir::webhooks_dir();
    if !dir.join("github").is_dir() {
        return Err(format!(
            "no payloads at {} (set SWITCHBOARD_WEBHOOK_DATA)",
            dir.display()
        ));
    }
    let mut out = Vec::new();
    for forge in FORGES {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(forge))
            .map_err(|e| format!("cannot read {}: {e}", dir.join(forge).display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for path in files {
            let file = path
                .file_name()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            let event = file.split('.').next().unwrap_or_default().to_string();
            let body =
                std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let digest = sign(SECRET, &body);
            out.push(Sample {
                forge,
                file,
                event,
                body: Arc::new(body),
                digest,
            });
        }
    }
    Ok(out)
}

fn source_type(forge: &str) -> SourceType {
    match forge {
        "github" => SourceType::Github,
        "gitea" => SourceType::Gitea,
        _ => SourceType::Forgejo,
    }
}

/// splitmix64: deterministic delivery ids that look real and never repeat.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn guid(i: u64) -> String {
    let (a, b) = (mix(i), mix(i ^ 0xdead_beef));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// One delivery of a run: which payload, its delivery id, and its headers as sent.
struct Delivery {
    sample: usize,
    delivery_id: String,
    headers: Vec<(String, String)>,
}

/// `count` deliveries cycling through the payloads with a stride coprime to their number (so
/// the forges interleave), delivery ids from `first_seq` on.
fn deliveries(samples: &[Sample], first_seq: u64, count: usize) -> Vec<Delivery> {
    let n = samples.len();
    let stride = (5..).find(|s| gcd(*s, n) == 1).unwrap_or(1);
    (0..count)
        .map(|i| {
            let seq = first_seq + i as u64;
            let sample = (i * stride) % n;
            let s = &samples[sample];
            let delivery_id = guid(seq);
            let headers = forge_headers(s.forge, &s.event, &delivery_id, &s.digest);
            Delivery {
                sample,
                delivery_id,
                headers,
            }
        })
        .collect()
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The request bytes of one delivery to `path` on `addr` (HTTP/1.1, keep-alive).
fn request_bytes(addr: SocketAddr, path: &str, d: &Delivery, body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in &d.headers {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The headers as control's HTTP server hands them to ingest: `host` and `content-length`
/// first, then the delivery's, in order (names lower-cased by the parser).
fn header_map(addr: SocketAddr, d: &Delivery, body_len: usize) -> HeaderMap {
    let mut map = HeaderMap::new();
    let mut add = |name: &str, value: &str| {
        let name = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).expect("name");
        map.append(name, HeaderValue::from_str(value).expect("value"));
    };
    add("host", &addr.to_string());
    add("content-length", &body_len.to_string());
    for (n, v) in &d.headers {
        add(n, v);
    }
    map
}

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 keep-alive client: one connection per simulated forge client.

#[path = "support/keep_alive.rs"]
mod keep_alive;
use keep_alive::Conn;

// ---------------------------------------------------------------------------------------------
// Databases: a fresh one per run.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        }
    }
}

/// A fresh database with one human and one webhook per forge, all with [`configuration`].
struct Db {
    store: Store,
    /// github, gitea, forgejo.
    webhooks: Vec<Webhook>,
    /// The temp file or the schema (testkit's), removed after the run.
    database: TestDatabase,
}

/// `group_commit`: whether the store batches ingest's writes (issue 22); the raw rows, the
/// single-row baseline, run without.
async fn fresh_db(backend: Backend, pg_base: Option<&str>, group_commit: bool) -> Db {
    let database = match backend {
        Backend::Sqlite => TestDatabase::sqlite(),
        Backend::Postgres => {
            TestDatabase::postgres_in(pg_base.expect("a PostgreSQL URL"), "bench").await
        }
    };
    // `switchboard control`'s default pool (--database-max-connections 8) and SQLite write
    // turns, unless INGEST_BENCH_DB_CONNECTIONS / INGEST_BENCH_WRITE_TURNS=0 say otherwise.
    let options = StoreOptions {
        max_connections: env_usize("INGEST_BENCH_DB_CONNECTIONS", 8).max(1) as u32,
        // (Not env_usize: that reads 0 as "unset".)
        queue_sqlite_writers: std::env::var("INGEST_BENCH_WRITE_TURNS")
            .map_or(true, |v| v.trim() != "0"),
        sealing_key: Some(switchboard_control::SealingKey::generate().expect("a key")),
        group_commit: GroupCommitBounds {
            max_writes: if group_commit {
                env_usize("INGEST_BENCH_GROUP_COMMIT_WRITES", 64)
            } else {
                1
            },
            ..GroupCommitBounds::default()
        },
        postgres_one_statement: std::env::var("INGEST_BENCH_ONE_STATEMENT")
            .map_or(true, |v| v.trim() != "0"),
        ..StoreOptions::default()
    };
    let store = Store::connect_with(database.url(), options)
        .await
        .expect("open the store");
    store
        .create_human("bench", None)
        .await
        .expect("create human");
    let mut webhooks = Vec::new();
    for forge in FORGES {
        let w = store
            .create_webhook(NewWebhook {
                owner_scope: OwnerScope::human("bench"),
                source_type: source_type(forge),
                secret: Some(SECRET.into()),
                grant: GRANT.iter().map(|g| g.to_string()).collect(),
                reject_unverified: false,
                name: None,
                configuration: Some(configuration()),
                actor: Actor::operator(),
            })
            .await
            .expect("create webhook");
        webhooks.push(w);
    }
    Db {
        store,
        webhooks,
        database,
    }
}

impl Db {
    async fn drop_all(self) {
        self.store.close().await;
        self.database.remove().await;
    }

    fn webhook_for(&self, forge: &str) -> &Webhook {
        let i = FORGES.iter().position(|f| *f == forge).expect("a forge");
        &self.webhooks[i]
    }

    async fn count(&self, sql: &'static str) -> i64 {
        use sqlx::Row;
        sqlx::query(sql)
            .fetch_one(self.store.pool())
            .await
            .expect("count")
            .try_get::<i64, _>(0)
            .expect("a count")
    }
}

// ---------------------------------------------------------------------------------------------
// The router process and control.

/// A `switchboard router` with `children` sandbox children (its default when `None`).
fn start_router(children: Option<usize>) -> RouterProcess {
    let n = children.map(|n| n.to_string());
    let extra: Vec<&str> = match &n {
        Some(n) => vec!["--children", n],
        None => vec![],
    };
    RouterProcess::start(Path::new(env!("CARGO_BIN_EXE_switchboard")), &extra)
}

/// The diagnostic router: the router's own service (`RouterService`) over a `SandboxPool` of
/// sandbox children of the real binary, configured as `switchboard router`'s defaults, served
/// from this process, on accepted sockets with TCP_NODELAY as `switchboard router`'s are.
/// Returns its address; it serves until the runtime stops.
async fn start_nodelay_router(children: Option<usize>) -> String {
    use futures::StreamExt as _;
    use switchboard_proto::router::v1::router_server::RouterServer;
    use switchboard_router::sandbox::{SandboxConfig, SandboxPool};
    use switchboard_router::server::{
        CONNECTION_WINDOW_BYTES, MAX_MESSAGE_BYTES, STREAM_WINDOW_BYTES,
    };
    use switchboard_router::service::RouterService;

    let mut config = SandboxConfig::new(PathBuf::from(env!("CARGO_BIN_EXE_switchboard")));
    if let Some(n) = children {
        config.children = n.max(1);
    }
    let pool = SandboxPool::start(config)
        .await
        .expect("the diagnostic router's sandbox pool starts (confined)");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the diagnostic router");
    let addr = listener.local_addr().expect("an address").to_string();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        if let Ok(stream) = &conn {
            let _ = stream.set_nodelay(true);
        }
        conn
    });
    let service = RouterServer::new(RouterService::new(pool))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .initial_stream_window_size(Some(STREAM_WINDOW_BYTES))
            .initial_connection_window_size(Some(CONNECTION_WINDOW_BYTES))
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
            .expect("the diagnostic router serves");
    });
    addr
}

fn limits() -> Limits {
    let defaults = Limits::default();
    Limits {
        ingest_per_webhook_per_minute: INGEST_PER_MINUTE,
        // INGEST_BENCH_DECIDE_BEFORE_STORE_MS=0: every delivery stored before it is routed
        // (two writes each), as before a delivery could be stored with its decision.
        ingest_decide_before_store: std::env::var("INGEST_BENCH_DECIDE_BEFORE_STORE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(defaults.ingest_decide_before_store),
        ..defaults
    }
}

/// Control's state as `switchboard control` builds it (the default capabilities and limits,
/// the rate limit raised), routing through `router` (`addr` or `addr,addr,…`).
async fn control_state(store: &Store, router: &str) -> ControlState {
    let routers = Routers::new(
        RouterSource::Static(router.split(',').map(str::to_string).collect()),
        Duration::from_secs(10),
    )
    .await;
    ControlState {
        trials: switchboard_control::trials::Trials::start(
            store.clone(),
            routers.clone(),
            Default::default(),
        ),
        console_base: None,
        catalog: Arc::new(switchboard_packs::Catalog::builtin()),
        store: store.clone(),
        routers,
        capabilities: Capabilities::default(),
        limits: limits(),
    }
}

/// Control served in-process on 127.0.0.1:0, as `switchboard control` serves it (with the
/// unrouted-event retry task), until the sender is used.
async fn start_control(
    state: ControlState,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let local = SocketAddr::from(([127, 0, 0, 1], 0));
    let bound = BoundControl::bind(state.clone(), local, local)
        .await
        .expect("control binds");
    let http = bound.http_addr;
    let routes = switchboard_control::api::routes(state);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = ServeOptions {
        readiness_grace: Duration::ZERO,
        retry: Some(RetryOptions::default()),
        ..ServeOptions::default()
    };
    let task = tokio::spawn(async move {
        bound
            .serve(routes, options, async move {
                let _ = stopped.await;
            })
            .await
            .expect("control serves");
    });
    (http, stop, task)
}

/// A stored event as ingest would have it, for the route-only row (no database).
fn event_for(
    webhook: &Webhook,
    d: &Delivery,
    s: &Sample,
    kind: &str,
    headers: &HeaderMap,
) -> Event {
    Event {
        id: format!("ev_{}", d.delivery_id.replace('-', "")),
        webhook_id: webhook.id.clone(),
        owner_scope: webhook.owner_scope.clone(),
        delivery_id: d.delivery_id.clone(),
        source: webhook.source_type.to_string(),
        kind: kind.to_string(),
        headers: delivery::stored_headers(headers),
        body: s.body.as_ref().clone().into(),
        verified: true,
        received_at: 1_795_996_750_123,
        decision: None,
        fault: None,
        routed: false,
        routed_at: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Modes and runs.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Raw,
    Statements,
    Route,
    RouteNodelay,
    Ingest,
    IngestNodelay,
    IngestTrial,
    IngestGuard,
}

impl Mode {
    const ALL: [Mode; 8] = [
        Mode::Raw,
        Mode::Statements,
        Mode::Route,
        Mode::RouteNodelay,
        Mode::Ingest,
        Mode::IngestNodelay,
        Mode::IngestTrial,
        Mode::IngestGuard,
    ];

    fn key(self) -> &'static str {
        match self {
            Mode::Raw => "raw",
            Mode::Statements => "statements",
            Mode::Route => "route",
            Mode::RouteNodelay => "route-nodelay",
            Mode::Ingest => "ingest",
            Mode::IngestNodelay => "ingest-nodelay",
            Mode::IngestTrial => "ingest-trial",
            Mode::IngestGuard => "ingest-guard",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Raw => "**raw rows** (insert_event + record_decision, one transaction each)",
            Mode::Statements => "ingest's statements, no HTTP, no router",
            Mode::Route => "route only (router process, no database)",
            Mode::RouteNodelay => "route only, router with TCP_NODELAY",
            Mode::Ingest => "**ingest** (HTTP: verify, store, route, todo)",
            Mode::IngestNodelay => "ingest, router with TCP_NODELAY",
            Mode::IngestTrial => "ingest with a trial running on every webhook",
            Mode::IngestGuard => "ingest with a guard running on every webhook",
        }
    }

    /// Rows that write the database.
    fn stores(self) -> bool {
        !matches!(self, Mode::Route | Mode::RouteNodelay)
    }

    fn http(self) -> bool {
        matches!(
            self,
            Mode::Ingest | Mode::IngestNodelay | Mode::IngestTrial | Mode::IngestGuard
        )
    }

    /// Rows that use the in-process router whose sockets set TCP_NODELAY.
    fn nodelay(self) -> bool {
        matches!(self, Mode::RouteNodelay | Mode::IngestNodelay)
    }
}

/// What each payload decides, computed once through the router.
struct Expected {
    decisions: Vec<Decision>,
}

/// The decision label and the record ingest writes for payload `sample` on `webhook`.
fn expected_record(
    expected: &Expected,
    sample: usize,
    webhook: &Webhook,
) -> (String, RecordDecision) {
    let record = record_for(
        &expected.decisions[sample],
        webhook,
        &Capabilities::default(),
    );
    (record.decision.decision.to_string(), record)
}

/// CPU time in ns of every thread of `pid` (/proc/<pid>/task/*/schedstat: exact).
fn sched_ns(pid: u32) -> u64 {
    sched(pid).0
}

/// (CPU ns, times put on a CPU) summed over every thread of `pid`: the first and third
/// fields of /proc/<pid>/task/*/schedstat. A thread is put on a CPU again each time it wakes,
/// which is what a call across processes costs more of than one within a process
/// (docs/benchmarks.md, "The in-process router rows").
fn sched(pid: u32) -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| {
            let mut f = s.split_whitespace();
            let ns = f.next()?.parse::<u64>().ok()?;
            let slices = f.nth(1)?.parse::<u64>().ok()?;
            Some((ns, slices))
        })
        .fold((0, 0), |(a, b), (ns, n)| (a + ns, b + n))
}

/// (busy, iowait, total) jiffies of the whole machine (/proc/stat's first line).
fn machine_ticks() -> (u64, u64, u64) {
    let line = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default();
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    if f.len() < 8 {
        return (0, 0, 0);
    }
    let total: u64 = f.iter().sum();
    let idle = f[3];
    let iowait = f[4];
    (total - idle - iowait, iowait, total)
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

/// CPU used so far (ns): this process (control and the clients), the router and its
/// children, every `postgres` process, and the machine as a whole (busy, iowait jiffies).
#[derive(Clone, Copy, Default)]
struct Cpu {
    bench: u64,
    router: u64,
    /// Times the bench's and the router tree's threads were put on a CPU.
    bench_slices: u64,
    router_slices: u64,
    postgres: u64,
    machine_busy: u64,
    machine_iowait: u64,
}

/// The router's CPU is the router process's and its sandbox children's, plus the children of
/// the diagnostic in-process router's pool (children of this process); that router's gRPC
/// handling runs in this process and counts as the bench's.
fn cpu_now(router_pids: &[u32]) -> Cpu {
    let procs = processes();
    let me = std::process::id();
    let (router, router_slices) = router_pids
        .iter()
        .copied()
        .chain(
            procs
                .iter()
                .filter(|(pid, _, ppid)| {
                    router_pids.contains(ppid) || (*ppid == me && !router_pids.contains(pid))
                })
                .map(|(pid, _, _)| *pid),
        )
        .map(sched)
        .fold((0, 0), |(a, b), (ns, n)| (a + ns, b + n));
    let (bench, bench_slices) = sched(me);
    let postgres = procs
        .iter()
        .filter(|(_, comm, _)| comm == "postgres")
        .map(|(pid, _, _)| sched_ns(*pid))
        .sum();
    let (busy, iowait, _) = machine_ticks();
    Cpu {
        bench,
        router,
        bench_slices,
        router_slices,
        postgres,
        machine_busy: busy,
        machine_iowait: iowait,
    }
}

/// One timed run.
struct Run {
    mode: Mode,
    clients: usize,
    /// Deliveries ingest answered `unrouted` for (warm-up included).
    unrouted: usize,
    /// Deliveries whose `record_decision` had to be retried (raw and statements rows).
    retried: usize,
    /// The ingest-trial row's trials: deliveries seen and evaluated (the rest shed).
    trial_counts: (u64, u64),
    wall: Duration,
    latencies: Vec<Duration>,
    /// CPU µs per delivery: bench process, router tree, postgres; machine busy and iowait cores.
    cpu_us: [f64; 3],
    /// Times put on a CPU per delivery: the bench process, the router tree.
    slices: [f64; 2],
    busy_cores: f64,
    iowait_cores: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }

    /// CPU µs per delivery of this bench, the router and PostgreSQL together.
    fn cpu_total(&self) -> f64 {
        self.cpu_us.iter().sum()
    }

    /// Cores busy with something else than this bench, its router and PostgreSQL: other
    /// sessions on the machine (and the kernel's own work).
    fn others_cores(&self) -> f64 {
        (self.busy_cores - self.cpu_total() * self.rate() / 1e6).max(0.0)
    }
}

/// A worker's results: (delivery index, status, answer body), latencies, and how many of its
/// deliveries had to retry `record_decision` (see [`record`]).
type WorkerOut = (Vec<(usize, u16, Vec<u8>)>, Vec<Duration>, usize);

/// What one delivery came to: an HTTP answer to check, and whether `record_decision` had to
/// be retried.
struct Done {
    answer: Option<(u16, Vec<u8>)>,
    retried: bool,
}

/// What a run needs besides the database.
struct Bench<'a> {
    samples: &'a [Sample],
    expected: &'a Expected,
    /// Every `switchboard router` process ingest balances over, as control's `--routers`.
    routers: &'a str,
    router_pids: &'a [u32],
    /// The diagnostic router: the same service and sandbox children, served from this process
    /// on sockets with TCP_NODELAY.
    nodelay_router: &'a str,
    ticks: f64,
    next_seq: AtomicUsize,
}

impl Bench<'_> {
    /// Fresh delivery ids for `count` deliveries.
    fn take(&self, count: usize) -> Vec<Delivery> {
        let first = self.next_seq.fetch_add(count, Ordering::Relaxed) as u64;
        deliveries(self.samples, first, count)
    }

    /// Runs `deliveries` through `work` with `clients` concurrent workers pulling the next
    /// delivery from a shared counter; returns the wall time and every worker's output.
    async fn drive<F, Fut>(
        &self,
        clients: usize,
        count: usize,
        work: F,
    ) -> (Duration, Vec<WorkerOut>)
    where
        F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Done> + Send,
    {
        let next = Arc::new(AtomicUsize::new(0));
        let work = Arc::new(work);
        let start = Instant::now();
        let handles: Vec<_> = (0..clients)
            .map(|worker| {
                let next = next.clone();
                let work = work.clone();
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    let mut latencies = Vec::new();
                    let mut retried = 0;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            break;
                        }
                        let t = Instant::now();
                        let done = work(worker, i).await;
                        latencies.push(t.elapsed());
                        retried += usize::from(done.retried);
                        if let Some((status, body)) = done.answer {
                            answers.push((i, status, body));
                        }
                    }
                    (answers, latencies, retried)
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("a worker completes"));
        }
        (start.elapsed(), out)
    }

    /// One run of `mode` with `clients` on a fresh database: warm-up, then `count` timed.
    async fn run(
        &self,
        backend: Backend,
        mode: Mode,
        clients: usize,
        count: usize,
        pg_base: Option<&str>,
    ) -> Run {
        let db = fresh_db(backend, pg_base, mode != Mode::Raw).await;
        let router = if mode.nodelay() {
            self.nodelay_router
        } else {
            self.routers
        };
        let state = control_state(&db.store, router).await;
        let control = if mode.http() {
            Some(start_control(state.clone()).await)
        } else {
            None
        };
        let addr = control
            .as_ref()
            .map(|c| c.0)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7000)));
        let mut trials = Vec::new();
        if mode == Mode::IngestTrial {
            for w in &db.webhooks {
                trials.push(start_trial(&db.store, w).await);
            }
        }
        if mode == Mode::IngestGuard {
            for w in &db.webhooks {
                trials.push(start_guard(&db.store, w).await);
            }
        }

        let mut cpu_before = Cpu::default();
        let mut cpu_after = Cpu::default();
        let mut unrouted = 0usize;
        let mut unrouted_todos = 0usize;
        let mut retried = 0usize;
        let mut wall = Duration::ZERO;
        let mut latencies = Vec::new();
        let mut stored_expected = 0usize;
        let mut todos_expected = 0usize;
        for (phase, n) in [("warm-up", WARMUP), ("timed", count)] {
            // Everything a delivery needs, prepared before the clock starts.
            let batch: Vec<Prepared> = self
                .take(n)
                .into_iter()
                .map(|d| {
                    let s = &self.samples[d.sample];
                    let webhook = db.webhook_for(s.forge).clone();
                    let headers = header_map(addr, &d, s.body.len());
                    let kind = delivery::kind(webhook.source_type, &headers, &s.body);
                    let (label, record) = expected_record(self.expected, d.sample, &webhook);
                    let request =
                        request_bytes(addr, &format!("/hooks/{}", webhook.id), &d, &s.body);
                    let event = event_for(&webhook, &d, s, &kind, &headers);
                    Prepared {
                        new_event: NewEvent {
                            webhook_id: webhook.id.clone(),
                            delivery_id: d.delivery_id.clone(),
                            kind,
                            headers: delivery::stored_headers(&headers),
                            body: s.body.as_ref().clone().into(),
                            verified: true,
                        },
                        webhook,
                        label,
                        record,
                        request,
                        event,
                    }
                })
                .collect();
            if mode.stores() {
                stored_expected += batch.len();
                todos_expected += batch.iter().filter(|p| p.record.todo.is_some()).count();
            }
            let batch = Arc::new(batch);
            // Connections open once the phase's deliveries are prepared: control closes a
            // keep-alive connection idle for its header timeout (5 s), and preparing tens of
            // thousands of deliveries can take that long, so connections opened before it
            // found themselves closed at their first request.
            let mut conns = Vec::new();
            if control.is_some() {
                for _ in 0..clients {
                    conns.push(tokio::sync::Mutex::new(Conn::open(addr).await));
                }
            }
            let conns = Arc::new(conns);
            let work = {
                let batch = batch.clone();
                let state = state.clone();
                let conns = conns.clone();
                move |worker: usize, i: usize| {
                    let batch = batch.clone();
                    let state = state.clone();
                    let conns = conns.clone();
                    async move { one(mode, &state, &conns, worker, &batch[i]).await }
                }
            };
            if phase == "timed" {
                cpu_before = cpu_now(self.router_pids);
            }
            let (w, outs) = self.drive(clients, n, work).await;
            if phase == "timed" {
                cpu_after = cpu_now(self.router_pids);
                wall = w;
            }
            for (answers, lat, r) in outs {
                retried += r;
                for (i, status, body) in answers {
                    if !check_answer(mode, &batch[i], status, &body) {
                        unrouted += 1;
                        unrouted_todos += usize::from(batch[i].record.todo.is_some());
                    }
                }
                if phase == "timed" {
                    latencies.extend(lat);
                }
            }
        }

        // Every delivery reached its webhook's trial: evaluated, or shed and counted so.
        let mut trial_counts = (0, 0);
        if !trials.is_empty() {
            let want = (stored_expected) as u64;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let (mut seen, mut evaluated) = (0, 0);
                for t in &trials {
                    let scope = OwnerScope::human("bench");
                    let read = if mode == Mode::IngestGuard {
                        db.store.get_guard(&scope, t).await.expect("a guard")
                    } else {
                        db.store.get_trial(&scope, t).await.expect("a trial")
                    };
                    seen += read.observed.seen;
                    evaluated += read.observed.evaluated;
                }
                trial_counts = (seen, evaluated);
                if seen >= want || Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if trial_counts.0 != want {
                panic!(
                    "{} {}: the trials saw {} deliveries of {want}",
                    backend.name(),
                    mode.key(),
                    trial_counts.0
                );
            }
        }
        if let Some((_, stop, task)) = control {
            let _ = stop.send(());
            task.await.expect("control stops");
        }
        if mode.stores() {
            let events = db.count("SELECT COUNT(*) FROM events").await;
            let routed = db
                .count("SELECT COUNT(*) FROM events WHERE routed = 1")
                .await;
            let todos = db.count("SELECT COUNT(*) FROM todos").await;
            let want = i64::try_from(stored_expected).expect("count");
            let want_todos = i64::try_from(todos_expected).expect("count");
            let left = i64::try_from(unrouted).expect("count");
            let left_todos = i64::try_from(unrouted_todos).expect("count");
            // An event ingest answered `unrouted` for stays unrouted until the retry task
            // (10 s minimum age) routes it; every other event is routed with its todo.
            if events != want
                || routed < want - left
                || todos < want_todos - left_todos
                || todos > want_todos
            {
                panic!(
                    "{} {}: stored {events} events ({routed} routed) and {todos} todos; expected {want} events, {} routed and {want_todos} todos ({left} answered unrouted)",
                    backend.name(),
                    mode.key(),
                    want - left
                );
            }
        }
        db.drop_all().await;

        let n = latencies.len() as f64;
        let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e3 / n;
        let secs = wall.as_secs_f64();
        let cores = |a: u64, b: u64| a.saturating_sub(b) as f64 / self.ticks / secs;
        Run {
            mode,
            clients,
            unrouted,
            retried,
            trial_counts,
            wall,
            latencies,
            cpu_us: [
                per(cpu_after.bench, cpu_before.bench),
                per(cpu_after.router, cpu_before.router),
                per(cpu_after.postgres, cpu_before.postgres),
            ],
            slices: [
                cpu_after
                    .bench_slices
                    .saturating_sub(cpu_before.bench_slices) as f64
                    / n,
                cpu_after
                    .router_slices
                    .saturating_sub(cpu_before.router_slices) as f64
                    / n,
            ],
            busy_cores: cores(cpu_after.machine_busy, cpu_before.machine_busy),
            iowait_cores: cores(cpu_after.machine_iowait, cpu_before.machine_iowait),
        }
    }
}

/// One delivery, prepared: the rows, the record, the request, the event as routed.
struct Prepared {
    webhook: Webhook,
    new_event: NewEvent,
    label: String,
    record: RecordDecision,
    request: Vec<u8>,
    event: Event,
}

/// One delivery through `mode`; `Some((status, body))` for an HTTP answer to check.
async fn one(
    mode: Mode,
    state: &ControlState,
    conns: &[tokio::sync::Mutex<Conn>],
    worker: usize,
    p: &Prepared,
) -> Done {
    let store = &state.store;
    match mode {
        Mode::Raw => {
            let event = store
                .insert_event(p.new_event.clone())
                .await
                .expect("insert_event");
            record(store, &event.id, &p.record).await
        }
        Mode::Statements => {
            let webhook = store
                .webhook_for_ingest(&p.webhook.id)
                .await
                .expect("webhook_for_ingest");
            store
                .try_take_held(
                    &webhook.id,
                    RATE_LIMIT_KIND,
                    INGEST_PER_MINUTE,
                    Duration::from_secs(60),
                )
                .await
                .expect("try_take_held");
            let event = store
                .insert_event(p.new_event.clone())
                .await
                .expect("insert_event");
            record(store, &event.id, &p.record).await
        }
        Mode::Route | Mode::RouteNodelay => {
            // What `route::route_events` sends for one freshly stored event.
            let context = routing_context(&p.webhook, &state.capabilities);
            let configuration = Configuration::from(&p.webhook.configuration);
            let budget = u32::try_from(state.limits.evaluation_budget.as_millis()).unwrap_or(50);
            let results = state
                .routers
                .evaluate_chunked(
                    &context,
                    &[configuration],
                    vec![stored_delivery(&p.event)],
                    state.limits.replay_chunk,
                    budget,
                    "",
                )
                .await
                .expect("the router answers");
            let decision = results
                .first()
                .and_then(|r| r.decisions.first())
                .expect("a decision");
            let label = record_for(decision, &p.webhook, &state.capabilities)
                .decision
                .decision
                .to_string();
            assert_eq!(label, p.label, "route only: {}", p.event.kind);
            Done {
                answer: None,
                retried: false,
            }
        }
        Mode::Ingest | Mode::IngestNodelay | Mode::IngestTrial | Mode::IngestGuard => {
            let mut conn = conns[worker].lock().await;
            Done {
                answer: Some(conn.round_trip(&p.request).await),
                retried: false,
            }
        }
    }
}

/// `record_decision` right after `insert_event`, as ingest calls them. On PostgreSQL the
/// event may not be visible yet to another connection of the pool: through sqlx's `Any`
/// driver, an autocommit `INSERT … RETURNING` read with `fetch_optional` returns its row before
/// the commit (docs/benchmarks.md). Ingest then leaves the event unrouted; this row retries
/// (every 1 ms) until the event is visible, so it writes exactly the rows ingest writes.
async fn record(store: &Store, event_id: &str, record: &RecordDecision) -> Done {
    let mut retried = false;
    for _ in 0..10_000 {
        match store.record_decision(event_id, record.clone()).await {
            Ok(_) => {
                return Done {
                    answer: None,
                    retried,
                };
            }
            Err(switchboard_control::Error::NotFound { .. }) => {
                retried = true;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(e) => panic!("record_decision: {e:?}"),
        }
    }
    panic!("event {event_id} never became visible to record_decision");
}

/// Checks an ingest answer; `false` when it is `unrouted` (the event stored, its decision left
/// to the retry task), which is counted rather than fatal.
fn check_answer(mode: Mode, p: &Prepared, status: u16, body: &[u8]) -> bool {
    let answer: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if status == 202 && answer["decision"] == "unrouted" && answer["verified"] == true {
        return false;
    }
    if status != 202
        || answer["decision"] != p.label.as_str()
        || answer["verified"] != true
        || answer["kind"] != p.new_event.kind.as_str()
    {
        panic!(
            "{}: delivery {} ({}) answered {status} {answer}; expected 202, verified, kind {}, decision {}",
            mode.key(),
            p.new_event.delivery_id,
            p.event.kind,
            p.new_event.kind,
            p.label
        );
    }
    true
}

// ---------------------------------------------------------------------------------------------
// Reporting.

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() {
        0.0
    } else if xs.len() % 2 == 1 {
        xs[xs.len() / 2]
    } else {
        (xs[xs.len() / 2 - 1] + xs[xs.len() / 2]) / 2.0
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The markdown table of one backend's runs, and the target lines.
fn report(backend: Backend, runs: &[Run], client_counts: &[usize]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n### {}\n", backend.name());
    let _ = writeln!(
        out,
        "| row | clients | deliveries/s (median) | range over rounds | p50 ms | p99 ms | max ms | CPU µs/delivery: bench / router / postgres | machine busy cores (others) | unrouted / retried |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut by: BTreeMap<(usize, Mode), Vec<&Run>> = BTreeMap::new();
    for r in runs {
        by.entry((r.clients, r.mode)).or_default().push(r);
    }
    let mut medians: BTreeMap<(usize, Mode), f64> = BTreeMap::new();
    let mut cpu_medians: BTreeMap<(usize, Mode), f64> = BTreeMap::new();
    for ((clients, mode), rs) in &by {
        let rates: Vec<f64> = rs.iter().map(|r| r.rate()).collect();
        let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = rates.iter().copied().fold(0.0, f64::max);
        let med = median(rates);
        medians.insert((*clients, *mode), med);
        let mut lat: Vec<Duration> = rs.iter().flat_map(|r| r.latencies.clone()).collect();
        lat.sort();
        let cpu = |k: usize| median(rs.iter().map(|r| r.cpu_us[k]).collect());
        let busy = median(rs.iter().map(|r| r.busy_cores).collect());
        let others = median(rs.iter().map(|r| r.others_cores()).collect());
        cpu_medians.insert(
            (*clients, *mode),
            median(rs.iter().map(|r| r.cpu_total()).collect()),
        );
        let pg = if backend == Backend::Postgres {
            format!("{:.0}", cpu(2))
        } else {
            "–".into()
        };
        let unrouted: usize = rs.iter().map(|r| r.unrouted).sum();
        let retried: usize = rs.iter().map(|r| r.retried).sum();
        let _ = writeln!(
            out,
            "| {} | {clients} | {} | {}–{} | {} | {} | {} | {:.0} / {:.0} / {pg} | {busy:.2} ({others:.2}) | {unrouted} / {retried} |",
            mode.label(),
            thousands(med),
            thousands(lo),
            thousands(hi),
            ms(percentile(&lat, 0.50)),
            ms(percentile(&lat, 0.99)),
            ms(lat.last().copied().unwrap_or_default()),
            cpu(0),
            cpu(1),
        );
    }
    let _ = writeln!(out);
    for clients in client_counts {
        let (Some(raw), Some(ingest)) = (
            medians.get(&(*clients, Mode::Raw)),
            medians.get(&(*clients, Mode::Ingest)),
        ) else {
            continue;
        };
        let ratio = ingest / raw;
        let _ = write!(
            out,
            "- {} clients: ingest {} / raw {} deliveries/s = **{:.0} %** of the single-row insert rate: issue 22's target (≥ 100 %) {}",
            clients,
            thousands(*ingest),
            thousands(*raw),
            ratio * 100.0,
            if ratio >= 1.0 {
                "**met**"
            } else {
                "**not met**"
            }
        );
        if let Some(nodelay) = medians.get(&(*clients, Mode::IngestNodelay)) {
            let _ = write!(
                out,
                "; with a TCP_NODELAY router {} deliveries/s = {:.0} %",
                thousands(*nodelay),
                nodelay / raw * 100.0
            );
        }
        if let (Some(raw_cpu), Some(ingest_cpu)) = (
            cpu_medians.get(&(*clients, Mode::Raw)),
            cpu_medians.get(&(*clients, Mode::Ingest)),
        ) {
            let _ = write!(
                out,
                "; CPU per delivery, every process: ingest {ingest_cpu:.0} µs, raw {raw_cpu:.0} µs (raw/ingest {:.0} %)",
                raw_cpu / ingest_cpu * 100.0
            );
        }
        let _ = writeln!(out);
    }
    // Issue 45's and 46's rows: ingest with a trial, or a guard, on every webhook against
    // ingest alone.
    for (mode, what) in [
        (Mode::IngestTrial, "a trial"),
        (Mode::IngestGuard, "a guard"),
    ] {
        for clients in client_counts {
            let Some(ingest) = medians.get(&(*clients, Mode::Ingest)) else {
                continue;
            };
            if let Some(trial) = medians.get(&(*clients, mode)) {
                let p99 = |mode| {
                    let mut lat: Vec<Duration> = by
                        .get(&(*clients, mode))
                        .into_iter()
                        .flatten()
                        .flat_map(|r| r.latencies.clone())
                        .collect();
                    lat.sort();
                    percentile(&lat, 0.99)
                };
                let (with, without) = (p99(mode), p99(Mode::Ingest));
                let (seen, evaluated): (u64, u64) = by
                    .get(&(*clients, mode))
                    .into_iter()
                    .flatten()
                    .fold((0, 0), |(s, e), r| {
                        (s + r.trial_counts.0, e + r.trial_counts.1)
                    });
                let _ = write!(
                    out,
                    "- {clients} clients: with {what} on every webhook {} deliveries/s = **{:.2}×** ingest's (target ≥ 0.9×), p99 {} ms = **{:.2}×** (target ≤ 1.1×), {:.1} % of its deliveries evaluated",
                    thousands(*trial),
                    trial / ingest,
                    ms(with),
                    with.as_secs_f64() / without.as_secs_f64().max(1e-9),
                    if seen == 0 {
                        0.0
                    } else {
                        evaluated as f64 * 100.0 / seen as f64
                    }
                );
            }
            let _ = writeln!(out);
        }
    }
    out
}

/// A guard on `webhook`, as a confirm starts one: the replaced configuration (its rules with
/// a first rule that drops issue events) beside the live one. The new rules queue what the
/// old ones dropped, which is no lost work: the guard never breaches, so it watches every
/// delivery of the run.
async fn start_guard(store: &Store, webhook: &Webhook) -> String {
    let mut replaced = configuration();
    replaced.rules.insert(
        0,
        switchboard_model::Rule {
            id: Some("replaced-drop-issues".into()),
            description: None,
            when: r#".event == "issues""#.into(),
            action: switchboard_model::Action::Drop,
        },
    );
    store
        .start_guard(switchboard_control::store::NewGuard {
            webhook_id: webhook.id.clone(),
            owner_scope: OwnerScope::human("bench"),
            plan_id: "pl_bench".into(),
            replaced,
            confirmed_digest: webhook.config_digest.clone(),
            forecast: Default::default(),
            limits: Default::default(),
            started_by: "bench".into(),
            terms: switchboard_model::guard::GuardTerms {
                confirmed_version: webhook.config_version,
                replaced_version: webhook.config_version - 1,
                ..Default::default()
            },
        })
        .await
        .expect("a guard starts")
        .id
}

/// A trial on `webhook` whose candidate decides otherwise than its rules for part of the
/// deliveries (a first rule that drops issue events), as a person's would.
async fn start_trial(store: &Store, webhook: &Webhook) -> String {
    let mut candidate = configuration();
    candidate.rules.insert(
        0,
        switchboard_model::Rule {
            id: Some("trial-drop-issues".into()),
            description: None,
            when: r#".event == "issues""#.into(),
            action: switchboard_model::Action::Drop,
        },
    );
    store
        .start_trial(
            switchboard_control::store::NewTrial {
                webhook_id: webhook.id.clone(),
                owner_scope: OwnerScope::human("bench"),
                plan_id: "pl_bench".into(),
                candidate,
                base_config_digest: webhook.config_digest.clone(),
                forecast: Default::default(),
                limits: Default::default(),
                started_by: "bench".into(),
                plan: Default::default(),
            },
            1,
        )
        .await
        .expect("a trial starts")
        .id
}

// ---------------------------------------------------------------------------------------------

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Shuffles `xs` deterministically for `round` (Fisher–Yates over splitmix64).
fn shuffle<T>(xs: &mut [T], round: u64) {
    for i in (1..xs.len()).rev() {
        let j = (mix(round.wrapping_mul(1000) + i as u64) % (i as u64 + 1)) as usize;
        xs.swap(i, j);
    }
}

/// Each payload's decision, through the router, as ingest would get it.
async fn expected_decisions(samples: &[Sample], router: &str) -> Expected {
    let probe = tempfile::tempdir().expect("temp dir");
    let store = Store::connect(
        &format!(
            "sqlite://{}?mode=rwc",
            probe.path().join("probe.db").display()
        ),
        &switchboard_control::SealingKey::generate().expect("a key"),
    )
    .await
    .expect("open the probe store");
    let state = control_state(&store, router).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let mut decisions = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let d = Delivery {
            sample: i,
            delivery_id: guid(u64::MAX - i as u64),
            headers: forge_headers(s.forge, &s.event, "probe", &s.digest),
        };
        let webhook = probe_webhook(s.forge);
        let headers = header_map(addr, &d, s.body.len());
        let kind = delivery::kind(webhook.source_type, &headers, &s.body);
        let event = event_for(&webhook, &d, s, &kind, &headers);
        let results = state
            .routers
            .evaluate_chunked(
                &routing_context(&webhook, &state.capabilities),
                &[Configuration::from(&webhook.configuration)],
                vec![stored_delivery(&event)],
                1,
                50,
                "",
            )
            .await
            .expect("the router answers");
        let decision = results
            .first()
            .and_then(|r| r.decisions.first())
            .cloned()
            .expect("a decision");
        decisions.push(decision);
    }
    store.close().await;
    Expected { decisions }
}

/// The webhook the expected decisions are computed for: the bench's grant and
/// configuration, as ingest's webhook has them.
fn probe_webhook(forge: &str) -> Webhook {
    Webhook {
        confirm_policy: Default::default(),
        claim_ttl: None,
        guard_on_breach: None,
        approval_rule: None,
        id: "wh_probe".into(),
        name: None,
        owner_scope: OwnerScope::human("bench"),
        source_type: source_type(forge),
        secret: SECRET.into(),
        grant: GRANT.iter().map(|g| g.to_string()).collect(),
        reject_unverified: false,
        configuration: configuration(),
        config_version: 1,
        config_digest: String::new(),
        provenance: Vec::new(),
        trusted_actors: None,
        created_at: 0,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; libtest's filters and `--list` mean nothing here.
    if std::env::args().any(|a| a == "--list") {
        println!("ingest: bench");
        return;
    }
    let samples = match load_samples() {
        Ok(s) => s,
        Err(e) => {
            println!("ingest bench skipped: {e}");
            return;
        }
    };
    // Control logs every delivery at info, as JSON, like `switchboard control` off a terminal;
    // here into a sink, so formatting costs what it costs and nothing floods the output.
    // INGEST_BENCH_LOG=1: to stderr instead, to see what control did.
    let to_stderr = std::env::var("INGEST_BENCH_LOG").is_ok_and(|v| v == "1");
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(move || -> Box<dyn std::io::Write> {
            if to_stderr {
                Box::new(std::io::stderr())
            } else {
                Box::new(std::io::sink())
            }
        })
        .json()
        .init();

    let count = env_usize("INGEST_BENCH_DELIVERIES", 2_000);
    let rounds = env_usize("INGEST_BENCH_ROUNDS", 3);
    let client_counts: Vec<usize> = env_list("INGEST_BENCH_CLIENTS", "8,32")
        .iter()
        .filter_map(|c| c.parse().ok())
        .filter(|c| *c > 0)
        .collect();
    let modes: Vec<Mode> = {
        let wanted = env_list(
            "INGEST_BENCH_MODES",
            "raw,statements,route,route-nodelay,ingest,ingest-nodelay,ingest-trial",
        );
        Mode::ALL
            .into_iter()
            .filter(|m| wanted.iter().any(|w| w == m.key()))
            .collect()
    };
    let backends_wanted = env_list("INGEST_BENCH_BACKENDS", "sqlite,postgres");
    let pg_base = std::env::var("INGEST_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("SWITCHBOARD_TEST_DATABASE_URL"))
        .ok();
    let router_children = std::env::var("INGEST_BENCH_ROUTER_CHILDREN")
        .ok()
        .and_then(|v| v.parse().ok());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);

    let body_bytes: usize = samples.iter().map(|s| s.body.len()).sum();
    println!(
        "ingest bench: {count} timed deliveries per run (+{WARMUP} warm-up) from {} payload files ({:.1} KiB average body), {} rules, clients {client_counts:?}, {rounds} interleaved rounds, {cores} cores",
        samples.len(),
        body_bytes as f64 / samples.len() as f64 / 1024.0,
        configuration().rules.len(),
    );
    println!("load average at start: {}", load_average());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let router_count = env_usize("INGEST_BENCH_ROUTERS", 1).max(1);
    let routers: Vec<RouterProcess> = (0..router_count)
        .map(|_| start_router(router_children))
        .collect();
    let router_pids: Vec<u32> = routers.iter().map(|r| r.child.id()).collect();
    let router_list = routers
        .iter()
        .map(|r| r.addr.as_str())
        .collect::<Vec<_>>()
        .join(",");
    println!("routers: {router_list} (pids {router_pids:?})");

    rt.block_on(async {
        let nodelay_router = if modes.iter().any(|m| m.nodelay()) {
            let addr = start_nodelay_router(router_children).await;
            println!("diagnostic router with TCP_NODELAY, in this process: {addr}");
            addr
        } else {
            String::new()
        };
        let expected = expected_decisions(&samples, &routers[0].addr).await;
        // INGEST_BENCH_HUNG=1: the first router is stopped (SIGSTOP: its connections stay
        // open and nothing answers, as a hung node) for every timed run, so the rows measure
        // what the balancer's ejection and hedging make of one hung router.
        if std::env::var("INGEST_BENCH_HUNG").is_ok_and(|v| v == "1") {
            assert!(
                routers.len() >= 2,
                "INGEST_BENCH_HUNG needs INGEST_BENCH_ROUTERS of 2 or more"
            );
            let stopped = Command::new("kill")
                .args(["-STOP", &routers[0].child.id().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(stopped, "SIGSTOP the first router");
            println!("router {} is hung (SIGSTOP) for every run", routers[0].addr);
        }
        let mut by_label: BTreeMap<String, usize> = BTreeMap::new();
        let mut faults = Vec::new();
        for (i, s) in samples.iter().enumerate() {
            let (label, _) = expected_record(&expected, i, &probe_webhook(s.forge));
            if label == switchboard_model::Label::Fault.to_string() {
                faults.push(format!("{}/{}: {:?}", s.forge, s.file, expected.decisions[i]));
            }
            *by_label.entry(label).or_default() += 1;
        }
        if !faults.is_empty() {
            panic!("rules fault on real payloads: {faults:#?}");
        }
        let todo_share = by_label
            .iter()
            .filter(|(l, _)| {
                matches!(
                    switchboard_model::Label::parse(l),
                    Ok(switchboard_model::Label::Queue(_) | switchboard_model::Label::Default)
                )
            })
            .map(|(_, n)| n)
            .sum::<usize>();
        println!(
            "decisions over the {} payloads: {} ({todo_share} make a todo)",
            samples.len(),
            by_label
                .iter()
                .map(|(l, n)| format!("{l} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );

        let admin = match &pg_base {
            Some(base) if backends_wanted.iter().any(|b| b == "postgres") => {
                sqlx::any::install_default_drivers();
                match sqlx::AnyPool::connect(base).await {
                    Ok(pool) => Some(pool),
                    Err(e) => {
                        println!("PostgreSQL at {base} is unreachable ({e}): its rows are skipped");
                        None
                    }
                }
            }
            _ => None,
        };
        let mut backends = Vec::new();
        if backends_wanted.iter().any(|b| b == "sqlite") {
            backends.push(Backend::Sqlite);
        }
        if backends_wanted.iter().any(|b| b == "postgres") {
            if let Some(admin) = &admin {
                use sqlx::Row;
                let row = sqlx::query(
                    "SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync')",
                )
                .fetch_one(admin)
                .await
                .expect("PostgreSQL settings");
                let v: String = row.try_get(0).unwrap_or_default();
                let sc: String = row.try_get(1).unwrap_or_default();
                let fs: String = row.try_get(2).unwrap_or_default();
                println!("PostgreSQL {v}: synchronous_commit={sc}, fsync={fs}");
                backends.push(Backend::Postgres);
            } else {
                println!(
                    "PostgreSQL rows skipped: set INGEST_BENCH_DATABASE_URL or SWITCHBOARD_TEST_DATABASE_URL"
                );
            }
        }

        let bench = Bench {
            samples: &samples,
            expected: &expected,
            routers: &router_list,
            router_pids: &router_pids,
            nodelay_router: &nodelay_router,
            ticks: clock_ticks(),
            next_seq: AtomicUsize::new(1),
        };
        let mut tables = String::new();
        for backend in backends {
            println!("\n{}:", backend.name());
            let mut runs = Vec::new();
            for round in 0..rounds {
                let mut order: Vec<(usize, Mode)> = client_counts
                    .iter()
                    .flat_map(|c| modes.iter().map(move |m| (*c, *m)))
                    .collect();
                shuffle(&mut order, round as u64 + 1);
                for (clients, mode) in order {
                    let r = bench
                        .run(
                            backend,
                            mode,
                            clients,
                            count,
                            pg_base.as_deref(),
                        )
                        .await;
                    let mut lat = r.latencies.clone();
                    lat.sort();
                    println!(
                        "  round {} {:>10} {clients:>3} clients: {:>7.0} deliveries/s, p50 {} ms, p99 {} ms; CPU µs/delivery bench {:.0}, router {:.0}, postgres {:.0}; on-CPU slices/delivery bench {:.2}, router {:.2}; machine {:.2} cores busy ({:.2} by others), {:.2} iowait; {} answered unrouted, {} record_decision retried; load {}",
                        round + 1,
                        mode.key(),
                        r.rate(),
                        ms(percentile(&lat, 0.5)),
                        ms(percentile(&lat, 0.99)),
                        r.cpu_us[0],
                        r.cpu_us[1],
                        r.cpu_us[2],
                        r.slices[0],
                        r.slices[1],
                        r.busy_cores,
                        r.others_cores(),
                        r.iowait_cores,
                        r.unrouted,
                        r.retried,
                        load_average()
                    );
                    runs.push(r);
                }
            }
            tables.push_str(&report(backend, &runs, &client_counts));
        }
        if let Some(admin) = admin {
            admin.close().await;
        }
        println!("{tables}");
    });
    println!(
        "router sandbox children at end: {}; load average at end: {}",
        processes()
            .iter()
            .filter(|(_, _, ppid)| router_pids.contains(ppid))
            .count(),
        load_average()
    );
}
