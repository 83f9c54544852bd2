//! The trust rules of docs/behaviour.md §9 on a real kube-apiserver (e2e/realcp), each proved with
//! an identity that lacks the right: a ServiceAccount token, never the admin.
//!
//! - Who may author a hook: a pod creator without `create pods/exec` gets no command run (its
//!   annotation exec hook is refused, visibly); a RestoreHook author without it is refused; a
//!   Deployment's pods (created by the ReplicaSet controller, which has no exec right) get their
//!   annotation hooks through a RestoreHook with `podAnnotationHooks: Allow`.
//! - At most once: a status removed through `pods/status` (refused by the chart's policy; then
//!   with the policy gone, as on a cluster without it) after the hook ran, and a leader killed,
//!   never runs the hook again.
//! - One plan, one pod: a plan copied onto a pod recreated under the same name, or onto a
//!   `generateName` sibling created while the webhook was down, never runs; a plan signed for a
//!   forged requester by calling the webhook directly cannot be put on a pod.

mod real;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use real::*;
use serde_json::{Value, json};

/// A ServiceAccount `ns/name` that may do what an application team does in its namespace
/// (pods, Deployments, RestoreHooks) but not `create pods/exec`; its token's kubeconfig.
fn team_member_without_exec(install: &Install, ns: &str, name: &str) -> PathBuf {
    let cp = &install.cp;
    let rules = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete", "patch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "get", "list", "patch", "delete"]},
        {"apiGroups": ["restore-hooks.dev"], "resources": ["restorehooks"], "verbs": ["create", "get", "list"]},
    ]);
    let kubeconfig = service_account_with(cp, ns, name, rules);
    let user = format!("system:serviceaccount:{ns}:{name}");
    let can = |args: &[&str]| {
        let mut full = vec!["auth", "can-i", "--as", &user];
        full.extend(args);
        String::from_utf8_lossy(&cp.kubectl(&full).stdout)
            .trim()
            .to_string()
    };
    assert_eq!(can(&["create", "pods", "-n", ns]), "yes");
    // `pods/exec` would ask about a pod named "exec": the subresource is a flag.
    assert_eq!(
        can(&["create", "pods", "--subresource=exec", "-n", ns]),
        "no"
    );
    kubeconfig
}

