//! What hooks with `after` wait on (docs/behaviour.md §6.16): every planned run of each named hook
//! in each restore, from the verified plan and status of the marked pods, as the object-status
//! watch sees them. The rule itself is `restore_hooks_core::after::after_turn`.
//!
//! The watch covers finished pods too (the pending-pod watch does not), and a new leader relists
//! it: what an awaited hook did is read from the pods, so it survives restarts and leader changes.
//! A worker that waits registers for the names it waits on and is woken when their runs change.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use restore_hooks_core::after::AwaitedRun;
use restore_hooks_core::hooks::plan::{ExecPlan, ExecStatus, HookPhase, OnError};
use tokio::sync::Notify;

/// A hook across the pods of a restore: (restore, hook name).
type HookKey = (String, String);

/// The runs of named hooks, by restore and name, and who waits for them.
#[derive(Default)]
pub struct HookRuns {
    inner: Mutex<Inner>,
    /// The watch of marked pods has listed them once: a name with no run is really unplanned
    /// (so far), not merely unlisted.
    listed: AtomicBool,
}

#[derive(Default)]
struct Inner {
    /// Each marked pod's runs, by uid.
    pods: HashMap<Arc<str>, PodRuns>,
    /// The pods with runs of each hook (their uids, shared with `pods`).
    by_hook: HashMap<HookKey, HashSet<Arc<str>>>,
    /// Workers waiting on a hook, by worker uid, with the way to wake them.
    waiters: HashMap<HookKey, HashMap<String, Arc<Notify>>>,
}

/// One pod's planned runs. Every marked pod of a restore has one, waited on or not, so it is
/// kept small: a few allocations, not a map entry per hook.
#[derive(PartialEq)]
struct PodRuns {
    /// `namespace/name`.
    pod: Box<str>,
    restore: Box<str>,
    /// Its hooks in plan order: name, phase, `onError`.
    hooks: Box<[(Box<str>, HookPhase, OnError)]>,
}

impl PodRuns {
    fn keys(&self) -> impl Iterator<Item = HookKey> + '_ {
        self.hooks
            .iter()
            .map(|(name, ..)| (self.restore.to_string(), name.to_string()))
    }

    /// Its runs of hook `key`.
    fn runs<'a>(&'a self, key: &'a HookKey) -> impl Iterator<Item = AwaitedRun> + 'a {
        let ours = *self.restore == *key.0;
        self.hooks
            .iter()
            .filter(move |(name, ..)| ours && **name == *key.1)
            .map(|&(_, phase, on_error)| AwaitedRun {
                pod: self.pod.to_string(),
                phase,
                on_error,
            })
    }
}

impl HookRuns {
    /// A pod's verified plan and status (or its worker's last word): replaces its runs and wakes
    /// the workers waiting on hooks whose runs changed.
    pub fn set(&self, uid: &str, pod: &str, plan: &ExecPlan, status: Option<&ExecStatus>) {
        let hooks = plan
            .hooks
            .iter()
            .enumerate()
            .map(|(i, hook)| {
                let phase = status
                    .and_then(|s| s.hooks.get(i))
                    .filter(|s| s.name == hook.name && s.index == hook.index)
                    .map_or(HookPhase::Pending, |s| s.phase);
                (hook.name.as_str().into(), phase, hook.on_error)
            })
            .collect();
        let runs = PodRuns {
            pod: pod.into(),
            restore: plan.restore.as_str().into(),
            hooks,
        };
        let mut inner = self.lock();
        let (uid, old) = match inner.take(uid) {
            Some((uid, old)) => (uid, Some(old)),
            None => (Arc::from(uid), None),
        };
        let changed: HashSet<HookKey> = old
            .iter()
            .chain([&runs])
            .flat_map(PodRuns::keys)
            .filter(|key| {
                let of = |p: Option<&PodRuns>| {
                    p.into_iter().flat_map(|p| p.runs(key)).collect::<Vec<_>>()
                };
                of(old.as_ref()) != of(Some(&runs))
            })
            .collect();
        for key in runs.keys() {
            inner.by_hook.entry(key).or_default().insert(uid.clone());
        }
        inner.pods.insert(uid, runs);
        inner.wake(&changed);
    }

    /// The pod is gone: its runs count no more.
    pub fn remove(&self, uid: &str) {
        let mut inner = self.lock();
        if let Some((_, old)) = inner.take(uid) {
            inner.wake(&old.keys().collect());
        }
    }

    /// The runs of hook `name` in `restore`, every pod's, in the order of the pods' names.
    pub fn runs(&self, restore: &str, name: &str) -> Vec<AwaitedRun> {
        let inner = self.lock();
        let key = (restore.to_string(), name.to_string());
        let mut runs: Vec<AwaitedRun> = inner
            .by_hook
            .get(&key)
            .into_iter()
            .flatten()
            .filter_map(|uid| inner.pods.get(uid))
            .flat_map(|p| p.runs(&key))
            .collect();
        runs.sort_by(|a, b| a.pod.cmp(&b.pod));
        runs
    }

