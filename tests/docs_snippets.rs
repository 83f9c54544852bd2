//! Every fenced block of README.md and docs/*.md is checked by a rule, so that a snippet that goes
//! stale fails `cargo test`:
//!
//! - YAML: hook objects compile without a problem, a Velero `Restore`'s hooks too; a pod (or a
//!   pod's `metadata`) goes through `restore-hooks inject` and is not denied; fragments of a hook
//!   (a `postHooks` list, a `spec`, a `retry`) are compiled inside a RestoreHook; RestoreRuns,
//!   RestoreRecords and Kubernetes objects parse as their types and lose no field doing so; Helm
//!   values name only keys of the chart's values.yaml and render with the pinned helm (which checks
//!   them against values.schema.json).
//! - JSON: the plan and the status parse as the product's types and lose no field.
//! - Shell: every `restore-hooks ...` and `kubectl restore-hooks ...` parses with the real clap
//!   definition; every `helm install|upgrade|template ... --set k=v` names a key of values.yaml;
//!   every `cargo test --test X` / `cargo bench --bench X` names a target that exists; every
//!   script and repository file a command names exists; other programs are on a short list of
//!   tools the docs may use as they are.
//! - Untagged blocks listing the flags the chart passes: every flag is one the binary has.
//!
//! A block no rule covers fails the test, unless it is on `PROSE`, a small list of blocks that are
//! output or formats (with why nothing can run them); an entry of `PROSE` that matches no block
//! fails too. `core/tests/docs_snippets.rs` compiles the hook objects without building the servers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use restore_hooks::cli::{Cli, Command};
use restore_hooks_core::hooks::compiled::{
    compile_cluster_restore_hook, compile_restore_hook, compile_velero_restore,
};
use restore_hooks_core::hooks::plan::{ExecPlan, ExecStatus};
use restore_hooks_core::hooks::types::{
    ClusterRestoreHook, RestoreHook, RestoreRecord, RestoreRun, VeleroRestore,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Blocks that are output, messages or formats: nothing can run them. Page, the start of the
/// block's first line, and why.
const PROSE: &[(&str, &str, &str)] = &[
    (
        "docs/hooks.md",
        "ephemeral container restore-hooks-0-1 cannot start",
        "a message of the controller (core/src/hooks/ephemeral.rs)",
    ),
    ("docs/architecture.md", "AdmissionReview ─►", "a diagram"),
    (
        "docs/install.md",
        "Issuer <name>-selfsigned",
        "a diagram of the certificates the chart creates",
    ),
    (
        "docs/behaviour.md",
        "v1.<key id>.<hex MAC>",
        "the format of a signature",
    ),
    (
        "docs/behaviour.md",
        "--restore-resource-priorities=",
        "a flag of Velero's server; benches/restore.rs runs Velero with the copy in hooks.md",
    ),
    (
        "docs/hooks.md",
        "--restore-resource-priorities=",
        "a flag of Velero's server, which benches/restore.rs reads from this page and runs Velero with",
    ),
    (
        "docs/install.md",
        "creating RestoreHook shop/pg needs permission",
        "a message of the chart's admission policies (.ci/chart-apiserver-checks.sh)",
    ),
    (
        "docs/install.md",
        "pod shop/db: label restore-hooks.dev/exec",
        "a message of the chart's admission policies (.ci/chart-apiserver-checks.sh)",
    ),
    (
        "docs/install.md",
        "binding pod shop/web-0",
        "a message of the chart's admission policies (.ci/chart-apiserver-checks.sh)",
    ),
    (
        "docs/install.md",
        "pod shop/web-7d9f8-x2kqz is created",
        "a message of the chart's admission policies (.ci/chart-apiserver-checks.sh)",
    ),
    (
        "docs/install.md",
        "pod shop/db-0: its restore-hooks.dev/plan",
        "a message of the chart's admission policies (.ci/chart-apiserver-checks.sh)",
    ),
    (
        "docs/install.md",
        "creating Velero Restore velero/nightly-1",
        "a message of the chart's admission policies (.ci/chart-apiserver-checks.sh)",
    ),
    (
        "docs/install.md",
        "restore-hooks' controller may change only",
        "a message of the chart's admission policies (.ci/chart-apiserver-checks.sh)",
    ),
];

/// Programs the docs use as they are: nothing of this repository to check in their arguments.
const TOOLS: &[&str] = &[
    "base64", "cat", "cmctl", "command", "curl", "docker", "echo", "exit", "grep", "jq", "ln",
    "openssl", "printf", "sed", "velero", "cosign",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One fenced block: where it starts, its info string and its text (without the fence's
/// indentation).
struct Block {
    page: String,
    line: usize,
    lang: String,
    text: String,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }
}

fn pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    pages.sort();
    pages.insert(0, "README.md".to_string());
    pages
}

fn blocks_of(page: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, String, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        match &mut open {
            None => {
                if let Some(lang) = trimmed.strip_prefix("```") {
                    open = Some((n + 1, indent, lang.trim().to_string(), String::new()));
                }
            }
            Some((start, fence_indent, lang, body)) => {
                if trimmed == "```" {
                    blocks.push(Block {
                        page: page.to_string(),
                        line: *start,
                        lang: std::mem::take(lang),
                        text: std::mem::take(body),
                    });
                    open = None;
                } else {
                    let cut = indent.min(*fence_indent);
                    body.push_str(&line[cut..]);
                    body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "{page}: a fenced block is never closed");
    blocks
}

fn all_blocks() -> Vec<Block> {
    pages()
        .iter()
        .flat_map(|page| {
            let text = std::fs::read_to_string(root().join(page)).unwrap();
            blocks_of(page, &text)
        })
        .collect()
}

// --- YAML and JSON ---------------------------------------------------------------------------

/// A sketch of a field's shape (`<core/v1 Container>`), not an example.
fn is_sketch(doc: &str) -> bool {
    doc.contains("[ <") || doc.contains(": <")
}

/// The first leaf of `doc` that `typed` (the document after a trip through its type) lost or
/// changed; a `null` may be absent.
fn lost(doc: &Value, typed: &Value, path: &str) -> Option<String> {
    match (doc, typed) {
        (Value::Null, Value::Null) => None,
        (Value::Null, _) => None,
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| match b.get(k) {
            Some(w) => lost(v, w, &format!("{path}.{k}")),
            None if v.is_null() => None,
            None => Some(format!("{path}.{k}")),
        }),
        (Value::Object(a), Value::Null) if a.is_empty() => None,
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (v, w))| lost(v, w, &format!("{path}[{i}]"))),
        (a, b) if a == b => None,
        // YAML without a schema: `0` for a string field, `"1"` for an int-or-string.
        (Value::Number(n), Value::String(s)) | (Value::String(s), Value::Number(n))
            if n.to_string() == *s =>
        {
            None
        }
        _ => Some(format!("{path} ({doc} became {typed})")),
    }
}

