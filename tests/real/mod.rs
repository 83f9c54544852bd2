//! Shared by the `tests/real_*.rs` tests: the product against a REAL control plane
//! (`e2e/realcp`: kube-apiserver v1.37, controller-manager, scheduler, etcd, kwok; Velero).
//!
//! [`Install`] renders the Helm chart with `helm template --include-crds` (the pinned helm from
//! `.ci/install-tools.sh`), without cert-manager, with a real caBundle and `tls.existingSecret`
//! as docs/install.md describes, and applies every object as rendered, changing only each
//! webhook's `clientConfig.service` into a `url` to 127.0.0.1 (the API server cannot reach pods
//! here: the product runs as a host process). [`Serve`] runs `restore-hooks` with exactly the
//! arguments of the rendered Deployment (only the listen addresses and the TLS directory
//! replaced), under a TokenRequest token of the chart's ServiceAccount, never an admin
//! credential.
//!
//! Waits are bounded failure guards, never performance assertions.
#![allow(dead_code)]

pub mod databases;
pub mod lossy_proxy;
pub mod scenarios;
pub mod serve;
pub mod tls;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use realcp::{ControlPlane, NODE, Options};
use serde_json::{Value, json};

#[allow(unused_imports)]
pub use serve::{Replica, Serve, ServeOptions, Via};
#[allow(unused_imports)]
pub use tls::{Certs, MeshWebhook};

/// The Helm release (and so the chart's fullname) and its namespace.
pub const RELEASE: &str = "restore-hooks";
pub const NAMESPACE: &str = "restore-hooks";
/// The Secret `tls.existingSecret` names.
pub const TLS_SECRET: &str = "restore-hooks-tls";
/// What the chart's labels and annotations keys are.
pub const RESTORE_LABEL: &str = "velero.io/restore-name";
pub const NAMESPACE_LABEL: &str = "restore-hooks.dev/restore";
pub const PLAN: &str = "restore-hooks.dev/plan";
pub const STATUS: &str = "restore-hooks.dev/status";
pub const EXEC_LABEL: &str = "restore-hooks.dev/exec";
pub const RUN_LABEL: &str = "restore-hooks.dev/restore-run";

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One heavy scenario of a test binary at a time (the machine has 2 cores): taken by tests
/// that start many pods or measure. Poisoning is ignored (a failed test must not fail the next).
pub fn heavy() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The workspace's blocking wait (see `restore_hooks_testkit`).
pub use restore_hooks_testkit::wait_until;

/// The pinned helm (`.ci/install-tools.sh` installs it). Missing, the test fails, naming the fix.
pub fn helm() -> PathBuf {
    let helm = std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".tools/helm/helm"));
    assert!(
        helm.is_file(),
        "{} is missing: the real control plane tests render the chart with the pinned helm; \
         run `bash .ci/install-tools.sh` (or set HELM)",
        helm.display()
    );
    helm
}

/// One rendered document: its YAML text as helm printed it (what is applied when the test does
/// not change it: kubectl reads YAML 1.1, e.g. `defaultMode: 0440` is octal there) and its value.
#[derive(Clone, Debug)]
pub struct Doc {
    pub yaml: String,
    pub value: Value,
}

/// `helm template RELEASE charts/restore-hooks -n NAMESPACE --include-crds` without
/// cert-manager, with `tls.caBundle` and `tls.existingSecret`, plus `extra` arguments: the
/// rendered documents.
pub fn render(ca_bundle: &str, kube_version: &str, extra: &[String]) -> Vec<Doc> {
    let mut args = vec![
        "--set".to_string(),
        "certManager.enabled=false".to_string(),
        "--set".to_string(),
        format!("tls.existingSecret={TLS_SECRET}"),
        "--set".to_string(),
        format!("tls.caBundle={ca_bundle}"),
    ];
    args.extend_from_slice(extra);
    render_chart(kube_version, &args)
}

