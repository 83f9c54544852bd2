//! Shared helpers for integration tests: a test CA, serving certificates with every key
//! encoding the webhook accepts, a `--tls-dir` laid out like a kubelet Secret volume (with
//! atomic `..data` symlink rotation), a TLS client that trusts only the test CA, and small HTTP
//! helpers for the webhook and admin ports. The CA and the waits are the workspace's
//! (`restore_hooks_testkit`).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::KeyPair;
use restore_hooks::admin::{AdminServer, Readiness};
use restore_hooks::admission::ExecRight;
use restore_hooks::catalog::{SharedIndex, StaticCatalog};
use restore_hooks::cli::WebhookArgs;
use restore_hooks::config::EngineConfig;
use restore_hooks::hooks::signing::PlanKeys;
use restore_hooks::metrics::Metrics;
use restore_hooks::plan_key::KeyRing;
use restore_hooks::webhook::exec_rights::ExecRights;
use restore_hooks::webhook::{Bound, LimitStats, Limits, Timeouts, WebhookError, WebhookSources};
use restore_hooks_testkit::ThrowawayCa;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_util::sync::CancellationToken;

pub mod statefulset;

/// The DNS name the webhook Service would have; every test leaf carries it as a SAN.
pub const SERVICE_DNS: &str = "restore-hooks.restore-hooks.svc";

/// Installs the crypto provider, like `main` does. Idempotent.
pub fn setup() {
    restore_hooks::install_crypto_provider();
}

/// How the leaf's private key is generated and encoded in `tls.key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// ECDSA P-256, `PRIVATE KEY` (PKCS#8).
    EcdsaPkcs8,
    /// ECDSA P-256, `EC PRIVATE KEY` (SEC1, with curve parameters, as openssl and cert-manager
    /// write it).
    EcdsaSec1,
    /// RSA 2048, `PRIVATE KEY` (PKCS#8).
    RsaPkcs8,
    /// RSA 2048, `RSA PRIVATE KEY` (PKCS#1: cert-manager's default encoding).
    RsaPkcs1,
}

/// A CA (root or intermediate) that issues serving certificates with every key encoding the
/// webhook accepts: the workspace's throwaway CA, with [`KeyKind`]s.
pub struct Ca(ThrowawayCa);

/// A serving certificate and its key, as the files of a Secret.
pub use restore_hooks_testkit::Leaf;

impl Ca {
    pub fn root(common_name: &str) -> Self {
        Self(ThrowawayCa::root(common_name).unwrap())
    }

    /// An intermediate CA signed by this one.
    pub fn intermediate(&self, common_name: &str) -> Self {
        Self(self.0.intermediate(common_name).unwrap())
    }

    /// This CA's certificate (what a client trusts, for a root).
    pub fn cert_pem(&self) -> String {
        self.0.cert_pem()
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.0.cert_der())
    }

    /// A serving certificate for `SERVICE_DNS`, `localhost` and 127.0.0.1.
    pub fn leaf(&self, kind: KeyKind) -> Leaf {
        self.leaf_with_names(kind, &[SERVICE_DNS, "localhost", "127.0.0.1"])
    }

    pub fn leaf_with_names(&self, kind: KeyKind, names: &[&str]) -> Leaf {
        let (key, key_pem) = leaf_key(kind);
        self.0.issue_with_key(names, &key, key_pem).unwrap()
    }
}

fn leaf_key(kind: KeyKind) -> (KeyPair, String) {
    match kind {
        KeyKind::EcdsaPkcs8 => {
            let key = KeyPair::generate().unwrap();
            let pem = key.serialize_pem();
            (key, pem)
        }
        KeyKind::EcdsaSec1 => {
            let key = KeyPair::generate().unwrap();
            let sec1 = pkcs8_inner_key(&key.serialize_der());
            let sec1 = with_p256_parameters(&sec1);
            (key, pem_encode("EC PRIVATE KEY", &sec1))
        }
        KeyKind::RsaPkcs8 => {
            let key = KeyPair::from_pem(TEST_RSA_KEY_PKCS8).unwrap();
            (key, TEST_RSA_KEY_PKCS8.to_string())
        }
        KeyKind::RsaPkcs1 => {
            let key = KeyPair::from_pem(TEST_RSA_KEY_PKCS8).unwrap();
            let pkcs1 = pkcs8_inner_key(&key.serialize_der());
            (key, pem_encode("RSA PRIVATE KEY", &pkcs1))
        }
    }
}

