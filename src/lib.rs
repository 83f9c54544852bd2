//! restore-hooks: Velero-style restore hooks for any Kubernetes restore.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use restore_hooks_core::{admission, config, hooks, index, ledger, restore};

pub mod admin;
pub mod backoff;
pub mod catalog;
pub mod chart_hooks_cli;
pub mod cli;
pub mod controller;
pub mod convert_cli;
pub mod crd;
#[cfg(feature = "demo")]
pub mod demo;
pub mod describe_cli;
pub mod inject_cli;
pub mod kube_client;
pub mod metrics;
pub mod plan_key;
pub mod runtime;
pub mod shutdown;
pub mod telemetry;
#[cfg(feature = "demo")]
pub mod testbed;
pub mod webhook;

/// Installs ring as rustls' process-wide crypto provider. Exactly one provider is compiled in;
/// installing it explicitly keeps rustls from guessing. Safe to call more than once (tests).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
