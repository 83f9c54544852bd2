//! Plan integrity and scope (docs/behaviour.md §6.2, §9): the controller runs only plans this
//! installation issued for the very pod that carries them, only in pods that are in a restore
//! scope now, and never a hook twice, whatever the pod's annotations and labels say.
//!
//! On the shared simulator testbed (real kube client, real watches, the simulator's pods/exec),
//! pods are written directly with the plans under test, as anyone who may create or patch pods
//! could write them. Every command would create a file in the pod's directory, so "never ran" is
//! asserted on the file system, next to what the pod says (label, status, Events).
//!
//! Waits are bounded only as failure guards; no assertion depends on how fast anything is.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use restore_hooks::controller::{self, ControllerDeps};
use restore_hooks::hooks::plan::{
    EXEC_LABEL, EXEC_PENDING, ExecPlan, ExecStatus, HookPhase, OnError, PLAN_ANNOTATION,
    PlannedHook, RESTORE_RUN_LABEL, STATUS_ANNOTATION,
};
use restore_hooks::hooks::signing::{
    PLAN_SIGNATURE_ANNOTATION, PlanKeys, PodBinding, STATUS_SIGNATURE_ANNOTATION,
};
use restore_hooks::hooks::types::RestoreRun;
use restore_hooks::ledger::RESTORED_FROM_RECORD;
use restore_hooks::metrics::Metrics;
use restore_hooks::plan_key::{CURRENT, KeyRing, PREVIOUS, SecretKeys};
use restore_hooks::testbed::{ControllerHandle, GUARD, RESTORE, Testbed, TestbedOptions, bounded};
use restore_hooks_testkit::eventually;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NS: &str = "shop";
/// A whole test's limit: a guard against hangs, not a speed requirement.
const LIMIT: Duration = Duration::from_secs(150);
/// The chart's namespace, where the plan key Secret lives.
const INSTALL_NS: &str = "restore-hooks";
const KEY_SECRET: &str = "restore-hooks-plan-key";

/// No webhook: the pods under test carry exactly the plans the tests write.
async fn testbed() -> Testbed {
    restore_hooks::testbed::log_from_env();
    let bed = Testbed::start(TestbedOptions::default())
        .await
        .expect("the testbed starts");
    bed.create_namespace(NS, json!({})).await.unwrap();
    bed
}

async fn leading(bed: &Testbed, identity: &str) -> ControllerHandle {
    let c = bed.start_controller(identity, bed.controller_args(), None);
    wait_leader(&c).await;
    c
}

async fn wait_leader(c: &ControllerHandle) {
    eventually!(
        format!("{} to take the Lease", c.identity),
        c.is_leader().then_some(())
    );
}

/// Stops a controller as SIGTERM would; it must stop cleanly.
async fn stop(ctl: ControllerHandle) {
    if let Err(e) = ctl.stop().await {
        panic!("the controller failed: {e:#}");
    }
}

/// [`Testbed::finished`] (label and status once the pod is `done` or `failed`), with a guard.
async fn finished(bed: &Testbed, namespace: &str, name: &str) -> (String, Option<ExecStatus>) {
    tokio::time::timeout(GUARD, bed.finished(namespace, name))
        .await
        .unwrap_or_else(|_| panic!("{namespace}/{name} did not finish"))
}

/// An exec hook running `script` in `container`.
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
        allowed_by: None,
        refused: None,
        invalid: None,
        run_on: Default::default(),
        after: Vec::new(),
        retry: None,
        ephemeral: None,
    }
}

/// A pod as the webhook would leave it for restore [`RESTORE`], but with the plan signed by
/// `keys` and issued at `issued_at`: like [`Testbed::planned_pod`], for keys and times other than
/// the testbed's.
fn signed_pod(
    keys: &PlanKeys,
    issued_at: jiff::Timestamp,
    namespace: &str,
    name: &str,
    hooks: Vec<PlannedHook>,
) -> Pod {
    let plan = ExecPlan {
        id: restore_hooks::plan_key::new_plan_id().unwrap(),
        restore: RESTORE.into(),
        issued_at: Some(restore_hooks::controller::exec_step::timestamp(issued_at)),
        hooks,
        ..ExecPlan::default()
    };
    let text = plan.to_annotation();
    let binding = PodBinding {
        namespace,
        name,
        generate_name: "",
    };
    let signature = keys.sign_plan(binding, &text);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {EXEC_LABEL: EXEC_PENDING, "velero.io/restore-name": RESTORE, RESTORE_RUN_LABEL: RESTORE},
            "annotations": {PLAN_ANNOTATION: text, PLAN_SIGNATURE_ANNOTATION: signature},
        },
        "spec": {"containers": [{"name": "app", "image": "shop:1"}, {"name": "db", "image": "postgres:16"}]}
    }))
    .unwrap()
}

