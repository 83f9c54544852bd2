//! Command line: one binary, several roles (docs/behaviour.md §12). Every server flag can also be given as
//! an environment variable `RESTORE_HOOKS_<FLAG>` (upper case, `-` as `_`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};

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
        annotations, Velero Restore objects, ClusterRestoreHooks and RestoreHooks.\n\n\
        `restore-hooks describe RESTORE` shows one restore's hooks (as a kubectl plugin: \
        `kubectl restore-hooks describe RESTORE`)."
)]
/// The whole command line, as `main` parses it. `--help` shows the `about` and `long_about`
/// above, not this comment.
pub struct Cli {
    /// The role to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands: one per role, plus the offline tools. Each variant's doc comment is its
/// one-line `--help` summary.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the webhook and the controller in one process (the chart with `split.enabled=false`;
    /// by default the chart runs `webhook` and `controller` as two Deployments).
    Serve(ServeArgs),
    /// Run only the HTTPS admission webhook (the chart's webhook Deployment).
    Webhook(WebhookCommand),
    /// Run only the post-restore exec controller (the chart's controller Deployment).
    Controller(ControllerCommand),
    /// Preview offline what the webhook does to a pod (like `istioctl kube-inject`).
    Inject(InjectArgs),
    /// Show one restore's hooks, like `velero restore describe` (also `kubectl restore-hooks
    /// describe`).
    ///
    /// The phase and conditions, counts and timeline, every failed pod with its hook and
    /// message, refused, late and missed hooks, each pod's hooks with the output of those that
    /// failed, and the Events of the pods and their hook objects.
    Describe(DescribeArgs),
    /// Print the CustomResourceDefinitions (RestoreHook, ClusterRestoreHook, RestoreRun,
    /// RestoreRecord) as YAML.
    Crd,
    /// Write Velero's own restore hooks (workload annotations, Restore spec.hooks) as
    /// RestoreHooks and ClusterRestoreHooks, optionally with the workloads and Restores without
    /// them, so that restore-hooks runs them instead of Velero.
    Convert(crate::convert_cli::ConvertArgs),
    /// Check that the installed webhook mutates a restored pod: create one with dryRun=All and
    /// verify the answer (the Helm chart's `helm test`).
    ///
    /// The pod, in a namespace labelled as a restore namespace, carries a Velero annotation init
    /// hook; the check passes when the API server's answer has the injected init container, a
    /// signed plan and the restore-run label. A dry-run pod is never stored. Exit 0: mutated; 1:
    /// admitted without the webhook's changes; 2: the pod could not be created (refused, or denied
    /// because no webhook replica answered).
    CheckWebhook(crate::chart_hooks_cli::CheckWebhookArgs),
    /// Delete the release's MutatingWebhookConfiguration (the Helm chart's pre-delete hook), so
    /// that an uninstall never leaves a webhook behind that nothing answers.
    ///
    /// Exit 0: deleted, or already gone; 1: it belongs to another release (--instance); 2: the
    /// API server refused or could not be reached.
    RemoveWebhook(crate::chart_hooks_cli::RemoveWebhookArgs),
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
    /// Who runs the hooks of Velero pod annotations and Velero Restore objects. Velero always
    /// runs them on the pods it creates (it has no switch to turn them off); `restore-hooks
    /// convert` moves them into hook objects.
    // What each value does is said once, in `VeleroHooksMode::meaning` (docs/behaviour.md §3.3):
    // `--help` lists it under the values.
    #[arg(long, env = "RESTORE_HOOKS_VELERO_HOOKS", value_enum, default_value_t = VeleroHooksArg::Defer)]
    pub velero_hooks: VeleroHooksArg,
    /// What to do with a pod whose hook definitions are invalid.
    // What each value does is said once, in `OnInvalid::meaning` (docs/behaviour.md §3.6):
    // `--help` lists it under the values.
    #[arg(long, env = "RESTORE_HOOKS_ON_INVALID", value_enum, default_value_t = OnInvalidArg::Deny)]
    pub on_invalid: OnInvalidArg,
    /// Longest exec timeout a hook may have; longer ones are capped, with an admission warning
    /// (a running hook holds one of the controller's exec slots).
    #[arg(long, env = "RESTORE_HOOKS_MAX_EXEC_TIMEOUT", value_parser = duration, default_value = "4h")]
    pub max_exec_timeout: Duration,
    /// waitTimeout of an exec hook that sets none: a hook whose container is not up this long
    /// after the pod's creation is recorded Failed, with the reason, and not run, so every
    /// restore reaches an end. `0`: no limit (Velero's default). A hook's own `waitTimeout: 0`
    /// still means no limit.
    #[arg(long, env = "RESTORE_HOOKS_DEFAULT_WAIT_TIMEOUT", value_parser = duration, default_value = "1h")]
    pub default_wait_timeout: Duration,
    /// Namespaces whose pods are never mutated and never exec'd into, whatever they carry
    /// (the chart passes its own namespace, kube-system and kube-node-lease). Repeatable.
    #[arg(
        long = "exclude-namespace",
        env = "RESTORE_HOOKS_EXCLUDE_NAMESPACES",
        value_name = "NAMESPACE",
        value_delimiter = ','
    )]
    pub exclude_namespaces: Vec<String>,
    /// How long after a Velero Restore ended the namespaces it wrote to stay restore
    /// namespaces: their new pods get the restore's hooks while it runs and this long after.
    /// Past it, a restore-namespace label naming that Restore brings no pod into scope (the
    /// controller removes the labels it set itself and reports those it did not).
    #[arg(long, env = "RESTORE_HOOKS_RESTORE_WINDOW", value_parser = duration, default_value = "30m")]
    pub restore_window: Duration,
}

