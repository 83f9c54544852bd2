//! The chart's default TLS path for real (docs/install.md "With cert-manager"): cert-manager
//! v1.21 (e2e/realcp) issues the webhook's serving certificate from the chart's own CA chain
//! and injects the CA into the MutatingWebhookConfiguration, and the API server calls the
//! webhook through the chart's Service. The chart is applied as `helm template` renders it with
//! its defaults (only shorter certificate lifetimes, through its values): nothing is replaced.
//!
//! How the pieces meet on one host (e2e/realcp/README.md "cert-manager"): the API server's
//! `cluster` egress goes through an HTTP CONNECT proxy on 127.0.0.1 that maps the Service's
//! ClusterIP:443 to the product's loopback port, so the API server resolves the Service, checks
//! the certificate against the injected caBundle under the name `<svc>.<ns>.svc`, and no packet
//! leaves loopback; the product reads the Secret cert-manager writes through a directory kept in
//! sync the way the kubelet does (a `..data` symlink swapped atomically), as its pod would.
//!
//! Every admission below is a pod Velero would restore (the restore label): a TLS failure (wrong
//! DNS name, CA not injected, a CA the bundle does not hold) admits it unmutated under the chart's
//! `veleroPodFailurePolicy: Ignore`, and the test fails naming the pod that was not mutated. Waits are failure guards, never performance bounds.

mod real;

use std::net::TcpStream;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use base64::Engine as _;
use real::scenarios::{init_names, wait_compiled};
use real::*;
use realcp::CertManager;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

const GUARD: Duration = Duration::from_secs(180);

/// The chart installed with cert-manager on a control plane whose API server reaches Services
/// through the egress proxy; the product not started yet.
struct Setup {
    install: Install,
    /// The rendered chart's TLS objects, as the tests find them from what uses them.
    tls: ChartTls,
    /// The Secret the webhook Deployment mounts, kept in sync in `install.certs.dir`.
    volume: SecretVolume,
}

/// Names the chart wires together, each read from the object that uses it: a name that does
/// not match fails the test where it is used, as it would break a cluster.
struct ChartTls {
    /// The Secret the webhook Deployment mounts as its TLS directory (volume `tls`).
    secret: String,
    /// The Certificate that writes that Secret (the serving certificate).
    serving: String,
    /// The Certificate its issuer signs with (the chart's CA), if the chart makes one.
    ca: Option<String>,
    /// The Secret of that CA Certificate.
    ca_secret: Option<String>,
    /// The MutatingWebhookConfiguration and the Service its webhooks call.
    mwc: String,
    service: String,
    service_port: u16,
}

fn install_with_cert_manager(helm_args: &[&str]) -> Setup {
    let cp = ControlPlane::start(Options {
        service_proxy: true,
        ..Options::default()
    })
    .unwrap_or_else(|e| panic!("the real control plane did not start: {e:#}"));
    // cert-manager's CRDs first, as its own install would have put them there.
    CertManager::apply_crds(&cp).unwrap_or_else(|e| panic!("{e:#}"));

    // The chart's defaults: cert-manager on, Service clientConfig.
    let helm_args: Vec<String> = helm_args.iter().map(|a| a.to_string()).collect();
    let docs = render_chart(&server_version(&cp), &helm_args);
    let rendered: Vec<Value> = docs.iter().map(|d| d.value.clone()).collect();
    let tls = chart_tls(&rendered);

    // docs/install.md "With cert-manager": helm install --create-namespace, nothing else.
    cp.kubectl_ok(["create", "namespace", NAMESPACE]).unwrap();
    let (crds, rest): (Vec<&Doc>, Vec<&Doc>) = docs
        .iter()
        .partition(|d| d.value["kind"] == "CustomResourceDefinition");
    let yaml = |docs: &[&Doc]| docs.iter().map(|d| d.yaml.clone()).collect::<Vec<_>>();
    apply_crds_first(&cp, &yaml(&crds), &yaml(&rest));

    let replica_pods = of_kind(&rendered, "Deployment")
        .into_iter()
        .map(|d| {
            let name = d["metadata"]["name"].as_str().unwrap().to_string();
            let pods = deployment_pods(&cp, d);
            (name, pods)
        })
        .collect();
    let tls_dir = cp.work_dir().join("webhook-tls");
    let marks = cp.work_dir().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let volume = SecretVolume::start(&cp, NAMESPACE, &tls.secret, &tls_dir);
    let install = Install {
        // Only `dir` is used (`--tls-dir`): the certificates are cert-manager's.
        certs: Certs {
            ca_pem: String::new(),
            cert_pem: String::new(),
            key_pem: String::new(),
            dir: tls_dir,
        },
        webhook_port: realcp::free_port().unwrap(),
        applied: rendered.clone(),
        rendered,
        replica_pods,
        marks,
        cp,
    };
    Setup {
        install,
        tls,
        volume,
    }
}

