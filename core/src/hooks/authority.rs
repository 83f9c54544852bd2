//! Who may author a pod's annotation exec hook (docs/behaviour.md §9.9).
//!
//! `post.hook.restore.velero.io/command` is a pod annotation: anyone who may create a pod (or edit
//! a Deployment's template, or an operator's custom resource that templates pods) in a restore
//! namespace can write one, and the controller runs it with its own cluster-wide `pods/exec`. So
//! an annotation exec hook is honoured only when somebody entitled to exec into the pod stands
//! behind it:
//!
//! 1. `creator`: the identity that sent the pod's CREATE (the AdmissionReview's `userInfo`) may
//!    `create pods/exec` in the pod's namespace (the API server's answer to a SubjectAccessReview,
//!    asked by the webhook shell);
//! 2. `velero`: under `--velero-hooks own`, the pod was created by Velero's ServiceAccount, which
//!    restores pods with the annotations they were backed up with and would run them itself;
//! 3. a RestoreHook or ClusterRestoreHook with `podAnnotationHooks: Allow` selects the pod. Its
//!    author passed the hook-author check (`create pods/exec` where it applies), and this is how
//!    pods created by controllers (ReplicaSets, StatefulSets), whose creator never has exec
//!    rights, keep their annotation hooks.
//!
//! Otherwise the hook stays in the plan, refused: the controller records it `Failed` with the
//! reason and never runs it, so a refusal is as visible as a failure. Init annotation hooks need
//! none of this: an init container runs as the pod itself, which its creator could have written
//! into the pod directly.

use super::compiled::CompiledEntry;
use super::plan::Voucher;
use crate::config::{EngineConfig, VeleroHooksMode};

/// The identity that sent the pod's CREATE, and what the API server said about its exec right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requester<'a> {
    /// `request.userInfo.username` (empty when unknown, e.g. `restore-hooks inject`).
    pub username: &'a str,
    /// Whether it may `create pods/exec` in the pod's namespace.
    pub exec_right: &'a ExecRight,
}

/// The answer to "may the pod's creator create pods/exec in its namespace?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecRight {
    /// It may: its annotation exec hooks run.
    Granted,
    /// It may not.
    Denied,
    /// The question could not be answered (the SubjectAccessReview failed): treated as denied,
    /// with the reason in the refusal.
    Unknown(String),
}

impl Requester<'static> {
    /// An unknown requester without exec rights.
    pub const NOBODY: Requester<'static> = Requester {
        username: "",
        exec_right: &ExecRight::Denied,
    };
}

/// `allowedBy` of an annotation hook whose creator may exec.
pub const ALLOWED_BY_CREATOR: &str = "creator";
/// `allowedBy` of an annotation hook on a pod Velero's ServiceAccount created under `own`.
pub const ALLOWED_BY_VELERO: &str = "velero";

/// Who vouches that a pod created by `requester` belongs to its restore (docs/behaviour.md
/// §6.20): the identity that created it, which its creator cannot choose, rather than its labels,
/// which it can.
pub fn voucher(requester: &Requester<'_>, config: &EngineConfig) -> Voucher {
    if let Some(by) = identity_voucher(requester.username, config) {
        return by;
    }
    if *requester.exec_right == ExecRight::Granted {
        Voucher::Creator
    } else {
        Voucher::Nobody
    }
}

/// The voucher an identity is by itself, without asking the API server about its rights:
/// Velero's ServiceAccount, or kube-controller-manager (`system:kube-controller-manager`, or a
/// `kube-system` ServiceAccount of one of its controllers, which is how it creates pods with
/// `--use-service-account-credentials`, kubeadm's and most distributions' default). `None`: only
/// its exec right can vouch, so the webhook asks (docs/behaviour.md §6.20).
pub fn identity_voucher(username: &str, config: &EngineConfig) -> Option<Voucher> {
    if username.is_empty() {
        return None;
    }
    if username == config.velero_username() {
        return Some(Voucher::Velero);
    }
    let controller = username == "system:kube-controller-manager"
        || username
            .strip_prefix("system:serviceaccount:kube-system:")
            .is_some_and(|sa| sa.ends_with("-controller"));
    controller.then_some(Voucher::Controller)
}

