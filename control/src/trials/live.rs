//! A trial's live half: each running trial of a webhook evaluates its candidate on every
//! delivery ingest stores with its live decision, and counts what it decided beside the live
//! decision. Nothing here writes a todo, claims a once-key or quarantines: the candidate's
//! decision is only counted.
//!
//! Where the candidate runs: **apart** at first, in a call of its own at a replay's
//! priority, where its cost never delays a live decision; once it has shown itself cheap
//! there, **in the live call** itself, as the call's second configuration, on the envelope
//! the router already built for the live rules (one decode, one parse, two configurations:
//! issue 45's design). When it moves is [`super::cost`]'s rule. A webhook's second trial (a
//! call carries two configurations) and a delivery for which the running trials are not
//! known fresh run apart too. Both places count the same decision under the same budget.
//!
//! A delivery offered while the queue is full is shed: counted as seen and not evaluated,
//! never as unchanged and never lost silently. Each replica of control runs the trials of
//! the deliveries it ingests, learning of a trial started elsewhere within `refresh`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchboard_model::Label;
use switchboard_model::fault;
use switchboard_model::trial::TrialEnd;
use switchboard_packs::plan::Routed;
use switchboard_proto::router::v1::{
    Configuration, Decision, EvaluateRequest, RoutingContext, StoredDelivery, WorkClass,
};

use super::cost::{Cost, Places};
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
    /// The most deliveries one write of a trial's counts holds.
    pub write_batch: usize,
    /// How long a batch waits for more deliveries once it has one: counts are written a
    /// batch at a time, so under load a write holds a full batch, not the few deliveries
    /// that arrived while the last one was written.
    pub linger: Duration,
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
            write_batch: 1024,
            linger: Duration::from_millis(200),
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
pub struct Running {
    trial: Trial,
    candidate: Configuration,
    /// What its candidate has cost in this process: one for the trial, kept when the
    /// webhook's running trials are read again.
    cost: Arc<Mutex<Cost>>,
}

impl Running {
    /// The configuration the trial evaluates (for a guard, the one its change replaced).
    pub fn candidate(&self) -> &Configuration {
        &self.candidate
    }

    /// The trial's id.
    pub fn id(&self) -> &str {
        &self.trial.id
    }
}

/// Where a delivery's trials run: at most one beside the live rules, in their call.
#[derive(Default)]
pub struct Beside {
    /// The trial whose candidate the live call carries as its second configuration.
    pub in_call: Option<Arc<Running>>,
    /// Whether other trials may want the delivery (apart, from a copy of it).
    pub apart: bool,
}

/// What a queued offer holds of the candidate's decision.
enum Candidate {
    /// To be evaluated apart, on this copy of the delivery.
    Evaluate(StoredDelivery),
    /// Decided in the live call (`None`: no decision to count, not evaluated).
    Decided(Option<Routed>),
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
    event_id: String,
    candidate: Candidate,
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

    /// Where the trials of `webhook`'s next delivery run, without waiting: the first running
    /// trial beside the saved configuration whose candidate is cheap rides in the live call
    /// (evaluated under `budget_ms`, the live budget, which must be the trials' own); the
    /// rest, and every trial when they are not known fresh, run apart. A webhook known,
    /// recently, to have none gets neither (ingest then keeps no copy of the delivery).
    pub fn beside_live(&self, webhook: &Webhook, budget_ms: u32) -> Beside {
        // A list older than `refresh` still says which candidate rides in the call (a trial
        // ended meanwhile refuses what it is offered); the delivery also goes apart, which
        // reads the list again and finds a trial started elsewhere.
        let (trials, fresh) = {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            match known.get(&webhook.id) {
                Some(k) => (k.trials.clone(), k.at.elapsed() < self.options.refresh),
                None => {
                    return Beside {
                        in_call: None,
                        apart: true,
                    };
                }
            }
        };
        let in_call = (budget_ms == self.options.budget_ms)
            .then(|| {
                trials.iter().find(|t| {
                    t.trial.base_config_digest == webhook.config_digest && lock(&t.cost).in_call()
                })
            })
            .flatten()
            .cloned();
        let apart = !fresh || trials.len() > usize::from(in_call.is_some());
        Beside { in_call, apart }
    }

