//! A fault-injecting reverse proxy in front of the real kube-apiserver: a process pointed at it
//! (see [`LossyProxy::via`]) talks to the API server through it, unchanged, except that
//! the proxy can be told to LOSE THE ANSWER of the next requests matching a method and a path:
//! it forwards such a request, lets the API server process it and answer, then drops the
//! client's connection instead of relaying the answer. The client sees a connection error; the
//! change is stored. That is what a client sees when a connection breaks (a load balancer, a
//! restarted API server) after its request was taken, and what docs/behaviour.md §6.18 must
//! survive: "a request that got no answer ... may have added it all the same".
//!
//! TLS on both sides: the proxy serves a certificate of a throwaway CA of its own (its
//! kubeconfig trusts that CA) and verifies the API server against the control plane's CA. The
//! client's `Authorization` header (a ServiceAccount token) passes through, so no client
//! certificate is needed. Bodies stream both ways (watches are long-lived streaming answers);
//! an `Upgrade` (exec's WebSocket) is tunnelled byte for byte once the API server agreed (101).
//! HTTP/1.1 only (no ALPN): one request at a time per client connection, so dropping one
//! connection loses exactly one answer.
//!
//! Each request gets its own upstream connection: simple, and no answer can be mixed up with
//! another request's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use regex::Regex;
use restore_hooks_testkit::ThrowawayCa;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::ControlPlane;
use super::serve::Via;

type Body = BoxBody<Bytes, hyper::Error>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One request the proxy forwarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forwarded {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The API server's answer (its status code), or `None` when it gave none.
    pub status: Option<u16>,
    /// The answer was lost on purpose: the client's connection was dropped instead.
    pub lost: bool,
}

/// Lose the answers of the next `remaining` requests with `method` whose path matches `path`.
struct Rule {
    method: String,
    path: Regex,
    remaining: usize,
}

#[derive(Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    forwarded: Mutex<Vec<Forwarded>>,
}

impl Shared {
    /// Whether this request's answer is to be lost (counting it against its rule).
    fn take_loss(&self, method: &str, path: &str) -> bool {
        let mut rules = self.rules.lock().unwrap();
        match rules
            .iter_mut()
            .find(|r| r.remaining > 0 && r.method == method && r.path.is_match(path))
        {
            Some(rule) => {
                rule.remaining -= 1;
                true
            }
            None => false,
        }
    }

    fn record(&self, forwarded: Forwarded) {
        self.forwarded.lock().unwrap().push(forwarded);
    }
}

/// Where the proxy forwards to, and how it trusts it.
struct Upstream {
    addr: SocketAddr,
    connector: TlsConnector,
    name: ServerName<'static>,
}

