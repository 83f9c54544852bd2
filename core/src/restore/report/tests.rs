//! Table tests of the report rules (docs/behaviour.md §8.4).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::hooks::plan::{HookRef, HookStatus, PlannedHook};
use crate::hooks::types::{RestoreRunSpec, RestoreRunStatus};

const RESTORE: &str = "nightly-1";

fn hook(name: &str, source: &str) -> PlannedHook {
    PlannedHook::example(name, source, "app")
}

fn plan(restore: &str, hooks: Vec<PlannedHook>) -> ExecPlan {
    ExecPlan {
        id: "AAECAwQFBgcICQoL".into(),
        restore: restore.into(),
        issued_at: Some("2026-12-02T10:00:00Z".into()),
        hooks,
        ..Default::default()
    }
}

/// A status entry of `hook` in `phase`.
fn entry(hook: &PlannedHook, phase: HookPhase) -> HookStatus {
    let mut e = crate::exec_step::pending(hook);
    e.phase = phase;
    if phase != HookPhase::Pending {
        e.started_at = Some("2026-12-02T10:00:05Z".into());
    }
    if phase.is_terminal() {
        e.finished_at = Some("2026-12-02T10:00:07Z".into());
    }
    e
}

fn pod(name: &str, plan: Option<&ExecPlan>, status: Option<&ExecStatus>, label: &str) -> PodFacts {
    PodFacts {
        namespace: "shop".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        created: Some("2026-12-02T10:00:01Z".into()),
        deleting: false,
        exec_label: Some(label.into()),
        plan: plan.map(ExecPlan::to_annotation),
        status: status.map(|s| serde_json::to_string(s).unwrap()),
    }
}

/// A pod of [`RESTORE`] with one hook `ok` in `phase`, and a second one `broken` failing with
/// exit 3 when `fails`.
fn restored(name: &str, fails: bool, phase: HookPhase) -> PodFacts {
    let mut hooks = vec![hook("ok", "restorehook/all-web")];
    if fails {
        hooks.push(hook("broken", "restorehook/broken"));
    }
    let p = plan(RESTORE, hooks);
    let mut statuses = vec![entry(&p.hooks[0], phase)];
    if fails {
        let mut e = entry(&p.hooks[1], HookPhase::Failed);
        e.exit_code = Some(3);
        e.message = "command terminated with exit code 3".into();
        e.stderr = "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nboom\n".into();
        statuses.push(e);
    }
    let status = ExecStatus {
        hooks: statuses,
        message: String::new(),
    };
    let ended = !fails && phase.is_terminal();
    let label = if fails {
        "failed"
    } else if ended {
        "done"
    } else {
        "pending"
    };
    pod(name, Some(&p), Some(&status), label)
}

fn input<'a>(pods: &'a [PodFacts], run: Option<&'a RestoreRun>) -> Input<'a> {
    Input {
        restore: RESTORE,
        run,
        run_error: None,
        pods,
        events: &[],
        events_shown: EventsShown::All,
        namespaces: &[],
        notes: Vec::new(),
    }
}

fn counts(succeeded: i64, failed: i64, skipped: i64, pending: i64) -> HookCounts {
    HookCounts {
        succeeded,
        failed,
        skipped,
        pending,
        ..HookCounts::default()
    }
}

fn run(phase: &str, hooks: HookCounts) -> RestoreRun {
    let at = Time("2026-12-02T10:00:02Z".parse().unwrap());
    let condition = |type_: &str, status: &str| Condition {
        type_: type_.into(),
        status: status.into(),
        reason: phase.into(),
        message: "counts".into(),
        observed_generation: None,
        last_transition_time: at.clone(),
    };
    let (completed, failed) = match phase {
        "InProgress" => ("False", "Unknown"),
        "Completed" => ("True", "False"),
        _ => ("True", "True"),
    };
    RestoreRun {
        metadata: ObjectMeta {
            name: Some(RESTORE.into()),
            creation_timestamp: Some(at.clone()),
            ..Default::default()
        },
        spec: RestoreRunSpec {
            restore: RESTORE.into(),
        },
        status: Some(RestoreRunStatus {
            phase: phase.into(),
            hooks,
            completed_at: (phase != "InProgress").then(|| "2026-12-02T10:03:13Z".into()),
            conditions: vec![
                condition("Completed", completed),
                condition("Failed", failed),
            ],
            ..Default::default()
        }),
    }
}

