//! HTTP routing and the REST verbs over the generic store.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};

use crate::deletion::on_deleted;
use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceType;
use crate::request::{Target, json_response, object_json, present, selectors};
use crate::store::{Written, meta_str};
use crate::table::Shape;
use crate::util::{self, Query};
use crate::{Sim, SimEventKind, admission, discovery, exec, table, watch};

pub(crate) fn router(sim: Arc<Sim>) -> Router {
    Router::new()
        .route("/version", get(discovery::version))
        .route("/api", get(discovery::api_versions))
        .route("/apis", get(discovery::api_groups))
        .route("/openapi/v3", get(discovery::openapi_root))
        .route("/openapi/v3/{*gv}", get(discovery::openapi_group_version))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}/exec",
            any(exec::handler),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            axum::routing::post(subject_access_review),
        )
        .fallback(handle)
        .with_state(sim)
}

/// The requester: `Impersonate-User` (kubectl --as) or the simulator's admin.
fn requester(headers: &HeaderMap) -> String {
    headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .filter(|u| !u.is_empty())
        .unwrap_or(admission::ADMIN)
        .to_string()
}

/// `POST .../subjectaccessreviews`: allowed, except `create pods/exec` for the users
/// [`crate::SimHandle::deny_exec`] named.
async fn subject_access_review(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let review: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return ApiError::bad_request(format!("reading body: {e}")).into_response(),
    };
    let spec = &review["spec"];
    let attrs = &spec["resourceAttributes"];
    let exec = attrs["resource"] == "pods" && attrs["subresource"] == "exec";
    let user = spec["user"].as_str().unwrap_or_default();
    let denied = exec
        && sim
            .no_exec
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(user);
    let mut out = review.clone();
    out["status"] = json!({"allowed": !denied});
    json_response(StatusCode::CREATED, out.to_string())
}

pub(crate) fn new_namespace(name: &str, uid: String) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": util::now_rfc3339(),
            // The apiserver stamps this label so namespaceSelectors can select by name.
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

enum Route {
    Discovery(Response),
    Resource(Target),
}

fn route(sim: &Sim, path: &str) -> ApiResult<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", "v1"] => return Ok(Route::Discovery(discovery::resource_list(sim, "", "v1")?)),
        ["apis", g] => return Ok(Route::Discovery(discovery::api_group(sim, g)?)),
        ["apis", g, v] => return Ok(Route::Discovery(discovery::resource_list(sim, g, v)?)),
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route()),
    };
    // `namespaces/{ns}/status` is the namespace's own subresource, not a resource named "status".
    let (ns, plural, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") => {
            (Some(ns.to_string()), *plural, tail)
        }
        [plural, tail @ ..] => (None, *plural, tail),
        [] => return Err(ApiError::no_route()),
    };
    let rt = sim
        .registry
        .lookup(group, version, plural)
        .ok_or_else(ApiError::no_route)?;
    if ns.is_some() && !rt.namespaced {
        return Err(ApiError::no_route());
    }
    let (name, sub) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, sub] => (Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(ApiError::no_route()),
    };
    if let Some(s) = &sub
        && !(s == "status" && rt.status)
        && !(s == "ephemeralcontainers" && rt.id() == "pods")
    {
        return Err(ApiError::no_route());
    }
    if name.is_some() && rt.namespaced && ns.is_none() {
        return Err(ApiError::no_route());
    }
    Ok(Route::Resource(Target {
        rt,
        version: version.to_string(),
        ns,
        name,
        sub,
    }))
}

fn verb_of(method: &Method, t: &Target, q: &Query) -> ApiResult<&'static str> {
    Ok(match (method.as_str(), t.name.is_some()) {
        ("GET", false) if q.flag("watch") => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ));
        }
    })
}

