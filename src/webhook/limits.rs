//! What bounds the webhook's memory and connections against clients that are hostile, stuck or
//! merely many, so that a caller of the port that is not the API server cannot cost the API
//! server's own reviews an answer by being slow (docs/security.md, "The webhook's port"): a cap
//! on open connections, a receive buffer and a budget of bytes being decided, and an idle limit
//! for HTTP/2 connections.
//!
//! - **Connections** ([`Limits::max_connections`]): a connection over the cap waits, before its
//!   TLS handshake, for a slot (at most [`Timeouts::handshake`](super::Timeouts), then it is
//!   closed); at most as many again may wait, further ones are closed at once. Waiting rather
//!   than refusing: the API server's dialer waits too, within the webhook's timeout, while a
//!   refused connection is a failed admission. For each connection that waits, one open
//!   connection makes room, chosen so that a stalled client costs only itself:
//!   1. the connection that has **owed a request the longest** is closed at once (its socket is
//!      shut: it has no request to answer), once it has owed for
//!      [`Timeouts::stalled_after`] (1 s). A connection owes from its accept until its first
//!      request's body has arrived, and again while a later request's body is arriving. The API
//!      server owes for the milliseconds its handshake and request take; a connection that
//!      stays owing is stalled, or trickles. Younger owing connections are left alone (the one
//!      just let in must not be closed for the next); a waiter that finds only those waits, and
//!      the idle sweep makes room for it once one has owed long enough, or has finished;
//!   2. only when no connection owes at all, the connection **idle the longest** is closed
//!      gracefully: a kept-alive connection is a convenience, and clients reconnect (Go retries
//!      a request it had not written yet when the server closed the connection), but closing
//!      one costs its client, most likely the API server (its connections are the ones that
//!      finish requests), a handshake, so it comes last;
//!   3. a connection with a request whose body has arrived is never closed: that request is
//!      being decided, in milliseconds.
//!
//!   Before, idle connections were closed whenever anyone waited, and stalled ones never: a
//!   client holding every slot with stalled connections made the API server's own connections
//!   close and then wait behind its waiters.
//! - **Receiving bodies** ([`Limits::receiving_body_bytes`]): a body holds what actually arrived,
//!   and when the receive buffer is full the body incomplete the longest is cut off
//!   ([`super::receive`]). A body over [`MAX_BODY_BYTES`] is answered 413 before it is read.
//! - **In-flight body bytes** ([`Limits::in_flight_body_bytes`]): a review whose body has
//!   arrived reserves its length (at least [`MIN_RESERVATION`]) for the time its answer is
//!   built, bounding what decoding costs at once. Reserved only once the body is complete, so a
//!   slow sender never holds it. When the budget is spent, a review waits up to
//!   [`Timeouts::in_flight_wait`] and is then answered 429 with `Retry-After: 1`: the API server
//!   calls webhooks through client-go's REST client, which retries a 429 carrying `Retry-After`
//!   (the AdmissionReview is a byte body, so the request is replayable) within the webhook's
//!   timeout; without the header the call would simply fail and `failurePolicy` decide. Only
//!   complete bodies being decided spend it, so a 429 means more work than the webhook decides
//!   at once, never a stalled client.
//! - **Idle HTTP/2 connections**: closed (GOAWAY) once no request was in flight for
//!   [`Timeouts::header_read`](super::Timeouts), the limit hyper already applies to idle
//!   HTTP/1.1 keep-alive connections. In-flight requests are never cut: only a connection with
//!   nothing in flight is closed, and a graceful GOAWAY lets streams the client already started
//!   finish.
//!
//! The module is long because the bounds share one guard, its statistics and the accept
//! wrapper that enforces them; most of its length is the reasoning above.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_server::ConnectionShutdown;
use axum_server::accept::Accept;
use futures::future::BoxFuture;
use futures::task::AtomicWaker;
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::body::BodyError;
use super::body_deadline::{BodyDeadlineExceeded, with_body_deadline};
use super::receive::{Allowance, Received, Receiver, kib};
use crate::metrics::Metrics;

/// Largest AdmissionReview body accepted: 3.5 MiB. The API server accepts request bodies of at
/// most 3 MiB (`MaxRequestBodyBytes`), and the review of a pod CREATE (the only one the webhook
/// configuration sends) carries the object once (`oldObject` is null), plus an envelope of a few
/// KiB (`userInfo`, `options`); the rest is headroom for a pod sent as protobuf or YAML, which
/// the API server re-encodes as JSON. etcd stores at most 1.5 MiB per object anyway. Anything
/// larger is not a review the API server sends, and is answered 413 before it is read.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024 + 512 * 1024;

