//! Measured, not asserted: on the real API server, the time from a restored pod becoming
//! Running to its first hook starting, over 200 pods created at once (`REAL_LATENCY_PODS`
//! changes the count). "Running" is when a watch in the test sees the pod's phase change; "hook
//! starts" is the hook's own first instruction (`date +%s%N`, same host, same clock). The
//! numbers are printed (run with `--nocapture` to see them); only correctness is asserted:
//! every hook ran exactly once.

mod real;

use std::collections::BTreeMap;
use std::io::BufReader;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use real::*;
use serde_json::{Value, json};

const NS: &str = "latency";

/// A child killed when dropped (a panic included).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[test]
fn running_to_first_hook_over_many_pods() {
    let _heavy = heavy();
    let suite = Instant::now();
    let n: usize = std::env::var("REAL_LATENCY_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;
    namespace(cp, NS, json!({NAMESPACE_LABEL: "r-latency"}));
    let dir = install.mark("latency");
    std::fs::create_dir_all(&dir).unwrap();

    // The test's own watch: when each pod was first seen Running.
    let running: Arc<Mutex<BTreeMap<String, u128>>> = Arc::default();
    let mut watch = Command::new(cp.kubectl_path())
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!(
            "--cache-dir={}",
            cp.work_dir().join("kubectl-cache-watch").display()
        ))
        .args(["get", "pods", "-n", NS, "--watch", "-o", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let watch = KillOnDrop(watch);
    let seen = running.clone();
    let reader = std::thread::spawn(move || {
        for v in serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>()
        {
            let Ok(pod) = v else { break };
            if pod["status"]["phase"] == "Running" {
                let name = pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                seen.lock().unwrap().entry(name).or_insert_with(now_nanos);
            }
        }
    });
    // The watch is established once it reports a pod.
    create(cp, &pod(NS, "sentinel", &["app"], json!({}), json!({})));
    wait_until(
        "the test's watch to see a Running pod",
        Duration::from_secs(60),
        || {
            running
                .lock()
                .unwrap()
                .contains_key("sentinel")
                .then_some(())
                .ok_or_else(String::new)
        },
    );

    let names: Vec<String> = (0..n).map(|i| format!("p-{i:03}")).collect();
    let pods: Vec<Value> = names
        .iter()
        .map(|name| {
            let mark = dir.join(name);
            pod(
                NS,
                name,
                &["app"],
                json!({"app": "latency"}),
                json!({"post.hook.restore.velero.io/command": serde_json::to_string(&[
                    "sh", "-c", &format!("date +%s%N >> '{}'", mark.display())]).unwrap()}),
            )
        })
        .collect();
    let created = Instant::now();
    cp.kubectl_stdin(
        ["create", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "List", "items": pods}).to_string(),
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let create_took = created.elapsed();
    wait_until(
        format!("{n} hooks to run"),
        Duration::from_secs(600),
        || {
            let done = names.iter().filter(|p| dir.join(p).exists()).count();
            if done == n {
                Ok(())
            } else {
                Err(format!("{done} of {n}"))
            }
        },
    );
    let all_hooks = created.elapsed();
    for p in &names {
        wait_hooks_ended(cp, NS, p, Duration::from_secs(120));
    }
    drop(watch);
    let _ = reader.join();

    let running = running.lock().unwrap().clone();
    let mut deltas_ms = Vec::new();
    for p in &names {
        let lines = mark_lines(&dir.join(p));
        assert_eq!(lines.len(), 1, "{p}: the hook ran {} times", lines.len());
        let started: u128 = lines[0].trim().parse().unwrap();
        let up = *running
            .get(p)
            .unwrap_or_else(|| panic!("the watch never saw {p} Running"));
        deltas_ms.push((started as f64 - up as f64) / 1e6);
    }
    deltas_ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let metrics = serve.controller().metrics();
    eprintln!(
        "REAL LATENCY: {n} restored pods created in {:.1} s (one kubectl create, each through the \
         webhook); all first hooks started within {:.1} s of the first create.\n\
         REAL LATENCY: Running (seen by a watch) -> first hook starts (in the hook): \
         p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, min {:.0} ms, max {:.0} ms \
         (--max-concurrent-execs {}, per namespace three quarters of it)\n\
         REAL LATENCY: test wall time {:.1} s (control plane, chart and server included)",
        create_took.as_secs_f64(),
        all_hooks.as_secs_f64(),
        percentile(&deltas_ms, 50.0),
        percentile(&deltas_ms, 90.0),
        percentile(&deltas_ms, 99.0),
        deltas_ms[0],
        deltas_ms[deltas_ms.len() - 1],
        serve
            .controller()
            .args
            .iter()
            .find_map(|a| a.strip_prefix("--max-concurrent-execs="))
            .unwrap_or("?"),
        suite.elapsed().as_secs_f64(),
    );
    assert_eq!(
        metric(&metrics, "restore_hooks_exec_hooks_total"),
        n as f64,
        "hooks counted by the server"
    );
    serve.assert_no_forbidden();
}
