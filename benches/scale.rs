//! Controller scale run: the real `restore-hooks controller` process against the in-process
//! API-server simulator (the shared testbed, `restore_hooks::testbed`), N restored pods with 2
//! exec hooks each (one in each of two containers).
//!
//! `cargo bench --bench scale` (several minutes on 2 cores). Environment:
//!
//! | env | default | |
//! |---|---|---|
//! | `SCALE_PODS` | 10000 | largest run |
//! | `SCALE_SIZES` | `2000,$SCALE_PODS` | pod counts, each run on a fresh simulator and controller |
//! | `SCALE_MODES` | `live,backlog` | `live`: pods are created while the controller runs; `backlog`: all N are pending before it starts |
//! | `SCALE_CONCURRENCY` | 64 | the controller's `--max-concurrent-execs` |
//! | `SCALE_PER_NAMESPACE` | `$SCALE_CONCURRENCY` | its `--max-concurrent-execs-per-namespace` |
//! | `SCALE_NAMESPACES` | 1 | namespaces the pods are spread over (`default`; more: `scale-0`, `scale-1`, ...); one restore's record holds at most 10,000 pods of a namespace, so 50,000 pods need 5 or more |
//! | `SCALE_CREATE_CONCURRENCY` | 32 | parallel pod creates by this process |
//! | `SCALE_TICK_MS` | 1000 | timeline interval |
//! | `SCALE_KEEP` | unset | keep each run's directory (controller log, pod directories) |
//!
//! Pods are created exactly as the webhook leaves them (`Testbed::planned_pod`: a plan signed with
//! the testbed's key, which the controller reads with `--plan-key-file`; the `pending` and restore
//! labels); each hook is a real exec (`/bin/sh -c 'echo a >> a.txt'`, a local process in the pod's
//! directory). The clock runs from the first create (`live`) or from the controller's start
//! (`backlog`) to the last pod labelled `done`/`failed`. `backlog` is the memory worst case: every
//! pod waits at once (a restore faster than its hooks, or a controller that was down). Per run it
//! prints:
//!
//! - a live timeline (finished pods and hooks each tick, seen by a metadata-only watch on the
//!   label and the status annotation, with the controller's RSS). It is what a watcher in this
//!   busy process saw, and lags while the simulator is busy with creates;
//! - from the controller's own JSON log (timestamps of each hook result and of each pod's end): a
//!   per-second table, the throughput, the longest time without a hook finishing (a stall);
//! - the controller's peak RSS (`VmHWM`) and CPU time, this process' CPU time (simulator,
//!   client, hook processes) and that of everything else on the machine during the run.
//!
//! A table of all runs ends the output: the pods/s column staying flat across sizes shows that
//! the time grows linearly with N; the peak RSS column is to be read against the chart's memory
//! limit (256 MiB). Numbers are reported, never an exit code (except when a pod's hooks did not all
//! succeed exactly once, or a run did not finish in its limit).
//!
//! The simulator, this client and the controller share the machine's cores, so compare numbers
//! within one run.
//!
//! Where a waiting pod's memory goes (2026-12-05, 2 vCPUs; `backlog`, 10,000 pods; heap profile
//! with `heaptrack` on a build with the system allocator, peak heap 79 MB; per pod at the peak,
//! rounded):
//!
//! | what | bytes |
//! |---|---|
//! | its worker task (the worker and its wait on mailbox, slots, execs, timers), mailbox, wake, the watch loop's entry | 1,400 |
//! | the pod as the worker keeps it: names, labels, the plan and status annotations, container states | 1,300 |
//! | the plan and status the worker verified and trusts | 850 |
//! | object status: the pod's part of each target, the marked pod for late hooks, its runs for `after` | 2,400 |
//! | the controller's record (entries, and the patches being written) | 500 |
//! | its hooks' waits for a slot (64 running) | 350 |
//!
//! Measured peak RSS at 10,000 pending pods: 109–117 MiB over four runs (the goal was 128 MiB);
//! 89–96 MiB with 10,000 created live, 52 / 50 MiB with 2,000 (`backlog` / `live`). What was cut,
//! in two rounds:
//!
//! - 232 → 154 MiB: the worker task held the worker's fields twice (a `run(self)` future moves
//!   its argument into its body, and an `async move` around it kept one more), an `Api` per
//!   worker and its backoff state (208 bytes) before any error (3.7 → 1.2 KB, from
//!   `-Zprint-type-sizes`); each pod's part of each target was a `BTreeMap`, which allocates
//!   room for eleven entries (2 KB for two or three), as were its container states (1 KB); each
//!   worker had a `tokio::sync::watch` channel (0.4 KB, now a mailbox and the worker's existing
//!   `Notify`); and mimalloc asked for transparent huge pages, so each 2 MiB page it touched
//!   counted whole (24 MiB; the chart now sets `MIMALLOC_ALLOW_THP=0`, which this bench and
//!   `benches/load.rs` copy: no change in admission throughput).
//! - 154 → 109–117 MiB (peak heap 114 → 79 MB, part of it the simulator's paging below): each
//!   hook waiting for an exec slot had a task of its own, a `JoinSet` entry and an `AbortHandle` in a map (1.4 KB a pod; a wait is now a
//!   channel the worker polls); the worker's pod and the marked pod each kept the labels in a
//!   `BTreeMap` and the plan's sources in a `BTreeSet` (1.2 KB; now one buffer, `CompactLabels`,
//!   and boxed slices); the runs for `after` copied uid, restore and hook name into a map entry
//!   per hook (0.9 KB; now one small record per pod); and the marked-pod watch buffered its
//!   whole first list before applying it (10 MB at start-up). The simulator now serves lists in
//!   pages as kube-apiserver does (kube-runtime asks for 500 at a time); it answered with all
//!   10,000 pods at once, which the controller then held whole.
//!
//! What is left is mostly one copy of each pod in the worker (its annotation text and the plan
//! verified from it) and one in the object-status bookkeeping: sharing them would be the next
//! cut.
//!
//! 50,000 pods (2026-12-06, 2 vCPUs shared with other builds, load average 10-15):
//! `SCALE_PODS=50000 SCALE_SIZES=50000 SCALE_MODES=backlog` (pod names have five digits: up to
//! 99,999 fit) does not finish: every pod is in one namespace, and one restore's record holds at
//! most 10,000 pods of a namespace (docs/behaviour.md, the record's bounds), so the 40,000 beyond
//! are refused (`record_full`) and the bench stops on the count of hook results. The controller's
//! RSS, sampled each second, peaked at 352 MiB while it listed the 50,000 and started their
//! workers, before the refusals ended most of them; 10,000 the same day: 120.5 MiB (`VmHWM`).
//! Measuring 50,000 pods pending at once needs them spread over five namespaces or more (not a
//! knob yet). The restore model's work per change no longer grows with the restore
//! (`benches/aggregates.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use restore_hooks::hooks::plan::{EXEC_LABEL, ExecStatus, PlannedHook, STATUS_ANNOTATION};
use restore_hooks::testbed::{Testbed, TestbedOptions, sh_hook};
use restore_hooks_testkit::procfs::{cpu_seconds, machine_busy_seconds, status_kib};
use serde_json::json;

