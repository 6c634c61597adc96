//! A trial's live half: once ingest has stored a delivery with its live
//! decision, each running trial of the webhook evaluates its candidate on the same delivery,
//! in a call of its own at a replay's priority (never in the live call, so a candidate over
//! its budget cannot fault or slow the live decision), and counts what it decided beside the
//! live decision. Nothing here writes a todo, claims a once-key or quarantines: the
//! candidate's decision is only counted.
//!
//! A delivery offered while the queue is full is shed: counted as seen and not evaluated,
//! never as unchanged and never lost silently. Each replica of control runs the trials of
//! the deliveries it ingests, learning of a trial started elsewhere within `refresh`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchboard_model::Label;
use switchboard_model::trial::TrialEnd;
use switchboard_proto::router::v1::{
    Configuration, EvaluateRequest, RoutingContext, StoredDelivery, WorkClass,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::capabilities::Capabilities;
use crate::routing::Routers;
use crate::store::{Store, Trial, TrialBatch, Webhook};

/// How trials run in this process.
#[derive(Clone, Debug)]
pub struct TrialOptions {
    /// How long a webhook's running trials are known without reading them again: a trial
    /// started or stopped on another replica is seen within this.
    pub refresh: Duration,
    /// Deliveries waiting for their trial evaluations; past it they are shed.
    pub queue: usize,
    /// The most deliveries one trial call carries.
    pub batch: usize,
    /// Per-delivery budget of a trial evaluation (the live budget).
    pub budget_ms: u32,
    /// Trials that may run at once per webhook (`--max-trials-per-webhook`).
    pub max_per_webhook: u32,
    /// What a guard's recovery redrive routes with (issue 46): the instance's capabilities
    /// and deliveries per Evaluate call.
    pub capabilities: Capabilities,
    pub replay_chunk: usize,
}

impl Default for TrialOptions {
    fn default() -> Self {
        TrialOptions {
            refresh: Duration::from_secs(2),
            queue: 4096,
            batch: 64,
            budget_ms: 50,
            max_per_webhook: 1,
            capabilities: Capabilities::default(),
            replay_chunk: 100,
        }
    }
}

/// Units of one trial call that may exceed their budget or crash their child before the
/// router stops the call (as a replay's).
const MAX_CHILD_FAULTS: u32 = 3;

/// How often trials past their `max_duration` are ended, deliveries or not.
const SWEEP: Duration = Duration::from_secs(15);

/// A running trial as ingest offers it deliveries.
struct Running {
    trial: Trial,
    candidate: Configuration,
}

struct Known {
    at: Instant,
    trials: Arc<Vec<Arc<Running>>>,
}

/// One delivery for one trial.
struct Offer {
    trial: Arc<Running>,
    context: RoutingContext,
    /// The saved configuration's digest when the delivery was decided.
    saved_digest: String,
    live: Label<'static>,
    delivery: StoredDelivery,
}

/// The trials of this process: which run, and the queue of deliveries they evaluate.
pub struct Trials {
    store: Store,
    options: TrialOptions,
    known: Mutex<HashMap<String, Known>>,
    offers: mpsc::Sender<Offer>,
    /// Deliveries shed (queue full) per trial, counted at the next flush.
    shed: Arc<Mutex<Shed>>,
}

/// Shed deliveries waiting to be counted, by trial id.
type Shed = BTreeMap<String, (Arc<Running>, TrialBatch)>;

impl std::fmt::Debug for Trials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trials")
            .field("options", &self.options)
            .finish()
    }
}

impl Trials {
    pub fn options(&self) -> &TrialOptions {
        &self.options
    }

    /// Starts the task that evaluates offered deliveries (on the current runtime).
    pub fn start(store: Store, routers: Arc<Routers>, options: TrialOptions) -> Arc<Trials> {
        let (offers, received) = mpsc::channel(options.queue.max(1));
        let shed = Arc::new(Mutex::new(BTreeMap::new()));
        tokio::spawn(run(
            received,
            store.clone(),
            routers,
            shed.clone(),
            options.clone(),
        ));
        Arc::new(Trials {
            store,
            options,
            known: Mutex::new(HashMap::new()),
            offers,
            shed,
        })
    }

    /// Whether `webhook_id` may have running trials, without waiting: `false` only when it
    /// is known, recently, to have none (ingest then keeps no copy of the delivery).
    pub fn may_run(&self, webhook_id: &str) -> bool {
        self.fresh(webhook_id)
            .is_none_or(|trials| !trials.is_empty())
    }

