//! Starting a hook at most once (docs/behaviour.md §6.9, §6.10): the `Running` record on the
//! pod and the start in the controller's record go out together, and the exec starts only once
//! both landed; a start whose `Running` record never landed is released, never left to end
//! `interrupted`; one the leader could not record before it stopped leading goes back to
//! `Pending` for the next leader.
//!
//! A hook handed a claim ticket instead of a slot writes its start while it waits (a claim), and
//! its exec starts when the slot comes, without a write in between; a claim whose exec cannot
//! start then (the replica stops leading, the container went down, the wait passed its
//! `waitTimeout`) is given back: released like an attempt the API server was unavailable for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use restore_hooks_core::exec_step::{Presence, align, hook_is_up, timestamp};
use restore_hooks_core::hooks::plan::{ExecPlan, ExecStatus, HookPhase, HookStatus, RunOn};
use restore_hooks_core::hooks::signing::PlanKeys;
use restore_hooks_core::ledger::OnePodStart;
use restore_hooks_core::restore::one_pod::one_pod_key;
use restore_hooks_core::retry::{Failure, retry_after};
use tracing::{debug, info, warn};

use crate::backoff::is_transient;
use crate::hooks::duration::format_go_duration;

use crate::controller::exec::{Ephemeral, ExecOutcome, ExecRequest};
use crate::controller::slim_pod::{PodState, SlimPod};
use crate::controller::slots::{Grant, SlotPermit};
use crate::controller::status::WriteError;

use super::{Answers, Claimed, Finished, Flow, PodWorker, Released, is_older};

/// Writes of a `Running` record taken back, through conflicts with the kubelet's updates.
const UNSTART_ATTEMPTS: u32 = 5;
/// Conflicts a `Running` record whose start is recorded is written again through.
const REWRITE_CONFLICTS: u32 = 5;
/// How long such a write keeps trying while the API server throttles it or is unavailable (the
/// exec slot is held meanwhile), as the record's own writes do.
const REWRITE_BUSY_FOR: Duration = Duration::from_secs(120);
/// A claim older than this is checked against the API server before its exec starts: the watch
/// may lag, and an exec goes to the pod by name, which a new pod of the same name (a
/// StatefulSet's) could hold by now.
const STALE_CLAIM: Duration = Duration::from_secs(5);

