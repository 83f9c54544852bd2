//! Which hooks apply to a restored pod, in which order, and whether they can work on it
//! (docs/behaviour.md §2, §3, §4.3). Pure: the pod, its namespace and the compiled index are
//! arguments.
//!
//! The index has compiled every hook object already; what is decided here depends on the pod:
//! its labels (selectors), its containers (exec targets, init container clashes) and its volumes
//! (mounts of hook containers).
//!
//! The module is long because precedence (§3.1, §3.3), source order (§3.2), exec targets (§3.5)
//! and init container placement and clashes (§4.3, §4.4) are decided together, over one view of
//! the pod. It has no unit tests of its own: the end-to-end admission cases in
//! `core/tests/injection.rs` test it through [`crate::admission::evaluate`].

use std::collections::HashMap;

use super::annotations::{self as ann, ANNOTATION_HOOK_NAME, DEFAULT_INIT_CONTAINER_NAME};
use super::authority::{Requester, annotation_exec_authority, voucher};
use super::command::parse_command;
use super::compiled::{
    CompiledEntry, CompiledObject, Definition, ExecFields, ExecTemplate, HookContainer, SourceKind,
    exec_template, is_dns_label,
};
use super::ephemeral::effective_security_context;
use super::parameters::{RestoreParameters, VeleroFacts, references};
use super::plan::{
    AfterRef, AwaitedKey, DEFAULT_EXEC_TIMEOUT_MS, EphemeralPlan, HookKind, HookRef, OnError,
    PlannedHook, RunOn, Voucher, awaited_keys,
};
use super::pod::{AdmittedPod, ContainerView, RunAsView};
use super::problem::{ExecField, Problem};
use super::scope::{RestoreScope, ScopeVia};
use super::targets::{ExecTargets, TargetError};
use super::types::{HookSecurityContext, Labels};
use crate::config::{EngineConfig, VeleroHooksMode};
use crate::index::HookIndex;
use crate::restore::after::{find_cycle, show_awaited};

/// Init containers that Velero's file-system restore puts in the pod; hook containers go after
/// the last of them, because they need the restored volume data (docs/behaviour.md §4.2).
pub const RESTORE_WAIT_CONTAINERS: [&str; 2] = ["restore-wait", "restic-wait"];

/// The pod being admitted and where.
#[derive(Clone, Copy, Debug)]
pub struct PodContext<'a> {
    /// The pod as admitted (or as read back, for late hooks).
    pub pod: &'a AdmittedPod<'a>,
    /// The pod's namespace: the target namespace after any Velero namespace mapping (§2.4, §2.7).
    pub namespace: &'a str,
    /// The namespace's labels; `None` when unknown.
    pub namespace_labels: Option<&'a Labels>,
}

/// The outcome of resolution: valid hooks in order, and what was wrong with the others.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    /// The scope the pod was resolved for (label value and which label brought it in).
    pub scope: RestoreScope,
    /// The restore's name: the Velero Restore's full name when it is known, else the label value.
    pub restore: String,
    /// Init hooks to inject, in source order (§3.2, §4.1); for late hooks, every init hook of the
    /// object that selects the pod (whether the pod has its containers decides if it was missed,
    /// [`crate::late_hooks::merge`]).
    pub init: Vec<InitHook>,
    /// Where new hook containers go in `spec.initContainers` (§4.2): after the last
    /// `restore-wait`/`restic-wait` and, under `defer`, after the last init container Velero
    /// injected for its own hooks; 0 when there is none.
    pub init_index: usize,
    /// Valid exec hooks in plan order (§3.2), timeouts capped at `--max-exec-timeout`.
    pub exec: Vec<PlannedHook>,
    /// Spec exec hooks that select the pod but name a container it lacks.
    pub not_applicable: Vec<HookRef>,
    /// Admission warnings that are not problems (not-applicable hooks, capped timeouts).
    pub notes: Vec<String>,
    /// Invalid hooks (§3.4): deny the pod or warn, by `--on-invalid` (§3.6).
    pub problems: Vec<Problem>,
    /// The pod's annotation exec hook is in `exec`, refused: nobody entitled to exec into the pod
    /// authored it (§9.9).
    pub refused_annotation_hook: bool,
    /// Who vouches that the pod belongs to its restore (§6.20), from who created it.
    pub vouched_by: Voucher,
}

