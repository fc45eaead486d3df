//! Backoff strategies, the nominal schedule, tier resolution, retry decisions and the
//! thundering-herd simulation. Pure: randomness comes from an injected [`rand::Rng`], so a
//! seeded generator gives reproducible results.
//!
//! Attempt numbers are 1-based: attempt `n` is the `n`-th retry after the first failure.
//! All delays are in **milliseconds**.
//!
//! Formulas (`initial`, `mult`, `max` from `spec.backoff`, `exp(n) = initial·mult^(n−1)`):
//! - `Fixed`: `initial`.
//! - `Exponential`: `min(exp(n), max)`.
//! - `ExponentialJitter`: `min(exp(n) + U(0, jitter), max)`, or with `jitterRatio`
//!   `min(exp(n) + U(0, ratio·exp(n)), max)` (docs/REFERENCE.md).
//! - `FullJitter`: `U(0, min(exp(n), max))`.
//! - `EqualJitter`: `t/2 + U(0, t/2)` with `t = min(exp(n), max)`.
//! - `DecorrelatedJitter`: `min(max, U(initial, 3·previous))`, `previous` starting at
//!   `initial`.
//!
//! The three jitter variants follow Marc Brooker, "Exponential Backoff And Jitter", AWS
//! Architecture Blog, 2015 (the decorrelated factor 3 is the paper's). `U(a, b)` is a
//! uniform integer in `[a, b]` inclusive.

use std::collections::HashMap;

use rand::Rng;
use serde::Serialize;

use crate::crd::{
    BackoffSpec, BackoffStrategy, Classification, ErrorClass, InvalidSpec, RetryPolicySpec,
};
use crate::duration::format_ms;

/// Most retry tiers (delay queues) one policy may have, explicit or derived (as the
/// schema's `maxItems` for `spec.tiers`).
pub const MAX_TIERS: usize = 32;

/// Random delay added by `ExponentialJitter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// No jitter.
    None,
    /// Up to this many milliseconds.
    Absolute(u64),
    /// Up to this fraction (0..=1) of the uncapped exponential delay.
    Ratio(f64),
}

/// Validated backoff parameters (milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    /// Strategy.
    pub strategy: BackoffStrategy,
    /// First delay, ms (> 0).
    pub initial_ms: u64,
    /// Growth per attempt (≥ 1).
    pub multiplier: f64,
    /// Cap, ms (≥ `initial_ms`).
    pub max_ms: u64,
    /// `ExponentialJitter`'s jitter.
    pub jitter: Jitter,
}

impl Backoff {
    /// Builds validated parameters from `spec.backoff`.
    ///
    /// # Errors
    /// [`InvalidSpec`] naming the bad field (see [`RetryPolicySpec::validate`]).
    pub fn from_spec(spec: &BackoffSpec) -> Result<Self, InvalidSpec> {
        let wrapper = RetryPolicySpec {
            max_retries: 0,
            backoff: spec.clone(),
            max_retry_duration: None,
            tiers: None,
            classification: Classification::default(),
        };
        wrapper.validate()?;
        Ok(Self::from_valid(spec))
    }

    /// Builds parameters from a spec already checked by [`RetryPolicySpec::validate`].
    fn from_valid(spec: &BackoffSpec) -> Self {
        let jitter = match (&spec.jitter, spec.jitter_ratio) {
            (Some(j), _) => Jitter::Absolute(j.as_ms().unwrap_or(0)),
            (None, Some(r)) => Jitter::Ratio(r),
            (None, None) => Jitter::None,
        };
        Backoff {
            strategy: spec.strategy,
            initial_ms: spec.initial_delay.as_ms().unwrap_or(1),
            multiplier: spec.multiplier,
            max_ms: spec.max_delay.as_ms().unwrap_or(1),
            jitter,
        }
    }

    /// Uncapped exponential delay `initial·mult^(n−1)` in ms, saturating at `u64::MAX`.
    fn exponential_uncapped(&self, attempt: u32) -> f64 {
        let n = attempt.max(1) - 1;
        let v = self.initial_ms as f64 * self.multiplier.powi(n.min(i32::MAX as u32) as i32);
        if v.is_finite() {
            v
        } else {
            f64::MAX
        }
    }

