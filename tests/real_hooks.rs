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

/// RestoreHook `namespace/name`, once its status satisfies `done` (`what` names that).
fn wait_restore_hook(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    wait_until(
        format!("RestoreHook {namespace}/{name}: {what}"),
        std::time::Duration::from_secs(60),
        || {
            let o = get_json(
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
            if done(&o["status"]) {
                Ok(o)
            } else {
                Err(format!("{}", o["status"]))
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

    // The record's entries are one field to the API server's field manager (docs/behaviour.md
    // §9.5): its `managedFields` name `status.executions`, not each pod in it.
    let record = get_json(
        cp,
        &[
            "get",
            "restorerecord",
            "r-workloads-0",
            "--show-managed-fields",
        ],
    )
    .expect("the restore's RestoreRecord");
    let entries = record["status"]["executions"].as_object().unwrap();
    assert_eq!(entries.len(), 8, "every pod's entry: {entries:?}");
    let managed = record["metadata"]["managedFields"].as_array().unwrap();
    let status_fields: Vec<&serde_json::Value> = managed
        .iter()
        .filter(|m| m["subresource"] == "status")
        .map(|m| &m["fieldsV1"]["f:status"])
        .collect();
    assert_eq!(
        status_fields,
        [&json!({".": {}, "f:executions": {}})],
        "{managed:#?}"
    );
    serve.assert_no_forbidden();
}

/// Parameters from the restore (docs/behaviour.md §2.8) and `--default-wait-timeout` (§6.5), set
/// through the chart's `config.defaultWaitTimeout`: a StatefulSet pod's exec hook runs with the
/// restore's values in its argv; an init container gets env entries the API server accepts; a
/// pod that is never scheduled fails its hook (which sets no `waitTimeout`) at the default, with
/// the reason, on the pod, the hook object and the RestoreRun, which ends `PartiallyFailed`.
#[test]
fn parameters_expand_and_an_unset_wait_timeout_ends_the_restore_with_the_reason() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::new(InstallOptions {
        helm_args: vec!["--set".into(), "config.defaultWaitTimeout=20s".into()],
        ..InstallOptions::default()
    });
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "params";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-params"}));
    let mark = install.mark("params");
    let hook = json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": "migrate", "namespace": ns},
        "spec": {
            "labelSelector": {"matchLabels": {"app": "db"}},
            "postHooks": [
                {"init": {"initContainers": [{"name": "fetch", "image": "busybox:1.36",
                    "command": ["sh", "-c", "echo $(RESTORE_NAME) $(POD_NAME)"]}]}},
                {"exec": {"container": "db", "command": ["sh", "-c", format!(
                    "echo $(RESTORE_NAME) $(NAMESPACE) $(SOURCE_NAMESPACE) $(POD_NAME) $(POD_ORDINAL) '$$(POD_NAME)' >> '{}'",
                    mark.display())]}},
            ],
        },
    });
    scenarios::apply_hooks(cp, &[hook]);

    let sts_labels = json!({"app": "db", "statefulset.kubernetes.io/pod-name": "db-1"});
    create(cp, &pod(ns, "db-1", &["db"], sts_labels, json!({})));
    // Never scheduled: a node selector no node matches, so the kubelet never reports a status.
    let mut stuck = pod(ns, "db-stuck", &["db"], json!({"app": "db"}), json!({}));
    stuck["spec"]["nodeSelector"] = json!({"restore-hooks.dev/no-such-node": "true"});
    create(cp, &stuck);

    let db1 = wait_hooks_ended(cp, ns, "db-1", Duration::from_secs(120));
    assert_eq!(
        db1["metadata"]["labels"][EXEC_LABEL], "done",
        "{}",
        db1["metadata"]
    );
    assert_eq!(
        mark_lines(&mark),
        ["r-params params params db-1 1 $(POD_NAME)"],
        "the argv the signed plan holds, with $$ as a literal $ (quoted for the shell)"
    );
    let plan = plan(&db1).unwrap();
    assert_eq!(plan["hooks"][0]["waitTimeoutMs"], 20_000, "{plan}");
    let fetch = &db1["spec"]["initContainers"][0];
    assert_eq!(fetch["command"][2], "echo $(RESTORE_NAME) $(POD_NAME)");
    assert_eq!(
        fetch["env"],
        json!([{"name": "RESTORE_NAME", "value": "r-params"}, {"name": "POD_NAME", "value": "db-1"}])
    );

    let stuck = wait_hooks_ended(cp, ns, "db-stuck", Duration::from_secs(120));
    assert_eq!(stuck["metadata"]["labels"][EXEC_LABEL], "failed");
    let why = "container db never started (the pod reports no status for it: not scheduled, or \
               its init containers have not finished) within waitTimeout 20s of pod creation; \
               not executed";
    assert_eq!(hook_status(&stuck).unwrap()["hooks"][0]["message"], why);
    let run = wait_restore_run(
        cp,
        "r-params",
        &["PartiallyFailed"],
        Duration::from_secs(60),
    );
    assert_eq!(
        run["status"]["failedPods"],
        json!([{"namespace": ns, "pod": "db-stuck", "hook": "migrate", "message": why}]),
        "{}",
        run["status"]
    );
    let object = wait_restore_hook(cp, ns, "migrate", "failedPods naming the reason", |st| {
        st["failedPods"][0]["message"] == why
    });
    assert_eq!(
        object["status"]["hooks"]["failed"], 1,
        "{}",
        object["status"]
    );
    assert_eq!(mark_lines(&mark).len(), 1, "the stuck pod's hook never ran");
    serve.assert_no_forbidden();
}

/// docs/behaviour.md §5.5: a pod whose exec label is changed by hand (where the pod-hook-state
/// policy is not in force) runs no hook, although its container is up and its hook could run;
/// its hooks count as failed, naming the label; set back to `pending`, the hook runs, once.
/// The controller is down while the label changes, so that the hook's turn comes with the label
/// already changed: only the label keeps it from running.
#[test]
fn a_pod_relabelled_by_hand_runs_no_hook_until_the_label_is_set_back() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let mut serve = install.start(0);
    let cp = &install.cp;
    let ns = "relabel";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-relabel"}));
    let mark = install.mark("relabel");
    let hook = json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": "warm", "namespace": ns},
        "spec": {
            "labelSelector": {"matchLabels": {"app": "db"}},
            "postHooks": [{"exec": {"container": "db", "command": ["sh", "-c", mark_cmd(&mark, "warm")]}}],
        },
    });
    scenarios::apply_hooks(cp, &[hook]);
    // No controller: the webhook plans the hook, nobody runs it yet.
    serve.controller_mut().kill();
    create(cp, &pod(ns, "db", &["db"], json!({"app": "db"}), json!({})));
    wait_running(cp, ns, "db");
    assert!(mark_lines(&mark).is_empty());

    let relabel = |value: &str| {
        cp.kubectl_ok([
            "label",
            "pod",
            "db",
            "-n",
            ns,
            &format!("{EXEC_LABEL}={value}"),
            "--overwrite",
        ])
    };
    let refused = relabel("done").expect_err("the policy refuses the relabel");
    assert!(
        format!("{refused:#}").contains("restore-hooks-pod-hook-state"),
        "{refused:#}"
    );
    // A cluster where the policy is not in force (not installed, or no admission policies).
    cp.kubectl_ok([
        "delete",
        "validatingadmissionpolicybinding",
        "restore-hooks-pod-hook-state",
    ])
    .expect("the policy's binding deleted");
    // The API server applies the deletion once its informer sees it.
    wait_until("the relabel to be allowed", Duration::from_secs(30), || {
        relabel("done").map_err(|e| format!("{e:#}"))
    });
    // The controller comes back with the pod's container up and its hook's turn come.
    let controller = install.serve(ServeOptions::of(&format!("{RELEASE}-controller"), 0));
    controller.wait_leader(Duration::from_secs(60));
    let run = wait_restore_run(
        cp,
        "r-relabel",
        &["PartiallyFailed"],
        Duration::from_secs(60),
    );
    let why = "not run: the pod's restore-hooks.dev/exec label is \"done\", not \"pending\", so \
               no hook starts on it (set it back to \"pending\" to run the rest)";
    assert_eq!(
        run["status"]["failedPods"],
        json!([{"namespace": ns, "pod": "db", "hook": "warm", "message": why}]),
        "{}",
        run["status"]
    );
    assert!(
        mark_lines(&mark).is_empty(),
        "the hook ran on a pod whose exec label is not pending"
    );

    relabel("pending").expect("the pod labelled pending again");
    let db = wait_hooks_ended(cp, ns, "db", Duration::from_secs(120));
    assert_eq!(db["metadata"]["labels"][EXEC_LABEL], "done");
    assert_eq!(hook_status(&db).unwrap()["hooks"][0]["phase"], "Succeeded");
    assert_eq!(mark_lines(&mark).len(), 1, "the hook ran once");
    let run = wait_restore_run(cp, "r-relabel", &["Completed"], Duration::from_secs(60));
    assert_eq!(
        (
            &run["status"]["hooks"]["succeeded"],
            &run["status"]["hooks"]["failed"]
        ),
        (&json!(1), &json!(0)),
        "{}",
        run["status"]
    );
    controller.assert_no_forbidden();
    serve.webhook().assert_no_forbidden();
}

