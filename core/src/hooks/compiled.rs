//! Hook objects compiled once, when they arrive from a watch or a file: globs and selectors built,
//! durations and commands parsed, init containers checked. What is left for admission depends on
//! the pod alone (its labels, containers and volumes); a definition that cannot work is recorded
//! here as a [`Problem`] and reported for the pods it concerns (docs/behaviour.md §3.4).
//!
//! The module is long because it is the one place for every rule of §3.4 that does not depend on
//! the pod: the compilers of the three source kinds, the exec-hook defaults and the init container
//! checks, each naming the exact location of a problem.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use serde::Deserialize;
use serde_json::Value;

use super::duration::{DurationError, format_go_duration, parse_go_duration};
use super::ephemeral::EphemeralFields;
use super::labels::LabelLookup;
use super::patterns::{IncludesExcludes, NamePattern};
use super::plan::{
    AfterRef, DEFAULT_EXEC_TIMEOUT_MS, EphemeralPlan, HookKind, MAX_AFTER, OnError, RetryPlan,
    RunOn,
};
use super::problem::{ExecField, ExecFieldError, Problem};
use super::selector::Selector;
use super::types::{
    AfterHook, ClusterRestoreHook, ExecRestoreHook, HookEnvFromSource, HookEnvVar,
    HookSecurityContext, HookVolumeMount, Labels, PodAnnotationHooks, RestoreHook,
    RestoreResourceHook, RestoreResourceHookSpec, RetryPolicy, VeleroRestore,
};
use super::window::RestoreWindow;

/// Which kind of object a compiled source came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    /// A Velero `Restore`'s `spec.hooks.resources[]` (docs/behaviour.md §2.4); plan source
    /// `velero-restore/<name>`.
    VeleroRestore,
    /// A ClusterRestoreHook (§2.6); plan source `clusterrestorehook/<name>`.
    ClusterRestoreHook,
    /// A RestoreHook (§2.5); plan source `restorehook/<name>`.
    RestoreHook,
}

impl From<HookKind> for SourceKind {
    fn from(kind: HookKind) -> Self {
        match kind {
            HookKind::RestoreHook => SourceKind::RestoreHook,
            HookKind::ClusterRestoreHook => SourceKind::ClusterRestoreHook,
        }
    }
}

impl SourceKind {
    /// The prefix of plan `source` values.
    pub fn prefix(self) -> &'static str {
        match self {
            SourceKind::VeleroRestore => "velero-restore",
            SourceKind::ClusterRestoreHook => "clusterrestorehook",
            SourceKind::RestoreHook => "restorehook",
        }
    }

    /// The kind and name of the object a plan `source` names, if it names a hook object.
    pub fn parse_source(source: &str) -> Option<(SourceKind, &str)> {
        let (prefix, name) = source.split_once('/')?;
        [
            SourceKind::VeleroRestore,
            SourceKind::ClusterRestoreHook,
            SourceKind::RestoreHook,
        ]
        .into_iter()
        .find(|k| k.prefix() == prefix)
        .map(|k| (k, name))
    }
}

/// One hook object (a RestoreHook, a ClusterRestoreHook or a Velero Restore), compiled.
#[derive(Clone, Debug)]
pub struct CompiledObject {
    /// Which kind of object it is; also the source order of its hooks (§3.2).
    pub kind: SourceKind,
    /// `metadata.namespace`; `None` for a ClusterRestoreHook.
    pub namespace: Option<String>,
    /// `metadata.name`: the plan `source` suffix, and for hook objects the hooks' plan `name`.
    pub name: String,
    /// `metadata.generation` compiled; the webhook reports it in `status.webhooks` (§8.2).
    pub generation: Option<i64>,
    /// `resources[]` of a Velero Restore; one entry for the hook kinds.
    pub entries: Vec<CompiledEntry>,
    /// A Velero Restore's `spec.backupName` (docs/behaviour.md §2.8).
    pub backup_name: Option<String>,
    /// A Velero Restore's `spec.namespaceMapping`, source → target (§2.8).
    pub namespace_mapping: BTreeMap<String, String>,
    /// A Velero Restore's window: when it ran and which namespaces it writes to (§1.6).
    pub window: Option<RestoreWindow>,
}

impl CompiledObject {
    /// The plan `source` of this object's hooks.
    pub fn source(&self) -> String {
        format!("{}/{}", self.kind.prefix(), self.name)
    }

    /// The first thing that keeps this object from applying as written, if any.
    pub fn first_problem(&self) -> Option<&Problem> {
        self.entries.iter().find_map(|e| {
            e.filter.as_ref().err().or_else(|| {
                e.post_hooks.iter().find_map(|p| {
                    p.init
                        .as_ref()
                        .and_then(|i| i.as_ref().err())
                        .or_else(|| p.exec.as_ref().and_then(|x| x.as_ref().err()))
                })
            })
        })
    }
}

