//! Every RestoreHook and ClusterRestoreHook the documentation shows is one the product accepts: it
//! parses as the CRD's type and compiles without a problem, so a snippet cannot drift from the
//! rules it illustrates. A sketch of a field's shape (`<core/v1 Container>`) is not an example,
//! and is left out.

use std::path::Path;

use restore_hooks_core::hooks::compiled::{compile_cluster_restore_hook, compile_restore_hook};
use restore_hooks_core::hooks::types::{ClusterRestoreHook, RestoreHook};

/// The ```yaml blocks of a Markdown text.
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, fence) if fence.starts_with("```yaml") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

#[test]
fn every_hook_object_in_the_docs_compiles_without_a_problem() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.push(root.join("README.md"));
    let mut checked = 0;
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for block in yaml_blocks(&text) {
            for doc in block.split("\n---") {
                let kind = doc
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("kind: "))
                    .map(str::trim);
                let sketch = doc.contains("[ <") || doc.contains(": <");
                if !matches!(kind, Some("RestoreHook" | "ClusterRestoreHook"))
                    || !doc.contains("restore-hooks.dev/v1alpha1")
                    || sketch
                {
                    continue;
                }
                let at = format!("{}: {}", page.display(), doc.trim());
                let compiled = match kind {
                    Some("RestoreHook") => {
                        let mut hook: RestoreHook = yaml_serde::from_str(doc)
                            .unwrap_or_else(|e| panic!("{at}\ndoes not parse: {e}"));
                        hook.metadata
                            .namespace
                            .get_or_insert_with(|| "shop".to_string());
                        compile_restore_hook(&hook)
                    }
                    _ => compile_cluster_restore_hook(
                        &yaml_serde::from_str::<ClusterRestoreHook>(doc)
                            .unwrap_or_else(|e| panic!("{at}\ndoes not parse: {e}")),
                    ),
                };
                assert!(
                    compiled.first_problem().is_none(),
                    "{at}\nhas a problem: {}",
                    compiled.first_problem().unwrap()
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 5,
        "only {checked} hook objects found in the docs"
    );
}
