//! Benchmark of the DeadLetterQueue controller's reconcile against the fake Kubernetes API
//! (tests/common/fake_api.rs) and the real local RabbitMQ: time, broker CPU and peak RSS
//! to reconcile N DeadLetterQueues in one vhost from scratch, the steady-state cost of N
//! unchanged ones, and the writes of one edited resource (docs/BENCHMARKS.md,
//! "Controller reconcile of many DeadLetterQueues").
//!
//! ```text
//! cargo bench --bench reconcile -- [N] [classic|quorum] [arguments|policy] [tiers=T] [standalone]
//! ```
//!
//! With `standalone`, the same N DeadLetterQueues go through the standalone driver
//! (`dlq-operator apply -f`, one after another) instead of the controller.
//!
//! Defaults: 1000 classic, `spec.broker.queueSettings: Arguments`, 2 retry tiers. Each
//! DeadLetterQueue gets its own source queue, dead-letter queue and T retry tiers (T + 2
//! queues, 2 exchanges, T + 1 bindings; with `policy` also 2 policies) in the vhost `/`.
//! Reconciles run 4 at a time (the operator's default `--concurrency`). Reported: wall
//! time and broker CPU (`beam.smp` utime + stime) of the first full reconcile, peak RSS
//! of this process (`VmHWM`), one resync round of the same objects with their written
//! status (API writes, broker writes, CPU), then one resource's retention lowered and
//! reconciled (its broker writes). Everything it created is deleted at the end.

mod common;
#[path = "../tests/common/fake_api.rs"]
#[allow(dead_code)]
mod fake_api;

use std::sync::Arc;

use futures::StreamExt;
use kube::api::DynamicObject;
use serde_json::{json, Value};

use common::{broker_pid, cpu_seconds_since, ticks_now};
use dlq_operator::controller::context::{BrokerClients, Context, DeadLetterQueueContext};
use dlq_operator::controller::dead_letter_queue;
use dlq_operator::metrics::Metrics;
use fake_api::FakeApi;

const NS: &str = "bench";
const DLQ_PATH: &str = "/apis/dlqoperator.io/v1alpha1/namespaces/bench/deadletterqueues";

fn proc_status(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The bench's settings for every DeadLetterQueue.
struct Shape<'a> {
    prefix: &'a str,
    queue_type: &'a str,
    settings: &'a str,
}

fn dlq(i: usize, shape: &Shape<'_>, status: Option<Value>, retention: &str) -> DynamicObject {
    let Shape {
        prefix,
        queue_type,
        settings,
    } = shape;
    let mut o = json!({
        "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
        "metadata": {"name": format!("d{i}"), "namespace": NS, "uid": format!("u{i}"),
                     "generation": 1, "resourceVersion": "1",
                     "finalizers": [dead_letter_queue::FINALIZER]},
        "spec": {
            "broker": {"secretRef": {"name": "rabbit"}, "queueSettings": settings},
            "source": {"queue": format!("{prefix}-{i}"), "queueType": queue_type},
            "deadLetter": {"retention": retention},
            "retryPolicyRef": {"name": "policy"},
        },
    });
    if let Some(s) = status {
        o["status"] = s;
    }
    serde_json::from_value(o).expect("object")
}

/// Deletes the bench's queues, exchanges and policies (names containing `prefix`) and
/// their ownership records (global parameters whose object name starts with `prefix`):
/// left behind, thousands of records would slow every later declaration on the broker,
/// which scans them with the policies.
async fn delete_prefix(prefix: &str) {
    let http = reqwest::Client::new();
    let base = "http://127.0.0.1:15672/api";
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    for (kind, path) in [
        ("queues", "queues/%2F"),
        ("exchanges", "exchanges/%2F"),
        ("policies", "policies/%2F"),
        ("global-parameters", "global-parameters"),
    ] {
        let list: Vec<Value> = match http
            .get(format!("{base}/{path}"))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let ours = |v: &Value| {
            let object = if kind == "global-parameters" {
                &v["value"]["name"]
            } else {
                &v["name"]
            };
            object.as_str().is_some_and(|n| n.contains(prefix))
        };
        let names: Vec<String> = list
            .iter()
            .filter(|v| ours(v))
            .filter_map(|v| v["name"].as_str())
            .map(str::to_string)
            .collect();
        futures::stream::iter(names)
            .for_each_concurrent(8, |n| {
                let http = http.clone();
                async move {
                    let _ = http
                        .delete(format!("{base}/{path}/{}", enc(&n)))
                        .basic_auth("guest", Some("guest"))
                        .send()
                        .await;
                }
            })
            .await;
    }
}

