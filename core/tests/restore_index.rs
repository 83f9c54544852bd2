//! The restore model ([`RestoreIndex`]) fed with pods as values: every question it answers across
//! the pods of a restore, one table each (docs/behaviour.md §6.15, §6.16, §6.20, §8).

use restore_hooks_core::exec_step::align;
use restore_hooks_core::hooks::labels::CompactLabels;
use restore_hooks_core::hooks::plan::{ExecPlan, ExecStatus, HookPhase};
use restore_hooks_core::hooks::types::HookCounts;
use restore_hooks_core::restore::after::AfterTurn;
use restore_hooks_core::restore::one_pod::choose;
use restore_hooks_core::restore::tally::Target;
use restore_hooks_core::restore::{MarkedPod, RestoreIndex, Standing, Verified};
use serde_json::{Value, json};

/// A plan of restore `restore` with `hooks` (each a JSON object merged over a default hook),
/// vouched for by `vouched_by` (`null`: a plan issued before the field existed).
fn plan(restore: &str, vouched_by: Value, hooks: &[Value]) -> ExecPlan {
    let hooks: Vec<Value> = hooks
        .iter()
        .enumerate()
        .map(|(i, extra)| {
            let mut h = json!({
                "name": "h", "source": "restorehook/h", "index": i, "container": "db",
                "command": ["true"], "onError": "Continue", "execTimeoutMs": 30000,
                "waitTimeoutMs": null, "waitForReady": false
            });
            json_patch::merge(&mut h, extra);
            h
        })
        .collect();
    let mut p =
        json!({"id": "x", "restore": restore, "issuedAt": "2026-12-06T00:00:00Z", "hooks": hooks});
    if !vouched_by.is_null() {
        p["vouchedBy"] = vouched_by;
    }
    serde_json::from_value(p).expect("a valid plan")
}

fn hook(name: &str) -> Value {
    json!({"name": name, "source": format!("restorehook/{name}")})
}

fn status(plan: &ExecPlan, phases: &[HookPhase]) -> ExecStatus {
    let mut s = align(plan, None);
    for (h, p) in s.hooks.iter_mut().zip(phases) {
        h.phase = *p;
    }
    s
}

fn marked(namespace: &str, name: &str, labels: &[(&str, &str)], created: i64) -> MarkedPod {
    let labels: std::collections::BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    MarkedPod {
        namespace: namespace.into(),
        name: name.into(),
        labels: CompactLabels::from(&labels),
        created: Some(jiff::Timestamp::from_second(1_800_000_000 + created).unwrap()),
        ..MarkedPod::default()
    }
}

fn verified(plan: ExecPlan, phases: &[HookPhase]) -> Option<Verified> {
    let status = Some(status(&plan, phases));
    Some(Verified { plan, status })
}

/// The pod that waits in namespace `shop`: `migrate` after `db-restore` (resolved to `shop`).
fn waiter() -> ExecPlan {
    plan(
        "r1",
        json!("controller"),
        &[json!({"name": "migrate", "source": "restorehook/migrate",
                 "after": [{"hook": "db-restore", "kind": "RestoreHook", "namespace": "shop"}]})],
    )
}

