//! Kubernetes types of the spec hook sources and of what the controller reports:
//!
//! - Velero's `Restore` (only what hooks need; Velero owns it and we never write it);
//! - our `RestoreHook` (namespaced) and `ClusterRestoreHook` (cluster-scoped, with a
//!   `namespaceSelector`), whose CRDs are generated from these types;
//! - `RestoreRun`, the controller's cluster-scoped view of one restore, and `RestoreRecord`, the
//!   parts of its record of which hooks started.
//!
//! The CRD schemas carry bounds (`maxItems`, `maxLength`, enums, CEL rules) so that `kubectl
//! apply` refuses a definition that could never work, instead of the webhook denying every
//! restored pod of a namespace later (docs/behaviour.md §10).
//!
//! The module is long because the CRD schemas are spelled out next to the types (bounds, enums,
//! CEL rules, and hand-written schemas for label selectors, commands and init containers), so
//! that `restore-hooks crd` and the engine cannot disagree.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// `null` is how Go encodes an empty slice or map (and how `kubectl get -o yaml` shows it):
/// it means empty, exactly as Go decodes it, never "invalid".
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `velero.io/v1` `Restore`, reduced to the fields restore hooks read. Unknown fields are ignored
/// on purpose: Velero owns this type.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Restore",
    namespaced,
    schema = "disabled",
    status = "VeleroRestoreStatus",
    crates(kube_core = "::kube_core")
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// `spec.hooks`: the Restore's hook entries; absent or `null` means none (docs/behaviour.md
    /// §2.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<VeleroRestoreHooks>,
    /// `spec.backupName`: `$(BACKUP_NAME)` in hook-object hooks (docs/behaviour.md §2.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
    /// `spec.namespaceMapping` (source → target): `$(SOURCE_NAMESPACE)` (§2.8).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub namespace_mapping: BTreeMap<String, String>,
    /// `spec.includedNamespaces`: globs on the backup's namespaces; empty or `*`: all of them.
    /// With the mapping, which namespaces the restore writes to (its restore window, §1.6).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub included_namespaces: Vec<String>,
    /// `spec.excludedNamespaces`: globs on the backup's namespaces.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub excluded_namespaces: Vec<String>,
}

/// The part of a Velero Restore's status that says when it ran: its restore window (§1.6).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VeleroRestoreStatus {
    /// `New`, `InProgress`, `WaitingForPluginOperations…`, `Finalizing…`, or an end:
    /// `Completed`, `PartiallyFailed`, `Failed`, `FailedValidation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When Velero finished it (RFC 3339); set with the end phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<String>,
}

/// Velero's `Restore` object, named for what it is in this crate.
pub type VeleroRestore = Restore;

/// A Velero Restore's `spec.hooks`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VeleroRestoreHooks {
    /// `resources`: the entries, in spec order (the source order of their hooks, §3.2).
    #[serde(default, deserialize_with = "null_as_default")]
    pub resources: Vec<RestoreResourceHookSpec>,
}

/// One `spec.hooks.resources[]` entry of a Velero Restore.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreResourceHookSpec {
    /// `name`: the plan `name` of the entry's hooks (§5.2); two entries of one name stay two hooks.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// `includedNamespaces`: globs on the pod's namespace; empty or `*` includes every namespace.
    #[serde(default, deserialize_with = "null_as_default")]
    pub included_namespaces: Vec<String>,
    /// `excludedNamespaces`: globs on the pod's namespace; an exclusion wins over an inclusion.
    #[serde(default, deserialize_with = "null_as_default")]
    pub excluded_namespaces: Vec<String>,
    /// `includedResources`: the entry applies only if empty, `*` or naming pods (`pods`, `pod`,
    /// `po`, any case); Velero ignores it (§11).
    #[serde(default, deserialize_with = "null_as_default")]
    pub included_resources: Vec<String>,
    /// `excludedResources`: `*` or a name of pods makes the entry apply to no pod (§11).
    #[serde(default, deserialize_with = "null_as_default")]
    pub excluded_resources: Vec<String>,
    /// `labelSelector` over the pod's labels as admitted (§2.7); absent: every pod, `{}` too.
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    /// `postHooks`: the hooks, in order; a hook's `index` is its element's position (§2.4).
    #[serde(default, deserialize_with = "null_as_default")]
    pub post_hooks: Vec<RestoreResourceHook>,
}

