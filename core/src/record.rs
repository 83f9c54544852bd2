//! The controller's record of what ran, as data: one pod's entry in a `RestoreRecord`'s
//! `status.executions` (docs/behaviour.md §9.5). The CRD types embed it and the rules over it are
//! in [`crate::ledger`]; it depends on nothing else of core, so the types never import the rules.
//!
//! Entries only grow: marks are merged by rank (started < ended), so applying an older view of
//! the record (a watch event that lags the controller's own write) never forgets anything.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One pod's entry in `status.executions` (keyed by the pod's uid).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Execution {
    /// The id of the plan the pod carried when the controller first saw it.
    pub plan: String,
    /// The pod's namespace: each namespace's pods of a restore are bounded on their own
    /// (docs/behaviour.md §9.5), so that no namespace fills another's share. Empty in entries
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Hooks that started, by plan position (`"0"`, `"1"`, ...): `R` started, `S` succeeded,
    /// `F` failed after it started.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hooks: BTreeMap<String, Mark>,
    /// `runOn: OnePod` hooks this pod started, by plan position: recorded with the start, so that
    /// no other pod of the restore ever starts them (docs/behaviour.md §6.15).
    #[serde(default, rename = "onePod", skip_serializing_if = "BTreeMap::is_empty")]
    pub one_pod: BTreeMap<String, OnePodStart>,
    /// Hooks with `retry` past their first attempt, by plan position (docs/behaviour.md §6.17).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attempts: BTreeMap<String, Attempts>,
}

/// How far the attempts of a hook with `retry` got: a hook whose last started attempt was
/// released (it failed in a way its `retry` allows to try again) may start once more; any other
/// start mark still means "never again".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Attempts {
    /// Attempts started (recorded before each).
    pub started: u32,
    /// Attempts that ended and may be tried again.
    pub released: u32,
}

/// A `runOn: OnePod` hook's start, as recorded on the pod that runs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OnePodStart {
    /// Which hook, across the restore's pods (`restore_hooks_core::restore::one_pod::one_pod_key`).
    pub key: String,
    /// The pod that runs it, `namespace/name`: what the other pods' status names.
    pub pod: String,
}

/// How far one hook got, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Mark {
    /// The exec was about to start (recorded before it starts).
    #[serde(rename = "R")]
    Started,
    /// It exited with code 0.
    #[serde(rename = "S")]
    Succeeded,
    /// It started and failed (non-zero exit, timeout, broken stream).
    #[serde(rename = "F")]
    Failed,
}

impl Mark {
    fn rank(self) -> u8 {
        match self {
            Mark::Started => 1,
            Mark::Succeeded | Mark::Failed => 2,
        }
    }
}

impl Execution {
    /// A pod's first entry: its plan, nothing started.
    pub fn claimed(plan: &str) -> Self {
        Execution {
            plan: plan.to_string(),
            namespace: String::new(),
            hooks: BTreeMap::new(),
            one_pod: BTreeMap::new(),
            attempts: BTreeMap::new(),
        }
    }

    /// The number of the next attempt of hook `index` (1 for a hook never started), if one may
    /// start by the record: never started, or its last attempt was released.
    pub fn next_attempt(&self, index: usize) -> Option<u32> {
        let Some(mark) = self.mark(index) else {
            return Some(1);
        };
        let tries = self.attempts.get(&index.to_string()).copied();
        match (mark, tries) {
            (Mark::Started, Some(t)) if t.released >= t.started && t.started > 0 => {
                Some(t.started + 1)
            }
            _ => None,
        }
    }

    /// How many attempts of hook `index` the record saw start: 0 before its first, 1 for a hook
    /// marked started without `attempts`.
    pub fn started_attempts(&self, index: usize) -> u32 {
        match (self.mark(index), self.attempts.get(&index.to_string())) {
            (None, _) => 0,
            (Some(_), Some(t)) => t.started.max(1),
            (Some(_), None) => 1,
        }
    }

    /// Whether hook `index` started and waits to be tried again (its last attempt released).
    pub fn awaits_retry(&self, index: usize) -> bool {
        self.mark(index) == Some(Mark::Started) && self.next_attempt(index).is_some()
    }

    /// The mark of the hook at plan position `index`.
    pub fn mark(&self, index: usize) -> Option<Mark> {
        self.hooks.get(&index.to_string()).copied()
    }

    /// Sets a mark unless the entry already holds a later one (a result never goes back to
    /// started); true when it changed.
    pub fn set(&mut self, index: usize, mark: Mark) -> bool {
        match self.hooks.get(&index.to_string()) {
            Some(m) if m.rank() >= mark.rank() => false,
            _ => {
                self.hooks.insert(index.to_string(), mark);
                true
            }
        }
    }

    /// Takes in what `other` knows and this entry does not (the plan is the first one recorded).
    pub fn merge(&mut self, other: &Execution) {
        if self.plan.is_empty() {
            self.plan = other.plan.clone();
        }
        if self.namespace.is_empty() {
            self.namespace = other.namespace.clone();
        }
        for (k, &m) in &other.hooks {
            match self.hooks.get(k) {
                Some(mine) if mine.rank() >= m.rank() => {}
                _ => {
                    self.hooks.insert(k.clone(), m);
                }
            }
        }
        for (k, start) in &other.one_pod {
            self.one_pod
                .entry(k.clone())
                .or_insert_with(|| start.clone());
        }
        for (k, theirs) in &other.attempts {
            let mine = self.attempts.entry(k.clone()).or_default();
            mine.started = mine.started.max(theirs.started);
            mine.released = mine.released.max(theirs.released);
        }
    }
}