/// Which pods belong to the restore, how each counts, and every failed pod listed, however many.
#[test]
fn pods_count_as_for_the_restore_run_and_every_failed_pod_is_listed() {
    let mut pods: Vec<PodFacts> = (0..25)
        .map(|i| restored(&format!("fail-{i:02}"), true, HookPhase::Succeeded))
        .collect();
    pods.push(restored("ok-0", false, HookPhase::Succeeded));
    pods.push(restored("ok-1", false, HookPhase::Running));
    // In scope with no hooks: counted, not listed.
    pods.push(pod("no-hooks", None, None, "pending"));
    // Another restore with the same label value (a hashed long name): left out.
    let other = plan("nightly-1-other", vec![hook("ok", "restorehook/all-web")]);
    pods.push(pod("other", Some(&other), None, "pending"));
    // A plan that does not parse: listed with the problem.
    let mut bad = pod("bad", None, None, "pending");
    bad.plan = Some("{not json".into());
    pods.push(bad);

    let report = build(input(&pods, None));
    assert_eq!(report.pods_planned, 27);
    assert_eq!(report.pods_without_hooks, 1);
    assert_eq!(report.hooks, counts(26, 25, 0, 1));
    assert_eq!(report.running, 1);
    assert_eq!(report.failed_pods.len(), 25, "every failed pod, not 20");
    let names: Vec<&str> = report.failed_pods.iter().map(|f| f.pod.as_str()).collect();
    let want: Vec<String> = (0..25).map(|i| format!("fail-{i:02}")).collect();
    assert_eq!(names, want);
    assert_eq!(
        report.failed_pods[0],
        FailedPod {
            namespace: "shop".into(),
            pod: "fail-00".into(),
            hook: "broken".into(),
            message: "command terminated with exit code 3".into(),
        }
    );
    let phases: BTreeMap<&str, &str> = report
        .pods
        .iter()
        .map(|p| (p.name.as_str(), p.phase.as_str()))
        .collect();
    assert_eq!(phases["fail-07"], "Failed");
    assert_eq!(phases["ok-0"], "Succeeded");
    assert_eq!(phases["ok-1"], "InProgress");
    assert_eq!(phases["bad"], "Unreadable");
    assert!(!phases.contains_key("other") && !phases.contains_key("no-hooks"));
    // No RestoreRun: the phase is the pods', and said so.
    assert_eq!(
        (report.phase.as_str(), report.phase_from.as_str()),
        ("InProgress", "pods")
    );
    assert!(report.notes.iter().any(|n| n.starts_with("no RestoreRun")));
    assert!(report.notes.iter().any(|n| {
        n.starts_with("1 pod(s) carry the restore's label with a plan that does not parse")
    }));
    assert_eq!(
        report.timeline.first_hook_started.as_deref(),
        Some("2026-12-02T10:00:05Z")
    );
    assert_eq!(report.timeline.duration, None, "not ended");
}

