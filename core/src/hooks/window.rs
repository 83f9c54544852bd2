//! Restore windows (docs/behaviour.md §1.6): when the namespaces a Velero Restore writes to are
//! restore namespaces, and what the controller does to their restore-namespace label.
//!
//! Velero creates a restored namespace without any label of its own, and the pods that the
//! restored Deployments, StatefulSets and operators then create carry no restore label either:
//! only the restore-namespace label brings them into scope, and the webhook configuration can only
//! select namespaces by label. So the leader writes that label on the namespaces a Restore in its
//! window writes to, and takes it off when the window is over; a label someone wrote by hand stops
//! counting once its Restore's window is over, and is reported until removed.
//!
//! Nothing here does I/O or reads a clock: `now` is an argument.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

use crate::hooks::patterns::{IncludesExcludes, PatternError};
use crate::hooks::restore_name::velero_label_value;
use crate::hooks::types::VeleroRestore;

/// The annotation the leader writes next to the restore-namespace label it sets: the restore it
/// set the label for. A label without it (or naming another restore) was written by someone else,
/// and the leader never removes it.
pub const WINDOW_ANNOTATION: &str = "restore-hooks.dev/restore-window";

/// Velero's end phases: a Restore in any other phase is still running.
const END_PHASES: [&str; 4] = ["Completed", "PartiallyFailed", "Failed", "FailedValidation"];

/// What decides a Velero Restore's window: when it was created and ended, and which namespaces it
/// writes to.
#[derive(Clone, Debug)]
pub struct RestoreWindow {
    /// The Restore's name.
    pub name: String,
    /// The value Velero writes in the restore label of what it restores (`GetValidName`, §1.2).
    pub label_value: String,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// Ended (an end phase), and when: `status.completionTimestamp`, or the creation when Velero
    /// wrote none (`FailedValidation`).
    pub ended: Option<Timestamp>,
    /// Its namespace filter over the backup's namespaces; `Err` when a glob does not compile
    /// (Velero then restores nothing: the restore fails validation).
    pub namespaces: Result<IncludesExcludes, PatternError>,
    /// Literal `includedNamespaces` entries: namespaces it writes to before any of its pods is
    /// seen (names, not globs; `*` and an empty list name none).
    pub named: BTreeSet<String>,
    /// `spec.namespaceMapping`, source → target.
    pub mapping: BTreeMap<String, String>,
}

/// Where a Restore's window stands at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowState {
    /// The Restore is running, or ended less than the window ago.
    Open,
    /// The window closed at this moment.
    Closed(Timestamp),
}

impl RestoreWindow {
    /// The facts of one Velero Restore object.
    pub fn of(restore: &VeleroRestore) -> Self {
        let name = restore.metadata.name.clone().unwrap_or_default();
        let created = restore.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let status = restore.status.as_ref();
        let ended = status
            .and_then(|s| s.phase.as_deref())
            .filter(|p| END_PHASES.contains(p))
            .map(|_| {
                status
                    .and_then(|s| s.completion_timestamp.as_deref())
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .or(created)
                    .unwrap_or(Timestamp::UNIX_EPOCH)
            });
        let spec = &restore.spec;
        let named = spec
            .included_namespaces
            .iter()
            .filter(|n| is_literal(n))
            .cloned()
            .collect();
        Self {
            label_value: velero_label_value(&name).into_owned(),
            name,
            created,
            ended,
            namespaces: IncludesExcludes::compile(
                &spec.included_namespaces,
                &spec.excluded_namespaces,
            ),
            named,
            mapping: spec.namespace_mapping.clone(),
        }
    }

    /// Open while the Restore runs and for `window` after it ended.
    pub fn state(&self, window: SignedDuration, now: Timestamp) -> WindowState {
        match self.ended {
            None => WindowState::Open,
            Some(ended) => {
                let closes = ended.checked_add(window).unwrap_or(Timestamp::MAX);
                if now < closes {
                    WindowState::Open
                } else {
                    WindowState::Closed(closes)
                }
            }
        }
    }