/// Limits on clients that connect but do not finish a request (port scanners, stuck peers).
/// The API server sends a whole request at once, so a few seconds is generous.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// TLS handshake.
    pub handshake: Duration,
    /// From the end of the handshake to the first complete request on a connection.
    pub first_request: Duration,
    /// Reading the headers of each later HTTP/1 request on a kept-alive connection. hyper
    /// starts this clock while the connection is idle, so it is also the idle keep-alive limit;
    /// HTTP/2 connections with no request in flight for this long are closed too (GOAWAY). It
    /// must exceed the API server's idle-connection timeout (90 s), so that the client, not us,
    /// closes idle connections and no request races a server-side close.
    pub header_read: Duration,
    /// Reading the whole body of a request, counted from its head: neither of the limits above
    /// covers a client that sends a head and then trickles the body.
    pub request_body: Duration,
    /// How long a review whose body has arrived waits for the in-flight budget
    /// ([`Limits::in_flight_body_bytes`]) before it is answered 429 with `Retry-After: 1`: a
    /// burst is smoothed over, and the API server (whose webhook timeout is at least 1 s, 5 s
    /// in the chart) still has time to retry.
    pub in_flight_wait: Duration,
    /// How long a connection may owe a request (its handshake and first request, or a body)
    /// before it counts as stalled when a waiting connection needs its slot. The API server
    /// connects and sends a review within milliseconds; younger owing connections are left
    /// alone, so that a connection just let in is never the one closed for the next.
    pub stalled_after: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            handshake: Duration::from_secs(10),
            first_request: Duration::from_secs(10),
            header_read: Duration::from_secs(120),
            request_body: Duration::from_secs(10),
            in_flight_wait: Duration::from_secs(1),
            stalled_after: Duration::from_secs(1),
        }
    }
}

/// The smallest reservation a review makes from the in-flight budget, whatever its length: a
/// review costs more than its body (the pod view, the patch, the response), and the floor also
/// bounds how many small reviews are decided at once.
pub const MIN_RESERVATION: usize = 4 * 1024;

/// Bounds on what clients can make the webhook hold at once.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections (TLS handshakes included). The API server needs a handful per replica
    /// (HTTP/2 multiplexes its calls); 1024 leave room for HTTP/1.1 callers and bursts, and
    /// bound what idle connections hold (about 55 KB each with TLS and HTTP/2 state).
    pub max_connections: usize,
    /// Bytes of the reviews being decided at once (their bodies complete). Decoding a pod can
    /// cost twenty times its bytes at its peak (a container `env` of millions of tiny JSON
    /// values, kept as a JSON tree by the pod view; a labels map of tiny entries costs ten):
    /// 4 MiB admits one maximum-size review at a time alongside a hundred ordinary ones (or a
    /// thousand ordinary ones alone), and keeps the worst case under 160 MiB, well below the
    /// chart's 256 MiB memory limit.
    pub in_flight_body_bytes: usize,
    /// Bytes of bodies still arriving beyond each connection's own allowance (32 KiB, see
    /// [`super::receive`]), held as they arrive (at least [`MAX_BODY_BYTES`]). They cost their
    /// size once (no decoding yet): 16 MiB lets four maximum-size bodies arrive at once, and
    /// with the allowances (32 MiB at the connection cap) adds at most 48 MiB to the worst case
    /// above: still within the chart's 256 MiB memory limit.
    pub receiving_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            in_flight_body_bytes: 4 * 1024 * 1024,
            receiving_body_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Counters of the limits at work, for tests and the shutdown log line.
#[derive(Clone, Debug, Default)]
pub struct LimitStats(Arc<StatsInner>);

#[derive(Debug, Default)]
struct StatsInner {
    connections: AtomicUsize,
    waiting_connections: AtomicUsize,
    refused_connections: AtomicU64,
    receiving: AtomicUsize,
    in_flight: AtomicUsize,
    waiting_reviews: AtomicUsize,
    overloaded: AtomicU64,
    preempted: AtomicU64,
    idle_closed: AtomicU64,
    yielded: AtomicU64,
    stalled_closed: AtomicU64,
}

