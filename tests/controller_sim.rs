//! The controller against the API-server simulator (`kube-sim`), through the shared testbed
//! (`restore_hooks::testbed`): real kube client, real watch, real WebSocket exec (commands run as
//! local processes in the pod's directory). Pods are created exactly as the webhook leaves them
//! (`Testbed::planned_pod`: signed plan, `pending` label, restore label).
//!
//! Every test is bounded by a timeout and uses loopback only. No assertion depends on speed: where
//! two hooks must overlap (or must not), the hooks wait for files the test or the other hook
//! writes, never for a fixed time.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use restore_hooks::controller::exec_step::INTERRUPTED;
use restore_hooks::hooks::plan::{ExecStatus, HookPhase, OnError, PlannedHook};
use restore_hooks::hooks::types::RestoreHook;
use restore_hooks::testbed::{
    ControllerHandle, Testbed, TestbedOptions, bounded, exec_label, exec_status, sh_hook as hook,
};
use serde_json::{Value, json};

const NS: &str = "default";
/// Failure guard for waits inside a test (never a measurement).
const WAIT: Duration = Duration::from_secs(40);

/// Runs a test body with an overall limit, so a hang fails instead of blocking CI.
async fn bed() -> Testbed {
    // `RUST_LOG=restore_hooks=debug,kube_sim=info` shows the controllers' and simulator's logs.
    restore_hooks::testbed::log_from_env();
    Testbed::start(TestbedOptions::default())
        .await
        .expect("testbed starts")
}

fn start(bed: &Testbed, identity: &str) -> ControllerHandle {
    bed.start_controller(identity, bed.controller_args(), None)
}

/// Hooks numbered in plan order (`index` as in a RestoreHook's `postHooks`).
fn numbered(mut hooks: Vec<PlannedHook>) -> Vec<PlannedHook> {
    for (i, h) in hooks.iter_mut().enumerate() {
        h.index = i;
    }
    hooks
}

async fn create(bed: &Testbed, name: &str, hooks: Vec<PlannedHook>, extra: Value) {
    bed.create_pod(&bed.planned_pod(NS, name, hooks, extra))
        .await
        .expect("pod created");
}

/// Waits (bounded) until the pod is labelled `done` or `failed`; returns label and status.
async fn finished(bed: &Testbed, name: &str) -> (String, ExecStatus) {
    let (label, status) = tokio::time::timeout(WAIT, bed.finished(NS, name))
        .await
        .unwrap_or_else(|_| panic!("pod {name} not labelled done/failed within {WAIT:?}"));
    (
        label,
        status.unwrap_or_else(|| panic!("pod {name} finished without a status")),
    )
}

fn file(bed: &Testbed, pod: &str, name: &str) -> String {
    std::fs::read_to_string(bed.pod_dir(NS, pod).join(name)).unwrap_or_default()
}

fn exists(bed: &Testbed, pod: &str, name: &str) -> bool {
    bed.pod_dir(NS, pod).join(name).exists()
}

fn touch(bed: &Testbed, pod: &str, name: &str) {
    std::fs::write(bed.pod_dir(NS, pod).join(name), b"").expect("file written in the pod dir");
}

fn phases(s: &ExecStatus) -> Vec<HookPhase> {
    s.hooks.iter().map(|h| h.phase).collect()
}

async fn events(bed: &Testbed, pod: &str) -> Vec<(String, String, String)> {
    bed.pod_events(NS, pod).await.expect("events listed")
}

/// Polls `check` until it holds; panics naming `what` after [`WAIT`] (a guard, not a measure).
async fn wait_for(what: &str, mut check: impl AsyncFnMut() -> bool) {
    restore_hooks_testkit::eventually!(what, WAIT, check().await)
}

async fn label_of(bed: &Testbed, name: &str) -> Option<String> {
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
    pods.get_opt(name)
        .await
        .ok()
        .flatten()
        .map(|p| exec_label(&p))
}

/// A shell fragment that waits for `file` in the pod's directory, at most 60 s (so that a
/// broken test cannot leave processes behind for long), and fails if it never came.
fn wait_file(file: &str) -> String {
    format!(
        "i=0; until [ -e {file} ] || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done; [ -e {file} ]"
    )
}