/// Hooks that can never start count as failed with the reason, as the RestoreRun counts them
/// (docs/behaviour.md §8.3); refused, late, missed init and not applicable hooks are listed.
#[test]
fn settled_refused_late_and_missed_hooks() {
    struct Case {
        name: &'static str,
        pod: PodFacts,
        phases: Vec<HookPhase>,
        message: &'static str,
        pod_message: &'static str,
    }
    let two = plan(
        RESTORE,
        vec![hook("a", "restorehook/a"), hook("b", "restorehook/a")],
    );
    let first_done = ExecStatus {
        hooks: vec![
            entry(&two.hooks[0], HookPhase::Succeeded),
            entry(&two.hooks[1], HookPhase::Pending),
        ],
        message: String::new(),
    };
    let refused_plan = ExecStatus {
        message: "its exec plan was issued for another pod".into(),
        ..first_done.clone()
    };
    let mut annotation = hook("<from-annotation>", "annotation");
    annotation.refused = Some("refused: the pod was created by mallory".into());
    let refused_hook = plan(RESTORE, vec![annotation]);
    let refused_status = ExecStatus {
        hooks: vec![{
            let mut e = entry(&refused_hook.hooks[0], HookPhase::Failed);
            e.message = "refused: the pod was created by mallory".into();
            e
        }],
        message: String::new(),
    };
    let cases = [
        Case {
            name: "relabelled by hand: the pending hook counts as failed",
            pod: pod("relabelled", Some(&two), Some(&first_done), "done"),
            phases: vec![HookPhase::Succeeded, HookPhase::Failed],
            message: "not run: the pod's restore-hooks.dev/exec label is \"done\"",
            pod_message: "",
        },
        Case {
            name: "a refused plan: the refusal is every unended hook's reason",
            pod: pod("copied", Some(&two), Some(&refused_plan), "failed"),
            phases: vec![HookPhase::Succeeded, HookPhase::Failed],
            message: "its exec plan was issued for another pod",
            pod_message: "its exec plan was issued for another pod",
        },
        Case {
            name: "still pending: counted as it is",
            pod: pod("waiting", Some(&two), Some(&first_done), "pending"),
            phases: vec![HookPhase::Succeeded, HookPhase::Pending],
            message: "",
            pod_message: "",
        },
        Case {
            name: "an annotation hook refused at admission",
            pod: pod(
                "by-mallory",
                Some(&refused_hook),
                Some(&refused_status),
                "failed",
            ),
            phases: vec![HookPhase::Failed],
            message: "refused: the pod was created by mallory",
            pod_message: "",
        },
    ];
    for c in cases {
        let pods = [c.pod];
        let report = build(input(&pods, None));
        let got: Vec<HookPhase> = report.pods[0].hooks.iter().map(|h| h.phase).collect();
        assert_eq!(got, c.phases, "{}", c.name);
        let last = report.pods[0].hooks.last().unwrap();
        assert!(
            last.message.starts_with(c.message),
            "{}: {}",
            c.name,
            last.message
        );
        assert_eq!(report.pods[0].message, c.pod_message, "{}", c.name);
        let failed = c.phases.contains(&HookPhase::Failed);
        assert_eq!(report.failed_pods.len(), usize::from(failed), "{}", c.name);
        assert_eq!(
            report.refused_hooks.len(),
            usize::from(pods[0].name == "by-mallory"),
            "{}",
            c.name
        );
        assert_eq!(report.hooks.refused, report.refused_hooks.len() as i64);
    }

    // A plan a late RestoreHook extended: its hooks from `lateFrom` on are late; its init hook
    // was missed, and a hook whose container the pod lacks is not applicable.
    let mut late = plan(
        RESTORE,
        vec![
            hook("a", "restorehook/a"),
            hook("migrate", "restorehook/migrate"),
        ],
    );
    late.late_from = Some(1);
    late.missed_init = vec![HookRef {
        source: "restorehook/migrate".into(),
        name: "migrate".into(),
        index: 0,
        container: String::new(),
    }];
    late.not_applicable = vec![HookRef {
        source: "clusterrestorehook/pg".into(),
        name: "pg".into(),
        index: 0,
        container: "postgres".into(),
    }];
    let pods = [pod("db-0", Some(&late), None, "pending")];
    let report = build(input(&pods, None));
    let late_flags: Vec<bool> = report.pods[0].hooks.iter().map(|h| h.late).collect();
    assert_eq!(late_flags, [false, true]);
    assert_eq!(
        report.late_hooks,
        [HookLine {
            namespace: "shop".into(),
            pod: "db-0".into(),
            position: 1,
            hook: "migrate".into(),
            source: "restorehook/migrate".into(),
            phase: "Pending".into(),
            message: String::new(),
        }]
    );
    assert_eq!(report.missed_init_hooks.len(), 1);
    assert_eq!(report.missed_init_hooks[0].source, "restorehook/migrate");
    assert_eq!(report.not_applicable_hooks[0].container, "postgres");
    assert_eq!(
        (report.hooks.missed_init, report.hooks.not_applicable),
        (1, 1)
    );
    assert_eq!(
        event_namespaces(RESTORE, &pods)
            .into_iter()
            .collect::<Vec<_>>(),
        ["default", "shop"],
        "a ClusterRestoreHook's Events are in default"
    );
}

