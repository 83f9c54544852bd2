//! The controller's record of what it ran, kept in each restore's `RestoreRecord`s
//! (docs/behaviour.md §9.5; the rules are in `restore_hooks_core::ledger`). This module loads it
//! when a replica starts leading and writes to it.
//!
//! Writes are JSON merge patches of a part's status subresource: each adds or raises marks of
//! some pods' entries and never removes anything, so two writers never undo each other and no
//! resourceVersion is needed. One write per part is in flight at a time; whatever queued
//! meanwhile goes in the next one, so a burst of hooks costs a few writes, not one per hook. A pod
//! joins the newest part of its restore when first recorded (a new part once that one holds
//! `PODS_PER_RECORD`), so the pods whose hooks run together share a part and its writes.
//!
//! Only a hook's start is waited for (an exec starts only once its `R` is durable): a claim goes
//! out with the next write and is in memory at once, so no two pods of this process can hold one
//! plan; results are written when convenient (they restore a rolled-back status faithfully, but
//! the start mark alone keeps a hook from running twice).
//!
//! The record is read once per leadership (one list of the parts, one of the RestoreRuns, where
//! earlier versions kept it), not watched: only the leader writes it, and a previous leader stops
//! starting execs before its Lease can pass on (see `lease`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use restore_hooks_core::hooks::types::{
    RestoreRecord, RestoreRecordSpec, RestoreRun, RestoreRunSpec,
};
use restore_hooks_core::ledger::{
    Attempts, Claim, Execution, Mark, OnePodStart, PODS_PER_RECORD, claim, record_name,
};
use restore_hooks_core::restore::tally::restore_run_name;
use restore_hooks_core::trust::Rejection;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::backoff::{ApiBackoff, is_transient};

/// How long claims and results wait for company (a start's write of the same part) before they
/// are written on their own: nothing waits for them, and each write of its own is a request.
const LAZY: Duration = Duration::from_secs(1);
/// How long the start of a claimed hook waits for company (docs/behaviour.md §6.9): it holds no
/// exec slot while it waits, and a slot frees for it only after several hooks ended, so its
/// write may gather the starts claimed meanwhile instead of being one write per start.
const GATHER: Duration = Duration::from_millis(100);
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
#[error("its start could not be recorded in RestoreRecord {record} ({error})")]
pub struct NotRecorded {
    /// The part of the record the start was to be written to.
    pub record: String,
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

/// Where a pod's entry is written: part `part` of RestoreRun `run`'s record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Place {
    run: String,
    part: u32,
}

impl Place {
    fn name(&self) -> String {
        record_name(&self.run, self.part)
    }
}

#[derive(Default)]
struct State {
    /// Entries by pod uid, with the part each is in.
    pods: HashMap<String, (Place, Execution)>,
    /// Plan id -> the pod uid that holds it.
    plans: HashMap<String, String>,
    /// Pods recorded per RestoreRun and namespace (the size bound, per namespace).
    per_namespace: HashMap<(String, String), usize>,
    /// Per RestoreRun, its newest part and how many pods that part holds.
    newest: HashMap<String, (u32, usize)>,
    /// `runOn: OnePod` hooks: key -> the uid and `namespace/name` of the pod that runs it (its
    /// start recorded, or about to be: see [`Ledger::reserve_one_pod`]).
    one_pod: HashMap<String, (String, String)>,
}

impl State {
    /// Takes in `entry` of pod `uid`, found in part `part` of the record (`None`: in the
    /// RestoreRun, where earlier versions kept it, or new); returns the part the pod's entry is
    /// written to from now on.
    fn absorb(&mut self, run: &str, uid: &str, entry: &Execution, part: Option<u32>) -> Place {
        let place = match self.pods.get(uid) {
            Some((place, _)) => place.clone(),
            None => {
                *self
                    .per_namespace
                    .entry((run.to_string(), entry.namespace.clone()))
                    .or_default() += 1;
                let newest = self.newest.entry(run.to_string()).or_insert((0, 0));
                let part = match part {
                    Some(p) => p,
                    None if newest.1 >= PODS_PER_RECORD => newest.0 + 1,
                    None => newest.0,
                };
                if part > newest.0 {
                    *newest = (part, 0);
                }
                if part == newest.0 {
                    newest.1 += 1;
                }
                Place {
                    run: run.to_string(),
                    part,
                }
            }
        };
        let slot = self
            .pods
            .entry(uid.to_string())
            .or_insert_with(|| (place.clone(), Execution::default()));
        slot.1.merge(entry);
        self.plans
            .entry(slot.1.plan.clone())
            .or_insert_with(|| uid.to_string());
        for start in entry.one_pod.values() {
            self.one_pod
                .entry(start.key.clone())
                .or_insert_with(|| (uid.to_string(), start.pod.clone()));
        }
        place
    }
}

