//! Scenarios shared by the Kubernetes 1.37 tests and the test on the oldest supported version
//! (real_k8s_floor): the chart as installed (scenario 1), the admission chain (3) and hooks exec'd
//! through the API server (4).

use std::time::Duration;

use serde_json::{Value, json};

use super::*;

/// The chart as installed and the product running under its ServiceAccount: every object the
/// render holds is on the API server as applied, the webhooks as the chart wrote them (only the
/// Service replaced by a URL), the policies type-checked, the aggregated roles aggregated, and
/// the server created its plan key, holds the Lease, compiled a hook object and ran a hook.
pub fn chart_as_installed(install: &Install, serve: &Replica) {
    let cp = &install.cp;

    // Every rendered object exists (kubectl get -f reads the manifests and fetches each).
    let list = json!({"apiVersion": "v1", "kind": "List", "items": install.applied});
    let live = cp
        .kubectl_stdin(["get", "-f", "-", "-o", "json"], &list.to_string())
        .unwrap_or_else(|e| panic!("an object of the chart is missing: {e:#}"));
    let live: Value = serde_json::from_str(&live).unwrap();
    let live = live["items"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| vec![live]);
    assert_eq!(live.len(), install.applied.len(), "kubectl get -f");
    let kinds: Vec<&str> = install
        .applied
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "Deployment",
        "Service",
    ] {
        assert!(kinds.contains(&kind), "the render has no {kind}: {kinds:?}");
    }

    // The webhooks as the chart rendered them: rules, selectors, matchConditions, policies.
    let applied = install.applied("MutatingWebhookConfiguration")[0];
    let name = applied["metadata"]["name"].as_str().unwrap();
    let server = get_json(cp, &["get", "mutatingwebhookconfiguration", name]).unwrap();
    let (want, got) = (
        applied["webhooks"].as_array().unwrap(),
        server["webhooks"].as_array().unwrap(),
    );
    assert_eq!(want.len(), 2, "the chart's two webhooks");
    assert_eq!(got.len(), want.len());
    for (w, g) in want.iter().zip(got) {
        for (key, value) in w.as_object().unwrap() {
            assert_eq!(&g[key], value, "webhook {}: {key}", w["name"]);
        }
        assert!(
            g["matchConditions"]
                .as_array()
                .is_some_and(|m| m.iter().any(|c| c["name"] == "exclude-mirror-pods")),
            "{g}"
        );
        assert_eq!(g["reinvocationPolicy"], "IfNeeded");
    }
    let names: Vec<&str> = got.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "pod-label.restore-hooks.restore-hooks.dev",
            "namespace-label.restore-hooks.restore-hooks.dev"
        ]
    );

    // The admission policies compiled and type-checked without warnings.
    for vap in install.applied("ValidatingAdmissionPolicy") {
        let name = vap["metadata"]["name"].as_str().unwrap();
        let live = get_json(cp, &["get", "validatingadmissionpolicy", name]).unwrap();
        let status = &live["status"];
        assert!(
            status["typeChecking"]["expressionWarnings"]
                .as_array()
                .is_none_or(Vec::is_empty),
            "{name}: {status}"
        );
        assert!(
            status["conditions"].as_array().is_none_or(Vec::is_empty),
            "{name}: {status}"
        );
    }

    // The aggregated roles: view reads RestoreHooks, edit writes them (the controller-manager's
    // clusterrole-aggregation controller folds the chart's roles in).
    for (role, verb) in [("view", "list"), ("edit", "create"), ("admin", "delete")] {
        wait_until(
            format!("ClusterRole {role} to include restorehooks {verb}"),
            Duration::from_secs(60),
            || {
                let r = get_json(cp, &["get", "clusterrole", role]).ok_or("no role")?;
                let has = r["rules"].as_array().into_iter().flatten().any(|rule| {
                    rule["resources"]
                        .as_array()
                        .is_some_and(|x| x.iter().any(|x| x == "restorehooks"))
                        && rule["verbs"]
                            .as_array()
                            .is_some_and(|x| x.iter().any(|x| x == verb))
                });
                has.then_some(()).ok_or_else(|| "not yet".to_string())
            },
        );
    }

    // The server made the plan-key Secret on its first start (the chart does not ship it).
    let key = wait_until("the plan-key Secret", Duration::from_secs(60), || {
        get_json(
            cp,
            &["get", "secret", "restore-hooks-plan-key", "-n", NAMESPACE],
        )
        .ok_or_else(|| "missing".to_string())
    });
    assert!(key["data"]["current"].is_string(), "{key}");
    // A backup must not carry the key (docs/behaviour.md §9.2).
    assert_eq!(
        key["metadata"]["labels"]["velero.io/exclude-from-backup"], "true",
        "{}",
        key["metadata"]
    );

    // It holds the Lease the chart names, as its pod.
    let lease_name = serve.controller().lease_name();
    wait_until("the Lease holder", Duration::from_secs(60), || {
        let lease =
            get_json(cp, &["get", "lease", &lease_name, "-n", NAMESPACE]).ok_or("no Lease")?;
        if lease["spec"]["holderIdentity"] == serve.controller().identity.as_str() {
            Ok(())
        } else {
            Err(format!("{}", lease["spec"]))
        }
    });
    assert!(serve.is_leader());

    // A hook object compiled by this replica (Ready, its own entry in status.webhooks), and a
    // hook run through the API server.
    namespace(cp, "smoke", json!({NAMESPACE_LABEL: "r-smoke"}));
    let mark = install.mark("smoke");
    cp.apply(
        &json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "smoke", "namespace": "smoke"},
            "spec": {"postHooks": [{"exec": {"command": ["sh", "-c", mark_cmd(&mark, "smoke")]}}]},
        })
        .to_string(),
    )
    .unwrap();
    cp.kubectl_ok([
        "wait",
        "--for=condition=Ready",
        "restorehook/smoke",
        "-n",
        "smoke",
        "--timeout=60s",
    ])
    .unwrap();
    wait_compiled(cp, "smoke", "smoke", &[serve.webhook().identity.as_str()]);
    create(cp, &pod("smoke", "app", &["app"], json!({}), json!({})));
    let done = wait_hooks_ended(cp, "smoke", "app", Duration::from_secs(90));
    assert_eq!(done["metadata"]["labels"][EXEC_LABEL], "done", "{done}");
    assert_eq!(mark_lines(&mark).len(), 1);
    wait_restore_run(cp, "r-smoke", &["Completed"], Duration::from_secs(60));
}