/// One `postHooks[]` element: an init hook, an exec hook, or both (Velero allows both).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.init) || has(self.exec)",
    "message": "each postHooks entry needs init or exec (or both)"
}]))]
pub struct RestoreResourceHook {
    /// Init containers to inject into each selected pod when it is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<InitRestoreHook>,
    /// A command to run in a container of each selected pod once that container is up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecRestoreHook>,
}

/// Init containers injected into a selected pod when it is created, after Velero's restore-wait
/// container if it has one.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitRestoreHook {
    /// Full core/v1 Container objects, kept as raw JSON so that fields newer than our Kubernetes
    /// API version survive into the patch.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(schema_with = "crate::hooks::types::init_containers_schema")]
    pub init_containers: Vec<serde_json::Value>,
    /// Accepted for Velero compatibility; like Velero, unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub timeout: Option<String>,
}

/// A command run once in a running container of a selected pod, after the pod is restored.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecRestoreHook {
    /// Target container; default: the pod's first container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub container: Option<String>,
    /// argv, no shell.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(schema_with = "crate::hooks::types::command_schema")]
    pub command: Vec<String>,
    /// `Continue` (default) or `Fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::on_error_schema")]
    pub on_error: Option<String>,
    /// Go duration; default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GO_DURATION_PATTERN), length(max = 64))]
    pub exec_timeout: Option<String>,
    /// Go duration; default: `--default-wait-timeout` (1h); `0`: no limit. Counts from the
    /// pod's creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GO_DURATION_PATTERN), length(max = 64))]
    pub wait_timeout: Option<String>,
    /// Wait for the container to be Ready, not only Running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_ready: Option<bool>,
    /// `EveryPod` (default): every pod the hook selects runs it. `OnePod`: one pod of the restore
    /// runs it (RestoreHook and ClusterRestoreHook only; docs/behaviour.md §6.15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::run_on_schema")]
    pub run_on: Option<String>,
    /// Hooks of the same restore this one waits for: it starts once each ended well on every pod
    /// that plans it, and is skipped when one failed with `onError: Fail` (RestoreHook and
    /// ClusterRestoreHook only; docs/behaviour.md §6.16).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 16))]
    pub after: Vec<AfterHook>,
    /// Attempts after a failure the command cannot have been hurt by (RestoreHook and
    /// ClusterRestoreHook only; docs/behaviour.md §6.17); absent: one attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Run `command` in an ephemeral container of this image that targets `container` (for images
    /// without a shell), instead of exec'ing into `container` (RestoreHook and ClusterRestoreHook
    /// only; docs/behaviour.md §6.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// With `image`: the pod's volumes the ephemeral container mounts (core/v1 VolumeMounts).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 32))]
    pub volume_mounts: Vec<HookVolumeMount>,
    /// With `image`: the ephemeral container's securityContext (a part of core/v1
    /// SecurityContext). Whatever is set stays within Pod Security `restricted`; unset fields
    /// take restricted's values, and `runAsUser`/`runAsGroup` the target container's
    /// (docs/behaviour.md §6.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<HookSecurityContext>,
    /// With `image`: environment variables of the ephemeral container (core/v1 EnvVar: a
    /// `value`, or a `secretKeyRef`, `configMapKeyRef` or `fieldRef`). Its author must be able to
    /// `get` each Secret and ConfigMap named (docs/behaviour.md §9.6).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 64))]
    pub env: Vec<HookEnvVar>,
    /// With `image`: every key of a Secret or ConfigMap as environment variables (core/v1
    /// EnvFromSource). Its author must be able to `get` each one named (docs/behaviour.md §9.6).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 16))]
    pub env_from: Vec<HookEnvFromSource>,
    /// With `image`: the ephemeral container also gets the target container's own `env` and
    /// `envFrom`, ahead of those here (a name defined in both `env` lists takes the value here;
    /// as in any container, `env` wins over `envFrom`): values the pod already has
    /// (docs/behaviour.md §6.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_target_env: Option<bool>,
}

