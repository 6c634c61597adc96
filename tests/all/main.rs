//! End-to-end tests that start real processes: one test binary keeps link times down.

mod hostile;
mod router_grpc;
mod router_sandbox;
mod support;
