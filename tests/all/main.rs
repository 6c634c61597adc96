//! End-to-end tests that start real processes: one test binary keeps link times down.

mod catalog;
mod cli;
mod config;
mod control_api;
mod control_harness;
mod deploy;
mod forge_safe;
mod hostile;
mod ingest;
mod ingest_big_bodies;
mod ingest_forms;
mod mcp_e2e;
mod pack_api;
mod pack_sources;
mod repository;
mod router_grpc;
mod router_sandbox;
mod rule_packs;
mod rule_packs_golden;
mod sandbox_classes;
mod sandbox_pipeline;
mod scaling;
mod seed_packs;
mod support;
mod telemetry;
mod tenant_isolation;