/// A set of `postHooks` and the pods it selects.
#[derive(Clone, Debug)]
pub struct CompiledEntry {
    /// The plan `source` of its hooks (`velero-restore/<name>`, `restorehook/<name>`, ...).
    pub source: String,
    /// The plan `name` of its hooks: the Velero entry's name or the hook object's name.
    pub name: String,
    /// Where problems are reported: `restorehook/pg`, `velero-restore/r resources[0] "db"`.
    pub location: String,
    /// Which pods it selects, or why that cannot be told (bad glob or selector): then the entry is
    /// invalid for every pod it could apply to (§3.4 rows 10-11).
    pub filter: Result<EntryFilter, Problem>,
    /// Its `postHooks[]`, in spec order.
    pub post_hooks: Vec<CompiledPostHook>,
    /// `podAnnotationHooks: Allow` (hook objects only): the annotation exec hooks of the pods it
    /// selects run whoever created them (docs/behaviour.md §9.9).
    pub allows_pod_annotation_hooks: bool,
}

impl CompiledEntry {
    /// Whether it comes from a RestoreHook or ClusterRestoreHook (not Velero): only those hooks
    /// take parameters (docs/behaviour.md §2.8).
    pub fn is_hook_object(&self) -> bool {
        !matches!(
            SourceKind::parse_source(&self.source),
            Some((SourceKind::VeleroRestore, _))
        )
    }
}

/// Which pods an entry selects.
#[derive(Clone, Debug)]
pub struct EntryFilter {
    /// The namespaces whose pods it can select.
    pub namespaces: NamespaceFilter,
    /// `restores` globs; `None` matches every restore.
    pub restores: Option<Vec<NamePattern>>,
    /// `labelSelector` over the pod's labels as admitted (§2.7); absent matches every pod.
    pub pods: Selector,
    /// Velero entries whose resources exclude pods never apply (docs/behaviour.md §2.4).
    pub applies_to_pods: bool,
}

/// How an entry selects namespaces, per source kind (§2.4-§2.6).
#[derive(Clone, Debug)]
pub enum NamespaceFilter {
    /// A RestoreHook: its own namespace (the index only offers it there).
    Own,
    /// Velero's `includedNamespaces` / `excludedNamespaces`.
    Velero(IncludesExcludes),
    /// A ClusterRestoreHook's `namespaceSelector`, over the namespace's labels.
    Labels(Selector),
}

impl EntryFilter {
    /// Whether the entry selects a pod with `labels`, in `namespace` (with `namespace_labels`),
    /// of restore `restore`.
    pub fn matches<N: LabelLookup>(
        &self,
        namespace: &str,
        namespace_labels: Option<&N>,
        restore: &str,
        labels: &dyn LabelLookup,
    ) -> bool {
        self.may_apply(namespace, namespace_labels, restore) && self.pods.matches(labels)
    }

    /// Whether the entry can select pods of `namespace` (with `namespace_labels`) in restore
    /// `restore`, whatever their labels.
    pub fn may_apply<N: LabelLookup>(
        &self,
        namespace: &str,
        namespace_labels: Option<&N>,
        restore: &str,
    ) -> bool {
        let namespace_ok = match &self.namespaces {
            NamespaceFilter::Own => true,
            NamespaceFilter::Velero(ie) => ie.should_include(namespace),
            NamespaceFilter::Labels(sel) => match namespace_labels {
                Some(labels) => sel.matches(labels),
                None => sel.matches(&Labels::new()),
            },
        };
        namespace_ok
            && self.applies_to_pods
            && self
                .restores
                .as_ref()
                .is_none_or(|ps| ps.iter().any(|p| p.matches(restore)))
    }
}

/// One `postHooks[]` element, compiled.
#[derive(Clone, Debug)]
pub struct CompiledPostHook {
    /// Position in `postHooks` (the plan's `index`).
    pub index: usize,
    /// The element's `init.initContainers`, checked; an error drops the whole element's init hook
    /// (all-or-nothing, §3.4).
    pub init: Option<Result<Vec<HookContainer>, Problem>>,
    /// The element's `exec` hook with defaults applied, or why it is invalid.
    pub exec: Option<Result<ExecTemplate, Problem>>,
    /// `<entry location> postHooks[<index>].init`: the init hook's `source` in resolutions and
    /// problems, written once here rather than for every pod it applies to.
    pub init_source: String,
    /// `<entry location> postHooks[<index>].exec`: where notes and problems about the exec hook
    /// point, written once here rather than for every pod it applies to.
    pub exec_location: String,
}

