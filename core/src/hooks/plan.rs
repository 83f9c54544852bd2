//! The exec plan (`restore-hooks.dev/plan`) and the exec status (`restore-hooks.dev/status`):
//! the only two documents the webhook and the controller exchange, through pod annotations
//! (docs/behaviour.md §5).
//!
//! Field names are part of the contract: change them only together with a migration for pods
//! that already carry a plan.

use serde::{Deserialize, Serialize};

/// Annotation holding the JSON [`ExecPlan`], written by the webhook.
pub const PLAN_ANNOTATION: &str = "restore-hooks.dev/plan";
/// Annotation holding the JSON [`ExecStatus`], written by the controller.
pub const STATUS_ANNOTATION: &str = "restore-hooks.dev/status";
/// Annotation listing (comma-separated) the init containers the webhook added.
pub const INJECTED_ANNOTATION: &str = "restore-hooks.dev/injected";
/// Label the controller selects on: `pending`, then `done` or `failed`.
pub const EXEC_LABEL: &str = "restore-hooks.dev/exec";
/// [`EXEC_LABEL`] value: the plan has hooks not yet ended; the controller watches these pods
/// (docs/behaviour.md §5.5, §6.1).
pub const EXEC_PENDING: &str = "pending";
/// [`EXEC_LABEL`] value: every hook `Succeeded` (§5.5).
pub const EXEC_DONE: &str = "done";
/// [`EXEC_LABEL`] value: a hook `Failed` or was `Skipped`, or the plan or status was refused (§5.5,
/// §9.3).
pub const EXEC_FAILED: &str = "failed";
/// Label on every pod the webhook admitted in a restore scope, with or without hooks: its value
/// is the restore's label value. It is how the controller finds the pods a late RestoreHook
/// applies to without watching every pod of the cluster.
pub const RESTORE_RUN_LABEL: &str = "restore-hooks.dev/restore-run";

/// Most hooks one hook may wait for (`after`, docs/behaviour.md §6.16; the CRD schema says the
/// same).
pub const MAX_AFTER: usize = 16;

/// Default exec timeout when a hook sets none (or zero), as Velero: 30 s.
pub const DEFAULT_EXEC_TIMEOUT_MS: u64 = 30_000;

/// Largest plan annotation the webhook issues. Kubernetes caps all annotations of an object at
/// 256 KiB together; a plan over this bound is a definition error, denied with its size.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;
/// Largest status annotation the controller writes: output tails are cut to fit.
pub const MAX_STATUS_BYTES: usize = 32 * 1024;
/// The API server's limit on the total size of an object's annotations (keys and values).
pub const MAX_TOTAL_ANNOTATION_BYTES: usize = 256 * 1024;

/// What the controller should do with a pod: the post-restore exec hooks, in plan order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecPlan {
    /// JSON `id`: a random identifier the webhook gives each plan it issues (96 bits,
    /// base64url). The controller records which pod first carried it and refuses it on any other
    /// pod (docs/behaviour.md §9.3); late hooks keep it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The restore that put the pod in scope (its full name when the Velero Restore is known).
    pub restore: String,
    /// When the webhook issued the plan (RFC 3339, seconds): the controller only runs a plan
    /// issued around the pod's creation, and refuses one without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<String>,
    /// JSON `hooks`: the exec hooks in plan order (§3.2), late hooks appended (§7.2); a hook is
    /// identified by its position.
    pub hooks: Vec<PlannedHook>,
    /// Spec exec hooks that selected the pod but name a container it does not have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_applicable: Vec<HookRef>,
    /// Init hooks of hook objects that arrived after the pod was created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missed_init: Vec<HookRef>,
    /// JSON `vouchedBy`: who vouches, beyond the pod's own labels, that the pod belongs to its
    /// restore: only such pods count for the rules across pods (`runOn: OnePod`, `after`;
    /// docs/behaviour.md §6.20). Absent only in plans issued before the field existed, which
    /// count as vouched for (they are signed, so it cannot be taken out of a newer one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vouched_by: Option<Voucher>,
    /// JSON `lateFrom`: the position of the first hook the controller appended after admission
    /// (docs/behaviour.md §7.2): hooks from there on are late. Absent while every hook is the
    /// webhook's, and in plans extended before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_from: Option<usize>,
}

