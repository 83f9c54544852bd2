//! The hook engine end to end, without a server: pod JSON + hook documents → decision → patch
//! applied with json-patch → assertions on the resulting pod, and re-running the engine on that
//! result must give no patch (reinvocation idempotence).

use std::path::Path;

use restore_hooks_core::admission::{Admission, ExecRight, Issuer, Requester};
use restore_hooks_core::catalog::StaticCatalog;
use restore_hooks_core::config::{EngineConfig, OnInvalid, VeleroHooksMode};
use restore_hooks_core::documents::{DocumentDefaults, add_documents};
use restore_hooks_core::hooks::plan::{ExecPlan, OnError, RunOn};
use restore_hooks_core::hooks::pod::AdmittedPod;
use restore_hooks_core::hooks::resolve::PodContext;
use restore_hooks_core::hooks::restore_name::velero_label_value;
use serde_json::{Value, json};

/// The engine on a pod's JSON, as the webhook and `inject` run it (no plan key: unsigned plans),
/// for a creator that may exec.
fn evaluate(
    pod: &Value,
    namespace: &str,
    catalog: &StaticCatalog,
    config: &EngineConfig,
) -> Result<Admission, serde_json::Error> {
    let alice = Requester {
        username: "alice",
        exec_right: &ExecRight::Granted,
    };
    evaluate_as(pod, namespace, catalog, config, &alice, PLAN_ID)
}

/// [`evaluate`] for the pod's creator `requester`, issuing plan `plan_id`.
fn evaluate_as(
    pod: &Value,
    namespace: &str,
    catalog: &StaticCatalog,
    config: &EngineConfig,
    requester: &Requester<'_>,
    plan_id: &str,
) -> Result<Admission, serde_json::Error> {
    let text = pod.to_string();
    let view = AdmittedPod::from_json_str(&text)?;
    let index = catalog.index();
    let ctx = PodContext {
        pod: &view,
        namespace,
        namespace_labels: index.namespace_labels(namespace),
    };
    // One issuance (time and id) for every call: re-running on the output is then a fixed
    // point. A real second admission issues a new plan (see
    // `a_pod_that_brings_a_plan_gets_a_new_one`).
    let issuer = Issuer {
        keys: None,
        now: "2026-12-04T10:00:00Z".parse().unwrap(),
        plan_id,
    };
    Ok(restore_hooks_core::admission::evaluate(
        &ctx, &index, config, &issuer, requester,
    ))
}

const NS: &str = "shop";
const PLAN_ID: &str = "AAECAwQFBgcICQoL";

fn catalog(docs: &str) -> StaticCatalog {
    let mut c = StaticCatalog::default();
    let defaults = DocumentDefaults {
        namespace: NS.into(),
        velero_namespace: "velero".into(),
    };
    add_documents(&mut c, Path::new("test.yaml"), docs, &defaults).expect("test documents");
    c
}

fn with_ns_label(mut c: StaticCatalog, restore: &str) -> StaticCatalog {
    c.namespaces
        .entry(NS.into())
        .or_default()
        .insert("restore-hooks.dev/restore".into(), restore.into());
    c
}

fn own() -> EngineConfig {
    EngineConfig {
        velero_hooks: VeleroHooksMode::Own,
        ..EngineConfig::default()
    }
}

fn warn_own() -> EngineConfig {
    EngineConfig {
        on_invalid: OnInvalid::Warn,
        ..own()
    }
}

/// A restored pod: Velero label, one app container `db`, volume `data`.
fn pod(extra: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": NS,
                     "labels": {"app": "db", "velero.io/restore-name": "r1"}},
        "spec": {"containers": [{"name": "db", "image": "postgres:17"}],
                 "volumes": [{"name": "data", "emptyDir": {}}]}
    });
    json_patch::merge(&mut p, &extra);
    p
}

struct Admitted {
    pod: Value,
    warnings: Vec<String>,
    injected: Vec<String>,
}

impl Admitted {
    fn init_names(&self) -> Vec<String> {
        self.pod["spec"]["initContainers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| c["name"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn plan(&self) -> Option<ExecPlan> {
        self.pod["metadata"]["annotations"]["restore-hooks.dev/plan"]
            .as_str()
            .map(|s| ExecPlan::from_annotation(s).expect("plan parses"))
    }

    fn exec_label(&self) -> Option<&str> {
        self.pod["metadata"]["labels"]["restore-hooks.dev/exec"].as_str()
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.pod["metadata"]["annotations"][key].as_str()
    }
}

/// Admits the pod, applies the patch, and checks that a second admission changes nothing.
fn admit(pod: &Value, catalog: &StaticCatalog, config: &EngineConfig) -> Admitted {
    let decision = evaluate(pod, NS, catalog, config).expect("pod decodes");
    let (patched, warnings, injected) = match decision {
        Admission::Deny { message } => panic!("unexpected denial: {message}"),
        Admission::Unchanged { warnings } => (pod.clone(), warnings, vec![]),
        Admission::Patch {
            patch,
            warnings,
            injected,
            ..
        } => {
            let mut patched = pod.clone();
            json_patch::patch(&mut patched, &patch.0).expect("the patch applies to the pod");
            (patched, warnings, injected)
        }
    };
    match evaluate(&patched, NS, catalog, config).expect("patched pod decodes") {
        Admission::Unchanged { .. } => {}
        other => panic!("re-running the webhook on its own output must not patch: {other:?}"),
    }
    Admitted {
        pod: patched,
        warnings,
        injected,
    }
}

/// The denial of `pod` as a pod that a workload's controller creates in a restore namespace:
/// only such pods are denied for their hooks (§3.6). The same pod as Velero creates it (with the
/// restore label) is admitted, its invalid hooks planned as failed, whatever `config` says.
fn denied(pod: &Value, catalog: &StaticCatalog, config: &EngineConfig) -> String {
    let restore = pod["metadata"]["labels"]["velero.io/restore-name"]
        .as_str()
        .map(str::to_string);
    let (as_controllers, catalog_ns) = match &restore {
        Some(restore) => {
            let mut p = pod.clone();
            p["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove("velero.io/restore-name");
            (p, with_ns_label(catalog.clone(), restore))
        }
        None => (pod.clone(), catalog.clone()),
    };
    let message = match evaluate(&as_controllers, NS, &catalog_ns, config).expect("pod decodes") {
        Admission::Deny { message } => message,
        other => panic!("expected a denial, got {other:?}"),
    };
    if restore.is_some() {
        match evaluate(pod, NS, catalog, config).expect("pod decodes") {
            Admission::Deny { message } => {
                panic!("Velero's pod is never denied for its hooks, but: {message}")
            }
            Admission::Unchanged { warnings } | Admission::Patch { warnings, .. } => assert!(
                !warnings.is_empty(),
                "Velero's pod is admitted with a warning for its invalid hooks"
            ),
        }
    }
    message
}

const TWO_HOOKS: &str = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: b-second}
spec:
  postHooks:
  - exec: {command: [/bin/second]}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: a-first}
spec:
  restores: ["r*"]
  labelSelector: {matchLabels: {app: db}}
  postHooks:
  - init:
      initContainers:
      - {name: seed, image: busybox, command: [/bin/seed], volumeMounts: [{name: data, mountPath: /data}]}
  - exec: {container: db, command: [/bin/first], onError: Fail, execTimeout: 1m30s, waitTimeout: 10m, waitForReady: true}
"#;

#[test]
fn out_of_scope_pods_are_never_touched() {
    let c = catalog(TWO_HOOKS);
    let mut p = pod(json!({}));
    p["metadata"]["labels"] = json!({"app": "db"});
    for config in [EngineConfig::default(), own()] {
        let d = evaluate(&p, NS, &c, &config).unwrap();
        assert_eq!(d, Admission::Unchanged { warnings: vec![] });
    }
    // A labelled namespace brings it into scope.
    let a = admit(&p, &with_ns_label(c, "r2"), &EngineConfig::default());
    assert_eq!(a.plan().unwrap().restore, "r2");
}

#[test]
fn restorehooks_apply_in_name_order_with_effective_values() {
    let a = admit(
        &pod(json!({})),
        &catalog(TWO_HOOKS),
        &EngineConfig::default(),
    );
    assert_eq!(a.init_names(), ["seed"]);
    assert_eq!(a.injected, ["seed"]);
    assert_eq!(a.annotation("restore-hooks.dev/injected"), Some("seed"));
    assert_eq!(a.exec_label(), Some("pending"));
    let plan = a.plan().unwrap();
    assert_eq!(plan.restore, "r1");
    let h = &plan.hooks;
    assert_eq!(h.len(), 2);
    assert_eq!(
        (h[0].name.as_str(), h[0].source.as_str(), h[0].index),
        ("a-first", "restorehook/a-first", 1)
    );
    assert_eq!(h[0].on_error, OnError::Fail);
    assert_eq!(h[0].exec_timeout_ms, 90_000);
    assert_eq!(h[0].wait_timeout_ms, Some(600_000));
    assert!(h[0].wait_for_ready);
    assert_eq!(
        (h[1].name.as_str(), h[1].index, h[1].container.as_str()),
        ("b-second", 0, "db")
    );
    assert_eq!(h[1].on_error, OnError::Continue);
    assert_eq!(h[1].exec_timeout_ms, 30_000);
    // Unset: --default-wait-timeout (1h), so that every restore reaches an end (§6.5).
    assert_eq!(h[1].wait_timeout_ms, Some(3_600_000));
    assert!(!h[1].wait_for_ready);
    // Exact wire format of the plan (docs/behaviour.md §5.1).
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    assert_eq!(
        raw["hooks"][1],
        json!({"name": "b-second", "source": "restorehook/b-second", "index": 0,
               "container": "db", "command": ["/bin/second"], "onError": "Continue",
               "execTimeoutMs": 30000, "waitTimeoutMs": 3600000, "waitForReady": false})
    );
}

#[test]
fn restorehook_filters_restores_selector_and_namespace() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: other-restore}
spec: {restores: ["weekly-*", "r9"], postHooks: [{exec: {command: [/x]}}]}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: other-app}
spec:
  labelSelector: {matchExpressions: [{key: app, operator: NotIn, values: [db]}]}
  postHooks: [{exec: {command: [/x]}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: other-namespace, namespace: blog}
spec: {postHooks: [{exec: {command: [/x]}}]}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: empty-restores-means-all}
spec: {restores: [], postHooks: [{exec: {command: [/yes]}}]}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &EngineConfig::default());
    let names: Vec<_> = a
        .plan()
        .unwrap()
        .hooks
        .iter()
        .map(|h| h.name.clone())
        .collect();
    assert_eq!(names, ["empty-restores-means-all"]);
}

