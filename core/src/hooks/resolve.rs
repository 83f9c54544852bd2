//! Which hooks apply to a restored pod, in which order, and whether they are valid
//! (product.md §3, §4 "Invalid hook definitions", §8). Pure: every input is an argument.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use k8s_openapi::api::core::v1::Container;
use serde::Deserialize;
use serde_json::Value;

use super::annotations::{self as ann, ANNOTATION_HOOK_NAME, DEFAULT_INIT_CONTAINER_NAME};
use super::command::parse_command;
use super::duration::{DurationError, parse_go_duration};
use super::patterns::{IncludesExcludes, NamePattern};
use super::plan::{DEFAULT_EXEC_TIMEOUT_MS, OnError, PlannedHook};
use super::pod::AdmittedPod;
use super::scope::{RestoreScope, ScopeVia};
use super::selector::Selector;
use super::types::{ExecRestoreHook, Labels, RestoreHook, RestoreResourceHookSpec, VeleroRestore};
use crate::config::{EngineConfig, VeleroHooksMode};

/// The spec hook sources found for the pod's restore and namespace.
#[derive(Clone, Copy, Debug, Default)]
pub struct HookSources<'a> {
    /// The Velero `Restore` named after the restore, in the Velero namespace.
    pub velero_restore: Option<&'a VeleroRestore>,
    /// RestoreHooks of the pod's namespace, in any order.
    pub restore_hooks: &'a [&'a RestoreHook],
}

/// The outcome of resolution: valid hooks in order, and what was wrong with the others.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    pub scope: RestoreScope,
    pub init: Vec<InitHook>,
    pub exec: Vec<PlannedHook>,
    pub problems: Vec<Problem>,
}

impl Resolution {
    pub fn is_empty(&self) -> bool {
        self.init.is_empty() && self.exec.is_empty()
    }
}

/// One init hook: the annotation container, or the `initContainers` of one `postHooks` entry.
/// Its containers are injected together or not at all (a later one may depend on an earlier).
#[derive(Clone, Debug, PartialEq)]
pub struct InitHook {
    pub source: String,
    pub containers: Vec<InitContainer>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InitContainer {
    pub name: String,
    pub image: String,
    /// `None`: the image entrypoint.
    pub command: Option<Vec<String>>,
    /// The container exactly as it goes into the patch (unknown fields preserved).
    pub value: Value,
}

/// An invalid hook definition: where it is and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// e.g. `restorehook/pg postHooks[1].exec` or `annotation post.hook.restore.velero.io/command`.
    pub source: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.message)
    }
}

/// The containers of the pod as admitted, as hook targets.
struct PodShape<'a> {
    app: Vec<&'a str>,
    /// Init containers with `restartPolicy: Always`.
    sidecars: Vec<&'a str>,
    plain_init: Vec<&'a str>,
    volumes: BTreeSet<&'a str>,
}

impl<'a> PodShape<'a> {
    fn of(pod: &AdmittedPod<'a>) -> Self {
        let app = pod.containers().iter().map(|c| c.name).collect();
        let (mut sidecars, mut plain_init) = (Vec::new(), Vec::new());
        for c in pod.init_containers().unwrap_or_default() {
            if c.restart_policy == Some("Always") {
                sidecars.push(c.name);
            } else {
                plain_init.push(c.name);
            }
        }
        let volumes = pod.volumes().iter().map(|v| v.name).collect();
        Self {
            app,
            sidecars,
            plain_init,
            volumes,
        }
    }

    /// The exec target for an optional container name, or why there is none.
    fn exec_target(&self, container: Option<&str>) -> Result<String, String> {
        let Some(name) = container.filter(|c| !c.is_empty()) else {
            return self
                .app
                .first()
                .map(|c| c.to_string())
                .ok_or_else(|| "exec hook has no target: the pod has no containers".to_string());
        };
        if self.app.contains(&name) || self.sidecars.contains(&name) {
            return Ok(name.to_string());
        }
        if self.plain_init.contains(&name) {
            return Err(format!(
                "exec hook targets {name:?}, a plain init container; exec hooks can only target \
                 app containers and native sidecars (init containers with restartPolicy: Always)"
            ));
        }
        let mut all: Vec<&str> = self.app.clone();
        all.extend(&self.sidecars);
        Err(format!(
            "exec hook targets container {name:?}, which the pod does not have (containers: {})",
            all.join(", ")
        ))
    }
}

