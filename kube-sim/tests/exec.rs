//! Exec over WebSocket through `Api::<Pod>::exec`.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, PostParams};
use serde_json::json;
use tokio::io::AsyncReadExt as _;

struct Output {
    stdout: String,
    stderr: String,
    status: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>,
}

async fn run(
    pods: &Api<Pod>,
    name: &str,
    container: Option<&str>,
    cmd: &[&str],
) -> kube::Result<Output> {
    let mut ap = AttachParams::default().stdout(true).stderr(true);
    if let Some(c) = container {
        ap = ap.container(c);
    }
    let mut proc = pods
        .exec(
            name,
            cmd.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            &ap,
        )
        .await?;
    let mut out = proc.stdout().unwrap();
    let mut err = proc.stderr().unwrap();
    let status = proc.take_status().unwrap();
    // Both streams drained concurrently: AttachedProcess blocks if either fills up.
    let read_out = async {
        let mut s = String::new();
        out.read_to_string(&mut s).await.unwrap();
        s
    };
    let read_err = async {
        let mut s = String::new();
        err.read_to_string(&mut s).await.unwrap();
        s
    };
    let (stdout, stderr, status) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(read_out, read_err, status)
    })
    .await
    .expect("exec finished in time");
    proc.join().await.unwrap();
    Ok(Output {
        stdout,
        stderr,
        status,
    })
}

async fn running_pod(t: &TestSim, name: &str) -> Api<Pod> {
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    pods.create(&PostParams::default(), &pod(name, json!({})))
        .await
        .unwrap();
    wait_pod(&pods, name, ready).await;
    pods
}

#[tokio::test]
async fn exec_streams_output_and_exit_status() {
    let t = sim().await;
    let pods = running_pod(&t, "p").await;
    let ok = run(
        &pods,
        "p",
        Some("app"),
        &["sh", "-c", "echo hi; echo oops >&2; pwd; echo $POD_NAME"],
    )
    .await
    .unwrap();
    let dir = t.sim.pod_dir("default", "p");
    assert_eq!(ok.stdout, format!("hi\n{}\np\n", dir.display()));
    assert_eq!(ok.stderr, "oops\n");
    assert_eq!(ok.status.unwrap().status.as_deref(), Some("Success"));

    // Non-zero exit: the code is in details.causes[reason=ExitCode].
    let bad = run(&pods, "p", None, &["sh", "-c", "echo partial; exit 3"])
        .await
        .unwrap();
    assert_eq!(bad.stdout, "partial\n");
    let st = bad.status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("NonZeroExitCode"));
    let causes = st.details.unwrap().causes.unwrap();
    assert_eq!(causes[0].reason.as_deref(), Some("ExitCode"));
    assert_eq!(causes[0].message.as_deref(), Some("3"));

    // Large output on both streams does not deadlock.
    let big = run(
        &pods,
        "p",
        None,
        &["sh", "-c", "seq 1 20000; seq 1 20000 >&2"],
    )
    .await
    .unwrap();
    assert_eq!(big.stdout.lines().count(), 20000);
    assert_eq!(big.stderr.lines().count(), 20000);
    t.sim.shutdown().await;
}

#[tokio::test]
async fn exec_errors() {
    let t = sim().await;
    let pods = running_pod(&t, "p").await;
    let e = match run(&pods, "missing", None, &["true"]).await {
        Err(kube::Error::Api(s)) => s,
        other => panic!("unexpected {:?}", other.map(|o| o.stdout)),
    };
    assert_eq!(e.code, 404);
    let e = match run(&pods, "p", Some("nope"), &["true"]).await {
        Err(kube::Error::Api(s)) => s,
        other => panic!("unexpected {:?}", other.map(|o| o.stdout)),
    };
    assert_eq!(e.code, 400);
    assert!(
        e.message.contains("container nope is not valid"),
        "{}",
        e.message
    );

    // A container that is not running yet.
    t.sim.stop_kubelet();
    pods.create(&PostParams::default(), &pod("pending", json!({})))
        .await
        .unwrap();
    assert!(
        matches!(run(&pods, "pending", None, &["true"]).await, Err(kube::Error::Api(s)) if s.code == 400)
    );
    t.sim.start_kubelet();

    // A missing executable is a Failure status, not a hang.
    let out = run(&pods, "p", None, &["/definitely/not/here"])
        .await
        .unwrap();
    assert_eq!(out.status.unwrap().status.as_deref(), Some("Failure"));
    t.sim.shutdown().await;
}

#[tokio::test]
async fn pod_deleted_mid_exec_breaks_the_stream() {
    let t = sim().await;
    let pods = running_pod(&t, "victim").await;
    t.sim.faults().delete_pod_on_exec("default", "victim");
    let out = run(&pods, "victim", None, &["sh", "-c", "sleep 5; echo never"])
        .await
        .unwrap();
    assert!(out.status.is_none(), "no exit status on a broken stream");
    assert_eq!(out.stdout, "");
    assert!(pods.get_opt("victim").await.unwrap().is_none());
    t.sim.shutdown().await;
}

#[tokio::test]
async fn exec_into_a_native_sidecar() {
    let t = sim().await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "side"},
        "spec": {
            "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always",
                                "env": [{"name": "ROLE", "value": "sidecar"}]}],
            "containers": [{"name": "app", "image": "busybox"}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    wait_pod(&pods, "side", ready).await;
    let out = run(&pods, "side", Some("proxy"), &["sh", "-c", "echo $ROLE"])
        .await
        .unwrap();
    assert_eq!(out.stdout, "sidecar\n");
    assert_eq!(out.status.unwrap().status.as_deref(), Some("Success"));
    t.sim.shutdown().await;
}
