//! Velero Restores' `spec.hooks` (docs/behaviour.md §2.4) as hook objects: a RestoreHook per
//! entry and namespace when every entry names its namespaces, else a ClusterRestoreHook per entry
//! selecting the same namespaces by their `kubernetes.io/metadata.name` label. One kind for all
//! of a Restore's entries keeps Velero's order of its hooks (entries in spec order, §3.2):
//! ClusterRestoreHooks come before RestoreHooks, and objects of a kind by name, which the
//! zero-padded entry index in each name preserves.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::Value;

use super::text::{escape_expansion, escape_parameter_references, object_name};
use super::workload::{check_command, check_image};
use super::{
    Document, HookKind, HookObject, MAX_INIT_CONTAINERS, MAX_POST_HOOKS, MAX_SELECTOR_VALUES,
    Options, Outcome, hook_metadata,
};
use crate::hooks::compiled::{
    ExecFields, applies_to_pods, exec_template, is_dns_label, spec_init_container,
};
use crate::hooks::patterns::IncludesExcludes;
use crate::hooks::selector::Selector;
use crate::hooks::types::{
    ClusterRestoreHook, ClusterRestoreHookSpec, ExecRestoreHook, InitRestoreHook, Labels,
    RestoreHook, RestoreHookSpec, RestoreResourceHook, RestoreResourceHookSpec, VeleroRestore,
};

/// The label the API server puts on every namespace, with its name (Kubernetes 1.22 and later).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A Velero Restore of the input.
#[derive(Debug)]
pub(super) struct Restore {
    display: String,
    value: yaml_serde::Value,
    restore: Result<VeleroRestore, String>,
    /// `status.phase`: a Restore that has run is no template for the next one.
    phase: Option<String>,
    /// Per entry, what [`Restore::entries_meeting`] asks (`None` when its filter is invalid).
    filters: Vec<Option<(IncludesExcludes, Selector)>>,
}

/// Which namespaces an entry applies in, as hook objects can say it.
#[derive(Debug)]
enum Scope {
    /// These namespaces (plain names, exclusions already applied).
    Names(Vec<String>),
    /// Every namespace but these.
    AllBut(Vec<String>),
}

