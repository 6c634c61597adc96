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
    control_refuses_to_start_without_the_key_that_sealed_its_secrets,
    admin_rotates_the_secret_key_and_only_the_new_one_opens_the_store,
    admin_output_json_round_trips_through_jq,
}

/// `switchboard control` on `url` with `key_env` as its key (`None`: no key given), expected
/// to exit at once: its stderr.
fn control_exits_with(url: &str, key_env: Option<&str>) -> String {
    let mut command = Command::new(binary());
    command
        .args([
            "control",
            "--database-url",
            url,
            "--http-listen",
            "127.0.0.1:0",
        ])
        .env("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0")
        .env("SWITCHBOARD_LOG", "warn")
        .env_remove(crate::support::SECRET_KEY_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(key) = key_env {
        command.env(crate::support::SECRET_KEY_ENV, key);
    }
    let out = command.output().expect("control runs");
    assert!(!out.status.success(), "control started without its key");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A wrong or missing sealing key is a clear start-up error, never unverified deliveries.
pub async fn control_refuses_to_start_without_the_key_that_sealed_its_secrets(db: TestDb) {
    let scope = human(&db.store, "alice").await;
    webhook(&db.store, &scope, SourceType::Github, None).await;
    let missing = control_exits_with(&db.url, None);
    assert!(missing.contains("no secret key"), "{missing}");
    let other = switchboard_control::SealingKey::generate_hex().expect("a key");
    let wrong = control_exits_with(&db.url, Some(&other));
    assert!(
        wrong.contains(db.store.sealing_key().id()) && wrong.contains("sealed with key"),
        "{wrong}"
    );
    let malformed = control_exits_with(&db.url, Some("not-a-key"));
    assert!(malformed.contains("64 hex digits"), "{malformed}");
}

/// `admin secret-key generate` makes a key file (0600); `admin secret-key rotate` seals every
/// secret with it; afterwards the old key is refused and the new one opens every webhook.
pub async fn admin_rotates_the_secret_key_and_only_the_new_one_opens_the_store(db: TestDb) {
    let scope = human(&db.store, "alice").await;
    let hook = webhook(&db.store, &scope, SourceType::Github, None).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("new.key");
    let file_arg = file.to_str().expect("utf-8 path");
    let (done, out, err) = admin_store(&["secret-key", "generate", file_arg]);
    assert!(done, "{err}");
    assert!(out.contains("written to"), "{out}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file)
            .expect("the key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (done, out, err) = admin_store(&[
        "secret-key",
        "rotate",
        "--new-key-file",
        file_arg,
        "--database-url",
        &db.url,
    ]);
    assert!(done, "{err}");
    assert!(out.contains("1 webhook secrets sealed again"), "{out}");
    let new = switchboard_control::SealingKey::load(&file).expect("the new key");
    // With --output json, one object on stdout: the key made, and a rotation's count.
    let other = dir.path().join("other.key");
    let (done, out, err) = admin_store(&[
        "--output",
        "json",
        "secret-key",
        "generate",
        other.to_str().expect("utf-8 path"),
    ]);
    assert!(done, "{err}");
    let made: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    let hex = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .expect("a key file")
            .trim()
            .to_string()
    };
    let other_key = switchboard_control::SealingKey::load(&other).expect("the other key");
    assert_eq!(made["key_id"], other_key.id(), "{out}");
    let (done, out, err) = admin_with(
        &[(crate::support::SECRET_KEY_ENV, hex(&file).as_str())],
        &[
            "secret-key",
            "rotate",
            "--new-key-file",
            other.to_str().expect("utf-8 path"),
            "--database-url",
            &db.url,
            "--output",
            "json",
        ],
        "",
    );
    assert!(done, "{err}");
    let rotated: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(
        (
            &rotated["resealed"],
            &rotated["key_id"],
            &rotated["previous_key_id"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(other_key.id()),
            &serde_json::json!(new.id())
        ),
        "{out}"
    );
    // Back to the key the rest of this test opens the store with.
    let (done, _, err) = admin_with(
        &[(crate::support::SECRET_KEY_ENV, hex(&other).as_str())],
        &[
            "secret-key",
            "rotate",
            "--new-key-file",
            file_arg,
            "--database-url",
            &db.url,
        ],
        "",
    );
    assert!(done, "{err}");
    assert!(
        Store::connect(&db.url, db.store.sealing_key())
            .await
            .is_err(),
        "the old key is refused"
    );
    let reopened = Store::connect(&db.url, &new)
        .await
        .expect("the new key opens it");
    assert_eq!(
        reopened
            .webhook_for_ingest(&hook.id)
            .await
            .expect("read")
            .secret,
        hook.secret
    );
    reopened.close().await;
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

    /// SIGKILL: no shutdown, no draining, as a crash or an OOM kill ends it.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    // The secret as the landing before sealing stored it, in the clear: control seals it at
    // start and the webhook's deliveries still verify (asserted below).
    sqlx::query("UPDATE webhooks SET secret = $1 WHERE id = $2")
        .bind(hook.secret.as_str())
        .bind(hook.id.as_str())
        .execute(db.store.pool())
        .await
        .expect("a secret in the clear");
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
            (
                crate::support::SECRET_KEY_ENV,
                crate::support::secret_key_hex(),
            ),
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
    assert_eq!(
        answer["verified"], true,
        "the secret sealed at start still verifies"
    );
    let stored: String = sqlx::query_scalar("SELECT secret FROM webhooks WHERE id = $1")
        .bind(hook.id.as_str())
        .fetch_one(db.store.pool())
        .await
        .expect("the stored secret");
    assert!(
        stored.starts_with("sealed:v1:") && !stored.contains(&hook.secret),
        "sealed at rest"
    );
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

/// Runs `switchboard admin <args>` with `env`, writing `stdin` to it. Neither the database
/// nor the key is in its environment unless `env` puts them there.
fn admin_output(env: &[(&str, &str)], args: &[&str], stdin: &str) -> std::process::Output {
    let mut command = Command::new(binary());
    command
        .arg("admin")
        .args(args)
        .env("SWITCHBOARD_LOG", "warn")
        .env_remove(crate::support::SECRET_KEY_ENV)
        .env_remove("SWITCHBOARD_DATABASE_URL")
        .env_remove("SWITCHBOARD_OPERATOR_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("admin starts");
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    child.wait_with_output().expect("admin runs")
}

/// [`admin_output`] as (success, stdout, stderr).
fn admin_with(env: &[(&str, &str)], args: &[&str], stdin: &str) -> (bool, String, String) {
    let out = admin_output(env, args, stdin);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`admin_output`] with nothing on stdin, as (exit code, stderr).
fn admin_exit(env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let out = admin_output(env, args, "");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The commands that open the store directly (`operator bootstrap`, `secret-key …`), with the
/// test key in the environment.
fn admin_store(args: &[&str]) -> (bool, String, String) {
    admin_with(
        &[(
            crate::support::SECRET_KEY_ENV,
            crate::support::secret_key_hex(),
        )],
        args,
        "",
    )
}

/// `switchboard admin operator bootstrap` on `url`: the operator token it printed once.
pub(crate) fn bootstrap_operator(url: &str) -> String {
    let (done, out, err) = admin_store(&["operator", "bootstrap", "--database-url", url]);
    assert!(done, "bootstrap failed: {err}");
    after(
        &out,
        "operator token (shown once; it is stored only as a hash):",
    )
    .to_string()
}

/// A real `switchboard control` on `url` (with a real router) for the admin CLI to call.
pub(crate) fn control_for_admin(url: &str) -> (RouterProcess, Process, String) {
    let router = RouterProcess::spawn(&["--children", "1"]);
    let mut control = Process::spawn(
        &[
            "control",
            "--database-url",
            url,
            "--http-listen",
            "127.0.0.1:0",
            "--routers",
            &router.addr,
        ],
        &[
            (
                crate::support::SECRET_KEY_ENV,
                crate::support::secret_key_hex(),
            ),
            ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ],
    );
    let grpc = control.line("control grpc listening on ");
    (router, control, grpc)
}

fn after<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in {text:?}"))
        .trim()
}

pub async fn admin_cli_manages_tenancy_webhooks_and_endpoints(db: TestDb) {
    // The first operator credential from the database; everything else over control's API.
    let token = bootstrap_operator(&db.url);
    assert!(token.starts_with("sbo_"), "{token}");
    let (_router, _control, grpc) = control_for_admin(&db.url);
    let client_env = [
        ("SWITCHBOARD_CONTROL", grpc.as_str()),
        ("SWITCHBOARD_OPERATOR_TOKEN", token.as_str()),
    ];
    // Each command is a short process; blocking this test's worker while it runs is fine.
    let run = |args: &[&str], stdin: &str| admin_with(&client_env, args, stdin);
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
    // Offboarding (issue 49): a member taken out holds no role there at once.
    ok(run(&["human", "create", "carol"], ""));
    ok(run(
        &[
            "team",
            "add-member",
            "platform",
            "carol",
            "--role",
            "viewer",
        ],
        "",
    ));
    let out = ok(run(&["team", "remove-member", "platform", "carol"], ""));
    assert!(
        out.contains("carol is no longer a member of team:platform"),
        "{out}"
    );
    assert_eq!(
        db.store
            .role_in_scope("carol", &OwnerScope::team("platform"))
            .await
            .unwrap(),
        None
    );
    // Offboarded (issue 49): asked first, then gone; gone again is not found.
    let out = ok(run(&["human", "delete", "carol"], "n\n"));
    assert!(out.contains("nothing deleted"), "{out}");
    let out = ok(run(&["human", "delete", "carol", "--yes"], ""));
    assert!(out.contains("human carol deleted"), "{out}");
    let (done, _, err) = run(&["human", "delete", "carol", "--yes"], "");
    assert!(!done && err.contains("not found"), "{err}");
    let listed = ok(run(&["human", "list"], ""));
    assert!(!listed.contains("carol"), "{listed}");

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
            "--name",
            "platform (gitea)",
        ],
        "",
    ));
    let id = after(&out, "webhook ")
        .trim_end_matches(" created")
        .to_string();
    assert_eq!(after(&out, "name:"), "platform (gitea)");
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
    // Deleting asks first; declined, nothing is deleted; with --yes it is gone.
    let alices = after(&out, "webhook ")
        .trim_end_matches(" created")
        .to_string();
    let out = ok(run(&["webhook", "delete", &alices], "n\n"));
    assert!(out.contains("nothing deleted"), "{out}");
    assert!(
        db.store
            .get_webhook(&OwnerScope::human("alice"), &alices)
            .await
            .is_ok()
    );
    let out = ok(run(&["webhook", "delete", &alices, "--yes"], ""));
    assert!(out.contains(&format!("webhook {alices} deleted")), "{out}");
    assert!(
        db.store
            .get_webhook(&OwnerScope::human("alice"), &alices)
            .await
            .is_err()
    );
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

    // A webhook's claim lease: seconds, or back to the instance default; bounded.
    let out = ok(run(&["webhook", "claim-ttl", &id, "600"], ""));
    assert!(out.contains("claims last 600 s"), "{out}");
    assert_eq!(
        db.store.get_webhook(&team, &id).await.unwrap().claim_ttl,
        Some(std::time::Duration::from_secs(600))
    );
    let out = ok(run(&["webhook", "claim-ttl", &id, "default"], ""));
    assert!(out.contains("the instance default"), "{out}");
    assert_eq!(
        db.store.get_webhook(&team, &id).await.unwrap().claim_ttl,
        None
    );
    for bad in ["0", "2592001", "10m"] {
        let (done, _, err) = run(&["webhook", "claim-ttl", &id, bad], "");
        assert!(!done && err.contains("seconds from 1 to 2592000"), "{err}");
    }
    let (done, _, err) = run(&["webhook", "claim-ttl", "wh_nope", "60"], "");
    assert!(!done && err.contains("not found"), "{err}");
    let listed = ok(run(&["webhook", "list", "--scope", "team:platform"], ""));
    assert!(
        listed.contains(&id) && !listed.contains(&secret),
        "{listed}"
    );
    assert!(listed.contains("\tname=platform (gitea)"), "{listed}");
    // An operator renames it, or clears the name; a bad name is refused naming the field.
    let out = ok(run(&["webhook", "name", &id, "platform (prod)"], ""));
    assert!(out.contains("named platform (prod)"), "{out}");
    assert_eq!(
        db.store
            .get_webhook(&team, &id)
            .await
            .unwrap()
            .display_name(),
        "platform (prod)"
    );
    let (done, _, err) = run(&["webhook", "name", &id, &"x".repeat(81)], "");
    assert!(!done && err.contains("name"), "{err}");
    let out = ok(run(&["webhook", "name", &id, ""], ""));
    assert!(out.contains("no name"), "{out}");
    assert_eq!(db.store.get_webhook(&team, &id).await.unwrap().name, None);

    // The queues a scope's agents may grant over the API: set, shown, listed, cleared. A
    // webhook whose grant reaches past a narrower allowance keeps it, and the operator is told.
    let out = ok(run(
        &[
            "scope",
            "allow",
            "--scope",
            "team:platform",
            "--queues",
            "review,forge",
        ],
        "",
    ));
    assert!(
        out.contains("team:platform may grant: forge,review"),
        "{out}"
    );
    let (done, out, err) = run(
        &[
            "scope",
            "allow",
            "--scope",
            "team:platform",
            "--queues",
            "forge",
        ],
        "",
    );
    assert!(done, "{err}");
    assert!(out.contains("may grant: forge"), "{out}");
    assert!(
        err.contains(&format!(
            "webhook {id} keeps its grant, which names review,triage"
        )),
        "{err}"
    );
    assert_eq!(
        db.store
            .grant_allowance(&team)
            .await
            .expect("read")
            .map(|a| a.queues),
        Some(vec!["forge".to_string()])
    );
    let out = ok(run(&["scope", "list"], ""));
    assert!(out.contains("team:platform\tforge"), "{out}");
    let out = ok(run(&["scope", "show", "--scope", "human:alice"], ""));
    assert!(out.contains("human:alice has no grant allowance"), "{out}");
    let (done, _, err) = run(
        &[
            "scope",
            "allow",
            "--scope",
            "team:platform",
            "--queues",
            "Bad Queue",
        ],
        "",
    );
    assert!(!done && err.contains("queues"), "{err}");
    let out = ok(run(&["scope", "clear", "--scope", "team:platform"], ""));
    assert!(out.contains("grant allowance cleared"), "{out}");
    assert_eq!(db.store.grant_allowance(&team).await.expect("read"), None);

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

    // Every change is audited, newest first; refusals wrote nothing.
    let audit = ok(run(&["operator", "audit", "--limit", "200"], ""));
    let actions: Vec<&str> = audit.lines().filter_map(|l| l.split('\t').nth(2)).collect();
    assert_eq!(actions.first(), Some(&"revoke_endpoint"), "{audit}");
    assert_eq!(
        actions.last(),
        Some(&"bootstrap_operator_credential"),
        "{audit}"
    );
    assert_eq!(
        actions.iter().filter(|a| **a == "create_human").count(),
        3,
        "alice, bob and carol; the duplicate alice wrote nothing: {audit}"
    );
    assert_eq!(
        actions.iter().filter(|a| **a == "vend_endpoint").count(),
        2,
        "declined vends wrote nothing: {audit}"
    );
    assert!(
        audit.contains("set_team_member\tteam:platform\thuman=bob role=editor"),
        "{audit}"
    );
    // A page at a time: the next cursor printed goes on where the page stopped.
    let first = ok(run(&["operator", "audit", "--limit", "2"], ""));
    let cursor = first
        .lines()
        .find_map(|l| l.strip_prefix("next cursor: "))
        .unwrap_or_else(|| panic!("a next cursor: {first}"));
    let second = ok(run(
        &["operator", "audit", "--limit", "2", "--cursor", cursor],
        "",
    ));
    let entries = |page: &str| -> Vec<String> {
        page.lines()
            .filter(|l| !l.starts_with("next cursor: "))
            .map(str::to_string)
            .collect()
    };
    let whole: Vec<String> = audit.lines().map(str::to_string).collect();
    assert_eq!(
        [entries(&first), entries(&second)].concat(),
        whole[..4].to_vec(),
        "{first}{second}"
    );
    assert!(
        !audit.contains("sbe_") && !audit.contains(&secret),
        "{audit}"
    );

    // Another operator credential works until revoked, at once.
    let out = ok(run(&["operator", "create", "ci"], ""));
    let ci = after(
        &out,
        "operator token (shown once; it is stored only as a hash):",
    )
    .to_string();
    let ci_id = after(&out, "operator credential ")
        .trim_end_matches(" created")
        .to_string();
    let as_ci = [
        ("SWITCHBOARD_CONTROL", grpc.as_str()),
        ("SWITCHBOARD_OPERATOR_TOKEN", ci.as_str()),
    ];
    ok(admin_with(&as_ci, &["team", "list"], ""));
    // `--control` anywhere on the line (issue 49: scriptable).
    let only_token = [("SWITCHBOARD_OPERATOR_TOKEN", ci.as_str())];
    ok(admin_with(
        &only_token,
        &["team", "list", "--control", &grpc],
        "",
    ));
    // Refusals exit by their reason, as the people's CLI does: not_found is 3.
    let (code, err) = admin_exit(&as_ci, &["endpoint", "revoke", "ep_nope"]);
    assert_eq!((code, err.contains("not_found")), (3, true), "{err}");
    ok(run(&["operator", "revoke", &ci_id], ""));
    let (done, _, err) = admin_with(&as_ci, &["team", "list"], "");
    assert!(!done && err.contains("unauthenticated"), "{err}");
    assert_eq!(
        admin_exit(&as_ci, &["team", "list"]).0,
        5,
        "unauthenticated is 5, apart from not_found's 3"
    );
    let listed = ok(run(&["operator", "list"], ""));
    assert!(
        listed.contains(&format!("{ci_id}\tci\trevoked")),
        "{listed}"
    );

    // An endpoint credential is no operator's; no credential at all is a usage error.
    let as_endpoint = [
        ("SWITCHBOARD_CONTROL", grpc.as_str()),
        ("SWITCHBOARD_OPERATOR_TOKEN", credential.as_str()),
    ];
    let out = admin_output(&as_endpoint, &["team", "list"], "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "unauthenticated exits 5: {err}");
    assert!(err.contains("unauthenticated"), "{err}");
    let out = admin_output(
        &[("SWITCHBOARD_CONTROL", grpc.as_str())],
        &["team", "list"],
        "",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a usage error exits 2: {err}");
    assert!(err.contains("SWITCHBOARD_OPERATOR_TOKEN"), "{err}");
}

/// Issue 49 item 3: `switchboard admin --output json` in a shell script, through `jq`: each
/// answer is the API's object (`.proto` field names, every field present), `--output` and
/// `--control` go anywhere on the line, and a refusal exits by its reason with nothing on
/// stdout.
pub async fn admin_output_json_round_trips_through_jq(db: TestDb) {
    let has_jq = Command::new("jq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_jq {
        switchboard_testkit::missing::skip("cli", "jq", "apt-get install jq");
        return;
    }
    let token = bootstrap_operator(&db.url);
    let (_router, _control, grpc) = control_for_admin(&db.url);
    let script = r#"
set -eu
sb() { "$SB" admin "$@"; }
login=$(sb --output json human create ann | jq -r '.human.login')
sb human create ben --output json >/dev/null
sb team create ops --control "$CONTROL" --output json | jq -e '.team.slug == "ops"' >/dev/null
role=$(sb team add-member ops ben --role editor --output json | jq -r '.role')
hook=$(sb --output json webhook create --scope team:ops --source github --grant forge,review --name "ops site" \
  | jq -r '.webhook.id + " " + .webhook.name + " " + (.secret | length | tostring)')
id=${hook%% *}
named=$(sb webhook name "$id" "ops (prod)" --output json | jq -r '.webhook.name')
listed=$(sb webhook list --scope team:ops --output json | jq -r '.webhooks | map(.id + "=" + .name) | join(",")')
humans=$(sb human list --output json | jq -r '.humans | map(.login) | join(",")')
set +e
sb human delete nobody --yes --output json > refused.out 2> refused.err
code=$?
sb team delete ops --yes --output json > owns.out 2> owns.err
owns=$?
sb webhook name "$id" "$(printf '%081d' 0)" --output json > long.out 2> long.err
long=$?
set -e
exported=$(sb changes export --output json | jq -s 'length > 0 and all(.[]; (keys == ["entry", "hash"]))')
sb changes export --output json > log.jsonl
online=$(sb changes verify --output json | jq -r '(.intact | tostring) + " " + .head_seq')
offline=$(sb changes verify --file log.jsonl --output json | jq -r '(.intact | tostring) + " " + .head_seq')
second=$(sb --output json operator bootstrap --database-url "$DB" --name second \
  | jq -r '.credential.name + " " + (.token | startswith("sbo_") | tostring)')
printf '%s\n' "online=$online" "offline=$offline" "second=$second"
printf '%s\n' "login=$login" "role=$role" "hook=${hook#* }" "named=$named" "listed=$listed" "humans=$humans" "refused=$code" "refused_stdout=$(wc -c < refused.out)" "refused_stderr=$(cat refused.err)" "owns=$owns" "owns_stderr=$(cat owns.err)" "long=$long" "long_stderr=$(cat long.err)" "exported=$exported"
"#;
    let dir = tempfile::tempdir().expect("a dir");
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir.path())
        .env("SB", binary())
        .env("CONTROL", &grpc)
        .env("SWITCHBOARD_CONTROL", &grpc)
        .env("SWITCHBOARD_OPERATOR_TOKEN", &token)
        .env("SWITCHBOARD_LOG", "warn")
        .env_remove("SWITCHBOARD_DATABASE_URL")
        // For the one command here that opens the store itself.
        .env("DB", &db.url)
        .env(
            crate::support::SECRET_KEY_ENV,
            crate::support::secret_key_hex(),
        )
        .output()
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let facts: std::collections::BTreeMap<&str, &str> =
        stdout.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(facts["login"], "ann", "{stdout}");
    assert_eq!(facts["role"], "editor", "{stdout}");
    assert_eq!(
        facts["hook"], "ops site 64",
        "a generated secret, once: {stdout}"
    );
    assert_eq!(facts["named"], "ops (prod)", "{stdout}");
    assert!(facts["listed"].ends_with("=ops (prod)"), "{stdout}");
    assert_eq!(facts["humans"], "ann,ben", "{stdout}");
    assert_eq!(facts["refused"], "3", "not_found exits 3: {stdout}");
    assert_eq!(
        facts["refused_stdout"].trim(),
        "0",
        "nothing on stdout: {stdout}"
    );
    assert!(facts["refused_stderr"].contains("not_found"), "{stdout}");
    // A team that still owns a webhook is not deleted: a refusal to act on, exit 4.
    assert_eq!(facts["owns"], "4", "{stdout}");
    assert!(facts["owns_stderr"].contains("conflict"), "{stdout}");
    // An 81-character name is invalid input: exit 2.
    assert_eq!(facts["long"], "2", "{stdout}");
    assert!(
        facts["long_stderr"].contains("invalid_argument"),
        "{stdout}"
    );
    // The export is JSON Lines of {entry, hash} whatever --output says, nothing else on stdout.
    assert_eq!(facts["exported"], "true", "{stdout}");
    // Verifying prints VerifyChangeLogResponse alone, through control or from an export, and
    // both reach the same head; bootstrapping from the database prints
    // CreateOperatorCredentialResponse.
    assert!(facts["online"].starts_with("true "), "{stdout}");
    assert_eq!(facts["offline"], facts["online"], "{stdout}");
    assert_eq!(facts["second"], "second true", "{stdout}");
}

/// `switchboard admin` against a control that is not there names control and the address the
/// operator gave (issue 49 item 3), as the people's CLI does, rather than the transport's words.
#[test]
fn admin_says_control_did_not_answer() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let nowhere = closed.local_addr().expect("address").to_string();
    drop(closed);
    let (done, _, err) = admin_with(
        &[
            ("SWITCHBOARD_CONTROL", nowhere.as_str()),
            ("SWITCHBOARD_OPERATOR_TOKEN", "sbo_nobody"),
        ],
        &["team", "list"],
        "",
    );
    assert!(!done, "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "switchboard: control_unavailable: control at {nowhere} did not answer; nothing was changed"
        )
    );
    let (code, _) = admin_exit(
        &[
            ("SWITCHBOARD_CONTROL", nowhere.as_str()),
            ("SWITCHBOARD_OPERATOR_TOKEN", "sbo_nobody"),
        ],
        &["team", "list"],
    );
    assert_eq!(
        code, 1,
        "control_unavailable exits as the people's CLI does"
    );
}

