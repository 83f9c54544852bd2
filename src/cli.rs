//! Command line: one binary, several roles (docs/behaviour.md §12). Every server flag can also be given as
//! an environment variable `RESTORE_HOOKS_<FLAG>` (upper case, `-` as `_`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{
    DEFAULT_RESTORE_LABEL, DEFAULT_RESTORE_NAMESPACE_LABEL, DEFAULT_VELERO_NAMESPACE,
    DEFAULT_VELERO_SERVICE_ACCOUNT, EngineConfig, OnInvalid, VeleroHooksMode,
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
    /// Print the CustomResourceDefinitions (RestoreHook, ClusterRestoreHook, RestoreRun) as YAML.
    Crd,
    /// Run the whole flow on a built-in API-server simulator: no cluster needed.
    #[cfg(feature = "demo")]
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
    /// The ServiceAccount (in --velero-namespace) Velero runs as. Under `--velero-hooks own` the
    /// annotation exec hooks of pods it creates run, as Velero would run them. Any other pod's
    /// annotation exec hook runs only if its creator may create pods/exec in the pod's
    /// namespace, or a RestoreHook/ClusterRestoreHook with `podAnnotationHooks: Allow` selects it.
    #[arg(long, env = "RESTORE_HOOKS_VELERO_SERVICE_ACCOUNT", value_name = "NAME", default_value = DEFAULT_VELERO_SERVICE_ACCOUNT)]
    pub velero_service_account: String,
    /// Who runs hooks from Velero pod annotations and Restore objects: `defer` leaves them to
    /// Velero on pods Velero created; `own` runs them everywhere.
    #[arg(long, env = "RESTORE_HOOKS_VELERO_HOOKS", value_enum, default_value_t = VeleroHooksArg::Defer)]
    pub velero_hooks: VeleroHooksArg,
    /// What to do with invalid hook definitions: `deny` the pod, or `warn` and admit it without
    /// the invalid hook.
    #[arg(long, env = "RESTORE_HOOKS_ON_INVALID", value_enum, default_value_t = OnInvalidArg::Deny)]
    pub on_invalid: OnInvalidArg,
    /// Longest exec timeout a hook may have; longer ones are capped, with an admission warning
    /// (a running hook holds one of the controller's exec slots).
    #[arg(long, env = "RESTORE_HOOKS_MAX_EXEC_TIMEOUT", value_parser = duration, default_value = "4h")]
    pub max_exec_timeout: Duration,
    /// Namespaces whose pods are never mutated and never exec'd into, whatever they carry
    /// (the chart passes its own namespace, kube-system and kube-node-lease). Repeatable.
    #[arg(
        long = "exclude-namespace",
        env = "RESTORE_HOOKS_EXCLUDE_NAMESPACES",
        value_name = "NAMESPACE",
        value_delimiter = ','
    )]
    pub exclude_namespaces: Vec<String>,
}

/// `--velero-hooks`: the command-line face of [`VeleroHooksMode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum VeleroHooksArg {
    /// Pods Velero created (restore pod label) keep Velero's own hooks; only RestoreHook and
    /// ClusterRestoreHook hooks apply to them. Every other in-scope pod gets all four sources.
    #[default]
    Defer,
    /// All four sources for every in-scope pod: Velero without a hook engine, or another tool.
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
            velero_service_account: self.velero_service_account.clone(),
            velero_hooks: self.velero_hooks.into(),
            on_invalid: self.on_invalid.into(),
            max_exec_timeout_ms: u64::try_from(self.max_exec_timeout.as_millis())
                .unwrap_or(u64::MAX),
            excluded_namespaces: self.exclude_namespaces.clone(),
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
    /// This replica's name (the chart passes the pod name): the holder identity in the Lease
    /// and the key of this replica's entry in RestoreHook status. Default: the host name.
    #[arg(long, env = "RESTORE_HOOKS_IDENTITY")]
    pub identity: Option<String>,
    #[command(flatten)]
    pub plan_key: PlanKeyArgs,
}

