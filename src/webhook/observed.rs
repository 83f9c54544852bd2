//! Tells each RestoreHook and ClusterRestoreHook which generation this webhook replica serves
//! (`status.webhooks.<replica>`), so that the controller can set `Ready` once every replica has
//! it and a script can `kubectl wait --for=condition=Ready` before creating pods
//! (docs/behaviour.md §8.2). Each replica writes only its own key, with a merge patch, so replicas
//! never overwrite each other.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use restore_hooks_core::hooks::compiled::{CompiledObject, SourceKind};
use restore_hooks_core::hooks::types::{ClusterRestoreHook, RestoreHook};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::catalog::SharedIndex;

/// Writes are batched: a relist of a thousand RestoreHooks is a burst, not a storm.
const BATCH: Duration = Duration::from_millis(500);

type Key = (SourceKind, String, String);

/// Reports, under `status.webhooks.<identity>`, the generation (and first problem) of every hook
/// object as `index` compiled it, at most every 500 ms, until `stop` is cancelled. Failed writes
/// are retried at the next batch; needs `patch` on both kinds' `status` subresources.
pub async fn report(
    client: kube::Client,
    index: Arc<SharedIndex>,
    identity: String,
    stop: CancellationToken,
) {
    let mut events = index.subscribe();
    let mut written: HashMap<Key, (i64, String)> = HashMap::new();
    let mut pending: HashMap<Key, (i64, String)> = HashMap::new();
    let note = |pending: &mut HashMap<Key, (i64, String)>, o: &CompiledObject| {
        if o.kind == SourceKind::VeleroRestore {
            return;
        }
        let key = (
            o.kind,
            o.namespace.clone().unwrap_or_default(),
            o.name.clone(),
        );
        let seen = (
            o.generation.unwrap_or_default(),
            o.first_problem().map(|p| p.to_string()).unwrap_or_default(),
        );
        pending.insert(key, seen);
    };
    {
        let i = index.read();
        for o in i.cluster_restore_hooks().chain(i.all_restore_hooks()) {
            note(&mut pending, o);
        }
    }
    let mut tick = tokio::time::interval(BATCH);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            event = events.recv() => match event {
                Ok(c) => {
                    // A new object (or generation) is reported even when it looks like what was
                    // written before: a RestoreHook deleted and created again under the same
                    // name starts at the same generation, with a status that has no entries.
                    if c.changed && c.object.kind != SourceKind::VeleroRestore {
                        let o = &c.object;
                        written.remove(&(o.kind, o.namespace.clone().unwrap_or_default(), o.name.clone()));
                    }
                    note(&mut pending, &c.object)
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    let i = index.read();
                    for o in i.cluster_restore_hooks().chain(i.all_restore_hooks()) {
                        note(&mut pending, o);
                    }
                }
                Err(_) => return,
            },
            _ = tick.tick() => {
                let batch: Vec<_> = pending.drain().filter(|(k, v)| written.get(k) != Some(v)).collect();
                for (key, seen) in batch {
                    match write(&client, &identity, &key, &seen).await {
                        Ok(()) => { written.insert(key, seen); }
                        // Deleted meanwhile: nothing to report. Other errors: try again.
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => {
                            warn!(object = ?key, error = %e, "could not report this replica's generation (the hook object's Ready condition waits for it); retrying");
                            pending.insert(key, seen);
                        }
                    }
                }
            }
        }
    }
}

async fn write(
    client: &kube::Client,
    identity: &str,
    (kind, namespace, name): &Key,
    (generation, problem): &(i64, String),
) -> Result<(), kube::Error> {
    let body = json!({"status": {"webhooks": {identity: {"observedGeneration": generation, "problem": problem}}}});
    let params = PatchParams::default();
    match kind {
        SourceKind::RestoreHook => {
            let api: Api<RestoreHook> = Api::namespaced(client.clone(), namespace);
            api.patch_status(name, &params, &Patch::Merge(&body))
                .await
                .map(|_| ())
        }
        _ => {
            let api: Api<ClusterRestoreHook> = Api::all(client.clone());
            api.patch_status(name, &params, &Patch::Merge(&body))
                .await
                .map(|_| ())
        }
    }
}
