//! Prometheus metrics of the operator and its HTTP endpoints (`/metrics`, `/healthz`,
//! `/readyz`), served with axum on `--metrics-bind-address`.
//!
//! Metrics (docs/METRICS.md: names, types, labels and units):
//! - `dlq_operator_reconcile_total{kind, result}` (counter): reconciles by resource kind
//!   (`DeadLetterQueue`, `RetryPolicy`) and result (`success` or the error's metric label,
//!   e.g. `unreachable`, `invalid_spec`).
//! - `dlq_operator_reconcile_duration_seconds{kind}` (histogram, seconds): wall time of one
//!   reconcile, broker and API calls included.
//! - `dlq_replayed_messages_total{namespace, name, outcome}` (counter, messages): what the
//!   DeadLetterReplays of the DeadLetterQueue `namespace/name` did with matching messages,
//!   `outcome` = `replayed` (copy confirmed, original removed), `skipped` (kept on purpose)
//!   or `failed` (copy refused or unroutable; kept). From the replay engine's report at
//!   each checkpoint and at the end of a run, as differences (a resumed replay adds only
//!   what its new run did; a message skipped again by a resumed run counts again).
//! - `dlq_router_inbox_consumers{namespace, name}` (gauge, consumers): consumers of the
//!   router inbox of a DeadLetterQueue in router mode, from the depth listing; absent
//!   while unknown.
//! - `dlq_compensation_success_ratio{namespace, name}` (gauge, ratio): messages replayed ÷
//!   messages dead-lettered into the DeadLetterQueue's dead-letter queues over the last hour
//!   ([`crate::compensation`]: source, window, bounds); absent while nothing was
//!   dead-lettered in the window.
//! - `dlq_broker_up{namespace, name}` (gauge, 0 or 1): whether the last poll could read
//!   the DeadLetterQueue's queue depths; 0 while its depth series are absent.
//! - `dlq_maturity_score{namespace, name}` and `dlq_maturity_area_score{…, area}` (gauges,
//!   0..1): the maturity score ([`crate::maturity::metrics`]).
//!
//! Health: `/healthz` answers 200 while the process serves HTTP (liveness); `/readyz`
//! answers 200 once the operator is ready to work (CRDs found, and either leading or
//! standing by for the lease) and 503 before, with the reason in the body.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::core::Collector;
use prometheus::proto::MetricType;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::compensation::Window;
use crate::lock::Locked;

/// Buckets of `dlq_operator_reconcile_duration_seconds`, in seconds: a reconcile makes a few
/// API server and management-API calls (milliseconds) and can wait on a broker timeout
/// (~10 s).
pub const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The operator's metric registry and its metric families.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    reconcile_total: IntCounterVec,
    reconcile_duration: HistogramVec,
    backlog: BacklogMetrics,
    replays: ReplayMetrics,
    router: crate::router::RouterMetrics,
    maturity: crate::maturity::metrics::MaturityMetrics,
    /// Every collector [`Metrics::new`] registered, for [`Metrics::exported_names`].
    collectors: Arc<[Box<dyn Collector>]>,
}

/// One queue's depth for [`Metrics::record_backlog`].
#[derive(Debug, Clone, Copy)]
pub struct QueueSample<'a> {
    /// Queue name.
    pub queue: &'a str,
    /// `source`, `retry` or `dead_letter`.
    pub role: &'a str,
    /// Tier (e.g. `5s`) for retry queues, empty otherwise.
    pub tier: &'a str,
    /// Messages (ready + unacknowledged).
    pub depth: u64,
}

/// Queue label sets (`queue`, `role`, `tier`) written per `(namespace, name)`.
type WrittenSeries = std::collections::BTreeMap<(String, String), Vec<[String; 3]>>;

/// The per-resource backlog families (docs/ARCHITECTURE.md, "Monitoring and alerting") and the label sets written, so that a
/// resource's series can be removed with it.
#[derive(Clone)]
struct BacklogMetrics {
    depth: prometheus::GaugeVec,
    baseline: prometheus::GaugeVec,
    threshold: prometheus::GaugeVec,
    ratio: prometheus::GaugeVec,
    alert_state: prometheus::GaugeVec,
    growth: prometheus::GaugeVec,
    inbox_consumers: prometheus::GaugeVec,
    /// `dlq_broker_up`: kept while the depths are unknown (it says so), unlike the others.
    broker_up: prometheus::GaugeVec,
    written: std::sync::Arc<std::sync::Mutex<WrittenSeries>>,
}

