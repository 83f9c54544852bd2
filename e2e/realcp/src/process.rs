//! Child processes that cannot outlive the test: own process group, killed on drop, and
//! killed by the kernel if the test process dies first.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::util::tail;

/// How long a component gets to exit on SIGTERM before its process group gets SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

pub(crate) struct Proc {
    pub(crate) name: String,
    pub(crate) log: PathBuf,
    pub(crate) child: Child,
    exited: Option<ExitStatus>,
}

pub(crate) struct Spec<'a> {
    pub(crate) name: &'a str,
    pub(crate) program: &'a Path,
    pub(crate) args: Vec<OsString>,
    pub(crate) cwd: &'a Path,
    pub(crate) env: Vec<(&'a str, OsString)>,
    /// Start from an empty environment (only `env`), instead of inheriting this process's.
    pub(crate) clear_env: bool,
    pub(crate) log: PathBuf,
    /// Append to `log` instead of truncating it: a component started again (see
    /// `ControlPlane::start_apiserver`) keeps its earlier output in the same file.
    pub(crate) append: bool,
}

impl Proc {
    pub(crate) fn spawn(spec: Spec<'_>) -> Result<Proc> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(spec.append)
            .truncate(!spec.append)
            .open(&spec.log)
            .with_context(|| format!("{}: cannot create {}", spec.name, spec.log.display()))?;
        let mut cmd = match setpriv() {
            // The kernel sends SIGKILL when the parent dies: a test process that is itself killed
            // (a CI timeout, ^C) leaves no apiserver behind. setpriv sets PR_SET_PDEATHSIG and
            // execs, and the setting survives exec.
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(spec.program);
                c
            }
            None => Command::new(spec.program),
        };
        if spec.clear_env {
            cmd.env_clear();
        }
        cmd.args(&spec.args)
            .current_dir(spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own group, so teardown reaches what it forks too (Velero's plugin processes).
            .process_group(0);
        let child = spawn_on_keeper_thread(cmd).with_context(|| {
            format!(
                "{}: cannot start {} (is the cache at {} complete? rerun e2e/realcp/build.sh)",
                spec.name,
                spec.program.display(),
                crate::cache_dir().display()
            )
        })?;
        Ok(Proc {
            name: spec.name.to_string(),
            log: spec.log,
            child,
            exited: None,
        })
    }

    /// `Some(status)` once the process has exited (it is reaped then).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// SIGKILL to its process group, then reaped.
    pub(crate) fn kill(&mut self) {
        signal_group(self.child.id(), "KILL");
        if self.exited.is_none() {
            self.exited = self.child.wait().ok();
        }
    }

    /// The error for a component that died: its status and the end of its log.
    pub(crate) fn died(&mut self, during: &str) -> anyhow::Error {
        let status = self
            .exited()
            .map_or("an unknown status".to_string(), |s| s.to_string());
        anyhow::anyhow!(
            "{} exited ({status}) {during}; last lines of {} (REALCP_KEEP=1 keeps it):\n{}",
            self.name,
            self.log.display(),
            tail(&self.log, 30)
        )
    }
}

/// Stops the processes in the reverse of their start order, each with SIGTERM, up to [`GRACE`]
/// to exit, then SIGKILL to its group (also when the leader exited: a child of it may still
/// hold a port). The order matters: etcd's graceful stop waits for its clients' watch streams,
/// and the apiserver's for its clients, so stopping etcd first stalls both for the whole grace.
pub(crate) fn stop_all(procs: &mut [Proc]) {
    for p in procs.iter_mut().rev() {
        if p.exited().is_none() {
            signal_group(p.child.id(), "TERM");
            let deadline = Instant::now() + GRACE;
            while Instant::now() < deadline && p.exited().is_none() {
                thread::sleep(Duration::from_millis(20));
            }
        }
        signal_group(p.child.id(), "KILL");
        if p.exited.is_none() {
            p.exited = p.child.wait().ok();
        }
    }
}

/// Signals a process group through kill(1): std has no killpg, and the crate forbids unsafe.
pub(crate) fn signal_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, "--", &format!("-{pgid}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            let found = ["/usr/bin/setpriv", "/bin/setpriv"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.exists());
            if found.is_none() {
                eprintln!(
                    "realcp: setpriv (util-linux) not found: components will be stopped on drop, \
                     but not if the test process is killed"
                );
            }
            found
        })
        .as_deref()
}

type Job = (Command, mpsc::Sender<io::Result<Child>>);

/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process, and
/// libtest runs each test on a thread of its own that ends with the test. So every child is
/// forked by one thread that lives as long as the test process.
fn spawn_on_keeper_thread(cmd: Command) -> io::Result<Child> {
    static KEEPER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("realcp-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("realcp: cannot start the process spawner thread");
        tx
    });
    let (reply, result) = mpsc::channel();
    keeper
        .send((cmd, reply))
        .map_err(|_| io::Error::other("realcp: the process spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("realcp: the process spawner thread is gone"))?
}
