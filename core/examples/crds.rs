//! Prints the CRDs as `restore-hooks crd` does, without building the server crate (chart work).
use kube_core::CustomResourceExt;
use restore_hooks_core::hooks::types::{
    ClusterRestoreHook, RestoreHook, RestoreRecord, RestoreRun,
};

fn main() {
    for crd in [
        RestoreHook::crd(),
        ClusterRestoreHook::crd(),
        RestoreRun::crd(),
        RestoreRecord::crd(),
    ] {
        println!("---\n{}", yaml_serde::to_string(&crd).unwrap());
    }
}
