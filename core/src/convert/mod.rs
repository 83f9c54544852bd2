//! `restore-hooks convert` (docs/behaviour.md §4.10): Velero's own restore hooks, written as the
//! RestoreHooks and ClusterRestoreHooks that give restore-hooks' guarantees (at most once, signed
//! plans, retries, records), and, on request, the workloads and Restores without them, which is
//! what makes Velero stop running them too: Velero has no switch to turn its hooks off.
//!
//! Sources: the Velero restore-hook annotations of workloads' pod templates (Pod, Deployment,
//! StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) and the `spec.hooks` of Velero Restores.
//!
//! The rule for every field: a pod gets from the converted objects exactly the hooks restore-hooks
//! gives it from the Velero source under `--velero-hooks own` (commands, containers, onError,
//! timeouts, init containers, their order). What cannot be converted so is an error that names the
//! object and the fix, and nothing is written for that object: never half of it, and never a
//! workload without annotations whose hooks were not converted. Pure: the shell reads the files.

mod restore;
mod text;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::hooks::compiled::{
    CompiledObject, compile_cluster_restore_hook, compile_restore_hook, is_dns_label,
};
use crate::hooks::patterns::NamePattern;
use crate::hooks::types::{ClusterRestoreHook, RestoreHook};

pub use restore::NAMESPACE_NAME_LABEL;
pub use text::{escape_expansion, escape_parameter_references};

/// The annotation every converted hook object carries: what it was converted from, so that
/// whoever finds it in a cluster knows where its hooks came from.
pub const CONVERTED_FROM: &str = "restore-hooks.dev/converted-from";

/// One object of the input: a document, or an item of a `List` document.
#[derive(Clone, Debug)]
pub struct Document {
    /// Where it comes from, for messages: `deploy.yaml document 2`, `- document 1 item 4`.
    pub origin: String,
    /// The object as written. YAML keeps the order of its keys, so a workload written back without
    /// its Velero annotations differs from its input in those lines only.
    pub value: yaml_serde::Value,
}

/// Input that cannot be used at all (exit code 2 of `restore-hooks convert`): nothing is
/// converted.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A document that is neither YAML nor JSON.
    #[error("{origin}: not valid YAML or JSON: {reason}")]
    Syntax {
        /// File and document.
        origin: String,
        /// The parser's message.
        reason: String,
    },
    /// A document that is not a Kubernetes object.
    #[error(
        "{origin}: not a Kubernetes object (a mapping with apiVersion and kind): {reason}; give manifests, e.g. the output of kubectl get -o yaml"
    )]
    NotAnObject {
        /// File and document.
        origin: String,
        /// What it is instead.
        reason: String,
    },
    /// An option that cannot be used.
    #[error("{0}")]
    Option(String),
}

/// Splits one input text (multi-document YAML or JSON) into objects, `List`s (what `kubectl get
/// -o yaml` prints) into their items. `source` names the input in messages.
pub fn read_documents(source: &str, text: &str) -> Result<Vec<Document>, InputError> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let origin = format!("{source} document {}", index + 1);
        let value = yaml_serde::Value::deserialize(document).map_err(|e| InputError::Syntax {
            origin: origin.clone(),
            reason: e.to_string(),
        })?;
        push_object(&mut out, origin, value)?;
    }
    Ok(out)
}

fn push_object(
    out: &mut Vec<Document>,
    origin: String,
    value: yaml_serde::Value,
) -> Result<(), InputError> {
    let not_an_object = |reason: &str| InputError::NotAnObject {
        origin: origin.clone(),
        reason: reason.to_string(),
    };
    match &value {
        // An empty document, e.g. after a trailing `---`.
        yaml_serde::Value::Null => return Ok(()),
        yaml_serde::Value::Mapping(_) => {}
        yaml_serde::Value::Sequence(_) => return Err(not_an_object("a list")),
        _ => return Err(not_an_object("a scalar")),
    }
    let field = |k: &str| value.get(k).and_then(yaml_serde::Value::as_str);
    if field("apiVersion").is_none() || field("kind").is_none() {
        return Err(not_an_object("apiVersion or kind is missing"));
    }
    let is_list = field("kind").is_some_and(|k| k.ends_with("List"));
    match value.get("items") {
        Some(yaml_serde::Value::Sequence(items)) if is_list => {
            for (i, item) in items.iter().enumerate() {
                push_object(out, format!("{origin} item {}", i + 1), item.clone())?;
            }
        }
        Some(yaml_serde::Value::Null) | None if is_list => {}
        _ => out.push(Document { origin, value }),
    }
    Ok(())
}