use HookPhase::{Failed as F, Pending as P, Running as R, Skipped as S, Succeeded as OK};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_of_each_container_run_in_plan_order_once_it_runs() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        // The RestoreHook the plan's hooks name: its status counts them.
        let rh: Api<RestoreHook> = Api::namespaced(bed.client.clone(), NS);
        let obj: RestoreHook = serde_json::from_value(json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "rehydrate", "namespace": NS},
            "spec": {"postHooks": []}
        }))
        .unwrap();
        rh.create(&PostParams::default(), &obj)
            .await
            .expect("RestoreHook created");

        let ctl = start(&bed, "a");
        let h = numbered(vec![
            hook("rehydrate", "db", "echo first >> db.txt; echo out-1"),
            hook("rehydrate", "app", "echo second >> app.txt"),
            hook("rehydrate", "db", "echo third >> db.txt; echo warn >&2"),
        ]);
        create(&bed, "p1", h, json!({})).await;
        let (label, st) = finished(&bed, "p1").await;
        assert_eq!(label, "done");
        assert_eq!(phases(&st), vec![OK, OK, OK]);
        // Per container, in plan order (app's hook may run at any time relative to db's).
        assert_eq!(
            file(&bed, "p1", "db.txt"),
            "first\nthird\n",
            "db's hooks in plan order"
        );
        assert_eq!(file(&bed, "p1", "app.txt"), "second\n");
        assert_eq!(st.hooks[0].stdout, "out-1\n");
        assert_eq!(st.hooks[2].stderr, "warn\n");
        assert_eq!(st.hooks[0].exit_code, Some(0));
        assert!(
            st.hooks
                .iter()
                .all(|h| h.started_at.is_some() && h.finished_at.is_some())
        );
        // Status entries are in plan order, whatever order the hooks ended in.
        let order: Vec<(&str, &str, usize)> = st
            .hooks
            .iter()
            .map(|h| (h.name.as_str(), h.container.as_str(), h.index))
            .collect();
        assert_eq!(
            order,
            vec![
                ("rehydrate", "db", 0),
                ("rehydrate", "app", 1),
                ("rehydrate", "db", 2)
            ]
        );
        assert_eq!(ctl.hooks_reaching("succeeded", 3).await, 3);
        assert!(ctl.metrics.exec_duration.get_sample_count() >= 3);

        // §6.12: one Event for the three successes, with their stdout.
        wait_for("HooksCompleted on pod p1", async || {
            events(&bed, "p1")
                .await
                .iter()
                .any(|e| e.0 == "HooksCompleted")
        })
        .await;
        let evs = events(&bed, "p1").await;
        let completed: Vec<&str> = evs
            .iter()
            .filter(|e| e.0 == "HooksCompleted")
            .map(|e| e.1.as_str())
            .collect();
        assert_eq!(completed.len(), 1, "{evs:?}");
        assert!(
            completed[0].contains("rehydrate (#0, db), stdout: out-1;")
                && completed[0].contains("rehydrate (#1, app);")
                && completed[0].contains("rehydrate (#2, db)"),
            "HooksCompleted names the hooks that succeeded, with the first one's stdout: {evs:?}"
        );

        wait_for("RestoreHook status counts the 3 hooks", async || {
            let r = rh.get("rehydrate").await.unwrap();
            r.status.is_some_and(|s| {
                s.pods_planned == 1 && s.hooks.succeeded == 3 && s.hooks.pending == 0
            })
        })
        .await;
        wait_for("no pending pods tracked", async || {
            ctl.metrics.pending_pods.get() == 0
        })
        .await;
        let text = ctl.metrics.render();
        assert!(
            text.contains("restore_hooks_exec_hooks_total{result=\"succeeded\"} 3"),
            "{text}"
        );
        assert!(text.contains("restore_hooks_leader 1"), "{text}");
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_error_continue_goes_on_and_fail_skips_the_rest() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        let failing = hook("bad", "db", "echo oops >&2; exit 3");
        let mut fail = failing.clone();
        fail.on_error = OnError::Fail;

        create(
            &bed,
            "cont",
            numbered(vec![failing, hook("next", "db", "touch ran")]),
            json!({}),
        )
        .await;
        create(
            &bed,
            "fail",
            numbered(vec![fail, hook("next", "db", "touch ran")]),
            json!({}),
        )
        .await;

        let (label, st) = finished(&bed, "cont").await;
        assert_eq!(
            label, "failed",
            "any failure, Continue too, labels the pod failed"
        );
        assert_eq!(phases(&st), vec![F, OK]);
        assert_eq!(st.hooks[0].exit_code, Some(3));
        assert_eq!(st.hooks[0].message, "command terminated with exit code 3");
        assert_eq!(st.hooks[0].stderr, "oops\n");
        assert!(exists(&bed, "cont", "ran"));

        let (label, st) = finished(&bed, "fail").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, S]);
        assert_eq!(
            st.hooks[1].message,
            "skipped: hook bad (#0) failed with onError: Fail"
        );
        assert!(!exists(&bed, "fail", "ran"), "a skipped hook never runs");
        assert_eq!(ctl.hooks_reaching("failed", 2).await, 2);
        assert_eq!(ctl.hooks_reaching("skipped", 1).await, 1);
        assert_eq!(ctl.hooks_reaching("succeeded", 1).await, 1);
        // Events are sent concurrently (§6.12): HookFailed may land after HooksCompleted.
        wait_for("HookFailed and HooksCompleted on pod fail", async || {
            let evs = events(&bed, "fail").await;
            ["HookFailed", "HooksCompleted"]
                .iter()
                .all(|r| evs.iter().any(|e| e.0 == *r))
        })
        .await;
        let evs = events(&bed, "fail").await;
        assert!(
            evs.iter().any(|e| e.0 == "HookFailed"
                && e.1.contains("exit code 3")
                && e.1.contains("oops")),
            "{evs:?}"
        );
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// §6.12: successes get no Event of their own; the pod's one `HooksCompleted` (Normal) names
/// them. A failure still gets its `HookFailed`. Counted once the controller stopped, so after
/// the flush of what it queued: nothing can arrive later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successes_get_one_hooks_completed_per_pod_and_failures_their_warning() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        create(
            &bed,
            "ok",
            numbered(vec![
                hook("one", "db", "echo first"),
                hook("two", "app", "echo second"),
                hook("three", "db", "echo third"),
            ]),
            json!({}),
        )
        .await;
        create(
            &bed,
            "mixed",
            numbered(vec![
                hook("good", "db", "echo fine"),
                hook("bad", "db", "echo broken >&2; exit 4"),
            ]),
            json!({}),
        )
        .await;
        assert_eq!(finished(&bed, "ok").await.0, "done");
        assert_eq!(finished(&bed, "mixed").await.0, "failed");
        let metrics = ctl.metrics.clone();
        ctl.stop().await.expect("controller stops cleanly");

        let typed = |pod: &'static str| {
            let api: Api<k8s_openapi::api::core::v1::Event> =
                Api::namespaced(bed.client.clone(), NS);
            async move {
                api.list(&ListParams::default())
                    .await
                    .expect("events listed")
                    .items
                    .into_iter()
                    .filter(|e| e.involved_object.name.as_deref() == Some(pod))
                    .map(|e| {
                        (
                            e.reason.unwrap_or_default(),
                            e.type_.unwrap_or_default(),
                            e.message.unwrap_or_default(),
                        )
                    })
                    .collect::<Vec<_>>()
            }
        };
        let ok = typed("ok").await;
        assert_eq!(ok.len(), 1, "one Event for three successes: {ok:?}");
        let (reason, type_, message) = &ok[0];
        assert_eq!(
            (reason.as_str(), type_.as_str()),
            ("HooksCompleted", "Normal")
        );
        assert!(
            message.contains("3 succeeded, 0 failed, 0 skipped; restore-hooks.dev/exec=done")
                && message.contains("one (#0, db), stdout: first;")
                && message.contains("two (#1, app), stdout: second;")
                && message.contains("three (#2, db), stdout: third"),
            "{message}"
        );

        let mixed = typed("mixed").await;
        let mut reasons: Vec<(&str, &str)> = mixed
            .iter()
            .map(|(r, t, _)| (r.as_str(), t.as_str()))
            .collect();
        reasons.sort();
        assert_eq!(
            reasons,
            [("HookFailed", "Warning"), ("HooksCompleted", "Warning")],
            "{mixed:?}"
        );
        let failed = &mixed.iter().find(|e| e.0 == "HookFailed").unwrap().2;
        assert!(
            failed.contains("bad (#1,")
                && failed.contains("exit code 4")
                && failed.contains("broken"),
            "{failed}"
        );
        let completed = &mixed.iter().find(|e| e.0 == "HooksCompleted").unwrap().2;
        assert!(
            completed.contains("1 succeeded, 1 failed")
                && completed.contains("good (#0, db), stdout: fine"),
            "{completed}"
        );

        let sent = |result: &str| metrics.events_sent.with_label_values(&[result]).get();
        assert_eq!((sent("created"), sent("failed")), (3, 0));
        assert_eq!(
            bed.sim.faults().requests("create", "events"),
            3,
            "one create per Event: the five hooks cost three"
        );
        let dropped = |why: &str| metrics.events_dropped.with_label_values(&[why]).get();
        assert_eq!((dropped("queue_full"), dropped("shutdown")), (0, 0));
        bed.stop().await;
    })
    .await;
}

/// §6.12: an Event the API server refuses for now (500) is sent again, once; a pod worker never
/// waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_refused_for_now_is_sent_again() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        bed.sim.faults().fail_next("create", "events", 2);
        let ctl = start(&bed, "a");
        create(&bed, "p", vec![hook("h", "db", "echo hi")], json!({})).await;
        assert_eq!(finished(&bed, "p").await.0, "done");
        wait_for("HooksCompleted on pod p", async || {
            events(&bed, "p")
                .await
                .iter()
                .any(|e| e.0 == "HooksCompleted")
        })
        .await;
        let metrics = ctl.metrics.clone();
        ctl.stop().await.expect("controller stops cleanly");
        let evs = events(&bed, "p").await;
        assert_eq!(evs.len(), 1, "sent once: {evs:?}");
        assert_eq!(bed.sim.faults().requests("create", "events"), 3);
        let sent = |result: &str| metrics.events_sent.with_label_values(&[result]).get();
        assert_eq!((sent("created"), sent("failed")), (1, 0));
        bed.stop().await;
    })
    .await;
}

/// §6.12: at shutdown the controller sends what is queued for a bounded time, then stops: an
/// Event the API server keeps refusing is given up (dropped or failed, counted), never waited
/// for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_controller_does_not_wait_for_events_it_cannot_send() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        bed.sim.faults().fail_next("create", "events", 1_000);
        let ctl = start(&bed, "a");
        create(&bed, "p", vec![hook("h", "db", "echo hi")], json!({})).await;
        assert_eq!(finished(&bed, "p").await.0, "done");
        let metrics = ctl.metrics.clone();
        ctl.stop().await.expect("controller stops cleanly");
        assert!(events(&bed, "p").await.is_empty());
        let sent = |result: &str| metrics.events_sent.with_label_values(&[result]).get();
        let dropped = |why: &str| metrics.events_dropped.with_label_values(&[why]).get();
        assert_eq!(sent("created"), 0);
        assert_eq!(
            sent("failed") + dropped("shutdown"),
            1,
            "the pod's HooksCompleted, given up"
        );
        assert_eq!(dropped("queue_full"), 0);
        bed.stop().await;
    })
    .await;
}

