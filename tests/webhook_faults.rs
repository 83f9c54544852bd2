//! Fault injection against the real webhook server on 127.0.0.1: hostile and broken bodies,
//! slow and half-open clients, TLS garbage, a burst of simultaneous connections, certificate
//! rotation under load and SIGTERM under load on the real binary.
//!
//! In every test a background [`Checker`] keeps sending valid AdmissionReviews for a restored
//! pod (over a kept-alive HTTP/1.1 connection, a kept-alive h2 connection and a new connection
//! per request) and checks each answer (status, uid echo, JSON Patch injecting the init
//! container): the faults must never disturb well-behaved clients. Everything is bounded; no
//! assertion depends on how fast the machine is.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use common::*;
use hyper::StatusCode;
use restore_hooks::catalog::StaticCatalog;
use restore_hooks::catalog::static_files::{DocumentDefaults, add_documents};
use restore_hooks::webhook::{MAX_BODY_BYTES, Timeouts};
use restore_hooks_testkit::eventually;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, ClientConnection, RootCertStore};

/// The init container the shared hooks inject into the restored StatefulSet pod.
const INIT_CONTAINER: &str = "fetch-wal";

/// Upper bound for anything the server must do "eventually" (a timeout firing, a connection
/// closing): generous for a loaded CI machine, and the test fails rather than hangs.
const PATIENCE: Duration = Duration::from_secs(20);

fn catalog() -> StaticCatalog {
    let mut catalog = StaticCatalog::default();
    add_documents(
        &mut catalog,
        Path::new("hooks.yaml"),
        statefulset::HOOKS,
        &DocumentDefaults {
            namespace: "shop".into(),
            velero_namespace: "velero".into(),
        },
    )
    .unwrap();
    catalog
}

fn restored_review(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&admission_review(uid, "shop", statefulset::restored_pod())).unwrap()
}

/// A correct answer to [`restored_review`]: 200, the uid echoed, allowed, and a JSON Patch
/// adding the init container.
fn check_answer(status: StatusCode, body: &[u8], uid: &str) -> Result<(), String> {
    let text = || String::from_utf8_lossy(body).into_owned();
    if status != StatusCode::OK {
        return Err(format!("{uid}: status {status}: {}", text()));
    }
    let review: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("{uid}: not JSON ({e}): {}", text()))?;
    let response = &review["response"];
    if response["uid"] != uid || response["allowed"] != true {
        return Err(format!("{uid}: wrong uid or not allowed: {review}"));
    }
    if response["patchType"] != "JSONPatch" {
        return Err(format!("{uid}: no JSONPatch: {review}"));
    }
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap_or_default())
        .map_err(|e| format!("{uid}: patch is not base64: {e}"))?;
    let patch: serde_json::Value =
        serde_json::from_slice(&patch).map_err(|e| format!("{uid}: patch is not JSON: {e}"))?;
    if !patch.to_string().contains(INIT_CONTAINER) {
        return Err(format!(
            "{uid}: the patch does not add {INIT_CONTAINER}: {patch}"
        ));
    }
    Ok(())
}

/// A server with the shared restore hooks, and a client trusting its CA.
struct Fixture {
    ca: Ca,
    dir: SecretDir,
    server: TestServer,
}

impl Fixture {
    async fn start(timeouts: Timeouts) -> Self {
        let ca = Ca::root("faults root");
        let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
        let options = ServerOptions {
            timeouts,
            catalog: catalog(),
            ..ServerOptions::default()
        };
        let server = TestServer::start(dir.path(), options).await;
        Self { ca, dir, server }
    }

    fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    fn h1(&self) -> TlsClient {
        TlsClient::with_alpn(&self.ca, &[b"http/1.1"])
    }

    async fn h1_conn(&self) -> Conn {
        Conn::over(self.h1().connect(self.addr()).await.unwrap()).await
    }

    async fn bad_requests(&self) -> f64 {
        metric(
            &self.server.metrics_text().await,
            r#"restore_hooks_admission_requests_total{outcome="bad_request"}"#,
        )
    }
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    KeepAliveH1,
    KeepAliveH2,
    NewConnectionEachRequest,
}

