//! The gate in front of `/mcp`, in the order a request meets it:
//!
//! 1. `Host` and `Origin` against the allowlists (DNS-rebinding protection): 403, before any
//!    control call is spent on the request;
//! 2. `Authorization: Bearer <endpoint credential>` present: else 401;
//! 3. the body read within the size limit (413) and parsed as one JSON-RPC message (400 with a
//!    JSON-RPC parse or invalid-request error), so malformed input never reaches a handler;
//! 4. control's `Identity.WhoAmI` with that bearer: unknown or revoked answers 401 with
//!    `WWW-Authenticate: Bearer error="invalid_token"`; the endpoint's identity goes into the
//!    request's extensions, where tools read it (identity is per request, never per session).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
use serde_json::{Value, json};
use switchboard_control_client::{Bearer, ControlClient};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::reason::Reason;
use tonic::Code;

use crate::errors;

/// Who is calling, as control answered `WhoAmI` for this request's bearer.
#[derive(Clone, Debug)]
pub struct Caller {
    pub bearer: Bearer,
    pub endpoint_id: String,
    pub endpoint_name: String,
    pub human: String,
    pub owner_scope: String,
    pub role: String,
    /// The endpoint's allowlist: the tools it is offered.
    pub verbs: Vec<String>,
    /// The verbs its human's role permits too.
    pub usable_verbs: Vec<String>,
    /// Whether this request's `WhoAmI` took no unit of the budget: a tool call that then
    /// never reaches control must pay it (see `Gateway::call`).
    pub uncharged: bool,
}

impl Caller {
    pub fn from_who_am_i(bearer: Bearer, w: pb::WhoAmIResponse, uncharged: bool) -> Caller {
        Caller {
            uncharged,
            bearer,
            endpoint_id: w.endpoint_id,
            endpoint_name: w.endpoint_name,
            human: w.human,
            owner_scope: w.owner_scope,
            role: w.role,
            verbs: w.verbs,
            usable_verbs: w.usable_verbs,
        }
    }

    /// Whether `verb` is on the endpoint's allowlist.
    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

/// What the gate learned about the caller, put in the request's extensions.
#[derive(Clone, Debug)]
pub enum CallerState {
    Known(Arc<Caller>),
    /// The credential is valid but its request budget is spent: tools answer `rate_limited`.
    RateLimited {
        retry_after_ms: u64,
    },
}

/// The gate's configuration and its way to control.
pub struct Gate {
    pub control: ControlClient,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub max_request_bytes: usize,
}

/// The middleware: see the module documentation for the order of checks.
pub async fn gate(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    if let Err(response) = gate.check_host_and_origin(request.headers()) {
        return *response;
    }
    let Some(bearer) = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(Bearer::from_header)
    else {
        return unauthorized(
            "send the endpoint credential as `Authorization: Bearer <credential>`",
        );
    };
    let (parts, body) = request.into_parts();
    let mut calls_a_tool = false;
    let body = if parts.method == Method::POST {
        let bytes = match axum::body::to_bytes(body, gate.max_request_bytes).await {
            Ok(bytes) => bytes,
            Err(_) => {
                return jsonrpc_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::INVALID_REQUEST,
                    format!(
                        "the request body is larger than {} bytes; send smaller arguments",
                        gate.max_request_bytes
                    ),
                );
            }
        };
        match check_jsonrpc(&bytes) {
            Ok(calls) => calls_a_tool = calls,
            Err(response) => return *response,
        }
        Body::from(bytes)
    } else {
        body
    };
    // One MCP request, one unit of the endpoint's budget: a tool call pays with its verb.
    let charged = !calls_a_tool;
    let state = match gate.control.who_am_i(&bearer, charged).await {
        Ok(who) => CallerState::Known(Arc::new(Caller::from_who_am_i(bearer, who, !charged))),
        Err(status) if status.code() == Code::Unauthenticated => {
            return unauthorized("the credential is unknown or revoked");
        }
        Err(status) if status.code() == Code::ResourceExhausted => CallerState::RateLimited {
            retry_after_ms: errors::retry_after_ms(&status),
        },
        Err(status) => {
            tracing::warn!(code = ?status.code(), message = status.message(), "whoami failed");
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                [(CONTENT_TYPE, "application/json")],
                json!({"error": {
                    "code": Reason::ControlUnavailable.as_str(),
                    "message": "the gateway could not check the credential with control; nothing was done, retry shortly",
                }})
                .to_string(),
            )
                .into_response();
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return response;
        }
    };
    let mut request = Request::from_parts(parts, body);
    request.extensions_mut().insert(state);
    next.run(request).await
}

