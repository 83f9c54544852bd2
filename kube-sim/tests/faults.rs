//! Fault injection.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[tokio::test]
async fn fail_next_answers_500_n_times() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    t.sim.faults().fail_next("patch", "pods", 2);
    let patch = Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}}));
    for _ in 0..2 {
        match pods.patch("p", &PatchParams::default(), &patch).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"))
            }
            other => panic!("expected 500, got {other:?}"),
        }
    }
    pods.patch("p", &PatchParams::default(), &patch)
        .await
        .unwrap();
    // Other verbs are unaffected.
    t.sim.faults().fail_next("list", "pods", 1);
    pods.get("p").await.unwrap();
    assert!(pods.list(&ListParams::default()).await.is_err());
    pods.list(&ListParams::default()).await.unwrap();
    t.sim.shutdown().await;
}

#[tokio::test]
async fn drop_watches_ends_streams() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let mut s = pods
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, WatchEvent::Added(_)));
    t.sim.faults().drop_watches();
    let end = tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(end.is_none(), "stream closed");
    t.sim.shutdown().await;
}

#[tokio::test]
async fn delay_slows_responses() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    t.sim.faults().set_delay(Duration::from_millis(200));
    let start = Instant::now();
    pods.list(&ListParams::default()).await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(200));
    t.sim.faults().set_delay(Duration::ZERO);
    t.sim.shutdown().await;
}

#[tokio::test]
async fn exec_fault_and_log() {
    use kube::api::AttachParams;
    let t = sim().await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    wait_pod(&pods, "p", ready).await;
    let mut log = t.sim.subscribe_log();
    t.sim.faults().fail_next("create", "pods/exec", 1);
    let ap = AttachParams::default().stdout(true).stderr(false);
    match pods.exec("p", ["true"], &ap).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 500),
        Err(e) => panic!("unexpected {e:?}"),
        Ok(_) => panic!("expected the injected failure"),
    }
    let ev = log.recv().await.unwrap();
    assert_eq!(ev.kind, kube_sim::SimEventKind::Fault);
    t.sim.shutdown().await;
}

async fn next_name(
    s: &mut futures::stream::BoxStream<'static, Result<Pod, kube::runtime::watcher::Error>>,
) -> String {
    tokio::time::timeout(Duration::from_secs(10), s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .metadata
        .name
        .unwrap()
}

#[tokio::test]
async fn kube_runtime_watcher_recovers_from_dropped_watches() {
    use kube::runtime::{WatchStreamExt as _, watcher};
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    pods.create(&PostParams::default(), &pod("a", json!({})))
        .await
        .unwrap();
    let mut s = watcher(pods.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    assert_eq!(next_name(&mut s).await, "a");
    t.sim.faults().drop_watches();
    // Changes made while no watch is open are replayed when the watcher resumes.
    pods.create(&PostParams::default(), &pod("b", json!({})))
        .await
        .unwrap();
    t.sim.faults().drop_watches();
    pods.create(&PostParams::default(), &pod("c", json!({})))
        .await
        .unwrap();
    let mut seen = vec![next_name(&mut s).await, next_name(&mut s).await];
    seen.sort();
    seen.dedup();
    if seen.len() < 2 {
        seen.push(next_name(&mut s).await);
        seen.sort();
        seen.dedup();
    }
    assert!(
        seen.contains(&"b".to_string()) && seen.contains(&"c".to_string()),
        "{seen:?}"
    );
    t.sim.shutdown().await;
}