/// The phase and conditions are the RestoreRun's (it also counts pods that are gone); the notes
/// say where the pods and the RestoreRun disagree, and what the listing covers.
#[test]
fn phase_conditions_and_notes() {
    let pods = [
        restored("web-0", false, HookPhase::Succeeded),
        restored("web-1", true, HookPhase::Succeeded),
    ];
    struct Case {
        name: &'static str,
        run: Option<RestoreRun>,
        namespaces: Vec<String>,
        phase: &'static str,
        from: &'static str,
        notes: Vec<&'static str>,
        run_error: Option<&'static str>,
    }
    let mut retired = run("PartiallyFailed", counts(3, 1, 0, 0));
    if let Some(s) = retired.status.as_mut() {
        s.retired = counts(1, 0, 0, 0);
        s.retired_pods = Some(1);
    }
    let cases = [
        Case {
            name: "the RestoreRun agrees",
            run: Some(run("PartiallyFailed", counts(2, 1, 0, 0))),
            namespaces: vec![],
            phase: "PartiallyFailed",
            from: "RestoreRun",
            notes: vec![],
            run_error: None,
        },
        Case {
            name: "a deleted pod: counted by the RestoreRun only",
            run: Some(retired),
            namespaces: vec![],
            phase: "PartiallyFailed",
            from: "RestoreRun",
            notes: vec!["1 pod(s) of the restore no longer exist"],
            run_error: None,
        },
        Case {
            name: "the RestoreRun is behind the pods",
            run: Some(run("InProgress", counts(1, 0, 0, 2))),
            namespaces: vec![],
            phase: "InProgress",
            from: "RestoreRun",
            notes: vec!["the RestoreRun counts 1 succeeded, 0 failed, 0 skipped, 2 pending"],
            run_error: None,
        },
        Case {
            name: "one namespace listed: no comparison",
            run: Some(run("InProgress", counts(1, 0, 0, 2))),
            namespaces: vec!["shop".into()],
            phase: "InProgress",
            from: "RestoreRun",
            notes: vec!["pods listed in namespace(s) shop only"],
            run_error: None,
        },
        Case {
            name: "no RestoreRun",
            run: None,
            namespaces: vec![],
            phase: "PartiallyFailed",
            from: "pods",
            notes: vec!["no RestoreRun for restore nightly-1"],
            run_error: None,
        },
        Case {
            name: "a RestoreRun the user may not read",
            run: None,
            namespaces: vec![],
            phase: "PartiallyFailed",
            from: "pods",
            notes: vec![
                "the RestoreRun of restore nightly-1 could not be read (restoreruns is forbidden (403))",
            ],
            run_error: Some("restoreruns is forbidden (403)"),
        },
    ];
    for c in cases {
        let report = build(Input {
            namespaces: &c.namespaces,
            run_error: c.run_error.map(str::to_string),
            ..input(&pods, c.run.as_ref())
        });
        assert_eq!(
            (report.phase.as_str(), report.phase_from.as_str()),
            (c.phase, c.from),
            "{}",
            c.name
        );
        assert_eq!(
            report.notes.len(),
            c.notes.len(),
            "{}: {:?}",
            c.name,
            report.notes
        );
        for (note, want) in report.notes.iter().zip(&c.notes) {
            assert!(note.starts_with(want), "{}: {note}", c.name);
        }
        if c.run.is_some() {
            let types: Vec<(&str, &str)> = report
                .conditions
                .iter()
                .map(|c| (c.type_.as_str(), c.status.as_str()))
                .collect();
            let want = if c.phase == "InProgress" {
                [("Completed", "False"), ("Failed", "Unknown")]
            } else {
                [("Completed", "True"), ("Failed", "True")]
            };
            assert_eq!(types, want, "{}", c.name);
        }
    }
    let report = build(input(
        &pods,
        Some(&run("PartiallyFailed", counts(2, 1, 0, 0))),
    ));
    assert_eq!(
        report.timeline.completed_at.as_deref(),
        Some("2026-12-02T10:03:13Z")
    );
    assert_eq!(
        report.timeline.duration.as_deref(),
        Some("3m12s"),
        "from the first pod's creation"
    );
    assert_eq!(report.restore_run.as_deref(), Some(RESTORE));
    assert_eq!(report.restore_run_hooks, Some(counts(2, 1, 0, 0)));
    // Nothing at all: no phase.
    let empty = build(input(&[], None));
    assert_eq!((empty.phase.as_str(), empty.pods.len()), ("", 0));
}

