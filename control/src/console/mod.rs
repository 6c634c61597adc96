//! The console on control's HTTP listener (issue 20): people sign in with a one-time link
//! (or through an auth proxy), read the plans agents put before them, and accept or reject
//! them. Pages are rendered by `switchboard-console`; this module only authenticates, loads,
//! authorizes and calls the same rule-pack code a confirm runs.
//!
//! Security: the session cookie is HttpOnly, SameSite=Strict and Path=/console (Secure when
//! the console is served over TLS); every form carries a CSRF token compared in constant
//! time; every answer carries a strict Content-Security-Policy; another scope's plan,
//! trial or webhook answers the same not-found page as an unknown id.

mod answer;
mod pages;
mod person;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::rule_packs::RulePacks;
use crate::state::ControlState;

pub use person::AuthProxy;
use person::{Peer, Person, SESSION_COOKIE};

/// How the console signs people in.
#[derive(Clone, Debug)]
pub struct ConsoleSettings {
    /// Trust a header set by an auth proxy (oauth2-proxy and the like), from these peers only.
    pub auth_proxy: Option<AuthProxy>,
    /// Mark cookies `Secure`: the console is reached over TLS (directly or behind a proxy).
    pub secure_cookies: bool,
    /// How long a session stays open.
    pub session_ttl: Duration,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            auth_proxy: None,
            secure_cookies: false,
            session_ttl: Duration::from_secs(12 * 3600),
        }
    }
}

/// How long an operator's sign-in link works.
pub const SIGN_IN_LINK_TTL: Duration = Duration::from_secs(15 * 60);

/// The link that redeems sign-in `token`: on `base` (`https://host`) when given, else a path.
pub fn sign_in_url(base: Option<&str>, token: &str) -> String {
    format!(
        "{}/console/sign-in?token={token}",
        base.unwrap_or("").trim_end_matches('/')
    )
}

/// The console's own state.
#[derive(Clone)]
pub(crate) struct Console {
    state: ControlState,
    packs: RulePacks,
    settings: Arc<ConsoleSettings>,
}

/// The console's routes, to merge into control's HTTP app.
pub fn router(state: ControlState, settings: ConsoleSettings) -> Router {
    let packs = RulePacks::new(state.clone(), state.catalog.clone());
    let console = Console {
        state,
        packs,
        settings: Arc::new(settings),
    };
    Router::new()
        .route("/console", get(inbox))
        .route("/console/", get(inbox))
        .route("/console/style.css", get(stylesheet))
        .route("/console/sign-in", get(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route("/console/plans/{plan_id}", get(plan))
        .route("/console/plans/{plan_id}/accept", post(accept))
        .route("/console/plans/{plan_id}/reject", post(reject))
        .route("/console/plans/{plan_id}/recover", post(recover))
        .route("/console/plans/{plan_id}/dismiss", post(dismiss))
        .route("/console/trials/{trial_id}", get(trial))
        .route("/console/webhooks/{webhook_id}", get(webhook))
        .route("/console/webhooks/{webhook_id}/events", get(events))
        .route(
            "/console/webhooks/{webhook_id}/confirm-policy",
            post(confirm_policy),
        )
        .route("/console/webhooks/{webhook_id}/name", post(rename))
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(console)
}

/// Every console answer: a strict CSP (no script at all, styles and forms from this origin
/// only, never framed), no sniffing, no referrer, never cached.
async fn secure_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        switchboard_console::STYLESHEET,
    )
}

#[derive(Deserialize)]
struct SignInQuery {
    #[serde(default)]
    token: String,
}

