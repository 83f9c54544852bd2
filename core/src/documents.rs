//! Hook documents as text (the `--hooks` files of the servers and of `inject`): multi-document
//! YAML or JSON holding RestoreHook, ClusterRestoreHook and Velero Restore objects, optionally
//! Namespaces (their labels) and `List`s of those, parsed into a [`StaticCatalog`]. Reading the
//! files is the shell's part.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::catalog::StaticCatalog;
use crate::hooks::types::{ClusterRestoreHook, Labels, RestoreHook, VeleroRestore};

/// Namespaces for documents that do not name one.
#[derive(Clone, Debug)]
pub struct DocumentDefaults {
    /// For RestoreHooks (kubectl's default is `default`; `inject` uses the pod's namespace).
    pub namespace: String,
    /// For Velero Restores.
    pub velero_namespace: String,
}

impl Default for DocumentDefaults {
    fn default() -> Self {
        Self {
            namespace: "default".to_string(),
            velero_namespace: crate::config::DEFAULT_VELERO_NAMESPACE.to_string(),
        }
    }
}

/// Why a hooks file cannot be used; each names the file and the document.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are what the messages show
pub enum DocumentError {
    /// The file cannot be read.
    #[error("cannot read hooks file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A document is neither YAML nor JSON.
    #[error("hooks file {path}, document {index}: not valid YAML or JSON: {reason}")]
    Syntax {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    /// A document of a kind that holds no hooks.
    #[error(
        "hooks file {path}, document {index}: {kind:?} ({api_version:?}) is not a hook document; expected RestoreHook or ClusterRestoreHook (restore-hooks.dev/v1alpha1), Restore (velero.io/v1), Namespace (v1) or List"
    )]
    Kind {
        path: PathBuf,
        index: usize,
        api_version: String,
        kind: String,
    },
    /// A hook document that does not parse as its kind.
    #[error("hooks file {path}, document {index} ({kind} {name:?}): {reason}")]
    Invalid {
        path: PathBuf,
        index: usize,
        kind: String,
        name: String,
        reason: String,
    },
}

/// Parses one (multi-document) text into `catalog`. `path` only names the source in errors.
pub fn add_documents(
    catalog: &mut StaticCatalog,
    path: &Path,
    text: &str,
    defaults: &DocumentDefaults,
) -> Result<(), DocumentError> {
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document).map_err(|e| DocumentError::Syntax {
            path: path.to_path_buf(),
            index,
            reason: e.to_string(),
        })?;
        add_object(catalog, path, index, value, defaults)?;
    }
    Ok(())
}

fn add_object(
    catalog: &mut StaticCatalog,
    path: &Path,
    index: usize,
    value: Value,
    defaults: &DocumentDefaults,
) -> Result<(), DocumentError> {
    if value.is_null() {
        return Ok(()); // an empty document, e.g. a trailing `---`
    }
    let field = |k: &str| {
        value
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let invalid = |reason: String| DocumentError::Invalid {
        path: path.to_path_buf(),
        index,
        kind: kind.clone(),
        name: name.clone(),
        reason,
    };
    match (api_version.as_str(), kind.as_str()) {
        ("restore-hooks.dev/v1alpha1", "RestoreHook") => {
            if name.is_empty() {
                return Err(invalid("metadata.name is required".into()));
            }
            let mut hook: RestoreHook =
                serde_json::from_value(value.clone()).map_err(|e| invalid(e.to_string()))?;
            hook.metadata
                .namespace
                .get_or_insert_with(|| defaults.namespace.clone());
            catalog.restore_hooks.push(hook);
        }
        ("restore-hooks.dev/v1alpha1", "ClusterRestoreHook") => {
            if name.is_empty() {
                return Err(invalid("metadata.name is required".into()));
            }
            let hook: ClusterRestoreHook =
                serde_json::from_value(value.clone()).map_err(|e| invalid(e.to_string()))?;
            catalog.cluster_restore_hooks.push(hook);
        }
        ("velero.io/v1", "Restore") => {
            if name.is_empty() {
                return Err(invalid("metadata.name is required".into()));
            }
            let mut restore: VeleroRestore =
                serde_json::from_value(value.clone()).map_err(|e| invalid(e.to_string()))?;
            restore
                .metadata
                .namespace
                .get_or_insert_with(|| defaults.velero_namespace.clone());
            catalog.velero_restores.push(restore);
        }
        ("v1", "Namespace") => {
            let labels: Labels = value
                .pointer("/metadata/labels")
                .cloned()
                .map(serde_json::from_value)
                .transpose()
                .map_err(|e| invalid(format!("metadata.labels: {e}")))?
                .unwrap_or_default();
            catalog.namespaces.insert(name.clone(), labels);
        }
        ("v1", "List") => {
            let items = value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in items {
                add_object(catalog, path, index, item, defaults)?;
            }
        }
        _ => {
            return Err(DocumentError::Kind {
                path: path.to_path_buf(),
                index,
                api_version,
                kind,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<StaticCatalog, DocumentError> {
        let mut c = StaticCatalog::default();
        add_documents(
            &mut c,
            Path::new("hooks.yaml"),
            text,
            &DocumentDefaults::default(),
        )?;
        Ok(c)
    }

    #[test]
    fn loads_mixed_documents() {
        let c = load(
            r#"
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata: {name: a, namespace: shop}
spec:
  postHooks:
  - exec: {command: [/bin/true]}
---
apiVersion: velero.io/v1
kind: Restore
metadata: {name: nightly}
spec:
  hooks:
    resources:
    - name: r
      postHooks:
      - exec: {command: [/bin/true], onError: Fail}
---
apiVersion: restore-hooks.dev/v1alpha1
kind: ClusterRestoreHook
metadata: {name: platform}
spec:
  namespaceSelector: {matchLabels: {tier: db}}
  postHooks:
  - exec: {command: [/bin/true]}
---
{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook", "metadata": {"name": "b"}, "spec": {}},
  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"x": "y"}}}
]}
---
"#,
        )
        .unwrap();
        let index = c.index();
        assert_eq!(index.restore_hooks("shop").count(), 1);
        assert_eq!(index.restore_hooks("default").count(), 1);
        assert_eq!(index.cluster_restore_hooks().count(), 1);
        assert!(index.velero_restore("velero", "nightly").is_some());
        assert_eq!(index.namespace_labels("shop").unwrap()["x"], "y");
    }

    #[test]
    fn errors_name_file_document_and_problem() {
        let cases = [
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
                "\"Pod\"",
            ),
            ("a: [\n", "not valid YAML"),
            (
                "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {}\n",
                "metadata.name is required",
            ),
            (
                "---\napiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: x}\nspec: {postHooks: 3}\n",
                "document 0 (RestoreHook \"x\")",
            ),
        ];
        for (text, want) in cases {
            let err = load(text).expect_err(text).to_string();
            assert!(err.contains("hooks.yaml"), "{err}");
            assert!(err.contains(want), "{err} should contain {want}");
        }
    }
}
