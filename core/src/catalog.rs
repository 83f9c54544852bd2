//! Hook documents loaded once (from `--hooks` files, `inject --hooks`, or built by tests), before
//! they are compiled into a [`HookIndex`]. The cluster's watches feed the index directly.

use std::collections::BTreeMap;

use crate::hooks::types::{ClusterRestoreHook, Labels, RestoreHook, VeleroRestore};
use crate::index::{HookIndex, IndexObject, Origin};

#[derive(Clone, Debug, Default)]
pub struct StaticCatalog {
    pub namespaces: BTreeMap<String, Labels>,
    pub velero_restores: Vec<VeleroRestore>,
    pub cluster_restore_hooks: Vec<ClusterRestoreHook>,
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

    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.velero_restores.is_empty()
            && self.cluster_restore_hooks.is_empty()
            && self.restore_hooks.is_empty()
    }
}
