//! `restore-hooks inject`: the webhook's decision, offline (like `istioctl kube-inject`).

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;

use crate::admission::{Admission, ExecRight, Issuer, Requester, evaluate};
use crate::catalog::static_files::{DocumentDefaults, load_with_defaults};
use crate::cli::{InjectArgs, OutputFormat};
use crate::hooks::pod::AdmittedPod;
use crate::hooks::resolve::PodContext;

/// Exit codes: 0 admitted, 1 denied (the webhook's message on stderr), 2 unusable input.
pub fn run(args: &InjectArgs) -> ExitCode {
    match preview(args) {
        Ok(Preview {
            output,
            warnings,
            denied,
        }) => {
            for w in warnings {
                eprintln!("Warning: {w}");
            }
            if let Some(message) = denied {
                eprintln!("Error: admission webhook denied the pod: {message}");
                return ExitCode::from(1);
            }
            let mut stdout = std::io::stdout().lock();
            if stdout.write_all(output.as_bytes()).is_err() {
                return ExitCode::from(2);
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("restore-hooks inject: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// What `inject` prints: the output document, warnings, or the denial.
pub struct Preview {
    /// The mutated pod (`-o json|yaml`) or the JSON Patch (`-o patch`); empty when denied.
    pub output: String,
    /// The admission warnings the webhook would return.
    pub warnings: Vec<String>,
    /// The webhook's denial message, when it would deny the pod.
    pub denied: Option<String>,
}

/// Decides the pod in `args.file` (`-` for stdin) against the `--hooks` files as the webhook
/// would, without a cluster. The plan is signed only with `--plan-key-file`. An error is unusable
/// input (an unreadable file, a manifest that is not a Pod, a `--hooks` file that does not
/// parse), not a denial.
pub fn preview(args: &InjectArgs) -> anyhow::Result<Preview> {
    let text = read_input(&args.file)?;
    let pod: Value = yaml_serde::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not valid YAML or JSON: {e}", args.file.display()))?;
    let kind = pod.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "Pod" {
        anyhow::bail!(
            "{}: expected a Pod manifest (kind: Pod), got kind {kind:?}",
            args.file.display()
        );
    }
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .unwrap_or(&args.namespace)
        .to_string();
    let config = args.engine.engine_config();
    let defaults = DocumentDefaults {
        namespace: namespace.clone(),
        velero_namespace: config.velero_namespace.clone(),
    };
    let mut catalog = load_with_defaults(&args.hooks, &defaults)?;
    let namespace_labels = catalog.namespaces.entry(namespace.clone()).or_default();
    // The API server gives every namespace this label (ClusterRestoreHooks select by it, e.g.
    // those `restore-hooks convert` writes, docs/behaviour.md §4.9).
    namespace_labels
        .entry(restore_hooks_core::convert::NAMESPACE_NAME_LABEL.to_string())
        .or_insert_with(|| namespace.clone());
    namespace_labels.extend(args.namespace_labels.iter().cloned());
    if let Some(restore) = &args.restore {
        namespace_labels.insert(config.restore_namespace_label.clone(), restore.clone());
    }

    let keys = args
        .plan_key_file
        .as_deref()
        .map(|f| crate::plan_key::from_files(f, None))
        .transpose()?;
    let index = catalog.index();
    let text = pod.to_string();
    let view = AdmittedPod::from_json_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: the object is not a valid Pod: {e}",
            args.file.display()
        )
    })?;
    let ctx = PodContext {
        pod: &view,
        namespace: &namespace,
        namespace_labels: index.namespace_labels(&namespace),
    };
    let plan_id = crate::plan_key::new_plan_id()?;
    let issuer = Issuer {
        keys: keys.as_ref(),
        now: jiff::Timestamp::now(),
        plan_id: &plan_id,
    };
    let exec_right = if args.creator_cannot_exec {
        ExecRight::Denied
    } else {
        ExecRight::Granted
    };
    let requester = Requester {
        username: &args.creator,
        exec_right: &exec_right,
    };
    let decision = evaluate(&ctx, &index, &config, &issuer, &requester);
    let (patch, warnings) = match decision {
        Admission::Deny { message } => {
            return Ok(Preview {
                output: String::new(),
                warnings: vec![],
                denied: Some(message),
            });
        }
        Admission::Unchanged { warnings } => (json_patch::Patch(vec![]), warnings),
        Admission::Patch {
            patch, warnings, ..
        } => (patch, warnings),
    };
    let output = match args.output {
        OutputFormat::Patch => serde_json::to_string_pretty(&patch)? + "\n",
        OutputFormat::Json | OutputFormat::Yaml => {
            let mut mutated = pod;
            json_patch::patch(&mut mutated, &patch.0)
                .map_err(|e| anyhow::anyhow!("internal error: the patch does not apply: {e}"))?;
            if args.output == OutputFormat::Json {
                serde_json::to_string_pretty(&mutated)? + "\n"
            } else {
                yaml_serde::to_string(&mutated)?
            }
        }
    };
    Ok(Preview {
        output,
        warnings,
        denied: None,
    })
}

fn read_input(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| anyhow::anyhow!("cannot read the pod from standard input: {e}"))?;
        return Ok(text);
    }
    std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read pod manifest {}: {e}", path.display()))
}