/// §6.7: a `Fail` failure in one container skips the pending hooks of every container at once;
/// a hook already running in another container finishes and its result is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_error_fail_in_one_container_skips_every_container_but_running_hooks_finish() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        // app's first hook starts, then db's Fail hook fails; app's hook runs on until the test
        // has seen the skips, and is then released.
        let app_long = hook(
            "app-long",
            "app",
            &format!(
                "touch app-started; {}; echo finished-late",
                wait_file("release")
            ),
        );
        let mut db_fail = hook(
            "db-fail",
            "db",
            &format!("{}; echo broken >&2; exit 3", wait_file("app-started")),
        );
        db_fail.on_error = OnError::Fail;
        let plan = numbered(vec![
            db_fail,
            app_long,
            hook("db-next", "db", "touch db-next-ran"),
            hook("app-next", "app", "touch app-next-ran"),
        ]);
        create(&bed, "p", plan, json!({})).await;

        // While app's hook runs, the Fail failure has already skipped the rest, in both containers.
        let mut seen = None;
        wait_for(
            "db-fail Failed and the rest Skipped while app-long runs",
            async || {
                seen = bed.status_of(NS, "p").await;
                seen.as_ref().is_some_and(|s| phases(s) == vec![F, R, S, S])
            },
        )
        .await;
        let during = seen.unwrap();
        assert_eq!(
            during.hooks[2].message,
            "skipped: hook db-fail (#0) failed with onError: Fail"
        );
        assert_eq!(
            during.hooks[3].message,
            "skipped: hook db-fail (#0) failed with onError: Fail"
        );
        assert_eq!(
            label_of(&bed, "p").await.as_deref(),
            Some("pending"),
            "not finished while a hook still runs"
        );

        touch(&bed, "p", "release");
        let (label, st) = finished(&bed, "p").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, OK, S, S], "{st:?}");
        assert_eq!(st.hooks[0].exit_code, Some(3));
        assert_eq!(st.hooks[0].stderr, "broken\n");
        assert_eq!(
            st.hooks[1].stdout, "finished-late\n",
            "the running hook's result is recorded"
        );
        assert!(
            !exists(&bed, "p", "db-next-ran") && !exists(&bed, "p", "app-next-ran"),
            "skipped hooks never run"
        );
        assert_eq!(
            (
                ctl.hooks_reaching("failed", 1).await,
                ctl.hooks_reaching("succeeded", 1).await,
                ctl.hooks_reaching("skipped", 2).await
            ),
            (1, 1, 2)
        );
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// Hooks in two containers of one pod are in flight at the same time (each waits until the other
/// has started); both results are written, none overwrites the other, and the status stays in
/// plan order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hooks_in_flight_in_one_pod_are_both_recorded_in_plan_order() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        let plan = numbered(vec![
            hook(
                "db-side",
                "db",
                &format!("touch db-up; {}; echo from-db", wait_file("app-up")),
            ),
            hook(
                "app-side",
                "app",
                &format!(
                    "touch app-up; {}; echo from-app; echo e-app >&2",
                    wait_file("db-up")
                ),
            ),
            hook("db-after", "db", "echo after"),
        ]);
        create(&bed, "pair", plan, json!({})).await;
        let (label, st) = finished(&bed, "pair").await;
        assert_eq!(label, "done", "{st:?}");
        assert_eq!(phases(&st), vec![OK, OK, OK]);
        let entries: Vec<(&str, &str, &str)> = st
            .hooks
            .iter()
            .map(|h| (h.name.as_str(), h.container.as_str(), h.stdout.as_str()))
            .collect();
        assert_eq!(
            entries,
            vec![
                ("db-side", "db", "from-db\n"),
                ("app-side", "app", "from-app\n"),
                ("db-after", "db", "after\n")
            ],
            "each result in its own entry, in plan order"
        );
        assert_eq!(st.hooks[1].stderr, "e-app\n");
        assert_eq!(ctl.hooks_reaching("succeeded", 3).await, 3);
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_waits_are_not_executed_and_exec_timeouts_fail() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        let mut late = hook("late", "db", "touch ran");
        late.wait_for_ready = true;
        late.wait_timeout_ms = Some(1500);
        create(
            &bed,
            "never",
            vec![late],
            json!({"metadata": {"annotations": {"sim.kube/never-ready": "true"}}}),
        )
        .await;
        let mut slow = hook("slow", "db", "sleep 5; touch slept");
        slow.exec_timeout_ms = 500;
        create(
            &bed,
            "slow",
            numbered(vec![slow, hook("after", "db", "touch after")]),
            json!({}),
        )
        .await;

        let (label, st) = finished(&bed, "never").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F]);
        assert_eq!(
            st.hooks[0].message,
            "container db was running but never Ready (a hook of it waits for Ready) within \
             waitTimeout 1.5s of pod creation; not executed"
        );
        assert!(st.hooks[0].started_at.is_none());
        assert!(!exists(&bed, "never", "ran"));

        let (label, st) = finished(&bed, "slow").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, OK]);
        assert_eq!(st.hooks[0].message, "timed out after 500ms");
        assert!(exists(&bed, "slow", "after"));
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// §6.6: `--max-exec-timeout` caps a plan's longer execTimeout at run time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_timeouts_are_capped_by_max_exec_timeout() {
    bounded(Duration::from_secs(60), async {
        let mut options = TestbedOptions::default();
        options.engine.max_exec_timeout_ms = 700;
        let bed = Testbed::start(options).await.expect("testbed starts");
        let ctl = start(&bed, "a");
        // The plan says 10 minutes; a 30 s sleep would outlast the test if the cap were ignored.
        let mut long = hook("long", "db", "sleep 30");
        long.exec_timeout_ms = 600_000;
        create(
            &bed,
            "capped",
            numbered(vec![long, hook("after", "db", "touch after")]),
            json!({}),
        )
        .await;
        let (label, st) = finished(&bed, "capped").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, OK]);
        assert_eq!(
            st.hooks[0].message, "timed out after 700ms",
            "the cap, not the plan's 10m"
        );
        assert!(exists(&bed, "capped", "after"));
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_ready_waits_for_readiness_and_sidecars_are_targets() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let mut log = bed.sim.subscribe_log();
        let ctl = start(&bed, "a");
        let mut ready = hook("ready", "db", "touch ran");
        ready.wait_for_ready = true;
        create(
            &bed,
            "ready",
            vec![ready],
            json!({"metadata": {"annotations": {"sim.kube/ready-after": "1500ms"}}}),
        )
        .await;
        create(
            &bed,
            "side",
            vec![hook("proxy", "proxy", "echo sidecar > side.txt")],
            json!({"spec": {"initContainers": [
                {"name": "proxy", "image": "envoy:1", "restartPolicy": "Always"}
            ]}}),
        )
        .await;

        let (label, _) = finished(&bed, "ready").await;
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

        let (label, st) = finished(&bed, "side").await;
        assert_eq!(label, "done", "{st:?}");
        assert_eq!(file(&bed, "side", "side.txt"), "sidecar\n");
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// §6.3/§6.4: a native sidecar that never becomes Ready holds back only its own hooks: the
/// database's hook runs and succeeds while the sidecar's waits, which then expires with its
/// waitTimeout and is not executed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_ready_sidecar_holds_back_only_its_own_hooks() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        let mut side = hook("proxy-warm", "proxy", "touch proxy-ran");
        side.wait_for_ready = true;
        // Long enough that the database's hook is seen done while this one still waits.
        side.wait_timeout_ms = Some(10_000);
        let mut db = hook("db-rehydrate", "db", "echo db-ok");
        db.wait_for_ready = true;
        create(
            &bed,
            "mesh",
            numbered(vec![side, db]),
            json!({
                "metadata": {"annotations": {"sim.kube/never-ready": "proxy"}},
                "spec": {"initContainers": [{"name": "proxy", "image": "envoy:1", "restartPolicy": "Always"}]}
            }),
        )
        .await;

        let mut seen = None;
        wait_for("db's hook Succeeded", async || {
            seen = bed.status_of(NS, "mesh").await;
            seen.as_ref().is_some_and(|s| s.hooks.get(1).is_some_and(|h| h.phase == OK))
        })
        .await;
        let during = seen.unwrap();
        assert_eq!(
            during.hooks[0].phase, P,
            "the sidecar's hook (earlier in the plan) still waits while db's already ran: {during:?}"
        );
        assert_eq!(during.hooks[1].stdout, "db-ok\n");

        let (label, st) = finished(&bed, "mesh").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, OK]);
        assert_eq!(
            st.hooks[0].message,
            "container proxy was running but never Ready (a hook of it waits for Ready) within \
             waitTimeout 10s of pod creation; not executed"
        );
        assert!(st.hooks[0].started_at.is_none());
        assert!(!exists(&bed, "mesh", "proxy-ran"), "an expired hook is not executed");
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_deleted_or_terminal_before_their_hooks_fail_them() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        // Deleted when the first exec starts.
        bed.sim.faults().delete_pod_on_exec(NS, "gone");
        create(
            &bed,
            "gone",
            numbered(vec![
                hook("one", "db", "sleep 1"),
                hook("two", "db", "touch ran"),
            ]),
            json!({}),
        )
        .await;
        // Never Ready, then Succeeded: the waiting hook fails.
        let mut waiting = hook("w", "db", "touch ran");
        waiting.wait_for_ready = true;
        create(
            &bed,
            "job",
            vec![waiting],
            json!({"metadata": {"annotations": {"sim.kube/never-ready": "true"}}}),
        )
        .await;

        wait_for("two HookFailed events about pod gone", async || {
            events(&bed, "gone")
                .await
                .iter()
                .filter(|e| e.0 == "HookFailed")
                .count()
                >= 2
        })
        .await;
        let evs = events(&bed, "gone").await;
        assert!(
            evs.iter()
                .any(|e| e.1.contains("pod was deleted before the hook ran")),
            "{evs:?}"
        );
        assert!(!exists(&bed, "gone", "ran"));
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        assert!(pods.get_opt("gone").await.unwrap().is_none());

        // Let the worker see the pod waiting (its Pending status is written), then end the pod.
        wait_for("pod job has a status", async || {
            bed.status_of(NS, "job").await.is_some()
        })
        .await;
        bed.sim.set_pod_phase(NS, "job", "Succeeded").await;
        let (label, st) = finished(&bed, "job").await;
        assert_eq!(label, "failed");
        assert_eq!(
            st.hooks[0].message,
            "pod reached phase Succeeded before the hook ran"
        );
        assert!(!exists(&bed, "job", "ran"));
        // Both of gone's hooks (the one whose exec broke, too) and job's: also when the pod could
        // no longer be written.
        assert_eq!(ctl.hooks_reaching("failed", 3).await, 3);
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// A pod created and deleted while the controller's pod watches are behind: both events come
/// in one read (a watch flushes only when no further event waits), so the watch loop hands the
/// new worker "may be gone" before the worker has run at all. The worker must still say how the
/// pod's hooks ended, or its RestoreRun counts them pending and never completes.
/// (Single-threaded: a new task runs only once the watch loop waits, as on a busy controller.)
#[tokio::test(flavor = "current_thread")]
async fn a_pod_deleted_before_its_worker_first_looks_still_ends_its_hooks() {
    use restore_hooks::hooks::types::RestoreRun;
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        // The controller watches pods once it has run a hook.
        create(
            &bed,
            "first",
            vec![hook("one", "db", "touch ran")],
            json!({}),
        )
        .await;
        assert_eq!(finished(&bed, "first").await.0, "done");

        bed.sim.faults().stall_watches("pods");
        // One container: the pod's four events (added, running, deleting, deleted) fit in one
        // read of the client's 8 KiB buffer.
        let small = json!({"spec": {"containers": [{"name": "db", "image": "postgres:16"}]}});
        create(&bed, "brief", vec![hook("one", "db", "touch ran")], small).await;
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        pods.delete("brief", &DeleteParams::default().grace_period(0))
            .await
            .expect("brief deleted");
        wait_for("brief gone", async || {
            pods.get_opt("brief").await.is_ok_and(|p| p.is_none())
        })
        .await;
        bed.sim.faults().resume_watches("pods");

        let runs: Api<RestoreRun> = Api::all(bed.client.clone());
        wait_for("the RestoreRun to count brief's hook failed", async || {
            let Ok(Some(run)) = runs.get_opt(restore_hooks::testbed::RESTORE).await else {
                return false;
            };
            let status = run.status.unwrap_or_default();
            let counts = &status.hooks;
            (counts.succeeded, counts.failed, counts.pending) == (1, 1, 0)
                && status.phase == "PartiallyFailed"
        })
        .await;
        assert!(!exists(&bed, "brief", "ran"));
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// A pod whose exec label is not `pending` (changed by hand, docs/behaviour.md §5.5): nothing
/// starts on it, and its hooks count as failed, saying why, so its restore does not wait for them
/// forever; set back to `pending`, they run and count as they end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_of_a_pod_relabelled_by_hand_count_as_not_run_until_it_is_set_back() {
    use restore_hooks::hooks::types::{RestoreRun, RestoreRunStatus};
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        let done = json!({"metadata": {"labels": {"restore-hooks.dev/exec": "done"}}});
        create(&bed, "db", vec![hook("one", "db", "touch ran")], done).await;
        let runs: Api<RestoreRun> = Api::all(bed.client.clone());
        let run = async || -> Option<RestoreRunStatus> {
            runs.get_opt(restore_hooks::testbed::RESTORE)
                .await
                .ok()
                .flatten()?
                .status
        };
        wait_for("the RestoreRun to count db's hook as not run", async || {
            run().await.is_some_and(|s| {
                s.phase == "PartiallyFailed"
                    && (s.hooks.failed, s.hooks.pending) == (1, 0)
                    && s.failed_pods.iter().any(|f| {
                        f.pod == "db"
                            && f.message.contains(
                                "label is \"done\", not \"pending\", so no hook starts on it",
                            )
                    })
            })
        })
        .await;
        assert!(!exists(&bed, "db", "ran"));

        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        let pending = json!({"metadata": {"labels": {"restore-hooks.dev/exec": "pending"}}});
        pods.patch("db", &PatchParams::default(), &Patch::Merge(&pending))
            .await
            .expect("db labelled pending again");
        let (label, st) = finished(&bed, "db").await;
        assert_eq!((label.as_str(), phases(&st)), ("done", vec![OK]));
        assert!(exists(&bed, "db", "ran"));
        wait_for("the RestoreRun to complete", async || {
            run().await.is_some_and(|s| {
                s.phase == "Completed" && (s.hooks.succeeded, s.hooks.failed) == (1, 0)
            })
        })
        .await;
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_never_runs_a_hook_twice() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let first = start(&bed, "a");
        let mut long = hook("long", "db", "echo run >> long.txt; sleep 2");
        // Short, so that the restarted controller's wait for it (timeout + grace) is short too.
        long.exec_timeout_ms = 3_000;
        create(
            &bed,
            "p",
            numbered(vec![long, hook("next", "db", "echo run >> next.txt")]),
            json!({}),
        )
        .await;
        // Kill the controller while the first hook is recorded Running and its process runs.
        wait_for("hook long Running", async || {
            bed.status_of(NS, "p")
                .await
                .is_some_and(|s| s.hooks[0].phase == R)
        })
        .await;
        wait_for("hook long's process started", async || {
            file(&bed, "p", "long.txt") == "run\n"
        })
        .await;
        first.kill();

        // Same identity: it holds the Lease at once (a new replica would wait for expiry).
        let second = start(&bed, "a");
        let (label, st) = finished(&bed, "p").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, OK]);
        assert_eq!(st.hooks[0].message, INTERRUPTED);
        // The first exec is never started again: one run of each.
        assert_eq!(file(&bed, "p", "long.txt"), "run\n");
        assert_eq!(file(&bed, "p", "next.txt"), "run\n");
        second.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// A controller that stops (SIGTERM, or the end of its leadership) writes the results still