/// Where the key that signs exec plans comes from (docs/behaviour.md §9.2).
#[derive(Clone, Debug, Args)]
pub struct PlanKeyArgs {
    /// Secret holding the plan key (data `current`, optional `previous`); created with a random
    /// key on first start if missing. Every replica must use the same Secret.
    #[arg(
        long,
        env = "RESTORE_HOOKS_PLAN_KEY_SECRET",
        default_value = "restore-hooks-plan-key"
    )]
    pub plan_key_secret: String,
    /// Namespace of that Secret. Default: the namespace this pod runs in (from its service
    /// account), else `default`.
    #[arg(long, env = "RESTORE_HOOKS_PLAN_KEY_NAMESPACE")]
    pub plan_key_namespace: Option<String>,
    /// Read the plan key from this file (raw bytes, at least 32) instead of a Secret: for
    /// `--no-cluster`, and for `inject` output a cluster's controller should accept.
    #[arg(long, env = "RESTORE_HOOKS_PLAN_KEY_FILE", value_name = "FILE")]
    pub plan_key_file: Option<PathBuf>,
    /// The previous key, when `--plan-key-file` is used during a rotation.
    #[arg(
        long,
        env = "RESTORE_HOOKS_PREVIOUS_PLAN_KEY_FILE",
        value_name = "FILE",
        requires = "plan_key_file"
    )]
    pub previous_plan_key_file: Option<PathBuf>,
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
    /// Hooks that run at the same time, over all pods (hooks of one container always run one
    /// at a time).
    #[arg(
        long,
        alias = "max-concurrent-pods",
        env = "RESTORE_HOOKS_MAX_CONCURRENT_EXECS",
        default_value_t = 16
    )]
    pub max_concurrent_execs: usize,
    /// Of those, how many one namespace may hold, so that one restore cannot starve the others.
    /// Default: three quarters of --max-concurrent-execs, at least 1.
    #[arg(long, env = "RESTORE_HOOKS_MAX_CONCURRENT_EXECS_PER_NAMESPACE")]
    pub max_concurrent_execs_per_namespace: Option<usize>,
    /// A hook found Running that this process did not start (a restart, a failover) counts as
    /// still running until its startedAt + execTimeout + this grace; then it is recorded as
    /// interrupted, and the container's next hook may start.
    #[arg(long, env = "RESTORE_HOOKS_INHERITED_EXEC_GRACE", value_parser = duration, default_value = "30s")]
    pub inherited_exec_grace: Duration,
    /// A RestoreHook or ClusterRestoreHook that arrives after a pod of its restore was admitted
    /// still adds its exec hooks to that pod if the pod is younger than this. 0 disables.
    #[arg(long, env = "RESTORE_HOOKS_LATE_HOOK_WINDOW", value_parser = duration, default_value = "30m")]
    pub late_hook_window: Duration,
    /// RestoreRun objects are deleted this long after their restore's hooks completed.
    #[arg(long, env = "RESTORE_HOOKS_RESTORE_RUN_RETENTION", value_parser = duration, default_value = "168h")]
    pub restore_run_retention: Duration,
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
    /// How long a Lease stays valid without renewal.
    #[arg(long, env = "RESTORE_HOOKS_LEASE_DURATION", value_parser = duration, default_value = "15s")]
    pub lease_duration: Duration,
}

impl ControllerArgs {
    /// `--max-concurrent-execs-per-namespace`, defaulted.
    pub fn per_namespace_execs(&self) -> usize {
        self.max_concurrent_execs_per_namespace
            .unwrap_or_else(|| (self.max_concurrent_execs * 3 / 4).max(1))
            .clamp(1, self.max_concurrent_execs.max(1))
    }
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
    /// Sign the plan with this installation's key (raw bytes, at least 32), so that a cluster's
    /// controller runs it. Without it the plan is unsigned: a preview only.
    #[arg(long, value_name = "FILE")]
    pub plan_key_file: Option<PathBuf>,
    /// The username that creates the pod (the webhook reads it from the admission request), e.g.
    /// system:serviceaccount:velero:velero for a pod Velero restores.
    #[arg(long, value_name = "USER", default_value = "")]
    pub creator: String,
    /// Preview as if the creator may NOT create pods/exec in the pod's namespace (the webhook
    /// asks the API server): the pod's annotation exec hook is then refused unless Velero created
    /// it under `--velero-hooks own` or a hook object with `podAnnotationHooks: Allow` selects it.
    /// Without this flag the creator is taken to have that right.
    #[arg(long)]
    pub creator_cannot_exec: bool,
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
