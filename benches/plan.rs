//! Planning and diffing 10,000 DeadLetterQueues: the pure work the reconcile loop does per
//! resource (plan the desired topology, compare it with the last one, find tier queues to
//! retire).
//!
//! Run: `cargo bench --bench plan` (well under 2 minutes on 2 cores).

use std::hint::black_box;
use std::time::Duration as StdDuration;

use criterion::{criterion_group, criterion_main, Criterion};
use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::crd::{DeadLetterQueueSpec, PartitionBy, QueueType, RetryPolicySpec};
use dlq_operator::topology::{plan, DesiredTopology};
use serde_json::json;

const RESOURCES: usize = 10_000;

/// A few tier layouts: explicit tiers, and tiers derived from the nominal schedule.
fn policies() -> Vec<ResolvedPolicy> {
    [
        json!({"maxRetries": 4, "tiers": ["5s", "15s", "60s", "300s"]}),
        json!({"maxRetries": 3}),
        json!({"maxRetries": 6, "backoff": {"strategy": "ExponentialJitter",
            "initialDelay": "500ms", "multiplier": 3, "maxDelay": "10m", "jitterRatio": 0.2}}),
        json!({"maxRetries": 8, "tiers": ["1s", "10s", "1m", "10m", "1h"]}),
    ]
    .into_iter()
    .map(|v| {
        let spec: RetryPolicySpec = serde_json::from_value(v).expect("retry policy");
        ResolvedPolicy::from_spec(&spec).expect("valid retry policy")
    })
    .collect()
}

/// 10,000 distinct specs: different queue names, both queue types, some partitioned.
fn specs() -> Vec<(String, DeadLetterQueueSpec)> {
    let base: DeadLetterQueueSpec = serde_json::from_value(json!({
        "broker": {"secretRef": {"name": "rabbitmq"}},
        "source": {"queue": "placeholder", "exchange": "events"},
        "retryPolicyRef": {"name": "default"},
        "deadLetter": {"retention": "7d", "maxLength": 100000}
    }))
    .expect("dlq spec");
    (0..RESOURCES)
        .map(|i| {
            let mut s = base.clone();
            s.source.queue = format!("service-{:03}.events-{i:05}", i % 97);
            s.source.queue_type = if i % 3 == 0 {
                QueueType::Classic
            } else {
                QueueType::Quorum
            };
            if i % 10 == 0 {
                s.dead_letter.partition_by = PartitionBy::ErrorClass;
            }
            s.validate().expect("valid dlq spec");
            (format!("ns-{}/dlq-{i}", i % 50), s)
        })
        .collect()
}

fn plan_all(
    specs: &[(String, DeadLetterQueueSpec)],
    policies: &[ResolvedPolicy],
    shift: usize,
) -> Vec<DesiredTopology> {
    specs
        .iter()
        .enumerate()
        .map(|(i, (owner, spec))| plan(owner, spec, &policies[(i + shift) % policies.len()]))
        .collect()
}

/// Per resource: does the new plan differ from the last one, and which tier queues of the
/// last plan are no longer wanted. Returns (changed plans, obsolete tier queues).
fn diff_all(new: &[DesiredTopology], old: &[DesiredTopology]) -> (usize, usize) {
    let mut changed = 0;
    let mut obsolete = 0;
    for (n, o) in new.iter().zip(old) {
        if n != o {
            changed += 1;
        }
        obsolete += n
            .obsolete_tier_queues(o.queues.iter().map(|q| (q.name.as_str(), &q.arguments)))
            .len();
    }
    (changed, obsolete)
}

fn bench_plan(c: &mut Criterion) {
    let specs = specs();
    let policies = policies();
    // Previous plans: the same inputs for most resources (steady state), another policy's
    // tier layout for every tenth (a RetryPolicy change).
    let previous: Vec<DesiredTopology> = specs
        .iter()
        .enumerate()
        .map(|(i, (owner, spec))| {
            let shift = usize::from(i % 10 == 0);
            plan(owner, spec, &policies[(i + shift) % policies.len()])
        })
        .collect();
    let current = plan_all(&specs, &policies, 0);
    let (changed, obsolete) = diff_all(&current, &previous);
    assert_eq!(changed, RESOURCES / 10, "every tenth plan changed");
    assert!(obsolete > 0);

    let mut group = c.benchmark_group("reconcile_pure_10k");
    group
        .sample_size(10)
        .warm_up_time(StdDuration::from_secs(1))
        .measurement_time(StdDuration::from_secs(5));
    group.bench_function("plan", |b| {
        b.iter(|| plan_all(black_box(&specs), black_box(&policies), 0))
    });
    group.bench_function("diff", |b| {
        b.iter(|| diff_all(black_box(&current), black_box(&previous)))
    });
    group.bench_function("plan_and_diff", |b| {
        b.iter(|| {
            let new = plan_all(black_box(&specs), black_box(&policies), 0);
            diff_all(&new, black_box(&previous))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_plan);
criterion_main!(benches);
