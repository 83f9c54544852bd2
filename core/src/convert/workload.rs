//! Workloads whose pod template carries Velero's restore-hook annotations (docs/behaviour.md §2.1):
//! one RestoreHook each, in the workload's namespace, selecting its pods.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::text::{escape_expansion, escape_parameter_references, object_name};
use super::{
    Document, HookKind, HookObject, MAX_COMMAND_ARG_BYTES, MAX_COMMAND_ARGS, MAX_IMAGE_BYTES,
    Options, Outcome, hook_metadata,
};
use crate::hooks::annotations as ann;
use crate::hooks::command::parse_command;
use crate::hooks::compiled::{ExecFields, exec_template, is_dns_label};
use crate::hooks::problem::ExecField;
use crate::hooks::selector::Selector;
use crate::hooks::targets::ExecTargets;
use crate::hooks::types::{
    ExecRestoreHook, InitRestoreHook, Labels, RestoreHook, RestoreHookSpec, RestoreResourceHook,
};

/// The annotations Velero reads, which a converted workload is written back without.
const RESTORE_KEYS: [&str; 9] = [
    ann::INIT_CONTAINER_IMAGE,
    ann::INIT_CONTAINER_NAME,
    ann::INIT_COMMAND,
    ann::POST_COMMAND,
    ann::POST_CONTAINER,
    ann::POST_ON_ERROR,
    ann::POST_EXEC_TIMEOUT,
    ann::POST_WAIT_TIMEOUT,
    ann::POST_WAIT_FOR_READY,
];
const INIT_PREFIX: &str = "init.hook.restore.velero.io/";
const POST_PREFIX: &str = "post.hook.restore.velero.io/";
/// Velero has no such hooks; people write these keys expecting a hook before the restore.
const PRE_RESTORE_PREFIX: &str = "pre.hook.restore.velero.io/";
/// Velero's backup hooks: run at backup, not at restore.
const BACKUP_PREFIXES: [&str; 2] = ["pre.hook.backup.velero.io/", "post.hook.backup.velero.io/"];

/// Labels that describe one restore or one pod, not the workload: never part of a selector.
fn is_per_restore_label(key: &str) -> bool {
    matches!(
        key,
        "velero.io/restore-name"
            | "velero.io/backup-name"
            | "controller-uid"
            | "batch.kubernetes.io/controller-uid"
    ) || key.starts_with("restore-hooks.dev/")
}

/// The kinds whose pod template `convert` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Pod,
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
    Job,
    CronJob,
}

impl Kind {
    fn of(api_version: &str, kind: &str) -> Option<Self> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        Some(match (group, kind) {
            ("", "Pod") => Kind::Pod,
            ("apps" | "extensions", "Deployment") => Kind::Deployment,
            ("apps", "StatefulSet") => Kind::StatefulSet,
            ("apps" | "extensions", "DaemonSet") => Kind::DaemonSet,
            ("apps" | "extensions", "ReplicaSet") => Kind::ReplicaSet,
            ("batch", "Job") => Kind::Job,
            ("batch", "CronJob") => Kind::CronJob,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::Job => "Job",
            Kind::CronJob => "CronJob",
        }
    }

    /// The path of the pod template (the pod itself for a Pod).
    fn template(self) -> &'static [&'static str] {
        match self {
            Kind::Pod => &[],
            Kind::CronJob => &["spec", "jobTemplate", "spec", "template"],
            _ => &["spec", "template"],
        }
    }

    /// The template's path for messages, with a trailing dot (empty for a Pod).
    fn template_field(self) -> String {
        self.template()
            .iter()
            .map(|s| format!("{s}."))
            .collect::<String>()
    }

    /// Whether its pods are selected by `spec.selector` (the controller's own selector).
    fn has_selector(self) -> bool {
        matches!(
            self,
            Kind::Deployment | Kind::StatefulSet | Kind::DaemonSet | Kind::ReplicaSet
        )
    }
}

