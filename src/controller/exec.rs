//! Running one command in a container: the [`Exec`] trait, its Kubernetes implementation
//! (`pods/exec` over WebSocket) and a scripted fake for tests.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use crate::hooks::duration::format_go_duration as go_duration;
use restore_hooks_core::hooks::ephemeral::{self, EphemeralEnd, TargetEnv};
use restore_hooks_core::hooks::plan::EphemeralPlan;
use restore_hooks_core::retry::Failure;

/// How much of each output stream is kept (docs/behaviour.md §5.3: "the last 1 KiB").
pub const TAIL_BYTES: usize = 1024;

/// What happened to one exec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutcome {
    /// The process' exit code, when the API server reported one.
    pub exit_code: Option<i32>,
    /// The last [`TAIL_BYTES`] of stdout, cut on a UTF-8 character boundary.
    pub stdout_tail: String,
    /// The last [`TAIL_BYTES`] of stderr, cut the same way.
    pub stderr_tail: String,
    /// Why the exec did not complete normally (could not start, broken stream, timeout). A
    /// non-zero exit is not an error here: `exit_code` says it.
    pub error: Option<String>,
    /// The exec outlived its timeout and was abandoned; the command may still be running in the
    /// container (the API server cannot kill it).
    pub timed_out: bool,
    /// The exec was refused before its stream opened: the command did not start.
    pub not_started: bool,
    /// ... because the API server was unavailable (no answer, a server error, 429, or a 403
    /// while it was still starting), not because it refused the exec for good.
    pub unavailable: bool,
}

impl ExecOutcome {
    /// Exit code 0 and no error: the hook succeeded.
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.exit_code == Some(0)
    }

    /// The operator-facing message for the hook status: empty on success.
    pub fn message(&self) -> String {
        match (&self.error, self.exit_code) {
            (Some(e), _) => e.clone(),
            (None, Some(0)) => String::new(),
            (None, Some(code)) => format!("command terminated with exit code {code}"),
            (None, None) => "the exec ended without an exit status".to_string(),
        }
    }

    /// How it failed, for `retry` (docs/behaviour.md §6.17); `None` when it succeeded.
    pub fn failure(&self) -> Option<Failure> {
        if self.succeeded() {
            return None;
        }
        Some(
            match (
                self.not_started,
                self.timed_out,
                &self.error,
                self.exit_code,
            ) {
                (true, ..) if self.unavailable => Failure::Unavailable,
                (true, ..) => Failure::NotStarted,
                (_, true, ..) => Failure::TimedOut,
                (_, _, None, Some(code)) => Failure::Exited(code),
                // No exit status: the command may have run, wholly or in part.
                _ => Failure::StreamBroke,
            },
        )
    }

    /// An exec whose upgrade the API server or the kubelet refused, or that got no answer at
    /// all (`error`): the command did not start.
    pub fn not_started(message: impl Into<String>, error: &kube::Error) -> Self {
        ExecOutcome {
            not_started: true,
            unavailable: crate::backoff::is_transient(error),
            ..Self::failed(message)
        }
    }

    /// An exec that did not run or did not complete, with the operator-facing reason.
    pub fn failed(error: impl Into<String>) -> Self {
        ExecOutcome {
            error: Some(error.into()),
            ..Default::default()
        }
    }
}

/// Runs a command in a container of a pod and waits for it, at most `timeout`.
pub trait Exec: Send + Sync {
    /// Runs the request's command (argv, no shell, no stdin, no TTY) in its container.
    /// Never fails: whatever goes wrong, including the timeout, is in the [`ExecOutcome`].
    fn exec<'a>(&'a self, request: ExecRequest<'a>) -> BoxFuture<'a, ExecOutcome>;
}

