//! The post-restore exec controller (docs/behaviour.md §6).
//!
//! - `restore_hooks_core::exec_step`: the pure per-pod state machine (every rule, table-tested);
//! - [`exec`]: running a command in a container (kube WebSocket exec, and a fake);
//! - [`pods`]: the pending-pod watch, and one worker (`worker`) per pending pod;
//! - [`slots`]: exec slots shared fairly across namespaces;
//! - [`status`], [`events`]: what the controller writes on pods;
//! - [`ledger`]: the controller's own record of what ran, in the RestoreRecords;
//! - [`restores`]: the restore model (`restore_hooks_core::restore`) fed by the watch of the pods
//!   the webhook marked: `after`, `runOn: OnePod`, the counts, the late-hook candidates;
//! - [`object_status`]: RestoreHook / ClusterRestoreHook / RestoreRun status, written from the
//!   model's counts;
//! - [`late`]: exec hooks of hook objects that arrive after their pods (the merge is
//!   `restore_hooks_core::late_hooks`);
//! - [`unmutated`]: restored pods the webhook never saw;
//! - [`windows`]: restore windows, the restore-namespace label on the namespaces a Velero Restore
//!   writes to;
//! - [`lease`]: leader election, so that only one replica execs.

pub mod events;
pub mod exec;
pub mod late;
pub mod lease;
pub mod ledger;
pub mod object_status;
pub mod pods;
pub mod restores;
pub mod slim_pod;
pub mod slots;
pub mod status;
pub mod unmutated;
pub mod windows;
mod worker;
pub use restore_hooks_core::exec_step;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::catalog::SharedIndex;
use crate::cli::ControllerArgs;
use crate::config::EngineConfig;
use crate::metrics::Metrics;
use crate::plan_key::KeyRing;

use self::events::{EventSink, QUEUE_CAPACITY};
use self::exec::{Exec, KubeExec};
use self::late::LateHooks;
use self::lease::LeaseConfig;
use self::ledger::Ledger;
use self::object_status::TallyConfig;
use self::pods::Workers;
use self::restores::Restores;
use self::slots::ExecSlots;

