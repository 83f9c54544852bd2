//! Parameters from the restore in hook-object hooks (docs/behaviour.md §2.8): `$(RESTORE_NAME)`,
//! `$(BACKUP_NAME)`, `$(SOURCE_NAMESPACE)`, `$(NAMESPACE)`, `$(POD_NAME)`, `$(POD_ORDINAL)`, with
//! Kubernetes' own `$(VAR)` rules (the kubelet's for `command`, `args` and `env`): `$$` is a
//! literal `$`, a name that is not defined stays as written, and so does everything else.
//!
//! Exec hooks are expanded here, at admission, so the signed plan holds the argv that runs. Init
//! containers are not rewritten: the kubelet expands `$(VAR)` in them from the container's own
//! `env`, so the webhook prepends an env entry for each parameter the container uses (and does not
//! define itself). The kubelet then expands them exactly as it expands any variable, and the
//! process sees them as environment variables too; a `generateName` pod, which the API server
//! names only after admission, gets `POD_NAME` from the downward API.
//!
//! Velero's own sources (pod annotations, Restore entries) are never expanded: they run as Velero
//! defines them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::compiled::{CompiledObject, Definition, HookContainer, is_dns_label};
use super::labels::LabelLookup;
use super::pod::AdmittedPod;

/// The StatefulSet controller's label for a pod's ordinal (Kubernetes 1.28 and later).
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The StatefulSet controller's label naming the pod (every version): a pod that carries it is a
/// StatefulSet pod, named `<set>-<ordinal>`.
const STATEFULSET_POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";

/// The parameter names, in the order init containers get them.
pub const NAMES: [&str; 6] = [
    "RESTORE_NAME",
    "BACKUP_NAME",
    "SOURCE_NAMESPACE",
    "NAMESPACE",
    "POD_NAME",
    "POD_ORDINAL",
];

/// The values of the parameters for one pod; a parameter without a value (no Velero Restore known,
/// not a StatefulSet pod, a name the API server has not given yet) is not defined, so `$(NAME)`
/// stays as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreParameters {
    values: BTreeMap<&'static str, String>,
}

/// What the Velero Restore of the pod's restore says, when it is known.
#[derive(Clone, Copy, Debug, Default)]
pub struct VeleroFacts<'a> {
    /// `spec.backupName`.
    pub backup_name: Option<&'a str>,
    /// `spec.namespaceMapping`: source namespace → target namespace.
    pub namespace_mapping: Option<&'a BTreeMap<String, String>>,
}

impl<'a> VeleroFacts<'a> {
    /// What `$(BACKUP_NAME)` and `$(SOURCE_NAMESPACE)` read from a compiled Velero Restore.
    pub fn of(restore: &'a CompiledObject) -> Self {
        VeleroFacts {
            backup_name: restore.backup_name.as_deref(),
            namespace_mapping: Some(&restore.namespace_mapping),
        }
    }
}

impl RestoreParameters {
    /// The parameters of `pod`, restored into `namespace` by the restore named `restore` (its full
    /// name, docs/behaviour.md §1.2).
    pub fn of(
        pod: &AdmittedPod<'_>,
        namespace: &str,
        restore: &str,
        velero: VeleroFacts<'_>,
    ) -> Self {
        let mut values = BTreeMap::new();
        values.insert("RESTORE_NAME", restore.to_string());
        // Whoever wrote the Velero Restore chose these strings; a hook author may put them into a
        // shell command. Only what the API server would accept as names is a value, so no value
        // ever holds a shell metacharacter (docs/behaviour.md §2.8).
        if let Some(backup) = velero.backup_name.filter(|b| is_dns_subdomain(b)) {
            values.insert("BACKUP_NAME", backup.to_string());
        }
        // Velero maps source → target; the pod is in the target. Without a mapping for it, the
        // pod was restored into the namespace it was backed up from.
        let source = velero
            .namespace_mapping
            .and_then(|m| m.iter().find(|(_, target)| *target == namespace))
            .map(|(source, _)| source.as_str())
            .filter(|source| is_dns_label(source))
            .unwrap_or(namespace);
        values.insert("SOURCE_NAMESPACE", source.to_string());
        values.insert("NAMESPACE", namespace.to_string());
        if let Some(name) = pod.name() {
            values.insert("POD_NAME", name.to_string());
        }
        if let Some(ordinal) = pod_ordinal(pod.labels(), pod.name()) {
            values.insert("POD_ORDINAL", ordinal.to_string());
        }
        RestoreParameters { values }
    }

    /// A parameter's value, when defined.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// `input` with Kubernetes' `$(VAR)` rules applied for these parameters.
    pub fn expand(&self, input: &str) -> String {
        expand(input, |name| self.get(name))
    }