/// Reads every line of `switchboard up` this test needs.
#[derive(Clone)]
pub(crate) struct UpLines {
    pub ingest_url: String,
    pub secret: String,
    pub grpc: String,
    pub token: String,
    /// An operator credential for `switchboard admin --control <grpc>`.
    pub operator_token: String,
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
        operator_token: up.line("operator token: "),
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

/// The shell block of the README's "Five minutes with it", dedented to run as typed.
fn readme_walk_block() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let section = readme
        .split("## Five minutes with it")
        .nth(1)
        .expect("README has \"Five minutes with it\"");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block in the walk");
    block
        .lines()
        .map(str::trim_start)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The README's walk as a newcomer follows it after the run command: its shell block, run by
/// bash from the repository root with only `INGEST_URL` and `SECRET` set from what `up`
/// printed, posts a vendored payload that ingest verifies and routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walk_works_as_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().expect("utf-8 path");
    let readme_args = readme_run_args();
    let args: Vec<&str> = readme_args.iter().map(String::as_str).collect();
    let env = [
        ("SWITCHBOARD_DATA_DIR", data),
        ("SWITCHBOARD_HTTP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_MCP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_ROUTER_CHILDREN", "1"),
    ];
    let mut up = Process::spawn(&args, &env);
    let lines = up_lines(&mut up);
    let block = readme_walk_block();
    assert!(
        block.contains("testkit/data/webhooks/"),
        "the walk posts a vendored payload: {block}"
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &block])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("INGEST_URL", &lines.ingest_url)
        .env("SECRET", &lines.secret)
        .output()
        .expect("bash runs the walk (it needs curl and openssl)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the walk failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(answer["verified"], true, "{answer}");
    assert_eq!(answer["decision"], "default", "{answer}");
    assert!(
        answer["todo_id"].is_string(),
        "a queue decision is a todo: {answer}"
    );
    up.terminate();
    assert!(up.wait_exit(Duration::from_secs(30)).success());
}

