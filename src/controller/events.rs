//! Kubernetes Events on pods (`HookFailed`, `HookRetrying`, `HookRefused`, `HooksCompleted`,
//! `PlanRejected`, `StatusRolledBack`, `RestoreHooksNotApplied`), on namespaces (restore windows)
//! and on hook objects (`InitHooksMissed`, `LateHooksAdded`): what an operator sees in `kubectl
//! describe`.
//!
//! Best effort, and off the workers' path (docs/behaviour.md §6.12): [`EventSink::publish`] only
//! queues the Event and returns; one [`EventSender`] per controller sends them, a few at a time,
//! retrying what the API server refused for now. A pod worker never waits for an Event, and a
//! full queue drops the Event (counted and logged) rather than hold a worker: an Event is worth
//! less than a hook started on time, and the status annotation already says everything.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};
use prometheus::IntCounterVec;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::backoff::{ApiBackoff, is_transient};
use crate::metrics::Metrics;

/// A hook failed, or was recorded `Failed` without running (expired, pod gone, out of scope,
/// interrupted): the message and the tail of its stderr.
pub const HOOK_FAILED: &str = "HookFailed";
/// An attempt of a hook with `retry` failed in a way its policy retries: which attempt, why, and
/// when the next one starts.
pub const HOOK_RETRYING: &str = "HookRetrying";
/// An annotation exec hook nobody entitled to exec into the pod authored: recorded `Failed`,
/// never run.
pub const HOOK_REFUSED: &str = "HookRefused";
/// Every hook of the pod ended: counts of succeeded, failed and skipped, the final label, and the
/// hooks that succeeded with the tails of their stdout (Normal if all succeeded, else Warning).
/// The one Event a pod's successes get (docs/behaviour.md §6.12).
pub const HOOKS_COMPLETED: &str = "HooksCompleted";
/// A pod's plan or status failed verification: nothing of it ran.
pub const PLAN_REJECTED: &str = "PlanRejected";
/// A pod's status no longer showed hooks the controller's record says started: it was restored
/// from the record, nothing re-ran.
pub const STATUS_ROLLED_BACK: &str = "StatusRolledBack";
/// On a RestoreHook or ClusterRestoreHook: pods it selected were created before it, so its init
/// hooks could not apply to them.
pub const INIT_HOOKS_MISSED: &str = "InitHooksMissed";
/// On a RestoreHook or ClusterRestoreHook: its exec hooks were added to pods admitted before it.
pub const LATE_HOOKS_ADDED: &str = "LateHooksAdded";

/// On a restored pod the webhook never saw (admitted while it was unavailable): its hooks were
/// not applied.
pub const NOT_ADMITTED: &str = "RestoreHooksNotApplied";

/// On a namespace a Velero Restore writes to: the leader labelled it as a restore namespace.
pub const RESTORE_WINDOW_OPENED: &str = "RestoreWindowOpened";
/// On a namespace: the leader removed the label it set, the Restore's window being over.
pub const RESTORE_WINDOW_CLOSED: &str = "RestoreWindowClosed";
/// On a namespace: a restore-namespace label the leader did not set outlived its Restore's
/// window; it brings no pod into scope any more and should be removed.
pub const RESTORE_WINDOW_OVER: &str = "RestoreWindowOver";

/// Every reason the controller writes Events with, [`NOT_ADMITTED`] included: a
/// new reason belongs here, and `tests/docs_tables.rs` checks that docs/behaviour.md §6.12 lists
/// each.
pub const REASONS: &[&str] = &[
    HOOK_FAILED,
    HOOK_RETRYING,
    HOOK_REFUSED,
    HOOKS_COMPLETED,
    PLAN_REJECTED,
    STATUS_ROLLED_BACK,
    INIT_HOOKS_MISSED,
    LATE_HOOKS_ADDED,
    NOT_ADMITTED,
    RESTORE_WINDOW_OPENED,
    RESTORE_WINDOW_CLOSED,
    RESTORE_WINDOW_OVER,
];

/// The component name in Events (`restore-hooks describe` selects the pods' Events by it).
pub const COMPONENT: &str = restore_hooks_core::restore::report::CONTROLLER_COMPONENT;

/// Event messages are capped like the API server's (1 KiB is plenty with the output tails).
pub const MAX_MESSAGE: usize = 1024;

