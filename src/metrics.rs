//! Prometheus metrics of the webhook and the controller (docs/operations.md). One registry per
//! process (not the global one) so that tests can run several servers side by side.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Every value of each fixed-value counter label that the code writes, and no other. Each series
/// exists from start-up at 0, so that dashboards show it and an `increase()` alert fires on its
/// first event; `tests/docs_tables.rs` checks that docs/operations.md lists every one.
pub const LABEL_VALUES: &[(&str, &[&str])] = &[
    (
        "restore_hooks_admission_requests_total",
        &[
            "unchanged",
            "patched",
            "warned",
            "denied",
            "bad_request",
            "too_large",
            "body_timeout",
            "body_preempted",
            "overloaded",
            "unavailable",
        ],
    ),
    (
        "restore_hooks_exec_hooks_total",
        &["succeeded", "failed", "skipped"],
    ),
    ("restore_hooks_tls_reloads_total", &["success", "error"]),
    (
        "restore_hooks_exec_retries_total",
        &["unavailable", "not_started", "exit_code", "stream_broke"],
    ),
    (
        "restore_hooks_namespace_lookups_total",
        &["found", "not_found", "error"],
    ),
    (
        "restore_hooks_plans_rejected_total",
        &[
            "unsigned_plan",
            "other_pod",
            "forged_status",
            "unreadable_plan",
            "claimed_by_other_pod",
            "plan_replaced",
            "no_issued_at",
            "unbound_plan",
            "record_full",
        ],
    ),
    (
        "restore_hooks_annotation_hooks_refused_total",
        &["creator_may_not_exec", "exec_check_failed"],
    ),
    (
        "restore_hooks_exec_slot_waiting",
        &["claimed", "first", "later"],
    ),
    (
        "restore_hooks_webhook_connections_closed_total",
        &["stalled", "yielded", "idle", "refused"],
    ),
    (
        "restore_hooks_subject_access_reviews_total",
        &["allowed", "denied", "error", "throttled"],
    ),
    ("restore_hooks_restore_windows_total", &["set", "removed"]),
    ("restore_hooks_events_sent_total", &["created", "failed"]),
    (
        "restore_hooks_events_dropped_total",
        &["queue_full", "shutdown"],
    ),
];

/// The fixed label values of metric `name` in [`LABEL_VALUES`] (none if it has none).
fn label_values(name: &str) -> &'static [&'static str] {
    LABEL_VALUES
        .iter()
        .find(|(metric, _)| *metric == name)
        .map_or(&[], |(_, values)| *values)
}

