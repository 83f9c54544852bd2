//! `restore-hooks convert` end to end, as a process: the example docs/hooks.md shows, the exit
//! codes, and its output fed to `restore-hooks inject` (docs/behaviour.md §4.10).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn restore_hooks(args: &[&str], stdin: Option<&str>, dir: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_restore-hooks"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn convert(args: &[&str], stdin: Option<&str>) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    restore_hooks(&[&["convert"], args].concat(), stdin, root)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn documents(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    yaml_serde::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The first fenced block starting with "```{lang}" after `after` in `doc`.
fn block_after<'d>(doc: &'d str, after: &str, lang: &str) -> &'d str {
    let at = doc
        .find(after)
        .unwrap_or_else(|| panic!("docs/hooks.md has no {after:?}"));
    let fence = format!("```{lang}\n");
    let start = at + doc[at..].find(&fence).unwrap() + fence.len();
    let end = start + doc[start..].find("```").unwrap();
    &doc[start..end]
}

/// The example in docs/hooks.md is what the binary does: its input, its command line, its output
/// (as objects), and nothing on stderr.
#[test]
fn the_documented_example_runs_as_shown() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/hooks.md")).unwrap();
    let input_marker = "<!-- convert-example: input ";
    let at = doc.find(input_marker).expect("the example's input marker");
    let file = doc[at + input_marker.len()..]
        .split_whitespace()
        .next()
        .unwrap();
    let input = block_after(&doc, input_marker, "yaml");
    let console = block_after(&doc, "<!-- convert-example: command -->", "console");
    let line = console
        .lines()
        .find_map(|l| l.strip_prefix("$ restore-hooks "))
        .expect("a restore-hooks command line");
    let args: Vec<&str> = line.split_whitespace().take_while(|a| *a != ">").collect();
    assert!(args.contains(&file), "{line} does not read {file}");
    let output = block_after(&doc, "<!-- convert-example: output -->", "yaml");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(file), input).unwrap();
    let out = restore_hooks(&args, None, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    assert_eq!(
        documents(&text(&out.stdout)),
        documents(output),
        "the binary printed:\n{}",
        text(&out.stdout)
    );
}

/// 0: converted, notes on stderr; 1: an object not converted, the others written; 2: unusable.
#[test]
fn exit_codes() {
    let good = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: shop, labels: {app: a}, \
        annotations: {post.hook.restore.velero.io/command: /bin/true, pre.hook.backup.velero.io/command: /bin/sync}}\n\
        spec: {containers: [{name: c, image: i}]}\n";
    let out = convert(&["-f", "-"], Some(good));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with(
            "Note: Pod shop/a (- document 1): pre.hook.backup.velero.io/command: backup hooks"
        ),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(documents(&text(&out.stdout)).len(), 1);

    let bad = good
        .replace("name: a,", "name: b,")
        .replace("app: a", "app: b")
        .replace(
            "/bin/true",
            "/bin/true, post.hook.restore.velero.io/exec-timeout: '30'",
        );
    let dir = tempfile::tempdir().unwrap();
    let bad_file = dir.path().join("bad.yaml");
    std::fs::write(&bad_file, &bad).unwrap();
    let out = convert(
        &[
            "-f",
            "-",
            "-f",
            bad_file.to_str().unwrap(),
            "--strip-velero-hooks",
        ],
        Some(good),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "Error: Pod shop/b ({} document 1): post.hook.restore.velero.io/exec-timeout: ",
            bad_file.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("Velero ignores such a value"), "{stderr}");
    assert!(stderr.ends_with("restore-hooks convert: 1 object(s) not converted (errors above): nothing was written for them, and Velero keeps running their hooks\n"), "{stderr}");
    // Pod a: its RestoreHook, then itself without the annotation. Nothing of pod b.
    let written = documents(&text(&out.stdout));
    let names: Vec<(&str, &str)> = written
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, [("RestoreHook", "velero-pod-a"), ("Pod", "a")]);
    assert_eq!(
        written[1]["metadata"]["annotations"],
        serde_json::json!({"pre.hook.backup.velero.io/command": "/bin/sync"})
    );

    let cases: [(&[&str], Option<&str>, &str); 6] = [
        (
            &["-f", "does-not-exist.yaml"],
            None,
            "cannot read does-not-exist.yaml",
        ),
        (
            &["-f", "-"],
            Some("{{{"),
            "- document 1: not valid YAML or JSON",
        ),
        (&["-f", "-"], Some("- a\n- b\n"), "not a Kubernetes object"),
        (
            &["-f", "-", "-f", "-"],
            Some(good),
            "standard input can be read once",
        ),
        (
            &["-f", "-", "-n", "Shop"],
            Some(good),
            "--namespace \"Shop\" is not a namespace name",
        ),
        (
            &["-f", "-", "--restores", "[a"],
            Some(good),
            "--restores: invalid pattern",
        ),
    ];
    for (args, stdin, want) in cases {
        let out = convert(args, stdin);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // Nothing to convert is no error, but it is said.
    let out = convert(
        &["-f", "-"],
        Some("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"),
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("nothing to convert"),
        "{}",
        text(&out.stderr)
    );
}

