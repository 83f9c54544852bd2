//! What one pod's plan and status contribute to the status of the objects that report on it
//! (docs/behaviour.md §8): each RestoreHook and ClusterRestoreHook whose hooks it has, and the
//! RestoreRun of its restore. Pure: recomputed from the pod whenever it changes, so a restarted
//! controller arrives at the same numbers.

use std::collections::BTreeMap;

use crate::exec_step::align;
use crate::hooks::compiled::SourceKind;
use crate::hooks::plan::{EXEC_LABEL, EXEC_PENDING, ExecPlan, ExecStatus, HookPhase, RunOn};
use crate::hooks::types::HookCounts;

/// An object whose status sums pods' contributions.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// A RestoreHook's status (docs/behaviour.md §8.1).
    RestoreHook {
        /// The RestoreHook's namespace: the pod's.
        namespace: String,
        /// The RestoreHook's name.
        name: String,
    },
    /// A ClusterRestoreHook's status (§8.1).
    ClusterRestoreHook {
        /// The ClusterRestoreHook's name.
        name: String,
    },
    /// The RestoreRun of one restore (§8.3).
    RestoreRun {
        /// The full restore name (the plan's `restore`); [`restore_run_name`] gives the object
        /// name.
        restore: String,
    },
}

/// One pod's part in one target's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contribution {
    /// The pod's plan has at least one exec hook of the target.
    pub planned: bool,
    /// The pod's hooks of the target by phase, plus its not-applicable and missed init hooks.
    /// Hook objects count `Skipped` as failed; a RestoreRun keeps `skipped` apart.
    pub counts: HookCounts,
    /// The pod's first failed hook of the target: its name and message.
    pub first_failure: Option<(String, String)>,
    /// The target's `runOn: OnePod` hooks that started in this pod (it is the one that runs
    /// them, docs/behaviour.md §6.15): each hook's name and position, and its phase.
    pub one_pod: Vec<(String, usize, HookPhase)>,
}

/// The status a pod's hooks are counted by (docs/behaviour.md §8.3): hooks that can never start
/// count as failed, with the reason, not as pending, or their restore would stay `InProgress`
/// forever. They are the hooks not ended
///
/// - when the controller refused the pod's plan or status (a status with a top-level message,
///   §5.3, §9.3): the refusal is the reason;
/// - when the pod's exec label is not `pending` (`exec_label`, changed or removed by hand,
///   §5.5): the controller watches only pending pods, so nothing starts on it unless the label
///   is set back (then they count as pending again).
pub fn settled_status(
    plan: &ExecPlan,
    status: Option<ExecStatus>,
    exec_label: Option<&str>,
) -> Option<ExecStatus> {
    let refusal = status
        .as_ref()
        .map(|s| s.message.clone())
        .filter(|m| !m.is_empty());
    let reason = match (refusal, exec_label) {
        (Some(refusal), _) => refusal,
        (None, Some(EXEC_PENDING)) => return status,
        (None, Some(other)) => format!(
            "not run: the pod's {EXEC_LABEL} label is \"{other}\", not \"{EXEC_PENDING}\", so no \
             hook starts on it (set it back to \"{EXEC_PENDING}\" to run the rest)"
        ),
        (None, None) => format!(
            "not run: the pod's {EXEC_LABEL} label was removed, so no hook starts on it (set it \
             to \"{EXEC_PENDING}\" to run the rest)"
        ),
    };
    let mut settled = align(plan, status.as_ref());
    if settled.hooks.iter().all(|h| h.phase.is_terminal()) {
        return status;
    }
    for hook in settled.hooks.iter_mut().filter(|h| !h.phase.is_terminal()) {
        hook.phase = HookPhase::Failed;
        hook.message = reason.clone();
    }
    Some(settled)
}

