//! The control plane of Switchboard. This crate starts with its foundation, the storage layer:
//! one [`Store`] over SQLite (the single-machine default) or PostgreSQL (several control
//! replicas), with the same behaviour and the same tests on both.

#![forbid(unsafe_code)]

pub mod api;
pub mod backlog;
pub mod console;
pub mod error;
pub mod ingest;
pub mod pack_sources;
pub mod retention;
pub mod routing;
pub mod rule_packs;
pub mod scope;
pub mod sealing;
pub mod secrets;
pub mod server;
pub mod state;
pub mod store;
pub mod verbs;
pub mod wire;

pub use error::{Error, Result};
pub use scope::{OwnerScope, Role};
pub use sealing::SealingKey;
pub use store::{Clock, Store, StoreOptions};
