//! Property tests of the backoff core (docs/REFERENCE.md, formulas in `src/backoff.rs`'s module
//! doc): schedules, drawn delays and their bounds, retry decisions, tier choice, the worst
//! case and reproducibility.
//!
//! Bounds and tiers are recomputed here from the published formulas, not read back from the
//! crate, so a change in the crate's arithmetic shows up as a failure.

use dlq_operator::backoff::{simulate, Backoff, DeadLetterReason, Decision, ResolvedPolicy};
use dlq_operator::crd::{
    BackoffSpec, BackoffStrategy, Classification, ErrorClass, RetryPolicySpec,
};
use dlq_operator::duration::Duration;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// The parameters as plain numbers, kept next to the spec so the test never has to read
/// them back through the crate.
#[derive(Debug, Clone)]
struct Params {
    strategy: BackoffStrategy,
    initial: u64,
    mult: f64,
    max: u64,
    jitter: Option<u64>,
    ratio: Option<f64>,
}

impl Params {
    fn spec(&self) -> BackoffSpec {
        BackoffSpec {
            strategy: self.strategy,
            initial_delay: Duration::from_ms(self.initial),
            multiplier: self.mult,
            max_delay: Duration::from_ms(self.max),
            jitter: self.jitter.map(Duration::from_ms),
            jitter_ratio: self.ratio,
        }
    }

    /// `initial·mult^(n−1)`, uncapped.
    fn exp(&self, n: u32) -> f64 {
        self.initial as f64 * self.mult.powi(n as i32 - 1)
    }

    /// `min(v, max)` in whole milliseconds (fractions truncated).
    fn cap(&self, v: f64) -> u64 {
        if v >= self.max as f64 {
            self.max
        } else {
            v as u64
        }
    }

    /// Nominal (jitter-free) delay: `initial` for Fixed, `min(exp(n), max)` otherwise.
    fn nominal(&self, n: u32) -> u64 {
        match self.strategy {
            BackoffStrategy::Fixed => self.initial,
            _ => self.cap(self.exp(n)),
        }
    }

    /// Published inclusive bounds of attempt `n`'s delay given the previous drawn delay.
    fn bounds(&self, n: u32, prev: Option<u64>) -> (u64, u64) {
        let nominal = self.nominal(n);
        match self.strategy {
            BackoffStrategy::Fixed | BackoffStrategy::Exponential => (nominal, nominal),
            BackoffStrategy::ExponentialJitter => {
                let e = self.exp(n);
                let extra = match (self.jitter, self.ratio) {
                    (Some(j), None) => j as f64,
                    (None, Some(r)) => r * e,
                    other => panic!("generator bug: {other:?}"),
                };
                (self.cap(e), self.cap(e + extra))
            }
            BackoffStrategy::FullJitter => (0, nominal),
            BackoffStrategy::EqualJitter => (nominal / 2, nominal),
            BackoffStrategy::DecorrelatedJitter => {
                let prev = prev.unwrap_or(self.initial);
                (self.initial, self.max.min(3 * prev))
            }
        }
    }
}

fn params() -> impl Strategy<Value = Params> {
    (
        prop::sample::select(BackoffStrategy::ALL.to_vec()),
        1u64..=60_000,
        1.0f64..=10.0,
        0u64..=600_000,
        prop_oneof![
            (0u64..=120_000).prop_map(|j| (Some(j), None)),
            (0.0f64..=1.0).prop_map(|r| (None, Some(r))),
        ],
    )
        .prop_map(|(strategy, initial, mult, extra, (jitter, ratio))| {
            let jittered = strategy == BackoffStrategy::ExponentialJitter;
            Params {
                strategy,
                initial,
                mult,
                max: initial + extra,
                jitter: if jittered { jitter } else { None },
                ratio: if jittered { ratio } else { None },
            }
        })
}

/// Explicit tiers (unsorted, possibly repeated) or none.
fn tiers() -> impl Strategy<Value = Option<Vec<u64>>> {
    prop::option::of(prop::collection::vec(1u64..=900_000, 1..=8))
}

fn policy(p: &Params, max_retries: u32, tiers: &Option<Vec<u64>>) -> ResolvedPolicy {
    ResolvedPolicy::from_spec(&RetryPolicySpec {
        max_retries,
        backoff: p.spec(),
        max_retry_duration: None,
        tiers: tiers
            .as_ref()
            .map(|t| t.iter().copied().map(Duration::from_ms).collect()),
        classification: Classification::default(),
    })
    .expect("generated specs are valid")
}

/// Tiers as docs/REFERENCE.md defines them: the explicit list, or the distinct nominal delays.
fn expected_tiers(p: &Params, max_retries: u32, tiers: &Option<Vec<u64>>) -> Vec<u64> {
    let mut t: Vec<u64> = match tiers {
        Some(t) => t.clone(),
        None => (1..=max_retries).map(|n| p.nominal(n)).collect(),
    };
    t.sort_unstable();
    t.dedup();
    t
}

