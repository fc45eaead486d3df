//! Collector cost of one poll of one vhost (issue 4's target: 30,000 queues in under 1 s
//! of CPU and under 200 MiB RSS): parse the management API's depth listing
//! (`GET /api/queues/{vhost}?columns=name,messages,messages_ready,messages_unacknowledged`)
//! with the operator's own code ([`depths_from_rows`]), pick each DeadLetterQueue's
//! queues out of it ([`observe`]), evaluate its backlog and record its metrics
//! ([`Collector::record`]) — everything the controller's monitor does per poll except the
//! HTTP request itself.
//!
//! The listing stands in for the broker: by default one generated in the management
//! API's JSON format (every planned queue of N/5 DeadLetterQueues of 5 queues each:
//! source, three retry tiers, dead-letter queue), or with `--prometheus` in the
//! `rabbitmq_prometheus` plugin's format (`/metrics/detailed?family=queue_coarse_metrics`,
//! four lines per queue, parsed by [`depths_from_prometheus`]); with
//! `DLQ_COLLECTOR_RECORDED=<file>`, a recorded answer of a real broker in either format
//! (`scripts/measure-collector.sh` saves both; vhost `dlq-collector-bench`), evaluated for
//! as many resources as it has queues / 5.
//!
//! CPU time is the thread's own (`/proc/thread-self/schedstat`, ns); peak RSS is the
//! process's `VmHWM`.
//!
//! Run: `cargo bench --bench collector` (30,000 queues),
//! `cargo bench --bench collector -- 100000`, `cargo bench --bench collector -- --prometheus`.

use std::time::Instant;

use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::broker::{depths_from_prometheus, depths_from_rows, QueueDepthRow};
use dlq_operator::collector::{observe, Collector};
use dlq_operator::crd::{DeadLetterQueue, RetryPolicySpec};
use dlq_operator::metrics::Metrics;
use dlq_operator::monitor::Params;
use dlq_operator::topology::{plan, DesiredTopology};

const POLLS: usize = 7;

/// CPU time of this thread, ns.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A `VmRSS` / `VmHWM` line of /proc/self/status, MiB.
fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn resources(n: usize) -> Vec<(String, DesiredTopology, Params)> {
    let policy = ResolvedPolicy::from_spec(&RetryPolicySpec {
        tiers: Some(
            ["5s", "30s", "5m"]
                .iter()
                .map(|t| dlq_operator::duration::Duration((*t).into()))
                .collect(),
        ),
        ..Default::default()
    })
    .expect("policy");
    (0..n)
        .map(|i| {
            let dlq: DeadLetterQueue = serde_json::from_value(serde_json::json!({
                "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
                "metadata": {"name": format!("svc-{i:05}"), "namespace": "bench"},
                "spec": {
                    "broker": {"secretRef": {"name": "rabbit"}},
                    "source": {"queue": format!("svc-{i:05}")},
                    "retryPolicyRef": {"name": "p"},
                    "monitoring": {"interval": "15s", "baseline": {"mode": "Rolling", "window": "1h"},
                                   "thresholdFactor": 3.0, "minHeadroom": 100, "for": "5m",
                                   "growthPerMinute": 50.0},
                }
            }))
            .expect("dlq");
            let key = format!("bench/svc-{i:05}");
            let topology = plan(&key, &dlq.spec, &policy);
            let params = Params::from_spec(&dlq.spec.monitoring).expect("params");
            (key, topology, params)
        })
        .collect()
}

/// The same listing in the `rabbitmq_prometheus` format (vhost `/`), as the plugin
/// writes it: the four `queue_coarse_metrics` families, one line per queue each.
fn prometheus_listing(topologies: &[(String, DesiredTopology, Params)], poll: u64) -> String {
    let names: Vec<&str> = topologies
        .iter()
        .flat_map(|(_, t, _)| t.queues.iter().map(|q| q.name.as_str()))
        .collect();
    let mut out = String::new();
    for (family, pick) in [
        ("rabbitmq_detailed_queue_messages_ready", 0),
        ("rabbitmq_detailed_queue_messages_unacked", 1),
        ("rabbitmq_detailed_queue_messages", 2),
        ("rabbitmq_detailed_queue_process_reductions_total", 3),
    ] {
        out.push_str(&format!(
            "# TYPE {family} gauge\n# HELP {family} generated\n"
        ));
        for (i, name) in names.iter().enumerate() {
            let ready = (i as u64 * 7919 + poll * 13) % 500;
            let v = [ready, 1, ready + 1, 123_456][pick];
            out.push_str(&format!("{family}{{vhost=\"/\",queue=\"{name}\"}} {v}\n"));
        }
    }
    out
}