/// Who allows the pod's annotation exec hook (its `allowedBy`), or why nobody does (its
/// `refused`). `entries` are the hook-object entries that select the pod.
pub fn annotation_exec_authority(
    requester: &Requester<'_>,
    namespace: &str,
    entries: &[&CompiledEntry],
    config: &EngineConfig,
) -> Result<String, String> {
    if *requester.exec_right == ExecRight::Granted {
        return Ok(ALLOWED_BY_CREATOR.to_string());
    }
    if config.velero_hooks == VeleroHooksMode::Own
        && !requester.username.is_empty()
        && requester.username == config.velero_username()
    {
        return Ok(ALLOWED_BY_VELERO.to_string());
    }
    if let Some(entry) = entries.iter().find(|e| e.allows_pod_annotation_hooks) {
        return Ok(entry.source.clone());
    }
    let who = if requester.username.is_empty() {
        "an unknown identity".to_string()
    } else {
        requester.username.to_string()
    };
    let right = match requester.exec_right {
        ExecRight::Unknown(why) => format!(
            "whether {who}, who created the pod, may create pods/exec in namespace {namespace} \
             could not be checked ({why})"
        ),
        _ => format!(
            "the pod was created by {who}, who may not create pods/exec in namespace {namespace}"
        ),
    };
    Err(format!(
        "refused: {right}, and no RestoreHook or ClusterRestoreHook that selects the pod allows its \
         annotation hooks (spec.podAnnotationHooks: Allow); not executed"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::compiled::CompiledEntry;
    use crate::hooks::problem::Problem;

    fn entry(source: &str, allows: bool) -> CompiledEntry {
        CompiledEntry {
            source: source.to_string(),
            name: source.rsplit('/').next().unwrap().to_string(),
            location: source.to_string(),
            filter: Err(Problem::new(source, "unused here")),
            post_hooks: Vec::new(),
            allows_pod_annotation_hooks: allows,
        }
    }

    #[test]
    fn an_annotation_exec_hook_needs_an_author_entitled_to_exec() {
        let own = EngineConfig {
            velero_hooks: VeleroHooksMode::Own,
            ..EngineConfig::default()
        };
        let defer = EngineConfig::default();
        let velero = "system:serviceaccount:velero:velero";
        let allow = entry("restorehook/allow-annotations", true);
        let plain = entry("restorehook/hooks-only", false);
        let sar_down = ExecRight::Unknown("the API server timed out".into());
        type Row<'a> = (
            &'a str,
            &'a ExecRight,
            &'a EngineConfig,
            Vec<&'a CompiledEntry>,
            Result<&'a str, &'a str>,
        );
        let rows: Vec<Row<'_>> = vec![
            ("alice", &ExecRight::Granted, &defer, vec![], Ok("creator")),
            // The creator's right comes first, whoever else would allow it.
            (
                "alice",
                &ExecRight::Granted,
                &own,
                vec![&allow],
                Ok("creator"),
            ),
            (velero, &ExecRight::Denied, &own, vec![], Ok("velero")),
            // Velero's identity counts only when restore-hooks runs Velero's hooks.
            (
                velero,
                &ExecRight::Denied,
                &defer,
                vec![],
                Err("system:serviceaccount:velero:velero, who may not"),
            ),
            // A label or a name is not an identity: only the exact ServiceAccount.
            (
                "system:serviceaccount:velero:velero-impostor",
                &ExecRight::Denied,
                &own,
                vec![],
                Err("may not"),
            ),
            (
                "system:serviceaccount:kube-system:replicaset-controller",
                &ExecRight::Denied,
                &defer,
                vec![&plain, &allow],
                Ok("restorehook/allow-annotations"),
            ),
            (
                "system:serviceaccount:kube-system:replicaset-controller",
                &ExecRight::Denied,
                &defer,
                vec![&plain],
                Err("replicaset-controller, who may not create pods/exec in namespace shop"),
            ),
            (
                "bob",
                &sar_down,
                &defer,
                vec![],
                Err("could not be checked (the API server timed out)"),
            ),
            (
                "",
                &ExecRight::Denied,
                &own,
                vec![],
                Err("an unknown identity"),
            ),
        ];
        for (username, right, config, entries, want) in rows {
            let requester = Requester {
                username,
                exec_right: right,
            };
            let got = annotation_exec_authority(&requester, "shop", &entries, config);
            match (&got, want) {
                (Ok(by), Ok(w)) => assert_eq!(by, w, "{username} {right:?}"),
                (Err(why), Err(w)) => {
                    assert!(why.contains(w), "{username}: {why}");
                    assert!(
                        why.starts_with("refused: ") && why.contains("podAnnotationHooks: Allow"),
                        "{why}"
                    );
                }
                _ => panic!("{username} {right:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