async fn create(bed: &Testbed, pod: &Pod) {
    let ns = pod.metadata.namespace.clone().unwrap();
    Api::<Pod>::namespaced(bed.client.clone(), &ns)
        .create(&PostParams::default(), pod)
        .await
        .expect("the pod is created");
}

async fn get_pod(bed: &Testbed, namespace: &str, name: &str) -> Pod {
    Api::<Pod>::namespaced(bed.client.clone(), namespace)
        .get(name)
        .await
        .unwrap()
}

async fn patch_pod(bed: &Testbed, namespace: &str, name: &str, body: Value) {
    Api::<Pod>::namespaced(bed.client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .expect("the pod is patched");
}

/// Whether `file` exists in the pod's directory (every command under test would create one).
fn exists(bed: &Testbed, namespace: &str, pod: &str, file: &str) -> bool {
    bed.pod_dir(namespace, pod).join(file).exists()
}

/// Lines a command appended to `file` in the pod's directory: one per execution.
fn runs(bed: &Testbed, namespace: &str, pod: &str, file: &str) -> usize {
    std::fs::read_to_string(bed.pod_dir(namespace, pod).join(file))
        .unwrap_or_default()
        .lines()
        .count()
}

/// A pod in `NS` with one hook that appends to `ran.log`, run to `done` once.
async fn counted_and_done(bed: &Testbed, name: &str) {
    let pod = bed.planned_pod(
        NS,
        name,
        vec![hook("count", "app", "echo ran >> ran.log")],
        json!({}),
    );
    create(bed, &pod).await;
    let (label, _) = finished(bed, NS, name).await;
    assert_eq!(label, "done");
    assert_eq!(runs(bed, NS, name, "ran.log"), 1);
}

/// Waits until the controller's record holds hook 0 of pod `uid` as succeeded; its entry.
async fn recorded_success(bed: &Testbed, uid: &str) -> restore_hooks::ledger::Execution {
    eventually!("the hook's result in the controller's record", {
        restore_hooks::testbed::recorded(&bed.client, RESTORE)
            .await
            .unwrap()
            .remove(uid)
            .filter(|e| e.mark(0) == Some(restore_hooks::ledger::Mark::Succeeded))
    })
}

/// The status and its signature removed and the label set back to `pending`: a finished pod
/// made to look as if none of its hooks had started.
fn reset_to_pending() -> Value {
    json!({"metadata": {
        "annotations": {STATUS_ANNOTATION: null, STATUS_SIGNATURE_ANNOTATION: null},
        "labels": {EXEC_LABEL: EXEC_PENDING},
    }})
}

/// Waits until the controller refused the pod's plan or status (§9.3): label `failed`, a status
/// whose top-level message names the reason, and a Warning `PlanRejected` Event saying the same.
/// Returns the message.
async fn rejected(bed: &Testbed, namespace: &str, name: &str) -> String {
    let (label, status) = finished(bed, namespace, name).await;
    assert_eq!(label, "failed");
    let status = status.expect("a status naming the reason");
    assert!(
        !status.message.is_empty(),
        "the status names the reason: {status:?}"
    );
    let events: Api<Event> = Api::namespaced(bed.client.clone(), namespace);
    let event = eventually!(format!("a PlanRejected Event on {namespace}/{name}"), {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.involved_object.kind.as_deref() == Some("Pod")
                    && e.involved_object.name.as_deref() == Some(name)
                    && e.reason.as_deref() == Some("PlanRejected")
            })
    });
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.message.as_deref(), Some(status.message.as_str()));
    status.message
}

/// A hand-written, unsigned plan: what anyone who may create pods can write.
fn forged_pod(namespace: &str, name: &str, labels: Value) -> Pod {
    let plan = json!({
        "restore": RESTORE,
        "hooks": [{
            "name": "forged", "source": "annotation", "index": 0, "container": "app",
            "command": ["/bin/sh", "-c", "touch forged"],
            "onError": "Continue", "execTimeoutMs": 10000, "waitTimeoutMs": null, "waitForReady": false,
        }],
    });
    let mut all = json!({EXEC_LABEL: EXEC_PENDING});
    json_patch::merge(&mut all, &labels);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace, "labels": all,
            "annotations": {PLAN_ANNOTATION: plan.to_string()},
        },
        "spec": {"containers": [{"name": "app", "image": "shop:1"}]}
    }))
    .unwrap()
}

