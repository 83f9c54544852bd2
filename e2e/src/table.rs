//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), which is what
//! `kubectl get` asks for: without it kubectl can only show NAME and AGE.

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::registry::ResourceType;
use crate::store::meta_str;

/// The representation a client asked for in `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Full,
    /// `as=Table`: kubectl get.
    Table,
    /// `as=PartialObjectMetadata`: metadata-only clients (kube's `metadata_watcher`).
    Meta,
}

pub(crate) fn shape(headers: &HeaderMap) -> Shape {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    // The first representation offered wins; clients list fallbacks after it.
    let first = accept.split(',').next().unwrap_or_default();
    if first.contains("as=Table") {
        Shape::Table
    } else if first.contains("as=PartialObjectMetadata") {
        Shape::Meta
    } else {
        Shape::Full
    }
}

pub(crate) fn partial(o: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
}

/// kubectl's `HumanDuration`, close enough: 45s, 3m20s, 15m, 5h2m, 3d.
fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        match secs % 60 {
            0 => format!("{m}m"),
            s => format!("{m}m{s}s"),
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            mm => format!("{h}h{mm}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else {
        format!("{d}d")
    }
}

fn col(name: &str, ty: &str, format: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": 0})
}

/// The STATUS column as kubectl's pod printer derives it.
fn pod_status(pod: &Value) -> String {
    let st = &pod["status"];
    let mut reason = st["phase"].as_str().unwrap_or("Pending").to_string();
    if let Some(r) = st["reason"].as_str() {
        reason = r.to_string();
    }
    let inits = st["initContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let n = pod["spec"]["initContainers"].as_array().map_or(0, Vec::len);
    let mut initializing = false;
    for (i, c) in inits.iter().enumerate() {
        let s = &c["state"];
        if s["terminated"]["exitCode"].as_i64() == Some(0) {
            continue;
        }
        if s["running"].is_object() && c["started"].as_bool() == Some(true) {
            continue; // a started sidecar
        }
        initializing = true;
        reason = if let Some(t) = s["terminated"].as_object() {
            match t.get("reason").and_then(Value::as_str) {
                Some(r) => format!("Init:{r}"),
                None => format!("Init:ExitCode:{}", t["exitCode"]),
            }
        } else if let Some(r) = s["waiting"]["reason"]
            .as_str()
            .filter(|r| *r != "PodInitializing")
        {
            format!("Init:{r}")
        } else {
            format!("Init:{i}/{n}")
        };
        break;
    }
    if !initializing {
        for c in st["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .rev()
        {
            let s = &c["state"];
            if let Some(r) = s["waiting"]["reason"].as_str() {
                reason = r.to_string();
            } else if let Some(r) = s["terminated"]["reason"].as_str() {
                reason = r.to_string();
            }
        }
    }
    reason
}

fn row(rt: &ResourceType, o: &Value, include: &str) -> Value {
    let name = meta_str(o, "name");
    let age = age(meta_str(o, "creationTimestamp"));
    let cells = match rt.id().as_str() {
        "pods" => {
            let statuses = o["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = statuses
                .iter()
                .filter(|c| c["ready"].as_bool() == Some(true))
                .count();
            json!([name, format!("{ready}/{total}"), pod_status(o), 0, age])
        }
        "namespaces" => json!([name, o["status"]["phase"].as_str().unwrap_or("Active"), age]),
        _ => json!([name, age]),
    };
    let object = match include {
        "None" => Value::Null,
        "Object" => o.clone(),
        _ => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
        }
    };
    json!({"cells": cells, "object": object})
}

fn columns(rt: &ResourceType) -> Value {
    let name = col("Name", "string", "name");
    let age = col("Age", "string", "");
    match rt.id().as_str() {
        "pods" => json!([
            name,
            col("Ready", "string", ""),
            col("Status", "string", ""),
            col("Restarts", "string", ""),
            age
        ]),
        "namespaces" => json!([name, col("Status", "string", ""), age]),
        _ => json!([name, age]),
    }
}

pub(crate) fn table(rt: &ResourceType, objs: &[&Value], rv: u64, include: Option<&str>) -> Value {
    let include = include.unwrap_or("Metadata");
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": columns(rt),
        "rows": objs.iter().map(|o| row(rt, o, include)).collect::<Vec<_>>(),
    })
}