/// waiting for company before it lets go: the next leader reads a record that has them
/// (docs/behaviour.md §9.5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_controller_writes_the_results_it_has_not_recorded_yet() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        create(
            &bed,
            "p",
            numbered(vec![hook("quick", "db", "echo run >> quick.txt")]),
            json!({}),
        )
        .await;
        let (label, _) = finished(&bed, "p").await;
        assert_eq!(label, "done");
        // At once: the result waits up to a second for company before its own write.
        ctl.stop().await.expect("controller stops cleanly");
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        let uid = pods.get("p").await.unwrap().metadata.uid.unwrap();
        let record = restore_hooks::testbed::recorded(&bed.client, restore_hooks::testbed::RESTORE)
            .await
            .unwrap();
        assert_eq!(
            record.get(&uid).and_then(|e| e.mark(0)),
            Some(restore_hooks::ledger::Mark::Succeeded),
            "{record:?}"
        );
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_execs_and_a_successor_takes_over() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let a = start(&bed, "replica-a");
        wait_for("replica-a leads", async || a.is_leader()).await;
        let b = start(&bed, "replica-b");
        // Two renewals by A: B, which looks at the Lease more often than A renews it, has
        // looked since it started, and found it held.
        lease_renewed(&bed, 2).await;
        assert!(!b.is_leader(), "one leader at a time");

        create(
            &bed,
            "one",
            vec![hook("h", "db", "echo x >> ran.txt")],
            json!({}),
        )
        .await;
        let (label, _) = finished(&bed, "one").await;
        assert_eq!(label, "done");
        assert_eq!(file(&bed, "one", "ran.txt"), "x\n");
        assert_eq!(a.hooks_reaching("succeeded", 1).await, 1);
        assert_eq!(b.hooks("succeeded"), 0);

        // A stops (releases the Lease); B takes over well before the Lease would expire.
        let lease_ns = bed.controller_args().lease_namespace;
        a.stop().await.expect("replica-a stops cleanly");
        let lease = Api::<Lease>::namespaced(bed.client.clone(), &lease_ns)
            .get("restore-hooks-controller")
            .await
            .unwrap();
        let holder = lease.spec.unwrap_or_default().holder_identity;
        assert_ne!(
            holder.as_deref(),
            Some("replica-a"),
            "a stopped replica releases the Lease"
        );
        wait_for("replica-b leads", async || b.is_leader()).await;
        create(
            &bed,
            "two",
            vec![hook("h", "db", "echo x >> ran.txt")],
            json!({}),
        )
        .await;
        let (label, _) = finished(&bed, "two").await;
        assert_eq!(label, "done");
        assert_eq!(b.hooks_reaching("succeeded", 1).await, 1);
        wait_for("HooksCompleted on pod two", async || {
            events(&bed, "two")
                .await
                .iter()
                .any(|e| e.0 == "HooksCompleted")
        })
        .await;
        let evs = events(&bed, "two").await;
        assert!(evs.iter().all(|e| e.2 == "replica-b"), "{evs:?}");
        b.stop().await.expect("replica-b stops cleanly");
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_and_dropped_watches_are_survived() {
    bounded(Duration::from_secs(90), async {
        let bed = bed().await;
        let faults = bed.sim.faults();
        // Fail the first list of pods and several writes; drop watches while hooks run.
        faults.fail_next("list", "pods", 2);
        faults.fail_next("patch", "pods", 3);
        faults.fail_next("get", "pods", 2);
        faults.fail_next("*", "leases", 2);
        // The record of started hooks cannot be written for a while (more failures in a row than
        // the 5 refusals a write is allowed): the API server being unavailable delays the hooks,
        // it does not fail them (docs/behaviour.md §6.19). Six, not more: the write's jittered
        // backoff (200 ms doubling, up to as much again) after seven failures alone could reach
        // 45 s, past WAIT, and this test then failed on a busy machine.
        faults.fail_next("patch", "restorerecords/status", 6);
        let ctl = start(&bed, "a");
        for i in 0..5 {
            create(
                &bed,
                &format!("p{i}"),
                numbered(vec![
                    hook("a", "db", "echo a >> a.txt; sleep 0.2"),
                    hook("b", "app", "echo b >> b.txt"),
                ]),
                json!({}),
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
            let (label, st) = finished(&bed, &name).await;
            assert_eq!(label, "done", "{name}: {st:?}");
            assert_eq!(
                (file(&bed, &name, "a.txt"), file(&bed, &name, "b.txt")),
                ("a\n".to_string(), "b\n".to_string()),
                "{name}: each hook ran exactly once"
            );
        }
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// The `Running` record and the record of the start go out together (docs/behaviour.md §6.9):
/// when only the record's write lands, the `Running` record is written again on the pod, and the
/// exec starts once, as the same attempt (no retry counted, nothing ended `interrupted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_record_that_fails_beside_a_recorded_start_is_written_again() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        wait_for("the controller leads", async || ctl.is_leader()).await;
        let records_before = bed.sim.faults().requests("patch", "restorerecords/status");
        // The pod's first two writes (the `Running` record, then its first rewrite) fail.
        bed.sim.faults().fail_next("patch", "pods", 2);
        create(
            &bed,
            "p",
            numbered(vec![hook("a", "db", "echo a >> a.txt")]),
            json!({}),
        )
        .await;
        let (label, st) = finished(&bed, "p").await;
        assert_eq!(label, "done", "{st:?}");
        assert_eq!(file(&bed, "p", "a.txt"), "a\n", "the hook ran exactly once");
        assert_eq!(st.hooks[0].phase, HookPhase::Succeeded, "{st:?}");
        assert_eq!(
            st.hooks[0].retries, 0,
            "the same attempt, not a retry: {st:?}"
        );
        assert!(
            bed.sim.faults().requests("patch", "pods") >= 4,
            "the Running record was written three times, then the result"
        );
        assert!(
            bed.sim.faults().requests("patch", "restorerecords/status") > records_before,
            "the start was recorded"
        );
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_pods_with_two_hooks_each() {
    bounded(Duration::from_secs(300), async {
        let bed = bed().await;
        let mut args = bed.controller_args();
        args.max_concurrent_execs = 32;
        let ctl = bed.start_controller("a", args, None);
        wait_for("the controller leads", async || ctl.is_leader()).await;
        let started = std::time::Instant::now();
        let bed = Arc::new(bed);
        futures::stream::iter(0..200)
            .map(|i| {
                let bed = bed.clone();
                async move {
                    let p = bed.planned_pod(
                        NS,
                        &format!("load-{i}"),
                        numbered(vec![hook("a", "db", "echo a >> a.txt"), hook("b", "app", "echo b >> b.txt")]),
                        json!({}),
                    );
                    bed.create_pod(&p).await.map(|_| ())
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await
            .expect("pods created");
        let created = started.elapsed();
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        wait_until_done(&pods, 200, Duration::from_secs(240)).await;
        println!(
            "200 pods x 2 hooks: created in {created:?}, all hooks done in {:?} (from first create)",
            started.elapsed()
        );
        assert_eq!(ctl.hooks_reaching("succeeded", 400).await, 400);
        for i in 0..200 {
            let name = format!("load-{i}");
            assert_eq!(
                (file(&bed, &name, "a.txt"), file(&bed, &name, "b.txt")),
                ("a\n".to_string(), "b\n".to_string()),
                "{name}: each hook ran exactly once"
            );
        }
        ctl.stop().await.expect("controller stops cleanly");
        match Arc::try_unwrap(bed) {
            Ok(bed) => bed.stop().await,
            Err(_) => panic!("the testbed is still shared"),
        }
    })
    .await;
}

/// Waits until the Lease's holder has renewed it `n` times from now.
async fn lease_renewed(bed: &Testbed, n: usize) {
    let args = bed.controller_args();
    let leases: Api<Lease> = Api::namespaced(bed.client.clone(), &args.lease_namespace);
    let renewed = async || {
        let lease = leases.get(&args.lease_name).await.ok()?;
        lease.spec?.renew_time.map(|t| t.0)
    };
    let mut last = renewed().await;
    for i in 0..n {
        last = restore_hooks_testkit::eventually!(format!("renewal {i} of the Lease"), WAIT, {
            let now = renewed().await;
            (now.is_some() && now != last).then_some(now)
        });
    }
}

/// Waits until `n` pods are labelled `done`; after `limit`, fails listing the pods that are not.
async fn wait_until_done(pods: &Api<Pod>, n: usize, limit: Duration) {
    restore_hooks_testkit::eventually!(format!("{n} pods labelled done"), limit, {
        match pods.list(&ListParams::default()).await {
            Err(e) => Err(e.to_string()),
            Ok(list) => {
                let left: Vec<String> = list
                    .items
                    .iter()
                    .filter(|p| exec_label(p) != "done")
                    .map(|p| {
                        format!(
                            "{} label={:?} status={:?}",
                            p.metadata.name.as_deref().unwrap_or_default(),
                            exec_label(p),
                            exec_status(p).map(|s| phases(&s))
                        )
                    })
                    .collect();
                if list.items.len() == n && left.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "{} pods, {} not done:\n{}",
                        list.items.len(),
                        left.len(),
                        left.join("\n")
                    ))
                }
            }
        }
    })
}

/// Writes the controller Lease's holder (`null` releases it), renewed now, for 30 s: what another
/// replica taking it over would write.
async fn set_lease_holder(bed: &Testbed, holder: Value) {
    let leases: Api<Lease> =
        Api::namespaced(bed.client.clone(), &bed.controller_args().lease_namespace);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    leases
        .patch(
            "restore-hooks-controller",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"holderIdentity": holder, "renewTime": now, "leaseDurationSeconds": 30}}),
            ),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_stops_new_execs_until_it_is_held_again() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        wait_for("the controller leads", async || ctl.is_leader()).await;
        // Another holder takes the Lease (as after a network partition): renewals now fail.
        set_lease_holder(&bed, json!("intruder")).await;
        wait_for("the controller steps down", async || !ctl.is_leader()).await;
        create(&bed, "p", vec![hook("h", "db", "touch ran")], json!({})).await;
        // Two Lease reads by the controller since the pod exists (each answered with an error
        // the simulator injects and reports in its step log; the controller retries): it was
        // running and looking, and still nothing ran.
        let mut log = bed.sim.subscribe_log();
        for i in 0..2 {
            bed.sim.faults().fail_next("get", "leases", 1);
            restore_hooks_testkit::eventually!(
                format!("Lease read {i} by the controller"),
                WAIT,
                {
                    let mut read = false;
                    while let Ok(ev) = log.try_recv() {
                        read |= ev.kind == kube_sim::SimEventKind::Fault
                            && ev.message == "injected 500 for get leases";
                    }
                    read
                }
            );
        }
        assert!(!exists(&bed, "p", "ran"), "no exec without the Lease");
        assert_eq!(
            bed.status_of(NS, "p").await,
            None,
            "nothing recorded without the Lease"
        );
        // The intruder releases it: the controller takes it again and runs the hook.
        set_lease_holder(&bed, Value::Null).await;
        let (label, _) = finished(&bed, "p").await;
        assert_eq!(label, "done");
        assert!(exists(&bed, "p", "ran"));
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// A leader that stops leading while the record of a hook's start is still being written
/// (docs/behaviour.md §6.10) takes the hook's `Running` record back: the exec never started, so the
/// hook is `Pending` for the next leader (not `Failed` "not executed"), which runs it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_not_recorded_before_the_lease_is_lost_is_left_pending_for_the_next_leader() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        wait_for("the controller leads", async || ctl.is_leader()).await;
        // Every write of the record fails (500, retried): the hook's start waits for it.
        bed.sim
            .faults()
            .fail_next("patch", "restorerecords/status", 1_000_000);
        create(
            &bed,
            "p",
            vec![hook("h", "db", "echo ran >> ran")],
            json!({}),
        )
        .await;
        restore_hooks_testkit::eventually!("the hook recorded Running on the pod", WAIT, {
            bed.status_of(NS, "p")
                .await
                .is_some_and(|s| phases(&s) == [HookPhase::Running])
        });
        // Another holder takes the Lease: this leader stops before the start is recorded.
        set_lease_holder(&bed, json!("intruder")).await;
        wait_for("the controller steps down", async || !ctl.is_leader()).await;
        restore_hooks_testkit::eventually!("the Running record taken back", WAIT, {
            bed.status_of(NS, "p")
                .await
                .is_some_and(|s| phases(&s) == [HookPhase::Pending])
        });
        assert_eq!(label_of(&bed, "p").await.as_deref(), Some("pending"));
        assert!(!exists(&bed, "p", "ran"), "the exec never started");
        // The record can be written again, and the Lease is free: the hook runs, once.
        bed.sim.faults().clear_failures();
        set_lease_holder(&bed, Value::Null).await;
        let (label, status) = finished(&bed, "p").await;
        assert_eq!(label, "done", "{status:?}");
        assert_eq!(phases(&status), [HookPhase::Succeeded]);
        assert_eq!(file(&bed, "p", "ran").lines().count(), 1);
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_execs_bounds_parallel_execs() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let mut args = bed.controller_args();
        args.max_concurrent_execs = 1;
        let ctl = bed.start_controller("a", args, None);
        // Every hook of every pod (two containers each, which may otherwise run at once) appends
        // to one shared file: with one slot, starts and ends strictly alternate.
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("concurrency.log");
        let script = format!(
            "echo start >> {0}; sleep 0.2; echo end >> {0}",
            shared.display()
        );
        for i in 0..3 {
            create(
                &bed,
                &format!("c{i}"),
                numbered(vec![hook("a", "db", &script), hook("b", "app", &script)]),
                json!({}),
            )
            .await;
        }
        for i in 0..3 {
            assert_eq!(finished(&bed, &format!("c{i}")).await.0, "done");
        }
        let log = std::fs::read_to_string(&shared).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 12, "{log}");
        for pair in lines.chunks(2) {
            assert_eq!(pair, ["start", "end"], "execs overlapped: {log}");
        }
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// §6.6: an exec whose connection dies mid-run (the API server goes away) fails its hook as soon
/// as the stream breaks, not at its exec timeout (10 minutes here, far beyond the test's limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_exec_stream_fails_the_hook_when_it_breaks() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let ctl = start(&bed, "a");
        let mut long = hook("long", "db", "touch started; sleep 600");
        long.exec_timeout_ms = 600_000;
        create(
            &bed,
            "cut",
            numbered(vec![long, hook("after", "db", "touch after")]),
            json!({}),
        )
        .await;
        wait_for("hook long Running", async || {
            bed.status_of(NS, "cut")
                .await
                .is_some_and(|s| s.hooks[0].phase == R)
        })
        .await;
        wait_for("hook long's process started", async || {
            exists(&bed, "cut", "started")
        })
        .await;
        // A moment into the exec (as in the field: the connection dies 1-3 s in).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        bed.sim.faults().break_execs();
        let (label, st) = finished(&bed, "cut").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![F, OK], "{st:?}");
        assert!(
            st.hooks[0].message.contains("stream broke"),
            "a broken stream, not a timeout: {:?}",
            st.hooks[0].message
        );
        assert_eq!(st.hooks[0].exit_code, None);
        assert!(
            exists(&bed, "cut", "after"),
            "onError: Continue goes on to the next hook"
        );
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// `runOn: OnePod` (docs/behaviour.md §6.15): of three StatefulSet pods planning the same hook,
/// the lowest ordinal is chosen and waited for; deleted before it started, the next ordinal runs
/// the hook, once; the third records that another pod ran it and still ends `done`. The RestoreRun
/// names the pod that ran it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_pod_hook_runs_in_one_pod_and_passes_on_if_the_chosen_one_goes_first() {
    one_pod_hook_passes_on(false).await;
}

