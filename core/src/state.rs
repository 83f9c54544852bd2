//! The per-pod state machine, pure: from the plan, the recorded status and what the pod looks like
//! now, decide what the controller does next. No I/O and no clock: `now` is an argument, so every
//! rule of product.md §5 is a table row in the tests below.
//!
//! The recorded status (`restore-hooks.dev/status`) is the only state. The reconciler writes what
//! [`decide`] returns before it acts on it, so a controller that restarts (or a new leader) picks up
//! exactly where the previous one stopped, and a hook that was `Running` when the previous process
//! died is reported as interrupted instead of being run a second time.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;

use crate::hooks::plan::{
    EXEC_DONE, EXEC_FAILED, ExecPlan, ExecStatus, HookPhase, HookStatus, OnError, PlannedHook,
};

/// Message of a hook that was `Running` when a previous controller process stopped.
pub const INTERRUPTED: &str =
    "interrupted (controller restarted during the exec); not re-run: hooks run at most once";

/// Whether a pod still exists, as far as the controller can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Present,
    /// `metadata.deletionTimestamp` is set: the pod is going away but can still be patched.
    Terminating,
    /// The API server no longer has the pod (404 or a watch delete confirmed by a read).
    Gone,
}

/// One container's readiness for exec.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContainerView {
    pub running: bool,
    pub ready: bool,
}

/// The parts of a pod the state machine looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub presence: Presence,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub phase: Option<String>,
    pub created: Option<Timestamp>,
    /// Names of valid exec targets: app containers and native sidecars (init containers with
    /// `restartPolicy: Always`).
    pub targets: BTreeSet<String>,
    /// Names of plain init containers (run to completion; never exec targets).
    pub plain_init: BTreeSet<String>,
    /// Container statuses by name, from `containerStatuses` and `initContainerStatuses` (where
    /// native sidecars report).
    pub containers: BTreeMap<String, ContainerView>,
}

impl PodView {
    pub fn from_pod(pod: &Pod) -> Self {
        let mut targets = BTreeSet::new();
        let mut plain_init = BTreeSet::new();
        if let Some(spec) = &pod.spec {
            targets.extend(spec.containers.iter().map(|c| c.name.clone()));
            for c in spec.init_containers.iter().flatten() {
                if c.restart_policy.as_deref() == Some("Always") {
                    targets.insert(c.name.clone());
                } else {
                    plain_init.insert(c.name.clone());
                }
            }
        }
        let mut containers = BTreeMap::new();
        if let Some(status) = &pod.status {
            let all = status
                .init_container_statuses
                .iter()
                .flatten()
                .chain(status.container_statuses.iter().flatten());
            for cs in all {
                let running = cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some();
                containers.insert(
                    cs.name.clone(),
                    ContainerView {
                        running,
                        ready: cs.ready,
                    },
                );
            }
        }
        let presence = if pod.metadata.deletion_timestamp.is_some() {
            Presence::Terminating
        } else {
            Presence::Present
        };
        PodView {
            presence,
            phase: pod.status.as_ref().and_then(|s| s.phase.clone()),
            created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
            targets,
            plain_init,
            containers,
        }
    }

    fn terminal_phase(&self) -> Option<&str> {
        match self.phase.as_deref() {
            Some(p @ ("Succeeded" | "Failed")) => Some(p),
            _ => None,
        }
    }
}

/// What the reconciler does after writing [`Decision::status`] (when [`Decision::write`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Hook `index` may run now: record it `Running`, then exec it.
    StartHook { index: usize },
    /// The current hook's container is not up; it expires at the deadline. Decide again on the
    /// next pod change or at the deadline, whichever comes first.
    WaitUntil(Timestamp),
    /// The current hook's container is not up and its wait has no limit.
    WaitForChange,
    /// Every hook is terminal: set the `restore-hooks.dev/exec` label to `label`.
    Finish { label: &'static str },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The status with every transition that needs no exec applied (interrupted, expired,
    /// skipped, pod gone, missing container).
    pub status: ExecStatus,
    /// True when `status` differs from what the pod carries and should be written before acting.
    pub write: bool,
    /// Hooks that became terminal in this decision (for Events, logs and metrics once written).
    pub settled: Vec<usize>,
    pub action: Action,
}

