//! The controller's view of a pod: decoded from the API server's JSON with only the fields the
//! state machine and the checks read, and kept in that shape while the pod waits.
//!
//! A pending pod may wait for hours (a slow container, an unlimited waitTimeout) and a restore can
//! have thousands of them: a whole `Pod` per waiting pod (spec, managedFields, every status field)
//! was most of the controller's memory. [`SlimPod`] is what the watch decodes (everything else is
//! skipped without being built); [`PodState`] is what a worker keeps.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use restore_hooks_core::exec_step::{ContainerState, LastExit, PodView, Presence};
use restore_hooks_core::hooks::labels::{CompactLabels, LabelLookup};
use restore_hooks_core::hooks::plan::{PLAN_ANNOTATION, STATUS_ANNOTATION};
use restore_hooks_core::hooks::signing::{PLAN_SIGNATURE_ANNOTATION, STATUS_SIGNATURE_ANNOTATION};
use restore_hooks_core::hooks::targets::ExecTargets;
use restore_hooks_core::trust::PodFacts;
use serde::{Deserialize, Deserializer};

/// A `v1` Pod as the controller reads it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimPod {
    /// Names, uid, resourceVersion, timestamps, labels and annotations; never `managedFields`.
    #[serde(deserialize_with = "meta_without_managed_fields", default)]
    pub metadata: ObjectMeta,
    /// The containers that can be exec targets.
    #[serde(default)]
    pub spec: Option<SlimSpec>,
    /// The phase and which containers run and are ready.
    #[serde(default)]
    pub status: Option<SlimStatus>,
}

/// `spec`: only the containers' names and whether an init container is a native sidecar.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimSpec {
    /// `spec.containers`.
    #[serde(default)]
    pub containers: Vec<Named>,
    /// `spec.initContainers`: only native sidecars (`restartPolicy: Always`) can be exec
    /// targets.
    #[serde(default)]
    pub init_containers: Option<Vec<Named>>,
}

/// A container of the spec.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Named {
    /// The container's name.
    pub name: String,
    /// `Always` for a native sidecar; only set on init containers.
    #[serde(default)]
    pub restart_policy: Option<String>,
}

/// `status`: what the state machine waits on.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default)]
    pub phase: Option<String>,
    /// Statuses of the regular containers.
    #[serde(default)]
    pub container_statuses: Option<Vec<SlimContainerStatus>>,
    /// Statuses of the init containers, where native sidecars report.
    #[serde(default)]
    pub init_container_statuses: Option<Vec<SlimContainerStatus>>,
}

/// One container's status.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimContainerStatus {
    /// The container's name.
    pub name: String,
    /// Whether its readiness probe passes (true without a probe once it runs).
    #[serde(default)]
    pub ready: bool,
    /// Its current state.
    #[serde(default)]
    pub state: Option<SlimState>,
    /// How it ended last time, if it restarted.
    #[serde(default, rename = "lastState")]
    pub last_state: Option<SlimState>,
    /// How often it restarted.
    #[serde(default, rename = "restartCount")]
    pub restart_count: i32,
}

/// A container's state: whether it runs, and what it waits on or how it ended (named when a
/// hook's wait expires, docs/behaviour.md §6.5).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimState {
    /// Only its presence matters.
    #[serde(default)]
    pub running: Option<serde::de::IgnoredAny>,
    /// `waiting`: its reason.
    #[serde(default)]
    pub waiting: Option<SlimReason>,
    /// `terminated`: its exit code and reason.
    #[serde(default)]
    pub terminated: Option<SlimTerminated>,
}

/// `state.waiting`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimReason {
    /// `ImagePullBackOff`, `CrashLoopBackOff`, `ContainerCreating`, ...
    #[serde(default)]
    pub reason: Option<String>,
}

/// `state.terminated`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimTerminated {
    /// The process' exit code.
    #[serde(default)]
    pub exit_code: i32,
    /// `Error`, `OOMKilled`, `Completed`, ...
    #[serde(default)]
    pub reason: Option<String>,
}

/// The fields of `ObjectMeta` the controller uses; `managedFields` (often the largest part of a
/// pod's metadata) is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

fn meta_without_managed_fields<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        generate_name: m.generate_name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        labels: m.labels,
        annotations: m.annotations,
        ..ObjectMeta::default()
    })
}