const VELERO_RESTORE: &str = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r1, namespace: velero}
spec:
  hooks:
    resources:
    - name: other-ns
      includedNamespaces: [blog]
      postHooks: [{exec: {command: [/no]}}]
    - name: excluded-ns
      excludedNamespaces: ["sh*"]
      postHooks: [{exec: {command: [/no]}}]
    - name: deployments-only
      includedResources: [deployments]
      postHooks: [{exec: {command: [/no]}}]
    - name: pods-excluded
      excludedResources: [pods]
      postHooks: [{exec: {command: [/no]}}]
    - name: wrong-labels
      labelSelector: {matchLabels: {app: web}}
      postHooks: [{exec: {command: [/no]}}]
    - name: first
      includedNamespaces: ["{shop,blog}"]
      includedResources: ["*"]
      postHooks:
      - init: {initContainers: [{name: v-init, image: busybox}]}
      - exec: {command: [/v1]}
    - name: second
      includedResources: [pods]
      labelSelector: {matchExpressions: [{key: velero.io/restore-name, operator: Exists}]}
      postHooks:
      - exec: {command: [/v2], container: db}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: ours}
spec:
  postHooks:
  - init: {initContainers: [{name: rh-init, image: busybox}]}
  - exec: {command: [/rh]}
"#;

#[test]
fn velero_restore_entries_come_first_and_follow_their_selectors() {
    let a = admit(&pod(json!({})), &catalog(VELERO_RESTORE), &own());
    assert_eq!(a.init_names(), ["v-init", "rh-init"]);
    let hooks = a.plan().unwrap().hooks;
    let got: Vec<_> = hooks
        .iter()
        .map(|h| {
            (
                h.name.as_str(),
                h.source.as_str(),
                h.index,
                h.command[0].as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("first", "velero-restore/r1", 1, "/v1"),
            ("second", "velero-restore/r1", 0, "/v2"),
            ("ours", "restorehook/ours", 1, "/rh"),
        ]
    );
}

#[test]
fn defer_leaves_velero_sources_to_velero_on_velero_pods() {
    let annotated = pod(json!({"metadata": {"annotations": {
        "init.hook.restore.velero.io/container-image": "busybox",
        "post.hook.restore.velero.io/command": "/annotated"}}}));
    let c = catalog(VELERO_RESTORE);
    // Velero-created pod (pod label) under defer: only RestoreHook hooks, and the Velero
    // annotations do not suppress them.
    let a = admit(&annotated, &c, &EngineConfig::default());
    assert_eq!(a.init_names(), ["rh-init"]);
    let cmds: Vec<_> = a
        .plan()
        .unwrap()
        .hooks
        .iter()
        .map(|h| h.command[0].clone())
        .collect();
    assert_eq!(cmds, ["/rh"]);
    // The same pod created by a controller in a labelled restore namespace: all sources, and
    // the annotations win over spec hooks of their kind.
    let mut replacement = annotated.clone();
    replacement["metadata"]["labels"] = json!({"app": "db"});
    let a = admit(
        &replacement,
        &with_ns_label(c, "r1"),
        &EngineConfig::default(),
    );
    assert_eq!(a.init_names(), ["restore-hooks-init"]);
    let plan = a.plan().unwrap();
    assert_eq!(plan.hooks.len(), 1);
    assert_eq!(
        (
            plan.hooks[0].name.as_str(),
            plan.hooks[0].source.as_str(),
            plan.hooks[0].index
        ),
        ("<from-annotation>", "annotation", 0)
    );
}

#[test]
fn annotation_precedence_is_per_kind() {
    let c = catalog(VELERO_RESTORE);
    // Init annotation only: spec exec hooks still apply.
    let a = admit(
        &pod(json!({"metadata": {"annotations": {
            "init.hook.restore.velero.io/container-image": "alpine:3",
            "init.hook.restore.velero.io/container-name": "restore-hook",
            "init.hook.restore.velero.io/command": "[\"/bin/ash\", \"-c\", \"date\"]"}}})),
        &c,
        &own(),
    );
    assert_eq!(a.init_names(), ["restore-hook"]);
    assert_eq!(
        a.pod["spec"]["initContainers"][0],
        json!({"name": "restore-hook", "image": "alpine:3", "command": ["/bin/ash", "-c", "date"]})
    );
    assert_eq!(a.plan().unwrap().hooks.len(), 3);
    // Exec annotation only: spec init hooks still apply; the single exec hook is the annotation.
    let a = admit(
        &pod(json!({"metadata": {"annotations": {
            "post.hook.restore.velero.io/command": "[\"/bin/sh\", \"-c\", \"psql < /backup.sql\"]",
            "post.hook.restore.velero.io/container": "db",
            "post.hook.restore.velero.io/on-error": "Fail",
            "post.hook.restore.velero.io/exec-timeout": "45s",
            "post.hook.restore.velero.io/wait-timeout": "5m",
            "post.hook.restore.velero.io/wait-for-ready": "TRUE"}}})),
        &c,
        &own(),
    );
    assert_eq!(a.init_names(), ["v-init", "rh-init"]);
    let h = &a.plan().unwrap().hooks;
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].command, ["/bin/sh", "-c", "psql < /backup.sql"]);
    assert_eq!(
        (
            h[0].on_error,
            h[0].exec_timeout_ms,
            h[0].wait_timeout_ms,
            h[0].wait_for_ready
        ),
        (OnError::Fail, 45_000, Some(300_000), true)
    );
}

#[test]
fn annotation_defaults() {
    let a = admit(
        &pod(json!({"metadata": {"annotations": {
            "init.hook.restore.velero.io/container-image": "busybox",
            "init.hook.restore.velero.io/command": "",
            "post.hook.restore.velero.io/command": "/usr/bin/populate /data full",
            "post.hook.restore.velero.io/exec-timeout": "0",
            "post.hook.restore.velero.io/wait-for-ready": "0"}}})),
        &catalog(""),
        &own(),
    );
    // Empty init command: the image entrypoint (Velero panics here).
    assert_eq!(
        a.pod["spec"]["initContainers"][0],
        json!({"name": "restore-hooks-init", "image": "busybox"})
    );
    let h = &a.plan().unwrap().hooks[0];
    // No splitting, no shell.
    assert_eq!(h.command, ["/usr/bin/populate /data full"]);
    assert_eq!(h.container, "db");
    assert_eq!(
        (h.exec_timeout_ms, h.wait_timeout_ms),
        (30_000, Some(3_600_000))
    );
    assert!(!h.wait_for_ready);
}

/// Under `defer`, Velero injects its own init hooks before the pod reaches the webhook; they come
/// first in source order (Velero Restore entries, then hook objects), so ours go after them.
#[test]
fn under_defer_hook_containers_follow_velero_s_own_init_hooks() {
    let c = catalog(VELERO_RESTORE);
    let ic = |names: &[&str]| -> Value {
        json!(
            names
                .iter()
                .map(|n| json!({"name": n, "image": "velero-injected"}))
                .collect::<Vec<_>>()
        )
    };
    let annotated = |name: Option<&str>| {
        let mut a = json!({"init.hook.restore.velero.io/container-image": "velero-injected"});
        if let Some(name) = name {
            a["init.hook.restore.velero.io/container-name"] = json!(name);
        }
        a
    };
    // (the pod's annotations, its init containers as Velero created it, the order after us)
    let cases: Vec<(&str, Value, Value, Vec<&str>)> = vec![
        (
            "the Restore's init entry that selects the pod",
            json!({}),
            ic(&["v-init", "app-init"]),
            vec!["v-init", "rh-init", "app-init"],
        ),
        (
            "after restore-wait and Velero's container, whichever is later",
            json!({}),
            ic(&["restore-wait", "v-init", "app-init"]),
            vec!["restore-wait", "v-init", "rh-init", "app-init"],
        ),
        (
            "a mesh moved restore-wait after Velero's container",
            json!({}),
            ic(&["v-init", "istio-init", "restore-wait", "app-init"]),
            vec![
                "v-init",
                "istio-init",
                "restore-wait",
                "rh-init",
                "app-init",
            ],
        ),
        (
            "the annotation container, by its name",
            annotated(Some("restore-data")),
            ic(&["restore-data", "app-init"]),
            vec!["restore-data", "rh-init", "app-init"],
        ),
        (
            "the annotation container under Velero's generated name",
            annotated(None),
            ic(&["velero-restore-init-0a1b2c3d", "app-init"]),
            vec!["velero-restore-init-0a1b2c3d", "rh-init", "app-init"],
        ),
        (
            // With the annotation, Velero ignores its Restore's init entries for this pod.
            "an app init container named like a Restore entry's is not Velero's under the annotation",
            annotated(Some("restore-data")),
            ic(&["v-init", "restore-data"]),
            vec!["v-init", "restore-data", "rh-init"],
        ),
        (
            "not every velero-restore-init- prefix is a generated name",
            annotated(None),
            ic(&["velero-restore-init-custom", "app-init"]),
            vec!["rh-init", "velero-restore-init-custom", "app-init"],
        ),
        (
            "nothing of Velero's in the pod",
            json!({}),
            ic(&["app-init"]),
            vec!["rh-init", "app-init"],
        ),
    ];
    for (what, annotations, init, want) in cases {
        let p = pod(json!({"metadata": {"annotations": annotations},
                            "spec": {"initContainers": init}}));
        let a = admit(&p, &c, &EngineConfig::default());
        assert_eq!(a.init_names(), want, "{what}");
        assert_eq!(a.injected, ["rh-init"], "{what}");
    }
    // Under `own` restore-hooks injects Velero's hooks itself, in source order, and a pod in a
    // labelled namespace (not created by Velero) has no Velero part: the rule above is `defer`'s.
    let own_pod = pod(json!({"spec": {"initContainers": ic(&["app-init"])}}));
    assert_eq!(
        admit(&own_pod, &c, &own()).init_names(),
        ["v-init", "rh-init", "app-init"]
    );
}

