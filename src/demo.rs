//! `restore-hooks demo`: the whole flow on the built-in API-server simulator, in one process.
//!
//! It starts the [`Testbed`] (simulator, the HTTPS webhook registered as the chart registers it,
//! see the testbed's module doc for what differs, and a controller); restores a small "database"
//! into a namespace labelled as a restore namespace; then restores a cache pod whose RestoreHook
//! arrives two seconds after it, as Velero restores custom resources after pods. Two replicas of an
//! app, restored before the database, run their schema migration once per restore (`runOn:
//! OnePod`) and only after the database's restore hook succeeded (`after`). It prints every step
//! as it happens, and checks that everything behaved as designed. Exit code 0 means it did;
//! otherwise the error says what did not.
//!
//! The module is long because it is a script: each step prints what happens and checks it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::DemoArgs;
use crate::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecStatus, HookPhase, INJECTED_ANNOTATION, PLAN_ANNOTATION,
};
use crate::hooks::types::{RestoreHook, RestoreRun};
use crate::testbed::{ControllerHandle, Testbed, TestbedOptions, exec_label, exec_status};

const NAMESPACE: &str = "shop";
const RESTORE: &str = "demo-restore";
const POD: &str = "postgres-0";
const RESTORE_HOOK: &str = "postgres-rehydrate";
const LATE_POD: &str = "cache-0";
const LATE_HOOK: &str = "cache-warm";
/// The app's migration, once per restore (`runOn: OnePod`) and after the database's restore hook
/// (`after`), and the app's two replicas.
const ONE_POD_HOOK: &str = "api-migrate";
const REPLICAS: [&str; 2] = ["api-0", "api-1"];
/// The whole demo must end well within this.
const LIMIT: Duration = Duration::from_secs(45);

/// Runs the demo, printing to standard output.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if args.verbose {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info,kube_sim=info,restore_hooks=info")
            .with_writer(std::io::stderr)
            .try_init();
    }
    let mut demo = Demo::start(args.verbose).await?;
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
    bed: Option<Testbed>,
    controller: Option<ControllerHandle>,
    printer: JoinHandle<()>,
    stop_printer: CancellationToken,
    lines: Arc<HookLines>,
    started: Instant,
}

