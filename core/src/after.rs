//! `after`: order across the pods of a restore (docs/behaviour.md §6.16). A hook-object exec hook
//! may name hooks it waits for; it starts only once each of them ended well on every pod of the
//! same restore that planned it. Pure: the turn of a waiting hook from the runs the controller
//! sees, and the cycle an `after` graph contains, if any.
//!
//! Hooks are named as a plan names them (`PlannedHook::name`): a RestoreHook or
//! ClusterRestoreHook by its object's name, so `after: [{hook: db-restore}]` waits for every exec
//! hook of every hook object called `db-restore` in the restore, in any namespace.

use std::collections::{BTreeMap, BTreeSet};

use crate::hooks::plan::{HookPhase, OnError};

/// Most names one hook may wait for (the CRD schema says the same).
pub const MAX_AFTER: usize = 16;

/// One planned run of an awaited hook: a hook of that name in one pod of the restore.
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

/// The turn of a hook that waits for `after`, given the runs of each awaited name in the restore
/// (`runs(name)`), and whether the controller has seen every pod of the restore yet (`listed`:
/// before that, a name with no run may only be unlisted).
///
/// Runs recorded `OtherPod` are another pod's `runOn: OnePod` turn: the pod that ran it decides.
/// A failed or skipped run holds the hooks that wait for it only when its own `onError` is `Fail`
/// (docs/behaviour.md §6.16).
pub fn after_turn<'r>(
    after: &[String],
    listed: bool,
    mut runs: impl FnMut(&str) -> &'r [AwaitedRun],
) -> AfterTurn {
    if !listed {
        return AfterTurn::Wait("the restore's pods are still being listed".to_string());
    }
    let mut waiting = None;
    for name in after {
        let mut planned = false;
        for run in runs(name) {
            match run.phase {
                HookPhase::OtherPod => {}
                HookPhase::Succeeded => planned = true,
                HookPhase::Failed | HookPhase::Skipped => {
                    planned = true;
                    if run.on_error == OnError::Fail {
                        let what = if run.phase == HookPhase::Failed {
                            "failed"
                        } else {
                            "was skipped"
                        };
                        return AfterTurn::Skip(format!(
                            "after: hook {name} {what} in pod {} (onError: Fail); not executed",
                            run.pod
                        ));
                    }
                }
                HookPhase::Pending | HookPhase::Running => {
                    planned = true;
                    waiting.get_or_insert_with(|| {
                        format!("hook {name} has not ended in pod {}", run.pod)
                    });
                }
            }
        }
        if !planned {
            waiting
                .get_or_insert_with(|| format!("hook {name} is planned on no pod of the restore"));
        }
    }
    match waiting {
        Some(why) => AfterTurn::Wait(why),
        None => AfterTurn::Go,
    }
}

