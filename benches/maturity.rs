//! The maturity score at scale: what the backlog monitor adds to each poll of 1,000
//! DeadLetterQueues — per resource, its RetryPolicy read from the controller's store and
//! decoded (`policy_in`), the twelve items checked and scored, and `status.maturity`
//! compared with what status already says (`maturity_status`; a steady state, so nothing
//! to write) — on one core.
//!
//! Run: `cargo bench --bench maturity`.

use std::hint::black_box;
use std::time::Duration as StdDuration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;

use dlq_operator::crd::{DeadLetterQueueSpec, DepthStatus, RetryPolicy};
use dlq_operator::maturity::Weights;
use dlq_operator::object::api_resource;
use dlq_operator::status::maturity::{as_policy, maturity_status, policy_in, Seen};

const RESOURCES: usize = 1_000;

fn bench_maturity(c: &mut Criterion) {
    let mut writer = Writer::<DynamicObject>::new(api_resource::<RetryPolicy>());
    writer.apply_watcher_event(&watcher::Event::Init);
    let specs: Vec<DeadLetterQueueSpec> = (0..RESOURCES)
        .map(|i| {
            let policy: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "dlqoperator.io/v1alpha1", "kind": "RetryPolicy",
                "metadata": {"name": format!("p{i}"), "namespace": "bench"},
                "spec": {"maxRetries": 4, "tiers": ["5s", "15s", "1m", "5m"],
                         "backoff": {"strategy": "FullJitter"}, "maxRetryDuration": "1h"},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Valid",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
            .expect("policy");
            writer.apply_watcher_event(&watcher::Event::InitApply(policy));
            serde_json::from_value(serde_json::json!({
                "broker": {"secretRef": {"name": "s"}},
                "source": {"queue": format!("q{i}")},
                "retryPolicyRef": {"name": format!("p{i}")},
                "monitoring": {"threshold": 100}}))
            .expect("spec")
        })
        .collect();
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let store = writer.as_reader();
    let w = Weights::default();
    let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    let depth = DepthStatus::default();
    let seen = Seen {
        depth: &depth,
        router_consuming: false,
        replayed: false,
        alert_rules: true,
    };
    // What status says after the first poll: every later poll compares against it.
    let current: Vec<_> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let p = policy_in(Some(&store), "bench", &format!("p{i}"));
            maturity_status(None, spec, as_policy(p.as_ref()), &seen, &w, &now).1
        })
        .collect();
    let mut group = c.benchmark_group("maturity_1000_resources");
    group
        .throughput(Throughput::Elements(RESOURCES as u64))
        .sample_size(20)
        .warm_up_time(StdDuration::from_secs(1))
        .measurement_time(StdDuration::from_secs(5));
    group.bench_function("one_poll_steady_state", |b| {
        b.iter(|| {
            let mut writes = 0;
            for (i, spec) in specs.iter().enumerate() {
                let p = policy_in(Some(&store), "bench", &spec.retry_policy_ref.name);
                let (m, write) = maturity_status(
                    current[i].as_ref(),
                    spec,
                    as_policy(p.as_ref()),
                    &seen,
                    &w,
                    &now,
                );
                writes += usize::from(write.is_some());
                black_box(m.score);
            }
            assert_eq!(writes, 0, "a steady state writes nothing");
        })
    });
    group.finish();
}

criterion_group!(benches, bench_maturity);
criterion_main!(benches);
