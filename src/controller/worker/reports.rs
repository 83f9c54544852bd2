//! Events, logs and metrics of the hooks that ended (docs/behaviour.md §6.12, §6.13).

use restore_hooks_core::hooks::plan::{EXEC_LABEL, ExecPlan, ExecStatus, HookPhase, HookStatus};
use tracing::{info, warn};

use crate::controller::events::{
    EventType, HOOK_FAILED, HOOK_REFUSED, HOOK_RETRYING, HOOKS_COMPLETED, MAX_MESSAGE, Regarding,
};
use crate::controller::slim_pod::PodState;

use super::PodWorker;

impl PodWorker {
    pub(super) fn completed(
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
        let (ok, failed, skipped) = (
            count(HookPhase::Succeeded),
            count(HookPhase::Failed),
            count(HookPhase::Skipped),
        );
        let message = completed_message(&plan.restore, plan.hooks.len(), status, label);
        info!(pod = %self.pod_ref(), restore = %plan.restore, hooks = plan.hooks.len(), succeeded = ok, failed, skipped, result = label, "all hooks ended");
        let kind = if failed + skipped == 0 {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.shared
            .events
            .publish(&Regarding::pod(pod), kind, HOOKS_COMPLETED, &message);
    }

    /// Reports hooks that became terminal (after their phase was written, or the pod vanished):
    /// Events, logs, metrics. `ran` are exec results, `not_run` the hooks the state machine ended
    /// without an exec (expired, pod gone, skipped after a failure, interrupted, refused). A
    /// success gets no Event of its own: the pod's `HooksCompleted` tells of it
    /// (docs/behaviour.md §6.12).
    pub(super) fn report_ended(
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
                self.shared.events.publish(
                    &Regarding::pod(pod),
                    EventType::Warning,
                    HOOK_RETRYING,
                    &msg,
                );
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
            if entry.phase == HookPhase::Failed && entry.message.starts_with("interrupted") {
                self.shared.metrics.exec_interrupted.inc();
            }
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
                HookPhase::Failed if hook.invalid.is_some() => {
                    let msg = format!(
                        "hook {} (#{i}, {}) {}",
                        hook.name, hook.source, entry.message
                    );
                    self.shared
                        .events
                        .publish(&about, EventType::Warning, HOOK_FAILED, &msg);
                }
                HookPhase::Failed if hook.refused.is_some() => {
                    let msg = format!(
                        "hook {} (#{i}, {}) in container {} {}",
                        hook.name, hook.source, hook.container, entry.message
                    );
                    self.shared
                        .events
                        .publish(&about, EventType::Warning, HOOK_REFUSED, &msg);
                }
                HookPhase::Failed => {
                    let msg = failure_event(hook, i, entry, " failed");
                    self.shared
                        .events
                        .publish(&about, EventType::Warning, HOOK_FAILED, &msg);
                }
                // Succeeded: told by the pod's HooksCompleted; Skipped: counted there.
                _ => {}
            }
        }
    }
}

/// The message of a pod's `HooksCompleted` (docs/behaviour.md §6.12), at most [`MAX_MESSAGE`]
/// bytes: the counts and the final label, then the hooks that succeeded, each with the tail of
/// its stdout as far as the space left allows. It is the one Event a pod's successes get, so it
/// carries what a per-hook success Event would: which hooks succeeded, and how their output
/// ended. `planned`: the hooks of the plan.
fn completed_message(restore: &str, planned: usize, status: &ExecStatus, label: &str) -> String {
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
    let mut message = format!(
        "restore {restore}: {planned} hook(s): {ok} succeeded, {failed} failed, {skipped} skipped{elsewhere}; {EXEC_LABEL}={label}"
    );
    let succeeded: Vec<(usize, &HookStatus)> = status
        .hooks
        .iter()
        .enumerate()
        .filter(|(_, h)| h.phase == HookPhase::Succeeded)
        .collect();
    if succeeded.is_empty() {
        return message;
    }
    // Names first: every succeeded hook is named while there is room; the stdout tails share
    // what remains. (`#i` is the hook's position in the plan, as in the status and in
    // `HookFailed`.)
    message.push_str(". Succeeded:");
    // Where each named hook's stdout tail goes, and the stdout.
    let mut named: Vec<(usize, &str)> = Vec::new();
    for (n, &(i, hook)) in succeeded.iter().enumerate() {
        let separator = if n > 0 { ";" } else { "" };
        let entry = format!("{separator} {} (#{i}, {})", hook.name, hook.container);
        let rest = succeeded.len() - n - 1;
        let reserve = if rest > 0 {
            format!(" and {rest} more").len()
        } else {
            0
        };
        if message.len() + entry.len() + reserve > MAX_MESSAGE {
            message.push_str(&format!(" and {} more", succeeded.len() - n));
            return message;
        }
        message.push_str(&entry);
        named.push((message.len(), hook.stdout.trim_end()));
    }
    // Stdout tails, shared fairly: shortest first, each takes at most an equal part of what is
    // left, so short outputs leave their unused part to the longer ones.
    let mut left = MAX_MESSAGE - message.len();
    let mut by_length: Vec<usize> = (0..named.len())
        .filter(|&k| !named[k].1.is_empty())
        .collect();
    by_length.sort_by_key(|&k| named[k].1.len());
    let mut budget = vec![0; named.len()];
    for (taken, &k) in by_length.iter().enumerate() {
        let share = left / (by_length.len() - taken);
        let whole = STDOUT.len() + named[k].1.len();
        let given = whole.min(share);
        // A tail of a few characters says nothing: then none is shown.
        if given == whole || given >= STDOUT.len() + ELLIPSIS.len() + MIN_TAIL {
            budget[k] = given;
            left -= given;
        }
    }
    // Inserted from the back, so that the positions recorded before stay valid.
    for (k, &(at, stdout)) in named.iter().enumerate().rev() {
        let given = budget[k];
        if given == 0 {
            continue;
        }
        let shown = if STDOUT.len() + stdout.len() <= given {
            format!("{STDOUT}{stdout}")
        } else {
            let room = given - STDOUT.len() - ELLIPSIS.len();
            format!("{STDOUT}{ELLIPSIS}{}", tail(stdout, room))
        };
        message.insert_str(at, &shown);
    }
    message
}

