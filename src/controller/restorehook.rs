//! `RestoreHook.status`: how many pods planned hooks of each RestoreHook, and how those hooks
//! ended. Counts are recomputed from the pods' plans and statuses (idempotent, so a restarted
//! controller writes the same numbers), coalesced per RestoreHook, and written to the `/status`
//! subresource with a merge patch.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::hooks::plan::{EXEC_LABEL, ExecPlan, ExecStatus, HookPhase, PLAN_ANNOTATION};
use crate::hooks::types::{HookCounts, RestoreHook};

use super::status::recorded;

/// The `source` prefix of plan hooks that come from a RestoreHook.
pub const SOURCE_PREFIX: &str = "restorehook/";

/// Wait this long after a change before recounting, so that a burst of hook results (a restore
/// of many pods) costs one list per namespace, not one per hook.
const COALESCE: Duration = Duration::from_millis(300);

/// Names of the RestoreHooks a plan draws hooks from.
pub fn sources(plan: &ExecPlan) -> BTreeSet<String> {
    plan.hooks
        .iter()
        .filter_map(|h| h.source.strip_prefix(SOURCE_PREFIX))
        .map(str::to_string)
        .collect()
}

/// One pod's contribution to RestoreHook `name`: `None` when none of its hooks come from it.
/// `Skipped` hooks count as failed (they did not run because of a failure), as Velero counts
/// hooks that never executed.
pub fn count(plan: &ExecPlan, status: Option<&ExecStatus>, name: &str) -> Option<HookCounts> {
    let source = format!("{SOURCE_PREFIX}{name}");
    let mut counts = HookCounts::default();
    let mut any = false;
    for (i, hook) in plan.hooks.iter().enumerate() {
        if hook.source != source {
            continue;
        }
        any = true;
        let phase = status
            .and_then(|s| s.hooks.get(i))
            .filter(|s| s.name == hook.name && s.index == hook.index)
            .map(|s| s.phase)
            .unwrap_or(HookPhase::Pending);
        match phase {
            HookPhase::Succeeded => counts.succeeded += 1,
            HookPhase::Failed | HookPhase::Skipped => counts.failed += 1,
            HookPhase::Pending | HookPhase::Running => counts.pending += 1,
        }
    }
    any.then_some(counts)
}

enum Msg {
    /// These RestoreHooks of this namespace may have new counts.
    Touch {
        namespace: String,
        names: BTreeSet<String>,
    },
    /// A pod is gone: keep counting its last known outcome (it can no longer be listed).
    Gone {
        namespace: String,
        uid: String,
        plan: ExecPlan,
        status: ExecStatus,
    },
}

/// Sends work to the status writer task.
#[derive(Clone)]
pub struct RestoreHookStatus {
    tx: mpsc::UnboundedSender<Msg>,
}

impl RestoreHookStatus {
    /// Starts the writer; it ends when `stop` is cancelled (after a last flush).
    pub fn spawn(
        client: kube::Client,
        stop: CancellationToken,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(writer(client, rx, stop));
        (Self { tx }, task)
    }

    pub fn touch(&self, namespace: &str, plan: &ExecPlan) {
        let names = sources(plan);
        if !names.is_empty() {
            let _ = self.tx.send(Msg::Touch {
                namespace: namespace.to_string(),
                names,
            });
        }
    }

    pub fn pod_gone(&self, namespace: &str, uid: &str, plan: &ExecPlan, status: &ExecStatus) {
        if sources(plan).is_empty() {
            return;
        }
        let _ = self.tx.send(Msg::Gone {
            namespace: namespace.to_string(),
            uid: uid.to_string(),
            plan: plan.clone(),
            status: status.clone(),
        });
        self.touch(namespace, plan);
    }
}

type Tombstones = BTreeMap<String, BTreeMap<String, (ExecPlan, ExecStatus)>>;

