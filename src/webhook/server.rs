//! The HTTPS server around [`super::review`]: `POST /mutate`, TLS with certificate reload, timeouts
//! against slow clients, per-request logs and metrics, and a graceful drain on shutdown.
//!
//! Memory and connections are bounded against hostile or stuck clients ([`super::limits`]): a
//! connection cap, a budget of request bytes in flight, and an idle limit for HTTP/2.
//!
//! Shutdown follows what the API server needs from a terminating webhook (kubernetes#127335):
//! report not ready, keep serving for `--shutdown-delay` while endpoints converge (closing each
//! connection after its response so the API server reconnects to another replica), then stop
//! accepting, finish in-flight requests and close idle keep-alive connections, with
//! `--shutdown-grace` as the upper bound.
//!
//! The module is long because binding, TLS reload, request handling and drain share the server's
//! lifetime; the admission decision itself is in [`super::review`], the bounds in
//! [`super::limits`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json};
use axum_server::ConnectionShutdown;
use axum_server::tls_rustls::RustlsConfig;
use prometheus::IntCounter;
use tokio_util::sync::CancellationToken;

use super::body::{BodyError, ReviewBody};
use super::limits::{Guard, LimitStats, Limits, SlotAcceptor, Timeouts, admit, too_large_response};
use super::review::{
    BadReview, Outcome, ReviewContext, Reviewed, allowed, decide_request, parse_review,
};
use super::tls::{CertReloader, TlsDir, TlsError};
use crate::admin::Readiness;
use crate::admission::{ExecRight, Issuer};
use crate::catalog::SharedIndex;
use crate::cli::WebhookArgs;
use crate::config::EngineConfig;
use crate::hooks::authority::identity_voucher;
use crate::hooks::types::Labels;
use crate::metrics::Metrics;
use crate::plan_key::KeyRing;

/// HTTP/1.1 read buffer (headers, and body reads): the API server's request heads are a few
/// hundred bytes. hyper's default, about 400 KiB, would let each of a thousand connections
/// trickling headers hold that much.
const H1_MAX_BUF_BYTES: usize = 64 * 1024;

/// HTTP/2 flow-control windows: how much body a client may send before the server reads it
/// (hyper's default is 1 MiB each). A review waiting for the in-flight budget holds at most this
/// much per connection; pod reviews are a few KiB, and larger ones only need more window
/// updates.
const H2_STREAM_WINDOW_BYTES: u32 = 128 * 1024;
const H2_CONNECTION_WINDOW_BYTES: u32 = 256 * 1024;
/// Concurrent streams per HTTP/2 connection (hyper's default is 200): Go's HTTP/2 client opens
/// another connection when a connection is at the limit.
const H2_MAX_CONCURRENT_STREAMS: u32 = 64;
/// HTTP/2 PINGs while a connection is quiet, so that a peer that vanished (no FIN, no RST) is
/// noticed: closed when a PING is not answered within the timeout. Also what lets the graceful
/// close of an idle connection finish: h2 waits for a PING round trip before it closes.
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Path the MutatingWebhookConfiguration points at.
pub const MUTATE_PATH: &str = "/mutate";
/// The chart's first webhook: pods carrying the restore label.
pub const MUTATE_POD_LABEL_PATH: &str = "/mutate/pod-label";
/// The chart's second webhook: pods created in a namespace carrying the restore-namespace label.
/// The API server calls it only because it saw that label, which is evidence the webhook uses
/// when its own cache does not know the namespace yet.
pub const MUTATE_NAMESPACE_LABEL_PATH: &str = "/mutate/namespace-label";

/// How long admission may wait for the API server when its namespace cache does not know the
/// pod's namespace: well under the webhook's own timeout (5 s in the chart).
const NAMESPACE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

// Messages carry their cause inline (no `#[source]`), so that a log line with `%err` is complete
// and `{:#}` in main does not print the cause twice.
/// Why the webhook server could not start, or stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The listening socket could not be opened (address in use, no permission for the port).
    #[error("cannot listen on --listen {addr}: {error}")]
    Bind {
        /// The `--listen` address.
        addr: SocketAddr,
        /// The error from the operating system.
        error: std::io::Error,
    },
    /// The serving certificate in `--tls-dir` could not be loaded at start-up (a failed reload
    /// keeps the current certificate instead).
    #[error("cannot load the serving certificate: {0}")]
    Tls(TlsError),
    /// The server stopped on an I/O error after it started.
    #[error("the HTTPS server failed: {0}")]
    Serve(std::io::Error),
}

