//! The operator's reference tables against the code: every registered metric and every value of
//! its fixed-value labels in docs/operations.md, every Event reason in docs/behaviour.md §6.12.
//! The lists come from the code (the registry, `metrics::LABEL_VALUES`, `events::REASONS`), so a
//! new metric, label value or reason without its row fails here.

use std::path::Path;

use restore_hooks::controller::events::REASONS;
use restore_hooks::metrics::{LABEL_VALUES, Metrics};
use restore_hooks::webhook::review::Outcome;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The table row (a line starting with `| ` then the backquoted key) for `key`.
fn row<'d>(doc: &'d str, key: &str) -> Option<&'d str> {
    let head = format!("| `{key}` |");
    doc.lines().find(|l| l.starts_with(&head))
}

#[test]
fn every_metric_and_label_value_has_its_row_in_operations_md() {
    let doc = read("docs/operations.md");
    let mut missing = Vec::new();
    let metrics = Metrics::new();
    assert!(metrics.names.len() >= 19, "{:?}", metrics.names);
    for name in metrics.names.iter() {
        if row(&doc, name).is_none() {
            missing.push(format!("a row for `{name}`"));
        }
    }
    for family in &metrics.registry.gather() {
        let name = family.name();
        let Some(row) = row(&doc, name) else {
            continue;
        };
        // Pre-created series carry every fixed label value.
        for metric in family.get_metric() {
            for label in metric.get_label() {
                if !row.contains(&format!("`{}`", label.value())) {
                    missing.push(format!("`{}` in the row of `{name}`", label.value()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/operations.md § Metrics lacks: {}",
        missing.join("; ")
    );
}

#[test]
fn every_label_value_the_code_writes_is_declared() {
    let declared: Vec<&str> = LABEL_VALUES
        .iter()
        .flat_map(|(_, values)| values.iter().copied())
        .collect();
    let admission = LABEL_VALUES
        .iter()
        .find(|(m, _)| *m == "restore_hooks_admission_requests_total")
        .expect("admission outcomes are declared")
        .1;
    for outcome in [
        Outcome::Unchanged,
        Outcome::Patched,
        Outcome::Warned,
        Outcome::Denied,
    ] {
        assert!(admission.contains(&outcome.as_label()), "{outcome:?}");
    }
    // Literal values at the call sites: `with_label_values(&["..."])`.
    let literal = regex::Regex::new(r#"with_label_values\(&\["([a-z_]+)"\]\)"#).unwrap();
    let mut found = 0;
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for c in literal.captures_iter(&text) {
                found += 1;
                assert!(
                    declared.contains(&&c[1]),
                    "{}: label value {:?} is not in metrics::LABEL_VALUES",
                    path.display(),
                    &c[1]
                );
            }
        }
    }
    assert!(found >= 5, "only {found} literal label values found");
}

#[test]
fn every_event_reason_has_its_row_in_behaviour_md() {
    let doc = read("docs/behaviour.md");
    let missing: Vec<&&str> = REASONS.iter().filter(|r| row(&doc, r).is_none()).collect();
    assert!(
        missing.is_empty(),
        "docs/behaviour.md §6.12 lacks rows for the Event reasons {missing:?}"
    );
}

/// docs/behaviour.md §8.4 documents the shape of `restore-hooks describe -o json`: every
/// top-level field has its row, and every field of a pod, of a pod's hook, of the timeline, of a
/// condition and of an Event is named in its row. The fields come from the report itself (each
/// is always present), so a new one without its documentation fails here.
#[test]
fn every_field_of_the_describe_report_is_in_behaviour_md() {
    use restore_hooks::restore::report::{EventLine, PodFacts, Report, build};
    use serde_json::Value;

    let doc = read("docs/behaviour.md");
    let start = doc.find("### 8.4 ").expect("docs/behaviour.md has §8.4");
    let end = start + doc[start..].find("\n## 9.").expect("§9 follows §8.4");
    let section = &doc[start..end];
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };

    // A pod with one hook, so that the report holds a pod and a hook entry.
    let plan = serde_json::json!({"restore": "r", "hooks": [{
        "name": "a", "source": "annotation", "index": 0, "container": "c", "command": ["true"],
        "onError": "Continue", "execTimeoutMs": 30000, "waitTimeoutMs": null, "waitForReady": false,
    }]});
    let pods = [PodFacts {
        namespace: "ns".into(),
        name: "p".into(),
        plan: Some(plan.to_string()),
        ..PodFacts::default()
    }];
    let report = serde_json::to_value(build(restore_hooks::restore::report::Input {
        restore: "r",
        pods: &pods,
        ..Default::default()
    }))
    .unwrap();
    let mut missing = Vec::new();
    for key in keys(&report) {
        if row(section, &key).is_none() {
            missing.push(format!("a row for `{key}`"));
        }
    }
    let nested = [
        ("pods", keys(&report["pods"][0])),
        ("pods[].hooks", keys(&report["pods"][0]["hooks"][0])),
        (
            "timeline",
            keys(&serde_json::to_value(Report::default().timeline).unwrap()),
        ),
        (
            "events",
            keys(&serde_json::to_value(EventLine::default()).unwrap()),
        ),
        (
            "conditions",
            keys(
                &serde_json::to_value(restore_hooks::restore::report::ConditionLine::default())
                    .unwrap(),
            ),
        ),
    ];
    for (parent, fields) in nested {
        let Some(line) = row(section, parent) else {
            missing.push(format!("a row for `{parent}`"));
            continue;
        };
        for field in fields {
            if !line.contains(&format!("`{field}`")) {
                missing.push(format!("`{field}` in the row of `{parent}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/behaviour.md §8.4 lacks: {}",
        missing.join("; ")
    );
}
