//! The controller's record of what it ran, kept in each RestoreRun's `status.executions`
//! (docs/behaviour.md §9.5; the rules are in `restore_hooks_core::ledger`). This module loads it
//! when a replica starts leading and writes to it.
//!
//! Writes are JSON merge patches of the status subresource: each adds or raises marks of some
//! pods' entries and never removes anything, so two writers never undo each other and no
//! resourceVersion is needed. One write per RestoreRun is in flight at a time; whatever queued
//! meanwhile goes in the next one, so a burst of hooks costs a few writes, not one per hook.
//!
//! Only a hook's start is waited for (an exec starts only once its `R` is durable): a claim goes
//! out with the next write and is in memory at once, so no two pods of this process can hold one
//! plan; results are written when convenient (they restore a rolled-back status faithfully, but
//! the start mark alone keeps a hook from running twice).
//!
//! The record is read once per leadership (one list), not watched: only the leader writes it, and
//! a previous leader stops starting execs before its Lease can pass on (see `lease`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use restore_hooks_core::hooks::types::{RestoreRun, RestoreRunSpec};
use restore_hooks_core::ledger::{Attempts, Claim, Execution, Mark, OnePodStart, claim};
use restore_hooks_core::tally::restore_run_name;
use restore_hooks_core::trust::Rejection;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::backoff::{ApiBackoff, is_transient};

/// How long claims and results wait for company before they are written on their own.
const LAZY: Duration = Duration::from_millis(250);
/// Refusals of one write before its waiters are told it failed (backoff 200 ms doubling,
/// jittered).
const ATTEMPTS: u32 = 5;
/// How long one write keeps trying while the API server throttles it or is unavailable
/// (docs/behaviour.md §6.19): the hooks waiting for it start late rather than fail.
const BUSY_FOR: Duration = Duration::from_secs(120);
/// Why a write ended without an answer: the leadership ended.
const STOPPING: &str = "the controller is stopping";
/// How long a write already sent may still take once the leadership ended: a healthy API server
/// answers well within it, so a start that was as good as recorded still runs.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Why a start could not be recorded: the exec does not start.
#[derive(Clone, Debug, thiserror::Error)]
#[error("its start could not be recorded in RestoreRun {run} ({error})")]
pub struct NotRecorded {
    /// The RestoreRun the start was to be recorded in.
    pub run: String,
    /// Why the last attempt failed (or that the controller is stopping).
    pub error: String,
}

/// The record as this leader knows it, and the way to write it.
#[derive(Clone)]
pub struct Ledger {
    state: Arc<Mutex<State>>,
    tx: mpsc::UnboundedSender<Write>,
    loaded: watch::Receiver<bool>,
}

#[derive(Default)]
struct State {
    /// Entries by pod uid, with the RestoreRun each is in.
    pods: HashMap<String, (String, Execution)>,
    /// Plan id -> the pod uid that holds it.
    plans: HashMap<String, String>,
    /// Pods recorded per RestoreRun (its size bound).
    per_run: HashMap<String, usize>,
    /// `runOn: OnePod` hooks: key -> the uid and `namespace/name` of the pod that runs it (its
    /// start recorded, or about to be: see [`Ledger::reserve_one_pod`]).
    one_pod: HashMap<String, (String, String)>,
}

impl State {
    fn absorb(&mut self, run: &str, uid: &str, entry: &Execution) {
        let known = self.pods.contains_key(uid);
        let slot = self
            .pods
            .entry(uid.to_string())
            .or_insert_with(|| (run.to_string(), Execution::default()));
        slot.1.merge(entry);
        self.plans
            .entry(slot.1.plan.clone())
            .or_insert_with(|| uid.to_string());
        for start in entry.one_pod.values() {
            self.one_pod
                .entry(start.key.clone())
                .or_insert_with(|| (uid.to_string(), start.pod.clone()));
        }
        if !known {
            *self.per_run.entry(run.to_string()).or_default() += 1;
        }
    }
}

/// Tells the writer of a start how its write went.
type Ack = oneshot::Sender<Result<(), String>>;

