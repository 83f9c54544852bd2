//! Restore windows (docs/behaviour.md §1.6) on the simulator testbed, with the real webhook and a
//! leading controller: the leader labels the namespaces a Velero Restore writes to while it runs,
//! pods created there then are restored pods, and once the window is over (and their hooks ended)
//! the label goes and new pods are ordinary pods; a label written by hand that outlives its Restore
//! stops counting and is reported. The same on the real control plane with a real Velero restore:
//! `tests/real_restore_window.rs`.
//!
//! Waits are bounded only as failure guards; no assertion depends on how fast anything is.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use restore_hooks::hooks::plan::PLAN_ANNOTATION;
use restore_hooks::testbed::{Testbed, TestbedOptions, bounded};
use restore_hooks_testkit::eventually;
use serde_json::{Value, json};

const LABEL: &str = "restore-hooks.dev/restore";
const WINDOW_ANNOTATION: &str = "restore-hooks.dev/restore-window";
const LIMIT: Duration = Duration::from_secs(150);

fn restores(bed: &Testbed) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("velero.io", "v1", "Restore");
    Api::namespaced_with(bed.client.clone(), "velero", &ApiResource::from_gvk(&gvk))
}

/// A Velero Restore, running.
async fn start_restore(bed: &Testbed, name: &str, included: &[&str]) {
    let restore: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "Restore",
        "metadata": {"name": name, "namespace": "velero"},
        "spec": {"backupName": "b1", "includedNamespaces": included},
    }))
    .unwrap();
    restores(bed)
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    set_status(bed, name, json!({"phase": "InProgress"})).await;
}

async fn set_status(bed: &Testbed, name: &str, status: Value) {
    restores(bed)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
}

/// Velero ended the Restore two hours ago: its 30-minute window is over.
async fn end_restore_long_ago(bed: &Testbed, name: &str) {
    let ended = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(2);
    set_status(
        bed,
        name,
        json!({"phase": "Completed", "completionTimestamp": ended.to_string()}),
    )
    .await;
}

async fn namespace(bed: &Testbed, name: &str) -> Namespace {
    Api::<Namespace>::all(bed.client.clone())
        .get(name)
        .await
        .unwrap()
}

fn label_of(ns: &Namespace) -> Option<String> {
    ns.metadata.labels.as_ref()?.get(LABEL).cloned()
}

fn window_of(ns: &Namespace) -> Option<String> {
    ns.metadata
        .annotations
        .as_ref()?
        .get(WINDOW_ANNOTATION)
        .cloned()
}

/// The reasons and messages of the Events about namespace `name` (written in `default`).
async fn namespace_events(bed: &Testbed, name: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(bed.client.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Namespace")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// A pod as a ReplicaSet creates it: no restore label. Its hook appends to `ran` in its
/// directory; with `gate`, it first waits for that file there.
fn replacement_pod(namespace: &str, name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "web:1"}]},
    }))
    .unwrap()
}

async fn hook_for(bed: &Testbed, namespace: &str, script: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        bed.client.clone(),
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "restore-hooks.dev",
            "v1alpha1",
            "RestoreHook",
        )),
    );
    let hook: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": "warm", "namespace": namespace},
        "spec": {"postHooks": [{"exec": {"container": "app",
                                          "command": ["sh", "-c", script]}}]},
    }))
    .unwrap();
    api.create(&PostParams::default(), &hook).await.unwrap();
}