impl Resolution {
    fn empty(scope: &RestoreScope, restore: String) -> Self {
        Self {
            scope: scope.clone(),
            restore,
            init: Vec::new(),
            init_index: 0,
            exec: Vec::new(),
            not_applicable: Vec::new(),
            notes: Vec::new(),
            problems: Vec::new(),
            refused_annotation_hook: false,
            vouched_by: Voucher::Nobody,
        }
    }

    /// Whether no init or exec hook applies: then the pod gets no plan (§4.5).
    pub fn is_empty(&self) -> bool {
        self.init.is_empty() && self.exec.is_empty()
    }
}

/// One init hook: the annotation container, or the `initContainers` of one `postHooks` entry.
/// Its containers are injected together or not at all (a later one may depend on an earlier).
#[derive(Clone, Debug, PartialEq)]
pub struct InitHook {
    /// Where it comes from: `annotation`, or `<location> postHooks[<i>].init` (as in problems).
    pub source: String,
    /// Its position in its source's `postHooks` (0 for the annotation).
    pub index: usize,
    /// Its containers in spec order, each with what the patch does with it.
    pub containers: Vec<PlacedContainer>,
}

/// A hook container and what the patch does with it (docs/behaviour.md §4.3).
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedContainer {
    /// The container as the hook defines it.
    pub container: HookContainer,
    /// Added, already present, or replacing a stale copy.
    pub placement: Placement,
}

/// What the patch does with a hook container (docs/behaviour.md §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Inserted after the last restore-wait / restic-wait.
    New,
    /// Already in the pod with this definition (by its name, or under Velero's random name).
    Present,
    /// In the pod under its name from an earlier cycle, with an older definition: replaced in
    /// place (`spec.initContainers[i]`).
    Replace(usize),
}

/// Decides the pod's hooks. `requester` is who sent the pod's CREATE: its right to exec decides
/// whether the pod's annotation exec hook may run (§9.9).
pub fn resolve_hooks(
    ctx: &PodContext<'_>,
    scope: &RestoreScope,
    index: &HookIndex,
    config: &EngineConfig,
    requester: &Requester<'_>,
) -> Resolution {
    let velero = index.velero_restore(&config.velero_namespace, &scope.restore);
    // `restores` globs, the plan and the status use the full name once the Restore is known.
    let restore = velero.map_or_else(|| scope.restore.clone(), |r| r.name.clone());
    let mut out = Resolution::empty(scope, restore);
    out.vouched_by = voucher(requester, config);
    // `defer`: Velero runs its own hooks on pods it created, so its sources are removed before
    // precedence is decided (their annotations then do not suppress RestoreHook hooks).
    let velero_sources =
        !(config.velero_hooks == VeleroHooksMode::Defer && scope.via == ScopeVia::PodLabel);

    let mut objects: Vec<&CompiledObject> = Vec::new();
    if velero_sources && let Some(v) = velero {
        objects.push(v);
    }
    objects.extend(index.cluster_restore_hooks().map(|o| o.as_ref()));
    objects.extend(index.restore_hooks(ctx.namespace).map(|o| o.as_ref()));
    let entries = matching_entries(ctx, &out.restore, &objects, &mut out.problems);

    let shape = PodShape::of(ctx.pod);
    let annotations = velero_sources.then(|| ctx.pod.annotations()).flatten();
    let parameters = RestoreParameters::of(
        ctx.pod,
        ctx.namespace,
        &out.restore,
        velero.map(VeleroFacts::of).unwrap_or_default(),
    );

    // Init hooks: a non-empty image annotation means exactly one annotation container.
    let init = match ann::get(annotations, ann::INIT_CONTAINER_IMAGE) {
        Some(image) => annotation_init_hook(annotations, image, &mut out.problems),
        None => spec_init_hooks(&entries, &parameters, &mut out.problems),
    };
    out.init = place_init_hooks(init, &shape, &mut out.problems);
    // Where to insert matters only when something is inserted (most restored pods get nothing).
    let mut placed = out.init.iter().flat_map(|h| &h.containers);
    if placed.any(|c| c.placement == Placement::New) {
        let velero_init = if velero_sources {
            VeleroInit::default()
        } else {
            VeleroInit::of(ctx, &out.restore, velero)
        };
        out.init_index = init_index(shape.init, &velero_init);
    }

    // Exec hooks: a non-empty command annotation means exactly one annotation hook.
    match ann::get(annotations, ann::POST_COMMAND) {
        Some(command) => match annotation_exec_hook(annotations, command, &shape, config) {
            Ok(mut hook) => {
                // Refused, it still takes precedence over spec exec hooks, as it would if it
                // ran: who authored it must not change which other hooks run.
                match annotation_exec_authority(requester, ctx.namespace, &entries, config) {
                    Ok(by) => hook.allowed_by = Some(by),
                    Err(why) => {
                        out.notes.push(format!("annotation exec hook {why}"));
                        out.refused_annotation_hook = true;
                        hook.refused = Some(why);
                    }
                }
                out.exec.push(hook);
            }
            Err(problem) => out.problems.push(problem),
        },
        None => {
            for entry in &entries {
                expand_exec(entry, &shape, config, &parameters, ctx.namespace, &mut out);
            }
        }
    }
    refuse_after_cycles(&mut out, index, ctx.namespace, ctx.namespace_labels);
    cap_exec_timeouts(&mut out, config);
    out
}

