//! Hooks that run in an ephemeral container (docs/behaviour.md §6.18), pure: what a hook's
//! `image`, `volumeMounts`, `securityContext`, `env`, `envFrom` and `copyTargetEnv` may say
//! (compiled once, §3.4 rows 16-18), the securityContext the container gets in one pod (resolved
//! at admission), the container the controller adds, and what the pod says about how it ended.
//!
//! Why the container never goes beyond Pod Security `restricted`, whatever its author may do:
//! the controller adds it under its own identity, so admission policies that look at who asks
//! (Pod Security exemptions by username, policy engines that exempt system ServiceAccounts) judge
//! the controller, not the hook's author. `restricted` is admitted in every namespace, whatever
//! its Pod Security level; anything beyond it is refused when the hook is compiled.

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{Value, json};

use super::plan::EphemeralPlan;
use super::problem::{ExecField, ExecFieldError};
use super::types::{
    HookCapabilities, HookEnvFromSource, HookEnvVar, HookEnvVarSource, HookKeySelector,
    HookSeccompProfile, HookSecurityContext, HookVolumeMount,
};

/// Why a value is refused, for messages.
const RESTRICTED: &str =
    "a hook's container stays within Pod Security's restricted level (docs/behaviour.md §6.18)";

/// The largest uid or gid Kubernetes accepts.
const MAX_ID: i64 = 2_147_483_647;

/// The one capability `restricted` lets a container add.
const NET_BIND_SERVICE: &str = "NET_BIND_SERVICE";

/// The pod fields the downward API gives an environment variable, besides
/// `metadata.labels['<key>']` and `metadata.annotations['<key>']` (core/v1 validation's list).
const FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// The ephemeral-container fields of an exec hook, as written.
#[derive(Clone, Copy, Debug, Default)]
pub struct EphemeralFields<'a> {
    /// `image`.
    pub image: Option<&'a str>,
    /// `volumeMounts`.
    pub volume_mounts: &'a [HookVolumeMount],
    /// `securityContext`.
    pub security_context: Option<&'a HookSecurityContext>,
    /// `env`.
    pub env: &'a [HookEnvVar],
    /// `envFrom`.
    pub env_from: &'a [HookEnvFromSource],
    /// `copyTargetEnv`; unset is `false`.
    pub copy_target_env: bool,
}

