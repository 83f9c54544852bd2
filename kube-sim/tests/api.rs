//! The REST surface through the real kube client.

mod common;

use std::time::Duration;

use common::*;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_list_with_selectors() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let created = pods
        .create(
            &PostParams::default(),
            &pod("a", json!({"app": "web", "tier": "fe"})),
        )
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some());
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();
    pods.create(&PostParams::default(), &pod("b", json!({"app": "db"})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("c", json!({})))
        .await
        .unwrap();
    let got = pods.get("a").await.unwrap();
    assert_eq!(
        got.metadata.resource_version.as_deref(),
        Some(rv1.to_string().as_str())
    );

    let names = |l: kube::core::ObjectList<Pod>| -> Vec<String> {
        l.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    let cases = [
        ("app=web", vec!["a"]),
        ("app!=web", vec!["b", "c"]),
        ("app in (web,db)", vec!["a", "b"]),
        ("app notin (web)", vec!["b", "c"]),
        ("app", vec!["a", "b"]),
        ("!app", vec!["c"]),
        ("app=web,tier=fe", vec!["a"]),
    ];
    for (sel, want) in cases {
        let l = pods.list(&ListParams::default().labels(sel)).await.unwrap();
        assert_eq!(names(l), want, "selector {sel}");
    }
    let l = pods
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(names(l), vec!["b"]);
    let l = pods.list(&ListParams::default()).await.unwrap();
    let list_rv: u64 = l.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv > rv1);

    // Cluster-wide list, and a namespace that does not exist.
    let all: Api<Pod> = Api::all(t.client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );

    // Chunked: pages of `limit` in key order, each with the first page's resourceVersion, and
    // a token until the last; a selector applies before the cut.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut params = ListParams::default().limit(2);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = pods.list(&params).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        let rv: u64 = page
            .metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            rv, list_rv,
            "every page reports the first page's resourceVersion"
        );
        token = page.metadata.continue_.clone();
        seen.extend(names(page));
        if token.is_none() {
            break;
        }
        // A change between pages does not move the list's resourceVersion.
        pods.create(
            &PostParams::default(),
            &pod(&format!("z{pages}"), json!({})),
        )
        .await
        .unwrap();
    }
    assert_eq!(pages, 2);
    assert_eq!(seen, ["a", "b", "c", "z1"]);
    let page = pods
        .list(&ListParams::default().labels("app").limit(1))
        .await
        .unwrap();
    assert_eq!(names(page), ["a"]);
    let e = api_err(
        pods.list(&ListParams::default().continue_token("garbage"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);

    let missing: Api<Pod> = Api::namespaced(t.client.clone(), "nope");
    let e = api_err(
        missing
            .create(&PostParams::default(), &pod("x", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 404);

    // Duplicates.
    let e = api_err(
        pods.create(&PostParams::default(), &pod("a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    let e = api_err(pods.get("zzz").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    assert_eq!(e.message, "pods \"zzz\" not found");
    t.sim.shutdown().await;
}

#[tokio::test]
async fn generate_name_and_namespaces() {
    let t = sim_with(false).await;
    let nss: Api<Namespace> = Api::all(t.client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "shop", "labels": {"team": "a"}}}))
            .unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let got = nss.get("shop").await.unwrap();
    let labels = got.metadata.labels.unwrap();
    assert_eq!(
        labels
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("shop")
    );
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));

    let pods: Api<Pod> = Api::namespaced(t.client.clone(), "shop");
    let mut p = pod("", json!({}));
    p.metadata.name = None;
    p.metadata.generate_name = Some("web-".into());
    let created = pods.create(&PostParams::default(), &p).await.unwrap();
    let name = created.metadata.name.unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");

    // Deleting the namespace deletes what is in it.
    nss.delete("shop", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt(&name).await.unwrap().is_none());
    t.sim.shutdown().await;
}

