//! The hook engine: every rule of docs/behaviour.md §1–§5, pure (no I/O, no async).

pub mod annotations;
pub mod authority;
pub mod command;
pub mod compiled;
pub mod duration;
pub mod ephemeral;
pub mod labels;
pub mod parameters;
pub mod patterns;
pub mod plan;
pub mod pod;
pub mod problem;
pub mod resolve;
pub mod restore_name;
pub mod scope;
pub mod selector;
pub mod signing;
pub mod targets;
pub mod types;
pub mod window;
