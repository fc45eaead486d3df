//! The weights of the maturity score's three areas (`--maturity-weights`, the chart's
//! `maturity.weights`): 0.4, 0.4, 0.2 by default, each in [0, 1], summing to 1.

use super::Area;

/// Largest distance of the weights' sum from 1 that is taken as 1 (decimal fractions such
/// as 0.1 are not exact in binary: `0.7 + 0.2 + 0.1` is `0.9999999999999999`).
pub const SUM_TOLERANCE: f64 = 1e-9;

/// Why weights were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeightsError {
    /// Not three comma-separated numbers.
    #[error(
        "{0:?} is not three weights: give retry,deadLetter,monitoring as numbers, e.g. 0.4,0.4,0.2"
    )]
    Syntax(String),
    /// A weight outside [0, 1] (or not a number).
    #[error("the {area} weight {value} is outside 0..1: each weight is a share of the score")]
    OutOfRange {
        /// The area's name.
        area: &'static str,
        /// The weight given.
        value: f64,
    },
    /// The weights do not sum to 1.
    #[error("the weights retry {retry}, deadLetter {dead_letter} and monitoring {monitoring} sum to {sum}, not 1: the score must stay in 0..1 (e.g. 0.4,0.4,0.2)")]
    Sum {
        /// The retry weight.
        retry: f64,
        /// The dead-letter weight.
        dead_letter: f64,
        /// The monitoring weight.
        monitoring: f64,
        /// Their sum.
        sum: f64,
    },
}

/// The weights of `M = w_retry·R_retry + w_dlq·R_dlq + w_monitor·R_monitor`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// `w_retry`.
    pub retry: f64,
    /// `w_dlq`.
    pub dead_letter: f64,
    /// `w_monitor`.
    pub monitoring: f64,
}

impl Default for Weights {
    /// 0.4, 0.4, 0.2: retries and dead letters weigh twice what monitoring does.
    fn default() -> Self {
        Weights {
            retry: 0.4,
            dead_letter: 0.4,
            monitoring: 0.2,
        }
    }
}

impl Weights {
    /// Weights of retry, dead letters and monitoring.
    ///
    /// # Errors
    /// [`WeightsError::OutOfRange`] for a weight outside [0, 1] or not finite;
    /// [`WeightsError::Sum`] when they do not sum to 1 (within [`SUM_TOLERANCE`]).
    pub fn new(retry: f64, dead_letter: f64, monitoring: f64) -> Result<Self, WeightsError> {
        for (area, value) in [
            (Area::Retry, retry),
            (Area::DeadLetter, dead_letter),
            (Area::Monitoring, monitoring),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(WeightsError::OutOfRange {
                    area: area.name(),
                    value,
                });
            }
        }
        let sum = retry + dead_letter + monitoring;
        if (sum - 1.0).abs() > SUM_TOLERANCE {
            return Err(WeightsError::Sum {
                retry,
                dead_letter,
                monitoring,
                sum,
            });
        }
        Ok(Weights {
            retry,
            dead_letter,
            monitoring,
        })
    }

    /// The weight of `area`.
    pub fn of(&self, area: Area) -> f64 {
        match area {
            Area::Retry => self.retry,
            Area::DeadLetter => self.dead_letter,
            Area::Monitoring => self.monitoring,
        }
    }
}

impl Weights {
    /// The weights `status.maturity.weights` says a score was computed with, when they are
    /// valid weights (a status edited by hand may hold anything).
    pub fn from_status(w: &crate::crd::MaturityWeights) -> Option<Self> {
        Weights::new(w.retry, w.dead_letter, w.monitoring).ok()
    }
}

impl std::str::FromStr for Weights {
    type Err = WeightsError;

    /// `retry,deadLetter,monitoring`, e.g. `0.4,0.4,0.2` (spaces allowed).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let numbers: Option<Vec<f64>> = parts.iter().map(|p| p.parse::<f64>().ok()).collect();
        match numbers.as_deref() {
            Some([r, d, m]) => Weights::new(*r, *d, *m),
            _ => Err(WeightsError::Syntax(s.to_string())),
        }
    }
}

impl std::fmt::Display for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{},{}", self.retry, self.dead_letter, self.monitoring)
    }
}