/// Reconciles `n` objects made by `make`, 4 at a time; returns how many failed.
async fn round(
    ctx: &Arc<DeadLetterQueueContext>,
    n: usize,
    make: impl Fn(usize) -> DynamicObject,
) -> usize {
    futures::stream::iter(0..n)
        .map(|i| {
            let ctx = ctx.clone();
            let obj = Arc::new(make(i));
            async move { dead_letter_queue::reconcile(obj, ctx).await.is_err() }
        })
        .buffer_unordered(4)
        .filter(|failed| futures::future::ready(*failed))
        .count()
        .await
}

/// The status each object got, from the status PATCHes among `calls`.
fn statuses(calls: &[fake_api::Call]) -> std::collections::HashMap<String, Value> {
    calls
        .iter()
        .filter(|c| c.method == "PATCH" && c.path.ends_with("/status"))
        .map(|c| {
            let name = c
                .path
                .trim_end_matches("/status")
                .rsplit('/')
                .next()
                .unwrap_or_default();
            (name.to_string(), c.body["status"].clone())
        })
        .collect()
}

/// The fake API with the RetryPolicy (`tiers` tiers), the Secret and `n` DeadLetterQueues.
fn fake_api(n: usize, tiers: usize, shape: &Shape<'_>) -> FakeApi {
    let fake = FakeApi::default();
    let tier_names: Vec<String> = (0..tiers).map(|t| format!("{}s", 10 * (t + 1))).collect();
    fake.put(
        "/apis/dlqoperator.io/v1alpha1/namespaces/bench/retrypolicies/policy",
        json!({"apiVersion": "dlqoperator.io/v1alpha1", "kind": "RetryPolicy",
               "metadata": {"name": "policy", "namespace": NS, "generation": 1},
               "spec": {"maxRetries": tiers, "tiers": tier_names}}),
    );
    fake.put(
        "/api/v1/namespaces/bench/secrets/rabbit",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "rabbit", "namespace": NS, "resourceVersion": "1"},
               // amqp://guest:guest@127.0.0.1:5672/%2f and http://127.0.0.1:15672
               "data": {"uri": "YW1xcDovL2d1ZXN0Omd1ZXN0QDEyNy4wLjAuMTo1NjcyLyUyZg==",
                        "managementUri": "aHR0cDovLzEyNy4wLjAuMToxNTY3Mg=="}}),
    );
    for i in 0..n {
        fake.put(
            &format!("{DLQ_PATH}/d{i}"),
            json!(dlq(i, shape, None, RETENTION)),
        );
    }
    fake
}

/// `dlq-operator apply -f DIR` (the standalone driver, in this process, output discarded)
/// on a directory of one Secret, one RetryPolicy (`tiers` tiers) and `n` DeadLetterQueues;
/// prints its wall time and broker CPU.
async fn standalone(n: usize, tiers: usize, shape: &Shape<'_>, beam: Option<&str>) {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => return eprintln!("temp dir: {e}"),
    };
    let tier_names: Vec<String> = (0..tiers)
        .map(|t| format!("\"{}s\"", 10 * (t + 1)))
        .collect();
    let mut docs = vec![
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: rabbit\n  namespace: bench\nstringData:\n  uri: amqp://guest:guest@127.0.0.1:5672/%2f\n  managementUri: http://127.0.0.1:15672\n".to_string(),
        format!("apiVersion: dlqoperator.io/v1alpha1\nkind: RetryPolicy\nmetadata:\n  name: policy\n  namespace: bench\nspec:\n  maxRetries: {tiers}\n  tiers: [{}]\n", tier_names.join(", ")),
    ];
    for i in 0..n {
        docs.push(serde_json::to_string(&dlq(i, shape, None, RETENTION)).unwrap_or_default());
    }
    let path = dir.path().join("all.yaml");
    if let Err(e) = std::fs::write(&path, docs.join("\n---\n")) {
        return eprintln!("{}: {e}", path.display());
    }
    let planned = match dlq_operator::standalone::load_and_plan(&[path]) {
        Ok((_, planned)) => planned,
        Err(e) => return eprintln!("plan: {e}"),
    };
    let started = ticks_now(beam);
    let summary = dlq_operator::standalone::apply_all(
        dlq_operator::rabbitmq::factory().as_ref(),
        &planned,
        &mut std::io::sink(),
    )
    .await;
    let (broker_cpu, own_cpu) = cpu_seconds_since(beam, started);
    println!(
        "apply -f of {n}: {:.1} s, broker CPU {broker_cpu:.1} s, own CPU {own_cpu:.1} s, {}",
        started.2.elapsed().as_secs_f64(),
        match summary {
            Ok(s) => format!("{} ready, {} not ready", s.ready, s.not_ready),
            Err(e) => format!("output error {e}"),
        }
    );
}

