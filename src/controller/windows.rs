//! Restore windows (docs/behaviour.md §1.6): the leader writes the restore-namespace label on the
//! namespaces a Velero Restore writes to while it runs, takes it off once the window is over, and
//! reports labels someone else wrote that outlived their Restore.
//!
//! The decisions are `restore_hooks_core::hooks::window::label_action`'s; this is the shell that
//! feeds it (the namespace and Velero Restore caches, the marked pods) and writes what it decides.
//! It reacts to every namespace or Restore change at once: a Deployment's ReplicaSet creates its
//! pods seconds after Velero created their namespace, and only pods created after the label
//! arrives are restored pods. A tick closes windows that end with no change to see.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use restore_hooks_core::config::EngineConfig;
use restore_hooks_core::hooks::duration::format_go_duration;
use restore_hooks_core::hooks::labels::LabelLookup;
use restore_hooks_core::hooks::plan::{EXEC_LABEL, EXEC_PENDING, RESTORE_RUN_LABEL};
use restore_hooks_core::hooks::window::{
    LabelAction, NamespaceView, WINDOW_ANNOTATION, WindowFacts, label_action,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::events::{
    EventSink, EventType, RESTORE_WINDOW_CLOSED, RESTORE_WINDOW_OPENED, RESTORE_WINDOW_OVER,
    Regarding,
};
use super::restores::Restores;
use crate::catalog::SharedIndex;
use crate::metrics::Metrics;

/// How often windows are looked at when nothing changes: a window closes by the clock.
const TICK: Duration = Duration::from_secs(15);

/// The leader's keeper of restore windows; [`RestoreWindows::run`] while leading.
pub struct RestoreWindows {
    /// Patches namespaces and writes Events.
    pub client: kube::Client,
    /// Namespaces (labels, annotation, creation) and Velero Restores (their windows).
    pub index: Arc<SharedIndex>,
    /// The marked pods: which restores wrote pods where, and which still have hooks to run.
    pub restores: Restores,
    /// The labels, `--restore-window` and the excluded namespaces.
    pub engine: EngineConfig,
    /// Events on the namespaces.
    pub events: EventSink,
    /// `restore_hooks_restore_windows_total`, `restore_hooks_stale_restore_namespace_labels`.
    pub metrics: Metrics,
    /// `--label-restore-namespaces`: write and remove labels, or only report stale ones.
    pub write_labels: bool,
}

/// What the marked pods of one namespace say.
#[derive(Default)]
struct PodsHere {
    /// Restore label values of pods Velero created here.
    restored: BTreeSet<String>,
    /// `restore-run` label values of pods here whose hooks have not all ended.
    pending: HashSet<String>,
}

impl RestoreWindows {
    /// Runs until `stop` is cancelled. Stale labels are reported once per leadership.
    pub async fn run(self, stop: CancellationToken) {
        let mut changes = self.index.scope_changes();
        let mut tick = tokio::time::interval(TICK);
        let mut reported: BTreeSet<(String, String)> = BTreeSet::new();
        // Patches that failed are tried again on the next look, not in a tight loop.
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
                _ = tick.tick() => {}
            }
            if !self.restores.is_listed() {
                // Which pods still have hooks to run is not known yet: closing now could stop
                // them (§6.2). The next change or tick looks again.
                continue;
            }
            let actions = self.decide(Timestamp::now());
            let mut stale = 0;
            for (namespace, resource_version, action) in actions {
                match action {
                    LabelAction::Keep => {}
                    LabelAction::Open { .. } | LabelAction::Close { .. } if !self.write_labels => {}
                    LabelAction::Open {
                        restore,
                        label_value,
                    } => {
                        self.open(&namespace, resource_version, &restore, &label_value)
                            .await
                    }
                    LabelAction::Close { restore } => {
                        self.close(&namespace, resource_version, &restore).await
                    }
                    LabelAction::Stale { restore, closed } => {
                        stale += 1;
                        if reported.insert((namespace.clone(), restore.clone())) {
                            self.report_stale(&namespace, &restore, closed).await;
                        }
                    }
                }
            }
            self.metrics.stale_restore_namespace_labels.set(stale);
        }
    }

    /// Every namespace's action, decided under the index's read lock (never across an await).
    fn decide(&self, now: Timestamp) -> Vec<(String, Option<String>, LabelAction)> {
        let engine = &self.engine;
        let pods = self.restores.read(|index| {
            let mut by_namespace: BTreeMap<String, PodsHere> = BTreeMap::new();
            for (_, pod) in index.pods() {
                let here = by_namespace.entry(pod.namespace.clone()).or_default();
                if let Some(r) = pod
                    .labels
                    .label(&engine.restore_label)
                    .filter(|v| !v.is_empty())
                {
                    here.restored.insert(r.to_string());
                }
                if pod.labels.label(EXEC_LABEL) == Some(EXEC_PENDING)
                    && let Some(run) = pod.labels.label(RESTORE_RUN_LABEL)
                {
                    here.pending.insert(run.to_string());
                }
            }
            by_namespace
        });
        let none = PodsHere::default();
        let index = self.index.read();
        let windows: Vec<_> = index
            .velero_windows(&engine.velero_namespace)
            .into_iter()
            .cloned()
            .collect();
        index
            .namespaces()
            .map(|(name, ns)| {
                let label = ns
                    .labels
                    .get(&engine.restore_namespace_label)
                    .map(String::as_str);
                let here = pods.get(name).unwrap_or(&none);
                let view = NamespaceView {
                    name,
                    created: ns.created,
                    label,
                    window_of: ns.window_of.as_deref(),
                };
                let facts = WindowFacts {
                    restores: &windows,
                    window: engine.restore_window(),
                    now,
                    restored_here: &here.restored,
                    hooks_pending: label.is_some_and(|l| here.pending.contains(l)),
                    excluded: engine.excluded_namespaces.iter().any(|n| n == name),
                };
                (
                    name.to_string(),
                    ns.resource_version.clone(),
                    label_action(&view, &facts),
                )
            })
            .filter(|(_, _, action)| *action != LabelAction::Keep)
            .collect()
    }

    async fn open(
        &self,
        namespace: &str,
        resource_version: Option<String>,
        restore: &str,
        label_value: &str,
    ) {
        let patch = json!({"metadata": {
            // Conditional on the version decided on: a label someone wrote meanwhile wins.
            "resourceVersion": resource_version,
            "labels": {&self.engine.restore_namespace_label: label_value},
            "annotations": {WINDOW_ANNOTATION: restore},
        }});
        if self.patch(namespace, &patch, "set").await {
            info!(namespace, restore, label = %self.engine.restore_namespace_label, "restore window opened: namespace labelled while the Velero Restore writes to it");
            let message = format!(
                "Velero Restore {restore} writes to this namespace: labelled {}={label_value} so \
                 that the pods its workloads create get their restore hooks. restore-hooks removes \
                 the label {} after the Restore ends (--restore-window), once their hooks ended",
                self.engine.restore_namespace_label,
                format_go_duration(self.engine.restore_window_ms),
            );
            self.event(
                namespace,
                EventType::Normal,
                RESTORE_WINDOW_OPENED,
                &message,
            );
        }
    }

    async fn close(&self, namespace: &str, resource_version: Option<String>, restore: &str) {
        let label = &self.engine.restore_namespace_label;
        // The marked pods come from a watch, which may not have delivered a pod admitted a moment
        // ago: the API server's own list has the last word, so a pending hook never loses the
        // label it runs under (§1.6, §6.2). Once per window, one small request.
        if self.pods_pending_in(namespace).await != Some(false) {
            return;
        }
        let patch = json!({"metadata": {
            "resourceVersion": resource_version,
            "labels": {label: null},
            "annotations": {WINDOW_ANNOTATION: null},
        }});
        if self.patch(namespace, &patch, "removed").await {
            info!(namespace, restore, %label, "restore window closed: label removed");
            let message = format!(
                "the restore window of Velero Restore {restore} is over and its hooks here ended: \
                 label {label} removed; new pods here are ordinary pods"
            );
            self.event(
                namespace,
                EventType::Normal,
                RESTORE_WINDOW_CLOSED,
                &message,
            );
        }
    }

    async fn report_stale(&self, namespace: &str, restore: &str, closed: Timestamp) {
        let label = &self.engine.restore_namespace_label;
        warn!(namespace, restore, %label, %closed, "restore-namespace label outlived its Velero Restore's window: it brings no pod into scope; remove it");
        let message = format!(
            "label {label} names Velero Restore {restore}, whose restore window closed at \
             {closed}: new pods here are no longer restored pods, but every pod creation here \
             still goes through restore-hooks' webhook. Remove the label: kubectl label \
             namespace {namespace} {label}-"
        );
        self.event(namespace, EventType::Warning, RESTORE_WINDOW_OVER, &message);
    }

    /// Whether a pod of `namespace` has hooks left to run, as the API server lists them now;
    /// `None` when it cannot be asked (the next look asks again).
    async fn pods_pending_in(&self, namespace: &str) -> Option<bool> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default()
            .labels(&format!("{EXEC_LABEL}={EXEC_PENDING}"))
            .limit(1);
        match api.list_metadata(&params).await {
            Ok(pods) => Some(!pods.items.is_empty()),
            Err(e) => {
                warn!(namespace, error = %e, "cannot list the namespace's pending pods before closing its restore window; trying again on the next look");
                None
            }
        }
    }

    /// A conditional merge patch; a conflict (someone changed the namespace since the cache saw
    /// it) is left to the next look, which sees the change.
    async fn patch(&self, namespace: &str, patch: &serde_json::Value, action: &str) -> bool {
        let api: Api<Namespace> = Api::all(self.client.clone());
        match api
            .patch(namespace, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                self.metrics
                    .restore_windows
                    .with_label_values(&[action])
                    .inc();
                true
            }
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => false,
            Err(e) => {
                warn!(namespace, error = %e, "cannot write the namespace's restore-namespace label; trying again on the next look");
                false
            }
        }
    }

    fn event(&self, namespace: &str, kind: EventType, reason: &str, message: &str) {
        let about = Regarding {
            api_version: "v1",
            kind: "Namespace",
            namespace: None,
            name: namespace.to_string(),
            uid: None,
            resource_version: None,
        };
        self.events.publish(&about, kind, reason, message);
    }
}