/// Every target a pod contributes to, and how.
pub fn tally_pod(
    namespace: &str,
    plan: &ExecPlan,
    status: Option<&ExecStatus>,
) -> BTreeMap<Target, Contribution> {
    let status = align(plan, status);
    let mut out: BTreeMap<Target, Contribution> = BTreeMap::new();
    let run = Target::RestoreRun {
        restore: plan.restore.clone(),
    };
    let hook_target = |source: &str| match SourceKind::parse_source(source)? {
        (SourceKind::RestoreHook, name) => Some(Target::RestoreHook {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }),
        (SourceKind::ClusterRestoreHook, name) => Some(Target::ClusterRestoreHook {
            name: name.to_string(),
        }),
        (SourceKind::VeleroRestore, _) => None,
    };
    for (hook, entry) in plan.hooks.iter().zip(&status.hooks) {
        let targets = [Some(run.clone()), hook_target(&hook.source)];
        for target in targets.into_iter().flatten() {
            let is_run = matches!(target, Target::RestoreRun { .. });
            let c = out.entry(target).or_default();
            c.planned = true;
            match entry.phase {
                HookPhase::Succeeded => c.counts.succeeded += 1,
                HookPhase::Failed => c.counts.failed += 1,
                // Hook objects count a skipped hook as failed (it did not run because of a
                // failure); the restore's view keeps them apart.
                HookPhase::Skipped if is_run => c.counts.skipped += 1,
                HookPhase::Skipped => c.counts.failed += 1,
                HookPhase::Pending | HookPhase::Running => c.counts.pending += 1,
                // The pod that runs it counts the outcome.
                HookPhase::OtherPod => {}
            }
            if hook.run_on == RunOn::OnePod && entry.started_at.is_some() {
                c.one_pod.push((hook.name.clone(), hook.index, entry.phase));
            }
            if hook.refused.is_some() {
                c.counts.refused += 1;
            }
            if entry.phase == HookPhase::Failed && c.first_failure.is_none() {
                c.first_failure = Some((hook.name.clone(), entry.message.clone()));
            }
        }
    }
    for (refs, missed) in [(&plan.not_applicable, false), (&plan.missed_init, true)] {
        for r in refs {
            for target in [Some(run.clone()), hook_target(&r.source)]
                .into_iter()
                .flatten()
            {
                let c = out.entry(target).or_default();
                if missed {
                    c.counts.missed_init += 1;
                } else {
                    c.counts.not_applicable += 1;
                }
            }
        }
    }
    out
}

/// A restore's phase from its counts: in progress while any hook is pending; then completed, or
/// partially failed when any hook failed, was skipped or missed its init hooks.
pub fn run_phase(counts: &HookCounts) -> &'static str {
    if counts.pending > 0 {
        "InProgress"
    } else if counts.failed + counts.skipped + counts.missed_init > 0 {
        "PartiallyFailed"
    } else {
        "Completed"
    }
}

/// The RestoreRun condition that is `True` once the restore's hooks have ended, whatever their
/// outcome (docs/behaviour.md §8.3): what `kubectl wait --for=condition=Completed` waits for.
pub const CONDITION_COMPLETED: &str = "Completed";
/// The RestoreRun condition that says whether the ended restore had a hook that did not succeed
/// (docs/behaviour.md §8.3): `Unknown` while it is in progress.
pub const CONDITION_FAILED: &str = "Failed";

/// A RestoreRun's conditions in `phase` (docs/behaviour.md §8.3), as `(type, status)`; the
/// reason of each is the phase.
///
/// - `Completed`: `True` in every phase but `InProgress` (Argo Workflows' `Completed`: the run is
///   over, however it went), so that one `kubectl wait` returns on every end, and a script written
///   for an earlier version (which had only this condition) keeps working whatever phases are
///   added later;
/// - `Failed`: `True` when it ended with a hook that failed, was skipped or missed its init hooks
///   (`PartiallyFailed`, and any failed end added later), `False` when it ended `Completed`,
///   `Unknown` while `InProgress` (a failure counted now can still turn pending: a pod whose
///   exec label is set back, §5.5). As a Job's `Failed`: `kubectl wait --for=condition=Failed`
///   returns only on a failed end, `--for=condition=Failed=False` only on a successful one.
pub fn run_conditions(phase: &str) -> [(&'static str, &'static str); 2] {
    let (completed, failed) = match phase {
        "InProgress" => ("False", "Unknown"),
        "Completed" => ("True", "False"),
        _ => ("True", "True"),
    };
    [(CONDITION_COMPLETED, completed), (CONDITION_FAILED, failed)]
}