impl From<TlsError> for WebhookError {
    fn from(err: TlsError) -> Self {
        Self::Tls(err)
    }
}

/// A bound, not yet serving, webhook server.
pub struct Bound {
    listener: std::net::TcpListener,
    local_addr: SocketAddr,
    tls: RustlsConfig,
    reloader: CertReloader,
    router: Router,
    readiness: Readiness,
    shutdown_delay: Duration,
    shutdown_grace: Duration,
    timeouts: Timeouts,
    limits: Limits,
    stats: LimitStats,
    metrics: Metrics,
}

impl Bound {
    /// Loads the certificate from `args.tls_dir` (failure is a startup error), binds
    /// `args.listen` (port 0 picks a free port: see [`Bound::local_addr`]) and marks the
    /// certificate loaded and the catalog tracked in `readiness`.
    pub fn bind(
        args: &WebhookArgs,
        sources: WebhookSources,
        engine: EngineConfig,
        metrics: Metrics,
        readiness: Readiness,
    ) -> Result<Self, WebhookError> {
        readiness.require_certificate();
        let dir = TlsDir::new(&args.tls_dir);
        let loaded = dir.load()?;
        tracing::info!(
            dir = %dir.dir().display(),
            serial = %loaded.info.serial,
            not_after = loaded.info.not_after.as_deref().unwrap_or("unknown"),
            san = ?loaded.info.subject_alt_names,
            chain_len = loaded.info.chain_len,
            "serving certificate loaded"
        );
        let tls = RustlsConfig::from_config(loaded.config);
        let reloader = CertReloader::new(
            dir,
            tls.clone(),
            loaded.pem,
            metrics.clone(),
            args.tls_reload_interval,
        );
        let listener =
            std::net::TcpListener::bind(args.listen).map_err(|error| WebhookError::Bind {
                addr: args.listen,
                error,
            })?;
        let local_addr = listener.local_addr().map_err(|error| WebhookError::Bind {
            addr: args.listen,
            error,
        })?;
        metrics
            .certificate_expiry
            .set(loaded.info.not_after_unix.unwrap_or_default());
        readiness.set_certificate_loaded();
        readiness.track_index(sources.index.clone());
        readiness.track_keys(sources.keys.clone());
        let router = router(sources, engine, metrics.clone(), readiness.clone());
        Ok(Self {
            listener,
            local_addr,
            tls,
            reloader,
            router,
            readiness,
            shutdown_delay: args.shutdown_delay,
            shutdown_grace: args.shutdown_grace,
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            stats: LimitStats::default(),
            metrics,
        })
    }

    /// The address actually bound: the port the system picked when `--listen` asked for port 0.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Replaces the default client timeouts (tests use short ones).
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Replaces the default connection and in-flight bounds (tests use small ones).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits at work (connections, reviews in flight), live once serving.
    pub fn stats(&self) -> LimitStats {
        self.stats.clone()
    }

    /// Serve another router on the same stack (TLS, timeouts, shutdown): the load harness
    /// uses [`noop_router`] to measure the floor the webhook's own work adds to.
    pub fn with_router(mut self, router: Router) -> Self {
        self.router = router;
        self
    }