/// Hooks that wait for themselves through `after` (docs/behaviour.md §6.16) would wait until
/// their `waitTimeout`: they are invalid (§3.4), with the cycle named. The CRD schema refuses an
/// object naming itself at `kubectl apply`; a cycle across objects is only visible here.
///
/// The graph is the one the pod's hooks would wait through: a hook of an object, counted in the
/// pods of one namespace, waits for what that object's `after` names, resolved there. Only objects
/// that can apply to pods of that namespace in this restore have edges, so a RestoreHook in one
/// namespace never makes a pod of another invalid (§6.20).
fn refuse_after_cycles(
    out: &mut Resolution,
    index: &HookIndex,
    namespace: &str,
    namespace_labels: Option<&Labels>,
) {
    if out.exec.iter().all(|h| h.after.is_empty()) {
        return;
    }
    let restore = out.restore.clone();
    let edges = |node: &AwaitedKey| -> Vec<AwaitedKey> {
        let Some((kind, name)) = SourceKind::parse_source(&node.source) else {
            return Vec::new();
        };
        let Some(object) = index.object(kind, &node.namespace, name) else {
            return Vec::new();
        };
        // A namespace whose labels are not known here is the pod's own (given) or another one
        // a ClusterRestoreHook named: its selector is then matched against the index's view.
        let labels = if node.namespace == namespace {
            namespace_labels.or_else(|| index.namespace_labels(namespace))
        } else {
            index.namespace_labels(&node.namespace)
        };
        let mut out = Vec::new();
        for entry in &object.entries {
            let applies = entry
                .filter
                .as_ref()
                .is_ok_and(|f| f.may_apply(&node.namespace, labels, &restore));
            if !applies {
                continue;
            }
            for template in entry
                .post_hooks
                .iter()
                .filter_map(|p| p.exec.as_ref()?.as_ref().ok())
            {
                out.extend(awaited_keys(
                    &template.after,
                    &entry.source,
                    &node.namespace,
                ));
            }
        }
        out
    };
    out.exec.retain(|hook| {
        if hook.after.is_empty() {
            return true;
        }
        let start = AwaitedKey {
            source: hook.source.clone(),
            namespace: namespace.to_string(),
        };
        let Some(cycle) = find_cycle(&start, edges) else {
            return true;
        };
        let shown: Vec<String> = cycle.iter().map(|k| show_awaited(k, namespace)).collect();
        out.problems.push(Problem::at(
            format!("{} postHooks[{}].exec", hook.source, hook.index),
            ExecField::After.spec_name(),
            format!(
                "waits in a cycle ({}): each hook would wait for itself until its waitTimeout; \
                 remove one of these after entries",
                shown.join(" → ")
            ),
        ));
        false
    });
}

/// A hook object's `after` entries as the plan of a pod of `namespace` holds them: the kind
/// defaults to the waiting object's, the namespace to the pod's (docs/behaviour.md §6.16).
fn planned_after(after: &[AfterRef], source: &str, namespace: &str) -> Vec<AfterRef> {
    let own = HookKind::of_source(source).unwrap_or(HookKind::RestoreHook);
    let mut out: Vec<AfterRef> = Vec::new();
    for a in after {
        let resolved = AfterRef {
            hook: a.hook.clone(),
            kind: Some(a.kind.unwrap_or(own)),
            namespace: Some(a.namespace.clone().unwrap_or_else(|| namespace.to_string())),
        };
        if !out.contains(&resolved) {
            out.push(resolved);
        }
    }
    out
}