/// A forged plan on a new pod is refused, whether the pod is outside every restore scope or in
/// `kube-system` with the restore label: its command never runs, and the pod says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_plan_never_runs() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        bed.create_namespace("kube-system", json!({}))
            .await
            .unwrap();
        let ctl = leading(&bed, "ctl").await;
        let cases = [
            ("default", "outside", json!({})),
            (
                "kube-system",
                "system",
                json!({"velero.io/restore-name": RESTORE}),
            ),
        ];
        for (ns, name, labels) in &cases {
            create(&bed, &forged_pod(ns, name, labels.clone())).await;
        }
        for (ns, name, _) in &cases {
            let message = rejected(&bed, ns, name).await;
            assert!(
                message.contains("not issued by this installation's webhook")
                    && message.contains(PLAN_SIGNATURE_ANNOTATION),
                "{message}"
            );
            // The pod's container is up (the hook would have had its chance) and nothing ran.
            eventually!(format!("{ns}/{name} to run"), {
                get_pod(&bed, ns, name)
                    .await
                    .status
                    .and_then(|s| s.phase)
                    .filter(|p| p == "Running")
            });
            assert!(
                !exists(&bed, ns, name, "forged"),
                "{ns}/{name}: the forged command ran"
            );
        }
        assert_eq!(ctl.hooks("succeeded") + ctl.hooks("failed"), 0);
        let events: Vec<Event> = Api::<Event>::all(bed.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        for (ns, name, _) in &cases {
            let rejections = events
                .iter()
                .filter(|e| {
                    e.involved_object.namespace.as_deref() == Some(*ns)
                        && e.involved_object.name.as_deref() == Some(*name)
                        && e.reason.as_deref() == Some("PlanRejected")
                })
                .count();
            assert_eq!(rejections, 1, "{ns}/{name}: one PlanRejected Event");
        }
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A signed plan edited on a running pod (its annotation patched, the signature kept) no longer
/// verifies: neither the original nor the edited command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_edited_on_a_running_pod_is_not_executed() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        // `db` never becomes Ready and the hook waits for readiness: the controller holds the
        // verified plan and waits, so the edit reaches a pod it is working on.
        let mut waiting = hook("rehydrate", "db", "touch original");
        waiting.wait_for_ready = true;
        let pod = bed.planned_pod(
            NS,
            "db-0",
            vec![waiting],
            json!({"metadata": {"annotations": {"sim.kube/never-ready": "db"}}}),
        );
        create(&bed, &pod).await;
        eventually!(
            "the controller to pick the pod up",
            (ctl.metrics.pending_pods.get() == 1).then_some(())
        );
        eventually!("the pod to run", {
            get_pod(&bed, NS, "db-0")
                .await
                .status
                .and_then(|s| s.phase)
                .filter(|p| p == "Running")
        });

        let text = pod.metadata.annotations.as_ref().unwrap()[PLAN_ANNOTATION].clone();
        let edited = text.replace("touch original", "touch edited");
        assert_ne!(edited, text);
        patch_pod(
            &bed,
            NS,
            "db-0",
            json!({"metadata": {"annotations": {PLAN_ANNOTATION: edited}}}),
        )
        .await;

        let message = rejected(&bed, NS, "db-0").await;
        assert!(message.contains("edited after admission"), "{message}");
        assert!(!exists(&bed, NS, "db-0", "edited"));
        assert!(!exists(&bed, NS, "db-0", "original"));
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A pod whose hooks ran, reset afterwards (status removed and label back to `pending`, or only
/// the label flipped back), does not run them again: the controller's record in the RestoreRecords
/// wins (docs/behaviour.md §9.5), also for a controller that never saw the hooks run (a new
/// leader after the old one was killed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_pod_reset_to_pending_runs_nothing_again() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let first = leading(&bed, "first").await;
        for name in ["reset-0", "flipped-0", "reset-after-failover-0"] {
            counted_and_done(&bed, name).await;
        }
        patch_pod(&bed, NS, "reset-0", reset_to_pending()).await;
        patch_pod(
            &bed,
            NS,
            "flipped-0",
            json!({"metadata": {"labels": {EXEC_LABEL: EXEC_PENDING}}}),
        )
        .await;
        let restored = |(label, status): (String, Option<ExecStatus>)| {
            assert_eq!(
                label, "done",
                "the record says the hook succeeded: {status:?}"
            );
            status.expect("the status is written back")
        };
        let status = restored(finished(&bed, NS, "reset-0").await);
        assert_eq!(status.hooks[0].phase, HookPhase::Succeeded);
        assert_eq!(status.hooks[0].message, RESTORED_FROM_RECORD);
        rolled_back_event(&bed, "reset-0").await;
        let (label, _) = finished(&bed, NS, "flipped-0").await;
        assert_ne!(label, EXEC_PENDING);
        assert_eq!(
            first.metrics.status_rollbacks.get(),
            1,
            "only the removed status is a roll-back; a flipped label is not"
        );

        // The leader is killed (its memory is gone) once its record holds the hook's result; the
        // status of a pod it finished is removed before a new leader starts. The new leader reads
        // the record before anything runs.
        let uid = get_pod(&bed, NS, "reset-after-failover-0")
            .await
            .metadata
            .uid
            .unwrap();
        recorded_success(&bed, &uid).await;
        first.kill();
        patch_pod(&bed, NS, "reset-after-failover-0", reset_to_pending()).await;
        let second = leading(&bed, "second").await;
        let status = restored(finished(&bed, NS, "reset-after-failover-0").await);
        assert_eq!(status.hooks[0].phase, HookPhase::Succeeded);
        rolled_back_event(&bed, "reset-after-failover-0").await;
        assert_eq!(second.metrics.status_rollbacks.get(), 1);

        for name in ["reset-0", "flipped-0", "reset-after-failover-0"] {
            assert_eq!(runs(&bed, NS, name, "ran.log"), 1, "{name} ran once");
        }
        assert_eq!(second.hooks("succeeded"), 0, "the new leader ran nothing");
        stop(second).await;
        bed.stop().await;
    })
    .await;
}

