//! Status of the objects that report on pods (docs/behaviour.md §8): RestoreHook and
//! ClusterRestoreHook counts and their `Ready` condition, and one `RestoreRun` per restore.
//!
//! Counts come from one metadata-only watch of the pods the webhook marked
//! (`restore-hooks.dev/restore-run`): their plan and status annotations are all it needs, so the
//! watch holds no pod spec, and no namespace is ever re-listed to recount. Each pod's part is
//! recomputed from its annotations whenever it changes (`restore_hooks_core::tally`), so the
//! numbers are idempotent: a restarted controller relists and arrives at the same ones.
//!
//! What survives a restart: everything about pods that exist (relisted), and the `retired` counts
//! in each object's status — the final outcomes of pods that were deleted, folded in exactly once
//! by a write that carries the object's resourceVersion, after which the in-memory tombstone is
//! forgotten. Lost: tombstones of pods deleted in the last moments before a crash, and pods
//! deleted while no controller ran (they drop out of the counts; their Events remain).
//!
//! The module is long because one writer serves the three status kinds: they share the per-pod
//! sums, the tombstones and the write ordering. The counting rules are in the core crate.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use restore_hooks_core::hooks::compiled::{CompiledObject, SourceKind};
use restore_hooks_core::hooks::labels::CompactLabels;
use restore_hooks_core::hooks::plan::{ExecPlan, ExecStatus, RESTORE_RUN_LABEL};
use restore_hooks_core::hooks::types::{
    ClusterRestoreHook, FailedPod, HookCounts, HookObjectStatus, OnePodRun, RestoreHook,
    RestoreRecord, RestoreRun, RestoreRunStatus,
};
use restore_hooks_core::tally::{
    Contribution, Target, restore_run_name, run_phase, settled_status, tally_pod,
};
use restore_hooks_core::trust::{PodFacts, verify};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::hook_runs::HookRuns;
use super::marked_pods::{MarkedPod, MarkedPods};
use crate::backoff::watch_backoff;
use crate::catalog::SharedIndex;
use crate::plan_key::KeyRing;

/// Lists in status are bounded: an operator wants the first failures, not ten thousand of them.
pub const MAX_LISTED_PODS: usize = 20;

/// Wait this long after a change before writing, so that a burst of hook results (a restore of
/// many pods) costs one write per object, not one per hook.
const COALESCE: Duration = Duration::from_millis(300);
/// Hook objects' counts are written at one object per this much time on average
/// (docs/behaviour.md §6.19): a round that wrote 50 objects is followed by 25 s without one.
/// During a restore of thousands of pods every hook object changes all the time, and its counts
/// are progress for an operator, worth a write every few seconds, not a load on the API server
/// the restore itself needs. What an operator or a script waits for is not paced: `Ready`
/// (a new generation, webhook replicas catching up), `LateHooks`, a conflict's retry.
const WRITE_SPACING: Duration = Duration::from_millis(500);
/// A RestoreRun is written at most this often (its phase is what a script waits for: a few of
/// them, each written soon).
const RUN_SPACING: Duration = Duration::from_secs(2);
/// How often an object that is not Ready yet (waiting for a webhook replica) is looked at again.
const READY_RETRY: Duration = Duration::from_secs(2);
/// How often expired RestoreRuns are looked for.
const RETENTION_SWEEP: Duration = Duration::from_secs(60);

/// Sends work to the tally task.
#[derive(Clone)]
pub struct Tally {
    tx: mpsc::UnboundedSender<Msg>,
}

enum Msg {
    /// The pod is gone; these are the final results the worker reported (written nowhere).
    PodGone {
        uid: String,
        plan: ExecPlan,
        status: ExecStatus,
    },
    /// What the last late-hook scan of a hook object did.
    Late {
        target: Target,
        outcome: LateOutcome,
    },
}

/// The pods a late-hook scan of one hook object concerned (docs/behaviour.md §7.2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LateOutcome {
    /// Pods its exec hooks were added to.
    pub added: Vec<String>,
    /// Pods that missed its init hooks.
    pub missed_init: Vec<String>,
    /// Pods it selects that were admitted longer ago than the late-hook window.
    pub outside_window: Vec<String>,
}

impl LateOutcome {
    fn merge(&mut self, other: LateOutcome) {
        for (mine, theirs) in [
            (&mut self.added, other.added),
            (&mut self.missed_init, other.missed_init),
            (&mut self.outside_window, other.outside_window),
        ] {
            for pod in theirs {
                if !mine.contains(&pod) {
                    mine.push(pod);
                }
            }
        }
    }
}

impl Tally {
    /// A pod worker's final results for a pod that is gone: the pod's annotations may never
    /// have received them, so they are what the counts keep of it.
    pub fn pod_gone(&self, uid: &str, plan: &ExecPlan, status: &ExecStatus) {
        let _ = self.tx.send(Msg::PodGone {
            uid: uid.to_string(),
            plan: plan.clone(),
            status: status.clone(),
        });
    }