async fn handle(State(sim): State<Arc<Sim>>, req: Request) -> Response {
    match handle_inner(sim, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn handle_inner(sim: Arc<Sim>, req: Request) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    let q = Query::parse(parts.uri.query());
    let target = match route(&sim, parts.uri.path())? {
        Route::Discovery(r) => return Ok(r),
        Route::Resource(t) => t,
    };
    let verb = verb_of(&parts.method, &target, &q)?;
    let fault_res = match &target.sub {
        Some(s) => format!("{}/{}", target.rt.plural, s),
        None => target.rt.plural.clone(),
    };
    sim.faults.count(verb, &fault_res);
    if verb != "watch" {
        let d = sim.faults.delay();
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }
    if sim.faults.take_failure(verb, &fault_res) {
        sim.emit(
            SimEventKind::Fault,
            target.ns.as_deref().unwrap_or_default(),
            target.name.as_deref().unwrap_or_default(),
            format!("injected 500 for {verb} {fault_res}"),
        );
        return Err(ApiError::internal(format!(
            "kube-sim: injected fault for {verb} {fault_res}"
        )));
    }
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
    let ctype = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    match verb {
        "get" => get_one(&sim, &target, &q, table::shape(&parts.headers)),
        "list" => list(&sim, &target, &q, table::shape(&parts.headers)),
        "watch" => watch::serve(sim.clone(), target, &q, table::shape(&parts.headers)),
        "create" => {
            let obj = parse_body(&body)?;
            let user = requester(&parts.headers);
            create(&sim, &target, obj, q.get("dryRun").is_some(), &user).await
        }
        "update" => update(&sim, &target, parse_body(&body)?, q.get("dryRun").is_some()),
        "patch" => patch(&sim, &target, &body, &ctype, &q).await,
        "delete" => delete(&sim, &target, &body, q.get("dryRun").is_some()),
        _ => delete_collection(&sim, &target, &q),
    }
}

fn parse_body(body: &Bytes) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    // apply-patch+yaml and kubectl's occasional YAML bodies.
    yaml_serde::from_slice::<Value>(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding body: {e}")))
}

fn ok_object(rt: &ResourceType, version: &str, code: StatusCode, obj: &Value) -> Response {
    json_response(code, object_json(rt, version, obj))
}

fn ns_of(t: &Target) -> &str {
    t.ns.as_deref().unwrap_or_default()
}

fn get_one(sim: &Sim, t: &Target, q: &Query, shape: Shape) -> ApiResult<Response> {
    let name = t.name.as_deref().unwrap_or_default();
    let obj = sim
        .store
        .get(&t.rt.id(), ns_of(t), name)
        .ok_or_else(|| ApiError::not_found(&t.rt.id(), name))?;
    Ok(match shape {
        Shape::Full => ok_object(&t.rt, &t.version, StatusCode::OK, &obj),
        Shape::Meta => json_response(StatusCode::OK, table::partial(&obj).to_string()),
        Shape::Table => {
            let rv = meta_str(&obj, "resourceVersion").parse().unwrap_or(0);
            let tbl = table::table(&t.rt, &[&obj], rv, q.get("includeObject"));
            json_response(StatusCode::OK, tbl.to_string())
        }
    })
}

/// A chunked list's place (`limit`, `continue`), as kube-apiserver serves them: a page holds at
/// most `limit` selected objects after the token's key, and every page reports the first page's
/// resourceVersion (a watch from it replays what changed while the pages were read). Clients that
/// page (kube-runtime's watcher asks for 500 at a time) then hold one page, not the whole list.
struct Page {
    limit: Option<usize>,
    /// The first page's resourceVersion and the key of the last object served.
    after: Option<(u64, String, String)>,
}

impl Page {
    fn of(q: &Query) -> ApiResult<Self> {
        let limit = match q.get("limit") {
            None | Some("" | "0") => None,
            Some(n) => Some(
                n.parse()
                    .map_err(|_| ApiError::bad_request(format!("limit {n:?} is not a number")))?,
            ),
        };
        let after = match q.get("continue") {
            None | Some("") => None,
            Some(token) => {
                let mut parts = token.splitn(3, '|');
                match (parts.next().map(str::parse), parts.next(), parts.next()) {
                    (Some(Ok(rv)), Some(ns), Some(name)) => {
                        Some((rv, ns.to_string(), name.to_string()))
                    }
                    _ => return Err(ApiError::bad_request("invalid continue token")),
                }
            }
        };
        Ok(Self { limit, after })
    }

    /// This page of `selected` (in key order), the resourceVersion to report, and the token of
    /// the next page when one follows.
    fn cut<'a>(
        &self,
        selected: impl Iterator<Item = &'a Value>,
        rv: u64,
    ) -> (Vec<&'a Value>, u64, Option<String>) {
        let key = |o: &'a Value| (meta_str(o, "namespace"), meta_str(o, "name"));
        let mut rest = selected.skip_while(|o| {
            self.after
                .as_ref()
                .is_some_and(|(_, ns, name)| key(o) <= (ns.as_str(), name.as_str()))
        });
        let rv = self.after.as_ref().map_or(rv, |(first, ..)| *first);
        let page: Vec<&Value> = match self.limit {
            Some(limit) => rest.by_ref().take(limit).collect(),
            None => rest.by_ref().collect(),
        };
        let next = match (rest.next(), page.last()) {
            (Some(_), Some(last)) => {
                let (ns, name) = key(last);
                Some(format!("{rv}|{ns}|{name}"))
            }
            _ => None,
        };
        (page, rv, next)
    }
}

