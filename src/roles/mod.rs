//! One module per role of the `switchboard` binary, each with its flags and its `run`.

pub mod admin;
pub mod control;
pub mod gateway;
pub mod packs;
pub mod router;
pub mod up;
