//! The hook index: every hook object and namespace the webhook knows, compiled, keyed for the
//! lookups admission makes. Watches (and `--hooks` files) feed it with [`HookIndex::apply`],
//! [`HookIndex::delete`] and [`HookIndex::reset`]; admission only reads it, so a request costs
//! a few map lookups and selector matches, never a compile and never an API call.
//!
//! Objects from files and from the cluster live side by side ([`Origin`]): a watch that relists
//! replaces only what it owns, so `--hooks` documents survive a watch restart.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::hooks::compiled::{
    CompiledObject, SourceKind, compile_cluster_restore_hook, compile_restore_hook,
    compile_velero_restore, unreadable,
};
use crate::hooks::restore_name::{MAX_LABEL_VALUE, velero_label_value};
use crate::hooks::types::{ClusterRestoreHook, Labels, RestoreHook, VeleroRestore};

/// Where an object came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// `--hooks` files (or `inject --hooks`).
    Static,
    /// A watch of the cluster.
    Cluster,
}

/// One object to add to (or replace in) the index.
#[derive(Clone, Debug)]
pub enum IndexObject {
    /// A RestoreHook, compiled on arrival (docs/behaviour.md §2.5).
    RestoreHook(RestoreHook),
    /// A ClusterRestoreHook, compiled on arrival (§2.6).
    ClusterRestoreHook(ClusterRestoreHook),
    /// A Velero `Restore` in any namespace; only those in `--velero-namespace` are looked up
    /// (§2.4).
    VeleroRestore(VeleroRestore),
    /// A hook object that does not decode: the pods it might select are told why.
    Unreadable {
        /// What the object was meant to be.
        kind: SourceKind,
        /// `metadata.namespace`; `None` for a ClusterRestoreHook.
        namespace: Option<String>,
        /// `metadata.name`.
        name: String,
        /// `metadata.generation`, reported in `status.webhooks` like a compiled one's.
        generation: Option<i64>,
        /// Why it does not decode (the deserialiser's message).
        reason: String,
    },
    /// A namespace's labels: what the restore-namespace label and `namespaceSelector`s read
    /// (§1.1, §1.5, §2.7).
    Namespace {
        /// The namespace's name.
        name: String,
        /// Its current labels.
        labels: Labels,
        /// `metadata.creationTimestamp` (restore windows, §1.6); `None` from files.
        created: Option<jiff::Timestamp>,
        /// The restore the controller set its restore-namespace label for (§1.6).
        window_of: Option<String>,
        /// `metadata.resourceVersion`: the controller's label writes are conditional on it.
        resource_version: Option<String>,
    },
}

/// The kinds the index holds, for [`HookIndex::reset`] and [`HookIndex::delete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexKind {
    /// RestoreHooks (readable or not).
    RestoreHook,
    /// ClusterRestoreHooks (readable or not).
    ClusterRestoreHook,
    /// Velero Restores (readable or not).
    VeleroRestore,
    /// Namespaces and their labels.
    Namespace,
}

type Key = (String, Origin);

/// Every compiled hook object and every namespace's labels the webhook (or `inject`) knows, keyed
/// for admission's lookups: RestoreHooks and Velero Restores by namespace and name,
/// ClusterRestoreHooks by name, so that iteration yields the source order of docs/behaviour.md
/// §3.2.
#[derive(Clone, Debug, Default)]
pub struct HookIndex {
    namespaces: HashMap<String, KnownNamespace>,
    /// RestoreHooks by namespace, then by name (the order they apply in).
    restore_hooks: HashMap<String, BTreeMap<Key, Arc<CompiledObject>>>,
    /// ClusterRestoreHooks by name.
    cluster_hooks: BTreeMap<Key, Arc<CompiledObject>>,
    /// Velero Restores by namespace, then name.
    velero: HashMap<String, BTreeMap<Key, Arc<CompiledObject>>>,
    /// Velero's label value of each Restore whose name is longer than a label value
    /// (`GetValidName`), to its name, per namespace.
    velero_hashed: HashMap<String, HashMap<String, String>>,
}

