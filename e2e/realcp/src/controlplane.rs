//! A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok (a fake kubelet for pods on fake nodes), each a child process built
//! from the pinned Go modules, with a throwaway PKI and a kubeconfig.
//!
//! The module is long because starting, waiting for readiness and tearing down the five
//! processes share one set of ports, certificates and work directories.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use restore_hooks_testkit::try_wait_until;
use serde_json::{Value, json};

use crate::NODE;
use crate::cache::{self, Group, bin};
use crate::egress::EgressProxy;
use crate::pki;
use crate::process::{self, Proc, Spec};
use crate::util::{free_port, http_get, random_hex, tail};

/// Which kube-apiserver a [`ControlPlane`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApiServer {
    /// v1.37 from the module `controlplane/`, the version of every other component.
    #[default]
    Pinned,
    /// The real kube-apiserver of the oldest Kubernetes minor restore-hooks supports, built from
    /// the module `controlplane-floor/` (its version: [`floor_version`]). kube-controller-manager
    /// and kube-scheduler are the v1.37 ones, started with `--emulated-version` at the floor's
    /// minor, so that they use no API or default newer than the API server they talk to.
    /// Incompatible with [`Options::emulated_version`].
    Floor,
}

/// How a [`ControlPlane`] starts.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--emulated-version` for kube-apiserver, kube-controller-manager and kube-scheduler, e.g.
    /// `"1.34"`: the binaries are v1.37 but serve the APIs and feature defaults of that minor
    /// (1.34 ..= 1.37).
    pub emulated_version: Option<String>,
    /// Which kube-apiserver runs: the pinned v1.37 one, or the floor's (a real older binary).
    pub apiserver: ApiServer,
    /// More kube-apiserver flags, e.g. `--feature-gates=...`.
    pub apiserver_args: Vec<String>,
    /// A failure guard for each startup step, not a performance bound.
    pub startup_timeout: Duration,
    /// Send the API server's `cluster` egress (calls to webhooks and APIServices referenced by
    /// Service, connections to kubelets) through an HTTP CONNECT proxy on a Unix socket, so that
    /// [`ControlPlane::route_service`] can point a Service at a port on this host. Without it,
    /// a Service-referenced webhook makes the API server dial a fake ClusterIP.
    pub service_proxy: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            emulated_version: None,
            apiserver: ApiServer::Pinned,
            apiserver_args: Vec::new(),
            startup_timeout: Duration::from_secs(180),
            service_proxy: false,
        }
    }
}

/// A running control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
/// kwok with one Ready, schedulable node [`NODE`]. Dropping it stops everything.
pub struct ControlPlane {
    work: PathBuf,
    keep: bool,
    procs: Mutex<Vec<Proc>>,
    server: String,
    kubeconfig: PathBuf,
    ca_pem: String,
    ca_crt: PathBuf,
    kubectl: PathBuf,
    default_exec_dir: PathBuf,
    kubeconfigs: AtomicUsize,
    started_in: Duration,
    /// kube-apiserver's binary and flags, to start it again as it was (see `start_apiserver`).
    apiserver_bin: PathBuf,
    apiserver_args: Vec<String>,
    /// The startup timeout of [`Options`], also for an API server started again.
    startup_timeout: Duration,
    /// Stopped after the API server, before the work dir is removed (see `drop`).
    egress: Option<EgressProxy>,
}