fn chart_tls(docs: &[Value]) -> ChartTls {
    let webhook_deployment = of_kind(docs, "Deployment")
        .into_iter()
        .find(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .is_some_and(|a| {
                    a.iter()
                        .any(|a| a.as_str().is_some_and(|a| a.starts_with("--tls-dir=")))
                })
        })
        .expect("a Deployment that serves the webhook (--tls-dir)");
    let secret = webhook_deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "tls")
        .and_then(|v| v["secret"]["secretName"].as_str())
        .expect("the webhook Deployment mounts a Secret as volume `tls`")
        .to_string();
    let certificates = of_kind(docs, "Certificate");
    let serving = certificates
        .iter()
        .find(|c| c["spec"]["secretName"] == secret.as_str())
        .unwrap_or_else(|| {
            panic!("no rendered Certificate writes Secret {secret}, which the webhook mounts")
        });
    let ca = certificates.iter().find(|c| c["spec"]["isCA"] == true);
    let mwc = of_kind(docs, "MutatingWebhookConfiguration")[0];
    let service = &mwc["webhooks"][0]["clientConfig"]["service"];
    ChartTls {
        secret,
        serving: serving["metadata"]["name"].as_str().unwrap().to_string(),
        ca: ca.map(|c| c["metadata"]["name"].as_str().unwrap().to_string()),
        ca_secret: ca.map(|c| c["spec"]["secretName"].as_str().unwrap().to_string()),
        mwc: mwc["metadata"]["name"].as_str().unwrap().to_string(),
        service: service["name"].as_str().unwrap().to_string(),
        service_port: service["port"].as_u64().unwrap_or(443) as u16,
    }
}

