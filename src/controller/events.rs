//! Kubernetes Events on pods (`HookSucceeded`, `HookFailed`, `HookRetrying`, `HookRefused`,
//! `HooksCompleted`, `PlanRejected`, `StatusRolledBack`, `RestoreHooksNotApplied`) and on hook objects
//! (`InitHooksMissed`, `LateHooksAdded`): what an operator sees in `kubectl describe`. Best
//! effort: a failed Event is logged, never retried at the expense of the hooks.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};
use tracing::warn;

/// A hook succeeded (Normal): the message ends with the tail of its stdout.
pub const HOOK_SUCCEEDED: &str = "HookSucceeded";
/// A hook failed, or was recorded `Failed` without running (expired, pod gone, out of scope,
/// interrupted): the message and the tail of its stderr.
pub const HOOK_FAILED: &str = "HookFailed";
/// An attempt of a hook with `retry` failed in a way its policy retries: which attempt, why, and
/// when the next one starts.
pub const HOOK_RETRYING: &str = "HookRetrying";
/// An annotation exec hook nobody entitled to exec into the pod authored: recorded `Failed`,
/// never run.
pub const HOOK_REFUSED: &str = "HookRefused";
/// Every hook of the pod ended: counts of succeeded, failed and skipped, and the final label
/// (Normal if all succeeded, else Warning).
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
    HOOK_SUCCEEDED,
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
const MAX_MESSAGE: usize = 1024;

/// Writes Events as this replica (its identity is their reporting instance); cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    client: kube::Client,
    instance: String,
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
    /// `instance`: this replica's name (`--identity`), written as each Event's
    /// `reportingInstance`.
    pub fn new(client: kube::Client, instance: String) -> Self {
        Self { client, instance }
    }

    /// Creates a core/v1 Event about `about`.
    pub async fn publish(&self, about: &Regarding, type_: EventType, reason: &str, message: &str) {
        // Events of cluster-scoped objects live in `default`, as kubectl looks for them.
        let ns = about
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let name = about.name.clone();
        let now = jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}.")),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some(about.api_version.to_string()),
                kind: Some(about.kind.to_string()),
                name: Some(name.clone()),
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
            reporting_instance: Some(self.instance.clone()),
            action: Some("Exec".to_string()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        match tokio::time::timeout(
            Duration::from_secs(5),
            api.create(&PostParams::default(), &event),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                warn!(pod = %name, namespace = %ns, reason, error = %e, "could not create Event")
            }
            Err(_) => warn!(pod = %name, namespace = %ns, reason, "creating an Event timed out"),
        }
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
