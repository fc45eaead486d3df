//! Benchmark of the DeadLetterQueue controller's reconcile against the fake Kubernetes API
//! (tests/common/fake_api.rs) and the real local RabbitMQ (issue: "time and peak RSS to
//! reconcile 1,000 DeadLetterQueues from scratch, and the steady-state cost of 1,000
//! unchanged ones").
//!
//! ```text
//! cargo bench --bench reconcile -- [N] [classic|quorum]      # default: 1000 classic
//! ```
//!
//! Each DeadLetterQueue gets its own source queue with one retry tier: 3 queues, 2
//! exchanges, 2 policies and 2 bindings on the broker. Reconciles run 4 at a time (the
//! operator's default `--concurrency`). Reported: wall time of the first full reconcile,
//! peak RSS of this process (`VmHWM`), then one resync round of the same objects with
//! their written status: API writes, broker writes and CPU time. Everything it created is
//! deleted at the end.

#[path = "../tests/common/fake_api.rs"]
#[allow(dead_code)]
mod fake_api;

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::api::DynamicObject;
use serde_json::{json, Value};

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

/// User + system CPU time of this process, in seconds (`/proc/self/stat`, clock ticks of
/// 100 Hz as on Linux x86_64).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<u64> = after
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // Fields after the command: state is skipped by the parse filter; utime and stime
    // are the 14th and 15th fields of the whole line (11th and 12th numbers here).
    (f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0)) as f64 / 100.0
}

fn dlq(i: usize, prefix: &str, queue_type: &str, status: Option<Value>) -> DynamicObject {
    let mut o = json!({
        "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
        "metadata": {"name": format!("d{i}"), "namespace": NS, "uid": format!("u{i}"),
                     "generation": 1, "resourceVersion": "1",
                     "finalizers": [dead_letter_queue::FINALIZER]},
        "spec": {
            "broker": {"secretRef": {"name": "rabbit"}},
            "source": {"queue": format!("{prefix}-{i}"), "queueType": queue_type},
            "retryPolicyRef": {"name": "policy"},
        },
    });
    if let Some(s) = status {
        o["status"] = s;
    }
    serde_json::from_value(o).expect("object")
}

async fn delete_prefix(prefix: &str) {
    let http = reqwest::Client::new();
    let base = "http://127.0.0.1:15672/api";
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    for kind in ["queues", "exchanges", "policies"] {
        let list: Vec<Value> = match http
            .get(format!("{base}/{kind}/%2F?columns=name"))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let names: Vec<String> = list
            .iter()
            .filter_map(|v| v["name"].as_str())
            .filter(|n| n.contains(prefix))
            .map(str::to_string)
            .collect();
        futures::stream::iter(names)
            .for_each_concurrent(8, |n| {
                let http = http.clone();
                async move {
                    let _ = http
                        .delete(format!("{base}/{kind}/%2F/{}", enc(&n)))
                        .basic_auth("guest", Some("guest"))
                        .send()
                        .await;
                }
            })
            .await;
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let queue_type = match args.get(1).map(String::as_str) {
        Some("quorum") => "Quorum",
        _ => "Classic",
    };
    let prefix = format!("bench-{:06x}", rand::random::<u32>() & 0xff_ffff);

    let fake = FakeApi::default();
    fake.put(
        "/apis/dlqoperator.io/v1alpha1/namespaces/bench/retrypolicies/policy",
        json!({"apiVersion": "dlqoperator.io/v1alpha1", "kind": "RetryPolicy",
               "metadata": {"name": "policy", "namespace": NS, "generation": 1},
               "spec": {"maxRetries": 2, "tiers": ["10s"]}}),
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
            json!(dlq(i, &prefix, queue_type, None)),
        );
    }
    let ctx = Arc::new(DeadLetterQueueContext::new(Arc::new(Context::new(
        fake.client(NS),
        "bench",
        Metrics::new(),
        Arc::new(BrokerClients::default()),
    ))));

    println!(
        "reconcile of {n} DeadLetterQueues ({queue_type} queues, 1 retry tier each), 4 at a time"
    );
    let rss_before = proc_status("VmRSS:");
    let start = Instant::now();
    let failures = futures::stream::iter(0..n)
        .map(|i| {
            let ctx = ctx.clone();
            let obj = Arc::new(dlq(i, &prefix, queue_type, None));
            async move { dead_letter_queue::reconcile(obj, ctx).await.is_err() }
        })
        .buffer_unordered(4)
        .filter(|failed| futures::future::ready(*failed))
        .count()
        .await;
    let first = start.elapsed();
    let calls = fake.take();
    let statuses: std::collections::HashMap<String, Value> = calls
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
        .collect();
    let broker = ctx.shared.brokers.request_counts();
    println!(
        "first reconcile: {:.1} s ({:.1} ms per object), {failures} failed, {} API calls, {} broker requests ({} writes), peak RSS {} MiB (start {} MiB)",
        first.as_secs_f64(),
        first.as_secs_f64() * 1000.0 / n as f64,
        calls.len(),
        broker.reads + broker.writes,
        broker.writes,
        proc_status("VmHWM:") / 1024,
        rss_before / 1024,
    );

    // Steady state: the same objects with the status the controller wrote.
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let ctx = ctx.clone();
            let status = statuses.get(&format!("d{i}")).cloned();
            let obj = Arc::new(dlq(i, &prefix, queue_type, status));
            async move { dead_letter_queue::reconcile(obj, ctx).await.is_err() }
        })
        .buffer_unordered(4)
        .for_each(|_| async {})
        .await;
    let round = start.elapsed();
    let cpu = cpu_seconds() - cpu_before;
    let calls = fake.take();
    let api_writes = calls.iter().filter(|c| c.is_write()).count();
    let after = ctx.shared.brokers.request_counts();
    println!(
        "steady-state resync round: {:.1} s wall, {:.2} s CPU (this process), {api_writes} API writes, {} broker writes, {} broker reads; at the default 5 min resync: {:.0} API writes/min, {:.3} CPU s/min",
        round.as_secs_f64(),
        cpu,
        after.writes - broker.writes,
        after.reads - broker.reads,
        api_writes as f64 / 5.0,
        cpu / 5.0,
    );
    delete_prefix(&prefix).await;
}
