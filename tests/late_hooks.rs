//! Hook objects that arrive after their pods (docs/behaviour.md §7.2, §7.3) and ClusterRestoreHook
//! selection (§2.6), on the shared simulator testbed: pods are admitted through the real HTTPS
//! webhook registered like the chart, and the controller execs through the simulator's pods/exec,
//! so every command really runs (as a local process in the pod's directory). Each test counts
//! executions in a file the command appends to, and reads the pod's plan, labels, the hook
//! object's status and Events: what an operator would look at.
//!
//! Waits are bounded only as failure guards; no assertion depends on how fast anything is.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, PostParams};
use restore_hooks::cli::ControllerArgs;
use restore_hooks::hooks::plan::{
    ExecPlan, ExecStatus, HookPhase, PLAN_ANNOTATION, RESTORE_RUN_LABEL,
};
use restore_hooks::hooks::types::{ClusterRestoreHook, HookObjectStatus, RestoreHook, RestoreRun};
use restore_hooks::testbed::{
    ControllerHandle, GUARD, RESTORE, Testbed, TestbedOptions, bounded, exec_label,
};
use restore_hooks_testkit::eventually;
use serde_json::{Value, json};

const NS: &str = "shop";
/// A whole test's limit: a guard against hangs, not a speed requirement.
const LIMIT: Duration = Duration::from_secs(150);

/// The simulator, the webhook (it marks admitted pods, signs their plans) and the watch caches.
async fn testbed() -> Testbed {
    restore_hooks::testbed::log_from_env();
    let bed = Testbed::start(TestbedOptions {
        webhook: true,
        ..TestbedOptions::default()
    })
    .await
    .expect("the testbed starts");
    bed.create_namespace(NS, json!({})).await.unwrap();
    bed
}

/// A controller that leads: late hooks are only added by the leader.
async fn leading(bed: &Testbed, identity: &str, args: ControllerArgs) -> ControllerHandle {
    let c = bed.start_controller(identity, args, None);
    eventually!(
        "the controller to take the Lease",
        c.is_leader().then_some(())
    );
    c
}

/// Stops a controller as SIGTERM would; it must stop cleanly.
async fn stop(ctl: ControllerHandle) {
    if let Err(e) = ctl.stop().await {
        panic!("the controller failed: {e:#}");
    }
}

/// [`Testbed::finished`] (label and status once the pod is `done` or `failed`), with a guard.
async fn finished(bed: &Testbed, namespace: &str, name: &str) -> (String, Option<ExecStatus>) {
    match tokio::time::timeout(GUARD, bed.finished(namespace, name)).await {
        Ok(done) => done,
        Err(_) => {
            let pod = get_pod(bed, namespace, name).await;
            panic!("{namespace}/{name} did not finish: {:#?}", pod.metadata);
        }
    }
}

/// A pod as Velero restores it: the restore label, app containers `app` and `db`.
fn restored_pod(namespace: &str, name: &str, labels: Value) -> Pod {
    let mut all = json!({"velero.io/restore-name": RESTORE});
    json_patch::merge(&mut all, &labels);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": all},
        "spec": {"containers": [
            {"name": "app", "image": "shop:1"},
            {"name": "db", "image": "postgres:16"},
        ]}
    }))
    .unwrap()
}

/// Creates the pod through the webhook and checks it was admitted in the restore scope (marked
/// with the restore-run label, which is how late hook objects find it).
async fn admit(bed: &Testbed, pod: Pod) -> Pod {
    let ns = pod.metadata.namespace.clone().unwrap();
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), &ns);
    let admitted = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("the pod is admitted");
    let run = admitted
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(RESTORE_RUN_LABEL));
    assert_eq!(
        run.map(String::as_str),
        Some(RESTORE),
        "the webhook marks the pod: {:?}",
        admitted.metadata.labels
    );
    admitted
}

/// Waits until the pod's app containers run (Velero's pods are up before their hooks arrive).
async fn running(bed: &Testbed, namespace: &str, name: &str) {
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), namespace);
    eventually!(
        format!("{namespace}/{name} to run"),
        pods.get(name)
            .await
            .ok()
            .and_then(|p| p.status?.phase)
            .filter(|p| p == "Running")
    );
}

async fn get_pod(bed: &Testbed, namespace: &str, name: &str) -> Pod {
    Api::<Pod>::namespaced(bed.client.clone(), namespace)
        .get(name)
        .await
        .unwrap()
}

