use switchboard_store::{Error, OwnerScope, Role};

use crate::harness::{TestDb, human, invalid, not_found};

pub async fn a_human_is_admin_of_its_own_scope_only(db: TestDb) {
    let alice = human(&db, "alice").await;
    let bob = human(&db, "bob").await;
    assert_eq!(
        db.role_in_scope("alice", &alice).await.unwrap(),
        Some(Role::Admin)
    );
    assert_eq!(db.role_in_scope("alice", &bob).await.unwrap(), None);
    // A scope naming a human that does not exist gives nobody a role.
    assert_eq!(
        db.role_in_scope("carol", &OwnerScope::human("carol"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        db.role_in_scope("alice", &OwnerScope::team("ops"))
            .await
            .unwrap(),
        None
    );
}

pub async fn team_roles_are_set_replaced_and_removed(db: TestDb) {
    human(&db, "alice").await;
    human(&db, "bob").await;
    db.create_team("ops", "Operations").await.unwrap();
    let ops = OwnerScope::team("ops");
    let m = db
        .set_membership("ops", "alice", Role::Editor)
        .await
        .unwrap();
    assert_eq!(
        (m.team_slug.as_str(), m.human_login.as_str(), m.role),
        ("ops", "alice", Role::Editor)
    );
    assert_eq!(
        db.role_in_scope("alice", &ops).await.unwrap(),
        Some(Role::Editor)
    );
    db.set_membership("ops", "alice", Role::Admin)
        .await
        .unwrap();
    assert_eq!(
        db.role_in_scope("alice", &ops).await.unwrap(),
        Some(Role::Admin)
    );
    db.set_membership("ops", "bob", Role::Viewer).await.unwrap();
    assert_eq!(
        db.role_in_scope("bob", &ops).await.unwrap(),
        Some(Role::Viewer)
    );
    let members = db.list_memberships("ops").await.unwrap();
    assert_eq!(
        members
            .iter()
            .map(|m| (m.human_login.as_str(), m.role))
            .collect::<Vec<_>>(),
        vec![("alice", Role::Admin), ("bob", Role::Viewer)]
    );
    db.remove_membership("ops", "alice").await.unwrap();
    assert_eq!(db.role_in_scope("alice", &ops).await.unwrap(), None);
    not_found(db.remove_membership("ops", "alice").await, "membership");
    not_found(db.set_membership("nope", "bob", Role::Viewer).await, "team");
    not_found(
        db.set_membership("ops", "nobody", Role::Viewer).await,
        "human",
    );
    assert_eq!(db.list_teams().await.unwrap().len(), 1);
    assert_eq!(db.get_team("ops").await.unwrap().name, "Operations");
}

pub async fn duplicates_and_bad_names_are_refused(db: TestDb) {
    human(&db, "alice").await;
    assert!(matches!(
        db.create_human("alice", None).await,
        Err(Error::Conflict { .. })
    ));
    db.create_team("ops", "Ops").await.unwrap();
    assert!(matches!(
        db.create_team("ops", "Ops again").await,
        Err(Error::Conflict { .. })
    ));
    invalid(db.create_human("", None).await, "login");
    invalid(db.create_human("a b", None).await, "login");
    invalid(
        db.create_human("carol", Some("\u{7}")).await,
        "display_name",
    );
    invalid(db.create_team("Ops", "x").await, "slug");
    invalid(db.create_team("dev", "").await, "name");
    not_found(db.get_human("nobody").await, "human");
    assert_eq!(db.list_humans().await.unwrap().len(), 1);
}
