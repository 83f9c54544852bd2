//! Many teams share one cluster (docs/behaviour.md §6.16, §6.20, security.md): on the real API
//! server, with identities that lack the right, a team's restore depends only on what that team
//! and the platform wrote, never on another namespace's objects or on labels any pod creator
//! can set.

mod real;

use std::path::PathBuf;
use std::time::Duration;

use real::*;
use serde_json::{Value, json};

fn tenant(install: &Install, ns: &str, name: &str, rules: Value) -> PathBuf {
    service_account_with(&install.cp, ns, name, rules)
}

/// What `user` may do, as the API server answers `kubectl auth can-i --as`.
fn can(install: &Install, user: &str, args: &[&str]) -> bool {
    let mut full = vec!["auth", "can-i", "--as", user];
    full.extend(args);
    String::from_utf8_lossy(&install.cp.kubectl(&full).stdout).trim() == "yes"
}

/// `kubectl create -f -` of `object` as `kubeconfig`; kubectl's stderr on failure.
fn create_as(
    install: &Install,
    kubeconfig: &std::path::Path,
    object: &Value,
) -> Result<(), String> {
    let out = kubectl_stdin(
        &install.cp,
        kubeconfig,
        &["create", "-f", "-"],
        &object.to_string(),
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn restore_hook(ns: &str, name: &str, app: &str, exec: Value) -> Value {
    json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"labelSelector": {"matchLabels": {"app": app}},
                 "postHooks": [{"exec": exec}]},
    })
}

