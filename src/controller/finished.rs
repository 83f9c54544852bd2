//! The pods this controller finished, remembered (bounded) so that a status reset by hand
//! (`restore-hooks.dev/status` removed, the label set back to `pending`) never runs a finished
//! pod's hooks again (docs/behaviour.md §9.5). The chart's admission policy keeps anyone but the
//! controller from making that edit on a real cluster; this covers the time a policy is not
//! installed, within a leader's lifetime.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

/// Pod uids, oldest forgotten first once `capacity` is reached.
pub struct FinishedPods {
    capacity: usize,
    inner: Mutex<(HashSet<String>, VecDeque<String>)>,
}

impl FinishedPods {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new((HashSet::new(), VecDeque::new())),
        }
    }

    pub fn insert(&self, uid: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (set, order) = &mut *inner;
        if set.insert(uid.to_string()) {
            order.push_back(uid.to_string());
            while order.len() > self.capacity {
                if let Some(old) = order.pop_front() {
                    set.remove(&old);
                }
            }
        }
    }

    /// A pod whose plan grew (late hooks) is not finished any more.
    pub fn remove(&self, uid: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (set, order) = &mut *inner;
        if set.remove(uid) {
            order.retain(|u| u != uid);
        }
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .contains(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_forgetful_in_order() {
        let f = FinishedPods::new(2);
        f.insert("a");
        f.insert("b");
        f.insert("a");
        f.insert("c");
        assert!(!f.contains("a") && f.contains("b") && f.contains("c"));
        f.remove("b");
        assert!(!f.contains("b"));
    }
}
