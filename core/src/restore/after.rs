//! `after`: order across the pods of a restore (docs/behaviour.md §6.16). A hook-object exec hook
//! may name hooks it waits for; it starts only once each of them ended well on every pod that
//! counts for it. Pure: the turn of a waiting hook from the runs the controller sees, and the
//! cycle an `after` graph contains, if any.
//!
//! Each awaited hook is one hook object's hooks in the pods of one namespace of the restore
//! ([`AwaitedKey`]): the waiting pod's own namespace, or the one a ClusterRestoreHook names. So a
//! RestoreHook in one namespace never waits on, is never released by, and is never skipped by
//! anything in another namespace (§6.20).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::hooks::plan::{AwaitedKey, HookPhase, OnError};

pub use crate::hooks::plan::MAX_AFTER;

/// One planned run of an awaited hook: the hook in one pod that counts for the waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwaitedRun {
    /// `namespace/name` of the pod that plans it.
    pub pod: String,
    /// Its phase there, from the pod's verified status (`Pending` when it has none yet).
    pub phase: HookPhase,
    /// Its own `onError`: whether its failure stops the hooks that wait for it.
    pub on_error: OnError,
}

/// Where a hook with `after` stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterTurn {
    /// Every awaited hook ended well (or failed with `onError: Continue`): it may start.
    Go,
    /// Still waiting, and on what: what the status says if its `waitTimeout` passes first.
    Wait(String),
    /// It never runs: an awaited hook failed (or was skipped) with `onError: Fail`. The message
    /// for its status.
    Skip(String),
}

/// How an awaited hook is named in messages: the object's name, with its kind when it is a
/// ClusterRestoreHook and its namespace when that is not the waiting pod's.
pub fn show_awaited(key: &AwaitedKey, pod_namespace: &str) -> String {
    let mut shown = match key.source.split_once('/') {
        Some(("restorehook", name)) => name.to_string(),
        _ => key.source.clone(),
    };
    if key.namespace != pod_namespace {
        let _ = write!(shown, " in namespace {}", key.namespace);
    }
    shown
}

/// What a waiter needs to know of the runs of one awaited hook, whatever their number: the first
/// run (in pod order) that stops it, the first that has not ended, and whether any run counts.
/// [`Awaiting::of`] reads it from the runs; the restore model keeps it per awaited hook as pods
/// change (`RestoreIndex`), so a waiter's turn costs the same with ten pods or fifty thousand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Awaiting<'a> {
    /// The first run that failed or was skipped with `onError: Fail`: its pod, and whether it
    /// failed (`Failed`) or was skipped (`Skipped`).
    pub stopped: Option<(&'a str, HookPhase)>,
    /// The pod of the first run that has not ended (`Pending` or `Running`).
    pub unended: Option<&'a str>,
    /// Some run counts for the waiter: any but `OtherPod` (another pod's `runOn: OnePod` turn).
    pub planned: bool,
}

impl<'a> Awaiting<'a> {
    /// The summary of `runs`, taken in their order (the restore model gives them by pod).
    pub fn of(runs: &'a [AwaitedRun]) -> Self {
        let mut seen = Awaiting::default();
        for run in runs {
            match run.phase {
                HookPhase::OtherPod => continue,
                HookPhase::Failed | HookPhase::Skipped if run.on_error == OnError::Fail => {
                    seen.stopped.get_or_insert((&run.pod, run.phase));
                }
                HookPhase::Pending | HookPhase::Running => {
                    seen.unended.get_or_insert(&run.pod);
                }
                HookPhase::Succeeded | HookPhase::Failed | HookPhase::Skipped => {}
            }
            seen.planned = true;
        }
        seen
    }

    /// What a waiter's turn depends on beyond messages: whether some run stops it, whether some
    /// has not ended, whether any counts. The restore model wakes waiters only when this
    /// changes: a woken worker reads its turn, messages included, when it looks.
    pub fn gate(&self) -> (bool, bool, bool) {
        (self.stopped.is_some(), self.unended.is_some(), self.planned)
    }
}

/// The turn of a hook that waits for `after` (its awaited hooks, as [`show_awaited`] names them
/// paired with their runs: `runs(i)` for the i-th), and whether the controller has seen every pod
/// of the restore yet (`listed`: before that, a hook with no run may only be unlisted).
///
/// Runs recorded `OtherPod` are another pod's `runOn: OnePod` turn: the pod that ran it decides.
/// A failed or skipped run holds the hooks that wait for it only when its own `onError` is `Fail`
/// (docs/behaviour.md §6.16).
pub fn after_turn<'r>(
    awaited: &[String],
    listed: bool,
    mut runs: impl FnMut(usize) -> &'r [AwaitedRun],
) -> AfterTurn {
    after_turn_of(awaited, listed, |i| Awaiting::of(runs(i)))
}

