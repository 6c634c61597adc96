//! The control plane of Switchboard: ingest, the control gRPC API, rule packs, the console's
//! HTTP side and the router client, over the storage layer of its own crate
//! (`switchboard-store`: one [`Store`] over SQLite or PostgreSQL). The store's crate also
//! holds the one [`Error`], owner scopes, sealing and secrets; they are re-exported here under
//! their old paths (`switchboard_control::store`, `::error`, `::scope`, `::sealing`,
//! `::secrets`), so nothing that used them changes.

#![forbid(unsafe_code)]

pub mod api;
pub mod backlog;
pub mod capabilities;
pub mod change_log;
pub mod console;
pub mod ingest;
pub mod pack_sources;
pub mod redrive;
pub mod retention;
pub mod routing;
pub mod rule_packs;
pub mod server;
pub mod state;
pub mod trials;
pub mod verbs;
pub mod wire;

pub use switchboard_store as store;
pub use switchboard_store::{error, scope, sealing, secrets};

pub use error::{Error, Result};
pub use scope::{OwnerScope, Role};
pub use sealing::SealingKey;
pub use store::{Clock, Store, StoreOptions};
