//! The references the restore bench measures in the same run as the chart, on the same machine
//! and the same API server, so that its goals are ratios rather than figures of one machine:
//!
//! - an exec probe: `true` through the API server into a pod of its own, every 5 s, whose round
//!   trip prices each hook of the fair makespan bound ([`fair_makespan`]);
//! - a reactor: a watch on the bench's pods that, when it first sees one Running, writes once:
//!   the latency of reacting to Running with one acknowledged write, which the controller's
//!   Running → first hook start (two writes, then the exec) is held against. It creates a
//!   ConfigMap in its own namespace rather than patching the pod: a patch of the pod (an
//!   annotation the chart ignores) changes its resourceVersion while the controller writes its
//!   `Running` record with a precondition, and in a 200-pod run 39 of those writes conflicted
//!   and were read and sent again (+0.1 `get pods` and +0.1 `patch pods` per hook): the
//!   reference disturbed what it is held against;
//! - the exec slots' queue: the controller's `restore_hooks_exec_slot_waiting` gauge sampled
//!   every second; its integral over the restore divided by the hooks is the mean wait for a
//!   slot (Little's law), as the controller exposes no per-hook slot wait;
//! - reference admission webhooks: two that allow without a patch and one that adds one
//!   annotation, served from this process (axum and rustls, the chart's test certificate) and
//!   registered with the same rules, selectors and match conditions as the chart's entries, in
//!   configurations that sort before and after the chart's (the API server calls them in name
//!   order).
//!
//! The reactor and the probe act as a ServiceAccount of their own namespace: their requests are
//! classified by API Priority and Fairness as the chart's are (`service-accounts`), not as the
//! admin's (`exempt`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, AttachParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::real::{self, Install};
use super::{BENCH_LABEL, Histogram, lock, secs_between};

/// The references' namespace: unlabelled, so the chart's webhooks never see its probe pod.
pub const NAMESPACE: &str = "restore-bench";
/// The references' ServiceAccount (a ClusterRole on pods only).
const IDENTITY: &str = "bench-reference";
const PROBE_POD: &str = "probe";
/// The label of the reactor's ConfigMaps.
const SEEN_LABEL: &str = "bench.restore-hooks.dev/seen";
/// What the patching reference webhook adds.
const WEBHOOK_ANNOTATION: &str = "bench.restore-hooks.dev/reference-webhook";
const PROBE_EVERY: Duration = Duration::from_secs(2);
const SLOTS_EVERY: Duration = Duration::from_secs(1);
/// A probe that takes longer is a failure of the probe, not a sample.
const PROBE_LIMIT: Duration = Duration::from_secs(30);

/// Configuration names around the chart's (`restore-hooks`): the API server calls mutating
/// webhook configurations in name order.
const BEFORE: &str = "0-bench-reference-before";
const AFTER: &str = "zz-bench-reference-after";

/// A reference admission webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reference {
    /// Allows without a patch, called before the chart's webhooks.
    NoopBefore,
    /// Adds one annotation (a constant JSON patch), called before the chart's webhooks: after
    /// them, its change would make the API server call ours again (`reinvocationPolicy:
    /// IfNeeded`) and change what is measured.
    Patch,
    /// Allows without a patch, called after the chart's webhooks.
    NoopAfter,
}

impl Reference {
    pub const ALL: [Reference; 3] = [
        Reference::NoopBefore,
        Reference::Patch,
        Reference::NoopAfter,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Reference::NoopBefore => "no-op webhook (allowed, no patch), called before ours",
            Reference::Patch => "constant-patch webhook (adds one annotation), called before ours",
            Reference::NoopAfter => "no-op webhook (allowed, no patch), called after ours",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Reference::NoopBefore => "noop-before",
            Reference::Patch => "patch",
            Reference::NoopAfter => "noop-after",
        }
    }

    /// Its URL path: one per reference, so that each one's calls are counted apart.
    fn path(self) -> String {
        format!("/{}", self.prefix())
    }

    fn configuration(self) -> &'static str {
        match self {
            Reference::NoopBefore | Reference::Patch => BEFORE,
            Reference::NoopAfter => AFTER,
        }
    }

    /// Its entry mirroring the chart's entry `chart` (`<which>.<fullname>.restore-hooks.dev`).
    fn entry_name(self, chart: &str) -> String {
        let which = chart.split('.').next().unwrap_or(chart);
        format!("{}.{which}.bench.restore-hooks.dev", self.prefix())
    }
}

