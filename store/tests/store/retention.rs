//! Retention (issue 16): what is past the age or the count bound is purged, in batches,
//! oldest first; an event not yet routed and an event an open todo needs are never purged.

use std::time::Duration;

use switchboard_store::Clock;
use switchboard_store::{NewEvent, NewTodo, RecordDecision};
use switchboard_store::{OwnerScope, Store};

use crate::harness::{TestDb, human, webhook};

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

fn to_queue() -> RecordDecision {
    RecordDecision {
        decision: switchboard_model::RecordedDecision::new("queue:forge".parse().expect("a label")),
        fault: None,
        todo: Some(NewTodo {
            queue: "forge".into(),
            rule_id: None,
        }),
        decided_by: None,
    }
}

fn dropped() -> RecordDecision {
    RecordDecision {
        decision: switchboard_model::RecordedDecision::new(switchboard_model::Label::Drop),
        fault: None,
        todo: None,
        decided_by: None,
    }
}

/// What a stored event's todo is when retention looks at it.
#[derive(Clone, Copy)]
enum Fate {
    Unrouted,
    NoTodo,
    Open,
    Claimed,
    Completed,
}

/// Stores a delivery a second after the last, decided and worked as `fate` says.
async fn stored(
    store: &Store,
    clock: &Clock,
    scope: &OwnerScope,
    webhook_id: &str,
    delivery_id: &str,
    fate: Fate,
) -> String {
    clock.advance(Duration::from_secs(1));
    let event = store
        .insert_event(delivery(webhook_id, delivery_id))
        .await
        .expect("stored");
    let todo = match fate {
        Fate::Unrouted => None,
        Fate::NoTodo => {
            store
                .record_decision(&event.id, dropped())
                .await
                .expect("decided");
            None
        }
        Fate::Open | Fate::Claimed | Fate::Completed => store
            .record_decision(&event.id, to_queue())
            .await
            .expect("decided")
            .map(|t| t.todo.id),
    };
    if let Some(todo) = todo {
        if matches!(fate, Fate::Claimed | Fate::Completed) {
            store
                .claim_todo(scope, &todo, "ep_worker", crate::harness::CLAIM_TTL)
                .await
                .expect("claimed");
        }
        if matches!(fate, Fate::Completed) {
            store
                .complete_todo(scope, &todo, "ep_worker")
                .await
                .expect("completed");
        }
    }
    event.id
}

async fn kept(store: &Store, scope: &OwnerScope, ids: &[String]) -> Vec<bool> {
    let mut out = Vec::new();
    for id in ids {
        out.push(store.get_event(scope, id).await.is_ok());
    }
    out
}

async fn todo_rows(store: &Store) -> i64 {
    use sqlx::Row;
    sqlx::query("SELECT COUNT(*) AS n FROM todos")
        .fetch_one(store.pool())
        .await
        .expect("count")
        .try_get("n")
        .expect("n")
}

pub async fn purges_exactly_what_is_past_the_bound_and_nothing_a_todo_still_needs(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    let fates = [
        Fate::NoTodo,
        Fate::Open,
        Fate::Claimed,
        Fate::Completed,
        Fate::Unrouted,
        Fate::NoTodo,
        Fate::Completed,
    ];
    let mut ids = Vec::new();
    for (i, fate) in fates.iter().enumerate() {
        ids.push(stored(&store, &clock, &alice, &wh.id, &format!("d-{i}"), *fate).await);
    }
    let at = |i: usize| store.get_event(&alice, &ids[i]);
    let cutoff = at(5).await.expect("stored").received_at;
    assert_eq!(todo_rows(&store).await, 4);

    // Before the sixth: the first five are past the age. One at a time, oldest first.
    let mut purged = 0;
    loop {
        let n = store
            .purge_events_received_before(cutoff, 1)
            .await
            .expect("a batch");
        assert!(n <= 1, "a batch is at most its size");
        if n == 0 {
            break;
        }
        purged += n;
    }
    assert_eq!(purged, 2, "no todo, and a completed todo");
    assert_eq!(
        kept(&store, &alice, &ids).await,
        [false, true, true, false, true, true, true],
        "kept: open and claimed todos, the unrouted event, everything newer"
    );
    assert_eq!(
        todo_rows(&store).await,
        3,
        "the completed todo went with its event"
    );

    // Once its todo is done, an event past the age goes on the next pass.
    let todo = store
        .list_todos(
            &alice,
            "forge",
            switchboard_store::TodoFilter::All,
            &switchboard_store::Page::first(10),
        )
        .await
        .expect("todos")
        .items
        .into_iter()
        .find(|t| t.event_id == ids[1])
        .expect("the open todo");
    store
        .claim_todo(&alice, &todo.id, "ep_worker", crate::harness::CLAIM_TTL)
        .await
        .expect("claimed");
    store
        .complete_todo(&alice, &todo.id, "ep_worker")
        .await
        .expect("done");
    assert_eq!(
        store
            .purge_events_received_before(cutoff, 10)
            .await
            .expect("a pass"),
        1
    );
    assert_eq!(
        kept(&store, &alice, &ids).await,
        [false, false, true, false, true, true, true]
    );
}

