use sqlx::Row;
use switchboard_store::OwnerScope;
use switchboard_store::Role;
use switchboard_store::secrets::sha256_hex;
use switchboard_store::{CREDENTIAL_PREFIX, NewEndpoint};

use crate::harness::{TestDb, human, invalid, not_found};

fn new_endpoint(login: &str, scope: &OwnerScope, verbs: &[&str]) -> NewEndpoint {
    NewEndpoint {
        name: "reviewer".into(),
        human_login: login.into(),
        owner_scope: scope.clone(),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
    }
}

pub async fn vending_expands_families_and_authenticates(db: TestDb) {
    let alice = human(&db, "alice").await;
    let vended = db
        .vend_endpoint(new_endpoint("alice", &alice, &["todos", "get_webhook"]))
        .await
        .unwrap();
    let ep = &vended.endpoint;
    assert_eq!(
        ep.verbs,
        vec![
            "get_webhook",
            "list_todos",
            "claim_todo",
            "release_todo",
            "complete_todo"
        ]
    );
    assert!(ep.allows("claim_todo") && !ep.allows("install_rule_pack"));
    assert_eq!(
        (ep.human_login.as_str(), &ep.owner_scope),
        ("alice", &alice)
    );
    // At least 256 random bits: 64 hex characters after the prefix.
    assert!(vended.credential.starts_with(CREDENTIAL_PREFIX));
    assert_eq!(vended.credential.len(), CREDENTIAL_PREFIX.len() + 64);
    assert!(
        !format!("{vended:?}").contains(&vended.credential),
        "Debug must not print the credential"
    );

    assert_eq!(
        db.authenticate(&vended.credential).await.unwrap().as_ref(),
        Some(ep)
    );
    assert_eq!(db.authenticate("sbe_0000").await.unwrap(), None);
    assert_eq!(db.authenticate("").await.unwrap(), None);
    let mut near = vended.credential.clone();
    near.pop();
    assert_eq!(db.authenticate(&near).await.unwrap(), None);
    assert_eq!(db.get_endpoint(&ep.id).await.unwrap(), *ep);
    assert_eq!(
        db.list_endpoints(Some(&alice)).await.unwrap(),
        vec![ep.clone()]
    );
    assert!(
        db.list_endpoints(Some(&OwnerScope::human("bob")))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn credential_is_hashed_at_rest(db: TestDb) {
    let alice = human(&db, "alice").await;
    let vended = db
        .vend_endpoint(new_endpoint("alice", &alice, &["webhooks"]))
        .await
        .unwrap();
    let rows = sqlx::query(
        "SELECT id, name, human_login, owner_scope, verbs, credential_hash FROM endpoints",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(rows.len(), 1);
    let stored: String = rows[0].try_get("credential_hash").unwrap();
    assert_ne!(stored, vended.credential);
    assert_eq!(stored, sha256_hex(&vended.credential));
    for column in [
        "id",
        "name",
        "human_login",
        "owner_scope",
        "verbs",
        "credential_hash",
    ] {
        let value: String = rows[0].try_get(column).unwrap();
        assert!(
            !value.contains(&vended.credential[CREDENTIAL_PREFIX.len()..]),
            "{column} holds the credential"
        );
    }
}

pub async fn revoked_endpoint_fails_to_authenticate(db: TestDb) {
    let alice = human(&db, "alice").await;
    let vended = db
        .vend_endpoint(new_endpoint("alice", &alice, &["todos"]))
        .await
        .unwrap();
    assert!(db.authenticate(&vended.credential).await.unwrap().is_some());
    let revoked = db.revoke_endpoint(&vended.endpoint.id).await.unwrap();
    let at = revoked.revoked_at.expect("revoked_at set");
    assert_eq!(db.authenticate(&vended.credential).await.unwrap(), None);
    // Revoking again keeps the first time.
    assert_eq!(
        db.revoke_endpoint(&vended.endpoint.id)
            .await
            .unwrap()
            .revoked_at,
        Some(at)
    );
    not_found(db.revoke_endpoint("ep_unknown").await, "endpoint");
    not_found(db.get_endpoint("ep_unknown").await, "endpoint");
}

pub async fn vending_refuses_what_it_cannot_grant(db: TestDb) {
    let alice = human(&db, "alice").await;
    let bob = human(&db, "bob").await;
    invalid(
        db.vend_endpoint(new_endpoint("alice", &alice, &["drop_tables"]))
            .await,
        "verbs",
    );
    invalid(
        db.vend_endpoint(new_endpoint("alice", &alice, &[])).await,
        "verbs",
    );
    // A human can only act in a scope where it holds a role.
    invalid(
        db.vend_endpoint(new_endpoint("alice", &bob, &["todos"]))
            .await,
        "owner_scope",
    );
    db.create_team("ops", "Ops").await.unwrap();
    let ops = OwnerScope::team("ops");
    invalid(
        db.vend_endpoint(new_endpoint("alice", &ops, &["todos"]))
            .await,
        "owner_scope",
    );
    db.set_membership("ops", "alice", Role::Viewer)
        .await
        .unwrap();
    assert!(
        db.vend_endpoint(new_endpoint("alice", &ops, &["todos"]))
            .await
            .is_ok()
    );
    invalid(
        db.vend_endpoint(new_endpoint(
            "nobody",
            &OwnerScope::human("nobody"),
            &["todos"],
        ))
        .await,
        "owner_scope",
    );
    let mut unnamed = new_endpoint("alice", &alice, &["todos"]);
    unnamed.name = " ".into();
    invalid(db.vend_endpoint(unnamed).await, "name");
}
