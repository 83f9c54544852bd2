//! What one pod change costs the restore model (`RestoreIndex`) as the restore grows: N pods of
//! one restore in one namespace, each planning `db` (every pod), `migrate` (`runOn: OnePod`, no
//! StatefulSet ordinals: the oldest pod that is up runs it) and `warm` (`after: [db]`), all vouched
//! for and up. The answers that span pods are meant to be kept per change, not recomputed from
//! every pod, so each number below should stay flat from 10,000 to 50,000 pods.
//!
//! `cargo bench --bench aggregates` (about a minute). `AGG_SIZES` (default `10000,50000`) sets the
//! pod counts. Per size it measures:
//!
//! - `apply`: one pod's `db` hook goes Pending → Running (or back), as the watch of marked pods
//!   delivers it, including every status sum it touches;
//! - `post_standing`: a worker posts that its `migrate` container went down (or up again);
//! - `after_turns`, `one_pod_candidates`: what a woken worker asks;
//! - `totals`: what a status write of the restore's RestoreRun reads;
//! - `change_and_answers`: `apply` plus the questions of every worker it wakes, what a change
//!   costs the controller in all.
//!
//! Before each size's measurements it prints how many workers one change of each kind wakes: the
//! factor that multiplies the cost of a change when a wake is followed by a rescan.
//!
//! 2026-12-06, 2 vCPUs shared with other builds (load average 10-15: read the orders of
//! magnitude), median per call:
//!
//! | | 10,000 before | 10,000 after | 50,000 after |
//! |---|---|---|---|
//! | workers a db hook's start wakes | 9,999 | 0 | 0 |
//! | workers a migrate container going down wakes | 9,999 | 0 (2 for the chosen pod) | 0 (2) |
//! | `apply` | 6.2 ms | 36 µs | 36 µs |
//! | `post_standing` | 389 µs | 2.9 µs | 2.6 µs |
//! | `after_turns` | 22 ms | 2.0 µs | 3.0 µs |
//! | `one_pod_candidates` | 16 ms | 0.7 µs | 0.75 µs |
//! | `totals` | 81 ns | 76 ns | 1.1 µs |
//! | `change_and_answers` | ≈ 380 s (9,999 × 38 ms, not run) | 34 µs | 115 µs |
//!
//! Before, every waiter and every planner was woken by any change to what it waits for, and each
//! then read every run and every candidate again; building the 50,000-pod index alone (50,000
//! workers posting that their container is up, each waking all the others) did not finish in
//! ten minutes.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use restore_hooks_core::exec_step::align;
use restore_hooks_core::hooks::plan::{ExecPlan, ExecStatus, HookPhase};
use restore_hooks_core::restore::tally::Target;
use restore_hooks_core::restore::{MarkedPod, RestoreIndex, Standing, Verified};
use serde_json::json;

const NAMESPACE: &str = "shop";
const MIGRATE: &str = "r1/shop/restorehook/migrate#1";

fn plan() -> ExecPlan {
    let hook = |name: &str, extra: serde_json::Value| {
        let mut h = json!({
            "name": name, "source": format!("restorehook/{name}"), "index": 0, "container": "db",
            "command": ["true"], "onError": "Fail", "execTimeoutMs": 30000,
            "waitTimeoutMs": null, "waitForReady": false
        });
        json_patch::merge(&mut h, &extra);
        h
    };
    serde_json::from_value(json!({
        "id": "x", "restore": "r1", "issuedAt": "2026-12-06T00:00:00Z", "vouchedBy": "velero",
        "hooks": [
            hook("db", json!({})),
            hook("migrate", json!({"index": 1, "runOn": "OnePod"})),
            hook("warm", json!({"after": [{"hook": "db", "kind": "RestoreHook", "namespace": NAMESPACE}]})),
        ],
    }))
    .expect("a valid plan")
}

fn pod(i: usize) -> MarkedPod {
    MarkedPod {
        namespace: NAMESPACE.into(),
        name: format!("app-{i:05}"),
        created: Some(jiff::Timestamp::from_second(1_800_000_000 + i as i64).unwrap()),
        ..MarkedPod::default()
    }
}

fn status(plan: &ExecPlan, db: HookPhase) -> ExecStatus {
    let mut s = align(plan, None);
    s.hooks[0].phase = db;
    s
}

fn uid(i: usize) -> String {
    format!("uid-{i:05}")
}