fn plan_of(pod: &Pod) -> Option<ExecPlan> {
    let text = pod.metadata.annotations.as_ref()?.get(PLAN_ANNOTATION)?;
    Some(ExecPlan::from_annotation(text).expect("a readable plan"))
}

/// Lines a command appended to `file` in the pod's directory: one per execution.
fn runs(bed: &Testbed, namespace: &str, pod: &str, file: &str) -> usize {
    std::fs::read_to_string(bed.pod_dir(namespace, pod).join(file))
        .unwrap_or_default()
        .lines()
        .count()
}

async fn create_restore_hook(bed: &Testbed, name: &str, spec: Value) {
    let api: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NS);
    let rh: RestoreHook = serde_json::from_value(json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &rh)
        .await
        .expect("the RestoreHook is created");
}

/// RestoreHook `name` selecting the pods labelled `app=<app>`, with one exec hook that appends to
/// `warm.log` in container `app`.
async fn warming_hook(bed: &Testbed, name: &str, app: &str) {
    let spec = json!({
        "labelSelector": {"matchLabels": {"app": app}},
        "postHooks": [appending_exec("app", "warm.log")],
    });
    create_restore_hook(bed, name, spec).await;
}

async fn create_cluster_hook(bed: &Testbed, name: &str, spec: Value) {
    let api: Api<ClusterRestoreHook> = Api::all(bed.client.clone());
    let crh: ClusterRestoreHook = serde_json::from_value(json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "ClusterRestoreHook",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &crh)
        .await
        .expect("the ClusterRestoreHook is created");
}

/// Waits until the index (the webhook's and the controllers' cache) has RestoreHook `name`.
async fn cached_restore_hook(bed: &Testbed, name: &str) {
    eventually!(
        format!("the cache to have RestoreHook {name}"),
        bed.index
            .read()
            .restore_hooks(NS)
            .any(|h| h.name == name)
            .then_some(())
    );
}

async fn restore_hook_status(bed: &Testbed, name: &str) -> HookObjectStatus {
    let api: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NS);
    api.get(name).await.unwrap().status.unwrap_or_default()
}

async fn cluster_hook_status(bed: &Testbed, name: &str) -> HookObjectStatus {
    let api: Api<ClusterRestoreHook> = Api::all(bed.client.clone());
    api.get(name).await.unwrap().status.unwrap_or_default()
}

fn condition<'a>(status: &'a HookObjectStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Events about one object (`kind`/`name`) with `reason`, in `namespace`.
async fn events(
    bed: &Testbed,
    namespace: &str,
    kind: &str,
    name: &str,
    reason: &str,
) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(bed.client.clone(), namespace);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some(kind)
                && e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

/// A RestoreHook `postHooks` exec entry appending to `file` (one line per run).
fn appending_exec(container: &str, file: &str) -> Value {
    json!({"exec": {
        "container": container,
        "command": ["/bin/sh", "-c", format!("echo ran >> {file}; echo appended to {file}")],
    }})
}

/// The pod is admitted first (nothing selects it yet); the RestoreHook arrives two seconds later,
/// as Velero restores custom resources after pods. Its exec hook is appended, run exactly once,
/// and the RestoreHook says so (status counts, `LateHooks=True`, a `LateHooksAdded` Event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_hook_created_after_its_pod_runs_its_exec_hook_once() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl", bed.controller_args()).await;
        let admitted = admit(&bed, restored_pod(NS, "cache-0", json!({"app": "cache"}))).await;
        assert!(
            plan_of(&admitted).is_none(),
            "nothing selected the pod at admission"
        );
        running(&bed, NS, "cache-0").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        warming_hook(&bed, "cache-warm", "cache").await;

        let (label, status) = finished(&bed, NS, "cache-0").await;
        assert_eq!(label, "done");
        let status = status.expect("a status");
        assert_eq!(status.hooks.len(), 1);
        assert_eq!(status.hooks[0].phase, HookPhase::Succeeded, "{status:?}");
        let plan =
            plan_of(&get_pod(&bed, NS, "cache-0").await).expect("the controller wrote a plan");
        assert_eq!(plan.restore, RESTORE);
        assert_eq!(plan.hooks.len(), 1);
        assert_eq!(plan.hooks[0].source, "restorehook/cache-warm");

        let status = eventually!("the RestoreHook to count the pod", {
            let s = restore_hook_status(&bed, "cache-warm").await;
            (s.pods_planned == 1 && s.hooks.succeeded == 1 && condition(&s, "LateHooks").is_some())
                .then_some(s)
        });
        let late = condition(&status, "LateHooks").unwrap();
        assert_eq!(
            (late.status.as_str(), late.reason.as_str()),
            ("True", "Added"),
            "{late:?}"
        );
        assert!(late.message.contains("shop/cache-0"), "{late:?}");
        eventually!(
            "a LateHooksAdded Event on the RestoreHook",
            (!events(&bed, NS, "RestoreHook", "cache-warm", "LateHooksAdded")
                .await
                .is_empty())
            .then_some(())
        );
        // Everything about the pod has been written by now; the hook ran once, not once per scan.
        assert_eq!(runs(&bed, NS, "cache-0", "warm.log"), 1);
        assert_eq!(ctl.metrics.late_hooks.get(), 1);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A RestoreHook that arrives after `--late-hook-window` (here 3 s) has passed since the pod's
