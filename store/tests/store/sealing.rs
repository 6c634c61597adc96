//! Webhook secrets sealed at rest (issue 16): what a dump of the database holds, a database
//! written before sealing, a wrong key, and rotation.

use sqlx::Row;
use switchboard_store::{Backend, StoreOptions};
use switchboard_store::{Error, SealingKey, Store};

use crate::harness::{TestDb, human, webhook};

/// Everything the database holds at rest, as text: the SQLite file with its WAL, or a
/// `pg_dump` of the test's schema followed by the raw bytes of the webhooks table's file
/// (after a checkpoint) where this machine's server keeps it readable.
async fn dump(db: &TestDb) -> String {
    match db.store.backend() {
        Backend::Sqlite => {
            let path = db
                .url
                .strip_prefix("sqlite://")
                .and_then(|p| p.split('?').next())
                .expect("a sqlite url");
            let mut bytes = std::fs::read(path).expect("the database file");
            if let Ok(wal) = std::fs::read(format!("{path}-wal")) {
                bytes.extend(wal);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }
        Backend::Postgres => {
            let (base, schema) = db
                .url
                .split_once("?options=-c%20search_path%3D")
                .or_else(|| db.url.split_once("&options=-c%20search_path%3D"))
                .expect("a schema-scoped url");
            let out = std::process::Command::new("pg_dump")
                .args(["--schema", schema, "--dbname", base])
                .output()
                .expect("pg_dump runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&raw_table_file(db).await);
            text
        }
    }
}

/// The webhooks table's file as PostgreSQL wrote it (dead rows included), after a checkpoint;
/// empty, saying so, where the server's files are not readable here (a remote server).
async fn raw_table_file(db: &TestDb) -> String {
    let pool = db.store.pool();
    let row = sqlx::query(
        "SELECT current_setting('data_directory') AS dir, pg_relation_filepath('webhooks') AS file",
    )
    .fetch_one(pool)
    .await
    .expect("where the table lives");
    let dir: String = row.try_get("dir").expect("dir");
    let file: String = row.try_get("file").expect("file");
    sqlx::query("CHECKPOINT")
        .execute(pool)
        .await
        .expect("checkpoint");
    match std::fs::read(std::path::Path::new(&dir).join(&file)) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            switchboard_testkit::missing::skip(
                "sealing: PostgreSQL's table file",
                &format!("a readable {dir}/{file} ({e})"),
                "run the tests beside the server, as a user who can read its files; pg_dump only",
            );
            String::new()
        }
    }
}

pub async fn a_database_dump_holds_no_webhook_secret(db: TestDb) {
    let alice = human(&db, "alice").await;
    let given = "a-forge-side-secret-0123456789";
    let hook = db
        .create_webhook(switchboard_store::NewWebhook {
            secret: Some(given.into()),
            ..crate::harness::new_webhook(&alice)
        })
        .await
        .expect("a webhook with a given secret");
    let generated = webhook(&db, &alice).await;
    let rotated = db
        .rotate_webhook_secret(&alice, &generated.id, None)
        .await
        .expect("rotate");
    assert_eq!(
        db.webhook_for_ingest(&hook.id).await.expect("read").secret,
        given
    );
    let text = dump(&db).await;
    assert!(text.contains(&hook.id), "the dump is of this database");
    for secret in [given, generated.secret.as_str(), rotated.secret.as_str()] {
        assert!(!text.contains(secret), "the dump holds a secret");
    }
    assert!(text.contains("sealed:v1:"), "secrets are stored sealed");
}

