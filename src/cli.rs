//! Command line: one binary, several roles (product.md §6). Every server flag can also be given as
//! an environment variable `RESTORE_HOOKS_<FLAG>` (upper case, `-` as `_`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{
    DEFAULT_RESTORE_LABEL, DEFAULT_RESTORE_NAMESPACE_LABEL, DEFAULT_VELERO_NAMESPACE, EngineConfig,
    OnInvalid, VeleroHooksMode,
};
use crate::hooks::duration::parse_flag as duration;

#[derive(Debug, Parser)]
#[command(
    name = "restore-hooks",
    version,
    about = "Velero-style restore hooks for any Kubernetes restore",
    long_about = "Velero-style restore hooks for any Kubernetes restore.\n\n\
        A mutating admission webhook injects restore init containers into restored pods and \
        stamps them with an exec plan; a controller runs the post-restore exec hooks once each \
        target container is up, recording every outcome on the pod. Hooks come from Velero pod \
        annotations, Velero Restore objects and RestoreHook resources."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the webhook and the controller in one process (what the Helm chart deploys).
    Serve(ServeArgs),
    /// Run only the HTTPS admission webhook.
    Webhook(WebhookCommand),
    /// Run only the post-restore exec controller.
    Controller(ControllerCommand),
    /// Preview offline what the webhook does to a pod (like `istioctl kube-inject`).
    Inject(InjectArgs),
    /// Print the RestoreHook CustomResourceDefinition as YAML.
    Crd,
    /// Run the whole flow on a built-in API-server simulator: no cluster needed.
    Demo(DemoArgs),
}

/// Which pods are restored pods, and which hook sources apply to them.
#[derive(Clone, Debug, Args)]
pub struct EngineArgs {
    /// Pod label whose value names the restore (Velero sets it on every object it restores).
    #[arg(long, env = "RESTORE_HOOKS_RESTORE_LABEL", default_value = DEFAULT_RESTORE_LABEL)]
    pub restore_label: String,
    /// Namespace label whose value names the restore: every pod created in such a namespace is a
    /// restored pod (this catches replacement pods that controllers create after a restore).
    #[arg(long, env = "RESTORE_HOOKS_RESTORE_NAMESPACE_LABEL", default_value = DEFAULT_RESTORE_NAMESPACE_LABEL)]
    pub restore_namespace_label: String,
    /// Namespace holding Velero Restore objects.
    #[arg(long, env = "RESTORE_HOOKS_VELERO_NAMESPACE", default_value = DEFAULT_VELERO_NAMESPACE)]
    pub velero_namespace: String,
    /// Who runs hooks from Velero pod annotations and Restore objects: `defer` leaves them to
    /// Velero on pods Velero created; `own` runs them everywhere.
    #[arg(long, env = "RESTORE_HOOKS_VELERO_HOOKS", value_enum, default_value_t = VeleroHooksArg::Defer)]
    pub velero_hooks: VeleroHooksArg,
    /// What to do with invalid hook definitions: `deny` the pod, or `warn` and admit it without
    /// the invalid hook.
    #[arg(long, env = "RESTORE_HOOKS_ON_INVALID", value_enum, default_value_t = OnInvalidArg::Deny)]
    pub on_invalid: OnInvalidArg,
}

/// `--velero-hooks`: the command-line face of [`VeleroHooksMode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum VeleroHooksArg {
    /// Pods Velero created (restore pod label) keep Velero's own hooks; only RestoreHook hooks
    /// apply to them. Every other in-scope pod gets all three sources.
    #[default]
    Defer,
    /// All three sources for every in-scope pod: Velero without a hook engine, or another tool.
    Own,
}

impl From<VeleroHooksArg> for VeleroHooksMode {
    fn from(arg: VeleroHooksArg) -> Self {
        match arg {
            VeleroHooksArg::Defer => VeleroHooksMode::Defer,
            VeleroHooksArg::Own => VeleroHooksMode::Own,
        }
    }
}

/// `--on-invalid`: the command-line face of [`OnInvalid`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OnInvalidArg {
    /// Deny the pod with a message naming the pod, the hook source and the problem.
    #[default]
    Deny,
    /// Admit the pod without the invalid hooks, with an admission warning for each.
    Warn,
}

impl From<OnInvalidArg> for OnInvalid {
    fn from(arg: OnInvalidArg) -> Self {
        match arg {
            OnInvalidArg::Deny => OnInvalid::Deny,
            OnInvalidArg::Warn => OnInvalid::Warn,
        }
    }
}

impl EngineArgs {
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            restore_label: self.restore_label.clone(),
            restore_namespace_label: self.restore_namespace_label.clone(),
            velero_namespace: self.velero_namespace.clone(),
            velero_hooks: self.velero_hooks.into(),
            on_invalid: self.on_invalid.into(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (for log pipelines).
    #[default]
    Json,
    /// Human-readable lines.
    Text,
}

/// Logging, the admin port and cluster access: shared by every server role.
#[derive(Clone, Debug, Args)]
pub struct RuntimeArgs {
    /// Log line format.
    #[arg(long, env = "RESTORE_HOOKS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
    /// Log filter, in `RUST_LOG` syntax (e.g. `info,restore_hooks=debug`).
    #[arg(long, env = "RESTORE_HOOKS_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Plain-HTTP address for `/livez`, `/readyz` and `/metrics`.
    #[arg(
        long,
        env = "RESTORE_HOOKS_ADMIN_LISTEN",
        default_value = "0.0.0.0:8080"
    )]
    pub admin_listen: SocketAddr,
    /// Static hook documents (RestoreHook and/or Velero Restore; multi-document YAML or JSON),
    /// used in addition to those in the cluster. Repeatable.
    #[arg(
        long = "hooks",
        env = "RESTORE_HOOKS_HOOKS",
        value_name = "FILE",
        value_delimiter = ','
    )]
    pub hooks: Vec<PathBuf>,
    /// Do not talk to a Kubernetes API server: static `--hooks` only, restored pods recognised
    /// by the restore pod label only (webhook only).
    #[arg(long, env = "RESTORE_HOOKS_NO_CLUSTER")]
    pub no_cluster: bool,
}

