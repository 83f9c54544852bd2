//! Mutating admission: calls MutatingWebhookConfigurations over HTTPS the way the apiserver
//! does (AdmissionReview v1, JSON Patch responses, failurePolicy, timeouts, reinvocation).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceType;
use crate::selector::{LabelSelector, labels_of};
use crate::store::meta_str;
use crate::{Sim, SimEventKind, util};

const WEBHOOK_CONFIGS: &str = "mutatingwebhookconfigurations.admissionregistration.k8s.io";

#[derive(Debug, Clone)]
struct Hook {
    name: String,
    url: Option<String>,
    ca: Option<Vec<u8>>,
    timeout: Duration,
    fail_closed: bool,
    reinvoke: bool,
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn rule_matches(rule: &Value, rt: &ResourceType, version: &str, namespaced: bool) -> bool {
    let any_of = |key: &str, want: &str| {
        str_list(rule.get(key))
            .iter()
            .any(|v| v == "*" || v == want)
    };
    let resources = str_list(rule.get("resources"));
    let res_ok = resources
        .iter()
        .any(|r| r == "*" || r == "*/*" || *r == rt.plural);
    let scope_ok = match rule.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => namespaced,
        Some("Cluster") => !namespaced,
        _ => true,
    };
    any_of("operations", "CREATE")
        && any_of("apiGroups", &rt.group)
        && any_of("apiVersions", version)
        && res_ok
        && scope_ok
}

fn matching_hooks(sim: &Sim, rt: &ResourceType, version: &str, obj: &Value) -> Vec<Hook> {
    let (configs, _) = sim.store.list(WEBHOOK_CONFIGS, None);
    let ns_labels = if rt.namespaced {
        sim.store
            .get("namespaces", "", meta_str(obj, "namespace"))
            .map(|n| labels_of(&n))
            .unwrap_or_default()
    } else {
        Default::default()
    };
    let obj_labels = labels_of(obj);
    let mut out = Vec::new();
    // Configurations are called in name order (the store is sorted by name), webhooks in order.
    for cfg in configs {
        for wh in cfg
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let rules_ok = wh.get("rules").and_then(Value::as_array).is_some_and(|rs| {
                rs.iter()
                    .any(|r| rule_matches(r, rt, version, rt.namespaced))
            });
            if !rules_ok {
                continue;
            }
            let sel_ok = |key: &str, labels| match LabelSelector::from_label_selector(wh.get(key)) {
                Ok(s) => s.matches(labels),
                Err(_) => false,
            };
            if !sel_ok("objectSelector", &obj_labels) {
                continue;
            }
            if rt.namespaced && !sel_ok("namespaceSelector", &ns_labels) {
                continue;
            }
            let cc = wh.get("clientConfig");
            out.push(Hook {
                name: wh
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                url: cc
                    .and_then(|c| c.get("url"))
                    .and_then(Value::as_str)
                    .map(String::from),
                ca: cc
                    .and_then(|c| c.get("caBundle"))
                    .and_then(Value::as_str)
                    .and_then(|s| B64.decode(s).ok()),
                timeout: Duration::from_secs(
                    wh.get("timeoutSeconds")
                        .and_then(Value::as_u64)
                        .unwrap_or(10),
                ),
                fail_closed: wh.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
                reinvoke: wh.get("reinvocationPolicy").and_then(Value::as_str) == Some("IfNeeded"),
            });
        }
    }
    out
}

/// Who requests when nobody is impersonated.
pub(crate) const ADMIN: &str = "kube-sim:admin";