    /// The backup namespaces whose objects land in `namespace` (the mapping reversed; a namespace
    /// mapped elsewhere no longer lands in its own name).
    fn sources<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a str> {
        let mapped_here = self
            .mapping
            .iter()
            .filter(move |(_, to)| to.as_str() == namespace)
            .map(|(from, _)| from.as_str());
        let own = (!self.mapping.contains_key(namespace)).then_some(namespace);
        mapped_here.chain(own)
    }

    /// Whether the Restore's namespace filter lets objects into `namespace`.
    pub fn may_write_to(&self, namespace: &str) -> bool {
        let Ok(filter) = &self.namespaces else {
            return false;
        };
        self.sources(namespace).any(|s| filter.should_include(s))
    }

    /// Whether the Restore names `namespace` (after the mapping) in `includedNamespaces`: it
    /// writes there whether or not the namespace exists already.
    pub fn names(&self, namespace: &str) -> bool {
        self.may_write_to(namespace) && self.sources(namespace).any(|s| self.named.contains(s))
    }
}

/// A namespace as the leader sees it.
#[derive(Clone, Copy, Debug)]
pub struct NamespaceView<'a> {
    /// Its name.
    pub name: &'a str,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// The value of its restore-namespace label, if any.
    pub label: Option<&'a str>,
    /// The value of [`WINDOW_ANNOTATION`], if any.
    pub window_of: Option<&'a str>,
}

/// What the leader does about one namespace's restore-namespace label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelAction {
    /// Nothing to do.
    Keep,
    /// Set the label (and [`WINDOW_ANNOTATION`]) to this restore: it is writing here.
    Open {
        /// The Velero Restore's full name: the annotation's value.
        restore: String,
        /// The label's value: the name as Velero writes it in labels (§1.2).
        label_value: String,
    },
    /// Remove the label and the annotation the leader set: the window is over and no pod of the
    /// restore here has a hook left to run.
    Close {
        /// The restore the annotation names.
        restore: String,
    },
    /// A label the leader did not set names a Velero Restore whose window is over: it no longer
    /// brings pods into scope, and whoever wrote it should remove it.
    Stale {
        /// The restore the label names.
        restore: String,
        /// When its window closed.
        closed: Timestamp,
    },
}

/// What the leader knows besides the namespace itself.
pub struct WindowFacts<'a> {
    /// Every Velero Restore in `--velero-namespace`.
    pub restores: &'a [RestoreWindow],
    /// `--restore-window`: how long after a Restore ended its namespaces stay restore namespaces.
    pub window: SignedDuration,
    /// Now.
    pub now: Timestamp,
    /// Restore label values of the pods Velero created here that the webhook admitted (their
    /// restore label): proof that the restore writes here.
    pub restored_here: &'a BTreeSet<String>,
    /// Whether a pod admitted here for the restore the label names still has a hook to run.
    pub hooks_pending: bool,
    /// The namespace is excluded (`--exclude-namespace`).
    pub excluded: bool,
}

