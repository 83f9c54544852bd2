//! The webhook's decision for one pod, shared by `POST /mutate` and `restore-hooks inject`: one
//! code path decides, two front ends (docs/behaviour.md §4).
//!
//! The patch only ever adds, replaces or removes what this product owns; it never rewrites a list
//! or the spec from a typed struct, so fields newer than our Kubernetes API version survive. It is
//! computed from the pod view alone: the request's object is never built as a JSON tree.

use std::collections::BTreeMap;

use jiff::Timestamp;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::Value;

use crate::config::{EngineConfig, OnInvalid};
use crate::exec_step::timestamp;
use crate::hooks::plan::PlannedHook;
use crate::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecPlan, INJECTED_ANNOTATION, MAX_PLAN_BYTES, MAX_STATUS_BYTES,
    MAX_TOTAL_ANNOTATION_BYTES, PLAN_ANNOTATION, RESTORE_RUN_LABEL, STATUS_ANNOTATION,
};
use crate::hooks::resolve::{
    Placement, PodContext, RESTORE_WAIT_CONTAINERS, Resolution, invalid_hook, resolve_hooks,
};
use crate::hooks::scope::{ScopeVia, restore_scope};
use crate::hooks::signing::{
    PLAN_SIGNATURE_ANNOTATION, PlanKeys, PodBinding, STATUS_SIGNATURE_ANNOTATION,
};
use crate::hooks::window::closed_window;
use crate::index::HookIndex;

/// How plans are issued: the installation's keys (none: unsigned, `inject` without a key), the
/// time to stamp into `issuedAt` and the plan's id.
#[derive(Clone, Copy, Debug)]
pub struct Issuer<'a> {
    /// Signs the plan (`restore-hooks.dev/plan-signature`, docs/behaviour.md §9.1); `None`: the
    /// plan is written unsigned, which the controller refuses (§4.9, §9.3).
    pub keys: Option<&'a PlanKeys>,
    /// The plan's `issuedAt`.
    pub now: Timestamp,
    /// The plan's `id`: random, never issued before (the shell draws it; §5.2, §9.3).
    pub plan_id: &'a str,
}

/// Who sent the pod's CREATE (docs/behaviour.md §9.9); re-exported for the shells.
pub use crate::hooks::authority::{ExecRight, Requester};

/// The admission answer for one pod (docs/behaviour.md §3.6, §4.5), as the webhook returns it and
/// `restore-hooks inject` prints it.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// Allow without a patch: not a restored pod, or nothing to change.
    Unchanged {
        /// Admission warnings (the AdmissionResponse's `warnings`, one entry each), e.g. skipped
        /// invalid hooks under `--on-invalid warn`.
        warnings: Vec<String>,
    },
    /// Allow with this patch.
    Patch {
        /// The JSON Patch (RFC 6902) of docs/behaviour.md §4.5.
        patch: Patch,
        /// Admission warnings: invalid hooks skipped under `--on-invalid warn`, not-applicable
        /// hooks, capped timeouts.
        warnings: Vec<String>,
        /// Names of the init containers the patch adds or replaces, in order.
        injected: Vec<String>,
        /// The plan holds the pod's annotation exec hook, refused (§9.9).
        refused_annotation_hook: bool,
    },
    /// Deny with this message (invalid hooks under `--on-invalid deny`, or a plan too large).
    Deny {
        /// The denial message: the pod, the restore and every problem (§3.6), or the size bound
        /// the plan or the pod's annotations exceed (§10).
        message: String,
    },
}

/// Decides what happens to the pod, created by `requester`.
pub fn evaluate(
    ctx: &PodContext<'_>,
    index: &HookIndex,
    config: &EngineConfig,
    issuer: &Issuer<'_>,
    requester: &Requester<'_>,
) -> Admission {
    let Some(scope) = restore_scope(
        ctx.namespace,
        ctx.pod.labels(),
        ctx.namespace_labels,
        config,
    ) else {
        return Admission::Unchanged { warnings: vec![] };
    };
    // A restore-namespace label naming a Velero Restore whose window is over brings no pod into
    // scope any more (docs/behaviour.md §1.6): the rollout of the next day is not a restore.
    if scope.via == ScopeVia::NamespaceLabel {
        let restore = index.velero_restore(&config.velero_namespace, &scope.restore);
        let window = restore.and_then(|r| r.window.as_ref());
        if let Some(closed) = closed_window(window, config.restore_window(), issuer.now) {
            let warnings = vec![format!(
                "restore-hooks: namespace {} still carries {}={}, but that Velero Restore's \
                     restore window closed at {closed}: this pod is not a restored pod. Remove \
                     the label (kubectl label namespace {} {}-)",
                ctx.namespace,
                config.restore_namespace_label,
                scope.restore,
                ctx.namespace,
                config.restore_namespace_label
            )];
            // The pod-state policy lets a pod bring restore-hooks state into a labelled
            // namespace because the webhook replaces it there (§9.5); out of scope, it is removed.
            let ops = strip_restore_state(ctx.pod);
            return if ops.is_empty() {
                Admission::Unchanged { warnings }
            } else {
                Admission::Patch {
                    patch: Patch(ops),
                    warnings,
                    injected: Vec::new(),
                    refused_annotation_hook: false,
                }
            };
        }
    }
    let resolution = resolve_hooks(ctx, &scope, index, config, requester);
    answer(ctx, resolution, config, issuer)
}

