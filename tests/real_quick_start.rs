//! README.md's quick start, followed on the real control plane (e2e/realcp): its commands and
//! its `hook.yaml` are read from the README itself, so that the two cannot drift.
//!
//! Step 1 is the one part that cannot run as written here: the control plane has no image
//! registry and no kubelet, so the chart's Deployments run as host processes under their
//! ServiceAccounts (`tests/real`), with the harness's own serving certificate in place of
//! cert-manager's (`tests/real_cert_manager.rs` proves the chart's cert-manager path). The
//! README's `helm install` values are what the chart is rendered with, and its `rollout status`
//! lines must name the chart's Deployments. Every other command runs as written, with the pinned
//! kubectl against the real kube-apiserver: the namespace, the RestoreHook, the label, a
//! Deployment whose pods the controller-manager creates and kwok runs, the waits, and
//! `restore-hooks describe` as the binary and as the kubectl plugin. A command the test does not
//! know fails it, so a new step in the README needs a rule here.

mod real;

use std::path::Path;
use std::process::Command;

use real::*;
use serde_json::Value;

/// The quick start as the README has it: the shell commands of its blocks, in order, and the
/// text of its `hook.yaml` block.
struct QuickStart {
    commands: Vec<Vec<String>>,
    hook_yaml: String,
}

fn quick_start() -> QuickStart {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("\n## Quick start")
        .expect("README.md has a \"## Quick start\" section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut commands = Vec::new();
    let mut hook_yaml = None;
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        let Some(lang) = line.trim().strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        match lang {
            "sh" => {
                for l in body {
                    let l = l.split(" #").next().unwrap().trim();
                    if !l.is_empty() && !l.starts_with('#') {
                        commands.push(l.split_whitespace().map(str::to_string).collect());
                    }
                }
            }
            "yaml" => hook_yaml = Some(body.join("\n") + "\n"),
            other => panic!("the quick start has a ```{other} block this test does not know"),
        }
    }
    QuickStart {
        commands,
        hook_yaml: hook_yaml.expect("the quick start shows hook.yaml"),
    }
}

fn words(command: &[String]) -> Vec<&str> {
    command.iter().map(String::as_str).collect()
}

/// The value of `flag` in `words` (`--flag value` or `--flag=value`).
fn flag(words: &[String], name: &str) -> Option<String> {
    words.iter().enumerate().find_map(|(i, w)| {
        if w == name {
            words.get(i + 1).cloned()
        } else {
            w.strip_prefix(&format!("{name}=")).map(str::to_string)
        }
    })
}

#[test]
fn the_readme_quick_start_works_as_written() {
    let _heavy = heavy();
    let qs = quick_start();

    // Step 1: the chart, rendered with the README's values.
    let helm: Vec<&Vec<String>> = qs.commands.iter().filter(|c| c[0] == "helm").collect();
    assert_eq!(helm.len(), 1, "one helm command: {helm:?}");
    let helm = helm[0];
    assert_eq!(
        &words(helm)[..4],
        ["helm", "install", RELEASE, "charts/restore-hooks"],
        "{helm:?}"
    );
    assert_eq!(flag(helm, "-n").as_deref(), Some(NAMESPACE), "{helm:?}");
    let mut helm_args = Vec::new();
    for (i, w) in helm.iter().enumerate() {
        if w == "--set" {
            helm_args.extend(["--set".to_string(), helm[i + 1].clone()]);
        }
    }
    let install = Install::new(InstallOptions {
        helm_args,
        ..InstallOptions::default()
    });
    let serve = install.start(0);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hook.yaml"), &qs.hook_yaml).unwrap();
    // `kubectl restore-hooks`: kubectl finds the plugin on PATH, as the README links it.
    let bin = Path::new(env!("CARGO_BIN_EXE_restore-hooks"));
    std::os::unix::fs::symlink(bin, dir.path().join("kubectl-restore_hooks")).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |program: &Path, args: &[String]| -> String {
        let out = Command::new(program)
            .args(args)
            .current_dir(dir.path())
            .env("KUBECONFIG", install.cp.kubeconfig())
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{} {}: {}{}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    let mut replicas = None;
    let mut done_pods = None;
    let mut described = Vec::new();
    for command in &qs.commands {
        let w = words(command);
        match w[..] {
            ["helm", ..] => {}
            ["kubectl", "apply", "-f", url]
                if url.starts_with("https://github.com/cert-manager/") => {}
            ["kubectl", "-n", "cert-manager", "rollout", "status", _] => {}
            ["kubectl", "-n", ns, "rollout", "status", deployment] if ns == NAMESPACE => {
                let name = deployment.strip_prefix("deployment/").unwrap();
                assert!(
                    install
                        .applied("Deployment")
                        .iter()
                        .any(|d| d["metadata"]["name"] == name),
                    "the README waits for Deployment {name}, which the chart does not create"
                );
            }
            ["cargo", "install", ..] | ["ln", "-s", ..] => {}
            ["restore-hooks", ..] => described.push(run(bin, &command[1..])),
            ["kubectl", ..] => {
                if w.contains(&"deployment") && w.contains(&"create") {
                    replicas = flag(command, "--replicas").map(|r| r.parse::<usize>().unwrap());
                }
                let out = run(install.cp.kubectl_path(), &command[1..]);
                if w.contains(&"restore-hooks") {
                    described.push(out);
                } else if w
                    .iter()
                    .any(|a| a.starts_with("restore-hooks.dev/exec=done"))
                {
                    done_pods = Some(out.lines().skip(1).count());
                }
            }
            _ => panic!("the README's quick start runs {command:?}, which this test does not know"),
        }
    }
    let replicas = replicas.expect("the quick start creates a Deployment with --replicas");
    assert_eq!(
        done_pods,
        Some(replicas),
        "every pod of the Deployment is listed with its hooks done"
    );
    assert_eq!(
        described.len(),
        2,
        "describe, as the binary and as the plugin"
    );
    assert!(described[0].contains("Completed"), "{}", described[0]);
    let report: Value = serde_json::from_str(&described[1]).unwrap();
    assert_eq!(report["phase"], "Completed", "{report:#}");
    assert_eq!(report["hooks"]["succeeded"], replicas, "{report:#}");
    serve.assert_no_forbidden();
}