fn list(sim: &Sim, t: &Target, q: &Query, shape: Shape) -> ApiResult<Response> {
    let (ls, fs) = selectors(q)?;
    let (items, rv) = sim.store.list(&t.rt.id(), t.ns.as_deref());
    let selected = || {
        items
            .iter()
            .map(|o| o.as_ref())
            .filter(|o| ls.matches_object(o) && fs.matches(o))
    };
    let page = Page::of(q)?;
    let list_meta = |rv: u64, next: Option<String>| match next {
        Some(token) => json!({"resourceVersion": rv.to_string(), "continue": token}),
        None => json!({"resourceVersion": rv.to_string()}),
    };
    match shape {
        Shape::Full => {}
        Shape::Table => {
            let objs: Vec<&Value> = selected().collect();
            let tbl = table::table(&t.rt, &objs, rv, q.get("includeObject"));
            return Ok(json_response(StatusCode::OK, tbl.to_string()));
        }
        Shape::Meta => {
            let (items, rv, next) = page.cut(selected(), rv);
            let list = json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": list_meta(rv, next),
                "items": items.into_iter().map(table::partial).collect::<Vec<_>>(),
            });
            return Ok(json_response(StatusCode::OK, list.to_string()));
        }
    }
    // Built by hand so 2,000-pod lists are serialized once, without cloning every object.
    let (items, rv, next) = page.cut(selected(), rv);
    let mut out = String::with_capacity(items.len() * 1024 + 128);
    out.push_str(&format!(
        r#"{{"kind":"{}List","apiVersion":"{}","metadata":{},"items":["#,
        t.rt.kind,
        t.rt.api_version(&t.version),
        list_meta(rv, next)
    ));
    let mut first = true;
    for item in items {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&object_json(&t.rt, &t.version, item));
    }
    out.push_str("]}");
    Ok(json_response(StatusCode::OK, out))
}

fn warning_headers(warnings: &[String]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for w in warnings {
        // RFC 7234 warn-code 299 with "-" agent, the format client-go and kube parse.
        let text = w.replace('"', "'");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            h.append(header::WARNING, v);
        }
    }
    h
}

fn set_meta(obj: &mut Value, key: &str, val: Value) {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"][key] = val;
}

