//! The hook engine: every rule of product.md §§2–4 and §8, pure (no I/O, no async).

pub mod duration;
pub mod plan;
pub mod types;
