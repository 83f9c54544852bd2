//! `pods/exec` over WebSocket (`v5.channel.k8s.io`, `v4.channel.k8s.io`): the command runs as
//! a local process in the pod's directory; stdout/stderr stream on channels 1/2 and the exit
//! status arrives as a `metav1.Status` on channel 3.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts as _, Path, Request, State};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::kubelet::{container_env, exit_code};
use crate::store::meta_str;
use crate::util::Query;
use crate::{Sim, SimEventKind, deletion};

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

struct ExecRequest {
    ns: String,
    pod: Value,
    container: Value,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

fn container_running(pod: &Value, name: &str) -> bool {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .any(|list| {
            pod.pointer(&format!("/status/{list}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|s| {
                    s.get("name").and_then(Value::as_str) == Some(name)
                        && s.pointer("/state/running").is_some()
                })
        })
}

/// The checks the apiserver makes before proxying to the kubelet, and the kubelet's own.
fn prepare(sim: &Sim, ns: &str, name: &str, q: &Query) -> Result<ExecRequest, ApiError> {
    let pod = sim
        .store
        .get("pods", ns, name)
        .ok_or_else(|| ApiError::not_found("pods", name))?;
    let pod = (*pod).clone();
    let find = |list: &str, cname: &str| {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .find(|c| c.get("name").and_then(Value::as_str) == Some(cname))
                    .cloned()
            })
    };
    let apps: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("name")?.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let cname = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) => c.to_string(),
        None if apps.len() == 1 => apps[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                apps.join(" ")
            )));
        }
    };
    let container = find("containers", &cname)
        .or_else(|| find("initContainers", &cname))
        .or_else(|| find("ephemeralContainers", &cname))
        .ok_or_else(|| {
            ApiError::bad_request(format!("container {cname} is not valid for pod {name}"))
        })?;
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if matches!(phase, "Succeeded" | "Failed") {
        return Err(ApiError::bad_request(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )));
    }
    if !container_running(&pod, &cname) {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{cname}\")"
        )));
    }
    let command = q.all("command");
    if command.is_empty() {
        return Err(ApiError::bad_request(
            "you must specify at least one command for the container",
        ));
    }
    Ok(ExecRequest {
        ns: ns.to_string(),
        pod,
        container,
        command,
        stdin: q.flag("stdin"),
        stdout: q.flag("stdout"),
        stderr: q.flag("stderr"),
    })
}

pub(crate) async fn handler(
    State(sim): State<Arc<Sim>>,
    Path((ns, name)): Path<(String, String)>,
    req: Request,
) -> Response {
    let q = Query::parse(req.uri().query());
    sim.faults.count("create", "pods/exec");
    // RBAC calls exec `create` (and `get` for WebSocket upgrades); either fault name works.
    if sim.faults.take_failure("create", "pods/exec") || sim.faults.take_failure("get", "pods/exec")
    {
        sim.emit(SimEventKind::Fault, &ns, &name, "injected 500 for exec");
        return ApiError::internal("kube-sim: injected fault for pods/exec").into_response();
    }
    let delay = sim.faults.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let er = match prepare(&sim, &ns, &name, &q) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let (mut parts, _) = req.into_parts();
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &sim).await {
        Ok(ws) => ws,
        Err(rej) => {
            return ApiError::bad_request(format!(
                "kube-sim supports exec over WebSocket only (v5/v4.channel.k8s.io): {}",
                rej.body_text()
            ))
            .into_response();
        }
    };
    // v1-v3 (plain-text errors) and the base64 variants are not implemented: refuse them up
    // front rather than upgrading without a subprotocol, which clients misread.
    let supported = ws.requested_protocols().any(|p| {
        p.to_str()
            .is_ok_and(|p| p == "v5.channel.k8s.io" || p == "v4.channel.k8s.io")
    });
    if !supported {
        return ApiError::bad_request(
            "kube-sim supports the v5.channel.k8s.io and v4.channel.k8s.io exec subprotocols only",
        )
        .into_response();
    }
    ws.protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .on_upgrade(move |socket| async move {
            session(sim, er, socket).await;
        })
}

async fn kill_tree(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = tokio::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(std::process::Stdio::null())
            .status()
            .await;
    }
    let _ = child.kill().await;
}

/// The exec's connection is gone. A real runtime leaves the process running (the exec API has no
/// way to signal it); the simulator kills it unless told to behave like a real runtime, so that
/// tests do not leak processes. Shutdown kills it either way.
async fn orphaned(
    sim: &Sim,
    ns: &str,
    pod: &str,
    command: &[String],
    mut child: tokio::process::Child,
    pumps: Vec<tokio::task::JoinHandle<()>>,
    why: &str,
) {
    if !sim.faults.orphaned_execs_survive() {
        for p in pumps {
            p.abort();
        }
        kill_tree(&mut child).await;
        sim.emit(
            SimEventKind::Exec,
            ns,
            pod,
            format!("exec {command:?} aborted: {why}"),
        );
        return;
    }
    sim.emit(
        SimEventKind::Exec,
        ns,
        pod,
        format!("exec {command:?}: {why}; the process keeps running"),
    );
    tokio::select! {
        s = child.wait() => {
            let code = s.as_ref().map(exit_code).unwrap_or(1);
            sim.emit(SimEventKind::Exec, ns, pod, format!("orphaned exec {command:?} ended: exit code {code}"));
        }
        _ = sim.shutdown.cancelled() => kill_tree(&mut child).await,
    }
    for p in pumps {
        p.abort();
    }
}

fn frame(ch: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(ch);
    v.extend_from_slice(data);
    Message::Binary(Bytes::from(v))
}