/// Turns a resolution into the admission decision for this pod.
pub fn answer(
    ctx: &PodContext<'_>,
    resolution: Resolution,
    config: &EngineConfig,
    issuer: &Issuer<'_>,
) -> Admission {
    let who = ctx.pod.display(ctx.namespace);
    // A pod nothing would create again is never denied for its hooks (docs/behaviour.md §3.6):
    // Velero does not retry a pod it could not create, and restores volume data only into the
    // pod it created, so a denied pod is lost, or its replacement starts on empty volumes.
    let restores_volumes = restores_volume_data(ctx.pod);
    let never_denied = restores_volumes || resolution.scope.via == ScopeVia::PodLabel;
    if !resolution.problems.is_empty() && config.on_invalid == OnInvalid::Deny && !never_denied {
        let problems: Vec<String> = resolution.problems.iter().map(|p| p.to_string()).collect();
        return Admission::Deny {
            message: format!(
                "restore-hooks: pod {who} (restore {:?}) has invalid restore hooks: {}. Fix the \
                 hook definitions and recreate the pod, or run the webhook with --on-invalid warn \
                 to admit pods without their invalid hooks",
                resolution.restore,
                problems.join("; ")
            ),
        };
    }
    let why = match config.on_invalid {
        OnInvalid::Deny if restores_volumes => {
            " (admitted all the same: the pod restores volume data, which a denial would lose)"
        }
        OnInvalid::Deny => {
            " (admitted all the same: Velero created the pod and would not create it again)"
        }
        OnInvalid::Warn => "",
    };
    let mut warnings: Vec<String> = resolution
        .problems
        .iter()
        .map(|p| format!("restore-hooks: pod {who}: skipped invalid hook {p}{why}"))
        .collect();
    warnings.extend(
        resolution
            .notes
            .iter()
            .map(|n| format!("restore-hooks: pod {who}: {n}")),
    );
    // The hooks it is admitted without are planned as failed, so that they show on the pod, in
    // its Events and in the restore's counts, not only in a warning nobody reads (§3.6).
    let mut resolution = resolution;
    let invalid: Vec<PlannedHook> = resolution
        .problems
        .iter()
        .map(|p| invalid_hook(p, config))
        .collect();
    resolution.exec.extend(invalid);
    let restore = resolution.restore.clone();
    let refused_annotation_hook = resolution.refused_annotation_hook;
    // For a pod that restores volume data, a plan that does not fit is recorded as one failed
    // hook rather than a denial; should even that not fit (the pod's own annotations fill the
    // budget), it is admitted unmarked, and the controller reports it (§6.1).
    let fallback = never_denied.then(|| {
        let mut r = resolution.clone();
        r.exec.clear();
        r
    });
    match build_patch(ctx, resolution, issuer) {
        Err(message) => match fallback {
            Some(mut fallback) => {
                let problem = crate::hooks::problem::Problem::new("annotation", message.clone());
                fallback.exec.push(invalid_hook(&problem, config));
                warnings.push(format!(
                    "restore-hooks: pod {who}: its exec hooks are not planned: {message} (admitted \
                     all the same: nothing would create the pod again)"
                ));
                match build_patch(ctx, fallback, issuer) {
                    Ok((ops, injected)) if !ops.is_empty() => Admission::Patch {
                        patch: Patch(ops),
                        warnings,
                        injected,
                        refused_annotation_hook,
                    },
                    _ => Admission::Unchanged { warnings },
                }
            }
            None => Admission::Deny {
                message: format!("restore-hooks: pod {who} (restore {restore:?}): {message}"),
            },
        },
        Ok((ops, _)) if ops.is_empty() => Admission::Unchanged { warnings },
        Ok((ops, injected)) => Admission::Patch {
            patch: Patch(ops),
            warnings,
            injected,
            refused_annotation_hook,
        },
    }
}

