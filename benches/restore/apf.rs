//! API Priority and Fairness as a meter of the API server's time per identity: the API server
//! records `apiserver_flowcontrol_request_execution_seconds` by FlowSchema, so requests sent
//! through FlowSchemas of their own are timed apart.
//!
//! For each identity measured ([`Actor`]: the chart's ServiceAccounts, the actors of the pods'
//! lifecycle) and each FlowSchema that identity matches, a copy is created that matches only
//! that identity, with the same rules, priority level and distinguisher, at the same
//! precedence, named `0-bench-<actor>-<original>`. FlowSchemas are tried by precedence and then
//! by name, and `0-bench-` sorts before every name a cluster uses, so each request of the
//! identity matches the copy of the FlowSchema it matched before, and is served by the same
//! priority level: nothing changes in how it is queued, only the `flow_schema` it is counted
//! under.
//!
//! The one FlowSchema that cannot be copied is `exempt`: only it may have precedence 1, and it
//! comes first. It matches only the `system:masters` group, which here only the admin credential
//! carries (an actor of the pods' lifecycle), so that actor is counted under it as it is.
//!
//! Long-running requests (exec, the body of a watch) are not timed by priority and fairness:
//! what is compared is the API server's time on the identities' other requests.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};

use super::real::{self, ControlPlane};

const PREFIX: &str = "0-bench-";
const EXECUTION: &str = "apiserver_flowcontrol_request_execution_seconds";

/// An identity measured: the groups its requests carry (every subject of a FlowSchema is reduced
/// to these).
pub struct Actor {
    /// `chart`, `lifecycle`: the FlowSchemas' name part.
    pub name: &'static str,
    pub groups: Vec<String>,
}

impl Actor {
    fn prefix(&self) -> String {
        format!("{PREFIX}{}-", self.name)
    }
}

