//! The pending-pod watch and one worker per pending pod.
//!
//! One resilient watch (`watcher` with backoff: it relists after API errors and dropped
//! connections) over pods labelled `restore-hooks.dev/exec=pending` feeds one worker task per pod.
//! A worker is an event loop over its pod's observations, the exec slots it waits for and the
//! execs it runs; it alone writes its pod's status, so hooks of different containers run at the
//! same time without losing each other's results (docs/behaviour.md §6.3).
//!
//! Ordering for at-most-once (§6.9): a hook is recorded `Running` (merge patch with the pod's
//! resourceVersion) before its exec starts; a conflicting write is never retried blindly but
//! re-read and decided again, so a hook whose `Running` record another writer won is not started.
//! A result is recorded on top of the latest status, only where the `Running` record is still ours.
//!
//! The module is long because the worker's event loop, its writes and its recovery after a
//! conflict share one state (the latest observation of the pod); split across files, the
//! at-most-once argument above would be too.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::runtime::watcher as watch_pods;
use kube::runtime::watcher::{self, Event};
use restore_hooks_core::config::EngineConfig;
use restore_hooks_core::exec_step::{
    Context, ExecStep, Presence, align, capped, hook_is_up, next_step, timestamp,
};
use restore_hooks_core::hooks::plan::{
    EXEC_FAILED, EXEC_LABEL, EXEC_PENDING, ExecPlan, ExecStatus, HookPhase, HookStatus, RunOn,
};
use restore_hooks_core::hooks::scope::restore_scope;
use restore_hooks_core::hooks::signing::PlanKeys;
use restore_hooks_core::ledger::{OnePodStart, reconcile};
use restore_hooks_core::restore::Standing;
use restore_hooks_core::restore::after::AfterTurn;
use restore_hooks_core::restore::one_pod::{OnePodTurn, one_pod_key, turn};
use restore_hooks_core::retry::{Failure, retry_after};
use restore_hooks_core::trust::{Rejection, verify};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::backoff::{ApiBackoff, is_transient, watch_backoff};
use crate::catalog::SharedIndex;
use crate::hooks::duration::format_go_duration;
use crate::metrics::Metrics;
use crate::plan_key::KeyRing;

use super::events::{
    EventSink, EventType, HOOK_FAILED, HOOK_REFUSED, HOOK_RETRYING, HOOK_SUCCEEDED,
    HOOKS_COMPLETED, PLAN_REJECTED, Regarding, STATUS_ROLLED_BACK,
};
use super::exec::{Ephemeral, Exec, ExecOutcome, ExecRequest};
use super::ledger::Ledger;
use super::restores::Restores;
use super::slim_pod::{PodState, SlimPod};
use super::slots::{ExecSlots, SlotPermit, SlotWait, Turn};
use super::status::{WriteError, set_exec_label, write_status};

/// Writes of a `Running` record taken back, through conflicts with the kubelet's updates.
const UNSTART_ATTEMPTS: u32 = 5;
/// Conflicts a `Running` record whose start is recorded is written again through.
const REWRITE_CONFLICTS: u32 = 5;
/// How long such a write keeps trying while the API server throttles it or is unavailable (the
/// exec slot is held meanwhile), as the record's own writes do.
const REWRITE_BUSY_FOR: Duration = Duration::from_secs(120);

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
enum Observed {
    Pod(Arc<PodState>),
    /// The watch says the pod left the selection (deleted, or relabelled by someone else):
    /// the worker confirms with a read.
    MaybeGone,
}

type Key = (String, String);

/// What the watch last told a worker, until the worker reads it: a newer observation replaces an
/// unread one. (A `tokio::sync::watch` channel would do, at several hundred bytes per pending
/// pod; the worker's own `wake` already tells it to look.)
struct Mailbox {
    latest: Mutex<Option<Observed>>,
    /// The watch loop let go of the worker (a new pod took the name, or the loop ended): it
    /// finishes what runs and starts nothing.
    closed: AtomicBool,
}

