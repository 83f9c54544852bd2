//! What a hook object that arrived after its pod adds to the pod's plan (docs/behaviour.md §7.2,
//! §7.3). Pure: the controller reads the pod, resolves the object against it
//! ([`crate::hooks::resolve::resolve_late_hooks`]), calls [`merge`] with the time, and signs and
//! writes what it returns.
//!
//! The rules, in the order they apply:
//! - an object that contributed to the plan before (at admission or late) is done with the pod:
//!   an edit of it affects only pods it has not contributed to yet;
//! - hooks the plan already knows (by source and index) are not added twice;
//! - an init hook whose containers the pod has was injected at admission; otherwise it is
//!   recorded as missed (a running pod cannot get init containers);
//! - exec hooks are added only to pods younger than `--late-hook-window`; an older pod gets
//!   nothing, and the object reports it;
//! - the merged plan must stay within [`MAX_PLAN_BYTES`].

use jiff::{SignedDuration, Timestamp};

use crate::config::EngineConfig;
use crate::hooks::compiled::{CompiledObject, SourceKind};
use crate::hooks::plan::{ExecPlan, HookRef, MAX_PLAN_BYTES};
use crate::hooks::resolve::Resolution;
use crate::hooks::scope::restore_scope;
use crate::hooks::types::Labels;
use crate::index::HookIndex;
use crate::restore::MarkedPod;

/// What [`merge`] decided for one pod.
#[derive(Clone, Debug, PartialEq)]
pub enum LateMerge {
    /// Nothing to add: the object contributed before, or everything it has is in the plan.
    Unchanged,
    /// The object has exec hooks for the pod, but the pod is older than the window.
    TooOld,
    /// Write this plan (and set the exec label when `exec > 0`).
    Extended {
        /// The plan with the object's hooks appended (boxed: the other variants are empty).
        plan: Box<ExecPlan>,
        /// `plan` as the annotation value, within [`MAX_PLAN_BYTES`].
        annotation: String,
        /// How many exec hooks were added.
        exec: usize,
        /// How many init hooks were recorded as missed.
        missed_init: usize,
    },
}

/// The merged plan would exceed the plan annotation's bound (docs/behaviour.md §10).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the plan would be {bytes} bytes with these hooks, over the {} KiB limit; split the hooks \
     over fewer objects or shorten their commands",
    MAX_PLAN_BYTES / 1024
)]
pub struct PlanTooLarge {
    /// The merged plan's size in bytes.
    pub bytes: usize,
}

/// The pod as [`merge`] needs it.
#[derive(Clone, Copy, Debug)]
pub struct LatePod<'a> {
    /// `metadata.creationTimestamp`; unknown counts as too old.
    pub created: Option<Timestamp>,
    /// The names of its init containers.
    pub init_containers: &'a [&'a str],
}

/// Merges what `object` adds (`late`, its resolution against the pod) into `plan`, the pod's
/// verified plan or a new one, at time `now`.
pub fn merge(
    mut plan: ExecPlan,
    object: &CompiledObject,
    late: Resolution,
    pod: LatePod<'_>,
    now: Timestamp,
    window: SignedDuration,
) -> Result<LateMerge, PlanTooLarge> {
    let source = object.source();
    if contributed(&plan, &source) {
        return Ok(LateMerge::Unchanged);
    }
    let new_exec: Vec<_> = late
        .exec
        .into_iter()
        .filter(|h| !knows(&plan, &h.source, h.index))
        .collect();
    let new_missed: Vec<HookRef> = late
        .init
        .iter()
        .filter(|init| {
            // Injected at admission (the webhook had the object then): not missed.
            let injected = init
                .containers
                .iter()
                .all(|c| pod.init_containers.contains(&c.container.name.as_str()));
            !injected && !knows(&plan, &source, init.index)
        })
        .map(|init| HookRef {
            source: source.clone(),
            name: object.name.clone(),
            index: init.index,
            container: String::new(),
        })
        .collect();
    let new_not_applicable: Vec<HookRef> = late
        .not_applicable
        .into_iter()
        .filter(|h| !knows(&plan, &h.source, h.index))
        .collect();
    if new_exec.is_empty() && new_missed.is_empty() && new_not_applicable.is_empty() {
        return Ok(LateMerge::Unchanged);
    }
    let young = pod
        .created
        .is_some_and(|created| now.duration_since(created) < window);
    if !young && !new_exec.is_empty() {
        return Ok(LateMerge::TooOld);
    }
    let (exec, missed_init) = (new_exec.len(), new_missed.len());
    if exec > 0 {
        // Where the late hooks begin, kept across later extensions (`restore-hooks describe`
        // shows them as late, docs/behaviour.md §5.2).
        plan.late_from.get_or_insert(plan.hooks.len());
    }
    plan.hooks.extend(new_exec);
    plan.missed_init.extend(new_missed);
    plan.not_applicable.extend(new_not_applicable);
    let annotation = plan.to_annotation();
    if annotation.len() > MAX_PLAN_BYTES {
        return Err(PlanTooLarge {
            bytes: annotation.len(),
        });
    }
    Ok(LateMerge::Extended {
        plan: Box::new(plan),
        annotation,
        exec,
        missed_init,
    })
}