/// A gauge family (never fails: the names and labels are fixed and valid).
fn gauge(name: &str, help: &str, labels: &[&str]) -> prometheus::GaugeVec {
    prometheus::GaugeVec::new(Opts::new(name, help), labels).expect("valid metric definition")
}

/// The labels of a per-resource series: the DeadLetterQueue's namespace and name.
const PER_RESOURCE: [&str; 2] = ["namespace", "name"];

impl BacklogMetrics {
    /// The backlog families, unregistered, with no label set written.
    fn new() -> Self {
        BacklogMetrics {
            depth: gauge(
                "dlq_queue_depth",
                "Messages (ready + unacknowledged) in a managed queue.",
                &["namespace", "name", "queue", "role", "tier"],
            ),
            baseline: gauge(
                "dlq_backlog_baseline",
                "Baseline depth of the dead-letter backlog (messages).",
                &PER_RESOURCE,
            ),
            threshold: gauge(
                "dlq_backlog_threshold",
                "Threshold depth of the dead-letter backlog (messages).",
                &PER_RESOURCE,
            ),
            ratio: gauge(
                "dlq_backlog_ratio",
                "Backlog ratio (D - B) / max(T - B, minHeadroom); 1 is the threshold.",
                &PER_RESOURCE,
            ),
            alert_state: gauge(
                "dlq_backlog_alert_state",
                "Backlog alert state: 0 inactive, 1 pending, 2 firing.",
                &PER_RESOURCE,
            ),
            growth: gauge(
                "dlq_growth_per_minute",
                "Dead-letter growth over the last 5 minutes (messages per minute).",
                &PER_RESOURCE,
            ),
            inbox_consumers: gauge(
                "dlq_router_inbox_consumers",
                "Consumers of the DeadLetterQueue's router inbox as the broker reports them (router mode; absent while unknown). 0: no retry router consumes it, failed messages wait there.",
                &PER_RESOURCE,
            ),
            broker_up: gauge(
                "dlq_broker_up",
                "1 when the last poll read the DeadLetterQueue's queue depths from its broker, 0 when it could not (its depth series are then absent: unknown, not zero).",
                &PER_RESOURCE,
            ),
            written: Default::default(),
        }
    }

    /// Every backlog family.
    fn gauges(&self) -> [&prometheus::GaugeVec; 8] {
        [
            &self.broker_up,
            &self.depth,
            &self.baseline,
            &self.threshold,
            &self.ratio,
            &self.alert_state,
            &self.growth,
            &self.inbox_consumers,
        ]
    }
}

/// Messages a replay run handled since its last report, for
/// [`Metrics::record_replayed`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayDelta {
    /// Copies confirmed by the broker, originals removed.
    pub replayed: u64,
    /// Matched messages kept on purpose.
    pub skipped: u64,
    /// Matched messages whose copy the broker refused or could not route (kept).
    pub failed: u64,
}

/// The replay families: `dlq_replayed_messages_total`, `dlq_compensation_success_ratio`,
/// and each DeadLetterQueue's ratio window.
#[derive(Clone)]
struct ReplayMetrics {
    total: IntCounterVec,
    ratio: prometheus::GaugeVec,
    windows: Arc<std::sync::Mutex<std::collections::BTreeMap<(String, String), Window>>>,
}

impl ReplayMetrics {
    /// The replay families, unregistered, with no window yet.
    fn new() -> Self {
        ReplayMetrics {
            total: IntCounterVec::new(
                Opts::new(
                    "dlq_replayed_messages_total",
                    "Messages handled by the DeadLetterReplays of a DeadLetterQueue, by outcome: replayed (copy confirmed, original removed), skipped (kept on purpose), failed (copy refused or unroutable; kept).",
                ),
                &["namespace", "name", "outcome"],
            )
            .expect("valid metric definition"),
            ratio: gauge(
                "dlq_compensation_success_ratio",
                "Messages replayed / messages dead-lettered into the DeadLetterQueue's dead-letter queues over the last hour (arrivals from depth change plus replays); absent while nothing was dead-lettered.",
                &PER_RESOURCE,
            ),
            windows: Default::default(),
        }
    }

