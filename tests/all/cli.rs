//! The binary's roles as operators run them: `switchboard control` and `switchboard up` as
//! processes (their printed lines parsed, deliveries POSTed, SIGTERM at the end), and the
//! `switchboard admin` operator CLI over the store.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use switchboard_control::store::{Page, SourceType, TodoFilter};
use switchboard_control::{OwnerScope, Role, Store};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::todos_client::TodosClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::control_harness::{TestDb, human, on_every_backend, post, signed, webhook};
use crate::support::{RouterProcess, binary, payload};

on_every_backend! {
    control_role_serves_ingest_and_grpc_then_stops_cleanly,
    admin_cli_manages_tenancy_webhooks_and_endpoints,
}

/// A `switchboard` process whose stdout lines are read as they come. Killed when dropped.
pub(crate) struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Process {
    pub(crate) fn spawn(args: &[&str], env: &[(&str, &str)]) -> Process {
        Process::spawn_logging(args, env, Stdio::inherit())
    }

    /// Like [`Process::spawn`], with the process's log (stderr) going to `log`.
    pub(crate) fn spawn_logging(args: &[&str], env: &[(&str, &str)], log: Stdio) -> Process {
        let mut command = Command::new(binary());
        command
            .args(args)
            .env("SWITCHBOARD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("switchboard starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Process {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The rest of the first line that starts with `prefix`, waiting for it if needed.
    pub(crate) fn line(&mut self, prefix: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.starts_with(prefix)) {
            return l[prefix.len()..].to_string();
        }
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if let Some(rest) = l.strip_prefix(prefix) {
                        return rest.to_string();
                    }
                }
                Err(e) => panic!("no line {prefix:?} ({e}); saw {:?}", self.seen),
            }
        }
    }

    pub(crate) fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM");
    }

    pub(crate) fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the process did not stop within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Child processes of this process (its sandbox children).
    pub(crate) fn children(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let dir = format!("/proc/{}/task", self.child.id());
        let Ok(tasks) = std::fs::read_dir(dir) else {
            return out;
        };
        for t in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
        out
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn grpc_health(addr: &str) -> i32 {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("grpc connects");
    let mut health = HealthClient::new(channel);
    health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health answers")
        .into_inner()
        .status
}

pub async fn control_role_serves_ingest_and_grpc_then_stops_cleanly(db: TestDb) {
    let router = RouterProcess::spawn(&["--children", "1"]);
    let scope = human(&db.store, "alice").await;
    let hook = webhook(&db.store, &scope, SourceType::Github, None).await;
    // Flags win over the environment, which wins over the defaults: the environment names a
    // router that does not exist (the flag's is used) and the gRPC address (no flag for it).
    let mut control = Process::spawn(
        &[
            "control",
            "--database-url",
            &db.url,
            "--http-listen",
            "127.0.0.1:0",
            "--routers",
            &router.addr,
            "--readiness-grace-ms",
            "2000",
        ],
        &[
            ("SWITCHBOARD_ROUTERS", "127.0.0.1:1"),
            ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ],
    );
    let http: SocketAddr = control
        .line("ingest listening on http://")
        .parse()
        .expect("http address");
    let grpc = control.line("control grpc listening on ");
    assert_ne!(grpc, "127.0.0.1:7700", "the environment's address was used");
    assert_eq!(grpc_health(&grpc).await, ServingStatus::Serving as i32);

    let p = payload("github", "pull_request.opened.json");
    let headers = signed("github", "pull_request", "proc-1", &hook.secret, &p.body);
    let resp = post(http, &format!("/hooks/{}", hook.id), &headers, &p.body).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    let answer = resp.json();
    assert_eq!(answer["decision"], "default", "routed by the flag's router");
    assert_eq!(answer["verified"], true);
    let todos = db
        .store
        .list_todos(&scope, "forge", TodoFilter::All, &Page::first(10))
        .await
        .expect("todos")
        .items;
    assert_eq!(todos.len(), 1);
    assert_eq!(todos[0].id, answer["todo_id"].as_str().unwrap());

    assert_eq!(get(http, "/healthz").await.status, 200);
    assert_eq!(get(http, "/readyz").await.status, 200);

    // SIGTERM: readiness goes first (gRPC health and /readyz), the listeners stay open through
    // the grace period, then everything drains and the process exits cleanly.
    control.terminate();
    let mut flipped = false;
    for _ in 0..100 {
        if grpc_health(&grpc).await == ServingStatus::NotServing as i32 {
            flipped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(flipped, "gRPC health reports NOT_SERVING while draining");
    assert_eq!(get(http, "/readyz").await.status, 503);
    let status = control.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "clean exit: {status:?}");
}

async fn get(addr: SocketAddr, path: &str) -> crate::control_harness::HttpResponse {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    crate::control_harness::http_raw(addr, head.into_bytes(), Vec::new()).await
}

/// Runs `switchboard admin --database-url <url> <args>` with `stdin`, returning (success,
/// stdout, stderr).
fn admin(url: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(binary())
        .args(["admin", "--database-url", url])
        .args(args)
        .env("SWITCHBOARD_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("admin starts");
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    let out = child.wait_with_output().expect("admin runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn after<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in {text:?}"))
        .trim()
}

pub async fn admin_cli_manages_tenancy_webhooks_and_endpoints(db: TestDb) {
    // Each command is a short process; blocking this test's worker while it runs is fine.
    let run = |args: &[&str], stdin: &str| admin(&db.url, args, stdin);
    let ok = |(ok, out, err): (bool, String, String)| {
        assert!(ok, "admin failed: {out}\n{err}");
        out
    };

    ok(run(&["human", "create", "alice"], ""));
    ok(run(&["human", "create", "bob"], ""));
    ok(run(&["team", "create", "platform"], ""));
    let out = ok(run(
        &["team", "add-member", "platform", "bob", "--role", "editor"],
        "",
    ));
    assert!(out.contains("bob is editor of team:platform"), "{out}");
    assert_eq!(
        db.store
            .role_in_scope("bob", &OwnerScope::team("platform"))
            .await
            .unwrap(),
        Some(Role::Editor)
    );
    let (done, _, err) = run(&["human", "create", "alice"], "");
    assert!(!done && err.contains("exists"), "{err}");
    let (done, _, err) = run(
        &["team", "add-member", "platform", "bob", "--role", "owner"],
        "",
    );
    assert!(!done && err.contains("not a role"), "{err}");

    // A webhook: id, ingest path and the secret printed once.
    let out = ok(run(
        &[
            "webhook",
            "create",
            "--scope",
            "team:platform",
            "--source",
            "gitea",
            "--grant",
            "forge,review",
            "--reject-unverified",
        ],
        "",
    ));
    let id = after(&out, "webhook ")
        .trim_end_matches(" created")
        .to_string();
    let secret = after(&out, "secret (shown once; give it to the forge):").to_string();
    assert_eq!(after(&out, "ingest path:"), format!("/hooks/{id}"));
    let team = OwnerScope::team("platform");
    let stored = db.store.get_webhook(&team, &id).await.expect("created");
    assert_eq!(stored.secret, secret);
    assert_eq!(stored.source_type, SourceType::Gitea);
    assert!(stored.reject_unverified);
    assert_eq!(stored.grant, vec!["forge", "review"]);
    let out = ok(run(
        &[
            "webhook",
            "create",
            "--scope",
            "human:alice",
            "--source",
            "github",
            "--grant",
            "triage",
            "--secret",
            "a-given-secret-of-length",
        ],
        "",
    ));
    assert!(out.contains("a-given-secret-of-length"));
    let (done, _, err) = run(
        &[
            "webhook",
            "create",
            "--scope",
            "team:nobody",
            "--source",
            "github",
            "--grant",
            "x",
        ],
        "",
    );
    assert!(!done && err.contains("owner_scope"), "{err}");

    // Grants are an operator's to change; a webhook is named by id alone.
    let out = ok(run(
        &["webhook", "grant", &id, "--grant", "forge,review,triage"],
        "",
    ));
    assert!(out.contains("may route to: forge,review,triage"), "{out}");
    assert_eq!(
        db.store.get_webhook(&team, &id).await.unwrap().grant,
        vec!["forge", "review", "triage"]
    );
    let (done, _, err) = run(&["webhook", "grant", "wh_nope", "--grant", "forge"], "");
    assert!(!done && err.contains("not found"), "{err}");
    let listed = ok(run(&["webhook", "list", "--scope", "team:platform"], ""));
    assert!(
        listed.contains(&id) && !listed.contains(&secret),
        "{listed}"
    );

    // Vending: the verbs grouped by family, a question, the credential once.
    let vend = [
        "endpoint",
        "vend",
        "--human",
        "bob",
        "--scope",
        "team:platform",
        "--verbs",
        "webhooks,webhook-rules,list_todos",
    ];
    let (done, out, err) = run(&vend, "n\n");
    assert!(!done, "declined");
    assert!(
        out.contains("webhooks (the whole family): create_webhook"),
        "{out}"
    );
    assert!(out.contains("webhook-rules (the whole family):"), "{out}");
    assert!(out.contains("todos: list_todos"), "{out}");
    assert!(
        err.contains("vend this endpoint? [y/N]") && err.contains("nothing vended"),
        "{err}"
    );
    let (done, _, _) = run(&vend, "");
    assert!(!done, "no answer is no");
    assert!(db.store.list_endpoints(None).await.unwrap().is_empty());

    let out = ok(run(&vend, "y\n"));
    let credential = after(
        &out,
        "credential (shown once; it is stored only as a hash):",
    )
    .to_string();
    let endpoint_id = after(&out, "endpoint ")
        .trim_end_matches(" vended")
        .to_string();
    let endpoint = db
        .store
        .authenticate(&credential)
        .await
        .unwrap()
        .expect("the credential works");
    assert_eq!(endpoint.id, endpoint_id);
    assert_eq!(endpoint.owner_scope, team);
    assert!(endpoint.allows("install_rule_pack") && endpoint.allows("list_todos"));
    assert!(!endpoint.allows("claim_todo"));

    let mut yes = vend.to_vec();
    yes.push("--yes");
    let out = ok(run(&yes, ""));
    assert!(out.contains("credential (shown once"), "--yes asks nothing");

    // A human with no role in the scope gets nothing, and is not even asked.
    let (done, _, err) = run(
        &[
            "endpoint",
            "vend",
            "--human",
            "alice",
            "--scope",
            "team:platform",
            "--verbs",
            "todos",
            "--yes",
        ],
        "",
    );
    assert!(!done && err.contains("holds no role"), "{err}");
    let (done, _, err) = run(
        &[
            "endpoint",
            "vend",
            "--human",
            "bob",
            "--scope",
            "team:platform",
            "--verbs",
            "drop_tables",
            "--yes",
        ],
        "",
    );
    assert!(
        !done && err.contains("neither a verb family nor a verb"),
        "{err}"
    );

    // Listing never shows a credential; revoking stops it at once.
    let listed = ok(run(&["endpoint", "list"], ""));
    assert!(listed.contains(&endpoint_id), "{listed}");
    assert!(!listed.contains("sbe_"), "{listed}");
    ok(run(&["endpoint", "revoke", &endpoint_id], ""));
    assert!(db.store.authenticate(&credential).await.unwrap().is_none());
    let listed = ok(run(&["endpoint", "list", "--scope", "team:platform"], ""));
    assert!(listed.contains("revoked"), "{listed}");
}

/// Reads every line of `switchboard up` this test needs.
pub(crate) struct UpLines {
    pub ingest_url: String,
    pub secret: String,
    pub grpc: String,
    pub token: String,
    pub database: String,
    pub webhook: String,
    pub mcp_url: String,
}

pub(crate) fn up_lines(up: &mut Process) -> UpLines {
    let router = up.line("router listening on ");
    assert!(router.starts_with("127.0.0.1:"), "{router}");
    let lines = UpLines {
        ingest_url: up.line("ingest url: "),
        secret: up.line("webhook secret: "),
        grpc: up.line("control grpc listening on "),
        token: up.line("bearer token: "),
        database: up.line("database: "),
        mcp_url: up.line("mcp url: "),
        webhook: up
            .line("webhook: ")
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
    };
    up.line("switchboard up: ready");
    lines
}

/// The arguments of the README's run command (`cargo run --release -- <args>`): the first
/// command of the first `sh` block under "The two commands".
fn readme_run_args() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let section = readme
        .split("## The two commands")
        .nth(1)
        .expect("README has \"The two commands\"");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.lines().next())
        .expect("a sh block with the run command");
    let args = block
        .strip_prefix("cargo run --release -- ")
        .unwrap_or_else(|| panic!("the run command is `cargo run --release -- …`: {block}"));
    args.split_whitespace().map(str::to_string).collect()
}