/// `--velero-hooks`: the command-line face of [`VeleroHooksMode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum VeleroHooksArg {
    /// [`VeleroHooksMode::Defer`].
    #[default]
    #[value(help = VeleroHooksMode::Defer.meaning())]
    Defer,
    /// [`VeleroHooksMode::Own`].
    #[value(help = VeleroHooksMode::Own.meaning())]
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
    /// [`OnInvalid::Deny`].
    #[default]
    #[value(help = OnInvalid::Deny.meaning())]
    Deny,
    /// [`OnInvalid::Warn`].
    #[value(help = OnInvalid::Warn.meaning())]
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
    /// The flags as the rules in core take them: durations in milliseconds (saturating at
    /// `u64::MAX`; `--default-wait-timeout 0` as no limit), the value enums converted to their
    /// core types.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            restore_label: self.restore_label.clone(),
            restore_namespace_label: self.restore_namespace_label.clone(),
            velero_namespace: self.velero_namespace.clone(),
            velero_service_account: self.velero_service_account.clone(),
            velero_hooks: self.velero_hooks.into(),
            on_invalid: self.on_invalid.into(),
            max_exec_timeout_ms: millis(self.max_exec_timeout),
            default_wait_timeout_ms: Some(millis(self.default_wait_timeout)).filter(|&ms| ms > 0),
            excluded_namespaces: self.exclude_namespaces.clone(),
            restore_window_ms: millis(self.restore_window),
        }
    }
}

/// A duration flag in milliseconds, saturating at `u64::MAX`.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `--log-format`: how log lines are written to standard error.
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
    /// Static hook documents, used in addition to those in the cluster: RestoreHook,
    /// ClusterRestoreHook, Velero Restore, and Namespace (its labels, which ClusterRestoreHooks'
    /// namespaceSelector reads), as multi-document YAML or JSON, or in a List. Repeatable.
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
    /// Where the plan key comes from.
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
    /// at a time). A pod's first hook gets a free slot before the later hooks of other pods;
    /// restore_hooks_exec_slot_waiting shows who waits.
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
    /// Pods of a namespace carrying the restore-namespace label, created without the webhook's
    /// mark up to this long before the controller first saw the label, are reported as restored
    /// pods the webhook never saw (when the label was set is not recorded anywhere). Default: the
    /// larger of --late-hook-window and 30m.
    #[arg(long, env = "RESTORE_HOOKS_UNMUTATED_LOOKBACK", value_parser = duration)]
    pub unmutated_lookback: Option<Duration>,
    /// Label the namespaces a Velero Restore writes to with --restore-namespace-label while it
    /// runs and for --restore-window after, and remove the label afterwards (needs `patch` on
    /// namespaces). `false`: only labels written by hand bring replacement pods into scope.
    #[arg(long, env = "RESTORE_HOOKS_LABEL_RESTORE_NAMESPACES", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub label_restore_namespaces: bool,
    /// RestoreRun objects (and their RestoreRecords) are deleted this long after their restore's
    /// hooks completed, once no pod their record holds exists any more.
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
    /// `--unmutated-lookback`, defaulted (docs/behaviour.md §6.1): the webhook that was down
    /// usually took the controller with it, so "first seen" alone would miss exactly the pods to
    /// report; at least the late-hook window, and never less than 30 minutes unless set.
    pub fn unmutated_lookback(&self) -> Duration {
        self.unmutated_lookback
            .unwrap_or_else(|| self.late_hook_window.max(DEFAULT_UNMUTATED_LOOKBACK))
    }

    /// `--max-concurrent-execs-per-namespace`, defaulted.
    pub fn per_namespace_execs(&self) -> usize {
        self.max_concurrent_execs_per_namespace
            .unwrap_or_else(|| (self.max_concurrent_execs * 3 / 4).max(1))
            .clamp(1, self.max_concurrent_execs.max(1))
    }
}

