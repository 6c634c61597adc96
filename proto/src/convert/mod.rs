//! The model's types as this crate's messages, both ways: one conversion, so control (which
//! sends them) and the surfaces (which read them back) cannot disagree on a field.

pub mod approval;
pub mod change;
pub mod configuration;
pub mod decision;
pub mod guard;
pub mod json;
pub mod plan;
pub mod source;
pub mod time;
pub mod trial;