/// The names of a pod's init containers, in order.
pub fn init_names(pod: &Value) -> Vec<String> {
    pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// No `restore-hooks.dev/*` key in the pod's labels or annotations.
pub fn assert_untouched(pod: &Value) {
    for map in ["labels", "annotations"] {
        for (k, _) in pod["metadata"][map].as_object().into_iter().flatten() {
            assert!(!k.starts_with("restore-hooks.dev/"), "{map} {k} on {pod}");
        }
    }
}

/// `kubectl ARGS` with `object` on stdin, as admin: (success, stderr).
pub fn kubectl_object(cp: &ControlPlane, args: &[&str], object: &Value) -> (bool, String) {
    let out = kubectl_stdin(cp, cp.kubeconfig(), args, &object.to_string());
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn restore_hook(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// Waits until each of `replicas` reported, in the RestoreHook's `status.webhooks`, that it
/// compiled its current generation.
pub fn wait_compiled(cp: &ControlPlane, namespace: &str, name: &str, replicas: &[&str]) {
    wait_until(
        format!("restorehook {namespace}/{name} compiled by {replicas:?}"),
        Duration::from_secs(60),
        || {
            let rh = get_json(cp, &["get", "restorehook", name, "-n", namespace]).ok_or("gone")?;
            let generation = rh["metadata"]["generation"].as_i64().unwrap_or_default();
            let webhooks = &rh["status"]["webhooks"];
            let all = replicas.iter().all(|r| {
                webhooks[*r]["observedGeneration"].as_i64() >= Some(generation)
                    && webhooks[*r]["problem"]
                        .as_str()
                        .unwrap_or_default()
                        .is_empty()
            });
            all.then_some(()).ok_or_else(|| rh["status"].to_string())
        },
    );
}

/// Applies hook objects and waits until they are `Ready`.
pub fn apply_hooks(cp: &ControlPlane, hooks: &[Value]) {
    apply_list(cp, hooks);
    for h in hooks {
        let name = h["metadata"]["name"].as_str().unwrap();
        let ns = h["metadata"]["namespace"].as_str().unwrap();
        cp.kubectl_ok([
            "wait",
            "--for=condition=Ready",
            &format!("restorehook/{name}"),
            "-n",
            ns,
            "--timeout=60s",
        ])
        .unwrap();
    }
}

fn admission_outcomes(serve: &Replica, object: &str) -> Vec<String> {
    let mut out: Vec<String> = serve
        .webhook()
        .lines_about("admission reviewed", object)
        .iter()
        .chain(
            serve
                .webhook()
                .lines_about("admission denied", object)
                .iter(),
        )
        .map(|l| l["outcome"].as_str().unwrap_or_default().to_string())
        .collect();
    out.sort();
    out
}

/// Scenario 3: the admission chain on the real API server, the chart's webhooks as rendered.
pub fn admission_chain(install: &Install, serve: &Replica) {
    let cp = &install.cp;
    let url =
        install.applied("MutatingWebhookConfiguration")[0]["webhooks"][0]["clientConfig"]["url"]
            .as_str()
            .unwrap()
            .to_string();

    // (a) A restored pod: the restore pod label (first webhook). Under --velero-hooks defer only
    // hook objects apply to it.
    namespace(cp, "app", json!({}));
    let app_mark = install.mark("admission-app");
    apply_hooks(
        cp,
        &[
            restore_hook(
                "app",
                "rh-app",
                json!({
                    "restores": ["r-adm*"],
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "postHooks": [
                        {"init": {"initContainers": [{"name": "rh-init", "image": "busybox:1.36",
                                                       "command": ["sh", "-c", "true"]}]}},
                        {"exec": {"container": "db", "command": ["sh", "-c", mark_cmd(&app_mark, "db")]}},
                    ],
                }),
            ),
            restore_hook(
                "app",
                "rh-clash",
                json!({
                    "labelSelector": {"matchLabels": {"app": "clash"}},
                    "postHooks": [{"init": {"initContainers": [{"name": "db", "image": "busybox:1.36"}]}}],
                }),
            ),
        ],
    );
    let created = create(
        cp,
        &pod(
            "app",
            "db-0",
            &["db"],
            json!({"app": "db", RESTORE_LABEL: "r-adm"}),
            json!({}),
        ),
    );
    assert_eq!(init_names(&created), ["rh-init"], "{created}");
    let meta = &created["metadata"];
    assert_eq!(meta["labels"][EXEC_LABEL], "pending", "{meta}");
    assert_eq!(meta["labels"][RUN_LABEL], "r-adm", "{meta}");
    assert_eq!(meta["annotations"]["restore-hooks.dev/injected"], "rh-init");
    assert!(
        meta["annotations"]["restore-hooks.dev/plan-signature"]
            .as_str()
            .is_some_and(|s| s.starts_with("v1."))
    );
    let p = plan(&created).unwrap();
    assert_eq!(p["restore"], "r-adm");
    assert_eq!(p["hooks"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p["hooks"][0]["source"], "restorehook/rh-app");
    let done = wait_hooks_ended(cp, "app", "db-0", Duration::from_secs(90));
    assert_eq!(done["metadata"]["labels"][EXEC_LABEL], "done");
    assert_eq!(mark_lines(&app_mark).len(), 1);
    assert_eq!(admission_outcomes(serve, "app/db-0"), ["patched"]);

    // (b) A pod created in a labelled restore namespace (second webhook): Velero's annotation
    // hooks are restore-hooks' to run there (no pod label: Velero did not create it).
    namespace(cp, "restore-ns", json!({NAMESPACE_LABEL: "r-ns"}));
    let web_mark = install.mark("admission-web");
    let created = create(
        cp,
        &pod(
            "restore-ns",
            "web",
            &["web"],
            json!({"app": "web"}),
            json!({
                "init.hook.restore.velero.io/container-image": "busybox:1.36",
                "init.hook.restore.velero.io/container-name": "anno-init",
                "init.hook.restore.velero.io/command": "[\"sh\", \"-c\", \"true\"]",
                "post.hook.restore.velero.io/command":
                    serde_json::to_string(&["sh", "-c", &mark_cmd(&web_mark, "web")]).unwrap(),
            }),
        ),
    );
    assert_eq!(init_names(&created), ["anno-init"], "{created}");
    assert_eq!(created["metadata"]["labels"][RUN_LABEL], "r-ns");
    let p = plan(&created).unwrap();
    assert_eq!(p["hooks"][0]["name"], "<from-annotation>", "{p}");
    assert_eq!(p["hooks"][0]["source"], "annotation", "{p}");
    let done = wait_hooks_ended(cp, "restore-ns", "web", Duration::from_secs(90));
    assert_eq!(done["metadata"]["labels"][EXEC_LABEL], "done");
    assert_eq!(mark_lines(&web_mark).len(), 1);
    assert_eq!(admission_outcomes(serve, "restore-ns/web"), ["patched"]);

    // (c) Excluded namespaces (the release namespace, kube-system): the chart's selectors do not
    // send their pods, and the server, sent them by a hand-made configuration, re-checks.
    let excluded_hooks = json!({
        "init.hook.restore.velero.io/container-image": "busybox:1.36",
        "post.hook.restore.velero.io/command": "[\"sh\", \"-c\", \"exit 99\"]",
    });
    for ns in ["kube-system", NAMESPACE] {
        let created = create(
            cp,
            &pod(
                ns,
                "restored-here",
                &["app"],
                json!({RESTORE_LABEL: "r-adm"}),
                excluded_hooks.clone(),
            ),
        );
        assert_untouched(&created);
        assert!(init_names(&created).is_empty(), "{created}");
        assert!(admission_outcomes(serve, &format!("{ns}/restored-here")).is_empty());
    }
    let path = url
        .split_once("127.0.0.1")
        .unwrap()
        .1
        .split_once('/')
        .unwrap()
        .1;
    let unfiltered = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "restore-hooks-hand-edited"},
        "webhooks": [{
            "name": "unfiltered.restore-hooks.dev",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/{path}", install.webhook_port),
                             "caBundle": install.certs.ca_bundle()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "In", "values": ["kube-system", NAMESPACE]}]},
            "objectSelector": {"matchLabels": {"test": "unfiltered"}},
        }],
    });
    apply_list(cp, std::slice::from_ref(&unfiltered));
    for ns in ["kube-system", NAMESPACE] {
        let created = wait_until(
            "the hand-made webhook configuration to be in force",
            Duration::from_secs(30),
            || {
                let name = format!("sent-anyway-{}", now_nanos() % 1_000_000_000);
                let created = create(
                    cp,
                    &pod(
                        ns,
                        &name,
                        &["app"],
                        json!({"test": "unfiltered", RESTORE_LABEL: "r-adm"}),
                        excluded_hooks.clone(),
                    ),
                );
                let seen = admission_outcomes(serve, &format!("{ns}/{name}"));
                if seen.is_empty() {
                    Err(format!("{name} not sent yet"))
                } else {
                    Ok((created, seen))
                }
            },
        );
        assert_eq!(created.1, ["unchanged"], "{ns}");
        assert_untouched(&created.0);
        assert!(init_names(&created.0).is_empty(), "{}", created.0);
    }
    cp.kubectl_ok([
        "delete",
        "mutatingwebhookconfiguration",
        "restore-hooks-hand-edited",
    ])
    .unwrap();

    // (d) Pods that are not restored are stored exactly as a pod no webhook saw: one the
    // webhooks never receive, and two they do receive (an empty label value names no restore).
    namespace(cp, "plain", json!({}));
    namespace(cp, "restore-empty", json!({NAMESPACE_LABEL: ""}));
    let velero_annotations = json!({
        "post.hook.restore.velero.io/command": "[\"sh\", \"-c\", \"exit 98\"]",
        "init.hook.restore.velero.io/container-image": "busybox:1.36",
        "note": "x",
    });
    let control = create(
        cp,
        &pod(
            "plain",
            "control",
            &["app"],
            json!({"app": "x"}),
            velero_annotations.clone(),
        ),
    );
    let canonical = |p: &Value| serde_json::to_string(&p["spec"]).unwrap();
    for (ns, name, labels) in [
        (
            "restore-empty",
            "empty-namespace-label",
            json!({"app": "x"}),
        ),
        (
            "plain",
            "empty-pod-label",
            json!({"app": "x", RESTORE_LABEL: ""}),
        ),
    ] {
        let created = create(
            cp,
            &pod(
                ns,
                name,
                &["app"],
                labels.clone(),
                velero_annotations.clone(),
            ),
        );
        assert_eq!(
            canonical(&created),
            canonical(&control),
            "{ns}/{name}: spec"
        );
        assert_eq!(created["metadata"]["labels"], labels, "{ns}/{name}");
        assert_eq!(
            created["metadata"]["annotations"], velero_annotations,
            "{ns}/{name}"
        );
        assert_eq!(
            admission_outcomes(serve, &format!("{ns}/{name}")),
            ["unchanged"],
            "{ns}/{name}"
        );
    }
    assert!(admission_outcomes(serve, "plain/control").is_empty());

    // (e) Reinvocation: a second mutating webhook (after ours, by configuration name) adds an
    // init container in front; the API server calls ours again (reinvocationPolicy IfNeeded).
    // Each init container stays once; the plan is issued anew (an id is never carried over from
    // what a pod brings: docs/behaviour.md §4.6), so only the plan and its signature change.
    let mesh = MeshWebhook::start(&install.certs);
    apply_list(cp, &[mesh.configuration(&install.certs)]);
    namespace(
        cp,
        "mesh-ns",
        json!({"mesh": "on", NAMESPACE_LABEL: "r-mesh"}),
    );
    let mesh_mark = install.mark("admission-mesh");
    let mut manifest = pod(
        "mesh-ns",
        "app",
        &["app"],
        json!({"app": "meshed"}),
        json!({
            "init.hook.restore.velero.io/container-image": "busybox:1.36",
            "init.hook.restore.velero.io/container-name": "anno-init",
            "post.hook.restore.velero.io/command":
                serde_json::to_string(&["sh", "-c", &mark_cmd(&mesh_mark, "mesh")]).unwrap(),
        }),
    );
    manifest["spec"]["initContainers"] = json!([
        {"name": "restore-wait", "image": "velero/velero-restore-helper:v1.18.3", "command": ["/velero-restore-helper"]}
    ]);
    let created = wait_until(
        "the mesh webhook to be in force",
        Duration::from_secs(30),
        || {
            let name = format!("app-{}", now_nanos() % 1_000_000_000);
            let mut m = manifest.clone();
            m["metadata"]["name"] = json!(name);
            let created = create(cp, &m);
            if init_names(&created).contains(&tls::MESH_INIT.to_string()) {
                Ok(created)
            } else {
                Err(format!("{:?}", init_names(&created)))
            }
        },
    );
    let name = created["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(
        init_names(&created),
        [tls::MESH_INIT, "restore-wait", "anno-init"],
        "{created}"
    );
    assert!(mesh.calls() >= 1);
    let lines = serve
        .webhook()
        .lines_about("admission reviewed", &format!("mesh-ns/{name}"));
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["patched", "patched"],
        "first call, then the reinvocation"
    );
    assert_eq!(
        lines[1]["patch_ops"], 2,
        "the reinvocation replaces the plan and its signature, nothing else: {}",
        lines[1]
    );
    let done = wait_hooks_ended(cp, "mesh-ns", &name, Duration::from_secs(90));
    assert_eq!(done["metadata"]["labels"][EXEC_LABEL], "done", "{done}");
    assert_eq!(mark_lines(&mesh_mark).len(), 1);
    cp.kubectl_ok(["delete", "mutatingwebhookconfiguration", "zz-mesh"])
        .unwrap();
    drop(mesh);

    // (f) Denials, as kubectl prints them.
    let bad = pod(
        "restore-ns",
        "bad",
        &["app"],
        json!({}),
        json!({
            "post.hook.restore.velero.io/command": "[\"sh\", \"-c\", \"true\"]",
            "post.hook.restore.velero.io/on-error": "Sometimes",
        }),
    );
    for verb in [&["create", "-f", "-"][..], &["apply", "-f", "-"]] {
        let (ok, stderr) = kubectl_object(cp, verb, &bad);
        eprintln!("kubectl {verb:?}: {stderr}");
        assert!(!ok);
        assert_eq!(stderr, DENIED_ANNOTATION, "kubectl {verb:?}");
    }
    assert!(get_pod(cp, "restore-ns", "bad").is_none());
    let clash = pod(
        "app",
        "clash-0",
        &["db"],
        json!({"app": "clash", RESTORE_LABEL: "r-adm"}),
        json!({}),
    );
    // The same kind of problem on a pod Velero created (the restore label) is never a denial:
    // Velero would not create the pod again (docs/behaviour.md §3.6). It is admitted without
    // the hook, with a warning, and the hook is planned as failed.
    let (ok, stderr) = kubectl_object(cp, &["create", "-f", "-"], &clash);
    eprintln!("kubectl create (clash): {stderr}");
    assert!(ok, "{stderr}");
    assert_eq!(stderr, WARNED_CLASH);
    let admitted = get_pod(cp, "app", "clash-0").unwrap();
    assert_eq!(init_names(&admitted), Vec::<String>::new(), "{admitted}");
    let p = plan(&admitted).unwrap();
    assert_eq!(
        p["hooks"][0]["invalid"],
        "invalid, not executed: restorehook/rh-clash postHooks[0].init: init container \"db\" \
         clashes with the pod's app container \"db\" (a pod cannot have two containers of one \
         name); rename the hook's container",
        "{p}"
    );
}

