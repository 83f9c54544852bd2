//! Restore day with a real Velero v1.18 (e2e/realcp: Velero out of cluster, moto S3) and the
//! chart's defaults: no restored pod, and no volume data, is lost to a hook (docs/behaviour.md
//! §3.6, §3.7).
//!
//! - A pod Velero creates with an invalid hook is admitted without it; the hook ends `Failed` at
//!   once with the reason, the restore's other hooks run, the RestoreRun is `PartiallyFailed`. A
//!   pod a controller would create again is still denied.
//! - While no webhook replica answers, Velero's pods are admitted unmutated (the `pod-label`
//!   entry's `failurePolicy: Ignore`) and the next leader reports each.
//! - A file-system backup restore: the real Velero adds its `restore-wait` init container and
//!   creates the pod's PodVolumeRestore, which this test completes, playing the node agent.

mod real;

use std::time::Duration;

use real::*;
use realcp::Velero;
use serde_json::{Value, json};

/// Long enough for a restored pod's hooks to run and be recorded; a hang guard, not a bound.
const HOOKS_END: Duration = Duration::from_secs(120);

/// The workload Velero backs up and restores: a StatefulSet `db` (one pod, `db-0`, with an
/// emptyDir `data`) and a bare pod `solo` (no volume), both labelled `tier: data`.
fn workload(ns: &str) -> Vec<Value> {
    let container = json!({"name": "app", "image": "busybox:1.36", "command": ["sleep", "infinity"],
                           "volumeMounts": [{"name": "data", "mountPath": "/data"}]});
    vec![
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": ns},
        "spec": {
            "replicas": 1, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db", "tier": "data"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": false,
                    "containers": [container],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        }}),
        pod(ns, "solo", &["app"], json!({"tier": "data"}), json!({})),
    ]
}

/// A ClusterRestoreHook for every `tier: data` pod: `postHooks[0]` is an init container that
/// mounts a volume no such pod has (invalid, docs/behaviour.md §3.4 row 7); `postHooks[1]` an
/// exec hook that appends a line to `mark`, and `extra` more hooks after those.
fn broken_hook(name: &str, mark: &std::path::Path, extra: &[Value]) -> Value {
    let mut post_hooks = vec![
        json!({"init": {"initContainers": [{
            "name": "seed", "image": "busybox:1.36",
            "command": ["sh", "-c", "cp -r /seed/. /data/"],
            "volumeMounts": [{"name": "seed", "mountPath": "/seed"}],
        }]}}),
        json!({"exec": {"command": ["sh", "-c", mark_cmd(mark, "warmed")]}}),
    ];
    post_hooks.extend_from_slice(extra);
    json!({
        "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "ClusterRestoreHook",
        "metadata": {"name": name},
        "spec": {"labelSelector": {"matchLabels": {"tier": "data"}}, "postHooks": post_hooks},
    })
}

/// Applies ClusterRestoreHook `hook` and waits until every webhook replica compiled it.
fn apply_cluster_hook(cp: &ControlPlane, hook: &Value) {
    apply_list(cp, std::slice::from_ref(hook));
    cp.kubectl_ok([
        "wait",
        "--for=condition=Ready",
        &format!(
            "clusterrestorehook/{}",
            hook["metadata"]["name"].as_str().unwrap()
        ),
        "--timeout=60s",
    ])
    .unwrap();
}

/// `velero backup create NAME --include-namespaces NS --wait`, which must end Completed.
fn backup(velero: &Velero, name: &str, ns: &str) {
    velero
        .velero_ok([
            "backup",
            "create",
            name,
            "--include-namespaces",
            ns,
            "--wait",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        velero.phase("backups.velero.io", name).unwrap(),
        "Completed"
    );
}

/// Velero's account of `what` (`backup`, `restore`) `name`: `velero <what> describe --details`
/// and its logs.
fn velero_report(velero: &Velero, what: &str, name: &str) -> String {
    let described = velero.velero([what, "describe", name, "--details"]);
    let logs = velero.velero([what, "logs", name]);
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&described.stdout),
        String::from_utf8_lossy(&logs.stdout)
    )
}

