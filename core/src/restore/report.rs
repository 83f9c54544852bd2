//! What `restore-hooks describe` shows about one restore (docs/behaviour.md §8.4,
//! docs/operations.md "Watching a restore"): built from values only — the pods that carry the
//! restore's `restore-hooks.dev/restore-run` label as the API server returned them, the
//! restore's RestoreRun, and Events. The CLI (`src/describe_cli.rs`) reads those with the user's
//! credentials, calls [`build`], and prints [`Report::text`] or the report as JSON.
//!
//! The rules, in the order they apply:
//! - **Which pods.** A pod belongs to the restore when its plan's `restore` is the restore's full
//!   name ([`resolve_restore`] turns a label value into it). Pods of another restore that share
//!   the label value are left out; a pod with the label but no plan was in the scope with no
//!   exec hooks (counted, not listed); a plan that does not parse is listed with the problem.
//! - **Counts.** Each pod counts as it counts for the RestoreRun: its status settled as the
//!   controller settles it (hooks that can never start count as failed, `tally::settled_status`)
//!   and tallied by `tally::tally_pod`. Every pod with a failed hook is listed, not the
//!   RestoreRun's first 20.
//! - **Phase and conditions** are the RestoreRun's: it also counts pods that no longer exist
//!   (`retired`), which no listing can show. Only without a RestoreRun is the phase computed
//!   from the pods (`tally::run_phase`), and said so.
//! - **Events.** Those about the restore's pods written by restore-hooks, and Warnings of other
//!   components about them (why a container never came up); those about the hook objects the
//!   pods' plans name (late and missed init hooks are reported there), from the restore's first
//!   pod on.
//! - The pods' annotations are read as written: `describe` has no plan key, so it cannot check
//!   their signatures (the chart's pod-hook-state policy keeps anyone but the controller from
//!   writing them, §9.5). Where its counts and the RestoreRun's differ, a note says so.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;

use crate::exec_step::align;
use crate::hooks::compiled::SourceKind;
use crate::hooks::plan::{ExecPlan, ExecStatus, HookPhase, HookRef, OnError, RunOn};
use crate::hooks::restore_name::velero_label_value;
use crate::hooks::types::{FailedPod, HookCounts, OnePodRun, RestoreRun};

use super::tally::{Target, run_phase, settled_status, tally_pod};

/// The `reportingComponent` (and `source.component`) of the controller's Events.
pub const CONTROLLER_COMPONENT: &str = "restore-hooks-controller";

/// The report's `apiVersion`: its shape only gains fields within it.
pub const REPORT_API_VERSION: &str = "restore-hooks.dev/v1alpha1";
/// The report's `kind`.
pub const REPORT_KIND: &str = "RestoreReport";

/// Lines of an output tail the text report shows (the JSON has the whole stored tail, at most
/// 1 KiB, §5.3).
const TAIL_LINES: usize = 5;

/// One pod carrying the restore's label, as listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.creationTimestamp` (RFC 3339).
    pub created: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The `restore-hooks.dev/exec` label.
    pub exec_label: Option<String>,
    /// The `restore-hooks.dev/plan` annotation, as written.
    pub plan: Option<String>,
    /// The `restore-hooks.dev/status` annotation, as written.
    pub status: Option<String>,
}

/// One core/v1 Event, as listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFacts {
    /// The Event's own namespace (a cluster-scoped object's Events are in `default`).
    pub namespace: String,
    /// `involvedObject.kind`.
    pub kind: String,
    /// `involvedObject.name`.
    pub name: String,
    /// `involvedObject.uid`, when set.
    pub uid: Option<String>,
    /// `type`: `Normal` or `Warning`.
    pub type_: String,
    /// `reason`.
    pub reason: String,
    /// `message`.
    pub message: String,
    /// `count` (1 when unset).
    pub count: i32,
    /// `reportingComponent`, else `source.component`.
    pub component: String,
    /// When it was last seen: `lastTimestamp`, else `eventTime`, else `creationTimestamp`.
    pub last_seen: Option<String>,
    /// `eventTime` with its microseconds: orders Events of the same second.
    pub event_time: Option<String>,
}

/// Which Events the report keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EventsShown {
    /// Every Event the rules select.
    #[default]
    All,
    /// Only Warnings.
    Warnings,
    /// None.
    None,
}