/// `helm template RELEASE charts/restore-hooks -n NAMESPACE --include-crds` with `args`: the
/// rendered documents, each as helm printed it.
pub fn render_chart(kube_version: &str, args: &[String]) -> Vec<Doc> {
    let mut all: Vec<&str> = vec![
        "--include-crds",
        // What `helm install` applies: the release's objects. The `helm test` and pre-delete
        // hooks run only at those events (tests/chart.rs and .ci/chart_assertions.py check them).
        "--no-hooks",
        "--kube-version",
        kube_version,
    ];
    all.extend(args.iter().map(String::as_str));
    helm_template(&all)
}

/// The objects of one hook template of the chart (`helm template --show-only TEMPLATE`, default
/// values): what Helm creates when it runs that hook, which `render` leaves out (`--no-hooks`).
pub fn render_hook(template: &str) -> Vec<Value> {
    helm_template(&["--show-only", template])
        .into_iter()
        .map(|doc| doc.value)
        .collect()
}

/// `helm template RELEASE charts/restore-hooks -n NAMESPACE` with `args`: the rendered documents,
/// each as helm printed it.
fn helm_template(args: &[&str]) -> Vec<Doc> {
    let out = Command::new(helm())
        .args(["template", RELEASE])
        .arg(root().join("charts/restore-hooks"))
        .args(["-n", NAMESPACE])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("cannot run helm");
    assert!(
        out.status.success(),
        "helm template {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut docs = Vec::new();
    for piece in format!("\n{text}").split("\n---") {
        let value: Value = yaml_serde::from_str(piece).expect("helm output is YAML");
        if !value.is_null() {
            docs.push(Doc {
                yaml: piece.to_string(),
                value,
            });
        }
    }
    docs
}

/// The rendered objects of `kind`.
pub fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The only rendered object of `kind` named `name`.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the render has no {kind} {name}"))
}

pub fn find_mut<'a>(docs: &'a mut [Value], kind: &str, name: &str) -> &'a mut Value {
    docs.iter_mut()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the render has no {kind} {name}"))
}

/// A change to the rendered objects before they are applied.
pub type Edit = Box<dyn Fn(&mut Vec<Value>)>;

/// How an [`Install`] is made.
#[derive(Default)]
pub struct InstallOptions {
    /// `--emulated-version` of the control plane (e.g. "1.35"); also the `--kube-version` the
    /// chart is rendered for.
    pub emulated_version: Option<String>,
    /// Which kube-apiserver runs: [`realcp::ApiServer::Floor`] is the real one of the oldest
    /// supported minor (the chart is then rendered for its version).
    pub apiserver: realcp::ApiServer,
    /// More `helm template` arguments (`--set ...`).
    pub helm_args: Vec<String>,
    /// A change to the rendered objects before they are applied (the tests that break RBAC).
    pub edit: Option<Edit>,
    /// More kube-apiserver flags (benches/restore.rs: an audit policy).
    pub apiserver_args: Vec<String>,
}

/// The chart applied to a fresh control plane, with the product not yet started (see
/// [`Install::serve`]).
pub struct Install {
    pub cp: ControlPlane,
    pub certs: Certs,
    /// The port the webhooks' URLs point at: the first `serve` listens there.
    pub webhook_port: u16,
    /// Every object as rendered (after `edit`), and as applied.
    pub rendered: Vec<Value>,
    pub applied: Vec<Value>,
    /// Names of the pods the chart's Deployment(s) got from the controller-manager: the
    /// replicas' identities (`--identity=$(POD_NAME)`), as in a cluster. By Deployment name.
    pub replica_pods: BTreeMap<String, Vec<String>>,
    /// Test files (hook marks) live under here, inside the control plane's work dir.
    pub marks: PathBuf,
}

