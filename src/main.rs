#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use restore_hooks::cli::{Cli, Command};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    restore_hooks::install_crypto_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inject(args) => return restore_hooks::inject_cli::run(&args),
        Command::Crd => restore_hooks::crd::print(),
        Command::Demo(args) => block_on(restore_hooks::demo::run(args)),
        Command::Serve(args) => block_on(restore_hooks::runtime::run_serve(args)),
        Command::Webhook(args) => block_on(restore_hooks::runtime::run_webhook(args)),
        Command::Controller(args) => block_on(restore_hooks::runtime::run_controller(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("restore-hooks: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(f)
}
