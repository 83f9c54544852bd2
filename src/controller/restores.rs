//! The leader's restore model (`restore_hooks_core::restore::RestoreIndex`) and what feeds it:
//! one metadata-only watch of the pods the webhook marked (`restore-hooks.dev/restore-run`), whose
//! plan and status annotations are all it needs, so it holds no pod spec and no namespace is ever
//! re-listed. Every question about a restore (who waits for whom, which pod runs a `OnePod` hook,
//! the counts of every status target, the pods a late hook object may extend) is asked of the
//! index; this shell only verifies what the watch delivers, applies it, and wakes the pod workers
//! and the status writer whose answers changed.
//!
//! A new leader starts with an empty index and relists: what a restore's pods did is read from
//! the pods, so it survives restarts and leader changes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use restore_hooks_core::hooks::labels::CompactLabels;
use restore_hooks_core::hooks::plan::{
    EXEC_LABEL, ExecPlan, ExecStatus, INJECTED_ANNOTATION, PLAN_ANNOTATION, RESTORE_RUN_LABEL,
    STATUS_ANNOTATION,
};
use restore_hooks_core::hooks::signing::{PLAN_SIGNATURE_ANNOTATION, STATUS_SIGNATURE_ANNOTATION};
use restore_hooks_core::restore::tally::{Target, settled_status};
use restore_hooks_core::restore::{Changes, MarkedPod, RestoreIndex, Standing, Verified};
use restore_hooks_core::trust::{PodFacts, verify};
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::backoff::watch_backoff;
use crate::plan_key::KeyRing;

/// The restore model of one leadership, shared by the watch, the pod workers, the status writer
/// and the late-hook scan. Cheap to clone.
#[derive(Clone)]
pub struct Restores {
    inner: Arc<Inner>,
}

struct Inner {
    /// Never held across an await: every call takes it for one index operation.
    index: Mutex<RestoreIndex>,
    /// How to wake each pod worker, by pod uid.
    workers: Mutex<HashMap<String, Arc<Notify>>>,
    /// The watch has listed the marked pods once.
    listed: watch::Sender<bool>,
    /// Pods first seen after that list: a hook object compiled just before its pod was marked
    /// (the watches are separate streams; a webhook replica's cache can lag the controller's)
    /// was scanned without it, and is looked at again for that pod.
    arrivals: broadcast::Sender<String>,
    /// Counts changed: the status writer has targets to write.
    counts_changed: Notify,
}

impl Default for Restores {
    fn default() -> Self {
        Self {
            inner: Arc::new(Inner {
                index: Mutex::new(RestoreIndex::new()),
                workers: Mutex::default(),
                listed: watch::channel(false).0,
                arrivals: broadcast::channel(4096).0,
                counts_changed: Notify::new(),
            }),
        }
    }
}

