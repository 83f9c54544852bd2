//! What follows a delete besides the store's: the pod-deleted event, a namespace's objects, a
//! CRD's resource type. Shared by the DELETE handlers and fault injection (a pod deleted during
//! an exec).

use serde_json::Value;

use crate::error::ApiResult;
use crate::registry::ResourceType;
use crate::store::meta_str;
use crate::{Sim, SimEventKind};

/// Cascades a deleted object (the store already removed it).
pub(crate) fn on_deleted(sim: &Sim, rt: &ResourceType, obj: &Value) {
    let id = rt.id();
    let ns = meta_str(obj, "namespace");
    let name = meta_str(obj, "name");
    match id.as_str() {
        "pods" => sim.emit(SimEventKind::PodDeleted, ns, name, "pod deleted"),
        "namespaces" => {
            for t in sim.registry.all().iter().filter(|t| t.namespaced) {
                for o in sim.store.delete_all(&t.id(), Some(name)) {
                    on_deleted(sim, t, &o);
                }
            }
        }
        "customresourcedefinitions.apiextensions.k8s.io" => {
            if let Some(crt) = ResourceType::from_crd(obj) {
                sim.registry.unregister_crd(&crt.group, &crt.plural);
                sim.store.delete_all(&crt.id(), None);
            }
        }
        _ => {}
    }
}

/// Deletes a pod as an outside actor would (used by fault injection).
pub(crate) fn delete_pod(sim: &Sim, ns: &str, name: &str) -> ApiResult<()> {
    let obj = sim.store.delete("pods", ns, name, |_| Ok(()))?;
    pod_removed(sim, &obj);
    Ok(())
}

/// Cascades a pod the store removed (a delete, or an update that deleted it).
pub(crate) fn pod_removed(sim: &Sim, obj: &Value) {
    if let Some(rt) = sim.registry.lookup("", "v1", "pods") {
        on_deleted(sim, &rt, obj);
    }
}
