//! A caller of the webhook's port that is not the API server gains nothing (docs/security.md,
//! "The webhook's port"), over real TLS on 127.0.0.1:
//!
//! - clients that declare large bodies and send nothing, or part of them, never cost a review of
//!   the API server an answer: it is answered 200 every time, never 429;
//! - clients that hold every connection slot with stalled connections give way to new ones;
//! - reviews with forged identities make the webhook send a bounded number of
//!   SubjectAccessReviews, and a real identity's cached answer survives them.
//!
//! Every wait polls a condition with a generous deadline; the one bound that involves time (the
//! reviews a pace of one a second allows) grows with the time the test took, so a slow machine
//! only loosens it.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;
use http_body_util::StreamBody;
use hyper::StatusCode;
use hyper::body::{Bytes, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use restore_hooks::webhook::exec_rights::{Budget, ExecRights};
use restore_hooks::webhook::{LimitStats, Limits, MAX_BODY_BYTES, Timeouts};
use tokio::io::AsyncWriteExt;

/// Upper bound for anything that must happen "eventually"; the test fails rather than hangs.
const PATIENCE: Duration = Duration::from_secs(30);

/// What the stalled clients declare: close to the largest review the API server can send.
const DECLARED: usize = 3 * 1024 * 1024;

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    restore_hooks_testkit::eventually!(what, PATIENCE, done())
}

fn review_body(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&admission_review(uid, "shop", plain_pod("web-"))).unwrap()
}

/// Stalled clients never time out during a test: only the limits under test act on them.
fn patient_timeouts() -> Timeouts {
    Timeouts {
        handshake: Duration::from_secs(300),
        first_request: Duration::from_secs(300),
        request_body: Duration::from_secs(300),
        ..Timeouts::default()
    }
}

/// Whatever keeps a stalled client's side open until the test ends.
type Held = Box<dyn std::any::Any + Send>;

/// HTTP/1.1: the head of a `POST /mutate` declaring [`DECLARED`] bytes, then `sent` bytes of
/// the body, then nothing.
async fn stalled_h1(h1: &TlsClient, addr: SocketAddr, sent: usize) -> std::io::Result<TlsStream> {
    let mut stream = h1.connect(addr).await?;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
         content-length: {DECLARED}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&vec![b' '; sent]).await?;
    stream.flush().await?;
    Ok(stream)
}

type TlsStream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;
type Frames = futures::channel::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>;

/// An attacker: declares a large body, sends `sent` bytes of it (over HTTP/1.1, or none over
/// h2) and stalls; whenever the server answers or closes, it starts over. `started` counts the
/// requests it started.
fn stalling_client(
    ca: &Ca,
    addr: SocketAddr,
    h2: bool,
    sent: usize,
    started: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    let h1_client = TlsClient::with_alpn(ca, &[b"http/1.1"]);
    let h2_client = TlsClient::with_alpn(ca, &[b"h2"]);
    tokio::spawn(async move {
        loop {
            if !h2 {
                let Ok(mut stream) = stalled_h1(&h1_client, addr, sent).await else {
                    continue;
                };
                started.fetch_add(1, Ordering::Relaxed);
                // Until the server answers (or closes): a 429, a 408, or nothing for good.
                let mut buf = [0u8; 256];
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await;
                continue;
            }
            let Ok(stream) = h2_client.connect(addr).await else {
                continue;
            };
            let Ok((mut send, conn)) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                    .await
            else {
                continue;
            };
            let driver = tokio::spawn(conn);
            let (_tx, rx) = futures::channel::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
            let request = hyper::Request::post("/mutate")
                .header("content-type", "application/json")
                .header("content-length", DECLARED)
                .header("host", SERVICE_DNS)
                .body(StreamBody::new(rx as Frames))
                .unwrap();
            if send.ready().await.is_err() {
                continue;
            }
            let answer = send.send_request(request);
            started.fetch_add(1, Ordering::Relaxed);
            let _ = answer.await;
            driver.abort();
        }
    })
}

