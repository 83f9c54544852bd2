//! A pod whose plan or status is refused (docs/behaviour.md §9.3, §9.4): nothing of it runs, and
//! the pod says why.

use std::sync::Arc;

use restore_hooks_core::hooks::plan::{EXEC_FAILED, ExecStatus};
use restore_hooks_core::trust::Rejection;
use tracing::error;

use crate::controller::events::{EventType, PLAN_REJECTED, Regarding};
use crate::controller::slim_pod::PodState;
use crate::controller::status::{WriteError, set_exec_label};

use super::{Flow, PodWorker};

impl PodWorker {
    /// Nothing of this pod runs: a Warning Event, the `failed` label, a status naming why.
    pub(super) async fn reject(&mut self, pod: &Arc<PodState>, rejection: Rejection) -> Flow {
        self.reject_with(pod, rejection.metric_reason(), rejection.to_string())
            .await
    }

    pub(super) async fn reject_with(
        &mut self,
        pod: &Arc<PodState>,
        reason: &str,
        message: String,
    ) -> Flow {
        // Not `message`: that is the log line's own text in JSON logs (one key per line).
        error!(pod = %self.pod_ref(), reason, result_message = %message, "not running this pod's hooks");
        let written = match self.shared.keys.current() {
            // A signed status that says why, so the rejection itself cannot be forged away.
            Some(keys) => self
                .write_signed(
                    &keys,
                    pod,
                    &ExecStatus {
                        hooks: Vec::new(),
                        message: message.clone(),
                    },
                    Some(EXEC_FAILED),
                )
                .await
                .map(|_| ()),
            None => set_exec_label(&self.api(), &self.name, &pod.resource_version, EXEC_FAILED)
                .await
                .map(|_| ()),
        };
        match written {
            Ok(()) | Err(WriteError::Gone) => {
                // Counted once the refusal is on the pod: a worker started by a stale watch event
                // loses the write (conflict) and counts nothing.
                self.shared
                    .metrics
                    .plans_rejected
                    .with_label_values(&[reason])
                    .inc();
                self.shared.events.publish(
                    &Regarding::pod(pod),
                    EventType::Warning,
                    PLAN_REJECTED,
                    &message,
                );
                Flow::Stop
            }
            Err(e) => self.write_failed(e).await,
        }
    }
}
