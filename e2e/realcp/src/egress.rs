//! The API server's `cluster` egress (webhook and APIService calls to Services, and its
//! connections to kubelets) through an HTTP CONNECT proxy on a Unix socket, so that a webhook
//! configured with `clientConfig.service` reaches a process on this host and no packet ever
//! leaves loopback.
//!
//! A Unix socket, not TCP: kube-apiserver v1.37 accepts `transport.tcp.url: http://...` for
//! HTTPConnect in validation, but then builds a TLS client configuration from the absent
//! `tlsConfig` and crashes (nil dereference in egressselector's getTLSConfig); the `uds`
//! transport speaks plain HTTP CONNECT.
//!
//! The API server resolves a Service-referenced webhook to the Service's ClusterIP and port
//! (k8s.io/apiserver pkg/util/webhook, with the ClusterIP service resolver kube-apiserver uses
//! without `--enable-aggregator-routing`) and dials that address through the egress dialer of
//! the `cluster` network context. The proxy maps a ClusterIP:port routed with
//! [`EgressProxy::route`] to a loopback port, passes a loopback target through unchanged (kwok's
//! kubelet endpoints, for exec), and refuses everything else: a fake ClusterIP that is not
//! routed would otherwise be a private-range address.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result};

#[derive(Default)]
struct Shared {
    routes: Mutex<HashMap<SocketAddr, SocketAddr>>,
    /// `CONNECT` targets refused or unreachable, with why: a test asserts on them.
    refused: Mutex<Vec<String>>,
    /// `CONNECT`s to a routed address (whether its port then answered or not), by address.
    routed: Mutex<HashMap<SocketAddr, usize>>,
    tunnels: AtomicUsize,
    stop: AtomicBool,
}

/// The proxy: one accept thread, and two copy threads per tunnel. Stops accepting when dropped
/// (tunnels end when their peers close them, which the API server's exit does).
pub(crate) struct EgressProxy {
    socket: PathBuf,
    shared: Arc<Shared>,
    accept: Option<thread::JoinHandle<()>>,
}

impl EgressProxy {
    /// Listens on `dir/egress.sock`.
    pub(crate) fn start(dir: &Path) -> Result<EgressProxy> {
        let socket = dir.join("egress.sock");
        let listener = UnixListener::bind(&socket)
            .with_context(|| format!("egress proxy: cannot listen on {}", socket.display()))?;
        // Non-blocking, polled: the accept loop must see `stop` even when its socket file is
        // already gone (the control plane's work dir is removed on drop).
        listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let accept = thread::Builder::new()
            .name("realcp-egress".into())
            .spawn(move || {
                while !s.stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let _ = conn.set_nonblocking(false);
                            let s = s.clone();
                            let _ = thread::Builder::new()
                                .name("realcp-egress-conn".into())
                                .spawn(move || serve(conn, &s));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
            .context("egress proxy: cannot start its thread")?;
        Ok(EgressProxy {
            socket,
            shared,
            accept: Some(accept),
        })
    }

    /// kube-apiserver's `--egress-selector-config-file`: `cluster` through this proxy, the
    /// others (`controlplane`, `etcd`) direct as without the file.
    pub(crate) fn write_config(&self, dir: &Path) -> Result<PathBuf> {
        let socket = self
            .socket
            .to_str()
            .context("egress proxy: socket path not UTF-8")?;
        let path = dir.join("egress-selector.yaml");
        let config = serde_json::json!({
            "apiVersion": "apiserver.k8s.io/v1beta1",
            "kind": "EgressSelectorConfiguration",
            "egressSelections": [{
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": socket}},
                },
            }],
        });
        std::fs::write(&path, serde_json::to_string_pretty(&config)?)?;
        Ok(path)
    }

    pub(crate) fn route(&self, from: SocketAddr, to_port: u16) {
        lock(&self.shared.routes).insert(from, SocketAddr::from((Ipv4Addr::LOCALHOST, to_port)));
    }

    pub(crate) fn refused(&self) -> Vec<String> {
        lock(&self.shared.refused).clone()
    }

    pub(crate) fn tunnels_to(&self, routed: SocketAddr) -> usize {
        lock(&self.shared.routed).get(&routed).copied().unwrap_or(0)
    }

    pub(crate) fn tunnels(&self) -> usize {
        self.shared.tunnels.load(Ordering::SeqCst)
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn serve(mut client: UnixStream, shared: &Shared) {
    if shared.stop.load(Ordering::SeqCst) {
        return;
    }
    let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
    let head = match read_head(&mut client) {
        Ok(head) => head,
        Err(e) => {
            lock(&shared.refused).push(format!("unreadable request: {e}"));
            return;
        }
    };
    let _ = client.set_read_timeout(None);
    let target = head
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("CONNECT "))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_string);
    let Some(target) = target else {
        lock(&shared.refused).push(format!("not a CONNECT: {:?}", head.lines().next()));
        let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n");
        return;
    };
    let dest = match target.parse::<SocketAddr>() {
        Ok(addr) => match lock(&shared.routes).get(&addr) {
            Some(to) => {
                *lock(&shared.routed).entry(addr).or_default() += 1;
                Some(*to)
            }
            None if is_loopback(addr.ip()) => Some(addr),
            None => None,
        },
        Err(_) => None,
    };
    let Some(dest) = dest else {
        lock(&shared.refused).push(format!(
            "{target}: neither routed nor on loopback, not dialed"
        ));
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n");
        return;
    };
    let upstream = match TcpStream::connect_timeout(&dest, Duration::from_secs(10)) {
        Ok(u) => u,
        Err(e) => {
            lock(&shared.refused).push(format!("{target} -> {dest}: {e}"));
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
            return;
        }
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    shared.tunnels.fetch_add(1, Ordering::SeqCst);
    let (Ok(mut c2), Ok(mut u2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let up = thread::spawn(move || {
        let _ = io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(Shutdown::Write);
    });
    let (mut upstream, mut client) = (upstream, client);
    let _ = io::copy(&mut upstream, &mut client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// Reads up to the blank line ending the request head, byte by byte: nothing after it may be
/// consumed (the API server sends the TLS handshake once it has the 200).
fn read_head(s: &mut UnixStream) -> io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 {
            return Err(io::Error::other("request head over 8 KiB"));
        }
        if s.read(&mut byte)? == 0 {
            return Err(io::Error::other(
                "closed before the end of the request head",
            ));
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn is_loopback(ip: IpAddr) -> bool {
    ip.is_loopback()
}