/// One hook's exec: where, what, and for how long at most.
#[derive(Clone, Copy, Debug)]
pub struct ExecRequest<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's name.
    pub pod: &'a str,
    /// The container to run in.
    pub container: &'a str,
    /// The argv, run as given.
    pub command: &'a [String],
    /// The hook's execTimeout: the exec is abandoned after it (the process may go on).
    pub timeout: Duration,
    /// Run the command in this ephemeral container, targeting `container`, instead of exec'ing
    /// into `container` (docs/behaviour.md §6.18).
    pub ephemeral: Option<Ephemeral<'a>>,
}

/// An ephemeral container to run a hook's command in.
#[derive(Clone, Copy, Debug)]
pub struct Ephemeral<'a> {
    /// Its name: unique per hook and attempt (an ephemeral container cannot be removed or
    /// restarted, so every attempt is a new one).
    pub name: &'a str,
    /// Its image, the pod's volumes it mounts, its securityContext and environment.
    pub plan: &'a EphemeralPlan,
}

/// `pods/{name}/exec` through the kube client (WebSocket, `v5.channel.k8s.io` preferred).
#[derive(Clone)]
pub struct KubeExec {
    client: kube::Client,
}

impl KubeExec {
    /// Execs with `client`'s identity: the controller's ServiceAccount needs `create` on
    /// `pods/exec`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    async fn run(&self, ns: &str, pod: &str, container: &str, command: &[String]) -> ExecOutcome {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        // No stdin and no TTY: hooks get argv only, as in Velero.
        let params = AttachParams::default()
            .container(container)
            .stdin(false)
            .stdout(true)
            .stderr(true)
            .tty(false);
        let mut attached = match api.exec(pod, command.to_vec(), &params).await {
            Ok(a) => a,
            Err(e) => {
                // The upgrade was refused (forbidden, container not found or not running, 5xx,
                // 429): no stream, no process.
                return ExecOutcome::not_started(
                    format!("exec could not start: {}", start_error(&e)),
                    &e,
                );
            }
        };
        let stdout = attached.stdout();
        let stderr = attached.stderr();
        let status = attached.take_status();
        // The client demultiplexes both streams in one task into small pipes: reading one stream
        // to the end before the other would block that task once the other pipe fills, so both
        // are drained concurrently with waiting for the status.
        //
        // The status future resolves without a status only once that task has ended. When it
        // ended because the connection broke, it returns its error without shutting the pipes
        // (kube-client 5.0 `remote_command.rs`; a dropped `simplex` write half is no EOF), so
        // reads to EOF would wait until the exec timeout: the readers stop on this signal too,
        // after taking what the task wrote before it ended.
        let (ended_tx, ended) = watch::channel(false);
        let (stdout_tail, stderr_tail, status) = tokio::join!(
            read_tail(stdout, ended.clone()),
            read_tail(stderr, ended),
            async move {
                let status = match status {
                    Some(s) => s.await,
                    None => None,
                };
                if status.is_none() {
                    let _ = ended_tx.send(true);
                }
                status
            }
        );
        let joined = attached.join().await;
        let mut outcome = ExecOutcome {
            stdout_tail,
            stderr_tail,
            ..Default::default()
        };
        match status {
            Some(s) => match exit_code(&s) {
                Ok(code) => outcome.exit_code = Some(code),
                Err(msg) => outcome.error = Some(msg),
            },
            None => {
                outcome.error = Some(match joined {
                    Err(e) => format!("the exec stream broke before an exit status: {e}"),
                    Ok(()) => "the exec stream ended without an exit status".to_string(),
                })
            }
        }
        outcome
    }
}

