//! The retry router's speed against the least a forwarder can do with the same guarantees
//! (docs/BENCHMARKS.md, "Retry router").
//!
//! A DeadLetterQueue in router mode (one 5-minute tier, so every routed message waits in
//! it) is applied to the local broker. Each round, N messages of 1 KiB are dead-lettered
//! into its inbox for real: published to the source queue and rejected there by a plain
//! consumer (`basic.nack`, `requeue=false`) while no router runs. Then they are moved into
//! the tier queue by one of two movers, the clock stopping when the tier holds all N:
//!
//! - **router**: `dlq_operator::router::worker::run`, the code every driver runs —
//!   ownership check, `x-death` read, decision, header stamping, `mandatory` publish with
//!   a publisher confirm, ack after the confirm, prefetch `spec.router.prefetch` (100);
//! - **forwarder**: the floor for the same guarantees with the same client library
//!   (lapin) and the same connection code (`amqp::connect_vhost`): one channel in
//!   confirm mode with the same prefetch, each delivery published unchanged to the tier's
//!   exchange and routing key with `mandatory`, its confirm awaited, then acked; up to
//!   `prefetch` at once. No decision, no headers.
//!
//! - **forwarder + headers**: the forwarder, each copy also carrying the header contract
//!   the router writes (`client::headers::republish_properties` with fixed values): what
//!   the contract's bytes cost the broker, apart from the router's own code.
//!
//! Three rounds, the three alternating; medians, their ratio, and the CPU per message of
//! this process (the mover, from `/proc/self/stat`) and of the broker (`beam.smp`).
//!
//! Then the reject-to-tier latency on the idle broker, the router running: one message at
//! a time is published to the source queue, a plain consumer rejects it, and a consumer on
//! the tier queue receives the router's copy; latency = arrival − the reject's send.
//!
//! Needs the local RabbitMQ (127.0.0.1, guest/guest, management plugin). Creates and
//! removes its own objects (`bench-router-<pid>*`).
//!
//! Run: `cargo bench --bench router` (20,000 messages, classic queues), or
//! `cargo bench --bench router -- 5000 quorum prefetch=500`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use tokio_util::sync::CancellationToken;

use dlq_operator::client::headers::{republish_properties, Action, Stamp};
use dlq_operator::rabbitmq::{amqp, RabbitMq};
use dlq_operator::reconcile::Prepared;
use dlq_operator::resolve::manifests::load_and_plan;
use dlq_operator::router::worker::run;
use dlq_operator::router::{RouterMetrics, Target};

mod common;
use common::{
    broker_pid, count, cpu_seconds_since, fill, median, now_ms, percentile, ticks_now, wait_for,
    AMQP,
};

/// The movers, in the order they run each round (module doc).
const KINDS: [&str; 3] = ["router", "forwarder", "forwarder + headers"];

/// Messages of the latency run (one at a time).
const LATENCY_MESSAGES: usize = 1_000;

/// The DeadLetterQueue of the bench, planned from manifests as `dlq-operator apply` does.
fn planned(queue: &str, queue_type: &str, prefetch: u16) -> (Prepared, Target) {
    let dir = tempfile::tempdir().expect("temp dir");
    let manifests = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: default\nstringData:\n  uri: {AMQP}\n  managementUri: http://127.0.0.1:15672\n---\napiVersion: dlqoperator.io/v1alpha1\nkind: RetryPolicy\nmetadata:\n  name: p\n  namespace: default\nspec:\n  maxRetries: 3\n  tiers: [5m]\n---\napiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: bench\n  namespace: default\nspec:\n  broker:\n    secretRef:\n      name: s\n  source:\n    queue: {queue}\n    queueType: {queue_type}\n  retryPolicyRef:\n    name: p\n  router:\n    enabled: true\n    prefetch: {prefetch}\n"
    );
    let path = dir.path().join("bench.yaml");
    std::fs::write(&path, manifests).expect("write manifests");
    let (_, mut planned) = load_and_plan(&[PathBuf::from(&path)]).expect("valid manifests");
    let p = planned.pop().expect("one DeadLetterQueue");
    let target = Target::of(&p.prepared, &p.object.spec.router).expect("router mode");
    (p.prepared, target)
}

