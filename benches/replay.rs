//! Replay throughput against the broker's own way of moving messages (issue: "at least as
//! fast as the shovel"): N messages of 1 KiB in a DeadLetterQueue's dead-letter queue are
//! moved to its source queue (a) by `dlq::replay::replay` (publisher confirms, ack after
//! confirm, headers rewritten) and (b) by a dynamic shovel (`rabbitmq_shovel`, started
//! through the management API: `PUT /api/parameters/shovel/%2F/NAME`, `ack-mode:
//! on-confirm`, `src-delete-after: queue-length`, local `amqp://` URIs) on the same broker
//! in the same run, three rounds alternating; the medians and their ratio are printed.
//!
//! Needs the local RabbitMQ (127.0.0.1, guest/guest, shovel plugins enabled by
//! `scripts/ensure-rabbitmq.sh`). Creates and deletes its own queues
//! (`bench-replay-<pid>*`).
//!
//! Run: `cargo bench --bench replay` (5,000 messages) or `cargo bench --bench replay -- 20000`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use lapin::options::{QueueDeclareOptions, QueuePurgeOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use serde_json::json;

use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::broker::rabbitmq::RabbitMq;
use dlq_operator::broker::{Broker, BrokerConnection};
use dlq_operator::crd::{DeadLetterQueueSpec, RetryPolicySpec};
use dlq_operator::dlq::filter::Filter;
use dlq_operator::dlq::replay::{replay, ReplayOptions, ReplayReport, Target};
use dlq_operator::topology::plan;

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const API: &str = "http://127.0.0.1:15672/api";

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn count(ch: &lapin::Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("queue exists")
    .message_count()
}

/// Publishes `n` persistent 1 KiB messages to `queue`, all confirms awaited.
async fn fill(ch: &lapin::Channel, queue: &str, n: usize) {
    let body = vec![b'x'; 1024];
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(format!("b{i}").into());
        confirms.push(
            ch.basic_publish("".into(), queue.into(), Default::default(), &body, props)
                .await
                .expect("publish"),
        );
    }
    for c in confirms {
        assert!(c.await.expect("confirm").is_ack(), "publish refused");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5_000);
    let q = format!("bench-replay-{}", std::process::id());
    let data: BTreeMap<String, Vec<u8>> =
        [("uri", AMQP), ("managementUri", "http://127.0.0.1:15672")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
    let conn = BrokerConnection::from_secret_data("rabbitmq", &data).expect("secret");
    let spec: DeadLetterQueueSpec = serde_json::from_value(json!({
        "broker": {"secretRef": {"name": "rabbitmq"}},
        "source": {"queue": q},
        "retryPolicyRef": {"name": "rp"},
    }))
    .expect("spec");
    let rp: RetryPolicySpec =
        serde_json::from_value(json!({"maxRetries": 1, "tiers": ["1s"]})).expect("rp");
    let topology = plan(
        "bench/replay",
        &spec,
        &ResolvedPolicy::from_spec(&rp).expect("policy"),
    );
    RabbitMq::new(&conn)
        .expect("client")
        .apply(&topology)
        .await
        .expect("apply");
    let dlq = format!("{q}.dlq");
    let amqp = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let ch = amqp.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    let http = reqwest::Client::new();
    let (mut replay_rates, mut shovel_rates) = (Vec::new(), Vec::new());
    for round in 0..3 {
        // (a) dlq replay
        fill(&ch, &dlq, n).await;
        let opts = ReplayOptions {
            filter: Filter::default(),
            limit: None,
            rate: None,
            dry_run: false,
            target: Target::OriginalQueue,
            max_replays: 3,
            replay_id: format!("bench-{round}"),
        };
        let start = Instant::now();
        let report = replay(
            &conn,
            &topology,
            &opts,
            now_ms(),
            &AtomicBool::new(false),
            &mut |_: &ReplayReport| {},
        )
        .await
        .expect("replay");
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(report.replayed as usize, n, "{report:?}");
        assert_eq!(count(&ch, &q).await as usize, n);
        replay_rates.push(n as f64 / secs);
        ch.queue_purge(q.as_str().into(), QueuePurgeOptions::default())
            .await
            .expect("purge");

        // (b) dynamic shovel
        fill(&ch, &dlq, n).await;
        let name = format!("{q}-shovel-{round}");
        let start = Instant::now();
        let status = http
            .put(format!("{API}/parameters/shovel/%2F/{name}"))
            .basic_auth("guest", Some("guest"))
            .json(&json!({"value": {
                "src-protocol": "amqp091", "src-uri": "amqp://", "src-queue": dlq,
                "dest-protocol": "amqp091", "dest-uri": "amqp://", "dest-queue": q,
                "ack-mode": "on-confirm", "src-delete-after": "queue-length"}}))
            .send()
            .await
            .expect("start shovel")
            .status();
        assert!(status.is_success(), "shovel refused: {status}");
        while (count(&ch, &q).await as usize) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let secs = start.elapsed().as_secs_f64();
        shovel_rates.push(n as f64 / secs);
        let _ = http
            .delete(format!("{API}/parameters/shovel/%2F/{name}"))
            .basic_auth("guest", Some("guest"))
            .send()
            .await;
        ch.queue_purge(q.as_str().into(), QueuePurgeOptions::default())
            .await
            .expect("purge");
        println!(
            "round {round}: replay {:.0} msg/s, shovel {:.0} msg/s",
            replay_rates[round], shovel_rates[round]
        );
    }
    let (r, s) = (median(replay_rates), median(shovel_rates));
    println!("{n} messages of 1 KiB, median of 3: replay {r:.0} msg/s, shovel {s:.0} msg/s, replay / shovel = {:.2}", r / s);
    // Remove the benchmark's own (empty) objects.
    for path in topology
        .queues
        .iter()
        .map(|x| format!("queues/%2F/{}", x.name))
        .chain(
            topology
                .exchanges
                .iter()
                .map(|x| format!("exchanges/%2F/{}", x.name)),
        )
        .chain(
            topology
                .policies
                .iter()
                .map(|p| format!("policies/%2F/{}", p.name)),
        )
    {
        let _ = http
            .delete(format!("{API}/{path}"))
            .basic_auth("guest", Some("guest"))
            .send()
            .await;
    }
    let _ = amqp.close(200, "bye".into()).await;
}