/// The record an earlier version kept in the RestoreRun's `status.executions` still counts after
/// an upgrade (docs/behaviour.md §9.5): a new leader that finds a pod's result only there restores
/// the pod's removed status from it and runs nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_an_earlier_version_kept_in_the_restore_run_still_counts() {
    use kube::api::DeleteParams;
    use restore_hooks::hooks::types::RestoreRecord;
    bounded(LIMIT, async {
        let bed = testbed().await;
        let first = leading(&bed, "first").await;
        let name = "upgraded-0";
        counted_and_done(&bed, name).await;
        let uid = get_pod(&bed, NS, name).await.metadata.uid.unwrap();
        let entry = recorded_success(&bed, &uid).await;
        first.kill();
        // Where an earlier version kept it: the RestoreRun, and no RestoreRecord at all.
        let runs_api: Api<RestoreRun> = Api::all(bed.client.clone());
        runs_api
            .patch_status(
                RESTORE,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"executions": {&uid: entry}}})),
            )
            .await
            .unwrap();
        let parts: Api<RestoreRecord> = Api::all(bed.client.clone());
        for part in parts.list(&Default::default()).await.unwrap() {
            let part = part.metadata.name.unwrap();
            parts.delete(&part, &DeleteParams::default()).await.unwrap();
        }
        assert!(
            restore_hooks::testbed::recorded(&bed.client, RESTORE)
                .await
                .unwrap()
                .is_empty()
        );
        patch_pod(&bed, NS, name, reset_to_pending()).await;
        let second = leading(&bed, "second").await;
        let (label, status) = finished(&bed, NS, name).await;
        assert_eq!(label, "done", "{status:?}");
        let status = status.expect("the status is written back");
        assert_eq!(status.hooks[0].phase, HookPhase::Succeeded);
        assert_eq!(status.hooks[0].message, RESTORED_FROM_RECORD);
        assert_eq!(runs(&bed, NS, name, "ran.log"), 1, "ran once");
        assert_eq!(second.hooks("succeeded"), 0, "the new leader ran nothing");
        stop(second).await;
        bed.stop().await;
    })
    .await;
}

/// The `StatusRolledBack` Event on `pod`, naming the hook that is not run again.
async fn rolled_back_event(bed: &Testbed, pod: &str) {
    let message = eventually!(format!("a StatusRolledBack Event on {pod}"), {
        bed.pod_events(NS, pod)
            .await
            .unwrap()
            .into_iter()
            .find(|(reason, _, _)| reason == "StatusRolledBack")
            .map(|(_, message, _)| message)
    });
    assert!(
        message.contains("count (#0)") && message.contains("not run again"),
        "{message}"
    );
}

