//! Logging: `tracing` to stderr, JSON (for log pipelines) or text, filtered by `--log-level`.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Crates that are chatty below info. Kept at info when the filter asks for debug or trace
/// globally, unless the filter names them (`--log-level debug,hyper=trace` is honoured).
const NOISY: &[&str] = &[
    "hyper",
    "hyper_util",
    "h2",
    "rustls",
    "tokio_rustls",
    "axum_server",
    "tower",
    "kube",
    "kube_client",
    "kube_runtime",
];

/// Why logging could not be set up: a startup error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// `--log-level` is not a valid filter.
    #[error(
        "invalid --log-level {filter:?}: {reason} (use RUST_LOG syntax, e.g. `info` or `info,restore_hooks=debug`)"
    )]
    Filter {
        /// The `--log-level` value as given.
        filter: String,
        /// What the filter parser rejected.
        reason: String,
    },
    /// [`init`] ran twice in one process, or something else installed a subscriber first.
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Builds the filter for `--log-level`.
pub fn filter(level: &str) -> Result<EnvFilter, TelemetryError> {
    let invalid = |reason: String| TelemetryError::Filter {
        filter: level.to_string(),
        reason,
    };
    let mut filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .parse(level)
        .map_err(|e| invalid(e.to_string()))?;
    if filter
        .max_level_hint()
        .is_some_and(|max| max > LevelFilter::INFO)
    {
        for krate in NOISY {
            let named = level
                .split(',')
                .any(|d| d.trim().split(['=', '[']).next() == Some(krate));
            if !named {
                filter =
                    filter.add_directive(format!("{krate}=info").parse().map_err(
                        |e: tracing_subscriber::filter::ParseError| invalid(e.to_string()),
                    )?);
            }
        }
    }
    Ok(filter)
}

/// Installs the process-wide subscriber.
pub fn init(format: LogFormat, level: &str) -> Result<(), TelemetryError> {
    let filter = filter(level)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true);
    let installed = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    installed.map_err(|_| TelemetryError::AlreadyInstalled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_and_quiet_noisy_crates() {
        assert!(filter("info").is_ok());
        let debug = filter("debug").unwrap().to_string();
        assert!(debug.contains("hyper=info"), "{debug}");
        let named = filter("debug,kube=debug").unwrap().to_string();
        assert!(named.contains("kube=debug"), "{named}");
        assert!(!named.contains("kube=info"), "{named}");
        assert!(filter("info,restore_hooks=nonsense").is_err());
    }
}
