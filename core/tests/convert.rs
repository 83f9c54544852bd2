//! `restore-hooks convert` (docs/behaviour.md §4.10), without the process: the conversion table,
//! and its proof of equivalence. For each Velero fixture (Velero's own annotation test cases,
//! the repository's annotation cases and Velero's documented Restore examples), the pod gets from
//! the converted hook objects, with the Velero hooks stripped, exactly what restore-hooks gives
//! it from the Velero source under `--velero-hooks own`: the same exec hooks (container, command,
//! onError, timeouts, readiness) in the same order, and the same init containers in the same
//! places.

use std::path::Path;

use restore_hooks_core::admission::{Admission, ExecRight, Issuer, Requester, evaluate};
use restore_hooks_core::catalog::StaticCatalog;
use restore_hooks_core::config::{EngineConfig, VeleroHooksMode};
use restore_hooks_core::convert::{
    Conversion, Document, Options, Severity, convert, read_documents,
};
use restore_hooks_core::documents::{DocumentDefaults, add_documents};
use restore_hooks_core::hooks::parameters::expand;
use restore_hooks_core::hooks::plan::{ExecPlan, PlannedHook};
use restore_hooks_core::hooks::pod::AdmittedPod;
use restore_hooks_core::hooks::resolve::PodContext;
use serde_json::{Value, json};

fn docs(text: &str) -> Vec<Document> {
    read_documents("in.yaml", text).expect("test input parses")
}

fn run(text: &str, options: &Options) -> Conversion {
    convert(&docs(text), options).expect("options are valid")
}

fn yaml(text: &str) -> Vec<yaml_serde::Value> {
    use serde::Deserialize;
    yaml_serde::Deserializer::from_str(text)
        .map(|d| yaml_serde::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The findings as `(severity, object, message)` texts, for substring checks.
fn findings(c: &Conversion, severity: Severity) -> Vec<String> {
    c.findings
        .iter()
        .filter(|f| f.severity == severity)
        .map(|f| format!("{}: {}", f.object, f.message))
        .collect()
}

fn assert_converted(c: &Conversion, want: &str) {
    assert_eq!(findings(c, Severity::Error), Vec::<String>::new());
    assert_eq!(c.not_converted, 0);
    assert_eq!(
        c.objects,
        yaml(want),
        "got:\n{}\nnotes: {:?}",
        c.to_yaml(),
        findings(c, Severity::Note)
    );
}

fn assert_not_converted(c: &Conversion, object: &str, messages: &[&str]) {
    let errors = findings(c, Severity::Error);
    for m in messages {
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(object) && e.contains(m)),
            "no error for {object} containing {m:?}; errors: {errors:#?}"
        );
    }
    assert!(
        c.objects.iter().all(|o| {
            !yaml_serde::to_string(o)
                .unwrap()
                .contains(object.split(' ').nth(1).unwrap_or(object))
        }),
        "something was written for {object}:\n{}",
        c.to_yaml()
    );
}

fn assert_note(c: &Conversion, object: &str, message: &str) {
    let notes = findings(c, Severity::Note);
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with(object) && n.contains(message)),
        "no note for {object} containing {message:?}; notes: {notes:#?}"
    );
}

const STATEFULSET: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  selector: {matchLabels: {app: db}}
  serviceName: db
  template:
    metadata:
      labels: {app: db, tier: data}
      annotations:
        init.hook.restore.velero.io/container-image: busybox:1.36
        init.hook.restore.velero.io/container-name: restore-marker
        init.hook.restore.velero.io/command: '["/bin/sh", "-c", "touch /tmp/restored"]'
        post.hook.restore.velero.io/command: '["/bin/sh", "-c", "pg_isready && psql -c \"ANALYZE\""]'
        post.hook.restore.velero.io/on-error: Fail
        post.hook.restore.velero.io/exec-timeout: 2m
        post.hook.restore.velero.io/wait-timeout: 10m
        post.hook.restore.velero.io/wait-for-ready: "true"
        prometheus.io/scrape: "true"
    spec:
      containers:
      - {name: postgres, image: postgres:17}
      - {name: metrics, image: exporter:1}
"#;

const STATEFULSET_HOOK: &str = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata:
  name: velero-statefulset-db
  namespace: shop
  annotations: {restore-hooks.dev/converted-from: "StatefulSet shop/db: spec.template.metadata.annotations"}
spec:
  labelSelector: {matchLabels: {app: db}}
  postHooks:
  - init:
      initContainers:
      - {name: restore-marker, image: busybox:1.36, command: [/bin/sh, -c, touch /tmp/restored]}
  - exec:
      container: postgres
      command: [/bin/sh, -c, pg_isready && psql -c "ANALYZE"]
      onError: Fail
      execTimeout: 2m
      waitTimeout: 10m
      waitForReady: true
"#;

#[test]
fn a_workload_s_annotations_become_one_restore_hook() {
    assert_converted(&run(STATEFULSET, &Options::default()), STATEFULSET_HOOK);
}

