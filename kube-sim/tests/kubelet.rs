//! The kubelet stand-in.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

fn pod_json(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn init_containers_run_in_order_then_ready() {
    let t = sim().await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let p = pod_json(json!({
        "metadata": {"name": "db"},
        "spec": {
            "initContainers": [
                {"name": "one", "image": "busybox", "command": ["sh", "-c"], "args": ["echo $GREETING > first.txt; echo out; echo err >&2"],
                 "env": [{"name": "GREETING", "value": "hello"}]},
                {"name": "two", "image": "busybox", "command": ["sh", "-c", "cat first.txt > second.txt; echo $POD_NAME/$POD_NAMESPACE >> second.txt"]},
                {"name": "no-command", "image": "busybox"},
                {"name": "sidecar", "image": "envoy", "restartPolicy": "Always"},
            ],
            "containers": [{"name": "db", "image": "postgres"}],
        },
    }));
    let mut log = t.sim.subscribe_log();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let done = wait_pod(&pods, "db", ready).await;
    let dir = t.sim.pod_dir("default", "db");
    assert_eq!(
        std::fs::read_to_string(dir.join("second.txt")).unwrap(),
        "hello\ndb/default\n"
    );
    let st = done.status.unwrap();
    assert_eq!(st.phase.as_deref(), Some("Running"));
    let inits = st.init_container_statuses.unwrap();
    for i in &inits[..3] {
        let term = i.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            (term.exit_code, term.reason.as_deref()),
            (0, Some("Completed")),
            "{}",
            i.name
        );
    }
    let sidecar = &inits[3];
    assert!(sidecar.state.as_ref().unwrap().running.is_some());
    assert_eq!((sidecar.started, sidecar.ready), (Some(true), true));
    let c = &st.container_statuses.unwrap()[0];
    assert!(c.ready && c.state.as_ref().unwrap().running.is_some());

    let mut msgs = Vec::new();
    while let Ok(ev) = log.try_recv() {
        msgs.push(ev.to_string());
    }
    let one = msgs.iter().find(|m| m.contains("\"one\"")).unwrap();
    assert!(
        one.contains("exited 0") && one.contains("stdout: out") && one.contains("stderr: err"),
        "{one}"
    );
    t.sim.shutdown().await;
}

#[tokio::test]
async fn failing_init_container_stops_the_pod() {
    let t = sim().await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    for (name, policy, want_phase) in [("keeps", "Always", "Pending"), ("fails", "Never", "Failed")]
    {
        pods.create(&PostParams::default(), &pod_json(json!({
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": policy,
                "initContainers": [{"name": "bad", "image": "busybox", "command": ["sh", "-c", "exit 7"]}],
                "containers": [{"name": "app", "image": "busybox"}],
            },
        })))
        .await
        .unwrap();
        let p = wait_pod(&pods, name, |p| {
            p.status
                .as_ref()
                .and_then(|s| s.init_container_statuses.as_ref())
                .is_some_and(|i| {
                    i[0].state
                        .as_ref()
                        .and_then(|s| s.terminated.as_ref())
                        .is_some()
                })
        })
        .await;
        let st = p.status.unwrap();
        assert_eq!(st.phase.as_deref(), Some(want_phase));
        let term = st.init_container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!((term.exit_code, term.reason.as_deref()), (7, Some("Error")));
        let app = &st.container_statuses.unwrap()[0];
        assert!(
            app.state.as_ref().unwrap().waiting.is_some(),
            "app never started"
        );
    }
    t.sim.shutdown().await;
}

#[tokio::test]
async fn timing_annotations_and_phase_control() {
    let t = sim().await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let mk = |name: &str, ann: serde_json::Value| {
        pod_json(json!({"metadata": {"name": name, "annotations": ann},
                        "spec": {"containers": [{"name": "app", "image": "busybox"}]}}))
    };
    let start = Instant::now();
    pods.create(
        &PostParams::default(),
        &mk(
            "slow",
            json!({"sim.kube/start-delay": "300ms", "sim.kube/ready-after": "300ms"}),
        ),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &mk("never", json!({"sim.kube/never-ready": "true"})),
    )
    .await
    .unwrap();
    // Created after "never" and Ready three times later than the default: once it is Ready, the
    // kubelet is past the moment it would have made "never" Ready.
    pods.create(
        &PostParams::default(),
        &mk("witness", json!({"sim.kube/ready-after": "300ms"})),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &mk("job", json!({"sim.kube/phase-after": "Succeeded:200ms"})),
    )
    .await
    .unwrap();

    let running = wait_pod(&pods, "slow", |p| phase(p) == "Running").await;
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(!ready(&running));
    wait_pod(&pods, "slow", ready).await;
    assert!(start.elapsed() >= Duration::from_millis(600));

    let job = wait_pod(&pods, "job", |p| phase(p) == "Succeeded").await;
    let c = &job.status.unwrap().container_statuses.unwrap()[0];
    assert_eq!(
        c.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        0
    );

    let never = wait_pod(&pods, "never", |p| phase(p) == "Running").await;
    wait_pod(&pods, "witness", ready).await;
    assert!(!ready(&pods.get("never").await.unwrap()), "{never:?}");

    t.sim.set_pod_phase("default", "never", "Failed").await;
    let failed = pods.get("never").await.unwrap();
    assert_eq!(phase(&failed), "Failed");
    t.sim.shutdown().await;
}

#[tokio::test]
async fn stopped_kubelet_leaves_pods_pending() {
    let t = sim().await;
    t.sim.stop_kubelet();
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p = pods.get("p").await.unwrap();
    assert_eq!(phase(&p), "Pending");
    assert!(p.status.unwrap().container_statuses.is_none());
    t.sim.start_kubelet();
    wait_pod(&pods, "p", ready).await;
    t.sim.shutdown().await;
}
