//! SPEC-0031's story over MCP, end to end, with a real MCP client this project did not write:
//! the Python `mcp` package (installed by `scripts/mcp-venv`) runs `tests/mcp/story.py`
//! against a gateway in front of control (in-process, on SQLite) routing through a real
//! `switchboard router` process, over streamable HTTP with a bearer header, once in the
//! session-based protocol mode and once in the stateless (2026-07-28) one.
//!
//! The test skips, saying why, only when the virtualenv is absent.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use switchboard_control::routing::{RouterSource, Routers};
use switchboard_control::server::{BoundControl, ServeOptions};
use switchboard_control::state::{Capabilities, ControlState, Limits};
use switchboard_control::store::{Actor, NewEndpoint, NewWebhook, SourceType, Webhook};
use switchboard_control::{OwnerScope, Store, StoreOptions};
use switchboard_mcp_gateway::{BoundGateway, GatewayConfig};

use crate::control_harness::{post, signed};
use crate::support::{RouterProcess, binary, payload, venv};

const SECRET: &str = "mcp-e2e-secret-0123456789abcdef";

fn story() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/story.py")
}

async fn human(store: &Store, login: &str) -> OwnerScope {
    store.create_human(login, None).await.expect("create human");
    OwnerScope::human(login)
}

async fn webhook(store: &Store, scope: &OwnerScope) -> Webhook {
    store
        .create_webhook(NewWebhook {
            owner_scope: scope.clone(),
            source_type: SourceType::Github,
            secret: Some(SECRET.into()),
            grant: vec!["forge".into(), "review".into(), "triage".into()],
            reject_unverified: false,
            name: None,
            configuration: None,
            actor: Actor::operator(),
        })
        .await
        .expect("create webhook")
}

async fn vend(
    store: &Store,
    login: &str,
    scope: &OwnerScope,
    name: &str,
    verbs: &[&str],
) -> String {
    store
        .vend_endpoint(NewEndpoint {
            name: name.into(),
            human_login: login.into(),
            owner_scope: scope.clone(),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        })
        .await
        .expect("vend")
        .credential
}

/// Control on 127.0.0.1:0 (ingest and gRPC), routing through `router`.
async fn start_control(
    store: &Store,
    router: &str,
) -> (SocketAddr, SocketAddr, tokio::sync::oneshot::Sender<()>) {
    start_control_with(store, router, Limits::default()).await
}

async fn start_control_with(
    store: &Store,
    router: &str,
    limits: Limits,
) -> (SocketAddr, SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let routers = Routers::new(
        RouterSource::Static(vec![router.to_string()]),
        Duration::from_secs(10),
    )
    .await;
    let state = ControlState {
        trials: switchboard_control::trials::Trials::start(
            store.clone(),
            routers.clone(),
            Default::default(),
        ),
        console_base: None,
        catalog: std::sync::Arc::new(switchboard_packs::Catalog::builtin()),
        store: store.clone(),
        routers,
        capabilities: Capabilities::default(),
        limits,
    };
    let local = SocketAddr::from(([127, 0, 0, 1], 0));
    let bound = BoundControl::bind(state.clone(), local, local)
        .await
        .expect("control binds");
    let (http, grpc) = (bound.http_addr, bound.grpc_addr);
    let routes = switchboard_control::api::routes(state);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let options = ServeOptions {
            readiness_grace: Duration::ZERO,
            retry: None,
            ..ServeOptions::default()
        };
        let _ = bound
            .serve(routes, options, async move {
                let _ = stopped.await;
            })
            .await;
    });
    (http, grpc, stop)
}

/// A `switchboard gateway` process in front of control at `grpc`; killed when dropped.
struct GatewayProcess {
    child: std::process::Child,
    url: String,
}