/// Fills in the defaults the apiserver's defaulting would (a subset webhooks commonly read).
fn default_pod(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
    ] {
        spec.entry(k).or_insert(v);
    }
    for list in ["initContainers", "containers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(c) = c.as_object_mut() else { continue };
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            let tagged = image.rsplit('/').next().is_some_and(|l| l.contains(':'))
                && !image.ends_with(":latest");
            let policy = if tagged || image.contains('@') {
                "IfNotPresent"
            } else {
                "Always"
            };
            c.entry("imagePullPolicy").or_insert(json!(policy));
            c.entry("terminationMessagePath")
                .or_insert(json!("/dev/termination-log"));
            c.entry("terminationMessagePolicy").or_insert(json!("File"));
            c.entry("resources").or_insert(json!({}));
        }
    }
}

fn validate_pod(obj: &Value, name: &str) -> ApiResult<()> {
    let containers = obj.pointer("/spec/containers").and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        return Err(ApiError::invalid(format!(
            "Pod \"{name}\" is invalid: spec.containers: Required value"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in obj
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
            if cname.is_empty() {
                return Err(ApiError::invalid(format!(
                    "Pod \"{name}\" is invalid: spec.{list}[{i}].name: Required value"
                )));
            }
            if !seen.insert(cname.to_string()) {
                return Err(ApiError::invalid(format!(
                    "Pod \"{name}\" is invalid: spec.{list}[{i}].name: Duplicate value: \"{cname}\""
                )));
            }
        }
    }
    Ok(())
}

fn check_kind(t: &Target, obj: &Value) -> ApiResult<()> {
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && k != t.rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            obj.get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            t.rt.api_version(&t.version)
        )));
    }
    Ok(())
}