    /// What a late-hook scan of `object` did, for its `LateHooks` condition; added to what
    /// earlier scans reported. Ignored for a Velero Restore.
    pub fn late_outcome(&self, object: &CompiledObject, outcome: LateOutcome) {
        if let Some(target) = hook_object_target(object) {
            let _ = self.tx.send(Msg::Late { target, outcome });
        }
    }
}

/// The status target of a RestoreHook or ClusterRestoreHook; `None` for a Velero Restore, which
/// has no status of ours.
fn hook_object_target(object: &CompiledObject) -> Option<Target> {
    match object.kind {
        SourceKind::RestoreHook => Some(Target::RestoreHook {
            namespace: object.namespace.clone().unwrap_or_default(),
            name: object.name.clone(),
        }),
        SourceKind::ClusterRestoreHook => Some(Target::ClusterRestoreHook {
            name: object.name.clone(),
        }),
        SourceKind::VeleroRestore => None,
    }
}

/// The tally task's settings.
pub struct TallyConfig {
    /// Namespace of the webhook replicas' pods: stale per-replica entries are pruned when their
    /// pod no longer exists there.
    pub replicas_namespace: String,
    /// `--restore-run-retention`: how long a completed RestoreRun is kept (longer while a pod it
    /// ran hooks on still exists).
    pub restore_run_retention: Duration,
}

/// Starts the task; it runs until `stop` is cancelled.
pub fn spawn(
    client: kube::Client,
    keys: KeyRing,
    index: Arc<SharedIndex>,
    hook_runs: Arc<HookRuns>,
    config: TallyConfig,
    stop: CancellationToken,
) -> (Tally, MarkedPods, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let marked = MarkedPods::default();
    let task = tokio::spawn(
        Writer {
            client,
            keys,
            index,
            config,
            marked: marked.clone(),
            hook_runs,
            pods: HashMap::new(),
            by_target: HashMap::new(),
            tombstones: HashMap::new(),
            last_word: HashMap::new(),
            dirty: BTreeSet::new(),
            not_ready: BTreeSet::new(),
            late: HashMap::new(),
            written: HashMap::new(),
            urgent: BTreeSet::new(),
            quiet_until: tokio::time::Instant::now(),
            run_written: HashMap::new(),
        }
        .run(rx, stop),
    );
    (Tally { tx }, marked, task)
}

/// One target's live parts and pending tombstones.
struct Sum {
    /// Hook counts over the live pods.
    counts: HookCounts,
    /// Live pods with at least one exec hook of the target.
    planned: i64,
    /// The live pods' parts, by namespace and name.
    pods: Vec<(String, String, Contribution)>,
    /// Counts of the tombstones, to fold into `retired`.
    retiring: HookCounts,
    /// How many tombstones those are (forgotten once the write succeeded).
    stones: usize,
}

impl Sum {
    /// The counts and `retired` to write over a status whose `retired` is `prior`: the
    /// tombstones fold into `retired`, and the counts cover live and retired pods.
    fn totals(&self, prior: HookCounts) -> (HookCounts, HookCounts) {
        let mut retired = prior;
        retired.add(&self.retiring);
        let mut counts = self.counts;
        counts.add(&retired);
        (counts, retired)
    }

    /// The target's `runOn: OnePod` hooks and the live pod that runs each (docs/behaviour.md
    /// §6.15).
    fn one_pod_runs(&self) -> Vec<OnePodRun> {
        self.pods
            .iter()
            .flat_map(|(namespace, pod, part)| {
                part.one_pod
                    .iter()
                    .map(move |(hook, index, phase)| OnePodRun {
                        hook: format!("{hook}#{index}"),
                        namespace: namespace.clone(),
                        pod: pod.clone(),
                        phase: format!("{phase:?}"),
                    })
            })
            .take(MAX_LISTED_PODS)
            .collect()
    }

    /// The live pods with a failed hook of the target, first failure each, with the reason
    /// (docs/behaviour.md §8.1, §8.3).
    fn failed_pods(&self) -> Vec<FailedPod> {
        self.pods
            .iter()
            .filter_map(|(namespace, pod, part)| {
                let (hook, message) = part.first_failure.clone()?;
                Some(FailedPod {
                    namespace: namespace.clone(),
                    pod: pod.clone(),
                    hook,
                    message: crate::controller::events::truncate(&message, 512),
                })
            })
            .take(MAX_LISTED_PODS)
            .collect()
    }
}

struct Stone {
    uid: String,
    namespace: String,
    part: Contribution,
    /// Its counts are final: no hook pending, or the worker's last word on the pod came. A
    /// stone with pending hooks (the watch saw the delete before the worker said how its hooks
    /// ended) still counts as live and is not folded into `retired`, where its pending hooks
    /// could never be corrected.
    settled: bool,
}

struct PodEntry {
    namespace: String,
    name: String,
    /// By target, sorted: a slice, not the map `tally_pod` returns, because a map of two or
    /// three entries allocates room for eleven, and every marked pod has one.
    parts: Box<[(Target, Contribution)]>,
}

impl PodEntry {
    fn part(&self, target: &Target) -> Option<&Contribution> {
        let i = self.parts.binary_search_by(|(t, _)| t.cmp(target)).ok()?;
        Some(&self.parts[i].1)
    }
}

