//! Two `serve` replicas on a real Lease (e2e/realcp): the leader is stopped (SIGKILL, and
//! separately SIGTERM) while a hook runs; the other takes over. No hook runs twice (counted on
//! disk), nothing is recorded twice (Events), a succeeded hook is never recorded failed (every
//! status change is watched).

mod real;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use real::*;
use serde_json::{Value, json};

const NS: &str = "fo";
const PODS: [&str; 3] = ["fo-0", "fo-1", "fo-2"];

/// Phases seen per (pod, hook index), in order.
type Seen = BTreeMap<(String, usize), Vec<String>>;

/// Every phase each (pod, hook) was seen in, in order, by polling the pods until stopped. Only
/// polls the API server answered count as samples: a watcher whose every poll failed saw nothing,
/// and must not pass for one that saw no phase go back.
struct Watcher {
    stop: Arc<AtomicBool>,
    /// Samples taken so far (polls the API server answered).
    samples: Arc<AtomicUsize>,
    /// The last failed poll's error, if any.
    failed: Arc<std::sync::Mutex<Option<String>>>,
    thread: Option<std::thread::JoinHandle<Seen>>,
}

impl Watcher {
    fn start(cp: &ControlPlane) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let kubeconfig = cp.kubeconfig().to_path_buf();
        let kubectl = cp.kubectl_path().to_path_buf();
        let cache = cp.work_dir().join("kubectl-cache-watcher");
        let flag = stop.clone();
        let samples = Arc::new(AtomicUsize::new(0));
        let sampled = samples.clone();
        let failed = Arc::new(std::sync::Mutex::new(None));
        let failure = failed.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Seen::new();
            loop {
                let last = flag.load(Ordering::SeqCst);
                let out = std::process::Command::new(&kubectl)
                    .arg(format!("--kubeconfig={}", kubeconfig.display()))
                    .arg(format!("--cache-dir={}", cache.display()))
                    .args(["get", "pods", "-n", NS, "-o", "json"])
                    .output()
                    .unwrap();
                if !out.status.success() {
                    *failure.lock().unwrap() =
                        Some(String::from_utf8_lossy(&out.stderr).into_owned());
                } else {
                    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
                    for p in list["items"].as_array().into_iter().flatten() {
                        let name = p["metadata"]["name"].as_str().unwrap().to_string();
                        for (i, h) in scenarios::hooks_of(p).iter().enumerate() {
                            let phase = h["phase"].as_str().unwrap_or_default().to_string();
                            let seq = seen.entry((name.clone(), i)).or_default();
                            if seq.last() != Some(&phase) {
                                seq.push(phase);
                            }
                        }
                    }
                    sampled.fetch_add(1, Ordering::SeqCst);
                }
                if last {
                    return seen;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        Watcher {
            stop,
            samples,
            failed,
            thread: Some(thread),
        }
    }

    /// Waits until a sample that started after this call is in.
    fn sample_after_now(&self) {
        let now = self.samples.load(Ordering::SeqCst);
        wait_until(
            "the watcher's next full sample",
            Duration::from_secs(60),
            || {
                if self.samples.load(Ordering::SeqCst) >= now + 2 {
                    Ok(())
                } else {
                    Err(format!(
                        "last failed poll: {:?}",
                        self.failed.lock().unwrap()
                    ))
                }
            },
        );
    }

    /// What it saw; panics when it saw nothing (every poll failed).
    fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        let seen = self.thread.take().unwrap().join().unwrap();
        let samples = self.samples.load(Ordering::SeqCst);
        assert!(
            samples >= 2 && !seen.is_empty(),
            "the watcher saw nothing ({samples} answered polls; last failure {:?})",
            self.failed.lock().unwrap()
        );
        seen
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn mark_of(install: &Install, pod: &str, hook: &str) -> std::path::PathBuf {
    install.mark(&format!("{pod}-{hook}"))
}

/// The shared part: `signal` goes to the leader while every pod's first hook runs.
fn leader_stopped_mid_hook(signal: &str) {
    let install = Install::new(InstallOptions {
        // Only to keep the test short: the interrupted hook is declared so after startedAt +
        // execTimeout + this (the chart's flag, from the chart's value).
        helm_args: vec!["--set".into(), "config.inheritedExecGrace=5s".into()],
        ..InstallOptions::default()
    });
    let cp = &install.cp;
    let mut first = install.start(0);
    first.wait_leader(Duration::from_secs(60));
    let second = install.start(1);
    assert!(!second.is_leader());
    namespace(cp, NS, json!({NAMESPACE_LABEL: "r-fo"}));

    let mut hooks = Vec::new();
    for pod in PODS.iter().chain(["fo-before"].iter()) {
        let slow = mark_of(&install, pod, "slow");
        // Long enough for the test to see every first hook running and stop the leader then.
        let secs = if *pod == "fo-before" { 0 } else { 10 };
        hooks.push(json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": pod, "namespace": NS},
            "spec": {
                "labelSelector": {"matchLabels": {"pod": pod}},
                "postHooks": [
                    {"exec": {"container": "app", "execTimeout": "15s", "command": ["sh", "-c", format!(
                        "{}; sleep {secs}; {}", mark_cmd(&slow, "start"), mark_cmd(&slow, "end"))]}},
                    {"exec": {"container": "app", "command": ["sh", "-c", mark_cmd(&mark_of(&install, pod, "h1"), "ran")]}},
                    {"exec": {"container": "app", "command": ["sh", "-c", mark_cmd(&mark_of(&install, pod, "h2"), "ran")]}},
                ],
            },
        }));
    }
    scenarios::apply_hooks(cp, &hooks);
    scenarios::wait_compiled(
        cp,
        NS,
        "fo-0",
        &[
            first.webhook().identity.as_str(),
            second.webhook().identity.as_str(),
        ],
    );
    let watcher = Watcher::start(cp);