/// `doc` parses as `T` and keeps every field it sets.
fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<T, String> {
    let value: T =
        serde_json::from_value(doc.clone()).map_err(|e| format!("does not parse: {e}"))?;
    let back = serde_json::to_value(&value).unwrap();
    match lost(doc, &back, "") {
        None => Ok(value),
        Some(path) => Err(format!("field {path} is not part of the type")),
    }
}

fn compiles(hook: Value) -> Result<(), String> {
    let hook: RestoreHook = typed(&hook)?;
    match compile_restore_hook(&hook).first_problem() {
        None => Ok(()),
        Some(problem) => Err(format!("has a problem: {problem}")),
    }
}

fn restore_hook(spec: Value) -> Value {
    json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
        "metadata": {"name": "docs", "namespace": "shop"},
        "spec": spec,
    })
}

/// `restore-hooks inject` on `pod`, created in a restore namespace (by a controller, not by
/// Velero: its annotation hooks are restore-hooks' to run, and an invalid one is denied), as the
/// webhook would admit it: not denied, and without a warning.
fn injects(pod: &Value) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pod.yaml");
    std::fs::write(&file, serde_json::to_string(pod).unwrap()).unwrap();
    let argv = ["restore-hooks", "inject", "--restore", "nightly-1", "-f"];
    let cli = Cli::try_parse_from(argv.into_iter().chain([file.to_str().unwrap()]))
        .map_err(|e| e.to_string())?;
    let Command::Inject(args) = cli.command else {
        unreachable!()
    };
    let preview = restore_hooks::inject_cli::preview(&args).map_err(|e| format!("{e:#}"))?;
    match (preview.denied, &preview.warnings[..]) {
        (None, []) => Ok(()),
        (None, warnings) => Err(format!("is admitted with warnings: {warnings:?}")),
        (Some(message), _) => Err(format!("is denied: {message}")),
    }
}

/// A pod carrying `metadata` (its annotations, labels) over a container named as the exec
/// hook's annotation names it.
fn restored_pod(metadata: &Value) -> Value {
    let container = metadata
        .pointer("/annotations/post.hook.restore.velero.io~1container")
        .and_then(Value::as_str)
        .unwrap_or("app");
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "docs", "namespace": "shop"},
        "spec": {"containers": [{"name": container, "image": "busybox:1.36"}]},
    });
    for (key, value) in metadata.as_object().into_iter().flatten() {
        match (pod["metadata"].get_mut(key), value) {
            (Some(Value::Object(have)), Value::Object(add)) => {
                have.extend(add.clone());
            }
            _ => pod["metadata"][key] = value.clone(),
        }
    }
    pod
}

