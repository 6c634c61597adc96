//! Big deliveries end to end (issue 16): GitHub sends payloads up to 25 MB and does not
//! redeliver. Through the real binary, a real push payload grown to 5 MiB and to 25 MiB is
//! verified, stored byte for byte and routed by a rule that reads it; one byte more answers a
//! clear 413 and stores nothing; `--max-body-mb` moves the line. Stored big deliveries are
//! routed later in chunks a router takes. Every test runs on SQLite and, with
//! `SWITCHBOARD_TEST_DATABASE_URL`, on PostgreSQL.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_control::ingest::RetryOptions;
use switchboard_control::store::{NewEvent, SourceType};

use crate::cli::Process;
use crate::control_harness::{
    Control, ControlSetup, TestDb, http_raw, human, on_every_backend, post, signed, webhook,
};
use crate::ingest::{router, todos};

on_every_backend! {
    bodies_of_5_and_25_mib_are_stored_and_routed_and_one_byte_more_is_413,
    max_body_mb_moves_the_line,
    big_stored_deliveries_route_later_in_chunks_a_router_takes,
}

const MIB: usize = 1024 * 1024;

/// Routes pushes with more than 1,000 commits to `review`: only a rule that sees the whole
/// parsed body can tell.
fn big_push_config() -> Value {
    json!({"rules": [
        {"id": "big", "when": ".event == \"push\" and (.payload.commits | length) > 1000",
         "action": {"queue": "review"}}
    ], "params": {}})
}

fn push_of(len: usize) -> Vec<u8> {
    switchboard_testkit::big_payloads::github_push_of(len)
}

/// `switchboard control` on `db`, routing through `router`, with `env` added.
fn control_process(db: &TestDb, router: &str, env: &[(&str, &str)]) -> (Process, SocketAddr) {
    let mut all = vec![
        (
            crate::support::SECRET_KEY_ENV,
            crate::support::secret_key_hex(),
        ),
        ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
    ];
    all.extend_from_slice(env);
    let mut control = Process::spawn(
        &[
            "control",
            "--database-url",
            &db.url,
            "--http-listen",
            "127.0.0.1:0",
            "--routers",
            router,
        ],
        &all,
    );
    let http: SocketAddr = control
        .line("ingest listening on http://")
        .parse()
        .expect("http address");
    (control, http)
}