/// `runOn: OnePod` (docs/behaviour.md §6.15) on the real API server: a 3-replica StatefulSet's
/// migration hook runs exactly once, in pod 0, and the others record that it ran there; then,
/// in a second restore, the chosen pod (ordinal 0, never scheduled) is deleted before the hook
/// started and the next ordinal runs it, once. The RestoreRun and the RestoreHook name the pod.
#[test]
fn a_one_pod_hook_runs_once_per_restore_and_passes_on_before_it_starts() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let hook = |ns: &str, mark: &std::path::Path| {
        json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "migrate", "namespace": ns},
            "spec": {
                "labelSelector": {"matchLabels": {"app": "db"}},
                "postHooks": [{"exec": {"container": "db", "runOn": "OnePod", "command":
                    ["sh", "-c", format!("echo $(POD_NAME) >> '{}'", mark.display())]}}],
            },
        })
    };

    // A StatefulSet, its pods created by the controller-manager.
    let ns = "once";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-once"}));
    let mark = install.mark("once");
    scenarios::apply_hooks(cp, &[hook(ns, &mark)]);
    cp.apply(
        &json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                    "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
                    "containers": [{"name": "db", "image": "busybox:1.36", "command": ["sleep", "infinity"]}]}}}})
        .to_string(),
    )
    .unwrap();
    let pods = wait_workload(cp, ns, "db", 3);
    let phases: Vec<(String, String)> = pods
        .iter()
        .map(|p| {
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            let status = hook_status(p).unwrap_or_else(|| panic!("{name}: no status"));
            (
                name,
                status["hooks"][0]["phase"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        phases,
        [
            ("db-0".into(), "Succeeded".into()),
            ("db-1".into(), "OtherPod".into()),
            ("db-2".into(), "OtherPod".into())
        ],
        "the lowest ordinal runs it; the others record where it ran"
    );
    for p in &pods {
        assert_eq!(
            p["metadata"]["labels"][EXEC_LABEL], "done",
            "{}",
            p["metadata"]["name"]
        );
    }
    assert_eq!(mark_lines(&mark), ["db-0"], "exactly one execution");
    let run = wait_restore_run(cp, "r-once", &["Completed"], Duration::from_secs(60));
    assert_eq!(
        run["status"]["onePod"],
        json!([{"hook": "migrate#0", "namespace": ns, "pod": "db-0", "phase": "Succeeded"}]),
        "{}",
        run["status"]
    );
    assert_eq!(run["status"]["hooks"]["succeeded"], 1, "{}", run["status"]);

    // The chosen pod goes before the hook started: the next ordinal is chosen.
    let ns = "once-failover";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-once-failover"}));
    let mark = install.mark("once-failover");
    scenarios::apply_hooks(cp, &[hook(ns, &mark)]);
    let sts_pod = |name: &str| {
        let labels = json!({"app": "db", "statefulset.kubernetes.io/pod-name": name});
        pod(ns, name, &["db"], labels, json!({}))
    };
    let mut unschedulable = sts_pod("db-0");
    unschedulable["spec"]["nodeSelector"] = json!({"restore-hooks.dev/no-such-node": "true"});
    create(cp, &unschedulable);
    create(cp, &sts_pod("db-1"));
    create(cp, &sts_pod("db-2"));
    for name in ["db-1", "db-2"] {
        wait_running(cp, ns, name);
        let pending = wait_until(
            format!("{name}'s Pending status"),
            Duration::from_secs(60),
            || {
                let p = get_pod(cp, ns, name).ok_or("no pod")?;
                match hook_status(&p) {
                    Some(s) if s["hooks"][0]["phase"] == "Pending" => Ok(p),
                    other => Err(format!("status {other:?}")),
                }
            },
        );
        assert_eq!(pending["metadata"]["labels"][EXEC_LABEL], "pending");
    }
    assert!(
        mark_lines(&mark).is_empty(),
        "nothing runs while db-0 is chosen"
    );
    cp.kubectl_ok(["delete", "pod", "db-0", "-n", ns, "--wait=true"])
        .unwrap();
    let db1 = wait_hooks_ended(cp, ns, "db-1", Duration::from_secs(120));
    let db2 = wait_hooks_ended(cp, ns, "db-2", Duration::from_secs(120));
    assert_eq!(hook_status(&db1).unwrap()["hooks"][0]["phase"], "Succeeded");
    assert_eq!(hook_status(&db2).unwrap()["hooks"][0]["phase"], "OtherPod");
    assert_eq!(
        mark_lines(&mark),
        ["db-1"],
        "exactly one execution, in the next ordinal"
    );
    let object = wait_restore_hook(cp, ns, "migrate", "onePod naming db-1, Succeeded", |st| {
        st["onePod"][0]["pod"] == "db-1" && st["onePod"][0]["phase"] == "Succeeded"
    });
    assert_eq!(
        object["status"]["hooks"]["succeeded"], 1,
        "{}",
        object["status"]
    );
    // db-0 passed the hook on when it was deleted: the restore did not fail.
    let run = wait_restore_run(
        cp,
        "r-once-failover",
        &["Completed", "PartiallyFailed"],
        Duration::from_secs(60),
    );
    assert_eq!(run["status"]["phase"], "Completed", "{}", run["status"]);
    serve.assert_no_forbidden();
}

/// `after` (docs/behaviour.md §6.16) on the real API server: an app Deployment's pods, created
/// first, wait for the database pod's restore hook (created later, and slow) before their migration runs,
/// once (`runOn: OnePod`); a hook waiting for one that failed with `onError: Fail` is skipped,
/// naming it, and the next hook of its container still runs. The order is read from the mark
/// file the hooks append to, in the order they ran.
#[test]
fn a_hook_with_after_starts_only_once_the_hooks_it_waits_for_succeeded() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "ordered";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-ordered"}));
    let mark = install.mark("ordered");
    // Deployment pods are named after admission: `$(POD_NAME)` is not expanded for them.
    let append = |what: &str| json!(["sh", "-c", format!("echo {what} >> '{}'", mark.display())]);
    let object = |name: &str, app: &str, exec: serde_json::Value| {
        json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"labelSelector": {"matchLabels": {"app": app}}, "postHooks": [{"exec": exec}]},
        })
    };
    scenarios::apply_hooks(
        cp,
        &[
            object(
                "db-restore",
                "db",
                json!({"container": "db", "onError": "Fail", "command":
                    ["sh", "-c", format!("sleep 2; echo $(POD_NAME) restored >> '{}'", mark.display())]}),
            ),
            object(
                "seed",
                "seed",
                json!({"container": "seed", "onError": "Fail", "command": ["sh", "-c", "exit 3"]}),
            ),
            // RestoreHooks apply in name order: the api pods' plan is [consume, migrate].
            object(
                "consume",
                "api",
                json!({"container": "api", "after": [{"hook": "seed"}], "command": append("consumed")}),
            ),
            object(
                "migrate",
                "api",
                json!({"container": "api", "runOn": "OnePod", "after": [{"hook": "db-restore"}],
                       "command": append("migrated")}),
            ),
        ],
    );
    // The app first, a Deployment: while no pod of the restore plans db-restore, its migration
    // waits.
    cp.apply(
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": ns},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                "template": {"metadata": {"labels": {"app": "api"}}, "spec": {
                    "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
                    "containers": [{"name": "api", "image": "busybox:1.36", "command": ["sleep", "infinity"]}]}}}})
        .to_string(),
    )
    .unwrap();
    let api: Vec<String> = wait_until(
        "2 api pods Running".to_string(),
        Duration::from_secs(120),
        || {
            let pods = workload_pods(cp, ns, "api");
            let running = pods
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            if pods.len() == 2 && running == 2 {
                Ok(pods
                    .iter()
                    .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                    .collect())
            } else {
                Err(format!("{} pods, {running} Running", pods.len()))
            }
        },
    );
    create(
        cp,
        &pod(ns, "seed-0", &["seed"], json!({"app": "seed"}), json!({})),
    );
    let seed = wait_hooks_ended(cp, ns, "seed-0", Duration::from_secs(60));
    assert_eq!(hook_status(&seed).unwrap()["hooks"][0]["phase"], "Failed");
    for name in &api {
        let waiting = wait_until(
            format!("{name}: consume Skipped, migrate Pending"),
            Duration::from_secs(60),
            || {
                let p = get_pod(cp, ns, name).ok_or("no pod")?;
                let s = hook_status(&p).ok_or("no status")?;
                let phases = (
                    s["hooks"][0]["phase"].clone(),
                    s["hooks"][1]["phase"].clone(),
                );
                if phases == (json!("Skipped"), json!("Pending")) {
                    Ok(s)
                } else {
                    Err(format!("{phases:?}"))
                }
            },
        );
        assert_eq!(
            waiting["hooks"][0]["message"],
            "after: hook seed failed in pod ordered/seed-0 (onError: Fail); not executed"
        );
    }
    assert!(
        mark_lines(&mark).is_empty(),
        "nothing ran before db-0 existed"
    );

    create(
        cp,
        &pod(
            ns,
            "db-0",
            &["db"],
            json!({"app": "db", "statefulset.kubernetes.io/pod-name": "db-0"}),
            json!({}),
        ),
    );
    let db = wait_hooks_ended(cp, ns, "db-0", Duration::from_secs(60));
    assert_eq!(hook_status(&db).unwrap()["hooks"][0]["phase"], "Succeeded");
    let ended: Vec<serde_json::Value> = api
        .iter()
        .map(|name| wait_hooks_ended(cp, ns, name, Duration::from_secs(60)))
        .collect();
    let migrate: Vec<String> = ended
        .iter()
        .map(|p| {
            hook_status(p).unwrap()["hooks"][1]["phase"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut sorted = migrate.clone();
    sorted.sort();
    assert_eq!(sorted, ["OtherPod", "Succeeded"], "{migrate:?}");
    assert_eq!(
        mark_lines(&mark),
        ["db-0 restored", "migrated"],
        "the restore first, then one migration"
    );
    let run = wait_restore_run(
        cp,
        "r-ordered",
        &["PartiallyFailed"],
        Duration::from_secs(60),
    );
    assert_eq!(run["status"]["hooks"]["skipped"], 2, "{}", run["status"]);
    assert_eq!(run["status"]["hooks"]["succeeded"], 2, "{}", run["status"]);
    serve.assert_no_forbidden();
}

/// `retry` (docs/behaviour.md §6.17) on the real API server: while the controller's
/// ServiceAccount may not create `pods/exec`, the API server refuses each exec before its stream
/// opens (403) and the hook is tried again; once the role is back it runs, once. A command that
/// ran and exited with a code the hook lists is run again; one that exited otherwise is not.
#[test]
fn a_refused_exec_is_retried_and_a_command_that_ran_only_as_the_hook_allows() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let mut serve = install.start(0);
    // The 403s below are the point of the test.
    serve.expect_forbidden();
    let cp = &install.cp;
    let ns = "retried";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-retried"}));
    // The controller's role, and the same without its pods/exec rule.
    let role = of_kind(&install.rendered, "ClusterRole")
        .into_iter()
        .find(|r| r["rules"].to_string().contains("pods/exec") && r["metadata"]["name"] == RELEASE)
        .expect("the controller's ClusterRole grants pods/exec")
        .clone();
    let mut no_exec = role.clone();
    no_exec["rules"]
        .as_array_mut()
        .unwrap()
        .retain(|r| !r["resources"].to_string().contains("pods/exec"));
    cp.apply(&no_exec.to_string()).unwrap();

    let marks: Vec<std::path::PathBuf> = ["refused", "listed", "unlisted"]
        .iter()
        .map(|m| install.mark(m))
        .collect();
    let hook = |name: &str, script: String, retry: serde_json::Value| {
        json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"labelSelector": {"matchLabels": {"app": name}},
                     "postHooks": [{"exec": {"container": "app", "retry": retry,
                                             "command": ["sh", "-c", script]}}]},
        })
    };
    let append = |m: &std::path::Path| format!("echo run >> '{}'", m.display());
    scenarios::apply_hooks(
        cp,
        &[
            hook(
                "refused",
                append(&marks[0]),
                json!({"attempts": 10, "backoff": "1s", "maxBackoff": "2s"}),
            ),
            hook(
                "listed",
                format!(
                    "{}; [ $(wc -l < '{}') -ge 2 ] || exit 75",
                    append(&marks[1]),
                    marks[1].display()
                ),
                json!({"attempts": 3, "backoff": "1s", "onExitCodes": [75]}),
            ),
            hook(
                "unlisted",
                format!("{}; exit 1", append(&marks[2])),
                json!({"attempts": 3, "backoff": "1s", "onExitCodes": [75]}),
            ),
        ],
    );
    create(
        cp,
        &pod(
            ns,
            "refused-0",
            &["app"],
            json!({"app": "refused"}),
            json!({}),
        ),
    );
    let retrying = wait_until(
        "refused-0: a failed attempt recorded".to_string(),
        Duration::from_secs(60),
        || {
            let p = get_pod(cp, ns, "refused-0").ok_or("no pod")?;
            let s = hook_status(&p).ok_or("no status")?;
            if s["hooks"][0]["retries"].as_u64().unwrap_or(0) >= 1 {
                Ok(s)
            } else {
                Err(format!("{}", s["hooks"][0]))
            }
        },
    );
    assert_eq!(retrying["hooks"][0]["phase"], "Pending", "{retrying}");
    let message = retrying["hooks"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("of 10 failed (not_started): exec could not start:")
            && message.contains("forbidden"),
        "{message}"
    );
    assert!(
        mark_lines(&marks[0]).is_empty(),
        "nothing ran while refused"
    );
    cp.apply(&role.to_string()).unwrap();
    let done = wait_hooks_ended(cp, ns, "refused-0", Duration::from_secs(60));
    let status = hook_status(&done).unwrap();
    assert_eq!(status["hooks"][0]["phase"], "Succeeded", "{status}");
    assert!(
        status["hooks"][0]["retries"].as_u64().unwrap() >= 1,
        "{status}"
    );
    assert_eq!(mark_lines(&marks[0]), ["run"], "it ran once");
    let events = get_json(
        cp,
        &[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "involvedObject.name=refused-0,reason=HookRetrying",
        ],
    )
    .unwrap();
    assert!(
        !events["items"].as_array().unwrap().is_empty(),
        "a HookRetrying Event per failed attempt"
    );

    create(
        cp,
        &pod(
            ns,
            "listed-0",
            &["app"],
            json!({"app": "listed"}),
            json!({}),
        ),
    );
    create(
        cp,
        &pod(
            ns,
            "unlisted-0",
            &["app"],
            json!({"app": "unlisted"}),
            json!({}),
        ),
    );
    let listed = hook_status(&wait_hooks_ended(
        cp,
        ns,
        "listed-0",
        Duration::from_secs(60),
    ))
    .unwrap();
    assert_eq!(
        (
            listed["hooks"][0]["phase"].as_str(),
            listed["hooks"][0]["retries"].as_u64()
        ),
        (Some("Succeeded"), Some(1)),
        "{listed}"
    );
    assert_eq!(
        mark_lines(&marks[1]),
        ["run", "run"],
        "exit 75 is listed: run again"
    );
    let unlisted = hook_status(&wait_hooks_ended(
        cp,
        ns,
        "unlisted-0",
        Duration::from_secs(60),
    ))
    .unwrap();
    assert_eq!(unlisted["hooks"][0]["phase"], "Failed", "{unlisted}");
    assert!(unlisted["hooks"][0].get("retries").is_none(), "{unlisted}");
    assert_eq!(
        mark_lines(&marks[2]),
        ["run"],
        "exit 1 is not listed: ran once"
    );
    // Only the pods/exec refusals of the first pod.
    let refused: Vec<(String, String)> = serve.controller().refusals();
    assert!(
        !refused.is_empty() && refused.iter().all(|(_, resource)| resource == "pods/exec"),
        "{refused:?}"
    );
}

