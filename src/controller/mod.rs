//! The post-restore exec controller (product.md §5).

pub mod exec;
pub mod state;

use tokio_util::sync::CancellationToken;

use crate::cli::ControllerArgs;
use crate::config::EngineConfig;
use crate::metrics::Metrics;

/// Everything the controller needs from the process that hosts it.
pub struct ControllerDeps {
    pub client: kube::Client,
    pub args: ControllerArgs,
    pub engine: EngineConfig,
    pub metrics: Metrics,
    /// Cancelled on SIGTERM: stop starting hooks, let running ones finish or time out, release
    /// the Lease, return.
    pub shutdown: CancellationToken,
}

/// Runs until `deps.shutdown` is cancelled.
pub async fn run(deps: ControllerDeps) -> anyhow::Result<()> {
    deps.shutdown.cancelled().await;
    Ok(())
}
