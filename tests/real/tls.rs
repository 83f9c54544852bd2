//! The webhook's serving certificate (a throwaway CA, as `certs/make-certs.sh` would make one),
//! and a second, trivial mutating webhook ("mesh") served from the test process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use base64::Engine as _;
use restore_hooks_testkit::{Leaf, ThrowawayCa};
use serde_json::{Value, json};

/// A CA and a serving certificate it signed, written as `tls.crt` (leaf and CA) and `tls.key`
/// (PKCS#8) into a directory: what the chart mounts from `tls.existingSecret`.
pub struct Certs {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub dir: PathBuf,
}

impl Certs {
    /// Names: the chart's Service names (as make-certs.sh makes them) and 127.0.0.1, where the
    /// API server reaches the host process.
    pub fn new(dir: &Path, service: &str, namespace: &str) -> Certs {
        let ca = ThrowawayCa::root("restore-hooks real-cp test CA").unwrap();
        let names = [
            format!("{service}.{namespace}.svc"),
            format!("{service}.{namespace}.svc.cluster.local"),
            format!("{service}.{namespace}"),
            service.to_string(),
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ];
        let leaf = ca
            .issue(&names.iter().map(String::as_str).collect::<Vec<_>>())
            .unwrap();
        let ca_pem = ca.cert_pem();
        // As cert-manager writes a CA-issued Secret: the chain up to and including the CA.
        let leaf = Leaf {
            chain_pem: format!("{}{}", leaf.chain_pem, ca_pem),
            ..leaf
        };
        leaf.write(dir, "tls").unwrap();
        ca.write_cert(dir, "ca.crt").unwrap();
        Certs {
            ca_pem,
            cert_pem: leaf.chain_pem,
            key_pem: leaf.key_pem,
            dir: dir.to_path_buf(),
        }
    }

    /// The `caBundle` of a webhook: base64 of the CA's PEM.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
}

fn install_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A trivial second mutating webhook, like a service mesh's: it adds an init container
/// `mesh-init` at index 0 of every pod it is sent (once: a pod that has it is left alone). It
/// runs on its own thread and Tokio runtime until dropped.
pub struct MeshWebhook {
    pub port: u16,
    calls: Arc<AtomicUsize>,
    handle: axum_server::Handle<SocketAddr>,
    thread: Option<std::thread::JoinHandle<()>>,
}

pub const MESH_INIT: &str = "mesh-init";

impl MeshWebhook {
    pub fn start(certs: &Certs) -> MeshWebhook {
        install_crypto();
        let port = realcp::free_port().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let handle = axum_server::Handle::new();
        let (cert, key) = (certs.cert_pem.clone(), certs.key_pem.clone());
        let (counter, server_handle) = (calls.clone(), handle.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
                    cert.into_bytes(),
                    key.into_bytes(),
                )
                .await
                .unwrap();
                let app = axum::Router::new().route(
                    "/mesh",
                    axum::routing::post(move |body: axum::body::Bytes| {
                        let counter = counter.clone();
                        async move {
                            counter.fetch_add(1, Ordering::SeqCst);
                            axum::Json(mesh_review(&body))
                        }
                    }),
                );
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let _ = ready_tx.send(());
                axum_server::bind_rustls(addr, tls)
                    .handle(server_handle)
                    .serve(app.into_make_service())
                    .await
                    .unwrap();
            });
        });
        ready_rx.recv().unwrap();
        // bind happens inside serve: wait until it accepts.
        super::wait_until(
            "the mesh webhook to listen",
            std::time::Duration::from_secs(30),
            || std::net::TcpStream::connect(("127.0.0.1", port)),
        );
        MeshWebhook {
            port,
            calls,
            handle,
            thread: Some(thread),
        }
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Its MutatingWebhookConfiguration: pods CREATEd in namespaces labelled `mesh=on`. Named
    /// `zz-...` so that the API server calls it after restore-hooks' webhooks (configurations
    /// are called in name order): its change is what makes the API server reinvoke ours.
    pub fn configuration(&self, certs: &Certs) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "zz-mesh"},
            "webhooks": [{
                "name": "inject.mesh.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{}/mesh", self.port),
                    "caBundle": certs.ca_bundle(),
                },
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"mesh": "on"}},
            }],
        })
    }
}

impl Drop for MeshWebhook {
    fn drop(&mut self) {
        self.handle.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn mesh_review(body: &[u8]) -> Value {
    let review: Value = serde_json::from_slice(body).unwrap_or_default();
    let request = &review["request"];
    let pod = &request["object"];
    let inits = pod["spec"]["initContainers"].as_array();
    let has = inits.is_some_and(|c| c.iter().any(|c| c["name"] == MESH_INIT));
    let container = json!({"name": MESH_INIT, "image": "mesh/proxy-init:1.0",
                           "command": ["mesh-iptables", "--redirect"]});
    let mut response = json!({"uid": request["uid"], "allowed": true});
    if !has {
        let patch = match inits {
            Some(c) if !c.is_empty() => {
                json!([{"op": "add", "path": "/spec/initContainers/0", "value": container}])
            }
            _ => json!([{"op": "add", "path": "/spec/initContainers", "value": [container]}]),
        };
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(
            base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&patch).unwrap())
        );
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}
