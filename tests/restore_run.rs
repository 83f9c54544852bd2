//! The per-restore view and the status of hook objects (docs/behaviour.md §8), on the shared
//! simulator testbed: the real webhook plans the pods, the controller runs their hooks through the
//! simulator's pods/exec, and the RestoreRun, RestoreHook and ClusterRestoreHook statuses are read
//! through the API and through the real kubectl (`kubectl get`, `kubectl wait`), as an operator or
//! a restore script reads them.
//!
//! Waits are bounded only as failure guards; no assertion depends on how fast anything is.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use restore_hooks::hooks::plan::HookPhase;
use restore_hooks::hooks::types::{
    ClusterRestoreHook, FailedPod, HookCounts, HookObjectStatus, RestoreHook, RestoreRun,
    RestoreRunStatus,
};
use restore_hooks::testbed::{
    ControllerHandle, GUARD, RESTORE, Testbed, TestbedOptions, bounded, exec_label, exec_status,
};
use restore_hooks_testkit::eventually;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

const NS: &str = "shop";
/// A whole test's limit: a guard against hangs, not a speed requirement.
const LIMIT: Duration = Duration::from_secs(150);

async fn testbed() -> Testbed {
    let bed = Testbed::start(TestbedOptions {
        webhook: true,
        ..TestbedOptions::default()
    })
    .await
    .expect("the testbed starts");
    bed.create_namespace(NS, json!({})).await.unwrap();
    bed
}

