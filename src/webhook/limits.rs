//! What bounds the webhook's memory and connections against clients that are hostile, stuck or
//! merely many: a cap on open connections, a budget of request-body bytes being read and decided
//! at once, and an idle limit for HTTP/2 connections.
//!
//! - **Connections** ([`Limits::max_connections`]): a connection over the cap waits, before its
//!   TLS handshake, for a slot (at most [`Timeouts::handshake`](super::Timeouts), then it is
//!   closed); at most as many again may wait, further ones are closed at once. Waiting rather
//!   than refusing: the API server's dialer waits too, within the webhook's timeout, while a
//!   refused connection is a failed admission. While anyone waits, idle connections (no request
//!   in flight) are closed gracefully to make room: a kept-alive connection is only a
//!   convenience, and clients reconnect (Go retries a request whose connection the server closed
//!   while idle).
//! - **In-flight body bytes** ([`Limits::in_flight_body_bytes`]): a review reserves its declared
//!   `Content-Length` (at least [`MIN_RESERVATION`], [`MAX_BODY_BYTES`] when it declares none)
//!   before its body is read, and keeps the reservation until its answer is built. A body over
//!   [`MAX_BODY_BYTES`] is answered 413 before it is read. When the budget is spent, a review
//!   waits up to [`Timeouts::in_flight_wait`] and is then answered 429 with `Retry-After: 1`:
//!   the API server calls webhooks through client-go's REST client, which retries a 429
//!   carrying `Retry-After` (the AdmissionReview is a byte body, so the request is replayable)
//!   within the webhook's timeout; without the header the call would simply fail and
//!   `failurePolicy` decide. Holding a waiting review costs little: its body is not read, so it
//!   stays in the kernel or within the HTTP/2 flow-control window.
//! - **Idle HTTP/2 connections**: closed (GOAWAY) once no request was in flight for
//!   [`Timeouts::header_read`](super::Timeouts), the limit hyper already applies to idle
//!   HTTP/1.1 keep-alive connections. In-flight requests are never cut: only a connection with
//!   nothing in flight is closed, and a graceful GOAWAY lets streams the client already started
//!   finish.
//!
//! The module is long because the three bounds share one guard, its statistics and the accept
//! wrapper that enforces them; most of its length is the reasoning above.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_server::ConnectionShutdown;
use axum_server::accept::Accept;
use futures::future::BoxFuture;
use http_body::Body as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::body_deadline::with_body_deadline;
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
    /// Reading the whole body of a request, counted from when it got its in-flight reservation:
    /// neither of the limits above covers a client that sends a head and then trickles the body.
    pub request_body: Duration,
    /// How long a review waits for the in-flight budget ([`Limits::in_flight_body_bytes`])
    /// before it is answered 429 with `Retry-After: 1`: a burst is smoothed over, and the API
    /// server (whose webhook timeout is at least 1 s, 5 s in the chart) still has time to retry.
    pub in_flight_wait: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            handshake: Duration::from_secs(10),
            first_request: Duration::from_secs(10),
            header_read: Duration::from_secs(120),
            request_body: Duration::from_secs(10),
            in_flight_wait: Duration::from_secs(1),
        }
    }
}

