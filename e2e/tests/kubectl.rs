//! The real kubectl against the simulator: the proof that it speaks the protocol.
//! Skipped (with a note) when `kubectl` is not on PATH.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

fn kubectl_available() -> bool {
    std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn kubectl(kubeconfig: &Path, cache: &Path) -> Command {
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--request-timeout=10s")
        .kill_on_drop(true);
    c
}

async fn run(mut c: Command) -> (i32, String, String) {
    let out = tokio::time::timeout(Duration::from_secs(20), c.output())
        .await
        .expect("kubectl finished in time")
        .expect("kubectl ran");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn kubectl_get_watch_apply_exec() {
    if !kubectl_available() {
        eprintln!("note: kubectl not on PATH; skipping the kubectl test");
        return;
    }
    let t = sim().await;
    let kc = t.dir.path().join("kubeconfig");
    let cache = t.dir.path().join("kube-cache");
    t.sim.write_kubeconfig(&kc).unwrap();

    let (code, out, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.args(["get", "pods"]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.is_empty() && err.contains("No resources found"),
        "{out}{err}"
    );

    // A watch: header, then rows as pods change.
    let mut watch = kubectl(&kc, &cache);
    watch
        .args(["get", "pods", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut watch = watch.spawn().unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();

    let manifest = t.dir.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n  containers:\n  - name: app\n    image: nginx:1.27\n",
    )
    .unwrap();
    // Give the watch a moment to be established, so it sees the pod appear.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, out, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.arg("apply").arg("-f").arg(&manifest);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "pod/web created");

    let mut got = Vec::new();
    let read = async {
        while let Some(l) = lines.next_line().await.unwrap() {
            got.push(l.clone());
            if l.contains("web") && l.contains("1/1") && l.contains("Running") {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_else(|_| panic!("kubectl get -w output: {got:?}"));
    assert!(
        got[0].starts_with("NAME") && got[0].contains("STATUS"),
        "{got:?}"
    );
    watch.kill().await.unwrap();

    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    wait_pod(&pods, "web", ready).await;

    // Re-applying an unchanged manifest is a no-op; a changed one patches.
    let (_, out, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.arg("apply").arg("-f").arg(&manifest);
        c
    })
    .await;
    assert_eq!(out.trim(), "pod/web unchanged", "{err}");

    let (code, out, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.args(["get", "pods"]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("web") && out.contains("Running") && out.contains("1/1"),
        "{out}"
    );

    let (code, out, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.args(["exec", "web", "--", "sh", "-c", "echo hi"]);
        c
    })
    .await;
    assert_eq!((code, out.as_str()), (0, "hi\n"), "{err}");
    let (code, out, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.args(["exec", "web", "--", "sh", "-c", "echo oops >&2; exit 3"]);
        c
    })
    .await;
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("oops"), "{err}");

    // A second pod created through the API shows up for kubectl too.
    pods.create(&PostParams::default(), &pod("api-made", json!({})))
        .await
        .unwrap();
    let (_, out, _) = run({
        let mut c = kubectl(&kc, &cache);
        c.args(["get", "pods", "-l", "app=web", "-o", "name"]);
        c
    })
    .await;
    assert_eq!(out.trim(), "pod/web");
    t.sim.shutdown().await;
}
