//! Ingest (SPEC-0006): `POST /hooks/<webhook_id>` receives a forge's delivery.
//!
//! In order: the body is read (at most 1 MiB, else 413); the webhook is looked up (unknown and
//! malformed ids answer one identical 404); the per-webhook rate limit is taken (429 with
//! `Retry-After`); the signature is checked (a missing, malformed or wrong one makes the
//! delivery unverified, or a 401 with nothing stored when the webhook rejects unverified
//! deliveries); the event is stored, durably, before anything routes it; then a router decides,
//! the decision is recorded with its todo, and the answer is 202 `{event_id, decision, …}`.
//! When no router answers the answer is still 202, with `decision: "unrouted"`, and
//! [`spawn_unrouted_retry`] routes the event later.

pub mod delivery;
pub mod route;
pub mod signature;

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tower::limit::GlobalConcurrencyLimitLayer;
use tracing::Instrument;

pub use route::{RetryOptions, Routed, route_unrouted, spawn_unrouted_retry};

use crate::error::Error;
use crate::secrets::new_id;
use crate::state::ControlState;
use crate::store::NewEvent;

/// A delivery body is at most 1 MiB; the router holds the same line.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Deliveries handled at once; more wait for a slot. Bodies are read inside the slot, so this
/// bounds the memory buffered bodies take (at most this many MiB).
pub const MAX_IN_FLIGHT: usize = 256;

/// The rate-limit budget ingest takes from, per webhook.
pub const RATE_LIMIT_KIND: &str = "ingest";

/// The ingest routes, with their state. Any other path answers the same 404 as an unknown
/// webhook, so the shape of a URL tells a caller nothing.
pub fn router(state: ControlState) -> Router {
    Router::new()
        .route("/hooks/{webhook_id}", post(receive))
        .fallback(not_found)
        // Bodies over 1 MiB are refused while being read (413), before anything is stored.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // One semaphore for every route: at most MAX_IN_FLIGHT bodies buffered at a time.
        .layer(GlobalConcurrencyLimitLayer::new(MAX_IN_FLIGHT))
        .with_state(state)
}

/// A JSON error `{error, message}` with a status.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({"error": code, "message": message}))).into_response()
}

/// The one answer for an unknown, malformed or deleted webhook id, and for any other path.
pub async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not_found", "webhook not found")
}

fn unavailable(e: &Error) -> Response {
    tracing::error!(error = %e.log_text(), "ingest failed inside control");
    let mut resp = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "the delivery could not be stored; retry later",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    resp
}

fn too_many(retry_after: Duration) -> Response {
    let secs = retry_after.as_millis().div_ceil(1000).max(1);
    let mut resp = error(
        StatusCode::TOO_MANY_REQUESTS,
        "resource_exhausted",
        "this webhook's delivery rate limit is reached; retry later",
    );
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn unreadable(rejection: &BytesRejection) -> Response {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "a delivery body is at most 1 MiB",
        )
    } else {
        error(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "the body could not be read",
        )
    }
}

/// A decision label's family, for metrics: `queue` (a rule's queue), `default`, `drop`,
/// `quarantine`, `fault` or `unrouted`.
fn decision_family(label: &str) -> &'static str {
    [
        "queue",
        "default",
        "drop",
        "quarantine",
        "fault",
        "unrouted",
    ]
    .into_iter()
    .find(|family| label.starts_with(family))
    .unwrap_or("other")
}

/// Ids are `wh_` and hex; anything longer than an id or outside `[A-Za-z0-9_-]` is none.
fn could_be_id(id: &str) -> bool {
    id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One delivery, in a span that continues the sender's trace if it sent one.
async fn receive(
    State(state): State<ControlState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let span = tracing::info_span!(
        "ingest",
        otel.name = "POST /hooks/{webhook_id}",
        trace_id = tracing::field::Empty
    );
    switchboard_telemetry::propagation::continue_from_headers(&span, &headers);
    receive_delivery(state, path, headers, body)
        .instrument(span)
        .await
}

async fn receive_delivery(
    state: ControlState,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = std::time::Instant::now();
    let body = match body {
        Ok(b) => b,
        Err(rejection) => return unreadable(&rejection),
    };
    // A path that does not decode, or an id no webhook could have (PostgreSQL refuses a NUL
    // in text), takes the same single lookup as an unknown id: with an id that matches nothing.
    let id = path
        .map(|Path(id)| id)
        .ok()
        .filter(|id| could_be_id(id))
        .unwrap_or_default();
    let webhook = match state.store.webhook_for_ingest(&id).await {
        Ok(w) => w,
        Err(Error::NotFound { .. }) => return not_found().await,
        Err(e) => return unavailable(&e),
    };
    match state
        .store
        .try_take_held(
            &webhook.id,
            RATE_LIMIT_KIND,
            state.limits.ingest_per_webhook_per_minute.max(1),
            Duration::from_secs(60),
        )
        .await
    {
        Ok(()) => {}
        Err(Error::ResourceExhausted { retry_after }) => return too_many(retry_after),
        Err(e) => return unavailable(&e),
    }

    let verified = signature::verify(webhook.source_type, &webhook.secret, &headers, &body);
    if !verified && webhook.reject_unverified {
        tracing::info!(webhook = %webhook.id, "unverified delivery rejected at the door");
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "the delivery's signature is missing or wrong",
        );
    }
    let kind = delivery::kind(webhook.source_type, &headers, &body);
    let delivery_id = match delivery::delivery_id(webhook.source_type, &headers) {
        Some(id) => id,
        None => match new_id("sb-") {
            Ok(id) => id,
            Err(e) => return unavailable(&e),
        },
    };

    // Durable first: from here on the delivery is not lost, whatever happens to routing.
    let event = match state
        .store
        .insert_event(NewEvent {
            webhook_id: webhook.id.clone(),
            delivery_id,
            kind,
            headers: delivery::stored_headers(&headers),
            body: body.to_vec(),
            verified,
        })
        .await
    {
        Ok(e) => e,
        // Deleted between the lookup and the insert.
        Err(Error::NotFound { .. }) => return not_found().await,
        Err(e) => return unavailable(&e),
    };

    let routed = route::route_one(&state, &webhook, &event).await;
    let (decision, todo) = match &routed {
        Routed::Decided { label, todo } => (label.as_str(), todo.as_deref()),
        Routed::Unrouted => ("unrouted", None),
    };
    switchboard_telemetry::metrics().delivery(
        decision_family(decision),
        verified,
        started.elapsed(),
    );
    tracing::info!(
        webhook = %webhook.id,
        event = %event.id,
        kind = %event.kind,
        verified,
        decision,
        "delivery ingested"
    );
    let mut answer = json!({
        "event_id": event.id,
        "delivery_id": event.delivery_id,
        "kind": event.kind,
        "verified": verified,
        "decision": decision,
    });
    if let Some(t) = todo {
        answer["todo_id"] = json!(t.todo.id);
        answer["redelivery"] = json!(!t.inserted);
    }
    (StatusCode::ACCEPTED, Json(answer)).into_response()
}