/// Who vouches that a pod belongs to its restore (docs/behaviour.md §6.20): the pod's labels,
/// the restore label included, are the pod creator's to set, so they alone never make a pod one
/// whose runs another pod's hook waits for, or the one that runs a `runOn: OnePod` hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Voucher {
    /// Velero's ServiceAccount created the pod: it restored it from the backup.
    Velero,
    /// kube-controller-manager created it (a ReplicaSet, StatefulSet, Job or DaemonSet of the
    /// namespace), under `system:kube-controller-manager` or one of its `kube-system`
    /// `*-controller` ServiceAccounts.
    Controller,
    /// Its creator may `create pods/exec` in its namespace: it could run any hook by hand.
    Creator,
    /// Nobody: the pod runs its own hooks, and counts for no other pod's.
    Nobody,
}

impl ExecPlan {
    /// Whether the pod counts for the rules across pods (docs/behaviour.md §6.20).
    pub fn is_vouched_for(&self) -> bool {
        self.vouched_by != Some(Voucher::Nobody)
    }
}

/// The kind of hook object an `after` entry waits for (docs/behaviour.md §6.16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookKind {
    /// A RestoreHook, in the namespace the entry names.
    RestoreHook,
    /// A ClusterRestoreHook.
    ClusterRestoreHook,
}

impl HookKind {
    /// The prefix of its plan `source` values.
    pub fn prefix(self) -> &'static str {
        match self {
            HookKind::RestoreHook => "restorehook",
            HookKind::ClusterRestoreHook => "clusterrestorehook",
        }
    }

    /// The kind of a plan `source`, when it is a hook object's.
    pub fn of_source(source: &str) -> Option<HookKind> {
        match source.split_once('/')?.0 {
            "restorehook" => Some(HookKind::RestoreHook),
            "clusterrestorehook" => Some(HookKind::ClusterRestoreHook),
            _ => None,
        }
    }
}

/// A hook another one waits for (`after`, docs/behaviour.md §6.16), as the webhook resolved it:
/// which object's hooks, and the one namespace whose pods' runs of them count. Plans issued
/// before `after` was scoped hold the bare name; it reads as the waiting hook's own kind in the
/// pod's own namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "AfterEntry")]
pub struct AfterRef {
    /// JSON `hook`: the hook object's name.
    pub hook: String,
    /// JSON `kind`; `None` only in older plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<HookKind>,
    /// JSON `namespace`: the pods whose runs count; `None` only in older plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum AfterEntry {
    Name(String),
    Ref {
        hook: String,
        #[serde(default)]
        kind: Option<HookKind>,
        #[serde(default)]
        namespace: Option<String>,
    },
}

impl From<AfterEntry> for AfterRef {
    fn from(entry: AfterEntry) -> Self {
        match entry {
            AfterEntry::Name(hook) => AfterRef {
                hook,
                kind: None,
                namespace: None,
            },
            AfterEntry::Ref {
                hook,
                kind,
                namespace,
            } => AfterRef {
                hook,
                kind,
                namespace,
            },
        }
    }
}

/// A bare name, as older plans hold it.
impl From<&str> for AfterRef {
    fn from(hook: &str) -> Self {
        AfterEntry::Name(hook.to_string()).into()
    }
}

/// The runs that one awaited hook stands for (docs/behaviour.md §6.16): the hooks of plan source
/// `source` in the pods of `namespace` of one restore.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AwaitedKey {
    /// `restorehook/<name>` or `clusterrestorehook/<name>`.
    pub source: String,
    /// The namespace whose pods' runs count.
    pub namespace: String,
}

impl PlannedHook {
    /// The runs each of its `after` entries waits for, in a pod of `namespace`.
    pub fn awaited(&self, namespace: &str) -> Vec<AwaitedKey> {
        awaited_keys(&self.after, &self.source, namespace)
    }
}

