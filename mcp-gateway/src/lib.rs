//! The MCP gateway (issue 6): every verb of the `webhooks`, `webhook-rules` and `todos`
//! families as an MCP tool, served over streamable HTTP at `/mcp` to agents holding a vended
//! endpoint credential. Stateless and without privilege of its own: each request's bearer is
//! checked with control (`Identity.WhoAmI`) and forwarded on the one control RPC each tool
//! call makes, so control stays the only authority.
//!
//! - [`auth`]: the gate in front of `/mcp` (hosts, bearer, body, identity);
//! - [`handler`]: the MCP server (allowlisted `tools/list`, `tools/call` → one RPC);
//! - [`tools`]: the catalog, typed params, and one handler per tool;
//! - [`errors`]: business errors as `isError` results an agent can act on;
//! - [`server`]: the axum app and [`serve`].
//!
//! The gRPC client that carries the caller's bearer, the typed error of a call and the
//! tools' outputs (with their conversions from control's messages) are the shared control
//! client's (`switchboard_control_client`), which the people's CLI uses too.

#![forbid(unsafe_code)]

pub mod auth;
pub mod errors;
pub mod handler;
pub mod server;
pub mod tools;

pub use auth::Caller;
pub use handler::{Gateway, ToolPolicy};
pub use server::{
    BoundGateway, GatewayConfig, GatewayError, loopback_hosts, loopback_origins, serve,
};