/// An `image` hook (docs/behaviour.md §6.18) on the real API server: the controller adds an
/// ephemeral container to a pod whose container has no shell (the chart's RBAC: `patch
/// pods/ephemeralcontainers`), the API server accepts it, and the hook's result is the container's
/// terminated state (kwok, which runs no process, reports the exit code the command ends with).
/// Exactly one such container, targeting the hook's container with the volume mount the hook
/// names; a command that exits 3 fails the hook with that code.
#[test]
fn an_image_hook_runs_in_an_ephemeral_container_on_the_real_api_server() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "distroless";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-distroless"}));
    scenarios::apply_hooks(
        cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "reindex", "namespace": ns},
            "spec": {"postHooks": [{"exec": {
                "container": "api", "image": "busybox:1.36",
                "command": ["/bin/sh", "-c", "wget -qO- http://127.0.0.1:8080/admin/reindex; exit 0"],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]}}]},
        })],
    );
    let mut api = pod(ns, "api-0", &["api"], json!({"app": "api"}), json!({}));
    // A distroless image: no shell to exec into.
    api["spec"]["containers"][0]["image"] = json!("gcr.io/distroless/static-debian12:nonroot");
    api["spec"]["containers"][0]["command"] = json!(["/server"]);
    api["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    create(cp, &api);
    let done = wait_hooks_ended(cp, ns, "api-0", Duration::from_secs(60));
    let status = hook_status(&done).unwrap();
    assert_eq!(status["hooks"][0]["phase"], "Succeeded", "{status}");
    assert_eq!(status["hooks"][0]["exitCode"], 0, "{status}");
    let added = &done["spec"]["ephemeralContainers"];
    assert_eq!(added.as_array().map(Vec::len), Some(1), "{added}");
    assert_eq!(added[0]["name"], "restore-hooks-0-1");
    assert_eq!(added[0]["image"], "busybox:1.36");
    assert_eq!(added[0]["targetContainerName"], "api");
    assert_eq!(
        added[0]["volumeMounts"],
        json!([{"name": "data", "mountPath": "/data", "readOnly": true}])
    );
    assert_eq!(
        done["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    let run = wait_restore_run(cp, "r-distroless", &["Completed"], Duration::from_secs(60));
    assert_eq!(run["status"]["hooks"]["succeeded"], 1, "{}", run["status"]);

    // A command that exits non-zero: the hook fails with the container's exit code.
    let ns = "distroless-fails";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-distroless-fails"}));
    scenarios::apply_hooks(
        cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "reindex", "namespace": ns},
            "spec": {"postHooks": [{"exec": {
                "container": "api", "image": "busybox:1.36",
                "command": ["/bin/sh", "-c", "echo reindex failed >&2; exit 3"]}}]},
        })],
    );
    api["metadata"]["namespace"] = json!(ns);
    api["spec"].as_object_mut().unwrap().remove("volumes");
    create(cp, &api);
    let failed = wait_hooks_ended(cp, ns, "api-0", Duration::from_secs(60));
    let status = hook_status(&failed).unwrap();
    assert_eq!(status["hooks"][0]["phase"], "Failed", "{status}");
    assert_eq!(status["hooks"][0]["exitCode"], 3, "{status}");
    assert_eq!(
        status["hooks"][0]["message"], "command terminated with exit code 3",
        "{status}"
    );
    assert_eq!(failed["metadata"]["labels"][EXEC_LABEL], "failed");
    assert_eq!(
        failed["spec"]["ephemeralContainers"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "one container for the one attempt"
    );
    let run = wait_restore_run(
        cp,
        "r-distroless-fails",
        &["PartiallyFailed"],
        Duration::from_secs(60),
    );
    assert_eq!(run["status"]["hooks"]["failed"], 1, "{}", run["status"]);
    serve.assert_no_forbidden();
}

