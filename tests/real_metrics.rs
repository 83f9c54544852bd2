//! The chart's Grafana dashboard and alerts against a real Prometheus (v3, built from the pinned
//! module by e2e/realcp/build.sh) scraping the product on the real control plane (e2e/realcp).
//!
//! The chart is installed with its dashboard ConfigMap; the product runs as the chart runs it
//! (split: a webhook and a controller process, each under its ServiceAccount). Prometheus scrapes
//! both admin ports the way the chart's ServiceMonitor has prometheus-operator do it (job = the
//! Service's name, `namespace` and `pod` target labels) and loads the alerting rules the chart
//! renders. Then a restore: a pod admitted and patched, one of its hooks succeeding and one
//! failing, a pod denied for an invalid hook, and (the controller's ClusterRole lacking its Events
//! rule) 403s. Every query of the dashboard, read from the ConfigMap as Grafana's sidecar reads it,
//! with its template variables resolved as Grafana resolves them, must return data; the alerts
//! must load, evaluate without error, and those the restore calls for fire, no others.
//!
//! Waits are hang guards only: each waits for a state (a scrape that saw a value, an evaluation),
//! never a duration.

mod real;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use real::*;
use realcp::Prometheus;
use serde_json::{Value, json};

/// Scrape and rule-evaluation interval: short, so that the test waits little for either.
const SCRAPE: &str = "1s";
/// What `$__rate_interval` stands for. Grafana makes it at least four scrape intervals; longer
/// here, so that a scrape the loaded machine delayed still leaves two samples in a window.
const RATE_INTERVAL: &str = "15s";
/// The range queries' step (Grafana's `$__interval` for a short range).
const STEP: f64 = 1.0;

const GUARD: Duration = Duration::from_secs(120);

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The rendered Service whose selector picks the pods of Deployment `deployment`: the scrape job
/// prometheus-operator names after it.
fn job_of(install: &Install, deployment: &str) -> String {
    let pod_labels = &install.deployment(deployment)["spec"]["template"]["metadata"]["labels"];
    let jobs: Vec<String> = of_kind(&install.rendered, "Service")
        .into_iter()
        .filter(|s| {
            s["spec"]["selector"]
                .as_object()
                .is_some_and(|sel| sel.iter().all(|(k, v)| &pod_labels[k] == v))
        })
        .map(|s| s["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        jobs.len(),
        1,
        "Services selecting {deployment}'s pods: {jobs:?}"
    );
    jobs[0].clone()
}

/// A Grafana variable's values as Grafana computes them: `label_values(SELECTOR, LABEL)` is the
/// series API's values of LABEL over the series that SELECTOR matches.
fn label_values(prom: &Prometheus, query: &str, start: f64, end: f64) -> BTreeSet<String> {
    let inner = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("a variable query that is not label_values(...): {query}"));
    let (selector, label) = inner.rsplit_once(", ").unwrap();
    let data = prom
        .api(
            &format!("label/{label}/values"),
            &[
                ("match[]", selector),
                ("start", &start.to_string()),
                ("end", &end.to_string()),
            ],
        )
        .unwrap_or_else(|e| panic!("variable query {query}: {e:#}"));
    data.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Grafana's value of a multi-value or "All" variable in a Prometheus regex matcher:
/// `(a|b)`, each value regex-escaped.
fn regex_of(values: &BTreeSet<String>) -> String {
    let escaped: Vec<String> = values
        .iter()
        .map(|v| {
            v.chars()
                .flat_map(|c| {
                    let special = "\\^$.|?*+()[]{}".contains(c);
                    special.then_some('\\').into_iter().chain([c])
                })
                .collect()
        })
        .collect();
    format!("({})", escaped.join("|"))
}

/// One query of a panel, its variables substituted.
struct Query {
    panel: String,
    ref_id: String,
    instant: bool,
    expr: String,
    legend: String,
}

/// The dashboard's queries, panel by panel (rows' nested panels included).
fn queries(dashboard: &Value, vars: &BTreeMap<&str, String>) -> Vec<Query> {
    let mut panels: Vec<&Value> = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        panels.push(p);
        panels.extend(p["panels"].as_array().into_iter().flatten());
    }
    let mut out = Vec::new();
    for p in panels.into_iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap().to_string();
        let targets = p["targets"].as_array().unwrap_or_else(|| {
            panic!("panel {title:?} has no targets");
        });
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for t in targets {
            let mut expr = t["expr"].as_str().unwrap().to_string();
            // Longest names first: $__range is not a prefix of $__rate_interval, but be sure.
            let mut names: Vec<&&str> = vars.keys().collect();
            names.sort_by_key(|n| std::cmp::Reverse(n.len()));
            for name in names {
                expr = expr
                    .replace(&format!("${{{name}}}"), &vars[*name])
                    .replace(&format!("${name}"), &vars[*name]);
            }
            assert!(
                !expr.contains('$'),
                "panel {title:?}: a variable the test does not know in {expr}"
            );
            out.push(Query {
                panel: title.clone(),
                ref_id: t["refId"].as_str().unwrap_or_default().to_string(),
                instant: t["instant"] == true,
                expr,
                legend: t["legendFormat"].as_str().unwrap_or_default().to_string(),
            });
        }
    }
    out
}

