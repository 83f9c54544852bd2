//! The plain-HTTP admin server: `/livez`, `/readyz` and `/metrics` (product.md §6).
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

use crate::catalog::HookCatalog;
use crate::metrics::Metrics;

/// Content type of the Prometheus text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What `/readyz` answers. Cloneable: every component holds the same flags.
///
/// Ready means: not shutting down, a serving certificate is loaded (when this process serves
/// the webhook) and every hook cache has its initial list (when a catalog is tracked).
#[derive(Clone, Default)]
pub struct Readiness {
    inner: Arc<ReadinessInner>,
}

#[derive(Default)]
struct ReadinessInner {
    certificate_required: AtomicBool,
    certificate_loaded: AtomicBool,
    shutting_down: AtomicBool,
    catalog: RwLock<Option<Arc<dyn HookCatalog>>>,
}

impl Readiness {
    pub fn new() -> Self {
        Self::default()
    }

    /// This process serves the webhook: not ready until [`Self::set_certificate_loaded`].
    pub fn require_certificate(&self) {
        self.inner
            .certificate_required
            .store(true, Ordering::Release);
    }

    pub fn set_certificate_loaded(&self) {
        self.inner.certificate_loaded.store(true, Ordering::Release);
    }

    /// Not ready until `catalog.is_synced()`.
    pub fn track_catalog(&self, catalog: Arc<dyn HookCatalog>) {
        *self
            .inner
            .catalog
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(catalog);
    }

    /// Shutdown began: report not ready from now on, so endpoints stop routing here.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::Acquire)
    }

    /// `Ok` when ready, else why not (the `/readyz` body).
    pub fn check(&self) -> Result<(), &'static str> {
        if self.is_shutting_down() {
            return Err("shutting down");
        }
        if self.inner.certificate_required.load(Ordering::Acquire)
            && !self.inner.certificate_loaded.load(Ordering::Acquire)
        {
            return Err("no serving certificate loaded from --tls-dir");
        }
        let catalog = self.inner.catalog.read().unwrap_or_else(|e| e.into_inner());
        if let Some(catalog) = catalog.as_ref()
            && !catalog.is_synced()
        {
            return Err("hook caches (Restore, RestoreHook, Namespace watches) not synced yet");
        }
        Ok(())
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
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
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

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on --admin-listen {addr}: {error}")]
pub struct AdminBindError {
    pub addr: SocketAddr,
    pub error: std::io::Error,
}

/// A bound admin listener (bind first, so that port 0 works in tests and bind errors surface
/// at startup).
pub struct AdminServer {
    listener: TcpListener,
    router: Router,
}

impl AdminServer {
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
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::catalog::StaticCatalog;
    use crate::hooks::types::{Labels, RestoreHook, VeleroRestore};

    /// A catalog whose sync state the test flips.
    #[derive(Default)]
    struct Flag(AtomicBool);

    impl HookCatalog for Flag {
        fn namespace_labels(&self, _: &str) -> Option<Labels> {
            None
        }
        fn velero_restore(&self, _: &str, _: &str) -> Option<Arc<VeleroRestore>> {
            None
        }
        fn restore_hooks(&self, _: &str) -> Vec<Arc<RestoreHook>> {
            Vec::new()
        }
        fn is_synced(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn readiness_needs_a_certificate_synced_caches_and_no_shutdown() {
        let readiness = Readiness::new();
        assert_eq!(readiness.check(), Ok(()), "nothing required: ready");

        readiness.require_certificate();
        assert!(readiness.check().unwrap_err().contains("certificate"));
        readiness.set_certificate_loaded();
        assert_eq!(readiness.check(), Ok(()));

        let catalog = Arc::new(Flag::default());
        readiness.track_catalog(catalog.clone());
        assert!(readiness.check().unwrap_err().contains("not synced"));
        catalog.0.store(true, Ordering::SeqCst);
        assert_eq!(readiness.clone().check(), Ok(()), "clones share the state");

        readiness.begin_shutdown();
        assert_eq!(readiness.check(), Err("shutting down"));
        readiness.track_catalog(Arc::new(StaticCatalog::default()));
        assert_eq!(readiness.check(), Err("shutting down"), "shutdown is final");
    }
}
