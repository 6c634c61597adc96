use std::collections::HashSet;
use std::time::Duration;

use sqlx::AssertSqlSafe;
use switchboard_model::{Label, RecordedDecision, RecordedFault};
use switchboard_store::Clock;
use switchboard_store::{DecisionClass, EventFilter, NewEvent, NewTodo, Page, RecordDecision};

use crate::harness::{
    ALL_MIGRATIONS, TestDb, applied_migrations, decision_refused_mid_transaction, human, invalid,
    not_found, queued, webhook,
};

fn payload() -> std::path::PathBuf {
    switchboard_testkit::payloads_dir::webhooks_dir().join("github/pull_request.opened.json")
}

fn event(webhook_id: &str, delivery_id: &str) -> NewEvent {
    NewEvent {
        webhook_id: webhook_id.into(),
        delivery_id: delivery_id.into(),
        kind: "pull_request.opened".into(),
        headers: vec![("X-GitHub-Event".into(), "pull_request".into())],
        body: b"{\"action\":\"opened\"}".to_vec().into(),
        verified: true,
    }
}

pub async fn body_and_headers_round_trip_byte_exact(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let body = std::fs::read(payload()).expect("the vendored github payload");
    assert!(body.len() > 10_000, "a real payload, not a stub");
    // Names as the forge spelled them, in order, with a repeated header and odd values.
    let headers: Vec<(String, String)> = [
        ("Host", "switchboard.example"),
        ("User-Agent", "GitHub-Hookshot/044aadd"),
        ("Content-Type", "application/json"),
        ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ("X-GitHub-Event", "pull_request"),
        ("X-GitHub-Hook-ID", "292430182"),
        (
            "X-Hub-Signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ),
        ("x-custom", "  padded value\twith tab  "),
        ("x-custom", "second \"quoted\" ünïcödé"),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect();
    let stored = db
        .insert_event(NewEvent {
            webhook_id: wh.id.clone(),
            delivery_id: "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
            kind: "pull_request.opened".into(),
            headers: headers.clone(),
            body: body.clone().into(),
            verified: true,
        })
        .await
        .unwrap();
    assert!(!stored.routed && stored.decision.is_none());
    assert_eq!(
        stored.source, "github",
        "the source is the webhook's source type"
    );
    assert_eq!(stored.owner_scope, alice);
    let read = db.get_event(&alice, &stored.id).await.unwrap();
    assert_eq!(read.body, body, "body byte-exact");
    assert_eq!(read.headers, headers, "headers exact, in order");
    assert_eq!(read, stored);
    let replayed = db.recent_events(&alice, &wh.id, 1, None).await.unwrap();
    assert_eq!(replayed[0].body, body);

    // Bytes that are not UTF-8, NULs and an empty body survive too.
    for odd in [vec![0xff, 0x00, 0xfe, b'{', 0x00], vec![]] {
        let e = db
            .insert_event(NewEvent {
                body: odd.clone().into(),
                ..event(&wh.id, "odd")
            })
            .await
            .unwrap();
        assert_eq!(
            db.get_event(&alice, &e.id).await.unwrap().body.as_ref(),
            odd.as_slice()
        );
    }
    not_found(db.insert_event(event("wh_unknown", "d")).await, "webhook");
    invalid(db.insert_event(event(&wh.id, "")).await, "delivery_id");
    invalid(
        db.insert_event(NewEvent {
            kind: String::new(),
            ..event(&wh.id, "d")
        })
        .await,
        "kind",
    );
}

pub async fn events_list_newest_first_in_pages(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let other = webhook(&store, &alice).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        // Pairs share a millisecond, so the id breaks ties and paging must still be exact.
        if i % 2 == 0 {
            clock.advance(Duration::from_millis(5));
        }
        ids.push(
            store
                .insert_event(event(&wh.id, &format!("d-{i}")))
                .await
                .unwrap(),
        );
        store
            .insert_event(event(&other.id, &format!("o-{i}")))
            .await
            .unwrap();
    }
    let mut expected: Vec<_> = ids.iter().map(|e| (e.received_at, e.id.clone())).collect();
    expected.sort();
    expected.reverse();

    let mut seen = Vec::new();
    let mut page = Page::first(3);
    let mut pages = 0;
    loop {
        let got = store.list_events(&alice, &wh.id, &page).await.unwrap();
        pages += 1;
        assert!(got.items.len() <= 3);
        seen.extend(got.items.iter().map(|e| (e.received_at, e.id.clone())));
        assert!(got.items.iter().all(|e| e.webhook_id == wh.id));
        match got.next_cursor {
            Some(c) => page = Page::after(c, 3),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, expected, "newest first, every event once");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 7);

    invalid(
        store
            .list_events(&alice, &wh.id, &Page::after("garbage", 3))
            .await,
        "cursor",
    );
    // Cursors are opaque: the position they hold, written out, is not one.
    let (ms, id) = &expected[2];
    invalid(
        store
            .list_events(&alice, &wh.id, &Page::after(format!("{ms}:{id}"), 3))
            .await,
        "cursor",
    );
    let first = store
        .list_events(&alice, &wh.id, &Page::first(3))
        .await
        .unwrap();
    let cursor = first.next_cursor.expect("more than a page");
    assert!(
        !cursor.contains(id.as_str()) && !cursor.contains(&ms.to_string()),
        "{cursor} shows its position"
    );

    invalid(
        store.list_events(&alice, &wh.id, &Page::first(0)).await,
        "limit",
    );
    invalid(
        store
            .list_events(&alice, &wh.id, &Page::first(10_000))
            .await,
        "limit",
    );
    let all = store
        .list_events(&alice, &wh.id, &Page::default())
        .await
        .unwrap();
    assert_eq!((all.items.len(), all.next_cursor), (7, None));
}

pub async fn replay_window_reads_recent_events_of_one_webhook(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let bob = human(&store, "bob").await;
    let wh = webhook(&store, &alice).await;
    let bobs = webhook(&store, &bob).await;
    let mut times = Vec::new();
    for i in 0..10 {
        clock.advance(Duration::from_secs(1));
        times.push(
            store
                .insert_event(event(&wh.id, &format!("d-{i}")))
                .await
                .unwrap()
                .received_at,
        );
        store
            .insert_event(event(&bobs.id, &format!("b-{i}")))
            .await
            .unwrap();
    }
    let newest = store.recent_events(&alice, &wh.id, 3, None).await.unwrap();
    assert_eq!(
        newest.iter().map(|e| e.received_at).collect::<Vec<_>>(),
        vec![times[9], times[8], times[7]]
    );
    let since = store
        .recent_events(&alice, &wh.id, 1000, Some(times[5]))
        .await
        .unwrap();
    assert_eq!(since.len(), 5);
    assert!(
        since
            .iter()
            .all(|e| e.webhook_id == wh.id && e.received_at >= times[5])
    );
    let all = store
        .recent_events(&alice, &wh.id, 1000, None)
        .await
        .unwrap();
    assert_eq!(
        all.len(),
        10,
        "another owner's deliveries never enter the window"
    );
    invalid(
        store.recent_events(&alice, &wh.id, 1001, None).await,
        "limit",
    );
    invalid(store.recent_events(&alice, &wh.id, 0, None).await, "limit");
}

pub async fn a_window_of_big_bodies_is_cut_at_its_byte_bound_and_says_so(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    // Five events, newest last, of 100, 200, 300, 400 and 500 bytes.
    let mut ids = Vec::new();
    for i in 1..=5usize {
        clock.advance(Duration::from_secs(1));
        let mut new = event(&wh.id, &format!("big-{i}"));
        new.body = vec![b' '; i * 100].into();
        ids.push(store.insert_event(new).await.unwrap().id);
    }
    let within = |max_bytes: usize| {
        let store = store.clone();
        let (alice, wh) = (alice.clone(), wh.id.clone());
        async move {
            let loaded = store
                .recent_events_within(&alice, &wh, 1000, None, max_bytes)
                .await
                .unwrap();
            let sizes: Vec<usize> = loaded.events.iter().map(|e| e.body.len()).collect();
            (sizes, loaded.capped)
        }
    };
    // Newest first. A body is kept when the bodies before it hold less than the bound, so
    // the 300 (after 900 bytes) is kept under 901, not under 900.
    assert_eq!(within(901).await, (vec![500, 400, 300], true));
    assert_eq!(within(900).await, (vec![500, 400], true));
    assert_eq!(within(501).await, (vec![500, 400], true));
    assert_eq!(within(500).await, (vec![500], true));
    // The newest event is read whatever its size, so a replay is never empty.
    assert_eq!(within(1).await, (vec![500], true));
    assert_eq!(within(1500).await, (vec![500, 400, 300, 200, 100], false));
    // The count limit is no byte cap.
    let two = store
        .recent_events_within(&alice, &wh.id, 2, None, 1500)
        .await
        .unwrap();
    assert_eq!((two.events.len(), two.capped), (2, false));
    assert_eq!(two.events[0].id, ids[4]);
    // The bodies come back byte for byte.
    assert!(two.events.iter().all(|e| e.body.iter().all(|b| *b == b' ')));
}

pub async fn unrouted_events_are_found_until_routed(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let mut events = Vec::new();
    for i in 0..3 {
        clock.advance(Duration::from_millis(10));
        events.push(
            store
                .insert_event(event(&wh.id, &format!("d-{i}")))
                .await
                .unwrap(),
        );
    }
    let ids = |v: Vec<switchboard_store::Event>| v.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.unrouted_events(100).await.unwrap()),
        vec![
            events[0].id.clone(),
            events[1].id.clone(),
            events[2].id.clone()
        ]
    );
    let decision = RecordDecision {
        decision: RecordedDecision {
            fault_code: Some("budget_exceeded".into()),
            ..RecordedDecision::new(Label::Fault).by_rule("r-1")
        },
        fault: Some(RecordedFault {
            code: "budget_exceeded".into(),
            disposition: None,
            reason: String::new(),
            rule_id: Some("r-1".into()),
        }),
        todo: None,
        decided_by: None,
    };
    assert_eq!(
        store
            .record_decision(&events[1].id, decision.clone())
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        ids(store.unrouted_events(100).await.unwrap()),
        vec![events[0].id.clone(), events[2].id.clone()]
    );
    let routed = store.get_event(&alice, &events[1].id).await.unwrap();
    assert!(routed.routed && routed.routed_at.is_some());
    assert_eq!(routed.decision, Some(decision.decision.clone()));
    assert_eq!(routed.fault, decision.fault);
    assert_eq!(
        ids(store.unrouted_events(1).await.unwrap()),
        vec![events[0].id.clone()]
    );
    for e in [&events[0], &events[2]] {
        let todo = Some(NewTodo {
            queue: "forge".into(),
            rule_id: Some("r-1".into()),
        });
        let made = store
            .record_decision(
                &e.id,
                RecordDecision {
                    decision: RecordedDecision::to_queue("forge"),
                    fault: None,
                    todo,
                    decided_by: None,
                },
            )
            .await
            .unwrap();
        assert!(made.expect("a todo").inserted);
    }
    assert!(store.unrouted_events(100).await.unwrap().is_empty());
}

