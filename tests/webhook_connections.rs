//! Connection limits of the webhook server over real TLS on 127.0.0.1: idle HTTP/2 connections
//! are closed after the idle limit (as hyper closes idle HTTP/1.1 keep-alive connections), a
//! request in flight is never cut, and connections over the cap wait for a slot, get one when
//! another connection goes idle or closes, and are closed once as many again are waiting.
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

/// An HTTP/1.1 request whose head and half of its body were sent: in flight until
/// [`Busy::finish`] sends the rest.
struct Busy {
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    rest: Vec<u8>,
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
        let (first, rest) = body.split_at(body.len() / 2);
        stream.write_all(first).await.unwrap();
        stream.flush().await.unwrap();
        Self {
            stream,
            rest: rest.to_vec(),
        }
    }

    /// Sends the rest of the body; returns the head and body of the answer (the connection stays
    /// open, kept alive).
    async fn finish(&mut self) -> String {
        self.stream.write_all(&self.rest).await.unwrap();
        self.stream.flush().await.unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !answer.ends_with(b"}") {
            let n = tokio::time::timeout(PATIENCE, self.stream.read(&mut buf))
                .await
                .expect("an answer")
                .unwrap();
            assert!(n > 0, "closed before the answer");
            answer.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&answer).into_owned()
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
    wait_for("the request in flight", || stats.in_flight() == 1).await;

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

/// Over the connection cap a new connection waits (before its TLS handshake) instead of being
/// refused; a connection that goes idle while one waits yields its slot; when as many
/// connections wait as the cap allows, the next one is closed at once. Served again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_wait_for_a_slot() {
    let ca = Ca::root("connections root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let timeouts = Timeouts {
        // How long a connection may wait for a slot: far longer than this test needs.
        handshake: Duration::from_secs(60),
        first_request: Duration::from_secs(60),
        request_body: Duration::from_secs(60),
        ..Timeouts::default()
    };
    let server = TestServer::start(dir.path(), server_options(timeouts, limits)).await;
    let stats = server.stats.clone();
    let addr = server.addr;

    // Two connections, each with a request in flight: the cap is reached.
    let mut first = Busy::start(&ca, addr, "busy-1").await;
    let mut second = Busy::start(&ca, addr, "busy-2").await;
    wait_for("two requests in flight", || stats.in_flight() == 2).await;
    assert_eq!(stats.connections(), 2);

    // The third waits for a slot: the server holds it before the TLS handshake.
    let client = TlsClient::with_alpn(&ca, &[b"http/1.1"]);
    let third = tokio::spawn({
        let client = client.clone();
        async move {
            let mut conn = Conn::over(client.connect(addr).await.expect("handshake")).await;
            conn.post("/mutate", review_body("third")).await
        }
    });
    wait_for("the third connection to wait", || {
        stats.waiting_connections() == 1
    })
    .await;
    assert!(!third.is_finished());

    // As many wait as the cap allows (two): the next one is closed at once.
    let fourth = tokio::spawn({
        let client = client.clone();
        async move { client.connect(addr).await }
    });
    wait_for("the fourth connection to wait", || {
        stats.waiting_connections() == 2
    })
    .await;
    let refused = TlsClient::with_alpn(&ca, &[b"http/1.1"])
        .connect(addr)
        .await;
    assert!(refused.is_err(), "a fifth connection was served");
    assert_eq!(stats.refused_connections(), 1);

    // The first request is answered; its connection, now idle while others wait, yields its
    // slot (closed gracefully after the answer), and a waiting connection is served.
    let answer = first.finish().await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"uid\":\"busy-1\""), "{answer}");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, first.stream.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the idle connection did not yield its slot");
    // Fewer than two wait: exactly one, usually, but the third (first in line) may already
    // have been served and yielded its slot to the fourth when this looks.
    wait_for("a waiting connection to get the slot", || {
        stats.waiting_connections() < 2
    })
    .await;
    assert!(stats.yielded() >= 1);

    // The second request, in flight all along, is answered too; its slot goes to the other one.
    let answer = second.finish().await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (status, body) = tokio::time::timeout(PATIENCE, third)
        .await
        .expect("the third connection is served")
        .unwrap()
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(response_uid(&body), "third");
    let fourth = tokio::time::timeout(PATIENCE, fourth)
        .await
        .expect("the fourth connection is served")
        .unwrap()
        .expect("handshake of the fourth connection");
    let mut conn = Conn::over(fourth).await;
    let (status, body) = conn.post("/mutate", review_body("fourth")).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(response_uid(&body), "fourth");
    server.stop().await.unwrap();
}
