//! The harness itself against the real binaries: each test starts its own control plane.
//! Timeouts are failure guards, never performance assertions.

use std::path::Path;
use std::time::Duration;

use realcp::{ControlPlane, NODE, Options, Velero};
use restore_hooks_testkit::wait_until;
use serde_json::{Value, json};

fn start(opts: Options) -> ControlPlane {
    ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e:#}"))
}

fn get_json(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let out = cp.kubectl(&args);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("kubectl -o json"))
}

fn pod(namespace: &str, name: &str) -> String {
    // No nodeName: the scheduler has to place it. The image is never pulled (kwok).
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "infinity"]}]},
    })
    .to_string()
}

fn wait_running(cp: &ControlPlane, namespace: &str, name: &str) -> Value {
    wait_until(
        format!("pod {namespace}/{name} Running"),
        Duration::from_secs(120),
        || {
            let p = get_json(cp, &["get", "pod", name, "-n", namespace])?;
            (p["status"]["phase"] == "Running").then_some(p)
        },
    )
}

fn sh(cp: &ControlPlane, namespace: &str, pod: &str, script: &str) -> std::process::Output {
    cp.kubectl(["exec", "-n", namespace, pod, "--", "sh", "-c", script])
}

#[test]
fn pods_and_statefulsets_are_scheduled_onto_kwok() {
    let cp = start(Options::default());
    let version = get_json(&cp, &["version"]).expect("kubectl version");
    assert_eq!(
        version["serverVersion"]["gitVersion"], "v1.37.2",
        "{version}"
    );
    assert_eq!(
        version["clientVersion"]["gitVersion"], "v1.37.2",
        "{version}"
    );

    cp.apply(&pod("default", "lonely")).unwrap();
    let p = wait_running(&cp, "default", "lonely");
    assert_eq!(p["spec"]["nodeName"], NODE);
    let ip = p["status"]["podIP"].as_str().unwrap_or_default();
    assert!(
        ip.starts_with("10.244."),
        "pod IP {ip:?} outside kwok's --cidr"
    );

    cp.apply(
        &json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
                },
            },
        })
        .to_string(),
    )
    .unwrap();
    wait_until(
        "StatefulSet web 2/2 ready",
        Duration::from_secs(120),
        || {
            let s = get_json(&cp, &["get", "statefulset", "web", "-n", "default"])?;
            (s["status"]["readyReplicas"] == 2).then_some(())
        },
    );
    for name in ["web-0", "web-1"] {
        let p = wait_running(&cp, "default", name);
        assert_eq!(p["spec"]["nodeName"], NODE);
    }
}

#[test]
fn exec_runs_on_the_host_through_the_apiserver() {
    let cp = start(Options::default());
    let dir = cp.pod_workdir("default", "shell").unwrap();
    cp.apply(&pod("default", "shell")).unwrap();
    cp.apply(&pod("default", "other")).unwrap();
    wait_running(&cp, "default", "shell");
    wait_running(&cp, "default", "other");

    // kwok picks the pod's Exec rule up through a watch: wait for it, not for a fixed time.
    let expected = format!("hello\n{}\n", dir.display());
    let stdout = wait_until(
        "exec in the pod's own work dir",
        Duration::from_secs(60),
        || {
            let out = sh(&cp, "default", "shell", "echo hello; pwd");
            assert!(out.status.success(), "exec failed: {out:?}");
            let stdout = String::from_utf8(out.stdout).unwrap();
            (stdout == expected).then_some(stdout)
        },
    );
    assert_eq!(stdout, expected);
    let out = sh(&cp, "default", "shell", "echo restored > marker");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("marker")).unwrap(),
        "restored\n"
    );

    let out = sh(&cp, "default", "other", "pwd");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        Path::new(String::from_utf8(out.stdout).unwrap().trim()),
        cp.default_exec_dir()
    );

    // kubectl's view of a non-zero exit through kwok.
    let out = sh(&cp, "default", "shell", "echo out; echo err >&2; exit 3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "kubectl exec `exit 3`: status {:?}, stdout {:?}, stderr {stderr:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(stderr.contains("exit status 3"), "{stderr}");

    // The Status object on the exec error channel, as a client library (the product's) gets it.
    let status = exec_status(&cp, "default", "shell", "echo out; exit 3");
    eprintln!(
        "pods/exec Status for `exit 3` through kwok:\n{}",
        serde_json::to_string_pretty(&status).unwrap()
    );
    // A real kubelet says {"status":"Failure","reason":"NonZeroExitCode","details":{"causes":
    // [{"reason":"ExitCode","message":"3"}]}}. kwok returns its exec error as an InternalError
    // whose message ends with Go's exec.ExitError text, and no ExitCode cause.
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "InternalError", "{status}");
    assert_eq!(status["code"], 500, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Internal error occurred: ") && message.ends_with(": exit status 3"),
        "{status}"
    );
    let causes = status["details"]["causes"]
        .as_array()
        .expect("details.causes");
    assert_eq!(causes.len(), 1, "{status}");
    assert!(causes[0].get("reason").is_none(), "{status}");
    let cause = causes[0]["message"].as_str().unwrap_or_default();
    assert!(cause.ends_with(": exit status 3"), "{status}");

    let ok = exec_status(&cp, "default", "shell", "true");
    assert_eq!(ok["status"], "Success", "{ok}");
}