/// What `convert` may choose.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Namespace of the objects whose manifests name none; `None`: the RestoreHook of such a
    /// workload names none either, and goes wherever the workload is applied.
    pub namespace: Option<String>,
    /// The `restores` globs of every written hook object, instead of the defaults: none (every
    /// restore) for annotations, which apply in every restore the pod is in, and the Restore's own
    /// name for a Restore's entries, which are that restore's hooks.
    pub restores: Option<Vec<String>>,
    /// Also write each converted workload without its Velero restore-hook annotations and each
    /// converted Restore without `spec.hooks`.
    pub strip_velero_hooks: bool,
}

impl Options {
    fn check(&self) -> Result<(), InputError> {
        if let Some(ns) = self.namespace.as_deref().filter(|ns| !is_dns_label(ns)) {
            return Err(InputError::Option(format!(
                "--namespace {ns:?} is not a namespace name (a lowercase RFC 1123 label)"
            )));
        }
        for pattern in self.restores.iter().flatten() {
            NamePattern::compile(pattern)
                .map_err(|e| InputError::Option(format!("--restores: {e}")))?;
        }
        if self
            .restores
            .as_ref()
            .is_some_and(|r| r.len() > MAX_RESTORES)
        {
            return Err(InputError::Option(format!(
                "--restores is given more than {MAX_RESTORES} times: a hook object holds at most {MAX_RESTORES} patterns"
            )));
        }
        Ok(())
    }
}

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The object was not converted, and nothing was written for it.
    Error,
    /// Converted exactly; something about it the user should know.
    Note,
}

/// What `convert` has to say about one input object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Error or note.
    pub severity: Severity,
    /// The object: `Deployment shop/db (deploy.yaml document 1)`.
    pub object: String,
    /// What, and what to do.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "Error",
            Severity::Note => "Note",
        };
        write!(f, "{severity}: {}: {}", self.object, self.message)
    }
}

/// The result of [`convert`].
#[derive(Clone, Debug, Default)]
pub struct Conversion {
    /// The hook objects, then (with [`Options::strip_velero_hooks`]) the workloads and Restores
    /// without Velero's hooks: applied in this order, the hooks exist before Velero stops
    /// running them.
    pub objects: Vec<yaml_serde::Value>,
    /// Errors and notes, in input order.
    pub findings: Vec<Finding>,
    /// How many input objects were not converted (each has at least one error).
    pub not_converted: usize,
}

impl Conversion {
    /// The objects as one multi-document YAML text.
    pub fn to_yaml(&self) -> String {
        self.objects
            .iter()
            .map(|o| yaml_serde::to_string(o).expect("a YAML value always serializes"))
            .collect::<Vec<_>>()
            .join("---\n")
    }
}

/// A written hook object.
#[derive(Clone, Debug)]
enum HookObject {
    Namespaced(RestoreHook),
    Cluster(ClusterRestoreHook),
}

impl HookObject {
    fn key(&self) -> (&'static str, Option<&str>, &str) {
        match self {
            HookObject::Namespaced(h) => (
                "RestoreHook",
                h.metadata.namespace.as_deref(),
                h.metadata.name.as_deref().unwrap_or_default(),
            ),
            HookObject::Cluster(h) => (
                "ClusterRestoreHook",
                None,
                h.metadata.name.as_deref().unwrap_or_default(),
            ),
        }
    }

    /// The product's own compiler on it: the webhook must accept what `convert` writes.
    fn compiled(&self) -> CompiledObject {
        match self {
            HookObject::Namespaced(h) => {
                // A RestoreHook without a namespace goes to the one it is applied in; any name
                // compiles the same.
                let mut h = h.clone();
                h.metadata.namespace.get_or_insert_with(|| "default".into());
                compile_restore_hook(&h)
            }
            HookObject::Cluster(h) => compile_cluster_restore_hook(h),
        }
    }

    fn to_yaml(&self) -> yaml_serde::Value {
        match self {
            HookObject::Namespaced(h) => yaml_serde::to_value(h),
            HookObject::Cluster(h) => yaml_serde::to_value(h),
        }
        .expect("hook objects serialize")
    }
}

