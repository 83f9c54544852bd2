//! An exec's result (docs/behaviour.md §6.9, §6.17): written on top of the latest status where
//! the entry it answers is still there, and into the record; or, for an attempt that may be tried
//! again, released, on the pod and in the record.

use jiff::{SignedDuration, Timestamp};
use restore_hooks_core::exec_step::{Context, align, next_step, timestamp};
use restore_hooks_core::hooks::plan::{ExecPlan, HookPhase, HookStatus};
use restore_hooks_core::retry::{Failure, retry_after};
use restore_hooks_core::trust::verify;
use tracing::warn;

use crate::controller::slim_pod::PodState;
use crate::controller::status::WriteError;

use super::{Answers, Finished, Flow, PodWorker, Released};

impl PodWorker {
    /// Releases attempt `result.retries + 1` of hook `index` (it ended in a way that may be
    /// tried again, or never reached the container): the record learns it with its next write,
    /// and the pod's signed status, `Pending` with one more `retries`, says it too, so that a
    /// new leader that finds the record's write lost still knows (docs/behaviour.md §9.5).
    pub(super) fn release(
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
        if !why.given_back {
            self.shared
                .metrics
                .exec_retries
                .with_label_values(&[why.failure.reason()])
                .inc();
        }
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
        result.message = if why.given_back {
            format!(
                "attempt {attempt} was claimed but did not start: {}; the command did not run, \
                 the next attempt starts at {at}",
                why.message
            )
        } else if unavailable {
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
        if !why.given_back {
            warn!(
                pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index,
                source = %hook.source, container = %hook.container, attempt,
                reason = why.failure.reason(), exit_code = why.exit_code,
                duration_ms = why.elapsed.as_millis() as u64, retry_at = %result.retry_at.as_deref().unwrap_or_default(),
                result_message = %why.message, stderr = %result.stderr,
                "hook attempt failed; retrying"
            );
        }
        self.results.push((index, answers, result));
    }

    /// An exec ended: queue its result for the next write.
    pub(super) fn exec_ended(&mut self, f: Finished) {
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
                given_back: false,
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
    pub(super) async fn record(&mut self) -> Flow {
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
                // A claim given back is no outcome: nothing to report but its log line.
                recorded.retain(|i| !self.given_back.remove(i));
                self.report_ended(
                    &updated,
                    &plan,
                    &decision.status,
                    &recorded,
                    &decision.ended,
                );
                self.trusted = Some((plan.clone(), Some(decision.status.clone())));
                self.pod = updated.clone();
                if let Some(label) = finishing {
                    self.completed(&updated, &plan, &decision.status, label);
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
                self.return_unused_tickets();
                tokio::time::sleep(wait).await;
                self.refresh()
            }
        }
    }
}