/// What introduces a stdout tail in `HooksCompleted`.
const STDOUT: &str = ", stdout: ";
/// What marks a stdout tail that was cut.
const ELLIPSIS: &str = "…";
/// The shortest cut tail worth showing, in bytes.
const MIN_TAIL: usize = 16;

/// The last at most `max` bytes of `s`, cut on a character boundary.
fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(i: usize, phase: HookPhase, stdout: &str) -> HookStatus {
        HookStatus {
            name: format!("hook-{i}"),
            index: i,
            container: "db".into(),
            phase,
            started_at: None,
            finished_at: None,
            exit_code: None,
            message: String::new(),
            stdout: stdout.into(),
            stderr: String::new(),
            retries: 0,
            unavailable: 0,
            retry_at: None,
        }
    }

    fn status(hooks: Vec<HookStatus>) -> ExecStatus {
        ExecStatus {
            hooks,
            message: String::new(),
        }
    }

    const RESTORE: &str = "nightly-20261206";

    #[test]
    fn short_outputs_are_shown_whole_after_the_counts() {
        let st = status(vec![
            hook(0, HookPhase::Succeeded, "out-1\n"),
            hook(1, HookPhase::Failed, "not shown"),
            hook(2, HookPhase::Succeeded, ""),
            hook(3, HookPhase::Succeeded, "ready\n"),
        ]);
        assert_eq!(
            completed_message(RESTORE, 4, &st, "failed"),
            "restore nightly-20261206: 4 hook(s): 3 succeeded, 1 failed, 0 skipped; \
             restore-hooks.dev/exec=failed. Succeeded: hook-0 (#0, db), stdout: out-1; \
             hook-2 (#2, db); hook-3 (#3, db), stdout: ready"
        );
    }

    #[test]
    fn without_successes_only_the_counts() {
        let st = status(vec![
            hook(0, HookPhase::Failed, ""),
            hook(1, HookPhase::Skipped, ""),
            hook(2, HookPhase::OtherPod, ""),
        ]);
        assert_eq!(
            completed_message(RESTORE, 3, &st, "failed"),
            "restore nightly-20261206: 3 hook(s): 0 succeeded, 1 failed, 1 skipped, 1 run by \
             another pod (runOn: OnePod); restore-hooks.dev/exec=failed"
        );
    }

    /// docs/behaviour.md §6.12: at most 1 KiB whatever the hooks say; every succeeded hook is
    /// named before any stdout is shown, and long outputs share the rest, each its tail.
    #[test]
    fn long_outputs_share_the_kib_as_tails() {
        // A short output is shown whole; the two long ones (1 KiB, multi-byte) get tails.
        let long = |c: char| format!("{}end-{c}\n", c.to_string().repeat(1020 / c.len_utf8()));
        let st = status(vec![
            hook(0, HookPhase::Succeeded, &long('é')),
            hook(1, HookPhase::Succeeded, "short"),
            hook(2, HookPhase::Succeeded, &long('x')),
        ]);
        let m = completed_message(RESTORE, 3, &st, "done");
        assert!(m.len() <= MAX_MESSAGE, "{} bytes: {m}", m.len());
        // Nearly all of it used: the tails took what the names left.
        assert!(m.len() > MAX_MESSAGE - 8, "{} bytes: {m}", m.len());
        assert!(m.contains("hook-1 (#1, db), stdout: short;"), "{m}");
        for (i, c) in [(0, 'é'), (2, 'x')] {
            let at = m.find(&format!("hook-{i} (#{i}, db), stdout: …")).unwrap();
            let tail = m[at..].split(';').next().unwrap();
            assert!(tail.ends_with(&format!("end-{c}")), "{tail}");
            assert!(tail.len() > 300, "a fair share: {tail}");
        }
    }

    #[test]
    fn many_hooks_are_named_while_there_is_room_and_counted_after() {
        let out = "y".repeat(1024);
        let hooks: Vec<HookStatus> = (0..300)
            .map(|i| hook(i, HookPhase::Succeeded, &out))
            .collect();
        let m = completed_message(RESTORE, 300, &status(hooks), "done");
        assert!(m.len() <= MAX_MESSAGE, "{} bytes: {m}", m.len());
        assert!(m.starts_with(&format!(
            "restore {RESTORE}: 300 hook(s): 300 succeeded, 0 failed, 0 skipped"
        )));
        let named = (0..300)
            .take_while(|i| m.contains(&format!(" hook-{i} (#{i}, db)")))
            .count();
        assert!(named > 10, "{m}");
        assert!(
            m.ends_with(&format!(" and {} more", 300 - named)),
            "the hooks not named are counted: {m}"
        );
        assert!(!m.contains("stdout"), "names come before outputs: {m}");
    }
}
