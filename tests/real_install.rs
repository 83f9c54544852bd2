//! The Helm chart on a real kube-apiserver (e2e/realcp), the product under the chart's
//! ServiceAccount(s), and the chart's RBAC: enough (no 403 in the product's log), no broader
//! than needed (kubectl auth can-i), and a broken rule fails visibly (so the first can fail).

mod real;

use std::time::Duration;

use real::*;
use serde_json::{Value, json};

#[test]
fn the_chart_as_rendered_runs_the_product_under_its_service_account() {
    let install = Install::default_chart();
    let serve = install.start(0);
    scenarios::chart_as_installed(&install, &serve);
    serve.assert_no_forbidden();
}

/// `(verb args, expected)` for `kubectl auth can-i`.
type Checks<'a> = &'a [(&'a [&'a str], bool)];

fn check_can_i(install: &Install, sa: &str, checks: Checks) {
    let mut wrong = Vec::new();
    for (args, want) in checks {
        let got = install.can_i(sa, args);
        if got != *want {
            wrong.push(format!("can-i {} = {got}, want {want}", args.join(" ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "ServiceAccount {sa}:\n{}",
        wrong.join("\n")
    );
}

/// A list through the ServiceAccount's own token: (allowed, stderr).
fn list_as(install: &Install, kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = install.cp.kubectl_as(kubeconfig, args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_service_account_may_do_what_the_product_needs_and_nothing_more() {
    let install = Install::default_chart();
    let sa = RELEASE;
    namespace(&install.cp, "shop", json!({}));
    check_can_i(
        &install,
        sa,
        &[
            // What the code paths need (docs/install.md "RBAC").
            (
                &["create", "pods", "--subresource=exec", "-n", "shop"],
                true,
            ),
            (&["get", "pods", "--subresource=exec", "-n", "shop"], true),
            (&["patch", "pods", "-n", "shop"], true),
            (&["list", "pods", "-A"], true),
            (&["watch", "pods", "-A"], true),
            (&["create", "events", "-n", "shop"], true),
            // The leader labels restore namespaces (docs/behaviour.md §1.6); the chart's
            // namespace-labels policy limits the patch to that label and its annotation.
            (&["patch", "namespaces"], true),
            // Events are core/v1, created new each time (docs/behaviour.md §6.12).
            (&["patch", "events", "-n", "shop"], false),
            (&["create", "events.events.k8s.io", "-n", "shop"], false),
            (
                &[
                    "patch",
                    "restorehooks.restore-hooks.dev",
                    "--subresource=status",
                    "-n",
                    "shop",
                ],
                true,
            ),
            (
                &[
                    "patch",
                    "clusterrestorehooks.restore-hooks.dev",
                    "--subresource=status",
                ],
                true,
            ),
            (&["create", "restoreruns.restore-hooks.dev"], true),
            (&["delete", "restoreruns.restore-hooks.dev"], true),
            (
                &[
                    "patch",
                    "restoreruns.restore-hooks.dev",
                    "--subresource=status",
                ],
                true,
            ),
            (&["create", "restorerecords.restore-hooks.dev"], true),
            (
                &[
                    "patch",
                    "restorerecords.restore-hooks.dev",
                    "--subresource=status",
                ],
                true,
            ),
            (
                &["get", "secrets/restore-hooks-plan-key", "-n", NAMESPACE],
                true,
            ),
            (&["create", "secrets", "-n", NAMESPACE], true),
            (
                &["create", "leases.coordination.k8s.io", "-n", NAMESPACE],
                true,
            ),
            (
                &[
                    "update",
                    "leases.coordination.k8s.io/restore-hooks-controller",
                    "-n",
                    NAMESPACE,
                ],
                true,
            ),
            // Secrets: the plan key only, in its namespace only.
            (&["get", "secrets", "-n", NAMESPACE], false),
            (&["get", "secrets/other", "-n", NAMESPACE], false),
            (&["list", "secrets", "-n", NAMESPACE], false),
            (&["watch", "secrets", "-n", NAMESPACE], false),
            (
                &["update", "secrets/restore-hooks-plan-key", "-n", NAMESPACE],
                false,
            ),
            (
                &["delete", "secrets/restore-hooks-plan-key", "-n", NAMESPACE],
                false,
            ),
            (
                &["get", "secrets/restore-hooks-plan-key", "-n", "shop"],
                false,
            ),
            (&["get", "secrets", "-n", "shop"], false),
            (&["create", "secrets", "-n", "shop"], false),
            (&["list", "secrets", "-A"], false),
            // Pods: patch only, never create, update or delete, no other subresource.
            (&["create", "pods", "-n", "shop"], false),
            (&["update", "pods", "-n", "shop"], false),
            (&["delete", "pods", "-n", "shop"], false),
            (&["deletecollection", "pods", "-n", "shop"], false),
            (
                &["create", "pods", "--subresource=eviction", "-n", "shop"],
                false,
            ),
            (
                &["create", "pods", "--subresource=attach", "-n", "shop"],
                false,
            ),
            (
                &["create", "pods", "--subresource=portforward", "-n", "shop"],
                false,
            ),
            (&["get", "pods", "--subresource=log", "-n", "shop"], false),
            (
                &["patch", "pods", "--subresource=status", "-n", "shop"],
                false,
            ),
            (
                &[
                    "create",
                    "pods",
                    "--subresource=ephemeralcontainers",
                    "-n",
                    "shop",
                ],
                false,
            ),
            // Hook objects: read and status patches; never the spec, never update.
            (
                &["create", "restorehooks.restore-hooks.dev", "-n", "shop"],
                false,
            ),
            (
                &["update", "restorehooks.restore-hooks.dev", "-n", "shop"],
                false,
            ),
            (
                &["patch", "restorehooks.restore-hooks.dev", "-n", "shop"],
                false,
            ),
            (
                &["delete", "restorehooks.restore-hooks.dev", "-n", "shop"],
                false,
            ),
            (
                &[
                    "update",
                    "restorehooks.restore-hooks.dev",
                    "--subresource=status",
                    "-n",
                    "shop",
                ],
                false,
            ),
            (&["create", "clusterrestorehooks.restore-hooks.dev"], false),
            (&["patch", "clusterrestorehooks.restore-hooks.dev"], false),
            (&["update", "restoreruns.restore-hooks.dev"], false),
            (&["patch", "restoreruns.restore-hooks.dev"], false),
            (&["patch", "restorerecords.restore-hooks.dev"], false),
            (&["get", "restorerecords.restore-hooks.dev"], false),
            // Leases: only its own, and no delete.
            (
                &[
                    "update",
                    "leases.coordination.k8s.io/other",
                    "-n",
                    NAMESPACE,
                ],
                false,
            ),
            (
                &["get", "leases.coordination.k8s.io/other", "-n", NAMESPACE],
                false,
            ),
            (
                &[
                    "delete",
                    "leases.coordination.k8s.io/restore-hooks-controller",
                    "-n",
                    NAMESPACE,
                ],
                false,
            ),
            (
                &["create", "leases.coordination.k8s.io", "-n", "shop"],
                false,
            ),
            // Nothing else.
            (&["update", "namespaces"], false),
            (&["list", "configmaps", "-A"], false),
            (&["get", "nodes"], false),
            (&["list", "serviceaccounts", "-A"], false),
            (
                &[
                    "create",
                    "serviceaccounts",
                    "--subresource=token",
                    "-n",
                    NAMESPACE,
                ],
                false,
            ),
            (&["impersonate", "users"], false),
            (&["impersonate", "serviceaccounts", "-n", NAMESPACE], false),
            (&["escalate", "clusterroles"], false),
            (&["bind", "clusterroles"], false),
            (&["create", "clusterrolebindings"], false),
            (&["patch", "mutatingwebhookconfigurations"], false),
            (&["delete", "validatingadmissionpolicies"], false),
            (&["create", "deployments.apps", "-n", "shop"], false),
            (&["*", "*"], false),
        ],
    );

    // Secrets for real, with its own token: the plan key by name (the field selector the code
    // uses for its list and watch), nothing else.
    let kc = install.kubeconfig_for(sa);
    let (ok, err) = list_as(
        &install,
        &kc,
        &[
            "get",
            "secrets",
            "-n",
            NAMESPACE,
            "--field-selector",
            "metadata.name=restore-hooks-plan-key",
        ],
    );
    assert!(ok, "{err}");
    for args in [
        &["get", "secrets", "-n", NAMESPACE][..],
        &["get", "secret", TLS_SECRET, "-n", NAMESPACE],
        &["get", "secrets", "-A"],
        &[
            "get",
            "secrets",
            "-n",
            NAMESPACE,
            "--field-selector",
            "metadata.name=restore-hooks-tls",
        ],
    ] {
        let (ok, err) = list_as(&install, &kc, args);
        assert!(!ok && err.contains("Forbidden"), "{args:?} allowed: {err}");
    }
}

#[test]
fn split_mode_runs_webhook_and_controller_under_their_own_accounts() {
    let install = Install::new(InstallOptions {
        helm_args: vec!["--set".into(), "split.enabled=true".into()],
        ..InstallOptions::default()
    });
    let webhook_sa =
        find(&install.rendered, "Deployment", "restore-hooks-webhook")["spec"]["template"]["spec"]
            ["serviceAccountName"]
            .as_str()
            .unwrap()
            .to_string();
    assert_ne!(webhook_sa, RELEASE);
    namespace(&install.cp, "shop", json!({NAMESPACE_LABEL: "r-split"}));
    check_can_i(
        &install,
        &webhook_sa,
        &[
            (
                &["get", "secrets/restore-hooks-plan-key", "-n", NAMESPACE],
                true,
            ),
            (&["watch", "restorehooks.restore-hooks.dev", "-A"], true),
            (
                &[
                    "patch",
                    "restorehooks.restore-hooks.dev",
                    "--subresource=status",
                    "-n",
                    "shop",
                ],
                true,
            ),
            (&["list", "namespaces"], true),
            (&["patch", "namespaces"], false),
            // The part the API server calls from the network cannot exec or write pods.
            (
                &["create", "pods", "--subresource=exec", "-n", "shop"],
                false,
            ),
            (&["get", "pods", "--subresource=exec", "-n", "shop"], false),
            (&["patch", "pods", "-n", "shop"], false),
            (&["list", "pods", "-A"], false),
            (&["get", "pods", "-n", NAMESPACE], false),
            (&["create", "events", "-n", "shop"], false),
            (&["create", "secrets", "-n", NAMESPACE], false),
            (&["list", "secrets", "-n", NAMESPACE], false),
            (&["get", "secrets/other", "-n", NAMESPACE], false),
            (&["create", "restoreruns.restore-hooks.dev"], false),
            (
                &[
                    "patch",
                    "restoreruns.restore-hooks.dev",
                    "--subresource=status",
                ],
                false,
            ),
            (&["list", "restorerecords.restore-hooks.dev"], false),
            (
                &[
                    "patch",
                    "restorerecords.restore-hooks.dev",
                    "--subresource=status",
                ],
                false,
            ),
            (
                &["create", "leases.coordination.k8s.io", "-n", NAMESPACE],
                false,
            ),
            (
                &[
                    "get",
                    "leases.coordination.k8s.io/restore-hooks-controller",
                    "-n",
                    NAMESPACE,
                ],
                false,
            ),
            (
                &["create", "restorehooks.restore-hooks.dev", "-n", "shop"],
                false,
            ),
        ],
    );

    // Both roles for real: the controller first (it creates the plan key; until then the
    // webhook is not ready), then the webhook; a restored pod's hook runs; no 403 in either.
    let replica = install.start(0);
    let (controller, webhook) = (replica.controller(), replica.webhook());
    assert_eq!(controller.role, "controller");
    assert_eq!(webhook.role, "webhook");
    assert_eq!(webhook.service_account, webhook_sa);
    let mark = install.mark("split");
    scenarios::apply_hooks(
        &install.cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "split", "namespace": "shop"},
            "spec": {"postHooks": [{"exec": {"command": ["sh", "-c", mark_cmd(&mark, "split")]}}]},
        })],
    );
    // Ready alone is not enough here (see the end of this test): the webhook replica's own entry.
    scenarios::wait_compiled(&install.cp, "shop", "split", &[webhook.identity.as_str()]);
    let created = create(
        &install.cp,
        &pod("shop", "app", &["app"], json!({}), json!({})),
    );
    assert!(plan(&created).is_some(), "{created}");
    let done = wait_hooks_ended(&install.cp, "shop", "app", Duration::from_secs(90));
    assert_eq!(done["metadata"]["labels"][EXEC_LABEL], "done", "{done}");
    assert_eq!(mark_lines(&mark).len(), 1);
    wait_restore_run(
        &install.cp,
        "r-split",
        &["Completed"],
        Duration::from_secs(60),
    );
    controller.assert_no_forbidden();
    webhook.assert_no_forbidden();

    // While no webhook replica runs, a new hook object is compiled by none: it must not be
    // reported Ready (docs/behaviour.md §8.2: "Ready=True once every webhook replica has
    // compiled the object's current generation"; a script waiting for it then creates pods
    // the webhook would admit without the hook).
    let mut replica = replica;
    replica.webhook_mut().kill();
    install
        .cp
        .apply(
            &json!({
                "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                "metadata": {"name": "uncompiled", "namespace": "shop"},
                "spec": {"postHooks": [{"exec": {"command": ["true"]}}]},
            })
            .to_string(),
        )
        .unwrap();
    let status = wait_until(
        "the controller to write the new RestoreHook's status",
        Duration::from_secs(60),
        || {
            let rh = get_json(
                &install.cp,
                &["get", "restorehook", "uncompiled", "-n", "shop"],
            )
            .ok_or("gone")?;
            let st = rh["status"].clone();
            st["observedGeneration"]
                .is_number()
                .then_some(st.clone())
                .ok_or_else(|| st.to_string())
        },
    );
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap_or_default();
    assert_ne!(
        ready["status"], "True",
        "RestoreHook shop/uncompiled is Ready although no webhook replica compiled it: {status}"
    );
}

/// Removes `verb` from the rules of `kind`/`name` that grant it on `resource`.
fn drop_verb(docs: &mut [Value], kind: &str, name: &str, resource: &str, verb: &str) {
    let role = find_mut(docs, kind, name);
    let mut dropped = false;
    for rule in role["rules"].as_array_mut().unwrap() {
        let grants = rule["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r == resource));
        if grants && let Some(verbs) = rule["verbs"].as_array_mut() {
            let before = verbs.len();
            verbs.retain(|v| v != verb);
            dropped |= verbs.len() != before;
        }
    }
    assert!(dropped, "{kind} {name} grants no {verb} on {resource}");
}

#[test]
fn without_create_on_pods_exec_hooks_fail_visibly() {
    let install = Install::new(InstallOptions {
        edit: Some(Box::new(|docs| {
            drop_verb(docs, "ClusterRole", RELEASE, "pods/exec", "create")
        })),
        ..InstallOptions::default()
    });
    assert!(!install.can_i(
        RELEASE,
        &["create", "pods", "--subresource=exec", "-n", "default"]
    ));
    let mut serve = install.start(0);
    serve.controller_mut().expect_forbidden();
    namespace(&install.cp, "shop", json!({NAMESPACE_LABEL: "r-broken"}));
    let mark = install.mark("broken-exec");
    create(
        &install.cp,
        &pod(
            "shop",
            "app",
            &["app"],
            json!({}),
            json!({"post.hook.restore.velero.io/command":
                serde_json::to_string(&["sh", "-c", &mark_cmd(&mark, "ran")]).unwrap()}),
        ),
    );
    let ended = wait_hooks_ended(&install.cp, "shop", "app", Duration::from_secs(90));
    assert_eq!(ended["metadata"]["labels"][EXEC_LABEL], "failed", "{ended}");
    let hook = &scenarios::hooks_of(&ended)[0];
    assert_eq!(hook["phase"], "Failed", "{hook}");
    let message = hook["message"].as_str().unwrap();
    eprintln!("hook message without create pods/exec: {message}");
    assert!(
        message.to_lowercase().contains("forbidden") || message.contains("403"),
        "{hook}"
    );
    assert!(mark_lines(&mark).is_empty(), "the hook ran");
    let lines = serve.forbidden_lines();
    eprintln!("forbidden lines:\n{}", lines.join("\n"));
    assert!(
        !lines.is_empty(),
        "no 403 in the log:\n{}",
        serve.log_tail(30)
    );
}

#[test]
fn without_the_plan_key_rule_the_server_is_not_ready_and_says_why() {
    let install = Install::new(InstallOptions {
        edit: Some(Box::new(|docs| {
            // The rule that reads the key by name (the one that creates it stays).
            let role = find_mut(docs, "Role", "restore-hooks-plan-key");
            let rules = role["rules"].as_array_mut().unwrap();
            let before = rules.len();
            rules.retain(|r| r["resourceNames"].is_null());
            assert_eq!(rules.len(), before - 1, "{role}");
        })),
        ..InstallOptions::default()
    });
    // The controller (it reads the key with this Role), and the webhook replica (so that a pod is
    // refused by the webhook's own answer, not because nothing answers).
    let mut serve = install.serve(ServeOptions {
        no_wait: true,
        ..ServeOptions::of("restore-hooks-controller", 0)
    });
    serve.expect_forbidden();
    let mut webhook = install.serve(ServeOptions {
        no_wait: true,
        ..ServeOptions::of("restore-hooks-webhook", 0)
    });
    webhook.expect_forbidden();
    let lines = wait_until("a 403 in the log", Duration::from_secs(60), || {
        if let Some(status) = serve.exited() {
            return Ok(vec![format!("exited: {status}")]);
        }
        let lines = serve.forbidden_lines();
        if lines.is_empty() {
            Err(serve.log_tail(5))
        } else {
            Ok(lines)
        }
    });
    eprintln!("forbidden lines:\n{}", lines.join("\n"));
    assert!(
        !serve.forbidden_lines().is_empty(),
        "{}",
        serve.log_tail(30)
    );
    // Not ready, and a restored pod does not get through unhooked (failurePolicy Fail).
    let ready = serve::http_get(serve.admin_port, "/readyz");
    eprintln!("/readyz: {ready:?}");
    assert!(!matches!(ready, Ok((200, _))), "{ready:?}");
    namespace(&install.cp, "shop", json!({NAMESPACE_LABEL: "r-nokey"}));
    let (ok, stderr) = scenarios::kubectl_object(
        &install.cp,
        &["create", "-f", "-"],
        &pod(
            "shop",
            "app",
            &["app"],
            json!({}),
            json!({"post.hook.restore.velero.io/command": "[\"true\"]"}),
        ),
    );
    eprintln!("creating a restored pod: ok={ok} {stderr}");
    // The API server shows the webhook's 503 as "unable to handle the request": the webhook's
    // log says it was its own answer (without a webhook, the call would fail to connect).
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("unable to handle the request"),
        "the webhook's 503: {stderr}"
    );
    wait_until(
        "the webhook refusing for want of a key",
        Duration::from_secs(30),
        || {
            webhook
                .log()
                .contains("admission refused: the plan key is not loaded yet")
                .then_some(())
                .ok_or_else(|| webhook.log_tail(5))
        },
    );
    // docs/behaviour.md §9.1: the webhook signs each plan. Without its key it cannot, and a pod
    // admitted with an unsigned plan never gets its exec hooks (the controller refuses the plan):
    // it must be refused instead, so that failurePolicy decides and the pod is retried.
    let pod = get_pod(&install.cp, "shop", "app");
    let signed =
        |p: &Value| p["metadata"]["annotations"]["restore-hooks.dev/plan-signature"].is_string();
    assert!(
        !ok || pod.as_ref().is_some_and(|p| plan(p).is_some() && signed(p)),
        "a restored pod was admitted with an unsigned plan while the server had no plan key: {}",
        pod.map(|p| p["metadata"].to_string()).unwrap_or_default()
    );
}
