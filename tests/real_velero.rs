//! A real Velero v1.18 backup → restore (e2e/realcp: Velero out of cluster, moto S3) with the
//! chart installed and the product running under its ServiceAccount: Velero runs its own
//! annotation hooks (`--velero-hooks defer`), restore-hooks runs the RestoreHook that Velero
//! restores after the pods (late hooks), and a ClusterRestoreHook's init container goes after
//! Velero's own; a restore name longer than 63 characters; a namespace-mapped restore.

mod real;

use std::time::Duration;

use real::*;
use realcp::Velero;
use serde_json::{Value, json};

/// `velero restore create NAME --from-backup b1 ARGS --wait`, which must end Completed.
fn restore(cp: &ControlPlane, velero: &Velero, name: &str, args: &[&str]) -> Value {
    let mut full = vec!["restore", "create", name, "--from-backup", "b1", "--wait"];
    full.extend(args);
    velero.velero_ok(&full).unwrap_or_else(|e| panic!("{e:#}"));
    let phase = velero.phase("restores.velero.io", name).unwrap();
    if phase != "Completed" {
        let described = velero.velero(["restore", "describe", name, "--details"]);
        let logs = velero.velero(["restore", "logs", name]);
        panic!(
            "restore {name} is {phase}\n{}\n{}",
            String::from_utf8_lossy(&described.stdout),
            String::from_utf8_lossy(&logs.stdout)
        );
    }
    get_json(
        cp,
        &["get", "restores.velero.io", name, "-n", Velero::NAMESPACE],
    )
    .unwrap()
}

/// Velero's `label.GetValidName`: names over 63 characters become their first 57 characters
/// and the first 6 hex digits of their SHA-256.
fn velero_label(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{}{}", &name[..57], &hex[..6])
}

/// Checks that `path` has `n` lines: called once everything that runs the hook is done with the
/// restore (Velero's restore Completed, the RestoreRun Completed), so a second run would be there.
fn exactly(path: &std::path::Path, n: usize, what: &str) {
    let got = mark_lines(path).len();
    assert!(got >= n, "{what}: {got} runs");
    assert_eq!(got, n, "{what}: ran again");
}