impl Resource for SlimPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What a pod worker keeps of its pod between events.
#[derive(Clone, Debug, PartialEq)]
pub struct PodState {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.generateName`, when the pod has one (the plan may be signed without a name).
    pub generate_name: Option<String>,
    /// `metadata.uid`: what the status signature is bound to.
    pub uid: String,
    /// The precondition of the next write: a write against an older one conflicts.
    pub resource_version: String,
    /// All labels (the exec label, the restore label for the scope check, the selectors of
    /// `runOn: OnePod`).
    pub labels: CompactLabels,
    /// The raw `restore-hooks.dev/plan` annotation, as signed. Of the annotations, only
    /// restore-hooks' own four are kept.
    pub plan: Option<String>,
    /// The `restore-hooks.dev/plan-signature` annotation.
    pub plan_signature: Option<String>,
    /// The raw `restore-hooks.dev/status` annotation, as signed.
    pub status: Option<String>,
    /// The `restore-hooks.dev/status-signature` annotation.
    pub status_signature: Option<String>,
    /// What the state machine looks at: presence, phase, creation time, containers.
    pub view: PodView,
}

impl PodState {
    /// Keeps what a worker needs of a decoded pod; other annotations are dropped. Missing
    /// names, uid and resourceVersion become empty strings.
    pub fn from_slim(pod: SlimPod) -> Arc<Self> {
        let SlimPod {
            metadata,
            spec,
            status,
        } = pod;
        let mut annotations = metadata.annotations.unwrap_or_default();
        let targets = match &spec {
            Some(spec) => ExecTargets::new(
                spec.containers.iter().map(|c| c.name.as_str()),
                spec.init_containers
                    .iter()
                    .flatten()
                    .map(|c| (c.name.as_str(), c.restart_policy.as_deref())),
            ),
            None => ExecTargets::default(),
        };
        let mut containers = Vec::new();
        let mut phase = None;
        if let Some(status) = status {
            phase = status.phase;
            for cs in status
                .init_container_statuses
                .into_iter()
                .flatten()
                .chain(status.container_statuses.into_iter().flatten())
            {
                let running = cs.state.as_ref().is_some_and(|s| s.running.is_some());
                let waiting_reason = cs
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.clone());
                // Exited now (and not restarted) says more than how it ended before.
                let last_exit = [&cs.state, &cs.last_state]
                    .into_iter()
                    .flatten()
                    .find_map(|s| s.terminated.as_ref())
                    .map(|t| LastExit {
                        code: t.exit_code,
                        reason: t.reason.clone(),
                    });
                containers.push((
                    cs.name,
                    ContainerState {
                        running,
                        ready: cs.ready,
                        waiting_reason,
                        last_exit,
                        restarts: u32::try_from(cs.restart_count).unwrap_or_default(),
                    },
                ));
            }
        }
        containers.shrink_to_fit();
        Arc::new(PodState {
            namespace: metadata.namespace.unwrap_or_default(),
            name: metadata.name.unwrap_or_default(),
            generate_name: metadata.generate_name,
            uid: metadata.uid.unwrap_or_default(),
            resource_version: metadata.resource_version.unwrap_or_default(),
            labels: metadata
                .labels
                .as_ref()
                .map(CompactLabels::from)
                .unwrap_or_default(),
            plan: annotations.remove(PLAN_ANNOTATION),
            plan_signature: annotations.remove(PLAN_SIGNATURE_ANNOTATION),
            status: annotations.remove(STATUS_ANNOTATION),
            status_signature: annotations.remove(STATUS_SIGNATURE_ANNOTATION),
            view: PodView {
                presence: if metadata.deletion_timestamp.is_some() {
                    Presence::Terminating
                } else {
                    Presence::Present
                },
                phase,
                created: metadata.creation_timestamp.map(|t| t.0),
                targets,
                containers,
            },
        })
    }

    /// `metadata.creationTimestamp`: `waitTimeout` counts from it; `None` when the API server
    /// sent none.
    pub fn created(&self) -> Option<Timestamp> {
        self.view.created
    }

    /// The pod as the plan and status checks see it (`restore_hooks_core::trust::verify`).
    pub fn facts(&self) -> PodFacts<'_> {
        PodFacts {
            namespace: &self.namespace,
            name: &self.name,
            generate_name: self.generate_name.as_deref(),
            uid: &self.uid,
            created: self.view.created,
            plan: self.plan.as_deref(),
            plan_signature: self.plan_signature.as_deref(),
            status: self.status.as_deref(),
            status_signature: self.status_signature.as_deref(),
        }
    }

    /// The value of label `key`, when set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.label(key)
    }

    /// `namespace/name`, for logs and messages.
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_controller_needs_and_nothing_else() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "db-0", "namespace": "shop", "uid": "u", "resourceVersion": "7",
                "creationTimestamp": "2026-12-03T10:00:00Z",
                "labels": {"app": "db"},
                "annotations": {"restore-hooks.dev/plan": "{}", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}]
            },
            "spec": {
                "containers": [{"name": "db", "image": "postgres", "env": [{"name": "A", "value": "1"}]}],
                "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
                "volumes": [{"name": "data", "emptyDir": {}}]
            },
            "status": {
                "phase": "Running",
                "containerStatuses": [{"name": "db", "ready": true, "restartCount": 0,
                    "image": "postgres", "imageID": "", "state": {"running": {"startedAt": "2026-12-03T10:00:02Z"}}}],
                "initContainerStatuses": [{"name": "proxy", "ready": false, "restartCount": 0,
                    "image": "envoy", "imageID": "", "state": {"waiting": {"reason": "x"}}}]
            }
        });
        let slim: SlimPod = serde_json::from_value(json).unwrap();
        assert!(slim.metadata.managed_fields.is_none());
        let state = PodState::from_slim(slim);
        assert_eq!(state.display(), "shop/db-0");
        assert_eq!(state.plan.as_deref(), Some("{}"));
        assert_eq!(state.view.targets.target_names(), ["db", "proxy"]);
        let db = state.view.container("db").unwrap();
        assert!(db.running && db.ready);
        assert!(!state.view.container("proxy").unwrap().running);
        assert_eq!(state.view.phase.as_deref(), Some("Running"));
        assert_eq!(state.resource_version, "7");
    }
}