/// Valid traffic in the background, checking every answer.
struct Checker {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<Result<(), String>>>,
}

impl Checker {
    fn start(addr: SocketAddr, ca: &Ca) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let tasks = [
            Mode::KeepAliveH1,
            Mode::KeepAliveH2,
            Mode::NewConnectionEachRequest,
        ]
        .into_iter()
        .map(|mode| {
            let client = match mode {
                Mode::KeepAliveH2 => TlsClient::with_alpn(ca, &[b"h2"]),
                _ => TlsClient::with_alpn(ca, &[b"http/1.1"]),
            };
            let (stop, ok) = (stop.clone(), ok.clone());
            tokio::spawn(async move {
                let mut conn = None;
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    if conn.is_none() || matches!(mode, Mode::NewConnectionEachRequest) {
                        let stream = client
                            .connect(addr)
                            .await
                            .map_err(|e| format!("{mode:?}: connect: {e}"))?;
                        conn = Some(Conn::over(stream).await);
                    }
                    let uid = format!("check-{mode:?}-{i}");
                    let (status, body) = conn
                        .as_mut()
                        .unwrap()
                        .post("/mutate?timeout=10s", restored_review(&uid))
                        .await
                        .map_err(|e| format!("{mode:?}: request {i}: {e}"))?;
                    check_answer(status, &body, &uid)?;
                    ok.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok(())
            })
        })
        .collect();
        Self { stop, ok, tasks }
    }

    fn count(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    /// Waits until `n` more answers were checked; fails at once if a checker failed.
    async fn progress(&mut self, n: usize) {
        let target = self.count() + n;
        eventually!(format!("{target} answers of valid traffic"), PATIENCE, {
            let count = self.count();
            if count >= target {
                Ok(())
            } else {
                self.fail_fast().await;
                Err(format!("stalled at {count}"))
            }
        })
    }

    async fn fail_fast(&mut self) {
        if let Some(index) = self.tasks.iter().position(JoinHandle::is_finished) {
            let task = self.tasks.remove(index);
            match task.await.unwrap() {
                Err(err) => panic!("valid traffic failed: {err}"),
                Ok(()) => panic!("a checker stopped on its own"),
            }
        }
    }

    /// Stops the traffic; panics on any failed request. Returns the checked answers.
    async fn finish(mut self) -> usize {
        self.progress(3).await;
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks.drain(..) {
            if let Err(err) = tokio::time::timeout(PATIENCE, task)
                .await
                .expect("checker stops")
                .unwrap()
            {
                panic!("valid traffic failed: {err}");
            }
        }
        self.count()
    }
}

/// Reads until the peer closes (EOF, reset, or a TLS error), within `PATIENCE`.
async fn read_until_closed(stream: &mut (impl AsyncRead + Unpin), what: &str) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "{what}: the server did not close the connection within {PATIENCE:?} (got {:?})",
                String::from_utf8_lossy(&received)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// A closed connection got either nothing or a 408 (hyper answers a header-read timeout so).
fn assert_cut_off(received: &[u8], what: &str) {
    let text = String::from_utf8_lossy(received);
    assert!(
        received.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{what}: {text}"
    );
}

fn bad_request_message(status: StatusCode, body: &[u8], what: &str) -> String {
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{what}: {}",
        String::from_utf8_lossy(body)
    );
    let error: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{what}: the 400 body is not JSON ({e})"));
    let message = error["message"].as_str().unwrap_or_default().to_string();
    assert!(!message.is_empty(), "{what}: {error}");
    message
}