impl Restores {
    /// Reads the index (briefly: never across an await).
    pub fn read<R>(&self, f: impl FnOnce(&RestoreIndex) -> R) -> R {
        f(&self.inner.index.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Changes the index and wakes whom the change concerns.
    fn change(&self, f: impl FnOnce(&mut RestoreIndex) -> Changes) -> Changes {
        let (changes, dirty) = {
            let mut index = self.inner.index.lock().unwrap_or_else(|e| e.into_inner());
            let changes = f(&mut index);
            (changes, index.has_dirty())
        };
        self.wake(changes.wake.iter().map(|u| &**u));
        if dirty {
            self.inner.counts_changed.notify_one();
        }
        changes
    }

    fn wake<'a>(&self, uids: impl Iterator<Item = &'a str>) {
        let workers = self.inner.workers.lock().unwrap_or_else(|e| e.into_inner());
        for uid in uids {
            if let Some(wake) = workers.get(uid) {
                wake.notify_one();
            }
        }
    }

    /// A pod's worker starts: it is woken when what its pod's hooks wait for changes.
    pub fn join(&self, uid: &str, wake: Arc<Notify>) {
        self.inner
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), wake);
    }

    /// A pod's worker stopped: what it posted no longer stands.
    pub fn leave(&self, uid: &str) {
        self.inner
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.change(|index| index.leave(uid));
    }

    /// A worker's news about its pod's `OnePod` hook `key` (docs/behaviour.md §6.15).
    pub fn post_standing(&self, uid: &str, key: &str, standing: Standing) {
        self.change(|index| index.post_standing(uid, key, standing));
    }

    /// Wakes every other planner of `OnePod` hook `key`: its start was just recorded (or taken
    /// back), which the record, not the index, holds.
    pub fn one_pod_started(&self, key: &str, uid: &str) {
        let planners = self.read(|index| index.planners(key, uid));
        self.wake(planners.iter().map(|u| &**u));
    }

    /// The controller's last word on a pod that is gone: the counts keep it, and the pods that
    /// wait for its hooks learn how they ended.
    pub fn last_word(&self, uid: &str, namespace: &str, plan: &ExecPlan, status: &ExecStatus) {
        self.change(|index| index.last_word(uid, namespace, plan, status));
    }

    /// A status write of `target` landed with these tombstones folded into `retired`.
    pub fn folded(&self, target: &Target, ids: &[u64]) {
        self.inner
            .index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .folded(target, ids);
    }

    /// The object of `target` is gone: what waited to be folded into it has nowhere to go.
    pub fn forget_target(&self, target: &Target) {
        self.inner
            .index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget_target(target);
    }

    /// Every hook of a pod ended, as the controller wrote: kept until the pod goes, in case the
    /// watch never shows that state before it does.
    pub fn finished(&self, uid: &str, namespace: &str, plan: &ExecPlan, status: &ExecStatus) {
        self.inner
            .index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .finished(uid, namespace, plan, status);
    }

    /// Whether the marked pods were listed once.
    pub fn is_listed(&self) -> bool {
        *self.inner.listed.borrow()
    }

    /// Returns once the marked pods were listed once.
    pub async fn listed(&self) {
        let mut listed = self.inner.listed.subscribe();
        // The sender lives as long as `self`: this only returns once listed.
        let _ = listed.wait_for(|l| *l).await;
    }

    /// Pods first seen after the first list, by uid.
    pub fn arrivals(&self) -> broadcast::Receiver<String> {
        self.inner.arrivals.subscribe()
    }

    /// Returns once counts changed since the last [`Restores::take_dirty`] (or at once, if they
    /// changed before this call and nobody took them yet).
    pub async fn counts_changed(&self) {
        self.inner.counts_changed.notified().await;
    }

    /// The status targets whose counts changed.
    pub fn take_dirty(&self) -> BTreeSet<Target> {
        self.inner
            .index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_dirty()
    }

    /// Runs the watch of marked pods until `stop` is cancelled.
    pub async fn watch(self, client: kube::Client, keys: KeyRing, stop: CancellationToken) {
        let api: Api<PartialObjectMeta<Pod>> = Api::all(client);
        let mut pods = watch_backoff(watcher::watcher(
            api,
            watcher::Config::default().labels(RESTORE_RUN_LABEL),
        ))
        .boxed();
        // The uids of a (re)list so far: applied as they come (a restore's pods are not held
        // twice), and the pods it did not show retire when it ends.
        let mut relisted: Option<HashSet<String>> = None;
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = pods.next() => event,
            };
            match event {
                Some(Ok(Event::Init)) => relisted = Some(HashSet::new()),
                Some(Ok(Event::InitApply(p))) => {
                    if let (Some(seen), Some(uid)) = (relisted.as_mut(), p.uid()) {
                        seen.insert(uid);
                    }
                    self.apply(&keys, p);
                }
                Some(Ok(Event::InitDone)) => {
                    let seen = relisted.take().unwrap_or_default();
                    // Pods gone while the watch was down: their last known part retires.
                    let missing: Vec<String> = self.read(|index| {
                        index
                            .uids()
                            .filter(|u| !seen.contains(*u))
                            .map(str::to_string)
                            .collect()
                    });
                    for uid in missing {
                        self.change(|index| index.retire(&uid));
                    }
                    self.change(RestoreIndex::set_listed);
                    self.inner.listed.send_replace(true);
                }
                Some(Ok(Event::Apply(p))) => self.apply(&keys, p),
                Some(Ok(Event::Delete(p))) => {
                    if let Some(uid) = p.uid() {
                        // The deleted pod as it was last: a write that landed while the API
                        // server deleted it with no grace period left became that deletion, and
                        // is seen here only (docs/behaviour.md §8.3).
                        self.apply(&keys, p);
                        self.change(|index| index.retire(&uid));
                    }
                }
                Some(Err(e)) => {
                    warn!(error = %e, "watch of marked pods failed; retrying with backoff")
                }
                None => return,
            }
        }
    }

    /// A pod as the watch shows it: its facts, and its plan and status if they verify (a plan
    /// that does not verify — hand-written, edited, another installation's — counts for nothing).
    fn apply(&self, keys: &KeyRing, pod: PartialObjectMeta<Pod>) {
        let Some(uid) = pod.uid() else { return };
        let (marked, verified) = marked_pod(keys, &uid, &pod);
        let listed = self.is_listed();
        let changes = self.change(|index| index.apply(&uid, marked, verified));
        if changes.first_sight && listed {
            // Nobody listening (no late-hook task) is not an error.
            let _ = self.inner.arrivals.send(uid);
        }
    }
}

/// What the restore model is told about one marked pod.
fn marked_pod(
    keys: &KeyRing,
    uid: &str,
    pod: &PartialObjectMeta<Pod>,
) -> (MarkedPod, Option<Verified>) {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let annotations = pod.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let facts = PodFacts {
        namespace: &namespace,
        name: &name,
        generate_name: pod.metadata.generate_name.as_deref(),
        uid,
        created,
        plan: get(PLAN_ANNOTATION),
        plan_signature: get(PLAN_SIGNATURE_ANNOTATION),
        status: get(STATUS_ANNOTATION),
        status_signature: get(STATUS_SIGNATURE_ANNOTATION),
    };
    let verified = verify(&facts, keys.current().as_deref()).ok().map(|t| {
        let exec_label = pod.labels().get(EXEC_LABEL).map(String::as_str);
        Verified {
            status: settled_status(&t.plan, t.status, exec_label),
            plan: t.plan,
        }
    });
    let plan_sources = get(PLAN_ANNOTATION)
        .and_then(|text| ExecPlan::from_annotation(text).ok())
        .map(|plan| {
            let refs = plan
                .missed_init
                .iter()
                .chain(&plan.not_applicable)
                .map(|r| r.source.as_str().into());
            let mut sources: Vec<Box<str>> = plan
                .hooks
                .iter()
                .map(|h| h.source.as_str().into())
                .chain(refs)
                .collect();
            sources.sort_unstable();
            sources.dedup();
            sources.into_boxed_slice()
        })
        .unwrap_or_default();
    let injected = get(INJECTED_ANNOTATION)
        .map(|v| {
            v.split(',')
                .filter(|n| !n.is_empty())
                .map(Box::from)
                .collect()
        })
        .unwrap_or_default();
    let marked = MarkedPod {
        labels: pod
            .metadata
            .labels
            .as_ref()
            .map(CompactLabels::from)
            .unwrap_or_default(),
        created,
        deleting: pod.metadata.deletion_timestamp.is_some(),
        plan_sources,
        injected,
        namespace,
        name,
    };
    (marked, verified)
}
