//! The watch and the per-pod workers.
//!
//! One resilient watch (`watcher` with backoff: it relists after API errors and dropped
//! connections) over pods labelled `restore-hooks.dev/exec=pending` feeds one worker task per pod.
//! A worker holds the latest observed pod, runs the state machine ([`super::state::decide`]) and
//! acts on its decision. Hooks of one pod therefore run strictly one after another; hooks of
//! different pods run in parallel, bounded by `--max-concurrent-pods` exec slots.
//!
//! Ordering for at-most-once: a hook is recorded `Running` (merge patch with the pod's
//! resourceVersion) before its exec starts; a conflicting write is never retried blindly but
//! re-read and decided again, so a hook whose `Running` record another writer won is not started.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_pods};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecPlan, ExecStatus, HookPhase, PLAN_ANNOTATION,
};
use crate::metrics::Metrics;

use super::events::{EventSink, EventType, HOOK_FAILED, HOOK_SUCCEEDED, HOOKS_COMPLETED};
use super::exec::Exec;
use super::restorehook::RestoreHookStatus;
use super::state::{Action, PodView, Presence, decide, go_duration, timestamp};
use super::status::{WriteError, recorded, set_exec_label, write_status};

/// What the controller shares between pod workers.
pub struct Shared {
    pub client: kube::Client,
    pub exec: Arc<dyn Exec>,
    pub metrics: Metrics,
    pub events: EventSink,
    pub restorehooks: RestoreHookStatus,
    /// Exec slots (`--max-concurrent-pods`): a pod holds one while one of its hooks runs.
    pub slots: Arc<Semaphore>,
}

/// What a worker knows about its pod.
#[derive(Clone)]
enum Observed {
    Pod(Arc<Pod>),
    /// The watch says the pod left the selection (deleted, or relabelled by someone else):
    /// the worker confirms with a read.
    MaybeGone,
}

type Key = (String, String);

struct Worker {
    uid: String,
    tx: watch::Sender<Observed>,
}

