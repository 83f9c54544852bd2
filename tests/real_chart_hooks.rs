//! The chart's `helm test` hook on a real kube-apiserver (e2e/realcp): `restore-hooks
//! check-webhook`, with the arguments the chart renders and under exactly the test's own RBAC,
//! passes against the installed webhook, and fails, naming what is missing, when the API server
//! admits the dry-run pod without it. (The pre-delete hook's `restore-hooks remove-webhook` runs
//! on a real API server in .ci/chart-apiserver-checks.sh.)

mod real;

use std::process::{Command, Output};

use real::*;
use serde_json::Value;

const TEMPLATE: &str = "templates/tests/check-webhook.yaml";

fn check_webhook(args: &[String], kubeconfig: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_restore-hooks"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("cannot run restore-hooks")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn helm_test_proves_the_installed_webhook_mutates_a_dry_run_restored_pod() {
    let install = Install::default_chart();
    let _serve = install.start(0);
    let cp = &install.cp;

    // What `helm test` creates before its pod: the namespace, ServiceAccount, Role and binding.
    let hook = render_hook(TEMPLATE);
    let (pods, rest): (Vec<Value>, Vec<Value>) = hook.into_iter().partition(|d| d["kind"] == "Pod");
    apply_list(cp, &rest);
    let pod = &pods[0];
    let sa = pod["spec"]["serviceAccountName"].as_str().unwrap();
    let args: Vec<String> = pod["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let test_ns = args
        .iter()
        .find_map(|a| a.strip_prefix("--namespace="))
        .expect("the test pod names its namespace")
        .to_string();
    let kubeconfig = install.kubeconfig_for(sa);

    let out = check_webhook(&args, &kubeconfig);
    assert!(
        out.status.success(),
        "check-webhook must pass against the installed webhook: exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("the webhook mutated a dry-run restored pod"),
        "{}",
        text(&out.stdout)
    );
    // A dry run stores nothing.
    let stored = get_json(cp, &["get", "pods", "-n", &test_ns]).unwrap();
    assert_eq!(stored["items"], serde_json::json!([]), "no pod was stored");

    // The test's Role reaches its namespace only.
    let mut elsewhere = args.clone();
    for a in &mut elsewhere {
        if a.starts_with("--namespace=") {
            *a = format!("--namespace={NAMESPACE}");
        }
    }
    let out = check_webhook(&elsewhere, &kubeconfig);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("forbidden") && text(&out.stderr).contains("create pods"),
        "{}",
        text(&out.stderr)
    );

    // Without the webhook configuration the API server admits the pod as it is: the check fails
    // and says what is missing.
    let mwc = install.applied("MutatingWebhookConfiguration")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let deleted = cp.kubectl(["delete", "mutatingwebhookconfiguration", mwc.as_str()]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let out = check_webhook(&args, &kubeconfig);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for missing in [
        "no init container check-webhook-init",
        "no annotation restore-hooks.dev/plan",
        "label restore-hooks.dev/restore-run is None, want \"restore-hooks-check-webhook\"",
    ] {
        assert!(stderr.contains(missing), "{missing:?} not in: {stderr}");
    }
}
