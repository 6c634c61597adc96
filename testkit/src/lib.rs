//! Test support shared across the workspace's test suites. Only ever a dev-dependency.
//!
//! Why a crate: the seed cases (`router/tests/data/routing/<seed>/cases.json`) are read by
//! three test suites in three packages: `router/tests/seeds.rs` (the hand-written fleet
//! rules), `packs/tests/seeds_proof.rs` (the built-in packs, in-process) and
//! `tests/all/seed_packs.rs` (the packs installed through the control API, the cases
//! delivered through ingest). Each must build the same delivery from a case, byte for byte and
//! header for header, or the three would prove different things; one loader makes that so.
//!
//! Of the workspace's crates it depends on `switchboard-proto` only (for `StoredDelivery`), so
//! every package can take it as a dev-dependency without a cycle.
//!
//! With the `database` feature, one test database per test (`database`): the store's suite,
//! the end-to-end control tests and the benchmarks all take theirs from it. It hands out URLs
//! and opens no store, so it needs no store crate (issue 44).

pub mod big_payloads;
#[cfg(feature = "database")]
pub mod database;
pub mod forge_headers;
pub mod http_answer;
pub mod missing;
pub mod payloads_dir;
pub mod procfs;
pub mod router_process;
pub mod seed_cases;
