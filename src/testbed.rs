//! A whole restore-hooks installation on the built-in API-server simulator (`kube-sim`), in one
//! process: the demo runs on it, and so do the controller tests and benchmarks, so that they all
//! start the simulator, the webhook and the controllers the same way.
//!
//! The webhook is registered as the chart registers it: two webhooks, one selecting pods that
//! carry the restore label, one selecting pods in namespaces carrying the restore-namespace label
//! (and not the pod label), the chart's excluded namespaces, `failurePolicy: Fail`, the chart's
//! 5 s timeout and `reinvocationPolicy: IfNeeded`. What differs: `clientConfig.url` instead of
//! `clientConfig.service` (there is no Service network here), the certificate comes from a
//! throwaway CA made in memory instead of cert-manager, and the simulator does not evaluate the
//! chart's CEL `matchConditions` (mirror pods are excluded by the server as well).
//!
//! The module is long because it is the one shared setup (simulator, PKI, webhook registration,
//! controllers, pending-pod fixtures) that would otherwise be copied into every caller.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use restore_hooks_core::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecPlan, ExecStatus, PLAN_ANNOTATION, PlannedHook,
    RESTORE_RUN_LABEL, STATUS_ANNOTATION,
};
use restore_hooks_core::hooks::signing::{PLAN_SIGNATURE_ANNOTATION, PlanKeys, PodBinding};
use restore_hooks_testkit::ThrowawayCa;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::Readiness;
use crate::catalog::{HookIndex, SharedIndex};
use crate::cli::{ControllerArgs, WebhookArgs};
use crate::config::EngineConfig;
use crate::controller::exec::Exec;
use crate::controller::{self, ControllerDeps};
use crate::metrics::Metrics;
use crate::plan_key::KeyRing;
use crate::webhook::exec_rights::ExecRights;
use crate::webhook::{Bound, WebhookSources};

/// Namespaces the chart never sends to the webhook (besides its own).
pub const EXCLUDED_NAMESPACES: [&str; 3] = ["kube-system", "kube-node-lease", "restore-hooks"];
/// The restore every [`Testbed::planned_pod`] belongs to.
pub const RESTORE: &str = "nightly-1";

/// What [`Testbed::start`] sets up. The default runs the kubelet, without the webhook.
#[derive(Clone, Debug)]
pub struct TestbedOptions {
    /// Run the simulator's kubelet (pods' containers come up).
    pub kubelet: bool,
    /// Serve the webhook and register it.
    pub webhook: bool,
    /// The engine config of the whole installation (the index's watch, the webhook and every
    /// controller); the default's excluded namespaces are [`EXCLUDED_NAMESPACES`].
    pub engine: EngineConfig,
    /// Where the simulated pods run (a temporary directory when `None`).
    pub workdir: Option<PathBuf>,
    /// Install Velero's `Restore` CRD (schema-less) and its namespace, as a Velero install would.
    pub velero: bool,
}

impl Default for TestbedOptions {
    fn default() -> Self {
        Self {
            kubelet: true,
            webhook: false,
            engine: EngineConfig {
                excluded_namespaces: EXCLUDED_NAMESPACES.map(String::from).to_vec(),
                ..EngineConfig::default()
            },
            workdir: None,
            velero: false,
        }
    }
}

/// A running installation: the simulator, the hook index's watch and, if asked, the webhook.
/// Controllers are started separately ([`Testbed::start_controller`]); end with
/// [`Testbed::stop`].
pub struct Testbed {
    /// The simulator itself (pod directories, shutdown).
    pub sim: kube_sim::SimHandle,
    /// A client of the simulator: the index's watch, the webhook and the controllers use it too.
    pub client: Client,
    /// The installation's plan key (the webhook signs with it, controllers verify with it).
    pub keys: Arc<PlanKeys>,
    /// Its raw bytes, for a controller run as a separate process (`--plan-key-file`).
    key_bytes: Vec<u8>,
    /// Hook objects and namespace labels as the installation sees them.
    pub index: Arc<SharedIndex>,
    /// The webhook's metrics.
    pub metrics: Metrics,
    /// [`TestbedOptions::engine`]: what the webhook and each controller are given.
    pub engine: EngineConfig,
    /// `https://…/mutate` of the webhook, when serving.
    pub webhook_url: Option<String>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    _workdir: Option<tempfile::TempDir>,
}

