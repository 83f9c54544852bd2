//! AdmissionReview in, AdmissionReview out: decoding, the decision (by [`crate::inject`]) and
//! encoding. No sockets here; the server calls [`review`] with the request body.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::{Value, json};

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
    pub response: Value,
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
    /// `request.operation` (`CREATE`, `UPDATE`, ...), for the log line.
    pub operation: String,
    /// `request.dryRun`.
    pub dry_run: bool,
}

/// The body is not an AdmissionReview v1 request: answer HTTP 400 with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// The parts of an AdmissionReview the webhook reads, borrowed from the body where possible.
/// Everything else (`userInfo`, `oldObject`, `options`) is skipped without being built, and the
/// object stays raw JSON: the patch must be computed against the object exactly as the API
/// server will apply it, and a typed round trip (ObjectMeta) would add or drop fields the patch
/// paths depend on.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<'a> {
    #[serde(borrow)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    request: Option<RequestIn<'a>>,
}

/// `request` of an AdmissionReview v1.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestIn<'a> {
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: KindIn<'a>,
    #[serde(borrow, default)]
    pub sub_resource: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub operation: Cow<'a, str>,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// `request.kind`: the group/version/kind of the object.
#[derive(Deserialize)]
pub struct KindIn<'a> {
    #[serde(borrow, default)]
    pub group: Cow<'a, str>,
    #[serde(borrow, default)]
    pub kind: Cow<'a, str>,
}

/// Decodes and checks an AdmissionReview v1 request body. Shared with the load harness's
/// no-op handler, so that its floor pays the same decoding cost.
pub fn parse_review(body: &[u8]) -> Result<RequestIn<'_>, BadReview> {
    let review: ReviewIn<'_> = serde_json::from_slice(body).map_err(|e| {
        BadReview(format!(
            "request body is not an AdmissionReview: {e}; the webhook expects an \
             admission.k8s.io/v1 AdmissionReview (admissionReviewVersions: [v1])"
        ))
    })?;
    if review.api_version != REVIEW_API_VERSION || review.kind != "AdmissionReview" {
        return Err(BadReview(format!(
            "expected apiVersion {REVIEW_API_VERSION} kind AdmissionReview, got apiVersion {:?} \
             kind {:?}; set admissionReviewVersions: [v1] in the webhook configuration",
            review.api_version, review.kind
        )));
    }
    review.request.ok_or_else(|| {
        BadReview(
            "AdmissionReview has no `request`: the API server sends the pod to decide on in \
             `request.object` (a body carrying only a `response` is an answer, not a question)"
                .to_string(),
        )
    })
}

/// Decides one AdmissionReview request body.
pub fn review(
    body: &[u8],
    catalog: &dyn HookCatalog,
    config: &EngineConfig,
) -> Result<Reviewed, BadReview> {
    Ok(decide_request(&parse_review(body)?, catalog, config))
}

fn decide_request(
    request: &RequestIn<'_>,
    catalog: &dyn HookCatalog,
    config: &EngineConfig,
) -> Reviewed {
    let object = request.object.as_ref().filter(|o| !o.is_null());
    let meta = |field: &str| {
        object
            .and_then(|o| o.get("metadata"))
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let namespace = request
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .or_else(|| meta("namespace"))
        .unwrap_or("default");
    let object_name = meta("name")
        .map(str::to_string)
        .or_else(|| meta("generateName").map(|g| format!("{g}*")))
        .unwrap_or_else(|| request.name.as_deref().unwrap_or_default().to_string());
    let uid = request.uid.as_ref();
    let mut reviewed = Reviewed {
        // Every return below sets the response; built once, for the path actually taken.
        response: Value::Null,
        outcome: Outcome::Unchanged,
        injected: 0,
        uid: uid.to_string(),
        object: format!("{namespace}/{object_name}"),
        patch_ops: 0,
        message: None,
        operation: request.operation.to_string(),
        dry_run: request.dry_run.unwrap_or(false),
    };
    let is_pod_create = request.operation == "CREATE"
        && request.kind.group.is_empty()
        && request.kind.kind == "Pod"
        && request.sub_resource.as_deref().unwrap_or("").is_empty();
    let Some(pod_json) = object.filter(|_| is_pod_create) else {
        reviewed.response = allowed(uid, None, &[]);
        return reviewed;
    };
    let decision = match evaluate(pod_json, namespace, catalog, config) {
        Ok(d) => d,
        Err(e) => {
            let message = format!("restore-hooks: pod {}: {e}", reviewed.object);
            return deny(reviewed, message);
        }
    };
    match decision {
        Decision::Unchanged { warnings } => {
            reviewed.outcome = with_warnings(Outcome::Unchanged, &warnings);
            reviewed.response = allowed(uid, None, &warnings);
        }
        Decision::Patch {
            patch,
            warnings,
            injected,
        } => match serde_json::to_vec(&patch) {
            Ok(bytes) => {
                reviewed.outcome = with_warnings(Outcome::Patched, &warnings);
                reviewed.response = allowed(uid, Some(&bytes), &warnings);
                reviewed.injected = injected.len();
                reviewed.patch_ops = patch.0.len();
            }
            Err(e) => {
                let message = format!("restore-hooks: could not encode the patch: {e}");
                return deny(reviewed, message);
            }
        },
        Decision::Deny { message } => return deny(reviewed, message),
    }
    reviewed
}

/// An allowing AdmissionReview response as the API server expects it. `patch` (Go `[]byte`)
/// goes on the wire as a base64 string.
pub fn allowed(uid: &str, patch: Option<&[u8]>, warnings: &[String]) -> Value {
    let mut response = json!({"uid": uid, "allowed": true});
    if let Some(patch) = patch {
        response["patch"] = Value::String(BASE64.encode(patch));
        response["patchType"] = json!("JSONPatch");
    }
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    wire(response)
}

fn wire(response: Value) -> Value {
    json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response})
}

fn with_warnings(outcome: Outcome, warnings: &[String]) -> Outcome {
    if warnings.is_empty() {
        outcome
    } else {
        Outcome::Warned
    }
}

/// A denial. The API server turns it into the client's error, `admission webhook "…" denied
/// the request: <message>`, with this code (it forces anything under 400 to 400).
fn deny(mut reviewed: Reviewed, message: String) -> Reviewed {
    reviewed.response = wire(json!({
        "uid": reviewed.uid,
        "allowed": false,
        "status": {"status": "Failure", "code": 400, "reason": "BadRequest", "message": message},
    }));
    reviewed.outcome = Outcome::Denied;
    reviewed.message = Some(message);
    reviewed
}
