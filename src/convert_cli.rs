//! `restore-hooks convert`: Velero's own restore hooks as RestoreHooks and ClusterRestoreHooks
//! (docs/behaviour.md §4.10). The conversion is `restore_hooks_core::convert`; this is its shell:
//! flags, files, standard streams and the exit code.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use restore_hooks_core::convert::{self, Document, Options};

/// `convert`: Velero's restore hooks (workload annotations, Restore `spec.hooks`) as hook objects.
#[derive(Clone, Debug, Args)]
pub struct ConvertArgs {
    /// Manifests (multi-document YAML or JSON, or a List such as `kubectl get -o yaml` prints):
    /// workloads (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) whose pod
    /// template carries Velero restore-hook annotations, and Velero Restores with spec.hooks.
    /// Other objects are ignored. `-` reads standard input. Repeatable.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Namespace of the objects whose manifests name none. Without it, the RestoreHook of such a
    /// workload names no namespace either, and goes where it is applied (kubectl apply -n).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The restores (globs on the restore name) every written hook object applies to. Default:
    /// every restore for workload annotations (Velero runs them in every restore of the pod), and
    /// the Restore's own name for a Restore's hooks (they were that restore's). Repeatable.
    #[arg(long = "restores", value_name = "GLOB")]
    pub restores: Vec<String>,
    /// Also write each converted workload without its Velero restore-hook annotations and each
    /// converted Restore without spec.hooks, after the hook objects: what to apply so that Velero
    /// stops running the hooks restore-hooks now runs. Objects that were not converted are never
    /// written.
    #[arg(long)]
    pub strip_velero_hooks: bool,
}

/// Exit codes: 0 every object converted (notes on stderr), 1 some objects were not converted
/// (each error on stderr; nothing is written for them, everything else is), 2 unusable input
/// (nothing is written).
pub fn run(args: &ConvertArgs) -> ExitCode {
    match convert_files(args) {
        Ok(conversion) => {
            for finding in &conversion.findings {
                eprintln!("{finding}");
            }
            let mut stdout = std::io::stdout().lock();
            if stdout.write_all(conversion.to_yaml().as_bytes()).is_err() || stdout.flush().is_err()
            {
                return ExitCode::from(2);
            }
            if conversion.not_converted > 0 {
                eprintln!(
                    "restore-hooks convert: {} object(s) not converted (errors above): nothing was \
                     written for them, and Velero keeps running their hooks",
                    conversion.not_converted
                );
                return ExitCode::from(1);
            }
            if conversion.objects.is_empty() {
                eprintln!(
                    "restore-hooks convert: nothing to convert: no workload with Velero \
                     restore-hook annotations in its pod template, no Velero Restore with \
                     spec.hooks"
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("restore-hooks convert: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Reads every `-f` input and converts them together (the checks across objects need them all).
pub fn convert_files(args: &ConvertArgs) -> anyhow::Result<convert::Conversion> {
    let mut documents: Vec<Document> = Vec::new();
    let mut stdin_read = false;
    for file in &args.files {
        let (label, text) = if file == Path::new("-") {
            anyhow::ensure!(
                !stdin_read,
                "-f - is given twice: standard input can be read once"
            );
            stdin_read = true;
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| anyhow::anyhow!("cannot read standard input: {e}"))?;
            ("-".to_string(), text)
        } else {
            let text = std::fs::read_to_string(file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
            (file.display().to_string(), text)
        };
        documents.extend(convert::read_documents(&label, &text)?);
    }
    let options = Options {
        namespace: args.namespace.clone(),
        restores: (!args.restores.is_empty()).then(|| args.restores.clone()),
        strip_velero_hooks: args.strip_velero_hooks,
    };
    Ok(convert::convert(&documents, &options)?)
}
