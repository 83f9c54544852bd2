//! Any input: no panic. Input that is a JSON object is used as the AdmissionReview body when it
//! has a `request`, else as the pod of a fixed AdmissionReview. Whenever the webhook answers with
//! a patch, the patch applies to the pod, and admitting the patched pod again gives no patch.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use base64::Engine;
use libfuzzer_sys::fuzz_target;
use restore_hooks::catalog::StaticCatalog;
use restore_hooks::catalog::static_files::{DocumentDefaults, add_documents};
use restore_hooks::config::{EngineConfig, VeleroHooksMode};
use restore_hooks::hooks::signing::PlanKeys;
use restore_hooks::index::HookIndex;
use restore_hooks::admission::{ExecRight, Issuer};
use restore_hooks::webhook::review::{BadReview, ReviewContext, Reviewed};
use serde_json::{Value, json};

const HOOKS: &str = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: a, namespace: shop}
spec:
  restores: ["r*", "{x,y}-?"]
  labelSelector: {matchExpressions: [{key: app, operator: In, values: [db, web]}]}
  postHooks:
  - init: {initContainers: [{name: seed, image: busybox, command: [/seed]}, {name: seed-2, image: busybox}]}
  - exec: {command: [/x], onError: Fail, execTimeout: 1m}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: b, namespace: shop}
spec:
  postHooks:
  - init: {initContainers: [{name: data-init, image: busybox, volumeMounts: [{name: data, mountPath: /d}]}]}
  - exec: {container: sidecar, command: [/y], waitForReady: true}
---
apiVersion: velero.io/v1
kind: Restore
metadata: {name: r1, namespace: velero}
spec:
  hooks:
    resources:
    - name: v
      includedNamespaces: ["sh*"]
      postHooks:
      - init: {initContainers: [{name: v-init, image: alpine}]}
      - exec: {command: [/v]}
"#;

/// The compiled hooks, the policy and the plan key (plans are signed, as in a cluster).
struct Setup {
    index: HookIndex,
    config: EngineConfig,
    keys: PlanKeys,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let mut c = StaticCatalog::default();
        add_documents(
            &mut c,
            Path::new("fuzz"),
            HOOKS,
            &DocumentDefaults::default(),
        )
        .unwrap();
        c.namespaces.insert(
            "shop".into(),
            [("restore-hooks.dev/restore".to_string(), "r2".to_string())].into(),
        );
        let config = EngineConfig {
            velero_hooks: VeleroHooksMode::Own,
            ..EngineConfig::default()
        };
        // TEST ONLY key material (32 bytes).
        let keys = PlanKeys::new(b"fuzz-admission-plan-key-01234567", None).unwrap();
        Setup {
            index: c.index(),
            config,
            keys,
        }
    })
}

/// The webhook's decision, as one fixed issuance (time and plan id) by a creator that may exec:
/// re-admitting a patched pod must then find exactly the plan it would issue itself.
fn review(body: &[u8], setup: &Setup) -> Result<Reviewed, BadReview> {
    restore_hooks::webhook::review::review(
        body,
        ReviewContext {
            index: &setup.index,
            namespace_labels: None,
            config: &setup.config,
            issuer: Issuer {
                keys: Some(&setup.keys),
                now: "2026-12-02T10:00:01Z".parse().unwrap(),
                plan_id: "AAECAwQFBgcICQoL",
            },
            exec_right: Some(ExecRight::Granted),
            extra_warnings: Vec::new(),
        },
    )
}

fn wrap(pod: &Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                       "resource": {"group": "", "version": "v1", "resource": "pods"},
                       "namespace": "shop", "operation": "CREATE", "userInfo": {},
                       "object": pod}})
}

fuzz_target!(|data: &[u8]| {
    let setup = setup();
    let Ok(reviewed) = review(data, setup) else {
        // Not a review: try the input as a pod.
        let Ok(pod) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if !pod.is_object() || pod.get("request").is_some() {
            return;
        }
        check(&pod, setup);
        return;
    };
    let request_pod = serde_json::from_slice::<Value>(data)
        .ok()
        .and_then(|v| v.pointer("/request/object").cloned());
    let response = reviewed.json();
    if let (Some(b64), Some(pod)) = (response["response"]["patch"].as_str(), request_pod) {
        let ops = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&ops).unwrap();
        let mut patched = pod;
        json_patch::patch(&mut patched, &patch.0).expect("an accepted patch applies to the pod");
    }
});

fn check(pod: &Value, setup: &Setup) {
    let reviewed = review(&serde_json::to_vec(&wrap(pod)).unwrap(), setup)
        .expect("a well-formed review is always answered");
    let response = reviewed.json();
    let Some(b64) = response["response"]["patch"].as_str() else {
        return;
    };
    let ops = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&ops).unwrap();
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &patch.0).expect("an accepted patch applies to the pod");
    let again = review(&serde_json::to_vec(&wrap(&patched)).unwrap(), setup).unwrap();
    assert!(
        again.json()["response"]["patch"].is_null(),
        "re-admitting the patched pod must not patch again: {patched}"
    );
}
