//! The cluster's hook sources, watched into the [`SharedIndex`]: `RestoreHook`s and
//! `ClusterRestoreHook`s everywhere, Velero `Restore`s in `--velero-namespace`, and the labels of
//! every namespace.
//!
//! Hook objects are read as untyped objects and decoded one by one: a single object that does not
//! decode (a Velero Restore written by a newer Velero, a RestoreHook from before a CRD change)
//! becomes a recorded problem for the pods it might select, instead of failing the whole list and
//! with it every other hook.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use restore_hooks_core::hooks::compiled::SourceKind;
use restore_hooks_core::hooks::window::WINDOW_ANNOTATION;
use serde::de::DeserializeOwned;

use super::{IndexKind, IndexObject, Origin, SharedIndex};
use crate::backoff::watch_backoff;
use crate::config::EngineConfig;
use crate::hooks::types::{ClusterRestoreHook, RestoreHook, VeleroRestore};
use crate::metrics::Metrics;

// The watches' names: the `resource` label of `restore_hooks_watch_healthy` and
// `restore_hooks_watch_errors_total`, and how `/readyz` names a cache that is not synced.
/// The watch of `RestoreHook`s in every namespace.
pub const RESTORE_HOOKS: &str = "restorehooks.restore-hooks.dev";
/// The watch of `ClusterRestoreHook`s.
pub const CLUSTER_RESTORE_HOOKS: &str = "clusterrestorehooks.restore-hooks.dev";
/// The watch of Velero `Restore`s in `--velero-namespace`.
pub const VELERO_RESTORES: &str = "restores.velero.io";
/// The metadata-only watch of namespaces (their labels).
pub const NAMESPACES: &str = "namespaces";

/// The future that keeps `index` filled from the cluster. Spawn it; it runs until dropped
/// (watch errors are retried with backoff, never returned).
pub fn watch_into(
    client: Client,
    engine: &EngineConfig,
    index: Arc<SharedIndex>,
    metrics: Metrics,
) -> impl Future<Output = ()> + Send + 'static {
    let restore_hooks: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<RestoreHook>(&()));
    let cluster_hooks: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<ClusterRestoreHook>(&()),
    );
    let velero: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &engine.velero_namespace,
        &ApiResource::erase::<VeleroRestore>(&()),
    );
    // Metadata-only requests: labels are all we need of namespaces.
    let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(client);
    for resource in [
        RESTORE_HOOKS,
        CLUSTER_RESTORE_HOOKS,
        VELERO_RESTORES,
        NAMESPACES,
    ] {
        index.watch_started(resource);
        metrics.watch_healthy.with_label_values(&[resource]).set(0);
    }
    let config = watcher::Config::default();
    let velero_namespace = engine.velero_namespace.clone();
    async move {
        let w = |resource| Watch {
            resource,
            index: index.clone(),
            metrics: metrics.clone(),
        };
        futures::join!(
            w(RESTORE_HOOKS).run(
                watch_backoff(watcher::watcher(restore_hooks, config.clone())),
                IndexKind::RestoreHook,
                Absent::Wait,
                |o| hook_object::<RestoreHook>(o, SourceKind::RestoreHook, IndexObject::RestoreHook),
            ),
            // Created by the same chart as RestoreHook, but a binary newer than its CRDs must
            // still serve RestoreHooks: an absent kind is empty, and keeps being retried.
            w(CLUSTER_RESTORE_HOOKS).run(
                watch_backoff(watcher::watcher(cluster_hooks, config.clone())),
                IndexKind::ClusterRestoreHook,
                Absent::Empty("the ClusterRestoreHook CRD is not installed (upgrade the chart's CRDs)".into()),
                |o| hook_object::<ClusterRestoreHook>(
                    o,
                    SourceKind::ClusterRestoreHook,
                    IndexObject::ClusterRestoreHook,
                ),
            ),
            // Velero may be installed after us, or never (other restore tools).
            w(VELERO_RESTORES).run(
                watch_backoff(watcher::watcher(velero, config.clone())),
                IndexKind::VeleroRestore,
                Absent::Empty(format!(
                    "Velero's Restore CRD is not installed: namespace {velero_namespace} has no Restores"
                )),
                |o| hook_object::<VeleroRestore>(o, SourceKind::VeleroRestore, IndexObject::VeleroRestore),
            ),
            w(NAMESPACES).run(
                watch_backoff(watcher::watcher(namespaces, config)),
                IndexKind::Namespace,
                Absent::Wait,
                |ns: PartialObjectMeta<Namespace>| IndexObject::Namespace {
                    name: ns.name_any(),
                    window_of: ns
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(WINDOW_ANNOTATION))
                        .cloned(),
                    created: ns.metadata.creation_timestamp.map(|t| t.0),
                    resource_version: ns.metadata.resource_version.clone(),
                    labels: ns.metadata.labels.unwrap_or_default(),
                },
            ),
        );
    }
}

