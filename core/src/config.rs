//! Policy settings shared by the webhook, `inject` and the controller.

/// Who runs the hooks of Velero's own sources (pod annotations and Velero `Restore` objects).
/// What each value means is [`VeleroHooksMode::meaning`], which `--help` shows too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VeleroHooksMode {
    /// Velero runs its own hooks on the pods it created; see [`VeleroHooksMode::meaning`].
    #[default]
    Defer,
    /// restore-hooks runs every source everywhere; see [`VeleroHooksMode::meaning`].
    Own,
}

impl VeleroHooksMode {
    /// The one description of this value (docs/behaviour.md §3.3), for the API docs and
    /// `--help`.
    pub const fn meaning(self) -> &'static str {
        match self {
            Self::Defer => {
                "Velero (1.5 and later) runs its own annotation and Restore hooks on the pods it \
                 creates, and cannot be told not to: on those pods (restore pod label) only \
                 RestoreHooks and ClusterRestoreHooks apply, placed after Velero's own init \
                 hooks. Every other in-scope pod (Velero never sees them: replacement pods in a \
                 labelled restore namespace) gets all four sources (Velero pod annotations, \
                 Velero Restore hooks, ClusterRestoreHooks, RestoreHooks)"
            }
            Self::Own => {
                "All four sources for every in-scope pod. Velero runs its own hooks on the pods \
                 it creates all the same, so there each of them runs twice: for restore tools \
                 other than Velero. With Velero, use defer, and `restore-hooks convert` to move \
                 Velero's hooks into hook objects"
            }
        }
    }
}

/// What to do with a pod whose hook definitions are invalid. What each value means is
/// [`OnInvalid::meaning`], which `--help` shows too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnInvalid {
    /// Refuse the pod; see [`OnInvalid::meaning`].
    #[default]
    Deny,
    /// Admit it without the invalid hooks; see [`OnInvalid::meaning`].
    Warn,
}

impl OnInvalid {
    /// The one description of this value (docs/behaviour.md §3.6), for the API docs and
    /// `--help`.
    pub const fn meaning(self) -> &'static str {
        match self {
            Self::Deny => {
                "Deny the pod with a message naming the pod, the hook source and the problem"
            }
            Self::Warn => {
                "Admit the pod without the invalid hooks, with an admission warning for each"
            }
        }
    }
}

/// Everything the hook rules need to know about the installation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Pod label whose value names the restore (Velero sets `velero.io/restore-name`).
    pub restore_label: String,
    /// Namespace label whose value names the restore.
    pub restore_namespace_label: String,
    /// Namespace holding Velero `Restore` objects.
    pub velero_namespace: String,
    /// `--velero-service-account`: the ServiceAccount (in `velero_namespace`) Velero runs as. Under
    /// `--velero-hooks own`, annotation exec hooks of pods it creates are honoured
    /// (docs/behaviour.md §9.9).
    pub velero_service_account: String,
    /// `--velero-hooks defer|own`: who runs annotation and Velero Restore hooks (docs/behaviour.md
    /// §3.3).
    pub velero_hooks: VeleroHooksMode,
    /// `--on-invalid deny|warn`: deny a pod with an invalid hook, or admit it without that hook
    /// (docs/behaviour.md §3.6).
    pub on_invalid: OnInvalid,
    /// `--max-exec-timeout`: longer exec timeouts are capped (a hook holds an exec slot while it
    /// runs; docs/behaviour.md §6.11).
    pub max_exec_timeout_ms: u64,
    /// `--default-wait-timeout`: the `waitTimeout` of a hook that sets none; `None` (the flag at
    /// 0): no limit, Velero's behaviour (docs/behaviour.md §6.5).
    pub default_wait_timeout_ms: Option<u64>,
    /// Namespaces never mutated and never exec'd into (docs/behaviour.md §1.3).
    pub excluded_namespaces: Vec<String>,
    /// `--restore-window`: how long after a Velero Restore ended the namespaces it wrote to stay
    /// restore namespaces (docs/behaviour.md §1.6).
    pub restore_window_ms: u64,
}

/// Default `--default-wait-timeout`: 1 h. Long enough for a large volume's data to be restored
/// before its container starts; short enough that a restore whose container never comes up ends
/// (docs/behaviour.md §6.5).
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 = 3_600_000;

/// Default `--restore-window`: 30 min, as the late-hook window: long enough for the replacement
/// pods that restored workloads create once Velero is done, short enough that a rollout the next
/// day is an ordinary rollout (docs/behaviour.md §1.6).
pub const DEFAULT_RESTORE_WINDOW_MS: u64 = 30 * 60_000;

/// Default `--max-exec-timeout`: 4 h, Velero's own cap.
pub const DEFAULT_MAX_EXEC_TIMEOUT_MS: u64 = 4 * 3_600_000;

/// Default `--restore-label`: the pod label Velero puts on every object it restores
/// (docs/behaviour.md §1.1).
pub const DEFAULT_RESTORE_LABEL: &str = "velero.io/restore-name";
/// Default `--restore-namespace-label`: the namespace label that puts every pod created in the
/// namespace into the named restore (docs/behaviour.md §1.1).
pub const DEFAULT_RESTORE_NAMESPACE_LABEL: &str = "restore-hooks.dev/restore";
/// Default `--velero-namespace`: where Velero `Restore` objects are read from (docs/behaviour.md
/// §2.4).
pub const DEFAULT_VELERO_NAMESPACE: &str = "velero";
/// Default `--velero-service-account`: the ServiceAccount Velero's install creates.
pub const DEFAULT_VELERO_SERVICE_ACCOUNT: &str = "velero";

impl EngineConfig {
    /// `--restore-window` as a duration.
    pub fn restore_window(&self) -> jiff::SignedDuration {
        jiff::SignedDuration::from_millis(i64::try_from(self.restore_window_ms).unwrap_or(i64::MAX))
    }

    /// The username Velero's ServiceAccount authenticates as (`request.userInfo.username`).
    pub fn velero_username(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.velero_namespace, self.velero_service_account
        )
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            restore_label: DEFAULT_RESTORE_LABEL.to_string(),
            restore_namespace_label: DEFAULT_RESTORE_NAMESPACE_LABEL.to_string(),
            velero_namespace: DEFAULT_VELERO_NAMESPACE.to_string(),
            velero_service_account: DEFAULT_VELERO_SERVICE_ACCOUNT.to_string(),
            velero_hooks: VeleroHooksMode::Defer,
            on_invalid: OnInvalid::Deny,
            max_exec_timeout_ms: DEFAULT_MAX_EXEC_TIMEOUT_MS,
            default_wait_timeout_ms: Some(DEFAULT_WAIT_TIMEOUT_MS),
            excluded_namespaces: Vec::new(),
            restore_window_ms: DEFAULT_RESTORE_WINDOW_MS,
        }
    }
}
