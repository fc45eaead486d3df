//! Thundering-herd simulation: 100,000 clients, 6 retries, 5 s buckets, per strategy.
//!
//! Run: `cargo bench --bench simulate` (about 30 s on 2 cores).

use std::hint::black_box;
use std::time::Duration as StdDuration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dlq_operator::backoff::{simulate, Backoff};
use dlq_operator::crd::{BackoffSpec, BackoffStrategy};
use rand::rngs::StdRng;
use rand::SeedableRng;

const CLIENTS: u32 = 100_000;
const ATTEMPTS: u32 = 6;
const BUCKET_MS: u64 = 5_000;

/// Default backoff (1 s initial, ×2, 60 s cap); ExponentialJitter with jitterRatio 0.5.
fn backoff(strategy: BackoffStrategy) -> Backoff {
    let spec = BackoffSpec {
        strategy,
        jitter_ratio: (strategy == BackoffStrategy::ExponentialJitter).then_some(0.5),
        ..BackoffSpec::default()
    };
    Backoff::from_spec(&spec).expect("valid backoff")
}

fn bench_simulate(c: &mut Criterion) {
    let mut group = c.benchmark_group("simulate_100k_clients_6_attempts");
    group
        .sample_size(10)
        .warm_up_time(StdDuration::from_secs(1))
        .measurement_time(StdDuration::from_secs(3));
    for strategy in BackoffStrategy::ALL {
        let b = backoff(strategy);
        group.bench_with_input(
            BenchmarkId::from_parameter(strategy.name()),
            &b,
            |bench, b| {
                let mut rng = StdRng::seed_from_u64(42);
                bench.iter(|| simulate(black_box(b), CLIENTS, ATTEMPTS, BUCKET_MS, &mut rng));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_simulate);
criterion_main!(benches);
