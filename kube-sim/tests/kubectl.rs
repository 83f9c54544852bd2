//! The real kubectl against the simulator: the proof that it speaks the protocol. The kubectl
//! is the one pinned with the real control plane (`realcp::pinned_kubectl`, built when missing),
//! never whatever is on `PATH`.

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

fn kubectl(kubeconfig: &Path, cache: &Path) -> Command {
    static PINNED: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let path = PINNED.get_or_init(|| realcp::pinned_kubectl().unwrap_or_else(|e| panic!("{e:#}")));
    let mut c = Command::new(path);
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

    // A watch: header, then rows as pods change. A pod that exists before it starts is in its
    // first list (without one kubectl prints nothing, not even the header): once its row is out,
    // kubectl has listed, and its watch starts from that list, so it sees what follows.
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let before: Pod = serde_json::from_value(json!({
        "metadata": {"name": "before"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &before).await.unwrap();
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
    let mut got = Vec::new();
    let listed = async {
        while let Some(l) = lines.next_line().await.unwrap() {
            got.push(l.clone());
            if l.starts_with("before ") {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), listed)
        .await
        .unwrap_or_else(|_| panic!("kubectl get -w never listed pod before: {got:?}"));
    let (code, out, err) = run({
        let mut c = kubectl(&kc, &cache);
        c.arg("apply").arg("-f").arg(&manifest);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "pod/web created");

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
        // At -v=2 its informer logs "Caches populated" once it has the object and watches it.
        "-v=2",
        "wait",
        "--for=jsonpath={.status.replicas}=4",
        "widget/big",
        "--timeout=20s",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut wait = wait.spawn().unwrap();
    // The status changes only once kubectl is watching: it must see the change as a watch event.
    let mut log = BufReader::new(wait.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let synced = async {
        while let Some(l) = log.next_line().await.unwrap() {
            let populated = l.contains("Caches populated");
            seen.push(l);
            if populated {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), synced)
        .await
        .unwrap_or_else(|_| panic!("kubectl wait never populated its cache: {seen:#?}"));
    let rest_of_log = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(l)) = log.next_line().await {
            rest.push(l);
        }
        rest
    });
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
    seen.extend(rest_of_log.await.unwrap());
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        seen.join("\n")
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("condition met"));
    t.sim.shutdown().await;
}
