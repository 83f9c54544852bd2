//! One worker per pending pod: an event loop over its pod's observations, the exec slots it waits
//! for and the execs it runs. It alone writes its pod's status, so hooks of different containers
//! run at the same time without losing each other's results (docs/behaviour.md §6.3).
//!
//! - this module: the worker's state, its loop ([`PodWorker::act`]: confirm, record, verify,
//!   decide, write, start) and its writes;
//! - [`start`]: starting a hook at most once (§6.9): the `Running` record and the record's start;
//! - [`results`]: an exec's result, recorded, or released to be tried again (§6.17);
//! - [`turns`]: what its hooks wait for beyond the pod: `runOn: OnePod`, `after`, the scope;
//! - [`rollback`]: a status behind the controller's record, written back from it (§9.5);
//! - [`gone`], [`refusals`]: a pod that went away, a pod whose plan is refused;
//! - [`reports`]: Events, logs and metrics of the hooks that ended.
//!
//! Ordering for at-most-once (§6.9): a hook is recorded `Running` (merge patch with the pod's
//! resourceVersion) before its exec starts; a conflicting write is never retried blindly but
//! re-read and decided again, so a hook whose `Running` record another writer won is not started.
//! A result is recorded on top of the latest status, only where the entry it answers is still
//! there.

mod gone;
mod refusals;
mod reports;
mod results;
mod rollback;
mod start;
mod turns;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use restore_hooks_core::exec_step::{
    Context, ExecStep, Presence, align, capped, next_step, wait_deadline,
};
use restore_hooks_core::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecPlan, ExecStatus, HookPhase, HookStatus,
};
use restore_hooks_core::hooks::signing::PlanKeys;
use restore_hooks_core::ledger::reconcile;
use restore_hooks_core::retry::Failure;
use restore_hooks_core::trust::{Rejection, verify};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::backoff::ApiBackoff;

use crate::controller::exec::ExecOutcome;
use crate::controller::pods::{Key, Mailbox, Observed, Workers};
use crate::controller::slim_pod::{PodState, SlimPod};
use crate::controller::slots::{ClaimTicket, Grant, SlotWait, Turn};
use crate::controller::status::{WriteError, write_status};

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
    /// A claim given back before its exec started (§6.9): not a failure of the hook.
    given_back: bool,
}

/// A hook whose start is written (its claim), waiting for its exec slot (docs/behaviour.md §6.9).
struct Claimed {
    /// Held until the exec starts or the claim is given back.
    _ticket: ClaimTicket,
    attempt: u32,
    since: std::time::Instant,
}

pub(super) struct PodWorker {
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
    /// Hooks waiting for an exec slot (or a claim ticket); dropping a wait gives up its place.
    slot_waits: Vec<(usize, SlotWait)>,
    granted: Vec<(usize, Grant)>,
    /// Hooks whose start is written, waiting for their slot: also in `running` and `started`.
    claims: std::collections::BTreeMap<usize, Claimed>,
    /// Hooks whose claim was given back at their wait deadline: for the state machine they
    /// waited for a slot (§6.11).
    starved: BTreeSet<usize>,
    /// Claims given back whose `Pending` is not written yet: not a failed attempt, so no
    /// `HookRetrying` Event (the status and the log say why).
    given_back: BTreeSet<usize>,
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

/// The first of `waits` granted a slot or a claim, taken out of the list, with its hook's index;
/// pending while none is (each grant wakes the worker through its channel).
async fn next_slot(waits: &mut Vec<(usize, SlotWait)>) -> (usize, Grant) {
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
    pub(super) fn new(
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
            claims: Default::default(),
            starved: BTreeSet::new(),
            given_back: BTreeSet::new(),
            wake_at: None,
            maybe_gone: false,
            fresh: false,
            started: Default::default(),
            noticed: None,
            wake,
        }
    }