/// Everything [`build`] reads.
#[derive(Clone, Debug, Default)]
pub struct Input<'a> {
    /// The restore's full name (see [`resolve_restore`]).
    pub restore: &'a str,
    /// Its RestoreRun, when there is one (and it could be read).
    pub run: Option<&'a RestoreRun>,
    /// Why the RestoreRun could not be read (refused, say), when that is why `run` is `None`.
    pub run_error: Option<String>,
    /// The pods carrying the restore's label value.
    pub pods: &'a [PodFacts],
    /// Events of the namespaces those pods and their hook objects are in.
    pub events: &'a [EventFacts],
    /// Which Events to keep.
    pub events_shown: EventsShown,
    /// The namespaces the pods were listed in; empty: every namespace.
    pub namespaces: &'a [String],
    /// What the reading shell has to say (an object it could not read, and why).
    pub notes: Vec<String>,
}

/// The report: `restore-hooks describe -o json` prints it as is. Every field is always present
/// (`null` or empty when there is nothing to say); fields are only added within
/// [`REPORT_API_VERSION`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// [`REPORT_API_VERSION`].
    pub api_version: String,
    /// [`REPORT_KIND`].
    pub kind: String,
    /// The restore's full name.
    pub restore: String,
    /// The RestoreRun's object name; `null` without one.
    pub restore_run: Option<String>,
    /// The RestoreRun's phase (`InProgress`, `Completed`, `PartiallyFailed`); without a
    /// RestoreRun, the one its pods would give; empty with neither.
    pub phase: String,
    /// `RestoreRun`, or `pods` when computed from the pods.
    pub phase_from: String,
    /// The RestoreRun's conditions (`Completed`, `Failed`; §8.3).
    pub conditions: Vec<ConditionLine>,
    /// When what happened.
    pub timeline: Timeline,
    /// Listed pods of the restore whose plan has at least one exec hook.
    pub pods_planned: i64,
    /// Listed pods in the restore's scope without a plan (no exec or init hook applied).
    pub pods_without_hooks: i64,
    /// The listed pods' hooks, counted as the RestoreRun counts them (§8.3).
    pub hooks: HookCounts,
    /// Of `hooks.pending`, the hooks running now.
    pub running: i64,
    /// `runOn: OnePod` hooks another pod runs (§6.15): counted nowhere else.
    pub other_pod: i64,
    /// The RestoreRun's counts, which also hold pods that no longer exist; `null` without one.
    pub restore_run_hooks: Option<HookCounts>,
    /// Pods that no longer exist whose outcomes the RestoreRun keeps (`retiredPods`).
    pub retired_pods: i64,
    /// Every listed pod with a failed hook: its first failure (the RestoreRun lists 20).
    pub failed_pods: Vec<FailedPod>,
    /// Annotation exec hooks refused at admission (§9.9).
    pub refused_hooks: Vec<HookLine>,
    /// Hooks a hook object added after the pod's admission (§7.2).
    pub late_hooks: Vec<HookLine>,
    /// Init hooks pods missed: their hook object came after them (§7.3).
    pub missed_init_hooks: Vec<RefLine>,
    /// Spec exec hooks that selected pods lacking their container (§3.5).
    pub not_applicable_hooks: Vec<RefLine>,
    /// `runOn: OnePod` hooks that started, and the pod that runs each (§6.15).
    pub one_pod: Vec<OnePodRun>,
    /// Every listed pod of the restore, by namespace and name.
    pub pods: Vec<PodReport>,
    /// The Events kept, oldest first.
    pub events: Vec<EventLine>,
    /// What the reader should know about this report's limits.
    pub notes: Vec<String>,
}

/// A condition of the RestoreRun.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionLine {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The phase it was written in.
    pub reason: String,
    /// The counts it was written with.
    pub message: String,
    /// When its status last changed (RFC 3339).
    pub last_transition_time: Option<String>,
}

/// When what happened (RFC 3339, UTC; `null` when not known).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// The RestoreRun was created: the controller saw the restore's first pod with exec hooks.
    pub restore_run_created: Option<String>,
    /// The earliest listed pod was created.
    pub first_pod_created: Option<String>,
    /// The latest listed pod was created.
    pub last_pod_created: Option<String>,
    /// The first hook started.
    pub first_hook_started: Option<String>,
    /// The last hook that ended, ended.
    pub last_hook_finished: Option<String>,
    /// The phase last left `InProgress` (the RestoreRun's `completedAt`).
    pub completed_at: Option<String>,
    /// From `firstPodCreated` to `completedAt`, as a Go duration (`3m12s`).
    pub duration: Option<String>,
}

/// One pod of the restore.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its `creationTimestamp`.
    pub created: Option<String>,
    /// It is being deleted.
    pub deleting: bool,
    /// Its `restore-hooks.dev/exec` label (§5.5).
    pub exec_label: Option<String>,
    /// `InProgress` while a hook has not ended, then `Failed` when one failed or was skipped,
    /// else `Succeeded`; `NoExecHooks` when its plan has none; `Unreadable` when its plan does
    /// not parse.
    pub phase: String,
    /// Why the controller refused its plan or status (§9.3), or why the report cannot read it.
    pub message: String,
    /// Its plan's hooks, in plan order, with their status.
    pub hooks: Vec<HookReport>,
}