/// Team A restores a database and then migrates (`after`). Team B, whose member may author
/// RestoreHooks and exec only in namespace `team-b`, names its objects like team A's and waits
/// in a cycle with them, then fails a hook of the awaited name in a pod of the same restore. In
/// the name-keyed model the first denied team A's pod ("waits in a cycle") and the second
/// skipped team A's migration; here neither changes anything for team A.
#[test]
fn another_tenants_objects_change_nothing_for_a_restore() {
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    for ns in ["team-a", "team-b"] {
        namespace(cp, ns, json!({NAMESPACE_LABEL: "r-shared"}));
    }
    let bob = tenant(
        &install,
        "team-b",
        "bob",
        json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete"]},
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
            {"apiGroups": ["restore-hooks.dev"], "resources": ["restorehooks"], "verbs": ["create", "get", "list", "update", "patch", "delete"]},
        ]),
    );
    let bob_user = "system:serviceaccount:team-b:bob";
    assert!(can(
        &install,
        bob_user,
        &["create", "restorehooks.restore-hooks.dev", "-n", "team-b"]
    ));
    assert!(!can(
        &install,
        bob_user,
        &["create", "restorehooks.restore-hooks.dev", "-n", "team-a"]
    ));
    assert!(!can(
        &install,
        bob_user,
        &["create", "pods", "--subresource=exec", "-n", "team-a"]
    ));

    let marks = |name: &str| install.mark(name);
    let (db_mark, migrate_mark) = (marks("a-db"), marks("a-migrate"));
    scenarios::apply_hooks(
        cp,
        &[
            restore_hook(
                "team-a",
                "db-restore",
                "db",
                json!({"command": ["sh", "-c", mark_cmd(&db_mark, "db")], "onError": "Fail"}),
            ),
            restore_hook(
                "team-a",
                "migrate",
                "api",
                json!({"command": ["sh", "-c", mark_cmd(&migrate_mark, "migrate")],
                       "after": [{"hook": "db-restore"}]}),
            ),
        ],
    );

    // Bob's objects, named like team A's, waiting in a cycle with them; one matches no restore.
    let cycle = [
        {
            let mut h = restore_hook(
                "team-b",
                "db-restore",
                "nothing",
                json!({"command": ["true"], "after": [{"hook": "migrate"}]}),
            );
            h["spec"]["restores"] = json!(["no-such-restore-*"]);
            h
        },
        restore_hook(
            "team-b",
            "migrate",
            "nothing",
            json!({"command": ["true"], "after": [{"hook": "db-restore"}]}),
        ),
    ];
    for h in &cycle {
        create_as(&install, &bob, h).unwrap_or_else(|e| panic!("bob's RestoreHook: {e}"));
    }
    for name in ["db-restore", "migrate"] {
        cp.kubectl_ok([
            "wait",
            "--for=condition=Ready",
            &format!("restorehook/{name}"),
            "-n",
            "team-b",
            "--timeout=60s",
        ])
        .unwrap();
    }
    // Team A's waiting pod is admitted with its hook: team B's objects are not in its graph.
    create(
        cp,
        &pod(
            "team-a",
            "api-0",
            &["api"],
            json!({"app": "api"}),
            json!({}),
        ),
    );
    let planned = plan(&get_pod(cp, "team-a", "api-0").unwrap()).expect("api-0 has a plan");
    assert_eq!(planned["hooks"][0]["name"], "migrate", "{planned}");
    assert_eq!(
        planned["hooks"][0]["after"],
        json!([{"hook": "db-restore", "kind": "RestoreHook", "namespace": "team-a"}])
    );

    // Bob turns db-restore into a hook that fails with onError: Fail, in a pod of the same
    // restore that he creates (he may exec there: his pod counts for team B's own hooks).
    cp.kubectl_ok(["delete", "restorehook", "db-restore", "-n", "team-b"])
        .unwrap();
    create_as(
        &install,
        &bob,
        &restore_hook(
            "team-b",
            "db-restore",
            "db",
            json!({"command": ["sh", "-c", "exit 1"], "onError": "Fail"}),
        ),
    )
    .unwrap();
    cp.kubectl_ok([
        "wait",
        "--for=condition=Ready",
        "restorehook/db-restore",
        "-n",
        "team-b",
        "--timeout=60s",
    ])
    .unwrap();
    create_as(
        &install,
        &bob,
        &pod("team-b", "db-x", &["db"], json!({"app": "db"}), json!({})),
    )
    .unwrap();
    let failed = wait_hooks_ended(cp, "team-b", "db-x", Duration::from_secs(120));
    assert_eq!(scenarios::hooks_of(&failed)[0]["phase"], "Failed");
    // Team A's migration still waits: for its own database, which is not there yet.
    std::thread::sleep(Duration::from_secs(3));
    let waiting = get_pod(cp, "team-a", "api-0").unwrap();
    assert_eq!(waiting["metadata"]["labels"][EXEC_LABEL], "pending");
    assert!(
        mark_lines(&migrate_mark).is_empty(),
        "migrated before the database"
    );

    // Team A's database comes; its restore hook succeeds; then the migration runs, once.
    create(
        cp,
        &pod("team-a", "db-0", &["db"], json!({"app": "db"}), json!({})),
    );
    let db = wait_hooks_ended(cp, "team-a", "db-0", Duration::from_secs(120));
    assert_eq!(scenarios::hooks_of(&db)[0]["phase"], "Succeeded");
    let api = wait_hooks_ended(cp, "team-a", "api-0", Duration::from_secs(120));
    let hook = &scenarios::hooks_of(&api)[0];
    assert_eq!(hook["phase"], "Succeeded", "{hook}");
    let words = |path: &std::path::Path| -> Vec<String> {
        mark_lines(path)
            .iter()
            .map(|l| l.split(' ').next().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(words(&db_mark), ["db"], "the database restored once");
    assert_eq!(words(&migrate_mark), ["migrate"], "migrated once");
    let (db_at, migrated_at) = (
        mark_lines(&db_mark)[0]
            .split(' ')
            .nth(1)
            .unwrap()
            .parse::<u128>()
            .unwrap(),
        mark_lines(&migrate_mark)[0]
            .split(' ')
            .nth(1)
            .unwrap()
            .parse::<u128>()
            .unwrap(),
    );
    assert!(
        db_at < migrated_at,
        "migrated after the database's restore hook"
    );
    serve.assert_no_forbidden();
}

/// `runOn: OnePod` (docs/behaviour.md §6.15, §6.20): a user who may only create pods in the
/// namespace adds a pod that matches the hook's selector and claims to be a StatefulSet's pod 0
/// (its labels say so) before the StatefulSet is restored. Nobody vouches for it: it neither
/// runs the migration nor holds it back; the StatefulSet's pod 0 runs it, once.
#[test]
fn a_pod_only_user_cannot_steer_or_block_a_one_pod_hook() {
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "shop";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-steer"}));
    let mallory = tenant(
        &install,
        ns,
        "mallory",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}]),
    );
    let user = "system:serviceaccount:shop:mallory";
    assert!(can(&install, user, &["create", "pods", "-n", ns]));
    assert!(!can(
        &install,
        user,
        &["create", "pods", "--subresource=exec", "-n", ns]
    ));

    let mark = install.mark("migrate");
    scenarios::apply_hooks(
        cp,
        &[restore_hook(
            ns,
            "migrate",
            "db",
            json!({"container": "db", "runOn": "OnePod",
                   "command": ["sh", "-c", format!("echo $(POD_NAME) >> '{}'", mark.display())]}),
        )],
    );
    let fake = pod(
        ns,
        "evil-0",
        &["db"],
        json!({"app": "db", "apps.kubernetes.io/pod-index": "0",
               "statefulset.kubernetes.io/pod-name": "evil-0"}),
        json!({}),
    );
    create_as(&install, &mallory, &fake).unwrap_or_else(|e| panic!("mallory's pod: {e}"));
    wait_running(cp, ns, "evil-0");
    let planned = plan(&get_pod(cp, ns, "evil-0").unwrap()).unwrap();
    assert_eq!(planned["vouchedBy"], "nobody", "{planned}");
    // Up and alone, it is still not chosen: the hook waits for a pod someone vouches for.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        mark_lines(&mark).is_empty(),
        "the migration ran in mallory's pod"
    );

    cp.apply(
        &json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {"replicas": 2, "serviceName": "db", "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "db", "sts": "db"}},
                "template": {"metadata": {"labels": {"app": "db", "sts": "db"}}, "spec": {
                    "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
                    "containers": [{"name": "db", "image": "busybox:1.36", "command": ["sleep", "infinity"]}]}}}})
        .to_string(),
    )
    .unwrap();
    for name in ["db-0", "db-1"] {
        wait_hooks_ended(cp, ns, name, Duration::from_secs(120));
    }
    let evil = wait_hooks_ended(cp, ns, "evil-0", Duration::from_secs(120));
    let phase = |p: &Value| scenarios::hooks_of(p)[0]["phase"].clone();
    let db0 = get_pod(cp, ns, "db-0").unwrap();
    assert_eq!(plan(&db0).unwrap()["vouchedBy"], "controller");
    assert_eq!(phase(&db0), "Succeeded");
    assert_eq!(phase(&get_pod(cp, ns, "db-1").unwrap()), "OtherPod");
    assert_eq!(phase(&evil), "OtherPod");
    assert_eq!(
        mark_lines(&mark),
        ["db-0"],
        "once, in the StatefulSet's pod 0"
    );
    let run = wait_restore_run(cp, "r-steer", &["Completed"], Duration::from_secs(60));
    assert_eq!(
        run["status"]["onePod"][0]["pod"], "db-0",
        "{}",
        run["status"]
    );
    serve.assert_no_forbidden();
}
