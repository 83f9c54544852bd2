//! What the handlers share with the watch, discovery and exec endpoints: the parsed resource
//! URL, the query's selectors, and how objects and errors are written in answers. Below the
//! handlers (`server`), so that no module imports the one that routes to it.

use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::ApiResult;
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::util::Query;

/// A parsed resource URL.
pub(crate) struct Target {
    pub rt: Arc<ResourceType>,
    pub version: String,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

/// A JSON answer with status `code`.
pub(crate) fn json_response(code: StatusCode, body: String) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Sets apiVersion/kind as served at the requested version (CRDs may serve several).
pub(crate) fn present(rt: &ResourceType, version: &str, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), rt.api_version(version).into());
        m.insert("kind".into(), rt.kind.clone().into());
    }
    o
}

/// An object as served at `version`.
pub(crate) fn object_json(rt: &ResourceType, version: &str, obj: &Value) -> String {
    if rt.versions.len() > 1 {
        present(rt, version, obj).to_string()
    } else {
        obj.to_string()
    }
}

/// The `labelSelector` and `fieldSelector` of a list or watch.
pub(crate) fn selectors(q: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    Ok((
        LabelSelector::parse(q.get("labelSelector").unwrap_or_default())?,
        FieldSelector::parse(q.get("fieldSelector").unwrap_or_default())?,
    ))
}
