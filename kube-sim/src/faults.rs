//! Fault injection: failing requests, dropped watches, slow responses, pods deleted mid-exec.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// Shared by the server; every method takes `&self` (interior mutability) so tests can hold
/// `handle.faults()` while the simulator runs.
pub struct Faults {
    fail: Mutex<HashMap<(String, String), usize>>,
    delay: Mutex<Duration>,
    drop_gen: watch::Sender<u64>,
    exec_break_gen: watch::Sender<u64>,
    orphans_survive: AtomicBool,
    delete_on_exec: PodMarks,
    held_deletes: PodMarks,
    compact: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// Requests served, by verb and resource (as [`Faults::fail_next`] names them).
    requests: Mutex<HashMap<(String, String), usize>>,
    /// Resources whose watch events are held back ([`Faults::stall_watches`]).
    stalled: watch::Sender<HashSet<String>>,
}

/// Pods marked for a one-shot fault: marked by a test, taken (once) by the simulator.
#[derive(Debug, Default)]
struct PodMarks(Mutex<HashSet<(String, String)>>);

impl PodMarks {
    fn set(&self, ns: &str, name: &str) {
        self.0
            .lock()
            .unwrap()
            .insert((ns.to_string(), name.to_string()));
    }

    fn take(&self, ns: &str, name: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .remove(&(ns.to_string(), name.to_string()))
    }
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("fail", &self.fail)
            .field("delay", &self.delay)
            .field("delete_on_exec", &self.delete_on_exec)
            .field("held_deletes", &self.held_deletes)
            .finish_non_exhaustive()
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            fail: Mutex::default(),
            delay: Mutex::default(),
            drop_gen: watch::channel(0).0,
            exec_break_gen: watch::channel(0).0,
            orphans_survive: AtomicBool::new(false),
            delete_on_exec: PodMarks::default(),
            held_deletes: PodMarks::default(),
            compact: Mutex::default(),
            requests: Mutex::default(),
            stalled: watch::channel(HashSet::new()).0,
        }
    }
}

impl Faults {
    /// The next `n` requests with this verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`; `*` for any) on this resource (plural such as `pods` or
    /// `leases`; subresources are separate: `pods/status`, `pods/exec`; `*` for any) answer
    /// 500 InternalError.
    pub fn fail_next(&self, verb: &str, resource: &str, n: usize) {
        let mut f = self.fail.lock().unwrap();
        *f.entry((verb.to_string(), resource.to_string()))
            .or_default() += n;
    }

    /// Forgets every failure injected with [`Self::fail_next`] and not consumed yet: requests
    /// are answered normally again.
    pub fn clear_failures(&self) {
        self.fail.lock().unwrap().clear();
    }

    /// How many requests with this verb on this resource (named as for [`Faults::fail_next`],
    /// `*` for any) the simulator received so far: what a client costs the API server.
    pub fn requests(&self, verb: &str, resource: &str) -> usize {
        let seen = self.requests.lock().unwrap();
        seen.iter()
            .filter(|((v, r), _)| (verb == "*" || v == verb) && (resource == "*" || r == resource))
            .map(|(_, n)| n)
            .sum()
    }

    pub(crate) fn count(&self, verb: &str, resource: &str) {
        *self
            .requests
            .lock()
            .unwrap()
            .entry((verb.to_string(), resource.to_string()))
            .or_default() += 1;
    }

    /// Consumes one injected failure matching this request, if any.
    pub(crate) fn take_failure(&self, verb: &str, resource: &str) -> bool {
        let mut f = self.fail.lock().unwrap();
        let keys = [(verb, resource), ("*", resource), (verb, "*"), ("*", "*")];
        for (v, r) in keys {
            if let Some(n) = f.get_mut(&(v.to_string(), r.to_string()))
                && *n > 0
            {
                *n -= 1;
                return true;
            }
        }
        false
    }

