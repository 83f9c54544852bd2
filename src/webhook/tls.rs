//! The serving certificate: `tls.crt` (leaf first, then any intermediates) and `tls.key` (PKCS#8,
//! PKCS#1 or SEC1) from `--tls-dir`, reloaded without a restart.
//!
//! Reload is by polling, on purpose: the kubelet updates a mounted Secret by writing a new
//! timestamped directory and atomically swapping the `..data` symlink, so a file watch on
//! `tls.crt` goes stale after the first rotation (cilium#13636, ingress-nginx#6386). Reading both
//! files every `--tls-reload-interval` follows the symlinks afresh each time and costs two small
//! reads; the `ServerConfig` is only rebuilt when the bytes changed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The certificate chain's file name in `--tls-dir` (the `tls.crt` key of a
/// `kubernetes.io/tls` Secret).
pub const CERT_FILE: &str = "tls.crt";
/// The private key's file name in `--tls-dir` (the `tls.key` key of a `kubernetes.io/tls` Secret).
pub const KEY_FILE: &str = "tls.key";

/// ALPN: HTTP/2 first (the API server may use it), HTTP/1.1 for everything else.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Why a serving-certificate pair cannot be loaded. At start-up it stops the webhook; on a reload
/// it is logged and counted, and the current certificate keeps being served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read (missing, unreadable, or the Secret is mounted wrongly).
    #[error(
        "cannot read {path}: {error} (--tls-dir must hold tls.crt and tls.key: mount the \
         serving-certificate Secret there as a directory, without subPath)"
    )]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// The error from the file system.
        error: io::Error,
    },
    /// A file is not well-formed PEM.
    #[error("{path} is not valid PEM: {reason}")]
    Pem {
        /// The malformed file.
        path: PathBuf,
        /// What the PEM parser rejected.
        reason: String,
    },
    /// The certificate file holds no certificate at all.
    #[error(
        "{path} holds no `CERTIFICATE` PEM block: it must hold the serving certificate, \
         followed by any intermediate CA certificates"
    )]
    NoCertificate {
        /// The certificate file.
        path: PathBuf,
    },
    /// The key file holds no private key in a supported format.
    #[error(
        "{path} holds no private key: expected a PEM `PRIVATE KEY` (PKCS#8), \
         `RSA PRIVATE KEY` (PKCS#1) or `EC PRIVATE KEY` (SEC1) block"
    )]
    NoKey {
        /// The key file.
        path: PathBuf,
    },
    /// rustls refused the pair: most often a key that is not the leaf certificate's.
    #[error(
        "{key} cannot be used with the first certificate of {cert}: {reason} (tls.crt and \
         tls.key must be the pair of one Secret; with cert-manager check the Certificate's status)"
    )]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why rustls refused the pair.
        reason: String,
    },
}

/// The two files of a serving-certificate directory.
#[derive(Clone, Debug)]
pub struct TlsDir {
    dir: PathBuf,
}

/// The raw bytes of one read of both files; compared to decide whether to rebuild.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PemPair {
    /// `tls.crt` as read.
    pub cert: Vec<u8>,
    /// `tls.key` as read.
    pub key: Vec<u8>,
}

/// What operators want in the log after a (re)load: which certificate is now served.
#[derive(Clone, Debug, Default)]
pub struct CertInfo {
    /// Hex serial number of the leaf certificate.
    pub serial: String,
    /// NotAfter of the leaf certificate (RFC 2822), when it could be parsed.
    pub not_after: Option<String>,
    /// The same, as Unix seconds (the expiry metric).
    pub not_after_unix: Option<i64>,
    /// DNS and IP subject alternative names of the leaf.
    pub subject_alt_names: Vec<String>,
    /// Certificates in `tls.crt` (leaf plus intermediates).
    pub chain_len: usize,
}

/// A validated certificate chain and key, ready to serve.
pub struct LoadedCert {
    /// The rustls configuration to serve (h2 and http/1.1 ALPN).
    pub config: Arc<ServerConfig>,
    /// What to log about the certificate.
    pub info: CertInfo,
    /// The bytes it was built from: the reloader's starting point.
    pub pem: PemPair,
}

impl TlsDir {
    /// The directory `--tls-dir` names; nothing is read until [`TlsDir::read`] or
    /// [`TlsDir::load`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory itself.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the certificate chain ([`CERT_FILE`]).
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CERT_FILE)
    }

    /// Path of the private key ([`KEY_FILE`]).
    pub fn key_path(&self) -> PathBuf {
        self.dir.join(KEY_FILE)
    }

    /// Reads both files (following symlinks). Reads the certificate again after the key and
    /// retries when it changed in between, so that a `..data` swap between the two reads does
    /// not produce a mixed pair.
    pub fn read(&self) -> Result<PemPair, TlsError> {
        let (cert_path, key_path) = (self.cert_path(), self.key_path());
        let read = |path: &Path| {
            std::fs::read(path).map_err(|error| TlsError::Read {
                path: path.to_path_buf(),
                error,
            })
        };
        let mut cert = read(&cert_path)?;
        for _ in 0..3 {
            let key = read(&key_path)?;
            let again = read(&cert_path)?;
            if again == cert {
                return Ok(PemPair { cert, key });
            }
            cert = again;
        }
        let key = read(&key_path)?;
        Ok(PemPair { cert, key })
    }

    /// Reads, parses and validates the pair.
    pub fn load(&self) -> Result<LoadedCert, TlsError> {
        let pem = self.read()?;
        let (config, info) = build_config(&pem, &self.cert_path(), &self.key_path())?;
        Ok(LoadedCert { config, info, pem })
    }
}

