//! Issue 50: what a user waits on does not grow with the size of the database. On PostgreSQL,
//! beside a bulk webhook of another scope holding thousands of events, todos and plans and
//! hundreds of ended trials, every hot path of a small webhook — ingest, the event and todo
//! listings and their cursors, a replay's load, explain's read, a claim and a completion, the
//! retention passes, plans, the reads of running trials — runs, and the statistics PostgreSQL
//! keeps per table and index then show how many rows and index entries those paths read: a
//! handful, never the bulk. A query that no index serves (a sequential scan, or a whole index
//! read end to end) reads the bulk and fails this test. Sequential scans are priced out
//! (`enable_seqscan = off`) so the planner's choice does not hang on its estimates of small
//! tables.

use std::time::Duration;

use sqlx::Row;
use switchboard_model::plan::StoredPlan;
use switchboard_model::trial::TrialEnd;
use switchboard_store::{
    Backend, EventFilter, NewEvent, NewPlan, NewTodo, OwnerScope, Page, RecordDecision, Store,
    StoreOptions, TodoFilter, Trial, Webhook, new_plan_token,
};

use crate::harness::{CLAIM_TTL, TestDb, config_routing_to, human, new_trial, webhook};

/// The tables a hot path must reach by an index only.
pub const HOT_TABLES: [&str; 4] = ["events", "todos", "plans", "trials"];

/// The bulk webhook's events (each with a todo) and plans.
const BULK_EVENTS: usize = 2000;
const BULK_PLANS: usize = 300;
/// The bulk webhook's trials, every one ended: a webhook's history of trials and guards.
const BULK_TRIALS: usize = 200;
/// The small webhook's own ended trials: a read of its whole history reads these.
const OWN_TRIALS: usize = 100;

/// What [`seed`] made for the hot paths to read.
pub struct Seeded {
    pub alice: OwnerScope,
    /// The small webhook: 30 events, [`OWN_TRIALS`] trials that ended and one running.
    pub wh: Webhook,
    /// Its neighbour of the same scope (10 events), deleted by the walk.
    pub other: Webhook,
    pub running: Trial,
}

/// Starts a trial on `wh` and, unless `running`, stops it.
async fn trial(store: &Store, scope: &OwnerScope, wh: &Webhook, running: bool) -> Trial {
    let started = store
        .start_trial(new_trial(scope, wh), 1)
        .await
        .expect("a trial");
    if running {
        return started;
    }
    store
        .end_trial(scope, &started.id, TrialEnd::Stopped)
        .await
        .expect("stopped")
}

fn delivery(webhook_id: &str, delivery_id: &str, kind: &str) -> NewEvent {
    NewEvent {
        webhook_id: webhook_id.into(),
        delivery_id: delivery_id.into(),
        kind: kind.into(),
        headers: vec![],
        body: b"{\"action\":\"opened\"}".to_vec().into(),
        verified: true,
    }
}

fn to_queue(queue: &str) -> RecordDecision {
    RecordDecision {
        decision: switchboard_model::RecordedDecision::to_queue(queue),
        fault: None,
        todo: Some(NewTodo {
            queue: queue.into(),
            rule_id: Some("r-1".into()),
        }),
        decided_by: None,
    }
}

