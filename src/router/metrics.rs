//! The retry router's metric families (docs/METRICS.md), registered by
//! [`crate::metrics::Metrics::new`] and written by the router's workers.

use prometheus::{IntCounterVec, IntGaugeVec, Opts};

use crate::client::{ClientError, Outcome};

/// `dlq_router_messages_total`, `dlq_router_publish_failures_total` and
/// `dlq_router_consuming`. Cheap to clone (the families are shared).
#[derive(Clone)]
pub struct RouterMetrics {
    pub(crate) routed: IntCounterVec,
    pub(crate) failures: IntCounterVec,
    pub(crate) consuming: IntGaugeVec,
}

impl std::fmt::Debug for RouterMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterMetrics").finish_non_exhaustive()
    }
}

impl Default for RouterMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl RouterMetrics {
    /// The families, unregistered ([`crate::metrics::Metrics::new`] registers them).
    pub fn new() -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
        };
        RouterMetrics {
            routed: counter(
                "dlq_router_messages_total",
                "Messages the retry router took out of a DeadLetterQueue's inbox (copy confirmed, original acked), by decision (retry or dead_letter), tier (retries) and reason (dead letters).",
                &["namespace", "name", "decision", "tier", "reason"],
            ),
            failures: counter(
                "dlq_router_publish_failures_total",
                "Inbox messages the retry router could not move (copy refused, unroutable or not confirmed; the original was given back with requeue), by error.",
                &["namespace", "name", "error"],
            ),
            consuming: IntGaugeVec::new(
                Opts::new(
                    "dlq_router_consuming",
                    "1 while this process's retry router consumes the DeadLetterQueue's inbox, 0 while it is (re)connecting.",
                ),
                &["namespace", "name"],
            )
            .expect("valid metric definition"),
        }
    }

    /// Counts one message moved for `namespace/name` with `outcome`.
    pub fn record_routed(&self, namespace: &str, name: &str, outcome: &Outcome) {
        let (decision, tier, reason) = match outcome {
            Outcome::Retried { tier, .. } => ("retry", tier.as_str(), ""),
            Outcome::DeadLettered { reason } => ("dead_letter", "", reason.as_str()),
        };
        self.routed
            .with_label_values(&[namespace, name, decision, tier, reason])
            .inc();
    }

    /// Counts `count` messages moved for `namespace/name` with `decision` (`retry` or
    /// `dead_letter`), `tier` (retries) and `reason` (dead letters): the Redis router
    /// counts a sweep's moves at once.
    pub fn record_moves(
        &self,
        namespace: &str,
        name: &str,
        decision: &str,
        tier: &str,
        reason: &str,
        count: u64,
    ) {
        self.routed
            .with_label_values(&[namespace, name, decision, tier, reason])
            .inc_by(count);
    }

    /// Counts `count` messages of `namespace/name` that could not be moved, with the
    /// `error` label: the Redis router's entries the server refused (`refused`) or that
    /// were too large to copy (`oversized`).
    pub fn record_failures(&self, namespace: &str, name: &str, error: &str, count: u64) {
        self.failures
            .with_label_values(&[namespace, name, error])
            .inc_by(count);
    }

    /// Counts one message of `namespace/name` that could not be moved.
    pub fn record_failure(&self, namespace: &str, name: &str, error: &ClientError) {
        self.failures
            .with_label_values(&[namespace, name, error.metric_label()])
            .inc();
    }

    /// Sets whether the router of `namespace/name` is consuming.
    pub fn set_consuming(&self, namespace: &str, name: &str, consuming: bool) {
        self.consuming
            .with_label_values(&[namespace, name])
            .set(i64::from(consuming));
    }

    /// Total messages routed for `namespace/name` with `decision` (`retry` or
    /// `dead_letter`), over every tier and reason.
    pub fn routed_count(&self, namespace: &str, name: &str, decision: &str) -> u64 {
        use prometheus::core::Collector;
        self.routed
            .collect()
            .iter()
            .flat_map(|f| f.get_metric())
            .filter(|m| {
                let label = |n: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == n)
                        .map(|l| l.value().to_string())
                };
                label("namespace").as_deref() == Some(namespace)
                    && label("name").as_deref() == Some(name)
                    && label("decision").as_deref() == Some(decision)
            })
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    }

    /// Removes every series of `namespace/name` (its router stopped for good).
    pub fn forget(&self, namespace: &str, name: &str) {
        let _ = self.consuming.remove_label_values(&[namespace, name]);
        forget_owner(
            &self.routed,
            &["namespace", "name", "decision", "tier", "reason"],
            namespace,
            name,
        );
        forget_owner(
            &self.failures,
            &["namespace", "name", "error"],
            namespace,
            name,
        );
    }
}

/// Removes the series of `vec` (labels `labels`, in order) whose namespace and name are
/// `namespace` and `name`.
fn forget_owner(vec: &IntCounterVec, labels: &[&str], namespace: &str, name: &str) {
    use prometheus::core::Collector;
    let series: Vec<Vec<String>> = vec
        .collect()
        .iter()
        .flat_map(|f| f.get_metric())
        .map(|m| {
            labels
                .iter()
                .map(|n| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == *n)
                        .map(|l| l.value().to_string())
                        .unwrap_or_default()
                })
                .collect()
        })
        .collect();
    for values in series {
        if values[0] == namespace && values[1] == name {
            let refs: Vec<&str> = values.iter().map(String::as_str).collect();
            let _ = vec.remove_label_values(&refs);
        }
    }
}
