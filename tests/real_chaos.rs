//! Chaos on a real control plane (e2e/realcp): the promise of docs/behaviour.md §6.9 (at most
//! once) and §6.10 (restarts and failover) when kube-apiserver itself goes away mid-restore, and
//! when the leading controller dies at each point of a `retry` (§6.17, §9.5).
//!
//! - `apiserver_sigkilled_for_five_seconds_mid_restore`: 30 restored pods, one 3-second hook
//!   each (half annotation hooks, half RestoreHooks with `retry: {idempotent: true}`); while about
//!   a dozen run, kube-apiserver is SIGKILLed and started again 5 s later on the same etcd and
//!   port. Every hook that had not started runs exactly once afterwards; a hook whose exec stream
//!   broke ends `Failed` (or, idempotent, runs again); nothing ends `interrupted`; the RestoreRun
//!   completes; a 403 after the restart is logged as the API server still starting, never as
//!   missing RBAC.
//! - `leader_sigkilled_around_a_retry`: a hook that exits 75 once, then 0 (`retry: {attempts: 3,
//!   backoff: 2s, onExitCodes: [75]}`); the leading controller is SIGKILLed (a) right after the
//!   retryable end is on the pod, before the record's release lands, (b) during the backoff, (c)
//!   while attempt 2 runs. (a) and (b): attempt 2 runs exactly once, under the next leader, and
//!   the hook succeeds; (c): the command ran twice in all and never again, and the hook ends
//!   `interrupted` (its result died with the leader, §6.10).
//!
//! Hooks append `start <nanos>` / `end <nanos>` to a mark file of their own pod (an absolute
//! path under the control plane's work dir): "ran exactly once" is a line count. The processes
//! run as the chart runs them (split webhook and controller, each under its own ServiceAccount).
//! Waits are bounded failure guards, never performance assertions: where a kill must land in a
//! window, the state after the kill says which window it hit, and the scenario is repeated (a
//! bounded number of times) until the window under test was hit.

mod real;

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use real::*;
use serde_json::{Value, json};

