//! `restore-hooks` (the binary under test) as a host process, run the way the chart's
//! Deployment runs it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use realcp::{HostCommand, HostProcess};
use regex::Regex;
use serde_json::Value;

use super::{Install, NAMESPACE, RELEASE, wait_until};

/// Which replica of which rendered Deployment to run.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// The rendered Deployment whose container arguments, environment and ServiceAccount are
    /// used. Default: the chart's main one, [`RELEASE`].
    pub deployment: Option<String>,
    /// Which of its pods this process stands for (`--identity=$(POD_NAME)`, `POD_NAME`).
    pub replica: usize,
    /// HTTPS port (`--listen`). Default: the webhooks' port for replica 0 of the Deployment
    /// that serves the webhook, a fresh port otherwise.
    pub listen_port: Option<u16>,
    /// Do not wait for `/readyz` (a test that expects the process to fail).
    pub no_wait: bool,
}

impl ServeOptions {
    pub fn replica(replica: usize) -> Self {
        ServeOptions {
            replica,
            ..Default::default()
        }
    }

    pub fn of(deployment: &str, replica: usize) -> Self {
        ServeOptions {
            deployment: Some(deployment.to_string()),
            replica,
            ..Default::default()
        }
    }
}

/// A running `restore-hooks` under the chart's ServiceAccount. Killed (SIGKILL) when dropped;
/// on a panic its log's end is printed first.
pub struct Serve {
    proc: HostProcess,
    pub identity: String,
    pub role: String,
    pub service_account: String,
    pub admin_port: u16,
    pub listen_port: Option<u16>,
    pub args: Vec<String>,
}