/// One change to one pod's entry.
struct Write {
    run: String,
    restore: String,
    uid: String,
    entry: Execution,
    /// `Some`: written now, and the sender learns how it went.
    ack: Option<Ack>,
}

impl Ledger {
    /// Starts loading the record and the writer; both stop with `stop`.
    pub fn spawn(
        client: kube::Client,
        stop: CancellationToken,
    ) -> (Ledger, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (loaded_tx, loaded) = watch::channel(false);
        let ledger = Ledger {
            state: Arc::default(),
            tx,
            loaded,
        };
        let task = tokio::spawn(
            Writer {
                api: Api::all(client),
                state: ledger.state.clone(),
            }
            .run(rx, loaded_tx, stop),
        );
        (ledger, task)
    }

    /// Returns once the record has been read: nothing may run before (a new leader must know
    /// what its predecessors ran).
    pub async fn loaded(&self) {
        let mut loaded = self.loaded.clone();
        let _ = loaded.wait_for(|l| *l).await;
    }

    /// The pod's entry, if it has one.
    pub fn entry(&self, uid: &str) -> Option<Execution> {
        self.lock().pods.get(uid).map(|(_, e)| e.clone())
    }

    /// Holds `plan` for pod `uid` (docs/behaviour.md §9.3), unless another pod carried it first,
    /// the pod's recorded plan is another one, or the restore's record is full. A new claim is
    /// held in memory at once and written with the next write (at the latest with the pod's first
    /// start, which is waited for).
    pub fn claim(&self, restore: &str, uid: &str, plan: &str) -> Result<(), Rejection> {
        let run = restore_run_name(restore);
        let state = self.lock();
        let recorded = state.pods.get(uid).map(|(_, e)| e);
        let holder = state.plans.get(plan).map(String::as_str);
        let pods = state.per_run.get(&run).copied().unwrap_or(0);
        match claim(uid, plan, recorded, holder, &run, pods)? {
            Claim::Held => {}
            // Under the same lock as the check: no two pods of this process take one plan.
            Claim::Free => self.record(state, restore, uid, Execution::claimed(plan), None),
        }
        Ok(())
    }

    /// The pod (uid, `namespace/name`) that runs `runOn: OnePod` hook `key`, if one does.
    pub fn one_pod_holder(&self, key: &str) -> Option<(String, String)> {
        self.lock().one_pod.get(key).cloned()
    }

    /// Takes `runOn: OnePod` hook `key` for pod `uid` before its start is recorded, unless
    /// another pod has it: then that pod's `namespace/name`. Under the record's lock, so two pods
    /// of this process never both start it; [`Ledger::started`] makes it durable, and
    /// [`Ledger::release_one_pod`] gives it back when the start did not happen.
    pub fn reserve_one_pod(&self, key: &str, uid: &str, pod: &str) -> Result<(), String> {
        let mut state = self.lock();
        match state.one_pod.get(key) {
            Some((holder, other)) if holder != uid => Err(other.clone()),
            Some(_) => Ok(()),
            None => {
                state
                    .one_pod
                    .insert(key.to_string(), (uid.to_string(), pod.to_string()));
                Ok(())
            }
        }
    }

    /// Gives back a reservation of pod `uid` whose start was never recorded (its `Running` record
    /// could not be written): another pod may be chosen.
    pub fn release_one_pod(&self, key: &str, uid: &str) {
        let mut state = self.lock();
        let durable = state
            .pods
            .get(uid)
            .is_some_and(|(_, e)| e.one_pod.values().any(|s| s.key == key));
        if !durable && state.one_pod.get(key).is_some_and(|(u, _)| u == uid) {
            state.one_pod.remove(key);
        }
    }