/// One plan hook of a pod and how it went (§5.2, §5.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookReport {
    /// Its position in the plan.
    pub position: usize,
    /// Its name (`<from-annotation>`, a Velero entry's or a hook object's name).
    pub name: String,
    /// Its source (`annotation`, `velero-restore/<name>`, `restorehook/<name>`, ...).
    pub source: String,
    /// Its position in its source's `postHooks`.
    pub index: usize,
    /// The target container.
    pub container: String,
    /// `Continue` or `Fail`.
    pub on_error: OnError,
    /// `EveryPod` or `OnePod`.
    pub run_on: RunOn,
    /// A hook object added it after the pod's admission (§7.2).
    pub late: bool,
    /// Why it was refused at admission (§9.9); `null` when it was not.
    pub refused: Option<String>,
    /// `Pending`, `Running`, `Succeeded`, `Failed`, `Skipped` or `OtherPod` (§5.4), with hooks
    /// that can never start counted `Failed` (§8.3).
    pub phase: HookPhase,
    /// When it was recorded `Running`.
    pub started_at: Option<String>,
    /// When it ended.
    pub finished_at: Option<String>,
    /// Its exit code, when the API server reported one.
    pub exit_code: Option<i32>,
    /// Attempts that failed and were tried again (§6.17).
    pub retries: u32,
    /// When its next attempt is due.
    pub retry_at: Option<String>,
    /// Why it failed, was skipped, waits or runs elsewhere (§6.14); empty on success.
    pub message: String,
    /// The last 1 KiB of its stdout.
    pub stdout: String,
    /// The last 1 KiB of its stderr.
    pub stderr: String,
}

/// A hook of one pod, in the lists of refused and late hooks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookLine {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The hook's position in the pod's plan.
    pub position: usize,
    /// The hook's name.
    pub hook: String,
    /// The hook's source.
    pub source: String,
    /// Its phase, as in [`HookReport::phase`].
    pub phase: String,
    /// Its message.
    pub message: String,
}

/// A hook in no plan of a pod (missed init, not applicable).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefLine {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The hook's source.
    pub source: String,
    /// The hook's name.
    pub hook: String,
    /// Its position in its source's `postHooks`.
    pub index: usize,
    /// The container it names (not applicable hooks); empty for init hooks.
    pub container: String,
}

/// An Event the report keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    /// When it was last seen.
    pub last_seen: Option<String>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its reason.
    pub reason: String,
    /// The object's kind: `Pod`, `RestoreHook` or `ClusterRestoreHook`.
    pub kind: String,
    /// The object's namespace; empty for a ClusterRestoreHook.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// How many times it was seen.
    pub count: i32,
    /// Its message.
    pub message: String,
}

/// The restore a name given to `describe` means, from the plans of the pods its label value
/// selects: the name itself when a plan names it, or none names one whose label value it is;
/// else the one restore whose label value (a long name hashed as Velero hashes it, §1.2) it is.
pub fn resolve_restore(given: &str, pods: &[PodFacts]) -> String {
    let restores: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p.plan.as_deref())
        .filter_map(|text| ExecPlan::from_annotation(text).ok())
        .map(|plan| plan.restore)
        .collect();
    if restores.contains(given) {
        return given.to_string();
    }
    let mut hashed = restores
        .into_iter()
        .filter(|r| velero_label_value(r) == given);
    match (hashed.next(), hashed.next()) {
        (Some(full), None) => full,
        _ => given.to_string(),
    }
}

/// The hook objects a plan names, as Events name them: (kind, namespace, name), the namespace
/// empty for a ClusterRestoreHook.
fn hook_objects(namespace: &str, plan: &ExecPlan) -> Vec<(String, String, String)> {
    let refs = plan.missed_init.iter().chain(&plan.not_applicable);
    plan.hooks
        .iter()
        .map(|h| h.source.as_str())
        .chain(refs.map(|r| r.source.as_str()))
        .filter_map(|source| match SourceKind::parse_source(source)? {
            (SourceKind::RestoreHook, name) => Some((
                "RestoreHook".to_string(),
                namespace.to_string(),
                name.to_string(),
            )),
            (SourceKind::ClusterRestoreHook, name) => Some((
                "ClusterRestoreHook".to_string(),
                String::new(),
                name.to_string(),
            )),
            (SourceKind::VeleroRestore, _) => None,
        })
        .collect()
}