fn values_yaml() -> Value {
    let text = std::fs::read_to_string(root().join("charts/restore-hooks/values.yaml")).unwrap();
    yaml_serde::from_str(&text).unwrap()
}

/// The first key of `doc` that values.yaml does not have. A map that is empty in values.yaml
/// (labels, annotations, extra settings) takes any key.
fn unknown_value_key(doc: &Value, values: &Value, path: &str) -> Option<String> {
    let (Value::Object(doc), Value::Object(values)) = (doc, values) else {
        return None;
    };
    if values.is_empty() {
        return None;
    }
    doc.iter().find_map(|(k, v)| match values.get(k) {
        None => Some(format!("{path}{k}")),
        Some(known) => unknown_value_key(v, known, &format!("{path}{k}.")),
    })
}

/// The pinned helm (`.ci/install-tools.sh`), as the real-control-plane tests find it.
fn helm() -> PathBuf {
    let helm = std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".tools/helm/helm"));
    assert!(
        helm.is_file(),
        "{} is missing: Helm values in the docs are rendered with the pinned helm; run \
         `bash .ci/install-tools.sh` (or set HELM)",
        helm.display()
    );
    helm
}

/// The oldest Kubernetes the chart accepts (Chart.yaml's `kubeVersion: ">=X.Y.Z-0"`): docs
/// values must render there.
fn chart_floor() -> String {
    let chart = std::fs::read_to_string(root().join("charts/restore-hooks/Chart.yaml")).unwrap();
    let line = chart
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .expect("Chart.yaml has a kubeVersion");
    let floor = line.trim().trim_matches('"').trim_start_matches(">=");
    floor.trim_end_matches("-0").to_string()
}

/// `helm template` with `values`: the chart's values.schema.json accepts them and the chart
/// renders.
fn renders(values: &Value) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, serde_json::to_string(values).unwrap()).unwrap();
    let out = std::process::Command::new(helm())
        .args([
            "template",
            "docs",
            "charts/restore-hooks",
            "-n",
            "restore-hooks",
        ])
        .args(["--kube-version", &chart_floor(), "-f"])
        .arg(&file)
        .current_dir(root())
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "does not render: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One YAML document of a block: the rule that covers it, or why it fails.
fn check_yaml_doc(doc: &str) -> Result<&'static str, String> {
    if doc.trim().is_empty() || doc.lines().all(|l| l.trim_start().starts_with('#')) {
        return Ok("empty");
    }
    let value: Value = yaml_serde::from_str(doc).map_err(|e| format!("is not YAML: {e}"))?;
    let str_at = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or("");
    match (str_at("apiVersion"), str_at("kind")) {
        ("restore-hooks.dev/v1alpha1", "RestoreHook" | "ClusterRestoreHook") if is_sketch(doc) => {
            Ok("a sketch of the fields")
        }
        ("restore-hooks.dev/v1alpha1", "RestoreHook") => {
            let mut hook = value.clone();
            if hook.pointer("/metadata/namespace").is_none() {
                hook["metadata"]["namespace"] = json!("shop");
            }
            compiles(hook).map(|()| "compiled")
        }
        ("restore-hooks.dev/v1alpha1", "ClusterRestoreHook") => {
            let hook: ClusterRestoreHook = typed(&value)?;
            match compile_cluster_restore_hook(&hook).first_problem() {
                None => Ok("compiled"),
                Some(problem) => Err(format!("has a problem: {problem}")),
            }
        }
        ("restore-hooks.dev/v1alpha1", "RestoreRun") => {
            typed::<RestoreRun>(&value).map(|_| "typed")
        }
        ("restore-hooks.dev/v1alpha1", "RestoreRecord") => {
            typed::<RestoreRecord>(&value).map(|_| "typed")
        }
        ("velero.io/v1", "Restore") => {
            let restore: VeleroRestore = typed(&value)?;
            match compile_velero_restore(&restore).first_problem() {
                None => Ok("compiled"),
                Some(problem) => Err(format!("has a problem: {problem}")),
            }
        }
        ("v1", "Pod") => injects(&value).map(|()| "injected"),
        ("apps/v1", "StatefulSet") => {
            typed::<k8s_openapi::api::apps::v1::StatefulSet>(&value).map(|_| "typed")
        }
        ("apps/v1", "Deployment") => {
            typed::<k8s_openapi::api::apps::v1::Deployment>(&value).map(|_| "typed")
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            typed::<k8s_openapi::api::rbac::v1::ClusterRole>(&value).map(|_| "typed")
        }
        ("rbac.authorization.k8s.io/v1", "Role") => {
            typed::<k8s_openapi::api::rbac::v1::Role>(&value).map(|_| "typed")
        }
        // GitOps objects (docs/gitops.md): the chart values they carry render.
        ("argoproj.io/v1alpha1", "Application") => {
            let source = &value["spec"]["source"];
            if source["path"] != "charts/restore-hooks" {
                return Err(
                    "an Application whose spec.source.path is not charts/restore-hooks".into(),
                );
            }
            renders(&source["helm"]["valuesObject"]).map(|()| "its chart values render")
        }
        ("helm.toolkit.fluxcd.io/v2", "HelmRelease") => {
            if value["spec"]["chart"]["spec"]["chart"] != "./charts/restore-hooks" {
                return Err("a HelmRelease whose chart is not ./charts/restore-hooks".into());
            }
            renders(&value["spec"]["values"]).map(|()| "its chart values render")
        }
        ("kustomize.toolkit.fluxcd.io/v1", "Kustomization") => {
            let spec = &value["spec"];
            // Flux's required fields.
            match ["interval", "prune", "sourceRef"]
                .iter()
                .find(|f| spec.get(**f).is_none())
            {
                Some(f) => Err(format!("a Flux Kustomization without spec.{f}")),
                None => Ok("a Flux Kustomization with its required fields"),
            }
        }
        ("", "") => check_fragment(&value),
        (api, kind) => Err(format!("no rule covers kind {kind:?} ({api:?})")),
    }
}

