//! The kubelet stand-in: drives each pod's status through Pending, init containers, Running,
//! Ready (and optionally a terminal phase), running init container commands as local processes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
use crate::store::{ChangeType, Written, meta_str};
use crate::{
    ANNOTATION_NEVER_READY, ANNOTATION_PHASE_AFTER, ANNOTATION_READY_AFTER, ANNOTATION_START_DELAY,
    Sim, SimEventKind, util,
};

const DEFAULT_READY_AFTER: Duration = Duration::from_millis(100);

pub(crate) async fn run(sim: Arc<Sim>) {
    let mut rx = sim.store.subscribe();
    let mut seen = HashSet::new();
    let mut ephemeral = HashSet::new();
    let mut scan = true;
    loop {
        if scan {
            let (pods, _) = sim.store.list("pods", None);
            for p in pods {
                spawn_pod(&sim, &mut seen, &p);
            }
            scan = false;
        }
        tokio::select! {
            _ = sim.shutdown.cancelled() => return,
            r = rx.recv() => match r {
                Ok(c) if c.res == "pods" && c.kind == ChangeType::Added => spawn_pod(&sim, &mut seen, &c.object),
                Ok(c) if c.res == "pods" && c.kind == ChangeType::Modified => spawn_ephemeral(&sim, &mut ephemeral, &c.object),
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => scan = true,
                Err(_) => return,
            }
        }
    }
}

fn spawn_pod(sim: &Arc<Sim>, seen: &mut HashSet<String>, pod: &Value) {
    let uid = meta_str(pod, "uid").to_string();
    if !seen.insert(uid.clone()) {
        return;
    }
    let sim = sim.clone();
    let ns = meta_str(pod, "namespace").to_string();
    let name = meta_str(pod, "name").to_string();
    tokio::spawn(async move {
        let token = sim.shutdown.clone();
        tokio::select! {
            _ = token.cancelled() => {}
            _ = run_pod(&sim, &ns, &name, &uid) => {}
        }
    });
}

/// Runs each ephemeral container added to a pod once (`pods/ephemeralcontainers`): its command
/// as a local process in the pod's directory, like an exec, with `ephemeralContainerStatuses`
/// going from running to terminated with the process' exit code. Ephemeral containers are never
/// restarted.
fn spawn_ephemeral(sim: &Arc<Sim>, started: &mut HashSet<(String, String)>, pod: &Value) {
    let uid = meta_str(pod, "uid").to_string();
    for c in containers(pod, "ephemeralContainers") {
        if !started.insert((uid.clone(), cname(c).to_string())) {
            continue;
        }
        let (sim, pod, c, uid) = (sim.clone(), pod.clone(), c.clone(), uid.clone());
        tokio::spawn(async move {
            let token = sim.shutdown.clone();
            tokio::select! {
                _ = token.cancelled() => {}
                _ = run_ephemeral(&sim, &pod, &c, &uid) => {}
            }
        });
    }
}