/// What `convert` reads of a workload's pod template.
#[derive(Debug, Default)]
struct Shape {
    /// The template's annotations: where Velero reads hooks (from the pods made from it).
    annotations: Labels,
    /// The workload's own annotations (not a Pod's): Velero never sees them.
    own_annotations: Labels,
    /// The template's labels.
    labels: Labels,
    /// `spec.selector` of the kinds that have one (a Job's only with `manualSelector`).
    selector: Option<LabelSelector>,
    /// The template's containers, for the exec hook's target.
    targets: ExecTargets,
    /// The controller named in `ownerReferences` (kind, name), if any.
    controller: Option<(String, String)>,
}

/// A workload of the input.
#[derive(Debug)]
pub(super) struct Workload {
    kind: Kind,
    name: String,
    /// As written, or `--namespace`.
    namespace: Option<String>,
    display: String,
    value: yaml_serde::Value,
    shape: Result<Shape, String>,
}

impl Workload {
    /// The workload `json` is, or `None` for any other kind.
    pub(super) fn read(document: &Document, json: &Value, options: &Options) -> Option<Self> {
        let text = |p: &str| json.pointer(p).and_then(Value::as_str);
        let kind = Kind::of(text("/apiVersion")?, text("/kind")?)?;
        let name = text("/metadata/name").unwrap_or_default().to_string();
        let namespace = text("/metadata/namespace")
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .or_else(|| options.namespace.clone());
        let display = format!(
            "{} {}{name} ({})",
            kind.name(),
            namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            document.origin
        );
        Some(Workload {
            kind,
            name,
            namespace,
            display,
            value: document.value.clone(),
            shape: Shape::read(kind, json),
        })
    }

    pub(super) fn display_name(&self) -> &str {
        &self.display
    }

    /// The namespace its pods are in when its manifest names none: kubectl's default.
    pub(super) fn namespace_for_matching(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }

    /// Its pods' labels, as far as the manifest tells (the template's labels).
    pub(super) fn pod_labels(&self) -> &Labels {
        static NONE: Labels = Labels::new();
        self.shape.as_ref().map_or(&NONE, |s| &s.labels)
    }

    /// Whether its pods carry an annotation hook of this kind (valid or not: Velero gives it
    /// precedence either way).
    pub(super) fn has_annotation_hook(&self, kind: HookKind) -> bool {
        let Ok(shape) = &self.shape else { return false };
        if shape.controller.is_some() {
            return false;
        }
        let key = match kind {
            HookKind::Init => ann::INIT_CONTAINER_IMAGE,
            HookKind::Exec => ann::POST_COMMAND,
        };
        ann::get(Some(&shape.annotations), key).is_some()
    }

    fn is_controlled(&self) -> bool {
        self.shape.as_ref().is_ok_and(|s| s.controller.is_some())
    }

    /// Converts this workload (see the module documentation); `all` is every workload of the
    /// input, this one included, for the checks across workloads.
    pub(super) fn convert(&self, all: &[Workload], options: &Options) -> Outcome {
        let mut out = Outcome {
            object: self.display.clone(),
            ..Outcome::default()
        };
        let shape = match &self.shape {
            Ok(shape) => shape,
            Err(reason) => {
                out.errors.push(format!("cannot be read: {reason}"));
                return out;
            }
        };
        let template = self.kind.template_field();
        self.note_other_keys(shape, &mut out);
        let image = ann::get(Some(&shape.annotations), ann::INIT_CONTAINER_IMAGE);
        let command = ann::get(Some(&shape.annotations), ann::POST_COMMAND);
        if image.is_none() && command.is_none() {
            return out;
        }
        if let Some((kind, name)) = &shape.controller {
            self.controlled(kind, name, all, &mut out);
            return out;
        }
        let selector = match self.selector(shape) {
            Ok(selector) => selector,
            Err(e) => {
                out.errors.push(e);
                return out;
            }
        };
        let mut post_hooks = Vec::new();
        if let Some(image) = image {
            match init_hook(&shape.annotations, image, &mut out.notes) {
                Ok(init) => post_hooks.push(RestoreResourceHook {
                    init: Some(init),
                    exec: None,
                }),
                Err(e) => out.errors.push(e),
            }
        }
        if let Some(command) = command {
            match exec_hook(&shape.annotations, command, &shape.targets, &mut out.notes) {
                Ok(exec) => post_hooks.push(RestoreResourceHook {
                    init: None,
                    exec: Some(exec),
                }),
                Err(e) => out.errors.push(e),
            }
        }
        self.overlaps(&selector, all, &mut out);
        if !out.errors.is_empty() {
            return out;
        }
        let name = object_name(&["velero", &self.kind.name().to_ascii_lowercase(), &self.name]);
        let from = format!(
            "{} {}{}: {template}metadata.annotations",
            self.kind.name(),
            self.namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            self.name
        );
        out.hooks.push(HookObject::Namespaced(RestoreHook {
            metadata: hook_metadata(name, self.namespace.clone(), &from),
            spec: RestoreHookSpec {
                restores: options.restores.clone(),
                label_selector: Some(selector),
                post_hooks,
                pod_annotation_hooks: None,
            },
            status: None,
        }));
        if options.strip_velero_hooks {
            out.stripped = Some(self.stripped());
        }
        out
    }

