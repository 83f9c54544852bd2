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

/// The answers the index keeps per change (§6.15, §6.16, §8) equal the ones computed from every
/// pod at once, after each step of a long sequence of changes (pods applied with new phases,
/// deleted, retired, their workers' news and departures), and a change wakes every pod whose
/// turn it changed.
#[test]
fn incremental_answers_equal_a_recomputation_from_every_pod() {
    use std::collections::{BTreeMap, BTreeSet};

    use HookPhase::{Failed, OtherPod, Pending, Running, Skipped, Succeeded};
    use restore_hooks_core::restore::after::{AwaitedRun, after_turn, show_awaited};
    use restore_hooks_core::restore::one_pod::{
        Candidate, OnePodTurn, one_pod_key, statefulset_ordinal, turn,
    };
    use restore_hooks_core::restore::tally::tally_pod;

    const PHASES: [HookPhase; 6] = [Pending, Running, Succeeded, Failed, Skipped, OtherPod];
    const PODS: u64 = 16;
    const STEPS: usize = 600;

    /// A small deterministic generator (splitmix64): the same sequence on every run.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % n
        }
    }

    struct Live {
        pod: MarkedPod,
        plan: ExecPlan,
        status: ExecStatus,
    }
    let uid = |i: u64| format!("u{i}");
    let namespace = |i: u64| if i % 5 == 4 { "team-b" } else { "shop" };
    let name = |i: u64| {
        if i.is_multiple_of(3) {
            format!("db-{i}")
        } else {
            format!("web-{i}")
        }
    };
    let pod_of = |i: u64, deleting: bool| {
        let n = name(i);
        let labels: Vec<(&str, &str)> = if i.is_multiple_of(3) {
            vec![("statefulset.kubernetes.io/pod-name", n.as_str())]
        } else {
            vec![]
        };
        let mut m = marked(namespace(i), &n, &labels, (i * 7 % 11) as i64);
        m.deleting = deleting;
        m
    };
    let plan_of = |vouched: bool, on_error: &str| {
        plan(
            "r1",
            json!(if vouched { "velero" } else { "nobody" }),
            &[
                json!({"name": "db", "source": "restorehook/db", "onError": on_error}),
                json!({"name": "migrate", "source": "restorehook/migrate", "runOn": "OnePod"}),
                json!({"name": "warm", "source": "restorehook/warm",
                       "after": [{"hook": "db", "kind": "RestoreHook", "namespace": "shop"}]}),
            ],
        )
    };
    let migrate_key = |ns: &str| {
        let p = plan_of(true, "Fail");
        one_pod_key("r1", ns, &p.hooks[1])
    };

    // Every answer the model gives, from all the pods at once.
    let after_of = |live: &BTreeMap<String, Live>, waiter: &Live| {
        let mut runs: Vec<(String, usize, AwaitedRun)> = live
            .values()
            .filter(|l| l.pod.namespace == "shop" && l.plan.is_vouched_for())
            .flat_map(|l| {
                let pod = format!("{}/{}", l.pod.namespace, l.pod.name);
                l.plan
                    .hooks
                    .iter()
                    .zip(&l.status.hooks)
                    .enumerate()
                    .filter(|(_, (h, _))| h.source == "restorehook/db")
                    .map(move |(position, (h, s))| {
                        let run = AwaitedRun {
                            pod: pod.clone(),
                            phase: s.phase,
                            on_error: h.on_error,
                        };
                        (pod.clone(), position, run)
                    })
            })
            .collect();
        runs.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        let runs: Vec<AwaitedRun> = runs.into_iter().map(|r| r.2).collect();
        let key = &waiter.plan.hooks[2].awaited(&waiter.pod.namespace)[0];
        let names = [show_awaited(key, &waiter.pod.namespace)];
        after_turn(&names, true, |_| &runs)
    };
    let candidates_of =
        |live: &BTreeMap<String, Live>, standing: &BTreeMap<String, Standing>, ns: &str| {
            live.iter()
                .filter(|(_, l)| {
                    l.pod.namespace == ns
                        && l.plan.is_vouched_for()
                        && l.status.hooks[1].phase == Pending
                        && !l.pod.deleting
                })
                .filter_map(|(u, l)| {
                    let s = standing.get(u).copied().unwrap_or_default();
                    s.able.then(|| Candidate {
                        uid: u.clone(),
                        pod: format!("{}/{}", l.pod.namespace, l.pod.name),
                        ordinal: statefulset_ordinal(&l.pod.labels, &l.pod.name),
                        created: l.pod.created,
                        up: s.up,
                    })
                })
                .collect::<Vec<_>>()
        };
    // Per pod: its `after` turn's kind and its `OnePod` turns, able and not.
    type Answers = BTreeMap<String, (Option<String>, Option<(OnePodTurn, OnePodTurn)>)>;
    let kind = |t: &AfterTurn| match t {
        AfterTurn::Go => "go",
        AfterTurn::Wait(_) => "wait",
        AfterTurn::Skip(_) => "skip",
    };
    let answers_from_scratch =
        |live: &BTreeMap<String, Live>, standing: &BTreeMap<String, Standing>| -> Answers {
            live.iter()
                .map(|(u, l)| {
                    let after = (l.status.hooks[2].phase == Pending)
                        .then(|| kind(&after_of(live, l)).to_string());
                    let one_pod = (l.status.hooks[1].phase == Pending).then(|| {
                        let all = candidates_of(live, standing, &l.pod.namespace);
                        (turn(u, None, &all, true), turn(u, None, &all, false))
                    });
                    (u.clone(), (after, one_pod))
                })
                .collect()
        };

    let mut rng = Rng(20261206);
    let mut index = RestoreIndex::new();
    index.set_listed();
    let mut live: BTreeMap<String, Live> = BTreeMap::new();
    let mut standing: BTreeMap<String, Standing> = BTreeMap::new();
    // The counts of the pods retired so far, by target.
    let mut gone: BTreeMap<Target, HookCounts> = BTreeMap::new();
    let targets = [
        Target::RestoreRun {
            restore: "r1".into(),
        },
        Target::RestoreHook {
            namespace: "shop".into(),
            name: "db".into(),
        },
        Target::RestoreHook {
            namespace: "shop".into(),
            name: "migrate".into(),
        },
    ];
    for step in 0..STEPS {
        let before = answers_from_scratch(&live, &standing);
        let i = rng.below(PODS);
        let u = uid(i);
        let action = rng.below(10);
        let changes = match action {
            0..=5 => {
                let p = plan_of(
                    rng.below(6) != 0,
                    if rng.below(2) == 0 {
                        "Fail"
                    } else {
                        "Continue"
                    },
                );
                let phases: Vec<HookPhase> = (0..3)
                    .map(|_| PHASES[rng.below(PHASES.len() as u64) as usize])
                    .collect();
                let s = status(&p, &phases);
                let pod = pod_of(i, rng.below(8) == 0);
                let changes = index.apply(&u, pod.clone(), verified(p.clone(), &phases));
                live.insert(
                    u.clone(),
                    Live {
                        pod,
                        plan: p,
                        status: s,
                    },
                );
                changes
            }
            6 | 7 => {
                let s = Standing {
                    up: rng.below(2) == 0,
                    able: rng.below(4) != 0,
                };
                standing.insert(u.clone(), s);
                index.post_standing(&u, &migrate_key(namespace(i)), s)
            }
            8 => {
                standing.remove(&u);
                index.leave(&u)
            }
            _ => {
                if let Some(l) = live.remove(&u) {
                    for (target, part) in tally_pod(&l.pod.namespace, &l.plan, Some(&l.status)) {
                        gone.entry(target).or_default().add(&part.counts);
                    }
                }
                index.retire(&u)
            }
        };

        // `after` and `OnePod`: the index's answers are those of every pod at once.
        for (u, l) in &live {
            if l.status.hooks[2].phase == Pending {
                let got = index.after_turns(&l.pod.namespace, &l.plan, Some(&l.status));
                assert_eq!(
                    got.get(&2),
                    Some(&after_of(&live, l)),
                    "step {step}: {u}'s after"
                );
            }
            if l.status.hooks[1].phase == Pending {
                let all = candidates_of(&live, &standing, &l.pod.namespace);
                let kept = index.one_pod_candidates(&migrate_key(&l.pod.namespace));
                for able in [true, false] {
                    assert_eq!(
                        turn(u, None, &kept, able),
                        turn(u, None, &all, able),
                        "step {step}: {u}'s OnePod turn (able: {able}), from {kept:?} and {all:?}"
                    );
                }
            }
        }
        // Whoever's turn changed was woken (the pod that changed runs anyway).
        let after = answers_from_scratch(&live, &standing);
        let woken: BTreeSet<&str> = changes.wake.iter().map(|u| &**u).collect();
        for (w, answer) in &after {
            if *w != u && before.get(w).is_some_and(|b| b != answer) {
                assert!(
                    woken.contains(w.as_str()),
                    "step {step}: {w}'s turn went from {:?} to {answer:?}, not woken ({woken:?})",
                    before[w]
                );
            }
        }
        // The counts: every live pod's part and every retired pod's last one.
        for target in &targets {
            let mut want = gone.get(target).copied().unwrap_or_default();
            let mut failed = Vec::new();
            for l in live.values() {
                if let Some(part) =
                    tally_pod(&l.pod.namespace, &l.plan, Some(&l.status)).remove(target)
                {
                    want.add(&part.counts);
                    if part.first_failure.is_some() {
                        failed.push((l.pod.namespace.clone(), l.pod.name.clone()));
                    }
                }
            }
            let got = index.totals(target, HookCounts::default());
            assert_eq!(
                got.map(|t| t.counts).unwrap_or_default(),
                want,
                "step {step}: {target:?}"
            );
            let listed: Vec<String> = index
                .sum(target)
                .map(|s| s.failed_pods().map(|f| f.pod.to_string()).collect())
                .unwrap_or_default();
            failed.sort();
            let failed: Vec<String> = failed.into_iter().map(|(_, name)| name).collect();
            assert_eq!(listed, failed, "step {step}: {target:?}'s failed pods");
        }
    }
}
