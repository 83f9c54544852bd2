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
