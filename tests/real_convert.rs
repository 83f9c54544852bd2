//! `restore-hooks convert` on the real control plane with a real Velero v1.18 (e2e/realcp): the
//! objects it writes are stored by the API server under the chart's CRDs exactly as written (no
//! field refused, none pruned), and a workload converted with `--strip-velero-hooks` has its
//! hooks run once, by restore-hooks under the default `--velero-hooks defer`, and never by Velero
//! (docs/behaviour.md §3.3, §4.10).

mod real;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use real::*;
use realcp::Velero;
use serde_json::{Value, json};

/// `restore-hooks convert ARGS` on `input`: its objects, and its stderr.
fn convert(args: &[&str], input: &str) -> (Vec<Value>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_restore-hooks"))
        .arg("convert")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    use serde::Deserialize;
    let objects = yaml_serde::Deserializer::from_slice(&out.stdout)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    (objects, stderr)
}

/// Applies `objects` and checks that the API server stored each hook object's spec as written.
fn apply_and_read_back(cp: &ControlPlane, objects: &[Value]) {
    apply_list(cp, objects);
    for object in objects {
        let kind = object["kind"].as_str().unwrap();
        if !kind.ends_with("RestoreHook") {
            continue;
        }
        let name = object["metadata"]["name"].as_str().unwrap();
        let mut args = vec!["get", kind, name];
        if let Some(ns) = object["metadata"]["namespace"].as_str() {
            args.extend(["-n", ns]);
        }
        let stored = get_json(cp, &args).unwrap();
        assert_eq!(stored["spec"], object["spec"], "{kind} {name}");
        assert_eq!(
            stored["metadata"]["annotations"]["restore-hooks.dev/converted-from"],
            object["metadata"]["annotations"]["restore-hooks.dev/converted-from"]
        );
    }
}

#[test]
fn converted_hooks_run_once_by_restore_hooks_and_never_by_velero() {
    let install = Install::default_chart();
    let cp = &install.cp;
    let velero = Velero::start(cp).unwrap_or_else(|e| panic!("{e:#}"));
    let serve = install.start(0);
    let mark = install.mark("converted");
    for ns in ["shop", "data"] {
        namespace(cp, ns, json!({}));
    }

    // Velero Restores' hooks, both ways they convert (RestoreHooks per named namespace;
    // ClusterRestoreHooks for every namespace but some), for restores this test never runs.
    let restores = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: by-name, namespace: velero}
spec:
  hooks:
    resources:
    - name: restore-hook-1
      includedNamespaces: [shop, data]
      labelSelector: {matchExpressions: [{key: app, operator: In, values: [db]}]}
      postHooks:
      - init:
          initContainers:
          - name: restore-hook-init1
            image: alpine:latest
            volumeMounts: [{mountPath: /restores/pvc1-vm, name: pvc1-vm}]
            command: [/bin/ash, -c, 'echo -n "FOOBARBAZ" >> /restores/pvc1-vm/foobarbaz']
            securityContext: {runAsNonRoot: true}
      - exec: {container: db, command: [/bin/sh, -c, 'echo $$'], onError: Fail, execTimeout: 1m, waitTimeout: 5m, waitForReady: true}
---
apiVersion: velero.io/v1
kind: Restore
metadata: {name: everywhere, namespace: velero}
spec:
  hooks:
    resources:
    - name: first
      includedNamespaces: [shop]
      postHooks: [{exec: {command: [/first]}}]
    - name: all-but-system
      excludedNamespaces: [kube-system, kube-node-lease]
      postHooks: [{exec: {command: [/second]}}]