/// The API server throttles the controller (API Priority and Fairness answers its pod writes 429)
/// while hooks run: each result write is retried with a jittered backoff until the API server
/// takes it, no command runs again, and the controller counts the 429s (docs/behaviour.md §6.19).
///
/// The throttling is the real API server's: the controller ServiceAccount's `patch pods` requests
/// go to a priority level without seats that rejects rather than queues. APF still lets a request
/// of such a level through when none of its requests executes, so the test keeps the level busy
/// until the controller has been refused: lists of pods (as the controller's user, also sent to
/// that level) at a resourceVersion the API server does not have yet, which it holds ~3 s each
/// waiting for its cache to catch up. Then the lists stop, and the results get through.
#[test]
fn result_writes_throttled_by_priority_and_fairness_are_retried_and_no_hook_reruns() {
    use serde_json::json;
    use std::time::Duration;

    const PODS: usize = 12;
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "throttled";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-throttled"}));
    let release = install.mark("throttled-release");
    // `$(POD_NAME)` is expanded at admission: one mark file per pod.
    let marks: Vec<std::path::PathBuf> = (0..PODS)
        .map(|i| install.mark(&format!("throttled-slow-{i}")))
        .collect();
    let marks_dir = marks[0].parent().unwrap().display().to_string();
    scenarios::apply_hooks(
        cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "slow", "namespace": ns},
            "spec": {"labelSelector": {"matchLabels": {"app": "slow"}},
                     "postHooks": [{"exec": {"container": "app", "execTimeout": "5m", "command": ["sh", "-c",
                         format!("echo run >> '{marks_dir}/throttled-$(POD_NAME)'; until [ -e '{}' ]; do sleep 0.05; done; echo released",
                                 release.display())]}}]},
        })],
    );
    for i in 0..PODS {
        create(
            cp,
            &pod(
                ns,
                &format!("slow-{i}"),
                &["app"],
                json!({"app": "slow"}),
                json!({}),
            ),
        );
    }
    wait_until(
        format!("the hooks of all {PODS} pods to run"),
        Duration::from_secs(90),
        || {
            let running = marks.iter().filter(|m| !mark_lines(m).is_empty()).count();
            if running == PODS {
                Ok(())
            } else {
                Err(format!("{running} running"))
            }
        },
    );

    // From now on, the controller's `patch pods` requests go to a level without seats.
    cp.apply(
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
             "metadata": {"name": "no-seats"},
             "spec": {"type": "Limited", "limited": {
                 "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
                 "limitResponse": {"type": "Reject"}}}},
            {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
             "metadata": {"name": "restore-hooks-pod-writes"},
             "spec": {"priorityLevelConfiguration": {"name": "no-seats"}, "matchingPrecedence": 100,
                      "distinguisherMethod": {"type": "ByUser"},
                      "rules": [{"subjects": [{"kind": "ServiceAccount",
                                                "serviceAccount": {"name": RELEASE, "namespace": NAMESPACE}}],
                                 "resourceRules": [{"verbs": ["patch", "list"], "apiGroups": [""],
                                                    "resources": ["pods"], "namespaces": ["*"]}]}]}},
        ]})
        .to_string(),
    )
    .unwrap();
    wait_until(
        "the API server to serve priority level no-seats".to_string(),
        Duration::from_secs(60),
        || {
            let metrics = cp
                .kubectl_ok(["get", "--raw", "/metrics"])
                .map_err(|e| e.to_string())?;
            if metrics.contains(
                r#"apiserver_flowcontrol_nominal_limit_seats{priority_level="no-seats"} 0"#,
            ) {
                Ok(())
            } else {
                Err("no-seats not in force".to_string())
            }
        },
    );

    // Keep the level busy: every other request of it is rejected.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let as_controller = runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(cp.kubeconfig()).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        config.auth_info.impersonate = Some(format!("system:serviceaccount:{NAMESPACE}:{RELEASE}"));
        kube::Client::try_from(config).unwrap()
    });
    for _ in 0..3 {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(as_controller.clone(), "default");
        let flooding = flooding.clone();
        runtime.spawn(async move {
            let ahead = kube::api::ListParams::default()
                .at("999999999")
                .matching(kube::api::VersionMatch::NotOlderThan);
            while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = pods.list(&ahead).await;
            }
        });
    }
    let throttled = || {
        metric(
            &serve.controller().metrics(),
            r#"restore_hooks_api_throttled_total{resource="pods",verb="patch"}"#,
        )
    };

    // Every command ends at once; their results cannot be written for now.
    std::fs::write(&release, "").unwrap();
    wait_until(
        "the controller's result writes to be throttled".to_string(),
        Duration::from_secs(60),
        || match throttled() {
            n if n >= 4.0 => Ok(()),
            n => Err(format!(
                "{n} answered 429; {}",
                cp.kubectl_ok(["get", "--raw", "/metrics"])
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("no-seats")
                        && (l.contains("rejected") || l.contains("dispatched")))
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
        },
    );
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    cp.kubectl_ok(["delete", "flowschema", "restore-hooks-pod-writes"])
        .unwrap();
    let unthrottled = std::time::Instant::now();
    for i in 0..PODS {
        let done = wait_hooks_ended(cp, ns, &format!("slow-{i}"), Duration::from_secs(120));
        let status = hook_status(&done).unwrap();
        assert_eq!(
            status["hooks"][0]["phase"], "Succeeded",
            "slow-{i}: {status}"
        );
        assert_eq!(
            status["hooks"][0]["stdout"], "released\n",
            "slow-{i}: {status}"
        );
    }
    for (i, mark) in marks.iter().enumerate() {
        assert_eq!(mark_lines(mark), ["run"], "slow-{i}: the command ran once");
    }
    eprintln!(
        "the controller's pod writes answered 429 and retried: {}; every result written {:.1} s \
         after the throttling ended",
        throttled(),
        unthrottled.elapsed().as_secs_f64()
    );
    wait_restore_run(cp, "r-throttled", &["Completed"], Duration::from_secs(60));
    serve.assert_no_forbidden();
}

