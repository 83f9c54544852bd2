//! Events, logs and metrics of the hooks that ended (docs/behaviour.md §6.12, §6.13).

use restore_hooks_core::hooks::plan::{EXEC_LABEL, ExecPlan, ExecStatus, HookPhase, HookStatus};
use tracing::{info, warn};

use crate::controller::events::{
    EventType, HOOK_FAILED, HOOK_REFUSED, HOOK_RETRYING, HOOK_SUCCEEDED, HOOKS_COMPLETED, Regarding,
};
use crate::controller::slim_pod::PodState;

use super::PodWorker;

impl PodWorker {
    pub(super) async fn completed(
        &self,
        pod: &PodState,
        plan: &ExecPlan,
        status: &ExecStatus,
        label: &str,
    ) {
        self.shared
            .restores
            .finished(&self.uid, &self.namespace, plan, status);
        let count = |p: HookPhase| status.hooks.iter().filter(|h| h.phase == p).count();
        let (ok, failed, skipped, elsewhere) = (
            count(HookPhase::Succeeded),
            count(HookPhase::Failed),
            count(HookPhase::Skipped),
            count(HookPhase::OtherPod),
        );
        let elsewhere = if elsewhere > 0 {
            format!(", {elsewhere} run by another pod (runOn: OnePod)")
        } else {
            String::new()
        };
        let message = format!(
            "restore {}: {} hook(s): {ok} succeeded, {failed} failed, {skipped} skipped{elsewhere}; {EXEC_LABEL}={label}",
            plan.restore,
            plan.hooks.len()
        );
        info!(pod = %self.pod_ref(), restore = %plan.restore, hooks = plan.hooks.len(), succeeded = ok, failed, skipped, result = label, "all hooks ended");
        let kind = if failed + skipped == 0 {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.shared
            .events
            .publish(&Regarding::pod(pod), kind, HOOKS_COMPLETED, &message)
            .await;
    }

    /// Reports hooks that became terminal (after their phase was written, or the pod vanished):
    /// Events, logs, metrics. `ran` are exec results, `not_run` the hooks the state machine ended
    /// without an exec (expired, pod gone, skipped after a failure, interrupted, refused).
    pub(super) async fn report_ended(
        &self,
        pod: &PodState,
        plan: &ExecPlan,
        status: &ExecStatus,
        ran: &[usize],
        not_run: &[usize],
    ) {
        let ended = ran.iter().map(|&i| (i, true));
        for (i, exec_result) in ended.chain(not_run.iter().map(|&i| (i, false))) {
            let (hook, entry) = (&plan.hooks[i], &status.hooks[i]);
            if entry.phase == HookPhase::Pending && exec_result {
                // An attempt failed and the next is due (§6.17): no outcome yet.
                let msg = failure_event(hook, i, entry, "");
                self.shared
                    .events
                    .publish(
                        &Regarding::pod(pod),
                        EventType::Warning,
                        HOOK_RETRYING,
                        &msg,
                    )
                    .await;
                continue;
            }
            if entry.phase == HookPhase::OtherPod {
                // Not an outcome here: the pod that runs it reports it.
                info!(
                    pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index = i,
                    source = %hook.source, result_message = %entry.message, "runOn: OnePod hook runs in another pod"
                );
                continue;
            }
            let result = match entry.phase {
                HookPhase::Succeeded => "succeeded",
                HookPhase::Skipped => "skipped",
                _ => "failed",
            };
            self.shared
                .metrics
                .exec_hooks
                .with_label_values(&[result])
                .inc();
            if entry.phase != HookPhase::Succeeded && !exec_result {
                // Exec results were logged when they arrived; these never ran (or their result
                // was lost): each is a hook that did not happen.
                warn!(
                    pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index = i,
                    source = %hook.source, container = %hook.container, result,
                    result_message = %entry.message, "hook not run"
                );
            }
            let about = Regarding::pod(pod);
            match entry.phase {
                HookPhase::Succeeded => {
                    let msg = format!(
                        "hook {} (#{i}, {}) in container {} succeeded; stdout: {}",
                        hook.name,
                        hook.source,
                        hook.container,
                        entry.stdout.trim_end()
                    );
                    self.shared
                        .events
                        .publish(&about, EventType::Normal, HOOK_SUCCEEDED, &msg)
                        .await;
                }
                HookPhase::Failed if hook.invalid.is_some() => {
                    let msg = format!(
                        "hook {} (#{i}, {}) {}",
                        hook.name, hook.source, entry.message
                    );
                    self.shared
                        .events
                        .publish(&about, EventType::Warning, HOOK_FAILED, &msg)
                        .await;
                }
                HookPhase::Failed if hook.refused.is_some() => {
                    let msg = format!(
                        "hook {} (#{i}, {}) in container {} {}",
                        hook.name, hook.source, hook.container, entry.message
                    );
                    self.shared
                        .events
                        .publish(&about, EventType::Warning, HOOK_REFUSED, &msg)
                        .await;
                }
                HookPhase::Failed => {
                    let msg = failure_event(hook, i, entry, " failed");
                    self.shared
                        .events
                        .publish(&about, EventType::Warning, HOOK_FAILED, &msg)
                        .await;
                }
                _ => {}
            }
        }
    }
}

/// The message of a `HookFailed` or `HookRetrying` Event: the hook, what happened (`what`:
/// `" failed"`, or empty when the status message says it), and the tail of its stderr.
fn failure_event(
    hook: &restore_hooks_core::hooks::plan::PlannedHook,
    i: usize,
    entry: &HookStatus,
    what: &str,
) -> String {
    let mut msg = format!(
        "hook {} (#{i}, {}) in container {}{what}: {}",
        hook.name, hook.source, hook.container, entry.message
    );
    if !entry.stderr.is_empty() {
        msg.push_str(&format!("; stderr: {}", entry.stderr.trim_end()));
    }
    msg
}