/// When the reactor saw each pod Running and when its write was acknowledged (`namespace/name`
/// → unix nanos), and what failed.
#[derive(Default)]
pub struct Reactions {
    pub seen: BTreeMap<String, u128>,
    pub acked: BTreeMap<String, u128>,
    pub errors: Vec<String>,
}

/// The integral of the slot queue's length over the samples, per turn (`first`, `later`).
#[derive(Default)]
pub struct SlotQueue {
    /// Hook-seconds spent waiting for a slot: (first hooks, later hooks).
    pub waited: (f64, f64),
    pub samples: usize,
    pub errors: usize,
    last: Option<(Instant, f64, f64)>,
}

impl SlotQueue {
    fn sample(&mut self, first: f64, later: f64) {
        let now = Instant::now();
        if let Some((at, f, l)) = self.last {
            // Trapezoids: the gauge moves between samples.
            let dt = now.duration_since(at).as_secs_f64();
            self.waited.0 += dt * (f + first) / 2.0;
            self.waited.1 += dt * (l + later) / 2.0;
        }
        self.last = Some((now, first, later));
        self.samples += 1;
    }
}

/// The probe's round trips (when each started, unix nanos; seconds) and its failures.
#[derive(Default)]
struct Probes {
    rtts: Vec<(u128, f64)>,
    errors: Vec<String>,
}

/// What the references measured while they ran.
pub struct Measured {
    pub reactions: Reactions,
    /// Exec round trips of the probe: when each started (unix nanos) and how long it took
    /// (seconds), in the order taken.
    pub probe_rtts: Vec<(u128, f64)>,
    pub probe_errors: Vec<String>,
    pub slots: SlotQueue,
    /// Reviews each reference webhook answered.
    pub calls: BTreeMap<Reference, usize>,
}

impl Measured {
    /// The probe's round trips (seconds) that started between `from` and `to` (unix nanos),
    /// sorted.
    pub fn rtts_between(&self, from: u128, to: u128) -> Vec<f64> {
        let mut rtts: Vec<f64> = self
            .probe_rtts
            .iter()
            .filter(|(at, _)| (from..=to).contains(at))
            .map(|(_, rtt)| *rtt)
            .collect();
        rtts.sort_by(f64::total_cmp);
        rtts
    }
}

/// The references, running on a Tokio runtime of their own (2 workers: the machine's cores)
/// until [`References::stop`]; the webhooks keep serving until dropped.
pub struct References {
    runtime: tokio::runtime::Runtime,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    server: axum_server::Handle<SocketAddr>,
    reactions: Arc<Mutex<Reactions>>,
    probes: Arc<Mutex<Probes>>,
    slots: Arc<Mutex<SlotQueue>>,
    calls: Arc<Mutex<BTreeMap<Reference, usize>>>,
    /// Entry names of each reference webhook, for the API server's histogram.
    pub entries: BTreeMap<Reference, Vec<String>>,
}

impl References {
    /// Creates the references' namespace, identity and probe pod, serves and registers the
    /// reference webhooks next to the chart's, and starts the reactor, the probe and the slot
    /// sampler (on `controller_admin_port`'s `/metrics`).
    pub fn start(install: &Install, controller_admin_port: u16) -> References {
        let cp = &install.cp;
        real::namespace(cp, NAMESPACE, json!({}));
        real::apply_list(cp, &identity());
        real::create(
            cp,
            &real::pod(NAMESPACE, PROBE_POD, &["app"], json!({}), json!({})),
        );
        real::wait_running(cp, NAMESPACE, PROBE_POD);
        let token = cp
            .token_for_service_account(NAMESPACE, IDENTITY, Duration::from_secs(7200))
            .unwrap_or_else(|e| panic!("TokenRequest for {NAMESPACE}/{IDENTITY}: {e:#}"));
        let kubeconfig = cp
            .kubeconfig_for_token(&token)
            .unwrap_or_else(|e| panic!("a kubeconfig for {NAMESPACE}/{IDENTITY}: {e:#}"));

        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bench-references")
            .enable_all()
            .build()
            .expect("a Tokio runtime for the references");
        let client = runtime.block_on(async {
            let config = kube::config::Kubeconfig::read_from(&kubeconfig)
                .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
            let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
                .await
                .unwrap_or_else(|e| panic!("the kubeconfig {}: {e}", kubeconfig.display()));
            kube::Client::try_from(config).expect("a client for the references")
        });

        let calls: Arc<Mutex<BTreeMap<Reference, usize>>> = Arc::default();
        let server = axum_server::Handle::new();
        let port = runtime.block_on(serve(install, server.clone(), calls.clone()));
        let (configurations, entries) = configurations(install, port);
        real::apply_list(cp, &configurations);

        let stop = CancellationToken::new();
        let reactions: Arc<Mutex<Reactions>> = Arc::default();
        let probes: Arc<Mutex<Probes>> = Arc::default();
        let slots: Arc<Mutex<SlotQueue>> = Arc::default();
        let tasks = vec![
            runtime.spawn(react(client.clone(), reactions.clone(), stop.clone())),
            runtime.spawn(probe(client, probes.clone(), stop.clone())),
            runtime.spawn(sample_slots(
                controller_admin_port,
                slots.clone(),
                stop.clone(),
            )),
        ];
        References {
            runtime,
            stop,
            tasks,
            server,
            reactions,
            probes,
            slots,
            calls,
            entries,
        }
    }