/// The part of a core/v1 SecurityContext a hook's ephemeral container may set; every value must
/// be one Pod Security `restricted` admits (docs/behaviour.md §6.18).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookSecurityContext {
    /// The uid the command runs as; not 0. Default: the target container's, else the pod's,
    /// else the image's user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// The primary gid. Default: the target container's, else the pod's, else the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    /// Only `true` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Only `false` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_privilege_escalation: Option<bool>,
    /// Only `false` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    /// Mount the image's root filesystem read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    /// `drop` must include `ALL` (the default); only `NET_BIND_SERVICE` may be added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<HookCapabilities>,
    /// `RuntimeDefault` (the default) or `Localhost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<HookSeccompProfile>,
}

/// Linux capabilities of a hook's ephemeral container (core/v1 Capabilities).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookCapabilities {
    /// Added capabilities: only `NET_BIND_SERVICE`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 8))]
    pub add: Vec<String>,
    /// Dropped capabilities; must include `ALL`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 64))]
    pub drop: Vec<String>,
}

/// The seccomp profile of a hook's ephemeral container (core/v1 SeccompProfile).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookSeccompProfile {
    /// `RuntimeDefault` or `Localhost` (`Unconfined` is refused).
    #[serde(rename = "type")]
    #[schemars(length(max = 32))]
    pub type_: String,
    /// With `Localhost`: the profile's path on the node, relative to the kubelet's seccomp
    /// directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub localhost_profile: Option<String>,
}

/// An environment variable of a hook's ephemeral container (core/v1 EnvVar, without
/// `resourceFieldRef`: an ephemeral container has no resources).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookEnvVar {
    /// The variable's name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Its value (`$(VAR)` of earlier variables expands, as in any container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32768))]
    pub value: Option<String>,
    /// Where its value comes from, instead of `value`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<HookEnvVarSource>,
}

/// One source of an environment variable's value (exactly one is set).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookEnvVarSource {
    /// A key of a Secret in the pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<HookKeySelector>,
    /// A key of a ConfigMap in the pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<HookKeySelector>,
    /// A field of the pod (the downward API: `metadata.name`, `metadata.labels['k']`,
    /// `status.podIP`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<HookFieldSelector>,
}

/// A key of a Secret or ConfigMap (core/v1 SecretKeySelector / ConfigMapKeySelector).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookKeySelector {
    /// The Secret's or ConfigMap's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// The container starts even if the object or key does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// A field of the pod (core/v1 ObjectFieldSelector).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookFieldSelector {
    /// `v1` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub api_version: Option<String>,
    /// The field's path, as the downward API names it.
    #[schemars(length(min = 1, max = 512))]
    pub field_path: String,
}

/// A Secret or ConfigMap whose every key becomes an environment variable (core/v1
/// EnvFromSource; exactly one of the references is set).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookEnvFromSource {
    /// Prepended to every key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub prefix: Option<String>,
    /// A Secret in the pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<HookObjectRef>,
    /// A ConfigMap in the pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<HookObjectRef>,
}

/// A Secret or ConfigMap by name (core/v1 SecretEnvSource / ConfigMapEnvSource).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookObjectRef {
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The container starts even if it does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// A volume of the pod, mounted in a hook's ephemeral container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookVolumeMount {
    /// The pod's volume.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Where it is mounted.
    #[schemars(length(min = 1, max = 4096))]
    pub mount_path: String,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// A path within the volume instead of its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub sub_path: Option<String>,
}

/// When and how often a failed exec hook is tried again (docs/behaviour.md §6.17). An attempt whose
/// command provably did not start (the exec was refused before its stream opened) is always
/// retried; one that started only as the hook allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 to 10; default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub attempts: Option<u32>,
    /// Go duration before the second attempt, doubled before each next one; default 1s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GO_DURATION_PATTERN), length(max = 64))]
    pub backoff: Option<String>,
    /// Go duration the wait between attempts never exceeds; default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GO_DURATION_PATTERN), length(max = 64))]
    pub max_backoff: Option<String>,
    /// Exit codes after which a command that ran is tried again (it is idempotent for them).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 16))]
    pub on_exit_codes: Vec<i32>,
    /// The command may run twice: an attempt whose exec stream broke before an exit status (the
    /// API server restarted mid-exec) is tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
}