/// The runs the `after` entries of a hook of plan source `source` wait for, in a pod of
/// `namespace`: an entry without a kind names the waiting object's own kind, one without a
/// namespace the pod's (docs/behaviour.md §6.16).
pub fn awaited_keys(after: &[AfterRef], source: &str, namespace: &str) -> Vec<AwaitedKey> {
    let own = HookKind::of_source(source).unwrap_or(HookKind::RestoreHook);
    after
        .iter()
        .map(|a| AwaitedKey {
            source: format!("{}/{}", a.kind.unwrap_or(own).prefix(), a.hook),
            namespace: a.namespace.clone().unwrap_or_else(|| namespace.to_string()),
        })
        .collect()
}

/// One exec hook with every default already applied ("the plan holds effective values").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedHook {
    /// `<from-annotation>`, the Velero resource entry's name, or the hook object's name.
    pub name: String,
    /// `annotation`, `velero-restore/<name>`, `clusterrestorehook/<name>` or
    /// `restorehook/<name>`.
    pub source: String,
    /// Position in `postHooks` (0 for annotation hooks).
    pub index: usize,
    /// JSON `container`: the target container, with the default (the pod's first container)
    /// applied.
    pub container: String,
    /// JSON `command`: argv run without a shell; never empty (§2.2, §6.6).
    pub command: Vec<String>,
    /// JSON `onError`: `Continue` or `Fail`; unset is written `Continue` (§6.7).
    pub on_error: OnError,
    /// JSON `execTimeoutMs`: exec timeout in milliseconds; unset or zero is written 30000, and
    /// the webhook caps it at its `--max-exec-timeout` (§5.2, §6.6).
    pub exec_timeout_ms: u64,
    /// `None` (JSON `null`): wait for the container without limit.
    pub wait_timeout_ms: Option<u64>,
    /// JSON `waitForReady`: the container must be Ready, not only Running, before its hooks run
    /// (§6.4).
    pub wait_for_ready: bool,
    /// JSON `allowedBy`, annotation hooks only: why the webhook honoured it (docs/behaviour.md
    /// §9.9): `creator` (the pod's creator may create pods/exec there), `velero` (Velero's
    /// ServiceAccount created the pod under `--velero-hooks own`), or the source of the hook
    /// object that allows the pod's annotation hooks (`restorehook/<name>`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_by: Option<String>,
    /// JSON `refused`: why this hook must never run (an annotation hook nobody entitled to exec
    /// authored, §9.9). The controller records it `Failed` with this message without running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// JSON `invalid`: the hook was invalid at admission, and the pod was admitted without it
    /// (`--on-invalid warn`, or a pod whose volume data Velero restores, §3.6). The controller
    /// records it `Failed` with this message; it has no command and never runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    /// JSON `runOn`: `OnePod` when one pod of the restore runs the hook for all the pods that
    /// plan it (§6.15); absent: every pod runs it.
    #[serde(default, skip_serializing_if = "RunOn::is_every_pod")]
    pub run_on: RunOn,
    /// JSON `after`: the hooks of the same restore this one waits for, each with the namespace
    /// whose pods' runs of it count (§6.16); absent: it waits for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<AfterRef>,
    /// JSON `retry`: when a failed attempt is tried again (§6.17); absent: one attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPlan>,
    /// JSON `ephemeral`: run the command in an ephemeral container targeting `container`
    /// (§6.18); absent: exec into `container`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<EphemeralPlan>,
}