    /// Stops the reactor, the probe and the sampler (not the webhooks): what they measured.
    pub fn stop(&mut self) -> Measured {
        self.stop.cancel();
        for task in self.tasks.drain(..) {
            let _ = self.runtime.block_on(task);
        }
        let reactions = std::mem::take(&mut *lock(&self.reactions));
        let Probes {
            rtts: probe_rtts,
            errors: probe_errors,
        } = std::mem::take(&mut *lock(&self.probes));
        let slots = std::mem::take(&mut *lock(&self.slots));
        Measured {
            reactions,
            probe_rtts,
            probe_errors,
            slots,
            calls: lock(&self.calls).clone(),
        }
    }

    /// The API server's admission histogram (delta between two scrapes) of `reference`'s
    /// entries, summed.
    pub fn admission(&self, before: &str, after: &str, reference: Reference) -> Histogram {
        admission(before, after, &self.entries[&reference])
    }
}

impl Drop for References {
    fn drop(&mut self) {
        self.stop.cancel();
        self.server.shutdown();
    }
}

/// The sum of the API server's admission histograms of webhooks `names` between two scrapes.
pub fn admission(before: &str, after: &str, names: &[String]) -> Histogram {
    let mut sum: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for name in names {
        let h = Histogram::delta(before, after, super::ADMISSION_HISTOGRAM, Some(name));
        for (le, n) in h.buckets {
            sum.entry(le.to_bits()).or_insert((le, 0.0)).1 += n;
        }
    }
    let buckets: Vec<(f64, f64)> = sum.into_values().collect();
    let count = buckets.last().map_or(0.0, |(_, n)| *n);
    Histogram { buckets, count }
}

/// The references' ServiceAccount and what it may do: watch pods and create ConfigMaps in its
/// namespace (the reactor), exec into its pod (the probe).
fn identity() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": IDENTITY, "namespace": NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": IDENTITY},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"],
             "verbs": ["get", "list", "watch"]},
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": IDENTITY},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": IDENTITY},
               "subjects": [{"kind": "ServiceAccount", "name": IDENTITY,
                             "namespace": NAMESPACE}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": IDENTITY, "namespace": NAMESPACE},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]},
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": IDENTITY, "namespace": NAMESPACE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": IDENTITY},
               "subjects": [{"kind": "ServiceAccount", "name": IDENTITY,
                             "namespace": NAMESPACE}]}),
    ]
}

/// The reference webhooks' configurations: one entry per reference and per entry of the chart's
/// configuration, with that entry's rules, selectors and match conditions, `timeoutSeconds` 10,
/// `failurePolicy: Ignore`, `sideEffects: None`, never reinvoked. Their entry names by reference.
fn configurations(install: &Install, port: u16) -> (Vec<Value>, BTreeMap<Reference, Vec<String>>) {
    let charts = install.applied("MutatingWebhookConfiguration");
    let mut entries: BTreeMap<Reference, Vec<String>> = BTreeMap::new();
    let mut webhooks: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for chart in &charts {
        let name = chart["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            BEFORE < name && name < AFTER,
            "the chart's MutatingWebhookConfiguration {name} must sort between {BEFORE} and \
             {AFTER} for the references to be called around it"
        );
        for entry in chart["webhooks"].as_array().into_iter().flatten() {
            let chart_name = entry["name"].as_str().unwrap_or_default();
            for reference in Reference::ALL {
                let name = reference.entry_name(chart_name);
                let mut mirror = entry.clone();
                mirror["name"] = json!(name);
                mirror["clientConfig"] = json!({
                    "url": format!("https://127.0.0.1:{port}{}", reference.path()),
                    "caBundle": install.certs.ca_bundle(),
                });
                mirror["timeoutSeconds"] = json!(10);
                mirror["failurePolicy"] = json!("Ignore");
                mirror["sideEffects"] = json!("None");
                mirror["reinvocationPolicy"] = json!("Never");
                webhooks
                    .entry(reference.configuration())
                    .or_default()
                    .push(mirror);
                entries.entry(reference).or_default().push(name);
            }
        }
    }
    let configurations = webhooks
        .into_iter()
        .map(|(name, webhooks)| {
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                   "kind": "MutatingWebhookConfiguration",
                   "metadata": {"name": name}, "webhooks": webhooks})
        })
        .collect();
    (configurations, entries)
}

