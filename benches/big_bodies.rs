//! Peak memory with big deliveries (issue 16; results in docs/benchmarks.md, "Big bodies").
//!
//! GitHub sends payloads up to 25 MB. This bench runs `switchboard control` and
//! `switchboard router` as the separate processes they are in production (the real binary,
//! its sandbox children, the default flags: `--max-body-mb 25`), on SQLite (a temp file,
//! always) and PostgreSQL (a fresh schema, when `BIG_BENCH_DATABASE_URL` or
//! `SWITCHBOARD_TEST_DATABASE_URL` is set). It POSTs GitHub's real push payload grown to
//! `BIG_BENCH_MB` MiB (default 25), signed, first one alone and then `BIG_BENCH_CONCURRENT`
//! (default 8) at once, each routed by a rule that reads the whole parsed body, and reads
//! from `/proc` each process's resident set before (`VmRSS`) and its peak (`VmHWM`) after.
//! The numbers are per process: control, the router, and its sandbox children (the largest
//! child and all of them together).
//!
//! Nothing here asserts on memory: the bench stops with a message only when a delivery is not
//! answered 202 with the decision the rule gives it.
//!
//! Run: `cargo bench --bench big_bodies`. Environment: `BIG_BENCH_MB`, `BIG_BENCH_CONCURRENT`,
//! `BIG_BENCH_BACKENDS` (default `sqlite,postgres`), `BIG_BENCH_DATABASE_URL`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_control::ingest::signature::sign;
use switchboard_control::store::{Actor, NewWebhook, SourceType};
use switchboard_control::{OwnerScope, SealingKey, Store, StoreOptions};
use switchboard_testkit::big_payloads::github_push_of;
use switchboard_testkit::database::TestDatabase;
use switchboard_testkit::procfs::{children_of, status_kib};
use switchboard_testkit::router_process::RouterProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &str = "big-bodies-bench-secret";

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_switchboard"))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// Pushes of more than 1,000 commits go to `review`: the rule reads the parsed body.
fn configuration() -> Value {
    json!({"rules": [
        {"id": "big", "when": ".event == \"push\" and (.payload.commits | length) > 1000",
         "action": {"queue": "review"}}
    ], "params": {}})
}

/// `switchboard control` on `url`, killed when dropped.
struct ControlProcess {
    child: Child,
    http: SocketAddr,
}

impl ControlProcess {
    fn start(url: &str, key_hex: &str, router: &str) -> Self {
        let mut child = Command::new(exe())
            .args([
                "control",
                "--database-url",
                url,
                "--http-listen",
                "127.0.0.1:0",
            ])
            .args(["--routers", router])
            .env("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0")
            .env("SWITCHBOARD_SECRET_KEY", key_hex)
            .env("SWITCHBOARD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("switchboard control starts");
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let mut http = None;
        for line in lines.by_ref() {
            let line = line.expect("control's stdout");
            if let Some(addr) = line.strip_prefix("ingest listening on http://") {
                http = Some(addr.trim().parse().expect("an address"));
                break;
            }
        }
        // Keep reading: control prints more, and a closed pipe would stop it.
        std::thread::spawn(move || lines.for_each(drop));
        Self {
            child,
            http: http.expect("control prints its ingest address"),
        }
    }
}

impl Drop for ControlProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// POSTs `body` to `path`; the status and the answer's body.
async fn post(http: SocketAddr, path: &str, delivery: &str, body: &[u8]) -> (u16, Value) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: push\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: sha256={}\r\n\
         Content-Length: {}\r\n\r\n",
        sign(SECRET, body),
        body.len()
    );
    let mut stream = TcpStream::connect(http).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(body).await.expect("body");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("answer");
    switchboard_testkit::http_answer::status_and_json(&answer)
}

/// Resident now and peak, in MiB, of control, the router, and the router's children.
#[derive(Clone, Copy, Default)]
struct Memory {
    control: (f64, f64),
    router: (f64, f64),
    /// The largest child's (now, peak), and the sum of every child's.
    child_max: (f64, f64),
    children_sum: (f64, f64),
}

fn mib(kib: Option<u64>) -> f64 {
    kib.unwrap_or(0) as f64 / 1024.0
}

fn memory(control: u32, router: u32) -> Memory {
    let of = |pid| (mib(status_kib(pid, "VmRSS")), mib(status_kib(pid, "VmHWM")));
    let children: Vec<(f64, f64)> = children_of(router).into_iter().map(of).collect();
    let max = |f: fn(&(f64, f64)) -> f64| children.iter().map(f).fold(0.0, f64::max);
    let sum = |f: fn(&(f64, f64)) -> f64| children.iter().map(f).sum::<f64>();
    Memory {
        control: of(control),
        router: of(router),
        child_max: (max(|c| c.0), max(|c| c.1)),
        children_sum: (sum(|c| c.0), sum(|c| c.1)),
    }
}

/// A fresh database of `backend` (testkit's), or `None` for PostgreSQL without a URL.
async fn fresh_db(backend: &str, pg_base: Option<&str>) -> Option<TestDatabase> {
    match backend {
        "sqlite" => Some(TestDatabase::sqlite()),
        "postgres" => Some(TestDatabase::postgres_in(pg_base?, "bench_big").await),
        other => panic!("unknown backend {other}"),
    }
}

