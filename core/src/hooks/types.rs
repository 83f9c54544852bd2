//! Kubernetes types of the two spec hook sources: Velero's `Restore` (only what hooks need) and our
//! `RestoreHook` custom resource. The RestoreHook CRD is generated from these types.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `velero.io/v1` `Restore`, reduced to the fields restore hooks read. Unknown fields are ignored
/// on purpose: Velero owns this type and we never write it.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Restore",
    namespaced,
    schema = "disabled",
    crates(kube_core = "::kube_core")
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<VeleroRestoreHooks>,
}

/// Velero's `Restore` object, named for what it is in this crate.
pub type VeleroRestore = Restore;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VeleroRestoreHooks {
    #[serde(default)]
    pub resources: Vec<RestoreResourceHookSpec>,
}

/// One `spec.hooks.resources[]` entry of a Velero Restore.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreResourceHookSpec {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub included_namespaces: Option<Vec<String>>,
    #[serde(default)]
    pub excluded_namespaces: Option<Vec<String>>,
    #[serde(default)]
    pub included_resources: Option<Vec<String>>,
    #[serde(default)]
    pub excluded_resources: Option<Vec<String>>,
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    #[serde(default)]
    pub post_hooks: Vec<RestoreResourceHook>,
}

/// One `postHooks[]` element: an init hook, an exec hook, or both (Velero allows both).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreResourceHook {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<InitRestoreHook>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecRestoreHook>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitRestoreHook {
    /// Full core/v1 Container objects, kept as raw JSON so that fields newer than our Kubernetes
    /// API version survive into the patch.
    #[serde(default)]
    #[schemars(schema_with = "crate::hooks::types::preserve_unknown_objects")]
    pub init_containers: Vec<serde_json::Value>,
    /// Accepted for Velero compatibility; like Velero, unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecRestoreHook {
    /// Target container; default: the pod's first container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// argv, no shell.
    #[serde(default)]
    pub command: Vec<String>,
    /// `Continue` (default) or `Fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::hooks::types::on_error_schema")]
    pub on_error: Option<String>,
    /// Go duration; default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GO_DURATION_PATTERN))]
    pub exec_timeout: Option<String>,
    /// Go duration; default: no limit. Counts from the pod's creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GO_DURATION_PATTERN))]
    pub wait_timeout: Option<String>,
    /// Wait for the container to be Ready, not only Running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_ready: Option<bool>,
}

/// Post-restore hooks for the pods of one namespace, for the restores whose names match.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "restore-hooks.dev",
    version = "v1alpha1",
    kind = "RestoreHook",
    namespaced,
    status = "RestoreHookStatus",
    shortname = "rh",
    crates(kube_core = "::kube_core"),
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
    pub restores: Option<Vec<String>>,
    /// Pods of this namespace the hooks apply to; absent: every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default)]
    pub post_hooks: Vec<RestoreResourceHook>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreHookStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub pods_planned: i64,
    #[serde(default)]
    pub hooks: HookCounts,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct HookCounts {
    #[serde(default)]
    pub succeeded: i64,
    #[serde(default)]
    pub failed: i64,
    #[serde(default)]
    pub pending: i64,
}

/// A non-negative Go duration (`30s`, `1h30m`, `.5s`, `0`), so that `kubectl apply` rejects a
/// typo long before a restore needs the hook. The webhook re-validates (Velero Restores have no
/// such schema).
pub const GO_DURATION_PATTERN: &str =
    r"^\+?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// Labels of a namespace or pod.
pub type Labels = BTreeMap<String, String>;

pub(crate) fn preserve_unknown_objects(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    })
}

pub(crate) fn on_error_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["Continue", "Fail"]})
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
}