async fn leading(bed: &Testbed, identity: &str) -> ControllerHandle {
    let c = bed.start_controller(identity, bed.controller_args(), None);
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

/// [`Testbed::finished`], with a guard.
async fn finished(bed: &Testbed, namespace: &str, name: &str) -> String {
    tokio::time::timeout(GUARD, bed.finished(namespace, name))
        .await
        .unwrap_or_else(|_| panic!("{namespace}/{name} did not finish"))
        .0
}

async fn create_restore_hook(bed: &Testbed, namespace: &str, name: &str, spec: Value) {
    let api: Api<RestoreHook> = Api::namespaced(bed.client.clone(), namespace);
    let rh: RestoreHook = serde_json::from_value(json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &rh)
        .await
        .expect("the RestoreHook is created");
}

async fn restore_hook(bed: &Testbed, namespace: &str, name: &str) -> RestoreHook {
    Api::<RestoreHook>::namespaced(bed.client.clone(), namespace)
        .get(name)
        .await
        .unwrap()
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Waits until the webhook's cache has the RestoreHook (the webhook decides from it).
async fn compiled(bed: &Testbed, namespace: &str, name: &str) {
    eventually!(
        format!("the webhook's cache to have RestoreHook {namespace}/{name}"),
        bed.index
            .read()
            .restore_hooks(namespace)
            .any(|h| h.name == name)
            .then_some(())
    );
}

/// Creates a pod of restore [`RESTORE`] through the webhook.
async fn restore_pod(bed: &Testbed, name: &str, labels: Value) {
    let mut all = json!({"velero.io/restore-name": RESTORE});
    json_patch::merge(&mut all, &labels);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": all},
        "spec": {"containers": [{"name": "app", "image": "shop:1"}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is admitted");
}

async fn restore_run(bed: &Testbed) -> Option<RestoreRunStatus> {
    let api: Api<RestoreRun> = Api::all(bed.client.clone());
    api.get_opt(RESTORE)
        .await
        .ok()
        .flatten()
        .and_then(|r| r.status)
}

/// One restore of three pods: every pod runs `ok` (RestoreHook `all-web`), one of them also runs
/// `broken` (RestoreHook `broken`, exits 3, onError Continue). Returns once its RestoreRun says
/// the restore's hooks are over.
async fn partially_failed_restore(bed: &Testbed) -> RestoreRunStatus {
    create_restore_hook(bed, NS, "all-web", json!({
        "restores": ["nightly-*"],
        "labelSelector": {"matchLabels": {"app": "web"}},
        "postHooks": [{"exec": {"container": "app", "command": ["/bin/sh", "-c", "echo ok >> ok.log"]}}],
    }))
    .await;
    create_restore_hook(bed, NS, "broken", json!({
        "labelSelector": {"matchLabels": {"broken": "true"}},
        "postHooks": [{"exec": {"container": "app", "command": ["/bin/sh", "-c", "echo boom >&2; exit 3"]}}],
    }))
    .await;
    compiled(bed, NS, "all-web").await;
    compiled(bed, NS, "broken").await;
    restore_pod(bed, "web-0", json!({"app": "web"})).await;
    restore_pod(bed, "web-1", json!({"app": "web"})).await;
    restore_pod(bed, "web-2", json!({"app": "web", "broken": "true"})).await;
    assert_eq!(finished(bed, NS, "web-0").await, "done");
    assert_eq!(finished(bed, NS, "web-1").await, "done");
    assert_eq!(finished(bed, NS, "web-2").await, "failed");
    eventually!(
        "the RestoreRun to complete",
        restore_run(bed)
            .await
            .filter(|s| s.phase != "InProgress" && s.pods_planned == 3 && s.hooks.pending == 0)
    )
}

fn counts(succeeded: i64, failed: i64) -> HookCounts {
    HookCounts {
        succeeded,
        failed,
        ..HookCounts::default()
    }
}

/// A whole restore with one failing hook: the RestoreRun ends `PartiallyFailed`, counts every
/// hook, lists the pod whose hook failed with the hook and the reason, and its `Completed`
/// condition is True with the phase as reason. The hook objects count their own hooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_with_one_failing_hook_is_partially_failed() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        let run = partially_failed_restore(&bed).await;
        assert_eq!(run.phase, "PartiallyFailed", "{run:?}");
        assert_eq!(run.pods_planned, 3);
        assert_eq!(run.hooks, counts(3, 1), "{run:?}");
        assert_eq!(run.failed_pods.len(), 1, "{run:?}");
        let FailedPod {
            namespace,
            pod,
            hook,
            message,
        } = &run.failed_pods[0];
        assert_eq!(
            (namespace.as_str(), pod.as_str(), hook.as_str()),
            (NS, "web-2", "broken")
        );
        assert!(
            message.contains("command terminated with exit code 3"),
            "{message}"
        );
        // `Completed` on every end, `Failed` telling this one apart (docs/behaviour.md §8.3).
        for (type_, want) in [("Completed", "True"), ("Failed", "True")] {
            let c =
                condition(&run.conditions, type_).unwrap_or_else(|| panic!("a {type_} condition"));
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                (want, "PartiallyFailed"),
                "{type_}"
            );
        }
        assert!(run.completed_at.is_some());

        let all = eventually!("RestoreHook all-web to count its hooks", {
            let s = restore_hook(&bed, NS, "all-web")
                .await
                .status
                .unwrap_or_default();
            (s.hooks.succeeded == 3).then_some(s)
        });
        assert_eq!((all.pods_planned, all.hooks), (3, counts(3, 0)));
        let broken = eventually!("RestoreHook broken to count its hook", {
            let s = restore_hook(&bed, NS, "broken")
                .await
                .status
                .unwrap_or_default();
            (s.hooks.failed == 1).then_some(s)
        });
        assert_eq!((broken.pods_planned, broken.hooks), (1, counts(0, 1)));
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// docs/behaviour.md §9.9 on the simulator: the webhook asks the API server (a
/// SubjectAccessReview over HTTP) about the pod's creator. A creator without exec rights gets its
/// annotation exec hook refused: recorded `Failed` with the reason and a `HookRefused` Event,
/// never run, counted in the RestoreRun; a creator with them gets the hook run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotation_hooks_of_creators_without_exec_rights_are_refused_and_counted() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let team = "team";
        bed.create_namespace(team, json!({"restore-hooks.dev/restore": RESTORE}))
            .await
            .unwrap();
        bed.sim.deny_exec("mallory");
        let ctl = leading(&bed, "ctl").await;
        let mut as_mallory = bed.sim.kube_config();
        as_mallory.auth_info.impersonate = Some("mallory".into());
        let mallory = kube::Client::try_from(as_mallory).unwrap();
        for (client, name) in [(&mallory, "by-mallory"), (&bed.client, "by-admin")] {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": team, "annotations": {
                    "post.hook.restore.velero.io/command": "[\"/bin/sh\", \"-c\", \"echo ran >> ran.log\"]"}},
                "spec": {"containers": [{"name": "app", "image": "shop:1"}]}
            }))
            .unwrap();
            Api::<Pod>::namespaced(client.clone(), team)
                .create(&PostParams::default(), &pod)
                .await
                .expect("the pod is admitted");
        }
        assert_eq!(finished(&bed, team, "by-mallory").await, "failed");
        assert_eq!(finished(&bed, team, "by-admin").await, "done");
        let pod = Api::<Pod>::namespaced(bed.client.clone(), team)
            .get("by-mallory")
            .await
            .unwrap();
        let status = exec_status(&pod).expect("a status");
        assert_eq!(status.hooks[0].phase, HookPhase::Failed);
        assert!(
            status.hooks[0]
                .message
                .contains("created by mallory, who may not create pods/exec in namespace team"),
            "{status:?}"
        );
        eventually!("a HookRefused Event on by-mallory", {
            bed.pod_events(team, "by-mallory")
                .await
                .unwrap()
                .into_iter()
                .find(|(reason, _, _)| reason == "HookRefused")
        });
        let ran = |pod: &str| {
            std::fs::read_to_string(bed.pod_dir(team, pod).join("ran.log"))
                .unwrap_or_default()
                .lines()
                .count()
        };
        assert_eq!((ran("by-mallory"), ran("by-admin")), (0, 1));
        let run = eventually!(
            "the RestoreRun to count the refusal",
            restore_run(&bed)
                .await
                .filter(|s| s.hooks.pending == 0 && s.hooks.refused == 1)
        );
        assert_eq!((run.hooks.succeeded, run.hooks.failed), (1, 1), "{run:?}");
        assert_eq!(run.phase, "PartiallyFailed");
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// The numbers survive the pods and the controller: a deleted pod's outcome stays counted
/// (folded into `retired`), and a new controller, started after the old one stopped, recomputes
/// the same status from the pods. The status is scrambled while no controller runs, so that what
/// is read afterwards was written by the new controller, not left over from the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_run_counts_survive_a_deleted_pod_and_a_controller_restart() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl-1").await;
        let before = partially_failed_restore(&bed).await;

        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        pods.delete("web-0", &DeleteParams::default()).await.unwrap();
        let after_delete = eventually!("the deleted pod's hooks to be retired", {
            restore_run(&bed).await.filter(|s| s.retired_pods == Some(1))
        });
        assert_eq!(after_delete.hooks, before.hooks, "a deleted pod's hooks stay counted");
        assert_eq!(after_delete.retired, counts(1, 0));
        assert_eq!(after_delete.phase, "PartiallyFailed");
        assert_eq!(after_delete.pods_planned, 2, "podsPlanned counts the pods that exist");
        assert_eq!(after_delete.failed_pods, before.failed_pods);
        let hook_before = eventually!("RestoreHook all-web to retire web-0", {
            let s = restore_hook(&bed, NS, "all-web").await.status.unwrap_or_default();
            (s.retired == counts(1, 0)).then_some(s)
        });
        assert_eq!(hook_before.hooks, counts(3, 0));

        stop(ctl).await;
        let runs: Api<RestoreRun> = Api::all(bed.client.clone());
        let scrambled = json!({"status": {
            "phase": "InProgress", "podsPlanned": 0,
            "hooks": {"succeeded": 0, "failed": 0, "pending": 7}, "failedPods": [],
        }});
        runs.patch_status(RESTORE, &PatchParams::default(), &Patch::Merge(&scrambled)).await.unwrap();
        let hooks: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NS);
        let scrambled = json!({"status": {"podsPlanned": 0, "hooks": {"succeeded": 0, "failed": 0, "pending": 7}}});
        hooks.patch_status("all-web", &PatchParams::default(), &Patch::Merge(&scrambled)).await.unwrap();

        let ctl = leading(&bed, "ctl-2").await;
        let recomputed = eventually!("the new controller to rewrite the RestoreRun", {
            restore_run(&bed).await.filter(|s| s.phase != "InProgress")
        });
        assert_eq!(recomputed.phase, after_delete.phase);
        assert_eq!(recomputed.pods_planned, after_delete.pods_planned);
        assert_eq!(recomputed.hooks, after_delete.hooks);
        assert_eq!(recomputed.retired, after_delete.retired);
        assert_eq!(recomputed.failed_pods, after_delete.failed_pods);
        let hook_after = eventually!("the new controller to rewrite RestoreHook all-web", {
            let s = restore_hook(&bed, NS, "all-web").await.status.unwrap_or_default();
            (s.hooks.pending == 0).then_some(s)
        });
        assert_eq!((hook_after.pods_planned, hook_after.hooks), (hook_before.pods_planned, hook_before.hooks));
        // Nothing ran again on the way: one line per pod that still exists.
        for pod in ["web-1", "web-2"] {
            let log = std::fs::read_to_string(bed.pod_dir(NS, pod).join("ok.log")).unwrap_or_default();
            assert_eq!(log.lines().count(), 1, "{pod}");
        }
        assert_eq!(ctl.hooks("succeeded") + ctl.hooks("failed"), 0, "the new controller ran nothing");

        // A leader change with nothing to correct rewrites no hook object: the next leader reads
        // the RestoreHook and finds its status right.
        stop(ctl).await;
        let faults = bed.sim.faults();
        let read = || faults.requests("get", "restorehooks");
        let written = || faults.requests("patch", "restorehooks/status");
        let (reads, writes) = (read(), written());
        let ctl = leading(&bed, "ctl-3").await;
        eventually!("the next controller to read RestoreHook all-web", (read() > reads).then_some(()));
        // Its write, were there one, would follow the read at once.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(written(), writes, "status writes of an unchanged RestoreHook after a leader change");
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// `Ready` tells a restore script when the webhook serves a hook object: True, with
/// `observedGeneration` equal to `metadata.generation`, once it is compiled, again after an edit;
/// False, with reason `Invalid` and the problem, for an object that cannot apply (a bad glob in
/// `restores`, written here past the CRD schema, which the simulator does not enforce).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_hook_ready_condition_follows_what_the_webhook_compiled() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        bed.create_namespace("lab", json!({})).await.unwrap();
        let ctl = leading(&bed, "ctl").await;
        let spec = |command: &str| {
            json!({
                "restores": ["nightly-*"],
                "postHooks": [{"exec": {"command": ["/bin/sh", "-c", command]}}],
            })
        };
        create_restore_hook(&bed, NS, "warm", spec("true")).await;
        let ready = |rh: &RestoreHook, generation: i64| {
            let status = rh.status.clone().unwrap_or_default();
            let cond = condition(&status.conditions, "Ready")?;
            let replica = status.webhooks.get("testbed-webhook")?;
            (cond.status == "True"
                && rh.metadata.generation == Some(generation)
                && status.observed_generation == Some(generation)
                && replica.observed_generation == generation)
                .then(|| cond.clone())
        };
        let cond = eventually!(
            "RestoreHook warm to be Ready",
            ready(&restore_hook(&bed, NS, "warm").await, 1)
        );
        assert_eq!(cond.reason, "Compiled", "{cond:?}");
        let api: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NS);

        // A second webhook replica (its pod runs) reports a problem with the same generation:
        // `Ready` turns False at once, although no generation and no count changed. Once its
        // pod is gone, its entry is dropped and `Ready` is True again.
        let replicas = bed.controller_args().lease_namespace;
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), &replicas);
        let replica: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "other-webhook", "namespace": replicas},
            "spec": {"containers": [{"name": "webhook", "image": "restore-hooks:next"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &replica).await.unwrap();
        api.patch_status(
            "warm",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"webhooks": {"other-webhook": {
                "observedGeneration": 1, "problem": "postHooks[0]: cannot compile"}}}})),
        )
        .await
        .unwrap();
        let cond = eventually!("RestoreHook warm to wait for the other replica", {
            let status = restore_hook(&bed, NS, "warm")
                .await
                .status
                .unwrap_or_default();
            condition(&status.conditions, "Ready")
                .filter(|c| c.status == "False")
                .cloned()
        });
        assert_eq!(cond.reason, "WaitingForWebhooks", "{cond:?}");
        assert!(
            cond.message
                .contains("other-webhook: postHooks[0]: cannot compile"),
            "{cond:?}"
        );
        pods.delete("other-webhook", &DeleteParams::default())
            .await
            .unwrap();
        eventually!(
            "RestoreHook warm to be Ready without the other replica",
            ready(&restore_hook(&bed, NS, "warm").await, 1)
        );

        api.patch(
            "warm",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec("echo edited")})),
        )
        .await
        .unwrap();
        eventually!(
            "RestoreHook warm to be Ready at generation 2",
            ready(&restore_hook(&bed, NS, "warm").await, 2)
        );

        create_restore_hook(
            &bed,
            "lab",
            "bad-glob",
            json!({
                "restores": ["nightly-["],
                "postHooks": [{"exec": {"command": ["/bin/true"]}}],
            }),
        )
        .await;
        let status: HookObjectStatus = eventually!("RestoreHook bad-glob to be Ready=False", {
            let s = restore_hook(&bed, "lab", "bad-glob")
                .await
                .status
                .unwrap_or_default();
            condition(&s.conditions, "Ready")
                .filter(|c| c.status == "False")
                .map(|_| s.clone())
        });
        let cond = condition(&status.conditions, "Ready").unwrap();
        assert_eq!(cond.reason, "Invalid", "{cond:?}");
        assert!(
            cond.message.contains("nightly-["),
            "the message names the bad pattern: {cond:?}"
        );

        // Deleted and created again (as a restore of the backup would): a new object, whose
        // generation the replica reports again, although it has the same name and generation
        // number as the old one.
        create_restore_hook(&bed, NS, "again", spec("true")).await;
        eventually!(
            "RestoreHook again to be Ready",
            ready(&restore_hook(&bed, NS, "again").await, 1)
        );
        api.delete("again", &DeleteParams::default()).await.unwrap();
        eventually!(
            "the cache to forget RestoreHook again",
            bed.index
                .read()
                .restore_hooks(NS)
                .all(|h| h.name != "again")
                .then_some(())
        );
        create_restore_hook(&bed, NS, "again", spec("true")).await;
        eventually!(
            "the re-created RestoreHook again to be Ready, reported by the replica",
            ready(&restore_hook(&bed, NS, "again").await, 1)
        );
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// Hook objects' counts are progress, written at one object per 0.5 s on average while hooks
/// keep ending (docs/behaviour.md §6.19). Each status write comes back to the controller through
/// its watch of the object: that is no reason to write the object again sooner. The bound is
/// taken from the time the restore took, so a slow machine only loosens it; and the last counts
/// are written all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_object_counts_are_paced_while_hooks_keep_ending() {
    const GROUPS: usize = 4;
    const PODS: usize = 32;
    bounded(LIMIT, async {
        let bed = testbed().await;
        // One slot: the hooks end one after another, so every object's counts keep changing.
        let mut args = bed.controller_args();
        args.max_concurrent_execs = 1;
        let ctl = bed.start_controller("ctl", args, None);
        eventually!("the controller to take the Lease", ctl.is_leader().then_some(()));
        for g in 0..GROUPS {
            let name = format!("group-{g}");
            create_restore_hook(&bed, NS, &name, json!({
                "labelSelector": {"matchLabels": {"group": format!("g{g}")}},
                "postHooks": [{"exec": {"container": "app", "command": ["/bin/sh", "-c", "sleep 0.2"]}}],
            }))
            .await;
            eventually!(format!("RestoreHook {name} to be Ready"), {
                let status = restore_hook(&bed, NS, &name).await.status.unwrap_or_default();
                condition(&status.conditions, "Ready").filter(|c| c.status == "True").map(|_| ())
            });
        }
        let faults = bed.sim.faults();
        let writes = || faults.requests("patch", "restorehooks/status");
        let (before, started) = (writes(), std::time::Instant::now());
        for i in 0..PODS {
            restore_pod(&bed, &format!("web-{i}"), json!({"group": format!("g{}", i % GROUPS)})).await;
        }
        for i in 0..PODS {
            assert_eq!(finished(&bed, NS, &format!("web-{i}")).await, "done");
        }
        let (written, took) = (writes() - before, started.elapsed());
        // A round that wrote n objects is followed by n × 0.5 s without one; plus one write of
        // each object for a conflict with the webhook replica's entry.
        let bound = 2 * GROUPS + (took.as_secs_f64() / 0.5).ceil() as usize;
        assert!(
            written <= bound,
            "{written} hook object status writes in {took:?} for {GROUPS} objects (at most {bound})"
        );
        for g in 0..GROUPS {
            let name = format!("group-{g}");
            eventually!(format!("RestoreHook {name} to count its pods' hooks"), {
                let s = restore_hook(&bed, NS, &name).await.status.unwrap_or_default();
                (s.hooks == counts((PODS / GROUPS) as i64, 0)).then_some(())
            });
        }
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

fn kubectl_available() -> bool {
    std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// kubectl with its own kubeconfig and discovery cache for the testbed's simulator.
struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
    _dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(bed: &Testbed) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        bed.sim.write_kubeconfig(&kubeconfig).unwrap();
        Self {
            cache: dir.path().join("cache"),
            kubeconfig,
            _dir: dir,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .arg("--request-timeout=10s")
            .args(args)
            .kill_on_drop(true);
        c
    }

    /// Runs to completion: (exit code, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = tokio::time::timeout(GUARD, self.command(args).output())
            .await
            .expect("kubectl finished")
            .expect("kubectl ran");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `kubectl get` as rows of cells, header first. Cells are cut at the header's column
    /// starts (kubectl aligns them), so that an empty cell stays a cell.
    async fn table(&self, args: &[&str]) -> Vec<Vec<String>> {
        let (code, out, err) = self.run(args).await;
        assert_eq!(code, 0, "kubectl {args:?}: {err}");
        let mut lines = out.lines();
        let header = lines.next().unwrap_or_default();
        let starts: Vec<usize> = header
            .char_indices()
            .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
            .map(|(i, _)| i)
            .collect();
        let cut = |line: &str| -> Vec<String> {
            (0..starts.len())
                .map(|k| {
                    let end = starts
                        .get(k + 1)
                        .copied()
                        .unwrap_or(line.len())
                        .min(line.len());
                    line.get(starts[k].min(end)..end)
                        .unwrap_or_default()
                        .trim()
                        .to_string()
                })
                .collect()
        };
        std::iter::once(header).chain(lines).map(cut).collect()
    }
}

/// The row of `name` in a `kubectl get` table, as column → cell.
fn row<'a>(table: &'a [Vec<String>], name: &str) -> Vec<(&'a str, &'a str)> {
    let row = table
        .iter()
        .find(|r| r.first().map(String::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in {table:?}"));
    table[0]
        .iter()
        .map(String::as_str)
        .zip(row.iter().map(String::as_str))
        .collect()
}

/// `kubectl get restoreruns`, `restorehooks` (and its short name `rh`) and
/// `clusterrestorehooks` print the CRDs' printer columns with the status values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_the_printer_columns() {
    if !kubectl_available() {
        eprintln!("note: kubectl not on PATH; skipping");
        return;
    }
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        let _ = partially_failed_restore(&bed).await;
        let api: Api<ClusterRestoreHook> = Api::all(bed.client.clone());
        let crh: ClusterRestoreHook = serde_json::from_value(json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "ClusterRestoreHook",
            "metadata": {"name": "ca-refresh"},
            "spec": {"restores": ["dr-*"], "postHooks": [{"exec": {"command": ["/bin/true"]}}]},
        }))
        .unwrap();
        api.create(&PostParams::default(), &crh).await.unwrap();
        // The status values kubectl shows must be final: wait for them through the API first.
        eventually!("RestoreHook all-web's final counts", {
            let s = restore_hook(&bed, NS, "all-web")
                .await
                .status
                .unwrap_or_default();
            (s.hooks.succeeded == 3
                && condition(&s.conditions, "Ready").is_some_and(|c| c.status == "True"))
            .then_some(())
        });
        eventually!("ClusterRestoreHook ca-refresh to be Ready", {
            let s = api
                .get("ca-refresh")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            condition(&s.conditions, "Ready")
                .filter(|c| c.status == "True")
                .map(|_| ())
        });
        let k = Kubectl::new(&bed);

        let runs = k.table(&["get", "restoreruns"]).await;
        assert_eq!(
            runs[0],
            [
                "NAME",
                "RESTORE",
                "PHASE",
                "PODS",
                "SUCCEEDED",
                "FAILED",
                "SKIPPED",
                "PENDING",
                "AGE"
            ],
            "{runs:?}"
        );
        let cells = row(&runs, RESTORE);
        assert_eq!(
            &cells[..8],
            [
                ("NAME", RESTORE),
                ("RESTORE", RESTORE),
                ("PHASE", "PartiallyFailed"),
                ("PODS", "3"),
                ("SUCCEEDED", "3"),
                ("FAILED", "1"),
                // Every count is written, zero too: the column shows 0, not an empty cell.
                ("SKIPPED", "0"),
                ("PENDING", "0"),
            ],
            "{runs:?}"
        );

        for args in [
            &["get", "restorehooks", "-n", NS][..],
            &["get", "rh", "-n", NS],
        ] {
            let hooks = k.table(args).await;
            assert_eq!(
                hooks[0],
                [
                    "NAME",
                    "READY",
                    "PLANNED",
                    "SUCCEEDED",
                    "FAILED",
                    "PENDING",
                    "AGE"
                ],
                "{hooks:?}"
            );
            let cells = row(&hooks, "all-web");
            assert_eq!(
                &cells[..6],
                [
                    ("NAME", "all-web"),
                    ("READY", "True"),
                    ("PLANNED", "3"),
                    ("SUCCEEDED", "3"),
                    ("FAILED", "0"),
                    ("PENDING", "0")
                ],
                "{hooks:?}"
            );
            let cells = row(&hooks, "broken");
            assert_eq!(
                &cells[2..5],
                [("PLANNED", "1"), ("SUCCEEDED", "0"), ("FAILED", "1")],
                "{hooks:?}"
            );
        }

        let cluster = k.table(&["get", "clusterrestorehooks"]).await;
        assert_eq!(
            cluster[0],
            [
                "NAME",
                "READY",
                "PLANNED",
                "SUCCEEDED",
                "FAILED",
                "PENDING",
                "AGE"
            ],
            "{cluster:?}"
        );
        let cells = row(&cluster, "ca-refresh");
        assert_eq!(
            &cells[..6],
            [
                ("NAME", "ca-refresh"),
                ("READY", "True"),
                ("PLANNED", "0"),
                ("SUCCEEDED", "0"),
                ("FAILED", "0"),
                ("PENDING", "0")
            ],
            "{cluster:?}"
        );
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A restore script waits for the restore's hooks with
/// `kubectl wait --for=condition=Completed restorerun/<restore>` (docs/behaviour.md §8.3): it
/// keeps waiting while a hook runs, and returns once every hook of the restore has ended; here
/// they succeeded, and the `Failed` condition says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_wait_returns_once_the_restores_hooks_are_done() {
    if !kubectl_available() {
        eprintln!("note: kubectl not on PATH; skipping");
        return;
    }
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        // The hook holds until the test creates `go` in the pod's directory.
        create_restore_hook(&bed, NS, "slow", json!({
            "labelSelector": {"matchLabels": {"app": "slow"}},
            "postHooks": [{"exec": {
                "container": "app", "execTimeout": "2m",
                "command": ["/bin/sh", "-c", "while [ ! -f go ]; do sleep 0.1; done; echo warmed >> slow.log"],
            }}],
        }))
        .await;
        compiled(&bed, NS, "slow").await;
        restore_pod(&bed, "slow-0", json!({"app": "slow"})).await;
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        eventually!("the hook to be running", {
            exec_status(&pods.get("slow-0").await.unwrap()).filter(|s| s.hooks[0].phase == HookPhase::Running)
        });
        eventually!(
            "the RestoreRun to be InProgress",
            restore_run(&bed).await.filter(|s| s.phase == "InProgress")
        );

        let k = Kubectl::new(&bed);
        // `-v=6` logs each request kubectl makes: the watch request is the sign that it has read
        // the object, found it InProgress and now waits for a change.
        let mut wait = k
            .command(&[
                "wait",
                "-v=6",
                "--for=condition=Completed",
                &format!("restorerun/{RESTORE}"),
                "--timeout=90s",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut log = BufReader::new(wait.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let watching = tokio::time::timeout(GUARD, async {
            while let Some(line) = log.next_line().await.unwrap() {
                let found = line.contains("watch=true");
                seen.push(line);
                if found {
                    return;
                }
            }
        })
        .await;
        assert!(watching.is_ok(), "kubectl wait never watched: {seen:#?}");
        // Keep draining its log so that it never blocks on a full pipe.
        let drain = tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
        assert!(wait.try_wait().unwrap().is_none(), "kubectl wait returned while the hook ran: {seen:#?}");

        std::fs::write(pod_dir(&bed, "slow-0").join("go"), "").unwrap();
        let out = tokio::time::timeout(GUARD, wait.wait_with_output())
            .await
            .expect("kubectl wait returned")
            .unwrap();
        drain.abort();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert!(stdout.contains("condition met"), "{stdout}");
        // When it returned, the hook had ended and was recorded on the pod.
        let pod = pods.get("slow-0").await.unwrap();
        assert_eq!(exec_label(&pod), "done");
        assert_eq!(exec_status(&pod).unwrap().hooks[0].phase, HookPhase::Succeeded);
        let log = std::fs::read_to_string(pod_dir(&bed, "slow-0").join("slow.log")).unwrap();
        assert_eq!(log, "warmed\n");
        let run = restore_run(&bed).await.unwrap();
        assert_eq!(run.phase, "Completed");
        let failed = condition(&run.conditions, "Failed").expect("a Failed condition");
        assert_eq!((failed.status.as_str(), failed.reason.as_str()), ("False", "Completed"));
        // The script of docs/operations.md: its check for success passes at once.
        let object = format!("restorerun/{RESTORE}");
        let (code, _, err) = k
            .run(&["wait", "--for=condition=Failed=False", &object, "--timeout=0s"])
            .await;
        assert_eq!(code, 0, "{err}");
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// Spawns `kubectl wait -v=6 ARGS` and returns once it watches (it read the object, found the
/// condition unmet, and waits for a change), with its log being drained.
async fn waiting(
    k: &Kubectl,
    args: &[&str],
) -> (tokio::process::Child, tokio::task::JoinHandle<()>) {
    let mut argv = vec!["wait", "-v=6"];
    argv.extend_from_slice(args);
    let mut wait = k
        .command(&argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(wait.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let watching = tokio::time::timeout(GUARD, async {
        while let Some(line) = log.next_line().await.unwrap() {
            let found = line.contains("watch=true");
            seen.push(line);
            if found {
                return;
            }
        }
    })
    .await;
    assert!(
        watching.is_ok(),
        "kubectl wait {args:?} never watched: {seen:#?}"
    );
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
    (wait, drain)
}

/// The condition docs/behaviour.md §8.3 tells scripts to wait for returns on a restore that ends
/// `PartiallyFailed` (a wait for `.status.phase=Completed` never would): `kubectl wait
/// --for=condition=Completed` and `--for=condition=Failed` both keep waiting while the failing
/// hook runs and return once it ended; `--for=condition=Failed=False` does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_wait_for_condition_completed_returns_on_partially_failed() {
    if !kubectl_available() {
        eprintln!("note: kubectl not on PATH; skipping");
        return;
    }
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        // The hook holds until the test creates `go` in the pod's directory, then fails.
        create_restore_hook(&bed, NS, "slow-fail", json!({
            "labelSelector": {"matchLabels": {"app": "slow"}},
            "postHooks": [{"exec": {
                "container": "app", "execTimeout": "2m",
                "command": ["/bin/sh", "-c", "while [ ! -f go ]; do sleep 0.1; done; echo broke >&2; exit 4"],
            }}],
        }))
        .await;
        compiled(&bed, NS, "slow-fail").await;
        restore_pod(&bed, "slow-0", json!({"app": "slow"})).await;
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        eventually!("the hook to be running", {
            exec_status(&pods.get("slow-0").await.unwrap()).filter(|s| s.hooks[0].phase == HookPhase::Running)
        });
        let run = eventually!(
            "the RestoreRun to be InProgress",
            restore_run(&bed).await.filter(|s| s.phase == "InProgress")
        );
        let failed = condition(&run.conditions, "Failed").expect("a Failed condition");
        assert_eq!((failed.status.as_str(), failed.reason.as_str()), ("Unknown", "InProgress"));

        let k = Kubectl::new(&bed);
        let object = format!("restorerun/{RESTORE}");
        let mut waits = Vec::new();
        for condition in ["--for=condition=Completed", "--for=condition=Failed"] {
            let (mut wait, drain) = waiting(&k, &[condition, &object, "--timeout=90s"]).await;
            assert!(wait.try_wait().unwrap().is_none(), "kubectl wait {condition} returned while the hook ran");
            waits.push((condition, wait, drain));
        }

        std::fs::write(pod_dir(&bed, "slow-0").join("go"), "").unwrap();
        for (condition, wait, drain) in waits {
            let out = tokio::time::timeout(GUARD, wait.wait_with_output())
                .await
                .unwrap_or_else(|_| panic!("kubectl wait {condition} returned"))
                .unwrap();
            drain.abort();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{condition}: {stdout}");
            assert!(stdout.contains("condition met"), "{condition}: {stdout}");
        }
        let run = restore_run(&bed).await.unwrap();
        assert_eq!(run.phase, "PartiallyFailed", "{run:?}");
        for type_ in ["Completed", "Failed"] {
            let c = condition(&run.conditions, type_).unwrap();
            assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "PartiallyFailed"), "{type_}");
        }
        // Waiting for success is waiting in vain: it times out (exit status 1).
        let (code, _, err) = k
            .run(&["wait", "--for=condition=Failed=False", &object, "--timeout=1s"])
            .await;
        assert_ne!(code, 0, "{err}");
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// `restore-hooks describe` of a restore with more failed pods than the RestoreRun lists (20):
/// the report (read through the API, through the binary with `-o json` and as text, and as the
/// kubectl plugin `kubectl restore-hooks describe`) names every failed pod with its hook, message
/// and stderr, the pods that succeeded, and the pods' Events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_every_failed_pod_of_a_restore() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        create_restore_hook(&bed, NS, "broken", json!({
            "labelSelector": {"matchLabels": {"broken": "true"}},
            "postHooks": [{"exec": {"container": "app", "command": ["/bin/sh", "-c", "echo boom >&2; exit 3"]}}],
        }))
        .await;
        create_restore_hook(&bed, NS, "all-web", json!({
            "labelSelector": {"matchLabels": {"app": "web"}},
            "postHooks": [{"exec": {"container": "app", "command": ["/bin/sh", "-c", "echo ok"]}}],
        }))
        .await;
        compiled(&bed, NS, "broken").await;
        compiled(&bed, NS, "all-web").await;
        let failing: Vec<String> = (0..23).map(|i| format!("fail-{i:02}")).collect();
        for name in &failing {
            restore_pod(&bed, name, json!({"app": "web", "broken": "true"})).await;
        }
        for name in ["ok-0", "ok-1"] {
            restore_pod(&bed, name, json!({"app": "web"})).await;
        }
        for name in &failing {
            assert_eq!(finished(&bed, NS, name).await, "failed");
        }
        let run = eventually!(
            "the RestoreRun to end with every pod counted",
            restore_run(&bed)
                .await
                .filter(|s| s.phase != "InProgress" && s.pods_planned == 25 && s.hooks.pending == 0)
        );
        assert_eq!(run.phase, "PartiallyFailed");
        assert_eq!(run.hooks, counts(25, 23), "{run:?}");
        assert_eq!(run.failed_pods.len(), 20, "the RestoreRun lists 20");

        // The report, built from what the API returns.
        let args = |output: &str| {
            use clap::Parser as _;
            let argv = ["restore-hooks", "describe", RESTORE, "-o", output];
            match restore_hooks::cli::Cli::try_parse_from(argv).unwrap().command {
                restore_hooks::cli::Command::Describe(args) => args,
                _ => unreachable!(),
            }
        };
        let report = restore_hooks::describe_cli::collect(&bed.client, &args("json"))
            .await
            .unwrap()
            .expect("a report");
        assert_eq!(report.phase, "PartiallyFailed");
        assert_eq!(report.hooks, run.hooks, "the pods count as the RestoreRun counts them");
        assert!(report.notes.is_empty(), "{:?}", report.notes);
        let failed: Vec<&str> = report.failed_pods.iter().map(|f| f.pod.as_str()).collect();
        assert_eq!(failed, failing, "every failed pod, not 20");
        assert!(report.failed_pods.iter().all(|f| f.hook == "broken"
            && f.message.contains("command terminated with exit code 3")));
        assert_eq!(report.pods.len(), 25);
        let fail_0 = &report.pods.iter().find(|p| p.name == "fail-00").unwrap().hooks;
        let broken = fail_0.iter().find(|h| h.name == "broken").unwrap();
        assert_eq!((broken.phase, broken.exit_code, broken.stderr.as_str()), (HookPhase::Failed, Some(3), "boom\n"));
        let reasons: Vec<(&str, &str)> = report
            .events
            .iter()
            .filter(|e| e.name == "fail-00")
            .map(|e| (e.reason.as_str(), e.type_.as_str()))
            .collect();
        for want in [("HookFailed", "Warning"), ("HooksCompleted", "Warning")] {
            assert!(reasons.contains(&want), "{want:?} in {reasons:?}");
        }

        // Limited to namespaces (a user who may list pods there only): the same pods, and a
        // note that the listing covers those.
        let mut limited = args("json");
        limited.namespaces = vec![NS.to_string()];
        let report = restore_hooks::describe_cli::collect(&bed.client, &limited)
            .await
            .unwrap()
            .expect("a report");
        assert_eq!(report.failed_pods.len(), 23);
        assert_eq!(report.notes, ["pods listed in namespace(s) shop only: counts and lists cover those"]);
        limited.namespaces = vec!["elsewhere".to_string()];
        let report = restore_hooks::describe_cli::collect(&bed.client, &limited)
            .await
            .unwrap()
            .expect("the RestoreRun is there");
        assert_eq!((report.pods.len(), report.phase.as_str()), (0, "PartiallyFailed"));

        // The binary, as a user runs it, with a kubeconfig.
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        bed.sim.write_kubeconfig(&kubeconfig).unwrap();
        let binary = PathBuf::from(env!("CARGO_BIN_EXE_restore-hooks"));
        let run_binary = |program: PathBuf, args: Vec<String>| async move {
            let out = tokio::time::timeout(
                GUARD,
                Command::new(program).args(args).kill_on_drop(true).output(),
            )
            .await
            .expect("it finished")
            .expect("it ran");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        };
        let kc = format!("--kubeconfig={}", kubeconfig.display());
        let json_out = run_binary(
            binary.clone(),
            vec!["describe".into(), RESTORE.into(), "-o".into(), "json".into(), kc.clone()],
        )
        .await;
        let value: Value = serde_json::from_str(&json_out).unwrap();
        assert_eq!(value["kind"], "RestoreReport");
        assert_eq!(value["phase"], "PartiallyFailed");
        let listed: Vec<&str> = value["failedPods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["pod"].as_str().unwrap())
            .collect();
        assert_eq!(listed, failing);
        let text = run_binary(binary.clone(), vec!["describe".into(), RESTORE.into(), kc.clone()]).await;
        assert!(text.contains("\nPhase:        PartiallyFailed\n"), "{text}");
        assert!(text.contains("\nFailed pods (23):\n"), "{text}");
        for pod in &failing {
            let line = format!("  {NS:<9}  {pod}  broken  command terminated with exit code 3");
            assert!(text.contains(&line), "{line:?} in {text}");
        }

        // As kubectl's plugin: the binary on PATH as kubectl-restore_hooks (a symlink).
        if kubectl_available() {
            let bin = dir.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            std::os::unix::fs::symlink(&binary, bin.join("kubectl-restore_hooks")).unwrap();
            let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
            let out = tokio::time::timeout(
                GUARD,
                Command::new("kubectl")
                    .args(["restore-hooks", "describe", RESTORE, &kc])
                    .env("PATH", &path)
                    .kill_on_drop(true)
                    .output(),
            )
            .await
            .expect("kubectl finished")
            .expect("kubectl ran");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            // Up to the Events (one may still land between the two runs).
            let before_events = |s: &str| s.split("\nEvents (").next().unwrap().to_string();
            assert_eq!(
                before_events(&stdout),
                before_events(&text),
                "the plugin prints what the binary prints"
            );
            let help = Command::new("kubectl")
                .args(["restore-hooks", "describe", "--help"])
                .env("PATH", &path)
                .output()
                .await
                .unwrap();
            let help = String::from_utf8_lossy(&help.stdout);
            assert!(help.contains("Usage: kubectl restore-hooks describe"), "{help}");
        } else {
            eprintln!("note: kubectl not on PATH; the plugin is not tried");
        }

        // A restore nobody knows: exit status 1.
        let out = Command::new(&binary)
            .args(["describe", "no-such-restore", &kc])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

fn pod_dir(bed: &Testbed, pod: &str) -> PathBuf {
    bed.pod_dir(NS, pod)
}
