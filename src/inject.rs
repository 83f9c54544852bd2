//! The webhook's decision for one pod, shared by `POST /mutate` and `restore-hooks inject`: one
//! code path decides, two front ends (product.md §4).
//!
//! The patch only ever adds or removes what this product owns; it never rewrites a list or the
//! spec from a typed struct, so fields newer than our Kubernetes API version survive.

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde_json::Value;

use crate::catalog::HookCatalog;
use crate::config::{EngineConfig, OnInvalid};
use crate::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecPlan, INJECTED_ANNOTATION, PLAN_ANNOTATION, STATUS_ANNOTATION,
};
use crate::hooks::resolve::{HookSources, Resolution, resolve_hooks};
use crate::hooks::scope::restore_scope;
use crate::hooks::types::RestoreHook;

/// Init containers that Velero's file-system restore puts first; hook containers go after them.
const RESTORE_WAIT_CONTAINERS: [&str; 2] = ["restore-wait", "restic-wait"];

#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Allow without a patch: not a restored pod, or nothing to change.
    Unchanged { warnings: Vec<String> },
    /// Allow with this patch.
    Patch {
        patch: Patch,
        warnings: Vec<String>,
        /// Names of the init containers the patch adds, in order.
        injected: Vec<String>,
    },
    /// Deny with this message (invalid hooks under `--on-invalid deny`).
    Deny { message: String },
}

