//! AdmissionReview in, AdmissionReview out: decoding, the decision (by the hook engine) and
//! encoding. No sockets here; the server calls [`review`] with the request body.

use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::catalog::HookCatalog;
use crate::config::EngineConfig;

/// What the webhook answered, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed without a patch (out of scope, not a pod CREATE, or nothing to do).
    Unchanged,
    /// Allowed with a patch.
    Patched,
    /// Allowed (with or without a patch) carrying admission warnings.
    Warned,
    /// Denied: invalid hook definitions under `--on-invalid deny`.
    Denied,
}

impl Outcome {
    pub fn as_label(self) -> &'static str {
        match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Patched => "patched",
            Outcome::Warned => "warned",
            Outcome::Denied => "denied",
        }
    }
}

/// A decided review, ready to serialise as the HTTP 200 body.
pub struct Reviewed {
    pub response: AdmissionReview<DynamicObject>,
    pub outcome: Outcome,
    /// Init containers the patch adds.
    pub injected: usize,
}

/// The body is not an AdmissionReview v1 request: answer HTTP 400 with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

pub fn review(
    _body: &[u8],
    _catalog: &dyn HookCatalog,
    _config: &EngineConfig,
) -> Result<Reviewed, BadReview> {
    Err(BadReview("not implemented yet".into()))
}