    /// Notes on annotations that are not hooks Velero runs at restore: nothing is converted for
    /// them and they stay as they are.
    fn note_other_keys(&self, shape: &Shape, out: &mut Outcome) {
        let keys = |map: &Labels, pick: &dyn Fn(&str) -> bool| -> Vec<String> {
            map.keys().filter(|k| pick(k)).cloned().collect()
        };
        let listed = |keys: &[String]| keys.join(", ");
        let is_restore_key = |k: &str| k.starts_with(INIT_PREFIX) || k.starts_with(POST_PREFIX);
        let template = self.kind.template_field();
        let own = keys(&shape.own_annotations, &|k| {
            is_restore_key(k) || k.starts_with(PRE_RESTORE_PREFIX)
        });
        if !own.is_empty() {
            out.notes.push(format!(
                "{} in the {kind}'s own metadata.annotations: a {kind}'s annotations never reach \
                 its pods, where Velero reads hooks, so Velero ignores them; move them to \
                 {template}metadata.annotations to have them converted",
                listed(&own),
                kind = self.kind.name(),
            ));
        }
        let a = &shape.annotations;
        let unknown = keys(a, &|k| is_restore_key(k) && !RESTORE_KEYS.contains(&k));
        if !unknown.is_empty() {
            out.notes.push(format!(
                "{}: not annotations Velero reads (it reads {}), so no hook; left as they are",
                listed(&unknown),
                RESTORE_KEYS.join(", ")
            ));
        }
        let pre = keys(a, &|k| k.starts_with(PRE_RESTORE_PREFIX));
        if !pre.is_empty() {
            out.notes.push(format!(
                "{}: Velero has no pre-restore hooks and ignores these, so there is nothing to \
                 convert; left as they are. What must run before the app starts is an init hook \
                 ({INIT_PREFIX}*)",
                listed(&pre)
            ));
        }
        let backup = keys(a, &|k| BACKUP_PREFIXES.iter().any(|p| k.starts_with(p)));
        if !backup.is_empty() {
            out.notes.push(format!(
                "{}: backup hooks, which Velero runs when it backs the pod up; restore-hooks runs \
                 restore hooks only, so they are left as they are and Velero keeps running them",
                listed(&backup)
            ));
        }
        let inert = |enabling: &str, prefix: &str| {
            let present = keys(a, &|k| k.starts_with(prefix) && RESTORE_KEYS.contains(&k));
            (!present.is_empty() && ann::get(Some(a), enabling).is_none()).then(|| {
                format!(
                    "{} without a non-empty {enabling}: Velero runs no such hook, so there is \
                     nothing to convert",
                    listed(&present)
                )
            })
        };
        out.notes
            .extend(inert(ann::INIT_CONTAINER_IMAGE, INIT_PREFIX));
        out.notes.extend(inert(ann::POST_COMMAND, POST_PREFIX));
    }