/// Whether Velero restores volume data into the pod (file-system backup): it carries the
/// `restore-wait` (or, before Velero 1.10, `restic-wait`) init container. Velero creates the
/// pod's PodVolumeRestores only once the pod exists, so a pod denied at admission loses that
/// data (docs/behaviour.md §3.6).
pub fn restores_volume_data(pod: &crate::hooks::pod::AdmittedPod<'_>) -> bool {
    pod.init_containers()
        .into_iter()
        .flatten()
        .any(|c| RESTORE_WAIT_CONTAINERS.contains(&&*c.name))
}

/// Removes the plan, the status, their signatures and the exec and restore-run labels a pod was
/// created with: a pod no restore scope covers carries none of restore-hooks' state.
fn strip_restore_state(pod: &crate::hooks::pod::AdmittedPod<'_>) -> Vec<PatchOperation> {
    let no_entries = BTreeMap::new();
    let annotations = pod.annotations().unwrap_or(&no_entries);
    let labels = pod.labels().unwrap_or(&no_entries);
    let annotation_keys = [
        PLAN_ANNOTATION,
        PLAN_SIGNATURE_ANNOTATION,
        STATUS_ANNOTATION,
        STATUS_SIGNATURE_ANNOTATION,
    ];
    let annotation_ops = annotation_keys
        .into_iter()
        .filter(|k| annotations.contains_key(*k))
        .map(|k| ("annotations", k));
    let label_ops = [EXEC_LABEL, RESTORE_RUN_LABEL]
        .into_iter()
        .filter(|k| labels.contains_key(*k))
        .map(|k| ("labels", k));
    annotation_ops
        .chain(label_ops)
        .map(|(field, key)| {
            PatchOperation::Remove(RemoveOperation {
                path: pointer(["metadata", field, key]),
            })
        })
        .collect()
}

