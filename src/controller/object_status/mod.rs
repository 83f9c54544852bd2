//! Status of the objects that report on pods (docs/behaviour.md §8): RestoreHook and
//! ClusterRestoreHook counts and their `Ready` condition ([`hook_objects`]), and one `RestoreRun`
//! per restore with its retention ([`restore_runs`]). This module is the writer both share: which
//! targets are due, and the pacing that spares the API server (§6.19).
//!
//! The numbers themselves are the restore model's (`restore_hooks_core::restore`), kept up to
//! date by the watch of marked pods (`super::restores`): each pod's part is recomputed from its
//! annotations whenever it changes, so a restarted controller relists and arrives at the same
//! ones. What survives a restart: everything about pods that exist, and the `retired` counts in
//! each object's status — the final outcomes of deleted pods, folded in exactly once by a write
//! that carries the object's resourceVersion, after which the model forgets them. Lost:
//! tombstones of pods deleted in the last moments before a crash, and pods deleted while no
//! controller ran (they drop out of the counts; their Events remain).

mod hook_objects;
mod restore_runs;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use restore_hooks_core::hooks::compiled::{CompiledObject, SourceKind};
use restore_hooks_core::hooks::types::{FailedPod, HookCounts, HookObjectStatus, OnePodRun};
use restore_hooks_core::restore::counts::Totals;
use restore_hooks_core::restore::tally::Target;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::restores::Restores;
use crate::catalog::SharedIndex;

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

/// Sends work to the status writer.
#[derive(Clone)]
pub struct Tally {
    tx: mpsc::UnboundedSender<Msg>,
}

enum Msg {
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

/// The status writer's settings.
pub struct TallyConfig {
    /// Namespace of the webhook replicas' pods: stale per-replica entries are pruned when their
    /// pod no longer exists there.
    pub replicas_namespace: String,
    /// `--restore-run-retention`: how long a completed RestoreRun is kept (longer while a pod it
    /// ran hooks on still exists).
    pub restore_run_retention: Duration,
}

/// Starts the writer; it runs until `stop` is cancelled.
pub fn spawn(
    client: kube::Client,
    index: Arc<SharedIndex>,
    restores: Restores,
    config: TallyConfig,
    stop: CancellationToken,
) -> (Tally, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(
        Writer {
            client,
            index,
            config,
            restores,
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
    (Tally { tx }, task)
}

/// What one write of a target says, read from the restore model at once (the model is shared:
/// it is never held across the write).
struct Snapshot {
    totals: Totals,
    failed_pods: Vec<FailedPod>,
    one_pod: Vec<OnePodRun>,
    missed_init_pods: Vec<String>,
}

struct Writer {
    client: kube::Client,
    index: Arc<SharedIndex>,
    config: TallyConfig,
    restores: Restores,
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
        let mut compiled = self.index.subscribe();
        let mut flush_at: Option<tokio::time::Instant> = None;
        let mut ready_retry = tokio::time::interval(READY_RETRY);
        let mut sweep = tokio::time::interval(RETENTION_SWEEP);
        // Retention is only decided once the live pods are known: the first sweep follows the
        // first list.
        let mut swept_once = false;
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
                    self.dirty.append(&mut self.restores.take_dirty());
                    for _ in 0..3 {
                        self.urgent.append(&mut self.dirty);
                        if self.urgent.is_empty() {
                            break;
                        }
                        self.flush().await;
                    }
                    return;
                }
                _ = self.restores.counts_changed() => {
                    self.dirty.append(&mut self.restores.take_dirty());
                }
                _ = self.restores.listed(), if !swept_once => {
                    swept_once = true;
                    self.sweep().await;
                }
                msg = rx.recv() => match msg {
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
                _ = sweep.tick(), if swept_once => self.sweep().await,
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

    /// What a write of `target` over a status whose `retired` is `prior` says.
    fn snapshot(&self, target: &Target, prior: HookCounts) -> Snapshot {
        self.restores.read(|index| {
            let Some(sum) = index.sum(target) else {
                return Snapshot {
                    totals: Totals {
                        counts: prior,
                        retired: prior,
                        planned: 0,
                        folded: Vec::new(),
                    },
                    failed_pods: Vec::new(),
                    one_pod: Vec::new(),
                    missed_init_pods: Vec::new(),
                };
            };
            Snapshot {
                totals: sum.totals(prior),
                failed_pods: sum
                    .failed_pods()
                    .take(MAX_LISTED_PODS)
                    .map(|f| FailedPod {
                        namespace: f.namespace.to_string(),
                        pod: f.pod.to_string(),
                        hook: f.hook.to_string(),
                        message: crate::controller::events::truncate(f.message, 512),
                    })
                    .collect(),
                one_pod: sum
                    .one_pod_runs()
                    .take(MAX_LISTED_PODS)
                    .map(|(namespace, pod, hook, phase)| OnePodRun {
                        hook: hook.to_string(),
                        namespace: namespace.to_string(),
                        pod: pod.to_string(),
                        phase: format!("{phase:?}"),
                    })
                    .collect(),
                missed_init_pods: sum.missed_init_pods().take(MAX_LISTED_PODS).collect(),
            }
        })
    }

    /// The tombstones a write folded into `retired` are forgotten once it landed.
    fn folded(&self, target: &Target, ids: &[u64]) {
        if !ids.is_empty() {
            self.restores.folded(target, ids);
        }
    }

    fn forget(&mut self, target: &Target) {
        self.restores.forget_target(target);
        self.written.remove(target);
    }
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
