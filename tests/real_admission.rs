//! The admission chain on a real kube-apiserver (e2e/realcp): the chart's two webhooks as
//! rendered, reinvocation with another mutating webhook, denials as kubectl prints them, and
//! what happens while the webhook is down (failurePolicy Fail and Ignore).

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

/// The webhook down: with `failurePolicy: Fail` (the chart's default) restored pods are refused
/// with the API server's message; with `Ignore` they are admitted unmutated, and once a replica
/// leads again it reports them (Event, metric).
#[test]
fn while_the_webhook_is_down_fail_refuses_and_ignore_is_reported() {
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
    first.kill();

    // failurePolicy: Fail. Both webhooks, each with the API server's own message.
    let port = install.webhook_port;
    let path = |w: usize| {
        install.applied("MutatingWebhookConfiguration")[0]["webhooks"][w]["clientConfig"]["url"]
            .as_str()
            .unwrap()
            .split_once(&format!("127.0.0.1:{port}"))
            .unwrap()
            .1
            .to_string()
    };
    for (ns, labels, webhook, w) in [
        ("down", json!({RESTORE_LABEL: "r-down"}), "pod-label", 0),
        ("down-ns", json!({}), "namespace-label", 1),
    ] {
        let (ok, stderr) = scenarios::kubectl_object(
            cp,
            &["create", "-f", "-"],
            &pod(ns, "refused", &["app"], labels, json!({})),
        );
        eprintln!("{stderr}");
        assert!(!ok);
        assert_eq!(
            stderr,
            format!(
                "Error from server (InternalError): error when creating \"STDIN\": Internal error \
                 occurred: failed calling webhook \"{webhook}.restore-hooks.restore-hooks.dev\": \
                 failed to call webhook: Post \"https://127.0.0.1:{port}{}?timeout=5s\": dial tcp \
                 127.0.0.1:{port}: connect: connection refused\n",
                path(w)
            )
        );
        assert!(get_pod(cp, ns, "refused").is_none());
    }

    // failurePolicy: Ignore, as `helm upgrade --set webhook.failurePolicy=Ignore` sets it.
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
    for (ns, labels) in [
        ("down", json!({RESTORE_LABEL: "r-down"})),
        ("down-ns", json!({})),
    ] {
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
    }

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