#[test]
fn init_containers_go_after_the_last_restore_wait() {
    let hook = catalog(
        r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: h}
spec:
  postHooks:
  - init: {initContainers: [{name: h1, image: busybox, command: [a]}, {name: h2, image: busybox}]}
"#,
    );
    let ic = |names: &[&str]| -> Value {
        json!({"spec": {"initContainers": names.iter().map(|n| json!({"name": n, "image": "x"})).collect::<Vec<_>>()}})
    };
    let sidecar = json!({"spec": {"initContainers": [
        {"name": "istio-validation", "image": "istio/proxyv2"},
        {"name": "istio-proxy", "image": "istio/proxyv2", "restartPolicy": "Always"}]}});
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({}), vec!["h1", "h2"]),
        (json!({"spec": {"initContainers": null}}), vec!["h1", "h2"]),
        (json!({"spec": {"initContainers": []}}), vec!["h1", "h2"]),
        (ic(&["restore-wait"]), vec!["restore-wait", "h1", "h2"]),
        (ic(&["restic-wait"]), vec!["restic-wait", "h1", "h2"]),
        (
            ic(&["restore-wait", "restic-wait", "app-init"]),
            vec!["restore-wait", "restic-wait", "h1", "h2", "app-init"],
        ),
        // A mesh webhook ran before us (Velero #3008): the hooks still need the volume data.
        (
            ic(&["istio-init", "restore-wait"]),
            vec!["istio-init", "restore-wait", "h1", "h2"],
        ),
        (
            ic(&["istio-init", "restore-wait", "migrate"]),
            vec!["istio-init", "restore-wait", "h1", "h2", "migrate"],
        ),
        (
            ic(&["restic-wait", "app-init", "restore-wait", "last"]),
            vec![
                "restic-wait",
                "app-init",
                "restore-wait",
                "h1",
                "h2",
                "last",
            ],
        ),
        (sidecar, vec!["h1", "h2", "istio-validation", "istio-proxy"]),
    ];
    for (extra, want) in cases {
        let a = admit(&pod(extra.clone()), &hook, &EngineConfig::default());
        assert_eq!(a.init_names(), want, "pod extra {extra}");
        assert_eq!(a.annotation("restore-hooks.dev/injected"), Some("h1,h2"));
    }
}

#[test]
fn existing_containers_are_kept_replaced_or_refused_never_silently_dropped() {
    let hook = catalog(
        r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: h}
spec:
  postHooks:
  - init: {initContainers: [{name: seed, image: busybox, command: [/seed], args: [--all]}]}
"#,
    );
    let with_init = |containers: Value, injected: Option<&str>| {
        let mut p = pod(json!({"spec": {"initContainers": containers}}));
        if let Some(names) = injected {
            p["metadata"]["annotations"] = json!({"restore-hooks.dev/injected": names});
        }
        p
    };
    let same = json!({"name": "seed", "image": "busybox", "command": ["/seed"], "args": ["--all"]});
    let older = json!({"name": "seed", "image": "busybox:old", "command": ["/seed"]});

    // Same name, same definition: kept, not added again.
    let a = admit(
        &with_init(json!([same.clone()]), None),
        &hook,
        &EngineConfig::default(),
    );
    assert_eq!(a.init_names(), ["seed"]);
    assert!(a.injected.is_empty());

    // Velero's copy under a random name, identical definition: kept, not added again.
    let mut random = same.clone();
    random["name"] = json!("velero-restore-init-deadfeed");
    let a = admit(
        &with_init(json!([random]), None),
        &hook,
        &EngineConfig::default(),
    );
    assert_eq!(a.init_names(), ["velero-restore-init-deadfeed"]);

    // The same image and command but other args is another container: injected.
    let mut other_args = same.clone();
    other_args["name"] = json!("velero-restore-init-cafe");
    other_args["args"] = json!(["--partial"]);
    let a = admit(
        &with_init(json!([other_args]), None),
        &hook,
        &EngineConfig::default(),
    );
    assert_eq!(a.init_names(), ["seed", "velero-restore-init-cafe"]);

    // Ours from an earlier cycle (listed in `injected`) with an older definition: replaced
    // where it stands, so a re-restore after the hook changed runs the current one.
    let p = with_init(
        json!([{"name": "restore-wait", "image": "velero/helper"}, older.clone()]),
        Some("seed"),
    );
    let a = admit(&p, &hook, &EngineConfig::default());
    assert_eq!(a.init_names(), ["restore-wait", "seed"]);
    assert_eq!(a.pod["spec"]["initContainers"][1], same);
    assert_eq!(a.annotation("restore-hooks.dev/injected"), Some("seed"));

    // Anyone else's container of that name: the hook is invalid, and the message names both.
    let p = with_init(json!([older]), None);
    let message = denied(&p, &hook, &EngineConfig::default());
    assert!(message.contains("init container \"seed\" clashes with the pod's own init container \"seed\" (image \"busybox:old\")"), "{message}");
    let app_clash = catalog(
        "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: h}\nspec: {postHooks: [{init: {initContainers: [{name: db, image: busybox}]}}]}\n",
    );
    let message = denied(&pod(json!({})), &app_clash, &EngineConfig::default());
    assert!(
        message.contains("clashes with the pod's app container \"db\""),
        "{message}"
    );
    // Under --on-invalid warn: admitted without it, with the same words as a warning.
    let a = admit(&pod(json!({})), &app_clash, &warn_own());
    assert!(a.init_names().is_empty());
    assert!(
        a.warnings[0].contains("app container \"db\""),
        "{:?}",
        a.warnings
    );
}

/// Velero's own documented example selects a whole namespace and names one container: every
/// other pod of the namespace must be admitted, told that the hook does not apply to it.
#[test]
fn spec_exec_hooks_for_a_container_the_pod_lacks_do_not_apply() {
    let docs = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r1}
spec:
  hooks:
    resources:
    - name: restore-hook-1
      includedNamespaces: [shop]
      postHooks:
      - exec: {container: postgres, command: [/bin/bash, -c, "psql < /backup/backup.sql"], waitTimeout: 5m, execTimeout: 1m, onError: Continue}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: pg}
spec:
  postHooks:
  - exec: {container: postgres, command: [/analyze]}
  - exec: {command: [/on-default-container]}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &own());
    let plan = a.plan().unwrap();
    assert_eq!(plan.hooks.len(), 1);
    assert_eq!(plan.hooks[0].command, ["/on-default-container"]);
    let na: Vec<_> = plan
        .not_applicable
        .iter()
        .map(|r| (r.source.as_str(), r.index, r.container.as_str()))
        .collect();
    assert_eq!(
        na,
        [
            ("velero-restore/r1", 0, "postgres"),
            ("restorehook/pg", 0, "postgres")
        ]
    );
    assert_eq!(a.warnings.len(), 2, "{:?}", a.warnings);
    assert!(
        a.warnings[0].contains("does not apply to this pod: it targets container \"postgres\""),
        "{:?}",
        a.warnings
    );
    // The pod's own annotation naming a missing container stays a mistake in the pod.
    let annotated = pod(json!({"metadata": {"annotations": {
        "post.hook.restore.velero.io/command": "/x", "post.hook.restore.velero.io/container": "postgres"}}}));
    assert!(
        denied(&annotated, &catalog(""), &own()).contains("post.hook.restore.velero.io/container")
    );
}

/// Velero writes `velero.io/restore-name` through GetValidName: 57 characters and 6 hex digits.
#[test]
fn long_restore_names_are_matched_by_velero_s_hashed_label() {
    let full = "nightly-schedule-for-the-payments-database-cluster-20261203101500";
    assert_eq!(full.len(), 65);
    let label = velero_label_value(full).into_owned();
    assert_ne!(label, full);
    let docs = format!(
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {{name: {full}}}
spec:
  hooks:
    resources:
    - name: from-velero
      postHooks: [{{exec: {{command: [/velero]}}}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {{name: by-full-name}}
spec:
  restores: ["nightly-schedule-*-20261203101500"]
  postHooks: [{{exec: {{command: [/ours]}}}}]
"#
    );
    let mut p = pod(json!({}));
    p["metadata"]["labels"]["velero.io/restore-name"] = json!(label);
    let a = admit(&p, &catalog(&docs), &own());
    let plan = a.plan().unwrap();
    assert_eq!(plan.restore, full, "the plan names the restore in full");
    let cmds: Vec<_> = plan.hooks.iter().map(|h| h.command[0].as_str()).collect();
    assert_eq!(cmds, ["/velero", "/ours"]);
    // The marker keeps the label value (a label must fit 63 characters).
    assert_eq!(
        a.pod["metadata"]["labels"]["restore-hooks.dev/restore-run"],
        json!(label)
    );
    // Without the Restore, the label value is all there is to match.
    let a = admit(&p, &catalog(docs.split("---").nth(1).unwrap()), &own());
    assert_eq!(
        a.plan().map(|p| p.hooks.len()),
        None,
        "the glob does not match the hashed label"
    );
}

/// Go encodes empty lists and maps as `null`: such a Restore is valid, and empty where null.
#[test]
fn velero_nulls_are_empty() {
    let docs = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r1}
spec:
  hooks:
    resources:
    - name: nulls
      includedNamespaces: null
      excludedNamespaces: null
      includedResources: null
      excludedResources: null
      labelSelector: null
      postHooks:
      - init: {initContainers: null}
      - exec: {command: [/x], container: null, onError: null, execTimeout: null}
---
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r2}
spec: {hooks: {resources: null}}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &own());
    let plan = a.plan().unwrap();
    assert_eq!(plan.hooks.len(), 1);
    assert_eq!(
        (plan.hooks[0].container.as_str(), plan.hooks[0].index),
        ("db", 1)
    );
}

#[test]
fn a_re_restore_replaces_the_stale_copy_of_a_changed_hook() {
    let v1 = catalog(
        "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: h}\nspec: {postHooks: [{init: {initContainers: [{name: seed, image: 'busybox:1'}]}}]}\n",
    );
    let v2 = catalog(
        "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: h}\nspec: {postHooks: [{init: {initContainers: [{name: seed, image: 'busybox:2'}]}}]}\n",
    );
    let first = admit(&pod(json!({})), &v1, &EngineConfig::default());
    let mut backed_up = first.pod.clone();
    backed_up["metadata"]["labels"]["velero.io/restore-name"] = json!("r2");
    let again = admit(&backed_up, &v2, &EngineConfig::default());
    assert_eq!(again.init_names(), ["seed"]);
    assert_eq!(again.pod["spec"]["initContainers"][0]["image"], "busybox:2");
    assert_eq!(again.injected, ["seed"]);
}