pub fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// One DER element: (tag, header length, content length).
fn der_element(der: &[u8]) -> (u8, usize, usize) {
    let tag = der[0];
    let first = der[1] as usize;
    if first < 0x80 {
        return (tag, 2, first);
    }
    let n = first & 0x7f;
    let len = der[2..2 + n]
        .iter()
        .fold(0usize, |acc, b| (acc << 8) | *b as usize);
    (tag, 2 + n, len)
}

fn der_encode(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// The algorithm-specific key inside a PKCS#8 `PrivateKeyInfo` (PKCS#1 `RSAPrivateKey` for
/// RSA, SEC1 `ECPrivateKey` for EC): SEQUENCE { version, algorithm, OCTET STRING key, ... }.
fn pkcs8_inner_key(pkcs8: &[u8]) -> Vec<u8> {
    let (tag, header, _) = der_element(pkcs8);
    assert_eq!(tag, 0x30, "PKCS#8 is a SEQUENCE");
    let mut rest = &pkcs8[header..];
    for expected in [0x02, 0x30] {
        let (tag, h, len) = der_element(rest);
        assert_eq!(tag, expected);
        rest = &rest[h + len..];
    }
    let (tag, h, len) = der_element(rest);
    assert_eq!(tag, 0x04, "privateKey is an OCTET STRING");
    rest[h..h + len].to_vec()
}

/// Adds `[0] parameters` (namedCurve prime256v1) to a SEC1 `ECPrivateKey` that lacks them
/// (ring omits them inside PKCS#8), producing the form openssl and cert-manager write.
fn with_p256_parameters(sec1: &[u8]) -> Vec<u8> {
    let (tag, header, _) = der_element(sec1);
    assert_eq!(tag, 0x30);
    let body = &sec1[header..];
    let (_, vh, vl) = der_element(body); // version
    let (_, kh, kl) = der_element(&body[vh + vl..]); // privateKey
    let split = vh + vl + kh + kl;
    if body.get(split) == Some(&0xa0) {
        return sec1.to_vec();
    }
    let prime256v1 = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    let mut content = body[..split].to_vec();
    content.extend(der_encode(0xa0, &prime256v1));
    content.extend_from_slice(&body[split..]);
    der_encode(0x30, &content)
}

/// TEST ONLY: a throwaway 2048-bit RSA key (ring cannot generate RSA keys). It protects nothing.
pub const TEST_RSA_KEY_PKCS8: &str = concat!(
    "-----BEGIN PRIVATE KEY-----\n",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCy66vuMOUrNYOQ\n",
    "G1aZnwlcgCagqgYZtIUYpeTifIM13W5YIT0IFX3YdBh65/2J4gP73Acb6moOvl8z\n",
    "SpG32nJJzZ7/BqjCuijPDZrMfQRVoepotjwOtLcEWOmUb8g/iRaUzs5YKZXBoTsG\n",
    "Q6CWq/XtPGcMIZldnPWfdQ5qbCYpUrAMdI09aXsL8V6bZgIw271U7YxBT+Nx99wh\n",
    "felyCfPaLtj8OjHH8DDPn6REdd1Hiy/9j/DMN7eP5iYZOLwrBKvWJdLbjVO40k6k\n",
    "BuTuqM1CROq49kWtXAN4AFVcHK6mrZJpsadNIlfjo3ikCq0RlJM5o6RaYnvZrLN5\n",
    "rRqqB1x/AgMBAAECggEAFnaIK2twGjCpx9nm0XqqDjb4oos2INwNKb8KMXU4c/bM\n",
    "97uUkgNAvYA14phluH3ryh8htVuE3T0BbssZ6F9AogtyvsnzPh9pKDWpDatUc/vU\n",
    "Fjlq6N2/bIhNKxmtpmxrrVsZhPAToS/A3VR4QPJt+c7vkRJW0u312IM1wB6728wU\n",
    "EhQ/ceFm9Lekgvi4iET0MErE8pKXSJtmhShT81mVEhwBrFkaD2WrlzIlN5FNNY00\n",
    "Dcm0q9EKlq/7E14ioP+1YrWEljY86zdVARsvKnkwc92hLAEVbtYYJfQBssJBqfBx\n",
    "JsEZ49rEEe1LpazzazQUYC3FIZHReG8bSnAF0Hw4IQKBgQDc3K7bcJktbnMViVAy\n",
    "bwvFLZf26Nnh3met5dsNoIdEEIhV4A9ed3DEksQbh6JeMVFcGOsocNaaUmYSywiJ\n",
    "+WdqW+T8CgP+cPbN9kWCyxDg0hCfvp+6WDHvjsHtVMx4hsKPQBrxUjGCUeMXG6XV\n",
    "PYkqJYc1y7+TwDIv9tPoXaI3MwKBgQDPYsnBCqP4y/U5bsOwHXzx5Gk1WbhIKpDU\n",
    "fCOCOOIhDLJ3ZoD/Gz1+gWCPxzOsrB3md9EiyXeQvbtCniyGWd1GYWWTH9qgx0oi\n",
    "dECQ4b8o48GjqX9x0oDaaYzSmUxXGUGo9X9LK3UBes9EMaGqpaOhMuieXiHg74UZ\n",
    "zWrMeuCVhQKBgQCEPzgMea2ewIX0nVYB/PAlTxmxZNgiIRQf0oSJ8ldMcEHSeel5\n",
    "/Tbu3ZrDiUG1+P3okZstifNWUISCOESSqV49F21TZYPitS1zQkV4/bLLi70cif4G\n",
    "jIzKDsccHyyX9slFEXOQkFDI4dOCoLF5r/ET5YjCs4+xHuJuSfO1LWvWdQKBgF73\n",
    "kwImWD4nT+1z7oKojj3K5e67XisV6uqSykPovox53wPUWb/4fml+33QXuW8aBjsy\n",
    "pP90GJ+ccrMn8aW4Yx7GnRgJXzl+6VDrwWFXLw2Pdm32wVijF8Rsz0LlVlMQSsQP\n",
    "X7JRfSwnS+Cjha+6WDsKMAHNg2AY7u+I5J4sqsltAoGAeCI8kRV99orF0iQ2rnmm\n",
    "6gTR9GiOsOchRjuCYQsHPg3c60vujoEhzPHslakBegrCUrYnoN9axjIh6s8xVapH\n",
    "qqqiALYYTfIbv6taLQXdynOuXColgAcUtGkOqgG0ZCxI0OU7hP02s1E3EBQI5HNY\n",
    "IAonIEMWy2p8Pgs1gDV264Q=\n",
    "-----END PRIVATE KEY-----\n",
);

/// A `--tls-dir` laid out like a kubelet Secret volume:
/// `..<timestamp>/tls.{crt,key}`, `..data -> ..<timestamp>`, `tls.crt -> ..data/tls.crt`,
/// `tls.key -> ..data/tls.key`.
pub struct SecretDir {
    dir: tempfile::TempDir,
    generation: u32,
    current: PathBuf,
}

impl SecretDir {
    pub fn new(cert_pem: &str, key_pem: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut this = Self {
            dir,
            generation: 0,
            current: PathBuf::new(),
        };
        let first = this.write_generation(cert_pem.as_bytes(), key_pem.as_bytes());
        std::os::unix::fs::symlink(&first, this.path().join("..data")).unwrap();
        for file in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(Path::new("..data").join(file), this.path().join(file))
                .unwrap();
        }
        this.current = first;
        this
    }

    pub fn with_leaf(leaf: &Leaf) -> Self {
        Self::new(&leaf.chain_pem, &leaf.key_pem)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write_generation(&mut self, cert: &[u8], key: &[u8]) -> PathBuf {
        self.generation += 1;
        let name = format!("..2026_12_02_22_00_00.{:09}", self.generation);
        let dir = self.path().join(&name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
        PathBuf::from(name)
    }

    /// What the kubelet does on a Secret update: write a new timestamped directory, point
    /// `..data_tmp` at it, rename it over `..data` (atomic), then delete the old directory.
    pub fn rotate(&mut self, cert_pem: &str, key_pem: &str) {
        self.rotate_bytes(cert_pem.as_bytes(), key_pem.as_bytes());
    }

    pub fn rotate_bytes(&mut self, cert: &[u8], key: &[u8]) {
        let new = self.write_generation(cert, key);
        self.swap_to(new);
    }

    /// Points `..data` at generation `new` (atomically) and deletes the current one.
    fn swap_to(&mut self, new: PathBuf) {
        let tmp = self.path().join("..data_tmp");
        std::os::unix::fs::symlink(&new, &tmp).unwrap();
        std::fs::rename(&tmp, self.path().join("..data")).unwrap();
        let old = std::mem::replace(&mut self.current, new);
        std::fs::remove_dir_all(self.path().join(old)).unwrap();
    }

    pub fn rotate_to(&mut self, leaf: &Leaf) {
        self.rotate(&leaf.chain_pem, &leaf.key_pem);
    }

    /// Returns once the webhook has read `tls.key` `reads` times, each time getting `key_pem`
    /// (with `cert_pem` as `tls.crt`): the proof that it polled the pair that often. `tls.key`
    /// is a FIFO meanwhile, whose opening for writing waits for a reader; before the last read
    /// gets its key, the directory rotates to plain files with the same bytes, so no later read
    /// waits. Blocking: run it off the runtime the webhook polls on.
    pub fn observe_key_reads(&mut self, cert_pem: &str, key_pem: &str, reads: usize) {
        assert!(reads > 0);
        let mkfifo = |path: &Path| {
            let made = std::process::Command::new("mkfifo")
                .arg(path)
                .status()
                .unwrap();
            assert!(made.success(), "mkfifo {}", path.display());
        };
        self.generation += 1;
        let name = format!("..2026_12_02_22_00_00.{:09}", self.generation);
        let dir = self.path().join(&name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("tls.crt"), cert_pem).unwrap();
        let fifo = dir.join("tls.key");
        mkfifo(&fifo);
        self.swap_to(PathBuf::from(name));
        for read in 1..=reads {
            let mut key = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            // A reader has this FIFO open. The next read opens another one, so that neither can
            // get the other's bytes (this reader may not have seen its end yet).
            if read == reads {
                self.rotate(cert_pem, key_pem);
            } else {
                let next = dir.join("tls.key.next");
                mkfifo(&next);
                std::fs::rename(&next, &fifo).unwrap();
            }
            std::io::Write::write_all(&mut key, key_pem.as_bytes()).unwrap();
        }
    }
}

/// A TLS client trusting only `ca`, offering h2 and http/1.1 (like the API server's client).
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
}

impl TlsClient {
    pub fn trusting(ca: &Ca) -> Self {
        Self::with_alpn(ca, &[b"h2", b"http/1.1"])
    }

    pub fn with_alpn(ca: &Ca, alpn: &[&[u8]]) -> Self {
        setup();
        let mut roots = RootCertStore::empty();
        roots.add(ca.cert_der()).unwrap();
        let mut config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Self {
            connector: TlsConnector::from(Arc::new(config)),
        }
    }

    /// Connects and verifies the certificate against `server_name` (SAN check).
    pub async fn connect_as(
        &self,
        addr: SocketAddr,
        server_name: &str,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from(server_name.to_string()).unwrap();
        self.connector.connect(name, tcp).await
    }

    pub async fn connect(&self, addr: SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
        self.connect_as(addr, SERVICE_DNS).await
    }
}

/// DER of the certificate the server presented first (its leaf).
pub fn peer_leaf(stream: &TlsStream<TcpStream>) -> Vec<u8> {
    peer_chain(stream)[0].clone()
}

pub fn peer_chain(stream: &TlsStream<TcpStream>) -> Vec<Vec<u8>> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("server presented certificates")
        .iter()
        .map(|c| c.to_vec())
        .collect()
}