/// After [`admission_chain`]: the server logged each denial as one JSON object an operator can grep: message
/// "admission denied", the pod, and the reason, each key once.
pub fn denials_logged_as_json(serve: &Replica) {
    for object in ["restore-ns/bad"] {
        let lines: Vec<String> = serve
            .webhook()
            .log()
            .lines()
            .filter(|l| {
                l.contains(&format!("\"object\":\"{object}\""))
                    && l.contains("\"outcome\":\"denied\"")
            })
            .map(str::to_string)
            .collect();
        assert!(!lines.is_empty(), "no denial logged for {object}");
        for line in lines {
            let keys = top_level_keys(&line);
            let mut unique = keys.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(
                keys.len(),
                unique.len(),
                "the denial's log line repeats a key (JSON parsers keep only one of them, so \
                 the line's message \"admission denied\" or the reason is lost): {line}"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["message"], "admission denied", "{line}");
        }
    }
}

/// The keys of a JSON object, in order, duplicates included (serde_json's `Value` keeps one).
pub fn top_level_keys(line: &str) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some((k, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                        keys.push(k);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_str::<Keys>(line)
        .map(|k| k.0)
        .unwrap_or_default()
}

/// kubectl's stderr for the pod with an invalid annotation (the API server's "error when
/// creating", the webhook's name, then restore-hooks' message).
const DENIED_ANNOTATION: &str = "Error from server (BadRequest): error when creating \"STDIN\": \
    admission webhook \"namespace-label.restore-hooks.restore-hooks.dev\" denied the request: \
    restore-hooks: pod restore-ns/bad (restore \"r-ns\") has invalid restore hooks: annotation \
    post.hook.restore.velero.io/on-error: \"Sometimes\" is neither Continue nor Fail (the values \
    are case-sensitive). Fix the hook definitions and recreate the pod, or run the webhook with \
    --on-invalid warn to admit pods without their invalid hooks\n";
/// kubectl's stderr for a pod Velero created (the restore label, first webhook) whose hook object's
/// init container clashes with the pod's container: admitted, with the webhook's warning.
const WARNED_CLASH: &str = "Warning: restore-hooks: pod app/clash-0: skipped invalid hook \
    restorehook/rh-clash postHooks[0].init: init container \"db\" clashes with the pod's app \
    container \"db\" (a pod cannot have two containers of one name); rename the hook's \
    container (admitted all the same: Velero created the pod and would not create it again)\n";

/// The entries of a pod's hook status, in plan order.
pub fn hooks_of(pod: &Value) -> Vec<Value> {
    hook_status(pod)
        .and_then(|s| s["hooks"].as_array().cloned())
        .unwrap_or_default()
}

/// (start, end) nanos of a hook that wrote `start` and `end` marks.
fn span(path: &std::path::Path) -> (u128, u128) {
    let lines = mark_lines(path);
    let at = |word: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{word} ")))
            .unwrap_or_else(|| panic!("{}: no {word} mark in {lines:?}", path.display()))
            .parse::<u128>()
            .unwrap()
    };
    (at("start"), at("end"))
}

