//! Every rule of the chart's RBAC is needed, and none can be missing unnoticed (e2e/realcp).
//!
//! One scenario exercises every code path that talks to the API server: start-up (Lease, plan key,
//! watches, the record of started hooks, retention), a RestoreHook compiled and reported, a pod
//! whose annotation exec hook needs a SubjectAccessReview, hooks exec'd and recorded (pod status,
//! Events, RestoreRun), a hook object that arrives after its pod (late hooks), a namespace the
//! webhook's cache does not know, and a Velero Restore whose namespace the leader labels. With the chart's RBAC as rendered it completes and the API
//! server refuses nothing. Then each rule of each role bound to the product's ServiceAccounts is
//! dropped in turn: the scenario must meet a 403 for exactly that rule's verb and resource, which
//! the product logs at WARN (and counts). That log line is what fails every real-control-plane
//! test (`Serve`'s drop check), so each rule has a test that fails without it; a rule whose
//! absence nothing notices is one the chart should not grant. A rule on Events is dropped one API
//! group and one verb at a time: the controller only creates core/v1 Events (a new one each time,
//! docs/behaviour.md §6.12), so a grant of `patch`, or of `events.k8s.io`, is one nothing needs.

mod real;

use std::process::Command;
use std::time::{Duration, Instant};

use real::*;
use restore_hooks_testkit::try_wait_until;
use serde_json::{Value, json};

/// One rule of one role, and the process whose ServiceAccount the role is bound to.
struct Rule {
    kind: String,
    role: String,
    index: usize,
    /// `webhook` or `controller`.
    process: &'static str,
    verbs: Vec<String>,
    /// As the product's refusal lines name them: `pods/exec`, `leases.coordination.k8s.io`,
    /// `restorehooks.restore-hooks.dev/status`.
    resources: Vec<String>,
    /// Only this API group and verb of the rule are dropped (Events), not the whole rule.
    only: Option<(String, String)>,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} rule #{} ({} {:?} on {:?}{})",
            self.kind,
            self.role,
            self.index,
            self.process,
            self.verbs,
            self.resources,
            match &self.only {
                Some((group, verb)) => format!(", only {verb} in group {group:?}"),
                None => String::new(),
            }
        )
    }
}

/// The rules of every Role and ClusterRole bound to the controller's or the webhook's
/// ServiceAccount, as rendered.
fn rules(install: &Install) -> Vec<Rule> {
    let account = |deployment: &str| {
        install.deployment(deployment)["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (controller_sa, webhook_sa) = (
        account("restore-hooks-controller"),
        account("restore-hooks-webhook"),
    );
    let mut out = Vec::new();
    for binding_kind in ["ClusterRoleBinding", "RoleBinding"] {
        for binding in of_kind(&install.rendered, binding_kind) {
            let subject = binding["subjects"][0]["name"].as_str().unwrap();
            let process = if subject == controller_sa {
                "controller"
            } else if subject == webhook_sa {
                "webhook"
            } else {
                continue;
            };
            let kind = binding["roleRef"]["kind"].as_str().unwrap();
            let name = binding["roleRef"]["name"].as_str().unwrap();
            let role = find(&install.rendered, kind, name);
            for (index, rule) in role["rules"].as_array().unwrap().iter().enumerate() {
                let strings = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .unwrap()
                        .iter()
                        .map(|s| s.as_str().unwrap().to_string())
                        .collect()
                };
                let mut resources = Vec::new();
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        let (base, sub) = match resource.split_once('/') {
                            Some((b, s)) => (b.to_string(), Some(s.to_string())),
                            None => (resource.clone(), None),
                        };
                        let mut named = if group.is_empty() {
                            base
                        } else {
                            format!("{base}.{group}")
                        };
                        if let Some(sub) = sub {
                            named = format!("{named}/{sub}");
                        }
                        resources.push(named);
                    }
                }
                let verbs = strings(&rule["verbs"]);
                if strings(&rule["resources"]).iter().any(|r| r == "events") {
                    for group in strings(&rule["apiGroups"]) {
                        for verb in &verbs {
                            let named = if group.is_empty() {
                                "events".to_string()
                            } else {
                                format!("events.{group}")
                            };
                            out.push(Rule {
                                kind: kind.to_string(),
                                role: name.to_string(),
                                index,
                                process,
                                verbs: vec![verb.clone()],
                                resources: vec![named],
                                only: Some((group.clone(), verb.clone())),
                            });
                        }
                    }
                    continue;
                }
                out.push(Rule {
                    kind: kind.to_string(),
                    role: name.to_string(),
                    index,
                    process,
                    verbs,
                    resources,
                    only: None,
                });
            }
        }
    }
    out
}

