//! The pending-pod watch: one resilient watch (`watcher` with backoff: it relists after API
//! errors and dropped connections) over pods labelled `restore-hooks.dev/exec=pending`, and one
//! worker task per pod ([`super::worker`]), told of each change of its pod through its mailbox.
//! What every worker shares is [`Workers`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use jiff::SignedDuration;
use kube::api::Api;
use kube::runtime::watcher as watch_pods;
use kube::runtime::watcher::{self, Event};
use restore_hooks_core::config::EngineConfig;
use restore_hooks_core::hooks::plan::{EXEC_LABEL, EXEC_PENDING};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::backoff::watch_backoff;
use crate::catalog::SharedIndex;
use crate::metrics::Metrics;
use crate::plan_key::KeyRing;

use crate::controller::events::EventSink;
use crate::controller::exec::Exec;
use crate::controller::ledger::Ledger;
use crate::controller::restores::Restores;
use crate::controller::slim_pod::{PodState, SlimPod};
use crate::controller::slots::ExecSlots;
use crate::controller::worker::PodWorker;

/// What every pod worker shares.
pub struct Workers {
    /// Watches, reads and patches pods (the controller's identity).
    pub client: kube::Client,
    /// Runs the hooks' commands.
    pub exec: Arc<dyn Exec>,
    /// Pending pods, hook results, status rollbacks.
    pub metrics: Metrics,
    /// Hook results and rejected plans, as Events on the pods.
    pub events: EventSink,
    /// The restore model: `after` and `OnePod` turns, and what a gone pod's hooks did.
    pub restores: Restores,
    /// Exec slots, shared fairly across namespaces.
    pub slots: Arc<ExecSlots>,
    /// Verifies plans and statuses and signs the statuses written; while no key is loaded,
    /// workers wait.
    pub keys: KeyRing,
    /// Namespace labels, for the scope check before every exec.
    pub index: Arc<SharedIndex>,
    /// The scope rules and `--max-exec-timeout`.
    pub engine: EngineConfig,
    /// The controller's record of what ran: consulted before, and written at, every start.
    pub ledger: Ledger,
    /// `--inherited-exec-grace`: how long past `startedAt + execTimeout` a `Running` hook this
    /// process did not start still counts as running.
    pub inherited_grace: SignedDuration,
}

/// What a worker knows about its pod.
pub(super) enum Observed {
    Pod(Arc<PodState>),
    /// The watch says the pod left the selection (deleted, or relabelled by someone else):
    /// the worker confirms with a read.
    MaybeGone,
}

pub(super) type Key = (String, String);

/// What the watch last told a worker, until the worker reads it: a newer observation replaces an
/// unread one. (A `tokio::sync::watch` channel would do, at several hundred bytes per pending
/// pod; the worker's own `wake` already tells it to look.)
pub(super) struct Mailbox {
    latest: Mutex<Option<Observed>>,
    /// The watch loop let go of the worker (a new pod took the name, or the loop ended): it
    /// finishes what runs and starts nothing.
    closed: AtomicBool,
}

