//! AdmissionReview in, AdmissionReview out: decoding, the decision (by [`crate::admission`]) and
//! encoding. No sockets here; the server calls [`review`] with the request body.
//!
//! The request's object is never built as a JSON tree: it stays raw text until the request is
//! known to be a pod CREATE, and is then read through the borrowed pod view. A hostile body of
//! megabytes of `[0,0,0,…]` is skipped over, not turned into hundreds of megabytes of values.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::admission::{Admission, ExecRight, Issuer, Requester, evaluate};
use crate::config::EngineConfig;
use crate::hooks::pod::AdmittedPod;
use crate::hooks::resolve::PodContext;
use crate::hooks::types::Labels;
use crate::index::HookIndex;
use crate::webhook::exec_rights::UserInfo;

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
    /// The `outcome` label of the admission metrics and the log field.
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
    /// The AdmissionReview response as it goes on the wire ([`Reviewed::to_bytes`]).
    pub response: ReviewOut,
    /// What was answered, in one word.
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
    /// The plan holds the pod's annotation exec hook, refused (docs/behaviour.md §9.9).
    pub refused_annotation_hook: bool,
}

impl Reviewed {
    /// The HTTP 200 body.
    pub fn to_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        self.response.to_bytes()
    }

    /// The response as a JSON tree (tests, `inject`): what the API server parses.
    pub fn json(&self) -> Value {
        serde_json::to_value(&self.response).expect("a response always encodes")
    }
}

/// An AdmissionReview v1 response. Typed rather than built as a `serde_json::Value`: the
/// response of every admission is encoded straight from these fields, without a map per
/// object and a string per key.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewOut {
    api_version: &'static str,
    kind: &'static str,
    /// The only part that varies: `apiVersion` and `kind` are fixed.
    pub response: AdmissionResponse,
}

impl ReviewOut {
    fn new(response: AdmissionResponse) -> Self {
        Self {
            api_version: REVIEW_API_VERSION,
            kind: "AdmissionReview",
            response,
        }
    }

    /// The encoded response, in one buffer sized for it.
    pub fn to_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        let response = &self.response;
        let estimate = 160
            + response.uid.len()
            + response.patch.as_ref().map_or(0, String::len)
            + response.warnings.iter().map(|w| w.len() + 4).sum::<usize>()
            + response.status.as_ref().map_or(0, |s| s.message.len() + 64);
        let mut out = Vec::with_capacity(estimate);
        serde_json::to_writer(&mut out, self)?;
        Ok(out)
    }
}

/// `response` of an AdmissionReview v1.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The request's uid: the API server rejects a response whose uid differs.
    pub uid: String,
    /// False only for a denial; a pod the webhook does not decide is allowed unchanged.
    pub allowed: bool,
    /// The JSON Patch, base64 (Go `[]byte`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` when there is a patch (the only type the API server accepts), else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    /// Admission warnings, shown by kubectl and recorded in the audit log.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Why the request is denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<DenyStatus>,
}

/// `response.status` of a denial (a `metav1.Status`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DenyStatus {
    /// Always `Failure`.
    pub status: &'static str,
    /// The HTTP code the client sees (the API server turns anything under 400 into 400).
    pub code: u16,
    /// The `metav1.StatusReason`, e.g. `BadRequest`.
    pub reason: &'static str,
    /// Why, for the person who created the pod.
    pub message: String,
}

/// The body is not an AdmissionReview v1 request: answer HTTP 400 with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// The parts of an AdmissionReview the webhook reads, borrowed from the body where possible.
/// Everything else (`oldObject`, `options`) is skipped without being built, and the object stays
/// raw JSON text.
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
    /// Identifies this request; echoed in the response.
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    /// The kind of the object under admission.
    #[serde(borrow)]
    pub kind: KindIn<'a>,
    /// Set when the request is for a subresource (`status`, `exec`, ...); never decided.
    #[serde(borrow, default)]
    pub sub_resource: Option<Cow<'a, str>>,
    /// The object's name; empty or absent for a pod named by `generateName`.
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// The object's namespace; see [`RequestIn::target_namespace`].
    #[serde(borrow, default)]
    pub namespace: Option<Cow<'a, str>>,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(borrow)]
    pub operation: Cow<'a, str>,
    /// The object as raw JSON text, parsed only for a pod CREATE; `None` for a DELETE.
    #[serde(borrow, default)]
    pub object: Option<&'a RawValue>,
    /// The object will not be persisted; decided the same way, and logged as such.
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Who sent the request: the pod's creator (docs/behaviour.md §9.9).
    #[serde(default)]
    pub user_info: UserInfo,
}

impl RequestIn<'_> {
    /// A CREATE of a core/v1 Pod (not of a subresource): the only request the webhook decides.
    pub fn is_pod_create(&self) -> bool {
        self.operation == "CREATE"
            && self.kind.group.is_empty()
            && self.kind.kind == "Pod"
            && self.sub_resource.as_deref().unwrap_or("").is_empty()
    }

    /// Whether the pod may carry a Velero annotation exec hook, so that its creator's exec right
    /// must be asked first. A cheap look at the raw text: the API server sends objects as
    /// Go's encoder writes them, so the key appears verbatim when present; an unasked creator
    /// counts as one without the right.
    pub fn mentions_annotation_exec_hook(&self) -> bool {
        self.is_pod_create()
            && self
                .object
                .is_some_and(|o| o.get().contains(crate::hooks::annotations::POST_COMMAND))
    }

    /// The namespace the object is created in.
    pub fn target_namespace(&self) -> &str {
        self.namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
    }
}