/// Stale plans are refused: one signed with another installation's key (or a key rotated out),
/// and a genuine plan of an older pod of the same name (issued long before this pod was created:
/// copied, or restored from a backup by a tool outside every restore scope).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_plan_is_not_executed() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        let other = PlanKeys::new(&restore_hooks::plan_key::generate().unwrap(), None).unwrap();
        let now = jiff::Timestamp::now();
        create(
            &bed,
            &signed_pod(
                &other,
                now,
                NS,
                "other-key",
                vec![hook("h", "app", "touch ran")],
            ),
        )
        .await;
        let old = now - jiff::SignedDuration::from_hours(3);
        create(
            &bed,
            &signed_pod(
                &bed.keys,
                old,
                NS,
                "old-plan",
                vec![hook("h", "app", "touch ran")],
            ),
        )
        .await;

        let message = rejected(&bed, NS, "other-key").await;
        assert!(
            message.contains(other.current_id()) && message.contains("neither"),
            "{message}"
        );
        let message = rejected(&bed, NS, "old-plan").await;
        assert!(message.contains("belongs to another pod"), "{message}");
        assert!(!exists(&bed, NS, "other-key", "ran"));
        assert!(!exists(&bed, NS, "old-plan", "ran"));
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A status the controller did not write (hand-written, claiming the hook succeeded) is never
/// trusted: nothing runs, the pod is refused, and the restore's view counts the hook as not run
/// (failed), not as forever pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_status_is_refused_and_counted() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        let status = json!({"hooks": [{
            "name": "h", "index": 0, "container": "app", "phase": "Pending",
            "message": "", "stdout": "", "stderr": "",
        }]});
        let pod = bed.planned_pod(
            NS,
            "forged-status",
            vec![hook("h", "app", "touch ran")],
            json!({
                "metadata": {"annotations": {STATUS_ANNOTATION: status.to_string()}}
            }),
        );
        create(&bed, &pod).await;
        let message = rejected(&bed, NS, "forged-status").await;
        assert!(
            message.contains("not written by this installation's controller"),
            "{message}"
        );
        assert!(!exists(&bed, NS, "forged-status", "ran"));

        let runs_api: Api<RestoreRun> = Api::all(bed.client.clone());
        // The hook can never run: it counts as failed, and the restore is not in progress
        // because of it.
        let run = eventually!("the RestoreRun to count the refused hook as failed", {
            runs_api
                .get_opt(RESTORE)
                .await
                .ok()
                .flatten()
                .and_then(|r| r.status)
                .filter(|s| s.pods_planned == 1 && s.hooks.pending == 0)
        });
        assert_eq!(
            (run.phase.as_str(), run.hooks.failed),
            ("PartiallyFailed", 1),
            "{run:?}"
        );
        assert_eq!(run.failed_pods.len(), 1, "{run:?}");
        assert_eq!(run.failed_pods[0].pod, "forged-status");
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// Two replicas and a restart share the installation's key: whichever leads verifies the plans
/// the webhook signed and the statuses the other replicas wrote. Leadership moves twice; each
/// pod's hook runs exactly once, and the last leader counts every pod's signed status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_and_restarts_verify_each_others_plans() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let a = bed.start_controller("replica-a", bed.controller_args(), None);
        let b = bed.start_controller("replica-b", bed.controller_args(), None);
        eventually!("a leader", (a.is_leader() || b.is_leader()).then_some(()));
        let (leader, follower) = if a.is_leader() { (a, b) } else { (b, a) };

        let run_pod = |name: &'static str| {
            let pod = bed.planned_pod(
                NS,
                name,
                vec![hook("count", "app", "echo ran >> ran.log")],
                json!({}),
            );
            let bed = &bed;
            async move {
                create(bed, &pod).await;
                let (label, _) = finished(bed, NS, name).await;
                assert_eq!(label, "done", "{name}");
            }
        };
        run_pod("first").await;
        assert_eq!(leader.hooks_reaching("succeeded", 1).await, 1);

        stop(leader).await;
        wait_leader(&follower).await;
        run_pod("second").await;
        assert_eq!(follower.hooks_reaching("succeeded", 1).await, 1);

        // The stopped replica comes back as a new process, and takes over again.
        let restarted = bed.start_controller("replica-a", bed.controller_args(), None);
        stop(follower).await;
        wait_leader(&restarted).await;
        run_pod("third").await;
        assert_eq!(restarted.hooks_reaching("succeeded", 1).await, 1);

        for pod in ["first", "second", "third"] {
            assert_eq!(runs(&bed, NS, pod, "ran.log"), 1, "{pod}");
        }
        // A status that does not verify counts for nothing: all three count.
        let runs_api: Api<RestoreRun> = Api::all(bed.client.clone());
        eventually!("the last leader to count every pod", {
            runs_api
                .get_opt(RESTORE)
                .await
                .ok()
                .flatten()
                .and_then(|r| r.status)
                .filter(|s| s.pods_planned == 3 && s.hooks.succeeded == 3 && s.phase == "Completed")
        });
        stop(restarted).await;
        bed.stop().await;
    })
    .await;
}