/// The ephemeral container a hook runs in (docs/behaviour.md §6.18).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralPlan {
    /// JSON `image`.
    pub image: String,
    /// JSON `volumeMounts`: core/v1 VolumeMounts of the pod's volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<crate::hooks::types::HookVolumeMount>,
    /// JSON `securityContext`: the container's core/v1 SecurityContext, with its defaults
    /// applied for the pod (within Pod Security `restricted`). In a compiled hook, before it is
    /// resolved for a pod: what the hook's author wrote. Absent in plans issued before the field
    /// existed: the container then has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<crate::hooks::types::HookSecurityContext>,
    /// JSON `env`: core/v1 EnvVars, after the target container's when `copyTargetEnv`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<crate::hooks::types::HookEnvVar>,
    /// JSON `envFrom`: core/v1 EnvFromSources, after the target container's when
    /// `copyTargetEnv`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<crate::hooks::types::HookEnvFromSource>,
    /// JSON `copyTargetEnv`: the controller copies the target container's `env` and `envFrom`
    /// from the pod into the container, ahead of `env` and `envFrom` (a pod's containers cannot
    /// change, so the plan need not carry them, §10).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub copy_target_env: bool,
}

/// A hook's retry policy with its defaults applied (docs/behaviour.md §6.17).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPlan {
    /// JSON `attempts`: attempts in all, the first included (2 to 10).
    pub attempts: u32,
    /// JSON `backoffMs`: the wait before the second attempt, doubled before each next one.
    pub backoff_ms: u64,
    /// JSON `maxBackoffMs`: the longest wait between attempts.
    pub max_backoff_ms: u64,
    /// JSON `onExitCodes`: exit codes after which a command that ran is tried again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_exit_codes: Vec<i32>,
    /// JSON `idempotent`: an attempt whose stream broke before an exit status is tried again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
}

/// Which pods run a hook (docs/behaviour.md §6.15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RunOn {
    /// Every pod that plans it.
    #[default]
    EveryPod,
    /// One pod of the restore, chosen by the controller.
    OnePod,
}

impl RunOn {
    /// The default, left out of the plan.
    pub fn is_every_pod(&self) -> bool {
        *self == RunOn::EveryPod
    }
}

#[cfg(test)]
impl PlannedHook {
    /// A hook with the defaults a plan writes (`true`, Continue, 30 s, no wait): the tests'
    /// starting point.
    pub(crate) fn example(name: &str, source: &str, container: &str) -> Self {
        PlannedHook {
            name: name.to_string(),
            source: source.to_string(),
            index: 0,
            container: container.to_string(),
            command: vec!["true".to_string()],
            on_error: OnError::Continue,
            exec_timeout_ms: DEFAULT_EXEC_TIMEOUT_MS,
            wait_timeout_ms: None,
            wait_for_ready: false,
            allowed_by: None,
            refused: None,
            invalid: None,
            run_on: RunOn::EveryPod,
            after: Vec::new(),
            retry: None,
            ephemeral: None,
        }
    }
}

/// A hook that is in no plan, and why it is worth counting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRef {
    /// JSON `source`: the hook's source, as in [`PlannedHook::source`].
    pub source: String,
    /// JSON `name`: the Velero entry's or hook object's name.
    pub name: String,
    /// JSON `index`: position in the source's `postHooks`.
    pub index: usize,
    /// JSON `container`: the container a not-applicable exec hook names; empty (and omitted) for a
    /// missed init hook.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
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

impl ExecPlan {
    /// The annotation value. Serialising this type cannot fail (no maps with non-string keys).
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("ExecPlan serialises")
    }

    /// Parses a `restore-hooks.dev/plan` annotation value (verify its signature first, §9.3).
    pub fn from_annotation(value: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(value)
    }
}

/// `restore-hooks.dev/status`: one entry per plan hook, in plan order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecStatus {
    /// JSON `hooks`: one entry per plan hook, at the same position (§5.3).
    pub hooks: Vec<HookStatus>,
    /// Why no hook ran at all (the plan was rejected), when that is the case.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One entry of the status's `hooks`: the outcome of the plan hook at the same position
