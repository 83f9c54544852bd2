//! The admitted pod, as far as the hook rules and the patch read it: names, labels, annotations,
//! containers and volumes, borrowed from the request's JSON text where possible.
//!
//! Why not `k8s_openapi::api::core::v1::Pod`, nor even a `serde_json::Value`: decoding the whole
//! pod was a third of the cost of a decision, and building a `Value` of a hostile request object
//! is where an 8 MiB body turns into hundreds of MiB of memory. This view skips every field the
//! rules do not read without building it. The patch never rewrites a field from this view either:
//! it only adds and removes what this product owns, so fields skipped here (or newer than our
//! Kubernetes API version) are never touched. The fields read here are still type-checked, and a
//! pod whose labels or containers have the wrong shape is an error, not a guess.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::types::{Annotations, Labels};

/// The pod of an admission request (or of a manifest given to `restore-hooks inject`), reduced to
/// what scope, hook resolution and the patch read (docs/behaviour.md §1, §3, §4).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmittedPod<'a> {
    /// `None` when the object has no `metadata` (or it is null): the patch must add it whole.
    #[serde(default, borrow)]
    pub metadata: Option<PodMeta<'a>>,
    /// `None` when the object has no `spec` (or it is null): nothing can be injected.
    #[serde(default, borrow)]
    pub spec: Option<PodSpecView<'a>>,
}

/// The pod's `metadata`, as far as scope, selectors, messages and the plan signature read it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMeta<'a> {
    /// `metadata.name`; absent for a `generateName` pod at admission (§4.8).
    #[serde(default, borrow)]
    pub name: Option<Text<'a>>,
    /// `metadata.generateName`: shown as `namespace/generateName*` and covered by the plan
    /// signature (§4.8, §9.1).
    #[serde(default, borrow)]
    pub generate_name: Option<Text<'a>>,
    /// `None` when absent or null (the patch then adds the whole map).
    #[serde(default)]
    pub labels: Option<Labels>,
    /// `metadata.annotations`: Velero's hook annotations (§2.1) and ours (plan, status,
    /// `injected`); `None` when absent or null.
    #[serde(default)]
    pub annotations: Option<Annotations>,
}

/// The pod's `spec`, as far as exec targets and init container placement read it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView<'a> {
    /// `spec.containers` (app containers), in order; the first is the default exec target (§2.3).
    #[serde(default, borrow, deserialize_with = "null_as_default")]
    pub containers: Vec<ContainerView<'a>>,
    /// `spec.initContainers`; `None` when absent or null (the patch then adds the whole array,
    /// §4.2).
    #[serde(default, borrow)]
    pub init_containers: Option<Vec<ContainerView<'a>>>,
    /// `spec.volumes`, by name: what hook containers' `volumeMounts` may name (§3.4 row 7).
    #[serde(default, borrow, deserialize_with = "null_as_default")]
    pub volumes: Vec<Named<'a>>,
    /// `spec.securityContext`: the user and group every container runs as unless it says
    /// otherwise, ephemeral ones too (§6.18).
    #[serde(default)]
    pub security_context: Option<RunAsView>,
    /// `spec.os`: a Windows pod's containers take no Linux securityContext settings (§6.18).
    #[serde(default, borrow)]
    pub os: Option<PodOsView<'a>>,
}

/// `runAsUser` and `runAsGroup` of a pod's or container's securityContext (the rest is skipped):
/// an image hook's container runs as its target does (docs/behaviour.md §6.18).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAsView {
    /// `runAsUser`.
    #[serde(default)]
    pub run_as_user: Option<i64>,
    /// `runAsGroup`.
    #[serde(default)]
    pub run_as_group: Option<i64>,
}

impl From<Option<RunAsView>> for super::ephemeral::RunAs {
    fn from(view: Option<RunAsView>) -> Self {
        let view = view.unwrap_or_default();
        Self {
            user: view.run_as_user,
            group: view.run_as_group,
        }
    }
}