/// Forwards one output stream. Once nobody receives (the client went away) it keeps draining,
/// as a container runtime does, so that a surviving process is not killed by SIGPIPE.
async fn pump(mut r: impl tokio::io::AsyncRead + Unpin, ch: u8, tx: mpsc::Sender<Message>) {
    let mut buf = vec![0u8; 8192];
    let mut tx = Some(tx);
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Some(t) = &tx
                    && t.send(frame(ch, &buf[..n])).await.is_err()
                {
                    tx = None;
                }
            }
        }
    }
}

fn exit_status(code: i32, command: &[String]) -> Value {
    if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({
            "metadata": {},
            "status": "Failure",
            "message": format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                command.join(" ")
            ),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        })
    }
}

async fn session(sim: Arc<Sim>, er: ExecRequest, socket: WebSocket) {
    let pod_name = meta_str(&er.pod, "name").to_string();
    let ns = er.ns.clone();
    let cname = er
        .container
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if sink.send(m).await.is_err() {
                return;
            }
        }
        // A normal-closure code: gorilla (kubectl) reports a bare close frame as error 1005.
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: 1000,
                reason: "".into(),
            })))
            .await;
    });
    let dir = sim.pod_dir(&ns, &pod_name);
    let _ = std::fs::create_dir_all(&dir);
    // Subscribed before the process starts: a break injected once it may have run reaches this
    // session (a receiver sees only changes made after it subscribed).
    let mut breaks = sim.faults.exec_breaks();
    let spawned = tokio::process::Command::new(&er.command[0])
        .args(&er.command[1..])
        .current_dir(&dir)
        .envs(container_env(&sim, &er.pod, Some(&er.container)))
        .stdin(if er.stdin {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(if er.stdout {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stderr(if er.stderr {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .kill_on_drop(true)
        // Its own process group, so that killing it also kills what a shell started.
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            // What a container runtime reports when the executable is missing.
            let status = json!({
                "metadata": {},
                "status": "Failure",
                "message": format!("exec: {:?}: {e}", er.command[0]),
                "reason": "InternalError",
                "details": {"causes": [{"message": format!("exec: {:?}: {e}", er.command[0])}]},
            });
            sim.emit(
                SimEventKind::Exec,
                &ns,
                &pod_name,
                format!("exec {:?} in {cname:?} failed to start: {e}", er.command),
            );
            let _ = tx.send(frame(ERROR, status.to_string().as_bytes())).await;
            drop(tx);
            let _ = writer.await;
            return;
        }
    };
    sim.emit(
        SimEventKind::Exec,
        &ns,
        &pod_name,
        format!("exec {:?} in container {cname:?} started", er.command),
    );
    // Like the kubelet: an empty frame on the first output channel tells the client we are up.
    let first = if er.stdout {
        STDOUT
    } else if er.stderr {
        STDERR
    } else {
        ERROR
    };
    let _ = tx.send(frame(first, &[])).await;

    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(out, STDOUT, tx.clone())));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(err, STDERR, tx.clone())));
    }
    let mut child_stdin = child.stdin.take();
    let (gone_tx, mut gone_rx) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        while let Some(msg) = stream.next().await {
            match msg {
                Ok(Message::Binary(b)) if !b.is_empty() => match b[0] {
                    STDIN => {
                        if let Some(w) = child_stdin.as_mut()
                            && w.write_all(&b[1..]).await.is_err()
                        {
                            child_stdin = None;
                        }
                    }
                    // v5: the client closed one of its streams; only stdin matters.
                    CLOSE if b.get(1) == Some(&STDIN) => child_stdin = None,
                    RESIZE | CLOSE => {}
                    _ => {}
                },
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = gone_tx.send(());
    });

    if sim.faults.take_delete_on_exec(&ns, &pod_name) {
        let _ = deletion::delete_pod(&sim, &ns, &pod_name);
        sim.emit(
            SimEventKind::Fault,
            &ns,
            &pod_name,
            "pod deleted while exec running; stream broken",
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        kill_tree(&mut child).await;
        for p in pumps {
            p.abort();
        }
        reader.abort();
        // Closing without a status on channel 3 is what a client sees when the pod dies.
        drop(tx);
        let _ = writer.await;
        return;
    }

    let status = tokio::select! {
        s = child.wait() => s,
        _ = &mut gone_rx => {
            drop(tx);
            writer.abort();
            orphaned(&sim, &ns, &pod_name, &er.command, child, pumps, "client disconnected").await;
            return;
        }
        _ = breaks.changed() => {
            // Both halves of the socket go at once: the TCP connection closes without a close
            // frame or a status, as when the API server goes away.
            reader.abort();
            writer.abort();
            drop(tx);
            sim.emit(SimEventKind::Fault, &ns, &pod_name, format!("exec {:?}: connection dropped (injected)", er.command));
            orphaned(&sim, &ns, &pod_name, &er.command, child, pumps, "connection dropped").await;
            return;
        }
        _ = sim.shutdown.cancelled() => {
            kill_tree(&mut child).await;
            reader.abort();
            writer.abort();
            return;
        }
    };
    for p in pumps {
        let _ = p.await;
    }
    let code = match &status {
        Ok(s) => exit_code(s),
        Err(_) => 1,
    };
    let st = exit_status(code, &er.command);
    sim.emit(
        SimEventKind::Exec,
        &ns,
        &pod_name,
        format!(
            "exec {:?} in container {cname:?} finished: exit code {code}",
            er.command
        ),
    );
    let _ = tx.send(frame(ERROR, st.to_string().as_bytes())).await;
    drop(tx);
    let _ = writer.await;
    reader.abort();
}