    // A pod whose hooks all ran under the first leader: the second must not run them again.
    create(
        cp,
        &pod(
            NS,
            "fo-before",
            &["app"],
            json!({"pod": "fo-before"}),
            json!({}),
        ),
    );
    let before = wait_hooks_ended(cp, NS, "fo-before", Duration::from_secs(90));
    assert_eq!(before["metadata"]["labels"][EXEC_LABEL], "done");

    for p in PODS {
        create(cp, &pod(NS, p, &["app"], json!({"pod": p}), json!({})));
    }
    for p in PODS {
        wait_until(
            format!("{p}'s first hook running"),
            Duration::from_secs(90),
            || {
                let pod = get_pod(cp, NS, p).ok_or("no pod")?;
                let hooks = scenarios::hooks_of(&pod);
                let started = mark_lines(&mark_of(&install, p, "slow")).len() == 1;
                (hooks.first().is_some_and(|h| h["phase"] == "Running") && started)
                    .then_some(())
                    .ok_or_else(|| format!("{hooks:?}"))
            },
        );
    }
    eprintln!(
        "every first hook runs: {signal} to the leader {}",
        first.controller().identity
    );
    let mut exited_cleanly = false;
    match signal {
        "KILL" => first.controller_mut().kill(),
        "TERM" => exited_cleanly = first.controller_mut().terminate(Duration::from_secs(60)),
        other => panic!("{other}"),
    }
    second.wait_leader(Duration::from_secs(60));
    let ended: Vec<Value> = PODS
        .iter()
        .map(|p| wait_hooks_ended(cp, NS, p, Duration::from_secs(120)))
        .collect();
    // The new leader's last writes about a pod are its Events: its HooksCompleted and a HookFailed
    // per failed hook, sent in the background and in any order (docs/behaviour.md §6.12). Once
    // every pod has them, a wrong write would have been made, and a sample taken after that
    // shows the final state.
    for (p, pod) in PODS.iter().zip(&ended) {
        let failed = scenarios::hooks_of(pod)
            .iter()
            .filter(|h| h["phase"] == "Failed")
            .count();
        wait_until(
            format!("the HooksCompleted and {failed} HookFailed Event(s) of {p}"),
            Duration::from_secs(60),
            || {
                let completed = events_with(cp, NS, p, "HooksCompleted").len();
                let hook_failed = events_with(cp, NS, p, "HookFailed").len();
                (completed >= 1 && hook_failed >= failed)
                    .then_some(())
                    .ok_or_else(|| format!("{completed} HooksCompleted, {hook_failed} HookFailed"))
            },
        );
    }
    watcher.sample_after_now();
    let seen = watcher.finish();
    eprintln!("phases seen: {seen:?}");