impl Mailbox {
    pub(super) fn new() -> Self {
        Self {
            latest: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// The unread observation (a poisoned lock still holds a plain value).
    fn latest(&self) -> std::sync::MutexGuard<'_, Option<Observed>> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn take(&self) -> Option<Observed> {
        self.latest().take()
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// The watch loop's end of a worker.
struct Handle {
    uid: String,
    mailbox: Arc<Mailbox>,
    wake: Arc<Notify>,
}

impl Handle {
    fn send(&self, observed: Observed) {
        *self.mailbox.latest() = Some(observed);
        self.wake.notify_one();
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.mailbox.closed.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }
}

/// Watches pending pods and runs their hooks until `term` is cancelled (shutdown or lost
/// leadership); then stops starting execs, lets running ones finish and record their result, and
/// returns.
pub async fn serve_pods(shared: Arc<Workers>, term: CancellationToken) {
    // Nothing runs before the record of what earlier leaders ran has been read.
    tokio::select! {
        _ = term.cancelled() => return,
        _ = shared.ledger.loaded() => {}
    }
    let api: Api<SlimPod> = Api::all(shared.client.clone());
    let selector = format!("{EXEC_LABEL}={EXEC_PENDING}");
    let mut stream = watch_backoff(watch_pods(
        api,
        watcher::Config::default().labels(&selector),
    ))
    .boxed();
    // Workers stop with `term`, or when this watch ends (the caller starts a new one).
    let term = term.child_token();
    let mut workers: HashMap<Key, Handle> = HashMap::new();
    let mut tasks: JoinSet<(Key, String)> = JoinSet::new();
    // Pods listed since the current (re)list began: after it, workers of pods not listed any more
    // are told their pod may be gone (a delete can be missed while the watch was down).
    let mut relisted: Option<HashSet<Key>> = None;
    info!(selector = %selector, "watching pods with hooks to run");
    loop {
        tokio::select! {
            biased;
            _ = term.cancelled() => break,
            Some(done) = tasks.join_next() => {
                if let Ok((key, uid)) = done
                    && workers.get(&key).is_some_and(|w| w.uid == uid)
                {
                    workers.remove(&key);
                }
            }
            event = stream.next() => match event {
                Some(Ok(Event::Apply(pod))) => dispatch(&shared, &term, &mut workers, &mut tasks, pod),
                Some(Ok(Event::InitApply(pod))) => {
                    if let Some(seen) = relisted.as_mut() {
                        seen.insert(key_of(&pod));
                    }
                    dispatch(&shared, &term, &mut workers, &mut tasks, pod);
                }
                Some(Ok(Event::Delete(pod))) => {
                    let key = key_of(&pod);
                    if let Some(w) = workers.get(&key)
                        && Some(&w.uid) == pod.metadata.uid.as_ref()
                    {
                        w.send(Observed::MaybeGone);
                    }
                }
                Some(Ok(Event::Init)) => relisted = Some(HashSet::new()),
                Some(Ok(Event::InitDone)) => {
                    if let Some(seen) = relisted.take() {
                        for (key, w) in &workers {
                            if !seen.contains(key) {
                                w.send(Observed::MaybeGone);
                            }
                        }
                    }
                }
                Some(Err(e)) => warn!(error = %e, "pod watch failed; retrying with backoff"),
                None => {
                    error!("pod watch ended");
                    break;
                }
            },
        }
        shared.metrics.pending_pods.set(workers.len() as i64);
    }
    // Waiting workers return at once; running execs finish and are recorded.
    term.cancel();
    while tasks.join_next().await.is_some() {}
    shared.metrics.pending_pods.set(0);
}

fn key_of(pod: &SlimPod) -> Key {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

fn dispatch(
    shared: &Arc<Workers>,
    term: &CancellationToken,
    workers: &mut HashMap<Key, Handle>,
    tasks: &mut JoinSet<(Key, String)>,
    pod: SlimPod,
) {
    let key = key_of(&pod);
    let pod = PodState::from_slim(pod);
    let uid = pod.uid.clone();
    if let Some(w) = workers.get(&key) {
        if w.uid == uid {
            w.send(Observed::Pod(pod));
            return;
        }
        // Same name, new pod: the old worker confirms its pod is gone and finishes.
        w.send(Observed::MaybeGone);
    }
    let wake = Arc::new(Notify::new());
    shared.restores.join(&uid, wake.clone());
    // The worker starts with its pod, not with it in the mailbox: the watch may put "may be
    // gone" there before the new task first runs (both events in one read), and a worker that
    // never saw its pod could not say how its hooks ended.
    let mailbox = Arc::new(Mailbox::new());
    workers.insert(
        key.clone(),
        Handle {
            uid: uid.clone(),
            mailbox: mailbox.clone(),
            wake: wake.clone(),
        },
    );
    let mut worker = PodWorker::new(shared.clone(), key, pod, mailbox, term.clone(), wake);
    // The task holds the worker once, and `run` borrows it: a `run(self)` future would hold a
    // second copy of every field (its argument, moved into the body) for the pod's whole wait.
    tasks.spawn(async move { worker.run().await });
}