impl GatewayProcess {
    fn spawn(grpc: SocketAddr) -> GatewayProcess {
        use std::io::{BufRead, BufReader};
        let mut child = std::process::Command::new(binary())
            .args(["gateway", "--listen", "127.0.0.1:0", "--control"])
            .arg(grpc.to_string())
            .env("SWITCHBOARD_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("gateway starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the gateway prints its address");
        let url = line
            .trim()
            .strip_prefix("mcp listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        GatewayProcess { child, url }
    }

    /// SIGTERM, then the exit status (at most 10 s).
    fn terminate(mut self) -> Option<std::process::ExitStatus> {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Real GitHub deliveries, signed as GitHub signs them, so a plan has something to replay.
async fn deliver_some(http: SocketAddr, webhook: &Webhook) {
    let files = [
        "pull_request.opened.json",
        "status.json",
        "check_run.created.json",
        "workflow_job.queued.json",
        "issue_comment.created.json",
        "check_run.completed.failure.json",
    ];
    for (n, file) in files.iter().enumerate() {
        let p = payload("github", file);
        let delivery = format!("00000000-0000-4000-8000-{:012}", n + 1);
        let headers = signed("github", &p.event, &delivery, SECRET, &p.body);
        let r = post(http, &format!("/hooks/{}", webhook.id), &headers, &p.body).await;
        assert!(
            r.status < 300,
            "delivery {file} answered {}: {:?}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_mcp_client_plans_and_confirms_a_rule_pack_through_the_gateway() {
    let python = venv().join("bin/python");
    if !python.exists() {
        switchboard_testkit::missing::skip(
            "mcp_e2e",
            &format!(
                "a virtualenv with the Python `mcp` package at {}",
                venv().display()
            ),
            "create it with scripts/mcp-venv",
        );
        return;
    }

    let router = RouterProcess::spawn(&["--children", "1"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("control.db").display()
    );
    let store = Store::connect_with(
        &url,
        StoreOptions {
            max_connections: 4,
            sealing_key: Some(crate::support::secret_key()),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("open the store");

    let alice = human(&store, "alice").await;
    let bob = human(&store, "bob").await;
    let families = ["webhooks", "webhook-rules", "rule-pack-confirm", "todos"];
    let token_a = vend(&store, "alice", &alice, "alice-agent", &families).await;
    let token_a_no_install = vend(
        &store,
        "alice",
        &alice,
        "alice-reader",
        &["webhooks", "list_webhook_rules", "list_rule_packs", "todos"],
    )
    .await;
    let token_b = vend(&store, "bob", &bob, "bob-agent", &families).await;
    let webhook_b = webhook(&store, &bob).await;

    let (http, grpc, stop_control) = start_control(&store, &router.addr).await;
    // The session-based mode talks to a gateway served in-process, the stateless mode to a
    // `switchboard gateway` process: both ways `switchboard up` and operators run it.
    let gateway = BoundGateway::bind(GatewayConfig::new(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        grpc.to_string(),
    ))
    .await
    .expect("gateway binds");
    let in_process_url = gateway.url();
    let (stop_gateway, gateway_stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(gateway.serve(async move {
        let _ = gateway_stopped.await;
    }));
    let process = GatewayProcess::spawn(grpc);

    for mode in ["legacy", "2026-07-28"] {
        // A webhook of alice's per mode, with deliveries to replay.
        let webhook_a = webhook(&store, &alice).await;
        deliver_some(http, &webhook_a).await;
        // And one for hand-written rules.
        let webhook_hand = webhook(&store, &alice).await;
        let mcp_url = if mode == "legacy" {
            &in_process_url
        } else {
            &process.url
        };
        let output = tokio::process::Command::new(&python)
            .arg(story())
            .args(["--url", mcp_url, "--mode", mode])
            .args(["--token-a", &token_a])
            .args(["--token-a-no-install", &token_a_no_install])
            .args(["--token-b", &token_b])
            .args(["--webhook-a", &webhook_a.id, "--webhook-b", &webhook_b.id])
            .args(["--webhook-hand", &webhook_hand.id])
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(240), output)
            .await
            .expect("the story finishes within 4 minutes")
            .expect("python runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        println!("--- story ({mode}) ---\n{stdout}");
        assert!(
            output.status.success(),
            "the story failed in {mode} mode ({}):\n{stdout}\n{stderr}",
            output.status
        );
        assert!(stdout.contains(r#""step": "done""#), "{stdout}");

        // What the client saw is what control holds: the pack installed on A's webhook only.
        let saved = store
            .get_webhook(&alice, &webhook_a.id)
            .await
            .expect("alice's webhook");
        assert!(
            saved.config_version > webhook_a.config_version,
            "{mode}: the install saved"
        );
        let hand = store
            .get_webhook(&alice, &webhook_hand.id)
            .await
            .expect("the hand-written rules' webhook");
        assert_eq!(
            hand.config_version, 3,
            "{mode}: set, then patched; refusals saved nothing"
        );
        assert!(
            saved.provenance.iter().any(|p| p.name == "drop-ci-noise"),
            "{mode}: provenance recorded: {:?}",
            saved.provenance
        );
    }
    let untouched = store
        .get_webhook(&bob, &webhook_b.id)
        .await
        .expect("bob's webhook");
    assert_eq!(
        untouched.config_version, webhook_b.config_version,
        "bob's webhook is untouched"
    );

    let status = process
        .terminate()
        .expect("the gateway process stops on SIGTERM");
    assert!(
        status.success(),
        "the gateway process exits cleanly: {status}"
    );
    let _ = stop_gateway.send(());
    served
        .await
        .expect("gateway task")
        .expect("the gateway shut down cleanly");
    let _ = stop_control.send(());
    drop(router);
    store.close().await;
}

/// Where scripts/mcp-ts puts the TypeScript MCP SDK (or SWITCHBOARD_MCP_TS_DIR).
fn typescript_sdk() -> PathBuf {
    std::env::var_os("SWITCHBOARD_MCP_TS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-ts"))
}

/// Issue 49 item 6: the official TypeScript SDK, a typed client, lists every tool of a
/// `switchboard gateway` process without one warning (no format its validator does not know)
/// and validates each result it reads against the tool's output schema; `get_webhook` carries
/// what an agent needs (`confirm_policy`, the name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_reads_every_tool_schema_without_a_warning() {
    let sdk = typescript_sdk();
    if !sdk.join("node_modules/@modelcontextprotocol/sdk").exists() {
        switchboard_testkit::missing::skip(
            "mcp_e2e",
            &format!("the TypeScript MCP SDK at {}", sdk.display()),
            "install it with scripts/mcp-ts",
        );
        return;
    }
    let router = RouterProcess::spawn(&["--children", "1"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("control.db").display()
    );
    let store = Store::connect_with(
        &url,
        StoreOptions {
            max_connections: 4,
            sealing_key: Some(crate::support::secret_key()),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("open the store");
    let alice = human(&store, "alice").await;
    let token = vend(
        &store,
        "alice",
        &alice,
        "alice-agent",
        // Every family: the SDK compiles every tool's schema, trials' and confirms' too.
        &switchboard_model::verb::Family::ALL
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>(),
    )
    .await;
    let hook = webhook(&store, &alice).await;
    let (http, grpc, stop_control) = start_control(&store, &router.addr).await;
    deliver_some(http, &hook).await;
    let process = GatewayProcess::spawn(grpc);

    let output = tokio::process::Command::new("node")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-ts/check.cjs"))
        .arg(&sdk)
        .args([&process.url, &token, &hook.id])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("the check finishes within 2 minutes")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the TypeScript SDK's check failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(report["warnings"], serde_json::json!([]), "{report}");
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
    assert_eq!(
        report["tools"].as_u64(),
        u64::try_from(switchboard_model::verb::Verb::ALL.len()).ok(),
        "every tool listed and read: {report}"
    );
    assert!(
        report["called"].as_array().is_some_and(|c| c.len() == 6),
        "{report}"
    );
    drop(process);
    let _ = stop_control.send(());
    drop(router);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_role_guards_mcp_even_without_control() {
    // Control is not running: the gateway still starts, answers probes, and refuses what
    // it cannot check, rather than serving anyone.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let nowhere = unused.local_addr().expect("addr");
    drop(unused);
    let process = GatewayProcess::spawn(nowhere);
    let addr: SocketAddr = process
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .expect("the printed URL holds an address");
    let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let accept = [
        (
            "Accept".to_string(),
            "application/json, text/event-stream".to_string(),
        ),
        ("Content-Type".to_string(), "application/json".to_string()),
    ];
    let r = post(addr, "/mcp", &accept, list).await;
    assert_eq!(r.status, 401, "no credential");
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer error=\"invalid_token\"")
    );
    let mut with_bearer = accept.to_vec();
    with_bearer.push(("Authorization".into(), "Bearer sbe_whatever".into()));
    let r = post(addr, "/mcp", &with_bearer, list).await;
    assert_eq!(
        r.status,
        503,
        "control cannot be asked: {:?}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["error"]["code"], "control_unavailable");
    let status = process.terminate().expect("the gateway stops on SIGTERM");
    assert!(status.success(), "{status}");
}

/// One JSON-RPC message to the gateway at `url` (no session), and the JSON-RPC answer.
pub(crate) async fn mcp_post(
    url: &str,
    bearer: &str,
    message: serde_json::Value,
) -> serde_json::Value {
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .expect("the gateway URL is http://addr/mcp");
    let headers = [
        ("Authorization".to_string(), format!("Bearer {bearer}")),
        ("Content-Type".to_string(), "application/json".to_string()),
        (
            "Accept".to_string(),
            "application/json, text/event-stream".to_string(),
        ),
    ];
    let r = post(addr, "/mcp", &headers, message.to_string().as_bytes()).await;
    let text = String::from_utf8_lossy(&r.body).to_string();
    assert_eq!(r.status, 200, "{text}");
    // A JSON body, or server-sent events whose data lines carry the messages.
    std::iter::once(text.as_str())
        .chain(text.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|t| serde_json::from_str::<serde_json::Value>(t.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {text}"))
}

/// Through the real control: one MCP request costs one unit of the endpoint's request
/// budget, whether it calls a verb (which pays; its WhoAmI does not), lists tools, or is a
/// tool call the gateway refuses itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_request_costs_one_unit_of_the_endpoint_budget() {
    let router = RouterProcess::spawn(&["--children", "1"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
    let store = Store::connect(&url, &crate::support::secret_key())
        .await
        .expect("open the store");
    let alice = human(&store, "alice").await;
    let token = vend(&store, "alice", &alice, "agent", &["list_webhooks"]).await;
    let limits = Limits {
        requests_per_endpoint_per_minute: 4,
        ..Limits::default()
    };
    let (_http, grpc, _stop) = start_control_with(&store, &router.addr, limits).await;
    let gateway = BoundGateway::bind(GatewayConfig::new(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        grpc.to_string(),
    ))
    .await
    .expect("gateway binds");
    let mcp = gateway.url();
    tokio::spawn(gateway.serve(std::future::pending::<()>()));

    let call = |id: u64, tool: &str| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}})
    };
    let is_error = |m: &serde_json::Value| m["result"]["isError"] == true;
    // Four units: two tool calls, a listing, and a call the gateway refuses itself.
    assert!(!is_error(
        &mcp_post(&mcp, &token, call(1, "list_webhooks")).await
    ));
    assert!(!is_error(
        &mcp_post(&mcp, &token, call(2, "list_webhooks")).await
    ));
    let listed = mcp_post(
        &mcp,
        &token,
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    )
    .await;
    assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(1));
    let refused = mcp_post(&mcp, &token, call(4, "delete_webhook")).await;
    assert!(is_error(&refused), "{refused}");
    assert!(
        refused.to_string().contains("permission_denied"),
        "{refused}"
    );
    // The fifth is over the budget.
    let fifth = mcp_post(&mcp, &token, call(5, "list_webhooks")).await;
    assert!(is_error(&fifth), "{fifth}");
    assert!(fifth.to_string().contains("rate_limited"), "{fifth}");
}

/// One MCP tool call: its structured result, or its error object (`code`, `message`, …).
async fn mcp_tool(
    mcp: &str,
    bearer: &str,
    name: &str,
    arguments: serde_json::Value,
) -> serde_json::Value {
    let answer = mcp_post(
        mcp,
        bearer,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}),
    )
    .await;
    let result = &answer["result"];
    if result["isError"] == true {
        let text = result["content"][0]["text"].as_str().unwrap_or("{}");
        return serde_json::from_str::<serde_json::Value>(text).unwrap_or_default()["error"]
            .clone();
    }
    result["structuredContent"].clone()
}

/// Issue 21 over MCP through the real control: claim_todo answers the lease's end as RFC 3339,
/// list_todos shows holder and expiry, release_todo gives a claim up (another agent's release
/// is a conflict), and past the lease the lapsed holder is refused once another took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todo_leases_over_mcp() {
    use serde_json::json;
    use switchboard_control::Clock;
    use switchboard_control::store::{NewEvent, NewTodo, RecordDecision};

    let router = RouterProcess::spawn(&["--children", "1"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
    let clock = Clock::manual(1_800_000_000_000);
    let store = Store::connect(&url, &crate::support::secret_key())
        .await
        .expect("open the store")
        .with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let a = vend(&store, "alice", &alice, "agent-a", &["todos"]).await;
    let b = vend(&store, "alice", &alice, "agent-b", &["todos"]).await;
    let w = webhook(&store, &alice).await;
    let mut todos = Vec::new();
    for n in 0..2 {
        let event = store
            .insert_event(NewEvent {
                webhook_id: w.id.clone(),
                delivery_id: format!("d-{n}"),
                kind: "issues.opened".into(),
                headers: vec![],
                body: b"{}".to_vec().into(),
                verified: true,
            })
            .await
            .expect("event");
        let decided = store
            .record_decision(
                &event.id,
                RecordDecision {
                    decision: switchboard_model::RecordedDecision::to_queue("forge"),
                    fault: None,
                    todo: Some(NewTodo {
                        queue: "forge".into(),
                        rule_id: None,
                    }),
                    decided_by: None,
                },
            )
            .await
            .expect("decided")
            .expect("a todo");
        todos.push(decided.todo.id);
        clock.advance(Duration::from_secs(1));
    }
    let (_http, grpc, _stop) = start_control(&store, &router.addr).await;
    let gateway = BoundGateway::bind(GatewayConfig::new(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        grpc.to_string(),
    ))
    .await
    .expect("gateway binds");
    let mcp = gateway.url();
    tokio::spawn(gateway.serve(std::future::pending::<()>()));
    let todo = |id: &str| json!({"todo_id": id});

    let claimed = mcp_tool(&mcp, &a, "claim_todo", todo(&todos[0])).await;
    let expires = switchboard_model::rfc3339_millis(clock.now_ms() + 30 * 60 * 1000);
    assert_eq!(claimed["todo"]["state"], "claimed", "{claimed}");
    assert_eq!(claimed["todo"]["claim_expires_at"], expires.as_str());
    let listed = mcp_tool(&mcp, &b, "list_todos", json!({"queue": "forge"})).await;
    let holder = claimed["todo"]["claimed_by"].clone();
    assert_eq!(listed["todos"][0]["claimed_by"], holder, "{listed}");
    assert_eq!(listed["todos"][0]["claim_expires_at"], expires.as_str());
    assert_eq!(
        listed["todos"][1]["claim_expires_at"],
        serde_json::Value::Null
    );

    let refused = mcp_tool(&mcp, &b, "release_todo", todo(&todos[0])).await;
    assert_eq!(refused["code"], "conflict", "{refused}");
    let released = mcp_tool(&mcp, &a, "release_todo", todo(&todos[0])).await;
    assert_eq!(
        (
            &released["todo"]["state"],
            &released["todo"]["claimed_by"],
            &released["todo"]["claim_expires_at"]
        ),
        (
            &json!("open"),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        ),
        "{released}"
    );

    // Past the lease: listed unclaimed, taken by b; a's completion is refused, saying why.
    mcp_tool(&mcp, &a, "claim_todo", todo(&todos[1])).await;
    clock.advance(Duration::from_secs(30 * 60));
    let unclaimed = mcp_tool(
        &mcp,
        &b,
        "list_todos",
        json!({"queue": "forge", "filter": "unclaimed"}),
    )
    .await;
    assert_eq!(
        unclaimed["todos"].as_array().map(Vec::len),
        Some(2),
        "{unclaimed}"
    );
    assert_eq!(unclaimed["todos"][1]["state"], "open");
    assert_eq!(unclaimed["todos"][1]["claimed_by"], holder);
    let taken = mcp_tool(&mcp, &b, "claim_todo", todo(&todos[1])).await;
    assert_eq!(taken["todo"]["state"], "claimed", "{taken}");
    let late = mcp_tool(&mcp, &a, "complete_todo", todo(&todos[1])).await;
    assert_eq!(late["code"], "conflict", "{late}");
    assert!(
        late["message"]
            .as_str()
            .unwrap_or_default()
            .contains("expired"),
        "{late}"
    );
    let done = mcp_tool(&mcp, &b, "complete_todo", todo(&todos[1])).await;
    assert_eq!(done["todo"]["state"], "completed", "{done}");
}

/// Issue 21 item 6 end to end: real signed deliveries through ingest are quarantined by a bad
/// rule and routed by a real `switchboard router` process; the rule is fixed, and an agent
/// plans the redrive and confirms it through the real `switchboard gateway` binary. Each
/// quarantined delivery becomes one todo, exactly once; the same plan confirmed again is
/// refused as plan_stale naming redrive_webhook_events, and a new plan finds nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_of_quarantined_events_after_a_fix() {
    use serde_json::json;

    let router = RouterProcess::spawn(&["--children", "1"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
    let store = Store::connect(&url, &crate::support::secret_key())
        .await
        .expect("open the store");
    let alice = human(&store, "alice").await;
    let agent = vend(
        &store,
        "alice",
        &alice,
        "fixer",
        &["webhook-rules", "todos", "webhooks"],
    )
    .await;
    let w = webhook(&store, &alice).await;
    // The bad rule: pull requests and failed check runs are quarantined instead of reviewed.
    let bad = json!({"rules": [
        {"id": "prs", "when": ".kind == \"pull_request.opened\" or .kind == \"check_run.completed\"",
         "action": {"quarantine": true}},
    ], "params": {}});
    let (http, grpc, _stop) = start_control(&store, &router.addr).await;
    let gateway = GatewayProcess::spawn(grpc);
    let mcp = gateway.url.clone();
    let saved = mcp_tool(
        &mcp,
        &agent,
        "set_webhook_rules",
        json!({"webhook_id": w.id, "configuration": bad}),
    )
    .await;
    assert_eq!(saved["version"], 2, "{saved}");
    deliver_some(http, &w).await;
    let listed = mcp_tool(
        &mcp,
        &agent,
        "list_webhook_events",
        json!({"webhook_id": w.id}),
    )
    .await;
    let quarantined: Vec<String> = listed["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["decision"]["decision"] == "quarantine")
        .map(|e| e["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(quarantined.len(), 2, "{listed}");
    let none = mcp_tool(&mcp, &agent, "list_todos", json!({"queue": "review"})).await;
    assert_eq!(none["todos"], json!([]), "{none}");

    // The fix: the same deliveries go to review.
    let fixed = json!({"rules": [
        {"id": "prs", "when": ".kind == \"pull_request.opened\" or .kind == \"check_run.completed\"",
         "action": {"queue": "review"}},
    ], "params": {}});
    let saved = mcp_tool(
        &mcp,
        &agent,
        "set_webhook_rules",
        json!({"webhook_id": w.id, "configuration": fixed, "expected_version": 2}),
    )
    .await;
    assert_eq!(saved["version"], 3, "{saved}");

    let plan = mcp_tool(
        &mcp,
        &agent,
        "redrive_webhook_events",
        json!({"webhook_id": w.id, "filter": {"decisions": ["quarantine"]}}),
    )
    .await;
    assert_eq!(plan["config_version"], 3, "{plan}");
    assert_eq!(plan["changes"], 2, "{plan}");
    assert_eq!(plan["totals_before"], json!({"quarantine": 2}));
    assert_eq!(plan["totals_after"], json!({"queue:review": 2}));
    let mut planned: Vec<String> = plan["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["event_id"].as_str().unwrap_or_default().to_string())
        .collect();
    planned.sort();
    let mut expected = quarantined.clone();
    expected.sort();
    assert_eq!(planned, expected);
    // Planning changed nothing.
    let still = mcp_tool(&mcp, &agent, "list_todos", json!({"queue": "review"})).await;
    assert_eq!(still["todos"], json!([]), "{still}");

    let with = &plan["confirm_with"];
    assert_eq!(with["tool"], "confirm_webhook_redrive");
    let confirm = json!({"webhook_id": with["webhook_id"], "plan_token": with["plan_token"]});
    let done = mcp_tool(&mcp, &agent, "confirm_webhook_redrive", confirm.clone()).await;
    assert_eq!(
        (&done["applied"], &done["skipped"], &done["todos_created"]),
        (&json!(2), &json!(0), &json!(2)),
        "{done}"
    );
    let todos = mcp_tool(&mcp, &agent, "list_todos", json!({"queue": "review"})).await;
    assert_eq!(todos["todos"].as_array().map(Vec::len), Some(2), "{todos}");

    // The same plan again: refused, nothing doubled.
    let again = mcp_tool(&mcp, &agent, "confirm_webhook_redrive", confirm).await;
    assert_eq!(again["code"], "plan_stale", "{again}");
    assert!(
        again.to_string().contains("redrive_webhook_events"),
        "{again}"
    );
    let todos = mcp_tool(&mcp, &agent, "list_todos", json!({"queue": "review"})).await;
    assert_eq!(todos["todos"].as_array().map(Vec::len), Some(2), "{todos}");
    let nothing = mcp_tool(
        &mcp,
        &agent,
        "redrive_webhook_events",
        json!({"webhook_id": w.id, "filter": {"decisions": ["quarantine"]}}),
    )
    .await;
    assert_eq!(nothing["events"], json!([]), "{nothing}");
    drop(gateway);
}
