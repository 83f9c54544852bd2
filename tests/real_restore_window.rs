//! Restore windows (docs/behaviour.md §1.6) with a real Velero v1.18 restore into a namespace that
//! does not exist yet, the chart installed with its defaults but a short window
//! (`config.restoreWindow=20s`): nobody labels anything by hand. Velero recreates the namespace
//! without any label of its own; the leader labels it while the Restore runs; the pods that the
//! restored Deployment's ReplicaSet creates (Velero restores no pods here: `--exclude-resources
//! pods`) get the ClusterRestoreHook's hook, once each; when the window is over the label goes
//! and a rollout creates ordinary pods. A label written back by hand afterwards brings no pod
//! into scope and is reported on the namespace.
//!
//! Waits are hang guards, never performance bounds; the 20 s window is waited out by the clock.

mod real;

use std::time::Duration;

use real::*;
use realcp::Velero;
use serde_json::{Value, json};

const WINDOW_ANNOTATION: &str = "restore-hooks.dev/restore-window";

fn web_pods(cp: &ControlPlane) -> Vec<Value> {
    get_json(cp, &["get", "pods", "-n", "web", "-l", "app=web"])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

fn namespace_object(cp: &ControlPlane) -> Value {
    get_json(cp, &["get", "namespace", "web"]).expect("namespace web")
}

#[test]
fn a_velero_restore_opens_and_closes_its_namespaces_window_by_itself() {
    let install = Install::new(InstallOptions {
        helm_args: vec!["--set".into(), "config.restoreWindow=20s".into()],
        ..InstallOptions::default()
    });
    let cp = &install.cp;
    let velero = Velero::start(cp).unwrap_or_else(|e| panic!("{e:#}"));
    let serve = install.start(0);
    serve.wait_leader(Duration::from_secs(60));
    let mark = install.mark("web-hook");

    namespace(cp, "web", json!({}));
    cp.apply(
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            // In place before the restore, as a platform team's hooks are.
            {"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "ClusterRestoreHook",
             "metadata": {"name": "web-warmup"},
             "spec": {"labelSelector": {"matchLabels": {"app": "web"}},
                      "postHooks": [{"exec": {"container": "web",
                          "command": ["sh", "-c", mark_cmd(&mark, "$(hostname)")]}}]}},
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "web", "namespace": "web"},
             "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                      "template": {"metadata": {"labels": {"app": "web"}},
                                   "spec": {"terminationGracePeriodSeconds": 0,
                                            "automountServiceAccountToken": false,
                                            "containers": [{"name": "web", "image": "busybox:1.36",
                                                            "command": ["sleep", "infinity"]}]}}}},
        ]})
        .to_string(),
    )
    .unwrap();
    wait_until(
        "the Deployment's 2 pods Running",
        Duration::from_secs(120),
        || {
            let running = web_pods(cp)
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            (running == 2)
                .then_some(())
                .ok_or(format!("{running} Running"))
        },
    );
    assert!(
        web_pods(cp).iter().all(|p| plan(p).is_none()),
        "pods of an ordinary namespace are ordinary pods"
    );
    velero
        .velero_ok([
            "backup",
            "create",
            "b1",
            "--include-namespaces",
            "web",
            "--wait",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    cp.kubectl_ok([
        "delete",
        "namespace",
        "web",
        "--wait=true",
        "--timeout=180s",
    ])
    .unwrap();

    // The disaster-recovery restore: the namespace does not exist; Velero restores the
    // Deployment and its ReplicaSet, whose controller creates the pods.
    velero
        .velero_ok([
            "restore",
            "create",
            "r1",
            "--from-backup",
            "b1",
            "--exclude-resources",
            "pods",
            "--wait",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        velero.phase("restores.velero.io", "r1").unwrap(),
        "Completed"
    );
    let pods = wait_until(
        "the ReplicaSet's 2 pods with their hooks ended",
        Duration::from_secs(180),
        || {
            let pods = web_pods(cp);
            let ended = pods
                .iter()
                .filter(|p| p["metadata"]["labels"][EXEC_LABEL] == "done")
                .count();
            (pods.len() == 2 && ended == 2)
                .then_some(pods.clone())
                .ok_or(format!("{} pods, {ended} done", pods.len()))
        },
    );
    for p in &pods {
        let meta = &p["metadata"];
        // Created by the ReplicaSet, not by Velero: only the namespace's window brought them in.
        assert!(meta["labels"][RESTORE_LABEL].is_null(), "{meta}");
        assert_eq!(meta["labels"][RUN_LABEL], "r1", "{meta}");
        assert_eq!(plan(p).unwrap()["restore"], "r1");
    }
    assert_eq!(mark_lines(&mark).len(), 2, "each pod's hook ran once");
    // What Velero did to the namespace, and what the leader did.
    let opened = events_with(cp, "default", "web", "RestoreWindowOpened");
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert!(
        opened[0]["message"]
            .as_str()
            .unwrap()
            .contains("Velero Restore r1"),
        "{}",
        opened[0]
    );

    // The window closes 20 s after Velero ended r1 (its hooks here have ended): the label goes.
    let ns = wait_until(
        "the leader to remove the label once r1's window is over",
        Duration::from_secs(120),
        || {
            let ns = namespace_object(cp);
            let labels = &ns["metadata"]["labels"];
            (labels[NAMESPACE_LABEL].is_null()
                && ns["metadata"]["annotations"][WINDOW_ANNOTATION].is_null())
            .then_some(ns.clone())
            .ok_or(format!("{}", ns["metadata"]))
        },
    );
    eprintln!("namespace web after the window: {}", ns["metadata"]);
    // Velero v1.18 writes no restore label on a namespace it creates: only the leader's label
    // brought the ReplicaSet's pods into scope.
    assert!(
        ns["metadata"]["labels"][RESTORE_LABEL].is_null(),
        "{}",
        ns["metadata"]
    );
    assert_eq!(
        events_with(cp, "default", "web", "RestoreWindowClosed").len(),
        1
    );

    // A rollout after the window: ordinary pods, no hook runs.
    cp.kubectl_ok(["-n", "web", "rollout", "restart", "deployment/web"])
        .unwrap();
    cp.kubectl_ok([
        "-n",
        "web",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=120s",
    ])
    .unwrap();
    let rolled: Vec<Value> = web_pods(cp)
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    assert!(!rolled.is_empty());
    for p in &rolled {
        assert!(plan(p).is_none(), "{}", p["metadata"]);
        assert!(
            p["metadata"]["labels"][RUN_LABEL].is_null(),
            "{}",
            p["metadata"]
        );
    }

    // The label written back by hand after the window: no pod comes into scope, and the
    // namespace says so.
    cp.kubectl_ok([
        "label",
        "namespace",
        "web",
        &format!("{NAMESPACE_LABEL}=r1"),
    ])
    .unwrap();
    let over = wait_until(
        "a RestoreWindowOver Event on namespace web",
        Duration::from_secs(60),
        || {
            events_with(cp, "default", "web", "RestoreWindowOver")
                .pop()
                .ok_or("none yet".to_string())
        },
    );
    assert!(
        over["message"]
            .as_str()
            .unwrap()
            .contains("kubectl label namespace web restore-hooks.dev/restore-"),
        "{over}"
    );
    cp.kubectl_ok(["-n", "web", "scale", "deployment/web", "--replicas=3"])
        .unwrap();
    cp.kubectl_ok([
        "-n",
        "web",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=120s",
    ])
    .unwrap();
    for p in web_pods(cp) {
        assert!(plan(&p).is_none(), "{}", p["metadata"]);
    }
    assert_eq!(mark_lines(&mark).len(), 2, "no hook ran after the window");
    assert_eq!(
        metric(
            &serve.controller().metrics(),
            "restore_hooks_stale_restore_namespace_labels"
        ),
        1.0
    );
    serve.assert_no_forbidden();
}
