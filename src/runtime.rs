//! Process wiring for the server roles: logging, metrics, the admin server, signals, and the
//! webhook and/or controller.
//!
//! One signal source, one `Metrics`, one `Readiness`. Components run concurrently; the first
//! one that fails (or stops on its own) starts the shutdown of the others, and the process exits
//! non-zero naming it. The admin server stops last so `/readyz` answers 503 during the drain.

use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt as _, StreamExt as _, TryFutureExt as _};
use tokio_util::sync::CancellationToken;

use crate::admin::{AdminServer, Readiness};
use crate::catalog::{HookIndex, SharedIndex, StaticCatalog, load_static};
use crate::cli::{
    ControllerArgs, ControllerCommand, EngineArgs, PlanKeyArgs, RuntimeArgs, ServeArgs,
    WebhookArgs, WebhookCommand,
};
use crate::controller::{self, ControllerDeps};
use crate::metrics::Metrics;
use crate::plan_key::{KeyRing, SecretKeys, from_files};
use crate::webhook::{Bound, WebhookSources};

/// `restore-hooks serve`: the webhook and the controller in one process (the chart's
/// single-Deployment mode). Returns after SIGTERM or SIGINT and a complete drain; an error names
/// the component that failed first.
pub async fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    run(
        args.runtime,
        args.engine,
        Some(args.webhook),
        Some(args.controller),
    )
    .await
}

/// `restore-hooks webhook`: only the admission webhook (with `--no-cluster`, hooks come from
/// `--hooks` files alone). Returns like [`run_serve`].
pub async fn run_webhook(args: WebhookCommand) -> anyhow::Result<()> {
    run(args.runtime, args.engine, Some(args.webhook), None).await
}

/// `restore-hooks controller`: only the exec controller. Returns like [`run_serve`].
pub async fn run_controller(args: ControllerCommand) -> anyhow::Result<()> {
    run(args.runtime, args.engine, None, Some(args.controller)).await
}

type Component = (&'static str, BoxFuture<'static, anyhow::Result<()>>);

async fn run(
    runtime: RuntimeArgs,
    engine: EngineArgs,
    webhook: Option<WebhookArgs>,
    controller: Option<ControllerArgs>,
) -> anyhow::Result<()> {
    if controller.is_some() && runtime.no_cluster {
        anyhow::bail!(
            "--no-cluster only works with the `webhook` command: the controller execs hooks \
             through the Kubernetes API (drop --no-cluster, or run `restore-hooks webhook`)"
        );
    }
    crate::telemetry::init(runtime.log_format, &runtime.log_level)?;
    let engine = engine.engine_config();
    let metrics = Metrics::new();
    let readiness = Readiness::new();
    let shutdown = crate::shutdown::on_signals().context("cannot install signal handlers")?;
    tokio::spawn({
        let (shutdown, readiness) = (shutdown.clone(), readiness.clone());
        async move {
            shutdown.cancelled().await;
            readiness.begin_shutdown();
        }
    });

    let client = if runtime.no_cluster {
        None
    } else {
        Some(crate::kube_client::infer(&metrics).await.context(
            "cannot configure a Kubernetes client (in-cluster service account or KUBECONFIG); \
             to run the webhook on --hooks files alone, pass --no-cluster",
        )?)
    };

    // Stops background work (watch caches, the key watch) once every component has stopped.
    let background = CancellationToken::new();
    let spawn_background = |future: BoxFuture<'static, ()>| {
        let stop = background.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = future => {}
            }
        });
    };
    let identity = runtime
        .identity
        .clone()
        .unwrap_or_else(controller::lease::default_identity);
    let index = shared_index(
        &runtime,
        client.clone(),
        &engine,
        &metrics,
        &spawn_background,
    )?;
    // Only a process that runs the controller creates the key: a split webhook waits for it.
    let keys = plan_keys(
        &runtime.plan_key,
        client.clone(),
        controller.is_some(),
        &spawn_background,
    )?;
    let mut components: Vec<Component> = Vec::new();

    if let Some(args) = webhook {
        let sources = WebhookSources {
            index: index.clone(),
            keys: keys.clone(),
            namespaces: client.clone().map(kube::Api::all),
            exec_rights: std::sync::Arc::new(match client.clone() {
                Some(client) => crate::webhook::exec_rights::ExecRights::api(client, &metrics),
                None => crate::webhook::exec_rights::ExecRights::unavailable(),
            }),
        };
        let bound = Bound::bind(
            &args,
            sources,
            engine.clone(),
            metrics.clone(),
            readiness.clone(),
        )?;
        if let Some(client) = client.clone() {
            spawn_background(
                crate::webhook::observed::report(
                    client,
                    index.clone(),
                    identity.clone(),
                    background.clone(),
                )
                .boxed(),
            );
        }
        components.push((
            "webhook",
            bound
                .serve(shutdown.clone())
                .map_err(anyhow::Error::from)
                .boxed(),
        ));
    }
    if let Some(args) = controller {
        let client = client
            .clone()
            .expect("checked above: the controller has a client");
        readiness.track_index(index.clone());
        readiness.track_keys(keys.clone());
        let deps = ControllerDeps {
            client,
            args,
            engine: engine.clone(),
            metrics: metrics.clone(),
            identity: identity.clone(),
            index: index.clone(),
            keys: keys.clone(),
            shutdown: shutdown.clone(),
        };
        components.push(("controller", controller::run(deps).boxed()));
    }

    let admin = AdminServer::bind(runtime.admin_listen, metrics, readiness.clone()).await?;
    tracing::info!(addr = %admin.local_addr(), "admin server listening (/livez, /readyz, /metrics)");
    let admin_stop = CancellationToken::new();
    let mut admin_task = tokio::spawn(admin.serve(admin_stop.clone()));

    let mut running: FuturesUnordered<_> = components
        .into_iter()
        .map(|(name, future)| future.map(move |result| (name, result)))
        .collect();
    let mut failure: Option<anyhow::Error> = None;
    let fail = |err: anyhow::Error, failure: &mut Option<anyhow::Error>| {
        tracing::error!(error = format!("{err:#}"), "stopping the process");
        failure.get_or_insert(err);
        readiness.begin_shutdown();
        shutdown.cancel();
    };
    loop {
        tokio::select! {
            next = running.next() => match next {
                None => break,
                Some((name, Ok(()))) if shutdown.is_cancelled() => {
                    tracing::info!(component = name, "stopped");
                }
                Some((name, Ok(()))) => {
                    fail(anyhow!("{name} stopped before shutdown was requested"), &mut failure);
                }
                Some((name, Err(err))) => fail(err.context(format!("{name} failed")), &mut failure),
            },
            admin = &mut admin_task => {
                let err = match admin {
                    Ok(Ok(())) => anyhow!("the admin server stopped unexpectedly"),
                    Ok(Err(err)) => anyhow::Error::from(err).context("the admin server failed"),
                    Err(join) => anyhow::Error::from(join).context("the admin server panicked"),
                };
                fail(err, &mut failure);
                // Keep draining the other components without the admin server.
                while let Some((name, result)) = running.next().await {
                    if let Err(err) = result {
                        tracing::error!(component = name, error = format!("{err:#}"), "failed while stopping");
                    }
                }
                background.cancel();
                return Err(failure.expect("set above"));
            }
        }
    }
    admin_stop.cancel();
    background.cancel();
    match admin_task.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            failure.get_or_insert(anyhow::Error::from(err).context("the admin server failed"));
        }
        Err(join) => {
            failure.get_or_insert(anyhow::Error::from(join).context("the admin server panicked"));
        }
    }
    match failure {
        Some(err) => Err(err),
        None => {
            tracing::info!("clean shutdown");
            Ok(())
        }
    }
}