/// creation is not added to it: its command never runs, and its `LateHooks` condition says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_hook_created_after_the_late_hook_window_does_not_run() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let mut args = bed.controller_args();
        args.late_hook_window = Duration::from_secs(3);
        let ctl = leading(&bed, "ctl", args).await;
        let admitted = admit(&bed, restored_pod(NS, "old-0", json!({"app": "old"}))).await;
        running(&bed, NS, "old-0").await;
        // Wait (by the pod's own creationTimestamp) until the window has passed.
        let created = admitted.metadata.creation_timestamp.clone().unwrap().0;
        eventually!(
            "the pod to be older than the late-hook window",
            (jiff::Timestamp::now().duration_since(created) > jiff::SignedDuration::from_secs(5))
                .then_some(())
        );
        create_restore_hook(
            &bed,
            "too-late",
            json!({
                "labelSelector": {"matchLabels": {"app": "old"}},
                "postHooks": [appending_exec("app", "late.log")],
            }),
        )
        .await;

        let status = eventually!("the LateHooks condition", {
            let s = restore_hook_status(&bed, "too-late").await;
            condition(&s, "LateHooks").is_some().then_some(s)
        });
        let late = condition(&status, "LateHooks").unwrap();
        assert_eq!(
            (late.status.as_str(), late.reason.as_str()),
            ("False", "OutsideLateHookWindow"),
            "{late:?}"
        );
        assert!(
            late.message.contains("shop/old-0") && late.message.contains("--late-hook-window"),
            "{late:?}"
        );
        let warned = eventually!("a Warning Event on the RestoreHook", {
            let e = events(&bed, NS, "RestoreHook", "too-late", "LateHooksAdded").await;
            e.into_iter()
                .find(|e| e.type_.as_deref() == Some("Warning"))
        });
        assert!(warned.message.unwrap_or_default().contains("shop/old-0"));
        // The scan that wrote the condition decided about the pod: its plan was left alone.
        let pod = get_pod(&bed, NS, "old-0").await;
        assert!(
            plan_of(&pod).is_none(),
            "no late hook was added: {:?}",
            pod.metadata.annotations
        );
        assert_eq!(exec_label(&pod), "");
        assert_eq!(status.pods_planned, 0);
        assert_eq!(runs(&bed, NS, "old-0", "late.log"), 0);
        assert_eq!(ctl.metrics.late_hooks.get(), 0);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A late RestoreHook's init hooks cannot be injected into a running pod: they are recorded as
