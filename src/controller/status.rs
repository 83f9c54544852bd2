//! Writing the pod: the status annotation (with optimistic concurrency) and the exec label.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::hooks::plan::{EXEC_LABEL, ExecStatus, STATUS_ANNOTATION};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The pod changed since it was read: re-read it and decide again.
    #[error("the pod changed since it was read (resourceVersion conflict)")]
    Conflict,
    #[error("the pod no longer exists")]
    Gone,
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

/// Writes `restore-hooks.dev/status` only if the pod is still at `resource_version`: a merge patch
/// carrying `metadata.resourceVersion` is rejected with 409 otherwise. This is what makes a hook
/// start at most once: the `Running` record is written (and must win) before the exec begins.
pub async fn write_status(
    api: &Api<Pod>,
    name: &str,
    resource_version: &str,
    status: &ExecStatus,
) -> Result<Pod, WriteError> {
    let body = json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": {STATUS_ANNOTATION: status.to_annotation()},
        }
    });
    Ok(api
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await?)
}

/// Sets the `restore-hooks.dev/exec` label (`done` or `failed`), if the pod is still at
/// `resource_version` (when given): a worker acting on a stale view of a pod that another worker
/// already finished gets a conflict, re-reads, and sees the pod is no longer pending.
pub async fn set_exec_label(
    api: &Api<Pod>,
    name: &str,
    resource_version: Option<&str>,
    value: &str,
) -> Result<Pod, WriteError> {
    let mut body = json!({"metadata": {"labels": {EXEC_LABEL: value}}});
    if let Some(rv) = resource_version {
        body["metadata"]["resourceVersion"] = json!(rv);
    }
    Ok(api
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await?)
}

/// The pod's recorded status. An unreadable annotation counts as none (every hook Pending) only
/// when no hook can have started; the caller logs it.
pub fn recorded(pod: &Pod) -> Result<Option<ExecStatus>, serde_json::Error> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATUS_ANNOTATION))
        .map(|v| ExecStatus::from_annotation(v))
        .transpose()
}
