//! Discovery (`/version`, `/api`, `/apis`, resource lists) and a minimal OpenAPI v3.
//!
//! kubectl's default `--validate=strict` asks OpenAPI v3 whether the server supports the
//! `fieldValidation` query parameter for the object's kind; when it does, kubectl leaves
//! validation to the server and needs no schemas. So each group-version document declares a
//! PATCH operation per kind with that parameter and the `x-kubernetes-group-version-kind`
//! extension, and nothing else.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::Sim;
use crate::error::{ApiError, ApiResult};
use crate::request::json_response;

fn ok(v: Value) -> Response {
    json_response(StatusCode::OK, v.to_string())
}

pub(crate) async fn version() -> Response {
    ok(json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-kube-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }))
}

pub(crate) async fn api_versions() -> Response {
    ok(json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }))
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0]})
}

pub(crate) async fn api_groups(State(sim): State<Arc<Sim>>) -> Response {
    let groups: Vec<Value> = sim
        .registry
        .groups()
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    ok(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

pub(crate) fn api_group(sim: &Sim, group: &str) -> ApiResult<Response> {
    let groups = sim.registry.groups();
    let vs = groups.get(group).ok_or_else(ApiError::no_route)?;
    let mut g = group_json(group, vs);
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    Ok(ok(g))
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub(crate) fn resource_list(sim: &Sim, group: &str, version: &str) -> ApiResult<Response> {
    let mut resources = Vec::new();
    for t in sim.registry.all() {
        if t.group != group || !t.versions.iter().any(|v| v == version) {
            continue;
        }
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        resources.push(r);
        if t.status {
            resources.push(json!({
                "name": format!("{}/status", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if t.id() == "pods" {
            resources.push(json!({
                "name": "pods/exec",
                "singularName": "",
                "namespaced": true,
                "kind": "PodExecOptions",
                "verbs": ["create", "get"],
            }));
        }
    }
    if resources.is_empty() {
        return Err(ApiError::no_route());
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(ok(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    })))
}

fn group_versions(sim: &Sim) -> Vec<(String, String)> {
    let mut out = vec![(String::new(), "v1".to_string())];
    for (g, vs) in sim.registry.groups() {
        for v in vs {
            out.push((g.clone(), v));
        }
    }
    out
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

pub(crate) async fn openapi_root(State(sim): State<Arc<Sim>>) -> Response {
    let rv = sim.store.current_rv();
    let mut paths = serde_json::Map::new();
    for (g, v) in group_versions(&sim) {
        let p = gv_path(&g, &v);
        // The hash lets client-go cache documents; the store RV changes when CRDs do.
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={rv:016X}")}),
        );
    }
    ok(json!({"paths": paths}))
}

pub(crate) async fn openapi_group_version(
    State(sim): State<Arc<Sim>>,
    Path(gv): Path<String>,
) -> Response {
    let segs: Vec<&str> = gv.trim_matches('/').split('/').collect();
    let (group, version) = match segs.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return ApiError::no_route().into_response(),
    };
    let mut paths = serde_json::Map::new();
    for t in sim.registry.all() {
        if t.group != group || !t.versions.iter().any(|v| v == version) {
            continue;
        }
        let base = if t.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}/{{name}}",
                gv_path(group, version),
                t.plural
            )
        } else {
            format!("/{}/{}/{{name}}", gv_path(group, version), t.plural)
        };
        let op = json!({
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": t.kind},
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            ],
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(base, json!({"patch": op}));
    }
    if paths.is_empty() {
        return ApiError::no_route().into_response();
    }
    ok(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