/// Shell that waits (at most 60 s, then exits 9) until `path` exists.
fn await_file(path: &std::path::Path) -> String {
    format!(
        "i=0; until [ -e '{}' ]; do sleep 0.1; i=$((i+1)); [ $i -gt 600 ] && exit 9; done",
        path.display()
    )
}

/// A hook that marks its start, runs `body`, marks its end (and prints `out` on stdout).
fn timed(path: &std::path::Path, body: &str) -> Value {
    json!([
        "sh",
        "-c",
        format!(
            "{}; {body}; {}",
            mark_cmd(path, "start"),
            mark_cmd(path, "end")
        )
    ])
}

/// Scenario 4: hooks exec'd through the API server's pods/exec into kwok pods: order per
/// container, onError Continue and Fail, execTimeout, waitTimeout, exit codes (kwok's
/// InternalError), the status annotation, Events, hook-object and RestoreRun status.
pub fn hooks_through_exec(install: &Install, serve: &Replica) {
    let cp = &install.cp;
    let ns = "hooks";
    namespace(cp, ns, json!({NAMESPACE_LABEL: "r-hooks"}));
    let m = |name: &str| install.mark(&format!("hooks-{name}"));

    let exec = |container: &str, command: Value, extra: Value| {
        let mut e = json!({"container": container, "command": command});
        e.as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        json!({"exec": e})
    };
    apply_hooks(
        cp,
        &[
            // Two containers, two hooks each: per container in plan order, containers
            // independent.
            restore_hook(
                ns,
                "order",
                json!({
                    "labelSelector": {"matchLabels": {"app": "order"}},
                    "postHooks": [
                        // Each waits (bounded) for the other to have started: they can only
                        // both succeed if the two containers' hooks run at the same time.
                        exec("app", timed(&m("app-1"), &format!("echo hello from app-1; {}",
                            await_file(&m("side-1")))), json!({"execTimeout": "90s"})),
                        exec("side", timed(&m("side-1"), &await_file(&m("app-1"))), json!({"execTimeout": "90s"})),
                        exec("app", timed(&m("app-2"), "true"), json!({})),
                        exec("side", timed(&m("side-2"), "true"), json!({})),
                    ],
                }),
            ),
            // onError: Continue goes on, Fail skips the rest of the whole pod; a hook already
            // running in the other container finishes.
            restore_hook(
                ns,
                "errors",
                json!({
                    "labelSelector": {"matchLabels": {"app": "errors"}},
                    "postHooks": [
                        // Still running when the Fail hook fails (it waits for it, then gives the
                        // controller a moment to record the failure).
                        exec("side", timed(&m("side-slow"), &format!("{}; sleep 3",
                            await_file(&m("fail-hook")))), json!({"execTimeout": "90s"})),
                        exec("app", json!(["sh", "-c", "echo out; echo err >&2; exit 3"]), json!({"onError": "Continue"})),
                        exec("app", json!(["sh", "-c", mark_cmd(&m("after-continue"), "ran")]), json!({})),
                        exec("app", json!(["sh", "-c", format!("{}; exit 4", mark_cmd(&m("fail-hook"), "ran"))]),
                            json!({"onError": "Fail"})),
                        exec("app", json!(["sh", "-c", mark_cmd(&m("after-fail"), "ran")]), json!({})),
                        exec("side", json!(["sh", "-c", mark_cmd(&m("side-after-fail"), "ran")]), json!({})),
                    ],
                }),
            ),
            // execTimeout, and a waitTimeout that passes while the hook before it runs.
            restore_hook(
                ns,
                "timeouts",
                json!({
                    "labelSelector": {"matchLabels": {"app": "timeouts"}},
                    "postHooks": [
                        exec("app", timed(&m("slow"), "sleep 6"), json!({"execTimeout": "2s"})),
                        exec("app", json!(["sh", "-c", mark_cmd(&m("expired"), "ran")]), json!({"waitTimeout": "1s"})),
                        exec("app", json!(["sh", "-c", mark_cmd(&m("unbounded"), "ran")]), json!({})),
                    ],
                }),
            ),
        ],
    );
    for (name, containers) in [
        ("order", &["app", "side"][..]),
        ("errors", &["app", "side"]),
        ("timeouts", &["app"]),
    ] {
        create(
            cp,
            &pod(ns, name, containers, json!({"app": name}), json!({})),
        );
    }
    let order = wait_hooks_ended(cp, ns, "order", Duration::from_secs(120));
    let errors = wait_hooks_ended(cp, ns, "errors", Duration::from_secs(120));
    let timeouts = wait_hooks_ended(cp, ns, "timeouts", Duration::from_secs(120));

    // order: every hook once, per container in plan order.
    assert_eq!(order["metadata"]["labels"][EXEC_LABEL], "done", "{order}");
    let hooks = hooks_of(&order);
    assert_eq!(hooks.len(), 4, "{hooks:?}");
    for (i, h) in hooks.iter().enumerate() {
        assert_eq!(h["phase"], "Succeeded", "{h}");
        assert_eq!(h["exitCode"], 0, "{h}");
        assert_eq!(h["name"], "order", "{h}");
        assert_eq!(h["index"], i, "{h}");
        assert!(
            h["startedAt"].is_string() && h["finishedAt"].is_string(),
            "{h}"
        );
    }
    assert_eq!(hooks[0]["stdout"], "hello from app-1\n", "{}", hooks[0]);
    assert_eq!(hooks[0]["container"], "app");
    assert_eq!(hooks[1]["container"], "side");
    for name in ["app-1", "app-2", "side-1", "side-2"] {
        assert_eq!(mark_lines(&m(name)).len(), 2, "{name}: one start, one end");
    }
    let (app1, app2) = (span(&m("app-1")), span(&m("app-2")));
    let (side1, side2) = (span(&m("side-1")), span(&m("side-2")));
    assert!(
        app1.1 <= app2.0,
        "app-2 started before app-1 ended: {app1:?} {app2:?}"
    );
    assert!(
        side1.1 <= side2.0,
        "side-2 started before side-1 ended: {side1:?} {side2:?}"
    );
    // Containers are independent: each of app-1 and side-1 waited for the other to start.
    assert!(
        side1.0 < app1.1 && app1.0 < side1.1,
        "app and side did not overlap: {app1:?} {side1:?}"
    );

    // errors: exit 3 (Continue) recorded with kwok's exit code, the next hook ran, exit 4
    // (Fail) skipped the rest of the pod; the other container's running hook finished.
    assert_eq!(
        errors["metadata"]["labels"][EXEC_LABEL], "failed",
        "{errors}"
    );
    let hooks = hooks_of(&errors);
    let phases: Vec<&str> = hooks.iter().map(|h| h["phase"].as_str().unwrap()).collect();
    assert_eq!(
        phases,
        [
            "Succeeded",
            "Failed",
            "Succeeded",
            "Failed",
            "Skipped",
            "Skipped"
        ],
        "{hooks:?}"
    );
    assert_eq!(hooks[1]["exitCode"], 3, "{}", hooks[1]);
    // kwok reports a non-zero exit as an InternalError that repeats the command line: the
    // product keeps only the code.
    assert_eq!(
        hooks[1]["message"], "command terminated with exit code 3",
        "{}",
        hooks[1]
    );
    assert_eq!(hooks[1]["stdout"], "out\n");
    assert_eq!(hooks[1]["stderr"], "err\n");
    assert_eq!(hooks[3]["exitCode"], 4, "{}", hooks[3]);
    assert_eq!(hooks[3]["message"], "command terminated with exit code 4");
    for skipped in &hooks[4..] {
        let msg = skipped["message"].as_str().unwrap();
        assert!(
            msg.starts_with("skipped: hook errors (#")
                && msg.ends_with("failed with onError: Fail"),
            "{skipped}"
        );
        assert!(skipped["startedAt"].is_null(), "{skipped}");
    }
    assert_eq!(
        mark_lines(&m("side-slow")).len(),
        2,
        "the running hook finished"
    );
    assert_eq!(mark_lines(&m("after-continue")).len(), 1);
    assert!(
        mark_lines(&m("after-fail")).is_empty(),
        "a skipped hook ran"
    );
    assert!(
        mark_lines(&m("side-after-fail")).is_empty(),
        "a skipped hook ran"
    );

    // timeouts: the exec is cut off after execTimeout; the next hook's waitTimeout passed
    // meanwhile, so it is not executed; a hook without a waitTimeout still runs.
    assert_eq!(timeouts["metadata"]["labels"][EXEC_LABEL], "failed");
    let hooks = hooks_of(&timeouts);
    assert_eq!(hooks[0]["phase"], "Failed", "{}", hooks[0]);
    assert_eq!(hooks[0]["message"], "timed out after 2s", "{}", hooks[0]);
    assert_eq!(hooks[1]["phase"], "Failed", "{}", hooks[1]);
    assert!(
        hooks[1]["message"]
            .as_str()
            .unwrap()
            .contains("not executed"),
        "{}",
        hooks[1]
    );
    assert!(mark_lines(&m("expired")).is_empty(), "an expired hook ran");
    assert_eq!(hooks[2]["phase"], "Succeeded", "{}", hooks[2]);
    assert_eq!(mark_lines(&m("unbounded")).len(), 1);
    assert_eq!(
        mark_lines(&m("slow"))
            .iter()
            .filter(|l| l.starts_with("start"))
            .count(),
        1
    );

    // Events (docs/behaviour.md §6.12): successes get none of their own; each pod's one
    // HooksCompleted names them with their stdout. Failures get a HookFailed each.
    let ok = wait_until("the Events of pod order", Duration::from_secs(30), || {
        let c = events_with(cp, ns, "order", "HooksCompleted");
        if c.len() == 1 {
            Ok(c)
        } else {
            Err(format!("{} HooksCompleted", c.len()))
        }
    });
    assert_eq!(ok[0]["type"], "Normal");
    assert_eq!(ok[0]["count"], 1);
    let summary = ok[0]["message"].as_str().unwrap();
    assert!(
        summary.contains("4 succeeded, 0 failed, 0 skipped")
            && (0..4).all(|i| summary.contains(&format!("(#{i},")))
            && summary.contains("hello from app-1"),
        "{summary}"
    );
    let ours: Vec<Value> = events_about(cp, ns, "order")
        .into_iter()
        .filter(|e| e["reportingComponent"] == "restore-hooks-controller")
        .collect();
    assert_eq!(ours.len(), 1, "no per-hook success Event: {ours:?}");
    let failed = wait_until("the Events of pod errors", Duration::from_secs(30), || {
        let f = events_with(cp, ns, "errors", "HookFailed");
        let c = events_with(cp, ns, "errors", "HooksCompleted");
        // The two failures; skipped hooks are counted in HooksCompleted.
        if f.len() == 2 && c.len() == 1 {
            Ok((f, c))
        } else {
            Err(format!(
                "{} HookFailed, {} HooksCompleted",
                f.len(),
                c.len()
            ))
        }
    });
    assert!(failed.0.iter().all(|e| e["type"] == "Warning"));
    assert_eq!(failed.1[0]["type"], "Warning");
    assert!(
        failed.0.iter().any(|e| {
            let msg = e["message"].as_str().unwrap();
            msg.contains("command terminated with exit code 3") && msg.contains("err")
        }),
        "{:?}",
        failed.0
    );
    // The two successes are named in HooksCompleted, the failures are not.
    let summary = failed.1[0]["message"].as_str().unwrap();
    assert!(
        summary.contains("errors (#0,")
            && summary.contains("errors (#2,")
            && !summary.contains("(#1,")
            && !summary.contains("(#3,"),
        "{summary}"
    );
    assert!(
        failed.1[0]["message"]
            .as_str()
            .unwrap()
            .contains("2 succeeded, 2 failed, 2 skipped"),
        "{}",
        failed.1[0]
    );
    // The timed-out hook and the expired one (never executed) are each reported once.
    wait_until(
        "the Events of pod timeouts",
        Duration::from_secs(30),
        || {
            let f = events_with(cp, ns, "timeouts", "HookFailed");
            let msgs: Vec<&str> = f.iter().map(|e| e["message"].as_str().unwrap()).collect();
            (f.len() == 2
                && msgs.iter().any(|m| m.contains("timed out after 2s"))
                && msgs.iter().any(|m| m.contains("not executed")))
            .then_some(())
            .ok_or_else(|| format!("{msgs:?}"))
        },
    );

    // The hook objects' counts and the restore's RestoreRun.
    wait_until("RestoreHook order counts", Duration::from_secs(30), || {
        let rh = get_json(cp, &["get", "restorehook", "order", "-n", ns]).ok_or("gone")?;
        let st = &rh["status"];
        (st["podsPlanned"] == 1 && st["hooks"]["succeeded"] == 4 && st["hooks"]["failed"] == 0)
            .then_some(())
            .ok_or_else(|| st.to_string())
    });
    wait_until("RestoreHook errors counts", Duration::from_secs(30), || {
        let rh = get_json(cp, &["get", "restorehook", "errors", "-n", ns]).ok_or("gone")?;
        let st = &rh["status"];
        (st["hooks"]["succeeded"] == 2 && st["hooks"]["failed"] == 4)
            .then_some(())
            .ok_or_else(|| st.to_string())
    });
    let run = wait_restore_run(cp, "r-hooks", &["PartiallyFailed"], Duration::from_secs(60));
    let st = &run["status"];
    assert_eq!(st["podsPlanned"], 3, "{st}");
    assert_eq!(st["hooks"]["succeeded"], 4 + 2 + 1, "{st}");
    assert_eq!(st["hooks"]["failed"], 2 + 2, "{st}");
    assert_eq!(st["hooks"]["skipped"], 2, "{st}");
    let failed_pods: Vec<&str> = st["failedPods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pod"].as_str().unwrap())
        .collect();
    assert!(
        failed_pods.contains(&"errors") && failed_pods.contains(&"timeouts"),
        "{st}"
    );
    assert!(!failed_pods.contains(&"order"), "{st}");

    // The server's log: one start per executed hook (expired and skipped ones never start).
    for (pod, executed) in [("order", 4), ("errors", 4), ("timeouts", 2)] {
        let started = serve
            .controller()
            .log_json()
            .iter()
            .filter(|l| l["message"] == "hook started" && l["pod"] == format!("{ns}/{pod}"))
            .count();
        assert_eq!(started, executed, "{pod}: hook started lines");
    }
}
