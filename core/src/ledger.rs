//! The controller's own record of what it ran (docs/behaviour.md §9.5): per pod uid, the plan the
//! pod carried when the controller first saw it and every hook that started, with its result once
//! known. It lives in the restore's `RestoreRecord`s (cluster-scoped, owned by its RestoreRun),
//! which only the controller may write (no role but the controller's grants them).
//!
//! The record is split into parts of at most [`PODS_PER_RECORD`] pods: every start waits for its
//! write, and the API server rewrites, stores and returns the whole object on each write, so one
//! object holding a large restore's every pod made each start slower as the restore grew. A pod
//! joins the newest part when the controller first records it and stays there.
//!
//! The pod's own `restore-hooks.dev/status` is signed, but an older signed status of the same pod
//! is still a valid signature: a status rolled back, or removed, through any path that escaped
//! the admission policy would otherwise bring a finished hook back to `Pending`. The record is
//! what a controller (a new leader included) believes first: a hook it records as started never
//! starts again, whatever the pod says.
//!
//! The record also binds a plan to one pod: a plan id recorded for one pod uid is refused on any
//! other pod (a copy, or a pod recreated under the same name with the old plan).
//!
//! The entries themselves are data in [`crate::record`].

use crate::exec_step::{align, timestamp};
use crate::hooks::plan::{ExecPlan, ExecStatus, HookPhase};
pub use crate::record::{Attempts, Execution, Mark, OnePodStart};
use crate::trust::Rejection;
use jiff::Timestamp;

/// The most pods of one namespace one restore's record holds (it is held in the controller's
/// memory, and read whole by each new leader). Per namespace, so that the pods of one namespace,
/// which any pod creator there can churn, never make another namespace's pods unrecordable.
pub const MAX_RECORDED_PODS: usize = 10_000;

/// The most pods one `RestoreRecord` holds (about 90 bytes each, as much again in the object's
/// `managedFields`): small enough that a write costs the API server little, large enough that the
/// pods whose hooks run at one time share one part and one write.
pub const PODS_PER_RECORD: usize = 200;

/// The name of part `part` of the record of RestoreRun `run`: `<run>-<part>`, or, when that would
/// be longer than an object name may be, the run's name shortened with a hash of it.
pub fn record_name(run: &str, part: u32) -> String {
    let suffix = format!("-{part}");
    if run.len() + suffix.len() <= 253 {
        return format!("{run}{suffix}");
    }
    let base: String = run
        .char_indices()
        .take_while(|(i, c)| i + c.len_utf8() <= 200)
        .map(|(_, c)| c)
        .collect();
    let base = base.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{base}-{}{suffix}", crate::restore::tally::name_hash(run))
}

/// Whether a pod may act on its plan, by the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The record holds this plan for this pod.
    Held,
    /// Nobody holds the plan: record it for this pod before anything of it runs.
    Free,
}

/// Checks a pod's plan against the record: `recorded` is the pod uid's entry, `holder` the uid
/// the record holds `plan` for, `pods` how many pods of the pod's `namespace` the restore's
/// record holds.
pub fn claim(
    uid: &str,
    plan: &str,
    recorded: Option<&Execution>,
    holder: Option<&str>,
    (run, namespace): (&str, &str),
    pods: usize,
) -> Result<Claim, Rejection> {
    if let Some(entry) = recorded {
        return if entry.plan == plan {
            Ok(Claim::Held)
        } else {
            Err(Rejection::PlanReplaced {
                plan: plan.to_string(),
                recorded: entry.plan.clone(),
            })
        };
    }
    match holder {
        Some(other) if other != uid => Err(Rejection::ClaimedByOtherPod {
            plan: plan.to_string(),
            holder: other.to_string(),
        }),
        Some(_) => Ok(Claim::Held),
        None if pods >= MAX_RECORDED_PODS => Err(Rejection::RecordFull {
            run: run.to_string(),
            namespace: namespace.to_string(),
            pods,
        }),
        None => Ok(Claim::Free),
    }
}