/// With `service_proxy`, the API server's `cluster` egress goes through the harness's proxy:
/// exec still reaches kwok (a loopback address, passed through), a Service routed to a host
/// port is reached there, and a Service that is not routed is never dialed (its ClusterIP is a
/// private-range address): the proxy refuses it and the webhook call fails.
#[test]
fn the_egress_proxy_passes_loopback_routes_services_and_refuses_the_rest() {
    let cp = start(Options {
        service_proxy: true,
        ..Options::default()
    });
    cp.apply(&pod("default", "shell")).unwrap();
    wait_running(&cp, "default", "shell");
    let before = cp.egress_tunnels(None);
    let out = sh(&cp, "default", "shell", "echo through-the-proxy");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through-the-proxy\n");
    assert!(
        cp.egress_tunnels(None) > before,
        "exec did not go through the proxy"
    );

    // A webhook behind a Service with no route: failurePolicy Fail rejects the pod.
    cp.apply(
        &json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "nowhere", "namespace": "default"},
            "spec": {"ports": [{"port": 443, "targetPort": 8443}]},
        })
        .to_string(),
    )
    .unwrap();
    let ip = get_json(&cp, &["get", "service", "nowhere", "-n", "default"]).unwrap()["spec"]
        ["clusterIP"]
        .as_str()
        .unwrap()
        .to_string();
    cp.apply(
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "nowhere"},
            "webhooks": [{
                "name": "nowhere.realcp.test",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"service": {"name": "nowhere", "namespace": "default",
                                             "port": 443, "path": "/"}},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"]}],
                "objectSelector": {"matchLabels": {"webhook": "nowhere"}},
            }],
        })
        .to_string(),
    )
    .unwrap();
    let mut refused: Value = serde_json::from_str(&pod("default", "refused")).unwrap();
    refused["metadata"]["labels"]["webhook"] = json!("nowhere");
    let refused = refused.to_string();
    let err = wait_until(
        "the webhook configuration to take effect",
        Duration::from_secs(60),
        || cp.kubectl_stdin(["create", "-f", "-"], &refused).err(),
    );
    assert!(
        format!("{err:#}").contains("failed calling webhook"),
        "{err:#}"
    );
    let target = format!("{ip}:443");
    assert!(
        cp.egress_refused()
            .iter()
            .any(|r| r.starts_with(&format!("{target}: neither routed"))),
        "{:?}",
        cp.egress_refused()
    );

    // Routed to a port on this host, the same Service is dialed there (nothing listens: the
    // call fails on the connection, not on the proxy's refusal).
    let port = realcp::free_port().unwrap();
    let routed = cp.route_service("default", "nowhere", 443, port).unwrap();
    assert_eq!(routed.to_string(), target);
    let err = cp
        .kubectl_stdin(["create", "-f", "-"], &refused)
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("failed calling webhook"),
        "{err:#}"
    );
    assert!(cp.egress_tunnels(Some(routed)) > 0);
    assert!(
        cp.egress_refused()
            .iter()
            .any(|r| r.starts_with(&format!("{target} -> 127.0.0.1:{port}: "))),
        "{:?}",
        cp.egress_refused()
    );
    // The API server resolves a Service port it does not have to nothing: so does the route.
    assert!(cp.route_service("default", "nowhere", 444, port).is_err());
}

