//! The admitted pod, as far as the hook rules read it: names, labels, annotations, containers
//! and volumes, borrowed from the request's JSON.
//!
//! Why not `k8s_openapi::api::core::v1::Pod`: decoding the whole typed Pod (probes, resources,
//! env, volume sources...) was a third of the cost of a decision, and the rules read none of it.
//! The patch never comes from this view either: it is computed against the raw JSON, so fields
//! this view skips (or that are newer than our Kubernetes API version) are never touched. The
//! API server decodes the object as a Pod before calling webhooks, so a typed check of the
//! skipped fields would find nothing; the fields read here are still type-checked, and a pod
//! whose labels or containers have the wrong shape is an error, not a guess.

use serde::Deserialize;
use serde_json::Value;

use super::types::Labels;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmittedPod<'a> {
    #[serde(default, borrow, deserialize_with = "null_as_default")]
    pub metadata: PodMeta<'a>,
    #[serde(default, borrow)]
    pub spec: Option<PodSpecView<'a>>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodMeta<'a> {
    #[serde(default, borrow)]
    pub name: Option<&'a str>,
    #[serde(default, borrow)]
    pub generate_name: Option<&'a str>,
    #[serde(default)]
    pub labels: Option<Labels>,
    #[serde(default)]
    pub annotations: Option<Labels>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView<'a> {
    #[serde(default, borrow, deserialize_with = "null_as_default")]
    pub containers: Vec<ContainerView<'a>>,
    #[serde(default, borrow)]
    pub init_containers: Option<Vec<ContainerView<'a>>>,
    #[serde(default, borrow, deserialize_with = "null_as_default")]
    pub volumes: Vec<Named<'a>>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView<'a> {
    #[serde(borrow)]
    pub name: &'a str,
    #[serde(default, borrow)]
    pub image: Option<&'a str>,
    #[serde(default, borrow)]
    pub command: Option<Vec<&'a str>>,
    /// `Always` on an init container makes it a native sidecar.
    #[serde(default, borrow)]
    pub restart_policy: Option<&'a str>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Named<'a> {
    #[serde(borrow)]
    pub name: &'a str,
}

/// `null` is what a Go client sends for an empty field; treat it as absent.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

impl<'a> AdmittedPod<'a> {
    /// Reads the view from the pod's JSON, borrowing its strings.
    pub fn from_json(pod: &'a Value) -> Result<Self, serde_json::Error> {
        Self::deserialize(pod)
    }

    pub fn labels(&self) -> Option<&Labels> {
        self.metadata.labels.as_ref()
    }

    pub fn annotations(&self) -> Option<&Labels> {
        self.metadata.annotations.as_ref()
    }

    pub fn containers(&self) -> &[ContainerView<'a>] {
        self.spec.as_ref().map_or(&[], |s| s.containers.as_slice())
    }

    /// `None` when the pod has no `initContainers` field (or it is null): the patch must then
    /// add the whole array rather than insert into it.
    pub fn init_containers(&self) -> Option<&[ContainerView<'a>]> {
        self.spec.as_ref()?.init_containers.as_deref()
    }

    pub fn volumes(&self) -> &[Named<'a>] {
        self.spec.as_ref().map_or(&[], |s| s.volumes.as_slice())
    }

    /// `namespace/name`, or `namespace/generateName*` before the API server named the pod.
    pub fn display(&self, namespace: &str) -> String {
        match (self.metadata.name, self.metadata.generate_name) {
            (Some(name), _) if !name.is_empty() => format!("{namespace}/{name}"),
            (_, Some(prefix)) => format!("{namespace}/{prefix}*"),
            _ => format!("{namespace}/<unnamed>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_what_the_rules_need_and_skips_the_rest() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "db-", "labels": {"app": "db"},
                         "annotations": {"a/b": "c"}, "ownerReferences": [{"kind": "StatefulSet"}]},
            "spec": {
                "initContainers": [{"name": "restore-wait", "image": "velero/helper",
                                    "command": ["/wait"]},
                                   {"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
                "containers": [{"name": "db", "image": "postgres",
                                "resources": {"requests": {"cpu": "1"}},
                                "futureField": {"x": 1}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
            }
        });
        let view = AdmittedPod::from_json(&pod).unwrap();
        assert_eq!(view.display("shop"), "shop/db-*");
        assert_eq!(view.labels().unwrap()["app"], "db");
        assert_eq!(view.annotations().unwrap()["a/b"], "c");
        assert_eq!(view.containers()[0].name, "db");
        let init = view.init_containers().unwrap();
        assert_eq!(init[0].command.as_deref(), Some(&["/wait"][..]));
        assert_eq!(init[1].restart_policy, Some("Always"));
        assert_eq!(view.volumes()[0].name, "data");
    }

    /// The view must read exactly what the typed Pod would, for every field it has.
    #[test]
    fn agrees_with_the_typed_pod_on_the_example() {
        let text = include_str!("../../../examples/restored-pod.yaml");
        let json: Value = serde_yaml::from_str(text).unwrap();
        let typed = k8s_openapi::api::core::v1::Pod::deserialize(&json).unwrap();
        let view = AdmittedPod::from_json(&json).unwrap();
        assert_eq!(view.metadata.name, typed.metadata.name.as_deref());
        assert_eq!(view.labels(), typed.metadata.labels.as_ref());
        assert_eq!(view.annotations(), typed.metadata.annotations.as_ref());
        let spec = typed.spec.unwrap();
        fn names(cs: &[ContainerView<'_>]) -> Vec<String> {
            cs.iter().map(|c| c.name.to_string()).collect()
        }
        fn typed_names(cs: &[k8s_openapi::api::core::v1::Container]) -> Vec<String> {
            cs.iter().map(|c| c.name.clone()).collect()
        }
        assert_eq!(names(view.containers()), typed_names(&spec.containers));
        let init = spec.init_containers.unwrap();
        assert_eq!(names(view.init_containers().unwrap()), typed_names(&init));
        for (v, t) in view.init_containers().unwrap().iter().zip(&init) {
            assert_eq!(v.image, t.image.as_deref());
            let command: Option<Vec<String>> = v
                .command
                .as_ref()
                .map(|c| c.iter().map(|s| s.to_string()).collect());
            assert_eq!(command, t.command);
            assert_eq!(v.restart_policy, t.restart_policy.as_deref());
        }
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(
            view.volumes().iter().map(|v| v.name).collect::<Vec<_>>(),
            volumes
        );
        assert!(!volumes.is_empty() && init.len() >= 2);
    }

    #[test]
    fn nulls_and_absences_read_as_empty() {
        for pod in [
            json!({}),
            json!({"metadata": null, "spec": null}),
            json!({"metadata": {"labels": null}, "spec": {"containers": null, "initContainers": null, "volumes": null}}),
        ] {
            let view = AdmittedPod::from_json(&pod).unwrap();
            assert!(view.labels().is_none(), "{pod}");
            assert!(view.containers().is_empty(), "{pod}");
            assert!(view.init_containers().is_none(), "{pod}");
            assert!(view.volumes().is_empty(), "{pod}");
            assert_eq!(view.display("ns"), "ns/<unnamed>");
        }
    }

    #[test]
    fn wrongly_shaped_fields_the_rules_read_are_errors() {
        for pod in [
            json!({"metadata": {"labels": "oops"}}),
            json!({"metadata": {"labels": {"a": 1}}}),
            json!({"metadata": {"name": 7}}),
            json!({"spec": {"containers": [{"image": "no-name"}]}}),
            json!({"spec": {"containers": {"name": "not-a-list"}}}),
            json!({"spec": {"initContainers": [{"name": "x", "command": "not-a-list"}]}}),
            json!({"spec": {"volumes": [{}]}}),
            json!("not an object"),
        ] {
            assert!(AdmittedPod::from_json(&pod).is_err(), "{pod}");
        }
    }
}