/// An AdmissionReview as far as the references read it: the request's uid, and whether the
/// pod has annotations (the constant patch adds to the map, or adds the map).
#[derive(Deserialize)]
struct Review {
    request: ReviewRequest,
}

#[derive(Deserialize)]
struct ReviewRequest {
    uid: String,
    #[serde(default)]
    object: ReviewObject,
}

#[derive(Default, Deserialize)]
struct ReviewObject {
    #[serde(default)]
    metadata: ReviewMetadata,
}

#[derive(Default, Deserialize)]
struct ReviewMetadata {
    annotations: Option<serde::de::IgnoredAny>,
}

/// The two constant patches, base64 of their JSON: one annotation added to the pod's map, or
/// the map with it when the pod has none.
struct Patches {
    into_map: String,
    new_map: String,
}

impl Patches {
    fn new() -> Patches {
        let encode = |patch: Value| {
            base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(&patch).expect("a JSON patch"))
        };
        let key = WEBHOOK_ANNOTATION.replace('~', "~0").replace('/', "~1");
        Patches {
            into_map: encode(
                json!([{"op": "add", "path": format!("/metadata/annotations/{key}"),
                                     "value": "1"}]),
            ),
            new_map: encode(json!([{"op": "add", "path": "/metadata/annotations",
                                    "value": {WEBHOOK_ANNOTATION: "1"}}])),
        }
    }
}

fn answer(body: &[u8], patches: Option<&Patches>) -> Value {
    let Ok(review) = serde_json::from_slice::<Review>(body) else {
        return json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "", "allowed": false,
                                   "status": {"code": 400, "message": "not an AdmissionReview"}}});
    };
    let mut response = json!({"uid": review.request.uid, "allowed": true});
    if let Some(p) = patches {
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(match review.request.object.metadata.annotations {
            Some(_) => &p.into_map,
            None => &p.new_map,
        });
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Serves the reference webhooks on 127.0.0.1 with the chart's serving certificate (the CA the
/// configurations name); the port once it listens.
async fn serve(
    install: &Install,
    handle: axum_server::Handle<SocketAddr>,
    calls: Arc<Mutex<BTreeMap<Reference, usize>>>,
) -> u16 {
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
        install.certs.cert_pem.clone().into_bytes(),
        install.certs.key_pem.clone().into_bytes(),
    )
    .await
    .expect("the chart's serving certificate");
    let patches = Arc::new(Patches::new());
    let mut app = axum::Router::new();
    for reference in Reference::ALL {
        let (calls, patches) = (calls.clone(), patches.clone());
        app = app.route(
            &reference.path(),
            axum::routing::post(move |body: axum::body::Bytes| {
                *lock(&calls).entry(reference).or_default() += 1;
                let patches = (reference == Reference::Patch).then(|| patches.clone());
                async move { axum::Json(answer(&body, patches.as_deref())) }
            }),
        );
    }
    let server = axum_server::bind_rustls(SocketAddr::from(([127, 0, 0, 1], 0)), tls)
        .handle(handle.clone())
        .serve(app.into_make_service());
    tokio::spawn(async move {
        if let Err(e) = server.await {
            eprintln!("restore bench: the reference webhooks stopped: {e}");
        }
    });
    handle
        .listening()
        .await
        .expect("the reference webhooks listen")
        .port()
}