/// The rendered Deployment whose container runs `role` (`controller` or `webhook`).
fn deployment_of(install: &Install, role: &str) -> String {
    of_kind(&install.rendered, "Deployment")
        .into_iter()
        .find(|d| d["spec"]["template"]["spec"]["containers"][0]["args"][0] == role)
        .unwrap_or_else(|| panic!("the chart renders no {role} Deployment"))["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `sh -c` that marks its start, runs `body`, and marks its end.
fn marked(mark: &Path, body: &str) -> String {
    format!(
        "{}; {body}; {}",
        mark_cmd(mark, "start"),
        mark_cmd(mark, "end")
    )
}

/// (start lines, end lines) of a mark file.
fn runs(mark: &Path) -> (usize, usize) {
    let lines = mark_lines(mark);
    let count = |w: &str| lines.iter().filter(|l| l.starts_with(w)).count();
    (count("start "), count("end "))
}

/// The first hook's status entry of a pod (`Value::Null` before the status is written).
fn first_hook(pod: &Value) -> Value {
    scenarios::hooks_of(pod)
        .first()
        .cloned()
        .unwrap_or(Value::Null)
}

/// Runs `kubectl get ARGS -w -o json` (admin) and returns the first object it prints for which
/// `hit` holds; panics after `timeout`. A watch, not polling: the tests below act within a
/// second of the change they wait for.
fn watch_for(
    cp: &ControlPlane,
    args: &[&str],
    timeout: Duration,
    mut hit: impl FnMut(&Value) -> bool,
) -> Value {
    let mut child = Command::new(cp.kubectl_path())
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!(
            "--cache-dir={}",
            cp.work_dir().join("kubectl-cache-watch").display()
        ))
        .arg("get")
        .args(args)
        .args(["-w", "-o", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot run kubectl");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let stream = serde_json::Deserializer::from_reader(BufReader::new(stdout));
        for value in stream.into_iter::<Value>() {
            let Ok(value) = value else { break };
            if tx.send(value).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + timeout;
    let mut last = Value::Null;
    let found = loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(v) if hit(&v) => break Some(v),
            Ok(v) => last = v,
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    found.unwrap_or_else(|| {
        panic!(
            "timed out after {timeout:?} watching `kubectl get {}`; last seen: {last}",
            args.join(" ")
        )
    })
}

/// The controller's record of pod `uid` (its entry in any RestoreRecord), if it has one.
fn record_of(cp: &ControlPlane, uid: &str) -> Option<Value> {
    let list = get_json(cp, &["get", "restorerecords.restore-hooks.dev"])?;
    list["items"]
        .as_array()?
        .iter()
        .find_map(|r| r["status"]["executions"].get(uid).cloned())
}

/// (attempts started, attempts released) of hook 0 in a record entry, as §9.5 counts them: a hook
/// marked started without `attempts` is its first attempt, not released.
fn attempts(entry: &Value) -> (u64, u64) {
    match (&entry["hooks"]["0"], &entry["attempts"]["0"]) {
        (Value::Null, _) => (0, 0),
        (_, Value::Null) => (1, 0),
        (_, a) => (
            a["started"].as_u64().unwrap_or(0),
            a["released"].as_u64().unwrap_or(0),
        ),
    }
}

/// A controller process's JSON log lines (their fields) with `message`, about pod `ns/name`.
fn log_lines(log: &str, message: &str, pod: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| {
            if l["fields"].is_object() {
                l["fields"].clone()
            } else {
                l
            }
        })
        .filter(|f| f["message"] == message && f["pod"] == pod)
        .collect()
}

/// What a process logged about 403s, and what its metrics say, after an API server restart:
/// every refusal must be the API server still starting (src/kube_client.rs), none missing RBAC.
/// Returns how many 403s it took for a starting API server.
fn refusals_were_the_api_server_starting(p: &Serve) -> f64 {
    const STARTING: &str = "the API server refused a request with 403 Forbidden within a minute of \
                            being unreachable";
    let log = p.log();
    let mut starting = 0;
    let mut other = Vec::new();
    for line in forbidden_lines_of(&log) {
        if line.contains(STARTING) {
            starting += 1;
            assert!(line.contains("\"INFO\""), "{}: {line}", p.identity);
        } else {
            other.push(line);
        }
    }
    // What the product logs about a request that failed for that reason (its error names the
    // 403) is the consequence of such a refusal, which the line above already classified: only
    // the verdict "lacks that verb" would say the chart's RBAC is missing something.
    let lacking: Vec<&String> = other
        .iter()
        .filter(|l| l.contains("this ServiceAccount lacks"))
        .collect();
    assert!(
        lacking.is_empty(),
        "{}: a 403 after the API server restart was logged as missing RBAC:\n{lacking:#?}",
        p.identity
    );
    if starting == 0 {
        assert!(
            other.is_empty(),
            "{}: 403s without the API server starting:\n{other:#?}",
            p.identity
        );
    }
    let metrics = p.metrics();
    assert_eq!(
        metric(&metrics, "restore_hooks_api_forbidden_total"),
        0.0,
        "{}: restore_hooks_api_forbidden_total",
        p.identity
    );
    let counted = metric(&metrics, "restore_hooks_api_forbidden_while_starting_total");
    eprintln!(
        "{}: {starting} log lines and {} counted 403s while the API server started; other lines \
         naming a 403: {}",
        p.identity,
        counted as u64,
        other.len()
    );
    counted
}

fn forbidden_lines_of(log: &str) -> Vec<String> {
    real::serve::forbidden_lines(log)
}

/// Scenario 1 (docs/behaviour.md §6.10, §6.17, §6.19): kube-apiserver SIGKILLed for 5 s while
/// about a dozen hooks of a 30-pod restore run, with the chart's defaults.
#[test]
fn apiserver_sigkilled_for_five_seconds_mid_restore() {
    let _heavy = heavy();
    const NS: &str = "chaos-api";
    const RESTORE: &str = "r-chaos-api";
    const PODS: usize = 30;
    let install = Install::default_chart();
    let cp = &install.cp;
    // The chart's two replicas of each Deployment (split webhook and controller).
    let mut first = install.start(0);
    first.wait_leader(Duration::from_secs(60));
    let mut second = install.start(1);
    namespace(cp, NS, json!({NAMESPACE_LABEL: RESTORE}));

    let name = |i: usize| format!("p-{i:02}");
    // Odd pods: a RestoreHook whose exec may run twice (`idempotent`); even pods: a Velero
    // annotation hook, which has no retry.
    let idempotent = |i: usize| i % 2 == 1;
    let mark = |i: usize| install.mark(&name(i));
    let body = "sleep 3";
    let mut hooks = Vec::new();
    for i in (0..PODS).filter(|i| idempotent(*i)) {
        hooks.push(json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": name(i), "namespace": NS},
            "spec": {
                "labelSelector": {"matchLabels": {"pod": name(i)}},
                "postHooks": [{"exec": {
                    "container": "app", "execTimeout": "30s",
                    "retry": {"idempotent": true, "backoff": "1s"},
                    "command": ["sh", "-c", marked(&mark(i), body)],
                }}],
            },
        }));
    }
    scenarios::apply_hooks(cp, &hooks);
    for h in &hooks {
        scenarios::wait_compiled(
            cp,
            NS,
            h["metadata"]["name"].as_str().unwrap(),
            &[&first.webhook().identity, &second.webhook().identity],
        );
    }
    let pods: Vec<Value> = (0..PODS)
        .map(|i| {
            let annotations = if idempotent(i) {
                json!({})
            } else {
                json!({
                    "post.hook.restore.velero.io/container": "app",
                    "post.hook.restore.velero.io/exec-timeout": "30s",
                    "post.hook.restore.velero.io/command":
                        json!(["sh", "-c", marked(&mark(i), body)]).to_string(),
                })
            };
            pod(NS, &name(i), &["app"], json!({"pod": name(i)}), annotations)
        })
        .collect();
    apply_list(cp, &pods);

    // About a dozen hooks running (the namespace's share of exec slots is 12, §6.11).
    let running_at_kill = wait_until(
        "about a dozen hooks running",
        Duration::from_secs(180),
        || {
            let list = get_json(cp, &["get", "pods", "-n", NS]).ok_or("no list")?;
            let running: Vec<String> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| first_hook(p)["phase"] == "Running")
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                .collect();
            if running.len() >= 8 {
                Ok(running)
            } else {
                Err(format!("running: {running:?}"))
            }
        },
    );
    cp.kill_apiserver().unwrap();
    let killed = Instant::now();
    eprintln!(
        "kube-apiserver SIGKILLed with {} hooks running: {running_at_kill:?}",
        running_at_kill.len()
    );
    // Down for 5 s. What had started by the end of it (every exec goes through the API server:
    // nothing starts while it is down) is read just before it comes back.
    std::thread::sleep(Duration::from_millis(4_800));
    let started_before: Vec<usize> = (0..PODS).map(|i| runs(&mark(i)).0).collect();
    std::thread::sleep(Duration::from_secs(5).saturating_sub(killed.elapsed()));
    let down = killed.elapsed();
    cp.start_apiserver().unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!(
        "kube-apiserver started again after {:.1} s down, ready {:.1} s after the kill",
        down.as_secs_f64(),
        killed.elapsed().as_secs_f64()
    );

    let ended: Vec<Value> = (0..PODS)
        .map(|i| wait_hooks_ended(cp, NS, &name(i), Duration::from_secs(300)))
        .collect();
    let run = wait_restore_run(
        cp,
        RESTORE,
        &["Completed", "PartiallyFailed"],
        Duration::from_secs(120),
    );

    let mut summary = BTreeMap::new();
    let mut not_started = 0;
    let mut broke = 0;
    for i in 0..PODS {
        let h = first_hook(&ended[i]);
        let (phase, message) = (
            h["phase"].as_str().unwrap_or_default(),
            h["message"].as_str().unwrap_or_default(),
        );
        let (starts, ends) = runs(&mark(i));
        let before = started_before[i];
        summary.insert(name(i), (before, starts, ends, h.clone()));
        let what = format!(
            "{} ({}): started before the restart {before}, starts {starts}, ends {ends}: {h}",
            name(i),
            if idempotent(i) {
                "RestoreHook, idempotent"
            } else {
                "annotation hook"
            }
        );
        // Only a command that may have run ends interrupted (§6.10); here the controllers all
        // lived: nothing may.
        assert!(!message.contains("interrupted"), "{what}");
        assert!(starts <= 2, "{what}");
        if before == 0 {
            // Not started when the API server came back: runs exactly once afterwards.
            not_started += 1;
            assert_eq!((phase, starts, ends), ("Succeeded", 1, 1), "{what}");
            continue;
        }
        match phase {
            "Succeeded" if starts == 1 => {}
            // Its stream broke and it was tried again: only because it is idempotent (§6.17).
            "Succeeded" => {
                broke += 1;
                assert!(idempotent(i), "{what}");
                assert!(h["retries"].as_u64() >= Some(1), "{what}");
            }
            "Failed" => {
                broke += 1;
                assert!(!idempotent(i), "{what}");
                assert!(
                    message.contains("the exec stream broke")
                        || message.contains("the exec stream ended without an exit status"),
                    "{what}"
                );
                assert_eq!(starts, 1, "never run again: {what}");
            }
            _ => panic!("{what}"),
        }
    }
    eprintln!("per pod (started before the restart, starts, ends, status): {summary:#?}");
    eprintln!(
        "{not_started} hooks had not started when the API server came back; {broke} had their \
         exec stream broken by the kill"
    );
    // Both sides of the promise were exercised.
    assert!(
        not_started >= 1,
        "every hook had started before the kill: {summary:?}"
    );
    assert!(
        broke >= 1,
        "no exec stream was broken by the kill: {summary:?}"
    );
    let counts = &run["status"]["hooks"];
    assert_eq!(
        counts["succeeded"].as_u64().unwrap_or(0) + counts["failed"].as_u64().unwrap_or(0),
        PODS as u64,
        "{}",
        run["status"]
    );
    assert_eq!(
        counts["pending"].as_u64().unwrap_or(0),
        0,
        "{}",
        run["status"]
    );

    // The 403s of a starting API server are expected; each must be logged as such.
    let mut counted = 0.0;
    for replica in [&mut first, &mut second] {
        for p in &mut replica.procs {
            counted += refusals_were_the_api_server_starting(p);
            p.expect_forbidden();
        }
    }
    eprintln!(
        "403s taken for a starting API server, all processes: {}",
        counted as u64
    );
}