impl Restore {
    /// The Restore `json` is, or `None` for any other kind.
    pub(super) fn read(document: &Document, json: &Value) -> Option<Self> {
        let text = |p: &str| json.pointer(p).and_then(Value::as_str);
        if (text("/apiVersion")?, text("/kind")?) != ("velero.io/v1", "Restore") {
            return None;
        }
        let name = text("/metadata/name")
            .or(text("/metadata/generateName"))
            .unwrap_or_default();
        let display = format!(
            "Restore {}{name} ({})",
            text("/metadata/namespace")
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            document.origin
        );
        let restore: Result<VeleroRestore, String> =
            serde_json::from_value(json.clone()).map_err(|e| e.to_string());
        let filters = restore
            .as_ref()
            .map(|r| {
                entries(r)
                    .iter()
                    .map(|e| {
                        let ie = IncludesExcludes::compile(
                            &e.included_namespaces,
                            &e.excluded_namespaces,
                        )
                        .ok()?;
                        let selector = Selector::compile(e.label_selector.as_ref()).ok()?;
                        applies_to_pods(e).then_some((ie, selector))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Restore {
            display,
            value: document.value.clone(),
            restore,
            phase: text("/status/phase")
                .filter(|p| !p.is_empty())
                .map(str::to_string),
            filters,
        })
    }

    pub(super) fn display_name(&self) -> &str {
        &self.display
    }

    /// The entries (`spec.hooks.resources[i] "name"`) with hooks of `kind` that apply to pods
    /// with `labels` in `namespace`.
    pub(super) fn entries_meeting(
        &self,
        kind: HookKind,
        namespace: &str,
        labels: &Labels,
    ) -> Vec<String> {
        let Ok(restore) = &self.restore else {
            return Vec::new();
        };
        entries(restore)
            .iter()
            .zip(&self.filters)
            .enumerate()
            .filter(|(_, (entry, filter))| {
                let has = entry.post_hooks.iter().any(|p| match kind {
                    HookKind::Init => p
                        .init
                        .as_ref()
                        .is_some_and(|i| !i.init_containers.is_empty()),
                    HookKind::Exec => p.exec.is_some(),
                });
                has && filter.as_ref().is_some_and(|(ie, selector)| {
                    ie.should_include(namespace) && selector.matches(labels)
                })
            })
            .map(|(i, (entry, _))| format!("spec.hooks.resources[{i}] {:?}", entry.name))
            .collect()
    }

    /// Converts this Restore's entries (see the module documentation).
    pub(super) fn convert(&self, options: &Options) -> Outcome {
        let mut out = Outcome {
            object: self.display.clone(),
            ..Outcome::default()
        };
        let restore = match &self.restore {
            Ok(r) => r,
            Err(e) => {
                out.errors
                    .push(format!("cannot be read as a Velero Restore: {e}"));
                return out;
            }
        };
        let resources = entries(restore);
        if resources.is_empty() {
            return out;
        }
        let Some(stem) = restore
            .metadata
            .name
            .as_deref()
            .or(restore.metadata.generate_name.as_deref())
            .filter(|n| !n.is_empty())
        else {
            out.errors.push(
                "has no metadata.name: name it (its hook objects are named after it), then \
                 convert again"
                    .to_string(),
            );
            return out;
        };
        let restores = match (&options.restores, &restore.metadata.name) {
            (Some(patterns), _) => patterns.clone(),
            (None, Some(name)) if !name.is_empty() => vec![name.clone()],
            (None, _) => {
                out.errors.push(
                    "its name is chosen by the API server (generateName), and its hooks are that \
                     restore's only: pass --restores with the names (globs) of the restores they \
                     are for, then convert again"
                        .to_string(),
                );
                return out;
            }
        };
        if let (Some(phase), None) = (&self.phase, &options.restores) {
            out.notes.push(format!(
                "this Restore has run already (phase {phase}); its hook objects apply to a \
                 restore of this very name ({stem}) only, as its hooks did: pass --restores with \
                 the names (globs) of the restores they are for"
            ));
        }

        let width = (resources.len() - 1).to_string().len();
        let mut converted = Vec::new();
        for (i, entry) in resources.iter().enumerate() {
            let at = format!("spec.hooks.resources[{i}] {:?}", entry.name);
            let errors_before = out.errors.len();
            let scope = self.scope(entry, &at, &mut out);
            if let Err(e) = Selector::compile(entry.label_selector.as_ref()) {
                out.errors.push(format!(
                    "{at} labelSelector: {e}; Velero fails validation of such a Restore: fix \
                     it, then convert again"
                ));
            }
            let post_hooks: Vec<RestoreResourceHook> = entry
                .post_hooks
                .iter()
                .enumerate()
                .filter_map(|(j, p)| post_hook(p, &format!("{at} postHooks[{j}]"), &mut out))
                .collect();
            if post_hooks.len() > MAX_POST_HOOKS {
                out.errors.push(format!(
                    "{at}: {} postHooks; a hook object holds at most {MAX_POST_HOOKS}: split the \
                     entry in two (same selection), then convert again",
                    post_hooks.len()
                ));
            }
            if out.errors.len() > errors_before {
                continue;
            }
            let Some(scope) = scope else { continue };
            if post_hooks.is_empty() {
                out.notes
                    .push(format!("{at} has no hooks: nothing to write for it"));
                continue;
            }
            if matches!(&scope, Scope::Names(n) if n.is_empty()) {
                out.notes.push(format!(
                    "{at} applies in no namespace (its exclusions cover every name it \
                     includes): nothing to write for it"
                ));
                continue;
            }
            let index = format!("{i:0width$}");
            converted.push((
                object_name(&["velero-restore", stem, &index, &entry.name]),
                at,
                entry,
                scope,
                post_hooks,
            ));
        }
        if !out.errors.is_empty() {
            return out;
        }
        let cluster_wide = converted
            .iter()
            .any(|(_, _, _, scope, _)| matches!(scope, Scope::AllBut(_)));
        let from = |at: &str| {
            format!(
                "Restore {}{stem}: {at}",
                restore
                    .metadata
                    .namespace
                    .as_deref()
                    .map(|n| format!("{n}/"))
                    .unwrap_or_default()
            )
        };
        for (name, at, entry, scope, post_hooks) in converted {
            if !cluster_wide {
                let Scope::Names(namespaces) = scope else {
                    unreachable!("every entry names its namespaces")
                };
                for namespace in namespaces {
                    out.hooks.push(HookObject::Namespaced(RestoreHook {
                        metadata: hook_metadata(name.clone(), Some(namespace), &from(&at)),
                        spec: RestoreHookSpec {
                            restores: Some(restores.clone()),
                            label_selector: entry.label_selector.clone(),
                            post_hooks: post_hooks.clone(),
                            pod_annotation_hooks: None,
                        },
                        status: None,
                    }));
                }
                continue;
            }
            let names = |operator: &str, values: Vec<String>| LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: NAMESPACE_NAME_LABEL.to_string(),
                    operator: operator.to_string(),
                    values: Some(values),
                }]),
            };
            let namespace_selector = match scope {
                Scope::Names(namespaces) => Some(names("In", namespaces)),
                Scope::AllBut(excluded) if excluded.is_empty() => None,
                Scope::AllBut(excluded) => Some(names("NotIn", excluded)),
            };
            if let Some(values) = namespace_selector
                .as_ref()
                .and_then(|s| s.match_expressions.as_ref())
                .and_then(|e| e[0].values.as_ref())
                .filter(|v| v.len() > MAX_SELECTOR_VALUES)
            {
                out.errors.push(format!(
                    "{at} names {} namespaces; a ClusterRestoreHook's namespaceSelector lists at \
                     most {MAX_SELECTOR_VALUES}: label those namespaces and select them by that \
                     label instead",
                    values.len()
                ));
                continue;
            }
            out.hooks.push(HookObject::Cluster(ClusterRestoreHook {
                metadata: hook_metadata(name, None, &from(&at)),
                spec: ClusterRestoreHookSpec {
                    namespace_selector,
                    restores: Some(restores.clone()),
                    label_selector: entry.label_selector.clone(),
                    post_hooks,
                    pod_annotation_hooks: None,
                },
                status: None,
            }));
        }
        if cluster_wide && !out.hooks.is_empty() {
            out.notes.push(format!(
                "written as ClusterRestoreHooks (an entry applies in every namespace but those it \
                 excludes, which only a ClusterRestoreHook can say; the others follow so that \
                 the order of the entries stays Velero's); they select namespaces by the \
                 {NAMESPACE_NAME_LABEL} label the API server gives every namespace"
            ));
        }
        if options.strip_velero_hooks && out.errors.is_empty() {
            let mut value = self.value.clone();
            if let Some(spec) = value
                .get_mut("spec")
                .and_then(yaml_serde::Value::as_mapping_mut)
            {
                spec.remove("hooks");
            }
            out.stripped = Some(value);
        }
        out
    }

    /// The namespaces of an entry as hook objects can select them, or `None` with an error.
    fn scope(&self, entry: &RestoreResourceHookSpec, at: &str, out: &mut Outcome) -> Option<Scope> {
        if !applies_to_pods(entry) {
            out.errors.push(format!(
                "{at}: includedResources {:?} / excludedResources {:?} leave pods out. Velero \
                 ignores both fields and runs the entry's hooks in pods all the same; \
                 restore-hooks applies the entry to no pod (docs/behaviour.md §11). Remove the \
                 fields to keep Velero's behaviour, or the entry to keep restore-hooks'; then \
                 convert again",
                entry.included_resources, entry.excluded_resources
            ));
            return None;
        }
        if !entry.included_resources.is_empty() || !entry.excluded_resources.is_empty() {
            out.notes.push(format!(
                "{at}: includedResources / excludedResources are left out: hook objects apply to \
                 pods only, as this entry does"
            ));
        }
        let namespaces =
            match IncludesExcludes::compile(&entry.included_namespaces, &entry.excluded_namespaces)
            {
                Ok(ie) => ie,
                Err(e) => {
                    out.errors.push(format!(
                    "{at} includedNamespaces/excludedNamespaces: {e}: fix it, then convert again"
                ));
                    return None;
                }
            };
        let is_glob = |p: &str| p.contains(['*', '?', '[', ']', '{', '}', '\\']);
        let not_expressible = |field: &str, pattern: &str| {
            format!(
                "{at} {field}: {pattern:?} is a pattern, and hook objects cannot select \
                 namespaces by pattern (a RestoreHook applies in its own namespace, a \
                 ClusterRestoreHook selects namespaces by label). List the namespaces by name, \
                 or label them and write a ClusterRestoreHook with that namespaceSelector; then \
                 convert again"
            )
        };
        let includes = &entry.included_namespaces;
        if includes.is_empty() || includes.iter().any(|p| p == "*") {
            let mut excluded = Vec::new();
            for pattern in &entry.excluded_namespaces {
                if pattern == "*" {
                    return Some(Scope::Names(Vec::new()));
                } else if is_dns_label(pattern) {
                    excluded.push(pattern.clone());
                } else if is_glob(pattern) {
                    out.errors
                        .push(not_expressible("excludedNamespaces", pattern));
                    return None;
                }
                // Anything else is no namespace name, and excludes nothing.
            }
            excluded.sort();
            excluded.dedup();
            return Some(Scope::AllBut(excluded));
        }
        let mut names = Vec::new();
        for pattern in includes {
            if is_dns_label(pattern) {
                if namespaces.should_include(pattern) {
                    names.push(pattern.clone());
                }
            } else if is_glob(pattern) {
                out.errors
                    .push(not_expressible("includedNamespaces", pattern));
                return None;
            } else {
                out.notes.push(format!(
                    "{at} includedNamespaces: {pattern:?} is no namespace name and matches none; \
                     left out"
                ));
            }
        }
        names.sort();
        names.dedup();
        Some(Scope::Names(names))
    }
}

