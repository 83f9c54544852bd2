//! Receiving a review's body before anything is reserved for deciding it, so that a client that
//! declares a body and then sends it slowly, or not at all, holds nothing the API server's own
//! reviews need (docs/security.md, "The webhook's port").
//!
//! A body being received holds exactly the bytes that arrived: its reservation of the receive
//! buffer ([`Limits::receiving_body_bytes`](super::Limits)) grows with each frame. Reserving
//! what a body *declares* before it arrives (what the webhook did before) let 32 clients that
//! declared large bodies and sent nothing spend the whole in-flight budget for the length of the
//! body deadline, and a review of the API server was answered 429 meanwhile. Only once a body is
//! complete does it reserve the in-flight budget that bounds decoding
//! ([`Limits::in_flight_body_bytes`](super::Limits)), which it then holds for the milliseconds a
//! decision takes: no client can hold that budget by being slow.
//!
//! Each connection first holds its own [`Allowance`] (32 KiB), and only bytes beyond it come
//! from the shared buffer. A review of the API server fits in its connection's allowance, so
//! nothing another client does to the shared buffer can touch it: that is the guarantee, and it
//! does not depend on who wins when the buffer is full.
//!
//! When the shared buffer is full, **the body that has been incomplete the longest gives way**:
//! bodies holding part of the buffer are cut off (408) and their bytes freed, oldest first,
//! until the frame that needs room fits; the body that needs room is cut itself when it is the
//! oldest. Age is counted from the request head, not from the last byte, so trickling a byte now
//! and then does not keep a body young, and a stalled body costs only its own request. A client
//! that keeps reconnecting can make its bodies younger than a large review of the API server
//! that arrives meanwhile (over the allowance: a pod of more than 32 KiB), which may then be cut;
//! docs/security.md lists that, with floods of complete bodies (decided, so they cost CPU), as
//! not protected.
//!
//! The common case costs an atomic update of the connection's allowance per frame: a body is
//! registered as a candidate to cut (one lock) only when a frame is not there at once or it
//! needs the shared buffer when it is full.

use std::collections::BTreeMap;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use axum::body::{Body, Bytes};
use http_body::Body as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::body::BodyError;

/// The receive buffer shared by every body being received, and the bodies that may be cut.
pub(super) struct Receiver {
    budget: Arc<Semaphore>,
    /// Bodies holding (or waiting for) part of the buffer while incomplete, oldest first: keyed
    /// by (head dispatched, µs since `epoch`; a sequence number).
    incomplete: Mutex<BTreeMap<(u64, u64), Arc<Incomplete>>>,
    next_id: AtomicU64,
    epoch: Instant,
}

struct Incomplete {
    /// KiB of the buffer this body holds.
    held_kib: AtomicU32,
    cut: CancellationToken,
}

/// A body's place among the bodies that may be cut; leaves it when dropped.
struct Registered<'r> {
    receiver: &'r Receiver,
    key: (u64, u64),
    entry: Arc<Incomplete>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.receiver.lock().remove(&self.key);
    }
}

/// What [`Receiver::receive`] hands back: the whole body and what it holds of its connection's
/// allowance and of the receive buffer, held until the review has its in-flight reservation
/// (the bytes are still in memory).
pub(super) struct Received<'a> {
    pub(super) bytes: Bytes,
    pub(super) _held: (Option<OwnedSemaphorePermit>, Own<'a>),
}

/// A connection's own share of the receive buffer, [`Allowance::KIB`]: its bodies hold their
/// first bytes from it, and only what exceeds it from the shared buffer. A review of the API
/// server (a few KiB; it sends one review at a time per connection, over HTTP/1.1) thus never
/// needs the shared buffer, and no other client's bodies can stand in its way, whatever they
/// hold and however the rule for cutting is played. What every connection may hold this way is
/// bounded by the connection cap (1024 × 32 KiB).
pub(super) struct Allowance {
    left_kib: AtomicU32,
}