/// The FlowSchemas each actor's requests are counted under: by name, the actor's name and the
/// priority level.
pub struct Flows {
    pub schemas: BTreeMap<String, (&'static str, String)>,
}

/// Creates the copies of the cluster's FlowSchemas for `actors` and waits until the API server
/// has taken them in (each has a `Dangling` condition, set by its configuration controller).
pub fn install(cp: &ControlPlane, actors: &[Actor]) -> Flows {
    let list = real::get_json(cp, &["get", "flowschemas.flowcontrol.apiserver.k8s.io"])
        .expect("the cluster's FlowSchemas");
    let mut copies = Vec::new();
    let mut schemas: BTreeMap<String, (&'static str, String)> = BTreeMap::new();
    for schema in list["items"].as_array().into_iter().flatten() {
        let name = schema["metadata"]["name"].as_str().unwrap_or_default();
        if name.starts_with(PREFIX) {
            continue;
        }
        let level = schema["spec"]["priorityLevelConfiguration"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if schema["spec"]["matchingPrecedence"] == 1 {
            // `exempt`: counted as it is, by the actor that owns every group it matches.
            let subjects: BTreeSet<String> = schema["spec"]["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|r| r["subjects"].as_array().cloned().unwrap_or_default())
                .map(|s| match s["kind"].as_str() {
                    Some("Group") => s["group"]["name"].as_str().unwrap_or_default().to_string(),
                    _ => s.to_string(),
                })
                .collect();
            let owner = actors
                .iter()
                .find(|a| subjects.iter().all(|s| a.groups.contains(s)));
            let Some(owner) = owner else {
                panic!(
                    "FlowSchema {name} (precedence 1, cannot be copied) matches {subjects:?}: \
                     no measured identity owns all of them, so its time cannot be attributed"
                );
            };
            schemas.insert(name.to_string(), (owner.name, level));
            continue;
        }
        for actor in actors {
            let rules: Vec<Value> = schema["spec"]["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|rule| {
                    let subjects = covered(&rule["subjects"], &actor.groups);
                    (!subjects.is_empty()).then(|| {
                        let mut rule = rule.clone();
                        rule["subjects"] = Value::Array(subjects);
                        rule
                    })
                })
                .collect();
            if rules.is_empty() {
                continue;
            }
            let mut spec = json!({
                "matchingPrecedence": schema["spec"]["matchingPrecedence"],
                "priorityLevelConfiguration": schema["spec"]["priorityLevelConfiguration"],
                "rules": rules,
            });
            if !schema["spec"]["distinguisherMethod"].is_null() {
                spec["distinguisherMethod"] = schema["spec"]["distinguisherMethod"].clone();
            }
            schemas.insert(
                format!("{}{name}", actor.prefix()),
                (actor.name, level.clone()),
            );
            copies.push(json!({
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                "metadata": {"name": format!("{}{name}", actor.prefix())},
                "spec": spec,
            }));
        }
    }
    assert!(
        !copies.is_empty(),
        "no FlowSchema of the cluster matches the measured identities"
    );
    real::apply_list(cp, &copies);
    let names: Vec<String> = copies
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    real::wait_until(
        "the API server to take the bench's FlowSchemas in",
        Duration::from_secs(120),
        || -> Result<(), String> {
            let list = real::get_json(cp, &["get", "flowschemas.flowcontrol.apiserver.k8s.io"])
                .ok_or("no list")?;
            let taken: BTreeSet<&str> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| {
                    s["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Dangling"))
                })
                .filter_map(|s| s["metadata"]["name"].as_str())
                .collect();
            let missing: Vec<&String> = names
                .iter()
                .filter(|n| !taken.contains(n.as_str()))
                .collect();
            match missing.is_empty() {
                true => Ok(()),
                false => Err(format!("not yet: {missing:?}")),
            }
        },
    );
    Flows { schemas }
}

/// The subjects of `subjects` that `groups` fall under, each narrowed to those groups: a group
/// that contains them (`system:authenticated`, `system:serviceaccounts`, the group itself), or
/// ServiceAccounts of the namespace a `system:serviceaccounts:<namespace>` group stands for.
fn covered(subjects: &Value, groups: &[String]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut push = |v: Value| {
        if !out.contains(&v) {
            out.push(v);
        }
    };
    let group = |g: &str| json!({"kind": "Group", "group": {"name": g}});
    for subject in subjects.as_array().into_iter().flatten() {
        for ours in groups {
            let namespace = ours.strip_prefix("system:serviceaccounts:");
            match subject["kind"].as_str() {
                Some("Group") => {
                    let theirs = subject["group"]["name"].as_str().unwrap_or_default();
                    if theirs == ours
                        || theirs == "system:authenticated"
                        || (theirs == "system:serviceaccounts" && namespace.is_some())
                    {
                        push(group(ours));
                    }
                }
                Some("ServiceAccount") => {
                    let sa = &subject["serviceAccount"];
                    let (ns, name) = (
                        sa["namespace"].as_str().unwrap_or_default(),
                        sa["name"].as_str().unwrap_or_default(),
                    );
                    if let Some(namespace) = namespace.filter(|n| ns == "*" || ns == *n) {
                        push(match name {
                            "*" => group(ours),
                            name => json!({"kind": "ServiceAccount",
                                           "serviceAccount": {"namespace": namespace, "name": name}}),
                        });
                    }
                }
                Some("User") => {
                    let user = subject["user"]["name"].as_str().unwrap_or_default();
                    let sa_user = namespace.is_some_and(|n| {
                        user.strip_prefix("system:serviceaccount:")
                            .and_then(|u| u.split_once(':'))
                            .is_some_and(|(ns, _)| ns == n)
                    });
                    if user == "*" {
                        push(group(ours));
                    } else if sa_user {
                        push(subject.clone());
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// `apiserver_flowcontrol_request_execution_seconds` by FlowSchema: (seconds, requests), summed
/// over its other labels.
pub fn execution(metrics: &str) -> BTreeMap<String, (f64, f64)> {
    let mut by: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in metrics.lines() {
        let (sum, rest) = if let Some(rest) = line.strip_prefix(&format!("{EXECUTION}_sum{{")) {
            (true, rest)
        } else if let Some(rest) = line.strip_prefix(&format!("{EXECUTION}_count{{")) {
            (false, rest)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let (Some(schema), Ok(value)) = (
            super::parse_labels(labels).remove("flow_schema"),
            value.trim().parse::<f64>(),
        ) else {
            continue;
        };
        let e = by.entry(schema).or_default();
        if sum {
            e.0 += value;
        } else {
            e.1 += value;
        }
    }
    by
}

/// The API server's execution time of each actor's FlowSchemas between two scrapes.
pub struct Spent<'a> {
    /// (seconds, requests) by FlowSchema.
    pub per_schema: BTreeMap<String, (f64, f64)>,
    flows: &'a Flows,
}

impl<'a> Spent<'a> {
    pub fn between(before: &str, after: &str, flows: &'a Flows) -> Spent<'a> {
        let b = execution(before);
        let per_schema = execution(after)
            .into_iter()
            .filter(|(s, _)| flows.schemas.contains_key(s))
            .map(|(s, (sum, count))| {
                let (was_sum, was_count) = b.get(&s).copied().unwrap_or_default();
                (s, (sum - was_sum, count - was_count))
            })
            .collect();
        Spent { per_schema, flows }
    }

    /// (seconds, requests) of `actor`'s FlowSchemas.
    pub fn of(&self, actor: &Actor) -> (f64, f64) {
        self.per_schema
            .iter()
            .filter(|(s, _)| {
                self.flows
                    .schemas
                    .get(*s)
                    .is_some_and(|(a, _)| *a == actor.name)
            })
            .fold((0.0, 0.0), |(s, n), (_, (ds, dn))| (s + ds, n + dn))
    }

    /// The actor and priority level of FlowSchema `schema`.
    pub fn owner(&self, schema: &str) -> (&str, &str) {
        self.flows
            .schemas
            .get(schema)
            .map_or(("?", "?"), |(a, l)| (a, l.as_str()))
    }
}