/// A leader that loses the Lease while a hook's start is being recorded (docs/behaviour.md
/// §6.10), on the real API server: every write of the controller's record (RestoreRun status)
/// fails with a 500 (a validating webhook that cannot be reached), so the start waits; the Lease
/// is taken from it; it takes the hook's `Running` record back (`Pending`) without running the
/// command, and once it leads again the hook runs, once.
#[test]
fn a_start_not_recorded_before_the_lease_is_lost_runs_once_under_the_next_leadership() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "unstart";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-unstart"}));
    let mark = install.mark("unstart");
    scenarios::apply_hooks(
        cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "once", "namespace": ns},
            "spec": {"labelSelector": {"matchLabels": {"app": "once"}},
                     "postHooks": [{"exec": {"container": "app", "command": ["sh", "-c",
                         format!("echo run >> '{}'", mark.display())]}}]},
        })],
    );
    // Nothing listens on port 1: the API server answers each status write 500.
    cp.apply(
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "record-unreachable"},
            "webhooks": [{
                "name": "record-unreachable.restore-hooks.test",
                "clientConfig": {"url": "https://127.0.0.1:1/validate"},
                "rules": [{"apiGroups": ["restore-hooks.dev"], "apiVersions": ["*"],
                           "operations": ["UPDATE"], "resources": ["restorerecords/status"]}],
                "failurePolicy": "Fail", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 1,
            }],
        })
        .to_string(),
    )
    .unwrap();
    create(
        cp,
        &pod(ns, "once-0", &["app"], json!({"app": "once"}), json!({})),
    );
    let phase = || {
        get_pod(cp, ns, "once-0")
            .as_ref()
            .and_then(hook_status)
            .map(|s| {
                s["hooks"][0]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
    };
    wait_until(
        "the hook Running on the pod, its start not recorded".to_string(),
        Duration::from_secs(60),
        || match phase() {
            Some(p) if p == "Running" => Ok(()),
            p => Err(format!("phase {p:?}")),
        },
    );

    // Another holder takes the Lease, for 5 s.
    let lease = serve.controller().lease_name();
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    cp.kubectl_ok([
        "patch",
        "lease",
        &lease,
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        &json!({"spec": {"holderIdentity": "intruder", "renewTime": now, "leaseDurationSeconds": 5}})
            .to_string(),
    ])
    .unwrap();
    wait_until(
        "the hook taken back to Pending".to_string(),
        Duration::from_secs(60),
        || match phase() {
            Some(p) if p == "Pending" => Ok(()),
            p => Err(format!("phase {p:?}")),
        },
    );
    assert!(mark_lines(&mark).is_empty(), "the command never started");

    // The record can be written again; the intruder's Lease runs out and the controller leads.
    cp.kubectl_ok([
        "delete",
        "validatingwebhookconfiguration",
        "record-unreachable",
    ])
    .unwrap();
    let done = wait_hooks_ended(cp, ns, "once-0", Duration::from_secs(120));
    let status = hook_status(&done).unwrap();
    assert_eq!(status["hooks"][0]["phase"], "Succeeded", "{status}");
    assert_eq!(mark_lines(&mark), ["run"], "the command ran once");
    wait_restore_run(cp, "r-unstart", &["Completed"], Duration::from_secs(60));
    serve.assert_no_forbidden();
}

/// Exec slots (docs/behaviour.md §6.11) on the real API server, with 3 slots, 2 of them free to
/// one namespace (the third is the reserve for namespaces that hold none): `p`'s first hook and
/// `x`'s hold them; `w` waits and takes the slot `p`'s first hook
/// frees, so `p`'s second hook queues behind a full house; then `q` comes up and queues after it.
/// When `x` lets go, `q`'s first hook gets the slot ahead of `p`'s second, which waited longer.
/// The controller's `restore_hooks_exec_slot_waiting` says who waits at each step.
#[test]
fn a_pods_first_hook_gets_a_free_exec_slot_before_later_hooks_that_waited_longer() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::new(InstallOptions {
        helm_args: [
            "config.maxConcurrentExecs=3",
            "config.maxConcurrentExecsPerNamespace=2",
        ]
        .iter()
        .flat_map(|v| ["--set".to_string(), v.to_string()])
        .collect(),
        ..InstallOptions::default()
    });
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "slots";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-slots"}));
    let mark = install.mark("slots");
    let release = |pod: &str| std::fs::write(install.mark(&format!("release-{pod}")), b"").unwrap();
    // Holds its slot until the test releases its pod (its execTimeout, 3 minutes, at most).
    let hold = json!([
        "sh",
        "-c",
        format!(
            "echo $(POD_NAME) holds >> '{mark}'; until [ -e '{dir}/release-$(POD_NAME)' ]; do sleep 0.1; done",
            mark = mark.display(),
            dir = install.marks.display()
        )
    ]);
    let stamp = json!([
        "sh",
        "-c",
        format!("echo $(POD_NAME) stamps >> '{}'", mark.display())
    ]);
    let object = |name: &str, app: &str, command: &serde_json::Value| {
        json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"labelSelector": {"matchLabels": {"app": app}},
                     "postHooks": [{"exec": {"container": "c", "execTimeout": "3m", "command": command}}]},
        })
    };
    // RestoreHooks apply in name order: p's plan is [p1-hold, p2-stamp].
    scenarios::apply_hooks(
        cp,
        &[
            object("p1-hold", "p", &hold),
            object("p2-stamp", "p", &stamp),
            object("q-stamp", "q", &stamp),
            object("w-hold", "w", &hold),
            object("x-hold", "x", &hold),
        ],
    );
    let start = |name: &str| create(cp, &pod(ns, name, &["c"], json!({"app": name}), json!({})));
    let marked = |line: &str| mark_lines(&mark).iter().any(|l| l == line);
    let waiting = |turn: &str| {
        metric(
            &serve.controller().metrics(),
            &format!("restore_hooks_exec_slot_waiting{{turn=\"{turn}\"}}"),
        )
    };
    let wait = |what: &str, check: &dyn Fn() -> bool| {
        wait_until(what.to_string(), Duration::from_secs(90), || {
            check()
                .then_some(())
                .ok_or_else(|| format!("{:?}", mark_lines(&mark)))
        })
    };

    start("p");
    start("x");
    wait("p's first hook and x's hold both slots", &|| {
        marked("p holds") && marked("x holds")
    });
    start("w");
    // A waiting hook may be claimed (its start written while it waits, docs/behaviour.md §6.9):
    // it then counts as `claimed`, ahead of the unclaimed hooks of its own turn only.
    wait("w's first hook waits for a slot", &|| {
        waiting("first") + waiting("claimed") == 1.0
    });
    release("p");
    wait("w took the slot p's first hook freed", &|| {
        marked("w holds")
    });
    wait("p's second hook waits for a slot", &|| {
        waiting("first") == 0.0 && waiting("later") + waiting("claimed") == 1.0
    });
    start("q");
    wait("q's first hook waits for a slot", &|| {
        waiting("first") + waiting("claimed") + waiting("later") == 2.0
    });
    assert!(!marked("p stamps"), "p's second hook ran with no free slot");

    release("x");
    for pod in ["q", "p", "x"] {
        wait_hooks_ended(cp, ns, pod, Duration::from_secs(90));
    }
    let lines = mark_lines(&mark);
    let at = |line: &str| lines.iter().position(|l| l == line);
    assert!(
        at("q stamps") < at("p stamps") && at("q stamps").is_some(),
        "q's first hook must run before p's second, which waited longer: {lines:?}"
    );
    release("w");
    wait_hooks_ended(cp, ns, "w", Duration::from_secs(90));
    let run = wait_restore_run(cp, "r-slots", &["Completed"], Duration::from_secs(60));
    assert_eq!(run["status"]["hooks"]["succeeded"], 5, "{}", run["status"]);
    serve.assert_no_forbidden();
}