/// A hook an exec hook waits for: every exec hook of one hook object, in the pods of one
/// namespace of the same restore (docs/behaviour.md §6.16).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AfterHook {
    /// The name of the RestoreHook or ClusterRestoreHook that holds it.
    #[schemars(length(min = 1, max = 253))]
    pub hook: String,
    /// `RestoreHook` or `ClusterRestoreHook`; default: the kind of the object that waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::hook_kind_schema")]
    pub kind: Option<String>,
    /// The namespace whose pods' runs of it count (a RestoreHook there, when `kind` is
    /// RestoreHook); default: the namespace of the pod that waits. Only a ClusterRestoreHook may
    /// name another namespace than its pods' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// Post-restore hooks for the pods of one namespace, for the restores whose names match.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "restore-hooks.dev",
    version = "v1alpha1",
    kind = "RestoreHook",
    namespaced,
    status = "HookObjectStatus",
    shortname = "rh",
    crates(kube_core = "::kube_core"),
    doc = "Post-restore hooks (init containers and exec commands) for the restored pods of one namespace.",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Planned","type":"integer","jsonPath":".status.podsPlanned"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"integer","jsonPath":".status.hooks.succeeded"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.hooks.failed"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.hooks.pending"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreHookSpec {
    /// Glob patterns on the restore name; absent or empty: every restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::restores_schema")]
    pub restores: Option<Vec<String>>,
    /// Pods of this namespace the hooks apply to; absent: every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::label_selector_schema")]
    pub label_selector: Option<LabelSelector>,
    /// The hooks, in order: each entry an init hook, an exec hook, or both. A hook's index is its
    /// position in this list.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(length(max = 64))]
    pub post_hooks: Vec<RestoreResourceHook>,
    /// `Allow`: the Velero annotation exec hooks of the pods this object selects run even when
    /// the pod's creator may not create pods/exec (pods created by a ReplicaSet or StatefulSet);
    /// this object's author vouches for them. `Ignore` (default): such hooks are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotation_hooks: Option<PodAnnotationHooks>,
}

/// Post-restore hooks for pods of every namespace its `namespaceSelector` selects: owned by a
/// platform team, it exists in the recovery cluster before the restore, so its init hooks apply
/// even to the pods Velero restores before any namespaced object (docs/behaviour.md §2.6).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "restore-hooks.dev",
    version = "v1alpha1",
    kind = "ClusterRestoreHook",
    status = "HookObjectStatus",
    shortname = "crh",
    crates(kube_core = "::kube_core"),
    doc = "Post-restore hooks for the restored pods of every namespace its namespaceSelector selects (for platform teams).",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Planned","type":"integer","jsonPath":".status.podsPlanned"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"integer","jsonPath":".status.hooks.succeeded"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.hooks.failed"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.hooks.pending"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRestoreHookSpec {
    /// Namespaces (by their labels) whose pods the hooks apply to; absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::label_selector_schema")]
    pub namespace_selector: Option<LabelSelector>,
    /// Glob patterns on the restore name; absent or empty: every restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::restores_schema")]
    pub restores: Option<Vec<String>>,
    /// Pods (in the selected namespaces) the hooks apply to; absent: every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::label_selector_schema")]
    pub label_selector: Option<LabelSelector>,
    /// The hooks, in order: each entry an init hook, an exec hook, or both. A hook's index is its
    /// position in this list.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(length(max = 64))]
    pub post_hooks: Vec<RestoreResourceHook>,
    /// `Allow`: the Velero annotation exec hooks of the pods this object selects run even when
    /// the pod's creator may not create pods/exec (pods created by a ReplicaSet or StatefulSet);
    /// this object's author vouches for them. `Ignore` (default): such hooks are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotation_hooks: Option<PodAnnotationHooks>,
}

/// Whether a hook object lets the Velero annotation exec hooks of the pods it selects run
/// (docs/behaviour.md §9.9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum PodAnnotationHooks {
    /// Only pods whose creator may create pods/exec (or Velero, under `--velero-hooks own`) have
    /// their annotation exec hooks run.
    #[default]
    Ignore,
    /// The annotation exec hooks of every pod this object selects run.
    Allow,
}

