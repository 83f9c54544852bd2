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
    let pod: Value = yaml_serde::from_slice(&out.stdout).unwrap();
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
    let mut pod: Value = yaml_serde::from_str(
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

/// The documents of an example file.
fn example_docs(name: &str) -> Vec<Value> {
    let path = format!("{}/examples/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path)
        .unwrap()
        .split("\n---")
        .map(|d| yaml_serde::from_str::<Value>(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The pod a workload's controller would create in namespace `shop` (a StatefulSet's pod 0, with
/// the label that gives it its ordinal), as `restore-hooks inject` takes it.
fn pod_of(workload: &Value) -> Value {
    let name = workload["metadata"]["name"].as_str().unwrap();
    let mut labels = workload["spec"]["template"]["metadata"]["labels"].clone();
    let pod_name = if workload["kind"] == "StatefulSet" {
        labels["statefulset.kubernetes.io/pod-name"] = format!("{name}-0").into();
        format!("{name}-0")
    } else {
        format!("{name}-6d4cf56db6-x7k2p")
    };
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": "shop", "labels": labels},
        "spec": workload["spec"]["template"]["spec"],
    })
}

/// The plan the webhook gives the pod of `example`'s workload `kind`, restored by restore
/// `r-7` in namespace `shop`, with the hook objects of `hook_files` (examples, in order).
fn example_plan(example: &str, kind: &str, hook_files: &[&str]) -> (Value, Value) {
    let docs = example_docs(example);
    let workload = docs.iter().find(|d| d["kind"] == kind).unwrap();
    let hooks: Vec<Value> = hook_files
        .iter()
        .flat_map(|f| example_docs(f))
        .filter(|d| d["kind"] == "RestoreHook")
        .map(|mut d| {
            d["metadata"]["namespace"] = "shop".into();
            d
        })
        .collect();
    // `--hooks` takes hook documents only; the examples also hold Secrets and workloads.
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": hooks})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let pod = pod_of(workload);
    let args = [
        "-f",
        "-",
        "--hooks",
        file.path().to_str().unwrap(),
        "--restore",
        "r-7",
    ];
    let out = inject(
        &[&args[..], &["-o", "json"]].concat(),
        Some(&pod.to_string()),
    );
    assert!(out.status.success(), "{example}: {}", text(&out.stderr));
    assert!(
        out.stderr.is_empty(),
        "{example}: warnings {}",
        text(&out.stderr)
    );
    let mutated: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = serde_json::from_str(
        mutated["metadata"]["annotations"]["restore-hooks.dev/plan"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    (pod, plan)
}

/// The names of the environment variables the kubelet gives `container`: its `env`, and the keys
/// of the Secrets its `envFrom` names (from the example's own Secrets).
fn env_names(container: &Value, docs: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let secret = docs
            .iter()
            .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == from["secretRef"]["name"])
            .unwrap_or_else(|| panic!("no Secret {}", from["secretRef"]["name"]));
        names.extend(secret["stringData"].as_object().unwrap().keys().cloned());
    }
    names
}

/// The upper-case variables (`$NAME`, `${NAME...}`) a hook's command reads: the container's
/// environment (the examples' shell variables of their own are lower-case).
fn env_reads(command: &Value) -> Vec<String> {
    let var = regex::Regex::new(r"\$\{?([A-Z][A-Z0-9_]*)").unwrap();
    let mut names: Vec<String> = command
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|arg| {
            var.captures_iter(arg.as_str().unwrap())
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every engine example, as the webhook sees its pod: the check in every pod, then the
/// migration once (`runOn: OnePod`) after it (`after`, resolved in the pod's namespace), the
/// restore's name expanded into the migration, and every variable a command reads defined in
/// the target container's environment (an ephemeral container's command reads none: it gets no
/// environment). MongoDB has no server here (examples/mongodb.yaml): this is its check, with
/// `mongosh`, the image's shell, and never the removed `mongo`.
#[test]
fn every_example_plans_a_check_then_a_migration_with_the_containers_env() {
    for (example, kind, files, check, migrate, tool) in [
        (
            "postgres",
            "StatefulSet",
            &["postgres"][..],
            "postgres-check",
            "postgres-migrate",
            "psql",
        ),
        (
            "mysql",
            "StatefulSet",
            &["mysql"][..],
            "mysql-check",
            "mysql-migrate",
            "mysql",
        ),
        (
            "redis",
            "StatefulSet",
            &["redis"][..],
            "redis-check",
            "redis-migrate",
            "redis-cli",
        ),
        (
            "mongodb",
            "StatefulSet",
            &["mongodb"][..],
            "mongo-check",
            "mongo-migrate",
            "mongosh",
        ),
    ] {
        let docs = example_docs(example);
        let (pod, plan) = example_plan(example, kind, files);
        let hooks = plan["hooks"].as_array().unwrap();
        let names: Vec<&str> = hooks.iter().map(|h| h["name"].as_str().unwrap()).collect();
        assert_eq!(names, [check, migrate], "{example}: {plan}");
        assert!(
            hooks[0]["runOn"].is_null() || hooks[0]["runOn"] == "EveryPod",
            "{plan}"
        );
        assert_eq!(
            hooks[0]["onError"], "Fail",
            "{example}: an empty restore must stop here"
        );
        assert_eq!(hooks[1]["runOn"], "OnePod", "{example}: {plan}");
        assert_eq!(
            hooks[1]["after"],
            serde_json::json!([{"hook": check, "kind": "RestoreHook", "namespace": "shop"}]),
            "{example}"
        );
        let container = &pod["spec"]["containers"][0];
        let env = env_names(container, &docs);
        for hook in hooks {
            assert_eq!(hook["container"], container["name"], "{example}");
            let command = hook["command"].to_string();
            assert!(command.contains(tool), "{example}: {command}");
            assert!(
                !command.contains("mongo --") && !command.contains("\"mongo\""),
                "{command}"
            );
            for read in env_reads(&hook["command"]) {
                assert!(
                    env.contains(&read),
                    "{example}: ${read} is not in the container's env {env:?}"
                );
            }
        }
        let migration = hooks[1]["command"].to_string();
        assert!(
            migration.contains("r-7") && !migration.contains("$(RESTORE_NAME)"),
            "{migration}"
        );
    }

    // The distroless app: its migration in an ephemeral container of the postgres image, after
    // the database's migration, with the Secret volume it reads and no variable of the pod's.
    let (pod, plan) = example_plan(
        "app-image-hook",
        "Deployment",
        &["postgres", "app-image-hook"],
    );
    let hooks = plan["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{plan}");
    let hook = &hooks[0];
    assert_eq!(hook["name"], "api-migrate");
    assert_eq!(hook["ephemeral"]["image"], "postgres:17", "{plan}");
    assert_eq!(hook["runOn"], "OnePod");
    assert_eq!(
        hook["after"],
        serde_json::json!([{"hook": "postgres-migrate", "kind": "RestoreHook", "namespace": "shop"}])
    );
    assert_eq!(env_reads(&hook["command"]), Vec::<String>::new(), "{plan}");
    let mounts = hook["ephemeral"]["volumeMounts"].as_array().unwrap();
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mounts[0]["name"])
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "api-database");
    assert!(
        hook["command"]
            .to_string()
            .contains(mounts[0]["mountPath"].as_str().unwrap())
    );
}

/// The Velero-restored pod: the hooks of examples/hooks.yaml read only what its `db` container's
/// environment has (the Secret of examples/postgres.yaml), and name the role and the database.
#[test]
fn the_restored_pods_hooks_read_its_containers_env() {
    let out = inject(&["-f", POD, "--hooks", HOOKS, "-o", "json"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pod: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["restore-hooks.dev/plan"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let db = &pod["spec"]["containers"][0];
    let env = env_names(db, &example_docs("postgres"));
    for hook in plan["hooks"].as_array().unwrap() {
        assert_eq!(hook["container"], "db");
        let command = hook["command"].to_string();
        assert!(
            command.contains(r#"-U \"$POSTGRES_USER\" -d \"$POSTGRES_DB\""#),
            "{command}"
        );
        for read in env_reads(&hook["command"]) {
            assert!(env.contains(&read), "${read} is not in db's env {env:?}");
        }
    }
    // The annotation init container has no volume mounts: its command writes to none.
    let command = &pod["metadata"]["annotations"]["init.hook.restore.velero.io/command"];
    assert!(!command.as_str().unwrap().contains("/var/lib"), "{command}");
}