const NS: &str = "default";
const IDENTITY: &str = "scale-bench";
const LEASE: &str = "restore-hooks-controller";
/// The testbed's installation namespace (where the chart would put the Lease).
const LEASE_NAMESPACE: &str = "restore-hooks";

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not valid")),
        Err(_) => default,
    }
}

/// The `restore-hooks` binary cargo built alongside this bench, in the same profile
/// (`target/<profile>/restore-hooks`, next to `target/<profile>/deps/scale-*`).
fn restore_hooks_binary() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_restore-hooks"));
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("restore-hooks")));
    if let Some(beside) = &beside
        && beside.exists()
        && *beside != built
        && std::fs::canonicalize(beside).ok() != std::fs::canonicalize(&built).ok()
    {
        eprintln!(
            "note: {} and {} differ; using the latter (cargo's)",
            beside.display(),
            built.display()
        );
    }
    if built.exists() {
        return built;
    }
    beside.filter(|p| p.exists()).unwrap_or(built)
}

fn hooks() -> Vec<PlannedHook> {
    let mut hooks = vec![
        sh_hook("rehydrate", "db", "echo a >> a.txt"),
        sh_hook("warm-cache", "app", "echo b >> b.txt"),
    ];
    for (i, h) in hooks.iter_mut().enumerate() {
        h.source = "restorehook/scale".into();
        h.index = i;
        h.exec_timeout_ms = 60_000;
    }
    hooks
}