/// `kubectl ARGS -f -` with `object` on stdin, as `kubeconfig`: (succeeded, stdout, stderr).
fn kubectl_object_as(
    install: &Install,
    kubeconfig: &std::path::Path,
    args: &[&str],
    object: &Value,
) -> (bool, String, String) {
    let out = kubectl_stdin(&install.cp, kubeconfig, args, &object.to_string());
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The one exec hook of an ended pod's status.
fn only_hook(pod: &Value) -> Value {
    let hooks = scenarios::hooks_of(pod);
    assert_eq!(hooks.len(), 1, "{}", pod["metadata"]);
    hooks[0].clone()
}

#[test]
fn only_authors_entitled_to_exec_get_a_command_run() {
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    let ns = "team";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-trust"}));
    let dev = team_member_without_exec(&install, ns, "dev");
    let dev_user = "system:serviceaccount:team:dev";
    let annotated = |name: &str, mark: &std::path::Path| {
        pod(
            ns,
            name,
            &["app"],
            json!({}),
            json!({"post.hook.restore.velero.io/command":
                serde_json::to_string(&["sh", "-c", &mark_cmd(mark, name)]).unwrap()}),
        )
    };

    // A pod whose creator may not exec: the hook is planned refused, with a warning; the
    // controller records it Failed with the reason and a HookRefused Event; it never runs.
    let dev_mark = install.mark("by-dev");
    let (ok, _, stderr) = kubectl_object_as(
        &install,
        &dev,
        &["create", "-f", "-"],
        &annotated("by-dev", &dev_mark),
    );
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("Warning") && stderr.contains("refused") && stderr.contains(dev_user),
        "kubectl shows the admission warning: {stderr}"
    );
    let ended = wait_hooks_ended(cp, ns, "by-dev", Duration::from_secs(90));
    assert_eq!(ended["metadata"]["labels"][EXEC_LABEL], "failed");
    let planned = &plan(&ended).unwrap()["hooks"][0];
    assert!(planned["refused"].is_string(), "{planned}");
    let hook = only_hook(&ended);
    assert_eq!(hook["phase"], "Failed");
    let message = hook["message"].as_str().unwrap();
    assert!(
        message.starts_with("refused: ")
            && message.contains(&format!("{dev_user}, who may not create pods/exec"))
            && message.contains("podAnnotationHooks: Allow"),
        "{message}"
    );
    let refused = wait_until("a HookRefused Event", Duration::from_secs(30), || {
        events_with(cp, ns, "by-dev", "HookRefused")
            .pop()
            .ok_or_else(|| "none yet".to_string())
    });
    assert_eq!(refused["type"], "Warning");
    assert!(mark_lines(&dev_mark).is_empty(), "the refused command ran");

    // The same pod by an identity that may exec: the hook runs, allowed by its creator.
    let admin_mark = install.mark("by-admin");
    create(cp, &annotated("by-admin", &admin_mark));
    let ended = wait_hooks_ended(cp, ns, "by-admin", Duration::from_secs(90));
    assert_eq!(ended["metadata"]["labels"][EXEC_LABEL], "done");
    assert_eq!(plan(&ended).unwrap()["hooks"][0]["allowedBy"], "creator");
    assert_eq!(mark_lines(&admin_mark).len(), 1);

    // A RestoreHook is an exec too: its author needs create pods/exec in the namespace.
    let (ok, _, stderr) = kubectl_object_as(
        &install,
        &dev,
        &["create", "-f", "-"],
        &json!({"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                "metadata": {"name": "sneaky", "namespace": ns},
                "spec": {"postHooks": [{"exec": {"command": ["true"]}}]}}),
    );
    assert!(!ok, "a RestoreHook author without exec rights was admitted");
    assert!(
        stderr.contains("needs permission to create pods/exec") && stderr.contains(dev_user),
        "{stderr}"
    );

    // A Deployment's pods are created by the ReplicaSet controller, which may not exec: their
    // annotation hook is refused...
    let web_mark = install.mark("web");
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {
                     "metadata": {"labels": {"app": "web"}, "annotations": {
                         "post.hook.restore.velero.io/command":
                             serde_json::to_string(&["sh", "-c", &mark_cmd(&web_mark, "web")]).unwrap()}},
                     "spec": {"automountServiceAccountToken": false, "terminationGracePeriodSeconds": 0,
                              "containers": [{"name": "web", "image": "busybox:1.36", "command": ["sleep", "infinity"]}]}}},
    });
    let (ok, _, stderr) = kubectl_object_as(&install, &dev, &["create", "-f", "-"], &deployment);
    assert!(ok, "{stderr}");
    let web_pods = |want_phase: &str| {
        wait_until(
            format!("2 web pods with their hook {want_phase}"),
            Duration::from_secs(120),
            || {
                let list = get_json(cp, &["get", "pods", "-n", ns, "-l", "app=web"]).unwrap();
                let pods: Vec<Value> = list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .cloned()
                    .collect();
                let ended = pods
                    .iter()
                    .filter(|p| {
                        hook_status(p).is_some_and(|s| s["hooks"][0]["phase"] == want_phase)
                    })
                    .count();
                if pods.len() == 2 && ended == 2 {
                    Ok(pods)
                } else {
                    Err(format!("{} pods, {ended} {want_phase}", pods.len()))
                }
            },
        )
    };
    for p in web_pods("Failed") {
        let message = only_hook(&p)["message"].as_str().unwrap().to_string();
        assert!(
            message.contains("replicaset-controller, who may not create pods/exec"),
            "{message}"
        );
    }
    assert!(mark_lines(&web_mark).is_empty(), "a refused command ran");

    // ... until a RestoreHook whose author may exec there allows the annotation hooks of the
    // pods it selects. The ReplicaSet's next pods run their hook, each once.
    scenarios::apply_hooks(
        cp,
        &[
            json!({"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                 "metadata": {"name": "allow-web", "namespace": ns},
                 "spec": {"labelSelector": {"matchLabels": {"app": "web"}},
                          "podAnnotationHooks": "Allow"}}),
        ],
    );
    scenarios::wait_compiled(cp, ns, "allow-web", &[serve.webhook().identity.as_str()]);
    cp.kubectl_ok(["delete", "pods", "-n", ns, "-l", "app=web", "--wait=false"])
        .unwrap();
    for p in web_pods("Succeeded") {
        assert_eq!(
            plan(&p).unwrap()["hooks"][0]["allowedBy"],
            "restorehook/allow-web",
            "{}",
            p["metadata"]
        );
    }
    assert_eq!(
        mark_lines(&web_mark).len(),
        2,
        "each new pod's hook ran once"
    );

    // Visible in the restore's record and the webhook's metrics: 3 refusals (by-dev and the
    // first two web pods, deleted since: their counts are kept).
    let run = wait_until("RestoreRun r-trust counts", Duration::from_secs(60), || {
        let run = get_json(cp, &["get", "restoreruns.restore-hooks.dev", "r-trust"])
            .ok_or("no RestoreRun")?;
        (run["status"]["hooks"]["refused"] == 3 && run["status"]["hooks"]["pending"] == 0)
            .then_some(run.clone())
            .ok_or_else(|| run["status"].to_string())
    });
    assert_eq!(
        run["status"]["phase"], "PartiallyFailed",
        "{}",
        run["status"]
    );
    assert_eq!(
        metric(
            &serve.webhook().metrics(),
            "restore_hooks_annotation_hooks_refused_total{reason=\"creator_may_not_exec\"}"
        ),
        3.0
    );
}