/// missed in the plan, counted in the RestoreHook's status (`hooks.missedInit`,
/// `missedInitPods`) and the restore's RestoreRun, and announced by a Warning `InitHooksMissed`
/// Event on the RestoreHook. The init container is never added and its command never runs; the
/// same object's exec hook still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_hooks_of_a_late_restore_hook_are_reported_missed_not_applied() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl", bed.controller_args()).await;
        admit(&bed, restored_pod(NS, "db-0", json!({"app": "db"}))).await;
        running(&bed, NS, "db-0").await;
        create_restore_hook(
            &bed,
            "db-prepare",
            json!({
                "labelSelector": {"matchLabels": {"app": "db"}},
                "postHooks": [
                    {"init": {"initContainers": [{
                        "name": "restore-prepare", "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c", "echo ran >> init.log"],
                    }]}},
                    appending_exec("db", "exec.log"),
                ],
            }),
        )
        .await;

        let (label, _) = finished(&bed, NS, "db-0").await;
        assert_eq!(
            label, "done",
            "a missed init hook does not fail the pod's exec hooks"
        );
        let pod = get_pod(&bed, NS, "db-0").await;
        let plan = plan_of(&pod).unwrap();
        assert_eq!(plan.missed_init.len(), 1, "{plan:?}");
        assert_eq!(plan.missed_init[0].source, "restorehook/db-prepare");
        assert_eq!(plan.missed_init[0].index, 0);
        assert_eq!(plan.hooks.len(), 1);
        assert_eq!(plan.hooks[0].index, 1);
        let inits = pod
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .clone()
            .unwrap_or_default();
        assert!(
            inits.is_empty(),
            "no init container was added to the running pod: {inits:?}"
        );

        let status = eventually!("the RestoreHook to report the missed init hooks", {
            let s = restore_hook_status(&bed, "db-prepare").await;
            (s.hooks.missed_init == 1
                && s.hooks.succeeded == 1
                && condition(&s, "LateHooks").is_some())
            .then_some(s)
        });
        assert_eq!(status.missed_init_pods, vec!["shop/db-0".to_string()]);
        let late = condition(&status, "LateHooks").unwrap();
        assert_eq!(
            (late.status.as_str(), late.reason.as_str()),
            ("False", "InitHooksMissed"),
            "{late:?}"
        );
        let missed = eventually!("an InitHooksMissed Event on the RestoreHook", {
            events(&bed, NS, "RestoreHook", "db-prepare", "InitHooksMissed")
                .await
                .into_iter()
                .next()
        });
        assert_eq!(missed.type_.as_deref(), Some("Warning"));
        assert!(missed.message.unwrap_or_default().contains("shop/db-0"));

        // The restore's view counts it too, and a missed init hook is not a complete restore.
        let runs_api: Api<RestoreRun> = Api::all(bed.client.clone());
        let run = eventually!("the RestoreRun to count the missed init hook", {
            runs_api
                .get_opt(RESTORE)
                .await
                .ok()
                .flatten()
                .and_then(|r| r.status)
                .filter(|s| s.hooks.missed_init == 1 && s.hooks.pending == 0)
        });
        assert_eq!(run.phase, "PartiallyFailed", "{run:?}");
        assert_eq!(plan.late_from, Some(0), "every hook of the plan came late");
        // `restore-hooks describe` shows the late exec hook, the missed init hook and the hook
        // object's InitHooksMissed Event (§8.4).
        let report = describe(&bed).await;
        assert_eq!(report.phase, "PartiallyFailed");
        let late: Vec<(&str, &str, &str)> = report
            .late_hooks
            .iter()
            .map(|l| (l.pod.as_str(), l.source.as_str(), l.phase.as_str()))
            .collect();
        assert_eq!(late, [("db-0", "restorehook/db-prepare", "Succeeded")]);
        let missed: Vec<(&str, &str, usize)> = report
            .missed_init_hooks
            .iter()
            .map(|m| (m.pod.as_str(), m.source.as_str(), m.index))
            .collect();
        assert_eq!(missed, [("db-0", "restorehook/db-prepare", 0)]);
        assert!(
            report.events.iter().any(|e| e.kind == "RestoreHook"
                && e.name == "db-prepare"
                && e.reason == "InitHooksMissed"),
            "{:?}",
            report.events
        );
        assert_eq!(runs(&bed, NS, "db-0", "init.log"), 0);
        assert_eq!(runs(&bed, NS, "db-0", "exec.log"), 1);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// `restore-hooks describe` of restore [`RESTORE`], read through the testbed's client.
async fn describe(bed: &Testbed) -> restore_hooks::restore::report::Report {
    use clap::Parser as _;
    let argv = ["restore-hooks", "describe", RESTORE];
    let restore_hooks::cli::Command::Describe(args) = restore_hooks::cli::Cli::try_parse_from(argv)
        .unwrap()
        .command
    else {
        unreachable!()
    };
    restore_hooks::describe_cli::collect(&bed.client, &args)
        .await
        .unwrap()
        .expect("a report")
}