/// A Secret volume as the kubelet keeps it (pkg/volume/util AtomicWriter): the files of the
/// current version in a hidden directory `..<version>`, the symlink `..data` pointing at it and
/// swapped by rename (atomic), and each key a symlink `KEY -> ..data/KEY`. A reader that opens
/// `tls.crt` and `tls.key` never sees one from one version and one from another, as long as it
/// resolves them through `..data` once. Synced every half second; [`SecretVolume::pause`] holds
/// the files back, like a kubelet that has not synced yet.
struct SecretVolume {
    dir: PathBuf,
    paused: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    /// The `tls.crt` of every version written, oldest first.
    written: Arc<Mutex<Vec<String>>>,
    errors: Arc<Mutex<Vec<String>>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl SecretVolume {
    fn start(cp: &ControlPlane, namespace: &str, name: &str, dir: &Path) -> SecretVolume {
        std::fs::create_dir_all(dir).unwrap();
        let mut get = Command::new(cp.kubectl_path());
        get.arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
            .arg(format!(
                "--cache-dir={}",
                cp.work_dir().join("kubectl-cache").display()
            ))
            .args(["get", "secret", name, "-n", namespace, "-o", "json"])
            .stdin(Stdio::null());
        let (paused, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (written, errors) = (
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(Mutex::new(Vec::new())),
        );
        let thread = {
            let (dir, paused, stop) = (dir.to_path_buf(), paused.clone(), stop.clone());
            let (written, errors) = (written.clone(), errors.clone());
            thread::spawn(move || {
                let mut version = String::new();
                let mut seq = 0;
                while !stop.load(Ordering::SeqCst) {
                    // A Secret that does not exist (yet) is not mounted, as a kubelet waits.
                    let secret = (!paused.load(Ordering::SeqCst))
                        .then(|| get.output().ok())
                        .flatten()
                        .filter(|out| out.status.success())
                        .map(|out| serde_json::from_slice::<Value>(&out.stdout).unwrap());
                    if let Some(secret) = secret
                        && secret["metadata"]["resourceVersion"] != version.as_str()
                    {
                        seq += 1;
                        match write_atomically(&dir, seq, &secret["data"]) {
                            Ok(crt) => {
                                version = secret["metadata"]["resourceVersion"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .to_string();
                                written.lock().unwrap().push(crt);
                            }
                            Err(e) => errors.lock().unwrap().push(format!("{e}")),
                        }
                    }
                    thread::sleep(Duration::from_millis(500));
                }
            })
        };
        SecretVolume {
            dir: dir.to_path_buf(),
            paused,
            stop,
            written,
            errors,
            thread: Some(thread),
        }
    }

    fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Waits until the directory holds `tls_crt` (PEM, as in the Secret).
    fn wait_holds(&self, tls_crt: &str) {
        wait_until(
            "the TLS directory to hold the Secret's certificate",
            GUARD,
            || {
                let errors = self.errors.lock().unwrap();
                assert!(errors.is_empty(), "writing the TLS directory: {errors:?}");
                (std::fs::read_to_string(self.dir.join("tls.crt"))
                    .ok()
                    .as_deref()
                    == Some(tls_crt))
                .then_some(())
                .ok_or("not yet")
            },
        );
    }

    fn versions_written(&self) -> usize {
        self.written.lock().unwrap().len()
    }
}

impl Drop for SecretVolume {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One version of the volume: files in `..<seq>`, `..data` swapped to it, key symlinks, the
/// previous version removed. Returns its `tls.crt`.
fn write_atomically(dir: &Path, seq: usize, data: &Value) -> std::io::Result<String> {
    let version = format!("..v{seq}");
    let target = dir.join(&version);
    std::fs::create_dir_all(&target)?;
    let mut crt = String::new();
    let mut keys = Vec::new();
    for (key, value) in data.as_object().into_iter().flatten() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap_or_default())
            .map_err(std::io::Error::other)?;
        if key == "tls.crt" {
            crt = String::from_utf8_lossy(&bytes).into_owned();
        }
        std::fs::write(target.join(key), bytes)?;
        keys.push(key.clone());
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(&version, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    for key in keys {
        let link = dir.join(&key);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(&key), &link)?;
        }
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(crt)
}

/// PEM (one or more certificates) to DER.
fn ders(pem: &str) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.expect("PEM certificate").to_vec())
        .collect()
}

/// A certificate's facts the tests compare.
#[derive(Debug, PartialEq)]
struct CertFacts {
    subject: String,
    issuer: String,
    serial: String,
    spki: Vec<u8>,
    dns_names: Vec<String>,
    not_after: i64,
}

fn facts(der: &[u8]) -> CertFacts {
    let (_, cert) = x509_parser::parse_x509_certificate(der).expect("an X.509 certificate");
    let mut dns_names: Vec<String> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    dns_names.sort();
    CertFacts {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        serial: cert.raw_serial_as_string(),
        spki: cert.public_key().raw.to_vec(),
        dns_names,
        not_after: cert.validity().not_after.timestamp(),
    }
}

/// A Secret's `key`, decoded.
fn secret_value(cp: &ControlPlane, name: &str, key: &str) -> String {
    let secret = get_json(cp, &["get", "secret", name, "-n", NAMESPACE])
        .unwrap_or_else(|| panic!("Secret {NAMESPACE}/{name} does not exist"));
    let b64 = secret["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("Secret {name} has no {key}: {}", secret["data"]));
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
    )
    .unwrap()
}

/// Each webhook's caBundle (PEM), in order.
fn ca_bundles(cp: &ControlPlane, mwc: &str) -> Vec<String> {
    let mwc = get_json(cp, &["get", "mutatingwebhookconfiguration", mwc]).unwrap();
    mwc["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let b64 = w["clientConfig"]["caBundle"].as_str().unwrap_or_default();
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap(),
            )
            .unwrap()
        })
        .collect()
}