/// A namespace as the index keeps it.
#[derive(Clone, Debug, Default)]
pub struct KnownNamespace {
    /// Its labels.
    pub labels: Labels,
    /// `metadata.creationTimestamp`.
    pub created: Option<jiff::Timestamp>,
    /// The restore the controller set its restore-namespace label for (§1.6).
    pub window_of: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
}

impl IndexObject {
    /// The kind it is stored and deleted under (an unreadable object under the kind it was meant
    /// to be).
    pub fn kind(&self) -> IndexKind {
        match self {
            IndexObject::RestoreHook(_) => IndexKind::RestoreHook,
            IndexObject::ClusterRestoreHook(_) => IndexKind::ClusterRestoreHook,
            IndexObject::VeleroRestore(_) => IndexKind::VeleroRestore,
            IndexObject::Unreadable { kind, .. } => match kind {
                SourceKind::VeleroRestore => IndexKind::VeleroRestore,
                SourceKind::ClusterRestoreHook => IndexKind::ClusterRestoreHook,
                SourceKind::RestoreHook => IndexKind::RestoreHook,
            },
            IndexObject::Namespace { .. } => IndexKind::Namespace,
        }
    }
}

impl HookIndex {
    /// An empty index: no hook objects, no namespaces known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces one object; returns the compiled form of hook objects (for status).
    pub fn apply(&mut self, origin: Origin, object: IndexObject) -> Option<Arc<CompiledObject>> {
        match object {
            IndexObject::Namespace {
                name,
                labels,
                created,
                window_of,
                resource_version,
            } => {
                // Namespaces only come from the cluster or from `inject --namespace-label`; a
                // namespace in both is the same namespace.
                let known = KnownNamespace {
                    labels,
                    created,
                    window_of,
                    resource_version,
                };
                self.namespaces.insert(name, known);
                None
            }
            IndexObject::RestoreHook(hook) => {
                self.insert_hook(origin, Arc::new(compile_restore_hook(&hook)))
            }
            IndexObject::ClusterRestoreHook(hook) => {
                self.insert_hook(origin, Arc::new(compile_cluster_restore_hook(&hook)))
            }
            IndexObject::VeleroRestore(restore) => {
                Some(self.insert_velero(origin, Arc::new(compile_velero_restore(&restore))))
            }
            IndexObject::Unreadable {
                kind,
                namespace,
                name,
                generation,
                reason,
            } => {
                let compiled = Arc::new(unreadable(
                    kind,
                    namespace.as_deref(),
                    &name,
                    generation,
                    &reason,
                ));
                match kind {
                    SourceKind::VeleroRestore => Some(self.insert_velero(origin, compiled)),
                    _ => self.insert_hook(origin, compiled),
                }
            }
        }
    }

    fn insert_hook(
        &mut self,
        origin: Origin,
        compiled: Arc<CompiledObject>,
    ) -> Option<Arc<CompiledObject>> {
        match compiled.kind {
            SourceKind::RestoreHook => {
                let namespace = compiled.namespace.clone().unwrap_or_default();
                self.restore_hooks
                    .entry(namespace)
                    .or_default()
                    .insert((compiled.name.clone(), origin), compiled.clone());
            }
            SourceKind::ClusterRestoreHook => {
                self.cluster_hooks
                    .insert((compiled.name.clone(), origin), compiled.clone());
            }
            SourceKind::VeleroRestore => return Some(self.insert_velero(origin, compiled)),
        }
        Some(compiled)
    }

    fn insert_velero(
        &mut self,
        origin: Origin,
        compiled: Arc<CompiledObject>,
    ) -> Arc<CompiledObject> {
        let namespace = compiled.namespace.clone().unwrap_or_default();
        if compiled.name.len() > MAX_LABEL_VALUE {
            self.velero_hashed
                .entry(namespace.clone())
                .or_default()
                .insert(
                    velero_label_value(&compiled.name).into_owned(),
                    compiled.name.clone(),
                );
        }
        self.velero
            .entry(namespace)
            .or_default()
            .insert((compiled.name.clone(), origin), compiled.clone());
        compiled
    }