/// The same, when the chosen pod is deleted with no grace period left and the controller's write
/// that passes the hook on lands between the two steps of that delete: the write becomes the
/// deletion, seen by watches only as the DELETED event. The RestoreRun still completes
/// (docs/behaviour.md §8.3): the pod's last status is read from its deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_pod_hook_passes_on_when_the_write_that_says_so_deletes_the_chosen_pod() {
    one_pod_hook_passes_on(true).await;
}

async fn one_pod_hook_passes_on(write_deletes: bool) {
    use restore_hooks::hooks::plan::RunOn;
    use restore_hooks::hooks::types::RestoreRun;
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let migrate = || {
            let mut h = hook("migrate", "db", "echo migrated > migrated");
            h.run_on = RunOn::OnePod;
            h.wait_for_ready = true;
            h
        };
        let sts = |name: &str, extra: Value| {
            let mut v =
                json!({"metadata": {"labels": {"statefulset.kubernetes.io/pod-name": name}}});
            json_patch::merge(&mut v, &extra);
            v
        };
        // db-0 never becomes Ready: chosen (lowest ordinal), it holds the hook back.
        create(
            &bed,
            "db-0",
            vec![migrate()],
            sts(
                "db-0",
                json!({"metadata": {"annotations": {"sim.kube/never-ready": "true"}}}),
            ),
        )
        .await;
        create(&bed, "db-1", vec![migrate()], sts("db-1", json!({}))).await;
        create(&bed, "db-2", vec![migrate()], sts("db-2", json!({}))).await;
        // Every container is up before the controller starts, so the first status it writes
        // says what it decided: Pending (they wait for db-0), not Running.
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        for pod in ["db-1", "db-2"] {
            wait_for(&format!("{pod} Ready"), async || {
                pods.get(pod).await.is_ok_and(|p| {
                    let statuses = p
                        .status
                        .and_then(|s| s.container_statuses)
                        .unwrap_or_default();
                    statuses.len() == 2 && statuses.iter().all(|c| c.ready)
                })
            })
            .await;
        }
        let _c = start(&bed, "c1");
        for pod in ["db-1", "db-2"] {
            wait_for(&format!("{pod}'s Pending status"), async || {
                bed.status_of(NS, pod)
                    .await
                    .is_some_and(|s| phases(&s) == vec![P])
            })
            .await;
        }
        for pod in ["db-0", "db-1", "db-2"] {
            assert!(
                !exists(&bed, pod, "migrated"),
                "{pod} ran the hook while db-0 was chosen"
            );
        }

        let deleted = if write_deletes {
            // Any write to db-0 once its delete is held deletes it: the kubelet's and the
            // worker's writes so far must be done, so that the pass-on is the one.
            wait_for("db-0 Running, with its Pending status", async || {
                let running = pods
                    .get("db-0")
                    .await
                    .is_ok_and(|p| p.status.and_then(|s| s.phase).as_deref() == Some("Running"));
                running
                    && bed
                        .status_of(NS, "db-0")
                        .await
                        .is_some_and(|s| phases(&s) == vec![P])
            })
            .await;
            bed.sim.faults().hold_delete(NS, "db-0");
            let mut events = pods
                .watch(
                    &kube::api::WatchParams::default().fields("metadata.name=db-0"),
                    "0",
                )
                .await
                .expect("db-0 watched")
                .boxed();
            Some(tokio::spawn(async move {
                while let Some(event) = events.try_next().await.expect("watch event") {
                    if let kube::api::WatchEvent::Deleted(pod) = event {
                        return pod;
                    }
                }
                panic!("the watch of db-0 ended before it was deleted");
            }))
        } else {
            None
        };
        pods.delete("db-0", &Default::default())
            .await
            .expect("db-0 deleted");
        if let Some(deleted) = deleted {
            let pod = deleted.await.expect("db-0's deletion seen");
            assert_eq!(
                exec_label(&pod),
                "done",
                "the controller's write was the deletion"
            );
            let st = exec_status(&pod).expect("db-0's last status");
            assert_eq!(phases(&st), vec![HookPhase::OtherPod]);
        }
        let (label, st) = finished(&bed, "db-1").await;
        assert_eq!((label.as_str(), phases(&st)), ("done", vec![OK]));
        let (label, st) = finished(&bed, "db-2").await;
        assert_eq!(
            (label.as_str(), phases(&st)),
            ("done", vec![HookPhase::OtherPod])
        );
        assert_eq!(
            st.hooks[0].message,
            "runOn: OnePod: pod default/db-1 runs it for the restore"
        );
        let ran: Vec<&str> = ["db-1", "db-2"]
            .into_iter()
            .filter(|p| exists(&bed, p, "migrated"))
            .collect();
        assert_eq!(ran, ["db-1"], "exactly one pod ran it");

        let runs: Api<RestoreRun> = Api::all(bed.client.clone());
        wait_for("the RestoreRun to name the pod that ran it", async || {
            let Ok(Some(run)) = runs.get_opt(restore_hooks::testbed::RESTORE).await else {
                return false;
            };
            let status = run.status.unwrap_or_default();
            let named = status
                .one_pod
                .iter()
                .any(|r| r.pod == "db-1" && r.phase == "Succeeded" && r.hook == "migrate#0");
            let Ok(record) =
                restore_hooks::testbed::recorded(&bed.client, restore_hooks::testbed::RESTORE)
                    .await
            else {
                return false;
            };
            let recorded = record.values().filter(|e| !e.one_pod.is_empty()).count();
            // db-0 passed the hook on when it went: no failure of the restore.
            named && recorded == 1 && status.phase == "Completed"
        })
        .await;
    })
    .await;
}