/// Tells the writer of a start how its write went.
type Ack = oneshot::Sender<Result<(), String>>;

/// One change to one pod's entry.
struct Write {
    place: Place,
    restore: String,
    uid: String,
    entry: Execution,
    /// `Some`: written now (or within [`GATHER`] when `gather`), and the sender learns how it
    /// went.
    ack: Option<Ack>,
    gather: bool,
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
                records: Api::all(client.clone()),
                runs: Api::all(client),
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
    pub fn claim(
        &self,
        restore: &str,
        namespace: &str,
        uid: &str,
        plan: &str,
    ) -> Result<(), Rejection> {
        let run = restore_run_name(restore);
        let state = self.lock();
        let recorded = state.pods.get(uid).map(|(_, e)| e);
        let holder = state.plans.get(plan).map(String::as_str);
        let pods = state
            .per_namespace
            .get(&(run.clone(), namespace.to_string()))
            .copied()
            .unwrap_or(0);
        match claim(uid, plan, recorded, holder, (&run, namespace), pods)? {
            Claim::Held => {}
            // Under the same lock as the check: no two pods of this process take one plan.
            Claim::Free => {
                let entry = Execution {
                    namespace: namespace.to_string(),
                    ..Execution::claimed(plan)
                };
                self.record(state, restore, uid, entry, None, false);
            }
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
    /// is); returns once that is durable. A claim's start (`gather`) may wait [`GATHER`] for
    /// other starts to share its write.
    #[allow(clippy::too_many_arguments)]
    pub async fn started(
        &self,
        restore: &str,
        uid: &str,
        plan: &str,
        index: usize,
        attempt: u32,
        one_pod: Option<OnePodStart>,
        gather: bool,
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
        let place = self.record(self.lock(), restore, uid, entry, Some(ack), gather);
        let error = match done.await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => error,
            Err(_) => STOPPING.to_string(),
        };
        Err(NotRecorded {
            record: place.name(),
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
        self.record(self.lock(), restore, uid, entry, None, false);
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
        self.record(self.lock(), restore, uid, entry, None, false);
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
        gather: bool,
    ) -> Place {
        let place = state.absorb(&restore_run_name(restore), uid, &entry, None);
        drop(state);
        // The writer only stops with the leadership, and every worker with it.
        let _ = self.tx.send(Write {
            place: place.clone(),
            restore: restore.to_string(),
            uid: uid.to_string(),
            entry,
            ack,
            gather,
        });
        place
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What waits to be written to one part of the record.
struct Batch {
    place: Place,
    restore: String,
    entries: BTreeMap<String, Execution>,
    acks: Vec<Ack>,
    /// When a lazy batch is written at the latest.
    due: Option<tokio::time::Instant>,
    /// A start holding an exec slot waits for it: written as soon as its part is free.
    urgent: bool,
}

struct Writer {
    records: Api<RestoreRecord>,
    runs: Api<RestoreRun>,
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
        let mut pending: HashMap<Place, Batch> = HashMap::new();
        let mut in_flight: JoinSet<(Place, Result<(), String>, Vec<Ack>)> = JoinSet::new();
        let mut busy: std::collections::HashSet<Place> = Default::default();
        loop {
            let stopping = stop.is_cancelled();
            if stopping {
                // No start is written once the leadership ended: dropping its batch tells its
                // worker so, and the hook goes back to Pending (docs/behaviour.md §6.10). What
                // waited for company (claims, results) is written now, once, so that the next
                // leader reads it; it holds no start that was not recorded before.
                pending.retain(|_, b| b.acks.is_empty());
            }
            // Start every batch that may go: urgent ones now, lazy ones when due.
            let now = tokio::time::Instant::now();
            let ready: Vec<Place> = pending
                .iter()
                .filter(|(place, b)| {
                    !busy.contains(*place)
                        && (stopping || b.urgent || b.due.is_some_and(|d| d <= now))
                })
                .map(|(place, _)| place.clone())
                .collect();
            for place in ready {
                let batch = pending.remove(&place).expect("listed above");
                busy.insert(place.clone());
                let (records, runs) = (self.records.clone(), self.runs.clone());
                let stop = stop.clone();
                in_flight.spawn(async move {
                    let result = write(&records, &runs, &batch, &stop).await;
                    (batch.place, result, batch.acks)
                });
            }
            let next_due = pending
                .iter()
                .filter(|(place, _)| !busy.contains(*place))
                .filter_map(|(_, b)| b.due)
                .min();
            tokio::select! {
                // Stopping with batches left: the top of the loop writes them (none is busy).
                _ = stop.cancelled(), if in_flight.is_empty() => if pending.is_empty() { return },
                write = rx.recv() => {
                    let Some(w) = write else { return };
                    let batch = pending.entry(w.place.clone()).or_insert_with(|| Batch {
                        place: w.place,
                        restore: w.restore,
                        entries: BTreeMap::new(),
                        acks: Vec::new(),
                        due: None,
                        urgent: false,
                    });
                    batch.entries.entry(w.uid).or_default().merge(&w.entry);
                    let wait = match w.ack {
                        Some(ack) => {
                            batch.acks.push(ack);
                            batch.urgent |= !w.gather;
                            GATHER
                        }
                        None => LAZY,
                    };
                    let due = tokio::time::Instant::now() + wait;
                    batch.due = Some(batch.due.map_or(due, |d| d.min(due)));
                }
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    let Ok((place, result, acks)) = done else {
                        // A write that panicked: which part it wrote is lost with it, and no part
                        // is busy once no write is in flight.
                        if in_flight.is_empty() {
                            busy.clear();
                        }
                        continue;
                    };
                    busy.remove(&place);
                    if let Err(e) = &result {
                        warn!(restorerecord = %place.name(), restorerun = %place.run, error = %e, "could not write the record of started hooks; hooks waiting for it do not start");
                    }
                    for ack in acks {
                        let _ = ack.send(result.clone());
                    }
                }
                _ = sleep_until(next_due), if next_due.is_some() => {}
            }
        }
    }

    /// Reads the whole record: every RestoreRecord, and the RestoreRuns, where versions before
    /// the record had parts kept it (retried until it works or the leadership ends).
    async fn load(&self, stop: &CancellationToken) {
        let mut backoff = ApiBackoff::default();
        loop {
            let read = async {
                let records = self.records.list(&ListParams::default()).await?;
                let runs = self.runs.list(&ListParams::default()).await?;
                Ok::<_, kube::Error>((records, runs))
            };
            match read.await {
                Ok((records, runs)) => {
                    let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    let mut pods = 0;
                    // Parts first: a pod also found in its RestoreRun keeps its part.
                    for record in &records {
                        let (run, part) = (&record.spec.restore_run, record.spec.part);
                        for (uid, entry) in record.status.iter().flat_map(|s| &s.executions) {
                            state.absorb(run, uid, entry, Some(part));
                            pods += 1;
                        }
                    }
                    for run in &runs {
                        let name = run.name_any();
                        for (uid, entry) in run.status.iter().flat_map(|s| &s.executions) {
                            state.absorb(&name, uid, entry, None);
                            pods += 1;
                        }
                    }
                    info!(
                        restoreruns = runs.items.len(),
                        restorerecords = records.items.len(),
                        pods,
                        "read the record of started hooks"
                    );
                    return;
                }
                Err(e) => {
                    let wait = backoff.after(Some(&e));
                    let missing = matches!(&e, kube::Error::Api(s) if s.code == 404);
                    if missing {
                        warn!(error = %e, retry_in = ?wait, "the RestoreRecord CRD is not installed: no hook starts until it is; apply the chart's CRDs (kubectl apply --server-side -f charts/restore-hooks/files/crds/)");
                    } else {
                        warn!(error = %e, retry_in = ?wait, "cannot read the record of started hooks (RestoreRecords, RestoreRuns); no hook starts until it is read");
                    }
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

/// One merge patch of a record part's status (creating the part, and its RestoreRun, first when
/// they do not exist yet), retried with backoff until it lands, fails for good, or `stop` (the
/// end of the leadership) is cancelled.
///
/// On `stop` no new attempt is made, and a request still unanswered after [`STOP_GRACE`] is
/// abandoned; its waiters are told their start was not recorded: a leader that lost its Lease
/// must not keep retrying while the next one waits for it to let go (docs/behaviour.md §6.10). A
/// request cut off may still have landed; then the record shows a start that never ran, and the
/// next leader ends that hook interrupted rather than running it: never twice.
async fn write(
    records: &Api<RestoreRecord>,
    runs: &Api<RestoreRun>,
    batch: &Batch,
    stop: &CancellationToken,
) -> Result<(), String> {
    let name = batch.place.name();
    let body = json!({"status": {"executions": batch.entries}});
    let mut backoff = ApiBackoff::default();
    let since = tokio::time::Instant::now();
    let mut refused = 0;
    loop {
        let params = PatchParams::default();
        let patch = Patch::Merge(&body);
        let patched = tokio::select! {
            patched = records.patch_status(&name, &params, &patch) => patched,
            _ = async {
                stop.cancelled().await;
                tokio::time::sleep(STOP_GRACE).await;
            } => return Err(STOPPING.to_string()),
        };
        let error = match patched {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                match create_record(records, runs, &batch.place, &batch.restore).await {
                    Ok(()) => continue,
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

/// Creates a part of the record unless it exists, owned by its RestoreRun (created first when
/// missing): deleting the RestoreRun deletes its record with it.
async fn create_record(
    records: &Api<RestoreRecord>,
    runs: &Api<RestoreRun>,
    place: &Place,
    restore: &str,
) -> kube::Result<()> {
    let run = create_restore_run(runs, &place.run, restore).await?;
    let mut record = RestoreRecord::new(
        &place.name(),
        RestoreRecordSpec {
            restore: restore.to_string(),
            restore_run: place.run.clone(),
            part: place.part,
        },
    );
    record.metadata.owner_references = Some(vec![OwnerReference {
        api_version: RestoreRun::api_version(&()).into_owned(),
        kind: RestoreRun::kind(&()).into_owned(),
        name: place.run.clone(),
        uid: run.uid().unwrap_or_default(),
        ..OwnerReference::default()
    }]);
    match records.create(&PostParams::default(), &record).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn part_of(state: &mut State, run: &str, uid: &str, found_in: Option<u32>) -> u32 {
        state
            .absorb(
                run,
                uid,
                &Execution::claimed(&format!("plan-{uid}")),
                found_in,
            )
            .part
    }

    /// docs/behaviour.md §9.5: a namespace whose pods fill its share of a restore's record leaves
    /// every other namespace's share as it was.
    #[test]
    fn each_namespace_has_its_own_share_of_a_restores_record() {
        use restore_hooks_core::ledger::MAX_RECORDED_PODS;
        let mut state = State::default();
        for i in 0..MAX_RECORDED_PODS {
            let entry = Execution {
                namespace: "churn".into(),
                ..Execution::claimed(&format!("plan-{i}"))
            };
            state.absorb("r", &format!("u{i}"), &entry, None);
        }
        let pods = |ns: &str| {
            state
                .per_namespace
                .get(&("r".to_string(), ns.to_string()))
                .copied()
                .unwrap_or(0)
        };
        let full = claim("new", "p", None, None, ("r", "churn"), pods("churn"));
        assert!(
            matches!(full, Err(Rejection::RecordFull { ref namespace, .. }) if namespace == "churn"),
            "{full:?}"
        );
        assert_eq!(
            claim("new", "p", None, None, ("r", "shop"), pods("shop")),
            Ok(Claim::Free),
            "another namespace of the same restore still records its pods"
        );
    }

    #[test]
    fn pods_fill_the_newest_part_and_keep_theirs() {
        let mut state = State::default();
        for i in 0..PODS_PER_RECORD {
            assert_eq!(part_of(&mut state, "r", &format!("a{i}"), None), 0);
        }
        // The part is full: the next pod opens part 1; a known pod stays where it is.
        assert_eq!(part_of(&mut state, "r", "b0", None), 1);
        assert_eq!(part_of(&mut state, "r", "a7", None), 0);
        // Another restore has its own parts.
        assert_eq!(part_of(&mut state, "other", "c0", None), 0);
        assert_eq!(
            state.per_namespace[&("r".to_string(), String::new())],
            PODS_PER_RECORD + 1,
            "entries without a namespace (as older versions wrote them) count apart"
        );

        // A new leader's read: parts as found, and new pods join the newest one until it is full.
        let mut state = State::default();
        assert_eq!(part_of(&mut state, "r", "a0", Some(0)), 0);
        for i in 0..PODS_PER_RECORD - 1 {
            assert_eq!(part_of(&mut state, "r", &format!("b{i}"), Some(3)), 3);
        }
        assert_eq!(part_of(&mut state, "r", "a1", Some(0)), 0);
        // An entry an earlier version kept in the RestoreRun (read after the parts): a pod found
        // in a part keeps it; one found only there joins the newest part.
        assert_eq!(part_of(&mut state, "r", "b0", None), 3);
        assert_eq!(part_of(&mut state, "r", "old", None), 3);
        assert_eq!(part_of(&mut state, "r", "new", None), 4);
    }
}