/// What `inject` shows for the example pod under `own` (restore-hooks' reading of its Velero
/// annotations) is what it shows for the pod without them, next to the converted RestoreHook,
/// under the default `defer`.
#[test]
fn inject_previews_the_converted_hooks_as_it_previews_velero_s() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pod = "examples/restored-pod.yaml";
    let before = restore_hooks(
        &["inject", "-f", pod, "--velero-hooks", "own", "-o", "json"],
        None,
        root,
    );
    assert!(before.status.success(), "{}", text(&before.stderr));
    let out = convert(&["-f", pod, "--strip-velero-hooks"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = documents(&text(&out.stdout));
    let [hook, stripped] = &written[..] else {
        panic!("{}", text(&out.stdout))
    };
    assert_eq!(
        hook["spec"]["labelSelector"],
        serde_json::json!({"matchLabels": {"app": "postgres"}})
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hooks.yaml"),
        yaml_serde::to_string(hook).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("pod.yaml"),
        yaml_serde::to_string(stripped).unwrap(),
    )
    .unwrap();
    let after = restore_hooks(
        &[
            "inject",
            "-f",
            "pod.yaml",
            "--hooks",
            "hooks.yaml",
            "-o",
            "json",
        ],
        None,
        dir.path(),
    );
    assert!(after.status.success(), "{}", text(&after.stderr));
    let (before, after): (Value, Value) = (
        serde_json::from_slice(&before.stdout).unwrap(),
        serde_json::from_slice(&after.stdout).unwrap(),
    );
    assert_eq!(
        before["spec"]["initContainers"],
        after["spec"]["initContainers"]
    );
    let names: Vec<&str> = after["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["restore-wait", "restore-marker", "fix-permissions"]);
    assert_eq!(
        before["metadata"]["annotations"]["restore-hooks.dev/injected"],
        after["metadata"]["annotations"]["restore-hooks.dev/injected"]
    );

    // A Restore entry for every namespace becomes a ClusterRestoreHook selecting namespaces by
    // the label the API server gives each, which `inject` gives the pod's namespace too.
    let restore = "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {name: nightly-2026-12-02, namespace: velero}\nspec:\n  hooks:\n    resources:\n    - name: analyze\n      excludedNamespaces: [kube-system]\n      postHooks: [{exec: {container: db, command: [/usr/bin/psql, -c, ANALYZE]}}]\n";
    let out = convert(&["-f", "-"], Some(restore));
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(dir.path().join("hooks.yaml"), &out.stdout).unwrap();
    let previews = |args: &[&str]| {
        let out = restore_hooks(
            &[&["inject", "-f", "pod.yaml", "-o", "json"], args].concat(),
            None,
            dir.path(),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let pod: Value = serde_json::from_slice(&out.stdout).unwrap();
        let plan: Value = serde_json::from_str(
            pod["metadata"]["annotations"]["restore-hooks.dev/plan"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        plan["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h["container"].clone(), h["command"].clone()))
            .collect::<Vec<_>>()
    };
    std::fs::write(dir.path().join("velero.yaml"), restore).unwrap();
    assert_eq!(
        previews(&["--hooks", "hooks.yaml"]),
        previews(&["--hooks", "velero.yaml", "--velero-hooks", "own"])
    );
    assert_eq!(previews(&["--hooks", "hooks.yaml"]).len(), 1);
}
