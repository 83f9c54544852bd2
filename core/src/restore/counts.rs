//! The numbers of one status target (a RestoreHook, a ClusterRestoreHook or a RestoreRun,
//! docs/behaviour.md §8), kept as pods change rather than summed again at every write: the live
//! pods' parts, and the final parts of pods that were deleted ("tombstones") until a status write
//! folds them into `retired`.

use std::collections::{BTreeMap, BTreeSet};

use crate::hooks::plan::HookPhase;
use crate::hooks::types::HookCounts;

use super::tally::Contribution;

/// One target's live parts, kept up to date by [`Sum::add`] and [`Sum::remove`], and its
/// tombstones.
#[derive(Clone, Debug, Default)]
pub struct Sum {
    /// Hook counts over the live pods.
    counts: HookCounts,
    /// Live pods with at least one exec hook of the target.
    planned: i64,
    /// Live pods with a failed hook of the target: their first failure, by namespace and name.
    failed: BTreeMap<(String, String), (String, String)>,
    /// `runOn: OnePod` hooks started in live pods: (namespace, pod, `<name>#<index>`) → phase.
    one_pod: BTreeMap<(String, String, String), HookPhase>,
    /// Live pods that missed an init hook of the target.
    missed_init: BTreeSet<(String, String)>,
    /// Final parts of deleted pods, not yet folded into `retired`.
    stones: Vec<Stone>,
    next_stone: u64,
}

/// A deleted pod's final part.
#[derive(Clone, Debug)]
struct Stone {
    id: u64,
    uid: String,
    part: Contribution,
    /// Its counts are final: no hook pending, or the controller's last word on the pod came. A
    /// stone with pending hooks (the delete was seen before the worker said how its hooks ended)
    /// still counts as live, and is not folded into `retired`, where its pending hooks could
    /// never be corrected.
    settled: bool,
}

/// What a status write of the target says, and which tombstones it folds into `retired`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Totals {
    /// Every hook of the target: live pods, unsettled tombstones and `retired`.
    pub counts: HookCounts,
    /// The new `retired`: the prior one plus the settled tombstones.
    pub retired: HookCounts,
    /// Live pods planning the target's hooks (unsettled tombstones included).
    pub planned: i64,
    /// The settled tombstones folded in: forget them ([`Sum::folded`]) once the write landed.
    pub folded: Vec<u64>,
}

/// A pod's first failed hook of a target, for `failedPods`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedPodRef<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's name.
    pub pod: &'a str,
    /// The hook's name.
    pub hook: &'a str,
    /// Its status message.
    pub message: &'a str,
}

impl Sum {
    /// Adds a live pod's part.
    pub fn add(&mut self, namespace: &str, name: &str, part: &Contribution) {
        self.counts.add(&part.counts);
        self.planned += i64::from(part.planned);
        let pod = (namespace.to_string(), name.to_string());
        if let Some(first) = &part.first_failure {
            self.failed.insert(pod.clone(), first.clone());
        }
        if part.counts.missed_init > 0 {
            self.missed_init.insert(pod.clone());
        }
        for (hook, index, phase) in &part.one_pod {
            self.one_pod.insert(
                (pod.0.clone(), pod.1.clone(), format!("{hook}#{index}")),
                *phase,
            );
        }
    }

    /// Takes a live pod's part (as it was added) back out.
    pub fn remove(&mut self, namespace: &str, name: &str, part: &Contribution) {
        self.counts.sub(&part.counts);
        self.planned -= i64::from(part.planned);
        let pod = (namespace.to_string(), name.to_string());
        if part.first_failure.is_some() {
            self.failed.remove(&pod);
        }
        if part.counts.missed_init > 0 {
            self.missed_init.remove(&pod);
        }
        for (hook, index, _) in &part.one_pod {
            self.one_pod
                .remove(&(pod.0.clone(), pod.1.clone(), format!("{hook}#{index}")));
        }
    }

    /// A deleted pod's final part (`settled`: see [`Stone::settled`]).
    pub fn bury(&mut self, uid: &str, part: Contribution, settled: bool) {
        let settled = settled || part.counts.pending == 0;
        self.next_stone += 1;
        self.stones.push(Stone {
            id: self.next_stone,
            uid: uid.to_string(),
            part,
            settled,
        });
    }

    /// The controller's last word on a deleted pod whose tombstone is here: its final part.
    /// Returns whether there was one.
    pub fn settle(&mut self, uid: &str, part: Option<Contribution>) -> bool {
        let mut found = false;
        for stone in self.stones.iter_mut().filter(|s| s.uid == uid) {
            if let Some(part) = &part {
                stone.part = part.clone();
            }
            stone.settled = true;
            found = true;
        }
        found
    }