    /// A workload another one controls (a Deployment's ReplicaSet, its pods, a CronJob's Job):
    /// its template is its controller's, which is what gets converted.
    fn controlled(&self, kind: &str, name: &str, all: &[Workload], out: &mut Outcome) {
        let covering = all.iter().find(|w| {
            !w.is_controlled()
                && w.namespace_for_matching() == self.namespace_for_matching()
                && w.shape.as_ref().is_ok_and(|s| {
                    w.selector(s)
                        .is_ok_and(|sel| selects(&sel, self.pod_labels()))
                })
        });
        match covering {
            Some(w) => out.notes.push(format!(
                "controlled by {kind} {name}: its hooks come from the pod template of {}, which \
                 is converted instead",
                w.display_name()
            )),
            None => out.errors.push(format!(
                "controlled by {kind} {name}, whose pod template it is made from: convert the \
                 workload that owns that template instead (for a ReplicaSet of a Deployment, the \
                 Deployment; for a Job of a CronJob, the CronJob)"
            )),
        }
    }

    /// The selector of its pods: the controller's own selector where it has one, else the
    /// template's labels, without the labels that name a restore or one object.
    fn selector(&self, shape: &Shape) -> Result<LabelSelector, String> {
        let template = self.kind.template_field();
        if let Some(selector) = &shape.selector {
            Selector::compile(Some(selector)).map_err(|e| format!("spec.selector: {e}"))?;
            let set = |l: Option<usize>| l.is_some_and(|n| n > 0);
            if set(selector.match_labels.as_ref().map(BTreeMap::len))
                || set(selector.match_expressions.as_ref().map(Vec::len))
            {
                return Ok(selector.clone());
            }
        }
        let labels: BTreeMap<String, String> = shape
            .labels
            .iter()
            .filter(|(k, _)| !is_per_restore_label(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if labels.is_empty() {
            return Err(format!(
                "its pods cannot be told apart by their labels ({template}metadata.labels names \
                 none that is not per restore), and a RestoreHook selects pods by label: give \
                 the pod template a label of its own, then convert again"
            ));
        }
        let selector = LabelSelector {
            match_labels: Some(labels),
            match_expressions: None,
        };
        Selector::compile(Some(&selector))
            .map_err(|e| format!("{template}metadata.labels: {e}"))?;
        Ok(selector)
    }

    /// A RestoreHook selects by label, an annotation travels with its pods: the selector must
    /// not reach the pods of any other workload given.
    fn overlaps(&self, selector: &LabelSelector, all: &[Workload], out: &mut Outcome) {
        for other in all {
            if std::ptr::eq(other, self)
                || other.is_controlled()
                || other.shape.is_err()
                || other.namespace_for_matching() != self.namespace_for_matching()
                || !selects(selector, other.pod_labels())
            {
                continue;
            }
            out.errors.push(format!(
                "its pod selector {} also selects the pods of {} (by their template's labels): \
                 the RestoreHook would run these hooks in them too, which Velero never did. Give \
                 this pod template a label the other lacks (and, for a controller with \
                 spec.selector, select it), then convert again",
                serde_json::to_string(selector).unwrap_or_default(),
                other.display_name()
            ));
        }
    }

    /// The object without Velero's restore-hook annotations in its pod template.
    fn stripped(&self) -> yaml_serde::Value {
        let mut value = self.value.clone();
        let mut at = &mut value;
        for key in self.kind.template().iter().chain(&["metadata"]) {
            match at.get_mut(*key) {
                Some(next) => at = next,
                None => return value,
            }
        }
        let Some(metadata) = at.as_mapping_mut() else {
            return value;
        };
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(yaml_serde::Value::as_mapping_mut)
        {
            for key in RESTORE_KEYS {
                annotations.remove(key);
            }
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
        value
    }
}

fn selects(selector: &LabelSelector, labels: &Labels) -> bool {
    Selector::compile(Some(selector)).is_ok_and(|s| s.matches(labels))
}

impl Shape {
    fn read(kind: Kind, json: &Value) -> Result<Self, String> {
        let mut template = json;
        let mut path = String::new();
        for key in kind.template() {
            path.push_str(key);
            template = template
                .get(*key)
                .ok_or_else(|| format!("{path} is missing"))?;
            path.push('.');
        }
        let map = |v: Option<&Value>, field: &str| -> Result<Labels, String> {
            match v {
                None | Some(Value::Null) => Ok(Labels::new()),
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| format!("{field} is not a map of strings: {e}")),
            }
        };
        let annotations = map(
            template.pointer("/metadata/annotations"),
            &format!("{path}metadata.annotations"),
        )?;
        let labels = map(
            template.pointer("/metadata/labels"),
            &format!("{path}metadata.labels"),
        )?;
        let own_annotations = match kind {
            Kind::Pod => Labels::new(),
            _ => map(
                json.pointer("/metadata/annotations"),
                "metadata.annotations",
            )?,
        };
        let selector = match json.pointer("/spec/selector") {
            Some(s)
                if kind.has_selector()
                    || (kind == Kind::Job
                        && json.pointer("/spec/manualSelector") == Some(&json!(true))) =>
            {
                Some(
                    serde_json::from_value(s.clone())
                        .map_err(|e| format!("spec.selector is not a label selector: {e}"))?,
                )
            }
            _ => None,
        };
        let list = |field: &str| -> Result<Vec<Value>, String> {
            match template.pointer(&format!("/spec/{field}")) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) => Ok(a.clone()),
                Some(_) => Err(format!("{path}spec.{field} is not a list")),
            }
        };
        let (containers, init) = (list("containers")?, list("initContainers")?);
        let name = |c: &Value| c.get("name").and_then(Value::as_str).map(str::to_string);
        let app: Vec<String> = containers.iter().filter_map(name).collect();
        let init: Vec<(String, Option<String>)> = init
            .iter()
            .filter_map(|c| {
                Some((
                    name(c)?,
                    c.get("restartPolicy")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                ))
            })
            .collect();
        let targets = ExecTargets::new(
            app.iter().map(String::as_str),
            init.iter().map(|(n, p)| (n.as_str(), p.as_deref())),
        );
        let controller = json
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|r| r.get("controller") == Some(&json!(true)))
            .map(|r| {
                let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                (field("kind").to_string(), field("name").to_string())
            });
        Ok(Shape {
            annotations,
            own_annotations,
            labels,
            selector,
            targets,
            controller,
        })
    }
}