/// An exec hook with every default applied, except what depends on the pod (its container).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecTemplate {
    /// `None`: the pod's first container.
    pub container: Option<String>,
    /// argv, never empty (§5.2 `command`).
    pub command: Vec<String>,
    /// `onError`, default `Continue` (§6.7).
    pub on_error: OnError,
    /// Exec timeout in milliseconds, unset or zero: 30000 (§5.2); resolving it for a pod caps it
    /// at `--max-exec-timeout` (§6.6).
    pub exec_timeout_ms: u64,
    /// Wait timeout from the pod's creation (§6.5).
    pub wait_timeout: WaitTimeout,
    /// Whether the container must be Ready, not only Running, before the hook runs (§6.4).
    pub wait_for_ready: bool,
    /// `runOn` (§6.15); only hook objects' hooks keep `OnePod` (see `expand_exec`).
    pub run_on: RunOn,
    /// `after` (§6.16): the hooks it waits for as written (an unset kind or namespace is the
    /// waiting pod's, filled in when it is resolved for a pod), without repeats; only hook
    /// objects' hooks keep them.
    pub after: Vec<AfterRef>,
    /// `retry` (§6.17) with its defaults; `None`: one attempt. Only hook objects' hooks keep it.
    pub retry: Option<RetryPlan>,
    /// `image` and the ephemeral container's fields (§6.18), its securityContext as written;
    /// only hook objects' hooks keep them.
    pub ephemeral: Option<EphemeralPlan>,
    /// Whether an argument holds a `$` (a `$(NAME)` or an escaped `$$`): only then can expanding
    /// the parameters of a hook object's hook (§2.8) change the command.
    pub expands: bool,
}

/// A hook's `waitTimeout` as its author wrote it (docs/behaviour.md §5.2, §6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitTimeout {
    /// Not set: `--default-wait-timeout` applies.
    Default,
    /// Set to zero: no limit, whatever the default.
    NoLimit,
    /// This many milliseconds.
    Millis(u64),
}

impl WaitTimeout {
    /// The plan's `waitTimeoutMs`: `None` is no limit. `default_ms` is `--default-wait-timeout`
    /// (`None` when it is 0).
    pub fn effective(self, default_ms: Option<u64>) -> Option<u64> {
        match self {
            WaitTimeout::Default => default_ms,
            WaitTimeout::NoLimit => None,
            WaitTimeout::Millis(ms) => Some(ms),
        }
    }
}

/// The un-defaulted fields of an exec hook, from annotations or a spec.
#[derive(Clone, Debug, Default)]
pub struct ExecFields<'a> {
    /// `container` / `post.hook.restore.velero.io/container`; `None` or empty: the pod's first
    /// container.
    pub container: Option<&'a str>,
    /// argv, already parsed (annotations by the command rule, §2.2); empty is invalid.
    pub command: Vec<String>,
    /// `onError` as written: `Continue`, `Fail` or unset.
    pub on_error: Option<&'a str>,
    /// `execTimeout` as written (Go duration); unset, empty or zero: 30s.
    pub exec_timeout: Option<&'a str>,
    /// `waitTimeout` as written (Go duration); unset or empty: `--default-wait-timeout`; zero:
    /// no limit.
    pub wait_timeout: Option<&'a str>,
    /// `waitForReady`, already parsed; unset is `false`.
    pub wait_for_ready: bool,
    /// `runOn` as written: `EveryPod`, `OnePod` or unset.
    pub run_on: Option<&'a str>,
    /// `after[]` as written.
    pub after: Vec<&'a AfterHook>,
    /// `retry` as written.
    pub retry: Option<&'a RetryPolicy>,
    /// `image` as written.
    pub image: Option<&'a str>,
    /// `volumeMounts` as written.
    pub volume_mounts: &'a [HookVolumeMount],
    /// `securityContext` as written.
    pub security_context: Option<&'a HookSecurityContext>,
    /// `env` as written.
    pub env: &'a [HookEnvVar],
    /// `envFrom` as written.
    pub env_from: &'a [HookEnvFromSource],
    /// `copyTargetEnv`; unset is `false`.
    pub copy_target_env: bool,
}

impl<'a> ExecFields<'a> {
    /// The fields of a spec `exec` hook (Velero Restore entry or hook object).
    pub fn of_spec(exec: &'a ExecRestoreHook) -> Self {
        ExecFields {
            container: exec.container.as_deref(),
            command: exec.command.clone(),
            on_error: exec.on_error.as_deref(),
            exec_timeout: exec.exec_timeout.as_deref(),
            wait_timeout: exec.wait_timeout.as_deref(),
            wait_for_ready: exec.wait_for_ready.unwrap_or(false),
            run_on: exec.run_on.as_deref(),
            after: exec.after.iter().collect(),
            retry: exec.retry.as_ref(),
            image: exec.image.as_deref(),
            volume_mounts: &exec.volume_mounts,
            security_context: exec.security_context.as_ref(),
            env: &exec.env,
            env_from: &exec.env_from,
            copy_target_env: exec.copy_target_env.unwrap_or(false),
        }
    }
}