/// The leader's decision for one namespace (docs/behaviour.md §1.6).
pub fn label_action(ns: &NamespaceView<'_>, facts: &WindowFacts<'_>) -> LabelAction {
    if facts.excluded {
        return LabelAction::Keep;
    }
    let find = |value: &str| {
        facts
            .restores
            .iter()
            .find(|r| r.name == value || r.label_value == value)
    };
    // The newest Restore in its window that writes here, if any.
    let writing = facts
        .restores
        .iter()
        .filter(|r| r.state(facts.window, facts.now) == WindowState::Open)
        .filter(|r| {
            r.names(ns.name)
                || (r.may_write_to(ns.name)
                    && (facts.restored_here.contains(&r.label_value)
                        || created_during(ns.created, r)))
        })
        .max_by_key(|r| (r.created, r.name.clone()));
    let open = |r: &RestoreWindow| LabelAction::Open {
        restore: r.name.clone(),
        label_value: r.label_value.clone(),
    };
    match (ns.label, ns.window_of) {
        (Some(label), Some(of)) if velero_label_value(of) == label => match writing {
            // A newer Restore writes here: its pods are its own. The pods of the one before
            // stay in scope (the label is still there, §6.2).
            Some(w) if w.name != of => open(w),
            Some(_) => LabelAction::Keep,
            // Ours, and no Restore writes here any more: off once nothing here is left to run
            // for it; taking it off earlier would stop those hooks (§6.2).
            None if facts.hooks_pending
                || find(of)
                    .is_some_and(|r| r.state(facts.window, facts.now) == WindowState::Open) =>
            {
                LabelAction::Keep
            }
            None => LabelAction::Close {
                restore: of.to_string(),
            },
        },
        (Some(label), _) if !label.is_empty() => match find(label) {
            Some(r) => match r.state(facts.window, facts.now) {
                WindowState::Closed(closed) => LabelAction::Stale {
                    restore: r.name.clone(),
                    closed,
                },
                WindowState::Open => LabelAction::Keep,
            },
            // Not a Velero Restore (another restore tool): its window is the label's own.
            None => LabelAction::Keep,
        },
        _ => writing.map_or(LabelAction::Keep, open),
    }
}

/// Whether the namespace was created while the Restore ran (Velero creates the namespaces it
/// restores into when they do not exist).
fn created_during(created: Option<Timestamp>, r: &RestoreWindow) -> bool {
    match (created, r.created) {
        (Some(ns), Some(restore)) => ns >= restore && r.ended.is_none_or(|end| ns <= end),
        _ => false,
    }
}

/// Whether a label naming `restore` brings a pod created at `now` into scope at admission: not
/// when it names a Velero Restore whose window is over (§1.6). `None`: it does.
pub fn closed_window(
    restore: Option<&RestoreWindow>,
    window: SignedDuration,
    now: Timestamp,
) -> Option<Timestamp> {
    match restore?.state(window, now) {
        WindowState::Closed(at) => Some(at),
        WindowState::Open => None,
    }
}

