//! Hook documents from files (`--hooks` of the servers and of `inject`): reads them and hands the
//! text to [`restore_hooks_core::documents`], which parses it.

use std::path::PathBuf;

pub use restore_hooks_core::documents::{DocumentDefaults, DocumentError, add_documents};

use super::StaticCatalog;

/// Loads every file into one catalog, with kubectl's defaults for missing namespaces.
pub fn load_static(paths: &[PathBuf]) -> Result<StaticCatalog, DocumentError> {
    load_with_defaults(paths, &DocumentDefaults::default())
}

/// Loads every file into one catalog, with the given namespaces for documents without one.
pub fn load_with_defaults(
    paths: &[PathBuf],
    defaults: &DocumentDefaults,
) -> Result<StaticCatalog, DocumentError> {
    let mut catalog = StaticCatalog::default();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|source| DocumentError::Read {
            path: path.clone(),
            source,
        })?;
        add_documents(&mut catalog, path, &text, defaults)?;
    }
    Ok(catalog)
}
