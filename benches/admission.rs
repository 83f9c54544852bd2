//! The pure admission path, end to end: decode the AdmissionReview, resolve hooks, build the
//! patch, encode the response. Goals: < 50 µs median for a small pod, < 1 ms for a
//! ~50 KB pod with 10 matching RestoreHooks, on one core.
//!
//! Two more cases explain the load harness's ratio: `statefulset_pod` is the exact request the
//! load harness sends (`tests/common/statefulset.rs`), and `noop_floor` is the part of it the no-op
//! handler also pays (decode the review and its pod, answer "allowed"). Their difference is what
//! deciding costs per admission.
//!
//! `cargo bench --bench admission`

#[path = "../tests/common/statefulset.rs"]
mod statefulset;

// The allocator of the `restore-hooks` binary: allocation is a large share of this path.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use restore_hooks::admission::Issuer;
use restore_hooks::catalog::StaticCatalog;
use restore_hooks::catalog::static_files::{DocumentDefaults, add_documents};
use restore_hooks::config::{EngineConfig, VeleroHooksMode};
use restore_hooks::hooks::signing::PlanKeys;
use restore_hooks::index::HookIndex;
use restore_hooks::webhook::review::{
    BadReview, Outcome, ReviewContext, Reviewed, allowed, parse_review,
};
use serde_json::{Value, json};

/// What the webhook server does per request besides TLS and HTTP: decide with the compiled
/// index, signing the plan with the installation's key (as in production), stamped now.
fn review(
    body: &[u8],
    index: &HookIndex,
    keys: &PlanKeys,
    config: &EngineConfig,
) -> Result<Reviewed, BadReview> {
    restore_hooks::webhook::review::review(
        body,
        ReviewContext {
            index,
            namespace_labels: None,
            config,
            issuer: Issuer {
                keys: Some(keys),
                now: jiff::Timestamp::now(),
                plan_id: "AAECAwQFBgcICQoL",
            },
            exec_right: Some(restore_hooks::admission::ExecRight::Granted),
            extra_warnings: Vec::new(),
        },
    )
}

fn admission_review(pod: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "3f1c2a9e-5b7d-4e1f-9a6c-2d8b0e4f6a1c",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:velero:velero"},
            "object": pod, "dryRun": false
        }
    }))
    .unwrap()
}

/// One container, two hook annotations.
fn small() -> (Vec<u8>, StaticCatalog) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop",
            "labels": {"app": "db", "velero.io/restore-name": "nightly"},
            "annotations": {
                "init.hook.restore.velero.io/container-image": "busybox:1.36",
                "post.hook.restore.velero.io/command": "[\"/bin/sh\", \"-c\", \"pg_isready\"]"}},
        "spec": {"containers": [{"name": "db", "image": "postgres:17"}]}
    });
    (admission_review(pod), StaticCatalog::default())
}

/// ~50 KB: 20 containers with many env vars and mounts, 30 volumes, 10 matching RestoreHooks.
fn large() -> (Vec<u8>, StaticCatalog) {
    let volumes: Vec<Value> = (0..30)
        .map(|v| json!({"name": format!("vol-{v}"), "persistentVolumeClaim": {"claimName": format!("claim-{v}")}}))
        .collect();
    let containers: Vec<Value> = (0..20)
        .map(|c| {
            json!({
                "name": format!("app-{c}"),
                "image": format!("registry.example.com/team/app-{c}:1.2.3"),
                "env": (0..32).map(|e| json!({"name": format!("SETTING_{e}"), "value": format!("value-{c}-{e}-abcdefghijklmnop")})).collect::<Vec<_>>(),
                "volumeMounts": (0..5).map(|m| json!({"name": format!("vol-{}", (c + m) % 30), "mountPath": format!("/mnt/{m}")})).collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5}
            })
        })
        .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big-0", "namespace": "shop",
            "labels": {"app": "big", "tier": "backend", "velero.io/restore-name": "nightly-7"},
            "annotations": {"example.com/owner": "team-a"}},
        "spec": {"initContainers": [{"name": "restore-wait", "image": "velero/velero-restore-helper"}],
                 "containers": containers, "volumes": volumes}
    });
    let mut docs = String::new();
    for h in 0..10 {
        docs.push_str(&format!(
            r#"---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {{name: hook-{h:02}, namespace: shop}}
spec:
  restores: ["nightly-*", "weekly-*"]
  labelSelector:
    matchLabels: {{app: big}}
    matchExpressions: [{{key: tier, operator: In, values: [backend, db]}}]
  postHooks:
  - init: {{initContainers: [{{name: init-{h}, image: busybox, command: [/bin/sh, -c, "echo {h}"], volumeMounts: [{{name: vol-{h}, mountPath: /data}}]}}]}}
  - exec: {{container: app-{h}, command: [/bin/sh, -c, "echo hook {h}"], onError: Fail, execTimeout: 1m, waitTimeout: 10m}}
  - exec: {{container: app-{}, command: [/bin/true], waitForReady: true}}
"#,
            h + 10
        ));
    }
    let mut catalog = StaticCatalog::default();
    add_documents(
        &mut catalog,
        Path::new("bench"),
        &docs,
        &DocumentDefaults::default(),
    )
    .unwrap();
    (admission_review(pod), catalog)
}

/// The load harness's request and hooks.
fn statefulset() -> (Vec<u8>, StaticCatalog) {
    let mut catalog = StaticCatalog::default();
    add_documents(
        &mut catalog,
        Path::new("bench"),
        statefulset::HOOKS,
        &DocumentDefaults::default(),
    )
    .unwrap();
    (admission_review(statefulset::restored_pod()), catalog)
}

fn bench(c: &mut Criterion) {
    let config = EngineConfig {
        velero_hooks: VeleroHooksMode::Own,
        ..EngineConfig::default()
    };
    let cases = [
        ("small_pod", small()),
        ("large_pod", large()),
        ("statefulset_pod", statefulset()),
    ];
    // TEST ONLY key material: 32 bytes, like the Secret's `current`.
    let keys = PlanKeys::new(b"admission-bench-plan-key-0123456", None).unwrap();
    for (name, (body, catalog)) in cases {
        // The server compiles hook objects when they change, never per request.
        let index = catalog.index();
        // Guard against benchmarking a path that does nothing.
        let reviewed = review(&body, &index, &keys, &config).unwrap();
        assert_eq!(reviewed.outcome, Outcome::Patched, "{name}");
        eprintln!(
            "{name}: request {} bytes, {} patch ops",
            body.len(),
            reviewed.patch_ops
        );
        c.bench_function(name, |b| {
            b.iter(|| {
                let reviewed = review(black_box(&body), &index, &keys, &config).unwrap();
                black_box(reviewed.to_bytes().unwrap())
            })
        });
    }
    let (body, catalog) = statefulset();
    c.bench_function("noop_floor", |b| {
        b.iter(|| {
            let request = parse_review(black_box(&body)).unwrap();
            black_box(allowed(&request.uid, None, &[]).to_bytes().unwrap())
        })
    });
    // Encoding the load harness's answer alone: typed, as the server does, and through a
    // `serde_json::Value` tree, as it did before (what the typed response saves per request).
    let reviewed = review(&body, &catalog.index(), &keys, &config).unwrap();
    c.bench_function("statefulset_response_typed", |b| {
        b.iter(|| black_box(black_box(&reviewed).to_bytes().unwrap()))
    });
    c.bench_function("statefulset_response_value_tree", |b| {
        b.iter(|| black_box(serde_json::to_vec(&black_box(&reviewed).json()).unwrap()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
