//! RestoreHook and ClusterRestoreHook status (docs/behaviour.md §8.1, §8.2): the counts of the
//! pods that plan their hooks, `Ready` (every webhook replica compiled the current generation)
//! and `LateHooks`.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::api::{Api, Patch, PatchParams};
use restore_hooks_core::hooks::compiled::SourceKind;
use restore_hooks_core::hooks::types::{ClusterRestoreHook, HookObjectStatus, RestoreHook};
use restore_hooks_core::restore::tally::Target;
use serde_json::{Value, json};
use tracing::debug;

use super::{LateOutcome, MAX_LISTED_PODS, Writer, condition};

impl Writer {
    pub(super) async fn write_hook_object(&mut self, target: &Target) -> anyhow::Result<()> {
        let (kind, namespace, name) = match target {
            Target::RestoreHook { namespace, name } => (
                SourceKind::RestoreHook,
                Some(namespace.as_str()),
                name.as_str(),
            ),
            Target::ClusterRestoreHook { name } => {
                (SourceKind::ClusterRestoreHook, None, name.as_str())
            }
            Target::RestoreRun { .. } => unreachable!("written by write_run"),
        };
        // `read`: the object as the API server has it now, not as our last write left it (a
        // write from that is how a change since, such as an edit of the spec, is noticed: 409).
        let ((meta, status), read) = match self.written.remove(target) {
            Some(last) => (last, false),
            None => match self.read_hook_object(target, kind, namespace, name).await? {
                Some(read) => (read, true),
                None => return Ok(()),
            },
        };
        let snapshot = self.snapshot(target, status.retired);
        let totals = &snapshot.totals;
        let generation = meta.generation;
        let (ready, pruned) = self
            .readiness(kind, namespace, name, generation, &status)
            .await;
        let mut conditions = vec![condition(
            "Ready",
            ready.0,
            ready.1,
            &ready.2,
            generation,
            &status.conditions,
        )];
        if let Some(late) = self.late.get(target) {
            conditions.push(late_condition(late, generation, &status.conditions));
        }
        let waiting_for_replicas = ready.1 == "WaitingForWebhooks";
        let mut webhooks = serde_json::Map::new();
        for gone in pruned {
            webhooks.insert(gone, Value::Null);
        }
        let body = json!({
            "metadata": {"resourceVersion": meta.resource_version},
            "status": {
                "observedGeneration": generation,
                "podsPlanned": totals.planned,
                "hooks": totals.counts,
                "missedInitPods": snapshot.missed_init_pods,
                "failedPods": snapshot.failed_pods,
                "onePod": snapshot.one_pod,
                "retired": totals.retired,
                "webhooks": webhooks,
                "conditions": conditions,
            }
        });
        // A status the object already has is not written again: a new leader recomputes every
        // hook object's status, and after a leader change most are already right.
        let written = if read && merged_is_unchanged(&status, &body["status"]) {
            Ok((meta, Some(status)))
        } else {
            self.patch_hook_object(kind, namespace, name, &body).await
        };
        let (meta, status) = match written {
            Ok(o) => o,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.forget(target);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        self.written
            .insert(target.clone(), (meta, status.unwrap_or_default()));
        self.folded(target, &totals.folded);
        if waiting_for_replicas {
            // What it waits for is the replicas' own entries: read them at the next look.
            self.written.remove(target);
            self.not_ready.insert(target.clone());
        }
        debug!(target = ?target, planned = totals.planned, succeeded = totals.counts.succeeded, failed = totals.counts.failed, pending = totals.counts.pending, "hook object status updated");
        Ok(())
    }

    async fn patch_hook_object(
        &self,
        kind: SourceKind,
        namespace: Option<&str>,
        name: &str,
        body: &Value,
    ) -> kube::Result<(ObjectMeta, Option<HookObjectStatus>)> {
        let params = PatchParams::default();
        match kind {
            SourceKind::RestoreHook => {
                let api: Api<RestoreHook> =
                    Api::namespaced(self.client.clone(), namespace.unwrap_or_default());
                api.patch_status(name, &params, &Patch::Merge(body))
                    .await
                    .map(|o| (o.metadata, o.status))
            }
            _ => {
                let api: Api<ClusterRestoreHook> = Api::all(self.client.clone());
                api.patch_status(name, &params, &Patch::Merge(body))
                    .await
                    .map(|o| (o.metadata, o.status))
            }
        }
    }

    /// A hook object's metadata and status from the API server; `None` (and forgotten) when it
    /// is gone.
    async fn read_hook_object(
        &mut self,
        target: &Target,
        kind: SourceKind,
        namespace: Option<&str>,
        name: &str,
    ) -> kube::Result<Option<(ObjectMeta, HookObjectStatus)>> {
        let read = match kind {
            SourceKind::RestoreHook => {
                let api: Api<RestoreHook> =
                    Api::namespaced(self.client.clone(), namespace.unwrap_or_default());
                api.get_opt(name).await?.map(|o| (o.metadata, o.status))
            }
            _ => {
                let api: Api<ClusterRestoreHook> = Api::all(self.client.clone());
                api.get_opt(name).await?.map(|o| (o.metadata, o.status))
            }
        };
        if read.is_none() {
            self.forget(target);
        }
        Ok(read.map(|(meta, status)| (meta, status.unwrap_or_default())))
    }

    /// `Ready` of a hook object: (status, reason, message), and replica entries to prune.
    async fn readiness(
        &self,
        kind: SourceKind,
        namespace: Option<&str>,
        name: &str,
        generation: Option<i64>,
        status: &HookObjectStatus,
    ) -> ((&'static str, &'static str, String), Vec<String>) {
        let compiled = self
            .index
            .read()
            .object(kind, namespace.unwrap_or_default(), name)
            .cloned();
        let Some(compiled) = compiled else {
            return (
                (
                    "False",
                    "NotCompiled",
                    "restore-hooks has not read this object yet".into(),
                ),
                vec![],
            );
        };
        if let Some(problem) = compiled.first_problem() {
            return (("False", "Invalid", problem.to_string()), vec![]);
        }
        let generation = generation.unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.config.replicas_namespace);
        let mut behind = Vec::new();
        let mut pruned = Vec::new();
        for (replica, seen) in &status.webhooks {
            if seen.observed_generation >= generation && seen.problem.is_empty() {
                continue;
            }
            // An entry of a replica that no longer runs will never catch up: drop it.
            if matches!(pods.get_metadata_opt(replica).await, Ok(None)) {
                pruned.push(replica.clone());
                continue;
            }
            behind.push(if seen.problem.is_empty() {
                format!("{replica} has generation {}", seen.observed_generation)
            } else {
                format!("{replica}: {}", seen.problem)
            });
        }
        if !behind.is_empty() {
            return (
                (
                    "False",
                    "WaitingForWebhooks",
                    format!("generation {generation}: {}", behind.join("; ")),
                ),
                pruned,
            );
        }
        // Nobody serving it is not "everybody serves it": a script waiting for Ready would create
        // pods that no webhook replica gives the hooks.
        let serving = status
            .webhooks
            .iter()
            .filter(|(r, seen)| !pruned.contains(r) && seen.observed_generation >= generation)
            .count();
        if serving == 0 {
            return (
                (
                    "False",
                    "WaitingForWebhooks",
                    format!("generation {generation}: no webhook replica has reported it yet"),
                ),
                pruned,
            );
        }
        (
            (
                "True",
                "Compiled",
                format!("generation {generation} is served by every webhook replica"),
            ),
            pruned,
        )
    }
}