impl Allowance {
    /// A pod's AdmissionReview is a few KiB (tens with large inline specs).
    pub(super) const KIB: u32 = 32;

    pub(super) fn new() -> Self {
        Self {
            left_kib: AtomicU32::new(Self::KIB),
        }
    }

    /// Takes up to `want` KiB; returns what it took.
    fn take(&self, want: u32) -> u32 {
        let mut taken = 0;
        let _ = self
            .left_kib
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                taken = left.min(want);
                Some(left - taken)
            });
        taken
    }
}

/// KiB taken from an [`Allowance`]; given back when dropped.
pub(super) struct Own<'a> {
    allowance: Option<&'a Allowance>,
    kib: u32,
}

impl Drop for Own<'_> {
    fn drop(&mut self) {
        if let Some(allowance) = self.allowance
            && self.kib > 0
        {
            allowance.left_kib.fetch_add(self.kib, Ordering::AcqRel);
        }
    }
}

impl Receiver {
    /// A receive buffer of `budget_kib` KiB.
    pub(super) fn new(budget_kib: u32) -> Self {
        Self {
            budget: Arc::new(Semaphore::new(budget_kib as usize)),
            incomplete: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(u64, u64), Arc<Incomplete>>> {
        self.incomplete.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bodies currently registered as incomplete.
    #[cfg(test)]
    fn incomplete(&self) -> usize {
        self.lock().len()
    }

    /// Registers a body holding `held_kib` of the buffer as one that may be cut.
    fn register(&self, started: Instant, held_kib: u32) -> Registered<'_> {
        let key = (
            started.saturating_duration_since(self.epoch).as_micros() as u64,
            self.next_id.fetch_add(1, Ordering::Relaxed),
        );
        let entry = Arc::new(Incomplete {
            held_kib: AtomicU32::new(held_kib),
            cut: CancellationToken::new(),
        });
        self.lock().insert(key, entry.clone());
        Registered {
            receiver: self,
            key,
            entry,
        }
    }

    /// Reads `body` whole (at most `limit` bytes), holding its connection's `allowance`, then
    /// the buffer, for what arrived. `started` is when the request head was dispatched: a
    /// body's age. The caller bounds the time.
    pub(super) async fn receive<'a>(
        &self,
        mut body: Body,
        started: Instant,
        limit: usize,
        allowance: Option<&'a Allowance>,
    ) -> Result<Received<'a>, BodyError> {
        let declared = body.size_hint().exact();
        let mut first: Option<Bytes> = None;
        let mut joined: Option<Vec<u8>> = None;
        let mut total = 0usize;
        let mut own = Own { allowance, kib: 0 };
        let mut held: Option<OwnedSemaphorePermit> = None;
        let mut held_kib = 0u32;
        let mut registered: Option<Registered<'_>> = None;
        loop {
            let frame = {
                let mut next = pin!(std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)));
                match futures::poll!(next.as_mut()) {
                    Poll::Ready(frame) => frame,
                    Poll::Pending => {
                        let cut = registered
                            .get_or_insert_with(|| self.register(started, held_kib))
                            .entry
                            .cut
                            .clone();
                        tokio::select! {
                            biased;
                            () = cut.cancelled() => return Err(BodyError::Preempted),
                            frame = next => frame,
                        }
                    }
                }
            };
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
            let Ok(chunk) = frame.into_data() else {
                continue; // trailers: nothing an AdmissionReview has
            };
            total += chunk.len();
            if total > limit {
                return Err(BodyError::TooLarge);
            }
            let mut need = kib(total).saturating_sub(own.kib + held_kib);
            if need > 0
                && let Some(allowance) = allowance
            {
                let taken = allowance.take(need);
                own.kib += taken;
                need -= taken;
            }
            if need > 0 {
                let more = match self.budget.clone().try_acquire_many_owned(need) {
                    Ok(more) => more,
                    Err(_) => {
                        let me = registered.get_or_insert_with(|| self.register(started, held_kib));
                        self.make_room(me, need)?;
                        tokio::select! {
                            biased;
                            () = me.entry.cut.cancelled() => return Err(BodyError::Preempted),
                            more = self.budget.clone().acquire_many_owned(need) => {
                                more.map_err(|_| BodyError::Broken("the server is stopping".into()))?
                            }
                        }
                    }
                };
                match &mut held {
                    Some(held) => held.merge(more),
                    None => held = Some(more),
                }
                held_kib += need;
                if let Some(me) = &registered {
                    me.entry.held_kib.store(held_kib, Ordering::Relaxed);
                }
            }
            match (&mut joined, first.take()) {
                (Some(buffer), _) => buffer.extend_from_slice(&chunk),
                (None, None) => first = Some(chunk),
                (None, Some(head)) => {
                    // A second frame: one buffer for the whole body, sized from what the client
                    // declared (already checked against the limit).
                    let capacity = declared
                        .map_or(0, |d| d as usize)
                        .min(limit)
                        .max(head.len() + chunk.len());
                    let mut buffer = Vec::with_capacity(capacity);
                    buffer.extend_from_slice(&head);
                    buffer.extend_from_slice(&chunk);
                    joined = Some(buffer);
                }
            }
            if body.is_end_stream() {
                break; // known complete: no poll for the end (and no registration) needed
            }
        }
        Ok(Received {
            bytes: match joined {
                Some(buffer) => Bytes::from(buffer),
                None => first.unwrap_or_default(),
            },
            _held: (held, own),
        })
    }

    /// The buffer is full and `me` needs `need` KiB more: cut the bodies incomplete longest
    /// until what they hold covers what is missing. `Err` when `me` is the oldest left.
    fn make_room(&self, me: &Registered<'_>, need: u32) -> Result<(), BodyError> {
        let missing = need.saturating_sub(self.budget.available_permits() as u32);
        let incomplete = self.lock();
        let cut = cut_oldest(
            incomplete
                .iter()
                .map(|(key, entry)| (*key, entry.held_kib.load(Ordering::Relaxed), entry)),
            me.key,
            missing,
        );
        for entry in &cut {
            entry.cut.cancel();
        }
        drop(incomplete);
        if me.entry.cut.is_cancelled() {
            return Err(BodyError::Preempted);
        }
        Ok(())
    }
}