/// A controller with its keys from the plan key Secret (as `serve` runs it).
fn secret_controller(bed: &Testbed, identity: &str, keys: KeyRing) -> ControllerHandle {
    let metrics = Metrics::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(controller::run(ControllerDeps {
        client: bed.client.clone(),
        args: bed.controller_args(),
        engine: bed.engine.clone(),
        metrics: metrics.clone(),
        identity: identity.to_string(),
        index: bed.index.clone(),
        keys,
        shutdown: shutdown.clone(),
    }));
    ControllerHandle {
        identity: identity.to_string(),
        metrics,
        shutdown,
        task,
    }
}

/// Starts loading keys from the Secret (kept current until `stop`).
fn secret_ring(bed: &Testbed, create: bool, stop: &CancellationToken) -> KeyRing {
    let (ring, run) = SecretKeys::new(bed.client.clone(), INSTALL_NS, KEY_SECRET, create).start();
    let stop = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = run => {}
        }
    });
    ring
}

async fn loaded(ring: &KeyRing) -> Arc<PlanKeys> {
    eventually!("the plan keys to load", ring.current())
}

/// Two replicas starting at once on a cluster without the Secret both try to create it; they
/// end up with the same key, so each verifies what the other signs, and a controller using one
/// replica's ring runs a plan signed by the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_racing_to_create_the_key_secret_share_one_key() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let stop_rings = CancellationToken::new();
        let one = secret_ring(&bed, true, &stop_rings);
        let two = secret_ring(&bed, true, &stop_rings);
        let (k1, k2) = (loaded(&one).await, loaded(&two).await);
        assert_eq!(k1.current_id(), k2.current_id());
        let secret = Api::<Secret>::namespaced(bed.client.clone(), INSTALL_NS)
            .get(KEY_SECRET)
            .await
            .unwrap();
        let data = secret.data.unwrap_or_default();
        assert_eq!(
            data.keys().map(String::as_str).collect::<Vec<_>>(),
            [CURRENT]
        );
        assert!(data[CURRENT].0.len() >= 32);
        let binding = PodBinding {
            namespace: NS,
            name: "x",
            generate_name: "",
        };
        let signature = k1.sign_plan(binding, "{}");
        assert_eq!(k2.verify_plan(binding, "{}", Some(&signature)), Ok(()));

        let ctl = secret_controller(&bed, "ctl", two.clone());
        wait_leader(&ctl).await;
        let pod = signed_pod(
            &k1,
            jiff::Timestamp::now(),
            NS,
            "web-0",
            vec![hook("count", "app", "echo ran >> ran.log")],
        );
        create(&bed, &pod).await;
        let (label, _) = finished(&bed, NS, "web-0").await;
        assert_eq!(label, "done");
        assert_eq!(runs(&bed, NS, "web-0", "ran.log"), 1);
        stop(ctl).await;
        stop_rings.cancel();
        bed.stop().await;
    })
    .await;
}