/// `spec.os` of a pod.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodOsView<'a> {
    /// `linux` or `windows`.
    #[serde(default, borrow)]
    pub name: Option<Text<'a>>,
}

/// A container of the admitted pod: its name, and for init containers the parts that make up its
/// definition when a hook container is compared with it (docs/behaviour.md §4.3).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView<'a> {
    /// `name`: the container's name; clashes and exec targets are decided by it (§4.3).
    #[serde(borrow)]
    pub name: Text<'a>,
    /// `image`, part of the definition (§4.3).
    #[serde(default, borrow)]
    pub image: Option<Text<'a>>,
    /// `command`, part of the definition; absent equals `[]` (the entrypoint).
    #[serde(default, borrow)]
    pub command: Option<Vec<Text<'a>>>,
    /// `args`, part of the definition.
    #[serde(default, borrow)]
    pub args: Option<Vec<Text<'a>>>,
    /// `env`, part of the definition: kept as the request's raw JSON text and only parsed when an
    /// init container is compared with a hook container. Decoding it for every container of
    /// every pod cost about 20 times its size in memory (a hostile pod's env array of tiny
    /// values is the worst case) and time on the admission path.
    #[serde(default, borrow)]
    pub env: Option<&'a RawValue>,
    /// `volumeMounts`, part of the definition, kept raw like `env`.
    #[serde(default, borrow)]
    pub volume_mounts: Option<&'a RawValue>,
    /// `Always` on an init container makes it a native sidecar.
    #[serde(default, borrow)]
    pub restart_policy: Option<Text<'a>>,
    /// `securityContext`: who an image hook targeting it runs as (§6.18).
    #[serde(default)]
    pub security_context: Option<RunAsView>,
}

/// An object of a list that matters only by its `name` (a volume).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Named<'a> {
    /// `name`: what a hook container's `volumeMounts[].name` must equal.
    #[serde(borrow)]
    pub name: Text<'a>,
}

