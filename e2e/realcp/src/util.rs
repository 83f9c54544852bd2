use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// A port on 127.0.0.1 that was free a moment ago. The OS can hand a just-released port out
/// again, so ports given to one test process are never reused by it: concurrent control planes
/// in one test binary do not collide. (Another process can still take it in between; the caller
/// retries a start that fails with "address already in use".)
pub fn free_port() -> Result<u16> {
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    for _ in 0..100 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .context("cannot bind a port on 127.0.0.1")?
            .local_addr()?
            .port();
        if given.insert(port) {
            return Ok(port);
        }
    }
    bail!("no fresh free port on 127.0.0.1")
}

/// The last `n` lines of a log file, for error messages.
pub(crate) fn tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            let mut out = lines[start..].join("\n");
            if out.is_empty() {
                out = "(empty)".into();
            }
            out
        }
        Err(e) => format!("(cannot read it: {e})"),
    }
}

/// A plain-HTTP GET to 127.0.0.1 (etcd's /health, moto): (status code, body).
pub(crate) fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("not an HTTP response from 127.0.0.1:{port}: {resp:.200}"))?;
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((code, body))
}

/// 16 random bytes as hex, for bearer tokens.
pub(crate) fn random_hex() -> Result<String> {
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("cannot read /dev/urandom")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}
