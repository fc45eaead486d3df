//! Replay throughput against the broker's own way of moving messages (issue: "at least as
//! fast as the shovel"): N messages of 1 KiB in a DeadLetterQueue's dead-letter queue are
//! moved to its source queue (a) by `rabbitmq::dlq::replay` (publisher confirms, ack after
//! confirm, headers rewritten) and (b) by a dynamic shovel (`rabbitmq_shovel`, started
//! through the management API: `PUT /api/parameters/shovel/%2F/NAME`, `ack-mode:
//! on-confirm`, `src-delete-after: queue-length`, local `amqp://` URIs) on the same broker
//! in the same run, three rounds alternating; the medians and their ratio are printed.
//!
//! `dlq replay` also runs with a smaller crash window (`--max-in-flight 100` and `1`,
//! "replay -w N"): what a user pays for fewer duplicates after a crash.
//!
//! Two reference loops run in the same rounds, to tell what our code costs from what the
//! AMQP client costs: the least an AMQP 0-9-1 client can do to move the messages with the
//! same guarantees (a consumer with prefetch 3,000, each copy published with one header
//! added and a publisher confirm on a second connection, up to 1,000 in flight, the
//! originals acked with `multiple` after their copies' confirms) — once with lapin, the
//! client `dlq replay` uses, and once with amqprs. No filter, no checkpoint, no crash
//! handling: they are floors for the client, not replays. For each of the four, the CPU
//! used by the broker (`beam.smp`, from `/proc/PID/stat`) and by this process while it
//! ran is printed in % of one core.
//!
//! Needs the local RabbitMQ (127.0.0.1, guest/guest, shovel plugins enabled by
//! `scripts/ensure-rabbitmq.sh`). Creates and deletes its own queues
//! (`bench-replay-<pid>*`).
//!
//! Run: `cargo bench --bench replay` (5,000 messages) or `cargo bench --bench replay -- 20000`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use amqprs::callbacks::{ChannelCallback, DefaultChannelCallback, DefaultConnectionCallback};
use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicPublishArguments, BasicQosArguments,
    ConfirmSelectArguments,
};
use amqprs::connection::{Connection as AmqprsConnection, OpenConnectionArguments};
use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use serde_json::json;

use tokio_util::sync::CancellationToken;

use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::broker::BrokerConnection;
use dlq_operator::crd::{DeadLetterQueueSpec, RetryPolicySpec};
use dlq_operator::dlq::filter::Filter;
use dlq_operator::dlq::replay::{ReplayOptions, ReplayReport, Target};
use dlq_operator::rabbitmq::dlq::replay;
use dlq_operator::rabbitmq::RabbitMq;
use dlq_operator::topology::plan;

mod common;
use common::{broker_pid, count, cpu_since, cpu_ticks, fill, median, now_ms, AMQP, API};