/// A pod whose hooks have all ended gets a late hook object's exec hooks too (its label goes back
/// to `pending`); the hooks it ran before do not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_hooks_extend_a_finished_pod_without_rerunning_its_hooks() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl", bed.controller_args()).await;
        create_restore_hook(
            &bed,
            "first",
            json!({
                "labelSelector": {"matchLabels": {"app": "web"}},
                "postHooks": [appending_exec("app", "first.log")],
            }),
        )
        .await;
        cached_restore_hook(&bed, "first").await;
        let admitted = admit(&bed, restored_pod(NS, "web-0", json!({"app": "web"}))).await;
        assert_eq!(
            plan_of(&admitted).map(|p| p.hooks.len()),
            Some(1),
            "planned at admission"
        );
        let (label, _) = finished(&bed, NS, "web-0").await;
        assert_eq!(label, "done");

        create_restore_hook(
            &bed,
            "second",
            json!({
                "labelSelector": {"matchLabels": {"app": "web"}},
                "postHooks": [appending_exec("db", "second.log")],
            }),
        )
        .await;
        // The pod was `done` already: wait for the plan to grow (the same write sets the label
        // back to `pending`), then for the new end.
        eventually!(
            "the late hook to be appended",
            plan_of(&get_pod(&bed, NS, "web-0").await).filter(|p| p.hooks.len() == 2)
        );
        let (label, status) = finished(&bed, NS, "web-0").await;
        assert_eq!(label, "done", "{status:?}");
        let status = status.unwrap();
        assert_eq!(status.hooks.len(), 2, "{status:?}");
        assert!(
            status.hooks.iter().all(|h| h.phase == HookPhase::Succeeded),
            "{status:?}"
        );
        assert_eq!(runs(&bed, NS, "web-0", "first.log"), 1);
        assert_eq!(runs(&bed, NS, "web-0", "second.log"), 1);
        let plan = plan_of(&get_pod(&bed, NS, "web-0").await).unwrap();
        let sources: Vec<&str> = plan.hooks.iter().map(|h| h.source.as_str()).collect();
        assert_eq!(sources, ["restorehook/first", "restorehook/second"]);
        assert_eq!(plan.late_from, Some(1), "the late hooks begin at #1 (§5.2)");
        // `restore-hooks describe` lists the appended hook as late, and only it (§8.4).
        let report = describe(&bed).await;
        let late: Vec<(&str, usize, &str)> = report
            .late_hooks
            .iter()
            .map(|l| (l.pod.as_str(), l.position, l.hook.as_str()))
            .collect();
        assert_eq!(late, [("web-0", 1, "second")]);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A RestoreHook created while no controller led (a restore during a controller outage) is
/// looked at when a leader starts: its exec hooks still reach the pods admitted before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_hook_created_while_no_controller_led_is_applied_by_the_next_leader() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        admit(&bed, restored_pod(NS, "queue-0", json!({"app": "queue"}))).await;
        running(&bed, NS, "queue-0").await;
        create_restore_hook(
            &bed,
            "queue-drain",
            json!({
                "labelSelector": {"matchLabels": {"app": "queue"}},
                "postHooks": [appending_exec("app", "drain.log")],
            }),
        )
        .await;
        cached_restore_hook(&bed, "queue-drain").await;
        let ctl = leading(&bed, "ctl", bed.controller_args()).await;
        let (label, _) = finished(&bed, NS, "queue-0").await;
        assert_eq!(label, "done");
        assert_eq!(runs(&bed, NS, "queue-0", "drain.log"), 1);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// The selectors of the ClusterRestoreHook the tests below use: namespaces labelled `tier=prod`,
/// pods labelled `app=web`, restores `nightly-*`.
fn cluster_hook_spec(file: &str) -> Value {
    json!({
        "restores": ["nightly-*"],
        "namespaceSelector": {"matchLabels": {"tier": "prod"}},
        "labelSelector": {"matchLabels": {"app": "web"}},
        "postHooks": [appending_exec("app", file)],
    })
}

