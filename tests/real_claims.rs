//! Claims at a leader change, on the real control plane (e2e/realcp) under the chart's
//! ServiceAccounts (docs/behaviour.md §6.9, §6.10): with one exec slot, `hold`'s hook holds it
//! while `c1`'s hook is claimed (recorded `Running`, its exec not started) and `c2`'s waits.
//!
//! - SIGTERM to the leader: it gives the claim back on the pod and lets go; the next leader runs
//!   every hook exactly once (counted on disk) and none ends `interrupted`.
//! - SIGKILL: the claim cannot be given back. The next leader ends the claimed hook
//!   `interrupted` (its command never ran), like the running one; at most twice the slots end so,
//!   and no hook runs twice.

mod real;

use std::time::Duration;

use real::*;
use serde_json::{Value, json};

const NS: &str = "claims";
const WAITING: [&str; 2] = ["c1", "c2"];

fn claims_at_a_leader_change(signal: &str) {
    let install = Install::new(InstallOptions {
        // One slot, so one claim ticket; a short grace only to keep the test short (the killed
        // leader's hooks are declared interrupted after startedAt + execTimeout + this).
        helm_args: vec![
            "--set".into(),
            "config.maxConcurrentExecs=1".into(),
            "--set".into(),
            "config.inheritedExecGrace=5s".into(),
        ],
        ..InstallOptions::default()
    });
    let cp = &install.cp;
    let mut first = install.start(0);
    first.wait_leader(Duration::from_secs(60));
    let second = install.start(1);
    namespace(cp, NS, json!({NAMESPACE_LABEL: "r-claims"}));

    let mark = |pod: &str| install.mark(&format!("{pod}-hook"));
    let mut hooks = Vec::new();
    for pod in ["hold"].iter().chain(WAITING.iter()) {
        // `hold` runs long enough for the test to see c1 claimed and signal the leader.
        let secs = if *pod == "hold" { 12 } else { 0 };
        hooks.push(json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": pod, "namespace": NS},
            "spec": {
                "labelSelector": {"matchLabels": {"pod": pod}},
                "postHooks": [{"exec": {"container": "app", "execTimeout": "20s", "command": ["sh", "-c", format!(
                    "{}; sleep {secs}; {}", mark_cmd(&mark(pod), "start"), mark_cmd(&mark(pod), "end"))]}}],
            },
        }));
    }
    scenarios::apply_hooks(cp, &hooks);
    scenarios::wait_compiled(
        cp,
        NS,
        "c2",
        &[
            first.webhook().identity.as_str(),
            second.webhook().identity.as_str(),
        ],
    );
    create(
        cp,
        &pod(NS, "hold", &["app"], json!({"pod": "hold"}), json!({})),
    );
    wait_until("hold's hook running", Duration::from_secs(90), || {
        (mark_lines(&mark("hold")).len() == 1)
            .then_some(())
            .ok_or("not started")
    });
    for p in WAITING {
        create(cp, &pod(NS, p, &["app"], json!({"pod": p}), json!({})));
    }
    wait_until(
        "c1 claimed: Running on the pod and started in the record, its command not started",
        Duration::from_secs(60),
        || {
            let pod = get_pod(cp, NS, "c1").ok_or("no pod")?;
            let hooks = scenarios::hooks_of(&pod);
            let uid = pod["metadata"]["uid"].as_str().ok_or("no uid")?;
            let records = get_json(cp, &["get", "restorerecords.restore-hooks.dev"]);
            let in_record = records.is_some_and(|l| {
                l["items"].as_array().is_some_and(|items| {
                    items
                        .iter()
                        .any(|r| !r["status"]["executions"][uid]["hooks"]["0"].is_null())
                })
            });
            (hooks.first().is_some_and(|h| h["phase"] == "Running")
                && in_record
                && mark_lines(&mark("c1")).is_empty())
            .then_some(())
            .ok_or_else(|| format!("{hooks:?}, in the record: {in_record}"))
        },
    );
    eprintln!("c1 claimed: {signal} to the leader");
    let mut exited_cleanly = false;
    match signal {
        "KILL" => first.controller_mut().kill(),
        "TERM" => exited_cleanly = first.controller_mut().terminate(Duration::from_secs(60)),
        other => panic!("{other}"),
    }
    second.wait_leader(Duration::from_secs(60));
    let ended: Vec<(&str, Value)> = ["hold", "c1", "c2"]
        .into_iter()
        .map(|p| (p, wait_hooks_ended(cp, NS, p, Duration::from_secs(120))))
        .collect();
    let mut interrupted = Vec::new();
    for (p, pod) in &ended {
        let hook = &scenarios::hooks_of(pod)[0];
        let starts = mark_lines(&mark(p))
            .iter()
            .filter(|l| l.starts_with("start"))
            .count();
        assert!(starts <= 1, "{p}: its command ran {starts} times");
        if hook["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("interrupted"))
        {
            interrupted.push(*p);
        } else {
            assert_eq!(hook["phase"], "Succeeded", "{p}: {hook}");
            assert_eq!(starts, 1, "{p}");
        }
    }
    eprintln!("interrupted: {interrupted:?}");
    match signal {
        "TERM" => {
            assert!(
                interrupted.is_empty(),
                "a leader that shut down gives its claims back: {interrupted:?}"
            );
            let c1 = &scenarios::hooks_of(&ended[1].1)[0];
            assert_eq!(
                (c1["retries"].as_u64(), c1["unavailable"].as_u64()),
                (Some(1), Some(1)),
                "c1's claim given back is an attempt that did not start: {c1}"
            );
            assert!(
                exited_cleanly,
                "the leader did not exit by itself after SIGTERM:\n{}",
                first.controller().log_tail(30)
            );
        }
        _ => {
            assert_eq!(
                interrupted,
                ["hold", "c1"],
                "the running hook and the claimed one"
            );
            assert!(
                mark_lines(&mark("c1")).is_empty(),
                "the claimed hook's command never ran"
            );
        }
    }
    assert!(interrupted.len() <= 2, "at most slots + claims interrupted");
    first.assert_no_forbidden();
    second.assert_no_forbidden();
}

#[test]
fn a_claim_outstanding_at_sigterm_is_given_back_and_runs_once() {
    claims_at_a_leader_change("TERM");
}

#[test]
fn claims_outstanding_at_sigkill_end_interrupted_and_never_run_twice() {
    claims_at_a_leader_change("KILL");
}