/// Retention of every DeadLetterQueue; the edited one gets [`LOWER_RETENTION`].
const RETENTION: &str = "7d";
const LOWER_RETENTION: &str = "3d";

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let has = |w: &str| args.iter().any(|a| a == w);
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(1000);
    let tiers: usize = args
        .iter()
        .find_map(|a| a.strip_prefix("tiers=")?.parse().ok())
        .unwrap_or(2);
    let prefix = format!("bench-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let shape = Shape {
        prefix: &prefix,
        queue_type: if has("quorum") { "Quorum" } else { "Classic" },
        settings: if has("policy") { "Policy" } else { "Arguments" },
    };
    let beam = broker_pid();
    if has("standalone") {
        standalone(n, tiers, &shape, beam.as_deref()).await;
        delete_prefix(&prefix).await;
        return;
    }
    let fake = fake_api(n, tiers, &shape);
    let ctx = Arc::new(DeadLetterQueueContext::new(Arc::new(Context::new(
        fake.client(NS),
        "bench",
        Metrics::new(),
        Arc::new(BrokerClients::default()),
    ))));
    println!(
        "reconcile of {n} DeadLetterQueues ({} queues, {tiers} retry tiers each, queueSettings: {}), 4 at a time; broker pid {}",
        shape.queue_type,
        shape.settings,
        beam.as_deref().unwrap_or("unknown (no broker CPU)")
    );
    let rss_before = proc_status("VmRSS:");
    let started = ticks_now(beam.as_deref());
    let failures = round(&ctx, n, |i| dlq(i, &shape, None, RETENTION)).await;
    let first = started.2.elapsed();
    let (broker_cpu, own_cpu) = cpu_seconds_since(beam.as_deref(), started);
    let calls = fake.take();
    let statuses = statuses(&calls);
    let broker = ctx.shared.brokers.request_counts();
    println!(
        "first reconcile: {:.1} s ({:.1} ms per object), {failures} failed, broker CPU {broker_cpu:.1} s, own CPU {own_cpu:.1} s, {} API calls, {} broker requests ({} writes), peak RSS {} MiB (start {} MiB)",
        first.as_secs_f64(),
        first.as_secs_f64() * 1000.0 / n as f64,
        calls.len(),
        broker.reads + broker.writes,
        broker.writes,
        proc_status("VmHWM:") / 1024,
        rss_before / 1024,
    );

    // Steady state: the same objects with the status the controller wrote.
    let started = ticks_now(beam.as_deref());
    round(&ctx, n, |i| {
        dlq(
            i,
            &shape,
            statuses.get(&format!("d{i}")).cloned(),
            RETENTION,
        )
    })
    .await;
    let (broker_cpu, cpu) = cpu_seconds_since(beam.as_deref(), started);
    let calls = fake.take();
    let api_writes = calls.iter().filter(|c| c.is_write()).count();
    let after = ctx.shared.brokers.request_counts();
    println!(
        "steady-state resync round: {:.1} s wall, {cpu:.2} s CPU (this process), broker CPU {broker_cpu:.1} s, {api_writes} API writes, {} broker writes, {} broker reads; at the default 5 min resync: {:.0} API writes/min, {:.3} CPU s/min",
        started.2.elapsed().as_secs_f64(),
        after.writes - broker.writes,
        after.reads - broker.reads,
        api_writes as f64 / 5.0,
        cpu / 5.0,
    );

    // One resource's retention lowered: its writes only.
    let status = statuses.get("d0").cloned();
    let started = ticks_now(beam.as_deref());
    let failed = round(&ctx, 1, |_| dlq(0, &shape, status.clone(), LOWER_RETENTION)).await;
    let edited = ctx.shared.brokers.request_counts();
    println!(
        "one retention lowered ({RETENTION} → {LOWER_RETENTION}): {:.0} ms, {} broker writes, broker CPU {:.2} s, {failed} failed",
        started.2.elapsed().as_secs_f64() * 1000.0,
        edited.writes - after.writes,
        cpu_seconds_since(beam.as_deref(), started).0,
    );
    delete_prefix(&prefix).await;
}