pub(crate) async fn create(
    sim: &Sim,
    t: &Target,
    mut obj: Value,
    dry_run: bool,
    user: &str,
) -> ApiResult<Response> {
    let id = t.rt.id();
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    check_kind(t, &obj)?;
    obj["apiVersion"] = t.rt.api_version(&t.version).into();
    obj["kind"] = t.rt.kind.clone().into();
    if t.rt.namespaced {
        let ns = ns_of(t);
        let body_ns = meta_str(&obj, "namespace");
        if !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        set_meta(&mut obj, "namespace", ns.into());
        if sim.store.get("namespaces", "", ns).is_none() {
            return Err(ApiError::not_found("namespaces", ns));
        }
    } else if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("namespace");
    }
    if meta_str(&obj, "name").is_empty() && meta_str(&obj, "generateName").is_empty() {
        return Err(ApiError::invalid(format!(
            "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
            t.rt.kind
        )));
    }
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
        ] {
            m.remove(k);
        }
    }
    if id == "pods" {
        default_pod(&mut obj);
    }
    // Mutating admission runs before the name is generated, as in the apiserver.
    let warnings = admission::admit(sim, &t.rt, &t.version, &mut obj, dry_run, user).await?;
    if meta_str(&obj, "name").is_empty() {
        let name = format!(
            "{}{}",
            meta_str(&obj, "generateName"),
            util::generate_name_suffix()
        );
        set_meta(&mut obj, "name", name.into());
    }
    set_meta(&mut obj, "uid", util::new_uid().into());
    set_meta(&mut obj, "creationTimestamp", util::now_rfc3339().into());
    if id != "pods" {
        set_meta(&mut obj, "generation", 1.into());
    }
    let name = meta_str(&obj, "name").to_string();
    match id.as_str() {
        "pods" => {
            validate_pod(&obj, &name)?;
            // Scheduling is instant: every pod is bound to the one simulated node.
            if obj.pointer("/spec/nodeName").is_none_or(Value::is_null) {
                obj["spec"]["nodeName"] = "kube-sim-node".into();
            }
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        "namespaces" => {
            let uid = meta_str(&obj, "uid").to_string();
            let mut ns = new_namespace(&name, uid);
            if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
                for (k, v) in labels {
                    ns["metadata"]["labels"][k] = v.clone();
                }
            }
            if let Some(a) = obj.pointer("/metadata/annotations") {
                ns["metadata"]["annotations"] = a.clone();
            }
            ns["metadata"]["creationTimestamp"] = obj["metadata"]["creationTimestamp"].clone();
            obj = ns;
        }
        "customresourcedefinitions.apiextensions.k8s.io" => {
            let crt = ResourceType::from_crd(&obj)
                .ok_or_else(|| ApiError::invalid("CustomResourceDefinition is invalid"))?;
            if format!("{}.{}", crt.plural, crt.group) != name {
                return Err(ApiError::invalid(format!(
                    "CustomResourceDefinition.apiextensions.k8s.io \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                )));
            }
            obj["status"] = crd_status(&obj);
        }
        _ if t.rt.status => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        _ => {}
    }
    let headers = warning_headers(&warnings);
    if dry_run {
        return Ok((
            headers,
            ok_object(&t.rt, &t.version, StatusCode::CREATED, &obj),
        )
            .into_response());
    }
    let stored = sim.store.create(&id, obj)?;
    after_write(sim, &t.rt, &stored);
    Ok((
        headers,
        ok_object(&t.rt, &t.version, StatusCode::CREATED, &stored),
    )
        .into_response())
}

/// The conditions clients wait for (`Established`, `NamesAccepted`); a CRD is usable at once here.
fn crd_status(crd: &Value) -> Value {
    let now = util::now_rfc3339();
    let cond = |t: &str, reason: &str| json!({"type": t, "status": "True", "reason": reason, "message": "", "lastTransitionTime": now});
    let versions: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.get("name").cloned()).collect())
        .unwrap_or_default();
    json!({
        "conditions": [cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")],
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "storedVersions": versions,
    })
}

/// Side effects of a committed write: CRDs change what the server serves.
fn after_write(sim: &Sim, rt: &ResourceType, obj: &Value) {
    if rt.id() == "customresourcedefinitions.apiextensions.k8s.io"
        && let Some(crt) = ResourceType::from_crd(obj)
    {
        sim.registry.register_crd(crt);
    }
}

/// The update rules shared by PUT and PATCH: optimistic concurrency, immutable identity,
/// status-subresource split and generation bumps.
fn finish_update(t: &Target, cur: &Value, mut new: Value) -> ApiResult<Value> {
    let id = t.rt.id();
    let name = meta_str(cur, "name").to_string();
    if !new.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    check_kind(t, &new)?;
    let want_rv = meta_str(&new, "resourceVersion");
    if !want_rv.is_empty() && want_rv != meta_str(cur, "resourceVersion") {
        return Err(ApiError::conflict(&id, &name));
    }
    let new_name = meta_str(&new, "name");
    if !new_name.is_empty() && new_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({new_name}) does not match the name on the URL ({name})"
        )));
    }
    if t.sub.as_deref() == Some("ephemeralcontainers") {
        // Only the ephemeral containers change through this subresource; they are only added.
        let mut out = cur.clone();
        out["spec"]["ephemeralContainers"] = new
            .pointer("/spec/ephemeralContainers")
            .cloned()
            .unwrap_or_else(|| json!([]));
        return Ok(out);
    }
    if t.sub.as_deref() == Some("status") {
        let mut out = cur.clone();
        out["status"] = new.get("status").cloned().unwrap_or(Value::Null);
        if out["status"].is_null()
            && let Some(m) = out.as_object_mut()
        {
            m.remove("status");
        }
        return Ok(out);
    }
    if !new.get("metadata").is_some_and(Value::is_object) {
        new["metadata"] = json!({});
    }
    for k in [
        "uid",
        "creationTimestamp",
        "namespace",
        "name",
        "generation",
        "generateName",
    ] {
        match cur["metadata"].get(k) {
            Some(v) => new["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    new["apiVersion"] = cur["apiVersion"].clone();
    new["kind"] = cur["kind"].clone();
    if t.rt.status {
        match cur.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    }
    let body = |o: &Value| -> Map<String, Value> {
        o.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    if let Some(g) = cur.pointer("/metadata/generation").and_then(Value::as_i64)
        && body(cur) != body(&new)
    {
        new["metadata"]["generation"] = (g + 1).into();
    }
    if id == "customresourcedefinitions.apiextensions.k8s.io" {
        new["status"] = crd_status(&new);
    }
    if id == "namespaces" {
        // The apiserver keeps this label whatever an update says.
        if !new["metadata"]["labels"].is_object() {
            new["metadata"]["labels"] = json!({});
        }
        new["metadata"]["labels"]["kubernetes.io/metadata.name"] = name.clone().into();
    }
    Ok(new)
}

fn update(sim: &Sim, t: &Target, obj: Value, dry_run: bool) -> ApiResult<Response> {
    let name = t.name.as_deref().unwrap_or_default();
    let id = t.rt.id();
    if dry_run {
        let cur = sim
            .store
            .get(&id, ns_of(t), name)
            .ok_or_else(|| ApiError::not_found(&id, name))?;
        let new = finish_update(t, &cur, obj)?;
        return Ok(ok_object(&t.rt, &t.version, StatusCode::OK, &new));
    }
    let written = sim
        .store
        .update(&id, ns_of(t), name, |cur| finish_update(t, cur, obj))?;
    Ok(written_response(sim, t, written))
}

/// The answer to an update: the object as stored, or as it was deleted by the update.
fn written_response(sim: &Sim, t: &Target, written: Written) -> Response {
    let object = match written {
        Written::Stored(stored) => {
            after_write(sim, &t.rt, &stored);
            stored
        }
        Written::Deleted(gone) => {
            on_deleted(sim, &t.rt, &gone);
            gone
        }
    };
    ok_object(&t.rt, &t.version, StatusCode::OK, &object)
}

/// Strategic merge patch, approximated: `$`-directives are dropped and lists of objects that
/// all carry a `name` are merged by name (containers, env, volumes...). Everything else is
/// RFC 7386 merge patch.
fn strategic_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, pv) in p {
                if k.starts_with('$') {
                    continue;
                }
                if pv.is_null() {
                    t.remove(k);
                    continue;
                }
                match t.get_mut(k) {
                    Some(tv) => strategic_merge(tv, pv),
                    None => {
                        let mut fresh = Value::Null;
                        strategic_merge(&mut fresh, pv);
                        t.insert(k.clone(), fresh);
                    }
                }
            }
        }
        (t @ Value::Array(_), Value::Array(p))
            if !p.is_empty()
                && p.iter()
                    .all(|e| e.get("name").and_then(Value::as_str).is_some())
                && t.as_array()
                    .is_some_and(|a| a.iter().all(|e| e.get("name").is_some())) =>
        {
            let items = t.as_array_mut().expect("array");
            for pe in p {
                let pname = pe.get("name");
                match items.iter_mut().find(|e| e.get("name") == pname) {
                    Some(existing) => strategic_merge(existing, pe),
                    None => {
                        let mut fresh = Value::Null;
                        strategic_merge(&mut fresh, pe);
                        items.push(fresh);
                    }
                }
            }
        }
        (t, p) => {
            if p.is_object() {
                *t = json!({});
                strategic_merge(t, p);
            } else {
                *t = p.clone();
            }
        }
    }
}