impl LimitStats {
    /// Connections holding a slot (handshaking, idle or busy).
    pub fn connections(&self) -> usize {
        self.0.connections.load(Ordering::Relaxed)
    }
    /// Connections waiting for a slot.
    pub fn waiting_connections(&self) -> usize {
        self.0.waiting_connections.load(Ordering::Relaxed)
    }
    /// Connections closed because too many were waiting, or one waited too long.
    pub fn refused_connections(&self) -> u64 {
        self.0.refused_connections.load(Ordering::Relaxed)
    }
    /// Requests whose body is being received.
    pub fn receiving(&self) -> usize {
        self.0.receiving.load(Ordering::Relaxed)
    }
    /// Reviews holding a reservation of the in-flight budget (their bodies complete).
    pub fn in_flight(&self) -> usize {
        self.0.in_flight.load(Ordering::Relaxed)
    }
    /// Reviews waiting for the in-flight budget.
    pub fn waiting_reviews(&self) -> usize {
        self.0.waiting_reviews.load(Ordering::Relaxed)
    }
    /// Reviews answered 429.
    pub fn overloaded(&self) -> u64 {
        self.0.overloaded.load(Ordering::Relaxed)
    }
    /// Bodies cut off while incomplete to make room in the receive buffer.
    pub fn preempted(&self) -> u64 {
        self.0.preempted.load(Ordering::Relaxed)
    }
    /// HTTP/2 connections closed for being idle.
    pub fn idle_closed(&self) -> u64 {
        self.0.idle_closed.load(Ordering::Relaxed)
    }
    /// Idle connections closed to make room for a waiting one.
    pub fn yielded(&self) -> u64 {
        self.0.yielded.load(Ordering::Relaxed)
    }
    /// Connections closed, owing a request, to make room for a waiting one.
    pub fn stalled_closed(&self) -> u64 {
        self.0.stalled_closed.load(Ordering::Relaxed)
    }
}

/// Shared by the acceptor, the per-request layer and the idle sweeper.
pub(super) struct Guard {
    limits: Limits,
    timeouts: Timeouts,
    slots: Arc<Semaphore>,
    budget: Arc<Semaphore>,
    /// The budget in permits (KiB).
    budget_kib: u32,
    receiver: Receiver,
    /// Every open connection, from its accept.
    registry: Mutex<HashMap<u64, Weak<Connection>>>,
    /// One caller at a time chooses whom to close, so that two waiters never count the same
    /// closing connection as their room.
    making_room: Mutex<()>,
    /// Connections closed for waiting ones that no waiter has taken a slot for yet: a closed
    /// connection frees its slot a moment later, and the waiter takes it a moment after that,
    /// so neither the registry nor the waiting count says whether a waiter is covered.
    evictions_owed: AtomicUsize,
    next_id: AtomicU64,
    epoch: Instant,
    stats: LimitStats,
    metrics: Metrics,
}

impl Guard {
    pub(super) fn new(
        limits: Limits,
        timeouts: Timeouts,
        metrics: Metrics,
        stats: LimitStats,
    ) -> Arc<Self> {
        let limits = Limits {
            max_connections: limits.max_connections.max(1),
            in_flight_body_bytes: limits.in_flight_body_bytes.max(MIN_RESERVATION),
            // A body the limit admits must fit, or it could never arrive.
            receiving_body_bytes: limits.receiving_body_bytes.max(MAX_BODY_BYTES),
        };
        let permits = |bytes: usize| kib(bytes).min(Semaphore::MAX_PERMITS as u32);
        let budget_kib = permits(limits.in_flight_body_bytes);
        Arc::new(Self {
            limits,
            timeouts,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            budget: Arc::new(Semaphore::new(budget_kib as usize)),
            budget_kib,
            receiver: Receiver::new(permits(limits.receiving_body_bytes)),
            registry: Mutex::new(HashMap::new()),
            making_room: Mutex::new(()),
            evictions_owed: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            stats,
            metrics,
        })
    }

