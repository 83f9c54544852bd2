//! [`RestoreIndex`]: the pods of every restore as the controller sees them, and the answers about
//! restores that the workers, the status writer and the late-hook scan ask for.
//!
//! Each answer that depends on other pods is kept so that a change touches only what it changes:
//! the runs of each awaited hook, the planners of each `OnePod` hook and the sums of each status
//! target are updated per pod, and a change reports exactly the pods whose answers may differ
//! ([`Changes::wake`]) and marks the targets to write again ([`RestoreIndex::take_dirty`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::after::{AfterTurn, AwaitedRun, after_turn, show_awaited};
use super::counts::{Sum, Totals};
use super::marked::MarkedPod;
use super::one_pod::{Candidate, one_pod_key, statefulset_ordinal};
use super::tally::{Contribution, Target, tally_pod};
use crate::config::EngineConfig;
use crate::exec_step::align;
use crate::hooks::compiled::CompiledObject;
use crate::hooks::plan::{AwaitedKey, ExecPlan, ExecStatus, HookPhase, OnError, RunOn};
use crate::hooks::types::{HookCounts, Labels};
use crate::index::HookIndex;
use crate::late_hooks::may_extend;

/// A pod's plan and status once they verified (docs/behaviour.md §9.3, §9.4), the status settled
/// for hooks that can never start (`tally::settled_status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The plan.
    pub plan: ExecPlan,
    /// The status, if the pod has one.
    pub status: Option<ExecStatus>,
}

/// What a pod's worker knows about one of its `runOn: OnePod` hooks that the watch of marked
/// pods does not: whether the hook's container is up, and whether the pod can still run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The hook's container is up (docs/behaviour.md §6.4).
    pub up: bool,
    /// The pod can run it: present, not terminal, in a restore scope.
    pub able: bool,
}

impl Default for Standing {
    /// Before its worker looked: it can run the hook, which is not up yet.
    fn default() -> Self {
        Standing {
            up: false,
            able: true,
        }
    }
}

/// What a change did besides the counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The pods (uids) whose `after` or `OnePod` answers may have changed: wake their workers.
    pub wake: Vec<Arc<str>>,
    /// The pod was not known before.
    pub first_sight: bool,
}

/// The runs of one awaited hook in one restore: the key of [`RestoreIndex::runs`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct RunKey {
    restore: Arc<str>,
    awaited: AwaitedKey,
}

/// What one plan hook of a member stands for across the restore.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    source: Box<str>,
    index: usize,
    phase: HookPhase,
    on_error: OnError,
    /// Its `runOn: OnePod` key, when it has one.
    one_pod: Option<Box<str>>,
    /// What it waits for (`after`).
    awaits: Box<[AwaitedKey]>,
}

/// What a pod adds to each status target, sorted by target.
type Parts = Box<[(Target, Contribution)]>;

/// A marked pod whose plan verified: what it is in its restore.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    restore: Arc<str>,
    /// Someone vouches for it beyond its own labels (docs/behaviour.md §6.20): its runs count for
    /// other pods' `after`, and it may be chosen for a `OnePod` hook.
    vouched: bool,
    /// Its StatefulSet ordinal, for `OnePod`, when vouched for and one of a StatefulSet's pods.
    ordinal: Option<u64>,
    hooks: Box<[Run]>,
    /// What it adds to each status target.
    parts: Parts,
}

impl Member {
    fn of(pod: &MarkedPod, plan: &ExecPlan, status: Option<&ExecStatus>) -> Member {
        let status = align(plan, status);
        let vouched = plan.is_vouched_for();
        let hooks = plan
            .hooks
            .iter()
            .zip(&status.hooks)
            .map(|(hook, entry)| Run {
                source: hook.source.as_str().into(),
                index: hook.index,
                phase: entry.phase,
                on_error: hook.on_error,
                one_pod: (hook.run_on == RunOn::OnePod)
                    .then(|| one_pod_key(&plan.restore, &pod.namespace, hook).into()),
                awaits: hook.awaited(&pod.namespace).into(),
            })
            .collect();
        Member {
            restore: plan.restore.as_str().into(),
            vouched,
            ordinal: vouched
                .then(|| statefulset_ordinal(&pod.labels, &pod.name))
                .flatten(),
            hooks,
            parts: tally_pod(&pod.namespace, plan, Some(&status))
                .into_iter()
                .collect(),
        }
    }

