//! The pods the webhook marked as admitted in a restore scope (`restore-hooks.dev/restore-run`),
//! as the object-status watch sees them: what the late-hook scan compares hook objects with
//! (docs/behaviour.md §7.2).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use restore_hooks_core::hooks::labels::CompactLabels;
use tokio::sync::{broadcast, watch};

/// A marked pod, as far as late hooks need to know it.
#[derive(Clone, Debug)]
pub struct MarkedPod {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's labels, for the hook objects' selectors.
    pub labels: CompactLabels,
    /// `metadata.creationTimestamp`; `None` when the API server sent none.
    pub created: Option<Timestamp>,
    /// Hook sources its plan annotation names (exec, missed init, not applicable), as written:
    /// a hook object already there needs no late look (unverified: only to skip work).
    /// Sorted and without duplicates; a slice rather than a set (each marked pod has one).
    pub plan_sources: Box<[Box<str>]>,
    /// Init containers the webhook injected (`restore-hooks.dev/injected`).
    pub injected: Box<[Box<str>]>,
}

/// The marked pods known now, by uid (shared with the late-hook scan), and whether the first
/// list of them is complete: a scan against a set that is still being listed would miss pods.
///
/// Pods seen for the first time after that list are announced (by uid): a hook object compiled
/// just before its pod was marked (the watches are separate streams; a webhook replica's cache
/// can lag the controller's) was scanned without it, and is looked at again for that pod.
#[derive(Clone)]
pub struct MarkedPods {
    pods: Arc<Mutex<HashMap<String, MarkedPod>>>,
    listed: Arc<watch::Sender<bool>>,
    arrivals: broadcast::Sender<String>,
}

impl Default for MarkedPods {
    fn default() -> Self {
        Self {
            pods: Arc::default(),
            listed: Arc::new(watch::channel(false).0),
            arrivals: broadcast::channel(4096).0,
        }
    }
}

impl MarkedPods {
    /// The pods by uid. Hold the guard briefly (never across an await): the status watch
    /// inserts and removes under it.
    pub fn lock(
        &self,
    ) -> std::sync::LockResult<std::sync::MutexGuard<'_, HashMap<String, MarkedPod>>> {
        self.pods.lock()
    }

    /// Returns once the watch has listed the marked pods at least once.
    pub async fn listed(&self) {
        let mut listed = self.listed.subscribe();
        // The sender lives as long as `self`: this only returns once listed.
        let _ = listed.wait_for(|l| *l).await;
    }

    /// Whether the first list is complete.
    pub(super) fn is_listed(&self) -> bool {
        *self.listed.borrow()
    }

    pub(super) fn set_listed(&self) {
        self.listed.send_replace(true);
    }

    /// Pods first seen after the first list.
    pub fn arrivals(&self) -> broadcast::Receiver<String> {
        self.arrivals.subscribe()
    }

    pub(super) fn insert(&self, uid: String, pod: MarkedPod) {
        let first_sight = self
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.clone(), pod)
            .is_none();
        if first_sight && *self.listed.borrow() {
            // Nobody listening (no late-hook task) is not an error.
            let _ = self.arrivals.send(uid);
        }
    }
}