/// Waits until every webhook's caBundle holds exactly the certificates `want` (DER, any order).
fn wait_bundles(cm: &CertManager, cp: &ControlPlane, mwc: &str, want: &[Vec<u8>], what: &str) {
    let mut want = want.to_vec();
    want.sort();
    wait_until(
        format!("the caBundle of both webhooks: {what}"),
        GUARD,
        || {
            cm.check_running().unwrap_or_else(|e| panic!("{e:#}"));
            let bundles = ca_bundles(cp, mwc);
            let ok = bundles.len() == 2
                && bundles.iter().all(|b| {
                    let mut got = ders(b);
                    got.sort();
                    got == want
                });
            ok.then_some(()).ok_or_else(|| {
                format!(
                    "{:?}",
                    bundles
                        .iter()
                        .map(|b| ders(b).iter().map(|d| facts(d).serial).collect::<Vec<_>>())
                        .collect::<Vec<_>>()
                )
            })
        },
    );
}

/// The leaf certificate the webhook serves on `port` to a client that verifies it as the API
/// server does: against `bundle` (PEM), under the name `server_name`. Err when the handshake
/// fails (the message says why).
fn served_leaf(port: u16, bundle: &str, server_name: &str) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for der in ders(bundle) {
        roots
            .add(CertificateDer::from(der))
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("no peer certificate")?
        .to_vec();
    conn.send_close_notify();
    let _ = conn.complete_io(&mut sock);
    Ok(leaf)
}

/// The first certificate of a PEM chain, DER.
fn leaf_of(chain_pem: &str) -> Vec<u8> {
    ders(chain_pem).into_iter().next().expect("a certificate")
}

/// Restored pods in namespace `shop`, created one after another; each must be admitted and
/// mutated (the RestoreHook's init container and the plan), which needs the API server to have
/// called the webhook through the Service.
/// Routes the chart's Service to the product's loopback port and starts replica 0 there, as its
/// pod would serve behind the Service: the Service's address and the replica.
fn serve_behind_service(install: &Install, tls: &ChartTls) -> (std::net::SocketAddr, Replica) {
    let route = install
        .cp
        .route_service(
            NAMESPACE,
            &tls.service,
            tls.service_port,
            install.webhook_port,
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    (route, install.start(0))
}

struct Pods<'a> {
    cp: &'a ControlPlane,
    n: usize,
}

