//! `POST /mutate` semantics at the AdmissionReview level, checked the way the API server
//! verifies a webhook response (uid echo, apiVersion/kind, patch ⇔ patchType).

use base64::Engine;
use restore_hooks::admission::Issuer;
use restore_hooks::catalog::StaticCatalog;
use restore_hooks::catalog::static_files::{DocumentDefaults, add_documents};
use restore_hooks::config::{EngineConfig, OnInvalid};
use restore_hooks::hooks::signing::{PLAN_SIGNATURE_ANNOTATION, PlanKeys, PodBinding};
use restore_hooks::webhook::review::{BadReview, Outcome, ReviewContext, Reviewed};
use serde_json::{Value, json};

/// TEST ONLY: the installation's plan key (32 bytes, protects nothing).
const PLAN_KEY: &[u8; 32] = b"review-test-plan-key-0123456789!";

fn keys() -> PlanKeys {
    PlanKeys::new(PLAN_KEY, None).unwrap()
}

/// One fixed admission time, so that a reinvocation sees the plan it would issue itself.
fn now() -> jiff::Timestamp {
    "2026-12-02T10:00:01Z".parse().unwrap()
}

/// The webhook's decision on `body`, with `catalog` compiled into the index and plans signed
/// with [`PLAN_KEY`].
fn review(
    body: &[u8],
    catalog: &StaticCatalog,
    config: &EngineConfig,
) -> Result<Reviewed, BadReview> {
    let index = catalog.index();
    let keys = keys();
    restore_hooks::webhook::review::review(
        body,
        ReviewContext {
            index: &index,
            namespace_labels: None,
            config,
            issuer: Issuer {
                keys: Some(&keys),
                now: now(),
                plan_id: "AAECAwQFBgcICQoL",
            },
            exec_right: Some(restore_hooks::admission::ExecRight::Granted),
            extra_warnings: Vec::new(),
        },
    )
}

const HOOK: &str = r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: seed, namespace: shop}
spec:
  postHooks:
  - init: {initContainers: [{name: seed, image: busybox, command: [/seed]}]}
  - exec: {command: [/analyze]}
"#;

fn catalog() -> StaticCatalog {
    let mut c = StaticCatalog::default();
    add_documents(
        &mut c,
        std::path::Path::new("hooks.yaml"),
        HOOK,
        &DocumentDefaults::default(),
    )
    .unwrap();
    c
}

fn restored_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "db-", "namespace": "shop",
                        "labels": {"velero.io/restore-name": "nightly"}},
           "spec": {"containers": [{"name": "db", "image": "postgres"}]}})
}

fn request(object: Value, patch: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut r = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:velero:velero"},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    });
    patch(&mut r);
    serde_json::to_vec(&r).unwrap()
}