#[test]
fn re_restored_pods_run_their_hooks_again() {
    let hook = catalog(TWO_HOOKS);
    let first = admit(&pod(json!({})), &hook, &EngineConfig::default());
    // The pod ran its hooks, was backed up, and is now restored again.
    let mut backed_up = first.pod.clone();
    backed_up["metadata"]["labels"]["restore-hooks.dev/exec"] = json!("done");
    backed_up["metadata"]["annotations"]["restore-hooks.dev/status"] = json!("{\"hooks\":[]}");
    backed_up["metadata"]["labels"]["velero.io/restore-name"] = json!("r2");
    let again = admit(&backed_up, &hook, &EngineConfig::default());
    assert_eq!(again.init_names(), ["seed"], "not injected twice");
    assert_eq!(again.exec_label(), Some("pending"));
    assert_eq!(again.annotation("restore-hooks.dev/status"), None);
    assert_eq!(again.plan().unwrap().restore, "r2");
    assert_eq!(again.annotation("restore-hooks.dev/injected"), Some("seed"));
}

#[test]
fn stale_state_is_removed_when_no_hook_applies() {
    let mut p = pod(json!({"metadata": {"annotations": {
        "restore-hooks.dev/plan": "{\"restore\":\"old\",\"hooks\":[]}",
        "restore-hooks.dev/status": "{}"}}}));
    p["metadata"]["labels"]["restore-hooks.dev/exec"] = json!("pending");
    let a = admit(&p, &catalog(""), &EngineConfig::default());
    assert_eq!(a.exec_label(), None);
    assert_eq!(a.annotation("restore-hooks.dev/plan"), None);
    assert_eq!(a.annotation("restore-hooks.dev/status"), None);
    // A plain in-scope pod without hooks only gets the mark that lets hook objects that arrive
    // later find it.
    let d = evaluate(&pod(json!({})), NS, &catalog(""), &EngineConfig::default()).unwrap();
    let Admission::Patch { patch, .. } = d else {
        panic!("expected the restore-run mark: {d:?}")
    };
    let ops = serde_json::to_value(&patch).unwrap();
    assert_eq!(
        ops,
        json!([{"op": "add", "path": "/metadata/labels/restore-hooks.dev~1restore-run", "value": "r1"}])
    );
}

#[test]
fn identical_hook_containers_are_injected_once() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: a}
spec: {postHooks: [{init: {initContainers: [{name: common, image: busybox, command: [/c]}]}}]}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: b}
spec: {postHooks: [{init: {initContainers: [{name: common, image: busybox, command: [/c]}, {name: b-only, image: busybox}]}}]}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &EngineConfig::default());
    assert_eq!(a.init_names(), ["common", "b-only"]);
}

#[test]
fn metadata_maps_are_created_when_absent_and_keys_are_escaped() {
    let docs = "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: h}\nspec: {postHooks: [{exec: {command: [/x]}}]}\n";
    // No annotations at all; labels with `/` and `~` in keys survive untouched.
    let mut p = pod(json!({}));
    p["metadata"]["labels"]["example.com/a~b"] = json!("v");
    let a = admit(&p, &catalog(docs), &EngineConfig::default());
    assert_eq!(a.pod["metadata"]["labels"]["example.com/a~b"], "v");
    assert!(a.plan().is_some());
    // A custom restore label containing `~` and `/`: scope works and our keys are escaped.
    let config = EngineConfig {
        restore_label: "example.com/restore~name".into(),
        ..EngineConfig::default()
    };
    let mut p = pod(json!({"metadata": {"annotations": {"x/y~z": "1"}}}));
    p["metadata"]["labels"] = json!({"example.com/restore~name": "r7"});
    let decision = evaluate(&p, NS, &catalog(docs), &config).unwrap();
    let Admission::Patch { patch, .. } = &decision else {
        panic!("expected a patch: {decision:?}")
    };
    let paths: Vec<String> = patch.0.iter().map(|op| op.path().to_string()).collect();
    assert!(
        paths.contains(&"/metadata/annotations/restore-hooks.dev~1plan".to_string()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"/metadata/labels/restore-hooks.dev~1exec".to_string()),
        "{paths:?}"
    );
    let a = admit(&p, &catalog(docs), &config);
    assert_eq!(a.plan().unwrap().restore, "r7");
    assert_eq!(a.annotation("x/y~z"), Some("1"));
}

#[test]
fn native_sidecars_are_exec_targets() {
    let p = pod(json!({"spec": {"initContainers": [
        {"name": "log-shipper", "image": "fluent-bit", "restartPolicy": "Always"}]},
        "metadata": {"annotations": {
            "post.hook.restore.velero.io/command": "/flush",
            "post.hook.restore.velero.io/container": "log-shipper"}}}));
    let a = admit(&p, &catalog(""), &own());
    assert_eq!(a.plan().unwrap().hooks[0].container, "log-shipper");
}

/// Every invalid definition is denied with the pod, the source and the problem in the message.
#[test]
fn invalid_definitions_are_denied_with_a_precise_message() {
    let rh = |spec: &str| {
        format!(
            "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {{name: bad}}\nspec: {spec}\n"
        )
    };
    let ann = |pairs: Value| pod(json!({"metadata": {"annotations": pairs}}));
    let plain_init = json!({"spec": {"initContainers": [{"name": "setup", "image": "x"}]}});
    let cases: Vec<(&str, Value, String, &[&str])> = vec![
        (
            "bad JSON command",
            ann(json!({"post.hook.restore.velero.io/command": "[\"/bin/sh\", -c]"})),
            String::new(),
            &["annotation post.hook.restore.velero.io/command", "not a JSON array of strings"],
        ),
        (
            "empty exec command",
            ann(json!({"post.hook.restore.velero.io/command": "[]"})),
            String::new(),
            &["post.hook.restore.velero.io/command", "no command"],
        ),
        (
            "unknown on-error",
            ann(json!({"post.hook.restore.velero.io/command": "/x", "post.hook.restore.velero.io/on-error": "fail"})),
            String::new(),
            &["post.hook.restore.velero.io/on-error", "\"fail\" is neither Continue nor Fail"],
        ),
        (
            "unitless exec-timeout",
            ann(json!({"post.hook.restore.velero.io/command": "/x", "post.hook.restore.velero.io/exec-timeout": "30"})),
            String::new(),
            &["post.hook.restore.velero.io/exec-timeout", "missing unit"],
        ),
        (
            "negative wait-timeout",
            ann(json!({"post.hook.restore.velero.io/command": "/x", "post.hook.restore.velero.io/wait-timeout": "-1s"})),
            String::new(),
            &["post.hook.restore.velero.io/wait-timeout", "must not be negative"],
        ),
        (
            "non-boolean wait-for-ready",
            ann(json!({"post.hook.restore.velero.io/command": "/x", "post.hook.restore.velero.io/wait-for-ready": "yes"})),
            String::new(),
            &["post.hook.restore.velero.io/wait-for-ready", "\"yes\" is not a boolean"],
        ),
        (
            "missing exec container",
            ann(json!({"post.hook.restore.velero.io/command": "/x", "post.hook.restore.velero.io/container": "postgres"})),
            String::new(),
            &["post.hook.restore.velero.io/container", "\"postgres\", which the pod does not have (containers: db)"],
        ),
        (
            "bad init command",
            ann(json!({"init.hook.restore.velero.io/container-image": "busybox", "init.hook.restore.velero.io/command": "[oops"})),
            String::new(),
            &["annotation init.hook.restore.velero.io/command"],
        ),
        (
            "bad init container name",
            ann(json!({"init.hook.restore.velero.io/container-image": "busybox", "init.hook.restore.velero.io/container-name": "Restore_Hook"})),
            String::new(),
            &["init.hook.restore.velero.io/container-name", "not a valid container name"],
        ),
        (
            "exec on plain init container",
            pod(plain_init),
            rh("{postHooks: [{exec: {container: setup, command: [/x]}}]}"),
            &["restorehook/bad postHooks[0].exec", "plain init container"],
        ),
        (
            "spec init without image",
            pod(json!({})),
            rh("{postHooks: [{exec: {command: [/x]}}, {init: {initContainers: [{name: a}]}}]}"),
            &["restorehook/bad postHooks[1].init", "initContainers[0] (\"a\") has no image"],
        ),
        (
            "spec init without name",
            pod(json!({})),
            rh("{postHooks: [{init: {initContainers: [{image: busybox}]}}]}"),
            &["initContainers[0] has no name"],
        ),
        (
            "spec init mounting a missing volume",
            pod(json!({})),
            rh("{postHooks: [{init: {initContainers: [{name: a, image: b, volumeMounts: [{name: pvc1-vm, mountPath: /r}]}]}}]}"),
            &["mounts volume \"pvc1-vm\", which the pod does not have (volumes: data)"],
        ),
        (
            "spec init that is not a container",
            pod(json!({})),
            rh("{postHooks: [{init: {initContainers: [{name: a, image: b, command: \"not-a-list\"}]}}]}"),
            &["initContainers[0] is not a valid container"],
        ),
        (
            "spec exec without command",
            pod(json!({})),
            rh("{postHooks: [{exec: {container: db}}]}"),
            &["restorehook/bad postHooks[0].exec", "no command"],
        ),
        (
            "spec exec bad timeout",
            pod(json!({})),
            rh("{postHooks: [{exec: {command: [/x], execTimeout: 1d}}]}"),
            &["execTimeout", "unknown unit \"d\""],
        ),
        (
            "invalid selector",
            pod(json!({})),
            rh("{labelSelector: {matchExpressions: [{key: app, operator: Equals, values: [db]}]}, postHooks: [{exec: {command: [/x]}}]}"),
            &["restorehook/bad", "unknown operator \"Equals\""],
        ),
        (
            "invalid selector value",
            pod(json!({})),
            rh("{labelSelector: {matchLabels: {app: 'no way'}}, postHooks: [{exec: {command: [/x]}}]}"),
            &["restorehook/bad", "value \"no way\""],
        ),
        (
            "invalid restores glob",
            pod(json!({})),
            rh("{restores: ['nightly-[0-9'], postHooks: [{exec: {command: [/x]}}]}"),
            &["restorehook/bad", "restores: invalid pattern"],
        ),
        (
            "duplicate names, different definitions",
            pod(json!({})),
            rh("{postHooks: [{init: {initContainers: [{name: a, image: one}]}}, {init: {initContainers: [{name: a, image: two}]}}]}"),
            &["restorehook/bad postHooks[1].init", "init container \"a\" is also defined, differently, by restorehook/bad postHooks[0].init"],
        ),
        (
            "velero namespace glob",
            pod(json!({})),
            "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {name: r1}\nspec: {hooks: {resources: [{name: x, includedNamespaces: ['{shop'], postHooks: [{exec: {command: [/x]}}]}]}}\n".to_string(),
            &["velero-restore/r1 resources[0] \"x\"", "invalid pattern \"{shop\""],
        ),
        (
            "exec on a pod without containers",
            pod(json!({"spec": {"containers": []}})),
            rh("{postHooks: [{exec: {command: [/x]}}]}"),
            &["the pod has no containers"],
        ),
    ];
    for (what, p, docs, wants) in cases {
        let message = denied(&p, &catalog(&docs), &own());
        for want in wants
            .iter()
            .chain(&["pod shop/db-0", "restore \"r1\"", "--on-invalid warn"])
        {
            assert!(
                message.contains(want),
                "{what}: {message:?} should contain {want:?}"
            );
        }
    }
}