impl<'a> Pods<'a> {
    fn prepare(install: &'a Install, webhook_identity: &str) -> Pods<'a> {
        let cp = &install.cp;
        namespace(cp, "shop", json!({}));
        cp.apply(
            &json!({
                "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                "metadata": {"name": "rh-init", "namespace": "shop"},
                "spec": {
                    "restores": ["r-cm*"],
                    "postHooks": [{"init": {"initContainers": [
                        {"name": "rh-init", "image": "busybox:1.36", "command": ["sh", "-c", "true"]}
                    ]}}],
                },
            })
            .to_string(),
        )
        .unwrap();
        wait_compiled(cp, "shop", "rh-init", &[webhook_identity]);
        Pods { cp, n: 0 }
    }

    /// Creates the next restored pod; panics with kubectl's error if admission refused it, or
    /// if the webhook did not mutate it.
    fn admit(&mut self, when: &str) {
        let name = format!("db-{}", self.n);
        self.n += 1;
        let out = kubectl_stdin(
            self.cp,
            self.cp.kubeconfig(),
            &["create", "-f", "-", "-o", "json"],
            &pod(
                "shop",
                &name,
                &["db"],
                json!({"app": "db", RESTORE_LABEL: "r-cm"}),
                json!({}),
            )
            .to_string(),
        );
        assert!(
            out.status.success(),
            "restored pod {name} ({when}) was not admitted: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let created: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            init_names(&created),
            ["rh-init"],
            "pod {name} ({when}) was not mutated: {created}"
        );
        assert!(
            plan(&created).is_some(),
            "pod {name} ({when}) has no plan: {created}"
        );
    }
}

/// `<svc>.<ns>.svc`: the name the API server verifies a Service webhook's certificate against
/// (k8s.io/apiserver pkg/util/webhook: `ServerName = name + "." + namespace + ".svc"`).
fn server_name(tls: &ChartTls) -> String {
    format!("{}.{NAMESPACE}.svc", tls.service)
}

#[test]
fn cert_manager_issues_the_serving_certificate_injects_its_ca_and_renews_it_without_a_failed_admission()
 {
    // 1h is the shortest duration cert-manager's webhook accepts, 5m the shortest renewBefore:
    // renewing 59 minutes before expiry renews about a minute after each issuance.
    let Setup {
        install,
        tls,
        volume,
    } = install_with_cert_manager(&[
        "--set",
        "certManager.duration=1h",
        "--set",
        "certManager.renewBefore=59m",
    ]);
    let cp = &install.cp;
    let cm = CertManager::start(cp).unwrap_or_else(|e| panic!("{e:#}"));

    // The chain the chart makes is Ready: the CA first, then the serving certificate.
    if let Some(ca) = &tls.ca {
        cm.wait_certificate(NAMESPACE, ca, 1, GUARD)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    let serving = cm
        .wait_certificate(NAMESPACE, &tls.serving, 1, GUARD)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let revision = serving["status"]["revision"].as_u64().unwrap();

    let chain = secret_value(cp, &tls.secret, "tls.crt");

    // cainjector put the CA (the serving Secret's ca.crt: the chart's CA) into both webhooks.
    let ca_pem = secret_value(cp, &tls.secret, "ca.crt");
    if let Some(ca_secret) = &tls.ca_secret {
        assert_eq!(
            ders(&ca_pem),
            ders(&secret_value(cp, ca_secret, "tls.crt")),
            "the serving Secret's ca.crt is the chart's CA"
        );
    }
    wait_bundles(&cm, cp, &tls.mwc, &ders(&ca_pem), "the chart's CA");

    // The webhook runs as its pod would: the Secret as a kubelet-synced directory.
    volume.wait_holds(&chain);
    let (route, replica) = serve_behind_service(&install, &tls);
    let mut pods = Pods::prepare(&install, &replica.webhook().identity);
    pods.admit("after install");
    assert!(
        cp.egress_tunnels(Some(route)) > 0,
        "the API server did not call the webhook through the Service's address {route}"
    );
    assert_eq!(
        cp.egress_refused(),
        Vec::<String>::new(),
        "egress the proxy refused"
    );

    // The API server verified `<svc>.<ns>.svc`; the Secret has the four names docs/install.md
    // lists for the Service, and no other.
    let leaf = facts(&leaf_of(&chain));
    let svc = &tls.service;
    let mut want = vec![
        svc.clone(),
        format!("{svc}.{NAMESPACE}"),
        format!("{svc}.{NAMESPACE}.svc"),
        format!("{svc}.{NAMESPACE}.svc.cluster.local"),
    ];
    want.sort();
    assert_eq!(leaf.dns_names, want, "the serving certificate's DNS names");

    // cert-manager renews the serving certificate on its own (a new key: rotationPolicy
    // Always) and the directory follows; restored pods keep being admitted meanwhile, and
    // until the webhook serves the new certificate. The caBundle does not change.
    let first = leaf_of(&chain);
    let mut renewed = None;
    wait_until(
        "cert-manager to renew the serving certificate and the webhook to serve it",
        Duration::from_secs(300),
        || {
            pods.admit("across the renewal");
            cm.check_running().unwrap_or_else(|e| panic!("{e:#}"));
            let crt = get_json(
                cp,
                &[
                    "get",
                    "certificates.cert-manager.io",
                    &tls.serving,
                    "-n",
                    NAMESPACE,
                ],
            )
            .ok_or("no Certificate")?;
            if crt["status"]["revision"].as_u64().unwrap_or(0) <= revision {
                return Err(format!("revision {}", crt["status"]["revision"]));
            }
            let now = leaf_of(&secret_value(cp, &tls.secret, "tls.crt"));
            let served = served_leaf(install.webhook_port, &ca_pem, &server_name(&tls))?;
            if served == now && now != first {
                renewed = Some(now);
                Ok(())
            } else {
                Err("the webhook still serves the previous certificate".to_string())
            }
        },
    );
    for _ in 0..3 {
        pods.admit("after the renewal");
    }
    let renewed = facts(&renewed.unwrap());
    let first = facts(&first);
    assert_ne!(renewed.serial, first.serial);
    assert_ne!(renewed.spki, first.spki, "rotationPolicy Always: a new key");
    assert_eq!(renewed.dns_names, first.dns_names);
    assert!(renewed.not_after > first.not_after);
    wait_bundles(
        &cm,
        cp,
        &tls.mwc,
        &ders(&ca_pem),
        "unchanged by the renewal",
    );
    assert!(volume.versions_written() >= 2);
    assert_eq!(
        cp.egress_refused(),
        Vec::<String>::new(),
        "egress the proxy refused"
    );
    eprintln!(
        "real_cert_manager: {} restored pods admitted through the Service across the renewal",
        pods.n
    );
}

/// A Secret's `tls.crt` and the facts of its first certificate.
fn secret_cert(cp: &ControlPlane, name: &str) -> (String, CertFacts) {
    let pem = secret_value(cp, name, "tls.crt");
    let facts = facts(&leaf_of(&pem));
    (pem, facts)
}

/// Waits until the webhook serves the first certificate of `chain` to a client that trusts
/// only `bundle`, and its log says it reloaded that certificate (docs/install.md tells
/// operators to look for that line).
fn wait_served(install: &Install, replica: &Replica, tls: &ChartTls, chain: &str, bundle: &str) {
    let want = leaf_of(chain);
    let serial = facts(&want).serial;
    wait_until("the webhook to serve the new certificate", GUARD, || {
        let served = served_leaf(install.webhook_port, bundle, &server_name(tls))?;
        if served != want {
            return Err(format!("serves {}", facts(&served).serial));
        }
        let logged = replica.webhook().log_json().iter().any(|l| {
            l["message"] == "serving certificate reloaded" && l["serial"] == serial.as_str()
        });
        logged
            .then_some(())
            .ok_or_else(|| format!("no `serving certificate reloaded` line with serial {serial}"))
    });
}

/// A Certificate's `status.revision`.
fn revision(cp: &ControlPlane, certificate: &str) -> u64 {
    get_json(
        cp,
        &[
            "get",
            "certificates.cert-manager.io",
            certificate,
            "-n",
            NAMESPACE,
        ],
    )
    .and_then(|c| c["status"]["revision"].as_u64())
    .unwrap_or_else(|| panic!("Certificate {certificate} has no status.revision"))
}

/// docs/install.md's wait for a re-issuance: `kubectl wait --for=jsonpath=...revision=N`.
fn wait_revision(cp: &ControlPlane, certificate: &str, revision: u64) {
    cp.kubectl_ok([
        "-n",
        NAMESPACE,
        "wait",
        &format!("--for=jsonpath={{.status.revision}}={revision}"),
        &format!("certificate/{certificate}"),
        &format!("--timeout={}s", GUARD.as_secs()),
    ])
    .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Both webhooks' caBundle set to `pem`, as docs/install.md "Rotating the CA key" patches it.
fn patch_bundles(cp: &ControlPlane, mwc: &str, pem: &str) {
    let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
    let patch = json!([
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": b64},
        {"op": "replace", "path": "/webhooks/1/clientConfig/caBundle", "value": b64},
    ]);
    cp.kubectl_ok([
        "patch",
        "mutatingwebhookconfiguration",
        mwc,
        "--type=json",
        "-p",
        &patch.to_string(),
    ])
    .unwrap();
}

#[test]
fn the_ca_renewal_and_the_ca_key_rotation_of_docs_install_md_keep_every_admission_working() {
    // The chart's defaults: nothing renews on its own during the test; every re-issuance is
    // triggered as `cmctl renew` does.
    let Setup {
        install,
        tls,
        volume,
    } = install_with_cert_manager(&[]);
    let cp = &install.cp;
    let cm = CertManager::start(cp).unwrap_or_else(|e| panic!("{e:#}"));
    let ca = tls.ca.clone().expect("the chart's CA Certificate");
    let ca_secret = tls.ca_secret.clone().unwrap();
    cm.wait_certificate(NAMESPACE, &ca, 1, GUARD)
        .unwrap_or_else(|e| panic!("{e:#}"));
    cm.wait_certificate(NAMESPACE, &tls.serving, 1, GUARD)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (ca0_pem, ca0) = secret_cert(cp, &ca_secret);
    wait_bundles(&cm, cp, &tls.mwc, &ders(&ca0_pem), "the chart's CA");
    let (chain, _) = secret_cert(cp, &tls.secret);
    volume.wait_holds(&chain);
    let (_, replica) = serve_behind_service(&install, &tls);
    let mut pods = Pods::prepare(&install, &replica.webhook().identity);
    pods.admit("after install");

    // "CA renewal": the CA is re-issued with the same key (rotationPolicy Never), and the
    // caBundle and the served certificate come from different CA certificates for a while.
    // Here cainjector lags (stopped) until the webhook serves a certificate signed after the
    // renewal, while the API server still trusts only the CA certificate of before.
    cm.pause_cainjector();
    cm.renew(NAMESPACE, &ca).unwrap();
    cm.wait_certificate(NAMESPACE, &ca, 2, GUARD)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (ca1_pem, ca1) = secret_cert(cp, &ca_secret);
    assert_ne!(ca1.serial, ca0.serial, "the CA was re-issued");
    assert_eq!(ca1.spki, ca0.spki, "the renewed CA keeps its key");
    assert_eq!(ca1.subject, ca0.subject, "the renewed CA keeps its subject");
    cm.renew(NAMESPACE, &tls.serving).unwrap();
    cm.wait_certificate(NAMESPACE, &tls.serving, 2, GUARD)
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        ders(&secret_value(cp, &tls.secret, "ca.crt")),
        ders(&ca1_pem)
    );
    let (chain, _) = secret_cert(cp, &tls.secret);
    volume.wait_holds(&chain);
    // The new certificate verifies against the old CA certificate alone.
    wait_served(&install, &replica, &tls, &chain, &ca0_pem);
    wait_bundles(
        &cm,
        cp,
        &tls.mwc,
        &ders(&ca0_pem),
        "still the CA before the renewal",
    );
    pods.admit("the CA renewed, the bundle still the old CA certificate");
    // cert-manager >= 1.19 adds the new CA certificate and keeps the old one.
    cm.resume_cainjector();
    let both = [ders(&ca0_pem), ders(&ca1_pem)].concat();
    wait_bundles(&cm, cp, &tls.mwc, &both, "old and renewed CA certificate");
    pods.admit("after cainjector merged the renewed CA");

    // "Rotating the CA key", step by step, with its commands (cmctl renew as above).
    // 1. A new CA key: deleting the CA's Secret makes cert-manager re-issue it with a new one;
    // the wait is for the next revision, as the doc says (Ready is still true at first).
    let rev = revision(cp, &ca);
    cp.kubectl_ok(["-n", NAMESPACE, "delete", "secret", &ca_secret])
        .unwrap();
    wait_revision(cp, &ca, rev + 1);
    let (ca2_pem, ca2) = secret_cert(cp, &ca_secret);
    assert_ne!(ca2.spki, ca1.spki, "the re-issued CA has a new key");
    assert_eq!(ca2.subject, ca1.subject);
    pods.admit("step 1: new CA key, nothing signed by it yet");
    // 2. The new CA certificate added to both caBundles before anything it signs is served.
    // `printf '%s\n%s\n' "$old" "$new"`, each without its trailing newline (`$(...)`).
    let old = ca_bundles(cp, &tls.mwc).remove(0);
    let bundle = format!("{}\n{}\n", old.trim_end(), ca2_pem.trim_end());
    patch_bundles(cp, &tls.mwc, &bundle);
    let all = [ders(&ca0_pem), ders(&ca1_pem), ders(&ca2_pem)].concat();
    wait_bundles(
        &cm,
        cp,
        &tls.mwc,
        &all,
        "old CA certificates and the new one",
    );
    pods.admit("step 2: the new CA in the bundle");
    // 3. The serving certificate re-issued under the new CA; the kubelet syncs it later than
    // cainjector sees it (held back here), and both orders must admit.
    volume.pause();
    let rev = revision(cp, &tls.serving);
    cm.renew(NAMESPACE, &tls.serving).unwrap();
    wait_revision(cp, &tls.serving, rev + 1);
    assert_eq!(
        ders(&secret_value(cp, &tls.secret, "ca.crt")),
        ders(&ca2_pem)
    );
    wait_bundles(&cm, cp, &tls.mwc, &all, "unchanged by the re-issuance");
    pods.admit("step 3: re-issued, the webhook still serving the certificate of the old CA");
    volume.resume();
    let (chain, _) = secret_cert(cp, &tls.secret);
    volume.wait_holds(&chain);
    wait_served(&install, &replica, &tls, &chain, &ca2_pem);
    pods.admit("step 3: the webhook serving the certificate of the new CA");
    // 4. The old CA certificates dropped from the bundle: `printf '%s\n' "$new"`.
    patch_bundles(cp, &tls.mwc, &format!("{}\n", ca2_pem.trim_end()));
    wait_bundles(&cm, cp, &tls.mwc, &ders(&ca2_pem), "the new CA only");
    pods.admit("step 4: only the new CA trusted");
    assert!(
        served_leaf(install.webhook_port, &ca1_pem, &server_name(&tls)).is_err(),
        "the served certificate must not verify against the old CA key any more"
    );
    // Renewals go on under the new CA, and cainjector adds nothing back.
    cm.renew(NAMESPACE, &tls.serving).unwrap();
    cm.wait_certificate(NAMESPACE, &tls.serving, 4, GUARD)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (chain, _) = secret_cert(cp, &tls.secret);
    volume.wait_holds(&chain);
    wait_served(&install, &replica, &tls, &chain, &ca2_pem);
    wait_bundles(
        &cm,
        cp,
        &tls.mwc,
        &ders(&ca2_pem),
        "the new CA only, after a renewal",
    );
    pods.admit("a renewal after the rotation");
    assert_eq!(
        cp.egress_refused(),
        Vec::<String>::new(),
        "egress the proxy refused"
    );
}