/// Which Events are kept: restore-hooks' and Warnings about the restore's pods (by uid, or by
/// name when the Event has none), and those about the hook objects its plans name, from the
/// restore's first pod on.
#[test]
fn events_of_the_pods_and_hook_objects() {
    let mut p = plan(
        RESTORE,
        vec![
            hook("ok", "restorehook/all-web"),
            hook("ca", "clusterrestorehook/ca"),
        ],
    );
    p.late_from = None;
    let pods = [pod("web-0", Some(&p), None, "pending")];
    let event =
        |kind: &str, name: &str, uid: Option<&str>, type_: &str, component: &str, at: &str| {
            EventFacts {
                namespace: if kind == "ClusterRestoreHook" {
                    "default"
                } else {
                    "shop"
                }
                .into(),
                kind: kind.into(),
                name: name.into(),
                uid: uid.map(str::to_string),
                type_: type_.into(),
                reason: format!("{kind}-{name}-{type_}-{component}-{at}"),
                message: "line one\nline two".into(),
                count: 1,
                component: component.into(),
                last_seen: Some(format!("2026-12-02T10:00:{at}Z")),
                event_time: None,
            }
        };
    let rh = CONTROLLER_COMPONENT;
    let events = [
        // (event, kept)
        (
            event("Pod", "web-0", Some("uid-web-0"), "Normal", rh, "09"),
            true,
        ),
        (
            event("Pod", "web-0", Some("uid-web-0"), "Normal", "kubelet", "08"),
            false,
        ),
        (
            event(
                "Pod",
                "web-0",
                Some("uid-web-0"),
                "Warning",
                "kubelet",
                "07",
            ),
            true,
        ),
        (
            event(
                "Pod",
                "web-0",
                Some("uid-of-an-older-web-0"),
                "Warning",
                rh,
                "06",
            ),
            false,
        ),
        (event("Pod", "web-0", None, "Normal", rh, "05"), true),
        (
            event("Pod", "db-0", Some("uid-db-0"), "Warning", rh, "05"),
            false,
        ),
        (
            event("RestoreHook", "all-web", None, "Normal", rh, "04"),
            true,
        ),
        (
            event("RestoreHook", "all-web", None, "Warning", rh, "00"),
            false,
        ),
        (
            event("RestoreHook", "other", None, "Normal", rh, "04"),
            false,
        ),
        (
            event("ClusterRestoreHook", "ca", None, "Warning", rh, "03"),
            true,
        ),
        (
            event("Restore", RESTORE, None, "Warning", "velero", "03"),
            false,
        ),
    ];
    let all: Vec<EventFacts> = events.iter().map(|(e, _)| e.clone()).collect();
    for shown in [EventsShown::All, EventsShown::Warnings, EventsShown::None] {
        let report = build(Input {
            events: &all,
            events_shown: shown,
            ..input(&pods, None)
        });
        let got: Vec<&str> = report.events.iter().map(|e| e.reason.as_str()).collect();
        let mut want: Vec<(&str, &str)> = events
            .iter()
            .filter(|(e, kept)| {
                *kept
                    && match shown {
                        EventsShown::All => true,
                        EventsShown::Warnings => e.type_ == "Warning",
                        EventsShown::None => false,
                    }
            })
            .map(|(e, _)| (e.last_seen.as_deref().unwrap(), e.reason.as_str()))
            .collect();
        want.sort();
        let want: Vec<&str> = want.into_iter().map(|(_, r)| r).collect();
        assert_eq!(got, want, "{shown:?}");
    }
    let report = build(Input {
        events: &all,
        ..input(&pods, None)
    });
    let ca = report
        .events
        .iter()
        .find(|e| e.kind == "ClusterRestoreHook")
        .unwrap();
    assert_eq!(ca.namespace, "", "a cluster-scoped object has none");

    // Within one second, `eventTime`'s microseconds order them.
    let at = |reason: &str, micros: &str| EventFacts {
        reason: reason.into(),
        event_time: Some(format!("2026-12-02T10:00:09.{micros}Z")),
        ..event("Pod", "web-0", Some("uid-web-0"), "Normal", rh, "09")
    };
    let same_second = [at("HooksCompleted", "900000"), at("HookRetrying", "100000")];
    let report = build(Input {
        events: &same_second,
        ..input(&pods, None)
    });
    let got: Vec<&str> = report.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(got, ["HookRetrying", "HooksCompleted"]);
}

/// A label value names its restore's full name when a plan of the pods it selects says so.
#[test]
fn a_label_value_resolves_to_the_full_restore_name() {
    let long = "nightly-schedule-for-the-payments-database-cluster-20261203101500-abcd";
    let label = velero_label_value(long).into_owned();
    let of = |restore: &str| {
        pod(
            "p",
            Some(&plan(restore, vec![hook("a", "annotation")])),
            None,
            "pending",
        )
    };
    let cases = [
        ("the full name", long, vec![of(long)], long),
        (
            "the label value of a long name",
            label.as_str(),
            vec![of(long)],
            long,
        ),
        ("a short name", RESTORE, vec![of(RESTORE)], RESTORE),
        ("no pods", RESTORE, vec![], RESTORE),
        (
            "pods of another restore only",
            label.as_str(),
            vec![of("x")],
            label.as_str(),
        ),
    ];
    for (name, given, pods, want) in cases {
        assert_eq!(resolve_restore(given, &pods), want, "{name}");
    }
}

