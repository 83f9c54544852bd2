//! The controller against the API-server simulator (`kube-sim`): real kube client, real watch,
//! real WebSocket exec (commands run as local processes in the pod's directory). Pods are created
//! already carrying a plan and the `pending` label, as the webhook would leave them.
//!
//! Every test is bounded by a timeout and uses loopback only. No assertion depends on speed.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, CustomResourceExt};
use restore_hooks::cli::ControllerArgs;
use restore_hooks::config::EngineConfig;
use restore_hooks::controller::{self, ControllerDeps};
use restore_hooks::hooks::plan::{
    EXEC_LABEL, ExecPlan, ExecStatus, HookPhase, OnError, PLAN_ANNOTATION, PlannedHook,
    STATUS_ANNOTATION,
};
use restore_hooks::hooks::types::RestoreHook;
use restore_hooks::metrics::Metrics;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

/// Runs a test body with an overall limit, so a hang fails instead of blocking CI.
async fn bounded<F: Future<Output = ()>>(limit: Duration, f: F) {
    tokio::time::timeout(limit, f)
        .await
        .expect("test exceeded its time limit");
}

struct Env {
    sim: kube_sim::SimHandle,
    client: Client,
    tmp: tempfile::TempDir,
}

async fn env() -> Env {
    restore_hooks::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let sim = kube_sim::start(kube_sim::SimOptions {
        listen: ([127, 0, 0, 1], 0).into(),
        workdir: dir.path().to_path_buf(),
        kubelet: true,
    })
    .await
    .expect("simulator starts");
    let client = sim.client().await;
    Env {
        sim,
        client,
        tmp: dir,
    }
}

impl Env {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn file(&self, pod: &str, name: &str) -> String {
        std::fs::read_to_string(self.dir(pod).join(name)).unwrap_or_default()
    }

    fn dir(&self, pod: &str) -> PathBuf {
        self.sim.pod_dir(NS, pod)
    }
}

struct Ctl {
    metrics: Metrics,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

fn args(identity: &str) -> ControllerArgs {
    ControllerArgs {
        max_concurrent_pods: 16,
        lease_name: "restore-hooks-controller".into(),
        lease_namespace: NS.into(),
        identity: Some(identity.into()),
        lease_duration: Duration::from_secs(2),
    }
}

fn start_controller(client: &Client, identity: &str) -> Ctl {
    start_with(client, args(identity))
}

fn start_with(client: &Client, args: ControllerArgs) -> Ctl {
    let metrics = Metrics::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(controller::run(ControllerDeps {
        client: client.clone(),
        args,
        engine: EngineConfig::default(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
    }));
    Ctl {
        metrics,
        shutdown,
        task,
    }
}

impl Ctl {
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("controller stops")
            .expect("controller task")
            .expect("controller ran without error");
    }

    fn hooks(&self, result: &str) -> u64 {
        self.metrics.exec_hooks.with_label_values(&[result]).get()
    }
}

fn hook(name: &str, container: &str, script: &str) -> PlannedHook {
    PlannedHook {
        name: name.into(),
        source: format!("restorehook/{name}"),
        index: 0,
        container: container.into(),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        on_error: OnError::Continue,
        exec_timeout_ms: 10_000,
        wait_timeout_ms: None,
        wait_for_ready: false,
    }
}

/// A pod as the webhook leaves it: plan annotation and `pending` label; app containers `app`
/// and `db`, plus whatever `extra` merges in.
fn pod(name: &str, hooks: Vec<PlannedHook>, extra: Value) -> Pod {
    let plan = ExecPlan {
        restore: "nightly-1".into(),
        hooks,
    };
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": NS,
            "labels": {EXEC_LABEL: "pending", "app": "shop"},
            "annotations": {PLAN_ANNOTATION: plan.to_annotation()},
        },
        "spec": {"containers": [
            {"name": "app", "image": "shop:1"},
            {"name": "db", "image": "postgres:16"},
        ]}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

async fn create(env: &Env, pod: &Pod) {
    env.pods()
        .create(&PostParams::default(), pod)
        .await
        .expect("pod created");
}

/// Waits until the controller labelled the pod `done` or `failed`; returns the label and status.
async fn finished(env: &Env, name: &str) -> (String, ExecStatus) {
    loop {
        // Errors are retried: some tests inject API faults that the test's own reads may hit.
        if let Ok(Some(p)) = env.pods().get_opt(name).await {
            let label = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(EXEC_LABEL))
                .cloned()
                .unwrap_or_default();
            if label != "pending" {
                return (label, status(&p).expect("a finished pod has a status"));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn status(p: &Pod) -> Option<ExecStatus> {
    p.metadata
        .annotations
        .as_ref()?
        .get(STATUS_ANNOTATION)
        .map(|s| ExecStatus::from_annotation(s).unwrap())
}

fn phases(s: &ExecStatus) -> Vec<HookPhase> {
    s.hooks.iter().map(|h| h.phase).collect()
}

/// Events about a pod, as (reason, message, reporting instance), oldest first.
async fn events(env: &Env, pod: &str) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::namespaced(env.client.clone(), NS);
    let mut list: Vec<Event> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .collect();
    list.sort_by_key(|e| {
        e.metadata
            .resource_version
            .clone()
            .unwrap_or_default()
            .parse::<u64>()
            .unwrap_or(0)
    });
    list.into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.reporting_instance.unwrap_or_default(),
            )
        })
        .collect()
}