/// Why a value Velero tolerates is not converted: restore-hooks refuses it, under `own` too.
const VELERO_TOLERATES: &str = "Velero ignores such a value (and uses its default) where \
     restore-hooks treats the hook as invalid (docs/behaviour.md §11): fix or remove the \
     annotation, then convert again";
/// The same for a command starting with `[` that is not a JSON array.
const VELERO_RAW_COMMAND: &str = "Velero runs such a value as one program name, which cannot \
     exist, where restore-hooks treats the hook as invalid (docs/behaviour.md §11): fix the \
     annotation, then convert again";

/// The annotation init hook as a RestoreHook init hook: the same container restore-hooks
/// injects from the annotations (docs/behaviour.md §2.1).
fn init_hook(a: &Labels, image: &str, notes: &mut Vec<String>) -> Result<InitRestoreHook, String> {
    let name =
        ann::get(Some(a), ann::INIT_CONTAINER_NAME).unwrap_or(ann::DEFAULT_INIT_CONTAINER_NAME);
    if !is_dns_label(name) {
        return Err(format!(
            "{}: {name:?} is not a valid container name (a lowercase RFC 1123 label): fix the \
             annotation, then convert again",
            ann::INIT_CONTAINER_NAME
        ));
    }
    let command = parse_command(ann::get(Some(a), ann::INIT_COMMAND).unwrap_or(""))
        .map_err(|e| format!("{}: {e}; {VELERO_RAW_COMMAND}", ann::INIT_COMMAND))?;
    check_image(image)?;
    check_command(ann::INIT_COMMAND, &command)?;
    // The annotation container has no env: every parameter reference in it is undefined, and
    // must stay so.
    let escaped: Vec<String> = command
        .iter()
        .map(|c| escape_parameter_references(c, &|_| false).into_owned())
        .collect();
    if escaped != command {
        notes.push(format!(
            "{}: each $(NAME) of a restore parameter is written $$(NAME), so that it stays as \
             written, as in Velero (hook objects' init containers get these parameters, \
             docs/behaviour.md §2.8)",
            ann::INIT_COMMAND
        ));
    }
    let mut container = json!({"name": name, "image": image});
    if !escaped.is_empty() {
        container["command"] = json!(escaped);
    }
    Ok(InitRestoreHook {
        init_containers: vec![container],
        timeout: None,
    })
}