struct Writer {
    client: kube::Client,
    keys: KeyRing,
    index: Arc<SharedIndex>,
    config: TallyConfig,
    marked: MarkedPods,
    /// The runs of named hooks, for the workers' `after` (docs/behaviour.md §6.16).
    hook_runs: Arc<HookRuns>,
    pods: HashMap<String, PodEntry>,
    by_target: HashMap<Target, HashSet<String>>,
    /// Final parts of deleted pods, not yet folded into `retired`.
    tombstones: HashMap<Target, Vec<Stone>>,
    /// The workers' last word on pods that are gone, until the watch retires them: the watch
    /// lags the worker, and an event it still delivers (the pod as it was before it went) must
    /// not bring back hooks the worker settled.
    last_word: HashMap<String, (ExecPlan, ExecStatus)>,
    dirty: BTreeSet<Target>,
    not_ready: BTreeSet<Target>,
    late: HashMap<Target, LateOutcome>,
    /// Each hook object as the API server returned it from our last status write: the next write
    /// starts from it instead of a read (a 409 says someone else wrote since, and drops it).
    written: HashMap<Target, (ObjectMeta, HookObjectStatus)>,
    /// Targets written at the next flush whatever the pacing.
    urgent: BTreeSet<Target>,
    /// No paced hook object write before this ([`WRITE_SPACING`]).
    quiet_until: tokio::time::Instant,
    /// When each RestoreRun was last written ([`RUN_SPACING`]).
    run_written: HashMap<Target, tokio::time::Instant>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>, stop: CancellationToken) {
        let api: Api<PartialObjectMeta<Pod>> = Api::all(self.client.clone());
        let mut pods = watch_backoff(watcher::watcher(
            api,
            watcher::Config::default().labels(RESTORE_RUN_LABEL),
        ))
        .boxed();
        let mut compiled = self.index.subscribe();
        // The uids of a (re)list so far: applied as they come (a restore's pods are not held
        // twice), and the pods it did not show retire when it ends.
        let mut relisted: Option<HashSet<String>> = None;
        let mut flush_at: Option<tokio::time::Instant> = None;
        let mut ready_retry = tokio::time::interval(READY_RETRY);
        let mut sweep = tokio::time::interval(RETENTION_SWEEP);
        loop {
            let flush_due = async {
                match flush_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => {
                    // A last write of everything, so that what the workers recorded last is
                    // counted (a conflict with the ledger's last write is tried again).
                    for _ in 0..3 {
                        self.urgent.append(&mut self.dirty);
                        if self.urgent.is_empty() {
                            break;
                        }
                        self.flush().await;
                    }
                    return;
                }
                event = pods.next() => match event {
                    Some(Ok(Event::Init)) => relisted = Some(HashSet::new()),
                    Some(Ok(Event::InitApply(p))) => {
                        if let (Some(seen), Some(uid)) = (relisted.as_mut(), p.uid()) {
                            seen.insert(uid);
                        }
                        self.apply(p);
                    }
                    Some(Ok(Event::InitDone)) => {
                        let seen = relisted.take().unwrap_or_default();
                        // Pods gone while the watch was down: their last known part retires.
                        let missing: Vec<String> = self.pods.keys().filter(|u| !seen.contains(*u)).cloned().collect();
                        for uid in missing {
                            self.retire(&uid);
                        }
                        let first = !self.marked.is_listed();
                        self.marked.set_listed();
                        self.hook_runs.set_listed();
                        if first {
                            // Retention is only decided once the live pods are known.
                            self.sweep().await;
                        }
                    }
                    Some(Ok(Event::Apply(p))) => self.apply(p),
                    Some(Ok(Event::Delete(p))) => {
                        if let Some(uid) = p.uid() {
                            // The deleted pod as it was last: a write that landed while the
                            // API server deleted it with no grace period left became that
                            // deletion, and is seen here only (docs/behaviour.md §8.3).
                            self.apply(p);
                            self.retire(&uid);
                        }
                    }
                    Some(Err(e)) => warn!(error = %e, "watch of marked pods failed; retrying with backoff"),
                    None => return,
                },
                msg = rx.recv() => match msg {
                    Some(Msg::PodGone { uid, plan, status }) => self.gone(&uid, &plan, &status),
                    Some(Msg::Late { target, outcome }) => {
                        // Scans of the object and looks at single pods that arrived later add up.
                        self.late.entry(target.clone()).or_default().merge(outcome);
                        self.urgent.insert(target);
                    }
                    None => return,
                },
                object = compiled.recv() => if let Ok(c) = object {
                    // A new generation, or a write by someone else (a webhook replica's entry),
                    // may change `Ready`, which a script waits for: not paced. The echo of this
                    // task's own write (every write comes back through the watch) is no change,
                    // and must not turn the counts' paced writes into urgent ones.
                    if let Some(target) = hook_object_target(&c.object)
                        && (c.changed || !self.is_own_write(&target, c.resource_version.as_deref()))
                    {
                        self.urgent.insert(target);
                    }
                },
                _ = ready_retry.tick() => {
                    let mut retry = std::mem::take(&mut self.not_ready);
                    self.urgent.append(&mut retry);
                }
                _ = sweep.tick() => self.sweep().await,
                _ = flush_due => {
                    flush_at = None;
                    self.flush().await;
                }
            }
            // The earliest of what was due and what is due now: a RestoreRun that changes while
            // the hook objects wait out their pacing is written at its own pace, not theirs.
            // (Never later than before: a stream of changes must not keep pushing a flush out.)
            flush_at = match (flush_at, self.next_flush()) {
                (Some(at), Some(next)) => Some(at.min(next)),
                (at, next) => at.or(next),
            };
        }
    }

    /// A pod's current part, from its annotations. A plan that does not verify (hand-written,
    /// edited, another installation's) counts for nothing.
    fn apply(&mut self, pod: PartialObjectMeta<Pod>) {
        let Some(uid) = pod.uid() else { return };
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let get = |k: &str| annotations.get(k).map(String::as_str);
        let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let facts = PodFacts {
            namespace: &namespace,
            name: &name,
            generate_name: pod.metadata.generate_name.as_deref(),
            uid: &uid,
            created,
            plan: get(restore_hooks_core::hooks::plan::PLAN_ANNOTATION),
            plan_signature: get(restore_hooks_core::hooks::signing::PLAN_SIGNATURE_ANNOTATION),
            status: get(restore_hooks_core::hooks::plan::STATUS_ANNOTATION),
            status_signature: get(restore_hooks_core::hooks::signing::STATUS_SIGNATURE_ANNOTATION),
        };
        let pod_ref = format!("{namespace}/{name}");
        let parts = match (
            self.last_word.get(&uid),
            verify(&facts, self.keys.current().as_deref()),
        ) {
            (Some((plan, status)), _) => {
                self.hook_runs.set(&uid, &pod_ref, plan, Some(status));
                tally_pod(&namespace, plan, Some(status))
            }
            (None, Ok(t)) => {
                let exec_label = pod
                    .labels()
                    .get(restore_hooks_core::hooks::plan::EXEC_LABEL);
                let status = settled_status(&t.plan, t.status, exec_label.map(String::as_str));
                self.hook_runs.set(&uid, &pod_ref, &t.plan, status.as_ref());
                tally_pod(&namespace, &t.plan, status.as_ref())
            }
            (None, Err(_)) => {
                self.hook_runs.remove(&uid);
                BTreeMap::new()
            }
        };
        let plan_sources = get(restore_hooks_core::hooks::plan::PLAN_ANNOTATION)
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
        let injected = get(restore_hooks_core::hooks::plan::INJECTED_ANNOTATION)
            .map(|v| {
                v.split(',')
                    .filter(|n| !n.is_empty())
                    .map(Box::from)
                    .collect()
            })
            .unwrap_or_default();
        self.marked.insert(
            uid.clone(),
            MarkedPod {
                namespace: namespace.clone(),
                name: name.clone(),
                labels: pod
                    .metadata
                    .labels
                    .as_ref()
                    .map(CompactLabels::from)
                    .unwrap_or_default(),
                created,
                plan_sources,
                injected,
            },
        );
        self.set_parts(uid, namespace, name, parts);
    }

    fn set_parts(
        &mut self,
        uid: String,
        namespace: String,
        name: String,
        parts: BTreeMap<Target, Contribution>,
    ) {
        let parts: Box<[(Target, Contribution)]> = parts.into_iter().collect();
        let old = self.pods.remove(&uid);
        if old.as_ref().is_some_and(|o| o.parts == parts) {
            self.pods.insert(uid, old.expect("just checked"));
            return;
        }
        for (target, _) in old.iter().flat_map(|o| &o.parts) {
            if !parts.iter().any(|(t, _)| t == target) {
                if let Some(set) = self.by_target.get_mut(target) {
                    set.remove(&uid);
                }
                self.dirty.insert(target.clone());
            }
        }
        for (target, _) in &parts {
            self.by_target
                .entry(target.clone())
                .or_default()
                .insert(uid.clone());
            self.dirty.insert(target.clone());
        }
        self.pods.insert(
            uid,
            PodEntry {
                namespace,
                name,
                parts,
            },
        );
    }

    /// The worker's last word on a pod that is gone.
    fn gone(&mut self, uid: &str, plan: &ExecPlan, status: &ExecStatus) {
        if let Some(entry) = self.pods.get(uid) {
            let pod_ref = format!("{}/{}", entry.namespace, entry.name);
            self.hook_runs.set(uid, &pod_ref, plan, Some(status));
            self.last_word
                .insert(uid.to_string(), (plan.clone(), status.clone()));
            let (namespace, name) = (entry.namespace.clone(), entry.name.clone());
            let parts = tally_pod(&namespace, plan, Some(status));
            self.set_parts(uid.to_string(), namespace, name, parts);
            return;
        }
        // The watch saw the delete first: replace the tombstones' parts.
        for (target, stones) in self.tombstones.iter_mut() {
            for stone in stones.iter_mut().filter(|s| s.uid == uid) {
                if let Some(part) = tally_pod(&stone.namespace, plan, Some(status)).remove(target) {
                    stone.part = part;
                }
                stone.settled = true;
                self.dirty.insert(target.clone());
            }
        }
    }

    fn retire(&mut self, uid: &str) {
        self.hook_runs.remove(uid);
        self.marked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        let spoken = self.last_word.remove(uid).is_some();
        let Some(entry) = self.pods.remove(uid) else {
            return;
        };
        for (target, part) in entry.parts.into_vec() {
            if let Some(set) = self.by_target.get_mut(&target) {
                set.remove(uid);
            }
            self.tombstones
                .entry(target.clone())
                .or_default()
                .push(Stone {
                    uid: uid.to_string(),
                    namespace: entry.namespace.clone(),
                    settled: spoken || part.counts.pending == 0,
                    part,
                });
            self.dirty.insert(target);
        }
    }

    /// True when `target` at `resource_version` is what this task's last write of it left.
    fn is_own_write(&self, target: &Target, resource_version: Option<&str>) -> bool {
        resource_version.is_some_and(|version| {
            self.written
                .get(target)
                .is_some_and(|(meta, _)| meta.resource_version.as_deref() == Some(version))
        })
    }

    /// When the next flush is due: [`COALESCE`] after the first change, later where the target
    /// is paced.
    fn next_flush(&self) -> Option<tokio::time::Instant> {
        let soon = tokio::time::Instant::now() + COALESCE;
        let urgent = (!self.urgent.is_empty()).then_some(soon);
        let paced = self
            .dirty
            .iter()
            .map(|t| soon.max(self.not_before(t)))
            .min();
        urgent.into_iter().chain(paced).min()
    }

    /// The earliest a paced write of `target` may go.
    fn not_before(&self, target: &Target) -> tokio::time::Instant {
        match target {
            Target::RestoreRun { .. } => self
                .run_written
                .get(target)
                .map_or(self.quiet_until, |at| *at + RUN_SPACING),
            _ => self.quiet_until,
        }
    }

    /// Writes the urgent targets and the paced ones that are due.
    async fn flush(&mut self) {
        let now = tokio::time::Instant::now();
        let mut work = std::mem::take(&mut self.urgent);
        let due: Vec<Target> = self
            .dirty
            .iter()
            .filter(|t| self.not_before(t) <= now)
            .cloned()
            .collect();
        let paced = due
            .iter()
            .filter(|t| !matches!(t, Target::RestoreRun { .. }))
            .count();
        if paced > 0 {
            let spacing = WRITE_SPACING.saturating_mul(u32::try_from(paced).unwrap_or(u32::MAX));
            self.quiet_until = now + spacing;
        }
        work.extend(due);
        for target in work {
            // This write covers every change so far, paced or not.
            self.dirty.remove(&target);
            let result = match &target {
                Target::RestoreRun { restore } => {
                    self.run_written.insert(target.clone(), now);
                    self.write_run(&target, restore).await
                }
                _ => self.write_hook_object(&target).await,
            };
            if let Err(e) = result {
                // Read the object again before the next write.
                self.written.remove(&target);
                // A conflict is routine (the ledger, webhook replicas and the controller's own
                // earlier view write too) and retried soon; anything else an operator should
                // see, and is retried at the pace of progress (a throttling API server included).
                let conflict = e
                    .downcast_ref::<kube::Error>()
                    .is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 409));
                if conflict {
                    debug!(target = ?target, error = %e, "status write conflicted; retrying");
                    self.urgent.insert(target);
                } else {
                    warn!(target = ?target, error = %e, "status write failed; retrying");
                    self.dirty.insert(target);
                }
            }
        }
    }

    /// Live parts of a target, summed, and its tombstones.
    fn sum(&self, target: &Target) -> Sum {
        let mut counts = HookCounts::default();
        let mut planned = 0;
        let mut pods = Vec::new();
        for uid in self.by_target.get(target).into_iter().flatten() {
            let Some(entry) = self.pods.get(uid) else {
                continue;
            };
            let Some(part) = entry.part(target) else {
                continue;
            };
            counts.add(&part.counts);
            planned += i64::from(part.planned);
            pods.push((entry.namespace.clone(), entry.name.clone(), part.clone()));
        }
        pods.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let mut retiring = HookCounts::default();
        let mut stones = 0;
        for stone in self.tombstones.get(target).into_iter().flatten() {
            if stone.settled {
                retiring.add(&stone.part.counts);
                stones += 1;
            } else {
                counts.add(&stone.part.counts);
                planned += i64::from(stone.part.planned);
            }
        }
        Sum {
            counts,
            planned,
            pods,
            retiring,
            stones,
        }
    }

    async fn write_hook_object(&mut self, target: &Target) -> anyhow::Result<()> {
        let (kind, namespace, name) = match target {
            Target::RestoreHook { namespace, name } => (
                SourceKind::RestoreHook,
                Some(namespace.as_str()),
                name.as_str(),
            ),
            Target::ClusterRestoreHook { name } => {
                (SourceKind::ClusterRestoreHook, None, name.as_str())
            }
            Target::RestoreRun { .. } => unreachable!("written by write_run"),
        };
        // `read`: the object as the API server has it now, not as our last write left it (a
        // write from that is how a change since, such as an edit of the spec, is noticed: 409).
        let ((meta, status), read) = match self.written.remove(target) {
            Some(last) => (last, false),
            None => match self.read_hook_object(target, kind, namespace, name).await? {
                Some(read) => (read, true),
                None => return Ok(()),
            },
        };
        let sum = self.sum(target);
        let (counts, retired) = sum.totals(status.retired);
        let missed: Vec<String> = sum
            .pods
            .iter()
            .filter(|(_, _, p)| p.counts.missed_init > 0)
            .take(MAX_LISTED_PODS)
            .map(|(ns, n, _)| format!("{ns}/{n}"))
            .collect();
        let failed_pods = sum.failed_pods();
        let generation = meta.generation;
        let (ready, pruned) = self
            .readiness(kind, namespace, name, generation, &status)
            .await;
        let mut conditions = vec![condition(
            "Ready",
            ready.0,
            ready.1,
            &ready.2,
            generation,
            &status.conditions,
        )];
        if let Some(late) = self.late.get(target) {
            conditions.push(late_condition(late, generation, &status.conditions));
        }
        let waiting_for_replicas = ready.1 == "WaitingForWebhooks";
        let mut webhooks = serde_json::Map::new();
        for gone in pruned {
            webhooks.insert(gone, Value::Null);
        }
        let body = json!({
            "metadata": {"resourceVersion": meta.resource_version},
            "status": {
                "observedGeneration": generation,
                "podsPlanned": sum.planned,
                "hooks": counts,
                "missedInitPods": missed,
                "failedPods": failed_pods,
                "onePod": sum.one_pod_runs(),
                "retired": retired,
                "webhooks": webhooks,
                "conditions": conditions,
            }
        });
        // A status the object already has is not written again: a new leader recomputes every
        // hook object's status, and after a leader change most are already right.
        let written = if read && merged_is_unchanged(&status, &body["status"]) {
            Ok((meta, Some(status)))
        } else {
            self.patch_hook_object(kind, namespace, name, &body).await
        };
        let (meta, status) = match written {
            Ok(o) => o,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.forget(target);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        self.written
            .insert(target.clone(), (meta, status.unwrap_or_default()));
        self.forget_folded(target, sum.stones);
        if waiting_for_replicas {
            // What it waits for is the replicas' own entries: read them at the next look.
            self.written.remove(target);
            self.not_ready.insert(target.clone());
        }
        debug!(target = ?target, planned = sum.planned, succeeded = counts.succeeded, failed = counts.failed, pending = counts.pending, "hook object status updated");
        Ok(())
    }

    async fn patch_hook_object(
        &self,
        kind: SourceKind,
        namespace: Option<&str>,
        name: &str,
        body: &Value,
    ) -> kube::Result<(ObjectMeta, Option<HookObjectStatus>)> {
        let params = PatchParams::default();
        match kind {
            SourceKind::RestoreHook => {
                let api: Api<RestoreHook> =
                    Api::namespaced(self.client.clone(), namespace.unwrap_or_default());
                api.patch_status(name, &params, &Patch::Merge(body))
                    .await
                    .map(|o| (o.metadata, o.status))
            }
            _ => {
                let api: Api<ClusterRestoreHook> = Api::all(self.client.clone());
                api.patch_status(name, &params, &Patch::Merge(body))
                    .await
                    .map(|o| (o.metadata, o.status))
            }
        }
    }

    /// A hook object's metadata and status from the API server; `None` (and forgotten) when it
    /// is gone.
    async fn read_hook_object(
        &mut self,
        target: &Target,
        kind: SourceKind,
        namespace: Option<&str>,
        name: &str,
    ) -> kube::Result<Option<(ObjectMeta, HookObjectStatus)>> {
        let read = match kind {
            SourceKind::RestoreHook => {
                let api: Api<RestoreHook> =
                    Api::namespaced(self.client.clone(), namespace.unwrap_or_default());
                api.get_opt(name).await?.map(|o| (o.metadata, o.status))
            }
            _ => {
                let api: Api<ClusterRestoreHook> = Api::all(self.client.clone());
                api.get_opt(name).await?.map(|o| (o.metadata, o.status))
            }
        };
        if read.is_none() {
            self.forget(target);
        }
        Ok(read.map(|(meta, status)| (meta, status.unwrap_or_default())))
    }

    /// `Ready` of a hook object: (status, reason, message), and replica entries to prune.
    async fn readiness(
        &self,
        kind: SourceKind,
        namespace: Option<&str>,
        name: &str,
        generation: Option<i64>,
        status: &HookObjectStatus,
    ) -> ((&'static str, &'static str, String), Vec<String>) {
        let compiled = self
            .index
            .read()
            .object(kind, namespace.unwrap_or_default(), name)
            .cloned();
        let Some(compiled) = compiled else {
            return (
                (
                    "False",
                    "NotCompiled",
                    "restore-hooks has not read this object yet".into(),
                ),
                vec![],
            );
        };
        if let Some(problem) = compiled.first_problem() {
            return (("False", "Invalid", problem.to_string()), vec![]);
        }
        let generation = generation.unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.config.replicas_namespace);
        let mut behind = Vec::new();
        let mut pruned = Vec::new();
        for (replica, seen) in &status.webhooks {
            if seen.observed_generation >= generation && seen.problem.is_empty() {
                continue;
            }
            // An entry of a replica that no longer runs will never catch up: drop it.
            if matches!(pods.get_metadata_opt(replica).await, Ok(None)) {
                pruned.push(replica.clone());
                continue;
            }
            behind.push(if seen.problem.is_empty() {
                format!("{replica} has generation {}", seen.observed_generation)
            } else {
                format!("{replica}: {}", seen.problem)
            });
        }
        if !behind.is_empty() {
            return (
                (
                    "False",
                    "WaitingForWebhooks",
                    format!("generation {generation}: {}", behind.join("; ")),
                ),
                pruned,
            );
        }
        // Nobody serving it is not "everybody serves it": a script waiting for Ready would create
        // pods that no webhook replica gives the hooks.
        let serving = status
            .webhooks
            .iter()
            .filter(|(r, seen)| !pruned.contains(r) && seen.observed_generation >= generation)
            .count();
        if serving == 0 {
            return (
                (
                    "False",
                    "WaitingForWebhooks",
                    format!("generation {generation}: no webhook replica has reported it yet"),
                ),
                pruned,
            );
        }
        (
            (
                "True",
                "Compiled",
                format!("generation {generation} is served by every webhook replica"),
            ),
            pruned,
        )
    }

    /// Forgets the settled tombstones of `target`: the write that just succeeded folded them
    /// into `retired` (nothing changed them meanwhile: the writes are awaited by the one task
    /// that also applies the changes).
    fn forget_folded(&mut self, target: &Target, stones: usize) {
        if stones > 0
            && let Some(t) = self.tombstones.get_mut(target)
        {
            t.retain(|s| !s.settled);
        }
    }

    fn forget(&mut self, target: &Target) {
        self.tombstones.remove(target);
        self.written.remove(target);
    }

    async fn write_run(&mut self, target: &Target, restore: &str) -> anyhow::Result<()> {
        let sum = self.sum(target);
        let planned = sum.planned;
        let name = restore_run_name(restore);
        let api: Api<RestoreRun> = Api::all(self.client.clone());
        if planned == 0 && sum.stones == 0 {
            // Only pods without hooks of this restore left: nothing to report.
            return Ok(());
        }
        let existing = match api.get_opt(&name).await? {
            Some(run) => run,
            None => super::ledger::create_restore_run(&api, &name, restore).await?,
        };
        let status = existing.status.clone().unwrap_or_default();
        let (counts, retired) = sum.totals(status.retired);
        let retired_pods = status.retired_pods.unwrap_or_default() + sum.stones as i64;
        let phase = run_phase(&counts);
        let failed_pods = sum.failed_pods();
        let completed_at = if phase == "InProgress" {
            None
        } else {
            Some(
                status
                    .completed_at
                    .clone()
                    .unwrap_or_else(|| restore_hooks_core::exec_step::timestamp(Timestamp::now())),
            )
        };
        let refused = if counts.refused > 0 {
            format!(" ({} of them refused)", counts.refused)
        } else {
            String::new()
        };
        let message = format!(
            "{planned} pod(s): {} succeeded, {} failed{refused}, {} skipped, {} pending, {} init hooks missed",
            counts.succeeded, counts.failed, counts.skipped, counts.pending, counts.missed_init
        );
        let cond = condition(
            "Completed",
            if phase == "InProgress" {
                "False"
            } else {
                "True"
            },
            phase,
            &message,
            None,
            &status.conditions,
        );
        let body = json!({
            "metadata": {"resourceVersion": existing.metadata.resource_version},
            "status": {
                "phase": phase,
                "podsPlanned": planned,
                "hooks": counts,
                "failedPods": failed_pods,
                "onePod": sum.one_pod_runs(),
                "retired": retired,
                "retiredPods": (retired_pods > 0).then_some(retired_pods),
                "completedAt": completed_at,
                "conditions": [cond],
            }
        });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        self.forget_folded(target, sum.stones);
        if status.phase != phase {
            // Not `message`: that is the log line's own text in JSON logs (one key per line).
            info!(restorerun = %name, restore, phase, counts = %message, "restore phase");
        }
        Ok(())
    }

    /// Deletes RestoreRuns completed longer ago than the retention period, once none of the pods
    /// their record holds exists any more: the record is what keeps those pods' hooks from
    /// running again (docs/behaviour.md §8.3, §9.5).
    async fn sweep(&mut self) {
        if !self.marked.is_listed() {
            // Which pods exist is not known before the first list.
            return;
        }
        let api: Api<RestoreRun> = Api::all(self.client.clone());
        let Ok(runs) = api.list(&ListParams::default()).await else {
            return;
        };
        let retention = jiff::SignedDuration::try_from(self.config.restore_run_retention)
            .unwrap_or(jiff::SignedDuration::MAX);
        let now = Timestamp::now();
        let expired = |status: &RestoreRunStatus| {
            let done = status
                .completed_at
                .as_deref()
                .and_then(|t| t.parse::<Timestamp>().ok());
            done.is_some_and(|done| {
                status.phase != "InProgress" && now.duration_since(done) >= retention
            })
        };
        let expired: Vec<RestoreRun> = runs
            .into_iter()
            .filter(|run| run.status.as_ref().is_some_and(expired))
            .collect();
        if expired.is_empty() {
            // The record is read only when there is something to delete: it is every pod's entry.
            return;
        }
        let records: Api<RestoreRecord> = Api::all(self.client.clone());
        let Ok(parts) = records.list(&ListParams::default()).await else {
            return;
        };
        let mut record_of: HashMap<&str, Vec<&RestoreRecord>> = HashMap::new();
        for part in &parts {
            record_of
                .entry(part.spec.restore_run.as_str())
                .or_default()
                .push(part);
        }
        for run in expired {
            let Some(status) = &run.status else { continue };
            let name = run.name_any();
            let parts = record_of.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            let live = parts
                .iter()
                .flat_map(|p| p.status.iter().flat_map(|s| s.executions.keys()))
                .chain(status.executions.keys())
                .find(|uid| self.pods.contains_key(*uid));
            if let Some(live) = live {
                debug!(restorerun = %name, pod_uid = %live, "kept past its retention period: a pod it ran hooks on still exists");
                continue;
            }
            // The record first, and the RestoreRun only once all of it is gone: a RestoreRun
            // left behind is deleted by the next sweep, a part left behind would be kept by
            // nothing (the garbage collector deletes it too, through its owner reference, where
            // one runs).
            let mut left = 0;
            for part in parts {
                if let Err(e) = records
                    .delete(&part.name_any(), &DeleteParams::default())
                    .await
                    && !matches!(&e, kube::Error::Api(s) if s.code == 404)
                {
                    warn!(restorerecord = %part.name_any(), error = %e, "could not delete part of an expired RestoreRun's record; trying again at the next sweep");
                    left += 1;
                }
            }
            if left > 0 {
                continue;
            }
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    info!(restorerun = %name, completed_at = ?status.completed_at, "RestoreRun past its retention period; deleted");
                    let target = Target::RestoreRun {
                        restore: run.spec.restore.clone(),
                    };
                    self.tombstones.remove(&target);
                }
                Err(e) => {
                    warn!(restorerun = %name, error = %e, "could not delete an expired RestoreRun")
                }
            }
        }
    }
}