/// Request bodies that are not AdmissionReviews, each answered 400 with a message (413 over
/// the size limit), on kept-alive h1 and h2 connections, without disturbing valid traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_and_hostile_bodies_get_clear_errors() {
    let fixture = Fixture::start(Timeouts::default()).await;
    let mut checker = Checker::start(fixture.addr(), &fixture.ca);
    checker.progress(5).await;

    let valid = restored_review("valid");
    let review_with = |api_version: &str, kind: &str| {
        let mut review = admission_review("v", "shop", statefulset::restored_pod());
        review["apiVersion"] = api_version.into();
        review["kind"] = kind.into();
        serde_json::to_vec(&review).unwrap()
    };
    let mut non_utf8_in_string = valid.clone();
    let at = non_utf8_in_string
        .windows(5)
        .position(|w| w == b"valid")
        .unwrap();
    non_utf8_in_string[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
    let mut deep_in_object = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"deep","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","userInfo":{},"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":"#.to_vec();
    deep_in_object.extend(std::iter::repeat_n(b'[', 100_000));
    // The same depth, closed, inside a field the pod view decodes (a container's `env`).
    let mut deep_in_env = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"deep","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","userInfo":{},"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c","env":"#.to_vec();
    deep_in_env.extend(std::iter::repeat_n(b'[', 100_000));
    deep_in_env.extend(std::iter::repeat_n(b']', 100_000));
    deep_in_env.extend_from_slice(b"}]}}}}");
    // Valid JSON just under the size limit (3.5 MiB since the limit was lowered from 8 MiB to
    // what the API server can send): judged by content.
    let mut junk = b"{\"junk\":[".to_vec();
    while junk.len() < MAX_BODY_BYTES - 64 * 1024 {
        junk.extend_from_slice(b"\"restore-hooks\",1234567890,{\"a\":[true,null]},");
    }
    junk.extend_from_slice(b"0]}");

    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("empty", vec![], None),
        ("not JSON", b"hello".to_vec(), None),
        ("truncated", valid[..valid.len() / 2].to_vec(), None),
        (
            "trailing garbage",
            [&valid[..], b"}{"].concat(),
            Some("trailing"),
        ),
        (
            "non-UTF-8 bytes",
            vec![0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80, 0x7b],
            None,
        ),
        ("non-UTF-8 inside a string", non_utf8_in_string, None),
        (
            "100k nested arrays",
            vec![b'['; 100_000],
            // Rejected at the first byte: an AdmissionReview is an object.
            Some("not an AdmissionReview"),
        ),
        (
            "100k nested objects",
            b"{\"a\":".repeat(100_000),
            // Unknown fields are skipped without building them (and without deep recursion).
            Some("not an AdmissionReview"),
        ),
        (
            "100k nested arrays inside the pod",
            deep_in_object,
            // Since the object stays raw text until it is known to be a pod CREATE, it is
            // skipped over without recursion (and without building it): what is wrong with this
            // body is that it ends inside the object, not its depth.
            Some("EOF while parsing"),
        ),
        (
            "apiVersion v1beta1",
            review_with("admission.k8s.io/v1beta1", "AdmissionReview"),
            Some("admissionReviewVersions"),
        ),
        (
            "kind Pod",
            review_with("admission.k8s.io/v1", "Pod"),
            Some("kind AdmissionReview"),
        ),
        (
            "no request",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            None,
        ),
        (
            "a response instead of a request",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true}}"#
                .to_vec(),
            None,
        ),
        ("valid JSON junk just under the size limit", junk, None),
    ];

    let mut h2 = Conn::over(
        TlsClient::with_alpn(&fixture.ca, &[b"h2"])
            .connect(fixture.addr())
            .await
            .unwrap(),
    )
    .await;
    let mut h1 = fixture.h1_conn().await;
    for (what, body, expected) in &cases {
        for (protocol, conn) in [("h1", &mut h1), ("h2", &mut h2)] {
            let what = format!("{what} over {protocol}");
            let (status, response) = conn.post("/mutate", body.clone()).await.unwrap();
            let message = bad_request_message(status, &response, &what);
            eprintln!("{what}: {message}");
            if let Some(expected) = expected {
                assert!(message.contains(expected), "{what}: {message}");
            }
        }
        checker.progress(1).await;
    }
    // A well-formed review whose pod nests 100k arrays in a container's `env`: the pod view
    // keeps `env` as raw text (only compared, never interpreted), so the depth costs nothing:
    // no stack overflow, no 100k-deep tree, an ordinary answer (this pod is not restored).
    for (protocol, conn) in [("h1", &mut h1), ("h2", &mut h2)] {
        let (status, response) = conn.post("/mutate", deep_in_env.clone()).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{protocol}");
        let review: serde_json::Value = serde_json::from_slice(&response).unwrap();
        assert_eq!(review["response"]["allowed"], true, "{protocol}: {review}");
        assert_eq!(review["response"]["uid"], "deep", "{protocol}: {review}");
        assert!(
            review["response"].get("patch").is_none(),
            "{protocol}: {review}"
        );
    }
    // Both kept-alive connections still serve valid requests.
    for conn in [&mut h1, &mut h2] {
        let (status, body) = conn
            .post("/mutate", restored_review("after"))
            .await
            .unwrap();
        check_answer(status, &body, "after").unwrap();
    }
    assert_eq!(fixture.bad_requests().await, 2.0 * cases.len() as f64);

    // Other methods and paths.
    let (status, _) = h1.post("/", valid.clone()).await.unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Over the limit: 413, on h1 (then closed, the rest of the body unread) and h2.
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let client = TlsClient::with_alpn(&fixture.ca, &[alpn]);
        let mut conn = Conn::over(client.connect(fixture.addr()).await.unwrap()).await;
        let (status, body) = conn
            .post("/mutate", vec![b'['; MAX_BODY_BYTES + 1024])
            .await
            .unwrap();
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(String::from_utf8_lossy(&body).contains("exceeds"));
        checker.progress(1).await;
    }

    // A body shorter than its Content-Length, then the client closes its side.
    let mut stream = fixture.h1().connect(fixture.addr()).await.unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        valid.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&valid[..100]).await.unwrap();
    stream.shutdown().await.unwrap();
    let received = read_until_closed(&mut stream, "short body").await;
    let text = String::from_utf8_lossy(&received);
    assert!(
        received.is_empty() || text.starts_with("HTTP/1.1 400"),
        "{text}"
    );

    let checked = checker.finish().await;
    assert!(checked > cases.len(), "{checked}");
    fixture.server.stop().await.unwrap();
}

