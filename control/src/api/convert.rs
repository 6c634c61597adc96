//! Store records to wire messages and back: configurations, decisions, provenance and
//! history as typed messages. No secret ever leaves through here.

use switchboard_model::WebhookName;
use switchboard_model::provenance::InstalledPack;
use switchboard_proto::control::v1 as pb;
use switchboard_proto::convert::time;
use switchboard_proto::router::v1::{RoutingContext, StoredDelivery};

use super::status::ApiError;
use crate::state::ControlState;
use crate::store::{Event, EventSummary, HistoryRecord, Page, SourceType, Todo, Webhook};

/// The caller's source type; unspecified and unknown values name the field.
pub fn source_type_from(value: i32) -> Result<SourceType, ApiError> {
    switchboard_proto::convert::source::source_type(value).ok_or_else(|| {
        ApiError::invalid(
            "source_type",
            "one of forgejo, gitea, github, cairn, generic",
        )
    })
}

/// A stored source name (`github`, …) as the wire enum; unknown stays unspecified.
fn source_name(name: &str) -> i32 {
    name.parse::<SourceType>()
        .map_or(pb::SourceType::Unspecified, pb::SourceType::from) as i32
}

/// A webhook's installed packs as typed messages.
pub fn installed_packs(provenance: &[InstalledPack]) -> Vec<pb::InstalledPack> {
    provenance.iter().map(pb::InstalledPack::from).collect()
}

/// A webhook as the API shows it: never its secret.
// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
pub fn webhook(w: &Webhook) -> pb::Webhook {
    pb::Webhook {
        installed_packs: installed_packs(&w.provenance),
        id: w.id.clone(),
        owner_scope: w.owner_scope.to_string(),
        source_type: pb::SourceType::from(w.source_type) as i32,
        grant: w.grant.clone(),
        default_queue: w.default_queue().unwrap_or_default().to_string(),
        reject_unverified: w.reject_unverified,
        config_version: w.config_version,
        config_digest: w.config_digest.clone(),
        ingest_path: format!("/hooks/{}", w.id),
        trusted_actors: w.trusted_actors.as_ref().map(pb::TrustedActors::from),
        created_at_ms: w.created_at,
        created_at: Some(time::from_millis(w.created_at)),
        confirm_policy: w.confirm_policy.to_string(),
        guard_on_breach: w
            .guard_on_breach
            .map(|o| o.as_str().to_string())
            .unwrap_or_default(),
        approval_rule: Some(pb::ApprovalRule::from(&w.approval_rule())),
        approval_rule_default: w.approval_rule.is_none(),
        name: w.name.as_ref().map(ToString::to_string).unwrap_or_default(),
    }
}

/// A display name as a caller sent it: blank is none; anything else is checked
/// (`invalid_argument` on `name`).
pub fn webhook_name(text: &str) -> Result<Option<WebhookName>, ApiError> {
    WebhookName::parse(text).map_err(|e| ApiError::invalid("name", e.to_string()))
}

/// What the router needs to know about a webhook to validate or evaluate for it: the one
/// definition ingest uses too.
pub fn routing_context(state: &ControlState, w: &Webhook) -> RoutingContext {
    crate::wire::routing_context(w, &state.capabilities)
}

/// An event as listings show it: no headers, no body.
// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
pub fn event_summary(e: &EventSummary) -> pb::EventSummary {
    pb::EventSummary {
        id: e.id.clone(),
        webhook_id: e.webhook_id.clone(),
        delivery_id: e.delivery_id.clone(),
        source: source_name(&e.source),
        kind: e.kind.clone(),
        verified: e.verified,
        received_at_ms: e.received_at,
        received_at: Some(time::from_millis(e.received_at)),
        routed: e.routed,
        decision: e.decision.as_ref().map(pb::Decision::from),
        fault: e.fault.as_ref().map(pb::Fault::from),
    }
}

