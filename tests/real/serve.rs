//! `restore-hooks` (the binary under test) as a host process, run the way the chart's
//! Deployment runs it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use realcp::{HostCommand, HostProcess};
use regex::Regex;
use serde_json::Value;

use restore_hooks_testkit::try_wait_until;

use super::{Install, NAMESPACE, RELEASE, wait_until};

/// Which replica of which rendered Deployment to run.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Flags whose chart value this process runs with another (`--restore-run-retention=1s`):
    /// each replaces the chart's flag of the same name, or is added.
    pub args: Vec<String>,
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
    /// The controller's way to the API server, when not the control plane's own address: a
    /// proxy in front of it (see `lossy_proxy.rs`). [`Replica::start`] gives it to the
    /// controller (or `serve`) only; the webhook talks to the API server directly.
    pub via: Option<Via>,
}

/// A way to the API server through something in front of it: a process's token kubeconfig
/// (same user, same token) gets `server` and trusts `ca_file` instead.
#[derive(Clone, Debug)]
pub struct Via {
    pub server: String,
    /// The CA certificate (PEM) that signed the certificate `server` presents.
    pub ca_file: PathBuf,
}

impl Via {
    /// A copy of `kubeconfig` (one the harness wrote) pointed at this way to the API server.
    pub fn kubeconfig(&self, kubeconfig: &Path) -> PathBuf {
        let mut config: Value = serde_json::from_str(&std::fs::read_to_string(kubeconfig).unwrap())
            .expect("the harness writes kubeconfigs as JSON");
        for cluster in config["clusters"].as_array_mut().unwrap() {
            cluster["cluster"]["server"] = self.server.clone().into();
            cluster["cluster"]["certificate-authority"] = self.ca_file.display().to_string().into();
        }
        let path = kubeconfig.with_extension("via.kubeconfig");
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        path
    }
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
/// on a panic its log's end is printed first. Dropped without a panic, it fails the test if the
/// API server refused it anything (403: the chart's RBAC lacks a rule), unless
/// [`Serve::expect_forbidden`] said so.
pub struct Serve {
    proc: HostProcess,
    forbidden_expected: bool,
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
        let mut args: Vec<String> = rendered
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
        for extra in &opts.args {
            let flag = extra.split_once('=').map_or(extra.as_str(), |(f, _)| f);
            match args
                .iter_mut()
                .find(|a| a.split_once('=').map_or(a.as_str(), |(f, _)| f) == flag)
            {
                Some(a) => *a = extra.clone(),
                None => args.push(extra.clone()),
            }
        }
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