/// 401 with the challenge RFC 6750 asks for.
fn unauthorized(message: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [
            (WWW_AUTHENTICATE, "Bearer error=\"invalid_token\""),
            (CONTENT_TYPE, "application/json"),
        ],
        json!({"error": {"code": Reason::Unauthenticated.as_str(), "message": message}})
            .to_string(),
    )
        .into_response()
}

fn forbidden(message: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        [(CONTENT_TYPE, "application/json")],
        json!({"error": {"code": Reason::PermissionDenied.as_str(), "message": message}})
            .to_string(),
    )
        .into_response()
}

/// A JSON-RPC error without an id: the request could not be read far enough to have one.
fn jsonrpc_error(status: StatusCode, code: ErrorCode, message: String) -> Response {
    (
        status,
        [(CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": code.0, "message": message}})
            .to_string(),
    )
        .into_response()
}

fn boxed_jsonrpc_error(status: StatusCode, code: ErrorCode, message: String) -> Box<Response> {
    Box::new(jsonrpc_error(status, code, message))
}

/// The body must be one JSON-RPC message: a parse error is -32700, anything else that is not a
/// message MCP defines (a batch, a missing `jsonrpc`, bad params shape) is -32600.
/// Whether the body is one MCP JSON-RPC message, and if so whether it is a `tools/call`.
fn check_jsonrpc(body: &Bytes) -> Result<bool, Box<Response>> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        boxed_jsonrpc_error(
            StatusCode::BAD_REQUEST,
            ErrorCode::PARSE_ERROR,
            format!("Parse error: the body is not JSON ({e})"),
        )
    })?;
    if value.is_array() {
        return Err(boxed_jsonrpc_error(
            StatusCode::BAD_REQUEST,
            ErrorCode::INVALID_REQUEST,
            "Invalid Request: JSON-RPC batches are not supported; send one message per request"
                .into(),
        ));
    }
    let calls_a_tool = value.get("method").and_then(Value::as_str) == Some("tools/call");
    serde_json::from_value::<ClientJsonRpcMessage>(value).map_err(|e| {
        boxed_jsonrpc_error(
            StatusCode::BAD_REQUEST,
            ErrorCode::INVALID_REQUEST,
            format!("Invalid Request: not an MCP JSON-RPC message ({e})"),
        )
    })?;
    Ok(calls_a_tool)
}

/// `host` or `host:port`, lower-case, without IPv6 brackets.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    match http::uri::Authority::try_from(text) {
        Ok(a) => Some((
            a.host().trim_matches(['[', ']']).to_ascii_lowercase(),
            a.port_u16(),
        )),
        // A bare IPv6 address (`::1`) is no authority; take it as a host.
        Err(_) => Some((text.trim_matches(['[', ']']).to_ascii_lowercase(), None)),
    }
}

