//! `restore-hooks describe RESTORE` (also `kubectl restore-hooks describe`): one restore's hooks,
//! like `velero restore describe` (docs/behaviour.md §8.4, docs/operations.md "Watching a
//! restore"). A thin shell: it reads, with the user's own credentials and read rights only, the
//! restore's RestoreRun, the pods carrying its `restore-hooks.dev/restore-run` label and the
//! Events of their namespaces; the report is built in core (`restore::report`).

use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, ObjectList, PartialObjectMeta};
use restore_hooks_core::hooks::plan::{
    EXEC_LABEL, PLAN_ANNOTATION, RESTORE_RUN_LABEL, STATUS_ANNOTATION,
};
use restore_hooks_core::hooks::restore_name::velero_label_value;
use restore_hooks_core::hooks::types::RestoreRun;
use restore_hooks_core::restore::report::{
    self, EventFacts, EventsShown, Input, PodFacts, event_namespaces, resolve_restore,
};
use restore_hooks_core::restore::tally::restore_run_name;

use crate::cli::{DescribeArgs, DescribeOutput, EventsArg};

/// Items per list request: a restore of thousands of pods is read in pages.
const PAGE: u32 = 500;

/// Exit codes: 0 the report was printed (whatever the restore's phase), 1 no such restore (no
/// RestoreRun, no pod with its label), 2 the cluster could not be read (no kubeconfig, the API
/// server unreachable, pods not listable).
pub fn run(args: &DescribeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("restore-hooks describe: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(describe(args)) {
        Ok(Some(report)) => {
            let text = match args.output {
                DescribeOutput::Text => report.text(),
                DescribeOutput::Json => {
                    serde_json::to_string_pretty(&report).expect("a report serialises") + "\n"
                }
                DescribeOutput::Yaml => {
                    yaml_serde::to_string(&report).expect("a report serialises")
                }
            };
            if std::io::stdout().lock().write_all(text.as_bytes()).is_err() {
                return ExitCode::from(2);
            }
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!(
                "restore-hooks describe: no restore {:?}: no RestoreRun of that name, and no pod \
                 carries {RESTORE_RUN_LABEL}={}",
                args.restore,
                velero_label_value(&args.restore)
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("restore-hooks describe: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The report of `args.restore`, or `None` when nothing is known of it.
pub async fn describe(args: &DescribeArgs) -> anyhow::Result<Option<report::Report>> {
    let client = args.cluster.client().await?;
    collect(&client, args).await
}

/// The report of `args.restore` read through `client` (the tests give theirs), or `None` when
/// nothing is known of it.
pub async fn collect(
    client: &kube::Client,
    args: &DescribeArgs,
) -> anyhow::Result<Option<report::Report>> {
    let mut notes = Vec::new();
    let mut run_error = None;
    let given = args.restore.as_str();
    // The name given may be the restore's full name, its RestoreRun's name (the same for every
    // valid object name) or its label value (a hashed long name, §1.2).
    let mut run = restore_run(client, &restore_run_name(given), &mut run_error).await?;
    let restore = run
        .as_ref()
        .map_or_else(|| given.to_string(), |r| r.spec.restore.clone());
    let label = velero_label_value(&restore).into_owned();
    let pods = list_pods(client, &label, &args.namespaces).await?;
    let restore = if run.is_some() {
        restore
    } else {
        let full = resolve_restore(&restore, &pods);
        if full != restore {
            run = restore_run(client, &restore_run_name(&full), &mut run_error).await?;
        }
        full
    };
    if run.is_none() && run_error.is_none() && pods.is_empty() {
        return Ok(None);
    }
    let shown = match args.events {
        EventsArg::All => EventsShown::All,
        EventsArg::Warning => EventsShown::Warnings,
        EventsArg::None => EventsShown::None,
    };
    let mut events = Vec::new();
    if shown != EventsShown::None {
        for namespace in event_namespaces(&restore, &pods) {
            match list_events(client, &namespace).await {
                Ok(mut listed) => events.append(&mut listed),
                Err(e) => notes.push(format!(
                    "the Events of namespace {namespace} are not shown: {}",
                    why(&e)
                )),
            }
        }
    }
    Ok(Some(report::build(Input {
        restore: &restore,
        run: run.as_ref(),
        run_error,
        pods: &pods,
        events: &events,
        events_shown: shown,
        namespaces: &args.namespaces,
        notes,
    })))
}

/// The RestoreRun `name`, `None` when there is none; one the user may not read is said in
/// `error`, not an error of the command (the pods still tell most of the story).
async fn restore_run(
    client: &kube::Client,
    name: &str,
    error: &mut Option<String>,
) -> anyhow::Result<Option<RestoreRun>> {
    let api: Api<RestoreRun> = Api::all(client.clone());
    match api.get_opt(name).await {
        Ok(run) => Ok(run),
        Err(e) if status(&e).is_some_and(|c| c == 403 || c == 404) => {
            // 404 here: the CRD is not installed.
            *error = Some(format!("RestoreRun {name}: {}", why(&e)));
            Ok(None)
        }
        Err(e) => Err(anyhow::anyhow!("cannot read RestoreRun {name}: {e}")),
    }
}

/// Every pod carrying `restore-hooks.dev/restore-run=<label>`, in `namespaces` (empty: all), as
/// the report reads them.
async fn list_pods(
    client: &kube::Client,
    label: &str,
    namespaces: &[String],
) -> anyhow::Result<Vec<PodFacts>> {
    let selector = format!("{RESTORE_RUN_LABEL}={label}");
    let apis: Vec<(String, Api<Pod>)> = if namespaces.is_empty() {
        vec![("every namespace".to_string(), Api::all(client.clone()))]
    } else {
        namespaces
            .iter()
            .map(|ns| {
                (
                    format!("namespace {ns}"),
                    Api::namespaced(client.clone(), ns),
                )
            })
            .collect()
    };
    let mut pods = Vec::new();
    for (where_, api) in apis {
        let mut token: Option<String> = None;
        loop {
            let mut params = ListParams::default().labels(&selector).limit(PAGE);
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            let page: ObjectList<PartialObjectMeta<Pod>> =
                api.list_metadata(&params).await.map_err(|e| {
                    anyhow::anyhow!(
                        "cannot list the pods with {selector} in {where_}: {}{}",
                        why(&e),
                        if status(&e) == Some(403) && namespaces.is_empty() {
                            "; describe needs list on pods in every namespace, or -n NAMESPACE \
                             for the namespaces you may list (docs/operations.md)"
                        } else {
                            ""
                        }
                    )
                })?;
            pods.extend(page.items.iter().map(pod_facts));
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                break;
            }
        }
    }
    Ok(pods)
}

fn pod_facts(pod: &PartialObjectMeta<Pod>) -> PodFacts {
    let meta = &pod.metadata;
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key)).cloned();
    PodFacts {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        created: meta
            .creation_timestamp
            .as_ref()
            .map(|t| restore_hooks_core::exec_step::timestamp(t.0)),
        deleting: meta.deletion_timestamp.is_some(),
        exec_label: meta
            .labels
            .as_ref()
            .and_then(|l| l.get(EXEC_LABEL))
            .cloned(),
        plan: annotation(PLAN_ANNOTATION),
        status: annotation(STATUS_ANNOTATION),
    }
}

/// Every Event of `namespace` (the report picks the ones about the restore).
async fn list_events(
    client: &kube::Client,
    namespace: &str,
) -> Result<Vec<EventFacts>, kube::Error> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    let mut seen = BTreeSet::new();
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = api.list(&params).await?;
        for e in &page.items {
            if e.metadata
                .uid
                .as_ref()
                .is_some_and(|u| !seen.insert(u.clone()))
            {
                continue;
            }
            out.push(event_facts(namespace, e));
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(out);
        }
    }
}

fn event_facts(namespace: &str, e: &Event) -> EventFacts {
    let at = |t: jiff::Timestamp| restore_hooks_core::exec_step::timestamp(t);
    let last_seen = e
        .last_timestamp
        .as_ref()
        .map(|t| at(t.0))
        .or_else(|| e.event_time.as_ref().map(|t| at(t.0)))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| at(t.0)));
    let object = &e.involved_object;
    EventFacts {
        namespace: namespace.to_string(),
        kind: object.kind.clone().unwrap_or_default(),
        name: object.name.clone().unwrap_or_default(),
        uid: object.uid.clone(),
        type_: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.message.clone().unwrap_or_default(),
        count: e.count.unwrap_or(1),
        component: e
            .reporting_component
            .clone()
            .filter(|c| !c.is_empty())
            .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
            .unwrap_or_default(),
        last_seen,
        event_time: e.event_time.as_ref().map(|t| t.0.to_string()),
    }
}

fn status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Why a request failed, in the API server's words.
fn why(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}
