use std::time::Duration;

use serde_json::json;
use sqlx::Row;
use switchboard_control::store::{NewEvent, NewTodo, Page, RecordDecision, Todo, TodoFilter};
use switchboard_control::{Clock, Error};

use crate::harness::{TestDb, human, not_found, webhook};

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
        decision: json!(format!("queue:{queue}")),
        fault: None,
        todo: Some(NewTodo {
            queue: queue.into(),
            rule_id: Some("r-1".into()),
        }),
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
        .claim_todo(&alice, &forge[0].id, "ep_a")
        .await
        .unwrap();
    store
        .claim_todo(&alice, &forge[1].id, "ep_a")
        .await
        .unwrap();
    store
        .complete_todo(&alice, &forge[1].id, "ep_a")
        .await
        .unwrap();
    let count = |p: switchboard_control::store::Paged<Todo>| p.items.len();
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
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let e = db.insert_event(delivery(&wh.id, "d-1")).await.unwrap();
    let todo = db
        .record_decision(&e.id, to_queue("forge"))
        .await
        .unwrap()
        .expect("todo")
        .todo;
    assert_eq!((todo.claimed_by.as_ref(), todo.completed_at), (None, None));

    let claimed = db.claim_todo(&alice, &todo.id, "ep_a").await.unwrap();
    assert_eq!(claimed.claimed_by.as_deref(), Some("ep_a"));
    assert!(claimed.claimed_at.is_some());
    assert_eq!(
        db.claim_todo(&alice, &todo.id, "ep_a").await.unwrap(),
        claimed,
        "claiming again is a no-op"
    );
    assert!(matches!(
        db.claim_todo(&alice, &todo.id, "ep_b").await,
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
    assert!(matches!(
        db.claim_todo(&alice, &todo.id, "ep_b").await,
        Err(Error::Conflict { .. })
    ));
    assert_eq!(db.get_todo(&alice, &todo.id).await.unwrap(), done);
    not_found(db.claim_todo(&alice, "td_unknown", "ep_a").await, "todo");
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
            tokio::spawn(async move { store.claim_todo(&scope, &id, &format!("ep_{i}")).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => winners += 1,
            Err(Error::Conflict { .. }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners, 1);
}
