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

/// A CRD's `additionalPrinterColumns` as kubectl shows them: the server renders the table
/// (string, integer and date columns, JSONPath filters, an empty cell where the path finds
/// nothing, `priority: 1` columns only with `-o wide`), and `kubectl wait --for=jsonpath` on a
/// custom resource returns once its status says so.
#[tokio::test]
async fn kubectl_prints_printer_columns_of_custom_resources() {
    if !kubectl_available() {
        eprintln!("note: kubectl not on PATH; skipping the kubectl test");
        return;
    }
    let t = sim().await;
    let kc = t.dir.path().join("kubeconfig");
    let cache = t.dir.path().join("kube-cache");
    t.sim.write_kubeconfig(&kc).unwrap();
    let get = |args: &'static [&'static str]| {
        let mut c = kubectl(&kc, &cache);
        c.args(args);
        c
    };

    let crd = t.dir.path().join("crd.yaml");
    std::fs::write(
        &crd,
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    additionalPrinterColumns:
    - {name: Size, type: string, jsonPath: .spec.size}
    - {name: Replicas, type: integer, jsonPath: .status.replicas}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: Owner, type: string, jsonPath: .spec.owner, priority: 1}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
"#,
    )
    .unwrap();
    let (code, _, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.arg("apply").arg("-f").arg(&crd);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    let widgets = t.dir.path().join("widgets.yaml");
    std::fs::write(
        &widgets,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: big}\nspec: {size: L, owner: ops}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: new}\nspec: {size: S}\n",
    )
    .unwrap();
    let (code, _, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.arg("apply").arg("-f").arg(&widgets);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    let gvk = kube::core::GroupVersionKind::gvk("example.com", "v1", "Widget");
    let api: Api<kube::api::DynamicObject> =
        Api::default_namespaced_with(t.client.clone(), &kube::core::ApiResource::from_gvk(&gvk));
    let status = json!({"status": {"replicas": 3, "conditions": [
        {"type": "Progressing", "status": "False"},
        {"type": "Ready", "status": "True"},
    ]}});
    api.patch_status(
        "big",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();

    let (code, out, err) = run(get(&["get", "widgets"])).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "SIZE", "REPLICAS", "READY", "AGE"],
        "{out}"
    );
    let big: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&big[..4], ["big", "L", "3", "True"], "{out}");
    // The new widget has no status: its Replicas and Ready cells are empty.
    let new: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(&new[..2], ["new", "S"], "{out}");
    assert_eq!(new.len(), 3, "name, size and age only: {out}");
    assert!(new[2].ends_with('s'), "an age: {out}");

    let (code, out, err) = run(get(&["get", "wd", "big", "-o", "wide"])).await;
    assert_eq!(code, 0, "{err}");
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "SIZE", "REPLICAS", "READY", "OWNER", "AGE"],
        "{out}"
    );
    assert!(out.lines().nth(1).unwrap().contains("ops"), "{out}");

    // kubectl wait reads the object, then watches it until the JSONPath matches.
    let mut wait = kubectl(&kc, &cache);
    wait.args([
        "wait",
        "--for=jsonpath={.status.replicas}=4",
        "widget/big",
        "--timeout=20s",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let wait = wait.spawn().unwrap();
    // Usually kubectl is watching by the time the status changes; if not, its first read sees
    // the new status. It must return either way: the pause only makes the watch path likely.
    tokio::time::sleep(Duration::from_millis(500)).await;
    api.patch_status(
        "big",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&json!({"status": {"replicas": 4}})),
    )
    .await
    .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(20), wait.wait_with_output())
        .await
        .expect("kubectl wait returned")
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("condition met"));
    t.sim.shutdown().await;
}