    /// Serves until `shutdown` is cancelled and the drain completed.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), WebhookError> {
        let Bound {
            listener,
            local_addr,
            tls,
            reloader,
            router,
            readiness,
            shutdown_delay,
            shutdown_grace,
            timeouts,
            limits,
            stats,
            metrics,
        } = self;
        let guard = Guard::new(limits, timeouts, metrics, stats);
        let handle = axum_server::Handle::new();
        let mut server = axum_server::from_tcp_rustls(listener, tls)
            .map_err(WebhookError::Serve)?
            .map(|acceptor| {
                SlotAcceptor::new(
                    acceptor.handshake_timeout(timeouts.handshake),
                    guard.clone(),
                )
            })
            .handle(handle.clone())
            .first_request_timeout(timeouts.first_request)
            .accept_error_handler(log_accept_error);
        server
            .http_builder()
            .http1()
            .keep_alive(true)
            .header_read_timeout(timeouts.header_read)
            .max_buf_size(H1_MAX_BUF_BYTES);
        server
            .http_builder()
            .http2()
            .initial_stream_window_size(H2_STREAM_WINDOW_BYTES)
            .initial_connection_window_size(H2_CONNECTION_WINDOW_BYTES)
            .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
            .keep_alive_interval(H2_PING_INTERVAL)
            .keep_alive_timeout(H2_PING_TIMEOUT);

        let reload_stop = CancellationToken::new();
        let reload_task = tokio::spawn(reloader.run(reload_stop.clone()));
        let sweep_task = tokio::spawn(guard.clone().sweep_idle(reload_stop.clone()));
        let drain_task = tokio::spawn({
            let handle = handle.clone();
            async move {
                shutdown.cancelled().await;
                readiness.begin_shutdown();
                tracing::info!(
                    delay = ?shutdown_delay,
                    "shutdown: reporting not ready, still serving during --shutdown-delay"
                );
                tokio::time::sleep(shutdown_delay).await;
                tracing::info!(
                    grace = ?shutdown_grace,
                    connections = handle.connection_count(),
                    "shutdown: no longer accepting; finishing in-flight requests"
                );
                handle.graceful_shutdown(Some(shutdown_grace));
            }
        });

        tracing::info!(addr = %local_addr, "webhook listening (HTTPS, h2 and http/1.1)");
        // Size check, in-flight reservation and body deadline before the handler reads anything.
        let router = router.layer(axum::middleware::from_fn_with_state(guard.clone(), admit));
        let result = server.serve(router.into_make_service()).await;
        drain_task.abort();
        reload_stop.cancel();
        let _ = reload_task.await;
        let _ = sweep_task.await;
        tracing::info!("webhook server stopped");
        result.map_err(WebhookError::Serve)
    }
}

/// A connection that failed before its first request. Dropped or timed-out connections (port
/// scans, TCP checks, slow clients) and bytes that are not TLS at all are routine: debug. A TLS
/// alert from the client usually means it does not trust our certificate, i.e. a `caBundle`
/// that does not match: an operator must act.
fn log_accept_error(peer: Option<&SocketAddr>, err: &std::io::Error) {
    use std::io::ErrorKind;
    let tls_error = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    match (err.kind(), tls_error) {
        (_, Some(rustls::Error::AlertReceived(_))) => tracing::warn!(
            peer = ?peer,
            error = %err,
            "a client rejected our certificate (if this is the API server, check that the \
             webhook's caBundle matches the CA of the certificate in --tls-dir)"
        ),
        (
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
            | ErrorKind::TimedOut,
            _,
        ) => {
            tracing::debug!(peer = ?peer, error = %err, "connection closed before a request");
        }
        (_, Some(_)) => {
            tracing::debug!(peer = ?peer, error = %err, "not a TLS client, or a broken handshake");
        }
        _ => tracing::warn!(peer = ?peer, error = %err, "cannot accept a connection"),
    }
}

/// Where the webhook's decisions come from.
#[derive(Clone)]
pub struct WebhookSources {
    /// Hook objects and namespace labels, kept current by the catalog's watches.
    pub index: Arc<SharedIndex>,
    /// The keys that sign the plans the webhook issues; readiness waits for them unless running
    /// without a key is the configuration.
    pub keys: KeyRing,
    /// For namespaces the index does not know yet; `None` without a cluster.
    pub namespaces: Option<kube::Api<k8s_openapi::api::core::v1::Namespace>>,
    /// Whether a pod's creator may create pods/exec (its annotation exec hook depends on it).
    pub exec_rights: Arc<super::exec_rights::ExecRights>,
}