/// A listed index of `n` pods, every `migrate` container up.
fn index(n: usize, plan: &ExecPlan) -> RestoreIndex {
    let mut index = RestoreIndex::new();
    let pending = status(plan, HookPhase::Pending);
    for i in 0..n {
        let verified = Verified {
            plan: plan.clone(),
            status: Some(pending.clone()),
        };
        index.apply(&uid(i), pod(i), Some(verified));
    }
    index.set_listed();
    for i in 0..n {
        index.post_standing(
            &uid(i),
            MIGRATE,
            Standing {
                up: true,
                able: true,
            },
        );
    }
    index
}

/// The questions a woken worker asks of the model: its `after` turns and its `OnePod`
/// candidates.
fn answers(index: &RestoreIndex, plan: &ExecPlan, status: &ExecStatus) -> usize {
    let turns = index.after_turns(NAMESPACE, plan, Some(status));
    let candidates = index.one_pod_candidates(MIGRATE);
    turns.len() + candidates.len()
}

fn bench(c: &mut Criterion, n: usize) {
    let plan = plan();
    let pending = status(&plan, HookPhase::Pending);
    let running = status(&plan, HookPhase::Running);
    let mut index = index(n, &plan);
    let run = Target::RestoreRun {
        restore: "r1".into(),
    };

    // How many workers each kind of change wakes (one change each way, undone after).
    let mid = n / 2;
    let flip = |index: &mut RestoreIndex, i: usize, to: &ExecStatus| {
        index.apply(
            &uid(i),
            pod(i),
            Some(Verified {
                plan: plan.clone(),
                status: Some(to.clone()),
            }),
        )
    };
    let woken_apply = flip(&mut index, mid, &running).wake.len();
    flip(&mut index, mid, &pending);
    let down = Standing {
        up: false,
        able: true,
    };
    let up = Standing {
        up: true,
        able: true,
    };
    let woken_standing = index.post_standing(&uid(mid), MIGRATE, down).wake.len();
    index.post_standing(&uid(mid), MIGRATE, up);
    let woken_oldest = index.post_standing(&uid(0), MIGRATE, down).wake.len();
    index.post_standing(&uid(0), MIGRATE, up);
    println!(
        "{n} pods: a db hook that starts wakes {woken_apply} workers; a migrate container that \
         goes down wakes {woken_standing} (the oldest pod's: {woken_oldest})"
    );

    let mut group = c.benchmark_group("restore_index");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let mut i = 0usize;
    let mut flag = false;
    group.bench_function(BenchmarkId::new("apply", n), |b| {
        b.iter(|| {
            // Each pod in turn, flipped there and back over two passes.
            i = (i + 1) % n;
            if i == 0 {
                flag = !flag;
            }
            let to = if flag { &pending } else { &running };
            black_box(flip(&mut index, i, to).wake.len())
        })
    });
    // Back to every db hook pending.
    for j in 0..n {
        flip(&mut index, j, &pending);
    }
    let mut toggle = false;
    group.bench_function(BenchmarkId::new("post_standing", n), |b| {
        b.iter(|| {
            toggle = !toggle;
            let s = if toggle { down } else { up };
            black_box(index.post_standing(&uid(mid), MIGRATE, s).wake.len())
        })
    });
    index.post_standing(&uid(mid), MIGRATE, up);
    group.bench_function(BenchmarkId::new("after_turns", n), |b| {
        b.iter(|| black_box(index.after_turns(NAMESPACE, &plan, Some(&pending))))
    });
    group.bench_function(BenchmarkId::new("one_pod_candidates", n), |b| {
        b.iter(|| black_box(index.one_pod_candidates(MIGRATE)))
    });
    group.bench_function(BenchmarkId::new("totals", n), |b| {
        b.iter(|| black_box(index.totals(&run, Default::default())))
    });
    // A change and the questions of every worker it wakes: a pod's db hook starting wakes the
    // `after` waiters only when what they see changes.
    let mut k = 0usize;
    let mut flag = false;
    group.bench_function(BenchmarkId::new("change_and_answers", n), |b| {
        b.iter(|| {
            k = (k + 1) % n;
            if k == 0 {
                flag = !flag;
            }
            let to = if flag { &pending } else { &running };
            let changes = flip(&mut index, k, to);
            let mut asked = 0;
            for _ in &changes.wake {
                asked += answers(&index, &plan, &pending);
            }
            black_box(asked)
        })
    });
    group.finish();
}

fn main() {
    let sizes: Vec<usize> = std::env::var("AGG_SIZES")
        .unwrap_or_else(|_| "10000,50000".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("AGG_SIZES: comma-separated numbers")
        })
        .collect();
    let mut c = Criterion::default().configure_from_args();
    for n in sizes {
        bench(&mut c, n);
    }
    c.final_summary();
}
