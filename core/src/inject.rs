//! The webhook's decision for one pod, shared by `POST /mutate` and `restore-hooks inject`: one
//! code path decides, two front ends (product.md §4).
//!
//! The patch only ever adds or removes what this product owns; it never rewrites a list or the
//! spec from a typed struct, so fields newer than our Kubernetes API version survive.

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde_json::Value;

use crate::catalog::HookCatalog;
use crate::config::{EngineConfig, OnInvalid};
use crate::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecPlan, INJECTED_ANNOTATION, PLAN_ANNOTATION, STATUS_ANNOTATION,
};
use crate::hooks::pod::AdmittedPod;
use crate::hooks::resolve::{HookSources, InitContainer, Resolution, resolve_hooks};
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
    let pod = AdmittedPod::from_json(pod_json)?;
    let namespace_labels = catalog.namespace_labels(namespace);
    let Some(scope) = restore_scope(pod.labels(), namespace_labels.as_ref(), config) else {
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
    Ok(decide(pod_json, &pod, namespace, resolution, config))
}

/// Turns a resolution into the admission decision for this pod.
pub fn decide(
    pod_json: &Value,
    pod: &AdmittedPod<'_>,
    namespace: &str,
    resolution: Resolution,
    config: &EngineConfig,
) -> Decision {
    let who = pod.display(namespace);
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

/// An empty command is no command (the image entrypoint), as for the hooks themselves.
fn same_command(pod: Option<&[&str]>, hook: Option<&[String]>) -> bool {
    let pod = pod.unwrap_or_default();
    let hook = hook.unwrap_or_default();
    pod.len() == hook.len() && pod.iter().zip(hook).all(|(a, b)| *a == b)
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
    pod: &AdmittedPod<'_>,
    resolution: Resolution,
) -> (Vec<PatchOperation>, Vec<String>) {
    let mut ops = Vec::new();
    let init_containers = pod.init_containers();
    let app_names: Vec<&str> = pod.containers().iter().map(|c| c.name).collect();

    let nothing_applies = resolution.is_empty();
    let Resolution {
        scope, init, exec, ..
    } = resolution;

    // 1. Init containers, after the leading restore-wait/restic-wait run.
    let mut to_add: Vec<InitContainer> = Vec::new();
    for hook in init {
        for c in hook.containers {
            let name_taken = app_names.contains(&c.name.as_str())
                || init_containers.is_some_and(|ics| ics.iter().any(|ic| ic.name == c.name));
            // Velero (or an earlier restore-hooks cycle under another name) already injected it.
            let same_definition = init_containers.is_some_and(|ics| {
                ics.iter().any(|ic| {
                    ic.image == Some(c.image.as_str())
                        && same_command(ic.command.as_deref(), c.command.as_deref())
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
                Value::Array(to_add.into_iter().map(|c| c.value).collect()),
            )),
            Some(existing) => {
                let start = existing
                    .iter()
                    .take_while(|c| RESTORE_WAIT_CONTAINERS.contains(&c.name))
                    .count();
                for (i, c) in to_add.into_iter().enumerate() {
                    let index = (start + i).to_string();
                    ops.push(add(
                        pointer(["spec", "initContainers", index.as_str()]),
                        c.value,
                    ));
                }
            }
        }
    }
    let injected = if ops.is_empty() { Vec::new() } else { injected };

    // 2. Annotations and the exec label: desired state, diffed against the pod.
    let no_entries = BTreeMap::new();
    let annotations = pod.annotations().unwrap_or(&no_entries);
    let labels = pod.labels().unwrap_or(&no_entries);
    let mut want_annotations: BTreeMap<&str, Option<String>> = BTreeMap::new();
    let mut want_labels: BTreeMap<&str, Option<String>> = BTreeMap::new();
    // A pod created with our status (backed up after an earlier restore) is a new pod: its
    // hooks run again in this restore.
    want_annotations.insert(STATUS_ANNOTATION, None);
    if nothing_applies {
        // Nothing applies: drop stale state so the controller does not run an old plan.
        want_annotations.insert(PLAN_ANNOTATION, None);
        want_labels.insert(EXEC_LABEL, None);
    } else {
        let any_exec = !exec.is_empty();
        let plan = ExecPlan {
            restore: scope.restore,
            hooks: exec,
        };
        want_annotations.insert(PLAN_ANNOTATION, Some(plan.to_annotation()));
        want_labels.insert(EXEC_LABEL, any_exec.then(|| EXEC_PENDING.to_string()));
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
