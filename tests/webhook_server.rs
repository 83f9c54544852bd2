//! The webhook's I/O shell over real TLS on 127.0.0.1: certificate formats and chains, reload by
//! kubelet-style `..data` symlink swap under traffic, rejection of bad replacements, body limits,
//! readiness and graceful shutdown. The admission decisions themselves are tested elsewhere.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use hyper::StatusCode;
use restore_hooks::webhook::tls::{TlsDir, TlsError};
use restore_hooks::webhook::{MAX_BODY_BYTES, Timeouts, WebhookError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ERROR_RELOADS: &str = r#"restore_hooks_tls_reloads_total{result="error"}"#;
const SUCCESS_RELOADS: &str = r#"restore_hooks_tls_reloads_total{result="success"}"#;

/// Polls `done` until it holds; panics after 20 s (the workers are bounded, so a stalled
/// condition must fail the test rather than hang it).
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    restore_hooks_testkit::eventually!(what, Duration::from_secs(20), done())
}

fn review_body(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&admission_review(uid, "shop", plain_pod("web-"))).unwrap()
}

#[tokio::test]
async fn serves_mutate_over_tls_checking_the_san() {
    let ca = Ca::root("test root");
    let leaf = ca.leaf(KeyKind::EcdsaPkcs8);
    let dir = SecretDir::with_leaf(&leaf);
    let server = TestServer::start(dir.path(), ServerOptions::default()).await;
    let client = TlsClient::trusting(&ca);

    // HTTP/1.1 only, then h2 via ALPN: both reach the handler and get the uid back.
    for alpn in [&[&b"http/1.1"[..]][..], &[&b"h2"[..]][..]] {
        let client = TlsClient::with_alpn(&ca, alpn);
        let stream = client.connect(server.addr).await.unwrap();
        assert_eq!(negotiated_alpn(&stream).as_deref(), Some(alpn[0]));
        assert_eq!(peer_leaf(&stream), leaf.der);
        let mut conn = Conn::over(stream).await;
        // The API server appends ?timeout=10s to the configured path.
        let (status, body) = conn
            .post("/mutate?timeout=10s", review_body("uid-1"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        assert_eq!(response_uid(&body), "uid-1");
        let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(review["response"]["allowed"], true);
    }

    // The certificate does not name this host: the client refuses it.
    let err = client
        .connect_as(server.addr, "other.example.com")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");

    let metrics = server.metrics_text().await;
    assert_eq!(
        metric(
            &metrics,
            r#"restore_hooks_admission_requests_total{outcome="unchanged"}"#
        ),
        2.0,
        "{metrics}"
    );
    assert!(
        metrics.contains("restore_hooks_admission_duration_seconds_count 2"),
        "{metrics}"
    );
    server.stop().await.unwrap();
}

/// docs/behaviour.md §9.9 over real TLS: when the API server says the pod's creator may not
/// create pods/exec, its annotation exec hook is planned refused, the response warns, and the
/// refusal is counted; the same pod by a creator that may exec gets its hook.
#[tokio::test]
async fn an_annotation_exec_hook_of_a_creator_without_exec_rights_is_refused() {
    use base64::Engine as _;
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "labels": {"velero.io/restore-name": "r1"},
                     "annotations": {"post.hook.restore.velero.io/command": "[\"/bin/migrate\"]"}},
        "spec": {"containers": [{"name": "db", "image": "postgres:17"}]}
    });
    for (right, want_refused) in [
        (restore_hooks::admission::ExecRight::Denied, true),
        (restore_hooks::admission::ExecRight::Granted, false),
    ] {
        let server = TestServer::start(
            dir.path(),
            ServerOptions {
                exec_right: right,
                // `own`: the pod carries Velero's label, and the hook is restore-hooks' to run.
                engine: restore_hooks::config::EngineConfig {
                    velero_hooks: restore_hooks::config::VeleroHooksMode::Own,
                    ..Default::default()
                },
                ..ServerOptions::default()
            },
        )
        .await;
        let mut review = admission_review("uid-r", "shop", pod.clone());
        review["request"]["userInfo"] = serde_json::json!({"username": "mallory"});
        let mut conn =
            Conn::over(TlsClient::trusting(&ca).connect(server.addr).await.unwrap()).await;
        let (status, body) = conn
            .post("/mutate", serde_json::to_vec(&review).unwrap())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let patch = base64::engine::general_purpose::STANDARD
            .decode(answer["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch.0).unwrap();
        let plan: serde_json::Value = serde_json::from_str(
            patched["metadata"]["annotations"]["restore-hooks.dev/plan"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let hook = &plan["hooks"][0];
        let warnings = answer["response"]["warnings"].to_string();
        let counted = metric(
            &server.metrics_text().await,
            r#"restore_hooks_annotation_hooks_refused_total{reason="creator_may_not_exec"}"#,
        );
        if want_refused {
            assert!(
                hook["refused"]
                    .as_str()
                    .is_some_and(|r| r.contains("created by mallory, who may not create pods/exec")),
                "{hook}"
            );
            assert!(
                warnings.contains("annotation exec hook refused"),
                "{warnings}"
            );
            assert_eq!(counted, 1.0);
        } else {
            assert_eq!(hook["allowedBy"], "creator", "{hook}");
            assert!(hook["refused"].is_null(), "{hook}");
            assert_eq!(counted, 0.0);
        }
        assert_eq!(plan["id"].as_str().map(str::len), Some(16), "{plan}");
        server.stop().await.unwrap();
    }
}

#[tokio::test]
async fn noop_router_echoes_the_uid_on_the_same_stack() {
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let options = ServerOptions {
        noop: true,
        ..ServerOptions::default()
    };
    let server = TestServer::start(dir.path(), options).await;
    let mut conn = Conn::over(TlsClient::trusting(&ca).connect(server.addr).await.unwrap()).await;
    for i in 0..3 {
        let uid = format!("noop-{i}");
        let (status, body) = conn.post("/mutate", review_body(&uid)).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response_uid(&body), uid);
        let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["response"]["allowed"], true);
        assert!(review["response"].get("patch").is_none());
    }
    let (status, _) = conn.post("/mutate", "{").await.unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn every_key_encoding_loads() {
    let ca = Ca::root("test root");
    let client = TlsClient::trusting(&ca);
    for kind in [
        KeyKind::EcdsaPkcs8,
        KeyKind::EcdsaSec1,
        KeyKind::RsaPkcs8,
        KeyKind::RsaPkcs1,
    ] {
        let leaf = ca.leaf(kind);
        let label = match kind {
            KeyKind::EcdsaPkcs8 | KeyKind::RsaPkcs8 => "-----BEGIN PRIVATE KEY-----",
            KeyKind::EcdsaSec1 => "-----BEGIN EC PRIVATE KEY-----",
            KeyKind::RsaPkcs1 => "-----BEGIN RSA PRIVATE KEY-----",
        };
        assert!(
            leaf.key_pem.starts_with(label),
            "{kind:?}: {}",
            leaf.key_pem
        );
        let dir = SecretDir::with_leaf(&leaf);
        let server = TestServer::start(dir.path(), ServerOptions::default()).await;
        let stream = client.connect(server.addr).await.unwrap();
        assert_eq!(peer_leaf(&stream), leaf.der, "{kind:?}");
        let mut conn = Conn::over(stream).await;
        let (status, _) = conn.post("/mutate", review_body("k")).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{kind:?}");
        server.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_chain_with_an_intermediate_is_served_whole() {
    let root = Ca::root("test root");
    let intermediate = root.intermediate("test intermediate");
    let leaf = intermediate.leaf(KeyKind::EcdsaSec1);
    let dir = SecretDir::with_leaf(&leaf);
    let server = TestServer::start(dir.path(), ServerOptions::default()).await;
    // The client trusts only the root: the handshake works only if the intermediate is sent.
    let stream = TlsClient::trusting(&root)
        .connect(server.addr)
        .await
        .unwrap();
    let chain = peer_chain(&stream);
    assert_eq!(chain.len(), 2);
    assert_eq!(chain[0], leaf.der);
    assert_eq!(chain[1], intermediate.cert_der().to_vec());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn startup_fails_naming_the_file_and_stays_unready() {
    setup();
    let empty = tempfile::tempdir().unwrap();
    let readiness = restore_hooks::admin::Readiness::new();
    let err = restore_hooks::webhook::Bound::bind(
        &webhook_args(empty.path(), &ServerOptions::default()),
        restore_hooks::webhook::WebhookSources {
            index: restore_hooks::catalog::SharedIndex::new(Default::default()),
            keys: restore_hooks::plan_key::KeyRing::fixed(test_plan_keys()),
            namespaces: None,
            exec_rights: std::sync::Arc::new(
                restore_hooks::webhook::exec_rights::ExecRights::unavailable(),
            ),
        },
        Default::default(),
        restore_hooks::metrics::Metrics::new(),
        readiness.clone(),
    )
    .err()
    .expect("no certificate: bind fails");
    let message = err.to_string();
    assert!(
        matches!(err, WebhookError::Tls(TlsError::Read { .. })),
        "{message}"
    );
    assert!(
        message.contains("tls.crt") && message.contains("--tls-dir"),
        "{message}"
    );
    assert!(readiness.check().is_err());

    // Each kind of bad content is named precisely.
    let ca = Ca::root("test root");
    let leaf = ca.leaf(KeyKind::EcdsaPkcs8);
    let other = ca.leaf(KeyKind::EcdsaPkcs8);
    let cases: [(&str, &str, &str); 3] = [
        ("", &leaf.key_pem, "no `CERTIFICATE`"),
        (&leaf.chain_pem, "not a key\n", "no private key"),
        (&leaf.chain_pem, &other.key_pem, "cannot be used with"),
    ];
    for (cert, key, expected) in cases {
        let dir = SecretDir::new(cert, key);
        let err = TlsDir::new(dir.path()).load().err().expect("invalid pair");
        let message = err.to_string();
        assert!(message.contains(expected), "{message}");
        assert!(message.contains(dir.path().to_str().unwrap()), "{message}");
    }
}

/// The kubelet swaps `..data` while requests keep flowing on kept-alive and new connections:
/// no handshake or request fails, kept-alive connections carry on, and new connections get the
/// new certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_symlink_swap_under_traffic() {
    let ca = Ca::root("test root");
    let old = ca.leaf(KeyKind::EcdsaPkcs8);
    let new = ca.leaf(KeyKind::RsaPkcs1);
    let mut dir = SecretDir::with_leaf(&old);
    let server = TestServer::start(dir.path(), ServerOptions::default()).await;
    let client = TlsClient::trusting(&ca);
    let addr = server.addr;

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    // Two kept-alive connections (h1 and h2), each issuing requests back to back.
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let client = TlsClient::with_alpn(&ca, &[alpn]);
        let (stop, ok) = (stop.clone(), ok.clone());
        workers.push(tokio::spawn(async move {
            let stream = client.connect(addr).await.expect("handshake");
            let mut conn = Conn::over(stream).await;
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) && n < 5_000 {
                let (status, _) = conn
                    .post("/mutate", review_body("keep"))
                    .await
                    .expect("request on a kept-alive connection");
                assert_eq!(status, StatusCode::OK);
                ok.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            Vec::new()
        }));
    }
    // One task opening a new connection per request, recording which leaf it saw.
    let fresh = Arc::new(AtomicUsize::new(0));
    {
        let client = client.clone();
        let (stop, ok, fresh) = (stop.clone(), ok.clone(), fresh.clone());
        workers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) && n < 2_000 {
                let stream = client.connect(addr).await.expect("handshake");
                seen.push(peer_leaf(&stream));
                let mut conn = Conn::over(stream).await;
                let (status, _) = conn
                    .post("/mutate", review_body("new"))
                    .await
                    .expect("request on a new connection");
                assert_eq!(status, StatusCode::OK);
                ok.fetch_add(1, Ordering::Relaxed);
                fresh.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            seen
        }));
    }

    // Let traffic flow on the old certificate (on both kinds of connection), then swap.
    let count = |c: &Arc<AtomicUsize>| c.load(Ordering::Relaxed);
    wait_until("traffic before the swap", || {
        count(&ok) >= 50 && count(&fresh) >= 5
    })
    .await;
    dir.rotate_to(&new);
    server
        .wait_metric(SUCCESS_RELOADS, 1.0, Duration::from_secs(10))
        .await;
    // Keep traffic going across and after the swap.
    let (ok_after, fresh_after) = (count(&ok), count(&fresh));
    wait_until("traffic after the swap", || {
        count(&ok) >= ok_after + 50 && count(&fresh) >= fresh_after + 5
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut seen = Vec::new();
    for worker in workers {
        seen.extend(worker.await.expect("no failed handshake or request"));
    }

    assert!(
        seen.contains(&old.der),
        "new connections saw the old certificate first"
    );
    assert_eq!(
        seen.last(),
        Some(&new.der),
        "the last new connection saw the new certificate"
    );
    let fresh = client.connect(addr).await.unwrap();
    assert_eq!(peer_leaf(&fresh), new.der);

    let metrics = server.metrics_text().await;
    assert_eq!(metric(&metrics, SUCCESS_RELOADS), 1.0, "{metrics}");
    assert_eq!(metric(&metrics, ERROR_RELOADS), 0.0, "{metrics}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_bad_replacement_keeps_the_old_certificate() {
    let ca = Ca::root("test root");
    let good = ca.leaf(KeyKind::EcdsaPkcs8);
    let mut dir = SecretDir::with_leaf(&good);
    let server = TestServer::start(dir.path(), ServerOptions::default()).await;
    let client = TlsClient::trusting(&ca);

    // A garbage key, then a valid key that belongs to another certificate.
    let next = ca.leaf(KeyKind::EcdsaPkcs8);
    let unrelated = ca.leaf(KeyKind::EcdsaPkcs8);
    let garbage = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n";
    for (i, key) in [garbage, unrelated.key_pem.as_str()]
        .into_iter()
        .enumerate()
    {
        dir.rotate(&next.chain_pem, key);
        server
            .wait_metric(ERROR_RELOADS, (i + 1) as f64, Duration::from_secs(10))
            .await;
        let stream = client.connect(server.addr).await.unwrap();
        assert_eq!(
            peer_leaf(&stream),
            good.der,
            "the old certificate is still served"
        );
        let mut conn = Conn::over(stream).await;
        assert_eq!(
            conn.post("/mutate", review_body("x")).await.unwrap().0,
            StatusCode::OK
        );
    }
    // Ready all along: the old certificate is valid.
    assert_eq!(
        http_get(server.admin_addr, "/readyz").await.0,
        StatusCode::OK
    );

    // A bad pair is reported once, not at every poll: the webhook polls it twice more (seen
    // as its reads of tls.key), and nothing more is reported.
    let (cert, key) = (next.chain_pem.clone(), unrelated.key_pem.clone());
    let observed = tokio::task::spawn_blocking(move || {
        dir.observe_key_reads(&cert, &key, 3);
        dir
    });
    let mut dir = tokio::time::timeout(Duration::from_secs(20), observed)
        .await
        .expect("the webhook read tls.key three more times")
        .unwrap();
    assert_eq!(metric(&server.metrics_text().await, ERROR_RELOADS), 2.0);

    // A good pair afterwards is picked up.
    dir.rotate_to(&next);
    server
        .wait_metric(SUCCESS_RELOADS, 1.0, Duration::from_secs(10))
        .await;
    let stream = client.connect(server.addr).await.unwrap();
    assert_eq!(peer_leaf(&stream), next.der);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn oversized_and_malformed_bodies_are_rejected() {
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let server = TestServer::start(dir.path(), ServerOptions::default()).await;
    let client = TlsClient::with_alpn(&ca, &[b"h2"]);

    // Over HTTP/1.1 (what the API server uses) the connection is then closed, as the rest of
    // the body is not read.
    let h1 = TlsClient::with_alpn(&ca, &[b"http/1.1"]);
    let mut conn = Conn::over(h1.connect(server.addr).await.unwrap()).await;
    let (status, body) = conn
        .post("/mutate", vec![b' '; MAX_BODY_BYTES + 1])
        .await
        .unwrap();
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        String::from_utf8_lossy(&body).contains("exceeds"),
        "{body:?}"
    );

    let mut conn = Conn::over(client.connect(server.addr).await.unwrap()).await;
    let (status, body) = conn
        .post("/mutate", vec![b' '; MAX_BODY_BYTES + 1])
        .await
        .unwrap();
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        String::from_utf8_lossy(&body).contains("exceeds"),
        "{body:?}"
    );

    // At the limit is fine as far as size goes (the content is then judged: not JSON).
    let (status, _) = conn
        .post("/mutate", vec![b' '; MAX_BODY_BYTES])
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);

    for bad in [
        &b"not json"[..],
        br#"{"apiVersion":"v1","kind":"Pod"}"#,
        b"",
    ] {
        let (status, body) = conn.post("/mutate", bad.to_vec()).await.unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(!error["message"].as_str().unwrap().is_empty(), "{error}");
    }

    let metrics = server.metrics_text().await;
    assert_eq!(
        metric(
            &metrics,
            r#"restore_hooks_admission_requests_total{outcome="too_large"}"#
        ),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            r#"restore_hooks_admission_requests_total{outcome="bad_request"}"#
        ),
        4.0,
        "{metrics}"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn readyz_turns_503_on_shutdown_while_still_serving_during_the_delay() {
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let options = ServerOptions {
        // Long enough for the requests below on a slow machine; the test waits it out once.
        shutdown_delay: Duration::from_secs(2),
        ..ServerOptions::default()
    };
    let server = TestServer::start(dir.path(), options).await;
    let client = TlsClient::trusting(&ca);
    assert_eq!(
        http_get(server.admin_addr, "/livez").await.0,
        StatusCode::OK
    );
    assert_eq!(
        http_get(server.admin_addr, "/readyz").await,
        (StatusCode::OK, "ok\n".into())
    );

    server.shutdown.cancel();
    let admin = server.admin_addr;
    wait_until_async("/readyz to report the shutdown", || async move {
        http_get(admin, "/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let (status, body) = http_get(server.admin_addr, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("shutting down"), "{body}");
    assert_eq!(
        http_get(server.admin_addr, "/livez").await.0,
        StatusCode::OK
    );

    // During --shutdown-delay new connections are still served...
    let mut conn = Conn::over(client.connect(server.addr).await.unwrap()).await;
    let (status, _) = conn.post("/mutate", review_body("late")).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    // ...but each is closed after its response, so the API server reconnects elsewhere.
    assert!(conn.post("/mutate", review_body("later")).await.is_err());

    let admin_addr = server.admin_addr;
    let addr = server.addr;
    let metrics = server.metrics.clone();
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("stops after the delay")
        .unwrap()
        .unwrap();
    assert!(client.connect(addr).await.is_err(), "listener closed");
    assert_eq!(
        metrics
            .admission_requests
            .with_label_values(&["unchanged"])
            .get(),
        1
    );
    let _ = admin_addr;
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests_and_closes_idle_ones() {
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let options = ServerOptions {
        noop: true,
        shutdown_grace: Duration::from_secs(10),
        ..ServerOptions::default()
    };
    let server = TestServer::start(dir.path(), options).await;
    let h1 = TlsClient::with_alpn(&ca, &[b"http/1.1"]);

    // An idle kept-alive connection: it must be closed promptly, not held for the grace period.
    let mut idle = Conn::over(h1.connect(server.addr).await.unwrap()).await;
    assert_eq!(
        idle.post("/mutate", review_body("idle")).await.unwrap().0,
        StatusCode::OK
    );

    // An in-flight request: headers and half the body sent before shutdown starts.
    let body = review_body("in-flight");
    let mut stream = h1.connect(server.addr).await.unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    stream.write_all(first).await.unwrap();
    stream.flush().await.unwrap();
    // The server has it: its body is arriving.
    wait_until("the request in flight", || server.stats.receiving() == 1).await;

    let started = tokio::time::Instant::now();
    server.shutdown.cancel();
    // New connections are refused once draining started...
    let addr = server.addr;
    let h1_probe = &h1;
    wait_until_async("the listener to close", || async move {
        h1_probe.connect(addr).await.is_err()
    })
    .await;
    // ...and the server is still there for the in-flight request.
    assert!(
        !server.task.is_finished(),
        "waits for the in-flight request"
    );
    // The idle connection was closed by the server.
    assert!(idle.post("/mutate", review_body("after")).await.is_err());

    stream.write_all(rest).await.unwrap();
    stream.flush().await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .expect("the server answers and closes")
        .ok();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"uid\":\"in-flight\""), "{response}");

    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("stops once the in-flight request is done")
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "did not wait for the grace period"
    );
}

#[tokio::test]
async fn clients_that_never_finish_a_request_are_cut_off() {
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let short = Duration::from_millis(300);
    let options = ServerOptions {
        timeouts: Timeouts {
            handshake: short,
            first_request: short,
            header_read: short,
            request_body: short,
            ..Timeouts::default()
        },
        ..ServerOptions::default()
    };
    let server = TestServer::start(dir.path(), options).await;

    // TCP connected, no TLS ClientHello.
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("handshake timeout closes the connection");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");

    // TLS done, then only part of the request headers.
    let mut stream = TlsClient::with_alpn(&ca, &[b"http/1.1"])
        .connect(server.addr)
        .await
        .unwrap();
    stream
        .write_all(b"POST /mutate HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    stream.flush().await.unwrap();
    let mut response = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .expect("a request that never completes is cut off");
    // Either closed outright or answered with a timeout status before closing.
    let text = String::from_utf8_lossy(&response);
    assert!(
        read.is_err() || response.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );

    // The server still works for well-behaved clients.
    let mut conn = Conn::over(TlsClient::trusting(&ca).connect(server.addr).await.unwrap()).await;
    assert_eq!(
        conn.post("/mutate", review_body("ok")).await.unwrap().0,
        StatusCode::OK
    );
    server.stop().await.unwrap();
}

/// A port that was free a moment ago (the binary binds it itself).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn binary() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_restore-hooks"));
    // Only the flags given here: no RESTORE_HOOKS_* from the environment running the tests.
    for (key, _) in std::env::vars() {
        if key.starts_with("RESTORE_HOOKS_") {
            command.env_remove(key);
        }
    }
    command.env_remove("KUBECONFIG");
    command
}

/// The whole process: `webhook --no-cluster` serves, reports ready, and exits 0 on SIGTERM after
/// draining.
#[tokio::test]
async fn the_binary_serves_and_exits_cleanly_on_sigterm() {
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaSec1));
    let (port, admin_port) = (free_port(), free_port());
    // Without a plan key the webhook never reports ready (plans would be unsigned).
    let key = tempfile::tempdir().unwrap();
    let mut child = binary()
        .args(["webhook", "--no-cluster", "--log-format", "text"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
        .arg("--tls-dir")
        .arg(dir.path())
        .arg("--plan-key-file")
        .arg(write_plan_key(key.path()))
        .args(["--shutdown-delay", "200ms", "--shutdown-grace", "2s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let admin: std::net::SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    wait_process_ready(admin, Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    })
    .await;
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut conn = Conn::over(TlsClient::trusting(&ca).connect(addr).await.unwrap()).await;
    let (status, body) = conn
        .post("/mutate?timeout=10s", review_body("bin"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(response_uid(&body), "bin");
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(
        metric(
            &metrics,
            r#"restore_hooks_admission_requests_total{outcome="unchanged"}"#
        ),
        1.0
    );

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}\n{log}", output.status);
    assert!(log.contains("clean shutdown"), "{log}");
}

#[test]
fn the_binary_names_the_problem_when_it_cannot_start() {
    let empty = tempfile::tempdir().unwrap();
    let output = binary()
        .args(["webhook", "--no-cluster", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0", "--tls-dir"])
        .arg(empty.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tls.crt") && stderr.contains("--tls-dir"),
        "{stderr}"
    );

    // The webhook port is taken: the error names the flag.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let output = binary()
        .args(["webhook", "--no-cluster", "--admin-listen", "127.0.0.1:0"])
        .args([
            "--listen",
            &taken.local_addr().unwrap().to_string(),
            "--tls-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen on --listen"), "{stderr}");

    // No cluster configuration (no KUBECONFIG, no ~/.kube/config, not in a pod).
    let home = tempfile::tempdir().unwrap();
    let output = binary()
        .env("HOME", home.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(["webhook", "--admin-listen", "127.0.0.1:0", "--tls-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("KUBECONFIG") && stderr.contains("--no-cluster"),
        "{stderr}"
    );

    for command in ["controller", "serve"] {
        let output = binary()
            .args([command, "--no-cluster", "--admin-listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("--no-cluster only works with the `webhook` command"),
            "{stderr}"
        );
    }
}

/// Not a test: prints requests per second of the real handler (a restored pod that gets an
/// init container) against the no-op floor, on the same TLS stack and loopback, so that the
/// handler's share of the cost is visible. Run with
/// `cargo test --test webhook_server -- --ignored --nocapture measure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, not a test"]
async fn measure_handler_against_the_noop_floor() {
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let mut catalog = restore_hooks::catalog::StaticCatalog::default();
    catalog.namespaces.insert(
        "shop".into(),
        [(
            "restore-hooks.dev/restore".to_string(),
            "nightly-1".to_string(),
        )]
        .into(),
    );
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "db-", "labels": {"app": "db"},
                     "annotations": {
                        "init.hook.restore.velero.io/container-image": "busybox:1.36",
                        "init.hook.restore.velero.io/command": "[\"/bin/sh\",\"-c\",\"echo restore\"]"}},
        "spec": {"containers": [{"name": "db", "image": "postgres:17",
                                 "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql"}]}],
                 "volumes": [{"name": "data", "emptyDir": {}}]}
    });
    let body = serde_json::to_vec(&admission_review("m", "shop", pod)).unwrap();
    let connections = 16;
    let window = Duration::from_secs(3);
    for noop in [true, false] {
        let options = ServerOptions {
            noop,
            catalog: catalog.clone(),
            ..ServerOptions::default()
        };
        let server = TestServer::start(dir.path(), options).await;
        let client = TlsClient::with_alpn(&ca, &[b"http/1.1"]);
        let done = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let (client, done, stop, body) =
                (client.clone(), done.clone(), stop.clone(), body.clone());
            let addr = server.addr;
            tasks.push(tokio::spawn(async move {
                let mut conn = Conn::over(client.connect(addr).await.unwrap()).await;
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let start = std::time::Instant::now();
                    let (status, _) = conn.post("/mutate", body.clone()).await.unwrap();
                    assert_eq!(status, StatusCode::OK);
                    latencies.push(start.elapsed());
                    done.fetch_add(1, Ordering::Relaxed);
                }
                latencies
            }));
        }
        tokio::time::sleep(window).await;
        stop.store(true, Ordering::Relaxed);
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.unwrap());
        }
        latencies.sort();
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        let metrics = server.metrics_text().await;
        println!(
            "{}: {:.0} req/s over {connections} kept-alive h1 connections, p50 {:?}, p99 {:?}, \
             patched={} (body {} bytes), mean in-handler decision {:.1} µs",
            if noop { "noop floor" } else { "handler" },
            done.load(Ordering::Relaxed) as f64 / window.as_secs_f64(),
            pct(0.50),
            pct(0.99),
            metric(
                &metrics,
                r#"restore_hooks_admission_requests_total{outcome="patched"}"#
            ),
            body.len(),
            1e6 * metric(&metrics, "restore_hooks_admission_duration_seconds_sum")
                / metric(&metrics, "restore_hooks_admission_duration_seconds_count").max(1.0),
        );
        server.stop().await.unwrap();
    }
}

/// A second SIGTERM during the drain exits at once (code 130), without waiting for
/// `--shutdown-delay`.
#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let ca = Ca::root("test root");
    let dir = SecretDir::with_leaf(&ca.leaf(KeyKind::EcdsaPkcs8));
    let admin_port = free_port();
    let key = tempfile::tempdir().unwrap();
    let mut child = binary()
        .args(["webhook", "--no-cluster", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
        .arg("--tls-dir")
        .arg(dir.path())
        .arg("--plan-key-file")
        .arg(write_plan_key(key.path()))
        .args(["--shutdown-delay", "60s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let admin: std::net::SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    wait_until_async("ready", || async {
        tokio::net::TcpStream::connect(admin).await.is_ok()
            && http_get(admin, "/readyz").await.0 == StatusCode::OK
    })
    .await;
    let term = || {
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
    };
    assert!(term().success());
    wait_until_async("draining", || async {
        http_get(admin, "/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    assert!(term().success());
    let started = std::time::Instant::now();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(started.elapsed() < Duration::from_secs(10));
}

async fn wait_until_async<F: std::future::Future<Output = bool>>(
    what: &str,
    mut done: impl FnMut() -> F,
) {
    restore_hooks_testkit::eventually!(what, Duration::from_secs(20), done().await)
}