/// `spec.hooks.resources`, empty when absent.
fn entries(restore: &VeleroRestore) -> &[RestoreResourceHookSpec] {
    restore
        .spec
        .hooks
        .as_ref()
        .map(|h| h.resources.as_slice())
        .unwrap_or_default()
}

/// One `postHooks[]` element as a hook object's: the fields Velero has, their values checked as
/// restore-hooks checks them, commands written so that they run as written.
fn post_hook(
    post: &RestoreResourceHook,
    at: &str,
    out: &mut Outcome,
) -> Option<RestoreResourceHook> {
    let init = post.init.as_ref().and_then(|init| {
        if init.timeout.is_some() {
            out.notes.push(format!(
                "{at}.init.timeout is left out: neither Velero nor restore-hooks uses it"
            ));
        }
        if init.init_containers.len() > MAX_INIT_CONTAINERS {
            out.errors.push(format!(
                "{at}.init: {} initContainers; a hook object's init hook holds at most \
                 {MAX_INIT_CONTAINERS}: split them over two postHooks entries, then convert again",
                init.init_containers.len()
            ));
            return None;
        }
        let mut containers = Vec::new();
        for (k, value) in init.init_containers.iter().enumerate() {
            let checked = spec_init_container(value, k)
                .and_then(|c| check_image(&c.definition.image).map(|()| c));
            let container = match checked {
                Ok(c) => c,
                Err(e) => {
                    out.errors
                        .push(format!("{at}.init: {e}: fix it, then convert again"));
                    return None;
                }
            };
            if container.definition.command.is_empty() {
                out.notes.push(format!(
                    "{at}.init initContainers[{k}] ({:?}) has no command: Velero (1.10 and later) \
                     fails validation of such a Restore, where restore-hooks runs the image's \
                     entrypoint; so does the converted hook",
                    container.name
                ));
            }
            if let Err(e) = check_command(
                &format!("{at}.init initContainers[{k}].command"),
                &container.definition.command,
            ) {
                out.errors.push(e);
                return None;
            }
            let (value, escaped) = escape_init_container(value);
            if escaped {
                out.notes.push(format!(
                    "{at}.init initContainers[{k}] ({:?}): each $(NAME) of a restore parameter \
                     its env does not define is written $$(NAME), so that it stays as written, as \
                     in Velero (hook objects' init containers get these parameters, \
                     docs/behaviour.md §2.8)",
                    container.name
                ));
            }
            containers.push(value);
        }
        Some(InitRestoreHook {
            init_containers: containers,
            timeout: None,
        })
    });
    let exec = post.exec.as_ref().and_then(|exec| {
        let extra: Vec<&str> = [
            ("runOn", exec.run_on.is_some()),
            ("after", !exec.after.is_empty()),
            ("retry", exec.retry.is_some()),
            ("image", exec.image.is_some()),
            ("volumeMounts", !exec.volume_mounts.is_empty()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect();
        if !extra.is_empty() {
            out.notes.push(format!(
                "{at}.exec: {} left out: not fields of Velero's Restore (its API server drops \
                 them), and restore-hooks ignores them there; add them to the converted hook \
                 object if you want them",
                extra.join(", ")
            ));
        }
        let velero_only = ExecFields {
            container: exec.container.as_deref(),
            command: exec.command.clone(),
            on_error: exec.on_error.as_deref(),
            exec_timeout: exec.exec_timeout.as_deref(),
            wait_timeout: exec.wait_timeout.as_deref(),
            wait_for_ready: exec.wait_for_ready.unwrap_or(false),
            ..ExecFields::default()
        };
        if let Err(e) = exec_template(velero_only) {
            out.errors.push(format!(
                "{at}.exec {}: {}: fix it, then convert again",
                e.field.spec_name(),
                e.message
            ));
            return None;
        }
        if let Err(e) = check_command(&format!("{at}.exec.command"), &exec.command) {
            out.errors.push(e);
            return None;
        }
        let command: Vec<String> = exec
            .command
            .iter()
            .map(|c| escape_expansion(c).into_owned())
            .collect();
        if command != exec.command {
            out.notes.push(format!(
                "{at}.exec.command: each `$` before `$` or `(` is written `$$`, so that the \
                 command runs exactly as written, as in Velero (hook objects' exec commands \
                 expand $(NAME) parameters, docs/behaviour.md §2.8)"
            ));
        }
        Some(ExecRestoreHook {
            container: exec.container.clone().filter(|c| !c.is_empty()),
            command,
            on_error: exec.on_error.clone().filter(|v| !v.is_empty()),
            exec_timeout: exec.exec_timeout.clone().filter(|v| !v.is_empty()),
            wait_timeout: exec.wait_timeout.clone().filter(|v| !v.is_empty()),
            wait_for_ready: exec.wait_for_ready,
            ..ExecRestoreHook::default()
        })
    });
    if post.init.is_none() && post.exec.is_none() {
        out.notes.push(format!(
            "{at} has neither init nor exec, so no hook: left out (the positions of the entry's \
             later hooks move up by one)"
        ));
    }
    (init.is_some() || exec.is_some()).then_some(RestoreResourceHook { init, exec })
}

/// An init container with each restore parameter its env does not define escaped in its
/// `command`, `args` and `env` values (see [`escape_parameter_references`]); whether anything
/// changed.
fn escape_init_container(container: &Value) -> (Value, bool) {
    let defined: Vec<String> = container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    let is_defined = |name: &str| defined.iter().any(|d| d == name);
    let mut out = container.clone();
    let mut changed = false;
    let mut escape = |v: &mut Value| {
        if let Some(s) = v.as_str() {
            let escaped = escape_parameter_references(s, &is_defined);
            if escaped != s {
                *v = Value::String(escaped.into_owned());
                changed = true;
            }
        }
    };
    for field in ["command", "args"] {
        if let Some(items) = out.get_mut(field).and_then(Value::as_array_mut) {
            items.iter_mut().for_each(&mut escape);
        }
    }
    if let Some(env) = out.get_mut("env").and_then(Value::as_array_mut) {
        for entry in env {
            if let Some(v) = entry.get_mut("value") {
                escape(v);
            }
        }
    }
    (out, changed)
}