/// (docs/behaviour.md §5.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    /// JSON `name`: copied from the plan hook.
    pub name: String,
    /// JSON `index`: copied from the plan hook.
    pub index: usize,
    /// JSON `container`: copied from the plan hook.
    pub container: String,
    /// JSON `phase`: `Pending`, `Running`, `Succeeded`, `Failed` or `Skipped` (§5.4).
    pub phase: HookPhase,
    /// JSON `startedAt`: when the hook was recorded `Running` (RFC 3339, UTC, whole seconds);
    /// absent if it never started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// JSON `finishedAt`: when it reached a terminal phase; absent before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// JSON `exitCode`: the process' exit code, when the API server reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// JSON `message`: empty on success; otherwise why the hook failed or was skipped (§6.14).
    #[serde(default)]
    pub message: String,
    /// Last 1 KiB of the hook's stdout.
    #[serde(default)]
    pub stdout: String,
    /// Last 1 KiB of the hook's stderr.
    #[serde(default)]
    pub stderr: String,
    /// JSON `retries`: attempts that failed and were tried again (§6.17); omitted when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// JSON `unavailable`: of `retries`, the attempts the API server was unavailable for (their
    /// command did not start): tried again whatever `retry` says, and counted against none of its
    /// attempts (§6.17); omitted when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unavailable: u32,
    /// JSON `retryAt`: a `Pending` hook whose last attempt failed starts again no earlier than
    /// this (RFC 3339, UTC, whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A hook's phase in the status (docs/behaviour.md §5.4); serialised as the variant name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HookPhase {
    /// Not started.
    Pending,
    /// Recorded before the exec starts; the exec is in progress, or its process died (§6.10).
    Running,
    /// Exit code 0. Terminal.
    Succeeded,
    /// Non-zero exit, timeout, broken stream, expired wait, pod gone or terminal, interrupted, or
    /// left scope. Terminal.
    Failed,
    /// Not run because a `Fail` hook of the same pod failed (§6.7). Terminal.
    Skipped,
    /// A `runOn: OnePod` hook that another pod of the restore runs (§6.15). Terminal; counts
    /// neither as succeeded nor as failed here (the pod that ran it counts the outcome).
    OtherPod,
}

impl HookPhase {
    /// Whether the hook has ended (`Succeeded`, `Failed` or `Skipped`): it never runs again (§6.9).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            HookPhase::Succeeded | HookPhase::Failed | HookPhase::Skipped | HookPhase::OtherPod
        )
    }
}

impl ExecStatus {
    /// The annotation value, at most [`MAX_STATUS_BYTES`]: when a plan has many hooks with
    /// chatty output, the output tails of the earliest hooks are shortened first (their result
    /// is in Events already), then messages; the phases are always kept.
    pub fn to_annotation(&self) -> String {
        let text = serde_json::to_string(self).expect("ExecStatus serialises");
        if text.len() <= MAX_STATUS_BYTES {
            return text;
        }
        let mut bounded = self.clone();
        // Oldest hooks first, both streams; messages only when output alone is not enough.
        let order = (0..bounded.hooks.len())
            .flat_map(|i| [(i, Field::Stdout), (i, Field::Stderr)])
            .chain((0..bounded.hooks.len()).map(|i| (i, Field::Message)))
            .collect::<Vec<_>>();
        for (i, field) in order {
            let text = serde_json::to_string(&bounded).expect("ExecStatus serialises");
            let excess = text.len().saturating_sub(MAX_STATUS_BYTES);
            if excess == 0 {
                return text;
            }
            let value = field.of(&mut bounded.hooks[i]);
            // JSON escaping can make a byte of text cost up to 6 bytes of annotation: cutting
            // the excess in bytes of text is generous, and the loop checks again.
            let keep = value.len().saturating_sub(excess);
            *value = tail(value, keep);
        }
        let text = serde_json::to_string(&bounded).expect("ExecStatus serialises");
        debug_assert!(text.len() <= MAX_STATUS_BYTES || bounded.hooks.len() > 100);
        text
    }

    /// Parses a `restore-hooks.dev/status` annotation value (verify its signature first, §9.4).
    pub fn from_annotation(value: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(value)
    }
}

#[derive(Clone, Copy)]
enum Field {
    Stdout,
    Stderr,
    Message,
}

impl Field {
    fn of(self, hook: &mut HookStatus) -> &mut String {
        match self {
            Field::Stdout => &mut hook.stdout,
            Field::Stderr => &mut hook.stderr,
            Field::Message => &mut hook.message,
        }
    }
}