/// `after` (§6.16, §6.20): a waiter sees only the runs of the awaited object in the pods of the
/// awaited namespace, of its own restore, that someone vouches for.
#[test]
fn an_after_waiter_counts_only_vouched_pods_of_the_awaited_namespace() {
    use HookPhase::{Failed, Pending, Succeeded};
    let db = |vouched: Value, on_error: &str| {
        plan(
            "r1",
            vouched,
            &[
                json!({"name": "db-restore", "source": "restorehook/db-restore", "onError": on_error}),
            ],
        )
    };
    // (what, other pods: (namespace, name, restore's plan, phase), want)
    type Other = (&'static str, &'static str, ExecPlan, HookPhase);
    let cases: Vec<(&str, Vec<Other>, AfterTurn)> = vec![
        (
            "nobody plans it yet",
            vec![],
            AfterTurn::Wait(
                "hook db-restore is planned on no pod of the restore that counts for it".into(),
            ),
        ),
        (
            "its pod succeeded",
            vec![("shop", "db-0", db(json!("velero"), "Fail"), Succeeded)],
            AfterTurn::Go,
        ),
        (
            "a plan from before vouching counts",
            vec![("shop", "db-0", db(Value::Null, "Fail"), Succeeded)],
            AfterTurn::Go,
        ),
        (
            "still pending",
            vec![("shop", "db-0", db(json!("velero"), "Fail"), Pending)],
            AfterTurn::Wait("hook db-restore has not ended in pod shop/db-0".into()),
        ),
        (
            "failed with onError Fail: skipped",
            vec![("shop", "db-0", db(json!("controller"), "Fail"), Failed)],
            AfterTurn::Skip(
                "after: hook db-restore failed in pod shop/db-0 (onError: Fail); not executed"
                    .into(),
            ),
        ),
        (
            "another namespace's pod of the same restore and name cannot fail it",
            vec![
                ("shop", "db-0", db(json!("velero"), "Fail"), Succeeded),
                ("team-b", "db-x", db(json!("creator"), "Fail"), Failed),
            ],
            AfterTurn::Go,
        ),
        (
            "... nor stall it",
            vec![
                ("shop", "db-0", db(json!("velero"), "Fail"), Succeeded),
                ("team-b", "db-x", db(json!("creator"), "Fail"), Pending),
            ],
            AfterTurn::Go,
        ),
        (
            "... nor release it early",
            vec![("team-b", "db-x", db(json!("creator"), "Fail"), Succeeded)],
            AfterTurn::Wait(
                "hook db-restore is planned on no pod of the restore that counts for it".into(),
            ),
        ),
        (
            "a pod nobody vouches for (its creator set the labels) counts for nothing",
            vec![
                ("shop", "db-0", db(json!("velero"), "Fail"), Succeeded),
                ("shop", "fake", db(json!("nobody"), "Fail"), Failed),
            ],
            AfterTurn::Go,
        ),
        (
            "another restore's pod counts for nothing",
            vec![(
                "shop",
                "old-db",
                plan(
                    "r0",
                    json!("velero"),
                    &[
                        json!({"name": "db-restore", "source": "restorehook/db-restore", "onError": "Fail"}),
                    ],
                ),
                Failed,
            )],
            AfterTurn::Wait(
                "hook db-restore is planned on no pod of the restore that counts for it".into(),
            ),
        ),
    ];
    for (what, others, want) in cases {
        let mut index = RestoreIndex::new();
        let w = waiter();
        index.apply(
            "w",
            marked("shop", "api-0", &[], 0),
            verified(w.clone(), &[Pending]),
        );
        for (i, (ns, name, p, phase)) in others.into_iter().enumerate() {
            index.apply(
                &format!("u{i}"),
                marked(ns, name, &[], 1),
                verified(p, &[phase]),
            );
        }
        index.set_listed();
        let turns = index.after_turns("shop", &w, Some(&status(&w, &[Pending])));
        assert_eq!(turns.get(&0), Some(&want), "{what}");
    }
}