    /// Removes one object (`namespace` is ignored for cluster-scoped kinds).
    pub fn delete(&mut self, origin: Origin, kind: IndexKind, namespace: &str, name: &str) {
        let key = (name.to_string(), origin);
        match kind {
            IndexKind::Namespace => {
                self.namespaces.remove(name);
            }
            IndexKind::RestoreHook => {
                if let Some(hooks) = self.restore_hooks.get_mut(namespace) {
                    hooks.remove(&key);
                    if hooks.is_empty() {
                        self.restore_hooks.remove(namespace);
                    }
                }
            }
            IndexKind::ClusterRestoreHook => {
                self.cluster_hooks.remove(&key);
            }
            IndexKind::VeleroRestore => {
                if let Some(restores) = self.velero.get_mut(namespace) {
                    restores.remove(&key);
                    let still_named = restores.keys().any(|(n, _)| n == name);
                    if !still_named && let Some(hashed) = self.velero_hashed.get_mut(namespace) {
                        hashed.retain(|_, full| full != name);
                    }
                }
            }
        }
    }

    /// Replaces every object of `kind` from `origin` with `objects` (a watch's relist).
    pub fn reset(&mut self, origin: Origin, kind: IndexKind, objects: Vec<IndexObject>) {
        match kind {
            IndexKind::Namespace => self.namespaces.clear(),
            IndexKind::RestoreHook => {
                for hooks in self.restore_hooks.values_mut() {
                    hooks.retain(|(_, o), _| *o != origin);
                }
                self.restore_hooks.retain(|_, h| !h.is_empty());
            }
            IndexKind::ClusterRestoreHook => self.cluster_hooks.retain(|(_, o), _| *o != origin),
            IndexKind::VeleroRestore => {
                for restores in self.velero.values_mut() {
                    restores.retain(|(_, o), _| *o != origin);
                }
                self.velero_hashed.clear();
                let remaining: Vec<Arc<CompiledObject>> = self
                    .velero
                    .values()
                    .flat_map(|r| r.values().cloned())
                    .collect();
                for compiled in remaining {
                    if compiled.name.len() > MAX_LABEL_VALUE {
                        self.velero_hashed
                            .entry(compiled.namespace.clone().unwrap_or_default())
                            .or_default()
                            .insert(
                                velero_label_value(&compiled.name).into_owned(),
                                compiled.name.clone(),
                            );
                    }
                }
            }
        }
        for object in objects {
            debug_assert_eq!(object.kind(), kind);
            self.apply(origin, object);
        }
    }

    /// Namespaces that carry `key` with a non-empty value.
    pub fn namespaces_with_label(&self, key: &str) -> Vec<String> {
        self.namespaces
            .iter()
            .filter(|(_, ns)| ns.labels.get(key).is_some_and(|v| !v.is_empty()))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The labels of a namespace, if known.
    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespaces.get(namespace).map(|ns| &ns.labels)
    }

