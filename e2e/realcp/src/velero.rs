use std::ffi::{OsStr, OsString};
use std::fs::{File, TryLockError};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use restore_hooks_testkit::try_wait_until;
use serde_json::json;

use crate::cache::{self, Group, bin, cache_dir};
use crate::controlplane::{ControlPlane, checked, lock, spawn_into, wait_for};
use crate::process::{self, Proc};
use crate::util::{free_port, http_get, tail};

/// Velero's controller-runtime manager serves metrics on this port on all interfaces, with no
/// flag to move it (`--metrics-address` is Velero's own, second, metrics server).
const FIXED_PORT: u16 = 8080;
const TIMEOUT: Duration = Duration::from_secs(180);

/// Velero v1.18 running out of cluster against a [`ControlPlane`], with moto as its S3 store:
/// Velero's CRDs, namespace `velero`, BackupStorageLocation `default` Available. Only one runs
/// per machine at a time (see [`FIXED_PORT`]): `start` waits for a machine-wide lock.
pub struct Velero<'cp> {
    cp: &'cp ControlPlane,
    procs: Mutex<Vec<Proc>>,
    work: PathBuf,
    s3_port: u16,
    _machine_lock: File,
}

impl<'cp> Velero<'cp> {
    pub const NAMESPACE: &'static str = "velero";

    pub fn start(cp: &'cp ControlPlane) -> Result<Velero<'cp>> {
        Self::start_with(cp, &[])
    }

    /// Velero's CRDs (as `velero install --crds-only` writes them) and its namespace, without a
    /// server: for tests that write Velero objects themselves, playing Velero.
    pub fn install_crds(cp: &ControlPlane) -> Result<()> {
        cache::ensure_built(Group::Velero)?;
        let home = cp.work_dir().join("velero-cli");
        std::fs::create_dir_all(&home)?;
        let args = ["install", "--crds-only", "--dry-run", "-o", "yaml"];
        let out = Command::new(bin("velero"))
            .args(args)
            .env("HOME", &home)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("realcp: cannot run {}", bin("velero").display()))?;
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let crds = checked(&args, out).map_err(|e| anyhow!("{e:#}").context("velero CLI"))?;
        cp.with_log(
            "kube-apiserver",
            cp.kubectl_stdin(["apply", "--server-side", "-f", "-"], &crds)
                .and_then(|_| cp.wait_crds_established(&[])),
        )?;
        cp.apply(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": Self::NAMESPACE}})
                .to_string(),
        )?;
        Ok(())
    }