/// `argocd-cm` data (docs/gitops.md): each health check names a kind of this product's CRDs.
fn check_argocd_health(data: &Value) -> Result<&'static str, String> {
    let crds =
        std::fs::read_to_string(root().join("charts/restore-hooks/files/crds/restorehooks.yaml"))
            .unwrap()
            + &std::fs::read_to_string(
                root().join("charts/restore-hooks/files/crds/clusterrestorehooks.yaml"),
            )
            .unwrap();
    let map = data.as_object().ok_or("data is not a map")?;
    for key in map.keys() {
        let Some(kind) = key.strip_prefix("resource.customizations.health.restore-hooks.dev_")
        else {
            return Err(format!(
                "{key}: not an Argo CD health check of restore-hooks.dev"
            ));
        };
        if !crds.contains(&format!("kind: {kind}\n")) {
            return Err(format!("{key}: restore-hooks.dev has no kind {kind}"));
        }
    }
    Ok("Argo CD health checks of the product's kinds")
}

/// A YAML fragment without a kind: part of a hook object, a pod's metadata, or Helm values.
fn check_fragment(value: &Value) -> Result<&'static str, String> {
    if value.is_array() {
        return compiles(restore_hook(json!({"postHooks": value}))).map(|()| "postHooks compiled");
    }
    let Some(map) = value.as_object() else {
        return Err("no rule covers a YAML scalar".into());
    };
    let keys: BTreeSet<&str> = map.keys().map(String::as_str).collect();
    if keys == BTreeSet::from(["data"]) {
        return check_argocd_health(&value["data"]);
    }
    if keys == BTreeSet::from(["spec"]) {
        return compiles(restore_hook(value["spec"].clone())).map(|()| "spec compiled");
    }
    if keys == BTreeSet::from(["retry"]) {
        let exec = json!({"container": "app", "command": ["/bin/true"], "retry": value["retry"]});
        return compiles(restore_hook(json!({"postHooks": [{"exec": exec}]})))
            .map(|()| "retry compiled");
    }
    if keys == BTreeSet::from(["metadata"]) {
        return injects(&restored_pod(&value["metadata"])).map(|()| "pod injected");
    }
    let values = values_yaml();
    if keys.iter().all(|k| values.get(*k).is_some()) {
        if let Some(key) = unknown_value_key(value, &values, "") {
            return Err(format!(
                "Helm value {key} is not in charts/restore-hooks/values.yaml"
            ));
        }
        return renders(value).map(|()| "Helm values rendered");
    }
    Err(format!("no rule covers a fragment with keys {keys:?}"))
}

fn check_json(text: &str) -> Result<&'static str, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("is not JSON: {e}"))?;
    if value.get("id").is_some() && value.get("hooks").is_some() {
        typed::<ExecPlan>(&value).map(|_| "a plan")
    } else if value.get("hooks").is_some() {
        typed::<ExecStatus>(&value).map(|_| "a status")
    } else {
        Err("no rule covers this JSON".into())
    }
}

