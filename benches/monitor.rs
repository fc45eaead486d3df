//! Evaluator throughput (`monitor::Evaluator::observe`): samples per second on one core,
//! for a static baseline and for a rolling baseline (1 h window at a 15 s interval: the
//! median over 240 learned samples on every evaluation, the costly case).
//!
//! Run: `cargo bench --bench monitor`.

use std::hint::black_box;
use std::time::Duration as StdDuration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dlq_operator::crd::MonitoringSpec;
use dlq_operator::monitor::{Evaluator, Params};

const SAMPLES: u64 = 10_000;

fn params(json: serde_json::Value) -> Params {
    let spec: MonitoringSpec = serde_json::from_value(json).expect("spec");
    Params::from_spec(&spec).expect("valid")
}

/// A depth series with noise, a breach and a recovery.
fn depth(i: u64) -> u64 {
    let base = 100 + (i * 7919 % 23);
    if (3_000..3_400).contains(&i) {
        base + 5_000
    } else {
        base
    }
}

fn bench_monitor(c: &mut Criterion) {
    let mut group = c.benchmark_group("evaluator_10k_samples");
    group
        .throughput(Throughput::Elements(SAMPLES))
        .sample_size(20)
        .warm_up_time(StdDuration::from_secs(1))
        .measurement_time(StdDuration::from_secs(3));
    for (name, p) in [
        (
            "static",
            params(
                serde_json::json!({"interval": "15s", "baseline": {"mode": "Static", "value": 100},
                                      "threshold": 1100, "for": "5m", "growthPerMinute": 50.0}),
            ),
        ),
        (
            "rolling_1h",
            params(
                serde_json::json!({"interval": "15s", "baseline": {"mode": "Rolling", "window": "1h"},
                                      "thresholdFactor": 3.0, "minHeadroom": 10, "for": "5m",
                                      "growthPerMinute": 50.0}),
            ),
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut e = Evaluator::new(p.clone());
                let mut firing = 0u32;
                for i in 0..SAMPLES {
                    let ev = e.observe(i * 15_000, depth(i));
                    firing += u32::from(ev.state.code() == 2);
                }
                black_box(firing)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_monitor);
criterion_main!(benches);