    /// What a write over a status whose `retired` is `prior` says.
    pub fn totals(&self, prior: HookCounts) -> Totals {
        let mut retired = prior;
        let mut counts = self.counts;
        let mut planned = self.planned;
        let mut folded = Vec::new();
        for stone in &self.stones {
            if stone.settled {
                retired.add(&stone.part.counts);
                folded.push(stone.id);
            } else {
                counts.add(&stone.part.counts);
                planned += i64::from(stone.part.planned);
            }
        }
        counts.add(&retired);
        Totals {
            counts,
            retired,
            planned,
            folded,
        }
    }

    /// Forgets the tombstones a write folded into `retired`.
    pub fn folded(&mut self, ids: &[u64]) {
        // A write after a mass deletion folds tens of thousands at once: look each up in order,
        // not in the whole list.
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        self.stones.retain(|s| ids.binary_search(&s.id).is_err());
    }

    /// Forgets every tombstone (the target's object is gone).
    pub fn forget_stones(&mut self) {
        self.stones.clear();
    }

    /// Whether nothing is left to report: no live pod and no tombstone.
    pub fn is_empty(&self) -> bool {
        self.counts.is_zero() && self.planned == 0 && self.stones.is_empty()
    }

    /// Live pods with a failed hook, first failure each, by namespace and name.
    pub fn failed_pods(&self) -> impl Iterator<Item = FailedPodRef<'_>> {
        self.failed
            .iter()
            .map(|((namespace, pod), (hook, message))| FailedPodRef {
                namespace,
                pod,
                hook,
                message,
            })
    }

    /// The `runOn: OnePod` hooks that started in live pods: namespace, pod, `<name>#<index>`,
    /// phase.
    pub fn one_pod_runs(&self) -> impl Iterator<Item = (&str, &str, &str, HookPhase)> {
        self.one_pod
            .iter()
            .map(|((ns, pod, hook), phase)| (ns.as_str(), pod.as_str(), hook.as_str(), *phase))
    }

    /// Live pods that missed an init hook, `namespace/name`.
    pub fn missed_init_pods(&self) -> impl Iterator<Item = String> + '_ {
        self.missed_init.iter().map(|(ns, n)| format!("{ns}/{n}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(succeeded: i64, failed: i64, pending: i64) -> Contribution {
        Contribution {
            planned: true,
            counts: HookCounts {
                succeeded,
                failed,
                pending,
                ..Default::default()
            },
            first_failure: (failed > 0).then(|| ("db".to_string(), "exit 1".to_string())),
            one_pod: vec![],
        }
    }

    /// Live parts come and go; deleted pods' parts fold into `retired` once, and only once they
    /// are final.
    #[test]
    fn parts_add_up_and_tombstones_fold_once() {
        let mut sum = Sum::default();
        sum.add("shop", "a", &part(1, 0, 1));
        sum.add("shop", "b", &part(0, 1, 0));
        let t = sum.totals(HookCounts::default());
        assert_eq!(
            (
                t.counts.succeeded,
                t.counts.failed,
                t.counts.pending,
                t.planned
            ),
            (1, 1, 1, 2)
        );
        assert_eq!(sum.failed_pods().map(|f| f.pod).collect::<Vec<_>>(), ["b"]);

        // "a" changes: its old part goes, its new one comes.
        sum.remove("shop", "a", &part(1, 0, 1));
        sum.add("shop", "a", &part(2, 0, 0));
        // "b" is deleted with its outcome final; "a" is deleted with a hook pending.
        sum.remove("shop", "b", &part(0, 1, 0));
        sum.bury("ub", part(0, 1, 0), false);
        sum.remove("shop", "a", &part(2, 0, 0));
        sum.bury("ua", part(1, 0, 1), false);
        assert!(sum.failed_pods().next().is_none());
        let prior = HookCounts {
            succeeded: 5,
            ..Default::default()
        };
        let t = sum.totals(prior);
        assert_eq!(
            (t.retired.succeeded, t.retired.failed),
            (5, 1),
            "the settled stone folds"
        );
        assert_eq!(
            (t.counts.succeeded, t.counts.failed, t.counts.pending),
            (6, 1, 1),
            "the unsettled one still counts as live"
        );
        assert_eq!(t.folded.len(), 1);
        sum.folded(&t.folded);
        // The worker's last word settles "a": it folds in the next write, with its final part.
        assert!(sum.settle("ua", Some(part(1, 1, 0))));
        let t = sum.totals(t.retired);
        assert_eq!(
            (t.retired.succeeded, t.retired.failed, t.counts.pending),
            (6, 2, 0)
        );
        sum.folded(&t.folded);
        assert!(sum.is_empty());
    }
}
