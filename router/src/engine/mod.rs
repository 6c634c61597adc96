//! The rule engine: one set of semantics for every decision Switchboard makes.
//!
//! `config`, `prescan`, `decision` and `validate::check_structure` are safe anywhere.
//! `dialect`, `compile` and `validate::validate` parse tenant jq: they run only inside
//! sandbox children (and in tests), never in a long-lived server's address space.

pub mod compile;
pub mod config;
pub mod decision;
pub mod dialect;
pub mod envelope;
pub mod payload;
pub mod prescan;
pub mod projection;
mod quantifiers;
mod regex;
mod shortcut;
pub mod validate;

pub use compile::CompiledConfiguration;

/// The data jq filters run over here (values and the lookup table every native shares):
/// defined once, above the compiler and the natives it registers.
pub(crate) type Data = jaq_core::data::JustLut<jaq_json::Val>;
pub use config::{Action, Configuration, Rule};
pub use envelope::{build_envelope, build_envelope_reading};
pub use projection::Projection;