/// `after` (docs/behaviour.md §6.16): the app pods' migration waits until the restore hook ended
/// well on every pod that plans it (db-0 and db-1), then runs; a hook waiting for one that failed
/// with `onError: Fail` is skipped, naming it; one that failed with `Continue` does not hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_with_after_waits_for_the_named_hooks_on_every_pod_that_plans_them() {
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let restore = |go: &str| {
            let mut h = hook(
                "db-restore",
                "db",
                &format!("{} && echo restored > restored", wait_file(go)),
            );
            h.on_error = OnError::Fail;
            h
        };
        let db0 = bed.pod_dir(NS, "db-0");
        let db1 = bed.pod_dir(NS, "db-1");
        let migrate = || {
            let mut h = hook(
                "migrate",
                "db",
                &format!(
                    "test -e {}/restored && test -e {}/restored && echo migrated > migrated",
                    db0.display(),
                    db1.display()
                ),
            );
            h.after = vec!["db-restore".into()];
            h
        };
        let after = |name: &str, awaited: &str| {
            let mut h = hook(name, "db", "echo ran > ran");
            h.after = vec![awaited.into()];
            h
        };
        let mut seed = hook("seed", "db", "exit 3");
        seed.on_error = OnError::Fail;
        create(&bed, "db-0", vec![restore("go")], json!({})).await;
        create(&bed, "db-1", vec![restore("go")], json!({})).await;
        create(&bed, "app-0", vec![migrate()], json!({})).await;
        create(&bed, "app-1", vec![migrate()], json!({})).await;
        create(&bed, "seed-0", vec![seed], json!({})).await;
        create(
            &bed,
            "warm-0",
            vec![hook("warm", "db", "exit 1")],
            json!({}),
        )
        .await;
        create(&bed, "app-2", vec![after("consume", "seed")], json!({})).await;
        create(&bed, "app-3", vec![after("use-cache", "warm")], json!({})).await;
        let _c = start(&bed, "c1");

        // db-0 finishes first; the app pods still wait for db-1's run.
        wait_for("db-0's restore hook running", async || {
            bed.status_of(NS, "db-0")
                .await
                .is_some_and(|s| phases(&s) == vec![R])
        })
        .await;
        touch(&bed, "db-0", "go");
        let (label, _) = finished(&bed, "db-0").await;
        assert_eq!(label, "done");
        for pod in ["app-0", "app-1"] {
            wait_for(&format!("{pod}'s Pending status"), async || {
                bed.status_of(NS, pod)
                    .await
                    .is_some_and(|s| phases(&s) == vec![P])
            })
            .await;
            assert!(!exists(&bed, pod, "migrated"), "{pod} ran before db-1");
        }
        touch(&bed, "db-1", "go");
        for pod in ["app-0", "app-1"] {
            let (label, st) = finished(&bed, pod).await;
            assert_eq!((label.as_str(), phases(&st)), ("done", vec![OK]), "{pod}");
            assert_eq!(file(&bed, pod, "migrated"), "migrated\n", "{pod}");
        }

        let (label, st) = finished(&bed, "app-2").await;
        assert_eq!((label.as_str(), phases(&st)), ("failed", vec![S]));
        assert_eq!(
            st.hooks[0].message,
            "after: hook seed failed in pod default/seed-0 (onError: Fail); not executed"
        );
        assert!(!exists(&bed, "app-2", "ran"));
        let (label, st) = finished(&bed, "app-3").await;
        assert_eq!((label.as_str(), phases(&st)), ("done", vec![OK]));
        assert!(exists(&bed, "app-3", "ran"));
    })
    .await;
}