impl KubeExec {
    /// Adds the hook's ephemeral container (`pods/ephemeralcontainers`) and waits until it
    /// terminated: its exit code is the hook's. The container's output stays in its log
    /// (`kubectl logs <pod> -c <name>`): reading it would need `get pods/log` too. While it waits
    /// to start, `waiting` holds why (what a timeout reports).
    async fn run_ephemeral(
        &self,
        ns: &str,
        pod: &str,
        target: &str,
        command: &[String],
        ephemeral: Ephemeral<'_>,
        waiting: &Mutex<Option<String>>,
    ) -> ExecOutcome {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let name = ephemeral.name;
        let target_env = if ephemeral.plan.copy_target_env {
            match self.target_env(&api, pod, target).await {
                Ok(env) => Some(env),
                Err(outcome) => return outcome,
            }
        } else {
            None
        };
        let container =
            ephemeral::container(name, target, command, ephemeral.plan, target_env.as_ref());
        // A strategic merge patch appends by name: no read of the current list, no race with
        // another writer of it.
        let patch = serde_json::json!({"spec": {"ephemeralContainers": [container]}});
        if let Err(e) = api
            .patch_ephemeral_containers(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            let refused = || {
                ExecOutcome::not_started(
                    format!(
                        "ephemeral container {name} could not be added: {}",
                        start_error(&e)
                    ),
                    &e,
                )
            };
            if was_refused(&e) {
                return refused();
            }
            // No answer, or a server error: the container may have been added all the same.
            // Only the pod says, and it is asked before anything else happens: an attempt whose
            // container exists is waited for, never tried again with a second one
            // (docs/behaviour.md §6.18).
            tracing::warn!(pod, namespace = ns, container = name, error = %e, "adding an ephemeral container got no clear answer; reading the pod to see whether it was added");
            if !self.ephemeral_added(&api, pod, name).await {
                return refused();
            }
        }
        let ended = move |p: Option<&Pod>| {
            *waiting.lock().unwrap() = p.and_then(|p| ephemeral::waiting(p, name));
            ephemeral::ended(p, name).is_some()
        };
        // A watch that fails is watched again (the exec timeout bounds it all): the container
        // runs on whatever this process sees of it.
        let seen = loop {
            match await_condition(api.clone(), pod, ended).await {
                Ok(seen) => break seen,
                Err(e) => {
                    tracing::warn!(pod, namespace = ns, container = name, error = %e, "watching an ephemeral container failed; watching again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        match ephemeral::ended(seen.as_ref(), name) {
            Some(EphemeralEnd::Exited(code)) => ExecOutcome {
                exit_code: Some(code),
                ..Default::default()
            },
            // The kubelet will never start it: the command did not run.
            Some(EphemeralEnd::Refused(why)) => ExecOutcome {
                not_started: true,
                ..ExecOutcome::failed(why)
            },
            Some(EphemeralEnd::Lost(why)) => ExecOutcome::failed(why),
            None => ExecOutcome::failed(format!("ephemeral container {name}: no end seen")),
        }
    }

    /// The target container's `env` and `envFrom`, read from the pod for `copyTargetEnv`
    /// (docs/behaviour.md §6.18): a pod's containers cannot change, so they are what the pod
    /// was admitted with. Otherwise the outcome of an attempt that did not start.
    async fn target_env(
        &self,
        api: &Api<Pod>,
        pod: &str,
        target: &str,
    ) -> Result<TargetEnv, ExecOutcome> {
        let not_started = |error: String| ExecOutcome {
            not_started: true,
            ..ExecOutcome::failed(error)
        };
        match api.get_opt(pod).await {
            Ok(Some(found)) => ephemeral::target_env(&found, target).map_err(not_started),
            Ok(None) => Err(not_started(
                "the pod was deleted before its hook's ephemeral container was added".to_string(),
            )),
            Err(e) => Err(ExecOutcome::not_started(
                format!(
                    "the pod could not be read to copy container {target}'s env (copyTargetEnv): {}",
                    start_error(&e)
                ),
                &e,
            )),
        }
    }
}

/// Whether the API server answered a request with a refusal that applied nothing: a 4xx status
/// (forbidden, invalid, not found, throttled) other than a timeout. A 5xx, a timeout or no answer
/// at all may come after the change was stored.
fn was_refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 408)
}

impl KubeExec {
    /// Whether the pod has ephemeral container `name`, read until the API server answers (the
    /// hook's exec timeout bounds the wait).
    async fn ephemeral_added(&self, api: &Api<Pod>, pod: &str, name: &str) -> bool {
        let mut backoff = crate::backoff::ApiBackoff::default();
        loop {
            match api.get_opt(pod).await {
                Ok(found) => {
                    return found.is_some_and(|p| {
                        p.spec
                            .and_then(|s| s.ephemeral_containers)
                            .is_some_and(|c| c.iter().any(|c| c.name == name))
                    });
                }
                Err(e) => {
                    let wait = backoff.after(Some(&e));
                    tracing::warn!(pod, container = name, error = %e, retry_in = ?wait, "cannot read the pod to see whether its ephemeral container was added; reading again");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

impl Exec for KubeExec {
    fn exec<'a>(&'a self, request: ExecRequest<'a>) -> BoxFuture<'a, ExecOutcome> {
        let ExecRequest {
            namespace,
            pod,
            container,
            command,
            timeout,
            ephemeral,
        } = request;
        Box::pin(async move {
            let waiting = Mutex::new(None);
            let run = async {
                match ephemeral {
                    Some(e) => {
                        self.run_ephemeral(namespace, pod, container, command, e, &waiting)
                            .await
                    }
                    None => self.run(namespace, pod, container, command).await,
                }
            };
            match tokio::time::timeout(timeout, run).await {
                Ok(outcome) => outcome,
                // Dropping the WebSocket does not kill the remote process (the API server has no
                // way to): the hook may still be running in the container. An ephemeral
                // container that never started may still start (the kubelet tries again, e.g.
                // once a Secret it needs exists): its command may run later.
                Err(_) => {
                    let mut error = format!(
                        "timed out after {}",
                        go_duration(timeout.as_millis() as u64)
                    );
                    if let (Some(e), Some(why)) = (ephemeral, waiting.lock().unwrap().take()) {
                        error.push_str(&format!(
                            "; ephemeral container {} never started: {why}",
                            e.name
                        ));
                    }
                    ExecOutcome {
                        error: Some(error),
                        timed_out: true,
                        ..Default::default()
                    }
                }
            }
        })
    }
}

/// An operator-facing reason an exec did not start: the API server's own message for an API
/// error (`pods "db-0" is forbidden: User ... cannot create resource "pods/exec" ...`), not the
/// client's debug dump of the whole Status.
fn start_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => {
            format!(
                "{} ({}, HTTP {})",
                status.message, status.reason, status.code
            )
        }
        other => other.to_string(),
    }
}

/// The exit code from the final `Status` of an exec.
///
/// A real kubelet reports `Success`, or `NonZeroExitCode` with the code in
/// `details.causes[reason=ExitCode].message`. kwok (and other CRI shims that run the command
/// through Go's `os/exec`) report a non-zero exit as an `InternalError` whose message ends in
/// `exit status N`; that message also repeats the whole command line, which must not end up in
/// Events and annotations (a hook's arguments can carry credentials), so it is reduced to the
/// exit code. Anything else is an error message.
pub fn exit_code(status: &Status) -> Result<i32, String> {
    if status.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    let message = status.message.as_deref().unwrap_or_default();
    let reason = status.reason.as_deref().unwrap_or_default();
    if reason == "NonZeroExitCode" {
        let code = status
            .details
            .iter()
            .flat_map(|d| d.causes.iter().flatten())
            .find(|c| c.reason.as_deref() == Some("ExitCode"))
            .and_then(|c| c.message.as_deref()?.trim().parse::<i32>().ok());
        return code
            .ok_or_else(|| format!("command failed with an unreadable exit code: {message}"));
    }
    if reason == "InternalError"
        && let Some(code) = message
            .rsplit_once("exit status ")
            .and_then(|(_, n)| n.trim().parse::<i32>().ok())
    {
        return Ok(code);
    }
    Err(if message.is_empty() {
        format!("exec failed: {reason}")
    } else {
        format!("exec failed: {message}")
    })
}

/// Reads a stream to its end, or until `ended` says its writer is gone without closing it
/// (then what is buffered is taken without waiting for more).
async fn read_tail(
    reader: Option<impl AsyncRead + Unpin>,
    mut ended: watch::Receiver<bool>,
) -> String {
    let Some(mut reader) = reader else {
        return String::new();
    };
    let mut tail = Tail::default();
    let mut buf = [0u8; 8192];
    let mut writer_gone = false;
    loop {
        tokio::select! {
            biased;
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => tail.push(&buf[..n]),
            },
            _ = ended.wait_for(|e| *e) => {
                writer_gone = true;
                break;
            }
        }
    }
    if writer_gone {
        while let Some(Ok(n @ 1..)) = reader.read(&mut buf).now_or_never() {
            tail.push(&buf[..n]);
        }
    }
    tail.into_string()
}

/// The last [`TAIL_BYTES`] bytes of a stream.
#[derive(Default)]
pub(crate) struct Tail {
    bytes: VecDeque<u8>,
}

impl Tail {
    /// Appends `chunk`, dropping the oldest bytes beyond [`TAIL_BYTES`].
    pub fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(TAIL_BYTES)..];
        let overflow = (self.bytes.len() + chunk.len()).saturating_sub(TAIL_BYTES);
        self.bytes.drain(..overflow);
        self.bytes.extend(chunk);
    }