impl Demo {
    async fn start(verbose: bool) -> anyhow::Result<Self> {
        let started = Instant::now();
        println!("restore-hooks demo: the webhook and the controller on a simulated cluster\n");
        let bed = Testbed::start(TestbedOptions {
            webhook: true,
            ..TestbedOptions::default()
        })
        .await?;
        step(
            started,
            &format!(
                "simulated API server at {}; CRDs RestoreHook, ClusterRestoreHook, RestoreRun installed",
                bed.sim.url()
            ),
        );
        step(
            started,
            &format!(
                "webhook serving {} with a certificate from a throwaway CA, registered as the chart does (two webhooks: restore pod label, restore namespace label)",
                bed.webhook_url.as_deref().unwrap_or_default()
            ),
        );
        // Print the simulated cluster's own steps as they happen.
        let stop_printer = CancellationToken::new();
        let lines = Arc::new(HookLines::new(started));
        let printer = {
            let mut log = bed.sim.subscribe_log();
            let stop = stop_printer.clone();
            let lines = lines.clone();
            let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NAMESPACE);
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        ev = log.recv() => match ev {
                            Ok(ev) => {
                                // The controller records a hook Running before it execs, but the
                                // demo learns of the record from a pod watch, which can lag the
                                // simulator's own exec line: read the pod first, so the record
                                // prints before the exec it precedes.
                                if ev.kind == kube_sim::SimEventKind::Exec
                                    && ev.namespace == NAMESPACE
                                    && ev.message.ends_with(" started")
                                    && let Ok(pod) = pods.get(&ev.name).await
                                {
                                    lines.show(&ev.name, exec_status(&pod).as_ref(), true);
                                }
                                lines.print_sim_event(&ev, verbose);
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(_) => return,
                        }
                    }
                }
            })
        };
        let mut args = bed.controller_args();
        args.max_concurrent_execs = 4;
        let controller = bed.start_controller("demo-controller", args, None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !controller.is_leader() {
            ensure!(
                Instant::now() < deadline,
                "the controller did not acquire its Lease"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        step(
            started,
            "controller running and leading (Lease restore-hooks/restore-hooks-controller)",
        );
        Ok(Self {
            bed: Some(bed),
            controller: Some(controller),
            printer,
            stop_printer,
            lines,
            started,
        })
    }

    fn bed(&self) -> &Testbed {
        self.bed.as_ref().expect("running")
    }

    /// The restore: namespace, RestoreHook, pod; a late RestoreHook; then check the outcome.
    async fn restore(&mut self) -> anyhow::Result<()> {
        let t0 = self.started;
        let bed = self.bed();
        bed.create_namespace(NAMESPACE, json!({"restore-hooks.dev/restore": RESTORE}))
            .await?;
        step(
            t0,
            &format!(
                "namespace {NAMESPACE} labelled restore-hooks.dev/restore={RESTORE}: pods created in it are restored pods"
            ),
        );
        let hooks: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NAMESPACE);
        create_restore_hook(&hooks, RESTORE_HOOK, json!({
            "restores": ["demo-*"],
            "labelSelector": {"matchLabels": {"app": "postgres"}},
            "postHooks": [
                {"exec": {
                    "container": "db",
                    "command": ["/bin/sh", "-c", "cat restored.txt && echo 'rows: 42' > rehydrated.txt && echo rehydrated $(POD_NAME) for $(RESTORE_NAME)"],
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
        }))
        .await?;
        step(
            t0,
            &format!(
                "RestoreHook {NAMESPACE}/{RESTORE_HOOK}: exec #0 (onError: Fail) rehydrates from the file the init hook wrote, naming $(POD_NAME) and $(RESTORE_NAME) (expanded into the signed plan), exec #1 (waitForReady) analyzes"
            ),
        );
        // The webhook decides from its watch caches: wait until they have the RestoreHook.
        self.wait_ready(RESTORE_HOOK).await?;
        self.app_before_database().await?;

        let bed = self.bed();
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NAMESPACE);
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
        // The database's hooks, then the app's migration, as they happen.
        let ((pod, status), app_0, app_1) = futures::try_join!(
            follow(&pods, POD, &self.lines),
            follow(&pods, REPLICAS[0], &self.lines),
            follow(&pods, REPLICAS[1], &self.lines),
        )?;
        self.check_database(&pod, status.as_ref()).await?;
        self.check_migration(&[app_0, app_1])?;

        // Velero restores pods before custom resources: the cache's RestoreHook comes later.
        let cache: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": LATE_POD, "namespace": NAMESPACE, "labels": {"app": "cache"}},
            "spec": {"containers": [{"name": "redis", "image": "redis:7"}]}
        }))?;
        println!();
        step(
            t0,
            &format!("restoring pod {NAMESPACE}/{LATE_POD}: no hook selects it yet"),
        );
        pods.create(&PostParams::default(), &cache)
            .await
            .context("creating the cache pod")?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        create_restore_hook(&hooks, LATE_HOOK, json!({
            "labelSelector": {"matchLabels": {"app": "cache"}},
            "postHooks": [{"exec": {"container": "redis", "command": ["/bin/sh", "-c", "echo warmed >> warm.log; echo cache warmed"]}}]
        }))
        .await?;
        step(
            t0,
            &format!(
                "RestoreHook {NAMESPACE}/{LATE_HOOK} created 2 s after its pod (as Velero restores it): its exec hook is added to the admitted pod"
            ),
        );
        let (cache, status) = follow(&pods, LATE_POD, &self.lines).await?;
        self.check_late(&cache, status.as_ref())?;
        self.check_restore_run().await?;
        self.summary(&pod, &cache).await
    }

    async fn wait_ready(&self, name: &str) -> anyhow::Result<()> {
        let bed = self.bed();
        let deadline = Instant::now() + Duration::from_secs(10);
        while bed
            .index
            .read()
            .restore_hooks(NAMESPACE)
            .all(|h| h.name != name)
        {
            ensure!(
                Instant::now() < deadline,
                "the webhook's cache did not see RestoreHook {name}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Everything the first restore promises, checked; the first deviation is the error.
    async fn check_database(&self, pod: &Pod, status: Option<&ExecStatus>) -> anyhow::Result<()> {
        let bed = self.bed();
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let injected = annotations
            .get(INJECTED_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        ensure!(
            !injected.is_empty(),
            "the webhook did not inject the init container (no {INJECTED_ANNOTATION} annotation)"
        );
        ensure!(
            annotations.contains_key(PLAN_ANNOTATION),
            "the webhook did not write the exec plan"
        );
        let restored = std::fs::read_to_string(bed.pod_dir(NAMESPACE, POD).join("restored.txt"))
            .unwrap_or_default();
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
        let expanded = format!("rehydrated {POD} for {RESTORE}");
        ensure!(
            status.hooks[0].stdout.contains(&expanded),
            "hook #0 did not run with the restore's parameters expanded ({expanded:?}): {:?}",
            status.hooks[0].stdout
        );
        ensure!(
            status.hooks[1].stdout.contains("rows: 42"),
            "hook #1 did not run after hook #0"
        );
        ensure!(exec_label(pod) == "done", "the pod is not labelled done");

        // Events and the RestoreHook status are written just after the label: give them a moment.
        let events: Api<Event> = Api::namespaced(bed.client.clone(), NAMESPACE);
        let hooks: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NAMESPACE);
        let deadline = Instant::now() + Duration::from_secs(5);
        let (reasons, counts, ready) = loop {
            let mut listed: Vec<Event> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(POD))
                .collect();
            listed.sort_by_key(|e| {
                e.metadata
                    .resource_version
                    .as_deref()
                    .unwrap_or("")
                    .parse::<u64>()
                    .unwrap_or(0)
            });
            let reasons: Vec<String> = listed.into_iter().filter_map(|e| e.reason).collect();
            let status = hooks.get(RESTORE_HOOK).await?.status;
            let counts = status.as_ref().map(|s| {
                (
                    s.pods_planned,
                    s.hooks.succeeded,
                    s.hooks.failed,
                    s.hooks.pending,
                )
            });
            let ready = status
                .iter()
                .flat_map(|s| &s.conditions)
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if (reasons.iter().any(|r| r == "HooksCompleted")
                && counts == Some((1, 2, 0, 0))
                && ready)
                || Instant::now() > deadline
            {
                break (reasons, counts, ready);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // Successes share the pod's one HooksCompleted (docs/behaviour.md §6.12).
        ensure!(
            reasons == ["HooksCompleted"],
            "expected one Event on the pod, HooksCompleted, got {reasons:?}"
        );
        ensure!(
            counts == Some((1, 2, 0, 0)),
            "RestoreHook status: expected podsPlanned 1, succeeded 2, got {counts:?}"
        );
        ensure!(ready, "RestoreHook {RESTORE_HOOK} is not Ready");
        step(
            self.started,
            &format!("Events on the pod: {}", reasons.join(", ")),
        );
        step(
            self.started,
            &format!(
                "RestoreHook {NAMESPACE}/{RESTORE_HOOK} status: Ready, podsPlanned 1, hooks succeeded 2, failed 0, pending 0"
            ),
        );
        Ok(())
    }

    fn check_late(&self, pod: &Pod, status: Option<&ExecStatus>) -> anyhow::Result<()> {
        let status = status.context("the late hook left no status on the cache pod")?;
        ensure!(
            status.hooks.len() == 1 && status.hooks[0].phase == HookPhase::Succeeded,
            "expected the late RestoreHook's hook Succeeded, got {:?}",
            status.hooks
        );
        ensure!(
            exec_label(pod) == "done",
            "the cache pod is not labelled done"
        );
        let runs =
            std::fs::read_to_string(self.bed().pod_dir(NAMESPACE, LATE_POD).join("warm.log"))
                .unwrap_or_default();
        ensure!(
            runs == "warmed\n",
            "the late hook ran {} times, not once",
            runs.lines().count()
        );
        step(
            self.started,
            &format!("late RestoreHook {LATE_HOOK}: its exec hook ran exactly once in {LATE_POD}"),
        );
        Ok(())
    }

    /// Two replicas of an app whose schema migration must run once per restore, not once per pod
    /// (`runOn: OnePod`, docs/behaviour.md §6.15), and only once the database is restored
    /// (`after`, §6.16). Velero restores pods in no particular order: here the app comes first,
    /// and its migration waits.
    async fn app_before_database(&mut self) -> anyhow::Result<()> {
        let t0 = self.started;
        let bed = self.bed();
        println!();
        let hooks: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NAMESPACE);
        create_restore_hook(&hooks, ONE_POD_HOOK, json!({
            "labelSelector": {"matchLabels": {"app": "api"}},
            "postHooks": [{"exec": {
                "container": "api",
                "runOn": "OnePod",
                "after": [{"hook": RESTORE_HOOK}],
                // The namespace's directory is shared by its pods: the log counts the runs, and
                // the database's file is there only once its restore hook ran.
                "command": ["/bin/sh", "-c", format!(
                    "echo $(POD_NAME) >> ../migrations.log; echo schema migrated by $(POD_NAME) on $(cat ../{POD}/rehydrated.txt)"
                )]
            }}]
        }))
        .await?;
        step(
            t0,
            &format!(
                "RestoreHook {NAMESPACE}/{ONE_POD_HOOK}: a schema migration with runOn: OnePod (once per restore) and after: [{RESTORE_HOOK}]"
            ),
        );
        self.wait_ready(ONE_POD_HOOK).await?;
        let bed = self.bed();
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NAMESPACE);
        for name in REPLICAS {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE,
                             "labels": {"app": "api", "statefulset.kubernetes.io/pod-name": name}},
                "spec": {"containers": [{"name": "api", "image": "shop-api:2"}]}
            }))?;
            pods.create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating {name}"))?;
        }
        step(
            t0,
            &format!(
                "restoring StatefulSet pods {} and {} before the database",
                REPLICAS[0], REPLICAS[1]
            ),
        );
        // Their containers are up at once; the migration waits for the database's hook.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let waiting = match pods.get_opt(REPLICAS[0]).await? {
                Some(p) => exec_status(&p).is_some_and(|s| s.hooks[0].phase == HookPhase::Pending),
                None => false,
            };
            if waiting {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "{} never recorded its migration Pending",
                REPLICAS[0]
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        step(
            t0,
            &format!(
                "controller: {} and {} are up; {ONE_POD_HOOK} is Pending: it waits for {RESTORE_HOOK}, which no pod of the restore has run yet",
                REPLICAS[0], REPLICAS[1]
            ),
        );
        println!();
        Ok(())
    }

    /// The migration ran once, in the lowest ordinal, after the database's restore hook; the
    /// other replica recorded where it ran.
    fn check_migration(&self, ended: &[(Pod, Option<ExecStatus>)]) -> anyhow::Result<()> {
        let phases: Vec<Option<HookPhase>> = ended
            .iter()
            .map(|(_, s)| s.as_ref().and_then(|s| s.hooks.first()).map(|h| h.phase))
            .collect();
        ensure!(
            phases == [Some(HookPhase::Succeeded), Some(HookPhase::OtherPod)],
            "expected the migration Succeeded in {} and OtherPod in {}, got {phases:?}",
            REPLICAS[0],
            REPLICAS[1]
        );
        ensure!(
            ended.iter().all(|(p, _)| exec_label(p) == "done"),
            "both replicas must end done"
        );
        let runs = std::fs::read_to_string(
            self.bed()
                .pod_dir(NAMESPACE, REPLICAS[0])
                .join("../migrations.log"),
        )
        .unwrap_or_default();
        ensure!(
            runs == format!("{}\n", REPLICAS[0]),
            "the migration must run once, in {}: {runs:?}",
            REPLICAS[0]
        );
        let migrated = ended[0].1.as_ref().map(|s| s.hooks[0].stdout.clone());
        ensure!(
            migrated
                .as_deref()
                .is_some_and(|out| out.contains("rows: 42")),
            "the migration must run after {RESTORE_HOOK} wrote the database's file: {migrated:?}"
        );
        let other = ended[1].1.as_ref().map(|s| s.hooks[0].message.clone());
        self.lines.step(&format!(
            "{ONE_POD_HOOK} ran once, in {}, after {RESTORE_HOOK}; {} recorded: {}",
            REPLICAS[0],
            REPLICAS[1],
            other.unwrap_or_default()
        ));
        Ok(())
    }

    async fn check_restore_run(&self) -> anyhow::Result<()> {
        let api: Api<RestoreRun> = Api::all(self.bed().client.clone());
        let deadline = Instant::now() + Duration::from_secs(10);
        let run = loop {
            let run = api.get_opt(RESTORE).await?;
            let done = run
                .as_ref()
                .and_then(|r| r.status.as_ref())
                .is_some_and(|s| s.phase == "Completed" && s.pods_planned == 4);
            if done || Instant::now() > deadline {
                break run;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let status = run
            .and_then(|r| r.status)
            .context("no RestoreRun for the restore")?;
        ensure!(
            status.phase == "Completed" && status.pods_planned == 4 && status.hooks.succeeded == 4,
            "RestoreRun {RESTORE}: expected Completed with 4 pods and 4 hooks succeeded (the migration once), got {} with {} pods, {:?}",
            status.phase,
            status.pods_planned,
            status.hooks
        );
        println!("\n$ kubectl get restoreruns");
        println!(
            "{:<14} {:<14} {:<10} {:<5} {:<10} {:<7} {:<8} {:<8}",
            "NAME", "RESTORE", "PHASE", "PODS", "SUCCEEDED", "FAILED", "SKIPPED", "PENDING"
        );
        println!(
            "{:<14} {:<14} {:<10} {:<5} {:<10} {:<7} {:<8} {:<8}",
            RESTORE,
            RESTORE,
            status.phase,
            status.pods_planned,
            status.hooks.succeeded,
            status.hooks.failed,
            status.hooks.skipped,
            status.hooks.pending
        );
        Ok(())
    }

    async fn summary(&self, pod: &Pod, cache: &Pod) -> anyhow::Result<()> {
        println!("\nSummary (restore {RESTORE}):");
        println!(
            "  {:<12} {:<3} {:<20} {:<10} {:<10} {:<5} stdout",
            "pod", "#", "hook", "container", "result", "exit"
        );
        for p in [pod, cache] {
            let name = p.metadata.name.clone().unwrap_or_default();
            for (i, h) in exec_status(p)
                .map(|s| s.hooks)
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                println!(
                    "  {:<12} {:<3} {:<20} {:<10} {:<10} {:<5} {}",
                    name,
                    i,
                    h.name,
                    h.container,
                    format!("{:?}", h.phase),
                    h.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                    one_line(&h.stdout)
                );
            }
        }
        let injected = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INJECTED_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        println!("  init containers injected into {POD}: {injected}");
        let m = &self.bed().metrics;
        let c = self.controller.as_ref().expect("running");
        println!(
            "  metrics: admission requests patched {}, exec hooks succeeded {}, failed {}, late hooks added {}",
            m.admission_requests.with_label_values(&["patched"]).get(),
            c.hooks("succeeded"),
            c.hooks("failed"),
            c.metrics.late_hooks.get(),
        );
        println!("  elapsed: {:.1?}", self.started.elapsed());
        Ok(())
    }

    async fn stop(&mut self) {
        if let Some(c) = self.controller.take()
            && let Err(e) = c.stop().await
        {
            eprintln!("controller: {e:#}");
        }
        self.stop_printer.cancel();
        let _ = (&mut self.printer).await;
        if let Some(bed) = self.bed.take() {
            bed.stop().await;
        }
    }
}