pub fn negotiated_alpn(stream: &TlsStream<TcpStream>) -> Option<Vec<u8>> {
    stream.get_ref().1.alpn_protocol().map(|p| p.to_vec())
}

/// An HTTP connection (h1 or h2, whichever ALPN chose) over an established TLS stream.
pub enum Conn {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Conn {
    pub async fn over(stream: TlsStream<TcpStream>) -> Self {
        let h2 = negotiated_alpn(&stream).as_deref() == Some(b"h2");
        let io = TokioIo::new(stream);
        if h2 {
            let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            Conn::H2(send)
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Conn::H1(send)
        }
    }

    /// `POST path` with a JSON body; the status and the whole response body.
    pub async fn post(
        &mut self,
        path: &str,
        body: impl Into<Bytes>,
    ) -> hyper::Result<(StatusCode, Bytes)> {
        let request = Request::post(path)
            .header("content-type", "application/json")
            .header("host", SERVICE_DNS)
            .body(Full::new(body.into()))
            .unwrap();
        let response = match self {
            Conn::H1(send) => {
                send.ready().await?;
                send.send_request(request).await?
            }
            Conn::H2(send) => {
                send.ready().await?;
                send.send_request(request).await?
            }
        };
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// `GET http://addr/path` over plain HTTP/1.1 (the admin port).
/// Waits until a webhook started as a process answers 200 on `/readyz` at `admin`; fails at once
/// when `exited` says the process is gone.
pub async fn wait_process_ready(
    admin: SocketAddr,
    limit: Duration,
    mut exited: impl FnMut() -> bool,
) {
    restore_hooks_testkit::eventually!("the webhook process to be ready", limit, {
        assert!(!exited(), "the webhook exited before it was ready");
        TcpStream::connect(admin).await.is_ok()
            && http_get(admin, "/readyz").await.0 == StatusCode::OK
    })
}

pub async fn http_get(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = Request::get(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = send.send_request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The value of a sample in a Prometheus text exposition, e.g.
/// `metric(&text, r#"restore_hooks_tls_reloads_total{result="error"}"#)`; 0 when absent.
pub fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(sample)?;
            rest.strip_prefix(' ')?.trim().parse().ok()
        })
        .unwrap_or(0.0)
}

/// An AdmissionReview v1 request for a pod CREATE.
pub fn admission_review(uid: &str, namespace: &str, pod: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:velero:velero"},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// A plain pod that no restore is interested in (no restore label, unknown namespace).
pub fn plain_pod(generate_name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": generate_name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}
    })
}

/// The `response.uid` of an AdmissionReview response body.
pub fn response_uid(body: &[u8]) -> String {
    let review: serde_json::Value = serde_json::from_slice(body).unwrap();
    review["response"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// TEST ONLY: the plan key of the test servers (32 bytes, as the Secret's `current`). It protects
/// nothing.
pub const TEST_PLAN_KEY: &[u8; 32] = b"restore-hooks-test-plan-key-0001";

pub fn test_plan_keys() -> PlanKeys {
    PlanKeys::new(TEST_PLAN_KEY, None).unwrap()
}

/// Writes [`TEST_PLAN_KEY`] to `dir/plan.key`, for the binary's `--plan-key-file`: without a key
/// the webhook issues unsigned plans and does not report ready.
pub fn write_plan_key(dir: &Path) -> PathBuf {
    let path = dir.join("plan.key");
    std::fs::write(&path, TEST_PLAN_KEY).unwrap();
    path
}

/// Knobs for [`TestServer::start`].
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub reload_interval: Duration,
    pub shutdown_delay: Duration,
    pub shutdown_grace: Duration,
    pub timeouts: Timeouts,
    pub limits: Limits,
    /// Serve `noop_router()` instead of the real handler.
    pub noop: bool,
    /// Hook documents and namespace labels the handler sees.
    pub catalog: StaticCatalog,
    pub engine: EngineConfig,
    /// The plan keys (`None`: no key, plans unsigned, never ready).
    pub plan_keys: Option<PlanKeys>,
    /// What the API server would answer about a pod creator's right to create pods/exec.
    pub exec_right: ExecRight,
    /// Where those answers come from instead (a counting fake API server), when set.
    pub exec_rights: Option<Arc<ExecRights>>,
    /// Serve this router instead of the real handler (behind the same limits).
    pub router: Option<axum::Router>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            reload_interval: Duration::from_millis(50),
            shutdown_delay: Duration::ZERO,
            shutdown_grace: Duration::from_secs(5),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            noop: false,
            catalog: StaticCatalog::default(),
            engine: EngineConfig::default(),
            plan_keys: Some(test_plan_keys()),
            exec_right: ExecRight::Granted,
            exec_rights: None,
            router: None,
        }
    }
}