#[test]
fn generated_pod_names_are_named_in_denials() {
    let mut p =
        pod(json!({"metadata": {"annotations": {"post.hook.restore.velero.io/command": "[x"}}}));
    p["metadata"].as_object_mut().unwrap().remove("name");
    p["metadata"]["generateName"] = json!("db-7d9f-");
    let message = denied(&p, &catalog(""), &own());
    assert!(message.contains("pod shop/db-7d9f-*"), "{message}");
}

#[test]
fn warn_mode_admits_without_the_invalid_hook() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: mixed}
spec:
  postHooks:
  - init: {initContainers: [{name: ok-init, image: busybox}]}
  - init: {initContainers: [{name: fine, image: busybox}, {name: broken}]}
  - exec: {command: [/good]}
  - exec: {command: [/bad], container: nope}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &warn_own());
    // The broken init hook is dropped whole: its first container may be a prerequisite of the
    // second one, so injecting half of it would be worse than none.
    assert_eq!(a.init_names(), ["ok-init"]);
    // The valid exec hook is planned to run; each invalid hook is planned as one that failed,
    // with where it is and what is wrong (§3.6), so that it shows on the pod and in the counts.
    let planned: Vec<(Vec<String>, Option<String>)> = a
        .plan()
        .unwrap()
        .hooks
        .iter()
        .map(|h| (h.command.clone(), h.invalid.clone()))
        .collect();
    assert_eq!(planned[0], (vec!["/good".to_string()], None));
    assert_eq!(
        planned.len(),
        2,
        "the exec hook for a missing container does not apply"
    );
    let (command, invalid) = &planned[1];
    assert!(command.is_empty());
    let why = invalid.as_deref().unwrap_or_default();
    assert!(
        why.starts_with("invalid, not executed: restorehook/mixed postHooks[1].init"),
        "{why}"
    );
    assert_eq!(
        a.exec_label(),
        Some("pending"),
        "the controller records them"
    );
    assert_eq!(a.warnings.len(), 2, "{:?}", a.warnings);
    assert!(
        a.warnings[0].contains("restorehook/mixed postHooks[1].init"),
        "{:?}",
        a.warnings
    );
    assert!(
        a.warnings[1].contains("postHooks[3].exec"),
        "{:?}",
        a.warnings
    );
}

/// docs/behaviour.md §3.6: a pod nothing would create again is never denied for a hook problem,
/// under `--on-invalid deny` too: one whose volume data Velero restores (it carries
/// `restore-wait`), or one Velero created (the restore pod label): Velero creates each pod once,
/// and restores the data only into it. Its invalid hooks are planned as failed; its valid ones
/// run. A pod a workload's controller creates in a labelled namespace is still denied: its
/// controller tries again once the hook is fixed.
#[test]
fn a_pod_nothing_would_create_again_is_never_denied_for_its_hooks() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: mixed}
spec:
  postHooks:
  - exec: {command: [/good]}
  - exec: {command: [/bad], onError: fail}
"#;
    let unlabelled = |extra: Value| {
        let mut p = pod(extra);
        p["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("velero.io/restore-name");
        p
    };
    let in_labelled_namespace = with_ns_label(catalog(docs), "r1");
    let message = denied(&unlabelled(json!({})), &in_labelled_namespace, &own());
    assert!(message.contains("postHooks[1].exec onError"), "{message}");
    let restoring = |name: &str| {
        json!({"spec": {"initContainers": [
            {"name": name, "image": "velero/velero-restore-helper:v1.18.0"}]}})
    };
    let cases = [
        (
            "Velero's pod",
            pod(json!({})),
            catalog(docs),
            "Velero created the pod",
        ),
        (
            "restore-wait",
            unlabelled(restoring("restore-wait")),
            in_labelled_namespace.clone(),
            "the pod restores volume data",
        ),
        (
            "restic-wait",
            unlabelled(restoring("restic-wait")),
            in_labelled_namespace.clone(),
            "the pod restores volume data",
        ),
    ];
    for (what, p, c, why) in cases {
        let decision = evaluate(&p, NS, &c, &own()).unwrap();
        let Admission::Patch {
            patch, warnings, ..
        } = decision
        else {
            panic!("{what}: admitted with a patch, got {decision:?}");
        };
        let mut patched = p.clone();
        json_patch::patch(&mut patched, &patch.0).unwrap();
        let plan = ExecPlan::from_annotation(
            patched["metadata"]["annotations"]["restore-hooks.dev/plan"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(plan.hooks.len(), 2, "{what}");
        assert_eq!(plan.hooks[0].command, ["/good"], "{what}");
        let invalid = plan.hooks[1].invalid.as_deref().unwrap_or_default();
        assert!(
            invalid.contains("postHooks[1].exec onError"),
            "{what}: {invalid}"
        );
        assert_eq!(
            (plan.hooks[1].index, plan.hooks[1].source.as_str()),
            (1, "restorehook/mixed"),
            "{what}"
        );
        assert!(
            warnings.iter().any(|w| w.contains(why)),
            "{what}: {warnings:?}"
        );
    }
    let without = unlabelled(json!({}));
    // A plan too large to sign: one failed hook says so, rather than a denial.
    let long = "x".repeat(70 * 1024);
    let big = format!(
        "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {{name: big}}\n\
         spec:\n  postHooks: [{{exec: {{command: [/bin/echo, {long}]}}}}]\n"
    );
    let message = denied(&without, &with_ns_label(catalog(&big), "r1"), &own());
    assert!(message.contains("KiB restore-hooks allows"), "{message}");
    let a = admit(&pod(restoring("restore-wait")), &catalog(&big), &own());
    let plan = a.plan().unwrap();
    assert_eq!(plan.hooks.len(), 1);
    assert!(
        plan.hooks[0]
            .invalid
            .as_deref()
            .is_some_and(|w| w.contains("KiB restore-hooks allows")),
        "{:?}",
        plan.hooks[0]
    );
}

#[test]
fn undecodable_pods_are_errors_not_panics() {
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": "oops"}});
    assert!(evaluate(&p, NS, &catalog(""), &EngineConfig::default()).is_err());
}

#[test]
fn oversized_plans_are_denied_with_their_size() {
    let long = "x".repeat(70 * 1024);
    let docs = format!(
        "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {{name: big}}\nspec: {{postHooks: [{{exec: {{command: [/bin/sh, -c, '{long}']}}}}]}}\n"
    );
    for config in [EngineConfig::default(), warn_own()] {
        let message = denied(&pod(json!({})), &catalog(&docs), &config);
        assert!(
            message.contains("its exec plan would be") && message.contains("over the 64 KiB"),
            "{message}"
        );
    }
    // Other annotations leave too little room for ours and the status to come.
    let crowded = pod(json!({"metadata": {"annotations": {"big": "y".repeat(230 * 1024)}}}));
    let small = catalog(
        "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: h}\nspec: {postHooks: [{exec: {command: [/x]}}]}\n",
    );
    let message = denied(&crowded, &small, &EngineConfig::default());
    assert!(
        message.contains("over Kubernetes' limit of 256 KiB"),
        "{message}"
    );
}

#[test]
fn exec_timeouts_over_the_cap_are_capped_with_a_warning() {
    let docs = "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: h}\nspec: {postHooks: [{exec: {command: [/x], execTimeout: 10h}}]}\n";
    let a = admit(&pod(json!({})), &catalog(docs), &EngineConfig::default());
    assert_eq!(a.plan().unwrap().hooks[0].exec_timeout_ms, 4 * 3_600_000);
    assert!(
        a.warnings[0].contains("exceeds --max-exec-timeout 4h0m0s; capped"),
        "{:?}",
        a.warnings
    );
}

#[test]
fn cluster_restore_hooks_select_namespaces_by_label_and_come_before_restore_hooks() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: ClusterRestoreHook
metadata: {name: platform}
spec:
  namespaceSelector: {matchLabels: {tier: data}}
  labelSelector: {matchLabels: {app: db}}
  postHooks: [{exec: {command: [/cluster]}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: ClusterRestoreHook
metadata: {name: elsewhere}
spec:
  namespaceSelector: {matchLabels: {tier: web}}
  postHooks: [{exec: {command: [/never]}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: local}
spec: {postHooks: [{exec: {command: [/local]}}]}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {tier: data}}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &own());
    let got: Vec<_> = a
        .plan()
        .unwrap()
        .hooks
        .iter()
        .map(|h| (h.source.clone(), h.command[0].clone()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "clusterrestorehook/platform".to_string(),
                "/cluster".to_string()
            ),
            ("restorehook/local".to_string(), "/local".to_string())
        ]
    );
}

/// The plan of a decision that patched the pod, as written.
fn planned(decision: Admission, pod: &Value) -> (ExecPlan, Vec<String>) {
    let Admission::Patch {
        patch, warnings, ..
    } = decision
    else {
        panic!("expected a patch, got {decision:?}");
    };
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &patch.0).unwrap();
    let text = patched["metadata"]["annotations"]["restore-hooks.dev/plan"]
        .as_str()
        .expect("a plan");
    (ExecPlan::from_annotation(text).unwrap(), warnings)
}