/// The API server's side: rounds of a review over a kept-alive HTTP/1.1 connection, one over a
/// kept-alive h2 connection and one over a new connection; each must be answered 200 with its
/// uid. Returns the answers checked.
async fn legitimate_reviews(ca: &Ca, addr: SocketAddr, rounds: usize) -> usize {
    let h1 = TlsClient::with_alpn(ca, &[b"http/1.1"]);
    let h2 = TlsClient::with_alpn(ca, &[b"h2"]);
    let mut kept_h1 = Conn::over(h1.connect(addr).await.unwrap()).await;
    let mut kept_h2 = Conn::over(h2.connect(addr).await.unwrap()).await;
    let mut checked = 0;
    for round in 0..rounds {
        for way in ["kept-h1", "kept-h2", "new"] {
            let uid = format!("legit-{way}-{round}");
            let answer = tokio::time::timeout(PATIENCE, async {
                match way {
                    "kept-h1" => kept_h1.post("/mutate", review_body(&uid)).await,
                    "kept-h2" => kept_h2.post("/mutate", review_body(&uid)).await,
                    _ => {
                        let stream = h1.connect(addr).await.expect("connect");
                        Conn::over(stream)
                            .await
                            .post("/mutate", review_body(&uid))
                            .await
                    }
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{uid}: no answer within {PATIENCE:?}"))
            .unwrap_or_else(|e| panic!("{uid}: {e}"));
            let (status, body) = answer;
            assert_eq!(
                status,
                StatusCode::OK,
                "{uid}: {}",
                String::from_utf8_lossy(&body)
            );
            assert_eq!(response_uid(&body), uid);
            checked += 1;
        }
    }
    checked
}

/// The tester's scenario: 32 clients declare 3 MiB bodies and send nothing (24 over
/// HTTP/1.1, 8 over h2), and 8 more send 512 KiB of theirs and stall, together more than the
/// receive buffer holds (its minimum, 3.5 MiB, here); each starts over whenever it is answered.
/// Reviews of the API server keep being answered 200, never 429: the silent ones hold nothing,
/// the partial ones hold what they sent, and when the buffer is full the body incomplete the
/// longest is cut, never the review. (Before, each declared body reserved 3 MiB of the 4 MiB
/// in-flight budget before it was read, and a review queued behind them was answered 429.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_never_cost_a_legitimate_review_an_answer() {
    let ca = Ca::root("port root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let options = ServerOptions {
        timeouts: patient_timeouts(),
        limits: Limits {
            receiving_body_bytes: MAX_BODY_BYTES,
            ..Limits::default()
        },
        ..ServerOptions::default()
    };
    let server = TestServer::start(dir.path(), options).await;
    let stats: LimitStats = server.stats.clone();
    let addr = server.addr;

    let started = Arc::new(AtomicUsize::new(0));
    let mut attackers: Vec<_> = (0..32)
        .map(|i| stalling_client(&ca, addr, i >= 24, 0, started.clone()))
        .collect();
    wait_for("32 silent requests started", || {
        started.load(Ordering::Relaxed) >= 32
    })
    .await;
    attackers
        .extend((0..8).map(|_| stalling_client(&ca, addr, false, 512 * 1024, started.clone())));
    wait_for("8 partial requests started", || {
        started.load(Ordering::Relaxed) >= 40
    })
    .await;

    let checked = legitimate_reviews(&ca, addr, 20).await;
    assert_eq!(checked, 60);

    // 8 × 512 KiB do not fit in 3.5 MiB: partial bodies incomplete the longest gave way.
    wait_for("a partial body cut to make room", || stats.preempted() >= 1).await;
    // Nobody was answered 429, and the silent bodies are all still there: they hold nothing,
    // and were never in anybody's way.
    assert_eq!(stats.overloaded(), 0, "a request was answered 429");
    assert!(
        stats.receiving() >= 32,
        "{} bodies receiving",
        stats.receiving()
    );
    let metrics = server.metrics_text().await;
    assert_eq!(
        metric(
            &metrics,
            r#"restore_hooks_admission_requests_total{outcome="overloaded"}"#
        ),
        0.0
    );
    assert!(
        metric(
            &metrics,
            r#"restore_hooks_admission_requests_total{outcome="body_preempted"}"#
        ) >= 1.0,
        "{metrics}"
    );
    for attacker in attackers {
        attacker.abort();
    }
    server.stop().await.unwrap();
}

/// Stalled clients hold every connection slot (TCP without a ClientHello, TLS without a
/// request, a request head without its body), and more keep coming than the cap allows: each
/// new connection closes the one owing a request the longest, so the API server's connections
/// (new ones, and a kept-alive one between its requests) are always served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_at_the_cap_give_way_to_new_ones() {
    let ca = Ca::root("port root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    const CAP: usize = 8;
    let options = ServerOptions {
        timeouts: patient_timeouts(),
        limits: Limits {
            max_connections: CAP,
            ..Limits::default()
        },
        ..ServerOptions::default()
    };
    let server = TestServer::start(dir.path(), options).await;
    let stats = server.stats.clone();
    let addr = server.addr;

    // Each stalled client in a task of its own: one past the cap waits for a slot before its
    // TLS handshake, and holds it once it has it.
    let held: Vec<_> = (0..3 * CAP)
        .map(|i| {
            let h1 = TlsClient::with_alpn(&ca, &[b"http/1.1"]);
            tokio::spawn(async move {
                let held: Held = match i % 3 {
                    0 => Box::new(tokio::net::TcpStream::connect(addr).await),
                    1 => Box::new(h1.connect(addr).await),
                    _ => Box::new(stalled_h1(&h1, addr, 0).await),
                };
                std::future::pending::<()>().await;
                drop(held);
            })
        })
        .collect();
    wait_for("the server to have seen every stalled connection", || {
        stats.connections()
            + stats.waiting_connections()
            + stats.stalled_closed() as usize
            + stats.refused_connections() as usize
            >= 3 * CAP
    })
    .await;
    // Those that found as many waiting as the cap allows were closed at once: a connection
    // flood, not a stall. Once every slot is held by a connection stalled long enough
    // (Timeouts::stalled_after) and nobody waits, the API server's connections come: at most
    // 6 (2 kept alive, 4 new), fewer than the stalled ones, so a kept-alive one never yields.
    wait_for(
        "the slots held by stalled connections, nobody waiting",
        || stats.connections() == CAP && stats.waiting_connections() == 0,
    )
    .await;
    let refused = stats.refused_connections();
    let checked = legitimate_reviews(&ca, addr, 4).await;
    assert_eq!(checked, 12);
    assert!(stats.stalled_closed() >= 6, "{}", stats.stalled_closed());
    assert_eq!(stats.refused_connections(), refused);
    assert_eq!(stats.yielded(), 0);
    let metrics = server.metrics_text().await;
    assert_eq!(
        metric(
            &metrics,
            r#"restore_hooks_webhook_connections_closed_total{reason="stalled"}"#
        ),
        stats.stalled_closed() as f64,
        "{metrics}"
    );
    for task in held {
        task.abort();
    }
    server.stop().await.unwrap();
}

/// A fake API server answering SubjectAccessReviews, counting them per user: `alice` may exec.
fn counting_api(sent: Arc<std::sync::Mutex<Vec<String>>>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let sent = sent.clone();
        async move {
            use http_body_util::BodyExt as _;
            let body = request.into_body().collect().await?.to_bytes();
            let review: serde_json::Value = serde_json::from_slice(&body)?;
            let user = review["spec"]["user"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let allowed = user == "alice";
            sent.lock().unwrap().push(user);
            let answer = serde_json::json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": review["spec"],
                "status": {"allowed": allowed},
            });
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(http::Response::new(
                http_body_util::Full::new(Bytes::from(answer.to_string())),
            ))
        }
    });
    kube::Client::new(service, "default")
}