/// Validates the fields (docs/behaviour.md §3.4 rows 16-18): `None` for a hook without `image`,
/// which then may set none of the others. The plan's `securityContext` is still the author's; a
/// pod's is [`effective_security_context`].
pub fn compile(fields: EphemeralFields<'_>) -> Result<Option<EphemeralPlan>, ExecFieldError> {
    let Some(image) = fields.image.map(str::trim).filter(|i| !i.is_empty()) else {
        let set: Vec<&str> = [
            (!fields.volume_mounts.is_empty(), "volumeMounts"),
            (fields.security_context.is_some(), "securityContext"),
            (!fields.env.is_empty(), "env"),
            (!fields.env_from.is_empty(), "envFrom"),
            (fields.copy_target_env, "copyTargetEnv"),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect();
        if set.is_empty() {
            return Ok(None);
        }
        let set = set.join(", ");
        return Err(ExecFieldError::new(
            ExecField::Image,
            format!(
                "{set} without image: they are for the ephemeral container an image runs in (an \
                 exec runs in the target container as it is); give the image, or remove {set}"
            ),
        ));
    };
    if let Some(sc) = fields.security_context {
        check_security_context(sc)
            .map_err(|m| ExecFieldError::new(ExecField::SecurityContext, m))?;
    }
    let env = fields
        .env
        .iter()
        .enumerate()
        .map(|(i, var)| {
            env_var(var).map_err(|m| {
                ExecFieldError::new(ExecField::Env, format!("{:?} (entry {i}): {m}", var.name))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (i, source) in fields.env_from.iter().enumerate() {
        check_env_from(source)
            .map_err(|m| ExecFieldError::new(ExecField::EnvFrom, format!("entry {i}: {m}")))?;
    }
    Ok(Some(EphemeralPlan {
        image: image.to_string(),
        volume_mounts: fields.volume_mounts.to_vec(),
        security_context: fields.security_context.cloned(),
        env,
        env_from: fields.env_from.to_vec(),
        copy_target_env: fields.copy_target_env,
    }))
}

/// Every value must be one Pod Security `restricted` admits (see the module's documentation).
fn check_security_context(sc: &HookSecurityContext) -> Result<(), String> {
    let refuse = |what: &str, fix: &str| Err(format!("{what} is refused: {RESTRICTED}; {fix}"));
    if sc.privileged == Some(true) {
        return refuse("privileged: true", "remove it");
    }
    if sc.allow_privilege_escalation == Some(true) {
        return refuse(
            "allowPrivilegeEscalation: true",
            "remove it (the default is false)",
        );
    }
    if sc.run_as_non_root == Some(false) {
        return refuse(
            "runAsNonRoot: false",
            "remove it, and set runAsUser to the non-root uid to run as",
        );
    }
    match sc.run_as_user {
        Some(0) => {
            return refuse(
                "runAsUser: 0 (root)",
                "give a non-root uid the image can run as, e.g. 65534 (nobody)",
            );
        }
        Some(uid) if !(1..=MAX_ID).contains(&uid) => {
            return Err(format!("runAsUser {uid} is not a uid; give 1 to {MAX_ID}"));
        }
        _ => {}
    }
    if let Some(gid) = sc.run_as_group.filter(|g| !(0..=MAX_ID).contains(g)) {
        return Err(format!("runAsGroup {gid} is not a gid; give 0 to {MAX_ID}"));
    }
    if let Some(HookCapabilities { add, drop }) = &sc.capabilities {
        let added: Vec<&str> = add
            .iter()
            .map(String::as_str)
            .filter(|c| *c != NET_BIND_SERVICE)
            .collect();
        if !added.is_empty() {
            return refuse(
                &format!("capabilities.add {added:?}"),
                "only NET_BIND_SERVICE may be added",
            );
        }
        if !drop.is_empty() && !drop.iter().any(|c| c == "ALL") {
            return refuse(
                &format!("capabilities.drop {drop:?} without ALL"),
                "drop ALL (the default), or remove drop",
            );
        }
    }
    if let Some(HookSeccompProfile {
        type_,
        localhost_profile,
    }) = &sc.seccomp_profile
    {
        match (type_.as_str(), localhost_profile.as_deref()) {
            ("RuntimeDefault", None) => {}
            ("Localhost", Some(path)) if !path.is_empty() => {}
            ("Localhost", _) => {
                return Err(
                    "seccompProfile type Localhost needs localhostProfile, the profile's \
                            path on the node"
                        .to_string(),
                );
            }
            ("RuntimeDefault", Some(_)) => {
                return Err(
                    "seccompProfile localhostProfile is only for type Localhost".to_string()
                );
            }
            ("Unconfined", _) => {
                return refuse(
                    "seccompProfile type Unconfined",
                    "use RuntimeDefault (the default) or a Localhost profile",
                );
            }
            (other, _) => {
                return Err(format!(
                    "seccompProfile type {other:?} is neither RuntimeDefault nor Localhost (the \
                     values are case-sensitive)"
                ));
            }
        }
    }
    Ok(())
}

/// An environment variable checked, with `fieldRef.apiVersion` defaulted to `v1`.
fn env_var(var: &HookEnvVar) -> Result<HookEnvVar, String> {
    check_env_name("name", &var.name)?;
    let mut var = var.clone();
    match (&var.value, &mut var.value_from) {
        (Some(value), Some(_)) if !value.is_empty() => {
            return Err("has both value and valueFrom; give one".to_string());
        }
        (_, Some(source)) => check_source(source)?,
        (_, None) => {}
    }
    Ok(var)
}

/// Kubernetes' rule for variable names and `envFrom` prefixes (relaxed, GA since 1.34; the chart
/// supports 1.35 and newer): printable ASCII but `=`.
fn check_env_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if !name
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'=')
    {
        return Err(format!(
            "{what} {name:?} has a character other than printable ASCII, or '='"
        ));
    }
    Ok(())
}

fn check_source(source: &mut HookEnvVarSource) -> Result<(), String> {
    let set = [
        source.secret_key_ref.is_some(),
        source.config_map_key_ref.is_some(),
        source.field_ref.is_some(),
    ]
    .into_iter()
    .filter(|s| *s)
    .count();
    if set != 1 {
        return Err(format!(
            "valueFrom sets {set} sources; give exactly one of secretKeyRef, configMapKeyRef and \
             fieldRef"
        ));
    }
    if let Some(key) = &source.secret_key_ref {
        check_key("secretKeyRef", "Secret", key)?;
    }
    if let Some(key) = &source.config_map_key_ref {
        check_key("configMapKeyRef", "ConfigMap", key)?;
    }
    if let Some(field) = &mut source.field_ref {
        match field.api_version.as_deref() {
            None | Some("") | Some("v1") => field.api_version = Some("v1".to_string()),
            Some(other) => {
                return Err(format!("fieldRef apiVersion {other:?} is not v1"));
            }
        }
        if !is_field_path(&field.field_path) {
            return Err(format!(
                "fieldRef fieldPath {:?} is not a pod field the downward API gives a variable \
                 ({}, metadata.labels['<key>'], metadata.annotations['<key>'])",
                field.field_path,
                FIELD_PATHS.join(", ")
            ));
        }
    }
    Ok(())
}

fn check_key(field: &str, kind: &str, key: &HookKeySelector) -> Result<(), String> {
    check_object_name(field, kind, &key.name)?;
    if !is_config_key(&key.key) {
        return Err(format!(
            "{field} key {:?} is not a {kind} key (letters, digits, '-', '_' and '.', at most 253)",
            key.key
        ));
    }
    Ok(())
}

fn check_env_from(source: &HookEnvFromSource) -> Result<(), String> {
    if let Some(prefix) = source.prefix.as_deref().filter(|p| !p.is_empty()) {
        check_env_name("prefix", prefix)?;
    }
    match (&source.secret_ref, &source.config_map_ref) {
        (Some(secret), None) => check_object_name("secretRef", "Secret", &secret.name),
        (None, Some(config_map)) => {
            check_object_name("configMapRef", "ConfigMap", &config_map.name)
        }
        _ => Err("give exactly one of secretRef and configMapRef".to_string()),
    }
}

fn check_object_name(field: &str, kind: &str, name: &str) -> Result<(), String> {
    if is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(format!(
            "{field} name {name:?} is not a {kind} name (a lowercase RFC 1123 subdomain)"
        ))
    }
}

/// A lowercase RFC 1123 subdomain: the names of Secrets and ConfigMaps.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// A key of a Secret's or ConfigMap's data.
fn is_config_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_field_path(path: &str) -> bool {
    if FIELD_PATHS.contains(&path) {
        return true;
    }
    ["metadata.labels", "metadata.annotations"]
        .iter()
        .any(|map| {
            path.strip_prefix(map)
                .and_then(|rest| rest.strip_prefix("['"))
                .and_then(|rest| rest.strip_suffix("']"))
                .is_some_and(|key| !key.is_empty() && !key.contains('\''))
        })
}

/// The user and group a container, or a pod, runs as: its securityContext's `runAsUser` and
/// `runAsGroup`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunAs {
    /// `runAsUser`.
    pub user: Option<i64>,
    /// `runAsGroup`.
    pub group: Option<i64>,
}

/// The securityContext of a hook's container in one pod (docs/behaviour.md §6.18): what the hook
/// sets (already checked by [`compile`]), else `restricted`'s values, and the target container's
/// `runAsUser` and `runAsGroup`, so that the hook runs as the app does (the pod's own apply to
/// every container without them). `target` is the target container's, `pod` the pod's.
///
/// On a pod that runs as root (the pod's `runAsUser: 0`, not overridden here) the container would
/// be refused by the kubelet: that is a problem with the hook for this pod, said at admission.
/// Windows pods (`spec.os.name: windows`) take none of the Linux settings, and `restricted` asks
/// only `runAsNonRoot` of them.
pub fn effective_security_context(
    written: Option<&HookSecurityContext>,
    target: RunAs,
    pod: RunAs,
    windows: bool,
) -> Result<HookSecurityContext, String> {
    let written = written.cloned().unwrap_or_default();
    if windows {
        let linux = [
            (written.run_as_user.is_some(), "runAsUser"),
            (written.run_as_group.is_some(), "runAsGroup"),
            (
                written.allow_privilege_escalation.is_some(),
                "allowPrivilegeEscalation",
            ),
            (written.privileged.is_some(), "privileged"),
            (
                written.read_only_root_filesystem.is_some(),
                "readOnlyRootFilesystem",
            ),
            (written.capabilities.is_some(), "capabilities"),
            (written.seccomp_profile.is_some(), "seccompProfile"),
        ];
        if let Some((_, field)) = linux.iter().find(|(set, _)| *set) {
            return Err(format!(
                "securityContext.{field} is a Linux setting, and the pod runs Windows \
                 (spec.os.name: windows); remove it"
            ));
        }
        return Ok(HookSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        });
    }
    // The target's root is not copied: the hook's container may not run as root.
    let run_as_user = written.run_as_user.or(target.user.filter(|uid| *uid != 0));
    if run_as_user.is_none() && pod.user == Some(0) {
        return Err(
            "the pod runs as root (spec.securityContext.runAsUser: 0), and the hook's container \
             would too, which it never does (docs/behaviour.md §6.18): set the hook's \
             securityContext.runAsUser to a non-root uid the image can run as"
                .to_string(),
        );
    }
    Ok(HookSecurityContext {
        run_as_user,
        run_as_group: written.run_as_group.or(target.group),
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: None,
        read_only_root_filesystem: written.read_only_root_filesystem,
        capabilities: Some(HookCapabilities {
            add: written
                .capabilities
                .as_ref()
                .map(|c| c.add.clone())
                .unwrap_or_default(),
            drop: written
                .capabilities
                .map(|c| c.drop)
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| vec!["ALL".to_string()]),
        }),
        seccomp_profile: Some(written.seccomp_profile.unwrap_or(HookSeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        })),
    })
}

