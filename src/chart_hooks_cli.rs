//! The Helm chart's hook commands, thin shells over one API request each:
//!
//! - `restore-hooks check-webhook` (`helm test`, templates/tests/): creates a restored pod with
//!   `dryRun=All` in a labelled restore namespace and checks that the installed webhook mutated it
//!   as docs/behaviour.md §4.5 says (the annotation init container injected, a signed plan, the
//!   restore-run label). A dry run goes through every admission webhook and is never stored
//!   (§4.8), so nothing is left behind. The pod is in scope by its namespace's label, not by
//!   Velero's pod label: on a pod carrying that label, the default `--velero-hooks defer` leaves
//!   the Velero annotation hook to Velero (§3.3) and the webhook would rightly inject nothing.
//! - `restore-hooks remove-webhook` (the chart's pre-delete hook): deletes the release's
//!   MutatingWebhookConfiguration before Helm deletes the Service and Deployments behind it, so an
//!   uninstall never leaves a `failurePolicy: Fail` webhook that nothing answers (docs/install.md
//!   "Uninstall").

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::Args;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use restore_hooks_core::hooks::annotations::{
    INIT_COMMAND, INIT_CONTAINER_IMAGE, INIT_CONTAINER_NAME,
};
use restore_hooks_core::hooks::plan::{INJECTED_ANNOTATION, PLAN_ANNOTATION, RESTORE_RUN_LABEL};
use restore_hooks_core::hooks::signing::PLAN_SIGNATURE_ANNOTATION;

use crate::cli::ClusterArgs;

