//! Where build.sh puts the binaries, and running it when they are missing or stale.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Result, anyhow};

/// The build cache: `$RESTORE_HOOKS_REALCP_CACHE`, else `~/.cache/restore-hooks-realcp`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RESTORE_HOOKS_REALCP_CACHE").filter(|d| !d.is_empty()) {
        return dir.into();
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("restore-hooks-realcp")
}

/// The kubectl built from the same Kubernetes as the control plane (built first when missing):
/// the one the tests use, never whatever `kubectl` is on `PATH`, which may be outside the
/// supported version skew.
pub fn pinned_kubectl() -> Result<PathBuf> {
    ensure_built(Group::ControlPlane)?;
    Ok(bin("kubectl"))
}

pub(crate) fn bin(name: &str) -> PathBuf {
    cache_dir().join("bin").join(name)
}

#[derive(Clone, Copy)]
pub(crate) enum Group {
    ControlPlane,
    /// kube-apiserver of the oldest supported Kubernetes minor (`controlplane-floor/`).
    Floor,
    Velero,
    CertManager,
    Prometheus,
}

impl Group {
    fn arg(self) -> &'static str {
        match self {
            Group::ControlPlane => "controlplane",
            Group::Floor => "floor",
            Group::Velero => "velero",
            Group::CertManager => "certmanager",
            Group::Prometheus => "prometheus",
        }
    }
}

/// Runs `build.sh --quiet GROUP` once per test process. On a warm cache it only hashes the
/// pins and prints nothing; otherwise it builds under build.sh's own flock (so concurrent test
/// binaries wait for one build) with its output going straight to this process's stderr, where
/// libtest does not capture it, so a cold build shows its progress. The outcome is memoized:
/// a failed build is not retried by every test in the binary.
pub(crate) fn ensure_built(group: Group) -> Result<()> {
    static CONTROL_PLANE: OnceLock<Result<(), String>> = OnceLock::new();
    static FLOOR: OnceLock<Result<(), String>> = OnceLock::new();
    static VELERO: OnceLock<Result<(), String>> = OnceLock::new();
    static CERT_MANAGER: OnceLock<Result<(), String>> = OnceLock::new();
    static PROMETHEUS: OnceLock<Result<(), String>> = OnceLock::new();
    let cell = match group {
        Group::ControlPlane => &CONTROL_PLANE,
        Group::Floor => &FLOOR,
        Group::Velero => &VELERO,
        Group::CertManager => &CERT_MANAGER,
        Group::Prometheus => &PROMETHEUS,
    };
    cell.get_or_init(|| run_build(group))
        .clone()
        .map_err(|e| anyhow!(e))
}

fn run_build(group: Group) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("build.sh");
    let mut child = Command::new("bash")
        .arg(&script)
        .arg("--quiet")
        .arg(group.arg())
        .env("RESTORE_HOOKS_REALCP_CACHE", cache_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("realcp: cannot run `bash {}`: {e}", script.display()))?;
    // Both streams go to the real stderr as they come (io::stderr, not eprintln!, which libtest
    // would hold back until the test ends), and the end of them into the error.
    let streams = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    let last = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    let readers: Vec<_> = streams
        .into_iter()
        .flatten()
        .map(|stream| {
            let last = last.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = writeln!(std::io::stderr(), "{line}");
                    let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
                    if last.len() == 30 {
                        last.pop_front();
                    }
                    last.push_back(line);
                }
            })
        })
        .collect();
    let status = child
        .wait()
        .map_err(|e| format!("realcp: waiting for build.sh: {e}"))?;
    for r in readers {
        let _ = r.join();
    }
    if status.success() {
        return Ok(());
    }
    let last = last.lock().unwrap_or_else(|e| e.into_inner());
    Err(format!(
        "realcp: building the {} binaries failed: `bash {} {}` exited with {status}; the cache \
         is {}. Its last lines:\n{}",
        group.arg(),
        script.display(),
        group.arg(),
        cache_dir().display(),
        Vec::from(last.clone()).join("\n")
    ))
}