/// The reactor: the first time it sees a bench pod Running it creates one ConfigMap naming it.
async fn react(client: kube::Client, log: Arc<Mutex<Reactions>>, stop: CancellationToken) {
    let pods: Api<Pod> = Api::all(client.clone());
    let mut stream = Box::pin(
        watcher(pods, watcher::Config::default().labels(BENCH_LABEL))
            .default_backoff()
            .applied_objects(),
    );
    loop {
        let pod = tokio::select! {
            () = stop.cancelled() => return,
            next = stream.next() => match next {
                Some(Ok(pod)) => pod,
                // The backoff retries the watch; the error is reported.
                Some(Err(e)) => {
                    lock(&log).errors.push(format!("watch: {e}"));
                    continue;
                }
                None => return,
            },
        };
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let (Some(namespace), Some(name)) = (pod.metadata.namespace, pod.metadata.name) else {
            continue;
        };
        let key = format!("{namespace}/{name}");
        if !running || lock(&log).seen.contains_key(&key) {
            continue;
        }
        let seen = real::now_nanos();
        lock(&log).seen.insert(key.clone(), seen);
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
        let log = log.clone();
        let seen_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("seen-{namespace}-{name}")),
                labels: Some([(SEEN_LABEL.to_string(), "true".to_string())].into()),
                ..ObjectMeta::default()
            },
            data: Some(
                [
                    ("pod".to_string(), key.clone()),
                    ("seen".to_string(), seen.to_string()),
                ]
                .into(),
            ),
            ..ConfigMap::default()
        };
        tokio::spawn(async move {
            match api.create(&PostParams::default(), &seen_map).await {
                Ok(_) => {
                    lock(&log).acked.insert(key, real::now_nanos());
                }
                Err(e) => lock(&log)
                    .errors
                    .push(format!("create a ConfigMap for {key}: {e}")),
            }
        });
    }
}

/// The exec probe: `true` in the probe pod every [`PROBE_EVERY`], timed from the request to the
/// exit status.
async fn probe(client: kube::Client, samples: Arc<Mutex<Probes>>, stop: CancellationToken) {
    let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let mut tick = tokio::time::interval(PROBE_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (at, started) = (real::now_nanos(), Instant::now());
        match tokio::time::timeout(PROBE_LIMIT, exec_true(&api)).await {
            Ok(Ok(())) => lock(&samples)
                .rtts
                .push((at, started.elapsed().as_secs_f64())),
            Ok(Err(e)) => lock(&samples).errors.push(e),
            Err(_) => lock(&samples)
                .errors
                .push(format!("no exit status within {PROBE_LIMIT:?}")),
        }
    }
}

async fn exec_true(api: &Api<Pod>) -> Result<(), String> {
    let mut process = api
        .exec(PROBE_POD, ["true"], &AttachParams::default().stderr(false))
        .await
        .map_err(|e| format!("exec into {NAMESPACE}/{PROBE_POD}: {e}"))?;
    let status = process
        .take_status()
        .ok_or("the exec gave no status channel")?;
    if let Some(mut out) = process.stdout() {
        let _ = tokio::io::copy(&mut out, &mut tokio::io::sink()).await;
    }
    let status = status.await;
    process
        .join()
        .await
        .map_err(|e| format!("exec into {NAMESPACE}/{PROBE_POD}: {e}"))?;
    match status {
        Some(s) if s.status.as_deref() == Some("Success") => Ok(()),
        other => Err(format!("`true` in {NAMESPACE}/{PROBE_POD} ended {other:?}")),
    }
}

/// Samples the controller's exec slot queue every [`SLOTS_EVERY`].
async fn sample_slots(port: u16, queue: Arc<Mutex<SlotQueue>>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(SLOTS_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let scraped =
            tokio::task::spawn_blocking(move || real::serve::http_get(port, "/metrics")).await;
        match scraped {
            Ok(Ok((200, text))) => {
                let waiting = |turn: &str| {
                    real::metric(
                        &text,
                        &format!("restore_hooks_exec_slot_waiting{{turn=\"{turn}\"}}"),
                    )
                };
                lock(&queue).sample(waiting("first"), waiting("later"));
            }
            _ => lock(&queue).errors += 1,
        }
    }
}

/// The makespan (seconds from `t0`) of an ideal scheduler with `slots` exec slots: each pod's
/// hooks (`durations`, run in order) start no earlier than the pod was Running (`running`, unix
/// nanos) and each costs its duration plus `rtt` (an exec's round trip through the API server);
/// greedy list scheduling, pods in Running order, each hook on the earliest available slot.
pub fn fair_makespan(running: &[u128], t0: u128, slots: usize, durations: &[f64], rtt: f64) -> f64 {
    let mut ups: Vec<f64> = running.iter().map(|up| secs_between(t0, *up)).collect();
    ups.sort_by(f64::total_cmp);
    let mut free = vec![0.0_f64; slots.max(1)];
    let mut end = 0.0_f64;
    for up in ups {
        let mut ready = up;
        for d in durations {
            let (slot, at) = free
                .iter()
                .copied()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("at least one slot");
            let finish = at.max(ready) + d + rtt;
            free[slot] = finish;
            ready = finish;
            end = end.max(finish);
        }
    }
    end
}