impl PodWorker {
    /// Records hook `index` Running, then starts its exec holding the slot `grant` gives, or,
    /// given a claim ticket, queues for the slot as claimed.
    pub(super) async fn start(
        &mut self,
        pod: &Arc<PodState>,
        plan: &ExecPlan,
        mut status: ExecStatus,
        index: usize,
        grant: Grant,
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
            drop(grant);
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
            drop(grant);
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
                matches!(grant, Grant::Claim(_)),
            ),
        );
        let written = match written {
            Err(e) if recorded.is_ok() => self.rewrite_running(&keys, pod, &status, e).await,
            written => written,
        };
        let updated = match written {
            Ok(p) => PodState::from_slim(p),
            Err(e) => {
                drop(grant);
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
                        given_back: false,
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
            drop(grant);
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
        match grant {
            Grant::Slot(permit) => self.launch(plan, index, attempt, permit, granted),
            Grant::Claim(mut ticket) => {
                debug!(pod = %self.pod_ref(), hook = %hook.name, index, attempt, "hook claimed; its exec starts when a slot is free");
                let wait = self.shared.slots.acquire_claimed(&mut ticket);
                self.slot_waits.push((index, wait));
                self.claims.insert(
                    index,
                    Claimed {
                        _ticket: ticket,
                        attempt,
                        since: Instant::now(),
                    },
                );
            }
        }
        Flow::Again
    }

    /// Hook `index`'s claim got its slot: its exec starts, unless the pod or the container is
    /// no longer there for it, or the claim is old and the pod, read again, is not the one it
    /// was written on; then the claim is given back.
    pub(super) async fn launch_claimed(
        &mut self,
        plan: &ExecPlan,
        index: usize,
        permit: SlotPermit,
    ) -> Flow {
        let granted = Instant::now();
        let Some(claim) = self.claims.get(&index) else {
            return Flow::Again;
        };
        let (attempt, stale) = (claim.attempt, claim.since.elapsed() > STALE_CLAIM);
        if stale && !self.maybe_gone {
            match self.read_own_pod().await {
                Ok(Some(fresh)) => {
                    if !is_older(&fresh, &self.pod) {
                        self.pod = fresh;
                    }
                }
                Ok(None) => self.maybe_gone = true,
                Err(e) => {
                    drop(permit);
                    return self
                        .api_error("reading the pod before a claimed hook's exec", e)
                        .await;
                }
            }
        }
        let pod = &self.pod;
        // Read again, the pod must still show this claim's `Running` record.
        let shown_elsewhere = || {
            let ours = self.started.get(&index).map(|h| h.started_at.clone());
            let shown = self
                .verified(pod)
                .ok()
                .and_then(|(_, status)| status)
                .map(|s| align(plan, Some(&s)).hooks[index].started_at.clone());
            shown != ours
        };
        let why = if self.maybe_gone || pod.view.presence != Presence::Present {
            Some("the pod is being deleted or is gone")
        } else if !hook_is_up(plan, &pod.view, index) {
            Some("its container was not up when its exec slot came")
        } else if stale && shown_elsewhere() {
            Some("the pod no longer shows its Running record")
        } else {
            None
        };
        match why {
            None => {
                self.launch(plan, index, attempt, permit, granted);
                self.claims.remove(&index);
            }
            Some(why) => {
                drop(permit);
                self.give_back(plan, index, why);
            }
        }
        Flow::Again
    }

    /// Gives back the claim of hook `index`, whose exec never started: released like an attempt
    /// the API server was unavailable for (it does not count against `retry.attempts`), so it
    /// starts again here or under the next leader (docs/behaviour.md §6.9).
    pub(super) fn give_back(&mut self, plan: &ExecPlan, index: usize, why: &str) {
        let Some(claim) = self.claims.remove(&index) else {
            return;
        };
        self.slot_waits.retain(|(i, _)| *i != index);
        let Some(running) = self.started.remove(&index) else {
            return;
        };
        info!(pod = %self.pod_ref(), restore = %plan.restore, hook = %plan.hooks[index].name, index,
              attempt = claim.attempt, reason = why, "claimed hook given back before its exec started; it starts again");
        self.shared.metrics.exec_claims_given_back.inc();
        self.given_back.insert(index);
        let since = running.started_at.clone();
        let released = Released {
            failure: Failure::Unavailable,
            message: why.to_string(),
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            elapsed: Duration::ZERO,
            given_back: true,
        };
        self.release(plan, index, running, Answers::Running(since), released, 0);
    }

    /// Starts the exec of attempt `attempt` of hook `index`, recorded `Running` and in the
    /// record, holding `permit` until it ends.
    fn launch(
        &mut self,
        plan: &ExecPlan,
        index: usize,
        attempt: u32,
        permit: SlotPermit,
        granted: Instant,
    ) {
        let hook = plan.hooks[index].clone();
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
    }

    /// The start is in the controller's record, but the `Running` record written with it did not
    /// land on the pod (`first`): writes it again on the pod as it is now, as long as the pod
    /// still carries the plan and status the start was decided on (a conflict with the
    /// kubelet's status updates; an API error that may pass) and this replica still leads.
    /// Otherwise the exec never starts: the record holds the start, so the hook is not started
    /// again and ends `interrupted` (docs/behaviour.md §6.9).
    pub(super) async fn rewrite_running(
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
    pub(super) async fn unstart(
        &mut self,
        keys: &PlanKeys,
        index: usize,
        not_started: HookStatus,
        why: crate::controller::ledger::NotRecorded,
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
}
