//! The hook engine: every rule of product.md §§2–4 and §8, pure (no I/O, no async).

pub mod annotations;
pub mod command;
pub mod duration;
pub mod patterns;
pub mod plan;
pub mod pod;
pub mod resolve;
pub mod scope;
pub mod selector;
pub mod types;
