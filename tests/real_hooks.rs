//! Hooks exec'd through a real kube-apiserver's pods/exec into kwok pods (e2e/realcp), and
//! workloads: pods the controller-manager creates and the scheduler binds.

mod real;

use real::*;

#[test]
fn hooks_run_through_the_apiservers_exec_on_kubernetes_1_37() {
    let install = Install::default_chart();
    let serve = install.start(0);
    scenarios::hooks_through_exec(&install, &serve);
    serve.assert_no_forbidden();
}

/// Pods of a workload in namespace `ns` with label app=`app`, by name.
fn workload_pods(cp: &ControlPlane, ns: &str, app: &str) -> Vec<serde_json::Value> {
    let list = get_json(cp, &["get", "pods", "-n", ns, "-l", &format!("app={app}")]).unwrap();
    let mut pods = list["items"].as_array().cloned().unwrap_or_default();
    pods.sort_by_key(|p| p["metadata"]["name"].as_str().unwrap().to_string());
    pods
}

/// Waits until `n` live pods of app=`app` have ended their hooks; returns them.
fn wait_workload(cp: &ControlPlane, ns: &str, app: &str, n: usize) -> Vec<serde_json::Value> {
    wait_until(
        format!("{n} pods of {ns}/{app} with their hooks ended"),
        std::time::Duration::from_secs(180),
        || {
            let pods: Vec<_> = workload_pods(cp, ns, app)
                .into_iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            let ended = pods
                .iter()
                .filter(|p| {
                    matches!(
                        p["metadata"]["labels"][EXEC_LABEL].as_str(),
                        Some("done" | "failed")
                    )
                })
                .count();
            if pods.len() == n && ended == n {
                Ok(pods)
            } else {
                Err(format!("{} pods, {ended} ended", pods.len()))
            }
        },
    )
}

#[test]
fn statefulset_and_deployment_pods_in_a_restore_namespace_get_their_hooks_once() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "workloads";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-workloads"}));
    let marks: Vec<_> = ["web", "api"]
        .iter()
        .map(|a| install.mark(&format!("workload-{a}")))
        .collect();
    let hook = |app: &str, mark: &std::path::Path| {
        json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": app, "namespace": ns},
            "spec": {
                "labelSelector": {"matchLabels": {"app": app}},
                "postHooks": [
                    {"init": {"initContainers": [{"name": format!("{app}-init"), "image": "busybox:1.36",
                                                   "command": ["sh", "-c", "true"]}]}},
                    {"exec": {"container": app, "command": ["sh", "-c", mark_cmd(mark, app)]}},
                ],
            },
        })
    };
    scenarios::apply_hooks(cp, &[hook("web", &marks[0]), hook("api", &marks[1])]);

    // No nodeName anywhere: the controller-manager creates the pods, the scheduler binds them.
    let template = |app: &str| {
        json!({
            "metadata": {"labels": {"app": app}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": false,
                "containers": [{"name": app, "image": "busybox:1.36", "command": ["sleep", "infinity"]}],
            },
        })
    };
    cp.apply(
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet",
             "metadata": {"name": "web", "namespace": ns},
             "spec": {"replicas": 3, "serviceName": "web", "podManagementPolicy": "Parallel",
                      "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}},
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "api", "namespace": ns},
             "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "api"}},
                      "template": template("api")}},
        ]})
        .to_string(),
    )
    .unwrap();

    let check = |app: &str, pods: &[serde_json::Value]| {
        for p in pods {
            let name = p["metadata"]["name"].as_str().unwrap();
            assert_eq!(
                p["spec"]["nodeName"], NODE,
                "{name} not scheduled onto kwok"
            );
            assert_eq!(
                p["metadata"]["labels"][EXEC_LABEL], "done",
                "{name}: {}",
                p["metadata"]
            );
            assert_eq!(p["metadata"]["labels"][RUN_LABEL], "r-workloads");
            assert_eq!(scenarios::init_names(p), [format!("{app}-init")], "{name}");
            let hooks = scenarios::hooks_of(p);
            assert_eq!(hooks.len(), 1, "{name}: {hooks:?}");
            assert_eq!(hooks[0]["phase"], "Succeeded", "{name}");
        }
    };
    let web = wait_workload(cp, ns, "web", 3);
    let api = wait_workload(cp, ns, "api", 3);
    check("web", &web);
    check("api", &api);
    let names: Vec<&str> = web
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    // Each pod's status says its hook succeeded once, and the hook ran as many times as there
    // are pods: so once per pod.
    assert_eq!(mark_lines(&marks[0]).len(), 3, "web hook executions");
    assert_eq!(mark_lines(&marks[1]).len(), 3, "api hook executions");

    // A replacement pod (the StatefulSet re-creates web-1, the ReplicaSet replaces an api pod)
    // is a restored pod too, while the namespace carries the label: it gets its hooks, once.
    let old_api = api[0]["metadata"]["name"].as_str().unwrap().to_string();
    cp.kubectl_ok(["delete", "pod", "web-1", &old_api, "-n", ns, "--wait=true"])
        .unwrap();
    let web = wait_until("web-1 re-created", Duration::from_secs(120), || {
        let pods = wait_workload(cp, ns, "web", 3);
        let new = pods.iter().any(|p| {
            p["metadata"]["name"] == "web-1" && p["metadata"]["uid"] != web[1]["metadata"]["uid"]
        });
        new.then_some(pods)
            .ok_or_else(|| "the old web-1".to_string())
    });
    let api = wait_until("the api pod replaced", Duration::from_secs(120), || {
        let pods = wait_workload(cp, ns, "api", 3);
        let gone = pods
            .iter()
            .all(|p| p["metadata"]["name"] != old_api.as_str());
        gone.then_some(pods)
            .ok_or_else(|| "the old pod".to_string())
    });
    check("web", &web);
    check("api", &api);
    assert_eq!(mark_lines(&marks[0]).len(), 4, "web hook executions");
    assert_eq!(mark_lines(&marks[1]).len(), 4, "api hook executions");
    let run = wait_restore_run(cp, "r-workloads", &["Completed"], Duration::from_secs(60));
    assert_eq!(run["status"]["hooks"]["failed"], 0, "{}", run["status"]);
    serve.assert_no_forbidden();
}
