//! Exec slots (docs/behaviour.md §6.11) on the shared testbed: `--max-concurrent-execs` is shared
//! fairly across namespaces, a pod's first hook goes ahead of other pods' later hooks, and a hook
//! that cannot get a slot within its waitTimeout fails at its deadline instead of waiting forever.
//!
//! The long hooks of namespace A run until the test releases them (a file in their pod's
//! directory), so which hooks hold slots at any moment is decided by the test, not by timing.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use restore_hooks::hooks::plan::{ExecStatus, HookPhase, PlannedHook};
use restore_hooks::testbed::{ControllerHandle, Testbed, TestbedOptions, bounded, sh_hook};
use serde_json::json;

const A: &str = "restore-a";
const B: &str = "restore-b";
const C: &str = "restore-c";
/// Failure guard for waits (never a measurement).
const WAIT: Duration = Duration::from_secs(45);

/// Polls `check` until it holds; panics naming `what` after [`WAIT`].
async fn wait_for(what: &str, mut check: impl AsyncFnMut() -> bool) {
    restore_hooks_testkit::eventually!(what, WAIT, check().await)
}

async fn bed() -> Testbed {
    restore_hooks::testbed::log_from_env();
    let bed = Testbed::start(TestbedOptions::default())
        .await
        .expect("testbed starts");
    for ns in [A, B, C] {
        bed.create_namespace(ns, json!({}))
            .await
            .expect("namespace created");
    }
    bed
}

/// `total` slots in all; `per_namespace` of them for one namespace.
fn controller(bed: &Testbed, total: usize, per_namespace: Option<usize>) -> ControllerHandle {
    let mut args = bed.controller_args();
    args.max_concurrent_execs = total;
    args.max_concurrent_execs_per_namespace = per_namespace;
    bed.start_controller("slots", args, None)
}

/// Holds its slot until the test writes `release` in the pod's directory (at most 60 s).
fn long_hook() -> PlannedHook {
    sh_hook(
        "hold",
        "db",
        "touch started; i=0; until [ -e release ] || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done; [ -e release ]",
    )
}

fn started(bed: &Testbed, ns: &str, pod: &str) -> bool {
    bed.pod_dir(ns, pod).join("started").exists()
}

fn release(bed: &Testbed, ns: &str, pod: &str) {
    std::fs::write(bed.pod_dir(ns, pod).join("release"), b"").expect("release written");
}

async fn finished(bed: &Testbed, ns: &str, pod: &str) -> (String, ExecStatus) {
    let (label, status) = tokio::time::timeout(WAIT, bed.finished(ns, pod))
        .await
        .unwrap_or_else(|_| panic!("{ns}/{pod} not finished within {WAIT:?}"));
    (label, status.expect("a finished pod has a status"))
}

