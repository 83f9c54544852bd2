//! The per-pod state machine, pure: from the plan, the recorded status, what the pod looks like
//! now and which execs this process is running, decide what the controller does next. No I/O and
//! no clock: `now` is an argument, so every rule of docs/behaviour.md §6 is a table row in the
//! tests below.
//!
//! The recorded status (`restore-hooks.dev/status`) is the only state shared between processes.
//! The reconciler writes what [`next_step`] returns before it acts on it, so a controller that
//! restarts (or a new leader) picks up exactly where the previous one stopped.
//!
//! Order (§6.3): the hooks of one container run one at a time, in plan order; containers do not
//! wait for each other. `onError: Fail` skips every remaining hook of the pod, in every container;
//! hooks already running elsewhere in the pod finish and are recorded.
//!
//! Failover (§6.10): a `Running` hook this process did not start may still be running in its
//! container (the previous leader was paused, or was killed while the exec went on: the exec API
//! cannot kill the remote process). It counts as in flight until `startedAt + execTimeout +
//! grace`; only then is it recorded as interrupted, and only then may the container's next hook
//! start. It is never run again: hooks run at most once.
//!
//! The module is long because of its tests: about half of it is the table of §6's rules (order,
//! waits, onError, failover, scope), one table-driven test per group of rules.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

use crate::hooks::duration::format_go_duration;
use crate::hooks::plan::{
    EXEC_DONE, EXEC_FAILED, ExecPlan, ExecStatus, HookPhase, HookStatus, OnError, PlannedHook,
    RunOn,
};
use crate::hooks::targets::{ContainerRole, ExecTargets};
use crate::restore::after::AfterTurn;
use crate::restore::one_pod::OnePodTurn;

/// Message of a hook found `Running` that its controller never finished recording.
pub const INTERRUPTED: &str = "interrupted: the controller that started the exec stopped before \
     recording its result (restart or failover); not re-run: hooks run at most once";

/// Whether a pod still exists, as far as the controller can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// The pod exists and is not being deleted: its hooks may run.
    Present,
    /// `metadata.deletionTimestamp` is set: the pod is going away but can still be patched.
    Terminating,
    /// The API server no longer has the pod (404 or a watch delete confirmed by a read).
    Gone,
}

/// One container's readiness for exec, and what the kubelet says about it when it is not up (named
/// when a wait expires, docs/behaviour.md §6.5).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerState {
    /// The container status has `state.running`: the container is up (docs/behaviour.md §6.4).
    pub running: bool,
    /// The container status has `ready: true`: up for a container with a `waitForReady` hook.
    pub ready: bool,
    /// `state.waiting.reason` (`ImagePullBackOff`, `CrashLoopBackOff`, ...).
    pub waiting_reason: Option<String>,
    /// How the container last ended: `state.terminated`, else `lastState.terminated`.
    pub last_exit: Option<LastExit>,
    /// `restartCount`.
    pub restarts: u32,
}

/// A container's last termination, as its status reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LastExit {
    /// `exitCode`.
    pub code: i32,
    /// `reason` (`Error`, `OOMKilled`, `Completed`), when given.
    pub reason: Option<String>,
}

/// The parts of a pod the state machine looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Whether the pod still exists (§6.8).
    pub presence: Presence,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub phase: Option<String>,
    /// `metadata.creationTimestamp`: `waitTimeout` counts from it (§6.5); `None`: no wait
    /// expires.
    pub created: Option<Timestamp>,
    /// Every container and whether it can be an exec target.
    pub targets: ExecTargets,
    /// Container statuses with their names, from `containerStatuses` and
    /// `initContainerStatuses` (where native sidecars report); see [`PodView::container`]. A
    /// list, not a map: the controller keeps one view per waiting pod, and a map of two
    /// containers allocates room for eleven.
    pub containers: Vec<(String, ContainerState)>,
}

impl PodView {
    /// A pod that no longer exists (the last view of it is unknown).
    pub fn gone() -> Self {
        PodView {
            presence: Presence::Gone,
            phase: None,
            created: None,
            targets: ExecTargets::default(),
            containers: Vec::new(),
        }
    }

    /// The status of the container named `name` (the first, were a name listed twice).
    pub fn container(&self, name: &str) -> Option<&ContainerState> {
        self.containers
            .iter()
            .find_map(|(n, state)| (n == name).then_some(state))
    }

    fn terminal_phase(&self) -> Option<&str> {
        match self.phase.as_deref() {
            Some(p @ ("Succeeded" | "Failed")) => Some(p),
            _ => None,
        }
    }
}

/// What the reconciler knows that the pod does not say.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The time of the decision: deadlines, `finishedAt` and waits are measured against it.
    pub now: Timestamp,
    /// Hooks whose exec this process runs right now (their `Running` record is its own).
    pub running_here: &'a BTreeSet<usize>,
    /// Hooks that may start but wait for an exec slot (`--max-concurrent-execs`): past their
    /// wait deadline they fail as starved, not as "container not up".
    pub awaiting_slot: &'a BTreeSet<usize>,
    /// How long past `startedAt + execTimeout` an inherited `Running` hook still counts as in
    /// flight (the time its controller needs to record a result).
    pub inherited_grace: SignedDuration,
    /// Why no new hook may run in this pod (an excluded namespace, no restore scope any more):
    /// every pending hook fails with this message.
    pub out_of_scope: Option<&'a str>,
    /// The turn of each pending `runOn: OnePod` hook in this pod (§6.15); a hook without an entry
    /// waits.
    pub one_pod: &'a BTreeMap<usize, OnePodTurn>,
    /// The turn of each pending hook with `after` in this pod (§6.16); a hook with `after` and no
    /// entry waits.
    pub after: &'a BTreeMap<usize, AfterTurn>,
}

/// A pod's hooks are first shown `Pending` in its status once it is this old (docs/behaviour.md
/// §6.19): the containers of most pods come up sooner, and the write that records the first hook
/// `Running` carries the whole status, so a restore of thousands of pods saves a pod write each.
pub const PENDING_QUIET: SignedDuration = SignedDuration::from_secs(5);

/// What the controller does next for one pod: the status to write first, the hooks to start, and
/// when to decide again (docs/behaviour.md §6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecStep {
    /// The status with every transition that needs no exec applied (interrupted, expired,
    /// skipped, pod gone, missing container).
    pub status: ExecStatus,
    /// True when `status` differs from what the pod carries and should be written before acting.
    pub write: bool,
    /// Hooks that became terminal in this decision (for Events, logs and metrics once written).
    pub ended: Vec<usize>,
    /// Hooks that may start now: at most one per container, none already running.
    pub start: Vec<usize>,
    /// Decide again at this time even if nothing changes (a wait or an in-flight deadline).
    pub wake_at: Option<Timestamp>,
    /// Every hook is terminal and no exec of this process is still to be recorded: set the
    /// `restore-hooks.dev/exec` label to this.
    pub finished: Option<&'static str>,
}