    /// Sets (or removes, when absent) the ratio series of `key` from its window.
    fn publish_ratio(&self, key: &(String, String), window: Option<&Window>) {
        let labels = [key.0.as_str(), key.1.as_str()];
        match window.and_then(Window::ratio) {
            Some(r) => self.ratio.with_label_values(&labels).set(r),
            None => {
                let _ = self.ratio.remove_label_values(&labels);
            }
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric family registered (no series yet).
    pub fn new() -> Self {
        let registry = Registry::new();
        let reconcile_total = IntCounterVec::new(
            Opts::new(
                "dlq_operator_reconcile_total",
                "Reconciles by resource kind and result (success or the error's label).",
            ),
            &["kind", "result"],
        )
        .expect("valid metric definition");
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                "dlq_operator_reconcile_duration_seconds",
                "Wall time of one reconcile in seconds, API and broker calls included.",
            )
            .buckets(RECONCILE_BUCKETS.to_vec()),
            &["kind"],
        )
        .expect("valid metric definition");
        let backlog = BacklogMetrics::new();
        let replays = ReplayMetrics::new();
        let mut collectors: Vec<Box<dyn Collector>> = Vec::new();
        register(&registry, &mut collectors, &reconcile_total);
        register(&registry, &mut collectors, &reconcile_duration);
        for g in backlog.gauges() {
            register(&registry, &mut collectors, g);
        }
        register(&registry, &mut collectors, &replays.total);
        register(&registry, &mut collectors, &replays.ratio);
        let router = crate::router::RouterMetrics::new();
        register(&registry, &mut collectors, &router.routed);
        register(&registry, &mut collectors, &router.failures);
        register(&registry, &mut collectors, &router.consuming);
        let maturity = crate::maturity::metrics::MaturityMetrics::new();
        register(&registry, &mut collectors, &maturity.score);
        register(&registry, &mut collectors, &maturity.area);
        Metrics {
            registry,
            reconcile_total,
            reconcile_duration,
            backlog,
            replays,
            router,
            maturity,
            collectors: collectors.into(),
        }
    }

