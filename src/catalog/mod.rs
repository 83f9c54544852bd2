//! Where the webhook and the controller find hook definitions and namespace labels: one compiled
//! [`HookIndex`] in memory, fed by `--hooks` files (`static_files`) and the cluster's watches
//! (`cluster`). Admission reads it under a read lock, never makes an API call for it (a slow or
//! throttled API server must not turn into admission latency), and never compiles anything.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use restore_hooks_core::hooks::compiled::CompiledObject;
use tokio::sync::broadcast;

pub use restore_hooks_core::catalog::StaticCatalog;
pub use restore_hooks_core::index::{HookIndex, IndexKind, IndexObject, Origin};

pub mod cluster;
pub mod static_files;

pub use static_files::load_static;

/// A hook object that was (re)compiled: what the webhook's readiness reporter and the
/// controller's late-hook scan react to.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The object as compiled, problems included.
    pub object: Arc<CompiledObject>,
    /// True when this is a new object or a new generation (not a relist of a known one).
    pub changed: bool,
    /// The `metadata.resourceVersion` the watch delivered it at; `None` after a relist. The
    /// controller tells the echo of its own status write from someone else's write by it.
    pub resource_version: Option<String>,
}

/// The index and who watches it.
pub struct SharedIndex {
    index: RwLock<HookIndex>,
    events: broadcast::Sender<Compiled>,
    health: Mutex<BTreeMap<&'static str, WatchState>>,
    /// Generations already announced, to tell a relist from a change.
    seen: Mutex<BTreeMap<(IndexKind, String, String), Option<i64>>>,
    /// Bumped whenever a namespace or a Velero Restore changes: restore windows (§1.6).
    scope_changes: tokio::sync::watch::Sender<u64>,
}

/// How one watch is doing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchState {
    /// The initial list completed at least once: the cache holds the cluster's objects.
    pub listed: bool,
    /// Failing since this time (RFC 3339), with this error; the cache serves what it had.
    pub failing: Option<(String, String)>,
}

impl SharedIndex {
    /// Shares `index` (empty, or loaded from `--hooks` files); watches are added with
    /// [`cluster::watch_into`].
    pub fn new(index: HookIndex) -> Arc<Self> {
        let (events, _) = broadcast::channel(1024);
        Arc::new(Self {
            index: RwLock::new(index),
            events,
            health: Mutex::new(BTreeMap::new()),
            seen: Mutex::new(BTreeMap::new()),
            scope_changes: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The index as it is now. Hold the guard only for one decision: watches wait for it.
    pub fn read(&self) -> RwLockReadGuard<'_, HookIndex> {
        // A panic while writing cannot leave the index half-updated in a way that matters more
        // than refusing every admission would: keep serving.
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, HookIndex> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes whenever a namespace or a Velero Restore changed (restore windows, §1.6).
    pub fn scope_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.scope_changes.subscribe()
    }

    pub(crate) fn scope_changed(&self) {
        self.scope_changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Hook objects as they are compiled.
    pub fn subscribe(&self) -> broadcast::Receiver<Compiled> {
        self.events.subscribe()
    }

    pub(crate) fn announce(&self, object: Arc<CompiledObject>, resource_version: Option<String>) {
        let kind = match object.kind {
            restore_hooks_core::hooks::compiled::SourceKind::RestoreHook => IndexKind::RestoreHook,
            restore_hooks_core::hooks::compiled::SourceKind::ClusterRestoreHook => {
                IndexKind::ClusterRestoreHook
            }
            restore_hooks_core::hooks::compiled::SourceKind::VeleroRestore => {
                IndexKind::VeleroRestore
            }
        };
        let key = (
            kind,
            object.namespace.clone().unwrap_or_default(),
            object.name.clone(),
        );
        let changed = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.insert(key, object.generation) != Some(object.generation)
        };
        // No receiver is not an error: nobody needs to react.
        let _ = self.events.send(Compiled {
            object,
            changed,
            resource_version,
        });
    }

    pub(crate) fn forget(&self, kind: IndexKind, namespace: &str, name: &str) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(kind, namespace.to_string(), name.to_string()));
    }

    /// Records that a watch listed (or relisted) successfully.
    pub(crate) fn watch_listed(&self, resource: &'static str) {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        let state = health.entry(resource).or_default();
        state.listed = true;
        state.failing = None;
    }

    /// Records a watch event that was not an error.
    pub(crate) fn watch_ok(&self, resource: &'static str) {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        health.entry(resource).or_default().failing = None;
    }

    /// Records a watch error (kept from the first of a run of errors).
    pub(crate) fn watch_failed(&self, resource: &'static str, error: String) {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        let state = health.entry(resource).or_default();
        if state.failing.is_none() {
            let since = restore_hooks_core::exec_step::timestamp(jiff::Timestamp::now());
            state.failing = Some((since, error));
        }
    }

    /// A watch that exists but has not listed yet.
    pub(crate) fn watch_started(&self, resource: &'static str) {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(resource)
            .or_default();
    }

    /// Every watch and its state (for `/readyz` and logs). Empty without a cluster.
    pub fn health(&self) -> BTreeMap<&'static str, WatchState> {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// True once every watch has had its initial list (without a cluster: at once).
    pub fn is_synced(&self) -> bool {
        self.health().values().all(|s| s.listed)
    }

    /// Watches failing now, as `resource: error (since T)`: `/readyz` reports them (the cache keeps
    /// serving what it had, so hooks created meanwhile may be missing).
    pub fn degraded(&self) -> Vec<String> {
        self.health()
            .iter()
            .filter_map(|(resource, s)| {
                s.failing
                    .as_ref()
                    .map(|(since, error)| format!("{resource}: {error} (since {since})"))
            })
            .collect()
    }
}
