//! The webhook's port on a real kube-apiserver (e2e/realcp), run as the chart runs it: while 32
//! clients keep stalled requests open on it (3 MiB bodies declared, nothing sent, started over
//! whenever cut off) and others send reviews with forged identities, restored pods created
//! through the API server (`failurePolicy: Fail`) are admitted and mutated; the webhook sends
//! the API server no more SubjectAccessReviews than its pace allows, and the answer it had for
//! the pods' real creator serves them without asking again (docs/security.md, "The webhook's
//! port").

mod real;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use real::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use serde_json::{Value, json};

const NS: &str = "port";

type Tls = StreamOwned<ClientConnection, TcpStream>;

/// A blocking HTTP/1.1-over-TLS client of the webhook port, trusting the install's CA.
#[derive(Clone)]
struct Client {
    config: Arc<ClientConfig>,
    port: u16,
}

impl Client {
    fn new(install: &Install) -> Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(install.certs.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let mut config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Client {
            config: Arc::new(config),
            port: install.webhook_port,
        }
    }

    fn connect(&self) -> std::io::Result<Tls> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port))?;
        tcp.set_read_timeout(Some(Duration::from_secs(60)))?;
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let connection =
            ClientConnection::new(self.config.clone(), name).map_err(std::io::Error::other)?;
        Ok(StreamOwned::new(connection, tcp))
    }
}

fn head(length: usize) -> String {
    format!(
        "POST /mutate/namespace-label HTTP/1.1\r\nhost: {RELEASE}.{NAMESPACE}.svc\r\n\
         content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// One request on a kept-alive connection: the status and the body of the answer.
fn post(tls: &mut Tls, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    tls.write_all(head(body.len()).as_bytes())?;
    tls.write_all(body)?;
    tls.flush()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let status: u16 = text[9..12].parse().unwrap();
            let length: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while got.len() < end + 4 + length {
                let n = tls.read(&mut buf)?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                got.extend_from_slice(&buf[..n]);
            }
            return Ok((status, got[end + 4..end + 4 + length].to_vec()));
        }
        let n = tls.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
    }
}

/// A restored pod (its namespace carries the restore-namespace label: not Velero's, so its
/// annotation hook is restore-hooks' to run under the chart's `--velero-hooks defer`) with a
/// Velero annotation exec hook (a harmless command: kwok runs it on this host).
fn restored_pod(name: &str) -> Value {
    pod(
        NS,
        name,
        &["app"],
        json!({}),
        json!({"post.hook.restore.velero.io/command": "[\"true\"]"}),
    )
}

/// The review the API server would send for [`restored_pod`] `name` created by `user`.
fn forged_review(name: &str, user: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": name,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": restored_pod(name),
            "oldObject": null,
            "dryRun": false,
        }
    }))
    .unwrap()
}

fn webhook_metric(serve: &Replica, sample: &str) -> f64 {
    metric(&serve.webhook().metrics(), sample)
}