const ALLOW_DB_ANNOTATIONS: &str = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: allow-db}
spec:
  labelSelector: {matchLabels: {app: db}}
  podAnnotationHooks: Allow
"#;

const SPEC_EXEC: &str = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: spec-exec}
spec:
  postHooks:
  - exec: {command: [/bin/spec]}
"#;

#[test]
fn an_annotation_exec_hook_runs_only_with_an_author_entitled_to_exec() {
    // docs/behaviour.md §9.9: the pod's creator may exec, Velero created it under `own`, or a
    // hook object allows the pod's annotation hooks; otherwise the hook is planned refused.
    let annotated = pod(json!({"metadata": {
        "labels": {"velero.io/restore-name": null},
        "annotations": {"post.hook.restore.velero.io/command": "[\"/bin/migrate\"]"}}}));
    let velero_pod = pod(json!({"metadata": {"annotations": {
        "post.hook.restore.velero.io/command": "[\"/bin/migrate\"]"}}}));
    let ns_scope = |docs: &str| with_ns_label(catalog(docs), "r-ns");
    let velero_sa = "system:serviceaccount:velero:velero";
    let (granted, denied, unknown) = (
        ExecRight::Granted,
        ExecRight::Denied,
        ExecRight::Unknown("timed out".into()),
    );
    let who = |username, exec_right| Requester {
        username,
        exec_right,
    };
    // (pod, catalog, config, requester, allowedBy or the refusal's words)
    type Row<'a> = (
        &'a Value,
        StaticCatalog,
        EngineConfig,
        Requester<'a>,
        Result<&'a str, &'a str>,
    );
    let rows: Vec<Row<'_>> = vec![
        (
            &annotated,
            ns_scope(""),
            EngineConfig::default(),
            who("alice", &granted),
            Ok("creator"),
        ),
        (
            &annotated,
            ns_scope(""),
            EngineConfig::default(),
            who("mallory", &denied),
            Err("created by mallory, who may not create pods/exec in namespace shop"),
        ),
        (
            &annotated,
            ns_scope(""),
            EngineConfig::default(),
            who("bob", &unknown),
            Err("could not be checked (timed out)"),
        ),
        (
            &annotated,
            ns_scope(ALLOW_DB_ANNOTATIONS),
            EngineConfig::default(),
            who(
                "system:serviceaccount:kube-system:replicaset-controller",
                &denied,
            ),
            Ok("restorehook/allow-db"),
        ),
        // Velero's ServiceAccount counts under `own` only, and only by its exact username.
        (
            &velero_pod,
            catalog(""),
            own(),
            who(velero_sa, &denied),
            Ok("velero"),
        ),
        (
            &velero_pod,
            catalog(""),
            own(),
            who("velero", &denied),
            Err("created by velero, who"),
        ),
    ];
    for (p, c, config, requester, want) in rows {
        let (plan, warnings) = planned(
            evaluate_as(p, NS, &c, &config, &requester, PLAN_ID).unwrap(),
            p,
        );
        assert_eq!(plan.hooks.len(), 1, "{requester:?}");
        let hook = &plan.hooks[0];
        assert_eq!(hook.source, "annotation");
        match want {
            Ok(by) => {
                assert_eq!(hook.allowed_by.as_deref(), Some(by), "{requester:?}");
                assert_eq!(hook.refused, None);
            }
            Err(words) => {
                let why = hook.refused.as_deref().expect("refused");
                assert!(why.contains(words), "{requester:?}: {why}");
                assert_eq!(hook.allowed_by, None);
                assert!(
                    warnings
                        .iter()
                        .any(|w| w.contains("annotation exec hook refused")),
                    "{warnings:?}"
                );
            }
        }
    }

    // A refused annotation hook keeps its precedence: spec exec hooks do not take its place.
    let (plan, _) = planned(
        evaluate_as(
            &annotated,
            NS,
            &ns_scope(SPEC_EXEC),
            &EngineConfig::default(),
            &who("mallory", &denied),
            PLAN_ID,
        )
        .unwrap(),
        &annotated,
    );
    assert_eq!(plan.hooks.len(), 1);
    assert!(plan.hooks[0].refused.is_some());
    // Under `defer` a Velero pod's annotations are Velero's: no annotation hook at all.
    let (plan, _) = planned(
        evaluate_as(
            &velero_pod,
            NS,
            &catalog(SPEC_EXEC),
            &EngineConfig::default(),
            &who("mallory", &denied),
            PLAN_ID,
        )
        .unwrap(),
        &velero_pod,
    );
    assert_eq!(plan.hooks.len(), 1);
    assert_eq!(plan.hooks[0].source, "restorehook/spec-exec");
}

#[test]
fn a_pod_that_brings_a_plan_gets_a_new_one() {
    // docs/behaviour.md §4.6: a plan that looks like the webhook's own (a reinvocation, or a copy
    // of a fresh plan) is never kept; each admission issues its own id.
    let c = catalog(TWO_HOOKS);
    let first = admit(&pod(json!({})), &c, &EngineConfig::default());
    assert_eq!(first.plan().unwrap().id, PLAN_ID);
    let alice = Requester {
        username: "alice",
        exec_right: &ExecRight::Granted,
    };
    let again = evaluate_as(
        &first.pod,
        NS,
        &c,
        &EngineConfig::default(),
        &alice,
        "ZZZZZZZZZZZZZZZZ",
    )
    .unwrap();
    let Admission::Patch { patch, .. } = &again else {
        panic!("{again:?}")
    };
    let paths: Vec<String> = patch.0.iter().map(|op| op.path().to_string()).collect();
    assert_eq!(
        paths,
        ["/metadata/annotations/restore-hooks.dev~1plan"],
        "only the plan changes (unsigned here: no signature to replace)"
    );
    let (plan, _) = planned(again, &first.pod);
    assert_eq!(plan.id, "ZZZZZZZZZZZZZZZZ");
}

/// `--default-wait-timeout` fills an unset `waitTimeout`; a hook's own `0` keeps "no limit", and so
/// does the flag at 0 (docs/behaviour.md §5.2, §6.5).
#[test]
fn unset_wait_timeouts_take_the_default_and_zero_means_no_limit() {
    let docs = |wait: &str| {
        format!(
            "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {{name: h}}\n\
             spec:\n  postHooks:\n  - exec: {{command: [/bin/true]{wait}}}\n"
        )
    };
    let no_default = EngineConfig {
        default_wait_timeout_ms: None,
        ..EngineConfig::default()
    };
    let cases: [(&str, &str, &EngineConfig, Option<u64>); 5] = [
        (
            "unset: the default",
            "",
            &EngineConfig::default(),
            Some(3_600_000),
        ),
        (
            "own value",
            ", waitTimeout: 5m",
            &EngineConfig::default(),
            Some(300_000),
        ),
        (
            "own zero: no limit",
            ", waitTimeout: \"0\"",
            &EngineConfig::default(),
            None,
        ),
        ("unset, flag at 0: no limit", "", &no_default, None),
        (
            "own value, flag at 0",
            ", waitTimeout: 10s",
            &no_default,
            Some(10_000),
        ),
    ];
    for (case, wait, config, want) in cases {
        let a = admit(&pod(json!({})), &catalog(&docs(wait)), config);
        assert_eq!(a.plan().unwrap().hooks[0].wait_timeout_ms, want, "{case}");
    }
}

/// An annotation exec hook without `post.hook.restore.velero.io/wait-timeout` gets
/// `--default-wait-timeout` too, not "no limit" (docs/behaviour.md §2.1, §6.5).
#[test]
fn an_annotation_hook_without_a_wait_timeout_takes_the_default() {
    let annotated = |wait: Option<&str>| {
        let mut annotations = json!({"post.hook.restore.velero.io/command": "/bin/true"});
        if let Some(wait) = wait {
            annotations["post.hook.restore.velero.io/wait-timeout"] = json!(wait);
        }
        pod(json!({"metadata": {"annotations": annotations}}))
    };
    // Under `own`, restore-hooks runs the annotation hooks of the pods Velero creates.
    let no_default = EngineConfig {
        default_wait_timeout_ms: None,
        ..own()
    };
    let cases: [(&str, Option<&str>, &EngineConfig, Option<u64>); 4] = [
        ("unset: the default", None, &own(), Some(3_600_000)),
        ("own value", Some("5m"), &own(), Some(300_000)),
        ("own zero: no limit", Some("0"), &own(), None),
        ("unset, flag at 0: no limit", None, &no_default, None),
    ];
    for (case, wait, config, want) in cases {
        let a = admit(&annotated(wait), &catalog(""), config);
        assert_eq!(a.plan().unwrap().hooks[0].wait_timeout_ms, want, "{case}");
    }
}

const PARAMETERS: &str = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r1, namespace: velero}
spec:
  backupName: nightly-backup
  namespaceMapping: {prod: shop}
  hooks:
    resources:
    - name: velero-entry
      postHooks:
      - exec: {container: db, command: [/bin/echo, "$(RESTORE_NAME)"]}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate}
spec:
  postHooks:
  - init:
      initContainers:
      - name: fetch
        image: restore-tools:1
        args: ["--backup=$(BACKUP_NAME)", "--pod=$(POD_NAME)"]
  - exec:
      command: [/bin/migrate, "--restore=$(RESTORE_NAME)", "--backup=$(BACKUP_NAME)",
                "--from=$(SOURCE_NAMESPACE)/$(POD_NAME)", "--to=$(NAMESPACE)",
                "--ordinal=$(POD_ORDINAL)", "--literal=$$(RESTORE_NAME)", "$(OTHER)"]
"#;