/// Clients that connect and never finish are cut off by the server's timeouts while valid
/// traffic flows: TCP without a ClientHello, half a ClientHello, TLS with half the request
/// headers (first request, and a later request on a kept-alive connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_without_starving_others() {
    let timeouts = Timeouts {
        handshake: Duration::from_secs(1),
        first_request: Duration::from_secs(1),
        // Also the idle keep-alive limit: far above the checker's pauses between requests.
        header_read: Duration::from_secs(3),
        request_body: Duration::from_secs(1),
        ..Timeouts::default()
    };
    let fixture = Fixture::start(timeouts).await;
    let mut checker = Checker::start(fixture.addr(), &fixture.ca);
    checker.progress(5).await;
    let addr = fixture.addr();
    const EACH: usize = 20;

    let mut slow: Vec<(String, JoinHandle<Vec<u8>>)> = Vec::new();
    for i in 0..EACH {
        // TCP open, no ClientHello.
        let tcp = TcpStream::connect(addr).await.unwrap();
        slow.push((
            format!("silent TCP {i}"),
            tokio::spawn(async move {
                let mut tcp = tcp;
                read_until_closed(&mut tcp, "silent TCP").await
            }),
        ));
        // The first 5 bytes of a TLS record header announcing a ClientHello, then nothing.
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
            .await
            .unwrap();
        slow.push((
            format!("half a ClientHello {i}"),
            tokio::spawn(async move { read_until_closed(&mut tcp, "half a ClientHello").await }),
        ));
        // TLS done, half the headers of the first request.
        let mut tls = fixture.h1().connect(addr).await.unwrap();
        tls.write_all(b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-")
            .await
            .unwrap();
        tls.flush().await.unwrap();
        slow.push((
            format!("half the first request's headers {i}"),
            tokio::spawn(async move { read_until_closed(&mut tls, "half headers").await }),
        ));
    }
    // One complete request on a kept-alive connection, then half the headers of the next.
    let mut kept = fixture.h1().connect(addr).await.unwrap();
    let body = restored_review("kept");
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    kept.write_all(head.as_bytes()).await.unwrap();
    kept.write_all(&body).await.unwrap();
    kept.write_all(b"POST /mutate HTTP/1.1\r\nhost:")
        .await
        .unwrap();
    kept.flush().await.unwrap();
    slow.push((
        "half the second request's headers".into(),
        tokio::spawn(async move {
            let received = read_until_closed(&mut kept, "second request").await;
            // The first request was answered; then the connection was cut.
            let text = String::from_utf8_lossy(&received);
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(text.contains("\"uid\":\"kept\""), "{text}");
            let rest = &received[text.rfind("HTTP/1.1 ").unwrap()..];
            if rest.starts_with(b"HTTP/1.1 200") {
                Vec::new()
            } else {
                rest.to_vec()
            }
        }),
    ));

    // While the slow clients hold their connections, valid traffic keeps being answered.
    checker.progress(20).await;
    for (what, task) in slow {
        let received = task.await.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_cut_off(&received, &what);
    }
    checker.finish().await;

    // The server still accepts and answers new connections.
    let mut conn = fixture.h1_conn().await;
    let (status, body) = conn.post("/mutate", restored_review("end")).await.unwrap();
    check_answer(status, &body, "end").unwrap();
    fixture.server.stop().await.unwrap();
}