pub async fn recording_a_decision_on_an_unknown_event_writes_nothing(db: TestDb) {
    let todo = Some(NewTodo {
        queue: "forge".into(),
        rule_id: None,
    });
    not_found(
        db.record_decision(
            "ev_unknown",
            RecordDecision {
                decision: RecordedDecision::new(Label::Default),
                fault: None,
                todo,
                decided_by: None,
            },
        )
        .await,
        "event",
    );
    not_found(
        db.insert_todo(
            "ev_unknown",
            NewTodo {
                queue: "forge".into(),
                rule_id: None,
            },
        )
        .await,
        "event",
    );
}

/// A decision is recorded once: a second pass over the same event (the retry task racing
/// ingest's own routing, or one after a redrive routed it) is refused with `conflict`, writes
/// nothing, and the first decision and its todo stand, as `standing_decision` reads them.
pub async fn a_decision_is_recorded_once_and_the_first_stands(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let stored = db.insert_event(event(&wh.id, "once-1")).await.unwrap();
    let to = |queue: &str| RecordDecision {
        decision: RecordedDecision::to_queue(queue),
        fault: None,
        todo: Some(NewTodo {
            queue: queue.into(),
            rule_id: None,
        }),
        decided_by: None,
    };
    let first = db.record_decision(&stored.id, to("forge")).await.unwrap();
    let first = first.expect("a todo");
    assert!(first.inserted);
    let second = db.record_decision(&stored.id, to("triage")).await;
    assert!(
        matches!(second, Err(switchboard_store::Error::Conflict { .. })),
        "{second:?}"
    );
    let (decision, todo) = db.standing_decision(&stored.id).await.unwrap();
    assert_eq!(decision, Some(RecordedDecision::to_queue("forge")));
    let todo = todo.expect("the first decision's todo");
    assert_eq!((todo.id, todo.queue), (first.todo.id, "forge".to_string()));
    let triage = db
        .list_todos(
            &alice,
            "triage",
            switchboard_store::TodoFilter::All,
            &Page::first(10),
        )
        .await
        .unwrap();
    assert!(triage.items.is_empty(), "the refused decision made no todo");
    not_found(db.standing_decision("ev_unknown").await, "event");
}

