//! Exec slots (`--max-concurrent-execs`), shared fairly across namespaces
//! (docs/behaviour.md §6.11).
//!
//! A running hook holds a slot for up to its exec timeout. With one plain semaphore, two
//! namespaces' `sleep 3600` hooks held every slot and a third restore's hooks waited without a
//! word. So: one namespace holds at most `per_namespace` slots, free slots go round-robin to the
//! namespaces that wait, and the wait for a slot counts against the hook's waitTimeout (the state
//! machine fails a starved hook with "no exec slot within waitTimeout").

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use prometheus::IntGauge;
use tokio::sync::oneshot;

/// The controller's exec slots: a semaphore that is fair across namespaces.
pub struct ExecSlots {
    total: usize,
    per_namespace: usize,
    gauge: IntGauge,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    in_use: usize,
    held: HashMap<String, usize>,
    /// Waiters by namespace, in arrival order.
    waiting: BTreeMap<String, VecDeque<oneshot::Sender<SlotPermit>>>,
    /// The namespace served last: the next grant goes to the next one in order.
    last: Option<String>,
}

/// One slot; released when dropped.
pub struct SlotPermit {
    slots: Arc<ExecSlots>,
    namespace: String,
    /// False once handed back without a release (a waiter that went away).
    armed: bool,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        if self.armed {
            self.slots.release(&self.namespace);
        }
    }
}

impl ExecSlots {
    /// `total` slots (`--max-concurrent-execs`), at most `per_namespace` of them held by one
    /// namespace; both are at least 1. `gauge` follows the slots in use.
    pub fn new(total: usize, per_namespace: usize, gauge: IntGauge) -> Arc<Self> {
        Arc::new(Self {
            total: total.max(1),
            per_namespace: per_namespace.clamp(1, total.max(1)),
            gauge,
            state: Mutex::new(State::default()),
        })
    }

    /// Waits for a slot for a hook of `namespace`. Dropping the future gives up the place.
    pub async fn acquire(self: Arc<Self>, namespace: String) -> SlotPermit {
        let rx = {
            let mut state = self.lock();
            let queued = state.waiting.get(&namespace).is_some_and(|q| !q.is_empty());
            if !queued && self.can_grant(&state, &namespace) {
                return self.grant(&mut state, namespace);
            }
            let (tx, rx) = oneshot::channel();
            state.waiting.entry(namespace).or_default().push_back(tx);
            rx
        };
        match rx.await {
            Ok(permit) => permit,
            // The sender is only dropped with the slots themselves, which outlive every worker.
            Err(_) => std::future::pending().await,
        }
    }

    /// Slots held right now.
    pub fn in_use(&self) -> usize {
        self.lock().in_use
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn can_grant(&self, state: &State, namespace: &str) -> bool {
        state.in_use < self.total
            && state.held.get(namespace).copied().unwrap_or(0) < self.per_namespace
    }

    fn grant(self: &Arc<Self>, state: &mut State, namespace: String) -> SlotPermit {
        state.in_use += 1;
        *state.held.entry(namespace.clone()).or_default() += 1;
        state.last = Some(namespace.clone());
        self.gauge.set(state.in_use as i64);
        SlotPermit {
            slots: self.clone(),
            namespace,
            armed: true,
        }
    }

    fn ungrant(&self, state: &mut State, namespace: &str) {
        state.in_use -= 1;
        if let Some(n) = state.held.get_mut(namespace) {
            *n -= 1;
            if *n == 0 {
                state.held.remove(namespace);
            }
        }
        self.gauge.set(state.in_use as i64);
    }

    fn release(self: &Arc<Self>, namespace: &str) {
        let mut state = self.lock();
        self.ungrant(&mut state, namespace);
        self.dispatch(&mut state);
    }

    /// Hands free slots to waiting namespaces, round-robin, within their per-namespace share.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        loop {
            if state.in_use >= self.total {
                return;
            }
            let after = state.last.clone();
            let eligible = |s: &State, ns: &String| {
                s.waiting.get(ns).is_some_and(|q| !q.is_empty()) && self.can_grant(s, ns)
            };
            let names: Vec<String> = state.waiting.keys().cloned().collect();
            let next = names
                .iter()
                .filter(|ns| after.as_ref().is_none_or(|a| *ns > a))
                .chain(names.iter())
                .find(|ns| eligible(state, ns))
                .cloned();
            let Some(namespace) = next else { return };
            let tx = state
                .waiting
                .get_mut(&namespace)
                .and_then(VecDeque::pop_front)
                .expect("eligible namespaces have a waiter");
            if state
                .waiting
                .get(&namespace)
                .is_some_and(VecDeque::is_empty)
            {
                state.waiting.remove(&namespace);
            }
            let permit = self.grant(state, namespace.clone());
            if let Err(mut permit) = tx.send(permit) {
                // That waiter gave up (its hook expired): the slot was never used.
                permit.armed = false;
                self.ungrant(state, &namespace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn slots(total: usize, per_namespace: usize) -> Arc<ExecSlots> {
        ExecSlots::new(total, per_namespace, IntGauge::new("g", "g").unwrap())
    }

    async fn granted(
        f: &mut (impl std::future::Future<Output = SlotPermit> + Unpin),
    ) -> Option<SlotPermit> {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .ok()
    }

    #[tokio::test]
    async fn one_namespace_cannot_take_every_slot() {
        let s = slots(2, 1);
        let a1 = s.clone().acquire("a".into()).await;
        let mut a2 = Box::pin(s.clone().acquire("a".into()));
        assert!(
            granted(&mut a2).await.is_none(),
            "a already holds its share"
        );
        let b1 = s.clone().acquire("b".into()).await;
        assert_eq!(s.in_use(), 2);
        drop(b1);
        assert!(granted(&mut a2).await.is_none(), "still a's share");
        drop(a1);
        assert!(granted(&mut a2).await.is_some(), "a's own slot came back");
    }

    #[tokio::test]
    async fn free_slots_go_round_robin_and_abandoned_waits_are_skipped() {
        let s = slots(1, 1);
        let held = s.clone().acquire("a".into()).await;
        let mut a = Box::pin(s.clone().acquire("a".into()));
        let mut b = Box::pin(s.clone().acquire("b".into()));
        let gone = Box::pin(s.clone().acquire("c".into()));
        // Register all three waiters.
        assert!(granted(&mut a).await.is_none());
        assert!(granted(&mut b).await.is_none());
        drop(gone);
        drop(held);
        // "a" was served last: the slot goes to "b" although "a" waited first.
        let pb = granted(&mut b).await.expect("b next");
        assert!(granted(&mut a).await.is_none());
        drop(pb);
        // "c" gave up: its turn is skipped and "a" gets the slot.
        let pa = granted(&mut a).await;
        assert!(pa.is_some());
        assert_eq!(s.in_use(), 1);
        drop(pa);
        assert_eq!(s.in_use(), 0);
    }
}
