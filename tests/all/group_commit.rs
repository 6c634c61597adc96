//! Group commit (issue 22) under a crash: `switchboard control` is killed with SIGKILL while
//! 32 senders keep its batches full. Every delivery it answered 202 is stored once, nothing is
//! half-written, and after a restart every stored delivery is routed once, with one todo.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use sqlx::Row;

use crate::cli::Process;
use crate::control_harness::{TestDb, eventually, on_every_backend, signed, try_post};
use crate::ingest::{alices_routed_github_webhook, router};
use crate::support::payload;

on_every_backend! {
    control_killed_mid_batch_loses_no_answered_delivery_and_routes_none_twice,
}

/// `switchboard control` on the test's database, routing through `router`, with no rate
/// limit in the way of a flood and a quick retry of unrouted events.
fn control(db: &TestDb, router: &str) -> (Process, SocketAddr) {
    let mut process = Process::spawn(
        &[
            "control",
            "--database-url",
            &db.url,
            "--http-listen",
            "127.0.0.1:0",
            "--routers",
            router,
            "--unrouted-retry-ms",
            "100",
        ],
        &[
            (
                crate::support::SECRET_KEY_ENV,
                crate::support::secret_key_hex(),
            ),
            ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
            ("SWITCHBOARD_INGEST_PER_WEBHOOK_PER_MINUTE", "1000000"),
        ],
    );
    let http = process
        .line("ingest listening on http://")
        .parse()
        .expect("http address");
    (process, http)
}

async fn count(db: &TestDb, sql: &'static str) -> i64 {
    let row = sqlx::query(sql)
        .fetch_one(db.store.pool())
        .await
        .expect("count");
    row.try_get::<i64, _>("n").expect("n")
}

pub async fn control_killed_mid_batch_loses_no_answered_delivery_and_routes_none_twice(db: TestDb) {
    let router = router();
    let (_scope, hook) = alices_routed_github_webhook(&db.store).await;
    let (mut first, http) = control(&db, &router.addr);
    let p = payload("github", "pull_request.opened.json");

    // Delivery id → the 202 answer's JSON, for every delivery answered 202.
    let answered: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let sent = Arc::new(AtomicUsize::new(0));
    let gone = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..32)
        .map(|s| {
            let (answered, sent, gone) = (answered.clone(), sent.clone(), gone.clone());
            let (hook, body) = (hook.clone(), p.body.clone());
            tokio::spawn(async move {
                for i in 0.. {
                    if gone.load(Ordering::Relaxed) {
                        return;
                    }
                    let id = format!("crash-{s}-{i}");
                    let headers = signed("github", "pull_request", &id, &hook.secret, &body);
                    sent.fetch_add(1, Ordering::Relaxed);
                    match try_post(http, &format!("/hooks/{}", hook.id), &headers, &body).await {
                        Some(resp) if resp.status == 202 => {
                            answered.lock().expect("lock").insert(id, resp.json());
                        }
                        // Refused, reset, or answered something else: not acknowledged.
                        _ => {}
                    }
                }
            })
        })
        .collect();

    // Kill once plenty has been answered, with 32 requests in flight.
    eventually(Duration::from_secs(60), "deliveries answered", || async {
        answered.lock().map(|a| a.len() >= 300).unwrap_or(false)
    })
    .await;
    first.kill();
    gone.store(true, Ordering::Relaxed);
    for s in senders {
        s.await.expect("a sender");
    }
    let answered = answered.lock().expect("lock").clone();
    let sent = sent.load(Ordering::Relaxed);
    assert!(
        answered.len() >= 300 && sent > answered.len(),
        "{sent} sent, {} answered",
        answered.len()
    );

    // Every delivery answered 202 is stored, under the event id its answer named, once.
    let stored = events_by_delivery(&db, &hook.id).await;
    for (delivery, answer) in &answered {
        let event = stored
            .get(delivery)
            .unwrap_or_else(|| panic!("{delivery} was answered 202 and is missing"));
        assert_eq!(
            answer["event_id"].as_str(),
            Some(event.as_str()),
            "{delivery}"
        );
    }
    // Nothing half-written: no routed queue decision without its todo, no todo without its
    // routed event.
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM events e WHERE e.routed = 1 AND e.decision LIKE '%queue%' \
             AND NOT EXISTS (SELECT 1 FROM todos t WHERE t.event_id = e.id)"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM todos t WHERE NOT EXISTS \
             (SELECT 1 FROM events e WHERE e.id = t.event_id AND e.routed = 1)"
        )
        .await,
        0
    );

    // A new control routes what the killed one stored but did not route; nothing twice.
    let (_second, _) = control(&db, &router.addr);
    eventually(
        Duration::from_secs(60),
        "every stored delivery routed",
        || async {
            db.store
                .unrouted_events(10)
                .await
                .map(|e| e.is_empty())
                .unwrap_or(false)
        },
    )
    .await;
    // A batch statement the killed control sent just before it died can still commit after
    // the snapshot above (PostgreSQL finishes a statement whose client is gone), so an
    // *unanswered* delivery may appear late: whole (routed, with its todo, checked below) and
    // once. Every event there was is still there, and none appeared for an answered delivery.
    let now = events_by_delivery(&db, &hook.id).await;
    for (delivery, event) in &stored {
        assert_eq!(now.get(delivery), Some(event), "{delivery} changed");
    }
    for delivery in now.keys().filter(|d| !stored.contains_key(*d)) {
        assert!(
            !answered.contains_key(delivery),
            "{delivery} was answered 202 before its row could be read"
        );
    }
    let events = count(&db, "SELECT COUNT(*) AS n FROM events").await;
    assert_eq!(events, now.len() as i64);
    let todos = sqlx::query("SELECT event_id FROM todos")
        .fetch_all(db.store.pool())
        .await
        .expect("todos");
    let with_todo: HashSet<String> = todos
        .iter()
        .map(|r| r.try_get::<String, _>("event_id").expect("event_id"))
        .collect();
    assert_eq!(todos.len(), with_todo.len(), "no event has two todos");
    assert_eq!(
        todos.len() as i64,
        events,
        "every pull request stored is one todo in review"
    );
}

/// The webhook's stored events, event id by delivery id; a delivery stored twice fails.
async fn events_by_delivery(db: &TestDb, webhook_id: &str) -> HashMap<String, String> {
    let rows = sqlx::query("SELECT id, delivery_id FROM events WHERE webhook_id = $1")
        .bind(webhook_id)
        .fetch_all(db.store.pool())
        .await
        .expect("events");
    let mut by_delivery = HashMap::new();
    for row in &rows {
        let delivery: String = row.try_get("delivery_id").expect("delivery_id");
        let event: String = row.try_get("id").expect("id");
        assert!(
            by_delivery.insert(delivery.clone(), event).is_none(),
            "{delivery} stored twice"
        );
    }
    by_delivery
}