/// The annotation exec hook as a RestoreHook exec hook, its container named: the pod
/// template's first container when the annotation names none (docs/behaviour.md §2.1).
fn exec_hook(
    a: &Labels,
    command: &str,
    targets: &ExecTargets,
    notes: &mut Vec<String>,
) -> Result<ExecRestoreHook, String> {
    let command = parse_command(command)
        .map_err(|e| format!("{}: {e}; {VELERO_RAW_COMMAND}", ann::POST_COMMAND))?;
    let get = |key| ann::get(Some(a), key);
    let wait_for_ready = match get(ann::POST_WAIT_FOR_READY) {
        None => false,
        Some(v) => ann::parse_go_bool(v).ok_or_else(|| {
            format!(
                "{}: {v:?} is not a boolean (true or false); {VELERO_TOLERATES}",
                ann::POST_WAIT_FOR_READY
            )
        })?,
    };
    exec_template(ExecFields {
        container: get(ann::POST_CONTAINER),
        command: command.clone(),
        on_error: get(ann::POST_ON_ERROR),
        exec_timeout: get(ann::POST_EXEC_TIMEOUT),
        wait_timeout: get(ann::POST_WAIT_TIMEOUT),
        wait_for_ready,
        ..ExecFields::default()
    })
    .map_err(|e| {
        let why = match e.field {
            ExecField::Command => "fix the annotation, then convert again",
            _ => VELERO_TOLERATES,
        };
        format!("{}: {}; {why}", e.field.annotation(), e.message)
    })?;
    let container = match get(ann::POST_CONTAINER) {
        Some(name) => {
            targets.check(name).map_err(|e| {
                format!(
                    "{}: {e}; fix the annotation, then convert again",
                    ann::POST_CONTAINER
                )
            })?;
            name.to_string()
        }
        None => targets.first_app().map(str::to_string).ok_or_else(|| {
            "the pod template has no containers for the exec hook to run in".to_string()
        })?,
    };
    check_command(ann::POST_COMMAND, &command)?;
    let escaped: Vec<String> = command
        .iter()
        .map(|c| escape_expansion(c).into_owned())
        .collect();
    if escaped != command {
        notes.push(format!(
            "{}: each `$` before `$` or `(` is written `$$`, so that the command runs exactly as \
             written, as in Velero (hook objects' exec commands expand $(NAME) parameters, \
             docs/behaviour.md §2.8)",
            ann::POST_COMMAND
        ));
    }
    Ok(ExecRestoreHook {
        container: Some(container),
        command: escaped,
        on_error: get(ann::POST_ON_ERROR).map(str::to_string),
        exec_timeout: get(ann::POST_EXEC_TIMEOUT).map(str::to_string),
        wait_timeout: get(ann::POST_WAIT_TIMEOUT).map(str::to_string),
        wait_for_ready: wait_for_ready.then_some(true),
        ..ExecRestoreHook::default()
    })
}

/// The CRD's bounds on an init container's image.
pub(super) fn check_image(image: &str) -> Result<(), String> {
    if image.len() > MAX_IMAGE_BYTES {
        return Err(format!(
            "the image name is {} bytes long; a hook object's init container image has at most \
             {MAX_IMAGE_BYTES}",
            image.len()
        ));
    }
    Ok(())
}

/// The CRD's bounds on a command.
pub(super) fn check_command(field: &str, command: &[String]) -> Result<(), String> {
    if command.len() > MAX_COMMAND_ARGS {
        return Err(format!(
            "{field}: {} arguments; a hook object's command has at most {MAX_COMMAND_ARGS}: \
             move the script into the image or a ConfigMap",
            command.len()
        ));
    }
    if let Some(long) = command.iter().find(|c| c.len() > MAX_COMMAND_ARG_BYTES) {
        return Err(format!(
            "{field}: an argument of {} bytes; a hook object's command arguments have at most \
             {MAX_COMMAND_ARG_BYTES}: move the script into the image or a ConfigMap",
            long.len()
        ));
    }
    Ok(())
}