/// Decides the next step for one pod. `recorded` is the pod's status annotation, if readable.
pub fn decide(
    plan: &ExecPlan,
    recorded: Option<&ExecStatus>,
    pod: &PodView,
    now: Timestamp,
) -> Decision {
    let mut status = align(plan, recorded);
    let mut settled = Vec::new();
    let mut action = None;
    // Containers for which any hook asks for readiness: Velero's rule, kept (§5).
    let want_ready: BTreeSet<&str> = plan
        .hooks
        .iter()
        .filter(|h| h.wait_for_ready)
        .map(|h| h.container.as_str())
        .collect();

    let mut i = 0;
    while i < plan.hooks.len() {
        let hook = &plan.hooks[i];
        let entry = &mut status.hooks[i];
        match entry.phase {
            HookPhase::Succeeded | HookPhase::Skipped => {}
            HookPhase::Failed => {}
            HookPhase::Running => {
                // Only a previous process can have left a hook Running: this process writes the
                // result before it decides again. Never re-run it (at most once).
                fail(entry, INTERRUPTED.to_string(), now);
                settled.push(i);
            }
            HookPhase::Pending => {
                if let Some(msg) = cannot_run(hook, pod, now, &want_ready) {
                    fail(entry, msg, now);
                    settled.push(i);
                } else if is_up(
                    pod,
                    &hook.container,
                    want_ready.contains(hook.container.as_str()),
                ) {
                    action = Some(Action::StartHook { index: i });
                    break;
                } else {
                    action = Some(match deadline(hook, pod) {
                        Some(d) => Action::WaitUntil(d),
                        None => Action::WaitForChange,
                    });
                    break;
                }
            }
        }
        if status.hooks[i].phase == HookPhase::Failed && hook.on_error == OnError::Fail {
            skip_rest(&mut status, plan, i, now, &mut settled);
            break;
        }
        i += 1;
    }

    let action = action.unwrap_or_else(|| {
        let all_ok = status.hooks.iter().all(|h| h.phase == HookPhase::Succeeded);
        Action::Finish {
            label: if all_ok { EXEC_DONE } else { EXEC_FAILED },
        }
    });
    // A status that only gained its Pending shape is written when the pod has to wait, so that an
    // operator sees the pending hooks; when a hook starts, the Running write carries it anyway.
    let differs = recorded != Some(&status);
    let waits = matches!(action, Action::WaitUntil(_) | Action::WaitForChange);
    let write = !settled.is_empty() || (differs && waits);
    Decision {
        status,
        write,
        settled,
        action,
    }
}

/// Why the pending hook can never run, if so. Checked before the container test, in this order:
/// the pod is gone or terminal, the container does not exist, the wait has expired.
fn cannot_run(
    hook: &PlannedHook,
    pod: &PodView,
    now: Timestamp,
    want_ready: &BTreeSet<&str>,
) -> Option<String> {
    if pod.presence != Presence::Present {
        return Some("pod was deleted before the hook ran".to_string());
    }
    if let Some(phase) = pod.terminal_phase() {
        return Some(format!("pod reached phase {phase} before the hook ran"));
    }
    if pod.plain_init.contains(&hook.container) {
        return Some(format!(
            "container {:?} is a plain init container; exec hooks can only target app containers and native sidecars",
            hook.container
        ));
    }
    if !pod.targets.contains(&hook.container) {
        return Some(format!(
            "container {:?} does not exist in the pod (no app container or native sidecar of that name)",
            hook.container
        ));
    }
    let d = deadline(hook, pod)?;
    if now >= d {
        let wait = go_duration(hook.wait_timeout_ms.unwrap_or_default());
        let up = is_up(
            pod,
            &hook.container,
            want_ready.contains(hook.container.as_str()),
        );
        return Some(if up {
            // The container came up, but earlier hooks (or controller downtime) used the wait.
            format!(
                "waitTimeout {wait} from pod creation passed before the hook's turn came; not executed"
            )
        } else {
            format!(
                "container {} was not up within {wait} of pod creation; not executed",
                hook.container
            )
        });
    }
    None
}