/// The README's run command, as a newcomer types it, on a fresh data directory; only the
/// ports (free ones) and the number of sandbox children differ, through the environment.
/// Issue 18: "An operator adds external packs" under `switchboard up`: the external pack is
/// checked through up's own router (served before control's catalog is loaded) and listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_loads_external_packs_through_its_own_router() {
    let dir = tempfile::tempdir().expect("temp dir");
    let packs = dir.path().join("packs");
    let mut ext = switchboard_packs::Catalog::builtin()
        .find("drop-ci-noise", "1.0.0")
        .expect("drop-ci-noise@1")
        .pack
        .clone();
    ext.name = "ext-noise".into();
    crate::rule_packs::write_pack_dir(&packs, &ext);
    let data_dir = dir.path().join("data");
    let sources = format!("file://{}", packs.display());
    let env = [
        (
            "SWITCHBOARD_DATA_DIR",
            data_dir.to_str().expect("utf-8 path"),
        ),
        ("SWITCHBOARD_HTTP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_MCP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_ROUTER_CHILDREN", "1"),
        ("SWITCHBOARD_RULE_PACK_SOURCES", sources.as_str()),
    ];
    let started = std::time::Instant::now();
    let mut up = Process::spawn(&["up"], &env);
    let lines = up_lines(&mut up);
    let ready_in = started.elapsed();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", lines.grpc))
        .expect("url")
        .connect()
        .await
        .expect("connects");
    let mut packs =
        switchboard_proto::control::v1::rule_packs_client::RulePacksClient::with_interceptor(
            channel,
            crate::pack_api::Bearer(lines.token.clone()),
        );
    let listed = packs
        .list_rule_packs(pb::ListRulePacksRequest::default())
        .await
        .expect("list packs")
        .into_inner();
    let listing = crate::support::typed::listing(&listed);
    let ext = listing["packs"]
        .as_array()
        .expect("packs")
        .iter()
        .find(|p| p["name"] == "ext-noise")
        .unwrap_or_else(|| {
            let names: Vec<&serde_json::Value> = listing["packs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| &p["name"])
                .collect();
            panic!("ext-noise not listed (up ready in {ready_in:?}): {names:?}")
        });
    assert_eq!(ext["source"], "external", "{ext}");
    up.terminate();
    assert!(up.wait_exit(Duration::from_secs(30)).success());
}

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
    // `up` made its sealing key in its data directory, mode 0600.
    let key_file = data_dir.join("secret.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_file)
            .expect("up's key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "only its owner reads the key");
    }
    let key = switchboard_control::SealingKey::load(&key_file).expect("up's key file");
    let store = Store::connect(&first.database, &key)
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
    // The dev endpoint may create webhooks granting the dev webhook's queues, no more.
    assert_eq!(
        store
            .grant_allowance(&OwnerScope::human("dev"))
            .await
            .expect("read")
            .map(|a| a.queues),
        Some(
            store
                .get_webhook(&OwnerScope::human("dev"), &first.webhook)
                .await
                .expect("the dev webhook")
                .grant
        )
    );
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

/// `switchboard explain` run against `grpc` with `token` (none: SWITCHBOARD_TOKEN unset):
/// (exit code, stdout, stderr).
fn explain(grpc: &str, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(binary());
    command
        .arg("explain")
        .args(args)
        .env("SWITCHBOARD_CONTROL", grpc)
        .env("SWITCHBOARD_LOG", "warn")
        .env_remove("SWITCHBOARD_TOKEN");
    if let Some(token) = token {
        command.env("SWITCHBOARD_TOKEN", token);
    }
    let out = command.output().expect("switchboard explain runs");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 21 item 3: `switchboard explain` against `switchboard up`, on real deliveries routed
/// before and after the rules change: the JSON is the MCP tool's object, the table one line
/// per rule, and the exit codes are the documented ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_tells_why_a_delivery_went_where_it_did() {
    use switchboard_proto::control::v1::webhook_rules_client::WebhookRulesClient;
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    let env = [
        (
            "SWITCHBOARD_DATA_DIR",
            data_dir.to_str().expect("utf-8 path"),
        ),
        ("SWITCHBOARD_HTTP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_MCP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_ROUTER_CHILDREN", "1"),
    ];
    let mut up = Process::spawn(&["up"], &env);
    let lines = up_lines(&mut up);
    let (authority, path) = lines
        .ingest_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .expect("url");
    let http: SocketAddr = authority.parse().expect("address");
    let p = payload("github", "pull_request.opened.json");
    let deliver = |delivery: &'static str| {
        let headers = signed("github", "pull_request", delivery, &lines.secret, &p.body);
        let path = format!("/{path}");
        let body = &p.body;
        async move {
            let resp = post(http, &path, &headers, body).await;
            assert_eq!(resp.status, 202, "{resp:?}");
            let answer = resp.json();
            (
                answer["event_id"].as_str().expect("event id").to_string(),
                answer["decision"].as_str().expect("decision").to_string(),
            )
        }
    };

    // Version 1 (no rules): the default queue.
    let (first, decided) = deliver("explain-1").await;
    assert_eq!(decided, "default");
    // Version 2: pull requests to review, decided by the second rule.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", lines.grpc))
        .expect("endpoint")
        .connect()
        .await
        .expect("grpc connects");
    let token: tonic::metadata::MetadataValue<_> =
        format!("Bearer {}", lines.token).parse().expect("metadata");
    let mut rules =
        WebhookRulesClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
            req.metadata_mut().insert("authorization", token.clone());
            Ok(req)
        });
    let v2 = rules
        .set_webhook_rules(pb::SetWebhookRulesRequest {
            webhook_id: lines.webhook.clone(),
            configuration: crate::support::typed::config(&serde_json::json!({"rules": [
                {"id": "pushes", "when": ".kind == \"push\"", "action": {"drop": true}},
                {"id": "prs", "when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}},
            ]})),
            expected_version: Some(1),
        })
        .await
        .expect("version 2")
        .into_inner();
    assert_eq!(v2.version, 2);
    let (second, decided) = deliver("explain-2").await;
    assert_eq!(decided, "queue:review");
    // Version 3: pull requests to triage from now on.
    let v3 = rules
        .update_webhook_rule(pb::UpdateWebhookRuleRequest {
            webhook_id: lines.webhook.clone(),
            rule_id: "prs".into(),
            patch: Some(pb::RulePatch {
                action: Some("queue:triage".into()),
                ..Default::default()
            }),
            expected_version: Some(2),
        })
        .await
        .expect("version 3")
        .into_inner();

    let grpc = lines.grpc.as_str();
    let token = Some(lines.token.as_str());
    let (code, out, err) = explain(grpc, token, &[&second, "--output", "json"]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("json output");
    assert_eq!(
        json,
        serde_json::json!({
            "event_id": second,
            "webhook_id": lines.webhook,
            "kind": "pull_request.opened",
            "recorded_decision": {"decision": "queue:review", "queue": "review", "rule_id": "prs"},
            "recorded_version_status": "known",
            "recorded_version": 2,
            "recorded_digest": v2.digest,
            "rules": [
                {"index": 0, "rule_id": "pushes", "outcome": "not_matched", "action": "drop",
                 "fault_code": null, "reason": null, "deciding": false},
                {"index": 1, "rule_id": "prs", "outcome": "matched", "action": "queue:review",
                 "fault_code": null, "reason": null, "deciding": true},
            ],
            "reevaluated_decision": {"decision": "queue:review", "queue": "review", "rule_id": "prs"},
            "reevaluation_differs": false,
            "current_version": 3,
            "current_digest": v3.digest,
            "current_decision": {"decision": "queue:triage", "queue": "triage", "rule_id": "prs"},
            "current_differs": true,
            "trials": [],
        })
    );

    let (code, out, err) = explain(grpc, token, &[&second]);
    assert_eq!(code, 0, "{err}");
    let expected = format!(
        "event     {second} (pull_request.opened)\n\
         webhook   {webhook}\n\
         recorded  queue:review by rule prs\n\
         version   2\n\
         #    rule                             outcome      action\n\
         0    pushes                           not matched  drop\n\
         1    prs                              matched      queue:review  <- decided\n\
         current   queue:triage by rule prs under version 3 (differs)\n",
        webhook = lines.webhook
    );
    assert_eq!(out, expected);

    // The first delivery: version 1 had no rules, the default decided.
    let (code, out, err) = explain(grpc, token, &[&first]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("recorded  default (no rule matched)\nversion   1\ncurrent   queue:triage by rule prs under version 3 (differs)\n"), "{out}");
    assert!(!out.contains("<- decided"), "{out}");

    // Exit codes: not found 3, no credential or a bad flag 2, a wrong credential 5, no
    // control 1.
    let unknown = format!("ev_{}", "0".repeat(32));
    let (code, _, err) = explain(grpc, token, &[&unknown]);
    assert_eq!((code, err.contains("not_found")), (3, true), "{err}");
    let (code, _, err) = explain(grpc, None, &[&first]);
    assert_eq!(
        (code, err.contains("SWITCHBOARD_TOKEN")),
        (2, true),
        "{err}"
    );
    let (code, _, err) = explain(grpc, token, &[&first, "--output", "yaml"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = explain(grpc, Some("sbe_nope"), &[&first]);
    assert_eq!((code, err.contains("unauthenticated")), (5, true), "{err}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let nowhere = closed.local_addr().expect("address").to_string();
    drop(closed);
    let (code, _, err) = explain(&nowhere, token, &[&first]);
    assert_eq!(code, 1, "{err}");

    up.terminate();
    assert!(up.wait_exit(Duration::from_secs(30)).success());
}