/// Created before the restore, a ClusterRestoreHook applies at admission to the selected pods of
/// the namespaces its namespaceSelector selects, and to nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restore_hook_applies_at_admission_in_selected_namespaces_only() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        bed.create_namespace("prod", json!({"tier": "prod"}))
            .await
            .unwrap();
        bed.create_namespace("dev", json!({"tier": "dev"}))
            .await
            .unwrap();
        let ctl = leading(&bed, "ctl", bed.controller_args()).await;
        create_cluster_hook(&bed, "ca-refresh", cluster_hook_spec("ca.log")).await;
        // What a restore script does before restoring: wait until the hook is served.
        eventually!("ClusterRestoreHook ca-refresh to be Ready", {
            let s = cluster_hook_status(&bed, "ca-refresh").await;
            condition(&s, "Ready")
                .filter(|c| c.status == "True")
                .map(|_| ())
        });

        let selected = admit(&bed, restored_pod("prod", "web-0", json!({"app": "web"}))).await;
        let plan = plan_of(&selected).expect("planned at admission");
        assert_eq!(plan.hooks.len(), 1);
        assert_eq!(plan.hooks[0].source, "clusterrestorehook/ca-refresh");
        assert_eq!(exec_label(&selected), "pending");
        // Same pod labels, unselected namespace; selected namespace, unselected pod labels.
        let other_namespace =
            admit(&bed, restored_pod("dev", "web-0", json!({"app": "web"}))).await;
        let other_pod = admit(&bed, restored_pod("prod", "api-0", json!({"app": "api"}))).await;
        for pod in [&other_namespace, &other_pod] {
            assert!(plan_of(pod).is_none(), "not selected: {:?}", pod.metadata);
            assert_eq!(exec_label(pod), "");
        }

        let (label, _) = finished(&bed, "prod", "web-0").await;
        assert_eq!(label, "done");
        assert_eq!(runs(&bed, "prod", "web-0", "ca.log"), 1);
        let status = eventually!("the ClusterRestoreHook to count its pod", {
            let s = cluster_hook_status(&bed, "ca-refresh").await;
            (s.pods_planned == 1 && s.hooks.succeeded == 1).then_some(s)
        });
        assert_eq!(status.hooks.pending, 0);
        assert!(
            condition(&status, "LateHooks").is_none(),
            "nothing was late: {status:?}"
        );
        assert_eq!(runs(&bed, "dev", "web-0", "ca.log"), 0);
        assert_eq!(runs(&bed, "prod", "api-0", "ca.log"), 0);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// Created after the pods, a ClusterRestoreHook is late like a RestoreHook: its exec hook is
/// added to the already-admitted pod it selects (and runs once), not to the pod in the
/// unselected namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restore_hook_created_after_the_pods_applies_late_to_selected_pods() {
    bounded(LIMIT, late_cluster_hook_by_namespace_labels(false)).await;
}

/// The same with namespaces that the watch caches do not show yet (created a moment ago, or
/// their watch is behind): the controller reads them from the API server, and neither takes the
/// selected namespace for unlabelled nor the other one for selected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_cluster_restore_hook_selects_by_the_labels_of_a_namespace_the_cache_does_not_show_yet()
 {
    bounded(LIMIT, late_cluster_hook_by_namespace_labels(true)).await;
}

/// A ClusterRestoreHook selecting namespace `tier: prod` created after a pod in `prod` and one in
/// `dev` run; with `stall`, namespace events reach no watch (lists and gets still answer).
async fn late_cluster_hook_by_namespace_labels(stall: bool) {
    let bed = testbed().await;
    let ctl = leading(&bed, "ctl", bed.controller_args()).await;
    if stall {
        bed.sim.faults().stall_watches("namespaces");
    }
    bed.create_namespace("prod", json!({"tier": "prod"}))
        .await
        .unwrap();
    bed.create_namespace("dev", json!({"tier": "dev"}))
        .await
        .unwrap();
    admit(&bed, restored_pod("prod", "web-0", json!({"app": "web"}))).await;
    admit(&bed, restored_pod("dev", "web-0", json!({"app": "web"}))).await;
    running(&bed, "prod", "web-0").await;
    running(&bed, "dev", "web-0").await;
    create_cluster_hook(&bed, "ca-refresh", cluster_hook_spec("ca.log")).await;

    let (label, status) = finished(&bed, "prod", "web-0").await;
    assert_eq!(label, "done", "{status:?}");
    if stall {
        // The case under test: the index still does not know the namespaces.
        assert!(bed.index.read().namespace_labels("prod").is_none());
        assert!(bed.index.read().namespace_labels("dev").is_none());
    }
    let plan = plan_of(&get_pod(&bed, "prod", "web-0").await).unwrap();
    assert_eq!(plan.hooks[0].source, "clusterrestorehook/ca-refresh");
    let status = eventually!("the ClusterRestoreHook's LateHooks condition", {
        let s = cluster_hook_status(&bed, "ca-refresh").await;
        (s.hooks.succeeded == 1 && condition(&s, "LateHooks").is_some()).then_some(s)
    });
    let late = condition(&status, "LateHooks").unwrap();
    assert_eq!(late.status, "True", "{late:?}");
    assert!(
        late.message.contains("prod/web-0") && !late.message.contains("dev/web-0"),
        "{late:?}"
    );
    // The scan covered both pods before the condition was written.
    let unselected = get_pod(&bed, "dev", "web-0").await;
    assert!(plan_of(&unselected).is_none());
    assert_eq!(exec_label(&unselected), "");
    assert_eq!(runs(&bed, "prod", "web-0", "ca.log"), 1);
    assert_eq!(runs(&bed, "dev", "web-0", "ca.log"), 0);
    // Events about cluster-scoped objects live in `default`.
    eventually!(
        "a LateHooksAdded Event on the ClusterRestoreHook",
        (!events(
            &bed,
            "default",
            "ClusterRestoreHook",
            "ca-refresh",
            "LateHooksAdded"
        )
        .await
        .is_empty())
        .then_some(())
    );
    bed.sim.faults().resume_watches("namespaces");
    stop(ctl).await;
    bed.stop().await;
}