/// The response as the API server sees it, checked like `VerifyAdmissionResponse`.
fn answer(body: &[u8], config: &EngineConfig) -> (Value, Outcome) {
    let reviewed = review(body, &catalog(), config).expect("a valid review");
    let v = reviewed.json();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(reviewed.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
    let has_patch = v["response"].get("patch").is_some_and(|p| !p.is_null());
    let has_type = v["response"].get("patchType").is_some_and(|p| !p.is_null());
    assert_eq!(has_patch, has_type, "patch and patchType go together: {v}");
    if has_patch {
        assert_eq!(v["response"]["patchType"], "JSONPatch");
    }
    (v, reviewed.outcome)
}

fn decoded_patch(v: &Value) -> Vec<Value> {
    let b64 = v["response"]["patch"].as_str().expect("a patch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn restored_pod_gets_a_base64_json_patch() {
    let (v, outcome) = answer(&request(restored_pod(), |_| {}), &EngineConfig::default());
    assert_eq!(outcome, Outcome::Patched);
    assert_eq!(v["response"]["allowed"], true);
    let ops = decoded_patch(&v);
    assert_eq!(ops[0]["op"], "add");
    assert_eq!(ops[0]["path"], "/spec/initContainers");
    let mut pod = restored_pod();
    json_patch::patch(
        &mut pod,
        &serde_json::from_value::<json_patch::Patch>(json!(ops)).unwrap(),
    )
    .unwrap();
    assert_eq!(pod["spec"]["initContainers"][0]["name"], "seed");
    assert_eq!(
        pod["metadata"]["labels"]["restore-hooks.dev/exec"],
        "pending"
    );
    // Since the signed plans (docs/behaviour.md §4.5, §9.1): every restored pod is labelled with
    // its restore, and the plan carries `issuedAt` and a signature bound to the pod.
    assert_eq!(
        pod["metadata"]["labels"]["restore-hooks.dev/restore-run"],
        "nightly"
    );
    let annotations = &pod["metadata"]["annotations"];
    let plan = annotations["restore-hooks.dev/plan"].as_str().unwrap();
    let plan_json: Value = serde_json::from_str(plan).unwrap();
    assert_eq!(plan_json["issuedAt"], "2026-12-02T10:00:01Z");
    assert_eq!(plan_json["hooks"][0]["command"], json!(["/analyze"]));
    let binding = PodBinding {
        namespace: "shop",
        name: "",
        generate_name: "db-",
    };
    keys()
        .verify_plan(
            binding,
            plan,
            annotations[PLAN_SIGNATURE_ANNOTATION].as_str(),
        )
        .expect("the plan signature verifies for this pod");
}

/// Behaviour since the restore-run index (docs/behaviour.md §4.5): a restored pod that no hook
/// applies to is still patched, with the `restore-hooks.dev/restore-run` label only.
#[test]
fn restored_pod_without_hooks_gets_only_the_restore_run_label() {
    let mut pod = restored_pod();
    pod["metadata"]["namespace"] = json!("other");
    let body = request(pod.clone(), |r| r["request"]["namespace"] = json!("other"));
    let (v, outcome) = answer(&body, &EngineConfig::default());
    assert_eq!(outcome, Outcome::Patched);
    let ops = decoded_patch(&v);
    assert_eq!(
        ops,
        vec![
            json!({"op": "add", "path": "/metadata/labels/restore-hooks.dev~1restore-run",
                    "value": "nightly"})
        ],
        "{ops:?}"
    );
}

#[test]
fn dry_run_gets_the_same_patch() {
    let normal = answer(&request(restored_pod(), |_| {}), &EngineConfig::default()).0;
    let dry = answer(
        &request(restored_pod(), |r| r["request"]["dryRun"] = json!(true)),
        &EngineConfig::default(),
    )
    .0;
    assert_eq!(decoded_patch(&normal), decoded_patch(&dry));
}

#[test]
fn non_pod_and_non_create_requests_are_allowed_unchanged() {
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<Edit> = vec![
        Box::new(|r| r["request"]["operation"] = json!("UPDATE")),
        Box::new(|r| r["request"]["operation"] = json!("DELETE")),
        Box::new(|r| {
            r["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
            r["request"]["object"] = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "labels": {"velero.io/restore-name": "x"}},
                "spec": {"replicas": "not-a-number"}});
        }),
        Box::new(|r| {
            r["request"]["subResource"] = json!("binding");
            r["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Binding"});
        }),
    ];
    for case in cases {
        let (v, outcome) = answer(&request(restored_pod(), case), &EngineConfig::default());
        assert_eq!(outcome, Outcome::Unchanged);
        assert_eq!(v["response"]["allowed"], true);
        assert!(v["response"].get("patch").is_none_or(Value::is_null));
    }
}

#[test]
fn out_of_scope_pod_is_allowed_unchanged() {
    let mut pod = restored_pod();
    pod["metadata"]["labels"] = json!({"app": "web"});
    let (v, outcome) = answer(&request(pod, |_| {}), &EngineConfig::default());
    assert_eq!(outcome, Outcome::Unchanged);
    assert_eq!(v["response"]["allowed"], true);
}

