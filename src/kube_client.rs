//! The Kubernetes client every component shares, with two additions: every request the API server
//! refuses with 403 Forbidden is logged at WARN, naming the verb and the resource the chart's RBAC
//! lacks, and counted in `restore_hooks_api_forbidden_total{verb,resource}`; every request it
//! throttles (429) is counted in `restore_hooks_api_throttled_total{verb,resource}`.
//!
//! A kube-apiserver that has just started serves requests before its authorizer is ready, and
//! refuses them with 403 for a few seconds. So a 403 within [`STARTING_WINDOW`] of the API server
//! being unreachable (a request that got no answer at all) is taken for that: logged as such, counted in
//! `restore_hooks_api_forbidden_while_starting_total` instead, and retried by the callers that
//! wait out a busy API server ([`crate::backoff::is_transient`]).
//!
//! Refusals are caught here, under the client, rather than where each call handles its errors:
//! some callers retry quietly (status writes, Events, retention deletes, the first Lease attempt)
//! and a missing rule there would otherwise show nowhere. One place sees them all. Throttling is
//! counted, not logged: under a busy API server it is routine, each caller backs off
//! (docs/behaviour.md §6.19), and a rate is what an operator alerts on.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode, Uri};
use kube::client::retry::RetryPolicy;
use prometheus::IntCounterVec;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;
use tower::{Layer, Service};

use crate::metrics::Metrics;

/// A client for the cluster of `config`, reporting refusals into `metrics.api_forbidden` and
/// throttling into `metrics.api_throttled`. Must be called within a tokio runtime.
pub fn client(mut config: kube::Config, metrics: &Metrics) -> kube::Result<kube::Client> {
    // kube retries 429, 503 and 504 itself, in a layer under any added here: the 429s it retried
    // would never be seen. Its retry goes on top of the report instead, so that each response
    // passes it; and with a shorter reach than kube's default (5 ms doubling to 1000 s, 15 times):
    // a request still refused after about 40 s goes back to its caller, which knows whether to
    // wait longer (a hook's result) or not (an Event) (docs/behaviour.md §6.19). The retry clones
    // its inner service: the buffer makes the boxed stack cloneable.
    config.default_retry = false;
    let retry = RetryPolicy::new(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(10),
        10,
        true,
    )
    .expect("valid retry parameters");
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&ReportRefusals {
            forbidden: metrics.api_forbidden.clone(),
            starting: metrics.api_forbidden_while_starting.clone(),
            throttled: metrics.api_throttled.clone(),
        })
        .with_layer(&BufferLayer::<Request<kube::client::Body>>::new(1024))
        .with_layer(&RetryLayer::new(retry))
        .build())
}

/// The in-cluster ServiceAccount or `KUBECONFIG`, as `kube::Client::try_default` infers it.
pub async fn infer(metrics: &Metrics) -> anyhow::Result<kube::Client> {
    let config = kube::Config::infer().await?;
    Ok(client(config, metrics)?)
}

/// How long after the API server could not be reached a 403 is taken for one that is still
/// starting: kube-apiserver's authorizers (RBAC's informers, a webhook authorizer's cache) are
/// ready seconds after it listens; a minute covers a loaded control plane.
pub const STARTING_WINDOW: Duration = Duration::from_secs(60);

/// When this process started, the origin of [`UNREACHABLE_AT`].
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds after [`epoch`] when a request last got no answer at all; [`NEVER`] before the
/// first. A controller that starts with broken RBAC must see its 403s for what they are at once,
/// so the process's own start does not count.
static UNREACHABLE_AT: AtomicU64 = AtomicU64::new(NEVER);

const NEVER: u64 = u64::MAX;

fn millis_since_epoch() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Whether a 403 now is probably an API server that is still starting rather than missing RBAC.
pub fn api_may_be_starting() -> bool {
    within_starting_window(millis_since_epoch(), UNREACHABLE_AT.load(Ordering::Relaxed))
}

fn within_starting_window(now_ms: u64, unreachable_ms: u64) -> bool {
    unreachable_ms != NEVER
        && now_ms.saturating_sub(unreachable_ms) <= STARTING_WINDOW.as_millis() as u64
}