/// A name without glob syntax (Velero's globs: `*`, `?`, `[...]`, `{a,b}`).
fn is_literal(pattern: &str) -> bool {
    !pattern.is_empty() && !pattern.contains(['*', '?', '[', ']', '{', '}'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MIN: i64 = 60;

    fn at(minute: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + minute * MIN).unwrap()
    }

    /// A Velero Restore created at minute 0; `ended`: the minute it ended, if it did.
    fn restore(name: &str, spec: serde_json::Value, ended: Option<i64>) -> RestoreWindow {
        let status = match ended {
            Some(m) => json!({"phase": "Completed", "completionTimestamp": at(m).to_string()}),
            None => json!({"phase": "InProgress"}),
        };
        let r: VeleroRestore = serde_json::from_value(json!({
            "apiVersion": "velero.io/v1", "kind": "Restore",
            "metadata": {"name": name, "namespace": "velero",
                         "creationTimestamp": at(0).to_string()},
            "spec": spec, "status": status,
        }))
        .unwrap();
        RestoreWindow::of(&r)
    }

    #[test]
    fn a_window_is_open_while_the_restore_runs_and_for_the_window_after() {
        let w = SignedDuration::from_mins(30);
        let running = restore("r", json!({}), None);
        assert_eq!(running.state(w, at(600)), WindowState::Open);
        let ended = restore("r", json!({}), Some(10));
        assert_eq!(ended.state(w, at(39)), WindowState::Open);
        assert_eq!(ended.state(w, at(40)), WindowState::Closed(at(40)));
        assert_eq!(
            ended.state(SignedDuration::ZERO, at(10)),
            WindowState::Closed(at(10))
        );
        // FailedValidation writes no completion time: the window counts from the creation.
        let failed: VeleroRestore = serde_json::from_value(json!({
            "apiVersion": "velero.io/v1", "kind": "Restore",
            "metadata": {"name": "bad", "creationTimestamp": at(0).to_string()},
            "spec": {}, "status": {"phase": "FailedValidation"},
        }))
        .unwrap();
        assert_eq!(
            RestoreWindow::of(&failed).state(w, at(30)),
            WindowState::Closed(at(30))
        );
    }

    #[test]
    fn which_namespaces_a_restore_writes_to() {
        let plain = restore("r", json!({"includedNamespaces": ["shop"]}), None);
        assert!(plain.names("shop") && plain.may_write_to("shop"));
        assert!(!plain.may_write_to("other"));
        let mapped = restore(
            "r",
            json!({"includedNamespaces": ["shop", "b*"], "excludedNamespaces": ["bad"],
                   "namespaceMapping": {"shop": "shop-copy", "blog": "web"}}),
            None,
        );
        // shop is written to shop-copy, not shop; blog (a glob's match) to web.
        assert!(mapped.names("shop-copy"));
        assert!(!mapped.may_write_to("shop"));
        assert!(mapped.may_write_to("web") && !mapped.names("web"));
        assert!(mapped.may_write_to("bar") && !mapped.may_write_to("bad"));
        let all = restore("r", json!({"includedNamespaces": ["*"]}), None);
        assert!(all.may_write_to("anything") && !all.names("anything"));
        let everything = restore("r", json!({}), None);
        assert!(everything.may_write_to("anything") && everything.named.is_empty());
        let broken = restore("r", json!({"includedNamespaces": ["[a"]}), None);
        assert!(!broken.may_write_to("a"));
    }

    #[test]
    fn label_actions() {
        let w = SignedDuration::from_mins(30);
        let long = "a-restore-of-the-shop-namespace-with-a-name-longer-than-sixty-three-chars";
        let restores = vec![
            restore("named", json!({"includedNamespaces": ["shop"]}), None),
            restore("all", json!({}), None),
            restore("done", json!({"includedNamespaces": ["old"]}), Some(10)),
            restore(long, json!({"includedNamespaces": ["long"]}), None),
        ];
        let long_label = velero_label_value(long).into_owned();
        let none = BTreeSet::new();
        let velero_pods = BTreeSet::from(["all".to_string()]);
        let open = |r: &str, l: &str| LabelAction::Open {
            restore: r.into(),
            label_value: l.into(),
        };
        struct Case<'a> {
            what: &'a str,
            name: &'a str,
            created: Option<i64>,
            label: Option<&'a str>,
            window_of: Option<&'a str>,
            restored_here: &'a BTreeSet<String>,
            pending: bool,
            now: i64,
            want: LabelAction,
        }
        let cases = [
            Case {
                what: "named by a running restore",
                name: "shop",
                created: Some(-100),
                label: None,
                window_of: None,
                restored_here: &none,
                pending: false,
                now: 5,
                want: open("named", "named"),
            },
            Case {
                what: "a long name: the label holds Velero's label form, the annotation the name",
                name: "long",
                created: Some(-100),
                label: None,
                window_of: None,
                restored_here: &none,
                pending: false,
                now: 5,
                want: open(long, &long_label),
            },
            Case {
                what: "an old namespace that no running restore names or restores pods into",
                name: "quiet",
                created: Some(-100),
                label: None,
                window_of: None,
                restored_here: &none,
                pending: false,
                now: 5,
                want: LabelAction::Keep,
            },
            Case {
                what: "created while an include-all restore runs",
                name: "new",
                created: Some(1),
                label: None,
                window_of: None,
                restored_here: &none,
                pending: false,
                now: 5,
                want: open("all", "all"),
            },
            Case {
                what: "an old namespace Velero restores pods into",
                name: "existing",
                created: Some(-100),
                label: None,
                window_of: None,
                restored_here: &velero_pods,
                pending: false,
                now: 5,
                want: open("all", "all"),
            },
            Case {
                what: "a restore whose window closed opens nothing",
                name: "old",
                created: Some(-100),
                label: None,
                window_of: None,
                restored_here: &none,
                pending: false,
                now: 45,
                want: LabelAction::Keep,
            },
            Case {
                what: "ours, the window over, nothing left to run: removed",
                name: "old",
                created: Some(-100),
                label: Some("done"),
                window_of: Some("done"),
                restored_here: &none,
                pending: false,
                now: 45,
                want: LabelAction::Close {
                    restore: "done".into(),
                },
            },
            Case {
                what: "ours, the window over, a hook still pending: kept",
                name: "old",
                created: Some(-100),
                label: Some("done"),
                window_of: Some("done"),
                restored_here: &none,
                pending: true,
                now: 45,
                want: LabelAction::Keep,
            },
            Case {
                what: "ours, the window open: kept",
                name: "old",
                created: Some(-100),
                label: Some("done"),
                window_of: Some("done"),
                restored_here: &none,
                pending: false,
                now: 20,
                want: LabelAction::Keep,
            },
            Case {
                what: "ours for a restore since deleted: removed",
                name: "gone",
                created: Some(-100),
                label: Some("deleted"),
                window_of: Some("deleted"),
                restored_here: &none,
                pending: false,
                now: 5,
                want: LabelAction::Close {
                    restore: "deleted".into(),
                },
            },
            Case {
                what: "ours for an older restore, a newer one writes here: moved to it",
                name: "shop",
                created: Some(-100),
                label: Some("done"),
                window_of: Some("done"),
                restored_here: &none,
                pending: true,
                now: 5,
                want: open("named", "named"),
            },
            Case {
                what: "a hand label of a Velero Restore whose window is over: stale",
                name: "old",
                created: Some(-100),
                label: Some("done"),
                window_of: None,
                restored_here: &none,
                pending: false,
                now: 45,
                want: LabelAction::Stale {
                    restore: "done".into(),
                    closed: at(40),
                },
            },
            Case {
                what: "a hand label the annotation does not match is a hand label",
                name: "old",
                created: Some(-100),
                label: Some("done"),
                window_of: Some("named"),
                restored_here: &none,
                pending: false,
                now: 45,
                want: LabelAction::Stale {
                    restore: "done".into(),
                    closed: at(40),
                },
            },
            Case {
                what: "a hand label of a Velero Restore in its window",
                name: "old",
                created: Some(-100),
                label: Some("done"),
                window_of: None,
                restored_here: &none,
                pending: false,
                now: 20,
                want: LabelAction::Keep,
            },
            Case {
                what: "a hand label naming no Velero Restore (another tool): its own window",
                name: "quiet",
                created: Some(-100),
                label: Some("other-tool"),
                window_of: None,
                restored_here: &none,
                pending: false,
                now: 45,
                want: LabelAction::Keep,
            },
        ];
        for c in cases {
            let ns = NamespaceView {
                name: c.name,
                created: c.created.map(at),
                label: c.label,
                window_of: c.window_of,
            };
            let facts = WindowFacts {
                restores: &restores,
                window: w,
                now: at(c.now),
                restored_here: c.restored_here,
                hooks_pending: c.pending,
                excluded: false,
            };
            assert_eq!(label_action(&ns, &facts), c.want, "{}", c.what);
            let excluded = WindowFacts {
                excluded: true,
                ..facts
            };
            assert_eq!(
                label_action(&ns, &excluded),
                LabelAction::Keep,
                "{}",
                c.what
            );
        }
    }

    #[test]
    fn admission_sees_a_closed_window_only_for_a_known_restore() {
        let w = SignedDuration::from_mins(30);
        let done = restore("done", json!({}), Some(10));
        assert_eq!(closed_window(Some(&done), w, at(39)), None);
        assert_eq!(closed_window(Some(&done), w, at(41)), Some(at(40)));
        assert_eq!(closed_window(None, w, at(1000)), None);
    }
}