/// The role `kind/name` as rendered, without `drop` (none: whole): the rule, or only its API
/// group and verb of `drop.only` (the rest of the rule stays granted).
fn role_without(install: &Install, kind: &str, name: &str, drop: Option<&Rule>) -> Value {
    let mut role = find(&install.rendered, kind, name).clone();
    let Some(drop) = drop else {
        return role;
    };
    let rules = role["rules"].as_array_mut().unwrap();
    let rule = rules.remove(drop.index);
    if let Some((group, verb)) = &drop.only {
        let without = |list: &Value, item: &str| -> Vec<Value> {
            list.as_array()
                .unwrap()
                .iter()
                .filter(|v| v.as_str() != Some(item))
                .cloned()
                .collect()
        };
        let mut rest = Vec::new();
        let other_verbs = without(&rule["verbs"], verb);
        if !other_verbs.is_empty() {
            let mut r = rule.clone();
            r["apiGroups"] = json!([group]);
            r["verbs"] = json!(other_verbs);
            rest.push(r);
        }
        let other_groups = without(&rule["apiGroups"], group);
        if !other_groups.is_empty() {
            let mut r = rule.clone();
            r["apiGroups"] = json!(other_groups);
            rest.push(r);
        }
        for (i, r) in rest.into_iter().enumerate() {
            rules.insert(drop.index + i, r);
        }
    }
    role
}

/// The two processes of replica 0, each as its Deployment runs it, the controller with a
/// retention period short enough for its start-up sweep to delete a completed RestoreRun.
fn start(install: &Install) -> (Serve, Serve) {
    let controller = install.serve(ServeOptions {
        args: vec!["--restore-run-retention=1s".into()],
        no_wait: true,
        ..ServeOptions::of("restore-hooks-controller", 0)
    });
    let webhook = install.serve(ServeOptions {
        no_wait: true,
        ..ServeOptions::of("restore-hooks-webhook", 0)
    });
    (controller, webhook)
}

/// Resets what start-up creates (so that creating it is exercised again) and leaves a
/// completed RestoreRun without pods, past any retention (so that deleting it is).
fn prepare(install: &Install, round: usize) {
    let cp = &install.cp;
    for (kind, name) in [
        ("lease", "restore-hooks-controller"),
        ("secret", "restore-hooks-plan-key"),
    ] {
        cp.kubectl_ok(["delete", kind, name, "-n", NAMESPACE, "--ignore-not-found"])
            .unwrap();
    }
    let stale = format!("stale-{round}");
    create(
        cp,
        &json!({"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreRun",
                "metadata": {"name": stale}, "spec": {"restore": stale}}),
    );
    cp.kubectl_ok([
        "patch",
        "restoreruns.restore-hooks.dev",
        &stale,
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({"status": {"phase": "Completed", "completedAt": "2026-01-01T00:00:00Z"}})
            .to_string(),
    ])
    .unwrap();
    // Its record, of a pod long gone: deleted with it.
    let part = format!("{stale}-0");
    create(
        cp,
        &json!({"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreRecord",
                "metadata": {"name": part},
                "spec": {"restore": stale, "restoreRun": stale, "part": 0}}),
    );
    cp.kubectl_ok([
        "patch",
        "restorerecords.restore-hooks.dev",
        &part,
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({"status": {"executions": {"00000000-0000-0000-0000-000000000000": {"plan": "gone", "hooks": {"0": "S"}}}}})
            .to_string(),
    ])
    .unwrap();
}

