use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, Error, IsCa, KeyPair,
    KeyUsagePurpose, SerialNumber,
};

/// An in-memory CA (root or intermediate) that issues serving certificates. Keys are ECDSA P-256
/// unless the caller brings its own ([`ThrowawayCa::issue_with_key`]).
pub struct ThrowawayCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// Intermediates between this CA and the root, this CA's own certificate first (empty for a
    /// root): appended to the chains it issues.
    intermediates_pem: String,
}

/// A serving certificate and its key, as the files of a TLS Secret.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The certificate alone.
    pub cert_pem: String,
    /// `tls.crt`: the certificate, then the intermediates up to (not including) the root.
    pub chain_pem: String,
    /// `tls.key`.
    pub key_pem: String,
    /// DER of the certificate (what a client sees first).
    pub der: Vec<u8>,
}

impl ThrowawayCa {
    /// A self-signed root named `common_name`.
    pub fn root(common_name: &str) -> Result<Self, Error> {
        Ok(Self {
            issuer: CertifiedIssuer::self_signed(ca_params(common_name)?, KeyPair::generate()?)?,
            intermediates_pem: String::new(),
        })
    }

    /// An intermediate CA signed by this one.
    pub fn intermediate(&self, common_name: &str) -> Result<Self, Error> {
        let issuer = CertifiedIssuer::signed_by(
            ca_params(common_name)?,
            KeyPair::generate()?,
            &self.issuer,
        )?;
        let intermediates_pem = format!("{}{}", issuer.pem(), self.intermediates_pem);
        Ok(Self {
            issuer,
            intermediates_pem,
        })
    }

    /// This CA's certificate: what a client trusts, for a root.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// This CA's certificate, DER.
    pub fn cert_der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// Writes this CA's certificate as `dir/name` (see [`write_pem`]).
    pub fn write_cert(&self, dir: &Path, name: &str) -> io::Result<PathBuf> {
        write_pem(dir, name, &self.cert_pem())
    }

    /// A serving certificate for `names` (DNS names or IP addresses; the first is also the common
    /// name) with a new ECDSA P-256 key in PKCS#8.
    pub fn issue(&self, names: &[&str]) -> Result<Leaf, Error> {
        let key = KeyPair::generate()?;
        let key_pem = key.serialize_pem();
        self.issue_with_key(names, &key, key_pem)
    }

    /// [`ThrowawayCa::issue`] with the caller's key, `key_pem` being its encoding in `tls.key`.
    pub fn issue_with_key(
        &self,
        names: &[&str],
        key: &KeyPair,
        key_pem: String,
    ) -> Result<Leaf, Error> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *first);
        }
        params.serial_number = Some(next_serial());
        let cert = params.signed_by(key, &self.issuer)?;
        Ok(Leaf {
            chain_pem: format!("{}{}", cert.pem(), self.intermediates_pem),
            cert_pem: cert.pem(),
            key_pem,
            der: cert.der().to_vec(),
        })
    }
}

impl Leaf {
    /// Writes `dir/<stem>.crt` (the chain) and `dir/<stem>.key` (see [`write_pem`]), and returns
    /// their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> io::Result<(PathBuf, PathBuf)> {
        Ok((
            write_pem(dir, &format!("{stem}.crt"), &self.chain_pem)?,
            write_pem(dir, &format!("{stem}.key"), &self.key_pem)?,
        ))
    }
}

/// Writes `pem` as `dir/name` (creating `dir` when missing) and returns the path; the error
/// names the file.
pub fn write_pem(dir: &Path, name: &str, pem: &str) -> io::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, pem))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

fn ca_params(common_name: &str) -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.serial_number = Some(next_serial());
    Ok(params)
}

/// Unique per process and different across runs, so that a rotated certificate is always told
/// apart from the one it replaces.
fn next_serial() -> SerialNumber {
    static SERIAL: AtomicU64 = AtomicU64::new(1);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    SerialNumber::from((nanos & 0x00ff_ffff_ffff_0000) | SERIAL.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_chain_up_to_the_root() {
        let root = ThrowawayCa::root("root").unwrap();
        let mid = root.intermediate("mid").unwrap();
        let leaf = mid.issue(&["svc.ns.svc", "127.0.0.1"]).unwrap();
        assert_eq!(leaf.chain_pem.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(leaf.chain_pem.starts_with(&leaf.cert_pem));
        assert!(leaf.chain_pem.ends_with(&mid.cert_pem()));
        assert!(leaf.key_pem.contains("PRIVATE KEY"));
        let other = root.issue(&["a"]).unwrap();
        assert_ne!(other.der, leaf.der);
    }

    #[test]
    fn a_leaf_and_its_ca_are_written_as_pem_files() {
        let dir = std::env::temp_dir().join(format!("testkit-pki-{}", std::process::id()));
        let root = ThrowawayCa::root("root").unwrap();
        let leaf = root.issue(&["localhost"]).unwrap();
        let (crt, key) = leaf.write(&dir.join("sub"), "tls").unwrap();
        let ca = root.write_cert(&dir, "ca.crt").unwrap();
        assert_eq!(std::fs::read_to_string(&crt).unwrap(), leaf.chain_pem);
        assert_eq!(std::fs::read_to_string(&key).unwrap(), leaf.key_pem);
        assert_eq!(std::fs::read_to_string(&ca).unwrap(), root.cert_pem());
        assert!(crt.ends_with("sub/tls.crt") && key.ends_with("sub/tls.key"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
