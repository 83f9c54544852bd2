//! Starting a hook at most once (docs/behaviour.md §6.9, §6.10): the `Running` record on the
//! pod and the start in the controller's record go out together, and the exec starts only once
//! both landed; a start whose `Running` record never landed is released, never left to end
//! `interrupted`; one the leader could not record before it stopped leading goes back to
//! `Pending` for the next leader.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use restore_hooks_core::exec_step::timestamp;
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
use crate::controller::slots::SlotPermit;
use crate::controller::status::WriteError;

use super::{Answers, Finished, Flow, PodWorker, Released};

/// Writes of a `Running` record taken back, through conflicts with the kubelet's updates.
const UNSTART_ATTEMPTS: u32 = 5;
/// Conflicts a `Running` record whose start is recorded is written again through.
const REWRITE_CONFLICTS: u32 = 5;
/// How long such a write keeps trying while the API server throttles it or is unavailable (the
/// exec slot is held meanwhile), as the record's own writes do.
const REWRITE_BUSY_FOR: Duration = Duration::from_secs(120);

impl PodWorker {
    /// Records hook `index` Running, then starts its exec holding `permit`.
    pub(super) async fn start(
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