/// The API server fails the late hook's writes for a moment (500s): the pod is tried again, not
/// given up until the RestoreHook changes, and its hook runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_restore_hook_reaches_its_pod_through_a_moment_of_api_errors() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl", bed.controller_args()).await;
        admit(&bed, restored_pod(NS, "cache-0", json!({"app": "cache"}))).await;
        running(&bed, NS, "cache-0").await;
        // Only the late hook writes pods until its plan is on the pod.
        bed.sim.faults().fail_next("patch", "pods", 3);
        warming_hook(&bed, "cache-warm", "cache").await;
        let (label, status) = finished(&bed, NS, "cache-0").await;
        assert_eq!(label, "done", "{status:?}");
        assert_eq!(runs(&bed, NS, "cache-0", "warm.log"), 1);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A pod that the controller only sees as marked after a RestoreHook's scan (here: its pod
/// watches fail for a while, as in an API server hiccup, while the pod is admitted and the
/// RestoreHook created; in a real cluster, also a webhook replica whose cache lags the
/// controller's) still gets the RestoreHook's exec hook when it is first seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_marked_after_the_restore_hooks_scan_still_gets_its_hook() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl", bed.controller_args()).await;
        // Every pod watch is cut and its next re-watches fail: the controller's view of pods
        // is stale (kube's watcher backs off) while the restore goes on.
        bed.sim.faults().fail_next("watch", "pods", 6);
        bed.sim.faults().drop_watches();
        admit(
            &bed,
            restored_pod(NS, "lagging-0", json!({"app": "lagging"})),
        )
        .await;
        warming_hook(&bed, "lagging-warm", "lagging").await;

        let (label, _) = finished(&bed, NS, "lagging-0").await;
        assert_eq!(label, "done");
        let plan = plan_of(&get_pod(&bed, NS, "lagging-0").await).unwrap();
        assert_eq!(plan.hooks.len(), 1);
        assert_eq!(plan.hooks[0].source, "restorehook/lagging-warm");
        assert_eq!(runs(&bed, NS, "lagging-0", "warm.log"), 1);
        let status = eventually!("the RestoreHook's LateHooks condition", {
            let s = restore_hook_status(&bed, "lagging-warm").await;
            condition(&s, "LateHooks").is_some().then_some(s)
        });
        let late = condition(&status, "LateHooks").unwrap();
        assert_eq!(late.status, "True", "{late:?}");
        assert!(late.message.contains("shop/lagging-0"), "{late:?}");
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// Editing a hook object affects only pods it has not contributed to yet (§7.2): a pod that got
/// its init and exec hooks at admission gets neither the edit's new exec hook nor a "missed init
/// hooks" report. (A second RestoreHook created after the edit is the sync point: the controller
/// handles hook objects in order, so once that one's hook is in the plan, the edit was looked at.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_restore_hook_leaves_pods_it_contributed_to_alone() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl", bed.controller_args()).await;
        let init = json!({"init": {"initContainers": [{
            "name": "restore-prepare", "image": "busybox:1.36",
            "command": ["/bin/sh", "-c", "echo ran >> init.log"],
        }]}});
        create_restore_hook(&bed, "prepare", json!({
            "labelSelector": {"matchLabels": {"app": "db"}},
            "postHooks": [init.clone(), appending_exec("db", "exec.log")],
        }))
        .await;
        cached_restore_hook(&bed, "prepare").await;
        let admitted = admit(&bed, restored_pod(NS, "db-0", json!({"app": "db"}))).await;
        let inits = admitted.spec.as_ref().unwrap().init_containers.clone().unwrap_or_default();
        assert_eq!(inits.len(), 1, "the init hook was injected at admission");
        let (label, _) = finished(&bed, NS, "db-0").await;
        assert_eq!(label, "done");

        let api: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NS);
        let edited = json!({"spec": {"postHooks": [init, appending_exec("db", "exec.log"), appending_exec("app", "edit.log")]}});
        api.patch("prepare", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&edited))
            .await
            .unwrap();
        create_restore_hook(&bed, "probe", json!({
            "labelSelector": {"matchLabels": {"app": "db"}},
            "postHooks": [appending_exec("app", "probe.log")],
        }))
        .await;
        eventually!("the probe's hook to be appended", {
            let pod = get_pod(&bed, NS, "db-0").await;
            plan_of(&pod).filter(|p| p.hooks.iter().any(|h| h.source == "restorehook/probe"))
        });
        let (label, _) = finished(&bed, NS, "db-0").await;
        assert_eq!(label, "done");
        let plan = plan_of(&get_pod(&bed, NS, "db-0").await).unwrap();
        let hooks: Vec<(&str, usize)> = plan.hooks.iter().map(|h| (h.source.as_str(), h.index)).collect();
        assert_eq!(hooks, [("restorehook/prepare", 1), ("restorehook/probe", 0)]);
        assert!(plan.missed_init.is_empty(), "the init hook was not missed: {plan:?}");
        assert_eq!(runs(&bed, NS, "db-0", "init.log"), 1);
        assert_eq!(runs(&bed, NS, "db-0", "exec.log"), 1);
        assert_eq!(runs(&bed, NS, "db-0", "edit.log"), 0);
        assert_eq!(runs(&bed, NS, "db-0", "probe.log"), 1);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A new leader looks at every hook object once (a restore may have happened while none led),