/// The webhook (HTTPS) and admin (HTTP) servers on 127.0.0.1, ports chosen by the OS.
pub struct TestServer {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub metrics: Metrics,
    pub readiness: Readiness,
    /// The server's limits at work (connections, reviews in flight).
    pub stats: LimitStats,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), WebhookError>>,
    admin_stop: CancellationToken,
}

pub fn webhook_args(tls_dir: &Path, options: &ServerOptions) -> WebhookArgs {
    WebhookArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls_dir: tls_dir.to_path_buf(),
        tls_reload_interval: options.reload_interval,
        shutdown_delay: options.shutdown_delay,
        shutdown_grace: options.shutdown_grace,
    }
}

impl TestServer {
    pub async fn start(tls_dir: &Path, options: ServerOptions) -> Self {
        Self::try_start(tls_dir, options).await.unwrap()
    }

    pub async fn try_start(tls_dir: &Path, options: ServerOptions) -> Result<Self, WebhookError> {
        setup();
        let metrics = Metrics::new();
        let readiness = Readiness::new();
        let sources = WebhookSources {
            index: SharedIndex::new(options.catalog.index()),
            keys: options
                .plan_keys
                .clone()
                .map_or_else(KeyRing::none, KeyRing::fixed),
            namespaces: None,
            exec_rights: options
                .exec_rights
                .clone()
                .unwrap_or_else(|| Arc::new(ExecRights::fixed(options.exec_right.clone()))),
        };
        let bound: Bound = Bound::bind(
            &webhook_args(tls_dir, &options),
            sources,
            options.engine.clone(),
            metrics.clone(),
            readiness.clone(),
        )?
        .with_timeouts(options.timeouts)
        .with_limits(options.limits);
        let bound = match (&options.router, options.noop) {
            (Some(router), _) => bound.with_router(router.clone()),
            (None, true) => bound.with_router(restore_hooks::webhook::noop_router()),
            (None, false) => bound,
        };
        let addr = bound.local_addr();
        let stats = bound.stats();
        let admin = AdminServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            metrics.clone(),
            readiness.clone(),
        )
        .await
        .unwrap();
        let admin_addr = admin.local_addr();
        let admin_stop = CancellationToken::new();
        tokio::spawn(admin.serve(admin_stop.clone()));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(bound.serve(shutdown.clone()));
        Ok(Self {
            addr,
            admin_addr,
            metrics,
            readiness,
            stats,
            shutdown,
            task,
            admin_stop,
        })
    }

    pub async fn metrics_text(&self) -> String {
        let (status, body) = http_get(self.admin_addr, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        body
    }

    /// Polls `/metrics` until `sample` reaches `value` (or panics after `within`).
    pub async fn wait_metric(&self, sample: &str, value: f64, within: Duration) -> String {
        restore_hooks_testkit::eventually!(format!("{sample} to reach {value}"), within, {
            let text = self.metrics_text().await;
            if metric(&text, sample) >= value {
                Ok(text)
            } else {
                Err(text)
            }
        })
    }

    /// Cancels the shutdown token and waits for the webhook to stop.
    pub async fn stop(self) -> Result<(), WebhookError> {
        self.shutdown.cancel();
        let result = self.task.await.unwrap();
        self.admin_stop.cancel();
        result
    }
}

impl Conn {
    /// Like [`Conn::over`], but an HTTP handshake failure (the server closed the connection,
    /// e.g. while draining) is an error instead of a panic.
    pub async fn try_over(stream: TlsStream<TcpStream>) -> hyper::Result<Self> {
        let h2 = negotiated_alpn(&stream).as_deref() == Some(b"h2");
        let io = TokioIo::new(stream);
        if h2 {
            let (send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(conn);
            Ok(Conn::H2(send))
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io).await?;
            tokio::spawn(conn);
            Ok(Conn::H1(send))
        }
    }
}