/// Decisions that race in shared commits (issue 22's multi-row statements): for each of 8
/// events, 16 passes record at once, half naming their configuration and half not, beside 16
/// decisions on events that do not exist. Whatever batches they land in, each event keeps
/// exactly one decision and one todo, every other pass on it is a `conflict` answered nothing,
/// and the unknown events are `not_found`.
pub async fn racing_decisions_in_shared_commits_record_one_each(db: TestDb) {
    use switchboard_store::DecidedBy;
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let mut events = Vec::new();
    for i in 0..8 {
        events.push(
            db.insert_event(event(&wh.id, &format!("race-{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    let before = db.group_commit_tally();
    let passes = events
        .iter()
        .flat_map(|id| (0..16).map(move |p| (id.clone(), p)));
    let unknown = (0..16).map(|p| (format!("ev_missing{p}"), p));
    let tasks: Vec<_> = passes
        .chain(unknown)
        .map(|(event_id, pass)| {
            let store = db.store.clone();
            tokio::spawn(async move {
                let queue = format!("q{}", pass % 4);
                let outcome = RecordDecision {
                    decision: RecordedDecision::to_queue(&queue).by_rule(&format!("r-{pass}")),
                    fault: None,
                    todo: Some(NewTodo {
                        queue,
                        rule_id: Some(format!("r-{pass}")),
                    }),
                    decided_by: (pass % 2 == 0).then(|| DecidedBy {
                        version: 1,
                        digest: "ab".repeat(32),
                    }),
                };
                (
                    event_id.clone(),
                    store.record_decision(&event_id, outcome).await,
                )
            })
        })
        .collect();
    let mut won = std::collections::HashMap::new();
    for task in futures::future::join_all(tasks).await {
        let (event_id, answer) = task.expect("a pass");
        match answer {
            Ok(Some(todo)) => {
                assert!(todo.inserted, "the decision that stands made its todo");
                assert_eq!(todo.todo.event_id, event_id);
                assert!(
                    won.insert(event_id, todo.todo).is_none(),
                    "one winner per event"
                );
            }
            Err(switchboard_store::Error::Conflict { .. }) => {
                assert!(
                    events.contains(&event_id),
                    "{event_id}: conflict on a real event"
                );
            }
            Err(switchboard_store::Error::NotFound { .. }) => {
                assert!(event_id.starts_with("ev_missing"), "{event_id}: not found");
            }
            other => panic!("{event_id}: {other:?}"),
        }
    }
    assert_eq!(won.len(), 8, "every event was routed once");
    for id in &events {
        let (decision, todo) = db.standing_decision(id).await.unwrap();
        let todo = todo.expect("a todo");
        assert_eq!(todo, won[id], "the todo answered is the one stored");
        assert_eq!(
            todo.rule_id,
            decision.expect("a decision").rule_id,
            "decision and todo of one pass"
        );
    }
    let after = db.group_commit_tally();
    assert_eq!(
        after.writes - before.writes,
        8 * 16 + 16,
        "every write answered once"
    );
}

/// A stored event is visible to every other connection the moment `insert_event` returns:
/// ingest routes it (and answers 202) right after, from wherever the pool hands out. On
/// PostgreSQL a row taken before the statement's end came before the commit (found by
/// benches/ingest.rs); each insert here is read at once through a second pool.
pub async fn a_stored_event_is_visible_to_other_connections_at_once(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let other = switchboard_store::Store::connect(&db.url, db.store.sealing_key())
        .await
        .expect("a second pool on the same database");
    let body = std::fs::read(payload()).expect("the vendored github payload");
    // Eight writers at once, as ingest's clients are: each read goes to the other pool.
    let writers = (0..8).map(|w| {
        let (store, other, alice, wh, body) = (
            db.store.clone(),
            other.clone(),
            alice.clone(),
            wh.id.clone(),
            body.clone(),
        );
        tokio::spawn(async move {
            let mut missing = Vec::new();
            for i in 0..60 {
                let mut new = event(&wh, &format!("visible-{w}-{i}"));
                new.body = body.clone().into();
                let stored = store.insert_event(new).await.expect("insert");
                if other.get_event(&alice, &stored.id).await.is_err() {
                    missing.push(format!("{w}-{i}"));
                }
            }
            missing
        })
    });
    let mut missing = Vec::new();
    for writer in futures::future::join_all(writers).await {
        missing.extend(writer.expect("a writer"));
    }
    assert!(
        missing.is_empty(),
        "not yet visible after insert_event: {missing:?}"
    );
}

/// Writers that fail mid-transaction (the transaction is dropped, not committed) and writers
/// that succeed, 16 at once: every write finishes and nothing is left holding the write lock
/// or the write turn (SQLite's writers take turns in-process: `dialect::WriteTurns`).
pub async fn failed_writes_leave_the_next_writer_free(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let writers = (0..16).map(|w| {
        let (store, wh) = (db.store.clone(), wh.id.clone());
        tokio::spawn(async move {
            for i in 0..10 {
                let stored = store
                    .insert_event(event(&wh, &format!("turns-{w}-{i}")))
                    .await
                    .expect("insert");
                let refused = decision_refused_mid_transaction();
                assert!(store.record_decision(&stored.id, refused).await.is_err());
                let good = queued("triage");
                let todo = store.record_decision(&stored.id, good).await;
                assert!(todo.expect("record").is_some_and(|t| t.inserted));
            }
        })
    });
    let all = futures::future::join_all(writers);
    // A turn or a lock left behind would stall the writers behind it, not fail them.
    let finished = tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("every writer finishes");
    for writer in finished {
        writer.expect("a writer");
    }
    assert!(db.unrouted_events(10).await.unwrap().is_empty());
    let n: i64 = sqlx::Row::try_get(
        &sqlx::query("SELECT COUNT(*) AS n FROM todos")
            .fetch_one(db.pool())
            .await
            .unwrap(),
        "n",
    )
    .unwrap();
    assert_eq!(n, 160, "one todo per delivery");
}

/// Group commit (issue 22): 32 senders at once, each delivery stored then decided, half of
/// them redeliveries of the other half, with deliveries to a deleted webhook mixed into the
/// same batches. Every write gets its own answer (a bad one costs the others nothing), every
/// delivery is stored once, each delivery has one todo, and writes shared commits.
pub async fn concurrent_deliveries_share_commits_and_each_is_stored_once(db: TestDb) {
    let (commits, writes) = thirty_two_senders(&db, &db.store).await;
    assert!(
        commits * 2 <= writes,
        "concurrent writes shared commits: {commits} commits for {writes} writes"
    );
}

/// The same senders with group commit off (`max_writes` 1, `--group-commit-writes 1`): the
/// same outcome, each write in a commit of its own.
pub async fn with_group_commit_off_each_write_commits_alone(db: TestDb) {
    use switchboard_store::Store;
    use switchboard_store::{GroupCommitBounds, StoreOptions};
    let off = Store::connect_with(
        &db.url,
        StoreOptions {
            sealing_key: Some(db.store.sealing_key().clone()),
            group_commit: GroupCommitBounds {
                max_writes: 1,
                ..GroupCommitBounds::default()
            },
            ..StoreOptions::default()
        },
    )
    .await
    .expect("open the store again");
    let (commits, writes) = thirty_two_senders(&db, &off).await;
    // The 64 inserts for a deleted webhook commit nothing.
    assert_eq!(commits, writes - 64);
    off.close().await;
}

/// Ingest's one write (issue 22): a delivery a router decided before it was stored goes to the
/// store with its decision, the configuration it was made under and its todo — routed at
/// once, never in the unrouted backlog, one write answered — and a second decision on it is a
/// `conflict`. A redelivery stored decided finds the first one's todo; a decided delivery for
/// a deleted webhook stores nothing, todo included; a todo without a queue is refused before
/// anything is written.
pub async fn a_delivery_decided_before_it_is_stored_is_one_write_with_its_todo(db: TestDb) {
    use switchboard_store::DecidedBy;
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let decided = |queue: &str| RecordDecision {
        decision: RecordedDecision::to_queue(queue).by_rule("r-1"),
        fault: None,
        todo: Some(NewTodo {
            queue: queue.into(),
            rule_id: Some("r-1".into()),
        }),
        decided_by: Some(DecidedBy {
            version: 3,
            digest: "cd".repeat(32),
        }),
    };
    let before = db.group_commit_tally();
    let draft = db.draft_event(event(&wh.id, "one-write")).unwrap();
    let (id, received_at) = (draft.id.clone(), draft.received_at);
    let (stored, todo) = db
        .store_event(draft, Some(decided("review")))
        .await
        .unwrap();
    assert_eq!(
        db.group_commit_tally().writes - before.writes,
        1,
        "one write"
    );
    assert_eq!(
        (stored.id.as_str(), stored.received_at),
        (id.as_str(), received_at)
    );
    assert!(stored.routed);
    assert_eq!(stored.routed_at, Some(received_at));
    assert_eq!(stored.decision, Some(decided("review").decision));
    let first = todo.expect("the decision's todo");
    assert!(first.inserted);
    assert_eq!(
        (first.todo.queue.as_str(), first.todo.event_id.as_str()),
        ("review", id.as_str())
    );
    let (read, by) = db.get_event_decided_by(&alice, &id).await.unwrap();
    assert_eq!(read, stored);
    assert_eq!(by, decided("review").decided_by);
    assert!(db.unrouted_events(100).await.unwrap().is_empty());
    assert_eq!(db.unrouted_count(&wh.id).await.unwrap(), 0);
    let again = db.record_decision(&id, decided("triage")).await;
    assert!(
        matches!(again, Err(switchboard_store::Error::Conflict { .. })),
        "{again:?}"
    );

    // A fault recorded with the event, and a delivery stored with no decision beside it.
    let faulted = RecordDecision {
        decision: RecordedDecision {
            fault_code: Some("budget_exceeded".into()),
            ..RecordedDecision::new(Label::Fault)
        },
        fault: Some(budget_fault("r-2")),
        todo: None,
        decided_by: None,
    };
    let draft = db.draft_event(event(&wh.id, "faulted")).unwrap();
    let (stored, todo) = db.store_event(draft, Some(faulted.clone())).await.unwrap();
    assert!(stored.routed && todo.is_none());
    assert_eq!(
        (stored.decision, stored.fault),
        (Some(faulted.decision), faulted.fault)
    );
    let draft = db.draft_event(event(&wh.id, "undecided")).unwrap();
    let (stored, todo) = db.store_event(draft, None).await.unwrap();
    assert!(!stored.routed && stored.decision.is_none() && todo.is_none());
    assert_eq!(db.unrouted_count(&wh.id).await.unwrap(), 1);

    // The forge redelivers: stored decided again, it finds the first delivery's todo.
    let draft = db.draft_event(event(&wh.id, "one-write")).unwrap();
    let (_, again) = db
        .store_event(draft, Some(decided("review")))
        .await
        .unwrap();
    let again = again.expect("the first delivery's todo");
    assert!(!again.inserted);
    assert_eq!(again.todo.id, first.todo.id);

    let gone = webhook(&db, &alice).await;
    db.delete_webhook(&alice, &gone.id).await.unwrap();
    let draft = db.draft_event(event(&gone.id, "lost")).unwrap();
    not_found(
        db.store_event(draft, Some(decided("review"))).await,
        "webhook",
    );
    let draft = db.draft_event(event(&wh.id, "no-queue")).unwrap();
    invalid(db.store_event(draft, Some(decided(""))).await, "queue");
    let row = sqlx::query("SELECT COUNT(*) AS n FROM todos")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(
        sqlx::Row::try_get::<i64, _>(&row, "n").unwrap(),
        1,
        "one todo in all"
    );
}

/// 32 senders storing decided deliveries at once (senders s and s + 16 send the same ones),
/// with decided deliveries for a deleted webhook in the same batches: every delivery stored
/// once and routed, one todo per delivery made by exactly one of its two deliveries, one write
/// each, and the writes shared commits.
pub async fn concurrent_decided_deliveries_share_commits_and_make_each_todo_once(db: TestDb) {
    decided_senders(&db, &db.store).await;
}

/// The same 32 senders through a store whose PostgreSQL batches take `BEGIN`, their inserts
/// and `COMMIT` instead of one statement (`StoreOptions::postgres_one_statement` off): the same
/// outcome, so both ways of writing a batch stay right.
pub async fn with_one_statement_off_decided_deliveries_are_stored_the_same(db: TestDb) {
    let off = store_without_one_statement(&db).await;
    decided_senders(&db, &off).await;
    off.close().await;
}

async fn store_without_one_statement(db: &TestDb) -> switchboard_store::Store {
    switchboard_store::Store::connect_with(
        &db.url,
        switchboard_store::StoreOptions {
            sealing_key: Some(db.store.sealing_key().clone()),
            postgres_one_statement: false,
            ..Default::default()
        },
    )
    .await
    .expect("open the store again")
}

async fn decided_senders(db: &TestDb, store: &switchboard_store::Store) {
    let alice = human(db, "alice").await;
    let hooks = [webhook(db, &alice).await.id, webhook(db, &alice).await.id];
    let gone = webhook(db, &alice).await.id;
    db.delete_webhook(&alice, &gone).await.unwrap();
    let before = store.group_commit_tally();
    let to_triage = queued("triage");
    let senders = (0..32).map(|s| {
        let (store, wh, gone, to_triage) = (
            store.clone(),
            hooks[s % 2].clone(),
            gone.clone(),
            to_triage.clone(),
        );
        tokio::spawn(async move {
            let mut todos = Vec::new();
            for i in 0..10 {
                let draft = store
                    .draft_event(event(&wh, &format!("d-{}-{i}", s % 16)))
                    .unwrap();
                let (stored, todo) = store
                    .store_event(draft, Some(to_triage.clone()))
                    .await
                    .expect("store");
                assert!(stored.routed);
                todos.push(todo.expect("a todo"));
                if i % 5 == 0 {
                    let draft = store.draft_event(event(&gone, "lost")).unwrap();
                    not_found(
                        store.store_event(draft, Some(to_triage.clone())).await,
                        "webhook",
                    );
                }
            }
            todos
        })
    });
    let mut todos = Vec::new();
    for sender in futures::future::join_all(senders).await {
        todos.extend(sender.expect("a sender"));
    }
    let count = |sql: &'static str| {
        let pool = db.pool().clone();
        async move {
            let row = sqlx::query(sql).fetch_one(&pool).await.unwrap();
            sqlx::Row::try_get::<i64, _>(&row, "n").unwrap()
        }
    };
    assert_eq!(
        count("SELECT COUNT(*) AS n FROM events WHERE routed = 1").await,
        320
    );
    assert_eq!(count("SELECT COUNT(*) AS n FROM events").await, 320);
    assert_eq!(count("SELECT COUNT(*) AS n FROM todos").await, 160);
    assert_eq!(todos.iter().filter(|t| t.inserted).count(), 160);
    let ids: HashSet<_> = todos.iter().map(|t| t.todo.id.clone()).collect();
    assert_eq!(ids.len(), 160);
    let after = store.group_commit_tally();
    assert_eq!(
        after.writes - before.writes,
        320 + 64,
        "one write per delivery"
    );
    let commits = after.commits - before.commits;
    assert!(
        commits * 2 <= 320,
        "concurrent writes shared commits: {commits} commits"
    );
    // Concurrent batches over two webhooks kept each webhook's count exact (issue 50).
    crate::harness::assert_event_counts_agree(store).await;
}

/// What a stored write answered, without the ids and times chosen for it: comparable between
/// two stores.
fn answered_shape(
    answer: &switchboard_store::Result<(
        switchboard_store::Event,
        Option<switchboard_store::TodoInsert>,
    )>,
) -> String {
    match answer {
        Ok((event, todo)) => format!(
            "stored {} {} routed={} at_arrival={} decision={:?} fault={:?} verified={} todo={:?}",
            event.delivery_id,
            event.kind,
            event.routed,
            event.routed_at == Some(event.received_at),
            event.decision,
            event.fault,
            event.verified,
            todo.as_ref().map(|t| (
                t.inserted,
                t.todo.queue.clone(),
                t.todo.rule_id.clone(),
                t.todo.event_id == event.id || !t.inserted,
                t.todo.delivery_id.clone(),
                t.todo.created_at == event.received_at || !t.inserted,
                t.todo.claimed_by.clone(),
                t.todo.completed_at,
            ))
        ),
        Err(e) => format!("refused {e:?}"),
    }
}

/// The same writes through a store writing PostgreSQL batches with one statement (the
/// default) and one writing them with `BEGIN`, inserts and `COMMIT`, each sent at once so
/// they share batches: decided with a todo, decided with none, undecided, a fault, for a
/// deleted webhook, under a webhook revision that moved on, then redeliveries. Both answer
/// the same, and what each answered is what is stored.
pub async fn a_batch_in_one_statement_answers_as_its_transaction_does(db: TestDb) {
    use switchboard_store::{DecidedBy, is_stale_webhook};
    let off = store_without_one_statement(&db).await;
    let alice = human(&db, "alice").await;
    let decided = |queue: Option<&str>| RecordDecision {
        decision: queue.map_or(
            RecordedDecision::new(Label::Drop),
            RecordedDecision::to_queue,
        ),
        fault: None,
        todo: queue.map(|q| NewTodo {
            queue: q.into(),
            rule_id: Some("r-1".into()),
        }),
        decided_by: Some(DecidedBy {
            version: 2,
            digest: "ab".repeat(32),
        }),
    };
    let faulted = RecordDecision {
        decision: RecordedDecision::new(Label::Fault),
        fault: Some(budget_fault("r-2")),
        todo: None,
        decided_by: None,
    };
    let mut shapes = Vec::new();
    for store in [&db.store, &off] {
        let wh = webhook(&db, &alice).await;
        let old = store.webhook_for_ingest_cached(&wh.id, true).await.unwrap();
        store
            .set_reject_unverified(&alice, &wh.id, true)
            .await
            .unwrap();
        let gone = webhook(&db, &alice).await;
        db.delete_webhook(&alice, &gone.id).await.unwrap();
        let draft = |hook: &str, delivery: &str, revision: Option<i64>| {
            let mut draft = store.draft_event(event(hook, delivery)).unwrap();
            draft.webhook_revision = revision;
            draft
        };
        let first = vec![
            (draft(&wh.id, "d-todo", None), Some(decided(Some("review")))),
            (draft(&wh.id, "d-drop", None), Some(decided(None))),
            (draft(&wh.id, "d-undecided", None), None),
            (draft(&wh.id, "d-fault", None), Some(faulted.clone())),
            (
                draft(&gone.id, "d-gone", None),
                Some(decided(Some("review"))),
            ),
            (
                draft(&wh.id, "d-stale", Some(old.revision)),
                Some(decided(Some("review"))),
            ),
            (
                draft(&wh.id, "d-other", None),
                Some(decided(Some("triage"))),
            ),
        ];
        let first = futures::future::join_all(
            first
                .into_iter()
                .map(|(draft, decided)| store.store_event(draft, decided)),
        )
        .await;
        assert!(
            first[5].as_ref().is_err_and(is_stale_webhook),
            "{:?}",
            first[5]
        );
        let again = futures::future::join_all(
            ["d-todo", "d-todo", "d-other"]
                .map(|d| store.store_event(draft(&wh.id, d, None), Some(decided(Some("review"))))),
        )
        .await;
        // What each answered is what is stored; a redelivery answers its first one's todo.
        for answer in first.iter().chain(&again) {
            let Ok((event, todo)) = answer else { continue };
            assert_eq!(&store.get_event(&alice, &event.id).await.unwrap(), event);
            if let Some(todo) = todo {
                assert_eq!(
                    store.get_todo(&alice, &todo.todo.id).await.unwrap(),
                    todo.todo
                );
            }
        }
        let first_todo = |delivery: &str| {
            first
                .iter()
                .flatten()
                .find(|(e, _)| e.delivery_id == delivery)
                .and_then(|(_, t)| t.as_ref())
                .map(|t| t.todo.id.clone())
        };
        for (answer, delivery) in again.iter().zip(["d-todo", "d-todo", "d-other"]) {
            let todo = answer.as_ref().ok().and_then(|(_, t)| t.as_ref());
            assert_eq!(todo.map(|t| t.todo.id.clone()), first_todo(delivery));
        }
        shapes.push(
            first
                .iter()
                .chain(&again)
                .map(answered_shape)
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(shapes[0], shapes[1]);
    off.close().await;
}

/// PostgreSQL: a committer keeps its connection from one batch to the next. When the server
/// ends every connection of the store (a restart, a proxy, `pg_terminate_backend`), the next
/// batches fail on the dead ones and are written again on fresh connections: every delivery
/// is answered, stored once, with its todo.
pub async fn a_committer_whose_connection_died_loses_no_delivery(db: TestDb) {
    use switchboard_store::Backend;
    if db.backend() != Backend::Postgres {
        return;
    }
    let name = format!(
        "sb_{}",
        switchboard_store::secrets::random_hex(6).expect("random")
    );
    let store = switchboard_store::Store::connect_with(
        &format!("{}&application_name={name}", db.url),
        switchboard_store::StoreOptions {
            sealing_key: Some(db.store.sealing_key().clone()),
            ..Default::default()
        },
    )
    .await
    .expect("open the store again");
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let send = |delivery: String| {
        let store = store.clone();
        let wh = wh.id.clone();
        async move {
            let draft = store.draft_event(event(&wh, &delivery)).unwrap();
            store.store_event(draft, Some(queued("triage"))).await
        }
    };
    // One after another, so each committer takes a batch and keeps its connection.
    for i in 0..8 {
        send(format!("before-{i}")).await.expect("stored");
    }
    let row = sqlx::query(AssertSqlSafe(format!(
        "SELECT COUNT(pg_terminate_backend(pid)) AS n FROM pg_stat_activity \
         WHERE application_name = '{name}'"
    )))
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert!(sqlx::Row::try_get::<i64, _>(&row, "n").unwrap() >= 1);
    for i in 0..8 {
        let (stored, todo) = send(format!("after-{i}"))
            .await
            .expect("stored after the kill");
        assert!(stored.routed && todo.is_some_and(|t| t.inserted));
    }
    let after = futures::future::join_all((8..16).map(|i| send(format!("after-{i}")))).await;
    assert!(after.iter().all(|a| a.is_ok()), "{after:?}");
    let count = |sql: &'static str| {
        let pool = db.pool().clone();
        async move {
            let row = sqlx::query(sql).fetch_one(&pool).await.unwrap();
            sqlx::Row::try_get::<i64, _>(&row, "n").unwrap()
        }
    };
    assert_eq!(count("SELECT COUNT(*) AS n FROM events").await, 24);
    assert_eq!(count("SELECT COUNT(*) AS n FROM todos").await, 24);
    store.close().await;
}

/// 32 senders through `store` (on `db`'s database); the commits and writes they took.
async fn thirty_two_senders(db: &TestDb, store: &switchboard_store::Store) -> (u64, u64) {
    let alice = human(db, "alice").await;
    let hooks = [webhook(db, &alice).await.id, webhook(db, &alice).await.id];
    let gone = webhook(db, &alice).await.id;
    db.delete_webhook(&alice, &gone).await.unwrap();
    let before = store.group_commit_tally();
    let senders = (0..32).map(|s| {
        let (store, wh, gone) = (store.clone(), hooks[s % 2].clone(), gone.clone());
        tokio::spawn(async move {
            let mut todos = Vec::new();
            for i in 0..10 {
                // Senders s and s + 16 send the same deliveries to the same webhook.
                let stored = store
                    .insert_event(event(&wh, &format!("d-{}-{i}", s % 16)))
                    .await
                    .expect("insert");
                let to_triage = queued("triage");
                let todo = store.record_decision(&stored.id, to_triage).await;
                todos.push(todo.expect("record").expect("a todo"));
                if i % 5 == 0 {
                    not_found(store.insert_event(event(&gone, "lost")).await, "webhook");
                }
            }
            todos
        })
    });
    let answered = futures::future::join_all(senders).await;
    let mut todos = Vec::new();
    for sender in answered {
        todos.extend(sender.expect("a sender"));
    }
    let pool = db.pool().clone();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            let row = sqlx::query(sql).fetch_one(&pool).await.unwrap();
            sqlx::Row::try_get::<i64, _>(&row, "n").unwrap()
        }
    };
    assert_eq!(count("SELECT COUNT(*) AS n FROM events").await, 320);
    assert_eq!(
        count("SELECT COUNT(*) AS n FROM events WHERE routed = 1").await,
        320
    );
    assert_eq!(count("SELECT COUNT(*) AS n FROM todos").await, 160);
    // Each delivery's todo was made by exactly one of its two deliveries.
    assert_eq!(todos.iter().filter(|t| t.inserted).count(), 160);
    let ids: HashSet<_> = todos.iter().map(|t| t.todo.id.clone()).collect();
    assert_eq!(ids.len(), 160);
    let after = store.group_commit_tally();
    let writes = after.writes - before.writes;
    assert_eq!(writes, 320 + 320 + 64, "every write answered once");
    (after.commits - before.commits, writes)
}

/// Migration 0010 from a database written at 0009 with events in it: decisions recorded before
/// it say "unknown" (NULL), decisions recorded after it name their configuration, nothing else
/// moves, and every endpoint that could read an event may now explain one.
pub async fn upgrading_from_0009_leaves_old_decisions_unknown_and_grants_explain(db: TestDb) {
    use switchboard_store::Store;
    use switchboard_store::{DecidedBy, NewEndpoint};
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 9).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let delivery = |id: &str| NewEvent {
        webhook_id: wh.id.clone(),
        delivery_id: id.into(),
        kind: "issues.opened".into(),
        headers: vec![("X-GitHub-Event".into(), "issues".into())],
        body: b"{\"action\":\"opened\"}".to_vec().into(),
        verified: true,
    };
    let decided = old
        .insert_event(delivery("d-decided"))
        .await
        .expect("event");
    let waiting = old
        .insert_event(delivery("d-waiting"))
        .await
        .expect("event");
    // A decision as 0009 recorded it: no configuration columns existed.
    sqlx::query("UPDATE events SET decision = $1, routed = 1, routed_at = $2 WHERE id = $3")
        .bind(r#"{"decision":"drop","rule_id":"r-1"}"#)
        .bind(1_i64)
        .bind(decided.id.as_str())
        .execute(old.pool())
        .await
        .expect("a decision in the 0009 shape");
    let mut endpoints = Vec::new();
    for verbs in [
        vec!["get_webhook_event", "list_todos"],
        vec!["list_todos"],
        vec!["get_webhook_event", "explain_webhook_event"],
    ] {
        let vended = old
            .vend_endpoint(NewEndpoint {
                name: format!("agent-{}", endpoints.len()),
                human_login: "alice".into(),
                owner_scope: alice.clone(),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
            })
            .await
            .expect("vend");
        endpoints.push(vended.endpoint.id);
    }
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    let (event, decided_by) = new
        .get_event_decided_by(&alice, &decided.id)
        .await
        .expect("kept");
    assert_eq!(decided_by, None, "decided before 0010: unknown");
    assert_eq!(
        event.decision,
        Some(RecordedDecision::new(Label::Drop).by_rule("r-1"))
    );
    assert_eq!(event.body, decided.body);
    assert_eq!(
        new.get_event(&alice, &waiting.id).await.expect("kept"),
        waiting,
        "an event not yet routed reads as it did"
    );

    // Routed after the upgrade: the configuration is recorded, and read back.
    let stamp = DecidedBy {
        version: wh.config_version,
        digest: wh.config_digest.clone(),
    };
    new.record_decision(
        &waiting.id,
        RecordDecision {
            decision: RecordedDecision {
                queue: Some("forge".into()),
                ..RecordedDecision::new(Label::Default)
            },
            fault: None,
            todo: None,
            decided_by: Some(stamp.clone()),
        },
    )
    .await
    .expect("record");
    let (_, decided_by) = new
        .get_event_decided_by(&alice, &waiting.id)
        .await
        .expect("read");
    assert_eq!(decided_by, Some(stamp));
    assert!(
        new.history_version(&alice, &wh.id, wh.config_version)
            .await
            .expect("history")
            .is_some_and(|h| h.digest_after == wh.config_digest),
        "the version a decision names is in the history"
    );

    let mut verbs = Vec::new();
    for id in &endpoints {
        verbs.push(new.get_endpoint(id).await.expect("kept").verbs);
    }
    assert_eq!(
        verbs,
        vec![
            vec!["get_webhook_event", "list_todos", "explain_webhook_event"],
            vec!["list_todos"],
            vec!["get_webhook_event", "explain_webhook_event"],
        ],
        "explain_webhook_event granted once, to every endpoint that could read an event"
    );
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}

/// Migration 0013 from a database written at 0012 with a real delivery in it: the body stored
/// before reads back byte for byte, a body stored after does too, and on PostgreSQL the new
/// one is compressed with lz4 (the old keeps pglz) when the server has lz4.
pub async fn upgrading_from_0012_keeps_bodies_and_compresses_new_ones_with_lz4(db: TestDb) {
    use switchboard_store::Backend;
    use switchboard_store::Store;
    let body = std::fs::read(payload()).expect("the vendored github payload");
    assert!(body.len() > 4096, "big enough to be compressed");
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 12).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let delivery = |id: &str| NewEvent {
        body: body.clone().into(),
        ..event(&wh.id, id)
    };
    let before = old.insert_event(delivery("d-before")).await.expect("event");
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    let after = new.insert_event(delivery("d-after")).await.expect("event");
    for stored in [&before, &after] {
        let read = new.get_event(&alice, &stored.id).await.expect("kept");
        assert_eq!(
            read.body.as_ref(),
            body.as_slice(),
            "{} byte for byte",
            stored.id
        );
        assert_eq!(&read, stored);
    }
    if new.backend() == Backend::Postgres {
        let setting: String = sqlx::Row::get(
            &sqlx::query(
                "SELECT attcompression::text AS c FROM pg_attribute \
                 WHERE attrelid = 'events'::regclass AND attname = 'body'",
            )
            .fetch_one(new.pool())
            .await
            .expect("the column's compression"),
            "c",
        );
        let method = |id: String| {
            let pool = new.pool().clone();
            async move {
                let row = sqlx::query(
                    "SELECT pg_column_compression(body) AS m FROM events WHERE id = $1",
                )
                .bind(id)
                .fetch_one(&pool)
                .await
                .expect("the body's compression");
                sqlx::Row::get::<Option<String>, _>(&row, "m")
            }
        };
        assert_eq!(method(before.id.clone()).await.as_deref(), Some("pglz"));
        if setting == "l" {
            assert_eq!(method(after.id.clone()).await.as_deref(), Some("lz4"));
        } else {
            eprintln!("this PostgreSQL has no lz4: events.body keeps pglz");
        }
    }
    new.close().await;
}

/// Migration 0012 from a database written at 0010 with events in it: every event and decision
/// is kept, a quarantined one is a redrive candidate as ingest decided it, and every endpoint
/// that could set rules may now redrive and confirm a redrive; no other endpoint gains them.
pub async fn upgrading_from_0010_keeps_events_redrivable_and_grants_redrive(db: TestDb) {
    use switchboard_store::Store;
    use switchboard_store::{NewEndpoint, Redrivable, RedriveFilter};
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 10).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let delivery = |id: &str| NewEvent {
        webhook_id: wh.id.clone(),
        delivery_id: id.into(),
        kind: "issues.opened".into(),
        headers: vec![("X-GitHub-Event".into(), "issues".into())],
        body: b"{\"action\":\"opened\"}".to_vec().into(),
        verified: true,
    };
    let quarantined = old.insert_event(delivery("d-q")).await.expect("event");
    let waiting = old.insert_event(delivery("d-w")).await.expect("event");
    sqlx::query(
        "UPDATE events SET decision = $1, routed = 1, routed_at = $2, config_version = $3, \
         config_digest = $4 WHERE id = $5",
    )
    .bind(r#"{"decision":"quarantine","rule_id":"r-1"}"#)
    .bind(1_i64)
    .bind(wh.config_version)
    .bind(wh.config_digest.as_str())
    .bind(quarantined.id.as_str())
    .execute(old.pool())
    .await
    .expect("a decision in the 0010 shape");
    let mut endpoints = Vec::new();
    for verbs in [
        vec!["set_webhook_rules", "list_todos"],
        vec!["list_webhook_rules", "get_webhook_event"],
        vec!["set_webhook_rules", "redrive_webhook_events"],
    ] {
        let vended = old
            .vend_endpoint(NewEndpoint {
                name: format!("agent-{}", endpoints.len()),
                human_login: "alice".into(),
                owner_scope: alice.clone(),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
            })
            .await
            .expect("vend");
        endpoints.push(vended.endpoint.id);
    }
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    let (kept, decided_by) = new
        .get_event_decided_by(&alice, &quarantined.id)
        .await
        .expect("kept");
    assert_eq!(
        kept.decision,
        Some(RecordedDecision::new(Label::Quarantine).by_rule("r-1"))
    );
    assert_eq!(decided_by.map(|d| d.version), Some(wh.config_version));
    assert_eq!(
        new.get_event(&alice, &waiting.id).await.expect("kept"),
        waiting
    );
    let (candidates, more) = new
        .redrive_candidates(
            &alice,
            &wh.id,
            &RedriveFilter::default().checked().expect("filter"),
            100,
        )
        .await
        .expect("candidates");
    assert!(!more);
    // Both were received in the same millisecond: compared by state, not arrival.
    let mut seen: Vec<_> = candidates
        .iter()
        .map(|c| (c.event.id.as_str(), c.state, c.seen_redrive.as_deref()))
        .collect();
    seen.sort_by_key(|(_, state, _)| *state);
    assert_eq!(
        seen,
        vec![
            (quarantined.id.as_str(), Redrivable::Quarantine, None),
            (waiting.id.as_str(), Redrivable::Pending, None),
        ]
    );

    let mut verbs = Vec::new();
    for id in &endpoints {
        verbs.push(new.get_endpoint(id).await.expect("kept").verbs);
    }
    assert_eq!(
        verbs,
        vec![
            vec![
                "set_webhook_rules",
                "list_todos",
                "redrive_webhook_events",
                "confirm_webhook_redrive"
            ],
            vec!["get_webhook_event", "list_webhook_rules"],
            vec![
                "set_webhook_rules",
                "redrive_webhook_events",
                "confirm_webhook_redrive"
            ],
        ],
        "both verbs granted once, to every endpoint that could set rules"
    );
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}

/// A budget fault blamed on `rule_id`, as a test records it (no reason, no disposition).
fn budget_fault(rule_id: &str) -> RecordedFault {
    RecordedFault {
        code: "budget_exceeded".into(),
        disposition: None,
        reason: String::new(),
        rule_id: Some(rule_id.into()),
    }
}

/// The decisions-over-time chart's counts: per hour and label, deliveries not routed yet apart,
/// only the window asked for, only the owner's webhook.
pub async fn decisions_are_counted_per_hour_and_label_in_the_database(db: TestDb) {
    const HOUR: i64 = 3_600_000;
    let start = 1_800_000_000_000 - 1_800_000_000_000 % HOUR;
    let clock = Clock::manual(start);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let bob = human(&store, "bob").await;
    let wh = webhook(&store, &alice).await;
    let decided = |label: Label<'static>| RecordDecision {
        decision: RecordedDecision::new(label),
        fault: None,
        todo: None,
        decided_by: None,
    };
    // Hour 0: two drops and one left unrouted; hour 2 (a day later, plus two hours): a todo
    // label twice and a quarantine.
    let plan: [(i64, Option<Label<'static>>); 6] = [
        (0, Some(Label::Drop)),
        (0, Some(Label::Drop)),
        (0, None),
        (26, Some(Label::queue("forge").into_owned())),
        (26, Some(Label::queue("forge").into_owned())),
        (26, Some(Label::Quarantine)),
    ];
    for (i, (hour, label)) in plan.into_iter().enumerate() {
        let at = start + hour * HOUR + i as i64;
        clock.advance(Duration::from_millis((at - clock.now_ms()) as u64));
        let e = store
            .insert_event(event(&wh.id, &format!("d-{i}")))
            .await
            .unwrap();
        if let Some(label) = label {
            store.record_decision(&e.id, decided(label)).await.unwrap();
        }
    }
    let first = start / HOUR;
    let counted = store
        .decisions_per_hour(&alice, &wh.id, start)
        .await
        .unwrap();
    assert_eq!(
        counted,
        vec![
            (first, None, 1),
            (first, Some("drop".into()), 2),
            (first + 26, Some("quarantine".into()), 1),
            (first + 26, Some("queue:forge".into()), 2),
        ]
    );
    let later = store
        .decisions_per_hour(&alice, &wh.id, start + HOUR)
        .await
        .unwrap();
    assert_eq!(later.len(), 2, "{later:?}");
    not_found(
        store.decisions_per_hour(&bob, &wh.id, start).await,
        "webhook",
    );

    // The events page's filtered listing over the same deliveries.
    let listed = |filter: EventFilter, limit: u32| {
        let store = store.clone();
        let (alice, wh) = (alice.clone(), wh.id.clone());
        async move {
            let page = Page {
                cursor: None,
                limit: Some(limit),
            };
            let got = store
                .list_events_where(&alice, &wh, &filter, &page)
                .await
                .unwrap();
            let ids: Vec<String> = got
                .items
                .iter()
                .map(|(e, _)| e.delivery_id.clone())
                .collect();
            (ids, got.next_cursor)
        }
    };
    let class = |c: DecisionClass| EventFilter {
        decision: Some(c),
        ..EventFilter::default()
    };
    assert_eq!(
        listed(class(DecisionClass::Todo), 50).await.0,
        ["d-4", "d-3"]
    );
    assert_eq!(
        listed(class(DecisionClass::Drop), 50).await.0,
        ["d-1", "d-0"]
    );
    assert_eq!(listed(class(DecisionClass::Pending), 50).await.0, ["d-2"]);
    assert_eq!(
        listed(class(DecisionClass::Quarantine), 50).await.0,
        ["d-5"]
    );
    assert!(listed(class(DecisionClass::Fault), 50).await.0.is_empty());
    let window = EventFilter {
        since_ms: Some(start + HOUR),
        until_ms: Some(start + 26 * HOUR + 5),
        ..EventFilter::default()
    };
    assert_eq!(
        listed(window, 50).await.0,
        ["d-4", "d-3"],
        "until is exclusive"
    );
    let kind = EventFilter {
        kind: Some("push".into()),
        ..EventFilter::default()
    };
    assert!(listed(kind, 50).await.0.is_empty());
    let (first_page, next) = listed(EventFilter::default(), 4).await;
    assert_eq!(first_page, ["d-5", "d-4", "d-3", "d-2"]);
    assert!(next.is_some());
    not_found(
        store
            .list_events_where(&bob, &wh.id, &EventFilter::default(), &Page::default())
            .await,
        "webhook",
    );
}