    /// Records one poll of the resource `namespace/name`: every queue's depth (explicit
    /// 0 for an empty queue) and the evaluation of its dead-letter backlog. Series that
    /// are not configured (no threshold) or not known yet (growth) are left out.
    pub fn record_backlog(
        &self,
        namespace: &str,
        name: &str,
        queues: &[QueueSample<'_>],
        eval: &crate::monitor::Evaluation,
    ) {
        let b = &self.backlog;
        let mut written = b.written.locked();
        let sets = written
            .entry((namespace.to_string(), name.to_string()))
            .or_default();
        for q in queues {
            b.depth
                .with_label_values(&[namespace, name, q.queue, q.role, q.tier])
                .set(q.depth as f64);
            let set = [q.queue.to_string(), q.role.to_string(), q.tier.to_string()];
            if !sets.contains(&set) {
                sets.push(set);
            }
        }
        let labels = [namespace, name];
        b.baseline.with_label_values(&labels).set(eval.baseline);
        b.alert_state
            .with_label_values(&labels)
            .set(f64::from(eval.state.code()));
        match (eval.threshold, eval.ratio) {
            (Some(t), Some(r)) => {
                b.threshold.with_label_values(&labels).set(t);
                b.ratio.with_label_values(&labels).set(r);
            }
            _ => {
                let _ = b.threshold.remove_label_values(&labels);
                let _ = b.ratio.remove_label_values(&labels);
            }
        }
        if let Some(g) = eval.growth_per_minute {
            b.growth.with_label_values(&labels).set(g);
        }
    }

    /// Sets `dlq_router_inbox_consumers{namespace, name}` to the consumers of the router
    /// inbox of `namespace/name`, or removes it when `None` (not in router mode, or the
    /// count is unknown: unknown is not 0). Removed with the other backlog series
    /// ([`Metrics::forget_backlog`]).
    pub fn record_inbox_consumers(&self, namespace: &str, name: &str, consumers: Option<u64>) {
        let gauge = &self.backlog.inbox_consumers;
        let labels = [namespace, name];
        match consumers {
            Some(n) => gauge.with_label_values(&labels).set(n as f64),
            None => {
                let _ = gauge.remove_label_values(&labels);
            }
        }
    }

    /// Sets `dlq_broker_up{namespace, name}`: whether the last poll of `namespace/name`
    /// read its broker. Kept by [`Metrics::forget_backlog`] (an unknown backlog is when it
    /// matters), removed by [`Metrics::forget_resource`] and
    /// [`Metrics::retain_broker_up`].
    pub fn record_broker_up(&self, namespace: &str, name: &str, up: bool) {
        self.backlog
            .broker_up
            .with_label_values(&[namespace, name])
            .set(if up { 1.0 } else { 0.0 });
    }

    /// Removes the `dlq_broker_up` series of every resource for which `keep`
    /// (`namespace/name`) is false.
    pub fn retain_broker_up(&self, keep: impl Fn(&str) -> bool) {
        let gauge = &self.backlog.broker_up;
        for family in gauge.collect() {
            for m in family.get_metric() {
                let label = |n: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == n)
                        .map(|l| l.value().to_string())
                        .unwrap_or_default()
                };
                let (ns, name) = (label("namespace"), label("name"));
                if !keep(&format!("{ns}/{name}")) {
                    let _ = gauge.remove_label_values(&[&ns, &name]);
                }
            }
        }
    }

    /// Removes every backlog series of `namespace/name` and its compensation ratio
    /// (resource deleted, or its data unknown: the `absent` alert then covers it), but not
    /// `dlq_broker_up` ([`Metrics::record_broker_up`]). The ratio's window is kept: the
    /// next sample brings the ratio back.
    pub fn forget_backlog(&self, namespace: &str, name: &str) {
        let b = &self.backlog;
        let mut written = b.written.locked();
        if let Some(sets) = written.remove(&(namespace.to_string(), name.to_string())) {
            for [queue, role, tier] in sets {
                let _ = b
                    .depth
                    .remove_label_values(&[namespace, name, &queue, &role, &tier]);
            }
        }
        let labels = [namespace, name];
        for g in [
            &b.baseline,
            &b.threshold,
            &b.ratio,
            &b.alert_state,
            &b.growth,
            &b.inbox_consumers,
            &self.replays.ratio,
        ] {
            let _ = g.remove_label_values(&labels);
        }
    }

    /// Records what a replay of the DeadLetterQueue `namespace/name` did since its last
    /// report, at `now_ms` (ms since the Unix epoch): `dlq_replayed_messages_total` by
    /// outcome (every outcome's series is written, 0 included), and the replayed messages
    /// in the DeadLetterQueue's compensation window.
    pub fn record_replayed(&self, namespace: &str, name: &str, delta: ReplayDelta, now_ms: u64) {
        let r = &self.replays;
        for (outcome, n) in [
            ("replayed", delta.replayed),
            ("skipped", delta.skipped),
            ("failed", delta.failed),
        ] {
            r.total
                .with_label_values(&[namespace, name, outcome])
                .inc_by(n);
        }
        let mut windows = r.windows.locked();
        windows
            .entry((namespace.to_string(), name.to_string()))
            .or_default()
            .replayed(now_ms, delta.replayed);
    }

    /// Value of `dlq_replayed_messages_total{namespace, name, outcome}` (0 when never
    /// recorded).
    pub fn replayed_count(&self, namespace: &str, name: &str, outcome: &str) -> u64 {
        self.replays
            .total
            .get_metric_with_label_values(&[namespace, name, outcome])
            .map(|c| c.get())
            .unwrap_or(0)
    }

    /// Records the summed depth of the dead-letter queues of `namespace/name` (messages)
    /// sampled at `now_ms` and updates `dlq_compensation_success_ratio` (set, or removed
    /// while nothing was dead-lettered in the window).
    pub fn record_dead_letter_depth(&self, namespace: &str, name: &str, now_ms: u64, depth: u64) {
        let r = &self.replays;
        let key = (namespace.to_string(), name.to_string());
        let mut windows = r.windows.locked();
        let window = windows.entry(key.clone()).or_default();
        window.depth(now_ms, depth);
        r.publish_ratio(&key, Some(window));
    }

    /// Forgets the compensation window and ratio of every DeadLetterQueue for which `keep`
    /// (given `namespace/name`) is false (no longer watched).
    pub fn retain_compensation(&self, keep: impl Fn(&str) -> bool) {
        let r = &self.replays;
        let mut windows = r.windows.locked();
        let gone: Vec<(String, String)> = windows
            .keys()
            .filter(|(ns, name)| !keep(&format!("{ns}/{name}")))
            .cloned()
            .collect();
        for key in gone {
            windows.remove(&key);
            r.publish_ratio(&key, None);
        }
    }

    /// Forgets everything about the DeadLetterQueue `namespace/name` (deleted): its backlog
    /// series, its compensation window and ratio, its `dlq_replayed_messages_total`
    /// series and its maturity series.
    pub fn forget_resource(&self, namespace: &str, name: &str) {
        self.forget_backlog(namespace, name);
        let _ = self
            .backlog
            .broker_up
            .remove_label_values(&[namespace, name]);
        self.maturity.forget(namespace, name);
        let r = &self.replays;
        r.windows
            .locked()
            .remove(&(namespace.to_string(), name.to_string()));
        for outcome in ["replayed", "skipped", "failed"] {
            let _ = r.total.remove_label_values(&[namespace, name, outcome]);
        }
    }

    /// Resources with backlog series, as `(namespace, name)`.
    pub fn backlog_resources(&self) -> Vec<(String, String)> {
        self.backlog.written.locked().keys().cloned().collect()
    }

    /// Records one reconcile of a resource of `kind` with `result` (`success` or an error's
    /// metric label) that took `seconds`.
    pub fn record_reconcile(&self, kind: &str, result: &str, seconds: f64) {
        self.reconcile_total
            .with_label_values(&[kind, result])
            .inc();
        self.reconcile_duration
            .with_label_values(&[kind])
            .observe(seconds);
    }

    /// Value of `dlq_operator_reconcile_total{kind, result}` (0 when never recorded).
    pub fn reconcile_count(&self, kind: &str, result: &str) -> u64 {
        self.reconcile_total
            .get_metric_with_label_values(&[kind, result])
            .map(|c| c.get())
            .unwrap_or(0)
    }

    /// Every sample name `/metrics` can export, sorted: the `fq_name` of each registered
    /// collector's descriptors, with a histogram's `_bucket`, `_sum` and `_count` in place
    /// of its family name (and a summary's quantile samples under the family name, plus
    /// `_sum` and `_count`). Derived from the collectors [`Metrics::new`] registers, so it
    /// cannot drift from what is exported; families that other modules add through
    /// [`Metrics::registry`] are not included. The dashboard test
    /// (`tests/dashboard.rs`) checks every metric a Grafana query selects against it.
    pub fn exported_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for c in self.collectors.iter() {
            let families = c.collect();
            for desc in c.desc() {
                let kind = families
                    .iter()
                    .find(|f| f.name() == desc.fq_name)
                    .map(|f| f.get_field_type());
                names.extend(sample_names(&desc.fq_name, kind));
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// The retry router's families (`dlq_router_*`), for a [`crate::router::Fleet`].
    pub fn router(&self) -> &crate::router::RouterMetrics {
        &self.router
    }

    /// The maturity families (`dlq_maturity_*`).
    pub fn maturity(&self) -> &crate::maturity::metrics::MaturityMetrics {
        &self.maturity
    }

    /// The registry, for other modules to register their families.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Every metric in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        // Encoding into a Vec cannot fail for well-formed families.
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// Registers `c` in `registry` and keeps a handle on it in `collectors`.
fn register<C: Collector + Clone + 'static>(
    registry: &Registry,
    collectors: &mut Vec<Box<dyn Collector>>,
    c: &C,
) {
    registry
        .register(Box::new(c.clone()))
        .expect("metric registered once");
    collectors.push(Box::new(c.clone()));
}

/// The sample names of family `name` of type `kind` in the text exposition format.
fn sample_names(name: &str, kind: Option<MetricType>) -> Vec<String> {
    let suffixed = |suffixes: &[&str]| suffixes.iter().map(|s| format!("{name}{s}")).collect();
    match kind {
        Some(MetricType::HISTOGRAM) => suffixed(&["_bucket", "_sum", "_count"]),
        Some(MetricType::SUMMARY) => suffixed(&["", "_sum", "_count"]),
        Some(MetricType::COUNTER | MetricType::GAUGE | MetricType::UNTYPED) | None => {
            vec![name.to_string()]
        }
    }
}

/// Readiness shared between the controller and `/readyz`: `None` when ready, otherwise
/// why not.
#[derive(Debug, Clone)]
pub struct Readiness(Arc<RwLock<Option<String>>>);

impl Readiness {
    /// Not ready, for `reason`.
    pub fn new(reason: &str) -> Self {
        Readiness(Arc::new(RwLock::new(Some(reason.to_string()))))
    }

    /// Marks ready.
    pub fn set_ready(&self) {
        if let Ok(mut r) = self.0.write() {
            *r = None;
        }
    }

    /// Marks not ready, for `reason`.
    pub fn set_not_ready(&self, reason: &str) {
        if let Ok(mut r) = self.0.write() {
            *r = Some(reason.to_string());
        }
    }

    /// `None` when ready, otherwise the reason.
    pub fn reason(&self) -> Option<String> {
        self.0
            .read()
            .map(|r| r.clone())
            .unwrap_or(Some("lock poisoned".into()))
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    readiness: Readiness,
}

/// The HTTP router: `GET /metrics`, `/healthz`, `/readyz`.
pub fn router(metrics: Metrics, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz_handler))
        .with_state(AppState { metrics, readiness })
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

async fn readyz_handler(State(state): State<AppState>) -> impl IntoResponse {
    match state.readiness.reason() {
        None => (StatusCode::OK, "ok".to_string()),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// Binds `addr` and returns the bound address (useful with port 0) and the server
/// future, which runs until `shutdown` completes.
///
/// # Errors
/// The bind error (address in use, permission), naming the address.
pub async fn bind(
    addr: SocketAddr,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(
    SocketAddr,
    impl std::future::Future<Output = std::io::Result<()>>,
)> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("--metrics-bind-address {addr}: {e}"))
    })?;
    let local = listener.local_addr()?;
    let app = router(metrics, readiness);
    let server = async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    };
    Ok((local, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_renders_reconciles() {
        let m = Metrics::new();
        m.record_reconcile("DeadLetterQueue", "success", 0.02);
        m.record_reconcile("DeadLetterQueue", "unreachable", 0.5);
        m.record_reconcile("DeadLetterQueue", "success", 0.03);
        assert_eq!(m.reconcile_count("DeadLetterQueue", "success"), 2);
        assert_eq!(m.reconcile_count("RetryPolicy", "success"), 0);
        let text = m.render();
        assert!(text.contains(
            "dlq_operator_reconcile_total{kind=\"DeadLetterQueue\",result=\"unreachable\"} 1"
        ));
        assert!(text
            .contains("dlq_operator_reconcile_duration_seconds_count{kind=\"DeadLetterQueue\"} 3"));
    }

    #[test]
    fn backlog_series_are_explicit_and_removed_with_the_resource() {
        let m = Metrics::new();
        let p = crate::monitor::Params::from_spec(
            &serde_json::from_value(serde_json::json!({"threshold": 100})).expect("spec"),
        )
        .expect("params");
        let eval = crate::monitor::Evaluator::new(p).observe(0, 0);
        let queues = [
            QueueSample {
                queue: "q",
                role: "source",
                tier: "",
                depth: 0,
            },
            QueueSample {
                queue: "q.retry.5s",
                role: "retry",
                tier: "5s",
                depth: 0,
            },
            QueueSample {
                queue: "q.dlq",
                role: "dead_letter",
                tier: "",
                depth: 0,
            },
        ];
        m.record_backlog("ns", "q", &queues, &eval);
        let text = m.render();
        assert!(text.contains(r#"dlq_queue_depth{name="q",namespace="ns",queue="q.dlq",role="dead_letter",tier=""} 0"#), "{text}");
        assert!(text.contains(r#"dlq_backlog_ratio{name="q",namespace="ns"} 0"#));
        assert!(text.contains(r#"dlq_backlog_threshold{name="q",namespace="ns"} 100"#));
        assert!(text.contains(r#"dlq_backlog_alert_state{name="q",namespace="ns"} 0"#));
        m.forget_backlog("ns", "q");
        let text = m.render();
        assert!(!text.contains(r#"namespace="ns""#), "{text}");
        assert!(m.backlog_resources().is_empty());
    }

    #[test]
    fn exported_names_are_the_sample_names_of_the_registered_families() {
        let m = Metrics::new();
        let names = m.exported_names();
        for n in [
            "dlq_backlog_ratio",
            "dlq_queue_depth",
            "dlq_operator_reconcile_total",
            "dlq_operator_reconcile_duration_seconds_bucket",
            "dlq_operator_reconcile_duration_seconds_sum",
            "dlq_operator_reconcile_duration_seconds_count",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
        assert!(!names
            .iter()
            .any(|x| x == "dlq_operator_reconcile_duration_seconds"));
        // Every sample `/metrics` renders, once each family has a series, is listed.
        m.record_reconcile("DeadLetterQueue", "success", 0.02);
        let p = crate::monitor::Params::from_spec(
            &serde_json::from_value(serde_json::json!({"threshold": 100})).expect("spec"),
        )
        .expect("params");
        let eval = crate::monitor::Evaluator::new(p).observe(0, 0);
        let queue = QueueSample {
            queue: "q.dlq",
            role: "dead_letter",
            tier: "",
            depth: 3,
        };
        m.record_backlog("ns", "q", &[queue], &eval);
        m.record_dead_letter_depth("ns", "q", 0, 0);
        m.record_dead_letter_depth("ns", "q", 60_000, 3);
        m.record_replayed("ns", "q", ReplayDelta::default(), 60_000);
        let text = m.render();
        let rendered: std::collections::BTreeSet<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        assert!(rendered.len() >= 10, "{text}");
        for n in &rendered {
            assert!(names.iter().any(|x| x == n), "{n} rendered but not listed");
        }
    }

    #[test]
    fn replay_counters_and_the_compensation_ratio_follow_their_resource() {
        let m = Metrics::new();
        let names = m.exported_names();
        for n in [
            "dlq_replayed_messages_total",
            "dlq_compensation_success_ratio",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
        m.record_dead_letter_depth("ns", "q", 0, 10);
        m.record_dead_letter_depth("ns", "q", 60_000, 10);
        assert!(
            !m.render().contains("dlq_compensation_success_ratio{"),
            "absent while nothing was dead-lettered"
        );
        let delta = ReplayDelta {
            replayed: 4,
            skipped: 1,
            failed: 0,
        };
        m.record_replayed("ns", "q", delta, 61_000);
        m.record_replayed("ns", "q", delta, 62_000);
        assert_eq!(m.replayed_count("ns", "q", "replayed"), 8);
        assert_eq!(m.replayed_count("ns", "q", "skipped"), 2);
        // 8 replayed out, depth 10 -> 6: 4 dead-lettered meanwhile.
        m.record_dead_letter_depth("ns", "q", 120_000, 6);
        let text = m.render();
        assert!(
            text.contains(
                r#"dlq_replayed_messages_total{name="q",namespace="ns",outcome="failed"} 0"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"dlq_compensation_success_ratio{name="q",namespace="ns"} 2"#),
            "{text}"
        );
        // Unknown depths remove the ratio, not the counters; the next sample restores it.
        m.forget_backlog("ns", "q");
        assert!(!m.render().contains("dlq_compensation_success_ratio{"));
        m.record_dead_letter_depth("ns", "q", 180_000, 6);
        assert!(m.render().contains("dlq_compensation_success_ratio{"));
        // No longer watched: the window and the ratio go, the counters stay.
        m.retain_compensation(|k| k != "ns/q");
        let text = m.render();
        assert!(!text.contains("dlq_compensation_success_ratio{"), "{text}");
        assert_eq!(m.replayed_count("ns", "q", "replayed"), 8);
        // Deleted: everything goes.
        m.forget_resource("ns", "q");
        assert!(!m.render().contains(r#"namespace="ns""#));
    }

    #[test]
    fn readiness_reports_reason_until_ready() {
        let r = Readiness::new("waiting for CRDs");
        assert_eq!(r.reason().as_deref(), Some("waiting for CRDs"));
        r.set_ready();
        assert_eq!(r.reason(), None);
        r.set_not_ready("shutting down");
        assert_eq!(r.reason().as_deref(), Some("shutting down"));
    }
}
