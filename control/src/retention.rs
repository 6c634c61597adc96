//! The retention task: every `interval`, purges what [`Retention`](crate::store::Retention)
//! bounds (events past their age or their webhook's count, plans and unconfirmed redrive plans
//! past their expiry, trials ended before the age bound) in small batches with a pause between them, so a first purge of a big
//! backlog never holds the store's writers away from live ingest for long. Counts go to the
//! `switchboard.retention.purged` metric. Safe on every replica at once: each batch is one
//! `DELETE` of rows chosen by the statement itself.

use std::time::Duration;

use crate::state::ControlState;

/// How the retention task runs.
#[derive(Clone, Copy, Debug)]
pub struct RetentionOptions {
    /// Time between passes.
    pub interval: Duration,
    /// Rows deleted per statement.
    pub batch: u32,
    /// Wait between batches within a pass.
    pub pause: Duration,
}

impl Default for RetentionOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            batch: 500,
            pause: Duration::from_millis(20),
        }
    }
}

/// What one pass purged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Events past the age bound.
    pub by_age: u64,
    /// Events past their webhook's count bound.
    pub by_count: u64,
    pub plans: u64,
    /// Redrive plans never confirmed, past their expiry and the grace.
    pub redrives: u64,
    /// Trials that ended before the age bound, with their tallies.
    pub trials: u64,
}

/// How long a plan is kept past its expiry: the store's, so the inbox lists a lapsed plan
/// exactly as long as retention keeps it.
pub use crate::store::PLAN_GRACE;

/// Repeats `purge` (one batch) until a batch comes back short, pausing between batches.
async fn in_batches<F, Fut>(options: &RetentionOptions, mut purge: F) -> crate::Result<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::Result<u64>>,
{
    let mut total = 0;
    loop {
        let n = purge().await?;
        total += n;
        if n < u64::from(options.batch.max(1)) {
            return Ok(total);
        }
        tokio::time::sleep(options.pause).await;
    }
}

/// One pass: events past the age bound, then past each webhook's count, then plans, then
/// redrive plans never confirmed, then trials that ended before the age bound.
pub async fn purge_once(state: &ControlState, options: &RetentionOptions) -> crate::Result<Purged> {
    let store = &state.store;
    let retention = state.limits.retention;
    let now = store.clock().now_ms();
    let batch = options.batch.max(1);
    let metrics = switchboard_telemetry::metrics();

    let before = retention.kept_since(now);
    let by_age = in_batches(options, || {
        store.purge_events_received_before(before, batch)
    })
    .await?;
    metrics.retention_purged("event", by_age);

    let keep = retention.max_events_per_webhook;
    let mut by_count = 0;
    for webhook in store.webhooks_over_event_count(keep).await? {
        by_count += in_batches(options, || {
            store.purge_events_past_count(&webhook, keep, batch)
        })
        .await?;
    }
    metrics.retention_purged("event", by_count);

    let grace = i64::try_from(PLAN_GRACE.as_millis()).unwrap_or(i64::MAX);
    let plans = in_batches(options, || {
        store.purge_plans_expired_before(now.saturating_sub(grace), batch)
    })
    .await?;
    metrics.retention_purged("plan", plans);
    let redrives = in_batches(options, || {
        store.purge_redrives_expired_before(now.saturating_sub(grace), batch)
    })
    .await?;
    metrics.retention_purged("redrive", redrives);
    let trials = in_batches(options, || store.purge_trials_ended_before(before, batch)).await?;
    metrics.retention_purged("trial", trials);
    let purged = Purged {
        by_age,
        by_count,
        plans,
        redrives,
        trials,
    };
    if purged != Purged::default() {
        tracing::info!(
            by_age,
            by_count,
            plans,
            redrives,
            trials,
            "retention purged"
        );
    }
    Ok(purged)
}

/// Runs [`purge_once`] every `options.interval` until aborted.
pub fn spawn_retention(
    state: ControlState,
    options: RetentionOptions,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(options.interval).await;
            if let Err(e) = purge_once(&state, &options).await {
                tracing::warn!(error = %e.log_text(), "retention pass failed");
            }
        }
    })
}