    /// Every namespace known, by name.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &KnownNamespace)> {
        self.namespaces.iter().map(|(n, ns)| (n.as_str(), ns))
    }

    /// The windows of every Velero Restore in `namespace` (§1.6).
    pub fn velero_windows(&self, namespace: &str) -> Vec<&crate::hooks::window::RestoreWindow> {
        self.velero
            .get(namespace)
            .into_iter()
            .flat_map(|r| r.values())
            .filter_map(|o| o.window.as_ref())
            .collect()
    }

    /// The Velero Restore in `namespace` that a pod's restore label value names: by name, or by
    /// Velero's hashed label form of a long name (docs/behaviour.md §1.2).
    pub fn velero_restore(&self, namespace: &str, label_value: &str) -> Option<&CompiledObject> {
        let restores = self.velero.get(namespace)?;
        let first = |name: &str| {
            restores
                .range((name.to_string(), Origin::Static)..=(name.to_string(), Origin::Cluster))
                .map(|(_, o)| o.as_ref())
                .next()
        };
        first(label_value).or_else(|| {
            let full = self.velero_hashed.get(namespace)?.get(label_value)?;
            first(full)
        })
    }

    /// ClusterRestoreHooks, in name order.
    pub fn cluster_restore_hooks(&self) -> impl Iterator<Item = &Arc<CompiledObject>> {
        self.cluster_hooks.values()
    }

    /// RestoreHooks of `namespace`, in name order.
    pub fn restore_hooks(&self, namespace: &str) -> impl Iterator<Item = &Arc<CompiledObject>> {
        self.restore_hooks
            .get(namespace)
            .into_iter()
            .flat_map(|h| h.values())
    }

    /// Whether any hook object could give a pod of `namespace` hooks: a RestoreHook there, or any
    /// ClusterRestoreHook.
    pub fn has_hook_objects(&self, namespace: &str) -> bool {
        !self.cluster_hooks.is_empty() || self.restore_hooks.contains_key(namespace)
    }

    /// Every RestoreHook of every namespace.
    pub fn all_restore_hooks(&self) -> impl Iterator<Item = &Arc<CompiledObject>> {
        self.restore_hooks.values().flat_map(|h| h.values())
    }

    /// One hook object by kind, namespace and name (late hooks, status).
    pub fn object(
        &self,
        kind: SourceKind,
        namespace: &str,
        name: &str,
    ) -> Option<&Arc<CompiledObject>> {
        fn by_name<'m>(
            m: &'m BTreeMap<Key, Arc<CompiledObject>>,
            name: &str,
        ) -> Option<&'m Arc<CompiledObject>> {
            m.range((name.to_string(), Origin::Static)..=(name.to_string(), Origin::Cluster))
                .map(|(_, o)| o)
                .next_back()
        }
        match kind {
            SourceKind::RestoreHook => by_name(self.restore_hooks.get(namespace)?, name),
            SourceKind::ClusterRestoreHook => by_name(&self.cluster_hooks, name),
            SourceKind::VeleroRestore => by_name(self.velero.get(namespace)?, name),
        }
    }

    /// How many objects of each kind (logs, tests).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        (
            self.namespaces.len(),
            self.restore_hooks.values().map(BTreeMap::len).sum(),
            self.cluster_hooks.len(),
            self.velero.values().map(BTreeMap::len).sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restore_hook(ns: &str, name: &str) -> IndexObject {
        IndexObject::RestoreHook(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                "metadata": {"name": name, "namespace": ns}, "spec": {}
            }))
            .unwrap(),
        )
    }

    fn velero(name: &str) -> IndexObject {
        IndexObject::VeleroRestore(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "velero.io/v1", "kind": "Restore",
                "metadata": {"name": name, "namespace": "velero"}, "spec": {}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_relist_replaces_only_its_origin() {
        let mut index = HookIndex::new();
        index.apply(Origin::Static, restore_hook("shop", "from-file"));
        index.apply(Origin::Cluster, restore_hook("shop", "b"));
        index.apply(Origin::Cluster, restore_hook("shop", "a"));
        let names = |i: &HookIndex| {
            i.restore_hooks("shop")
                .map(|o| o.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&index), ["a", "b", "from-file"]);
        index.reset(
            Origin::Cluster,
            IndexKind::RestoreHook,
            vec![restore_hook("shop", "c")],
        );
        assert_eq!(names(&index), ["c", "from-file"]);
        index.delete(Origin::Cluster, IndexKind::RestoreHook, "shop", "c");
        assert_eq!(names(&index), ["from-file"]);
        assert_eq!(index.restore_hooks("elsewhere").count(), 0);
    }

    #[test]
    fn velero_restores_are_found_by_their_hashed_label() {
        let long = format!("daily-{}", "x".repeat(70));
        let mut index = HookIndex::new();
        index.apply(Origin::Cluster, velero(&long));
        index.apply(Origin::Cluster, velero("short"));
        let label = velero_label_value(&long).into_owned();
        assert_eq!(index.velero_restore("velero", &label).unwrap().name, long);
        assert_eq!(index.velero_restore("velero", &long).unwrap().name, long);
        assert_eq!(
            index.velero_restore("velero", "short").unwrap().name,
            "short"
        );
        assert!(index.velero_restore("other", "short").is_none());
        index.delete(Origin::Cluster, IndexKind::VeleroRestore, "velero", &long);
        assert!(index.velero_restore("velero", &label).is_none());
        index.apply(Origin::Cluster, velero(&long));
        index.reset(Origin::Cluster, IndexKind::VeleroRestore, vec![]);
        assert!(index.velero_restore("velero", &label).is_none());
    }
}