/// Status of a RestoreHook or ClusterRestoreHook, written by restore-hooks.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookObjectStatus {
    /// The generation the counts and the `Ready` condition describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods whose plan has at least one hook of this object.
    #[serde(default)]
    pub pods_planned: i64,
    /// This object's exec hooks across those pods, by outcome: `Skipped` hooks count as failed,
    /// `Running` ones as pending.
    #[serde(default)]
    pub hooks: HookCounts,
    /// Pods that missed this object's init hooks because it arrived after them (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missed_init_pods: Vec<String>,
    /// Pods where one of this object's hooks failed: its first failure each, with the reason
    /// (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_pods: Vec<FailedPod>,
    /// Its `runOn: OnePod` hooks: the pod that runs each, and how it went (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub one_pod: Vec<OnePodRun>,
    /// The generation each webhook replica has compiled, by replica (pod) name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub webhooks: BTreeMap<String, ReplicaObservation>,
    /// Outcomes of pods that no longer exist, folded in once and kept (they cannot be listed).
    #[serde(default, skip_serializing_if = "HookCounts::is_zero")]
    pub retired: HookCounts,
    /// `Ready`: every running webhook replica has compiled the current generation and it is
    /// valid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What one webhook replica has compiled of this object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaObservation {
    /// The object generation this replica compiled.
    pub observed_generation: i64,
    /// Empty when the object compiled; otherwise why it cannot apply to any pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub problem: String,
}

/// Hook outcomes summed over pods. `failed` includes hooks `Skipped` after an `onError: Fail`
/// failure on RestoreHook objects (they did not run because of a failure); a RestoreRun counts
/// them separately under `skipped`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookCounts {
    /// Exec hooks that exited with code 0.
    #[serde(default)]
    pub succeeded: i64,
    /// Exec hooks that failed (non-zero exit, timeout, expired wait, pod gone, interrupted); on a
    /// RestoreHook or ClusterRestoreHook also those skipped after an `onError: Fail` failure.
    #[serde(default)]
    pub failed: i64,
    /// RestoreRun only: exec hooks not run because an `onError: Fail` hook of the same pod failed.
    #[serde(default)]
    pub skipped: i64,
    /// Exec hooks that have not ended yet (pending or running).
    #[serde(default)]
    pub pending: i64,
    /// Spec exec hooks not applicable to a selected pod (it lacks their container).
    #[serde(default)]
    pub not_applicable: i64,
    /// Init hooks that arrived after their pod was created.
    #[serde(default)]
    pub missed_init: i64,
    /// Annotation exec hooks refused at admission because nobody entitled to exec into the pod
    /// authored them (docs/behaviour.md §9.9); also counted in `failed`.
    #[serde(default)]
    pub refused: i64,
}

impl HookCounts {
    /// Whether every count is zero (a zero `retired` is left out of the status).
    pub fn is_zero(&self) -> bool {
        *self == HookCounts::default()
    }

    /// Adds `other`'s counts to these: how retired pods' outcomes are folded in.
    pub fn add(&mut self, other: &HookCounts) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.pending += other.pending;
        self.not_applicable += other.not_applicable;
        self.missed_init += other.missed_init;
        self.refused += other.refused;
    }

    /// Takes `other`'s counts out of these: a pod's part that changed or went.
    pub fn sub(&mut self, other: &HookCounts) {
        self.succeeded -= other.succeeded;
        self.failed -= other.failed;
        self.skipped -= other.skipped;
        self.pending -= other.pending;
        self.not_applicable -= other.not_applicable;
        self.missed_init -= other.missed_init;
        self.refused -= other.refused;
    }
}

/// One restore as restore-hooks saw it: the pods it planned and how their hooks ended. Created
/// and updated by the controller only; `kubectl wait --for=condition=Completed` waits for a
/// restore's hooks, whatever their outcome (docs/behaviour.md §8.3); `restore-hooks describe`
/// shows every pod (§8.4).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "restore-hooks.dev",
    version = "v1alpha1",
    kind = "RestoreRun",
    status = "RestoreRunStatus",
    shortname = "rr",
    crates(kube_core = "::kube_core"),
    doc = "One restore as restore-hooks saw it: the pods it planned and how their hooks ended. Written by the controller.",
    printcolumn = r#"{"name":"Restore","type":"string","jsonPath":".spec.restore"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Pods","type":"integer","jsonPath":".status.podsPlanned"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"integer","jsonPath":".status.hooks.succeeded"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.hooks.failed"}"#,
    printcolumn = r#"{"name":"Skipped","type":"integer","jsonPath":".status.hooks.skipped"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.hooks.pending"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreRunSpec {
    /// The restore's full name (the object's name is a DNS-safe form of it).
    #[schemars(length(max = 253))]
    pub restore: String,
}