/// What the decision needs besides the request: the index (read-locked by the caller), the
/// namespace's labels when the caller looked them up itself, the policy and the plan issuer.
pub struct ReviewContext<'a> {
    /// The hook objects and namespace labels the decision reads.
    pub index: &'a HookIndex,
    /// `Some` overrides the index (the namespace was read from the API server).
    pub namespace_labels: Option<&'a Labels>,
    /// The policy: restore labels, `--velero-hooks`, `--on-invalid`, excluded namespaces.
    pub config: &'a EngineConfig,
    /// How the plans the patch adds are signed, stamped and named.
    pub issuer: Issuer<'a>,
    /// Whether the request's user may create pods/exec in the pod's namespace, when the caller
    /// asked (see [`RequestIn::mentions_annotation_exec_hook`]); `None`: not asked.
    pub exec_right: Option<ExecRight>,
    /// Warnings the caller adds (a namespace nobody could tell about).
    pub extra_warnings: Vec<String>,
}

/// `request.kind`: the group/version/kind of the object.
#[derive(Deserialize)]
pub struct KindIn<'a> {
    /// API group; empty for the core group.
    #[serde(borrow, default)]
    pub group: Cow<'a, str>,
    /// Kind, e.g. `Pod`.
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
pub fn review(body: &[u8], ctx: ReviewContext<'_>) -> Result<Reviewed, BadReview> {
    Ok(decide_request(&parse_review(body)?, ctx))
}

/// Decides one parsed request.
pub fn decide_request(request: &RequestIn<'_>, ctx: ReviewContext<'_>) -> Reviewed {
    let namespace = request.target_namespace();
    let uid = request.uid.as_ref();
    let object = request
        .object
        .filter(|o| o.get() != "null")
        .filter(|_| request.is_pod_create());
    let mut reviewed = Reviewed {
        // Every return below sets the response; built once, for the path actually taken.
        response: ReviewOut::new(AdmissionResponse::default()),
        outcome: Outcome::Unchanged,
        injected: 0,
        uid: uid.to_string(),
        // Named from the request for other objects, from the pod view for pods (below).
        object: String::new(),
        patch_ops: 0,
        message: None,
        operation: request.operation.to_string(),
        dry_run: request.dry_run.unwrap_or(false),
        refused_annotation_hook: false,
    };
    let named = || {
        format!(
            "{namespace}/{}",
            request.name.as_deref().unwrap_or_default()
        )
    };
    let Some(raw) = object else {
        reviewed.object = named();
        reviewed.response = allowed(uid, None, &[]);
        return reviewed;
    };
    let pod = match AdmittedPod::from_json_str(raw.get()) {
        Ok(pod) => pod,
        Err(e) => {
            reviewed.object = named();
            let message = format!(
                "restore-hooks: pod {}: the object is not a valid Pod: {e}",
                reviewed.object
            );
            return deny(reviewed, message);
        }
    };
    reviewed.object = pod.display(namespace);
    let pod_ctx = PodContext {
        pod: &pod,
        namespace,
        namespace_labels: ctx
            .namespace_labels
            .or_else(|| ctx.index.namespace_labels(namespace)),
    };
    let exec_right = ctx.exec_right.unwrap_or(ExecRight::Denied);
    let requester = Requester {
        username: &request.user_info.username,
        exec_right: &exec_right,
    };
    let mut decision = evaluate(&pod_ctx, ctx.index, ctx.config, &ctx.issuer, &requester);
    if !ctx.extra_warnings.is_empty() {
        match &mut decision {
            Admission::Unchanged { warnings } | Admission::Patch { warnings, .. } => {
                warnings.extend(ctx.extra_warnings)
            }
            Admission::Deny { .. } => {}
        }
    }
    match decision {
        Admission::Unchanged { warnings } => {
            reviewed.outcome = with_warnings(Outcome::Unchanged, &warnings);
            reviewed.response = allowed(uid, None, &warnings);
        }
        Admission::Patch {
            patch,
            warnings,
            injected,
            refused_annotation_hook,
        } => match serde_json::to_vec(&patch) {
            Ok(bytes) => {
                reviewed.outcome = with_warnings(Outcome::Patched, &warnings);
                reviewed.response = allowed(uid, Some(&bytes), &warnings);
                reviewed.injected = injected.len();
                reviewed.patch_ops = patch.0.len();
                reviewed.refused_annotation_hook = refused_annotation_hook;
            }
            Err(e) => {
                let message = format!("restore-hooks: could not encode the patch: {e}");
                return deny(reviewed, message);
            }
        },
        Admission::Deny { message } => return deny(reviewed, message),
    }
    reviewed
}

/// An allowing AdmissionReview response as the API server expects it. `patch` (Go `[]byte`)
/// goes on the wire as a base64 string.
pub fn allowed(uid: &str, patch: Option<&[u8]>, warnings: &[String]) -> ReviewOut {
    ReviewOut::new(AdmissionResponse {
        uid: uid.to_string(),
        allowed: true,
        patch: patch.map(|patch| BASE64.encode(patch)),
        patch_type: patch.map(|_| "JSONPatch"),
        warnings: warnings.to_vec(),
        status: None,
    })
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
    reviewed.response = ReviewOut::new(AdmissionResponse {
        uid: reviewed.uid.clone(),
        allowed: false,
        status: Some(DenyStatus {
            status: "Failure",
            code: 400,
            reason: "BadRequest",
            message: message.clone(),
        }),
        ..AdmissionResponse::default()
    });
    reviewed.outcome = Outcome::Denied;
    reviewed.message = Some(message);
    reviewed
}