/// The scenario in namespace `rbac-<round>`. Returns once it completed, or once `enough` says
/// the processes' refusals so far are what the round is looking for (a missing rule can stall
/// the rest), or after a bounded wait.
fn exercise(
    install: &Install,
    round: usize,
    webhook: &Serve,
    enough: &dyn Fn() -> bool,
) -> Result<(), String> {
    let cp = &install.cp;
    let ns = format!("rbac-{round}");
    namespace(cp, &ns, json!({NAMESPACE_LABEL: format!("r-rbac-{round}")}));
    let mark = install.mark(&format!("rbac-{round}"));
    let hook = |name: &str, app: &str| {
        json!({"apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"labelSelector": {"matchLabels": {"app": app}},
                        "postHooks": [{"exec": {"command": ["sh", "-c", mark_cmd(&mark, name)]}}]}})
    };
    // The round's waits share one limit; each ends early (`Ok(false)`) once `enough`.
    let deadline = Instant::now() + Duration::from_secs(45);
    let wait = |what: &str, done: &dyn Fn() -> bool| -> Result<bool, String> {
        let left = deadline.saturating_duration_since(Instant::now());
        try_wait_until(what, left, || {
            if done() {
                Some(true)
            } else if enough() {
                Some(false)
            } else {
                None
            }
        })
        .map_err(|e| e.to_string())
    };
    // Admission needs the webhook up and holding the plan key: wait for that (or a refusal).
    let ready = || matches!(serve::http_get(webhook.admin_port, "/readyz"), Ok((200, _)));
    if !wait("the webhook to be ready", &ready)
        .map_err(|e| format!("{e}:\n{}", webhook.log_tail(10)))?
    {
        return Ok(());
    }
    // Its second hook runs in an ephemeral container (kwok reports it ended at once).
    let mut main = hook("main", "main");
    main["spec"]["postHooks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"exec": {"image": "busybox:1.36", "command": ["/bin/true"]}}));
    apply_list(cp, &[main]);
    let create_pod = |name: &str, app: &str, annotations: Value| {
        let (ok, stderr) = scenarios::kubectl_object(
            cp,
            &["create", "-f", "-"],
            &pod(&ns, name, &["app"], json!({"app": app}), annotations),
        );
        ok.then_some(()).ok_or(stderr)
    };
    // The RestoreHook must be compiled before its pod is admitted.
    let compiled = || {
        get_json(cp, &["get", "restorehook", "main", "-n", &ns])
            .is_some_and(|h| h["status"]["webhooks"][&webhook.identity]["observedGeneration"] == 1)
    };
    if !wait("the RestoreHook's compilation report", &compiled)? {
        return Ok(());
    }
    create_pod("main", "main", json!({}))?;
    create_pod(
        "anno",
        "anno",
        json!({"post.hook.restore.velero.io/command":
            serde_json::to_string(&["sh", "-c", &mark_cmd(&mark, "anno")]).unwrap()}),
    )?;
    create_pod("early", "early", json!({}))?;
    let ended = |name: &str| {
        get_pod(cp, &ns, name).is_some_and(|p| {
            matches!(
                p["metadata"]["labels"][EXEC_LABEL].as_str(),
                Some("done" | "failed")
            )
        })
    };
    // "early" was admitted before a hook object selecting it exists: the late path adds it.
    if !wait("the hooks of main and anno", &|| {
        ended("main") && ended("anno")
    })? {
        return Ok(());
    }
    apply_list(cp, &[hook("late", "early")]);
    // A review for a namespace the webhook's cache cannot know: it asks the API server.
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "5e1d7b4a-0000-4000-8000-000000000002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "no-such-namespace", "operation": "CREATE", "userInfo": {"username": "admin"},
            "object": pod("no-such-namespace", "ghost", &["app"], json!({}), json!({}))}});
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(install.certs.dir.join("ca.crt"))
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(review.to_string())
        .arg(format!("https://127.0.0.1:{}/mutate", install.webhook_port))
        .output()
        .expect("curl");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let late_ran = || {
        get_pod(cp, &ns, "early").is_some_and(|p| {
            hook_status(&p).is_some_and(|s| {
                s["hooks"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(|h| h["phase"] == "Succeeded"))
            })
        })
    };
    wait("the late hook", &late_ran)?;
    // The restore's RestoreRun, and the hook objects' counts, written.
    let counted = || {
        get_json(
            cp,
            &[
                "get",
                "restoreruns.restore-hooks.dev",
                &format!("r-rbac-{round}"),
            ],
        )
        .is_some_and(|r| r["status"]["phase"] == "Completed")
            && get_json(cp, &["get", "restorehook", "late", "-n", &ns])
                .is_some_and(|h| h["status"]["hooks"]["succeeded"] == 1)
    };
    wait("the RestoreRun and RestoreHook counts", &counted)?;
    // A Velero Restore that writes to a namespace: the leader labels it for the restore's window
    // (docs/behaviour.md §1.6). Played by the test: Velero's CRDs, no Velero.
    let windowed = format!("rbac-win-{round}");
    create(
        cp,
        &json!({"apiVersion": "velero.io/v1", "kind": "Restore",
                "metadata": {"name": windowed, "namespace": "velero"},
                "spec": {"backupName": "b1", "includedNamespaces": [windowed]},
                "status": {"phase": "InProgress"}}),
    );
    namespace(cp, &windowed, json!({}));
    let labelled = || {
        get_json(cp, &["get", "namespace", &windowed])
            .is_some_and(|n| n["metadata"]["labels"][NAMESPACE_LABEL] == windowed.as_str())
    };
    wait("the restore window's namespace label", &labelled)?;
    Ok(())
}