/// Hooks that a hook object which arrived after the pod (docs/behaviour.md §7.2) adds: its exec
/// hooks, and its init hooks as missed. Nothing when the pod's own annotations take precedence.
/// `velero` is the Velero Restore of the pod's restore, when known (its parameters, §2.8).
pub fn resolve_late_hooks(
    ctx: &PodContext<'_>,
    scope: &RestoreScope,
    restore: &str,
    velero: Option<&CompiledObject>,
    object: &CompiledObject,
    index: &HookIndex,
    config: &EngineConfig,
) -> Resolution {
    let mut out = Resolution::empty(scope, restore.to_string());
    let entries = matching_entries(ctx, restore, &[object], &mut out.problems);
    let velero_sources =
        !(config.velero_hooks == VeleroHooksMode::Defer && scope.via == ScopeVia::PodLabel);
    let annotations = velero_sources.then(|| ctx.pod.annotations()).flatten();
    let shape = PodShape::of(ctx.pod);
    let parameters = RestoreParameters::of(
        ctx.pod,
        ctx.namespace,
        restore,
        velero.map(VeleroFacts::of).unwrap_or_default(),
    );
    // The init hooks cannot be injected into a pod that exists: they were injected at admission
    // or missed.
    if ann::get(annotations, ann::INIT_CONTAINER_IMAGE).is_none() {
        out.init = spec_init_hooks(&entries, &parameters, &mut Vec::new());
    }
    if ann::get(annotations, ann::POST_COMMAND).is_none() {
        for entry in &entries {
            expand_exec(entry, &shape, config, &parameters, ctx.namespace, &mut out);
        }
    }
    refuse_after_cycles(&mut out, index, ctx.namespace, ctx.namespace_labels);
    cap_exec_timeouts(&mut out, config);
    out
}

/// The entries (in source order) that select this pod; compile problems of the sources are
/// reported for every pod they might have selected.
fn matching_entries<'i>(
    ctx: &PodContext<'_>,
    restore: &str,
    objects: &[&'i CompiledObject],
    problems: &mut Vec<Problem>,
) -> Vec<&'i CompiledEntry> {
    let empty = Labels::new();
    let labels = ctx.pod.labels().unwrap_or(&empty);
    let mut out = Vec::new();
    for object in objects {
        for entry in &object.entries {
            match &entry.filter {
                Err(problem) => problems.push(problem.clone()),
                Ok(filter) => {
                    if filter.matches(ctx.namespace, ctx.namespace_labels, restore, labels) {
                        out.push(entry);
                    }
                }
            }
        }
    }
    out
}

/// The containers of the pod as admitted: exec targets, init containers, volumes.
struct PodShape<'p, 'a> {
    targets: ExecTargets,
    init: &'p [ContainerView<'a>],
    app: &'p [ContainerView<'a>],
    volumes: Vec<&'p str>,
    /// Names in `restore-hooks.dev/injected`: containers an earlier cycle of ours added.
    injected: Vec<&'p str>,
    /// The pod's `runAsUser` and `runAsGroup` (§6.18).
    pod_run_as: Option<RunAsView>,
    /// `spec.os.name: windows` (§6.18).
    windows: bool,
    /// The init containers' definitions, built on first use: only pods with init hooks need
    /// them, and then once per admission, not once per comparison.
    init_definitions: std::cell::OnceCell<Vec<Definition>>,
}

impl<'p, 'a> PodShape<'p, 'a> {
    /// The first of `mounts` that names a volume the pod lacks, as a problem's message
    /// (`mounts volume "x", which the pod does not have (volumes: ...)`).
    fn missing_volume<'m>(&self, mut mounts: impl Iterator<Item = &'m String>) -> Option<String> {
        let missing = mounts.find(|m| !self.volumes.contains(&m.as_str()))?;
        let volumes = if self.volumes.is_empty() {
            "none".to_string()
        } else {
            self.volumes.join(", ")
        };
        Some(format!(
            "mounts volume {missing:?}, which the pod does not have (volumes: {volumes})"
        ))
    }

    /// The securityContext of an image hook's container targeting `target` in this pod
    /// (docs/behaviour.md §6.18).
    fn security_context(
        &self,
        target: &str,
        ephemeral: &EphemeralPlan,
    ) -> Result<HookSecurityContext, String> {
        let target = self
            .app
            .iter()
            .chain(self.init)
            .find(|c| &*c.name == target)
            .and_then(|c| c.security_context);
        effective_security_context(
            ephemeral.security_context.as_ref(),
            target.into(),
            self.pod_run_as.into(),
            self.windows,
        )
    }

    fn of(pod: &'p AdmittedPod<'a>) -> Self {
        let init = pod.init_containers().unwrap_or_default();
        let app = pod.containers();
        let spec = pod.spec.as_ref();
        Self {
            pod_run_as: spec.and_then(|s| s.security_context),
            windows: spec
                .and_then(|s| s.os.as_ref())
                .and_then(|os| os.name.as_deref())
                == Some("windows"),
            targets: ExecTargets::new(
                app.iter().map(|c| &*c.name),
                init.iter().map(|c| (&*c.name, c.restart_policy.as_deref())),
            ),
            init,
            app,
            volumes: pod.volumes().iter().map(|v| &*v.name).collect(),
            injected: pod
                .annotations()
                .and_then(|a| a.get(super::plan::INJECTED_ANNOTATION))
                .map(|v| v.split(',').filter(|s| !s.is_empty()).collect())
                .unwrap_or_default(),
            init_definitions: std::cell::OnceCell::new(),
        }
    }

    fn init_definitions(&self) -> &[Definition] {
        self.init_definitions
            .get_or_init(|| self.init.iter().map(definition_of).collect())
    }
}