/// The smallest reservation a review makes from the in-flight budget, whatever it declares: a
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
    /// Declared request-body bytes of the reviews being read and decided at once. Decoding a
    /// pod can cost twenty times its bytes at its peak (a container `env` of millions of tiny
    /// JSON values, kept as a JSON tree by the pod view; a labels map of tiny entries costs
    /// ten): 4 MiB admits one maximum-size review at a time alongside a hundred ordinary ones
    /// (or a thousand ordinary ones alone), and keeps the worst case under 160 MiB, well below
    /// the chart's 256 MiB memory limit.
    pub in_flight_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            in_flight_body_bytes: 4 * 1024 * 1024,
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
    in_flight: AtomicUsize,
    waiting_reviews: AtomicUsize,
    overloaded: AtomicU64,
    idle_closed: AtomicU64,
    yielded: AtomicU64,
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
    /// Reviews holding a reservation of the in-flight budget.
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
    /// HTTP/2 connections closed for being idle.
    pub fn idle_closed(&self) -> u64 {
        self.0.idle_closed.load(Ordering::Relaxed)
    }
    /// Idle connections closed to make room for a waiting one.
    pub fn yielded(&self) -> u64 {
        self.0.yielded.load(Ordering::Relaxed)
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
    /// Open connections that served a request (they have a shutdown handle).
    registry: Mutex<HashMap<u64, Weak<Connection>>>,
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
        };
        let budget_kib = u32::try_from(limits.in_flight_body_bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(Semaphore::MAX_PERMITS as u32);
        Arc::new(Self {
            limits,
            timeouts,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            budget: Arc::new(Semaphore::new(budget_kib as usize)),
            budget_kib,
            registry: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            stats,
            metrics,
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn registered(&self) -> Vec<Arc<Connection>> {
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Asks every idle connection to close, so that waiting connections get their slots.
    fn make_room(&self) {
        for connection in self.registered() {
            if connection.is_idle() && connection.close() {
                self.stats.0.yielded.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Closes HTTP/2 connections idle for longer than the limit, until `stop`. One task for
    /// every connection: a sweep of a thousand entries is cheaper than a timer each.
    pub(super) async fn sweep_idle(self: Arc<Self>, stop: CancellationToken) {
        let limit = self.timeouts.header_read;
        let period = (limit / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let limit_ms = limit.as_millis() as u64;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = self.now_ms();
            let waiting = self.stats.waiting_connections() > 0;
            for connection in self.registered() {
                if !connection.is_idle() {
                    continue;
                }
                if waiting {
                    if connection.close() {
                        self.stats.0.yielded.fetch_add(1, Ordering::Relaxed);
                    }
                } else if connection.h2.load(Ordering::Relaxed)
                    && now.saturating_sub(connection.idle_since_ms.load(Ordering::Relaxed))
                        >= limit_ms
                    && connection.close()
                {
                    self.stats.0.idle_closed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(idle = ?limit, "closed an idle HTTP/2 connection");
                }
            }
        }
    }
}

/// One open connection: its slot, what is in flight on it, and how to close it.
pub(super) struct Connection {
    id: u64,
    guard: Weak<Guard>,
    _slot: OwnedSemaphorePermit,
    /// Requests dispatched and not answered yet.
    active: AtomicUsize,
    /// When `active` last dropped to 0 (ms since the guard's epoch).
    idle_since_ms: AtomicU64,
    h2: AtomicBool,
    /// Set by the first request (axum-server hands it out per request).
    shutdown: OnceLock<ConnectionShutdown>,
    closing: AtomicBool,
}

impl Connection {
    fn is_idle(&self) -> bool {
        self.active.load(Ordering::Acquire) == 0 && !self.closing.load(Ordering::Relaxed)
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

    /// The first request registers the connection with the sweeper.
    fn first_request(self: &Arc<Self>, version: Version, shutdown: Option<&ConnectionShutdown>) {
        // After the first request: one atomic load.
        if self.shutdown.get().is_some() {
            return;
        }
        let Some(shutdown) = shutdown else { return };
        if self.shutdown.set(shutdown.clone()).is_err() {
            return; // another stream of this h2 connection was first
        }
        self.h2.store(version == Version::HTTP_2, Ordering::Relaxed);
        if let Some(guard) = self.guard.upgrade() {
            guard
                .registry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(self.id, Arc::downgrade(self));
        }
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
/// if connections are waiting for a slot, yields its own).
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
            .idle_since_ms
            .store(self.guard.now_ms(), Ordering::Relaxed);
        if self.connection.active.fetch_sub(1, Ordering::AcqRel) == 1
            && self.guard.stats.waiting_connections() > 0
            && self.connection.close()
        {
            self.guard.stats.0.yielded.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Wraps the TLS acceptor: takes a connection slot before the handshake.
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
    A: Accept<I, axum::Router> + Clone + Send + Sync + 'static,
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
            let connection = Arc::new(Connection {
                id: guard.next_id.fetch_add(1, Ordering::Relaxed),
                guard: Arc::downgrade(&guard),
                _slot: slot,
                active: AtomicUsize::new(0),
                idle_since_ms: AtomicU64::new(guard.now_ms()),
                h2: AtomicBool::new(false),
                shutdown: OnceLock::new(),
                closing: AtomicBool::new(false),
            });
            // Every request of this connection finds it in its extensions; the router (and with
            // it the slot) is dropped when the connection and its last request are done.
            let service = service.layer(axum::Extension(connection));
            inner.accept(stream, service).await
        })
    }
}

/// Over the cap: wait for a slot (idle connections are asked to make room), for at most the
/// handshake timeout; with as many connections waiting as the cap allows, close at once.
async fn wait_for_slot(guard: &Arc<Guard>) -> std::io::Result<OwnedSemaphorePermit> {
    let refuse = |why: &str| {
        guard
            .stats
            .0
            .refused_connections
            .fetch_add(1, Ordering::Relaxed);
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
    waiting.fetch_sub(1, Ordering::AcqRel);
    match acquired {
        Ok(Ok(slot)) => Ok(slot),
        Ok(Err(_)) => Err(refuse("the server is stopping")),
        Err(_) => Err(refuse(
            "no connection slot became free within the handshake timeout",
        )),
    }
}

/// Per request, before anything of the body is read: the size check, the in-flight
/// reservation (held until the answer is built) and the whole-body deadline.
pub(super) async fn admit(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    let connection = request.extensions().get::<Arc<Connection>>().cloned();
    let _active = connection.map(|connection| {
        connection.first_request(
            request.version(),
            request.extensions().get::<ConnectionShutdown>(),
        );
        Active::begin(connection, guard.clone())
    });

    let declared = request.body().size_hint().exact();
    if let Some(length) = declared
        && length > MAX_BODY_BYTES as u64
    {
        if request.version() < Version::HTTP_2 && length <= DRAIN_LIMIT_BYTES {
            drain(request, guard.timeouts.request_body).await;
        }
        return too_large(&guard, Some(length));
    }
    let bytes = declared.map_or(MAX_BODY_BYTES, |l| l as usize);
    let permits = (bytes.max(MIN_RESERVATION).div_ceil(1024) as u32).min(guard.budget_kib);
    let reservation = match guard.budget.clone().try_acquire_many_owned(permits) {
        Ok(reservation) => reservation,
        Err(_) => match wait_for_budget(&guard, permits).await {
            Some(reservation) => reservation,
            None => return overloaded(&guard),
        },
    };
    guard.stats.0.in_flight.fetch_add(1, Ordering::Relaxed);
    let request = with_body_deadline(guard.timeouts.request_body, request).await;
    let response = next.run(request).await;
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