impl Install {
    pub fn new(opts: InstallOptions) -> Install {
        let started = Instant::now();
        let cp = ControlPlane::start(Options {
            emulated_version: opts.emulated_version.clone(),
            apiserver: opts.apiserver,
            apiserver_args: opts.apiserver_args.clone(),
            ..Options::default()
        })
        .unwrap_or_else(|e| panic!("the real control plane did not start: {e:#}"));
        let certs = Certs::new(&cp.work_dir().join("webhook-tls"), RELEASE, NAMESPACE);
        let kube_version = match &opts.emulated_version {
            Some(v) => format!("{v}.0"),
            None => server_version(&cp),
        };
        let docs = render(&certs.ca_bundle(), &kube_version, &opts.helm_args);
        let mut rendered: Vec<Value> = docs.iter().map(|d| d.value.clone()).collect();
        if let Some(edit) = &opts.edit {
            edit(&mut rendered);
        }
        let webhook_port = realcp::free_port().unwrap();

        // What docs/install.md "Without cert-manager" does before `helm install`.
        cp.kubectl_ok(["create", "namespace", NAMESPACE]).unwrap();
        cp.kubectl_ok([
            "create",
            "secret",
            "tls",
            TLS_SECRET,
            "-n",
            NAMESPACE,
            &format!("--cert={}", certs.dir.join("tls.crt").display()),
            &format!("--key={}", certs.dir.join("tls.key").display()),
        ])
        .unwrap();

        let applied: Vec<Value> = rendered
            .iter()
            .map(|d| {
                let mut d = d.clone();
                if d["kind"] == "MutatingWebhookConfiguration" {
                    point_webhooks_at(&mut d, webhook_port, &certs);
                }
                d
            })
            .collect();
        // What is applied: helm's own text for every document the test leaves alone, JSON for
        // the ones it changed (the webhooks' URLs, a test's edit).
        let text = |v: &Value| match docs.iter().find(|d| &d.value == v) {
            Some(d) => d.yaml.clone(),
            None => serde_json::to_string(v).unwrap(),
        };
        let (crds, rest): (Vec<&Value>, Vec<&Value>) = applied
            .iter()
            .partition(|d| d["kind"] == "CustomResourceDefinition");
        assert!(
            !crds.is_empty(),
            "--include-crds rendered no CustomResourceDefinition"
        );
        apply_crds_first(
            &cp,
            &crds.iter().map(|v| text(v)).collect::<Vec<_>>(),
            &rest.iter().map(|v| text(v)).collect::<Vec<_>>(),
        );
        let marks = cp.work_dir().join("marks");
        std::fs::create_dir_all(&marks).unwrap();

        let mut install = Install {
            cp,
            certs,
            webhook_port,
            rendered,
            applied,
            replica_pods: BTreeMap::new(),
            marks,
        };
        install.wait_for_policies();
        install.wait_for_replica_pods();
        eprintln!(
            "real: chart installed on {} in {:.1} s (webhooks -> 127.0.0.1:{})",
            install.cp.server(),
            started.elapsed().as_secs_f64(),
            install.webhook_port
        );
        install
    }

    /// The default install: the chart's defaults on Kubernetes 1.37.
    pub fn default_chart() -> Install {
        Install::new(InstallOptions::default())
    }

    /// Objects of `kind` as applied.
    pub fn applied(&self, kind: &str) -> Vec<&Value> {
        of_kind(&self.applied, kind)
    }

    /// The rendered Deployment `name`.
    pub fn deployment(&self, name: &str) -> &Value {
        find(&self.rendered, "Deployment", name)
    }