/// Applies the defaults of docs/behaviour.md §5.2 and validates what can be validated without
/// the pod.
pub fn exec_template(fields: ExecFields<'_>) -> Result<ExecTemplate, ExecFieldError> {
    if fields.command.is_empty() {
        return Err(ExecFieldError::new(
            ExecField::Command,
            "exec hook has no command; set it to the argv to run, e.g. [\"/bin/sh\", \"-c\", \"...\"]",
        ));
    }
    let on_error = match fields.on_error {
        None | Some("") | Some("Continue") => OnError::Continue,
        Some("Fail") => OnError::Fail,
        Some(other) => {
            return Err(ExecFieldError::new(
                ExecField::OnError,
                format!("{other:?} is neither Continue nor Fail (the values are case-sensitive)"),
            ));
        }
    };
    let millis = |field: ExecField, value: Option<&str>| -> Result<u64, ExecFieldError> {
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            return Ok(0);
        };
        let nanos =
            parse_go_duration(value).map_err(|e| ExecFieldError::new(field, e.to_string()))?;
        if nanos < 0 {
            return Err(ExecFieldError::new(
                field,
                DurationError::Negative(value.to_string()).to_string(),
            ));
        }
        // Round up so that "1ns" does not become "no limit".
        Ok((nanos as u64).div_ceil(1_000_000))
    };
    let exec_timeout_ms = match millis(ExecField::ExecTimeout, fields.exec_timeout)? {
        0 => DEFAULT_EXEC_TIMEOUT_MS,
        ms => ms,
    };
    let run_on = match fields.run_on {
        None | Some("") | Some("EveryPod") => RunOn::EveryPod,
        Some("OnePod") => RunOn::OnePod,
        Some(other) => {
            return Err(ExecFieldError::new(
                ExecField::RunOn,
                format!("{other:?} is neither EveryPod nor OnePod (the values are case-sensitive)"),
            ));
        }
    };
    let mut after: Vec<AfterRef> = Vec::new();
    for entry in fields.after {
        let invalid = |what: String| ExecFieldError::new(ExecField::After, what);
        if entry.hook.is_empty() {
            return Err(invalid(
                "an entry has no hook name; name the RestoreHook or ClusterRestoreHook to wait for"
                    .into(),
            ));
        }
        let kind = match entry.kind.as_deref() {
            None | Some("") => None,
            Some("RestoreHook") => Some(HookKind::RestoreHook),
            Some("ClusterRestoreHook") => Some(HookKind::ClusterRestoreHook),
            Some(other) => {
                return Err(invalid(format!(
                    "kind {other:?} of hook {} is neither RestoreHook nor ClusterRestoreHook",
                    entry.hook
                )));
            }
        };
        let namespace = entry.namespace.as_deref().filter(|n| !n.is_empty());
        if let Some(ns) = namespace.filter(|ns| !is_dns_label(ns)) {
            return Err(invalid(format!(
                "namespace {ns:?} of hook {} is not a namespace name",
                entry.hook
            )));
        }
        let awaited = AfterRef {
            hook: entry.hook.clone(),
            kind,
            namespace: namespace.map(str::to_string),
        };
        if !after.contains(&awaited) {
            after.push(awaited);
        }
    }
    if after.len() > MAX_AFTER {
        return Err(ExecFieldError::new(
            ExecField::After,
            format!(
                "waits for {} hooks; at most {} are allowed",
                after.len(),
                MAX_AFTER
            ),
        ));
    }
    let retry = fields.retry.map(retry_plan).transpose()?;
    let ephemeral = super::ephemeral::compile(EphemeralFields {
        image: fields.image,
        volume_mounts: fields.volume_mounts,
        security_context: fields.security_context,
        env: fields.env,
        env_from: fields.env_from,
        copy_target_env: fields.copy_target_env,
    })?;
    let wait_timeout = match fields.wait_timeout.filter(|v| !v.is_empty()) {
        None => WaitTimeout::Default,
        set => match millis(ExecField::WaitTimeout, set)? {
            0 => WaitTimeout::NoLimit,
            ms => WaitTimeout::Millis(ms),
        },
    };
    let expands = fields.command.iter().any(|arg| arg.contains('$'));
    Ok(ExecTemplate {
        container: fields
            .container
            .filter(|c| !c.is_empty())
            .map(str::to_string),
        command: fields.command,
        on_error,
        exec_timeout_ms,
        wait_timeout,
        wait_for_ready: fields.wait_for_ready,
        run_on,
        after,
        retry: retry.flatten(),
        ephemeral,
        expands,
    })
}

