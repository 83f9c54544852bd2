//! Full `metav1.LabelSelector` (matchLabels AND matchExpressions), validated the way
//! `LabelSelectorAsSelector` validates it: an invalid selector is an error, never "matches
//! nothing" or "matches everything".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::labels::LabelLookup;

/// Why a `labelSelector` or `namespaceSelector` is invalid: the entry or hook object is invalid
/// for every pod it could apply to, and the object reports `Ready=False` (docs/behaviour.md §3.4
/// row 10, §8.2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "invalid label selector: unknown operator {0:?} (use In, NotIn, Exists or DoesNotExist)"
    )]
    /// An operator other than `In`, `NotIn`, `Exists`, `DoesNotExist` (the payload;
    /// case-sensitive).
    Operator(String),
    #[error("invalid label selector: operator {operator} on key {key:?} needs at least one value")]
    /// `In` or `NotIn` without values.
    MissingValues {
        /// The expression's `key`.
        key: String,
        /// `In` or `NotIn`.
        operator: String,
    },
    #[error("invalid label selector: operator {operator} on key {key:?} takes no values")]
    /// `Exists` or `DoesNotExist` with values.
    UnexpectedValues {
        /// The expression's `key`.
        key: String,
        /// `Exists` or `DoesNotExist`.
        operator: String,
    },
    #[error("invalid label selector: key {key:?}: {reason}")]
    /// A key that is not a qualified label name (`[prefix/]name`).
    Key {
        /// The key as written.
        key: String,
        /// Which part is wrong and how.
        reason: String,
    },
    #[error("invalid label selector: value {value:?} of key {key:?}: {reason}")]
    /// A value that is not a valid label value.
    Value {
        /// The key the value belongs to.
        key: String,
        /// The value as written.
        value: String,
        /// What a label value must look like.
        reason: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A validated selector.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// `None` (no selector) selects everything, as does `{}`.
    pub fn compile(selector: Option<&LabelSelector>) -> Result<Self, SelectorError> {
        let Some(selector) = selector else {
            return Ok(Self::default());
        };
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            validate_key(key)?;
            validate_value(key, value)?;
            requirements.push(Requirement::Equals(key.clone(), value.clone()));
        }
        for expr in selector.match_expressions.iter().flatten() {
            validate_key(&expr.key)?;
            let values = expr.values.clone().unwrap_or_default();
            let needs_values = |op: &str| {
                if values.is_empty() {
                    return Err(SelectorError::MissingValues {
                        key: expr.key.clone(),
                        operator: op.to_string(),
                    });
                }
                values.iter().try_for_each(|v| validate_value(&expr.key, v))
            };
            let no_values = |op: &str| {
                if values.is_empty() {
                    Ok(())
                } else {
                    Err(SelectorError::UnexpectedValues {
                        key: expr.key.clone(),
                        operator: op.to_string(),
                    })
                }
            };
            let requirement = match expr.operator.as_str() {
                "In" => {
                    needs_values("In")?;
                    Requirement::In(expr.key.clone(), values.clone())
                }
                "NotIn" => {
                    needs_values("NotIn")?;
                    Requirement::NotIn(expr.key.clone(), values.clone())
                }
                "Exists" => {
                    no_values("Exists")?;
                    Requirement::Exists(expr.key.clone())
                }
                "DoesNotExist" => {
                    no_values("DoesNotExist")?;
                    Requirement::DoesNotExist(expr.key.clone())
                }
                other => return Err(SelectorError::Operator(other.to_string())),
            };
            requirements.push(requirement);
        }
        Ok(Self { requirements })
    }

    /// Whether `labels` satisfy every requirement (matchLabels and matchExpressions ANDed;
    /// `NotIn` also matches an absent label, as in Kubernetes).
    pub fn matches(&self, labels: &dyn LabelLookup) -> bool {
        let listed = |vs: &[String], v: &str| vs.iter().any(|x| x == v);
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.label(k) == Some(v.as_str()),
            Requirement::In(k, vs) => labels.label(k).is_some_and(|v| listed(vs, v)),
            // As in Kubernetes: NotIn also matches when the label is absent.
            Requirement::NotIn(k, vs) => labels.label(k).is_none_or(|v| !listed(vs, v)),
            Requirement::Exists(k) => labels.label(k).is_some(),
            Requirement::DoesNotExist(k) => labels.label(k).is_none(),
        })
    }
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
                && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// A qualified name: `[prefix/]name`, prefix a DNS subdomain, name ≤ 63 alphanumerics with
/// `-`, `_`, `.` inside.
pub fn validate_key(key: &str) -> Result<(), SelectorError> {
    let err = |reason: &str| {
        Err(SelectorError::Key {
            key: key.to_string(),
            reason: reason.to_string(),
        })
    };
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return err("the prefix must be a lowercase DNS subdomain of at most 253 characters");
    }
    if !is_name_part(name) {
        return err(
            "the name must be 1-63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric",
        );
    }
    Ok(())
}

