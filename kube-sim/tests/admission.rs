//! Mutating admission over real HTTPS webhooks.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

fn err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected API error, got {other:?}"),
    }
}

#[tokio::test]
async fn webhook_patch_is_applied_and_review_is_well_formed() {
    let t = sim().await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen2 = seen.clone();
    let wh = webhook(move |req| {
        *seen2.lock().unwrap() = Some(req.clone());
        json!({
            "allowed": true,
            "patchType": "JSONPatch",
            "patch": b64(&json!([
                {"op": "add", "path": "/spec/initContainers", "value": [
                    {"name": "restore", "image": "busybox", "command": ["sh", "-c", "echo restored > restored.txt"]}
                ]},
                {"op": "add", "path": "/metadata/annotations", "value": {"restore-hooks.dev/plan": "x"}},
                {"op": "add", "path": "/metadata/annotations/restore-hooks.dev~1injected", "value": "restore"},
            ])),
            "warnings": ["injected one init container"],
        })
    })
    .await;
    register_webhook(
        &t.client,
        "a-hooks",
        "hooks.restore-hooks.dev",
        &wh.url,
        &wh.ca_bundle,
        json!({}),
    )
    .await;
    let mut log = t.sim.subscribe_log();

    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let mut p = pod("", json!({"velero.io/restore-name": "r1"}));
    p.metadata.name = None;
    p.metadata.generate_name = Some("db-".into());
    let created = pods.create(&PostParams::default(), &p).await.unwrap();
    let inits = created
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .clone()
        .unwrap();
    assert_eq!(inits[0].name, "restore");
    let ann = created.metadata.annotations.clone().unwrap();
    assert_eq!(ann["restore-hooks.dev/plan"], "x");
    assert_eq!(ann["restore-hooks.dev/injected"], "restore");

    let req = seen.lock().unwrap().clone().unwrap();
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(
        req["kind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert_eq!(
        req["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(req["namespace"], "default");
    assert_eq!(req["name"], "", "generateName pods have no name yet");
    assert_eq!(req["object"]["metadata"]["generateName"], "db-");
    assert!(req["oldObject"].is_null());
    assert_eq!(req["dryRun"], false);
    assert!(!req["uid"].as_str().unwrap().is_empty());

    // The init container really ran in the pod's directory.
    let name = created.metadata.name.unwrap();
    let done = wait_pod(&pods, &name, ready).await;
    assert_eq!(phase(&done), "Running");
    let file = t.sim.pod_dir("default", &name).join("restored.txt");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "restored\n");
    let mut saw_admission = false;
    while let Ok(ev) = log.try_recv() {
        if ev.kind == kube_sim::SimEventKind::Admission && ev.message.contains("patched") {
            saw_admission = true;
        }
    }
    assert!(saw_admission);

    // dryRun=All goes through admission but stores nothing.
    let dry = pods
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pod("dry", json!({})),
        )
        .await
        .unwrap();
    assert!(dry.spec.unwrap().init_containers.is_some());
    assert!(pods.get_opt("dry").await.unwrap().is_none());
    assert_eq!(seen.lock().unwrap().as_ref().unwrap()["dryRun"], true);

    // Webhook warnings come back as `Warning: 299 - "..."` headers.
    let body = serde_json::to_vec(&pod("warned", json!({}))).unwrap();
    let req = axum::http::Request::post("/api/v1/namespaces/default/pods")
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let resp = t.client.send(req.map(Into::into)).await.unwrap();
    assert_eq!(resp.status(), 201);
    let warnings: Vec<_> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        warnings,
        vec!["299 - \"injected one init container\"".to_string()]
    );
    t.sim.shutdown().await;
}

#[tokio::test]
async fn denial_message_is_the_apiservers() {
    let t = sim().await;
    let wh = webhook(
        |_| json!({"allowed": false, "status": {"code": 403, "message": "hook \"x\" is invalid"}}),
    )
    .await;
    register_webhook(
        &t.client,
        "deny",
        "deny.example.com",
        &wh.url,
        &wh.ca_bundle,
        json!({}),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let e = err(pods
        .create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap_err());
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "admission webhook \"deny.example.com\" denied the request: hook \"x\" is invalid"
    );
    assert!(pods.get_opt("p").await.unwrap().is_none());
    t.sim.shutdown().await;
}