async fn create_restore_hook(
    api: &Api<RestoreHook>,
    name: &str,
    spec: Value,
) -> anyhow::Result<()> {
    let rh: RestoreHook = serde_json::from_value(json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }))?;
    api.create(&PostParams::default(), &rh)
        .await
        .with_context(|| format!("creating RestoreHook {name}"))?;
    Ok(())
}

/// Follows a pod's hook status until the controller labels it: a watch, so that every recorded
/// phase (Running before each exec, then the result) is shown.
async fn follow(
    pods: &Api<Pod>,
    name: &str,
    lines: &HookLines,
) -> anyhow::Result<(Pod, Option<ExecStatus>)> {
    let mut updates = watcher(
        pods.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .applied_objects()
    .boxed();
    loop {
        let p = match updates.next().await {
            Some(Ok(p)) => p,
            Some(Err(_)) => continue,
            None => bail!("the pod watch ended"),
        };
        let status = exec_status(&p);
        lines.show(name, status.as_ref(), false);
        let label = exec_label(&p);
        if !label.is_empty() && label != EXEC_PENDING {
            lines.step(&format!(
                "controller: all hooks of {name} ended; label {EXEC_LABEL}={label}"
            ));
            return Ok((p, status));
        }
    }
}

/// The demo's output: one writer for the simulator's lines and the controller's records, which
/// remembers which hook phases it printed (the same phase can be seen twice: from the watch and
/// from the read before an exec line).
struct HookLines {
    started: Instant,
    shown: Mutex<BTreeMap<(String, usize), HookPhase>>,
}

impl HookLines {
    fn new(started: Instant) -> Self {
        Self {
            started,
            shown: Mutex::new(BTreeMap::new()),
        }
    }

    fn step(&self, text: &str) {
        let _shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        step(self.started, text);
    }

    /// Prints the phases of `pod`'s hooks not printed yet; with `running_only`, only the Running
    /// records (the results follow from the watch, after the exec lines).
    fn show(&self, pod: &str, status: Option<&ExecStatus>, running_only: bool) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        for (i, h) in status.iter().flat_map(|s| s.hooks.iter()).enumerate() {
            let key = (pod.to_string(), i);
            let before = shown.get(&key).copied();
            if before == Some(h.phase) {
                continue;
            }
            let started =
                h.phase == HookPhase::Running || (h.phase.is_terminal() && h.started_at.is_some());
            if started && before.is_none() {
                shown.insert(key.clone(), HookPhase::Running);
                step(
                    self.started,
                    &format!(
                        "controller: {pod} hook #{i} {} in container {}: Running (recorded before the exec)",
                        h.name, h.container
                    ),
                );
            }
            if running_only || !h.phase.is_terminal() {
                continue;
            }
            shown.insert(key, h.phase);
            step(
                self.started,
                &format!(
                    "controller: {pod} hook #{i} {}: {:?}{}{}{}",
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
            );
        }
    }

    fn print_sim_event(&self, ev: &kube_sim::SimEvent, verbose: bool) {
        let _shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        print_sim_event(self.started, ev, verbose);
    }
}

fn step(started: Instant, text: &str) {
    println!("[{:>5.2}s] {text}", started.elapsed().as_secs_f64());
}

fn one_line(s: &str) -> String {
    s.trim_end().replace('\n', " | ")
}

fn print_sim_event(started: Instant, ev: &kube_sim::SimEvent, verbose: bool) {
    if ev.namespace != NAMESPACE && !verbose {
        return;
    }
    match (&ev.kind, &ev.patch) {
        (kube_sim::SimEventKind::Admission, Some(Value::Array(ops))) => {
            let head = ev.message.split(": [").next().unwrap_or(&ev.message);
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