/// When the hook's wait expires: `waitTimeout` after the pod's creation (so that a restarted
/// controller does not start the clock again). No creation time or no limit: never.
fn deadline(hook: &PlannedHook, pod: &PodView) -> Option<Timestamp> {
    let ms = hook.wait_timeout_ms?;
    let created = pod.created?;
    created
        .checked_add(SignedDuration::from_millis(i64::try_from(ms).ok()?))
        .ok()
}

fn is_up(pod: &PodView, container: &str, want_ready: bool) -> bool {
    pod.containers
        .get(container)
        .is_some_and(|c| if want_ready { c.ready } else { c.running })
}

fn fail(entry: &mut HookStatus, message: String, now: Timestamp) {
    entry.phase = HookPhase::Failed;
    entry.message = message;
    entry.finished_at = Some(timestamp(now));
}

fn skip_rest(
    status: &mut ExecStatus,
    plan: &ExecPlan,
    failed: usize,
    now: Timestamp,
    settled: &mut Vec<usize>,
) {
    let by = &plan.hooks[failed];
    for (j, entry) in status.hooks.iter_mut().enumerate().skip(failed + 1) {
        if !entry.phase.is_terminal() {
            entry.phase = HookPhase::Skipped;
            entry.message = format!(
                "skipped: hook {} (#{failed}) failed with onError: Fail",
                by.name
            );
            entry.finished_at = Some(timestamp(now));
            settled.push(j);
        }
    }
}

/// The recorded status lined up with the plan: one entry per plan hook, in plan order. Entries that
/// do not match the plan hook at their position (another plan, a hand edit) start over as Pending.
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
    ExecStatus { hooks }
}

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
    }
}

