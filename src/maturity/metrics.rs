//! The maturity metrics (docs/METRICS.md): `dlq_maturity_score{namespace, name}` and
//! `dlq_maturity_area_score{namespace, name, area}`, both ratios in [0, 1], set by the
//! controller's backlog monitor at each poll that reads the resource, and removed with the
//! resource ([`crate::metrics::Metrics::forget_resource`]).

use prometheus::{GaugeVec, Opts};

use super::{Area, Maturity};

/// The maturity families. Cheap to clone (the families are shared).
#[derive(Clone)]
pub struct MaturityMetrics {
    pub(crate) score: GaugeVec,
    pub(crate) area: GaugeVec,
}

impl std::fmt::Debug for MaturityMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaturityMetrics").finish_non_exhaustive()
    }
}

impl Default for MaturityMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl MaturityMetrics {
    /// The families, unregistered ([`crate::metrics::Metrics::new`] registers them).
    pub fn new() -> Self {
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            GaugeVec::new(Opts::new(name, help), labels).expect("valid metric definition")
        };
        MaturityMetrics {
            score: gauge(
                "dlq_maturity_score",
                "Maturity score of a DeadLetterQueue, 0..1: weighted share of the retry, dead-letter and monitoring items that hold (docs/ARCHITECTURE.md, Maturity).",
                &["namespace", "name"],
            ),
            area: gauge(
                "dlq_maturity_area_score",
                "Share of a DeadLetterQueue's maturity items that hold in one area (retry, deadLetter, monitoring), 0..1.",
                &["namespace", "name", "area"],
            ),
        }
    }

    /// Sets the series of `namespace/name` to `m`.
    pub fn record(&self, namespace: &str, name: &str, m: &Maturity) {
        self.score
            .with_label_values(&[namespace, name])
            .set(m.score);
        for (area, value) in [
            (Area::Retry, m.retry),
            (Area::DeadLetter, m.dead_letter),
            (Area::Monitoring, m.monitoring),
        ] {
            self.area
                .with_label_values(&[namespace, name, area.name()])
                .set(value);
        }
    }

    /// Removes the series of every DeadLetterQueue (`namespace/name`) for which `keep` is
    /// false.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        use prometheus::core::Collector;
        let mut gone = Vec::new();
        for family in self.score.collect() {
            for metric in family.get_metric() {
                let label = |n: &str| {
                    metric
                        .get_label()
                        .iter()
                        .find(|l| l.name() == n)
                        .map(|l| l.value().to_string())
                        .unwrap_or_default()
                };
                let (ns, name) = (label("namespace"), label("name"));
                if !keep(&format!("{ns}/{name}")) {
                    gone.push((ns, name));
                }
            }
        }
        for (ns, name) in gone {
            self.forget(&ns, &name);
        }
    }

    /// Removes the series of `namespace/name`.
    pub fn forget(&self, namespace: &str, name: &str) {
        let _ = self.score.remove_label_values(&[namespace, name]);
        for area in Area::ALL {
            let _ = self
                .area
                .remove_label_values(&[namespace, name, area.name()]);
        }
    }
}