    fn cap(&self, v: f64) -> u64 {
        if v >= self.max_ms as f64 {
            self.max_ms
        } else {
            v.max(0.0) as u64
        }
    }

    /// Nominal delay (ms) of attempt `n` (1-based): `initial` for `Fixed`, otherwise
    /// `min(initial·mult^(n−1), max)` — the delay without any jitter. Never decreases with
    /// `n` and never exceeds `max_ms`.
    pub fn nominal_ms(&self, attempt: u32) -> u64 {
        match self.strategy {
            BackoffStrategy::Fixed => self.initial_ms.min(self.max_ms),
            BackoffStrategy::Exponential
            | BackoffStrategy::ExponentialJitter
            | BackoffStrategy::FullJitter
            | BackoffStrategy::EqualJitter
            | BackoffStrategy::DecorrelatedJitter => self.cap(self.exponential_uncapped(attempt)),
        }
    }

    /// Inclusive bounds `(low, high)` in ms of the delay of attempt `n`, given the previous
    /// delay (`DecorrelatedJitter` only; `None` for the first retry).
    pub fn bounds_ms(&self, attempt: u32, previous_ms: Option<u64>) -> (u64, u64) {
        let nominal = self.nominal_ms(attempt);
        match self.strategy {
            BackoffStrategy::Fixed | BackoffStrategy::Exponential => (nominal, nominal),
            BackoffStrategy::ExponentialJitter => {
                let base = self.exponential_uncapped(attempt);
                let extra = match self.jitter {
                    Jitter::None => 0.0,
                    Jitter::Absolute(j) => j as f64,
                    Jitter::Ratio(r) => r * base,
                };
                (self.cap(base), self.cap(base + extra))
            }
            BackoffStrategy::FullJitter => (0, nominal),
            BackoffStrategy::EqualJitter => (nominal / 2, nominal),
            BackoffStrategy::DecorrelatedJitter => {
                let prev = previous_ms.unwrap_or(self.initial_ms);
                let high = prev.saturating_mul(3).max(self.initial_ms);
                (self.initial_ms.min(self.max_ms), high.min(self.max_ms))
            }
        }
    }

    /// Delay (ms) of attempt `n` drawn with `rng`; `previous_ms` is the delay of attempt
    /// `n−1` (used by `DecorrelatedJitter`; `None` for the first retry). Always within
    /// [`Backoff::bounds_ms`].
    pub fn delay_ms<R: Rng + ?Sized>(
        &self,
        attempt: u32,
        previous_ms: Option<u64>,
        rng: &mut R,
    ) -> u64 {
        let (low, high) = self.bounds_ms(attempt, previous_ms);
        match self.strategy {
            BackoffStrategy::Fixed | BackoffStrategy::Exponential => low,
            BackoffStrategy::EqualJitter => {
                // t/2 + U(0, t − t/2): exactly t at the top even for odd t.
                let nominal = high;
                let half = nominal / 2;
                half + rng.random_range(0..=nominal - half)
            }
            BackoffStrategy::ExponentialJitter
            | BackoffStrategy::FullJitter
            | BackoffStrategy::DecorrelatedJitter => rng.random_range(low..=high),
        }
    }

    /// Upper bound (ms) of the delay of attempt `n` over every possible previous delay.
    pub fn worst_case_ms(&self, attempt: u32) -> u64 {
        match self.strategy {
            BackoffStrategy::DecorrelatedJitter => {
                // The largest previous delay is itself the worst case of attempt n−1.
                let mut worst = self.initial_ms;
                for n in 1..=attempt {
                    worst = self.bounds_ms(n, if n == 1 { None } else { Some(worst) }).1;
                }
                worst
            }
            BackoffStrategy::Fixed
            | BackoffStrategy::Exponential
            | BackoffStrategy::ExponentialJitter
            | BackoffStrategy::FullJitter
            | BackoffStrategy::EqualJitter => self.bounds_ms(attempt, None).1,
        }
    }
}

