//! "May the identity creating this pod create pods/exec in its namespace?", asked of the API
//! server with a SubjectAccessReview and remembered briefly (docs/behaviour.md §9.9). Only asked
//! for pods that carry an annotation exec hook.
//!
//! The answer is cached for [`TTL`] per identity and namespace, as the API server's own webhook
//! authorizer caches: a restore creates hundreds of pods as one identity, and a revoked right is
//! honoured within that time. Failures are not cached; the hook is then refused with the reason
//! (a hook nobody vouched for never runs), which the admission warning and the pod's status say.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use restore_hooks_core::admission::ExecRight;
use serde::Deserialize;

/// How long an answer is reused.
pub const TTL: Duration = Duration::from_secs(30);
/// How long admission waits for the API server's answer.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Answers kept at most (identities × namespaces of one burst of restores).
const CAPACITY: usize = 4096;

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
    Api(Box<Api<SubjectAccessReview>>),
    /// Without a cluster (`--no-cluster`) nobody can be asked: every creator is unknown.
    Unavailable(&'static str),
    /// The same answer for everyone (tests of the admission path without an API server).
    Fixed(ExecRight),
}

/// The SubjectAccessReview client and its cache, shared by every admission request.
pub struct ExecRights {
    source: Source,
    cache: Mutex<HashMap<(UserInfo, String), (Instant, bool)>>,
}

impl ExecRights {
    /// Asks the API server of `client`.
    pub fn api(client: kube::Client) -> Self {
        Self::with(Source::Api(Box::new(Api::all(client))))
    }

    /// No API server to ask (`--no-cluster`): annotation exec hooks are refused, saying why.
    pub fn unavailable() -> Self {
        Self::with(Source::Unavailable(
            "the webhook runs with --no-cluster and cannot ask the API server",
        ))
    }

    /// The same answer for every creator (tests).
    pub fn fixed(right: ExecRight) -> Self {
        Self::with(Source::Fixed(right))
    }

    fn with(source: Source) -> Self {
        Self {
            source,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `user` may `create pods/exec` in `namespace`.
    pub async fn check(&self, user: &UserInfo, namespace: &str) -> ExecRight {
        let api = match &self.source {
            Source::Api(api) => api,
            Source::Unavailable(why) => return ExecRight::Unknown((*why).to_string()),
            Source::Fixed(right) => return right.clone(),
        };
        let key = (user.clone(), namespace.to_string());
        if let Some((at, allowed)) = self.lock().get(&key)
            && at.elapsed() < TTL
        {
            return if *allowed {
                ExecRight::Granted
            } else {
                ExecRight::Denied
            };
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.username.clone()).filter(|u| !u.is_empty()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()).filter(|g| !g.is_empty()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_string()),
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
        let answer = tokio::time::timeout(TIMEOUT, api.create(&PostParams::default(), &review))
            .await
            .map_err(|_| format!("no answer from the API server within {TIMEOUT:?}"))
            .and_then(|r| r.map_err(|e| e.to_string()));
        match answer {
            Ok(review) => {
                let allowed = review.status.is_some_and(|s| s.allowed);
                let mut cache = self.lock();
                if cache.len() >= CAPACITY {
                    cache.retain(|_, (at, _)| at.elapsed() < TTL);
                    if cache.len() >= CAPACITY {
                        cache.clear();
                    }
                }
                cache.insert(key, (Instant::now(), allowed));
                if allowed {
                    ExecRight::Granted
                } else {
                    ExecRight::Denied
                }
            }
            Err(e) => {
                tracing::warn!(user = %user.username, namespace, error = %e,
                    "cannot ask the API server whether a pod's creator may create pods/exec (SubjectAccessReview); its annotation exec hook is refused");
                ExecRight::Unknown(format!("SubjectAccessReview failed: {e}"))
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(UserInfo, String), (Instant, bool)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}