#[test]
fn velero_backup_and_restores_run_every_hook_once() {
    let install = Install::default_chart();
    let cp = &install.cp;
    let velero = Velero::start(cp).unwrap_or_else(|e| panic!("{e:#}"));
    // Started after Velero's CRDs exist, like an installation next to Velero.
    let serve = install.start(0);

    let velero_mark = install.mark("velero-annotation-hook");
    let rh_mark = install.mark("restorehook");
    namespace(cp, "shop", json!({}));
    cp.apply(
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            // Cluster-scoped: in place before each restore, so the webhook injects its container
            // at admission, after the one Velero's annotations injected (docs/behaviour.md §4.2).
            {"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "ClusterRestoreHook",
             "metadata": {"name": "platform"},
             "spec": {"labelSelector": {"matchLabels": {"app": "db"}},
                      "postHooks": [{"init": {"initContainers": [
                          // Not Velero's definition: one that equals a container the pod
                          // has is taken as already injected (docs/behaviour.md §4.3).
                          {"name": "platform-init", "image": "busybox:1.36",
                           "command": ["sh", "-c", "echo platform ready"]}]}}]}},
            {"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
             "metadata": {"name": "reindex", "namespace": "shop"},
             "spec": {"labelSelector": {"matchLabels": {"app": "db"}},
                      "postHooks": [{"exec": {"container": "db",
                          "command": ["sh", "-c", mark_cmd(&rh_mark, "rh")]}}]}},
            {"apiVersion": "apps/v1", "kind": "StatefulSet",
             "metadata": {"name": "db", "namespace": "shop"},
             "spec": {
                 "replicas": 1, "serviceName": "db",
                 "selector": {"matchLabels": {"app": "db"}},
                 "template": {
                     "metadata": {
                         "labels": {"app": "db"},
                         "annotations": {
                             "init.hook.restore.velero.io/container-image": "busybox:1.36",
                             "init.hook.restore.velero.io/container-name": "velero-init",
                             "init.hook.restore.velero.io/command": "[\"sh\", \"-c\", \"true\"]",
                             "post.hook.restore.velero.io/container": "db",
                             "post.hook.restore.velero.io/command":
                                 serde_json::to_string(&["sh", "-c", &mark_cmd(&velero_mark, "velero")]).unwrap(),
                         },
                     },
                     "spec": {
                         "terminationGracePeriodSeconds": 0,
                         "automountServiceAccountToken": false,
                         "containers": [{"name": "db", "image": "busybox:1.36",
                                         "command": ["sleep", "infinity"]}],
                     },
                 },
             }},
        ]})
        .to_string(),
    )
    .unwrap();
    let original = wait_running(cp, "shop", "db-0");
    scenarios::assert_untouched(&original);
    velero
        .velero_ok([
            "backup",
            "create",
            "b1",
            "--include-namespaces",
            "shop",
            "--wait",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        velero.phase("backups.velero.io", "b1").unwrap(),
        "Completed"
    );
    assert!(mark_lines(&velero_mark).is_empty() && mark_lines(&rh_mark).is_empty());

    let long = "restore-of-shop-with-a-name-that-is-longer-than-sixty-three-characters";
    assert!(long.len() > 63);
    let cases = [
        ("r1", "shop", vec![]),
        (long, "shop", vec![]),
        (
            "r-mapped",
            "shop-copy",
            vec!["--namespace-mappings", "shop:shop-copy"],
        ),
    ];
    for (n, (name, ns, args)) in cases.iter().enumerate() {
        if *ns == "shop" {
            cp.kubectl_ok([
                "delete",
                "namespace",
                "shop",
                "--wait=true",
                "--timeout=180s",
            ])
            .unwrap();
        }
        let restored = restore(cp, &velero, name, args);
        eprintln!("restore {name}: {}", restored["status"]);
        let pod = wait_hooks_ended(cp, ns, "db-0", Duration::from_secs(120));
        let meta = &pod["metadata"];
        // Velero names the restore in the pod label (hashed when long); the plan and the
        // RestoreRun use the full name.
        assert_eq!(
            meta["labels"][RESTORE_LABEL],
            velero_label(name).as_str(),
            "{meta}"
        );
        assert_eq!(
            meta["labels"][RUN_LABEL],
            velero_label(name).as_str(),
            "{meta}"
        );
        assert_eq!(meta["labels"][EXEC_LABEL], "done", "{meta}");
        let p = plan(&pod).unwrap();
        assert_eq!(p["restore"], *name, "{p}");
        let sources: Vec<&str> = p["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["source"].as_str().unwrap())
            .collect();
        // --velero-hooks defer: the annotation hook is Velero's; the RestoreHook, restored
        // after the pod, was added to its plan late.
        assert_eq!(sources, ["restorehook/reindex"], "{p}");
        let hooks = scenarios::hooks_of(&pod);
        assert_eq!(hooks.len(), 1, "{hooks:?}");
        assert_eq!(hooks[0]["phase"], "Succeeded", "{hooks:?}");
        // Velero's init container once, then the ClusterRestoreHook's: Velero's sources come
        // first (docs/behaviour.md §3.2, §4.2).
        assert_eq!(
            scenarios::init_names(&pod),
            ["velero-init", "platform-init"],
            "{}",
            pod["spec"]
        );
        assert_eq!(
            meta["annotations"]["restore-hooks.dev/injected"], "platform-init",
            "{meta}"
        );
        // Everything that runs hooks is done with this restore: Velero's restore is Completed
        // (`restore` checked it), and so is the RestoreRun, which counts the results we recorded.
        let run = wait_restore_run(cp, name, &["Completed"], Duration::from_secs(60));
        // Every hook exactly once per restore: Velero's by Velero, the RestoreHook's by us.
        exactly(
            &velero_mark,
            n + 1,
            &format!("Velero's hook after restore {name}"),
        );
        exactly(
            &rh_mark,
            n + 1,
            &format!("the RestoreHook after restore {name}"),
        );
        // Velero's own count of its hooks. Who ran the hook is proved above (the plan leaves the
        // annotation hook to Velero, and its mark has one line per restore); Velero has been seen
        // to report a Completed restore with an empty `hookStatus` (and 2 warnings) although its
        // hook ran, so an absent count is reported, not failed on.
        let hook_status = &restored["status"]["hookStatus"];
        if hook_status["hooksAttempted"].is_null() {
            eprintln!("restore {name}: Velero reported no hookStatus although its hook ran");
        } else {
            assert_eq!(hook_status["hooksAttempted"], 1, "{}", restored["status"]);
        }
        assert!(hook_status["hooksFailed"].is_null() || hook_status["hooksFailed"] == 0);
        assert_eq!(run["spec"]["restore"], *name, "{run}");
        assert_eq!(run["status"]["hooks"]["succeeded"], 1, "{}", run["status"]);
        // `restore-hooks describe` by the pod label's value (hashed when the name is long) finds
        // the restore by its full name, and shows the RestoreHook's hook as late: it came back
        // with the restore, after the pod (docs/behaviour.md §8.4).
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_restore-hooks"))
            .args(["describe", &velero_label(name), "-o", "json"])
            .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "describe: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (&report["restore"], &report["restoreRun"], &report["phase"]),
            (&json!(name), &run["metadata"]["name"], &json!("Completed")),
            "{report}"
        );
        let late: Vec<(&str, &str, &str)> = report["lateHooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["pod"].as_str().unwrap(),
                    l["source"].as_str().unwrap(),
                    l["phase"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            late,
            [("db-0", "restorehook/reindex", "Succeeded")],
            "{report}"
        );
        // The RestoreHook that came back with the restore reports the late hook.
        let rh = get_json(cp, &["get", "restorehook", "reindex", "-n", ns]).unwrap();
        eprintln!("restorehook {ns}/reindex: {}", rh["status"]);
    }
    serve.assert_no_forbidden();
}