/// Reference floor with lapin (module doc): moves the `n` messages of `dlq` to `queue`.
/// Returns messages per second.
async fn lapin_floor(dlq: &str, queue: &str, n: usize) -> f64 {
    let start = Instant::now();
    let conn = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let publishing = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(3000, BasicQosOptions::default())
        .await
        .expect("qos");
    let pch = publishing.create_channel().await.expect("channel");
    pch.confirm_select(Default::default())
        .await
        .expect("confirms");
    let mut consumer = ch
        .basic_consume(
            dlq.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let mut in_flight: VecDeque<(u64, lapin::PublisherConfirm)> = VecDeque::new();
    let (mut read, mut done, mut unacked) = (0, 0, 0);
    while done < n {
        if in_flight.len() >= 1000 || read == n {
            let (tag, confirm) = in_flight.pop_front().expect("in flight");
            assert!(confirm.await.expect("confirm").is_ack(), "copy refused");
            done += 1;
            unacked += 1;
            if unacked == 250 || done == n {
                ch.basic_ack(tag, BasicAckOptions { multiple: true })
                    .await
                    .expect("ack");
                unacked = 0;
            }
            continue;
        }
        let d = consumer.next().await.expect("delivery").expect("delivery");
        read += 1;
        let mut headers = d.properties.headers().clone().unwrap_or_default();
        headers.insert(
            "dlq-replay-id".into(),
            lapin::types::AMQPValue::LongString("floor".into()),
        );
        let props = d.properties.clone().with_headers(headers);
        let confirm = pch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                &d.data,
                props,
            )
            .await
            .expect("publish");
        in_flight.push_back((d.delivery_tag, confirm));
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    let _ = conn.close(200, "bye".into()).await;
    let _ = publishing.close(200, "bye".into()).await;
    rate
}

/// Publisher confirms of the amqprs floor: `(delivery tag, multiple, ack)`.
struct Confirms(tokio::sync::mpsc::UnboundedSender<(u64, bool, bool)>);

#[async_trait::async_trait]
impl ChannelCallback for Confirms {
    async fn close(
        &mut self,
        c: &amqprs::channel::Channel,
        a: amqprs::CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        DefaultChannelCallback.close(c, a).await
    }
    async fn cancel(
        &mut self,
        c: &amqprs::channel::Channel,
        a: amqprs::Cancel,
    ) -> Result<(), amqprs::error::Error> {
        DefaultChannelCallback.cancel(c, a).await
    }
    async fn flow(
        &mut self,
        c: &amqprs::channel::Channel,
        active: bool,
    ) -> Result<bool, amqprs::error::Error> {
        DefaultChannelCallback.flow(c, active).await
    }
    async fn publish_ack(&mut self, _: &amqprs::channel::Channel, a: amqprs::Ack) {
        let _ = self.0.send((a.delivery_tag(), a.mutiple(), true));
    }
    async fn publish_nack(&mut self, _: &amqprs::channel::Channel, a: amqprs::Nack) {
        let _ = self.0.send((a.delivery_tag(), a.multiple(), false));
    }
    async fn publish_return(
        &mut self,
        _: &amqprs::channel::Channel,
        _: amqprs::Return,
        _: amqprs::BasicProperties,
        _: Vec<u8>,
    ) {
        panic!("a copy was returned unroutable");
    }
}

/// Reference floor with amqprs (module doc): moves the `n` messages of `dlq` to `queue`.
/// Returns messages per second.
async fn amqprs_floor(dlq: &str, queue: &str, n: usize) -> f64 {
    let start = Instant::now();
    let args = OpenConnectionArguments::new("127.0.0.1", 5672, "guest", "guest");
    let conn = AmqprsConnection::open(&args).await.expect("amqp");
    conn.register_callback(DefaultConnectionCallback)
        .await
        .expect("callback");
    let publishing = AmqprsConnection::open(&args).await.expect("amqp");
    let ch = conn.open_channel(None).await.expect("channel");
    ch.basic_qos(BasicQosArguments::new(0, 3000, false))
        .await
        .expect("qos");
    let pch = publishing.open_channel(None).await.expect("channel");
    let (tx, mut confirms) = tokio::sync::mpsc::unbounded_channel();
    pch.register_callback(Confirms(tx)).await.expect("callback");
    pch.confirm_select(ConfirmSelectArguments::default())
        .await
        .expect("confirms");
    let (_, mut deliveries) = ch
        .basic_consume_rx(
            BasicConsumeArguments::new(dlq, "")
                .manual_ack(true)
                .finish(),
        )
        .await
        .expect("consume");
    // Publish sequence number -> the original's delivery tag.
    let mut in_flight: BTreeMap<u64, u64> = BTreeMap::new();
    let mut confirmed: BTreeSet<u64> = BTreeSet::new();
    let (mut read, mut done, mut seq, mut contiguous, mut acked) = (0, 0, 0u64, 0u64, 0u64);
    while done < n {
        tokio::select! {
            biased;
            Some((tag, multiple, ack)) = confirms.recv() => {
                assert!(ack, "copy refused");
                let settled: Vec<u64> = if multiple {
                    in_flight.range(..=tag).map(|(k, _)| *k).collect()
                } else {
                    vec![tag]
                };
                for k in settled {
                    if let Some(original) = in_flight.remove(&k) {
                        confirmed.insert(original);
                        done += 1;
                    }
                }
                while confirmed.remove(&(contiguous + 1)) {
                    contiguous += 1;
                }
                if contiguous >= acked + 250 || (done == n && contiguous > acked) {
                    ch.basic_ack(BasicAckArguments::new(contiguous, true))
                        .await
                        .expect("ack");
                    acked = contiguous;
                }
            }
            Some(m) = deliveries.recv(), if in_flight.len() < 1000 && read < n => {
                read += 1;
                let (Some(deliver), Some(mut props), Some(body)) =
                    (m.deliver, m.basic_properties, m.content)
                else {
                    panic!("incomplete delivery");
                };
                let mut headers = props.headers().cloned().unwrap_or_default();
                headers.insert(
                    "dlq-replay-id".try_into().expect("name"),
                    amqprs::FieldValue::S("floor".try_into().expect("value")),
                );
                props.with_headers(headers);
                seq += 1;
                in_flight.insert(seq, deliver.delivery_tag());
                pch.basic_publish(
                    props,
                    body,
                    BasicPublishArguments::new("", queue).mandatory(true).finish(),
                )
                .await
                .expect("publish");
            }
        }
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    let _ = conn.close().await;
    let _ = publishing.close().await;
    rate
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
    let broker = broker_pid();
    if broker.is_none() {
        println!("no beam.smp process found here: the broker's CPU is not reported");
    }
    const KINDS: [&str; 6] = [
        "dlq replay",
        "replay -w 100",
        "replay -w 1",
        "lapin floor",
        "amqprs floor",
        "dynamic shovel",
    ];
    // Per kind: (msg/s, broker CPU %, this process's CPU %) of each round.
    let mut results: BTreeMap<&str, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for round in 0..3 {
        for kind in KINDS {
            fill(&ch, &dlq, n).await;
            let ticks = (
                broker.as_deref().map_or(0, cpu_ticks),
                cpu_ticks("self"),
                Instant::now(),
            );
            let rate = match kind {
                "dlq replay" | "replay -w 100" | "replay -w 1" => {
                    let opts = ReplayOptions {
                        filter: Filter::default(),
                        limit: None,
                        rate: None,
                        dry_run: false,
                        target: Target::OriginalQueue,
                        max_replays: 3,
                        replay_id: format!("bench-{round}"),
                        max_in_flight: match kind {
                            "replay -w 100" => 100,
                            "replay -w 1" => 1,
                            _ => dlq_operator::dlq::replay::MAX_IN_FLIGHT,
                        },
                        rewrite: None,
                    };
                    let start = Instant::now();
                    let report = replay(
                        &conn,
                        &topology,
                        &opts,
                        now_ms(),
                        &CancellationToken::new(),
                        &mut |_: &ReplayReport| {},
                    )
                    .await
                    .expect("replay");
                    assert_eq!(report.replayed as usize, n, "{report:?}");
                    n as f64 / start.elapsed().as_secs_f64()
                }
                "lapin floor" => lapin_floor(&dlq, &q, n).await,
                "amqprs floor" => amqprs_floor(&dlq, &q, n).await,
                _ => {
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
                    let rate = n as f64 / start.elapsed().as_secs_f64();
                    let _ = http
                        .delete(format!("{API}/parameters/shovel/%2F/{name}"))
                        .basic_auth("guest", Some("guest"))
                        .send()
                        .await;
                    rate
                }
            };
            let (broker_cpu, own_cpu) = cpu_since(broker.as_deref(), ticks);
            assert_eq!(count(&ch, &q).await as usize, n, "{kind}: source queue");
            // The last acks may still be on their way when the connection closed.
            let mut left = count(&ch, &dlq).await;
            for _ in 0..100 {
                if left == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                left = count(&ch, &dlq).await;
            }
            assert_eq!(left, 0, "{kind}: messages left in the dead-letter queue");
            ch.queue_purge(q.as_str().into(), QueuePurgeOptions::default())
                .await
                .expect("purge");
            println!(
                "round {round}: {kind:<14} {rate:>7.0} msg/s  CPU: broker {broker_cpu:>3.0} %, bench process {own_cpu:>3.0} %"
            );
            results
                .entry(kind)
                .or_default()
                .push((rate, broker_cpu, own_cpu));
        }
    }
    let medians: BTreeMap<&str, (f64, f64, f64)> = results
        .into_iter()
        .map(|(kind, v)| {
            let column = |f: fn(&(f64, f64, f64)) -> f64| median(v.iter().map(f).collect());
            (kind, (column(|x| x.0), column(|x| x.1), column(|x| x.2)))
        })
        .collect();
    let shovel = medians["dynamic shovel"].0;
    println!("{n} messages of 1 KiB, medians of 3 rounds:");
    for kind in KINDS {
        let (rate, broker_cpu, own_cpu) = medians[kind];
        println!(
            "  {kind:<14} {rate:>7.0} msg/s  / shovel = {:.2}  CPU: broker {broker_cpu:.0} %, bench process {own_cpu:.0} %",
            rate / shovel
        );
    }
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