#[derive(Debug, thiserror::Error)]
#[error("the object is not a valid Pod: {0}")]
pub struct NotAPod(#[from] serde_json::Error);

/// Decides what happens to `pod` (its JSON as admitted), created in `namespace`.
pub fn evaluate(
    pod_json: &Value,
    namespace: &str,
    catalog: &dyn HookCatalog,
    config: &EngineConfig,
) -> Result<Decision, NotAPod> {
    // Deserialize from the borrowed value: no copy of a possibly large pod.
    let pod = Pod::deserialize(pod_json)?;
    let namespace_labels = catalog.namespace_labels(namespace);
    let Some(scope) = restore_scope(
        pod.metadata.labels.as_ref(),
        namespace_labels.as_ref(),
        config,
    ) else {
        return Ok(Decision::Unchanged { warnings: vec![] });
    };
    let velero_restore = catalog.velero_restore(&config.velero_namespace, &scope.restore);
    let restore_hooks: Vec<Arc<RestoreHook>> = catalog.restore_hooks(namespace);
    let restore_hooks: Vec<&RestoreHook> = restore_hooks.iter().map(Arc::as_ref).collect();
    let sources = HookSources {
        velero_restore: velero_restore.as_deref(),
        restore_hooks: &restore_hooks,
    };
    let resolution = resolve_hooks(&pod, namespace, &scope, sources, config);
    Ok(decide(pod_json, &pod, namespace, &resolution, config))
}

/// `namespace/name`, or `namespace/generateName*` before the API server named the pod.
pub fn pod_display(pod: &Pod, namespace: &str) -> String {
    match (&pod.metadata.name, &pod.metadata.generate_name) {
        (Some(name), _) if !name.is_empty() => format!("{namespace}/{name}"),
        (_, Some(prefix)) => format!("{namespace}/{prefix}*"),
        _ => format!("{namespace}/<unnamed>"),
    }
}

/// Turns a resolution into the admission decision for this pod.
pub fn decide(
    pod_json: &Value,
    pod: &Pod,
    namespace: &str,
    resolution: &Resolution,
    config: &EngineConfig,
) -> Decision {
    let who = pod_display(pod, namespace);
    if !resolution.problems.is_empty() && config.on_invalid == OnInvalid::Deny {
        let problems: Vec<String> = resolution.problems.iter().map(|p| p.to_string()).collect();
        return Decision::Deny {
            message: format!(
                "restore-hooks: pod {who} (restore {:?}) has invalid restore hooks: {}. Fix the \
                 hook definitions and recreate the pod, or run the webhook with --on-invalid warn \
                 to admit pods without their invalid hooks",
                resolution.scope.restore,
                problems.join("; ")
            ),
        };
    }
    let warnings: Vec<String> = resolution
        .problems
        .iter()
        .map(|p| format!("restore-hooks: pod {who}: skipped invalid hook {p}"))
        .collect();
    let (ops, injected) = build_patch(pod_json, pod, resolution);
    if ops.is_empty() {
        Decision::Unchanged { warnings }
    } else {
        Decision::Patch {
            patch: Patch(ops),
            warnings,
            injected,
        }
    }
}

fn pointer<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    // from_tokens escapes `~` and `/` (RFC 6901): annotation keys contain `/`.
    PointerBuf::from_tokens(tokens)
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// The operations that bring the pod to the state the resolution asks for, and nothing more.
fn build_patch(
    pod_json: &Value,
    pod: &Pod,
    resolution: &Resolution,
) -> (Vec<PatchOperation>, Vec<String>) {
    let mut ops = Vec::new();
    let spec = pod.spec.as_ref();
    let init_containers = spec.and_then(|s| s.init_containers.as_ref());
    let app_names = spec
        .map(|s| {
            s.containers
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();

    // 1. Init containers, after the leading restore-wait/restic-wait run.
    let mut to_add: Vec<&crate::hooks::resolve::InitContainer> = Vec::new();
    for hook in &resolution.init {
        for c in &hook.containers {
            let name_taken = app_names.contains(&c.name.as_str())
                || init_containers.is_some_and(|ics| ics.iter().any(|ic| ic.name == c.name));
            // Velero (or an earlier restore-hooks cycle under another name) already injected it.
            let same_definition = init_containers.is_some_and(|ics| {
                ics.iter().any(|ic| {
                    ic.image.as_deref() == Some(c.image.as_str())
                        && ic.command.clone().filter(|v| !v.is_empty()) == c.command
                })
            });
            if !name_taken && !same_definition {
                to_add.push(c);
            }
        }
    }
    let injected: Vec<String> = to_add.iter().map(|c| c.name.clone()).collect();
    if !to_add.is_empty() && pod_json.get("spec").is_some_and(Value::is_object) {
        match init_containers {
            // Absent or null: add the whole array (`add .../-` into a missing array fails).
            None => ops.push(add(
                pointer(["spec", "initContainers"]),
                Value::Array(to_add.iter().map(|c| c.value.clone()).collect()),
            )),
            Some(existing) => {
                let start = existing
                    .iter()
                    .take_while(|c| RESTORE_WAIT_CONTAINERS.contains(&c.name.as_str()))
                    .count();
                for (i, c) in to_add.iter().enumerate() {
                    let index = (start + i).to_string();
                    ops.push(add(
                        pointer(["spec", "initContainers", index.as_str()]),
                        c.value.clone(),
                    ));
                }
            }
        }
    }
    let injected = if ops.is_empty() { Vec::new() } else { injected };

    // 2. Annotations and the exec label: desired state, diffed against the pod.
    let no_entries = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&no_entries);
    let labels = pod.metadata.labels.as_ref().unwrap_or(&no_entries);
    let mut want_annotations: BTreeMap<&str, Option<String>> = BTreeMap::new();
    let mut want_labels: BTreeMap<&str, Option<String>> = BTreeMap::new();
    // A pod created with our status (backed up after an earlier restore) is a new pod: its
    // hooks run again in this restore.
    want_annotations.insert(STATUS_ANNOTATION, None);
    if resolution.is_empty() {
        // Nothing applies: drop stale state so the controller does not run an old plan.
        want_annotations.insert(PLAN_ANNOTATION, None);
        want_labels.insert(EXEC_LABEL, None);
    } else {
        let plan = ExecPlan {
            restore: resolution.scope.restore.clone(),
            hooks: resolution.exec.clone(),
        };
        want_annotations.insert(PLAN_ANNOTATION, Some(plan.to_annotation()));
        want_labels.insert(
            EXEC_LABEL,
            (!resolution.exec.is_empty()).then(|| EXEC_PENDING.to_string()),
        );
        if !injected.is_empty() {
            let mut names: Vec<String> = annotations
                .get(INJECTED_ANNOTATION)
                .map(|v| {
                    v.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            for name in &injected {
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
            want_annotations.insert(INJECTED_ANNOTATION, Some(names.join(",")));
        }
    }
    let has_metadata = pod_json.get("metadata").is_some_and(Value::is_object);
    let mut metadata_added = false;
    for (field, current, wanted) in [
        ("annotations", annotations, &want_annotations),
        ("labels", labels, &want_labels),
    ] {
        let changes: Vec<(&str, &Option<String>)> = wanted
            .iter()
            .filter(|(k, v)| current.get(**k) != v.as_ref())
            .map(|(k, v)| (*k, v))
            .collect();
        if changes.is_empty() {
            continue;
        }
        let sets: serde_json::Map<String, Value> = changes
            .iter()
            .filter_map(|(k, v)| {
                v.as_ref()
                    .map(|v| (k.to_string(), Value::String(v.clone())))
            })
            .collect();
        if !has_metadata && !metadata_added {
            ops.push(add(
                pointer(["metadata"]),
                Value::Object(Default::default()),
            ));
            metadata_added = true;
        }
        let field_is_object = pod_json
            .get("metadata")
            .and_then(|m| m.get(field))
            .is_some_and(Value::is_object);
        if !field_is_object {
            // Absent or null: the whole map at once (removals have nothing to remove).
            if !sets.is_empty() {
                ops.push(add(pointer(["metadata", field]), Value::Object(sets)));
            }
            continue;
        }
        for (key, value) in changes {
            let path = pointer(["metadata", field, key]);
            ops.push(match value {
                Some(v) => add(path, Value::String(v.clone())),
                None => PatchOperation::Remove(RemoveOperation { path }),
            });
        }
    }
    (ops, injected)
}