/// `retry` (docs/behaviour.md §6.17): an exec the API server was unavailable for (a 5xx before its
/// stream opened) is tried again, each attempt recorded (status `retries` and `unavailable`, a
/// `HookRetrying` Event, the metric) and none counted against `attempts`; a started command is
/// tried again only for an exit code the hook lists; one that exited otherwise is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_are_retried_only_when_the_command_cannot_have_run_or_may_run_again() {
    use restore_hooks::hooks::plan::RetryPlan;
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let retried = |name: &str, script: &str, on_exit_codes: Vec<i32>| {
            let mut h = hook(name, "db", script);
            h.retry = Some(RetryPlan {
                attempts: 3,
                backoff_ms: 100,
                max_backoff_ms: 100,
                on_exit_codes,
                idempotent: false,
            });
            h
        };
        // The first four execs are answered 500 before their stream opens: more than the hook's
        // 3 attempts, none of which they use.
        bed.sim.faults().fail_next("create", "pods/exec", 4);
        create(
            &bed,
            "refused",
            vec![retried("warm", "echo run >> runs", vec![])],
            json!({}),
        )
        .await;
        let c = start(&bed, "c1");
        let (label, st) = finished(&bed, "refused").await;
        assert_eq!((label.as_str(), phases(&st)), ("done", vec![OK]));
        assert_eq!(
            (st.hooks[0].retries, st.hooks[0].unavailable),
            (4, 4),
            "four attempts the API server was unavailable for"
        );
        assert_eq!(
            file(&bed, "refused", "runs"),
            "run\n",
            "the command ran once"
        );
        wait_for("four HookRetrying events", async || {
            let evs = events(&bed, "refused").await;
            evs.iter().filter(|e| e.0 == "HookRetrying").count() >= 4
        })
        .await;
        let retrying: Vec<String> = events(&bed, "refused")
            .await
            .into_iter()
            .filter(|(reason, ..)| reason == "HookRetrying")
            .map(|(_, message, _)| message)
            .collect();
        assert_eq!(retrying.len(), 4, "{retrying:?}");
        assert!(
            retrying[0].contains(
                "attempt 1 could not start, the API server was unavailable (unavailable): exec could not start"
            ),
            "{retrying:?}"
        );
        assert_eq!(
            c.metrics
                .exec_retries
                .with_label_values(&["unavailable"])
                .get(),
            4
        );

        // Exit 75 is listed: run again, and the second run succeeds.
        let flaky = "echo run >> runs; [ $(wc -l < runs) -ge 2 ] || exit 75";
        create(
            &bed,
            "listed",
            vec![retried("migrate", flaky, vec![75])],
            json!({}),
        )
        .await;
        // Exit 1 is not: the command ran, it is not run again.
        create(
            &bed,
            "unlisted",
            vec![retried("migrate", "echo run >> runs; exit 1", vec![75])],
            json!({}),
        )
        .await;
        let (label, st) = finished(&bed, "listed").await;
        assert_eq!(
            (label.as_str(), phases(&st), st.hooks[0].retries),
            ("done", vec![OK], 1)
        );
        assert_eq!(file(&bed, "listed", "runs"), "run\nrun\n");
        let (label, st) = finished(&bed, "unlisted").await;
        assert_eq!(
            (label.as_str(), phases(&st), st.hooks[0].retries),
            ("failed", vec![F], 0)
        );
        assert_eq!(st.hooks[0].message, "command terminated with exit code 1");
        assert_eq!(file(&bed, "unlisted", "runs"), "run\n", "ran once");
        c.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// `retry` (docs/behaviour.md §6.17) after an exec stream that broke before an exit status: the
