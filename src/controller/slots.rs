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
//!
//! Claims (§6.9): a start's two writes (its `Running` record and the record's start) take a round
//! trip to the API server, and a slot held through them runs nothing meanwhile. While every slot
//! is held, the waiters next in line are handed a [`ClaimTicket`] instead: they write their start
//! while they wait, then queue as claimed, ahead of the unclaimed hooks of their turn, and start
//! their exec the moment a slot is theirs. Tickets go round-robin too, only to namespaces below
//! their share of tickets, and there are as many as slots: a crash interrupts at most twice
//! `--max-concurrent-execs` hooks (those running and those claimed), and a controller that stops
//! leading gives its claims back.

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
    /// Claim tickets (docs/behaviour.md §6.9): as many as slots in the controller, 0 for none.
    claim_window: usize,
    gauge: IntGauge,
    /// Hooks waiting, by label `turn`: claimed, first, later.
    waiting: [IntGauge; 3],
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

/// The queues, in the order they are served: within each turn, hooks whose start is written
/// (claimed) go first, and no claim moves a later hook ahead of a first one.
const CLAIMED_FIRST: usize = 0;
const FIRST: usize = 1;
const CLAIMED_LATER: usize = 2;
const LATER: usize = 3;
/// The queues whose waiters have not written their start: claim tickets go to them.
const UNCLAIMED: [usize; 2] = [FIRST, LATER];
/// The values of label `turn` of `restore_hooks_exec_slot_waiting`, and each queue's.
const LABELS: [&str; 3] = ["claimed", "first", "later"];
const LABEL_OF: [usize; 4] = [0, 1, 0, 2];

fn queue(turn: Turn, claimed: bool) -> usize {
    match (turn, claimed) {
        (Turn::First, true) => CLAIMED_FIRST,
        (Turn::First, false) => FIRST,
        (Turn::Later, true) => CLAIMED_LATER,
        (Turn::Later, false) => LATER,
    }
}

type Queues = BTreeMap<String, VecDeque<oneshot::Sender<Grant>>>;

#[derive(Default)]
struct State {
    in_use: usize,
    held: HashMap<String, usize>,
    /// Waiters by queue, then by namespace, in arrival order.
    waiting: [Queues; 4],
    /// The namespace served last: the next grant goes to the next one in order.
    last: Option<String>,
    /// Claim tickets out, in all and by namespace.
    claims: usize,
    claimed: HashMap<String, usize>,
    /// The namespace last handed a ticket.
    last_claim: Option<String>,
    /// Tickets whose hook is still writing its start, by namespace and turn (first, later):
    /// the hook keeps its place meanwhile. Nobody of its namespace that queued after it, and no
    /// later hook while a first hook writes, takes a slot before it is queued as claimed.
    writing: HashMap<String, [usize; 2]>,
    /// Of those, first hooks in all namespaces.
    writing_first: usize,
}

impl State {
    /// Whether a waiter of `namespace` in queue `q` must leave a free slot to a claim still being
    /// written that goes before it (docs/behaviour.md §6.11).
    fn behind_a_claim(&self, namespace: &str, q: usize) -> bool {
        let [first, later] = self.writing.get(namespace).copied().unwrap_or_default();
        match q {
            // A claimed hook is behind no claim of its own turn: claims go in the order their
            // writes end.
            CLAIMED_FIRST => false,
            FIRST => first > 0,
            CLAIMED_LATER => self.writing_first > 0,
            _ => self.writing_first > 0 || later > 0,
        }
    }

    fn write_started(&mut self, namespace: &str, turn: Turn) {
        self.writing.entry(namespace.to_string()).or_default()[turn as usize] += 1;
        self.writing_first += usize::from(turn == Turn::First);
    }

    fn write_ended(&mut self, namespace: &str, turn: Turn) {
        if let Some(n) = self.writing.get_mut(namespace) {
            n[turn as usize] -= 1;
            if *n == [0, 0] {
                self.writing.remove(namespace);
            }
        }
        self.writing_first -= usize::from(turn == Turn::First);
    }
}