/// `runOn: OnePod` (§6.15, §6.20): the candidates are the pods someone vouches for, with the hook
/// pending and able to run it; an ordinal counts only for a StatefulSet's own pod.
#[test]
fn one_pod_candidates_are_vouched_pods_that_can_run_the_hook() {
    let migrate = |vouched: Value| {
        plan(
            "r1",
            vouched,
            &[json!({"name": "migrate", "source": "restorehook/migrate", "runOn": "OnePod"})],
        )
    };
    let sts = |name: &'static str| {
        vec![
            ("statefulset.kubernetes.io/pod-name", name),
            ("apps.kubernetes.io/pod-index", &name[name.len() - 1..]),
        ]
    };
    struct Pod {
        uid: &'static str,
        name: &'static str,
        labels: Vec<(&'static str, &'static str)>,
        vouched: Value,
        phase: HookPhase,
        standing: Option<Standing>,
        deleting: bool,
    }
    let pod = |uid, name, labels, vouched: Value| Pod {
        uid,
        name,
        labels,
        vouched,
        phase: HookPhase::Pending,
        standing: None,
        deleting: false,
    };
    let key = "r1/shop/restorehook/migrate#0";
    /// What, the pods, the candidates' uids, the chosen one.
    type Case = (
        &'static str,
        Vec<Pod>,
        Vec<&'static str>,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "the StatefulSet's pod 0, even before it is up",
            vec![
                pod("u1", "db-1", sts("db-1"), json!("velero")),
                pod("u0", "db-0", sts("db-0"), json!("velero")),
            ],
            vec!["u0", "u1"],
            Some("u0"),
        ),
        (
            "a pod-only user's pod with pod-index 0 is no candidate",
            vec![
                pod("u0", "db-0", sts("db-0"), json!("controller")),
                Pod {
                    standing: Some(Standing {
                        up: true,
                        able: true,
                    }),
                    ..pod(
                        "evil",
                        "evil-0",
                        vec![("apps.kubernetes.io/pod-index", "0")],
                        json!("nobody"),
                    )
                },
            ],
            vec!["u0"],
            Some("u0"),
        ),
        (
            "... nor when it copies a pod-name label: its creator vouches for nothing",
            vec![pod("evil", "db-0", sts("db-0"), json!("nobody"))],
            vec![],
            None,
        ),
        (
            "pod-index alone is no ordinal, even for a vouched pod: the oldest up runs it",
            vec![
                Pod {
                    standing: Some(Standing {
                        up: true,
                        able: true,
                    }),
                    ..pod(
                        "a",
                        "api-x",
                        vec![("apps.kubernetes.io/pod-index", "0")],
                        json!("creator"),
                    )
                },
                Pod {
                    standing: Some(Standing {
                        up: true,
                        able: true,
                    }),
                    ..pod("b", "api-y", vec![], json!("controller"))
                },
            ],
            vec!["a", "b"],
            Some("a"),
        ),
        (
            "a pod that can no longer run it, deleting, or where it ended is out",
            vec![
                Pod {
                    standing: Some(Standing {
                        up: false,
                        able: false,
                    }),
                    ..pod("u0", "db-0", sts("db-0"), json!("velero"))
                },
                Pod {
                    deleting: true,
                    ..pod("u1", "db-1", sts("db-1"), json!("velero"))
                },
                Pod {
                    phase: HookPhase::OtherPod,
                    ..pod("u2", "db-2", sts("db-2"), json!("velero"))
                },
                pod("u3", "db-3", sts("db-3"), json!("velero")),
            ],
            vec!["u3"],
            Some("u3"),
        ),
    ];
    for (what, pods, want, chosen) in cases {
        let mut index = RestoreIndex::new();
        for (i, p) in pods.into_iter().enumerate() {
            let mut m = marked("shop", p.name, &p.labels, i as i64);
            m.deleting = p.deleting;
            index.apply(p.uid, m, verified(migrate(p.vouched), &[p.phase]));
            if let Some(s) = p.standing {
                index.post_standing(p.uid, key, s);
            }
        }
        let candidates = index.one_pod_candidates(key);
        let mut uids: Vec<&str> = candidates.iter().map(|c| c.uid.as_str()).collect();
        uids.sort_unstable();
        assert_eq!(uids, want, "{what}");
        assert_eq!(
            choose(&candidates).map(|c| c.uid.as_str()),
            chosen,
            "{what}"
        );
    }
}