/// The first cycle through `start` in an `after` graph (hook name → names it waits for), as the
/// names along it, `start` first and last (`[a, b, a]`); `None` when `start` is on no cycle.
/// Names the graph does not hold wait for nothing.
pub fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    // Depth-first from `start`, remembering the path; each name is expanded once (the graph is a
    // few hundred names at most, and a name already expanded without reaching `start` never
    // will).
    let mut path = vec![start.to_string()];
    let mut next: Vec<std::collections::btree_set::Iter<'_, String>> = Vec::new();
    let mut expanded = BTreeSet::new();
    next.push(graph.get(start)?.iter());
    while let Some(edges) = next.last_mut() {
        match edges.next() {
            Some(name) if name == start => {
                path.push(name.clone());
                return Some(path);
            }
            Some(name) => {
                if let Some(out) = graph.get(name.as_str())
                    && expanded.insert(name.clone())
                {
                    path.push(name.clone());
                    next.push(out.iter());
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

/// A cycle as an operator reads it: `a → b → a`.
pub fn show_cycle(cycle: &[String]) -> String {
    cycle.join(" → ")
}

#[cfg(test)]
mod tests {
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

    /// What, the names waited for, the runs by name, listed, the turn.
    type Case = (
        &'static str,
        Vec<&'static str>,
        Vec<(&'static str, Vec<AwaitedRun>)>,
        bool,
        AfterTurn,
    );

    #[test]
    fn a_hook_starts_once_every_awaited_run_ended_well() {
        let cases: Vec<Case> = vec![
            (
                "nothing listed yet",
                vec!["db"],
                vec![("db", vec![run("db-0", Succeeded, Fail)])],
                false,
                AfterTurn::Wait("the restore's pods are still being listed".into()),
            ),
            (
                "the one awaited run succeeded",
                vec!["db"],
                vec![("db", vec![run("db-0", Succeeded, Fail)])],
                true,
                AfterTurn::Go,
            ),
            (
                "one of two runs still running",
                vec!["db"],
                vec![(
                    "db",
                    vec![run("db-0", Succeeded, Fail), run("db-1", Running, Fail)],
                )],
                true,
                AfterTurn::Wait("hook db has not ended in pod shop/db-1".into()),
            ),
            (
                "pending counts as not ended",
                vec!["db"],
                vec![("db", vec![run("db-0", Pending, Continue)])],
                true,
                AfterTurn::Wait("hook db has not ended in pod shop/db-0".into()),
            ),
            (
                "a name no pod plans waits (the pod may come)",
                vec!["db"],
                vec![],
                true,
                AfterTurn::Wait("hook db is planned on no pod of the restore".into()),
            ),
            (
                "failed with onError Fail: skipped, naming the pod",
                vec!["db"],
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
                vec!["db"],
                vec![("db", vec![run("db-0", Skipped, Fail)])],
                true,
                AfterTurn::Skip(
                    "after: hook db was skipped in pod shop/db-0 (onError: Fail); not executed"
                        .into(),
                ),
            ),
            (
                "failed with onError Continue: counts as ended",
                vec!["db"],
                vec![(
                    "db",
                    vec![run("db-0", Failed, Continue), run("db-1", Succeeded, Fail)],
                )],
                true,
                AfterTurn::Go,
            ),
            (
                "runOn OnePod: the pod that ran it decides, OtherPod runs are neutral",
                vec!["migrate"],
                vec![(
                    "migrate",
                    vec![run("api-0", Succeeded, Fail), run("api-1", OtherPod, Fail)],
                )],
                true,
                AfterTurn::Go,
            ),
            (
                "only OtherPod runs: nobody ran it yet",
                vec!["migrate"],
                vec![("migrate", vec![run("api-1", OtherPod, Fail)])],
                true,
                AfterTurn::Wait("hook migrate is planned on no pod of the restore".into()),
            ),
            (
                "two names: every one must be done; a failure of the second still skips",
                vec!["db", "cache"],
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
                "two names: the first one waiting is reported",
                vec!["db", "cache"],
                vec![
                    ("db", vec![run("db-0", Succeeded, Fail)]),
                    ("cache", vec![run("cache-0", Pending, Fail)]),
                ],
                true,
                AfterTurn::Wait("hook cache has not ended in pod shop/cache-0".into()),
            ),
        ];
        for (what, after, runs, listed, want) in cases {
            let runs: BTreeMap<&str, Vec<AwaitedRun>> = runs.into_iter().collect();
            let after: Vec<String> = after.into_iter().map(String::from).collect();
            let got = after_turn(&after, listed, |name| {
                runs.get(name).map(Vec::as_slice).unwrap_or(&[])
            });
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn cycles_are_found_through_the_start_name_only() {
        type Graph = BTreeMap<String, BTreeSet<String>>;
        let graph = |edges: &[(&str, &[&str])]| -> Graph {
            edges
                .iter()
                .map(|(from, to)| (from.to_string(), to.iter().map(|t| t.to_string()).collect()))
                .collect()
        };
        let cases: Vec<(&str, Graph, &str, Option<&str>)> = vec![
            ("no edges", graph(&[]), "a", None),
            ("a chain", graph(&[("a", &["b"]), ("b", &["c"])]), "a", None),
            ("itself", graph(&[("a", &["a"])]), "a", Some("a → a")),
            (
                "two objects",
                graph(&[("a", &["b"]), ("b", &["a"])]),
                "a",
                Some("a → b → a"),
            ),
            (
                "three, through a branch",
                graph(&[("a", &["x", "b"]), ("b", &["c"]), ("c", &["a"]), ("x", &[])]),
                "a",
                Some("a → b → c → a"),
            ),
            (
                "a cycle elsewhere is not this name's",
                graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])]),
                "a",
                None,
            ),
            (
                "a diamond is no cycle",
                graph(&[("a", &["b", "c"]), ("b", &["d"]), ("c", &["d"])]),
                "a",
                None,
            ),
        ];
        for (what, graph, start, want) in cases {
            let got = find_cycle(&graph, start);
            assert_eq!(got.as_deref().map(show_cycle).as_deref(), want, "{what}");
        }
    }
}