/// The last `max` bytes of `s`, cut on a character boundary.
fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: usize, out: &str) -> HookStatus {
        HookStatus {
            name: format!("h{i}"),
            index: i,
            container: "db".into(),
            phase: HookPhase::Succeeded,
            started_at: None,
            finished_at: None,
            exit_code: Some(0),
            message: String::new(),
            stdout: out.into(),
            stderr: out.into(),
            retries: 0,
            unavailable: 0,
            retry_at: None,
        }
    }

    #[test]
    fn the_status_annotation_stays_under_its_bound() {
        // 40 hooks with 1 KiB of output on each stream, some of it escaped in JSON.
        let noisy = "\"é\n".repeat(256);
        let status = ExecStatus {
            hooks: (0..40).map(|i| entry(i, &noisy)).collect(),
            message: String::new(),
        };
        let text = status.to_annotation();
        assert!(text.len() <= MAX_STATUS_BYTES, "{}", text.len());
        let back = ExecStatus::from_annotation(&text).unwrap();
        assert_eq!(back.hooks.len(), 40);
        assert!(back.hooks.iter().all(|h| h.phase == HookPhase::Succeeded));
        // The latest hooks keep their output; the earliest were cut first.
        assert_eq!(back.hooks[39].stdout, noisy);
        assert!(back.hooks[0].stdout.len() < noisy.len());

        let small = ExecStatus {
            hooks: vec![entry(0, "ok")],
            message: String::new(),
        };
        assert_eq!(
            small.to_annotation(),
            serde_json::to_string(&small).unwrap(),
            "a small status is written as is"
        );
    }

    #[test]
    fn plans_round_trip() {
        let plan = ExecPlan {
            id: "AAECAwQFBgcICQoL".into(),
            restore: "r".into(),
            issued_at: Some("2026-12-03T10:00:00Z".into()),
            hooks: vec![],
            not_applicable: vec![HookRef {
                source: "restorehook/a".into(),
                name: "a".into(),
                index: 1,
                container: "postgres".into(),
            }],
            missed_init: vec![],
            vouched_by: Some(Voucher::Controller),
            late_from: None,
        };
        let text = plan.to_annotation();
        assert!(
            text.contains("\"issuedAt\"") && text.contains("\"notApplicable\""),
            "{text}"
        );
        assert!(!text.contains("missedInit"), "{text}");
        assert!(
            !text.contains("allowedBy") && !text.contains("refused"),
            "{text}"
        );
        assert!(text.contains("\"vouchedBy\":\"controller\""), "{text}");
        assert_eq!(ExecPlan::from_annotation(&text).unwrap(), plan);
    }

    /// `after` entries as this version writes them, and as older plans hold them: a bare name is
    /// the waiting hook's own kind, in the pod's own namespace.
    #[test]
    fn after_entries_resolve_to_one_namespace() {
        let hook: PlannedHook = serde_json::from_value(serde_json::json!({
            "name": "migrate", "source": "clusterrestorehook/migrate", "index": 0,
            "container": "app", "command": ["true"], "onError": "Continue",
            "execTimeoutMs": 30000, "waitTimeoutMs": null, "waitForReady": false,
            "after": ["db", {"hook": "db", "kind": "RestoreHook", "namespace": "data"},
                      {"hook": "cache", "kind": "ClusterRestoreHook", "namespace": "shop"}],
        }))
        .unwrap();
        let keys: Vec<(String, String)> = hook
            .awaited("shop")
            .into_iter()
            .map(|k| (k.source, k.namespace))
            .collect();
        assert_eq!(
            keys,
            [
                ("clusterrestorehook/db".to_string(), "shop".to_string()),
                ("restorehook/db".to_string(), "data".to_string()),
                ("clusterrestorehook/cache".to_string(), "shop".to_string()),
            ]
        );
        let written = serde_json::to_value(&hook.after[1]).unwrap();
        assert_eq!(
            written,
            serde_json::json!({"hook": "db", "kind": "RestoreHook", "namespace": "data"})
        );
    }
}