fn reviews_sent(serve: &Replica) -> f64 {
    ["allowed", "denied", "error"]
        .iter()
        .map(|r| {
            webhook_metric(
                serve,
                &format!(r#"restore_hooks_subject_access_reviews_total{{result="{r}"}}"#),
            )
        })
        .sum()
}

/// The restored pod `name` created through the API server: admitted with the RestoreHook's
/// init container and a plan whose annotation hook its creator (the admin) allows.
fn create_restored(cp: &ControlPlane, name: &str) -> Value {
    let created = create(cp, &restored_pod(name));
    let inits: Vec<&str> = created["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(inits, ["rh-init"], "{name}: {created}");
    plan(&created).unwrap()["hooks"][0].clone()
}

#[test]
fn stalled_and_forging_clients_cost_the_api_server_no_restored_pod() {
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    namespace(cp, NS, json!({NAMESPACE_LABEL: "r-port"}));
    scenarios::apply_hooks(
        cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "init", "namespace": NS},
            "spec": {"postHooks": [{"init": {"initContainers": [
                {"name": "rh-init", "image": "busybox:1.36", "command": ["true"]}]}}]},
        })],
    );

    // The creator's right is asked once, before anything else happens.
    let first = Instant::now();
    let hook = create_restored(cp, "before");
    assert_eq!(hook["allowedBy"], "creator", "{hook}");
    let allowed = r#"restore_hooks_subject_access_reviews_total{result="allowed"}"#;
    let denied = r#"restore_hooks_subject_access_reviews_total{result="denied"}"#;
    assert_eq!(webhook_metric(&serve, allowed), 1.0);
    let (sent_before, denied_before) = (reviews_sent(&serve), webhook_metric(&serve, denied));

    // 32 clients declare 3 MiB bodies and send nothing; each starts over when cut off (the
    // body deadline is 10 s).
    let client = Client::new(&install);
    let stop = Arc::new(AtomicBool::new(false));
    let stalled = Arc::new(AtomicUsize::new(0));
    let stallers: Vec<_> = (0..32)
        .map(|_| {
            let (client, stop, stalled) = (client.clone(), stop.clone(), stalled.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut tls) = client.connect() else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    if tls.write_all(head(3 << 20).as_bytes()).is_err() || tls.flush().is_err() {
                        continue;
                    }
                    stalled.fetch_add(1, Ordering::Relaxed);
                    tls.sock
                        .set_read_timeout(Some(Duration::from_millis(500)))
                        .unwrap();
                    let mut buf = [0u8; 512];
                    // Until the server answers or closes (or the test ends).
                    loop {
                        match tls.read(&mut buf) {
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut =>
                            {
                                if stop.load(Ordering::Relaxed) {
                                    return;
                                }
                            }
                            _ => break,
                        }
                    }
                }
            })
        })
        .collect();
    wait_until("32 stalled requests", Duration::from_secs(60), || {
        let n = stalled.load(Ordering::Relaxed);
        if n >= 32 { Ok(()) } else { Err(format!("{n}")) }
    });

    // Reviews with forged identities, over 32 kept-alive connections (more than the pace serves
    // within its 500 ms wait: some are refused unasked), while restored pods are created
    // through the API server.
    const FORGED: usize = 600;
    let next = Arc::new(AtomicUsize::new(0));
    let flood_started = Instant::now();
    let forgers: Vec<_> = (0..32)
        .map(|_| {
            let (client, next) = (client.clone(), next.clone());
            std::thread::spawn(move || {
                let mut tls = client.connect().unwrap();
                let mut refused = 0usize;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= FORGED {
                        return refused;
                    }
                    let (status, body) = post(
                        &mut tls,
                        &forged_review(&format!("forged-{i}"), &format!("mallory-{i}")),
                    )
                    .unwrap_or_else(|e| panic!("forged-{i}: {e}"));
                    assert_eq!(
                        status,
                        200,
                        "forged-{i}: {}",
                        String::from_utf8_lossy(&body)
                    );
                    if String::from_utf8_lossy(&body)
                        .contains("SubjectAccessReview budget is spent")
                    {
                        refused += 1;
                    }
                }
            })
        })
        .collect();
    let mut during = Vec::new();
    for i in 0..5 {
        let name = format!("during-{i}");
        during.push((name.clone(), create_restored(cp, &name)));
    }
    let refused: usize = forgers.into_iter().map(|f| f.join().unwrap()).sum();
    let flood_took = flood_started.elapsed();
    let answer_age = first.elapsed();
    stop.store(true, Ordering::Relaxed);
    for s in stallers {
        s.join().unwrap();
    }

    // The API server's reviews were never refused: no 429 was answered at all.
    let overloaded = r#"restore_hooks_admission_requests_total{outcome="overloaded"}"#;
    assert_eq!(webhook_metric(&serve, overloaded), 0.0);
    // The forged identities cost at most what the pace allows (a burst of 100, then 50 a second).
    let sent = reviews_sent(&serve) - sent_before;
    let most = 100.0 + 50.0 * (flood_took.as_secs_f64().ceil() + 1.0);
    eprintln!(
        "{FORGED} forged reviews in {flood_took:?}: {sent} SubjectAccessReviews sent, {refused} \
         refused unasked"
    );
    assert!(
        sent <= most,
        "{sent} SubjectAccessReviews sent, the pace allows {most}"
    );
    // Every forged identity was either asked (and denied) or refused unasked.
    let asked = webhook_metric(&serve, denied) - denied_before;
    assert_eq!(asked as usize + refused, FORGED);
    // The admin's answer, asked for "before", served the pods created meanwhile: while it is
    // fresh (30 s), nobody asked again, and their hooks are allowed by their creator. (A machine
    // so slow that it expired only loosens this.)
    if answer_age < Duration::from_secs(25) {
        assert_eq!(
            webhook_metric(&serve, allowed),
            1.0,
            "the admin was asked again"
        );
        for (name, hook) in &during {
            assert_eq!(hook["allowedBy"], "creator", "{name}: {hook}");
        }
    } else {
        eprintln!("the admin's answer expired ({answer_age:?}): not checking that it was kept");
    }
    serve.assert_no_forbidden();
}
