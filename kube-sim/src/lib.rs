//! `kube-sim`: an in-process Kubernetes API server and kubelet stand-in.
//!
//! It speaks the real wire protocol (JSON over plain HTTP, watch streams, WebSocket exec) so
//! that the real `kube` client and the real `kubectl` can drive code under test without a
//! cluster. Pods' containers are not run: init containers with a `command` and exec commands
//! run as local processes in a per-pod directory.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let _ = rustls::crypto::ring::default_provider().install_default();
//! let sim = kube_sim::start(kube_sim::SimOptions::default()).await?;
//! let client = sim.client().await;
//! # let _ = client;
//! sim.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Known gaps (deliberate, to stay small): no authentication or authorization (requests act as
//! `kube-sim:admin`, or as the user of an `Impersonate-User` header, which admission webhooks
//! see in `userInfo`; a SubjectAccessReview allows everything but what [`SimHandle::deny_exec`]
//! denies); no protobuf;
//! no pagination (`limit` is ignored, lists are complete); no field validation; pod spec
//! immutability is not enforced; deletions are immediate (no finalizers or grace periods), except
//! that `Faults::hold_delete` keeps a pod between the two steps of a delete without grace period;
//! admission webhooks are called for CREATE only, by `clientConfig.url` only (no `service`),
//! and `matchConditions` (CEL) are not evaluated; strategic merge patch is merge patch plus
//! merging lists of named objects by `name`.
#![forbid(unsafe_code)]

mod admission;
mod deletion;
mod discovery;
mod error;
mod exec;
mod faults;
mod kubelet;
mod registry;
mod request;
mod selector;
mod server;
mod store;
mod table;
mod util;
mod watch;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use faults::Faults;
pub use util::parse_go_duration;

/// Pod annotation: delay between containers Running and Ready (Go duration, default 100ms).
pub const ANNOTATION_READY_AFTER: &str = "sim.kube/ready-after";
/// Pod annotation: `"true"` keeps containers Running but never Ready; a comma-separated list of
/// container names (app containers or native sidecars) keeps only those unready.
pub const ANNOTATION_NEVER_READY: &str = "sim.kube/never-ready";
/// Pod annotation: delay between init containers done and app containers Running.
pub const ANNOTATION_START_DELAY: &str = "sim.kube/start-delay";
/// Pod annotation: `"<Phase>:<duration>"`, e.g. `Succeeded:1s`: terminal phase after Running.
pub const ANNOTATION_PHASE_AFTER: &str = "sim.kube/phase-after";

/// How to start the simulator.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Where the API server listens; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Per-pod sandbox directories live in `workdir/<namespace>/<pod>`.
    pub workdir: PathBuf,
    /// Run the kubelet stand-in (pod status updates, init containers).
    pub kubelet: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            workdir: std::env::temp_dir().join(format!("kube-sim-{}", util::new_uid())),
            kubelet: true,
        }
    }
}

/// What a step-log entry is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimEventKind {
    /// A mutating webhook was called (patched, allowed, denied or failed).
    Admission,
    /// An init container ran (exit code and output) or a sidecar started.
    InitContainer,
    /// App containers became Running, Ready or terminated.
    Container,
    /// An exec session started or finished.
    Exec,
    /// A pod was deleted.
    PodDeleted,
    /// An injected fault fired.
    Fault,
}

impl fmt::Display for SimEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SimEventKind::Admission => "admission",
            SimEventKind::InitContainer => "init",
            SimEventKind::Container => "container",
            SimEventKind::Exec => "exec",
            SimEventKind::PodDeleted => "deleted",
            SimEventKind::Fault => "fault",
        })
    }
}

/// One human-readable step of what the simulated cluster did, for demos and test diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimEvent {
    pub kind: SimEventKind,
    pub namespace: String,
    /// Pod name (or its `generateName` followed by `*` before a name was assigned).
    pub name: String,
    pub message: String,
    /// For admissions that patched the pod: the JSON Patch that was applied.
    pub patch: Option<serde_json::Value>,
}

impl fmt::Display for SimEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {}/{}: {}",
            self.kind, self.namespace, self.name, self.message
        )
    }
}

