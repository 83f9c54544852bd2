//! Watch streams: newline-delimited `WatchEvent` JSON, filtered per watcher from one broadcast.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::Sim;
use crate::error::{ApiError, ApiResult};
use crate::request::{Target, object_json, selectors};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, ChangeType, WatchStart};
use crate::table::Shape;
use crate::util::Query;

const BOOKMARK_EVERY: Duration = Duration::from_secs(2);

struct Watcher {
    sim: Arc<Sim>,
    t: Target,
    id: String,
    ls: LabelSelector,
    fs: FieldSelector,
    tx: mpsc::Sender<Bytes>,
    shape: Shape,
    include: Option<String>,
}

impl Watcher {
    fn matches(&self, o: &Value) -> bool {
        self.ls.matches_object(o) && self.fs.matches(o)
    }

    async fn send(&self, kind: &str, obj: &Value) -> bool {
        let body = match self.shape {
            Shape::Table if kind != "BOOKMARK" => {
                let rv = crate::store::meta_str(obj, "resourceVersion")
                    .parse()
                    .unwrap_or(0);
                crate::table::table(&self.t.rt, &[obj], rv, self.include.as_deref()).to_string()
            }
            Shape::Meta => crate::table::partial(obj).to_string(),
            _ => object_json(&self.t.rt, &self.t.version, obj),
        };
        let line = format!("{{\"type\":\"{kind}\",\"object\":{body}}}\n");
        self.tx.send(Bytes::from(line)).await.is_ok()
    }

    async fn bookmark(&self, rv: u64, initial_end: bool) -> bool {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({
            "kind": self.t.rt.kind,
            "apiVersion": self.t.rt.api_version(&self.t.version),
            "metadata": meta,
        });
        self.send("BOOKMARK", &obj).await
    }

    /// Maps a change to what this watcher sees: an object that stops matching its selector
    /// is DELETED for it, one that starts matching is ADDED (the watch cache's semantics).
    async fn change(&self, c: &Change) -> bool {
        if c.res != self.id || self.t.ns.as_deref().is_some_and(|n| n != c.namespace) {
            return true;
        }
        let now = self.matches(&c.object);
        let before = c.old.as_deref().is_some_and(|o| self.matches(o));
        let kind = match (c.kind, before, now) {
            (ChangeType::Added, _, true) => "ADDED",
            (ChangeType::Modified, true, true) => "MODIFIED",
            (ChangeType::Modified, false, true) => "ADDED",
            (ChangeType::Modified, true, false) => "DELETED",
            (ChangeType::Deleted, true, _) => "DELETED",
            _ => return true,
        };
        self.send(kind, &c.object).await
    }

    async fn run(
        self,
        start: WatchStart,
        start_rv: u64,
        mut rx: broadcast::Receiver<Arc<Change>>,
        bookmarks: bool,
        initial_end: bool,
        timeout: Option<Duration>,
    ) {
        let mut drops = self.sim.faults.watch_drops();
        drops.mark_unchanged();
        match start {
            WatchStart::Snapshot(items) => {
                for o in items.iter().filter(|o| self.matches(o)) {
                    if !self.send("ADDED", o).await {
                        return;
                    }
                }
            }
            WatchStart::Replay(changes) => {
                for c in &changes {
                    if !self.change(c).await {
                        return;
                    }
                }
            }
        }
        if initial_end && !self.bookmark(start_rv, true).await {
            return;
        }
        let mut last_rv = start_rv;
        let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(86_400 * 365)));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = self.sim.shutdown.cancelled() => return,
                _ = drops.changed() => return,
                _ = &mut deadline => return,
                _ = self.tx.closed() => return,
                _ = tick.tick(), if bookmarks => {
                    if !self.bookmark(last_rv, false).await { return }
                }
                r = rx.recv() => match r {
                    Ok(c) => {
                        if c.rv <= start_rv { continue }
                        if c.res == self.id {
                            tokio::select! {
                                _ = self.sim.shutdown.cancelled() => return,
                                _ = self.sim.faults.watch_released(&self.t.rt.plural) => {}
                            }
                        }
                        last_rv = c.rv;
                        if !self.change(&c).await { return }
                    }
                    // A watcher this far behind is closed; the client re-watches from its last RV.
                    Err(_) => return,
                }
            }
        }
    }
}

pub(crate) fn serve(sim: Arc<Sim>, t: Target, q: &Query, shape: Shape) -> ApiResult<Response> {
    let (ls, fs) = selectors(q)?;
    let id = t.rt.id();
    let since = match q.get("resourceVersion") {
        None | Some("") => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))?,
        ),
    };
    // Streaming lists (`sendInitialEvents=true`) start from the current state.
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    match sim.store.watch(
        &id,
        t.ns.as_deref(),
        if send_initial { None } else { since },
    ) {
        Err(floor) => {
            // Real apiservers answer 200 and then an ERROR event carrying a 410 Status.
            let status = ApiError::gone(format!(
                "too old resource version: {} ({floor})",
                since.unwrap_or_default()
            ))
            .to_status();
            let line = format!("{}\n", json!({"type": "ERROR", "object": status}));
            let _ = tx.try_send(Bytes::from(line));
        }
        Ok((start, start_rv, brx)) => {
            let w = Watcher {
                sim: sim.clone(),
                t,
                id,
                ls,
                fs,
                tx,
                shape,
                include: q.get("includeObject").map(String::from),
            };
            tokio::spawn(w.run(
                start,
                start_rv,
                brx,
                bookmarks,
                send_initial && bookmarks,
                timeout,
            ));
        }
    }
    // What is queued goes out in one write, as kube-apiserver flushes a watch response only when
    // no further event is waiting: a client that fell behind reads its backlog in one go.
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let first = rx.recv().await?;
        let mut chunk = Vec::from(first);
        while let Ok(more) = rx.try_recv() {
            chunk.extend_from_slice(&more);
        }
        Some((Ok::<_, Infallible>(Bytes::from(chunk)), rx))
    });
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}