/// A running controller of the testbed.
pub struct ControllerHandle {
    /// Its name in the Lease (`--identity`).
    pub identity: String,
    /// Its own metrics, apart from the webhook's and other controllers'.
    pub metrics: Metrics,
    /// Cancelled to stop it as SIGTERM would (see [`Self::stop`]).
    pub shutdown: CancellationToken,
    /// The controller's task: its result once it has stopped.
    pub task: JoinHandle<anyhow::Result<()>>,
}

impl ControllerHandle {
    /// Stops it as SIGTERM would, and returns its result.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .context("the controller did not stop within 30 s")?
            .context("the controller task panicked")?
    }

    /// Kills it mid-run (a crash): nothing is released or recorded.
    pub fn kill(self) {
        self.task.abort();
    }

    /// Hooks that ended with `result` (`succeeded`, `failed`, `skipped`).
    pub fn hooks(&self, result: &str) -> u64 {
        self.metrics.exec_hooks.with_label_values(&[result]).get()
    }

    /// [`Self::hooks`] once it has reached `at_least`: the counters are bumped after the status
    /// write a test observes, so reading them right after it races the controller.
    pub async fn hooks_reaching(&self, result: &str, at_least: u64) -> u64 {
        eventually!(format!("{at_least} {result} hook(s) counted"), {
            let n = self.hooks(result);
            (n >= at_least).then_some(n)
        })
    }

    /// Whether it holds the Lease now (its `restore_hooks_leader` gauge).
    pub fn is_leader(&self) -> bool {
        self.metrics.leader.get() == 1
    }
}