/// The README's run command, as a newcomer types it, on a fresh data directory; only the
/// ports (free ones) and the number of sandbox children differ, through the environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_runs_every_role_and_restarts_with_the_same_webhook() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().expect("utf-8 path");
    let readme_args = readme_run_args();
    assert_eq!(readme_args, ["up"], "the README runs `switchboard up`");
    let args: Vec<&str> = readme_args.iter().map(String::as_str).collect();
    let env = [
        ("SWITCHBOARD_DATA_DIR", data),
        ("SWITCHBOARD_HTTP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_MCP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_ROUTER_CHILDREN", "1"),
    ];
    let mut up = Process::spawn(&args, &env);
    let first = up_lines(&mut up);
    assert!(first.ingest_url.starts_with("http://127.0.0.1:"));
    assert!(
        first
            .ingest_url
            .ends_with(&format!("/hooks/{}", first.webhook))
    );
    assert!(first.token.starts_with("sbe_"));
    assert!(first.database.starts_with("sqlite://"));
    assert!(
        !up.children().is_empty(),
        "the router's sandbox children are ours"
    );

    // The MCP gateway answers at the printed URL, and only to a bearer.
    let mcp = first
        .mcp_url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .expect("mcp url");
    let mcp: SocketAddr = mcp.parse().expect("mcp address");
    assert_eq!(get(mcp, "/healthz").await.status, 200);
    let unauthenticated = post(
        mcp,
        "/mcp",
        &[("Content-Type".to_string(), "application/json".to_string())],
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(unauthenticated.status, 401, "{unauthenticated:?}");

    // A real delivery, signed as GitHub signs, to the printed URL.
    let (authority, path) = first
        .ingest_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .expect("url");
    let http: SocketAddr = authority.parse().expect("address");
    let p = payload("github", "pull_request.opened.json");
    let headers = signed("github", "pull_request", "up-1", &first.secret, &p.body);
    let resp = post(http, &format!("/{path}"), &headers, &p.body).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    let answer = resp.json();
    assert_eq!(answer["verified"], true);
    assert_eq!(answer["decision"], "default");
    let todo_id = answer["todo_id"].as_str().expect("todo").to_string();

    // The todo, seen through the control gRPC API with the printed token …
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", first.grpc))
        .expect("endpoint")
        .connect()
        .await
        .expect("grpc connects");
    let token: tonic::metadata::MetadataValue<_> =
        format!("Bearer {}", first.token).parse().expect("metadata");
    let mut todos = TodosClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
        req.metadata_mut().insert("authorization", token.clone());
        Ok(req)
    });
    let listed = todos
        .list_todos(pb::ListTodosRequest {
            queue: "forge".into(),
            ..Default::default()
        })
        .await
        .expect("list todos")
        .into_inner();
    assert_eq!(listed.todos.len(), 1);
    assert_eq!(listed.todos[0].id, todo_id);

    // … and in the printed SQLite file.
    let store = Store::connect(&first.database)
        .await
        .expect("open the file");
    let stored = store
        .list_todos(
            &OwnerScope::human("dev"),
            "forge",
            TodoFilter::All,
            &Page::first(10),
        )
        .await
        .expect("todos")
        .items;
    assert_eq!(stored.len(), 1);
    store.close().await;

    up.terminate();
    let status = up.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "clean exit: {status:?}");

    // Again on the same data directory: the same webhook and secret, a new token.
    let mut again = Process::spawn(&args, &env);
    let second = up_lines(&mut again);
    assert_eq!(second.webhook, first.webhook);
    assert_eq!(second.secret, first.secret);
    assert_ne!(
        second.token, first.token,
        "a token is shown once; each start vends one"
    );
    again.terminate();
    assert!(again.wait_exit(Duration::from_secs(30)).success());
}