/// A client that sends the request headers, then the body more slowly than any timeout (or
/// not at all), gets a 408 once the whole-body deadline passes: neither hyper's header timeout
/// nor axum-server's first-request timeout covers the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_slower_than_the_timeouts_is_cut_off() {
    let short = Duration::from_millis(500);
    let fixture = Fixture::start(Timeouts {
        handshake: short,
        first_request: short,
        header_read: Duration::from_secs(2),
        request_body: Duration::from_secs(1),
        ..Timeouts::default()
    })
    .await;
    let mut checker = Checker::start(fixture.addr(), &fixture.ca);
    let mut tls = fixture.h1().connect(fixture.addr()).await.unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
         content-length: 4096\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let trickle = async {
        // One byte every 100 ms: the whole body would take 400 s.
        for _ in 0..4096 {
            if tls.write_all(b" ").await.is_err() || tls.flush().await.is_err() {
                return true;
            }
            let mut buf = [0u8; 256];
            match tokio::time::timeout(Duration::from_millis(100), tls.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(n)) => {
                    let answer = String::from_utf8_lossy(&buf[..n]);
                    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
                    return true;
                }
                Err(_) => {}
            }
        }
        false
    };
    let cut = tokio::time::timeout(Duration::from_secs(10), trickle)
        .await
        .unwrap_or(false);
    checker.progress(5).await;
    checker.finish().await;
    assert!(cut, "a body trickled for 10 s was never cut off");
    fixture.server.stop().await.unwrap();
}

