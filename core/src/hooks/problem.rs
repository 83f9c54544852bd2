//! Invalid hook definitions, typed: where the hook is, which field is wrong, and why
//! (docs/behaviour.md §3.4). The field is data, not part of a message, so that the annotation a
//! denial tells the operator to fix never depends on the wording of a message.

use std::fmt;

/// An invalid hook definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The hook: `annotation`, `restorehook/pg postHooks[1].exec`,
    /// `velero-restore/nightly resources[0] "db" postHooks[0].init`, ...
    pub source: String,
    /// The field at fault, when one is: an annotation key (`post.hook.restore.velero.io/on-error`)
    /// or a spec field (`onError`, `initContainers[0]`, `labelSelector`).
    pub field: Option<String>,
    /// What is wrong, for the operator: shown after the source and field in a denial or admission
    /// warning (docs/behaviour.md §3.6).
    pub message: String,
}

impl Problem {
    /// A problem no single field is named for (the location in `source` says enough), e.g. a
    /// volume mount or a name clash of an init container.
    pub fn new(source: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            field: None,
            message: message.into(),
        }
    }

    /// A problem with one field of the hook: an annotation key or a spec field path.
    pub fn at(
        source: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            source: source.into(),
            field: Some(field.into()),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{} {field}: {}", self.source, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}

/// The fields of an exec hook, as spec and annotation name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecField {
    /// `container` / `post.hook.restore.velero.io/container`: the target container.
    Container,
    /// `command` / `post.hook.restore.velero.io/command`: argv.
    Command,
    /// `onError` / `post.hook.restore.velero.io/on-error`: `Continue` or `Fail`.
    OnError,
    /// `execTimeout` / `post.hook.restore.velero.io/exec-timeout`: Go duration.
    ExecTimeout,
    /// `waitTimeout` / `post.hook.restore.velero.io/wait-timeout`: Go duration.
    WaitTimeout,
    /// `waitForReady` / `post.hook.restore.velero.io/wait-for-ready`: boolean.
    WaitForReady,
    /// `runOn` (hook objects only): `EveryPod` or `OnePod`.
    RunOn,
    /// `after` (hook objects only): hooks this one waits for.
    After,
    /// `retry` (hook objects only): attempts and waits after a failure.
    Retry,
    /// `image` / `volumeMounts` / `copyTargetEnv` (hook objects only): an ephemeral container
    /// to run in.
    Image,
    /// `securityContext` (hook objects, with `image`): the ephemeral container's.
    SecurityContext,
    /// `env` (hook objects, with `image`): the ephemeral container's environment variables.
    Env,
    /// `envFrom` (hook objects, with `image`): Secrets and ConfigMaps as environment variables.
    EnvFrom,
}

impl ExecField {
    /// The field's name in a RestoreHook / Velero Restore `exec` hook.
    pub fn spec_name(self) -> &'static str {
        match self {
            ExecField::Container => "container",
            ExecField::Command => "command",
            ExecField::OnError => "onError",
            ExecField::ExecTimeout => "execTimeout",
            ExecField::WaitTimeout => "waitTimeout",
            ExecField::WaitForReady => "waitForReady",
            ExecField::RunOn => "runOn",
            ExecField::After => "after",
            ExecField::Retry => "retry",
            ExecField::Image => "image",
            ExecField::SecurityContext => "securityContext",
            ExecField::Env => "env",
            ExecField::EnvFrom => "envFrom",
        }
    }

    /// The Velero pod annotation that sets the field.
    pub fn annotation(self) -> &'static str {
        use super::annotations as ann;
        match self {
            ExecField::Container => ann::POST_CONTAINER,
            ExecField::Command => ann::POST_COMMAND,
            ExecField::OnError => ann::POST_ON_ERROR,
            ExecField::ExecTimeout => ann::POST_EXEC_TIMEOUT,
            ExecField::WaitTimeout => ann::POST_WAIT_TIMEOUT,
            ExecField::WaitForReady => ann::POST_WAIT_FOR_READY,
            // Velero's annotations have no such key: a pod's own hook runs in that pod.
            ExecField::RunOn => "runOn (hook objects only)",
            ExecField::After => "after (hook objects only)",
            ExecField::Retry => "retry (hook objects only)",
            ExecField::Image => "image (hook objects only)",
            ExecField::SecurityContext => "securityContext (hook objects only)",
            ExecField::Env => "env (hook objects only)",
            ExecField::EnvFrom => "envFrom (hook objects only)",
        }
    }
}

/// What is wrong with one field of an exec hook.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExecFieldError {
    /// The field at fault; the caller names it by [`ExecField::spec_name`] or
    /// [`ExecField::annotation`], depending on the hook's source.
    pub field: ExecField,
    /// Why the value is invalid (docs/behaviour.md §3.4).
    pub message: String,
}

impl ExecFieldError {
    /// An error for `field` with this message.
    pub fn new(field: ExecField, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}