/// A raw JSON field, parsed for a comparison. The API server sent valid JSON; should a field not
/// parse, it compares as absent (so a hook container is added rather than wrongly kept).
fn parse_raw(raw: Option<&serde_json::value::RawValue>) -> Option<serde_json::Value> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

fn definition_of(c: &ContainerView<'_>) -> Definition {
    let strings = |l: &Option<Vec<super::pod::Text<'_>>>| {
        l.iter()
            .flatten()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    Definition {
        image: c.image.as_deref().unwrap_or_default().to_string(),
        command: strings(&c.command),
        args: strings(&c.args),
        env: Definition::normalise(parse_raw(c.env).as_ref()),
        volume_mounts: Definition::normalise(parse_raw(c.volume_mounts).as_ref()),
    }
}

fn annotation_init_hook(
    annotations: Option<&super::types::Annotations>,
    image: &str,
    problems: &mut Vec<Problem>,
) -> Vec<InitHook> {
    let name =
        ann::get(annotations, ann::INIT_CONTAINER_NAME).unwrap_or(DEFAULT_INIT_CONTAINER_NAME);
    let command = match parse_command(ann::get(annotations, ann::INIT_COMMAND).unwrap_or("")) {
        Ok(command) => command,
        Err(e) => {
            problems.push(Problem::at("annotation", ann::INIT_COMMAND, e.to_string()));
            return Vec::new();
        }
    };
    if !is_dns_label(name) {
        problems.push(Problem::at(
            "annotation",
            ann::INIT_CONTAINER_NAME,
            format!("{name:?} is not a valid container name (a lowercase RFC 1123 label)"),
        ));
        return Vec::new();
    }
    let mut value = serde_json::json!({"name": name, "image": image});
    if !command.is_empty() {
        value["command"] = serde_json::json!(command);
    }
    vec![InitHook {
        source: "annotation".to_string(),
        index: 0,
        containers: vec![PlacedContainer {
            container: HookContainer {
                name: name.to_string(),
                definition: Definition {
                    image: image.to_string(),
                    command,
                    ..Definition::default()
                },
                mounts: Vec::new(),
                value,
                // Velero's sources are never expanded (docs/behaviour.md §2.8).
                parameters: Vec::new(),
            },
            placement: Placement::New,
        }],
    }]
}

fn spec_init_hooks(
    entries: &[&CompiledEntry],
    parameters: &RestoreParameters,
    problems: &mut Vec<Problem>,
) -> Vec<InitHook> {
    let mut out = Vec::new();
    for entry in entries {
        for post in &entry.post_hooks {
            match &post.init {
                None => {}
                Some(Err(problem)) => problems.push(problem.clone()),
                Some(Ok(containers)) if containers.is_empty() => {}
                Some(Ok(containers)) => out.push(InitHook {
                    source: post.init_source.clone(),
                    index: post.index,
                    containers: containers
                        .iter()
                        .map(|c| PlacedContainer {
                            container: if entry.is_hook_object() {
                                parameters.provide_to(c)
                            } else {
                                c.clone()
                            },
                            placement: Placement::New,
                        })
                        .collect(),
                }),
            }
        }
    }
    out
}

/// The init containers Velero injects for its own hooks when it runs them (`defer`, §4.2): the one
/// its init annotations name, or else those of its Restore's `init` entries that select the pod.
#[derive(Default)]
struct VeleroInit<'i> {
    names: Vec<&'i str>,
    /// The annotation container without a `container-name`: Velero names it
    /// `velero-restore-init-<8 hex>`, different on every restore.
    generated_name: bool,
}

