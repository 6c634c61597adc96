//! Support for the control-plane end-to-end tests (ingest, the control role, `switchboard
//! up`, the admin CLI): a fresh database per test on every backend, control served
//! in-process on 127.0.0.1:0, deliveries signed as each forge signs them, and a small HTTP/1.1
//! client that can send whatever a hostile sender would.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;
pub use switchboard_testkit::forge_headers::forge_headers;

use switchboard_control::ingest::RetryOptions;
use switchboard_control::ingest::signature::sign;
use switchboard_control::routing::{RouterSource, Routers};
use switchboard_control::server::{BoundControl, ServeOptions};
use switchboard_control::state::{Capabilities, ControlState, Limits};
use switchboard_control::store::{Actor, NewWebhook, SourceType, Webhook};
use switchboard_control::{OwnerScope, Store, StoreOptions};
use switchboard_testkit::database::TestDatabase;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{RouterProcess, binary};

/// Generates `sqlite::<test>` and `postgres::<test>` for each `async fn <test>(db: TestDb)` of
/// the invoking module, each on its own fresh database.
macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                crate::control_harness::run(crate::control_harness::Backend::Sqlite, super::$test).await;
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                crate::control_harness::run(crate::control_harness::Backend::Postgres, super::$test).await;
            })*
        }
    };
}
pub(crate) use on_every_backend;

/// The backends: one fresh database per test from testkit.
pub use switchboard_testkit::database::Backend;

/// A test's database: the store, and the URL another process can open it with.
pub struct TestDb {
    pub store: Store,
    pub url: String,
}

/// Runs `test` on a fresh database of `backend`; PostgreSQL tests check nothing unless
/// `SWITCHBOARD_TEST_DATABASE_URL` is set. The schema or file is removed even on a panic.
pub async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(database) = TestDatabase::create(backend).await else {
        return;
    };
    let options = StoreOptions {
        max_connections: 4,
        sealing_key: Some(crate::support::secret_key()),
        ..StoreOptions::default()
    };
    let store = Store::connect_with(database.url(), options)
        .await
        .expect("open the store");
    let db = TestDb {
        store: store.clone(),
        url: database.url().to_string(),
    };
    database
        .run(test(db), async move { store.close().await })
        .await;
}

/// A human and its own scope.
pub async fn human(store: &Store, login: &str) -> OwnerScope {
    store.create_human(login, None).await.expect("create human");
    OwnerScope::human(login)
}

/// The grant every test webhook gets: `forge` is the default queue.
pub fn grant() -> Vec<String> {
    vec!["forge".into(), "review".into(), "triage".into()]
}

/// A webhook of `source` in `scope` with `configuration` (none: no rules).
pub async fn webhook(
    store: &Store,
    scope: &OwnerScope,
    source: SourceType,
    configuration: Option<serde_json::Value>,
) -> Webhook {
    store
        .create_webhook(NewWebhook {
            owner_scope: scope.clone(),
            source_type: source,
            secret: None,
            grant: grant(),
            reject_unverified: false,
            name: None,
            configuration: configuration.map(crate::support::typed),
            actor: Actor::operator(),
        })
        .await
        .expect("create webhook")
}

/// Saves `configuration` on the webhook as an operator's `set_webhook_rules` would: a change
/// made outside the test's control (another replica, an operator).
pub async fn save_rules(
    store: &Store,
    scope: &OwnerScope,
    webhook_id: &str,
    configuration: serde_json::Value,
) {
    store
        .save_configuration(
            scope,
            webhook_id,
            switchboard_control::store::SaveConfiguration {
                configuration: crate::support::typed(configuration),
                actor: Actor::operator(),
                change: switchboard_model::ConfigurationChange::op("set_webhook_rules"),
                ..Default::default()
            },
        )
        .await
        .expect("saved");
}

/// `forge`'s headers for `body`, signed with `secret`.
pub fn signed(
    forge: &str,
    event: &str,
    delivery_id: &str,
    secret: &str,
    body: &[u8],
) -> Vec<(String, String)> {
    forge_headers(forge, event, delivery_id, &sign(secret, body))
}

/// An HTTP response as the client saw it.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {} {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Sends `head` (request line and headers, without the blank line's final CRLF pair) and
/// `body` on one connection, reading the answer while writing: a server may answer (413)
/// before the body is sent and close, and the answer must still be read.
pub async fn http_raw(addr: SocketAddr, head: Vec<u8>, body: Vec<u8>) -> HttpResponse {
    let buf = exchange(addr, head, body).await.expect("connect");
    parse_response(&buf)
}

/// Like [`post`], for a server that may be gone: `None` when it refused the connection or
/// closed it before a whole answer's head (a process killed mid-request).
pub async fn try_post(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Option<HttpResponse> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let buf = exchange(addr, head.into_bytes(), body.to_vec())
        .await
        .ok()?;
    buf.windows(4)
        .any(|w| w == b"\r\n\r\n")
        .then(|| parse_response(&buf))
}