/// The event once its decision is recorded (at most a minute).
async fn routed(
    db: &TestDb,
    scope: &switchboard_control::OwnerScope,
    id: &str,
) -> switchboard_control::store::Event {
    for _ in 0..600 {
        let event = db.store.get_event(scope, id).await.expect("stored");
        if event.routed {
            return event;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{id} was never routed");
}

/// `body` sent chunked, with no Content-Length.
async fn post_chunked(
    http: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> crate::control_harness::HttpResponse {
    let mut chunked = Vec::with_capacity(body.len() + body.len() / 1000);
    for part in body.chunks(256 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        chunked.extend_from_slice(part);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    http_raw(http, head.into_bytes(), chunked).await
}

pub async fn bodies_of_5_and_25_mib_are_stored_and_routed_and_one_byte_more_is_413(db: TestDb) {
    let router = router();
    let scope = human(&db.store, "alice").await;
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(big_push_config()),
    )
    .await;
    let (mut control, http) = control_process(&db, &router.addr, &[]);
    let path = format!("/hooks/{}", hook.id);

    let mut taken = Vec::new();
    for (len, delivery) in [(5 * MIB, "big-5"), (25 * MIB, "big-25")] {
        let body = push_of(len);
        let headers = signed("github", "push", delivery, &hook.secret, &body);
        let resp = post(http, &path, &headers, &body).await;
        assert_eq!(resp.status, 202, "{len} bytes: {resp:?}");
        let answer = resp.json();
        assert_eq!(answer["verified"], true, "{len}");
        assert_eq!(answer["kind"], "push", "{len}");
        // Routed within the ingest deadline, or (on a loaded machine) `pending` and routed
        // in the background: either way the stored decision is the rule's.
        assert!(
            ["queue:review", "pending"].contains(&answer["decision"].as_str().unwrap_or_default()),
            "{len}: {answer}"
        );
        let event = routed(&db, &scope, answer["event_id"].as_str().expect("event id")).await;
        assert_eq!(
            event
                .decision
                .as_ref()
                .expect("decided")
                .decision
                .to_string(),
            "queue:review",
            "{len}: the rule read the whole body"
        );
        assert!(
            event.body.as_ref() == body.as_slice(),
            "{len}: byte for byte"
        );
        taken.push(event.id);
    }
    assert_eq!(todos(&db.store, &scope, "review").await.len(), 2);

    // One byte over, declared or chunked: a clear 413, nothing stored.
    let over = push_of(25 * MIB + 1);
    let headers = signed("github", "push", "big-over", &hook.secret, &over);
    let resp = post(http, &path, &headers, &over).await;
    assert_eq!(resp.status, 413, "{resp:?}");
    let answer = resp.json();
    assert_eq!(answer["error"], "payload_too_large");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("26214400") && message.contains("25 MiB"),
        "the message names the limit: {message}"
    );
    let resp = post_chunked(http, &path, &headers, &over).await;
    assert_eq!(resp.status, 413, "chunked: {resp:?}");
    let listed = db
        .store
        .list_events(
            &scope,
            &hook.id,
            &switchboard_control::store::Page::first(10),
        )
        .await
        .expect("events")
        .items;
    assert_eq!(
        listed
            .iter()
            .map(|e| e.id.clone())
            .rev()
            .collect::<Vec<_>>(),
        taken,
        "nothing over the line stored"
    );
    control.terminate();
    assert!(control.wait_exit(Duration::from_secs(20)).success());
}

pub async fn max_body_mb_moves_the_line(db: TestDb) {
    let router = router();
    let scope = human(&db.store, "alice").await;
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(big_push_config()),
    )
    .await;
    let (mut control, http) =
        control_process(&db, &router.addr, &[("SWITCHBOARD_MAX_BODY_MB", "2")]);
    let path = format!("/hooks/{}", hook.id);
    let exact = push_of(2 * MIB);
    let headers = signed("github", "push", "two", &hook.secret, &exact);
    let resp = post(http, &path, &headers, &exact).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    assert_eq!(resp.json()["verified"], true);
    let over = push_of(2 * MIB + 1);
    let headers = signed("github", "push", "two-over", &hook.secret, &over);
    let resp = post(http, &path, &headers, &over).await;
    assert_eq!(resp.status, 413, "{resp:?}");
    assert!(
        resp.json()["message"]
            .as_str()
            .unwrap_or_default()
            .contains("2 MiB"),
        "{resp:?}"
    );
    control.terminate();
    assert!(control.wait_exit(Duration::from_secs(20)).success());

    // Past the ceiling every router accepts, the flag is refused at start.
    let out = std::process::Command::new(crate::support::binary())
        .args(["control", "--max-body-mb", "65", "--database-url", &db.url])
        .env(
            crate::support::SECRET_KEY_ENV,
            crate::support::secret_key_hex(),
        )
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("max-body-mb"), "{stderr}");
}

pub async fn big_stored_deliveries_route_later_in_chunks_a_router_takes(db: TestDb) {
    let scope = human(&db.store, "alice").await;
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(big_push_config()),
    )
    .await;
    // Three 25 MiB deliveries stored while no router answered: 75 MiB in all, more than one
    // message to a router or a sandbox child carries.
    let body = bytes::Bytes::from(push_of(25 * MIB));
    let mut ids = Vec::new();
    for i in 0..3 {
        let event = db
            .store
            .insert_event(NewEvent {
                webhook_id: hook.id.clone(),
                delivery_id: format!("stored-{i}"),
                kind: "push".into(),
                headers: vec![("X-GitHub-Event".into(), "push".into())],
                body: body.clone(),
                verified: true,
            })
            .await
            .expect("stored");
        ids.push(event.id);
    }
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let before = control.routers.evaluate_calls();
    let options = RetryOptions {
        interval: Duration::from_millis(100),
        min_age: Duration::ZERO,
        batch: 100,
    };
    let n = switchboard_control::ingest::route_unrouted(&control.state(), &options)
        .await
        .expect("a retry pass");
    assert_eq!(n, 3);
    assert!(
        control.routers.evaluate_calls() - before >= 3,
        "one big delivery per call"
    );
    for id in &ids {
        let event = db.store.get_event(&scope, id).await.expect("stored");
        assert_eq!(
            event
                .decision
                .as_ref()
                .expect("decided")
                .decision
                .to_string(),
            "queue:review",
            "{id}: {:?}",
            event.fault
        );
    }
    assert_eq!(todos(&db.store, &scope, "review").await.len(), 3);
    control.stop().await;
}