impl Gate {
    fn check_host_and_origin(&self, headers: &HeaderMap) -> Result<(), Box<Response>> {
        if !self.allowed_hosts.is_empty() {
            let host = headers
                .get(HOST)
                .and_then(|h| h.to_str().ok())
                .and_then(authority)
                .ok_or_else(|| Box::new(forbidden("a Host header is required")))?;
            let allowed = self
                .allowed_hosts
                .iter()
                .filter_map(|a| authority(a))
                .any(|(name, port)| name == host.0 && port.is_none_or(|p| Some(p) == host.1));
            if !allowed {
                tracing::warn!(host = %host.0, "refused a request for a host not on the allowlist");
                return Err(Box::new(forbidden(
                    "the Host header is not allowed (DNS-rebinding protection); an operator can allow it with --allowed-host",
                )));
            }
        }
        if let Some(origin) = headers.get(ORIGIN) {
            let origin = origin
                .to_str()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            if !self.origin_allowed(&origin) {
                tracing::warn!(%origin, "refused a request from an origin not on the allowlist");
                return Err(Box::new(forbidden(
                    "the Origin header is not allowed; an operator can allow it with --allowed-origin",
                )));
            }
        }
        Ok(())
    }

    /// `scheme://host[:port]` against entries of the same form, where `:*` allows any port.
    fn origin_allowed(&self, origin: &str) -> bool {
        let Some((scheme, rest)) = origin.split_once("://") else {
            return false;
        };
        let Some(origin_authority) = authority(rest) else {
            return false;
        };
        self.allowed_origins.iter().any(|entry| {
            let entry = entry.trim().to_ascii_lowercase();
            let Some((e_scheme, e_rest)) = entry.split_once("://") else {
                return false;
            };
            if e_scheme != scheme {
                return false;
            }
            if let Some(host) = e_rest.strip_suffix(":*") {
                return authority(host).is_some_and(|(h, _)| h == origin_authority.0);
            }
            authority(e_rest).is_some_and(|a| a == origin_authority)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(hosts: &[&str], origins: &[&str]) -> Gate {
        Gate {
            control: ControlClient::connect_lazy("127.0.0.1:1").unwrap(),
            allowed_hosts: hosts.iter().map(|s| s.to_string()).collect(),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            max_request_bytes: 1024,
        }
    }

    fn headers(pairs: &[(http::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(name.clone(), value.parse().unwrap());
        }
        h
    }

    #[tokio::test]
    async fn hosts_are_matched_with_or_without_ports() {
        let g = gate(
            &["localhost", "127.0.0.1", "::1", "mcp.example.com:443"],
            &[],
        );
        for ok in [
            "localhost:8090",
            "127.0.0.1",
            "[::1]:8090",
            "mcp.example.com:443",
        ] {
            assert!(
                g.check_host_and_origin(&headers(&[(HOST, ok)])).is_ok(),
                "{ok}"
            );
        }
        for bad in ["evil.example", "mcp.example.com:8443", "127.0.0.2:8090"] {
            assert!(
                g.check_host_and_origin(&headers(&[(HOST, bad)])).is_err(),
                "{bad}"
            );
        }
        assert!(g.check_host_and_origin(&HeaderMap::new()).is_err());
    }

    #[tokio::test]
    async fn origins_need_scheme_host_and_port() {
        let g = gate(&[], &["http://localhost:*", "https://app.example.com"]);
        assert!(g.origin_allowed("http://localhost:3000"));
        assert!(g.origin_allowed("https://app.example.com"));
        assert!(!g.origin_allowed("https://localhost:3000"));
        assert!(!g.origin_allowed("https://app.example.com:8443"));
        assert!(!g.origin_allowed("null"));
        let no_origin = headers(&[(HOST, "localhost")]);
        assert!(g.check_host_and_origin(&no_origin).is_ok());
    }

    #[test]
    fn malformed_json_rpc_is_refused_with_its_code() {
        let code = |body: &str| -> Option<i64> {
            let response = check_jsonrpc(&Bytes::from(body.to_string())).err()?;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
            Some(0)
        };
        assert!(code("{").is_some());
        assert!(code("[]").is_some());
        assert!(code(r#"{"jsonrpc":"2.0","id":1}"#).is_some());
        assert!(code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
    }
}
