//! `runOn: OnePod` (docs/behaviour.md §6.15): of all the pods of one restore that plan such a hook,
//! exactly one runs it. Pure: which pod is chosen, from the candidates the controller sees; the
//! controller makes the choice durable by recording the start in the restore's record (§9.5)
//! before the exec, so a hook that started on one pod never starts on another, across restarts
//! and leader changes.
//!
//! Only pods someone vouches for are candidates (§6.20), and a StatefulSet ordinal counts only for
//! a pod that is one of a StatefulSet's own: a label any pod creator can set never makes a pod the
//! one that runs the hook.

use jiff::Timestamp;

use crate::hooks::compiled::SourceKind;
use crate::hooks::labels::LabelLookup;
use crate::hooks::plan::PlannedHook;

/// The StatefulSet controller's label naming the pod; it sets it to the pod's own name.
const STATEFULSET_POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The StatefulSet controller's label for the pod's ordinal (Kubernetes 1.28 and later).
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The ordinal of a StatefulSet's pod, as the choice counts it: the pod carries the StatefulSet
/// controller's pod-name label with its own name, which is `<set>-<ordinal>` (a Deployment's or
/// Job's pods have generated names, so their template cannot copy it), and a pod-index label, if
/// any, agrees. Only asked of pods someone vouches for (§6.20): the labels of a pod that only
/// its creator vouches for are its creator's to choose.
pub fn statefulset_ordinal(labels: &impl LabelLookup, name: &str) -> Option<u64> {
    if labels.label(STATEFULSET_POD_NAME_LABEL)? != name {
        return None;
    }
    let digits = name.rsplit_once('-')?.1;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ordinal: u64 = digits.parse().ok()?;
    match labels.label(POD_INDEX_LABEL) {
        Some(index) if index.parse::<u64>().ok() != Some(ordinal) => None,
        _ => Some(ordinal),
    }
}

/// What identifies one `OnePod` hook across the pods of a restore: the restore, the hook object
/// (a RestoreHook is namespaced: the same name in two namespaces is two objects) and the hook's
/// position in its `postHooks`.
pub fn one_pod_key(restore: &str, namespace: &str, hook: &PlannedHook) -> String {
    let scope = match SourceKind::parse_source(&hook.source) {
        Some((SourceKind::RestoreHook, _)) => namespace,
        _ => "",
    };
    format!("{restore}/{scope}/{}#{}", hook.source, hook.index)
}

/// A pod that may run a `OnePod` hook: it plans it, the hook is still `Pending` there, and the
/// pod is neither gone nor terminal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The pod's uid.
    pub uid: String,
    /// `namespace/name`: the tie-break, and what the others' status names.
    pub pod: String,
    /// Its StatefulSet ordinal, when it is one of a StatefulSet's pods ([`statefulset_ordinal`]).
    pub ordinal: Option<u64>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// The hook's container is up (Running, or Ready for a `waitForReady` container): the hook
    /// could start now.
    pub up: bool,
}

/// The hook's turn in one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnePodTurn {
    /// This pod is the one: the hook starts here once its turn in the container comes.
    Go,
    /// Another pod is (or may yet be) chosen: wait.
    Wait,
    /// It never runs here, and why (the status message after `runOn: OnePod: `): another pod
    /// started it, or this pod cannot run it any more and another pod will.
    Elsewhere(String),
}

/// The candidate that runs the hook: the lowest StatefulSet ordinal (a StatefulSet's pod 0 is
/// where migrations run, and it is created first), waited for even while it is not up; among pods
/// without an ordinal, the oldest whose container is up. `None`: nobody yet.
pub fn choose(candidates: &[Candidate]) -> Option<&Candidate> {
    let by_ordinal = candidates
        .iter()
        .filter_map(|c| c.ordinal.map(|o| (o, c)))
        .min_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.pod.cmp(&y.pod)))
        .map(|(_, c)| c);
    by_ordinal.or_else(|| {
        candidates
            .iter()
            .filter(|c| c.up)
            .min_by(|x, y| x.created.cmp(&y.created).then_with(|| x.pod.cmp(&y.pod)))
    })
}

