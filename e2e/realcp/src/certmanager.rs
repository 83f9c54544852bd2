//! cert-manager v1.21 out of cluster against a [`ControlPlane`]: its CRDs, the controller (the
//! Certificate and CertificateRequest controllers for SelfSigned and CA issuers, the Issuer and
//! ClusterIssuer controllers, the internal approver) and the CA injector (for
//! MutatingWebhookConfigurations), two processes as upstream runs them, built by build.sh from
//! `certmanager/main.go`.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::cache::{self, Group, bin, cache_dir};
use crate::controlplane::{ControlPlane, lock, spawn_into, wait_for};
use crate::process::{self, Proc, signal_group};

const CONTROLLER: &str = "cert-manager-controller";
const CAINJECTOR: &str = "cert-manager-cainjector";

/// cert-manager running against a [`ControlPlane`] (borrowed: it cannot outlive it), under the
/// admin kubeconfig. Dropping it stops both processes.
pub struct CertManager<'cp> {
    cp: &'cp ControlPlane,
    procs: Mutex<Vec<Proc>>,
    work: PathBuf,
}

impl<'cp> CertManager<'cp> {
    /// Applies cert-manager's CRDs, from its module's `deploy/crds` (built first if needed),
    /// and waits until the `cert-manager.io` ones are Established: enough to create
    /// Certificates and Issuers before cert-manager runs, as a Helm install of both at once does.
    pub fn apply_crds(cp: &ControlPlane) -> Result<()> {
        cache::ensure_built(Group::CertManager)?;
        let dir = cache_dir().join("share/cert-manager/crds");
        let mut crds = String::new();
        for entry in std::fs::read_dir(&dir).with_context(|| {
            format!(
                "cert-manager: no CRDs in {} (rerun build.sh)",
                dir.display()
            )
        })? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "yaml") {
                crds.push_str("\n---\n");
                crds.push_str(&std::fs::read_to_string(&path)?);
            }
        }
        // Server-side: the CRDs are large (client-side apply copies each into an annotation).
        cp.with_log(
            "kube-apiserver",
            cp.kubectl_stdin(
                [
                    "apply",
                    "--server-side",
                    "--field-manager=cert-manager",
                    "-f",
                    "-",
                ],
                &crds,
            )
            .and_then(|_| {
                cp.wait_crds_established(&[
                    "certificates.cert-manager.io",
                    "certificaterequests.cert-manager.io",
                    "issuers.cert-manager.io",
                    "clusterissuers.cert-manager.io",
                ])
            }),
        )
    }

    /// Builds cert-manager if needed (`build.sh certmanager`), applies its CRDs (see
    /// [`CertManager::apply_crds`]) and starts the controller and the CA injector. Both list
    /// what exists when they start, so objects may be created before or after this.
    pub fn start(cp: &'cp ControlPlane) -> Result<CertManager<'cp>> {
        Self::apply_crds(cp)?;
        let work = cp.work_dir().join("cert-manager");
        std::fs::create_dir_all(&work)?;
        let cm = CertManager {
            cp,
            procs: Mutex::new(Vec::new()),
            work,
        };
        let kubeconfig = format!("--kubeconfig={}", cp.kubeconfig().display());
        for (name, sub) in [(CONTROLLER, "controller"), (CAINJECTOR, "cainjector")] {
            spawn_into(
                &cm.procs,
                &cm.work,
                name,
                &bin("certmanager"),
                vec![sub.into(), kubeconfig.clone(), "-v=2".into()],
                vec![],
            )?;
        }
        Ok(cm)
    }

    /// Fails, with the end of its log, if a cert-manager process has exited: for a test's own
    /// waits on what cert-manager should do.
    pub fn check_running(&self) -> Result<()> {
        for p in lock(&self.procs).iter_mut() {
            if p.exited().is_some() {
                return Err(p.died("while the test needed it"));
            }
        }
        Ok(())
    }

    /// The log of `cert-manager-controller` or `cert-manager-cainjector`.
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.work.join(format!("{component}.log"))
    }

    /// Waits until Certificate `namespace/name` is Ready with its Secret's current revision
    /// at least `min_revision` (`status.revision`: 1 after the first issuance, one more per
    /// re-issuance); fails early if a cert-manager process exits, and after `timeout` with the
    /// Certificate and the controller's log. Returns the Certificate.
    pub fn wait_certificate(
        &self,
        namespace: &str,
        name: &str,
        min_revision: u64,
        timeout: Duration,
    ) -> Result<Value> {
        let log = self.log_path(CONTROLLER);
        wait_for(
            &self.procs,
            &format!("Certificate {namespace}/{name} Ready at revision >= {min_revision}"),
            timeout,
            (CONTROLLER, &log),
            || {
                let crt = self.certificate(namespace, name)?;
                let ready = crt["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                let revision = crt["status"]["revision"].as_u64().unwrap_or(0);
                if ready && revision >= min_revision {
                    Ok(Some(crt))
                } else {
                    bail!(
                        "revision {revision}, conditions {}",
                        crt["status"]["conditions"]
                    )
                }
            },
        )
    }

    /// Certificate `namespace/name` as the API server has it.
    fn certificate(&self, namespace: &str, name: &str) -> Result<Value> {
        let out = self.cp.kubectl_ok([
            "get",
            "certificates.cert-manager.io",
            name,
            "-n",
            namespace,
            "-o",
            "json",
        ])?;
        Ok(serde_json::from_str(&out)?)
    }

    /// What `cmctl renew` does: the Certificate gets the condition `Issuing=True` (reason
    /// `ManuallyTriggered`), and the controller re-issues it as it does when the renewal time
    /// comes. Does nothing if it is already issuing.
    pub fn renew(&self, namespace: &str, name: &str) -> Result<()> {
        let crt = self.certificate(namespace, name)?;
        let conditions = crt["status"]["conditions"].as_array();
        if conditions
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Issuing" && c["status"] == "True")
        {
            return Ok(());
        }
        let issuing = json!({
            "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
            "message": "Certificate re-issuance manually triggered",
            "lastTransitionTime": now_rfc3339()?,
            "observedGeneration": crt["metadata"]["generation"],
        });
        let patch = match conditions {
            Some(_) => json!([{"op": "add", "path": "/status/conditions/-", "value": issuing}]),
            None => json!([{"op": "add", "path": "/status/conditions", "value": [issuing]}]),
        };
        self.cp.kubectl_ok([
            "patch",
            "certificates.cert-manager.io",
            name,
            "-n",
            namespace,
            "--subresource=status",
            "--type=json",
            "-p",
            &patch.to_string(),
        ])?;
        Ok(())
    }

    /// Freezes the CA injector (SIGSTOP): the webhooks' `caBundle` stays as it is until
    /// [`CertManager::resume_cainjector`], as when cainjector lags behind a new Secret.
    pub fn pause_cainjector(&self) {
        self.signal_cainjector("STOP");
    }

    pub fn resume_cainjector(&self) {
        self.signal_cainjector("CONT");
    }

    fn signal_cainjector(&self, signal: &str) {
        for p in lock(&self.procs).iter() {
            if p.name == CAINJECTOR {
                signal_group(p.child.id(), signal);
            }
        }
    }
}

impl Drop for CertManager<'_> {
    fn drop(&mut self) {
        // A stopped process ignores SIGTERM until continued.
        self.resume_cainjector();
        process::stop_all(&mut lock(&self.procs));
    }
}

/// The current UTC time as RFC 3339 (`date -u`: std has no calendar).
fn now_rfc3339() -> Result<String> {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .context("cannot run date")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
