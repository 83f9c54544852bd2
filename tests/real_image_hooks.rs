//! `image` hooks where teams need them (docs/behaviour.md §6.18), on the real API server: a
//! namespace that enforces Pod Security `restricted` (the real kube-apiserver's Pod Security
//! admission checks ephemeral containers too), credentials from a Secret, and the rules on who
//! may write such hooks (§9.6), with a ServiceAccount token that lacks the right, then has it.

mod real;

use std::path::Path;
use std::time::Duration;

use real::*;
use serde_json::{Value, json};

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// What `user` may do, as the API server answers `kubectl auth can-i --as`.
fn can(install: &Install, user: &str, args: &[&str]) -> bool {
    let mut full = vec!["auth", "can-i", "--as", user];
    full.extend(args);
    let out = install.cp.kubectl(&full);
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl {}: {other} {}",
            full.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// `kubectl create -f -` of `object` as `kubeconfig`: kubectl's stderr when refused.
fn create_as(cp: &ControlPlane, kubeconfig: &Path, object: &Value) -> Result<(), String> {
    let out = kubectl_stdin(cp, kubeconfig, &["create", "-f", "-"], &object.to_string());
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// RestoreHook `namespace/name`, once its `Ready` condition is `status`; the condition.
fn wait_ready(cp: &ControlPlane, namespace: &str, name: &str, status: &str) -> Value {
    wait_until(
        format!("RestoreHook {namespace}/{name} Ready={status}"),
        Duration::from_secs(60),
        || {
            let hook = get_json(
                cp,
                &[
                    "get",
                    "restorehooks.restore-hooks.dev",
                    name,
                    "-n",
                    namespace,
                ],
            )
            .ok_or("no RestoreHook")?;
            let ready = hook["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .cloned();
            match ready {
                Some(c) if c["status"] == status => Ok(c),
                _ => Err(hook["status"].to_string()),
            }
        },
    )
}

/// A pod `restricted` admits: the app runs as 65532 (distroless `nonroot`), no shell, with an
/// env of its own.
fn restricted_pod(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "api"}},
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "api", "image": "gcr.io/distroless/static-debian12:nonroot",
                "command": ["/server"],
                "securityContext": {"runAsUser": 65532, "runAsGroup": 65532,
                                    "allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}},
                "env": [{"name": "DB_HOST", "value": "db.shop.svc"},
                        {"name": "DB_USER", "valueFrom": {"configMapKeyRef": {"name": "db-config", "key": "user"}}}],
            }],
        },
    })
}