impl Testbed {
    /// Starts the simulator with the CRDs, the hook index's watch, the installation's namespace
    /// `restore-hooks` and, with `options.webhook`, the webhook registered as the chart registers
    /// it; returns once the index has its initial lists. No controller runs yet.
    pub async fn start(options: TestbedOptions) -> anyhow::Result<Self> {
        crate::install_crypto_provider();
        let (workdir, tempdir) = match options.workdir {
            Some(dir) => (dir, None),
            None => {
                let t = tempfile::tempdir().context("creating the testbed's work directory")?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let sim = kube_sim::start(kube_sim::SimOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            workdir: workdir.join("cluster"),
            kubelet: options.kubelet,
        })
        .await
        .context("starting the API-server simulator")?;
        let client = sim.client().await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crate::crd::all() {
            crds.create(&PostParams::default(), &crd)
                .await
                .with_context(|| {
                    format!(
                        "creating CRD {}",
                        crd.metadata.name.clone().unwrap_or_default()
                    )
                })?;
        }
        if options.velero {
            // Only what the watch of Velero Restores needs: the kind, its scope and the status
            // subresource Velero writes through.
            let crd: CustomResourceDefinition = serde_json::from_value(json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "restores.velero.io"},
                "spec": {"group": "velero.io", "scope": "Namespaced",
                         "names": {"kind": "Restore", "plural": "restores", "singular": "restore",
                                   "listKind": "RestoreList"},
                         "versions": [{"name": "v1", "served": true, "storage": true,
                                       "subresources": {"status": {}},
                                       "schema": {"openAPIV3Schema": {"type": "object",
                                           "x-kubernetes-preserve-unknown-fields": true}}}]},
            }))?;
            crds.create(&PostParams::default(), &crd)
                .await
                .context("creating Velero's Restore CRD")?;
        }
        let key_bytes = crate::plan_key::generate()?;
        let keys = Arc::new(PlanKeys::new(&key_bytes, None).map_err(|e| anyhow::anyhow!("{e}"))?);
        let shutdown = CancellationToken::new();
        let metrics = Metrics::new();
        let index = SharedIndex::new(HookIndex::new());
        let mut tasks = vec![tokio::spawn({
            let stop = shutdown.clone();
            let watch = crate::catalog::cluster::watch_into(
                client.clone(),
                &options.engine,
                index.clone(),
                metrics.clone(),
            );
            async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = watch => {}
                }
            }
        })];
        let mut bed = Testbed {
            sim,
            client,
            keys,
            key_bytes,
            index,
            metrics,
            engine: options.engine,
            webhook_url: None,
            shutdown,
            tasks: Vec::new(),
            _workdir: tempdir,
        };
        bed.tasks.append(&mut tasks);
        // The installation's own namespace (the Lease lives there), as the chart creates it.
        bed.create_namespace("restore-hooks", json!({})).await?;
        if options.velero {
            let velero = bed.engine.velero_namespace.clone();
            bed.create_namespace(&velero, json!({})).await?;
        }
        if options.webhook {
            bed.serve_webhook(&workdir.join("tls")).await?;
        }
        bed.wait_synced().await?;
        Ok(bed)
    }

    /// The plan key as the webhook and the controllers take it (never rotated).
    pub fn key_ring(&self) -> KeyRing {
        KeyRing::fixed((*self.keys).clone())
    }

    /// Writes the plan key to `path`, for `restore-hooks controller --plan-key-file` (the real
    /// binary, run as its own process, then runs the plans [`Self::planned_pod`] signs).
    pub fn write_plan_key(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, &self.key_bytes)
    }

    async fn serve_webhook(&mut self, tls_dir: &Path) -> anyhow::Result<()> {
        let pki = Pki::new().context("making the test CA")?;
        std::fs::create_dir_all(tls_dir)?;
        std::fs::write(tls_dir.join("tls.crt"), &pki.cert_pem)?;
        std::fs::write(tls_dir.join("tls.key"), &pki.key_pem)?;
        let args = WebhookArgs {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls_dir: tls_dir.to_path_buf(),
            tls_reload_interval: Duration::from_secs(10),
            shutdown_delay: Duration::ZERO,
            shutdown_grace: Duration::from_secs(1),
        };
        let sources = WebhookSources {
            index: self.index.clone(),
            keys: self.key_ring(),
            namespaces: Some(Api::all(self.client.clone())),
            exec_rights: Arc::new(ExecRights::api(self.client.clone(), &self.metrics)),
        };
        let bound = Bound::bind(
            &args,
            sources,
            self.engine.clone(),
            self.metrics.clone(),
            Readiness::new(),
        )
        .context("starting the webhook")?;
        let base = format!("https://{}", bound.local_addr());
        let stop = self.shutdown.clone();
        self.tasks.push(tokio::spawn(async move {
            if let Err(e) = bound.serve(stop).await {
                eprintln!("webhook: {e}");
            }
        }));
        self.tasks
            .push(tokio::spawn(crate::webhook::observed::report(
                self.client.clone(),
                self.index.clone(),
                "testbed-webhook".to_string(),
                self.shutdown.clone(),
            )));
        register_webhooks(&self.client, &base, &pki.ca_pem, &self.engine).await?;
        self.webhook_url = Some(format!("{base}/mutate"));
        Ok(())
    }

    /// Waits until the index has its initial lists (the webhook decides from it).
    pub async fn wait_synced(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while !self.index.is_synced() {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the watch caches did not sync"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Controller flags for tests: short Lease, generous slots.
    pub fn controller_args(&self) -> ControllerArgs {
        ControllerArgs {
            max_concurrent_execs: 16,
            max_concurrent_execs_per_namespace: None,
            inherited_exec_grace: Duration::from_secs(2),
            late_hook_window: Duration::from_secs(30 * 60),
            unmutated_lookback: None,
            label_restore_namespaces: true,
            restore_run_retention: Duration::from_secs(7 * 24 * 3600),
            lease_name: "restore-hooks-controller".into(),
            lease_namespace: "restore-hooks".into(),
            lease_duration: Duration::from_secs(2),
        }
    }

    /// Starts a controller; `exec: None` execs through the simulator's pods/exec.
    pub fn start_controller(
        &self,
        identity: &str,
        args: ControllerArgs,
        exec: Option<Arc<dyn Exec>>,
    ) -> ControllerHandle {
        let metrics = Metrics::new();
        let shutdown = CancellationToken::new();
        let deps = ControllerDeps {
            client: self.client.clone(),
            args,
            engine: self.engine.clone(),
            metrics: metrics.clone(),
            identity: identity.to_string(),
            index: self.index.clone(),
            keys: self.key_ring(),
            shutdown: shutdown.clone(),
        };
        let task = match exec {
            Some(exec) => tokio::spawn(controller::run_with_exec(deps, exec)),
            None => tokio::spawn(controller::run(deps)),
        };
        ControllerHandle {
            identity: identity.to_string(),
            metrics,
            shutdown,
            task,
        }
    }

    /// Creates a namespace with `labels` (a JSON object). One that exists already is left as it
    /// is, its labels unchanged.
    pub async fn create_namespace(&self, name: &str, labels: Value) -> anyhow::Result<()> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}
        }))?;
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
        }
    }

    /// A pod exactly as the webhook leaves it for restore [`RESTORE`]: a signed plan with these
    /// hooks and the `pending` label, the restore and restore-run labels, app containers `app`
    /// and `db`; `extra` is merged in.
    pub fn planned_pod(
        &self,
        namespace: &str,
        name: &str,
        hooks: Vec<PlannedHook>,
        extra: Value,
    ) -> Pod {
        let plan = ExecPlan {
            id: crate::plan_key::new_plan_id().expect("random plan id"),
            restore: RESTORE.into(),
            issued_at: Some(restore_hooks_core::exec_step::timestamp(
                jiff::Timestamp::now(),
            )),
            hooks,
            ..ExecPlan::default()
        };
        let text = plan.to_annotation();
        let signature = self.keys.sign_plan(
            PodBinding {
                namespace,
                name,
                generate_name: "",
            },
            &text,
        );
        let mut v = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": namespace,
                "labels": {
                    EXEC_LABEL: EXEC_PENDING, "app": "shop",
                    self.engine.restore_label.as_str(): RESTORE, RESTORE_RUN_LABEL: RESTORE,
                },
                "annotations": {PLAN_ANNOTATION: text, PLAN_SIGNATURE_ANNOTATION: signature},
            },
            "spec": {"containers": [
                {"name": "app", "image": "shop:1"},
                {"name": "db", "image": "postgres:16"},
            ]}
        });
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).expect("a valid pod")
    }

    /// Creates a pod (e.g. one from [`Self::planned_pod`]).
    pub async fn create_pod(&self, pod: &Pod) -> anyhow::Result<Pod> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        pods.create(&PostParams::default(), pod)
            .await
            .with_context(|| {
                format!(
                    "creating pod {namespace}/{}",
                    pod.metadata.name.as_deref().unwrap_or_default()
                )
            })
    }

    /// The pod's recorded hook status now (`None` if it has none or the read failed).
    pub async fn status_of(&self, namespace: &str, name: &str) -> Option<ExecStatus> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        pods.get_opt(name)
            .await
            .ok()
            .flatten()
            .as_ref()
            .and_then(exec_status)
    }

    /// Events about a pod, as (reason, message, reporting instance), oldest first.
    pub async fn pod_events(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Vec<(String, String, String)>> {
        let api: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(self.client.clone(), namespace);
        let mut list: Vec<_> = api
            .list(&kube::api::ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect();
        // The simulator's resourceVersions are one global counter: creation order.
        list.sort_by_key(|e| {
            e.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        });
        Ok(list
            .into_iter()
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                    e.reporting_instance.unwrap_or_default(),
                )
            })
            .collect())
    }

    /// Waits until the pod is labelled `done` or `failed`; returns the label and status.
    pub async fn finished(&self, namespace: &str, name: &str) -> (String, Option<ExecStatus>) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        loop {
            // Errors are retried: some tests inject API faults that the test's own reads may hit.
            if let Ok(Some(p)) = pods.get_opt(name).await {
                let label = exec_label(&p);
                if !label.is_empty() && label != EXEC_PENDING {
                    return (label, exec_status(&p));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The directory a simulated pod runs in (its exec commands' working directory).
    pub fn pod_dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.sim.pod_dir(namespace, name)
    }

    /// Stops its own tasks (the watch, the webhook), giving each up to 5 s, then the simulator.
    /// Controllers have their own shutdown: stop them first ([`ControllerHandle::stop`]).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        for t in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        self.sim.shutdown().await;
    }
}

/// A hook as the webhook plans it, running `script` with `/bin/sh -c` in `container`:
/// `onError: Continue`, a 10 s exec timeout, no wait limit, no readiness gate.
pub fn sh_hook(name: &str, container: &str, script: &str) -> PlannedHook {
    PlannedHook {
        name: name.into(),
        source: format!("restorehook/{name}"),
        index: 0,
        container: container.into(),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        on_error: restore_hooks_core::hooks::plan::OnError::Continue,
        exec_timeout_ms: 10_000,
        wait_timeout_ms: None,
        wait_for_ready: false,
        allowed_by: None,
        refused: None,
        invalid: None,
        run_on: Default::default(),
        after: Vec::new(),
        retry: None,
        ephemeral: None,
    }
}

/// The workspace's one way to wait (see `restore_hooks_testkit`): `eventually!(what, probe)`.
pub use restore_hooks_testkit::{GUARD, eventually};

/// Runs a test body under a limit, so that a hang fails the test instead of blocking CI.
pub async fn bounded(limit: Duration, f: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(limit, f)
        .await
        .expect("the test finished within its limit");
}

/// Logs to the test's output when `RUST_LOG` is set (`RUST_LOG=restore_hooks=debug`).
pub fn log_from_env() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// The controller's record of restore `restore` as the API server holds it: every part's entries,
/// by pod uid (docs/behaviour.md §9.5). Empty when there is none yet.
pub async fn recorded(
    client: &Client,
    restore: &str,
) -> kube::Result<std::collections::BTreeMap<String, restore_hooks_core::ledger::Execution>> {
    let run = restore_hooks_core::restore::tally::restore_run_name(restore);
    let parts: Api<restore_hooks_core::hooks::types::RestoreRecord> = Api::all(client.clone());
    let mut entries = std::collections::BTreeMap::new();
    for part in parts.list(&Default::default()).await? {
        if part.spec.restore_run == run {
            entries.extend(part.status.unwrap_or_default().executions);
        }
    }
    Ok(entries)
}

/// The pod's `restore-hooks.dev/exec` label (empty when absent).
pub fn exec_label(p: &Pod) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EXEC_LABEL))
        .cloned()
        .unwrap_or_default()
}