/// Shared by every request behind one `Arc`: axum clones the state per request, and a clone of
/// `Metrics` alone is a dozen reference counts.
struct MutateState {
    sources: WebhookSources,
    engine: EngineConfig,
    metrics: Metrics,
    readiness: Readiness,
    /// `admission_requests` per decided outcome, looked up once: the lookup by label value
    /// hashes and locks on every request otherwise.
    outcomes: [IntCounter; 4],
}

impl MutateState {
    fn outcome(&self, outcome: Outcome) -> &IntCounter {
        &self.outcomes[match outcome {
            Outcome::Unchanged => 0,
            Outcome::Patched => 1,
            Outcome::Warned => 2,
            Outcome::Denied => 3,
        }]
    }
}

/// `POST /mutate` (and the per-webhook paths): the admission webhook.
pub fn router(
    sources: WebhookSources,
    engine: EngineConfig,
    metrics: Metrics,
    readiness: Readiness,
) -> Router {
    Router::new()
        .route(MUTATE_PATH, post(mutate::<false>))
        .route(MUTATE_POD_LABEL_PATH, post(mutate::<false>))
        .route(MUTATE_NAMESPACE_LABEL_PATH, post(mutate::<true>))
        .with_state(Arc::new(MutateState {
            outcomes: [
                Outcome::Unchanged,
                Outcome::Patched,
                Outcome::Warned,
                Outcome::Denied,
            ]
            .map(|o| {
                metrics
                    .admission_requests
                    .with_label_values(&[o.as_label()])
            }),
            sources,
            engine,
            metrics,
            readiness,
        }))
}

/// `POST /mutate` answering "allowed, no patch" for every well-formed review: it parses the
/// AdmissionReview and echoes the uid like the real handler, but decides nothing. The load
/// harness compares the real handler against this floor on the same TLS stack.
pub fn noop_router() -> Router {
    Router::new().route(MUTATE_PATH, post(noop))
}

async fn noop(body: Result<ReviewBody, BodyError>) -> Response {
    let body = match body {
        Ok(ReviewBody(body)) => body,
        Err(rejection) => return body_rejection(rejection).0,
    };
    match parse_review(&body) {
        Ok(request) => match allowed(&request.uid, None, &[]).to_bytes() {
            Ok(json) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                json,
            )
                .into_response(),
            Err(err) => encoding_failed(&err),
        },
        Err(BadReview(message)) => bad_request(&message),
    }
}

/// `POST /mutate*`. `NAMESPACE_LABEL` is the namespace-label webhook's path: its pods are in
/// scope by their namespace's label, which the handler may have to look up.
async fn mutate<const NAMESPACE_LABEL: bool>(
    State(state): State<Arc<MutateState>>,
    connection: Option<Extension<ConnectionShutdown>>,
    RawQuery(query): RawQuery,
    body: Result<ReviewBody, BodyError>,
) -> Response {
    handle(state, connection, query, body, NAMESPACE_LABEL).await
}

/// The namespace's labels from the API server, when the cache does not know it (created a moment
/// ago, or the namespace watch is behind): a restored pod must not lose its hooks to a lagging
/// cache. `None` when that did not work either.
async fn look_up_namespace(state: &MutateState, namespace: &str) -> Option<Labels> {
    let api = state.sources.namespaces.as_ref()?;
    let result =
        tokio::time::timeout(NAMESPACE_LOOKUP_TIMEOUT, api.get_metadata_opt(namespace)).await;
    let (label, labels) = match result {
        Ok(Ok(Some(ns))) => ("found", Some(ns.metadata.labels.unwrap_or_default())),
        Ok(Ok(None)) => ("not_found", None),
        Ok(Err(e)) => {
            tracing::warn!(namespace, error = %e, "cannot read a namespace the cache does not know");
            ("error", None)
        }
        Err(_) => {
            tracing::warn!(namespace, timeout = ?NAMESPACE_LOOKUP_TIMEOUT, "reading a namespace the cache does not know timed out");
            ("error", None)
        }
    };
    state
        .metrics
        .namespace_lookups
        .with_label_values(&[label])
        .inc();
    labels
}

