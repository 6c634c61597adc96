//! The change log's rows (issue 47): entries of the hash chain `switchboard_model::change_log`
//! defines, appended in the same transaction as the change they record, read in seq order,
//! and verified by recomputing the chain. Appends are serialized (PostgreSQL: a transaction
//! advisory lock; SQLite: the write lock every write transaction holds), so two changes never
//! take the same seq or the same previous hash. Nothing here updates or deletes a row.

use std::collections::BTreeMap;

use sqlx::Row;
use switchboard_model::change_log::{
    Broken, ChangeActor, ChangeEntry, ChangeKind, Head, Sealed, seal, verify,
};

use crate::acts::operator_entry;
use crate::dialect::Backend;
use crate::error::Result;
use crate::{OwnerScope, Store};

/// The advisory lock key that serializes appends on PostgreSQL ("change" in ASCII).
const APPEND_LOCK: i64 = 0x6368_616e_6765;

/// Rows read per query while verifying.
const VERIFY_PAGE: i64 = 1000;

/// Appends `entry` after the log's head, in the caller's transaction. `operator_acts`: the
/// schema indexes operators' acts (migration 0021), so an operator's act names its operator.
async fn append_in(
    conn: &mut sqlx::AnyConnection,
    backend: Backend,
    operator_acts: bool,
    entry: ChangeEntry,
) -> Result<Sealed> {
    lock(conn, backend).await?;
    let head = sqlx::query("SELECT seq, hash FROM change_log ORDER BY seq DESC LIMIT 1")
        .fetch_optional(&mut *conn)
        .await?
        .map(|row| -> Result<Head> {
            let seq: i64 = row.try_get("seq")?;
            Ok(Head {
                seq: u64::try_from(seq).unwrap_or(0),
                hash: row.try_get("hash")?,
            })
        })
        .transpose()?;
    let (at, scope, webhook) = (
        entry.at_ms,
        entry.owner_scope.clone(),
        entry.webhook_id.clone(),
    );
    let operator = operator_act(&entry).map(str::to_string);
    let sealed = seal(entry, head.as_ref());
    let seq = i64::try_from(sealed.seq).unwrap_or(i64::MAX);
    let insert = if operator_acts {
        sqlx::query(
            "INSERT INTO change_log (seq, at, owner_scope, webhook_id, entry, hash, operator_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
    } else {
        sqlx::query(
            "INSERT INTO change_log (seq, at, owner_scope, webhook_id, entry, hash) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
    };
    let insert = insert
        .bind(seq)
        .bind(at)
        .bind(scope)
        .bind(webhook)
        .bind(sealed.text.as_str())
        .bind(sealed.hash.as_str());
    if operator_acts {
        insert.bind(operator).execute(&mut *conn).await?;
    } else {
        insert.execute(&mut *conn).await?;
    }
    Ok(sealed)
}

/// The operator whose act `entry` records, as the audit names one: an operator actor and an
/// audit `action` (a configuration version an operator saved is a change, not an act the
/// audit lists). Migration 0021 fills the index by the same test.
fn operator_act(entry: &ChangeEntry) -> Option<&str> {
    entry
        .actor
        .operator
        .as_deref()
        .filter(|_| entry.detail.contains_key("action"))
}

/// Serializes appends until the transaction ends: PostgreSQL's transaction advisory lock
/// (SQLite's write transactions hold the database's write lock already).
async fn lock(conn: &mut sqlx::AnyConnection, backend: Backend) -> Result<()> {
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(APPEND_LOCK)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

fn sealed(row: &sqlx::any::AnyRow) -> Result<Sealed> {
    let seq: i64 = row.try_get("seq")?;
    Ok(Sealed {
        seq: u64::try_from(seq).unwrap_or(0),
        text: row.try_get("entry")?,
        hash: row.try_get("hash")?,
    })
}

impl Store {
    /// Appends `entry` after the log's head in the caller's transaction, the one that makes
    /// the change it records; nothing on a schema without the log (upgrade tests).
    pub(crate) async fn append_change(
        &self,
        conn: &mut sqlx::AnyConnection,
        entry: ChangeEntry,
    ) -> Result<Option<Sealed>> {
        if !self.change_log {
            return Ok(None);
        }
        append_in(conn, self.backend, self.audit_view, entry)
            .await
            .map(Some)
    }

    /// Starts the log of a database written before it (issue 47): when the log is empty, one
    /// entry per stored configuration version and operator-audit row, in time order, chained,
    /// in one transaction. The first store to find it empty writes it (appends are
    /// serialized); every later one finds entries and writes nothing. Answers how many.
    pub(crate) async fn start_change_log(&self) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        lock(&mut tx, self.backend).await?;
        let started = sqlx::query("SELECT seq FROM change_log LIMIT 1")
            .fetch_optional(&mut *tx)
            .await?;
        if started.is_some() {
            return Ok(0);
        }
        let history = sqlx::query(
            "SELECT webhook_id, version, owner_scope, actor_endpoint, actor_human, change, \
             provenance, digest_before, digest_after, saved_at FROM configuration_history \
             ORDER BY saved_at, webhook_id, version",
        )
        .fetch_all(&mut *tx)
        .await?;
        let audit = sqlx::query(
            "SELECT at, operator_id, action, target, detail FROM operator_audit ORDER BY at, id",
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut entries: Vec<ChangeEntry> = Vec::with_capacity(history.len() + audit.len());
        for row in &history {
            entries.push(history_entry(row)?);
        }
        for row in &audit {
            let detail: String = row.try_get("detail")?;
            let action: String = row.try_get("action")?;
            let target: String = row.try_get("target")?;
            let operator: Option<String> = row.try_get("operator_id")?;
            entries.push(operator_entry(
                row.try_get("at")?,
                operator.as_deref(),
                &action,
                &target,
                &serde_json::from_str(&detail).unwrap_or_default(),
            ));
        }
        // Time order; a configuration version before an operator's act of the same moment.
        entries.sort_by_key(|e| (e.at_ms, e.kind != ChangeKind::Configuration));
        let n = entries.len() as u64;
        for entry in entries {
            append_in(&mut tx, self.backend, self.audit_view, entry).await?;
        }
        tx.commit().await?;
        Ok(n)
    }

    /// The log's entries after `after` (a seq; 0 from the start), oldest first, at most
    /// `limit`; with `scope`, only that owner scope's entries.
    pub async fn list_changes(
        &self,
        scope: Option<&OwnerScope>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Sealed>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::from(limit.clamp(1, 1000));
        let rows =
            match scope {
                Some(scope) => sqlx::query(
                    "SELECT seq, entry, hash FROM change_log WHERE owner_scope = $1 AND seq > $2 \
                     ORDER BY seq LIMIT $3",
                )
                .bind(scope.to_string())
                .bind(after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?,
                None => sqlx::query(
                    "SELECT seq, entry, hash FROM change_log WHERE seq > $1 ORDER BY seq LIMIT $2",
                )
                .bind(after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?,
            };
        rows.iter().map(sealed).collect()
    }

    /// The entries after `query.after` (a seq), oldest first, at most `query.limit`: with a
    /// `scope`, that scope's own and those of its webhooks (an operator's act on a webhook names
    /// the webhook), without one every entry; narrowed to one webhook and to `[since, until)`
    /// (ms; 0: no bound) when given. Owners read the log through this with their scope
    /// (`list_webhook_changes`), operators with any (`ListChanges`).
    pub async fn scope_changes(
        &self,
        scope: Option<&OwnerScope>,
        query: &ChangeQuery<'_>,
    ) -> Result<Vec<Sealed>> {
        if !self.change_log {
            return Ok(Vec::new());
        }
        let until = if query.until_ms > 0 {
            query.until_ms
        } else {
            i64::MAX
        };
        let rows = sqlx::query(
            "SELECT seq, entry, hash FROM change_log WHERE seq > $1 \
             AND ($2 = '' OR owner_scope = $2 \
                  OR webhook_id IN (SELECT id FROM webhooks WHERE owner_scope = $2)) \
             AND ($3 = '' OR webhook_id = $3) AND at >= $4 AND at < $5 \
             ORDER BY seq LIMIT $6",
        )
        .bind(i64::try_from(query.after).unwrap_or(i64::MAX))
        .bind(scope.map(ToString::to_string).unwrap_or_default())
        .bind(query.webhook_id)
        .bind(query.since_ms)
        .bind(until)
        .bind(i64::from(query.limit.clamp(1, 1000)))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(sealed).collect()
    }

    /// The log's last entry, as stored (not verified: `verify_change_log` checks it), for an
    /// operator to publish or pin; `None` while the log is empty.
    pub async fn change_log_head(&self) -> Result<Option<Head>> {
        if !self.change_log {
            return Ok(None);
        }
        let row = sqlx::query("SELECT seq, hash FROM change_log ORDER BY seq DESC LIMIT 1")
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            let seq: i64 = r.try_get("seq")?;
            Ok(Head {
                seq: u64::try_from(seq).unwrap_or(0),
                hash: r.try_get("hash")?,
            })
        })
        .transpose()
    }

    /// A webhook's newest `limit` entries, newest first (the console's change log). The
    /// caller has checked the person may read the webhook.
    pub async fn webhook_changes(&self, webhook_id: &str, limit: u32) -> Result<Vec<Sealed>> {
        if !self.change_log {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT seq, entry, hash FROM change_log WHERE webhook_id = $1              ORDER BY seq DESC LIMIT $2",
        )
        .bind(webhook_id)
        .bind(i64::from(limit.clamp(1, 1000)))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(sealed).collect()
    }

    /// Recomputes the whole chain from the database, a page at a time: its head, or the first
    /// entry that does not match (edited, deleted, moved or unlinked).
    pub async fn verify_change_log(&self) -> Result<std::result::Result<Option<Head>, Broken>> {
        let mut head: Option<Head> = None;
        let mut after = 0i64;
        loop {
            let rows = sqlx::query(
                "SELECT seq, entry, hash FROM change_log WHERE seq > $1 ORDER BY seq LIMIT $2",
            )
            .bind(after)
            .bind(VERIFY_PAGE)
            .fetch_all(&self.pool)
            .await?;
            let page = rows.iter().map(sealed).collect::<Result<Vec<_>>>()?;
            let Some(last) = page.last() else {
                return Ok(Ok(head));
            };
            after = i64::try_from(last.seq).unwrap_or(i64::MAX);
            match verify(&page, head.clone()) {
                Ok(h) => head = h,
                Err(broken) => return Ok(Err(broken)),
            }
            if page.len() < VERIFY_PAGE as usize {
                return Ok(Ok(head));
            }
        }
    }
}

/// Which entries to read ([`Store::scope_changes`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct ChangeQuery<'a> {
    /// Entries after this seq.
    pub after: u64,
    pub limit: u32,
    /// One webhook's, or (empty) all.
    pub webhook_id: &'a str,
    pub since_ms: i64,
    /// 0: no bound.
    pub until_ms: i64,
}

/// A configuration version as the log records it: one definition for the save that appends
/// it and for the start of a log from stored history, so both write the same entry.
pub(crate) struct Version<'a> {
    pub at: i64,
    pub scope: &'a str,
    pub webhook_id: &'a str,
    pub version: i64,
    pub digest_before: Option<String>,
    pub digest_after: Option<String>,
    pub endpoint: Option<String>,
    pub human: Option<String>,
    pub provenance: switchboard_model::ChangeProvenance,
    pub op: String,
}

pub(crate) fn configuration_entry(v: Version<'_>) -> ChangeEntry {
    let p = v.provenance;
    let mut evidence = BTreeMap::new();
    if !p.plan.is_empty() {
        evidence.insert("plan".to_string(), p.plan.clone());
    }
    for (key, value) in [
        ("plan_digest", p.plan_digest),
        ("trial", p.trial),
        ("guard", p.guard),
        ("breach", p.breach),
    ] {
        if let Some(value) = value {
            evidence.insert(key.to_string(), value);
        }
    }
    // Neither an endpoint nor a person: an operator's save.
    let operator = (v.endpoint.is_none() && v.human.is_none()).then(|| "operator".to_string());
    ChangeEntry {
        seq: 0,
        at_ms: v.at,
        kind: ChangeKind::Configuration,
        actor: ChangeActor {
            endpoint: v.endpoint,
            human: v.human,
            operator,
        },
        approvers: if p.approvers.is_empty() {
            p.approved_by.into_iter().collect()
        } else {
            p.approvers
        },
        owner_scope: Some(v.scope.to_string()),
        webhook_id: Some(v.webhook_id.to_string()),
        version: Some(v.version),
        digest_before: v.digest_before,
        digest_after: v.digest_after,
        evidence,
        detail: {
            let mut detail = BTreeMap::from([("op".to_string(), v.op)]);
            if let Some(by) = p
                .proposed_by
                .as_ref()
                .filter(|b| b.human.is_some() || b.endpoint.is_some())
            {
                let who = ChangeActor {
                    endpoint: by.endpoint.clone(),
                    human: by.human.clone(),
                    operator: None,
                };
                detail.insert("proposed_by".to_string(), who.describe());
            }
            detail
        },
        prev_hash: String::new(),
    }
}

/// A stored configuration version as the entry its save would have appended.
fn history_entry(row: &sqlx::any::AnyRow) -> Result<ChangeEntry> {
    let provenance: Option<String> = row.try_get("provenance")?;
    let change: String = row.try_get("change")?;
    let scope: String = row.try_get("owner_scope")?;
    let webhook_id: String = row.try_get("webhook_id")?;
    Ok(configuration_entry(Version {
        at: row.try_get("saved_at")?,
        scope: &scope,
        webhook_id: &webhook_id,
        version: row.try_get("version")?,
        digest_before: row.try_get("digest_before")?,
        digest_after: row.try_get("digest_after")?,
        endpoint: row.try_get("actor_endpoint")?,
        human: row.try_get("actor_human")?,
        provenance: provenance
            .and_then(|p| serde_json::from_str(&p).ok())
            .unwrap_or_default(),
        op: serde_json::from_str::<switchboard_model::ConfigurationChange>(&change)
            .map(|c| c.op)
            .unwrap_or_default(),
    }))
}
