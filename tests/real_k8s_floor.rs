//! The oldest Kubernetes the chart claims (`kubeVersion` in charts/restore-hooks/Chart.yaml; why
//! that version: docs/install.md "Kubernetes versions"), proven on that version's own
//! kube-apiserver, built from its pinned module (e2e/realcp/controlplane-floor,
//! `realcp::ApiServer::Floor`), not a newer one emulating it: the chart rendered for it and the
//! scenarios of real_install, real_admission and real_hooks on it. The v1.37 controller-manager
//! and scheduler run with `--emulated-version` at the floor's minor.

mod real;

use real::*;

/// The lower bound of the chart's `kubeVersion: ">=X.Y.Z-0"`, as `X.Y.Z`.
fn chart_kube_version_floor() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/restore-hooks/Chart.yaml"
    );
    let chart = std::fs::read_to_string(path).unwrap();
    let line = chart
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .unwrap_or_else(|| panic!("{path} has no kubeVersion"));
    let range = line.trim().trim_matches('"');
    range
        .strip_prefix(">=")
        .and_then(|v| v.strip_suffix("-0"))
        .unwrap_or_else(|| panic!("{path}: kubeVersion {range:?} is not \">=X.Y.Z-0\""))
        .to_string()
}

#[test]
fn install_admission_and_hooks_on_the_oldest_supported_kubernetes() {
    let floor = realcp::floor_version().unwrap();
    assert_eq!(
        chart_kube_version_floor(),
        floor,
        "Chart.yaml's kubeVersion floor must be the version proven here, the one \
         e2e/realcp/controlplane-floor pins (change both, and docs/install.md, together)"
    );
    let install = Install::new(InstallOptions {
        apiserver: realcp::ApiServer::Floor,
        ..InstallOptions::default()
    });
    // The real binary of that version serves the API, and the chart was rendered for it.
    assert_eq!(server_version(&install.cp), floor);
    let serve = install.start(0);
    scenarios::chart_as_installed(&install, &serve);
    scenarios::hooks_through_exec(&install, &serve);
    scenarios::admission_chain(&install, &serve);
    serve.assert_no_forbidden();
    scenarios::denials_logged_as_json(&serve);
}