/// but a pod whose annotations already show the object is not read again: after a restore of
/// 20 pods that all got their RestoreHook at admission, the next leader's scan costs the API
/// server no `get pods` for them (before, one each: 5,000 at once after a large restore).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_does_not_read_pods_that_already_show_their_hook_objects() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        warming_hook(&bed, "warm", "web").await;
        cached_restore_hook(&bed, "warm").await;
        let first = leading(&bed, "first", bed.controller_args()).await;
        let pods: Vec<String> = (0..20).map(|i| format!("web-{i}")).collect();
        for name in &pods {
            admit(&bed, restored_pod(NS, name, json!({"app": "web"}))).await;
        }
        for name in &pods {
            assert_eq!(finished(&bed, NS, name).await.0, "done");
        }
        // A pod no hook object selects yet, for the probe below.
        admit(&bed, restored_pod(NS, "probe-0", json!({"app": "probe"}))).await;
        stop(first).await;

        let gets_before = bed.sim.faults().requests("get", "pods");
        let next = leading(&bed, "next", bed.controller_args()).await;
        // The leader handles a new hook object only after its first scan of the known ones:
        // once the probe's late hook ran, that scan is over.
        create_restore_hook(
            &bed,
            "probe",
            json!({
                "labelSelector": {"matchLabels": {"app": "probe"}},
                "postHooks": [appending_exec("app", "probe.log")],
            }),
        )
        .await;
        assert_eq!(finished(&bed, NS, "probe-0").await.0, "done");
        assert_eq!(runs(&bed, NS, "probe-0", "probe.log"), 1);
        let gets = bed.sim.faults().requests("get", "pods") - gets_before;
        // The probe's own late hook reads its pod; the 20 restored pods are not read.
        assert!(
            gets < 10,
            "the new leader read pods one by one: {gets} gets"
        );
        for name in &pods {
            assert_eq!(runs(&bed, NS, name, "warm.log"), 1, "{name}");
        }
        stop(next).await;
        bed.stop().await;
    })
    .await;
}
