//! The Helm chart, rendered with the pinned helm (`.ci/install-tools.sh`): its CRDs are exactly
//! what the binary generates and are templates (so `helm upgrade` upgrades them), per-Deployment
//! pod settings and their precedence, `webhook.hostNetwork`, and values-openshift.yaml against
//! the rules of OpenShift's restricted-v2 SCC (docs/openshift.md).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("charts/restore-hooks")
}

/// The pinned helm. Missing, the test fails, naming the fix.
fn helm() -> PathBuf {
    let helm = std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".tools/helm/helm"));
    assert!(
        helm.is_file(),
        "{} is missing: these tests render the chart with the pinned helm; run \
         `bash .ci/install-tools.sh` (or set HELM)",
        helm.display()
    );
    helm
}

/// `helm template restore-hooks charts/restore-hooks -n restore-hooks ARGS`, hooks included (as
/// `helm template` prints them): every rendered object.
fn render(args: &[&str]) -> Vec<Value> {
    let out = Command::new(helm())
        .args(["template", "restore-hooks"])
        .arg(chart())
        .args(["-n", "restore-hooks", "--kube-version", "1.35.0"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("cannot run helm");
    assert!(
        out.status.success(),
        "helm template {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut docs = Vec::new();
    for piece in format!("\n{text}").split("\n---") {
        let value: Value = yaml_serde::from_str(piece).expect("helm output is YAML");
        if !value.is_null() {
            docs.push(value);
        }
    }
    docs
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} rendered"))
}

/// Every pod spec of the render, named `Kind/name`: Deployments', Jobs', and Pods (hooks
/// included).
fn pod_specs(docs: &[Value]) -> Vec<(String, &Value)> {
    docs.iter()
        .filter_map(|d| {
            let kind = d["kind"].as_str()?;
            let spec = match kind {
                "Deployment" | "Job" | "DaemonSet" | "StatefulSet" | "ReplicaSet" => {
                    &d["spec"]["template"]["spec"]
                }
                "Pod" => &d["spec"],
                _ => return None,
            };
            Some((format!("{kind}/{}", d["metadata"]["name"].as_str()?), spec))
        })
        .collect()
}

#[test]
fn chart_crds_match_the_generated_crds() {
    let chart = chart();
    // crds/ is what Helm installs once and never upgrades: the CRDs are templates now.
    assert!(
        !chart.join("crds").exists(),
        "charts/restore-hooks/crds/ must not exist: Helm never upgrades it; the CRDs live in \
         files/crds/ and templates/crds.yaml renders them"
    );
    let dir = chart.join("files/crds");
    let mut expected = Vec::new();
    for crd in restore_hooks::crd::all() {
        let name = restore_hooks::crd::file_name(&crd);
        expected.push(name.clone());
        let path = dir.join(&name);
        let in_chart = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let generated = restore_hooks::crd::yaml(&crd);
        if in_chart != generated {
            let line = in_chart
                .lines()
                .zip(generated.lines())
                .position(|(a, b)| a != b)
                .map_or_else(
                    || {
                        format!(
                            "lengths differ ({} vs {} lines)",
                            in_chart.lines().count(),
                            generated.lines().count()
                        )
                    },
                    |i| format!("first difference at line {}", i + 1),
                );
            panic!(
                "{} is out of date ({line}); regenerate the chart's CRDs with `.ci/gen-crds.sh`",
                path.display()
            );
        }
    }
    // Nothing else in files/crds/: a CRD the binary no longer defines must not linger.
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(
        present, expected,
        "charts/restore-hooks/files/crds holds exactly the generated CRDs"
    );
}

/// The CRDs are part of the release (so `helm upgrade` applies their new schema), rendered from
/// files/crds/ unchanged but for the chart's labels and the keep policy; crds.enabled=false
/// renders none, crds.keep=false drops the policy.
#[test]
fn crds_are_release_objects_kept_on_uninstall() {
    let generated: Vec<Value> = restore_hooks::crd::all()
        .iter()
        .map(|c| yaml_serde::from_str(&restore_hooks::crd::yaml(c)).unwrap())
        .collect();
    let docs = render(&[]);
    for want in &generated {
        let name = want["metadata"]["name"].as_str().unwrap();
        let mut got = named(&docs, "CustomResourceDefinition", name).clone();
        let md = got["metadata"].as_object_mut().unwrap();
        let labels = md.remove("labels").unwrap_or_default();
        let annotations = md.remove("annotations").unwrap_or_default();
        assert_eq!(
            &got, want,
            "rendered CRD {name} differs from `restore-hooks crd`"
        );
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{name}");
        assert_eq!(
            labels["app.kubernetes.io/instance"], "restore-hooks",
            "{name}"
        );
        assert_eq!(
            annotations,
            json!({"helm.sh/resource-policy": "keep"}),
            "{name}: crds.keep (default true)"
        );
    }
    let count = |docs: &[Value]| {
        docs.iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .count()
    };
    assert_eq!(count(&docs), generated.len());
    assert_eq!(count(&render(&["--set", "crds.enabled=false"])), 0);
    let unkept = render(&["--set", "crds.keep=false"]);
    assert!(
        unkept
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .all(|d| d["metadata"].get("annotations").is_none()),
        "crds.keep=false: no resource policy"
    );
}

/// The top-level resources, nodeSelector, tolerations, affinity and priorityClassName apply to
/// both Deployments (values files written before the per-component keys keep working); a
/// non-empty webhook.* / controller.* key replaces it for that Deployment only, and the single
/// `serve` Deployment reads webhook.*.
#[test]
fn per_deployment_settings_replace_the_top_level_ones() {
    let shared = [
        "--set",
        "nodeSelector.pool=system",
        "--set",
        "tolerations[0].key=CriticalAddonsOnly",
        "--set",
        "tolerations[0].operator=Exists",
        "--set",
        "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
        "--set",
        "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key=a",
        "--set",
        "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].operator=Exists",
    ];
    let spec = |docs: &[Value], name: &str| {
        named(docs, "Deployment", name)["spec"]["template"]["spec"].clone()
    };

    // Top level only: both Deployments get it.
    let docs = render(&shared);
    for name in ["restore-hooks-webhook", "restore-hooks-controller"] {
        let s = spec(&docs, name);
        assert_eq!(s["nodeSelector"], json!({"pool": "system"}), "{name}");
        assert_eq!(s["tolerations"][0]["key"], "CriticalAddonsOnly", "{name}");
        assert!(s["affinity"].get("nodeAffinity").is_some(), "{name}");
        assert!(
            s["affinity"].get("podAntiAffinity").is_none(),
            "{name}: an affinity replaces the default anti-affinity"
        );
        assert_eq!(s["priorityClassName"], "system-cluster-critical", "{name}");
        assert_eq!(
            s["containers"][0]["resources"],
            json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}),
            "{name}"
        );
    }

    // Per component: replaces (not merges) for that Deployment only.
    let mut args = shared.to_vec();
    args.extend([
        "--set",
        "controller.resources.limits.memory=1Gi",
        "--set",
        "controller.nodeSelector.pool=batch",
        "--set",
        "controller.priorityClassName=restore-hooks-controller",
        "--set",
        "webhook.tolerations[0].key=webhook-only",
        "--set",
        "webhook.tolerations[0].operator=Exists",
        "--set",
        "webhook.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey=topology.kubernetes.io/zone",
        "--set",
        "webhook.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchLabels.app=x",
    ]);
    let docs = render(&args);
    let controller = spec(&docs, "restore-hooks-controller");
    assert_eq!(
        controller["containers"][0]["resources"],
        json!({"limits": {"memory": "1Gi"}}),
        "controller.resources replaces the top-level resources whole"
    );
    assert_eq!(controller["nodeSelector"], json!({"pool": "batch"}));
    assert_eq!(controller["priorityClassName"], "restore-hooks-controller");
    assert_eq!(controller["tolerations"][0]["key"], "CriticalAddonsOnly");
    assert!(controller["affinity"].get("nodeAffinity").is_some());
    let webhook = spec(&docs, "restore-hooks-webhook");
    assert_eq!(
        webhook["containers"][0]["resources"]["limits"]["memory"],
        "256Mi"
    );
    assert_eq!(webhook["nodeSelector"], json!({"pool": "system"}));
    assert_eq!(webhook["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        webhook["tolerations"],
        json!([{"key": "webhook-only", "operator": "Exists"}])
    );
    assert!(webhook["affinity"].get("nodeAffinity").is_none());
    assert_eq!(
        webhook["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
            ["topologyKey"],
        "topology.kubernetes.io/zone"
    );

    // The quota admits both classes.
    args.extend(["--set", "priorityClassQuota.enabled=true"]);
    let docs = render(&args);
    let quota = named(&docs, "ResourceQuota", "restore-hooks-priority-class");
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"],
        json!(["system-cluster-critical", "restore-hooks-controller"])
    );

    // split.enabled=false: the one Deployment reads webhook.*, never controller.*.
    let docs = render(&[
        "--set",
        "split.enabled=false",
        "--set",
        "webhook.resources.limits.memory=512Mi",
        "--set",
        "controller.resources.limits.memory=1Gi",
    ]);
    let serve = spec(&docs, "restore-hooks");
    assert_eq!(
        serve["containers"][0]["resources"],
        json!({"limits": {"memory": "512Mi"}})
    );
}

/// webhook.hostNetwork: the webhook pods (only) on the node's network, resolving cluster names,
/// listening on the configured ports, replaced one at a time.
#[test]
fn host_network_webhook() {
    let docs = render(&[
        "--set",
        "webhook.hostNetwork=true",
        "--set",
        "webhook.port=10270",
        "--set",
        "metrics.port=10271",
        "--set",
        "podAntiAffinity=soft",
    ]);
    let webhook = &named(&docs, "Deployment", "restore-hooks-webhook")["spec"];
    let pod = &webhook["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    let c = &pod["containers"][0];
    assert_eq!(
        c["ports"],
        json!([
            {"name": "https", "containerPort": 10270, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 10271, "protocol": "TCP"}
        ])
    );
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--listen=0.0.0.0:10270"), "{args:?}");
    assert!(args.contains(&"--admin-listen=0.0.0.0:10271"), "{args:?}");
    // A surge pod would find the port taken on every node that runs an old one.
    assert_eq!(
        webhook["strategy"]["rollingUpdate"],
        json!({"maxSurge": 0, "maxUnavailable": 1})
    );
    let controller = &named(&docs, "Deployment", "restore-hooks-controller")["spec"];
    assert_eq!(controller["template"]["spec"]["hostNetwork"], false);
    assert!(controller["template"]["spec"].get("dnsPolicy").is_none());
    assert_eq!(
        controller["strategy"]["rollingUpdate"],
        json!({"maxSurge": 1, "maxUnavailable": 0}),
        "the controller keeps podAntiAffinity=soft's surge"
    );
    // The Service still targets the named port.
    let svc = named(&docs, "Service", "restore-hooks");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "https");

    let single = render(&[
        "--set",
        "split.enabled=false",
        "--set",
        "webhook.hostNetwork=true",
    ]);
    assert_eq!(
        named(&single, "Deployment", "restore-hooks")["spec"]["template"]["spec"]["hostNetwork"],
        true,
        "the single serve Deployment serves the webhook"
    );
}

// ------------------------------------------------------------------------------------------
// OpenShift's restricted-v2 SCC, as OpenShift's documentation states its rules.

/// Volume types restricted-v2 admits (of those a chart would render).
const SCC_VOLUMES: [&str; 6] = [
    "configMap",
    "downwardAPI",
    "emptyDir",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Every way `pod` (a pod spec named `what`) would be refused by restricted-v2, or run outside
/// what the SCC assigns:
/// - runAsUser, fsGroup and supplementalGroups must be left unset: restricted-v2 assigns them
///   from the namespace's range (MustRunAsRange / MustRunAs), and a fixed value such as the
///   image's 65532 lies outside it. runAsGroup too: the chart's own rule, so the process runs
///   with the group OpenShift gives arbitrary UIDs;
/// - runAsNonRoot true, allowPrivilegeEscalation false, capabilities drop ALL (add at most
///   NET_BIND_SERVICE), not privileged;
/// - seccomp: RuntimeDefault only (runtime/default is the one profile restricted-v2 allows);
/// - no hostNetwork, hostPID, hostIPC, hostPort; volumes only of [`SCC_VOLUMES`] (no hostPath);
/// - no system-cluster-critical or system-node-critical priority class (OpenShift admits them
///   only in kube-system and openshift-* namespaces).
fn restricted_v2_violations(what: &str, pod: &Value) -> Vec<String> {
    let mut v = Vec::new();
    let psc = &pod["securityContext"];
    for f in ["runAsUser", "runAsGroup", "fsGroup"] {
        if let Some(x) = psc.get(f) {
            v.push(format!(
                "{what}: securityContext.{f} is fixed ({x}), the SCC must assign it"
            ));
        }
    }
    if psc
        .get("supplementalGroups")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty())
    {
        v.push(format!(
            "{what}: securityContext.supplementalGroups is fixed, the SCC must assign it"
        ));
    }
    for f in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[f] == true {
            v.push(format!("{what}: {f}"));
        }
    }
    if let Some(class) = pod["priorityClassName"].as_str()
        && matches!(class, "system-cluster-critical" | "system-node-critical")
    {
        v.push(format!(
            "{what}: priorityClassName {class} (only kube-system and openshift-* namespaces)"
        ));
    }
    let seccomp_ok = |sc: &Value| {
        sc.get("seccompProfile")
            .is_none_or(|p| p["type"] == "RuntimeDefault")
    };
    if !seccomp_ok(psc) {
        v.push(format!(
            "{what}: pod seccompProfile {}",
            psc["seccompProfile"]
        ));
    }
    for vol in pod["volumes"].as_array().into_iter().flatten() {
        let types: Vec<&str> = vol
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|k| *k != "name")
            .collect();
        if types.iter().any(|t| !SCC_VOLUMES.contains(t)) {
            v.push(format!("{what}: volume {} of type {types:?}", vol["name"]));
        }
    }
    let containers = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod[*k].as_array().into_iter().flatten());
    for c in containers {
        let w = format!("{what} container {}", c["name"]);
        let sc = &c["securityContext"];
        for f in ["runAsUser", "runAsGroup"] {
            if let Some(x) = sc.get(f) {
                v.push(format!(
                    "{w}: securityContext.{f} is fixed ({x}), the SCC must assign it"
                ));
            }
        }
        if sc
            .get("runAsNonRoot")
            .or_else(|| psc.get("runAsNonRoot"))
            .and_then(Value::as_bool)
            != Some(true)
        {
            v.push(format!("{w}: runAsNonRoot is not true"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            v.push(format!("{w}: allowPrivilegeEscalation is not false"));
        }
        if sc["privileged"] == true {
            v.push(format!("{w}: privileged"));
        }
        let drop: Vec<&str> = sc["capabilities"]["drop"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !drop.contains(&"ALL") {
            v.push(format!("{w}: capabilities do not drop ALL"));
        }
        for add in sc["capabilities"]["add"].as_array().into_iter().flatten() {
            if add != "NET_BIND_SERVICE" {
                v.push(format!("{w}: adds capability {add}"));
            }
        }
        if !seccomp_ok(sc) {
            v.push(format!("{w}: seccompProfile {}", sc["seccompProfile"]));
        }
        for p in c["ports"].as_array().into_iter().flatten() {
            if p.get("hostPort").is_some() {
                v.push(format!("{w}: hostPort {}", p["hostPort"]));
            }
        }
    }
    v
}

/// With a NetworkPolicy, DNS must reach OpenShift's dns-default pods: port 5353, UDP and TCP, in
/// namespace openshift-dns.
fn openshift_dns_violations(docs: &[Value]) -> Vec<String> {
    let mut v = Vec::new();
    for np in docs.iter().filter(|d| d["kind"] == "NetworkPolicy") {
        let name = np["metadata"]["name"].as_str().unwrap_or_default();
        let allows = np["spec"]["egress"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|rule| {
                let to_dns = rule["to"].as_array().into_iter().flatten().any(|peer| {
                    peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                        == "openshift-dns"
                });
                let ports: BTreeSet<(i64, &str)> = rule["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| Some((p["port"].as_i64()?, p["protocol"].as_str()?)))
                    .collect();
                to_dns && ports.contains(&(5353, "UDP")) && ports.contains(&(5353, "TCP"))
            });
        if !allows {
            v.push(format!(
                "NetworkPolicy/{name}: no egress to namespace openshift-dns on 5353 UDP and TCP"
            ));
        }
    }
    v
}

fn openshift_violations(docs: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = pod_specs(docs)
        .into_iter()
        .flat_map(|(what, pod)| restricted_v2_violations(&what, pod))
        .collect();
    v.extend(openshift_dns_violations(docs));
    v
}

fn openshift_values() -> String {
    chart()
        .join("values-openshift.yaml")
        .to_string_lossy()
        .into_owned()
}

/// values-openshift.yaml: every pod the chart renders (both Deployments, the single `serve`
/// Deployment, the `helm test` pod and the pre-delete Job) passes restricted-v2, and the
/// NetworkPolicy lets DNS through to openshift-dns; OADP's Velero namespace is configured.
#[test]
fn openshift_preset_pods_pass_restricted_v2() {
    let values = openshift_values();
    for extra in [
        &["--set", "networkPolicy.enabled=true"][..],
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "split.enabled=false",
        ][..],
    ] {
        let mut args = vec!["-f", values.as_str()];
        args.extend_from_slice(extra);
        let docs = render(&args);
        let pods: Vec<String> = pod_specs(&docs).into_iter().map(|(w, _)| w).collect();
        assert!(
            pods.iter().any(|p| p.starts_with("Job/"))
                && pods.iter().any(|p| p.starts_with("Pod/")),
            "the hooks' pods are checked too: {pods:?}"
        );
        let violations = openshift_violations(&docs);
        assert!(
            violations.is_empty(),
            "values-openshift.yaml {extra:?}: restricted-v2 would refuse:\n  {}",
            violations.join("\n  ")
        );
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            let args = d["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
            assert!(
                args.contains("--velero-namespace=openshift-adp")
                    && args.contains("--velero-service-account=velero"),
                "OADP runs Velero in openshift-adp as velero: {args}"
            );
        }
    }
}

/// The checker fails where it must: the default values fix runAsUser 65532 and use
/// system-cluster-critical, and their NetworkPolicy allows CoreDNS's port 53 in kube-system.
#[test]
fn default_values_violate_restricted_v2() {
    let docs = render(&["--set", "networkPolicy.enabled=true"]);
    let violations = openshift_violations(&docs);
    let has = |needle: &str| violations.iter().any(|v| v.contains(needle));
    assert!(
        has("Deployment/restore-hooks-webhook: securityContext.runAsUser is fixed (65532)"),
        "{violations:#?}"
    );
    assert!(
        has("Deployment/restore-hooks-controller: securityContext.fsGroup is fixed (65532)"),
        "{violations:#?}"
    );
    assert!(
        has("container \"restore-hooks\": securityContext.runAsUser is fixed (65532)"),
        "{violations:#?}"
    );
    assert!(
        has("priorityClassName system-cluster-critical"),
        "{violations:#?}"
    );
    assert!(
        has("no egress to namespace openshift-dns"),
        "{violations:#?}"
    );

    // And each rule on its own, on a pod that breaks only it.
    let ok = json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
        "volumes": [{"name": "t", "emptyDir": {}}]
    });
    assert!(restricted_v2_violations("ok", &ok).is_empty());
    let breaks: [(&str, Value); 10] = [
        ("hostNetwork", json!({"hostNetwork": true})),
        ("hostPID", json!({"hostPID": true})),
        (
            "hostPath",
            json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
        ),
        (
            "supplementalGroups",
            json!({"securityContext": {"runAsNonRoot": true, "supplementalGroups": [1000]}}),
        ),
        ("runAsNonRoot", json!({"securityContext": {}})),
        (
            "seccompProfile",
            json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "Unconfined"}}}),
        ),
        (
            "allowPrivilegeEscalation",
            json!({"containers": [{"name": "c", "securityContext": {"capabilities": {"drop": ["ALL"]}}}]}),
        ),
        (
            "drop ALL",
            json!({"containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false}}]}),
        ),
        (
            "adds capability",
            json!({"containers": [{"name": "c", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}}]}),
        ),
        (
            "priorityClassName",
            json!({"priorityClassName": "system-node-critical"}),
        ),
    ];
    for (rule, change) in breaks {
        let mut pod = ok.clone();
        for (k, x) in change.as_object().unwrap() {
            pod[k] = x.clone();
        }
        let v = restricted_v2_violations("pod", &pod);
        assert!(
            v.iter().any(|m| m.contains(rule)),
            "breaking {rule} must be a violation, got {v:?}"
        );
    }
}
