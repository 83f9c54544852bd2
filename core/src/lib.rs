//! The rules of restore-hooks, pure: which pods are restored, where their hooks come from and in
//! which order, what the webhook's patch and plan are, and what the controller does next for a
//! pod. Nothing here does I/O or reads a clock; the webhook, `inject` and the controller are thin
//! shells around these functions. The behaviour they implement is specified in
//! `docs/behaviour.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod catalog;
pub mod config;
pub mod convert;
pub mod documents;
pub mod exec_slots;
pub mod exec_step;
mod hex;
pub mod hooks;
pub mod index;
pub mod late_hooks;
pub mod ledger;
pub mod record;
pub mod restore;
pub mod retry;
pub mod trust;