/// Hook-object hooks take the restore's parameters: exec commands expanded into the signed plan,
/// init containers given env entries for the kubelet to expand; Velero's own entries run as
/// Velero defines them (docs/behaviour.md §2.8).
#[test]
fn restore_parameters_expand_in_hook_object_hooks_only() {
    let sts = json!({"metadata": {"labels": {"statefulset.kubernetes.io/pod-name": "db-0"}}});
    let a = admit(&pod(sts), &catalog(PARAMETERS), &own());
    let plan = a.plan().unwrap();
    let by_name = |name: &str| plan.hooks.iter().find(|h| h.name == name).unwrap();
    assert_eq!(
        by_name("velero-entry").command,
        ["/bin/echo", "$(RESTORE_NAME)"]
    );
    assert_eq!(
        by_name("migrate").command,
        [
            "/bin/migrate",
            "--restore=r1",
            "--backup=nightly-backup",
            "--from=prod/db-0",
            "--to=shop",
            "--ordinal=0",
            "--literal=$(RESTORE_NAME)",
            "$(OTHER)"
        ]
    );
    let fetch = &a.pod["spec"]["initContainers"][0];
    assert_eq!(
        fetch["args"],
        json!(["--backup=$(BACKUP_NAME)", "--pod=$(POD_NAME)"])
    );
    assert_eq!(
        fetch["env"],
        json!([{"name": "BACKUP_NAME", "value": "nightly-backup"},
               {"name": "POD_NAME", "value": "db-0"}])
    );

    // A generateName pod: no name, no ordinal yet. The kubelet gets POD_NAME from the downward
    // API; the exec hook keeps $(POD_NAME) as written and the admission says why.
    let mut generated = pod(json!({}));
    generated["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("name");
    generated["metadata"]["generateName"] = json!("web-");
    let a = admit(&generated, &catalog(PARAMETERS), &own());
    let migrate = a
        .plan()
        .unwrap()
        .hooks
        .into_iter()
        .find(|h| h.name == "migrate")
        .unwrap();
    assert_eq!(migrate.command[3], "--from=prod/$(POD_NAME)");
    assert_eq!(migrate.command[5], "--ordinal=$(POD_ORDINAL)");
    assert!(
        a.warnings
            .iter()
            .any(|w| w.contains("$(POD_NAME) stays as written")),
        "{:?}",
        a.warnings
    );
    assert_eq!(
        a.pod["spec"]["initContainers"][0]["env"][1],
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    );
}

/// `runOn` (docs/behaviour.md §6.15): hook objects' `OnePod` reaches the signed plan; Velero's
/// entries have no such field and run on every pod; a misspelt value is invalid, naming the field.
#[test]
fn run_on_one_pod_is_planned_for_hook_object_hooks_only() {
    let docs = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r1, namespace: velero}
spec:
  hooks:
    resources:
    - name: velero-entry
      postHooks: [{exec: {container: db, command: [/bin/true], runOn: OnePod}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate}
spec:
  postHooks: [{exec: {command: [/bin/migrate], runOn: OnePod}}, {exec: {command: [/bin/true]}}]
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &own());
    let run_on: Vec<(String, RunOn)> = a
        .plan()
        .unwrap()
        .hooks
        .iter()
        .map(|h| (format!("{}#{}", h.name, h.index), h.run_on))
        .collect();
    assert_eq!(
        run_on,
        [
            ("velero-entry#0".to_string(), RunOn::EveryPod),
            ("migrate#0".to_string(), RunOn::OnePod),
            ("migrate#1".to_string(), RunOn::EveryPod)
        ]
    );
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    assert_eq!(raw["hooks"][1]["runOn"], "OnePod");
    assert!(
        raw["hooks"][2].get("runOn").is_none(),
        "the default is left out"
    );

    let typo = "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: m}\n\
                spec:\n  postHooks: [{exec: {command: [/bin/true], runOn: onePod}}]\n";
    let message = denied(&pod(json!({})), &catalog(typo), &EngineConfig::default());
    assert!(
        message.contains("runOn") && message.contains("neither EveryPod nor OnePod"),
        "{message}"
    );
}

/// `after` (docs/behaviour.md §6.16): hook objects' entries reach the signed plan resolved to one
/// kind and one namespace (Velero's entries have no such field); a cycle across objects is
/// invalid, naming it; a hook no object has is not (its pods may come later, and the wait is
/// bounded by waitTimeout).
#[test]
fn after_is_planned_for_hook_object_hooks_and_cycles_are_invalid() {
    let docs = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r1, namespace: velero}
spec:
  hooks:
    resources:
    - name: velero-entry
      postHooks: [{exec: {container: db, command: [/bin/true], after: [{hook: migrate}]}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate}
spec:
  postHooks:
  - exec:
      command: [/bin/migrate]
      after: [{hook: db-restore}, {hook: db-restore}, {hook: not-yet}, {hook: ca, kind: ClusterRestoreHook}]
  - exec: {command: [/bin/true]}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &own());
    let after: Vec<(String, usize)> = a
        .plan()
        .unwrap()
        .hooks
        .iter()
        .map(|h| (format!("{}#{}", h.name, h.index), h.after.len()))
        .collect();
    assert_eq!(
        after,
        [
            ("velero-entry#0".to_string(), 0),
            ("migrate#0".to_string(), 3),
            ("migrate#1".to_string(), 0),
        ]
    );
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    assert_eq!(
        raw["hooks"][1]["after"],
        json!([
            {"hook": "db-restore", "kind": "RestoreHook", "namespace": NS},
            {"hook": "not-yet", "kind": "RestoreHook", "namespace": NS},
            {"hook": "ca", "kind": "ClusterRestoreHook", "namespace": NS},
        ]),
        "each entry is resolved: the waiting object's kind, the pod's namespace"
    );
    assert!(raw["hooks"][2].get("after").is_none(), "none is left out");

    let cycle = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: a-migrate}
spec:
  postHooks: [{exec: {command: [/bin/migrate], after: [{hook: b-seed, kind: ClusterRestoreHook}]}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: ClusterRestoreHook
metadata: {name: b-seed}
spec:
  postHooks: [{exec: {command: [/bin/seed], after: [{hook: c-other, kind: RestoreHook}, {hook: a-migrate, kind: RestoreHook}]}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: c-other}
spec:
  postHooks: [{exec: {command: [/bin/true]}}]
"#;
    let message = denied(&pod(json!({})), &catalog(cycle), &own());
    assert!(
        message.contains("restorehook/a-migrate postHooks[0].exec after: waits in a cycle (a-migrate → clusterrestorehook/b-seed → a-migrate)"),
        "{message}"
    );
    assert!(
        message.contains("clusterrestorehook/b-seed postHooks[0].exec after: waits in a cycle (clusterrestorehook/b-seed → a-migrate → clusterrestorehook/b-seed)"),
        "{message}"
    );
    // Under --on-invalid warn the pod is admitted with the hooks outside the cycle to run, and
    // those on it planned as failed (§3.6).
    let warned = admit(&pod(json!({})), &catalog(cycle), &warn_own());
    let names: Vec<(String, bool)> = warned
        .plan()
        .unwrap()
        .hooks
        .iter()
        .map(|h| (h.name.clone(), h.invalid.is_some()))
        .collect();
    assert_eq!(
        names,
        [
            ("c-other".to_string(), false),
            ("b-seed".to_string(), true),
            ("a-migrate".to_string(), true)
        ]
    );
    assert!(
        warned
            .warnings
            .iter()
            .any(|w| w.contains("waits in a cycle")),
        "{:?}",
        warned.warnings
    );
    // Without the kind, a-migrate waits for a RestoreHook b-seed, which does not exist: no cycle.
    let by_name = cycle.replace("{hook: b-seed, kind: ClusterRestoreHook}", "{hook: b-seed}");
    let a = admit(&pod(json!({})), &catalog(&by_name), &own());
    assert_eq!(
        a.plan().unwrap().hooks.len(),
        3,
        "a-migrate, b-seed and c-other, none invalid"
    );
}

/// docs/behaviour.md §6.16, §6.20: a namespace's objects never change the admission or the plan
/// of a pod in another namespace. A tenant of `team-b` names its RestoreHook like `shop`'s awaited
/// hook and makes it wait for `shop`'s waiting hook: in the old, name-keyed graph that was a cycle
/// that denied every `shop` pod planning the waiting hook.
#[test]
fn another_namespaces_objects_never_change_a_pods_admission() {
    let shop = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate}
spec:
  postHooks: [{exec: {command: [/bin/migrate], after: [{hook: db-restore}]}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: db-restore}
spec:
  postHooks: [{exec: {command: [/bin/restore]}}]
"#;
    let tenant_b = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: db-restore, namespace: team-b}
spec:
  restores: ["nothing-matches-*"]
  postHooks: [{exec: {command: [/bin/true], after: [{hook: migrate}]}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate, namespace: team-b}
spec:
  postHooks: [{exec: {command: [/bin/true], after: [{hook: db-restore}]}}]
"#;
    let alone = admit(&pod(json!({})), &catalog(shop), &own());
    let both = admit(
        &pod(json!({})),
        &catalog(&format!("{shop}---{tenant_b}")),
        &own(),
    );
    assert_eq!(
        alone.annotation("restore-hooks.dev/plan"),
        both.annotation("restore-hooks.dev/plan"),
        "team-b's objects change nothing in shop's plan"
    );
    assert_eq!(both.plan().unwrap().hooks.len(), 2);

    // The same objects inside shop make a cycle, unless their `restores` cannot match this
    // restore (an object that cannot apply to the pod waits for nothing in its restore).
    let in_shop = tenant_b.replace(", namespace: team-b", "");
    let a = admit(&pod(json!({})), &catalog(&in_shop), &own());
    assert_eq!(a.plan().unwrap().hooks.len(), 1, "migrate alone");
    let cyclic = in_shop.replace("  restores: [\"nothing-matches-*\"]\n", "");
    let message = denied(&pod(json!({})), &catalog(&cyclic), &own());
    assert!(
        message.contains("waits in a cycle (db-restore → migrate → db-restore)"),
        "{message}"
    );

    // A RestoreHook may not wait in another namespace; a ClusterRestoreHook may.
    let reach = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate}
spec:
  postHooks: [{exec: {command: [/bin/migrate], after: [{hook: db-restore, namespace: data}]}}]
"#;
    let message = denied(&pod(json!({})), &catalog(reach), &own());
    assert!(
        message.contains("a RestoreHook waits only for hooks in its own namespace (shop)"),
        "{message}"
    );
    let platform = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: ClusterRestoreHook
metadata: {name: migrate}
spec:
  postHooks: [{exec: {command: [/bin/migrate], after: [{hook: db-restore, kind: RestoreHook, namespace: data}]}}]
"#;
    let a = admit(&pod(json!({})), &catalog(platform), &own());
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    assert_eq!(
        raw["hooks"][0]["after"],
        json!([{"hook": "db-restore", "kind": "RestoreHook", "namespace": "data"}])
    );
}

/// docs/behaviour.md §6.20: the plan says who vouches that the pod belongs to its restore, from
/// the identity that created it (never from its labels).
#[test]
fn the_plan_says_who_vouches_for_the_pod() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate}
spec:
  postHooks: [{exec: {command: [/bin/migrate], runOn: OnePod}}]