    /// The hooks waiting for a slot, as the state machine asks (claimed ones are `Running`).
    fn awaiting_slot(&self) -> BTreeSet<usize> {
        self.slot_waits
            .iter()
            .map(|(i, _)| *i)
            .filter(|i| !self.claims.contains_key(i))
            .chain(self.starved.iter().copied())
            .collect()
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
    pub(super) async fn run(&mut self) -> (Key, String) {
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
                (i, grant) = next_slot(&mut self.slot_waits), if !self.slot_waits.is_empty() => {
                    if stopping {
                        drop(grant);
                    } else {
                        self.granted.push((i, grant));
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
        if stopping && !self.claims.is_empty() {
            // A claim's exec never starts once this replica stops leading: given back, it starts
            // under the next leader instead of ending interrupted (docs/behaviour.md §6.9).
            if let Some((plan, _)) = self.trusted.clone() {
                let claimed: Vec<usize> = self.claims.keys().copied().collect();
                for i in claimed {
                    self.give_back(
                        &plan,
                        i,
                        "this replica stopped leading before an exec slot was free",
                    );
                }
                return Flow::Again;
            }
        }
        // A claimed hook whose slot came starts now, before anything else is decided: its start
        // is written, and the slot runs nothing until it does.
        if !stopping
            && let Some(at) = self
                .granted
                .iter()
                .position(|(i, g)| matches!(g, Grant::Slot(_)) && self.claims.contains_key(i))
            && let Some((plan, _)) = self.trusted.clone()
        {
            let (i, grant) = self.granted.swap_remove(at);
            let Grant::Slot(permit) = grant else {
                unreachable!("matched a slot above")
            };
            return self.launch_claimed(&plan, i, permit).await;
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
        let claims = &self.claims;
        self.slot_waits.retain(|(i, _)| {
            claims.contains_key(i) || decision.status.hooks[*i].phase == HookPhase::Pending
        });
        // A claim that waited past its hook's waitTimeout is given back: the hook then fails
        // as any hook that got no slot in time (§6.11).
        let now = Timestamp::now();
        let deadlines: Vec<(usize, Timestamp)> = self
            .claims
            .keys()
            .filter_map(|&i| {
                let entry = self.started.get(&i)?;
                Some((i, wait_deadline(&plan.hooks[i], entry, &pod.view)?))
            })
            .collect();
        for &(i, d) in &deadlines {
            if d <= now {
                self.give_back(&plan, i, "no exec slot within its waitTimeout");
                self.starved.insert(i);
            }
        }
        if !self.results.is_empty() {
            return Flow::Again;
        }
        let next_deadline = deadlines.iter().map(|(_, d)| *d).min();
        self.wake_at = match (decision.wake_at, next_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let finishing = decision.finished;
        if decision.write || finishing.is_some() {
            return self.write(&pod, &plan, decision, finishing).await;
        }
        // A granted slot starts its hook if the hook may still start (the pod changed while the
        // worker waited for the slot); otherwise the slot goes back.
        while let Some((i, grant)) = self.granted.pop() {
            if decision.start.contains(&i) && !self.running.contains(&i) {
                return self.start(&pod, &plan, decision.status, i, grant).await;
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

    /// This worker's pod as the API server has it now; `None` when it is gone, or its name now
    /// belongs to another pod (another uid).
    async fn read_own_pod(&self) -> kube::Result<Option<Arc<PodState>>> {
        let pod = self.api().get_opt(&self.name).await?;
        Ok(pod
            .filter(|p| p.metadata.uid.as_deref() == Some(self.uid.as_str()))
            .map(PodState::from_slim))
    }

    async fn api_error(&mut self, what: &str, e: kube::Error) -> Flow {
        let wait = self.api_backoff().after(Some(&e));
        warn!(pod = %self.pod_ref(), error = %e, retry_in = ?wait, "{what} failed; retrying");
        self.return_unused_tickets();
        tokio::time::sleep(wait).await;
        self.maybe_gone = true;
        Flow::Again
    }

    /// Claim tickets handed to this worker and not used yet go back before it backs off: a hook
    /// holding one keeps its place ahead of others (§6.11), and the ticket is handed on. Its hook
    /// queues again when the worker looks next.
    fn return_unused_tickets(&mut self) {
        self.granted.retain(|(_, g)| matches!(g, Grant::Slot(_)));
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
                self.report_ended(&updated, plan, &decision.status, &[], &decision.ended);
                self.pod = updated.clone();
                if let Some(label) = finishing {
                    self.completed(&updated, plan, &decision.status, label);
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