/// The exec slots' reserve and fair share (docs/behaviour.md §6.11) on the real API server, with
/// the chart's `config.maxConcurrentExecs=8`: at most 6 slots per namespace (three quarters),
/// 1 (the last eighth) kept for namespaces that hold none, and a namespace that holds slots takes
/// another only below its share of the 7 others (among the namespaces that hold or wait).
///
/// Namespace A's 7 long hooks take 6 slots, its cap; B's 7 then take the one slot left outside
/// the reserve and no more (a namespace that holds a slot never takes the reserve); C's one quick
/// hook takes the reserve and runs to `Succeeded` while A's and B's still hold theirs, and nobody
/// takes the slot it hands back. Then 5 of A's hooks end: A's last one starts, and B grows to its
/// share, 4 (7 slots over 2 namespaces, rounded up), and no further, though 2 slots are free and
/// 3 of its hooks wait. Once the test releases them all, every hook ends `Succeeded`, each run
/// once. Which hooks hold slots is decided by the test (a file each command waits for), never by
/// timing.
#[test]
fn exec_slots_keep_a_reserve_for_a_namespace_that_holds_none_and_share_the_rest_fairly() {
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::time::Duration;

    const PODS: usize = 7;
    let install = Install::new(InstallOptions {
        helm_args: vec!["--set".into(), "config.maxConcurrentExecs=8".into()],
        ..InstallOptions::default()
    });
    let serve = install.start(0);
    let controller = serve.controller();
    assert!(
        controller
            .args
            .iter()
            .any(|a| a == "--max-concurrent-execs=8")
            && !controller
                .args
                .iter()
                .any(|a| a.starts_with("--max-concurrent-execs-per-namespace")),
        "8 slots, the per-namespace cap at its default: {:?}",
        controller.args
    );
    let cp = &install.cp;
    let [a, b, c] = ["fair-a", "fair-b", "fair-c"];
    let marks = |ns: &str| install.mark(ns);
    for ns in [a, b, c] {
        namespace(cp, ns, json!({NAMESPACE_LABEL: format!("r-{ns}")}));
    }
    // Holds its slot until the test releases its pod (10 minutes at most).
    let release = |pod: &str| std::fs::write(install.mark(&format!("release-{pod}")), b"").unwrap();
    let hold = |ns: &str| {
        json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "hold", "namespace": ns},
            "spec": {"postHooks": [{"exec": {"container": "app", "execTimeout": "11m",
                "command": ["sh", "-c", format!(
                    "echo $(POD_NAME) >> '{mark}'; r='{dir}/release-$(POD_NAME)'; i=0; \
                     until [ -e \"$r\" ] || [ $i -ge 1200 ]; do sleep 0.5; i=$((i+1)); done; [ -e \"$r\" ]",
                    mark = marks(ns).display(),
                    dir = install.marks.display()
                )]}}]},
        })
    };
    scenarios::apply_hooks(
        cp,
        &[
            hold(a),
            hold(b),
            json!({
                "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                "metadata": {"name": "quick", "namespace": c},
                "spec": {"postHooks": [{"exec": {"container": "app",
                    "command": ["sh", "-c", mark_cmd(&marks(c), "ran")]}}]},
            }),
        ],
    );
    let pods = |ns: &str| (0..PODS).map(|i| format!("{ns}-{i}")).collect::<Vec<_>>();
    // (slots in use, hooks waiting for one: claimed or not).
    let slots = || {
        let metrics = controller.metrics();
        let waiting = |turn: &str| {
            metric(
                &metrics,
                &format!("restore_hooks_exec_slot_waiting{{turn=\"{turn}\"}}"),
            )
        };
        (
            metric(&metrics, "restore_hooks_exec_slots_in_use"),
            waiting("claimed") + waiting("first") + waiting("later"),
        )
    };
    // The pods of `ns` by their hook's phase (a hook that never started may have no status yet:
    // Pending too). A hook claimed while it waits for a slot (docs/behaviour.md §6.9) is
    // `Running` on the pod before its command starts: it counts as Pending until its command
    // wrote its mark.
    let phases = |ns: &str| {
        let mut by_phase = BTreeMap::<String, Vec<String>>::new();
        let list = get_json(cp, &["get", "pods", "-n", ns]).expect("the pods of the namespace");
        let started = mark_lines(&marks(ns));
        for pod in list["items"].as_array().unwrap() {
            let name = pod["metadata"]["name"].as_str().unwrap().to_string();
            let phase = hook_status(pod)
                .and_then(|s| s["hooks"][0]["phase"].as_str().map(str::to_string))
                .filter(|p| p != "Running" || started.contains(&name))
                .unwrap_or_else(|| "Pending".to_string());
            by_phase.entry(phase).or_default().push(name);
        }
        by_phase
    };
    let counts = |ns: &str| {
        phases(ns)
            .into_iter()
            .map(|(phase, pods)| (phase, pods.len()))
            .collect::<BTreeMap<_, _>>()
    };
    let want = |pairs: &[(&str, usize)]| {
        pairs
            .iter()
            .map(|(phase, n)| (phase.to_string(), *n))
            .collect::<BTreeMap<_, _>>()
    };
    // Waits until A's and B's hooks are in the phases given, and the slots `(in use, hooks
    // waiting)` as given.
    let settle =
        |what: &str, in_a: &[(&str, usize)], in_b: &[(&str, usize)], slots_now: (f64, f64)| {
            wait_until(what.to_string(), Duration::from_secs(120), || {
                let now = (counts(a), counts(b), slots());
                if now == (want(in_a), want(in_b), slots_now) {
                    Ok(())
                } else {
                    Err(format!("(A, B, (in use, waiting)) = {now:?}"))
                }
            })
        };

    for name in pods(a) {
        create(cp, &pod(a, &name, &["app"], json!({}), json!({})));
    }
    settle(
        "A to hold its cap of 6 slots",
        &[("Pending", 1), ("Running", 6)],
        &[],
        (6.0, 1.0),
    );
    for name in pods(b) {
        create(cp, &pod(b, &name, &["app"], json!({}), json!({})));
    }
    settle(
        "B to hold the last slot outside the reserve",
        &[("Pending", 1), ("Running", 6)],
        &[("Pending", 6), ("Running", 1)],
        (7.0, 7.0),
    );

    create(cp, &pod(c, "quick-0", &["app"], json!({}), json!({})));
    let done = wait_hooks_ended(cp, c, "quick-0", Duration::from_secs(120));
    let status = hook_status(&done).unwrap();
    assert_eq!(status["hooks"][0]["phase"], "Succeeded", "{status}");
    assert_eq!(mark_lines(&marks(c)).len(), 1, "C's hook ran once");
    // C's slot was handed back before its result was written, and nobody took it: A is at its
    // cap, and B holds a slot, so the reserve is not B's.
    assert_eq!(slots(), (7.0, 7.0), "(in use, hooks waiting)");
    assert_eq!(
        counts(a),
        want(&[("Pending", 1), ("Running", 6)]),
        "A's hooks"
    );
    assert_eq!(
        counts(b),
        want(&[("Pending", 6), ("Running", 1)]),
        "B's hooks"
    );
    assert_eq!(
        (mark_lines(&marks(a)).len(), mark_lines(&marks(b)).len()),
        (6, 1),
        "A's and B's commands that started"
    );

    // 5 of A's hooks end: A (1 left) is below its share and its last hook starts; B takes slots
    // up to its share, 4, and stops there with 2 slots free.
    for name in phases(a)["Running"].iter().take(5) {
        release(name);
    }
    settle(
        "A's last hook to start and B to reach its share",
        &[("Running", 2), ("Succeeded", 5)],
        &[("Pending", 3), ("Running", 4)],
        (6.0, 3.0),
    );

    for name in pods(a).iter().chain(&pods(b)) {
        release(name);
    }
    for ns in [a, b] {
        for name in pods(ns) {
            let done = wait_hooks_ended(cp, ns, &name, Duration::from_secs(180));
            let status = hook_status(&done).unwrap();
            assert_eq!(status["hooks"][0]["phase"], "Succeeded", "{name}: {status}");
        }
        let mut ran = mark_lines(&marks(ns));
        ran.sort();
        assert_eq!(ran, pods(ns), "each hook of {ns} ran once");
        let run = wait_restore_run(
            cp,
            &format!("r-{ns}"),
            &["Completed"],
            Duration::from_secs(60),
        );
        assert_eq!(
            run["status"]["hooks"]["succeeded"], PODS,
            "{}",
            run["status"]
        );
    }
    assert_eq!(slots(), (0.0, 0.0), "every slot handed back");
    serve.assert_no_forbidden();
}

