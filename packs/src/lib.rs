//! Rule packs (SPEC-0031): the pack format, param types and the catalog. Packs are data
//! under `packs/catalog/<name>/<version>/`, embedded at build time.

#![forbid(unsafe_code)]

pub mod admission;
pub mod catalog;
pub mod fixtures;
pub mod manifest;
pub mod merge;
pub mod plan;
pub mod provenance;
#[cfg(feature = "runner")]
pub mod runner;
pub mod types;

pub use catalog::{Availability, Catalog, CatalogPack, ResolveError, Source};
pub use manifest::{Fixture, Pack, ParamCheck, ParamSpec, Placement};
pub use types::ParamType;