// --- shell -------------------------------------------------------------------------------------

/// The simple commands of a shell text, each with the line it starts on (from 0): words as the
/// shell splits them (quotes, backslash-newline, comments), commands split at newlines, `;`, `|`,
/// `&&`, `||`, `&` and command substitutions, redirections dropped. Enough for documentation
/// snippets; not a shell.
fn shell_commands(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut start = 0;
    let mut line = 0;
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let end_word = |words: &mut Vec<String>, word: &mut Option<String>| {
        if let Some(w) = word.take() {
            words.push(w);
        }
    };
    macro_rules! end_command {
        () => {{
            end_word(&mut words, &mut word);
            if !words.is_empty() {
                out.push((start, std::mem::take(&mut words)));
            }
            start = line;
        }};
    }
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    w.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    w.push(chars[i]);
                    i += 1;
                }
            }
            '\\' if next == Some('\n') => {
                line += 1;
                i += 1;
            }
            '\\' => {
                if let Some(n) = next {
                    word.get_or_insert_with(String::new).push(n);
                    i += 1;
                }
            }
            '#' if word.is_none() => {
                while i + 1 < chars.len() && chars[i + 1] != '\n' {
                    i += 1;
                }
            }
            ' ' | '\t' => end_word(&mut words, &mut word),
            '\n' => {
                line += 1;
                end_command!();
            }
            ';' | '|' | '&' | ')' => {
                if (c == '|' || c == '&') && next == Some(c) {
                    i += 1;
                }
                end_command!();
            }
            '$' if next == Some('(') && chars.get(i + 2) == Some(&'(') => {
                // Arithmetic: part of the word.
                let w = word.get_or_insert_with(String::new);
                while i < chars.len() && !(chars[i] == ')' && chars.get(i + 1) == Some(&')')) {
                    w.push(chars[i]);
                    i += 1;
                }
                w.push_str("))");
                i += 1;
            }
            '$' if next == Some('(') => {
                // A command substitution: what comes before it is a word of its own command.
                i += 1;
                end_command!();
            }
            '>' | '<' => {
                if word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|d| d.is_ascii_digit()))
                {
                    word = None;
                }
                end_word(&mut words, &mut word);
                while matches!(chars.get(i + 1), Some('>' | '&')) {
                    i += 1;
                }
                while matches!(chars.get(i + 1), Some(' ')) {
                    i += 1;
                }
                while matches!(chars.get(i + 1), Some(c) if !c.is_whitespace() && !";|)".contains(*c))
                {
                    i += 1;
                }
            }
            _ => word.get_or_insert_with(String::new).push(c),
        }
        i += 1;
    }
    end_word(&mut words, &mut word);
    if !words.is_empty() {
        out.push((start, words));
    }
    out
}

/// The command text of a block: all of a `sh` block; of a `console` block (or a `sh` block
/// written with prompts), the lines after `$ ` and their continuations, the rest being output.
/// Each line keeps its place, so that errors name the right line.
fn command_text(block: &Block) -> String {
    let prompted = block.lang == "console" || block.text.lines().any(|l| l.starts_with("$ "));
    if !prompted {
        return block.text.clone();
    }
    let mut text = String::new();
    let mut continued = false;
    for l in block.text.lines() {
        if let Some(command) = l.strip_prefix("$ ") {
            text.push_str(command);
            continued = command.trim_end().ends_with('\\');
        } else if continued {
            text.push_str(l);
            continued = l.trim_end().ends_with('\\');
        }
        text.push('\n');
    }
    text
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// A path of this repository a command names: it must exist.
fn repo_path(word: &str) -> Option<&str> {
    let first = word.split('/').next()?;
    let known = [
        "charts", "examples", "certs", "e2e", "benches", "tests", "docs", ".ci", "core",
    ];
    (word.contains('/') && known.contains(&first)).then_some(word)
}

/// `--set a.b=1,c=2`: the keys, with escaped dots kept in their key.
fn set_keys(arg: &str) -> Vec<Vec<String>> {
    let mut keys = Vec::new();
    let mut depth = 0;
    let mut part = String::new();
    let mut parts = Vec::new();
    for c in arg.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut part));
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
    parts.push(part);
    for p in parts {
        let key = p.split_once('=').map_or(p.as_str(), |(k, _)| k);
        let mut path = vec![String::new()];
        let mut escaped = false;
        for c in key.chars() {
            match c {
                '\\' if !escaped => escaped = true,
                '.' if !escaped => path.push(String::new()),
                _ => {
                    escaped = false;
                    path.last_mut().unwrap().push(c);
                }
            }
        }
        keys.push(
            path.into_iter()
                .map(|k| k.split('[').next().unwrap().to_string())
                .collect(),
        );
    }
    keys
}