/// RFC 3339 in whole seconds, UTC (`2026-12-02T10:00:00Z`), as Kubernetes writes times.
pub fn timestamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A duration as Go prints it (`30s`, `1m0s`, `1.5s`, `250ms`, `1h0m0s`): the spelling operators
/// wrote in the hook definitions.
pub fn go_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, frac) = (rest / 1000, rest % 1000);
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:03}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(name: &str, container: &str) -> PlannedHook {
        PlannedHook {
            name: name.to_string(),
            source: format!("restorehook/{name}"),
            index: 0,
            container: container.to_string(),
            command: vec!["true".to_string()],
            on_error: OnError::Continue,
            exec_timeout_ms: 30_000,
            wait_timeout_ms: None,
            wait_for_ready: false,
        }
    }

    fn plan(hooks: Vec<PlannedHook>) -> ExecPlan {
        ExecPlan {
            restore: "r".to_string(),
            hooks,
        }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    /// A present, running pod (phase Running) created at t(0) with containers `app` and `db`.
    fn pod(up: &[(&str, bool, bool)]) -> PodView {
        PodView {
            presence: Presence::Present,
            phase: Some("Running".to_string()),
            created: Some(t(0)),
            targets: ["app", "db", "sidecar"].map(String::from).into(),
            plain_init: ["restore-hooks-init"].map(String::from).into(),
            containers: up
                .iter()
                .map(|(n, running, ready)| {
                    (
                        n.to_string(),
                        ContainerView {
                            running: *running,
                            ready: *ready,
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

    fn phases(d: &Decision) -> Vec<HookPhase> {
        d.status.hooks.iter().map(|h| h.phase).collect()
    }

    use HookPhase::{Failed as F, Pending as P, Running as R, Skipped as S, Succeeded as OK};

    #[test]
    fn hooks_run_in_plan_order_each_waiting_for_its_own_container() {
        let p = plan(vec![hook("a", "db"), hook("b", "app"), hook("c", "db")]);
        struct Row {
            what: &'static str,
            recorded: Vec<HookPhase>,
            up: Vec<(&'static str, bool, bool)>,
            action: Action,
        }
        let rows = [
            Row {
                what: "nothing up: wait for the first hook's container",
                recorded: vec![],
                up: vec![],
                action: Action::WaitForChange,
            },
            Row {
                what: "second container up does not let the second hook overtake the first",
                recorded: vec![],
                up: vec![("app", true, true)],
                action: Action::WaitForChange,
            },
            Row {
                what: "first container running: start hook 0",
                recorded: vec![],
                up: vec![("db", true, false)],
                action: Action::StartHook { index: 0 },
            },
            Row {
                what: "hook 0 done, app not up: wait",
                recorded: vec![OK, P, P],
                up: vec![("db", true, true)],
                action: Action::WaitForChange,
            },
            Row {
                what: "hook 0 done, app up: start hook 1",
                recorded: vec![OK, P, P],
                up: vec![("db", true, true), ("app", true, false)],
                action: Action::StartHook { index: 1 },
            },
            Row {
                what: "a Continue failure goes on",
                recorded: vec![OK, F, P],
                up: vec![("db", true, true)],
                action: Action::StartHook { index: 2 },
            },
            Row {
                what: "all succeeded: done",
                recorded: vec![OK, OK, OK],
                up: vec![],
                action: Action::Finish { label: EXEC_DONE },
            },
            Row {
                what: "one failed: failed",
                recorded: vec![OK, F, OK],
                up: vec![],
                action: Action::Finish { label: EXEC_FAILED },
            },
        ];
        for row in rows {
            let recorded = (!row.recorded.is_empty()).then(|| with_phases(&p, &row.recorded));
            let d = decide(&p, recorded.as_ref(), &pod(&row.up), t(5));
            assert_eq!(d.action, row.action, "{}", row.what);
            assert!(d.settled.is_empty(), "{}", row.what);
        }
    }

    #[test]
    fn wait_for_ready_applies_to_every_hook_of_that_container() {
        let mut ready = hook("b", "db");
        ready.wait_for_ready = true;
        let p = plan(vec![hook("a", "db"), ready]);
        let running_not_ready = pod(&[("db", true, false)]);
        assert_eq!(
            decide(&p, None, &running_not_ready, t(1)).action,
            Action::WaitForChange,
            "hook a waits for Ready because hook b on the same container asks for it"
        );
        let ready_pod = pod(&[("db", true, true)]);
        assert_eq!(
            decide(&p, None, &ready_pod, t(1)).action,
            Action::StartHook { index: 0 }
        );
    }

    #[test]
    fn native_sidecars_are_targets_and_plain_init_containers_are_not() {
        let p = plan(vec![hook("a", "sidecar")]);
        let d = decide(&p, None, &pod(&[("sidecar", true, false)]), t(1));
        assert_eq!(d.action, Action::StartHook { index: 0 });

        let p = plan(vec![hook("a", "restore-hooks-init"), hook("b", "db")]);
        let d = decide(&p, None, &pod(&[("db", true, true)]), t(1));
        assert_eq!(phases(&d), vec![F, P]);
        assert!(d.status.hooks[0].message.contains("plain init container"));
        assert_eq!(d.action, Action::StartHook { index: 1 });
        assert!(d.write);
        assert_eq!(d.settled, vec![0]);
    }

    #[test]
    fn a_missing_container_fails_at_once_without_waiting() {
        let p = plan(vec![hook("a", "nope")]);
        let d = decide(&p, None, &pod(&[]), t(1));
        assert_eq!(phases(&d), vec![F]);
        assert_eq!(
            d.status.hooks[0].message,
            "container \"nope\" does not exist in the pod (no app container or native sidecar of that name)"
        );
        assert_eq!(d.action, Action::Finish { label: EXEC_FAILED });
    }

    #[test]
    fn wait_timeout_counts_from_creation_and_expired_hooks_are_not_executed() {
        let mut h = hook("a", "db");
        h.wait_timeout_ms = Some(10_000);
        let p = plan(vec![h, hook("b", "app")]);
        // Before the deadline: wait until it.
        let d = decide(&p, None, &pod(&[]), t(3));
        assert_eq!(d.action, Action::WaitUntil(t(10)));
        assert!(d.write, "the Pending status is written while waiting");
        assert!(d.settled.is_empty());
        // At the deadline, not up: expired, not started; the next hook (Continue) goes on.
        let d = decide(&p, None, &pod(&[("app", true, true)]), t(10));
        assert_eq!(phases(&d), vec![F, P]);
        assert_eq!(
            d.status.hooks[0].message,
            "container db was not up within 10s of pod creation; not executed"
        );
        assert_eq!(d.action, Action::StartHook { index: 1 });
        // Up, but the turn came too late: still not executed.
        let d = decide(&p, None, &pod(&[("db", true, true)]), t(11));
        assert_eq!(phases(&d)[0], F);
        assert!(d.status.hooks[0].message.contains("not executed"));
        // Up in time: runs.
        let d = decide(&p, None, &pod(&[("db", true, true)]), t(9));
        assert_eq!(d.action, Action::StartHook { index: 0 });
    }

    #[test]
    fn on_error_fail_skips_the_remaining_hooks() {
        let mut first = hook("a", "db");
        first.on_error = OnError::Fail;
        first.wait_timeout_ms = Some(1000);
        let p = plan(vec![first, hook("b", "db"), hook("c", "app")]);
        // A recorded Fail failure (after an exec).
        let d = decide(&p, Some(&with_phases(&p, &[F, P, P])), &pod(&[]), t(5));
        assert_eq!(phases(&d), vec![F, S, S]);
        assert_eq!(d.settled, vec![1, 2]);
        assert_eq!(
            d.status.hooks[1].message,
            "skipped: hook a (#0) failed with onError: Fail"
        );
        assert_eq!(d.action, Action::Finish { label: EXEC_FAILED });
        // An expiry of a Fail hook skips as well.
        let d = decide(&p, None, &pod(&[]), t(5));
        assert_eq!(phases(&d), vec![F, S, S]);
        assert_eq!(d.settled, vec![0, 1, 2]);
    }

    #[test]
    fn a_running_hook_after_restart_is_interrupted_not_rerun() {
        let mut second = hook("b", "db");
        second.on_error = OnError::Fail;
        let p = plan(vec![hook("a", "db"), hook("b2", "db")]);
        let d = decide(
            &p,
            Some(&with_phases(&p, &[R, P])),
            &pod(&[("db", true, true)]),
            t(5),
        );
        assert_eq!(phases(&d), vec![F, P]);
        assert_eq!(d.status.hooks[0].message, INTERRUPTED);
        assert_eq!(d.action, Action::StartHook { index: 1 });
        assert!(d.write);

        let p = plan(vec![second, hook("c", "db")]);
        let d = decide(
            &p,
            Some(&with_phases(&p, &[R, P])),
            &pod(&[("db", true, true)]),
            t(5),
        );
        assert_eq!(
            phases(&d),
            vec![F, S],
            "an interrupted Fail hook skips the rest"
        );
    }

    #[test]
    fn pod_terminal_or_deleted_fails_the_remaining_hooks() {
        let p = plan(vec![hook("a", "db"), hook("b", "db")]);
        let mut done = pod(&[]);
        done.phase = Some("Succeeded".to_string());
        let d = decide(&p, Some(&with_phases(&p, &[OK, P])), &done, t(5));
        assert_eq!(phases(&d), vec![OK, F]);
        assert_eq!(
            d.status.hooks[1].message,
            "pod reached phase Succeeded before the hook ran"
        );
        assert_eq!(d.action, Action::Finish { label: EXEC_FAILED });

        for presence in [Presence::Terminating, Presence::Gone] {
            let mut gone = pod(&[("db", true, true)]);
            gone.presence = presence;
            let d = decide(&p, None, &gone, t(5));
            assert_eq!(phases(&d), vec![F, F], "{presence:?}: Failed, not Skipped");
            assert_eq!(
                d.status.hooks[0].message,
                "pod was deleted before the hook ran"
            );
            assert_eq!(d.settled, vec![0, 1]);
        }
    }

    #[test]
    fn a_decided_status_is_stable() {
        // Deciding again on the written status settles nothing new and writes nothing.
        let p = plan(vec![hook("a", "nope"), hook("b", "db")]);
        let first = decide(&p, None, &pod(&[]), t(1));
        assert!(first.write);
        let again = decide(&p, Some(&first.status), &pod(&[]), t(2));
        assert!(!again.write);
        assert!(again.settled.is_empty());
        assert_eq!(again.action, Action::WaitForChange);
    }

    #[test]
    fn no_write_before_a_start_when_only_the_shape_is_new() {
        let p = plan(vec![hook("a", "db")]);
        let d = decide(&p, None, &pod(&[("db", true, false)]), t(1));
        assert_eq!(d.action, Action::StartHook { index: 0 });
        assert!(!d.write);
    }

    #[test]
    fn status_from_another_plan_starts_over() {
        let p = plan(vec![hook("a", "db")]);
        let mut stale = with_phases(&p, &[OK]);
        stale.hooks[0].name = "other".to_string();
        let d = decide(&p, Some(&stale), &pod(&[("db", true, true)]), t(1));
        assert_eq!(d.action, Action::StartHook { index: 0 });
        assert_eq!(d.status.hooks[0].name, "a");
    }

    #[test]
    fn an_empty_plan_is_done() {
        let d = decide(&plan(vec![]), None, &pod(&[]), t(1));
        assert_eq!(d.action, Action::Finish { label: EXEC_DONE });
        assert!(!d.write);
    }

    #[test]
    fn pod_view_reads_sidecars_from_init_container_statuses() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-12-02T10:00:00Z"},
            "spec": {
                "initContainers": [
                    {"name": "init", "image": "x"},
                    {"name": "side", "image": "x", "restartPolicy": "Always"}
                ],
                "containers": [{"name": "app", "image": "x"}]
            },
            "status": {
                "phase": "Running",
                "initContainerStatuses": [{"name": "side", "ready": true, "restartCount": 0,
                    "image": "x", "imageID": "", "state": {"running": {}}}],
                "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0,
                    "image": "x", "imageID": "", "state": {"waiting": {}}}]
            }
        }))
        .unwrap();
        let v = PodView::from_pod(&pod);
        assert_eq!(v.targets, ["app", "side"].map(String::from).into());
        assert_eq!(v.plain_init, ["init"].map(String::from).into());
        assert_eq!(
            v.containers["side"],
            ContainerView {
                running: true,
                ready: true
            }
        );
        assert!(!v.containers["app"].running);
        assert_eq!(
            v.created,
            Some("2026-12-02T10:00:00Z".parse::<Timestamp>().unwrap())
        );
    }

    #[test]
    fn durations_print_like_go() {
        for (ms, s) in [
            (0, "0s"),
            (250, "250ms"),
            (1500, "1.5s"),
            (30_000, "30s"),
            (60_000, "1m0s"),
            (90_500, "1m30.5s"),
            (3_600_000, "1h0m0s"),
        ] {
            assert_eq!(go_duration(ms), s);
        }
        assert_eq!(timestamp(t(0)), "2027-01-15T08:00:00Z");
    }
}
