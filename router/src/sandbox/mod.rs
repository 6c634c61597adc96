//! Sandbox children: where tenant jq is parsed and run, out of the router's address space.

pub mod child;
pub mod confine;
pub mod frame;
pub mod memory;
pub mod pool;
pub mod progress;
pub mod schedule;

pub use confine::ChildLimits;
pub use pool::{Evaluation, SandboxConfig, SandboxError, SandboxPool, Work};
pub use schedule::Class;