/// The metrics of one process.
#[derive(Clone)]
pub struct Metrics {
    /// The registry `/metrics` renders.
    pub registry: Registry,
    /// Every registered metric's name (a labelled metric without series is not in a scrape).
    pub names: std::sync::Arc<[String]>,
    /// `outcome`: `unchanged` (allowed, no patch), `patched`, `denied`, `warned` (patched or
    /// allowed with warnings), `bad_request` (undecodable review).
    pub admission_requests: IntCounterVec,
    /// `restore_hooks_admission_duration_seconds`: time to decide one request, decoded body to
    /// encoded response.
    pub admission_duration: Histogram,
    /// `restore_hooks_init_containers_injected_total`: restore init containers the webhook added.
    pub init_containers_injected: IntCounter,
    /// `result`: `succeeded`, `failed`, `skipped`.
    pub exec_hooks: IntCounterVec,
    /// `reason`: `unavailable`, `not_started`, `exit_code`, `stream_broke`: failed attempts tried
    /// again.
    pub exec_retries: IntCounterVec,
    /// `restore_hooks_exec_interrupted_total`: hooks this leader ended `interrupted`.
    pub exec_interrupted: IntCounter,
    /// `restore_hooks_exec_claims_given_back_total`: claims given back before their exec.
    pub exec_claims_given_back: IntCounter,
    /// `restore_hooks_exec_duration_seconds`: exec hooks' durations, exec start to exit.
    pub exec_duration: Histogram,
    /// `restore_hooks_exec_start_delay_seconds`: from a hook's exec slot to its exec starting.
    pub exec_start_delay: Histogram,
    /// `restore_hooks_pending_pods`: pods labelled `restore-hooks.dev/exec=pending` being tracked.
    pub pending_pods: IntGauge,
    /// `result`: `success`, `error`.
    pub tls_reloads: IntCounterVec,
    /// `restore_hooks_leader`: 1 while this replica holds the controller Lease (and may exec).
    pub leader: IntGauge,
    /// Unix time of the serving certificate's notAfter (alert before it passes).
    pub certificate_expiry: IntGauge,
    /// `resource`: 1 while that watch is connected and has its list, 0 while it fails.
    pub watch_healthy: IntGaugeVec,
    /// `resource`: watch errors (each is retried with backoff).
    pub watch_errors: IntCounterVec,
    /// `reason`: pods whose plan or status failed verification; nothing of theirs ran.
    pub plans_rejected: IntCounterVec,
    /// Exec hooks appended to running pods' plans by hook objects that arrived late.
    pub late_hooks: IntCounter,
    /// Hooks currently holding an exec slot.
    pub exec_slots_in_use: IntGauge,
    /// `turn` (`first`, `later`): hooks waiting for an exec slot.
    pub exec_slot_waiting: IntGaugeVec,
    /// `result`: namespaces the admission path had to read from the API server because the
    /// watch cache did not know them yet (`found`, `not_found`, `error`).
    pub namespace_lookups: IntCounterVec,
    /// Restored pods found without the webhook's mark: admitted while it was unavailable.
    pub unmutated_pods: IntCounter,
    /// `action`: restore-namespace labels the leader set or removed for a Velero Restore's window.
    pub restore_windows: IntCounterVec,
    /// Namespaces whose restore-namespace label, written by someone else, names a Velero Restore
    /// whose window is over.
    pub stale_restore_namespace_labels: IntGauge,
    /// `verb`, `resource`: API requests the API server refused with 403 (the RBAC lacks a rule).
    pub api_forbidden: IntCounterVec,
    /// `verb`, `resource`: API requests the API server answered 429 (throttled); each is retried
    /// after a backoff.
    pub api_throttled: IntCounterVec,
    /// `restore_hooks_api_forbidden_while_starting_total{verb,resource}`.
    pub api_forbidden_while_starting: IntCounterVec,
    /// `reason`: annotation exec hooks the webhook refused (`creator_may_not_exec`,
    /// `exec_check_failed`): nobody entitled to exec into the pod authored them.
    pub annotation_hooks_refused: IntCounterVec,
    /// Pods whose status was found behind the controller's own record of what ran (rolled back or
    /// removed): the record won, nothing re-ran.
    pub status_rollbacks: IntCounter,
    /// `reason`: webhook connections the server closed: `stalled` (owed a request the longest
    /// when a new connection needed its slot), `yielded` (idle, for a new connection), `idle`
    /// (HTTP/2 idle limit), `refused` (a new connection that got no slot).
    pub webhook_connections_closed: IntCounterVec,
    /// `result`: SubjectAccessReviews the webhook sent (`allowed`, `denied`, `error`) or did not
    /// send because it was over its budget (`throttled`).
    pub subject_access_reviews: IntCounterVec,
    /// `result`: Events the controller's background sender finished with: `created`, or `failed`
    /// (refused, or still failing after its retries).
    pub events_sent: IntCounterVec,
    /// `reason`: Events never sent: `queue_full` (the queue of Events waiting to be sent was
    /// full), `shutdown` (still queued when the flush at shutdown ran out of time).
    pub events_dropped: IntCounterVec,
}