/// `retry` with its defaults (docs/behaviour.md §6.17): 3 attempts, 1s doubling to at most 30s.
/// One attempt is no retry: `None`.
fn retry_plan(policy: &RetryPolicy) -> Result<Option<RetryPlan>, ExecFieldError> {
    let invalid = |what: String| ExecFieldError::new(ExecField::Retry, what);
    let attempts = policy.attempts.unwrap_or(3);
    if !(1..=10).contains(&attempts) {
        return Err(invalid(format!(
            "attempts {attempts} is out of range; give 1 to 10 (the first attempt included)"
        )));
    }
    let duration =
        |field: &str, value: Option<&str>, default_ms: u64| -> Result<u64, ExecFieldError> {
            let Some(value) = value.filter(|v| !v.is_empty()) else {
                return Ok(default_ms);
            };
            match parse_go_duration(value) {
                Ok(nanos) if nanos > 0 => Ok((nanos as u64).div_ceil(1_000_000)),
                Ok(_) => Err(invalid(format!("{field} {value:?} must be positive"))),
                Err(e) => Err(invalid(format!("{field}: {e}"))),
            }
        };
    let backoff_ms = duration("backoff", policy.backoff.as_deref(), 1_000)?;
    let max_backoff_ms = duration("maxBackoff", policy.max_backoff.as_deref(), 30_000)?;
    if max_backoff_ms < backoff_ms {
        return Err(invalid(format!(
            "maxBackoff ({}) is shorter than backoff ({}); make it at least as long",
            format_go_duration(max_backoff_ms),
            format_go_duration(backoff_ms)
        )));
    }
    let mut on_exit_codes = policy.on_exit_codes.clone();
    on_exit_codes.sort_unstable();
    on_exit_codes.dedup();
    if on_exit_codes.contains(&0) {
        return Err(invalid(
            "onExitCodes lists 0, which is success; list the failure codes to retry".to_string(),
        ));
    }
    Ok((attempts > 1).then(|| RetryPlan {
        attempts,
        backoff_ms,
        max_backoff_ms,
        on_exit_codes,
        idempotent: policy.idempotent.unwrap_or(false),
    }))
}

/// An init container a hook injects.
#[derive(Clone, Debug, PartialEq)]
pub struct HookContainer {
    /// The container's `name`, a lowercase RFC 1123 label; clashes are decided by it (§4.3, §4.4).
    pub name: String,
    /// What "same definition" compares (§4.3).
    pub definition: Definition,
    /// Volumes its `volumeMounts` name (each must exist in the pod).
    pub mounts: Vec<String>,
    /// The container exactly as it goes into the patch (unknown fields preserved).
    pub value: Value,
    /// The parameters (docs/behaviour.md §2.8) its `command`, `args` or `env` values use and its
    /// own `env` does not define, in [`super::parameters::NAMES`] order: the env entries a hook
    /// object's container gets at admission ([`super::parameters::RestoreParameters::provide_to`]).
    /// Found once, when the container is compiled; empty for Velero's containers, never expanded.
    pub parameters: Vec<&'static str>,
}

/// What makes two init containers "the same" (docs/behaviour.md §4.3): image, command, args,
/// env and volumeMounts. An empty list and an absent one are the same.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Definition {
    /// `image`, never empty.
    pub image: String,
    /// `command`; empty means the image entrypoint.
    pub command: Vec<String>,
    /// `args`.
    pub args: Vec<String>,
    /// `env` as raw JSON, normalised by [`Definition::normalise`].
    pub env: Value,
    /// `volumeMounts` as raw JSON, normalised by [`Definition::normalise`].
    pub volume_mounts: Value,
}

impl Definition {
    /// `null`, absent and `[]` are all "none".
    pub fn normalise(list: Option<&Value>) -> Value {
        match list {
            None | Some(Value::Null) => Value::Null,
            Some(Value::Array(a)) if a.is_empty() => Value::Null,
            Some(v) => v.clone(),
        }
    }
}

/// A container name must be a lowercase RFC 1123 label.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Checks one spec init container (a full core/v1 Container as raw JSON).
pub fn spec_init_container(value: &Value, position: usize) -> Result<HookContainer, String> {
    let at = format!("initContainers[{position}]");
    if !value.is_object() {
        return Err(format!("{at} is not an object"));
    }
    let container =
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
    let image = container.image.clone().unwrap_or_default();
    if image.is_empty() {
        return Err(format!("{at} has no image"));
    }
    let definition = Definition {
        image,
        command: container.command.clone().unwrap_or_default(),
        args: container.args.clone().unwrap_or_default(),
        env: Definition::normalise(value.get("env")),
        volume_mounts: Definition::normalise(value.get("volumeMounts")),
    };
    // Velero requires a command; we allow the image entrypoint, as for annotations.
    Ok(HookContainer {
        mounts: container
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.clone())
            .collect(),
        parameters: super::parameters::used_parameters(&definition, value),
        definition,
        name: container.name,
        value: value.clone(),
    })
}

/// `restore_hook_namespace`: the namespace of a RestoreHook, whose `after` never reaches past it
/// (docs/behaviour.md §6.16): a namespace's objects never change another namespace's pods.
fn compile_post_hooks(
    location: &str,
    post_hooks: &[RestoreResourceHook],
    restore_hook_namespace: Option<&str>,
) -> Vec<CompiledPostHook> {
    post_hooks
        .iter()
        .enumerate()
        .map(|(j, post)| CompiledPostHook {
            index: j,
            init_source: format!("{location} postHooks[{j}].init"),
            exec_location: format!("{location} postHooks[{j}].exec"),
            init: post.init.as_ref().map(|init| {
                init.init_containers
                    .iter()
                    .enumerate()
                    .map(|(k, v)| spec_init_container(v, k))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|message| {
                        Problem::new(format!("{location} postHooks[{j}].init"), message)
                    })
            }),
            exec: post.exec.as_ref().map(|exec| {
                let at = format!("{location} postHooks[{j}].exec");
                let template = exec_template(ExecFields::of_spec(exec))
                    .map_err(|e| Problem::at(&at, e.field.spec_name(), e.message))?;
                let elsewhere = restore_hook_namespace.and_then(|own| {
                    template
                        .after
                        .iter()
                        .find(|a| a.namespace.as_deref().is_some_and(|ns| ns != own))
                });
                if let Some(a) = elsewhere {
                    return Err(Problem::at(
                        &at,
                        ExecField::After.spec_name(),
                        format!(
                            "hook {} in namespace {}: a RestoreHook waits only for hooks in its \
                             own namespace ({}); order hooks across namespaces with a \
                             ClusterRestoreHook",
                            a.hook,
                            a.namespace.as_deref().unwrap_or_default(),
                            restore_hook_namespace.unwrap_or_default()
                        ),
                    ));
                }
                Ok(template)
            }),
        })
        .collect()
}