/// Events waiting to be sent, at most (docs/behaviour.md §6.12). At about 1.5 KiB each, 6 MiB
/// at worst; one Event per pod plus the warnings covers a restore of thousands of pods while the
/// API server is slow, and beyond that Events are dropped rather than memory or workers spent.
pub const QUEUE_CAPACITY: usize = 4096;

/// Events being sent at once: enough to keep up with a large restore's one Event per pod, few
/// enough that Events never compete with the workers' status writes for the API server.
const IN_FLIGHT: usize = 4;

/// Tries per Event: the first and up to four retries of a refusal the API server means as "not
/// now" (429, 5xx, no connection; `crate::backoff::is_transient`).
const ATTEMPTS: u32 = 5;

/// How long one create may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`EventSender::run`] keeps sending the queued Events after it is told to stop
/// (docs/behaviour.md §6.12): the `HooksCompleted` of the last hooks a stopping leader ran are
/// in that queue, but a shutdown must not wait on a slow API server.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Queues Events as this replica (its identity is their reporting instance); cheap to clone.
/// [`EventSender`] sends them.
#[derive(Clone)]
pub struct EventSink {
    queue: mpsc::Sender<Event>,
    instance: Arc<str>,
    dropped: IntCounterVec,
}

/// Sends the Events [`EventSink`]s queued: [`EventSender::run`], one task per controller.
pub struct EventSender {
    queue: mpsc::Receiver<Event>,
    sent: IntCounterVec,
    dropped: IntCounterVec,
}

/// An Event's `type` (docs/behaviour.md §6.12 gives each reason's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Things went as planned.
    Normal,
    /// Something an operator should look at: a hook that failed, was refused or was not applied.
    Warning,
}

impl EventSink {
    /// A sink and the sender of what it queues, with room for `capacity` Events
    /// ([`QUEUE_CAPACITY`] in the controller). `instance`: this replica's name (`--identity`),
    /// written as each Event's `reportingInstance`.
    pub fn channel(instance: String, metrics: &Metrics, capacity: usize) -> (Self, EventSender) {
        let (tx, rx) = mpsc::channel(capacity);
        let sink = Self {
            queue: tx,
            instance: instance.into(),
            dropped: metrics.events_dropped.clone(),
        };
        let sender = EventSender {
            queue: rx,
            sent: metrics.events_sent.clone(),
            dropped: metrics.events_dropped.clone(),
        };
        (sink, sender)
    }

    /// Queues a core/v1 Event about `about` and returns at once: the Event is sent in the
    /// background, or dropped (counted in `restore_hooks_events_dropped_total`, logged) when the
    /// queue is full or the controller is stopping.
    pub fn publish(&self, about: &Regarding, type_: EventType, reason: &str, message: &str) {
        let event = self.event(about, type_, reason, message);
        let namespace = about.namespace.as_deref().unwrap_or("");
        let why = match self.queue.try_send(event) {
            Ok(()) => return,
            Err(TrySendError::Full(_)) => "queue_full",
            Err(TrySendError::Closed(_)) => "shutdown",
        };
        self.dropped.with_label_values(&[why]).inc();
        if why == "queue_full" {
            warn!(
                kind = about.kind, namespace, name = %about.name, reason,
                capacity = self.queue.max_capacity(),
                "Event dropped: {} Events already wait to be sent, the API server is accepting \
                 them slower than they come (restore_hooks_events_sent_total{{result=\"failed\"}} \
                 and restore_hooks_api_throttled_total tell whether it refuses them); what it \
                 told of is still recorded in the pod's restore-hooks.dev/status and the RestoreRun",
                self.queue.max_capacity()
            );
        } else {
            warn!(
                kind = about.kind, namespace, name = %about.name, reason,
                "Event dropped: the controller is stopping and no longer sends Events"
            );
        }
    }

