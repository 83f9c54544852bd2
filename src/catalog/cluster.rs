//! The cluster's hook sources, from watch caches (kube-runtime reflectors): Velero `Restore`s in
//! `--velero-namespace`, `RestoreHook`s in every namespace and the labels of every namespace.
//!
//! The admission path only reads these in-memory stores: never an API call per request (a slow
//! or throttled API server must not turn into admission latency).

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::HookCatalog;
use crate::config::EngineConfig;
use crate::hooks::types::{Labels, RestoreHook, VeleroRestore};

/// Hook sources and namespace labels as seen by three watches.
#[derive(Clone)]
pub struct ClusterCatalog {
    velero_namespace: String,
    restores: Store<VeleroRestore>,
    restore_hooks: Store<RestoreHook>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    synced: Arc<Synced>,
}

/// One flag per watch: set when its initial list completed (or, for Velero Restores, when the
/// CRD turned out not to be installed).
#[derive(Debug, Default)]
struct Synced {
    restores: AtomicBool,
    restore_hooks: AtomicBool,
    namespaces: AtomicBool,
}

impl ClusterCatalog {
    /// Creates the caches and the future that fills them. Spawn the future (it runs until
    /// dropped; watch errors are retried with kube-runtime's default backoff, never returned).
    pub fn start(
        client: Client,
        engine: &EngineConfig,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (restores, restores_writer) = reflector::store();
        let (restore_hooks, hooks_writer) = reflector::store();
        let (namespaces, ns_writer) = reflector::store();
        let synced = Arc::new(Synced::default());

        let restore_api: Api<VeleroRestore> =
            Api::namespaced(client.clone(), &engine.velero_namespace);
        let hooks_api: Api<RestoreHook> = Api::all(client.clone());
        // `Api<PartialObjectMeta<_>>` makes metadata-only requests: labels are all we need, and
        // namespace specs and statuses are not worth caching.
        let ns_api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        let config = watcher::Config::default();

        let driver = {
            let synced = synced.clone();
            let velero_namespace = engine.velero_namespace.clone();
            async move {
                let restores = drive(
                    "velero.io/v1 Restore",
                    watcher(restore_api, config.clone()).default_backoff(),
                    restores_writer,
                    |s: &Synced| &s.restores,
                    synced.clone(),
                    // Velero may be installed after us, or never (other restore tools): a 404 on
                    // the list means "no Velero Restores", and the watch keeps retrying so they
                    // show up once the CRD exists.
                    Some(velero_namespace),
                );
                let hooks = drive(
                    "restore-hooks.dev/v1alpha1 RestoreHook",
                    watcher(hooks_api, config.clone()).default_backoff(),
                    hooks_writer,
                    |s: &Synced| &s.restore_hooks,
                    synced.clone(),
                    None,
                );
                let namespaces = drive(
                    "v1 Namespace (metadata)",
                    watcher(ns_api, config).default_backoff(),
                    ns_writer,
                    |s: &Synced| &s.namespaces,
                    synced,
                    None,
                );
                futures::join!(restores, hooks, namespaces);
            }
        };

        let catalog = Self {
            velero_namespace: engine.velero_namespace.clone(),
            restores,
            restore_hooks,
            namespaces,
            synced,
        };
        (catalog, driver)
    }

    /// Which caches still wait for their initial list (for the readiness message and logs).
    pub fn unsynced(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !self.synced.restores.load(Ordering::Acquire) {
            out.push("velero.io Restore");
        }
        if !self.synced.restore_hooks.load(Ordering::Acquire) {
            out.push("RestoreHook");
        }
        if !self.synced.namespaces.load(Ordering::Acquire) {
            out.push("Namespace");
        }
        out
    }
}

fn watcher<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = watcher::Result<Event<K>>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watcher(api, config)
}