#[tokio::test]
async fn patches_and_optimistic_concurrency() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let p = pods
        .create(&PostParams::default(), &pod("p", json!({"a": "1"})))
        .await
        .unwrap();
    let rv0 = p.metadata.resource_version.clone().unwrap();

    let p1 = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"x": "1"}, "resourceVersion": rv0}})),
        )
        .await
        .unwrap();
    assert_eq!(p1.metadata.annotations.unwrap()["x"], "1");
    assert_ne!(p1.metadata.resource_version.as_deref(), Some(rv0.as_str()));

    // The same precondition again is now stale.
    let e = api_err(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"x": "2"}, "resourceVersion": rv0}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));

    // JSON Patch, with a test op guarding it.
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "add", "path": "/metadata/labels/b", "value": "2"},
    ]))
    .unwrap();
    let p2 = pods
        .patch("p", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(p2.metadata.labels.as_ref().unwrap()["b"], "2");
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/labels/a", "value": "nope"},
    ]))
    .unwrap();
    let e = api_err(
        pods.patch("p", &PatchParams::default(), &Patch::<()>::Json(failing))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));

    // PUT with a stale resourceVersion conflicts; with the current one it succeeds.
    let mut stale = p.clone();
    stale.metadata.labels = Some([("c".to_string(), "3".to_string())].into());
    let e = api_err(
        pods.replace("p", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    let mut fresh = pods.get("p").await.unwrap();
    fresh
        .metadata
        .labels
        .get_or_insert_default()
        .insert("c".into(), "3".into());
    pods.replace("p", &PostParams::default(), &fresh)
        .await
        .unwrap();

    // Strategic merge patch merges containers by name; the status subresource is separate.
    let p3 = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "app", "image": "busybox:2"}]}}),
            ),
        )
        .await
        .unwrap();
    let c = &p3.spec.unwrap().containers[0];
    assert_eq!(
        (c.name.as_str(), c.image.as_deref()),
        ("app", Some("busybox:2"))
    );
    assert_eq!(
        c.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    let p4 = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(phase(&p4), "Running");
    let p5 = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await
        .unwrap();
    assert_eq!(phase(&p5), "Running", "main resource ignores status");

    // Server-side apply content type is accepted (merge semantics).
    let p6 = pods
        .patch("p", &PatchParams::apply("test").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"ssa": "yes"}}})))
        .await
        .unwrap();
    assert_eq!(p6.metadata.labels.unwrap()["ssa"], "yes");
    t.sim.shutdown().await;
}

async fn next_event(
    s: &mut futures::stream::BoxStream<'static, kube::Result<WatchEvent<Pod>>>,
) -> WatchEvent<Pod> {
    tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .expect("watch event in time")
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn watch_resume_selectors_and_delete() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let a = pods
        .create(&PostParams::default(), &pod("a", json!({"app": "web"})))
        .await
        .unwrap();
    let rv_a = a.metadata.resource_version.unwrap();

    // Resume from a's RV: only later changes arrive, filtered by label.
    let mut stream = pods
        .watch(&WatchParams::default().labels("app=web"), &rv_a)
        .await
        .unwrap()
        .boxed();
    pods.create(&PostParams::default(), &pod("other", json!({"app": "db"})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("b", json!({"app": "web"})))
        .await
        .unwrap();
    match next_event(&mut stream).await {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
        e => panic!("unexpected {e:?}"),
    }
    // Relabelling out of the selector is a DELETED for this watcher.
    pods.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .unwrap();
    match next_event(&mut stream).await {
        WatchEvent::Deleted(p) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
        e => panic!("unexpected {e:?}"),
    }
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"k": "v"}}})),
    )
    .await
    .unwrap();
    match next_event(&mut stream).await {
        WatchEvent::Modified(p) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
        e => panic!("unexpected {e:?}"),
    }
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    match next_event(&mut stream).await {
        WatchEvent::Deleted(p) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
        e => panic!("unexpected {e:?}"),
    }

    // Watching from "0" starts with the current objects.
    let mut from_zero = pods
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    for _ in 0..2 {
        if let WatchEvent::Added(p) = next_event(&mut from_zero).await {
            names.push(p.metadata.name.unwrap());
        }
    }
    names.sort();
    assert_eq!(names, vec!["b", "other"]);

    // After compaction an old RV is 410 Gone, delivered as an ERROR event.
    t.sim.faults().compact();
    let mut gone = pods
        .watch(&WatchParams::default(), &rv_a)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut gone).await {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        e => panic!("unexpected {e:?}"),
    }
    t.sim.shutdown().await;
}

#[tokio::test]
async fn kube_runtime_watcher_and_bookmarks() {
    use kube::runtime::{WatchStreamExt as _, watcher};
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    pods.create(&PostParams::default(), &pod("w1", json!({"x": "y"})))
        .await
        .unwrap();
    let cfg = watcher::Config::default().labels("x=y");
    let mut s = watcher(pods.clone(), cfg).applied_objects().boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("w1"));
    pods.create(&PostParams::default(), &pod("w2", json!({"x": "y"})))
        .await
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.metadata.name.as_deref(), Some("w2"));

    // Streaming lists (sendInitialEvents) work too.
    let cfg = watcher::Config::default().streaming_lists();
    let mut s = watcher(pods.clone(), cfg).applied_objects().boxed();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let p = tokio::time::timeout(Duration::from_secs(5), s.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(p.metadata.name.unwrap());
    }
    seen.sort();
    assert_eq!(seen, vec!["w1", "w2"]);
    t.sim.shutdown().await;
}