    /// A webhook's running trials as known, if known recently enough.
    fn fresh(&self, webhook_id: &str) -> Option<Arc<Vec<Arc<Running>>>> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known
            .get(webhook_id)
            .filter(|k| k.at.elapsed() < self.options.refresh)
            .map(|k| k.trials.clone())
    }

    /// Forgets what is known of a webhook's trials (a trial started or ended here).
    pub fn forget(&self, webhook_id: &str) {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(webhook_id);
    }

    async fn running(&self, webhook_id: &str) -> Arc<Vec<Arc<Running>>> {
        if let Some(trials) = self.fresh(webhook_id) {
            return trials;
        }
        let trials = match self.store.running_trials(webhook_id).await {
            Ok(trials) => trials,
            Err(e) => {
                tracing::warn!(webhook = %webhook_id, error = %e.log_text(), "running trials not read");
                Vec::new()
            }
        };
        let trials: Arc<Vec<Arc<Running>>> = Arc::new(
            trials
                .into_iter()
                .map(|trial| {
                    Arc::new(Running {
                        candidate: Configuration::from(&trial.candidate),
                        trial,
                    })
                })
                .collect(),
        );
        self.known.lock().unwrap_or_else(|e| e.into_inner()).insert(
            webhook_id.to_string(),
            Known {
                at: Instant::now(),
                trials: trials.clone(),
            },
        );
        trials
    }

    /// Offers a delivery ingest has stored with its live decision to the webhook's running
    /// trials. Never waits for an evaluation: a full queue sheds the delivery.
    pub async fn offer(
        &self,
        webhook: &Webhook,
        context: &RoutingContext,
        live: &Label<'_>,
        delivery: StoredDelivery,
    ) {
        let running = self.running(&webhook.id).await;
        for trial in running.iter() {
            let offer = Offer {
                trial: trial.clone(),
                context: context.clone(),
                saved_digest: webhook.config_digest.clone(),
                live: live.clone().into_owned(),
                delivery: delivery.clone(),
            };
            if let Err(mpsc::error::TrySendError::Full(offer)) = self.offers.try_send(offer) {
                let mut shed = self.shed.lock().unwrap_or_else(|e| e.into_inner());
                let (_, batch) = shed
                    .entry(trial.trial.id.clone())
                    .or_insert_with(|| (trial.clone(), TrialBatch::default()));
                batch.record(&offer.delivery.event_id, &offer.live, None);
            }
        }
    }
}

/// Evaluates offered deliveries, a trial's at a time, until the process ends; counts shed
/// deliveries every second.
async fn run(
    mut offers: mpsc::Receiver<Offer>,
    store: Store,
    routers: Arc<Routers>,
    shed: Arc<Mutex<Shed>>,
    options: TrialOptions,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut swept = Instant::now();
    loop {
        let first = tokio::select! {
            offer = offers.recv() => match offer {
                Some(offer) => Some(offer),
                None => return,
            },
            _ = tick.tick() => None,
        };
        // A trial that sees no delivery ends on time too.
        if swept.elapsed() >= SWEEP {
            swept = Instant::now();
            if let Err(e) = store.end_overdue_trials().await {
                tracing::warn!(error = %e.log_text(), "overdue trials not ended");
            }
        }
        let flushed = std::mem::take(&mut *shed.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, (running, batch)) in flushed {
            finish(&store, &routers, &options, &running.trial, &batch).await;
        }
        let Some(first) = first else {
            continue;
        };
        let mut taken = vec![first];
        while taken.len() < options.batch.max(1) {
            match offers.try_recv() {
                Ok(offer) => taken.push(offer),
                Err(_) => break,
            }
        }
        let mut by_trial: BTreeMap<String, Vec<Offer>> = BTreeMap::new();
        for offer in taken {
            by_trial
                .entry(offer.trial.trial.id.clone())
                .or_default()
                .push(offer);
        }
        for (_, group) in by_trial {
            evaluate(&store, &routers, &options, group).await;
        }
    }
}

