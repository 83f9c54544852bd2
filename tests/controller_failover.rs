//! Failover without overlapping hooks (docs/behaviour.md §6.10), on the shared testbed.
//!
//! Two controllers; the leader is taken out of the way while a hook of a container runs: either it
//! loses the Lease (its exec goes on and it records the result itself), or it is killed while its
//! exec goes on in the simulated container (as in a real one: the exec API cannot stop a process).
//! The new leader must not start that container's next hook before the running one is over:
//! before its result is recorded, or, when nobody records one, before `startedAt + execTimeout +
//! --inherited-exec-grace`; then it records the hook interrupted and never runs it again.
//!
//! The assertions compare the times the hooks' processes recorded in the pod's directory (their
//! own start and end, `date +%s.%N`) with each other and with the recorded status, all on the
//! same clock: no assertion depends on how fast anything runs.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams};
use restore_hooks::cli::ControllerArgs;
use restore_hooks::controller::exec_step::INTERRUPTED;
use restore_hooks::hooks::plan::{ExecStatus, HookPhase, PlannedHook};
use restore_hooks::hooks::types::RestoreRecord;
use restore_hooks::testbed::{ControllerHandle, Testbed, TestbedOptions, bounded, sh_hook};
use serde_json::json;

const NS: &str = "default";
/// Failure guard for waits (never a measurement).
const WAIT: Duration = Duration::from_secs(45);

/// Polls `check` until it holds; panics naming `what` after `limit`.
async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    restore_hooks_testkit::eventually!(what, limit, check().await)
}

/// Hook `name` in container db: records its process' start (and, if `body` returns, its end)
/// in `<name>.start` / `<name>.end` in the pod's directory.
fn recorded_hook(name: &str, body: &str, exec_timeout_ms: u64) -> PlannedHook {
    let mut h = sh_hook(
        name,
        "db",
        &format!(
            "date +%s.%N >> {name}.start; {body}; date +%s.%N >> {name}.end; echo {name}-done"
        ),
    );
    h.exec_timeout_ms = exec_timeout_ms;
    h
}

/// The times (seconds since the epoch) a hook's process wrote to `<hook>.<what>`.
fn records(bed: &Testbed, pod: &str, hook: &str, what: &str) -> Vec<f64> {
    std::fs::read_to_string(bed.pod_dir(NS, pod).join(format!("{hook}.{what}")))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{hook}.{what}: not a time: {l:?}"))
        })
        .collect()
}

/// The one time a hook recorded; fails if it recorded none or several (it ran more than once).
fn once(bed: &Testbed, pod: &str, hook: &str, what: &str) -> f64 {
    let r = records(bed, pod, hook, what);
    assert_eq!(
        r.len(),
        1,
        "{hook}.{what}: want exactly one record (one run), got {r:?}"
    );
    r[0]
}

fn secs(t: Timestamp) -> f64 {
    t.as_nanosecond() as f64 / 1e9
}