    /// Worker `uid` waits on `names` of `restore` (replacing what it waited on before): `wake`
    /// is notified when their runs change.
    pub fn wait_on(&self, uid: &str, restore: &str, names: &[&str], wake: &Arc<Notify>) {
        let mut inner = self.lock();
        inner.forget_waiter(uid);
        for name in names {
            inner
                .waiters
                .entry((restore.to_string(), name.to_string()))
                .or_default()
                .insert(uid.to_string(), wake.clone());
        }
    }

    /// Worker `uid` waits on nothing any more.
    pub fn leave(&self, uid: &str) {
        self.lock().forget_waiter(uid);
    }

    /// Whether the marked pods were listed once.
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The marked pods were listed: every waiter looks again.
    pub fn set_listed(&self) {
        if !self.listed.swap(true, Ordering::AcqRel) {
            let inner = self.lock();
            for wake in inner.waiters.values().flat_map(HashMap::values) {
                wake.notify_one();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Removes pod `uid`'s runs and returns them, with the uid as the maps share it.
    fn take(&mut self, uid: &str) -> Option<(Arc<str>, PodRuns)> {
        let (uid, old) = self.pods.remove_entry(uid)?;
        for key in old.keys() {
            if let Some(pods) = self.by_hook.get_mut(&key) {
                pods.remove(&uid);
                if pods.is_empty() {
                    self.by_hook.remove(&key);
                }
            }
        }
        Some((uid, old))
    }

    fn forget_waiter(&mut self, uid: &str) {
        self.waiters.retain(|_, workers| {
            workers.remove(uid);
            !workers.is_empty()
        });
    }

    fn wake(&self, keys: &HashSet<HookKey>) {
        for key in keys {
            for wake in self.waiters.get(key).into_iter().flat_map(HashMap::values) {
                wake.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use restore_hooks_core::exec_step::{align, pending};
    use restore_hooks_core::hooks::plan::PlannedHook;

    use super::*;

    fn plan(restore: &str, names: &[&str]) -> ExecPlan {
        let mut plan: ExecPlan = serde_json::from_value(serde_json::json!({
            "restore": restore, "issuedAt": "2026-12-04T00:00:00Z", "id": "x", "hooks": []
        }))
        .unwrap();
        plan.hooks = names
            .iter()
            .enumerate()
            .map(|(index, name)| {
                serde_json::from_value::<PlannedHook>(serde_json::json!({
                    "name": name, "source": format!("restorehook/{name}"), "index": index,
                    "container": "db", "command": ["true"], "onError": "Fail",
                    "execTimeoutMs": 30000, "waitTimeoutMs": null, "waitForReady": false
                }))
                .unwrap()
            })
            .collect();
        plan
    }

    async fn woken(n: &Notify) -> bool {
        tokio::time::timeout(Duration::from_millis(50), n.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn runs_follow_the_pods_and_wake_only_their_waiters() {
        let runs = HookRuns::default();
        let (db, other) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        runs.wait_on("app-0", "r1", &["db-restore"], &db);
        runs.wait_on("app-1", "r1", &["cache"], &other);

        let p = plan("r1", &["db-restore", "local"]);
        runs.set("u0", "shop/db-0", &p, None);
        assert!(
            woken(&db).await,
            "a first run of db-restore wakes its waiter"
        );
        assert!(!woken(&other).await, "nobody waits on it elsewhere");
        assert_eq!(
            runs.runs("r1", "db-restore"),
            [AwaitedRun {
                pod: "shop/db-0".into(),
                phase: HookPhase::Pending,
                on_error: OnError::Fail
            }]
        );
        assert!(
            runs.runs("r2", "db-restore").is_empty(),
            "restores are apart"
        );

        // The same again wakes nobody; a phase change of db-restore does.
        let mut status = align(&p, None);
        runs.set("u0", "shop/db-0", &p, Some(&status));
        assert!(!woken(&db).await);
        status.hooks[1].phase = HookPhase::Succeeded;
        runs.set("u0", "shop/db-0", &p, Some(&status));
        assert!(!woken(&db).await, "only the other hook of the pod changed");
        status.hooks[0].phase = HookPhase::Succeeded;
        runs.set("u0", "shop/db-0", &p, Some(&status));
        assert!(woken(&db).await);
        assert_eq!(runs.runs("r1", "db-restore")[0].phase, HookPhase::Succeeded);

        // A status entry from another plan reads as pending.
        status.hooks[0] = pending(&plan("r1", &["else"]).hooks[0]);
        runs.set("u0", "shop/db-0", &p, Some(&status));
        assert_eq!(runs.runs("r1", "db-restore")[0].phase, HookPhase::Pending);
        assert!(woken(&db).await);

        // The pod goes: its runs go, its waiters look again; a worker that left is not woken.
        runs.leave("app-0");
        runs.remove("u0");
        assert!(runs.runs("r1", "db-restore").is_empty());
        assert!(!woken(&db).await);
        assert!(runs.lock().by_hook.is_empty() && runs.lock().pods.is_empty());
    }
}