async fn write_key_secret(bed: &Testbed, current: &[u8], previous: Option<&[u8]>) {
    let mut data =
        std::collections::BTreeMap::from([(CURRENT.to_string(), ByteString(current.to_vec()))]);
    if let Some(p) = previous {
        data.insert(PREVIOUS.to_string(), ByteString(p.to_vec()));
    }
    let api: Api<Secret> = Api::namespaced(bed.client.clone(), INSTALL_NS);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(KEY_SECRET.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    match api.get_opt(KEY_SECRET).await.unwrap() {
        None => {
            api.create(&PostParams::default(), &secret).await.unwrap();
        }
        Some(existing) => {
            // Rotation replaces both keys at once, as `kubectl apply` of the Secret would.
            let mut secret = secret;
            secret.metadata.resource_version = existing.metadata.resource_version;
            api.replace(KEY_SECRET, &PostParams::default(), &secret)
                .await
                .unwrap();
        }
    }
}

/// Rotation (§9.2): a pod planned under key A still runs after the Secret was rotated to
/// current=B, previous=A; after a second rotation (C, B), reaching the running controller without
/// a restart, a plan signed with A is refused while one signed with B still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotation_keeps_pending_plans_valid() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let (a, b, c) = (
            restore_hooks::plan_key::generate().unwrap(),
            restore_hooks::plan_key::generate().unwrap(),
            restore_hooks::plan_key::generate().unwrap(),
        );
        let keys_a = PlanKeys::new(&a, None).unwrap();
        let keys_b = PlanKeys::new(&b, Some(&a)).unwrap();
        let keys_c = PlanKeys::new(&c, Some(&b)).unwrap();
        write_key_secret(&bed, &a, None).await;
        let now = jiff::Timestamp::now;
        create(
            &bed,
            &signed_pod(
                &keys_a,
                now(),
                NS,
                "planned-under-a",
                vec![hook("count", "app", "echo ran >> ran.log")],
            ),
        )
        .await;
        write_key_secret(&bed, &b, Some(&a)).await;

        // The controller starts after the rotation: the pod's plan is signed with `previous`.
        let stop_ring = CancellationToken::new();
        let ring = secret_ring(&bed, false, &stop_ring);
        eventually!(
            "the ring to load the rotated keys",
            ring.current()
                .filter(|k| k.current_id() == keys_b.current_id()
                    && k.previous_id() == Some(keys_a.current_id()))
        );
        let ctl = secret_controller(&bed, "ctl", ring.clone());
        wait_leader(&ctl).await;
        let (label, _) = finished(&bed, NS, "planned-under-a").await;
        assert_eq!(label, "done");
        assert_eq!(runs(&bed, NS, "planned-under-a", "ran.log"), 1);

        write_key_secret(&bed, &c, Some(&b)).await;
        eventually!(
            "the running controller's ring to see the second rotation",
            ring.current()
                .filter(|k| k.current_id() == keys_c.current_id())
        );
        create(
            &bed,
            &signed_pod(
                &keys_a,
                now(),
                NS,
                "signed-with-a",
                vec![hook("count", "app", "echo ran >> ran.log")],
            ),
        )
        .await;
        create(
            &bed,
            &signed_pod(
                &keys_b,
                now(),
                NS,
                "signed-with-b",
                vec![hook("count", "app", "echo ran >> ran.log")],
            ),
        )
        .await;
        let message = rejected(&bed, NS, "signed-with-a").await;
        assert!(message.contains(keys_a.current_id()), "{message}");
        let (label, _) = finished(&bed, NS, "signed-with-b").await;
        assert_eq!(label, "done");
        assert_eq!(runs(&bed, NS, "signed-with-a", "ran.log"), 0);
        assert_eq!(runs(&bed, NS, "signed-with-b", "ran.log"), 1);
        stop(ctl).await;
        stop_ring.cancel();
        bed.stop().await;
    })
    .await;
}

/// The controller never execs into a pod in an excluded namespace, even one carrying the restore
/// label and a correctly signed plan (§1.3, §6.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_plan_in_an_excluded_namespace_never_runs() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        assert!(
            bed.engine
                .excluded_namespaces
                .iter()
                .any(|n| n == "kube-system")
        );
        bed.create_namespace("kube-system", json!({}))
            .await
            .unwrap();
        let ctl = leading(&bed, "ctl").await;
        let pod = bed.planned_pod(
            "kube-system",
            "coredns-0",
            vec![hook("h", "app", "touch ran")],
            json!({}),
        );
        create(&bed, &pod).await;
        // Something was decided about the pod: it is not pending any more.
        let (label, status) = finished(&bed, "kube-system", "coredns-0").await;
        assert_eq!(label, "failed");
        let status = status.unwrap();
        assert_eq!(status.hooks[0].phase, HookPhase::Failed);
        assert!(status.hooks[0].message.contains("excluded"), "{status:?}");
        assert!(
            status.hooks[0].started_at.is_none(),
            "never started: {status:?}"
        );
        assert!(!exists(&bed, "kube-system", "coredns-0", "ran"));
        assert_eq!(ctl.hooks("succeeded"), 0);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// Scope is checked again before every exec (§6.2): a correctly signed plan on a pod that left
