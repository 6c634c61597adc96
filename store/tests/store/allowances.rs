//! Grant allowances (issue 18 item 9): the queues an operator allows a scope's agents to grant
//! when they create webhooks over the API. The operator's own `create_webhook` is not gated.

use sqlx::Row;
use switchboard_store::NewWebhook;
use switchboard_store::{Error, Store};

use crate::harness::{TestDb, human, invalid, new_webhook, webhook};

fn queues(list: &[&str]) -> Vec<String> {
    list.iter().map(|q| q.to_string()).collect()
}

pub async fn an_allowance_is_set_replaced_listed_and_cleared(db: TestDb) {
    let alice = human(&db, "alice").await;
    db.create_team("ops", "Operations").await.expect("team");
    let ops = switchboard_store::OwnerScope::team("ops");
    assert_eq!(db.grant_allowance(&alice).await.expect("read"), None);

    let set = db
        .set_grant_allowance(&alice, &queues(&["triage", "forge"]))
        .await
        .expect("set");
    assert_eq!(set.queues, queues(&["forge", "triage"]), "kept sorted");
    assert_eq!(db.grant_allowance(&alice).await.expect("read"), Some(set));
    let replaced = db
        .set_grant_allowance(&alice, &queues(&["review"]))
        .await
        .expect("replace");
    assert_eq!(replaced.queues, queues(&["review"]), "replaced, not merged");
    db.set_grant_allowance(&ops, &queues(&["pager"]))
        .await
        .expect("a team's");
    let listed: Vec<(String, Vec<String>)> = db
        .list_grant_allowances()
        .await
        .expect("list")
        .into_iter()
        .map(|a| (a.owner_scope.to_string(), a.queues))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("human:alice".to_string(), queues(&["review"])),
            ("team:ops".to_string(), queues(&["pager"])),
        ]
    );

    assert!(db.clear_grant_allowance(&alice).await.expect("clear"));
    assert!(!db.clear_grant_allowance(&alice).await.expect("again"));
    assert_eq!(db.grant_allowance(&alice).await.expect("read"), None);

    invalid(db.set_grant_allowance(&alice, &[]).await, "queues");
    invalid(
        db.set_grant_allowance(&alice, &queues(&["Not A Queue"]))
            .await,
        "queues",
    );
    invalid(
        db.set_grant_allowance(&alice, &queues(&["forge", "forge"]))
            .await,
        "queues",
    );
    invalid(
        db.set_grant_allowance(
            &switchboard_store::OwnerScope::human("nobody"),
            &queues(&["forge"]),
        )
        .await,
        "owner_scope",
    );
}

pub async fn an_agents_grant_must_lie_within_the_allowance_and_a_refusal_writes_nothing(
    db: TestDb,
) {
    let alice = human(&db, "alice").await;
    let within = |grant: &[&str]| NewWebhook {
        grant: queues(grant),
        ..new_webhook(&alice)
    };

    // No allowance: closed.
    match db.create_webhook_within_allowance(within(&["forge"])).await {
        Err(Error::GrantNotAllowed {
            owner_scope,
            outside,
            allowed,
        }) => {
            assert_eq!(owner_scope, "human:alice");
            assert_eq!(outside, queues(&["forge"]));
            assert!(allowed.is_empty());
        }
        other => panic!("expected grant_not_allowed, got {other:?}"),
    }
    db.set_grant_allowance(&alice, &queues(&["forge", "triage"]))
        .await
        .expect("allow");
    match db
        .create_webhook_within_allowance(within(&["pager", "forge", "audit"]))
        .await
    {
        Err(Error::GrantNotAllowed {
            outside, allowed, ..
        }) => {
            assert_eq!(outside, queues(&["pager", "audit"]), "in grant order");
            assert_eq!(allowed, queues(&["forge", "triage"]));
        }
        other => panic!("expected grant_not_allowed, got {other:?}"),
    }
    assert!(
        db.list_webhooks(&alice).await.expect("list").is_empty(),
        "a refused create writes nothing"
    );
    let history: i64 = sqlx::query("SELECT COUNT(*) AS n FROM configuration_history")
        .fetch_one(db.pool())
        .await
        .expect("count")
        .try_get("n")
        .expect("n");
    assert_eq!(history, 0);

    let created = db
        .create_webhook_within_allowance(within(&["triage"]))
        .await
        .expect("within the allowance");
    assert_eq!(created.grant, queues(&["triage"]));
    // A bad grant is still a bad grant, before any allowance is read.
    invalid(
        db.create_webhook_within_allowance(within(&[])).await,
        "grant",
    );
    // The operator's path is not gated: operators set grants.
    let operators = db
        .create_webhook(within(&["pager"]))
        .await
        .expect("an operator grants what it likes");
    assert_eq!(operators.grant, queues(&["pager"]));
}

/// Migration 0006 from a database written at 0005 with webhooks in two scopes: each scope is
/// allowed the union of its webhooks' grants, so agents keep creating what they could; a scope
/// without webhooks gets no allowance; the webhooks themselves are untouched.
pub async fn upgrading_from_0005_allows_each_scope_the_queues_its_webhooks_already_grant(
    db: TestDb,
) {
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 5).await;
    let alice = human(&old, "alice").await;
    let bob = human(&old, "bob").await;
    let carol = human(&old, "carol").await;
    let first = webhook(&old, &alice).await; // forge, triage
    let second = old
        .create_webhook(NewWebhook {
            grant: queues(&["review", "forge"]),
            ..new_webhook(&alice)
        })
        .await
        .expect("second");
    old.create_webhook(NewWebhook {
        grant: queues(&["pager"]),
        ..new_webhook(&bob)
    })
    .await
    .expect("bob's");
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    let allowed = |a: Option<switchboard_store::GrantAllowance>| a.map(|a| a.queues);
    assert_eq!(
        allowed(new.grant_allowance(&alice).await.expect("read")),
        Some(queues(&["forge", "review", "triage"]))
    );
    assert_eq!(
        allowed(new.grant_allowance(&bob).await.expect("read")),
        Some(queues(&["pager"]))
    );
    assert_eq!(new.grant_allowance(&carol).await.expect("read"), None);
    for w in [&first, &second] {
        let kept = new.get_webhook(&alice, &w.id).await.expect("kept");
        assert_eq!(
            (kept.grant, kept.secret),
            (w.grant.clone(), w.secret.clone())
        );
    }
    new.create_webhook_within_allowance(NewWebhook {
        grant: queues(&["review", "triage"]),
        ..new_webhook(&alice)
    })
    .await
    .expect("what alice's agents could grant before, they still can");
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}