/// The proxy: listening on 127.0.0.1 until dropped, on a runtime of its own (the tests are
/// synchronous).
pub struct LossyProxy {
    pub port: u16,
    /// The proxy's CA certificate (PEM file): what its clients trust.
    pub ca_file: PathBuf,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl LossyProxy {
    /// A proxy in front of `cp`'s kube-apiserver; its files live in the control plane's work dir.
    pub fn start(cp: &ControlPlane) -> LossyProxy {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let work = cp.work_dir().join("lossy-proxy");
        let ca = ThrowawayCa::root("restore-hooks lossy proxy test CA").unwrap();
        let leaf = ca.issue(&["127.0.0.1", "localhost"]).unwrap();
        let ca_file = ca.write_cert(&work, "ca.crt").unwrap();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(leaf.chain_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        // No ALPN: the client speaks HTTP/1.1, one request per connection at a time.

        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(cp.ca_pem().as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let uri: hyper::Uri = cp.server().parse().expect("the API server's URL");
        let host = uri.host().expect("the API server's host");
        let addr: SocketAddr = format!("{host}:{}", uri.port_u16().unwrap_or(443))
            .parse()
            .expect("the API server listens on an IP address");
        let upstream = Arc::new(Upstream {
            addr,
            connector: TlsConnector::from(Arc::new(client)),
            name: ServerName::IpAddress(addr.ip().into()),
        });

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("lossy-proxy")
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(TcpListener::bind(("127.0.0.1", 0)))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let acceptor = TlsAcceptor::from(Arc::new(server));
        runtime.spawn(accept(listener, acceptor, upstream, shared.clone()));
        LossyProxy {
            port,
            ca_file,
            shared,
            runtime: Some(runtime),
        }
    }

    /// Its URL, for a kubeconfig's `server`.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// From now on, the answers of the next `n` requests with `method` whose path (without the
    /// query) matches the regular expression `path` are lost: the request reaches the API
    /// server, its answer does not reach the client.
    pub fn lose_answers(&self, method: &str, path: &str, n: usize) {
        self.shared.rules.lock().unwrap().push(Rule {
            method: method.to_string(),
            path: Regex::new(path).expect("a valid path pattern"),
            remaining: n,
        });
    }

    /// Every request forwarded so far (once the API server answered, or failed to), oldest first.
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.shared.forwarded.lock().unwrap().clone()
    }

    /// The requests with `method` whose path matches `path`.
    pub fn forwarded_matching(&self, method: &str, path: &str) -> Vec<Forwarded> {
        let path = Regex::new(path).expect("a valid path pattern");
        self.forwarded()
            .into_iter()
            .filter(|f| f.method == method && path.is_match(&f.path))
            .collect()
    }

    /// The way to the API server through this proxy, for [`super::ServeOptions::via`].
    pub fn via(&self) -> Via {
        Via {
            server: self.server(),
            ca_file: self.ca_file.clone(),
        }
    }
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        // Every connection task ends with the runtime; nothing waits for a client.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    upstream: Arc<Upstream>,
    shared: Arc<Shared>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, upstream, shared) = (acceptor.clone(), upstream.clone(), shared.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |request| {
                forward(request, upstream.clone(), shared.clone())
            });
            // A service error (an answer lost on purpose) ends the connection without a
            // response: hyper writes nothing and closes it.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades()
                .await;
        });
    }
}

/// The answer lost on purpose: the service fails, and hyper drops the client's connection.
#[derive(Debug)]
struct LostOnPurpose;

impl std::fmt::Display for LostOnPurpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the answer was lost on purpose")
    }
}

impl std::error::Error for LostOnPurpose {}

async fn forward(
    mut request: Request<Incoming>,
    upstream: Arc<Upstream>,
    shared: Arc<Shared>,
) -> Result<Response<Body>, BoxError> {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let lose = shared.take_loss(&method, &path);
    let upgrade = request
        .headers()
        .contains_key(hyper::header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut request));

    let answer = async {
        let tcp = TcpStream::connect(upstream.addr).await?;
        let tls = upstream
            .connector
            .connect(upstream.name.clone(), tcp)
            .await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake::<_, Incoming>(TokioIo::new(tls)).await?;
        tokio::spawn(connection.with_upgrades());
        // Origin form, as the client sent it; the Host the API server's address.
        let (mut parts, body) = request.into_parts();
        parts.uri = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()?;
        parts
            .headers
            .insert(hyper::header::HOST, upstream.addr.to_string().parse()?);
        Ok::<_, BoxError>(
            sender
                .send_request(Request::from_parts(parts, body))
                .await?,
        )
    }
    .await;

    let mut response = match answer {
        Ok(response) => response,
        Err(e) => {
            shared.record(Forwarded {
                method,
                path,
                status: None,
                lost: false,
            });
            return Ok(Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(
                    Full::new(Bytes::from(format!("lossy proxy: {e}")))
                        .map_err(|never| match never {})
                        .boxed(),
                )
                .unwrap());
        }
    };
    shared.record(Forwarded {
        method,
        path,
        status: Some(response.status().as_u16()),
        lost: lose,
    });
    if lose {
        // The API server has answered: whatever it did is done. Its answer goes nowhere.
        return Err(Box::new(LostOnPurpose));
    }
    if response.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client_side) = upgrade
    {
        let server_side = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            let (Ok(client_side), Ok(server_side)) = tokio::join!(client_side, server_side) else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(
                &mut TokioIo::new(client_side),
                &mut TokioIo::new(server_side),
            )
            .await;
        });
    }
    Ok(response.map(|body| body.boxed()))
}