impl Serve {
    pub fn start(install: &Install, opts: ServeOptions) -> Serve {
        let deployment_name = opts
            .deployment
            .clone()
            .unwrap_or_else(|| RELEASE.to_string());
        let deployment = install.deployment(&deployment_name);
        let spec = &deployment["spec"]["template"]["spec"];
        let container = &spec["containers"][0];
        let service_account = spec["serviceAccountName"]
            .as_str()
            .expect("the Deployment names its ServiceAccount")
            .to_string();
        let identity = install.replica_pods[&deployment_name]
            .get(opts.replica)
            .unwrap_or_else(|| {
                panic!(
                    "Deployment {deployment_name} has no replica {} ({:?})",
                    opts.replica, install.replica_pods[&deployment_name]
                )
            })
            .clone();
        let rendered: Vec<String> = container["args"]
            .as_array()
            .expect("container args")
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let role = rendered[0].clone();
        let serves_webhook = rendered.iter().any(|a| a.starts_with("--listen="));
        let listen_port = serves_webhook.then(|| {
            opts.listen_port.unwrap_or_else(|| {
                if opts.replica == 0 {
                    install.webhook_port
                } else {
                    realcp::free_port().unwrap()
                }
            })
        });
        let admin_port = realcp::free_port().unwrap();

        // Exactly the chart's arguments; only where it listens and where the certificate is
        // differ (a host process, not a pod). `$(POD_NAME)` is what the kubelet expands.
        let mut replaced = BTreeMap::new();
        let args: Vec<String> = rendered
            .iter()
            .map(|a| {
                let (flag, _) = a.split_once('=').unwrap_or((a, ""));
                let new = match flag {
                    "--listen" => format!("--listen=127.0.0.1:{}", listen_port.unwrap()),
                    "--admin-listen" => format!("--admin-listen=127.0.0.1:{admin_port}"),
                    "--tls-dir" => format!("--tls-dir={}", install.certs.dir.display()),
                    "--identity" => {
                        assert_eq!(a, "--identity=$(POD_NAME)", "the chart's --identity");
                        format!("--identity={identity}")
                    }
                    _ => return a.clone(),
                };
                replaced.insert(flag.to_string(), ());
                new
            })
            .collect();
        let mut expected = vec!["--admin-listen", "--identity"];
        if serves_webhook {
            expected.extend(["--listen", "--tls-dir"]);
        }
        for flag in expected {
            assert!(
                replaced.contains_key(flag),
                "the chart no longer passes {flag}: {rendered:?}"
            );
        }

        let kubeconfig = install.kubeconfig_for(&service_account);
        let home = install.cp.work_dir().join(format!("home-{identity}"));
        std::fs::create_dir_all(&home).unwrap();
        let log = install
            .cp
            .work_dir()
            .join(format!("restore-hooks-{identity}.log"));
        let mut cmd = HostCommand::new(
            &format!("restore-hooks {role} ({identity})"),
            env!("CARGO_BIN_EXE_restore-hooks"),
            install.cp.work_dir(),
            log,
        )
        .args(args.iter().map(OsString::from))
        // Nothing of the test's environment: only the token kubeconfig gives it cluster access.
        .clear_env()
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin")
        .env("RUST_BACKTRACE", "1");
        for e in container["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => identity.clone(),
                Some("metadata.namespace") => NAMESPACE.to_string(),
                Some(other) => panic!("the chart's env {name} needs fieldRef {other}"),
                None => e["value"]
                    .as_str()
                    .unwrap_or_else(|| panic!("env {name} has no value"))
                    .to_string(),
            };
            cmd = cmd.env(name, value);
        }
        let proc = HostProcess::spawn(&cmd).unwrap_or_else(|e| panic!("{e:#}"));
        let mut serve = Serve {
            proc,
            identity,
            role,
            service_account,
            admin_port,
            listen_port,
            args,
        };
        if !opts.no_wait {
            serve.wait_ready(Duration::from_secs(120));
        }
        serve
    }

    /// Waits for `/readyz` to answer 200; panics with the log if the process exits first.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let port = self.admin_port;
        let what = format!("{} /readyz", self.proc.name());
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.proc.exited() {
                panic!(
                    "{} exited ({status}) before it was ready:\n{}",
                    self.proc.name(),
                    self.proc.log_tail(60)
                );
            }
            match http_get(port, "/readyz") {
                Ok((200, _)) => return,
                Ok((_, body)) if std::time::Instant::now() >= deadline => panic!(
                    "timed out waiting for {what}: {body}\n{}",
                    self.proc.log_tail(60)
                ),
                Err(e) if std::time::Instant::now() >= deadline => panic!(
                    "timed out waiting for {what}: {e}\n{}",
                    self.proc.log_tail(60)
                ),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub fn log(&self) -> String {
        self.proc.log()
    }

    pub fn log_path(&self) -> PathBuf {
        self.proc.log_path().to_path_buf()
    }

    pub fn log_tail(&self, n: usize) -> String {
        self.proc.log_tail(n)
    }

    /// Its JSON log lines, parsed (others skipped).
    pub fn log_json(&self) -> Vec<Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The log lines (their `fields`) with message `message` about `object` (`ns/name`).
    pub fn lines_about(&self, message: &str, object: &str) -> Vec<Value> {
        self.log_json()
            .into_iter()
            // The JSON format flattens the event's fields into the line.
            .map(|l| {
                if l["fields"].is_object() {
                    l["fields"].clone()
                } else {
                    l
                }
            })
            .filter(|f| f["message"] == message && f["object"] == object)
            .collect()
    }

    /// Lines that show the API server refused it something (RBAC): `403`, `Forbidden`.
    pub fn forbidden_lines(&self) -> Vec<String> {
        forbidden_lines(&self.log())
    }

    /// Fails the test if its log shows any 403/Forbidden: the chart's RBAC must be enough.
    pub fn assert_no_forbidden(&self) {
        let lines = self.forbidden_lines();
        assert!(
            lines.is_empty(),
            "{} was refused something by the API server (the chart's RBAC is not enough):\n{}",
            self.proc.name(),
            lines.join("\n")
        );
    }

    /// `/metrics` of its admin port.
    pub fn metrics(&self) -> String {
        match http_get(self.admin_port, "/metrics") {
            Ok((200, body)) => body,
            other => panic!("{} /metrics: {other:?}", self.proc.name()),
        }
    }

    /// `restore_hooks_leader` is 1.
    pub fn is_leader(&self) -> bool {
        http_get(self.admin_port, "/metrics")
            .ok()
            .is_some_and(|(code, body)| {
                code == 200 && super::metric(&body, "restore_hooks_leader") == 1.0
            })
    }

    pub fn wait_leader(&self, timeout: Duration) {
        wait_until(&format!("{} to lead", self.identity), timeout, || {
            self.is_leader()
                .then_some(())
                .ok_or_else(|| self.log_tail(5))
        });
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// SIGTERM and up to `grace` for it to exit on its own; true if it did (with status 0).
    pub fn terminate(&mut self, grace: Duration) -> bool {
        let (status, by_itself) = self.proc.terminate(grace);
        by_itself && status.is_some_and(|s| s.success())
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.proc.exited()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- {} log ({}), last lines:\n{}",
                self.proc.name(),
                self.proc.log_path().display(),
                self.proc.log_tail(80)
            );
        }
    }
}

/// Lines of a log that show a refusal by the API server's authorization.
pub fn forbidden_lines(log: &str) -> Vec<String> {
    let re = Regex::new(r#"(?i)forbidden|code: 403\b|"code":\s*403\b|\b403 forbidden"#).unwrap();
    log.lines()
        .filter(|l| re.is_match(l))
        .map(str::to_string)
        .collect()
}

/// A plain-HTTP GET to 127.0.0.1: (status code, body).
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
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
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {resp:.200}")))?;
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((code, body))
}