impl Metrics {
    /// A fresh registry with every metric registered, and each fixed label value of
    /// [`LABEL_VALUES`] at 0.
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
            // Up to the API server's longest webhook timeout (30 s): histogram_quantile() never
            // returns more than the highest finite bound, so the chart's "p99 above 1s" alert
            // needs bounds above 1 s to ever fire.
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                0.1, 0.25, 1.0, 2.5, 5.0, 10.0, 30.0,
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
        let exec_retries = IntCounterVec::new(
            Opts::new(
                "restore_hooks_exec_retries_total",
                "Failed attempts of exec hooks with retry that are tried again, by how the attempt failed",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let exec_interrupted = IntCounter::new(
            "restore_hooks_exec_interrupted_total",
            "Exec hooks this leader ended interrupted: found Running, started or claimed by a \
             controller that stopped without recording their end; never run again",
        )
        .expect("valid metric");
        let exec_claims_given_back = IntCounter::new(
            "restore_hooks_exec_claims_given_back_total",
            "Claimed exec hooks (start written while waiting for a slot) given back before their \
             exec started: the replica stopped leading, the container went down or the wait \
             passed its waitTimeout",
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
        let exec_start_delay = Histogram::with_opts(
            HistogramOpts::new(
                "restore_hooks_exec_start_delay_seconds",
                "Time from a hook's exec slot to its exec starting: its Running record on the pod \
                 and the controller's record of its start, both written first",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
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
        let certificate_expiry = IntGauge::new(
            "restore_hooks_serving_certificate_expiry_timestamp_seconds",
            "Unix time at which the serving certificate in --tls-dir expires (its notAfter)",
        )
        .expect("valid metric");
        let watch_healthy = IntGaugeVec::new(
            Opts::new(
                "restore_hooks_watch_healthy",
                "1 while the watch of this resource is connected and synced, 0 while it fails",
            ),
            &["resource"],
        )
        .expect("valid metric");
        let watch_errors = IntCounterVec::new(
            Opts::new(
                "restore_hooks_watch_errors_total",
                "Errors of the watch of this resource (each retried with backoff)",
            ),
            &["resource"],
        )
        .expect("valid metric");
        let plans_rejected = IntCounterVec::new(
            Opts::new(
                "restore_hooks_plans_rejected_total",
                "Pods whose exec plan or status failed verification; none of their hooks ran",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let late_hooks = IntCounter::new(
            "restore_hooks_late_hooks_total",
            "Exec hooks appended to admitted pods by RestoreHooks or ClusterRestoreHooks that arrived after them",
        )
        .expect("valid metric");
        let exec_slots_in_use = IntGauge::new(
            "restore_hooks_exec_slots_in_use",
            "Hooks holding one of the --max-concurrent-execs slots",
        )
        .expect("valid metric");
        let exec_slot_waiting = IntGaugeVec::new(
            Opts::new(
                "restore_hooks_exec_slot_waiting",
                "Hooks waiting for one of the --max-concurrent-execs slots, by turn: a hook whose \
                 start is written (claimed, served first), a pod's first hook (served next) or a \
                 later one",
            ),
            &["turn"],
        )
        .expect("valid metric");
        let namespace_lookups = IntCounterVec::new(
            Opts::new(
                "restore_hooks_namespace_lookups_total",
                "Namespaces admission read from the API server because the watch cache did not know them",
            ),
            &["result"],
        )
        .expect("valid metric");
        let unmutated_pods = IntCounter::new(
            "restore_hooks_unmutated_pods_total",
            "Restored pods found admitted without the webhook (failurePolicy Ignore while it was unavailable): their hooks were not applied",
        )
        .expect("valid metric");
        let restore_windows = IntCounterVec::new(
            Opts::new(
                "restore_hooks_restore_windows_total",
                "Restore-namespace labels the leader set (action=set) on a namespace a Velero Restore writes to, or removed (action=removed) once its window was over",
            ),
            &["action"],
        )
        .expect("valid metric");
        let stale_restore_namespace_labels = IntGauge::new(
            "restore_hooks_stale_restore_namespace_labels",
            "Namespaces whose restore-namespace label (not set by restore-hooks) names a Velero Restore whose restore window is over: remove the label",
        )
        .expect("valid metric");
        let api_forbidden = IntCounterVec::new(
            Opts::new(
                "restore_hooks_api_forbidden_total",
                "API requests the API server refused with 403 Forbidden: the ServiceAccount's RBAC lacks this verb on this resource",
            ),
            &["verb", "resource"],
        )
        .expect("valid metric");
        let api_forbidden_while_starting = IntCounterVec::new(
            Opts::new(
                "restore_hooks_api_forbidden_while_starting_total",
                "API requests refused with 403 Forbidden within a minute of the API server being unreachable: a kube-apiserver that just started answers 403 until its authorizer is ready; retried, and not counted as an RBAC refusal",
            ),
            &["verb", "resource"],
        )
        .expect("valid metric");
        let api_throttled = IntCounterVec::new(
            Opts::new(
                "restore_hooks_api_throttled_total",
                "API requests the API server answered 429 Too Many Requests (API Priority and Fairness or max-inflight limits); each is retried after a jittered backoff",
            ),
            &["verb", "resource"],
        )
        .expect("valid metric");
        let annotation_hooks_refused = IntCounterVec::new(
            Opts::new(
                "restore_hooks_annotation_hooks_refused_total",
                "Annotation exec hooks refused at admission: the pod's creator may not create pods/exec and no hook object allows them",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let status_rollbacks = IntCounter::new(
            "restore_hooks_status_rollbacks_total",
            "Pods whose restore-hooks.dev/status was found behind the controller's record of what ran (rolled back or removed); nothing re-ran",
        )
        .expect("valid metric");
        let webhook_connections_closed = IntCounterVec::new(
            Opts::new(
                "restore_hooks_webhook_connections_closed_total",
                "Webhook connections the server closed, by reason: stalled (owed a request the longest when a new connection needed its slot), yielded (idle, for a new connection), idle (HTTP/2 idle limit), refused (a new connection that got no slot)",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let subject_access_reviews = IntCounterVec::new(
            Opts::new(
                "restore_hooks_subject_access_reviews_total",
                "SubjectAccessReviews for a pod creator's right to create pods/exec, by result: allowed, denied, error (sent), throttled (not sent: over the webhook's budget; the annotation exec hook is refused)",
            ),
            &["result"],
        )
        .expect("valid metric");
        let events_sent = IntCounterVec::new(
            Opts::new(
                "restore_hooks_events_sent_total",
                "Kubernetes Events the controller sent, by result: created, or failed (refused, or still failing after its retries)",
            ),
            &["result"],
        )
        .expect("valid metric");
        let events_dropped = IntCounterVec::new(
            Opts::new(
                "restore_hooks_events_dropped_total",
                "Kubernetes Events the controller dropped unsent, by reason: queue_full (the queue of Events waiting to be sent was full), shutdown (still queued when the flush at shutdown ran out of time)",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let mut names = Vec::new();
        // The process' own resident memory, CPU seconds and file descriptors (from /proc; on other
        // systems the collector reports nothing): what the chart's limits are compared with.
        #[cfg(target_os = "linux")]
        let process = Some(
            Box::new(prometheus::process_collector::ProcessCollector::for_self())
                as Box<dyn Collector>,
        );
        #[cfg(not(target_os = "linux"))]
        let process: Option<Box<dyn Collector>> = None;
        for c in process.into_iter().chain([
            Box::new(admission_requests.clone()) as Box<dyn Collector>,
            Box::new(admission_duration.clone()),
            Box::new(init_containers_injected.clone()),
            Box::new(exec_hooks.clone()),
            Box::new(exec_retries.clone()),
            Box::new(exec_interrupted.clone()),
            Box::new(exec_claims_given_back.clone()),
            Box::new(exec_duration.clone()),
            Box::new(exec_start_delay.clone()),
            Box::new(pending_pods.clone()),
            Box::new(tls_reloads.clone()),
            Box::new(leader.clone()),
            Box::new(certificate_expiry.clone()),
            Box::new(watch_healthy.clone()),
            Box::new(watch_errors.clone()),
            Box::new(plans_rejected.clone()),
            Box::new(late_hooks.clone()),
            Box::new(exec_slots_in_use.clone()),
            Box::new(exec_slot_waiting.clone()),
            Box::new(namespace_lookups.clone()),
            Box::new(unmutated_pods.clone()),
            Box::new(restore_windows.clone()),
            Box::new(stale_restore_namespace_labels.clone()),
            Box::new(api_forbidden.clone()),
            Box::new(api_throttled.clone()),
            Box::new(api_forbidden_while_starting.clone()),
            Box::new(annotation_hooks_refused.clone()),
            Box::new(status_rollbacks.clone()),
            Box::new(webhook_connections_closed.clone()),
            Box::new(subject_access_reviews.clone()),
            Box::new(events_sent.clone()),
            Box::new(events_dropped.clone()),
        ]) {
            names.extend(c.desc().iter().map(|d| d.fq_name.clone()));
            registry.register(c).expect("metric names are unique");
        }
        for counter in [
            &admission_requests,
            &exec_hooks,
            &exec_retries,
            &tls_reloads,
            &namespace_lookups,
            &plans_rejected,
            &annotation_hooks_refused,
            &webhook_connections_closed,
            &subject_access_reviews,
            &restore_windows,
            &events_sent,
            &events_dropped,
        ] {
            for value in label_values(&counter.desc()[0].fq_name) {
                counter.with_label_values(&[*value]);
            }
        }
        for turn in label_values("restore_hooks_exec_slot_waiting") {
            exec_slot_waiting.with_label_values(&[*turn]);
        }
        Self {
            registry,
            names: names.into(),
            admission_requests,
            admission_duration,
            init_containers_injected,
            exec_hooks,
            exec_retries,
            exec_interrupted,
            exec_claims_given_back,
            exec_duration,
            exec_start_delay,
            pending_pods,
            tls_reloads,
            leader,
            certificate_expiry,
            watch_healthy,
            watch_errors,
            plans_rejected,
            late_hooks,
            exec_slots_in_use,
            exec_slot_waiting,
            namespace_lookups,
            unmutated_pods,
            restore_windows,
            stale_restore_namespace_labels,
            api_forbidden,
            api_throttled,
            api_forbidden_while_starting,
            annotation_hooks_refused,
            status_rollbacks,
            webhook_connections_closed,
            subject_access_reviews,
            events_sent,
            events_dropped,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of an unlabelled sample in the text exposition.
    fn sample(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_own_memory_cpu_and_fds_are_exposed() {
        let text = Metrics::new().render();
        let rss = sample(&text, "process_resident_memory_bytes").expect("resident memory");
        assert!(rss > 1024.0 * 1024.0, "{rss} bytes resident");
        assert!(sample(&text, "process_open_fds").is_some_and(|n| n >= 3.0));
        assert!(sample(&text, "process_cpu_seconds_total").is_some());
    }

    #[test]
    fn labelled_counters_exist_at_zero_from_the_start() {
        let text = Metrics::new().render();
        for (metric, values) in LABEL_VALUES {
            for value in *values {
                assert!(
                    text.lines()
                        .any(|l| l.starts_with(metric) && l.contains(&format!("\"{value}\"}} 0"))),
                    "{metric} {value}"
                );
            }
        }
    }
}