/// Not TLS at all on the TLS port: random bytes, a plain HTTP request, a truncated TLS
/// record, a client that rejects the certificate. Each connection is closed; the server
/// carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_garbage_is_closed_and_the_server_carries_on() {
    let fixture = Fixture::start(Timeouts {
        handshake: Duration::from_secs(2),
        first_request: Duration::from_secs(2),
        ..Timeouts::default()
    })
    .await;
    let mut checker = Checker::start(fixture.addr(), &fixture.ca);
    checker.progress(5).await;
    let addr = fixture.addr();

    // Deterministic pseudo-random bytes (xorshift), some starting like a handshake record.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    };
    let mut garbage: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..20 {
        let mut bytes = random(64 + i * 97);
        if i % 2 == 1 {
            // A handshake record header with a random body.
            bytes[..3].copy_from_slice(&[0x16, 0x03, 0x01]);
        }
        garbage.push((format!("random bytes #{i}"), bytes));
    }
    garbage.push((
        "plain HTTP".into(),
        format!(
            "POST /mutate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
             content-length: 2\r\n\r\n{{}}"
        )
        .into_bytes(),
    ));
    garbage.push((
        "plain HTTP GET".into(),
        b"GET /readyz HTTP/1.0\r\n\r\n".to_vec(),
    ));
    // An SSLv2-style hello and an oversized record length.
    garbage.push(("SSLv2 hello".into(), vec![0x80, 0x2e, 0x01, 0x00, 0x02]));
    garbage.push((
        "oversized record".into(),
        [&[0x16, 0x03, 0x03, 0xff, 0xff][..], &random(1000)].concat(),
    ));

    // All at once: some wait for the rest of a record until the handshake timeout.
    let tasks: Vec<_> = garbage
        .into_iter()
        .map(|(what, bytes)| {
            tokio::spawn(async move {
                let mut tcp = TcpStream::connect(addr).await.unwrap();
                // The server may close before everything was written.
                let _ = tcp.write_all(&bytes).await;
                let received = read_until_closed(&mut tcp, &what).await;
                assert!(
                    !received.starts_with(b"HTTP/"),
                    "{what}: answered in plain text: {:?}",
                    String::from_utf8_lossy(&received)
                );
            })
        })
        .collect();
    checker.progress(3).await;
    for task in tasks {
        task.await.unwrap();
    }

    // A client that does not trust the server's CA aborts the handshake with an alert.
    let stranger = Ca::root("another root");
    let err = TlsClient::trusting(&stranger)
        .connect(addr)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");

    // Clients that send a real ClientHello and vanish, before or after the ServerHello.
    let mut roots = RootCertStore::empty();
    roots.add(fixture.ca.cert_der()).unwrap();
    let config = Arc::new(
        ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    for i in 0..20 {
        let mut hello = Vec::new();
        ClientConnection::new(config.clone(), ServerName::try_from(SERVICE_DNS).unwrap())
            .unwrap()
            .write_tls(&mut hello)
            .unwrap();
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&hello).await.unwrap();
        if i % 2 == 1 {
            let mut buf = [0u8; 64];
            let n = tokio::time::timeout(PATIENCE, tcp.read(&mut buf))
                .await
                .expect("a ServerHello")
                .unwrap();
            assert!(n > 0 && buf[0] == 0x16, "{:?}", &buf[..n]);
        }
        drop(tcp);
    }

    checker.finish().await;
    let mut conn = fixture.h1_conn().await;
    let (status, body) = conn.post("/mutate", restored_review("end")).await.unwrap();
    check_answer(status, &body, "end").unwrap();
    fixture.server.stop().await.unwrap();
}

/// 500 TLS connections opened at once, each sending one request: every one is answered
/// correctly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_simultaneous_connections_are_all_answered() {
    let fixture = Fixture::start(Timeouts::default()).await;
    let mut checker = Checker::start(fixture.addr(), &fixture.ca);
    checker.progress(5).await;
    const CONNECTIONS: usize = 500;
    let barrier = Arc::new(tokio::sync::Barrier::new(CONNECTIONS));
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let (client, addr, barrier) = (fixture.h1(), fixture.addr(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let uid = format!("burst-{i}");
                let stream = client
                    .connect(addr)
                    .await
                    .map_err(|e| format!("{uid}: connect: {e}"))?;
                let mut conn = Conn::over(stream).await;
                let (status, body) = conn
                    .post("/mutate", restored_review(&uid))
                    .await
                    .map_err(|e| format!("{uid}: {e}"))?;
                check_answer(status, &body, &uid)
            })
        })
        .collect();
    let mut failures = Vec::new();
    for task in tasks {
        // Bounded: a lost connection must fail the test, not hang it.
        match tokio::time::timeout(Duration::from_secs(120), task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(err))) => failures.push(err),
            Ok(Err(join)) => failures.push(join.to_string()),
            Err(_) => failures.push("timed out".into()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {CONNECTIONS} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    checker.finish().await;
    let metrics = fixture.server.metrics_text().await;
    assert!(
        metric(
            &metrics,
            r#"restore_hooks_admission_requests_total{outcome="patched"}"#
        ) >= CONNECTIONS as f64,
        "{metrics}"
    );
    fixture.server.stop().await.unwrap();
}