    /// The keys of its runs that count for others (a pod nobody vouches for counts for nobody).
    fn run_keys<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = RunKey> + 'a {
        self.hooks.iter().filter(|_| self.vouched).map(|r| RunKey {
            restore: self.restore.clone(),
            awaited: AwaitedKey {
                source: r.source.to_string(),
                namespace: namespace.to_string(),
            },
        })
    }

    /// The runs it waits for with a hook that has not started.
    fn awaited_keys(&self) -> impl Iterator<Item = RunKey> + '_ {
        self.hooks
            .iter()
            .filter(|r| r.phase == HookPhase::Pending)
            .flat_map(|r| r.awaits.iter())
            .map(|awaited| RunKey {
                restore: self.restore.clone(),
                awaited: awaited.clone(),
            })
    }

    /// Its `OnePod` hooks that have not ended or started here.
    fn one_pod_keys(&self) -> impl Iterator<Item = &str> {
        self.hooks
            .iter()
            .filter(|r| r.phase == HookPhase::Pending)
            .filter_map(|r| r.one_pod.as_deref())
    }

    /// Its runs of `key`, as an `after` waiter sees them.
    fn runs_of<'a>(&'a self, source: &'a str) -> impl Iterator<Item = (HookPhase, OnError)> + 'a {
        self.hooks
            .iter()
            .filter(move |r| &*r.source == source)
            .map(|r| (r.phase, r.on_error))
    }
}

#[derive(Clone, Debug)]
struct Entry {
    pod: MarkedPod,
    member: Option<Member>,
}

/// Every marked pod of every restore, and what follows from them (docs/behaviour.md §6.15, §6.16,
/// §6.20, §7.2, §8). One per leadership: a new leader lists the pods again and arrives at the same
/// answers.
#[derive(Debug, Default)]
pub struct RestoreIndex {
    pods: HashMap<Arc<str>, Entry>,
    /// Vouched members with runs of each awaited hook.
    runs: HashMap<RunKey, HashSet<Arc<str>>>,
    /// Members with a pending hook that waits for each.
    waiters: HashMap<RunKey, HashSet<Arc<str>>>,
    /// Members with each `OnePod` hook pending.
    planners: HashMap<Box<str>, HashSet<Arc<str>>>,
    /// What workers posted about their pods' `OnePod` hooks, by pod and key.
    standing: HashMap<Arc<str>, Vec<(Box<str>, Standing)>>,
    /// The controller's last word on pods that are gone, until the watch retires them: the
    /// watch lags the worker, and an event it still delivers (the pod as it was before it went)
    /// must not bring back hooks the worker ended.
    last_word: HashMap<Arc<str>, (ExecPlan, ExecStatus)>,
    /// How pods the controller finished ended, by their counts and plan length, until they are
    /// retired ([`RestoreIndex::finished`]).
    finished: HashMap<Arc<str>, (usize, Parts)>,
    sums: HashMap<Target, Sum>,
    dirty: BTreeSet<Target>,
    /// Every pod that existed when the watch started has been applied.
    listed: bool,
}

impl RestoreIndex {
    /// An empty index, not listed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A marked pod as the watch shows it now, with its plan and status when they verify (a pod
    /// whose plan does not verify counts for nothing and is only a late-hook candidate).
    pub fn apply(&mut self, uid: &str, pod: MarkedPod, verified: Option<Verified>) -> Changes {
        let (uid, old) = match self.pods.remove_entry(uid) {
            Some((uid, old)) => (uid, Some(old)),
            None => (Arc::from(uid), None),
        };
        let first_sight = old.is_none();
        let member = match self.last_word.get(&uid) {
            Some((plan, status)) => Some(Member::of(&pod, plan, Some(status))),
            None => verified.map(|v| Member::of(&pod, &v.plan, v.status.as_ref())),
        };
        let entry = Entry { pod, member };
        let wake = self.replace(&uid, old.as_ref(), Some(&entry));
        self.pods.insert(uid, entry);
        Changes { wake, first_sight }
    }