/// §8: the numbers of every status target follow the pods in and out; a deleted pod's final part
/// folds into `retired` once it is final.
#[test]
fn counts_follow_pods_and_fold_deleted_ones_once() {
    use HookPhase::{Failed, Pending, Succeeded};
    let p = plan("r1", json!("velero"), &[hook("a"), hook("a")]);
    let run = Target::RestoreRun {
        restore: "r1".into(),
    };
    let object = Target::RestoreHook {
        namespace: "shop".into(),
        name: "a".into(),
    };
    let mut index = RestoreIndex::new();
    let counts = |index: &RestoreIndex, t: &Target| {
        let t = index.totals(t, HookCounts::default()).unwrap();
        (
            t.counts.succeeded,
            t.counts.failed,
            t.counts.pending,
            t.planned,
        )
    };
    index.apply(
        "u0",
        marked("shop", "db-0", &[], 0),
        verified(p.clone(), &[Succeeded, Pending]),
    );
    index.apply(
        "u1",
        marked("shop", "db-1", &[], 1),
        verified(p.clone(), &[Failed, Pending]),
    );
    assert_eq!(
        index.take_dirty().len(),
        2,
        "the RestoreRun and the RestoreHook"
    );
    assert_eq!(counts(&index, &run), (1, 1, 2, 2));
    assert_eq!(counts(&index, &object), (1, 1, 2, 2));
    let failed: Vec<String> = index
        .sum(&run)
        .unwrap()
        .failed_pods()
        .map(|f| format!("{}/{}", f.namespace, f.pod))
        .collect();
    assert_eq!(failed, ["shop/db-1"]);

    // The same again changes nothing; a new phase moves one count.
    index.apply(
        "u0",
        marked("shop", "db-0", &[], 0),
        verified(p.clone(), &[Succeeded, Pending]),
    );
    assert!(index.take_dirty().is_empty());
    index.apply(
        "u0",
        marked("shop", "db-0", &[], 0),
        verified(p.clone(), &[Succeeded, Succeeded]),
    );
    assert_eq!(counts(&index, &run), (2, 1, 1, 2));

    // db-1 is deleted with a hook pending: its part stays live until the worker's last word.
    index.retire("u1");
    let t = index.totals(&run, HookCounts::default()).unwrap();
    assert_eq!((t.counts.pending, t.retired.failed), (1, 0));
    index.last_word("u1", "shop", &p, &status(&p, &[Failed, Failed]));
    let t = index.totals(&run, HookCounts::default()).unwrap();
    assert_eq!(
        (
            t.counts.succeeded,
            t.counts.failed,
            t.counts.pending,
            t.retired.failed
        ),
        (2, 2, 0, 2)
    );
    index.folded(&run, &t.folded);
    let t = index.totals(&run, t.retired).unwrap();
    assert_eq!(
        (t.counts.failed, t.retired.failed, t.folded.len()),
        (2, 2, 0)
    );

    // A pod the controller finished, whose final state the watch never showed before it went
    // (a relist found it gone): the controller's own word settles it.
    index.apply(
        "u2",
        marked("shop", "db-2", &[], 2),
        verified(p.clone(), &[Pending, Pending]),
    );
    index.finished("u2", "shop", &p, &status(&p, &[Succeeded, Succeeded]));
    index.retire("u2");
    let t = index.totals(&run, t.retired).unwrap();
    assert_eq!(
        (t.counts.pending, t.retired.succeeded, t.folded.len()),
        (0, 2, 1),
        "retired with its final counts"
    );
    index.folded(&run, &t.folded);
    let retired = t.retired;
    // ... but not when its plan grew since it finished (late hooks): then it waits for the
    // worker's last word like any pod deleted with hooks pending.
    let mut grown = p.clone();
    grown.hooks.push(grown.hooks[0].clone());
    grown.hooks[2].index = 2;
    index.apply(
        "u3",
        marked("shop", "db-3", &[], 3),
        verified(p.clone(), &[Succeeded, Succeeded]),
    );
    index.finished("u3", "shop", &p, &status(&p, &[Succeeded, Succeeded]));
    index.apply(
        "u3",
        marked("shop", "db-3", &[], 3),
        verified(grown.clone(), &[Succeeded, Succeeded, Pending]),
    );
    index.retire("u3");
    let t = index.totals(&run, retired).unwrap();
    assert_eq!((t.counts.pending, t.folded.len()), (1, 0), "still pending");

    // A pod whose plan does not verify is a marked pod (a late-hook candidate), and counts for
    // nothing.
    index.apply("u9", marked("shop", "hand-made", &[], 2), None);
    assert_eq!(
        counts(&index, &run),
        (4, 0, 1, 2),
        "db-0 live, db-3 pending, db-2 retired"
    );
    let marked: Vec<&str> = {
        let mut m: Vec<&str> = index.pods().map(|(_, p)| p.name.as_str()).collect();
        m.sort_unstable();
        m
    };
    assert_eq!(marked, ["db-0", "hand-made"]);
}