#[test]
fn stripping_removes_velero_s_keys_and_nothing_else() {
    let c = run(
        STATEFULSET,
        &Options {
            strip_velero_hooks: true,
            ..Options::default()
        },
    );
    let stripped = STATEFULSET
        .lines()
        .filter(|l| !l.contains(".hook.restore.velero.io/"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_converted(&c, &format!("{STATEFULSET_HOOK}\n---\n{stripped}"));
    // The order of the workload's keys is its own (a diff shows only the removed lines).
    let text = c.to_yaml();
    let workload = text.split("---\n").nth(1).unwrap();
    let keys: Vec<&str> = workload
        .lines()
        .filter(|l| !l.starts_with(' '))
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec"]);
    assert!(workload.find("serviceName").unwrap() > workload.find("selector").unwrap());
    // The only annotation left is removed with them when it is the last.
    let only_velero = STATEFULSET.replace("        prometheus.io/scrape: \"true\"\n", "");
    let c = run(
        &only_velero,
        &Options {
            strip_velero_hooks: true,
            ..Options::default()
        },
    );
    let workload = &c.objects[1];
    assert_eq!(
        workload["spec"]["template"]["metadata"],
        yaml("labels: {app: db, tier: data}")[0]
    );
}

/// Every kind with a pod template, where its template is and what selects its pods.
#[test]
fn each_kind_s_template_and_selector() {
    let exec = "post.hook.restore.velero.io/command: /bin/true";
    let cases = [
        (
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: db-0, namespace: shop, annotations: {{{exec}}},\n  labels: {{app: db, velero.io/restore-name: r1, velero.io/backup-name: b1, restore-hooks.dev/exec: done}}}}\nspec: {{containers: [{{name: db, image: x}}]}}"
            ),
            "velero-pod-db-0",
            json!({"matchLabels": {"app": "db"}}),
            "metadata.annotations",
        ),
        (
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: shop}}\nspec:\n  selector: {{matchExpressions: [{{key: app, operator: In, values: [web]}}]}}\n  template:\n    metadata: {{labels: {{app: web, v: '2'}}, annotations: {{{exec}}}}}\n    spec: {{containers: [{{name: web, image: x}}]}}"
            ),
            "velero-deployment-web",
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}),
            "spec.template.metadata.annotations",
        ),
        (
            format!(
                "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: agent, namespace: shop}}\nspec:\n  selector: {{matchLabels: {{app: agent}}}}\n  template:\n    metadata: {{labels: {{app: agent}}, annotations: {{{exec}}}}}\n    spec: {{containers: [{{name: agent, image: x}}]}}"
            ),
            "velero-daemonset-agent",
            json!({"matchLabels": {"app": "agent"}}),
            "spec.template.metadata.annotations",
        ),
        (
            format!(
                "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{name: cache, namespace: shop}}\nspec:\n  selector: {{matchLabels: {{app: cache}}}}\n  template:\n    metadata: {{labels: {{app: cache}}, annotations: {{{exec}}}}}\n    spec: {{containers: [{{name: cache, image: x}}]}}"
            ),
            "velero-replicaset-cache",
            json!({"matchLabels": {"app": "cache"}}),
            "spec.template.metadata.annotations",
        ),
        // A Job read from a cluster: its selector and labels carry its uid, which a restore
        // changes; its name labels do not.
        (
            format!(
                "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: migrate, namespace: shop}}\nspec:\n  selector: {{matchLabels: {{batch.kubernetes.io/controller-uid: 0c6f}}}}\n  template:\n    metadata:\n      labels: {{batch.kubernetes.io/controller-uid: 0c6f, controller-uid: 0c6f, batch.kubernetes.io/job-name: migrate, job-name: migrate}}\n      annotations: {{{exec}}}\n    spec: {{restartPolicy: Never, containers: [{{name: migrate, image: x}}]}}"
            ),
            "velero-job-migrate",
            json!({"matchLabels": {"batch.kubernetes.io/job-name": "migrate", "job-name": "migrate"}}),
            "spec.template.metadata.annotations",
        ),
        (
            format!(
                "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: report, namespace: shop}}\nspec:\n  schedule: '@daily'\n  jobTemplate:\n    spec:\n      template:\n        metadata: {{labels: {{app: report}}, annotations: {{{exec}}}}}\n        spec: {{restartPolicy: Never, containers: [{{name: report, image: x}}]}}"
            ),
            "velero-cronjob-report",
            json!({"matchLabels": {"app": "report"}}),
            "spec.jobTemplate.spec.template.metadata.annotations",
        ),
    ];
    for (input, name, selector, from) in cases {
        let c = run(&input, &Options::default());
        assert_eq!(
            findings(&c, Severity::Error),
            Vec::<String>::new(),
            "{input}"
        );
        assert_eq!(c.objects.len(), 1, "{input}");
        let hook: Value = serde_json::to_value(&c.objects[0]).unwrap();
        assert_eq!(hook["metadata"]["name"], name);
        assert_eq!(hook["spec"]["labelSelector"], selector, "{name}");
        assert!(
            hook["metadata"]["annotations"]["restore-hooks.dev/converted-from"]
                .as_str()
                .unwrap()
                .ends_with(from),
            "{hook}"
        );
        // The exec hook names the template's first container.
        assert_eq!(
            hook["spec"]["postHooks"][0]["exec"]["container"],
            input
                .split("containers: [{name: ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
        );
    }
}

/// Defaults: Velero's and restore-hooks' are the same (first container, Continue, 30s; an
/// unset wait timeout is restore-hooks' `--default-wait-timeout` either way), so unset stays
/// unset, and values are written as the annotations spell them.
#[test]
fn defaults_stay_unset_and_values_are_kept_as_written() {
    let c = run(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: db-0
  namespace: shop
  labels: {app: db}
  annotations:
    init.hook.restore.velero.io/container-image: busybox
    init.hook.restore.velero.io/command: ""
    init.hook.restore.velero.io/container-name: ""
    post.hook.restore.velero.io/command: /usr/bin/populate /data full
    post.hook.restore.velero.io/exec-timeout: "0"
    post.hook.restore.velero.io/wait-for-ready: "0"
    post.hook.restore.velero.io/on-error: ""
spec:
  containers: [{name: db, image: postgres}, {name: sidecar, image: x}]
"#,
        &Options::default(),
    );
    assert_converted(
        &c,
        r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata:
  name: velero-pod-db-0
  namespace: shop
  annotations: {restore-hooks.dev/converted-from: "Pod shop/db-0: metadata.annotations"}
spec:
  labelSelector: {matchLabels: {app: db}}
  postHooks:
  - init: {initContainers: [{name: restore-hooks-init, image: busybox}]}
  - exec: {container: db, command: [/usr/bin/populate /data full], execTimeout: "0"}
"#,
    );
}

#[test]
fn commands_run_as_written_although_hook_objects_expand_parameters() {
    let c = run(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: db-0
  labels: {app: db}
  annotations:
    init.hook.restore.velero.io/container-image: busybox
    init.hook.restore.velero.io/command: '["/bin/sh", "-c", "echo $(POD_NAME) $(OTHER) $$"]'
    post.hook.restore.velero.io/command: '["/bin/sh", "-c", "kill -0 $$ && echo $(RESTORE_NAME) $HOME"]'
spec:
  containers: [{name: db, image: postgres}]
"#,
        &Options::default(),
    );
    let hook = serde_json::to_value(&c.objects[0]).unwrap();
    assert_eq!(
        hook["spec"]["postHooks"][0]["init"]["initContainers"][0]["command"],
        json!(["/bin/sh", "-c", "echo $$(POD_NAME) $(OTHER) $$"])
    );
    assert_eq!(
        hook["spec"]["postHooks"][1]["exec"]["command"],
        json!([
            "/bin/sh",
            "-c",
            "kill -0 $$$ && echo $$(RESTORE_NAME) $HOME"
        ])
    );
    assert!(hook["metadata"].get("namespace").is_none(), "{hook}");
    assert_note(
        &c,
        "Pod db-0",
        "init.hook.restore.velero.io/command: each $(NAME)",
    );
    assert_note(
        &c,
        "Pod db-0",
        "post.hook.restore.velero.io/command: each `$`",
    );
}