async fn run_ephemeral(sim: &Sim, pod: &Value, c: &Value, uid: &str) {
    gate(sim).await;
    let (ns, name) = (meta_str(pod, "namespace"), meta_str(pod, "name"));
    let set = |state: Value| {
        let entry = container_status(c, uid, state, false, true);
        update_status(sim, ns, name, Some(uid), |s| {
            set_entry(s, "ephemeralContainerStatuses", cname(c), entry)
        })
    };
    // As the kubelet: a container whose env reads a Secret or ConfigMap that does not exist
    // waits (`CreateContainerConfigError`) and is created once it does.
    let mut waiting = None;
    while let Some(why) = missing_env(sim, pod, c) {
        if waiting.as_ref() != Some(&why) {
            let state =
                json!({"waiting": {"reason": "CreateContainerConfigError", "message": why}});
            if set(state).is_err() {
                return;
            }
            waiting = Some(why);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started_at = util::now_rfc3339();
    if set(json!({"running": {"startedAt": started_at}})).is_err() {
        return;
    }
    sim.emit(
        SimEventKind::Container,
        ns,
        name,
        format!("ephemeral container {} started", cname(c)),
    );
    let cmd = argv(c);
    let (code, _, _) = if cmd.is_empty() {
        (128, String::new(), String::new())
    } else {
        run_process(sim, pod, c, &cmd).await
    };
    let _ = set(json!({"terminated": {
        "exitCode": code,
        "reason": if code == 0 { "Completed" } else { "Error" },
        "startedAt": started_at,
        "finishedAt": util::now_rfc3339(),
    }}));
    sim.emit(
        SimEventKind::Container,
        ns,
        name,
        format!("ephemeral container {} exited with code {code}", cname(c)),
    );
}

/// Waits while the kubelet is stopped.
async fn gate(sim: &Sim) {
    let mut rx = sim.kubelet_on.subscribe();
    let _ = rx.wait_for(|on| *on).await;
}

fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

fn duration_annotation(pod: &Value, key: &str) -> Option<Duration> {
    annotation(pod, key).and_then(util::parse_go_duration)
}

/// Updates the pod's status if it is still the same pod (same uid).
fn update_status(
    sim: &Sim,
    ns: &str,
    name: &str,
    uid: Option<&str>,
    f: impl FnOnce(&mut Map<String, Value>),
) -> ApiResult<()> {
    let written = sim.store.update("pods", ns, name, |cur| {
        if uid.is_some_and(|u| u != meta_str(cur, "uid")) {
            return Err(ApiError::not_found("pods", name));
        }
        let mut pod = (**cur).clone();
        if !pod.get("status").is_some_and(Value::is_object) {
            pod["status"] = json!({});
        }
        f(pod["status"].as_object_mut().expect("status object"));
        Ok(pod)
    })?;
    if let Written::Deleted(gone) = written {
        crate::deletion::pod_removed(sim, &gone);
    }
    Ok(())
}

fn containers<'a>(pod: &'a Value, list: &str) -> Vec<&'a Value> {
    pod.pointer(&format!("/spec/{list}"))
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn cname(c: &Value) -> &str {
    c.get("name").and_then(Value::as_str).unwrap_or_default()
}

fn is_sidecar(c: &Value) -> bool {
    c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
}

fn container_status(c: &Value, uid: &str, state: Value, ready: bool, started: bool) -> Value {
    json!({
        "name": cname(c),
        "image": c.get("image").and_then(Value::as_str).unwrap_or_default(),
        "imageID": "",
        "containerID": format!("sim://{uid}/{}", cname(c)),
        "ready": ready,
        "started": started,
        "restartCount": 0,
        "state": state,
    })
}

fn condition(t: &str, ok: bool) -> Value {
    json!({"type": t, "status": if ok {"True"} else {"False"}, "lastProbeTime": null, "lastTransitionTime": util::now_rfc3339()})
}

fn conditions(initialized: bool, ready: bool) -> Value {
    json!([
        condition("PodReadyToStartContainers", true),
        condition("Initialized", initialized),
        condition("Ready", ready),
        condition("ContainersReady", ready),
        condition("PodScheduled", true),
    ])
}

fn set_entry(status: &mut Map<String, Value>, list: &str, name: &str, v: Value) {
    let arr = status
        .entry(list)
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .expect("status list");
    match arr.iter_mut().find(|e| cname(e) == name) {
        Some(e) => *e = v,
        None => arr.push(v),
    }
}

/// The environment a pod's processes see: the container's `envFrom` and `env` (values, keys of
/// Secrets and ConfigMaps, the pod's name and namespace) plus the sandbox's.
pub(crate) fn container_env(sim: &Sim, pod: &Value, c: Option<&Value>) -> Vec<(String, String)> {
    let ns = meta_str(pod, "namespace");
    let name = meta_str(pod, "name");
    // As the kubelet: `envFrom` first, then `env`; a later definition of a name wins (the
    // process environment keeps the last). What cannot be resolved is left out here; a container
    // that needs it does not start (`missing_env`).
    let mut env: Vec<(String, String)> = c
        .and_then(|c| c.get("envFrom"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|from| env_from(sim, ns, from).ok().unwrap_or_default())
        .collect();
    env.extend(
        c.and_then(|c| c.get("env"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let value = match e.get("valueFrom") {
                    Some(from) => value_from(sim, pod, from).ok().flatten()?,
                    None => e
                        .get("value")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                };
                Some((e.get("name")?.as_str()?.to_string(), value))
            }),
    );
    env.push(("POD_NAME".into(), name.into()));
    env.push(("POD_NAMESPACE".into(), ns.into()));
    env.push((
        "POD_DIR".into(),
        sim.pod_dir(ns, name).to_string_lossy().into_owned(),
    ));
    env
}

/// Why the kubelet would not create container `c` (`CreateContainerConfigError`): a Secret,
/// ConfigMap or key its `env` or `envFrom` reads that does not exist and is not optional.
pub(crate) fn missing_env(sim: &Sim, pod: &Value, c: &Value) -> Option<String> {
    let ns = meta_str(pod, "namespace");
    let list = |key: &str| {
        c.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    list("envFrom")
        .iter()
        .find_map(|from| env_from(sim, ns, from).err())
        .or_else(|| {
            list("env")
                .iter()
                .filter_map(|e| e.get("valueFrom"))
                .find_map(|from| value_from(sim, pod, from).err())
        })
}

/// A Secret's or ConfigMap's `data`, decoded; `Ok(None)` when it does not exist and `optional`.
fn object_data(
    sim: &Sim,
    ns: &str,
    kind: &str,
    reference: &Value,
) -> Result<Option<Map<String, Value>>, String> {
    let name = reference
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let optional = reference.get("optional").and_then(Value::as_bool) == Some(true);
    let (resource, label) = match kind {
        "Secret" => ("secrets", "secret"),
        _ => ("configmaps", "configmap"),
    };
    let Some(object) = sim.store.get(resource, ns, name) else {
        return if optional {
            Ok(None)
        } else {
            Err(format!("{label} {name:?} not found"))
        };
    };
    let mut data = object
        .get("data")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if kind == "Secret" {
        use base64::Engine as _;
        for value in data.values_mut() {
            let decoded = value
                .as_str()
                .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
                .map(|b| String::from_utf8_lossy(&b).into_owned());
            *value = Value::String(decoded.unwrap_or_default());
        }
    }
    Ok(Some(data))
}

/// One `envFrom` entry's variables.
fn env_from(sim: &Sim, ns: &str, from: &Value) -> Result<Vec<(String, String)>, String> {
    let prefix = from
        .get("prefix")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (kind, reference) = match (from.get("secretRef"), from.get("configMapRef")) {
        (Some(r), _) => ("Secret", r),
        (None, Some(r)) => ("ConfigMap", r),
        (None, None) => return Ok(Vec::new()),
    };
    Ok(object_data(sim, ns, kind, reference)?
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            (
                format!("{prefix}{k}"),
                v.as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

/// One `env` entry's `valueFrom`, as the kubelet resolves it: a key of a Secret or ConfigMap of
/// the pod's namespace, or `metadata.name`/`metadata.namespace`; `Ok(None)` when an optional one
/// does not exist (or the simulator does not resolve that source).
fn value_from(sim: &Sim, pod: &Value, from: &Value) -> Result<Option<String>, String> {
    let ns = meta_str(pod, "namespace");
    let (kind, reference) = match (from.get("secretKeyRef"), from.get("configMapKeyRef")) {
        (Some(r), _) => ("Secret", r),
        (None, Some(r)) => ("ConfigMap", r),
        (None, None) => {
            let path = from.pointer("/fieldRef/fieldPath").and_then(Value::as_str);
            return Ok(match path {
                Some("metadata.name") => Some(meta_str(pod, "name").to_string()),
                Some("metadata.namespace") => Some(ns.to_string()),
                _ => None,
            });
        }
    };
    let Some(data) = object_data(sim, ns, kind, reference)? else {
        return Ok(None);
    };
    let name = reference
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let key = reference
        .get("key")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match data.get(key).and_then(Value::as_str) {
        Some(value) => Ok(Some(value.to_string())),
        None if reference.get("optional").and_then(Value::as_bool) == Some(true) => Ok(None),
        None => Err(format!("couldn't find key {key} in {kind} {ns}/{name}")),
    }
}

fn argv(c: &Value) -> Vec<String> {
    let strs = |k: &str| -> Vec<String> {
        c.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut v = strs("command");
    if !v.is_empty() {
        v.extend(strs("args"));
    }
    v
}

fn tail(s: &[u8]) -> String {
    let s = String::from_utf8_lossy(s);
    let s = s.trim_end();
    if s.len() > 2048 {
        let mut start = s.len() - 2048;
        while !s.is_char_boundary(start) {
            start += 1;
        }
        format!("...{}", &s[start..])
    } else {
        s.to_string()
    }
}

async fn run_process(sim: &Sim, pod: &Value, c: &Value, cmd: &[String]) -> (i32, String, String) {
    let ns = meta_str(pod, "namespace");
    let name = meta_str(pod, "name");
    let out = tokio::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .current_dir(sim.pod_dir(ns, name))
        .envs(container_env(sim, pod, Some(c)))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await;
    match out {
        Ok(o) => (exit_code(&o.status), tail(&o.stdout), tail(&o.stderr)),
        // Like a runtime failing to start the entrypoint (exec format error, not found).
        Err(e) => (
            128,
            String::new(),
            format!("failed to start {:?}: {e}", cmd[0]),
        ),
    }
}

pub(crate) fn exit_code(s: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    s.code()
        .or_else(|| s.signal().map(|sig| 128 + sig))
        .unwrap_or(1)
}

/// `sim.kube/never-ready`: `"true"` keeps every container unready; otherwise a comma-separated
/// list of container names (app containers or native sidecars) that stay Running but never Ready,
/// while the others become Ready as usual.
#[derive(Debug, PartialEq, Eq)]
enum NeverReady {
    None,
    All,
    Some(Vec<String>),
}

impl NeverReady {
    fn of(pod: &Value) -> Self {
        match annotation(pod, ANNOTATION_NEVER_READY).map(str::trim) {
            None | Some("" | "false") => NeverReady::None,
            Some("true") => NeverReady::All,
            Some(list) => NeverReady::Some(
                list.split(',')
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect(),
            ),
        }
    }

    fn covers(&self, container: &str) -> bool {
        match self {
            NeverReady::None => false,
            NeverReady::All => true,
            NeverReady::Some(names) => names.iter().any(|n| n == container),
        }
    }
}

async fn run_pod(sim: &Sim, ns: &str, name: &str, uid: &str) -> ApiResult<()> {
    gate(sim).await;
    let pod = sim
        .store
        .get("pods", ns, name)
        .ok_or_else(|| ApiError::not_found("pods", name))?;
    let pod = (*pod).clone();
    let _ = std::fs::create_dir_all(sim.pod_dir(ns, name));
    let inits = containers(&pod, "initContainers");
    let apps = containers(&pod, "containers");
    let waiting = |reason: &str| json!({"waiting": {"reason": reason}});
    let app_wait = if inits.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let never_ready = NeverReady::of(&pod);
    let now = util::now_rfc3339();
    update_status(sim, ns, name, Some(uid), |s| {
        s.insert("phase".into(), "Pending".into());
        s.insert("conditions".into(), conditions(inits.is_empty(), false));
        s.insert("hostIP".into(), "127.0.0.1".into());
        s.insert("hostIPs".into(), json!([{"ip": "127.0.0.1"}]));
        s.insert("podIP".into(), "127.0.0.1".into());
        s.insert("podIPs".into(), json!([{"ip": "127.0.0.1"}]));
        s.insert("startTime".into(), now.clone().into());
        s.insert("qosClass".into(), "BestEffort".into());
        if !inits.is_empty() {
            let st: Vec<Value> = inits
                .iter()
                .map(|c| container_status(c, uid, waiting("PodInitializing"), false, false))
                .collect();
            s.insert("initContainerStatuses".into(), st.into());
        }
        let st: Vec<Value> = apps
            .iter()
            .map(|c| container_status(c, uid, waiting(app_wait), false, false))
            .collect();
        s.insert("containerStatuses".into(), st.into());
    })?;

    for c in &inits {
        gate(sim).await;
        let started = util::now_rfc3339();
        let running = json!({"running": {"startedAt": started}});
        // A native sidecar is ready once started (unless told never to be); a plain init
        // container is never ready, it runs to completion.
        let ready = is_sidecar(c) && !never_ready.covers(cname(c));
        update_status(sim, ns, name, Some(uid), |s| {
            set_entry(
                s,
                "initContainerStatuses",
                cname(c),
                container_status(c, uid, running, ready, true),
            );
        })?;
        if is_sidecar(c) {
            sim.emit(
                SimEventKind::InitContainer,
                ns,
                name,
                format!("sidecar {:?} started", cname(c)),
            );
            continue;
        }
        let cmd = argv(c);
        let (code, stdout, stderr) = if cmd.is_empty() {
            (0, String::new(), String::new())
        } else {
            run_process(sim, &pod, c, &cmd).await
        };
        sim.emit(
            SimEventKind::InitContainer,
            ns,
            name,
            format!(
                "init container {:?} exited {code}{}{}",
                cname(c),
                if stdout.is_empty() {
                    String::new()
                } else {
                    format!("; stdout: {stdout}")
                },
                if stderr.is_empty() {
                    String::new()
                } else {
                    format!("; stderr: {stderr}")
                },
            ),
        );
        let terminated = json!({"terminated": {
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": started,
            "finishedAt": util::now_rfc3339(),
            "containerID": format!("sim://{uid}/{}", cname(c)),
        }});
        let ok = code == 0;
        // restartPolicy Never makes a failed init container fail the pod; otherwise a real
        // kubelet would restart it with back-off, shown as Init:Error / Init:CrashLoopBackOff.
        let never = pod.pointer("/spec/restartPolicy").and_then(Value::as_str) == Some("Never");
        update_status(sim, ns, name, Some(uid), |s| {
            set_entry(
                s,
                "initContainerStatuses",
                cname(c),
                container_status(c, uid, terminated, ok, false),
            );
            if !ok && never {
                s.insert("phase".into(), "Failed".into());
            }
        })?;
        if !ok {
            return Ok(());
        }
    }

    if let Some(d) = duration_annotation(&pod, ANNOTATION_START_DELAY) {
        tokio::time::sleep(d).await;
    }
    gate(sim).await;
    let started = util::now_rfc3339();
    update_status(sim, ns, name, Some(uid), |s| {
        s.insert("phase".into(), "Running".into());
        s.insert("conditions".into(), conditions(true, false));
        for c in &apps {
            let running = json!({"running": {"startedAt": started}});
            set_entry(
                s,
                "containerStatuses",
                cname(c),
                container_status(c, uid, running, false, true),
            );
        }
    })?;
    sim.emit(SimEventKind::Container, ns, name, "containers running");
    let running_at = tokio::time::Instant::now();

    if never_ready != NeverReady::All {
        tokio::time::sleep(
            duration_annotation(&pod, ANNOTATION_READY_AFTER).unwrap_or(DEFAULT_READY_AFTER),
        )
        .await;
        gate(sim).await;
        update_status(sim, ns, name, Some(uid), |s| {
            // The pod is Ready only when every container is.
            let all = never_ready == NeverReady::None;
            s.insert("conditions".into(), conditions(true, all));
            for st in container_statuses(s) {
                if st.pointer("/state/running").is_some() && !never_ready.covers(cname(st)) {
                    st["ready"] = true.into();
                }
            }
        })?;
        let which = match &never_ready {
            NeverReady::Some(names) => format!("containers ready except {}", names.join(", ")),
            _ => "containers ready".to_string(),
        };
        sim.emit(SimEventKind::Container, ns, name, which);
    }

    if let Some((phase, d)) = annotation(&pod, ANNOTATION_PHASE_AFTER)
        .and_then(|v| v.split_once(':'))
        .and_then(|(p, d)| Some((p.to_string(), util::parse_go_duration(d)?)))
    {
        tokio::time::sleep_until(running_at + d).await;
        gate(sim).await;
        set_phase_checked(sim, ns, name, Some(uid), &phase)?;
    }
    Ok(())
}

/// Every app and init container status of a pod status.
fn container_statuses(status: &mut Map<String, Value>) -> impl Iterator<Item = &mut Value> {
    status
        .iter_mut()
        .filter(|(k, _)| *k == "containerStatuses" || *k == "initContainerStatuses")
        .filter_map(|(_, v)| v.as_array_mut())
        .flatten()
}

fn set_phase_checked(
    sim: &Sim,
    ns: &str,
    name: &str,
    uid: Option<&str>,
    phase: &str,
) -> ApiResult<()> {
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let code = if phase == "Succeeded" { 0 } else { 1 };
    let now = util::now_rfc3339();
    update_status(sim, ns, name, uid, |s| {
        s.insert("phase".into(), phase.into());
        if !terminal {
            return;
        }
        s.insert("conditions".into(), conditions(true, false));
        for st in container_statuses(s) {
            if let Some(r) = st.pointer("/state/running").cloned() {
                st["state"] = json!({"terminated": {
                    "exitCode": code,
                    "reason": if code == 0 { "Completed" } else { "Error" },
                    "startedAt": r.get("startedAt").cloned().unwrap_or(Value::Null),
                    "finishedAt": now,
                }});
                st["ready"] = false.into();
                st["started"] = false.into();
            }
        }
    })?;
    sim.emit(
        SimEventKind::Container,
        ns,
        name,
        format!("pod phase {phase}"),
    );
    Ok(())
}

pub(crate) fn set_phase(sim: &Sim, ns: &str, name: &str, phase: &str) {
    let _ = set_phase_checked(sim, ns, name, None, phase);
}
