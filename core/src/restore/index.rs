//! [`RestoreIndex`]: the pods of every restore as the controller sees them, and the answers about
//! restores that the workers, the status writer and the late-hook scan ask for.
//!
//! Each answer that depends on other pods is kept so that a change touches only what it changes:
//! the runs of each awaited hook, the planners of each `OnePod` hook and the sums of each status
//! target are updated per pod, and a change reports exactly the pods whose answers may differ
//! ([`Changes::wake`]) and marks the targets to write again ([`RestoreIndex::take_dirty`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;

use super::after::{AfterTurn, Awaiting, after_turn_of, show_awaited};
use super::counts::{Sum, Totals};
use super::marked::MarkedPod;
use super::one_pod::{Candidate, one_pod_key, statefulset_ordinal};
use super::tally::{Contribution, Target, tally_pod};
use crate::config::EngineConfig;
use crate::exec_step::align;
use crate::hooks::compiled::{CompiledObject, SourceKind};
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

/// One run of an awaited hook: where it is, in the order a waiter reads runs (by pod, then the
/// hook's position in the pod's plan).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RunAt {
    /// `namespace/name`.
    pod: Box<str>,
    uid: Arc<str>,
    position: usize,
}

/// The runs of one awaited hook in one restore, kept as far as a waiter's turn needs them
/// ([`Awaiting`]): updated by each pod's old and new runs, so no turn reads every pod.
#[derive(Debug, Default)]
struct Runs {
    /// Runs that failed or were skipped with `onError: Fail`, and which of the two.
    stopped: BTreeMap<RunAt, HookPhase>,
    /// Runs that have not ended.
    unended: BTreeSet<RunAt>,
    /// Runs that count for the waiters (any but `OtherPod`).
    planned: usize,
}

impl Runs {
    fn add(&mut self, at: &RunAt, phase: HookPhase, on_error: OnError) {
        match phase {
            HookPhase::OtherPod => return,
            HookPhase::Failed | HookPhase::Skipped if on_error == OnError::Fail => {
                self.stopped.insert(at.clone(), phase);
            }
            HookPhase::Pending | HookPhase::Running => {
                self.unended.insert(at.clone());
            }
            HookPhase::Succeeded | HookPhase::Failed | HookPhase::Skipped => {}
        }
        self.planned += 1;
    }

    fn remove(&mut self, at: &RunAt, phase: HookPhase) {
        if phase == HookPhase::OtherPod {
            return;
        }
        self.stopped.remove(at);
        self.unended.remove(at);
        self.planned -= 1;
    }

    fn seen(&self) -> Awaiting<'_> {
        Awaiting {
            stopped: self
                .stopped
                .iter()
                .next()
                .map(|(at, phase)| (&*at.pod, *phase)),
            unended: self.unended.iter().next().map(|at| &*at.pod),
            planned: self.planned > 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.planned == 0
    }
}

/// Where a candidate for a `OnePod` hook stands in the choice (docs/behaviour.md §6.15,
/// [`super::one_pod::choose`]): StatefulSet pods by ordinal, then pods that are up by age, then
/// the rest (candidates that cannot be chosen until they are up), each by pod name. The choice
/// is the first when it is one of the first two kinds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    /// 0: has an ordinal; 1: up, without one; 2: neither.
    kind: u8,
    ordinal: u64,
    /// Creation time for kind 1 (`None` for the others, which are not ordered by age).
    age: Option<Timestamp>,
    /// `namespace/name`.
    pod: Box<str>,
    /// Unique: what follows never orders.
    uid: Arc<str>,
    up: bool,
    created: Option<Timestamp>,
}

impl Rank {
    fn candidate(&self) -> Candidate {
        Candidate {
            uid: self.uid.to_string(),
            pod: self.pod.to_string(),
            ordinal: (self.kind == 0).then_some(self.ordinal),
            created: self.created,
            up: self.up,
        }
    }
}

