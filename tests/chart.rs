//! The CRDs shipped in the Helm chart must be exactly what the binary generates.

use std::path::Path;

#[test]
fn chart_crds_match_the_generated_crds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/restore-hooks/crds");
    let mut expected = Vec::new();
    for crd in restore_hooks::crd::all() {
        let name = restore_hooks::crd::file_name(&crd);
        expected.push(name.clone());
        let path = dir.join(&name);
        let in_chart = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let generated = restore_hooks::crd::yaml(&crd);
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
                "{} is out of date ({line}); regenerate the chart's CRDs with `.ci/gen-crds.sh`",
                path.display()
            );
        }
    }
    // Nothing else in crds/: a CRD the binary no longer defines must not linger in the chart.
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(
        present, expected,
        "charts/restore-hooks/crds holds exactly the generated CRDs"
    );
}
