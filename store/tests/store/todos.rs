use std::time::Duration;

use sqlx::Row;
use switchboard_store::{Clock, Error, Store};
use switchboard_store::{NewEvent, NewTodo, Page, RecordDecision, Todo, TodoFilter};

use crate::harness::{
    ALL_MIGRATIONS, CLAIM_TTL, TestDb, applied_migrations, human, invalid, not_found, webhook,
};

fn delivery(webhook_id: &str, delivery_id: &str) -> NewEvent {
    NewEvent {
        webhook_id: webhook_id.into(),
        delivery_id: delivery_id.into(),
        kind: "issues.opened".into(),
        headers: vec![],
        body: b"{}".to_vec().into(),
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

pub async fn redelivery_creates_no_second_todo(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let first = db.insert_event(delivery(&wh.id, "d-1")).await.unwrap();
    let made = db
        .record_decision(&first.id, to_queue("forge"))
        .await
        .unwrap()
        .expect("todo");
    assert!(made.inserted);
    assert_eq!(made.todo.event_id, first.id);
    assert_eq!(
        (made.todo.queue.as_str(), made.todo.rule_id.as_deref()),
        ("forge", Some("r-1"))
    );
    assert_eq!(made.todo.owner_scope, alice);

    // The forge redelivers: a second event is stored (events are facts), but no second todo.
    let again = db.insert_event(delivery(&wh.id, "d-1")).await.unwrap();
    assert_ne!(again.id, first.id);
    let found = db
        .record_decision(&again.id, to_queue("forge"))
        .await
        .unwrap()
        .expect("todo");
    assert!(!found.inserted);
    assert_eq!(found.todo, made.todo);
    let direct = db
        .insert_todo(
            &again.id,
            NewTodo {
                queue: "triage".into(),
                rule_id: None,
            },
        )
        .await
        .unwrap();
    assert!(!direct.inserted);
    assert_eq!(direct.todo.id, made.todo.id);

    // The same delivery id on another webhook is another delivery.
    let other = webhook(&db, &alice).await;
    let elsewhere = db.insert_event(delivery(&other.id, "d-1")).await.unwrap();
    assert!(
        db.record_decision(&elsewhere.id, to_queue("forge"))
            .await
            .unwrap()
            .expect("todo")
            .inserted
    );
    let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM todos")
        .fetch_one(db.pool())
        .await
        .unwrap()
        .try_get("n")
        .unwrap();
    assert_eq!(n, 2);
}

pub async fn todos_list_by_queue_in_pages(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let mut forge = Vec::new();
    for i in 0..5 {
        clock.advance(Duration::from_millis(1));
        let e = store
            .insert_event(delivery(&wh.id, &format!("f-{i}")))
            .await
            .unwrap();
        forge.push(
            store
                .record_decision(&e.id, to_queue("forge"))
                .await
                .unwrap()
                .expect("todo")
                .todo,
        );
        let t = store
            .insert_event(delivery(&wh.id, &format!("t-{i}")))
            .await
            .unwrap();
        store
            .record_decision(&t.id, to_queue("triage"))
            .await
            .unwrap();
    }
    let list = |filter, page: Page| {
        let store = store.clone();
        let alice = alice.clone();
        async move {
            store
                .list_todos(&alice, "forge", filter, &page)
                .await
                .unwrap()
        }
    };
    let first = list(TodoFilter::Open, Page::first(2)).await;
    let second = list(
        TodoFilter::Open,
        Page::after(first.next_cursor.clone().expect("more"), 2),
    )
    .await;
    let third = list(
        TodoFilter::Open,
        Page::after(second.next_cursor.clone().expect("more"), 2),
    )
    .await;
    assert_eq!(third.next_cursor, None);
    let ids: Vec<String> = [first.items, second.items, third.items]
        .concat()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(
        ids,
        forge.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        "oldest first, each once"
    );

    store
        .claim_todo(&alice, &forge[0].id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    store
        .claim_todo(&alice, &forge[1].id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    store
        .complete_todo(&alice, &forge[1].id, "ep_a")
        .await
        .unwrap();
    let count = |p: switchboard_store::Paged<Todo>| p.items.len();
    assert_eq!(count(list(TodoFilter::Open, Page::default()).await), 4);
    assert_eq!(count(list(TodoFilter::Unclaimed, Page::default()).await), 3);
    assert_eq!(count(list(TodoFilter::All, Page::default()).await), 5);
    assert_eq!(
        store
            .list_todos(&alice, "triage", TodoFilter::Open, &Page::default())
            .await
            .unwrap()
            .items
            .len(),
        5
    );
    assert!(
        store
            .list_todos(&alice, "nowhere", TodoFilter::All, &Page::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

pub async fn claim_and_complete(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let db_store = db.store.clone().with_clock(clock.clone());
    let db = &db_store;
    let alice = human(db, "alice").await;
    let wh = webhook(db, &alice).await;
    let e = db.insert_event(delivery(&wh.id, "d-1")).await.unwrap();
    let todo = db
        .record_decision(&e.id, to_queue("forge"))
        .await
        .unwrap()
        .expect("todo");
    let todo = todo.todo;
    assert_eq!(
        (
            todo.claimed_by.as_ref(),
            todo.claim_expires_at,
            todo.completed_at
        ),
        (None, None, None)
    );

    let claimed = db
        .claim_todo(&alice, &todo.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(claimed.claimed_by.as_deref(), Some("ep_a"));
    assert_eq!(claimed.claimed_at, Some(clock.now_ms()));
    assert_eq!(
        claimed.claim_expires_at,
        Some(clock.now_ms() + 30 * 60 * 1000),
        "a claim lasts the lease"
    );
    assert!(matches!(
        db.claim_todo(&alice, &todo.id, "ep_b", CLAIM_TTL).await,
        Err(Error::Conflict { .. })
    ));
    assert!(matches!(
        db.complete_todo(&alice, &todo.id, "ep_b").await,
        Err(Error::Conflict { .. })
    ));
    let done = db.complete_todo(&alice, &todo.id, "ep_a").await.unwrap();
    assert_eq!(done.completed_by.as_deref(), Some("ep_a"));
    assert!(done.completed_at.is_some());
    assert_eq!(
        db.complete_todo(&alice, &todo.id, "ep_a").await.unwrap(),
        done,
        "completing again is a no-op"
    );
    for endpoint in ["ep_a", "ep_b"] {
        assert!(matches!(
            db.claim_todo(&alice, &todo.id, endpoint, CLAIM_TTL).await,
            Err(Error::Conflict { .. })
        ));
        assert!(matches!(
            db.release_todo(&alice, &todo.id, endpoint).await,
            Err(Error::Conflict { .. })
        ));
    }
    // Past the lease, a completed todo stays completed: nobody claims it back.
    clock.advance(Duration::from_secs(3600));
    assert!(matches!(
        db.claim_todo(&alice, &todo.id, "ep_b", CLAIM_TTL).await,
        Err(Error::Conflict { .. })
    ));
    assert_eq!(db.get_todo(&alice, &todo.id).await.unwrap(), done);
    not_found(
        db.claim_todo(&alice, "td_unknown", "ep_a", CLAIM_TTL).await,
        "todo",
    );
    not_found(db.release_todo(&alice, "td_unknown", "ep_a").await, "todo");
    not_found(db.complete_todo(&alice, "td_unknown", "ep_a").await, "todo");

    // An unclaimed todo may be completed directly.
    let e2 = db.insert_event(delivery(&wh.id, "d-2")).await.unwrap();
    let t2 = db
        .record_decision(&e2.id, to_queue("forge"))
        .await
        .unwrap()
        .expect("todo")
        .todo;
    assert!(
        db.complete_todo(&alice, &t2.id, "ep_b")
            .await
            .unwrap()
            .completed_at
            .is_some()
    );
}

pub async fn concurrent_claims_have_one_winner(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let e = db.insert_event(delivery(&wh.id, "d-1")).await.unwrap();
    let todo = db
        .record_decision(&e.id, to_queue("forge"))
        .await
        .unwrap()
        .expect("todo")
        .todo;
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let (store, scope, id) = (db.store.clone(), alice.clone(), todo.id.clone());
            tokio::spawn(async move {
                store
                    .claim_todo(&scope, &id, &format!("ep_{i}"), CLAIM_TTL)
                    .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(won) => winners.push(won.claimed_by),
            Err(Error::Conflict { .. }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1);
    assert_eq!(
        db.get_todo(&alice, &todo.id).await.unwrap().claimed_by,
        winners[0],
        "the one that won holds it"
    );
}

/// One todo in `forge` for a fresh delivery `delivery_id` on `wh`.
async fn one_todo(store: &Store, wh: &str, delivery_id: &str) -> Todo {
    let e = store.insert_event(delivery(wh, delivery_id)).await.unwrap();
    store
        .record_decision(&e.id, to_queue("forge"))
        .await
        .unwrap()
        .expect("todo")
        .todo
}

fn unclaimed_ids(page: switchboard_store::Paged<Todo>) -> Vec<String> {
    page.items.into_iter().map(|t| t.id).collect()
}

/// A claim lasts its lease: until then nobody else takes the todo and `unclaimed` leaves it
/// out; from its expiry on, the todo is back in its queue and anyone may claim it.
pub async fn a_claim_lapses_and_the_todo_is_back_in_its_queue(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let todo = one_todo(&store, &wh.id, "d-1").await;
    let (s, a) = (&store, &alice);
    let unclaimed = move || async move {
        unclaimed_ids(
            s.list_todos(a, "forge", TodoFilter::Unclaimed, &Page::default())
                .await
                .unwrap(),
        )
    };
    let start = clock.now_ms();
    let claimed = store
        .claim_todo(&alice, &todo.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(claimed.claim_expires_at, Some(start + 1_800_000));
    assert!(claimed.claim_live(start + 1_799_999));
    assert!(!claimed.claim_live(start + 1_800_000));
    assert!(unclaimed().await.is_empty());

    // A millisecond before the lease ends, the claim holds.
    clock.advance(Duration::from_millis(1_799_999));
    assert!(unclaimed().await.is_empty());
    assert!(matches!(
        store.claim_todo(&alice, &todo.id, "ep_b", CLAIM_TTL).await,
        Err(Error::Conflict { .. })
    ));

    // At its end, the todo is back in its queue: listed as unclaimed (still naming the lapsed
    // holder) and open to another endpoint's claim, which starts a lease of its own.
    clock.advance(Duration::from_millis(1));
    let listed = store
        .list_todos(&alice, "forge", TodoFilter::Unclaimed, &Page::default())
        .await
        .unwrap()
        .items;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].claimed_by.as_deref()),
        (todo.id.as_str(), Some("ep_a"))
    );
    let taken = store
        .claim_todo(&alice, &todo.id, "ep_b", CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(taken.claimed_by.as_deref(), Some("ep_b"));
    assert_eq!(taken.claimed_at, Some(clock.now_ms()));
    assert_eq!(taken.claim_expires_at, Some(clock.now_ms() + 1_800_000));
    assert!(unclaimed().await.is_empty());
    assert!(matches!(
        store.claim_todo(&alice, &todo.id, "ep_a", CLAIM_TTL).await,
        Err(Error::Conflict { .. })
    ));

    // A webhook's own lease wins over the default; `None` returns to it. Claims already
    // made keep their expiry.
    let set = store
        .set_claim_ttl(&alice, &wh.id, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(set.claim_ttl, Some(Duration::from_secs(60)));
    assert_eq!(
        store.get_todo(&alice, &todo.id).await.unwrap(),
        taken,
        "an existing claim keeps its expiry"
    );
    let short = one_todo(&store, &wh.id, "d-2").await;
    let claimed = store
        .claim_todo(&alice, &short.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(claimed.claim_expires_at, Some(clock.now_ms() + 60_000));
    clock.advance(Duration::from_secs(60));
    assert_eq!(unclaimed().await, vec![short.id.clone()]);
    store.set_claim_ttl(&alice, &wh.id, None).await.unwrap();
    assert_eq!(
        store.get_webhook(&alice, &wh.id).await.unwrap().claim_ttl,
        None
    );
    let renewed = store
        .claim_todo(&alice, &short.id, "ep_b", CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(renewed.claim_expires_at, Some(clock.now_ms() + 1_800_000));
}

/// Claiming again before the lease ends renews it from now, keeping when the holder first
/// took the todo; claiming again after it lapsed, with nobody else in between, takes it anew.
pub async fn claiming_again_renews_the_lease(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let todo = one_todo(&store, &wh.id, "d-1").await;
    let first = store
        .claim_todo(&alice, &todo.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(20 * 60));
    let renewed = store
        .claim_todo(&alice, &todo.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(renewed.claimed_at, first.claimed_at);
    assert_eq!(renewed.claim_expires_at, Some(clock.now_ms() + 1_800_000));
    // Past the first lease's end, the renewed claim still holds.
    clock.advance(Duration::from_secs(20 * 60));
    assert!(matches!(
        store.claim_todo(&alice, &todo.id, "ep_b", CLAIM_TTL).await,
        Err(Error::Conflict { .. })
    ));
    // Lapsed and taken by nobody: the holder claims it again.
    clock.advance(Duration::from_secs(20 * 60));
    let again = store
        .claim_todo(&alice, &todo.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(again.claim_expires_at, Some(clock.now_ms() + 1_800_000));
    assert_eq!(again.claimed_by.as_deref(), Some("ep_a"));
}

/// Releasing: the holder's release puts the todo back unclaimed; another endpoint's is a
/// conflict while the claim holds; a todo nobody holds is answered as it is.
pub async fn release_returns_the_todo_to_its_queue(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let bob = human(&store, "bob").await;
    let wh = webhook(&store, &alice).await;
    let todo = one_todo(&store, &wh.id, "d-1").await;

    // Unclaimed: releasing changes nothing.
    assert_eq!(
        store.release_todo(&alice, &todo.id, "ep_a").await.unwrap(),
        todo
    );
    store
        .claim_todo(&alice, &todo.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    let conflict = store.release_todo(&alice, &todo.id, "ep_b").await;
    match conflict {
        Err(Error::Conflict { message }) => {
            assert!(message.contains("claimed by another endpoint"), "{message}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    not_found(store.release_todo(&bob, &todo.id, "ep_a").await, "todo");
    let released = store.release_todo(&alice, &todo.id, "ep_a").await.unwrap();
    assert_eq!(
        (
            released.claimed_by,
            released.claimed_at,
            released.claim_expires_at
        ),
        (None, None, None)
    );
    assert_eq!(
        store.release_todo(&alice, &todo.id, "ep_a").await.unwrap(),
        store.get_todo(&alice, &todo.id).await.unwrap(),
        "releasing again changes nothing"
    );
    let listed = store
        .list_todos(&alice, "forge", TodoFilter::Unclaimed, &Page::default())
        .await
        .unwrap();
    assert_eq!(unclaimed_ids(listed), vec![todo.id.clone()]);
    // Released, anyone may take it at once.
    store
        .claim_todo(&alice, &todo.id, "ep_b", CLAIM_TTL)
        .await
        .unwrap();

    // A lapsed claim: another endpoint's release leaves it as it is (it is already back in
    // its queue); its holder, whom nobody displaced, still releases it.
    clock.advance(Duration::from_secs(31 * 60));
    let lapsed = store.release_todo(&alice, &todo.id, "ep_a").await.unwrap();
    assert_eq!(lapsed.claimed_by.as_deref(), Some("ep_b"));
    let released = store.release_todo(&alice, &todo.id, "ep_b").await.unwrap();
    assert_eq!(released.claimed_by, None);
}

/// Completing after the claim lapsed: the holder still may while nobody else claimed the
/// todo; once another endpoint has, the holder is refused and told why.
pub async fn completing_after_the_claim_lapsed(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;

    // Lapsed, nobody took it over: still the holder's to complete.
    let kept = one_todo(&store, &wh.id, "d-1").await;
    store
        .claim_todo(&alice, &kept.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(45 * 60));
    let done = store.complete_todo(&alice, &kept.id, "ep_a").await.unwrap();
    assert_eq!(done.completed_by.as_deref(), Some("ep_a"));

    // Lapsed and claimed by another: refused, saying the claim expired; the new holder
    // completes it.
    let taken = one_todo(&store, &wh.id, "d-2").await;
    store
        .claim_todo(&alice, &taken.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(45 * 60));
    store
        .claim_todo(&alice, &taken.id, "ep_b", CLAIM_TTL)
        .await
        .unwrap();
    match store.complete_todo(&alice, &taken.id, "ep_a").await {
        Err(Error::Conflict { message }) => {
            assert!(
                message.contains("claimed by another endpoint") && message.contains("expired"),
                "{message}"
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        store
            .get_todo(&alice, &taken.id)
            .await
            .unwrap()
            .completed_at,
        None
    );
    let done = store
        .complete_todo(&alice, &taken.id, "ep_b")
        .await
        .unwrap();
    assert_eq!(done.completed_by.as_deref(), Some("ep_b"));

    // A lapsed claim is back in the queue for everyone: another endpoint may complete it
    // outright, as it may an unclaimed todo.
    let open = one_todo(&store, &wh.id, "d-3").await;
    store
        .claim_todo(&alice, &open.id, "ep_a", CLAIM_TTL)
        .await
        .unwrap();
    assert!(matches!(
        store.complete_todo(&alice, &open.id, "ep_c").await,
        Err(Error::Conflict { .. })
    ));
    clock.advance(Duration::from_secs(30 * 60));
    let done = store.complete_todo(&alice, &open.id, "ep_c").await.unwrap();
    assert_eq!(done.completed_by.as_deref(), Some("ep_c"));
    assert!(matches!(
        store.complete_todo(&alice, &open.id, "ep_a").await,
        Err(Error::Conflict { .. })
    ));
}

/// The race the lease opens: a holder completing just as its lapsed claim is taken. With real
/// concurrency, either the completion lands first (every claim then fails) or one claim does
/// (the completion is then refused and exactly one claimer holds the todo) — never both.
pub async fn a_lapsed_holder_completing_races_new_claims(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let mut outcomes = (0, 0);
    for round in 0..6 {
        let todo = one_todo(&store, &wh.id, &format!("d-{round}")).await;
        store
            .claim_todo(&alice, &todo.id, "ep_holder", CLAIM_TTL)
            .await
            .unwrap();
        clock.advance(Duration::from_secs(31 * 60));
        let complete = {
            let (store, scope, id) = (store.clone(), alice.clone(), todo.id.clone());
            tokio::spawn(async move { store.complete_todo(&scope, &id, "ep_holder").await })
        };
        let claims: Vec<_> = (0..4)
            .map(|i| {
                let (store, scope, id) = (store.clone(), alice.clone(), todo.id.clone());
                tokio::spawn(async move {
                    store
                        .claim_todo(&scope, &id, &format!("ep_{i}"), CLAIM_TTL)
                        .await
                })
            })
            .collect();
        let completed = match complete.await.unwrap() {
            Ok(t) => t.completed_by.as_deref() == Some("ep_holder"),
            Err(Error::Conflict { .. }) => false,
            Err(other) => panic!("unexpected {other:?}"),
        };
        let mut claimed = Vec::new();
        for c in claims {
            match c.await.unwrap() {
                Ok(t) => claimed.push(t.claimed_by),
                Err(Error::Conflict { .. }) => {}
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
        let now = store.get_todo(&alice, &todo.id).await.unwrap();
        if completed {
            assert!(claimed.is_empty(), "completed, yet claimed by {claimed:?}");
            assert_eq!(now.completed_by.as_deref(), Some("ep_holder"));
            outcomes.0 += 1;
        } else {
            assert_eq!(claimed.len(), 1, "exactly one claim wins: {claimed:?}");
            assert_eq!(
                (now.completed_at, now.claimed_by),
                (None, claimed[0].clone())
            );
            outcomes.1 += 1;
        }
    }
    assert_eq!(outcomes.0 + outcomes.1, 6);
}

/// A webhook's lease is whole seconds from 1 to 30 days, set by scope like everything else.
pub async fn a_webhooks_claim_ttl_is_bounded_and_scoped(db: TestDb) {
    let alice = human(&db, "alice").await;
    let bob = human(&db, "bob").await;
    let wh = webhook(&db, &alice).await;
    for bad in [
        Duration::ZERO,
        Duration::from_millis(1500),
        Duration::from_secs(30 * 24 * 3600 + 1),
    ] {
        invalid(
            db.set_claim_ttl(&alice, &wh.id, Some(bad)).await,
            "claim_ttl",
        );
    }
    invalid(
        db.claim_todo(&alice, "td_x", "ep_a", Duration::ZERO).await,
        "claim_ttl",
    );
    not_found(
        db.set_claim_ttl(&bob, &wh.id, Some(Duration::from_secs(60)))
            .await,
        "webhook",
    );
    assert_eq!(
        db.get_webhook(&alice, &wh.id).await.unwrap().claim_ttl,
        None
    );
    let max = Duration::from_secs(30 * 24 * 3600);
    db.set_claim_ttl(&alice, &wh.id, Some(max)).await.unwrap();
    assert_eq!(
        db.list_webhooks(&alice).await.unwrap()[0].claim_ttl,
        Some(max)
    );
}

/// Migration 0009 from a database written at 0008 with claimed todos in it: each old claim
/// gets the default lease from when it was made (an old one is back in its queue at once),
/// and every endpoint that could claim may now release.
pub async fn upgrading_from_0008_gives_old_claims_a_lease(db: TestDb) {
    use switchboard_store::NewEndpoint;
    const T: i64 = 1_800_000_000_000;
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 8).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    // Todos as 0008 wrote them: no claim_expires_at.
    for (i, (id, claimed, completed)) in [
        ("td_recent", Some(T - 60_000), None),
        ("td_stranded", Some(T - 3_600_000), None),
        ("td_open", None, None),
        ("td_done", Some(T - 7_200_000), Some(T - 7_000_000)),
    ]
    .into_iter()
    .enumerate()
    {
        let event = old
            .insert_event(delivery(&wh.id, &format!("d-{i}")))
            .await
            .expect("event");
        sqlx::query(
            "INSERT INTO todos (id, owner_scope, webhook_id, event_id, delivery_id, verified, queue, \
             rule_id, created_at, claimed_by, claimed_at, completed_by, completed_at) \
             VALUES ($1, $2, $3, $4, $5, 1, 'forge', NULL, $6, $7, $8, $9, $10)",
        )
        .bind(id)
        .bind(alice.to_string())
        .bind(wh.id.as_str())
        .bind(event.id.as_str())
        .bind(format!("d-{i}"))
        .bind(T - 10_000_000 + i as i64)
        .bind(claimed.map(|_| "ep_old"))
        .bind(claimed)
        .bind(completed.map(|_| "ep_old"))
        .bind(completed)
        .execute(old.pool())
        .await
        .expect("a todo in the 0008 shape");
    }
    let mut endpoints = Vec::new();
    for verbs in [
        vec!["list_todos", "claim_todo", "complete_todo"],
        vec!["list_todos"],
        vec!["claim_todo", "release_todo"],
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
        .expect("upgrade to the current schema")
        .with_clock(Clock::manual(T));
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    let get = |id: &'static str| {
        let (new, alice) = (new.clone(), alice.clone());
        async move { new.get_todo(&alice, id).await.expect("kept") }
    };
    assert_eq!(
        get("td_recent").await.claim_expires_at,
        Some(T - 60_000 + 1_800_000)
    );
    assert_eq!(
        get("td_stranded").await.claim_expires_at,
        Some(T - 3_600_000 + 1_800_000)
    );
    assert_eq!(get("td_open").await.claim_expires_at, None);
    let listed = new
        .list_todos(&alice, "forge", TodoFilter::Unclaimed, &Page::default())
        .await
        .unwrap();
    assert_eq!(
        unclaimed_ids(listed),
        vec!["td_stranded".to_string(), "td_open".to_string()],
        "the stranded claim is back in its queue; the recent one holds"
    );
    assert!(matches!(
        new.claim_todo(&alice, "td_recent", "ep_new", CLAIM_TTL)
            .await,
        Err(Error::Conflict { .. })
    ));
    let taken = new
        .claim_todo(&alice, "td_stranded", "ep_new", CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(taken.claimed_by.as_deref(), Some("ep_new"));
    // The old holder of the recent claim still completes it.
    let done = new
        .complete_todo(&alice, "td_recent", "ep_old")
        .await
        .unwrap();
    assert_eq!(done.completed_by.as_deref(), Some("ep_old"));
    assert_eq!(get("td_done").await.completed_by.as_deref(), Some("ep_old"));

    let mut verbs = Vec::new();
    for id in &endpoints {
        verbs.push(new.get_endpoint(id).await.expect("kept").verbs);
    }
    assert_eq!(
        verbs,
        vec![
            vec!["list_todos", "claim_todo", "complete_todo", "release_todo"],
            vec!["list_todos"],
            vec!["claim_todo", "release_todo"],
        ],
        "release_todo granted once, to every endpoint that could claim"
    );
    assert_eq!(
        new.get_webhook(&alice, &wh.id).await.unwrap().claim_ttl,
        None
    );
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}