/// Runs `sh -c script` through pods/exec with kube-rs and returns the Status from the error
/// channel as JSON.
fn exec_status(cp: &ControlPlane, namespace: &str, pod: &str, script: &str) -> Value {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, AttachParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};

    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(cp.kubeconfig()).unwrap(),
            &KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let mut attached = pods
            .exec(
                pod,
                ["sh", "-c", script],
                &AttachParams::default().stdout(true).stderr(true),
            )
            .await
            .unwrap();
        let status = attached.take_status().unwrap();
        let mut stdout = attached.stdout().unwrap();
        let mut sink = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut sink)
            .await
            .unwrap();
        let status = tokio::time::timeout(Duration::from_secs(60), status)
            .await
            .expect("no Status on the exec error channel");
        attached.join().await.unwrap();
        serde_json::to_value(status.expect("exec ended without a Status")).unwrap()
    })
}

#[test]
fn service_account_tokens_authenticate_and_rbac_denies_the_rest() {
    let cp = start(Options::default());
    cp.apply(
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "reader", "namespace": "default"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "pod-reader", "namespace": "default"},
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "reader", "namespace": "default"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
             "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]},
        ]})
        .to_string(),
    )
    .unwrap();
    let token = cp
        .token_for_service_account("default", "reader", Duration::from_secs(3600))
        .unwrap();
    let kc = cp.kubeconfig_for_token(&token).unwrap();

    let who = cp.kubectl_as(&kc, ["auth", "whoami", "-o", "json"]);
    assert!(who.status.success(), "{who:?}");
    let who: Value = serde_json::from_slice(&who.stdout).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "system:serviceaccount:default:reader"
    );

    let allowed = cp.kubectl_as(&kc, ["get", "pods", "-n", "default"]);
    assert!(allowed.status.success(), "{allowed:?}");
    for denied in [
        &["get", "secrets", "-n", "default"][..],
        &["get", "pods", "-n", "kube-system"],
        &["delete", "pod", "anything", "-n", "default"],
    ] {
        let out = cp.kubectl_as(&kc, denied);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{denied:?} was allowed");
        assert!(stderr.contains("Forbidden"), "{denied:?}: {stderr}");
    }

    let bogus = cp.kubeconfig_for_token("not-a-token").unwrap();
    let out = cp.kubectl_as(&bogus, ["get", "pods"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{out:?}"
    );
}

#[test]
fn emulates_kubernetes_1_34() {
    let cp = start(Options {
        emulated_version: Some("1.34".into()),
        ..Options::default()
    });
    let out = cp.kubectl_ok(["get", "--raw", "/version"]).unwrap();
    let version: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(version["gitVersion"], "v1.37.2", "{version}");
    assert_eq!(version["emulationMajor"], "1", "{version}");
    assert_eq!(version["emulationMinor"], "34", "{version}");
    cp.apply(&pod("default", "old")).unwrap();
    wait_running(&cp, "default", "old");
}

/// The floor's kube-apiserver is the real binary of that version (no emulation), the v1.37
/// controller-manager and scheduler work against it, and a restart runs the same binary again.
#[test]
fn runs_the_floor_apiserver_and_restarts_the_same_binary() {
    let floor = realcp::floor_version().unwrap();
    let cp = start(Options {
        apiserver: realcp::ApiServer::Floor,
        ..Options::default()
    });
    let version = || -> Value {
        serde_json::from_str(&cp.kubectl_ok(["get", "--raw", "/version"]).unwrap()).unwrap()
    };
    let v = version();
    assert_eq!(v["gitVersion"], format!("v{floor}"), "{v}");
    assert_ne!(v["gitVersion"], "v1.37.2", "{v}");
    assert_eq!(v["minor"], floor.split('.').nth(1).unwrap(), "{v}");
    // Scheduled by the emulating scheduler, Running through kwok: the v1.37 components work
    // against it.
    cp.apply(&pod("default", "on-floor")).unwrap();
    wait_running(&cp, "default", "on-floor");
    cp.kill_apiserver().unwrap();
    cp.start_apiserver().unwrap();
    let v = version();
    assert_eq!(v["gitVersion"], format!("v{floor}"), "{v}");
}

