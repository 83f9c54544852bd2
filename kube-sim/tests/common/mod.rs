//! Shared test setup: a simulator per test, a TLS webhook server with its own CA.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube_sim::{SimHandle, SimOptions};
use serde_json::{Value, json};

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub struct TestSim {
    pub sim: SimHandle,
    pub client: kube::Client,
    pub dir: tempfile::TempDir,
}

pub async fn sim() -> TestSim {
    sim_with(true).await
}

pub async fn sim_with(kubelet: bool) -> TestSim {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let sim = kube_sim::start(SimOptions {
        workdir: dir.path().join("pods"),
        kubelet,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = sim.client().await;
    TestSim { sim, client, dir }
}

pub fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]},
    }))
    .unwrap()
}

/// Polls `get` until `cond` holds (bounded; panics with the last object on timeout).
pub async fn wait_pod(api: &Api<Pod>, name: &str, cond: impl Fn(&Pod) -> bool) -> Pod {
    restore_hooks_testkit::eventually!(format!("pod {name}"), Duration::from_secs(10), {
        match api.get_opt(name).await.unwrap() {
            Some(p) if cond(&p) => Ok(p),
            other => Err(format!("{other:?}")),
        }
    })
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

pub fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// An HTTPS admission webhook on loopback, with a fresh CA.
pub struct Webhook {
    pub url: String,
    pub ca_bundle: String,
    pub handle: axum_server::Handle<SocketAddr>,
    pub calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// `respond` gets the AdmissionReview request and returns the `response` fields other than
/// `uid` (added here), e.g. `{"allowed": true, "patchType": "JSONPatch", "patch": "..."}`.
pub async fn webhook<F>(respond: F) -> Webhook
where
    F: Fn(&Value) -> Value + Send + Sync + 'static,
{
    install_crypto();
    let ca = restore_hooks_testkit::ThrowawayCa::root("kube-sim test CA").unwrap();
    let leaf = ca.issue(&["127.0.0.1", "localhost"]).unwrap();

    let config = axum_server::tls_rustls::RustlsConfig::from_pem(
        leaf.chain_pem.into_bytes(),
        leaf.key_pem.into_bytes(),
    )
    .await
    .unwrap();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    let respond = Arc::new(respond);
    let app = axum::Router::new().route(
        "/mutate",
        post(move |Json(review): Json<Value>| {
            let respond = respond.clone();
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let req = &review["request"];
                let mut resp = respond(req);
                resp["uid"] = req["uid"].clone();
                Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}))
            }
        }),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(listener, config)
        .unwrap()
        .handle(handle.clone());
    tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });
    Webhook {
        url: format!("https://{addr}/mutate"),
        ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca.cert_pem()),
        handle,
        calls,
    }
}

pub fn b64(v: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(v.to_string())
}

/// Registers a MutatingWebhookConfiguration with one webhook for pod CREATE.
pub async fn register_webhook(
    client: &kube::Client,
    cfg_name: &str,
    hook_name: &str,
    url: &str,
    ca_bundle: &str,
    extra: Value,
) {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let mut wh = json!({
        "name": hook_name,
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let (Some(w), Some(e)) = (wh.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            w.insert(k.clone(), v.clone());
        }
    }
    let cfg: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": cfg_name},
        "webhooks": [wh],
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&Default::default(), &cfg)
        .await
        .unwrap();
}
