//! Exec slots (`--max-concurrent-execs`), shared fairly across namespaces
//! (docs/behaviour.md §6.11).
//!
//! A running hook holds a slot for up to its exec timeout. With one plain semaphore, two
//! namespaces' `sleep 3600` hooks held every slot and a third restore's hooks waited without a
//! word. So: one namespace holds at most `per_namespace` slots, free slots go round-robin to the
//! namespaces that wait, and the wait for a slot counts against the hook's waitTimeout (the state
//! machine fails a starved hook with "no exec slot within waitTimeout").

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

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

/// A hook's wait for a slot: a future of the [`SlotPermit`].
pub enum SlotWait {
    /// Granted when asked; `None` once taken.
    Granted(Option<SlotPermit>),
    /// In the queue of its namespace.
    Queued(oneshot::Receiver<SlotPermit>),
}

impl Future for SlotWait {
    type Output = SlotPermit;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<SlotPermit> {
        match self.get_mut() {
            SlotWait::Granted(permit) => match permit.take() {
                Some(permit) => Poll::Ready(permit),
                None => Poll::Pending,
            },
            SlotWait::Queued(rx) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(permit)) => Poll::Ready(permit),
                // The sender is only dropped with the slots themselves, which outlive every
                // worker.
                Poll::Ready(Err(_)) | Poll::Pending => Poll::Pending,
            },
        }
    }
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

    /// A slot for a hook of `namespace`: granted at once when one is free and nobody of the
    /// namespace queues before it, else a place in the queue. Dropping the [`SlotWait`] gives up
    /// the place. Not an `async fn`: the place is taken now, and a waiting hook costs its pod's
    /// worker one channel rather than a task of its own (a restore can have thousands of pods
    /// waiting for slots).
    pub fn acquire(self: &Arc<Self>, namespace: &str) -> SlotWait {
        let mut state = self.lock();
        let queued = state.waiting.get(namespace).is_some_and(|q| !q.is_empty());
        if !queued && self.can_grant(&state, namespace) {
            return SlotWait::Granted(Some(self.grant(&mut state, namespace.to_string())));
        }
        let (tx, rx) = oneshot::channel();
        match state.waiting.get_mut(namespace) {
            Some(queue) => queue.push_back(tx),
            None => {
                state
                    .waiting
                    .insert(namespace.to_string(), VecDeque::from([tx]));
            }
        }
        SlotWait::Queued(rx)
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
        let a1 = s.acquire("a").await;
        let mut a2 = s.acquire("a");
        assert!(
            granted(&mut a2).await.is_none(),
            "a already holds its share"
        );
        let b1 = s.acquire("b").await;
        assert_eq!(s.in_use(), 2);
        drop(b1);
        assert!(granted(&mut a2).await.is_none(), "still a's share");
        drop(a1);
        assert!(granted(&mut a2).await.is_some(), "a's own slot came back");
    }

    #[tokio::test]
    async fn free_slots_go_round_robin_and_abandoned_waits_are_skipped() {
        let s = slots(1, 1);
        let held = s.acquire("a").await;
        let mut a = s.acquire("a");
        let mut b = s.acquire("b");
        let gone = s.acquire("c");
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