/// The target container's own `env` and `envFrom` (core/v1 JSON), for `copyTargetEnv`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TargetEnv {
    /// Its `env`. A `resourceFieldRef` without `containerName` names the target: an ephemeral
    /// container has no resources of its own.
    pub env: Vec<Value>,
    /// Its `envFrom`.
    pub env_from: Vec<Value>,
}

/// The `env` and `envFrom` of container `target` of `pod` (an app container or a native
/// sidecar), or why there are none to copy.
pub fn target_env(pod: &Pod, target: &str) -> Result<TargetEnv, String> {
    let spec = pod.spec.as_ref();
    let container: Option<&Container> = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == target);
    let Some(container) = container else {
        return Err(format!(
            "copyTargetEnv: the pod has no container {target:?} to copy env from"
        ));
    };
    let env = container
        .env
        .iter()
        .flatten()
        .map(|var| {
            let mut var = var.clone();
            if let Some(field) = var
                .value_from
                .as_mut()
                .and_then(|from| from.resource_field_ref.as_mut())
                .filter(|f| f.container_name.as_deref().is_none_or(str::is_empty))
            {
                field.container_name = Some(target.to_string());
            }
            serde_json::to_value(var).expect("an EnvVar serialises")
        })
        .collect();
    let env_from = container
        .env_from
        .iter()
        .flatten()
        .map(|source| serde_json::to_value(source).expect("an EnvFromSource serialises"))
        .collect();
    Ok(TargetEnv { env, env_from })
}