/// The pod's recorded hook status, if any (unverified: for display and assertions).
pub fn exec_status(p: &Pod) -> Option<ExecStatus> {
    p.metadata
        .annotations
        .as_ref()?
        .get(STATUS_ANNOTATION)
        .and_then(|s| ExecStatus::from_annotation(s).ok())
}

/// Registers the webhook as the chart does (see the module doc for what differs).
async fn register_webhooks(
    client: &Client,
    base: &str,
    ca_pem: &str,
    engine: &EngineConfig,
) -> anyhow::Result<()> {
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let webhook = |which: &str, path: &str| {
        let mut namespace_rules = vec![json!({
            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": EXCLUDED_NAMESPACES,
        })];
        if which == "namespace-label" {
            namespace_rules.insert(
                0,
                json!({"key": engine.restore_namespace_label, "operator": "Exists"}),
            );
        }
        json!({
            "name": format!("{which}.restore-hooks.restore-hooks.dev"),
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "matchPolicy": "Equivalent",
            "clientConfig": {"url": format!("{base}{path}"), "caBundle": ca},
            "rules": [{
                "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["pods"], "scope": "Namespaced"
            }],
            "namespaceSelector": {"matchExpressions": namespace_rules},
            "objectSelector": {"matchExpressions": [{
                "key": engine.restore_label,
                "operator": if which == "pod-label" { "Exists" } else { "DoesNotExist" },
            }]},
        })
    };
    let config: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "restore-hooks"},
        "webhooks": [
            webhook("pod-label", crate::webhook::server::MUTATE_POD_LABEL_PATH),
            webhook("namespace-label", crate::webhook::server::MUTATE_NAMESPACE_LABEL_PATH),
        ]
    }))?;
    api.create(&PostParams::default(), &config)
        .await
        .context("registering the MutatingWebhookConfiguration")?;
    Ok(())
}

/// A CA and a serving certificate for 127.0.0.1 and localhost, in memory.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new() -> anyhow::Result<Self> {
        let ca = ThrowawayCa::root("restore-hooks testbed CA")?;
        let leaf = ca.issue(&["127.0.0.1", "localhost"])?;
        Ok(Self {
            ca_pem: ca.cert_pem(),
            cert_pem: leaf.chain_pem,
            key_pem: leaf.key_pem,
        })
    }
}