fn check_helm(words: &[String]) -> Result<&'static str, String> {
    if !matches!(
        words.get(1).map(String::as_str),
        Some("install" | "upgrade" | "template")
    ) {
        return Ok("helm");
    }
    let values = values_yaml();
    let mut args = words.iter().skip(2);
    while let Some(arg) = args.next() {
        let set = match arg.as_str() {
            "--set" | "--set-string" => args.next().cloned(),
            a => a
                .strip_prefix("--set=")
                .or_else(|| a.strip_prefix("--set-string="))
                .map(str::to_string),
        };
        if let Some(set) = set {
            for key in set_keys(&set) {
                let mut node = &values;
                for k in &key {
                    if node.as_object().is_some_and(|m| m.is_empty()) {
                        break;
                    }
                    node = node.get(k).ok_or_else(|| {
                        format!(
                            "--set {}: no such key in charts/restore-hooks/values.yaml",
                            key.join(".")
                        )
                    })?;
                }
            }
        }
        if let Some(path) = repo_path(arg)
            && !root().join(path).exists()
        {
            return Err(format!("{path} does not exist"));
        }
    }
    Ok("helm values checked")
}

fn check_cargo(words: &[String]) -> Result<&'static str, String> {
    for (flag, dir) in [("--test", "tests"), ("--bench", "benches")] {
        if let Some(i) = words.iter().position(|w| w == flag) {
            let name = words.get(i + 1).ok_or(format!("{flag} without a name"))?;
            if !root().join(dir).join(format!("{name}.rs")).is_file() {
                return Err(format!("{flag} {name}: there is no {dir}/{name}.rs"));
            }
        }
    }
    if let Some(i) = words.iter().position(|w| w == "-p") {
        let name = &words[i + 1];
        let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
        let members = ["restore-hooks", "restore-hooks-core", "kube-sim"];
        if !members.contains(&name.as_str()) && !manifest.contains(name.as_str()) {
            return Err(format!("-p {name}: not a package of the workspace"));
        }
    }
    Ok("cargo target exists")
}

fn check_command(words: &[String]) -> Result<&'static str, String> {
    const KEYWORDS: &[&str] = &[
        "if", "then", "else", "elif", "fi", "!", "do", "done", "while",
    ];
    let words: Vec<String> = words
        .iter()
        .skip_while(|w| KEYWORDS.contains(&w.as_str()) || is_assignment(w))
        .cloned()
        .collect();
    let Some(program) = words.first() else {
        return Ok("an assignment");
    };
    for word in &words[1..] {
        if let Some(path) = repo_path(word)
            && !root().join(path).exists()
        {
            return Err(format!("{path} does not exist"));
        }
    }
    match program.as_str() {
        "restore-hooks" => Cli::try_parse_from(&words)
            .map(|_| "parsed by the CLI")
            .map_err(|e| format!("does not parse: {e}")),
        "kubectl" if words.get(1).map(String::as_str) == Some("restore-hooks") => {
            Cli::try_parse_from(&words[1..])
                .map(|_| "parsed by the CLI")
                .map_err(|e| format!("does not parse: {e}"))
        }
        // OpenShift's oc takes kubectl's commands (docs/openshift.md).
        "kubectl" | "oc" => Ok("kubectl"),
        // A loop's header; the commands of its body are checked line by line.
        "for" if words.get(2).map(String::as_str) == Some("in") => Ok("a loop"),
        "helm" => check_helm(&words),
        "cargo" => check_cargo(&words),
        "bash" | "sh" => match words.get(1).and_then(|w| repo_path(w)) {
            Some(_) => Ok("a script of the repository"),
            None => Err("no rule covers a script outside the repository".into()),
        },
        p if repo_path(p).is_some() => {
            if root().join(p).is_file() {
                Ok("a script of the repository")
            } else {
                Err(format!("{p} does not exist"))
            }
        }
        p if TOOLS.contains(&p) => Ok("a tool"),
        p => Err(format!("no rule covers the program {p:?}")),
    }
}

// --- untagged blocks ---------------------------------------------------------------------------

