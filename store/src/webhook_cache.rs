//! The webhook rows ingest read, kept in memory (issue 22): a delivery used to cost a `SELECT`
//! of its webhook, the row's decoding, its secret's unsealing and its configuration's parsing,
//! every time. A copy is trusted only as far as the write that stores the delivery: each event
//! is stored naming the row's `revision` (migration 0014, moved on by a trigger with every
//! change to the row, whoever makes it), the insert takes no row whose webhook is at another
//! revision, and ingest then reads the row again and starts the delivery over
//! ([`Store::webhook_for_ingest_cached`]). So a copy may be stale for as long as it likes: no
//! delivery is ever stored as verified or routed under a webhook row that was not current
//! when it was stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sqlx::Row;

use crate::Store;
use crate::error::{Error, Result};
use crate::webhooks::{Webhook, webhook, webhook_columns};

/// Rows kept at most. Past it the copies are dropped and read again as deliveries come: a
/// bound on memory (a configuration may be large), not a working set anyone tunes.
const MAX_ROWS: usize = 4096;

/// A webhook row as ingest reads it, with the revision it was read at.
#[derive(Clone, Debug)]
pub struct IngestWebhook {
    pub webhook: Webhook,
    /// The row's `revision` when it was read: the event stored with it names it.
    pub revision: i64,
}

/// This process's copies, by webhook id.
#[derive(Debug, Default)]
pub(crate) struct WebhookCache {
    rows: Mutex<HashMap<String, Arc<IngestWebhook>>>,
}

impl WebhookCache {
    fn get(&self, id: &str) -> Option<Arc<IngestWebhook>> {
        self.rows.lock().ok()?.get(id).cloned()
    }

    fn put(&self, row: Arc<IngestWebhook>) {
        if let Ok(mut rows) = self.rows.lock() {
            if rows.len() >= MAX_ROWS && !rows.contains_key(&row.webhook.id) {
                rows.clear();
            }
            rows.insert(row.webhook.id.clone(), row);
        }
    }

    fn forget(&self, id: &str) {
        if let Ok(mut rows) = self.rows.lock() {
            rows.remove(id);
        }
    }
}

impl Store {
    /// Drops this process's copy of a webhook row (ingest found the webhook gone).
    pub fn forget_webhook_copy(&self, id: &str) {
        self.webhook_cache.forget(id);
    }

    /// The webhook ingest takes a delivery for: this process's copy when it has one, else the
    /// row read now (and kept). `fresh` reads the row whatever the copy: after a write refused
    /// a stale copy ([`is_stale_webhook`]).
    pub async fn webhook_for_ingest_cached(
        &self,
        id: &str,
        fresh: bool,
    ) -> Result<Arc<IngestWebhook>> {
        if !fresh && let Some(row) = self.webhook_cache.get(id) {
            return Ok(row);
        }
        match self.webhook_for_ingest_at_revision(id).await {
            Ok(row) => {
                let row = Arc::new(row);
                self.webhook_cache.put(Arc::clone(&row));
                Ok(row)
            }
            Err(e) => {
                self.webhook_cache.forget(id);
                Err(e)
            }
        }
    }
}

/// The error a write answers for an event whose webhook row moved on since it was read: the
/// delivery is stored nothing, and is taken again with the row read anew.
pub(crate) fn stale_webhook() -> crate::Error {
    crate::Error::version_mismatch(None)
}

/// Whether `e` is [`stale_webhook`]'s.
pub fn is_stale_webhook(e: &crate::Error) -> bool {
    matches!(
        e,
        crate::Error::FailedPrecondition {
            reason: crate::error::Reason::VersionMismatch,
            current_version: None,
            ..
        }
    )
}

impl Store {
    /// [`Store::webhook_for_ingest`] with the row's revision (migration 0014), which an event
    /// stored with it names (`webhook_cache`). Read here alone, so the webhook reads of older
    /// schemas stay as they were.
    pub(crate) async fn webhook_for_ingest_at_revision(&self, id: &str) -> Result<IngestWebhook> {
        let row = sqlx::query(concat!(
            "SELECT ",
            webhook_columns!(),
            ", revision FROM webhooks WHERE id = $1"
        ))
        .bind(crate::lookup_id(id))
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Err(Error::not_found("webhook"));
        };
        Ok(IngestWebhook {
            webhook: webhook(&row, &self.sealing)?,
            revision: row.try_get("revision")?,
        })
    }
}
