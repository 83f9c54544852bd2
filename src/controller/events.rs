//! Kubernetes Events on the pod (`HookSucceeded`, `HookFailed`, `HooksCompleted`): what an
//! operator sees in `kubectl describe pod`. Best effort: a failed Event is logged, never retried
//! at the expense of the hooks.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Resource;
use kube::api::{Api, PostParams};
use tracing::debug;

pub const HOOK_SUCCEEDED: &str = "HookSucceeded";
pub const HOOK_FAILED: &str = "HookFailed";
pub const HOOKS_COMPLETED: &str = "HooksCompleted";

/// The component name in Events.
pub const COMPONENT: &str = "restore-hooks-controller";

/// Event messages are capped like the API server's (1 KiB is plenty with the output tails).
const MAX_MESSAGE: usize = 1024;

#[derive(Clone)]
pub struct EventSink {
    client: kube::Client,
    instance: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventSink {
    pub fn new(client: kube::Client, instance: String) -> Self {
        Self { client, instance }
    }

    /// Creates a core/v1 Event about `pod`.
    pub async fn publish(&self, pod: &Pod, type_: EventType, reason: &str, message: &str) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let now = jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}.")),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some(Pod::api_version(&()).to_string()),
                kind: Some(Pod::kind(&()).to_string()),
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                uid: pod.metadata.uid.clone(),
                resource_version: pod.metadata.resource_version.clone(),
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
                debug!(pod = %name, namespace = %ns, reason, error = %e, "could not create Event")
            }
            Err(_) => debug!(pod = %name, namespace = %ns, reason, "creating an Event timed out"),
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
