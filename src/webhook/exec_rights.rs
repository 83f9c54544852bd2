//! "May the identity creating this pod create pods/exec in its namespace?", asked of the API
//! server with a SubjectAccessReview and remembered briefly (docs/behaviour.md §9.9). Only asked
//! for pods that carry an annotation exec hook.
//!
//! The answer is cached for [`TTL`] per identity and namespace, as the API server's own webhook
//! authorizer caches: a restore creates hundreds of pods as one identity, and a revoked right is
//! honoured within that time. Failures are not cached; the hook is then refused with the reason
//! (a hook nobody vouched for never runs), which the admission warning and the pod's status say.
//!
//! Anyone who can reach the webhook's port can send a review with any `userInfo`, and each new
//! identity is a cache miss. So that such a caller gains nothing (docs/security.md, "The
//! webhook's port"):
//!
//! - **No amplification.** Misses are paced ([`Budget`]: on average `per_second` reviews a
//!   second, `burst` at once after a quiet spell, `in_flight` awaiting the API server at once).
//!   A miss that would wait longer than `max_wait` for its turn is not asked: the hook is
//!   refused, saying so, like any failed check, and `..._subject_access_reviews_total{result=
//!   "throttled"}` counts it. Refusing rather than queueing for long: a queue would let a flood
//!   hold every legitimate review to the webhook's timeout, and a refused annotation hook is
//!   visible and recoverable (recreate the pod), while a timed-out admission is a refused pod.
//!   Concurrent misses for the same identity and namespace (a restore creating a StatefulSet's
//!   pods at once) share one review, so a restore spends one turn per identity and namespace.
//! - **No eviction.** An answer is never dropped while it is fresh: when the cache is full of
//!   fresh answers, a new one is used but not kept. And the pace makes that impossible with the
//!   defaults: an answer lives [`TTL`] from its arrival, which follows its turn by at most
//!   `max_wait` + the request timeout, so at most `burst + per_second × (TTL + max_wait +
//!   timeout)` answers are fresh at once ([`Budget::most_fresh`]), and that is below
//!   `capacity` (a compile-time assertion). A flood of forged identities therefore never pushes
//!   out what the API server's own reviews are using, and needs no admission policy (a
//!   segmented LRU would choose *which* fresh answer to drop; here none is dropped).
//!
//! What a flood still costs: while the pace is spent, a real identity whose answer is not cached
//! is refused too (docs/security.md, "What is not protected").

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use prometheus::IntCounter;
use restore_hooks_core::admission::ExecRight;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::metrics::Metrics;

/// How long an answer is reused.
pub const TTL: Duration = Duration::from_secs(30);
/// How long admission waits for the API server's answer.
const TIMEOUT: Duration = Duration::from_secs(2);

/// What the webhook may ask of the API server for pod creators it has no fresh answer for.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Reviews started per second, on average.
    pub per_second: u32,
    /// Reviews started at once after a quiet spell.
    pub burst: u32,
    /// Reviews awaiting the API server's answer at once.
    pub in_flight: usize,
    /// The longest a miss waits for its turn; beyond, it is refused at once.
    pub max_wait: Duration,
    /// Answers kept at most.
    pub capacity: usize,
}

impl Budget {
    /// 50 a second absorb a restore's identities × namespaces (pods of one identity and
    /// namespace share one review per [`TTL`]), and are a trifle for the API server, which
    /// answers a SubjectAccessReview from its RBAC cache.
    pub const DEFAULT: Budget = Budget {
        per_second: 50,
        burst: 100,
        in_flight: 16,
        max_wait: Duration::from_millis(500),
        capacity: 4096,
    };