/// `url` with a connection option appended.
fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// Waits until no connection named `application` is open: a closed pool's backends have
/// exited, and with that flushed what they counted.
async fn closed(probe: &sqlx::PgPool, application: &str) {
    for _ in 0..200 {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind(application)
                .fetch_one(probe)
                .await
                .expect("activity");
        if n == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the store's connections ({application}) did not close");
}

/// Rows and index entries read so far from each hot table of this test's schema: what its
/// sequential scans returned plus what its indexes' scans returned.
async fn reads(probe: &sqlx::PgPool) -> Vec<(String, i64)> {
    // A fresh snapshot: the statistics as they stand now, not as this session last read them.
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(probe)
        .await
        .expect("clear snapshot");
    sqlx::query(
        "SELECT t.relname, COALESCE(t.seq_tup_read, 0) \
           + COALESCE((SELECT SUM(i.idx_tup_read) FROM pg_stat_user_indexes i \
                       WHERE i.relid = t.relid), 0)::BIGINT AS n \
         FROM pg_stat_user_tables t \
         WHERE t.schemaname = current_schema() AND t.relname = ANY($1) ORDER BY t.relname",
    )
    .bind(HOT_TABLES.map(String::from).to_vec())
    .fetch_all(probe)
    .await
    .expect("table statistics")
    .iter()
    .map(|r| (r.get::<String, _>("relname"), r.get::<i64, _>("n")))
    .collect()
}

fn plan_for(store: &Store, webhook: &Webhook, hash: String) -> NewPlan {
    NewPlan {
        webhook_id: webhook.id.clone(),
        owner_scope: webhook.owner_scope.clone(),
        token_hash: hash,
        pack_name: "drop-ci-noise".into(),
        pack_version: "1.0.0".into(),
        params_digest: "p".into(),
        candidate: config_routing_to("forge"),
        base_config_version: webhook.config_version,
        expires_at: store.clock().now_ms() + 3_600_000,
        plan: StoredPlan::default(),
    }
}

/// The small webhook and its neighbour of one scope, beside the bulk: another scope's webhook
/// with [`BULK_EVENTS`] events, each with a todo, [`BULK_PLANS`] plans and [`BULK_TRIALS`]
/// ended trials.
pub async fn seed(setup: &Store) -> Seeded {
    let alice = human(setup, "alice").await;
    let wh = webhook(setup, &alice).await;
    let other = webhook(setup, &alice).await;
    for i in 0..40 {
        let target = if i % 4 == 0 { &other.id } else { &wh.id };
        let kind = if i % 2 == 0 { "issues.opened" } else { "push" };
        let draft = setup
            .draft_event(delivery(target, &format!("seed-{i}"), kind))
            .expect("draft");
        setup
            .store_event(draft, Some(to_queue("forge")))
            .await
            .expect("seed");
    }
    // The bulk: another scope's webhook, far bigger than anything the hot paths may read.
    let bulk_scope = human(setup, "bulk").await;
    let bulk = webhook(setup, &bulk_scope).await;
    let senders = (0..8).map(|s| {
        let (setup, bulk) = (setup.clone(), bulk.id.clone());
        tokio::spawn(async move {
            for i in (s..BULK_EVENTS).step_by(8) {
                let draft = setup
                    .draft_event(delivery(&bulk, &format!("bulk-{i}"), "push"))
                    .expect("draft");
                setup
                    .store_event(draft, Some(to_queue("forge")))
                    .await
                    .expect("bulk");
            }
        })
    });
    for sender in futures::future::join_all(senders).await {
        sender.expect("a bulk sender");
    }
    for _ in 0..BULK_PLANS {
        let (_, hash) = new_plan_token().expect("token");
        setup
            .insert_plan(plan_for(setup, &bulk, hash))
            .await
            .expect("a bulk plan");
    }
    for _ in 0..BULK_TRIALS {
        trial(setup, &bulk_scope, &bulk, false).await;
    }
    for _ in 0..OWN_TRIALS {
        trial(setup, &alice, &wh, false).await;
    }
    // The ended ones ended before anything the walk reads at "now".
    tokio::time::sleep(Duration::from_millis(5)).await;
    let running = trial(setup, &alice, &wh, true).await;
    Seeded {
        alice,
        wh,
        other,
        running,
    }
}

/// Every hot path once, on the small webhook: what the tests count the reads of.
pub async fn walk(store: &Store, seeded: &Seeded) {
    let Seeded {
        alice,
        wh,
        other,
        running,
    } = seeded;
    // Ingest: stored undecided then routed, and stored decided in one write.
    let event = store
        .insert_event(delivery(&wh.id, "live-1", "issues.opened"))
        .await
        .expect("stored");
    store
        .record_decision(&event.id, to_queue("triage"))
        .await
        .expect("routed");
    let draft = store
        .draft_event(delivery(&wh.id, "live-2", "push"))
        .expect("draft");
    let (decided, todo) = store
        .store_event(draft, Some(to_queue("forge")))
        .await
        .expect("one write");
    let todo = todo.expect("a todo").todo;

    // The event listings, a cursor page, filters, one event, and a replay's load.
    let first = store
        .list_events(alice, &wh.id, &Page::first(10))
        .await
        .expect("first page");
    let cursor = first.next_cursor.expect("a second page");
    store
        .list_events(alice, &wh.id, &Page::after(cursor, 10))
        .await
        .expect("second page");
    store
        .list_events_where(
            alice,
            &wh.id,
            &EventFilter {
                kind: Some("push".into()),
                ..EventFilter::default()
            },
            &Page::first(10),
        )
        .await
        .expect("by kind");
    store
        .get_event(alice, &decided.id)
        .await
        .expect("one event");
    store
        .recent_events(alice, &wh.id, 1000, None)
        .await
        .expect("a replay's load");
    store
        .decisions_per_hour(alice, &wh.id, 0)
        .await
        .expect("the chart");
    store.unrouted_events(100).await.expect("unrouted");

    // Todos: a queue's page, a claim, a completion.
    store
        .list_todos(alice, "forge", TodoFilter::Unclaimed, &Page::first(10))
        .await
        .expect("todos");
    store
        .claim_todo(alice, &todo.id, "ep_worker", CLAIM_TTL)
        .await
        .expect("claimed");
    store
        .complete_todo(alice, &todo.id, "ep_worker")
        .await
        .expect("completed");

    // Plans: made, read by token, listed for a person, purged when expired.
    let (_, hash) = new_plan_token().expect("token");
    store
        .insert_plan(plan_for(store, wh, hash.clone()))
        .await
        .expect("a plan");
    store.plan_by_token(&hash, alice).await.expect("by token");
    store
        .pending_plans(std::slice::from_ref(alice))
        .await
        .expect("the inbox");
    store
        .purge_plans_expired_before(0, 100)
        .await
        .expect("plans purged");

    // Trials: ingest's refresh of the running ones, explain's read of those running at a
    // delivery, one trial's report, a page of them, the newest guard, the overdue pass, and
    // retention's purge of the ended ones.
    store.running_trials(&wh.id).await.expect("running trials");
    let now = store.clock().now_ms();
    let at = store
        .trials_running_at(alice, &wh.id, now)
        .await
        .expect("running at a delivery");
    assert_eq!(at.len(), 1, "the running trial");
    store
        .get_trial(alice, &running.id)
        .await
        .expect("the report");
    store
        .list_trials_page(alice, &wh.id, &Page::first(10))
        .await
        .expect("a page of trials");
    store
        .newest_guard(alice, &wh.id)
        .await
        .expect("the newest guard");
    store
        .guard_of_plan(alice, &running.plan_id)
        .await
        .expect("a plan's guard");
    store.end_overdue_trials().await.expect("the overdue pass");
    store
        .purge_trials_ended_before(0, 100)
        .await
        .expect("trials purged");

    // Retention: by age, by count, and the window a listing tells.
    store
        .purge_events_received_before(0, 100)
        .await
        .expect("age pass");
    store
        .webhooks_over_event_count(100_000)
        .await
        .expect("the count pass");
    store
        .purge_events_past_count(&wh.id, 25, 100)
        .await
        .expect("past the count");
    store.oldest_event_at(&wh.id).await.expect("oldest");

    // A webhook deleted, its events, todos and plans with it.
    store
        .delete_webhook(alice, &other.id)
        .await
        .expect("deleted");
}

pub async fn hot_paths_reach_events_todos_plans_and_trials_by_index_only(db: TestDb) {
    assert_eq!(
        db.backend(),
        Backend::Postgres,
        "PostgreSQL keeps the scan counts"
    );
    let url = crate::harness::second_database(&db).await;
    let tag = format!("hot_paths_{}", std::process::id());
    let (setup_app, hot_app) = (format!("{tag}_setup"), format!("{tag}_hot"));
    // The data, written by a store of its own and closed before counting starts.
    let setup = Store::connect_with(
        &with_option(&url, &format!("application_name={setup_app}")),
        StoreOptions {
            sealing_key: Some(db.store.sealing_key().clone()),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("setup store");
    let seeded = seed(&setup).await;
    sqlx::query("ANALYZE")
        .execute(setup.pool())
        .await
        .expect("analyze");
    setup.close().await;

    let probe = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("probe");
    closed(&probe, &setup_app).await;
    let before = reads(&probe).await;

    let store = Store::connect_with(
        &with_option(
            &url,
            &format!("application_name={hot_app}&options[enable_seqscan]=off"),
        ),
        StoreOptions {
            sealing_key: Some(db.store.sealing_key().clone()),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("store without sequential scans");

    walk(&store, &seeded).await;
    store.close().await;

    closed(&probe, &hot_app).await;
    let after = reads(&probe).await;
    assert_eq!(after.len(), HOT_TABLES.len(), "{after:?}");
    let read: Vec<(String, i64)> = before
        .iter()
        .zip(&after)
        .map(|((table, was), (_, now))| (table.clone(), now - was))
        .collect();
    // The small webhook holds 30 events and 101 trials; the bulk 2,000 events and todos, 300
    // plans and 200 trials.
    for (table, n) in &read {
        let bound = match table.as_str() {
            "plans" => 100,
            "trials" => 50,
            _ => 600,
        };
        assert!(
            *n < bound,
            "the hot paths read {n} rows and index entries of {table}, a scan of the bulk: {read:?}"
        );
    }
    probe.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}
