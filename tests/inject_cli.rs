//! `restore-hooks inject` end to end, as a process, on the example files.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn inject(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_restore-hooks"))
        .arg("inject")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
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

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const POD: &str = "examples/restored-pod.yaml";
const HOOKS: &str = "examples/hooks.yaml";

fn init_names(pod: &Value) -> Vec<&str> {
    pod["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[test]
fn yaml_output_is_the_mutated_pod() {
    let out = inject(&["-f", POD, "--hooks", HOOKS], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pod: Value = serde_yaml::from_slice(&out.stdout).unwrap();
    // Default `defer`: Velero runs its own annotation hooks on pods it created.
    assert_eq!(
        init_names(&pod),
        ["restore-wait", "fetch-wal", "fix-permissions"]
    );
    assert_eq!(
        pod["metadata"]["labels"]["restore-hooks.dev/exec"],
        "pending"
    );
    let plan: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["restore-hooks.dev/plan"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(plan["restore"], "nightly-2026-12-02");
    assert_eq!(plan["hooks"].as_array().unwrap().len(), 3);
}

/// The pod with its plan's `id` and `issuedAt` blanked.
fn without_issuance(pod: &Value) -> Value {
    let mut pod = pod.clone();
    let key = "restore-hooks.dev/plan";
    let mut plan: Value =
        serde_json::from_str(pod["metadata"]["annotations"][key].as_str().unwrap()).unwrap();
    assert_eq!(plan["id"].as_str().map(str::len), Some(16), "{plan}");
    assert!(plan["issuedAt"].is_string(), "{plan}");
    plan["id"] = Value::Null;
    plan["issuedAt"] = Value::Null;
    pod["metadata"]["annotations"][key] = Value::String(plan.to_string());
    pod
}

#[test]
fn patch_output_applies_to_give_the_json_output() {
    let args = ["-f", POD, "--hooks", HOOKS, "--velero-hooks", "own"];
    let patch = inject(&[&args[..], &["-o", "patch"]].concat(), None);
    assert!(patch.status.success(), "{}", text(&patch.stderr));
    let patch: json_patch::Patch = serde_json::from_slice(&patch.stdout).unwrap();
    let json = inject(&[&args[..], &["-o", "json"]].concat(), None);
    let mutated: Value = serde_json::from_slice(&json.stdout).unwrap();
    let mut pod: Value = serde_yaml::from_str(
        &std::fs::read_to_string(format!("{}/{POD}", env!("CARGO_MANIFEST_DIR"))).unwrap(),
    )
    .unwrap();
    json_patch::patch(&mut pod, &patch.0).unwrap();
    // Two runs, two issuances: each plan gets its own id (and maybe another second).
    assert_eq!(without_issuance(&pod), without_issuance(&mutated));
    // `own`: the annotation init hook replaces the spec init hooks.
    assert_eq!(
        init_names(&pod),
        ["restore-wait", "restore-marker", "fix-permissions"]
    );
}

#[test]
fn reads_the_pod_from_stdin_and_honours_restore_namespace() {
    let pod = r#"{"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "labels": {"app": "postgres"}},
        "spec": {"containers": [{"name": "db", "image": "x"}, {"name": "metrics", "image": "y"}],
                 "volumes": [{"name": "data", "emptyDir": {}}]}}"#;
    // Not a restored pod on its own: nothing happens.
    let out = inject(
        &["-f", "-", "--hooks", HOOKS, "-n", "shop", "-o", "patch"],
        Some(pod),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        serde_json::json!([])
    );
    // In a restore namespace of restore nightly-7, the RestoreHooks apply.
    let out = inject(
        &[
            "-f",
            "-",
            "--hooks",
            HOOKS,
            "-n",
            "shop",
            "--restore",
            "nightly-7",
            "-o",
            "json",
        ],
        Some(pod),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mutated: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(init_names(&mutated), ["fetch-wal"]);
    // --namespace-label does the same with the label itself.
    let out = inject(
        &[
            "-f",
            "-",
            "--hooks",
            HOOKS,
            "-n",
            "shop",
            "--namespace-label",
            "restore-hooks.dev/restore=weekly",
            "-o",
            "json",
        ],
        Some(pod),
    );
    let mutated: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = mutated["metadata"]["annotations"]["restore-hooks.dev/plan"]
        .as_str()
        .unwrap();
    // `restores: ["nightly-*"]` does not match `weekly`: only the catch-all hook.
    assert!(
        plan.contains("\"restore\":\"weekly\"") && !plan.contains("postgres-rehydrate"),
        "{plan}"
    );
}

#[test]
fn denial_prints_the_webhook_message_and_exits_1() {
    // A pod created in a restore namespace (its controller will create it again once the hook is
    // fixed) is denied for an invalid hook under the default --on-invalid deny.
    let pod = r#"
apiVersion: v1
kind: Pod
metadata:
  name: db-0
  namespace: shop
  annotations:
    post.hook.restore.velero.io/command: '["/bin/sh", "-c"'
spec:
  containers: [{name: db, image: postgres}]
"#;
    let args = ["-f", "-", "--velero-hooks", "own", "--restore", "r1"];
    let out = inject(&args, Some(pod));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("denied"), "{err}");
    assert!(err.contains("pod shop/db-0"), "{err}");
    assert!(err.contains("post.hook.restore.velero.io/command"), "{err}");
    assert!(out.stdout.is_empty());
    // The same pod with --on-invalid warn is admitted, with a warning on stderr.
    let out = inject(&[&args[..], &["--on-invalid", "warn"]].concat(), Some(pod));
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("Warning: restore-hooks: pod shop/db-0: skipped invalid hook")
    );
    // A pod Velero restores (the restore label) is never denied: nothing would create it again.
    // It is admitted with the warning, and its plan carries the invalid hook so that the
    // controller ends it Failed with the reason (docs/behaviour.md §3.6).
    let labelled = pod.replace(
        "  namespace: shop\n",
        "  namespace: shop\n  labels: {velero.io/restore-name: r1}\n",
    );
    let out = inject(&["-f", "-", "--velero-hooks", "own"], Some(&labelled));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Warning: restore-hooks: pod shop/db-0"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("invalid"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn unusable_input_exits_2_with_the_reason() {
    let cases: [(&[&str], Option<&str>, &str); 4] = [
        (
            &["-f", "does-not-exist.yaml"],
            None,
            "cannot read pod manifest does-not-exist.yaml",
        ),
        (
            &["-f", "-"],
            Some("kind: Service\n"),
            "expected a Pod manifest",
        ),
        (&["-f", "-"], Some("{{{"), "not valid YAML or JSON"),
        (&["-f", POD, "--hooks", POD], None, "is not a hook document"),
    ];
    for (args, stdin, want) in cases {
        let out = inject(args, stdin);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}