    /// The pod is gone (deleted, or missing from a relist): its parts become tombstones, final
    /// when the controller's last word on it came or no hook of it was pending.
    pub fn retire(&mut self, uid: &str) -> Changes {
        let spoken = self.last_word.remove(uid).is_some();
        let finished = self.finished.remove(uid);
        let Some((uid, old)) = self.pods.remove_entry(uid) else {
            return Changes::default();
        };
        let wake = self.replace(&uid, Some(&old), None);
        let Some(member) = old.member else {
            return Changes {
                wake,
                first_sight: false,
            };
        };
        // The last state the watch showed may be older than how the pod ended (a relist that
        // found it gone, an event the watch never delivered): the worker's own word on how it
        // ended is final, as long as the plan did not grow since (late hooks).
        let parts = match finished {
            Some((hooks, parts)) if !spoken && hooks >= member.hooks.len() => (parts, true),
            _ => (member.parts, spoken),
        };
        let (parts, settled) = parts;
        for (target, part) in parts.into_vec() {
            self.sums
                .entry(target.clone())
                .or_default()
                .bury(&uid, part, settled);
            self.dirty.insert(target);
        }
        Changes {
            wake,
            first_sight: false,
        }
    }

    /// The controller wrote that every hook of a pod ended (its exec label `done` or `failed`):
    /// kept until the pod is retired, in case the watch never shows that state before the pod
    /// is gone. Only its counts are kept (a few hundred bytes), with the plan's length: a plan
    /// that grew since (late hooks) makes it stale.
    pub fn finished(&mut self, uid: &str, namespace: &str, plan: &ExecPlan, status: &ExecStatus) {
        if !self.pods.contains_key(uid) {
            return;
        }
        let parts = tally_pod(namespace, plan, Some(status))
            .into_iter()
            .collect();
        self.finished
            .insert(self.uid(uid), (plan.hooks.len(), parts));
    }

    /// The controller's last word on a pod that is gone: how its hooks ended, which its
    /// annotations may never have received.
    pub fn last_word(
        &mut self,
        uid: &str,
        namespace: &str,
        plan: &ExecPlan,
        status: &ExecStatus,
    ) -> Changes {
        if let Some(entry) = self.pods.get(uid) {
            let pod = entry.pod.clone();
            let uid: Arc<str> = self
                .pods
                .get_key_value(uid)
                .map(|(k, _)| k.clone())
                .expect("just found");
            self.last_word
                .insert(uid.clone(), (plan.clone(), status.clone()));
            return self.apply(&uid, pod, None);
        }
        // The watch saw the delete first: its tombstones take the final parts.
        for (target, part) in tally_pod(namespace, plan, Some(status)) {
            if let Some(sum) = self.sums.get_mut(&target)
                && sum.settle(uid, Some(part))
            {
                self.dirty.insert(target);
            }
        }
        Changes::default()
    }

    /// Every pod that existed when the watch started has been applied: `after` and `OnePod`
    /// decisions may be made now.
    pub fn set_listed(&mut self) -> Changes {
        if self.listed {
            return Changes::default();
        }
        self.listed = true;
        let wake: BTreeSet<Arc<str>> = self
            .waiters
            .values()
            .chain(self.planners.values())
            .flatten()
            .cloned()
            .collect();
        Changes {
            wake: wake.into_iter().collect(),
            first_sight: false,
        }
    }

    /// Whether [`RestoreIndex::set_listed`] was called.
    pub fn is_listed(&self) -> bool {
        self.listed
    }

    /// Whether the pod was applied and not retired. A worker decides a `OnePod` turn only once
    /// its own pod is known: the watch delivers pods in the order they were created, so every
    /// pod created before it is known too.
    pub fn knows(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// The uids of every known pod.
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(|k| &**k)
    }

    /// Every known pod, by uid.
    pub fn pods(&self) -> impl Iterator<Item = (&str, &MarkedPod)> {
        self.pods.iter().map(|(uid, e)| (&**uid, &e.pod))
    }