/// The ephemeral container `name` that runs a hook's `command` (docs/behaviour.md §6.18): the
/// plan's image, mounts, securityContext and environment, `target`'s own environment first when
/// given (`copyTargetEnv`), in `target`'s process namespace, no stdin, no TTY. The kubelet expands
/// `$(VAR)` in `command` from the container's environment, as in any container.
pub fn container(
    name: &str,
    target: &str,
    command: &[String],
    plan: &EphemeralPlan,
    target_env: Option<&TargetEnv>,
) -> Value {
    let mut container = json!({
        "name": name,
        "image": plan.image,
        "command": command,
        // The target's process namespace, where the runtime supports it.
        "targetContainerName": target,
        "stdin": false,
        "tty": false,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    });
    let env: Vec<Value> = target_env
        .into_iter()
        .flat_map(|t| t.env.iter().cloned())
        .chain(plan.env.iter().map(|v| json!(v)))
        .collect();
    let env_from: Vec<Value> = target_env
        .into_iter()
        .flat_map(|t| t.env_from.iter().cloned())
        .chain(plan.env_from.iter().map(|v| json!(v)))
        .collect();
    for (key, value) in [
        ("volumeMounts", json!(plan.volume_mounts)),
        ("env", json!(env)),
        ("envFrom", json!(env_from)),
    ] {
        if value.as_array().is_some_and(|a| !a.is_empty()) {
            container[key] = value;
        }
    }
    if let Some(sc) = &plan.security_context {
        container["securityContext"] = json!(sc);
    }
    container
}

/// How a hook's ephemeral container ended, as its pod tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EphemeralEnd {
    /// It terminated with this exit code.
    Exited(i32),
    /// The kubelet refuses to start it, for a reason that cannot pass (it would run as root):
    /// the command did not run. The message says what to set.
    Refused(String),
    /// The pod was deleted, or ended, before the container did.
    Lost(String),
}

/// How ephemeral container `name` ended, once it did (`pod` is `None` once the pod is gone).
pub fn ended(pod: Option<&Pod>, name: &str) -> Option<EphemeralEnd> {
    let Some(pod) = pod else {
        return Some(EphemeralEnd::Lost(format!(
            "the pod was deleted while ephemeral container {name} ran"
        )));
    };
    let status = pod.status.as_ref()?;
    let state = status
        .ephemeral_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .and_then(|c| c.state.as_ref());
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        return Some(EphemeralEnd::Exited(t.exit_code));
    }
    if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
        let message = w.message.as_deref().unwrap_or_default();
        if let Some(hint) = w
            .reason
            .as_deref()
            .filter(|r| *r == "CreateContainerConfigError")
            .and_then(|_| root_refusal_hint(message))
        {
            return Some(EphemeralEnd::Refused(format!(
                "ephemeral container {name} cannot start: {message}; {hint}"
            )));
        }
    }
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return Some(EphemeralEnd::Lost(format!(
            "the pod ended before ephemeral container {name} did"
        )));
    }
    None
}

/// What to set when the kubelet refused a container as root (its `runAsNonRoot` check, whose
/// messages these are): `None` for any other refusal, which may pass (a Secret created later).
fn root_refusal_hint(message: &str) -> Option<&'static str> {
    if message.contains("image has non-numeric user") {
        Some(
            "the kubelet can tell only a numeric user is not root: set the hook's \
             securityContext.runAsUser to that user's uid",
        )
    } else if message.contains("runAsNonRoot") || message.contains("non-root policy") {
        Some(
            "a hook's container never runs as root (docs/behaviour.md §6.18): set the hook's \
             securityContext.runAsUser to a non-root uid the image can run as (e.g. 65534), or \
             use an image whose USER is a non-root uid",
        )
    } else {
        None
    }
}