/// A sign-in link: used once, it opens a session and sets its cookie, and leads on to the page
/// the person asked for before signing in (the `sb_console_next` cookie), if any.
async fn sign_in(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<SignInQuery>,
) -> Response {
    let next = person::safe_next(person::cookie(&headers, person::NEXT_COOKIE).unwrap_or(""));
    let ttl = i64::try_from(c.settings.session_ttl.as_millis()).unwrap_or(i64::MAX);
    match c.state.store.redeem_sign_in_link(q.token.trim(), ttl).await {
        Ok((login, session)) => {
            let cookie = format!(
                "{SESSION_COOKIE}={session}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
                c.settings.session_ttl.as_secs(),
                if c.settings.secure_cookies {
                    "; Secure"
                } else {
                    ""
                }
            );
            let mut response = answer::html(
                StatusCode::OK,
                switchboard_console::sign_in_done(&login, next),
            );
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, v);
            }
            let used = format!(
                "{}=; Path=/console; HttpOnly; SameSite=Lax; Max-Age=0",
                person::NEXT_COOKIE
            );
            if let Ok(v) = HeaderValue::from_str(&used) {
                response.headers_mut().append(header::SET_COOKIE, v);
            }
            response
        }
        Err(crate::Error::NotFound { .. }) => answer::message(
            StatusCode::NOT_FOUND,
            None,
            "This sign-in link does not work",
            "It was used already, it expired, or it never existed. Ask an operator for a new one.",
        ),
        Err(e) => answer::internal(&e),
    }
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn sign_out(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Form(form): Form<CsrfForm>,
) -> Response {
    let person = match Person::checked(&c, &headers, &peer, &form.csrf).await {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    if let Some(token) = person.session_token()
        && let Err(e) = c.state.store.end_console_session(token).await
    {
        return answer::internal(&e);
    }
    let mut response = answer::message(
        StatusCode::OK,
        None,
        "Signed out",
        "Your session is closed. Use a new sign-in link to come back.",
    );
    let cookie = format!("{SESSION_COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

async fn inbox(State(c): State<Console>, headers: HeaderMap, peer: Peer) -> Response {
    match Person::of(&c, &headers, &peer, "/console").await {
        Ok(person) => pages::inbox(&c, &person, None).await,
        Err(refusal) => refusal,
    }
}

async fn plan(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(plan_id): Path<String>,
) -> Response {
    match Person::of(&c, &headers, &peer, &format!("/console/plans/{plan_id}")).await {
        Ok(person) => pages::plan(&c, &person, &plan_id, None, StatusCode::OK).await,
        Err(refusal) => refusal,
    }
}

async fn accept(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(plan_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    let person = match Person::checked(&c, &headers, &peer, &form.csrf).await {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    pages::decide(&c, &person, &plan_id, pages::Verdict::Accept).await
}

async fn recover(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(plan_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    let person = match Person::checked(&c, &headers, &peer, &form.csrf).await {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    pages::recover(&c, &person, &plan_id).await
}

/// Dismisses a stale plan from the inbox.
async fn dismiss(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(plan_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    let person = match Person::checked(&c, &headers, &peer, &form.csrf).await {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    pages::dismiss(&c, &person, &plan_id).await
}

#[derive(Deserialize)]
struct RejectForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

async fn reject(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(plan_id): Path<String>,
    Form(form): Form<RejectForm>,
) -> Response {
    let person = match Person::checked(&c, &headers, &peer, &form.csrf).await {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    let reason: String = form.reason.trim().chars().take(500).collect();
    pages::decide(&c, &person, &plan_id, pages::Verdict::Reject(reason)).await
}

/// A trial's page: a viewer of its scope reads it.
async fn trial(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(trial_id): Path<String>,
) -> Response {
    match Person::of(&c, &headers, &peer, &format!("/console/trials/{trial_id}")).await {
        Ok(person) => pages::trial(&c, &person, &trial_id).await,
        Err(refusal) => refusal,
    }
}

async fn webhook(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(webhook_id): Path<String>,
) -> Response {
    match Person::of(
        &c,
        &headers,
        &peer,
        &format!("/console/webhooks/{webhook_id}"),
    )
    .await
    {
        Ok(person) => pages::webhook(&c, &person, &webhook_id).await,
        Err(refusal) => refusal,
    }
}

/// The events page's filters, as its form sends them.
#[derive(Deserialize, Default)]
pub(super) struct EventsQuery {
    #[serde(default)]
    pub decision: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
    #[serde(default)]
    pub cursor: String,
}

async fn events(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(webhook_id): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Response {
    let asked = format!("/console/webhooks/{webhook_id}/events");
    match Person::of(&c, &headers, &peer, &asked).await {
        Ok(person) => pages::events(&c, &person, &webhook_id, &q).await,
        Err(refusal) => refusal,
    }
}

#[derive(Deserialize)]
struct PolicyForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    policy: String,
}

#[derive(Deserialize)]
struct NameForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
}

/// An editor names a webhook, or clears its name.
async fn rename(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(webhook_id): Path<String>,
    Form(form): Form<NameForm>,
) -> Response {
    let person = match Person::checked(&c, &headers, &peer, &form.csrf).await {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    pages::rename_webhook(&c, &person, &webhook_id, &form.name).await
}

/// An editor sets who confirms plans on a webhook. Only a person can: no API verb sets it,
/// so an agent cannot lift the oversight placed on it.
async fn confirm_policy(
    State(c): State<Console>,
    headers: HeaderMap,
    peer: Peer,
    Path(webhook_id): Path<String>,
    Form(form): Form<PolicyForm>,
) -> Response {
    let person = match Person::checked(&c, &headers, &peer, &form.csrf).await {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    pages::set_confirm_policy(&c, &person, &webhook_id, &form.policy).await
}