/// One stored event with its headers and body.
// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
pub fn event(e: &Event) -> pb::GetWebhookEventResponse {
    pb::GetWebhookEventResponse {
        event: Some(pb::EventSummary {
            id: e.id.clone(),
            webhook_id: e.webhook_id.clone(),
            delivery_id: e.delivery_id.clone(),
            source: source_name(&e.source),
            kind: e.kind.clone(),
            verified: e.verified,
            received_at_ms: e.received_at,
            received_at: Some(time::from_millis(e.received_at)),
            routed: e.routed,
            decision: e.decision.as_ref().map(pb::Decision::from),
            fault: e.fault.as_ref().map(pb::Fault::from),
        }),
        headers: e
            .headers
            .iter()
            .map(|(name, value)| pb::Header {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        body: e.body.clone(),
    }
}

/// A stored event as the router rebuilds its envelope from: the same parts ingest used.
pub fn stored_delivery(e: &Event) -> StoredDelivery {
    crate::wire::stored_delivery(e)
}

/// One saved version as the API shows it.
// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
pub fn history(h: &HistoryRecord) -> pb::HistoryRecord {
    pb::HistoryRecord {
        change: Some(pb::ConfigurationChange::from(&h.change)),
        provenance: h.provenance.as_ref().map(pb::ChangeProvenance::from),
        configuration: Some(pb::Configuration::from(&h.configuration)),
        version: h.version,
        actor_endpoint_id: h.actor.endpoint_id.clone().unwrap_or_default(),
        actor_human: h.actor.human_login.clone().unwrap_or_default(),
        digest_before: h.digest_before.clone().unwrap_or_default(),
        digest_after: h.digest_after.clone(),
        saved_at_ms: h.saved_at,
        saved_at: Some(time::from_millis(h.saved_at)),
    }
}

/// A todo as the API shows it at `now_ms`: a lapsed claim is back in its queue (`Open`).
// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
pub fn todo(t: &Todo, now_ms: i64) -> pb::Todo {
    let state = if t.completed_at.is_some() {
        pb::TodoState::Completed
    } else if t.claim_live(now_ms) {
        pb::TodoState::Claimed
    } else {
        pb::TodoState::Open
    };
    pb::Todo {
        id: t.id.clone(),
        webhook_id: t.webhook_id.clone(),
        event_id: t.event_id.clone(),
        delivery_id: t.delivery_id.clone(),
        queue: t.queue.clone(),
        rule_id: t.rule_id.clone().unwrap_or_default(),
        state: state as i32,
        created_at_ms: t.created_at,
        created_at: Some(time::from_millis(t.created_at)),
        claimed_by: t.claimed_by.clone().unwrap_or_default(),
        claimed_at_ms: t.claimed_at.unwrap_or_default(),
        claimed_at: t.claimed_at.map(time::from_millis),
        completed_by: t.completed_by.clone().unwrap_or_default(),
        completed_at_ms: t.completed_at.unwrap_or_default(),
        completed_at: t.completed_at.map(time::from_millis),
        claim_expires_at: t
            .claim_expires_at
            .map(switchboard_model::rfc3339_millis)
            .unwrap_or_default(),
        claim_expires_at_time: t.claim_expires_at.map(time::from_millis),
    }
}

/// A request's time bound, given as the deprecated milliseconds (`None`: not given) and/or as
/// the Timestamp `field` names (`since`, `filter.until`, …): the millisecond, `None` for no
/// bound. A Timestamp out of range, or the two naming different milliseconds, is
/// `invalid_argument` on `field`.
pub fn time_bound(
    field: &'static str,
    deprecated_ms: Option<i64>,
    timestamp: Option<&time::Timestamp>,
) -> Result<Option<i64>, ApiError> {
    time::request_bound(deprecated_ms, timestamp)
        .map_err(|e| ApiError::invalid(field, e.to_string()))
}

/// A change-log listing's page size: 1–1000, 0 meaning 100. Refused above, as every other
/// listing's limit is, rather than quietly cut.
pub fn change_limit(limit: u32) -> Result<u32, ApiError> {
    match limit {
        0 => Ok(100),
        1..=1000 => Ok(limit),
        _ => Err(ApiError::invalid("limit", "must be between 1 and 1000")),
    }
}

/// A change-log listing's bounds, `since`/`until` given as the deprecated milliseconds (0: not
/// given) and/or as Timestamps: the milliseconds the store reads (0: no bound).
pub fn change_bounds(
    (since_ms, until_ms): (i64, i64),
    (since, until): (Option<&time::Timestamp>, Option<&time::Timestamp>),
) -> Result<(i64, i64), ApiError> {
    let given = |ms: i64| (ms != 0).then_some(ms);
    Ok((
        time_bound("since", given(since_ms), since)?.unwrap_or(0),
        time_bound("until", given(until_ms), until)?.unwrap_or(0),
    ))
}

/// A page request from the wire: an empty cursor is the first page, a zero limit the default.
pub fn page(cursor: &str, limit: u32) -> Page {
    Page {
        cursor: (!cursor.is_empty()).then(|| cursor.to_string()),
        limit: (limit != 0).then_some(limit),
    }
}

/// A page request for a listing that answered everything before it paged: `None`, the whole
/// list (deprecated, for one release), when the caller names neither a cursor nor a limit.
pub fn page_or_all(cursor: &str, limit: u32) -> Option<Page> {
    (!cursor.is_empty() || limit != 0).then(|| page(cursor, limit))
}

/// A retention window as the API carries it.
// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
pub fn retention_window(w: &crate::store::RetentionWindow) -> pb::RetentionWindow {
    pb::RetentionWindow {
        max_age_ms: i64::try_from(w.retention.max_age.as_millis()).unwrap_or(i64::MAX),
        max_events_per_webhook: w.retention.max_events_per_webhook,
        kept_since_ms: w.kept_since_ms,
        kept_since: Some(time::from_millis(w.kept_since_ms)),
        oldest_event_at_ms: w.oldest_event_at_ms.unwrap_or(0),
        oldest_event_at: w.oldest_event_at_ms.map(time::from_millis),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_types_map_both_ways() {
        for t in SourceType::ALL {
            assert_eq!(source_type_from(pb::SourceType::from(t) as i32).unwrap(), t);
            assert_eq!(source_name(t.as_str()), pb::SourceType::from(t) as i32);
        }
        assert!(source_type_from(0).is_err());
        assert!(source_type_from(99).is_err());
        assert_eq!(source_name("gitlab"), 0);
    }
}