/// Runs mutating admission for a CREATE by `user`; returns the warnings to send back.
pub(crate) async fn admit(
    sim: &Sim,
    rt: &ResourceType,
    version: &str,
    obj: &mut Value,
    dry_run: bool,
    user: &str,
) -> ApiResult<Vec<String>> {
    // The apiserver never sends admission configuration objects through webhooks.
    if rt.group == "admissionregistration.k8s.io" {
        return Ok(Vec::new());
    }
    let hooks = matching_hooks(sim, rt, version, obj);
    let mut warnings = Vec::new();
    if hooks.is_empty() {
        return Ok(warnings);
    }
    let request = Request {
        rt,
        version,
        dry_run,
        user,
    };
    let mut last_mutator: Option<usize> = None;
    for (i, h) in hooks.iter().enumerate() {
        if call_one(sim, &request, h, obj, &mut warnings).await? {
            last_mutator = Some(i);
        }
    }
    // reinvocationPolicy IfNeeded: a webhook invoked before a later webhook changed the object
    // is called once more.
    if let Some(j) = last_mutator {
        for h in hooks.iter().take(j).filter(|h| h.reinvoke) {
            call_one(sim, &request, h, obj, &mut warnings).await?;
        }
    }
    Ok(warnings)
}

fn display_name(obj: &Value) -> String {
    let n = meta_str(obj, "name");
    if n.is_empty() {
        format!("{}*", meta_str(obj, "generateName"))
    } else {
        n.to_string()
    }
}

/// What every webhook call of one CREATE shares.
struct Request<'a> {
    rt: &'a ResourceType,
    version: &'a str,
    dry_run: bool,
    user: &'a str,
}

/// Calls one webhook and applies its patch; `Ok(true)` when the object changed.
async fn call_one(
    sim: &Sim,
    request: &Request<'_>,
    h: &Hook,
    obj: &mut Value,
    warnings: &mut Vec<String>,
) -> ApiResult<bool> {
    let Request {
        rt,
        version,
        dry_run,
        user,
    } = *request;
    let ns = meta_str(obj, "namespace").to_string();
    let pod = display_name(obj);
    let uid = util::new_uid();
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": rt.group, "version": version, "kind": rt.kind},
            "resource": {"group": rt.group, "version": version, "resource": rt.plural},
            "requestKind": {"group": rt.group, "version": version, "kind": rt.kind},
            "requestResource": {"group": rt.group, "version": version, "resource": rt.plural},
            "name": meta_str(obj, "name"),
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": if user == ADMIN {
                json!({"username": ADMIN, "groups": ["system:masters", "system:authenticated"]})
            } else {
                json!({"username": user, "groups": ["system:authenticated"]})
            },
            "object": obj.clone(),
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        }
    });
    let outcome = match &h.url {
        None => Err(format!(
            "failed to call webhook: kube-sim supports clientConfig.url only (webhook {:?})",
            h.name
        )),
        Some(url) => {
            let url = with_timeout_param(url, h.timeout);
            match tokio::time::timeout(h.timeout, post(&url, h.ca.as_deref(), review.to_string()))
                .await
            {
                Err(_) => Err(format!(
                    "failed to call webhook: Post \"{url}\": context deadline exceeded"
                )),
                Ok(Err(e)) => Err(format!("failed to call webhook: Post \"{url}\": {e}")),
                Ok(Ok(body)) => verify(&uid, &body)
                    .map_err(|e| format!("received invalid webhook response: {e}")),
            }
        }
    };
    let resp = match outcome {
        Ok(r) => r,
        Err(reason) => {
            let msg = format!("failed calling webhook \"{}\": {reason}", h.name);
            if h.fail_closed {
                sim.emit(
                    SimEventKind::Admission,
                    &ns,
                    &pod,
                    format!("{msg} (failurePolicy Fail: rejected)"),
                );
                return Err(ApiError::internal(msg));
            }
            sim.emit(
                SimEventKind::Admission,
                &ns,
                &pod,
                format!("{msg} (failurePolicy Ignore: continuing)"),
            );
            return Ok(false);
        }
    };
    warnings.extend(str_list(resp.get("warnings")));
    if resp.get("allowed").and_then(Value::as_bool) != Some(true) {
        let err = denial(&h.name, resp.get("status"));
        sim.emit(SimEventKind::Admission, &ns, &pod, err.message.clone());
        return Err(err);
    }
    let Some(patch_b64) = resp.get("patch").and_then(Value::as_str) else {
        sim.emit(
            SimEventKind::Admission,
            &ns,
            &pod,
            format!("webhook \"{}\" allowed without a patch", h.name),
        );
        return Ok(false);
    };
    let patch: json_patch::Patch = B64
        .decode(patch_b64)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            ApiError::internal(format!(
                "decoding JSON Patch from webhook \"{}\": {e}",
                h.name
            ))
        })?;
    let before = obj.clone();
    json_patch::patch(obj, &patch).map_err(|e| {
        ApiError::internal(format!(
            "applying JSON Patch from webhook \"{}\": {e}",
            h.name
        ))
    })?;
    let changed = *obj != before;
    sim.emit_event(crate::SimEvent {
        kind: SimEventKind::Admission,
        namespace: ns.clone(),
        name: pod.clone(),
        message: format!(
            "webhook \"{}\" patched ({} ops): {}",
            h.name,
            patch.0.len(),
            serde_json::to_string(&patch).unwrap_or_default()
        ),
        patch: serde_json::to_value(&patch).ok(),
    });
    Ok(changed)
}