/// Why a message goes to the dead-letter queue (`dlq-reason` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DeadLetterReason {
    /// It failed `maxRetries` retries.
    MaxRetriesExceeded,
    /// Its error class is not retried.
    NonRetryable,
    /// Retrying it again would end past `maxRetryDuration`.
    RetryWindowExceeded,
    /// Its time-to-live ran out in the source queue before any consumer got it (RabbitMQ
    /// `x-death` reason `expired`, seen by the retry router). Not a processing failure:
    /// its publisher declared it stale, so it is never retried.
    Expired,
    /// The source queue was full and dropped it (`x-death` reason `maxlen`: max-length
    /// with overflow `drop-head`, seen by the retry router). Never retried: putting it
    /// back into a full queue would push out another message.
    MaxLength,
}

impl DeadLetterReason {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::MaxRetriesExceeded => "MaxRetriesExceeded",
            DeadLetterReason::NonRetryable => "NonRetryable",
            DeadLetterReason::RetryWindowExceeded => "RetryWindowExceeded",
            DeadLetterReason::Expired => "Expired",
            DeadLetterReason::MaxLength => "MaxLength",
        }
    }
}

/// What to do with a failed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Retry: this is retry number `attempt` (1-based); its computed delay is `delay_ms`
    /// and it waits in the tier of `tier_ms` milliseconds.
    Retry {
        /// Retry number, 1-based.
        attempt: u32,
        /// Computed delay, ms.
        delay_ms: u64,
        /// Tier it waits in, ms.
        tier_ms: u64,
    },
    /// Dead-letter it.
    DeadLetter(DeadLetterReason),
}

/// A RetryPolicy resolved into numbers: what consumers, the planner and status use.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Backoff parameters.
    pub backoff: Backoff,
    /// Total retry window, ms.
    pub max_retry_duration_ms: Option<u64>,
    /// Tiers, ms, ascending and distinct (empty when `max_retries` is 0 and no tiers are
    /// given).
    pub tiers_ms: Vec<u64>,
    /// Failure classification.
    pub classification: Classification,
}

impl ResolvedPolicy {
    /// Validates a RetryPolicy spec and resolves it.
    ///
    /// Tiers are `spec.tiers` (sorted, duplicates removed) or else the distinct nominal
    /// delays of attempts `1..=maxRetries`.
    ///
    /// # Errors
    /// [`InvalidSpec`] from [`RetryPolicySpec::validate`], or naming `spec.tiers` when the
    /// schedule derives more than [`MAX_TIERS`] tiers.
    pub fn from_spec(spec: &RetryPolicySpec) -> Result<Self, InvalidSpec> {
        spec.validate()?;
        let backoff = Backoff::from_valid(&spec.backoff);
        let mut tiers_ms: Vec<u64> = match &spec.tiers {
            Some(tiers) => tiers.iter().filter_map(|t| t.as_ms().ok()).collect(),
            None => (1..=spec.max_retries)
                .map(|n| backoff.nominal_ms(n))
                .collect(),
        };
        tiers_ms.sort_unstable();
        tiers_ms.dedup();
        if tiers_ms.len() > MAX_TIERS {
            return Err(InvalidSpec(vec![crate::crd::FieldError {
                field: "spec.tiers".into(),
                message: format!(
                    "the schedule derives {} distinct tiers (one queue each), more than {MAX_TIERS}; list the tiers explicitly",
                    tiers_ms.len()
                ),
            }]));
        }
        Ok(ResolvedPolicy {
            max_retries: spec.max_retries,
            backoff,
            max_retry_duration_ms: spec
                .max_retry_duration
                .as_ref()
                .and_then(|d| d.as_ms().ok()),
            tiers_ms,
            classification: spec.classification.clone(),
        })
    }

    /// Nominal delay (ms) of each retry, first retry first.
    pub fn schedule_ms(&self) -> Vec<u64> {
        (1..=self.max_retries)
            .map(|n| self.backoff.nominal_ms(n))
            .collect()
    }