/// every restore scope before its container came up (its restore label removed; its namespace's
/// restore label removed), or that was never in one, fails with the scope message; nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_plan_outside_every_restore_scope_never_runs() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        bed.create_namespace("restore-ns", json!({"restore-hooks.dev/restore": RESTORE}))
            .await
            .unwrap();
        let ctl = leading(&bed, "ctl").await;
        // With the kubelet paused no container comes up: the controller holds the verified plans
        // and waits, until the test has taken the pods out of scope.
        bed.sim.stop_kubelet();
        let plan = || vec![hook("h", "app", "touch ran")];
        create(&bed, &bed.planned_pod(NS, "by-label", plan(), json!({}))).await;
        let namespace_only = json!({"metadata": {"labels": {"velero.io/restore-name": null}}});
        create(
            &bed,
            &bed.planned_pod("restore-ns", "by-namespace", plan(), namespace_only.clone()),
        )
        .await;
        eventually!(
            "the controller to pick both pods up",
            (ctl.metrics.pending_pods.get() == 2).then_some(())
        );

        patch_pod(
            &bed,
            NS,
            "by-label",
            json!({"metadata": {"labels": {"velero.io/restore-name": null}}}),
        )
        .await;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(bed.client.clone());
        let unlabel = json!({"metadata": {"labels": {"restore-hooks.dev/restore": null}}});
        namespaces
            .patch(
                "restore-ns",
                &PatchParams::default(),
                &Patch::Merge(&unlabel),
            )
            .await
            .unwrap();
        // The controller reads namespace labels from the shared cache: wait until it has the
        // change, then let the containers come up (the pods' next events).
        eventually!("the cache to see the namespace label removed", {
            let index = bed.index.read();
            let labels = index.namespace_labels("restore-ns");
            labels
                .is_some_and(|l| !l.contains_key("restore-hooks.dev/restore"))
                .then_some(())
        });
        // Never in scope at all, with a plan signed for it.
        create(
            &bed,
            &bed.planned_pod(NS, "never-scoped", plan(), namespace_only),
        )
        .await;
        bed.sim.start_kubelet();

        for (ns, name) in [
            (NS, "by-label"),
            ("restore-ns", "by-namespace"),
            (NS, "never-scoped"),
        ] {
            let (label, status) = finished(&bed, ns, name).await;
            assert_eq!(label, "failed", "{ns}/{name}");
            let status = status.unwrap();
            assert_eq!(status.hooks[0].phase, HookPhase::Failed, "{ns}/{name}");
            assert!(
                status.hooks[0].message.contains("restore scope"),
                "{ns}/{name}: {status:?}"
            );
            assert!(
                status.hooks[0].started_at.is_none(),
                "{ns}/{name} never started"
            );
            assert!(
                !exists(&bed, ns, name, "ran"),
                "{ns}/{name}: the command ran"
            );
        }
        assert_eq!(ctl.hooks("succeeded"), 0);
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}

/// A restore namespace that the controller's cache does not show yet (created a moment ago, or
/// its watch is behind) is not taken for one that lost its restore label: the pod's hooks run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_in_a_restore_namespace_the_cache_does_not_show_yet_runs_its_hooks() {
    bounded(LIMIT, async {
        let bed = testbed().await;
        let ctl = leading(&bed, "ctl").await;
        bed.sim.faults().stall_watches("namespaces");
        bed.create_namespace("new-ns", json!({"restore-hooks.dev/restore": RESTORE}))
            .await
            .unwrap();
        let namespace_only = json!({"metadata": {"labels": {"velero.io/restore-name": null}}});
        let plan = vec![hook("h", "app", "touch ran")];
        create(
            &bed,
            &bed.planned_pod("new-ns", "by-namespace", plan, namespace_only),
        )
        .await;
        let (label, status) = finished(&bed, "new-ns", "by-namespace").await;
        assert_eq!(label, "done", "{status:?}");
        // The case under test: the cache still does not know the namespace.
        assert!(bed.index.read().namespace_labels("new-ns").is_none());
        assert!(exists(&bed, "new-ns", "by-namespace", "ran"));
        bed.sim.faults().resume_watches("namespaces");
        stop(ctl).await;
        bed.stop().await;
    })
    .await;
}
