//! A pod the watch lost sight of: read again, and when it is gone, every hook that did not end is
//! reported as the controller ends it (docs/behaviour.md §6.8, §8.3).

use std::collections::BTreeSet;

use jiff::Timestamp;
use restore_hooks_core::exec_step::{Context, Presence, align, next_step};
use restore_hooks_core::hooks::plan::{EXEC_FAILED, EXEC_LABEL, EXEC_PENDING};
use tracing::{debug, warn};

use super::{Flow, PodWorker};

impl PodWorker {
    /// Reads the pod after the watch lost sight of it.
    pub(super) async fn confirm(&mut self) -> Flow {
        match self.read_own_pod().await {
            Ok(Some(pod)) => {
                self.maybe_gone = false;
                self.fresh = true;
                self.backoff = None;
                let pending = pod.label(EXEC_LABEL) == Some(EXEC_PENDING);
                let terminating = pod.view.presence == Presence::Terminating;
                self.pod = pod;
                if pending || terminating || !self.running.is_empty() || !self.results.is_empty() {
                    Flow::Again
                } else {
                    debug!(pod = %self.pod_ref(), "pod no longer pending (finished elsewhere)");
                    Flow::Stop
                }
            }
            Ok(_) => {
                self.maybe_gone = false;
                self.gone().await;
                Flow::Stop
            }
            Err(e) => self.api_error("reading the pod", e).await,
        }
    }

    /// The pod is gone: every hook that did not end fails (Event, log, metric, counts); nothing
    /// can be written on the pod any more.
    pub(super) async fn gone(&mut self) {
        let pod = self.pod.clone();
        let (plan, status) = match self.trusted.clone() {
            Some(trusted) => trusted,
            // Gone before this worker trusted anything (the watch said so before its first
            // look, or its first look was a read): the counts hold the pod by the plan it
            // carries, so its end is reported by that plan. One that does not verify counts for
            // nothing (docs/behaviour.md §8.3).
            None => match self.verified(&pod) {
                Ok(trusted) => trusted,
                Err(_) => return,
            },
        };
        let mut status = align(&plan, status.as_ref());
        // Exec results that could not be written any more are reported like the rest.
        let mut reported = Vec::new();
        for (i, _, result) in self.results.drain(..) {
            status.hooks[i] = result;
            reported.push(i);
        }
        self.running.clear();
        let mut view = pod.view.clone();
        view.presence = Presence::Gone;
        let decision = next_step(
            &plan,
            Some(&status),
            &view,
            &Context {
                now: Timestamp::now(),
                running_here: &BTreeSet::new(),
                awaiting_slot: &BTreeSet::new(),
                inherited_grace: self.shared.inherited_grace,
                out_of_scope: None,
                one_pod: &self.unposted_turns(&plan, &status, false),
                after: &self.after_turns(&plan, Some(&status)),
            },
        );
        warn!(pod = %self.pod_ref(), restore = %plan.restore, not_run = decision.ended.len(), "pod deleted before all hooks ran");
        self.report_ended(&pod, &plan, &decision.status, &reported, &decision.ended);
        if !reported.is_empty() || !decision.ended.is_empty() {
            // A pod that only passed OnePod hooks on did not fail them.
            let label = decision.finished.unwrap_or(EXEC_FAILED);
            self.completed(&pod, &plan, &decision.status, label);
        }
        self.shared
            .restores
            .last_word(&self.uid, &self.namespace, &plan, &decision.status);
    }
}
