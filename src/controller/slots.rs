//! Exec slots (`--max-concurrent-execs`), shared fairly across namespaces
//! (docs/behaviour.md §6.11).
//!
//! A running hook holds a slot for up to its exec timeout. With one plain semaphore, two
//! namespaces' `sleep 3600` hooks held every slot and a third restore's hooks waited without a
//! word. So: who may take a free slot is `restore_hooks_core::exec_slots::may_take` (a cap per
//! namespace, a reserve for namespaces that hold none, a fair share among those that hold or
//! wait), free slots go round-robin to the namespaces that wait and may take one, and the wait
//! for a slot counts against the hook's waitTimeout (the state machine fails a starved hook with
//! "no exec slot within waitTimeout").
//!
//! A pod's first hook goes ahead of the later hooks of pods that already had one: while pods
//! come up faster than the slots serve them, one plain queue made each new pod wait behind every
//! earlier pod's remaining hooks before anything started on it. The order changes who waits, not
//! how long the restore takes; namespaces still take turns within each of the two queues.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use prometheus::{IntGauge, IntGaugeVec};
use restore_hooks_core::exec_slots::{SlotShare, may_take};
use tokio::sync::oneshot;

/// The controller's exec slots: a semaphore that is fair across namespaces.
pub struct ExecSlots {
    share: SlotShare,
    gauge: IntGauge,
    /// Hooks waiting, by [`Turn`].
    waiting: [IntGauge; 2],
    state: Mutex<State>,
}

/// Which queue a hook waits in (docs/behaviour.md §6.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// No hook of the pod has started yet: served first.
    First,
    /// The pod already had a hook start (here or under an earlier leader).
    Later,
}

impl Turn {
    const ALL: [Turn; 2] = [Turn::First, Turn::Later];

    fn queue(self) -> usize {
        self as usize
    }

    /// The value of label `turn` of `restore_hooks_exec_slot_waiting`.
    fn label(self) -> &'static str {
        match self {
            Turn::First => "first",
            Turn::Later => "later",
        }
    }
}

type Queues = BTreeMap<String, VecDeque<oneshot::Sender<SlotPermit>>>;

#[derive(Default)]
struct State {
    in_use: usize,
    held: HashMap<String, usize>,
    /// Waiters by turn, then by namespace, in arrival order.
    waiting: [Queues; 2],
    /// The namespace served last: the next grant goes to the next one in order.
    last: Option<String>,
}

/// How many namespaces hold or wait for slots, `namespace` among them.
fn active(state: &State, namespace: &str) -> usize {
    let mut names: std::collections::HashSet<&str> =
        state.held.keys().map(String::as_str).collect();
    for queues in &state.waiting {
        names.extend(
            queues
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(n, _)| n.as_str()),
        );
    }
    names.insert(namespace);
    names.len()
}

/// A hook's wait for a slot: a future of the [`SlotPermit`].
pub enum SlotWait {
    /// Granted when asked; `None` once taken.
    Granted(Option<SlotPermit>),
    /// In the queue of its namespace; counted as waiting until granted or dropped.
    Queued(oneshot::Receiver<SlotPermit>, Waiting),
}