/// The bodies to cut, oldest first, until those cut (or cut already, whose bytes are on their
/// way back) hold `missing` KiB. A body holding nothing is passed over: cutting it frees no
/// room (it costs only its own connection, which the connection cap deals with). `me` is cut
/// like any other when its turn comes: then the list ends with it.
fn cut_oldest<'e, K: Ord + Copy>(
    oldest_first: impl Iterator<Item = (K, u32, &'e Arc<Incomplete>)>,
    me: K,
    missing: u32,
) -> Vec<&'e Arc<Incomplete>> {
    let mut freed = 0u32;
    let mut cut = Vec::new();
    for (key, held, entry) in oldest_first {
        if freed >= missing {
            break;
        }
        if held == 0 && key != me {
            continue;
        }
        freed = freed.saturating_add(held);
        if !entry.cut.is_cancelled() {
            cut.push(entry);
        }
        if key == me {
            break;
        }
    }
    cut
}

/// KiB permits for `bytes` (the semaphores count KiB: a 4 GiB budget fits in their u32).
pub(super) fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(held_kib: u32, cut: bool) -> Arc<Incomplete> {
        let entry = Incomplete {
            held_kib: AtomicU32::new(held_kib),
            cut: CancellationToken::new(),
        };
        if cut {
            entry.cut.cancel();
        }
        Arc::new(entry)
    }

    /// Which bodies give way: (held KiB, already cut) per body oldest first, which one is "me",
    /// the KiB missing, and the indices cut.
    #[test]
    fn the_bodies_incomplete_longest_give_way_first() {
        type Case<'a> = (&'a [(u32, bool)], usize, u32, &'a [usize]);
        let cases: &[Case<'_>] = &[
            // One old body holding enough: only it.
            (&[(512, false), (512, false), (4, false)], 2, 100, &[0]),
            // Not enough in the oldest: the next one too.
            (&[(64, false), (512, false), (4, false)], 2, 100, &[0, 1]),
            // Me as the oldest: I give way (nobody younger is cut for me).
            (&[(4, false), (512, false)], 0, 100, &[0]),
            // Older bodies do not cover it and I come next: they and I.
            (&[(8, false), (4, false), (512, false)], 1, 100, &[0, 1]),
            // A body cut already counts with the bytes it is giving back, and is not cut twice.
            (&[(512, true), (512, false), (4, false)], 2, 100, &[]),
            (&[(50, true), (512, false), (4, false)], 2, 100, &[1]),
            // Bodies holding nothing (declared, nothing sent) are passed over.
            (
                &[(0, false), (0, false), (512, false), (4, false)],
                3,
                100,
                &[2],
            ),
            (&[(0, false), (8, false)], 0, 100, &[0]),
            // Nothing missing (the buffer freed up meanwhile): nobody.
            (&[(512, false), (4, false)], 1, 0, &[]),
        ];
        for (bodies, me, missing, expected) in cases {
            let entries: Vec<_> = bodies.iter().map(|(h, c)| entry(*h, *c)).collect();
            let cut = cut_oldest(
                entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i, e.held_kib.load(Ordering::Relaxed), e)),
                *me,
                *missing,
            );
            let got: Vec<usize> = cut
                .iter()
                .map(|c| entries.iter().position(|e| Arc::ptr_eq(e, c)).unwrap())
                .collect();
            assert_eq!(&got, expected, "{bodies:?}, me {me}, missing {missing}");
        }
    }

    fn stalled_body(
        sent: usize,
    ) -> (
        Body,
        futures::channel::mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) {
        let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
        tx.try_send(Ok(Bytes::from(vec![b' '; sent]))).unwrap();
        (Body::from_stream(rx), tx)
    }

    /// A stalled body holds what it sent, not what it declared; when the buffer is full, the
    /// older of two stalled bodies is cut for a new one, which is then received whole.
    #[tokio::test]
    async fn a_stalled_body_holds_what_it_sent_and_the_oldest_gives_way() {
        let receiver = Arc::new(Receiver::new(100));
        let spawn = |sent: usize, started: Instant| {
            let receiver = receiver.clone();
            let (body, tx) = stalled_body(sent);
            let task = tokio::spawn(async move {
                receiver
                    .receive(body, started, usize::MAX, None)
                    .await
                    .map(|r| r.bytes.len())
            });
            (task, tx)
        };
        let t0 = Instant::now();
        let (older, _older_tx) = spawn(40 * 1024, t0);
        let (younger, _younger_tx) = spawn(40 * 1024, t0 + Duration::from_millis(5));
        restore_hooks_testkit::eventually!("both stalled bodies held", Duration::from_secs(20), {
            receiver.incomplete() == 2 && receiver.budget.available_permits() == 20
        });
        // 30 KiB more than is free: the older body gives way, the younger one keeps its bytes.
        let body = Body::from(vec![b'{'; 30 * 1024]);
        let got = receiver
            .receive(body, t0 + Duration::from_millis(10), usize::MAX, None)
            .await
            .map(|r| r.bytes.len());
        assert_eq!(got.unwrap(), 30 * 1024);
        assert!(matches!(older.await.unwrap(), Err(BodyError::Preempted)));
        assert!(!younger.is_finished());
        assert_eq!(receiver.incomplete(), 1);
        assert_eq!(receiver.budget.available_permits(), 60);
    }
}
