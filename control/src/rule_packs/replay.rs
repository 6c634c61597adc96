//! The replay (REQ-4, REQ-8): the saved configuration and a candidate over the webhook's own
//! stored deliveries, under the webhook's replay lease and rate limit. Used by plans and by
//! `test_webhook_rules` with `replay`.

use super::*;

/// Replays a candidate beside the saved configuration over a webhook's own stored deliveries:
/// the one replay plans (through [`RulePacks`]) and `test_webhook_rules` with `replay` share.
#[derive(Clone)]
pub struct Replayer {
    state: ControlState,
    /// The total time budget of one replay.
    budget: Duration,
}

impl Replayer {
    pub fn new(state: ControlState) -> Self {
        let budget = state.limits.replay_budget;
        Self { state, budget }
    }

    /// `test_webhook_rules` with `replay` (REQ-8): the report, no token, nothing written.
    pub async fn replay_candidate(
        &self,
        caller: &Caller,
        webhook_id: &str,
        mut candidate: Configuration,
        window: &ReplayWindow,
        progress: Option<Progress>,
    ) -> Result<CandidateReplay, PackError> {
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, webhook_id)
            .await?;
        let minted = candidate.mint_rule_ids();
        let ctx = routing_context(&webhook, &self.state.capabilities);
        self.validate_candidate(&candidate, &ctx).await?;
        let saved: Configuration = webhook.configuration.clone();
        let prov = webhook.provenance.clone();
        let outcome = self
            .replay(
                caller,
                &webhook.id,
                &webhook.owner_scope,
                ReplayContexts {
                    saved: &ctx,
                    candidate: &ctx,
                },
                &saved,
                &candidate,
                window,
                progress,
            )
            .await?;
        let mut report = report_of(
            &outcome,
            &candidate,
            &prov,
            self.state.capabilities.trusted_actors,
        );
        report.retention = Some(self.retention(&webhook.id).await?);
        Ok(CandidateReplay {
            report,
            minted_rule_ids: minted,
            rule_diff: switchboard_packs::merge::rule_diff(&saved, &candidate, &[]),
            nothing_saved: true,
        })
    }

    /// What retention still leaves a replay of this webhook to see, as reports say it.
    pub(super) async fn retention(&self, webhook_id: &str) -> Result<Retention, PackError> {
        let window = self
            .state
            .store
            .retention_window(self.state.limits.retention, webhook_id)
            .await?;
        Ok(retention(&window))
    }

    pub(super) async fn validate_candidate(
        &self,
        candidate: &Configuration,
        ctx: &RoutingContext,
    ) -> Result<(), PackError> {
        let resp = self.state.routers.validate(candidate, ctx).await?;
        if resp.valid {
            return Ok(());
        }
        Err(PackError::new(
            Reason::InvalidConfiguration,
            format!(
                "the candidate does not validate ({} problems)",
                resp.problems.len()
            ),
            Details::problems(&resp.problems),
        ))
    }

    /// Replays both configurations over the webhook's window, under the lease, the rate
    /// limit and the time budget. Reads only this webhook's events; writes nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn replay(
        &self,
        caller: &Caller,
        webhook_id: &str,
        scope: &OwnerScope,
        contexts: ReplayContexts<'_>,
        saved: &Configuration,
        candidate: &Configuration,
        window: &ReplayWindow,
        progress: Option<Progress>,
    ) -> Result<Evidence, PackError> {
        let limit = window.limit.unwrap_or(DEFAULT_REPLAY_LIMIT);
        if !(1..=MAX_REPLAY_LIMIT).contains(&limit) {
            return Err(PackError::new(
                Reason::InvalidArgument,
                format!("replay.limit must be between 1 and {MAX_REPLAY_LIMIT}"),
                Details::none().fact("field", "replay.limit").field(
                    "replay.limit",
                    format!("must be between 1 and {MAX_REPLAY_LIMIT}"),
                ),
            ));
        }
        let holder = format!("{}:{}", caller.endpoint_id, uuid_like());
        let lease_ttl = self.budget + Duration::from_secs(30);
        if !self
            .state
            .store
            .try_acquire_replay_lease(webhook_id, &holder, lease_ttl)
            .await?
        {
            return Err(PackError::new(
                Reason::Busy,
                "another replay of this webhook is running; retry when it finishes",
                Details::none().retry_after(Duration::from_secs(2)),
            ));
        }
        // Released however the replay ends, cancellation included.
        let mut lease = LeaseGuard {
            store: self.state.store.clone(),
            webhook_id: webhook_id.to_string(),
            holder,
            armed: true,
        };
        let started = std::time::Instant::now();
        // Everything a replay reads, encodes, sends and decodes runs on the background
        // runtime's low-priority threads, so it never competes with live ingest for a core
        // (issue 43); dropping this future (the caller went away) cancels it there.
        let state = self.state.clone();
        let endpoint_id = caller.endpoint_id.clone();
        let scope = scope.clone();
        let webhook_id = webhook_id.to_string();
        let since = window.since;
        let same_context = contexts.saved == contexts.candidate;
        let (saved_ctx, candidate_ctx) = (contexts.saved.clone(), contexts.candidate.clone());
        let configs = [
            WireConfiguration::from(saved),
            WireConfiguration::from(candidate),
        ];
        let budget = self.budget;
        let work = async move {
            state
                .store
                .try_take_sliding(
                    &endpoint_id,
                    "replay",
                    REPLAYS_PER_MINUTE,
                    Duration::from_secs(60),
                )
                .await?;
            // Bounded in bytes as well as in count: a window of big bodies is cut short, and
            // the plan says so (truncated, so unproven).
            let loaded = state
                .store
                .recent_events_within(&scope, &webhook_id, limit, since, crate::store::LOAD_BYTES)
                .await?;
            let events = loaded.events;
            let deliveries: Vec<StoredDelivery> = events.iter().map(stored_delivery).collect();
            let total = deliveries.len() as u64;
            let chunk = state.limits.replay_chunk.max(1);
            let budget_ms = state.limits.evaluation_budget.as_millis() as u32;
            let deadline = tokio::time::Instant::now() + budget;
            let chunks = switchboard_model::body::chunk_ranges(
                deliveries.iter().map(|d| d.body.len()),
                chunk,
                switchboard_model::body::CHUNK_BYTES,
            );
            // Built and sent a few at a time, not all at once: a replay never holds its whole
            // window encoded in front of the router (issue 43).
            let calls = chunks.into_iter().map(|range| {
                let start = range.start;
                let part = &deliveries[range];
                let request = |ctx: &RoutingContext, configurations: &[WireConfiguration]| {
                    switchboard_proto::router::v1::EvaluateRequest {
                        context: Some(ctx.clone()),
                        configurations: configurations.to_vec(),
                        deliveries: part.to_vec(),
                        budget_ms,
                        work_class: WorkClass::Replay as i32,
                        tenant: scope.to_string(),
                        max_child_faults: state.limits.replay_max_child_faults,
                    }
                };
                // One call evaluates both configurations when they share a context; otherwise
                // each gets its own call and the decisions are paired up again.
                let (first, second) = if same_context {
                    (request(&saved_ctx, &configs), None)
                } else {
                    (
                        request(&saved_ctx, &configs[..1]),
                        Some(request(&candidate_ctx, &configs[1..])),
                    )
                };
                let routers = state.routers.clone();
                // A chunk may wait behind live work until the replay's deadline (a second
                // more, so the deadline below ends the replay first and reports it truncated).
                let until = deadline + Duration::from_secs(1);
                async move {
                    let result = match second {
                        None => routers.evaluate_until(first, until).await,
                        Some(second) => {
                            let (before, after) = futures::join!(
                                routers.evaluate_until(first, until),
                                routers.evaluate_until(second, until)
                            );
                            before.and_then(|before| {
                                after.map(|after| {
                                    before
                                        .into_iter()
                                        .zip(after)
                                        .map(|(mut b, a)| {
                                            b.decisions.extend(a.decisions.into_iter().take(1));
                                            b
                                        })
                                        .collect::<Vec<_>>()
                                })
                            })
                        }
                    };
                    (start, result)
                }
            });
            use futures::StreamExt;
            let mut calls = futures::stream::iter(calls).buffered(REPLAY_CALLS_IN_FLIGHT);
            let mut evidence = Evidence {
                truncated: loaded.capped,
                ..Evidence::default()
            };
            let mut done = 0u64;
            // A stopped call ends the replay: the chunks still queued are dropped (cancelled)
            // below, and the faults that stopped it are in the evidence.
            while evidence.stopped.is_none() {
                match tokio::time::timeout_at(deadline, calls.next()).await {
                    Err(_) => {
                        evidence.truncated = true;
                        break;
                    }
                    Ok(None) => break,
                    Ok(Some((start, result))) => {
                        let results = result?;
                        for (k, r) in results.iter().enumerate() {
                            let e = &events[start + k];
                            let (Some(before), Some(after)) =
                                (r.decisions.first(), r.decisions.get(1))
                            else {
                                continue;
                            };
                            let source = e.source.to_string();
                            evidence.read(
                                Delivered {
                                    event_id: &e.id,
                                    received_at_ms: e.received_at,
                                    source: &source,
                                },
                                before,
                                after,
                            );
                        }
                        done += results.len() as u64;
                        if let Some(p) = &progress {
                            p(done, total);
                        }
                    }
                }
            }
            Ok::<_, PackError>(evidence)
        };
        let result = match switchboard_background::background().run(work).await {
            Ok(result) => result,
            Err(cancelled) => Err(RoutingError::Unavailable(cancelled.to_string()).into()),
        };
        lease.release().await;
        if let Ok(outcome) = &result {
            switchboard_telemetry::metrics().replay(started.elapsed(), outcome.truncated);
        }
        result
    }
}