/// One hook counted in `restore_hooks_exec_slot_waiting` while it waits.
pub struct Waiting(IntGauge);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Future for SlotWait {
    type Output = SlotPermit;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<SlotPermit> {
        let this = self.get_mut();
        match this {
            SlotWait::Granted(permit) => match permit.take() {
                Some(permit) => Poll::Ready(permit),
                None => Poll::Pending,
            },
            SlotWait::Queued(rx, _) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(permit)) => {
                    *this = SlotWait::Granted(None);
                    Poll::Ready(permit)
                }
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
    /// namespace; both are at least 1. `gauge` counts the slots in use, `waiting` (by label
    /// `turn`) the hooks waiting for one.
    pub fn new(
        total: usize,
        per_namespace: usize,
        gauge: IntGauge,
        waiting: &IntGaugeVec,
    ) -> Arc<Self> {
        Arc::new(Self {
            share: SlotShare::new(total, per_namespace),
            gauge,
            waiting: Turn::ALL.map(|t| waiting.with_label_values(&[t.label()])),
            state: Mutex::new(State::default()),
        })
    }

    /// A slot for a hook of `namespace`, in queue `turn`: granted at once when one is free and
    /// nobody of the namespace queues before it, else a place in the queue. Dropping the
    /// [`SlotWait`] gives up the place. Not an `async fn`: the place is taken now, and a waiting
    /// hook costs its pod's worker one channel rather than a task of its own (a restore can have
    /// thousands of pods waiting for slots).
    pub fn acquire(self: &Arc<Self>, namespace: &str, turn: Turn) -> SlotWait {
        let mut state = self.lock();
        // A first hook passes the namespace's later ones.
        let queued = Turn::ALL[..=turn.queue()].iter().any(|t| {
            state.waiting[t.queue()]
                .get(namespace)
                .is_some_and(|q| !q.is_empty())
        });
        if !queued && self.can_grant(&state, namespace) {
            return SlotWait::Granted(Some(self.grant(&mut state, namespace.to_string())));
        }
        let (tx, rx) = oneshot::channel();
        state.waiting[turn.queue()]
            .entry(namespace.to_string())
            .or_default()
            .push_back(tx);
        let gauge = self.waiting[turn.queue()].clone();
        gauge.inc();
        SlotWait::Queued(rx, Waiting(gauge))
    }

    /// Slots held right now.
    pub fn in_use(&self) -> usize {
        self.lock().in_use
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn can_grant(&self, state: &State, namespace: &str) -> bool {
        let held = state.held.get(namespace).copied().unwrap_or(0);
        may_take(&self.share, held, state.in_use, active(state, namespace))
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

    /// Hands free slots to waiting namespaces, round-robin, within their per-namespace share:
    /// first hooks first, then later ones.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        while state.in_use < self.share.total {
            let Some((turn, namespace)) = Turn::ALL
                .iter()
                .find_map(|&t| self.next_in(state, t).map(|ns| (t.queue(), ns)))
            else {
                return;
            };
            let queues = &mut state.waiting[turn];
            let tx = queues
                .get_mut(&namespace)
                .and_then(VecDeque::pop_front)
                .expect("eligible namespaces have a waiter");
            if queues.get(&namespace).is_some_and(VecDeque::is_empty) {
                queues.remove(&namespace);
            }
            let permit = self.grant(state, namespace.clone());
            if let Err(mut permit) = tx.send(permit) {
                // That waiter gave up (its hook expired): the slot was never used.
                permit.armed = false;
                self.ungrant(state, &namespace);
            }
        }
    }

    /// The namespace whose waiter of `turn` is served next: the first after the one served
    /// last, in name order, that has one and is below its share.
    fn next_in(&self, state: &State, turn: Turn) -> Option<String> {
        let queues = &state.waiting[turn.queue()];
        let after = state.last.as_ref();
        queues
            .keys()
            .filter(|ns| after.is_none_or(|a| *ns > a))
            .chain(queues.keys())
            .find(|ns| !queues[*ns].is_empty() && self.can_grant(state, ns))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn slots(total: usize, per_namespace: usize) -> Arc<ExecSlots> {
        let waiting = IntGaugeVec::new(prometheus::Opts::new("w", "w"), &["turn"]).unwrap();
        ExecSlots::new(
            total,
            per_namespace,
            IntGauge::new("g", "g").unwrap(),
            &waiting,
        )
    }

    fn waiting(s: &ExecSlots) -> [i64; 2] {
        s.waiting.clone().map(|g| g.get())
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
        let a1 = s.acquire("a", Turn::First).await;
        let mut a2 = s.acquire("a", Turn::First);
        assert!(
            granted(&mut a2).await.is_none(),
            "a already holds its share"
        );
        let b1 = s.acquire("b", Turn::First).await;
        assert_eq!(s.in_use(), 2);
        drop(b1);
        assert!(granted(&mut a2).await.is_none(), "still a's share");
        drop(a1);
        assert!(granted(&mut a2).await.is_some(), "a's own slot came back");
    }

    #[tokio::test]
    async fn free_slots_go_round_robin_and_abandoned_waits_are_skipped() {
        let s = slots(1, 1);
        let held = s.acquire("a", Turn::First).await;
        let mut a = s.acquire("a", Turn::First);
        let mut b = s.acquire("b", Turn::First);
        let gone = s.acquire("c", Turn::First);
        // Register all three waiters.
        assert!(granted(&mut a).await.is_none());
        assert!(granted(&mut b).await.is_none());
        drop(gone);
        assert_eq!(waiting(&s), [2, 0], "a wait given up is no longer counted");
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

    #[tokio::test]
    async fn a_pods_first_hook_goes_before_later_hooks_of_other_pods() {
        let s = slots(1, 1);
        let held = s.acquire("a", Turn::Later).await;
        let mut later_b = s.acquire("b", Turn::Later);
        let mut later_a = s.acquire("a", Turn::Later);
        let mut first_c = s.acquire("c", Turn::First);
        let mut first_a = s.acquire("a", Turn::First);
        for wait in [&mut later_b, &mut later_a, &mut first_c, &mut first_a] {
            assert!(granted(wait).await.is_none());
        }
        assert_eq!(
            waiting(&s),
            [2, 2],
            "two first hooks and two later ones wait"
        );
        // First hooks go first, round-robin after "a" (served last): "c", then "a".
        drop(held);
        let c = granted(&mut first_c).await.expect("c's first hook");
        assert!(granted(&mut first_a).await.is_none());
        assert!(granted(&mut later_b).await.is_none());
        drop(c);
        let a = granted(&mut first_a).await.expect("a's first hook");
        assert_eq!(waiting(&s), [0, 2]);
        drop(a);
        // Then the later hooks, round-robin again: "b" comes after "a".
        let b = granted(&mut later_b).await.expect("b's later hook");
        assert!(granted(&mut later_a).await.is_none());
        drop(b);
        assert!(granted(&mut later_a).await.is_some());
        assert_eq!(waiting(&s), [0, 0]);
    }

    #[tokio::test]
    async fn a_first_hook_over_its_namespace_share_lets_later_hooks_of_others_through() {
        let s = slots(2, 1);
        let _a = s.acquire("a", Turn::Later).await;
        let mut first_a = s.acquire("a", Turn::First);
        assert!(granted(&mut first_a).await.is_none(), "a holds its share");
        let mut later_b = s.acquire("b", Turn::Later);
        assert!(
            granted(&mut later_b).await.is_some(),
            "the free slot is not kept for a's first hook"
        );
    }
}