/// Whether a Velero backup or restore in `phase` has ended (the phases before it are many:
/// `New`, `Queued`, `ReadyToStart`, `InProgress`, `WaitingForPluginOperations`, `Finalizing`...).
fn ended(phase: &str) -> bool {
    matches!(
        phase,
        "Completed" | "PartiallyFailed" | "Failed" | "FailedValidation"
    )
}

/// Waits until Velero's restore `name` ended, and checks that it is Completed with no error: had
/// the API server refused a pod, Velero would count an error and end `PartiallyFailed`. Its
/// status.
fn completed(cp: &ControlPlane, velero: &Velero, name: &str) -> Value {
    let restore = wait_until(
        format!("Velero restore {name} to end"),
        Duration::from_secs(300),
        || {
            let r = get_json(
                cp,
                &["get", "restores.velero.io", name, "-n", Velero::NAMESPACE],
            )
            .ok_or("no Restore")?;
            if ended(r["status"]["phase"].as_str().unwrap_or_default()) {
                Ok(r)
            } else {
                Err(r["status"].to_string())
            }
        },
    );
    let status = &restore["status"];
    let report = || velero_report(velero, "restore", name);
    assert_eq!(status["phase"], "Completed", "{status}\n{}", report());
    assert!(
        status["errors"].as_u64().unwrap_or(0) == 0,
        "{status}\n{}",
        report()
    );
    // No pod-create error in Velero's own log of the restore.
    let logs =
        String::from_utf8_lossy(&velero.velero(["restore", "logs", name]).stdout).into_owned();
    let errors: Vec<&str> = logs.lines().filter(|l| l.contains("level=error")).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{}", report());
    status.clone()
}

/// Runs what a `RestoreHooksNotApplied` Event's `message` tells the operator to run to see the
/// pod's hooks (`kubectl ... && restore-hooks inject ...`), as an admin with the pinned kubectl
/// and this build of `restore-hooks` on `PATH`, in a fresh directory; the pod `inject` prints.
fn follow(install: &Install, message: &str) -> Value {
    let commands = message
        .split_once("To see which they are: ")
        .and_then(|(_, rest)| rest.split_once("; then run them by hand"))
        .unwrap_or_else(|| panic!("no commands in {message:?}"))
        .0;
    let dir = tempfile::tempdir_in(install.cp.work_dir()).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(install.cp.kubectl_path(), bin.join("kubectl")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_restore-hooks"),
        bin.join("restore-hooks"),
    )
    .unwrap();
    let out = std::process::Command::new("sh")
        .args(["-c", commands])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", dir.path())
        .env("KUBECONFIG", install.cp.kubeconfig())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{commands}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    yaml_serde::from_slice(&out.stdout).expect("inject prints the pod as YAML")
}

/// Waits for Velero's restore `name` to exist and returns its uid (Velero labels the
/// PodVolumeRestores with it).
fn restore_uid(cp: &ControlPlane, name: &str) -> String {
    wait_until(
        format!("Velero restore {name}"),
        Duration::from_secs(60),
        || {
            get_json(
                cp,
                &["get", "restores.velero.io", name, "-n", Velero::NAMESPACE],
            )
            .and_then(|r| r["metadata"]["uid"].as_str().map(str::to_string))
            .ok_or("not yet")
        },
    )
}