pub async fn a_webhook_keeps_its_newest_events_up_to_the_count(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let busy = webhook(&store, &alice).await;
    let quiet = webhook(&store, &alice).await;
    let fates = [
        Fate::Open,
        Fate::NoTodo,
        Fate::Completed,
        Fate::NoTodo,
        Fate::NoTodo,
    ];
    let mut ids = Vec::new();
    for (i, fate) in fates.iter().enumerate() {
        ids.push(stored(&store, &clock, &alice, &busy.id, &format!("b-{i}"), *fate).await);
    }
    let mut quiet_ids = Vec::new();
    for i in 0..2 {
        quiet_ids.push(
            stored(
                &store,
                &clock,
                &alice,
                &quiet.id,
                &format!("q-{i}"),
                Fate::NoTodo,
            )
            .await,
        );
    }
    assert_eq!(
        store.webhooks_over_event_count(2).await.expect("counted"),
        vec![busy.id.clone()]
    );
    let n = store
        .purge_events_past_count(&busy.id, 2, 1)
        .await
        .expect("a batch");
    assert_eq!(n, 1, "a batch is at most its size");
    let n = store
        .purge_events_past_count(&busy.id, 2, 10)
        .await
        .expect("a batch");
    assert_eq!(n, 1);
    assert_eq!(
        kept(&store, &alice, &ids).await,
        [true, false, false, true, true],
        "the newest two, and the oldest one its open todo needs"
    );
    assert_eq!(kept(&store, &alice, &quiet_ids).await, [true, true]);
    assert_eq!(
        store
            .purge_events_past_count(&busy.id, 2, 10)
            .await
            .expect("a batch"),
        0
    );
    assert_eq!(
        store.oldest_event_at(&busy.id).await.expect("read"),
        Some(
            store
                .get_event(&alice, &ids[0])
                .await
                .expect("kept")
                .received_at
        )
    );
    assert_eq!(store.oldest_event_at("wh_none").await.expect("read"), None);
    crate::harness::assert_event_counts_agree(&store).await;
    // The count pass reads the kept counts: the busy webhook is still over, by the event its
    // open todo needs.
    assert_eq!(
        store.webhooks_over_event_count(2).await.expect("counted"),
        vec![busy.id.clone()]
    );
    // A deleted webhook's count goes with it.
    store
        .delete_webhook(&alice, &busy.id)
        .await
        .expect("deleted");
    crate::harness::assert_event_counts_agree(&store).await;
    assert_eq!(
        store.webhooks_over_event_count(1).await.expect("counted"),
        vec![quiet.id.clone()]
    );
}

pub async fn upgrading_from_0003_keeps_every_event_and_retention_purges_only_past_the_bound(
    db: TestDb,
) {
    let url = crate::harness::second_database(&db).await;
    let clock = Clock::manual(1_800_000_000_000);
    let old = crate::harness::open_at(&db, &url, 3)
        .await
        .with_clock(clock.clone());
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let mut ids = Vec::new();
    for (i, fate) in [Fate::NoTodo, Fate::Open, Fate::Unrouted, Fate::NoTodo]
        .iter()
        .enumerate()
    {
        ids.push(stored(&old, &clock, &alice, &wh.id, &format!("u-{i}"), *fate).await);
    }
    let cutoff = old
        .get_event(&alice, &ids[3])
        .await
        .expect("stored")
        .received_at;
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema")
        .with_clock(clock.clone());
    assert_eq!(
        kept(&new, &alice, &ids).await,
        [true, true, true, true],
        "the upgrade itself purges nothing"
    );
    assert_eq!(
        new.purge_events_received_before(cutoff, 100)
            .await
            .expect("a pass"),
        1
    );
    assert_eq!(kept(&new, &alice, &ids).await, [false, true, true, true]);
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}

/// Issue 50: a database from 0023, with events, upgraded: its counts are filled from the
/// events it holds, the count pass reads them, and they follow what is stored after.
pub async fn upgrading_from_0023_fills_each_webhooks_event_count(db: TestDb) {
    let url = crate::harness::second_database(&db).await;
    let clock = Clock::manual(1_800_000_000_000);
    let old = crate::harness::open_at(&db, &url, 23)
        .await
        .with_clock(clock.clone());
    let alice = human(&old, "alice").await;
    let busy = webhook(&old, &alice).await;
    let quiet = webhook(&old, &alice).await;
    let idle = webhook(&old, &alice).await;
    for (i, fate) in [Fate::NoTodo, Fate::Open, Fate::Unrouted]
        .iter()
        .enumerate()
    {
        stored(&old, &clock, &alice, &busy.id, &format!("b-{i}"), *fate).await;
    }
    stored(&old, &clock, &alice, &quiet.id, "q-0", Fate::Completed).await;
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema")
        .with_clock(clock.clone());
    assert_eq!(
        crate::harness::applied_migrations(&new).await,
        crate::harness::ALL_MIGRATIONS
    );
    crate::harness::assert_event_counts_agree(&new).await;
    assert_eq!(
        new.webhooks_over_event_count(2).await.expect("counted"),
        vec![busy.id.clone()]
    );
    let mut over_one = vec![busy.id.clone(), quiet.id.clone()];
    over_one.sort();
    stored(&new, &clock, &alice, &quiet.id, "q-1", Fate::NoTodo).await;
    stored(&new, &clock, &alice, &idle.id, "i-0", Fate::NoTodo).await;
    crate::harness::assert_event_counts_agree(&new).await;
    assert_eq!(
        new.webhooks_over_event_count(1).await.expect("counted"),
        over_one
    );
    assert_eq!(
        new.purge_events_past_count(&busy.id, 1, 10)
            .await
            .expect("a pass"),
        1,
        "the oldest, decided without a todo; the open todo's event and the unrouted one stay"
    );
    crate::harness::assert_event_counts_agree(&new).await;
    new.close().await;
}