    /// One known pod.
    pub fn pod(&self, uid: &str) -> Option<&MarkedPod> {
        self.pods.get(uid).map(|e| &e.pod)
    }

    /// The known pods that hook object `object` may add late hooks to (docs/behaviour.md §7.2),
    /// as (uid, namespace, name): the pods it selects whose annotations do not show it yet.
    /// `namespace_labels` gives a namespace's labels; a pod of a namespace it does not know is
    /// left out (looked at again when the object changes or the pod is seen again).
    pub fn late_candidates<'a>(
        &self,
        object: &CompiledObject,
        namespace_labels: impl Fn(&str) -> Option<&'a Labels>,
        hooks: &HookIndex,
        config: &EngineConfig,
    ) -> Vec<(String, String, String)> {
        self.pods
            .iter()
            .filter(|(_, e)| {
                namespace_labels(&e.pod.namespace)
                    .is_some_and(|labels| may_extend(object, &e.pod, labels, hooks, config))
            })
            .map(|(uid, e)| (uid.to_string(), e.pod.namespace.clone(), e.pod.name.clone()))
            .collect()
    }

    /// A worker's news about its pod's `OnePod` hook `key`. The other planners are woken when it
    /// changes what they see.
    pub fn post_standing(&mut self, uid: &str, key: &str, standing: Standing) -> Changes {
        let uid = self.uid(uid);
        let posted = self.standing.entry(uid.clone()).or_default();
        let changed = match posted.iter_mut().find(|(k, _)| &**k == key) {
            Some((_, old)) if *old == standing => false,
            Some((_, old)) => {
                *old = standing;
                true
            }
            None => {
                posted.push((key.into(), standing));
                standing != Standing::default()
            }
        };
        if !changed {
            return Changes::default();
        }
        Changes {
            wake: self.planners_of(key, &uid),
            first_sight: false,
        }
    }

    /// A worker stopped: what it posted no longer stands.
    pub fn leave(&mut self, uid: &str) -> Changes {
        let Some((uid, posted)) = self.standing.remove_entry(uid) else {
            return Changes::default();
        };
        let mut wake = BTreeSet::new();
        for (key, standing) in posted {
            if standing != Standing::default() {
                wake.extend(self.planners_of(&key, &uid));
            }
        }
        Changes {
            wake: wake.into_iter().collect(),
            first_sight: false,
        }
    }

    /// The turn of each pending hook with `after` in a pod of `namespace` with this plan and
    /// status (docs/behaviour.md §6.16).
    pub fn after_turns(
        &self,
        namespace: &str,
        plan: &ExecPlan,
        status: Option<&ExecStatus>,
    ) -> BTreeMap<usize, AfterTurn> {
        let mut turns = BTreeMap::new();
        if plan.hooks.iter().all(|h| h.after.is_empty()) {
            return turns;
        }
        let status = align(plan, status);
        let restore: Arc<str> = plan.restore.as_str().into();
        for (i, hook) in plan.hooks.iter().enumerate() {
            if hook.after.is_empty() || status.hooks[i].phase != HookPhase::Pending {
                continue;
            }
            let awaited = hook.awaited(namespace);
            let names: Vec<String> = awaited.iter().map(|k| show_awaited(k, namespace)).collect();
            let runs: Vec<Vec<AwaitedRun>> = awaited
                .into_iter()
                .map(|awaited| {
                    self.runs(&RunKey {
                        restore: restore.clone(),
                        awaited,
                    })
                })
                .collect();
            turns.insert(i, after_turn(&names, self.listed, |k| &runs[k]));
        }
        turns
    }

    /// The runs of one awaited hook, by pod name.
    fn runs(&self, key: &RunKey) -> Vec<AwaitedRun> {
        let mut runs: Vec<AwaitedRun> = self
            .runs
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.pods.get(uid))
            .flat_map(|entry| {
                let pod = format!("{}/{}", entry.pod.namespace, entry.pod.name);
                entry
                    .member
                    .iter()
                    .flat_map(|m| m.runs_of(&key.awaited.source))
                    .map(move |(phase, on_error)| AwaitedRun {
                        pod: pod.clone(),
                        phase,
                        on_error,
                    })
            })
            .collect();
        runs.sort_by(|a, b| a.pod.cmp(&b.pod));
        runs
    }

    /// The pods that may run `OnePod` hook `key` (docs/behaviour.md §6.15): vouched for, the hook
    /// pending there, and able to run it as far as the watch and their workers know.
    pub fn one_pod_candidates(&self, key: &str) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = self
            .planners
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|uid| {
                let entry = self.pods.get(uid)?;
                let member = entry.member.as_ref().filter(|m| m.vouched)?;
                let standing = self.standing_of(uid, key);
                (standing.able && !entry.pod.deleting).then(|| Candidate {
                    uid: uid.to_string(),
                    pod: format!("{}/{}", entry.pod.namespace, entry.pod.name),
                    ordinal: member.ordinal,
                    created: entry.pod.created,
                    up: standing.up,
                })
            })
            .collect();
        out.sort_by(|a, b| a.pod.cmp(&b.pod));
        out
    }

    /// What a status write of `target` over a status whose `retired` is `prior` says; `None`
    /// when no pod ever counted for it.
    pub fn totals(&self, target: &Target, prior: HookCounts) -> Option<Totals> {
        Some(self.sums.get(target)?.totals(prior))
    }

    /// The live parts and tombstones of `target`.
    pub fn sum(&self, target: &Target) -> Option<&Sum> {
        self.sums.get(target)
    }

    /// A status write of `target` landed with these tombstones folded into `retired`.
    pub fn folded(&mut self, target: &Target, ids: &[u64]) {
        if let Some(sum) = self.sums.get_mut(target) {
            sum.folded(ids);
            if sum.is_empty() {
                self.sums.remove(target);
            }
        }
    }

    /// The target's object is gone (deleted, or its retention passed): its tombstones have
    /// nowhere to go.
    pub fn forget_target(&mut self, target: &Target) {
        if let Some(sum) = self.sums.get_mut(target) {
            sum.forget_stones();
            if sum.is_empty() {
                self.sums.remove(target);
            }
        }
    }

    /// The targets whose numbers changed since the last call.
    pub fn take_dirty(&mut self) -> BTreeSet<Target> {
        std::mem::take(&mut self.dirty)
    }

    fn uid(&self, uid: &str) -> Arc<str> {
        self.pods
            .get_key_value(uid)
            .map(|(k, _)| k.clone())
            .or_else(|| self.standing.get_key_value(uid).map(|(k, _)| k.clone()))
            .unwrap_or_else(|| Arc::from(uid))
    }

    fn standing_of(&self, uid: &str, key: &str) -> Standing {
        self.standing
            .get(uid)
            .and_then(|posted| posted.iter().find(|(k, _)| &**k == key))
            .map(|(_, s)| *s)
            .unwrap_or_default()
    }

    /// Whether some target's numbers changed since the last [`RestoreIndex::take_dirty`].
    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The pods that plan `OnePod` hook `key` with it pending, but `except`.
    pub fn planners(&self, key: &str, except: &str) -> Vec<Arc<str>> {
        self.planners_of(key, except)
    }

    fn planners_of(&self, key: &str, except: &str) -> Vec<Arc<str>> {
        self.planners
            .get(key)
            .into_iter()
            .flatten()
            .filter(|u| &***u != except)
            .cloned()
            .collect()
    }

    /// Replaces the pod's old entry with its new one in every derived map and sum; returns the
    /// pods to wake.
    fn replace(
        &mut self,
        uid: &Arc<str>,
        old: Option<&Entry>,
        new: Option<&Entry>,
    ) -> Vec<Arc<str>> {
        let (old_m, new_m) = (member_of(old), member_of(new));
        let mut wake: BTreeSet<Arc<str>> = BTreeSet::new();

        // Runs that others wait for: wake those waiters when what they see changed.
        let runs_of = |m: Option<(&MarkedPod, &Member)>| -> BTreeMap<RunKey, Vec<(usize, HookPhase, OnError)>> {
            let mut out: BTreeMap<RunKey, Vec<_>> = BTreeMap::new();
            if let Some((pod, m)) = m {
                for (key, run) in m.run_keys(&pod.namespace).zip(m.hooks.iter()) {
                    out.entry(key).or_default().push((run.index, run.phase, run.on_error));
                }
            }
            out
        };
        let (old_runs, new_runs) = (runs_of(old_m), runs_of(new_m));
        for key in old_runs.keys().chain(new_runs.keys()) {
            if old_runs.get(key) != new_runs.get(key) {
                wake.extend(self.waiters.get(key).into_iter().flatten().cloned());
            }
        }
        for key in old_runs.keys() {
            if !new_runs.contains_key(key) {
                remove_from(&mut self.runs, key, uid);
            }
        }
        for key in new_runs.into_keys() {
            self.runs.entry(key).or_default().insert(uid.clone());
        }

        // Its own waits.
        let waits = |m: Option<(&MarkedPod, &Member)>| -> BTreeSet<RunKey> {
            m.map(|(_, m)| m.awaited_keys().collect())
                .unwrap_or_default()
        };
        let (old_waits, new_waits) = (waits(old_m), waits(new_m));
        for key in old_waits.difference(&new_waits) {
            remove_from(&mut self.waiters, key, uid);
        }
        for key in new_waits.difference(&old_waits) {
            self.waiters
                .entry(key.clone())
                .or_default()
                .insert(uid.clone());
        }

        // OnePod hooks it plans: the others are woken when its candidacy changed.
        let candidacy = |e: Option<&Entry>| -> BTreeMap<Box<str>, (bool, Option<u64>, bool)> {
            let Some((pod, m)) = member_of(e) else {
                return BTreeMap::new();
            };
            m.one_pod_keys()
                .map(|k| (k.into(), (m.vouched, m.ordinal, pod.deleting)))
                .collect()
        };
        let (old_plans, new_plans) = (candidacy(old), candidacy(new));
        let old_plans_keys: BTreeSet<Box<str>> = old_plans.keys().cloned().collect();
        let new_plans_keys: BTreeSet<Box<str>> = new_plans.keys().cloned().collect();
        for key in old_plans.keys().chain(new_plans.keys()) {
            if old_plans.get(key) != new_plans.get(key) {
                wake.extend(self.planners_of(key, uid));
            }
        }
        for key in old_plans.keys() {
            if !new_plans.contains_key(key) {
                remove_from(&mut self.planners, &**key, uid);
            }
        }
        for key in new_plans.into_keys() {
            self.planners.entry(key).or_default().insert(uid.clone());
        }

        // The status targets' sums.
        let (old_parts, new_parts) = (parts_of(old_m), parts_of(new_m));
        if old_parts != new_parts {
            for (target, part) in old_parts {
                let pod = old.map(|e| &e.pod).expect("parts come with a pod");
                if let Some(sum) = self.sums.get_mut(target) {
                    sum.remove(&pod.namespace, &pod.name, part);
                }
                self.dirty.insert(target.clone());
            }
            for (target, part) in new_parts {
                let pod = new.map(|e| &e.pod).expect("parts come with a pod");
                self.sums
                    .entry(target.clone())
                    .or_default()
                    .add(&pod.namespace, &pod.name, part);
                self.dirty.insert(target.clone());
            }
        }
        // The pod itself looks again when the model first learns what it waits for or plans:
        // it may have asked before the watch showed it (the two pod watches are separate
        // streams), and nothing it waits for need change again to wake it.
        if old_waits == new_waits && old_plans_keys == new_plans_keys {
            wake.remove(uid);
        }
        wake.into_iter().collect()
    }
}

fn member_of(entry: Option<&Entry>) -> Option<(&MarkedPod, &Member)> {
    entry.and_then(|e| e.member.as_ref().map(|m| (&e.pod, m)))
}

fn parts_of<'a>(member: Option<(&MarkedPod, &'a Member)>) -> &'a [(Target, Contribution)] {
    member.map(|(_, m)| &*m.parts).unwrap_or(&[])
}

fn remove_from<K, Q>(map: &mut HashMap<K, HashSet<Arc<str>>>, key: &Q, uid: &Arc<str>)
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    if let Some(set) = map.get_mut(key) {
        set.remove(uid);
        if set.is_empty() {
            map.remove(key);
        }
    }
}
