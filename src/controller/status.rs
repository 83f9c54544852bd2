//! Writing the pod: the signed status annotation (with optimistic concurrency) and the exec label.

use kube::api::{Api, Patch, PatchParams};
use restore_hooks_core::hooks::plan::{EXEC_LABEL, ExecStatus, STATUS_ANNOTATION};
use restore_hooks_core::hooks::signing::{PlanKeys, STATUS_SIGNATURE_ANNOTATION};
use serde_json::json;

use super::slim_pod::SlimPod;

/// Why a write to a pod did not happen. Only [`WriteError::Api`] is a failure (retried with
/// backoff); the other two are the pod moving on: a conflict is answered by reading the pod
/// again, a deleted pod ends its worker.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The pod changed since it was read: re-read it and decide again.
    #[error("the pod changed since it was read (resourceVersion conflict)")]
    Conflict,
    /// The pod was deleted (404).
    #[error("the pod no longer exists")]
    Gone,
    /// Any other error from the API server or the connection to it.
    #[error("pod API request failed: {0}")]
    Api(#[source] kube::Error),
}

impl From<kube::Error> for WriteError {
    fn from(e: kube::Error) -> Self {
        match &e {
            kube::Error::Api(s) if s.code == 409 => WriteError::Conflict,
            kube::Error::Api(s) if s.code == 404 => WriteError::Gone,
            _ => WriteError::Api(e),
        }
    }
}

/// Writes `restore-hooks.dev/status` (signed, bound to the pod's uid) and optionally the exec
/// label, only if the pod is still at `resource_version`: a merge patch carrying
/// `metadata.resourceVersion` is rejected with 409 otherwise. This is what makes a hook start at
/// most once: the `Running` record is written (and must win) before the exec begins.
pub async fn write_status(
    api: &Api<SlimPod>,
    name: &str,
    uid: &str,
    resource_version: &str,
    status: &ExecStatus,
    keys: &PlanKeys,
    label: Option<&str>,
) -> Result<SlimPod, WriteError> {
    let text = status.to_annotation();
    let signature = keys.sign_status(uid, &text);
    let mut body = json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": {STATUS_ANNOTATION: text, STATUS_SIGNATURE_ANNOTATION: signature},
        }
    });
    if let Some(label) = label {
        body["metadata"]["labels"] = json!({ EXEC_LABEL: label });
    }
    Ok(api
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await?)
}

/// Sets the `restore-hooks.dev/exec` label (`done` or `failed`), if the pod is still at
/// `resource_version`: a worker acting on a stale view of a pod that another worker already
/// finished gets a conflict, re-reads, and sees the pod is no longer pending.
pub async fn set_exec_label(
    api: &Api<SlimPod>,
    name: &str,
    resource_version: &str,
    value: &str,
) -> Result<SlimPod, WriteError> {
    let body =
        json!({"metadata": {"resourceVersion": resource_version, "labels": {EXEC_LABEL: value}}});
    Ok(api
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await?)
}