#[test]
fn a_hook_never_runs_again_after_its_status_is_removed_and_the_leader_is_killed() {
    let install = Install::default_chart();
    let cp = &install.cp;
    let mut first = install.start(0);
    first.wait_leader(Duration::from_secs(60));
    let second = install.start(1);
    let ns = "vault";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-tamper"}));
    let mark = install.mark("tamper");
    scenarios::apply_hooks(
        cp,
        &[
            json!({"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                 "metadata": {"name": "once", "namespace": ns},
                 "spec": {"postHooks": [{"exec": {"command": ["sh", "-c", mark_cmd(&mark, "once")]}}]}}),
        ],
    );
    scenarios::wait_compiled(
        cp,
        ns,
        "once",
        &[
            first.webhook().identity.as_str(),
            second.webhook().identity.as_str(),
        ],
    );
    create(cp, &pod(ns, "db", &["app"], json!({}), json!({})));
    let done = wait_hooks_ended(cp, ns, "db", Duration::from_secs(90));
    assert_eq!(done["metadata"]["labels"][EXEC_LABEL], "done");
    assert_eq!(mark_lines(&mark).len(), 1);
    let uid = done["metadata"]["uid"].as_str().unwrap().to_string();
    // The record holds the result before the leader goes.
    let record = wait_until("the record of the hook", Duration::from_secs(30), || {
        let record = get_json(
            cp,
            &["get", "restorerecords.restore-hooks.dev", "r-tamper-0"],
        )
        .ok_or("no RestoreRecord")?;
        let entry = &record["status"]["executions"][&uid];
        (entry["hooks"]["0"] == "S")
            .then_some(record.clone())
            .ok_or_else(|| entry.to_string())
    });
    // Owned by the restore's RestoreRun: it goes when the RestoreRun goes.
    let owner = &record["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "RestoreRun", "{record}");
    assert_eq!(owner["name"], "r-tamper", "{record}");
    assert_eq!(record["spec"]["restoreRun"], "r-tamper", "{record}");
    // Who may change pods in the namespace may not touch the record: removing the pod's entry is
    // refused by RBAC (the record is granted to the controller alone).
    let dev = team_member_without_exec(&install, ns, "dev");
    let forget = json!({"status": {"executions": {&uid: null}}}).to_string();
    let out = kubectl_stdin(
        cp,
        &dev,
        &[
            "patch",
            "restorerecords.restore-hooks.dev",
            "r-tamper-0",
            "--subresource=status",
            "--type=merge",
            "-p",
            &forget,
        ],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("forbidden"),
        "a namespace's team member changed the controller's record: {stderr}"
    );

    // The reset through pods/status (which accepts metadata changes), by the admin.
    let reset = json!({"metadata": {
        "annotations": {STATUS: null, "restore-hooks.dev/status-signature": null},
        "labels": {EXEC_LABEL: "pending"}}})
    .to_string();
    let patch = |subresource: &[&str]| {
        let mut args = vec!["patch", "pod", "db", "-n", ns, "--type=merge", "-p", &reset];
        args.extend(subresource);
        cp.kubectl(&args)
    };
    // The chart's policy refuses it (and the same on the pod itself).
    for sub in [&["--subresource=status"][..], &[]] {
        let out = patch(sub);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sub:?}: the reset was admitted");
        assert!(
            stderr.contains("only the restore-hooks controller"),
            "{sub:?}: {stderr}"
        );
    }

    // A cluster without the policy (deleted, or never installed): the reset goes through.
    cp.kubectl_ok([
        "delete",
        "validatingadmissionpolicybinding",
        "restore-hooks-pod-hook-state",
    ])
    .unwrap();
    let reset_through_pods_status = || {
        wait_until(
            "the reset through pods/status (the policy is gone)",
            Duration::from_secs(60),
            || {
                let out = patch(&["--subresource=status"]);
                out.status
                    .success()
                    .then_some(())
                    .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
            },
        )
    };
    // The status restored from the record, a StatusRolledBack Event each time, nothing re-run.
    let restored = |rollbacks: usize| {
        let p = wait_until(
            "the status restored from the controller's record",
            Duration::from_secs(90),
            || {
                let p = get_pod(cp, ns, "db").ok_or("gone")?;
                (p["metadata"]["labels"][EXEC_LABEL] == "done")
                    .then_some(p.clone())
                    .ok_or_else(|| p["metadata"].to_string())
            },
        );
        let hook = only_hook(&p);
        assert_eq!(hook["phase"], "Succeeded", "{hook}");
        assert!(
            hook["message"]
                .as_str()
                .unwrap()
                .contains("restored from the controller's record"),
            "{hook}"
        );
        wait_until(
            format!("{rollbacks} StatusRolledBack Event(s)"),
            Duration::from_secs(30),
            || {
                let events = events_with(cp, ns, "db", "StatusRolledBack");
                let count: u64 = events
                    .iter()
                    .map(|e| e["count"].as_u64().unwrap_or(1))
                    .sum();
                (count as usize >= rollbacks)
                    .then_some(())
                    .ok_or_else(|| format!("{count}"))
            },
        );
        assert_eq!(mark_lines(&mark).len(), 1, "the hook ran again");
    };

    // While the leader that ran the hook leads: it restores the status at once.
    reset_through_pods_status();
    restored(1);
    assert_eq!(
        metric(
            &first.controller().metrics(),
            "restore_hooks_status_rollbacks_total"
        ),
        1.0
    );

    // The leader is killed, the status removed again before the next leader takes over: the
    // next leader never saw the hook run, and reads the record before it starts anything.
    first.controller_mut().kill();
    reset_through_pods_status();
    let reset_pod = get_pod(cp, ns, "db").unwrap();
    assert!(
        hook_status(&reset_pod).is_none(),
        "{}",
        reset_pod["metadata"]
    );
    assert_eq!(reset_pod["metadata"]["labels"][EXEC_LABEL], "pending");
    second.wait_leader(Duration::from_secs(90));
    restored(2);
    assert_eq!(
        metric(
            &second.controller().metrics(),
            "restore_hooks_status_rollbacks_total"
        ),
        1.0
    );
}