/// The shortest default `--unmutated-lookback`.
const DEFAULT_UNMUTATED_LOOKBACK: Duration = Duration::from_secs(30 * 60);

/// `serve`: every flag of the webhook and of the controller, which share one process, one admin
/// port and one hook index.
#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    /// Logging, the admin port and cluster access.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Which pods are restored pods, and which hook sources apply.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The HTTPS admission server.
    #[command(flatten)]
    pub webhook: WebhookArgs,
    /// The post-restore exec controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// `webhook`: the admission server alone (no exec, no Lease).
#[derive(Clone, Debug, Args)]
pub struct WebhookCommand {
    /// Logging, the admin port and cluster access.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Which pods are restored pods, and which hook sources apply.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The HTTPS admission server.
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// `controller`: the exec controller alone. It takes the engine flags too, with the webhook's
/// values: its scope check and late hooks apply the same rules.
#[derive(Clone, Debug, Args)]
pub struct ControllerCommand {
    /// Logging, the admin port and cluster access.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Which pods are restored pods, and which hook sources apply.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The post-restore exec controller.
    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// `inject --output`: what the preview prints.
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

/// `inject`: the webhook's decision for one pod manifest, computed offline from files alone (no
/// API server: namespace labels, the creator and its exec right are given as flags).
#[derive(Clone, Debug, Args)]
pub struct InjectArgs {
    /// Pod manifest (YAML or JSON); `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "POD")]
    pub file: PathBuf,
    /// Hook documents: RestoreHook, ClusterRestoreHook, Velero Restore, and Namespace (its
    /// labels, which ClusterRestoreHooks' namespaceSelector reads), as multi-document YAML or
    /// JSON, or in a List. Repeatable.
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
    /// The webhook's engine flags, so that the preview decides as the webhook would.
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

/// `describe --output`: how the report is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DescribeOutput {
    /// For a terminal, like `velero restore describe`.
    #[default]
    Text,
    /// The report as JSON: a stable shape (docs/behaviour.md §8.4).
    Json,
    /// The same report as YAML.
    Yaml,
}

/// `describe --events`: which Events of the restore's pods and hook objects the report shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum EventsArg {
    /// restore-hooks' Events and other components' Warnings about the pods, and the hook
    /// objects' Events.
    #[default]
    All,
    /// Only the Warnings among those.
    Warning,
    /// None.
    None,
}

/// `describe`: one restore's hooks, read from the cluster with the caller's own credentials
/// (read rights only: docs/operations.md, "Watching a restore").
#[derive(Clone, Debug, Args)]
#[command(after_help = "\
Reads the restore's RestoreRun (get restoreruns), the pods labelled \
restore-hooks.dev/restore-run=<restore> (list pods) and the Events of their namespaces (list \
events). Exit status: 0 the report was printed, whatever the restore's phase; 1 no such restore; \
2 the cluster could not be read.

To wait for a restore's hooks to end, whatever their outcome:
  kubectl wait --for=condition=Completed restorerun/<restore> --timeout=30m

As a kubectl plugin: put the binary on PATH under the name kubectl-restore_hooks (a symlink \
will do), then run kubectl restore-hooks describe <restore>.")]
pub struct DescribeArgs {
    /// The restore: its full name (a Velero Restore's name), the value of its restore label, or
    /// its RestoreRun's name.
    #[arg(value_name = "RESTORE")]
    pub restore: String,
    /// Output: for a terminal (`text`), or the report as `json` or `yaml`.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = DescribeOutput::Text)]
    pub output: DescribeOutput,
    /// List the restore's pods in this namespace only (repeatable), for a user who may list pods
    /// in some namespaces only. Default: every namespace.
    #[arg(short = 'n', long = "namespace", value_name = "NAMESPACE")]
    pub namespaces: Vec<String>,
    /// Which Events to show.
    #[arg(long, value_enum, default_value_t = EventsArg::All)]
    pub events: EventsArg,
    /// How to reach the API server.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// How to reach the API server: the pod's ServiceAccount in the chart's hooks, a kubeconfig
/// elsewhere.
#[derive(Clone, Debug, Args)]
pub struct ClusterArgs {
    /// The kubeconfig file. Default: $KUBECONFIG, else ~/.kube/config, else the pod's
    /// ServiceAccount.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use. Default: its current context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Give up on a request to the API server after this long.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "30s")]
    pub request_timeout: Duration,
}

impl ClusterArgs {
    /// A client from `--kubeconfig` and `--context`, else as kubectl finds one.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| anyhow::anyhow!("kubeconfig {}: {e}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &options).await?
            }
            (None, Some(_)) => kube::Config::from_kubeconfig(&options).await?,
            (None, None) => kube::Config::infer().await?,
        };
        config.connect_timeout = Some(self.request_timeout);
        config.read_timeout = Some(self.request_timeout);
        config.write_timeout = Some(self.request_timeout);
        Ok(kube::Client::try_from(config)?)
    }
}

