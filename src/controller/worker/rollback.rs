//! A pod whose status went behind the controller's record (rolled back, removed, or a result its
//! controller never wrote): the record's view is written back, and nothing runs twice
//! (docs/behaviour.md §9.5).

use std::sync::Arc;

use restore_hooks_core::hooks::plan::ExecPlan;
use tracing::{info, warn};

use crate::controller::events::{EventType, Regarding, STATUS_ROLLED_BACK};
use crate::controller::slim_pod::PodState;

use super::{Flow, PodWorker};

impl PodWorker {
    /// The pod's status lost hooks the record says started (rolled back or removed), or lacks a
    /// result only the record has: writes the record's view back, so the pod tells the truth and
    /// nothing starts twice (docs/behaviour.md §9.5).
    pub(super) async fn restore_status(
        &mut self,
        pod: &Arc<PodState>,
        plan: &ExecPlan,
        reconciled: restore_hooks_core::ledger::Reconciled,
    ) -> Flow {
        let Some(keys) = self.shared.keys.current() else {
            return Flow::Wait;
        };
        let written = self
            .write_signed(&keys, pod, &reconciled.status, None)
            .await;
        match written {
            Ok(updated) => {
                self.backoff = None;
                self.pod = PodState::from_slim(updated);
                let names = |which: &[usize]| {
                    which
                        .iter()
                        .map(|&i| format!("{} (#{i})", plan.hooks[i].name))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                if !reconciled.recovered.is_empty() {
                    info!(pod = %self.pod_ref(), restore = %plan.restore, hooks = %names(&reconciled.recovered),
                          "results taken from the controller's record (the controller that ran them stopped before writing them on the pod)");
                }
                if !reconciled.rolled_back.is_empty() {
                    self.shared.metrics.status_rollbacks.inc();
                    let message = format!(
                        "the pod's restore-hooks.dev/status no longer showed hooks that had started: \
                         {}; it was rolled back or removed. The controller's record of RestoreRun {} \
                         wins: they are not run again",
                        names(&reconciled.rolled_back),
                        restore_hooks_core::restore::tally::restore_run_name(&plan.restore)
                    );
                    warn!(pod = %self.pod_ref(), restore = %plan.restore, hooks = %names(&reconciled.rolled_back),
                          "hook status rolled back; restored from the controller's record, nothing re-run");
                    self.shared.events.publish(
                        &Regarding::pod(pod),
                        EventType::Warning,
                        STATUS_ROLLED_BACK,
                        &message,
                    );
                }
                Flow::Again
            }
            Err(e) => self.write_failed(e).await,
        }
    }
}