/// Polls `f` until it is true.
async fn eventually<F, Fut>(mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    while !f().await {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

use HookPhase::{Failed as F, Skipped as S, Succeeded as OK};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_in_plan_order_once_their_containers_run() {
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        // RestoreHook status: the CRD and the object the plan's hooks name.
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(env.client.clone());
        crds.create(&PostParams::default(), &RestoreHook::crd()).await.unwrap();
        let rh: Api<RestoreHook> = Api::namespaced(env.client.clone(), NS);
        let obj: RestoreHook = serde_json::from_value(json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "rehydrate", "namespace": NS},
            "spec": {"postHooks": []}
        }))
        .unwrap();
        // The CRD registration may take a moment in a real server; retry briefly.
        let mut tries = 0;
        while let Err(e) = rh.create(&PostParams::default(), &obj).await {
            tries += 1;
            assert!(tries < 50, "RestoreHook create: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let ctl = start_controller(&env.client, "a");
        let mut h = vec![
            hook("rehydrate", "db", "echo first >> order.txt; echo out-1"),
            hook("rehydrate", "app", "echo second >> order.txt"),
            hook("rehydrate", "db", "echo third >> order.txt; echo warn >&2"),
        ];
        for (i, x) in h.iter_mut().enumerate() {
            x.index = i;
        }
        create(&env, &pod("p1", h, json!({}))).await;
        let (label, st) = finished(&env, "p1").await;
        assert_eq!(label, "done");
        assert_eq!(phases(&st), vec![OK, OK, OK]);
        assert_eq!(env.file("p1", "order.txt"), "first\nsecond\nthird\n");
        assert_eq!(st.hooks[0].stdout, "out-1\n");
        assert_eq!(st.hooks[2].stderr, "warn\n");
        assert_eq!(st.hooks[0].exit_code, Some(0));
        assert!(st.hooks.iter().all(|h| h.started_at.is_some() && h.finished_at.is_some()));
        assert_eq!(ctl.hooks("succeeded"), 3);
        assert!(ctl.metrics.exec_duration.get_sample_count() >= 3);

        eventually(|| async { events(&env, "p1").await.len() >= 4 }).await;
        let evs = events(&env, "p1").await;
        let reasons: Vec<&str> = evs.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(reasons, vec!["HookSucceeded", "HookSucceeded", "HookSucceeded", "HooksCompleted"]);
        assert!(evs[0].1.contains("out-1"), "{evs:?}");

        eventually(|| async {
            let r = rh.get("rehydrate").await.unwrap();
            r.status.is_some_and(|s| s.pods_planned == 1 && s.hooks.succeeded == 3 && s.hooks.pending == 0)
        })
        .await;
        eventually(|| async { ctl.metrics.pending_pods.get() == 0 }).await;
        let text = ctl.metrics.render();
        assert!(text.contains("restore_hooks_exec_hooks_total{result=\"succeeded\"} 3"), "{text}");
        assert!(text.contains("restore_hooks_leader 1"));
        ctl.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_error_continue_goes_on_and_fail_skips_the_rest() {
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        let ctl = start_controller(&env.client, "a");
        let failing = hook("bad", "db", "echo oops >&2; exit 3");
        let mut fail = failing.clone();
        fail.on_error = OnError::Fail;

        create(
            &env,
            &pod(
                "cont",
                vec![failing, hook("next", "db", "touch ran")],
                json!({}),
            ),
        )
        .await;
        create(
            &env,
            &pod(
                "fail",
                vec![fail, hook("next", "db", "touch ran")],
                json!({}),
            ),
        )
        .await;

        let (label, st) = finished(&env, "cont").await;
        assert_eq!(
            label, "failed",
            "any failure, Continue too, labels the pod failed"
        );
        assert_eq!(phases(&st), vec![F, OK]);
        assert_eq!(st.hooks[0].exit_code, Some(3));
        assert_eq!(st.hooks[0].message, "command terminated with exit code 3");
        assert_eq!(st.hooks[0].stderr, "oops\n");
        assert!(env.dir("cont").join("ran").exists());

        let (label, st) = finished(&env, "fail").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, S]);
        assert_eq!(
            st.hooks[1].message,
            "skipped: hook bad (#0) failed with onError: Fail"
        );
        assert!(
            !env.dir("fail").join("ran").exists(),
            "a skipped hook never runs"
        );
        assert_eq!(ctl.hooks("failed"), 2);
        assert_eq!(ctl.hooks("skipped"), 1);
        assert_eq!(ctl.hooks("succeeded"), 1);
        eventually(|| async {
            events(&env, "fail")
                .await
                .iter()
                .any(|e| e.0 == "HooksCompleted")
        })
        .await;
        let evs = events(&env, "fail").await;
        assert!(
            evs.iter().any(|e| e.0 == "HookFailed"
                && e.1.contains("exit code 3")
                && e.1.contains("oops")),
            "{evs:?}"
        );
        ctl.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_waits_are_not_executed_and_exec_timeouts_fail() {
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        let ctl = start_controller(&env.client, "a");
        let mut late = hook("late", "db", "touch ran");
        late.wait_for_ready = true;
        late.wait_timeout_ms = Some(1500);
        create(
            &env,
            &pod(
                "never",
                vec![late],
                json!({"metadata": {"annotations": {"sim.kube/never-ready": "true"}}}),
            ),
        )
        .await;
        let mut slow = hook("slow", "db", "sleep 5; touch slept");
        slow.exec_timeout_ms = 500;
        create(
            &env,
            &pod(
                "slow",
                vec![slow, hook("after", "db", "touch after")],
                json!({}),
            ),
        )
        .await;

        // While its hook waits, the pod is tracked.
        eventually(|| async { ctl.metrics.pending_pods.get() >= 1 }).await;
        let (label, st) = finished(&env, "never").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F]);
        assert_eq!(
            st.hooks[0].message,
            "container db was not up within 1.5s of pod creation; not executed"
        );
        assert!(st.hooks[0].started_at.is_none());
        assert!(!env.dir("never").join("ran").exists());

        let (label, st) = finished(&env, "slow").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, OK]);
        assert_eq!(st.hooks[0].message, "timed out after 500ms");
        assert!(env.dir("slow").join("after").exists());
        ctl.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_ready_waits_for_readiness_and_sidecars_are_targets() {
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        let mut log = env.sim.subscribe_log();
        let ctl = start_controller(&env.client, "a");
        let mut ready = hook("ready", "db", "touch ran");
        ready.wait_for_ready = true;
        create(
            &env,
            &pod(
                "ready",
                vec![ready],
                json!({"metadata": {"annotations": {"sim.kube/ready-after": "1500ms"}}}),
            ),
        )
        .await;
        create(
            &env,
            &pod(
                "side",
                vec![hook("proxy", "proxy", "echo sidecar > side.txt")],
                json!({"spec": {"initContainers": [
                    {"name": "proxy", "image": "envoy:1", "restartPolicy": "Always"}
                ]}}),
            ),
        )
        .await;

        let (label, _) = finished(&env, "ready").await;
        assert_eq!(label, "done");
        // The simulator's step log: the exec came after the container became Ready.
        let mut ready_seen = false;
        let mut exec_after_ready = false;
        loop {
            let ev = match log.try_recv() {
                Ok(ev) => ev,
                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => continue,
                Err(_) => break,
            };
            if ev.name != "ready" {
                continue;
            }
            let m = ev.message.to_lowercase();
            if ev.kind == kube_sim::SimEventKind::Container
                && m.contains("ready")
                && !m.contains("not ready")
            {
                ready_seen = true;
            }
            if ev.kind == kube_sim::SimEventKind::Exec && ready_seen {
                exec_after_ready = true;
            }
        }
        assert!(
            exec_after_ready,
            "the exec ran only after the container was Ready"
        );

        let (label, st) = finished(&env, "side").await;
        assert_eq!(label, "done", "{st:?}");
        assert_eq!(env.file("side", "side.txt"), "sidecar\n");
        ctl.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_deleted_or_terminal_before_their_hooks_fail_them() {
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        let ctl = start_controller(&env.client, "a");
        // Deleted when the first exec starts.
        env.sim.faults().delete_pod_on_exec(NS, "gone");
        create(
            &env,
            &pod(
                "gone",
                vec![hook("one", "db", "sleep 1"), hook("two", "db", "touch ran")],
                json!({}),
            ),
        )
        .await;
        // Never Ready, then Succeeded: the waiting hook fails.
        let mut waiting = hook("w", "db", "touch ran");
        waiting.wait_for_ready = true;
        create(
            &env,
            &pod(
                "job",
                vec![waiting],
                json!({"metadata": {"annotations": {"sim.kube/never-ready": "true"}}}),
            ),
        )
        .await;

        eventually(|| async {
            let evs = events(&env, "gone").await;
            evs.iter().filter(|e| e.0 == "HookFailed").count() >= 2
        })
        .await;
        let evs = events(&env, "gone").await;
        assert!(
            evs.iter()
                .any(|e| e.1.contains("pod was deleted before the hook ran")),
            "{evs:?}"
        );
        assert!(!env.dir("gone").join("ran").exists());
        assert!(env.pods().get_opt("gone").await.unwrap().is_none());

        // Give the worker time to observe the pod waiting, then end the pod.
        eventually(|| async {
            env.pods()
                .get("job")
                .await
                .ok()
                .and_then(|p| status(&p))
                .is_some()
        })
        .await;
        env.sim.set_pod_phase(NS, "job", "Succeeded").await;
        let (label, st) = finished(&env, "job").await;
        assert_eq!(label, "failed");
        assert_eq!(
            st.hooks[0].message,
            "pod reached phase Succeeded before the hook ran"
        );
        assert!(!env.dir("job").join("ran").exists());
        assert!(ctl.hooks("failed") >= 3);
        ctl.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_never_runs_a_hook_twice() {
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        let first = start_controller(&env.client, "a");
        create(
            &env,
            &pod(
                "p",
                vec![
                    hook("long", "db", "echo run >> long.txt; sleep 2"),
                    hook("next", "db", "echo run >> next.txt"),
                ],
                json!({}),
            ),
        )
        .await;
        // Kill the controller while the first hook is recorded Running and its process runs.
        eventually(|| async {
            env.pods()
                .get("p")
                .await
                .ok()
                .and_then(|p| status(&p))
                .is_some_and(|s| s.hooks[0].phase == HookPhase::Running)
        })
        .await;
        eventually(|| async { env.file("p", "long.txt") == "run\n" }).await;
        first.task.abort();
        let _ = first.task.await;

        // Same identity: it holds the Lease at once (a new replica would wait for expiry).
        let second = start_controller(&env.client, "a");
        let (label, st) = finished(&env, "p").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, OK]);
        assert_eq!(
            st.hooks[0].message,
            "interrupted (controller restarted during the exec); not re-run: hooks run at most once"
        );
        // Let the orphaned first exec finish: it ran exactly once.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(env.file("p", "long.txt"), "run\n");
        assert_eq!(env.file("p", "next.txt"), "run\n");
        second.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_execs_and_a_successor_takes_over() {
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        let a = start_controller(&env.client, "replica-a");
        eventually(|| async { a.metrics.leader.get() == 1 }).await;
        let b = start_controller(&env.client, "replica-b");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(b.metrics.leader.get(), 0);

        create(
            &env,
            &pod("one", vec![hook("h", "db", "echo x >> ran.txt")], json!({})),
        )
        .await;
        let (label, _) = finished(&env, "one").await;
        assert_eq!(label, "done");
        assert_eq!(env.file("one", "ran.txt"), "x\n");
        assert_eq!(a.hooks("succeeded"), 1);
        assert_eq!(b.hooks("succeeded"), 0);

        // A stops (releases the Lease); B takes over well before the Lease would expire.
        a.stop().await;
        let lease =
            Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(env.client.clone(), NS)
                .get("restore-hooks-controller")
                .await
                .unwrap();
        let holder = lease.spec.unwrap_or_default().holder_identity;
        assert_ne!(
            holder.as_deref(),
            Some("replica-a"),
            "a stopped replica releases the Lease"
        );
        eventually(|| async { b.metrics.leader.get() == 1 }).await;
        create(
            &env,
            &pod("two", vec![hook("h", "db", "echo x >> ran.txt")], json!({})),
        )
        .await;
        let (label, _) = finished(&env, "two").await;
        assert_eq!(label, "done");
        assert_eq!(b.hooks("succeeded"), 1);
        eventually(|| async {
            events(&env, "two")
                .await
                .iter()
                .any(|e| e.0 == "HooksCompleted")
        })
        .await;
        assert!(events(&env, "two").await.iter().all(|e| e.2 == "replica-b"));
        b.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_and_dropped_watches_are_survived() {
    bounded(Duration::from_secs(90), async {
        let env = env().await;
        let faults = env.sim.faults();
        // Fail the first list of pods and several writes; drop watches while hooks run.
        faults.fail_next("list", "pods", 2);
        faults.fail_next("patch", "pods", 3);
        faults.fail_next("get", "pods", 2);
        faults.fail_next("*", "leases", 2);
        let ctl = start_controller(&env.client, "a");
        for i in 0..5 {
            create(
                &env,
                &pod(
                    &format!("p{i}"),
                    vec![
                        hook("a", "db", "echo a >> h.txt; sleep 0.2"),
                        hook("b", "app", "echo b >> h.txt"),
                    ],
                    json!({}),
                ),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        faults.drop_watches();
        faults.fail_next("watch", "pods", 2);
        tokio::time::sleep(Duration::from_millis(300)).await;
        faults.drop_watches();
        for i in 0..5 {
            let name = format!("p{i}");
            let (label, st) = finished(&env, &name).await;
            assert_eq!(label, "done", "{name}: {st:?}");
            assert_eq!(
                env.file(&name, "h.txt"),
                "a\nb\n",
                "{name}: each hook ran exactly once"
            );
        }
        ctl.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_pods_with_two_hooks_each() {
    bounded(Duration::from_secs(300), async {
        let env = env().await;
        let mut a = args("a");
        a.max_concurrent_pods = 32;
        let ctl = start_with(&env.client, a);
        eventually(|| async { ctl.metrics.leader.get() == 1 }).await;
        let started = Instant::now();
        let pods = Arc::new(env.pods());
        futures::stream::iter(0..200)
            .map(|i| {
                let pods = pods.clone();
                async move {
                    let p = pod(
                        &format!("load-{i}"),
                        vec![hook("a", "db", "echo a >> h.txt"), hook("b", "app", "echo b >> h.txt")],
                        json!({}),
                    );
                    pods.create(&PostParams::default(), &p).await.map(|_| ())
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await
            .expect("pods created");
        let created = started.elapsed();
        loop {
            let done = env
                .pods()
                .list(&ListParams::default().labels(&format!("{EXEC_LABEL}=done")))
                .await
                .unwrap()
                .items
                .len();
            if done == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let elapsed = started.elapsed();
        println!(
            "200 pods x 2 hooks: created in {created:?}, all hooks done in {elapsed:?} (from first create)"
        );
        assert_eq!(ctl.hooks("succeeded"), 400);
        let mut counts = BTreeMap::new();
        for i in [0, 57, 199] {
            *counts.entry(env.file(&format!("load-{i}"), "h.txt")).or_insert(0) += 1;
        }
        assert_eq!(counts.keys().collect::<Vec<_>>(), vec!["a\nb\n"]);
        ctl.stop().await;
        // Shut down pods' processes, then the sim.
        let _ = env.pods().delete("load-0", &DeleteParams::default()).await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_stops_new_execs_until_it_is_held_again() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Patch, PatchParams};
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        let ctl = start_controller(&env.client, "a");
        eventually(|| async { ctl.metrics.leader.get() == 1 }).await;
        // Another holder takes the Lease (as after a network partition): renewals now fail.
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), NS);
        let steal = |holder: Value| {
            let leases = leases.clone();
            async move {
                let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    jiff::Timestamp::now(),
                );
                leases
                    .patch(
                        "restore-hooks-controller",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"holderIdentity": holder, "renewTime": now, "leaseDurationSeconds": 30}})),
                    )
                    .await
                    .unwrap();
            }
        };
        steal(json!("intruder")).await;
        eventually(|| async { ctl.metrics.leader.get() == 0 }).await;
        create(&env, &pod("p", vec![hook("h", "db", "touch ran")], json!({}))).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!env.dir("p").join("ran").exists(), "no exec without the Lease");
        // The intruder releases it: the controller takes it again and runs the hook.
        steal(Value::Null).await;
        let (label, _) = finished(&env, "p").await;
        assert_eq!(label, "done");
        assert!(env.dir("p").join("ran").exists());
        ctl.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_pods_bounds_parallel_execs() {
    bounded(Duration::from_secs(60), async {
        let env = env().await;
        let mut a = args("a");
        a.max_concurrent_pods = 1;
        let ctl = start_with(&env.client, a);
        // Every hook of every pod appends to one shared file: with one slot, starts and ends
        // strictly alternate.
        let shared = env.tmp.path().join("concurrency.log");
        let script = format!(
            "echo start >> {0}; sleep 0.2; echo end >> {0}",
            shared.display()
        );
        for i in 0..3 {
            create(
                &env,
                &pod(
                    &format!("c{i}"),
                    vec![hook("a", "db", &script), hook("b", "app", &script)],
                    json!({}),
                ),
            )
            .await;
        }
        for i in 0..3 {
            assert_eq!(finished(&env, &format!("c{i}")).await.0, "done");
        }
        let log = std::fs::read_to_string(&shared).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 12);
        for pair in lines.chunks(2) {
            assert_eq!(pair, ["start", "end"], "execs overlapped: {log}");
        }
        ctl.stop().await;
        env.sim.shutdown().await;
    })
    .await;
}
