//! `restore-hooks demo`: the whole flow on the built-in API-server simulator, in one process.
//!
//! It starts the simulator (`kube-sim`), the HTTPS webhook (certificate from a throwaway CA made
//! in memory, registered through a MutatingWebhookConfiguration, exactly as the chart does with
//! cert-manager) and the controller; restores a small "database" into a namespace labelled as a
//! restore namespace; prints every step as it happens; and checks that everything behaved as
//! designed. Exit code 0 means it did; otherwise the error says what did not.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use base64::Engine as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, CustomResourceExt};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::Readiness;
use crate::catalog::HookCatalog;
use crate::catalog::cluster::ClusterCatalog;
use crate::cli::{ControllerArgs, DemoArgs, WebhookArgs};
use crate::config::EngineConfig;
use crate::controller::{self, ControllerDeps};
use crate::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecStatus, HookPhase, INJECTED_ANNOTATION, PLAN_ANNOTATION,
    STATUS_ANNOTATION,
};
use crate::hooks::types::RestoreHook;
use crate::metrics::Metrics;
use crate::webhook::WebhookServer;

const NAMESPACE: &str = "shop";
const RESTORE: &str = "demo-restore";
const POD: &str = "postgres-0";
const RESTORE_HOOK: &str = "postgres-rehydrate";
/// The whole demo must end well within this.
const LIMIT: Duration = Duration::from_secs(30);

/// Runs the demo, printing to standard output.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    crate::install_crypto_provider();
    if args.verbose {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info,kube_sim=info,restore_hooks=info")
            .with_writer(std::io::stderr)
            .try_init();
    }
    let workdir = tempfile::tempdir().context("creating the demo's work directory")?;
    let mut demo = Demo::start(workdir.path(), args.verbose).await?;
    let result = tokio::time::timeout(LIMIT, demo.restore()).await;
    demo.stop().await;
    match result {
        Ok(Ok(())) => {
            println!("\nrestore-hooks demo: everything behaved as designed.");
            Ok(())
        }
        Ok(Err(e)) => Err(e.context("the demo did not behave as designed")),
        Err(_) => bail!("the demo did not finish within {LIMIT:?}"),
    }
}

struct Demo {
    sim: Option<kube_sim::SimHandle>,
    client: Client,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    controller: Option<JoinHandle<anyhow::Result<()>>>,
    catalog: ClusterCatalog,
    metrics: Metrics,
    started: Instant,
}