/// Round-robin over `queues`: the first namespace after `after`, in name order and wrapping
/// around, that has a waiter and is `eligible`.
fn next_after(
    queues: &Queues,
    after: Option<&String>,
    eligible: impl Fn(&str) -> bool,
) -> Option<String> {
    queues
        .keys()
        .filter(|ns| after.is_none_or(|a| *ns > a))
        .chain(queues.keys())
        .find(|ns| !queues[*ns].is_empty() && eligible(ns))
        .cloned()
}

/// The first waiter of `namespace` in `queues`, taken out (the namespace's queue goes once
/// empty); only for a namespace `next_after` chose.
fn pop_waiter(queues: &mut Queues, namespace: &str) -> oneshot::Sender<Grant> {
    let tx = queues
        .get_mut(namespace)
        .and_then(VecDeque::pop_front)
        .expect("eligible namespaces have a waiter");
    if queues.get(namespace).is_some_and(VecDeque::is_empty) {
        queues.remove(namespace);
    }
    tx
}

/// How many namespaces hold, claim or wait for slots, `namespace` among them.
fn active(state: &State, namespace: &str) -> usize {
    let mut names: std::collections::HashSet<&str> = state
        .held
        .keys()
        .chain(state.claimed.keys())
        .map(String::as_str)
        .collect();
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

/// What a waiting hook is handed.
pub enum Grant {
    /// A slot: start the hook (writing its start first, unless it holds a claim).
    Slot(SlotPermit),
    /// No slot yet: write the hook's start now, then wait in
    /// [`ExecSlots::acquire_claimed`] holding this.
    Claim(ClaimTicket),
}

/// A hook's wait for a slot: a future of its [`Grant`].
pub enum SlotWait {
    /// Granted when asked; `None` once taken.
    Granted(Option<Grant>),
    /// In the queue of its namespace; counted as waiting until granted or dropped (a claimed
    /// hook by its ticket).
    Queued(oneshot::Receiver<Grant>, Option<Waiting>),
}

/// One hook counted in `restore_hooks_exec_slot_waiting` while it waits.
pub struct Waiting(IntGauge);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Future for SlotWait {
    type Output = Grant;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Grant> {
        let this = self.get_mut();
        match this {
            SlotWait::Granted(permit) => match permit.take() {
                Some(permit) => Poll::Ready(permit),
                None => Poll::Pending,
            },
            SlotWait::Queued(rx, _) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(grant)) => {
                    *this = SlotWait::Granted(None);
                    Poll::Ready(grant)
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

/// Leave to write a hook's start before a slot is free; given back when dropped (once the hook
/// has its slot, or gave its claim up). The hook counts as waiting (`turn="claimed"`) from the
/// ticket to its exec, its writes included.
pub struct ClaimTicket {
    slots: Arc<ExecSlots>,
    namespace: String,
    /// The turn of the hook it was handed to.
    turn: Turn,
    /// Its hook is writing its start (not queued as claimed yet).
    writing: bool,
    armed: bool,
    _waiting: Waiting,
}

impl Drop for ClaimTicket {
    fn drop(&mut self) {
        if self.armed {
            let writing = self.writing.then_some(self.turn);
            self.slots.release_claim(&self.namespace, writing);
        }
    }
}

impl ExecSlots {
    /// `total` slots (`--max-concurrent-execs`), at most `per_namespace` of them held by one
    /// namespace; both are at least 1. At most `claims` hooks write their start while they
    /// wait. `gauge` counts the slots in use, `waiting` (by label `turn`) the hooks waiting for
    /// one.
    pub fn new(
        total: usize,
        per_namespace: usize,
        claims: usize,
        gauge: IntGauge,
        waiting: &IntGaugeVec,
    ) -> Arc<Self> {
        Arc::new(Self {
            share: SlotShare::new(total, per_namespace),
            claim_window: claims,
            gauge,
            waiting: LABELS.map(|l| waiting.with_label_values(&[l])),
            state: Mutex::new(State::default()),
        })
    }

    /// A slot for a hook of `namespace` in queue `turn`: granted at once when one is free and
    /// nobody of the namespace queues before it, else a place in the queue, where it may be
    /// handed a claim ticket first. Dropping the [`SlotWait`] gives up the place. Not an `async
    /// fn`: the place is taken now, and a waiting hook costs its pod's worker one channel rather
    /// than a task of its own (a restore can have thousands of pods waiting for slots).
    pub fn acquire(self: &Arc<Self>, namespace: &str, turn: Turn) -> SlotWait {
        self.enqueue(namespace, queue(turn, false))
    }

    /// The slot of a hook that holds `ticket` and wrote its start, in the turn it waited in when
    /// it was handed the ticket: served before the unclaimed hooks of its turn.
    pub fn acquire_claimed(self: &Arc<Self>, ticket: &mut ClaimTicket) -> SlotWait {
        let mut state = self.lock();
        if std::mem::take(&mut ticket.writing) {
            state.write_ended(&ticket.namespace, ticket.turn);
        }
        self.enqueue_locked(state, &ticket.namespace, queue(ticket.turn, true))
    }

    fn enqueue(self: &Arc<Self>, namespace: &str, q: usize) -> SlotWait {
        let state = self.lock();
        self.enqueue_locked(state, namespace, q)
    }

    fn enqueue_locked(
        self: &Arc<Self>,
        mut state: std::sync::MutexGuard<'_, State>,
        namespace: &str,
        q: usize,
    ) -> SlotWait {
        // Nobody passes the namespace's hooks that queue before it, nor a claim being written
        // that goes before it.
        let queued = state.waiting[..=q]
            .iter()
            .any(|queues| queues.get(namespace).is_some_and(|w| !w.is_empty()))
            || state.behind_a_claim(namespace, q);
        if !queued && self.can_grant(&state, namespace) {
            let permit = self.grant(&mut state, namespace.to_string());
            return SlotWait::Granted(Some(Grant::Slot(permit)));
        }
        let (tx, rx) = oneshot::channel();
        state.waiting[q]
            .entry(namespace.to_string())
            .or_default()
            .push_back(tx);
        let waiting = UNCLAIMED.contains(&q).then(|| self.waiting(LABEL_OF[q]));
        // A claim that stopped being written may free a slot for those it held back; every
        // slot held (or the namespace at its share), a ticket may be free for this one.
        self.dispatch(&mut state);
        SlotWait::Queued(rx, waiting)
    }

    /// One more hook counted in `restore_hooks_exec_slot_waiting` with label `label`.
    fn waiting(&self, label: usize) -> Waiting {
        let gauge = self.waiting[label].clone();
        gauge.inc();
        Waiting(gauge)
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

    /// A ticket came back; `writing`: its hook had not queued as claimed (its claim failed or
    /// was given up), so the slot it kept its place for may go to others now.
    fn release_claim(self: &Arc<Self>, namespace: &str, writing: Option<Turn>) {
        let mut state = self.lock();
        self.unclaim(&mut state, namespace);
        if let Some(turn) = writing {
            state.write_ended(namespace, turn);
            self.dispatch(&mut state);
        } else {
            self.hand_out_claims(&mut state);
        }
    }

    fn unclaim(&self, state: &mut State, namespace: &str) {
        state.claims -= 1;
        if let Some(n) = state.claimed.get_mut(namespace) {
            *n -= 1;
            if *n == 0 {
                state.claimed.remove(namespace);
            }
        }
    }

    /// Claim tickets out right now.
    pub fn claims(&self) -> usize {
        self.lock().claims
    }

    /// Whether `namespace` may be handed a claim ticket: one is left, and the namespace has
    /// fewer than its cap and its fair share of the tickets (the tickets divided by the
    /// namespaces that hold, claim or wait for slots). Tickets are shared apart from slots: a
    /// namespace at its share of slots claims the slots its own running hooks free next, and a
    /// claimed hook still takes a slot only as `may_take` allows, so claims never move a
    /// namespace ahead of another for a slot.
    fn can_claim(&self, state: &State, namespace: &str) -> bool {
        if state.claims >= self.claim_window {
            return false;
        }
        let claimed = state.claimed.get(namespace).copied().unwrap_or(0);
        let fair = self.claim_window.div_ceil(active(state, namespace));
        claimed < self.share.per_namespace && (claimed == 0 || claimed < fair)
    }

    /// Hands claim tickets to the unclaimed waiters next in line, round-robin across the
    /// namespaces that may take one: first hooks first, then later ones. Only once no slot can be
    /// granted to them (`dispatch` ran first): a free slot is better than a claim.
    fn hand_out_claims(self: &Arc<Self>, state: &mut State) {
        loop {
            let Some((q, namespace)) = UNCLAIMED
                .iter()
                .find_map(|&q| self.next_claim_in(state, q).map(|ns| (q, ns)))
            else {
                return;
            };
            let tx = pop_waiter(&mut state.waiting[q], &namespace);
            let turn = if q == FIRST { Turn::First } else { Turn::Later };
            state.claims += 1;
            *state.claimed.entry(namespace.clone()).or_default() += 1;
            state.last_claim = Some(namespace.clone());
            state.write_started(&namespace, turn);
            let ticket = ClaimTicket {
                slots: self.clone(),
                namespace: namespace.clone(),
                turn,
                writing: true,
                armed: true,
                _waiting: self.waiting(LABEL_OF[CLAIMED_FIRST]),
            };
            if let Err(Grant::Claim(mut ticket)) = tx.send(Grant::Claim(ticket)) {
                // That waiter gave up: the ticket was never used.
                ticket.armed = false;
                self.unclaim(state, &namespace);
                state.write_ended(&namespace, turn);
            }
        }
    }

    /// The namespace whose unclaimed waiter of queue `q` gets the next ticket: the first after
    /// the one handed one last, in name order, that has a waiter and may take a ticket.
    fn next_claim_in(&self, state: &State, q: usize) -> Option<String> {
        next_after(&state.waiting[q], state.last_claim.as_ref(), |ns| {
            self.can_claim(state, ns)
        })
    }

    /// Hands free slots to waiting namespaces, round-robin, within their per-namespace share:
    /// first hooks first (claimed ones before the others), then later ones (likewise); then
    /// claim tickets to those still waiting.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        while state.in_use < self.share.total {
            let Some((q, namespace)) =
                (0..state.waiting.len()).find_map(|q| self.next_in(state, q).map(|ns| (q, ns)))
            else {
                break;
            };
            let tx = pop_waiter(&mut state.waiting[q], &namespace);
            let permit = self.grant(state, namespace.clone());
            if let Err(Grant::Slot(mut permit)) = tx.send(Grant::Slot(permit)) {
                // That waiter gave up (its hook expired): the slot was never used.
                permit.armed = false;
                self.ungrant(state, &namespace);
            }
        }
        self.hand_out_claims(state);
    }

    /// The namespace whose waiter of queue `q` is served next: the first after the one served
    /// last, in name order, that has one and is below its share.
    fn next_in(&self, state: &State, q: usize) -> Option<String> {
        next_after(&state.waiting[q], state.last.as_ref(), |ns| {
            !state.behind_a_claim(ns, q) && self.can_grant(state, ns)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Slots without claims: the order in which slots are granted.
    fn slots(total: usize, per_namespace: usize) -> Arc<ExecSlots> {
        with_claims(total, per_namespace, 0)
    }

    fn with_claims(total: usize, per_namespace: usize, claims: usize) -> Arc<ExecSlots> {
        let waiting = IntGaugeVec::new(prometheus::Opts::new("w", "w"), &["turn"]).unwrap();
        ExecSlots::new(
            total,
            per_namespace,
            claims,
            IntGauge::new("g", "g").unwrap(),
            &waiting,
        )
    }

    /// Waiting hooks by turn: claimed, first, later.
    fn waiting(s: &ExecSlots) -> [i64; 3] {
        s.waiting.clone().map(|g| g.get())
    }

    async fn grant(f: &mut (impl std::future::Future<Output = Grant> + Unpin)) -> Option<Grant> {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .ok()
    }

    /// A slot, if one was granted; a claim ticket fails the test.
    async fn granted(
        f: &mut (impl std::future::Future<Output = Grant> + Unpin),
    ) -> Option<SlotPermit> {
        grant(f).await.map(|g| match g {
            Grant::Slot(permit) => permit,
            Grant::Claim(_) => panic!("a claim ticket where a slot was expected"),
        })
    }

    /// A claim ticket, if one was handed; a slot fails the test.
    async fn ticket(
        f: &mut (impl std::future::Future<Output = Grant> + Unpin),
    ) -> Option<ClaimTicket> {
        grant(f).await.map(|g| match g {
            Grant::Claim(ticket) => ticket,
            Grant::Slot(_) => panic!("a slot where a claim ticket was expected"),
        })
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
        assert_eq!(
            waiting(&s),
            [0, 2, 0],
            "a wait given up is no longer counted"
        );
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
            [0, 2, 2],
            "two first hooks and two later ones wait"
        );
        // First hooks go first, round-robin after "a" (served last): "c", then "a".
        drop(held);
        let c = granted(&mut first_c).await.expect("c's first hook");
        assert!(granted(&mut first_a).await.is_none());
        assert!(granted(&mut later_b).await.is_none());
        drop(c);
        let a = granted(&mut first_a).await.expect("a's first hook");
        assert_eq!(waiting(&s), [0, 0, 2]);
        drop(a);
        // Then the later hooks, round-robin again: "b" comes after "a".
        let b = granted(&mut later_b).await.expect("b's later hook");
        assert!(granted(&mut later_a).await.is_none());
        drop(b);
        assert!(granted(&mut later_a).await.is_some());
        assert_eq!(waiting(&s), [0, 0, 0]);
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

    #[tokio::test]
    async fn while_every_slot_is_held_the_next_waiters_get_claim_tickets() {
        let s = with_claims(2, 2, 2);
        let _a = s.acquire("a", Turn::First).await;
        let b = s.acquire("b", Turn::First).await;
        let mut c = s.acquire("c", Turn::First);
        let mut d = s.acquire("d", Turn::First);
        let mut e = s.acquire("e", Turn::First);
        let mut c_ticket = ticket(&mut c).await.expect("c is next in line");
        let _d_ticket = ticket(&mut d).await.expect("d is next");
        assert!(grant(&mut e).await.is_none(), "both tickets are out");
        assert_eq!(s.claims(), 2);
        // c writes its start, then waits as claimed; the next free slot is its.
        let mut c_claimed = s.acquire_claimed(&mut c_ticket);
        assert!(
            granted(&mut c_claimed).await.is_none(),
            "every slot is held"
        );
        assert_eq!(waiting(&s), [2, 1, 0], "c and d claimed, e waits");
        drop(b);
        let _c = granted(&mut c_claimed)
            .await
            .expect("the claimed hook goes first");
        // Its ticket comes back once its exec starts, and goes to the next in line.
        drop(c_ticket);
        let _e_ticket = ticket(&mut e).await.expect("e gets the ticket c gave back");
        assert_eq!(s.claims(), 2);
    }

    #[tokio::test]
    async fn a_namespace_at_its_slot_share_claims_ahead_but_a_newcomer_gets_the_next_ticket() {
        // One namespace alone holds every slot but the reserve, and claims what its own hooks
        // free next.
        let s = with_claims(4, 4, 2);
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut a = s.acquire("a", Turn::First);
            held.push(granted(&mut a).await.expect("a slot"));
        }
        let mut a3 = s.acquire("a", Turn::Later);
        let mut a4 = s.acquire("a", Turn::Later);
        let mut a5 = s.acquire("a", Turn::Later);
        let a3_ticket = ticket(&mut a3).await.expect("a claims ahead");
        let _a4_ticket = ticket(&mut a4).await.expect("a, alone, has every ticket");
        assert!(grant(&mut a5).await.is_none());
        // The reserve slot goes to a newcomer; another newcomer's first hook then gets the next
        // ticket before a's later hook.
        let mut c = s.acquire("c", Turn::First);
        let _c = granted(&mut c).await.expect("the reserve");
        let mut b = s.acquire("b", Turn::First);
        assert!(grant(&mut b).await.is_none(), "no ticket left");
        drop(a3_ticket);
        assert!(
            ticket(&mut b).await.is_some(),
            "b's first hook is served first"
        );
        assert!(grant(&mut a5).await.is_none());
    }

    #[tokio::test]
    async fn a_claimed_hook_gets_the_free_slot_before_first_hooks_that_wait() {
        let s = with_claims(1, 1, 1);
        let held = s.acquire("a", Turn::First).await;
        let mut b = s.acquire("b", Turn::First);
        let mut c = s.acquire("c", Turn::First);
        let mut b_ticket = ticket(&mut b).await.expect("b is first in line");
        assert!(grant(&mut c).await.is_none(), "one ticket only");
        let mut b_claimed = s.acquire_claimed(&mut b_ticket);
        drop(held);
        let _b = granted(&mut b_claimed).await.expect("b claimed: its slot");
        assert!(grant(&mut c).await.is_none(), "the slot went to b");
        drop(b_ticket);
        assert!(
            ticket(&mut c).await.is_some(),
            "c may write ahead while b runs"
        );
    }

    #[tokio::test]
    async fn a_ticket_never_taken_comes_back() {
        let s = with_claims(1, 1, 1);
        let _held = s.acquire("a", Turn::First).await;
        let b = s.acquire("b", Turn::First);
        assert_eq!(s.claims(), 1, "handed to b's wait at once");
        drop(b);
        assert_eq!(s.claims(), 0, "b gave up its wait, and the ticket with it");
        let mut c = s.acquire("c", Turn::First);
        assert!(ticket(&mut c).await.is_some());
    }

    #[tokio::test]
    async fn a_free_slot_goes_to_a_waiter_rather_than_a_ticket() {
        let s = with_claims(2, 2, 2);
        let mut a = s.acquire("a", Turn::First);
        assert!(granted(&mut a).await.is_some(), "a slot was free");
        assert_eq!(s.claims(), 0);
    }

    #[tokio::test]
    async fn a_claim_being_written_keeps_its_place_for_a_slot_that_frees_meanwhile() {
        let s = with_claims(1, 1, 1);
        let held = s.acquire("a", Turn::First).await;
        let mut b = s.acquire("b", Turn::First);
        let mut b_ticket = ticket(&mut b).await.expect("b is next in line");
        // The slot frees while b writes its start: neither a later hook of another namespace nor
        // b's namespace's next first hook takes it.
        drop(held);
        let mut c_later = s.acquire("c", Turn::Later);
        let mut b_next = s.acquire("b", Turn::First);
        assert!(grant(&mut c_later).await.is_none());
        assert!(grant(&mut b_next).await.is_none());
        assert_eq!(s.in_use(), 0, "kept for b's claim");
        let mut b_claimed = s.acquire_claimed(&mut b_ticket);
        let _b = granted(&mut b_claimed).await.expect("b's claim takes it");
        drop(_b);
        let _b_next = granted(&mut b_next)
            .await
            .expect("then b's next first hook, before c's later one");
        assert!(grant(&mut c_later).await.is_none());
    }

    #[tokio::test]
    async fn a_claim_given_up_while_written_lets_the_others_go() {
        let s = with_claims(1, 1, 1);
        let held = s.acquire("a", Turn::First).await;
        let mut b = s.acquire("b", Turn::First);
        let b_ticket = ticket(&mut b).await.expect("b is next in line");
        drop(held);
        let mut c_later = s.acquire("c", Turn::Later);
        assert!(grant(&mut c_later).await.is_none(), "kept for b's claim");
        drop(b_ticket);
        assert!(
            granted(&mut c_later).await.is_some(),
            "b's claim failed: the slot goes on"
        );
    }
}