    /// `container` with an env entry prepended for each parameter its `command`, `args` or `env`
    /// values use and its own `env` does not define (its [`HookContainer::parameters`]), so that
    /// the kubelet expands them (see the module documentation). Unchanged when it uses none.
    pub fn provide_to(&self, container: &HookContainer) -> HookContainer {
        // POD_NAME always is: by value, or else from the downward API.
        let provided = |name: &str| self.get(name).is_some() || name == "POD_NAME";
        let added: Vec<Value> = container
            .parameters
            .iter()
            .filter_map(|&name| match self.get(name) {
                Some(value) => Some(json!({"name": name, "value": value})),
                // Named by the API server after admission: the downward API has it.
                None if name == "POD_NAME" => Some(json!({
                    "name": name,
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}
                })),
                None => None,
            })
            .collect();
        if added.is_empty() {
            return container.clone();
        }
        let own_env = container.value.get("env").and_then(Value::as_array);
        let mut out = container.clone();
        let env: Vec<Value> = added
            .into_iter()
            .chain(own_env.cloned().into_iter().flatten())
            .collect();
        out.value["env"] = Value::Array(env);
        out.definition.env = Definition::normalise(out.value.get("env"));
        // What it uses is now defined by its own env, except what has no value for this pod.
        out.parameters.retain(|name| !provided(name));
        out
    }
}

/// The parameters a container's `command`, `args` or `env` values use (by the expansion rules: an
/// escaped `$$(NAME)` is no use) and its own `env` (`value`'s) does not define, in [`NAMES`]
/// order. The container's [`HookContainer::parameters`], found when it is compiled.
pub fn used_parameters(definition: &Definition, value: &Value) -> Vec<&'static str> {
    let own_env = value.get("env").and_then(Value::as_array);
    let defined = |name: &str| {
        own_env.is_some_and(|env| {
            env.iter()
                .any(|e| e.get("name").and_then(Value::as_str) == Some(name))
        })
    };
    let env_values = own_env
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("value").and_then(Value::as_str));
    // Every parameter referenced, in one pass over the texts.
    let mut referenced = [false; NAMES.len()];
    for text in definition
        .command
        .iter()
        .chain(&definition.args)
        .map(String::as_str)
        .chain(env_values)
    {
        expand(text, |name| {
            if let Some(i) = NAMES.iter().position(|n| *n == name) {
                referenced[i] = true;
            }
            None
        });
    }
    NAMES
        .into_iter()
        .zip(referenced)
        .filter(|&(name, used)| used && !defined(name))
        .map(|(name, _)| name)
        .collect()
}

/// Whether `text` refers to `$(name)`, by the expansion rules (an escaped `$$(name)` does not).
pub fn references(text: &str, name: &str) -> bool {
    let mut found = false;
    expand(text, |n| {
        found |= n == name;
        None
    });
    found
}

/// A Kubernetes object name (RFC 1123 subdomain).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A pod's StatefulSet ordinal: the `apps.kubernetes.io/pod-index` label, else the number after
/// the last `-` of the name of a pod labelled `statefulset.kubernetes.io/pod-name`.
pub fn pod_ordinal<L: LabelLookup>(labels: Option<&L>, name: Option<&str>) -> Option<u64> {
    let labels = labels?;
    let numeric = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    if let Some(index) = labels.label(POD_INDEX_LABEL) {
        return numeric(index);
    }
    labels.label(STATEFULSET_POD_NAME_LABEL)?;
    numeric(name?.rsplit_once('-')?.1)
}