fn apply_patch(cur: &Value, body: &Bytes, ctype: &str) -> ApiResult<Value> {
    let mut doc = cur.clone();
    match ctype {
        "application/json-patch+json" => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON Patch: {e}")))?;
            // The apiserver answers 422 (Invalid) when a patch op, including `test`, fails.
            json_patch::patch(&mut doc, &p).map_err(|e| ApiError::invalid(e.to_string()))?;
        }
        "application/merge-patch+json" | "application/apply-patch+yaml" => {
            let p = parse_body(body)?;
            json_patch::merge(&mut doc, &p);
        }
        "application/strategic-merge-patch+json" => {
            let p = parse_body(body)?;
            strategic_merge(&mut doc, &p);
        }
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other})"
                ),
            ));
        }
    }
    Ok(doc)
}

async fn patch(sim: &Sim, t: &Target, body: &Bytes, ctype: &str, q: &Query) -> ApiResult<Response> {
    let name = t.name.as_deref().unwrap_or_default();
    let id = t.rt.id();
    let dry_run = q.get("dryRun").is_some();
    if sim.store.get(&id, ns_of(t), name).is_none() {
        // Server-side apply creates missing objects.
        if ctype == "application/apply-patch+yaml" && t.sub.is_none() {
            let mut obj = parse_body(body)?;
            set_meta(&mut obj, "name", name.into());
            return create(sim, t, obj, dry_run, admission::ADMIN).await;
        }
        return Err(ApiError::not_found(&id, name));
    }
    if dry_run {
        let cur = sim
            .store
            .get(&id, ns_of(t), name)
            .ok_or_else(|| ApiError::not_found(&id, name))?;
        let new = finish_update(t, &cur, apply_patch(&cur, body, ctype)?)?;
        return Ok(ok_object(&t.rt, &t.version, StatusCode::OK, &new));
    }
    // A resourceVersion in the patched result (e.g. from a merge patch body) that differs from
    // the stored one is a precondition failure: finish_update answers 409 Conflict.
    let written = sim.store.update(&id, ns_of(t), name, |cur| {
        let patched = apply_patch(cur, body, ctype)?;
        finish_update(t, cur, patched)
    })?;
    Ok(written_response(sim, t, written))
}