/// The un-defaulted fields of an exec hook, from annotations or a spec.
struct ExecFields<'a> {
    container: Option<&'a str>,
    command: Vec<String>,
    on_error: Option<&'a str>,
    exec_timeout: Option<&'a str>,
    wait_timeout: Option<&'a str>,
    wait_for_ready: bool,
}

/// Where a hook came from, for the plan and for messages.
struct Origin {
    /// `annotation`, `velero-restore/<name>`, `restorehook/<name>`.
    source: String,
    /// Hook name in the plan.
    name: String,
    /// Position in `postHooks`.
    index: usize,
    /// Prefix of problem messages, e.g. `restorehook/pg postHooks[1]`.
    location: String,
}

fn effective_exec(
    fields: ExecFields<'_>,
    origin: &Origin,
    shape: &PodShape<'_>,
) -> Result<PlannedHook, String> {
    let container = shape.exec_target(fields.container)?;
    if fields.command.is_empty() {
        return Err(
            "exec hook has no command; set it to the argv to run, e.g. [\"/bin/sh\", \"-c\", \"...\"]"
                .to_string(),
        );
    }
    let on_error = match fields.on_error {
        None | Some("") | Some("Continue") => OnError::Continue,
        Some("Fail") => OnError::Fail,
        Some(other) => {
            return Err(format!(
                "onError {other:?} is neither Continue nor Fail (the values are case-sensitive)"
            ));
        }
    };
    let millis = |what: &str, value: Option<&str>| -> Result<u64, String> {
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            return Ok(0);
        };
        let nanos = parse_go_duration(value).map_err(|e| format!("{what}: {e}"))?;
        if nanos < 0 {
            return Err(format!(
                "{what}: {}",
                DurationError::Negative(value.to_string())
            ));
        }
        // Round up so that "1ns" does not become "no limit".
        Ok((nanos as u64).div_ceil(1_000_000))
    };
    let exec_timeout_ms = match millis("execTimeout", fields.exec_timeout)? {
        0 => DEFAULT_EXEC_TIMEOUT_MS,
        ms => ms,
    };
    let wait_timeout_ms = match millis("waitTimeout", fields.wait_timeout)? {
        0 => None,
        ms => Some(ms),
    };
    Ok(PlannedHook {
        name: origin.name.clone(),
        source: origin.source.clone(),
        index: origin.index,
        container,
        command: fields.command,
        on_error,
        exec_timeout_ms,
        wait_timeout_ms,
        wait_for_ready: fields.wait_for_ready,
    })
}

fn spec_exec_fields(exec: &ExecRestoreHook) -> ExecFields<'_> {
    ExecFields {
        container: exec.container.as_deref(),
        command: exec.command.clone(),
        on_error: exec.on_error.as_deref(),
        exec_timeout: exec.exec_timeout.as_deref(),
        wait_timeout: exec.wait_timeout.as_deref(),
        wait_for_ready: exec.wait_for_ready.unwrap_or(false),
    }
}