/// A depth listing in the management API's format for every queue of `topologies`.
fn listing(topologies: &[(String, DesiredTopology, Params)], poll: u64) -> String {
    let rows: Vec<serde_json::Value> = topologies
        .iter()
        .flat_map(|(_, t, _)| t.queues.iter())
        .enumerate()
        .map(|(i, q)| {
            let ready = (i as u64 * 7919 + poll * 13) % 500;
            serde_json::json!({"messages": ready + 1, "messages_ready": ready,
                               "messages_unacknowledged": 1, "name": q.name})
        })
        .collect();
    serde_json::to_string(&rows).expect("json")
}

fn main() {
    let queues: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(30_000);
    let prometheus = std::env::args().any(|a| a == "--prometheus");
    let recorded = std::env::var("DLQ_COLLECTOR_RECORDED").ok();
    let parse = |body: &str, vhost: &str| {
        if prometheus {
            depths_from_prometheus(body, vhost).expect("prometheus listing")
        } else {
            let rows: Vec<QueueDepthRow> = serde_json::from_str(body).expect("JSON listing");
            depths_from_rows(rows)
        }
    };
    let format = if prometheus {
        "rabbitmq_prometheus"
    } else {
        "management API JSON"
    };
    let (bodies, resources, source, vhost) = match &recorded {
        Some(path) => {
            let body = std::fs::read_to_string(path).expect("recorded listing");
            let r = resources(parse(&body, "dlq-collector-bench").len() / 5);
            (
                vec![body],
                r,
                format!("recorded {format} answer {path}"),
                "dlq-collector-bench",
            )
        }
        None => {
            let r = resources(queues / 5);
            let bodies = (0..2)
                .map(|p| {
                    if prometheus {
                        prometheus_listing(&r, p)
                    } else {
                        listing(&r, p)
                    }
                })
                .collect();
            (bodies, r, format!("generated {format} listing"), "/")
        }
    };
    let rss_before = status_mib("VmRSS:");
    let metrics = Metrics::new();
    let mut collector = Collector::new(metrics.clone());
    let mut cpu_ms = Vec::new();
    let mut wall_ms = Vec::new();
    let mut listed = 0;
    for poll in 0..POLLS {
        let body = &bodies[poll % bodies.len()];
        let now_ms = 1_000_000 + poll as u64 * 15_000;
        let (cpu0, wall0) = (cpu_ns(), Instant::now());
        let depths = parse(body, vhost);
        listed = depths.len();
        let mut firing = 0;
        for (key, topology, params) in &resources {
            let observed = observe(topology, &depths);
            let (eval, _) = collector.record(key, params, &observed, now_ms);
            firing += usize::from(eval.state.code() == 2);
        }
        std::hint::black_box(firing);
        cpu_ms.push((cpu_ns() - cpu0) as f64 / 1e6);
        wall_ms.push(wall0.elapsed().as_secs_f64() * 1e3);
    }
    let series = metrics
        .render()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count();
    let sorted = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v
    };
    let (cpu, wall) = (sorted(&cpu_ms), sorted(&wall_ms));
    let body_mib = bodies[0].len() as f64 / 1024.0 / 1024.0;
    println!("collector poll ({source}): {listed} queues listed, {} DeadLetterQueues, listing {body_mib:.2} MiB, {series} metric series", resources.len());
    println!(
        "  CPU per poll: median {:.1} ms (min {:.1}, max {:.1}) over {POLLS} polls; wall median {:.1} ms",
        cpu[POLLS / 2],
        cpu[0],
        cpu[POLLS - 1],
        wall[POLLS / 2]
    );
    println!(
        "  RSS: {rss_before:.1} MiB before the first poll (listings held: {} MiB), peak {:.1} MiB",
        format_args!("{:.1}", body_mib * bodies.len() as f64),
        status_mib("VmHWM:")
    );
}