/// The turn of pod `uid` for one hook, given who (if anyone) the record says started it, the
/// candidates, and whether this pod can still run it (present, not terminal, in scope). A pod
/// that cannot passes the hook on when another candidate is left, so that its going is not a
/// failure of the hook; without one, its own reason to fail stands.
pub fn turn(
    uid: &str,
    started_by: Option<(&str, &str)>,
    candidates: &[Candidate],
    able: bool,
) -> OnePodTurn {
    match started_by {
        Some((holder, _)) if holder == uid => OnePodTurn::Go,
        Some((_, pod)) => OnePodTurn::Elsewhere(format!("pod {pod} runs it for the restore")),
        None if !able => {
            let others: Vec<Candidate> = candidates
                .iter()
                .filter(|c| c.uid != uid)
                .cloned()
                .collect();
            match (others.is_empty(), choose(&others)) {
                (true, _) => OnePodTurn::Wait,
                (false, Some(next)) => OnePodTurn::Elsewhere(format!(
                    "this pod cannot run it any more; pod {} is chosen now",
                    next.pod
                )),
                (false, None) => OnePodTurn::Elsewhere(
                    "this pod cannot run it any more; another pod of the restore will".into(),
                ),
            }
        }
        None if choose(candidates).is_some_and(|c| c.uid == uid) => OnePodTurn::Go,
        None => OnePodTurn::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(uid: &str, ordinal: Option<u64>, created: i64, up: bool) -> Candidate {
        Candidate {
            uid: uid.into(),
            pod: format!("shop/{uid}"),
            ordinal,
            created: Some(Timestamp::from_second(created).unwrap()),
            up,
        }
    }

    #[test]
    fn the_choice_of_the_one_pod() {
        let cases: [(&str, Vec<Candidate>, Option<&str>); 7] = [
            ("nobody", vec![], None),
            (
                "lowest ordinal, even before it is up",
                vec![c("db-1", Some(1), 1, true), c("db-0", Some(0), 2, false)],
                Some("db-0"),
            ),
            (
                "ordinals beat older pods without one",
                vec![c("api-x", None, 0, true), c("db-2", Some(2), 9, false)],
                Some("db-2"),
            ),
            (
                "without ordinals: the oldest that is up",
                vec![
                    c("old", None, 1, false),
                    c("mid", None, 2, true),
                    c("new", None, 3, true),
                ],
                Some("mid"),
            ),
            (
                "without ordinals, none up: nobody yet",
                vec![c("a", None, 1, false)],
                None,
            ),
            (
                "same age: by name",
                vec![c("b", None, 1, true), c("a", None, 1, true)],
                Some("a"),
            ),
            (
                "the chosen pod gone (not a candidate any more): the next ordinal",
                vec![c("db-2", Some(2), 1, true), c("db-1", Some(1), 1, false)],
                Some("db-1"),
            ),
        ];
        for (case, candidates, want) in cases {
            assert_eq!(choose(&candidates).map(|c| c.uid.as_str()), want, "{case}");
        }
    }

    #[test]
    fn a_recorded_start_decides_every_turn() {
        let candidates = [c("db-0", Some(0), 1, true), c("db-1", Some(1), 1, true)];
        assert_eq!(turn("db-0", None, &candidates, true), OnePodTurn::Go);
        assert_eq!(turn("db-1", None, &candidates, true), OnePodTurn::Wait);
        // db-1 started it (db-0 was not a candidate then): db-0 never runs it.
        let started = Some(("db-1", "shop/db-1"));
        assert_eq!(
            turn("db-0", started, &candidates, true),
            OnePodTurn::Elsewhere("pod shop/db-1 runs it for the restore".into())
        );
        assert_eq!(turn("db-1", started, &candidates, true), OnePodTurn::Go);
    }

    #[test]
    fn a_pod_that_cannot_run_it_passes_it_on_while_another_candidate_is_left() {
        let others = [c("db-1", Some(1), 1, false), c("db-2", Some(2), 1, true)];
        assert_eq!(
            turn("db-0", None, &others, false),
            OnePodTurn::Elsewhere(
                "this pod cannot run it any more; pod shop/db-1 is chosen now".into()
            )
        );
        let unordered = [c("web-a", None, 1, false)];
        assert_eq!(
            turn("web-b", None, &unordered, false),
            OnePodTurn::Elsewhere(
                "this pod cannot run it any more; another pod of the restore will".into()
            )
        );
        // The last candidate: its own reason (deleted, terminal, ...) stands.
        assert_eq!(turn("db-0", None, &[], false), OnePodTurn::Wait);
    }

    #[test]
    fn only_a_statefulsets_own_pod_has_an_ordinal() {
        use std::collections::BTreeMap;
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let name = STATEFULSET_POD_NAME_LABEL;
        let index = POD_INDEX_LABEL;
        let cases = [
            (
                "a StatefulSet's pod",
                labels(&[(name, "db-0"), (index, "0")]),
                "db-0",
                Some(0),
            ),
            (
                "before pod-index existed",
                labels(&[(name, "db-12")]),
                "db-12",
                Some(12),
            ),
            (
                "pod-index alone: any creator sets it",
                labels(&[(index, "0")]),
                "x-0",
                None,
            ),
            (
                "pod-name of another pod",
                labels(&[(name, "db-0")]),
                "evil-0",
                None,
            ),
            (
                "pod-index disagrees",
                labels(&[(name, "db-1"), (index, "0")]),
                "db-1",
                None,
            ),
            (
                "no ordinal in the name",
                labels(&[(name, "db")]),
                "db",
                None,
            ),
            ("no labels", labels(&[]), "db-0", None),
        ];
        for (what, labels, pod, want) in cases {
            assert_eq!(statefulset_ordinal(&labels, pod), want, "{what}");
        }
    }

    #[test]
    fn keys_separate_restores_namespaces_and_positions() {
        let mut h = PlannedHook::example("migrate", "restorehook/migrate", "app");
        h.index = 1;
        assert_eq!(
            one_pod_key("r1", "shop", &h),
            "r1/shop/restorehook/migrate#1"
        );
        h.source = "clusterrestorehook/migrate".into();
        assert_eq!(
            one_pod_key("r1", "shop", &h),
            "r1//clusterrestorehook/migrate#1",
            "a ClusterRestoreHook's hook is one across namespaces"
        );
    }
}