/// Shared state of one simulator instance.
pub(crate) struct Sim {
    pub store: store::Store,
    pub registry: registry::Registry,
    pub faults: Faults,
    pub log: broadcast::Sender<SimEvent>,
    pub workdir: PathBuf,
    pub kubelet_on: tokio::sync::watch::Sender<bool>,
    pub shutdown: CancellationToken,
    /// Users a SubjectAccessReview says may not `create pods/exec` (everyone else may).
    pub no_exec: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Sim {
    pub fn emit(&self, kind: SimEventKind, ns: &str, name: &str, message: impl Into<String>) {
        self.emit_event(SimEvent {
            kind,
            namespace: ns.to_string(),
            name: name.to_string(),
            message: message.into(),
            patch: None,
        });
    }

    pub fn emit_event(&self, ev: SimEvent) {
        tracing::info!(target: "kube_sim", "{ev}");
        let _ = self.log.send(ev);
    }

    pub fn pod_dir(&self, ns: &str, pod: &str) -> PathBuf {
        self.workdir.join(ns).join(pod)
    }
}

/// A running simulator. Dropping it does not stop it; call [`SimHandle::shutdown`].
pub struct SimHandle {
    sim: Arc<Sim>,
    addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts the API server (and the kubelet stand-in unless disabled) on the current runtime.
/// A rustls crypto provider must be installed by the caller before admission webhooks are used.
pub async fn start(opts: SimOptions) -> anyhow::Result<SimHandle> {
    std::fs::create_dir_all(&opts.workdir)
        .with_context(|| format!("creating workdir {}", opts.workdir.display()))?;
    let sim = Arc::new(Sim {
        store: store::Store::default(),
        registry: registry::Registry::default(),
        faults: Faults::default(),
        log: broadcast::channel(4096).0,
        workdir: opts.workdir.clone(),
        kubelet_on: tokio::sync::watch::channel(opts.kubelet).0,
        shutdown: CancellationToken::new(),
        no_exec: Default::default(),
    });
    {
        let weak = Arc::downgrade(&sim);
        sim.faults.set_compactor(Box::new(move || {
            if let Some(s) = weak.upgrade() {
                s.store.compact();
            }
        }));
    }
    sim.store
        .create(
            "namespaces",
            server::new_namespace("default", util::new_uid()),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("binding {}", opts.listen))?;
    let addr = listener.local_addr()?;
    let app = server::router(sim.clone());
    let token = sim.shutdown.clone();
    let server = tokio::spawn(async move {
        let serve = axum::serve(listener, app.into_make_service());
        tokio::select! {
            r = serve => if let Err(e) = r { tracing::error!("kube-sim server: {e}") },
            _ = token.cancelled() => {}
        }
    });
    let kubelet = tokio::spawn(kubelet::run(sim.clone()));
    Ok(SimHandle {
        sim,
        addr,
        tasks: vec![server, kubelet],
    })
}

impl SimHandle {
    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A client configuration for this server (default namespace `default`).
    pub fn kube_config(&self) -> kube::Config {
        let mut cfg = kube::Config::new(self.url().parse().expect("valid url"));
        cfg.connect_timeout = Some(Duration::from_secs(5));
        cfg
    }

    /// A client for this server.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.kube_config()).expect("kube client for kube-sim")
    }

    /// Writes a kubeconfig (context `kube-sim`, namespace `default`) for kubectl and friends.
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        let cfg = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kube-sim", "cluster": {"server": self.url()}}],
            "users": [{"name": "kube-sim", "user": {}}],
            "contexts": [{"name": "kube-sim", "context": {"cluster": "kube-sim", "user": "kube-sim", "namespace": "default"}}],
            "current-context": "kube-sim",
        });
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, yaml_serde::to_string(&cfg)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// The pod's sandbox directory (`workdir/<ns>/<pod>`), where its processes run.
    pub fn pod_dir(&self, namespace: &str, pod: &str) -> PathBuf {
        self.sim.pod_dir(namespace, pod)
    }

    pub fn faults(&self) -> &Faults {
        &self.sim.faults
    }

    /// From now on, SubjectAccessReviews answer that `user` may not `create pods/exec`
    /// (without this, every user may: the simulator has no authorization).
    pub fn deny_exec(&self, user: &str) {
        self.sim
            .no_exec
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(user.to_string());
    }

    /// The step log. Subscribe before acting; the channel keeps the last 4096 entries.
    pub fn subscribe_log(&self) -> broadcast::Receiver<SimEvent> {
        self.sim.log.subscribe()
    }

    /// Pauses the kubelet: pods keep their current status until [`Self::start_kubelet`].
    pub fn stop_kubelet(&self) {
        self.sim.kubelet_on.send_replace(false);
    }

    pub fn start_kubelet(&self) {
        self.sim.kubelet_on.send_replace(true);
    }

    /// Sets the pod's phase as the kubelet would (`Succeeded`/`Failed` also terminate its
    /// containers). Unknown pods are ignored.
    pub async fn set_pod_phase(&self, ns: &str, name: &str, phase: &str) {
        kubelet::set_phase(&self.sim, ns, name, phase);
    }

    /// Stops serving, closes watches and kills running pod processes.
    pub async fn shutdown(self) {
        self.sim.shutdown.cancel();
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}