/// With the default share (3/4 of 2 slots: 1), namespace A's two long hooks get one slot between
/// them; namespace B's hook gets the other and runs while A's first still holds its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_namespace_cannot_take_every_slot() {
    bounded(Duration::from_secs(90), async {
        let bed = bed().await;
        let ctl = controller(&bed, 2, None);
        for pod in ["a1", "a2"] {
            bed.create_pod(&bed.planned_pod(A, pod, vec![long_hook()], json!({})))
                .await
                .unwrap();
        }
        wait_for("one of A's hooks started", async || {
            started(&bed, A, "a1") || started(&bed, A, "a2")
        })
        .await;
        let (first, second) = if started(&bed, A, "a1") {
            ("a1", "a2")
        } else {
            ("a2", "a1")
        };

        let mut b = sh_hook("quick", "db", "touch ran");
        b.wait_timeout_ms = Some(30_000);
        bed.create_pod(&bed.planned_pod(B, "b1", vec![b], json!({})))
            .await
            .unwrap();
        let (label, st) = finished(&bed, B, "b1").await;
        assert_eq!(
            label, "done",
            "B's hook ran although A's hooks wait for slots: {st:?}"
        );
        assert!(bed.pod_dir(B, "b1").join("ran").exists());

        // B's slot came back before its result was recorded (above); A may not take it either.
        assert_eq!(
            ctl.metrics.exec_slots_in_use.get(),
            1,
            "only A's first hook holds a slot"
        );
        assert!(
            !started(&bed, A, second),
            "A's second hook started beyond A's share of 1"
        );
        // Waiting, or claimed while it waits (recorded Running, not started: §6.9).
        let waiting = bed.status_of(A, second).await;
        assert!(
            waiting.as_ref().is_none_or(|s| matches!(
                s.hooks[0].phase,
                HookPhase::Pending | HookPhase::Running
            )),
            "A's second hook waits for a slot: {waiting:?}"
        );

        release(&bed, A, first);
        wait_for(
            "A's second hook started once A's first freed its slot",
            async || started(&bed, A, second),
        )
        .await;
        release(&bed, A, second);
        for pod in ["a1", "a2"] {
            let (label, st) = finished(&bed, A, pod).await;
            assert_eq!(label, "done", "{pod}: {st:?}");
        }
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// With one slot (no reserve), A's long hook holds it. B's hook cannot get one: it fails with
/// "no exec slot within waitTimeout" at its deadline (pod creation + waitTimeout), is recorded,
/// and never runs; then A's hook finishes normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_gets_no_slot_fails_at_its_wait_deadline() {
    bounded(Duration::from_secs(90), async {
        let bed = bed().await;
        let ctl = controller(&bed, 1, None);
        bed.create_pod(&bed.planned_pod(A, "a1", vec![long_hook()], json!({})))
            .await
            .unwrap();
        wait_for("A's hook started", async || started(&bed, A, "a1")).await;
        assert_eq!(ctl.metrics.exec_slots_in_use.get(), 1);

        // Long enough for B's container to be up well before it: the wait is for a slot only.
        let mut starved = sh_hook("starved", "db", "touch ran");
        starved.wait_timeout_ms = Some(8_000);
        let created = bed
            .create_pod(&bed.planned_pod(B, "b1", vec![starved], json!({})))
            .await
            .unwrap();
        let (label, st) = finished(&bed, B, "b1").await;
        assert_eq!(label, "failed");
        let h = &st.hooks[0];
        assert_eq!(h.phase, HookPhase::Failed);
        assert!(
            h.message
                .starts_with("no exec slot within waitTimeout 8s of pod creation"),
            "{:?}",
            h.message
        );
        // It may have been claimed (recorded Running while it waited, §6.9) and given back at
        // its deadline: its final status shows no start, and it never ran.
        assert!(h.started_at.is_none(), "no start in its final status");
        assert!(!bed.pod_dir(B, "b1").join("ran").exists(), "never executed");
        let created: Timestamp = created
            .metadata
            .creation_timestamp
            .expect("creationTimestamp")
            .0;
        let failed_at: Timestamp = h
            .finished_at
            .as_deref()
            .expect("finishedAt")
            .parse()
            .unwrap();
        assert!(
            failed_at >= created + SignedDuration::from_secs(8),
            "failed at {failed_at}, before its deadline (created {created} + 8s)"
        );

        release(&bed, A, "a1");
        let (label, st) = finished(&bed, A, "a1").await;
        assert_eq!(label, "done", "a1: {st:?}");
        wait_for("every slot free again", async || {
            ctl.metrics.exec_slots_in_use.get() == 0
        })
        .await;
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// Three slots, two of them A's to take (the third is the reserve for namespaces that hold
/// none). `p`'s first hook and `x`'s hold them; `w` waits, and takes the slot
/// `p`'s first hook frees, so `p`'s second hook queues behind a full house. Then `q` comes up and
/// queues after it. When `x` frees its slot, `q`'s first hook gets it ahead of `p`'s second, which
/// waited longer: a pod's first hook goes before later hooks of pods that already had one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_first_hook_goes_before_later_hooks_that_waited_longer() {
    bounded(Duration::from_secs(90), async {
        let bed = bed().await;
        let ctl = controller(&bed, 3, None);
        let stamp = |name: &str, file: &str| sh_hook(name, "db", &format!("date +%s%N > {file}"));
        bed.create_pod(&bed.planned_pod(
            A,
            "p",
            vec![long_hook(), stamp("later", "later")],
            json!({}),
        ))
        .await
        .unwrap();
        bed.create_pod(&bed.planned_pod(A, "x", vec![long_hook()], json!({})))
            .await
            .unwrap();
        wait_for("p's first hook and x's hold both slots", async || {
            started(&bed, A, "p") && started(&bed, A, "x")
        })
        .await;

        let waiting = |turn: &str| {
            ctl.metrics
                .exec_slot_waiting
                .with_label_values(&[turn])
                .get()
        };
        bed.create_pod(&bed.planned_pod(A, "w", vec![long_hook()], json!({})))
            .await
            .unwrap();
        // A waiting hook may be claimed (§6.9): it then counts as `claimed`, ahead of the
        // unclaimed hooks of its turn only.
        wait_for("w's first hook waits for a slot", async || {
            waiting("first") + waiting("claimed") == 1
        })
        .await;
        release(&bed, A, "p");
        wait_for("w took the slot p's first hook freed", async || {
            started(&bed, A, "w")
        })
        .await;
        wait_for("p's second hook waits for a slot", async || {
            waiting("first") == 0 && waiting("later") + waiting("claimed") == 1
        })
        .await;

        bed.create_pod(&bed.planned_pod(A, "q", vec![stamp("first", "first")], json!({})))
            .await
            .unwrap();
        wait_for("q's first hook waits for a slot", async || {
            waiting("first") + waiting("claimed") + waiting("later") == 2
        })
        .await;
        assert!(
            !bed.pod_dir(A, "p").join("later").exists(),
            "p's second hook got no slot while x and w hold both"
        );
        release(&bed, A, "x");
        let (label, st) = finished(&bed, A, "q").await;
        assert_eq!(label, "done", "q: {st:?}");
        let (label, st) = finished(&bed, A, "p").await;
        assert_eq!(label, "done", "p: {st:?}");
        let ran_at = |pod: &str, file: &str| -> u128 {
            let text = std::fs::read_to_string(bed.pod_dir(A, pod).join(file)).expect("stamp");
            text.trim().parse().expect("nanoseconds")
        };
        assert!(
            ran_at("q", "first") < ran_at("p", "later"),
            "q's first hook ran after p's second hook, which had waited longer"
        );
        release(&bed, A, "w");
        let (label, st) = finished(&bed, A, "w").await;
        assert_eq!(label, "done", "w: {st:?}");
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}

/// docs/behaviour.md §6.11: no namespace holds the slots another needs, also when one team
/// spreads its restore over two namespaces. Eight slots, the defaults for them (6 per namespace,
/// 1 reserved for namespaces that hold none): A's seven long hooks take A's 6; B's, arriving
/// next, take one slot and leave the reserve; C's hook, arriving while every other slot is held
/// by hooks that do not end, takes the reserve and runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_arrives_last_gets_a_slot_while_long_hooks_hold_the_others() {
    bounded(Duration::from_secs(120), async {
        let bed = bed().await;
        let ctl = controller(&bed, 8, None);
        const PODS: [&str; 7] = ["p1", "p2", "p3", "p4", "p5", "p6", "p7"];
        let holding = |ns: &str| PODS.iter().filter(|p| started(&bed, ns, p)).count();
        for pod in PODS {
            bed.create_pod(&bed.planned_pod(A, pod, vec![long_hook()], json!({})))
                .await
                .unwrap();
        }
        wait_for("A holds its 6", async || holding(A) == 6).await;
        for pod in PODS {
            bed.create_pod(&bed.planned_pod(B, pod, vec![long_hook()], json!({})))
                .await
                .unwrap();
        }
        wait_for("B holds 1", async || holding(B) == 1).await;
        assert_eq!(
            ctl.metrics.exec_slots_in_use.get(),
            7,
            "the reserve is kept"
        );

        let quick = sh_hook("quick", "db", "touch ran");
        bed.create_pod(&bed.planned_pod(C, "c1", vec![quick], json!({})))
            .await
            .unwrap();
        let (label, st) = finished(&bed, C, "c1").await;
        assert_eq!(
            label, "done",
            "C's hook ran while A's and B's hold their slots: {st:?}"
        );
        assert_eq!(
            (holding(A), holding(B)),
            (6, 1),
            "no long hook started beyond its share meanwhile"
        );
        for ns in [A, B] {
            for pod in PODS {
                release(&bed, ns, pod);
            }
        }
        for ns in [A, B] {
            for pod in PODS {
                let (label, st) = finished(&bed, ns, pod).await;
                assert_eq!(label, "done", "{ns}/{pod}: {st:?}");
            }
        }
        ctl.stop().await.expect("controller stops cleanly");
        bed.stop().await;
    })
    .await;
}
