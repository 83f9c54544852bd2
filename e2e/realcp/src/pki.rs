//! A throwaway PKI: a CA, the apiserver's serving certificate, the service-account key pair.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

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
    std::fs::create_dir_all(dir)?;
    let write = |name: &str, data: &str| -> Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, data).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    };

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "realcp test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

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
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(sans.map(String::from).to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let cert = params.signed_by(&key, &*ca)?;

    // ECDSA P-256: the apiserver signs service-account tokens with ES256.
    let sa = KeyPair::generate()?;

    let ca_pem = ca.pem();
    Ok(Pki {
        ca_crt: write("ca.crt", &ca_pem)?,
        ca_pem,
        apiserver_crt: write("apiserver.crt", &cert.pem())?,
        apiserver_key: write("apiserver.key", &key.serialize_pem())?,
        sa_key: write("sa.key", &sa.serialize_pem())?,
        sa_pub: write("sa.pub", &sa.public_key_pem())?,
    })
}