    /// Records that hook `index` of the pod starts (for a `runOn: OnePod` hook, with which one it
    /// is); returns once that is durable.
    pub async fn started(
        &self,
        restore: &str,
        uid: &str,
        plan: &str,
        index: usize,
        attempt: u32,
        one_pod: Option<OnePodStart>,
    ) -> Result<(), NotRecorded> {
        let mut entry = Execution::claimed(plan);
        entry.set(index, Mark::Started);
        if attempt > 1 {
            // Attempt n in flight: the release of attempt n-1 no longer allows a start.
            entry.attempts.insert(
                index.to_string(),
                Attempts {
                    started: attempt,
                    released: attempt - 1,
                },
            );
        }
        if let Some(start) = one_pod {
            entry.one_pod.insert(index.to_string(), start);
        }
        let (ack, done) = oneshot::channel();
        self.record(self.lock(), restore, uid, entry, Some(ack));
        let error = match done.await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => error,
            Err(_) => STOPPING.to_string(),
        };
        Err(NotRecorded {
            run: restore_run_name(restore),
            error,
        })
    }

    /// Attempt `attempt` of a hook with `retry` failed in a way its policy retries (docs/behaviour.md
    /// §6.17): the next attempt may start (written with the next write; if it is lost, the
    /// attempt counts as in flight and the hook ends interrupted, never twice).
    pub fn released(&self, restore: &str, uid: &str, plan: &str, index: usize, attempt: u32) {
        let mut entry = Execution::claimed(plan);
        entry.set(index, Mark::Started);
        entry.attempts.insert(
            index.to_string(),
            Attempts {
                started: attempt,
                released: attempt,
            },
        );
        self.record(self.lock(), restore, uid, entry, None);
    }

    /// Records a started hook's result (written with the next write).
    pub fn ended(&self, restore: &str, uid: &str, plan: &str, index: usize, succeeded: bool) {
        let mut entry = Execution::claimed(plan);
        entry.set(
            index,
            if succeeded {
                Mark::Succeeded
            } else {
                Mark::Failed
            },
        );
        self.record(self.lock(), restore, uid, entry, None);
    }

    /// Takes `entry` into the record in memory (under `state`, the caller's lock) and queues its
    /// write: now, answered on `ack`, or with the next write when `ack` is `None`.
    fn record(
        &self,
        mut state: std::sync::MutexGuard<'_, State>,
        restore: &str,
        uid: &str,
        entry: Execution,
        ack: Option<Ack>,
    ) {
        let run = restore_run_name(restore);
        state.absorb(&run, uid, &entry);
        drop(state);
        // The writer only stops with the leadership, and every worker with it.
        let _ = self.tx.send(Write {
            run,
            restore: restore.to_string(),
            uid: uid.to_string(),
            entry,
            ack,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What waits to be written to one RestoreRun.
#[derive(Default)]
struct Batch {
    restore: String,
    entries: BTreeMap<String, Execution>,
    acks: Vec<Ack>,
    /// When a lazy batch is written at the latest.
    due: Option<tokio::time::Instant>,
}

struct Writer {
    api: Api<RestoreRun>,
    state: Arc<Mutex<State>>,
}

impl Writer {
    async fn run(
        self,
        mut rx: mpsc::UnboundedReceiver<Write>,
        loaded: watch::Sender<bool>,
        stop: CancellationToken,
    ) {
        self.load(&stop).await;
        loaded.send_replace(true);
        let mut pending: HashMap<String, Batch> = HashMap::new();
        let mut in_flight: JoinSet<(String, Result<(), String>, Vec<Ack>)> = JoinSet::new();
        let mut busy: std::collections::HashSet<String> = Default::default();
        loop {
            // Start every batch that may go: urgent ones now, lazy ones when due.
            let now = tokio::time::Instant::now();
            let ready: Vec<String> = pending
                .iter()
                .filter(|(run, b)| {
                    !busy.contains(*run) && (!b.acks.is_empty() || b.due.is_some_and(|d| d <= now))
                })
                .map(|(run, _)| run.clone())
                .collect();
            for run in ready {
                let batch = pending.remove(&run).expect("listed above");
                busy.insert(run.clone());
                let api = self.api.clone();
                let stop = stop.clone();
                in_flight.spawn(async move {
                    let result = write(&api, &run, &batch.restore, &batch.entries, &stop).await;
                    (run, result, batch.acks)
                });
            }
            let next_due = pending
                .iter()
                .filter(|(run, _)| !busy.contains(*run))
                .filter_map(|(_, b)| b.due)
                .min();
            tokio::select! {
                _ = stop.cancelled(), if in_flight.is_empty() => return,
                write = rx.recv() => {
                    let Some(w) = write else { return };
                    let batch = pending.entry(w.run.clone()).or_default();
                    batch.restore = w.restore;
                    batch.entries.entry(w.uid).or_default().merge(&w.entry);
                    match w.ack {
                        Some(ack) => batch.acks.push(ack),
                        None => {
                            batch.due.get_or_insert(tokio::time::Instant::now() + LAZY);
                        }
                    }
                }
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    let Ok((run, result, acks)) = done else { continue };
                    busy.remove(&run);
                    if let Err(e) = &result {
                        warn!(restorerun = %run, error = %e, "could not write the record of started hooks; hooks waiting for it do not start");
                    }
                    for ack in acks {
                        let _ = ack.send(result.clone());
                    }
                }
                _ = sleep_until(next_due), if next_due.is_some() => {}
            }
        }
    }

    /// Reads every RestoreRun's record (retried until it works or the leadership ends).
    async fn load(&self, stop: &CancellationToken) {
        let mut backoff = ApiBackoff::default();
        loop {
            match self.api.list(&ListParams::default()).await {
                Ok(runs) => {
                    let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    let mut pods = 0;
                    for run in &runs {
                        let name = run.name_any();
                        for (uid, entry) in run.status.iter().flat_map(|s| &s.executions) {
                            state.absorb(&name, uid, entry);
                            pods += 1;
                        }
                    }
                    info!(
                        restoreruns = runs.items.len(),
                        pods, "read the record of started hooks"
                    );
                    return;
                }
                Err(e) => {
                    let wait = backoff.after(Some(&e));
                    warn!(error = %e, retry_in = ?wait, "cannot read the RestoreRuns (the record of started hooks); no hook starts until it is read");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One merge patch of the RestoreRun's status (creating the RestoreRun first if it does not
/// exist yet), retried with backoff until it lands, fails for good, or `stop` (the end of the
/// leadership) is cancelled.
///
/// On `stop` no new attempt is made, and a request still unanswered after [`STOP_GRACE`] is
/// abandoned; its waiters are told their start was not recorded: a leader that lost its Lease
/// must not keep retrying while the next one waits for it to let go (docs/behaviour.md §6.10). A
/// request cut off may still have landed; then the record shows a start that never ran, and the
/// next leader ends that hook interrupted rather than running it: never twice.
async fn write(
    api: &Api<RestoreRun>,
    run: &str,
    restore: &str,
    entries: &BTreeMap<String, Execution>,
    stop: &CancellationToken,
) -> Result<(), String> {
    let body = json!({"status": {"executions": entries}});
    let mut backoff = ApiBackoff::default();
    let since = tokio::time::Instant::now();
    let mut refused = 0;
    loop {
        let params = PatchParams::default();
        let patch = Patch::Merge(&body);
        let patched = tokio::select! {
            patched = api.patch_status(run, &params, &patch) => patched,
            _ = async {
                stop.cancelled().await;
                tokio::time::sleep(STOP_GRACE).await;
            } => return Err(STOPPING.to_string()),
        };
        let error = match patched {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                match create_restore_run(api, run, restore).await {
                    Ok(_) => continue,
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        // A busy API server is waited out (the hooks waiting for this write have not started);
        // anything else is tried a few times.
        let busy = is_transient(&error);
        refused += u32::from(!busy);
        if refused >= ATTEMPTS || (busy && since.elapsed() >= BUSY_FOR) {
            return Err(error.to_string());
        }
        tokio::select! {
            _ = stop.cancelled() => return Err(STOPPING.to_string()),
            _ = tokio::time::sleep(backoff.after(Some(&error))) => {}
        }
    }
}

/// Creates the RestoreRun of `restore` (named `run`) unless it exists; returns it.
pub async fn create_restore_run(
    api: &Api<RestoreRun>,
    run: &str,
    restore: &str,
) -> kube::Result<RestoreRun> {
    let object = RestoreRun::new(
        run,
        RestoreRunSpec {
            restore: restore.to_string(),
        },
    );
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => {
            info!(restorerun = %run, restore, "tracking restore");
            Ok(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => api.get(run).await,
        Err(e) => Err(e),
    }
}
