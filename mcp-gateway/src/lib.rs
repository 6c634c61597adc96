//! The MCP gateway (issue 6): every verb of the `webhooks`, `webhook-rules` and `todos`
//! families as an MCP tool, served over streamable HTTP at `/mcp` to agents holding a vended
//! endpoint credential. Stateless and without privilege of its own: each request's bearer is
//! checked with control (`Identity.WhoAmI`) and forwarded on the one control RPC each tool
//! call makes, so control stays the only authority.
//!
//! - [`auth`]: the gate in front of `/mcp` (hosts, bearer, body, identity);
//! - [`handler`]: the MCP server (allowlisted `tools/list`, `tools/call` → one RPC);
//! - [`tools`]: the catalog, typed params and outputs, and the proto conversions;
//! - [`errors`]: business errors as `isError` results an agent can act on;
//! - [`control`]: the gRPC client that carries the caller's bearer;
//! - [`server`]: the axum app and [`serve`].

#![forbid(unsafe_code)]

pub mod auth;
pub mod control;
pub mod errors;
pub mod handler;
pub mod server;
pub mod tools;

pub use auth::Caller;
pub use control::{Bearer, ControlClient};
pub use handler::{Gateway, ToolPolicy};
pub use server::{
    BoundGateway, GatewayConfig, GatewayError, loopback_hosts, loopback_origins, serve,
};
