use std::time::Duration;

use switchboard_store::Clock;

use crate::harness::{TestDb, human, not_found, webhook};

const TTL: Duration = Duration::from_secs(30);

pub async fn one_replay_lease_holder_at_a_time(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    let other = webhook(&db, &alice).await;
    assert!(
        db.try_acquire_replay_lease(&wh.id, "replica-a", TTL)
            .await
            .unwrap()
    );
    assert!(
        !db.try_acquire_replay_lease(&wh.id, "replica-b", TTL)
            .await
            .unwrap(),
        "busy"
    );
    assert!(
        db.try_acquire_replay_lease(&other.id, "replica-b", TTL)
            .await
            .unwrap(),
        "leases are per webhook"
    );
    assert!(
        db.try_acquire_replay_lease(&wh.id, "replica-a", TTL)
            .await
            .unwrap(),
        "the holder renews"
    );
    assert!(
        !db.release_replay_lease(&wh.id, "replica-b").await.unwrap(),
        "only the holder releases"
    );
    assert!(db.release_replay_lease(&wh.id, "replica-a").await.unwrap());
    assert!(!db.release_replay_lease(&wh.id, "replica-a").await.unwrap());
    assert!(
        db.try_acquire_replay_lease(&wh.id, "replica-b", TTL)
            .await
            .unwrap()
    );
    not_found(
        db.try_acquire_replay_lease("wh_unknown", "replica-a", TTL)
            .await,
        "webhook",
    );
}

pub async fn an_expired_lease_can_be_taken_over(db: TestDb) {
    let clock = Clock::manual(1_800_000_000_000);
    let store = db.store.clone().with_clock(clock.clone());
    let alice = human(&store, "alice").await;
    let wh = webhook(&store, &alice).await;
    assert!(
        store
            .try_acquire_replay_lease(&wh.id, "crashed", TTL)
            .await
            .unwrap()
    );
    clock.advance(TTL - Duration::from_millis(1));
    assert!(
        !store
            .try_acquire_replay_lease(&wh.id, "replica-b", TTL)
            .await
            .unwrap()
    );
    clock.advance(Duration::from_millis(1));
    assert!(
        store
            .try_acquire_replay_lease(&wh.id, "replica-b", TTL)
            .await
            .unwrap()
    );
    assert!(
        !store.release_replay_lease(&wh.id, "crashed").await.unwrap(),
        "the old holder lost it"
    );
}

pub async fn two_concurrent_acquisitions_one_wins(db: TestDb) {
    let alice = human(&db, "alice").await;
    let wh = webhook(&db, &alice).await;
    for round in 0..5 {
        let tasks: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|holder| {
                let (store, id) = (db.store.clone(), wh.id.clone());
                let holder = format!("{holder}-{round}");
                tokio::spawn(async move {
                    store
                        .try_acquire_replay_lease(&id, &holder, TTL)
                        .await
                        .map(|won| (won, holder))
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            let (won, holder) = t.await.unwrap().unwrap();
            if won {
                winners.push(holder);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}");
        assert!(db.release_replay_lease(&wh.id, &winners[0]).await.unwrap());
    }
}