        let mut kubeconfig = install.kubeconfig_for(&service_account);
        if let Some(via) = &opts.via {
            kubeconfig = via.kubeconfig(&kubeconfig);
        }
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
            forbidden_expected: false,
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
        let proc = &mut self.proc;
        let ready = try_wait_until(what, timeout, || {
            if let Some(status) = proc.exited() {
                panic!(
                    "{} exited ({status}) before it was ready:\n{}",
                    proc.name(),
                    proc.log_tail(60)
                );
            }
            match http_get(port, "/readyz") {
                Ok((200, _)) => Ok(()),
                Ok((_, body)) => Err(body),
                Err(e) => Err(e.to_string()),
            }
        });
        if let Err(timed_out) = ready {
            panic!("{timed_out}\n{}", self.proc.log_tail(60));
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

    /// Its JSON log lines' fields (the JSON format flattens an event's fields into the line).
    fn log_fields(&self) -> Vec<Value> {
        self.log_json()
            .into_iter()
            .map(|l| {
                if l["fields"].is_object() {
                    l["fields"].clone()
                } else {
                    l
                }
            })
            .collect()
    }

    /// The log lines (their `fields`) with message `message` about `object` (`ns/name`).
    pub fn lines_about(&self, message: &str, object: &str) -> Vec<Value> {
        self.log_fields()
            .into_iter()
            .filter(|f| f["message"] == message && f["object"] == object)
            .collect()
    }

    /// The log lines (their `fields`) whose message starts with `prefix`.
    pub fn lines_starting(&self, prefix: &str) -> Vec<Value> {
        self.log_fields()
            .into_iter()
            .filter(|f| f["message"].as_str().is_some_and(|m| m.starts_with(prefix)))
            .collect()
    }

    /// Lines that show the API server refused it something (RBAC): `403`, `Forbidden`.
    pub fn forbidden_lines(&self) -> Vec<String> {
        forbidden_lines(&self.log())
    }

    /// The test breaks the RBAC on purpose: 403s in this process's log do not fail it.
    pub fn expect_forbidden(&mut self) {
        self.forbidden_expected = true;
    }

    /// The API server's refusals as the product logged them (src/kube_client.rs): the `verb`
    /// and `resource` fields of each line.
    pub fn refusals(&self) -> Vec<(String, String)> {
        self.log_fields()
            .into_iter()
            .filter(|f| {
                f["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("the API server refused a request with 403"))
            })
            .map(|f| {
                (
                    f["verb"].as_str().unwrap_or_default().to_string(),
                    f["resource"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
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

    /// The Lease it leads with (`--lease-name`, the chart's).
    pub fn lease_name(&self) -> String {
        self.args
            .iter()
            .find_map(|a| a.strip_prefix("--lease-name="))
            .unwrap_or("restore-hooks-controller")
            .to_string()
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
        wait_until(format!("{} to lead", self.identity), timeout, || {
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
        } else if !self.forbidden_expected {
            // Every real-control-plane test checks the chart's RBAC this way: a refused API call
            // anywhere in a test fails it.
            self.assert_no_forbidden();
        }
    }
}

/// Replica `n` of every Deployment of an installation, as the chart runs them: with its default
/// (split) `restore-hooks controller` and `restore-hooks webhook`, each under its own
/// ServiceAccount; with `split.enabled=false` the one `restore-hooks serve`.
pub struct Replica {
    /// The controller (or `serve`) first: it creates the plan key the webhook waits for.
    pub procs: Vec<Serve>,
}

impl Replica {
    /// Starts replica `replica` of each Deployment, the controller's first, each with
    /// `opts.args` (and without waiting for readiness with `opts.no_wait`).
    pub fn start(install: &Install, replica: usize, opts: &ServeOptions) -> Replica {
        let mut deployments: Vec<(String, bool)> = super::of_kind(&install.rendered, "Deployment")
            .into_iter()
            .map(|d| {
                let name = d["metadata"]["name"].as_str().unwrap().to_string();
                let role = d["spec"]["template"]["spec"]["containers"][0]["args"][0]
                    .as_str()
                    .unwrap()
                    .to_string();
                (name, role == "webhook")
            })
            .collect();
        deployments.sort_by_key(|(_, webhook)| *webhook);
        let procs = deployments
            .into_iter()
            .map(|(name, webhook)| {
                Serve::start(
                    install,
                    ServeOptions {
                        args: opts.args.clone(),
                        no_wait: opts.no_wait,
                        via: if webhook { None } else { opts.via.clone() },
                        ..ServeOptions::of(&name, replica)
                    },
                )
            })
            .collect();
        Replica { procs }
    }

    /// The process that serves admission (`webhook` or `serve`).
    pub fn webhook(&self) -> &Serve {
        self.procs
            .iter()
            .find(|p| p.role != "controller")
            .expect("a webhook process")
    }

    /// The process that runs hooks (`controller` or `serve`).
    pub fn controller(&self) -> &Serve {
        self.procs
            .iter()
            .find(|p| p.role != "webhook")
            .expect("a controller process")
    }

    pub fn controller_mut(&mut self) -> &mut Serve {
        self.procs
            .iter_mut()
            .find(|p| p.role != "webhook")
            .expect("a controller process")
    }

    pub fn webhook_mut(&mut self) -> &mut Serve {
        self.procs
            .iter_mut()
            .find(|p| p.role != "controller")
            .expect("a webhook process")
    }

    pub fn is_leader(&self) -> bool {
        self.controller().is_leader()
    }

    pub fn wait_leader(&self, timeout: Duration) {
        self.controller().wait_leader(timeout)
    }

    /// Every process's 403 lines.
    pub fn forbidden_lines(&self) -> Vec<String> {
        self.procs.iter().flat_map(Serve::forbidden_lines).collect()
    }

    pub fn assert_no_forbidden(&self) {
        for p in &self.procs {
            p.assert_no_forbidden();
        }
    }

    pub fn expect_forbidden(&mut self) {
        for p in &mut self.procs {
            p.expect_forbidden();
        }
    }

    /// The last `n` lines of each process's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.procs
            .iter()
            .map(|p| format!("---- {}:\n{}", p.identity, p.log_tail(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGKILL of every process.
    pub fn kill(&mut self) {
        for p in &mut self.procs {
            p.kill();
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