fn pointer<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    // from_tokens escapes `~` and `/` (RFC 6901): annotation keys contain `/`.
    PointerBuf::from_tokens(tokens)
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// The operations that bring the pod to the state the resolution asks for, and nothing more; or
/// why the pod must be denied (a plan the API server would refuse).
fn build_patch(
    ctx: &PodContext<'_>,
    resolution: Resolution,
    issuer: &Issuer<'_>,
) -> Result<(Vec<PatchOperation>, Vec<String>), String> {
    let pod = ctx.pod;
    let mut ops = Vec::new();
    let has_spec = pod.spec.is_some();
    let init_containers = pod.init_containers();

    let nothing_planned = resolution.is_empty() && resolution.not_applicable.is_empty();
    let Resolution {
        scope,
        restore,
        init,
        init_index,
        exec,
        not_applicable,
        vouched_by: resolution_voucher,
        ..
    } = resolution;

    // 1. Init containers: stale copies of our own are replaced where they stand (before any
    // insertion, so their indices are still the admitted ones), new ones go directly after the
    // last restore-wait / restic-wait or Velero's own init hook (`init_index`, §4.2).
    let mut injected: Vec<String> = Vec::new();
    let mut to_add: Vec<Value> = Vec::new();
    for placed in init.into_iter().flat_map(|h| h.containers) {
        match placed.placement {
            Placement::Present => {}
            Placement::Replace(i) => {
                injected.push(placed.container.name.clone());
                ops.push(PatchOperation::Replace(ReplaceOperation {
                    path: pointer(["spec", "initContainers", i.to_string().as_str()]),
                    value: placed.container.value,
                }));
            }
            Placement::New => {
                injected.push(placed.container.name.clone());
                to_add.push(placed.container.value);
            }
        }
    }
    if !has_spec {
        // Nothing can be injected into a pod without a spec (the API server rejects it anyway).
        ops.clear();
        to_add.clear();
        injected.clear();
    }
    if !to_add.is_empty() {
        match init_containers {
            // Absent or null: add the whole array (`add .../-` into a missing array fails).
            None => ops.push(add(
                pointer(["spec", "initContainers"]),
                Value::Array(to_add),
            )),
            Some(_) => {
                for (i, value) in to_add.into_iter().enumerate() {
                    let index = (init_index + i).to_string();
                    ops.push(add(
                        pointer(["spec", "initContainers", index.as_str()]),
                        value,
                    ));
                }
            }
        }
    }

    // 2. Annotations and labels: desired state, diffed against the pod.
    let no_entries = BTreeMap::new();
    let annotations = pod.annotations().unwrap_or(&no_entries);
    let labels = pod.labels().unwrap_or(&no_entries);
    let mut want_annotations: BTreeMap<&str, Option<String>> = BTreeMap::new();
    let mut want_labels: BTreeMap<&str, Option<String>> = BTreeMap::new();
    // A pod created with our status (backed up after an earlier restore, or copied) is a new
    // pod: its hooks run again in this restore, under a plan issued now (below), never under
    // one it brought along.
    want_annotations.insert(STATUS_ANNOTATION, None);
    want_annotations.insert(STATUS_SIGNATURE_ANNOTATION, None);
    // Every pod admitted in a restore scope is marked, so that hook objects arriving later can
    // find it (docs/behaviour.md §7.2).
    want_labels.insert(RESTORE_RUN_LABEL, Some(scope.restore.clone()));
    if nothing_planned {
        // Nothing applies: drop stale state so the controller does not run an old plan.
        want_annotations.insert(PLAN_ANNOTATION, None);
        want_annotations.insert(PLAN_SIGNATURE_ANNOTATION, None);
        want_labels.insert(EXEC_LABEL, None);
    } else {
        let any_exec = !exec.is_empty();
        let plan = ExecPlan {
            id: issuer.plan_id.to_string(),
            restore,
            issued_at: Some(timestamp(issuer.now)),
            hooks: exec,
            not_applicable,
            missed_init: Vec::new(),
            vouched_by: Some(resolution_voucher),
            late_from: None,
        };
        let binding = PodBinding {
            namespace: ctx.namespace,
            name: pod.name().unwrap_or_default(),
            generate_name: pod.generate_name().unwrap_or_default(),
        };
        // Always a new plan, even when the pod brings one that verifies (a reinvocation on our
        // own output, or a copy of a fresh plan): a plan's id must be carried by one pod only.
        let text = plan.to_annotation();
        let signature = issuer.keys.map(|k| k.sign_plan(binding, &text));
        if text.len() > MAX_PLAN_BYTES {
            return Err(format!(
                "its exec plan would be {} bytes, over the {} KiB restore-hooks allows (Kubernetes \
                 limits all annotations of a pod to 256 KiB); shorten the commands of its {} exec \
                 hook(s) or move long scripts into the image or a ConfigMap",
                text.len(),
                MAX_PLAN_BYTES / 1024,
                plan.hooks.len()
            ));
        }
        want_annotations.insert(PLAN_ANNOTATION, Some(text));
        want_annotations.insert(PLAN_SIGNATURE_ANNOTATION, signature);
        want_labels.insert(EXEC_LABEL, any_exec.then(|| EXEC_PENDING.to_string()));
    }
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
    check_annotation_budget(annotations, &want_annotations)?;

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
        if pod.metadata.is_none() && !metadata_added {
            ops.push(add(
                pointer(["metadata"]),
                Value::Object(Default::default()),
            ));
            metadata_added = true;
        }
        let field_is_object = pod.metadata.as_ref().is_some_and(|m| match field {
            "annotations" => m.annotations.is_some(),
            _ => m.labels.is_some(),
        });
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
    Ok((ops, injected))
}

/// Kubernetes rejects a pod whose annotations exceed 256 KiB in total, with an error that does
/// not say which webhook grew them: check before answering, keeping room for the status the
/// controller will write.
fn check_annotation_budget(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<&str, Option<String>>,
) -> Result<(), String> {
    let kept: usize = current
        .iter()
        .filter(|(k, _)| !wanted.contains_key(k.as_str()))
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let ours: usize = wanted
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| k.len() + v.len()))
        .sum();
    let reserve =
        MAX_STATUS_BYTES + STATUS_ANNOTATION.len() + STATUS_SIGNATURE_ANNOTATION.len() + 128;
    let total = kept + ours + reserve;
    if total > MAX_TOTAL_ANNOTATION_BYTES {
        return Err(format!(
            "its annotations would total {} KiB with the exec plan ({} KiB) and room for the hook \
             status ({} KiB), over Kubernetes' limit of {} KiB; the pod already carries {} KiB of \
             other annotations",
            total.div_ceil(1024),
            ours.div_ceil(1024),
            reserve.div_ceil(1024),
            MAX_TOTAL_ANNOTATION_BYTES / 1024,
            kept.div_ceil(1024)
        ));
    }
    Ok(())
}
