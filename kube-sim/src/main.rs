//! `kube-sim`: serve the simulator until SIGINT/SIGTERM.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "In-process Kubernetes API server and kubelet simulator"
)]
struct Args {
    /// Address to listen on (plain HTTP).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to write a kubeconfig pointing at the simulator.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Directory for per-pod sandboxes (default: a new directory under the system temp dir).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Do not run the kubelet stand-in.
    #[arg(long)]
    no_kubelet: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kube_sim=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let mut opts = kube_sim::SimOptions {
        listen: args.listen,
        kubelet: !args.no_kubelet,
        ..Default::default()
    };
    if let Some(w) = args.workdir {
        opts.workdir = w;
    }
    let workdir = opts.workdir.clone();
    let sim = kube_sim::start(opts).await?;
    if let Some(k) = &args.kubeconfig {
        sim.write_kubeconfig(k)?;
        eprintln!("kubeconfig written to {}", k.display());
    }
    eprintln!("pod sandboxes in {}", workdir.display());
    println!("{}", sim.url());

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    sim.shutdown().await;
    Ok(())
}