/// A restored pod with a Velero annotation exec hook.
fn annotated_pod(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"velero.io/restore-name": "r1"},
                     "annotations": {"post.hook.restore.velero.io/command": "[\"/bin/migrate\"]"}},
        "spec": {"containers": [{"name": "db", "image": "postgres:17"}]}
    })
}

/// The review of [`annotated_pod`] `uid`, created by `user`.
fn annotated_review(uid: &str, user: &str) -> Vec<u8> {
    let mut review = admission_review(uid, "shop", annotated_pod(uid));
    review["request"]["userInfo"] = serde_json::json!({"username": user});
    serde_json::to_vec(&review).unwrap()
}

/// The annotation hook of the plan the webhook issued for [`annotated_pod`] `uid`.
fn planned_hook(uid: &str, body: &[u8]) -> serde_json::Value {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap();
    let patch = base64::engine::general_purpose::STANDARD
        .decode(answer["response"]["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let mut pod = annotated_pod(uid);
    json_patch::patch(&mut pod, &patch.0).unwrap();
    let plan: serde_json::Value = serde_json::from_str(
        pod["metadata"]["annotations"]["restore-hooks.dev/plan"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    plan["hooks"][0].clone()
}

/// A review by `alice`, who may exec: her hook is allowed by her right.
async fn alice(conn: &mut Conn, uid: &str) {
    let (status, body) = conn
        .post("/mutate", annotated_review(uid, "alice"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let hook = planned_hook(uid, &body);
    assert_eq!(hook["allowedBy"], "creator", "{uid}: {hook}");
}

/// 300 reviews, each with another forged `userInfo`: the webhook asks the API server about at
/// most what its pace allows (five at once, then one a second), refuses the rest's annotation
/// hooks saying so, and the answer it had for a real identity, `alice`, is still used after the
/// flood (no second review for her), although the cache holds only 4 answers, fewer than the
/// forged ones answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_identities_are_not_amplified_and_evict_no_real_answer() {
    let ca = Ca::root("port root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let sent = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let budget = Budget {
        per_second: 1,
        burst: 5,
        in_flight: 4,
        max_wait: Duration::ZERO,
        // Fewer than the burst: forged answers fill it, and a fresh answer must still not go.
        capacity: 4,
    };
    let started = Instant::now();
    let options = ServerOptions {
        exec_rights: Some(Arc::new(ExecRights::api_within(
            counting_api(sent.clone()),
            budget,
            None,
        ))),
        // `own`: the pod carries Velero's label, and the hook is restore-hooks' to run.
        engine: restore_hooks::config::EngineConfig {
            velero_hooks: restore_hooks::config::VeleroHooksMode::Own,
            ..Default::default()
        },
        ..ServerOptions::default()
    };
    let server = TestServer::start(dir.path(), options).await;
    let client = TlsClient::trusting(&ca);
    let mut conn = Conn::over(client.connect(server.addr).await.unwrap()).await;
    alice(&mut conn, "alice-0").await;

    // The flood, over four connections at once.
    const FORGED: usize = 300;
    let next = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let floods: Vec<_> = (0..4)
        .map(|_| {
            let (client, addr) = (client.clone(), server.addr);
            let (next, refused) = (next.clone(), refused.clone());
            tokio::spawn(async move {
                let mut conn = Conn::over(client.connect(addr).await.unwrap()).await;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= FORGED {
                        return;
                    }
                    let uid = format!("forged-{i}");
                    let body = annotated_review(&uid, &format!("mallory-{i}"));
                    let (status, body) = conn.post("/mutate", body).await.unwrap();
                    assert_eq!(status, StatusCode::OK, "{uid}");
                    let hook = planned_hook(&uid, &body);
                    let why = hook["refused"].as_str().unwrap_or_default();
                    assert!(
                        why.contains("may not create pods/exec")
                            || why.contains("SubjectAccessReview budget is spent"),
                        "{uid}: {hook}"
                    );
                    if why.contains("SubjectAccessReview budget is spent") {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for flood in floods {
        tokio::time::timeout(Duration::from_secs(120), flood)
            .await
            .expect("the flood is answered")
            .unwrap();
    }
    let asked_forged = sent.lock().unwrap().len() - 1;
    let most = 5 + started.elapsed().as_secs() as usize + 1;
    assert!(
        asked_forged <= most,
        "{asked_forged} SubjectAccessReviews for {FORGED} forged identities; the pace allows {most}"
    );
    assert_eq!(asked_forged + refused.load(Ordering::Relaxed), FORGED);

    // Alice's answer survived: used again, without asking.
    for i in 1..=5 {
        alice(&mut conn, &format!("alice-{i}")).await;
    }
    let asked_alice = sent
        .lock()
        .unwrap()
        .iter()
        .filter(|u| *u == "alice")
        .count();
    assert_eq!(
        asked_alice, 1,
        "alice was asked again: her answer was evicted"
    );
    let metrics = server.metrics_text().await;
    assert!(
        metric(
            &metrics,
            r#"restore_hooks_annotation_hooks_refused_total{reason="exec_check_failed"}"#
        ) >= (FORGED - most) as f64,
        "{metrics}"
    );
    server.stop().await.unwrap();
}
