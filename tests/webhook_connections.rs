//! Connection limits of the webhook server over real TLS on 127.0.0.1: idle HTTP/2 connections
//! are closed after the idle limit (as hyper closes idle HTTP/1.1 keep-alive connections), a
//! request in flight is never cut, and connections over the cap wait for a slot, which the
//! connection owing a request the longest gives up first, else the one idle the longest, never
//! a busy one; waiters beyond the cap are closed at once. (What stalled clients cannot do to the
//! API server's reviews is in `webhook_port.rs`.)
//!
//! Every wait polls a condition with a generous deadline; nothing asserts how long anything
//! took.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use restore_hooks::webhook::{LimitStats, Limits, Timeouts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// Upper bound for anything that must happen "eventually"; the test fails rather than hangs.
const PATIENCE: Duration = Duration::from_secs(20);

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    restore_hooks_testkit::eventually!(what, PATIENCE, done())
}

fn review_body(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&admission_review(uid, "shop", plain_pod("web-"))).unwrap()
}

type Frames = futures::channel::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>;

/// An h2 connection whose driver task ends when the connection closes.
struct H2 {
    send: hyper::client::conn::http2::SendRequest<StreamBody<Frames>>,
    driver: JoinHandle<()>,
}

impl H2 {
    async fn connect(ca: &Ca, addr: SocketAddr) -> Self {
        let stream = TlsClient::with_alpn(ca, &[b"h2"])
            .connect(addr)
            .await
            .unwrap();
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        Self { send, driver }
    }

    /// Starts `POST /mutate` with `body`: the first `sent` bytes now, the rest through the
    /// returned sender. The task yields the status and the body of the answer.
    async fn start(
        &mut self,
        body: Vec<u8>,
        sent: usize,
    ) -> (
        futures::channel::mpsc::Sender<Result<Frame<Bytes>, Infallible>>,
        Bytes,
        JoinHandle<hyper::Result<(StatusCode, Bytes)>>,
    ) {
        let (mut tx, rx) = futures::channel::mpsc::channel(4);
        let rest = Bytes::from(body[sent..].to_vec());
        let first = Bytes::from(body[..sent].to_vec());
        futures::SinkExt::send(&mut tx, Ok(Frame::data(first)))
            .await
            .unwrap();
        let request = Request::post("/mutate")
            .header("content-type", "application/json")
            .header("content-length", body.len())
            .header("host", SERVICE_DNS)
            .body(StreamBody::new(rx))
            .unwrap();
        self.send.ready().await.unwrap();
        let answer = self.send.send_request(request);
        let task = tokio::spawn(async move {
            let response = answer.await?;
            let status = response.status();
            Ok((status, response.into_body().collect().await?.to_bytes()))
        });
        (tx, rest, task)
    }

    async fn post(&mut self, body: Vec<u8>) -> (StatusCode, Bytes) {
        let (tx, rest, task) = self.start(body, 0).await;
        let mut tx = tx;
        futures::SinkExt::send(&mut tx, Ok(Frame::data(rest)))
            .await
            .unwrap();
        drop(tx);
        task.await.unwrap().unwrap()
    }
}

/// An HTTP/1.1 request whose head and half of its body were sent, and nothing more.
struct Busy {
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
}

