//! Where the pod workers of one leader meet for `runOn: OnePod` hooks (docs/behaviour.md §6.15):
//! each worker posts, per such hook, whether its pod is a candidate and whether the hook's
//! container is up; the choice itself is `restore_hooks_core::one_pod::choose`. A change wakes the
//! other candidates of the hook, so that the next pod is chosen as soon as the chosen one stops
//! being a candidate, and the others learn at once that the hook started.
//!
//! Only the choice lives here, in memory: which pod started a hook is in the controller's record
//! (the ledger), so a new leader never starts it again, whatever it posts here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use restore_hooks_core::one_pod::Candidate;
use tokio::sync::Notify;

/// Candidates by hook key, by pod uid, each with the way to wake its worker.
#[derive(Default)]
pub struct OnePodBoard {
    hooks: Mutex<Candidates>,
    /// The pod watch has delivered its first list: every pod that existed then is posted (see
    /// [`OnePodBoard::listed`]).
    listed: AtomicBool,
}

type Candidates = HashMap<String, HashMap<String, (Candidate, Arc<Notify>)>>;

impl OnePodBoard {
    /// Whether a choice may be made: not before the pods that already exist are all posted, or
    /// pod 1, whose worker happened to act first, would run a hook that pod 0 should.
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The pod watch delivered its first list (each listed pod was posted when its worker was
    /// made): choices may be made now; every candidate looks again.
    pub fn listed(&self) {
        if !self.listed.swap(true, Ordering::AcqRel) {
            for candidates in self.lock().values() {
                wake_others(candidates, "");
            }
        }
    }

    /// Posts pod `uid`'s standing for hook `key` (`None`: not a candidate any more) and returns
    /// the hook's candidates. When that changed what the others see, they are woken.
    pub fn post(
        &self,
        key: &str,
        uid: &str,
        standing: Option<Candidate>,
        wake: &Arc<Notify>,
    ) -> Vec<Candidate> {
        let mut hooks = self.lock();
        let candidates = hooks.entry(key.to_string()).or_default();
        let changed = match standing {
            Some(c) => {
                let same = candidates.get(uid).is_some_and(|(old, _)| *old == c);
                candidates.insert(uid.to_string(), (c, wake.clone()));
                !same
            }
            None => candidates.remove(uid).is_some(),
        };
        if changed {
            wake_others(candidates, uid);
        }
        let out = candidates.values().map(|(c, _)| c.clone()).collect();
        if candidates.is_empty() {
            hooks.remove(key);
        }
        out
    }

    /// The candidates of `key`.
    pub fn candidates(&self, key: &str) -> Vec<Candidate> {
        self.lock()
            .get(key)
            .map(|c| c.values().map(|(c, _)| c.clone()).collect())
            .unwrap_or_default()
    }

    /// Wakes every candidate of `key` but `uid` (its start was just recorded).
    pub fn wake(&self, key: &str, uid: &str) {
        if let Some(candidates) = self.lock().get(key) {
            wake_others(candidates, uid);
        }
    }

    /// Pod `uid`'s worker stops: it is no candidate of anything any more.
    pub fn leave(&self, uid: &str) {
        let mut hooks = self.lock();
        hooks.retain(|_, candidates| {
            if candidates.remove(uid).is_some() {
                wake_others(candidates, uid);
            }
            !candidates.is_empty()
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Candidates> {
        self.hooks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn wake_others(candidates: &HashMap<String, (Candidate, Arc<Notify>)>, uid: &str) {
    for (other, (_, wake)) in candidates {
        if other != uid {
            wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(uid: &str, up: bool) -> Candidate {
        Candidate {
            uid: uid.into(),
            pod: format!("shop/{uid}"),
            ordinal: None,
            created: None,
            up,
        }
    }

    #[tokio::test]
    async fn a_change_wakes_the_other_candidates_only() {
        let board = OnePodBoard::default();
        let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        assert_eq!(
            board.post("k", "a", Some(candidate("a", false)), &a).len(),
            1
        );
        assert_eq!(
            board.post("k", "b", Some(candidate("b", true)), &b).len(),
            2
        );
        // b's post woke a (a permit is stored), not b itself.
        tokio::time::timeout(std::time::Duration::from_secs(5), a.notified())
            .await
            .expect("a was woken");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), b.notified())
                .await
                .is_err(),
            "b was not woken by its own post"
        );
        // The same standing again wakes nobody; b leaving wakes a.
        board.post("k", "b", Some(candidate("b", true)), &b);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), a.notified())
                .await
                .is_err()
        );
        board.leave("b");
        tokio::time::timeout(std::time::Duration::from_secs(5), a.notified())
            .await
            .expect("a was woken when b left");
        assert_eq!(board.post("k", "a", None, &a), vec![]);
    }
}