/// Watches pending pods and runs their hooks until `term` is cancelled (shutdown or lost
/// leadership); then stops starting execs, lets running ones finish and record their result, and
/// returns.
pub async fn serve_pods(shared: Arc<Shared>, term: CancellationToken) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let selector = format!("{EXEC_LABEL}={EXEC_PENDING}");
    let mut stream = watch_pods(api, watcher::Config::default().labels(&selector))
        .default_backoff()
        .boxed();
    // Workers stop with `term`, or when this watch ends (the caller starts a new one).
    let term = term.child_token();
    let mut workers: HashMap<Key, Worker> = HashMap::new();
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
                        w.tx.send_replace(Observed::MaybeGone);
                    }
                }
                Some(Ok(Event::Init)) => relisted = Some(HashSet::new()),
                Some(Ok(Event::InitDone)) => {
                    if let Some(seen) = relisted.take() {
                        for (key, w) in &workers {
                            if !seen.contains(key) {
                                w.tx.send_replace(Observed::MaybeGone);
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

fn key_of(pod: &Pod) -> Key {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

fn dispatch(
    shared: &Arc<Shared>,
    term: &CancellationToken,
    workers: &mut HashMap<Key, Worker>,
    tasks: &mut JoinSet<(Key, String)>,
    pod: Pod,
) {
    let key = key_of(&pod);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let pod = Arc::new(pod);
    if let Some(w) = workers.get(&key) {
        if w.uid == uid {
            w.tx.send_replace(Observed::Pod(pod));
            return;
        }
        // Same name, new pod: the old worker confirms its pod is gone and finishes.
        w.tx.send_replace(Observed::MaybeGone);
    }
    let (tx, rx) = watch::channel(Observed::Pod(pod));
    workers.insert(
        key.clone(),
        Worker {
            uid: uid.clone(),
            tx,
        },
    );
    let worker = PodWorker::new(shared.clone(), key.clone(), uid.clone(), rx, term.clone());
    tasks.spawn(async move {
        worker.run().await;
        (key, uid)
    });
}

/// Exponential backoff for API errors: 200 ms doubling to 10 s.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Backoff(Duration::from_millis(200))
    }
    fn next(&mut self) -> Duration {
        let d = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(10));
        d
    }
    fn reset(&mut self) {
        *self = Backoff::new();
    }
}

struct PodWorker {
    shared: Arc<Shared>,
    api: Api<Pod>,
    namespace: String,
    name: String,
    uid: String,
    rx: watch::Receiver<Observed>,
    term: CancellationToken,
    backoff: Backoff,
    /// The last pod object seen, for Events and the plan once the pod is gone.
    last: Option<Arc<Pod>>,
}

/// How a step ended.
enum Step {
    /// Decide again with this observation.
    Again(Observed),
    /// The worker is done with this pod.
    Stop,
}

impl PodWorker {
    fn new(
        shared: Arc<Shared>,
        (namespace, name): Key,
        uid: String,
        rx: watch::Receiver<Observed>,
        term: CancellationToken,
    ) -> Self {
        let api = Api::namespaced(shared.client.clone(), &namespace);
        Self {
            shared,
            api,
            namespace,
            name,
            uid,
            rx,
            term,
            backoff: Backoff::new(),
            last: None,
        }
    }

    fn pod_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    async fn run(mut self) {
        let mut observed = self.rx.borrow_and_update().clone();
        loop {
            if self.term.is_cancelled() {
                return;
            }
            let step = match observed {
                Observed::Pod(pod) => self.step(pod).await,
                Observed::MaybeGone => self.confirm().await,
            };
            match step {
                Step::Again(next) => observed = next,
                Step::Stop => return,
            }
        }
    }

    /// Reads the pod after the watch lost sight of it.
    async fn confirm(&mut self) -> Step {
        match self.api.get_opt(&self.name).await {
            Ok(Some(pod)) if pod.metadata.uid.as_deref() == Some(self.uid.as_str()) => {
                if is_pending(&pod) || pod.metadata.deletion_timestamp.is_some() {
                    Step::Again(Observed::Pod(Arc::new(pod)))
                } else {
                    debug!(pod = %self.pod_ref(), "pod no longer pending (finished elsewhere)");
                    Step::Stop
                }
            }
            Ok(_) => {
                self.gone().await;
                Step::Stop
            }
            Err(e) => self.api_error("reading the pod", e).await,
        }
    }

    async fn api_error(&mut self, what: &str, e: impl std::fmt::Display) -> Step {
        let wait = self.backoff.next();
        warn!(pod = %self.pod_ref(), error = %e, retry_in = ?wait, "{what} failed; retrying");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.term.cancelled() => return Step::Stop,
        }
        self.refresh().await
    }

    /// A fresh read of the pod (after a conflict or an error).
    async fn refresh(&mut self) -> Step {
        match self.api.get_opt(&self.name).await {
            Ok(Some(pod)) if pod.metadata.uid.as_deref() == Some(self.uid.as_str()) => {
                Step::Again(Observed::Pod(Arc::new(pod)))
            }
            Ok(_) => Step::Again(Observed::MaybeGone),
            Err(e) => {
                let wait = self.backoff.next();
                warn!(pod = %self.pod_ref(), error = %e, retry_in = ?wait, "reading the pod failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => Step::Again(Observed::MaybeGone),
                    _ = self.term.cancelled() => Step::Stop,
                }
            }
        }
    }

    /// Next watch observation (or the deadline, or the end of leadership).
    async fn wait(&mut self, deadline: Option<Timestamp>, current: Arc<Pod>) -> Step {
        let sleep = async {
            match deadline {
                Some(d) => {
                    let left = d.duration_since(Timestamp::now());
                    let left = Duration::try_from(left).unwrap_or_default();
                    // Re-decide just after the deadline, not just before it.
                    tokio::time::sleep(left + Duration::from_millis(10)).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = self.rx.changed() => match changed {
                Ok(()) => Step::Again(self.rx.borrow_and_update().clone()),
                Err(_) => Step::Stop,
            },
            _ = sleep => Step::Again(Observed::Pod(current)),
            _ = self.term.cancelled() => Step::Stop,
        }
    }

    fn plan(&self, pod: &Pod) -> Result<ExecPlan, String> {
        let raw = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PLAN_ANNOTATION))
            .ok_or_else(|| format!("the pod has no {PLAN_ANNOTATION} annotation"))?;
        ExecPlan::from_annotation(raw)
            .map_err(|e| format!("the {PLAN_ANNOTATION} annotation is not a valid plan: {e}"))
    }

    async fn step(&mut self, pod: Arc<Pod>) -> Step {
        if pod.metadata.uid.as_deref() != Some(self.uid.as_str()) {
            return Step::Again(Observed::MaybeGone);
        }
        self.last = Some(pod.clone());
        if !is_pending(&pod) && pod.metadata.deletion_timestamp.is_none() {
            // Finished (by us, from a stale event, or by another replica): nothing to do.
            return Step::Stop;
        }
        let plan = match self.plan(&pod) {
            Ok(p) => p,
            Err(msg) => return self.unusable(&pod, msg).await,
        };
        let recorded = match recorded(&pod) {
            Ok(r) => r,
            // An unreadable status might hide a started hook: running anything could run it twice.
            Err(e) => {
                return self
                    .unusable(
                        &pod,
                        format!("the restore-hooks.dev/status annotation is unreadable ({e}); no hook is run, to keep hooks at most once"),
                    )
                    .await;
            }
        };
        let view = PodView::from_pod(&pod);
        let now = Timestamp::now();
        let decision = decide(&plan, recorded.as_ref(), &view, now);
        let rv = pod.metadata.resource_version.clone().unwrap_or_default();

        if let Action::StartHook { index } = decision.action {
            return self
                .start(pod, &plan, decision.status, decision.settled, index)
                .await;
        }
        if decision.write {
            match write_status(&self.api, &self.name, &rv, &decision.status).await {
                Ok(updated) => {
                    self.backoff.reset();
                    self.settled(&updated, &plan, &decision.status, &decision.settled)
                        .await;
                    return Step::Again(Observed::Pod(Arc::new(updated)));
                }
                Err(e) => return self.write_failed(e).await,
            }
        }
        match decision.action {
            Action::WaitUntil(d) => {
                debug!(pod = %self.pod_ref(), deadline = %d, "waiting for the next hook's container");
                self.wait(Some(d), pod).await
            }
            Action::WaitForChange => self.wait(None, pod).await,
            Action::Finish { label } => self.finish(&pod, &plan, &decision.status, label).await,
            Action::StartHook { .. } => unreachable!("handled above"),
        }
    }

    /// A write of the status failed: decide what that means.
    async fn write_failed(&mut self, e: WriteError) -> Step {
        match e {
            WriteError::Conflict => {
                debug!(pod = %self.pod_ref(), "status write conflicted; re-reading the pod");
                self.refresh().await
            }
            WriteError::Gone => {
                // Report from what was persisted (the last pod seen), not from the write that
                // failed: that one may hold a Running record for an exec that never started.
                self.gone().await;
                Step::Stop
            }
            WriteError::Api(e) => self.api_error("writing the hook status", e).await,
        }
    }

    /// Runs hook `index`: record Running, exec, record the result.
    async fn start(
        &mut self,
        pod: Arc<Pod>,
        plan: &ExecPlan,
        mut status: ExecStatus,
        settled: Vec<usize>,
        index: usize,
    ) -> Step {
        // Take the exec slot before writing Running, so that a Running record always means the
        // exec is about to start, not that it waits for a slot.
        let permit = tokio::select! {
            p = self.shared.slots.clone().acquire_owned() => p.expect("the slot semaphore is never closed"),
            _ = self.term.cancelled() => return Step::Stop,
        };
        if self.term.is_cancelled() {
            return Step::Stop;
        }
        if self.rx.has_changed().unwrap_or(false) {
            // The pod changed while we waited for a slot: decide on the newer state.
            return Step::Again(self.rx.borrow_and_update().clone());
        }
        let hook = &plan.hooks[index];
        let started_at = timestamp(Timestamp::now());
        {
            let entry = &mut status.hooks[index];
            entry.phase = HookPhase::Running;
            entry.started_at = Some(started_at.clone());
        }
        let rv = pod.metadata.resource_version.clone().unwrap_or_default();
        let running = match write_status(&self.api, &self.name, &rv, &status).await {
            Ok(p) => p,
            Err(e) => return self.write_failed(e).await,
        };
        self.backoff.reset();
        self.settled(&running, plan, &status, &settled).await;
        info!(
            pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index,
            source = %hook.source, container = %hook.container, command = ?hook.command,
            timeout = %go_duration(hook.exec_timeout_ms), "hook started"
        );
        let clock = Instant::now();
        let outcome = self
            .shared
            .exec
            .exec(
                &self.namespace,
                &self.name,
                &hook.container,
                &hook.command,
                Duration::from_millis(hook.exec_timeout_ms),
            )
            .await;
        let elapsed = clock.elapsed();
        drop(permit);
        self.shared
            .metrics
            .exec_duration
            .observe(elapsed.as_secs_f64());
        let mut result = status.hooks[index].clone();
        result.phase = if outcome.succeeded() {
            HookPhase::Succeeded
        } else {
            HookPhase::Failed
        };
        result.finished_at = Some(timestamp(Timestamp::now()));
        result.exit_code = outcome.exit_code;
        result.message = outcome.message();
        result.stdout = outcome.stdout_tail.clone();
        result.stderr = outcome.stderr_tail.clone();
        info!(
            pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index,
            source = %hook.source, container = %hook.container,
            result = if outcome.succeeded() { "succeeded" } else { "failed" },
            exit_code = outcome.exit_code, duration_ms = elapsed.as_millis() as u64,
            result_message = %result.message, stdout = %outcome.stdout_tail, stderr = %outcome.stderr_tail,
            "hook finished"
        );
        self.record(Arc::new(running), plan, index, result).await
    }

    /// Writes the result of hook `index` on top of the latest status. Retried through conflicts
    /// (the kubelet updates pod status all the time) and API errors; given up only when the pod
    /// is gone, or when the status no longer shows our Running record (someone else, e.g. a new
    /// leader after we lost the Lease mid-exec, already reported the hook interrupted).
    async fn record(
        &mut self,
        mut pod: Arc<Pod>,
        plan: &ExecPlan,
        index: usize,
        result: crate::hooks::plan::HookStatus,
    ) -> Step {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let current = recorded(&pod).ok().flatten();
            let mut status = super::state::align(plan, current.as_ref());
            let ours = status.hooks[index].phase == HookPhase::Running
                && status.hooks[index].started_at == result.started_at;
            if !ours {
                warn!(pod = %self.pod_ref(), hook = %result.name, index, "the hook's Running record was replaced while it ran; its result is only logged");
                return Step::Again(Observed::Pod(pod));
            }
            status.hooks[index] = result.clone();
            // Settle what follows from the result (onError: Fail skips the rest) in the same write.
            let decision = decide(
                plan,
                Some(&status),
                &PodView::from_pod(&pod),
                Timestamp::now(),
            );
            let rv = pod.metadata.resource_version.clone().unwrap_or_default();
            match write_status(&self.api, &self.name, &rv, &decision.status).await {
                Ok(updated) => {
                    self.backoff.reset();
                    let mut done = vec![index];
                    done.extend(decision.settled.iter().copied());
                    self.settled(&updated, plan, &decision.status, &done).await;
                    return Step::Again(Observed::Pod(Arc::new(updated)));
                }
                Err(WriteError::Gone) => {
                    let mut status = decision.status.clone();
                    status.hooks[index] = result.clone();
                    self.gone_with_result(plan, status, index).await;
                    return Step::Stop;
                }
                Err(e) => {
                    if !matches!(e, WriteError::Conflict) {
                        let wait = self.backoff.next();
                        warn!(pod = %self.pod_ref(), hook = %result.name, index, error = %e, retry_in = ?wait, "recording the hook result failed; retrying");
                        // Not cancellable by `term`: the result of an exec that ran must be kept.
                        tokio::time::sleep(wait).await;
                    }
                    if attempts > 50 {
                        error!(pod = %self.pod_ref(), hook = %result.name, index, "giving up recording the hook result; it will be reported interrupted");
                        return Step::Stop;
                    }
                    match self.api.get_opt(&self.name).await {
                        Ok(Some(p)) if p.metadata.uid.as_deref() == Some(self.uid.as_str()) => {
                            pod = Arc::new(p)
                        }
                        Ok(_) => {
                            let mut status = decision.status.clone();
                            status.hooks[index] = result.clone();
                            self.gone_with_result(plan, status, index).await;
                            return Step::Stop;
                        }
                        Err(e) => {
                            warn!(pod = %self.pod_ref(), error = %e, "reading the pod failed; retrying")
                        }
                    }
                }
            }
        }
    }

    /// The pod disappeared after hook `index` ran: report its result and fail the rest.
    async fn gone_with_result(&mut self, plan: &ExecPlan, status: ExecStatus, index: usize) {
        let mut view = self
            .last
            .as_deref()
            .map(PodView::from_pod)
            .unwrap_or_else(empty_view);
        view.presence = Presence::Gone;
        let decision = decide(plan, Some(&status), &view, Timestamp::now());
        let mut done = vec![index];
        done.extend(decision.settled.iter().copied());
        let label = match decision.action {
            Action::Finish { label } => label,
            _ => crate::hooks::plan::EXEC_FAILED,
        };
        if let Some(pod) = self.last.clone() {
            self.settled(&pod, plan, &decision.status, &done).await;
            self.completed(&pod, plan, &decision.status, label).await;
        }
        self.shared
            .restorehooks
            .pod_gone(&self.namespace, &self.uid, plan, &decision.status);
    }

    /// The pod is gone: every hook that did not run fails (Event, log, metric, RestoreHook
    /// status); nothing can be written on the pod any more.
    async fn gone(&mut self) {
        let Some(pod) = self.last.clone() else {
            return;
        };
        let Ok(plan) = self.plan(&pod) else {
            return;
        };
        let status = recorded(&pod).ok().flatten();
        // A Running entry we wrote ourselves cannot be here (start() records its own result), so
        // deciding on the last known status reports exactly the hooks that never ran.
        let mut view = PodView::from_pod(&pod);
        view.presence = Presence::Gone;
        let decision = decide(&plan, status.as_ref(), &view, Timestamp::now());
        warn!(pod = %self.pod_ref(), restore = %plan.restore, not_run = decision.settled.len(), "pod deleted before all hooks ran");
        self.settled(&pod, &plan, &decision.status, &decision.settled)
            .await;
        if !decision.settled.is_empty() {
            self.completed(&pod, &plan, &decision.status, "failed")
                .await;
        }
        self.shared
            .restorehooks
            .pod_gone(&self.namespace, &self.uid, &plan, &decision.status);
    }

    /// The pod's plan or status cannot be used: mark it failed without running anything.
    async fn unusable(&mut self, pod: &Pod, message: String) -> Step {
        error!(pod = %self.pod_ref(), %message, "cannot run this pod's hooks");
        match set_exec_label(&self.api, &self.name, None, crate::hooks::plan::EXEC_FAILED).await {
            Ok(_) | Err(WriteError::Gone) => {
                self.shared
                    .events
                    .publish(pod, EventType::Warning, HOOKS_COMPLETED, &message)
                    .await;
                Step::Stop
            }
            Err(e) => self.api_error("labelling the pod", e).await,
        }
    }

    /// Every hook is terminal: set the label, report.
    async fn finish(
        &mut self,
        pod: &Pod,
        plan: &ExecPlan,
        status: &ExecStatus,
        label: &'static str,
    ) -> Step {
        let rv = pod.metadata.resource_version.as_deref();
        match set_exec_label(&self.api, &self.name, rv, label).await {
            Ok(updated) => {
                self.completed(&updated, plan, status, label).await;
                self.shared.restorehooks.touch(&self.namespace, plan);
                Step::Stop
            }
            Err(WriteError::Gone) => {
                self.completed(pod, plan, status, label).await;
                self.shared.restorehooks.touch(&self.namespace, plan);
                Step::Stop
            }
            Err(WriteError::Conflict) => self.refresh().await,
            Err(e) => self.api_error("labelling the pod", e).await,
        }
    }

    async fn completed(&self, pod: &Pod, plan: &ExecPlan, status: &ExecStatus, label: &str) {
        let count = |p: HookPhase| status.hooks.iter().filter(|h| h.phase == p).count();
        let (ok, failed, skipped) = (
            count(HookPhase::Succeeded),
            count(HookPhase::Failed),
            count(HookPhase::Skipped),
        );
        let message = format!(
            "restore {}: {} hook(s): {ok} succeeded, {failed} failed, {skipped} skipped; {EXEC_LABEL}={label}",
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
            .publish(pod, kind, HOOKS_COMPLETED, &message)
            .await;
    }

    /// Reports hooks that became terminal (after their phase was written, or the pod vanished):
    /// Events, logs, metrics, RestoreHook counts.
    async fn settled(&self, pod: &Pod, plan: &ExecPlan, status: &ExecStatus, which: &[usize]) {
        if which.is_empty() {
            return;
        }
        for &i in which {
            let (hook, entry) = (&plan.hooks[i], &status.hooks[i]);
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
            if entry.phase != HookPhase::Succeeded && !is_exec_result(entry) {
                // Exec results were logged when they arrived; these never ran.
                info!(
                    pod = %self.pod_ref(), restore = %plan.restore, hook = %hook.name, index = i,
                    source = %hook.source, container = %hook.container, result,
                    result_message = %entry.message, "hook not run"
                );
            }
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
                        .publish(pod, EventType::Normal, HOOK_SUCCEEDED, &msg)
                        .await;
                }
                HookPhase::Failed => {
                    let mut msg = format!(
                        "hook {} (#{i}, {}) in container {} failed: {}",
                        hook.name, hook.source, hook.container, entry.message
                    );
                    if !entry.stderr.is_empty() {
                        msg.push_str(&format!("; stderr: {}", entry.stderr.trim_end()));
                    }
                    self.shared
                        .events
                        .publish(pod, EventType::Warning, HOOK_FAILED, &msg)
                        .await;
                }
                _ => {}
            }
        }
        self.shared.restorehooks.touch(&self.namespace, plan);
    }
}

fn is_pending(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EXEC_LABEL))
        .is_some_and(|v| v == EXEC_PENDING)
}

/// True for entries that carry an exec result (they have a start time).
fn is_exec_result(entry: &crate::hooks::plan::HookStatus) -> bool {
    entry.started_at.is_some() && entry.message != super::state::INTERRUPTED
}

fn empty_view() -> PodView {
    PodView {
        presence: Presence::Gone,
        phase: None,
        created: None,
        targets: Default::default(),
        plain_init: Default::default(),
        containers: Default::default(),
    }
}