#[test]
fn the_floor_apiserver_emulates_nothing() {
    let err = ControlPlane::start(Options {
        apiserver: realcp::ApiServer::Floor,
        emulated_version: Some("1.35".into()),
        ..Options::default()
    })
    .err()
    .expect("a floor apiserver with an emulated version started");
    let err = format!("{err:#}");
    assert!(
        err.contains("emulated_version") && err.contains("ApiServer::Floor"),
        "{err}"
    );
}

/// `kill_apiserver` then `start_apiserver`: the same etcd (objects kept), port and credentials;
/// the scheduler and kwok reconnect on their own, and exec through it works again.
#[test]
fn the_apiserver_starts_again_on_the_same_etcd_and_port() {
    let cp = start(Options::default());
    cp.apply(&pod("default", "before")).unwrap();
    wait_running(&cp, "default", "before");
    cp.kill_apiserver().unwrap();
    assert!(cp.kill_apiserver().is_err(), "killed twice");
    assert!(
        !cp.kubectl(["get", "--raw", "/readyz"]).status.success(),
        "kube-apiserver still answers after SIGKILL"
    );
    cp.start_apiserver().unwrap_or_else(|e| panic!("{e:#}"));
    assert!(cp.start_apiserver().is_err(), "started twice");
    assert!(get_json(&cp, &["get", "pod", "before", "-n", "default"]).is_some());
    cp.apply(&pod("default", "after")).unwrap();
    wait_running(&cp, "default", "after");
    // kwok's exec rules and its connection to the API server survived the restart.
    let out = wait_until("exec after the restart", Duration::from_secs(60), || {
        let out = sh(&cp, "default", "after", "echo again");
        out.status.success().then_some(out)
    });
    assert_eq!(String::from_utf8_lossy(&out.stdout), "again\n");
}

#[test]
fn velero_backup_delete_restore_round_trip() {
    let cp = start(Options::default());
    let velero = Velero::start(&cp).unwrap_or_else(|e| panic!("{e:#}"));
    cp.kubectl_ok(["create", "namespace", "demo"]).unwrap();
    wait_until(
        "ServiceAccount demo/default",
        Duration::from_secs(60),
        || {
            cp.kubectl(["get", "sa", "default", "-n", "demo"])
                .status
                .success()
                .then_some(())
        },
    );
    cp.apply(&pod("demo", "app")).unwrap();
    let before = wait_running(&cp, "demo", "app");

    let phase = |kind: &str, name: &str| {
        cp.kubectl_ok([
            "get",
            kind,
            name,
            "-n",
            Velero::NAMESPACE,
            "-o",
            "jsonpath={.status.phase}",
        ])
        .unwrap()
    };
    velero
        .velero_ok([
            "backup",
            "create",
            "b1",
            "--include-namespaces",
            "demo",
            "--wait",
        ])
        .unwrap();
    assert_eq!(phase("backups.velero.io", "b1"), "Completed");

    cp.kubectl_ok([
        "delete",
        "namespace",
        "demo",
        "--wait=true",
        "--timeout=180s",
    ])
    .unwrap();

    velero
        .velero_ok(["restore", "create", "r1", "--from-backup", "b1", "--wait"])
        .unwrap();
    let restore_phase = phase("restores.velero.io", "r1");
    if restore_phase != "Completed" {
        let described = velero.velero(["restore", "describe", "r1", "--details"]);
        let logs = velero.velero(["restore", "logs", "r1"]);
        panic!(
            "restore r1 is {restore_phase}\n{}\n{}",
            String::from_utf8_lossy(&described.stdout),
            String::from_utf8_lossy(&logs.stdout)
        );
    }
    let after = wait_running(&cp, "demo", "app");
    assert_ne!(
        before["metadata"]["uid"], after["metadata"]["uid"],
        "the pod was restored, not left behind"
    );
    assert_eq!(after["metadata"]["labels"]["velero.io/restore-name"], "r1");
}

