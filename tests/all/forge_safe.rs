//! Forge-safe ingest (issue 15), end to end with real router processes: every delivery is
//! answered within the forge's timeout, stored once and never lost, under hung routers,
//! stalled clients, unsigned floods, bursts over the rate and forged delivery ids.

use std::time::{Duration, Instant};

use switchboard_control::ingest::{BodyPace, HttpLimits, RetryOptions};
use switchboard_control::state::Limits;
use switchboard_control::store::Page;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::control_harness::{
    Backend, Control, ControlSetup, TestDb, eventually, on_every_backend, run, signed,
};
use crate::ingest::{alices_routed_github_webhook, router, todos};
use crate::support::{RouterProcess, payload};

on_every_backend! {
    a_burst_over_the_rate_is_deferred_and_routed_in_order_with_none_lost,
    past_the_backlog_bound_a_signed_delivery_answers_429_with_retry_after,
    a_forgery_first_leaves_the_genuine_delivery_its_own_todo,
    an_unsigned_flood_leaves_signed_deliveries_answered,
}

/// Hung routers and stalled clients do not depend on the backend: SQLite only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hung_router_of_two_costs_a_few_deliveries_and_every_router_stopped_answers_pending() {
    run(Backend::Sqlite, |db| hung_routers(db, 2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hung_router_of_three_costs_a_few_deliveries_and_every_router_stopped_answers_pending()
{
    run(Backend::Sqlite, |db| hung_routers(db, 3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_stalled_connections_do_not_delay_another_webhooks_delivery() {
    run(Backend::Sqlite, stalled_connections).await;
}

fn signal(router: &RouterProcess, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &router.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(ok.success(), "kill {sig}");
}

fn quick_retry() -> Option<RetryOptions> {
    Some(RetryOptions {
        interval: Duration::from_millis(100),
        min_age: Duration::ZERO,
        batch: 500,
    })
}

/// The `p`th quantile of `took` (sorted here).
fn quantile(took: &mut [Duration], p: f64) -> Duration {
    took.sort();
    let at = ((took.len() as f64 - 1.0) * p).round() as usize;
    took[at.min(took.len() - 1)]
}

async fn hung_routers(db: TestDb, n: usize) {
    let routers: Vec<RouterProcess> = (0..n).map(|_| router()).collect();
    let addrs: Vec<&str> = routers.iter().map(|r| r.addr.as_str()).collect();
    let control = Control::start(
        &db.store,
        &addrs,
        ControlSetup {
            retry: quick_retry(),
            ..ControlSetup::default()
        },
    )
    .await;
    let (scope, hook) = alices_routed_github_webhook(&db.store).await;
    let p = payload("github", "pull_request.opened.json");
    let deliver = |id: String| {
        let headers = signed("github", "pull_request", &id, &hook.secret, &p.body);
        let control = &control;
        let hook = &hook;
        let body = p.body.clone();
        async move {
            let started = Instant::now();
            let resp = control.deliver(&hook.id, &headers, &body).await;
            (resp, started.elapsed())
        }
    };
    // Warm: every router has answered once.
    for i in 0..(3 * n) {
        let (resp, _) = deliver(format!("warm-{i}")).await;
        assert_eq!(resp.json()["decision"], "queue:review");
    }

    // Each router in turn hangs (SIGSTOP keeps its connections open) during a burst of 40,
    // 4 at a time: whichever one the balancer prefers, one phase hangs it.
    let hedged_before = control.routers.hedged_attempts();
    for (k, hung) in routers.iter().enumerate() {
        signal(hung, "-STOP");
        let mut took = Vec::new();
        for wave in 0..10 {
            let answers =
                futures::future::join_all((0..4).map(|i| deliver(format!("hung-{k}-{wave}-{i}"))))
                    .await;
            for (resp, t) in answers {
                assert_eq!(resp.status, 202, "{resp:?}");
                assert_eq!(resp.json()["decision"], "queue:review", "{resp:?}");
                took.push(t);
            }
        }
        let slow = took
            .iter()
            .filter(|t| **t > Duration::from_millis(600))
            .count();
        let p99 = quantile(&mut took, 0.99);
        assert!(
            slow <= 8,
            "{slow} of 40 deliveries waited over 600 ms with router {k} of {n} hung"
        );
        assert!(
            p99 < Duration::from_secs(1),
            "p99 {p99:?} with router {k} of {n} hung"
        );
        signal(hung, "-CONT");
    }
    assert!(
        control.routers.hedged_attempts() > hedged_before,
        "a hung router's calls were hedged elsewhere"
    );

    // Every router stops: each delivery is still answered within the deadline, `pending`.
    for r in &routers {
        signal(r, "-STOP");
    }
    let deadline = Limits::default().ingest_deadline;
    let answers = futures::future::join_all((0..6).map(|i| deliver(format!("stopped-{i}")))).await;
    for (resp, t) in &answers {
        assert_eq!(resp.status, 202, "{resp:?}");
        assert_eq!(resp.json()["decision"], "pending", "{resp:?}");
        assert!(
            *t < deadline + Duration::from_millis(700),
            "answered after {t:?}, deadline {deadline:?}"
        );
    }
    for r in &routers {
        signal(r, "-CONT");
    }
    let want = 3 * n + 40 * n + 6;
    eventually(Duration::from_secs(60), "every delivery routed", || async {
        db.store
            .unrouted_events(500)
            .await
            .map(|e| e.is_empty())
            .unwrap_or(false)
            && todos(&db.store, &scope, "review").await.len() == want
    })
    .await;
    control.stop().await;
}

/// Opens a connection that sends a POST's headers for `content_length` bytes and then
/// nothing.
async fn stall(http: std::net::SocketAddr, path: &str) -> Option<TcpStream> {
    let mut s = TcpStream::connect(http).await.ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: control\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).await.ok()?;
    Some(s)
}

/// How long a stalled body is waited for in [`stalled_connections`].
const STALL_GRACE: Duration = Duration::from_secs(12);

async fn stalled_connections(db: TestDb) {
    let router = router();
    let control = Control::start(
        &db.store,
        &[&router.addr],
        ControlSetup {
            http: HttpLimits {
                max_connections: 600,
                // Long enough that no stalled connection is cut off while the test is still
                // opening the others on a loaded machine: the cap must stay full until the
                // 601st arrives.
                body: BodyPace {
                    grace: STALL_GRACE,
                    min_bytes_per_sec: 1024,
                },
                ..HttpLimits::default()
            },
            ..ControlSetup::default()
        },
    )
    .await;
    let (_, victim) = alices_routed_github_webhook(&db.store).await;
    let bob = crate::control_harness::human(&db.store, "bob").await;
    let other = crate::control_harness::webhook(
        &db.store,
        &bob,
        switchboard_control::store::SourceType::Github,
        Some(crate::ingest::routing_config()),
    )
    .await;
    let path = format!("/hooks/{}", victim.id);
    let mut stalled = Vec::new();
    for _ in 0..500 {
        if let Some(s) = stall(control.http, &path).await {
            stalled.push(s);
        }
    }
    assert_eq!(stalled.len(), 500, "every stalled connection was accepted");
    // Another webhook's signed delivery goes through at once.
    let p = payload("github", "pull_request.opened.json");
    let headers = signed("github", "pull_request", "beside-1", &other.secret, &p.body);
    let started = Instant::now();
    let resp = control.deliver(&other.id, &headers, &p.body).await;
    let took = started.elapsed();
    assert_eq!(resp.status, 202, "{resp:?}");
    assert_eq!(resp.json()["decision"], "queue:review");
    assert!(took < Duration::from_secs(1), "answered after {took:?}");

    // Past the connection bound: 503 at once, with Retry-After.
    let mut extra = Vec::new();
    for _ in 0..100 {
        if let Some(s) = stall(control.http, &path).await {
            extra.push(s);
        }
    }
    let mut refused = TcpStream::connect(control.http).await.expect("connects");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), refused.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.to_lowercase().contains("retry-after: 1"), "{answer}");
    drop(extra);

    // The stalled bodies are cut off after their grace: 408, nothing stored.
    let mut first = stalled.swap_remove(0);
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(STALL_GRACE * 2, first.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let stored = db
        .store
        .list_events(&victim.owner_scope, &victim.id, &Page::first(10))
        .await
        .expect("events")
        .items;
    assert!(stored.is_empty(), "a stalled body stores nothing");
    drop(stalled);
    control.stop().await;
}

pub async fn a_burst_over_the_rate_is_deferred_and_routed_in_order_with_none_lost(db: TestDb) {
    let router = router();
    let control = Control::start(
        &db.store,
        &[&router.addr],
        ControlSetup {
            limits: Limits {
                ingest_per_webhook_per_minute: 100,
                ..Limits::default()
            },
            // A pass takes only events older than every insert still in flight, so it never
            // routes a later delivery before an earlier one commits.
            retry: Some(RetryOptions {
                interval: Duration::from_millis(100),
                min_age: Duration::from_millis(500),
                batch: 500,
            }),
            ..ControlSetup::default()
        },
    )
    .await;
    let (scope, hook) = alices_routed_github_webhook(&db.store).await;
    let p = payload("github", "pull_request.opened.json");
    let total = 2_000;
    let mut deferred = std::collections::BTreeSet::new();
    for wave in 0..(total / 8) {
        let answers = futures::future::join_all((0..8).map(|i| {
            let headers = signed(
                "github",
                "pull_request",
                &format!("burst-{}", wave * 8 + i),
                &hook.secret,
                &p.body,
            );
            let control = &control;
            let hook = &hook;
            let body = &p.body;
            async move { control.deliver(&hook.id, &headers, body).await }
        }))
        .await;
        for resp in answers {
            assert_eq!(resp.status, 202, "{resp:?}");
            let answer = resp.json();
            let decision = answer["decision"].as_str().unwrap_or_default();
            assert!(
                decision == "queue:review" || decision == "deferred",
                "{decision}"
            );
            if decision == "deferred" {
                deferred.insert(answer["event_id"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    assert!(
        deferred.len() >= total - 200,
        "{} of {total} deferred",
        deferred.len()
    );
    eventually(Duration::from_secs(120), "the backlog routed", || async {
        db.store
            .unrouted_events(10)
            .await
            .map(|e| e.is_empty())
            .unwrap_or(false)
    })
    .await;
    // One todo per delivery, none lost, none doubled; the deferred ones decided in arrival
    // order: a later deferred delivery's todo is never older than an earlier one's.
    let mut all = Vec::new();
    let mut page = Page::first(200);
    loop {
        let got = db
            .store
            .list_todos(
                &scope,
                "review",
                switchboard_control::store::TodoFilter::All,
                &page,
            )
            .await
            .expect("todos");
        all.extend(got.items);
        match got.next_cursor {
            Some(token) => page = Page::after(token, 200),
            None => break,
        }
    }
    assert_eq!(all.len(), total);
    let mut ids: Vec<&str> = all.iter().map(|t| t.delivery_id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), total, "one todo per delivery id");
    let mut by_arrival = Vec::new();
    for t in all.iter().filter(|t| deferred.contains(&t.event_id)) {
        let event = db
            .store
            .get_event(&scope, &t.event_id)
            .await
            .expect("event");
        by_arrival.push((event.received_at, t.created_at));
    }
    by_arrival.sort();
    for pair in by_arrival.windows(2) {
        assert!(
            pair[0].1 <= pair[1].1,
            "a later deferred delivery was routed first: {pair:?}"
        );
    }
    control.stop().await;
}

pub async fn past_the_backlog_bound_a_signed_delivery_answers_429_with_retry_after(db: TestDb) {
    let router = router();
    let control = Control::start(
        &db.store,
        &[&router.addr],
        ControlSetup {
            limits: Limits {
                ingest_per_webhook_per_minute: 10,
                ingest_backlog_per_webhook: 30,
                ..Limits::default()
            },
            // No retry task: the backlog stays until a pass runs.
            retry: None,
            ..ControlSetup::default()
        },
    )
    .await;
    let (scope, hook) = alices_routed_github_webhook(&db.store).await;
    let p = payload("github", "pull_request.opened.json");
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..60 {
        let headers = signed(
            "github",
            "pull_request",
            &format!("b-{i}"),
            &hook.secret,
            &p.body,
        );
        let resp = control.deliver(&hook.id, &headers, &p.body).await;
        let key = if resp.status == 429 {
            assert!(resp.header("retry-after").is_some(), "{resp:?}");
            "429".to_string()
        } else {
            assert_eq!(resp.status, 202, "{resp:?}");
            resp.json()["decision"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        *counts.entry(key).or_default() += 1;
    }
    let routed = counts.get("queue:review").copied().unwrap_or(0);
    // 10 a minute, in minute windows: a run that crosses a window's end is given the next
    // window's 10 as well.
    assert!((1..=20).contains(&routed), "{counts:?}");
    assert_eq!(counts.get("deferred").copied(), Some(30), "{counts:?}");
    assert_eq!(
        counts.get("429").copied(),
        Some(60 - 30 - routed),
        "{counts:?}"
    );
    // A pass of the retry task routes exactly the deferred ones.
    let state = control.state();
    let options = quick_retry().expect("options");
    let n = switchboard_control::ingest::route_unrouted(&state, &options)
        .await
        .expect("a pass");
    assert_eq!(n, 30);
    assert_eq!(todos(&db.store, &scope, "review").await.len(), 30 + routed);
    control.stop().await;
}

pub async fn a_forgery_first_leaves_the_genuine_delivery_its_own_todo(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let (scope, hook) = alices_routed_github_webhook(&db.store).await;
    let p = payload("github", "pull_request.opened.json");
    let delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
    // The forger knows the delivery id, not the secret.
    let forged = signed(
        "github",
        "pull_request",
        delivery,
        "not-the-secret-at-all",
        &p.body,
    );
    let first = control.deliver(&hook.id, &forged, &p.body).await.json();
    assert_eq!(first["verified"], false, "{first}");
    let genuine = signed("github", "pull_request", delivery, &hook.secret, &p.body);
    let second = control.deliver(&hook.id, &genuine, &p.body).await.json();
    assert_eq!(second["verified"], true, "{second}");
    assert_eq!(second["redelivery"], false, "{second}");
    let todo_id = second["todo_id"].as_str().expect("a todo");
    assert_ne!(Some(todo_id), first["todo_id"].as_str());
    let todo = db.store.get_todo(&scope, todo_id).await.expect("todo");
    let event = db
        .store
        .get_event(&scope, &todo.event_id)
        .await
        .expect("event");
    assert!(event.verified, "the genuine todo is on the verified event");
    // A genuine redelivery now finds the genuine todo.
    let again = control.deliver(&hook.id, &genuine, &p.body).await.json();
    assert_eq!(again["redelivery"], true, "{again}");
    assert_eq!(again["todo_id"].as_str(), Some(todo_id));
    control.stop().await;
}

pub async fn an_unsigned_flood_leaves_signed_deliveries_answered(db: TestDb) {
    let router = router();
    let control = Control::start(
        &db.store,
        &[&router.addr],
        ControlSetup {
            limits: Limits {
                ingest_per_webhook_per_minute: 10,
                ingest_unverified_per_webhook_per_minute: 5,
                ..Limits::default()
            },
            ..ControlSetup::default()
        },
    )
    .await;
    let (scope, open) = alices_routed_github_webhook(&db.store).await;
    let strict = db
        .store
        .create_webhook(switchboard_control::store::NewWebhook {
            owner_scope: scope.clone(),
            source_type: switchboard_control::store::SourceType::Github,
            secret: None,
            grant: crate::control_harness::grant(),
            reject_unverified: true,
            name: None,
            configuration: Some(crate::support::typed(crate::ingest::routing_config())),
            actor: switchboard_control::store::Actor::operator(),
        })
        .await
        .expect("a webhook that rejects unverified deliveries");
    let p = payload("github", "pull_request.opened.json");
    for (hook, unsigned_answer) in [(&strict, 401), (&open, 429)] {
        let mut statuses = Vec::new();
        for i in 0..45 {
            let junk = signed(
                "github",
                "pull_request",
                &format!("junk-{i}"),
                "guess",
                &p.body,
            );
            statuses.push(control.deliver(&hook.id, &junk, &p.body).await.status);
        }
        assert!(statuses.contains(&unsigned_answer), "{statuses:?}");
        let headers = signed("github", "pull_request", "real-1", &hook.secret, &p.body);
        let resp = control.deliver(&hook.id, &headers, &p.body).await;
        assert_eq!(resp.status, 202, "{resp:?}");
        assert_eq!(resp.json()["decision"], "queue:review", "{resp:?}");
    }
    control.stop().await;
}