/// Where the leader is SIGKILLed in scenario 2, and, read from the record and the pod after the
/// kill, which window it hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Point {
    /// (a) The pod's signed status shows attempt 1 ended and released (`Pending`, `retries: 1`);
    /// the record does not yet.
    ReleasedOnThePodOnly,
    /// (b) Both show attempt 1 released: the backoff before attempt 2.
    Backoff,
    /// (c) Attempt 2's start is recorded: it runs (or is about to).
    AttemptTwo,
}

/// Scenario 2 (docs/behaviour.md §6.10, §6.17, §9.5): the leader SIGKILLed at each point of a
/// retry; a second replica (the chart's default) takes over.
#[test]
fn leader_sigkilled_around_a_retry() {
    let _heavy = heavy();
    const NS: &str = "chaos-retry";
    // Tries per point: a kill can miss its window on a loaded machine; the state after it says
    // which window it hit, and a miss is tried again.
    const TRIES: usize = 6;
    let install = Install::new(InstallOptions {
        // Only to keep (c) short: an attempt whose leader died is declared interrupted after
        // startedAt + execTimeout + this (§6.10).
        helm_args: vec!["--set".into(), "config.inheritedExecGrace=5s".into()],
        ..InstallOptions::default()
    });
    let cp = &install.cp;
    let controller = deployment_of(&install, "controller");
    let webhook = deployment_of(&install, "webhook");
    let mut controllers: Vec<Serve> = Vec::new();
    controllers.push(install.serve(ServeOptions::of(&controller, 0)));
    controllers[0].wait_leader(Duration::from_secs(60));
    controllers.push(install.serve(ServeOptions::of(&controller, 1)));
    let webhook = install.serve(ServeOptions::of(&webhook, 0));
    let mut leader = 0;
    namespace(cp, NS, json!({NAMESPACE_LABEL: "r-chaos-retry"}));

    let mut hit: BTreeMap<Point, usize> = BTreeMap::new();
    let mut tried = 0;
    for target in [
        Point::ReleasedOnThePodOnly,
        Point::Backoff,
        Point::AttemptTwo,
    ] {
        for attempt in 0.. {
            if hit.contains_key(&target) {
                break;
            }
            assert!(
                attempt < TRIES,
                "{target:?}: not hit in {TRIES} tries (hit so far: {hit:?})"
            );
            tried += 1;
            let pod_name = format!("retry-{tried}");
            let mark = install.mark(&pod_name);
            // Attempt 1 exits 75; attempt 2 runs 3 s (long enough to kill the leader in it) and
            // succeeds.
            let script = format!(
                "{}; [ $(grep -c '^start' '{m}') -ge 2 ] || exit 75; sleep 3; {}",
                mark_cmd(&mark, "start"),
                mark_cmd(&mark, "end"),
                m = mark.display()
            );
            let hook = json!({
                "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
                "metadata": {"name": pod_name, "namespace": NS},
                "spec": {
                    "labelSelector": {"matchLabels": {"pod": pod_name}},
                    "postHooks": [{"exec": {
                        "container": "app", "execTimeout": "10s",
                        "retry": {"attempts": 3, "backoff": "2s", "onExitCodes": [75]},
                        "command": ["sh", "-c", script],
                    }}],
                },
            });
            scenarios::apply_hooks(cp, &[hook]);
            scenarios::wait_compiled(cp, NS, &pod_name, &[&webhook.identity]);
            let created = create(
                cp,
                &pod(NS, &pod_name, &["app"], json!({"pod": pod_name}), json!({})),
            );
            let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
            let old = leader;

            // The trigger for the target point; the leader is SIGKILLed the moment it is seen.
            let guard = Duration::from_secs(120);
            let dying = &mut controllers[old];
            let mut kill_if = |seen: bool| {
                if seen {
                    dying.kill();
                }
                seen
            };
            match target {
                Point::ReleasedOnThePodOnly => {
                    watch_for(cp, &["pod", &pod_name, "-n", NS], guard, |p| {
                        let h = first_hook(p);
                        kill_if(h["phase"] == "Pending" && h["retries"].as_u64() == Some(1))
                    });
                }
                Point::Backoff => {
                    watch_for(cp, &["restorerecords.restore-hooks.dev"], guard, |r| {
                        kill_if(
                            r["status"]["executions"]
                                .get(&uid)
                                .is_some_and(|e| attempts(e).1 >= 1),
                        )
                    });
                }
                Point::AttemptTwo => {
                    wait_until("attempt 2 running", guard, || kill_if(runs(&mark).0 >= 2));
                }
            }
            let killed_log = controllers[old].log();
            controllers[old].assert_no_forbidden();
            // What the dead leader left: the record (no controller writes it now) and the pod.
            let entry = record_of(cp, &uid).unwrap_or(Value::Null);
            let left = first_hook(&get_pod(cp, NS, &pod_name).unwrap());
            let point = match (attempts(&entry), left["phase"].as_str()) {
                ((1, 0), Some("Pending")) if left["retries"].as_u64() == Some(1) => {
                    Some(Point::ReleasedOnThePodOnly)
                }
                ((1, 1), Some("Pending")) => Some(Point::Backoff),
                ((2, _), _) => Some(Point::AttemptTwo),
                _ => None,
            };
            eprintln!(
                "{pod_name}: target {target:?}, the leader {} SIGKILLed at {point:?}: record \
                 {entry}, pod {left}, marks {:?}",
                controllers[old].identity,
                mark_lines(&mark)
            );

            // The other replica takes over; the dead one comes back as the standby (its old log
            // kept next to the new one).
            leader = 1 - old;
            controllers[leader].wait_leader(Duration::from_secs(120));
            let identity = controllers[old].identity.clone();
            let log = controllers[old].log_path();
            std::fs::rename(&log, log.with_extension(format!("before-{tried}.log"))).unwrap();
            controllers[old] = install.serve(ServeOptions::of(&controller, old));

            let ended = first_hook(&wait_hooks_ended(
                cp,
                NS,
                &pod_name,
                Duration::from_secs(180),
            ));
            let (starts, ends) = runs(&mark);
            let what = format!(
                "{pod_name} killed at {point:?}: {ended}; marks {:?}",
                mark_lines(&mark)
            );
            let pod_ref = format!("{NS}/{pod_name}");
            let attempt_two = |log: &str| {
                log_lines(log, "hook started", &pod_ref)
                    .iter()
                    .filter(|l| l["attempt"] == 2)
                    .count()
            };
            let new_leader_log = controllers[leader].log();
            match point {
                Some(Point::ReleasedOnThePodOnly | Point::Backoff) => {
                    // Attempt 2 ran exactly once, under the next leader, and succeeded.
                    assert_eq!(ended["phase"], "Succeeded", "{what}");
                    assert_eq!(ended["retries"], 1, "{what}");
                    assert_eq!((starts, ends), (2, 1), "{what}");
                    assert_eq!(attempt_two(&killed_log), 0, "{what}");
                    assert_eq!(
                        attempt_two(&new_leader_log),
                        1,
                        "{what}\n{}",
                        controllers[leader].log_tail(40)
                    );
                    if point == Some(Point::ReleasedOnThePodOnly) {
                        // The next leader learnt the release from the pod's signed status.
                        assert_eq!(
                            log_lines(
                                &new_leader_log,
                                "the pod's status shows this attempt released, the record did not yet: recording the release",
                                &pod_ref,
                            )
                            .len(),
                            1,
                            "{what}"
                        );
                    }
                }
                Some(Point::AttemptTwo) => {
                    // Attempt 2 ran under the dead leader, which alone could have seen its end:
                    // the next leader never runs it again and ends it interrupted (§6.10, §6.17).
                    assert_eq!(ended["phase"], "Failed", "{what}");
                    assert!(
                        ended["message"]
                            .as_str()
                            .unwrap_or_default()
                            .starts_with("interrupted"),
                        "{what}"
                    );
                    assert_eq!(starts, 2, "{what}");
                    assert_eq!(attempt_two(&new_leader_log), 0, "{what}");
                    // Nobody saw attempt 2 exit: no exit code (attempt 1's 75 is not its).
                    assert!(ended["exitCode"].is_null(), "{what}");
                }
                None => {
                    // Too early or too late for any point: whatever happened, never more than
                    // twice, and the hook ended.
                    assert!(starts <= 2, "{what}");
                }
            }
            eprintln!("{pod_name}: ended {ended}; {identity} restarted as the standby");
            if let Some(p) = point {
                *hit.entry(p).or_default() += 1;
            }
        }
    }
    eprintln!("points hit: {hit:?} in {tried} tries");
    // Nothing ran a third time, whatever the order the pods ended in.
    for n in 1..=tried {
        let m = install.mark(&format!("retry-{n}"));
        assert!(runs(&m).0 <= 2, "retry-{n}: {:?}", mark_lines(&m));
    }
}