/// The text report: every failed pod, the message and stderr tail of what did not succeed, the
/// lists, the Events; and the JSON shape's keys, which docs/behaviour.md §8.4 documents.
#[test]
fn the_text_and_the_json_shape() {
    let mut pods: Vec<PodFacts> = (0..22)
        .map(|i| restored(&format!("fail-{i:02}"), true, HookPhase::Succeeded))
        .collect();
    pods.push(restored("ok-0", false, HookPhase::Succeeded));
    let events = [EventFacts {
        namespace: "shop".into(),
        kind: "Pod".into(),
        name: "fail-03".into(),
        uid: Some("uid-fail-03".into()),
        type_: "Warning".into(),
        reason: "HookFailed".into(),
        message: "hook broken failed:\ncommand terminated with exit code 3".into(),
        count: 2,
        component: CONTROLLER_COMPONENT.into(),
        last_seen: Some("2026-12-02T10:00:08Z".into()),
        event_time: None,
    }];
    let run = run("PartiallyFailed", counts(23, 22, 0, 0));
    let report = build(Input {
        events: &events,
        ..input(&pods, Some(&run))
    });
    let text = report.text();
    assert!(
        text.starts_with(
            "Name:         nightly-1\nRestoreRun:   nightly-1\nPhase:        PartiallyFailed\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "Conditions:   Completed=True (PartiallyFailed), Failed=True (PartiallyFailed)"
        ),
        "{text}"
    );
    assert!(
        text.contains("\nFailed pods (22):\n  NAMESPACE  POD      HOOK    MESSAGE\n"),
        "{text}"
    );
    for i in 0..22 {
        let line =
            format!("  shop       fail-{i:02}  broken  command terminated with exit code 3\n");
        assert!(text.contains(&line), "{line:?} in {text}");
    }
    assert!(
        text.contains(
            "    #1 broken (restorehook/broken, container app): Failed  2026-12-02T10:00:05Z → \
             2026-12-02T10:00:07Z  [exit 3]\n        message: command terminated with exit code 3\n        \
             stderr: (last 5 lines)\n          | line 3\n"
        ),
        "{text}"
    );
    assert!(text.contains("          | boom\n"), "{text}");
    assert!(!text.contains("| line 2"), "only the tail: {text}");
    assert!(
        text.contains("Warning  HookFailed  pod/shop/fail-03  hook broken failed: command terminated with exit code 3 (x2)"),
        "{text}"
    );
    assert!(
        text.contains(
            "Completed:           2026-12-02T10:03:13Z (3m12s after the first pod was created)"
        ),
        "{text}"
    );

    let value = serde_json::to_value(&report).unwrap();
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = REPORT_KEYS.to_vec();
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(value["kind"], "RestoreReport");
    assert_eq!(value["failedPods"].as_array().unwrap().len(), 22);
    let hook = &value["pods"][0]["hooks"][1];
    let hook_keys: Vec<&str> = {
        let mut k: Vec<&str> = hook
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        k.sort_unstable();
        k
    };
    assert_eq!(
        hook_keys,
        [
            "container",
            "exitCode",
            "finishedAt",
            "index",
            "late",
            "message",
            "name",
            "onError",
            "phase",
            "position",
            "refused",
            "retries",
            "retryAt",
            "runOn",
            "source",
            "startedAt",
            "stderr",
            "stdout"
        ]
    );
    assert_eq!(hook["phase"], "Failed");
    assert_eq!(hook["exitCode"], 3);
    assert_eq!(
        hook["refused"],
        json!(null),
        "absent values are null, never left out"
    );
}

/// The top-level keys of `describe -o json`, as docs/behaviour.md §8.4 lists them.
pub(crate) const REPORT_KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "restore",
    "restoreRun",
    "phase",
    "phaseFrom",
    "conditions",
    "timeline",
    "podsPlanned",
    "podsWithoutHooks",
    "hooks",
    "running",
    "otherPod",
    "restoreRunHooks",
    "retiredPods",
    "failedPods",
    "refusedHooks",
    "lateHooks",
    "missedInitHooks",
    "notApplicableHooks",
    "onePod",
    "pods",
    "events",
    "notes",
];