/// The pod's hook status entries once its hooks ended: (name, index, phase, message).
fn outcomes(pod: &Value) -> Vec<(String, u64, String, String)> {
    scenarios::hooks_of(pod)
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap_or_default().to_string(),
                h["index"].as_u64().unwrap_or_default(),
                h["phase"].as_str().unwrap_or_default().to_string(),
                h["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The message an invalid `seed` init container ends `Failed` with on a pod with `volumes`.
fn seed_invalid(hook: &str, volumes: &str) -> String {
    format!(
        "invalid, not executed: clusterrestorehook/{hook} postHooks[0].init: init container \
         \"seed\" mounts volume \"seed\", which the pod does not have (volumes: {volumes})"
    )
}

/// §3.6 on a real restore: Velero restores a StatefulSet's pod and a bare pod, which a
/// ClusterRestoreHook in place before the restore gives an invalid init hook and a valid exec
/// hook. Under the default `--on-invalid deny` both pods are admitted without the invalid hook
/// (Velero would not create them again); Velero's restore is Completed without an error; the valid
/// hook runs once in each pod; the invalid one is `Failed` at once with the reason, in the pod's
/// status, a `HookFailed` Event and the RestoreRun (`PartiallyFailed`, both pods in
/// `failedPods`). A pod created by hand in a labelled restore namespace (a controller would create
/// it again) is still denied, with the webhook's message.
#[test]
fn a_real_velero_restore_loses_no_pod_to_an_invalid_hook() {
    let install = Install::default_chart();
    let cp = &install.cp;
    let velero = Velero::start(cp).unwrap_or_else(|e| panic!("{e:#}"));
    let serve = install.start(0);
    serve.wait_leader(Duration::from_secs(60));

    namespace(cp, "day", json!({}));
    apply_list(cp, &workload("day"));
    wait_running(cp, "day", "db-0");
    wait_running(cp, "day", "solo");
    backup(&velero, "b-day", "day");

    let mark = install.mark("warmed");
    apply_cluster_hook(cp, &broken_hook("day-hooks", &mark, &[]));
    cp.kubectl_ok([
        "delete",
        "namespace",
        "day",
        "--wait=true",
        "--timeout=180s",
    ])
    .unwrap();
    velero
        .velero_ok([
            "restore",
            "create",
            "r-day",
            "--from-backup",
            "b-day",
            "--wait",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let restored = completed(cp, &velero, "r-day");
    eprintln!("restore r-day: {restored}");

    for (name, volumes) in [("db-0", "data"), ("solo", "none")] {
        let pod = wait_hooks_ended(cp, "day", name, HOOKS_END);
        let meta = &pod["metadata"];
        assert_eq!(meta["labels"][RESTORE_LABEL], "r-day", "{meta}");
        // The invalid hook's init container is not injected; the pod is as Velero made it.
        assert!(scenarios::init_names(&pod).is_empty(), "{}", pod["spec"]);
        let p = plan(&pod).unwrap();
        let invalid: Vec<&Value> = p["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["invalid"].is_string())
            .collect();
        assert_eq!(invalid.len(), 1, "{p}");
        assert_eq!(invalid[0]["source"], "clusterrestorehook/day-hooks", "{p}");
        let why = seed_invalid("day-hooks", volumes);
        assert_eq!(
            outcomes(&pod),
            [
                ("day-hooks".into(), 1, "Succeeded".into(), String::new()),
                ("day-hooks".into(), 0, "Failed".into(), why.clone()),
            ],
            "{}",
            pod["metadata"]["annotations"][STATUS]
        );
        // A failed hook, with onError Continue, is still a failed hook (docs/behaviour.md §5.5).
        assert_eq!(meta["labels"][EXEC_LABEL], "failed", "{meta}");
        let event = wait_until(
            format!("a HookFailed Event on day/{name}"),
            Duration::from_secs(60),
            || {
                events_with(cp, "day", name, "HookFailed")
                    .pop()
                    .ok_or("none yet")
            },
        );
        assert_eq!(event["type"], "Warning", "{event}");
        assert_eq!(
            event["message"],
            format!("hook day-hooks (#1, clusterrestorehook/day-hooks) {why}"),
            "{event}"
        );
    }

    let run = wait_restore_run(cp, "r-day", &["PartiallyFailed"], HOOKS_END);
    let status = &run["status"];
    assert_eq!(status["hooks"]["succeeded"], 2, "{status}");
    assert_eq!(status["hooks"]["failed"], 2, "{status}");
    let mut failed: Vec<(String, String, String)> = status["failedPods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert_eq!(f["namespace"], "day", "{f}");
            (
                f["pod"].as_str().unwrap().to_string(),
                f["hook"].as_str().unwrap().to_string(),
                f["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    failed.sort();
    assert_eq!(
        failed,
        [
            (
                "db-0".into(),
                "day-hooks".into(),
                seed_invalid("day-hooks", "data")
            ),
            (
                "solo".into(),
                "day-hooks".into(),
                seed_invalid("day-hooks", "none")
            ),
        ]
    );
    // Once in each pod: everything that runs the hook is done with the restore.
    assert_eq!(mark_lines(&mark).len(), 2, "{:?}", mark_lines(&mark));

    // The control: a pod a controller would create again is denied, with the webhook's message.
    namespace(cp, "day-ctl", json!({NAMESPACE_LABEL: "r-ctl"}));
    let (ok, stderr) = scenarios::kubectl_object(
        cp,
        &["create", "-f", "-"],
        &pod(
            "day-ctl",
            "manual",
            &["app"],
            json!({"tier": "data"}),
            json!({}),
        ),
    );
    assert!(!ok, "{stderr}");
    assert_eq!(
        stderr,
        "Error from server (BadRequest): error when creating \"STDIN\": admission webhook \
         \"namespace-label.restore-hooks.restore-hooks.dev\" denied the request: restore-hooks: \
         pod day-ctl/manual (restore \"r-ctl\") has invalid restore hooks: \
         clusterrestorehook/day-hooks postHooks[0].init: init container \"seed\" mounts volume \
         \"seed\", which the pod does not have (volumes: none). Fix the hook definitions and \
         recreate the pod, or run the webhook with --on-invalid warn to admit pods without their \
         invalid hooks\n"
    );
    assert!(get_pod(cp, "day-ctl", "manual").is_none());
    serve.assert_no_forbidden();
}

/// §3.7 on a real restore: no webhook replica answers while Velero restores. The chart's
/// `pod-label` entry (`failurePolicy: Ignore`) admits Velero's pods unmutated, so the restore is
/// Completed with every pod; their hooks do not run. Once a replica leads again it reports each
/// restored pod with a `RestoreHooksNotApplied` Event that says what to do, and counts it in
/// `restore_hooks_unmutated_pods_total`.
#[test]
fn while_no_replica_answers_a_real_velero_restore_restores_every_pod_and_the_leader_reports_them() {
    let install = Install::default_chart();
    let cp = &install.cp;
    let velero = Velero::start(cp).unwrap_or_else(|e| panic!("{e:#}"));
    let mut first = install.start(0);
    first.wait_leader(Duration::from_secs(60));

    namespace(cp, "down", json!({}));
    apply_list(cp, &workload("down"));
    wait_running(cp, "down", "db-0");
    wait_running(cp, "down", "solo");
    backup(&velero, "b-down", "down");
    let mark = install.mark("down");
    apply_cluster_hook(
        cp,
        &json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "ClusterRestoreHook",
            "metadata": {"name": "down-hooks"},
            "spec": {"labelSelector": {"matchLabels": {"tier": "data"}},
                     "postHooks": [{"exec": {"command": ["sh", "-c", mark_cmd(&mark, "ran")]}}]},
        }),
    );
    cp.kubectl_ok([
        "delete",
        "namespace",
        "down",
        "--wait=true",
        "--timeout=180s",
    ])
    .unwrap();

    // Every process of the replica: no webhook answers, and no controller leads.
    first.kill();
    velero
        .velero_ok([
            "restore",
            "create",
            "r-down",
            "--from-backup",
            "b-down",
            "--wait",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    completed(cp, &velero, "r-down");
    for name in ["db-0", "solo"] {
        let pod = get_pod(cp, "down", name).unwrap_or_else(|| panic!("down/{name} not restored"));
        assert_eq!(pod["metadata"]["labels"][RESTORE_LABEL], "r-down");
        scenarios::assert_untouched(&pod);
    }

    // A replica leads again (the dead one's Lease runs out first) and reports them.
    let second = install.start(1);
    second.wait_leader(Duration::from_secs(60));
    for name in ["db-0", "solo"] {
        let event = wait_until(
            format!("a RestoreHooksNotApplied Event on down/{name}"),
            // The leader looks every 30 s.
            Duration::from_secs(75),
            || {
                events_with(cp, "down", name, "RestoreHooksNotApplied")
                    .pop()
                    .ok_or_else(|| {
                        format!(
                            "unmutated pods reported: {}",
                            metric(
                                &second.controller().metrics(),
                                "restore_hooks_unmutated_pods_total"
                            )
                        )
                    })
            },
        );
        assert_eq!(event["type"], "Warning", "{event}");
        let message = event["message"].as_str().unwrap();
        eprintln!("down/{name}: {message}");
        assert!(
            message.contains("its restore hooks were not applied and will not run"),
            "{message}"
        );
        // What to do: the commands it gives, run as given, show the hook the pod missed.
        let shown = follow(&install, message);
        let p = plan(&shown).unwrap_or_else(|| panic!("no plan in {shown}"));
        let sources: Vec<&str> = p["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["source"].as_str().unwrap())
            .collect();
        assert_eq!(sources, ["clusterrestorehook/down-hooks"], "{p}");
    }
    assert_eq!(
        metric(
            &second.controller().metrics(),
            "restore_hooks_unmutated_pods_total"
        ),
        2.0
    );
    // Nothing ran the hooks of the pods the webhook never saw.
    assert!(mark_lines(&mark).is_empty(), "{:?}", mark_lines(&mark));
    assert!(get_json(cp, &["get", "restoreruns.restore-hooks.dev", "r-down"]).is_none());
    second.assert_no_forbidden();
    first.assert_no_forbidden();
}

/// The node agent's side of a file-system backup or restore, played by the test: Velero's node
/// agent is a DaemonSet whose pod on the pod's node moves the volume's files (kopia) and records
/// the outcome in the PodVolumeBackup or PodVolumeRestore. kwok has no volumes on disk to move,
/// so the test records what the node agent would: the one PodVolume`kind` of Velero's `kind`
/// (`Backup`, `Restore`) `owner` that `selector` finds ends `Completed`, with a snapshot ID when
/// `snapshot` (a backup's: the restore restores from it). The object, as Velero created it and
/// the test completed it.
fn complete_pod_volume(
    cp: &ControlPlane,
    velero: &Velero,
    (kind, owner): (&str, &str),
    selector: &str,
    snapshot: bool,
) -> Value {
    let resource = format!("podvolume{}s.velero.io", kind.to_lowercase());
    let item = wait_until(
        format!("Velero's PodVolume{kind} ({selector})"),
        Duration::from_secs(120),
        || {
            let list = get_json(
                cp,
                &["get", &resource, "-n", Velero::NAMESPACE, "-l", selector],
            )
            .ok_or("no list")?;
            if let Some([one]) = list["items"].as_array().map(Vec::as_slice) {
                return Ok(one.clone());
            }
            // Velero creates it while the backup or restore is in progress; one that ended
            // without it never will (a restore whose pod the API server refused, for one).
            let what = kind.to_lowercase();
            let phase = velero
                .phase(&format!("{what}s.velero.io"), owner)
                .unwrap_or_default();
            if ended(&phase) {
                panic!(
                    "Velero's {what} {owner} is {phase} without a PodVolume{kind}:\n{}",
                    velero_report(velero, &what, owner)
                );
            }
            Err(format!("{what} {owner} {phase}: {}", list["items"]))
        },
    );
    let mut status = json!({
        "phase": "Completed",
        "progress": {"totalBytes": 4096, "bytesDone": 4096},
    });
    if snapshot {
        status["snapshotID"] = json!("4f1c7a9e0b2d46e8a3c5f7091b2d4e6f");
        status["path"] = json!(format!(
            "/host_pods/{}/volumes/kubernetes.io~empty-dir/data",
            item["spec"]["pod"]["uid"].as_str().unwrap()
        ));
    }
    // Velero's CRDs have no status subresource: the node agent patches the object.
    get_json(
        cp,
        &[
            "patch",
            &resource,
            item["metadata"]["name"].as_str().unwrap(),
            "-n",
            Velero::NAMESPACE,
            "--type=merge",
            "-p",
            &json!({"status": status}).to_string(),
        ],
    )
    .unwrap_or_else(|| panic!("cannot complete {item}"))
}

/// §3.6 for volume data, on the real Velero's file-system backup path: a backup with
/// `--default-volumes-to-fs-backup` makes Velero create the pod's PodVolumeBackup, and the
/// restore makes Velero's PodVolumeRestoreAction put its `restore-wait` init container first in
/// the pod, then create the PodVolumeRestore for the pod it created (the test plays the node
/// agent for both, see [`complete_pod_volume`]). The pod, with an invalid hook, is admitted; the
/// valid init hook goes directly after `restore-wait` (§4.2: hooks see the restored data); Velero
/// restores the volume into this very pod and its restore is Completed; the invalid hook ends
/// `Failed`, the valid exec hook runs. And a pod carrying `restore-wait` without the restore label
/// (created by hand in a labelled restore namespace) is admitted too, with the webhook's warning.
#[test]
fn a_pod_velero_restores_volume_data_into_is_admitted_with_an_invalid_hook_and_its_data_restored() {
    let install = Install::default_chart();
    let cp = &install.cp;
    let velero = Velero::start(cp).unwrap_or_else(|e| panic!("{e:#}"));
    let serve = install.start(0);
    serve.wait_leader(Duration::from_secs(60));

    // Velero's node agent: Velero checks that its DaemonSet exists and that its pod runs on the
    // restored pod's node before it restores volume data there.
    apply_list(
        cp,
        &[json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "node-agent", "namespace": Velero::NAMESPACE},
            "spec": {
                "selector": {"matchLabels": {"name": "node-agent"}},
                "template": {
                    "metadata": {"labels": {"name": "node-agent", "role": "node-agent"}},
                    "spec": {
                        "automountServiceAccountToken": false,
                        "containers": [{"name": "node-agent", "image": "velero/velero:v1.18.3",
                                        "command": ["/velero"], "args": ["node-agent", "server"]}],
                    },
                },
            },
        })],
    );
    wait_until(
        "the node agent's pod Running on kwok-0",
        Duration::from_secs(120),
        || {
            let list = get_json(
                cp,
                &[
                    "get",
                    "pods",
                    "-n",
                    Velero::NAMESPACE,
                    "-l",
                    "role=node-agent",
                ],
            )
            .ok_or("no list")?;
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["spec"]["nodeName"] == NODE && p["status"]["phase"] == "Running")
                .then_some(())
                .ok_or_else(|| list["items"].to_string())
        },
    );

    let data_pod = |ns: &str, name: &str, labels: Value, init: Vec<Value>| {
        let mut p = pod(ns, name, &["app"], labels, json!({}));
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
        p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        if !init.is_empty() {
            p["spec"]["initContainers"] = json!(init);
        }
        p
    };
    namespace(cp, "vol", json!({}));
    create(
        cp,
        &data_pod("vol", "data", json!({"tier": "data"}), vec![]),
    );
    wait_running(cp, "vol", "data");
    velero
        .velero_ok([
            "backup",
            "create",
            "b-vol",
            "--include-namespaces",
            "vol",
            "--default-volumes-to-fs-backup",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let pvb = complete_pod_volume(
        cp,
        &velero,
        ("Backup", "b-vol"),
        "velero.io/backup-name=b-vol",
        true,
    );
    assert_eq!(pvb["spec"]["volume"], "data", "{pvb}");
    wait_until(
        "Velero backup b-vol Completed",
        Duration::from_secs(120),
        || match velero.phase("backups.velero.io", "b-vol") {
            Ok(phase) if phase == "Completed" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    let mark = install.mark("vol");
    // A valid init hook besides the invalid one: it must wait for the restored data.
    let warm = json!({"init": {"initContainers": [{
        "name": "warm", "image": "busybox:1.36", "command": ["sh", "-c", "ls /data"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }]}});
    apply_cluster_hook(cp, &broken_hook("vol-hooks", &mark, &[warm]));
    cp.kubectl_ok([
        "delete",
        "namespace",
        "vol",
        "--wait=true",
        "--timeout=180s",
    ])
    .unwrap();

    velero
        .velero_ok(["restore", "create", "r-vol", "--from-backup", "b-vol"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let uid = restore_uid(cp, "r-vol");
    // Velero creates the PodVolumeRestore once the pod exists, then waits for it: the pod was
    // admitted, with its invalid hook, and is the one the volume data goes into.
    let pvr = complete_pod_volume(
        cp,
        &velero,
        ("Restore", "r-vol"),
        &format!("velero.io/restore-uid={uid}"),
        false,
    );
    let pod = get_pod(cp, "vol", "data").expect("the pod Velero restores volume data into");
    assert_eq!(pvr["spec"]["pod"]["uid"], pod["metadata"]["uid"], "{pvr}");
    assert_eq!(pvr["spec"]["volume"], "data", "{pvr}");
    assert_eq!(pvr["spec"]["snapshotID"], pvb["status"]["snapshotID"]);
    assert_eq!(
        scenarios::init_names(&pod),
        ["restore-wait", "warm"],
        "{}",
        pod["spec"]
    );
    assert_eq!(
        pod["spec"]["initContainers"][0]["args"],
        json!([uid]),
        "{}",
        pod["spec"]
    );
    let status = completed(cp, &velero, "r-vol");
    eprintln!("restore r-vol: {status}");
    let described = String::from_utf8_lossy(
        &velero
            .velero(["restore", "describe", "r-vol", "--details"])
            .stdout,
    )
    .into_owned();
    assert!(
        described.contains("kopia Restores:\n  Completed:\n    vol/data: data"),
        "{described}"
    );

    let pod = wait_hooks_ended(cp, "vol", "data", HOOKS_END);
    let why = seed_invalid("vol-hooks", "data");
    assert_eq!(
        outcomes(&pod),
        [
            ("vol-hooks".into(), 1, "Succeeded".into(), String::new()),
            ("vol-hooks".into(), 0, "Failed".into(), why.clone()),
        ],
        "{}",
        pod["metadata"]["annotations"][STATUS]
    );
    let run = wait_restore_run(cp, "r-vol", &["PartiallyFailed"], HOOKS_END);
    assert_eq!(run["status"]["failedPods"][0]["message"], why.as_str());

    // Without the restore label: a pod that restores volume data is admitted all the same,
    // though a controller would create it again (docs/behaviour.md §3.6).
    namespace(cp, "vol-ctl", json!({NAMESPACE_LABEL: "r-vol-ctl"}));
    let restore_wait = pod["spec"]["initContainers"][0].clone();
    let (ok, stderr) = scenarios::kubectl_object(
        cp,
        &["create", "-f", "-"],
        &data_pod(
            "vol-ctl",
            "by-hand",
            json!({"tier": "data"}),
            vec![restore_wait],
        ),
    );
    assert!(ok, "{stderr}");
    assert_eq!(
        stderr,
        "Warning: restore-hooks: pod vol-ctl/by-hand: skipped invalid hook \
         clusterrestorehook/vol-hooks postHooks[0].init: init container \"seed\" mounts volume \
         \"seed\", which the pod does not have (volumes: data) (admitted all the same: the pod \
         restores volume data, which a denial would lose)\n"
    );
    let by_hand = wait_hooks_ended(cp, "vol-ctl", "by-hand", HOOKS_END);
    assert_eq!(
        scenarios::init_names(&by_hand),
        ["restore-wait", "warm"],
        "{}",
        by_hand["spec"]
    );
    assert_eq!(
        outcomes(&by_hand),
        [
            ("vol-hooks".into(), 1, "Succeeded".into(), String::new()),
            ("vol-hooks".into(), 0, "Failed".into(), why),
        ],
    );
    assert_eq!(mark_lines(&mark).len(), 2, "{:?}", mark_lines(&mark));
    serve.assert_no_forbidden();
}
