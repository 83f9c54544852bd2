//! Prometheus v3 on this host (built by build.sh from `prometheus/go.mod`), for tests that scrape
//! the product and run PromQL against what it exported: dashboards' queries, alerting rules.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use restore_hooks_testkit::try_wait_until;
use serde_json::Value;

use crate::cache::{self, Group, bin};
use crate::host::{HostCommand, HostProcess};
use crate::util::{free_port, http_get};

const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The `prometheus` built from the pinned module (built first when missing).
pub fn pinned_prometheus() -> Result<PathBuf> {
    cache::ensure_built(Group::Prometheus)?;
    Ok(bin("prometheus"))
}

/// The `promtool` built from the same module (built first when missing).
pub fn pinned_promtool() -> Result<PathBuf> {
    cache::ensure_built(Group::Prometheus)?;
    Ok(bin("promtool"))
}

/// A running Prometheus on 127.0.0.1 (a fresh port), its TSDB, configuration and log in a
/// directory of the caller's. Killed when dropped, a panic included, and by the kernel if the
/// test process dies (a [`HostProcess`]).
pub struct Prometheus {
    proc: HostProcess,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    /// Writes `config` (a prometheus.yml; paths in it are the caller's, e.g. `rule_files` it put
    /// into `dir`) to `dir/prometheus.yml` and starts Prometheus on it, with its TSDB in
    /// `dir/data`; returns once `/-/ready` answers 200, i.e. the configuration, rule files
    /// included, loaded.
    pub fn start(dir: &Path, config: &str) -> Result<Prometheus> {
        let program = pinned_prometheus()?;
        std::fs::create_dir_all(dir.join("data"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config)
            .with_context(|| format!("cannot write {}", config_file.display()))?;
        let port = free_port()?;
        let cmd = HostCommand::new("prometheus", program, dir, dir.join("prometheus.log"))
            .args([
                format!("--config.file={}", config_file.display()),
                format!("--storage.tsdb.path={}", dir.join("data").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
            ])
            // Nothing of the test's environment (proxies, say) changes what it does; it only talks
            // to 127.0.0.1.
            .clear_env()
            .env("PATH", "/usr/bin:/bin");
        let mut proc = HostProcess::spawn(&cmd)?;
        let ready = try_wait_until("prometheus /-/ready", START_TIMEOUT, || {
            if let Some(status) = proc.exited() {
                return Ok(Err(status));
            }
            match http_get(port, "/-/ready") {
                Ok((200, _)) => Ok(Ok(())),
                Ok((code, body)) => Err(format!("{code} {body}")),
                Err(e) => Err(format!("{e:#}")),
            }
        });
        match ready {
            Ok(Ok(())) => Ok(Prometheus {
                proc,
                port,
                dir: dir.to_path_buf(),
            }),
            Ok(Err(status)) => bail!(
                "prometheus exited ({status}) before it was ready (a configuration or rule file \
                 it refused?); its log {}:\n{}",
                proc.log_path().display(),
                proc.log_tail(30)
            ),
            Err(timed_out) => bail!(
                "{timed_out}; its log {}:\n{}",
                proc.log_path().display(),
                proc.log_tail(30)
            ),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log_tail(&self, n: usize) -> String {
        self.proc.log_tail(n)
    }

    /// `GET /api/v1/<endpoint>?<params>` (each value percent-encoded): the response's `data`,
    /// or the error Prometheus gave (`errorType`, `error`; or its `warnings` and `infos`), with
    /// the request it was for.
    pub fn api(&self, endpoint: &str, params: &[(&str, &str)]) -> Result<Value> {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        let path = format!("/api/v1/{endpoint}?{}", query.join("&"));
        let (code, body) = http_get(self.port, &path)
            .with_context(|| format!("prometheus GET /api/v1/{endpoint} {params:?}"))?;
        let v: Value = serde_json::from_str(&body).with_context(|| {
            format!("prometheus GET /api/v1/{endpoint} {params:?}: {code}, not JSON: {body:.300}")
        })?;
        if code != 200 || v["status"] != "success" {
            bail!(
                "prometheus GET /api/v1/{endpoint} {params:?}: {code} {}: {}",
                v["errorType"].as_str().unwrap_or_default(),
                v["error"].as_str().unwrap_or(&body)
            );
        }
        // A query Prometheus answered with misgivings (`rate()` of something that is not a
        // counter, say) is a mistake in the query: an error too.
        for kind in ["warnings", "infos"] {
            if let Some(notes) = v[kind].as_array().filter(|w| !w.is_empty()) {
                bail!("prometheus GET /api/v1/{endpoint} {params:?}: {kind} {notes:?}");
            }
        }
        Ok(v["data"].clone())
    }

    /// An instant query at `time` (Unix seconds): its `data` (`resultType`, `result`).
    pub fn query(&self, expr: &str, time: f64) -> Result<Value> {
        self.api("query", &[("query", expr), ("time", &time.to_string())])
    }

    /// A range query from `start` to `end` (Unix seconds) every `step` seconds: its `data`.
    pub fn query_range(&self, expr: &str, start: f64, end: f64, step: f64) -> Result<Value> {
        self.api(
            "query_range",
            &[
                ("query", expr),
                ("start", &start.to_string()),
                ("end", &end.to_string()),
                ("step", &step.to_string()),
            ],
        )
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters (a query parameter).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_parameters_are_percent_encoded() {
        assert_eq!(
            super::encode(r#"sum by (le) (rate(x{a=~"b|c"}[5m])) > 0.5"#),
            "sum%20by%20%28le%29%20%28rate%28x%7Ba%3D~%22b%7Cc%22%7D%5B5m%5D%29%29%20%3E%200.5"
        );
        assert_eq!(super::encode("ünï"), "%C3%BCn%C3%AF");
    }
}