/// Kubernetes' `$(VAR)` expansion (`third_party/forked/golang/expansion` in Kubernetes): `$$` is
/// `$`; `$(NAME)` is `lookup(NAME)` when defined and `$(NAME)` otherwise; a `$` before anything
/// else, and an unclosed `$(`, stay as written.
pub fn expand<'v>(input: &str, mut lookup: impl FnMut(&str) -> Option<&'v str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match after.chars().next() {
            Some('$') => {
                out.push('$');
                rest = &after[1..];
            }
            Some('(') => match after.find(')') {
                Some(close) => {
                    let name = &after[1..close];
                    match lookup(name) {
                        Some(value) => out.push_str(value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &after[close + 1..];
                }
                // Unclosed: `$(` as written, and go on after it.
                None => {
                    out.push_str("$(");
                    rest = &after[1..];
                }
            },
            // `$` then another character (kept, and not read as an operator), or `$` at the end.
            Some(c) => {
                out.push('$');
                out.push(c);
                rest = &after[c.len_utf8()..];
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::compiled::spec_init_container;

    fn params() -> RestoreParameters {
        let values = [
            ("RESTORE_NAME", "nightly"),
            ("NAMESPACE", "shop"),
            ("POD_NAME", "db-0"),
        ];
        RestoreParameters {
            values: values
                .into_iter()
                .map(|(k, v)| (k, v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let cases = [
            ("plain text", "plain text"),
            ("$(RESTORE_NAME)", "nightly"),
            (
                "restore=$(RESTORE_NAME) ns=$(NAMESPACE)",
                "restore=nightly ns=shop",
            ),
            ("$$(RESTORE_NAME)", "$(RESTORE_NAME)"),
            ("$$$(RESTORE_NAME)", "$nightly"),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$(BACKUP_NAME)", "$(BACKUP_NAME)"),
            ("$(RESTORE_NAME", "$(RESTORE_NAME"),
            ("$(", "$("),
            ("cost $5", "cost $5"),
            ("$HOME and ${HOME}", "$HOME and ${HOME}"),
            ("trailing $", "trailing $"),
            ("$$", "$"),
            ("$()", "$()"),
            ("é$(POD_NAME)é", "édb-0é"),
            ("$é", "$é"),
        ];
        for (input, want) in cases {
            assert_eq!(params().expand(input), want, "{input:?}");
        }
    }

    fn pod(json: &str) -> AdmittedPod<'_> {
        AdmittedPod::from_json_str(json).unwrap()
    }

    #[test]
    fn parameters_of_a_pod() {
        let mapping: BTreeMap<String, String> = [("prod".into(), "prod-restored".into())].into();
        let velero = VeleroFacts {
            backup_name: Some("nightly-backup"),
            namespace_mapping: Some(&mapping),
        };
        let sts = r#"{"metadata": {"name": "db-2", "labels": {"statefulset.kubernetes.io/pod-name": "db-2"}}}"#;
        let indexed =
            r#"{"metadata": {"name": "db-x", "labels": {"apps.kubernetes.io/pod-index": "7"}}}"#;
        let generated = r#"{"metadata": {"generateName": "web-", "labels": {"app": "web"}}}"#;
        // Not names the API server would accept: not values (they could reach a shell).
        let hostile: BTreeMap<String, String> = [("$(id)".into(), "prod-restored".into())].into();
        let cases: [(&str, &str, VeleroFacts<'_>, [Option<&str>; 6]); 5] = [
            (
                sts,
                "prod-restored",
                velero,
                [
                    Some("r"),
                    Some("nightly-backup"),
                    Some("prod"),
                    Some("prod-restored"),
                    Some("db-2"),
                    Some("2"),
                ],
            ),
            (
                indexed,
                "shop",
                velero,
                [
                    Some("r"),
                    Some("nightly-backup"),
                    Some("shop"),
                    Some("shop"),
                    Some("db-x"),
                    Some("7"),
                ],
            ),
            (
                generated,
                "shop",
                VeleroFacts::default(),
                [Some("r"), None, Some("shop"), Some("shop"), None, None],
            ),
            (
                generated,
                "prod-restored",
                VeleroFacts {
                    backup_name: Some("x;rm -rf /"),
                    namespace_mapping: Some(&hostile),
                },
                [
                    Some("r"),
                    None,
                    Some("prod-restored"),
                    Some("prod-restored"),
                    None,
                    None,
                ],
            ),
            (
                r#"{"metadata": {"name": "solo-1"}}"#,
                "shop",
                VeleroFacts::default(),
                [
                    Some("r"),
                    None,
                    Some("shop"),
                    Some("shop"),
                    Some("solo-1"),
                    None,
                ],
            ),
        ];
        for (json, namespace, velero, want) in cases {
            let p = RestoreParameters::of(&pod(json), namespace, "r", velero);
            let got: Vec<Option<&str>> = NAMES.iter().map(|n| p.get(n)).collect();
            assert_eq!(got, want, "{json}");
        }
    }

    #[test]
    fn init_containers_get_env_for_the_parameters_they_use() {
        let container = |v: Value| spec_init_container(&v, 0).unwrap();
        let p = params();
        // Unused: unchanged, so a container without parameters keeps its definition (§4.3).
        let plain = container(json!({"name": "a", "image": "i", "command": ["true"]}));
        assert_eq!(p.provide_to(&plain), plain);

        let uses = container(json!({
            "name": "a", "image": "i",
            "command": ["restore", "--run=$(RESTORE_NAME)"],
            "args": ["$$(NAMESPACE)", "$(POD_NAME)", "$(BACKUP_NAME)"],
            "env": [{"name": "X", "value": "$(NAMESPACE)"}, {"name": "POD_NAME", "value": "mine"}]
        }));
        // Found when the container is compiled, in NAMES order: the escaped `$$(NAMESPACE)` is no
        // use but the env value's `$(NAMESPACE)` is; its own env defines POD_NAME.
        assert_eq!(
            uses.parameters,
            ["RESTORE_NAME", "BACKUP_NAME", "NAMESPACE"]
        );
        assert!(plain.parameters.is_empty());
        let got = p.provide_to(&uses);
        assert_eq!(
            got.parameters,
            ["BACKUP_NAME"],
            "the others are in its env now"
        );
        assert_eq!(
            got.value["env"],
            json!([
                {"name": "RESTORE_NAME", "value": "nightly"},
                {"name": "NAMESPACE", "value": "shop"},
                {"name": "X", "value": "$(NAMESPACE)"},
                {"name": "POD_NAME", "value": "mine"}
            ]),
            "own POD_NAME wins; BACKUP_NAME is not defined, so it stays as written"
        );
        assert_eq!(got.definition.env, got.value["env"]);
        assert_eq!(
            got.value["command"], uses.value["command"],
            "the kubelet expands it"
        );

        let unnamed = RestoreParameters {
            values: [("RESTORE_NAME", "r".to_string())].into_iter().collect(),
        };
        let got = unnamed.provide_to(&container(
            json!({"name": "a", "image": "i", "args": ["$(POD_NAME)"]}),
        ));
        assert_eq!(
            got.value["env"],
            json!([{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
        );
    }
}
