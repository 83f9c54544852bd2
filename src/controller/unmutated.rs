//! Restored pods that the webhook never saw (docs/behaviour.md §6.1).
//!
//! Under `failurePolicy: Ignore` (by default, the entry for pods Velero creates, §3.7), a restored
//! pod created while no webhook replica answered is admitted without its hooks, and nothing in the
//! pod says so. Every pod the webhook admits in a
//! restore scope carries `restore-hooks.dev/restore-run`; a pod in a restore scope without it was
//! not seen. The leader looks for such pods and reports each once: a Warning Event on the pod, a
//! log line and `restore_hooks_unmutated_pods_total`.
//!
//! Two scopes, two queries, both cheap label selections: pods with the restore label and without
//! the mark; and, in each namespace carrying the restore-namespace label, pods without the mark
//! created after this controller first saw the label, or at most `--unmutated-lookback` before it.
//! When the label was set is not recorded anywhere; pods much older than the label were not
//! restored, they were there before, and under `serve` a webhook that was down usually means a
//! controller that was down too, so "first seen" alone would miss exactly the pods to report.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use restore_hooks_core::config::EngineConfig;
use restore_hooks_core::hooks::plan::RESTORE_RUN_LABEL;
use restore_hooks_core::hooks::window::closed_window;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::events::{EventSink, EventType, NOT_ADMITTED, Regarding};
use crate::catalog::SharedIndex;
use crate::metrics::Metrics;

/// How often the leader looks. A restore runs for minutes; this is a report, not a control loop.
/// Each look is served from the API server's watch cache (`resourceVersion=0`), not a quorum read
/// of etcd: a report 30 s late is no worse for a few seconds of staleness, and the selections
/// filter all pods of the namespace (or the cluster) on the server's side.
const EVERY: Duration = Duration::from_secs(30);

/// The leader's look-out for restored pods the webhook never saw; [`Unmutated::run`] while
/// leading.
pub struct Unmutated {
    /// Lists pods (metadata only) and writes the Events.
    pub client: kube::Client,
    /// Which namespaces carry the restore-namespace label (from the watch cache, not a list).
    pub index: Arc<SharedIndex>,
    /// The restore labels to select by, and the excluded namespaces, which are never reported.
    pub engine: EngineConfig,
    /// Where the [`NOT_ADMITTED`] Event on each such pod goes.
    pub events: EventSink,
    /// `restore_hooks_unmutated_pods_total` is counted here.
    pub metrics: Metrics,
    /// How far before the first sight of a namespace's restore label its pods still count
    /// (`--unmutated-lookback`).
    pub lookback: Duration,
}