/// The serving certificate rotates three times (ECDSA → RSA → a chain through an
/// intermediate → ECDSA) while concurrent workers send requests on kept-alive h1 and h2
/// connections and on new connections: no request fails, and new connections end on the
/// newest certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_under_load_fails_no_request() {
    let mut fixture = Fixture::start(Timeouts::default()).await;
    let addr = fixture.addr();
    let checker = Checker::start(addr, &fixture.ca);

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..12 {
        let client = match w % 3 {
            0 => TlsClient::with_alpn(&fixture.ca, &[b"h2"]),
            _ => TlsClient::with_alpn(&fixture.ca, &[b"http/1.1"]),
        };
        let fresh = w % 4 == 3;
        let (stop, ok) = (stop.clone(), ok.clone());
        workers.push(tokio::spawn(async move {
            let mut conn = None;
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) && i < 20_000 {
                if conn.is_none() || fresh {
                    let stream = client
                        .connect(addr)
                        .await
                        .map_err(|e| format!("worker {w}: handshake {i}: {e}"))?;
                    conn = Some(Conn::over(stream).await);
                }
                let uid = format!("rot-{w}-{i}");
                let (status, body) = conn
                    .as_mut()
                    .unwrap()
                    .post("/mutate", restored_review(&uid))
                    .await
                    .map_err(|e| format!("worker {w}: request {i}: {e}"))?;
                check_answer(status, &body, &uid)?;
                ok.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            Ok::<(), String>(())
        }));
    }
    let wait_for = |n: usize| {
        let (ok, workers) = (ok.clone(), &workers);
        async move {
            let target = ok.load(Ordering::Relaxed) + n;
            eventually!(format!("{target} answers"), PATIENCE, {
                let count = ok.load(Ordering::Relaxed);
                if count >= target {
                    Ok(true)
                } else if workers.iter().any(JoinHandle::is_finished) {
                    Ok(false) // joined below, with its error
                } else {
                    Err(format!("traffic stalled at {count}"))
                }
            })
        }
    };

    let mut healthy = wait_for(100).await;
    let intermediate = fixture.ca.intermediate("faults intermediate");
    let leaves = [
        fixture.ca.leaf(KeyKind::RsaPkcs1),
        intermediate.leaf(KeyKind::EcdsaSec1),
        fixture.ca.leaf(KeyKind::EcdsaPkcs8),
    ];
    for (n, leaf) in leaves.iter().enumerate() {
        if !healthy {
            break;
        }
        fixture.dir.rotate_to(leaf);
        fixture
            .server
            .wait_metric(
                r#"restore_hooks_tls_reloads_total{result="success"}"#,
                (n + 1) as f64,
                PATIENCE,
            )
            .await;
        healthy = wait_for(100).await;
        // New connections now get this certificate.
        let stream = fixture.h1().connect(addr).await.unwrap();
        assert_eq!(peer_leaf(&stream), leaf.der, "rotation {}", n + 1);
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        if let Err(err) = tokio::time::timeout(PATIENCE, worker)
            .await
            .expect("worker stops")
            .unwrap()
        {
            panic!("{err}");
        }
    }
    assert!(healthy, "a worker stopped early without an error");
    checker.finish().await;
    let metrics = fixture.server.metrics_text().await;
    assert_eq!(
        metric(
            &metrics,
            r#"restore_hooks_tls_reloads_total{result="error"}"#
        ),
        0.0,
        "{metrics}"
    );
    fixture.server.stop().await.unwrap();
}