/// The members planning one `OnePod` hook with it pending.
#[derive(Debug, Default)]
struct Planners {
    all: HashSet<Arc<str>>,
    /// Those that may run it, in the order of the choice.
    candidates: BTreeSet<Rank>,
    /// Those that may not (nobody vouches for them, deleting, or unable as their worker said).
    bystanders: HashSet<Arc<str>>,
}

impl Planners {
    /// The first two candidates in the order of the choice: all that any planner's turn depends
    /// on ([`RestoreIndex::one_pod_candidates`]).
    fn deciders(&self) -> Vec<Rank> {
        self.candidates.iter().take(2).cloned().collect()
    }

    fn remove(&mut self, uid: &Arc<str>, rank: Option<&Rank>) {
        self.all.remove(uid);
        match rank {
            Some(rank) => {
                self.candidates.remove(rank);
            }
            None => {
                self.bystanders.remove(uid);
            }
        }
    }

    fn insert(&mut self, uid: &Arc<str>, rank: Option<Rank>) {
        self.all.insert(uid.clone());
        match rank {
            Some(rank) => {
                self.candidates.insert(rank);
            }
            None => {
                self.bystanders.insert(uid.clone());
            }
        }
    }
}

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
    /// The runs of each awaited hook by vouched members, as far as waiters need them.
    runs: HashMap<RunKey, Runs>,
    /// Members with a pending hook that waits for each.
    waiters: HashMap<RunKey, HashSet<Arc<str>>>,
    /// Members with each `OnePod` hook pending, its candidates in the order of the choice.
    planners: HashMap<Box<str>, Planners>,
    /// Known pods by namespace: a RestoreHook's late-hook scan looks at its own namespace only.
    by_namespace: HashMap<Box<str>, HashSet<Arc<str>>>,
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
        if first_sight {
            self.by_namespace
                .entry(pod.namespace.as_str().into())
                .or_default()
                .insert(uid.clone());
        }
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
        remove_from(&mut self.by_namespace, old.pod.namespace.as_str(), &uid);
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
            .chain(self.planners.values().map(|p| &p.all))
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
        // A RestoreHook selects pods of its own namespace only (§7.2): its scan reads those.
        let scoped: Box<dyn Iterator<Item = (&Arc<str>, &Entry)>> =
            match (object.kind, object.namespace.as_deref()) {
                (SourceKind::RestoreHook, Some(namespace)) => Box::new(
                    self.by_namespace
                        .get(namespace)
                        .into_iter()
                        .flatten()
                        .filter_map(|uid| self.pods.get_key_value(uid)),
                ),
                _ => Box::new(self.pods.iter()),
            };
        scoped
            .filter(|(_, e)| {
                namespace_labels(&e.pod.namespace)
                    .is_some_and(|labels| may_extend(object, &e.pod, labels, hooks, config))
            })
            .map(|(uid, e)| (uid.to_string(), e.pod.namespace.clone(), e.pod.name.clone()))
            .collect()
    }

    /// The namespaces of the known pods.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.by_namespace.keys().map(|k| &**k)
    }

    /// A worker's news about its pod's `OnePod` hook `key`. The other planners are woken when it
    /// changes what they see.
    pub fn post_standing(&mut self, uid: &str, key: &str, standing: Standing) -> Changes {
        let uid = self.uid(uid);
        let before = self.standing_of(&uid, key);
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
            wake: self.restand(&uid, key, before, standing),
            first_sight: false,
        }
    }

    /// Moves a planner of `key` whose standing changed to its new place among the candidates;
    /// returns whom that wakes.
    fn restand(
        &mut self,
        uid: &Arc<str>,
        key: &str,
        before: Standing,
        after: Standing,
    ) -> Vec<Arc<str>> {
        let Some(entry) = self.pods.get(uid) else {
            // Not applied yet: its rank is taken when it is.
            return Vec::new();
        };
        let plans = member_of(Some(entry)).is_some_and(|(_, m)| m.one_pod_keys().any(|k| k == key));
        if !plans {
            return Vec::new();
        }
        let (was, is) = (rank(uid, entry, before), rank(uid, entry, after));
        if was == is {
            return Vec::new();
        }
        self.move_planner(key, uid, Some(was.as_ref()), Some(is))
    }

    /// Moves planner `uid` of `key` from `before` to `after` (`None`: not a planner; `Some(None)`:
    /// a planner that is no candidate); returns whom that wakes: when the first two candidates
    /// changed (all any turn depends on, [`RestoreIndex::one_pod_candidates`]), those that were
    /// or are among them and the planners that are no candidates (their turn follows the
    /// choice), but not `uid`.
    fn move_planner(
        &mut self,
        key: &str,
        uid: &Arc<str>,
        before: Option<Option<&Rank>>,
        after: Option<Option<Rank>>,
    ) -> Vec<Arc<str>> {
        let planners = match self.planners.get_mut(key) {
            Some(p) => p,
            None => self.planners.entry(key.into()).or_default(),
        };
        let deciders = planners.deciders();
        if let Some(rank) = before {
            planners.remove(uid, rank);
        }
        if let Some(rank) = after {
            planners.insert(uid, rank);
        }
        let now = planners.deciders();
        let wake = if deciders == now {
            Vec::new()
        } else {
            let uids: BTreeSet<&Arc<str>> = deciders
                .iter()
                .chain(&now)
                .map(|r| &r.uid)
                .chain(&planners.bystanders)
                .filter(|u| *u != uid)
                .collect();
            uids.into_iter().cloned().collect()
        };
        if planners.all.is_empty() {
            self.planners.remove(key);
        }
        wake
    }

    /// A worker stopped: what it posted no longer stands.
    pub fn leave(&mut self, uid: &str) -> Changes {
        let Some((uid, posted)) = self.standing.remove_entry(uid) else {
            return Changes::default();
        };
        let mut wake = BTreeSet::new();
        for (key, standing) in posted {
            if standing != Standing::default() {
                wake.extend(self.restand(&uid, &key, standing, Standing::default()));
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
            let runs: Vec<Option<&Runs>> = awaited
                .into_iter()
                .map(|awaited| {
                    self.runs.get(&RunKey {
                        restore: restore.clone(),
                        awaited,
                    })
                })
                .collect();
            let seen = |k: usize| runs[k].map(Runs::seen).unwrap_or_default();
            turns.insert(i, after_turn_of(&names, self.listed, seen));
        }
        turns
    }

    /// The candidates for `OnePod` hook `key` (docs/behaviour.md §6.15) that decide every
    /// planner's turn: the first two in the order of the choice. A candidate is vouched for, has
    /// the hook pending, is not being deleted and can run it as far as its worker said.
    /// [`super::one_pod::turn`] gives every pod the same answer from these two as from all the
    /// candidates: the choice is the first; a pod that cannot run it any more passes it to the
    /// first other one, which is among the two, and needs to know only that one is left. Kept in
    /// order as pods and standings change, so a turn costs the same whatever the restore's size.
    pub fn one_pod_candidates(&self, key: &str) -> Vec<Candidate> {
        self.planners
            .get(key)
            .map(|p| p.candidates.iter().take(2).map(Rank::candidate).collect())
            .unwrap_or_default()
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
            .flat_map(|p| &p.all)
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

        // Runs that others wait for: each awaited hook's runs take the pod's old runs out and
        // its new ones in, and its waiters are woken when what their turn depends on changed.
        let runs_of = |e: Option<&Entry>| -> Vec<(RunKey, RunAt, HookPhase, OnError)> {
            let Some((pod, m)) = member_of(e) else {
                return Vec::new();
            };
            let name: Box<str> = format!("{}/{}", pod.namespace, pod.name).into();
            m.run_keys(&pod.namespace)
                .zip(m.hooks.iter())
                .enumerate()
                .map(|(position, (key, run))| {
                    let at = RunAt {
                        pod: name.clone(),
                        uid: uid.clone(),
                        position,
                    };
                    (key, at, run.phase, run.on_error)
                })
                .collect()
        };
        let (old_runs, new_runs) = (runs_of(old), runs_of(new));
        // Whether the pod's own runs changed the answer of a hook it waits for itself.
        let mut own_gate_changed = false;
        if old_runs != new_runs {
            let keys: BTreeSet<&RunKey> = old_runs.iter().chain(&new_runs).map(|r| &r.0).collect();
            let gate = |runs: &HashMap<RunKey, Runs>, key: &RunKey| {
                runs.get(key).map(|r| r.seen().gate()).unwrap_or_default()
            };
            let before: Vec<_> = keys.iter().map(|k| gate(&self.runs, k)).collect();
            for (key, at, phase, _) in &old_runs {
                if let Some(runs) = self.runs.get_mut(key) {
                    runs.remove(at, *phase);
                }
            }
            for (key, at, phase, on_error) in &new_runs {
                match self.runs.get_mut(key) {
                    Some(runs) => runs.add(at, *phase, *on_error),
                    None => self
                        .runs
                        .entry(key.clone())
                        .or_default()
                        .add(at, *phase, *on_error),
                }
            }
            for (key, before) in keys.into_iter().zip(before) {
                if gate(&self.runs, key) != before {
                    wake.extend(self.waiters.get(key).into_iter().flatten().cloned());
                    own_gate_changed |= self.waiters.get(key).is_some_and(|w| w.contains(uid));
                }
                if self.runs.get(key).is_some_and(Runs::is_empty) {
                    self.runs.remove(key);
                }
            }
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

        // OnePod hooks it plans: its place among each hook's candidates, and whom a move wakes.
        let plans = |e: Option<&Entry>| -> BTreeMap<Box<str>, Option<Rank>> {
            let Some((_, m)) = member_of(e) else {
                return BTreeMap::new();
            };
            let entry = e.expect("a member comes with its entry");
            m.one_pod_keys()
                .map(|k| (k.into(), rank(uid, entry, self.standing_of(uid, k))))
                .collect()
        };
        let (old_plans, new_plans) = (plans(old), plans(new));
        let old_plans_keys: BTreeSet<&Box<str>> = old_plans.keys().collect();
        let new_plans_keys: BTreeSet<&Box<str>> = new_plans.keys().collect();
        let plans_changed = old_plans_keys != new_plans_keys;
        let keys: BTreeSet<&Box<str>> = old_plans_keys.union(&new_plans_keys).copied().collect();
        for key in keys {
            let (before, after) = (old_plans.get(key), new_plans.get(key));
            if before != after {
                let moved = self.move_planner(key, uid, before.map(Option::as_ref), after.cloned());
                wake.extend(moved);
            }
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
        // The pod itself looks again when the model first learns what it waits for or plans, and
        // when its own runs changed the answer of a hook it waits for: it may have asked before
        // the watch showed it (its worker writes, the model learns from a separate watch), and
        // nothing else need change again to wake it.
        if old_waits == new_waits && !plans_changed && !own_gate_changed {
            wake.remove(uid);
        }
        wake.into_iter().collect()
    }
}

/// A planner's place among a `OnePod` hook's candidates; `None` when it is no candidate
/// (docs/behaviour.md §6.15, §6.20).
fn rank(uid: &Arc<str>, entry: &Entry, standing: Standing) -> Option<Rank> {
    let member = entry.member.as_ref().filter(|m| m.vouched)?;
    if !standing.able || entry.pod.deleting {
        return None;
    }
    let (kind, ordinal, age) = match (member.ordinal, standing.up) {
        (Some(ordinal), _) => (0, ordinal, None),
        (None, true) => (1, 0, entry.pod.created),
        (None, false) => (2, 0, None),
    };
    Some(Rank {
        kind,
        ordinal,
        age,
        pod: format!("{}/{}", entry.pod.namespace, entry.pod.name).into(),
        uid: uid.clone(),
        up: standing.up,
        created: entry.pod.created,
    })
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
