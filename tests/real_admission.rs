//! The admission chain on a real kube-apiserver (e2e/realcp): the chart's two webhooks as
//! rendered, reinvocation with another mutating webhook, denials as kubectl prints them, and
//! what happens while the webhook is down (each entry's failurePolicy).

mod real;

use real::*;

#[test]
fn the_admission_chain_on_kubernetes_1_37() {
    let install = Install::default_chart();
    let serve = install.start(0);
    scenarios::admission_chain(&install, &serve);
    serve.assert_no_forbidden();
    scenarios::denials_logged_as_json(&serve);
}

/// The webhook down (docs/behaviour.md §3.7), with the chart's defaults: a pod Velero creates
/// (restore label; `veleroPodFailurePolicy: Ignore`) is admitted unmutated, so that Velero can
/// restore its volume data; another pod of a labelled restore namespace (`failurePolicy: Fail`) is
/// refused with the API server's message, for its controller to create again. With
/// `webhook.failurePolicy=Ignore` that one is admitted unmutated too. Once a replica leads again
/// it reports both (Event, metric).
#[test]
fn while_the_webhook_is_down_velero_pods_are_admitted_and_reported_and_others_refused() {
    use serde_json::json;
    use std::time::Duration;

    let install = Install::default_chart();
    let cp = &install.cp;
    let mut first = install.start(0);
    first.wait_leader(Duration::from_secs(60));
    namespace(cp, "down", json!({}));
    namespace(cp, "down-ns", json!({NAMESPACE_LABEL: "r-down-ns"}));
    for ns in ["down", "down-ns"] {
        scenarios::apply_hooks(
            cp,
            &[json!({
                "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                "metadata": {"name": "hook", "namespace": ns},
                "spec": {"postHooks": [{"exec": {"command": ["true"]}}]},
            })],
        );
    }
    let policies: Vec<(String, String)> =
        install.applied("MutatingWebhookConfiguration")[0]["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                let name = w["name"].as_str().unwrap();
                (
                    name.split('.').next().unwrap().to_string(),
                    w["failurePolicy"].as_str().unwrap().to_string(),
                )
            })
            .collect();
    assert_eq!(
        policies,
        [
            ("pod-label".to_string(), "Ignore".to_string()),
            ("namespace-label".to_string(), "Fail".to_string())
        ]
    );
    first.kill();

    let port = install.webhook_port;
    let create_unhooked = |ns: &str, labels: serde_json::Value| {
        let admitted = wait_until(
            format!("{ns}/unhooked admitted under failurePolicy Ignore"),
            Duration::from_secs(30),
            || {
                let (ok, stderr) = scenarios::kubectl_object(
                    cp,
                    &["create", "-f", "-", "-o", "json"],
                    &pod(ns, "unhooked", &["app"], labels.clone(), json!({})),
                );
                if ok {
                    Ok(get_pod(cp, ns, "unhooked").unwrap())
                } else {
                    Err(stderr)
                }
            },
        );
        scenarios::assert_untouched(&admitted);
    };
    // A pod Velero creates: admitted without its hooks.
    create_unhooked("down", json!({RESTORE_LABEL: "r-down"}));

    // A pod a controller creates in a restore namespace: refused, with the API server's message.
    let path =
        install.applied("MutatingWebhookConfiguration")[0]["webhooks"][1]["clientConfig"]["url"]
            .as_str()
            .unwrap()
            .split_once(&format!("127.0.0.1:{port}"))
            .unwrap()
            .1
            .to_string();
    let (ok, stderr) = scenarios::kubectl_object(
        cp,
        &["create", "-f", "-"],
        &pod("down-ns", "refused", &["app"], json!({}), json!({})),
    );
    eprintln!("{stderr}");
    assert!(!ok);
    assert_eq!(
        stderr,
        format!(
            "Error from server (InternalError): error when creating \"STDIN\": Internal error \
             occurred: failed calling webhook \"namespace-label.restore-hooks.restore-hooks.dev\": \
             failed to call webhook: Post \"https://127.0.0.1:{port}{path}?timeout=5s\": dial tcp \
             127.0.0.1:{port}: connect: connection refused\n",
        )
    );
    assert!(get_pod(cp, "down-ns", "refused").is_none());

    // `helm upgrade --set webhook.failurePolicy=Ignore`: that pod is admitted without hooks too.
    let mut mwc = render(
        &install.certs.ca_bundle(),
        "1.37.2",
        &["--set".into(), "webhook.failurePolicy=Ignore".into()],
    )
    .into_iter()
    .find(|d| d.value["kind"] == "MutatingWebhookConfiguration")
    .unwrap()
    .value;
    point_webhooks_at(&mut mwc, port, &install.certs);
    assert!(
        mwc["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["failurePolicy"] == "Ignore")
    );
    apply_list(cp, &[mwc]);
    create_unhooked("down-ns", json!({}));

    // A replica leads again (the dead one's Lease runs out first) and reports them.
    let second = install.start(1);
    second.wait_leader(Duration::from_secs(60));
    for ns in ["down", "down-ns"] {
        let event = wait_until(
            format!("a RestoreHooksNotApplied Event on {ns}/unhooked"),
            // The leader looks every 30 s.
            Duration::from_secs(75),
            || {
                events_with(cp, ns, "unhooked", "RestoreHooksNotApplied")
                    .pop()
                    .ok_or_else(|| {
                        format!(
                            "unmutated pods reported: {}",
                            metric(
                                &second.controller().metrics(),
                                "restore_hooks_unmutated_pods_total"
                            )
                        )
                    })
            },
        );
        assert_eq!(event["type"], "Warning", "{event}");
        eprintln!("{ns}/unhooked: {}", event["message"]);
    }
    assert_eq!(
        metric(
            &second.controller().metrics(),
            "restore_hooks_unmutated_pods_total"
        ),
        2.0
    );
    second.assert_no_forbidden();
    first.assert_no_forbidden();
}
