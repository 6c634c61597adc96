//! Ingest (SPEC-0006): `POST /hooks/<webhook_id>` receives a forge's delivery.
//!
//! Forges do not redeliver on their own (GitHub marks a delivery failed after 10 s, Gitea's
//! default timeout is 5 s), so every late answer, 429 or 503 is a delivery the user loses.
//! In order: the body is read at a pace (413 past the limit, 408 when it stalls), and only
//! then a work slot is taken; the webhook is looked up (unknown and malformed ids answer one
//! identical 404); the signature is checked (a webhook that rejects unverified deliveries
//! answers 401 and stores nothing); the rate limit is taken from the verified or the
//! unverified budget, so unsigned junk never spends a signed delivery's share; a signed
//! delivery over its rate is stored and *deferred* (routed later, in order) up to a backlog
//! bound; a router decides, and the event is stored with its decision and todo in one write
//! (`route::route_then_store`) — but a delivery waits for its decision only briefly
//! (`Limits::ingest_decide_before_store`): when routing is later, or no router answers, it is stored
//! unrouted first, durably, and the decision is recorded when it comes. Nothing is answered
//! before it is stored. Past the deadline the answer is 202 `decision: "pending"` and routing
//! finishes in the background; when no router answers it is `unrouted`, and
//! [`spawn_unrouted_retry`] routes the event later.

pub mod body;
pub mod delivery;
pub mod route;
pub mod serve;
pub mod signature;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tokio::sync::Semaphore;
use tracing::Instrument;

pub use body::BodyPace;
pub use route::{RetryOptions, Routed, route_unrouted, spawn_unrouted_retry};
pub use serve::HttpLimits;

use crate::error::Error;
use crate::error::Reason;
use crate::secrets::new_id;
use crate::state::ControlState;
use crate::store::{IngestWebhook, NewEvent, Webhook, is_stale_webhook};

/// Deliveries worked on at once (looked up, verified, stored, routed); more wait for a slot.
/// Taken after the body is read, so a stalled sender never holds one.
pub const MAX_IN_FLIGHT: usize = 256;

/// What ingest answers, and counts, for a delivery no router decided: no router answered,
/// routing was later than the ingest deadline, or the webhook was over its rate.
pub const UNROUTED: &str = "unrouted";
pub const PENDING: &str = "pending";
pub const DEFERRED: &str = "deferred";

/// Every `decision` `switchboard.ingest.deliveries` counts by: a decision's family, or one
/// of ingest's own outcomes.
pub fn delivery_decisions() -> Vec<&'static str> {
    let mut all = switchboard_model::Label::FAMILIES.to_vec();
    all.extend([UNROUTED, PENDING, DEFERRED]);
    all
}

/// The rate-limit budget verified deliveries take from, per webhook.
pub const RATE_LIMIT_KIND: &str = "ingest";
/// The smaller budget of unverified deliveries, per webhook.
pub const UNVERIFIED_RATE_LIMIT_KIND: &str = "ingest_unverified";

/// What the ingest handler shares: control's state, the work slots, the body pace and limit.
#[derive(Clone)]
struct Ingest {
    state: ControlState,
    work: Arc<Semaphore>,
    pace: BodyPace,
    max_body_bytes: usize,
}

/// The ingest routes, with their state. Any other path answers the same 404 as an unknown
/// webhook, so the shape of a URL tells a caller nothing.
pub fn router(state: ControlState) -> Router {
    router_with(state, &HttpLimits::default())
}

/// [`router`] with the body pace and limit of `http`.
pub fn router_with(state: ControlState, http: &HttpLimits) -> Router {
    let ingest = Ingest {
        state,
        work: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        pace: http.body,
        max_body_bytes: http
            .max_body_bytes
            .clamp(1, switchboard_model::body::MAX_BODY_BYTES_CEILING),
    };
    Router::new()
        .route(
            "/hooks/{webhook_id}",
            post(receive).fallback(method_not_allowed),
        )
        .fallback(not_found)
        .with_state(ingest)
}