/// Parses a PEM pair into a rustls `ServerConfig` (h2 + http/1.1 ALPN), checking that the key
/// belongs to the leaf certificate. The paths only name the files in errors.
pub fn build_config(
    pem: &PemPair,
    cert_path: &Path,
    key_path: &Path,
) -> Result<(Arc<ServerConfig>, CertInfo), TlsError> {
    let pem_error = |path: &Path, err: pem::Error| TlsError::Pem {
        path: path.to_path_buf(),
        reason: err.to_string(),
    };
    let chain = CertificateDer::pem_slice_iter(&pem.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert_path, e))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_path_buf(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&pem.key).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoKey {
            path: key_path.to_path_buf(),
        },
        other => pem_error(key_path, other),
    })?;
    let info = cert_info(&chain);

    // Honour the process-wide provider (main installs ring); fall back to ring so that library
    // users and tests that forgot to install one still work.
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let mismatch = |reason: String| TlsError::Mismatch {
        cert: cert_path.to_path_buf(),
        key: key_path.to_path_buf(),
        reason,
    };
    // `with_single_cert` rejects a key whose public key differs from the leaf's.
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| mismatch(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| mismatch(e.to_string()))?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok((Arc::new(config), info))
}

/// Serial, NotAfter and SANs of the leaf, for logs. Best effort: a certificate that rustls
/// accepts but x509-parser does not still serves, with less detail in the log.
pub fn cert_info(chain: &[CertificateDer<'_>]) -> CertInfo {
    let mut info = CertInfo {
        chain_len: chain.len(),
        ..CertInfo::default()
    };
    let Some(leaf) = chain.first() else {
        return info;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
        return info;
    };
    info.serial = cert.raw_serial_as_string();
    info.not_after = cert.validity().not_after.to_rfc2822().ok();
    info.not_after_unix = Some(cert.validity().not_after.timestamp());
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        use x509_parser::extensions::GeneralName;
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => info.subject_alt_names.push((*d).to_string()),
                GeneralName::IPAddress(ip) => match ip.len() {
                    4 => info.subject_alt_names.push(
                        std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap()).to_string(),
                    ),
                    16 => info.subject_alt_names.push(
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap()).to_string(),
                    ),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    info
}

/// Polls `--tls-dir` and swaps the served certificate when a new valid pair appears.
pub struct CertReloader {
    dir: TlsDir,
    config: RustlsConfig,
    metrics: Metrics,
    interval: Duration,
    /// Bytes of the last pair looked at (valid or not), so that a bad pair is reported once,
    /// not at every poll, and a good pair is not rebuilt at every poll.
    last_seen: PemPair,
    /// A read error is reported once until the files are readable again.
    read_failing: bool,
}

impl CertReloader {
    /// `initial` is the pair `config` currently serves.
    pub fn new(
        dir: TlsDir,
        config: RustlsConfig,
        initial: PemPair,
        metrics: Metrics,
        interval: Duration,
    ) -> Self {
        Self {
            dir,
            config,
            metrics,
            interval,
            last_seen: initial,
            read_failing: false,
        }
    }

    /// One poll: read both files; rebuild and swap only when the bytes changed.
    /// Reading two small files is cheap enough to do on the async worker directly.
    pub fn poll_once(&mut self) {
        let pem = match self.dir.read() {
            Ok(pem) => pem,
            Err(err) => {
                // During a swap the kubelet never leaves the files missing, so a read error is
                // a real problem (Secret deleted, volume unmounted): report it once.
                if self.read_failing {
                    return;
                }
                self.read_failing = true;
                self.metrics.tls_reloads.with_label_values(&["error"]).inc();
                tracing::error!(error = %err, "cannot reload the serving certificate; keeping the current one");
                return;
            }
        };
        self.read_failing = false;
        if pem == self.last_seen {
            return;
        }
        let result = build_config(&pem, &self.dir.cert_path(), &self.dir.key_path());
        self.last_seen = pem;
        match result {
            Ok((config, info)) => {
                self.config.reload_from_config(config);
                self.metrics
                    .certificate_expiry
                    .set(info.not_after_unix.unwrap_or_default());
                self.metrics
                    .tls_reloads
                    .with_label_values(&["success"])
                    .inc();
                tracing::info!(
                    serial = %info.serial,
                    not_after = info.not_after.as_deref().unwrap_or("unknown"),
                    san = ?info.subject_alt_names,
                    chain_len = info.chain_len,
                    "serving certificate reloaded"
                );
            }
            Err(err) => {
                self.metrics.tls_reloads.with_label_values(&["error"]).inc();
                tracing::error!(error = %err, "new serving certificate rejected; keeping the current one");
            }
        }
    }

    /// Polls until `shutdown` is cancelled.
    /// A zero `--tls-reload-interval` turns reloading off.
    pub async fn run(mut self, shutdown: CancellationToken) {
        if self.interval.is_zero() {
            tracing::info!("--tls-reload-interval is 0: the serving certificate is not reloaded");
            return;
        }
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate; the initial pair is already loaded
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.poll_once();
        }
    }
}