fn planned(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PLAN_ANNOTATION))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_opens_and_closes_restore_windows_by_itself() {
    bounded(LIMIT, async {
        restore_hooks::testbed::log_from_env();
        let bed = Testbed::start(TestbedOptions {
            webhook: true,
            velero: true,
            ..TestbedOptions::default()
        })
        .await
        .unwrap();
        // Existed before any restore; another tool's label; a label written by hand.
        bed.create_namespace("shop", json!({})).await.unwrap();
        bed.create_namespace("quiet", json!({})).await.unwrap();
        bed.create_namespace("manual", json!({LABEL: "r-all"}))
            .await
            .unwrap();
        let ctl = bed.start_controller("ctl-0", bed.controller_args(), None);
        eventually!("the controller to lead", ctl.is_leader().then_some(()));

        // A Restore that names shop: labelled at once, though shop existed before.
        start_restore(&bed, "r-shop", &["shop"]).await;
        let shop = eventually!("shop labelled for r-shop", {
            let ns = namespace(&bed, "shop").await;
            (label_of(&ns).as_deref() == Some("r-shop")).then_some(ns)
        });
        assert_eq!(window_of(&shop).as_deref(), Some("r-shop"));
        // An include-all Restore: a namespace it creates is labelled, an old one it does not
        // restore pods into is not.
        // creationTimestamp has one-second resolution: the namespaces above must be older than
        // the Restore to tell them from those it creates.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        start_restore(&bed, "r-all", &["*"]).await;
        bed.create_namespace("fresh", json!({})).await.unwrap();
        hook_for(&bed, "fresh", "echo ran >> ran").await;
        eventually!("fresh labelled for r-all", {
            let ns = namespace(&bed, "fresh").await;
            (label_of(&ns).as_deref() == Some("r-all")).then_some(())
        });
        // The Event follows the label (Events are sent after what they report).
        eventually!("fresh's RestoreWindowOpened Event", {
            namespace_events(&bed, "fresh")
                .await
                .into_iter()
                .find(|(r, m)| r == "RestoreWindowOpened" && m.contains("r-all"))
        });
        assert_eq!(label_of(&namespace(&bed, "quiet").await), None);

        // A pod its Deployment creates in the window is a restored pod: its hook runs.
        let pod = bed
            .create_pod(&replacement_pod("fresh", "web-1"))
            .await
            .unwrap();
        assert!(planned(&pod), "{:?}", pod.metadata);
        let (label, _) = bed.finished("fresh", "web-1").await;
        assert_eq!(label, "done");

        // The hand label of a Restore still in its window counts too.
        hook_for(&bed, "manual", "echo ran >> ran").await;
        let hand = bed
            .create_pod(&replacement_pod("manual", "web-1"))
            .await
            .unwrap();
        assert!(planned(&hand), "{:?}", hand.metadata);

        // r-shop's pod holds a hook when r-shop ends: its label stays until the hook ended.
        hook_for(
            &bed,
            "shop",
            "while [ ! -f go ]; do sleep 0.1; done; echo ran >> ran",
        )
        .await;
        let held = bed
            .create_pod(&replacement_pod("shop", "db-1"))
            .await
            .unwrap();
        assert!(planned(&held));
        // Ended at once, before the leader's pod watch may have delivered db-1: its list of the
        // namespace's pending pods keeps the label all the same.
        end_restore_long_ago(&bed, "r-shop").await;
        end_restore_long_ago(&bed, "r-all").await;
        eventually!("fresh unlabelled once r-all's window is over", {
            let ns = namespace(&bed, "fresh").await;
            (label_of(&ns).is_none() && window_of(&ns).is_none()).then_some(())
        });
        // (Every look since r-shop ended kept its label: the hook still waits for `go`.)
        assert_eq!(
            label_of(&namespace(&bed, "shop").await).as_deref(),
            Some("r-shop")
        );
        std::fs::write(bed.pod_dir("shop", "db-1").join("go"), b"").unwrap();
        let (label, _) = bed.finished("shop", "db-1").await;
        assert_eq!(label, "done");
        eventually!("shop unlabelled once its hook ended", {
            let ns = namespace(&bed, "shop").await;
            label_of(&ns).is_none().then_some(())
        });
        eventually!("shop's RestoreWindowClosed Event", {
            namespace_events(&bed, "shop")
                .await
                .into_iter()
                .find(|(r, _)| r == "RestoreWindowClosed")
        });

        // After the window, a rollout's pod is an ordinary pod.
        let later = bed
            .create_pod(&replacement_pod("fresh", "web-2"))
            .await
            .unwrap();
        assert!(!planned(&later), "{:?}", later.metadata);

        // The hand label outlived r-all: it brings no pod into scope, stays where it is, and is
        // reported (Event, gauge) with what to do.
        let later = bed
            .create_pod(&replacement_pod("manual", "web-2"))
            .await
            .unwrap();
        assert!(!planned(&later), "{:?}", later.metadata);
        let (reason, message) = eventually!("the stale label reported", {
            namespace_events(&bed, "manual")
                .await
                .into_iter()
                .find(|(r, _)| r == "RestoreWindowOver")
        });
        assert_eq!(reason, "RestoreWindowOver");
        assert!(
            message.contains("kubectl label namespace manual restore-hooks.dev/restore-"),
            "{message}"
        );
        assert_eq!(
            label_of(&namespace(&bed, "manual").await).as_deref(),
            Some("r-all")
        );
        let text = ctl.metrics.render();
        assert!(
            text.contains("restore_hooks_stale_restore_namespace_labels 1"),
            "{text}"
        );
        assert!(
            text.contains("restore_hooks_restore_windows_total{action=\"removed\"} 2"),
            "{text}"
        );
        ctl.stop().await.unwrap();
        bed.stop().await;
    })
    .await;
}
