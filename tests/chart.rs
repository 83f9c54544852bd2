//! The RestoreHook CRD shipped in the Helm chart must be exactly what the binary generates.

use std::path::Path;

#[test]
fn chart_crd_matches_generated_crd() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/restore-hooks/crds/restorehooks.yaml");
    let in_chart = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let generated = restore_hooks::crd::yaml();
    if in_chart != generated {
        let line = in_chart
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || {
                    format!(
                        "lengths differ ({} vs {} lines)",
                        in_chart.lines().count(),
                        generated.lines().count()
                    )
                },
                |i| format!("first difference at line {}", i + 1),
            );
        panic!(
            "charts/restore-hooks/crds/restorehooks.yaml is out of date ({line}); regenerate it with \
             `cargo run -q -- crd > charts/restore-hooks/crds/restorehooks.yaml`"
        );
    }
}