/// The plan with `--max-exec-timeout` applied to every hook. The state machine reads a hook's
/// execTimeout for the in-flight deadline of a `Running` hook another process started (§6.10:
/// the capped value, as no exec runs longer); the plan may hold a longer one (admitted under a
/// higher cap, or written by hand and signed by `inject`).
pub fn capped(mut plan: ExecPlan, max_exec_timeout_ms: u64) -> ExecPlan {
    for hook in &mut plan.hooks {
        hook.exec_timeout_ms = hook.exec_timeout_ms.min(max_exec_timeout_ms);
    }
    plan
}

/// Decides the next step for one pod. `recorded` is the pod's status annotation, if readable.
pub fn next_step(
    plan: &ExecPlan,
    recorded: Option<&ExecStatus>,
    pod: &PodView,
    ctx: &Context<'_>,
) -> ExecStep {
    let now = ctx.now;
    let mut status = align(plan, recorded);
    let mut ended = Vec::new();
    // Containers for which any hook asks for readiness: Velero's rule, kept (§6.4).
    let want_ready: BTreeSet<&str> = plan
        .hooks
        .iter()
        .filter(|h| h.wait_for_ready)
        .map(|h| h.container.as_str())
        .collect();
    let up = |hook: &PlannedHook| {
        is_up(
            pod,
            &hook.container,
            want_ready.contains(hook.container.as_str()),
        )
    };
    let containers: Vec<&str> = {
        let mut seen = BTreeSet::new();
        plan.hooks
            .iter()
            .map(|h| h.container.as_str())
            .filter(|c| seen.insert(*c))
            .collect()
    };
    // The first hook of `container` that has not ended.
    let current = |status: &ExecStatus, container: &str| {
        plan.hooks
            .iter()
            .enumerate()
            .find(|(i, h)| h.container == container && !status.hooks[*i].phase.is_terminal())
            .map(|(i, _)| i)
    };

    // Phase 1: every transition that needs no exec, until nothing changes.
    loop {
        let mut changed = false;
        if let Some(failed) = fail_stop(plan, &status) {
            changed |= skip_pending(&mut status, plan, failed, now, &mut ended);
        }
        for container in &containers {
            let Some(i) = current(&status, container) else {
                continue;
            };
            let hook = &plan.hooks[i];
            let entry = &status.hooks[i];
            let failed = |message: String| (HookPhase::Failed, message);
            let ends = match entry.phase {
                HookPhase::Running if ctx.running_here.contains(&i) => None,
                HookPhase::Running => {
                    // Inherited. Once the pod is gone the exec is gone with its container.
                    let deadline = in_flight_until(hook, entry, ctx.inherited_grace);
                    (pod.presence == Presence::Gone || deadline.is_none_or(|d| now >= d))
                        .then(|| failed(INTERRUPTED.to_string()))
                }
                // Another pod of the restore runs it: it never runs here (§6.15).
                HookPhase::Pending if let Some(why) = elsewhere(hook, i, ctx) => {
                    Some((HookPhase::OtherPod, format!("runOn: OnePod: {why}")))
                }
                // A hook refused or invalid at admission ends at once, with why (§9.9, §3.6).
                HookPhase::Pending => hook
                    .refused
                    .clone()
                    .or_else(|| hook.invalid.clone())
                    .or_else(|| {
                        ctx.out_of_scope
                            .filter(|_| pod.presence == Presence::Present)
                            .map(str::to_string)
                            .or_else(|| {
                                let blocked = Blocked {
                                    awaiting_slot: ctx.awaiting_slot.contains(&i),
                                    after: awaiting(hook, i, ctx),
                                    one_pod: !my_turn(hook, i, ctx),
                                };
                                cannot_run(hook, entry, pod, now, up(hook), blocked)
                            })
                    })
                    .map(failed)
                    // An awaited hook failed with onError: Fail: this one never runs (§6.16).
                    .or_else(|| match ctx.after.get(&i) {
                        Some(AfterTurn::Skip(why)) if !hook.after.is_empty() => {
                            Some((HookPhase::Skipped, why.clone()))
                        }
                        _ => None,
                    }),
                _ => None,
            };
            if let Some((phase, message)) = ends {
                end(&mut status.hooks[i], phase, message, now);
                ended.push(i);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }

    // Phase 2: what to start and when to look again.
    let mut start = Vec::new();
    let mut wake_at: Option<Timestamp> = None;
    let mut earliest = |t: Timestamp| wake_at = Some(wake_at.map_or(t, |w: Timestamp| w.min(t)));
    for container in &containers {
        let Some(i) = current(&status, container) else {
            continue;
        };
        let hook = &plan.hooks[i];
        let entry = &status.hooks[i];
        match entry.phase {
            HookPhase::Running if ctx.running_here.contains(&i) => {}
            HookPhase::Running => {
                if let Some(d) = in_flight_until(hook, entry, ctx.inherited_grace) {
                    earliest(d);
                }
            }
            HookPhase::Pending => {
                // A failed attempt waits out its backoff before the next one (§6.17).
                let retry_at = entry.retry_at.as_deref().and_then(|t| t.parse().ok());
                match retry_at {
                    Some(t) if now < t => earliest(t),
                    _ => {
                        if up(hook) && my_turn(hook, i, ctx) && awaiting(hook, i, ctx).is_none() {
                            start.push(i);
                        }
                    }
                }
                if let Some(d) = wait_deadline(hook, entry, pod) {
                    earliest(d);
                }
            }
            _ => {}
        }
    }
    start.sort_unstable();

    let all_ended = status.hooks.iter().all(|h| h.phase.is_terminal());
    // An exec of this process whose result is not written yet keeps the pod open even when its
    // status already reads terminal (another leader recorded it interrupted): the label is set
    // last, after every result this process holds (§6.9).
    let finished = (all_ended && ctx.running_here.is_empty()).then(|| {
        if status
            .hooks
            .iter()
            .all(|h| matches!(h.phase, HookPhase::Succeeded | HookPhase::OtherPod))
        {
            EXEC_DONE
        } else {
            EXEC_FAILED
        }
    });
    // A status that only gained its Pending shape is written when the pod has to wait, so that an
    // operator sees the pending hooks; when a hook starts, the Running write carries it anyway.
    // Not in the pod's first seconds: most pods' containers come up by then (§6.19).
    let differs = recorded != Some(&status);
    let shape_only = differs && start.is_empty() && !all_ended;
    let quiet_until = pod
        .created
        .and_then(|c| c.checked_add(PENDING_QUIET).ok())
        .filter(|t| now < *t);
    if shape_only && let Some(t) = quiet_until {
        wake_at = Some(wake_at.map_or(t, |w| w.min(t)));
    }
    let write = !ended.is_empty() || (shape_only && quiet_until.is_none());
    ExecStep {
        status,
        write,
        ended,
        start,
        wake_at,
        finished,
    }
}

/// The pod that runs `runOn: OnePod` hook `i` instead of this one, once its start is recorded.
fn elsewhere<'c>(hook: &PlannedHook, i: usize, ctx: &'c Context<'_>) -> Option<&'c str> {
    match ctx.one_pod.get(&i) {
        Some(OnePodTurn::Elsewhere(pod)) if hook.run_on == RunOn::OnePod => Some(pod),
        _ => None,
    }
}

/// Whether the hook may start in this pod as far as `runOn` goes: always for `EveryPod`; for
/// `OnePod`, only in the pod chosen for it (§6.15).
fn my_turn(hook: &PlannedHook, i: usize, ctx: &Context<'_>) -> bool {
    hook.run_on == RunOn::EveryPod || ctx.one_pod.get(&i) == Some(&OnePodTurn::Go)
}

/// What hook `i` still waits for through `after` (§6.16); `None` when it may start.
fn awaiting<'c>(hook: &PlannedHook, i: usize, ctx: &'c Context<'_>) -> Option<&'c str> {
    if hook.after.is_empty() {
        return None;
    }
    match ctx.after.get(&i) {
        Some(AfterTurn::Go) => None,
        Some(AfterTurn::Wait(why)) => Some(why),
        Some(AfterTurn::Skip(_)) | None => Some("the hooks it waits for (after)"),
    }
}

/// Whether hook `i`'s container is up for it (§6.4): what a `runOn: OnePod` candidate reports.
pub fn hook_is_up(plan: &ExecPlan, pod: &PodView, i: usize) -> bool {
    let container = &plan.hooks[i].container;
    let want_ready = plan
        .hooks
        .iter()
        .any(|h| h.wait_for_ready && &h.container == container);
    is_up(pod, container, want_ready)
}

/// The first failed `onError: Fail` hook, if any: everything pending after it is skipped.
fn fail_stop(plan: &ExecPlan, status: &ExecStatus) -> Option<usize> {
    plan.hooks
        .iter()
        .zip(&status.hooks)
        .position(|(h, s)| h.on_error == OnError::Fail && s.phase == HookPhase::Failed)
}

/// Until when an inherited `Running` hook may still be running: `None` when its record has no
/// readable start time (then it cannot be waited for).
fn in_flight_until(
    hook: &PlannedHook,
    entry: &HookStatus,
    grace: SignedDuration,
) -> Option<Timestamp> {
    let started: Timestamp = entry.started_at.as_deref()?.parse().ok()?;
    let timeout = SignedDuration::from_millis(i64::try_from(hook.exec_timeout_ms).ok()?);
    started.checked_add(timeout).ok()?.checked_add(grace).ok()
}

/// What else a pending hook waits for besides its container, for the message of an expired wait.
struct Blocked<'a> {
    /// An exec slot (`--max-concurrent-execs`).
    awaiting_slot: bool,
    /// Hooks it waits for through `after`, and which.
    after: Option<&'a str>,
    /// A `runOn: OnePod` hook this pod was not chosen for (yet).
    one_pod: bool,
}

/// Why the pending hook can never run, if so. In this order: the pod is gone or terminal, the
/// container cannot be targeted, the wait has expired.
fn cannot_run(
    hook: &PlannedHook,
    entry: &HookStatus,
    pod: &PodView,
    now: Timestamp,
    up: bool,
    blocked: Blocked<'_>,
) -> Option<String> {
    if pod.presence != Presence::Present {
        return Some("pod was deleted before the hook ran".to_string());
    }
    if let Some(phase) = pod.terminal_phase() {
        return Some(format!("pod reached phase {phase} before the hook ran"));
    }
    match pod.targets.role(&hook.container) {
        Some(ContainerRole::PlainInit) => {
            return Some(format!(
                "container {:?} is a plain init container; exec hooks can only target app containers and native sidecars",
                hook.container
            ));
        }
        None => {
            return Some(format!(
                "container {:?} does not exist in the pod (no app container or native sidecar of that name)",
                hook.container
            ));
        }
        Some(_) => {}
    }
    let d = wait_deadline(hook, entry, pod)?;
    if now < d {
        return None;
    }
    let wait = format_go_duration(hook.wait_timeout_ms.unwrap_or_default());
    Some(if let Some(what) = blocked.after.filter(|_| up) {
        format!(
            "waitTimeout {wait} of pod creation passed while waiting for {what} (after); not executed"
        )
    } else if blocked.one_pod && up {
        format!(
            "waitTimeout {wait} of pod creation passed while another pod was chosen to run it \
             (runOn: OnePod), or while no pod that may run it was known (a pod counts once \
             Velero, a workload controller or an identity that may exec created it); not executed"
        )
    } else if blocked.awaiting_slot {
        format!(
            "no exec slot within waitTimeout {wait} of pod creation (every slot was held by other \
             hooks; see --max-concurrent-execs); not executed"
        )
    } else if up {
        // The container came up, but earlier hooks (or controller downtime) used the wait.
        format!(
            "waitTimeout {wait} from pod creation passed before the hook's turn came; not executed"
        )
    } else {
        format!(
            "{} within waitTimeout {wait} of pod creation; not executed",
            not_up_reason(&hook.container, pod.container(&hook.container))
        )
    })
}

/// Why a container is not up, in the words an operator looks for in `kubectl describe pod`: never
/// started (and what it waits on), running but never Ready, or how it last ended (§6.5).
fn not_up_reason(container: &str, state: Option<&ContainerState>) -> String {
    let Some(state) = state else {
        return format!(
            "container {container} never started (the pod reports no status for it: not \
             scheduled, or its init containers have not finished)"
        );
    };
    if state.running {
        return format!(
            "container {container} was running but never Ready (a hook of it waits for Ready)"
        );
    }
    let mut facts = Vec::new();
    if let Some(reason) = &state.waiting_reason {
        facts.push(format!("waiting: {reason}"));
    }
    if state.restarts > 0 {
        facts.push(format!("restarted {} times", state.restarts));
    }
    if let Some(exit) = &state.last_exit {
        facts.push(match &exit.reason {
            Some(reason) => format!("last exit code {} ({reason})", exit.code),
            None => format!("last exit code {}", exit.code),
        });
    }
    let verb = if state.restarts == 0 && state.last_exit.is_none() {
        "never started"
    } else {
        "was not running"
    };
    if facts.is_empty() {
        format!("container {container} {verb}")
    } else {
        format!("container {container} {verb} ({})", facts.join(", "))
    }
}

/// When the hook's wait expires: `waitTimeout` after the pod's creation (so that a restarted
/// controller does not start the clock again). No creation time or no limit: never.
pub fn deadline(hook: &PlannedHook, pod: &PodView) -> Option<Timestamp> {
    let ms = hook.wait_timeout_ms?;
    let created = pod.created?;
    created
        .checked_add(SignedDuration::from_millis(i64::try_from(ms).ok()?))
        .ok()
}

/// The wait deadline of a pending hook: [`deadline`], and for a hook tried again after failed
/// attempts (§6.17), one `execTimeout` and one `maxBackoff` later per failed attempt that ran, so
/// that retries end as surely as waits do. Attempts that never reached the container add
/// nothing: they took no `execTimeout`, and an API server that stays away must not keep a hook
/// waiting for ever.
pub fn wait_deadline(hook: &PlannedHook, entry: &HookStatus, pod: &PodView) -> Option<Timestamp> {
    let d = deadline(hook, pod)?;
    let ran = entry.retries.saturating_sub(entry.unavailable);
    let Some(retry) = hook.retry.as_ref().filter(|_| ran > 0) else {
        return Some(d);
    };
    let per_attempt = hook.exec_timeout_ms.saturating_add(retry.max_backoff_ms);
    let extra = per_attempt.saturating_mul(u64::from(ran));
    d.checked_add(SignedDuration::from_millis(i64::try_from(extra).ok()?))
        .ok()
}

fn is_up(pod: &PodView, container: &str, want_ready: bool) -> bool {
    pod.container(container)
        .is_some_and(|c| if want_ready { c.ready } else { c.running })
}

/// Ends a hook that did not run here: `Failed`, `Skipped` (§6.7) or `OtherPod` (§6.15), with why.
fn end(entry: &mut HookStatus, phase: HookPhase, message: String, now: Timestamp) {
    entry.phase = phase;
    entry.message = message;
    entry.finished_at = Some(timestamp(now));
}

/// Skips every pending hook of the pod after an `onError: Fail` failure; running ones finish.
fn skip_pending(
    status: &mut ExecStatus,
    plan: &ExecPlan,
    failed: usize,
    now: Timestamp,
    ended: &mut Vec<usize>,
) -> bool {
    let by = &plan.hooks[failed];
    let mut changed = false;
    for (j, entry) in status.hooks.iter_mut().enumerate() {
        if entry.phase == HookPhase::Pending {
            let why = format!(
                "skipped: hook {} (#{failed}) failed with onError: Fail",
                by.name
            );
            end(entry, HookPhase::Skipped, why, now);
            ended.push(j);
            changed = true;
        }
    }
    changed
}

/// The recorded status lined up with the plan: one entry per plan hook, in plan order. Entries that
/// do not match the plan hook at their position (another plan, a hand edit) start over as Pending.
/// A plan that grew (late hooks appended) keeps the entries of its earlier hooks.
pub fn align(plan: &ExecPlan, recorded: Option<&ExecStatus>) -> ExecStatus {
    let hooks = plan
        .hooks
        .iter()
        .enumerate()
        .map(|(i, hook)| {
            recorded
                .and_then(|s| s.hooks.get(i))
                .filter(|s| {
                    s.name == hook.name && s.index == hook.index && s.container == hook.container
                })
                .cloned()
                .unwrap_or_else(|| pending(hook))
        })
        .collect();
    ExecStatus {
        hooks,
        message: recorded.map(|r| r.message.clone()).unwrap_or_default(),
    }
}

/// The status entry of a plan hook that has not started: `Pending`, copying its `name`, `index`
/// and `container` (docs/behaviour.md §5.3).
pub fn pending(hook: &PlannedHook) -> HookStatus {
    HookStatus {
        name: hook.name.clone(),
        index: hook.index,
        container: hook.container.clone(),
        phase: HookPhase::Pending,
        started_at: None,
        finished_at: None,
        exit_code: None,
        message: String::new(),
        stdout: String::new(),
        stderr: String::new(),
        retries: 0,
        unavailable: 0,
        retry_at: None,
    }
}

/// RFC 3339 in whole seconds, UTC (`2026-12-02T10:00:00Z`), as Kubernetes writes times.
pub fn timestamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(name: &str, container: &str) -> PlannedHook {
        PlannedHook::example(name, &format!("restorehook/{name}"), container)
    }

    fn plan(hooks: Vec<PlannedHook>) -> ExecPlan {
        ExecPlan {
            restore: "r".to_string(),
            hooks,
            ..Default::default()
        }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    /// A present, running pod (phase Running) created at t(0) with containers `app`, `db`,
    /// native sidecar `sidecar` and plain init container `restore-hooks-init`.
    fn pod(up: &[(&str, bool, bool)]) -> PodView {
        PodView {
            presence: Presence::Present,
            phase: Some("Running".to_string()),
            created: Some(t(0)),
            targets: ExecTargets::new(
                ["app", "db"],
                [("restore-hooks-init", None), ("sidecar", Some("Always"))],
            ),
            containers: up
                .iter()
                .map(|(n, running, ready)| {
                    (
                        n.to_string(),
                        ContainerState {
                            running: *running,
                            ready: *ready,
                            ..ContainerState::default()
                        },
                    )
                })
                .collect(),
        }
    }

    fn with_phases(plan: &ExecPlan, phases: &[HookPhase]) -> ExecStatus {
        let mut s = align(plan, None);
        for (h, p) in s.hooks.iter_mut().zip(phases) {
            h.phase = *p;
        }
        s
    }

    fn phases(d: &ExecStep) -> Vec<HookPhase> {
        d.status.hooks.iter().map(|h| h.phase).collect()
    }

    const NONE: &BTreeSet<usize> = &BTreeSet::new();
    const NO_TURNS: &BTreeMap<usize, OnePodTurn> = &BTreeMap::new();
    const NO_AFTER: &BTreeMap<usize, AfterTurn> = &BTreeMap::new();

    fn at(secs: i64) -> Context<'static> {
        Context {
            now: t(secs),
            running_here: NONE,
            awaiting_slot: NONE,
            inherited_grace: SignedDuration::from_secs(30),
            out_of_scope: None,
            one_pod: NO_TURNS,
            after: NO_AFTER,
        }
    }

    fn running_here(set: &BTreeSet<usize>, secs: i64) -> Context<'_> {
        Context {
            running_here: set,
            ..at(secs)
        }
    }

    use HookPhase::{
        Failed as F, OtherPod as OnePodPhase, Pending as P, Running as R, Skipped as S,
        Succeeded as OK,
    };

    #[test]
    fn each_container_runs_its_hooks_in_plan_order_independently() {
        let p = plan(vec![hook("a", "db"), hook("b", "app"), hook("c", "db")]);
        struct Row {
            what: &'static str,
            recorded: Vec<HookPhase>,
            here: Vec<usize>,
            up: Vec<(&'static str, bool, bool)>,
            start: Vec<usize>,
            finished: Option<&'static str>,
        }
        let rows = [
            Row {
                what: "nothing up: wait",
                recorded: vec![],
                here: vec![],
                up: vec![],
                start: vec![],
                finished: None,
            },
            Row {
                what: "app up: its hook starts although db's first hook has not",
                recorded: vec![],
                here: vec![],
                up: vec![("app", true, true)],
                start: vec![1],
                finished: None,
            },
            Row {
                what: "both up: the first hook of each container starts",
                recorded: vec![],
                here: vec![],
                up: vec![("db", true, false), ("app", true, false)],
                start: vec![0, 1],
                finished: None,
            },
            Row {
                what: "db's first hook running here: its second waits; app's goes",
                recorded: vec![R, P, P],
                here: vec![0],
                up: vec![("db", true, true), ("app", true, true)],
                start: vec![1],
                finished: None,
            },
            Row {
                what: "db's first hook done: its second starts",
                recorded: vec![OK, R, P],
                here: vec![1],
                up: vec![("db", true, true), ("app", true, true)],
                start: vec![2],
                finished: None,
            },
            Row {
                what: "a Continue failure goes on",
                recorded: vec![F, OK, P],
                here: vec![],
                up: vec![("db", true, true)],
                start: vec![2],
                finished: None,
            },
            Row {
                what: "all succeeded: done",
                recorded: vec![OK, OK, OK],
                here: vec![],
                up: vec![],
                start: vec![],
                finished: Some(EXEC_DONE),
            },
            Row {
                what: "one failed: failed",
                recorded: vec![OK, F, OK],
                here: vec![],
                up: vec![],
                start: vec![],
                finished: Some(EXEC_FAILED),
            },
        ];
        for row in rows {
            let recorded = (!row.recorded.is_empty()).then(|| with_phases(&p, &row.recorded));
            let here: BTreeSet<usize> = row.here.iter().copied().collect();
            let d = next_step(
                &p,
                recorded.as_ref(),
                &pod(&row.up),
                &running_here(&here, 5),
            );
            assert_eq!(d.start, row.start, "{}", row.what);
            assert_eq!(d.finished, row.finished, "{}", row.what);
            assert!(d.ended.is_empty(), "{}", row.what);
        }
    }

    /// A never-ready sidecar does not hold back the database's hooks; its own hook expires.
    #[test]
    fn a_never_ready_sidecar_blocks_only_its_own_hooks() {
        let mut side = hook("metrics", "sidecar");
        side.wait_for_ready = true;
        side.wait_timeout_ms = Some(10_000);
        let p = plan(vec![side, hook("db", "db")]);
        let view = pod(&[("sidecar", true, false), ("db", true, true)]);
        let d = next_step(&p, None, &view, &at(1));
        assert_eq!(d.start, vec![1]);
        assert_eq!(d.wake_at, Some(t(10)));
        let done = with_phases(&p, &[P, OK]);
        let d = next_step(&p, Some(&done), &view, &at(10));
        assert_eq!(phases(&d), vec![F, OK]);
        assert!(d.status.hooks[0].message.contains(
            "running but never Ready (a hook of it waits for Ready) within waitTimeout 10s"
        ));
        assert_eq!(d.finished, Some(EXEC_FAILED));
    }

    #[test]
    fn wait_for_ready_applies_to_every_hook_of_that_container() {
        let mut ready = hook("b", "db");
        ready.wait_for_ready = true;
        let p = plan(vec![hook("a", "db"), ready]);
        let running_not_ready = pod(&[("db", true, false)]);
        assert!(
            next_step(&p, None, &running_not_ready, &at(1))
                .start
                .is_empty()
        );
        let ready_pod = pod(&[("db", true, true)]);
        assert_eq!(next_step(&p, None, &ready_pod, &at(1)).start, vec![0]);
    }

    #[test]
    fn native_sidecars_are_targets_and_plain_init_containers_are_not() {
        let p = plan(vec![hook("a", "sidecar")]);
        let d = next_step(&p, None, &pod(&[("sidecar", true, false)]), &at(1));
        assert_eq!(d.start, vec![0]);

        let p = plan(vec![hook("a", "restore-hooks-init"), hook("b", "db")]);
        let d = next_step(&p, None, &pod(&[("db", true, true)]), &at(1));
        assert_eq!(phases(&d), vec![F, P]);
        assert!(d.status.hooks[0].message.contains("plain init container"));
        assert_eq!(d.start, vec![1]);
        assert!(d.write);
        assert_eq!(d.ended, vec![0]);
    }

    #[test]
    fn a_missing_container_fails_at_once_without_waiting() {
        let p = plan(vec![hook("a", "nope")]);
        let d = next_step(&p, None, &pod(&[]), &at(1));
        assert_eq!(phases(&d), vec![F]);
        assert_eq!(
            d.status.hooks[0].message,
            "container \"nope\" does not exist in the pod (no app container or native sidecar of that name)"
        );
        assert_eq!(d.finished, Some(EXEC_FAILED));
    }

    #[test]
    fn wait_timeout_counts_from_creation_and_expired_hooks_are_not_executed() {
        let mut h = hook("a", "db");
        h.wait_timeout_ms = Some(10_000);
        let p = plan(vec![h, hook("b", "db")]);
        // In the pod's first 5 s: nothing written yet, look again when they are over.
        let d = next_step(&p, None, &pod(&[]), &at(3));
        assert_eq!(d.wake_at, Some(t(5)));
        assert!(!d.write, "no Pending status in the pod's first seconds");
        // Before the deadline: wait until it.
        let d = next_step(&p, None, &pod(&[]), &at(6));
        assert_eq!(d.wake_at, Some(t(10)));
        assert!(d.write, "the Pending status is written while waiting");
        assert!(d.ended.is_empty());
        // At the deadline, not up: expired, not started; the next hook (Continue) goes on.
        let d = next_step(&p, None, &pod(&[]), &at(10));
        assert_eq!(phases(&d), vec![F, P]);
        assert_eq!(
            d.status.hooks[0].message,
            "container db never started (the pod reports no status for it: not scheduled, or its \
             init containers have not finished) within waitTimeout 10s of pod creation; not executed"
        );
        // Up, but the turn came too late: still not executed.
        let d = next_step(&p, None, &pod(&[("db", true, true)]), &at(11));
        assert_eq!(phases(&d)[0], F);
        assert!(d.status.hooks[0].message.contains("turn came"));
        assert_eq!(d.start, vec![1]);
        // Up in time: runs.
        let d = next_step(&p, None, &pod(&[("db", true, true)]), &at(9));
        assert_eq!(d.start, vec![0]);
    }

    #[test]
    fn an_expired_wait_says_why_the_container_was_not_up() {
        let waiting = |reason: &str| ContainerState {
            waiting_reason: Some(reason.to_string()),
            ..ContainerState::default()
        };
        let crashing = ContainerState {
            waiting_reason: Some("CrashLoopBackOff".into()),
            restarts: 5,
            last_exit: Some(LastExit {
                code: 1,
                reason: Some("Error".into()),
            }),
            ..ContainerState::default()
        };
        let exited = ContainerState {
            last_exit: Some(LastExit {
                code: 137,
                reason: None,
            }),
            ..ContainerState::default()
        };
        let not_ready = ContainerState {
            running: true,
            ..ContainerState::default()
        };
        let cases: [(&str, ContainerState, bool, &str); 5] = [
            (
                "image never pulled",
                waiting("ImagePullBackOff"),
                false,
                "container db never started (waiting: ImagePullBackOff)",
            ),
            (
                "crash loop",
                crashing,
                false,
                "container db was not running (waiting: CrashLoopBackOff, restarted 5 times, last exit code 1 (Error))",
            ),
            (
                "exited for good",
                exited,
                false,
                "container db was not running (last exit code 137)",
            ),
            (
                "no facts at all",
                ContainerState::default(),
                false,
                "container db never started",
            ),
            (
                "running, a hook waits for Ready",
                not_ready,
                true,
                "container db was running but never Ready (a hook of it waits for Ready)",
            ),
        ];
        for (case, state, wait_for_ready, reason) in cases {
            let mut h = hook("a", "db");
            h.wait_timeout_ms = Some(3_600_000);
            h.wait_for_ready = wait_for_ready;
            let p = plan(vec![h]);
            let mut view = pod(&[]);
            view.containers.push(("db".into(), state));
            let d = next_step(&p, None, &view, &at(3_600));
            assert_eq!(phases(&d), vec![F], "{case}");
            assert_eq!(
                d.status.hooks[0].message,
                format!("{reason} within waitTimeout 1h0m0s of pod creation; not executed"),
                "{case}"
            );
        }
    }

    #[test]
    fn a_hook_starved_of_exec_slots_fails_at_its_wait_deadline() {
        let mut h = hook("a", "db");
        h.wait_timeout_ms = Some(10_000);
        let p = plan(vec![h]);
        let waiting: BTreeSet<usize> = [0].into();
        let ctx = Context {
            awaiting_slot: &waiting,
            ..at(10)
        };
        let d = next_step(&p, None, &pod(&[("db", true, true)]), &ctx);
        assert_eq!(phases(&d), vec![F]);
        assert!(
            d.status.hooks[0]
                .message
                .starts_with("no exec slot within waitTimeout 10s")
        );
    }

    #[test]
    fn on_error_fail_skips_the_remaining_hooks_of_every_container() {
        let mut first = hook("a", "db");
        first.on_error = OnError::Fail;
        first.wait_timeout_ms = Some(1000);
        let p = plan(vec![
            first,
            hook("b", "db"),
            hook("c", "app"),
            hook("d", "sidecar"),
        ]);
        // A recorded Fail failure (after an exec); app's hook is running here and finishes.
        let here: BTreeSet<usize> = [2].into();
        let d = next_step(
            &p,
            Some(&with_phases(&p, &[F, P, R, P])),
            &pod(&[("db", true, true), ("app", true, true)]),
            &running_here(&here, 5),
        );
        assert_eq!(phases(&d), vec![F, S, R, S]);
        assert_eq!(d.ended, vec![1, 3]);
        assert_eq!(
            d.status.hooks[1].message,
            "skipped: hook a (#0) failed with onError: Fail"
        );
        assert!(d.start.is_empty());
        assert_eq!(d.finished, None, "hook c still runs");
        // An expiry of a Fail hook skips as well.
        let d = next_step(&p, None, &pod(&[]), &at(5));
        assert_eq!(phases(&d), vec![F, S, S, S]);
        assert_eq!(d.ended, vec![0, 1, 2, 3]);
    }

    #[test]
    fn an_inherited_running_hook_is_in_flight_until_its_timeout_and_grace() {
        let p = plan(vec![hook("a", "db"), hook("b", "db")]);
        let mut status = with_phases(&p, &[R, P]);
        status.hooks[0].started_at = Some(timestamp(t(0)));
        let up = pod(&[("db", true, true)]);
        // 30 s exec timeout + 30 s grace: before t(60) the next hook of db never starts.
        for secs in [1, 59] {
            let d = next_step(&p, Some(&status), &up, &at(secs));
            assert_eq!(phases(&d), vec![R, P], "at {secs}");
            assert!(d.start.is_empty(), "at {secs}");
            assert_eq!(d.wake_at, Some(t(60)));
            assert!(!d.write);
        }
        let d = next_step(&p, Some(&status), &up, &at(60));
        assert_eq!(phases(&d), vec![F, P]);
        assert_eq!(d.status.hooks[0].message, INTERRUPTED);
        assert_eq!(d.start, vec![1]);
        assert!(d.write);
        // Without a readable start time it cannot be waited for: interrupted at once.
        status.hooks[0].started_at = None;
        let d = next_step(&p, Some(&status), &up, &at(1));
        assert_eq!(phases(&d), vec![F, P]);
        // The previous owner of the record finishing in time is just a recorded result.
        let mut finished = with_phases(&p, &[OK, P]);
        finished.hooks[0].started_at = Some(timestamp(t(0)));
        assert_eq!(next_step(&p, Some(&finished), &up, &at(2)).start, vec![1]);
    }

    #[test]
    fn a_pod_is_finished_only_once_no_exec_of_this_process_is_unrecorded() {
        let p = plan(vec![hook("a", "db"), hook("b", "app")]);
        let up = pod(&[("db", true, true), ("app", true, true)]);
        // Hook 1's status reads terminal (another leader wrote it interrupted) while its exec
        // still runs here: its result comes first, the label after.
        let status = with_phases(&p, &[OK, F]);
        let here = BTreeSet::from([1]);
        let d = next_step(&p, Some(&status), &up, &running_here(&here, 5));
        assert_eq!(d.finished, None);
        assert!(!d.write && d.start.is_empty());
        let d = next_step(&p, Some(&status), &up, &at(5));
        assert_eq!(d.finished, Some(EXEC_FAILED));
    }

    #[test]
    fn exec_timeouts_are_capped_for_in_flight_deadlines() {
        let mut long = hook("a", "db");
        long.exec_timeout_ms = 3_600_000;
        let short = hook("b", "db");
        let p = capped(plan(vec![long, short.clone()]), 60_000);
        assert_eq!(p.hooks[0].exec_timeout_ms, 60_000);
        assert_eq!(
            p.hooks[1].exec_timeout_ms,
            short.exec_timeout_ms.min(60_000)
        );
    }

    #[test]
    fn an_interrupted_fail_hook_skips_the_rest() {
        let mut first = hook("a", "db");
        first.on_error = OnError::Fail;
        let p = plan(vec![first, hook("c", "db")]);
        let d = next_step(
            &p,
            Some(&with_phases(&p, &[R, P])),
            &pod(&[("db", true, true)]),
            &at(5),
        );
        assert_eq!(phases(&d), vec![F, S]);
    }

    /// `runOn: OnePod` (§6.15): only the chosen pod starts the hook; once another pod started it,
    /// it ends here as `OtherPod`, which does not fail the pod; its wait still expires.
    #[test]
    fn one_pod_hooks_start_only_in_the_chosen_pod() {
        use OnePodTurn::{Elsewhere, Go, Wait};
        let mut once = hook("migrate", "db");
        once.run_on = RunOn::OnePod;
        once.wait_timeout_ms = Some(10_000);
        let p = plan(vec![once, hook("local", "db")]);
        let up = pod(&[("db", true, true)]);
        struct Row {
            what: &'static str,
            turn: Option<OnePodTurn>,
            secs: i64,
            phases: Vec<HookPhase>,
            start: Vec<usize>,
            finished: Option<&'static str>,
        }
        let rows = [
            Row {
                what: "chosen: it starts",
                turn: Some(Go),
                secs: 1,
                phases: vec![P, P],
                start: vec![0],
                finished: None,
            },
            Row {
                what: "not chosen: it waits, and so does the container's next hook",
                turn: Some(Wait),
                secs: 1,
                phases: vec![P, P],
                start: vec![],
                finished: None,
            },
            Row {
                what: "no turn known: it waits",
                turn: None,
                secs: 1,
                phases: vec![P, P],
                start: vec![],
                finished: None,
            },
            Row {
                what: "started elsewhere: OtherPod, and the next hook starts",
                turn: Some(Elsewhere("pod shop/db-0 runs it for the restore".into())),
                secs: 1,
                phases: vec![OnePodPhase, P],
                start: vec![1],
                finished: None,
            },
            Row {
                what: "never chosen before its wait expired: Failed",
                turn: Some(Wait),
                secs: 10,
                phases: vec![F, P],
                start: vec![1],
                finished: None,
            },
        ];
        for row in rows {
            let turns: BTreeMap<usize, OnePodTurn> =
                row.turn.clone().map(|t| (0, t)).into_iter().collect();
            let ctx = Context {
                one_pod: &turns,
                ..at(row.secs)
            };
            let d = next_step(&p, None, &up, &ctx);
            assert_eq!(phases(&d), row.phases, "{}", row.what);
            assert_eq!(d.start, row.start, "{}", row.what);
            assert_eq!(d.finished, row.finished, "{}", row.what);
            if row.phases[0] == F {
                assert!(
                    d.status.hooks[0]
                        .message
                        .contains("passed while another pod was chosen to run it (runOn: OnePod)"),
                    "{}: {}",
                    row.what,
                    d.status.hooks[0].message
                );
            }
        }
        // Ran elsewhere, and the pod's own hook succeeded: the pod is done, not failed.
        let turns: BTreeMap<usize, OnePodTurn> =
            [(0, Elsewhere("pod shop/db-0 runs it for the restore".into()))].into();
        let ctx = Context {
            one_pod: &turns,
            ..at(2)
        };
        let d = next_step(&p, Some(&with_phases(&p, &[P, OK])), &up, &ctx);
        assert_eq!(phases(&d), vec![OnePodPhase, OK]);
        assert_eq!(
            d.status.hooks[0].message,
            "runOn: OnePod: pod shop/db-0 runs it for the restore"
        );
        assert_eq!(d.finished, Some(EXEC_DONE));
        assert!(d.write);
    }

    /// `after` (§6.16): a hook starts only once the hooks it waits for ended well; it is skipped
    /// when one failed with onError: Fail; its wait still expires, saying what it waited for.
    /// The container's next hook waits behind it, as behind any hook.
    #[test]
    fn after_hooks_start_only_once_what_they_wait_for_ended() {
        use AfterTurn::{Go, Skip, Wait};
        let mut migrate = hook("migrate", "app");
        migrate.after = vec!["db-restore".into()];
        migrate.wait_timeout_ms = Some(10_000);
        let p = plan(vec![migrate, hook("warm", "app"), hook("other", "db")]);
        let up = pod(&[("app", true, true), ("db", true, true)]);
        let waiting = || Wait("hook db-restore has not ended in pod shop/db-0".into());
        struct Row {
            what: &'static str,
            turn: Option<AfterTurn>,
            up: bool,
            secs: i64,
            phases: Vec<HookPhase>,
            start: Vec<usize>,
            message: &'static str,
        }
        let rows = [
            Row {
                what: "done: it starts",
                turn: Some(Go),
                up: true,
                secs: 1,
                phases: vec![P, P, P],
                start: vec![0, 2],
                message: "",
            },
            Row {
                what: "waiting: it and its container's next hook wait, other containers go on",
                turn: Some(waiting()),
                up: true,
                secs: 1,
                phases: vec![P, P, P],
                start: vec![2],
                message: "",
            },
            Row {
                what: "no turn known: it waits",
                turn: None,
                up: true,
                secs: 1,
                phases: vec![P, P, P],
                start: vec![2],
                message: "",
            },
            Row {
                what: "an awaited hook failed with onError Fail: Skipped, the next hook goes on",
                turn: Some(Skip(
                    "after: hook db-restore failed in pod shop/db-0 (onError: Fail); not executed"
                        .into(),
                )),
                up: false,
                secs: 1,
                phases: vec![S, P, P],
                start: vec![2],
                message: "after: hook db-restore failed in pod shop/db-0 (onError: Fail); not executed",
            },
            Row {
                what: "the wait expired while waiting: Failed, naming what it waited for",
                turn: Some(waiting()),
                up: true,
                secs: 10,
                phases: vec![F, P, P],
                start: vec![1, 2],
                message: "waitTimeout 10s of pod creation passed while waiting for hook db-restore \
                          has not ended in pod shop/db-0 (after); not executed",
            },
            Row {
                what: "the wait expired before the container came up: the container is named",
                turn: Some(waiting()),
                up: false,
                secs: 10,
                phases: vec![F, P, P],
                start: vec![2],
                message: "container app never started (the pod reports no status for it: not \
                          scheduled, or its init containers have not finished) within waitTimeout \
                          10s of pod creation; not executed",
            },
        ];
        let down = pod(&[("db", true, true)]);
        for row in rows {
            let turns: BTreeMap<usize, AfterTurn> =
                row.turn.clone().map(|t| (0, t)).into_iter().collect();
            let ctx = Context {
                after: &turns,
                ..at(row.secs)
            };
            let d = next_step(&p, None, if row.up { &up } else { &down }, &ctx);
            assert_eq!(phases(&d), row.phases, "{}", row.what);
            assert_eq!(d.start, row.start, "{}", row.what);
            assert_eq!(d.status.hooks[0].message, row.message, "{}", row.what);
        }
    }

    /// `retry` (§6.17): a failed attempt waits out its `retryAt` before the next starts, and its
    /// wait deadline moves on by one execTimeout and one maxBackoff per failed attempt.
    #[test]
    fn a_retried_hook_starts_again_at_its_retry_time_within_its_longer_wait() {
        let mut h = hook("migrate", "db");
        h.wait_timeout_ms = Some(10_000);
        h.exec_timeout_ms = 4_000;
        h.retry = Some(crate::hooks::plan::RetryPlan {
            attempts: 3,
            backoff_ms: 1_000,
            max_backoff_ms: 2_000,
            on_exit_codes: vec![],
            idempotent: false,
        });
        let p = plan(vec![h]);
        let retried = |at: &str| {
            let mut s = align(&p, None);
            s.hooks[0].retries = 1;
            s.hooks[0].retry_at = Some(at.to_string());
            s
        };
        let up = pod(&[("db", true, true)]);
        let down = pod(&[]);
        // Before its retry time: nothing starts, it wakes then.
        let d = next_step(&p, Some(&retried(&timestamp(t(8)))), &up, &at(7));
        assert_eq!((d.start.clone(), d.wake_at), (vec![], Some(t(8))));
        // At its retry time it starts.
        let d = next_step(&p, Some(&retried(&timestamp(t(8)))), &up, &at(8));
        assert_eq!(d.start, vec![0]);
        // Past the first wait deadline (10 s) it still may: 10 + 1 × (4 + 2) = 16 s.
        let d = next_step(&p, Some(&retried(&timestamp(t(12)))), &down, &at(15));
        assert_eq!((phases(&d), d.wake_at), (vec![P], Some(t(16))));
        let d = next_step(&p, Some(&retried(&timestamp(t(12)))), &down, &at(16));
        assert_eq!(phases(&d), vec![F]);
        assert!(
            d.status.hooks[0].message.contains("within waitTimeout 10s"),
            "{}",
            d.status.hooks[0].message
        );
    }

    #[test]
    fn a_pod_out_of_scope_runs_nothing_more() {
        let p = plan(vec![hook("a", "db"), hook("b", "app")]);
        let ctx = Context {
            out_of_scope: Some("namespace kube-system is excluded"),
            ..at(1)
        };
        let d = next_step(
            &p,
            Some(&with_phases(&p, &[OK, P])),
            &pod(&[("app", true, true)]),
            &ctx,
        );
        assert_eq!(phases(&d), vec![OK, F]);
        assert_eq!(
            d.status.hooks[1].message,
            "namespace kube-system is excluded"
        );
        assert!(d.start.is_empty());
        assert_eq!(d.finished, Some(EXEC_FAILED));
    }

    #[test]
    fn a_refused_hook_fails_at_once_and_its_container_moves_on() {
        let mut refused = hook("annotation", "db");
        refused.refused = Some("refused: the pod was created by mallory".to_string());
        let p = plan(vec![refused.clone(), hook("b", "db"), hook("c", "app")]);
        // Whether its container is up or not: it never waits and never starts.
        for up in [vec![], vec![("db", true, true), ("app", true, true)]] {
            let d = next_step(&p, None, &pod(&up), &at(1));
            assert_eq!(phases(&d)[0], F, "{up:?}");
            assert_eq!(d.status.hooks[0].message, refused.refused.clone().unwrap());
            assert!(!d.start.contains(&0), "{up:?}");
            assert!(d.ended.contains(&0) && d.write, "{up:?}");
        }
        let d = next_step(&p, None, &pod(&[("db", true, true)]), &at(1));
        assert_eq!(d.start, vec![1], "the next hook of its container runs");
        // With onError: Fail it stops the pod's other hooks, as a failure would.
        let mut fail = refused;
        fail.on_error = OnError::Fail;
        let p = plan(vec![fail, hook("b", "db"), hook("c", "app")]);
        let d = next_step(
            &p,
            None,
            &pod(&[("db", true, true), ("app", true, true)]),
            &at(1),
        );
        assert_eq!(phases(&d), vec![F, S, S]);
        assert_eq!(d.finished, Some(EXEC_FAILED));
    }

    /// §3.6: a hook the pod was admitted without, planned as invalid (no command, no container),
    /// fails at once with why; the pod's other hooks run and the pod ends `failed`.
    #[test]
    fn an_invalid_hook_fails_at_once_without_a_container() {
        let mut invalid = hook("broken", "");
        invalid.command.clear();
        invalid.invalid =
            Some("invalid, not executed: restorehook/broken postHooks[0].exec onError: ...".into());
        let p = plan(vec![hook("a", "db"), invalid.clone()]);
        let up = pod(&[("db", true, true)]);
        let d = next_step(&p, None, &up, &at(1));
        assert_eq!(phases(&d), vec![P, F]);
        assert_eq!(d.status.hooks[1].message, invalid.invalid.clone().unwrap());
        assert_eq!(d.start, vec![0], "the valid hook starts");
        let d = next_step(&p, Some(&with_phases(&p, &[OK, F])), &up, &at(2));
        assert_eq!(d.finished, Some(EXEC_FAILED));
    }

    #[test]
    fn pod_terminal_or_deleted_fails_the_remaining_hooks() {
        let p = plan(vec![hook("a", "db"), hook("b", "db")]);
        let mut done = pod(&[]);
        done.phase = Some("Succeeded".to_string());
        let d = next_step(&p, Some(&with_phases(&p, &[OK, P])), &done, &at(5));
        assert_eq!(phases(&d), vec![OK, F]);
        assert_eq!(
            d.status.hooks[1].message,
            "pod reached phase Succeeded before the hook ran"
        );
        assert_eq!(d.finished, Some(EXEC_FAILED));

        for presence in [Presence::Terminating, Presence::Gone] {
            let mut gone = pod(&[("db", true, true)]);
            gone.presence = presence;
            let d = next_step(&p, None, &gone, &at(5));
            assert_eq!(phases(&d), vec![F, F], "{presence:?}: Failed, not Skipped");
            assert_eq!(
                d.status.hooks[0].message,
                "pod was deleted before the hook ran"
            );
            assert_eq!(d.ended, vec![0, 1]);
        }
    }

    #[test]
    fn a_decided_status_is_stable() {
        // Deciding again on the written status settles nothing new and writes nothing.
        let p = plan(vec![hook("a", "nope"), hook("b", "db")]);
        let first = next_step(&p, None, &pod(&[]), &at(1));
        assert!(first.write);
        let again = next_step(&p, Some(&first.status), &pod(&[]), &at(2));
        assert!(!again.write);
        assert!(again.ended.is_empty());
        assert!(again.start.is_empty() && again.finished.is_none());
    }

    #[test]
    fn no_write_before_a_start_when_only_the_shape_is_new() {
        let p = plan(vec![hook("a", "db")]);
        let d = next_step(&p, None, &pod(&[("db", true, false)]), &at(1));
        assert_eq!(d.start, vec![0]);
        assert!(!d.write);
    }

    #[test]
    fn status_from_another_plan_starts_over_and_a_grown_plan_keeps_its_past() {
        let p = plan(vec![hook("a", "db")]);
        let mut stale = with_phases(&p, &[OK]);
        stale.hooks[0].name = "other".to_string();
        let d = next_step(&p, Some(&stale), &pod(&[("db", true, true)]), &at(1));
        assert_eq!(d.start, vec![0]);
        assert_eq!(d.status.hooks[0].name, "a");

        let grown = plan(vec![hook("a", "db"), hook("late", "db")]);
        let d = next_step(
            &grown,
            Some(&with_phases(&p, &[OK])),
            &pod(&[("db", true, true)]),
            &at(1),
        );
        assert_eq!(phases(&d), vec![OK, P]);
        assert_eq!(d.start, vec![1]);
    }

    #[test]
    fn an_empty_plan_is_done() {
        let d = next_step(&plan(vec![]), None, &pod(&[]), &at(1));
        assert_eq!(d.finished, Some(EXEC_DONE));
        assert!(!d.write);
    }

    #[test]
    fn timestamps_are_whole_seconds_in_utc() {
        assert_eq!(timestamp(t(0)), "2027-01-15T08:00:00Z");
    }
}