impl Busy {
    async fn start(ca: &Ca, addr: SocketAddr, uid: &str) -> Self {
        let mut stream = TlsClient::with_alpn(ca, &[b"http/1.1"])
            .connect(addr)
            .await
            .unwrap();
        let body = review_body(uid);
        let head = format!(
            "POST /mutate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&body[..body.len() / 2]).await.unwrap();
        stream.flush().await.unwrap();
        Self { stream }
    }
}

fn server_options(timeouts: Timeouts, limits: Limits) -> ServerOptions {
    ServerOptions {
        timeouts,
        limits,
        ..ServerOptions::default()
    }
}

/// An idle h2 connection is closed once nothing was in flight on it for the idle limit (the
/// header-read limit, as hyper applies it to idle HTTP/1.1 keep-alive connections, which still
/// close as before); a connection with a request in flight all that time is left alone, and that
/// request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_h2_connections_are_closed_and_in_flight_requests_never_cut() {
    let ca = Ca::root("connections root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let idle = Duration::from_millis(500);
    let timeouts = Timeouts {
        header_read: idle,
        // The request held in flight below outlives the idle limit many times over.
        request_body: Duration::from_secs(60),
        ..Timeouts::default()
    };
    let server = TestServer::start(dir.path(), server_options(timeouts, Limits::default())).await;
    let stats: LimitStats = server.stats.clone();

    // In flight first, so that it has been busy for longer than the idle connection is idle.
    let mut busy = H2::connect(&ca, server.addr).await;
    let (mut rest_tx, rest, in_flight) = busy.start(review_body("in-flight"), 100).await;
    wait_for("the request's body arriving", || stats.receiving() == 1).await;

    // One request, then idle: closed by the server.
    let mut idle_h2 = H2::connect(&ca, server.addr).await;
    let (status, body) = idle_h2.post(review_body("idle-h2")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(response_uid(&body), "idle-h2");
    // The same for HTTP/1.1, by hyper's header-read timeout, as before.
    let idle_h1_stream = TlsClient::with_alpn(&ca, &[b"http/1.1"])
        .connect(server.addr)
        .await
        .unwrap();
    let (mut idle_h1, idle_h1_conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(idle_h1_stream))
            .await
            .unwrap();
    let idle_h1_driver = tokio::spawn(async move {
        let _ = idle_h1_conn.await;
    });
    let request = Request::post("/mutate")
        .header("host", SERVICE_DNS)
        .body(http_body_util::Full::new(Bytes::from(review_body(
            "idle-h1",
        ))))
        .unwrap();
    let response = idle_h1.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body().collect().await.unwrap();

    wait_for("the server to close the idle h2 connection", || {
        idle_h2.driver.is_finished()
    })
    .await;
    wait_for("the server to close the idle HTTP/1.1 connection", || {
        idle_h1_driver.is_finished()
    })
    .await;
    // Closed by the idle rule (HTTP/1.1's by hyper, not counted here)...
    assert_eq!(stats.idle_closed(), 1);
    // ...which passed over the connection with a request in flight: still open, and the request
    // is answered once its body is complete.
    assert!(!busy.driver.is_finished(), "the busy connection was closed");
    futures::SinkExt::send(&mut rest_tx, Ok(Frame::data(rest)))
        .await
        .unwrap();
    drop(rest_tx);
    let (status, body) = in_flight.await.unwrap().unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(response_uid(&body), "in-flight");
    // Then it is idle in turn, and closed.
    wait_for("the server to close the formerly busy connection", || {
        busy.driver.is_finished()
    })
    .await;
    assert_eq!(stats.idle_closed(), 2);
    server.stop().await.unwrap();
}

/// Over the connection cap a new connection waits (before its TLS handshake) for a slot, and an
/// open connection makes room: first the one owing a request the longest (a body half sent, shut
/// without an answer), and only when none owes, the one idle the longest (closed gracefully),
/// while a kept-alive connection used since is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_connection_owing_longest_makes_room_then_the_longest_idle() {
    let ca = Ca::root("connections root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let timeouts = Timeouts {
        // What this test is about is the order; every owing connection counts as stalled at
        // once (webhook_port.rs runs the default, where only the API server's can be young).
        stalled_after: Duration::ZERO,
        // Nothing here may end by a timeout: only the cap acts.
        handshake: Duration::from_secs(60),
        first_request: Duration::from_secs(60),
        request_body: Duration::from_secs(60),
        ..Timeouts::default()
    };
    let server = TestServer::start(dir.path(), server_options(timeouts, limits)).await;
    let stats = server.stats.clone();
    let addr = server.addr;
    let client = TlsClient::with_alpn(&ca, &[b"http/1.1"]);
    let connect = || async {
        let stream = tokio::time::timeout(PATIENCE, client.connect(addr))
            .await
            .expect("a slot for the new connection")
            .expect("handshake");
        Conn::over(stream).await
    };

    // The cap is reached: a request with half its body, and a kept-alive idle connection.
    let mut stalled = Busy::start(&ca, addr, "stalled").await;
    wait_for("the stalled body arriving", || stats.receiving() == 1).await;
    let mut kept = connect().await;
    let (status, body) = kept.post("/mutate", review_body("kept-1")).await.unwrap();
    assert_eq!(
        (status, response_uid(&body).as_str()),
        (StatusCode::OK, "kept-1")
    );
    assert_eq!(stats.connections(), 2);

    // A third connection: the stalled one is shut, without an answer.
    let mut third = connect().await;
    let (status, body) = third.post("/mutate", review_body("third")).await.unwrap();
    assert_eq!(
        (status, response_uid(&body).as_str()),
        (StatusCode::OK, "third")
    );
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, stalled.stream.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the stalled connection is still open");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert_eq!((stats.stalled_closed(), stats.yielded()), (1, 0));

    // Nobody owes now. The kept-alive connection is used again; then a fourth connection
    // closes the one idle the longest, the third, gracefully.
    let (status, _) = kept.post("/mutate", review_body("kept-2")).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let mut fourth = connect().await;
    let (status, body) = fourth.post("/mutate", review_body("fourth")).await.unwrap();
    assert_eq!(
        (status, response_uid(&body).as_str()),
        (StatusCode::OK, "fourth")
    );
    assert_eq!((stats.stalled_closed(), stats.yielded()), (1, 1));
    let Conn::H1(third) = &third else {
        unreachable!("HTTP/1.1 was the only protocol offered")
    };
    wait_for("the server to close the third connection", || {
        third.is_closed()
    })
    .await;
    let (status, _) = kept.post("/mutate", review_body("kept-3")).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stats.refused_connections(), 0);
    server.stop().await.unwrap();
}

