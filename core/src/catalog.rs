//! Where the webhook finds hook definitions and namespace labels: in memory, never by an API call
//! per admission request. [`StaticCatalog`] holds documents from `--hooks` files; the cluster's
//! watch caches implement the same trait in the server crate.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hooks::types::{Labels, RestoreHook, VeleroRestore};

/// Read access to the hook sources and namespace labels, as of the latest cache state.
pub trait HookCatalog: Send + Sync {
    /// Labels of a namespace; `None` when the namespace is unknown (or namespaces are not watched).
    fn namespace_labels(&self, namespace: &str) -> Option<Labels>;
    /// The Velero `Restore` named `name` in `namespace`.
    fn velero_restore(&self, namespace: &str, name: &str) -> Option<Arc<VeleroRestore>>;
    /// Every RestoreHook of `namespace`, in any order (the resolver sorts by name).
    fn restore_hooks(&self, namespace: &str) -> Vec<Arc<RestoreHook>>;
    /// True once every underlying cache has seen its initial list.
    fn is_synced(&self) -> bool {
        true
    }
}

/// Hook documents loaded once (from `--hooks` files, or built by tests).
#[derive(Clone, Debug, Default)]
pub struct StaticCatalog {
    pub namespaces: BTreeMap<String, Labels>,
    pub velero_restores: Vec<Arc<VeleroRestore>>,
    pub restore_hooks: Vec<Arc<RestoreHook>>,
}

impl HookCatalog for StaticCatalog {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        self.namespaces.get(namespace).cloned()
    }

    fn velero_restore(&self, namespace: &str, name: &str) -> Option<Arc<VeleroRestore>> {
        self.velero_restores
            .iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some(name)
                    && r.metadata.namespace.as_deref() == Some(namespace)
            })
            .cloned()
    }

    fn restore_hooks(&self, namespace: &str) -> Vec<Arc<RestoreHook>> {
        self.restore_hooks
            .iter()
            .filter(|h| h.metadata.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect()
    }
}

/// Static documents first, then the cluster's: used when `--hooks` files are given to a server
/// that also watches the cluster.
pub struct LayeredCatalog<A, B> {
    pub first: A,
    pub second: B,
}

impl<A: HookCatalog, B: HookCatalog> HookCatalog for LayeredCatalog<A, B> {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        self.first
            .namespace_labels(namespace)
            .or_else(|| self.second.namespace_labels(namespace))
    }

    fn velero_restore(&self, namespace: &str, name: &str) -> Option<Arc<VeleroRestore>> {
        self.first
            .velero_restore(namespace, name)
            .or_else(|| self.second.velero_restore(namespace, name))
    }

    fn restore_hooks(&self, namespace: &str) -> Vec<Arc<RestoreHook>> {
        let mut hooks = self.first.restore_hooks(namespace);
        hooks.extend(self.second.restore_hooks(namespace));
        hooks
    }

    fn is_synced(&self) -> bool {
        self.first.is_synced() && self.second.is_synced()
    }
}
