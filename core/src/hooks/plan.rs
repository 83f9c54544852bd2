//! The exec plan (`restore-hooks.dev/plan`) and the exec status (`restore-hooks.dev/status`):
//! the only two documents the webhook and the controller exchange, through pod annotations.
//!
//! Field names are part of the product contract (product.md §5): change them only together with
//! a migration for pods that already carry a plan.

use serde::{Deserialize, Serialize};

/// Annotation holding the JSON [`ExecPlan`], written by the webhook.
pub const PLAN_ANNOTATION: &str = "restore-hooks.dev/plan";
/// Annotation holding the JSON [`ExecStatus`], written by the controller.
pub const STATUS_ANNOTATION: &str = "restore-hooks.dev/status";
/// Annotation listing (comma-separated) the init containers the webhook added.
pub const INJECTED_ANNOTATION: &str = "restore-hooks.dev/injected";
/// Label the controller selects on: `pending`, then `done` or `failed`.
pub const EXEC_LABEL: &str = "restore-hooks.dev/exec";
pub const EXEC_PENDING: &str = "pending";
pub const EXEC_DONE: &str = "done";
pub const EXEC_FAILED: &str = "failed";

/// Default exec timeout when a hook sets none (or zero), as Velero: 30 s.
pub const DEFAULT_EXEC_TIMEOUT_MS: u64 = 30_000;

/// What the controller should do with a pod: the post-restore exec hooks, in run order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecPlan {
    /// The restore that put the pod in scope.
    pub restore: String,
    pub hooks: Vec<PlannedHook>,
}

/// One exec hook with every default already applied ("the plan holds effective values").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedHook {
    /// `<from-annotation>`, the Velero resource entry's name, or the RestoreHook's name.
    pub name: String,
    /// `annotation`, `velero-restore/<name>` or `restorehook/<name>`.
    pub source: String,
    /// Position in `postHooks` (0 for annotation hooks).
    pub index: usize,
    pub container: String,
    pub command: Vec<String>,
    pub on_error: OnError,
    pub exec_timeout_ms: u64,
    /// `None` (JSON `null`): wait for the container without limit.
    pub wait_timeout_ms: Option<u64>,
    pub wait_for_ready: bool,
}

/// What a failed hook does to the pod's remaining hooks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OnError {
    /// Record the failure and run the next hook.
    #[default]
    Continue,
    /// Record the failure and mark the pod's remaining hooks `Skipped`.
    Fail,
}

impl OnError {
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Continue => "Continue",
            OnError::Fail => "Fail",
        }
    }
}

impl ExecPlan {
    /// The annotation value. Serialising this type cannot fail (no maps with non-string keys).
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("ExecPlan serialises")
    }

    pub fn from_annotation(value: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(value)
    }
}

/// `restore-hooks.dev/status`: one entry per plan hook, in plan order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecStatus {
    pub hooks: Vec<HookStatus>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    pub name: String,
    pub index: usize,
    pub container: String,
    pub phase: HookPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub message: String,
    /// Last 1 KiB of the hook's stdout.
    #[serde(default)]
    pub stdout: String,
    /// Last 1 KiB of the hook's stderr.
    #[serde(default)]
    pub stderr: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HookPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Skipped,
}

impl HookPhase {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            HookPhase::Succeeded | HookPhase::Failed | HookPhase::Skipped
        )
    }
}

impl ExecStatus {
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("ExecStatus serialises")
    }

    pub fn from_annotation(value: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(value)
    }
}