impl Demo {
    async fn start(workdir: &Path, verbose: bool) -> anyhow::Result<Self> {
        let started = Instant::now();
        println!("restore-hooks demo: the webhook and the controller on a simulated cluster\n");
        let sim = kube_sim::start(kube_sim::SimOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            workdir: workdir.join("cluster"),
            kubelet: true,
        })
        .await
        .context("starting the API-server simulator")?;
        let client = sim.client().await;
        step(
            started,
            &format!(
                "simulated API server at {} (pods run in {})",
                sim.url(),
                workdir.join("cluster").display()
            ),
        );

        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        // Print the simulated cluster's own steps as they happen.
        {
            let mut log = sim.subscribe_log();
            let stop = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        ev = log.recv() => match ev {
                            Ok(ev) => print_sim_event(started, &ev, verbose),
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(_) => return,
                        }
                    }
                }
            }));
        }

        // The CRD first, so that the webhook's RestoreHook cache can list it.
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &RestoreHook::crd())
            .await
            .context("creating the RestoreHook CRD")?;
        step(
            started,
            "installed the RestoreHook CRD (restorehooks.restore-hooks.dev)",
        );

        // The webhook: a throwaway CA and serving certificate, as cert-manager would issue.
        let metrics = Metrics::new();
        let engine = EngineConfig::default();
        let (catalog, driver) = ClusterCatalog::start(client.clone(), &engine);
        tasks.push(tokio::spawn(driver));
        let pki = Pki::new().context("making the demo CA")?;
        let tls_dir = workdir.join("tls");
        std::fs::create_dir_all(&tls_dir)?;
        std::fs::write(tls_dir.join("tls.crt"), &pki.cert_pem)?;
        std::fs::write(tls_dir.join("tls.key"), &pki.key_pem)?;
        let webhook_args = WebhookArgs {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls_dir,
            tls_reload_interval: Duration::from_secs(10),
            shutdown_delay: Duration::ZERO,
            shutdown_grace: Duration::from_secs(1),
        };
        let bound = WebhookServer::bind(
            &webhook_args,
            Arc::new(catalog.clone()),
            engine.clone(),
            metrics.clone(),
            Readiness::new(),
        )
        .context("starting the webhook")?;
        let url = format!("https://{}/mutate", bound.local_addr());
        {
            let stop = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = bound.serve(stop).await {
                    eprintln!("webhook: {e}");
                }
            }));
        }
        register_webhook(&client, &url, &pki.ca_pem).await?;
        step(
            started,
            &format!(
                "webhook serving {url} with a certificate from a throwaway CA; MutatingWebhookConfiguration registered with that CA bundle"
            ),
        );

        let controller = tokio::spawn(controller::run(ControllerDeps {
            client: client.clone(),
            args: ControllerArgs {
                max_concurrent_pods: 4,
                lease_name: "restore-hooks-controller".into(),
                lease_namespace: "default".into(),
                identity: Some("demo-controller".into()),
                lease_duration: Duration::from_secs(15),
            },
            engine,
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
        }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while metrics.leader.get() != 1 {
            ensure!(
                Instant::now() < deadline,
                "the controller did not acquire its Lease"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        step(
            started,
            "controller running and leading (Lease default/restore-hooks-controller)",
        );
        Ok(Self {
            sim: Some(sim),
            client,
            shutdown,
            tasks,
            controller: Some(controller),
            catalog,
            metrics,
            started,
        })
    }

    /// The restore: namespace, RestoreHook, pod; then watch it through and check the outcome.
    async fn restore(&mut self) -> anyhow::Result<()> {
        let t0 = self.started;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": NAMESPACE, "labels": {"restore-hooks.dev/restore": RESTORE}}
                }))?,
            )
            .await
            .context("creating the namespace")?;
        step(
            t0,
            &format!(
                "namespace {NAMESPACE} labelled restore-hooks.dev/restore={RESTORE}: pods created in it are restored pods"
            ),
        );

        let hooks: Api<RestoreHook> = Api::namespaced(self.client.clone(), NAMESPACE);
        let rh: RestoreHook = serde_json::from_value(json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": RESTORE_HOOK, "namespace": NAMESPACE},
            "spec": {
                "restores": ["demo-*"],
                "labelSelector": {"matchLabels": {"app": "postgres"}},
                "postHooks": [
                    {"exec": {
                        "container": "db",
                        "command": ["/bin/sh", "-c", "cat restored.txt && echo 'rows: 42' > rehydrated.txt && echo rehydrated"],
                        "onError": "Fail",
                        "waitTimeout": "20s",
                        "execTimeout": "10s"
                    }},
                    {"exec": {
                        "container": "db",
                        "command": ["/bin/sh", "-c", "echo analyze: $(cat rehydrated.txt)"],
                        "waitForReady": true
                    }}
                ]
            }
        }))?;
        hooks
            .create(&PostParams::default(), &rh)
            .await
            .context("creating the RestoreHook")?;
        step(
            t0,
            &format!(
                "RestoreHook {NAMESPACE}/{RESTORE_HOOK}: exec #0 (onError: Fail) rehydrates from the file the init hook wrote, exec #1 (waitForReady) analyzes"
            ),
        );
        // The webhook decides from watch caches: wait until they have seen both objects.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.catalog.namespace_labels(NAMESPACE).is_none()
            || self.catalog.restore_hooks(NAMESPACE).is_empty()
            || !self.catalog.is_synced()
        {
            ensure!(
                Instant::now() < deadline,
                "the webhook's caches did not see the namespace and the RestoreHook"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": POD, "namespace": NAMESPACE,
                "labels": {"app": "postgres"},
                "annotations": {
                    "init.hook.restore.velero.io/container-image": "busybox:1.36",
                    "init.hook.restore.velero.io/command":
                        "[\"/bin/sh\", \"-c\", \"echo restored from backup > restored.txt; echo wrote restored.txt\"]",
                    "sim.kube/ready-after": "500ms"
                }
            },
            "spec": {"containers": [{"name": "db", "image": "postgres:16"}]}
        }))?;
        step(
            t0,
            &format!(
                "restoring pod {NAMESPACE}/{POD} (Velero init hook annotations: image busybox, a command writing restored.txt)"
            ),
        );
        pods.create(&PostParams::default(), &pod)
            .await
            .context("creating the pod (admission through the webhook)")?;

        // Follow the hook status until the controller labels the pod: a watch, so that every
        // recorded phase (Running before each exec, then the result) is shown.
        let mut updates = watcher(
            pods.clone(),
            watcher::Config::default().labels("app=postgres"),
        )
        .default_backoff()
        .applied_objects()
        .boxed();
        let mut shown: BTreeMap<usize, HookPhase> = BTreeMap::new();
        let (pod, status) = loop {
            let p = match updates.next().await {
                Some(Ok(p)) if p.metadata.name.as_deref() == Some(POD) => p,
                Some(_) => continue,
                None => bail!("the pod watch ended"),
            };
            let status = read_status(&p)?;
            if let Some(st) = &status {
                for (i, h) in st.hooks.iter().enumerate() {
                    if shown.get(&i) == Some(&h.phase) {
                        continue;
                    }
                    shown.insert(i, h.phase);
                    match h.phase {
                        HookPhase::Pending => {}
                        HookPhase::Running => step(
                            t0,
                            &format!(
                                "controller: hook #{i} {} in container {}: Running (recorded before the exec)",
                                h.name, h.container
                            ),
                        ),
                        _ => step(
                            t0,
                            &format!(
                                "controller: hook #{i} {}: {:?}{}{}{}",
                                h.name,
                                h.phase,
                                h.exit_code
                                    .map(|c| format!(" (exit {c})"))
                                    .unwrap_or_default(),
                                if h.message.is_empty() {
                                    String::new()
                                } else {
                                    format!(": {}", h.message)
                                },
                                if h.stdout.is_empty() {
                                    String::new()
                                } else {
                                    format!("; stdout: {}", one_line(&h.stdout))
                                },
                            ),
                        ),
                    }
                }
            }
            let label = label(&p);
            if label != EXEC_PENDING {
                step(
                    t0,
                    &format!("controller: all hooks ended; label {EXEC_LABEL}={label}"),
                );
                break (p, status);
            }
        };
        drop(updates);

        self.check(&pod, status.as_ref()).await
    }

    /// Everything the demo promises, checked; the first deviation is the error.
    async fn check(&self, pod: &Pod, status: Option<&ExecStatus>) -> anyhow::Result<()> {
        let injected = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INJECTED_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        ensure!(
            !injected.is_empty(),
            "the webhook did not inject the init container (no {INJECTED_ANNOTATION} annotation)"
        );
        ensure!(
            pod.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(PLAN_ANNOTATION)),
            "the webhook did not write the exec plan"
        );
        let sim = self.sim.as_ref().expect("running");
        let dir = sim.pod_dir(NAMESPACE, POD);
        let restored = std::fs::read_to_string(dir.join("restored.txt")).unwrap_or_default();
        ensure!(
            restored.trim() == "restored from backup",
            "the init container did not write restored.txt"
        );
        let status = status.context("the controller wrote no hook status")?;
        let phases: Vec<HookPhase> = status.hooks.iter().map(|h| h.phase).collect();
        ensure!(
            phases == [HookPhase::Succeeded, HookPhase::Succeeded],
            "expected both hooks Succeeded, got {phases:?}"
        );
        ensure!(
            status.hooks[0].stdout.contains("restored from backup"),
            "hook #0 did not read the file the init container wrote"
        );
        ensure!(
            status.hooks[1].stdout.contains("rows: 42"),
            "hook #1 did not run after hook #0"
        );
        ensure!(label(pod) == "done", "the pod is not labelled done");

        // Events and the RestoreHook status are written just after the label: give them a moment.
        let events: Api<Event> = Api::namespaced(self.client.clone(), NAMESPACE);
        let hooks: Api<RestoreHook> = Api::namespaced(self.client.clone(), NAMESPACE);
        let deadline = Instant::now() + Duration::from_secs(5);
        let (reasons, counts) = loop {
            let mut listed: Vec<Event> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(POD))
                .collect();
            // Lists come in name order (random generated names): show them as they happened.
            listed.sort_by_key(|e| {
                let rv = e.metadata.resource_version.as_deref().unwrap_or("");
                (
                    e.event_time.as_ref().map(|t| t.0),
                    rv.parse::<u64>().unwrap_or(0),
                )
            });
            let reasons: Vec<String> = listed.into_iter().filter_map(|e| e.reason).collect();
            let counts = hooks.get(RESTORE_HOOK).await?.status.map(|s| {
                (
                    s.pods_planned,
                    s.hooks.succeeded,
                    s.hooks.failed,
                    s.hooks.pending,
                )
            });
            if (reasons.iter().any(|r| r == "HooksCompleted") && counts == Some((1, 2, 0, 0)))
                || Instant::now() > deadline
            {
                break (reasons, counts);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        ensure!(
            reasons.iter().filter(|r| *r == "HookSucceeded").count() == 2
                && reasons.iter().any(|r| r == "HooksCompleted"),
            "expected Events HookSucceeded x2 and HooksCompleted on the pod, got {reasons:?}"
        );
        ensure!(
            counts == Some((1, 2, 0, 0)),
            "RestoreHook status: expected podsPlanned 1, succeeded 2, got {counts:?}"
        );
        step(
            self.started,
            &format!("Events on the pod: {}", reasons.join(", ")),
        );
        step(
            self.started,
            &format!(
                "RestoreHook {NAMESPACE}/{RESTORE_HOOK} status: podsPlanned 1, hooks succeeded 2, failed 0, pending 0"
            ),
        );

        println!("\nSummary ({NAMESPACE}/{POD}, restore {RESTORE}):");
        println!(
            "  {:<3} {:<20} {:<10} {:<10} {:<5} stdout",
            "#", "hook", "container", "result", "exit"
        );
        for (i, h) in status.hooks.iter().enumerate() {
            println!(
                "  {:<3} {:<20} {:<10} {:<10} {:<5} {}",
                i,
                h.name,
                h.container,
                format!("{:?}", h.phase),
                h.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                one_line(&h.stdout)
            );
        }
        println!("  init containers injected: {injected}");
        let m = &self.metrics;
        println!(
            "  metrics: admission requests patched {}, exec hooks succeeded {}, failed {}",
            m.admission_requests.with_label_values(&["patched"]).get(),
            m.exec_hooks.with_label_values(&["succeeded"]).get(),
            m.exec_hooks.with_label_values(&["failed"]).get(),
        );
        println!("  elapsed: {:.1?}", self.started.elapsed());
        Ok(())
    }

    async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(c) = self.controller.take() {
            match tokio::time::timeout(Duration::from_secs(10), c).await {
                Ok(Ok(Err(e))) => eprintln!("controller: {e:#}"),
                Err(_) => eprintln!("controller: did not stop in time"),
                _ => {}
            }
        }
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        if let Some(sim) = self.sim.take() {
            sim.shutdown().await;
        }
    }
}

