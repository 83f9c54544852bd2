//! The hook engine end to end, without a server: pod JSON + hook documents → decision → patch
//! applied with json-patch → assertions on the resulting pod, and re-running the engine on that
//! result must give no patch (reinvocation idempotence).

use std::path::Path;

use restore_hooks::catalog::StaticCatalog;
use restore_hooks::catalog::static_files::{DocumentDefaults, add_documents};
use restore_hooks::config::{EngineConfig, OnInvalid, VeleroHooksMode};
use restore_hooks::hooks::plan::{ExecPlan, OnError};
use restore_hooks::inject::{Decision, evaluate};
use serde_json::{Value, json};

const NS: &str = "shop";

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
        Decision::Deny { message } => panic!("unexpected denial: {message}"),
        Decision::Unchanged { warnings } => (pod.clone(), warnings, vec![]),
        Decision::Patch {
            patch,
            warnings,
            injected,
        } => {
            let mut patched = pod.clone();
            json_patch::patch(&mut patched, &patch.0).expect("the patch applies to the pod");
            (patched, warnings, injected)
        }
    };
    match evaluate(&patched, NS, catalog, config).expect("patched pod decodes") {
        Decision::Unchanged { .. } => {}
        other => panic!("re-running the webhook on its own output must not patch: {other:?}"),
    }
    Admitted {
        pod: patched,
        warnings,
        injected,
    }
}

fn denied(pod: &Value, catalog: &StaticCatalog, config: &EngineConfig) -> String {
    match evaluate(pod, NS, catalog, config).expect("pod decodes") {
        Decision::Deny { message } => message,
        other => panic!("expected a denial, got {other:?}"),
    }
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
        assert_eq!(d, Decision::Unchanged { warnings: vec![] });
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
    assert_eq!(h[1].wait_timeout_ms, None);
    assert!(!h[1].wait_for_ready);
    // Exact wire format of the plan (product.md §5).
    let raw: Value = serde_json::from_str(a.annotation("restore-hooks.dev/plan").unwrap()).unwrap();
    assert_eq!(
        raw["hooks"][1],
        json!({"name": "b-second", "source": "restorehook/b-second", "index": 0,
               "container": "db", "command": ["/bin/second"], "onError": "Continue",
               "execTimeoutMs": 30000, "waitTimeoutMs": null, "waitForReady": false})
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
    assert_eq!((h.exec_timeout_ms, h.wait_timeout_ms), (30_000, None));
    assert!(!h.wait_for_ready);
}

#[test]
fn init_containers_go_after_the_leading_restore_wait_run() {
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
        (
            ic(&["istio-init", "restore-wait"]),
            vec!["h1", "h2", "istio-init", "restore-wait"],
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
fn existing_containers_are_recognised_by_name_or_definition() {
    let hook = catalog(
        r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: h}
spec:
  postHooks:
  - init: {initContainers: [{name: seed, image: busybox, command: [/seed]}, {name: db, image: busybox}]}
"#,
    );
    // `db` clashes with the app container: skipped. `seed` exists as Velero injected it under a
    // random name, with the same image and command: skipped too.
    let p = pod(json!({"spec": {"initContainers": [
        {"name": "velero-restore-init-deadfeed", "image": "busybox", "command": ["/seed"]}]}}));
    let a = admit(&p, &hook, &EngineConfig::default());
    assert_eq!(a.init_names(), ["velero-restore-init-deadfeed"]);
    assert!(a.injected.is_empty());
    assert_eq!(a.annotation("restore-hooks.dev/injected"), None);
    assert_eq!(a.plan().unwrap().hooks.len(), 0);
    assert_eq!(a.exec_label(), None, "no exec hooks, no pending label");
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
    // A plain in-scope pod without hooks gets no patch at all.
    let d = evaluate(&pod(json!({})), NS, &catalog(""), &EngineConfig::default()).unwrap();
    assert_eq!(d, Decision::Unchanged { warnings: vec![] });
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
    let Decision::Patch { patch, .. } = &decision else {
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
    let cmds: Vec<_> = a
        .plan()
        .unwrap()
        .hooks
        .iter()
        .map(|h| h.command[0].clone())
        .collect();
    assert_eq!(cmds, ["/good"]);
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

#[test]
fn undecodable_pods_are_errors_not_panics() {
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": "oops"}});
    assert!(evaluate(&p, NS, &catalog(""), &EngineConfig::default()).is_err());
}