    /// Holds back the watch events of `resource` (plural, such as `namespaces`) until
    /// [`Self::resume_watches`]: clients see an open, quiet stream, as from an API server whose
    /// watch cache is behind. Lists and gets answer as usual; held events are delivered in order
    /// once resumed.
    pub fn stall_watches(&self, resource: &str) {
        self.stalled.send_modify(|s| {
            s.insert(resource.to_string());
        });
    }

    /// Delivers the watch events of `resource` again (see [`Self::stall_watches`]).
    pub fn resume_watches(&self, resource: &str) {
        self.stalled.send_modify(|s| {
            s.remove(resource);
        });
    }

    /// Returns once the watch events of `resource` are not held back.
    pub(crate) async fn watch_released(&self, resource: &str) {
        let mut stalled = self.stalled.subscribe();
        // The sender lives as long as `self`.
        let _ = stalled.wait_for(|s| !s.contains(resource)).await;
    }

    /// Closes every open watch stream now (clients see the response end and must re-watch).
    pub fn drop_watches(&self) {
        self.drop_gen.send_modify(|g| *g += 1);
    }

    pub(crate) fn watch_drops(&self) -> watch::Receiver<u64> {
        self.drop_gen.subscribe()
    }

    /// Drops every open exec connection now, as when the API server (or the network to it) goes
    /// away mid-exec: the TCP connection closes without a WebSocket close frame and without a
    /// status on channel 3. The process is treated as after a client disconnect (killed, unless
    /// [`Self::set_orphaned_execs_survive`]).
    pub fn break_execs(&self) {
        self.exec_break_gen.send_modify(|g| *g += 1);
    }

    pub(crate) fn exec_breaks(&self) -> watch::Receiver<u64> {
        self.exec_break_gen.subscribe()
    }

    /// `true`: an exec whose client went away keeps running until it ends by itself, as in a
    /// real container (the exec API cannot signal the process). Default `false`: the simulator
    /// kills it, so that tests do not leak processes. Processes are killed at shutdown either way.
    pub fn set_orphaned_execs_survive(&self, survive: bool) {
        self.orphans_survive.store(survive, Ordering::SeqCst);
    }

    pub(crate) fn orphaned_execs_survive(&self) -> bool {
        self.orphans_survive.load(Ordering::SeqCst)
    }

    /// Delays every response before it is handled (watch requests and events are not delayed).
    pub fn set_delay(&self, d: Duration) {
        *self.delay.lock().unwrap() = d;
    }

    pub(crate) fn delay(&self) -> Duration {
        *self.delay.lock().unwrap()
    }

    /// The next DELETE of the pod stops after the apiserver's first step: the pod gets a
    /// `deletionTimestamp` with no grace period left (a force delete, or a pod never scheduled)
    /// and stays until the next write to it, which deletes it with that write's content. That is
    /// what a client sees when its write lands between the two steps of such a delete: the write
    /// succeeds, and is seen by watches only in the DELETED event.
    pub fn hold_delete(&self, ns: &str, name: &str) {
        self.held_deletes.set(ns, name);
    }

    pub(crate) fn take_held_delete(&self, ns: &str, name: &str) -> bool {
        self.held_deletes.take(ns, name)
    }

    /// Deletes the pod as soon as an exec into it starts; the exec stream then breaks
    /// without an exit status, as when a pod is killed under a running hook.
    pub fn delete_pod_on_exec(&self, ns: &str, name: &str) {
        self.delete_on_exec.set(ns, name);
    }

    pub(crate) fn take_delete_on_exec(&self, ns: &str, name: &str) -> bool {
        self.delete_on_exec.take(ns, name)
    }

    /// Forgets the watch history: any watch resuming from an older resourceVersion gets
    /// 410 Gone (an `ERROR` event), as after an etcd compaction.
    pub fn compact(&self) {
        if let Some(f) = self.compact.lock().unwrap().as_ref() {
            f();
        }
    }

    pub(crate) fn set_compactor(&self, f: Box<dyn Fn() + Send + Sync>) {
        *self.compact.lock().unwrap() = Some(f);
    }
}