async fn writer(
    client: kube::Client,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    stop: CancellationToken,
) {
    let mut dirty: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut tombstones: Tombstones = BTreeMap::new();
    let mut stopping = false;
    loop {
        if dirty.is_empty() {
            if stopping {
                return;
            }
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(m) => absorb(m, &mut dirty, &mut tombstones),
                    None => return,
                },
                _ = stop.cancelled() => { stopping = true; continue; }
            }
        }
        // Coalesce a burst, then recount every dirty RestoreHook.
        if !stopping {
            tokio::select! {
                _ = tokio::time::sleep(COALESCE) => {}
                _ = stop.cancelled() => stopping = true,
            }
        }
        while let Ok(m) = rx.try_recv() {
            absorb(m, &mut dirty, &mut tombstones);
        }
        let work = std::mem::take(&mut dirty);
        for (namespace, names) in work {
            if let Err(e) = update_namespace(&client, &namespace, &names, &tombstones).await {
                warn!(namespace = %namespace, restorehooks = ?names, error = %e, "could not update RestoreHook status; retrying");
                if !stopping {
                    dirty.entry(namespace).or_default().extend(names);
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.cancelled() => stopping = true,
                    }
                }
            }
        }
    }
}

fn absorb(msg: Msg, dirty: &mut BTreeMap<String, BTreeSet<String>>, tombstones: &mut Tombstones) {
    match msg {
        Msg::Touch { namespace, names } => dirty.entry(namespace).or_default().extend(names),
        Msg::Gone {
            namespace,
            uid,
            plan,
            status,
        } => {
            tombstones
                .entry(namespace)
                .or_default()
                .insert(uid, (plan, status));
        }
    }
}

async fn update_namespace(
    client: &kube::Client,
    namespace: &str,
    names: &BTreeSet<String>,
    tombstones: &Tombstones,
) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods.list(&ListParams::default().labels(EXEC_LABEL)).await?;
    let mut seen = BTreeSet::new();
    let mut entries: Vec<(ExecPlan, Option<ExecStatus>)> = Vec::new();
    for pod in listed.items {
        if let Some(uid) = &pod.metadata.uid {
            seen.insert(uid.clone());
        }
        let Some(plan) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PLAN_ANNOTATION))
            .and_then(|p| ExecPlan::from_annotation(p).ok())
        else {
            continue;
        };
        entries.push((plan, recorded(&pod).ok().flatten()));
    }
    for (uid, (plan, status)) in tombstones.get(namespace).into_iter().flatten() {
        if !seen.contains(uid) {
            entries.push((plan.clone(), Some(status.clone())));
        }
    }
    let api: Api<RestoreHook> = Api::namespaced(client.clone(), namespace);
    for name in names {
        let mut planned = 0i64;
        let mut total = HookCounts::default();
        for (plan, status) in &entries {
            if let Some(c) = count(plan, status.as_ref(), name) {
                planned += 1;
                total.succeeded += c.succeeded;
                total.failed += c.failed;
                total.pending += c.pending;
            }
        }
        let Some(rh) = api.get_opt(name).await? else {
            debug!(namespace, restorehook = %name, "RestoreHook no longer exists; status not written");
            continue;
        };
        let body = json!({"status": {
            "observedGeneration": rh.metadata.generation,
            "podsPlanned": planned,
            "hooks": total,
        }});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        debug!(namespace, restorehook = %name, planned, succeeded = total.succeeded, failed = total.failed, pending = total.pending, "RestoreHook status updated");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::plan::{OnError, PlannedHook};

    fn hook(name: &str, source: &str, index: usize) -> PlannedHook {
        PlannedHook {
            name: name.into(),
            source: source.into(),
            index,
            container: "db".into(),
            command: vec!["true".into()],
            on_error: OnError::Continue,
            exec_timeout_ms: 30_000,
            wait_timeout_ms: None,
            wait_for_ready: false,
        }
    }

    #[test]
    fn counts_only_hooks_of_that_restorehook() {
        let plan = ExecPlan {
            restore: "r".into(),
            hooks: vec![
                hook("a", "restorehook/a", 0),
                hook("x", "velero-restore/x", 0),
                hook("a", "restorehook/a", 1),
                hook("a", "restorehook/a", 2),
            ],
        };
        assert_eq!(sources(&plan), ["a".to_string()].into());
        let mut status = super::super::state::align(&plan, None);
        status.hooks[0].phase = HookPhase::Succeeded;
        status.hooks[1].phase = HookPhase::Failed;
        status.hooks[2].phase = HookPhase::Skipped;
        let c = count(&plan, Some(&status), "a").unwrap();
        assert_eq!((c.succeeded, c.failed, c.pending), (1, 1, 1));
        let none = count(&plan, None, "a").unwrap();
        assert_eq!(none.pending, 3);
        assert!(count(&plan, None, "other").is_none());
    }
}
