//! Faults between the controller and a real kube-apiserver (e2e/realcp): the controller talks
//! to the API server through a proxy (`real/lossy_proxy.rs`) that can lose the answer of a
//! request the API server processed.

mod real;

use real::lossy_proxy::LossyProxy;
use real::*;

/// An `image` hook whose `pods/ephemeralcontainers` PATCH lands but whose answer is lost
/// (docs/behaviour.md §6.18): "a request that got no answer ... may have added it all the same:
/// the pod is read before anything else, and an attempt whose container is there is waited for,
/// never tried again with a second container". The proxy drops the controller's connection once
/// the API server has stored the container, for a hook with `retry` (`attempts: 3, idempotent:
/// false`) and for one without: each ends `Succeeded` with exactly one container,
/// `restore-hooks-0-1`, the controller having read the pod rather than trying again (an attempt
/// taken for "not started" is tried again at once, §6.17 `unavailable`, with a second container,
/// `restore-hooks-0-2`). First, a plain exec hook runs through the proxy (its WebSocket upgrade
/// tunnelled), so the proxy is known to pass everything else through unchanged.
#[test]
fn an_image_hook_whose_ephemeral_container_patch_lost_its_answer_runs_in_one_container() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let cp = &install.cp;
    let proxy = LossyProxy::start(cp);
    let serve = Replica::start(
        &install,
        0,
        &ServeOptions {
            via: Some(proxy.via()),
            ..ServeOptions::default()
        },
    );

    // The proxy passes exec's upgrade through: a plain exec hook runs, once.
    let ns = "through-proxy";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-through-proxy"}));
    let mark = install.mark("through-proxy");
    scenarios::apply_hooks(
        cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "stamp", "namespace": ns},
            "spec": {"postHooks": [{"exec": {"container": "app",
                                             "command": ["sh", "-c", mark_cmd(&mark, "run")]}}]},
        })],
    );
    create(cp, &pod(ns, "app-0", &["app"], json!({}), json!({})));
    let done = wait_hooks_ended(cp, ns, "app-0", Duration::from_secs(90));
    let status = hook_status(&done).unwrap();
    assert_eq!(status["hooks"][0]["phase"], "Succeeded", "{status}");
    assert_eq!(mark_lines(&mark).len(), 1, "the command ran once");
    assert!(
        proxy
            .forwarded()
            .iter()
            .any(|f| f.path.ends_with("/pods/app-0/exec") && f.status == Some(101)),
        "the exec went through the proxy, upgraded: {:?}",
        proxy.forwarded()
    );

    for (ns, retry) in [
        (
            "lost-answer-retry",
            json!({"attempts": 3, "idempotent": false}),
        ),
        ("lost-answer-once", serde_json::Value::Null),
    ] {
        let restore = format!("r-{ns}");
        namespace(cp, ns, json!({NAMESPACE_LABEL: restore}));
        let mut exec = json!({
            "container": "api", "image": "busybox:1.36",
            // kwok reports the container terminated with the code its command ends with.
            "command": ["/bin/sh", "-c", "wget -qO- http://127.0.0.1:8080/admin/reindex; exit 0"],
        });
        if !retry.is_null() {
            exec["retry"] = retry;
        }
        scenarios::apply_hooks(
            cp,
            &[json!({
                "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                "metadata": {"name": "reindex", "namespace": ns},
                "spec": {"postHooks": [{"exec": exec}]},
            })],
        );
        let patch_path = format!("^/api/v1/namespaces/{ns}/pods/api-0/ephemeralcontainers$");
        proxy.lose_answers("PATCH", &patch_path, 1);
        let mut api = pod(ns, "api-0", &["api"], json!({}), json!({}));
        api["spec"]["containers"][0]["image"] = json!("gcr.io/distroless/static-debian12:nonroot");
        api["spec"]["containers"][0]["command"] = json!(["/server"]);
        create(cp, &api);

        let done = wait_hooks_ended(cp, ns, "api-0", Duration::from_secs(120));
        let names: Vec<&str> = done["spec"]["ephemeralContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["restore-hooks-0-1"],
            "{ns}: exactly one ephemeral container for the one attempt"
        );
        let patches = proxy.forwarded_matching("PATCH", &patch_path);
        assert_eq!(
            patches.len(),
            1,
            "{ns}: one PATCH, its answer lost, and no second: {patches:?}"
        );
        assert!(
            patches[0].lost && patches[0].status == Some(200),
            "{ns}: the API server stored the container and its answer was lost: {patches:?}"
        );
        let status = hook_status(&done).unwrap();
        let hook = &status["hooks"][0];
        assert_eq!(hook["phase"], "Succeeded", "{ns}: {status}");
        assert_eq!(hook["exitCode"], 0, "{ns}: {status}");
        assert!(
            hook.get("retries").is_none(),
            "{ns}: the lost answer is no failed attempt: {status}"
        );
        assert_eq!(done["metadata"]["labels"][EXEC_LABEL], "done");
        let read = serve
            .controller()
            .lines_starting("adding an ephemeral container got no clear answer; reading the pod")
            .into_iter()
            .filter(|l| l["namespace"] == ns && l["pod"] == "api-0")
            .collect::<Vec<_>>();
        assert_eq!(read.len(), 1, "{ns}: the controller read the pod: {read:?}");
        assert_eq!(read[0]["container"], "restore-hooks-0-1", "{read:?}");
        let run = wait_restore_run(cp, &restore, &["Completed"], Duration::from_secs(60));
        assert_eq!(run["status"]["hooks"]["succeeded"], 1, "{}", run["status"]);
    }
    serve.assert_no_forbidden();
}