/// The HTTPS admission server.
#[derive(Clone, Debug, Args)]
pub struct WebhookArgs {
    /// HTTPS address for `POST /mutate`.
    #[arg(long, env = "RESTORE_HOOKS_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Directory holding `tls.crt` (with chain) and `tls.key` (PKCS#8, PKCS#1 or SEC1): a mounted
    /// Secret. Reloaded without restart when its files change.
    #[arg(
        long,
        env = "RESTORE_HOOKS_TLS_DIR",
        default_value = "/etc/restore-hooks/tls"
    )]
    pub tls_dir: PathBuf,
    /// How often to look for a new certificate in `--tls-dir`.
    #[arg(long, env = "RESTORE_HOOKS_TLS_RELOAD_INTERVAL", value_parser = duration, default_value = "10s")]
    pub tls_reload_interval: Duration,
    /// After SIGTERM, keep serving (while reporting not ready) this long, so that endpoints
    /// stop routing to this replica before it closes its listener.
    #[arg(long, env = "RESTORE_HOOKS_SHUTDOWN_DELAY", value_parser = duration, default_value = "5s")]
    pub shutdown_delay: Duration,
    /// Then give in-flight requests this long to finish before connections are closed.
    #[arg(long, env = "RESTORE_HOOKS_SHUTDOWN_GRACE", value_parser = duration, default_value = "20s")]
    pub shutdown_grace: Duration,
}

/// The post-restore exec controller.
#[derive(Clone, Debug, Args)]
pub struct ControllerArgs {
    /// Pods whose hooks run at the same time (hooks of one pod always run one at a time).
    #[arg(long, env = "RESTORE_HOOKS_MAX_CONCURRENT_PODS", default_value_t = 16)]
    pub max_concurrent_pods: usize,
    /// Name of the coordination.k8s.io Lease that elects the replica allowed to exec.
    #[arg(
        long,
        env = "RESTORE_HOOKS_LEASE_NAME",
        default_value = "restore-hooks-controller"
    )]
    pub lease_name: String,
    /// Namespace of the Lease (the chart passes the release namespace).
    #[arg(long, env = "RESTORE_HOOKS_LEASE_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease (the chart passes the pod name).
    #[arg(long, env = "RESTORE_HOOKS_IDENTITY")]
    pub identity: Option<String>,
    /// How long a Lease stays valid without renewal.
    #[arg(long, env = "RESTORE_HOOKS_LEASE_DURATION", value_parser = duration, default_value = "15s")]
    pub lease_duration: Duration,
}

#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub webhook: WebhookArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

#[derive(Clone, Debug, Args)]
pub struct WebhookCommand {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

#[derive(Clone, Debug, Args)]
pub struct ControllerCommand {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The mutated pod as YAML.
    #[default]
    Yaml,
    /// The mutated pod as JSON.
    Json,
    /// The RFC 6902 JSON Patch the webhook would return.
    Patch,
}

#[derive(Clone, Debug, Args)]
pub struct InjectArgs {
    /// Pod manifest (YAML or JSON); `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "POD")]
    pub file: PathBuf,
    /// RestoreHook and/or Velero Restore documents (multi-document YAML or JSON). Repeatable.
    #[arg(long = "hooks", value_name = "FILE")]
    pub hooks: Vec<PathBuf>,
    /// Treat the pod as created in a restore namespace of restore NAME (as if its namespace
    /// carried the restore-namespace label). A restore pod label on the pod still names the restore.
    #[arg(long, value_name = "NAME")]
    pub restore: Option<String>,
    /// A label of the pod's namespace. Repeatable.
    #[arg(long = "namespace-label", value_name = "K=V", value_parser = parse_label)]
    pub namespace_labels: Vec<(String, String)>,
    /// Namespace of the pod when its manifest names none.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Output: the mutated pod (`yaml`, `json`) or the JSON Patch (`patch`).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
}

#[derive(Clone, Debug, Args)]
pub struct DemoArgs {
    /// Print every step, including the simulator's own log lines.
    #[arg(long)]
    pub verbose: bool,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_parse_with_defaults() {
        let cli = Cli::try_parse_from(["restore-hooks", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("expected serve")
        };
        assert_eq!(args.webhook.listen.to_string(), "0.0.0.0:8443");
        assert_eq!(args.runtime.admin_listen.to_string(), "0.0.0.0:8080");
        assert_eq!(args.webhook.tls_reload_interval, Duration::from_secs(10));
        assert_eq!(args.engine.engine_config(), EngineConfig::default());
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(Cli::try_parse_from(["restore-hooks", "serve", "--velero-hooks", "x"]).is_err());
        assert!(
            Cli::try_parse_from(["restore-hooks", "webhook", "--tls-reload-interval", "10"])
                .is_err()
        );
        assert!(
            Cli::try_parse_from([
                "restore-hooks",
                "inject",
                "-f",
                "p",
                "--namespace-label",
                "x"
            ])
            .is_err()
        );
    }
}
