//! Redrive (issue 21 item 6; issue 46 item 4) as domain steps, below every surface: planning
//! evaluates the selected events on a router under the webhook's current configuration (one
//! configuration per call, in chunks, as the retry loop routes) and stores each event's
//! decision now and the one it would record; confirming applies exactly those decisions,
//! without a router, while the configuration is still the one planned against. The gRPC and
//! MCP verbs (`api::redrive`), the console and a guard's recovery after a revert all plan and
//! confirm through here.

use std::collections::HashMap;

use switchboard_proto::router::v1::Configuration;

use crate::capabilities::Capabilities;
use crate::error::Error;
use crate::routing::{Routers, RoutingError};
use crate::store::{
    NewRedrive, PlannedTodo, Redrive, RedriveEntry, RedriveFilter, RedriveOutcome, Store, Webhook,
    new_plan_token,
};
use crate::wire::{record_for, routing_context, stored_delivery};

/// What planning a redrive needs of control.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub store: &'a Store,
    pub routers: &'a Routers,
    pub capabilities: &'a Capabilities,
    /// Per-delivery evaluation budget, and deliveries per Evaluate call.
    pub budget_ms: u32,
    pub chunk: usize,
}

/// A stored redrive plan, the token that confirms it (the store keeps its hash), and whether
/// more events matched than the limit took.
pub struct Planned {
    pub redrive: Redrive,
    pub token: String,
    pub truncated: bool,
}

/// Why a plan could not be made.
#[derive(Debug)]
pub enum PlanError {
    Store(Error),
    Routing(RoutingError),
}

impl From<Error> for PlanError {
    fn from(e: Error) -> Self {
        PlanError::Store(e)
    }
}

impl From<RoutingError> for PlanError {
    fn from(e: RoutingError) -> Self {
        PlanError::Routing(e)
    }
}

/// Plans a redrive of `webhook`'s events that `filter` selects (at most `limit`, oldest
/// first), stored until `expires_at` (ms). Nothing is changed but the stored plan.
pub async fn plan(
    ctx: &Ctx<'_>,
    webhook: &Webhook,
    filter: &RedriveFilter,
    limit: u32,
    expires_at: i64,
) -> Result<Planned, PlanError> {
    let (candidates, truncated) = ctx
        .store
        .redrive_candidates(&webhook.owner_scope, &webhook.id, filter, limit)
        .await?;
    let mut entries = Vec::with_capacity(candidates.len());
    if !candidates.is_empty() {
        let results = ctx
            .routers
            .evaluate_chunked(
                &routing_context(webhook, ctx.capabilities),
                &[Configuration::from(&webhook.configuration)],
                candidates
                    .iter()
                    .map(|c| stored_delivery(&c.event))
                    .collect(),
                ctx.chunk,
                ctx.budget_ms.max(1),
                &webhook.owner_scope.to_string(),
            )
            .await?;
        let by_event: HashMap<&str, _> = results
            .iter()
            .filter_map(|r| Some((r.event_id.as_str(), r.decisions.first()?)))
            .collect();
        for c in candidates {
            let decision = by_event.get(c.event.id.as_str()).ok_or_else(|| {
                Error::internal(format!("a router answered no decision for {}", c.event.id))
            })?;
            // Recorded exactly as ingest records it (faults included).
            let record = record_for(decision, webhook, ctx.capabilities);
            entries.push(RedriveEntry {
                event_id: c.event.id.clone(),
                kind: c.event.kind.clone(),
                received_at: c.event.received_at,
                before: c.state,
                before_decision: c.event.decision.clone().filter(|_| c.event.routed),
                before_fault: c.event.fault.clone(),
                seen_redrive: c.seen_redrive,
                after: record.decision.decision.clone(),
                decision: record.decision,
                fault: record.fault,
                todo: record.todo.map(|t| PlannedTodo {
                    queue: t.queue,
                    rule_id: t.rule_id,
                }),
            });
        }
    }
    let (token, token_hash) = new_plan_token()?;
    let redrive = ctx
        .store
        .insert_redrive(NewRedrive {
            webhook_id: webhook.id.clone(),
            owner_scope: webhook.owner_scope.clone(),
            token_hash,
            base_config_version: webhook.config_version,
            base_config_digest: webhook.config_digest.clone(),
            entries,
            expires_at,
        })
        .await?;
    Ok(Planned {
        redrive,
        token,
        truncated,
    })
}

/// Applies exactly the redrive plan `token_hash` names (see `Store::confirm_redrive`: an
/// event routed meanwhile is skipped, never routed twice; `plan_stale` once the webhook's
/// configuration moved, the plan expired or it was used).
pub async fn confirm(
    store: &Store,
    webhook: (&crate::scope::OwnerScope, &str),
    token_hash: &str,
) -> Result<(Redrive, Vec<RedriveOutcome>), Error> {
    let (redrive, outcomes) = store
        .confirm_redrive(webhook.0, webhook.1, token_hash)
        .await?;
    tracing::info!(
        webhook = %redrive.webhook_id,
        redrive = %redrive.id,
        applied = outcomes.iter().filter(|o| o.applied).count(),
        skipped = outcomes.iter().filter(|o| !o.applied).count(),
        "redrive confirmed"
    );
    Ok((redrive, outcomes))
}