    /// The tier (ms) a computed delay waits in: the smallest tier ≥ `delay_ms`, or the
    /// last (largest) tier if none is. `None` only when there are no tiers.
    pub fn tier_for(&self, delay_ms: u64) -> Option<u64> {
        self.tiers_ms
            .iter()
            .copied()
            .find(|&t| t >= delay_ms)
            .or_else(|| self.tiers_ms.last().copied())
    }

    /// Longest time (ms) a message can spend waiting in retry tiers: the sum over every
    /// retry of the tier its largest possible delay lands in, bounded by the retry window.
    pub fn worst_case_retry_ms(&self) -> u64 {
        let total: u64 = (1..=self.max_retries)
            .filter_map(|n| self.tier_for(self.backoff.worst_case_ms(n)))
            .fold(0u64, u64::saturating_add);
        match self.max_retry_duration_ms {
            Some(w) => total.min(w),
            None => total,
        }
    }

    /// Decides what to do with a message that failed with `class` (`None`: unclassified,
    /// decided by `classification.default`).
    ///
    /// `retries_so_far` is its `dlq-retry-count` (0 on the first failure),
    /// `elapsed_ms` the time since its first failure, `previous_delay_ms` the delay of its
    /// previous retry (for `DecorrelatedJitter`). A non-retryable class dead-letters with
    /// `NonRetryable`; `retries_so_far >= maxRetries` with `MaxRetriesExceeded` (so
    /// `maxRetries: 0` dead-letters on the first failure); a retry whose wait would end
    /// past `maxRetryDuration` with `RetryWindowExceeded`.
    pub fn decide<R: Rng + ?Sized>(
        &self,
        class: impl Into<Option<ErrorClass>>,
        retries_so_far: u32,
        elapsed_ms: u64,
        previous_delay_ms: Option<u64>,
        rng: &mut R,
    ) -> Decision {
        if !self.classification.is_retryable(class) {
            return Decision::DeadLetter(DeadLetterReason::NonRetryable);
        }
        if retries_so_far >= self.max_retries {
            return Decision::DeadLetter(DeadLetterReason::MaxRetriesExceeded);
        }
        let attempt = retries_so_far + 1;
        let delay_ms = self.backoff.delay_ms(attempt, previous_delay_ms, rng);
        let Some(tier_ms) = self.tier_for(delay_ms) else {
            return Decision::DeadLetter(DeadLetterReason::MaxRetriesExceeded);
        };
        if let Some(window) = self.max_retry_duration_ms {
            if elapsed_ms.saturating_add(tier_ms) > window {
                return Decision::DeadLetter(DeadLetterReason::RetryWindowExceeded);
            }
        }
        Decision::Retry {
            attempt,
            delay_ms,
            tier_ms,
        }
    }

    /// Status strings: nominal schedule, tiers and worst case, as canonical durations.
    pub fn status_strings(&self) -> (Vec<String>, Vec<String>, String) {
        (
            self.schedule_ms().into_iter().map(format_ms).collect(),
            self.tiers_ms.iter().copied().map(format_ms).collect(),
            format_ms(self.worst_case_retry_ms()),
        )
    }
}

/// Result of [`simulate`] for one strategy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimulationResult {
    /// Strategy simulated.
    pub strategy: BackoffStrategy,
    /// Per retry attempt (first retry first): the largest number of clients whose retry
    /// of that attempt falls in one bucket.
    pub peaks: Vec<u32>,
}