    /// The ValidatingAdmissionPolicies have been type-checked (their status says so), so that
    /// a test never races their activation.
    fn wait_for_policies(&self) {
        let want = of_kind(&self.applied, "ValidatingAdmissionPolicy").len();
        wait_until(
            "the ValidatingAdmissionPolicies to be type-checked",
            Duration::from_secs(120),
            || {
                let list =
                    get_json(&self.cp, &["get", "validatingadmissionpolicies"]).ok_or("no list")?;
                let checked = list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["status"]["observedGeneration"].is_number())
                    .count();
                if checked >= want {
                    Ok(())
                } else {
                    Err(format!("{checked} of {want}"))
                }
            },
        );
    }

    fn wait_for_replica_pods(&mut self) {
        for d in of_kind(&self.applied, "Deployment") {
            let name = d["metadata"]["name"].as_str().unwrap().to_string();
            let pods = deployment_pods(&self.cp, d);
            self.replica_pods.insert(name, pods);
        }
    }

    /// Starts one `restore-hooks` process as a Deployment of the chart would run it (see
    /// [`Serve`]).
    pub fn serve(&self, opts: ServeOptions) -> Serve {
        Serve::start(self, opts)
    }

    /// Starts replica `replica` of every Deployment (see [`Replica`]).
    pub fn start(&self, replica: usize) -> Replica {
        Replica::start(self, replica, &ServeOptions::default())
    }

    /// A token kubeconfig for ServiceAccount `sa` of the release namespace.
    pub fn kubeconfig_for(&self, sa: &str) -> PathBuf {
        let token = self
            .cp
            .token_for_service_account(NAMESPACE, sa, Duration::from_secs(7200))
            .unwrap_or_else(|e| panic!("TokenRequest for {sa}: {e:#}"));
        self.cp.kubeconfig_for_token(&token).unwrap()
    }

    /// `kubectl auth can-i --as=system:serviceaccount:NAMESPACE:sa ARGS...`: yes or no.
    pub fn can_i(&self, sa: &str, args: &[&str]) -> bool {
        let mut full = vec![
            "auth".to_string(),
            "can-i".to_string(),
            format!("--as=system:serviceaccount:{NAMESPACE}:{sa}"),
        ];
        full.extend(args.iter().map(|a| a.to_string()));
        let out = self.cp.kubectl(&full);
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        match answer.as_str() {
            "yes" => true,
            "no" => false,
            _ => panic!(
                "kubectl {}: {answer} {}",
                full.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// A file for hook marks: a hook runs `sh -c "... >> <path>"`; the test counts its lines.
    pub fn mark(&self, name: &str) -> PathBuf {
        self.marks.join(name)
    }
}

/// The names of the pods the controller-manager made for Deployment `d` (the replicas'
/// identities, `$(POD_NAME)`).
pub fn deployment_pods(cp: &ControlPlane, d: &Value) -> Vec<String> {
    let replicas = d["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
    let labels = d["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect::<Vec<_>>()
        .join(",");
    wait_until(
        format!("the pods of Deployment {}", d["metadata"]["name"]),
        Duration::from_secs(120),
        || {
            let list =
                get_json(cp, &["get", "pods", "-n", NAMESPACE, "-l", &labels]).ok_or("no list")?;
            let mut names: Vec<String> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                .collect();
            names.sort();
            if names.len() >= replicas {
                Ok(names)
            } else {
                Err(format!("{names:?}"))
            }
        },
    )
}

/// The control plane's `gitVersion` without the `v` (what `--kube-version` takes).
pub fn server_version(cp: &ControlPlane) -> String {
    let v: Value = serde_json::from_str(&cp.kubectl_ok(["get", "--raw", "/version"]).unwrap())
        .expect("/version");
    v["gitVersion"]
        .as_str()
        .unwrap()
        .trim_start_matches('v')
        .to_string()
}

/// The one change the tests make to the chart: each webhook's `clientConfig.service` becomes a
/// `url` to 127.0.0.1:`port` with the same path; the caBundle (the chart's, from `tls.caBundle`)
/// must be the test CA.
pub fn point_webhooks_at(mwc: &mut Value, port: u16, certs: &Certs) {
    for w in mwc["webhooks"].as_array_mut().unwrap() {
        let cc = w["clientConfig"].as_object_mut().unwrap();
        let service = cc
            .remove("service")
            .expect("the chart's webhooks call a Service");
        let path = service["path"].as_str().unwrap_or("/");
        cc.insert(
            "url".into(),
            json!(format!("https://127.0.0.1:{port}{path}")),
        );
        assert_eq!(
            cc.get("caBundle").and_then(Value::as_str),
            Some(certs.ca_bundle().as_str()),
            "the chart's caBundle is not tls.caBundle"
        );
    }
}

/// `kubectl apply --server-side -f -` of the objects as one List (admin).
/// Applies the chart's CustomResourceDefinitions, waits until they are Established, then the
/// rest: what `helm install` does.
pub fn apply_crds_first(cp: &ControlPlane, crds: &[String], rest: &[String]) {
    apply_docs(cp, crds);
    cp.wait_crds_established(&[]).unwrap();
    apply_docs(cp, rest);
}

pub fn apply_list(cp: &ControlPlane, items: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    apply_docs(cp, &[list.to_string()]);
}

/// `kubectl apply --server-side -f -` of YAML (or JSON) documents (admin), as helm would.
pub fn apply_docs(cp: &ControlPlane, docs: &[String]) {
    let stream = docs.join("\n---\n");
    cp.kubectl_stdin(
        [
            "apply",
            "--server-side",
            "--field-manager=helm",
            "--force-conflicts",
            "-f",
            "-",
        ],
        &stream,
    )
    .unwrap_or_else(|e| panic!("the API server refused the objects: {e:#}"));
}

/// A ServiceAccount `ns/name` that may do `rules` in its namespace only (a Role and its
/// binding); its token's kubeconfig: an identity that lacks every other right.
pub fn service_account_with(cp: &ControlPlane, ns: &str, name: &str, rules: Value) -> PathBuf {
    apply_list(
        cp,
        &[
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": ns}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": name, "namespace": ns}, "rules": rules}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name, "namespace": ns},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
        ],
    );
    let token = cp
        .token_for_service_account(ns, name, Duration::from_secs(3600))
        .unwrap();
    cp.kubeconfig_for_token(&token).unwrap()
}

/// kubectl (admin) `ARGS -o json`, parsed; `None` when kubectl fails (not found, ...).
pub fn get_json(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let out = cp.kubectl(&args);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("kubectl -o json"))
}

