//! The one client of control's gRPC API (issue 44), shared by every surface that calls it:
//! the people's CLI (`switchboard webhooks|events|rules|packs|todos|explain`), `switchboard
//! admin` (its connection) and the MCP gateway. A surface depends on this, `model` and
//! `proto`, never on another surface, so the CLI does not reach into the gateway for its
//! client or its JSON.
//!
//! - [`bearer`]: the caller's credential, put on every call and never logged;
//! - [`client`]: the lazily connected channel to control and one method per RPC;
//! - [`error`]: the typed error a call returns, read from control's status;
//! - [`views`]: control's answers as the JSON objects the MCP tools return and the CLI's
//!   `--output json` prints;
//! - [`convert`]: control.v1 messages into those views.

#![forbid(unsafe_code)]

pub mod bearer;
pub mod client;
pub mod convert;
pub mod error;
pub mod views;

pub use bearer::Bearer;
pub use client::{ControlClient, channel, walk};
pub use error::CallError;