/// Everything the controller needs from the process that hosts it.
pub struct ControllerDeps {
    /// The API server: pods, exec, Events, the Lease, RestoreRuns and hook object status.
    pub client: kube::Client,
    /// The controller's flags (slots, grace, windows, the Lease).
    pub args: ControllerArgs,
    /// The same scope rules as the webhook's (which pods are restored pods, excluded namespaces).
    pub engine: EngineConfig,
    /// Where the controller's metrics go (shared with the webhook under `serve`).
    pub metrics: Metrics,
    /// This replica's name in the Lease.
    pub identity: String,
    /// Namespace labels and hook objects (the scope check, late hooks, Ready conditions).
    pub index: Arc<SharedIndex>,
    /// The plan key: nothing runs until it is loaded, and only plans it verifies run.
    pub keys: KeyRing,
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
        engine,
        metrics,
        identity,
        index,
        keys,
        shutdown,
    } = deps;
    anyhow::ensure!(
        args.max_concurrent_execs > 0,
        "--max-concurrent-execs must be at least 1"
    );
    anyhow::ensure!(
        !args.lease_duration.is_zero(),
        "--lease-duration must be longer than zero"
    );
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
    // As many claims as slots (docs/behaviour.md §6.9): enough to keep every slot's start written
    // ahead while it runs a hook, and a bound on the hooks a crash can interrupt.
    let slots = ExecSlots::new(
        args.max_concurrent_execs,
        args.per_namespace_execs(),
        args.max_concurrent_execs,
        metrics.exec_slots_in_use.clone(),
        &metrics.exec_slot_waiting,
    );
    // Events go out in the background (docs/behaviour.md §6.12): publishing never waits on the
    // API server. The sender outlives every leadership, and flushes at shutdown.
    let (events, event_sender) = EventSink::channel(identity.clone(), &metrics, QUEUE_CAPACITY);
    let events_stop = CancellationToken::new();
    let mut event_task = AbortOnDrop(tokio::spawn(
        event_sender.run(client.clone(), events_stop.clone()),
    ));
    let inherited_grace = jiff::SignedDuration::try_from(args.inherited_exec_grace)
        .unwrap_or(jiff::SignedDuration::from_secs(30));
    info!(identity = %identity, lease = %args.lease_name, lease_namespace = %args.lease_namespace,
          max_concurrent_execs = args.max_concurrent_execs, per_namespace = args.per_namespace_execs(),
          "controller started; waiting for the Lease");

    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            led = leader.wait_for(|l| *l) => if led.is_err() { break },
        }
        // Nothing is verified, so nothing runs, until the plan key is loaded.
        while !keys.is_loaded() {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        if shutdown.is_cancelled() {
            break;
        }
        // Leading: watch and run hooks until shutdown or until the Lease is lost. A lost Lease
        // cancels `term` at once, so no new exec starts; running execs finish and are recorded.
        let term = shutdown.child_token();
        // What earlier leaders ran is read before anything runs.
        let (ledger, ledger_task) = Ledger::spawn(client.clone(), term.clone());
        let ledger_task = AbortOnDrop(ledger_task);
        // The restore model of this leadership, fed by the watch of the marked pods.
        let restores = Restores::default();
        let restores_task = AbortOnDrop(tokio::spawn(restores.clone().watch(
            client.clone(),
            keys.clone(),
            term.clone(),
        )));
        let (tally, tally_task) = object_status::spawn(
            client.clone(),
            index.clone(),
            restores.clone(),
            TallyConfig {
                replicas_namespace: args.lease_namespace.clone(),
                restore_run_retention: args.restore_run_retention,
            },
            term.clone(),
        );
        let tally_task = AbortOnDrop(tally_task);
        let late = AbortOnDrop(tokio::spawn(
            LateHooks {
                client: client.clone(),
                index: index.clone(),
                restores: restores.clone(),
                keys: keys.clone(),
                engine: engine.clone(),
                window: args.late_hook_window,
                events: events.clone(),
                metrics: metrics.clone(),
                tally: tally.clone(),
                ledger: ledger.clone(),
            }
            .run(term.clone()),
        ));
        let unmutated = AbortOnDrop(tokio::spawn(
            unmutated::Unmutated {
                client: client.clone(),
                index: index.clone(),
                engine: engine.clone(),
                events: events.clone(),
                metrics: metrics.clone(),
                lookback: args.unmutated_lookback(),
            }
            .run(term.clone()),
        ));
        let windows = AbortOnDrop(tokio::spawn(
            windows::RestoreWindows {
                client: client.clone(),
                index: index.clone(),
                restores: restores.clone(),
                engine: engine.clone(),
                events: events.clone(),
                metrics: metrics.clone(),
                write_labels: args.label_restore_namespaces,
            }
            .run(term.clone()),
        ));
        let workers = Arc::new(Workers {
            client: client.clone(),
            exec: exec.clone(),
            metrics: metrics.clone(),
            events: events.clone(),
            restores,
            slots: slots.clone(),
            keys: keys.clone(),
            index: index.clone(),
            engine: engine.clone(),
            ledger: ledger.clone(),
            inherited_grace,
        });
        let mut pods = AbortOnDrop(tokio::spawn(pods::serve_pods(workers, term.clone())));
        // (The select only classifies what happened: `wait_for`'s guard must not live across
        // an await.)
        let mut pods_ended = None;
        let watch_ended = tokio::select! {
            _ = term.cancelled() => None,
            _ = leader.wait_for(|l| !*l) => {
                info!("not leading any more: no new hooks start");
                term.cancel();
                None
            }
            // The watch never ends on its own (it retries with backoff); if it does anyway,
            // start it again rather than lead without processing pods. (It also ends right
            // after a shutdown, and this branch may win the race with the one above.)
            ended = &mut pods.0 => {
                let by_itself = !term.is_cancelled();
                pods_ended = Some(());
                by_itself.then_some(ended)
            }
        };
        term.cancel();
        // A JoinHandle must not be polled again once it returned.
        if pods_ended.is_none() {
            let _ = (&mut pods.0).await;
        }
        let _ = late.join().await;
        let _ = unmutated.join().await;
        let _ = windows.join().await;
        let _ = tally_task.join().await;
        let _ = restores_task.join().await;
        let _ = ledger_task.join().await;
        if let Some(ended) = watch_ended {
            match ended {
                Err(e) => warn!(error = %e, "the pod watch task failed; restarting it"),
                Ok(()) => warn!("the pod watch ended; restarting it"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        if shutdown.is_cancelled() {
            break;
        }
    }
    // Release the Lease only after the last exec ended, so a successor never overlaps with us.
    // The queued Events (the last hooks' among them) are sent meanwhile, for a bounded time.
    events_stop.cancel();
    elector_stop.cancel();
    let _ = (&mut elector.0).await;
    let _ = (&mut event_task.0).await;
    info!("controller stopped");
    Ok(())
}

/// A spawned task that is aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    /// Waits for the task to end by itself.
    async fn join(mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
