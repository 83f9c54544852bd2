//! The plain-HTTP admin server: `/livez`, `/readyz` and `/metrics` (docs/operations.md).
//!
//! Separate from the HTTPS webhook port so that probes and scrapes need no certificate, and so
//! that a probe never competes with admission traffic for the TLS listener.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::catalog::SharedIndex;
use crate::metrics::Metrics;
use crate::plan_key::KeyRing;

/// Content type of the Prometheus text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What `/readyz` answers. Cloneable: every component holds the same flags.
///
/// Ready means: not shutting down, a serving certificate is loaded (when this process serves
/// the webhook), every hook cache has its initial list (when an index is tracked) and the plan
/// key is loaded (when tracked). A watch that fails after its first list does not make the
/// replica unready (its cache still serves what it had, and every replica would fail alike, which
/// would reject every restored pod under `failurePolicy: Fail`): `/readyz` reports it in its body
/// and `restore_hooks_watch_healthy` says so.
#[derive(Clone, Default)]
pub struct Readiness {
    inner: Arc<ReadinessInner>,
}

#[derive(Default)]
struct ReadinessInner {
    certificate_required: AtomicBool,
    certificate_loaded: AtomicBool,
    shutting_down: AtomicBool,
    index: RwLock<Option<Arc<SharedIndex>>>,
    keys: RwLock<Option<KeyRing>>,
}

impl Readiness {
    /// Ready, with nothing required or tracked yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// This process serves the webhook: not ready until [`Self::set_certificate_loaded`].
    pub fn require_certificate(&self) {
        self.inner
            .certificate_required
            .store(true, Ordering::Release);
    }

    /// A serving certificate is loaded. Reloads do not change readiness: a bad new pair keeps
    /// the loaded one serving.
    pub fn set_certificate_loaded(&self) {
        self.inner.certificate_loaded.store(true, Ordering::Release);
    }

    /// Not ready until every watch of `index` has listed.
    pub fn track_index(&self, index: Arc<SharedIndex>) {
        *self.inner.index.write().unwrap_or_else(|e| e.into_inner()) = Some(index);
    }

    /// Not ready until the plan key is loaded.
    pub fn track_keys(&self, keys: KeyRing) {
        *self.inner.keys.write().unwrap_or_else(|e| e.into_inner()) = Some(keys);
    }

    /// Shutdown began: report not ready from now on, so endpoints stop routing here.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
    }

    /// Whether [`Self::begin_shutdown`] was called; the webhook then closes each connection
    /// after its response, so that the API server reconnects to another replica.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::Acquire)
    }

    /// `Ok` with what is degraded (empty: nothing) when ready, else why not: the `/readyz` body.
    pub fn check(&self) -> Result<Vec<String>, String> {
        if self.is_shutting_down() {
            return Err("shutting down".to_string());
        }
        if self.inner.certificate_required.load(Ordering::Acquire)
            && !self.inner.certificate_loaded.load(Ordering::Acquire)
        {
            return Err("no serving certificate loaded from --tls-dir".to_string());
        }
        let keys = self.inner.keys.read().unwrap_or_else(|e| e.into_inner());
        if let Some(keys) = keys.as_ref()
            && !keys.is_ready()
        {
            return Err("the plan key is not loaded yet (Secret --plan-key-secret)".to_string());
        }
        let index = self.inner.index.read().unwrap_or_else(|e| e.into_inner());
        let Some(index) = index.as_ref() else {
            return Ok(Vec::new());
        };
        let unsynced: Vec<&str> = index
            .health()
            .into_iter()
            .filter(|(_, s)| !s.listed)
            .map(|(r, _)| r)
            .collect();
        if !unsynced.is_empty() {
            let failing = index.degraded();
            return Err(format!(
                "hook caches not synced yet: {}{}",
                unsynced.join(", "),
                if failing.is_empty() {
                    String::new()
                } else {
                    format!(" (failing: {})", failing.join("; "))
                }
            ));
        }
        Ok(index.degraded())
    }
}

#[derive(Clone)]
struct AdminState {
    metrics: Metrics,
    readiness: Readiness,
}

/// The admin routes, for embedding or `oneshot` tests.
pub fn router(metrics: Metrics, readiness: Readiness) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_handler))
        .with_state(AdminState { metrics, readiness })
}

async fn readyz(State(state): State<AdminState>) -> Response {
    match state.readiness.check() {
        Ok(degraded) if degraded.is_empty() => (StatusCode::OK, "ok\n").into_response(),
        Ok(degraded) => (
            StatusCode::OK,
            format!(
                "ok, degraded: watches failing, their caches serve what they had: {}\n",
                degraded.join("; ")
            ),
        )
            .into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

async fn metrics_handler(State(state): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

/// The admin port could not be opened: a startup error.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on --admin-listen {addr}: {error}")]
pub struct AdminBindError {
    /// The `--admin-listen` address.
    pub addr: SocketAddr,
    /// The error from the operating system (address in use, no permission for the port).
    pub error: std::io::Error,
}

/// A bound admin listener (bind first, so that port 0 works in tests and bind errors surface
/// at startup).
pub struct AdminServer {
    listener: TcpListener,
    router: Router,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port: see [`AdminServer::local_addr`]); nothing is
    /// served until [`AdminServer::serve`].
    pub async fn bind(
        addr: SocketAddr,
        metrics: Metrics,
        readiness: Readiness,
    ) -> Result<Self, AdminBindError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|error| AdminBindError { addr, error })?;
        Ok(Self {
            listener,
            router: router(metrics, readiness),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound TCP listener has a local address")
    }

    /// Serves until `shutdown` is cancelled. The runtime cancels it last, after the webhook
    /// and controller stopped, so `/readyz` keeps answering 503 during the drain.
    pub async fn serve(self, shutdown: CancellationToken) -> std::io::Result<()> {
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::HookIndex;

    #[test]
    fn readiness_needs_a_certificate_synced_caches_a_key_and_no_shutdown() {
        let readiness = Readiness::new();
        assert_eq!(readiness.check(), Ok(vec![]), "nothing required: ready");

        readiness.require_certificate();
        assert!(readiness.check().unwrap_err().contains("certificate"));
        readiness.set_certificate_loaded();
        assert_eq!(readiness.check(), Ok(vec![]));

        let index = SharedIndex::new(HookIndex::new());
        index.watch_started("namespaces");
        readiness.track_index(index.clone());
        assert!(
            readiness
                .check()
                .unwrap_err()
                .contains("not synced yet: namespaces")
        );
        index.watch_listed("namespaces");
        assert_eq!(
            readiness.clone().check(),
            Ok(vec![]),
            "clones share the state"
        );
        index.watch_failed("namespaces", "connection refused".into());
        let degraded = readiness.check().unwrap();
        assert!(
            degraded[0].starts_with("namespaces: connection refused"),
            "{degraded:?}"
        );

        readiness.track_keys(KeyRing::none());
        assert!(
            readiness.check().is_ok(),
            "no key by configuration is no reason to be unready"
        );
        let (_sender, waiting) = KeyRing::pending();
        readiness.track_keys(waiting);
        assert!(readiness.check().unwrap_err().contains("plan key"));

        readiness.begin_shutdown();
        assert_eq!(readiness.check(), Err("shutting down".to_string()));
    }
}