/// The file name kubectl runs the binary by as its plugin `kubectl restore-hooks`.
pub const KUBECTL_PLUGIN: &str = "kubectl-restore_hooks";

impl Cli {
    /// The command line, named for how the binary was called (`argv0`): as kubectl's plugin
    /// ([`KUBECTL_PLUGIN`]) its usage and help say `kubectl restore-hooks`.
    pub fn command_for(argv0: Option<&std::ffi::OsStr>) -> clap::Command {
        use clap::CommandFactory;
        let plugin = argv0
            .and_then(|a| std::path::Path::new(a).file_name())
            .is_some_and(|name| name == KUBECTL_PLUGIN);
        let command = Cli::command();
        if plugin {
            command.bin_name("kubectl restore-hooks")
        } else {
            command
        }
    }

    /// Parses the process's arguments (see [`Cli::command_for`]); exits with clap's message and
    /// status on a bad command line, `--help` and `--version`.
    pub fn parse_env() -> Cli {
        use clap::FromArgMatches;
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let matches = Cli::command_for(args.first().map(|a| a.as_os_str())).get_matches_from(args);
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// `demo`: runs on the built-in API-server simulator (the `testbed` module), so it takes no
/// cluster flags.
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

    /// `--hooks` (of the servers and of `inject`) names every kind a hooks file may hold, and
    /// each of them loads (docs/behaviour.md §4.9).
    #[test]
    fn the_hooks_flag_names_every_kind_it_accepts() {
        use restore_hooks_core::catalog::StaticCatalog;
        use restore_hooks_core::documents::{DocumentDefaults, add_documents};
        let kinds = [
            ("ClusterRestoreHook", "restore-hooks.dev/v1alpha1", "{}"),
            ("RestoreHook", "restore-hooks.dev/v1alpha1", "{}"),
            ("Restore", "velero.io/v1", "{}"),
            ("Namespace", "v1", "{}"),
        ];
        let defaults = DocumentDefaults {
            namespace: "shop".into(),
            velero_namespace: "velero".into(),
        };
        for (kind, api_version, spec) in kinds {
            let doc = format!(
                "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x}}\nspec: {spec}\n"
            );
            let list = format!(
                "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{}]}}",
                serde_json::to_string(&yaml_serde::from_str::<serde_json::Value>(&doc).unwrap())
                    .unwrap()
            );
            for text in [doc, list] {
                let mut catalog = StaticCatalog::default();
                add_documents(
                    &mut catalog,
                    std::path::Path::new("h.yaml"),
                    &text,
                    &defaults,
                )
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
            }
        }
        for sub in ["serve", "webhook", "controller", "inject"] {
            let mut cmd = Cli::command();
            let sub = cmd.find_subcommand_mut(sub).unwrap();
            let hooks = sub
                .get_arguments()
                .find(|a| a.get_long() == Some("hooks"))
                .unwrap();
            let help = hooks.get_help().unwrap().to_string();
            for (kind, _, _) in kinds {
                assert!(
                    help.split(|c: char| !c.is_alphanumeric())
                        .any(|w| w == kind),
                    "{} --hooks help does not name {kind}: {help}",
                    sub.get_name()
                );
            }
            assert!(help.contains("List"), "{help}");
        }
    }

    /// `serve` is not what the chart deploys by default: `webhook` and `controller` are.
    #[test]
    fn the_roles_say_how_the_chart_runs_them() {
        let cmd = Cli::command();
        let about = |name: &str| {
            cmd.find_subcommand(name)
                .unwrap()
                .get_about()
                .unwrap()
                .to_string()
        };
        assert!(
            about("serve").contains("split.enabled=false"),
            "{}",
            about("serve")
        );
        assert!(about("webhook").contains("the chart's webhook Deployment"));
        assert!(about("controller").contains("the chart's controller Deployment"));
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
    fn the_default_wait_timeout_at_zero_is_no_limit() {
        let wait = |value: &str| {
            let argv = ["restore-hooks", "serve", "--default-wait-timeout", value];
            let Command::Serve(args) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("expected serve")
            };
            args.engine.engine_config().default_wait_timeout_ms
        };
        assert_eq!(wait("0"), None);
        assert_eq!(wait("90s"), Some(90_000));
    }

    #[test]
    fn the_unmutated_lookback_defaults_to_the_late_hook_window_and_at_least_30m() {
        let lookback = |args: &[&str]| {
            let mut argv = vec!["restore-hooks", "controller"];
            argv.extend(args);
            let Command::Controller(c) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("expected controller")
            };
            c.controller.unmutated_lookback()
        };
        let min = Duration::from_secs(60);
        let cases: [(&[&str], Duration); 4] = [
            (&[], 30 * min),
            (&["--late-hook-window", "0"], 30 * min),
            (&["--late-hook-window", "2h"], 120 * min),
            (
                &["--late-hook-window", "2h", "--unmutated-lookback", "5m"],
                5 * min,
            ),
        ];
        for (args, want) in cases {
            assert_eq!(lookback(args), want, "{args:?}");
        }
    }