/// Whether merging `patch` (a merge patch of a hook object's status) into `current` leaves it
/// as it is.
fn merged_is_unchanged(current: &HookObjectStatus, patch: &Value) -> bool {
    let Ok(mut merged) = serde_json::to_value(current) else {
        return false;
    };
    json_patch::merge(&mut merged, patch);
    serde_json::from_value::<HookObjectStatus>(merged).is_ok_and(|m| m == *current)
}

/// `LateHooks`: what the last scan for pods admitted before the object did. False when pods it
/// selects were too old to get its hooks, or missed its init hooks.
fn late_condition(
    late: &LateOutcome,
    generation: Option<i64>,
    existing: &[Condition],
) -> Condition {
    let list = |pods: &[String]| {
        let mut s: Vec<&str> = pods
            .iter()
            .take(MAX_LISTED_PODS)
            .map(String::as_str)
            .collect();
        if pods.len() > MAX_LISTED_PODS {
            s.push("...");
        }
        s.join(", ")
    };
    let mut parts = Vec::new();
    if !late.added.is_empty() {
        parts.push(format!(
            "exec hooks added to {} pod(s) admitted before it ({})",
            late.added.len(),
            list(&late.added)
        ));
    }
    if !late.outside_window.is_empty() {
        parts.push(format!(
            "not added to {} pod(s) admitted longer ago than --late-hook-window ({})",
            late.outside_window.len(),
            list(&late.outside_window)
        ));
    }
    if !late.missed_init.is_empty() {
        parts.push(format!(
            "init hooks missed by {} pod(s) created before it ({})",
            late.missed_init.len(),
            list(&late.missed_init)
        ));
    }
    let (status, reason) = if !late.outside_window.is_empty() {
        ("False", "OutsideLateHookWindow")
    } else if !late.missed_init.is_empty() {
        ("False", "InitHooksMissed")
    } else {
        ("True", "Added")
    };
    condition(
        "LateHooks",
        status,
        reason,
        &parts.join("; "),
        generation,
        existing,
    )
}

/// A condition, keeping its last transition time while its status does not change.
fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    existing: &[Condition],
) -> Condition {
    let previous = existing.iter().find(|c| c.type_ == type_);
    let transition = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Time(Timestamp::now()),
    };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: crate::controller::events::truncate(message, 1024),
        observed_generation: generation,
        last_transition_time: transition,
    }
}