/// The finite values of a query result (vector or matrix), by series labels.
fn values(data: &Value) -> BTreeMap<String, Vec<f64>> {
    let mut out = BTreeMap::new();
    for series in data["result"].as_array().unwrap() {
        let labels = series["metric"].to_string();
        let samples: Vec<&Value> = match data["resultType"].as_str() {
            Some("vector") => vec![&series["value"]],
            Some("matrix") => series["values"].as_array().unwrap().iter().collect(),
            other => panic!("result type {other:?}: {data}"),
        };
        let finite: Vec<f64> = samples
            .iter()
            .filter_map(|s| s[1].as_str().and_then(|v| v.parse::<f64>().ok()))
            .filter(|v| v.is_finite())
            .collect();
        out.insert(labels, finite);
    }
    out
}

/// Removes the controller's Events rule from its ClusterRole: its Events are refused (403),
/// which is best effort (src/controller/events.rs) and leaves the hooks alone.
fn without_events_rule(docs: &mut [Value]) {
    let role = find_mut(docs, "ClusterRole", RELEASE);
    let rules = role["rules"].as_array_mut().unwrap();
    let before = rules.len();
    rules.retain(|r| r["resources"] != json!(["events"]));
    assert_eq!(rules.len(), before - 1, "the controller's Events rule");
}