/// Values Velero tolerates (and replaces by its default, or runs as one program name) are
/// invalid hooks to restore-hooks: the user decides, nothing is written.
#[test]
fn what_cannot_be_converted_exactly_is_an_error_and_nothing_is_written() {
    let pod = |annotations: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: shop\n  labels: {{app: p}}\n  annotations: {{{annotations}}}\nspec:\n  containers: [{{name: app, image: x}}]\n  initContainers: [{{name: setup, image: x}}, {{name: proxy, image: x, restartPolicy: Always}}]"
        )
    };
    let exec = "post.hook.restore.velero.io/command: /bin/true";
    let cases = [
        (format!("{exec}, post.hook.restore.velero.io/exec-timeout: none"), "post.hook.restore.velero.io/exec-timeout: "),
        (format!("{exec}, post.hook.restore.velero.io/wait-timeout: -1s"), "post.hook.restore.velero.io/wait-timeout: "),
        (format!("{exec}, post.hook.restore.velero.io/on-error: fail"), "post.hook.restore.velero.io/on-error: \"fail\" is neither Continue nor Fail"),
        (format!("{exec}, post.hook.restore.velero.io/wait-for-ready: yes"), "post.hook.restore.velero.io/wait-for-ready: \"yes\" is not a boolean"),
        ("post.hook.restore.velero.io/command: '[foobarbaz'".into(), "Velero runs such a value as one program name"),
        ("post.hook.restore.velero.io/command: '[]'".into(), "exec hook has no command"),
        (format!("{exec}, post.hook.restore.velero.io/container: nope"), "which the pod does not have (containers: app, proxy)"),
        (format!("{exec}, post.hook.restore.velero.io/container: setup"), "a plain init container"),
        ("init.hook.restore.velero.io/container-image: x, init.hook.restore.velero.io/container-name: Restore_Init".into(), "\"Restore_Init\" is not a valid container name"),
        ("init.hook.restore.velero.io/container-image: x, init.hook.restore.velero.io/command: '[\"a\", 1]'".into(), "init.hook.restore.velero.io/command: command"),
    ];
    for (annotations, message) in cases {
        let c = run(
            &pod(&annotations),
            &Options {
                strip_velero_hooks: true,
                ..Options::default()
            },
        );
        assert_not_converted(&c, "Pod shop/p", &[message]);
        assert!(c.objects.is_empty(), "{annotations}: {}", c.to_yaml());
        assert_eq!(c.not_converted, 1);
    }
    // A native sidecar is an exec target.
    let c = run(
        &pod(&format!(
            "{exec}, post.hook.restore.velero.io/container: proxy"
        )),
        &Options::default(),
    );
    assert_eq!(findings(&c, Severity::Error), Vec::<String>::new());
}

#[test]
fn annotations_that_are_no_restore_hooks_are_notes_and_stay() {
    let c = run(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  annotations: {post.hook.restore.velero.io/command: /on/the/deployment}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        pre.hook.backup.velero.io/command: '["/sbin/fsfreeze", "--freeze", "/data"]'
        post.hook.backup.velero.io/command: '["/sbin/fsfreeze", "--unfreeze", "/data"]'
        pre.hook.restore.velero.io/command: /before/restore
        post.hook.restore.velero.io/timeout: 5m
        init.hook.restore.velero.io/container-name: orphan
        post.hook.restore.velero.io/command: /bin/true
    spec:
      containers: [{name: web, image: x}]
"#,
        &Options {
            strip_velero_hooks: true,
            ..Options::default()
        },
    );
    let d = "Deployment shop/web";
    assert_eq!(findings(&c, Severity::Error), Vec::<String>::new());
    assert_note(
        &c,
        d,
        "post.hook.restore.velero.io/command in the Deployment's own metadata.annotations",
    );
    assert_note(
        &c,
        d,
        "post.hook.backup.velero.io/command, pre.hook.backup.velero.io/command: backup hooks",
    );
    assert_note(
        &c,
        d,
        "pre.hook.restore.velero.io/command: Velero has no pre-restore hooks",
    );
    assert_note(
        &c,
        d,
        "post.hook.restore.velero.io/timeout: not annotations Velero reads",
    );
    assert_note(
        &c,
        d,
        "init.hook.restore.velero.io/container-name without a non-empty init.hook.restore.velero.io/container-image",
    );
    // Converted: one exec hook; Velero's keys go, the others stay.
    let stripped = serde_json::to_value(&c.objects[1]).unwrap();
    let kept: Vec<&str> = stripped["spec"]["template"]["metadata"]["annotations"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        kept,
        [
            "post.hook.backup.velero.io/command",
            "post.hook.restore.velero.io/timeout",
            "pre.hook.backup.velero.io/command",
            "pre.hook.restore.velero.io/command"
        ]
    );
    assert_eq!(
        stripped["metadata"]["annotations"],
        json!({"post.hook.restore.velero.io/command": "/on/the/deployment"})
    );
    // Nothing to convert: notes only, nothing written.
    let c = run(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: b}, annotations: {post.hook.restore.velero.io/container: x}}\nspec: {containers: [{name: x, image: y}]}",
        &Options {
            strip_velero_hooks: true,
            ..Options::default()
        },
    );
    assert!(c.objects.is_empty());
    assert_note(
        &c,
        "Pod p",
        "without a non-empty post.hook.restore.velero.io/command",
    );
}

/// A RestoreHook selects by label where an annotation travels with its pods: the selection must
/// reach the workload's pods and no others.
#[test]
fn selectors_reach_exactly_the_workload_s_pods() {
    let exec = "{post.hook.restore.velero.io/command: /bin/true}";
    // No label of its own: nothing to select by.
    let c = run(
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: shop, labels: {{velero.io/restore-name: r1}}, annotations: {exec}}}\nspec: {{containers: [{{name: x, image: y}}]}}"
        ),
        &Options::default(),
    );
    assert_not_converted(&c, "Pod shop/p", &["cannot be told apart by their labels"]);
    // Two workloads whose pods one selector reaches: the annotated one is not converted; pods of
    // a controlled object (a Deployment's ReplicaSet) and of other namespaces do not count.
    let input = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  selector: {{matchLabels: {{app: shop}}}}
  template:
    metadata: {{labels: {{app: shop, role: web}}, annotations: {exec}}}
    spec: {{containers: [{{name: web, image: x}}]}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: worker, namespace: shop}}
spec:
  selector: {{matchLabels: {{app: shop, role: worker}}}}
  template:
    metadata: {{labels: {{app: shop, role: worker}}}}
    spec: {{containers: [{{name: worker, image: x}}]}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: other}}
spec:
  selector: {{matchLabels: {{app: shop}}}}
  template:
    metadata: {{labels: {{app: shop}}}}
    spec: {{containers: [{{name: web, image: x}}]}}