/// A container name must be a lowercase RFC 1123 label.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn spec_init_container(
    value: &Value,
    position: usize,
    shape: &PodShape<'_>,
) -> Result<InitContainer, String> {
    let at = format!("initContainers[{position}]");
    if !value.is_object() {
        return Err(format!("{at} is not an object"));
    }
    // From the borrowed value: this runs for every admission a hook applies to.
    let mut container =
        Container::deserialize(value).map_err(|e| format!("{at} is not a valid container: {e}"))?;
    if container.name.is_empty() {
        return Err(format!("{at} has no name"));
    }
    let at = format!("{at} ({:?})", container.name);
    if !is_dns_label(&container.name) {
        return Err(format!(
            "{at}: the name is not a valid container name (a lowercase RFC 1123 label)"
        ));
    }
    let image = container.image.take().unwrap_or_default();
    if image.is_empty() {
        return Err(format!("{at} has no image"));
    }
    for mount in container.volume_mounts.iter().flatten() {
        if !shape.volumes.contains(mount.name.as_str()) {
            let volumes: Vec<&str> = shape.volumes.iter().copied().collect();
            return Err(format!(
                "{at} mounts volume {:?}, which the pod does not have (volumes: {})",
                mount.name,
                if volumes.is_empty() {
                    "none".to_string()
                } else {
                    volumes.join(", ")
                }
            ));
        }
    }
    // Velero requires a command; we allow the image entrypoint, as for annotations.
    let command = container.command.take().filter(|c| !c.is_empty());
    Ok(InitContainer {
        name: container.name,
        image,
        command,
        value: value.clone(),
    })
}

/// A `postHooks` list from one spec source, filtered to this pod already.
struct SpecEntry<'a> {
    source: String,
    name: String,
    location: String,
    post_hooks: &'a [super::types::RestoreResourceHook],
}

/// Velero (reference §1.3, with the resources deviation of product.md §7): an entry applies
/// only when its resources are empty, `*` or include pods, and pods are not excluded.
fn applies_to_pods(entry: &RestoreResourceHookSpec) -> bool {
    let is_pods = |r: &String| matches!(r.to_ascii_lowercase().as_str(), "pods" | "pod" | "po");
    let included = entry.included_resources.as_deref().unwrap_or_default();
    let excluded = entry.excluded_resources.as_deref().unwrap_or_default();
    let included_ok = included.is_empty() || included.iter().any(|r| r == "*" || is_pods(r));
    let excluded_hit = excluded.iter().any(|r| r == "*" || is_pods(r));
    included_ok && !excluded_hit
}