/// A string of the request, borrowed from the JSON text unless it had to be unescaped.
///
/// serde borrows a `Cow<str>` only when it is a field's whole type; inside `Option` or `Vec` it
/// would always copy. Admission reads a few dozen strings per pod, so this small wrapper keeps
/// them borrowed wherever they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Text<'_> {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Text<'_> {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
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
    /// Reads the view from the pod's JSON text, borrowing its strings.
    pub fn from_json_str(pod: &'a str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(pod)
    }

    /// `metadata.name`, when set and non-empty.
    pub fn name(&self) -> Option<&str> {
        self.metadata
            .as_ref()?
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
    }

    /// `metadata.generateName`, when set and non-empty.
    pub fn generate_name(&self) -> Option<&str> {
        self.metadata
            .as_ref()?
            .generate_name
            .as_deref()
            .filter(|n| !n.is_empty())
    }

    /// `metadata.labels`: what scope and pod selectors see, as admitted (§1.1, §2.7).
    pub fn labels(&self) -> Option<&Labels> {
        self.metadata.as_ref()?.labels.as_ref()
    }

    /// `metadata.annotations`, when present.
    pub fn annotations(&self) -> Option<&Annotations> {
        self.metadata.as_ref()?.annotations.as_ref()
    }

    /// `spec.containers`; empty when the pod has no spec.
    pub fn containers(&self) -> &[ContainerView<'a>] {
        self.spec.as_ref().map_or(&[], |s| s.containers.as_slice())
    }

    /// `None` when the pod has no `initContainers` field (or it is null): the patch must then
    /// add the whole array rather than insert into it.
    pub fn init_containers(&self) -> Option<&[ContainerView<'a>]> {
        self.spec.as_ref()?.init_containers.as_deref()
    }

    /// `spec.volumes`; empty when the pod has no spec or none.
    pub fn volumes(&self) -> &[Named<'a>] {
        self.spec.as_ref().map_or(&[], |s| s.volumes.as_slice())
    }

    /// `namespace/name`, or `namespace/generateName*` before the API server named the pod.
    pub fn display(&self, namespace: &str) -> String {
        match (self.name(), self.generate_name()) {
            (Some(name), _) => format!("{namespace}/{name}"),
            (_, Some(prefix)) => format!("{namespace}/{prefix}*"),
            _ => format!("{namespace}/<unnamed>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn reads_what_the_rules_need_and_skips_the_rest() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "db-", "labels": {"app": "db"},
                         "annotations": {"a/b": "c"}, "ownerReferences": [{"kind": "StatefulSet"}]},
            "spec": {
                "initContainers": [{"name": "restore-wait", "image": "velero/helper",
                                    "command": ["/wait"], "args": ["--x"],
                                    "env": [{"name": "A", "value": "1"}]},
                                   {"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
                "containers": [{"name": "db", "image": "postgres",
                                "resources": {"requests": {"cpu": "1"}},
                                "futureField": {"x": 1}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
            }
        });
        let text = pod.to_string();
        {
            let view = AdmittedPod::from_json_str(&text).unwrap();
            assert_eq!(view.display("shop"), "shop/db-*");
            assert_eq!(view.labels().unwrap()["app"], "db");
            assert_eq!(view.annotations().unwrap()["a/b"], "c");
            assert_eq!(*view.containers()[0].name, *"db");
            let init = view.init_containers().unwrap();
            assert_eq!(*init[0].command.as_ref().unwrap()[0], *"/wait");
            assert_eq!(*init[0].args.as_ref().unwrap()[0], *"--x");
            let env: Value = serde_json::from_str(init[0].env.unwrap().get()).unwrap();
            assert_eq!(env[0]["name"], "A");
            assert_eq!(init[1].restart_policy.as_deref(), Some("Always"));
            assert_eq!(*view.volumes()[0].name, *"data");
        }
    }

    /// Escaped strings (shell scripts in commands) cannot be borrowed from JSON text; they are
    /// decoded into owned strings, everything else is borrowed.
    #[test]
    fn escaped_strings_are_decoded() {
        let text = r#"{"metadata": {"name": "p\u00e9"}, "spec": {"initContainers": [
            {"name": "i", "image": "x", "command": ["sh", "-c", "echo \"a\"\nexit 0"]}]}}"#;
        let view = AdmittedPod::from_json_str(text).unwrap();
        assert_eq!(view.name(), Some("pé"));
        let cmd = view.init_containers().unwrap()[0].command.clone().unwrap();
        assert_eq!(cmd[2], "echo \"a\"\nexit 0");
        assert!(matches!(cmd[0].0, Cow::Borrowed(_)));
        assert!(matches!(cmd[2].0, Cow::Owned(_)));
    }

    /// The view must read exactly what the typed Pod would, for every field it has.
    #[test]
    fn agrees_with_the_typed_pod_on_the_example() {
        let text = include_str!("../../../examples/restored-pod.yaml");
        let json: Value = yaml_serde::from_str(text).unwrap();
        let typed = k8s_openapi::api::core::v1::Pod::deserialize(&json).unwrap();
        let text = json.to_string();
        let view = AdmittedPod::from_json_str(&text).unwrap();
        assert_eq!(view.name(), typed.metadata.name.as_deref());
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
            assert_eq!(v.image.as_deref(), t.image.as_deref());
            let command: Option<Vec<String>> = v
                .command
                .as_ref()
                .map(|c| c.iter().map(|s| s.to_string()).collect());
            assert_eq!(command, t.command);
            assert_eq!(v.restart_policy.as_deref(), t.restart_policy.as_deref());
        }
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(
            view.volumes().iter().map(|v| &*v.name).collect::<Vec<_>>(),
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
            let text = pod.to_string();
            let view = AdmittedPod::from_json_str(&text).unwrap();
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
            json!([0, 0, 0]),
        ] {
            assert!(
                AdmittedPod::from_json_str(&pod.to_string()).is_err(),
                "{pod}"
            );
        }
    }
}