async fn register_webhook(client: &Client, url: &str, ca_pem: &str) -> anyhow::Result<()> {
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let config: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "restore-hooks"},
        "webhooks": [{
            "name": "pods.restore-hooks.dev",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "timeoutSeconds": 10,
            "clientConfig": {
                "url": url,
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            },
            "rules": [{
                "operations": ["CREATE"],
                "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                "scope": "Namespaced"
            }]
        }]
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
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "restore-hooks demo CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "restore-hooks webhook");
        let key = KeyPair::generate()?;
        let cert = leaf.signed_by(&key, &ca)?;
        Ok(Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn read_status(p: &Pod) -> anyhow::Result<Option<ExecStatus>> {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATUS_ANNOTATION))
        .map(|s| ExecStatus::from_annotation(s).context("reading the hook status"))
        .transpose()
}

fn label(p: &Pod) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EXEC_LABEL))
        .cloned()
        .unwrap_or_default()
}

fn step(started: Instant, text: &str) {
    println!("[{:>5.2}s] {text}", started.elapsed().as_secs_f64());
}

fn one_line(s: &str) -> String {
    s.trim_end().replace('\n', " | ")
}

fn print_sim_event(started: Instant, ev: &kube_sim::SimEvent, verbose: bool) {
    use kube_sim::SimEventKind as K;
    let relevant = ev.namespace == NAMESPACE || verbose;
    if !relevant {
        return;
    }
    match ev.kind {
        K::Admission => {
            // "webhook "x" patched (N ops): [ ...ops... ]": one line per operation.
            if let Some((head, ops)) = ev.message.split_once(": [")
                && let Ok(Value::Array(ops)) = serde_json::from_str::<Value>(&format!("[{ops}"))
            {
                step(
                    started,
                    &format!("cluster: admission of {}/{}: {head}", ev.namespace, ev.name),
                );
                for op in ops {
                    let value = op.get("value").map(abbreviate).unwrap_or_default();
                    println!(
                        "           {} {} {}",
                        op.get("op").and_then(Value::as_str).unwrap_or("?"),
                        op.get("path").and_then(Value::as_str).unwrap_or("?"),
                        value
                    );
                }
                return;
            }
            step(started, &format!("cluster: {ev}"));
        }
        _ => step(started, &format!("cluster: {ev}")),
    }
}

fn abbreviate(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.chars().count() > 110 {
        format!("{}…", s.chars().take(110).collect::<String>())
    } else {
        s
    }
}
