//! Redrive (issue 21 item 6) as the verbs see it: after fixing rules, an owner re-routes a
//! webhook's quarantined, faulted, pending or dropped events, planned and confirmed like a
//! pack install so the owner sees what would change first. The steps are `crate::redrive`'s;
//! this file checks the request and shapes the answer.

use std::collections::{BTreeMap, HashMap};

use switchboard_model::Label;
use switchboard_model::plan::StaleCause;
use switchboard_proto::control::v1 as pb;

use super::auth::Caller;
use super::status::ApiError;
use crate::error::{Error, PLAN_STALE};
use crate::redrive;
use crate::rule_packs::{Details, PLAN_TTL, PackError, rfc3339};
use crate::state::ControlState;
use crate::store::{Redrivable, RedriveEntry, RedriveFilter, redrive_limit};

/// The call that applies a redrive plan.
pub const CONFIRM_TOOL: &str = "confirm_webhook_redrive";
/// The call that makes one.
pub const PLAN_TOOL: &str = "redrive_webhook_events";
/// Example event ids per transition.
const EXAMPLES: usize = 20;

/// The request's filter as the store's, each field checked and named when wrong.
fn filter(f: Option<&pb::RedriveFilter>) -> Result<RedriveFilter, ApiError> {
    let Some(f) = f else {
        return Ok(RedriveFilter::default().checked()?);
    };
    let states = f
        .decisions
        .iter()
        .map(|d| {
            Redrivable::parse(d).ok_or_else(|| {
                ApiError::invalid(
                    "filter.decisions",
                    format!("{d:?} is not one of quarantine, fault, pending, drop"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The deprecated `since_ms`/`until_ms` are read for one release.
    #[allow(deprecated)]
    let (since_ms, until_ms) = (f.since_ms, f.until_ms);
    Ok(RedriveFilter {
        states,
        since: super::convert::time_bound("filter.since", since_ms, f.since.as_ref())?,
        until: super::convert::time_bound("filter.until", until_ms, f.until.as_ref())?,
        event_ids: f.event_ids.clone(),
        config_version: f.config_version,
    }
    .checked()?)
}

/// Plans a redrive: nothing is changed but the stored plan.
pub async fn plan(
    state: &ControlState,
    caller: &Caller,
    req: &pb::RedriveWebhookEventsRequest,
) -> Result<pb::RedrivePlan, ApiError> {
    let filter = filter(req.filter.as_ref())?;
    let limit = redrive_limit(req.limit)?;
    let store = &state.store;
    let webhook = store.get_webhook(caller.scope(), &req.webhook_id).await?;
    let expires_at =
        store.clock().now_ms() + i64::try_from(PLAN_TTL.as_millis()).unwrap_or(i64::MAX / 2);
    let planned = redrive::plan(&state.redrive_ctx(), &webhook, &filter, limit, expires_at)
        .await
        .map_err(|e| match e {
            redrive::PlanError::Store(e) => ApiError::from(e),
            redrive::PlanError::Routing(e) => ApiError::from(e),
        })?;
    Ok(plan_of(planned.redrive, planned.token, planned.truncated))
}

/// The plan as callers read it.
// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
fn plan_of(r: crate::store::Redrive, token: String, truncated: bool) -> pb::RedrivePlan {
    let mut totals_before: HashMap<String, u64> = HashMap::new();
    let mut totals_after: HashMap<String, u64> = HashMap::new();
    let mut moves: BTreeMap<(&str, &Label<'static>), Vec<String>> = BTreeMap::new();
    for e in &r.entries {
        *totals_before.entry(e.before.as_str().into()).or_default() += 1;
        *totals_after.entry(e.after.to_string()).or_default() += 1;
        if e.changes() {
            moves
                .entry((e.before.as_str(), &e.after))
                .or_default()
                .push(e.event_id.clone());
        }
    }
    let mut moves: Vec<_> = moves.into_iter().collect();
    // What the redrive gives up first (what would now be dropped was kept for someone to
    // look at), then the biggest moves.
    moves.sort_by(|((_, a_to), a), ((_, b_to), b)| {
        Label::redrive_gives_up(b_to)
            .cmp(&Label::redrive_gives_up(a_to))
            .then(b.len().cmp(&a.len()))
    });
    let transitions: Vec<pb::Transition> = moves
        .into_iter()
        .map(|((from, to), ids)| pb::Transition {
            from: from.into(),
            to: to.to_string(),
            count: ids.len() as u64,
            example_event_ids: ids.into_iter().take(EXAMPLES).collect(),
            by_rules: Vec::new(),
        })
        .collect();
    let changes = r.entries.iter().filter(|e| e.changes()).count() as u64;
    let events = r
        .entries
        .iter()
        .map(|e| pb::RedriveEvent {
            event_id: e.event_id.clone(),
            kind: e.kind.clone(),
            received_at_ms: e.received_at,
            received_at: Some(switchboard_proto::convert::time::from_millis(e.received_at)),
            before: e.before.as_str().into(),
            before_decision: e.before_decision.as_ref().map(pb::Decision::from),
            after: e.after.to_string(),
            after_decision: Some(pb::Decision::from(&e.decision)),
            changes: e.changes(),
        })
        .collect();
    let expires_at = rfc3339(r.expires_at);
    pb::RedrivePlan {
        confirm_with: Some(pb::RedriveConfirmWith {
            tool: CONFIRM_TOOL.into(),
            webhook_id: r.webhook_id.clone(),
            note: format!(
                "Nothing was changed. To apply exactly this plan ({changes} events), call {CONFIRM_TOOL} with this \
                 webhook_id and the plan_token, before {expires_at}. It is refused as plan_stale if the webhook's \
                 configuration changes first; an event routed meanwhile is skipped, never routed twice."
            ),
        }),
        webhook_id: r.webhook_id,
        config_version: r.base_config_version,
        config_digest: r.base_config_digest,
        events,
        totals_before,
        totals_after,
        changes,
        transitions,
        truncated,
        expires_at,
        expires_at_time: Some(switchboard_proto::convert::time::from_millis(r.expires_at)),
        plan_token: token,
    }
}

/// Applies exactly the plan of `req.plan_token`.
pub async fn confirm(
    state: &ControlState,
    caller: &Caller,
    req: &pb::ConfirmWebhookRedriveRequest,
) -> Result<pb::ConfirmWebhookRedriveResponse, ApiError> {
    if req.plan_token.is_empty() {
        return Err(ApiError::invalid("plan_token", "must not be empty"));
    }
    let token_hash = crate::secrets::sha256_hex(&req.plan_token);
    let store = state
        .store
        .by_endpoint(&caller.endpoint.id, &caller.endpoint.human_login);
    let (redrive, outcomes) = match redrive::confirm(
        &store,
        (caller.scope(), &req.webhook_id),
        &token_hash,
    )
    .await
    {
        Ok(done) => done,
        Err(Error::FailedPrecondition {
            reason,
            current_version,
            cause,
        }) if reason == PLAN_STALE => {
            let cause = cause.unwrap_or(StaleCause::ConfigurationChanged);
            let mut details = Details::none()
                .fact("next", PLAN_TOOL)
                .stale(cause, "redrive");
            if let Some(v) = current_version {
                details = details.fact("current_version", v);
            }
            return Err(ApiError::RulePack(PackError::new(
                PLAN_STALE,
                format!(
                    "the redrive plan is stale: {}; nothing was changed. Plan again with {PLAN_TOOL}",
                    cause.words()
                ),
                details,
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let by_id: HashMap<&str, &RedriveEntry> = redrive
        .entries
        .iter()
        .map(|e| (e.event_id.as_str(), e))
        .collect();
    let applied = outcomes.iter().filter(|o| o.applied).count() as u64;
    let todos_created = outcomes.iter().filter(|o| o.todo_created).count() as u64;
    Ok(pb::ConfirmWebhookRedriveResponse {
        skipped: outcomes.len() as u64 - applied,
        applied,
        todos_created,
        events: outcomes
            .into_iter()
            .map(|o| {
                let entry = by_id.get(o.event_id.as_str());
                pb::RedriveOutcome {
                    before: entry.map(|e| e.before.as_str().into()).unwrap_or_default(),
                    after: entry.map(|e| e.after.to_string()).unwrap_or_default(),
                    event_id: o.event_id,
                    applied: o.applied,
                    todo_id: o.todo_id,
                    todo_created: o.todo_created,
                }
            })
            .collect(),
        webhook_id: redrive.webhook_id,
        redrive_id: redrive.id,
        config_version: redrive.base_config_version,
        config_digest: redrive.base_config_digest,
    })
}