fn compile_restores(patterns: Option<&[String]>) -> Result<Option<Vec<NamePattern>>, String> {
    patterns
        .filter(|r| !r.is_empty())
        .map(|patterns| {
            patterns
                .iter()
                .map(|p| NamePattern::compile(p))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()
        .map_err(|e| e.to_string())
}

/// Velero (with the resources deviation of docs/behaviour.md §11): an entry applies only when its
/// resources are empty, `*` or include pods, and pods are not excluded.
pub(crate) fn applies_to_pods(entry: &RestoreResourceHookSpec) -> bool {
    let is_pods = |r: &String| matches!(r.to_ascii_lowercase().as_str(), "pods" | "pod" | "po");
    let included_ok = entry.included_resources.is_empty()
        || entry
            .included_resources
            .iter()
            .any(|r| r == "*" || is_pods(r));
    let excluded_hit = entry
        .excluded_resources
        .iter()
        .any(|r| r == "*" || is_pods(r));
    included_ok && !excluded_hit
}

/// Compiles a RestoreHook (§2.5): its own namespace, `restores` globs, `labelSelector`,
/// `postHooks`. Problems are kept in the result, never returned as an error.
pub fn compile_restore_hook(hook: &RestoreHook) -> CompiledObject {
    let spec = &hook.spec;
    compile_hook_object(
        SourceKind::RestoreHook,
        &hook.metadata,
        None,
        spec.restores.as_deref(),
        spec.label_selector.as_ref(),
        &spec.post_hooks,
        spec.pod_annotation_hooks,
    )
}

/// Compiles a ClusterRestoreHook: as [`compile_restore_hook`], plus `namespaceSelector` (§2.6).
pub fn compile_cluster_restore_hook(hook: &ClusterRestoreHook) -> CompiledObject {
    let spec = &hook.spec;
    compile_hook_object(
        SourceKind::ClusterRestoreHook,
        &hook.metadata,
        Some(spec.namespace_selector.as_ref()),
        spec.restores.as_deref(),
        spec.label_selector.as_ref(),
        &spec.post_hooks,
        spec.pod_annotation_hooks,
    )
}

/// The two hook-object kinds share their spec but for the namespace rule: `namespaces` is
/// `None` for a RestoreHook (its own namespace) and the `namespaceSelector` of a
/// ClusterRestoreHook.
fn compile_hook_object(
    kind: SourceKind,
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    namespaces: Option<Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>>,
    restores: Option<&[String]>,
    label_selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    post_hooks: &[RestoreResourceHook],
    pod_annotation_hooks: Option<PodAnnotationHooks>,
) -> CompiledObject {
    let name = metadata.name.clone().unwrap_or_default();
    let location = format!("{}/{name}", kind.prefix());
    let filter = compile_restores(restores)
        .map_err(|m| Problem::at(&location, "restores", m))
        .and_then(|restores| {
            let namespaces = match namespaces {
                None => NamespaceFilter::Own,
                Some(selector) => NamespaceFilter::Labels(
                    Selector::compile(selector)
                        .map_err(|e| Problem::at(&location, "namespaceSelector", e.to_string()))?,
                ),
            };
            let pods = Selector::compile(label_selector)
                .map_err(|e| Problem::at(&location, "labelSelector", e.to_string()))?;
            Ok(EntryFilter {
                namespaces,
                restores,
                pods,
                applies_to_pods: true,
            })
        });
    CompiledObject {
        kind,
        namespace: match kind {
            SourceKind::ClusterRestoreHook => None,
            _ => metadata.namespace.clone(),
        },
        generation: metadata.generation,
        entries: vec![CompiledEntry {
            source: location.clone(),
            name: name.clone(),
            filter,
            post_hooks: compile_post_hooks(
                &location,
                post_hooks,
                match kind {
                    SourceKind::RestoreHook => metadata.namespace.as_deref(),
                    _ => None,
                },
            ),
            location,
            allows_pod_annotation_hooks: pod_annotation_hooks == Some(PodAnnotationHooks::Allow),
        }],
        name,
        backup_name: None,
        namespace_mapping: BTreeMap::new(),
        window: None,
    }
}

/// Compiles a Velero Restore: one [`CompiledEntry`] per `spec.hooks.resources[]` entry, in spec
/// order (§2.4).
pub fn compile_velero_restore(restore: &VeleroRestore) -> CompiledObject {
    let name = restore.metadata.name.clone().unwrap_or_default();
    let source = format!("velero-restore/{name}");
    let resources = restore
        .spec
        .hooks
        .as_ref()
        .map(|h| h.resources.as_slice())
        .unwrap_or_default();
    let entries = resources
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let location = format!("{source} resources[{i}] {:?}", entry.name);
            let filter =
                IncludesExcludes::compile(&entry.included_namespaces, &entry.excluded_namespaces)
                    .map_err(|e| {
                        Problem::at(
                            &location,
                            "includedNamespaces/excludedNamespaces",
                            e.to_string(),
                        )
                    })
                    .and_then(|namespaces| {
                        let pods = Selector::compile(entry.label_selector.as_ref())
                            .map_err(|e| Problem::at(&location, "labelSelector", e.to_string()))?;
                        Ok(EntryFilter {
                            namespaces: NamespaceFilter::Velero(namespaces),
                            restores: None,
                            pods,
                            applies_to_pods: applies_to_pods(entry),
                        })
                    });
            CompiledEntry {
                source: source.clone(),
                name: entry.name.clone(),
                filter,
                post_hooks: compile_post_hooks(&location, &entry.post_hooks, None),
                location,
                allows_pod_annotation_hooks: false,
            }
        })
        .collect();
    CompiledObject {
        kind: SourceKind::VeleroRestore,
        namespace: restore.metadata.namespace.clone(),
        generation: restore.metadata.generation,
        entries,
        name,
        backup_name: restore.spec.backup_name.clone(),
        namespace_mapping: restore.spec.namespace_mapping.clone(),
        window: Some(RestoreWindow::of(restore)),
    }
}