/// A RestoreRun's object name for a restore name: the name itself when it is a valid object
/// name, else a lowercase form of it with a hash suffix (restore names from namespace labels may
/// hold characters object names may not).
pub fn restore_run_name(restore: &str) -> String {
    let valid = !restore.is_empty()
        && restore.len() <= 253
        && restore
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && restore.as_bytes()[0].is_ascii_alphanumeric()
        && restore.as_bytes()[restore.len() - 1].is_ascii_alphanumeric();
    if valid {
        return restore.to_string();
    }
    let suffix = name_hash(restore);
    let mut base: String = restore
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(200)
        .collect();
    base = base
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string();
    if base.is_empty() {
        format!("restore-{suffix}")
    } else {
        format!("{base}-{suffix}")
    }
}

/// 8 hex digits of the SHA-256 of `s`: what keeps a shortened object name distinct.
pub(crate) fn name_hash(s: &str) -> String {
    let hash = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    crate::hex::lower_hex(&hash.as_ref()[..4])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::plan::{HookRef, PlannedHook};

    fn hook(name: &str, source: &str) -> PlannedHook {
        PlannedHook::example(name, source, "db")
    }

    #[test]
    fn a_pod_counts_for_its_hook_objects_and_its_restore() {
        let plan = ExecPlan {
            restore: "nightly".into(),
            hooks: vec![
                hook("a", "restorehook/a"),
                hook("x", "velero-restore/nightly"),
                hook("c", "clusterrestorehook/c"),
                hook("a", "restorehook/a"),
            ],
            not_applicable: vec![HookRef {
                source: "restorehook/b".into(),
                name: "b".into(),
                index: 0,
                container: "pg".into(),
            }],
            missed_init: vec![HookRef {
                source: "clusterrestorehook/c".into(),
                name: "c".into(),
                index: 1,
                container: String::new(),
            }],
            ..Default::default()
        };
        let mut status = align(&plan, None);
        status.hooks[0].phase = HookPhase::Succeeded;
        status.hooks[1].phase = HookPhase::Failed;
        status.hooks[1].message = "exit 1".into();
        status.hooks[2].phase = HookPhase::Skipped;
        let t = tally_pod("shop", &plan, Some(&status));
        let a = &t[&Target::RestoreHook {
            namespace: "shop".into(),
            name: "a".into(),
        }];
        assert_eq!(
            (a.counts.succeeded, a.counts.pending, a.planned),
            (1, 1, true)
        );
        let b = &t[&Target::RestoreHook {
            namespace: "shop".into(),
            name: "b".into(),
        }];
        assert_eq!((b.counts.not_applicable, b.planned), (1, false));
        let c = &t[&Target::ClusterRestoreHook { name: "c".into() }];
        assert_eq!(
            (c.counts.failed, c.counts.missed_init),
            (1, 1),
            "skipped counts as failed"
        );
        let run = &t[&Target::RestoreRun {
            restore: "nightly".into(),
        }];
        assert_eq!(
            (
                run.counts.succeeded,
                run.counts.failed,
                run.counts.skipped,
                run.counts.pending
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(run.first_failure, Some(("x".into(), "exit 1".into())));
        assert_eq!(t.len(), 4, "no target for the Velero Restore");
    }

    /// Which hooks count as failed because they can never start, and with what message.
    #[test]
    fn hooks_that_can_never_start_count_as_failed() {
        use HookPhase::{Failed as F, OtherPod as O, Pending as P, Running as R, Succeeded as S};
        let plan = ExecPlan {
            restore: "nightly".into(),
            hooks: vec![hook("a", "restorehook/a"), hook("b", "restorehook/a")],
            ..Default::default()
        };
        let status = |phases: [HookPhase; 2], message: &str| {
            let mut s = align(&plan, None);
            for (h, p) in s.hooks.iter_mut().zip(phases) {
                h.phase = p;
            }
            s.message = message.into();
            Some(s)
        };
        let relabelled = "not run: the pod's restore-hooks.dev/exec label is \"done\", not \"pending\", so no hook starts on it (set it back to \"pending\" to run the rest)";
        let removed = "not run: the pod's restore-hooks.dev/exec label was removed, so no hook starts on it (set it to \"pending\" to run the rest)";
        struct Case {
            name: &'static str,
            status: Option<ExecStatus>,
            label: Option<&'static str>,
            phases: [HookPhase; 2],
            messages: [&'static str; 2],
        }
        let case = |name, status, label, phases, messages| Case {
            name,
            status,
            label,
            phases,
            messages,
        };
        let cases = [
            case(
                "pending: counted as they are",
                status([S, R], ""),
                Some("pending"),
                [S, R],
                ["", ""],
            ),
            case(
                "pending, no status yet",
                None,
                Some("pending"),
                [P, P],
                ["", ""],
            ),
            case(
                "refused: the refusal is the reason",
                status([S, P], "plan refused"),
                Some("failed"),
                [S, F],
                ["", "plan refused"],
            ),
            case(
                "refused, even while still labelled pending",
                status([P, P], "status refused"),
                Some("pending"),
                [F, F],
                ["status refused", "status refused"],
            ),
            case(
                "relabelled by hand",
                status([S, P], ""),
                Some("done"),
                [S, F],
                ["", relabelled],
            ),
            case(
                "relabelled before any status",
                None,
                Some("done"),
                [F, F],
                [relabelled, relabelled],
            ),
            case(
                "label removed, a hook running",
                status([R, P], ""),
                None,
                [F, F],
                [removed, removed],
            ),
            case(
                "ended: nothing to settle",
                status([S, O], ""),
                Some("done"),
                [S, O],
                ["", ""],
            ),
        ];
        for c in cases {
            let settled = settled_status(&plan, c.status, c.label);
            let got = align(&plan, settled.as_ref());
            let phases: Vec<HookPhase> = got.hooks.iter().map(|h| h.phase).collect();
            let messages: Vec<&str> = got.hooks.iter().map(|h| h.message.as_str()).collect();
            assert_eq!(
                (phases, messages),
                (c.phases.to_vec(), c.messages.to_vec()),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn phases_and_names() {
        let c = |pending, failed, skipped, missed_init| HookCounts {
            succeeded: 1,
            pending,
            failed,
            skipped,
            missed_init,
            ..Default::default()
        };
        assert_eq!(run_phase(&c(1, 1, 0, 0)), "InProgress");
        assert_eq!(run_phase(&c(0, 0, 0, 0)), "Completed");
        assert_eq!(run_phase(&c(0, 1, 0, 0)), "PartiallyFailed");
        assert_eq!(run_phase(&c(0, 0, 0, 1)), "PartiallyFailed");
        // Every end makes `Completed` True; `Failed` tells the ends apart, and is Unknown before.
        let conditions = [
            (
                "InProgress",
                [("Completed", "False"), ("Failed", "Unknown")],
            ),
            ("Completed", [("Completed", "True"), ("Failed", "False")]),
            (
                "PartiallyFailed",
                [("Completed", "True"), ("Failed", "True")],
            ),
        ];
        for (phase, want) in conditions {
            assert_eq!(run_conditions(phase), want, "{phase}");
        }
        assert_eq!(restore_run_name("nightly-1"), "nightly-1");
        let odd = restore_run_name("Nightly_Backup");
        assert!(
            odd.starts_with("nightly-backup-") && odd.len() == "nightly-backup-".len() + 8,
            "{odd}"
        );
        assert_ne!(restore_run_name("A"), restore_run_name("a-"));
        assert!(restore_run_name("__").starts_with("restore-"));
    }
}