impl Unmutated {
    /// Looks every 30 s until `stop` is cancelled, reporting each pod once per leadership (the
    /// reported uids live in memory only: a new leader may report a pod again).
    pub async fn run(self, stop: CancellationToken) {
        let mut reported: HashSet<String> = HashSet::new();
        let mut labelled_since: HashMap<String, Timestamp> = HashMap::new();
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let mut found = self.by_pod_label().await;
            found.extend(self.by_namespace_label(&mut labelled_since).await);
            for pod in found {
                let Some(uid) = pod.uid() else { continue };
                if !reported.insert(uid.clone()) {
                    continue;
                }
                self.report(&pod, &uid).await;
            }
            // Bounded: uids of pods long gone are not worth keeping forever.
            if reported.len() > 100_000 {
                reported.clear();
            }
        }
    }

    async fn by_pod_label(&self) -> Vec<PartialObjectMeta<Pod>> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let selector = format!("{},!{RESTORE_RUN_LABEL}", self.engine.restore_label);
        match api
            .list_metadata(&ListParams::default().labels(&selector).match_any())
            .await
        {
            Ok(list) => list
                .items
                .into_iter()
                .filter(|p| {
                    !self
                        .engine
                        .excluded_namespaces
                        .contains(&p.namespace().unwrap_or_default())
                })
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(&self.engine.restore_label))
                        .is_some_and(|v| !v.is_empty())
                })
                .collect(),
            Err(e) => {
                warn!(error = %e, "cannot list restored pods to look for ones the webhook did not see");
                Vec::new()
            }
        }
    }

    async fn by_namespace_label(
        &self,
        labelled_since: &mut HashMap<String, Timestamp>,
    ) -> Vec<PartialObjectMeta<Pod>> {
        let now = Timestamp::now();
        // With the time its restore window closed, if the label names a Velero Restore whose
        // window is over: pods created after it are not restored pods (§1.6).
        let labelled: Vec<(String, Option<Timestamp>)> = {
            let index = self.index.read();
            index
                .namespaces_with_label(&self.engine.restore_namespace_label)
                .into_iter()
                .filter(|n| !self.engine.excluded_namespaces.contains(n))
                .map(|n| {
                    let restore = index
                        .namespace_labels(&n)
                        .and_then(|l| l.get(&self.engine.restore_namespace_label))
                        .and_then(|r| index.velero_restore(&self.engine.velero_namespace, r));
                    let window = restore.and_then(|r| r.window.as_ref());
                    let closed = closed_window(window, self.engine.restore_window(), now);
                    (n, closed)
                })
                .collect()
        };
        let reach =
            jiff::SignedDuration::try_from(self.lookback).unwrap_or(jiff::SignedDuration::MAX);
        let first_seen = now.checked_sub(reach).unwrap_or(Timestamp::MIN);
        labelled_since.retain(|ns, _| labelled.iter().any(|(n, _)| n == ns));
        let mut out = Vec::new();
        for (namespace, closed) in labelled {
            let since = *labelled_since
                .entry(namespace.clone())
                .or_insert(first_seen);
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            let selector = format!("!{RESTORE_RUN_LABEL}");
            match api
                .list_metadata(&ListParams::default().labels(&selector).match_any())
                .await
            {
                Ok(list) => out.extend(list.items.into_iter().filter(|p| {
                    p.metadata
                        .creation_timestamp
                        .as_ref()
                        .is_some_and(|t| t.0 > since && closed.is_none_or(|c| t.0 < c))
                })),
                Err(e) => warn!(namespace, error = %e, "cannot list pods of a restore namespace"),
            }
        }
        out
    }

    async fn report(&self, pod: &PartialObjectMeta<Pod>, uid: &str) {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        self.metrics.unmutated_pods.inc();
        let by_velero = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&self.engine.restore_label))
            .is_some_and(|v| !v.is_empty());
        // Deleting a pod Velero restored would not bring its hooks back: nothing but Velero
        // creates it with the restore label, and its file-system volume data was restored into
        // this very pod (docs/behaviour.md §3.7).
        let message = if by_velero {
            format!(
                "restore-hooks' webhook did not see this pod when Velero created it (no webhook \
                 replica answered, and pods Velero creates are admitted without it then, so that \
                 they and their volume data are restored; or the pod predates the installation): \
                 its restore hooks were not applied and will not run. To see which they are: \
                 kubectl get pod -n {namespace} {name} -o yaml > pod.yaml && kubectl get \
                 restorehooks -n {namespace} -o yaml > rh.yaml && kubectl get clusterrestorehooks \
                 -o yaml > crh.yaml && restore-hooks inject -f pod.yaml --hooks rh.yaml --hooks \
                 crh.yaml; then run them by hand"
            )
        } else {
            "this pod of a restore namespace was admitted without restore-hooks' webhook (it was \
             unavailable and the webhook configuration's failurePolicy is Ignore, or the pod \
             predates the installation): its restore hooks were not applied. Delete the pod so \
             that its controller creates it again through the webhook, or run its hooks by hand"
                .to_string()
        };
        warn!(pod = %format!("{namespace}/{name}"), "restored pod admitted without the webhook: its hooks were not applied");
        let about = Regarding {
            api_version: "v1",
            kind: "Pod",
            namespace: Some(namespace),
            name,
            uid: Some(uid.to_string()),
            resource_version: pod.metadata.resource_version.clone(),
        };
        self.events
            .publish(&about, EventType::Warning, NOT_ADMITTED, &message);
    }
}