    /// The Event as the API server gets it: timestamps of now, when it happened, not when it is
    /// sent.
    fn event(&self, about: &Regarding, type_: EventType, reason: &str, message: &str) -> Event {
        // Events of cluster-scoped objects live in `default`, as kubectl looks for them.
        let ns = about
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let now = jiff::Timestamp::now();
        Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", about.name)),
                namespace: Some(ns),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some(about.api_version.to_string()),
                kind: Some(about.kind.to_string()),
                name: Some(about.name.clone()),
                namespace: about.namespace.clone(),
                uid: about.uid.clone(),
                resource_version: about.resource_version.clone(),
                ..Default::default()
            },
            reason: Some(reason.to_string()),
            message: Some(truncate(message, MAX_MESSAGE)),
            type_: Some(
                match type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            source: Some(EventSource {
                component: Some(COMPONENT.to_string()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.to_string()),
            reporting_instance: Some(self.instance.to_string()),
            action: Some("Exec".to_string()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            ..Default::default()
        }
    }
}

type Sending = Pin<Box<dyn Future<Output = ()> + Send>>;

impl EventSender {
    /// Sends queued Events, [`IN_FLIGHT`] at a time, until `stop` is cancelled or every sink is
    /// dropped; then stops taking Events and sends what is queued for at most
    /// [`FLUSH_TIMEOUT`], dropping (and counting) the rest.
    pub async fn run(mut self, client: kube::Client, stop: CancellationToken) {
        let mut in_flight: FuturesUnordered<Sending> = FuturesUnordered::new();
        self.pump(&client, &mut in_flight, Some(&stop)).await;
        // Sinks still held (by workers that end after this) see a closed queue from now on.
        self.queue.close();
        let flushed =
            tokio::time::timeout(FLUSH_TIMEOUT, self.pump(&client, &mut in_flight, None)).await;
        if flushed.is_err() {
            let left = in_flight.len() + self.queue.len();
            self.dropped
                .with_label_values(&["shutdown"])
                .inc_by(left as u64);
            warn!(
                left,
                "stopping: {left} Event(s) not sent within {FLUSH_TIMEOUT:?}, dropped (the API \
                 server is slow or unreachable)"
            );
        }
    }

    /// Starts sends as room frees up; returns once `stop` is cancelled, or once the queue is
    /// closed and empty and nothing is in flight.
    async fn pump(
        &mut self,
        client: &kube::Client,
        in_flight: &mut FuturesUnordered<Sending>,
        stop: Option<&CancellationToken>,
    ) {
        let stopped = async {
            match stop {
                Some(stop) => stop.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(stopped);
        let mut queue_open = true;
        loop {
            if !queue_open && in_flight.is_empty() {
                return;
            }
            tokio::select! {
                biased;
                () = &mut stopped => return,
                Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
                event = self.queue.recv(), if queue_open && in_flight.len() < IN_FLIGHT => {
                    match event {
                        Some(event) => in_flight.push(Box::pin(send(
                            client.clone(),
                            event,
                            self.sent.clone(),
                        ))),
                        None => queue_open = false,
                    }
                }
            }
        }
    }
}

/// Creates one Event, retrying a transient refusal with backoff; counts the result.
async fn send(client: kube::Client, event: Event, sent: IntCounterVec) {
    let ns = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client, &ns);
    let name = event.involved_object.name.clone().unwrap_or_default();
    let kind = event.involved_object.kind.clone().unwrap_or_default();
    let reason = event.reason.clone().unwrap_or_default();
    let mut backoff = ApiBackoff::new(Duration::from_millis(500), Duration::from_secs(8));
    for attempt in 1..=ATTEMPTS {
        let error =
            match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &event))
                .await
            {
                Ok(Ok(_)) => {
                    sent.with_label_values(&["created"]).inc();
                    return;
                }
                Ok(Err(e)) if is_transient(&e) && attempt < ATTEMPTS => e,
                Ok(Err(e)) => {
                    sent.with_label_values(&["failed"]).inc();
                    warn!(%kind, namespace = %ns, %name, %reason, attempts = attempt, error = %e,
                      "could not create Event");
                    return;
                }
                // Not retried: the API server may have created it, and a second one would tell of
                // the same outcome twice.
                Err(_) => {
                    sent.with_label_values(&["failed"]).inc();
                    warn!(%kind, namespace = %ns, %name, %reason, attempts = attempt,
                      "creating an Event timed out after {REQUEST_TIMEOUT:?}");
                    return;
                }
            };
        let pause = backoff.after(Some(&error));
        debug!(%kind, namespace = %ns, %name, %reason, attempt, error = %error, ?pause,
               "creating an Event failed for now; retrying");
        tokio::time::sleep(pause).await;
    }
}

/// The object an Event is about.
#[derive(Clone, Debug)]
pub struct Regarding {
    /// `v1`, `velero.io/v1` or `restore-hooks.dev/v1alpha1`.
    pub api_version: &'static str,
    /// `Pod`, `Restore`, `RestoreHook` or `ClusterRestoreHook`.
    pub kind: &'static str,
    /// `None` for a cluster-scoped object: its Events are written in `default`.
    pub namespace: Option<String>,
    /// The object's name (the Event's name is generated from it).
    pub name: String,
    /// `None` when not known (hook objects): the Event then refers to the object by name only.
    pub uid: Option<String>,
    /// The version of the object the Event is about; `None` when not known (hook objects).
    pub resource_version: Option<String>,
}

impl Regarding {
    /// A pod, as the controller last saw it.
    pub fn pod(pod: &super::slim_pod::PodState) -> Self {
        Self {
            api_version: "v1",
            kind: "Pod",
            namespace: Some(pod.namespace.clone()),
            name: pod.name.clone(),
            uid: Some(pod.uid.clone()),
            resource_version: Some(pod.resource_version.clone()),
        }
    }