"#;
    let cases = [
        (
            "system:serviceaccount:velero:velero",
            ExecRight::Denied,
            "velero",
        ),
        (
            "system:serviceaccount:kube-system:statefulset-controller",
            ExecRight::Denied,
            "controller",
        ),
        (
            "system:kube-controller-manager",
            ExecRight::Denied,
            "controller",
        ),
        ("alice", ExecRight::Granted, "creator"),
        ("mallory", ExecRight::Denied, "nobody"),
        (
            "system:serviceaccount:kube-system:mallory",
            ExecRight::Denied,
            "nobody",
        ),
        (
            "system:serviceaccount:shop:statefulset-controller",
            ExecRight::Denied,
            "nobody",
        ),
        ("", ExecRight::Unknown("no answer".into()), "nobody"),
    ];
    for (username, exec_right, want) in cases {
        let requester = Requester {
            username,
            exec_right: &exec_right,
        };
        let decision = evaluate_as(
            &pod(json!({})),
            NS,
            &catalog(docs),
            &own(),
            &requester,
            PLAN_ID,
        )
        .unwrap();
        let Admission::Patch { patch, .. } = decision else {
            panic!("{username}: expected a patch, got {decision:?}");
        };
        let mut patched = pod(json!({}));
        json_patch::patch(&mut patched, &patch.0).unwrap();
        let plan: Value = serde_json::from_str(
            patched["metadata"]["annotations"]["restore-hooks.dev/plan"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(plan["vouchedBy"], want, "{username}");
    }
}

/// `retry` (docs/behaviour.md §6.17): a hook object's policy reaches the signed plan with its
/// defaults; an invalid one denies the pod, naming the field.
#[test]
fn retry_is_planned_with_its_defaults_for_hook_object_hooks() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate}
spec:
  postHooks:
  - exec: {command: [/bin/migrate], retry: {onExitCodes: [75, 75], idempotent: true}}
  - exec: {command: [/bin/true], retry: {attempts: 1}}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &own());
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    assert_eq!(
        raw["hooks"][0]["retry"],
        json!({"attempts": 3, "backoffMs": 1000, "maxBackoffMs": 30000, "onExitCodes": [75], "idempotent": true})
    );
    assert!(
        raw["hooks"][1].get("retry").is_none(),
        "one attempt: no retry"
    );

    let bad = "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: m}\n\
               spec:\n  postHooks: [{exec: {command: [/bin/true], retry: {backoff: 5x}}}]\n";
    let message = denied(&pod(json!({})), &catalog(bad), &own());
    assert!(
        message.contains("restorehook/m postHooks[0].exec retry: backoff:"),
        "{message}"
    );
}

/// `image` (docs/behaviour.md §6.18): a hook object's image and volume mounts reach the signed
/// plan; a mount of a volume the pod lacks, or mounts without an image, are invalid.
#[test]
fn an_image_hook_is_planned_with_its_mounts_and_bad_mounts_are_invalid() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: debug}
spec:
  postHooks:
  - exec: {command: [/bin/reindex], image: "busybox:1.36", volumeMounts: [{name: data, mountPath: /data}]}
"#;
    let a = admit(&pod(json!({})), &catalog(docs), &own());
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    assert_eq!(
        raw["hooks"][0]["ephemeral"],
        json!({"image": "busybox:1.36", "volumeMounts": [{"name": "data", "mountPath": "/data"}],
               "securityContext": RESTRICTED.clone()})
    );
    assert_eq!(
        raw["hooks"][0]["container"], "db",
        "it targets the pod's first container"
    );

    let missing = docs.replace("name: data", "name: cache");
    let message = denied(&pod(json!({})), &catalog(&missing), &own());
    assert!(
        message.contains(
            "restorehook/debug postHooks[0].exec volumeMounts: mounts volume \"cache\", which the pod does not have (volumes: data)"
        ),
        "{message}"
    );
    let no_image = docs.replace("image: \"busybox:1.36\", ", "");
    let message = denied(&pod(json!({})), &catalog(&no_image), &own());
    assert!(
        message.contains("restorehook/debug postHooks[0].exec image: volumeMounts without image"),
        "{message}"
    );
}

/// §1.6: a restore-namespace label brings a pod into scope only while the Velero Restore it names
/// is in its window (running, or ended less than --restore-window ago). Past it, the pod is not a
/// restored pod: admitted unchanged with a warning that says to remove the label, and any
/// restore-hooks state it was created with removed. A label naming no Velero Restore (another
/// tool) and the pods Velero creates are not affected.
#[test]
fn a_restore_namespace_label_counts_only_in_its_restores_window() {
    let restore = |name: &str, status: &str| {
        format!(
            r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {{name: {name}, creationTimestamp: "2026-12-04T08:00:00Z"}}
spec: {{includedNamespaces: [{NS}]}}
status: {status}
"#
        )
    };
    let hook = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: warm}
spec:
  postHooks: [{exec: {command: [/warm]}}]
"#;
    let docs = [
        restore(
            "done",
            r#"{phase: Completed, completionTimestamp: "2026-12-04T09:00:00Z"}"#,
        ),
        restore("running", "{phase: InProgress}"),
        hook.to_string(),
    ]
    .join("---\n");
    // Created by a ReplicaSet: no restore label.
    let mut replacement = pod(json!({}));
    replacement["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("velero.io/restore-name");
    let config = EngineConfig::default();
    // Issued at 10:00: the window of `done` closed at 09:30.
    let a = admit(
        &replacement,
        &with_ns_label(catalog(&docs), "done"),
        &config,
    );
    assert!(a.plan().is_none(), "{}", a.pod);
    assert_eq!(a.warnings.len(), 1, "{:?}", a.warnings);
    assert!(
        a.warnings[0].contains("restore window closed at 2026-12-04T09:30:00Z")
            && a.warnings[0].contains("kubectl label namespace shop restore-hooks.dev/restore-"),
        "{:?}",
        a.warnings
    );
    // A longer window, a running Restore, or another tool's restore name: in scope.
    let long = EngineConfig {
        restore_window_ms: 2 * 3_600_000,
        ..EngineConfig::default()
    };
    for (label, config) in [
        ("done", &long),
        ("running", &config),
        ("other-tool", &config),
    ] {
        let a = admit(&replacement, &with_ns_label(catalog(&docs), label), config);
        let plan = a.plan().unwrap_or_else(|| panic!("{label}: {}", a.pod));
        assert_eq!(plan.hooks[0].command, ["/warm"], "{label}");
    }
    // Velero's own pod names its restore itself.
    let a = admit(
        &pod(json!({})),
        &with_ns_label(catalog(&docs), "done"),
        &config,
    );
    assert!(a.plan().is_some());
    // State brought along into a closed window is removed, not left for the controller.
    let forged = pod(json!({"metadata": {
        "labels": {"velero.io/restore-name": null, "restore-hooks.dev/exec": "pending",
                   "restore-hooks.dev/restore-run": "done"},
        "annotations": {"restore-hooks.dev/plan": "{}", "restore-hooks.dev/plan-signature": "x",
                        "restore-hooks.dev/status": "{}"},
    }}));
    let a = admit(&forged, &with_ns_label(catalog(&docs), "done"), &config);
    assert_eq!(a.pod["metadata"]["annotations"], json!({}), "{}", a.pod);
    assert_eq!(
        a.pod["metadata"]["labels"],
        json!({"app": "db"}),
        "{}",
        a.pod
    );
}

/// What an image hook's container gets by default: Pod Security `restricted`'s values
/// (docs/behaviour.md §6.18).
static RESTRICTED: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    json!({"runAsNonRoot": true, "allowPrivilegeEscalation": false,
           "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
});

/// An image hook's securityContext and environment (docs/behaviour.md §6.18) reach the signed
/// plan resolved for the pod: restricted's values, the target container's user and group, the
/// hook's env and envFrom; one beyond restricted, or a root pod without a user of the hook's own,
/// denies the pod naming the field (§3.4 row 17).
#[test]
fn an_image_hooks_security_context_and_env_are_planned_for_the_pod() {
    let docs = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: migrate}
spec:
  postHooks:
  - exec:
      container: db
      image: "migrate/migrate:v4"
      command: [/migrate, -database, "$(DATABASE_URL)", up]
      copyTargetEnv: true
      env:
      - {name: DATABASE_URL, valueFrom: {secretKeyRef: {name: db-creds, key: url}}}
      envFrom: [{configMapRef: {name: migrate}}]
"#;
    let app = pod(
        json!({"spec": {"containers": [{"name": "db", "image": "postgres:17",
        "securityContext": {"runAsUser": 999, "runAsGroup": 999, "privileged": false}}]}}),
    );
    let a = admit(&app, &catalog(docs), &own());
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    let mut want = RESTRICTED.clone();
    want["runAsUser"] = json!(999);
    want["runAsGroup"] = json!(999);
    assert_eq!(
        raw["hooks"][0]["ephemeral"],
        json!({"image": "migrate/migrate:v4", "securityContext": want, "copyTargetEnv": true,
               "env": [{"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "url"}}}],
               "envFrom": [{"configMapRef": {"name": "migrate"}}]})
    );
    assert_eq!(
        raw["hooks"][0]["command"],
        json!(["/migrate", "-database", "$(DATABASE_URL)", "up"]),
        "not a restore parameter: left for the kubelet to expand from env"
    );

    let privileged = docs.replace("copyTargetEnv: true", "securityContext: {privileged: true}");
    let message = denied(&app, &catalog(&privileged), &own());
    assert!(
        message.contains(
            "restorehook/migrate postHooks[0].exec securityContext: privileged: true is refused: a hook's container stays within Pod Security's restricted level"
        ),
        "{message}"
    );
    let root = pod(json!({"spec": {"securityContext": {"runAsUser": 0}}}));
    let message = denied(&root, &catalog(docs), &own());
    assert!(
        message.contains(
            "restorehook/migrate postHooks[0].exec securityContext: the pod runs as root (spec.securityContext.runAsUser: 0)"
        ),
        "{message}"
    );
    let own_user = docs.replace("copyTargetEnv: true", "securityContext: {runAsUser: 65534}");
    let a = admit(&root, &catalog(&own_user), &own());
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    assert_eq!(
        raw["hooks"][0]["ephemeral"]["securityContext"]["runAsUser"],
        65534
    );
}