impl Mailbox {
    fn new() -> Self {
        Self {
            latest: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// The unread observation (a poisoned lock still holds a plain value).
    fn latest(&self) -> std::sync::MutexGuard<'_, Option<Observed>> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self) -> Option<Observed> {
        self.latest().take()
    }

    fn is_closed(&self) -> bool {
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

/// An exec that ended, with what the worker needs to record it.
struct Finished {
    index: usize,
    outcome: ExecOutcome,
    elapsed: Duration,
    /// Its start is in the controller's record (so is its result, then).
    recorded: bool,
}

/// The status entry a result answers: it is written only over that entry, so a result never
/// replaces what another controller wrote meanwhile (docs/behaviour.md §6.9).
enum Answers {
    /// The `Running` record with this `startedAt` (a retried attempt's result is `Pending`
    /// again, without one).
    Running(Option<String>),
    /// The entry as it was before a start whose `Running` record never landed: `Pending` with
    /// this many `retries`.
    Unstarted(u32),
}

/// Why an attempt is released to be tried again (docs/behaviour.md §6.17).
struct Released {
    failure: Failure,
    message: String,
    exit_code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

struct PodWorker {
    shared: Arc<Workers>,
    namespace: String,
    name: String,
    uid: String,
    mailbox: Arc<Mailbox>,
    term: CancellationToken,
    /// After API errors, until a request succeeds: boxed and only then, since most workers
    /// never need one.
    backoff: Option<Box<ApiBackoff>>,
    /// The latest state of the pod (from the watch event that started the worker on), and the
    /// last plan/status this worker trusted.
    pod: Arc<PodState>,
    trusted: Option<(ExecPlan, Option<ExecStatus>)>,
    /// Hooks whose exec runs in this worker, and their `Running` records.
    running: BTreeSet<usize>,
    execs: JoinSet<Finished>,
    /// Results waiting to be written, each with the entry it answers.
    results: Vec<(usize, Answers, HookStatus)>,
    /// Hooks waiting for an exec slot; dropping a wait gives up its place.
    slot_waits: Vec<(usize, SlotWait)>,
    granted: Vec<(usize, SlotPermit)>,
    wake_at: Option<Timestamp>,
    /// The watch told us the pod may be gone: confirm before anything else.
    maybe_gone: bool,
    /// `pod` comes from a read of our own (not from the watch, which may lag).
    fresh: bool,
    /// The `Running` record this worker wrote for each hook it runs: the result is recorded
    /// against it, whatever view of the pod the worker has when the exec ends.
    started: std::collections::BTreeMap<usize, HookStatus>,
    /// When this worker first acted on the pod: the start time it assumes for a hook the record
    /// says started but the pod's status no longer shows (docs/behaviour.md §9.5).
    noticed: Option<Timestamp>,
    /// Woken when the watch left news in the mailbox, and when what the pod's hooks wait on
    /// elsewhere changes: the candidates of one of its `runOn: OnePod` hooks, or the runs of a
    /// hook one of its hooks waits for (`after`).
    wake: Arc<Notify>,
}

/// The first of `waits` granted a slot, taken out of the list, with its hook's index; pending
/// while none is (each grant wakes the worker through its channel).
async fn next_slot(waits: &mut Vec<(usize, SlotWait)>) -> (usize, SlotPermit) {
    use std::future::Future;
    std::future::poll_fn(|cx| {
        for (at, (_, wait)) in waits.iter_mut().enumerate() {
            if let std::task::Poll::Ready(permit) = Future::poll(std::pin::Pin::new(wait), cx) {
                let (i, _) = waits.remove(at);
                return std::task::Poll::Ready((i, permit));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// How an action ended.
enum Flow {
    /// Look at the pod again (something changed).
    Again,
    /// Nothing to do until the next event.
    Wait,
    /// The worker is done with this pod (once its execs are recorded).
    Stop,
}

impl PodWorker {
    fn new(
        shared: Arc<Workers>,
        (namespace, name): Key,
        pod: Arc<PodState>,
        mailbox: Arc<Mailbox>,
        term: CancellationToken,
        wake: Arc<Notify>,
    ) -> Self {
        Self {
            shared,
            namespace,
            name,
            uid: pod.uid.clone(),
            mailbox,
            term,
            backoff: None,
            pod,
            trusted: None,
            running: BTreeSet::new(),
            execs: JoinSet::new(),
            results: Vec::new(),
            slot_waits: Vec::new(),
            granted: Vec::new(),
            wake_at: None,
            maybe_gone: false,
            fresh: false,
            started: Default::default(),
            noticed: None,
            wake,
        }
    }

    /// The hooks waiting for a slot, as the state machine asks.
    fn awaiting_slot(&self) -> BTreeSet<usize> {
        self.slot_waits.iter().map(|(i, _)| *i).collect()
    }

    /// The slot queue the pod's hooks wait in: the first, until one of its hooks has started
    /// (docs/behaviour.md §6.11).
    fn turn(&self, status: &ExecStatus) -> Turn {
        let untouched = self.running.is_empty()
            && status
                .hooks
                .iter()
                .all(|h| h.started_at.is_none() && h.retries == 0);
        if untouched { Turn::First } else { Turn::Later }
    }

    /// The pod's plan (its exec timeouts capped by `--max-exec-timeout`) and status, if they
    /// verify against the loaded keys (docs/behaviour.md §9.3).
    fn verified(&self, pod: &PodState) -> Result<(ExecPlan, Option<ExecStatus>), Rejection> {
        let trusted = verify(&pod.facts(), self.shared.keys.current().as_deref())?;
        Ok((
            capped(trusted.plan, self.shared.engine.max_exec_timeout_ms),
            trusted.status,
        ))
    }

    /// Built per request rather than kept: a waiting worker holds as little as it can.
    fn api(&self) -> Api<SlimPod> {
        Api::namespaced(self.shared.client.clone(), &self.namespace)
    }

    /// After an API error: 200 ms doubling to 10 s, jittered (§6.19).
    fn api_backoff(&mut self) -> &mut ApiBackoff {
        self.backoff.get_or_insert_with(Box::default)
    }

    fn pod_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Writes `status`, signed for this pod, on top of `pod`'s resourceVersion (and the exec
    /// label, when given): every status write of the worker.
    async fn write_signed(
        &self,
        keys: &PlanKeys,
        pod: &PodState,
        status: &ExecStatus,
        label: Option<&str>,
    ) -> Result<SlimPod, WriteError> {
        write_status(
            &self.api(),
            &self.name,
            &self.uid,
            &pod.resource_version,
            status,
            keys,
            label,
        )
        .await
    }

    fn observe(&mut self, observed: Observed) {
        match observed {
            // The watch lags behind this worker's own writes: an event from before our last
            // write (e.g. a kubelet update) would bring back a status without our latest
            // `Running` record or result, so an older view never replaces a newer one.
            Observed::Pod(pod) if pod.uid == self.uid => {
                if !is_older(&pod, &self.pod) {
                    self.pod = pod;
                    self.fresh = false;
                }
            }
            _ => self.maybe_gone = true,
        }
    }

    /// Returns the pod's key and uid, for the watch loop to forget the worker.
    async fn run(&mut self) -> (Key, String) {
        self.steps().await;
        // Whatever ended it, what it posted about its pod's OnePod hooks no longer stands.
        self.shared.restores.leave(&self.uid);
        let take = std::mem::take;
        (
            (take(&mut self.namespace), take(&mut self.name)),
            take(&mut self.uid),
        )
    }

    async fn steps(&mut self) {
        let mut stopping = false;
        loop {
            // The watch's news, if any came since the last look (it wakes the worker).
            if let Some(observed) = self.mailbox.take() {
                self.observe(observed);
            }
            // The watch let go of this pod, or the leadership ended while the last step ran (an
            // API call can outlast it): finish what runs, start nothing, and leave the pod's
            // status to the next leader. This leadership's record may hold starts whose write
            // never landed; applied to the pod, they would make hooks that never ran look
            // started, and end them interrupted (docs/behaviour.md §6.10, §9.5).
            if self.mailbox.is_closed() || self.term.is_cancelled() {
                stopping = true;
            }
            let idle = |w: &Self| w.running.is_empty() && w.results.is_empty();
            // Boxed: a worker spends nearly all its life in the select below, and the future of
            // one step (API requests, an exec start) is several KiB; unboxed it would be part of
            // every waiting worker's task (10,000 pending pods: tens of MiB for nothing).
            match Box::pin(self.act(stopping)).await {
                Flow::Again => continue,
                Flow::Stop if idle(self) => return,
                // Done with the pod once its running execs are recorded; nothing new starts.
                Flow::Stop => stopping = true,
                Flow::Wait if stopping && idle(self) => return,
                Flow::Wait => {}
            }
            let wake = self.wake_at.map(|t| {
                let left = t.duration_since(Timestamp::now());
                // Re-decide just after the deadline, not just before it.
                Duration::try_from(left).unwrap_or_default() + Duration::from_millis(10)
            });
            tokio::select! {
                Some(done) = self.execs.join_next(), if !self.execs.is_empty() => {
                    match done {
                        Ok(f) => self.exec_ended(f),
                        Err(e) => error!(pod = %self.pod_ref(), error = %e, "an exec task failed"),
                    }
                }
                (i, permit) = next_slot(&mut self.slot_waits), if !self.slot_waits.is_empty() => {
                    if stopping {
                        drop(permit);
                    } else {
                        self.granted.push((i, permit));
                    }
                }
                _ = tokio::time::sleep(wake.unwrap_or_default()), if wake.is_some() => {}
                // News from the watch, or a change of what the pod's hooks wait on elsewhere.
                _ = self.wake.notified() => {}
                _ = self.term.cancelled(), if !stopping => stopping = true,
            }
        }
    }

    /// One step: confirm, record, verify, next_step, write, start.
    async fn act(&mut self, stopping: bool) -> Flow {
        if self.maybe_gone {
            return self.confirm().await;
        }
        if !self.results.is_empty() {
            return self.record().await;
        }
        let pod = self.pod.clone();
        if self.shared.keys.current().is_none() {
            // The controller starts workers only once the key is loaded; a Secret gone bad later
            // keeps the keys loaded before. Look again shortly rather than reject the pod.
            self.wake_at = Some(Timestamp::now() + SignedDuration::from_secs(1));
            return Flow::Wait;
        }
        if stopping {
            // Release unused slots; only recording remains.
            self.granted.clear();
            return Flow::Wait;
        }
        if pod.label(EXEC_LABEL) != Some(EXEC_PENDING) && pod.view.presence == Presence::Present {
            // Finished (by us, from a stale event, or by another replica): nothing to do. Or
            // relabelled by hand with hooks still to run: they do not start (§5.5).
            let unended = self
                .verified(&pod)
                .ok()
                .map(|(plan, status)| align(&plan, status.as_ref()))
                .is_some_and(|s| {
                    s.message.is_empty() && s.hooks.iter().any(|h| !h.phase.is_terminal())
                });
            if unended {
                warn!(pod = %self.pod_ref(), label = pod.label(EXEC_LABEL).unwrap_or_default(),
                      "the pod's restore-hooks.dev/exec label is not pending any more: its hooks that have not started do not run (set it back to pending to run them)");
            }
            return if self.running.is_empty() {
                Flow::Stop
            } else {
                Flow::Wait
            };
        }
        let (plan, status) = match self.verified(&pod) {
            Ok(trusted) => trusted,
            Err(rejection) if self.running.is_empty() => return self.reject(&pod, rejection).await,
            Err(rejection) => {
                // Our own execs run on a plan we verified; their results are recorded on top of
                // the last status we trusted (see `record`). Nothing new starts.
                warn!(pod = %self.pod_ref(), reason = %rejection, "the pod's plan or status no longer verifies; no new hook starts");
                return Flow::Wait;
            }
        };
        // The plan must be held for this very pod (the first pod that carried it), and what the
        // record says started wins over the pod's status (docs/behaviour.md §9.3, §9.5).
        if let Err(rejection) =
            self.shared
                .ledger
                .claim(&plan.restore, &self.namespace, &self.uid, &plan.id)
        {
            if self.running.is_empty() {
                return self.reject(&pod, rejection).await;
            }
            warn!(pod = %self.pod_ref(), reason = %rejection, "the pod's plan is not held for it any more; no new hook starts");
            return Flow::Wait;
        }
        let noticed = *self.noticed.get_or_insert_with(Timestamp::now);
        let record = self.shared.ledger.entry(&self.uid);
        let reconciled = reconcile(&plan, status.as_ref(), record.as_ref(), noticed);
        for &(i, attempt) in &reconciled.released {
            // The pod's signed status says the attempt ended and was released; the record's
            // write of that was lost (its controller stopped): the record learns it now.
            info!(pod = %self.pod_ref(), restore = %plan.restore, hook = %plan.hooks[i].name, index = i, attempt,
                  "the pod's status shows this attempt released, the record did not yet: recording the release");
            self.shared
                .ledger
                .released(&plan.restore, &self.uid, &plan.id, i, attempt);
        }
        if !reconciled.rolled_back.is_empty() || !reconciled.recovered.is_empty() {
            if !self.fresh {
                // The watch may lag this worker's own writes: read the pod before calling its
                // status rolled back.
                return self.refresh();
            }
            return self.restore_status(&pod, &plan, reconciled).await;
        }
        self.trusted = Some((plan.clone(), status.clone()));
        let out_of_scope = self.out_of_scope(&pod);
        let one_pod = self.one_pod_turns(&pod, &plan, status.as_ref(), out_of_scope.is_some());
        let after = self.after_turns(&plan, status.as_ref());
        let decision = next_step(
            &plan,
            status.as_ref(),
            &pod.view,
            &Context {
                now: Timestamp::now(),
                running_here: &self.running,
                awaiting_slot: &self.awaiting_slot(),
                inherited_grace: self.shared.inherited_grace,
                out_of_scope: out_of_scope.as_deref(),
                one_pod: &one_pod,
                after: &after,
            },
        );
        self.slot_waits
            .retain(|(i, _)| decision.status.hooks[*i].phase == HookPhase::Pending);
        self.wake_at = decision.wake_at;
        let finishing = decision.finished;
        if decision.write || finishing.is_some() {
            return self.write(&pod, &plan, decision, finishing).await;
        }
        // A granted slot starts its hook if the hook may still start (the pod changed while the
        // worker waited for the slot); otherwise the slot goes back.
        while let Some((i, permit)) = self.granted.pop() {
            if decision.start.contains(&i) && !self.running.contains(&i) {
                return self.start(&pod, &plan, decision.status, i, permit).await;
            }
        }
        let turn = self.turn(&decision.status);
        for &i in &decision.start {
            if !self.slot_waits.iter().any(|(w, _)| *w == i) && !self.running.contains(&i) {
                let wait = self.shared.slots.acquire(&self.namespace, turn);
                self.slot_waits.push((i, wait));
            }
        }
        Flow::Wait
    }

    /// The pod's status lost hooks the record says started (rolled back or removed), or lacks a
    /// result only the record has: writes the record's view back, so the pod tells the truth and
    /// nothing starts twice (docs/behaviour.md §9.5).
    async fn restore_status(
        &mut self,
        pod: &Arc<PodState>,
        plan: &ExecPlan,
        reconciled: restore_hooks_core::ledger::Reconciled,
    ) -> Flow {
        let Some(keys) = self.shared.keys.current() else {
            return Flow::Wait;
        };
        let written = self
            .write_signed(&keys, pod, &reconciled.status, None)
            .await;
        match written {
            Ok(updated) => {
                self.backoff = None;
                self.pod = PodState::from_slim(updated);
                let names = |which: &[usize]| {
                    which
                        .iter()
                        .map(|&i| format!("{} (#{i})", plan.hooks[i].name))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                if !reconciled.recovered.is_empty() {
                    info!(pod = %self.pod_ref(), restore = %plan.restore, hooks = %names(&reconciled.recovered),
                          "results taken from the controller's record (the controller that ran them stopped before writing them on the pod)");
                }
                if !reconciled.rolled_back.is_empty() {
                    self.shared.metrics.status_rollbacks.inc();
                    let message = format!(
                        "the pod's restore-hooks.dev/status no longer showed hooks that had started: \
                         {}; it was rolled back or removed. The controller's record of RestoreRun {} \
                         wins: they are not run again",
                        names(&reconciled.rolled_back),
                        restore_hooks_core::restore::tally::restore_run_name(&plan.restore)
                    );
                    warn!(pod = %self.pod_ref(), restore = %plan.restore, hooks = %names(&reconciled.rolled_back),
                          "hook status rolled back; restored from the controller's record, nothing re-run");
                    self.shared
                        .events
                        .publish(
                            &Regarding::pod(pod),
                            EventType::Warning,
                            STATUS_ROLLED_BACK,
                            &message,
                        )
                        .await;
                }
                Flow::Again
            }
            Err(e) => self.write_failed(e).await,
        }
    }

    /// A pod whose namespace is excluded, or that is in no restore scope any more: nothing more
    /// runs in it, whatever it carries (docs/behaviour.md §6.2).
    fn out_of_scope(&self, pod: &PodState) -> Option<String> {
        let engine = &self.shared.engine;
        if engine.excluded_namespaces.contains(&pod.namespace) {
            return Some(format!(
                "namespace {} is excluded from restore hooks (--exclude-namespace); not executed",
                pod.namespace
            ));
        }
        let index = self.shared.index.read();
        // A namespace the cache does not show yet (created a moment ago, or its watch is behind)
        // cannot show a restore label that was taken away: admission checked the scope, and
        // the pod keeps it until the namespace is seen without it.
        let namespace_labels = index.namespace_labels(&pod.namespace)?;
        let in_scope = restore_scope(
            &pod.namespace,
            Some(&pod.labels),
            Some(namespace_labels),
            engine,
        )
        .is_some();
        (!in_scope).then(|| {
            format!(
                "the pod is not in a restore scope any more (no {} label, and namespace {} has no {} label); not executed",
                engine.restore_label, pod.namespace, engine.restore_namespace_label
            )
        })
    }

    /// This worker's pod as the API server has it now; `None` when it is gone, or its name now
    /// belongs to another pod (another uid).
    async fn read_own_pod(&self) -> kube::Result<Option<Arc<PodState>>> {
        let pod = self.api().get_opt(&self.name).await?;
        Ok(pod
            .filter(|p| p.metadata.uid.as_deref() == Some(self.uid.as_str()))
            .map(PodState::from_slim))
    }

    /// Reads the pod after the watch lost sight of it.
    async fn confirm(&mut self) -> Flow {
        match self.read_own_pod().await {
            Ok(Some(pod)) => {
                self.maybe_gone = false;
                self.fresh = true;
                self.backoff = None;
                let pending = pod.label(EXEC_LABEL) == Some(EXEC_PENDING);
                let terminating = pod.view.presence == Presence::Terminating;
                self.pod = pod;
                if pending || terminating || !self.running.is_empty() || !self.results.is_empty() {
                    Flow::Again
                } else {
                    debug!(pod = %self.pod_ref(), "pod no longer pending (finished elsewhere)");
                    Flow::Stop
                }
            }
            Ok(_) => {
                self.maybe_gone = false;
                self.gone().await;
                Flow::Stop
            }
            Err(e) => self.api_error("reading the pod", e).await,
        }
    }

    async fn api_error(&mut self, what: &str, e: kube::Error) -> Flow {
        let wait = self.api_backoff().after(Some(&e));
        warn!(pod = %self.pod_ref(), error = %e, retry_in = ?wait, "{what} failed; retrying");
        tokio::time::sleep(wait).await;
        self.maybe_gone = true;
        Flow::Again
    }

    /// A fresh read of the pod (after a conflict or an error).
    fn refresh(&mut self) -> Flow {
        self.maybe_gone = true;
        Flow::Again
    }

    /// Writes the decided status (and the final label when every hook ended).
    async fn write(
        &mut self,
        pod: &Arc<PodState>,
        plan: &ExecPlan,
        decision: ExecStep,
        finishing: Option<&'static str>,
    ) -> Flow {
        let Some(keys) = self.shared.keys.current() else {
            return Flow::Wait;
        };
        let result = self
            .write_signed(&keys, pod, &decision.status, finishing)
            .await;
        match result {
            Ok(updated) => {
                self.backoff = None;
                let updated = PodState::from_slim(updated);
                self.report_ended(&updated, plan, &decision.status, &[], &decision.ended)
                    .await;
                self.pod = updated.clone();
                if let Some(label) = finishing {
                    self.completed(&updated, plan, &decision.status, label)
                        .await;
                    return Flow::Stop;
                }
                Flow::Again
            }
            Err(e) => self.write_failed(e).await,
        }
    }

    /// A write failed: decide what that means.
    async fn write_failed(&mut self, e: WriteError) -> Flow {
        match e {
            WriteError::Conflict => {
                debug!(pod = %self.pod_ref(), "status write conflicted; re-reading the pod");
                self.refresh()
            }
            WriteError::Gone => {
                self.gone().await;
                Flow::Stop
            }
            WriteError::Api(e) => self.api_error("writing the status", e).await,
        }
    }

    /// Records hook `index` Running, then starts its exec holding `permit`.
    async fn start(
        &mut self,
        pod: &Arc<PodState>,
        plan: &ExecPlan,
        mut status: ExecStatus,
        index: usize,
        permit: SlotPermit,
    ) -> Flow {
        let Some(keys) = self.shared.keys.current() else {
            return Flow::Wait;
        };
        let granted = Instant::now();
        let hook = plan.hooks[index].clone();
        // A OnePod hook is taken for this pod before anything is written: of two pods that both
        // saw themselves chosen, one starts it and the other records it ran elsewhere (§6.15).
        let one_pod = (hook.run_on == RunOn::OnePod).then(|| OnePodStart {
            key: one_pod_key(&plan.restore, &self.namespace, &hook),
            pod: self.pod_ref(),
        });
        if let Some(start) = &one_pod
            && let Err(holder) = self
                .shared
                .ledger
                .reserve_one_pod(&start.key, &self.uid, &start.pod)
        {
            debug!(pod = %self.pod_ref(), hook = %hook.name, index, holder = %holder, "runOn: OnePod hook taken by another pod");
            drop(permit);
            return Flow::Again;
        }
        // Which attempt, by the record (docs/behaviour.md §6.17): 1, or the one after the last
        // released attempt. The record's say is final: no start it does not allow.
        let Some(attempt) = self
            .shared
            .ledger
            .entry(&self.uid)
            .map_or(Some(1), |e| e.next_attempt(index))
        else {
            warn!(pod = %self.pod_ref(), hook = %hook.name, index, "the record says this hook started and was not released; not starting it again");
            drop(permit);
            if let Some(start) = &one_pod {
                self.shared.ledger.release_one_pod(&start.key, &self.uid);
            }
            return Flow::Wait;
        };
        let started_at = timestamp(Timestamp::now());
        let before = status.hooks[index].clone();
        status.hooks[index].phase = HookPhase::Running;
        status.hooks[index].started_at = Some(started_at);
        status.hooks[index].retries = attempt - 1;
        status.hooks[index].retry_at = None;
        // A new attempt has no exit code or output yet: the last one's would otherwise stay on
        // an attempt that ends without them (interrupted, §6.10) as if it were this one's.
        status.hooks[index].exit_code = None;
        status.hooks[index].stdout.clear();
        status.hooks[index].stderr.clear();
        // The `Running` record on the pod and the start in the controller's record go out
        // together, and the exec starts only once both are written: the pod's is won against
        // every other change of the pod, the record's is what a rolled-back status or a new
        // leader cannot undo (docs/behaviour.md §6.9, §9.5). Together, the slot waits for one
        // round trip to the API server before its exec, not two.
        let (written, recorded) = tokio::join!(
            self.write_signed(&keys, pod, &status, None),
            self.shared.ledger.started(
                &plan.restore,
                &self.uid,
                &plan.id,
                index,
                attempt,
                one_pod.clone(),
            ),
        );
        let written = match written {
            Err(e) if recorded.is_ok() => self.rewrite_running(&keys, pod, &status, e).await,
            written => written,
        };
        let updated = match written {
            Ok(p) => PodState::from_slim(p),
            Err(e) => {
                drop(permit);
                match &one_pod {
                    // Recorded: the hook started here as far as the record goes (and so the
                    // other pods learn); it is not started again, and ends `interrupted`.
                    Some(start) if recorded.is_ok() => {
                        self.shared.restores.one_pod_started(&start.key, &self.uid);
                    }
                    Some(start) => self.shared.ledger.release_one_pod(&start.key, &self.uid),
                    None => {}
                }
                if recorded.is_ok() && !matches!(e, WriteError::Gone) {
                    // The record holds a start whose exec never began: released, with the
                    // pod's signed status saying so (written even if this replica stops
                    // leading), it starts again here or under the next leader instead of ending
                    // interrupted (docs/behaviour.md §6.9, §9.5).
                    let unavailable = before.unavailable + 1;
                    let wait = retry_after(
                        hook.retry.as_ref(),
                        Failure::Unavailable,
                        attempt,
                        unavailable,
                    )
                    .unwrap_or(restore_hooks_core::retry::DEFAULT_BACKOFF_MS);
                    let mut base = status.clone();
                    base.hooks[index] = before.clone();
                    self.trusted = Some((plan.clone(), Some(base)));
                    let why = Released {
                        failure: Failure::Unavailable,
                        message: format!("its Running record could not be written on the pod: {e}"),
                        exit_code: None,
                        stdout: String::new(),
                        stderr: String::new(),
                        elapsed: Duration::ZERO,
                    };
                    let retries = before.retries;
                    self.release(plan, index, before, Answers::Unstarted(retries), why, wait);
                    return Flow::Again;
                }
                return self.write_failed(e).await;
            }
        };
        self.backoff = None;
        self.pod = updated;
        self.trusted = Some((plan.clone(), Some(status.clone())));
        self.running.insert(index);
        self.started.insert(index, status.hooks[index].clone());
        if let Some(start) = &one_pod {
            // Recorded or not, it never starts elsewhere now: the others learn so.
            self.shared.restores.one_pod_started(&start.key, &self.uid);
        }
        if let Err(e) = recorded {
            drop(permit);
            if self.term.is_cancelled() {
                // Leadership ended (or shutdown began) before the start was recorded: the exec
                // never starts here, and the hook is not this leader's to fail. It goes back to
                // Pending for the next leader (docs/behaviour.md §6.10).
                return self.unstart(&keys, index, before, e).await;
            }
            let outcome = ExecOutcome::failed(format!("not executed: {e}"));
            self.execs.spawn(async move {
                Finished {
                    index,
                    outcome,
                    elapsed: Duration::ZERO,
                    recorded: false,
                }
            });
            return Flow::Again;
        }
        self.shared
            .metrics
            .exec_start_delay
            .observe(granted.elapsed().as_secs_f64());
        let timeout_ms = hook
            .exec_timeout_ms
            .min(self.shared.engine.max_exec_timeout_ms);
        info!(
            pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index,
            source = %hook.source, container = %hook.container, command = ?hook.command,
            timeout = %format_go_duration(timeout_ms), attempt, "hook started"
        );
        let exec = self.shared.exec.clone();
        let (namespace, name) = (self.namespace.clone(), self.name.clone());
        // Each attempt in a container of its own: an ephemeral container never runs twice.
        let ephemeral_name = format!("restore-hooks-{index}-{attempt}");
        self.execs.spawn(async move {
            let clock = Instant::now();
            let outcome = exec
                .exec(ExecRequest {
                    namespace: &namespace,
                    pod: &name,
                    container: &hook.container,
                    command: &hook.command,
                    timeout: Duration::from_millis(timeout_ms),
                    ephemeral: hook.ephemeral.as_ref().map(|plan| Ephemeral {
                        name: &ephemeral_name,
                        plan,
                    }),
                })
                .await;
            drop(permit);
            Finished {
                index,
                outcome,
                elapsed: clock.elapsed(),
                recorded: true,
            }
        });
        Flow::Again
    }

    /// The start is in the controller's record, but the `Running` record written with it did not
    /// land on the pod (`first`): writes it again on the pod as it is now, as long as the pod
    /// still carries the plan and status the start was decided on (a conflict with the
    /// kubelet's status updates; an API error that may pass) and this replica still leads.
    /// Otherwise the exec never starts: the record holds the start, so the hook is not started
    /// again and ends `interrupted` (docs/behaviour.md §6.9).
    async fn rewrite_running(
        &mut self,
        keys: &PlanKeys,
        pod: &Arc<PodState>,
        status: &ExecStatus,
        first: WriteError,
    ) -> Result<SlimPod, WriteError> {
        let mut pod = pod.clone();
        let mut error = first;
        let mut conflicts = 0;
        // The pod must be read again before the next write (after a conflict, or a failed read).
        let mut stale = false;
        let since = Instant::now();
        loop {
            if self.term.is_cancelled() {
                return Err(error);
            }
            match &error {
                WriteError::Conflict if conflicts < REWRITE_CONFLICTS => {
                    conflicts += 1;
                    stale = true;
                }
                WriteError::Api(e) if is_transient(e) && since.elapsed() < REWRITE_BUSY_FOR => {
                    let wait = self.api_backoff().after(Some(e));
                    // The replica may stop leading meanwhile: it lets go without waiting.
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.term.cancelled() => continue,
                    }
                }
                _ => return Err(error),
            }
            if stale {
                match self.read_own_pod().await {
                    Ok(Some(fresh)) if fresh.plan == pod.plan && fresh.status == pod.status => {
                        pod = fresh;
                        stale = false;
                    }
                    Ok(Some(_)) => return Err(WriteError::Conflict),
                    Ok(None) => return Err(WriteError::Gone),
                    Err(e) => {
                        error = WriteError::Api(e);
                        continue;
                    }
                }
            }
            match self.write_signed(keys, &pod, status, None).await {
                Ok(updated) => return Ok(updated),
                Err(e) => error = e,
            }
        }
    }

    /// Takes back the `Running` record of hook `index`, whose exec did not start because this
    /// leader stopped leading before the record of its start was written. A pod changed by
    /// others meanwhile (the kubelet's status updates) is read again, and written as long as it
    /// still carries this leader's `Running` record; once it carries another status, that status
    /// stands (the next leader ends the hook interrupted).
    async fn unstart(
        &mut self,
        keys: &PlanKeys,
        index: usize,
        not_started: HookStatus,
        why: super::ledger::NotRecorded,
    ) -> Flow {
        self.running.remove(&index);
        let Some(hook) = self.started.remove(&index) else {
            return Flow::Stop;
        };
        let mut pod = self.pod.clone();
        let Some((plan, Some(mut status))) = self.trusted.clone() else {
            return Flow::Stop;
        };
        // What this leader wrote: the annotation the pod must still carry.
        let ours = pod.status.clone();
        status.hooks[index] = not_started;
        let mut attempts = 0;
        let error = loop {
            attempts += 1;
            match self.write_signed(keys, &pod, &status, None).await {
                Ok(updated) => {
                    info!(pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index, reason = %why,
                          "hook not started: no longer leading before its start was recorded; it is Pending for the next leader");
                    self.pod = PodState::from_slim(updated);
                    self.trusted = Some((plan, Some(status)));
                    return Flow::Stop;
                }
                Err(WriteError::Conflict) if attempts < UNSTART_ATTEMPTS => {}
                Err(e) => break e.to_string(),
            }
            match self.read_own_pod().await {
                Ok(Some(fresh)) => {
                    if fresh.status != ours {
                        break "the pod's status changed since this leader wrote it".to_string();
                    }
                    pod = fresh;
                }
                Ok(_) => break WriteError::Gone.to_string(),
                Err(e) => break e.to_string(),
            }
        };
        warn!(pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index, error = %error,
              "hook not started, and its Running record could not be taken back: the next leader ends it interrupted");
        Flow::Stop
    }

    /// Releases attempt `result.retries + 1` of hook `index` (it ended in a way that may be
    /// tried again, or never reached the container): the record learns it with its next write,
    /// and the pod's signed status, `Pending` with one more `retries`, says it too, so that a
    /// new leader that finds the record's write lost still knows (docs/behaviour.md §9.5).
    fn release(
        &mut self,
        plan: &ExecPlan,
        index: usize,
        mut result: HookStatus,
        answers: Answers,
        why: Released,
        wait_ms: u64,
    ) {
        let hook = &plan.hooks[index];
        let attempt = result.retries + 1;
        self.shared
            .ledger
            .released(&plan.restore, &self.uid, &plan.id, index, attempt);
        self.shared
            .metrics
            .exec_retries
            .with_label_values(&[why.failure.reason()])
            .inc();
        // Rounded up to whole seconds: the status says seconds, and never earlier. (A plan is
        // trusted input, but a backoff past the calendar must not panic.)
        let wait = i64::try_from(wait_ms.saturating_add(999)).unwrap_or(i64::MAX);
        let at = Timestamp::now()
            .checked_add(SignedDuration::from_millis(wait))
            .unwrap_or(Timestamp::MAX);
        let at = timestamp(at);
        result.phase = HookPhase::Pending;
        result.started_at = None;
        result.finished_at = None;
        result.exit_code = why.exit_code;
        result.retries = attempt;
        let unavailable = why.failure == Failure::Unavailable;
        result.unavailable += u32::from(unavailable);
        result.message = if unavailable {
            format!(
                "attempt {attempt} could not start, the API server was unavailable \
                 (unavailable): {}; the command did not run, the next attempt starts at {at}",
                why.message
            )
        } else {
            let attempts = hook.retry.as_ref().map_or(1, |r| r.attempts);
            let ran = attempt - result.unavailable;
            format!(
                "attempt {ran} of {attempts} failed ({}): {}; the next starts at {at}",
                why.failure.reason(),
                why.message
            )
        };
        result.retry_at = Some(at);
        result.stdout = why.stdout;
        result.stderr = why.stderr;
        warn!(
            pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index,
            source = %hook.source, container = %hook.container, attempt,
            reason = why.failure.reason(), exit_code = why.exit_code,
            duration_ms = why.elapsed.as_millis() as u64, retry_at = %result.retry_at.as_deref().unwrap_or_default(),
            result_message = %why.message, stderr = %result.stderr,
            "hook attempt failed; retrying"
        );
        self.results.push((index, answers, result));
    }

    /// An exec ended: queue its result for the next write.
    fn exec_ended(&mut self, f: Finished) {
        let Some((plan, status)) = self.trusted.as_ref() else {
            return;
        };
        let hook = &plan.hooks[f.index];
        self.shared
            .metrics
            .exec_duration
            .observe(f.elapsed.as_secs_f64());
        let mut result = match self.started.remove(&f.index) {
            Some(running) => running,
            None => align(plan, status.as_ref()).hooks[f.index].clone(),
        };
        let outcome = f.outcome;
        let running_since = result.started_at.clone();
        let attempt = result.retries + 1;
        // A failure that may be tried again: always when the API server was unavailable for it,
        // else as its `retry` allows (only once the start was recorded: the release is recorded
        // against it).
        let retry = outcome
            .failure()
            .filter(|_| f.recorded)
            .and_then(|failure| {
                let unavailable = result.unavailable + u32::from(failure == Failure::Unavailable);
                retry_after(hook.retry.as_ref(), failure, attempt, unavailable)
                    .map(|ms| (failure, ms))
            });
        if let Some((failure, wait_ms)) = retry {
            let why = Released {
                failure,
                message: outcome.message(),
                exit_code: outcome.exit_code,
                stdout: outcome.stdout_tail,
                stderr: outcome.stderr_tail,
                elapsed: f.elapsed,
            };
            let plan = plan.clone();
            self.release(
                &plan,
                f.index,
                result,
                Answers::Running(running_since),
                why,
                wait_ms,
            );
            return;
        }
        if f.recorded {
            self.shared.ledger.ended(
                &plan.restore,
                &self.uid,
                &plan.id,
                f.index,
                outcome.succeeded(),
            );
        }
        result.phase = if outcome.succeeded() {
            HookPhase::Succeeded
        } else {
            HookPhase::Failed
        };
        result.finished_at = Some(timestamp(Timestamp::now()));
        result.exit_code = outcome.exit_code;
        result.message = outcome.message();
        if result.retries > 0 && !result.message.is_empty() {
            let n = result.retries;
            result
                .message
                .push_str(&format!(" (attempt {}, after {n} that failed)", n + 1));
        }
        result.stdout = outcome.stdout_tail.clone();
        result.stderr = outcome.stderr_tail.clone();
        // A failed hook is what an operator greps for at 3 a.m.: WARN, not INFO.
        macro_rules! finished {
            ($level:ident) => {
                tracing::$level!(
                    pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index = f.index,
                    source = %hook.source, container = %hook.container,
                    result = if outcome.succeeded() { "succeeded" } else { "failed" },
                    exit_code = outcome.exit_code, duration_ms = f.elapsed.as_millis() as u64,
                    result_message = %result.message, stdout = %outcome.stdout_tail, stderr = %outcome.stderr_tail,
                    "hook finished"
                )
            };
        }
        if outcome.succeeded() {
            finished!(info);
        } else {
            finished!(warn);
        }
        self.results
            .push((f.index, Answers::Running(running_since), result));
    }

    /// Writes every queued result on top of the latest status. Retried through conflicts (the
    /// kubelet updates pod status all the time) and API errors, and not cancelled by shutdown: the
    /// result of an exec that ran must be kept. A result whose `Running` record was replaced while
    /// it ran (a new leader after we lost the Lease already reported it interrupted) is only
    /// logged.
    async fn record(&mut self) -> Flow {
        let pod = self.pod.clone();
        let Some((plan, last_trusted)) = self.trusted.clone() else {
            return Flow::Wait;
        };
        let Some(keys) = self.shared.keys.current() else {
            return Flow::Wait;
        };
        let base = match verify(&pod.facts(), Some(&keys)) {
            Ok(t) => t.status,
            Err(_) => last_trusted,
        };
        let mut status = align(&plan, base.as_ref());
        let mut recorded = Vec::new();
        for (i, answers, result) in &self.results {
            let ours = match answers {
                Answers::Running(since) => {
                    status.hooks[*i].phase == HookPhase::Running
                        && status.hooks[*i].started_at == *since
                }
                Answers::Unstarted(retries) => {
                    status.hooks[*i].phase == HookPhase::Pending
                        && status.hooks[*i].retries == *retries
                }
            };
            if ours {
                status.hooks[*i] = result.clone();
                recorded.push(*i);
            } else {
                warn!(pod = %self.pod_ref(), hook = %result.name, index = i, "the hook's Running record was replaced while it ran; its result is only logged");
            }
        }
        let mut still_running = self.running.clone();
        for (i, ..) in &self.results {
            still_running.remove(i);
        }
        // Settle what follows from the results (onError: Fail skips the rest) in the same write.
        let decision = next_step(
            &plan,
            Some(&status),
            &pod.view,
            &Context {
                now: Timestamp::now(),
                running_here: &still_running,
                awaiting_slot: &self.awaiting_slot(),
                inherited_grace: self.shared.inherited_grace,
                out_of_scope: None,
                one_pod: &self.unposted_turns(&plan, &status, true),
                after: &self.after_turns(&plan, Some(&status)),
            },
        );
        let finishing = decision.finished;
        let written = self
            .write_signed(&keys, &pod, &decision.status, finishing)
            .await;
        match written {
            Ok(updated) => {
                self.backoff = None;
                let done: Vec<usize> = self.results.drain(..).map(|(i, ..)| i).collect();
                for i in &done {
                    self.running.remove(i);
                }
                let updated = PodState::from_slim(updated);
                self.report_ended(
                    &updated,
                    &plan,
                    &decision.status,
                    &recorded,
                    &decision.ended,
                )
                .await;
                self.trusted = Some((plan.clone(), Some(decision.status.clone())));
                self.pod = updated.clone();
                if let Some(label) = finishing {
                    self.completed(&updated, &plan, &decision.status, label)
                        .await;
                    return Flow::Stop;
                }
                Flow::Again
            }
            Err(WriteError::Conflict) => self.refresh(),
            Err(WriteError::Gone) => {
                self.gone().await;
                Flow::Stop
            }
            Err(WriteError::Api(e)) => {
                let wait = self.api_backoff().after(Some(&e));
                warn!(pod = %self.pod_ref(), error = %e, retry_in = ?wait, "recording hook results failed; retrying");
                tokio::time::sleep(wait).await;
                self.refresh()
            }
        }
    }

    /// The pod is gone: every hook that did not end fails (Event, log, metric, counts); nothing
    /// can be written on the pod any more.
    async fn gone(&mut self) {
        let pod = self.pod.clone();
        let (plan, status) = match self.trusted.clone() {
            Some(trusted) => trusted,
            // Gone before this worker trusted anything (the watch said so before its first
            // look, or its first look was a read): the counts hold the pod by the plan it
            // carries, so its end is reported by that plan. One that does not verify counts for
            // nothing (docs/behaviour.md §8.3).
            None => match self.verified(&pod) {
                Ok(trusted) => trusted,
                Err(_) => return,
            },
        };
        let mut status = align(&plan, status.as_ref());
        // Exec results that could not be written any more are reported like the rest.
        let mut reported = Vec::new();
        for (i, _, result) in self.results.drain(..) {
            status.hooks[i] = result;
            reported.push(i);
        }
        self.running.clear();
        let mut view = pod.view.clone();
        view.presence = Presence::Gone;
        let decision = next_step(
            &plan,
            Some(&status),
            &view,
            &Context {
                now: Timestamp::now(),
                running_here: &BTreeSet::new(),
                awaiting_slot: &BTreeSet::new(),
                inherited_grace: self.shared.inherited_grace,
                out_of_scope: None,
                one_pod: &self.unposted_turns(&plan, &status, false),
                after: &self.after_turns(&plan, Some(&status)),
            },
        );
        warn!(pod = %self.pod_ref(), restore = %plan.restore, not_run = decision.ended.len(), "pod deleted before all hooks ran");
        self.report_ended(&pod, &plan, &decision.status, &reported, &decision.ended)
            .await;
        if !reported.is_empty() || !decision.ended.is_empty() {
            // A pod that only passed OnePod hooks on did not fail them.
            let label = decision.finished.unwrap_or(EXEC_FAILED);
            self.completed(&pod, &plan, &decision.status, label).await;
        }
        self.shared
            .restores
            .last_word(&self.uid, &self.namespace, &plan, &decision.status);
    }

    /// Nothing of this pod runs: a Warning Event, the `failed` label, a status naming why.
    async fn reject(&mut self, pod: &Arc<PodState>, rejection: Rejection) -> Flow {
        self.reject_with(pod, rejection.metric_reason(), rejection.to_string())
            .await
    }

    async fn reject_with(&mut self, pod: &Arc<PodState>, reason: &str, message: String) -> Flow {
        // Not `message`: that is the log line's own text in JSON logs (one key per line).
        error!(pod = %self.pod_ref(), reason, result_message = %message, "not running this pod's hooks");
        let written = match self.shared.keys.current() {
            // A signed status that says why, so the rejection itself cannot be forged away.
            Some(keys) => self
                .write_signed(
                    &keys,
                    pod,
                    &ExecStatus {
                        hooks: Vec::new(),
                        message: message.clone(),
                    },
                    Some(EXEC_FAILED),
                )
                .await
                .map(|_| ()),
            None => set_exec_label(&self.api(), &self.name, &pod.resource_version, EXEC_FAILED)
                .await
                .map(|_| ()),
        };
        match written {
            Ok(()) | Err(WriteError::Gone) => {
                // Counted once the refusal is on the pod: a worker started by a stale watch event
                // loses the write (conflict) and counts nothing.
                self.shared
                    .metrics
                    .plans_rejected
                    .with_label_values(&[reason])
                    .inc();
                self.shared
                    .events
                    .publish(
                        &Regarding::pod(pod),
                        EventType::Warning,
                        PLAN_REJECTED,
                        &message,
                    )
                    .await;
                Flow::Stop
            }
            Err(e) => self.write_failed(e).await,
        }
    }

    /// Posts the pod's standing for each of its `runOn: OnePod` hooks and returns each one's turn
    /// (docs/behaviour.md §6.15). The pod can run a hook while it is present, not terminal and in
    /// a restore scope; whether it is a candidate at all (vouched for, the hook pending) is the
    /// restore model's to say.
    fn one_pod_turns(
        &self,
        pod: &PodState,
        plan: &ExecPlan,
        status: Option<&ExecStatus>,
        out_of_scope: bool,
    ) -> BTreeMap<usize, OnePodTurn> {
        if plan.hooks.iter().all(|h| h.run_on != RunOn::OnePod) {
            return BTreeMap::new();
        }
        let status = align(plan, status);
        let able = pod.view.presence == Presence::Present
            && !matches!(pod.view.phase.as_deref(), Some("Succeeded" | "Failed"))
            && !out_of_scope;
        for (i, hook) in plan.hooks.iter().enumerate() {
            if hook.run_on == RunOn::OnePod && status.hooks[i].phase == HookPhase::Pending {
                let key = one_pod_key(&plan.restore, &self.namespace, hook);
                let up = hook_is_up(plan, &pod.view, i);
                self.shared
                    .restores
                    .post_standing(&self.uid, &key, Standing { up, able });
            }
        }
        self.one_pod_turns_now(plan, &status, able)
    }

    /// The turn of each pending `runOn: OnePod` hook of the pod, as the record and the restore
    /// model say now. A pod decides no turn before the model listed the restore's pods and knows
    /// this pod itself: the watch shows pods in the order they were created, so every pod
    /// created before it is known then (one created later cannot take the hook from it).
    fn one_pod_turns_now(
        &self,
        plan: &ExecPlan,
        status: &ExecStatus,
        able: bool,
    ) -> BTreeMap<usize, OnePodTurn> {
        let mut turns = BTreeMap::new();
        for (i, hook) in plan.hooks.iter().enumerate() {
            if hook.run_on != RunOn::OnePod || status.hooks[i].phase != HookPhase::Pending {
                continue;
            }
            let key = one_pod_key(&plan.restore, &self.namespace, hook);
            let holder = self.shared.ledger.one_pod_holder(&key);
            let holder = holder.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
            let (candidates, settled) = self.shared.restores.read(|index| {
                (
                    index.one_pod_candidates(&key),
                    index.is_listed() && index.knows(&self.uid),
                )
            });
            let mut turn = turn(&self.uid, holder, &candidates, able);
            if turn == OnePodTurn::Go && holder.is_none() && !settled {
                turn = OnePodTurn::Wait;
            }
            turns.insert(i, turn);
        }
        turns
    }

    /// The turn of each pending hook with `after` (docs/behaviour.md §6.16), from the runs of the
    /// hooks it waits for across the restore's pods.
    fn after_turns(
        &self,
        plan: &ExecPlan,
        status: Option<&ExecStatus>,
    ) -> BTreeMap<usize, AfterTurn> {
        self.shared
            .restores
            .read(|index| index.after_turns(&self.namespace, plan, status))
    }

    /// The turns of the pod's `runOn: OnePod` hooks without posting its standing: while results
    /// are recorded (`able`: nothing starts then, but a hook another pod started ends here), or
    /// for a pod that is gone (not `able`: a hook another candidate can take is passed on).
    fn unposted_turns(
        &self,
        plan: &ExecPlan,
        status: &ExecStatus,
        able: bool,
    ) -> BTreeMap<usize, OnePodTurn> {
        self.one_pod_turns_now(plan, status, able)
            .into_iter()
            .filter(|(_, t)| *t != OnePodTurn::Go)
            .collect()
    }

    async fn completed(&self, pod: &PodState, plan: &ExecPlan, status: &ExecStatus, label: &str) {
        let count = |p: HookPhase| status.hooks.iter().filter(|h| h.phase == p).count();
        let (ok, failed, skipped, elsewhere) = (
            count(HookPhase::Succeeded),
            count(HookPhase::Failed),
            count(HookPhase::Skipped),
            count(HookPhase::OtherPod),
        );
        let elsewhere = if elsewhere > 0 {
            format!(", {elsewhere} run by another pod (runOn: OnePod)")
        } else {
            String::new()
        };
        let message = format!(
            "restore {}: {} hook(s): {ok} succeeded, {failed} failed, {skipped} skipped{elsewhere}; {EXEC_LABEL}={label}",
            plan.restore,
            plan.hooks.len()
        );
        info!(pod = %self.pod_ref(), restore = %plan.restore, hooks = plan.hooks.len(), succeeded = ok, failed, skipped, result = label, "all hooks ended");
        let kind = if failed + skipped == 0 {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.shared
            .events
            .publish(&Regarding::pod(pod), kind, HOOKS_COMPLETED, &message)
            .await;
    }

    /// Reports hooks that became terminal (after their phase was written, or the pod vanished):
    /// Events, logs, metrics. `ran` are exec results, `not_run` the hooks the state machine ended
    /// without an exec (expired, pod gone, skipped after a failure, interrupted, refused).
    async fn report_ended(
        &self,
        pod: &PodState,
        plan: &ExecPlan,
        status: &ExecStatus,
        ran: &[usize],
        not_run: &[usize],
    ) {
        let ended = ran.iter().map(|&i| (i, true));
        for (i, exec_result) in ended.chain(not_run.iter().map(|&i| (i, false))) {
            let (hook, entry) = (&plan.hooks[i], &status.hooks[i]);
            if entry.phase == HookPhase::Pending && exec_result {
                // An attempt failed and the next is due (§6.17): no outcome yet.
                let msg = failure_event(hook, i, entry, "");
                self.shared
                    .events
                    .publish(
                        &Regarding::pod(pod),
                        EventType::Warning,
                        HOOK_RETRYING,
                        &msg,
                    )
                    .await;
                continue;
            }
            if entry.phase == HookPhase::OtherPod {
                // Not an outcome here: the pod that runs it reports it.
                info!(
                    pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index = i,
                    source = %hook.source, result_message = %entry.message, "runOn: OnePod hook runs in another pod"
                );
                continue;
            }
            let result = match entry.phase {
                HookPhase::Succeeded => "succeeded",
                HookPhase::Skipped => "skipped",
                _ => "failed",
            };
            self.shared
                .metrics
                .exec_hooks
                .with_label_values(&[result])
                .inc();
            if entry.phase != HookPhase::Succeeded && !exec_result {
                // Exec results were logged when they arrived; these never ran (or their result
                // was lost): each is a hook that did not happen.
                warn!(
                    pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index = i,
                    source = %hook.source, container = %hook.container, result,
                    result_message = %entry.message, "hook not run"
                );
            }
            let about = Regarding::pod(pod);
            match entry.phase {
                HookPhase::Succeeded => {
                    let msg = format!(
                        "hook {} (#{i}, {}) in container {} succeeded; stdout: {}",
                        hook.name,
                        hook.source,
                        hook.container,
                        entry.stdout.trim_end()
                    );
                    self.shared
                        .events
                        .publish(&about, EventType::Normal, HOOK_SUCCEEDED, &msg)
                        .await;
                }
                HookPhase::Failed if hook.refused.is_some() => {
                    let msg = format!(
                        "hook {} (#{i}, {}) in container {} {}",
                        hook.name, hook.source, hook.container, entry.message
                    );
                    self.shared
                        .events
                        .publish(&about, EventType::Warning, HOOK_REFUSED, &msg)
                        .await;
                }
                HookPhase::Failed => {
                    let msg = failure_event(hook, i, entry, " failed");
                    self.shared
                        .events
                        .publish(&about, EventType::Warning, HOOK_FAILED, &msg)
                        .await;
                }
                _ => {}
            }
        }
    }
}

/// True when `a` is an older version of the same pod than `b`. resourceVersions are opaque to
/// clients in general; the API server's are etcd revisions (integers), and when either does not
/// parse as one, nothing is taken to be older.
fn is_older(a: &PodState, b: &PodState) -> bool {
    match (
        a.resource_version.parse::<u64>(),
        b.resource_version.parse::<u64>(),
    ) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

/// The message of a `HookFailed` or `HookRetrying` Event: the hook, what happened (`what`:
/// `" failed"`, or empty when the status message says it), and the tail of its stderr.
fn failure_event(
    hook: &restore_hooks_core::hooks::plan::PlannedHook,
    i: usize,
    entry: &HookStatus,
    what: &str,
) -> String {
    let mut msg = format!(
        "hook {} (#{i}, {}) in container {}{what}: {}",
        hook.name, hook.source, hook.container, entry.message
    );
    if !entry.stderr.is_empty() {
        msg.push_str(&format!("; stderr: {}", entry.stderr.trim_end()));
    }
    msg
}