"#
    );
    let c = run(&input, &Options::default());
    assert_not_converted(
        &c,
        "Deployment shop/web",
        &["also selects the pods of Deployment shop/worker"],
    );
    assert_eq!(c.findings.len(), 1, "{:#?}", c.findings);
    // Narrowed, it converts.
    let c = run(
        &input.replace("matchLabels: {app: shop}}\n  template:\n    metadata: {labels: {app: shop, role: web}", "matchLabels: {app: shop, role: web}}\n  template:\n    metadata: {labels: {app: shop, role: web}"),
        &Options::default(),
    );
    assert_eq!(findings(&c, Severity::Error), Vec::<String>::new());
    assert_eq!(c.objects.len(), 1);
}

/// Objects made from another's template (a Deployment's ReplicaSets and pods, a CronJob's Jobs)
/// are converted through their owner.
#[test]
fn controlled_objects_are_converted_through_their_owner() {
    let pod = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web-5d8f-x2x
  namespace: shop
  labels: {app: web, pod-template-hash: 5d8f}
  annotations: {post.hook.restore.velero.io/command: /bin/true}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-5d8f, uid: u, controller: true}]
spec: {containers: [{name: web, image: x}]}
"#;
    let deployment = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}, annotations: {post.hook.restore.velero.io/command: /bin/true}}
    spec: {containers: [{name: web, image: x}]}
"#;
    let c = run(pod, &Options::default());
    assert_not_converted(
        &c,
        "Pod shop/web-5d8f-x2x",
        &["controlled by ReplicaSet web-5d8f", "the Deployment"],
    );
    let c = run(&format!("{deployment}---{pod}"), &Options::default());
    assert_eq!(findings(&c, Severity::Error), Vec::<String>::new());
    assert_note(
        &c,
        "Pod shop/web-5d8f-x2x",
        "its hooks come from the pod template of Deployment shop/web",
    );
    assert_eq!(c.objects.len(), 1);
}

const RESTORE: &str = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r2, namespace: velero}
spec:
  backupName: b2
  includedNamespaces: ['*']
  hooks:
    resources:
    - name: restore-hook-1
      includedNamespaces: [app, data, kube-system]
      excludedNamespaces: ['kube-*']
      labelSelector: {matchLabels: {app: db}}
      postHooks:
      - init:
          timeout: 2m
          initContainers:
          - name: restore-hook-init1
            image: alpine:latest
            volumeMounts: [{mountPath: /restores/pvc1-vm, name: pvc1-vm}]
            command: [/bin/ash, -c, 'echo -n "FOOBARBAZ" >> /restores/pvc1-vm/foobarbaz']
      - exec:
          execTimeout: 1m
          waitTimeout: 5m
          onError: Fail
          container: postgres
          command: [/bin/bash, -c, 'while ! pg_isready; do sleep 1; done']
    - name: Sidecar Date
      includedNamespaces: [app]
      postHooks:
      - exec:
          container: sidecar
          command: [/bin/bash, -c, 'date > /start']
"#;