"#;
    let (objects, _) = convert(&["-f", "-", "--restores", "never-*"], restores);
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "RestoreHook",
            "RestoreHook",
            "ClusterRestoreHook",
            "ClusterRestoreHook"
        ]
    );
    apply_and_read_back(cp, &objects);

    // A StatefulSet as its manifest had it, with Velero's hooks; converted and stripped.
    let statefulset = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "shop"},
        "spec": {
            "replicas": 1, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {
                    "labels": {"app": "db"},
                    "annotations": {
                        "init.hook.restore.velero.io/container-image": "busybox:1.36",
                        "init.hook.restore.velero.io/container-name": "restore-marker",
                        "init.hook.restore.velero.io/command": "[\"sh\", \"-c\", \"true\"]",
                        "post.hook.restore.velero.io/command":
                            serde_json::to_string(&["sh", "-c", &mark_cmd(&mark, "converted")]).unwrap(),
                        "post.hook.restore.velero.io/on-error": "Fail",
                        "post.hook.restore.velero.io/exec-timeout": "1m",
                    },
                },
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "db", "image": "busybox:1.36",
                                    "command": ["sleep", "infinity"]}],
                },
            },
        },
    });
    let (objects, stderr) = convert(
        &["-f", "-", "--strip-velero-hooks"],
        &statefulset.to_string(),
    );
    // The mark's `$(date ...)` is Velero's literal text: written `$$(`, it stays so.
    assert!(
        stderr.contains("post.hook.restore.velero.io/command: each `$`"),
        "{stderr}"
    );
    let [hook, stripped] = &objects[..] else {
        panic!("{objects:?}")
    };
    assert_eq!(hook["metadata"]["name"], "velero-statefulset-db");
    assert!(
        stripped["spec"]["template"]["metadata"]["annotations"].is_null(),
        "{stripped}"
    );
    apply_and_read_back(cp, &objects);
    let running = wait_running(cp, "shop", "db-0");
    scenarios::assert_untouched(&running);

    // Back up the application (its hook objects stay in the cluster: they must exist before the
    // pods are restored, docs/hooks.md), lose it, restore it.
    velero
        .velero_ok([
            "backup",
            "create",
            "b1",
            "--include-namespaces",
            "shop",
            "--exclude-resources",
            "restorehooks.restore-hooks.dev",
            "--wait",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        velero.phase("backups.velero.io", "b1").unwrap(),
        "Completed"
    );
    cp.kubectl_ok([
        "delete",
        "statefulset",
        "db",
        "-n",
        "shop",
        "--cascade=foreground",
        "--wait=true",
        "--timeout=120s",
    ])
    .unwrap();
    cp.kubectl_ok([
        "wait",
        "--for=delete",
        "pod/db-0",
        "-n",
        "shop",
        "--timeout=120s",
    ])
    .unwrap();
    velero
        .velero_ok(["restore", "create", "r1", "--from-backup", "b1", "--wait"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let restored = get_json(
        cp,
        &["get", "restores.velero.io", "r1", "-n", Velero::NAMESPACE],
    )
    .unwrap();
    assert_eq!(restored["status"]["phase"], "Completed", "{restored}");

    let pod = wait_hooks_ended(cp, "shop", "db-0", Duration::from_secs(120));
    let meta = &pod["metadata"];
    assert_eq!(meta["labels"][RESTORE_LABEL], "r1", "{meta}");
    let p = plan(&pod).unwrap();
    let sources: Vec<&str> = p["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["restorehook/velero-statefulset-db"], "{p}");
    assert_eq!(p["hooks"][0]["onError"], "Fail", "{p}");
    assert_eq!(p["hooks"][0]["execTimeoutMs"], 60_000, "{p}");
    let hooks = scenarios::hooks_of(&pod);
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["phase"], "Succeeded", "{hooks:?}");
    // The init container once, injected by restore-hooks: Velero found no annotation to act on.
    assert_eq!(
        scenarios::init_names(&pod),
        ["restore-marker"],
        "{}",
        pod["spec"]
    );
    assert_eq!(
        meta["annotations"]["restore-hooks.dev/injected"],
        "restore-marker"
    );
    let run = wait_restore_run(cp, "r1", &["Completed"], Duration::from_secs(60));
    assert_eq!(run["status"]["hooks"]["succeeded"], 1, "{}", run["status"]);
    // Everything that runs hooks is done with r1: the hook ran once, the command as written
    // (its `$(date +%s%N)` expanded by the shell, not left as text).
    let lines = mark_lines(&mark);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let stamp = lines[0].strip_prefix("converted ").unwrap();
    assert!(stamp.parse::<u128>().is_ok(), "{lines:?}");
    // Velero ran no hook of its own.
    let attempted = &restored["status"]["hookStatus"]["hooksAttempted"];
    assert!(
        attempted.is_null() || *attempted == 0,
        "{}",
        restored["status"]
    );
    serve.assert_no_forbidden();
}