/// Why ephemeral container `name` is not running yet, when the pod says (`ErrImagePull`,
/// `CreateContainerConfigError: secret "db" not found`, ...): what a timeout reports.
pub fn waiting(pod: &Pod, name: &str) -> Option<String> {
    let waiting = pod
        .status
        .as_ref()?
        .ephemeral_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?;
    let reason = waiting.reason.as_deref().unwrap_or("waiting");
    Some(match waiting.message.as_deref().filter(|m| !m.is_empty()) {
        Some(message) => format!("{reason}: {message}"),
        None => reason.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::types::{HookFieldSelector, HookObjectRef};

    fn sc(value: Value) -> HookSecurityContext {
        serde_json::from_value(value).unwrap()
    }

    fn env(value: Value) -> Vec<HookEnvVar> {
        serde_json::from_value(value).unwrap()
    }

    fn env_from(value: Value) -> Vec<HookEnvFromSource> {
        serde_json::from_value(value).unwrap()
    }

    /// Only the message's start: the rest explains.
    fn compiled(fields: EphemeralFields<'_>) -> Result<Option<EphemeralPlan>, (ExecField, String)> {
        compile(fields).map_err(|e| (e.field, e.message))
    }

    const IMAGE: Option<&str> = Some("busybox:1.36");

    /// §3.4 row 17: every securityContext value within `restricted` is accepted, everything
    /// beyond it refused with what to do, whoever the author is.
    #[test]
    fn a_security_context_stays_within_restricted() {
        let accepted = [
            json!({}),
            json!({"runAsUser": 1000, "runAsGroup": 0, "runAsNonRoot": true}),
            json!({"allowPrivilegeEscalation": false, "privileged": false, "readOnlyRootFilesystem": true}),
            json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}),
            json!({"capabilities": {"drop": ["NET_RAW", "ALL"]}}),
            json!({"capabilities": {"add": []}}),
            json!({"seccompProfile": {"type": "RuntimeDefault"}}),
            json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/hook.json"}}),
        ];
        for value in accepted {
            let written = sc(value.clone());
            let plan = compiled(EphemeralFields {
                image: IMAGE,
                security_context: Some(&written),
                ..Default::default()
            });
            assert!(
                matches!(&plan, Ok(Some(p)) if p.security_context.as_ref() == Some(&written)),
                "{value}: {plan:?}"
            );
        }
        let refused = [
            (
                json!({"privileged": true}),
                "privileged: true is refused: a hook's container stays within Pod Security's restricted level",
            ),
            (
                json!({"allowPrivilegeEscalation": true}),
                "allowPrivilegeEscalation: true is refused",
            ),
            (
                json!({"runAsNonRoot": false}),
                "runAsNonRoot: false is refused",
            ),
            (json!({"runAsUser": 0}), "runAsUser: 0 (root) is refused"),
            (
                json!({"runAsUser": -1}),
                "runAsUser -1 is not a uid; give 1 to 2147483647",
            ),
            (
                json!({"runAsUser": 2_147_483_648_i64}),
                "runAsUser 2147483648 is not a uid",
            ),
            (
                json!({"runAsGroup": -5}),
                "runAsGroup -5 is not a gid; give 0 to 2147483647",
            ),
            (
                json!({"capabilities": {"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]}}),
                "capabilities.add [\"SYS_ADMIN\"] is refused",
            ),
            (
                json!({"capabilities": {"add": ["NET_ADMIN"]}}),
                "capabilities.add [\"NET_ADMIN\"] is refused",
            ),
            (
                json!({"capabilities": {"drop": ["NET_RAW"]}}),
                "capabilities.drop [\"NET_RAW\"] without ALL is refused",
            ),
            (
                json!({"seccompProfile": {"type": "Unconfined"}}),
                "seccompProfile type Unconfined is refused",
            ),
            (
                json!({"seccompProfile": {"type": "runtimedefault"}}),
                "seccompProfile type \"runtimedefault\" is neither RuntimeDefault nor Localhost",
            ),
            (
                json!({"seccompProfile": {"type": "Localhost"}}),
                "seccompProfile type Localhost needs localhostProfile",
            ),
            (
                json!({"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "x"}}),
                "seccompProfile localhostProfile is only for type Localhost",
            ),
        ];
        for (value, message) in refused {
            let written = sc(value.clone());
            let err = compiled(EphemeralFields {
                image: IMAGE,
                security_context: Some(&written),
                ..Default::default()
            })
            .unwrap_err();
            assert_eq!(err.0, ExecField::SecurityContext, "{value}");
            assert!(err.1.starts_with(message), "{value}: {}", err.1);
        }
    }

    /// §3.4 rows 16 and 18: the ephemeral container's fields need an image; env and envFrom are
    /// checked as the API server would, and reach the plan.
    #[test]
    fn env_and_env_from_are_checked_and_planned() {
        let written_env = env(json!([
            {"name": "MODE", "value": "restore"},
            {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}}},
            {"name": "HOST", "valueFrom": {"configMapKeyRef": {"name": "db.config", "key": "host.name", "optional": true}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "TEAM", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels['team']"}}},
            {"name": "my.relaxed-name", "value": ""},
        ]));
        let written_from = env_from(json!([
            {"secretRef": {"name": "db-creds"}, "prefix": "DB_"},
            {"configMapRef": {"name": "settings", "optional": true}},
        ]));
        let plan = compiled(EphemeralFields {
            image: IMAGE,
            env: &written_env,
            env_from: &written_from,
            copy_target_env: true,
            ..Default::default()
        })
        .unwrap()
        .unwrap();
        assert!(plan.copy_target_env);
        assert_eq!(plan.env_from, written_from);
        assert_eq!(
            plan.env[3].value_from.as_ref().unwrap().field_ref,
            Some(HookFieldSelector {
                api_version: Some("v1".into()),
                field_path: "metadata.name".into()
            }),
            "fieldRef's apiVersion is written out"
        );
        assert_eq!(&plan.env[..3], &written_env[..3]);

        let env_refused = [
            (json!([{"name": ""}]), "\"\" (entry 0): name is empty"),
            (
                json!([{"name": "A=B"}]),
                "\"A=B\" (entry 0): name \"A=B\" has a character other than printable ASCII, or '='",
            ),
            (
                json!([{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
                "\"A\" (entry 0): has both value and valueFrom",
            ),
            (
                json!([{"name": "A", "valueFrom": {}}]),
                "\"A\" (entry 0): valueFrom sets 0 sources",
            ),
            (
                json!([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}, "configMapKeyRef": {"name": "c", "key": "k"}}}]),
                "\"A\" (entry 0): valueFrom sets 2 sources",
            ),
            (
                json!([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "Db_Creds", "key": "k"}}}]),
                "\"A\" (entry 0): secretKeyRef name \"Db_Creds\" is not a Secret name",
            ),
            (
                json!([{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "a/b"}}}]),
                "\"A\" (entry 0): configMapKeyRef key \"a/b\" is not a ConfigMap key",
            ),
            (
                json!([{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}]),
                "\"A\" (entry 0): fieldRef fieldPath \"spec.containers\" is not a pod field",
            ),
            (
                json!([{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]),
                "\"A\" (entry 0): fieldRef fieldPath \"metadata.labels\" is not a pod field",
            ),
            (
                json!([{"name": "A", "valueFrom": {"fieldRef": {"apiVersion": "v2", "fieldPath": "metadata.name"}}}]),
                "\"A\" (entry 0): fieldRef apiVersion \"v2\" is not v1",
            ),
        ];
        for (value, message) in env_refused {
            let written = env(value.clone());
            let err = compiled(EphemeralFields {
                image: IMAGE,
                env: &written,
                ..Default::default()
            })
            .unwrap_err();
            assert_eq!(err, (ExecField::Env, err.1.clone()), "{value}");
            assert!(err.1.starts_with(message), "{value}: {}", err.1);
        }
        let from_refused = [
            (
                json!([{}]),
                "entry 0: give exactly one of secretRef and configMapRef",
            ),
            (
                json!([{"secretRef": {"name": "a"}, "configMapRef": {"name": "b"}}]),
                "entry 0: give exactly one",
            ),
            (
                json!([{"configMapRef": {"name": "-bad"}}]),
                "entry 0: configMapRef name \"-bad\" is not a ConfigMap name",
            ),
            (
                json!([{"secretRef": {"name": "s"}, "prefix": "A="}]),
                "entry 0: prefix \"A=\" has a character",
            ),
        ];
        for (value, message) in from_refused {
            let written = env_from(value.clone());
            let err = compiled(EphemeralFields {
                image: IMAGE,
                env_from: &written,
                ..Default::default()
            })
            .unwrap_err();
            assert_eq!(err.0, ExecField::EnvFrom, "{value}");
            assert!(err.1.starts_with(message), "{value}: {}", err.1);
        }

        // Without an image, none of them: a plain exec runs in the target as it is.
        let mounts = [HookVolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..Default::default()
        }];
        let written_sc = HookSecurityContext::default();
        let from = [HookEnvFromSource {
            secret_ref: Some(HookObjectRef {
                name: "s".into(),
                optional: None,
            }),
            ..Default::default()
        }];
        for (fields, named) in [
            (
                EphemeralFields {
                    volume_mounts: &mounts,
                    ..Default::default()
                },
                "volumeMounts",
            ),
            (
                EphemeralFields {
                    security_context: Some(&written_sc),
                    ..Default::default()
                },
                "securityContext",
            ),
            (
                EphemeralFields {
                    env: &written_env,
                    env_from: &from,
                    ..Default::default()
                },
                "env, envFrom",
            ),
            (
                EphemeralFields {
                    copy_target_env: true,
                    image: Some("  "),
                    ..Default::default()
                },
                "copyTargetEnv",
            ),
        ] {
            let err = compiled(fields).unwrap_err();
            assert_eq!(err.0, ExecField::Image);
            assert!(
                err.1.starts_with(&format!("{named} without image: ")),
                "{}",
                err.1
            );
        }
        assert_eq!(compiled(EphemeralFields::default()), Ok(None));
    }

    /// The securityContext a pod's container gets: restricted's values, the hook's own, the
    /// target's user and group; never root.
    #[test]
    fn the_effective_security_context_runs_as_the_target_within_restricted() {
        let restricted = |user: Option<i64>, group: Option<i64>| {
            sc(json!({
                "runAsUser": user, "runAsGroup": group, "runAsNonRoot": true,
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"}
            }))
        };
        let run_as = |user: Option<i64>, group: Option<i64>| RunAs { user, group };
        let none = RunAs::default();
        // (the hook's, the target's, the pod's, the result or the start of the problem)
        type Case = (
            Option<Value>,
            RunAs,
            RunAs,
            Result<HookSecurityContext, &'static str>,
        );
        let cases: [Case; 8] = [
            // Defaults: restricted's values; the image's user.
            (None, none, none, Ok(restricted(None, None))),
            // As the target container runs.
            (
                None,
                run_as(Some(1001), Some(2000)),
                run_as(Some(7), None),
                Ok(restricted(Some(1001), Some(2000))),
            ),
            // The pod's own apply to the container by themselves: not copied.
            (
                None,
                none,
                run_as(Some(7), Some(8)),
                Ok(restricted(None, None)),
            ),
            // The hook's own win, field by field.
            (
                Some(json!({"runAsUser": 65534})),
                run_as(Some(1001), Some(2000)),
                none,
                Ok(restricted(Some(65534), Some(2000))),
            ),
            // A target that runs as root is not copied...
            (
                None,
                run_as(Some(0), Some(0)),
                none,
                Ok(restricted(None, Some(0))),
            ),
            // ... and a pod that runs as root needs the hook's own user.
            (
                None,
                run_as(Some(0), None),
                run_as(Some(0), None),
                Err(
                    "the pod runs as root (spec.securityContext.runAsUser: 0), and the hook's container would too",
                ),
            ),
            (
                None,
                run_as(Some(5), None),
                run_as(Some(0), None),
                Ok(restricted(Some(5), None)),
            ),
            (
                Some(
                    json!({"readOnlyRootFilesystem": true, "capabilities": {"add": ["NET_BIND_SERVICE"]}, "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}),
                ),
                none,
                none,
                Ok(sc(json!({
                    "runAsNonRoot": true, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}
                }))),
            ),
        ];
        for (written, target, pod, want) in cases {
            let written = written.map(sc);
            let got = effective_security_context(written.as_ref(), target, pod, false);
            match want {
                Ok(want) => assert_eq!(got, Ok(want), "{written:?} {target:?} {pod:?}"),
                Err(start) => assert!(
                    got.as_ref().is_err_and(|e| e.starts_with(start)),
                    "{written:?} {target:?} {pod:?}: {got:?}"
                ),
            }
        }
        // Windows: only runAsNonRoot; Linux settings of the hook are a problem there.
        assert_eq!(
            effective_security_context(None, run_as(Some(1), None), none, true),
            Ok(sc(json!({"runAsNonRoot": true})))
        );
        assert_eq!(
            effective_security_context(Some(&sc(json!({"runAsUser": 5}))), none, none, true),
            Err("securityContext.runAsUser is a Linux setting, and the pod runs Windows (spec.os.name: windows); remove it".to_string())
        );
    }

    fn pod(value: Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    /// The container the controller adds: the plan's fields, the target's own environment first
    /// with `copyTargetEnv` (its resource references kept on the target), nothing empty.
    #[test]
    fn the_container_carries_the_plan_and_the_targets_environment() {
        let plain = EphemeralPlan {
            image: "busybox:1.36".into(),
            ..Default::default()
        };
        let command = ["/bin/sh".to_string(), "-c".into(), "echo $(MODE)".into()];
        assert_eq!(
            container("restore-hooks-0-1", "api", &command, &plain, None),
            json!({
                "name": "restore-hooks-0-1", "image": "busybox:1.36",
                "command": ["/bin/sh", "-c", "echo $(MODE)"], "targetContainerName": "api",
                "stdin": false, "tty": false, "terminationMessagePolicy": "FallbackToLogsOnError",
            }),
            "a plan issued before securityContext and env existed: none"
        );

        let target = pod(json!({
            "metadata": {"name": "api-0"},
            "spec": {
                "containers": [
                    {"name": "other", "env": [{"name": "OTHER", "value": "no"}]},
                    {"name": "api",
                     "env": [
                        {"name": "DB_URL", "valueFrom": {"secretKeyRef": {"name": "app", "key": "url"}}},
                        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
                        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"containerName": "other", "resource": "limits.cpu"}}},
                        {"name": "MODE", "value": "app"}],
                     "envFrom": [{"configMapRef": {"name": "app-config"}}]},
                ],
                "initContainers": [{"name": "proxy", "restartPolicy": "Always", "envFrom": [{"secretRef": {"name": "mesh"}}]}],
            }
        }));
        let copied = target_env(&target, "api").unwrap();
        let plan = EphemeralPlan {
            image: "postgres:17".into(),
            volume_mounts: vec![HookVolumeMount {
                name: "data".into(),
                mount_path: "/data".into(),
                read_only: Some(true),
                sub_path: None,
            }],
            security_context: Some(
                effective_security_context(
                    None,
                    RunAs {
                        user: Some(999),
                        group: None,
                    },
                    RunAs::default(),
                    false,
                )
                .unwrap(),
            ),
            env: env(json!([{"name": "MODE", "value": "restore"}])),
            env_from: env_from(json!([{"secretRef": {"name": "db-creds"}}])),
            copy_target_env: true,
        };
        assert_eq!(
            container("restore-hooks-2-1", "api", &command, &plan, Some(&copied)),
            json!({
                "name": "restore-hooks-2-1", "image": "postgres:17",
                "command": ["/bin/sh", "-c", "echo $(MODE)"], "targetContainerName": "api",
                "stdin": false, "tty": false, "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
                "securityContext": {
                    "runAsUser": 999, "runAsNonRoot": true, "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}
                },
                "env": [
                    {"name": "DB_URL", "valueFrom": {"secretKeyRef": {"name": "app", "key": "url"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"containerName": "api", "resource": "limits.memory"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"containerName": "other", "resource": "limits.cpu"}}},
                    {"name": "MODE", "value": "app"},
                    // The hook's own come last: the last definition of a name wins.
                    {"name": "MODE", "value": "restore"}
                ],
                "envFrom": [{"configMapRef": {"name": "app-config"}}, {"secretRef": {"name": "db-creds"}}],
            })
        );
        // A native sidecar is a target too; a container the pod lacks has nothing to copy.
        assert_eq!(
            target_env(&target, "proxy").unwrap(),
            TargetEnv {
                env: vec![],
                env_from: vec![json!({"secretRef": {"name": "mesh"}})]
            }
        );
        assert!(
            target_env(&target, "gone")
                .unwrap_err()
                .contains("no container \"gone\"")
        );
    }

    /// How the pod tells an ephemeral container ended: an exit code, a kubelet refusal that
    /// cannot pass (root), the pod gone or ended; a refusal that may pass is waited out.
    #[test]
    fn the_pod_tells_how_the_container_ended() {
        let with = |phase: &str, state: Value| {
            pod(json!({
                "status": {"phase": phase, "ephemeralContainerStatuses": [
                    {"name": "restore-hooks-0-1", "image": "busybox", "imageID": "", "ready": false,
                     "restartCount": 0, "state": state}
                ]}
            }))
        };
        let refused = |message: &str| {
            with(
                "Running",
                json!({"waiting": {"reason": "CreateContainerConfigError", "message": message}}),
            )
        };
        let name = "restore-hooks-0-1";
        let end = |p: &Pod| ended(Some(p), name);
        assert_eq!(
            end(&with("Running", json!({"terminated": {"exitCode": 3}}))),
            Some(EphemeralEnd::Exited(3))
        );
        assert_eq!(end(&with("Running", json!({"running": {}}))), None);
        assert_eq!(end(&pod(json!({"status": {"phase": "Running"}}))), None);
        assert_eq!(
            end(&pod(json!({"status": {"phase": "Succeeded"}}))),
            Some(EphemeralEnd::Lost(format!(
                "the pod ended before ephemeral container {name} did"
            )))
        );
        assert_eq!(
            ended(None, name),
            Some(EphemeralEnd::Lost(format!(
                "the pod was deleted while ephemeral container {name} ran"
            )))
        );
        for (message, hint) in [
            (
                "container has runAsNonRoot and image will run as root (pod: \"api-0_shop(uid)\", container: restore-hooks-0-1)",
                "set the hook's securityContext.runAsUser to a non-root uid the image can run as (e.g. 65534)",
            ),
            (
                "container's runAsUser breaks non-root policy (pod: \"api-0_shop(uid)\", container: restore-hooks-0-1)",
                "set the hook's securityContext.runAsUser to a non-root uid",
            ),
            (
                "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root (pod: \"x\", container: restore-hooks-0-1)",
                "set the hook's securityContext.runAsUser to that user's uid",
            ),
        ] {
            match end(&refused(message)) {
                Some(EphemeralEnd::Refused(why)) => {
                    assert!(
                        why.starts_with(&format!(
                            "ephemeral container {name} cannot start: {message}; "
                        )),
                        "{why}"
                    );
                    assert!(why.contains(hint), "{why}");
                }
                other => panic!("{message}: {other:?}"),
            }
        }
        // A Secret not there yet may be created: the kubelet tries again, so does the wait.
        let missing = refused("secret \"db-creds\" not found");
        assert_eq!(end(&missing), None);
        assert_eq!(
            waiting(&missing, name).as_deref(),
            Some("CreateContainerConfigError: secret \"db-creds\" not found")
        );
        assert_eq!(
            waiting(
                &with("Pending", json!({"waiting": {"reason": "ErrImagePull"}})),
                name
            )
            .as_deref(),
            Some("ErrImagePull")
        );
        assert_eq!(
            waiting(&with("Running", json!({"running": {}})), name),
            None
        );
    }
}