fn delete(sim: &Sim, t: &Target, body: &Bytes, dry_run: bool) -> ApiResult<Response> {
    let name = t.name.as_deref().unwrap_or_default();
    let id = t.rt.id();
    let opts: Value = if body.is_empty() {
        Value::Null
    } else {
        parse_body(body)?
    };
    let check = |cur: &Value| -> ApiResult<()> {
        if let Some(uid) = opts.pointer("/preconditions/uid").and_then(Value::as_str)
            && uid != meta_str(cur, "uid")
        {
            return Err(ApiError::conflict(&id, name));
        }
        if let Some(rv) = opts
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            && rv != meta_str(cur, "resourceVersion")
        {
            return Err(ApiError::conflict(&id, name));
        }
        Ok(())
    };
    if dry_run {
        let cur = sim
            .store
            .get(&id, ns_of(t), name)
            .ok_or_else(|| ApiError::not_found(&id, name))?;
        check(&cur)?;
        return Ok(ok_object(&t.rt, &t.version, StatusCode::OK, &cur));
    }
    if id == "pods" && sim.faults.take_held_delete(ns_of(t), name) {
        let written = sim.store.update(&id, ns_of(t), name, |cur| {
            check(cur)?;
            let mut terminating = (**cur).clone();
            terminating["metadata"]["deletionTimestamp"] = json!(util::now_rfc3339());
            terminating["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            Ok(terminating)
        })?;
        return Ok(written_response(sim, t, written));
    }
    let gone = sim.store.delete(&id, ns_of(t), name, check)?;
    on_deleted(sim, &t.rt, &gone);
    Ok(ok_object(&t.rt, &t.version, StatusCode::OK, &gone))
}

fn delete_collection(sim: &Sim, t: &Target, q: &Query) -> ApiResult<Response> {
    let (ls, fs) = selectors(q)?;
    let id = t.rt.id();
    let (items, _) = sim.store.list(&id, t.ns.as_deref());
    let mut deleted = Vec::new();
    for o in items
        .iter()
        .filter(|o| ls.matches_object(o) && fs.matches(o))
    {
        if let Ok(g) = sim
            .store
            .delete(&id, meta_str(o, "namespace"), meta_str(o, "name"), |_| {
                Ok(())
            })
        {
            on_deleted(sim, &t.rt, &g);
            deleted.push(present(&t.rt, &t.version, &g));
        }
    }
    let list = json!({
        "kind": format!("{}List", t.rt.kind),
        "apiVersion": t.rt.api_version(&t.version),
        "metadata": {"resourceVersion": sim.store.current_rv().to_string()},
        "items": deleted,
    });
    Ok(json_response(StatusCode::OK, list.to_string()))
}