/// `kubectl wait -v=6 ARGS` (the pinned kubectl, admin), returned once it watches the object:
/// it read it, found the condition unmet and waits for a change. Its log is drained by a thread.
fn kubectl_waiting(cp: &ControlPlane, args: &[&str]) -> std::process::Child {
    use std::io::BufRead;
    let mut child = std::process::Command::new(cp.kubectl_path())
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .args(["wait", "-v=6"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("watch=true") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        panic!("kubectl wait {args:?} never watched");
    }
    child
}

/// docs/behaviour.md §8.3, §8.4 on the real API server, with a restore of more failing pods than
/// the RestoreRun lists (20): `kubectl wait --for=condition=Completed` and
/// `--for=condition=Failed`, started while one hook is held, return once the restore ends
/// `PartiallyFailed`; `restore-hooks describe`, run as an identity with only the read rights
/// docs/operations.md lists (through the binary and as the kubectl plugin), names every failed
/// pod, as text and with `-o json`.
#[test]
fn describe_lists_every_failed_pod_and_kubectl_wait_returns_on_partially_failed() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "describe";
    let restore = "r-describe";
    namespace(cp, ns, json!({NAMESPACE_LABEL: restore}));
    let gate = install.mark("describe-gate");
    let hook = |name: &str, selector: serde_json::Value, command: String| {
        json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "labelSelector": {"matchLabels": selector},
                "postHooks": [{"exec": {"container": "app", "execTimeout": "10m",
                                        "command": ["sh", "-c", command]}}],
            },
        })
    };
    scenarios::apply_hooks(
        cp,
        &[
            hook(
                "broken",
                json!({"broken": "true"}),
                "echo boom >&2; exit 3".into(),
            ),
            // Holds the restore InProgress until the test creates the gate file.
            hook(
                "held",
                json!({"held": "true"}),
                format!(
                    "while [ ! -f '{}' ]; do sleep 0.2; done; echo released",
                    gate.display()
                ),
            ),
        ],
    );
    // The script of docs/operations.md waits for the RestoreRun to exist first.
    let created = std::process::Command::new(cp.kubectl_path())
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .args([
            "wait",
            "--for=create",
            &format!("restorerun/{restore}"),
            "--timeout=300s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let failing: Vec<String> = (0..22).map(|i| format!("fail-{i:02}")).collect();
    let mut pods: Vec<serde_json::Value> = failing
        .iter()
        .map(|name| pod(ns, name, &["app"], json!({"broken": "true"}), json!({})))
        .collect();
    pods.push(pod(
        ns,
        "held-0",
        &["app"],
        json!({"held": "true"}),
        json!({}),
    ));
    apply_list(cp, &pods);
    let out = created.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl wait --for=create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in &failing {
        let pod = wait_hooks_ended(cp, ns, name, Duration::from_secs(240));
        assert_eq!(pod["metadata"]["labels"][EXEC_LABEL], "failed");
    }
    let run = wait_until(
        "RestoreRun r-describe to count the 22 failures while held-0 runs",
        Duration::from_secs(120),
        || {
            let run = get_json(cp, &["get", "restoreruns.restore-hooks.dev", restore])
                .ok_or("no RestoreRun")?;
            let s = &run["status"];
            (s["phase"] == "InProgress" && s["hooks"]["failed"] == 22 && s["hooks"]["pending"] == 1)
                .then_some(run.clone())
                .ok_or_else(|| s.to_string())
        },
    );
    let failed_condition = run["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .expect("a Failed condition");
    assert_eq!(
        (&failed_condition["status"], &failed_condition["reason"]),
        (&json!("Unknown"), &json!("InProgress"))
    );

    // Both waits watch while the restore is in progress, and return when it ends.
    let object = format!("restorerun/{restore}");
    let mut waits: Vec<(&str, std::process::Child)> = ["Completed", "Failed"]
        .into_iter()
        .map(|c| {
            let wait = kubectl_waiting(
                cp,
                &[&format!("--for=condition={c}"), &object, "--timeout=300s"],
            );
            (c, wait)
        })
        .collect();
    for (c, wait) in &mut waits {
        assert!(
            wait.try_wait().unwrap().is_none(),
            "kubectl wait --for=condition={c} returned while held-0's hook ran"
        );
    }
    std::fs::write(&gate, "").unwrap();
    for (c, wait) in waits {
        let out = wait.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "--for=condition={c}: {stdout}");
        assert!(
            stdout.contains("condition met"),
            "--for=condition={c}: {stdout}"
        );
    }
    let run = wait_restore_run(cp, restore, &["PartiallyFailed"], Duration::from_secs(10));
    // The script's check for success fails, at once.
    let success = cp.kubectl([
        "wait",
        "--for=condition=Failed=False",
        &object,
        "--timeout=0s",
    ]);
    assert!(
        !success.status.success(),
        "Failed=False on a PartiallyFailed restore"
    );
    assert_eq!(run["status"]["hooks"]["succeeded"], 1, "{}", run["status"]);
    assert_eq!(run["status"]["hooks"]["failed"], 22);
    assert_eq!(
        run["status"]["failedPods"].as_array().unwrap().len(),
        20,
        "the RestoreRun lists 20"
    );

    // `describe` as an identity that may only read: get RestoreRuns, list pods and Events.
    apply_list(
        cp,
        &[
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "describer", "namespace": ns}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "restore-hooks-describer"},
            "rules": [
                {"apiGroups": ["restore-hooks.dev"], "resources": ["restoreruns"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
            ]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "restore-hooks-describer"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "restore-hooks-describer"},
                   "subjects": [{"kind": "ServiceAccount", "name": "describer", "namespace": ns}]}),
        ],
    );
    let token = cp
        .token_for_service_account(ns, "describer", Duration::from_secs(3600))
        .unwrap();
    let kubeconfig = cp.kubeconfig_for_token(&token).unwrap();
    let kc = format!("--kubeconfig={}", kubeconfig.display());
    let binary = std::path::PathBuf::from(env!("CARGO_BIN_EXE_restore-hooks"));
    let describe = |program: &std::path::Path, args: &[&str], path: Option<&str>| {
        let mut command = std::process::Command::new(program);
        command.args(args);
        if let Some(path) = path {
            command.env("PATH", path);
        }
        let out = command.output().expect("it runs");
        assert!(
            out.status.success(),
            "{program:?} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json_out = describe(&binary, &["describe", restore, "-o", "json", &kc], None);
    let report: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(report["phase"], "PartiallyFailed");
    assert_eq!(
        report["notes"],
        json!([]),
        "everything it needs was readable"
    );
    let listed: Vec<&str> = report["failedPods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["pod"].as_str().unwrap())
        .collect();
    assert_eq!(listed, failing, "every failed pod, not 20");
    for f in report["failedPods"].as_array().unwrap() {
        assert_eq!(f["hook"], "broken");
        assert_eq!(f["message"], "command terminated with exit code 3", "{f}");
    }
    let pods = report["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 23);
    let fail_0 = pods.iter().find(|p| p["name"] == "fail-00").unwrap();
    assert_eq!(fail_0["hooks"][0]["stderr"], "boom\n");
    assert!(
        report["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "fail-00" && e["reason"] == "HookFailed"),
        "{}",
        report["events"]
    );

    let text = describe(&binary, &["describe", restore, &kc], None);
    assert!(text.contains("\nPhase:        PartiallyFailed\n"), "{text}");
    assert!(text.contains("\nFailed pods (22):\n"), "{text}");
    for name in &failing {
        let line = format!("  {ns:<9}  {name}  broken  command terminated with exit code 3\n");
        assert!(text.contains(&line), "{line:?} in {text}");
    }

    // An identity that may list pods and Events in this namespace only, and read no RestoreRun:
    // every namespace is refused (exit status 2, naming -n); with -n the report is the pods',
    // with a note for the RestoreRun it could not read.
    let namespaced = service_account_with(
        cp,
        ns,
        "namespace-viewer",
        json!([{"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]}]),
    );
    let nkc = format!("--kubeconfig={}", namespaced.display());
    let refused = std::process::Command::new(&binary)
        .args(["describe", restore, &nkc])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("-n NAMESPACE"), "{stderr}");
    let limited: serde_json::Value = serde_json::from_str(&describe(
        &binary,
        &["describe", restore, "-n", ns, "-o", "json", &nkc],
        None,
    ))
    .unwrap();
    assert_eq!(
        (&limited["phase"], &limited["phaseFrom"]),
        (&json!("PartiallyFailed"), &json!("pods"))
    );
    assert_eq!(limited["failedPods"].as_array().unwrap().len(), 22);
    let notes = limited["notes"].to_string();
    assert!(
        notes.contains("could not be read (RestoreRun r-describe: ") && notes.contains("(403)"),
        "{notes}"
    );

    // As kubectl's plugin (the pinned kubectl): the binary on PATH as kubectl-restore_hooks.
    let bin = cp.work_dir().join("plugin-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("kubectl-restore_hooks");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&binary, &link).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let plugin = describe(
        cp.kubectl_path(),
        &["restore-hooks", "describe", restore, &kc],
        Some(&path),
    );
    // Up to the Events (one may still land between the two runs).
    let before_events = |s: &str| s.split("\nEvents (").next().unwrap().to_string();
    assert_eq!(
        before_events(&plugin),
        before_events(&text),
        "the plugin prints what the binary prints"
    );
    serve.assert_no_forbidden();
}