/// The layer that wraps the client's HTTP stack.
#[derive(Clone)]
pub struct ReportRefusals {
    forbidden: IntCounterVec,
    starting: IntCounterVec,
    throttled: IntCounterVec,
}

impl<S> Layer<S> for ReportRefusals {
    type Service = Reported<S>;

    fn layer(&self, inner: S) -> Self::Service {
        epoch();
        Reported {
            inner,
            forbidden: self.forbidden.clone(),
            starting: self.starting.clone(),
            throttled: self.throttled.clone(),
        }
    }
}

#[doc(hidden)]
#[derive(Clone)]
pub struct Reported<S> {
    inner: S,
    forbidden: IntCounterVec,
    starting: IntCounterVec,
    throttled: IntCounterVec,
}

impl<S, Req, Res> Service<Request<Req>> for Reported<S>
where
    S: Service<Request<Req>, Response = Response<Res>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        // Kept to name a refusal; read only then (every API call passes here).
        let (method, uri) = (request.method().clone(), request.uri().clone());
        let forbidden = self.forbidden.clone();
        let starting = self.starting.clone();
        let throttled = self.throttled.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = match response.await {
                Ok(response) => response,
                Err(e) => {
                    UNREACHABLE_AT.store(millis_since_epoch(), Ordering::Relaxed);
                    return Err(e);
                }
            };
            let status = response.status();
            if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::FORBIDDEN {
                return Ok(response);
            }
            let target = ApiRequest::of(&method, &uri);
            if status == StatusCode::TOO_MANY_REQUESTS {
                throttled
                    .with_label_values(&[target.verb, &target.resource])
                    .inc();
            } else if api_may_be_starting() {
                starting
                    .with_label_values(&[target.verb, &target.resource])
                    .inc();
                tracing::info!(
                    verb = target.verb,
                    resource = %target.resource,
                    namespace = target.namespace.as_deref().unwrap_or(""),
                    name = target.name.as_deref().unwrap_or(""),
                    "the API server refused a request with 403 Forbidden within a minute of being \
                     unreachable: it is probably still starting and \
                     its authorizer not ready; retried. If it lasts, this ServiceAccount lacks that \
                     verb on that resource (the chart's RBAC, docs/install.md)"
                );
            } else {
                forbidden
                    .with_label_values(&[target.verb, &target.resource])
                    .inc();
                tracing::warn!(
                    verb = target.verb,
                    resource = %target.resource,
                    namespace = target.namespace.as_deref().unwrap_or(""),
                    name = target.name.as_deref().unwrap_or(""),
                    "the API server refused a request with 403 Forbidden: this ServiceAccount lacks \
                     that verb on that resource (the chart's RBAC, docs/install.md)"
                );
            }
            Ok(response)
        })
    }
}

/// What a request asks for, in RBAC terms: verb, `resource[/subresource]` (with its API group),
/// and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiRequest {
    /// The RBAC verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`.
    pub verb: &'static str,
    /// `pods`, `pods/exec`, `leases.coordination.k8s.io`, `restoreruns.restore-hooks.dev/status`.
    pub resource: String,
    /// The namespace of a namespaced request; `None` for cluster-wide ones.
    pub namespace: Option<String>,
    /// The object's name; `None` for a request on the collection (list, watch, create).
    pub name: Option<String>,
}