/// kubectl with `input` on stdin, as `kubeconfig` (the raw output: status, stdout, stderr).
pub fn kubectl_stdin(cp: &ControlPlane, kubeconfig: &Path, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(cp.kubectl_path())
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!(
            "--cache-dir={}",
            cp.work_dir().join("kubectl-cache").display()
        ))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run kubectl");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    out
}

/// `kubectl create -f - -o json` (admin): the object as the API server stored it, or panics
/// with kubectl's stderr.
pub fn create(cp: &ControlPlane, object: &Value) -> Value {
    let out = kubectl_stdin(
        cp,
        cp.kubeconfig(),
        &["create", "-f", "-", "-o", "json"],
        &object.to_string(),
    );
    assert!(
        out.status.success(),
        "kubectl create {}/{} failed: {}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Creates namespace `name` with `labels` and waits for its `default` ServiceAccount (pods are
/// refused until the controller-manager made it).
pub fn namespace(cp: &ControlPlane, name: &str, labels: Value) {
    cp.apply(
        &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels}})
        .to_string(),
    )
    .unwrap();
    wait_until(
        format!("ServiceAccount {name}/default"),
        Duration::from_secs(120),
        || {
            cp.kubectl(["get", "serviceaccount", "default", "-n", name])
                .status
                .success()
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        },
    );
}

/// A pod with containers `containers` (each `busybox`, sleeping), no service-account token
/// (nothing random in its spec), labels and annotations as given.
pub fn pod(
    namespace: &str,
    name: &str,
    containers: &[&str],
    labels: Value,
    annotations: Value,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "annotations": annotations},
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "containers": containers.iter().map(|c| json!({
                "name": c, "image": "busybox:1.36", "command": ["sleep", "infinity"]
            })).collect::<Vec<_>>(),
        },
    })
}