#[test]
fn restore_entries_naming_their_namespaces_become_restore_hooks_per_namespace() {
    let c = run(RESTORE, &Options::default());
    let from = |at: &str| format!("'Restore velero/r2: spec.hooks.resources[{at}'");
    assert_converted(
        &c,
        &format!(
            r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata:
  name: velero-restore-r2-0-restore-hook-1
  namespace: app
  annotations: {{restore-hooks.dev/converted-from: {}}}
spec:
  restores: [r2]
  labelSelector: {{matchLabels: {{app: db}}}}
  postHooks:
  - init:
      initContainers:
      - name: restore-hook-init1
        image: alpine:latest
        volumeMounts: [{{mountPath: /restores/pvc1-vm, name: pvc1-vm}}]
        command: [/bin/ash, -c, 'echo -n "FOOBARBAZ" >> /restores/pvc1-vm/foobarbaz']
  - exec:
      container: postgres
      command: [/bin/bash, -c, 'while ! pg_isready; do sleep 1; done']
      onError: Fail
      execTimeout: 1m
      waitTimeout: 5m
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata:
  name: velero-restore-r2-0-restore-hook-1
  namespace: data
  annotations: {{restore-hooks.dev/converted-from: {}}}
spec:
  restores: [r2]
  labelSelector: {{matchLabels: {{app: db}}}}
  postHooks:
  - init:
      initContainers:
      - name: restore-hook-init1
        image: alpine:latest
        volumeMounts: [{{mountPath: /restores/pvc1-vm, name: pvc1-vm}}]
        command: [/bin/ash, -c, 'echo -n "FOOBARBAZ" >> /restores/pvc1-vm/foobarbaz']
  - exec:
      container: postgres
      command: [/bin/bash, -c, 'while ! pg_isready; do sleep 1; done']
      onError: Fail
      execTimeout: 1m
      waitTimeout: 5m
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata:
  name: velero-restore-r2-1-sidecar-date
  namespace: app
  annotations: {{restore-hooks.dev/converted-from: {}}}
spec:
  restores: [r2]
  postHooks:
  - exec: {{container: sidecar, command: [/bin/bash, -c, 'date > /start']}}
"#,
            from(r#"0] "restore-hook-1""#),
            from(r#"0] "restore-hook-1""#),
            from(r#"1] "Sidecar Date""#),
        ),
    );
    assert_note(
        &c,
        "Restore velero/r2",
        "postHooks[0].init.timeout is left out",
    );
    // --restores chooses the restores; --strip-velero-hooks writes the Restore without its hooks.
    let c = run(
        RESTORE,
        &Options {
            restores: Some(vec!["dr-*".into(), "r2".into()]),
            strip_velero_hooks: true,
            ..Options::default()
        },
    );
    assert_eq!(c.objects.len(), 4);
    assert!(
        c.objects[..3]
            .iter()
            .all(|o| o["spec"]["restores"] == yaml("[dr-*, r2]")[0])
    );
    let mut without = yaml(RESTORE).remove(0);
    without["spec"].as_mapping_mut().unwrap().remove("hooks");
    assert_eq!(c.objects[3], without);
}

#[test]
fn restore_entries_for_every_namespace_become_cluster_restore_hooks() {
    let c = run(
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r3, namespace: velero}
spec:
  hooks:
    resources:
    - name: first
      includedNamespaces: [app]
      postHooks: [{exec: {command: [/first]}}]
    - name: everywhere
      excludedNamespaces: [kube-system, monitoring, Not_A_Name]
      includedResources: [pods, deployments]
      postHooks: [{exec: {command: [/second], runOn: OnePod, retry: {attempts: 2}}}, {}]
    - name: all
      includedNamespaces: [app, '*']
      postHooks: [{exec: {command: [/third]}}]
"#,
        &Options::default(),
    );
    let from =
        |i: usize, name: &str| format!("'Restore velero/r3: spec.hooks.resources[{i}] \"{name}\"'");
    assert_converted(
        &c,
        &format!(
            r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: ClusterRestoreHook
metadata: {{name: velero-restore-r3-0-first, annotations: {{restore-hooks.dev/converted-from: {}}}}}
spec:
  namespaceSelector: {{matchExpressions: [{{key: kubernetes.io/metadata.name, operator: In, values: [app]}}]}}
  restores: [r3]
  postHooks: [{{exec: {{command: [/first]}}}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: ClusterRestoreHook
metadata: {{name: velero-restore-r3-1-everywhere, annotations: {{restore-hooks.dev/converted-from: {}}}}}
spec:
  namespaceSelector: {{matchExpressions: [{{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, monitoring]}}]}}
  restores: [r3]
  postHooks: [{{exec: {{command: [/second]}}}}]
---
apiVersion: restore-hooks.dev/v1alpha1
kind: ClusterRestoreHook
metadata: {{name: velero-restore-r3-2-all, annotations: {{restore-hooks.dev/converted-from: {}}}}}
spec:
  restores: [r3]
  postHooks: [{{exec: {{command: [/third]}}}}]
"#,
            from(0, "first"),
            from(1, "everywhere"),
            from(2, "all")
        ),
    );
    let r = "Restore velero/r3";
    assert_note(&c, r, "written as ClusterRestoreHooks");
    assert_note(&c, r, "includedResources / excludedResources are left out");
    assert_note(&c, r, "runOn, retry left out");
    assert_note(&c, r, "postHooks[1] has neither init nor exec");
}

#[test]
fn restore_entries_that_cannot_be_converted_exactly() {
    let restore = |entry: &str| {
        format!(
            "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {{name: r4, namespace: velero}}\nspec:\n  hooks:\n    resources:\n    - {entry}"
        )
    };
    let cases = [
        (
            "{name: a, includedNamespaces: ['app-*'], postHooks: [{exec: {command: [x]}}]}",
            "includedNamespaces: \"app-*\" is a pattern",
        ),
        (
            "{name: a, excludedNamespaces: ['kube-*'], postHooks: [{exec: {command: [x]}}]}",
            "excludedNamespaces: \"kube-*\" is a pattern",
        ),
        (
            "{name: a, includedNamespaces: ['[a-'], postHooks: [{exec: {command: [x]}}]}",
            "invalid pattern",
        ),
        (
            "{name: a, includedResources: [deployments], postHooks: [{exec: {command: [x]}}]}",
            "Velero ignores both fields",
        ),
        (
            "{name: a, excludedResources: [pods], postHooks: [{exec: {command: [x]}}]}",
            "Velero ignores both fields",
        ),
        (
            "{name: a, labelSelector: {matchExpressions: [{key: app, operator: in, values: [x]}]}, postHooks: [{exec: {command: [x]}}]}",
            "unknown operator",
        ),
        (
            "{name: a, postHooks: [{exec: {command: [x], onError: Abort}}]}",
            "exec onError: \"Abort\"",
        ),
        (
            "{name: a, postHooks: [{exec: {command: [x], waitTimeout: '5'}}]}",
            "exec waitTimeout",
        ),
        (
            "{name: a, postHooks: [{exec: {command: []}}]}",
            "exec command: exec hook has no command",
        ),
        (
            "{name: a, postHooks: [{init: {initContainers: [{name: Bad, image: x}]}}]}",
            "not a valid container name",
        ),
        (
            "{name: a, postHooks: [{init: {initContainers: [{name: x}]}}]}",
            "has no image",
        ),
    ];
    for (entry, message) in cases {
        let c = run(
            &restore(entry),
            &Options {
                strip_velero_hooks: true,
                ..Options::default()
            },
        );
        assert_not_converted(&c, "Restore velero/r4", &[message]);
        assert!(c.objects.is_empty(), "{entry}");
    }
    // A Restore named by the API server: its hooks are its own restore's, which has no name yet.
    let c = run(
        "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {generateName: nightly-, namespace: velero}\nspec: {hooks: {resources: [{name: a, postHooks: [{exec: {command: [x]}}]}]}}",
        &Options::default(),
    );
    assert_not_converted(&c, "Restore velero/nightly-", &["pass --restores"]);
    let c = run(
        "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {generateName: nightly-, namespace: velero}\nspec: {hooks: {resources: [{name: a, postHooks: [{exec: {command: [x]}}]}]}}",
        &Options {
            restores: Some(vec!["nightly-*".into()]),
            ..Options::default()
        },
    );
    assert_eq!(findings(&c, Severity::Error), Vec::<String>::new());
    assert_eq!(
        c.objects[0]["metadata"]["name"],
        yaml("velero-restore-nightly-0-a")[0]
    );
    // A Restore that has run: its hooks are for that restore, a note says how to choose others.
    let c = run(
        &format!(
            "{}\nstatus: {{phase: Completed}}",
            restore("{name: a, postHooks: [{exec: {command: [x]}}]}")
        ),
        &Options::default(),
    );
    assert_note(&c, "Restore velero/r4", "has run already (phase Completed)");
    // Every name excluded, no hooks: nothing to write, and notes say so.
    let c = run(
        &restore(
            "{name: a, includedNamespaces: [app], excludedNamespaces: ['a*'], postHooks: [{exec: {command: [x]}}]}\n    - {name: b}",
        ),
        &Options::default(),
    );
    assert!(c.objects.is_empty() && c.not_converted == 0);
    assert_note(&c, "Restore velero/r4", "applies in no namespace");
    assert_note(&c, "Restore velero/r4", "resources[1] \"b\" has no hooks");
}

/// Velero gives a pod's annotation hook precedence over its Restore's hooks of that kind; hook
/// objects have no such rule, so where the two meet the user has to choose.
#[test]
fn an_annotation_hook_and_a_restore_entry_that_meet_are_not_converted() {
    let deployment = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: db, namespace: app}
spec:
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}, annotations: {post.hook.restore.velero.io/command: /bin/true}}
    spec: {containers: [{name: postgres, image: x}]}
"#;
    let c = run(&format!("{deployment}---{RESTORE}"), &Options::default());
    assert_not_converted(
        &c,
        "Deployment app/db",
        &[
            "Restore velero/r2 (in.yaml document 2)'s spec.hooks.resources[0] \"restore-hook-1\", whose exec hooks Velero never runs in them",
        ],
    );
    assert_not_converted(
        &c,
        "Restore velero/r2",
        &["spec.hooks.resources[0] \"restore-hook-1\" selects the pods of Deployment app/db"],
    );
    assert!(c.objects.is_empty(), "{}", c.to_yaml());
    // Hooks of different kinds do not meet: an exec annotation leaves the entry's init hooks
    // to the pods, and entries in other namespaces or selecting other labels never meet them.
    let init_only = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r5, namespace: velero}