    /// A RestoreHook, ClusterRestoreHook or Velero Restore (`namespace` `None` for a
    /// ClusterRestoreHook), by name only.
    pub fn hook_object(
        kind: restore_hooks_core::hooks::compiled::SourceKind,
        namespace: Option<&str>,
        name: &str,
    ) -> Self {
        use restore_hooks_core::hooks::compiled::SourceKind;
        Self {
            api_version: match kind {
                SourceKind::VeleroRestore => "velero.io/v1",
                _ => "restore-hooks.dev/v1alpha1",
            },
            kind: match kind {
                SourceKind::VeleroRestore => "Restore",
                SourceKind::ClusterRestoreHook => "ClusterRestoreHook",
                SourceKind::RestoreHook => "RestoreHook",
            },
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            uid: None,
            resource_version: None,
        }
    }
}

/// At most `max` bytes, cut on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Regarding {
        Regarding {
            api_version: "v1",
            kind: "Pod",
            namespace: Some("shop".into()),
            name: name.into(),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("1".into()),
        }
    }

    fn dropped(metrics: &Metrics, why: &str) -> u64 {
        metrics.events_dropped.with_label_values(&[why]).get()
    }

    /// docs/behaviour.md §6.12: a worker never waits for an Event. Nothing sends here, so the
    /// queue stays full: `publish` drops and counts the Event instead of waiting for room.
    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let metrics = Metrics::new();
        let (sink, mut sender) = EventSink::channel("replica-a".into(), &metrics, 2);
        for name in ["web-0", "web-1", "web-2", "web-3"] {
            // Synchronous: were it to wait for room, this test would never end.
            sink.publish(&pod(name), EventType::Normal, HOOKS_COMPLETED, "done");
        }
        assert_eq!(dropped(&metrics, "queue_full"), 2);
        assert_eq!(dropped(&metrics, "shutdown"), 0);
        let queued: Vec<String> = std::iter::from_fn(|| sender.queue.try_recv().ok())
            .map(|e| e.involved_object.name.unwrap())
            .collect();
        assert_eq!(queued, ["web-0", "web-1"], "the first ones stay queued");

        // Once the sender stopped taking Events, what comes later is dropped as `shutdown`.
        sender.queue.close();
        sink.publish(&pod("web-4"), EventType::Warning, HOOK_FAILED, "late");
        assert_eq!(dropped(&metrics, "shutdown"), 1);
        assert_eq!(dropped(&metrics, "queue_full"), 2);
    }

    /// The Event is complete when queued: message capped at 1 KiB on a character boundary,
    /// cluster-scoped objects' Events in `default`, this replica as the reporting instance.
    #[test]
    fn a_queued_event_is_complete() {
        let metrics = Metrics::new();
        let (sink, mut sender) = EventSink::channel("replica-a".into(), &metrics, 4);
        let long = "é".repeat(MAX_MESSAGE);
        sink.publish(&pod("web-0"), EventType::Warning, HOOK_FAILED, &long);
        let crh = Regarding::hook_object(
            restore_hooks_core::hooks::compiled::SourceKind::ClusterRestoreHook,
            None,
            "all-dbs",
        );
        sink.publish(&crh, EventType::Normal, LATE_HOOKS_ADDED, "added");

        let e = sender.queue.try_recv().unwrap();
        let message = e.message.unwrap();
        assert!(message.len() <= MAX_MESSAGE && message.len() > MAX_MESSAGE - 2);
        assert!(message.chars().all(|c| c == 'é'));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.reporting_instance.as_deref(), Some("replica-a"));
        assert_eq!(e.involved_object.uid.as_deref(), Some("uid-web-0"));

        let e = sender.queue.try_recv().unwrap();
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.involved_object.namespace, None);
        assert_eq!(
            e.involved_object.kind.as_deref(),
            Some("ClusterRestoreHook")
        );
    }
}