/// A typed object from an untyped one, or the reason it is unreadable.
fn hook_object<K: DeserializeOwned>(
    object: DynamicObject,
    kind: SourceKind,
    wrap: fn(K) -> IndexObject,
) -> IndexObject {
    let namespace = object.metadata.namespace.clone();
    let name = object.name_any();
    let generation = object.metadata.generation;
    let decoded = serde_json::to_value(&object)
        .and_then(serde_json::from_value::<K>)
        .map_err(|e| e.to_string());
    match decoded {
        Ok(typed) => wrap(typed),
        Err(reason) => {
            tracing::warn!(
                kind = kind.prefix(),
                namespace = namespace.as_deref().unwrap_or_default(),
                name,
                error = %reason,
                "hook object cannot be decoded; pods it might select are told why"
            );
            IndexObject::Unreadable {
                kind,
                namespace,
                name,
                generation,
                reason,
            }
        }
    }
}

/// What a 404 on a kind's list means.
enum Absent {
    /// Not ready until the kind exists (our own RestoreHook CRD, namespaces).
    Wait,
    /// Empty, logged once with this message; the watch keeps retrying so objects show up once
    /// the CRD exists.
    Empty(String),
}

struct Watch {
    resource: &'static str,
    index: Arc<SharedIndex>,
    metrics: Metrics,
}

impl Watch {
    async fn run<K>(
        self,
        stream: impl Stream<Item = watcher::Result<Event<K>>>,
        kind: IndexKind,
        absent: Absent,
        convert: impl Fn(K) -> IndexObject,
    ) where
        K: Resource + Clone + Debug + Send + 'static,
    {
        let resource = self.resource;
        let mut stream = std::pin::pin!(stream);
        let mut relist: Option<Vec<IndexObject>> = None;
        // Log an absent CRD once per outage, not at every backoff retry.
        let mut reported_absent = false;
        let scope = matches!(kind, IndexKind::Namespace | IndexKind::VeleroRestore);
        while let Some(item) = stream.next().await {
            match item {
                Ok(Event::Init) => relist = Some(Vec::new()),
                Ok(Event::InitApply(object)) => {
                    let version = object.meta().resource_version.clone();
                    let converted = convert(object);
                    match relist.as_mut() {
                        Some(buffer) => buffer.push(converted),
                        None => self.apply(converted, version),
                    }
                }
                Ok(Event::InitDone) => {
                    // Swapped in at once: admission never sees a half-listed cache.
                    let objects = relist.take().unwrap_or_default();
                    let count = objects.len();
                    self.index.write().reset(Origin::Cluster, kind, objects);
                    self.announce_all(kind);
                    reported_absent = false;
                    if !self.index.health().get(resource).is_some_and(|s| s.listed) {
                        tracing::info!(resource, objects = count, "watch cache synced");
                    }
                    self.index.watch_listed(resource);
                    self.metrics
                        .watch_healthy
                        .with_label_values(&[resource])
                        .set(1);
                }
                Ok(Event::Apply(object)) => {
                    let version = object.meta().resource_version.clone();
                    self.apply(convert(object), version);
                    self.index.watch_ok(resource);
                    self.metrics
                        .watch_healthy
                        .with_label_values(&[resource])
                        .set(1);
                }
                Ok(Event::Delete(object)) => {
                    let namespace = object.meta().namespace.clone().unwrap_or_default();
                    let name = object.meta().name.clone().unwrap_or_default();
                    self.index
                        .write()
                        .delete(Origin::Cluster, kind, &namespace, &name);
                    self.index.forget(kind, &namespace, &name);
                }
                Err(err) => {
                    if let Absent::Empty(message) = &absent
                        && is_not_found(&err)
                    {
                        // Treat as an empty list: forget what we had (the CRD was removed).
                        self.index.write().reset(Origin::Cluster, kind, Vec::new());
                        self.index.watch_listed(resource);
                        self.metrics
                            .watch_healthy
                            .with_label_values(&[resource])
                            .set(1);
                        if !reported_absent {
                            reported_absent = true;
                            tracing::info!(
                                resource,
                                "{message}; treating it as empty and retrying"
                            );
                        }
                        if scope {
                            self.index.scope_changed();
                        }
                        continue;
                    }
                    self.metrics
                        .watch_errors
                        .with_label_values(&[resource])
                        .inc();
                    self.metrics
                        .watch_healthy
                        .with_label_values(&[resource])
                        .set(0);
                    self.index.watch_failed(resource, err.to_string());
                    tracing::warn!(resource, error = %err, "watch failed; retrying with backoff (the cache keeps serving what it had)");
                }
            }
            if scope {
                self.index.scope_changed();
            }
        }
    }