async fn handle(
    state: Arc<MutateState>,
    connection: Option<Extension<ConnectionShutdown>>,
    query: Option<String>,
    body: Result<ReviewBody, BodyError>,
    namespace_label_webhook: bool,
) -> Response {
    // Draining: answer this request, then close the connection so the API server's next call
    // opens a new one, which the Service routes to a replica that is still ready.
    if state.readiness.is_shutting_down()
        && let Some(Extension(connection)) = &connection
    {
        connection.graceful_shutdown();
    }
    let body = match body {
        Ok(ReviewBody(body)) => body,
        Err(rejection) => {
            let (response, label) = body_rejection(rejection);
            state
                .metrics
                .admission_requests
                .with_label_values(&[label])
                .inc();
            return response;
        }
    };
    if let Some(query) = &query {
        // The API server appends `?timeout=10s`; we answer in well under a millisecond, so
        // it is only worth a debug line.
        tracing::debug!(query, "admission request query");
    }

    let start = Instant::now();
    let reviewed = match parse_review(&body) {
        // A plan issued now could never run (it must be signed): fail the call, so that the API
        // server applies failurePolicy (Fail: the pod's controller retries once a key is loaded)
        // instead of admitting a restored pod whose hooks are lost. Readiness says the same.
        Ok(request) if request.is_pod_create() && state.sources.keys.is_missing() => {
            state
                .metrics
                .admission_requests
                .with_label_values(&["unavailable"])
                .inc();
            tracing::warn!(uid = %request.uid, "admission refused: the plan key is not loaded yet");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the restore-hooks plan key is not loaded yet (Secret --plan-key-secret): no plan can be signed\n",
            )
                .into_response();
        }
        Ok(request) => {
            let namespace = request.target_namespace();
            let known = !request.is_pod_create()
                || state
                    .sources
                    .index
                    .read()
                    .namespace_labels(namespace)
                    .is_some();
            let (looked_up, extra_warnings) = if known {
                (None, Vec::new())
            } else {
                match look_up_namespace(&state, namespace).await {
                    Some(labels) => (Some(labels), Vec::new()),
                    None if namespace_label_webhook => (
                        None,
                        vec![format!(
                            "restore-hooks: namespace {namespace} carries the restore-namespace label (that is why this webhook was called), but restore-hooks could not read it: this pod was admitted WITHOUT restore hooks; delete it once the namespace is visible so that its controller recreates it"
                        )],
                    ),
                    // Without a cluster (`--no-cluster`) no namespace is ever known: nothing to say.
                    None if state.sources.namespaces.is_none() => (None, Vec::new()),
                    None => (
                        None,
                        vec![format!(
                            "restore-hooks: namespace {namespace} is not known to restore-hooks yet and could not be read from the API server: its labels were not evaluated for this pod (the restore-namespace label, ClusterRestoreHook namespaceSelectors)"
                        )],
                    ),
                }
            };
            // The creator's exec right decides an annotation exec hook (§9.9), and whether the
            // pod counts for other pods' hooks when its identity alone does not vouch for it
            // (§6.20): asked only when a hook object could give the pod such hooks.
            let vouch_asks = request.is_pod_create()
                && identity_voucher(&request.user_info.username, &state.engine).is_none()
                && state.sources.index.read().has_hook_objects(namespace);
            let exec_right = if request.mentions_annotation_exec_hook() || vouch_asks {
                Some(
                    state
                        .sources
                        .exec_rights
                        .check(&request.user_info, namespace)
                        .await,
                )
            } else {
                None
            };
            let plan_id = match crate::plan_key::new_plan_id() {
                Ok(id) => id,
                Err(e) => {
                    tracing::error!(error = %e, "cannot draw a plan id");
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the system random number generator failed: no plan can be issued\n",
                    )
                        .into_response();
                }
            };
            let keys = state.sources.keys.current();
            let index = state.sources.index.read();
            let reviewed = decide_request(
                &request,
                ReviewContext {
                    index: &index,
                    namespace_labels: looked_up.as_ref(),
                    config: &state.engine,
                    issuer: Issuer {
                        keys: keys.as_deref(),
                        now: jiff::Timestamp::now(),
                        plan_id: &plan_id,
                    },
                    exec_right: exec_right.clone(),
                    extra_warnings,
                },
            );
            if reviewed.refused_annotation_hook {
                let reason = match exec_right {
                    Some(ExecRight::Unknown(_)) => "exec_check_failed",
                    _ => "creator_may_not_exec",
                };
                state
                    .metrics
                    .annotation_hooks_refused
                    .with_label_values(&[reason])
                    .inc();
            }
            reviewed
        }
        Err(BadReview(message)) => {
            state
                .metrics
                .admission_requests
                .with_label_values(&["bad_request"])
                .inc();
            tracing::warn!(
                error = %message,
                bytes = body.len(),
                "rejected a body that is not an AdmissionReview v1 request"
            );
            return bad_request(&message);
        }
    };
    let response = match reviewed.to_bytes() {
        Ok(json) => json,
        Err(err) => return encoding_failed(&err),
    };
    let elapsed = start.elapsed();
    state
        .metrics
        .admission_duration
        .observe(elapsed.as_secs_f64());
    state.outcome(reviewed.outcome).inc();
    if reviewed.injected > 0 {
        state
            .metrics
            .init_containers_injected
            .inc_by(reviewed.injected as u64);
    }
    log_decision(&reviewed, elapsed);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        response,
    )
        .into_response()
}