spec:
  hooks:
    resources:
    - name: seed
      includedNamespaces: [app]
      postHooks: [{init: {initContainers: [{name: seed, image: busybox}]}}]
    - name: elsewhere
      includedNamespaces: [data]
      postHooks: [{exec: {command: [/x]}}]
    - name: others
      labelSelector: {matchLabels: {app: web}}
      postHooks: [{exec: {command: [/x]}}]
"#;
    let c = run(&format!("{deployment}---{init_only}"), &Options::default());
    assert_eq!(findings(&c, Severity::Error), Vec::<String>::new());
    assert_eq!(c.objects.len(), 4);
}

#[test]
fn lists_names_and_input_errors() {
    // `kubectl get -o yaml` prints a List.
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}",
        yaml(STATEFULSET)
            .iter()
            .map(|v| format!("- {}", serde_json::to_string(v).unwrap()))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_converted(&run(&list, &Options::default()), STATEFULSET_HOOK);
    // Two sources whose hook objects would share a name.
    let c = run(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: my.db, namespace: shop, labels: {a: '1'}, annotations: {post.hook.restore.velero.io/command: x}}\nspec: {containers: [{name: c, image: i}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: my-db, namespace: shop, labels: {a: '2'}, annotations: {post.hook.restore.velero.io/command: x}}\nspec: {containers: [{name: c, image: i}]}",
        &Options::default(),
    );
    assert_not_converted(
        &c,
        "Pod shop/my-db",
        &["would have the name of the one converted from Pod shop/my.db"],
    );
    assert_eq!(c.objects.len(), 1);
    // Unusable input.
    for bad in ["a: [", "- 1\n- 2", "just text", "kind: Pod"] {
        assert!(read_documents("bad.yaml", bad).is_err(), "{bad}");
    }
    let e = read_documents("bad.yaml", "a: [").unwrap_err().to_string();
    assert!(
        e.starts_with("bad.yaml document 1: not valid YAML or JSON"),
        "{e}"
    );
    for options in [
        Options {
            namespace: Some("Shop".into()),
            ..Options::default()
        },
        Options {
            restores: Some(vec!["[x".into()]),
            ..Options::default()
        },
    ] {
        assert!(convert(&[], &options).is_err());
    }
    // Other kinds, and Restores without hooks, are not this command's business.
    let c = run(
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\napiVersion: velero.io/v1\nkind: Restore\nmetadata: {name: r}\nspec: {backupName: b}",
        &Options {
            strip_velero_hooks: true,
            ..Options::default()
        },
    );
    assert!(c.objects.is_empty() && c.findings.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Equivalence with restore-hooks' own reading of the Velero sources under `own`.

const PLAN_ID: &str = "AAECAwQFBgcICQoL";

/// The webhook's decision on `pod` in `namespace`, for a creator that may exec, applied.
fn admit(pod: &Value, namespace: &str, catalog: &StaticCatalog, config: &EngineConfig) -> Value {
    let text = pod.to_string();
    let view = AdmittedPod::from_json_str(&text).unwrap();
    let index = catalog.index();
    let ctx = PodContext {
        pod: &view,
        namespace,
        namespace_labels: index.namespace_labels(namespace),
    };
    let issuer = Issuer {
        keys: None,
        now: "2026-12-04T10:00:00Z".parse().unwrap(),
        plan_id: PLAN_ID,
    };
    let requester = Requester {
        username: "alice",
        exec_right: &ExecRight::Granted,
    };
    match evaluate(&ctx, &index, config, &issuer, &requester) {
        Admission::Deny { message } => panic!("denied: {message}\n{pod:#}"),
        Admission::Unchanged { .. } => pod.clone(),
        Admission::Patch { patch, .. } => {
            let mut patched = pod.clone();
            json_patch::patch(&mut patched, &patch.0).unwrap();
            patched
        }
    }
}

fn catalog_of(documents: &str, namespace: &str) -> StaticCatalog {
    let mut c = StaticCatalog::default();
    let defaults = DocumentDefaults {
        namespace: namespace.into(),
        velero_namespace: "velero".into(),
    };
    add_documents(&mut c, Path::new("fixture.yaml"), documents, &defaults).unwrap();
    // What the API server puts on every namespace.
    c.namespaces
        .entry(namespace.into())
        .or_default()
        .insert("kubernetes.io/metadata.name".into(), namespace.into());
    c
}

/// What a pod's hooks are, whichever source they came from: the exec hooks in plan order
/// without their names and sources, and the pod's init containers.
#[derive(Debug, PartialEq)]
struct Hooks {
    exec: Vec<Value>,
    init_containers: Value,
    injected: Value,
}

fn hooks_of(pod: &Value) -> Hooks {
    let plan = pod["metadata"]["annotations"]["restore-hooks.dev/plan"]
        .as_str()
        .map(|p| ExecPlan::from_annotation(p).unwrap());
    let exec = plan
        .map(|p| p.hooks)
        .unwrap_or_default()
        .into_iter()
        .map(|h: PlannedHook| {
            assert!(h.refused.is_none() && h.invalid.is_none(), "{h:?}");
            json!({
                "container": h.container, "command": h.command, "onError": h.on_error,
                "execTimeoutMs": h.exec_timeout_ms, "waitTimeoutMs": h.wait_timeout_ms,
                "waitForReady": h.wait_for_ready, "runOn": h.run_on, "after": h.after,
                "retry": h.retry, "ephemeral": h.ephemeral,
            })
        })
        .collect();
    Hooks {
        exec,
        init_containers: as_the_kubelet_runs(&pod["spec"]["initContainers"]),
        injected: pod["metadata"]["annotations"]["restore-hooks.dev/injected"].clone(),
    }
}

/// Init containers with `$(VAR)` in their `command`, `args` and `env` values expanded from their
/// own `env`, as the kubelet runs them: converted containers write a literal `$(POD_NAME)` as
/// `$$(POD_NAME)` (restore-hooks would define it for a hook object's container), and the kubelet
/// makes both the same text.
fn as_the_kubelet_runs(init_containers: &Value) -> Value {
    let mut out = init_containers.clone();
    for container in out.as_array_mut().into_iter().flatten() {
        let env: Vec<(String, String)> = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
            .collect();
        let lookup = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        let mut run = |v: &mut Value| {
            if let Some(s) = v.as_str() {
                *v = Value::String(expand(s, lookup));
            }
        };
        for field in ["command", "args"] {
            container[field]
                .as_array_mut()
                .into_iter()
                .flatten()
                .for_each(&mut run);
        }
        for e in container["env"].as_array_mut().into_iter().flatten() {
            if e.get("value").is_some() {
                run(&mut e["value"]);
            }
        }
    }
    out
}

fn config(mode: VeleroHooksMode) -> EngineConfig {
    EngineConfig {
        velero_hooks: mode,
        ..EngineConfig::default()
    }
}

/// A pod Velero restored in `shop` (restore `r1`), with these annotations, containers and init
/// containers; its workload is a StatefulSet with this pod template.
struct Fixture {
    what: &'static str,
    annotations: Value,
    containers: Value,
    init_containers: Value,
}

fn fixture(what: &'static str, annotations: Value) -> Fixture {
    Fixture {
        what,
        annotations,
        containers: json!([{"name": "db", "image": "postgres:17"}]),
        init_containers: Value::Null,
    }
}

/// Velero's own cases (`internal/hook/item_hook_handler_test.go`: the annotation tests of
/// `TestGetPodExecRestoreHookFromAnnotations`, `TestGroupRestoreExecHooks`,
/// `TestGetInitContainerFromAnnotations` and `TestHandleRestoreHooks` that restore-hooks accepts)
/// and the repository's (`core/tests/injection.rs`: `annotation_precedence_is_per_kind`,
/// `annotation_defaults`), plus the cases only conversion has (commands hook objects would
/// expand, native sidecars).
fn fixtures() -> Vec<Fixture> {
    let cmd = "post.hook.restore.velero.io/command";
    let two = json!([{"name": "container1", "image": "x"}, {"name": "my-app", "image": "y"}]);
    vec![
        fixture("string command", json!({cmd: "/usr/bin/foo"})),
        fixture("json array command", json!({cmd: r#"["a","b","c"]"#})),
        fixture(
            "on-error Continue",
            json!({cmd: "/usr/bin/foo", "post.hook.restore.velero.io/on-error": "Continue"}),
        ),
        fixture(
            "on-error Fail",
            json!({cmd: "/usr/bin/foo", "post.hook.restore.velero.io/on-error": "Fail"}),
        ),
        fixture(
            "exec and wait timeouts",
            json!({cmd: "/usr/bin/foo", "post.hook.restore.velero.io/exec-timeout": "45s",
                   "post.hook.restore.velero.io/wait-timeout": "1h"}),
        ),
        Fixture {
            containers: two.clone(),
            ..fixture(
                "container",
                json!({cmd: "/usr/bin/foo", "post.hook.restore.velero.io/container": "my-app"}),
            )
        },
        Fixture {
            containers: two.clone(),
            ..fixture(
                "every exec annotation",
                json!({cmd: "/usr/bin/foo", "post.hook.restore.velero.io/container": "container1",
                       "post.hook.restore.velero.io/on-error": "Continue",
                       "post.hook.restore.velero.io/exec-timeout": "1s",
                       "post.hook.restore.velero.io/wait-timeout": "1m",
                       "post.hook.restore.velero.io/wait-for-ready": "true"}),
            )
        },
        Fixture {
            containers: two,
            ..fixture(
                "default to the first container",
                json!({cmd: "/usr/bin/foo", "post.hook.restore.velero.io/on-error": "Continue",
                       "post.hook.restore.velero.io/exec-timeout": "1s",
                       "post.hook.restore.velero.io/wait-timeout": "1m"}),
            )
        },
        fixture(
            "init container, every annotation",
            json!({"init.hook.restore.velero.io/container-image": "busy-box",
                   "init.hook.restore.velero.io/container-name": "restore-init",
                   "init.hook.restore.velero.io/command": "/usr/bin/data-populator /user-data full"}),
        ),
        fixture(
            "init container, generated name",
            json!({"init.hook.restore.velero.io/container-image": "busy-box",
                   "init.hook.restore.velero.io/container-name": "",
                   "init.hook.restore.velero.io/command": "/usr/bin/data-populator /user-data full"}),
        ),
        fixture(
            "init container, json array command",
            json!({"init.hook.restore.velero.io/container-image": "busy-box",
                   "init.hook.restore.velero.io/container-name": "restore-init",
                   "init.hook.restore.velero.io/command": r#"["a","b","c"]"#}),
        ),
        Fixture {
            init_containers: json!([
                {"name": "restore-wait", "image": "velero/velero-restore-helper"},
                {"name": "init-app-step1", "image": "busy-box", "command": ["init-step1"]},
                {"name": "init-app-step2", "image": "busy-box", "command": ["init-step2"]}]),
            ..fixture(
                "init container before the pod's own, after restore-wait",
                json!({"init.hook.restore.velero.io/container-image": "nginx",
                       "init.hook.restore.velero.io/container-name": "restore-init-container",
                       "init.hook.restore.velero.io/command": r#"["a", "b", "c"]"#}),
            )
        },
        fixture(
            "both kinds",
            json!({"init.hook.restore.velero.io/container-image": "alpine:3",
                   "init.hook.restore.velero.io/container-name": "restore-hook",
                   "init.hook.restore.velero.io/command": "[\"/bin/ash\", \"-c\", \"date\"]",
                   cmd: "[\"/bin/sh\", \"-c\", \"psql < /backup.sql\"]",
                   "post.hook.restore.velero.io/container": "db",
                   "post.hook.restore.velero.io/on-error": "Fail",
                   "post.hook.restore.velero.io/exec-timeout": "45s",
                   "post.hook.restore.velero.io/wait-timeout": "5m",
                   "post.hook.restore.velero.io/wait-for-ready": "TRUE"}),
        ),
        fixture(
            "defaults",
            json!({"init.hook.restore.velero.io/container-image": "busybox",
                   "init.hook.restore.velero.io/command": "",
                   cmd: "/usr/bin/populate /data full",
                   "post.hook.restore.velero.io/exec-timeout": "0",
                   "post.hook.restore.velero.io/wait-for-ready": "0"}),
        ),
        fixture(
            "no wait limit",
            json!({cmd: "/bin/true", "post.hook.restore.velero.io/wait-timeout": "0s"}),
        ),
        fixture(
            "commands with $",
            json!({"init.hook.restore.velero.io/container-image": "busybox",
                   "init.hook.restore.velero.io/command": r#"["/bin/sh", "-c", "echo $(POD_NAME) $(NAMESPACE) $$"]"#,
                   cmd: r#"["/bin/sh", "-c", "echo $$ $(POD_NAME) $(RESTORE_NAME) $HOME $$(X)"]"#}),
        ),
        Fixture {
            init_containers: json!([{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}]),
            ..fixture(
                "a native sidecar",
                json!({cmd: "/bin/true", "post.hook.restore.velero.io/container": "proxy"}),
            )
        },
    ]
}

fn restored_pod(f: &Fixture, annotations: &Value) -> Value {
    let mut spec = json!({"containers": f.containers});
    if !f.init_containers.is_null() {
        spec["initContainers"] = f.init_containers.clone();
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop",
                     "labels": {"app": "db", "velero.io/restore-name": "r1"},
                     "annotations": annotations},
        "spec": spec,
    })
}

#[test]
fn converted_annotations_give_each_fixture_pod_the_same_hooks() {
    for f in fixtures() {
        let pod = restored_pod(&f, &f.annotations);
        let expected = hooks_of(&admit(
            &pod,
            "shop",
            &StaticCatalog::default(),
            &config(VeleroHooksMode::Own),
        ));
        assert!(
            !expected.exec.is_empty() || !expected.init_containers.is_null(),
            "{}: the fixture gives the pod no hook",
            f.what
        );
        // The pod's workload, as its manifest says it, converted and stripped.
        let statefulset = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                     "template": {"metadata": {"labels": {"app": "db"}, "annotations": f.annotations},
                                  "spec": pod["spec"]}}
        });
        let c = run(
            &serde_json::to_string(&statefulset).unwrap(),
            &Options {
                strip_velero_hooks: true,
                ..Options::default()
            },
        );
        assert_eq!(
            findings(&c, Severity::Error),
            Vec::<String>::new(),
            "{}",
            f.what
        );
        let [hook, stripped] = &c.objects[..] else {
            panic!("{}: {}", f.what, c.to_yaml())
        };
        let stripped: Value = serde_json::to_value(stripped).unwrap();
        let template_annotations = stripped["spec"]["template"]["metadata"]["annotations"].clone();
        let stripped_pod = restored_pod(&f, &template_annotations);
        let catalog = catalog_of(&yaml_serde::to_string(hook).unwrap(), "shop");
        for mode in [VeleroHooksMode::Own, VeleroHooksMode::Defer] {
            let got = hooks_of(&admit(&stripped_pod, "shop", &catalog, &config(mode)));
            assert_eq!(
                got,
                expected,
                "{} ({mode:?})\nconverted: {}",
                f.what,
                c.to_yaml()
            );
        }
    }
}

/// Velero's documented Restore examples (`site/content/docs/main/restore-hooks.md`), and entries
/// for every namespace but some: the same hooks from the converted objects as from the Restore.
#[test]
fn converted_restore_entries_give_each_pod_the_same_hooks() {
    let docs_example = r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r1, namespace: velero}
spec:
  backupName: b2
  includedNamespaces: ['*']
  hooks:
    resources:
    - name: restore-hook-1
      includedNamespaces: [shop]
      postHooks:
      - init:
          initContainers:
          - name: restore-hook-init1
            image: alpine:latest
            volumeMounts: [{mountPath: /restores/pvc1-vm, name: data}]
            command: [/bin/ash, -c, 'echo -n "FOOBARBAZ" >> /restores/pvc1-vm/foobarbaz']
          - name: restore-hook-init2
            image: alpine:latest
            volumeMounts: [{mountPath: /restores/pvc2-vm, name: data}]
            command: [/bin/ash, -c, 'echo -n "DEADFEED" >> /restores/pvc2-vm/deadfeed']
    - name: restore-hook-2
      includedNamespaces: [shop]
      postHooks:
      - exec:
          execTimeout: 1m
          waitTimeout: 5m
          onError: Fail
          container: postgres
          command: [/bin/bash, '-c', 'while ! pg_isready; do sleep 1; done']
      - exec:
          container: postgres
          waitTimeout: 6m
          execTimeout: 1m
          command: [/bin/bash, '-c', 'psql < /backup/backup.sql']
      - exec:
          container: sidecar
          command: [/bin/bash, '-c', 'date > /start']
    - name: env
      includedNamespaces: [shop, other]
      labelSelector: {matchLabels: {app: db}}
      postHooks:
      - exec:
          container: postgres
          command: [/bin/sh, -c, 'mysql --password=$MYSQL_ROOT_PASSWORD -e "$(cat /q)" # $$']
          onError: Fail
      - init:
          initContainers:
          - {name: seed, image: busybox, command: [/bin/sh, -c, 'echo $(POD_NAME) $(NAMESPACE)'], env: [{name: NAMESPACE, value: x}]}
"#;
    let everywhere = docs_example.replace(
        "includedNamespaces: [shop, other]",
        "excludedNamespaces: [kube-system]",
    );
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop",
                     "labels": {"app": "db", "velero.io/restore-name": "r1"}},
        "spec": {"containers": [{"name": "postgres", "image": "postgres"}, {"name": "sidecar", "image": "x"}],
                 "initContainers": [{"name": "restore-wait", "image": "velero-helper"}],
                 "volumes": [{"name": "data", "emptyDir": {}}]}
    });
    for (what, restore, kind) in [
        (
            "namespaces by name",
            docs_example.to_string(),
            "RestoreHook",
        ),
        ("every namespace but some", everywhere, "ClusterRestoreHook"),
    ] {
        let expected = hooks_of(&admit(
            &pod,
            "shop",
            &catalog_of(&restore, "shop"),
            &config(VeleroHooksMode::Own),
        ));
        assert_eq!(expected.exec.len(), 4, "{what}");
        let c = run(&restore, &Options::default());
        assert_eq!(
            findings(&c, Severity::Error),
            Vec::<String>::new(),
            "{what}"
        );
        assert!(
            c.objects.iter().all(|o| o["kind"] == yaml(kind)[0]),
            "{what}: {}",
            c.to_yaml()
        );
        let catalog = catalog_of(&c.to_yaml(), "shop");
        for mode in [VeleroHooksMode::Own, VeleroHooksMode::Defer] {
            let got = hooks_of(&admit(&pod, "shop", &catalog, &config(mode)));
            assert_eq!(
                got,
                expected,
                "{what} ({mode:?})\nconverted: {}",
                c.to_yaml()
            );
        }
    }
}

/// Every written object is one the product's CRD types read back, unchanged.
#[test]
fn written_objects_read_back_as_the_crd_types() {
    use restore_hooks_core::hooks::types::{ClusterRestoreHook, RestoreHook};
    let c = run(&format!("{STATEFULSET}---{RESTORE}"), &Options::default());
    let e = run(
        "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {name: r}\nspec: {hooks: {resources: [{name: a, postHooks: [{exec: {command: [x]}}]}]}}",
        &Options::default(),
    );
    for object in c.objects.iter().chain(&e.objects) {
        let back = match object["kind"].as_str() {
            Some("RestoreHook") => {
                yaml_serde::to_value(yaml_serde::from_value::<RestoreHook>(object.clone()).unwrap())
            }
            Some("ClusterRestoreHook") => yaml_serde::to_value(
                yaml_serde::from_value::<ClusterRestoreHook>(object.clone()).unwrap(),
            ),
            other => panic!("{other:?}"),
        }
        .unwrap();
        assert_eq!(&back, object);
    }
}