/// A JSON error `{error, message}` with the reason's HTTP status (docs/errors.md).
fn error(reason: Reason, message: &str) -> Response {
    let status =
        StatusCode::from_u16(reason.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(json!({"error": reason.as_str(), "message": message})),
    )
        .into_response()
}

/// The one answer for an unknown, malformed or deleted webhook id, and for any other path.
pub async fn not_found() -> Response {
    error(Reason::NotFound, "webhook not found")
}

fn unavailable(e: &Error) -> Response {
    tracing::error!(error = %e.log_text(), "ingest failed inside control");
    let mut resp = error(
        Reason::Unavailable,
        "the delivery could not be stored; retry later",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    resp
}

fn too_many(retry_after: Duration, message: &str) -> Response {
    let secs = retry_after.as_millis().div_ceil(1000).max(1);
    let mut resp = error(Reason::RateLimited, message);
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn unreadable(e: &body::BodyError, max_body_bytes: usize) -> Response {
    match e {
        body::BodyError::TooLarge => {
            switchboard_telemetry::metrics().ingest_refusal("body_too_large");
            error(
                Reason::PayloadTooLarge,
                &format!(
                    "a delivery body is at most {} bytes ({}); this control's --max-body-mb",
                    max_body_bytes,
                    size_text(max_body_bytes)
                ),
            )
        }
        body::BodyError::TooSlow => {
            switchboard_telemetry::metrics().ingest_refusal("slow_body");
            error(Reason::DeadlineExceeded, "the body arrived too slowly")
        }
        body::BodyError::Unreadable => error(Reason::InvalidArgument, "the body could not be read"),
    }
}

/// `25 MiB`, `512 KiB` or `100 bytes`: a limit as an operator set it.
fn size_text(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    match bytes {
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= KIB && b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

/// Ids are `wh_` and hex; anything longer than an id or outside `[A-Za-z0-9_-]` is none.
fn could_be_id(id: &str) -> bool {
    id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Where a stored delivery stands when it is answered.
enum Answer {
    /// Routed (or found unroutable) within the deadline.
    Routed(Routed),
    /// Still being routed when the deadline came: it finishes in the background.
    Pending,
    /// Over the webhook's rate: stored, routed later in arrival order by the retry task.
    Deferred,
}

/// One delivery, in a span that continues the sender's trace if it sent one.
async fn receive(
    State(ingest): State<Ingest>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let span = tracing::info_span!(
        "ingest",
        otel.name = "POST /hooks/{webhook_id}",
        trace_id = tracing::field::Empty
    );
    switchboard_telemetry::propagation::continue_from_headers(&span, &parts.headers);
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    async move {
        let body = match body::read(body, ingest.max_body_bytes, declared, ingest.pace).await {
            Ok(b) => b,
            Err(e) => return unreadable(&e, ingest.max_body_bytes),
        };
        // The deadline counts from the body read; the work slot is taken only now.
        let read_at = tokio::time::Instant::now();
        let Ok(_slot) = ingest.work.acquire().await else {
            return unavailable(&Error::internal("the work slots are closed"));
        };
        receive_delivery(&ingest.state, path, parts.headers, body, read_at).await
    }
    .instrument(span)
    .await
}

/// Takes a unit of the webhook's budget: the verified one, or the smaller unverified one.
async fn take_budget(state: &ControlState, webhook: &Webhook, verified: bool) -> crate::Result<()> {
    let (kind, per_minute) = if verified {
        (RATE_LIMIT_KIND, state.limits.ingest_per_webhook_per_minute)
    } else {
        (
            UNVERIFIED_RATE_LIMIT_KIND,
            state.limits.ingest_unverified_per_webhook_per_minute,
        )
    };
    state
        .store
        .try_take_held(
            &webhook.id,
            kind,
            per_minute.max(1),
            Duration::from_secs(60),
        )
        .await
}

/// How many times a delivery is taken with a webhook row that a write found stale: the first
/// try uses this process's copy, the next ones a row read anew, and the last stores the
/// delivery under whatever the row is then, so a webhook changed without pause cannot keep a
/// delivery from being stored.
const TAKES: usize = 3;

async fn receive_delivery(
    state: &ControlState,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: axum::body::Bytes,
    read_at: tokio::time::Instant,
) -> Response {
    let started = std::time::Instant::now();
    // A path that does not decode, or an id no webhook could have (PostgreSQL refuses a NUL
    // in text), takes the same single lookup as an unknown id: with an id that matches nothing.
    let id = path
        .map(|Path(id)| id)
        .ok()
        .filter(|id| could_be_id(id))
        .unwrap_or_default();
    let mut budget = None;
    for take in 1..=TAKES {
        // This process's copy of the row first (`store::webhook_cache`); anew after a stale one.
        let webhook = match state.store.webhook_for_ingest_cached(&id, take > 1).await {
            Ok(w) => w,
            Err(Error::NotFound { .. }) => return not_found().await,
            Err(e) => return unavailable(&e),
        };
        let delivery = Delivery {
            headers: &headers,
            body: &body,
            read_at,
            started,
            copy: take == 1,
            last: take == TAKES,
        };
        match take_delivery(state, &webhook, delivery, &mut budget).await {
            Ok(answer) => return answer,
            Err(Stale) => {
                tracing::debug!(webhook = %id, take, "taking the delivery again with its webhook row read anew");
            }
        }
    }
    unavailable(&Error::internal("the webhook kept changing"))
}

/// One delivery as it was received, for [`take_delivery`].
struct Delivery<'a> {
    headers: &'a HeaderMap,
    body: &'a axum::body::Bytes,
    read_at: tokio::time::Instant,
    started: std::time::Instant,
    /// The row may be this process's copy: a refusal it would make is checked on a row read
    /// anew (a copy from before a secret rotation must not refuse the new secret's deliveries).
    copy: bool,
    /// The last take: stored under whatever the webhook row is when it is stored.
    last: bool,
}

/// The write found the webhook row changed since it was read: nothing was stored.
struct Stale;

/// Takes a delivery under one read of its webhook: verifies it, takes its budget (once:
/// `budget` keeps whether it was deferred), stores and routes it.
async fn take_delivery(
    state: &ControlState,
    row: &std::sync::Arc<IngestWebhook>,
    delivery: Delivery<'_>,
    budget: &mut Option<bool>,
) -> Result<Response, Stale> {
    let Delivery {
        headers,
        body,
        read_at,
        started,
        copy,
        last,
    } = delivery;
    let webhook = &row.webhook;
    // The payload's JSON text, decoded once (a form delivery's `payload` field, else the body
    // itself, borrowed): the signature and the kind read the same bytes.
    let payload = switchboard_model::payload_json(delivery::content_type(headers).as_deref(), body);
    // The signature first: what it proves decides whose budget the delivery spends.
    let verified = signature::verify_payload(
        webhook.source_type,
        &webhook.secret,
        headers,
        body,
        &payload,
    );
    if !verified && webhook.reject_unverified {
        if copy {
            return Err(Stale);
        }
        tracing::info!(webhook = %webhook.id, "unverified delivery rejected at the door");
        return Ok(error(
            Reason::Unauthenticated,
            "the delivery's signature is missing or wrong",
        ));
    }
    let deferred = match *budget {
        Some(deferred) => deferred,
        None => match take_budget(state, webhook, verified).await {
            Ok(()) => false,
            // A signed delivery over its rate is kept and routed later, up to the backlog bound.
            Err(Error::ResourceExhausted { retry_after }) if verified => {
                match state.store.unrouted_count(&webhook.id).await {
                    Ok(n) if n < u64::from(state.limits.ingest_backlog_per_webhook) => true,
                    Ok(_) => {
                        switchboard_telemetry::metrics().ingest_refusal("backlog_full");
                        return Ok(too_many(
                            retry_after,
                            "this webhook's delivery rate is reached and its backlog is full; retry later",
                        ));
                    }
                    Err(e) => return Ok(unavailable(&e)),
                }
            }
            Err(Error::ResourceExhausted { retry_after }) => {
                switchboard_telemetry::metrics().ingest_refusal("rate_limited");
                return Ok(too_many(
                    retry_after,
                    "this webhook's rate limit for unverified deliveries is reached; retry later",
                ));
            }
            Err(e) => return Ok(unavailable(&e)),
        },
    };
    *budget = Some(deferred);

    let kind = delivery::kind_of_payload(webhook.source_type, headers, &payload);
    drop(payload);
    let delivery_id = match delivery::delivery_id(webhook.source_type, headers) {
        Some(id) => id,
        None => match new_id("sb-") {
            Ok(id) => id,
            Err(e) => return Ok(unavailable(&e)),
        },
    };

    let mut draft = match state.store.draft_event(NewEvent {
        webhook_id: webhook.id.clone(),
        delivery_id,
        kind,
        headers: delivery::stored_headers(headers),
        body: body.clone(),
        verified,
    }) {
        Ok(draft) => draft,
        Err(e) => return Ok(unavailable(&e)),
    };
    draft.webhook_revision = (!last).then_some(row.revision);
    let deadline = read_at + state.limits.ingest_deadline;
    let (event, answer) = if deferred {
        match state.store.store_event(draft, None).await {
            Ok((event, _)) => (event, Answer::Deferred),
            Err(e) => return stored_failed(state, &webhook.id, e).await,
        }
    } else {
        // Routed, then stored with its decision; or stored unrouted first when routing is late.
        let decide_by = read_at + decide_before_store(&state.limits);
        let (stored, durable) = tokio::sync::oneshot::channel();
        let routing = tokio::spawn(
            route::route_then_store(state.clone(), row.clone(), draft, decide_by, stored)
                .in_current_span(),
        );
        let event = match durable.await {
            Ok(Ok(event)) => event,
            Ok(Err(e)) => return stored_failed(state, &webhook.id, e).await,
            Err(_) => {
                return Ok(unavailable(&Error::internal(
                    "routing ended before storing",
                )));
            }
        };
        // Past the deadline the task goes on: a late router never strands the stored event,
        // and whatever it cannot finish the retry task routes.
        let answer = match tokio::time::timeout_at(deadline, routing).await {
            Ok(Ok(routed)) => Answer::Routed(routed),
            Ok(Err(_)) => Answer::Routed(Routed::Unrouted),
            Err(_) => Answer::Pending,
        };
        (event, answer)
    };

    let (decision, family, todo) = match &answer {
        Answer::Routed(Routed::Decided { label, todo }) => {
            (label.to_string(), label.family(), todo.as_deref())
        }
        Answer::Routed(Routed::Unrouted) => (UNROUTED.into(), UNROUTED, None),
        Answer::Pending => (PENDING.into(), PENDING, None),
        Answer::Deferred => (DEFERRED.into(), DEFERRED, None),
    };
    switchboard_telemetry::metrics().delivery(family, verified, started.elapsed());
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
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

/// How long a delivery waits for its decision before it is stored unrouted: the operator's
/// `ingest_decide_before_store`, at most a quarter of the ingest deadline. Until it is stored
/// a delivery exists only in this process, so the wait is short; routing usually takes a few
/// milliseconds. Zero: every delivery is stored before it is routed.
fn decide_before_store(limits: &crate::state::Limits) -> Duration {
    limits
        .ingest_decide_before_store
        .min(limits.ingest_deadline / 4)
}

/// The answer when a delivery could not be stored; `Stale` when its webhook row moved on.
async fn stored_failed(
    state: &ControlState,
    webhook_id: &str,
    e: Error,
) -> Result<Response, Stale> {
    match e {
        e if is_stale_webhook(&e) => Err(Stale),
        // Deleted between the lookup and the insert (or since this process's copy was read).
        Error::NotFound { .. } => {
            state.store.forget_webhook_copy(webhook_id);
            Ok(not_found().await)
        }
        e => Ok(unavailable(&e)),
    }
}

/// Any method but POST on `/hooks/<id>`, Gitea's and Forgejo's GET deliveries
/// (`?payload=<JSON>`) among them: one `405` that tells the operator what to change. It reads
/// nothing and looks nothing up, so it is the same for every id, known or not.
async fn method_not_allowed() -> Response {
    let mut resp = error(
        Reason::MethodNotAllowed,
        "deliveries are POSTed; set the forge's HTTP method to POST",
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    resp
}
