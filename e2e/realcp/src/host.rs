//! Processes a test runs on this host next to the control plane (the product under test, say),
//! with the components' guarantees: their own process group, killed by the kernel if the test
//! process dies (`setpriv --pdeathsig KILL`, forked by the long-lived spawner thread), and killed
//! when dropped, a panic included.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::process::{Proc, Spec, signal_group};
use crate::util::tail;

/// What to run: see [`HostProcess::spawn`].
#[derive(Clone, Debug)]
pub struct HostCommand {
    /// A short name for messages.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Added to the environment.
    pub env: Vec<(String, OsString)>,
    /// Start from an empty environment (only `env`): nothing of the test's own environment
    /// (an admin `KUBECONFIG`, `RUST_LOG`, ...) leaks into the process.
    pub clear_env: bool,
    pub cwd: PathBuf,
    /// stdout and stderr both go here (created or truncated).
    pub log: PathBuf,
}

impl HostCommand {
    pub fn new(name: &str, program: impl Into<PathBuf>, cwd: &Path, log: PathBuf) -> Self {
        HostCommand {
            name: name.to_string(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            clear_env: false,
            cwd: cwd.to_path_buf(),
            log,
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }

    pub fn clear_env(mut self) -> Self {
        self.clear_env = true;
        self
    }
}

/// A running [`HostCommand`]. Dropping it sends SIGKILL to its process group and reaps it; use
/// [`HostProcess::terminate`] for a graceful stop.
pub struct HostProcess {
    proc: Proc,
}

impl HostProcess {
    pub fn spawn(cmd: &HostCommand) -> Result<HostProcess> {
        let proc = Proc::spawn(Spec {
            name: &cmd.name,
            program: &cmd.program,
            args: cmd.args.clone(),
            cwd: &cmd.cwd,
            env: cmd
                .env
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect(),
            clear_env: cmd.clear_env,
            log: cmd.log.clone(),
            append: false,
        })?;
        Ok(HostProcess { proc })
    }

    pub fn name(&self) -> &str {
        &self.proc.name
    }

    /// The process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.proc.log
    }

    /// Its log so far (lossy UTF-8).
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.proc.log).unwrap_or_default()).into_owned()
    }

    /// The last `n` lines of its log, for messages.
    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.proc.log, n)
    }

    /// `Some(status)` once it has exited (it is reaped then).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.proc.exited()
    }

    /// Sends `signal` (a kill(1) name: `TERM`, `KILL`, `STOP`, ...) to its process group.
    pub fn signal(&self, signal: &str) {
        signal_group(self.pid(), signal);
    }

    /// Waits up to `timeout` for it to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL to the group, then reaps it.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.signal("KILL");
        self.wait_exit(Duration::from_secs(30))
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL: its exit status, and whether it exited by
    /// itself within the grace.
    pub fn terminate(&mut self, grace: Duration) -> (Option<ExitStatus>, bool) {
        self.signal("TERM");
        if let Some(status) = self.wait_exit(grace) {
            // Whatever it forked and left behind.
            self.signal("KILL");
            return (Some(status), true);
        }
        (self.kill(), false)
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        // Also when it already exited: something it forked may still hold a port.
        self.signal("KILL");
        if self.proc.exited().is_none() {
            let _ = self.wait_exit(Duration::from_secs(30));
        }
    }
}
