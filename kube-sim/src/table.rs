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
        _ if !rt.printer_columns.is_empty() => {
            let mut cells = vec![Value::String(name.to_string())];
            cells.extend(rt.printer_columns.iter().map(|c| printer_cell(c, o)));
            Value::Array(cells)
        }
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
    if !rt.printer_columns.is_empty() {
        // As the API server's CRD table convertor: Name, then the printer columns as declared.
        let mut out = vec![name];
        out.extend(rt.printer_columns.iter().map(|c| {
            json!({
                "name": c["name"].as_str().unwrap_or_default(),
                "type": c["type"].as_str().unwrap_or("string"),
                "format": c["format"].as_str().unwrap_or_default(),
                "description": c["description"].as_str().unwrap_or_default(),
                "priority": c["priority"].as_i64().unwrap_or(0),
            })
        }));
        return Value::Array(out);
    }
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

/// One printer-column cell, as the API server's CRD table convertor renders it: the first value
/// the column's JSONPath finds, as the column's type; `null` (kubectl prints `<none>`) when there
/// is none or it has another type; dates as an age.
fn printer_cell(column: &Value, o: &Value) -> Value {
    let Some(value) = column["jsonPath"]
        .as_str()
        .and_then(|p| json_path(o, p))
        .filter(|v| !v.is_null())
    else {
        return Value::Null;
    };
    match column["type"].as_str().unwrap_or("string") {
        "string" => match value {
            Value::String(s) => Value::String(s.clone()),
            other => Value::String(other.to_string()),
        },
        "integer" => value
            .as_i64()
            .or_else(|| value.as_f64().map(|f| f as i64))
            .map_or(Value::Null, Value::from),
        "number" => value.as_f64().map_or(Value::Null, Value::from),
        "boolean" => value.as_bool().map_or(Value::Null, Value::from),
        "date" => match value.as_str() {
            Some(ts) if ts.parse::<jiff::Timestamp>().is_ok() => Value::String(age(ts)),
            Some(_) => Value::String("<invalid>".into()),
            None => Value::Null,
        },
        _ => Value::Null,
    }
}

/// One step of a printer column's JSONPath.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    /// `[?(@.path == value)]`
    Filter(Vec<Step>, Value),
}

/// The first value `path` selects in `root`. Printer columns use Kubernetes' JSONPath without
/// braces (`.status.phase`, `.status.conditions[?(@.type=="Ready")].status`); this is the
/// subset they need: fields (dotted, with `\.` escapes, or `['a.b']`), indexes, `[*]` and
/// equality filters. Anything else selects nothing.
fn json_path<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let steps = parse_path(path.strip_prefix('$').unwrap_or(path))?;
    select(root, &steps).into_iter().next()
}

fn select<'a>(root: &'a Value, steps: &[Step]) -> Vec<&'a Value> {
    let mut current = vec![root];
    for step in steps {
        current = current
            .into_iter()
            .flat_map(|v| -> Vec<&'a Value> {
                match step {
                    Step::Field(f) => v.get(f.as_str()).into_iter().collect(),
                    Step::Index(i) => v.get(*i).into_iter().collect(),
                    Step::All => match v {
                        Value::Array(a) => a.iter().collect(),
                        Value::Object(m) => m.values().collect(),
                        _ => Vec::new(),
                    },
                    Step::Filter(path, want) => v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|e| select(e, path).into_iter().any(|got| same(got, want)))
                        .collect(),
                }
            })
            .collect();
    }
    current
}

fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn parse_path(path: &str) -> Option<Vec<Step>> {
    let chars: Vec<char> = path.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let mut field = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    field.push(chars[i]);
                    i += 1;
                }
                if field.is_empty() {
                    return None;
                }
                steps.push(Step::Field(field));
            }
            '[' => {
                let close = bracket_end(&chars, i)?;
                let inner: String = chars[i + 1..close].iter().collect();
                steps.push(parse_bracket(inner.trim())?);
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// The `]` closing the `[` at `open`, skipping quoted text.
fn bracket_end(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (j, &c) in chars.iter().enumerate().skip(open + 1) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, ']') => return Some(j),
            _ => {}
        }
    }
    None
}

fn parse_bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::All);
    }
    if let Ok(i) = inner.parse::<usize>() {
        return Some(Step::Index(i));
    }
    if let Some(quoted) = unquote(inner) {
        return Some(Step::Field(quoted));
    }
    let filter = inner.strip_prefix("?(")?.strip_suffix(')')?;
    let (left, right) = filter.split_once("==")?;
    let relative = left.trim().strip_prefix('@')?;
    let right = right.trim();
    let want = match unquote(right) {
        Some(s) => Value::String(s),
        None => serde_json::from_str(right).ok()?,
    };
    Some(Step::Filter(parse_path(relative)?, want))
}

fn unquote(s: &str) -> Option<String> {
    ['"', '\''].iter().find_map(|q| {
        s.strip_prefix(*q)
            .and_then(|r| r.strip_suffix(*q))
            .map(str::to_string)
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_column_paths() {
        let o = json!({
            "metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web"}},
            "status": {
                "phase": "Completed", "count": 3,
                "conditions": [
                    {"type": "Completed", "status": "False"},
                    {"type": "Ready", "status": "True"},
                ],
            },
        });
        let cases = [
            (".status.phase", Some(json!("Completed"))),
            ("{.status.count}", Some(json!(3))),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                Some(json!("True")),
            ),
            (
                ".status.conditions[?(@.type=='Completed')].status",
                Some(json!("False")),
            ),
            (".status.conditions[1].type", Some(json!("Ready"))),
            (".status.conditions[*].type", Some(json!("Completed"))),
            (
                ".metadata.labels.app\\.kubernetes\\.io/name",
                Some(json!("web")),
            ),
            (
                ".metadata.labels['app.kubernetes.io/name']",
                Some(json!("web")),
            ),
            (".status.missing", None),
            (".status.conditions[?(@.type==\"Gone\")].status", None),
            ("status", None),
        ];
        for (path, want) in cases {
            assert_eq!(json_path(&o, path).cloned(), want, "{path}");
        }
    }

    #[test]
    fn printer_cells_take_the_columns_type() {
        let o = json!({"spec": {"n": 2.0, "s": "a", "b": true}, "metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}});
        let cell = |ty: &str, path: &str| printer_cell(&json!({"type": ty, "jsonPath": path}), &o);
        assert_eq!(cell("integer", ".spec.n"), json!(2));
        assert_eq!(cell("string", ".spec.n"), json!("2.0"));
        assert_eq!(cell("string", ".spec.s"), json!("a"));
        assert_eq!(cell("boolean", ".spec.b"), json!(true));
        assert_eq!(cell("integer", ".spec.s"), Value::Null);
        assert_eq!(cell("integer", ".spec.none"), Value::Null);
        assert!(
            cell("date", ".metadata.creationTimestamp")
                .as_str()
                .unwrap()
                .ends_with('d')
        );
    }
}