/// Writes a request and reads the answer until the server closes.
async fn exchange(addr: SocketAddr, head: Vec<u8>, body: Vec<u8>) -> std::io::Result<Vec<u8>> {
    let stream = TcpStream::connect(addr).await?;
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        if wr.write_all(&head).await.is_ok() {
            let _ = wr.write_all(&body).await;
        }
        let _ = wr.flush().await;
        wr
    });
    let mut buf = Vec::new();
    // A reset after the answer arrived keeps what was read.
    let _ = tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut buf)).await;
    drop(writer.await);
    Ok(buf)
}

fn parse_response(buf: &[u8]) -> HttpResponse {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = buf[split + 4..].to_vec();
    if let Some(len) = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.truncate(len);
    }
    assert!(
        !headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked")),
        "this client reads no chunked answers"
    );
    HttpResponse {
        status,
        headers,
        body,
    }
}

/// `POST path` with `headers` and `body`.
pub async fn post(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> HttpResponse {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    http_raw(addr, head.into_bytes(), body.to_vec()).await
}

/// Control served in-process on 127.0.0.1:0 (ingest and the gRPC API), routing through
/// real router processes. Stopped when dropped.
pub struct Control {
    pub http: SocketAddr,
    /// The control gRPC API (with health and reflection).
    pub grpc: SocketAddr,
    /// Control's router client, to count its calls.
    pub routers: std::sync::Arc<Routers>,
    state: ControlState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// How a test wants control set up.
#[derive(Default)]
pub struct ControlSetup {
    pub limits: Limits,
    pub capabilities: Capabilities,
    /// `None`: no retry task.
    pub retry: Option<RetryOptions>,
    /// `None`: no retention task (tests call `retention::purge_once` when they mean to).
    pub retention: Option<switchboard_control::retention::RetentionOptions>,
    /// The HTTP listener's bounds.
    pub http: switchboard_control::ingest::HttpLimits,
    /// `None`: the default age after which a gRPC connection is asked to go.
    pub grpc_max_connection_age: Option<Duration>,
    /// How the console signs people in.
    pub console: switchboard_control::console::ConsoleSettings,
}

impl Control {
    /// Where a running trial's candidate has been evaluated by this control (issue 45).
    pub fn trial_places(&self, trial_id: &str) -> Option<switchboard_control::trials::Places> {
        self.state.trials.places(trial_id)
    }

    pub async fn start(store: &Store, routers: &[&str], setup: ControlSetup) -> Control {
        let routers = Routers::new(
            RouterSource::Static(routers.iter().map(|r| r.to_string()).collect()),
            Duration::from_secs(10),
        )
        .await;
        let state = ControlState {
            trials: switchboard_control::trials::Trials::start(
                store.clone(),
                routers.clone(),
                switchboard_control::trials::TrialOptions {
                    refresh: Duration::from_millis(100),
                    ..Default::default()
                },
            ),
            console_base: None,
            catalog: std::sync::Arc::new(switchboard_packs::Catalog::builtin()),
            store: store.clone(),
            routers: routers.clone(),
            capabilities: setup.capabilities,
            limits: setup.limits,
        };
        let local = SocketAddr::from(([127, 0, 0, 1], 0));
        let bound = BoundControl::bind(state.clone(), local, local)
            .await
            .expect("control binds");
        let (http, grpc) = (bound.http_addr, bound.grpc_addr);
        let routes = switchboard_control::api::routes(state.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let options = ServeOptions {
            readiness_grace: Duration::ZERO,
            retry: setup.retry,
            retention: setup.retention,
            http: setup.http,
            grpc_max_connection_age: setup
                .grpc_max_connection_age
                .unwrap_or(switchboard_control::server::DEFAULT_MAX_CONNECTION_AGE),
            grpc_max_connection_age_grace: setup
                .grpc_max_connection_age
                .unwrap_or(switchboard_control::server::DEFAULT_MAX_CONNECTION_AGE),
            console: setup.console,
        };
        let task = tokio::spawn(async move {
            bound
                .serve(routes, options, async move {
                    let _ = stopped.await;
                })
                .await
                .expect("control serves");
        });
        Control {
            http,
            grpc,
            routers,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The state control serves with (to run a retry pass by hand).
    pub fn state(&self) -> ControlState {
        self.state.clone()
    }

    /// Delivers `body` with `headers` to `/hooks/<webhook_id>`.
    pub async fn deliver(
        &self,
        webhook_id: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> HttpResponse {
        post(self.http, &format!("/hooks/{webhook_id}"), headers, body).await
    }

    /// Stops serving and waits for the drain.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("control stops cleanly");
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A `switchboard router` process on `addr` (a router coming back where it was).
pub fn router_on(addr: &str) -> RouterProcess {
    let mut child = Command::new(binary())
        .args(["router", "--listen", addr, "--children", "1"])
        .env("SWITCHBOARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("router starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("router prints its address");
    let bound = line
        .trim()
        .strip_prefix("router listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    RouterProcess { child, addr: bound }
}

/// Polls `check` every 50 ms until it holds, for at most `within`.
/// Waits until `check` answers something, and returns it.
pub async fn eventually_some<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
