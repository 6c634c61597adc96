//! The router plane: the rule engine, the sandbox children that run it, and the gRPC
//! router service.

pub mod engine;
pub mod metrics;
pub mod sandbox;
pub mod server;
pub mod service;