impl ControlPlane {
    /// Builds the binaries if needed (see `e2e/realcp/build.sh`), then starts everything and
    /// waits until the apiserver is ready, `kwok-0` is Ready without taints and the `default`
    /// ServiceAccount exists. An error names the component and ends with its log.
    pub fn start(opts: Options) -> Result<ControlPlane> {
        cache::ensure_built(Group::ControlPlane)?;
        if opts.apiserver == ApiServer::Floor {
            if let Some(v) = &opts.emulated_version {
                bail!(
                    "Options: emulated_version {v:?} with ApiServer::Floor: the floor is a real \
                     older kube-apiserver, which emulates nothing; choose one of the two"
                );
            }
            cache::ensure_built(Group::Floor)?;
        }
        // Free ports are picked before the processes bind them; another process can take one in
        // between. That shows as "address already in use" in the failing component's log.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::try_start(&opts) {
                Err(e) if attempt < 3 && format!("{e:#}").contains("address already in use") => {
                    eprintln!("realcp: a port was taken while starting; retrying: {e:#}");
                }
                other => return other,
            }
        }
    }

    fn try_start(opts: &Options) -> Result<ControlPlane> {
        let t0 = Instant::now();
        let keep = std::env::var_os("REALCP_KEEP").is_some_and(|v| v == "1");
        sweep_orphaned_work_dirs();
        let api_port = free_port()?;
        let server = format!("https://127.0.0.1:{api_port}");
        let work = tempfile::Builder::new()
            .prefix(WORK_PREFIX)
            .tempdir()
            .context("cannot create the control plane's work dir")?
            .keep();
        let pki = std::fs::write(work.join(OWNER), std::process::id().to_string())
            .map_err(anyhow::Error::from)
            .and_then(|()| pki::make(&work.join("pki")));
        let pki = match pki {
            Ok(pki) => pki,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&work);
                return Err(e.context("cannot write the PKI"));
            }
        };
        let mut cp = ControlPlane {
            kubeconfig: work.join("admin.kubeconfig"),
            default_exec_dir: work.join("pods").join("_default"),
            work,
            keep,
            procs: Mutex::new(Vec::new()),
            server,
            ca_pem: pki.ca_pem.clone(),
            ca_crt: pki.ca_crt.clone(),
            kubectl: bin("kubectl"),
            kubeconfigs: AtomicUsize::new(0),
            started_in: Duration::ZERO,
            apiserver_bin: bin("kube-apiserver"),
            apiserver_args: Vec::new(),
            startup_timeout: opts.startup_timeout,
            egress: None,
        };
        let timeout = opts.startup_timeout;
        // What the controller-manager and the scheduler emulate; the API server too, unless it is
        // the floor's, a real binary of that minor.
        let (emulated, apiserver_emulates) = match opts.apiserver {
            ApiServer::Pinned => (opts.emulated_version.clone(), true),
            ApiServer::Floor => {
                cp.apiserver_bin = bin(FLOOR_APISERVER);
                let v = floor_version()?;
                let minor = v.rsplit_once('.').map_or(v.as_str(), |(mm, _)| mm);
                (Some(minor.to_string()), false)
            }
        };
        let emulated: Vec<String> = emulated
            .iter()
            .map(|v| format!("--emulated-version={v}"))
            .collect();

        let (etcd_port, peer_port) = (free_port()?, free_port()?);
        cp.spawn(
            "etcd",
            vec![
                "--name=realcp".into(),
                format!("--data-dir={}", cp.work.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=realcp=http://127.0.0.1:{peer_port}"),
                // A throwaway cluster: fsync is most of etcd's write latency on a shared disk.
                "--unsafe-no-fsync=true".into(),
            ],
            vec![],
        )?;
        cp.wait_for("etcd /health", "etcd", timeout, |_| {
            let (code, body) = http_get(etcd_port, "/health")?;
            Ok((code == 200 && body.contains("true")).then_some(()))
        })?;

        let admin_token = random_hex()?;
        let tokens = cp.work.join("pki").join("tokens.csv");
        std::fs::write(
            &tokens,
            format!("{admin_token},admin,admin,\"system:masters\"\n"),
        )?;
        let mut apiserver = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", pki.apiserver_crt.display()),
            format!("--tls-private-key-file={}", pki.apiserver_key.display()),
            format!("--client-ca-file={}", pki.ca_crt.display()),
            format!("--token-auth-file={}", tokens.display()),
            // TokenRequest (`kubectl create token`, projected tokens) needs an issuer and a
            // signing key; the same key's public half verifies the tokens.
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", pki.sa_pub.display()),
            format!(
                "--service-account-signing-key-file={}",
                pki.sa_key.display()
            ),
            // Fake addresses nothing routes to (no kube-proxy, no pod network).
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--authorization-mode=Node,RBAC".into(),
            "--allow-privileged=true".into(),
            // The default reconciler publishes --advertise-address as the `kubernetes` Service's
            // endpoint, and the apiserver refuses a loopback address for that.
            "--endpoint-reconciler-type=none".into(),
            // kwok's node status has only an InternalIP (127.0.0.1); exec and logs go there.
            "--kubelet-preferred-address-types=InternalIP".into(),
            format!("--cert-dir={}", cp.work.join("pki").display()),
            // `REALCP_PROFILING=1`: Go's pprof at `/debug/pprof/` (as admin), to see where the
            // API server's CPU goes under a benchmark.
            format!(
                "--profiling={}",
                std::env::var_os("REALCP_PROFILING").is_some_and(|v| v == "1")
            ),
        ];
        if opts.service_proxy {
            let proxy = EgressProxy::start(&cp.work)?;
            let config = proxy.write_config(&cp.work.join("pki"))?;
            apiserver.push(format!(
                "--egress-selector-config-file={}",
                config.display()
            ));
            cp.egress = Some(proxy);
        }
        if apiserver_emulates {
            apiserver.extend(emulated.iter().cloned());
        }
        apiserver.extend(opts.apiserver_args.iter().cloned());
        cp.apiserver_args = apiserver.clone();
        spawn_into(
            &cp.procs,
            &cp.work,
            "kube-apiserver",
            &cp.apiserver_bin,
            apiserver,
            vec![],
        )?;
        cp.write_kubeconfig(&cp.kubeconfig, "admin", &admin_token)?;
        cp.wait_apiserver_ready(timeout)?;

        let kubeconfig = format!("--kubeconfig={}", cp.kubeconfig.display());
        let delegated = [
            format!("--authentication-kubeconfig={}", cp.kubeconfig.display()),
            format!("--authorization-kubeconfig={}", cp.kubeconfig.display()),
        ];
        let mut kcm = vec![
            kubeconfig.clone(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()?),
            "--leader-elect=false".into(),
            format!(
                "--service-account-private-key-file={}",
                pki.sa_key.display()
            ),
            format!("--root-ca-file={}", pki.ca_crt.display()),
            // Each controller acts as its own ServiceAccount (system:serviceaccount:kube-system:
            // replicaset-controller, ...), as kubeadm and managed clusters run it: admission sees
            // the identity that really creates a workload's pods, not an admin.
            "--use-service-account-credentials=true".into(),
            // node-lifecycle: kwok's fast node stages send no heartbeats or leases, so it would
            // mark kwok-0 NotReady and evict its pods. node-ipam: nothing here allocates pod CIDRs.
            "--controllers=*,-node-ipam-controller,-node-lifecycle-controller".into(),
        ];
        kcm.extend(delegated.iter().cloned());
        kcm.extend(emulated.iter().cloned());
        cp.spawn("kube-controller-manager", kcm, vec![])?;

        let mut scheduler = vec![
            kubeconfig.clone(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()?),
            "--leader-elect=false".into(),
        ];
        scheduler.extend(delegated.iter().cloned());
        scheduler.extend(emulated.iter().cloned());
        cp.spawn("kube-scheduler", scheduler, vec![])?;

        // kwok watches its Exec CRD (--enable-crds below) but does not install it.
        let crd = cache::cache_dir().join("share/kwok/crds/execs.yaml");
        let crd = std::fs::read_to_string(&crd).with_context(|| {
            format!(
                "kwok: missing {} (rerun e2e/realcp/build.sh)",
                crd.display()
            )
        })?;
        cp.with_log(
            "kube-apiserver",
            cp.apply(&crd)
                .and_then(|()| cp.wait_crds_established(&["execs.kwok.x-k8s.io"])),
        )?;
        let kwok_port = free_port()?;
        let kwok_config = cp.write_kwok_config()?;
        cp.spawn(
            "kwok",
            vec![
                kubeconfig,
                format!("--config={}", kwok_config.display()),
                "--manage-all-nodes=true".into(),
                "--node-ip=127.0.0.1".into(),
                // Pod IPs kwok hands out: fake, kept apart from the Service range.
                "--cidr=10.244.0.0/16".into(),
                format!("--node-port={kwok_port}"),
                format!("--server-address=127.0.0.1:{kwok_port}"),
                // Exec objects (kwok's per-pod exec rules) as a CRD, so a test can give a pod
                // its own work dir while kwok runs: see `pod_workdir`.
                "--enable-crds=Exec".into(),
            ],
            vec![],
        )?;

        let node = cp.apply(
            &json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": NODE,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {
                        "kubernetes.io/hostname": NODE,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                    },
                },
            })
            .to_string(),
        );
        cp.with_log("kube-apiserver", node)?;
        cp.wait_for("node kwok-0 Ready and untainted", "kwok", timeout, |cp| {
            let node: Value =
                serde_json::from_str(&cp.kubectl_ok(["get", "node", NODE, "-o", "json"])?)?;
            let ready = node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            if !ready {
                return Ok(None);
            }
            let tainted = node["spec"]["taints"]
                .as_array()
                .is_some_and(|t| !t.is_empty());
            if tainted {
                // Admission (TaintNodesByCondition) taints every new Node not-ready:NoSchedule;
                // the node-lifecycle controller, which is off (see --controllers), would lift it.
                let _ = cp.kubectl([
                    "taint",
                    "node",
                    NODE,
                    "node.kubernetes.io/not-ready:NoSchedule-",
                ]);
                return Ok(None);
            }
            Ok(Some(()))
        })?;
        // The ServiceAccount admission plugin rejects pods until the controller-manager has made
        // the namespace's `default` ServiceAccount.
        cp.wait_for(
            "ServiceAccount default/default",
            "kube-controller-manager",
            timeout,
            |cp| {
                Ok(cp
                    .kubectl(["get", "serviceaccount", "default", "-n", "default"])
                    .status
                    .success()
                    .then_some(()))
            },
        )?;
        cp.started_in = t0.elapsed();
        eprintln!(
            "realcp: control plane up in {:.1} s at {} (work dir {})",
            cp.started_in.as_secs_f64(),
            cp.server,
            cp.work.display()
        );
        Ok(cp)
    }

    /// The admin (system:masters) kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The CA that signed the apiserver's serving certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// This instance's work dir: logs (`<component>.log`), PKI, kubeconfigs, pod work dirs.
    pub fn work_dir(&self) -> &Path {
        &self.work
    }

    /// A component's log: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok.
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.work.join(format!("{component}.log"))
    }

    /// The kubectl built from the same k8s.io/kubernetes as the apiserver.
    pub fn kubectl_path(&self) -> &Path {
        &self.kubectl
    }

    /// How long [`ControlPlane::start`] took, not counting the build.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Where `pods/exec` runs commands for pods without a [`ControlPlane::pod_workdir`].
    pub fn default_exec_dir(&self) -> &Path {
        &self.default_exec_dir
    }

    /// kubectl with the admin kubeconfig.
    pub fn kubectl<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.kubectl_as(&self.kubeconfig, args)
    }

    /// kubectl with another kubeconfig, e.g. one from [`ControlPlane::kubeconfig_for_token`].
    pub fn kubectl_as<I, S>(&self, kubeconfig: &Path, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.kubectl_command(kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("realcp: cannot run {}: {e}", self.kubectl.display()))
    }

    /// kubectl with the admin kubeconfig; its stdout, or an error with its stderr.
    /// Waits (at most 2 minutes) until the CustomResourceDefinitions `names` are Established,
    /// or every CRD with no names: the API server serves their kinds only then.
    pub fn wait_crds_established(&self, names: &[&str]) -> Result<()> {
        let mut args = vec![
            "wait".to_string(),
            "--for=condition=Established".to_string(),
        ];
        if names.is_empty() {
            args.extend(["crd".to_string(), "--all".to_string()]);
        } else {
            args.extend(names.iter().map(|n| format!("crd/{n}")));
        }
        args.push("--timeout=120s".to_string());
        self.kubectl_ok(&args).map(drop)
    }

    pub fn kubectl_ok<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        checked(&args, self.kubectl(&args))
    }

    /// `kubectl apply -f -` with the admin kubeconfig (YAML or JSON, one or more objects).
    pub fn apply(&self, manifest: &str) -> Result<()> {
        self.kubectl_stdin(["apply", "-f", "-"], manifest).map(drop)
    }

    /// kubectl with `input` on its stdin; its stdout, or an error with its stderr.
    pub fn kubectl_stdin<I, S>(&self, args: I, input: &str) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let mut child = self
            .kubectl_command(&self.kubeconfig)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", self.kubectl.display()))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let input = input.to_owned();
        // A writer thread: kubectl may fill its stdout before it has read all of stdin.
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output()?;
        let _ = writer.join();
        checked(&args, out)
    }

    fn kubectl_command(&self, kubeconfig: &Path) -> Command {
        let mut c = Command::new(&self.kubectl);
        // --cache-dir: kubectl's discovery cache is keyed by host:port, and every control plane
        // has a new port: under ~/.kube/cache it would grow without bound.
        c.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--cache-dir={}",
                self.work.join("kubectl-cache").display()
            ));
        c
    }

    /// A token for a ServiceAccount from the TokenRequest API (`kubectl create token`). The
    /// apiserver refuses durations under 10 minutes.
    pub fn token_for_service_account(
        &self,
        namespace: &str,
        name: &str,
        duration: Duration,
    ) -> Result<String> {
        let token = self.kubectl_ok([
            "create",
            "token",
            name,
            "-n",
            namespace,
            &format!("--duration={}s", duration.as_secs()),
        ])?;
        Ok(token.trim().to_string())
    }

    /// A kubeconfig (a new file in the work dir) that authenticates with `token`.
    pub fn kubeconfig_for_token(&self, token: &str) -> Result<PathBuf> {
        let n = self.kubeconfigs.fetch_add(1, Ordering::Relaxed);
        let path = self.work.join(format!("token-{n}.kubeconfig"));
        self.write_kubeconfig(&path, &format!("token-{n}"), token)?;
        Ok(path)
    }

    /// Routes Service `namespace/name`'s `port` (at its ClusterIP, where the API server dials a
    /// Service-referenced webhook) to `127.0.0.1:to_port` through the egress proxy; needs
    /// [`Options::service_proxy`]. The Service must exist and have that port, as the API
    /// server's resolver requires. Returns the ClusterIP:port.
    pub fn route_service(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
        to_port: u16,
    ) -> Result<SocketAddr> {
        let proxy = self
            .egress
            .as_ref()
            .context("route_service needs a control plane started with Options::service_proxy")?;
        let svc: Value = serde_json::from_str(
            &self.kubectl_ok(["get", "service", name, "-n", namespace, "-o", "json"])?,
        )?;
        let ip: IpAddr = svc["spec"]["clusterIP"]
            .as_str()
            .and_then(|ip| ip.parse().ok())
            .with_context(|| format!("Service {namespace}/{name} has no ClusterIP: {svc}"))?;
        let has_port = svc["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["port"].as_u64() == Some(port.into()));
        if !has_port {
            bail!(
                "Service {namespace}/{name} has no port {port}: {}",
                svc["spec"]["ports"]
            );
        }
        let from = SocketAddr::new(ip, port);
        proxy.route(from, to_port);
        Ok(from)
    }

    /// What the egress proxy refused to dial (not routed and not on loopback) or could not
    /// reach, one line each, oldest first. Empty without [`Options::service_proxy`].
    pub fn egress_refused(&self) -> Vec<String> {
        self.egress
            .as_ref()
            .map(EgressProxy::refused)
            .unwrap_or_default()
    }

    /// How many times the API server asked the egress proxy for `routed` (an address
    /// [`ControlPlane::route_service`] returned), or, with `None`, how many tunnels it opened.
    pub fn egress_tunnels(&self, routed: Option<SocketAddr>) -> usize {
        match (&self.egress, routed) {
            (Some(p), Some(addr)) => p.tunnels_to(addr),
            (Some(p), None) => p.tunnels(),
            (None, _) => 0,
        }
    }

    /// SIGKILLs kube-apiserver (its process group) and reaps it: no graceful shutdown, every
    /// connection to it cut, as when its node dies or it is OOM-killed. etcd and the other
    /// components keep running (they retry, as in a cluster). Start it again with
    /// [`ControlPlane::start_apiserver`]; a control plane dropped meanwhile stops the rest as
    /// usual.
    pub fn kill_apiserver(&self) -> Result<()> {
        let mut procs = lock(&self.procs);
        let p = procs
            .iter_mut()
            .find(|p| p.name == "kube-apiserver")
            .context("no kube-apiserver in this control plane")?;
        if p.exited().is_some() {
            bail!("kube-apiserver is not running");
        }
        p.kill();
        Ok(())
    }

    /// Starts kube-apiserver again after [`ControlPlane::kill_apiserver`], with exactly the flags
    /// it first ran with: the same etcd (every object is still there), port, certificates and
    /// token file, so that every client's kubeconfig and token still work. Its output is appended
    /// to the same log. Returns once `/readyz` answers (the startup timeout of [`Options`]).
    /// Requests it answers before its authorizer has synced may still be refused (403) for a
    /// moment after that, as in any cluster whose API server restarts.
    pub fn start_apiserver(&self) -> Result<()> {
        {
            let mut procs = lock(&self.procs);
            let at = procs
                .iter()
                .position(|p| p.name == "kube-apiserver")
                .context("no kube-apiserver in this control plane")?;
            if procs[at].exited().is_none() {
                bail!("kube-apiserver is still running: kill_apiserver first");
            }
            // In the same place: the components are stopped newest first (see `stop_all`).
            procs[at] = Proc::spawn(Spec {
                name: "kube-apiserver",
                program: &self.apiserver_bin,
                args: self.apiserver_args.iter().map(OsString::from).collect(),
                cwd: &self.work,
                env: vec![],
                clear_env: false,
                log: self.log_path("kube-apiserver"),
                append: true,
            })?;
        }
        self.wait_apiserver_ready(self.startup_timeout)
    }

    fn wait_apiserver_ready(&self, timeout: Duration) -> Result<()> {
        self.wait_for("kube-apiserver /readyz", "kube-apiserver", timeout, |cp| {
            let out = cp.kubectl(["get", "--raw", "/readyz"]);
            Ok(out.status.success().then_some(()))
        })
    }

    /// Gives pod `namespace/name` its own exec work dir, `<work dir>/pods/<namespace>/<name>`,
    /// and returns it: `pods/exec` then runs commands there (kwok applies one work dir per exec
    /// rule, not per pod, so this adds a kwok `Exec` rule for the pod). kwok learns of it
    /// through a watch, so call this before the pod is created, or expect a moment's delay.
    pub fn pod_workdir(&self, namespace: &str, name: &str) -> Result<PathBuf> {
        let dir = self.work.join("pods").join(namespace).join(name);
        std::fs::create_dir_all(&dir)?;
        self.apply(
            &json!({
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Exec",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"execs": [{"local": {"workDir": dir}}]},
            })
            .to_string(),
        )?;
        Ok(dir)
    }

    fn spawn(&self, name: &str, args: Vec<String>, env: Vec<(&str, OsString)>) -> Result<()> {
        spawn_into(&self.procs, &self.work, name, &bin(name), args, env)
    }

    /// Polls `probe` until it gives `Some`, failing early with the log of any component that
    /// exits meanwhile, or after `timeout` with the log of `blame`.
    fn wait_for<T>(
        &self,
        what: &str,
        blame: &str,
        timeout: Duration,
        mut probe: impl FnMut(&Self) -> Result<Option<T>>,
    ) -> Result<T> {
        let log = self.log_path(blame);
        wait_for(&self.procs, what, timeout, (blame, &log), || probe(self))
    }

    /// Adds the end of `component`'s log to a startup step's error.
    pub(crate) fn with_log<T>(&self, component: &str, r: Result<T>) -> Result<T> {
        r.map_err(|e| {
            let log = self.log_path(component);
            anyhow!(
                "{e:#}\nlast lines of {component}'s log {}:\n{}",
                log.display(),
                tail(&log, 30)
            )
        })
    }

    fn write_kubeconfig(&self, path: &Path, user: &str, token: &str) -> Result<()> {
        // JSON is YAML: no quoting to get wrong.
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "realcp", "cluster": {
                "server": self.server,
                "certificate-authority": self.ca_crt,
            }}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "realcp", "context": {"cluster": "realcp", "user": user}}],
            "current-context": "realcp",
        });
        std::fs::write(path, serde_json::to_string_pretty(&config)?)
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// kwok's config: its "fast" node and pod stages (node Ready at once, pods Running at once,
    /// Job pods Succeeded, deleted pods gone) and a catch-all exec rule. Any Stage in the config
    /// replaces all of kwok's defaults, so the stages come from the copies build.sh keeps.
    fn write_kwok_config(&self) -> Result<PathBuf> {
        let stages = cache::cache_dir().join("share/kwok/stages");
        let mut config = String::new();
        for stage in [
            "node-initialize.yaml",
            "pod-ready.yaml",
            "pod-complete.yaml",
            "pod-delete.yaml",
        ] {
            let path = stages.join(stage);
            config.push_str("---\n");
            config.push_str(&std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "kwok: missing stage {} (rerun e2e/realcp/build.sh)",
                    path.display()
                )
            })?);
            config.push('\n');
        }
        // kwok runs no container, ephemeral ones included: each one added to a Running pod
        // (`pods/ephemeralcontainers`) is reported terminated, as its command would have ended
        // (restore-hooks' image hooks read that state): see EPHEMERAL_STAGE for the exit code.
        config.push_str("---\n");
        config.push_str(EPHEMERAL_STAGE);
        config.push('\n');
        std::fs::create_dir_all(&self.default_exec_dir)?;
        config.push_str("---\n");
        config.push_str(
            &json!({
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterExec",
                "metadata": {"name": "realcp-default"},
                "spec": {"execs": [{"local": {"workDir": self.default_exec_dir}}]},
            })
            .to_string(),
        );
        config.push('\n');
        let path = self.work.join("kwok.yaml");
        std::fs::write(&path, config)?;
        Ok(path)
    }
}

