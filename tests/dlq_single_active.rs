//! A dead-letter queue with `x-single-active-consumer` that another consumer holds, on the
//! real RabbitMQ (127.0.0.1, guest/guest): the reading of `dlq inspect` (and the console's
//! scan) and of `dlq replay` would wait behind that consumer for ever; they fall back to
//! `basic.get`, which a single active consumer does not hold back, and read every message
//! — nothing lost, nothing left held.

mod common;

use std::time::Duration;

use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use tokio_util::sync::CancellationToken;

use common::cleanup;
use common::dlq::{confirm_channel, connection, header, now_ms, publish, ready, text, topology};
use dlq_operator::dlq::browse::InspectOptions;
use dlq_operator::dlq::filter::Filter;
use dlq_operator::dlq::replay::{ReplayOptions, ReplayReport, Target};
use dlq_operator::rabbitmq::dlq::inspect;
use dlq_operator::rabbitmq::dlq::replay;

/// Declares `queue` (classic, durable) with a single active consumer, puts `n` dead
/// letters of class `Timeout` in it, and starts a consumer that holds the queue (it takes
/// one message and never acks): the connection, a channel, and the holder's channel and
/// consumer (keep them: dropping the channel closes it).
async fn held_queue(
    source: &str,
    queue: &str,
    n: usize,
) -> (
    lapin::Connection,
    lapin::Channel,
    (lapin::Channel, lapin::Consumer),
) {
    let (conn, ch) = confirm_channel().await;
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-single-active-consumer"),
        AMQPValue::Boolean(true),
    );
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .expect("declare");
    for i in 0..n {
        let letter = header(&[
            ("dlq-error-class", text("Timeout")),
            ("dlq-original-queue", text(source)),
        ]);
        publish(&ch, queue, &format!("m{i}"), letter).await;
    }
    let holder = conn.create_channel().await.expect("channel");
    holder
        .basic_qos(1, BasicQosOptions::default())
        .await
        .expect("qos");
    let consumer = holder
        .basic_consume(
            queue.into(),
            "holder".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("the holder consumes");
    // The holder has its one message: n - 1 stay ready.
    for _ in 0..100 {
        if ready(&ch, queue).await as usize == n - 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (conn, ch, (holder, consumer))
}

#[tokio::test]
async fn a_scan_reads_a_queue_another_single_active_consumer_holds() {
    let q = common::unique("t-sac-scan");
    let dlq = format!("{q}.dlq");
    let (conn, ch, _holder) = held_queue(&q, &dlq, 6).await;
    let t = topology(&q, None);
    let opts = InspectOptions {
        max_messages: 100,
        sample_size: 10,
        preview_bytes: 64,
    };
    let i = tokio::time::timeout(
        Duration::from_secs(60),
        inspect(&connection(), &t, opts, now_ms()),
    )
    .await
    .expect("the scan ends")
    .expect("inspect");
    assert_eq!((i.total, i.scanned), (5, 5), "{i:?}");
    assert_eq!(i.by_error_class["Timeout"], 5);
    assert_eq!(
        ready(&ch, &dlq).await,
        5,
        "every message read is given back"
    );
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

#[tokio::test]
async fn a_replay_dry_run_ends_on_a_queue_another_single_active_consumer_holds() {
    let q = common::unique("t-sac-replay");
    let dlq = format!("{q}.dlq");
    let (conn, ch, _holder) = held_queue(&q, &dlq, 6).await;
    let t = topology(&q, None);
    let opts = ReplayOptions {
        filter: Filter::parse(&["class=timeout"]).expect("filter"),
        limit: None,
        rate: None,
        dry_run: true,
        target: Target::OriginalQueue,
        max_replays: 3,
        replay_id: "test-sac".into(),
        max_in_flight: dlq_operator::dlq::replay::MAX_IN_FLIGHT,
        rewrite: None,
    };
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        replay(
            &connection(),
            &t,
            &opts,
            now_ms(),
            &CancellationToken::new(),
            &mut |_: &ReplayReport| {},
        ),
    )
    .await
    .expect("the dry run ends (it waited for ever behind the other consumer)")
    .expect("replay");
    assert_eq!((report.scanned, report.replayed), (5, 5), "{report:?}");
    assert_eq!(ready(&ch, &dlq).await, 5, "a dry run moves nothing");
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}