    /// The tail as text. A cut in the middle of a multi-byte character drops that character's
    /// leading fragment; other invalid bytes become U+FFFD.
    pub fn into_string(self) -> String {
        let bytes: Vec<u8> = self.bytes.into();
        let start = bytes
            .iter()
            .take(3)
            .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
            .count();
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

/// A scripted [`Exec`]: answers each call with the next outcome for its container (default:
/// success) and records every call.
#[derive(Default)]
pub struct FakeExec {
    script: Mutex<Vec<(String, ExecOutcome)>>,
    calls: Mutex<Vec<FakeCall>>,
}

/// One exec a [`FakeExec`] was asked for, as it was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeCall {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container the command was to run in.
    pub container: String,
    /// The argv.
    pub command: Vec<String>,
}

impl FakeExec {
    /// The next exec in `container` returns `outcome`.
    pub fn script(&self, container: &str, outcome: ExecOutcome) {
        self.script
            .lock()
            .unwrap()
            .push((container.to_string(), outcome));
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.calls.lock().unwrap().clone()
    }
}

impl Exec for FakeExec {
    fn exec<'a>(&'a self, request: ExecRequest<'a>) -> BoxFuture<'a, ExecOutcome> {
        self.calls.lock().unwrap().push(FakeCall {
            namespace: request.namespace.to_string(),
            pod: request.pod.to_string(),
            container: request.container.to_string(),
            command: request.command.to_vec(),
        });
        let mut script = self.script.lock().unwrap();
        let outcome = match script.iter().position(|(c, _)| c == request.container) {
            Some(i) => script.remove(i).1,
            None => ExecOutcome {
                exit_code: Some(0),
                ..Default::default()
            },
        };
        Box::pin(async move { outcome })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_the_last_kib_on_a_character_boundary() {
        let mut t = Tail::default();
        t.push(b"x");
        // 'é' is two bytes: 600 of them push the cut into the middle of one.
        t.push("é".repeat(600).as_bytes());
        t.push(b"end");
        let s = t.into_string();
        assert!(s.len() <= TAIL_BYTES);
        assert!(s.ends_with("end"));
        assert!(
            !s.contains('\u{FFFD}'),
            "no replacement character at the cut"
        );
        assert!(s.starts_with('é'));

        let mut big = Tail::default();
        big.push(&vec![b'a'; 5000]);
        assert_eq!(big.into_string().len(), TAIL_BYTES);
    }

    fn status(json: serde_json::Value) -> Status {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn exit_codes_come_from_the_final_status() {
        assert_eq!(
            exit_code(&status(serde_json::json!({"status": "Success"}))),
            Ok(0)
        );
        let non_zero = status(serde_json::json!({
            "status": "Failure", "reason": "NonZeroExitCode",
            "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}
        }));
        assert_eq!(exit_code(&non_zero), Ok(3));
        // kwok's shape, as read from a real kube-apiserver v1.37 proxying to kwok: the command
        // line is in the message, the exit code only at its end.
        let kwok = status(serde_json::json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "code": 500,
            "reason": "InternalError",
            "message": "Internal error occurred: Internal error occurred: error executing command in container: cmd wait: sh -c echo out; exit 3: exit status 3",
            "details": {"causes": [{"message": "Internal error occurred: error executing command in container: cmd wait: sh -c echo out; exit 3: exit status 3"}]}
        }));
        assert_eq!(exit_code(&kwok), Ok(3));
        let internal = status(serde_json::json!({
            "status": "Failure", "reason": "InternalError", "message": "container not found (\"db\")"
        }));
        assert_eq!(
            exit_code(&internal),
            Err("exec failed: container not found (\"db\")".to_string())
        );
    }