    /// The most answers that can be fresh at once: those whose turns fell within TTL, the
    /// request timeout and `max_wait` (rounded up to whole seconds).
    pub const fn most_fresh(&self) -> usize {
        let window_s = TTL.as_secs() + TIMEOUT.as_secs() + self.max_wait.as_secs() + 1;
        self.burst as usize + self.per_second as usize * window_s as usize
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

// Nothing fresh is ever dropped for lack of room with the defaults (module docs).
const _: () = assert!(Budget::DEFAULT.most_fresh() <= Budget::DEFAULT.capacity);

/// `request.userInfo` of an AdmissionReview: who sent the CREATE.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub struct UserInfo {
    /// The user or ServiceAccount (`system:serviceaccount:<namespace>:<name>`).
    #[serde(default)]
    pub username: String,
    /// The identity's uid, when the authenticator sets one.
    #[serde(default)]
    pub uid: String,
    /// The groups it belongs to: RBAC bindings to groups count too.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra attributes from the authenticator (a token's scopes, a node's name), passed on as
    /// they are: an authorizer may decide on them.
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Where answers come from.
#[derive(Clone)]
enum Source {
    /// SubjectAccessReviews through the API server.
    Api(Arc<Asker>),
    /// Without a cluster (`--no-cluster`) nobody can be asked: every creator is unknown.
    Unavailable(&'static str),
    /// The same answer for everyone (tests of the admission path without an API server).
    Fixed(ExecRight),
}

/// The SubjectAccessReview client and its cache, shared by every admission request.
pub struct ExecRights {
    source: Source,
}

type Key = (UserInfo, String);
/// `Ok(allowed)`, or why nobody could tell.
type Answer = Result<bool, String>;

/// Asks the API server, within the [`Budget`].
struct Asker {
    api: Api<SubjectAccessReview>,
    budget: Budget,
    pace: Mutex<Pace>,
    epoch: Instant,
    in_flight: Arc<Semaphore>,
    state: Mutex<State>,
    /// `allowed`, `denied`, `error`, `throttled`.
    counts: Option<[IntCounter; 4]>,
}

struct State {
    cache: Cache,
    /// Reviews under way, joined by every miss for the same key meanwhile.
    asking: HashMap<Key, Shared<BoxFuture<'static, Answer>>>,
}

impl ExecRights {
    /// Asks the API server of `client`, within [`Budget::DEFAULT`].
    pub fn api(client: kube::Client, metrics: &Metrics) -> Self {
        Self::api_within(client, Budget::DEFAULT, Some(metrics))
    }

    /// Asks the API server of `client` within `budget` (tests use small ones).
    pub fn api_within(client: kube::Client, budget: Budget, metrics: Option<&Metrics>) -> Self {
        let counts = metrics.map(|m| {
            ["allowed", "denied", "error", "throttled"]
                .map(|result| m.subject_access_reviews.with_label_values(&[result]))
        });
        Self {
            source: Source::Api(Arc::new(Asker {
                api: Api::all(client),
                budget,
                pace: Mutex::new(Pace::new(budget.per_second, budget.burst)),
                epoch: Instant::now(),
                in_flight: Arc::new(Semaphore::new(budget.in_flight.max(1))),
                state: Mutex::new(State {
                    cache: Cache::new(budget.capacity),
                    asking: HashMap::new(),
                }),
                counts,
            })),
        }
    }

    /// No API server to ask (`--no-cluster`): annotation exec hooks are refused, saying why.
    pub fn unavailable() -> Self {
        Self {
            source: Source::Unavailable(
                "the webhook runs with --no-cluster and cannot ask the API server",
            ),
        }
    }

    /// The same answer for every creator (tests).
    pub fn fixed(right: ExecRight) -> Self {
        Self {
            source: Source::Fixed(right),
        }
    }

    /// Whether `user` may `create pods/exec` in `namespace`.
    pub async fn check(&self, user: &UserInfo, namespace: &str) -> ExecRight {
        let asker = match &self.source {
            Source::Api(asker) => asker,
            Source::Unavailable(why) => return ExecRight::Unknown((*why).to_string()),
            Source::Fixed(right) => return right.clone(),
        };
        let key = (user.clone(), namespace.to_string());
        let answer = {
            let mut state = asker.lock();
            if let Some(allowed) = state.cache.get(&key, Instant::now()) {
                return right(Ok(allowed));
            }
            match state.asking.get(&key) {
                Some(asking) => asking.clone(),
                None => {
                    let asking = asker.clone().ask(key.clone());
                    state.asking.insert(key, asking.clone());
                    asking
                }
            }
        };
        right(answer.await)
    }
}

impl std::fmt::Debug for ExecRights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::Api(asker) => f
                .debug_struct("ExecRights")
                .field("budget", &asker.budget)
                .finish_non_exhaustive(),
            Source::Unavailable(why) => {
                f.debug_tuple("ExecRights::Unavailable").field(why).finish()
            }
            Source::Fixed(right) => f.debug_tuple("ExecRights::Fixed").field(right).finish(),
        }
    }
}