impl ApiRequest {
    /// Reads a Kubernetes REST path (`/api/v1/...`, `/apis/<group>/<version>/...`).
    pub fn of(method: &Method, uri: &Uri) -> Self {
        let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => ("", &segments[..0]),
        };
        // `namespaces/<ns>/<resource>...` is a namespaced resource; `namespaces[/<name>]` alone
        // is the namespaces resource itself.
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
            _ => (None, rest),
        };
        let resource = rest.first().copied().unwrap_or("");
        let name = rest.get(1).map(|s| s.to_string());
        let subresource = rest.get(2).copied();
        let query = uri.query().unwrap_or("");
        let watching = query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        let verb = match (method, &name, subresource) {
            // exec, attach and portforward are WebSocket upgrades (GET), authorized as `create`
            // too since Kubernetes 1.35: the rule the chart needs is `create`.
            (_, Some(_), Some("exec" | "attach" | "portforward")) => "create",
            (&Method::GET, _, _) if watching => "watch",
            (&Method::GET, Some(_), _) => "get",
            (&Method::GET, None, _) => "list",
            (&Method::POST, _, _) => "create",
            (&Method::PUT, _, _) => "update",
            (&Method::PATCH, _, _) => "patch",
            (&Method::DELETE, Some(_), _) => "delete",
            (&Method::DELETE, None, _) => "deletecollection",
            _ => "unknown",
        };
        let mut resource = resource.to_string();
        if !group.is_empty() {
            resource = format!("{resource}.{group}");
        }
        if let Some(sub) = subresource {
            resource = format!("{resource}/{sub}");
        }
        ApiRequest {
            verb,
            resource,
            namespace,
            name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 403 is taken for a starting API server only within the window after it was last
    /// unreachable.
    #[test]
    fn a_403_counts_as_starting_only_right_after_the_api_server_was_away() {
        let window = STARTING_WINDOW.as_millis() as u64;
        let rows = [
            ("never unreachable, at the process's start", 5, NEVER, false),
            ("right after it was", 5_000, 0, true),
            (
                "just after a lost connection",
                window + 5_000,
                window + 1_000,
                true,
            ),
            ("a minute after it", 3 * window, window, false),
        ];
        for (what, now, unreachable, want) in rows {
            assert_eq!(within_starting_window(now, unreachable), want, "{what}");
        }
    }

    /// Method, URI; verb, resource, namespace, name.
    type Row = (
        Method,
        &'static str,
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
    );

    #[test]
    fn requests_are_named_as_rbac_rules_name_them() {
        let rows: [Row; 12] = [
            (
                Method::GET,
                "/api/v1/pods?labelSelector=a%3Db&watch=true&resourceVersion=5",
                "watch",
                "pods",
                None,
                None,
            ),
            (
                Method::GET,
                "/api/v1/pods?labelSelector=a",
                "list",
                "pods",
                None,
                None,
            ),
            (
                Method::GET,
                "/api/v1/namespaces/shop/pods/db-0",
                "get",
                "pods",
                Some("shop"),
                Some("db-0"),
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/shop/pods/db-0",
                "patch",
                "pods",
                Some("shop"),
                Some("db-0"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/shop/pods/db-0/exec?command=true&container=db",
                "create",
                "pods/exec",
                Some("shop"),
                Some("db-0"),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/shop/events",
                "create",
                "events",
                Some("shop"),
                None,
            ),
            (
                Method::GET,
                "/api/v1/namespaces/shop",
                "get",
                "namespaces",
                None,
                Some("shop"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces?watch=1",
                "watch",
                "namespaces",
                None,
                None,
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/rh/leases/rh-controller",
                "update",
                "leases.coordination.k8s.io",
                Some("rh"),
                Some("rh-controller"),
            ),
            (
                Method::PATCH,
                "/apis/restore-hooks.dev/v1alpha1/restoreruns/nightly/status",
                "patch",
                "restoreruns.restore-hooks.dev/status",
                None,
                Some("nightly"),
            ),
            (
                Method::DELETE,
                "/apis/restore-hooks.dev/v1alpha1/restoreruns/nightly",
                "delete",
                "restoreruns.restore-hooks.dev",
                None,
                Some("nightly"),
            ),
            (
                Method::POST,
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                "create",
                "subjectaccessreviews.authorization.k8s.io",
                None,
                None,
            ),
        ];
        for (method, uri, verb, resource, namespace, name) in rows {
            let got = ApiRequest::of(&method, &uri.parse().unwrap());
            assert_eq!(
                got,
                ApiRequest {
                    verb,
                    resource: resource.to_string(),
                    namespace: namespace.map(str::to_string),
                    name: name.map(str::to_string),
                },
                "{method} {uri}"
            );
        }
    }
}
