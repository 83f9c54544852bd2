//! Label selectors (query-string syntax and `metav1.LabelSelector`) and field selectors.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A conjunction of requirements; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// Splits on commas outside parentheses: `a in (x,y),b` is two requirements.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(s: &str) -> ApiResult<Vec<String>> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: set {s:?}")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let bad = || ApiError::bad_request(format!("unable to parse requirement: {p:?}"));
            let req = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once(" notin ") {
                Req::NotIn(k.trim().into(), parse_set(v)?)
            } else if let Some((k, v)) = p.split_once(" in ") {
                Req::In(k.trim().into(), parse_set(v)?)
            } else if p.contains(' ') || p.contains('(') {
                return Err(bad());
            } else {
                Req::Exists(p.to_string())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// From a `metav1.LabelSelector` JSON value (webhook objectSelector / namespaceSelector).
    /// An absent selector matches everything, like the API server.
    pub fn from_label_selector(v: Option<&Value>) -> Result<Self, String> {
        let Some(v) = v else {
            return Ok(Self::default());
        };
        let mut reqs = Vec::new();
        if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in m {
                reqs.push(Req::Eq(k.clone(), val.as_str().unwrap_or_default().into()));
            }
        }
        for e in v
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            reqs.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => Req::In(key, values),
                Some("NotIn") => Req::NotIn(key, values),
                Some("Exists") => Req::Exists(key),
                Some("DoesNotExist") => Req::NotExists(key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            });
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::NotEq(k, v) => labels.get(k) != Some(v),
            Req::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Req::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
        })
    }

    pub fn matches_object(&self, obj: &Value) -> bool {
        self.0.is_empty() || self.matches(&labels_of(obj))
    }
}

pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Field selectors: `=`, `==`, `!=` on dotted paths (`metadata.name`, `status.phase`, ...).
/// The real server only allows a per-type whitelist; accepting any path is a superset.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, String, bool)>);

impl FieldSelector {
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut out = Vec::new();
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v, eq) = if let Some((k, v)) = p.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, v, true)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: {p:?}"
                )));
            };
            out.push((k.trim().to_string(), v.trim().to_string(), eq));
        }
        Ok(Self(out))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, want, eq)| {
            let ptr = format!("/{}", path.replace('.', "/"));
            let got = match obj.pointer(&ptr) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn l(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_syntax() {
        let s =
            LabelSelector::parse("app=web,tier in (a, b),!gone,env!=prod,x notin (1),has").unwrap();
        assert!(s.matches(&l(&[("app", "web"), ("tier", "a"), ("has", "")])));
        assert!(!s.matches(&l(&[("app", "web"), ("tier", "c"), ("has", "")])));
        assert!(!s.matches(&l(&[
            ("app", "web"),
            ("tier", "a"),
            ("has", ""),
            ("gone", "1")
        ])));
        assert!(!s.matches(&l(&[
            ("app", "web"),
            ("tier", "a"),
            ("has", ""),
            ("env", "prod")
        ])));
        assert!(!s.matches(&l(&[
            ("app", "web"),
            ("tier", "a"),
            ("has", ""),
            ("x", "1")
        ])));
        assert!(!s.matches(&l(&[("app", "web"), ("tier", "a")])));
    }

    #[test]
    fn field_selector() {
        let f = FieldSelector::parse("metadata.name=a,metadata.namespace!=b").unwrap();
        assert!(f.matches(&json!({"metadata": {"name": "a", "namespace": "c"}})));
        assert!(!f.matches(&json!({"metadata": {"name": "a", "namespace": "b"}})));
    }
}