/// A port that was free a moment ago (the binary binds it itself).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// SIGTERM to the real binary while concurrent clients send requests: every request that
/// started before the signal is answered 200 and correct (including one whose body is only
/// finished during the drain), later ones are answered correctly or refused at the
/// connection level (never a wrong answer), and the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_fails_no_in_flight_request() {
    let ca = Ca::root("faults root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let scratch = tempfile::tempdir().unwrap();
    let hooks = scratch.path().join("hooks.yaml");
    std::fs::write(&hooks, statefulset::HOOKS).unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_restore-hooks"));
    for (key, _) in std::env::vars() {
        if key.starts_with("RESTORE_HOOKS_") {
            command.env_remove(key);
        }
    }
    let child = command
        .env_remove("KUBECONFIG")
        .args(["webhook", "--no-cluster", "--log-format", "text"])
        .arg("--hooks")
        .arg(&hooks)
        .arg("--tls-dir")
        .arg(dir.path())
        // Without a plan key the webhook never reports ready (plans would be unsigned).
        .arg("--plan-key-file")
        .arg(write_plan_key(scratch.path()))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
        .args(["--shutdown-delay", "1s", "--shutdown-grace", "10s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Collect stderr (and the exit status) in the background, so a full pipe never blocks it.
    let exited = tokio::task::spawn_blocking(move || child.wait_with_output());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    wait_process_ready(admin, PATIENCE, || exited.is_finished()).await;

    // The signal time, as seen by the workers: 0 until sent.
    let signalled = Arc::new(AtomicBool::new(false));
    let ok_before = Arc::new(AtomicUsize::new(0));
    let ok_after = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..12 {
        let client = match w % 4 {
            0 => TlsClient::with_alpn(&ca, &[b"h2"]),
            _ => TlsClient::with_alpn(&ca, &[b"http/1.1"]),
        };
        let (signalled, ok_before, ok_after) =
            (signalled.clone(), ok_before.clone(), ok_after.clone());
        workers.push(tokio::spawn(async move {
            let mut conn: Option<Conn> = None;
            let mut refused_after_signal = 0usize;
            for i in 0..100_000usize {
                let before = !signalled.load(Ordering::SeqCst);
                let uid = format!("term-{w}-{i}");
                if conn.is_none() {
                    let connected = match client.connect(addr).await {
                        Ok(stream) => Conn::try_over(stream).await.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    match connected {
                        Ok(connected) => conn = Some(connected),
                        Err(e) if before => return Err(format!("{uid}: connect: {e}")),
                        // The listener closed after --shutdown-delay, or this connection
                        // was accepted just before and closed by the drain.
                        Err(_) => return Ok(()),
                    }
                }
                match conn
                    .as_mut()
                    .unwrap()
                    .post("/mutate", restored_review(&uid))
                    .await
                {
                    Ok((status, body)) => {
                        check_answer(status, &body, &uid)?;
                        if before {
                            ok_before.fetch_add(1, Ordering::Relaxed);
                        } else {
                            ok_after.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) if before => return Err(format!("{uid} (before SIGTERM): {e}")),
                    // During the drain the server closes each connection after its
                    // response: the next request on it fails before being sent; reconnect.
                    Err(_) => {
                        conn = None;
                        refused_after_signal += 1;
                        if refused_after_signal > 1_000 {
                            return Err(format!("{uid}: endless refusals"));
                        }
                    }
                }
            }
            Ok(())
        }));
    }

    // A request in flight across the whole drain: head and half the body before the signal,
    // the rest after --shutdown-delay, once the server stopped accepting.
    let body = restored_review("in-flight");
    let mut slow = TlsClient::with_alpn(&ca, &[b"http/1.1"])
        .connect(addr)
        .await
        .unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    slow.write_all(first).await.unwrap();
    slow.flush().await.unwrap();

    // Let load build up, then signal.
    eventually!("load before SIGTERM", PATIENCE, {
        let count = ok_before.load(Ordering::Relaxed);
        if count >= 200 {
            Ok(())
        } else {
            assert!(
                !workers.iter().any(JoinHandle::is_finished),
                "a worker failed"
            );
            Err(format!("{count} answers"))
        }
    });
    signalled.store(true, Ordering::SeqCst);
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());

    // Past --shutdown-delay the listener is closed; finish the in-flight request then.
    eventually!(
        "the listener to close",
        PATIENCE,
        TcpStream::connect(addr).await.is_err()
    );
    slow.write_all(rest).await.unwrap();
    slow.flush().await.unwrap();
    let response = read_until_closed(&mut slow, "in-flight request").await;
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"uid\":\"in-flight\""), "{response}");

    for worker in workers {
        if let Err(err) = tokio::time::timeout(PATIENCE, worker)
            .await
            .expect("worker stops once the listener closed")
            .unwrap()
        {
            panic!("{err}");
        }
    }
    let output = tokio::time::timeout(PATIENCE, exited)
        .await
        .expect("the process exits after the drain")
        .unwrap()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}\n{log}", output.status);
    assert!(log.contains("clean shutdown"), "{log}");
    assert!(ok_before.load(Ordering::Relaxed) >= 200);
}