/// The name Velero gives an annotation init container without `container-name`, before its
/// random suffix.
const VELERO_GENERATED_INIT_PREFIX: &str = "velero-restore-init-";

impl<'i> VeleroInit<'i> {
    fn of(ctx: &PodContext<'i>, restore: &str, velero: Option<&'i CompiledObject>) -> Self {
        let annotations = ctx.pod.annotations();
        if ann::get(annotations, ann::INIT_CONTAINER_IMAGE).is_some() {
            // Velero's annotation init hook replaces its Restore's init hooks for this pod.
            return match ann::get(annotations, ann::INIT_CONTAINER_NAME) {
                Some(name) => Self {
                    names: vec![name],
                    generated_name: false,
                },
                None => Self {
                    names: Vec::new(),
                    generated_name: true,
                },
            };
        }
        let names = velero
            .map(|v| matching_entries(ctx, restore, &[v], &mut Vec::new()))
            .unwrap_or_default()
            .into_iter()
            .flat_map(|entry| &entry.post_hooks)
            .filter_map(|post| post.init.as_ref()?.as_ref().ok())
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        Self {
            names,
            generated_name: false,
        }
    }

    fn injected(&self, name: &str) -> bool {
        self.names.contains(&name)
            || (self.generated_name
                && name
                    .strip_prefix(VELERO_GENERATED_INIT_PREFIX)
                    .is_some_and(|s| s.len() == 8 && s.bytes().all(|b| b.is_ascii_hexdigit())))
    }
}

/// Hook containers need the restored data and, under `defer`, come after Velero's own init hooks
/// (source order, §3.2): directly after the last of those containers, wherever a mesh or another
/// webhook has moved them (§4.2).
fn init_index(init: &[ContainerView<'_>], velero: &VeleroInit<'_>) -> usize {
    init.iter()
        .rposition(|c| RESTORE_WAIT_CONTAINERS.contains(&&*c.name) || velero.injected(&c.name))
        .map_or(0, |i| i + 1)
}

/// Decides, for every hook container, whether the patch adds it, keeps what is there or replaces
/// a stale copy, and turns every silent clash into a problem (docs/behaviour.md §4.3, §4.4).
fn place_init_hooks(
    hooks: Vec<InitHook>,
    shape: &PodShape<'_, '_>,
    problems: &mut Vec<Problem>,
) -> Vec<InitHook> {
    // Hook containers of this admission, by name: identical definitions are injected once.
    let mut seen: HashMap<String, (Definition, String)> = HashMap::new();
    let mut out = Vec::new();
    'hooks: for mut hook in hooks {
        for placed in &mut hook.containers {
            let c = &placed.container;
            let refused = if let Some(missing) = shape.missing_volume(c.mounts.iter()) {
                Some(format!("init container {:?} {missing}", c.name))
            } else if let Some((definition, source)) = seen.get(&c.name)
                && *definition != c.definition
            {
                Some(format!(
                    "init container {:?} is also defined, differently, by {source}; give one of them another name",
                    c.name
                ))
            } else {
                match place(c, shape) {
                    Ok(placement) => {
                        placed.placement = placement;
                        None
                    }
                    Err(message) => Some(message),
                }
            };
            if let Some(message) = refused {
                // The whole init hook or none of it: a later container may need an earlier one.
                problems.push(Problem::new(&hook.source, message));
                continue 'hooks;
            }
        }
        hook.containers.retain(|p| {
            if seen.contains_key(&p.container.name) {
                return false;
            }
            seen.insert(
                p.container.name.clone(),
                (p.container.definition.clone(), hook.source.clone()),
            );
            true
        });
        if !hook.containers.is_empty() {
            out.push(hook);
        }
    }
    out
}

fn place(c: &HookContainer, shape: &PodShape<'_, '_>) -> Result<Placement, String> {
    if let Some((i, existing)) = shape
        .init
        .iter()
        .enumerate()
        .find(|(_, ic)| *ic.name == *c.name)
    {
        if shape.init_definitions()[i] == c.definition {
            return Ok(Placement::Present);
        }
        if shape.injected.contains(&c.name.as_str()) {
            return Ok(Placement::Replace(i));
        }
        return Err(format!(
            "init container {:?} clashes with the pod's own init container {:?} (image {:?}): same \
             name, another definition, and restore-hooks did not inject it; rename the hook's \
             container",
            c.name,
            &*existing.name,
            existing.image.as_deref().unwrap_or_default()
        ));
    }
    if let Some(app) = shape.app.iter().find(|a| *a.name == *c.name) {
        return Err(format!(
            "init container {:?} clashes with the pod's app container {:?} (a pod cannot have two \
             containers of one name); rename the hook's container",
            c.name, &*app.name
        ));
    }
    // Velero (or an earlier cycle under another name) injected it already.
    if shape.init_definitions().contains(&c.definition) {
        return Ok(Placement::Present);
    }
    Ok(Placement::New)
}

