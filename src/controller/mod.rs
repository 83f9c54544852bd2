//! The post-restore exec controller (product.md §5).
//!
//! - [`state`]: the pure per-pod state machine (every rule, table-tested);
//! - [`exec`]: running a command in a container (kube WebSocket exec, and a fake);
//! - [`reconcile`]: the pod watch and one worker per pending pod;
//! - [`status`], [`events`], [`restorehook`]: what the controller writes;
//! - [`lease`]: leader election, so that only one replica execs.

pub mod events;
pub mod exec;
pub mod lease;
pub mod reconcile;
pub mod restorehook;
pub use restore_hooks_core::state;
pub mod status;

use std::sync::Arc;

use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::ControllerArgs;
use crate::config::EngineConfig;
use crate::metrics::Metrics;

use self::events::EventSink;
use self::exec::{Exec, KubeExec};
use self::lease::LeaseConfig;
use self::reconcile::Shared;
use self::restorehook::RestoreHookStatus;

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
    let exec = Arc::new(KubeExec::new(deps.client.clone()));
    run_with_exec(deps, exec).await
}

/// [`run`] with another way to exec (tests).
pub async fn run_with_exec(deps: ControllerDeps, exec: Arc<dyn Exec>) -> anyhow::Result<()> {
    let ControllerDeps {
        client,
        args,
        engine: _,
        metrics,
        shutdown,
    } = deps;
    anyhow::ensure!(
        args.max_concurrent_pods > 0,
        "--max-concurrent-pods must be at least 1"
    );
    anyhow::ensure!(
        !args.lease_duration.is_zero(),
        "--lease-duration must be longer than zero"
    );
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(lease::default_identity);
    let lease_config = LeaseConfig {
        name: args.lease_name.clone(),
        namespace: args.lease_namespace.clone(),
        identity: identity.clone(),
        duration: args.lease_duration,
    };
    let (leader_tx, mut leader) = watch::channel(false);
    let elector_stop = CancellationToken::new();
    // Child tasks are aborted if this future is dropped (a killed controller must not keep
    // renewing its Lease or running workers in the background).
    let mut elector = AbortOnDrop(tokio::spawn(lease::run(
        client.clone(),
        lease_config,
        leader_tx,
        metrics.clone(),
        elector_stop.clone(),
    )));
    let writer_stop = CancellationToken::new();
    let (restorehooks, writer) = RestoreHookStatus::spawn(client.clone(), writer_stop.clone());
    let mut writer = AbortOnDrop(writer);
    let shared = Arc::new(Shared {
        client: client.clone(),
        exec,
        metrics: metrics.clone(),
        events: EventSink::new(client, identity.clone()),
        restorehooks,
        slots: Arc::new(Semaphore::new(args.max_concurrent_pods)),
    });
    info!(identity = %identity, lease = %args.lease_name, lease_namespace = %args.lease_namespace, "controller started; waiting for the Lease");

    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            led = leader.wait_for(|l| *l) => if led.is_err() { break },
        }
        // Leading: watch and run hooks until shutdown or until the Lease is lost. A lost Lease
        // cancels `term` at once, so no new exec starts; running execs finish and are recorded.
        let term = shutdown.child_token();
        let mut pods = AbortOnDrop(tokio::spawn(reconcile::serve_pods(
            shared.clone(),
            term.clone(),
        )));
        // (The select only classifies what happened: `wait_for`'s guard must not live across
        // an await.)
        let watch_ended = tokio::select! {
            _ = term.cancelled() => None,
            _ = leader.wait_for(|l| !*l) => {
                info!("not leading any more: no new hooks start");
                term.cancel();
                None
            }
            // The watch never ends on its own (it retries with backoff); if it does anyway,
            // start it again rather than lead without processing pods.
            ended = &mut pods.0 => Some(ended),
        };
        if let Some(ended) = watch_ended {
            match ended {
                Err(e) => warn!(error = %e, "the pod watch task failed; restarting it"),
                Ok(()) => warn!("the pod watch ended; restarting it"),
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            continue;
        }
        term.cancel();
        let _ = (&mut pods.0).await;
        if shutdown.is_cancelled() {
            break;
        }
    }
    // Release the Lease only after the last exec ended, so a successor never overlaps with us.
    elector_stop.cancel();
    let _ = (&mut elector.0).await;
    writer_stop.cancel();
    let _ = (&mut writer.0).await;
    info!("controller stopped");
    Ok(())
}

/// A spawned task that is aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
