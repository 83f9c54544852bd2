//! Prometheus metrics of the webhook and the controller (product.md §6). One registry per
//! process (not the global one) so that tests can run several servers side by side.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// `outcome`: `unchanged` (allowed, no patch), `patched`, `denied`, `warned` (patched or
    /// allowed with warnings), `bad_request` (undecodable review).
    pub admission_requests: IntCounterVec,
    pub admission_duration: Histogram,
    pub init_containers_injected: IntCounter,
    /// `result`: `succeeded`, `failed`, `skipped`.
    pub exec_hooks: IntCounterVec,
    pub exec_duration: Histogram,
    pub pending_pods: IntGauge,
    /// `result`: `success`, `error`.
    pub tls_reloads: IntCounterVec,
    pub leader: IntGauge,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let admission_requests = IntCounterVec::new(
            Opts::new(
                "restore_hooks_admission_requests_total",
                "Admission requests answered, by outcome",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let admission_duration = Histogram::with_opts(
            HistogramOpts::new(
                "restore_hooks_admission_duration_seconds",
                "Time to decide one admission request, from decoded body to encoded response",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                0.1, 0.25, 1.0,
            ]),
        )
        .expect("valid metric");
        let init_containers_injected = IntCounter::new(
            "restore_hooks_init_containers_injected_total",
            "Restore init containers added to pods by the webhook",
        )
        .expect("valid metric");
        let exec_hooks = IntCounterVec::new(
            Opts::new(
                "restore_hooks_exec_hooks_total",
                "Post-restore exec hooks that reached a terminal phase, by result",
            ),
            &["result"],
        )
        .expect("valid metric");
        let exec_duration = Histogram::with_opts(
            HistogramOpts::new(
                "restore_hooks_exec_duration_seconds",
                "Duration of post-restore exec hooks, from exec start to exit",
            )
            .buckets(vec![
                0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
            ]),
        )
        .expect("valid metric");
        let pending_pods = IntGauge::new(
            "restore_hooks_pending_pods",
            "Pods labelled restore-hooks.dev/exec=pending that the controller is tracking",
        )
        .expect("valid metric");
        let tls_reloads = IntCounterVec::new(
            Opts::new(
                "restore_hooks_tls_reloads_total",
                "Serving certificate reloads from --tls-dir, by result",
            ),
            &["result"],
        )
        .expect("valid metric");
        let leader = IntGauge::new(
            "restore_hooks_leader",
            "1 while this replica holds the controller Lease and may exec hooks",
        )
        .expect("valid metric");
        for c in [
            Box::new(admission_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(admission_duration.clone()),
            Box::new(init_containers_injected.clone()),
            Box::new(exec_hooks.clone()),
            Box::new(exec_duration.clone()),
            Box::new(pending_pods.clone()),
            Box::new(tls_reloads.clone()),
            Box::new(leader.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        Self {
            registry,
            admission_requests,
            admission_duration,
            init_containers_injected,
            exec_hooks,
            exec_duration,
            pending_pods,
            tls_reloads,
            leader,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding into a Vec cannot fail");
        String::from_utf8(buf).expect("prometheus text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