/// A kwok Stage: ephemeral containers without a status end at once. kwok runs no process, so the
/// exit code is read from the command itself: the number after a trailing `exit N` of its last
/// argument (`["sh", "-c", "... ; exit 3"]` ends with 3), else 0. A test chooses a hook's exit
/// code by its command, as it would with a real runtime.
const EPHEMERAL_STAGE: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ephemeral-containers-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '((.spec.ephemeralContainers // []) | length) > ((.status.ephemeralContainerStatuses // []) | length)'
      operator: 'In'
      values:
      - 'true'
  next:
    statusTemplate: |
      {{ $now := Now }}
      ephemeralContainerStatuses:
      {{ range .spec.ephemeralContainers }}
      {{ $code := 0 }}
      {{ if .command }}{{ $exit := regexFind "exit [0-9]+$" (last .command) }}{{ if $exit }}{{ $code = atoi (trimPrefix "exit " $exit) }}{{ end }}{{ end }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        state:
          terminated:
            exitCode: {{ $code }}
            reason: {{ if eq $code 0 }}Completed{{ else }}Error{{ end }}
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
      {{ end }}
"#;

impl Drop for ControlPlane {
    fn drop(&mut self) {
        process::stop_all(&mut lock(&self.procs));
        // Before the work dir (its socket) goes.
        self.egress.take();
        if self.keep {
            let _ = std::fs::write(self.work.join(KEPT), "REALCP_KEEP=1\n");
            eprintln!("realcp: REALCP_KEEP=1: kept {}", self.work.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.work);
        }
    }
}

/// The floor's kube-apiserver in the cache's `bin/` (see [`ApiServer::Floor`]).
const FLOOR_APISERVER: &str = "kube-apiserver-floor";

/// The version of [`ApiServer::Floor`]'s kube-apiserver without the `v`, e.g. `"1.35.0"` (what
/// `helm template --kube-version` takes): the oldest Kubernetes restore-hooks supports, as built
/// from `e2e/realcp/controlplane-floor/` (built first when missing). Read from the binary's
/// `--version`, which build.sh stamps with its module's version.
pub fn floor_version() -> Result<String> {
    cache::ensure_built(Group::Floor)?;
    let path = bin(FLOOR_APISERVER);
    let out = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {} --version", path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "Kubernetes v1.35.0"
    text.trim()
        .strip_prefix("Kubernetes v")
        .filter(|v| out.status.success() && v.split('.').count() == 3)
        .map(str::to_string)
        .ok_or_else(|| {
            anyhow!(
                "{} --version printed {:?} ({}), not \"Kubernetes vX.Y.Z\": rebuild it with \
                 e2e/realcp/build.sh floor",
                path.display(),
                text.trim(),
                out.status
            )
        })
}

const WORK_PREFIX: &str = "realcp-";
/// The pid of the test process that made a work dir.
const OWNER: &str = "owner.pid";
/// Present in a work dir kept with REALCP_KEEP=1, which the sweep leaves alone.
const KEPT: &str = "kept";

/// A test process killed outright (SIGKILL, a CI timeout) takes its components with it (see
/// `process`), but cannot remove its work dir: the next start does, for every work dir whose
/// owner pid is gone.
fn sweep_orphaned_work_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(WORK_PREFIX) || dir.join(KEPT).exists()
        {
            continue;
        }
        let Some(pid) = std::fs::read_to_string(dir.join(OWNER))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Starts `program` as component `name` (working directory `work`, log `work/<name>.log`) and
/// adds it to `procs`, which are stopped together.
pub(crate) fn spawn_into(
    procs: &Mutex<Vec<Proc>>,
    work: &Path,
    name: &str,
    program: &Path,
    args: Vec<String>,
    env: Vec<(&str, OsString)>,
) -> Result<()> {
    let proc = Proc::spawn(Spec {
        name,
        program,
        args: args.into_iter().map(OsString::from).collect(),
        cwd: work,
        env,
        clear_env: false,
        log: work.join(format!("{name}.log")),
        append: false,
    })?;
    lock(procs).push(proc);
    Ok(())
}

pub(crate) fn lock(procs: &Mutex<Vec<Proc>>) -> std::sync::MutexGuard<'_, Vec<Proc>> {
    procs.lock().unwrap_or_else(|e| e.into_inner())
}

/// Polls `probe` (the workspace's blocking wait) until it yields a value. Fails at once when one
/// of `procs` exited (its log says why), and after `timeout` with the last lines of `blame`'s log
/// (the component that should have made the probe succeed).
pub(crate) fn wait_for<T>(
    procs: &Mutex<Vec<Proc>>,
    what: &str,
    timeout: Duration,
    (blame, log): (&str, &Path),
    mut probe: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let waited = try_wait_until(what, timeout, || {
        for p in lock(procs).iter_mut() {
            if p.exited().is_some() {
                return Ok(Err(p.died(&format!("while waiting for {what}"))));
            }
        }
        match probe() {
            Ok(Some(v)) => Ok(Ok(v)),
            Ok(None) => Err("not there yet".to_string()),
            Err(e) => Err(format!("{e:#}")),
        }
    });
    match waited {
        Ok(done) => done,
        Err(timed_out) => bail!(
            "{timed_out}; last lines of {blame}'s log {}:\n{}\n(set REALCP_KEEP=1 to keep the work dir)",
            log.display(),
            tail(log, 30)
        ),
    }
}

pub(crate) fn checked(args: &[OsString], out: Output) -> Result<String> {
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let args: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
    bail!(
        "`kubectl {}` failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )
}