fn annotation_exec_hook(
    annotations: Option<&super::types::Annotations>,
    command: &str,
    shape: &PodShape<'_, '_>,
    config: &EngineConfig,
) -> Result<PlannedHook, Problem> {
    let at =
        |field: ExecField, message: String| Problem::at("annotation", field.annotation(), message);
    let command = parse_command(command).map_err(|e| at(ExecField::Command, e.to_string()))?;
    let wait_for_ready = match ann::get(annotations, ann::POST_WAIT_FOR_READY) {
        None => false,
        Some(v) => ann::parse_go_bool(v).ok_or_else(|| {
            at(
                ExecField::WaitForReady,
                format!("{v:?} is not a boolean (use true or false)"),
            )
        })?,
    };
    let template = exec_template(ExecFields {
        container: ann::get(annotations, ann::POST_CONTAINER),
        command,
        on_error: ann::get(annotations, ann::POST_ON_ERROR),
        exec_timeout: ann::get(annotations, ann::POST_EXEC_TIMEOUT),
        wait_timeout: ann::get(annotations, ann::POST_WAIT_TIMEOUT),
        wait_for_ready,
        run_on: None,
        after: Vec::new(),
        // Velero's annotations have no ephemeral container: the hook execs.
        ..Default::default()
    })
    .map_err(|e| at(e.field, e.message))?;
    // The pod's own hook naming a container it lacks is a mistake in the pod: invalid.
    let container = target(&template, shape).map_err(|e| at(ExecField::Container, e))?;
    Ok(planned(
        &template,
        container,
        "annotation",
        ANNOTATION_HOOK_NAME,
        0,
        config,
    ))
}

fn target(template: &ExecTemplate, shape: &PodShape<'_, '_>) -> Result<String, String> {
    match &template.container {
        None => shape
            .targets
            .first_app()
            .map(str::to_string)
            .ok_or_else(|| "exec hook has no target: the pod has no containers".to_string()),
        Some(name) => shape
            .targets
            .check(name)
            .map(|()| name.clone())
            .map_err(|e| e.to_string()),
    }
}

fn expand_exec(
    entry: &CompiledEntry,
    shape: &PodShape<'_, '_>,
    config: &EngineConfig,
    parameters: &RestoreParameters,
    namespace: &str,
    out: &mut Resolution,
) {
    for post in &entry.post_hooks {
        let Some(exec) = &post.exec else { continue };
        let template = match exec {
            Ok(t) => t,
            Err(problem) => {
                out.problems.push(problem.clone());
                continue;
            }
        };
        let location = post.exec_location.as_str();
        match (
            &template.container,
            template
                .container
                .as_deref()
                .map(|c| shape.targets.check(c)),
        ) {
            // A spec hook naming a container this pod lacks was meant for other pods of its
            // selection (Velero's own example selects a namespace and names one container):
            // not applicable here, never a reason to deny the pod.
            (Some(name), Some(Err(TargetError::Missing { .. }))) => {
                out.notes.push(format!(
                    "hook {location} does not apply to this pod: it targets container {name:?}, which the pod does not have"
                ));
                out.not_applicable.push(HookRef {
                    source: entry.source.clone(),
                    name: entry.name.clone(),
                    index: post.index,
                    container: name.clone(),
                });
            }
            _ => match target(template, shape) {
                Ok(container) => {
                    let mut hook = planned(
                        template,
                        container,
                        &entry.source,
                        &entry.name,
                        post.index,
                        config,
                    );
                    if entry.is_hook_object() {
                        if template.expands {
                            hook.command = expand_command(&hook.command, parameters, location, out);
                        }
                        // Velero defines neither runOn, after nor retry: its hooks run once
                        // in every pod it selects, each on its own.
                        hook.run_on = template.run_on;
                        hook.after = planned_after(&template.after, &entry.source, namespace);
                        hook.retry = template.retry.clone();
                        hook.ephemeral = template.ephemeral.clone();
                    }
                    let mounts = hook.ephemeral.iter().flat_map(|e| &e.volume_mounts);
                    if let Some(missing) = shape.missing_volume(mounts.map(|m| &m.name)) {
                        out.problems
                            .push(Problem::at(location, "volumeMounts", missing));
                        continue;
                    }
                    if let Some(ephemeral) = &mut hook.ephemeral {
                        match shape.security_context(&hook.container, ephemeral) {
                            Ok(effective) => ephemeral.security_context = Some(effective),
                            Err(message) => {
                                out.problems.push(Problem::at(
                                    location,
                                    ExecField::SecurityContext.spec_name(),
                                    message,
                                ));
                                continue;
                            }
                        }
                    }
                    out.exec.push(hook);
                }
                Err(message) => out.problems.push(Problem::at(
                    location,
                    ExecField::Container.spec_name(),
                    message,
                )),
            },
        }
    }
}