/// Dead-letters `n` messages into the inbox for real: publishes them to the source queue
/// and rejects each there (`basic.nack`, `requeue=false`, `multiple` every 100) with a
/// plain consumer; returns when the inbox holds all of them.
async fn dead_letter(ch: &lapin::Channel, target: &Target, n: usize) {
    let (source, inbox) = (&target.routes.source_queue, target.routes.inbox.as_deref());
    let inbox = inbox.expect("router mode");
    fill(ch, source, n).await;
    let conn = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let rch = conn.create_channel().await.expect("channel");
    rch.basic_qos(1000, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = rch
        .basic_consume(
            source.as_str().into(),
            "bench-rejecter".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    for i in 1..=n {
        let d = consumer.next().await.expect("delivery").expect("delivery");
        if i % 100 == 0 || i == n {
            let multiple = BasicNackOptions {
                multiple: true,
                requeue: false,
            };
            rch.basic_nack(d.delivery_tag, multiple)
                .await
                .expect("nack");
        }
    }
    wait_for(ch, inbox, n).await;
    let _ = conn.close(200, "bye".into()).await;
}

/// The router moves the inbox into the tier; returns what was measured (`measure`) when
/// the tier holds `n`, before the router is stopped (its drain is not timed).
async fn route(
    ch: &lapin::Channel,
    target: &Target,
    tier: &str,
    n: usize,
    measure: impl FnOnce() -> Run,
) -> Run {
    let stop = CancellationToken::new();
    let router = tokio::spawn(run(target.clone(), RouterMetrics::new(), stop.clone()));
    wait_for(ch, tier, n).await;
    let measured = measure();
    stop.cancel();
    router.await.expect("router task");
    measured
}

/// The forwarder (module doc) moves `n` messages from the inbox into the tier; with
/// `stamp`, each copy also gets the header contract the router writes for a first retry
/// (`headers::republish_properties`, fixed values: no decision, no reading). Returns
/// what was measured (`measure`) when the tier holds `n`, before the connection closes.
async fn forward(
    ch: &lapin::Channel,
    target: &Target,
    (tier, n): (&str, usize),
    stamp: bool,
    measure: impl FnOnce() -> Run,
) -> Run {
    let conn = amqp::connect_vhost(&target.connection, &target.vhost)
        .await
        .expect("amqp");
    let fch = conn.create_channel().await.expect("channel");
    fch.confirm_select(Default::default())
        .await
        .expect("confirms");
    fch.basic_qos(target.prefetch, BasicQosOptions::default())
        .await
        .expect("qos");
    let consumer = fch
        .basic_consume(
            target.routes.inbox.as_deref().expect("inbox").into(),
            "bench-forwarder".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let (exchange, key) = (&target.routes.retry_exchange, &target.routes.tiers[0].name);
    let source = target.routes.source_queue.as_str();
    let error = format!(
        "rejected by a consumer of {source:?} (basic.reject or basic.nack with requeue=false)"
    );
    let contract = |properties: &BasicProperties| {
        let stamp = Stamp {
            class: None,
            error: &error,
            now_ms: now_ms(),
            exchange: "",
            routing_key: source,
            queue: source,
            action: Action::Retry {
                attempt: 1,
                delay_ms: 300_000,
            },
        };
        republish_properties(properties, &stamp)
    };
    consumer
        .take(n)
        .for_each_concurrent(usize::from(target.prefetch), |d| {
            let (fch, contract) = (&fch, &contract);
            async move {
                let d = d.expect("delivery");
                let mandatory = BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                };
                let confirm = fch
                    .basic_publish(
                        exchange.as_str().into(),
                        key.as_str().into(),
                        mandatory,
                        &d.data,
                        if stamp {
                            contract(&d.properties)
                        } else {
                            d.properties.clone()
                        },
                    )
                    .await
                    .expect("publish")
                    .await
                    .expect("confirm");
                assert!(
                    confirm.is_ack() && confirm.take_message().is_none(),
                    "copy refused or returned"
                );
                d.ack(BasicAckOptions::default()).await.expect("ack");
            }
        })
        .await;
    wait_for(ch, tier, n).await;
    let measured = measure();
    let _ = conn.close(200, "bye".into()).await;
    measured
}

/// One measured move: (msg/s, this process's CPU µs per message, broker's CPU µs per
/// message).
struct Run {
    rate: f64,
    own_us: f64,
    broker_us: f64,
}

/// Reject-to-tier latencies (ms) of [`LATENCY_MESSAGES`] messages, one at a time, the
/// router running (module doc).
async fn latencies(ch: &lapin::Channel, target: &Target, tier: &str) -> Vec<f64> {
    let stop = CancellationToken::new();
    let router = tokio::spawn(run(target.clone(), RouterMetrics::new(), stop.clone()));
    let conn = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let (rch, tch) = (
        conn.create_channel().await.expect("channel"),
        conn.create_channel().await.expect("channel"),
    );
    let source = target.routes.source_queue.as_str();
    let mut rejecter = rch
        .basic_consume(
            source.into(),
            "bench-latency-rejecter".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume source");
    let mut arrivals = tch
        .basic_consume(
            tier.into(),
            "bench-latency-tier".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume tier");
    let mut out = Vec::with_capacity(LATENCY_MESSAGES);
    for i in 0..LATENCY_MESSAGES {
        let id = format!("lat-{i}");
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(id.clone().into());
        ch.basic_publish("".into(), source.into(), Default::default(), b"x", props)
            .await
            .expect("publish")
            .await
            .expect("confirm");
        let d = rejecter.next().await.expect("delivery").expect("delivery");
        let sent = Instant::now();
        d.reject(BasicRejectOptions { requeue: false })
            .await
            .expect("reject");
        let copy = arrivals.next().await.expect("copy").expect("copy");
        let arrived = Instant::now();
        let copy_id = copy.properties.message_id().as_ref().map(|s| s.to_string());
        assert_eq!(copy_id.as_deref(), Some(id.as_str()), "copies out of order");
        out.push(arrived.duration_since(sent).as_secs_f64() * 1000.0);
    }
    stop.cancel();
    router.await.expect("router task");
    let _ = conn.close(200, "bye".into()).await;
    out
}

/// Args: the message count (default 20,000), `quorum` for quorum queues, and
/// `prefetch=N` (default 100, the default of `spec.router.prefetch`).
fn args() -> (usize, &'static str, u16) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let prefetch = args
        .iter()
        .find_map(|a| a.strip_prefix("prefetch=")?.parse().ok())
        .unwrap_or(100);
    let queue_type = if args.iter().any(|a| a == "quorum") {
        "Quorum"
    } else {
        "Classic"
    };
    (n, queue_type, prefetch)
}

#[tokio::main]
async fn main() {
    let (n, queue_type, prefetch) = args();
    let queue = format!("bench-router-{}", std::process::id());
    let (prepared, target) = planned(&queue, queue_type, prefetch);
    let broker = RabbitMq::new(&prepared.connection).expect("client");
    broker.apply(&prepared.topology).await.expect("apply");
    let tier = target.routes.tiers[0].queue.clone();
    let amqp = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let ch = amqp.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    let beam = broker_pid();
    if beam.is_none() {
        println!("no beam.smp process found here: the broker's CPU is not reported");
    }
    let mut runs: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
    for round in 0..3 {
        for kind in KINDS {
            dead_letter(&ch, &target, n).await;
            let ticks = ticks_now(beam.as_deref());
            let measure = || {
                let secs = ticks.2.elapsed().as_secs_f64();
                let (broker_cpu, own_cpu) = cpu_seconds_since(beam.as_deref(), ticks);
                Run {
                    rate: n as f64 / secs,
                    own_us: own_cpu / n as f64 * 1e6,
                    broker_us: broker_cpu / n as f64 * 1e6,
                }
            };
            let r = match kind {
                "router" => route(&ch, &target, &tier, n, measure).await,
                "forwarder" => forward(&ch, &target, (&tier, n), false, measure).await,
                _ => forward(&ch, &target, (&tier, n), true, measure).await,
            };
            let inbox = target.routes.inbox.as_deref().expect("inbox");
            // Anything given back by a closing channel reaches a quorum inbox a moment later.
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let (moved, left) = (count(&ch, &tier).await, count(&ch, inbox).await);
            assert_eq!(
                moved as usize, n,
                "{kind}: messages in the tier after the move"
            );
            if left > 0 {
                // At least once: originals whose acks the broker lost when the mover
                // stopped come back, and would be moved a second time.
                println!("round {round}: {kind}: {left} given back to the inbox after the stop (duplicates if moved again)");
            }
            for q in [tier.as_str(), inbox] {
                ch.queue_purge(q.into(), QueuePurgeOptions::default())
                    .await
                    .expect("purge");
            }
            println!(
                "round {round}: {kind:<19} {:>7.0} msg/s  CPU per message: mover {:>5.1} µs, broker {:>5.1} µs",
                r.rate, r.own_us, r.broker_us
            );
            runs.entry(kind).or_default().push(r);
        }
    }
    let med = |kind: &str, f: fn(&Run) -> f64| median(runs[kind].iter().map(f).collect());
    println!(
        "{n} messages of 1 KiB, {queue_type} queues, prefetch {}, medians of 3 rounds:",
        target.prefetch
    );
    for kind in KINDS {
        println!(
            "  {kind:<19} {:>7.0} msg/s  CPU per message: mover {:.1} µs, broker {:.1} µs",
            med(kind, |r| r.rate),
            med(kind, |r| r.own_us),
            med(kind, |r| r.broker_us)
        );
    }
    let rate = |kind| med(kind, |r| r.rate);
    println!(
        "  router / forwarder = {:.2}; router / (forwarder + headers) = {:.2}",
        rate("router") / rate("forwarder"),
        rate("router") / rate("forwarder + headers")
    );
    let started = now_ms();
    let lat = latencies(&ch, &target, &tier).await;
    println!(
        "reject-to-tier latency, {LATENCY_MESSAGES} messages one at a time ({:.1} s): median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        (now_ms() - started) as f64 / 1000.0,
        percentile(lat.clone(), 50.0),
        percentile(lat.clone(), 99.0),
        percentile(lat, 100.0)
    );
    for q in [&tier, &queue] {
        let _ = ch
            .queue_purge(q.as_str().into(), QueuePurgeOptions::default())
            .await;
    }
    // The removal reads the broker's statistics, which lag by up to a few seconds behind
    // the purges: it is tried again until nothing blocks it.
    for attempt in 0.. {
        let removed = broker.remove(&prepared.topology).await.expect("remove");
        if removed.blocked.is_empty() {
            break;
        }
        assert!(
            attempt < 30,
            "the bench's objects were not removed: {removed:?}"
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    let _ = amqp.close(200, "bye".into()).await;
}