/// Metadata of a written hook object.
fn hook_metadata(name: String, namespace: Option<String>, from: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace,
        annotations: Some(BTreeMap::from([(
            CONVERTED_FROM.to_string(),
            from.to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

/// What became of one input object.
#[derive(Debug, Default)]
struct Outcome {
    /// `Deployment shop/db (deploy.yaml document 1)`.
    object: String,
    hooks: Vec<HookObject>,
    /// The object without Velero's hooks, with [`Options::strip_velero_hooks`].
    stripped: Option<yaml_serde::Value>,
    errors: Vec<String>,
    notes: Vec<String>,
}

/// Bounds of the hook objects' CRD schemas (`core/src/hooks/types.rs`) that a Velero source can
/// exceed; a unit test keeps them equal to the generated schema.
const MAX_POST_HOOKS: usize = 64;
const MAX_INIT_CONTAINERS: usize = 16;
const MAX_COMMAND_ARGS: usize = 128;
const MAX_COMMAND_ARG_BYTES: usize = 32768;
const MAX_IMAGE_BYTES: usize = 1024;
const MAX_RESTORES: usize = 64;
const MAX_SELECTOR_VALUES: usize = 64;

/// Converts `documents` (see the module documentation). An error is returned only for options
/// that cannot be used; everything about the objects is in the [`Conversion`].
pub fn convert(documents: &[Document], options: &Options) -> Result<Conversion, InputError> {
    options.check()?;
    let mut workloads = Vec::new();
    let mut restores = Vec::new();
    // Input order, for the findings and the output: (is a workload, position in its list).
    let mut order = Vec::new();
    for document in documents {
        let json: Value =
            serde_json::to_value(&document.value).map_err(|e| InputError::NotAnObject {
                origin: document.origin.clone(),
                reason: e.to_string(),
            })?;
        if let Some(w) = workload::Workload::read(document, &json, options) {
            order.push((true, workloads.len()));
            workloads.push(w);
        } else if let Some(r) = restore::Restore::read(document, &json) {
            order.push((false, restores.len()));
            restores.push(r);
        }
    }

    let mut workload_outcomes: Vec<Outcome> = workloads
        .iter()
        .map(|w| w.convert(&workloads, options))
        .collect();
    let mut restore_outcomes: Vec<Outcome> = restores.iter().map(|r| r.convert(options)).collect();
    precedence_conflicts(
        &workloads,
        &restores,
        &mut workload_outcomes,
        &mut restore_outcomes,
    );

    let mut outcomes: Vec<Outcome> = order
        .iter()
        .map(|&(is_workload, i)| {
            std::mem::take(if is_workload {
                &mut workload_outcomes[i]
            } else {
                &mut restore_outcomes[i]
            })
        })
        .collect();
    self_check(&mut outcomes);

    let mut conversion = Conversion::default();
    let mut stripped = Vec::new();
    for outcome in outcomes {
        let failed = !outcome.errors.is_empty();
        if failed {
            conversion.not_converted += 1;
        } else {
            conversion
                .objects
                .extend(outcome.hooks.iter().map(HookObject::to_yaml));
            stripped.extend(outcome.stripped);
        }
        let finding = |severity, message| Finding {
            severity,
            object: outcome.object.clone(),
            message,
        };
        conversion.findings.extend(
            outcome
                .errors
                .into_iter()
                .map(|m| finding(Severity::Error, m))
                .chain(
                    outcome
                        .notes
                        .into_iter()
                        .map(|m| finding(Severity::Note, m)),
                ),
        );
    }
    conversion.objects.extend(stripped);
    Ok(conversion)
}

/// In Velero a pod's annotation hook replaces every Restore hook of its kind (docs/behaviour.md
/// §3.1); converted, both would be hook objects, and both would run. Where a workload's
/// annotation hook and a Restore entry's hook of the same kind can meet in a pod, neither can be
/// converted exactly: the user has to say which the pods get.
fn precedence_conflicts(
    workloads: &[workload::Workload],
    restores: &[restore::Restore],
    workload_outcomes: &mut [Outcome],
    restore_outcomes: &mut [Outcome],
) {
    for (w, wo) in workloads.iter().zip(workload_outcomes.iter_mut()) {
        for (r, ro) in restores.iter().zip(restore_outcomes.iter_mut()) {
            for (kind, annotation) in [
                (
                    HookKind::Init,
                    crate::hooks::annotations::INIT_CONTAINER_IMAGE,
                ),
                (HookKind::Exec, crate::hooks::annotations::POST_COMMAND),
            ] {
                if !w.has_annotation_hook(kind) {
                    continue;
                }
                for entry in r.entries_meeting(kind, w.namespace_for_matching(), w.pod_labels()) {
                    let what = kind.name();
                    wo.errors.push(format!(
                        "its pods also match {}'s {entry}, whose {what} hooks Velero never runs in \
                         them: a pod's {annotation} annotation replaces a Restore's {what} hooks. \
                         Converted, both would run. Make that entry's labelSelector or namespaces \
                         leave these pods out (Velero never ran it there), or remove the \
                         annotation; then convert again",
                        r.display_name()
                    ));
                    ro.errors.push(format!(
                        "{entry} selects the pods of {}, whose {annotation} annotation replaces \
                         the entry's {what} hooks in Velero. Converted, both would run. Make the \
                         entry's labelSelector or namespaces leave those pods out (Velero never \
                         ran it there), or remove the annotation; then convert again",
                        w.display_name()
                    ));
                }
            }
        }
    }
}

/// Init or exec: each is decided on its own (docs/behaviour.md §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HookKind {
    Init,
    Exec,
}

impl HookKind {
    fn name(self) -> &'static str {
        match self {
            HookKind::Init => "init",
            HookKind::Exec => "exec",
        }
    }
}

/// Every written object goes through the product's own compiler (what the webhook and `inject`
/// run), and no two written objects may share a kind, namespace and name.
fn self_check(outcomes: &mut [Outcome]) {
    let mut seen: BTreeMap<(&'static str, Option<String>, String), String> = BTreeMap::new();
    let mut clashes: Vec<(usize, String)> = Vec::new();
    for (i, outcome) in outcomes.iter_mut().enumerate() {
        let mut problems = BTreeSet::new();
        for hook in &outcome.hooks {
            if let Some(problem) = hook.compiled().first_problem() {
                problems.insert(format!(
                    "the converted object is not one restore-hooks accepts: {problem}"
                ));
            }
            let (kind, namespace, name) = hook.key();
            let key = (kind, namespace.map(str::to_string), name.to_string());
            match seen.get(&key) {
                Some(first) if *first != outcome.object => clashes.push((
                    i,
                    format!(
                        "its {kind} {}{name} would have the name of the one converted from {first}; \
                         rename one of the two sources, then convert again",
                        namespace.map(|n| format!("{n}/")).unwrap_or_default()
                    ),
                )),
                Some(_) => {}
                None => {
                    seen.insert(key, outcome.object.clone());
                }
            }
        }
        outcome.errors.extend(problems);
    }
    for (i, message) in clashes {
        outcomes[i].errors.push(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_core::CustomResourceExt;

    /// The bounds `convert` checks are the generated CRD schemas' own.
    #[test]
    fn bounds_are_the_crd_schema_s() {
        let crd = serde_json::to_value(RestoreHook::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let post = &spec["properties"]["postHooks"];
        let exec = &post["items"]["properties"]["exec"]["properties"];
        let init = &post["items"]["properties"]["init"]["properties"]["initContainers"];
        let selector = &spec["properties"]["labelSelector"]["properties"];
        let bounds = [
            (&post["maxItems"], MAX_POST_HOOKS),
            (&init["maxItems"], MAX_INIT_CONTAINERS),
            (
                &init["items"]["properties"]["image"]["maxLength"],
                MAX_IMAGE_BYTES,
            ),
            (&exec["command"]["maxItems"], MAX_COMMAND_ARGS),
            (
                &exec["command"]["items"]["maxLength"],
                MAX_COMMAND_ARG_BYTES,
            ),
            (&spec["properties"]["restores"]["maxItems"], MAX_RESTORES),
            (
                &selector["matchExpressions"]["items"]["properties"]["values"]["maxItems"],
                MAX_SELECTOR_VALUES,
            ),
        ];
        for (schema, bound) in bounds {
            assert_eq!(schema.as_u64(), Some(bound as u64), "{spec:#}");
        }
    }
}