#[test]
fn invalid_hooks_deny_or_warn() {
    let mut pod = restored_pod();
    pod["metadata"]["labels"] = json!({"app": "db"});
    pod["metadata"]["annotations"] = json!({"post.hook.restore.velero.io/command": "[\"broken\""});
    let body = request(pod, |r| r["request"]["namespace"] = json!("shop"));
    // In scope through a labelled namespace so that annotations apply under `defer`.
    let mut c = catalog();
    c.namespaces.insert(
        "shop".into(),
        [(
            "restore-hooks.dev/restore".to_string(),
            "nightly".to_string(),
        )]
        .into(),
    );
    let reviewed = review(&body, &c, &EngineConfig::default()).unwrap();
    assert_eq!(reviewed.outcome, Outcome::Denied);
    let v = reviewed.json();
    assert_eq!(v["response"]["allowed"], false);
    let message = v["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("pod shop/db-*"), "{message}");
    assert!(
        message.contains("post.hook.restore.velero.io/command"),
        "{message}"
    );
    assert_eq!(reviewed.message.as_deref(), Some(message));

    let warn = EngineConfig {
        on_invalid: OnInvalid::Warn,
        ..EngineConfig::default()
    };
    let reviewed = review(&body, &c, &warn).unwrap();
    assert_eq!(reviewed.outcome, Outcome::Warned);
    let v = reviewed.json();
    assert_eq!(v["response"]["allowed"], true);
    let warnings = v["response"]["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains("skipped invalid hook")
    );
    // The valid RestoreHook hooks still apply.
    assert!(!decoded_patch(&v).is_empty());
}

#[test]
fn bad_bodies_are_rejected_with_a_reason() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"".to_vec(), "not an AdmissionReview"),
        (b"{not json".to_vec(), "not an AdmissionReview"),
        (b"[]".to_vec(), "not an AdmissionReview"),
        (
            request(restored_pod(), |r| {
                r["apiVersion"] = json!("admission.k8s.io/v1beta1")
            }),
            "admissionReviewVersions: [v1]",
        ),
        (
            request(restored_pod(), |r| r["kind"] = json!("Pod")),
            "kind AdmissionReview",
        ),
        (
            serde_json::to_vec(
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            )
            .unwrap(),
            "has no `request`",
        ),
    ];
    for (body, want) in cases {
        let err = review(&body, &catalog(), &EngineConfig::default())
            .err()
            .unwrap_or_else(|| panic!("{} should be rejected", String::from_utf8_lossy(&body)));
        assert!(
            err.to_string().contains(want),
            "{err} should contain {want}"
        );
    }
}

#[test]
fn undecodable_pod_is_denied_not_a_crash() {
    let body = request(restored_pod(), |r| {
        r["request"]["object"]["spec"]["containers"] = json!("oops")
    });
    let reviewed = review(&body, &catalog(), &EngineConfig::default()).unwrap();
    assert_eq!(reviewed.outcome, Outcome::Denied);
    assert!(reviewed.message.unwrap().contains("not a valid Pod"));
}

#[test]
fn reinvocation_on_the_patched_pod_gives_no_patch() {
    let (v, _) = answer(&request(restored_pod(), |_| {}), &EngineConfig::default());
    let mut pod = restored_pod();
    let patch: json_patch::Patch = serde_json::from_value(json!(decoded_patch(&v))).unwrap();
    json_patch::patch(&mut pod, &patch).unwrap();
    let (v, outcome) = answer(&request(pod, |_| {}), &EngineConfig::default());
    assert_eq!(outcome, Outcome::Unchanged);
    assert!(v["response"].get("patch").is_none_or(Value::is_null));
}

/// Found by fuzzing: the patch is computed against the object exactly as sent. A pod without
/// `metadata` (in a labelled restore namespace) must get a patch that creates it first; a typed
/// round trip would have made `/metadata` appear to exist.
#[test]
fn patch_applies_to_the_raw_object_even_without_metadata() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "spec": {"containers": [{"name": "db", "image": "postgres"}]}});
    let mut c = catalog();
    c.namespaces.insert(
        "shop".into(),
        [("restore-hooks.dev/restore".to_string(), "r9".to_string())].into(),
    );
    let reviewed = review(&request(pod.clone(), |_| {}), &c, &EngineConfig::default()).unwrap();
    assert_eq!(reviewed.outcome, Outcome::Patched);
    let patch: json_patch::Patch =
        serde_json::from_value(json!(decoded_patch(&reviewed.json()))).unwrap();
    let mut patched = pod;
    json_patch::patch(&mut patched, &patch.0).expect("the patch applies to the object as sent");
    assert_eq!(
        patched["metadata"]["labels"]["restore-hooks.dev/exec"],
        "pending"
    );
}