    for (p, pod) in PODS.iter().zip(&ended) {
        let hooks = scenarios::hooks_of(pod);
        let slow = mark_lines(&mark_of(&install, p, "slow"));
        assert_eq!(
            slow.iter().filter(|l| l.starts_with("start")).count(),
            1,
            "{p}: the interrupted hook ran again: {slow:?}"
        );
        for h in ["h1", "h2"] {
            assert_eq!(mark_lines(&mark_of(&install, p, h)).len(), 1, "{p} {h}");
        }
        assert_eq!(hooks[1]["phase"], "Succeeded", "{p}: {hooks:?}");
        assert_eq!(hooks[2]["phase"], "Succeeded", "{p}: {hooks:?}");
        match signal {
            // Nobody saw the exec end: recorded interrupted once its deadline passed.
            "KILL" => {
                assert_eq!(hooks[0]["phase"], "Failed", "{p}: {hooks:?}");
                // docs/behaviour.md §6.14: the message contains "interrupted".
                assert!(
                    hooks[0]["message"]
                        .as_str()
                        .unwrap()
                        .starts_with("interrupted"),
                    "{p}: {hooks:?}"
                );
            }
            // The stopping leader let the running hook finish and recorded it.
            _ => {
                assert_eq!(hooks[0]["phase"], "Succeeded", "{p}: {hooks:?}");
                assert_eq!(slow.len(), 2, "{p}: {slow:?}");
            }
        }
        // Recorded once: one HooksCompleted naming the hooks that succeeded, one HookFailed per
        // hook that failed.
        let events = events_about(cp, NS, p);
        let completed: Vec<&Value> = events
            .iter()
            .filter(|e| e["reason"] == "HooksCompleted")
            .collect();
        assert_eq!(completed.len(), 1, "{p}: {events:?}");
        assert_eq!(
            completed[0]["count"].as_i64().unwrap_or(1),
            1,
            "{p}: {events:?}"
        );
        let summary = completed[0]["message"].as_str().unwrap();
        for (i, h) in hooks.iter().enumerate() {
            let position = format!("(#{i},");
            let succeeded = h["phase"] == "Succeeded";
            assert_eq!(
                summary.contains(&position),
                succeeded,
                "{p} hook #{i} ({}): HooksCompleted names exactly the hooks that succeeded: {summary}",
                h["phase"]
            );
            let n = events
                .iter()
                .filter(|e| {
                    e["reason"] == "HookFailed"
                        && e["message"].as_str().unwrap().contains(&position)
                })
                .map(|e| e["count"].as_i64().unwrap_or(1))
                .sum::<i64>();
            assert_eq!(
                n,
                i64::from(!succeeded),
                "{p} hook #{i}: HookFailed recorded {n} times: {events:?}"
            );
        }
        assert!(
            events.iter().all(|e| e["reason"] != "HookSucceeded"),
            "{p}: successes get no Event of their own: {events:?}"
        );
    }
    // fo-before: untouched by the second leader.
    for h in ["h1", "h2"] {
        assert_eq!(mark_lines(&mark_of(&install, "fo-before", h)).len(), 1);
    }
    assert_eq!(
        mark_lines(&mark_of(&install, "fo-before", "slow")).len(),
        2,
        "fo-before's first hook"
    );
    assert_eq!(
        scenarios::hooks_of(&get_pod(cp, NS, "fo-before").unwrap())
            .iter()
            .filter(|h| h["phase"] == "Succeeded")
            .count(),
        3
    );
    // No terminal phase ever changed, and a succeeded hook was never recorded failed.
    for ((p, i), phases) in &seen {
        if let Some(t) = phases
            .iter()
            .position(|ph| ["Succeeded", "Failed", "Skipped"].contains(&ph.as_str()))
        {
            assert!(
                phases[t..].iter().all(|ph| ph == &phases[t]),
                "{p} hook #{i} went {phases:?}"
            );
        }
    }
    if signal == "TERM" {
        assert!(
            exited_cleanly,
            "the leader did not exit by itself after SIGTERM:\n{}",
            first.controller().log_tail(30)
        );
    }
    let phase = if signal == "KILL" {
        "PartiallyFailed"
    } else {
        "Completed"
    };
    wait_restore_run(cp, "r-fo", &[phase], Duration::from_secs(60));
    first.assert_no_forbidden();
    second.assert_no_forbidden();
}

#[test]
fn sigkill_of_the_leader_mid_hook() {
    leader_stopped_mid_hook("KILL");
}

#[test]
fn sigterm_of_the_leader_mid_hook() {
    leader_stopped_mid_hook("TERM");
}