/// A label value: empty, or ≤ 63 alphanumerics with `-`, `_`, `.` inside.
pub fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_name_part(value) {
        return Ok(());
    }
    Err(SelectorError::Value {
        key: key.to_string(),
        value: value.to_string(),
        reason:
            "must be empty or 1-63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
                .to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use crate::hooks::types::Labels;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn sel(ml: &[(&str, &str)], me: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: (!ml.is_empty()).then(|| labels(ml)),
            match_expressions: (!me.is_empty()).then_some(me),
        }
    }

    #[test]
    fn matching() {
        let pod = labels(&[
            ("app", "postgres"),
            ("tier", "db"),
            ("velero.io/restore-name", "r1"),
        ]);
        let cases: Vec<(LabelSelector, bool)> = vec![
            (sel(&[], vec![]), true),
            (sel(&[("app", "postgres")], vec![]), true),
            (sel(&[("app", "mysql")], vec![]), false),
            (sel(&[("app", "postgres"), ("tier", "web")], vec![]), false),
            (
                sel(&[], vec![expr("app", "In", Some(&["mysql", "postgres"]))]),
                true,
            ),
            (sel(&[], vec![expr("app", "In", Some(&["mysql"]))]), false),
            (sel(&[], vec![expr("missing", "In", Some(&["x"]))]), false),
            (sel(&[], vec![expr("app", "NotIn", Some(&["mysql"]))]), true),
            (
                sel(&[], vec![expr("app", "NotIn", Some(&["postgres"]))]),
                false,
            ),
            (sel(&[], vec![expr("missing", "NotIn", Some(&["x"]))]), true),
            (sel(&[], vec![expr("tier", "Exists", None)]), true),
            (sel(&[], vec![expr("missing", "Exists", None)]), false),
            (sel(&[], vec![expr("missing", "DoesNotExist", None)]), true),
            (
                sel(&[], vec![expr("tier", "DoesNotExist", Some(&[]))]),
                false,
            ),
            (
                sel(&[], vec![expr("velero.io/restore-name", "Exists", None)]),
                true,
            ),
            (
                sel(
                    &[("app", "postgres")],
                    vec![
                        expr("tier", "In", Some(&["db"])),
                        expr("x", "DoesNotExist", None),
                    ],
                ),
                true,
            ),
        ];
        for (s, want) in cases {
            let compiled = Selector::compile(Some(&s)).unwrap();
            assert_eq!(compiled.matches(&pod), want, "{s:?}");
        }
        assert!(Selector::compile(None).unwrap().matches(&pod));
        assert!(Selector::compile(None).unwrap().matches(&Labels::new()));
    }

    #[test]
    fn invalid_selectors() {
        let cases: Vec<(LabelSelector, &str)> = vec![
            (
                sel(&[], vec![expr("app", "Equals", Some(&["x"]))]),
                "unknown operator",
            ),
            (
                sel(&[], vec![expr("app", "in", Some(&["x"]))]),
                "unknown operator",
            ),
            (
                sel(&[], vec![expr("app", "In", None)]),
                "needs at least one value",
            ),
            (
                sel(&[], vec![expr("app", "NotIn", Some(&[]))]),
                "needs at least one value",
            ),
            (
                sel(&[], vec![expr("app", "Exists", Some(&["x"]))]),
                "takes no values",
            ),
            (
                sel(&[], vec![expr("bad key", "Exists", None)]),
                "key \"bad key\"",
            ),
            (sel(&[], vec![expr("", "Exists", None)]), "key \"\""),
            (
                sel(&[], vec![expr("Example.com/x", "Exists", None)]),
                "prefix",
            ),
            (
                sel(&[], vec![expr("a/b/c", "Exists", None)]),
                "name must be",
            ),
            (sel(&[("app", "no spaces")], vec![]), "value \"no spaces\""),
            (sel(&[("app", "-dash")], vec![]), "value \"-dash\""),
            (
                sel(&[("app", &"x".repeat(64))], vec![]),
                "must be empty or 1-63",
            ),
            (
                sel(&[], vec![expr("app", "In", Some(&["ok", "bad!"]))]),
                "bad!",
            ),
        ];
        for (s, want) in cases {
            let err = Selector::compile(Some(&s)).expect_err(&format!("{s:?}"));
            assert!(
                err.to_string().contains(want),
                "{err} should mention {want}"
            );
        }
    }

    #[test]
    fn keys_and_values() {
        for ok in [
            "app",
            "a",
            "app.kubernetes.io/name",
            "velero.io/restore-name",
            "A_b.c-D",
        ] {
            validate_key(ok).unwrap();
        }
        validate_value("k", "").unwrap();
        validate_value("k", "v1.2_3-x").unwrap();
    }
}