fn time_of(field: &Option<String>, what: &str) -> Timestamp {
    field
        .as_deref()
        .unwrap_or_else(|| panic!("no {what}"))
        .parse()
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

async fn finished(bed: &Testbed, pod: &str, why: &str) -> (String, ExecStatus) {
    let (label, status) = tokio::time::timeout(WAIT, bed.finished(NS, pod))
        .await
        .unwrap_or_else(|_| panic!("pod {pod} not finished within {WAIT:?}: {why}"));
    (label, status.expect("a finished pod has a status"))
}

fn phases(s: &ExecStatus) -> Vec<HookPhase> {
    s.hooks.iter().map(|h| h.phase).collect()
}

async fn running(bed: &Testbed, pod: &str, hook: &str) {
    wait_for(
        &format!("{hook} Running and its process started"),
        WAIT,
        async || {
            bed.status_of(NS, pod)
                .await
                .is_some_and(|s| s.hooks[0].phase == HookPhase::Running)
                && !records(bed, pod, hook, "start").is_empty()
        },
    )
    .await;
}

/// A testbed whose first controller, `replica-a`, leads; with the arguments for more replicas.
async fn led_by_replica_a() -> (Testbed, ControllerArgs, ControllerHandle) {
    let bed = Testbed::start(TestbedOptions::default())
        .await
        .expect("testbed starts");
    let args = bed.controller_args();
    let a = bed.start_controller("replica-a", args.clone(), None);
    wait_for("replica-a leads", WAIT, async || a.is_leader()).await;
    (bed, args, a)
}

/// The old leader loses the Lease while its hook runs (as when its renewals failed for a whole
/// lease duration and the other replica took over). Its exec goes on and it records the result;
/// the new leader starts the container's next hook only after that, and the hook that succeeded
/// is recorded Succeeded, not Failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_result_is_kept_and_the_next_hook_waits_for_it() {
    restore_hooks::testbed::log_from_env();
    bounded(Duration::from_secs(90), async {
        let (bed, args, a) = led_by_replica_a().await;
        let b = bed.start_controller("replica-b", args.clone(), None);

        // h1 runs until the test releases it (its exec timeout is far beyond the test's limit, so
        // only a recorded result can let h2 start).
        let release =
            "i=0; until [ -e release ] || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done";
        let mut hooks = vec![
            recorded_hook("h1", release, 600_000),
            recorded_hook("h2", "true", 30_000),
        ];
        hooks[1].index = 1;
        bed.create_pod(&bed.planned_pod(NS, "p", hooks, json!({})))
            .await
            .unwrap();
        running(&bed, "p", "h1").await;

        let leases: Api<Lease> = Api::namespaced(bed.client.clone(), &args.lease_namespace);
        leases
            .patch(
                &args.lease_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {
                    "holderIdentity": "replica-b",
                    "renewTime": MicroTime(Timestamp::now()),
                    "leaseDurationSeconds": 2,
                }})),
            )
            .await
            .expect("Lease handed to replica-b");
        wait_for(
            "replica-b leads and replica-a stepped down",
            WAIT,
            async || b.is_leader() && !a.is_leader(),
        )
        .await;
        // Both replicas now know the pod; neither may start h2 while h1 runs.
        wait_for("replica-b tracks the pod", WAIT, async || {
            b.metrics.pending_pods.get() == 1
        })
        .await;
        assert!(
            records(&bed, "p", "h2", "start").is_empty(),
            "h2 started while h1 ran"
        );

        std::fs::write(bed.pod_dir(NS, "p").join("release"), b"").unwrap();
        let (label, st) = finished(&bed, "p", "h1's result recorded and h2 run").await;
        assert_eq!(label, "done", "{st:?}");
        assert_eq!(
            phases(&st),
            vec![HookPhase::Succeeded, HookPhase::Succeeded]
        );
        assert_eq!(
            st.hooks[0].stdout, "h1-done\n",
            "h1's result is the old leader's, recorded"
        );
        let h1_end = once(&bed, "p", "h1", "end");
        let h2_start = once(&bed, "p", "h2", "start");
        assert!(
            h2_start >= h1_end,
            "h2 started at {h2_start} before h1 ended at {h1_end}"
        );
        once(&bed, "p", "h1", "start");
        // Who did what: the deposed leader recorded h1, the new one ran h2 and failed nothing.
        assert_eq!(
            (a.hooks_reaching("succeeded", 1).await, a.hooks("failed")),
            (1, 0),
            "replica-a"
        );
        assert_eq!(
            (b.hooks_reaching("succeeded", 1).await, b.hooks("failed")),
            (1, 0),
            "replica-b"
        );
        a.stop().await.expect("replica-a stops cleanly");
        b.stop().await.expect("replica-b stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// The leader is killed while its hook runs, and the hook's process goes on in the container.
/// Nobody records its result: the new leader treats it as in flight until `startedAt +
/// execTimeout + grace`, starts the container's next hook only after that, records it
/// interrupted, and never runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leaders_hook_is_interrupted_only_after_its_deadline() {
    restore_hooks::testbed::log_from_env();
    bounded(Duration::from_secs(90), async {
        let bed = Testbed::start(TestbedOptions::default()).await.expect("testbed starts");
        bed.sim.faults().set_orphaned_execs_survive(true);
        let args = bed.controller_args();
        let grace = SignedDuration::try_from(args.inherited_exec_grace).unwrap();
        let a = bed.start_controller("replica-a", args.clone(), None);
        wait_for("replica-a leads", WAIT, async || a.is_leader()).await;

        // h1 runs 2 s of its 5 s exec timeout: it ends well before the deadline.
        let mut hooks = vec![recorded_hook("h1", "sleep 2", 5_000), recorded_hook("h2", "true", 30_000)];
        hooks[1].index = 1;
        bed.create_pod(&bed.planned_pod(NS, "p", hooks, json!({}))).await.unwrap();
        running(&bed, "p", "h1").await;
        a.kill();
        let b = bed.start_controller("replica-b", args.clone(), None);

        let (label, st) = finished(&bed, "p", "replica-b declares h1 interrupted and runs h2").await;
        assert_eq!(label, "failed");
        assert_eq!(phases(&st), vec![HookPhase::Failed, HookPhase::Succeeded], "{st:?}");
        assert_eq!(st.hooks[0].message, INTERRUPTED);
        assert_eq!(st.hooks[0].exit_code, None);
        let started = time_of(&st.hooks[0].started_at, "h1 startedAt");
        let deadline = started + SignedDuration::from_secs(5) + grace;
        let interrupted_at = time_of(&st.hooks[0].finished_at, "h1 finishedAt");
        assert!(interrupted_at >= deadline, "h1 recorded interrupted at {interrupted_at}, before {deadline}");

        let h1_end = once(&bed, "p", "h1", "end");
        let h2_start = once(&bed, "p", "h2", "start");
        assert!(h2_start >= h1_end, "h2 started at {h2_start} while h1 (ended {h1_end}) still ran");
        assert!(
            h2_start >= secs(deadline),
            "h2 started at {h2_start}, before h1's in-flight deadline {deadline} (startedAt + 5s + grace)"
        );
        once(&bed, "p", "h1", "start"); // never run again
        assert_eq!(
            (
                b.hooks_reaching("failed", 1).await,
                b.hooks_reaching("succeeded", 1).await,
            ),
            (1, 1),
            "replica-b reports h1 interrupted and h2 succeeded: {st:?}"
        );
        b.stop().await.expect("replica-b stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// §6.10: the in-flight deadline of an inherited hook uses the exec timeout as capped by
/// `--max-exec-timeout` (the exec cannot have run longer), not the plan's longer value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inherited_deadline_uses_the_capped_exec_timeout() {
    restore_hooks::testbed::log_from_env();
    bounded(Duration::from_secs(90), async {
        let mut options = TestbedOptions::default();
        options.engine.max_exec_timeout_ms = 3_000;
        let bed = Testbed::start(options).await.expect("testbed starts");
        bed.sim.faults().set_orphaned_execs_survive(true);
        let args = bed.controller_args();
        let grace = SignedDuration::try_from(args.inherited_exec_grace).unwrap();
        let a = bed.start_controller("replica-a", args.clone(), None);
        wait_for("replica-a leads", WAIT, async || a.is_leader()).await;

        // The plan says 10 minutes; the cap is 3 s.
        let mut hooks = vec![
            recorded_hook("h1", "sleep 1", 600_000),
            recorded_hook("h2", "true", 30_000),
        ];
        hooks[1].index = 1;
        bed.create_pod(&bed.planned_pod(NS, "p", hooks, json!({})))
            .await
            .unwrap();
        running(&bed, "p", "h1").await;
        a.kill();
        let b = bed.start_controller("replica-b", args.clone(), None);

        let (label, st) = finished(
            &bed,
            "p",
            "h1 must count as in flight until startedAt + 3s (the cap) + grace, not the plan's 10m",
        )
        .await;
        assert_eq!(label, "failed");
        assert_eq!(
            phases(&st),
            vec![HookPhase::Failed, HookPhase::Succeeded],
            "{st:?}"
        );
        assert_eq!(st.hooks[0].message, INTERRUPTED);
        let started = time_of(&st.hooks[0].started_at, "h1 startedAt");
        let capped_deadline = started + SignedDuration::from_secs(3) + grace;
        let h2_start = once(&bed, "p", "h2", "start");
        assert!(
            h2_start >= secs(capped_deadline),
            "h2 started at {h2_start}, before {capped_deadline}"
        );
        assert!(h2_start >= once(&bed, "p", "h1", "end"), "h2 overlapped h1");
        b.stop().await.expect("replica-b stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// §6.15 across a leader change: replica-a starts a `runOn: OnePod` hook in db-0 and is killed,
/// and db-0 is deleted; then db-1 of the same restore is created. replica-b reads the record
/// first: db-0 started the hook, so db-1, the only candidate, records it `OtherPod` and never
/// runs it. Without the record, db-1 would be chosen and the hook would run twice in one restore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_pod_hook_a_killed_leader_started_never_starts_in_another_pod() {
    use k8s_openapi::api::core::v1::Pod;
    use restore_hooks::hooks::plan::RunOn;
    restore_hooks::testbed::log_from_env();
    bounded(Duration::from_secs(90), async {
        let (bed, args, a) = led_by_replica_a().await;
        let migrate = || {
            let mut h = recorded_hook("migrate", "sleep 30", 60_000);
            h.run_on = RunOn::OnePod;
            vec![h]
        };
        let labels =
            |name: &str| json!({"metadata": {"labels": {"statefulset.kubernetes.io/pod-name": name}}});
        bed.create_pod(&bed.planned_pod(NS, "db-0", migrate(), labels("db-0")))
            .await
            .unwrap();
        running(&bed, "db-0", "migrate").await;
        a.kill();
        let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
        pods.delete("db-0", &Default::default())
            .await
            .expect("db-0 deleted");
        wait_for("db-0 gone", WAIT, async || {
            matches!(pods.get_opt("db-0").await, Ok(None))
        })
        .await;
        // A pod of the same restore that replica-a never saw: only the record can tell
        // replica-b that the hook started.
        bed.create_pod(&bed.planned_pod(NS, "db-1", migrate(), labels("db-1")))
            .await
            .unwrap();

        let _b = bed.start_controller("replica-b", args.clone(), None);
        let (label, st) = finished(&bed, "db-1", "replica-b settles db-1's OnePod hook").await;
        assert_eq!(
            (label.as_str(), phases(&st)),
            ("done", vec![HookPhase::OtherPod]),
            "{st:?}"
        );
        assert_eq!(
            st.hooks[0].message,
            "runOn: OnePod: pod default/db-0 runs it for the restore"
        );
        assert!(
            records(&bed, "db-1", "migrate", "start").is_empty(),
            "db-1 never ran it"
        );
        bed.stop().await;
    })
    .await;
}

/// §6.17 across a leader change: replica-a's attempt 1 exits with a code the hook retries, is
/// released in the record, and replica-a is killed before attempt 2; replica-b runs attempt 2,
/// once. Another hook's attempt is in flight when replica-a dies: the record shows it started and
/// not released, so replica-b records it interrupted and never runs it again, although the hook
/// is marked idempotent (the process may still run: §6.10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_a_killed_leader_released_runs_once_under_the_next_and_an_unreleased_one_never() {
    use restore_hooks::hooks::plan::RetryPlan;
    restore_hooks::testbed::log_from_env();
    bounded(Duration::from_secs(90), async {
        let (bed, args, a) = led_by_replica_a().await;
        let retry = |idempotent: bool| RetryPlan {
            attempts: 3,
            backoff_ms: 4_000,
            max_backoff_ms: 4_000,
            on_exit_codes: vec![75],
            idempotent,
        };
        let mut flaky = recorded_hook(
            "flaky",
            "[ $(wc -l < flaky.start) -ge 2 ] || exit 75",
            10_000,
        );
        flaky.retry = Some(retry(false));
        let mut slow = recorded_hook("slow", "sleep 30", 3_000);
        slow.retry = Some(retry(true));
        bed.create_pod(&bed.planned_pod(NS, "p", vec![flaky], json!({})))
            .await
            .unwrap();
        bed.create_pod(&bed.planned_pod(NS, "q", vec![slow], json!({})))
            .await
            .unwrap();
        running(&bed, "q", "slow").await;
        // p's first attempt failed and its release reached the RestoreRun.
        wait_for("attempt 1 of p released in the record", WAIT, async || {
            let record =
                restore_hooks::testbed::recorded(&bed.client, restore_hooks::testbed::RESTORE);
            record.await.is_ok_and(|r| {
                r.values()
                    .any(|e| e.attempts.get("0").is_some_and(|t| t.released == 1))
            })
        })
        .await;
        a.kill();

        let _b = bed.start_controller("replica-b", args.clone(), None);
        let (label, st) = finished(&bed, "p", "replica-b runs attempt 2").await;
        assert_eq!(
            (label.as_str(), phases(&st)),
            ("done", vec![HookPhase::Succeeded])
        );
        assert_eq!(st.hooks[0].retries, 1);
        assert_eq!(
            records(&bed, "p", "flaky", "start").len(),
            2,
            "two attempts in all"
        );
        let (label, st) = finished(&bed, "q", "replica-b settles the attempt in flight").await;
        assert_eq!(
            (label.as_str(), phases(&st)),
            ("failed", vec![HookPhase::Failed])
        );
        assert_eq!(st.hooks[0].message, INTERRUPTED);
        // Exactly one run: never run again.
        once(&bed, "q", "slow", "start");
        bed.stop().await;
    })
    .await;
}

/// The pod's only hook is claimed (docs/behaviour.md §6.9): recorded `Running` on the pod and
/// started in the controller's record while it waits for an exec slot, its process not started.
async fn claimed(bed: &Testbed, pod: &str, hook: &str) {
    let uid = Api::<Pod>::namespaced(bed.client.clone(), NS)
        .get(pod)
        .await
        .expect("the pod")
        .metadata
        .uid
        .expect("a uid");
    let records_api = Api::<RestoreRecord>::all(bed.client.clone());
    wait_for(
        &format!("{hook} of {pod} claimed (Running, in the record, not started)"),
        WAIT,
        async || {
            let in_record = records_api.list(&Default::default()).await.is_ok_and(|l| {
                l.items.iter().any(|r| {
                    r.status
                        .as_ref()
                        .and_then(|s| s.executions.get(&uid))
                        .is_some_and(|e| e.hooks.contains_key("0"))
                })
            });
            bed.status_of(NS, pod)
                .await
                .is_some_and(|s| s.hooks[0].phase == HookPhase::Running)
                && in_record
                && records(bed, pod, hook, "start").is_empty()
        },
    )
    .await;
}

/// Hook `h` that holds its exec slot until the test writes `release` in its pod's directory (at
/// most 20 s), so which hooks hold slots is decided by the test, not by timing.
fn holding_hook(exec_timeout_ms: u64) -> PlannedHook {
    recorded_hook(
        "h",
        "i=0; until [ -e release ] || [ $i -ge 400 ]; do sleep 0.05; i=$((i+1)); done",
        exec_timeout_ms,
    )
}

fn release(bed: &Testbed, pod: &str) {
    std::fs::write(bed.pod_dir(NS, pod).join("release"), "").expect("release written");
}

/// `replica-a` leads with one exec slot, so one claim ticket: `hold`'s hook (exec timeout
/// `hold_ms`) holds the slot until released, `c1`'s hook is claimed and `c2`'s waits unclaimed
/// (both `true`, exec timeout `hook_ms`).
async fn one_claim_outstanding(
    bed: &Testbed,
    hold_ms: u64,
    hook_ms: u64,
) -> (ControllerArgs, ControllerHandle) {
    let mut args = bed.controller_args();
    args.max_concurrent_execs = 1;
    let a = bed.start_controller("replica-a", args.clone(), None);
    wait_for("replica-a leads", WAIT, async || a.is_leader()).await;
    bed.create_pod(&bed.planned_pod(NS, "hold", vec![holding_hook(hold_ms)], json!({})))
        .await
        .unwrap();
    running(bed, "hold", "h").await;
    for pod in ["c1", "c2"] {
        bed.create_pod(&bed.planned_pod(
            NS,
            pod,
            vec![recorded_hook("h", "true", hook_ms)],
            json!({}),
        ))
        .await
        .unwrap();
    }
    claimed(bed, "c1", "h").await;
    (args, a)
}

/// One exec slot, so one claim ticket: `hold` holds the slot while `c1`'s hook is claimed and
/// `c2`'s waits unclaimed; then the leader shuts down (SIGTERM). It gives its claim back on the
/// pod while its running hook still runs, before it lets go of the Lease: the next leader runs
/// every hook exactly once and none ends interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_outstanding_at_a_graceful_leader_change_is_given_back_and_runs_once() {
    restore_hooks::testbed::log_from_env();
    bounded(Duration::from_secs(90), async {
        let bed = Testbed::start(TestbedOptions::default())
            .await
            .expect("testbed starts");
        let (args, a) = one_claim_outstanding(&bed, 30_000, 10_000).await;
        let b = bed.start_controller("replica-b", args.clone(), None);
        let given_back = a.metrics.exec_claims_given_back.clone();
        let stopping = tokio::spawn(a.stop());
        wait_for("replica-a gave c1's claim back", WAIT, async || {
            bed.status_of(NS, "c1")
                .await
                .is_some_and(|s| s.hooks[0].phase == HookPhase::Pending && s.hooks[0].retries == 1)
        })
        .await;
        release(&bed, "hold");
        stopping.await.unwrap().expect("replica-a stops cleanly");
        assert_eq!(
            given_back.get(),
            1,
            "replica-a counted the claim it gave back"
        );

        for pod in ["hold", "c1", "c2"] {
            let (label, st) = finished(&bed, pod, "every hook runs under one of the two").await;
            assert_eq!(label, "done", "{pod}: {st:?}");
            assert_ne!(st.hooks[0].message, INTERRUPTED, "{pod}");
            once(&bed, pod, "h", "start");
        }
        let (_, c1) = finished(&bed, "c1", "").await;
        assert_eq!(
            (c1.hooks[0].retries, c1.hooks[0].unavailable),
            (1, 1),
            "the claim given back is an attempt that did not start, not one that failed: {c1:?}"
        );
        b.stop().await.expect("replica-b stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// The same, but the leader is killed: its claim cannot be given back. The next leader ends the
/// claimed hook `interrupted` (it cannot know the exec never began) — its process never ran —
/// and runs the unclaimed one once; the interrupted hooks are at most the slots plus the claims
/// (two here): the one that ran and the one claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_outstanding_when_a_leader_is_killed_end_interrupted_never_run_twice() {
    restore_hooks::testbed::log_from_env();
    bounded(Duration::from_secs(90), async {
        let bed = Testbed::start(TestbedOptions::default())
            .await
            .expect("testbed starts");
        bed.sim.faults().set_orphaned_execs_survive(true);
        let (args, a) = one_claim_outstanding(&bed, 3_000, 3_000).await;
        a.kill();
        let b = bed.start_controller("replica-b", args.clone(), None);

        let mut interrupted = Vec::new();
        for pod in ["hold", "c1", "c2"] {
            let (_, st) = finished(&bed, pod, "replica-b ends or runs every hook").await;
            if st.hooks[0].message == INTERRUPTED {
                interrupted.push(pod);
            }
        }
        release(&bed, "hold");
        assert_eq!(
            interrupted,
            ["hold", "c1"],
            "the running hook and the claimed one"
        );
        assert!(interrupted.len() <= 2 * args.max_concurrent_execs);
        assert_eq!(
            b.metrics.exec_interrupted.get(),
            2,
            "replica-b reports both"
        );
        once(&bed, "hold", "h", "start");
        assert!(
            records(&bed, "c1", "h", "start").is_empty(),
            "the claimed hook never ran"
        );
        let (label, _) = finished(&bed, "c2", "").await;
        assert_eq!(label, "done");
        once(&bed, "c2", "h", "start");
        b.stop().await.expect("replica-b stops cleanly");
        bed.stop().await;
    })
    .await;
}
