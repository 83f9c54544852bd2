//! `restore-hooks inject`: the webhook's decision, offline.

use std::process::ExitCode;

use crate::cli::InjectArgs;

pub fn run(_args: &InjectArgs) -> ExitCode {
    eprintln!("inject is not implemented yet");
    ExitCode::FAILURE
}