impl IntoResponse for BodyError {
    fn into_response(self) -> Response {
        body_rejection(self).0
    }
}

/// Maps a body that could not be read: too large (413), too slow or cut off to make room (408),
/// or broken mid-way (400).
pub(super) fn body_rejection(rejection: BodyError) -> (Response, &'static str) {
    match rejection {
        BodyError::TooSlow(deadline) => {
            tracing::warn!(
                limit = ?deadline.0,
                "cut off an admission request whose body was sent too slowly"
            );
            let message = format!(
                "{deadline}: the API server sends a whole AdmissionReview at once; a client this \
                 slow is stuck or hostile\n"
            );
            (
                (StatusCode::REQUEST_TIMEOUT, message).into_response(),
                "body_timeout",
            )
        }
        BodyError::Preempted => {
            tracing::warn!(
                "cut off an admission request whose body had been incomplete the longest when \
                 the receive buffer was full"
            );
            (
                (
                    StatusCode::REQUEST_TIMEOUT,
                    "restore-hooks: the buffer for request bodies still arriving was full, and \
                     this body had been incomplete the longest: the API server sends a whole \
                     AdmissionReview at once; a client this slow is stuck or hostile\n",
                )
                    .into_response(),
                "body_preempted",
            )
        }
        BodyError::TooLarge => (too_large_response(None), "too_large"),
        BodyError::Broken(error) => (
            bad_request(&format!("cannot read the request body: {error}")),
            "bad_request",
        ),
    }
}

fn encoding_failed(err: &serde_json::Error) -> Response {
    tracing::error!(error = %err, "cannot encode the AdmissionReview response");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "cannot encode the AdmissionReview response\n",
    )
        .into_response()
}

fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({
            "error": "bad AdmissionReview",
            "message": message,
        })),
    )
        .into_response()
}

/// One structured line per admission: info, or warn for denials.
fn log_decision(reviewed: &Reviewed, elapsed: Duration) {
    let outcome = reviewed.outcome;
    let denied = outcome == Outcome::Denied;
    if !(tracing::enabled!(tracing::Level::INFO)
        || denied && tracing::enabled!(tracing::Level::WARN))
    {
        return;
    }
    let uid = reviewed.uid.as_str();
    let object = reviewed.object.as_str();
    let operation = reviewed.operation.as_str();
    let dry_run = reviewed.dry_run;
    let duration_us = elapsed.as_micros() as u64;
    if denied {
        tracing::warn!(
            uid,
            object,
            operation,
            dry_run,
            outcome = outcome.as_label(),
            duration_us,
            // Not `message`: that key is the log line's own text in JSON logs.
            reason = reviewed.message.as_deref().unwrap_or_default(),
            "admission denied"
        );
    } else {
        tracing::info!(
            uid,
            object,
            operation,
            dry_run,
            outcome = outcome.as_label(),
            patch_ops = reviewed.patch_ops,
            warnings = reviewed.response.response.warnings.len(),
            duration_us,
            "admission reviewed"
        );
    }
}