/// Applies one watch stream to its store and maintains its synced flag.
async fn drive<K>(
    resource: &'static str,
    stream: impl Stream<Item = watcher::Result<Event<K>>>,
    mut writer: reflector::store::Writer<K>,
    flag: fn(&Synced) -> &AtomicBool,
    synced: Arc<Synced>,
    // `Some(namespace)`: a 404 (CRD not installed) counts as synced and empty.
    absent_ok_in: Option<String>,
) where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut stream = std::pin::pin!(stream);
    // Log a missing CRD once per outage, not at every backoff retry.
    let mut reported_absent = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                writer.apply_watcher_event(&event);
                if matches!(event, Event::InitDone) {
                    reported_absent = false;
                    if !flag(&synced).swap(true, Ordering::AcqRel) {
                        tracing::info!(resource, "watch cache synced");
                    }
                }
            }
            Err(err) if absent_ok_in.is_some() && is_not_found(&err) => {
                // Treat as an empty list: forget what we had (the CRD was removed) and be ready.
                writer.apply_watcher_event(&Event::Init);
                writer.apply_watcher_event(&Event::InitDone);
                flag(&synced).store(true, Ordering::Release);
                if !reported_absent {
                    reported_absent = true;
                    tracing::info!(
                        resource,
                        namespace = absent_ok_in.as_deref().unwrap_or_default(),
                        "resource not served (CRD not installed?): treating as empty; will keep retrying"
                    );
                }
            }
            Err(err) => {
                tracing::warn!(resource, error = %err, "watch failed; retrying with backoff");
            }
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

impl HookCatalog for ClusterCatalog {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        self.namespaces
            .get(&ObjectRef::new(namespace))
            .map(|ns| ns.metadata.labels.clone().unwrap_or_default())
    }

    fn velero_restore(&self, namespace: &str, name: &str) -> Option<Arc<VeleroRestore>> {
        if namespace != self.velero_namespace {
            return None;
        }
        self.restores.get(&ObjectRef::new(name).within(namespace))
    }

    fn restore_hooks(&self, namespace: &str) -> Vec<Arc<RestoreHook>> {
        self.restore_hooks
            .state_filter(|h| h.metadata.namespace.as_deref() == Some(namespace))
    }

    fn is_synced(&self) -> bool {
        self.synced.restores.load(Ordering::Acquire)
            && self.synced.restore_hooks.load(Ordering::Acquire)
            && self.synced.namespaces.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    //! Against a minimal fake API server over plain HTTP: the real kube client and watchers,
    //! canned list responses, watches that stay open without events.

    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use axum::Router;
    use axum::extract::{Query, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::get;
    use serde_json::json;

    use super::*;

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
                "items": [{"apiVersion": "velero.io/v1", "kind": "Restore",
                           "metadata": {"name": "nightly-1", "namespace": "velero",
                                        "resourceVersion": "5"},
                           "spec": {"hooks": {"resources": [{"name": "db"}]}}}]
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

    async fn start(fake: Fake) -> ClusterCatalog {
        let app = Router::new()
            .route(
                "/apis/velero.io/v1/namespaces/velero/restores",
                get(restores),
            )
            .route(
                "/apis/restore-hooks.dev/v1alpha1/restorehooks",
                get(restore_hooks),
            )
            .route("/api/v1/namespaces", get(namespaces))
            .with_state(fake);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let (catalog, driver) = ClusterCatalog::start(client, &EngineConfig::default());
        tokio::spawn(driver);
        catalog
    }

    async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn caches_fill_and_a_missing_velero_crd_counts_as_synced_then_appears() {
        let fake = Fake {
            restores_missing_for: 1,
            ..Fake::default()
        };
        let lists = fake.restore_lists.clone();
        let catalog = start(fake).await;
        eventually("synced", || catalog.is_synced()).await;
        assert!(catalog.unsynced().is_empty());

        assert_eq!(
            catalog
                .namespace_labels("shop")
                .unwrap()
                .get("restore-hooks.dev/restore")
                .map(String::as_str),
            Some("nightly-1")
        );
        assert_eq!(catalog.namespace_labels("bare"), Some(Labels::new()));
        assert_eq!(catalog.namespace_labels("unknown"), None);
        let hooks = catalog.restore_hooks("shop");
        assert_eq!(hooks.len(), 1);
        assert_eq!(hooks[0].metadata.name.as_deref(), Some("a"));
        assert!(catalog.restore_hooks("nowhere").is_empty());

        // The first Restore list was a 404 (Velero not installed): synced and empty, and the
        // watch keeps retrying with backoff until the CRD is there.
        if lists.load(Ordering::SeqCst) == 1 {
            assert!(catalog.velero_restore("velero", "nightly-1").is_none());
        }
        eventually("Velero Restore appears", || {
            catalog.velero_restore("velero", "nightly-1").is_some()
        })
        .await;
        assert!(catalog.velero_restore("other", "nightly-1").is_none());
        assert!(catalog.is_synced());
    }

    #[tokio::test]
    async fn a_forbidden_list_keeps_the_catalog_unsynced() {
        let catalog = start(Fake {
            hooks_forbidden: true,
            ..Fake::default()
        })
        .await;
        eventually("the other caches sync", || {
            catalog.unsynced() == ["RestoreHook"]
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!catalog.is_synced());
    }
}
