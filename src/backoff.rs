//! Backing off from a busy or failing API server (docs/behaviour.md §6.19).
//!
//! The API server is shared with everything else a restore recreates, and it throttles (429 from
//! API Priority and Fairness, `--max-*-requests-inflight`) exactly when a large restore makes it
//! busy. Two rules follow:
//!
//! - Retries wait exponentially longer, with jitter, so that thousands of pod workers that failed
//!   together do not come back together; and never sooner than the `retryAfterSeconds` the API
//!   server asked for ([`ApiBackoff`]).
//! - A watch whose list keeps failing backs off too ([`watch_backoff`]). kube-runtime's watcher
//!   yields `Event::Init` (an `Ok`) before each list attempt, and its `default_backoff()` resets
//!   on every `Ok`: a list that always fails (Velero's CRD not installed, RBAC missing, 429) would
//!   be retried about once a second forever.

use std::pin::Pin;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, DefaultBackoff, Event};

/// Exponential backoff with full jitter on top (each delay is its step times 1–2), for requests
/// that must eventually succeed: a worker's status write, reading its pod.
pub struct ApiBackoff {
    builder: ExponentialBuilder,
    steps: ExponentialBackoff,
}

/// 200 ms doubling to 10 s: a request that must eventually succeed (a pod worker's, the record
/// of what ran).
impl Default for ApiBackoff {
    fn default() -> Self {
        Self::new(Duration::from_millis(200), Duration::from_secs(10))
    }
}

impl ApiBackoff {
    /// Steps from `min` doubling to `max` (the jitter adds up to as much again).
    pub fn new(min: Duration, max: Duration) -> Self {
        let builder = ExponentialBuilder::default()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            steps: builder.build(),
            builder,
        }
    }

    /// How long to wait after `error`: the next step, or the API server's `retryAfterSeconds`
    /// when that is longer.
    pub fn after(&mut self, error: Option<&kube::Error>) -> Duration {
        let step = self.steps.next().unwrap_or(Duration::from_secs(10));
        step.max(retry_after(error))
    }

    /// After a success: the next failure starts from the first step again.
    pub fn reset(&mut self) {
        self.steps = self.builder.build();
    }
}

/// Whether `error` says "not now" rather than "no": throttled (429), the server failing or
/// unavailable (5xx), no answer at all (connection, TLS, timeout), or a 403 from an API server
/// that is probably still starting (`kube_client::api_may_be_starting`). Such a request is worth
/// repeating for longer than one that was refused.
pub fn is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) if status.code == 403 => crate::kube_client::api_may_be_starting(),
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// What a 429 (or 503) said about when to come back.
fn retry_after(error: Option<&kube::Error>) -> Duration {
    match error {
        Some(kube::Error::Api(status)) => status.details.as_ref().map_or(Duration::ZERO, |d| {
            Duration::from_secs(u64::from(d.retry_after_seconds))
        }),
        _ => Duration::ZERO,
    }
}

/// A watcher stream with client-go's backoff (0.8 s doubling to 30 s, jittered, forgotten after
/// 2 minutes without errors) that grows while lists keep failing: it resets on events that
/// carry objects or complete a list, never on the `Init` that precedes each attempt.
pub fn watch_backoff<K: Send + 'static>(
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static {
    backed_off(stream, DefaultBackoff::default())
}

type Boxed<K> = Pin<Box<dyn Stream<Item = watcher::Result<Event<K>>> + Send>>;

fn backed_off<K: Send + 'static>(
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
    backoff: impl kube::runtime::utils::Backoff + 'static,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static {
    let state: (Boxed<K>, _, Option<Duration>) = (stream.boxed(), backoff, None);
    futures::stream::unfold(state, |(mut stream, mut backoff, pause)| async move {
        // The error is handed on at once; the pause is before the next attempt.
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
        let item = stream.next().await?;
        let pause = match &item {
            Err(_) => backoff.next(),
            Ok(Event::Init) => None,
            Ok(_) => {
                backoff.reset();
                None
            }
        };
        Some((item, (stream, backoff, pause)))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use kube::runtime::utils::StreamBackoff;

    use super::*;

    /// A backoff that writes down how it is used (1 ms steps: the tests do not wait).
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<&'static str>>>);

    impl Iterator for Recorder {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            self.0.lock().unwrap().push("next");
            Some(Duration::from_millis(1))
        }
    }

    impl kube::runtime::utils::Backoff for Recorder {
        fn reset(&mut self) {
            self.0.lock().unwrap().push("reset");
        }
    }

    fn not_found() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(
            kube::core::Status::failure(
                "the server could not find the requested resource",
                "NotFound",
            )
            .with_code(404),
        )))
    }

    /// What kube-runtime's watcher yields while a list fails twice and then succeeds, and the
    /// watch later breaks.
    fn events() -> Vec<watcher::Result<Event<()>>> {
        vec![
            Ok(Event::Init),
            Err(not_found()),
            Ok(Event::Init),
            Err(not_found()),
            Ok(Event::Init),
            Ok(Event::InitApply(())),
            Ok(Event::InitDone),
            Err(watcher::Error::NoResourceVersion),
        ]
    }

    #[tokio::test]
    async fn a_list_that_keeps_failing_keeps_backing_off_until_a_list_completes() {
        let recorder = Recorder::default();
        let seen: Vec<_> = backed_off(futures::stream::iter(events()), recorder.clone())
            .collect()
            .await;
        assert_eq!(seen.len(), 8, "every event is handed on");
        assert_eq!(
            *recorder.0.lock().unwrap(),
            ["next", "next", "reset", "reset", "next"],
            "two growing steps while the list fails; reset by the listed object and the list's end"
        );
    }

    #[tokio::test]
    async fn kube_runtime_s_own_backoff_is_reset_by_every_list_attempt() {
        // Why `watch_backoff` exists: the `Init` before each attempt resets the backoff, so a
        // list that keeps failing is retried at the first step forever.
        let recorder = Recorder::default();
        let _: Vec<_> = StreamBackoff::new(futures::stream::iter(events()), recorder.clone())
            .collect()
            .await;
        let calls = recorder.0.lock().unwrap().clone();
        assert_eq!(&calls[..4], ["reset", "next", "reset", "next"], "{calls:?}");
    }

    #[test]
    fn api_backoff_grows_with_jitter_and_honours_retry_after() {
        let mut b = ApiBackoff::new(Duration::from_millis(200), Duration::from_secs(10));
        let steps: Vec<Duration> = (0..8).map(|_| b.after(None)).collect();
        assert!(steps[0] >= Duration::from_millis(200) && steps[0] <= Duration::from_millis(400));
        assert!(steps[7] >= Duration::from_secs(10) && steps[7] <= Duration::from_secs(20));
        let mut status =
            kube::core::Status::failure("Too many requests", "TooManyRequests").with_code(429);
        status.details =
            Some(serde_json::from_value(serde_json::json!({"retryAfterSeconds": 5})).unwrap());
        b.reset();
        let throttled = kube::Error::Api(Box::new(status));
        assert!(b.after(Some(&throttled)) >= Duration::from_secs(5));
        // Jitter: 20 workers failing together do not all come back at the same instant.
        let spread: std::collections::BTreeSet<Duration> = (0..20)
            .map(|_| {
                ApiBackoff::new(Duration::from_millis(200), Duration::from_secs(10)).after(None)
            })
            .collect();
        assert!(spread.len() > 10, "{spread:?}");
    }
}
