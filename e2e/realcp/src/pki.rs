//! A throwaway PKI: a CA, the apiserver's serving certificate, the service-account key pair.

use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::KeyPair;
use restore_hooks_testkit::{ThrowawayCa, write_pem};

pub(crate) struct Pki {
    pub(crate) ca_pem: String,
    pub(crate) ca_crt: PathBuf,
    pub(crate) apiserver_crt: PathBuf,
    pub(crate) apiserver_key: PathBuf,
    /// Signs service-account tokens (apiserver) and legacy token Secrets (controller-manager).
    pub(crate) sa_key: PathBuf,
    /// Verifies them (apiserver's --service-account-key-file).
    pub(crate) sa_pub: PathBuf,
}

pub(crate) fn make(dir: &Path) -> Result<Pki> {
    let ca = ThrowawayCa::root("realcp test CA")?;

    // The names in-cluster clients use for the apiserver, and 10.96.0.1: the first address of
    // --service-cluster-ip-range, the ClusterIP of the `kubernetes` Service.
    let sans = [
        "127.0.0.1",
        "10.96.0.1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ];
    let cert = ca.issue(&sans)?;

    // ECDSA P-256: the apiserver signs service-account tokens with ES256.
    let sa = KeyPair::generate()?;

    let (apiserver_crt, apiserver_key) = cert.write(dir, "apiserver")?;
    Ok(Pki {
        ca_pem: ca.cert_pem(),
        ca_crt: ca.write_cert(dir, "ca.crt")?,
        apiserver_crt,
        apiserver_key,
        sa_key: write_pem(dir, "sa.key", &sa.serialize_pem())?,
        sa_pub: write_pem(dir, "sa.pub", &sa.public_key_pem())?,
    })
}
