//! Prometheus metrics of the operator and its HTTP endpoints (`/metrics`, `/healthz`,
//! `/readyz`), served with axum on `--metrics-bind-address`.
//!
//! Metrics (DESIGN.md §4; names, types, labels and units also in docs/METRICS.md once the
//! monitoring metrics land):
//! - `dlq_operator_reconcile_total{kind, result}` (counter): reconciles by resource kind
//!   (`DeadLetterQueue`, `RetryPolicy`) and result (`success` or the error's metric label,
//!   e.g. `unreachable`, `invalid_spec`).
//! - `dlq_operator_reconcile_duration_seconds{kind}` (histogram, seconds): wall time of one
//!   reconcile, broker and API calls included.
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
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

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
        registry
            .register(Box::new(reconcile_total.clone()))
            .expect("metric registered once");
        registry
            .register(Box::new(reconcile_duration.clone()))
            .expect("metric registered once");
        Metrics {
            registry,
            reconcile_total,
            reconcile_duration,
        }
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
    fn readiness_reports_reason_until_ready() {
        let r = Readiness::new("waiting for CRDs");
        assert_eq!(r.reason().as_deref(), Some("waiting for CRDs"));
        r.set_ready();
        assert_eq!(r.reason(), None);
        r.set_not_ready("shutting down");
        assert_eq!(r.reason().as_deref(), Some("shutting down"));
    }
}