pub async fn secrets_written_in_the_clear_are_sealed_at_start_and_still_verify(db: TestDb) {
    let alice = human(&db, "alice").await;
    let hook = webhook(&db, &alice).await;
    // Enough webhooks that sealing them (a longer text than the clear one) moves rows and
    // frees pages: a page SQLite frees keeps what it held unless something rewrites it.
    let mut others = Vec::new();
    for _ in 0..300 {
        others.push(webhook(&db, &alice).await);
    }
    // As the previous landing wrote them: the secrets in the clear.
    for h in std::iter::once(&hook).chain(&others) {
        sqlx::query("UPDATE webhooks SET secret = $1 WHERE id = $2")
            .bind(h.secret.as_str())
            .bind(h.id.as_str())
            .execute(db.pool())
            .await
            .expect("a clear secret");
    }
    // ...and deleted some, the clear secrets left in freed space (the previous landing did
    // not zero what it deleted).
    let gone = others.split_off(200);
    if db.store.backend() == Backend::Sqlite {
        let mut conn = db.pool().acquire().await.expect("a connection");
        sqlx::query("PRAGMA secure_delete = OFF")
            .execute(&mut *conn)
            .await
            .expect("as before");
        for h in &gone {
            sqlx::query("DELETE FROM webhooks WHERE id = $1")
                .bind(h.id.as_str())
                .execute(&mut *conn)
                .await
                .expect("deleted");
        }
        sqlx::query("PRAGMA secure_delete = FAST")
            .execute(&mut *conn)
            .await
            .expect("as now");
    } else {
        for h in &gone {
            sqlx::query("DELETE FROM webhooks WHERE id = $1")
                .bind(h.id.as_str())
                .execute(db.pool())
                .await
                .expect("deleted");
        }
    }
    let reopened = Store::connect(&db.url, db.sealing_key())
        .await
        .expect("reopen");
    let stored: String = sqlx::query("SELECT secret FROM webhooks WHERE id = $1")
        .bind(hook.id.as_str())
        .fetch_one(reopened.pool())
        .await
        .expect("row")
        .try_get("secret")
        .expect("secret");
    assert!(stored.starts_with("sealed:v1:"), "{stored}");
    assert!(!stored.contains(&hook.secret));
    assert_eq!(
        reopened
            .webhook_for_ingest(&hook.id)
            .await
            .expect("read")
            .secret,
        hook.secret,
        "the webhook keeps verifying with the secret it had"
    );
    // Issue 49 item 7: no byte of the database holds the secret it had in the clear (a
    // deleted cell, a free page, a page image in the WAL, a dead PostgreSQL row).
    let text = dump(&db).await;
    assert!(text.contains(&hook.id), "the dump is of this database");
    assert!(
        !text.contains(&hook.secret),
        "the secret written in the clear survives in the database's bytes"
    );
    let survived = others
        .iter()
        .chain(&gone)
        .filter(|h| text.contains(h.secret.as_str()))
        .count();
    assert_eq!(
        survived,
        0,
        "of {} secrets written in the clear ({} of them deleted since), some survive in the database's bytes",
        others.len() + gone.len(),
        gone.len()
    );
    reopened.close().await;
}

pub async fn a_wrong_or_missing_key_is_refused_at_start(db: TestDb) {
    let alice = human(&db, "alice").await;
    webhook(&db, &alice).await;
    let other = SealingKey::generate().expect("a key");
    match Store::connect(&db.url, &other).await {
        Err(Error::InvalidArgument {
            field: "secret_key",
            message,
        }) => {
            assert!(message.contains(db.sealing_key().id()), "{message}");
            assert!(message.contains(other.id()), "{message}");
        }
        other => panic!("expected the wrong key refused, got {other:?}"),
    }
    let none = Store::connect_with(&db.url, StoreOptions::default()).await;
    assert!(
        matches!(
            none,
            Err(Error::InvalidArgument {
                field: "secret_key",
                ..
            })
        ),
        "{none:?}"
    );
}

pub async fn rotation_seals_every_secret_with_the_new_key(db: TestDb) {
    let alice = human(&db, "alice").await;
    let a = webhook(&db, &alice).await;
    let b = webhook(&db, &alice).await;
    let new = SealingKey::generate().expect("a key");
    assert_eq!(db.reseal_secrets(&new).await.expect("rotate"), 2);
    assert!(
        Store::connect(&db.url, db.sealing_key()).await.is_err(),
        "the old key no longer opens them"
    );
    // Issue 49 item 7: nothing sealed by the old key is left in the database's bytes, so a
    // leaked old key opens nothing that was ever stored.
    let old = format!("sealed:v1:{}:", db.sealing_key().id());
    let text = dump(&db).await;
    assert!(text.contains(&a.id), "the dump is of this database");
    assert!(
        !text.contains(&old),
        "a secret sealed by the old key survives in the database's bytes"
    );
    let rotated = Store::connect(&db.url, &new)
        .await
        .expect("the new key opens them");
    for hook in [&a, &b] {
        assert_eq!(
            rotated
                .webhook_for_ingest(&hook.id)
                .await
                .expect("read")
                .secret,
            hook.secret
        );
    }
    rotated.close().await;
}