/// `--hooks` documents compiled into the index, and the cluster's watches feeding it unless
/// `--no-cluster`.
fn shared_index(
    runtime: &RuntimeArgs,
    client: Option<kube::Client>,
    engine: &crate::config::EngineConfig,
    metrics: &Metrics,
    spawn_background: &dyn Fn(BoxFuture<'static, ()>),
) -> anyhow::Result<Arc<SharedIndex>> {
    let statics: StaticCatalog = load_static(&runtime.hooks).context("cannot load --hooks")?;
    if !runtime.hooks.is_empty() {
        tracing::info!(
            files = runtime.hooks.len(),
            restore_hooks = statics.restore_hooks.len(),
            cluster_restore_hooks = statics.cluster_restore_hooks.len(),
            velero_restores = statics.velero_restores.len(),
            "static hook documents loaded"
        );
    }
    let mut index = HookIndex::new();
    statics.apply_to(&mut index);
    let index = SharedIndex::new(index);
    if let Some(client) = client {
        spawn_background(
            crate::catalog::cluster::watch_into(client, engine, index.clone(), metrics.clone())
                .boxed(),
        );
    }
    Ok(index)
}

/// The plan key: from `--plan-key-file`, else from the Secret (created when missing by a process
/// that runs the controller), else none (`--no-cluster` without a key file: plans are issued
/// unsigned, and no cluster's controller runs them).
fn plan_keys(
    args: &PlanKeyArgs,
    client: Option<kube::Client>,
    create: bool,
    spawn_background: &dyn Fn(BoxFuture<'static, ()>),
) -> anyhow::Result<KeyRing> {
    if let Some(file) = &args.plan_key_file {
        let keys = from_files(file, args.previous_plan_key_file.as_deref())?;
        tracing::info!(file = %file.display(), current = keys.current_id(), "plan key loaded from file");
        return Ok(KeyRing::fixed(keys));
    }
    let Some(client) = client else {
        tracing::warn!(
            "no --plan-key-file with --no-cluster: plans are issued unsigned and no controller will run them"
        );
        return Ok(KeyRing::none());
    };
    let namespace = args
        .plan_key_namespace
        .clone()
        .or_else(own_namespace)
        .unwrap_or_else(|| "default".to_string());
    let (keys, driver) = SecretKeys::new(client, &namespace, &args.plan_key_secret, create).start();
    spawn_background(driver.boxed());
    Ok(keys)
}

/// The namespace this pod runs in, from its service account mount.
fn own_namespace() -> Option<String> {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}