/// Decides the pod's hooks. `namespace` is the pod's (target) namespace; labels are the pod's
/// labels as admitted.
pub fn resolve_hooks(
    pod: &AdmittedPod<'_>,
    namespace: &str,
    scope: &RestoreScope,
    sources: HookSources<'_>,
    config: &EngineConfig,
) -> Resolution {
    let shape = PodShape::of(pod);
    let empty = Labels::new();
    let labels = pod.labels().unwrap_or(&empty);
    let annotations = pod.annotations();
    let mut problems = Vec::new();

    // `defer`: Velero runs its own hooks on pods it created, so its sources are removed before
    // precedence is decided (their annotations then do not suppress RestoreHook hooks).
    let velero_sources =
        !(config.velero_hooks == VeleroHooksMode::Defer && scope.via == ScopeVia::PodLabel);

    let mut entries: Vec<SpecEntry<'_>> = Vec::new();
    if velero_sources && let Some(restore) = sources.velero_restore {
        let restore_name = restore.metadata.name.clone().unwrap_or_default();
        let resources = restore
            .spec
            .hooks
            .as_ref()
            .map(|h| h.resources.as_slice())
            .unwrap_or_default();
        for (i, entry) in resources.iter().enumerate() {
            let location = format!(
                "velero-restore/{restore_name} resources[{i}] {:?}",
                entry.name
            );
            let namespaces = IncludesExcludes::compile(
                entry.included_namespaces.as_deref().unwrap_or_default(),
                entry.excluded_namespaces.as_deref().unwrap_or_default(),
            );
            let selector = Selector::compile(entry.label_selector.as_ref());
            let matched = match (namespaces, selector) {
                (Err(e), _) => Err(format!("includedNamespaces/excludedNamespaces: {e}")),
                (_, Err(e)) => Err(e.to_string()),
                (Ok(ns), Ok(sel)) => Ok(ns.should_include(namespace)
                    && applies_to_pods(entry)
                    && sel.matches(labels)),
            };
            match matched {
                Err(message) => problems.push(Problem {
                    source: location,
                    message,
                }),
                Ok(false) => {}
                Ok(true) => entries.push(SpecEntry {
                    source: format!("velero-restore/{restore_name}"),
                    name: entry.name.clone(),
                    location,
                    post_hooks: &entry.post_hooks,
                }),
            }
        }
    }

    let mut restore_hooks: Vec<&RestoreHook> = sources
        .restore_hooks
        .iter()
        .copied()
        .filter(|h| {
            h.metadata
                .namespace
                .as_deref()
                .is_none_or(|ns| ns == namespace)
        })
        .collect();
    restore_hooks.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for hook in restore_hooks {
        let name = hook.metadata.name.clone().unwrap_or_default();
        let location = format!("restorehook/{name}");
        let restores = hook
            .spec
            .restores
            .as_deref()
            .filter(|r| !r.is_empty())
            .map(|patterns| {
                patterns
                    .iter()
                    .map(|p| NamePattern::compile(p))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose();
        let matched = match (
            restores,
            Selector::compile(hook.spec.label_selector.as_ref()),
        ) {
            (Err(e), _) => Err(format!("restores: {e}")),
            (_, Err(e)) => Err(e.to_string()),
            (Ok(patterns), Ok(sel)) => Ok(patterns
                .is_none_or(|ps| ps.iter().any(|p| p.matches(&scope.restore)))
                && sel.matches(labels)),
        };
        match matched {
            Err(message) => problems.push(Problem {
                source: location,
                message,
            }),
            Ok(false) => {}
            Ok(true) => entries.push(SpecEntry {
                source: location.clone(),
                name,
                location,
                post_hooks: &hook.spec.post_hooks,
            }),
        }
    }

    // Init hooks: a non-empty image annotation means exactly one annotation container.
    let mut init = Vec::new();
    let init_image = velero_sources
        .then(|| ann::get(annotations, ann::INIT_CONTAINER_IMAGE))
        .flatten();
    if let Some(image) = init_image {
        let name =
            ann::get(annotations, ann::INIT_CONTAINER_NAME).unwrap_or(DEFAULT_INIT_CONTAINER_NAME);
        let built = parse_command(ann::get(annotations, ann::INIT_COMMAND).unwrap_or(""))
            .map_err(|e| (ann::INIT_COMMAND, e.to_string()))
            .and_then(|command| {
                if is_dns_label(name) {
                    Ok(command)
                } else {
                    Err((
                        ann::INIT_CONTAINER_NAME,
                        format!(
                            "{name:?} is not a valid container name (a lowercase RFC 1123 label)"
                        ),
                    ))
                }
            });
        match built {
            Ok(command) => {
                let command = (!command.is_empty()).then_some(command);
                let mut value = serde_json::json!({"name": name, "image": image});
                if let Some(cmd) = &command {
                    value["command"] = serde_json::json!(cmd);
                }
                init.push(InitHook {
                    source: "annotation".to_string(),
                    containers: vec![InitContainer {
                        name: name.to_string(),
                        image: image.to_string(),
                        command,
                        value,
                    }],
                });
            }
            Err((key, message)) => problems.push(Problem {
                source: format!("annotation {key}"),
                message,
            }),
        }
    } else {
        for entry in &entries {
            for (j, post) in entry.post_hooks.iter().enumerate() {
                let Some(hook) = &post.init else { continue };
                let location = format!("{} postHooks[{j}].init", entry.location);
                let containers = hook
                    .init_containers
                    .iter()
                    .enumerate()
                    .map(|(k, v)| spec_init_container(v, k, &shape))
                    .collect::<Result<Vec<_>, _>>();
                match containers {
                    Ok(containers) if containers.is_empty() => {}
                    Ok(containers) => init.push(InitHook {
                        source: location,
                        containers,
                    }),
                    Err(message) => problems.push(Problem {
                        source: location,
                        message,
                    }),
                }
            }
        }
    }
    let init = dedupe_init_hooks(init, &mut problems);

    // Exec hooks: a non-empty command annotation means exactly one annotation hook.
    let mut exec = Vec::new();
    let exec_command = velero_sources
        .then(|| ann::get(annotations, ann::POST_COMMAND))
        .flatten();
    if let Some(command) = exec_command {
        let origin = Origin {
            source: "annotation".to_string(),
            name: ANNOTATION_HOOK_NAME.to_string(),
            index: 0,
            location: "annotation".to_string(),
        };
        let built = parse_command(command)
            .map_err(|e| (ann::POST_COMMAND, e.to_string()))
            .and_then(|command| {
                let wait_for_ready = match ann::get(annotations, ann::POST_WAIT_FOR_READY) {
                    None => false,
                    Some(v) => ann::parse_go_bool(v).ok_or_else(|| {
                        (
                            ann::POST_WAIT_FOR_READY,
                            format!("{v:?} is not a boolean (use true or false)"),
                        )
                    })?,
                };
                let fields = ExecFields {
                    container: ann::get(annotations, ann::POST_CONTAINER),
                    command,
                    on_error: ann::get(annotations, ann::POST_ON_ERROR),
                    exec_timeout: ann::get(annotations, ann::POST_EXEC_TIMEOUT),
                    wait_timeout: ann::get(annotations, ann::POST_WAIT_TIMEOUT),
                    wait_for_ready,
                };
                effective_exec(fields, &origin, &shape).map_err(|m| (annotation_key_for(&m), m))
            });
        match built {
            Ok(hook) => exec.push(hook),
            Err((key, message)) => problems.push(Problem {
                source: format!("{} {key}", origin.location),
                message,
            }),
        }
    } else {
        for entry in &entries {
            for (j, post) in entry.post_hooks.iter().enumerate() {
                let Some(hook) = &post.exec else { continue };
                let origin = Origin {
                    source: entry.source.clone(),
                    name: entry.name.clone(),
                    index: j,
                    location: format!("{} postHooks[{j}].exec", entry.location),
                };
                match effective_exec(spec_exec_fields(hook), &origin, &shape) {
                    Ok(planned) => exec.push(planned),
                    Err(message) => problems.push(Problem {
                        source: origin.location,
                        message,
                    }),
                }
            }
        }
    }

    Resolution {
        scope: scope.clone(),
        init,
        exec,
        problems,
    }
}

/// The annotation an exec-hook problem is about, so the message names the key to fix.
fn annotation_key_for(message: &str) -> &'static str {
    if message.starts_with("onError") {
        ann::POST_ON_ERROR
    } else if message.starts_with("execTimeout") {
        ann::POST_EXEC_TIMEOUT
    } else if message.starts_with("waitTimeout") {
        ann::POST_WAIT_TIMEOUT
    } else if message.contains("no command") {
        ann::POST_COMMAND
    } else {
        ann::POST_CONTAINER
    }
}

/// Hook containers with the same name in one admission: identical definitions are injected
/// once; different ones make the later hook invalid (the API server would reject the pod with
/// "Duplicate value" otherwise).
fn dedupe_init_hooks(hooks: Vec<InitHook>, problems: &mut Vec<Problem>) -> Vec<InitHook> {
    let mut seen: HashMap<String, (Value, String)> = HashMap::new();
    let mut out = Vec::new();
    for mut hook in hooks {
        let mut conflict = None;
        for c in &hook.containers {
            if let Some((value, source)) = seen.get(&c.name)
                && *value != c.value
            {
                conflict = Some(format!(
                    "init container {:?} is also defined, differently, by {source}; give one of them another name",
                    c.name
                ));
                break;
            }
        }
        if let Some(message) = conflict {
            problems.push(Problem {
                source: hook.source,
                message,
            });
            continue;
        }
        hook.containers.retain(|c| {
            if seen.contains_key(&c.name) {
                return false;
            }
            seen.insert(c.name.clone(), (c.value.clone(), hook.source.clone()));
            true
        });
        if !hook.containers.is_empty() {
            out.push(hook);
        }
    }
    out
}