/// Every long flag of the binary, any subcommand.
fn long_flags() -> BTreeSet<String> {
    fn walk(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        for arg in cmd.get_arguments() {
            if let Some(long) = arg.get_long() {
                out.insert(long.to_string());
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(&Cli::command(), &mut out);
    out
}

/// A list of the flags the chart passes: every `--flag` is the binary's.
fn check_flag_list(text: &str) -> Option<Result<&'static str, String>> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let is_list = lines.iter().all(|l| {
        let l = l.trim();
        l.starts_with("--") || l.starts_with("[--") || l == "<role>"
    });
    if !is_list {
        return None;
    }
    let flags = long_flags();
    for word in text.split_whitespace() {
        let Some(flag) = word.trim_start_matches('[').strip_prefix("--") else {
            continue;
        };
        let name = flag.split(['=', ']']).next().unwrap();
        if !flags.contains(name) {
            return Some(Err(format!("--{name} is not a flag of restore-hooks")));
        }
    }
    Some(Ok("flags of the binary"))
}

// --- the test ----------------------------------------------------------------------------------

/// The rule that covers `block`, or why it fails.
fn check(block: &Block) -> Result<String, String> {
    match block.lang.as_str() {
        "yaml" => {
            let mut rules = Vec::new();
            for doc in block.text.split("\n---") {
                let rule = check_yaml_doc(doc).map_err(|e| format!("{}\n{e}", doc.trim()))?;
                rules.push(rule);
            }
            Ok(rules.join(", "))
        }
        "json" => check_json(&block.text).map(str::to_string),
        "sh" | "console" => {
            let text = command_text(block);
            let commands = shell_commands(&text);
            if commands.is_empty() {
                return Err("no command".into());
            }
            let mut rules = BTreeSet::new();
            for (line, words) in commands {
                let rule = check_command(&words).map_err(|e| {
                    format!("line {}: `{}`: {e}", block.line + 1 + line, words.join(" "))
                })?;
                rules.insert(rule);
            }
            Ok(rules.into_iter().collect::<Vec<_>>().join(", "))
        }
        "" => check_flag_list(&block.text)
            .unwrap_or_else(|| Err("no rule covers this untagged block".into()))
            .map(str::to_string),
        lang => Err(format!("no rule covers blocks of {lang:?}")),
    }
}

#[test]
fn every_fenced_block_of_the_docs_is_checked_by_a_rule() {
    let blocks = all_blocks();
    let mut failures = Vec::new();
    let mut prose_used = vec![false; PROSE.len()];
    let mut counted = std::collections::BTreeMap::<String, usize>::new();
    for block in &blocks {
        let first = block.text.lines().next().unwrap_or("");
        if let Some(i) = PROSE
            .iter()
            .position(|(page, start, _)| *page == block.page && first.starts_with(start))
        {
            prose_used[i] = true;
            continue;
        }
        match check(block) {
            Ok(rule) => *counted.entry(rule).or_default() += 1,
            Err(e) => failures.push(format!("{} ({}): {e}", block.at(), block.lang)),
        }
    }
    for (used, (page, start, _)) in prose_used.iter().zip(PROSE) {
        if !used {
            failures.push(format!(
                "PROSE names a block of {page} starting {start:?} that is not there any more"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} blocks fail:\n\n{}",
        failures.len(),
        blocks.len(),
        failures.join("\n\n")
    );
    eprintln!("{} blocks checked: {counted:#?}", blocks.len());
    assert!(blocks.len() >= 50, "only {} blocks found", blocks.len());
}

/// The README's first block is the test command `.ci/run` runs, word for word; it stays short, and
/// quotes the chart's Kubernetes floor as Chart.yaml has it.
#[test]
fn the_readme_starts_with_the_demo_and_the_ci_test_command() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let first = &blocks_of("README.md", &readme)[0];
    let commands = shell_commands(&first.text);
    assert_eq!(
        commands
            .iter()
            .map(|(_, w)| w.join(" "))
            .collect::<Vec<_>>(),
        [
            "cargo run --release -- demo",
            "cargo test --workspace --locked"
        ],
        "README.md must start with the demo and the test command"
    );
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l == "cargo test --workspace --locked"),
        ".ci/run no longer runs the README's test command"
    );
    // The compatibility matrix quotes the chart's floor as Chart.yaml has it.
    let chart = std::fs::read_to_string(root().join("charts/restore-hooks/Chart.yaml")).unwrap();
    let floor = chart
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .expect("Chart.yaml has a kubeVersion")
        .trim()
        .trim_matches('"');
    assert!(
        readme.contains(&format!("`kubeVersion: {floor}`")),
        "README.md's compatibility matrix must quote Chart.yaml's kubeVersion: {floor}"
    );
    let minor = floor
        .trim_start_matches(">=")
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    assert!(
        readme.contains(&format!("Kubernetes {minor} or newer")),
        "README.md's quick start must ask for Kubernetes {minor} or newer (Chart.yaml: {floor})"
    );
    assert!(
        readme.len() < 10_000,
        "README.md is {} characters; keep it under 10,000 (the rest belongs in docs/)",
        readme.len()
    );
}