    /// Microseconds since the guard's epoch: fine enough that two requests rarely end in the
    /// same tick, so "idle the longest" means what it says.
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn registered(&self) -> Vec<Arc<Connection>> {
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn count_closed(&self, why: Closed) {
        let (counter, label) = match why {
            Closed::Stalled => (&self.stats.0.stalled_closed, "stalled"),
            Closed::Yielded => (&self.stats.0.yielded, "yielded"),
            Closed::Idle => (&self.stats.0.idle_closed, "idle"),
            Closed::Refused => (&self.stats.0.refused_connections, "refused"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .webhook_connections_closed
            .with_label_values(&[label])
            .inc();
    }

    /// For each connection waiting for a slot and not yet covered by one closed for it, close
    /// one open connection ([`victim`]): the one owing a request the longest (shut at once),
    /// else, when none is arriving, the one idle the longest (gracefully). Busy connections are
    /// left alone.
    fn make_room(&self) {
        if self.stats.waiting_connections() == 0 {
            return;
        }
        let _one = self.making_room.lock().unwrap_or_else(|e| e.into_inner());
        let uncovered = || {
            self.stats
                .waiting_connections()
                .saturating_sub(self.evictions_owed.load(Ordering::Acquire))
        };
        if uncovered() == 0 {
            return;
        }
        let connections = self.registered();
        while uncovered() > 0 {
            let (now, stalled) = (
                self.now_us(),
                self.timeouts.stalled_after.as_micros() as u64,
            );
            let standings = connections.iter().map(|c| c.standing(now, stalled));
            let Some((index, eviction)) = victim(standings) else {
                // Nobody stalled, and busy or arriving connections keep the idle ones: a
                // request's end (Active's drop) or the sweep makes room later.
                return;
            };
            let connection = &connections[index];
            let closed = match eviction {
                Eviction::Shut => connection.kill(),
                Eviction::Close => connection.close(),
            };
            if !closed {
                continue; // closed by somebody else meanwhile: its standing is now Busy
            }
            self.evictions_owed.fetch_add(1, Ordering::AcqRel);
            match eviction {
                Eviction::Shut => {
                    self.count_closed(Closed::Stalled);
                    tracing::debug!(
                        "closed the connection owing a request the longest, for a waiting one"
                    );
                }
                Eviction::Close => self.count_closed(Closed::Yielded),
            }
        }
    }

    /// A waiter stopped waiting (with a slot or without): one eviction less is owed.
    fn waiter_done(&self) {
        self.stats
            .0
            .waiting_connections
            .fetch_sub(1, Ordering::AcqRel);
        let _ = self
            .evictions_owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Closes HTTP/2 connections idle for longer than the limit, and makes room for waiting
    /// connections that no closing one covers yet, until `stop`. One task for every connection:
    /// a sweep of a thousand entries is cheaper than a timer each.
    pub(super) async fn sweep_idle(self: Arc<Self>, stop: CancellationToken) {
        let limit = self.timeouts.header_read;
        let period = (limit / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let limit_us = limit.as_micros() as u64;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.make_room();
            let now = self.now_us();
            for connection in self.registered() {
                if connection.is_idle()
                    && connection.h2.load(Ordering::Relaxed)
                    && now.saturating_sub(connection.idle_since_us.load(Ordering::Relaxed))
                        >= limit_us
                    && connection.close()
                {
                    self.count_closed(Closed::Idle);
                    tracing::debug!(idle = ?limit, "closed an idle HTTP/2 connection");
                }
            }
        }
    }

    /// A body that could not be read: answered (408, 413 or 400) and counted.
    fn rejected(&self, error: BodyError) -> Response {
        if matches!(error, BodyError::Preempted) {
            self.stats.0.preempted.fetch_add(1, Ordering::Relaxed);
        }
        let (response, label) = super::server::body_rejection(error);
        self.metrics
            .admission_requests
            .with_label_values(&[label])
            .inc();
        response
    }
}

/// Why the server closed a connection (`restore_hooks_webhook_connections_closed_total`).
#[derive(Clone, Copy, Debug)]
enum Closed {
    /// Owed a request the longest when a waiting connection needed its slot.
    Stalled,
    /// Idle the longest when a waiting connection needed its slot.
    Yielded,
    /// HTTP/2, idle for the idle limit.
    Idle,
    /// A new connection that got no slot.
    Refused,
}

/// How a connection stands when room must be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Owes a request (its first, or a body being received) since this µs, for at least
    /// [`Timeouts::stalled_after`].
    Owing(u64),
    /// Owes a request for less than [`Timeouts::stalled_after`]: arriving, like the API
    /// server's connections.
    Arriving,
    /// Nothing in flight since this µs.
    Idle(u64),
    /// A request is being decided or answered, or the connection is closing already.
    Busy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Eviction {
    /// Shut the socket: there is no request to answer.
    Shut,
    /// Close gracefully.
    Close,
}

/// Whom to close for a waiting connection: the one owing the longest, else, when none is even
/// arriving, the one idle the longest; never a busy one. While connections are arriving, idle
/// ones are left alone: an arriving connection either becomes stalled (and is closed then) or
/// finishes its request, and closing an idle connection costs its client (most likely the API
/// server, whose connections are the ones that finish requests) a reconnect, for a slot a
/// stalled client may be about to give up anyway.
fn victim(standings: impl Iterator<Item = Standing>) -> Option<(usize, Eviction)> {
    let mut owing: Option<(u64, usize)> = None;
    let mut idle: Option<(u64, usize)> = None;
    let mut arriving = false;
    for (index, standing) in standings.enumerate() {
        match standing {
            Standing::Owing(since) if owing.is_none_or(|(s, _)| since < s) => {
                owing = Some((since, index));
            }
            Standing::Idle(since) if idle.is_none_or(|(s, _)| since < s) => {
                idle = Some((since, index));
            }
            Standing::Arriving => arriving = true,
            _ => {}
        }
    }
    match (owing, arriving, idle) {
        (Some((_, index)), _, _) => Some((index, Eviction::Shut)),
        (None, false, Some((_, index))) => Some((index, Eviction::Close)),
        _ => None,
    }
}

/// Shuts a connection's socket from outside its task: once tripped, every read and write of the
/// stream fails, and a read or write waiting on the socket is woken to fail. hyper then drops
/// the connection (a handshake in progress fails the same way), and its slot is free.
#[derive(Debug, Default)]
struct KillSwitch {
    tripped: AtomicBool,
    waker: AtomicWaker,
}

impl KillSwitch {
    fn trip(&self) {
        self.tripped.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn tripped(&self) -> bool {
        self.tripped.load(Ordering::Acquire)
    }

    /// After the socket said Pending: be woken by a trip too, and fail if one happened before
    /// the registration.
    fn pending<T>(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        self.waker.register(cx.waker());
        if self.tripped() {
            Poll::Ready(Err(shut()))
        } else {
            Poll::Pending
        }
    }
}

fn shut() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "closed to make room for a waiting connection: it owed a request the longest",
    )
}

/// The accepted socket, with its [`KillSwitch`].
pub(super) struct Killable<I> {
    inner: I,
    switch: Arc<KillSwitch>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Killable<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.switch.tripped() {
            return Poll::Ready(Err(shut()));
        }
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending => self.switch.pending(cx),
            ready => ready,
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Killable<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.switch.tripped() {
            return Poll::Ready(Err(shut()));
        }
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.switch.pending(cx),
            ready => ready,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if self.switch.tripped() {
            return Poll::Ready(Err(shut()));
        }
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.switch.pending(cx),
            ready => ready,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.switch.tripped() {
            return Poll::Ready(Err(shut()));
        }
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.switch.pending(cx),
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One open connection: its slot, what it owes and has in flight, and how to close it.
pub(super) struct Connection {
    id: u64,
    guard: Weak<Guard>,
    _slot: OwnedSemaphorePermit,
    /// Requests dispatched and not answered yet.
    active: AtomicUsize,
    /// When `active` last dropped to 0 (µs since the guard's epoch).
    idle_since_us: AtomicU64,
    /// What the connection owes: 1 from its accept until its first request's body arrived,
    /// plus 1 for each later request whose body is arriving.
    owing: AtomicUsize,
    /// When `owing` last rose from 0 (µs since the guard's epoch): only that rise sets it, so a
    /// stalled body keeps its connection's age while other requests come and go.
    owing_since_us: AtomicU64,
    h2: AtomicBool,
    /// A first request was dispatched.
    served: AtomicBool,
    /// Set by the first request (axum-server hands it out per request).
    shutdown: OnceLock<ConnectionShutdown>,
    closing: AtomicBool,
    switch: Arc<KillSwitch>,
    /// What its bodies hold before the shared receive buffer.
    allowance: Allowance,
}

impl Connection {
    fn is_idle(&self) -> bool {
        self.active.load(Ordering::Acquire) == 0
            && self.owing.load(Ordering::Acquire) == 0
            && !self.closing.load(Ordering::Relaxed)
    }

    /// How it stands at `now_us`: owing counts only once it has owed for `stalled_us`; before,
    /// the connection is arriving.
    fn standing(&self, now_us: u64, stalled_us: u64) -> Standing {
        if self.closing.load(Ordering::Acquire) {
            Standing::Busy
        } else if self.owing.load(Ordering::Acquire) > 0 {
            let since = self.owing_since_us.load(Ordering::Relaxed);
            if now_us.saturating_sub(since) >= stalled_us {
                Standing::Owing(since)
            } else {
                Standing::Arriving
            }
        } else if self.active.load(Ordering::Acquire) == 0 && self.shutdown.get().is_some() {
            Standing::Idle(self.idle_since_us.load(Ordering::Relaxed))
        } else {
            Standing::Busy
        }
    }

    /// Graceful close: the response in flight (if any) is still sent. True if this call did it.
    fn close(&self) -> bool {
        let Some(shutdown) = self.shutdown.get() else {
            return false;
        };
        if self.closing.swap(true, Ordering::AcqRel) {
            return false;
        }
        shutdown.graceful_shutdown();
        true
    }

    /// Shuts the socket (nothing is answered). True if this call did it.
    fn kill(&self) -> bool {
        if self.closing.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.switch.trip();
        true
    }

    /// Called by every request: the first one also hands the connection its shutdown handle.
    /// True for the first request.
    fn first_request(&self, version: Version, shutdown: Option<&ConnectionShutdown>) -> bool {
        // After the first request: one atomic load.
        if self.served.load(Ordering::Relaxed) || self.served.swap(true, Ordering::AcqRel) {
            return false; // (the swap: another stream of this h2 connection was first)
        }
        if let Some(shutdown) = shutdown {
            let _ = self.shutdown.set(shutdown.clone());
        }
        self.h2.store(version == Version::HTTP_2, Ordering::Relaxed);
        true
    }

    /// The connection owes this request's body until the returned guard is dropped. The first
    /// request takes over the debt the connection has had since its accept.
    fn owe(self: &Arc<Self>, first: bool, now_us: u64) -> Owing {
        if !first && self.owing.fetch_add(1, Ordering::AcqRel) == 0 {
            self.owing_since_us.store(now_us, Ordering::Relaxed);
        }
        Owing(self.clone())
    }
}

/// A debt of a request's body; paid when dropped.
struct Owing(Arc<Connection>);

impl Drop for Owing {
    fn drop(&mut self) {
        self.0.owing.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.upgrade() {
            guard.stats.0.connections.fetch_sub(1, Ordering::Relaxed);
            guard
                .registry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.id);
        }
    }
}

/// A request in flight on a connection: when the last one ends, the connection is idle (and,
/// if connections are waiting for a slot, room is made).
struct Active {
    connection: Arc<Connection>,
    guard: Arc<Guard>,
}

impl Active {
    fn begin(connection: Arc<Connection>, guard: Arc<Guard>) -> Self {
        connection.active.fetch_add(1, Ordering::AcqRel);
        Self { connection, guard }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.connection
            .idle_since_us
            .store(self.guard.now_us(), Ordering::Relaxed);
        if self.connection.active.fetch_sub(1, Ordering::AcqRel) == 1
            && self.guard.stats.waiting_connections() > 0
        {
            self.guard.make_room();
        }
    }
}

/// Wraps the TLS acceptor: takes a connection slot before the handshake, and makes the socket
/// one the guard can shut.
#[derive(Clone)]
pub(super) struct SlotAcceptor<A> {
    inner: A,
    guard: Arc<Guard>,
}

impl<A> SlotAcceptor<A> {
    pub(super) fn new(inner: A, guard: Arc<Guard>) -> Self {
        Self { inner, guard }
    }
}

impl<A, I> Accept<I, axum::Router> for SlotAcceptor<A>
where
    A: Accept<Killable<I>, axum::Router> + Clone + Send + Sync + 'static,
    A::Future: Send,
    I: Send + 'static,
{
    type Stream = A::Stream;
    type Service = A::Service;
    type Future = BoxFuture<'static, std::io::Result<(A::Stream, A::Service)>>;

    fn accept(&self, stream: I, service: axum::Router) -> Self::Future {
        let (inner, guard) = (self.inner.clone(), self.guard.clone());
        Box::pin(async move {
            let slot = match guard.slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => wait_for_slot(&guard).await?,
            };
            guard.stats.0.connections.fetch_add(1, Ordering::Relaxed);
            let now = guard.now_us();
            let switch = Arc::new(KillSwitch::default());
            let connection = Arc::new(Connection {
                id: guard.next_id.fetch_add(1, Ordering::Relaxed),
                guard: Arc::downgrade(&guard),
                _slot: slot,
                active: AtomicUsize::new(0),
                idle_since_us: AtomicU64::new(now),
                owing: AtomicUsize::new(1),
                owing_since_us: AtomicU64::new(now),
                h2: AtomicBool::new(false),
                served: AtomicBool::new(false),
                shutdown: OnceLock::new(),
                closing: AtomicBool::new(false),
                switch: switch.clone(),
                allowance: Allowance::new(),
            });
            guard
                .registry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(connection.id, Arc::downgrade(&connection));
            // Every request of this connection finds it in its extensions; the router (and with
            // it the slot) is dropped when the connection and its last request are done.
            let service = service.layer(axum::Extension(connection));
            inner
                .accept(
                    Killable {
                        inner: stream,
                        switch,
                    },
                    service,
                )
                .await
        })
    }
}

/// Over the cap: wait for a slot (an open connection is asked to make room), for at most the
/// handshake timeout; with as many connections waiting as the cap allows, close at once.
async fn wait_for_slot(guard: &Arc<Guard>) -> std::io::Result<OwnedSemaphorePermit> {
    let refuse = |why: &str| {
        guard.count_closed(Closed::Refused);
        tracing::warn!(
            max_connections = guard.limits.max_connections,
            "closed a new connection: {why}"
        );
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, why.to_string())
    };
    let waiting = &guard.stats.0.waiting_connections;
    if waiting.fetch_add(1, Ordering::AcqRel) >= guard.limits.max_connections {
        waiting.fetch_sub(1, Ordering::AcqRel);
        return Err(refuse(
            "the connection cap is reached and as many connections already wait",
        ));
    }
    guard.make_room();
    let acquired = tokio::time::timeout(
        guard.timeouts.handshake,
        guard.slots.clone().acquire_owned(),
    )
    .await;
    guard.waiter_done();
    match acquired {
        Ok(Ok(slot)) => Ok(slot),
        Ok(Err(_)) => Err(refuse("the server is stopping")),
        Err(_) => Err(refuse(
            "no connection slot became free within the handshake timeout",
        )),
    }
}

/// Per request, before the handler: the size check, the body received whole under its deadline
/// (holding the receive buffer for what arrived), then the in-flight reservation, held until the
/// answer is built.
pub(super) async fn admit(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let connection = request.extensions().get::<Arc<Connection>>().cloned();
    let (_active, owing) = match &connection {
        Some(connection) => {
            let first = connection.first_request(
                request.version(),
                request.extensions().get::<ConnectionShutdown>(),
            );
            let owing = connection.owe(first, guard.now_us());
            (
                Some(Active::begin(connection.clone(), guard.clone())),
                Some(owing),
            )
        }
        None => (None, None),
    };

    let declared = request.body().size_hint().exact();
    if let Some(length) = declared
        && length > MAX_BODY_BYTES as u64
    {
        if request.version() < Version::HTTP_2 && length <= DRAIN_LIMIT_BYTES {
            drain(request, guard.timeouts.request_body).await;
        }
        return too_large(&guard, Some(length));
    }
    let (parts, body) = request.into_parts();
    guard.stats.0.receiving.fetch_add(1, Ordering::Relaxed);
    let received = tokio::time::timeout(
        guard.timeouts.request_body,
        guard.receiver.receive(
            body,
            started,
            MAX_BODY_BYTES,
            connection.as_deref().map(|c| &c.allowance),
        ),
    )
    .await;
    guard.stats.0.receiving.fetch_sub(1, Ordering::Relaxed);
    drop(owing);
    let Received { bytes, _held: held } = match received {
        Ok(Ok(received)) => received,
        Ok(Err(error)) => return guard.rejected(error),
        Err(_) => {
            let limit = guard.timeouts.request_body;
            return guard.rejected(BodyError::TooSlow(BodyDeadlineExceeded(limit)));
        }
    };

    let permits = kib(bytes.len().max(MIN_RESERVATION)).min(guard.budget_kib);
    let reservation = match guard.budget.clone().try_acquire_many_owned(permits) {
        Ok(reservation) => reservation,
        Err(_) => match wait_for_budget(&guard, permits).await {
            Some(reservation) => reservation,
            None => return overloaded(&guard),
        },
    };
    // The bytes are now counted in the in-flight budget.
    drop(held);
    guard.stats.0.in_flight.fetch_add(1, Ordering::Relaxed);
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    guard.stats.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    drop(reservation);
    response
}

/// An HTTP/1.1 body declared over the limit, but not absurdly so, is read and discarded before
/// the 413: closing a connection with unread request bytes makes the kernel reset it, and the
/// client would then lose the answer saying why. Nothing is kept (one read buffer at a time);
/// larger declarations get the answer and the close at once.
const DRAIN_LIMIT_BYTES: u64 = 4 * MAX_BODY_BYTES as u64;

async fn drain(request: Request, deadline: Duration) {
    let request = with_body_deadline(deadline, request).await;
    let mut frames = request.into_body().into_data_stream();
    while let Some(Ok(_)) = futures::StreamExt::next(&mut frames).await {}
}

async fn wait_for_budget(guard: &Guard, permits: u32) -> Option<OwnedSemaphorePermit> {
    guard
        .stats
        .0
        .waiting_reviews
        .fetch_add(1, Ordering::Relaxed);
    let acquired = tokio::time::timeout(
        guard.timeouts.in_flight_wait,
        guard.budget.clone().acquire_many_owned(permits),
    )
    .await;
    guard
        .stats
        .0
        .waiting_reviews
        .fetch_sub(1, Ordering::Relaxed);
    acquired.ok()?.ok()
}

/// 413 before reading: the body was declared larger than any AdmissionReview of a pod.
pub(super) fn too_large(guard: &Guard, declared: Option<u64>) -> Response {
    guard
        .metrics
        .admission_requests
        .with_label_values(&["too_large"])
        .inc();
    too_large_response(declared)
}

pub(super) fn too_large_response(declared: Option<u64>) -> Response {
    tracing::warn!(
        limit = MAX_BODY_BYTES,
        declared,
        "rejected an admission request body over the size limit"
    );
    let message = format!(
        "request body exceeds {MAX_BODY_BYTES} bytes: an AdmissionReview of a pod is far \
         smaller; check what the webhook configuration sends here\n"
    );
    (StatusCode::PAYLOAD_TOO_LARGE, message).into_response()
}

fn overloaded(guard: &Guard) -> Response {
    guard.stats.0.overloaded.fetch_add(1, Ordering::Relaxed);
    guard
        .metrics
        .admission_requests
        .with_label_values(&["overloaded"])
        .inc();
    tracing::warn!(
        budget_bytes = guard.limits.in_flight_body_bytes,
        waited = ?guard.timeouts.in_flight_wait,
        "answered 429: the in-flight budget of request bodies stayed spent"
    );
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "restore-hooks: {} bytes of admission requests are being decided already; retry \
             shortly\n",
            guard.limits.in_flight_body_bytes
        ),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whom a waiting connection costs its slot: the connection owing a request the longest is
    /// shut, idle ones are closed gracefully only when none owes, busy ones never.
    #[test]
    fn the_connection_owing_the_longest_makes_room_then_the_longest_idle() {
        use Eviction::*;
        use Standing::*;
        type Case<'a> = (&'a [Standing], Option<(usize, Eviction)>);
        let cases: &[Case<'_>] = &[
            (&[], None),
            (&[Busy, Busy], None),
            // Owing beats idle, however long idle.
            (&[Idle(0), Owing(500), Busy], Some((1, Shut))),
            // The oldest debt first: a stalled client, not the API server's fresh handshake.
            (&[Owing(900), Owing(100), Owing(400)], Some((1, Shut))),
            // No debt: the connection idle the longest.
            (&[Idle(300), Busy, Idle(100), Idle(200)], Some((2, Close))),
            (&[Busy, Idle(7)], Some((1, Close))),
            // Arriving connections are not closed, and keep idle ones from being closed: they
            // either stall (and are closed then) or finish their request.
            (&[Arriving, Idle(7)], None),
            (&[Arriving, Owing(9), Idle(7)], Some((1, Shut))),
        ];
        for (standings, expected) in cases {
            assert_eq!(
                victim(standings.iter().copied()),
                *expected,
                "{standings:?}"
            );
        }
    }

    /// A trip wakes a read waiting on the socket and fails it, and every later call fails too.
    #[tokio::test]
    async fn a_tripped_switch_fails_a_pending_read() {
        use tokio::io::AsyncReadExt;
        let (client, server) = tokio::io::duplex(64);
        let switch = Arc::new(KillSwitch::default());
        let mut stream = Killable {
            inner: server,
            switch: switch.clone(),
        };
        let read = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            let first = stream.read(&mut buf).await;
            let second = stream.read(&mut buf).await;
            (first, second)
        });
        tokio::task::yield_now().await;
        switch.trip();
        let (first, second) = read.await.unwrap();
        assert_eq!(
            first.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionAborted
        );
        assert_eq!(
            second.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionAborted
        );
        drop(client);
    }
}