#[tokio::test]
async fn failure_policy_fail_and_ignore() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    // Nothing listens on this port: the call fails.
    let dead = "https://127.0.0.1:9/mutate";
    let wh = webhook(|_| json!({"allowed": true})).await;
    register_webhook(
        &t.client,
        "ignore",
        "ignore.example.com",
        dead,
        &wh.ca_bundle,
        json!({"failurePolicy": "Ignore"}),
    )
    .await;
    pods.create(&PostParams::default(), &pod("ok", json!({})))
        .await
        .unwrap();

    register_webhook(
        &t.client,
        "z-fail",
        "fail.example.com",
        dead,
        &wh.ca_bundle,
        json!({"failurePolicy": "Fail", "timeoutSeconds": 2}),
    )
    .await;
    let e = err(pods
        .create(&PostParams::default(), &pod("no", json!({})))
        .await
        .unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    assert!(
        e.message.starts_with("Internal error occurred: failed calling webhook \"fail.example.com\": failed to call webhook: Post \"https://127.0.0.1:9/mutate?timeout=2s\""),
        "{}",
        e.message
    );
    t.sim.shutdown().await;
}

#[tokio::test]
async fn wrong_ca_and_bad_responses_are_call_failures() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let good = webhook(|_| json!({"allowed": true})).await;
    let other = webhook(|_| json!({"allowed": true})).await;
    // Served by `good` but trusted with `other`'s CA.
    register_webhook(
        &t.client,
        "a",
        "wrong-ca.example.com",
        &good.url,
        &other.ca_bundle,
        json!({}),
    )
    .await;
    let e = err(pods
        .create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap_err());
    assert_eq!(e.code, 500);
    assert!(e.message.contains("wrong-ca.example.com"), "{}", e.message);
    assert_eq!(good.calls.load(Ordering::SeqCst), 0);

    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    // A patch without patchType is rejected by response verification.
    let bad = webhook(|_| json!({"allowed": true, "patch": b64(&json!([]))})).await;
    register_webhook(
        &t.client,
        "b",
        "bad.example.com",
        &bad.url,
        &bad.ca_bundle,
        json!({}),
    )
    .await;
    let e = err(pods
        .create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap_err());
    assert!(
        e.message.contains("received invalid webhook response"),
        "{}",
        e.message
    );
    t.sim.shutdown().await;
}

#[tokio::test]
async fn selectors_scope_the_webhook() {
    let t = sim_with(false).await;
    let wh = webhook(|_| {
        json!({"allowed": true, "patchType": "JSONPatch",
               "patch": b64(&json!([{"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes"}}]))})
    })
    .await;
    register_webhook(
        &t.client,
        "scoped",
        "scoped.example.com",
        &wh.url,
        &wh.ca_bundle,
        json!({
            "objectSelector": {"matchExpressions": [{"key": "velero.io/restore-name", "operator": "Exists"}]},
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]},
        }),
    )
    .await;
    let nss: Api<Namespace> = Api::all(t.client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "kube-system"}})).unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let restored = pods
        .create(
            &PostParams::default(),
            &pod("r", json!({"velero.io/restore-name": "x"})),
        )
        .await
        .unwrap();
    assert_eq!(restored.metadata.annotations.unwrap()["mutated"], "yes");
    let plain = pods
        .create(&PostParams::default(), &pod("n", json!({})))
        .await
        .unwrap();
    assert!(plain.metadata.annotations.is_none());
    let sys: Api<Pod> = Api::namespaced(t.client.clone(), "kube-system");
    let skipped = sys
        .create(
            &PostParams::default(),
            &pod("s", json!({"velero.io/restore-name": "x"})),
        )
        .await
        .unwrap();
    assert!(skipped.metadata.annotations.is_none());
    assert_eq!(wh.calls.load(Ordering::SeqCst), 1);
    t.sim.shutdown().await;
}

#[tokio::test]
async fn reinvocation_if_needed() {
    let t = sim_with(false).await;
    // "a" runs first and adds a label only if "b"'s annotation is there; "b" adds the annotation.
    let a = webhook(|req| {
        if req["object"]["metadata"]["annotations"]["b"].is_string() {
            json!({"allowed": true, "patchType": "JSONPatch",
                   "patch": b64(&json!([{"op": "add", "path": "/metadata/labels/a-saw-b", "value": "true"}]))})
        } else {
            json!({"allowed": true})
        }
    })
    .await;
    let b = webhook(|_| {
        json!({"allowed": true, "patchType": "JSONPatch",
               "patch": b64(&json!([{"op": "add", "path": "/metadata/annotations", "value": {"b": "1"}}]))})
    })
    .await;
    register_webhook(
        &t.client,
        "a",
        "a.example.com",
        &a.url,
        &a.ca_bundle,
        json!({"reinvocationPolicy": "IfNeeded"}),
    )
    .await;
    register_webhook(
        &t.client,
        "b",
        "b.example.com",
        &b.url,
        &b.ca_bundle,
        json!({}),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let p = pods
        .create(&PostParams::default(), &pod("p", json!({"x": "y"})))
        .await
        .unwrap();
    assert_eq!(p.metadata.labels.unwrap()["a-saw-b"], "true");
    assert_eq!(a.calls.load(Ordering::SeqCst), 2);
    assert_eq!(b.calls.load(Ordering::SeqCst), 1);
    t.sim.shutdown().await;
}