/// One trial's deliveries: the candidate's decisions beside the live ones, counted.
async fn evaluate(store: &Store, routers: &Routers, options: &TrialOptions, group: Vec<Offer>) {
    let Some(head) = group.first() else {
        return;
    };
    let running = head.trial.clone();
    let trial = &running.trial;
    // Deliveries decided under another configuration than the trial's base say nothing
    // about it: the candidate runs beside the base alone.
    let (beside, elsewhere): (Vec<Offer>, Vec<Offer>) = group
        .into_iter()
        .partition(|o| o.saved_digest == trial.base_config_digest);
    let mut batch = TrialBatch::default();
    if let Some(first) = beside.first() {
        let request = EvaluateRequest {
            context: Some(first.context.clone()),
            configurations: vec![running.candidate.clone()],
            deliveries: beside.iter().map(|o| o.delivery.clone()).collect(),
            budget_ms: options.budget_ms,
            work_class: WorkClass::Replay as i32,
            tenant: trial.owner_scope.to_string(),
            // A candidate over its budget on every delivery costs a few budgets per batch,
            // not one per delivery: the rest of the batch is answered not evaluated.
            max_child_faults: MAX_CHILD_FAULTS,
        };
        let answered = match routers.evaluate(request).await {
            Ok(results) => results,
            Err(e) => {
                tracing::warn!(trial = %trial.id, error = %e.log_text(), "trial deliveries not evaluated");
                Vec::new()
            }
        };
        for offer in &beside {
            let after = answered
                .iter()
                .find(|r| r.event_id == offer.delivery.event_id)
                .and_then(|r| r.decisions.first())
                // A unit the router left unevaluated (its call stopped after its faults) says
                // nothing about the delivery: not evaluated, not a fault.
                .filter(|d| d.fault_code != switchboard_model::fault::NOT_EVALUATED)
                .map(switchboard_packs::plan::routed);
            batch.record(&offer.delivery.event_id, &offer.live, after.as_ref());
        }
    }
    // Decided elsewhere: if the saved configuration moved, the trial is stale (what it
    // counted beside its base still stands); if not (this replica decided with a copy read
    // before the trial started), they were seen and not evaluated.
    let mut stale = false;
    if !elsewhere.is_empty() {
        match store
            .get_webhook(&trial.owner_scope, &trial.webhook_id)
            .await
        {
            Ok(saved) if saved.config_digest == trial.base_config_digest => {
                for offer in &elsewhere {
                    batch.record(&offer.delivery.event_id, &offer.live, None);
                }
            }
            Ok(_) => stale = true,
            Err(e) => {
                tracing::warn!(trial = %trial.id, error = %e.log_text(), "trial's webhook not read");
            }
        }
    }
    if batch.observed.seen > 0 {
        finish(store, routers, options, trial, &batch).await;
    }
    if stale {
        end(store, trial, TrialEnd::Stale).await;
    }
}

/// Counts a batch and ends the trial if that was its last (its limits; a moved saved
/// configuration ended it before its deliveries were evaluated). The count the store
/// answers decides, so no trial is read again per batch.
async fn finish(
    store: &Store,
    routers: &Routers,
    options: &TrialOptions,
    trial: &Trial,
    batch: &TrialBatch,
) {
    let seen = match store.record_trial(&trial.id, batch).await {
        Ok(Some(seen)) => seen,
        // Ended meanwhile (stopped, or by another replica): nothing more to decide.
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(trial = %trial.id, error = %e.log_text(), "trial batch not counted");
            return;
        }
    };
    if trial.guard.is_some() {
        // A guard (issue 46) is judged after every batch it counts.
        let ctx = crate::redrive::Ctx {
            store,
            routers,
            capabilities: &options.capabilities,
            budget_ms: options.budget_ms,
            chunk: options.replay_chunk,
        };
        crate::trials::guards::judge_after_batch(&ctx, trial).await;
    } else {
        count_deliveries(trial, batch);
    }
    if let Some(why) = trial.limits.ended(
        trial.started_at,
        store.clock().now_ms(),
        seen,
        &trial.base_config_digest,
        &trial.base_config_digest,
    ) {
        end(store, trial, why).await;
    }
}

/// A trial's batch in `switchboard.trial.deliveries` (a guard's deliveries are not a trial's).
fn count_deliveries(trial: &Trial, batch: &TrialBatch) {
    // Counted as the store counted them: a batch an ended trial refused is in neither.
    let observed = &batch.observed;
    let disagreed: u64 = observed.transitions.values().sum();
    let metrics = switchboard_telemetry::metrics();
    let webhook = trial.webhook_id.as_str();
    metrics.trial_deliveries(
        webhook,
        "agreed",
        observed.evaluated.saturating_sub(disagreed),
    );
    metrics.trial_deliveries(webhook, "disagreed", disagreed);
    metrics.trial_deliveries(webhook, "not_evaluated", observed.not_evaluated());
}

async fn end(store: &Store, trial: &Trial, why: TrialEnd) {
    if let Err(e) = store.end_running(&trial.owner_scope, &trial.id, why).await {
        tracing::warn!(trial = %trial.id, error = %e.log_text(), "trial not ended");
    }
}