/// Whether `source` has any hook in the plan: exec, missed init or not applicable. Such an object
/// is done with the pod ([`merge`] adds nothing); the controller asks first, before it resolves
/// the object against the pod.
pub fn contributed(plan: &ExecPlan, source: &str) -> bool {
    plan.hooks
        .iter()
        .map(|h| &h.source)
        .chain(plan.missed_init.iter().map(|r| &r.source))
        .chain(plan.not_applicable.iter().map(|r| &r.source))
        .any(|s| s == source)
}

fn knows(plan: &ExecPlan, source: &str, index: usize) -> bool {
    plan.hooks
        .iter()
        .any(|h| h.source == source && h.index == index)
        || plan
            .missed_init
            .iter()
            .chain(&plan.not_applicable)
            .any(|h| h.source == source && h.index == index)
}

/// Whether `object` may have hooks to add to the marked pod `pod`, whose namespace has
/// `namespace_labels`: it selects the pod now (the webhook's rules: scope, restore name,
/// selectors), and the pod's annotations do not show it already (reading such a pod would only
/// confirm so). `hooks` finds the Velero Restore whose full name the restore label may shorten.
pub fn may_extend(
    object: &CompiledObject,
    pod: &MarkedPod,
    namespace_labels: &Labels,
    hooks: &HookIndex,
    config: &EngineConfig,
) -> bool {
    if applied_at_admission(object, &pod.plan_sources, &pod.injected) {
        return false;
    }
    if object.kind == SourceKind::RestoreHook
        && object.namespace.as_deref() != Some(pod.namespace.as_str())
    {
        return false;
    }
    let Some(scope) = restore_scope(
        &pod.namespace,
        Some(&pod.labels),
        Some(namespace_labels),
        config,
    ) else {
        return false;
    };
    let restore = hooks
        .velero_restore(&config.velero_namespace, &scope.restore)
        .map_or(scope.restore.clone(), |r| r.name.clone());
    object.entries.iter().any(|e| {
        e.filter.as_ref().is_ok_and(|f| {
            f.matches(
                &pod.namespace,
                Some(namespace_labels),
                &restore,
                &pod.labels,
            )
        })
    })
}

