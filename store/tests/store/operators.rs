use sqlx::Row;
use switchboard_store::secrets::sha256_hex;
use switchboard_store::{NewEndpoint, OPERATOR_CREDENTIAL_PREFIX, Page};

use crate::harness::{
    ALL_MIGRATIONS, TestDb, applied_migrations, human, invalid, not_found, webhook,
};

/// An operator credential is made once, stored as a hash, authenticates until revoked, and
/// is never an endpoint credential (nor the other way round).
pub async fn operator_credentials_are_hashed_and_their_own_kind(db: TestDb) {
    let first = db
        .create_operator_credential("root", None)
        .await
        .expect("bootstrap");
    assert!(first.token.starts_with(OPERATOR_CREDENTIAL_PREFIX));
    assert_eq!(first.token.len(), OPERATOR_CREDENTIAL_PREFIX.len() + 64);
    assert!(!format!("{first:?}").contains(&first.token));
    let stored: String =
        sqlx::query("SELECT credential_hash FROM operator_credentials WHERE id = $1")
            .bind(first.credential.id.as_str())
            .fetch_one(db.pool())
            .await
            .unwrap()
            .try_get("credential_hash")
            .unwrap();
    assert_eq!(stored, sha256_hex(&first.token), "only the hash is stored");
    assert_eq!(
        db.authenticate_operator(&first.token).await.unwrap(),
        Some(first.credential.clone())
    );
    let mut near = first.token.clone();
    near.pop();
    assert_eq!(db.authenticate_operator(&near).await.unwrap(), None);
    assert_eq!(db.authenticate_operator("").await.unwrap(), None);

    let alice = human(&db, "alice").await;
    let endpoint = db
        .vend_endpoint(NewEndpoint {
            name: "agent".into(),
            human_login: "alice".into(),
            owner_scope: alice,
            verbs: vec!["todos".into()],
        })
        .await
        .unwrap();
    assert_eq!(
        db.authenticate_operator(&endpoint.credential)
            .await
            .unwrap(),
        None,
        "an endpoint credential is no operator's"
    );
    assert_eq!(
        db.authenticate(&first.token).await.unwrap(),
        None,
        "an operator credential opens no endpoint"
    );

    let second = db
        .create_operator_credential("ci", Some(&first.credential.id))
        .await
        .unwrap();
    assert_eq!(
        second.credential.created_by.as_deref(),
        Some(first.credential.id.as_str())
    );
    let revoked = db
        .revoke_operator_credential(&second.credential.id, &first.credential.id)
        .await
        .unwrap();
    assert!(revoked.revoked_at.is_some());
    assert_eq!(db.authenticate_operator(&second.token).await.unwrap(), None);
    assert_eq!(db.list_operator_credentials().await.unwrap().len(), 2);
    not_found(
        db.revoke_operator_credential("op_nope", &first.credential.id)
            .await,
        "operator credential",
    );
    invalid(db.create_operator_credential("", None).await, "name");

    // The audit: bootstrap, create, revoke, newest first, in pages.
    let audit = db.list_audit_entries(&Page::first(10)).await.unwrap();
    let actions: Vec<&str> = audit.items.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "revoke_operator_credential",
            "create_operator_credential",
            "bootstrap_operator_credential"
        ]
    );
    assert_eq!(
        audit.items[2].operator_id, None,
        "a bootstrap has no operator"
    );
    assert_eq!(
        audit.items[0].operator_id.as_deref(),
        Some(first.credential.id.as_str())
    );
    assert_eq!(
        audit.items[0].target,
        format!("operator:{}", second.credential.id)
    );
    let page = db.list_audit_entries(&Page::first(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let rest = db
        .list_audit_entries(&Page::after(page.next_cursor.expect("more"), 2))
        .await
        .unwrap();
    assert_eq!(rest.items, audit.items[2..].to_vec());
    assert_eq!(rest.next_cursor, None);
    invalid(
        db.list_audit_entries(&Page::after("bogus", 2)).await,
        "cursor",
    );
    db.by_operator(&first.credential.id)
        .create_team("infra", "Infra")
        .await
        .unwrap();
    let newest = db.list_audit_entries(&Page::first(1)).await.unwrap();
    assert_eq!(newest.items[0].action, "create_team");
    assert_eq!(newest.items[0].detail["name"], "Infra");
}

/// Migration 0011 from a database written at 0010 with data in it: everything kept, no
/// operator credential exists until one is bootstrapped, and the audit starts empty.
pub async fn upgrading_from_0010_adds_operators_and_keeps_everything(db: TestDb) {
    use switchboard_store::Store;
    let url = crate::harness::second_database(&db).await;
    let old = crate::harness::open_at(&db, &url, 10).await;
    let alice = human(&old, "alice").await;
    let wh = webhook(&old, &alice).await;
    let vended = old
        .vend_endpoint(NewEndpoint {
            name: "agent".into(),
            human_login: "alice".into(),
            owner_scope: alice.clone(),
            verbs: vec!["webhooks".into()],
        })
        .await
        .expect("vend");
    old.close().await;

    let new = Store::connect(&url, db.store.sealing_key())
        .await
        .expect("upgrade to the current schema");
    assert_eq!(applied_migrations(&new).await, ALL_MIGRATIONS);
    assert_eq!(new.get_webhook(&alice, &wh.id).await.expect("kept"), wh);
    assert_eq!(
        new.authenticate(&vended.credential).await.expect("read"),
        Some(vended.endpoint.clone()),
        "the endpoint still authenticates"
    );
    assert_eq!(
        new.authenticate_operator(&vended.credential)
            .await
            .expect("read"),
        None
    );
    assert!(
        new.list_operator_credentials()
            .await
            .expect("read")
            .is_empty()
    );
    assert!(
        new.list_audit_entries(&Page::first(10))
            .await
            .expect("read")
            .items
            .is_empty()
    );
    let minted = new
        .create_operator_credential("root", None)
        .await
        .expect("bootstrap after the upgrade");
    assert!(
        new.authenticate_operator(&minted.token)
            .await
            .expect("read")
            .is_some()
    );
    new.close().await;
    crate::harness::drop_second_database(&db, &url).await;
}