/// Status of a RestoreRun: the restore's pods and how their exec hooks ended, written by
/// restore-hooks.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreRunStatus {
    /// `InProgress`, `Completed` or `PartiallyFailed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Pods of the restore whose plan holds at least one exec hook.
    #[serde(default)]
    pub pods_planned: i64,
    /// Exec hooks of those pods by phase (`Running` counts as pending), plus init hooks missed
    /// because a hook object arrived after its pods.
    #[serde(default)]
    pub hooks: HookCounts,
    /// Pods with a failed hook, first failure each (at most 20; `restore-hooks describe` lists
    /// every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_pods: Vec<FailedPod>,
    /// `runOn: OnePod` hooks: the pod that runs each, and how it went (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub one_pod: Vec<OnePodRun>,
    /// Outcomes of pods that no longer exist, folded in once and kept.
    #[serde(default, skip_serializing_if = "HookCounts::is_zero")]
    pub retired: HookCounts,
    /// How many pods that no longer exist have their final counts kept in `retired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pods: Option<i64>,
    /// When the phase last left `InProgress` (RFC 3339): the retention period counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// `Completed`: `True` once every hook has ended, whatever the outcome (reason: the phase,
    /// `Completed` or `PartiallyFailed`), `False` while `InProgress`. `Failed`: `True` when it
    /// ended `PartiallyFailed`, `False` when it ended `Completed`, `Unknown` while `InProgress`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Where controllers before the record moved to `RestoreRecord`s kept it (docs/behaviour.md
    /// §9.5): still read, so that an upgrade in the middle of a restore forgets nothing, and never
    /// written any more.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub executions: BTreeMap<String, crate::record::Execution>,
}

/// One part of the controller's record of which hooks started (docs/behaviour.md §9.5): the
/// entries of up to `restore_hooks_core::ledger::PODS_PER_RECORD` pods of one restore. Written by
/// the controller only; granted to no other role.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "restore-hooks.dev",
    version = "v1alpha1",
    kind = "RestoreRecord",
    status = "RestoreRecordStatus",
    crates(kube_core = "::kube_core"),
    doc = "Part of restore-hooks' record of which hooks started, for one restore (the pods' entries, by uid). Written by the controller only.",
    printcolumn = r#"{"name":"RestoreRun","type":"string","jsonPath":".spec.restoreRun"}"#,
    printcolumn = r#"{"name":"Part","type":"integer","jsonPath":".spec.part"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreRecordSpec {
    /// The restore's full name.
    #[schemars(length(max = 253))]
    pub restore: String,
    /// The name of the restore's RestoreRun (which owns this object).
    #[schemars(length(max = 253))]
    pub restore_run: String,
    /// Which part of the restore's record (0, 1, ...): pods are added to the newest part until it
    /// holds its share.
    pub part: u32,
}

/// The entries of one part of the record.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreRecordStatus {
    /// By pod uid: the plan each pod carried when the controller first saw it and the hooks that
    /// started. A hook recorded here never starts again, whatever the pod's status says. Each
    /// entry is `{plan, hooks: {"<position>": R|S|F}, attempts, onePod}` (docs/behaviour.md §9.5);
    /// the controller alone writes and checks them, the API server stores them as they are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::hooks::types::record_entries_schema")]
    pub executions: BTreeMap<String, crate::record::Execution>,
}

/// A `runOn: OnePod` hook and the one pod that runs it (docs/behaviour.md §6.15).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnePodRun {
    /// The hook's name and position: `<name>#<postHooks index>`.
    pub hook: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod that runs it.
    pub pod: String,
    /// `Running`, `Succeeded` or `Failed`.
    pub phase: String,
}

/// A pod of the restore with a failed exec hook: its first failure.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedPod {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The failed hook's name: the hook object's or Velero entry's name, or `<from-annotation>`.
    pub hook: String,
    /// Why it failed, as in the pod's `restore-hooks.dev/status` (e.g. `command terminated with
    /// exit code 1`).
    pub message: String,
}

/// A non-negative Go duration (`30s`, `1h30m`, `.5s`, `0`), so that `kubectl apply` rejects a
/// typo long before a restore needs the hook. The webhook re-validates (Velero Restores have no
/// such schema).
pub const GO_DURATION_PATTERN: &str =
    r"^\+?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// Labels of a namespace or pod.
pub type Labels = BTreeMap<String, String>;

/// Annotations of a pod (same shape as labels; a separate name so signatures say which).
pub type Annotations = BTreeMap<String, String>;