/// `restore-hooks check-webhook`.
#[derive(Debug, Args)]
pub struct CheckWebhookArgs {
    /// Namespace to create the dry-run pod in: a restore namespace, labelled
    /// `<restore-namespace label>=<--restore>` (the chart's test namespace is), not one of the
    /// chart's excluded namespaces (which include the release's own), where this identity may
    /// create pods.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: String,
    /// Image of the dry-run pod and of its annotation init hook. Nothing is pulled: a dry-run pod
    /// is never stored, so no node runs it.
    #[arg(long, value_name = "IMAGE")]
    pub image: String,
    /// The restore the namespace's label names: the webhook writes it into the pod's
    /// `restore-hooks.dev/restore-run` label.
    #[arg(long, value_name = "NAME", default_value = CHECK_RESTORE)]
    pub restore: String,
    /// How to reach the API server.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The restore the chart's test namespace is labelled with (no Velero Restore of that name: the
/// label is in scope for as long as it is there, docs/behaviour.md §1.6).
pub const CHECK_RESTORE: &str = "restore-hooks-check-webhook";
/// Name of the annotation init container the webhook must inject.
pub const CHECK_INIT_CONTAINER: &str = "check-webhook-init";

/// The pod `check-webhook` creates with `dryRun=All`: a Velero annotation init hook (§2.1), which
/// needs no hook object and no exec rights, and a pod that passes Pod Security "restricted" itself
/// (the injected annotation container has no securityContext, as in Velero: §2.1). No restore
/// label: its namespace's label makes it a restored pod (§1.1, §3.3).
pub fn check_pod(args: &CheckWebhookArgs) -> Pod {
    let annotations = BTreeMap::from([
        (INIT_CONTAINER_IMAGE.to_string(), args.image.clone()),
        (
            INIT_CONTAINER_NAME.to_string(),
            CHECK_INIT_CONTAINER.to_string(),
        ),
        (
            INIT_COMMAND.to_string(),
            r#"["restore-hooks", "--version"]"#.to_string(),
        ),
    ]);
    Pod {
        metadata: ObjectMeta {
            generate_name: Some("restore-hooks-check-webhook-".into()),
            namespace: Some(args.namespace.clone()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            automount_service_account_token: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![Container {
                name: "app".into(),
                image: Some(args.image.clone()),
                args: Some(vec!["--version".into()]),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Capabilities::default()
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// What is missing from the API server's answer to the dry-run pod: empty when the webhook
/// mutated it as docs/behaviour.md §4.5 says.
pub fn missing_mutations(pod: &Pod, image: &str, restore: &str) -> Vec<String> {
    let mut missing = Vec::new();
    let inits = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    match inits.iter().find(|c| c.name == CHECK_INIT_CONTAINER) {
        None => missing.push(format!(
            "no init container {CHECK_INIT_CONTAINER} (init containers: {:?})",
            inits.iter().map(|c| c.name.as_str()).collect::<Vec<_>>()
        )),
        Some(c) if c.image.as_deref() != Some(image) => missing.push(format!(
            "init container {CHECK_INIT_CONTAINER} has image {:?}, want {image:?}",
            c.image
        )),
        Some(_) => {}
    }
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let injected = annotations.get(INJECTED_ANNOTATION).map(String::as_str);
    if !injected.is_some_and(|v| v.split(',').any(|n| n == CHECK_INIT_CONTAINER)) {
        missing.push(format!(
            "annotation {INJECTED_ANNOTATION} does not name {CHECK_INIT_CONTAINER} (it is {injected:?})"
        ));
    }
    for key in [PLAN_ANNOTATION, PLAN_SIGNATURE_ANNOTATION] {
        if annotations.get(key).is_none_or(String::is_empty) {
            missing.push(format!("no annotation {key}"));
        }
    }
    let run = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(RESTORE_RUN_LABEL));
    if run.map(String::as_str) != Some(restore) {
        missing.push(format!(
            "label {RESTORE_RUN_LABEL} is {run:?}, want {restore:?}"
        ));
    }
    missing
}

/// Exit codes: 0 the webhook mutated the dry-run pod; 1 the pod was admitted unmutated or
/// mutated wrongly; 2 the pod could not be created (no cluster, refused, denied).
pub fn run_check(args: &CheckWebhookArgs) -> ExitCode {
    const WHO: &str = "restore-hooks check-webhook";
    let pod = check_pod(args);
    let created = block_on(async {
        let client = args.cluster.client().await?;
        let pods: Api<Pod> = Api::namespaced(client, &args.namespace);
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        pods.create(&params, &pod).await.map_err(|e| {
            anyhow::anyhow!(
                "creating a dry-run pod in namespace {} failed: {}{}",
                args.namespace,
                why(&e),
                match status(&e) {
                    Some(403) =>
                        "; grant this identity `create pods` there (the chart's test Role)",
                    _ => "",
                }
            )
        })
    });
    let created = match created {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{WHO}: {e:#}");
            return ExitCode::from(2);
        }
    };
    let missing = missing_mutations(&created, &args.image, &args.restore);
    if missing.is_empty() {
        println!(
            "{WHO}: the webhook mutated a dry-run restored pod in namespace {}: init container \
             {CHECK_INIT_CONTAINER} injected, plan signed, {RESTORE_RUN_LABEL}={}",
            args.namespace, args.restore
        );
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "{WHO}: the dry-run pod in namespace {ns} came back without the webhook's changes:\n  - {}\n\
         The API server admitted it without calling the webhook. Check that namespace {ns} carries \
         the restore-namespace label (config.restoreNamespaceLabel) with the value {}, that the \
         MutatingWebhookConfiguration exists and its namespaceSelector does not exclude {ns}, that \
         its matchConditions do not drop this pod, and the webhook's log.",
        missing.join("\n  - "),
        args.restore,
        ns = args.namespace,
    );
    ExitCode::from(1)
}

/// `restore-hooks remove-webhook`.
#[derive(Debug, Args)]
pub struct RemoveWebhookArgs {
    /// Name of the MutatingWebhookConfiguration to delete.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Delete it only if its `app.kubernetes.io/instance` label is this release name: a
    /// configuration of another release of the same name is left alone.
    #[arg(long, value_name = "RELEASE")]
    pub instance: Option<String>,
    /// How to reach the API server.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Exit codes: 0 deleted or already gone; 1 it belongs to another release; 2 the API server
/// refused or could not be reached.
pub fn run_remove(args: &RemoveWebhookArgs) -> ExitCode {
    const WHO: &str = "restore-hooks remove-webhook";
    let result = block_on(async {
        let client = args.cluster.client().await?;
        let api: Api<MutatingWebhookConfiguration> = Api::all(client);
        let current = api.get_opt(&args.name).await.map_err(|e| {
            anyhow::anyhow!(
                "reading MutatingWebhookConfiguration {} failed: {}",
                args.name,
                why(&e)
            )
        })?;
        let Some(current) = current else {
            return Ok(Removal::Gone);
        };
        if let Some(want) = &args.instance {
            let have = current
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/instance"));
            if have != Some(want) {
                return Ok(Removal::Foreign(have.cloned()));
            }
        }
        match api.delete(&args.name, &DeleteParams::default()).await {
            Ok(_) => Ok(Removal::Deleted),
            Err(e) if status(&e) == Some(404) => Ok(Removal::Gone),
            Err(e) => Err(anyhow::anyhow!(
                "deleting MutatingWebhookConfiguration {} failed: {}",
                args.name,
                why(&e)
            )),
        }
    });
    match result {
        Ok(Removal::Deleted) => {
            println!(
                "{WHO}: deleted MutatingWebhookConfiguration {}: no pod is sent to this release's webhook any more",
                args.name
            );
            ExitCode::SUCCESS
        }
        Ok(Removal::Gone) => {
            println!(
                "{WHO}: MutatingWebhookConfiguration {} does not exist; nothing to do",
                args.name
            );
            ExitCode::SUCCESS
        }
        Ok(Removal::Foreign(have)) => {
            eprintln!(
                "{WHO}: MutatingWebhookConfiguration {} has app.kubernetes.io/instance={}, not {:?}: \
                 it is not this release's, left in place",
                args.name,
                have.as_deref().unwrap_or("<none>"),
                args.instance.as_deref().unwrap_or_default(),
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{WHO}: {e:#}");
            ExitCode::from(2)
        }
    }
}

enum Removal {
    Deleted,
    Gone,
    Foreign(Option<String>),
}

fn block_on<T>(f: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

fn status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Why a request failed, in the API server's words (an admission denial's message included).
fn why(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}