/// The chart with `failurePolicy: Ignore` (pods are created without the webhook while it is
/// down), replica 0 leading.
fn install_failing_open() -> (Install, Replica) {
    let install = Install::new(InstallOptions {
        helm_args: vec!["--set".into(), "webhook.failurePolicy=Ignore".into()],
        ..InstallOptions::default()
    });
    let serve = install.start(0);
    serve.wait_leader(Duration::from_secs(60));
    (install, serve)
}

#[test]
fn a_plan_runs_only_on_the_pod_it_was_issued_for() {
    let (install, mut serve) = install_failing_open();
    let cp = &install.cp;
    let ns = "copy";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-copy"}));
    namespace(cp, "plain", json!({}));
    let mark = install.mark("copy");
    scenarios::apply_hooks(
        cp,
        &[
            json!({"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                 "metadata": {"name": "count", "namespace": ns},
                 "spec": {"postHooks": [{"exec": {"command": ["sh", "-c", mark_cmd(&mark, "ran")]}}]}}),
        ],
    );
    scenarios::wait_compiled(cp, ns, "count", &[serve.webhook().identity.as_str()]);

    // Two pods admitted normally: one named, one from generateName.
    create(cp, &pod(ns, "db-0", &["app"], json!({}), json!({})));
    let mut sibling = pod(ns, "", &["app"], json!({}), json!({}));
    sibling["metadata"].as_object_mut().unwrap().remove("name");
    sibling["metadata"]["generateName"] = json!("web-");
    let sibling_name = create(cp, &sibling)["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let original = wait_hooks_ended(cp, ns, "db-0", Duration::from_secs(90));
    wait_hooks_ended(cp, ns, &sibling_name, Duration::from_secs(90));
    assert_eq!(mark_lines(&mark).len(), 2);
    let copied = |from: &Value, name: Option<&str>| {
        let a = &from["metadata"]["annotations"];
        let mut p = pod(
            ns,
            name.unwrap_or(""),
            &["app"],
            json!({EXEC_LABEL: "pending", RUN_LABEL: "r-copy"}),
            json!({PLAN: a[PLAN], "restore-hooks.dev/plan-signature": a["restore-hooks.dev/plan-signature"]}),
        );
        if name.is_none() {
            p["metadata"].as_object_mut().unwrap().remove("name");
            p["metadata"]["generateName"] = json!("web-");
        }
        p
    };
    let web = get_pod(cp, ns, &sibling_name).unwrap();

    // Outside every restore scope the API server refuses a pod carrying a plan (no webhook saw
    // it: its plan can only be copied or forged).
    let mut outside = copied(&original, Some("db-0"));
    outside["metadata"]["namespace"] = json!("plain");
    let (ok, stderr) = scenarios::kubectl_object(cp, &["create", "-f", "-"], &outside);
    assert!(
        !ok,
        "a pod with a copied plan outside every scope was admitted"
    );
    assert!(stderr.contains("outside every restore scope"), "{stderr}");

    // The webhook is down: the copies keep the plans they bring.
    serve.webhook_mut().kill();
    cp.kubectl_ok(["delete", "pod", "db-0", "-n", ns, "--wait=true"])
        .unwrap();
    let recreated = create(cp, &copied(&original, Some("db-0")));
    assert_eq!(
        recreated["metadata"]["annotations"][PLAN], original["metadata"]["annotations"][PLAN],
        "the webhook was bypassed"
    );
    let twin = create(cp, &copied(&web, None));
    let twin_name = twin["metadata"]["name"].as_str().unwrap().to_string();
    for name in ["db-0", twin_name.as_str()] {
        let ended = wait_hooks_ended(cp, ns, name, Duration::from_secs(90));
        assert_eq!(ended["metadata"]["labels"][EXEC_LABEL], "failed");
        let message = hook_status(&ended).unwrap()["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            message.contains("was issued for another pod") && message.contains("copied plan"),
            "{name}: {message}"
        );
        assert!(
            !events_with(cp, ns, name, "PlanRejected").is_empty(),
            "{name}: no PlanRejected Event"
        );
    }
    assert_eq!(mark_lines(&mark).len(), 2, "a copied plan ran");
    assert_eq!(
        metric(
            &serve.controller().metrics(),
            "restore_hooks_plans_rejected_total{reason=\"claimed_by_other_pod\"}"
        ),
        2.0
    );

    // A hook object that arrives now extends only the plans issued for their own pods: the
    // sibling's, not the copies' (they are never re-signed, docs/behaviour.md §7.2).
    let late_mark = install.mark("copy-late");
    apply_list(
        cp,
        &[
            json!({"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                 "metadata": {"name": "late", "namespace": ns},
                 "spec": {"postHooks": [{"exec": {"command": ["sh", "-c", mark_cmd(&late_mark, "late")]}}]}}),
        ],
    );
    let condition = wait_until(
        "the late RestoreHook's LateHooks condition",
        Duration::from_secs(60),
        || {
            let h = get_json(cp, &["get", "restorehook", "late", "-n", ns]).ok_or("gone")?;
            h["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "LateHooks")
                .cloned()
                .ok_or_else(|| h["status"].to_string())
        },
    );
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{ns}/{sibling_name}")),
        "{condition}"
    );
    assert!(
        !message.contains(&format!("{ns}/db-0")) && !message.contains(&twin_name),
        "a copied plan was extended: {condition}"
    );
    for name in ["db-0", twin_name.as_str()] {
        let p = get_pod(cp, ns, name).unwrap();
        assert_eq!(
            plan(&p).unwrap()["hooks"].as_array().unwrap().len(),
            1,
            "{name}"
        );
    }
    // Its plan grew (label back to pending): wait for the appended hook itself.
    wait_until("the sibling's late hook", Duration::from_secs(90), || {
        let p = get_pod(cp, ns, &sibling_name).ok_or("gone")?;
        let hooks = hook_status(&p)
            .map(|st| st["hooks"].clone())
            .unwrap_or_default();
        (hooks[1]["phase"] == "Succeeded")
            .then_some(())
            .ok_or_else(|| hooks.to_string())
    });
    assert_eq!(
        mark_lines(&late_mark).len(),
        1,
        "the sibling's late hook, once"
    );
}

#[test]
fn a_plan_signed_for_a_forged_requester_cannot_reach_a_pod() {
    let (install, mut serve) = install_failing_open();
    let cp = &install.cp;
    let ns = "direct";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-direct"}));
    let dev = team_member_without_exec(&install, ns, "dev");
    let mark = install.mark("direct");
    let mut wanted = pod(
        ns,
        "forged",
        &["app"],
        json!({}),
        json!({"post.hook.restore.velero.io/command":
            serde_json::to_string(&["sh", "-c", &mark_cmd(&mark, "forged")]).unwrap()}),
    );

    // Anyone who can reach the webhook's port can ask it for a plan, claiming to be anyone.
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0b6a1d32-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "forged", "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "object": wanted,
        }
    });
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(install.certs.dir.join("ca.crt"))
        .args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &review.to_string(),
        ])
        .arg(format!(
            "https://127.0.0.1:{}/mutate/pod-label",
            install.webhook_port
        ))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let patch: json_patch::Patch = {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(answer["response"]["patch"].as_str().expect("a patch"))
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    };
    json_patch::patch(&mut wanted, &patch.0).unwrap();
    let forged_plan = plan(&wanted).unwrap();
    assert_eq!(
        forged_plan["hooks"][0]["allowedBy"], "creator",
        "the webhook believed the claimed requester: {forged_plan}"
    );

    // The webhook down (failurePolicy Ignore): the pod would keep that plan. The API server
    // knows who really creates it, and that identity may not exec there: refused.
    serve.webhook_mut().kill();
    let (ok, _, stderr) = kubectl_object_as(&install, &dev, &["create", "-f", "-"], &wanted);
    assert!(
        !ok,
        "a pod carrying a plan signed for another requester was admitted"
    );
    assert!(
        stderr.contains("create pods/exec") && stderr.contains("system:serviceaccount:direct:dev"),
        "{stderr}"
    );
    assert!(get_pod(cp, ns, "forged").is_none());
    assert!(mark_lines(&mark).is_empty());
}