/// A RestoreRecord's `status.executions`: one opaque, atomic field to the API server
/// (docs/behaviour.md §9.5). A part holds up to 200 pods' entries and is written several times a
/// second during a restore; with their schema, the API server validated, pruned and tracked the
/// `managedFields` of every entry at every write, which made these writes the largest share of
/// its CPU during a restore. Only the controller writes them (no other role is granted
/// RestoreRecords), from `record::Execution`, and reads them back into it.
pub(crate) fn record_entries_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-map-type": "atomic"
    })
}

pub(crate) fn init_containers_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 16,
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "required": ["name", "image"],
            "properties": {
                "name": {"type": "string", "maxLength": 63},
                "image": {"type": "string", "maxLength": 1024}
            }
        }
    })
}

pub(crate) fn command_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 128,
        "items": {"type": "string", "maxLength": 32768}
    })
}

pub(crate) fn restores_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 64,
        "items": {"type": "string", "maxLength": 253}
    })
}

pub(crate) fn on_error_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["Continue", "Fail"]})
}

pub(crate) fn run_on_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["EveryPod", "OnePod"]})
}

pub(crate) fn hook_kind_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["RestoreHook", "ClusterRestoreHook"]})
}

/// `metav1.LabelSelector`, with the operators as an enum and the values rule as CEL: the API
/// server's own schema for it has neither, so `operator: in` would otherwise pass `kubectl
/// apply` and then deny every restored pod the object selects.
pub(crate) fn label_selector_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "properties": {
            "matchLabels": {
                "type": "object",
                "maxProperties": 64,
                "additionalProperties": {"type": "string", "maxLength": 63}
            },
            "matchExpressions": {
                "type": "array",
                "maxItems": 64,
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string", "maxLength": 317},
                        "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                        "values": {
                            "type": "array",
                            "maxItems": 64,
                            "items": {"type": "string", "maxLength": 63}
                        }
                    },
                    "x-kubernetes-validations": [
                        {
                            "rule": "(self.operator == 'In' || self.operator == 'NotIn') ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)",
                            "message": "In and NotIn need at least one value; Exists and DoesNotExist take none"
                        }
                    ]
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::duration::parse_non_negative;

    /// The CRD pattern accepts exactly the non-negative Go durations the engine accepts.
    #[test]
    fn duration_pattern_agrees_with_the_parser() {
        let re = regex::Regex::new(GO_DURATION_PATTERN).unwrap();
        for input in [
            "0",
            "+0",
            "30s",
            "1h30m",
            ".5s",
            "5.s",
            "1.5h",
            "300ms",
            "10us",
            "10µs",
            "10μs",
            "7ns",
            "1h2m3s4ms",
            "+5m",
            "",
            "5",
            "-1s",
            "1d",
            "1 s",
            "s",
            ".",
            "1.2.3s",
            "0s0",
            "00",
        ] {
            assert_eq!(
                re.is_match(input),
                parse_non_negative(input).is_ok(),
                "pattern and parser disagree on {input:?}"
            );
        }
    }

    /// Go writes empty slices and maps as `null`: a Restore that says so is a valid, empty one.
    #[test]
    fn velero_nulls_mean_empty() {
        let cases = [
            r#"{"hooks": null}"#,
            r#"{"hooks": {"resources": null}}"#,
            r#"{"hooks": {"resources": [{"name": "r", "includedNamespaces": null,
                "excludedNamespaces": null, "includedResources": null, "excludedResources": null,
                "labelSelector": null, "postHooks": null}]}}"#,
            r#"{"hooks": {"resources": [{"name": null, "postHooks": [{"init": {"initContainers": null},
                "exec": {"command": null, "container": null, "onError": null}}],
                "labelSelector": {"matchLabels": null, "matchExpressions": null}}]}}"#,
        ];
        for case in cases {
            let spec: RestoreSpec =
                serde_json::from_str(case).unwrap_or_else(|e| panic!("{case}: {e}"));
            for entry in spec.hooks.iter().flat_map(|h| &h.resources) {
                assert!(entry.included_namespaces.is_empty());
                for post in &entry.post_hooks {
                    assert!(
                        post.init
                            .as_ref()
                            .is_none_or(|i| i.init_containers.is_empty())
                    );
                    assert!(post.exec.as_ref().is_none_or(|e| e.command.is_empty()));
                }
            }
        }
    }
}