/// Waking: a change wakes exactly the pods whose `after` or `OnePod` answer may have changed.
#[test]
fn a_change_wakes_only_the_pods_it_concerns() {
    use HookPhase::{Pending, Succeeded};
    let db = plan(
        "r1",
        json!("velero"),
        &[json!({"name": "db-restore", "source": "restorehook/db-restore"})],
    );
    let migrate = plan(
        "r1",
        json!("velero"),
        &[json!({"name": "migrate", "source": "restorehook/migrate", "runOn": "OnePod"})],
    );
    let mut index = RestoreIndex::new();
    index.apply(
        "w",
        marked("shop", "api-0", &[], 0),
        verified(waiter(), &[Pending]),
    );
    index.apply(
        "m1",
        marked("shop", "m-1", &[], 1),
        verified(migrate.clone(), &[Pending]),
    );
    index.apply(
        "m2",
        marked("shop", "m-2", &[], 2),
        verified(migrate.clone(), &[Pending]),
    );
    let listed = index.set_listed();
    let mut woken: Vec<String> = listed.wake.iter().map(|u| u.to_string()).collect();
    woken.sort();
    assert_eq!(woken, ["m1", "m2", "w"], "listing wakes every waiter");

    let first = index.apply(
        "d",
        marked("shop", "db-0", &[], 3),
        verified(db.clone(), &[Pending]),
    );
    assert!(first.first_sight);
    assert_eq!(first.wake.iter().map(|u| &**u).collect::<Vec<_>>(), ["w"]);
    let same = index.apply(
        "d",
        marked("shop", "db-0", &[], 3),
        verified(db.clone(), &[Pending]),
    );
    assert!(same.wake.is_empty() && !same.first_sight);
    let done = index.apply(
        "d",
        marked("shop", "db-0", &[], 3),
        verified(db, &[Succeeded]),
    );
    assert_eq!(done.wake.iter().map(|u| &**u).collect::<Vec<_>>(), ["w"]);
    // Another namespace's pod of that name wakes nobody here.
    let elsewhere = index.apply(
        "x",
        marked("team-b", "db-x", &[], 4),
        verified(
            plan(
                "r1",
                json!("creator"),
                &[json!({"name": "db-restore", "source": "restorehook/db-restore"})],
            ),
            &[Succeeded],
        ),
    );
    assert!(elsewhere.wake.is_empty());

    // A OnePod candidate's news wakes the other candidates, not itself nor the waiter.
    let up = index.post_standing(
        "m1",
        "r1/shop/restorehook/migrate#0",
        Standing {
            up: true,
            able: true,
        },
    );
    assert_eq!(up.wake.iter().map(|u| &**u).collect::<Vec<_>>(), ["m2"]);
    let gone = index.retire("m2");
    assert_eq!(gone.wake.iter().map(|u| &**u).collect::<Vec<_>>(), ["m1"]);
    assert!(index.knows("m1") && !index.knows("m2"));
}

/// Late hooks (§7.2): the pods a hook object that arrives after them may extend are the marked
/// pods it selects, in its scope, that do not show it already; a pod of a namespace whose labels
/// are not known is looked at later.
#[test]
fn a_late_hook_object_may_extend_only_the_marked_pods_it_selects() {
    use restore_hooks_core::config::EngineConfig;
    use restore_hooks_core::hooks::compiled::compile_restore_hook;
    use restore_hooks_core::hooks::types::{Labels, RestoreHook};
    use restore_hooks_core::index::HookIndex;

    let object = compile_restore_hook(
        &serde_json::from_value::<RestoreHook>(json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "late", "namespace": "shop"},
            "spec": {"labelSelector": {"matchLabels": {"app": "db"}},
                     "postHooks": [{"exec": {"command": ["true"]}}]},
        }))
        .unwrap(),
    );
    let restored = [("velero.io/restore-name", "r1"), ("app", "db")];
    let mut index = RestoreIndex::new();
    let mut add = |uid: &str, ns: &str, labels: &[(&str, &str)], sources: &[&str]| {
        let mut pod = marked(ns, uid, labels, 0);
        pod.plan_sources = sources.iter().map(|s| Box::from(*s)).collect();
        index.apply(uid, pod, None);
    };
    add("selected", "shop", &restored, &[]);
    add("has-it", "shop", &restored, &["restorehook/late"]);
    add(
        "other-app",
        "shop",
        &[("velero.io/restore-name", "r1"), ("app", "web")],
        &[],
    );
    add("not-restored", "shop", &[("app", "db")], &[]);
    add("other-namespace", "team-b", &restored, &[]);
    add("unknown-namespace", "new", &restored, &[]);
    let known: std::collections::BTreeMap<String, Labels> = [
        ("shop".to_string(), Labels::new()),
        ("team-b".to_string(), Labels::new()),
    ]
    .into();
    let got = index.late_candidates(
        &object,
        |ns| known.get(ns),
        &HookIndex::new(),
        &EngineConfig::default(),
    );
    let uids: Vec<&str> = got.iter().map(|(uid, ..)| uid.as_str()).collect();
    assert_eq!(uids, ["selected"]);
}