#[test]
fn a_component_that_fails_to_start_is_named_with_its_log() {
    let err = ControlPlane::start(Options {
        apiserver_args: vec!["--no-such-flag".into()],
        ..Options::default()
    })
    .err()
    .expect("an apiserver with an unknown flag started");
    let err = format!("{err:#}");
    eprintln!("{err}");
    assert!(err.contains("kube-apiserver exited"), "{err}");
    assert!(err.contains("unknown flag: --no-such-flag"), "{err}");
}

#[test]
fn host_processes_get_a_clean_environment_and_die_with_their_handle() {
    use realcp::{HostCommand, HostProcess};

    let dir = tempfile::tempdir().unwrap();
    let cmd = HostCommand::new("env", "/bin/sh", dir.path(), dir.path().join("env.log"))
        .args(["-c", "env"])
        .clear_env()
        .env("ONLY", "this");
    let mut p = HostProcess::spawn(&cmd).unwrap();
    assert!(p.wait_exit(Duration::from_secs(30)).unwrap().success());
    let env = p.log();
    assert!(env.contains("ONLY=this"), "{env}");
    assert!(
        !env.contains("HOME="),
        "the test's environment leaked in: {env}"
    );

    // A process and what it forked are gone once the handle is dropped.
    let cmd = HostCommand::new(
        "sleeper",
        "/bin/sh",
        dir.path(),
        dir.path().join("sleep.log"),
    )
    .args(["-c", "sleep 300 & echo $!; wait"]);
    let p = HostProcess::spawn(&cmd).unwrap();
    let pid = p.pid();
    let child = wait_until("the forked sleep", Duration::from_secs(30), || {
        p.log().trim().parse::<u32>().ok()
    });
    drop(p);
    for gone in [pid, child] {
        wait_until(format!("pid {gone} gone"), Duration::from_secs(30), || {
            let status =
                std::fs::read_to_string(format!("/proc/{gone}/status")).unwrap_or_default();
            // Gone, or a zombie nobody reaps yet.
            (status.is_empty() || status.contains("State:\tZ")).then_some(())
        });
    }
}

#[test]
fn prometheus_scrapes_evaluates_rules_and_answers_promql() {
    use realcp::Prometheus;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        "groups:\n- name: g\n  interval: 1s\n  rules:\n  - alert: SelfScraped\n    expr: up{job=\"self\"} == 1\n",
    )
    .unwrap();
    // A second Prometheus scrapes the first (a port is known only once it started).
    let first = Prometheus::start(&dir.path().join("first"), "global: {}\n").unwrap();
    let config = json!({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [dir.path().join("rules.yaml")],
        "scrape_configs": [{"job_name": "self", "static_configs": [{"targets": [format!("127.0.0.1:{}", first.port())]}]}],
    });
    let prom = Prometheus::start(&dir.path().join("second"), &config.to_string()).unwrap();
    let firing = wait_until(
        "the alert on the scraped target",
        Duration::from_secs(60),
        || {
            let alerts = prom.api("alerts", &[]).unwrap();
            alerts["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["state"] == "firing")
                .cloned()
        },
    );
    assert_eq!(firing["labels"]["alertname"], "SelfScraped", "{firing}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let range = prom
        .query_range("sum by (job) (up)", now - 60.0, now, 1.0)
        .unwrap();
    assert_eq!(range["resultType"], "matrix", "{range}");
    assert_eq!(range["result"][0]["metric"]["job"], "self", "{range}");
    // PromQL errors come back as errors, with Prometheus' message.
    let err = format!("{:#}", prom.query("sum(", now).unwrap_err());
    assert!(err.contains("bad_data"), "{err}");

    // A configuration it refuses: start fails with its log.
    let err = Prometheus::start(
        &dir.path().join("bad"),
        "scrape_configs: [{job_name: 1s}]\nno_such_field: 1\n",
    )
    .err()
    .expect("prometheus started on a bad configuration");
    let err = format!("{err:#}");
    assert!(err.contains("prometheus exited"), "{err}");
    assert!(err.contains("no_such_field"), "{err}");
}