/// `SCALE_NAMESPACES`, read once.
fn namespaces() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| env("SCALE_NAMESPACES", 1).max(1))
}

/// The namespace of pod `i`: `default` when there is one, else round-robin over `scale-<k>`.
fn namespace_of(i: usize) -> String {
    match namespaces() {
        1 => NS.to_string(),
        n => format!("scale-{}", i % n),
    }
}

fn restored_pod(bed: &Testbed, i: usize) -> Pod {
    bed.planned_pod(
        &namespace_of(i),
        &format!("scale-{i:05}"),
        hooks(),
        json!({"metadata": {"labels": {"app": "scale"}}}),
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Pods are created while the controller runs.
    Live,
    /// All pods are pending before the controller starts.
    Backlog,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "live" => Ok(Mode::Live),
            "backlog" => Ok(Mode::Backlog),
            other => Err(format!("unknown mode {other:?} (live, backlog)")),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Live => "live",
            Mode::Backlog => "backlog",
        })
    }
}

/// The controller's slots.
#[derive(Clone, Copy)]
struct Slots {
    total: usize,
    per_namespace: usize,
}

/// The controller child process.
struct Controller {
    child: Child,
    log: PathBuf,
}

impl Controller {
    fn start(binary: &Path, dir: &Path, kubeconfig: &Path, plan_key: &Path, slots: Slots) -> Self {
        let log = dir.join("controller.log");
        let out = std::fs::File::create(&log).expect("controller log file");
        let mut cmd = Command::new(binary);
        for (key, _) in std::env::vars() {
            if key.starts_with("RESTORE_HOOKS_") || key == "RUST_LOG" {
                cmd.env_remove(key);
            }
        }
        // As the Helm chart runs the binary.
        cmd.env("MIMALLOC_PURGE_DELAY", "0")
            .env("MIMALLOC_ALLOW_THP", "0");
        cmd.args([
            "controller",
            "--max-concurrent-execs",
            &slots.total.to_string(),
            "--max-concurrent-execs-per-namespace",
            &slots.per_namespace.to_string(),
            "--identity",
            IDENTITY,
            "--lease-name",
            LEASE,
            "--lease-namespace",
            LEASE_NAMESPACE,
            "--admin-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log-level",
            "info",
        ])
        .arg("--plan-key-file")
        .arg(plan_key)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        Controller { child, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGTERM (graceful: releases the Lease), SIGKILL after 15 s.
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        if let Some(s) = self.exited() {
            return Some(s);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok();
        None
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Times (since `t0`, sorted) of the controller's `hook finished` lines (recognised by their
/// `duration_ms` field) and `all hooks ended` lines.
fn controller_timeline(log: &Path, t0: jiff::Timestamp) -> (Vec<Duration>, Vec<Duration>) {
    let (mut hooks, mut pods) = (Vec::new(), Vec::new());
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(at) = v["timestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        else {
            continue;
        };
        let since = Duration::try_from(at.duration_since(t0)).unwrap_or_default();
        if v.get("duration_ms").is_some() && v.get("result").is_some() {
            hooks.push(since);
        } else if v["message"] == "all hooks ended" {
            pods.push(since);
        }
    }
    hooks.sort();
    pods.sort();
    (hooks, pods)
}

/// One run's results.
struct Run {
    pods: usize,
    mode: Mode,
    created_in: Duration,
    total: Duration,
    first: Duration,
    max_gap: Duration,
    idle_seconds: usize,
    peak_rss_kib: u64,
    cpu: f64,
    /// This process: the simulator (API server, kubelet, exec processes' I/O) and the client.
    sim_cpu: f64,
    /// Other processes on the machine during the run.
    others_cpu: f64,
}

impl Run {
    fn pods_per_sec(&self) -> f64 {
        self.pods as f64 / self.total.as_secs_f64()
    }
}

/// Completion times (since the first create) of pods labelled `done`/`failed` and of hooks
/// recorded terminal in `restore-hooks.dev/status`, fed by a metadata-only watch.
#[derive(Default)]
struct Progress {
    finished: HashMap<String, (Duration, bool)>,
    /// Terminal hooks seen per pod.
    hooks: HashMap<String, usize>,
    hook_times: Vec<Duration>,
}

async fn track(client: kube::Client, t0: Instant, progress: Arc<Mutex<Progress>>) {
    let config = watcher::Config::default().labels("app=scale");
    let api: Api<PartialObjectMeta<Pod>> = Api::all(client);
    let mut stream = watcher::watcher(api, config).boxed();
    while let Some(ev) = stream.next().await {
        let metas = match ev {
            Ok(Event::Apply(m) | Event::InitApply(m)) => vec![m],
            Ok(_) => continue,
            Err(e) => {
                eprintln!("progress watch: {e} (retrying)");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        for m in metas {
            let name = m.metadata.name.clone().unwrap_or_default();
            let terminal = m
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(STATUS_ANNOTATION))
                .and_then(|s| ExecStatus::from_annotation(s).ok())
                .map_or(0, |s| {
                    s.hooks.iter().filter(|h| h.phase.is_terminal()).count()
                });
            {
                let mut p = progress.lock().unwrap();
                let seen = p.hooks.entry(name.clone()).or_default();
                if terminal > *seen {
                    let more = terminal - *seen;
                    *seen = terminal;
                    let at = t0.elapsed();
                    p.hook_times.extend(std::iter::repeat_n(at, more));
                }
            }
            let label = m
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(EXEC_LABEL))
                .map(String::as_str);
            if let Some(l @ ("done" | "failed")) = label {
                progress
                    .lock()
                    .unwrap()
                    .finished
                    .entry(name)
                    .or_insert((t0.elapsed(), l == "failed"));
            }
        }
    }
}

/// Creates pods `scale-00000`.. and returns when the last create returned (time since `t0`).
async fn create_all(
    bed: Arc<Testbed>,
    n: usize,
    concurrency: usize,
    t0: Instant,
) -> anyhow::Result<Duration> {
    futures::stream::iter(0..n)
        .map(|i| {
            let bed = bed.clone();
            async move { bed.create_pod(&restored_pod(&bed, i)).await.map(|_| ()) }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(t0.elapsed())
}

async fn run_once(
    n: usize,
    mode: Mode,
    slots: Slots,
    create_concurrency: usize,
) -> anyhow::Result<Run> {
    println!(
        "\n== {n} pods x 2 hooks, {mode}, --max-concurrent-execs {} (per namespace {}) ==",
        slots.total, slots.per_namespace
    );
    let dir = tempfile::tempdir()?;
    let bed = Arc::new(
        Testbed::start(TestbedOptions {
            workdir: Some(dir.path().join("cluster")),
            ..TestbedOptions::default()
        })
        .await?,
    );
    let kubeconfig = dir.path().join("kubeconfig");
    bed.sim.write_kubeconfig(&kubeconfig)?;
    let plan_key = dir.path().join("plan-key");
    bed.write_plan_key(&plan_key)?;
    let client = bed.client.clone();
    if namespaces() > 1 {
        for k in 0..namespaces() {
            bed.create_namespace(&format!("scale-{k}"), json!({}))
                .await?;
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let progress = Arc::new(Mutex::new(Progress::default()));
    // Backlog: every pod is pending before the controller starts.
    let mut created_before = None;
    if mode == Mode::Backlog {
        let t = Instant::now();
        let took = create_all(bed.clone(), n, create_concurrency, t).await?;
        println!(
            "{n} pods created (all pending) in {:.2}s",
            took.as_secs_f64()
        );
        created_before = Some(took);
    }

    let binary = restore_hooks_binary();
    let t0_backlog = (Instant::now(), jiff::Timestamp::now());
    let mut ctl = Controller::start(&binary, dir.path(), &kubeconfig, &plan_key, slots);
    let pid = ctl.pid();
    // Wait until it holds the Lease (it then watches pending pods).
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = ctl.exited() {
            anyhow::bail!("controller exited ({s}):\n{}", ctl.log_tail());
        }
        let holder = leases
            .get_opt(LEASE)
            .await?
            .and_then(|l| l.spec?.holder_identity);
        if holder.as_deref() == Some(IDENTITY) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "controller did not take the Lease within 30 s:\n{}",
            ctl.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let idle_rss = if mode == Mode::Live {
        // Let it start its pod watch.
        tokio::time::sleep(Duration::from_millis(300)).await;
        status_kib(pid, "VmRSS")
    } else {
        None
    };
    let cpu_before = cpu_seconds(pid, false).unwrap_or(0.0);
    let sim_cpu_before = cpu_seconds(std::process::id(), true).unwrap_or(0.0);
    let machine_before = machine_busy_seconds().unwrap_or(0.0);
    match idle_rss {
        Some(kib) => println!("controller pid {pid}, idle RSS {:.1} MiB", mib(kib)),
        None => println!("controller pid {pid}"),
    }

    let (t0, t0_wall) = match mode {
        Mode::Live => (Instant::now(), jiff::Timestamp::now()),
        Mode::Backlog => t0_backlog,
    };
    let tracker = tokio::spawn(track(client.clone(), t0, progress.clone()));
    let creator = match mode {
        Mode::Live => Some(tokio::spawn(create_all(
            bed.clone(),
            n,
            create_concurrency,
            t0,
        ))),
        Mode::Backlog => None,
    };

    // Timeline: completed pods each tick (default one second).
    let every = Duration::from_millis(env("SCALE_TICK_MS", 1000));
    let limit = Duration::from_secs(60 + n as u64 / 5);
    let mut created_in = created_before;
    let mut creator = creator;
    let (mut last, mut last_hooks) = (0, 0);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    println!("  t(s)  pods done  (+tick)  hooks done  (+tick)   ctl RSS");
    loop {
        tick.tick().await;
        let mut note = String::new();
        if let Some(c) = creator.as_mut()
            && c.is_finished()
        {
            let at = c.await??;
            note = format!("   (all {n} created at {:.2}s)", at.as_secs_f64());
            created_in = Some(at);
            creator = None;
        }
        let (done, hooks) = {
            let p = progress.lock().unwrap();
            (p.finished.len(), p.hook_times.len())
        };
        let rss = status_kib(pid, "VmRSS").unwrap_or(0);
        println!(
            "{:>6.2}  {done:>9}  {:>+7}  {hooks:>10}  {:>+7}   {:>6.1} MiB{note}",
            t0.elapsed().as_secs_f64(),
            done - last,
            hooks - last_hooks,
            mib(rss),
        );
        last_hooks = hooks;
        last = done;
        if done >= n {
            break;
        }
        if let Some(s) = ctl.exited() {
            anyhow::bail!("controller exited ({s}):\n{}", ctl.log_tail());
        }
        anyhow::ensure!(
            t0.elapsed() < limit,
            "only {done} of {n} pods finished within {limit:?}"
        );
    }
    if let Some(c) = creator.take() {
        created_in = Some(c.await??);
    }
    tracker.abort();
    let peak_rss_kib = status_kib(pid, "VmHWM").unwrap_or(0);
    let cpu = cpu_seconds(pid, false).unwrap_or(0.0) - cpu_before;
    let sim_cpu = cpu_seconds(std::process::id(), true).unwrap_or(0.0) - sim_cpu_before;
    // Whatever else ran on the machine meanwhile (other builds and benchmarks skew the numbers).
    let others_cpu =
        (machine_busy_seconds().unwrap_or(0.0) - machine_before - cpu - sim_cpu).max(0.0);

    let mut times: Vec<(Duration, bool)> = progress
        .lock()
        .unwrap()
        .finished
        .values()
        .copied()
        .collect();
    times.sort();
    let observed = times.last().map(|t| t.0).unwrap_or_default();
    let failed = times.iter().filter(|t| t.1).count();
    // Every hook ran exactly once.
    let mut wrong = Vec::new();
    for i in 0..n {
        let name = format!("scale-{i:05}");
        let read = |f: &str| {
            std::fs::read_to_string(bed.pod_dir(&namespace_of(i), &name).join(f))
                .unwrap_or_default()
        };
        let (a, b) = (read("a.txt"), read("b.txt"));
        if a != "a\n" || b != "b\n" {
            wrong.push(format!("{name}: a.txt {a:?}, b.txt {b:?}"));
        }
    }

    let stopped = ctl.stop();
    drop(pods);
    drop(client);
    match Arc::try_unwrap(bed) {
        Ok(bed) => bed.stop().await,
        Err(_) => eprintln!("note: the testbed is still shared; not stopped cleanly"),
    }

    // The controller's own view, from its JSON log (timestamps of `hook finished` and `all
    // hooks ended`): the live timeline above is what a watcher of this (busy) process saw, and
    // lags behind while the simulator is busy with creates.
    let (hook_ends, pod_ends) = controller_timeline(&ctl.log, t0_wall);
    anyhow::ensure!(
        hook_ends.len() == 2 * n && pod_ends.len() == n,
        "the controller log shows {} hook results and {} finished pods (want {} and {n})",
        hook_ends.len(),
        pod_ends.len(),
        2 * n
    );
    let total = pod_ends.last().copied().unwrap_or_default();
    let first = pod_ends.first().copied().unwrap_or_default();
    let first_hook = hook_ends.first().copied().unwrap_or_default();
    // Stalls: the longest time without any hook finishing, and whole seconds (after the first
    // hook finished) without one.
    let max_gap = hook_ends
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let seconds = total.as_secs() as usize + 1;
    let (mut hooks_per_s, mut pods_per_s) = (vec![0usize; seconds], vec![0usize; seconds]);
    for t in &hook_ends {
        hooks_per_s[(t.as_secs() as usize).min(seconds - 1)] += 1;
    }
    for t in &pod_ends {
        pods_per_s[(t.as_secs() as usize).min(seconds - 1)] += 1;
    }
    let idle_seconds = hooks_per_s
        .iter()
        .skip(first_hook.as_secs() as usize)
        .filter(|c| **c == 0)
        .count();
    println!("controller log, per second:  second  hooks finished  pods finished");
    for (i, (h, p)) in hooks_per_s.iter().zip(&pods_per_s).enumerate() {
        println!("                             {i:>6}  {h:>14}  {p:>13}");
    }
    if std::env::var_os("SCALE_KEEP").is_some() {
        println!("kept {} (controller.log, pods/)", dir.keep().display());
    }
    let run = Run {
        pods: n,
        mode,
        created_in: created_in.unwrap_or_default(),
        total,
        first,
        max_gap,
        idle_seconds,
        peak_rss_kib,
        cpu,
        sim_cpu,
        others_cpu,
    };
    println!(
        "{n} pods ({} hooks) in {:.2}s: {:.1} pods/s, {:.1} hooks/s; created in {:.2}s; first \
         hook finished at {:.2}s, first pod at {:.2}s; longest time without a hook finishing \
         {:.0} ms; seconds without one: {idle_seconds}; failed pods: {failed}; the watch here saw \
         the last pod at {:.2}s",
        2 * n,
        total.as_secs_f64(),
        run.pods_per_sec(),
        2.0 * run.pods_per_sec(),
        run.created_in.as_secs_f64(),
        first_hook.as_secs_f64(),
        first.as_secs_f64(),
        max_gap.as_secs_f64() * 1000.0,
        observed.as_secs_f64(),
    );
    println!(
        "controller: peak RSS (VmHWM) {:.1} MiB{}, CPU {cpu:.1}s ({:.0}% of one \
         core), exit {stopped:?}; simulator + client + hook processes: CPU {sim_cpu:.1}s; other processes on \
         the machine: CPU {others_cpu:.1}s",
        mib(peak_rss_kib),
        idle_rss
            .map(|k| format!(" (idle {:.1} MiB)", mib(k)))
            .unwrap_or_default(),
        100.0 * cpu / total.as_secs_f64()
    );
    anyhow::ensure!(
        wrong.is_empty() && failed == 0,
        "{failed} pods failed; {} pods without exactly one run of each hook:\n{}",
        wrong.len(),
        wrong
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(run)
}

fn main() -> ExitCode {
    let pods: usize = env("SCALE_PODS", 10_000);
    let concurrency: usize = env("SCALE_CONCURRENCY", 64);
    let slots = Slots {
        total: concurrency,
        per_namespace: env("SCALE_PER_NAMESPACE", concurrency),
    };
    let create_concurrency: usize = env("SCALE_CREATE_CONCURRENCY", 32);
    let list = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|s| s.split(',').map(str::to_string).collect::<Vec<_>>())
    };
    let sizes: Vec<usize> = match list("SCALE_SIZES") {
        Some(s) => s
            .iter()
            .map(|x| {
                x.trim()
                    .parse()
                    .expect("SCALE_SIZES: comma-separated numbers")
            })
            .collect(),
        None => {
            let mut v: Vec<usize> = [2000, pods].into_iter().filter(|x| *x <= pods).collect();
            v.dedup();
            v
        }
    };
    let modes: Vec<Mode> = match list("SCALE_MODES") {
        Some(m) => m.iter().map(|x| x.parse().expect("SCALE_MODES")).collect(),
        None => vec![Mode::Live, Mode::Backlog],
    };
    let binary = restore_hooks_binary();
    println!(
        "controller binary: {} (bench exe {})",
        binary.display(),
        std::env::current_exe().unwrap().display()
    );
    restore_hooks::install_crypto_provider();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let mut runs = Vec::new();
    for &mode in &modes {
        for &n in &sizes {
            match rt.block_on(run_once(n, mode, slots, create_concurrency)) {
                Ok(r) => runs.push(r),
                Err(e) => {
                    eprintln!("scale run with {n} pods ({mode}) failed: {e:#}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    println!(
        "\n   mode    pods   hooks  created(s)  1st pod(s)  total(s)  pods/s  hooks/s  hook gap(ms)  idle s  peak RSS(MiB)  ctl CPU(s)  CPU ms/pod  sim CPU(s)  others CPU(s)"
    );
    for r in &runs {
        println!(
            "{:>7}  {:>6}  {:>6}  {:>10.2}  {:>10.2}  {:>8.2}  {:>6.1}  {:>7.1}  {:>12.0}  {:>6}  {:>13.1}  {:>10.1}  {:>10.2}  {:>10.1}  {:>13.1}",
            r.mode.to_string(),
            r.pods,
            2 * r.pods,
            r.created_in.as_secs_f64(),
            r.first.as_secs_f64(),
            r.total.as_secs_f64(),
            r.pods_per_sec(),
            2.0 * r.pods_per_sec(),
            r.max_gap.as_secs_f64() * 1000.0,
            r.idle_seconds,
            mib(r.peak_rss_kib),
            r.cpu,
            1000.0 * r.cpu / r.pods as f64,
            r.sim_cpu,
            r.others_cpu,
        );
    }
    for &mode in &modes {
        let of_mode: Vec<&Run> = runs.iter().filter(|r| r.mode == mode).collect();
        if let (Some(a), Some(b)) = (of_mode.first(), of_mode.last())
            && b.pods > a.pods
        {
            println!(
                "scaling ({mode}): {}x the pods took {:.2}x the time (linear = {:.2}x)",
                b.pods / a.pods.max(1),
                b.total.as_secs_f64() / a.total.as_secs_f64(),
                b.pods as f64 / a.pods as f64
            );
        }
    }
    ExitCode::SUCCESS
}