/// [`after_turn`] from each awaited hook's [`Awaiting`] (`seen(i)` for the i-th) rather than its
/// runs.
pub fn after_turn_of<'r>(
    awaited: &[String],
    listed: bool,
    mut seen: impl FnMut(usize) -> Awaiting<'r>,
) -> AfterTurn {
    if !listed {
        return AfterTurn::Wait("the restore's pods are still being listed".to_string());
    }
    let mut waiting = None;
    for (i, name) in awaited.iter().enumerate() {
        let seen = seen(i);
        if let Some((pod, phase)) = seen.stopped {
            let what = if phase == HookPhase::Failed {
                "failed"
            } else {
                "was skipped"
            };
            return AfterTurn::Skip(format!(
                "after: hook {name} {what} in pod {pod} (onError: Fail); not executed"
            ));
        }
        if waiting.is_none() {
            waiting = match (seen.unended, seen.planned) {
                (Some(pod), _) => Some(format!("hook {name} has not ended in pod {pod}")),
                (None, false) => Some(format!(
                    "hook {name} is planned on no pod of the restore that counts for it"
                )),
                (None, true) => None,
            };
        }
    }
    match waiting {
        Some(why) => AfterTurn::Wait(why),
        None => AfterTurn::Go,
    }
}

/// The first cycle through `start` in an `after` graph, as the nodes along it, `start` first and
/// last (`[a, b, a]`); `None` when `start` is on no cycle. `edges(n)` are the nodes `n` waits
/// for; a node without edges waits for nothing.
pub fn find_cycle<N: Ord + Clone>(
    start: &N,
    mut edges: impl FnMut(&N) -> Vec<N>,
) -> Option<Vec<N>> {
    // Depth-first from `start`, remembering the path; each node is expanded once (a node
    // already expanded without reaching `start` never will).
    let mut path = vec![start.clone()];
    let mut next: Vec<std::vec::IntoIter<N>> = vec![edges(start).into_iter()];
    let mut expanded = BTreeSet::new();
    while let Some(out) = next.last_mut() {
        match out.next() {
            Some(node) if node == *start => {
                path.push(node);
                return Some(path);
            }
            Some(node) => {
                if expanded.insert(node.clone()) {
                    next.push(edges(&node).into_iter());
                    path.push(node);
                }
            }
            None => {
                next.pop();
                path.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use HookPhase::{Failed, OtherPod, Pending, Running, Skipped, Succeeded};
    use OnError::{Continue, Fail};

    fn run(pod: &str, phase: HookPhase, on_error: OnError) -> AwaitedRun {
        AwaitedRun {
            pod: format!("shop/{pod}"),
            phase,
            on_error,
        }
    }

    /// What, the hooks waited for with their runs, listed, the turn.
    type Case = (
        &'static str,
        Vec<(&'static str, Vec<AwaitedRun>)>,
        bool,
        AfterTurn,
    );

    #[test]
    fn a_hook_starts_once_every_awaited_run_ended_well() {
        let cases: Vec<Case> = vec![
            (
                "nothing listed yet",
                vec![("db", vec![run("db-0", Succeeded, Fail)])],
                false,
                AfterTurn::Wait("the restore's pods are still being listed".into()),
            ),
            (
                "the one awaited run succeeded",
                vec![("db", vec![run("db-0", Succeeded, Fail)])],
                true,
                AfterTurn::Go,
            ),
            (
                "one of two runs still running",
                vec![(
                    "db",
                    vec![run("db-0", Succeeded, Fail), run("db-1", Running, Fail)],
                )],
                true,
                AfterTurn::Wait("hook db has not ended in pod shop/db-1".into()),
            ),
            (
                "pending counts as not ended",
                vec![("db", vec![run("db-0", Pending, Continue)])],
                true,
                AfterTurn::Wait("hook db has not ended in pod shop/db-0".into()),
            ),
            (
                "a hook no pod plans waits (the pod may come)",
                vec![("db", vec![])],
                true,
                AfterTurn::Wait(
                    "hook db is planned on no pod of the restore that counts for it".into(),
                ),
            ),
            (
                "failed with onError Fail: skipped, naming the pod",
                vec![(
                    "db",
                    vec![run("db-0", Failed, Fail), run("db-1", Running, Fail)],
                )],
                true,
                AfterTurn::Skip(
                    "after: hook db failed in pod shop/db-0 (onError: Fail); not executed".into(),
                ),
            ),
            (
                "skipped with onError Fail: skipped too",
                vec![("db", vec![run("db-0", Skipped, Fail)])],
                true,
                AfterTurn::Skip(
                    "after: hook db was skipped in pod shop/db-0 (onError: Fail); not executed"
                        .into(),
                ),
            ),
            (
                "failed with onError Continue: counts as ended",
                vec![(
                    "db",
                    vec![run("db-0", Failed, Continue), run("db-1", Succeeded, Fail)],
                )],
                true,
                AfterTurn::Go,
            ),
            (
                "runOn OnePod: the pod that ran it decides, OtherPod runs are neutral",
                vec![(
                    "migrate",
                    vec![run("api-0", Succeeded, Fail), run("api-1", OtherPod, Fail)],
                )],
                true,
                AfterTurn::Go,
            ),
            (
                "only OtherPod runs: nobody ran it yet",
                vec![("migrate", vec![run("api-1", OtherPod, Fail)])],
                true,
                AfterTurn::Wait(
                    "hook migrate is planned on no pod of the restore that counts for it".into(),
                ),
            ),
            (
                "two hooks: every one must be done; a failure of the second still skips",
                vec![
                    ("db", vec![run("db-0", Running, Fail)]),
                    ("cache", vec![run("cache-0", Failed, Fail)]),
                ],
                true,
                AfterTurn::Skip(
                    "after: hook cache failed in pod shop/cache-0 (onError: Fail); not executed"
                        .into(),
                ),
            ),
            (
                "two hooks: the first one waiting is reported",
                vec![
                    ("db", vec![run("db-0", Succeeded, Fail)]),
                    ("cache", vec![run("cache-0", Pending, Fail)]),
                ],
                true,
                AfterTurn::Wait("hook cache has not ended in pod shop/cache-0".into()),
            ),
        ];
        for (what, awaited, listed, want) in cases {
            let names: Vec<String> = awaited.iter().map(|(n, _)| n.to_string()).collect();
            let got = after_turn(&names, listed, |i| awaited[i].1.as_slice());
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn awaited_hooks_are_named_as_an_operator_reads_them() {
        let key = |source: &str, namespace: &str| AwaitedKey {
            source: source.into(),
            namespace: namespace.into(),
        };
        let cases = [
            (key("restorehook/db", "shop"), "db"),
            (
                key("clusterrestorehook/db", "shop"),
                "clusterrestorehook/db",
            ),
            (
                key("clusterrestorehook/db", "data"),
                "clusterrestorehook/db in namespace data",
            ),
        ];
        for (k, want) in cases {
            assert_eq!(show_awaited(&k, "shop"), want);
        }
    }

    #[test]
    fn cycles_are_found_through_the_start_only() {
        type Graph = BTreeMap<&'static str, Vec<&'static str>>;
        let graph = |edges: &[(&'static str, &[&'static str])]| -> Graph {
            edges.iter().map(|(f, t)| (*f, t.to_vec())).collect()
        };
        let cases: Vec<(&str, Graph, Option<&str>)> = vec![
            ("no edges", graph(&[]), None),
            ("a chain", graph(&[("a", &["b"]), ("b", &["c"])]), None),
            ("itself", graph(&[("a", &["a"])]), Some("a a")),
            (
                "two objects",
                graph(&[("a", &["b"]), ("b", &["a"])]),
                Some("a b a"),
            ),
            (
                "three, through a branch",
                graph(&[("a", &["x", "b"]), ("b", &["c"]), ("c", &["a"]), ("x", &[])]),
                Some("a b c a"),
            ),
            (
                "a cycle elsewhere is not this one's",
                graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])]),
                None,
            ),
            (
                "a diamond is no cycle",
                graph(&[("a", &["b", "c"]), ("b", &["d"]), ("c", &["d"])]),
                None,
            ),
        ];
        for (what, graph, want) in cases {
            let got = find_cycle(&"a", |n| graph.get(n).cloned().unwrap_or_default());
            assert_eq!(got.map(|c| c.join(" ")).as_deref(), want, "{what}");
        }
    }
}