/// A replay's calls to the routers in flight at once: enough to keep a router's children
/// busy (each call is split over them, and they hold the next part in their pipe), few
/// enough that a 1,000-delivery replay is read, encoded and sent as it is evaluated rather
/// than all at once.
const REPLAY_CALLS_IN_FLIGHT: usize = 3;

/// Holds a webhook's replay lease; releasing it when dropped, even when the caller went away
/// mid-replay and the replay future was dropped.
pub(super) struct LeaseGuard {
    pub(super) store: crate::store::Store,
    pub(super) webhook_id: String,
    pub(super) holder: String,
    pub(super) armed: bool,
}

impl LeaseGuard {
    async fn release(&mut self) {
        self.armed = false;
        let _ = self
            .store
            .release_replay_lease(&self.webhook_id, &self.holder)
            .await;
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, webhook_id, holder) = (
            self.store.clone(),
            self.webhook_id.clone(),
            self.holder.clone(),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = store.release_replay_lease(&webhook_id, &holder).await;
            });
        }
    }
}

/// The routing contexts of a replay's two sides: they differ when the candidate sets the
/// webhook's trusted actors.
#[derive(Clone, Copy)]
pub(super) struct ReplayContexts<'a> {
    pub(super) saved: &'a RoutingContext,
    pub(super) candidate: &'a RoutingContext,
}

/// The window retention leaves a webhook, as replays and plans say it: which deliveries a
/// replay could still see.
pub(super) fn retention(w: &crate::store::RetentionWindow) -> Retention {
    Retention {
        max_age_days: w.retention.max_age.as_secs() / 86_400,
        max_events_per_webhook: w.retention.max_events_per_webhook,
        kept_since: rfc3339(w.kept_since_ms),
        oldest_stored: w.oldest_event_at_ms.map(rfc3339),
    }
}

/// The replay half of a plan (or REQ-8's report) for `candidate`, whose rules `provenance`
/// says which pack installed; `fail_closed` quarantines faults.
pub(super) fn report_of(
    evidence: &Evidence,
    candidate: &Configuration,
    provenance: &[provenance::InstalledPack],
    fail_closed: bool,
) -> Report {
    let ids: Vec<String> = candidate
        .rules
        .iter()
        .filter_map(|r| r.id.clone())
        .collect();
    let from_pack = |id: &str| {
        provenance
            .iter()
            .find(|p| p.rule_ids.iter().any(|r| r == id))
            .map(|p| p.name.clone())
    };
    evidence.report(&ids, &from_pack, fail_closed, &rfc3339)
}