/// A hook object that could not be decoded at all: every pod it might select is told why, and
/// one bad object never makes the others unreadable.
pub fn unreadable(
    kind: SourceKind,
    namespace: Option<&str>,
    name: &str,
    generation: Option<i64>,
    reason: &str,
) -> CompiledObject {
    let source = format!("{}/{name}", kind.prefix());
    let expected = match kind {
        SourceKind::VeleroRestore => "a velero.io/v1 Restore",
        SourceKind::ClusterRestoreHook => "a restore-hooks.dev/v1alpha1 ClusterRestoreHook",
        SourceKind::RestoreHook => "a restore-hooks.dev/v1alpha1 RestoreHook",
    };
    CompiledObject {
        kind,
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
        generation,
        entries: vec![CompiledEntry {
            source: source.clone(),
            name: String::new(),
            filter: Err(Problem::new(
                &source,
                format!("the object cannot be read as {expected}: {reason}"),
            )),
            post_hooks: Vec::new(),
            location: source,
            allows_pod_annotation_hooks: false,
        }],
        backup_name: None,
        namespace_mapping: BTreeMap::new(),
        window: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_defaults_and_errors_carry_their_field() {
        let ok = exec_template(ExecFields {
            command: vec!["true".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(ok.on_error, OnError::Continue);
        assert_eq!(ok.exec_timeout_ms, DEFAULT_EXEC_TIMEOUT_MS);
        assert_eq!(ok.wait_timeout, WaitTimeout::Default);
        assert!(!ok.expands, "no `$`: no parameter can change it");
        for command in [["echo", "$(RESTORE_NAME)"], ["echo", "$$"]] {
            let template = exec_template(ExecFields {
                command: command.map(String::from).to_vec(),
                ..Default::default()
            })
            .unwrap();
            assert!(template.expands, "{command:?}");
        }
        let zero = exec_template(ExecFields {
            command: vec!["true".into()],
            wait_timeout: Some("0s"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(zero.wait_timeout, WaitTimeout::NoLimit);
        assert_eq!(zero.wait_timeout.effective(Some(3_600_000)), None);
        assert_eq!(ok.wait_timeout.effective(Some(3_600_000)), Some(3_600_000));
        assert_eq!(ok.wait_timeout.effective(None), None);

        let with = |f: ExecFields<'static>| exec_template(f).unwrap_err().field;
        let base = || ExecFields {
            command: vec!["true".into()],
            ..Default::default()
        };
        assert_eq!(with(ExecFields::default()), ExecField::Command);
        assert_eq!(
            with(ExecFields {
                on_error: Some("fail"),
                ..base()
            }),
            ExecField::OnError
        );
        assert_eq!(
            with(ExecFields {
                exec_timeout: Some("5"),
                ..base()
            }),
            ExecField::ExecTimeout
        );
        assert_eq!(
            with(ExecFields {
                wait_timeout: Some("-1s"),
                ..base()
            }),
            ExecField::WaitTimeout
        );
        // `after` entries: (hook, kind, namespace) as written.
        let after = |entries: &[(&str, Option<&str>, Option<&str>)]| -> Vec<&'static AfterHook> {
            entries
                .iter()
                .map(|(hook, kind, namespace)| {
                    &*Box::leak(Box::new(AfterHook {
                        hook: hook.to_string(),
                        kind: kind.map(str::to_string),
                        namespace: namespace.map(str::to_string),
                    }))
                })
                .collect()
        };
        for bad in [
            after(&[("db", None, None), ("", None, None)]),
            after(&[("db", Some("Deployment"), None)]),
            after(&[("db", None, Some("Not_A_Namespace"))]),
        ] {
            assert_eq!(
                with(ExecFields {
                    after: bad,
                    ..base()
                }),
                ExecField::After
            );
        }
        let names: Vec<(String, Option<&str>, Option<&str>)> = (0..=MAX_AFTER)
            .map(|i| (format!("h{i}"), None, None))
            .collect();
        let names: Vec<(&str, Option<&str>, Option<&str>)> =
            names.iter().map(|(n, k, s)| (n.as_str(), *k, *s)).collect();
        let too_many = exec_template(ExecFields {
            after: after(&names),
            ..base()
        })
        .unwrap_err();
        assert_eq!(
            (too_many.field, too_many.message.as_str()),
            (
                ExecField::After,
                "waits for 17 hooks; at most 16 are allowed"
            )
        );
        let repeated = exec_template(ExecFields {
            after: after(&[
                ("db", None, None),
                ("cache", Some("ClusterRestoreHook"), Some("data")),
                ("db", None, None),
                ("db", Some("ClusterRestoreHook"), None),
            ]),
            ..base()
        })
        .unwrap();
        let kept: Vec<(&str, Option<HookKind>, Option<&str>)> = repeated
            .after
            .iter()
            .map(|a| (a.hook.as_str(), a.kind, a.namespace.as_deref()))
            .collect();
        assert_eq!(
            kept,
            [
                ("db", None, None),
                ("cache", Some(HookKind::ClusterRestoreHook), Some("data")),
                ("db", Some(HookKind::ClusterRestoreHook), None),
            ],
            "repeats are dropped; the same name of another kind is another hook"
        );
        let retry = |policy: RetryPolicy| {
            retry_plan(&policy).map_err(|e| {
                assert_eq!(e.field, ExecField::Retry);
                e.message
            })
        };
        assert_eq!(
            retry(RetryPolicy::default()),
            Ok(Some(RetryPlan {
                attempts: 3,
                backoff_ms: 1_000,
                max_backoff_ms: 30_000,
                on_exit_codes: vec![],
                idempotent: false
            })),
            "defaults"
        );
        assert_eq!(
            retry(RetryPolicy {
                attempts: Some(1),
                ..Default::default()
            }),
            Ok(None),
            "one attempt is no retry"
        );
        for (policy, message) in [
            (
                RetryPolicy {
                    attempts: Some(11),
                    ..Default::default()
                },
                "attempts 11 is out of range; give 1 to 10 (the first attempt included)",
            ),
            (
                RetryPolicy {
                    backoff: Some("0s".into()),
                    ..Default::default()
                },
                "backoff \"0s\" must be positive",
            ),
            (
                RetryPolicy {
                    backoff: Some("1m".into()),
                    max_backoff: Some("10s".into()),
                    ..Default::default()
                },
                "maxBackoff (10s) is shorter than backoff (1m0s); make it at least as long",
            ),
            (
                RetryPolicy {
                    on_exit_codes: vec![75, 0],
                    ..Default::default()
                },
                "onExitCodes lists 0, which is success; list the failure codes to retry",
            ),
        ] {
            assert_eq!(retry(policy), Err(message.to_string()));
        }
        let rounded = exec_template(ExecFields {
            wait_timeout: Some("1ns"),
            exec_timeout: Some("1500us"),
            ..base()
        })
        .unwrap();
        assert_eq!(
            (rounded.wait_timeout, rounded.exec_timeout_ms),
            (WaitTimeout::Millis(1), 2)
        );
    }

    #[test]
    fn sources_parse_back() {
        for kind in [
            SourceKind::VeleroRestore,
            SourceKind::ClusterRestoreHook,
            SourceKind::RestoreHook,
        ] {
            let source = format!("{}/x", kind.prefix());
            assert_eq!(SourceKind::parse_source(&source), Some((kind, "x")));
        }
        assert_eq!(SourceKind::parse_source("annotation"), None);
        assert_eq!(SourceKind::parse_source("other/x"), None);
    }

    #[test]
    fn definitions_treat_empty_and_absent_alike() {
        let a = spec_init_container(
            &serde_json::json!({"name": "a", "image": "i", "env": []}),
            0,
        )
        .unwrap();
        let b = spec_init_container(
            &serde_json::json!({"name": "a", "image": "i", "command": []}),
            0,
        )
        .unwrap();
        assert_eq!(a.definition, b.definition);
        let c = spec_init_container(
            &serde_json::json!({"name": "a", "image": "i", "args": ["x"]}),
            0,
        )
        .unwrap();
        assert_ne!(a.definition, c.definition);
    }
}