/// Smallest tier ≥ `delay`, else the largest.
fn expected_tier(tiers: &[u64], delay: u64) -> u64 {
    tiers
        .iter()
        .copied()
        .filter(|&t| t >= delay)
        .min()
        .unwrap_or_else(|| *tiers.iter().max().expect("tiers"))
}

const RETRYABLE: [ErrorClass; 6] = [
    ErrorClass::Timeout,
    ErrorClass::ConnectionRefused,
    ErrorClass::Overload,
    ErrorClass::RateLimited,
    ErrorClass::Dependency,
    ErrorClass::Resource,
];
const DEAD_LETTER: [ErrorClass; 3] = [
    ErrorClass::Validation,
    ErrorClass::Parse,
    ErrorClass::Poison,
];

/// Drives one message through `decide` until it is dead-lettered; returns every decision.
fn run_message(policy: &ResolvedPolicy, class: ErrorClass, seed: u64) -> Vec<Decision> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut prev = None;
    let mut elapsed = 0u64;
    for k in 0..=policy.max_retries + 1 {
        let d = policy.decide(class, k, elapsed, prev, &mut rng);
        out.push(d);
        match d {
            Decision::Retry {
                delay_ms, tier_ms, ..
            } => {
                prev = Some(delay_ms);
                elapsed += tier_ms;
            }
            Decision::DeadLetter(_) => break,
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn spec_is_valid_and_resolves_to_its_numbers(p in params()) {
        let b = Backoff::from_spec(&p.spec()).expect("valid");
        prop_assert_eq!(b.strategy, p.strategy);
        prop_assert_eq!(b.initial_ms, p.initial);
        prop_assert_eq!(b.max_ms, p.max);
    }

    #[test]
    fn nominal_is_monotone_and_capped(p in params()) {
        let b = Backoff::from_spec(&p.spec()).expect("valid");
        let mut last = 0;
        for n in 1..=64 {
            let d = b.nominal_ms(n);
            prop_assert_eq!(d, p.nominal(n), "attempt {}", n);
            prop_assert!(d >= last, "attempt {n}: {d} < {last}");
            prop_assert!(d <= p.max, "attempt {n}: {d} > max {}", p.max);
            last = d;
        }
    }

    #[test]
    fn drawn_delays_stay_within_bounds(p in params(), seed in any::<u64>()) {
        let b = Backoff::from_spec(&p.spec()).expect("valid");
        let mut rng = StdRng::seed_from_u64(seed);
        let mut prev = None;
        for n in 1..=24 {
            let d = b.delay_ms(n, prev, &mut rng);
            let (lo, hi) = b.bounds_ms(n, prev);
            prop_assert!(lo <= d && d <= hi, "attempt {n}: {d} outside bounds_ms {lo}..={hi}");
            let (plo, phi) = p.bounds(n, prev);
            prop_assert_eq!((lo, hi), (plo, phi), "attempt {}: bounds_ms vs published", n);
            prop_assert!(plo <= d && d <= phi, "attempt {n}: {d} outside published {plo}..={phi}");
            prop_assert!(d <= p.max);
            prop_assert!(d <= b.worst_case_ms(n), "attempt {n}: {d} > worst case");
            prev = Some(d);
        }
    }

    #[test]
    fn zero_retries_dead_letters_at_once(
        p in params(),
        tiers in tiers(),
        k in 0u32..=5,
        seed in any::<u64>(),
    ) {
        let pol = policy(&p, 0, &tiers);
        let mut rng = StdRng::seed_from_u64(seed);
        for class in RETRYABLE {
            prop_assert_eq!(
                pol.decide(class, k, 0, None, &mut rng),
                Decision::DeadLetter(DeadLetterReason::MaxRetriesExceeded),
                "{:?}", class
            );
        }
        for class in DEAD_LETTER {
            prop_assert_eq!(
                pol.decide(class, k, 0, None, &mut rng),
                Decision::DeadLetter(DeadLetterReason::NonRetryable),
                "{:?}", class
            );
        }
    }

    #[test]
    fn retries_exactly_max_retries_times_in_the_right_tiers(
        p in params(),
        max_retries in 1u32..=12,
        tiers in tiers(),
        class in prop::sample::select(RETRYABLE.to_vec()),
        seed in any::<u64>(),
    ) {
        let pol = policy(&p, max_retries, &tiers);
        let want_tiers = expected_tiers(&p, max_retries, &tiers);
        prop_assert_eq!(&pol.tiers_ms, &want_tiers);
        let decisions = run_message(&pol, class, seed);
        prop_assert_eq!(decisions.len(), max_retries as usize + 1, "{:?}", decisions);
        let mut prev = None;
        for (k, d) in decisions.iter().enumerate() {
            if k < max_retries as usize {
                let Decision::Retry { attempt, delay_ms, tier_ms } = *d else {
                    return Err(TestCaseError::fail(format!("retry {k}: {d:?}")));
                };
                prop_assert_eq!(attempt, k as u32 + 1);
                let (lo, hi) = p.bounds(attempt, prev);
                prop_assert!(lo <= delay_ms && delay_ms <= hi, "{delay_ms} outside {lo}..={hi}");
                prop_assert!(want_tiers.contains(&tier_ms), "tier {tier_ms} not in {want_tiers:?}");
                prop_assert_eq!(tier_ms, expected_tier(&want_tiers, delay_ms));
                prev = Some(delay_ms);
            } else {
                prop_assert_eq!(*d, Decision::DeadLetter(DeadLetterReason::MaxRetriesExceeded));
            }
        }
        // Any retry count past the limit dead-letters too.
        let mut rng = StdRng::seed_from_u64(seed);
        for k in max_retries..max_retries + 3 {
            prop_assert_eq!(
                pol.decide(class, k, 0, None, &mut rng),
                Decision::DeadLetter(DeadLetterReason::MaxRetriesExceeded)
            );
        }
        for c in DEAD_LETTER {
            prop_assert_eq!(
                pol.decide(c, 0, 0, None, &mut rng),
                Decision::DeadLetter(DeadLetterReason::NonRetryable)
            );
        }
    }

    #[test]
    fn tier_for_picks_smallest_at_or_above_else_largest(
        p in params(),
        max_retries in 0u32..=12,
        tiers in tiers(),
        delay in 0u64..=1_000_000,
    ) {
        let pol = policy(&p, max_retries, &tiers);
        let want = expected_tiers(&p, max_retries, &tiers);
        if want.is_empty() {
            prop_assert_eq!(pol.tier_for(delay), None);
        } else {
            prop_assert_eq!(pol.tier_for(delay), Some(expected_tier(&want, delay)));
        }
    }

    /// `DecorrelatedJitter` draws ignore the multiplier (`U(initial, 3·previous)`), while
    /// its nominal schedule uses it: with a multiplier above 3 the nominal delays outgrow
    /// every possible draw, so the nominal schedule is no lower bound of the worst case
    /// there (reported; `worst_case_covers_every_drawn_run` holds for every strategy).
    #[test]
    fn worst_case_covers_the_nominal_schedule(
        p in params(),
        max_retries in 0u32..=12,
        tiers in tiers(),
    ) {
        prop_assume!(!(p.strategy == BackoffStrategy::DecorrelatedJitter && p.mult > 3.0));
        let pol = policy(&p, max_retries, &tiers);
        let want = expected_tiers(&p, max_retries, &tiers);
        let nominal_sum: u64 = (1..=max_retries)
            .map(|n| expected_tier(&want, p.nominal(n)))
            .sum();
        prop_assert!(
            pol.worst_case_retry_ms() >= nominal_sum,
            "worst case {} < nominal schedule's tiers {}", pol.worst_case_retry_ms(), nominal_sum
        );
    }

    #[test]
    fn worst_case_covers_every_drawn_run(
        p in params(),
        max_retries in 1u32..=12,
        tiers in tiers(),
        seed in any::<u64>(),
    ) {
        let pol = policy(&p, max_retries, &tiers);
        let waited: u64 = run_message(&pol, ErrorClass::Timeout, seed)
            .iter()
            .map(|d| match d {
                Decision::Retry { tier_ms, .. } => *tier_ms,
                Decision::DeadLetter(_) => 0,
            })
            .sum();
        prop_assert!(pol.worst_case_retry_ms() >= waited, "{} < {}", pol.worst_case_retry_ms(), waited);
    }

    #[test]
    fn same_seed_same_results(
        p in params(),
        max_retries in 1u32..=8,
        tiers in tiers(),
        seed in any::<u64>(),
    ) {
        let pol = policy(&p, max_retries, &tiers);
        prop_assert_eq!(
            run_message(&pol, ErrorClass::Overload, seed),
            run_message(&pol, ErrorClass::Overload, seed)
        );
        let b = &pol.backoff;
        let a = simulate(b, 200, 5, 1_000, &mut StdRng::seed_from_u64(seed));
        let c = simulate(b, 200, 5, 1_000, &mut StdRng::seed_from_u64(seed));
        prop_assert_eq!(&a, &c);
        prop_assert_eq!(a.peaks.len(), 5);
        prop_assert!(a.peaks.iter().all(|&n| (1..=200).contains(&n)), "{:?}", a.peaks);
    }
}