/// Whether a pod's annotations already show all of `object` (no need to read the pod): its
/// hooks are among the plan's sources, or it has only init hooks and the webhook injected all of
/// their containers.
pub fn applied_at_admission(
    object: &CompiledObject,
    plan_sources: &[Box<str>],
    injected: &[Box<str>],
) -> bool {
    let source = object.source();
    if plan_sources.iter().any(|s| **s == *source) {
        return true;
    }
    let mut posts = object.entries.iter().flat_map(|e| &e.post_hooks);
    posts.all(|p| {
        p.exec.is_none()
            && p.init
                .as_ref()
                .and_then(|init| init.as_ref().ok())
                .is_none_or(|containers| {
                    containers
                        .iter()
                        .all(|c| injected.iter().any(|n| **n == *c.name))
                })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EngineConfig;
    use crate::hooks::compiled::compile_restore_hook;
    use crate::hooks::plan::PlannedHook;
    use crate::hooks::pod::AdmittedPod;
    use crate::hooks::resolve::{PodContext, resolve_late_hooks};
    use crate::hooks::scope::restore_scope;
    use crate::hooks::types::{Labels, RestoreHook};

    const NOW: &str = "2026-12-04T10:00:00Z";

    fn object(post_hooks: serde_json::Value) -> CompiledObject {
        let hook: RestoreHook = serde_json::from_value(serde_json::json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "late", "namespace": "shop"},
            "spec": {"postHooks": post_hooks},
        }))
        .unwrap();
        compile_restore_hook(&hook)
    }

    /// The object's resolution against a restored pod `db-0` with init containers `init`.
    fn resolution(object: &CompiledObject, init: &[&str]) -> Resolution {
        let pod = serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "shop",
                         "labels": {"velero.io/restore-name": "r1"}},
            "spec": {
                "containers": [{"name": "db", "image": "postgres"}],
                "initContainers": init.iter().map(|n| serde_json::json!({"name": n, "image": "x"})).collect::<Vec<_>>(),
            },
        })
        .to_string();
        let view = AdmittedPod::from_json_str(&pod).unwrap();
        let config = EngineConfig::default();
        let scope = restore_scope("shop", view.labels(), None::<&Labels>, &config).unwrap();
        let ctx = PodContext {
            pod: &view,
            namespace: "shop",
            namespace_labels: None,
        };
        resolve_late_hooks(
            &ctx,
            &scope,
            "r1",
            None,
            object,
            &crate::index::HookIndex::new(),
            &config,
        )
    }

    fn exec_hook() -> serde_json::Value {
        serde_json::json!({"exec": {"command": ["/bin/reindex"]}})
    }

    fn init_hook(name: &str) -> serde_json::Value {
        serde_json::json!({"init": {"initContainers": [{"name": name, "image": "busybox"}]}})
    }

    #[derive(Debug, PartialEq)]
    enum Want {
        Unchanged,
        TooOld,
        /// (exec hooks added, init hooks missed, not-applicable refs in the plan)
        Extended(usize, usize, usize),
    }

    #[test]
    fn merge_rules() {
        let now: Timestamp = NOW.parse().unwrap();
        let minutes = |m: i64| Some(now - SignedDuration::from_mins(m));
        let window = SignedDuration::from_mins(30);
        let reindex = object(serde_json::json!([exec_hook()]));
        let seeded = object(serde_json::json!([init_hook("seed"), exec_hook()]));
        let init_only = object(serde_json::json!([init_hook("seed")]));
        let missing =
            object(serde_json::json!([{"exec": {"container": "sidecar", "command": ["/x"]}}]));
        let plan_with = |index: usize| {
            let mut hook = PlannedHook::example("late", "restorehook/late", "db");
            hook.index = index;
            ExecPlan {
                hooks: vec![hook],
                ..ExecPlan::default()
            }
        };
        // An index the object no longer has: it contributed before and was edited since.
        let contributed_before = plan_with(7);
        let with_reindex = plan_with(0);
        // (what, plan, object, pod init containers, created, want)
        type Case<'a> = (
            &'a str,
            ExecPlan,
            &'a CompiledObject,
            &'a [&'a str],
            Option<Timestamp>,
            Want,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "an exec hook on a young pod",
                ExecPlan::default(),
                &reindex,
                &[],
                minutes(5),
                Want::Extended(1, 0, 0),
            ),
            (
                "an exec hook on a pod past the window",
                ExecPlan::default(),
                &reindex,
                &[],
                minutes(31),
                Want::TooOld,
            ),
            (
                "an unknown creation time counts as too old",
                ExecPlan::default(),
                &reindex,
                &[],
                None,
                Want::TooOld,
            ),
            (
                "the object contributed before: an edit adds nothing",
                contributed_before,
                &reindex,
                &[],
                minutes(5),
                Want::Unchanged,
            ),
            (
                "its hooks are known by source and index",
                with_reindex,
                &reindex,
                &[],
                minutes(5),
                Want::Unchanged,
            ),
            (
                "init hook missed, exec added",
                ExecPlan::default(),
                &seeded,
                &[],
                minutes(5),
                Want::Extended(1, 1, 0),
            ),
            (
                "init hook injected at admission: not missed",
                ExecPlan::default(),
                &seeded,
                &["seed"],
                minutes(5),
                Want::Extended(1, 0, 0),
            ),
            (
                "a missed init hook is recorded whatever the pod's age",
                ExecPlan::default(),
                &init_only,
                &[],
                minutes(600),
                Want::Extended(0, 1, 0),
            ),
            (
                "an exec hook for a container the pod lacks is recorded, not run",
                ExecPlan::default(),
                &missing,
                &[],
                minutes(600),
                Want::Extended(0, 0, 1),
            ),
        ];
        for (what, plan, object, init, created, want) in cases {
            let late = resolution(object, init);
            let pod = LatePod {
                created,
                init_containers: init,
            };
            let before = plan.clone();
            let got = match merge(plan, object, late, pod, now, window).expect(what) {
                LateMerge::Unchanged => Want::Unchanged,
                LateMerge::TooOld => Want::TooOld,
                LateMerge::Extended {
                    plan,
                    annotation,
                    exec,
                    missed_init,
                } => {
                    assert_eq!(annotation, plan.to_annotation(), "{what}");
                    assert_eq!(plan.hooks.len(), before.hooks.len() + exec, "{what}");
                    assert_eq!(
                        plan.hooks[..before.hooks.len()],
                        before.hooks[..],
                        "{what}: appended, never reordered"
                    );
                    assert_eq!(plan.missed_init.len(), missed_init, "{what}");
                    assert!(
                        plan.missed_init
                            .iter()
                            .all(|r| r.source == "restorehook/late" && r.name == "late"),
                        "{what}"
                    );
                    Want::Extended(exec, missed_init, plan.not_applicable.len())
                }
            };
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_merge_past_the_plan_bound_is_an_error_naming_the_size() {
        let now: Timestamp = NOW.parse().unwrap();
        let long = "x".repeat(MAX_PLAN_BYTES);
        let big = object(serde_json::json!([{"exec": {"command": [long]}}]));
        let late = resolution(&big, &[]);
        let pod = LatePod {
            created: Some(now),
            init_containers: &[],
        };
        let err = merge(
            ExecPlan::default(),
            &big,
            late,
            pod,
            now,
            SignedDuration::from_mins(30),
        )
        .unwrap_err();
        assert!(err.bytes > MAX_PLAN_BYTES);
        assert!(err.to_string().contains("KiB limit"), "{err}");
    }

    #[test]
    fn applied_at_admission_rules() {
        let set = |names: &[&str]| {
            names
                .iter()
                .map(|&n| Box::from(n))
                .collect::<Vec<Box<str>>>()
        };
        let init_only = object(serde_json::json!([init_hook("seed")]));
        let with_exec = object(serde_json::json!([init_hook("seed"), exec_hook()]));
        let cases = [
            (
                "in the plan's sources",
                &with_exec,
                set(&["restorehook/late"]),
                set(&[]),
                true,
            ),
            (
                "init only, all injected",
                &init_only,
                set(&[]),
                set(&["seed"]),
                true,
            ),
            (
                "init only, not injected",
                &init_only,
                set(&[]),
                set(&["other"]),
                false,
            ),
            (
                "exec hooks not in the plan",
                &with_exec,
                set(&[]),
                set(&["seed"]),
                false,
            ),
        ];
        for (what, object, sources, injected, want) in cases {
            assert_eq!(
                applied_at_admission(object, &sources, &injected),
                want,
                "{what}"
            );
        }
    }
}