async fn run(backend: &str, db: &TestDatabase, mb: usize, concurrent: usize) -> String {
    let key_hex = SealingKey::generate_hex().expect("a key");
    let store = Store::connect_with(
        db.url(),
        StoreOptions {
            sealing_key: Some(SealingKey::from_hex(&key_hex).expect("the key")),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("open the store");
    store.create_human("bench", None).await.expect("a human");
    let hook = store
        .create_webhook(NewWebhook {
            owner_scope: OwnerScope::human("bench"),
            source_type: SourceType::Github,
            secret: Some(SECRET.into()),
            grant: vec!["review".into()],
            reject_unverified: false,
            name: None,
            configuration: Some(serde_json::from_value(configuration()).expect("a configuration")),
            actor: Actor::operator(),
        })
        .await
        .expect("a webhook");
    store.close().await;

    let router = RouterProcess::start(exe(), &[]);
    let control = ControlProcess::start(db.url(), &key_hex, &router.addr);
    let (cpid, rpid) = (control.child.id(), router.pid());
    let path = format!("/hooks/{}", hook.id);
    let body = std::sync::Arc::new(github_push_of(mb * 1024 * 1024));
    // A small warm-up delivery: pools, connections and children as in steady state.
    let small = github_push_of(64 * 1024);
    let (status, _) = post(control.http, &path, "warm-up", &small).await;
    assert_eq!(status, 202, "the warm-up delivery");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = memory(cpid, rpid);

    let started = Instant::now();
    let (status, answer) = post(control.http, &path, "alone", &body).await;
    let alone_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(status, 202, "one {mb} MiB delivery: {answer}");
    assert_eq!(answer["decision"], "queue:review", "{answer}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after_one = memory(cpid, rpid);

    let started = Instant::now();
    let sends = (0..concurrent).map(|i| {
        let body = body.clone();
        let path = path.clone();
        let http = control.http;
        tokio::spawn(async move {
            let t = Instant::now();
            let (status, answer) = post(http, &path, &format!("together-{i}"), &body).await;
            (status, answer, t.elapsed())
        })
    });
    let mut slowest = Duration::ZERO;
    let mut pending = 0;
    for done in futures::future::join_all(sends).await {
        let (status, answer, took) = done.expect("a send");
        assert_eq!(status, 202, "{answer}");
        // Past the ingest deadline (2 s) a delivery is answered `pending` and routed on.
        match answer["decision"].as_str() {
            Some("queue:review") => {}
            Some("pending") => pending += 1,
            _ => panic!("{answer}"),
        }
        slowest = slowest.max(took);
    }
    let together_ms = started.elapsed().as_secs_f64() * 1e3;
    // Every delivery routed, by the rule: the peaks below include the background routing.
    let pool = {
        sqlx::any::install_default_drivers();
        sqlx::AnyPool::connect(db.url())
            .await
            .expect("the bench's own connection")
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        use sqlx::Row;
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, SUM(CASE WHEN decision LIKE '%queue:review%' THEN 1 ELSE 0 END) AS q \
             FROM events WHERE routed = 1",
        )
        .fetch_one(&pool)
        .await
        .expect("count");
        let (n, q): (i64, Option<i64>) = (row.get("n"), row.get("q"));
        if n == 2 + concurrent as i64 {
            assert_eq!(
                q,
                Some(1 + concurrent as i64),
                "every big push queued by the rule"
            );
            break;
        }
        assert!(Instant::now() < deadline, "only {n} routed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let routed_ms = started.elapsed().as_secs_f64() * 1e3;
    pool.close().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = memory(cpid, rpid);

    let row = |name: &str, pick: fn(&Memory) -> (f64, f64)| {
        format!(
            "| {backend} | {name} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
            pick(&idle).0,
            pick(&after_one).1,
            pick(&after).1,
            (pick(&after).1 - pick(&idle).0) / concurrent as f64,
        )
    };
    let mut out = String::new();
    out += &row("control", |m| m.control);
    out += &row("router", |m| m.router);
    out += &row("largest sandbox child", |m| m.child_max);
    out += &row("all sandbox children", |m| m.children_sum);
    out += &format!(
        "| {backend} | answered in (ms) | | {alone_ms:.0} | all {together_ms:.0} (slowest {:.0}; {pending} `pending`), all routed {routed_ms:.0} | |\n",
        slowest.as_secs_f64() * 1e3
    );
    out
}

fn main() {
    let mb = env_usize("BIG_BENCH_MB", 25);
    let concurrent = env_usize("BIG_BENCH_CONCURRENT", 8);
    let backends = std::env::var("BIG_BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
    let pg_base = std::env::var("BIG_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("SWITCHBOARD_TEST_DATABASE_URL"))
        .ok();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        println!(
            "{mb} MiB deliveries (GitHub's push grown), one alone then {concurrent} at once; \
             resident set in MiB per process (`VmRSS` idle, `VmHWM` peaks)\n"
        );
        println!(
            "| backend | process | idle RSS | peak, one delivery | peak, {concurrent} at once | (peak − idle) per delivery |"
        );
        println!("|---|---|---:|---:|---:|---:|");
        for backend in backends.split(',').map(str::trim) {
            let Some(db) = fresh_db(backend, pg_base.as_deref()).await else {
                eprintln!("{backend}: skipped (no PostgreSQL URL)");
                continue;
            };
            print!("{}", run(backend, &db, mb, concurrent).await);
            db.remove().await;
        }
    });
}