/// A pod, or `None` when it does not exist.
pub fn get_pod(cp: &ControlPlane, namespace: &str, name: &str) -> Option<Value> {
    get_json(cp, &["get", "pod", name, "-n", namespace])
}

/// The pod's hook status annotation, parsed.
pub fn hook_status(pod: &Value) -> Option<Value> {
    pod["metadata"]["annotations"][STATUS]
        .as_str()
        .map(|s| serde_json::from_str(s).expect("the status annotation is JSON"))
}

/// The pod's plan annotation, parsed.
pub fn plan(pod: &Value) -> Option<Value> {
    pod["metadata"]["annotations"][PLAN]
        .as_str()
        .map(|s| serde_json::from_str(s).expect("the plan annotation is JSON"))
}

/// Waits for the pod's `restore-hooks.dev/exec` label to become `done` or `failed`; the pod.
pub fn wait_hooks_ended(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Value {
    wait_until(
        format!("the hooks of pod {namespace}/{name} to end"),
        timeout,
        || {
            let pod = get_pod(cp, namespace, name).ok_or("no pod")?;
            match pod["metadata"]["labels"][EXEC_LABEL].as_str() {
                Some("done" | "failed") => Ok(pod),
                other => Err(format!(
                    "exec label {other:?}, status {}",
                    pod["metadata"]["annotations"][STATUS]
                )),
            }
        },
    )
}

/// Waits until the pod is Running.
pub fn wait_running(cp: &ControlPlane, namespace: &str, name: &str) -> Value {
    wait_until(
        format!("pod {namespace}/{name} Running"),
        Duration::from_secs(120),
        || {
            let pod = get_pod(cp, namespace, name).ok_or("no pod")?;
            if pod["status"]["phase"] == "Running" {
                Ok(pod)
            } else {
                Err(format!("phase {}", pod["status"]["phase"]))
            }
        },
    )
}

/// The core/v1 Events about an object in `namespace`, oldest first.
pub fn events_about(cp: &ControlPlane, namespace: &str, name: &str) -> Vec<Value> {
    let list = get_json(
        cp,
        &[
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            &format!("involvedObject.name={name}"),
        ],
    )
    .unwrap_or_default();
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|e| {
        e["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    items
}

/// The Events about an object with `reason`.
pub fn events_with(cp: &ControlPlane, namespace: &str, name: &str, reason: &str) -> Vec<Value> {
    events_about(cp, namespace, name)
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// The lines of a mark file (empty when the hook never ran).
pub fn mark_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A hook command that appends `<word> <unix nanos>` to `path` (sh on the host, through kwok).
pub fn mark_cmd(path: &Path, word: &str) -> String {
    format!("echo {word} $(date +%s%N) >> '{}'", path.display())
}

/// Nanoseconds since the Unix epoch, on the same clock the marks use.
pub fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The status of RestoreRun `name`, once its phase is one of `phases`.
pub fn wait_restore_run(
    cp: &ControlPlane,
    name: &str,
    phases: &[&str],
    timeout: Duration,
) -> Value {
    wait_until(
        format!("RestoreRun {name} in phase {phases:?}"),
        timeout,
        || {
            let run = get_json(cp, &["get", "restoreruns.restore-hooks.dev", name])
                .ok_or("no RestoreRun")?;
            let phase = run["status"]["phase"].as_str().unwrap_or_default();
            if phases.contains(&phase) {
                Ok(run)
            } else {
                Err(format!("{}", run["status"]))
            }
        },
    )
}

/// One sample (or the sum of all samples with that prefix) of a Prometheus text exposition.
pub fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == sample || name.starts_with(&format!("{sample}{{")))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}