    /// [`Velero::start`] with more `velero server` flags, e.g.
    /// `--restore-resource-priorities=...`.
    pub fn start_with(cp: &'cp ControlPlane, server_flags: &[String]) -> Result<Velero<'cp>> {
        cache::ensure_built(Group::Velero)?;
        let machine_lock = machine_lock()?;
        if let Err(e) = TcpListener::bind(("0.0.0.0", FIXED_PORT)) {
            bail!(
                "velero: port {FIXED_PORT} is taken ({e}) by something other than a realcp \
                 Velero: Velero's controller-runtime metrics listen on :{FIXED_PORT}, fixed. Stop \
                 whatever listens there (ss -ltnp 'sport = :{FIXED_PORT}')"
            );
        }
        let work = cp.work_dir().join("velero");
        std::fs::create_dir_all(&work)?;
        let s3_port = free_port()?;
        let v = Velero {
            cp,
            procs: Mutex::new(Vec::new()),
            work,
            s3_port,
            _machine_lock: machine_lock,
        };
        let venv = cache_dir().join("venv").join("bin");

        v.spawn(
            "moto",
            &venv.join("moto_server"),
            vec![
                "-H".into(),
                "127.0.0.1".into(),
                "-p".into(),
                s3_port.to_string(),
            ],
            vec![],
        )?;
        v.wait_for("moto S3", "moto", || {
            Ok((http_get(s3_port, "/")?.0 == 200).then_some(()))
        })?;
        let made = Command::new(venv.join("python"))
            .args([
                "-c",
                "import boto3, sys; boto3.client('s3', endpoint_url=sys.argv[1], \
                 aws_access_key_id='test', aws_secret_access_key='test', \
                 region_name='us-east-1').create_bucket(Bucket='velero')",
                &v.s3_url(),
            ])
            .stdin(Stdio::null())
            .output()
            .context("moto: cannot run the venv's python")?;
        if !made.status.success() {
            bail!(
                "moto: creating bucket `velero` failed: {}\nlast lines of {}:\n{}",
                String::from_utf8_lossy(&made.stderr).trim(),
                v.log_path("moto").display(),
                tail(&v.log_path("moto"), 30)
            );
        }

        let crds = v.velero_ok(["install", "--crds-only", "--dry-run", "-o", "yaml"])?;
        // Server-side: the CRDs are large, and client-side apply would copy each into its
        // last-applied annotation.
        cp.with_log(
            "kube-apiserver",
            cp.kubectl_stdin(["apply", "--server-side", "-f", "-"], &crds)
                .and_then(|_| cp.wait_crds_established(&[])),
        )?;
        let version = v.client_version()?;
        let objects = cp.apply(
            &json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": Self::NAMESPACE}},
                    // A restore looks up Velero's own Deployment (for the image of its restore
                    // helpers); without it a restore ends PartiallyFailed and restores no pods.
                    // Replicas 0: the server runs out of cluster, this only has to exist.
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": "velero", "namespace": Self::NAMESPACE,
                                     "labels": {"component": "velero"}},
                        "spec": {
                            "replicas": 0,
                            "selector": {"matchLabels": {"deploy": "velero"}},
                            "template": {
                                "metadata": {"labels": {"component": "velero", "deploy": "velero"}},
                                "spec": {"containers": [{
                                    "name": "velero",
                                    "image": format!("velero/velero:{version}"),
                                }]},
                            },
                        },
                    },
                    {
                        "apiVersion": "velero.io/v1",
                        "kind": "BackupStorageLocation",
                        "metadata": {"name": "default", "namespace": Self::NAMESPACE},
                        "spec": {
                            "provider": "aws",
                            "default": true,
                            "objectStorage": {"bucket": "velero"},
                            "config": {
                                "region": "us-east-1",
                                "s3ForcePathStyle": "true",
                                "s3Url": v.s3_url(),
                            },
                        },
                    },
                ],
            })
            .to_string(),
        );
        cp.with_log("kube-apiserver", objects)?;

        let creds = v.work.join("credentials");
        std::fs::write(
            &creds,
            "[default]\naws_access_key_id=test\naws_secret_access_key=test\n",
        )?;
        let mut server_args: Vec<String> = vec![
            "server".into(),
            format!("--kubeconfig={}", cp.kubeconfig().display()),
            format!("--namespace={}", Self::NAMESPACE),
            format!("--plugin-dir={}", cache_dir().join("plugins").display()),
            format!("--metrics-address=127.0.0.1:{}", free_port()?),
            format!("--profiler-address=127.0.0.1:{}", free_port()?),
        ];
        server_args.extend_from_slice(server_flags);
        v.spawn(
            "velero",
            &bin("velero"),
            server_args,
            vec![
                ("AWS_SHARED_CREDENTIALS_FILE", creds.into()),
                ("AWS_REGION", "us-east-1".into()),
                // Never ask the EC2 instance-metadata address for credentials or a region.
                ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ],
        )?;
        v.wait_for("BackupStorageLocation default Available", "velero", || {
            let phase = v.phase("backupstoragelocation", "default")?;
            Ok((phase == "Available").then_some(()))
        })?;
        Ok(v)
    }

    /// `status.phase` of Velero's object `kind` (`backups.velero.io`, ...) named `name`.
    pub fn phase(&self, kind: &str, name: &str) -> Result<String> {
        self.cp.kubectl_ok([
            "get",
            kind,
            name,
            "-n",
            Self::NAMESPACE,
            "-o",
            "jsonpath={.status.phase}",
        ])
    }

    /// The velero CLI (`--kubeconfig` admin, `--namespace velero`), e.g.
    /// `["backup", "create", "b1", "--include-namespaces", "demo", "--wait"]`.
    pub fn velero<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.velero_command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("realcp: cannot run {}: {e}", bin("velero").display()))
    }

    /// The velero CLI; its stdout, or an error with its stderr.
    pub fn velero_ok<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        checked(&args, self.velero(&args)).map_err(|e| anyhow!("{e:#}").context("velero CLI"))
    }

    /// The S3 endpoint, `http://127.0.0.1:PORT`.
    pub fn s3_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    /// `velero` (the server) or `moto`.
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.work.join(format!("{component}.log"))
    }

    fn velero_command(&self) -> Command {
        let mut c = Command::new(bin("velero"));
        c.arg(format!("--kubeconfig={}", self.cp.kubeconfig().display()))
            .arg(format!("--namespace={}", Self::NAMESPACE))
            // The CLI reads ~/.config/velero/config.json; a developer's own must not leak in.
            .env("HOME", &self.work);
        c
    }

    fn client_version(&self) -> Result<String> {
        let out = self.velero_ok(["version", "--client-only"])?;
        out.lines()
            .find_map(|l| l.trim().strip_prefix("Version:"))
            .map(|v| v.trim().to_string())
            .with_context(|| format!("velero: no version in `velero version`: {out}"))
    }

    fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: Vec<String>,
        env: Vec<(&str, OsString)>,
    ) -> Result<()> {
        spawn_into(&self.procs, &self.work, name, program, args, env)
    }

    fn wait_for<T>(
        &self,
        what: &str,
        blame: &str,
        probe: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        let log = self.log_path(blame);
        wait_for(&self.procs, what, TIMEOUT, (blame, &log), probe)
    }
}

impl Drop for Velero<'_> {
    fn drop(&mut self) {
        process::stop_all(&mut lock(&self.procs));
    }
}

/// A lock file every realcp Velero on this machine shares, whatever its cache dir: the fixed
/// port is per machine. Held (by the open file) until the [`Velero`] is dropped.
fn machine_lock() -> Result<File> {
    let path = std::env::temp_dir().join("restore-hooks-realcp-velero.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("velero: cannot open {}", path.display()))?;
    let mut told = false;
    let locked = try_wait_until(
        format_args!("the lock on {}", path.display()),
        Duration::from_secs(30 * 60),
        || match file.try_lock() {
            Ok(()) => Ok(Ok(())),
            Err(TryLockError::WouldBlock) => {
                if !told {
                    eprintln!(
                        "realcp: waiting for another Velero on this machine ({})",
                        path.display()
                    );
                    told = true;
                }
                Err("held by another Velero on this machine")
            }
            Err(TryLockError::Error(e)) => Ok(Err(e)),
        },
    );
    match locked {
        Ok(Ok(())) => Ok(file),
        Ok(Err(e)) => Err(e).with_context(|| format!("velero: cannot lock {}", path.display())),
        Err(timed_out) => bail!("velero: {timed_out}"),
    }
}
