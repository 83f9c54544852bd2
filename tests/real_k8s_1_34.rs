//! The oldest Kubernetes the chart claims (`kubeVersion: >=1.34.0-0`): kube-apiserver v1.37
//! with `--emulated-version=1.34` (and the controller-manager and scheduler alike), the chart
//! rendered for 1.34 and the scenarios of real_install, real_admission and real_hooks on it.

mod real;

use real::*;

#[test]
fn install_admission_and_hooks_on_kubernetes_1_34() {
    let install = Install::new(InstallOptions {
        emulated_version: Some("1.34".into()),
        ..InstallOptions::default()
    });
    let version = install.cp.kubectl_ok(["get", "--raw", "/version"]).unwrap();
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(version["emulationMinor"], "34", "{version}");
    let serve = install.start(0);
    scenarios::chart_as_installed(&install, &serve);
    scenarios::hooks_through_exec(&install, &serve);
    scenarios::admission_chain(&install, &serve);
    serve.assert_no_forbidden();
    scenarios::denials_logged_as_json(&serve);
}