    #[test]
    fn value_help_is_the_core_meaning() {
        // The one text per value lives in core (docs/behaviour.md §3.3, §3.6); `--help` shows it.
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").unwrap();
        let shown = |flag: &str| -> Vec<(String, String)> {
            let arg = serve
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .unwrap();
            arg.get_possible_values()
                .iter()
                .map(|v| (v.get_name().to_string(), v.get_help().unwrap().to_string()))
                .collect()
        };
        let meanings = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(n, m)| (n.to_string(), m.to_string()))
                .collect()
        };
        assert_eq!(
            shown("velero-hooks"),
            meanings(&[
                ("defer", VeleroHooksMode::Defer.meaning()),
                ("own", VeleroHooksMode::Own.meaning()),
            ])
        );
        assert_eq!(
            shown("on-invalid"),
            meanings(&[
                ("deny", OnInvalid::Deny.meaning()),
                ("warn", OnInvalid::Warn.meaning()),
            ])
        );
    }

    /// Called as kubectl's plugin, the binary takes the same arguments and names itself
    /// `kubectl restore-hooks` in usage and help.
    #[test]
    fn describe_parses_as_a_command_and_as_a_kubectl_plugin() {
        use clap::FromArgMatches;
        for argv0 in [
            "restore-hooks",
            "/usr/local/bin/restore-hooks",
            "/home/me/bin/kubectl-restore_hooks",
        ] {
            let argv = [
                argv0,
                "describe",
                "nightly-1",
                "-o",
                "json",
                "-n",
                "shop",
                "-n",
                "db",
            ];
            let mut command = Cli::command_for(Some(argv0.as_ref()));
            let matches = command.try_get_matches_from_mut(argv).unwrap();
            let Command::Describe(args) = Cli::from_arg_matches(&matches).unwrap().command else {
                panic!("expected describe")
            };
            assert_eq!(args.restore, "nightly-1");
            assert_eq!(args.output, DescribeOutput::Json);
            assert_eq!(args.namespaces, ["shop", "db"]);
            assert_eq!(args.events, EventsArg::All);
            assert_eq!(args.cluster.request_timeout, Duration::from_secs(30));
            let usage = command
                .find_subcommand_mut("describe")
                .unwrap()
                .render_usage()
                .to_string();
            let plugin = argv0.ends_with(KUBECTL_PLUGIN);
            assert_eq!(
                usage.contains("kubectl restore-hooks describe"),
                plugin,
                "{argv0}: {usage}"
            );
        }
        assert!(
            Cli::try_parse_from(["restore-hooks", "describe"]).is_err(),
            "RESTORE is required"
        );
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