fn right(answer: Answer) -> ExecRight {
    match answer {
        Ok(true) => ExecRight::Granted,
        Ok(false) => ExecRight::Denied,
        Err(why) => ExecRight::Unknown(why),
    }
}

impl Asker {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, index: usize) {
        if let Some(counts) = &self.counts {
            counts[index].inc();
        }
    }

    /// One review for `key`, in a task of its own: it finishes (and is cached) even when the
    /// admission request that started it is gone, and every miss for `key` meanwhile joins it.
    fn ask(self: Arc<Self>, key: Key) -> Shared<BoxFuture<'static, Answer>> {
        let task = tokio::spawn(async move {
            let answer = self.ask_api(&key).await;
            let mut state = self.lock();
            state.asking.remove(&key);
            if let Ok(allowed) = answer {
                state.cache.insert(key, Instant::now(), allowed);
            }
            answer
        });
        task.map(|joined| {
            joined.unwrap_or_else(|e| Err(format!("the SubjectAccessReview task failed: {e}")))
        })
        .boxed()
        .shared()
    }

    async fn ask_api(&self, (user, namespace): &Key) -> Answer {
        let budget = &self.budget;
        let turn = self
            .pace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(self.epoch.elapsed(), budget.max_wait);
        let Some(wait) = turn else {
            return self.throttled(
                user,
                namespace,
                format!("over {} a second", budget.per_second),
            );
        };
        tokio::time::sleep(wait).await;
        let Ok(Ok(_slot)) = tokio::time::timeout(
            budget.max_wait.saturating_sub(wait),
            self.in_flight.acquire(),
        )
        .await
        else {
            return self.throttled(
                user,
                namespace,
                format!("{} awaiting the API server already", budget.in_flight),
            );
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.username.clone()).filter(|u| !u.is_empty()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()).filter(|g| !g.is_empty()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.clone()),
                    verb: Some("create".to_string()),
                    group: Some(String::new()),
                    resource: Some("pods".to_string()),
                    subresource: Some("exec".to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer =
            tokio::time::timeout(TIMEOUT, self.api.create(&PostParams::default(), &review))
                .await
                .map_err(|_| format!("no answer from the API server within {TIMEOUT:?}"))
                .and_then(|r| r.map_err(|e| e.to_string()));
        match answer {
            Ok(review) => {
                let allowed = review.status.is_some_and(|s| s.allowed);
                self.count(if allowed { 0 } else { 1 });
                Ok(allowed)
            }
            Err(e) => {
                self.count(2);
                tracing::warn!(user = %user.username, namespace, error = %e,
                    "cannot ask the API server whether a pod's creator may create pods/exec (SubjectAccessReview); its annotation exec hook is refused");
                Err(format!("SubjectAccessReview failed: {e}"))
            }
        }
    }

    fn throttled(&self, user: &UserInfo, namespace: &str, why: String) -> Answer {
        self.count(3);
        // Debug, not warn: a flood of forged identities would otherwise flood the log too. The
        // refusal is on the pod, in the admission warning and in the metric.
        tracing::debug!(user = %user.username, namespace, why, "SubjectAccessReview not sent: over the webhook's budget");
        Err(format!(
            "not asked: the webhook's SubjectAccessReview budget is spent ({why}): many \
             creators were checked at once, possibly forged ones from a client that is not the \
             API server; recreate the pod"
        ))
    }
}

/// The pace of reviews: a token bucket of `burst` tokens refilled at `per_second`, kept as the
/// one instant at which the bucket would be full again (the generic cell rate algorithm), so
/// that taking a turn is a comparison and an addition. Times are durations since an epoch.
#[derive(Debug)]
struct Pace {
    interval: Duration,
    /// How far ahead of now `full_at` may run: `burst - 1` intervals.
    tolerance: Duration,
    full_at: Duration,
}

