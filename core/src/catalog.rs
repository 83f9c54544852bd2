//! Hook documents loaded once (from `--hooks` files, `inject --hooks`, or built by tests), before
//! they are compiled into a [`HookIndex`]. The cluster's watches feed the index directly.

use std::collections::BTreeMap;

use crate::hooks::types::{ClusterRestoreHook, Labels, RestoreHook, VeleroRestore};
use crate::index::{HookIndex, IndexObject, Origin};

/// A fixed set of hook documents (the `--hooks` files of `restore-hooks inject`, docs/behaviour.md
/// §4.9, or a test's fixtures), compiled into a [`HookIndex`] with [`StaticCatalog::index`].
#[derive(Clone, Debug, Default)]
pub struct StaticCatalog {
    /// Namespace labels by namespace name (`inject --namespace-label`, §4.9): what
    /// `namespaceSelector`s and the restore-namespace label see (§1.1, §2.7).
    pub namespaces: BTreeMap<String, Labels>,
    /// Velero `Restore` documents whose `spec.hooks` are a hook source (§2.4).
    pub velero_restores: Vec<VeleroRestore>,
    /// ClusterRestoreHook documents (§2.6).
    pub cluster_restore_hooks: Vec<ClusterRestoreHook>,
    /// RestoreHook documents (§2.5).
    pub restore_hooks: Vec<RestoreHook>,
}

impl StaticCatalog {
    /// Compiles every document into `index` as [`Origin::Static`].
    pub fn apply_to(&self, index: &mut HookIndex) {
        for (name, labels) in &self.namespaces {
            index.apply(
                Origin::Static,
                IndexObject::Namespace {
                    name: name.clone(),
                    labels: labels.clone(),
                    created: None,
                    window_of: None,
                    resource_version: None,
                },
            );
        }
        for r in &self.velero_restores {
            index.apply(Origin::Static, IndexObject::VeleroRestore(r.clone()));
        }
        for h in &self.cluster_restore_hooks {
            index.apply(Origin::Static, IndexObject::ClusterRestoreHook(h.clone()));
        }
        for h in &self.restore_hooks {
            index.apply(Origin::Static, IndexObject::RestoreHook(h.clone()));
        }
    }

    /// A fresh index holding these documents.
    pub fn index(&self) -> HookIndex {
        let mut index = HookIndex::new();
        self.apply_to(&mut index);
        index
    }

    /// Whether the catalog holds no document at all (no namespace, Restore or hook object).
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.velero_restores.is_empty()
            && self.cluster_restore_hooks.is_empty()
            && self.restore_hooks.is_empty()
    }
}