/// The pod's status with the record applied, and what that changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    /// One entry per plan hook: the pod's own where it agrees with the record, else the record's.
    pub status: ExecStatus,
    /// Hooks the record says started, which the pod shows `Pending`: its status was rolled back or
    /// removed. They never start again.
    pub rolled_back: Vec<usize>,
    /// Hooks the pod shows `Running` whose result only the record has (the controller that ran
    /// them stopped between recording the result and writing it on the pod).
    pub recovered: Vec<usize>,
    /// Hooks whose last started attempt the pod's signed status shows ended and released (it is
    /// `Pending` again with that many `retries`), while the record still shows it in flight: the
    /// controller that released it stopped before the record's write landed. Only a controller
    /// writes a signed status, and only after the attempt ended, so it counts as released: (the
    /// hook's position, the attempt). Record it.
    pub released: Vec<(usize, u32)>,
}

/// Message of a hook whose ended phase is restored from the record.
pub const RESTORED_FROM_RECORD: &str = "restored from the controller's record in the restore's \
     RestoreRun: the pod's restore-hooks.dev/status did not show this hook's result (rolled back, \
     removed, or not written before a restart); not re-run, its output was not kept";

/// Applies the record to the pod's status. `noticed` stands in for the start time of a hook the
/// record says started but the pod shows `Pending`: it counts as in flight from then (a later
/// start than the real one, so it is never declared interrupted too early).
pub fn reconcile(
    plan: &ExecPlan,
    recorded: Option<&ExecStatus>,
    execution: Option<&Execution>,
    noticed: Timestamp,
) -> Reconciled {
    let mut status = align(plan, recorded);
    let mut rolled_back = Vec::new();
    let mut recovered = Vec::new();
    let mut released = Vec::new();
    let Some(execution) = execution else {
        return Reconciled {
            status,
            rolled_back,
            recovered,
            released,
        };
    };
    for (i, entry) in status.hooks.iter_mut().enumerate() {
        let Some(mark) = execution.mark(i) else {
            continue;
        };
        let was = entry.phase;
        match (mark, was) {
            (_, p) if p.is_terminal() => {}
            // Its last attempt failed and may be tried again: Pending until then (§6.17).
            (Mark::Started, HookPhase::Pending) if execution.awaits_retry(i) => {}
            // The signed status is ahead of the record: it holds the end of the last attempt the
            // record saw start.
            (Mark::Started, HookPhase::Pending)
                if entry.retries >= execution.started_attempts(i) =>
            {
                released.push((i, execution.started_attempts(i)));
            }
            (Mark::Started, HookPhase::Running) => {}
            (Mark::Started, _) => {
                entry.phase = HookPhase::Running;
                entry.started_at = Some(timestamp(noticed));
                entry.finished_at = None;
            }
            (ended, _) => {
                entry.phase = if ended == Mark::Succeeded {
                    HookPhase::Succeeded
                } else {
                    HookPhase::Failed
                };
                entry.finished_at = Some(timestamp(noticed));
                entry.message = RESTORED_FROM_RECORD.to_string();
            }
        }
        if entry.phase != was {
            if was == HookPhase::Running {
                recovered.push(i);
            } else {
                rolled_back.push(i);
            }
        }
    }
    Reconciled {
        status,
        rolled_back,
        recovered,
        released,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::plan::{HookStatus, PlannedHook};

    fn plan(n: usize) -> ExecPlan {
        ExecPlan {
            id: "p1".into(),
            restore: "r".into(),
            issued_at: Some("2026-12-04T10:00:00Z".into()),
            hooks: (0..n)
                .map(|i| PlannedHook {
                    index: i,
                    ..PlannedHook::example(&format!("h{i}"), "restorehook/h", "db")
                })
                .collect(),
            ..Default::default()
        }
    }

    fn status(plan: &ExecPlan, phases: &[HookPhase]) -> ExecStatus {
        let mut s = align(plan, None);
        for (entry, &p) in s.hooks.iter_mut().zip(phases) {
            entry.phase = p;
            if p != HookPhase::Pending {
                entry.started_at = Some("2026-12-04T10:00:05Z".into());
            }
        }
        s
    }

    fn record(marks: &[(usize, Mark)]) -> Execution {
        let mut e = Execution::claimed("p1");
        for &(i, m) in marks {
            e.set(i, m);
        }
        e
    }

    #[test]
    fn the_record_wins_over_a_status_that_went_back() {
        use HookPhase::*;
        let noticed: Timestamp = "2026-12-04T11:00:00Z".parse().unwrap();
        let p = plan(3);
        // (pod status, record, phases after, rolled back, recovered)
        type Row = (
            Option<Vec<HookPhase>>,
            Option<Vec<(usize, Mark)>>,
            Vec<HookPhase>,
            Vec<usize>,
            Vec<usize>,
        );
        let rows: Vec<Row> = vec![
            // No record: the pod's status as it is.
            (
                Some(vec![Succeeded, Running, Pending]),
                None,
                vec![Succeeded, Running, Pending],
                vec![],
                vec![],
            ),
            // Agreeing record: nothing changes.
            (
                Some(vec![Succeeded, Running, Pending]),
                Some(vec![(0, Mark::Succeeded), (1, Mark::Started)]),
                vec![Succeeded, Running, Pending],
                vec![],
                vec![],
            ),
            // The status annotation removed after two hooks ran: both come back ended / in flight.
            (
                None,
                Some(vec![(0, Mark::Succeeded), (1, Mark::Started)]),
                vec![Succeeded, Running, Pending],
                vec![0, 1],
                vec![],
            ),
            // Rolled back to an older signed status in which hook 0 was still running.
            (
                Some(vec![Running, Pending, Pending]),
                Some(vec![(0, Mark::Failed), (1, Mark::Succeeded)]),
                vec![Failed, Succeeded, Pending],
                vec![1],
                vec![0],
            ),
            // A terminal phase on the pod is never replaced (it has the output).
            (
                Some(vec![Failed, Skipped, Pending]),
                Some(vec![(0, Mark::Started)]),
                vec![Failed, Skipped, Pending],
                vec![],
                vec![],
            ),
        ];
        for (pod, marks, want, want_rolled, want_recovered) in rows {
            let recorded = pod.map(|phases| status(&p, &phases));
            let entry = marks.map(|m| record(&m));
            let got = reconcile(&p, recorded.as_ref(), entry.as_ref(), noticed);
            let phases: Vec<HookPhase> = got.status.hooks.iter().map(|h| h.phase).collect();
            assert_eq!(phases, want, "{entry:?}");
            assert_eq!(got.rolled_back, want_rolled, "{entry:?}");
            assert_eq!(got.recovered, want_recovered, "{entry:?}");
            for i in got.rolled_back.iter().chain(&got.recovered) {
                let h: &HookStatus = &got.status.hooks[*i];
                if h.phase == Running {
                    // In flight from when the controller noticed, never from "no start time".
                    assert_eq!(h.started_at.as_deref(), Some("2026-12-04T11:00:00Z"));
                } else {
                    assert_eq!(h.message, RESTORED_FROM_RECORD);
                }
            }
        }
    }

    /// docs/behaviour.md §9.5: a signed status that holds the end of the attempt the record last
    /// saw start counts as that end (the controller that released it stopped before the record's
    /// write landed); an older status, which does not, is rolled back as before.
    #[test]
    fn a_signed_status_ahead_of_the_record_counts_as_the_attempts_end() {
        let noticed: Timestamp = "2026-12-04T11:00:00Z".parse().unwrap();
        let p = plan(1);
        // (what, attempts the record saw start and release (None: marked R alone), the status's
        // retries, want released, want rolled back)
        type Row = (
            &'static str,
            Option<(u32, u32)>,
            u32,
            Vec<(usize, u32)>,
            Vec<usize>,
        );
        let rows: Vec<Row> = vec![
            (
                "attempt 1 released on the pod only",
                None,
                1,
                vec![(0, 1)],
                vec![],
            ),
            (
                "attempt 2 released on the pod only",
                Some((2, 1)),
                2,
                vec![(0, 2)],
                vec![],
            ),
            (
                "both say released: nothing to record",
                Some((2, 2)),
                2,
                vec![],
                vec![],
            ),
            (
                "an older status, attempt 2 in flight",
                Some((2, 1)),
                1,
                vec![],
                vec![0],
            ),
            ("a status from before any start", None, 0, vec![], vec![0]),
        ];
        for (what, attempts, retries, want_released, want_rolled) in rows {
            let mut entry = record(&[(0, Mark::Started)]);
            if let Some((started, released)) = attempts {
                entry
                    .attempts
                    .insert("0".into(), Attempts { started, released });
            }
            let mut on_pod = status(&p, &[HookPhase::Pending]);
            on_pod.hooks[0].retries = retries;
            let got = reconcile(&p, Some(&on_pod), Some(&entry), noticed);
            assert_eq!(got.released, want_released, "{what}");
            assert_eq!(got.rolled_back, want_rolled, "{what}");
            if !want_released.is_empty() {
                assert_eq!(got.status, on_pod, "{what}: the status stands");
                let mut merged = entry.clone();
                for (i, n) in &got.released {
                    merged.merge(&Execution {
                        attempts: [(
                            i.to_string(),
                            Attempts {
                                started: *n,
                                released: *n,
                            },
                        )]
                        .into(),
                        ..Execution::claimed("p1")
                    });
                }
                assert_eq!(merged.next_attempt(0), Some(retries + 1), "{what}");
            }
        }
    }

    #[test]
    fn a_plan_is_held_for_the_first_pod_that_carried_it() {
        let held = Execution::claimed("p1");
        let other = Execution::claimed("p0");
        type Row<'a> = (
            Option<&'a Execution>,
            Option<&'a str>,
            usize,
            Result<Claim, &'a str>,
        );
        let rows: Vec<Row<'_>> = vec![
            (None, None, 0, Ok(Claim::Free)),
            (Some(&held), Some("u1"), 1, Ok(Claim::Held)),
            // Copied onto another pod (a sibling, or a pod recreated under the same name).
            (None, Some("u0"), 1, Err("claimed_by_other_pod")),
            // This pod's plan annotation was swapped for another valid plan.
            (Some(&other), Some("u9"), 2, Err("plan_replaced")),
            (None, None, MAX_RECORDED_PODS, Err("record_full")),
            // A full record still serves the pods it holds.
            (Some(&held), Some("u1"), MAX_RECORDED_PODS, Ok(Claim::Held)),
        ];
        for (recorded, holder, pods, want) in rows {
            let got = claim("u1", "p1", recorded, holder, ("r", "shop"), pods);
            match (&got, want) {
                (Ok(c), Ok(w)) => assert_eq!(*c, w),
                (Err(r), Err(w)) => assert_eq!(r.metric_reason(), w, "{r}"),
                _ => panic!("{recorded:?} {holder:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn record_parts_have_valid_distinct_names() {
        let long = "a".repeat(253);
        let dotted = format!("{}.{}", "b".repeat(199), "c".repeat(53));
        let rows: Vec<(&str, u32, &str)> = vec![
            ("nightly", 0, "nightly-0"),
            ("nightly", 12, "nightly-12"),
            // "nightly-1" part 2 is not "nightly" part 12.
            ("nightly-1", 2, "nightly-1-2"),
            (&long, 3, ""),
            (&dotted, 0, ""),
        ];
        for (run, part, want) in rows {
            let got = record_name(run, part);
            if !want.is_empty() {
                assert_eq!(got, want);
            }
            assert!(got.len() <= 253, "{got}");
            assert!(got.ends_with(&format!("-{part}")), "{got}");
            let valid = got
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
                && got.as_bytes()[0].is_ascii_alphanumeric();
            assert!(valid, "{got}");
        }
        // Shortened names stay distinct across runs and parts.
        let other = format!("{}b", "a".repeat(252));
        assert_ne!(record_name(&long, 0), record_name(&other, 0));
        assert_ne!(record_name(&long, 0), record_name(&long, 1));
        assert!(!record_name(&dotted, 0).contains(".-"));
        // A run name no controller writes (a hand-made object's spec): still no panic.
        assert!(record_name(&"é".repeat(200), 7).len() <= 253);
    }

    #[test]
    fn entries_only_grow() {
        let mut e = Execution::claimed("p1");
        assert!(e.set(0, Mark::Started));
        assert!(e.set(0, Mark::Failed));
        assert!(
            !e.set(0, Mark::Started),
            "a result never goes back to started"
        );
        let mut stale = Execution::claimed("p1");
        stale.set(0, Mark::Started);
        stale.set(1, Mark::Started);
        e.merge(&stale);
        assert_eq!(e.mark(0), Some(Mark::Failed));
        assert_eq!(e.mark(1), Some(Mark::Started));
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"plan":"p1","hooks":{"0":"F","1":"R"}}"#
        );
    }

    /// `retry` (§6.17): a started hook starts again only after its last attempt was released, and
    /// a stale view of the record (fewer attempts) never brings back an attempt that started.
    #[test]
    fn an_attempt_starts_again_only_once_the_record_released_the_last() {
        let tries = |started, released| Attempts { started, released };
        let mut e = Execution::claimed("p1");
        assert_eq!(e.next_attempt(0), Some(1), "never started");
        e.set(0, Mark::Started);
        assert_eq!(e.next_attempt(0), None, "in flight, no attempts recorded");
        e.attempts.insert("0".into(), tries(1, 0));
        assert_eq!(e.next_attempt(0), None, "attempt 1 in flight");
        e.attempts.insert("0".into(), tries(1, 1));
        assert_eq!(e.next_attempt(0), Some(2), "attempt 1 released");
        assert!(e.awaits_retry(0));
        let mut stale = Execution::claimed("p1");
        stale.set(0, Mark::Started);
        stale.attempts.insert("0".into(), tries(2, 1));
        e.merge(&stale);
        assert_eq!(e.attempts["0"], tries(2, 1));
        assert_eq!(e.next_attempt(0), None, "attempt 2 started: in flight");
        e.merge(&Execution {
            attempts: [("0".to_string(), tries(1, 1))].into(),
            ..Execution::claimed("p1")
        });
        assert_eq!(e.next_attempt(0), None, "an older view changes nothing");
        e.set(0, Mark::Succeeded);
        assert_eq!(e.next_attempt(0), None, "ended: never again");
        assert!(!e.awaits_retry(0));

        // The pod shows the hook Pending, waiting for its next attempt: not rolled back.
        let p = plan(1);
        let mut released = Execution::claimed("p1");
        released.set(0, Mark::Started);
        released.attempts.insert("0".into(), tries(1, 1));
        let noticed: Timestamp = "2026-12-04T11:00:00Z".parse().unwrap();
        let r = reconcile(
            &p,
            Some(&status(&p, &[HookPhase::Pending])),
            Some(&released),
            noticed,
        );
        assert_eq!(
            (r.status.hooks[0].phase, r.rolled_back),
            (HookPhase::Pending, vec![])
        );
        released.attempts.insert("0".into(), tries(2, 1));
        let r = reconcile(
            &p,
            Some(&status(&p, &[HookPhase::Pending])),
            Some(&released),
            noticed,
        );
        assert_eq!(
            (r.status.hooks[0].phase, r.rolled_back),
            (HookPhase::Running, vec![0]),
            "attempt 2 started: a Pending status went back"
        );
    }
}