/// Stops both processes. The round's namespace stays: its pods keep their RestoreRun, and each
/// round brings its own completed, pod-less RestoreRun for the start-up sweep (`prepare`).
fn finish(controller: &mut Serve, webhook: &mut Serve) {
    controller.kill();
    webhook.kill();
}

#[test]
fn every_rbac_rule_of_the_chart_is_needed_and_a_missing_one_is_reported() {
    let _heavy = heavy();
    let install = Install::default_chart();
    let rules = rules(&install);
    assert!(rules.len() >= 20, "{} rules", rules.len());

    realcp::Velero::install_crds(&install.cp).unwrap_or_else(|e| panic!("{e:#}"));
    // The chart as rendered: the scenario completes, nothing is refused.
    prepare(&install, 0);
    let (mut controller, mut webhook) = start(&install);
    exercise(&install, 0, &webhook, &|| false)
        .unwrap_or_else(|e| panic!("the scenario with the chart's RBAC: {e}"));
    wait_until("the start-up sweep", Duration::from_secs(30), || {
        get_json(
            &install.cp,
            &["get", "restoreruns.restore-hooks.dev", "stale-0"],
        )
        .is_none()
        .then_some(())
        .ok_or_else(|| "stale-0 still there".to_string())
    });
    assert!(
        get_json(
            &install.cp,
            &["get", "restorerecords.restore-hooks.dev", "stale-0-0"]
        )
        .is_none(),
        "the expired RestoreRun's record was deleted before it"
    );
    controller.assert_no_forbidden();
    webhook.assert_no_forbidden();
    finish(&mut controller, &mut webhook);
    // Each round's processes run as the same replicas and write the same log files: these two
    // are checked (and gone) before the rounds overwrite theirs.
    drop((controller, webhook));

    let mut unnoticed = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let round = i + 1;
        let started = Instant::now();
        apply_list(
            &install.cp,
            &[role_without(&install, &rule.kind, &rule.role, Some(rule))],
        );
        prepare(&install, round);
        let (mut controller, mut webhook) = start(&install);
        controller.expect_forbidden();
        webhook.expect_forbidden();
        let process = |c: &Serve, w: &Serve| {
            if rule.process == "controller" {
                c.refusals()
            } else {
                w.refusals()
            }
        };
        let hit = |refusals: &[(String, String)]| {
            refusals.iter().any(|(verb, resource)| {
                rule.verbs.contains(verb) && rule.resources.contains(resource)
            })
        };
        let outcome = exercise(&install, round, &webhook, &|| {
            hit(&process(&controller, &webhook))
        });
        let refusals = process(&controller, &webhook);
        eprintln!(
            "rbac: without {rule}: {} refusal(s) {:?}; scenario: {}; {:.1} s",
            refusals.len(),
            refusals.iter().take(3).collect::<Vec<_>>(),
            match &outcome {
                Ok(()) => "ok".to_string(),
                Err(e) => e.lines().next().unwrap_or_default().to_string(),
            },
            started.elapsed().as_secs_f64()
        );
        if !hit(&refusals) {
            unnoticed.push(format!(
                "{rule}: refusals {refusals:?}, scenario {outcome:?}"
            ));
        }
        finish(&mut controller, &mut webhook);
        apply_list(
            &install.cp,
            &[role_without(&install, &rule.kind, &rule.role, None)],
        );
    }
    assert!(
        unnoticed.is_empty(),
        "rules whose absence nothing noticed (the chart grants more than the product needs, or \
         a refusal is not reported):\n{}",
        unnoticed.join("\n")
    );
}
