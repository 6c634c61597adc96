//! The configuration model lives in its own crate (`switchboard-model`) so control can hold,
//! merge and digest configurations without linking the engine.

pub use switchboard_model::*;
