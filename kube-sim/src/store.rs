//! The object store: one global resourceVersion counter (like etcd's revision), objects as JSON,
//! a bounded change history for watch resumption, and a broadcast channel of changes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::broadcast;

use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One committed change. `old` lets filtered watchers turn "stopped matching" into DELETED
/// and "started matching" into ADDED, as the apiserver's watch cache does.
#[derive(Debug)]
pub struct Change {
    pub res: String,
    pub kind: ChangeType,
    pub rv: u64,
    pub namespace: String,
    pub object: Arc<Value>,
    pub old: Option<Arc<Value>>,
}

type Key = (String, String);

#[derive(Default)]
struct State {
    rv: u64,
    objects: HashMap<String, BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Arc<Change>>,
    /// Watches may resume from any RV >= floor; older ones get 410 Gone.
    floor: u64,
}

pub struct Store {
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<Change>>,
    history_cap: usize,
}

/// What a new watch must send before live events.
pub enum WatchStart {
    /// Current objects, sent as synthetic ADDED events (watch without a resourceVersion or "0").
    Snapshot(Vec<Arc<Value>>),
    /// Changes after the requested resourceVersion.
    Replay(Vec<Arc<Change>>),
}

/// What an update left.
pub enum Written {
    /// The object as stored (unchanged when the update changed nothing).
    Stored(Arc<Value>),
    /// The update deleted it ([`Store::update`]); its final content, as the DELETED event has it.
    Deleted(Arc<Value>),
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn key_of(obj: &Value) -> Key {
    (
        meta_str(obj, "namespace").to_string(),
        meta_str(obj, "name").to_string(),
    )
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

fn list_in(st: &State, res: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
    match st.objects.get(res) {
        None => Vec::new(),
        Some(m) => match ns {
            None => m.values().cloned().collect(),
            Some(ns) => m
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
        },
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new(20_000)
    }
}

impl Store {
    pub fn new(history_cap: usize) -> Self {
        let (tx, _) = broadcast::channel(1 << 14);
        Self {
            state: Mutex::new(State::default()),
            tx,
            history_cap,
        }
    }

    pub fn current_rv(&self) -> u64 {
        self.state.lock().unwrap().rv
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    fn commit(&self, st: &mut State, change: Change) -> Arc<Change> {
        let change = Arc::new(change);
        st.history.push_back(change.clone());
        while st.history.len() > self.history_cap {
            if let Some(c) = st.history.pop_front() {
                st.floor = c.rv;
            }
        }
        // Sent under the lock so every receiver sees changes in RV order.
        let _ = self.tx.send(change.clone());
        change
    }

    pub fn get(&self, res: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let st = self.state.lock().unwrap();
        st.objects
            .get(res)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// All objects of a resource (optionally in one namespace) and the list's resourceVersion.
    pub fn list(&self, res: &str, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let st = self.state.lock().unwrap();
        (list_in(&st, res, ns), st.rv)
    }

    pub fn create(&self, res: &str, obj: Value) -> ApiResult<Arc<Value>> {
        let mut st = self.state.lock().unwrap();
        let key = key_of(&obj);
        if st.objects.get(res).is_some_and(|m| m.contains_key(&key)) {
            return Err(ApiError::already_exists(res, &key.1));
        }
        Ok(self.store(&mut st, res, key, obj, None))
    }

    /// Stores `obj` under the next resourceVersion and announces it: Added without `old`,
    /// Modified with it.
    fn store(
        &self,
        st: &mut State,
        res: &str,
        key: Key,
        mut obj: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        st.rv += 1;
        let rv = st.rv;
        set_rv(&mut obj, rv);
        let obj = Arc::new(obj);
        st.objects
            .entry(res.to_string())
            .or_default()
            .insert(key.clone(), obj.clone());
        let kind = if old.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.commit(
            st,
            Change {
                res: res.into(),
                kind,
                rv,
                namespace: key.0,
                object: obj.clone(),
                old,
            },
        );
        obj
    }

    /// Atomic read-modify-write. A result equal to the current object is a no-op (no new RV,
    /// no event), exactly like an apiserver update that changes nothing. An update of an object
    /// that is being deleted with no grace period left, and that leaves it without finalizers,
    /// deletes it, as the apiserver does (`ShouldDeleteDuringUpdate`): the update is seen only
    /// in the DELETED event, never as a change of its own.
    pub fn update(
        &self,
        res: &str,
        ns: &str,
        name: &str,
        f: impl FnOnce(&Arc<Value>) -> ApiResult<Value>,
    ) -> ApiResult<Written> {
        let mut st = self.state.lock().unwrap();
        let key = (ns.to_string(), name.to_string());
        let cur = current(&st, res, &key)?;
        let mut new = f(&cur)?;
        let cur_rv: u64 = meta_str(&cur, "resourceVersion").parse().unwrap_or(0);
        set_rv(&mut new, cur_rv);
        if new == *cur {
            return Ok(Written::Stored(cur));
        }
        if deleted_by_update(&cur, &new) {
            return Ok(Written::Deleted(self.remove(&mut st, res, key, new, cur)));
        }
        Ok(Written::Stored(self.store(
            &mut st,
            res,
            key,
            new,
            Some(cur),
        )))
    }

    /// Deletes after `check` (preconditions) passes; returns the object as last stored,
    /// carrying the deletion's resourceVersion like the DELETED event does.
    pub fn delete(
        &self,
        res: &str,
        ns: &str,
        name: &str,
        check: impl FnOnce(&Value) -> ApiResult<()>,
    ) -> ApiResult<Arc<Value>> {
        let mut st = self.state.lock().unwrap();
        let key = (ns.to_string(), name.to_string());
        let cur = current(&st, res, &key)?;
        check(&cur)?;
        let last = (*cur).clone();
        Ok(self.remove(&mut st, res, key, last, cur))
    }

    /// Removes the object at `key`, announcing `last` (its final content) under a new
    /// resourceVersion.
    fn remove(
        &self,
        st: &mut State,
        res: &str,
        key: Key,
        mut last: Value,
        old: Arc<Value>,
    ) -> Arc<Value> {
        st.objects.get_mut(res).map(|m| m.remove(&key));
        st.rv += 1;
        let rv = st.rv;
        set_rv(&mut last, rv);
        let gone = Arc::new(last);
        self.commit(
            st,
            Change {
                res: res.into(),
                kind: ChangeType::Deleted,
                rv,
                namespace: key.0,
                object: gone.clone(),
                old: Some(old),
            },
        );
        gone
    }

    /// Deletes every object of `res` (in `ns` if given), e.g. namespace or CRD removal.
    pub fn delete_all(&self, res: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        let (items, _) = self.list(res, ns);
        items
            .iter()
            .filter_map(|o| {
                let (ns, name) = key_of(o);
                self.delete(res, &ns, &name, |_| Ok(())).ok()
            })
            .collect()
    }

    /// Subscribes and captures the starting point atomically, so no change is lost or doubled.
    pub fn watch(
        &self,
        res: &str,
        ns: Option<&str>,
        since: Option<u64>,
    ) -> Result<(WatchStart, u64, broadcast::Receiver<Arc<Change>>), u64> {
        let st = self.state.lock().unwrap();
        let rx = self.tx.subscribe();
        let start = match since {
            None | Some(0) => WatchStart::Snapshot(list_in(&st, res, ns)),
            Some(since) if since < st.floor => return Err(st.floor),
            Some(since) => {
                let idx = st.history.partition_point(|c| c.rv <= since);
                WatchStart::Replay(
                    st.history
                        .iter()
                        .skip(idx)
                        .filter(|c| c.res == res && ns.is_none_or(|n| n == c.namespace))
                        .cloned()
                        .collect(),
                )
            }
        };
        Ok((start, st.rv, rx))
    }

    /// Forgets the change history, so that any older resourceVersion gets 410 Gone.
    pub fn compact(&self) {
        let mut st = self.state.lock().unwrap();
        st.history.clear();
        st.floor = st.rv;
    }
}

/// The stored object at `key`, or NotFound.
fn current(st: &State, res: &str, key: &Key) -> ApiResult<Arc<Value>> {
    st.objects
        .get(res)
        .and_then(|m| m.get(key))
        .cloned()
        .ok_or_else(|| ApiError::not_found(res, &key.1))
}

/// The apiserver's `ShouldDeleteDuringUpdate`: `cur` is being deleted with no grace period left,
/// and `new` keeps no finalizer that would hold it.
fn deleted_by_update(cur: &Value, new: &Value) -> bool {
    let Some(meta) = cur.get("metadata") else {
        return false;
    };
    let no_grace_left = meta
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .is_none_or(|g| g == 0);
    let finalizers = new
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    meta.get("deletionTimestamp").is_some_and(|t| !t.is_null()) && no_grace_left && !finalizers
}
