//! AdmissionReview in, AdmissionReview out: decoding, the decision (by [`crate::inject`]) and
//! encoding. No sockets here; the server calls [`review`] with the request body.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};

use crate::catalog::HookCatalog;
use crate::config::EngineConfig;
use crate::inject::{Decision, evaluate};

/// What the webhook answered, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed without a patch (out of scope, not a pod CREATE, or nothing to do).
    Unchanged,
    /// Allowed with a patch.
    Patched,
    /// Allowed (with or without a patch) carrying admission warnings.
    Warned,
    /// Denied: invalid hook definitions under `--on-invalid deny`, or an undecodable pod.
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
    /// The AdmissionReview response exactly as it goes on the wire.
    pub response: serde_json::Value,
    pub outcome: Outcome,
    /// Init containers the patch adds.
    pub injected: usize,
    /// Request uid (echoed in the response).
    pub uid: String,
    /// `namespace/name` of the object (or `namespace/generateName*`).
    pub object: String,
    /// Number of JSON Patch operations in the response.
    pub patch_ops: usize,
    /// The denial message, when denied.
    pub message: Option<String>,
}

/// The body is not an AdmissionReview v1 request: answer HTTP 400 with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// Decides one AdmissionReview request body.
pub fn review(
    body: &[u8],
    catalog: &dyn HookCatalog,
    config: &EngineConfig,
) -> Result<Reviewed, BadReview> {
    let not_a_review = |e: serde_json::Error| {
        BadReview(format!(
            "request body is not an AdmissionReview: {e}; the webhook expects an \
             admission.k8s.io/v1 AdmissionReview (admissionReviewVersions: [v1])"
        ))
    };
    // The patch must be computed against the object exactly as the API server will apply it,
    // so the object is kept as raw JSON: a typed round trip (DynamicObject's ObjectMeta) would
    // add or drop fields the patch paths depend on.
    let mut body: serde_json::Value = serde_json::from_slice(body).map_err(not_a_review)?;
    let object = body
        .pointer_mut("/request/object")
        .map(serde_json::Value::take)
        .filter(|o| !o.is_null());
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(body).map_err(not_a_review)?;
    if review.types.api_version != REVIEW_API_VERSION || review.types.kind != "AdmissionReview" {
        return Err(BadReview(format!(
            "expected apiVersion {REVIEW_API_VERSION} kind AdmissionReview, got apiVersion {:?} \
             kind {:?}; set admissionReviewVersions: [v1] in the webhook configuration",
            review.types.api_version, review.types.kind
        )));
    }
    let request: AdmissionRequest<DynamicObject> = review.try_into().map_err(|_| {
        BadReview(
            "AdmissionReview has no `request`: the API server sends the pod to decide on \
                 in `request.object` (a body carrying only a `response` is an answer, not a \
                 question)"
                .to_string(),
        )
    })?;
    Ok(decide_request(&request, object.as_ref(), catalog, config))
}

fn decide_request(
    request: &AdmissionRequest<DynamicObject>,
    object: Option<&serde_json::Value>,
    catalog: &dyn HookCatalog,
    config: &EngineConfig,
) -> Reviewed {
    let meta = |field: &str| {
        object
            .and_then(|o| o.get("metadata"))
            .and_then(|m| m.get(field))
            .and_then(serde_json::Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let namespace = request
        .namespace
        .clone()
        .or_else(|| meta("namespace"))
        .unwrap_or_else(|| "default".to_string());
    let object_name = meta("name")
        .or_else(|| meta("generateName").map(|g| format!("{g}*")))
        .unwrap_or_else(|| request.name.clone());
    let mut reviewed = Reviewed {
        response: wire(AdmissionResponse::from(request)),
        outcome: Outcome::Unchanged,
        injected: 0,
        uid: request.uid.clone(),
        object: format!("{namespace}/{object_name}"),
        patch_ops: 0,
        message: None,
    };
    let is_pod_create = request.operation == Operation::Create
        && request.kind.group.is_empty()
        && request.kind.kind == "Pod"
        && request.sub_resource.as_deref().unwrap_or("").is_empty();
    let Some(pod_json) = object.filter(|_| is_pod_create) else {
        return reviewed;
    };
    let response = AdmissionResponse::from(request);
    let decision = match evaluate(pod_json, &namespace, catalog, config) {
        Ok(d) => d,
        Err(e) => {
            let message = format!("restore-hooks: pod {}: {e}", reviewed.object);
            return deny(reviewed, response, message);
        }
    };
    match decision {
        Decision::Unchanged { warnings } => {
            let outcome = with_warnings(Outcome::Unchanged, &warnings);
            reviewed.response = wire(attach_warnings(response, warnings));
            reviewed.outcome = outcome;
        }
        Decision::Patch {
            patch,
            warnings,
            injected,
        } => {
            let ops = patch.0.len();
            match response.with_patch(patch) {
                Ok(patched) => {
                    reviewed.outcome = with_warnings(Outcome::Patched, &warnings);
                    reviewed.response = wire(attach_warnings(patched, warnings));
                    reviewed.injected = injected.len();
                    reviewed.patch_ops = ops;
                }
                Err(e) => {
                    let message = format!("restore-hooks: could not encode the patch: {e}");
                    return deny(reviewed, AdmissionResponse::from(request), message);
                }
            }
        }
        Decision::Deny { message } => return deny(reviewed, response, message),
    }
    reviewed
}

/// The AdmissionReview JSON the API server expects. kube-core serialises `patch` (Go `[]byte`)
/// as an array of numbers; Kubernetes documents and emits it as a base64 string, so that is what
/// we send.
fn wire(mut response: AdmissionResponse) -> serde_json::Value {
    let patch = response.patch.take();
    let mut value = serde_json::to_value(response.into_review())
        .expect("an AdmissionReview serialises to JSON");
    if let Some(bytes) = patch {
        value["response"]["patch"] = serde_json::Value::String(BASE64.encode(bytes));
    }
    value
}

fn with_warnings(outcome: Outcome, warnings: &[String]) -> Outcome {
    if warnings.is_empty() {
        outcome
    } else {
        Outcome::Warned
    }
}

fn attach_warnings(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

fn deny(mut reviewed: Reviewed, response: AdmissionResponse, message: String) -> Reviewed {
    reviewed.response = wire(response.deny(message.clone()));
    reviewed.outcome = Outcome::Denied;
    reviewed.message = Some(message);
    reviewed
}