/// Whether merging `patch` (a merge patch of a hook object's status) into `current` leaves it
/// as it is.
fn merged_is_unchanged(current: &HookObjectStatus, patch: &Value) -> bool {
    let Ok(mut merged) = serde_json::to_value(current) else {
        return false;
    };
    json_patch::merge(&mut merged, patch);
    serde_json::from_value::<HookObjectStatus>(merged).is_ok_and(|m| m == *current)
}

/// `LateHooks`: what the last scan for pods admitted before the object did. False when pods it
/// selects were too old to get its hooks, or missed its init hooks.
fn late_condition(
    late: &LateOutcome,
    generation: Option<i64>,
    existing: &[Condition],
) -> Condition {
    let list = |pods: &[String]| {
        let mut s: Vec<&str> = pods
            .iter()
            .take(MAX_LISTED_PODS)
            .map(String::as_str)
            .collect();
        if pods.len() > MAX_LISTED_PODS {
            s.push("...");
        }
        s.join(", ")
    };
    let mut parts = Vec::new();
    if !late.added.is_empty() {
        parts.push(format!(
            "exec hooks added to {} pod(s) admitted before it ({})",
            late.added.len(),
            list(&late.added)
        ));
    }
    if !late.outside_window.is_empty() {
        parts.push(format!(
            "not added to {} pod(s) admitted longer ago than --late-hook-window ({})",
            late.outside_window.len(),
            list(&late.outside_window)
        ));
    }
    if !late.missed_init.is_empty() {
        parts.push(format!(
            "init hooks missed by {} pod(s) created before it ({})",
            late.missed_init.len(),
            list(&late.missed_init)
        ));
    }
    let (status, reason) = if !late.outside_window.is_empty() {
        ("False", "OutsideLateHookWindow")
    } else if !late.missed_init.is_empty() {
        ("False", "InitHooksMissed")
    } else {
        ("True", "Added")
    };
    condition(
        "LateHooks",
        status,
        reason,
        &parts.join("; "),
        generation,
        existing,
    )
}