#[test]
fn every_dashboard_query_returns_data_and_the_alerts_evaluate_on_a_real_prometheus() {
    let install = Install::new(InstallOptions {
        helm_args: vec![
            "--set".into(),
            "metrics.grafanaDashboard.enabled=true".into(),
        ],
        edit: Some(Box::new(|docs: &mut Vec<Value>| without_events_rule(docs))),
        ..InstallOptions::default()
    });
    let cp = &install.cp;

    // The alerting rules the chart renders with metrics.prometheusRule.enabled (the PrometheusRule
    // itself needs prometheus-operator's CRD: it is not applied), as prometheus-operator hands
    // them to Prometheus.
    let rendered_rule = render(
        &install.certs.ca_bundle(),
        &server_version(cp),
        &["--set".into(), "metrics.prometheusRule.enabled=true".into()],
    )
    .into_iter()
    .find(|d| d.value["kind"] == "PrometheusRule")
    .expect("the render has a PrometheusRule")
    .value;
    let groups = rendered_rule["spec"]["groups"].clone();
    let rule_names: BTreeSet<String> = groups
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect();

    // The dashboard as Grafana's sidecar reads it: from the ConfigMap on the API server.
    let cm = get_json(
        cp,
        &[
            "get",
            "configmap",
            "restore-hooks-dashboard",
            "-n",
            NAMESPACE,
        ],
    )
    .expect("the dashboard ConfigMap is on the API server");
    let dashboard: Value = serde_json::from_str(cm["data"]["restore-hooks.json"].as_str().unwrap())
        .expect("the dashboard is JSON");

    let mut serve = install.start(0);
    serve.wait_leader(Duration::from_secs(60));
    // The 403s this test provokes.
    serve.controller_mut().expect_forbidden();

    // Prometheus, configured as prometheus-operator would from the chart's ServiceMonitor.
    let dir = cp.work_dir().join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let rules_file = dir.join("restore-hooks.rules.json");
    std::fs::write(&rules_file, json!({"groups": groups}).to_string()).unwrap();
    let targets: Vec<(String, String, u16)> = serve
        .procs
        .iter()
        .map(|p| {
            let deployment = if p.role == "webhook" {
                format!("{RELEASE}-webhook")
            } else {
                format!("{RELEASE}-controller")
            };
            (
                job_of(&install, &deployment),
                p.identity.clone(),
                p.admin_port,
            )
        })
        .collect();
    let jobs: BTreeSet<String> = targets.iter().map(|(j, _, _)| j.clone()).collect();
    assert_eq!(jobs.len(), 2, "a job per Deployment: {targets:?}");
    let scrape_configs: Vec<Value> = targets
        .iter()
        .map(|(job, pod, port)| {
            json!({
                "job_name": job,
                "static_configs": [{
                    "targets": [format!("127.0.0.1:{port}")],
                    "labels": {"namespace": NAMESPACE, "pod": pod},
                }],
            })
        })
        .collect();
    let config = json!({
        "global": {"scrape_interval": SCRAPE, "scrape_timeout": SCRAPE, "evaluation_interval": SCRAPE},
        "rule_files": [rules_file],
        "scrape_configs": scrape_configs,
    });
    // The dashboard's time range starts before Prometheus' first scrape.
    let started = now();
    let prom = Prometheus::start(&dir, &config.to_string()).unwrap_or_else(|e| panic!("{e:#}"));
    let instant = |expr: &str| -> f64 {
        let data = prom.query(expr, now()).unwrap_or_else(|e| panic!("{e:#}"));
        data["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    // Both targets scraped before anything happens: every counter's first sample is its 0.
    wait_until("Prometheus to scrape both processes", GUARD, || {
        let up = instant(&format!("count(up{{namespace=\"{NAMESPACE}\"}} == 1)"));
        (up == 2.0).then_some(()).ok_or(format!("{up} targets up"))
    });

    // The restore: hooks from a RestoreHook on a restored pod, one succeeds and one fails.
    namespace(cp, "shop", json!({NAMESPACE_LABEL: "r-metrics"}));
    let ok_mark = install.mark("metrics-ok");
    scenarios::apply_hooks(
        cp,
        &[json!({
            "apiVersion": "restore-hooks.dev/v1alpha1", "kind": "RestoreHook",
            "metadata": {"name": "hooks", "namespace": "shop"},
            "spec": {"postHooks": [
                {"exec": {"command": ["sh", "-c", mark_cmd(&ok_mark, "ok")]}},
                {"exec": {"command": ["sh", "-c", "echo broken >&2; exit 3"], "onError": "Continue"}},
            ]},
        })],
    );
    let created = create(cp, &pod("shop", "db-0", &["db"], json!({}), json!({})));
    assert_eq!(
        created["metadata"]["labels"][EXEC_LABEL], "pending",
        "{created}"
    );
    let ended = wait_hooks_ended(cp, "shop", "db-0", GUARD);
    let phases: Vec<Value> = scenarios::hooks_of(&ended)
        .iter()
        .map(|h| h["phase"].clone())
        .collect();
    assert_eq!(phases, [json!("Succeeded"), json!("Failed")], "{ended}");
    assert_eq!(mark_lines(&ok_mark).len(), 1);
    // A pod denied for an invalid hook annotation (created by an admin, not by Velero).
    let (admitted, stderr) = scenarios::kubectl_object(
        cp,
        &["create", "-f", "-"],
        &pod(
            "shop",
            "bad",
            &["app"],
            json!({}),
            json!({
                "post.hook.restore.velero.io/command": "[\"sh\", \"-c\", \"true\"]",
                "post.hook.restore.velero.io/on-error": "Sometimes",
            }),
        ),
    );
    assert!(
        !admitted && stderr.contains("denied the request"),
        "{stderr}"
    );
    // The controller's Events were refused: logged and counted as 403s on create events.
    let refusals = wait_until("the controller's refused Events", GUARD, || {
        let r = serve.controller().refusals();
        (!r.is_empty()).then_some(r).ok_or("none yet")
    });
    assert!(
        refusals.iter().all(|(v, r)| v == "create" && r == "events"),
        "refusals other than create events (the chart's RBAC lacks more than the test removed): \
         {refusals:?}"
    );

    // Prometheus has scraped the counters' final values.
    let want = [
        "sum(restore_hooks_exec_hooks_total{result=\"succeeded\"})",
        "sum(restore_hooks_exec_hooks_total{result=\"failed\"})",
        "sum(restore_hooks_admission_requests_total{outcome=\"patched\"})",
        "sum(restore_hooks_admission_requests_total{outcome=\"denied\"})",
        "sum(restore_hooks_api_forbidden_total)",
    ];
    for expr in want {
        wait_until(format!("Prometheus to scrape {expr} >= 1"), GUARD, || {
            let v = instant(expr);
            (v >= 1.0).then_some(()).ok_or(format!("{v}"))
        });
    }
    // A scrape after every hook ended: the gauges and histograms are at rest.
    let settled = now();
    wait_until("a scrape after the hooks ended", GUARD, || {
        let last = instant(&format!("min(timestamp(up{{namespace=\"{NAMESPACE}\"}}))"));
        (last > settled).then_some(()).ok_or(format!("{last}"))
    });
    let end = now();

    // The variables, as Grafana fills them in with "All" selected.
    let templating: BTreeMap<String, Value> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap().to_string(), v.clone()))
        .collect();
    let variable_query = |name: &str| {
        let v = &templating[name];
        v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .unwrap()
            .to_string()
    };
    let namespaces = label_values(&prom, &variable_query("namespace"), started, end);
    assert_eq!(namespaces, BTreeSet::from([NAMESPACE.to_string()]));
    let mut vars: BTreeMap<&str, String> = BTreeMap::new();
    vars.insert("namespace", regex_of(&namespaces));
    let job_query = variable_query("job").replace("$namespace", &vars["namespace"]);
    let job_values = label_values(&prom, &job_query, started, end);
    assert_eq!(job_values, jobs, "$job lists both Services' jobs");
    vars.insert("job", regex_of(&job_values));
    vars.insert("__rate_interval", RATE_INTERVAL.to_string());
    vars.insert("__range", format!("{}s", (end - started).ceil() as u64));

    // Every query returns data: at least one series with a finite value.
    let qs = queries(&dashboard, &vars);
    assert!(qs.len() >= 20, "{} queries", qs.len());
    let mut results: BTreeMap<(String, String), BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    for q in &qs {
        let data = if q.instant {
            prom.query(&q.expr, end)
        } else {
            prom.query_range(&q.expr, started, end, STEP)
        }
        .unwrap_or_else(|e| panic!("panel {:?} {}: {e:#}", q.panel, q.ref_id));
        let got = values(&data);
        assert!(
            got.values().any(|v| !v.is_empty()),
            "panel {:?} query {} ({}) returned no data: {}\n{data}",
            q.panel,
            q.ref_id,
            q.legend,
            q.expr
        );
        results.insert((q.panel.clone(), q.ref_id.clone()), got);
    }
    eprintln!(
        "real_metrics: {} queries of {} panels returned data",
        qs.len(),
        qs.iter().map(|q| &q.panel).collect::<BTreeSet<_>>().len()
    );

    // And show the restore: what it did is what the panels count.
    let max_of = |panel: &str, series: Option<&str>| -> f64 {
        let found: Vec<&BTreeMap<String, Vec<f64>>> = results
            .iter()
            .filter(|((p, _), _)| p == panel)
            .map(|(_, r)| r)
            .collect();
        assert!(!found.is_empty(), "no panel {panel:?} on the dashboard");
        found
            .iter()
            .flat_map(|r| r.iter())
            .filter(|(labels, _)| series.is_none_or(|s| labels.contains(s)))
            .flat_map(|(_, v)| v.iter().copied())
            .fold(f64::NAN, f64::max)
    };
    for (panel, series, at_least) in [
        ("Pods patched", None, 1.0),
        ("Pods denied", None, 1.0),
        ("Hooks succeeded", None, 1.0),
        ("Hooks failed", None, 1.0),
        ("Replicas holding the Lease", None, 1.0),
        ("Replicas up", None, 2.0),
        ("API requests refused (403)", None, 1.0),
        (
            "API requests refused (403), by verb and resource",
            Some("\"events\""),
            1.0,
        ),
        (
            "Admission requests by outcome",
            Some("\"patched\""),
            f64::MIN_POSITIVE,
        ),
        (
            "Admission requests by outcome",
            Some("\"denied\""),
            f64::MIN_POSITIVE,
        ),
        (
            "Exec hooks by result",
            Some("\"succeeded\""),
            f64::MIN_POSITIVE,
        ),
        (
            "Exec hooks by result",
            Some("\"failed\""),
            f64::MIN_POSITIVE,
        ),
        (
            "Lease holder",
            Some(serve.controller().identity.as_str()),
            1.0,
        ),
    ] {
        let got = max_of(panel, series);
        assert!(
            got >= at_least,
            "panel {panel:?} ({series:?}): at most {got}, want at least {at_least}"
        );
    }
    let expiry = max_of("Serving certificate expires in", None);
    assert!(expiry > 86400.0 * 30.0, "certificate expires in {expiry} s");

    // The alerts: every rule loaded and evaluated without an error...
    let rules = wait_until("every rule evaluated", GUARD, || {
        let data = prom.api("rules", &[]).unwrap_or_else(|e| panic!("{e:#}"));
        let rules: Vec<Value> = data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect();
        let unevaluated: Vec<&str> = rules
            .iter()
            .filter(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_none_or(|t| t.starts_with("0001-"))
            })
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        if unevaluated.is_empty() {
            Ok(rules)
        } else {
            Err(format!("not evaluated yet: {unevaluated:?}"))
        }
    });
    let loaded: BTreeSet<String> = rules
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(loaded, rule_names, "the rules Prometheus loaded");
    for r in &rules {
        assert!(
            r["health"] == "ok" && r["lastError"].as_str().unwrap_or_default().is_empty(),
            "rule {} does not evaluate: {} {}",
            r["name"],
            r["health"],
            r["lastError"]
        );
    }
    // ...those the restore calls for fire (none has a `for`), and nothing else is even pending.
    let should_fire = BTreeSet::from(
        [
            "RestoreHooksAdmissionDenied",
            "RestoreHooksExecHookFailures",
            "RestoreHooksApiForbidden",
        ]
        .map(String::from),
    );
    let alerts = wait_until("the restore's alerts to fire", GUARD, || {
        let data = prom.api("alerts", &[]).unwrap_or_else(|e| panic!("{e:#}"));
        let alerts = data["alerts"].as_array().unwrap().clone();
        let firing: BTreeSet<String> = alerts
            .iter()
            .filter(|a| a["state"] == "firing")
            .map(|a| a["labels"]["alertname"].as_str().unwrap().to_string())
            .collect();
        if should_fire.is_subset(&firing) {
            Ok(alerts)
        } else {
            Err(format!("firing: {firing:?}"))
        }
    });
    let active: BTreeSet<String> = alerts
        .iter()
        .map(|a| a["labels"]["alertname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(active, should_fire, "active alerts: {alerts:#?}");
    let forbidden = alerts
        .iter()
        .find(|a| a["labels"]["alertname"] == "RestoreHooksApiForbidden")
        .unwrap();
    assert_eq!(
        (
            &forbidden["labels"]["verb"],
            &forbidden["labels"]["resource"]
        ),
        (&json!("create"), &json!("events")),
        "{forbidden}"
    );
    assert_eq!(
        forbidden["labels"]["job"],
        json!(job_of(&install, &format!("{RELEASE}-controller")))
    );
    for a in &alerts {
        let annotations = a["annotations"].to_string();
        assert!(
            !annotations.contains("{{") && !annotations.contains("<no value>"),
            "alert {} has an annotation its template did not fill: {annotations}",
            a["labels"]["alertname"]
        );
    }
    eprintln!(
        "real_metrics: {} rules loaded and evaluated, firing {:?}",
        rules.len(),
        should_fire
    );
}