/// command may have run, so only a hook marked `idempotent` is run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_stream_is_retried_only_for_an_idempotent_hook() {
    use restore_hooks::hooks::plan::RetryPlan;
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        // The first attempt runs until the stream breaks, however slow the machine is (its exec
        // timeout cannot end it first); a second one ends at once.
        let slow = |idempotent: bool| {
            let mut h = hook(
                "reindex",
                "db",
                "echo run >> runs; [ \"$(wc -l < runs)\" -gt 1 ] || sleep 30",
            );
            h.exec_timeout_ms = 45_000;
            h.retry = Some(RetryPlan {
                attempts: 2,
                backoff_ms: 100,
                max_backoff_ms: 100,
                on_exit_codes: vec![],
                idempotent,
            });
            h
        };
        create(&bed, "idempotent", vec![slow(true)], json!({})).await;
        create(&bed, "once", vec![slow(false)], json!({})).await;
        let c = start(&bed, "c1");
        for pod in ["idempotent", "once"] {
            wait_for(&format!("{pod}'s first attempt running"), async || {
                file(&bed, pod, "runs") == "run\n"
            })
            .await;
        }
        bed.sim.faults().break_execs();
        let (label, st) = finished(&bed, "idempotent").await;
        assert_eq!(
            (label.as_str(), phases(&st), st.hooks[0].retries),
            ("done", vec![OK], 1)
        );
        assert_eq!(file(&bed, "idempotent", "runs"), "run\nrun\n", "run again");
        let (label, st) = finished(&bed, "once").await;
        assert_eq!(
            (label.as_str(), phases(&st), st.hooks[0].retries),
            ("failed", vec![F], 0)
        );
        assert!(
            st.hooks[0].message.contains("the exec stream broke"),
            "{}",
            st.hooks[0].message
        );
        assert_eq!(file(&bed, "once", "runs"), "run\n", "not run again");
        assert_eq!(
            c.metrics
                .exec_retries
                .with_label_values(&["stream_broke"])
                .get(),
            1
        );
        c.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// An image hook's `copyTargetEnv` and `env` (docs/behaviour.md §6.18): the controller reads the
/// target container's own env from the pod and puts it first in the ephemeral container, the
/// hook's own after it, so that the hook's win (the last definition of a name does); the command
/// sees both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_gets_the_targets_env_then_the_hooks() {
    use restore_hooks::hooks::plan::EphemeralPlan;
    use restore_hooks::hooks::types::HookEnvVar;
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let mut migrate = hook("migrate", "db", "echo \"$GREETING $MODE\" > seen");
        migrate.ephemeral = Some(EphemeralPlan {
            image: "busybox:1.36".into(),
            env: vec![HookEnvVar {
                name: "MODE".into(),
                value: Some("restore".into()),
                value_from: None,
            }],
            copy_target_env: true,
            ..Default::default()
        });
        let containers = json!({"spec": {"containers": [
            {"name": "app", "image": "shop:1", "env": [{"name": "GREETING", "value": "not the target's"}]},
            {"name": "db", "image": "postgres:16",
             "env": [{"name": "GREETING", "value": "hello"}, {"name": "MODE", "value": "app"}]},
        ]}});
        create(&bed, "p", vec![migrate], containers).await;
        let _c = start(&bed, "c1");
        let (label, st) = finished(&bed, "p").await;
        assert_eq!((label.as_str(), phases(&st)), ("done", vec![OK]));
        assert_eq!(file(&bed, "p", "seen"), "hello restore\n");
    })
    .await;
}

/// An image hook's env from a Secret (docs/behaviour.md §6.18) reaches its command; one that
/// reads a Secret that does not exist never starts (the kubelet waits for it), and the hook times
/// out saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_reads_a_secret_and_one_that_does_not_exist_is_reported() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::PostParams;
    use restore_hooks::hooks::plan::EphemeralPlan;
    use restore_hooks::hooks::types::{HookEnvVar, HookEnvVarSource, HookKeySelector};
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "db-creds", "namespace": NS},
            "data": {"password": "czNjcmV0"},
        }))
        .unwrap();
        Api::<Secret>::namespaced(bed.client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .expect("secret created");
        let reads = |secret: &str, script: &str| {
            let mut h = hook("migrate", "db", script);
            h.exec_timeout_ms = 2_000;
            h.ephemeral = Some(EphemeralPlan {
                image: "postgres:17".into(),
                env: vec![HookEnvVar {
                    name: "PGPASSWORD".into(),
                    value: None,
                    value_from: Some(HookEnvVarSource {
                        secret_key_ref: Some(HookKeySelector {
                            name: secret.into(),
                            key: "password".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                }],
                ..Default::default()
            });
            h
        };
        create(
            &bed,
            "ok",
            vec![reads("db-creds", "echo \"$PGPASSWORD\" > seen")],
            json!({}),
        )
        .await;
        create(
            &bed,
            "missing",
            vec![reads("db-gone", "echo ran > ran")],
            json!({}),
        )
        .await;
        let _c = start(&bed, "c1");
        let (label, st) = finished(&bed, "ok").await;
        assert_eq!((label.as_str(), phases(&st)), ("done", vec![OK]));
        assert_eq!(file(&bed, "ok", "seen"), "s3cret\n");
        let (label, st) = finished(&bed, "missing").await;
        assert_eq!((label.as_str(), phases(&st)), ("failed", vec![F]));
        assert_eq!(
            st.hooks[0].message,
            "timed out after 2s; ephemeral container restore-hooks-0-1 never started: \
             CreateContainerConfigError: secret \"db-gone\" not found"
        );
        assert!(!exists(&bed, "missing", "ran"));
    })
    .await;
}

/// An ephemeral-container hook (docs/behaviour.md §6.18): the command runs in a container of the
/// hook's image that the controller adds through `pods/ephemeralcontainers`, targeting the hook's
/// container; the exit code of that container is the hook's. Each pod gets exactly one such
/// container per attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_hook_runs_in_a_container_of_its_image() {
    use restore_hooks::hooks::plan::EphemeralPlan;
    bounded(Duration::from_secs(60), async {
        let bed = bed().await;
        let debug = |script: &str| {
            let mut h = hook("distroless", "db", script);
            h.ephemeral = Some(EphemeralPlan {
                image: "busybox:1.36".into(),
                ..Default::default()
            });
            h
        };
        create(&bed, "ok", vec![debug("echo ran > ran")], json!({})).await;
        create(&bed, "bad", vec![debug("exit 3")], json!({})).await;
        let _c = start(&bed, "c1");
        let (label, st) = finished(&bed, "ok").await;
        assert_eq!((label.as_str(), phases(&st)), ("done", vec![OK]));
        assert_eq!(st.hooks[0].exit_code, Some(0));
        assert!(exists(&bed, "ok", "ran"));
        let (label, st) = finished(&bed, "bad").await;
        assert_eq!((label.as_str(), phases(&st)), ("failed", vec![F]));
        assert_eq!(st.hooks[0].message, "command terminated with exit code 3");

        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        let pod = pods.get("ok").await.unwrap();
        let added: Vec<(String, Option<String>, Option<String>)> = pod
            .spec
            .unwrap()
            .ephemeral_containers
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name, c.image, c.target_container_name))
            .collect();
        assert_eq!(
            added,
            [(
                "restore-hooks-0-1".to_string(),
                Some("busybox:1.36".to_string()),
                Some("db".to_string())
            )]
        );
    })
    .await;
}