/// The namespaces whose Events a report of `pods` needs: the pods', and `default` when a plan
/// names a ClusterRestoreHook (a cluster-scoped object's Events live there).
pub fn event_namespaces(restore: &str, pods: &[PodFacts]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for pod in pods {
        let Some(plan) = pod
            .plan
            .as_deref()
            .and_then(|t| ExecPlan::from_annotation(t).ok())
        else {
            continue;
        };
        if plan.restore != restore {
            continue;
        }
        out.insert(pod.namespace.clone());
        for (kind, namespace, _) in hook_objects(&pod.namespace, &plan) {
            out.insert(if kind == "ClusterRestoreHook" {
                "default".to_string()
            } else {
                namespace
            });
        }
    }
    out
}

fn parse_time(t: Option<&str>) -> Option<Timestamp> {
    t.and_then(|t| t.parse::<Timestamp>().ok())
}

/// The earlier (`min`) or later of two RFC 3339 times, the one that parses winning.
fn pick(current: &mut Option<String>, candidate: Option<&str>, earlier: bool) {
    let Some(new) = parse_time(candidate) else {
        return;
    };
    let better = match parse_time(current.as_deref()) {
        None => true,
        Some(old) => (new < old) == earlier && new != old,
    };
    if better {
        *current = candidate.map(str::to_string);
    }
}