fn planned(
    template: &ExecTemplate,
    container: String,
    source: &str,
    name: &str,
    index: usize,
    config: &EngineConfig,
) -> PlannedHook {
    PlannedHook {
        name: name.to_string(),
        source: source.to_string(),
        index,
        container,
        command: template.command.clone(),
        on_error: template.on_error,
        exec_timeout_ms: template.exec_timeout_ms,
        wait_timeout_ms: template
            .wait_timeout
            .effective(config.default_wait_timeout_ms),
        wait_for_ready: template.wait_for_ready,
        allowed_by: None,
        refused: None,
        invalid: None,
        run_on: RunOn::EveryPod,
        after: Vec::new(),
        retry: None,
        ephemeral: None,
    }
}

/// A plan entry for an invalid hook the pod is admitted without (docs/behaviour.md §3.6): it says
/// where the hook is and what is wrong, has no command, and the controller records it `Failed`.
pub fn invalid_hook(problem: &Problem, config: &EngineConfig) -> PlannedHook {
    // `restorehook/pg postHooks[1].exec`, `velero-restore/r resources[0] "db" postHooks[0].init`,
    // `annotation`: the plan source is the first word.
    let source = problem
        .source
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    let name = match source.split_once('/') {
        None => ANNOTATION_HOOK_NAME.to_string(),
        Some((_, object)) => problem
            .source
            .split('"')
            .nth(1)
            .unwrap_or(object)
            .to_string(),
    };
    let index = problem
        .source
        .split_once("postHooks[")
        .and_then(|(_, rest)| rest.split(']').next()?.parse().ok())
        .unwrap_or(0);
    PlannedHook {
        name,
        source,
        index,
        container: String::new(),
        command: Vec::new(),
        on_error: OnError::Continue,
        exec_timeout_ms: DEFAULT_EXEC_TIMEOUT_MS,
        wait_timeout_ms: config.default_wait_timeout_ms,
        wait_for_ready: false,
        allowed_by: None,
        refused: None,
        invalid: Some(format!("invalid, not executed: {problem}")),
        run_on: RunOn::EveryPod,
        after: Vec::new(),
        retry: None,
        ephemeral: None,
    }
}

/// An exec hook's argv with the restore's parameters expanded (docs/behaviour.md §2.8). A
/// `generateName` pod has no name at admission: `$(POD_NAME)` stays as written, with a warning
/// that says what to use instead.
fn expand_command(
    command: &[String],
    parameters: &RestoreParameters,
    location: &str,
    out: &mut Resolution,
) -> Vec<String> {
    let expanded: Vec<String> = command.iter().map(|a| parameters.expand(a)).collect();
    if parameters.get("POD_NAME").is_none() && command.iter().any(|a| references(a, "POD_NAME")) {
        out.notes.push(format!(
            "hook {location}: $(POD_NAME) stays as written: the API server names a generateName \
             pod only after admission (in a shell, use $HOSTNAME, which is the pod's name)"
        ));
    }
    expanded
}

/// `--max-exec-timeout`: a hook may not hold an exec slot longer than this (docs/behaviour.md
/// §6.11); a longer timeout is capped, with a warning.
fn cap_exec_timeouts(out: &mut Resolution, config: &EngineConfig) {
    let cap = config.max_exec_timeout_ms;
    for hook in &mut out.exec {
        if hook.exec_timeout_ms > cap {
            out.notes.push(format!(
                "hook {} (#{}, {}): execTimeout {} exceeds --max-exec-timeout {}; capped",
                hook.name,
                hook.index,
                hook.source,
                crate::hooks::duration::format_go_duration(hook.exec_timeout_ms),
                crate::hooks::duration::format_go_duration(cap)
            ));
            hook.exec_timeout_ms = cap;
        }
    }
}