/// A team's migration in a namespace that enforces `restricted`, written by a ServiceAccount of
/// that team: refused while it may not get the Secret its env reads (§9.6), admitted once it may
/// (by name); then the hook's ephemeral container, with the default securityContext (the app's
/// user, restricted's values), the target's env and the Secret's key, is admitted by the API
/// server's Pod Security admission and runs to `Succeeded`. A container without that
/// securityContext is refused there: the namespace does enforce.
#[test]
fn an_image_hook_with_a_secret_in_its_env_runs_in_a_namespace_that_enforces_restricted() {
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "shop";
    namespace(
        cp,
        ns,
        json!({NAMESPACE_LABEL: "r-shop", ENFORCE: "restricted"}),
    );
    apply_list(
        cp,
        &[
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-creds", "namespace": ns},
                   "stringData": {"password": "s3cret"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "db-config", "namespace": ns},
                   "data": {"user": "app"}}),
        ],
    );
    let author = service_account_with(
        cp,
        ns,
        "author",
        json!([
            {"apiGroups": ["restore-hooks.dev"], "resources": ["restorehooks"], "verbs": ["create", "get", "list", "update", "patch"]},
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
            {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["update", "patch"]},
        ]),
    );
    let user = "system:serviceaccount:shop:author";
    assert!(can(
        &install,
        user,
        &["create", "pods", "--subresource=exec", "-n", ns]
    ));
    assert!(can(
        &install,
        user,
        &[
            "update",
            "pods",
            "--subresource=ephemeralcontainers",
            "-n",
            ns
        ]
    ));
    assert!(!can(&install, user, &["get", "secrets/db-creds", "-n", ns]));

    let hook = json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": "migrate", "namespace": ns},
        "spec": {"labelSelector": {"matchLabels": {"app": "api"}}, "postHooks": [{"exec": {
            "container": "api", "image": "busybox:1.36",
            "command": ["/bin/sh", "-c", "test -n \"$PGPASSWORD\" && test -n \"$DB_HOST\"; exit 0"],
            "copyTargetEnv": true,
            "env": [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}}}],
        }}]},
    });
    let refused = create_as(cp, &author, &hook).expect_err("the author may not get the Secret");
    assert!(
        refused.contains(
            "creating RestoreHook shop/migrate: a hook whose env or envFrom names secrets/db-creds \
             needs permission to get it in namespace shop (restore-hooks' ephemeral container reads \
             it into its environment); user system:serviceaccount:shop:author lacks it"
        ),
        "{refused}"
    );

    // Read access to that one Secret, by name.
    apply_list(
        cp,
        &[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "author-db-creds", "namespace": ns},
                   "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["db-creds"], "verbs": ["get"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "author-db-creds", "namespace": ns},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "author-db-creds"},
                   "subjects": [{"kind": "ServiceAccount", "name": "author", "namespace": ns}]}),
        ],
    );
    assert!(can(&install, user, &["get", "secrets/db-creds", "-n", ns]));
    assert!(!can(&install, user, &["get", "secrets/other", "-n", ns]));
    create_as(cp, &author, &hook).expect("the author may get the Secret now");
    wait_ready(cp, ns, "migrate", "True");

    // The namespace enforces restricted on ephemeral containers: one without a securityContext
    // is refused (on a pod no hook selects).
    let mut control = restricted_pod(ns, "control");
    control["metadata"]["labels"] = json!({"app": "control"});
    create(cp, &control);
    wait_running(cp, ns, "control");
    let bare = json!({"spec": {"ephemeralContainers": [
        {"name": "debug", "image": "busybox:1.36", "command": ["sh"], "targetContainerName": "api"}]}});
    let out = cp.kubectl([
        "patch",
        "pod",
        "control",
        "-n",
        ns,
        "--subresource=ephemeralcontainers",
        "--type=strategic",
        "-p",
        &bare.to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("violates PodSecurity \"restricted:latest\""),
        "{stderr}"
    );

    create(cp, &restricted_pod(ns, "api-0"));
    let done = wait_hooks_ended(cp, ns, "api-0", Duration::from_secs(60));
    let status = hook_status(&done).unwrap();
    assert_eq!(status["hooks"][0]["phase"], "Succeeded", "{status}");
    assert_eq!(status["hooks"][0]["exitCode"], 0, "{status}");
    let restricted = json!({
        "runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": true,
        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    assert_eq!(
        plan(&done).unwrap()["hooks"][0]["ephemeral"]["securityContext"],
        restricted,
        "signed in the plan at admission: the app's user, restricted's values"
    );
    let added = done["spec"]["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(added.len(), 1, "{added:?}");
    let container = &added[0];
    assert_eq!(container["name"], "restore-hooks-0-1");
    assert_eq!(container["targetContainerName"], "api");
    assert_eq!(container["securityContext"], restricted);
    assert_eq!(
        container["env"],
        json!([
            {"name": "DB_HOST", "value": "db.shop.svc"},
            {"name": "DB_USER", "valueFrom": {"configMapKeyRef": {"name": "db-config", "key": "user"}}},
            {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}}},
        ]),
        "the target's own env (copyTargetEnv), then the hook's"
    );
    assert_eq!(
        done["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    let run = wait_restore_run(cp, "r-shop", &["Completed"], Duration::from_secs(60));
    assert_eq!(run["status"]["hooks"]["succeeded"], 1, "{}", run["status"]);
    serve.assert_no_forbidden();
}

/// A hook's securityContext beyond `restricted` (§3.4 row 17) is refused when the hook is
/// compiled, whoever wrote it (here the admin, whom no admission policy stops): the hook object
/// is not Ready, saying why, and a pod it would apply to is denied with the same reason.
#[test]
fn a_security_context_beyond_restricted_is_refused_when_the_hook_is_compiled() {
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "ops";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-ops"}));
    apply_list(
        cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "debug", "namespace": ns},
            "spec": {"postHooks": [{"exec": {
                "container": "api", "image": "busybox:1.36", "command": ["/bin/sh", "-c", "exit 0"],
                "securityContext": {"privileged": true}}}]},
        })],
    );
    let why = "restorehook/debug postHooks[0].exec securityContext: privileged: true is refused: a \
               hook's container stays within Pod Security's restricted level (docs/behaviour.md \
               §6.18); remove it";
    let ready = wait_ready(cp, ns, "debug", "False");
    assert!(
        ready["message"].as_str().unwrap_or_default().contains(why),
        "{ready}"
    );
    let out = kubectl_stdin(
        cp,
        cp.kubeconfig(),
        &["create", "-f", "-"],
        &pod(ns, "api-0", &["api"], json!({}), json!({})).to_string(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(why), "{stderr}");
    assert!(get_pod(cp, ns, "api-0").is_none());
    serve.assert_no_forbidden();
}