impl Pace {
    fn new(per_second: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / per_second.max(1);
        Self {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            full_at: Duration::ZERO,
        }
    }

    /// A turn at `now`: how long to wait for it, or `None` (and nothing taken) when that would be
    /// longer than `max_wait`.
    fn take(&mut self, now: Duration, max_wait: Duration) -> Option<Duration> {
        let full_at = self.full_at.max(now);
        let wait = full_at.saturating_sub(self.tolerance).saturating_sub(now);
        if wait > max_wait {
            return None;
        }
        self.full_at = full_at + self.interval;
        Some(wait)
    }
}

/// Answers by identity and namespace; a fresh answer is never dropped to make room.
struct Cache {
    answers: HashMap<Key, (Instant, bool)>,
    capacity: usize,
}

impl Cache {
    fn new(capacity: usize) -> Self {
        Self {
            answers: HashMap::new(),
            capacity,
        }
    }

    fn get(&self, key: &Key, now: Instant) -> Option<bool> {
        let (at, allowed) = self.answers.get(key)?;
        (now.saturating_duration_since(*at) < TTL).then_some(*allowed)
    }

    /// Keeps the answer unless the cache is full of fresh ones. True if kept.
    fn insert(&mut self, key: Key, at: Instant, allowed: bool) -> bool {
        if self.answers.len() >= self.capacity && !self.answers.contains_key(&key) {
            self.answers
                .retain(|_, (then, _)| at.saturating_duration_since(*then) < TTL);
            if self.answers.len() >= self.capacity {
                tracing::debug!(
                    capacity = self.capacity,
                    "the SubjectAccessReview cache is full of fresh answers: not keeping a new one"
                );
                return false;
            }
        }
        self.answers.insert(key, (at, allowed));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const MS: Duration = Duration::from_millis(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// (now in ms, expected wait in ms or None for refused), for 10 a second with a burst of 3
    /// and a wait of at most 150 ms.
    #[test]
    fn the_pace_allows_a_burst_then_one_turn_per_interval() {
        let mut pace = Pace::new(10, 3);
        let cases: &[(u64, Option<u64>)] = &[
            // A burst of three at once, then a fourth waits one interval, a fifth would wait
            // two: more than 150 ms, refused without taking anything.
            (0, Some(0)),
            (0, Some(0)),
            (0, Some(0)),
            (0, Some(100)),
            (0, None),
            (50, Some(150)),
            (50, None),
            // A quiet spell refills the bucket, but never beyond the burst.
            (10_000, Some(0)),
            (10_000, Some(0)),
            (10_000, Some(0)),
            (10_000, Some(100)),
            (10_000, None),
        ];
        for (i, (now, expected)) in cases.iter().enumerate() {
            let got = pace.take(ms(*now), 150 * MS);
            assert_eq!(got, expected.map(ms), "turn {i} at {now} ms");
        }
    }

    /// Over any window, the pace grants at most `burst + per_second × window`: what
    /// `Budget::most_fresh` relies on. Checked by trying a turn every millisecond for 5 s.
    #[test]
    fn the_pace_bounds_turns_in_any_window() {
        let mut pace = Pace::new(20, 5);
        let mut granted = Vec::new();
        for now in 0..5000u64 {
            if let Some(wait) = pace.take(ms(now), 200 * MS) {
                granted.push(ms(now) + wait);
            }
        }
        for window_s in 1..=4u64 {
            let most = granted
                .iter()
                .map(|start| {
                    granted
                        .iter()
                        .filter(|t| **t >= *start && **t < *start + ms(window_s * 1000))
                        .count()
                })
                .max()
                .unwrap();
            assert!(
                most <= 5 + 20 * window_s as usize,
                "{most} turns in {window_s} s"
            );
        }
    }

    fn key(user: &str) -> Key {
        (
            UserInfo {
                username: user.into(),
                ..UserInfo::default()
            },
            "shop".into(),
        )
    }

    /// A full cache keeps every fresh answer: a new one is kept only once an old one expired.
    #[test]
    fn a_fresh_answer_is_never_dropped_to_make_room() {
        let t0 = Instant::now();
        let mut cache = Cache::new(2);
        assert!(cache.insert(key("velero"), t0, true));
        assert!(cache.insert(key("forged-1"), t0 + MS, false));
        // Full of fresh answers: the new one is not kept, the others stay.
        assert!(!cache.insert(key("forged-2"), t0 + 2 * MS, false));
        assert_eq!(cache.get(&key("velero"), t0 + 3 * MS), Some(true));
        assert_eq!(cache.get(&key("forged-2"), t0 + 3 * MS), None);
        // Refreshing a key that is there needs no room.
        assert!(cache.insert(key("velero"), t0 + 4 * MS, true));
        // Once the first ones expired, a new answer takes their place.
        let later = t0 + TTL + 2 * MS;
        assert_eq!(cache.get(&key("forged-1"), later), None);
        assert!(cache.insert(key("forged-3"), later, false));
        assert_eq!(cache.get(&key("velero"), later), Some(true));
        assert_eq!(cache.get(&key("forged-3"), later), Some(false));
    }

    /// A fake API server answering SubjectAccessReviews (allowed for `alice`), counting them.
    fn counting_api(sent: Arc<AtomicUsize>, delay: Duration) -> kube::Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let sent = sent.clone();
            async move {
                use http_body_util::BodyExt as _;
                let body = request.into_body().collect().await?.to_bytes();
                let review: serde_json::Value = serde_json::from_slice(&body)?;
                sent.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                let allowed = review["spec"]["user"] == "alice";
                let answer = serde_json::json!({
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": review["spec"],
                    "status": {"allowed": allowed},
                });
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(http::Response::new(
                    http_body_util::Full::new(axum::body::Bytes::from(answer.to_string())),
                ))
            }
        });
        kube::Client::new(service, "default")
    }

    /// Pods of one identity created at once (a StatefulSet's) share one review; past the pace,
    /// misses are refused without a review, saying why; the answers already given stay cached.
    #[tokio::test]
    async fn concurrent_misses_share_one_review_and_the_pace_bounds_the_rest() {
        let started = Instant::now();
        let sent = Arc::new(AtomicUsize::new(0));
        let metrics = Metrics::new();
        let budget = Budget {
            per_second: 1,
            burst: 2,
            in_flight: 4,
            max_wait: Duration::ZERO,
            capacity: 64,
        };
        let rights = Arc::new(ExecRights::api_within(
            counting_api(sent.clone(), 50 * MS),
            budget,
            Some(&metrics),
        ));
        let alice = key("alice").0;
        let checks: Vec<_> = (0..20)
            .map(|_| {
                let (rights, alice) = (rights.clone(), alice.clone());
                tokio::spawn(async move { rights.check(&alice, "shop").await })
            })
            .collect();
        for check in checks {
            assert_eq!(check.await.unwrap(), ExecRight::Granted);
        }
        assert_eq!(sent.load(Ordering::SeqCst), 1, "one review for 20 pods");

        // Twenty forged identities, one after the other: beyond the burst and the pace, none
        // is asked (bounded by the time it took, so that a slow machine only loosens it).
        let mut refused = 0;
        for i in 0..20 {
            match rights.check(&key(&format!("mallory-{i}")).0, "shop").await {
                ExecRight::Denied => {}
                ExecRight::Unknown(why) if why.contains("SubjectAccessReview budget is spent") => {
                    refused += 1
                }
                other => panic!("mallory-{i}: {other:?}"),
            }
        }
        let asked = sent.load(Ordering::SeqCst) - 1;
        let most = 2 + started.elapsed().as_secs() as usize + 1;
        assert!(
            asked <= most,
            "{asked} reviews sent, at most {most} allowed"
        );
        assert_eq!(asked + refused, 20);
        assert!(refused > 0);
        // Alice's answer is still there: no review for her.
        assert_eq!(rights.check(&alice, "shop").await, ExecRight::Granted);
        assert_eq!(sent.load(Ordering::SeqCst), asked + 1);
        let count = |r: &str| metrics.subject_access_reviews.with_label_values(&[r]).get();
        assert_eq!(count("allowed"), 1);
        assert_eq!(count("denied") as usize, asked);
        assert_eq!(count("throttled") as usize, refused);
        assert_eq!(count("error"), 0);
    }
}