    /// Where `trial_id`'s candidate has been evaluated in this process, while it is known
    /// running here.
    pub fn places(&self, trial_id: &str) -> Option<Places> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known
            .values()
            .flat_map(|k| k.trials.iter())
            .find(|t| t.trial.id == trial_id)
            .map(|t| lock(&t.cost).evaluated)
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
        // A trial known before keeps what its candidate cost (and whether it went apart).
        let before = self
            .known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(webhook_id)
            .map(|k| k.trials.clone());
        let trials: Arc<Vec<Arc<Running>>> = Arc::new(
            trials
                .into_iter()
                .map(|trial| {
                    let cost = before
                        .iter()
                        .flat_map(|b| b.iter())
                        .find(|b| b.trial.id == trial.id)
                        .map(|b| b.cost.clone())
                        .unwrap_or_default();
                    Arc::new(Running {
                        candidate: Configuration::from(&trial.candidate),
                        trial,
                        cost,
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

    /// Counts what `trial`'s candidate decided on a delivery in its live call (`after`, in
    /// `unit_ns` of its rules' time), beside the live decision, and learns its cost.
    pub fn offer_decided(
        &self,
        trial: &Arc<Running>,
        webhook: &Webhook,
        live: &Label<'_>,
        event_id: &str,
        after: &Decision,
        unit_ns: u64,
    ) {
        let decided = (after.fault_code != fault::NOT_EVALUATED)
            .then(|| switchboard_packs::plan::routed(after));
        if decided.is_some() {
            let mut cost = lock(&trial.cost);
            cost.observe(after, unit_ns);
            cost.evaluated.live_call += 1;
            switchboard_telemetry::metrics().trial_evaluations("live_call", 1);
        }
        self.queue(Offer {
            trial: trial.clone(),
            context: RoutingContext::default(),
            saved_digest: webhook.config_digest.clone(),
            live: live.clone().into_owned(),
            event_id: event_id.to_string(),
            candidate: Candidate::Decided(decided),
        });
    }

    /// Offers a delivery ingest has stored with its live decision to the webhook's running
    /// trials that run apart (every one but `in_call`, counted already). Never waits for an
    /// evaluation: a full queue sheds the delivery.
    pub async fn offer(
        &self,
        webhook: &Webhook,
        context: &RoutingContext,
        live: &Label<'_>,
        delivery: StoredDelivery,
        in_call: Option<&str>,
    ) {
        let running = self.running(&webhook.id).await;
        for trial in running.iter() {
            if in_call == Some(trial.trial.id.as_str()) {
                continue;
            }
            self.queue(Offer {
                trial: trial.clone(),
                context: context.clone(),
                saved_digest: webhook.config_digest.clone(),
                live: live.clone().into_owned(),
                event_id: delivery.event_id.clone(),
                candidate: Candidate::Evaluate(delivery.clone()),
            });
        }
    }

    /// Queues an offer; a full queue sheds it (counted as seen, not evaluated).
    fn queue(&self, offer: Offer) {
        if let Err(mpsc::error::TrySendError::Full(offer)) = self.offers.try_send(offer) {
            let mut shed = self.shed.lock().unwrap_or_else(|e| e.into_inner());
            let (_, batch) = shed
                .entry(offer.trial.trial.id.clone())
                .or_insert_with(|| (offer.trial.clone(), TrialBatch::default()));
            batch.record(&offer.event_id, &offer.live, None);
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
        let until = Instant::now() + options.linger;
        while taken.len() < options.write_batch.max(1) {
            match tokio::time::timeout_at(until, offers.recv()).await {
                Ok(Some(offer)) => taken.push(offer),
                // The batch's time is up, or the process is ending: count what there is.
                Ok(None) | Err(_) => break,
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
    // Decided in the live call: counted as they are.
    let (to_evaluate, decided): (Vec<Offer>, Vec<Offer>) = beside
        .into_iter()
        .partition(|o| matches!(o.candidate, Candidate::Evaluate(_)));
    for offer in &decided {
        if let Candidate::Decided(after) = &offer.candidate {
            batch.record(&offer.event_id, &offer.live, after.as_ref());
        }
    }
    // Apart: in router calls of at most `batch` deliveries each.
    for part in to_evaluate.chunks(options.batch.max(1)) {
        let Some(first) = part.first() else {
            continue;
        };
        let deliveries: Vec<StoredDelivery> = part
            .iter()
            .filter_map(|o| match &o.candidate {
                Candidate::Evaluate(d) => Some(d.clone()),
                Candidate::Decided(_) => None,
            })
            .collect();
        let request = EvaluateRequest {
            context: Some(first.context.clone()),
            configurations: vec![running.candidate.clone()],
            deliveries,
            budget_ms: options.budget_ms,
            work_class: WorkClass::Replay as i32,
            tenant: trial.owner_scope.to_string(),
            // A candidate over its budget on every delivery costs a few budgets per call,
            // not one per delivery: the rest of the call is answered not evaluated.
            max_child_faults: MAX_CHILD_FAULTS,
        };
        let answered = match routers.evaluate(request).await {
            Ok(results) => results,
            Err(e) => {
                tracing::warn!(trial = %trial.id, error = %e.log_text(), "trial deliveries not evaluated");
                Vec::new()
            }
        };
        let mut evaluated = 0;
        for offer in part {
            let answer = answered.iter().find(|r| r.event_id == offer.event_id);
            if let Some((d, ns)) =
                answer.and_then(|r| Some((r.decisions.first()?, r.unit_ns.first()?)))
            {
                let mut cost = lock(&running.cost);
                cost.observe(d, *ns);
                cost.evaluated.apart += u64::from(d.fault_code != fault::NOT_EVALUATED);
            }
            let after = answer
                .and_then(|r| r.decisions.first())
                // A unit the router left unevaluated (its call stopped after its faults) says
                // nothing about the delivery: not evaluated, not a fault.
                .filter(|d| d.fault_code != fault::NOT_EVALUATED)
                .map(switchboard_packs::plan::routed);
            evaluated += u64::from(after.is_some());
            batch.record(&offer.event_id, &offer.live, after.as_ref());
        }
        switchboard_telemetry::metrics().trial_evaluations("apart", evaluated);
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
                    batch.record(&offer.event_id, &offer.live, None);
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn end(store: &Store, trial: &Trial, why: TrialEnd) {
    if let Err(e) = store.end_running(&trial.owner_scope, &trial.id, why).await {
        tracing::warn!(trial = %trial.id, error = %e.log_text(), "trial not ended");
    }
}
