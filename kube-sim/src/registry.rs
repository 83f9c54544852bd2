//! The resource types the server knows: built-ins plus whatever CRDs register.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct ResourceType {
    pub group: String,
    /// Served versions; the first is the preferred (storage) one.
    pub versions: Vec<String>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Has a `/status` subresource: the main resource ignores status writes and vice versa.
    pub status: bool,
    pub from_crd: bool,
    /// A CRD's `additionalPrinterColumns` (of its storage version): what `kubectl get` shows
    /// (see `table.rs`). Empty for built-ins, which have their own columns there.
    pub printer_columns: Vec<Value>,
}

impl ResourceType {
    /// `pods`, `leases.coordination.k8s.io`: the key objects are stored under, also used in messages.
    pub fn id(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        short: &[&str],
        status: bool,
    ) -> Self {
        Self {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            status,
            from_crd: false,
            printer_columns: Vec::new(),
        }
    }

    /// Reads a CustomResourceDefinition object (kept as JSON so unknown fields never bite).
    pub fn from_crd(crd: &Value) -> Option<Self> {
        let spec = crd.get("spec")?;
        let names = spec.get("names")?;
        let versions: Vec<&Value> = spec
            .get("versions")?
            .as_array()?
            .iter()
            .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
            .collect();
        // The storage version is listed first so that it becomes the preferred one.
        let mut ordered: Vec<&Value> = versions
            .iter()
            .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            .copied()
            .collect();
        ordered.extend(
            versions
                .iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) != Some(true)),
        );
        let status = ordered
            .iter()
            .any(|v| v.pointer("/subresources/status").is_some());
        let kind = names.get("kind")?.as_str()?.to_string();
        Some(Self {
            group: spec.get("group")?.as_str()?.to_string(),
            versions: ordered
                .iter()
                .filter_map(|v| v.get("name")?.as_str().map(String::from))
                .collect(),
            plural: names.get("plural")?.as_str()?.to_string(),
            singular: names
                .get("singular")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| kind.to_lowercase()),
            kind,
            namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
            short_names: names
                .get("shortNames")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            status,
            from_crd: true,
            printer_columns: ordered
                .first()
                .and_then(|v| v.get("additionalPrinterColumns"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        })
    }
}

#[derive(Debug)]
pub struct Registry {
    types: RwLock<BTreeMap<(String, String), Arc<ResourceType>>>,
}

impl Default for Registry {
    fn default() -> Self {
        let builtins = [
            ResourceType::builtin("", "v1", "pods", "Pod", true, &["po"], true),
            ResourceType::builtin("", "v1", "namespaces", "Namespace", false, &["ns"], true),
            ResourceType::builtin("", "v1", "events", "Event", true, &["ev"], false),
            ResourceType::builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"], false),
            ResourceType::builtin("", "v1", "secrets", "Secret", true, &[], false),
            ResourceType::builtin(
                "",
                "v1",
                "serviceaccounts",
                "ServiceAccount",
                true,
                &["sa"],
                false,
            ),
            ResourceType::builtin(
                "events.k8s.io",
                "v1",
                "events",
                "Event",
                true,
                &["ev"],
                false,
            ),
            ResourceType::builtin(
                "coordination.k8s.io",
                "v1",
                "leases",
                "Lease",
                true,
                &[],
                false,
            ),
            ResourceType::builtin(
                "admissionregistration.k8s.io",
                "v1",
                "mutatingwebhookconfigurations",
                "MutatingWebhookConfiguration",
                false,
                &[],
                false,
            ),
            ResourceType::builtin(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
                &["crd", "crds"],
                true,
            ),
        ];
        let types = builtins
            .into_iter()
            .map(|t| ((t.group.clone(), t.plural.clone()), Arc::new(t)))
            .collect();
        Self {
            types: RwLock::new(types),
        }
    }
}

impl Registry {
    /// Finds a served resource by group, version and plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        let types = self.types.read().unwrap();
        let t = types.get(&(group.to_string(), plural.to_string()))?;
        t.versions.iter().any(|v| v == version).then(|| t.clone())
    }

    pub fn all(&self) -> Vec<Arc<ResourceType>> {
        self.types.read().unwrap().values().cloned().collect()
    }

    /// Registers (or re-registers after an update) a CRD's resource. Built-ins cannot be shadowed.
    pub fn register_crd(&self, t: ResourceType) -> bool {
        let mut types = self.types.write().unwrap();
        let key = (t.group.clone(), t.plural.clone());
        match types.get(&key) {
            Some(existing) if !existing.from_crd => false,
            _ => {
                types.insert(key, Arc::new(t));
                true
            }
        }
    }

    pub fn unregister_crd(&self, group: &str, plural: &str) -> Option<Arc<ResourceType>> {
        let mut types = self.types.write().unwrap();
        let key = (group.to_string(), plural.to_string());
        if types.get(&key).is_some_and(|t| t.from_crd) {
            types.remove(&key)
        } else {
            None
        }
    }

    /// Group name to served versions (preferred first), in a stable order, for `/apis`.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in self.types.read().unwrap().values() {
            if t.group.is_empty() {
                continue;
            }
            let vs = out.entry(t.group.clone()).or_default();
            for v in &t.versions {
                if !vs.contains(v) {
                    vs.push(v.clone());
                }
            }
        }
        out
    }
}