/// Every relative link of README.md and docs/*.md names a file of the repository, and a
/// Markdown page's anchor names one of its headings (GitHub's rule: lowercase, punctuation
/// dropped, spaces as dashes). Links inside fenced blocks are not links.
#[test]
fn every_relative_link_of_the_docs_resolves() {
    fn anchors(text: &str) -> BTreeSet<String> {
        text.lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| {
                l.trim_start_matches('#')
                    .trim()
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect()
            })
            .collect()
    }
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(root().join(&page)).unwrap();
        let fenced: BTreeSet<usize> = blocks_of(&page, &text)
            .iter()
            .flat_map(|b| b.line..=b.line + b.text.lines().count() + 1)
            .collect();
        for (n, line) in text.lines().enumerate() {
            if fenced.contains(&(n + 1)) {
                continue;
            }
            for m in link.captures_iter(line) {
                let target = &m[1];
                if target.starts_with("http") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let dir = Path::new(&page).parent().unwrap();
                let file = if path.is_empty() {
                    root().join(&page)
                } else {
                    root().join(dir).join(path)
                };
                if !file.exists() {
                    broken.push(format!("{page}:{}: {target}: no such file", n + 1));
                } else if !fragment.is_empty()
                    && file.extension().is_some_and(|e| e == "md")
                    && !anchors(&std::fs::read_to_string(&file).unwrap()).contains(fragment)
                {
                    broken.push(format!("{page}:{}: {target}: no such heading", n + 1));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The rules themselves fail on what they are for.
#[test]
fn the_rules_catch_stale_snippets() {
    let bad = |lang: &str, text: &str| Block {
        page: "test".into(),
        line: 1,
        lang: lang.into(),
        text: text.into(),
    };
    let cases = [
        ("sh", "restore-hooks describe nightly-1 --no-such-flag\n"),
        ("console", "$ kubectl restore-hooks describe\n"),
        (
            "sh",
            "helm install x charts/restore-hooks --set config.noSuchKey=1\n",
        ),
        ("sh", "cargo test --test no_such_test\n"),
        ("sh", "examples/no-such-script.sh\n"),
        ("sh", "make-believe --now\n"),
        (
            "yaml",
            "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: x}\nspec:\n  postHooks:\n  - exec: {command: [a], onError: Sometimes}\n",
        ),
        (
            "yaml",
            "apiVersion: restore-hooks.dev/v1alpha1\nkind: RestoreHook\nmetadata: {name: x}\nspec:\n  postHook: []\n",
        ),
        ("yaml", "metrics:\n  noSuchValue: true\n"),
        (
            "yaml",
            "metadata:\n  annotations:\n    post.hook.restore.velero.io/command: '[\"unclosed'\n",
        ),
        (
            "json",
            "{\"hooks\": [{\"name\": \"a\", \"index\": 0, \"container\": \"c\", \"phase\": \"Maybe\"}]}",
        ),
        ("", "--no-such-flag=1\n"),
        ("text", "anything\n"),
    ];
    for (lang, text) in cases {
        assert!(
            check(&bad(lang, text)).is_err(),
            "a stale {lang} snippet passed: {text}"
        );
    }
    let good = [
        (
            "console",
            "$ restore-hooks inject -f pod.yaml --restore nightly-1 -o patch\noutput line\n",
        ),
        (
            "sh",
            "x=$(kubectl get pods -o name | grep db)\nrestore-hooks describe \"$x\" >&2 # a comment\n",
        ),
    ];
    for (lang, text) in good {
        assert_eq!(check(&bad(lang, text)).map(|_| ()), Ok(()), "{text}");
    }
}

#[test]
fn shell_commands_split_as_the_shell_does() {
    let text = "a 'b c' \"d $(e f)\" \\\n  g # h\nx=$(k l | m) && n >/dev/null 2>&1; o <in\n";
    let got: Vec<Vec<String>> = shell_commands(text).into_iter().map(|(_, w)| w).collect();
    let want: Vec<Vec<&str>> = vec![
        vec!["a", "b c", "d $(e f)", "g"],
        vec!["x="],
        vec!["k", "l"],
        vec!["m"],
        vec!["n"],
        vec!["o"],
    ];
    assert_eq!(got, want);
    assert!(
        Path::new(&root())
            .join("charts/restore-hooks/values.yaml")
            .is_file()
    );
}