/// A request whose body has arrived is being decided: its connection is never closed to make
/// room. With every slot busy, new connections wait; when as many wait as the cap allows, the
/// next one is closed at once. Once the busy requests are answered, their connections (now idle
/// while others wait) yield their slots and the waiting connections are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_connections_are_never_closed_and_waiters_beyond_the_cap_are_closed_at_once() {
    let ca = Ca::root("connections root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    // A handler that answers only when the test lets it: requests stay busy, bodies complete.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let router = axum::Router::new().route(
        "/mutate",
        axum::routing::post({
            let gate = gate.clone();
            move |body: axum::body::Bytes| async move {
                gate.acquire().await.unwrap().forget();
                body
            }
        }),
    );
    let options = ServerOptions {
        router: Some(router),
        ..server_options(
            Timeouts {
                handshake: Duration::from_secs(60),
                ..Timeouts::default()
            },
            Limits {
                max_connections: 2,
                ..Limits::default()
            },
        )
    };
    let server = TestServer::start(dir.path(), options).await;
    let stats = server.stats.clone();
    let addr = server.addr;
    let client = TlsClient::with_alpn(&ca, &[b"http/1.1"]);
    let post = |uid: &'static str| {
        let client = client.clone();
        tokio::spawn(async move {
            let mut conn = Conn::over(client.connect(addr).await.expect("handshake")).await;
            conn.post("/mutate", review_body(uid)).await
        })
    };

    let busy = [post("busy-1"), post("busy-2")];
    wait_for("two requests being decided", || stats.in_flight() == 2).await;
    let waiting = [post("third"), post("fourth")];
    wait_for("two connections waiting", || {
        stats.waiting_connections() == 2
    })
    .await;
    let refused = TlsClient::with_alpn(&ca, &[b"http/1.1"])
        .connect(addr)
        .await;
    assert!(refused.is_err(), "a fifth connection was served");
    assert_eq!(stats.refused_connections(), 1);
    assert_eq!((stats.stalled_closed(), stats.yielded()), (0, 0));
    assert!(busy.iter().all(|b| !b.is_finished()));

    gate.add_permits(4);
    for (task, uid) in busy
        .into_iter()
        .chain(waiting)
        .zip(["busy-1", "busy-2", "third", "fourth"])
    {
        let (status, body) = tokio::time::timeout(PATIENCE, task)
            .await
            .unwrap_or_else(|_| panic!("{uid}: no answer"))
            .unwrap()
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{uid}");
        // The handler echoes the review it was sent.
        let echoed: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(echoed["request"]["uid"], uid);
    }
    assert!(stats.yielded() >= 1);
    server.stop().await.unwrap();
}
