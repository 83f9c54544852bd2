//! The process' one signal source: SIGTERM or SIGINT cancels a token that every component
//! watches; a second signal exits at once (an operator pressing Ctrl-C twice means it).

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Exit code for the second signal (128 + SIGINT, what shells report).
const FORCED_EXIT_CODE: i32 = 130;

/// Installs the signal handlers and returns the token they cancel. Must be called inside a
/// tokio runtime.
pub fn on_signals() -> std::io::Result<CancellationToken> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(
            signal = name,
            "shutting down (send another signal to exit at once)"
        );
        cancel.cancel();
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::warn!(signal = name, "second signal: exiting without draining");
        std::process::exit(FORCED_EXIT_CODE);
    });
    Ok(token)
}