    /// An ephemeral container's PATCH that may have been stored is never called "not started"
    /// (that would add a second container for the attempt's retry): only a refusal is.
    #[test]
    fn only_a_refusal_proves_an_ephemeral_container_was_not_added() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("x", "y")
                    .with_code(code)
                    .boxed(),
            )
        };
        let rows = [
            (api(403), true),
            (api(404), true),
            (api(422), true),
            (api(429), true),
            (api(408), false),
            (api(500), false),
            (api(504), false),
            (kube::Error::LinesCodecMaxLineLengthExceeded, false),
        ];
        for (error, refused) in rows {
            assert_eq!(was_refused(&error), refused, "{error}");
        }
    }

    #[test]
    fn outcome_messages() {
        let ok = ExecOutcome {
            exit_code: Some(0),
            ..Default::default()
        };
        assert!(ok.succeeded());
        assert_eq!(ok.message(), "");
        let bad = ExecOutcome {
            exit_code: Some(2),
            ..Default::default()
        };
        assert!(!bad.succeeded());
        assert_eq!(bad.message(), "command terminated with exit code 2");
    }

    /// kube's exec task leaves its output pipes without EOF when the connection breaks: the
    /// tail is still taken, once the task is known to have ended.
    #[tokio::test]
    async fn a_stream_whose_writer_vanished_without_eof_still_yields_its_tail() {
        use tokio::io::AsyncWriteExt as _;
        let (reader, mut writer) = tokio::io::simplex(64);
        writer.write_all(b"partial output").await.unwrap();
        drop(writer);
        let (ended_tx, ended) = watch::channel(false);
        let mut read = tokio::spawn(read_tail(Some(reader), ended));
        // Without the signal it would wait for ever: a dropped simplex writer is no EOF.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut read)
                .await
                .is_err(),
            "premise: the reader does not see an end by itself"
        );
        ended_tx.send(true).unwrap();
        assert_eq!(read.await.unwrap(), "partial output");
    }

    #[tokio::test]
    async fn the_fake_follows_its_script() {
        let fake = FakeExec::default();
        fake.script(
            "db",
            ExecOutcome {
                exit_code: Some(7),
                ..Default::default()
            },
        );
        let cmd = vec!["true".to_string()];
        let request = ExecRequest {
            namespace: "ns",
            pod: "p",
            container: "db",
            command: &cmd,
            timeout: Duration::from_secs(1),
            ephemeral: None,
        };
        let first = fake.exec(request).await;
        let second = fake.exec(request).await;
        assert_eq!(first.exit_code, Some(7));
        assert_eq!(second.exit_code, Some(0));
        assert_eq!(fake.calls().len(), 2);
    }
}