/// A Go duration of whole seconds: `45s`, `3m12s`, `2h0m5s`.
fn go_duration(seconds: i64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

fn phase_name(phase: HookPhase) -> String {
    format!("{phase:?}")
}

/// Builds the report (the rules are in the module's documentation).
pub fn build(input: Input<'_>) -> Report {
    let restore = input.restore;
    let run_target = Target::RestoreRun {
        restore: restore.to_string(),
    };
    let mut report = Report {
        api_version: REPORT_API_VERSION.to_string(),
        kind: REPORT_KIND.to_string(),
        restore: restore.to_string(),
        notes: input.notes.clone(),
        ..Report::default()
    };
    let mut pods: Vec<&PodFacts> = input.pods.iter().collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut objects: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut unreadable = 0;
    for pod in pods {
        let Some(text) = pod.plan.as_deref() else {
            report.pods_without_hooks += 1;
            continue;
        };
        let mut entry = PodReport {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            created: pod.created.clone(),
            deleting: pod.deleting,
            exec_label: pod.exec_label.clone(),
            ..PodReport::default()
        };
        let plan = match ExecPlan::from_annotation(text) {
            Ok(plan) => plan,
            Err(e) => {
                unreadable += 1;
                entry.phase = "Unreadable".to_string();
                entry.message = format!("its restore-hooks.dev/plan does not parse: {e}");
                report.pods.push(entry);
                continue;
            }
        };
        if plan.restore != restore {
            // Another restore with the same label value.
            continue;
        }
        objects.extend(hook_objects(&pod.namespace, &plan));
        let status = match pod.status.as_deref().map(ExecStatus::from_annotation) {
            Some(Ok(status)) => Some(status),
            Some(Err(e)) => {
                entry.message = format!("its restore-hooks.dev/status does not parse: {e}");
                None
            }
            None => None,
        };
        let settled = settled_status(&plan, status, pod.exec_label.as_deref());
        let status = align(&plan, settled.as_ref());
        if entry.message.is_empty() {
            entry.message = status.message.clone();
        }
        let part = tally_pod(&pod.namespace, &plan, Some(&status))
            .remove(&run_target)
            .unwrap_or_default();
        report.hooks.add(&part.counts);
        report.pods_planned += i64::from(part.planned);
        if let Some((hook, message)) = part.first_failure {
            report.failed_pods.push(FailedPod {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                hook,
                message,
            });
        }
        pick(
            &mut report.timeline.first_pod_created,
            pod.created.as_deref(),
            true,
        );
        pick(
            &mut report.timeline.last_pod_created,
            pod.created.as_deref(),
            false,
        );
        for (position, (hook, st)) in plan.hooks.iter().zip(&status.hooks).enumerate() {
            let late = plan.late_from.is_some_and(|from| position >= from);
            let line = || HookLine {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                position,
                hook: hook.name.clone(),
                source: hook.source.clone(),
                phase: phase_name(st.phase),
                message: st.message.clone(),
            };
            if hook.refused.is_some() {
                report.refused_hooks.push(line());
            }
            if late {
                report.late_hooks.push(line());
            }
            match st.phase {
                HookPhase::Running => report.running += 1,
                HookPhase::OtherPod => report.other_pod += 1,
                _ => {}
            }
            if hook.run_on == RunOn::OnePod && st.started_at.is_some() {
                report.one_pod.push(OnePodRun {
                    hook: format!("{}#{}", hook.name, hook.index),
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    phase: phase_name(st.phase),
                });
            }
            pick(
                &mut report.timeline.first_hook_started,
                st.started_at.as_deref(),
                true,
            );
            pick(
                &mut report.timeline.last_hook_finished,
                st.finished_at.as_deref(),
                false,
            );
            entry.hooks.push(HookReport {
                position,
                name: hook.name.clone(),
                source: hook.source.clone(),
                index: hook.index,
                container: hook.container.clone(),
                on_error: hook.on_error,
                run_on: hook.run_on,
                late,
                refused: hook.refused.clone(),
                phase: st.phase,
                started_at: st.started_at.clone(),
                finished_at: st.finished_at.clone(),
                exit_code: st.exit_code,
                retries: st.retries,
                retry_at: st.retry_at.clone(),
                message: st.message.clone(),
                stdout: st.stdout.clone(),
                stderr: st.stderr.clone(),
            });
        }
        let refs = |refs: &[HookRef]| -> Vec<RefLine> {
            refs.iter()
                .map(|r| RefLine {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    source: r.source.clone(),
                    hook: r.name.clone(),
                    index: r.index,
                    container: r.container.clone(),
                })
                .collect()
        };
        report.missed_init_hooks.extend(refs(&plan.missed_init));
        report
            .not_applicable_hooks
            .extend(refs(&plan.not_applicable));
        entry.phase = pod_phase(&entry.hooks);
        report.pods.push(entry);
    }

    let run_status = input.run.and_then(|r| r.status.as_ref());
    report.restore_run = input.run.and_then(|r| r.metadata.name.clone());
    match run_status.filter(|s| !s.phase.is_empty()) {
        Some(status) => {
            report.phase = status.phase.clone();
            report.phase_from = "RestoreRun".to_string();
        }
        None if report.pods_planned > 0 => {
            report.phase = run_phase(&report.hooks).to_string();
            report.phase_from = "pods".to_string();
        }
        None => {}
    }
    if let Some(status) = run_status {
        report.conditions = status
            .conditions
            .iter()
            .map(|c| ConditionLine {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: Some(crate::exec_step::timestamp(c.last_transition_time.0)),
            })
            .collect();
        report.restore_run_hooks = Some(status.hooks);
        report.retired_pods = status.retired_pods.unwrap_or_default();
        report.timeline.completed_at = status.completed_at.clone();
    }
    report.timeline.restore_run_created = input
        .run
        .and_then(|r| r.metadata.creation_timestamp.as_ref())
        .map(|t| crate::exec_step::timestamp(t.0));
    if report.phase != "InProgress"
        && let (Some(from), Some(to)) = (
            parse_time(report.timeline.first_pod_created.as_deref()),
            parse_time(report.timeline.completed_at.as_deref()),
        )
        && to >= from
    {
        report.timeline.duration = Some(go_duration(to.duration_since(from).as_secs()));
    }

    notes(&mut report, &input, run_status, unreadable);
    report.events = events(&input, &report, &objects);
    report
}

/// A pod's phase from its hooks' (see [`PodReport::phase`]).
fn pod_phase(hooks: &[HookReport]) -> String {
    if hooks.is_empty() {
        "NoExecHooks"
    } else if hooks.iter().any(|h| !h.phase.is_terminal()) {
        "InProgress"
    } else if hooks
        .iter()
        .any(|h| matches!(h.phase, HookPhase::Failed | HookPhase::Skipped))
    {
        "Failed"
    } else {
        "Succeeded"
    }
    .to_string()
}

/// What the reader should know: where the phase comes from, what the listing covers, and
/// where the pods and the RestoreRun disagree.
fn notes(
    report: &mut Report,
    input: &Input<'_>,
    run: Option<&crate::hooks::types::RestoreRunStatus>,
    unreadable: usize,
) {
    let restore = input.restore;
    match (input.run, &input.run_error) {
        (Some(_), _) => {}
        (None, Some(error)) => report.notes.push(format!(
            "the RestoreRun of restore {restore} could not be read ({error}); the phase is the one \
             its pods give, and pods that no longer exist are not counted"
        )),
        (None, None) => report.notes.push(format!(
            "no RestoreRun for restore {restore}: the controller has not counted a pod of it with \
             exec hooks yet, or its RestoreRun was deleted after --restore-run-retention; the phase \
             is the one its pods give"
        )),
    }
    if !input.namespaces.is_empty() {
        report.notes.push(format!(
            "pods listed in namespace(s) {} only: counts and lists cover those",
            input.namespaces.join(", ")
        ));
    }
    if unreadable > 0 {
        report.notes.push(format!(
            "{unreadable} pod(s) carry the restore's label with a plan that does not parse: \
             which restore they belong to is unknown, and the controller runs nothing of them"
        ));
    }
    if report.retired_pods > 0 {
        report.notes.push(format!(
            "{} pod(s) of the restore no longer exist: the RestoreRun counts their hooks, this \
             report cannot list them",
            report.retired_pods
        ));
    }
    if let Some(status) = run
        && input.namespaces.is_empty()
    {
        let mut live = status.hooks;
        live.sub(&status.retired);
        let mine = &report.hooks;
        let differs = (
            live.succeeded,
            live.failed,
            live.skipped,
            live.pending,
            live.refused,
        ) != (
            mine.succeeded,
            mine.failed,
            mine.skipped,
            mine.pending,
            mine.refused,
        );
        if differs {
            report.notes.push(format!(
                "the RestoreRun counts {} succeeded, {} failed, {} skipped, {} pending on pods that \
                 exist; the pods show {} succeeded, {} failed, {} skipped, {} pending: the \
                 RestoreRun is written at most every 2 s, and counts only plans the controller \
                 verified (§8.3)",
                live.succeeded,
                live.failed,
                live.skipped,
                live.pending,
                mine.succeeded,
                mine.failed,
                mine.skipped,
                mine.pending
            ));
        }
    }
}

/// The Events the report keeps (see the module's documentation), oldest first.
fn events(
    input: &Input<'_>,
    report: &Report,
    objects: &BTreeSet<(String, String, String)>,
) -> Vec<EventLine> {
    if input.events_shown == EventsShown::None {
        return Vec::new();
    }
    let uids: BTreeSet<&str> = report.pods.iter().map(|p| p.uid.as_str()).collect();
    let names: BTreeSet<(&str, &str)> = report
        .pods
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    let since = parse_time(report.timeline.first_pod_created.as_deref());
    // Sorted by when last seen, then by `eventTime` (within one second).
    type Key = (Option<Timestamp>, Option<Timestamp>);
    let mut kept: Vec<(Key, EventLine)> = input
        .events
        .iter()
        .filter(|e| input.events_shown == EventsShown::All || e.type_ == "Warning")
        .filter(|e| match e.kind.as_str() {
            "Pod" => {
                let ours = match e.uid.as_deref().filter(|u| !u.is_empty()) {
                    Some(uid) => uids.contains(uid),
                    None => names.contains(&(e.namespace.as_str(), e.name.as_str())),
                };
                ours && (e.component == CONTROLLER_COMPONENT || e.type_ == "Warning")
            }
            "RestoreHook" | "ClusterRestoreHook" => {
                let namespace = if e.kind == "RestoreHook" {
                    e.namespace.clone()
                } else {
                    String::new()
                };
                let named = objects.contains(&(e.kind.clone(), namespace, e.name.clone()));
                let during = match (since, parse_time(e.last_seen.as_deref())) {
                    (Some(since), Some(seen)) => seen >= since,
                    _ => true,
                };
                named && during
            }
            _ => false,
        })
        .map(|e| {
            (
                (
                    parse_time(e.last_seen.as_deref()),
                    parse_time(e.event_time.as_deref()),
                ),
                EventLine {
                    last_seen: e.last_seen.clone(),
                    type_: e.type_.clone(),
                    reason: e.reason.clone(),
                    kind: e.kind.clone(),
                    namespace: if e.kind == "ClusterRestoreHook" {
                        String::new()
                    } else {
                        e.namespace.clone()
                    },
                    name: e.name.clone(),
                    count: e.count.max(1),
                    message: e.message.clone(),
                },
            )
        })
        .collect();
    kept.sort_by(|(ta, a), (tb, b)| {
        (ta, &a.namespace, &a.name, &a.reason).cmp(&(tb, &b.namespace, &b.name, &b.reason))
    });
    kept.into_iter().map(|(_, e)| e).collect()
}

/// `s` on one line: runs of whitespace, newlines included, as one space.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Rows as columns padded to their widest cell (the last column is not padded).
fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::from(indent);
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// The last [`TAIL_LINES`] lines of an output tail, each indented.
fn tail_lines(out: &mut String, label: &str, text: &str) {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    if lines.is_empty() {
        return;
    }
    let skipped = lines.len().saturating_sub(TAIL_LINES);
    let _ = writeln!(
        out,
        "        {label}:{}",
        if skipped > 0 {
            format!(" (last {TAIL_LINES} lines)")
        } else {
            String::new()
        }
    );
    for line in &lines[skipped..] {
        let _ = writeln!(out, "          | {line}");
    }
}

fn or_dash(t: &Option<String>) -> String {
    t.clone().unwrap_or_else(|| "-".to_string())
}

fn counts_line(c: &HookCounts) -> String {
    format!(
        "{} succeeded, {} failed ({} refused), {} skipped, {} pending, {} not applicable, {} init \
         hooks missed",
        c.succeeded, c.failed, c.refused, c.skipped, c.pending, c.not_applicable, c.missed_init
    )
}

impl Report {
    /// The report for a terminal, as `velero restore describe` prints a restore: the phase, the
    /// counts and the timeline, then every failed pod, refused, late, missed and not applicable
    /// hooks, each pod's hooks (with the message and output tail of those that did not succeed),
    /// and the Events.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(w, "Name:         {}", self.restore);
        let _ = writeln!(
            w,
            "RestoreRun:   {}",
            self.restore_run.as_deref().unwrap_or("<none>")
        );
        let phase = if self.phase.is_empty() {
            "<unknown>"
        } else {
            &self.phase
        };
        let from = if self.phase_from == "pods" {
            " (from the pods: no RestoreRun)"
        } else {
            ""
        };
        let _ = writeln!(w, "Phase:        {phase}{from}");
        if !self.conditions.is_empty() {
            let conditions: Vec<String> = self
                .conditions
                .iter()
                .map(|c| format!("{}={} ({})", c.type_, c.status, c.reason))
                .collect();
            let _ = writeln!(w, "Conditions:   {}", conditions.join(", "));
        }
        let _ = writeln!(w);
        let mut pods = format!("{} with exec hooks", self.pods_planned);
        if self.pods_without_hooks > 0 {
            let _ = write!(pods, ", {} in scope without hooks", self.pods_without_hooks);
        }
        if self.retired_pods > 0 {
            let _ = write!(pods, ", {} no longer exist", self.retired_pods);
        }
        let _ = writeln!(w, "Pods:         {pods}");
        let mut extra = Vec::new();
        if self.running > 0 {
            extra.push(format!("{} of them running", self.running));
        }
        if self.other_pod > 0 {
            extra.push(format!("{} run by another pod", self.other_pod));
        }
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!("; {}", extra.join(", "))
        };
        let _ = writeln!(w, "Hooks:        {}{extra}", counts_line(&self.hooks));
        if let Some(run) = self.restore_run_hooks.filter(|run| *run != self.hooks) {
            // Pods that no longer exist, or a RestoreRun not written yet (see the notes).
            let _ = writeln!(w, "  RestoreRun: {}", counts_line(&run));
        }
        let _ = writeln!(w);
        let t = &self.timeline;
        let _ = writeln!(w, "Timeline:");
        let duration = t
            .duration
            .as_ref()
            .map(|d| format!(" ({d} after the first pod was created)"))
            .unwrap_or_default();
        let rows = [
            ("RestoreRun created:", or_dash(&t.restore_run_created)),
            ("First pod created:", or_dash(&t.first_pod_created)),
            ("Last pod created:", or_dash(&t.last_pod_created)),
            ("First hook started:", or_dash(&t.first_hook_started)),
            ("Last hook finished:", or_dash(&t.last_hook_finished)),
            (
                "Completed:",
                format!("{}{duration}", or_dash(&t.completed_at)),
            ),
        ];
        let rows: Vec<Vec<String>> = rows
            .into_iter()
            .map(|(k, v)| vec![k.to_string(), v])
            .collect();
        table(w, "  ", &rows);

        if !self.notes.is_empty() {
            let _ = writeln!(w, "\nNotes:");
            for note in &self.notes {
                let _ = writeln!(w, "  - {note}");
            }
        }

        let _ = writeln!(w, "\nFailed pods ({}):", self.failed_pods.len());
        if !self.failed_pods.is_empty() {
            let mut rows = vec![vec![
                "NAMESPACE".to_string(),
                "POD".to_string(),
                "HOOK".to_string(),
                "MESSAGE".to_string(),
            ]];
            rows.extend(self.failed_pods.iter().map(|f| {
                vec![
                    f.namespace.clone(),
                    f.pod.clone(),
                    f.hook.clone(),
                    one_line(&f.message),
                ]
            }));
            table(w, "  ", &rows);
        }
        for (title, lines) in [
            ("Refused hooks", &self.refused_hooks),
            ("Late hooks", &self.late_hooks),
        ] {
            if lines.is_empty() {
                continue;
            }
            let _ = writeln!(w, "\n{title} ({}):", lines.len());
            let mut rows = vec![
                [
                    "NAMESPACE",
                    "POD",
                    "#",
                    "HOOK",
                    "SOURCE",
                    "PHASE",
                    "MESSAGE",
                ]
                .map(String::from)
                .to_vec(),
            ];
            rows.extend(lines.iter().map(|l| {
                vec![
                    l.namespace.clone(),
                    l.pod.clone(),
                    l.position.to_string(),
                    l.hook.clone(),
                    l.source.clone(),
                    l.phase.clone(),
                    one_line(&l.message),
                ]
            }));
            table(w, "  ", &rows);
        }
        for (title, lines) in [
            ("Missed init hooks", &self.missed_init_hooks),
            ("Hooks not applicable", &self.not_applicable_hooks),
        ] {
            if lines.is_empty() {
                continue;
            }
            let _ = writeln!(w, "\n{title} ({}):", lines.len());
            let mut rows = vec![
                ["NAMESPACE", "POD", "SOURCE", "INDEX", "CONTAINER"]
                    .map(String::from)
                    .to_vec(),
            ];
            rows.extend(lines.iter().map(|l| {
                vec![
                    l.namespace.clone(),
                    l.pod.clone(),
                    l.source.clone(),
                    l.index.to_string(),
                    if l.container.is_empty() {
                        "-".to_string()
                    } else {
                        l.container.clone()
                    },
                ]
            }));
            table(w, "  ", &rows);
        }
        if !self.one_pod.is_empty() {
            let _ = writeln!(w, "\nRun once per restore (runOn: OnePod):");
            let mut rows = vec![
                ["HOOK", "NAMESPACE", "POD", "PHASE"]
                    .map(String::from)
                    .to_vec(),
            ];
            rows.extend(self.one_pod.iter().map(|r| {
                vec![
                    r.hook.clone(),
                    r.namespace.clone(),
                    r.pod.clone(),
                    r.phase.clone(),
                ]
            }));
            table(w, "  ", &rows);
        }

        let _ = writeln!(w, "\nHooks by pod ({}):", self.pods.len());
        for pod in &self.pods {
            let label = pod.exec_label.as_deref().unwrap_or("<none>");
            let deleting = if pod.deleting { ", being deleted" } else { "" };
            let _ = writeln!(
                w,
                "  {}/{}: {} (exec label {label}{deleting})",
                pod.namespace, pod.name, pod.phase
            );
            if !pod.message.is_empty() {
                let _ = writeln!(w, "      {}", one_line(&pod.message));
            }
            for h in &pod.hooks {
                let mut notes = Vec::new();
                if h.late {
                    notes.push("late".to_string());
                }
                if h.refused.is_some() {
                    notes.push("refused".to_string());
                }
                if h.run_on == RunOn::OnePod {
                    notes.push("runOn OnePod".to_string());
                }
                if h.retries > 0 {
                    notes.push(format!("{} retries", h.retries));
                }
                if let Some(code) = h.exit_code {
                    notes.push(format!("exit {code}"));
                }
                let times = match (&h.started_at, &h.finished_at) {
                    (Some(s), Some(f)) => format!("{s} → {f}"),
                    (Some(s), None) => format!("started {s}"),
                    _ => String::new(),
                };
                let _ = writeln!(
                    w,
                    "    #{} {} ({}, container {}): {}{}{}",
                    h.position,
                    h.name,
                    h.source,
                    h.container,
                    phase_name(h.phase),
                    if times.is_empty() {
                        String::new()
                    } else {
                        format!("  {times}")
                    },
                    if notes.is_empty() {
                        String::new()
                    } else {
                        format!("  [{}]", notes.join(", "))
                    }
                );
                if h.phase != HookPhase::Succeeded && !h.message.is_empty() {
                    let _ = writeln!(w, "        message: {}", one_line(&h.message));
                }
                if matches!(h.phase, HookPhase::Failed | HookPhase::Skipped) {
                    if h.stderr.trim().is_empty() {
                        tail_lines(w, "stdout", &h.stdout);
                    } else {
                        tail_lines(w, "stderr", &h.stderr);
                    }
                }
            }
        }

        let _ = writeln!(w, "\nEvents ({}):", self.events.len());
        if !self.events.is_empty() {
            let mut rows = vec![
                ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
                    .map(String::from)
                    .to_vec(),
            ];
            rows.extend(self.events.iter().map(|e| {
                let object = if e.namespace.is_empty() {
                    format!("{}/{}", e.kind.to_lowercase(), e.name)
                } else {
                    format!("{}/{}/{}", e.kind.to_lowercase(), e.namespace, e.name)
                };
                let count = if e.count > 1 {
                    format!(" (x{})", e.count)
                } else {
                    String::new()
                };
                vec![
                    or_dash(&e.last_seen),
                    e.type_.clone(),
                    e.reason.clone(),
                    object,
                    format!("{}{count}", one_line(&e.message)),
                ]
            }));
            table(w, "  ", &rows);
        }
        out
    }
}

#[cfg(test)]
mod tests;