/// The apiserver's `ToStatusErr`: the webhook's status, forced to a >= 400 Failure, with the
/// message prefixed by who denied it.
fn denial(name: &str, status: Option<&Value>) -> ApiError {
    let denied_by = format!("admission webhook \"{name}\" denied the request");
    let code = status
        .and_then(|s| s.get("code"))
        .and_then(Value::as_u64)
        .filter(|c| *c >= 400)
        .unwrap_or(400) as u16;
    let msg = status
        .and_then(|s| s.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let reason = status
        .and_then(|s| s.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let message = if !msg.is_empty() {
        format!("{denied_by}: {msg}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    let mut e = ApiError::new(code, reason, message);
    if let Some(d) = status.and_then(|s| s.get("details")) {
        e.details = Some(d.clone());
    }
    e
}

fn with_timeout_param(url: &str, t: Duration) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}timeout={}s", t.as_secs())
}

/// Checks the response the way the apiserver's `VerifyAdmissionResponse` does.
fn verify(uid: &str, body: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("decoding response: {e}"))?;
    let av = v
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
    if av != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {av}, Kind={kind}"
        ));
    }
    let resp = v.get("response").ok_or("webhook response was absent")?;
    let got = resp.get("uid").and_then(Value::as_str).unwrap_or_default();
    if got != uid {
        return Err(format!("expected response.uid=\"{uid}\", got \"{got}\""));
    }
    let patch = resp
        .get("patch")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let ptype = resp
        .get("patchType")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    match (patch, ptype) {
        (Some(_), Some("JSONPatch")) | (None, None) => {}
        (Some(_), Some(t)) => return Err(format!("expected patchType JSONPatch, got {t}")),
        (Some(_), None) => {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        (None, Some(_)) => {
            return Err("webhook returned response.patchType but not response.patch".into());
        }
    }
    Ok(resp.clone())
}

/// One HTTPS POST, verifying the server against `caBundle` only (no system roots, like a
/// webhook configuration with a caBundle).
async fn post(url: &str, ca: Option<&[u8]>, body: String) -> Result<Vec<u8>, String> {
    let uri: axum::http::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("webhook URL must use the https scheme".into());
    }
    let host = uri.host().ok_or("URL without host")?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.unwrap_or_default()) {
        let cert = cert.map_err(|e| format!("invalid caBundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("invalid caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err("tls: failed to verify certificate: no caBundle".into());
    }
    let mut cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let server_name = ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
    let tls = connector
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let req = hyper::Request::post(path)
        .header(
            "host",
            uri.authority().map(|a| a.as_str()).unwrap_or_default(),
        )
        .header("content-type", "application/json")
        .header("accept", "application/json, */*")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "the server responded with status {status}: {}",
            String::from_utf8_lossy(&bytes)
        ));
    }
    Ok(bytes.to_vec())
}