#[tokio::test]
async fn crd_registration_makes_resources_routable() {
    let t = sim_with(false).await;
    let gvk = GroupVersionKind::gvk("restore-hooks.dev", "v1alpha1", "RestoreHook");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "restorehooks");
    let hooks: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), "default", &ar);
    let e = api_err(hooks.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 404);

    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "restorehooks.restore-hooks.dev"},
        "spec": {
            "group": "restore-hooks.dev",
            "names": {"kind": "RestoreHook", "plural": "restorehooks", "singular": "restorehook", "listKind": "RestoreHookList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                          "subresources": {"status": {}}}],
        },
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let established = crds.get("restorehooks.restore-hooks.dev").await.unwrap();
    use kube::runtime::wait::Condition as _;
    assert!(kube::runtime::conditions::is_crd_established().matches_object(Some(&established)));

    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "restore-hooks.dev/v1alpha1",
        "kind": "RestoreHook",
        "metadata": {"name": "h1"},
        "spec": {"restores": ["*"]},
        "status": {"ignored": true},
    }))
    .unwrap();
    let created = hooks.create(&PostParams::default(), &obj).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create"
    );
    assert_eq!(created.metadata.generation, Some(1));
    let st = hooks
        .patch_status(
            "h1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"podsPlanned": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(st.data["status"]["podsPlanned"], 2);
    assert_eq!(
        st.metadata.generation,
        Some(1),
        "status writes keep the generation"
    );
    let sp = hooks
        .patch(
            "h1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"restores": ["a"]}})),
        )
        .await
        .unwrap();
    assert_eq!(sp.metadata.generation, Some(2));
    assert_eq!(sp.data["status"]["podsPlanned"], 2);
    assert_eq!(
        hooks
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Discovery lists it.
    let disc = kube::Discovery::new(t.client.clone()).run().await.unwrap();
    assert!(disc.has_group("restore-hooks.dev"));

    // Deleting the CRD removes the resource again.
    crds.delete("restorehooks.restore-hooks.dev", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_err(hooks.get("h1").await.unwrap_err()).code, 404);
    t.sim.shutdown().await;
}

#[tokio::test]
async fn leases_and_events() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let t = sim_with(false).await;
    let leases: Api<Lease> = Api::default_namespaced(t.client.clone());
    let l: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).unwrap();
    let l = leases.create(&PostParams::default(), &l).await.unwrap();
    let mut l2 = l.clone();
    l2.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases
        .replace("leader", &PostParams::default(), &l2)
        .await
        .unwrap();
    // Second writer with the old RV loses.
    let mut l3 = l.clone();
    l3.spec.as_mut().unwrap().holder_identity = Some("c".into());
    assert_eq!(
        api_err(
            leases
                .replace("leader", &PostParams::default(), &l3)
                .await
                .unwrap_err()
        )
        .code,
        409
    );

    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    let p = pods
        .create(&PostParams::default(), &pod("ev", json!({})))
        .await
        .unwrap();
    let recorder = Recorder::new(
        t.client.clone(),
        Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    use kube::Resource as _;
    recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "HooksCompleted".into(),
                note: Some("ok".into()),
                action: "Exec".into(),
                secondary: None,
            },
            &p.object_ref(&()),
        )
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::default_namespaced(t.client.clone());
    let evs = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(evs.items.len(), 1);
    assert_eq!(evs.items[0].reason.as_deref(), Some("HooksCompleted"));
    t.sim.shutdown().await;
}

#[tokio::test]
async fn two_thousand_pods_reach_exactly_their_selector_watchers() {
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    // Ten watchers, each selecting one label value.
    let mut watchers = Vec::new();
    for i in 0..10 {
        let s = pods
            .watch(&WatchParams::default().labels(&format!("shard={i}")), "0")
            .await
            .unwrap()
            .boxed();
        watchers.push(s);
    }
    futures::stream::iter(0..2000)
        .map(|i| {
            let pods = pods.clone();
            async move {
                pods.create(
                    &PostParams::default(),
                    &pod(&format!("p{i}"), json!({"shard": (i % 10).to_string()})),
                )
                .await
                .unwrap()
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for (shard, w) in watchers.iter_mut().enumerate() {
        let mut added = 0;
        while added < 200 {
            // The guard only turns a hang into a failure; a loaded machine may take long.
            let ev = tokio::time::timeout(Duration::from_secs(120), w.try_next())
                .await
                .expect("a watcher stalled")
                .unwrap()
                .unwrap();
            match ev {
                WatchEvent::Added(p) => {
                    assert_eq!(p.metadata.labels.unwrap()["shard"], shard.to_string());
                    added += 1;
                }
                // Bookmarks may come at any time on a watch (the simulator sends them while a
                // long burst is under way); they carry no object.
                WatchEvent::Bookmark(_) => {}
                other => panic!("shard {shard}: unexpected event {other:?}"),
            }
        }
    }
    let l = pods
        .list(&ListParams::default().labels("shard=3"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 200);
    t.sim.shutdown().await;
}

#[tokio::test]
async fn metadata_only_clients() {
    use kube::core::PartialObjectMeta;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let t = sim_with(false).await;
    let pods: Api<Pod> = Api::default_namespaced(t.client.clone());
    pods.create(&PostParams::default(), &pod("m1", json!({"k": "v"})))
        .await
        .unwrap();
    let l = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(l.items[0].metadata.name.as_deref(), Some("m1"));
    let one = pods.get_metadata("m1").await.unwrap();
    assert_eq!(one.metadata.labels.unwrap()["k"], "v");
    let meta: Api<PartialObjectMeta<Pod>> = Api::default_namespaced(t.client.clone());
    let mut s = watcher(meta, watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("m1"));
    t.sim.shutdown().await;
}