/// Thundering-herd model: `clients` clients all fail at t = 0; client `c`'s retry `n`
/// happens at the sum of its first `n` delays. Returns, per attempt, the peak number of
/// clients retrying within one bucket of `bucket_ms` milliseconds (`bucket_ms` ≥ 1).
pub fn simulate<R: Rng + ?Sized>(
    backoff: &Backoff,
    clients: u32,
    attempts: u32,
    bucket_ms: u64,
    rng: &mut R,
) -> SimulationResult {
    let bucket_ms = bucket_ms.max(1);
    let mut counts: Vec<HashMap<u64, u32>> = vec![HashMap::new(); attempts as usize];
    for _ in 0..clients {
        let mut t: u64 = 0;
        let mut previous = None;
        for (n, histogram) in counts.iter_mut().enumerate() {
            let d = backoff.delay_ms(n as u32 + 1, previous, rng);
            previous = Some(d);
            t = t.saturating_add(d);
            *histogram.entry(t / bucket_ms).or_insert(0) += 1;
        }
    }
    SimulationResult {
        strategy: backoff.strategy,
        peaks: counts
            .iter()
            .map(|h| h.values().copied().max().unwrap_or(0))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::Duration;
    use rand::{rngs::StdRng, SeedableRng};

    fn spec(strategy: BackoffStrategy) -> BackoffSpec {
        BackoffSpec {
            strategy,
            ..BackoffSpec::default()
        }
    }

    #[test]
    fn exponential_schedule_doubles_and_caps() {
        let b = Backoff::from_spec(&spec(BackoffStrategy::Exponential)).expect("valid");
        let got: Vec<u64> = (1..=8).map(|n| b.nominal_ms(n)).collect();
        assert_eq!(
            got,
            vec![1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
    }

    #[test]
    fn explicit_tiers_pick_smallest_at_or_above() {
        let p = ResolvedPolicy::from_spec(&RetryPolicySpec {
            max_retries: 4,
            backoff: spec(BackoffStrategy::Exponential),
            max_retry_duration: None,
            tiers: Some(vec![
                Duration::new("60s"),
                Duration::new("5s"),
                Duration::new("15s"),
                Duration::new("300s"),
            ]),
            classification: Classification::default(),
        })
        .expect("valid");
        assert_eq!(p.tiers_ms, vec![5_000, 15_000, 60_000, 300_000]);
        assert_eq!(p.tier_for(1), Some(5_000));
        assert_eq!(p.tier_for(5_000), Some(5_000));
        assert_eq!(p.tier_for(5_001), Some(15_000));
        assert_eq!(p.tier_for(1_000_000), Some(300_000));
        // Nominal 1s, 2s, 4s, 8s → tiers 5s, 5s, 5s, 15s.
        assert_eq!(p.worst_case_retry_ms(), 30_000);
    }

    #[test]
    fn decisions_follow_classification_and_limits() {
        let mut rng = StdRng::seed_from_u64(7);
        let p = ResolvedPolicy::from_spec(&RetryPolicySpec {
            max_retries: 2,
            backoff: spec(BackoffStrategy::Fixed),
            max_retry_duration: Some(Duration::new("1500ms")),
            tiers: None,
            classification: Classification::default(),
        })
        .expect("valid");
        assert_eq!(
            p.decide(ErrorClass::Poison, 0, 0, None, &mut rng),
            Decision::DeadLetter(DeadLetterReason::NonRetryable)
        );
        assert_eq!(
            p.decide(ErrorClass::Timeout, 0, 0, None, &mut rng),
            Decision::Retry {
                attempt: 1,
                delay_ms: 1_000,
                tier_ms: 1_000
            }
        );
        assert_eq!(
            p.decide(ErrorClass::Timeout, 1, 1_000, None, &mut rng),
            Decision::DeadLetter(DeadLetterReason::RetryWindowExceeded)
        );
        assert_eq!(
            p.decide(ErrorClass::Timeout, 2, 0, None, &mut rng),
            Decision::DeadLetter(DeadLetterReason::MaxRetriesExceeded)
        );
    }

    #[test]
    fn simulation_is_reproducible_and_jitter_spreads_the_herd() {
        let fixed = Backoff::from_spec(&spec(BackoffStrategy::Exponential)).expect("valid");
        let full = Backoff::from_spec(&spec(BackoffStrategy::FullJitter)).expect("valid");
        let a = simulate(&full, 1_000, 4, 1_000, &mut StdRng::seed_from_u64(1));
        let b = simulate(&full, 1_000, 4, 1_000, &mut StdRng::seed_from_u64(1));
        assert_eq!(a, b);
        let herd = simulate(&fixed, 1_000, 4, 1_000, &mut StdRng::seed_from_u64(1));
        assert_eq!(herd.peaks, vec![1_000; 4]);
        assert!(a.peaks.iter().all(|&p| p < 1_000), "{:?}", a.peaks);
    }
}