    fn apply(&self, object: IndexObject, resource_version: Option<String>) {
        let compiled = self.index.write().apply(Origin::Cluster, object);
        if let Some(compiled) = compiled {
            self.index.announce(compiled, resource_version);
        }
    }

    /// After a relist every hook object is announced again; `changed` tells new generations.
    fn announce_all(&self, kind: IndexKind) {
        let objects: Vec<_> = {
            let index = self.index.read();
            match kind {
                IndexKind::ClusterRestoreHook => index.cluster_restore_hooks().cloned().collect(),
                IndexKind::RestoreHook => index.all_restore_hooks().cloned().collect(),
                IndexKind::VeleroRestore | IndexKind::Namespace => Vec::new(),
            }
        };
        for object in objects {
            self.index.announce(object, None);
        }
    }
}

fn is_not_found(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    //! Against a minimal fake API server over plain HTTP: the real kube client and watchers,
    //! canned list responses, watches that stay open without events.

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use axum::Router;
    use axum::extract::{Query, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::get;
    use serde_json::json;

    use super::*;
    use crate::catalog::HookIndex;

    #[derive(Clone, Default)]
    struct Fake {
        restore_lists: Arc<AtomicUsize>,
        /// Velero's CRD "appears" after this many 404s.
        restores_missing_for: usize,
        /// RestoreHook lists are forbidden (RBAC missing).
        hooks_forbidden: bool,
    }

    type Params = Query<std::collections::HashMap<String, String>>;

    async fn watch_or(params: &Params, list: impl FnOnce() -> Response) -> Response {
        if params.get("watch").is_some_and(|w| w == "true" || w == "1") {
            // An open watch with no events.
            futures::future::pending::<()>().await;
        }
        list()
    }

    fn status(code: u16, reason: &str) -> Response {
        (
            StatusCode::from_u16(code).unwrap(),
            axum::Json(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "reason": reason, "code": code, "message": reason}),
            ),
        )
            .into_response()
    }

    async fn restores(State(fake): State<Fake>, params: Params) -> Response {
        watch_or(&params, || {
            if fake.restore_lists.fetch_add(1, Ordering::SeqCst) < fake.restores_missing_for {
                return status(404, "NotFound");
            }
            axum::Json(json!({
                "apiVersion": "velero.io/v1", "kind": "RestoreList",
                "metadata": {"resourceVersion": "5"},
                "items": [
                    {"apiVersion": "velero.io/v1", "kind": "Restore",
                     "metadata": {"name": "nightly-1", "namespace": "velero", "resourceVersion": "5"},
                     "spec": {"hooks": {"resources": [{"name": "db"}]}}},
                    // Go writes empty lists as null: a valid, empty Restore.
                    {"apiVersion": "velero.io/v1", "kind": "Restore",
                     "metadata": {"name": "nulls", "namespace": "velero", "resourceVersion": "5"},
                     "spec": {"hooks": {"resources": null}}},
                    // Does not decode: recorded, and the other Restores still work.
                    {"apiVersion": "velero.io/v1", "kind": "Restore",
                     "metadata": {"name": "broken", "namespace": "velero", "resourceVersion": "5"},
                     "spec": {"hooks": {"resources": "not-a-list"}}}
                ]
            }))
            .into_response()
        })
        .await
    }

    async fn restore_hooks(State(fake): State<Fake>, params: Params) -> Response {
        watch_or(&params, || {
            if fake.hooks_forbidden {
                return status(403, "Forbidden");
            }
            axum::Json(json!({
                "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHookList",
                "metadata": {"resourceVersion": "7"},
                "items": [
                    {"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                     "metadata": {"name": "a", "namespace": "shop", "resourceVersion": "6"},
                     "spec": {"postHooks": []}},
                    {"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                     "metadata": {"name": "b", "namespace": "other", "resourceVersion": "7"},
                     "spec": {"postHooks": []}}
                ]
            }))
            .into_response()
        })
        .await
    }

    async fn cluster_hooks(params: Params) -> Response {
        watch_or(&params, || status(404, "NotFound")).await
    }

    async fn namespaces(params: Params) -> Response {
        watch_or(&params, || {
            axum::Json(json!({
                "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                "metadata": {"resourceVersion": "9"},
                "items": [
                    {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                     "metadata": {"name": "shop", "resourceVersion": "8",
                                  "labels": {"restore-hooks.dev/restore": "nightly-1"}}},
                    {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                     "metadata": {"name": "bare", "resourceVersion": "9"}}
                ]
            }))
            .into_response()
        })
        .await
    }

    async fn start(fake: Fake) -> (Arc<SharedIndex>, Metrics) {
        let app = Router::new()
            .route(
                "/apis/velero.io/v1/namespaces/velero/restores",
                get(restores),
            )
            .route(
                "/apis/restore-hooks.dev/v1alpha1/restorehooks",
                get(restore_hooks),
            )
            .route(
                "/apis/restore-hooks.dev/v1alpha1/clusterrestorehooks",
                get(cluster_hooks),
            )
            .route("/api/v1/namespaces", get(namespaces))
            .with_state(fake);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let index = SharedIndex::new(HookIndex::new());
        let metrics = Metrics::new();
        tokio::spawn(watch_into(
            client,
            &EngineConfig::default(),
            index.clone(),
            metrics.clone(),
        ));
        (index, metrics)
    }

    async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
        restore_hooks_testkit::eventually!(what, Duration::from_secs(15), check())
    }

    #[tokio::test]
    async fn caches_fill_and_a_missing_velero_crd_counts_as_synced_then_appears() {
        let fake = Fake {
            restores_missing_for: 1,
            ..Fake::default()
        };
        let (index, metrics) = start(fake).await;
        eventually("synced", || index.is_synced()).await;
        assert!(index.degraded().is_empty());
        {
            let i = index.read();
            assert_eq!(
                i.namespace_labels("shop")
                    .unwrap()
                    .get("restore-hooks.dev/restore")
                    .map(String::as_str),
                Some("nightly-1")
            );
            assert!(i.namespace_labels("bare").unwrap().is_empty());
            assert!(i.namespace_labels("unknown").is_none());
            let hooks: Vec<_> = i.restore_hooks("shop").map(|h| h.name.clone()).collect();
            assert_eq!(hooks, ["a"]);
            assert_eq!(i.restore_hooks("nowhere").count(), 0);
            assert_eq!(i.cluster_restore_hooks().count(), 0, "absent CRD: empty");
        }
        eventually("Velero Restores appear", || {
            index.read().velero_restore("velero", "nightly-1").is_some()
        })
        .await;
        let i = index.read();
        assert!(
            i.velero_restore("velero", "nulls")
                .unwrap()
                .entries
                .is_empty()
        );
        let broken = i.velero_restore("velero", "broken").unwrap();
        assert!(
            broken
                .first_problem()
                .unwrap()
                .message
                .contains("cannot be read"),
            "{:?}",
            broken.first_problem()
        );
        assert!(i.velero_restore("other", "nightly-1").is_none());
        assert_eq!(
            metrics
                .watch_healthy
                .with_label_values(&[VELERO_RESTORES])
                .get(),
            1
        );
    }

    #[tokio::test]
    async fn a_forbidden_list_keeps_the_index_unsynced_and_reports_it() {
        let (index, metrics) = start(Fake {
            hooks_forbidden: true,
            ..Fake::default()
        })
        .await;
        eventually("the failure is reported", || {
            index
                .degraded()
                .iter()
                .any(|d| d.starts_with(RESTORE_HOOKS))
        })
        .await;
        assert!(!index.is_synced());
        assert!(
            metrics
                .watch_errors
                .with_label_values(&[RESTORE_HOOKS])
                .get()
                >= 1
        );
        assert_eq!(
            metrics
                .watch_healthy
                .with_label_values(&[RESTORE_HOOKS])
                .get(),
            0
        );
    }
}
