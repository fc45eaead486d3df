//! The retry router against the real RabbitMQ: a plain consumer that only rejects, the
//! `dlq-operator router --standalone` process moving its failures through the tiers and
//! into the dead-letter queue with the header contract, a consumer's own report with its
//! class, a message the source queue let expire, leaving router mode, a foreign queue
//! under the inbox's name, and a router stopped half-way through a quorum inbox.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::dlq::{header, now_ms, text as amqp_text};
use common::*;
use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;

/// `dlq-operator router --standalone -f dir`, killed on drop.
struct Router(Child);

impl Router {
    fn start(dir: &str) -> Router {
        let child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args([
                "router",
                "--standalone",
                "-f",
                dir,
                "--metrics-bind-address",
                "127.0.0.1:0",
            ])
            .env("RUST_LOG", "info,lapin=off")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start router");
        Router(child)
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A DeadLetterQueue `d` in router mode for `queue` of type `queue_type`, using RetryPolicy
/// `p` and Secret `s`, with `extra` (YAML indented by two) under `spec:`.
pub fn router_dlq_yaml(queue: &str, queue_type: &str, extra: &str) -> String {
    format!(
        "apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: d\n  namespace: default\nspec:\n  broker:\n    secretRef:\n      name: s\n  source:\n    queue: {queue}\n    queueType: {queue_type}\n  retryPolicyRef:\n    name: p\n  router:\n    enabled: true\n{extra}"
    )
}

/// Manifests in router mode for a classic `queue` with `policy` (a RetryPolicy spec
/// body), applied: the dir (keep it alive) and its path.
fn router_manifests(queue: &str, policy: &str, extra: &str) -> (tempfile::TempDir, String) {
    let dir = manifests(&[
        ("s.yaml", &secret_yaml("s", "guest", "guest", MGMT)),
        ("p.yaml", &policy_yaml("p", policy)),
        ("d.yaml", &router_dlq_yaml(queue, "Classic", extra)),
    ]);
    let path = dir.path().display().to_string();
    let out = cli(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", text(&out));
    (dir, path)
}

/// A header's value as text (long string) or number.
fn value(h: &FieldTable, name: &str) -> Option<String> {
    match h.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::LongLongInt(n) => Some(n.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// Waits up to `timeout` for one message in `queue` and takes it (basic.get, acked).
async fn take_one(
    ch: &lapin::Channel,
    queue: &str,
    timeout: Duration,
) -> Option<lapin::message::BasicGetMessage> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(m) = ch
            .basic_get(
                queue.into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .expect("basic.get")
        {
            return Some(m);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test]
async fn a_plain_consumer_that_only_rejects_gets_each_tier_and_then_the_dead_letter_queue() {
    let q = unique("router-plain");
    let (_dir, path) = router_manifests(
        &q,
        "  maxRetries: 2\n  backoff:\n    strategy: Exponential\n    initialDelay: 1s\n    multiplier: 2\n    maxDelay: 2s\n  tiers: [1s, 2s]\n",
        "",
    );
    let _router = Router::start(&path);
    let (_conn, ch) = dlq::confirm_channel().await;
    // The consumer: rejects every delivery with requeue=false and notes when.
    let consumer_ch = _conn.create_channel().await.expect("channel");
    consumer_ch
        .basic_qos(10, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = consumer_ch
        .basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    ch.basic_publish(
        "".into(),
        q.as_str().into(),
        BasicPublishOptions::default(),
        b"{\"order\":1}",
        BasicProperties::default().with_message_id("m-1".into()),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    let mut deliveries = Vec::new();
    while deliveries.len() < 3 {
        let d = tokio::time::timeout(Duration::from_secs(20), consumer.next())
            .await
            .expect("the message comes back within 20 s")
            .expect("stream open")
            .expect("delivery");
        deliveries.push((Instant::now(), d.properties.headers().clone()));
        d.acker
            .reject(BasicRejectOptions { requeue: false })
            .await
            .expect("reject");
    }
    // Back after each tier's delay: ≥ 1 s, then ≥ 2 s.
    let gap1 = deliveries[1].0 - deliveries[0].0;
    let gap2 = deliveries[2].0 - deliveries[1].0;
    assert!(
        gap1 >= Duration::from_millis(1000) && gap1 < Duration::from_secs(6),
        "{gap1:?}"
    );
    assert!(
        gap2 >= Duration::from_millis(2000) && gap2 < Duration::from_secs(7),
        "{gap2:?}"
    );
    eprintln!(
        "router tiers: first retry after {gap1:?} (tier 1s), second after {gap2:?} (tier 2s)"
    );
    let second = deliveries[1]
        .1
        .clone()
        .expect("headers on the retried message");
    assert_eq!(value(&second, "dlq-retry-count").as_deref(), Some("1"));
    let dead = take_one(&ch, &format!("{q}.dlq"), Duration::from_secs(10))
        .await
        .expect("dead-lettered after maxRetries");
    let h = dead.delivery.properties.headers().clone().expect("headers");
    assert_eq!(
        value(&h, "dlq-reason").as_deref(),
        Some("MaxRetriesExceeded")
    );
    assert_eq!(value(&h, "dlq-retry-count").as_deref(), Some("2"));
    assert_eq!(value(&h, "dlq-original-queue").as_deref(), Some(q.as_str()));
    assert!(value(&h, "dlq-last-error").is_some_and(|e| e.contains("rejected")));
    assert_eq!(h.inner().get("dlq-error-class"), None);
    assert_eq!(dead.delivery.data, b"{\"order\":1}");
    assert_eq!(
        dead.delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some("m-1")
    );
    let first: u64 = value(&h, "dlq-first-failed-at")
        .and_then(|v| v.parse().ok())
        .expect("first failed at");
    assert!(first <= now_ms());
    drop(consumer);
    cleanup(&q).await;
}

#[tokio::test]
async fn a_consumer_report_with_a_non_retryable_class_goes_straight_to_the_dead_letter_queue() {
    let q = unique("router-report");
    let (_dir, path) = router_manifests(&q, "  maxRetries: 3\n  tiers: [1s]\n", "");
    let _router = Router::start(&path);
    let (_conn, ch) = dlq::confirm_channel().await;
    let inbox = format!("{q}.router");
    // What the recipe says: publish the failed message to the inbox exchange with the
    // class and the error, then ack the original.
    ch.basic_publish(
        inbox.as_str().into(),
        q.as_str().into(),
        BasicPublishOptions::default(),
        b"not json",
        BasicProperties::default().with_headers(header(&[
            ("dlq-error-class", amqp_text("Parse")),
            (
                "dlq-last-error",
                amqp_text("expected value at line 1 column 1"),
            ),
        ])),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    let dead = take_one(&ch, &format!("{q}.dlq"), Duration::from_secs(15))
        .await
        .expect("dead-lettered at once");
    let h = dead.delivery.properties.headers().clone().expect("headers");
    assert_eq!(value(&h, "dlq-reason").as_deref(), Some("NonRetryable"));
    assert_eq!(value(&h, "dlq-error-class").as_deref(), Some("Parse"));
    assert_eq!(
        value(&h, "dlq-last-error").as_deref(),
        Some("expected value at line 1 column 1")
    );
    assert_eq!(value(&h, "dlq-retry-count").as_deref(), Some("0"));
    cleanup(&q).await;
}

#[tokio::test]
async fn a_message_that_expired_in_the_source_queue_is_dead_lettered_as_expired() {
    let q = unique("router-expired");
    let (_dir, path) = router_manifests(&q, "  maxRetries: 3\n  tiers: [1s]\n", "");
    let _router = Router::start(&path);
    let (_conn, ch) = dlq::confirm_channel().await;
    ch.basic_publish(
        "".into(),
        q.as_str().into(),
        BasicPublishOptions::default(),
        b"stale",
        BasicProperties::default().with_expiration("50".into()),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    // Nobody consumes the source: the message expires (RabbitMQ drops expired messages
    // at the head of a queue), is dead-lettered into the inbox, and the router sends it
    // to the dead-letter queue without a retry.
    let dead = take_one(&ch, &format!("{q}.dlq"), Duration::from_secs(15))
        .await
        .expect("dead-lettered");
    let h = dead.delivery.properties.headers().clone().expect("headers");
    assert_eq!(value(&h, "dlq-reason").as_deref(), Some("Expired"));
    assert_eq!(value(&h, "dlq-retry-count").as_deref(), Some("0"));
    cleanup(&q).await;
}

#[tokio::test]
async fn leaving_router_mode_keeps_the_inbox_while_it_holds_a_message_then_removes_it() {
    let q = unique("router-off");
    let policy = "  maxRetries: 1\n  tiers: [1s]\n";
    let (dir, path) = router_manifests(&q, policy, "");
    let inbox = format!("{q}.router");
    let (_conn, ch) = dlq::confirm_channel().await;
    // No router runs: a consumer's report waits in the inbox.
    ch.basic_publish(
        inbox.as_str().into(),
        q.as_str().into(),
        BasicPublishOptions::default(),
        b"waiting",
        BasicProperties::default().with_message_id("w-1".into()),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    // Router mode off: the same resource without spec.router.
    std::fs::write(
        dir.path().join("d.yaml"),
        router_dlq_yaml(&q, "Classic", "").replace("  router:\n    enabled: true\n", ""),
    )
    .expect("rewrite");
    let apply = |label: &'static str| {
        let out = cli(&["apply", "-f", &path]);
        let t = text(&out);
        assert!(out.status.success(), "{label}: {t}");
        t
    };
    let first = apply("first apply without router mode");
    assert!(first.contains(&format!("{inbox}: retired")), "{first}");
    // The source dead-letters into its dead-letter exchange again (once the broker's
    // statistics, which carry the effective policy, catch up).
    let start = Instant::now();
    loop {
        let source = mgmt_get(&format!("/api/queues/%2F/{q}"))
            .await
            .expect("source");
        let dlx = &source["effective_policy_definition"]["dead-letter-exchange"];
        if *dlx == serde_json::json!(format!("{q}.dlx")) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "{source}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let second = apply("second apply, message still there");
    assert!(second.contains("1 message left"), "{second}");
    assert!(mgmt_get(&format!("/api/queues/%2F/{inbox}"))
        .await
        .is_some());
    let kept = take_one(&ch, &inbox, Duration::from_secs(5))
        .await
        .expect("the message was kept");
    assert_eq!(kept.delivery.data, b"waiting");
    // Empty now: an apply removes the inbox, its exchange and its policy once the
    // broker's statistics (which lag by a few seconds) agree that it is empty.
    let start = Instant::now();
    loop {
        let later = apply("apply once empty");
        if later.contains(&format!("{inbox}: deleted")) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{later}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(mgmt_get(&format!("/api/queues/%2F/{inbox}"))
        .await
        .is_none());
    assert!(mgmt_get(&format!("/api/exchanges/%2F/{inbox}"))
        .await
        .is_none());
    let policies = mgmt_get("/api/policies/%2F").await.expect("policies");
    assert!(
        !policies
            .to_string()
            .contains(&format!("dlq-operator.{inbox}")),
        "{policies}"
    );
    cleanup(&q).await;
}

#[tokio::test]
async fn a_queue_someone_else_made_under_the_inbox_name_is_never_taken_over() {
    let q = unique("router-foreign");
    let inbox = format!("{q}.router");
    let (_conn, ch) = dlq::confirm_channel().await;
    ch.queue_declare(
        inbox.as_str().into(),
        lapin::options::QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("someone else's queue");
    ch.basic_publish(
        "".into(),
        inbox.as_str().into(),
        BasicPublishOptions::default(),
        b"theirs",
        BasicProperties::default(),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    let dir = manifests(&[
        ("s.yaml", &secret_yaml("s", "guest", "guest", MGMT)),
        (
            "p.yaml",
            &policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n"),
        ),
        ("d.yaml", &router_dlq_yaml(&q, "Classic", "")),
    ]);
    let out = cli(&["apply", "-f", &dir.path().display().to_string()]);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains(&format!("{inbox}: conflict")) && t.contains("without an ownership record"),
        "{t}"
    );
    // Untouched: no policy of ours on it, its message still there, and the source does
    // not dead-letter into it.
    let policies = mgmt_get("/api/policies/%2F").await.expect("policies");
    assert!(
        !policies
            .to_string()
            .contains(&format!("dlq-operator.{inbox}\"")),
        "{policies}"
    );
    let theirs = take_one(&ch, &inbox, Duration::from_secs(5))
        .await
        .expect("their message");
    assert_eq!(theirs.delivery.data, b"theirs");
    let source_policy = policies
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == serde_json::json!(format!("dlq-operator.{q}")))
        .cloned();
    if let Some(p) = source_policy {
        assert_ne!(
            p["definition"]["dead-letter-routing-key"],
            serde_json::json!(inbox),
            "{p}"
        );
    }
    cleanup(&q).await;
}

/// Dead-letters `n` messages `drain-00000`… into `queue`'s router inbox for real: publishes
/// them (pipelined, all confirmed) and rejects each with a plain consumer (`basic.nack`,
/// `requeue=false`, `multiple` every 100).
async fn dead_letter_through(ch: &lapin::Channel, queue: &str, n: usize) {
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(format!("drain-{i:05}").into());
        confirms.push(
            ch.basic_publish("".into(), queue.into(), Default::default(), b"x", props)
                .await
                .expect("publish"),
        );
    }
    for c in confirms {
        assert!(c.await.expect("confirm").is_ack(), "publish refused");
    }
    let conn = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let rch = conn.create_channel().await.expect("channel");
    rch.basic_qos(500, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = rch
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    for i in 1..=n {
        let d = consumer.next().await.expect("delivery").expect("delivery");
        if i % 100 == 0 || i == n {
            let options = lapin::options::BasicNackOptions {
                multiple: true,
                requeue: false,
            };
            rch.basic_nack(d.delivery_tag, options).await.expect("nack");
        }
    }
    let _ = conn.close(200, "bye".into()).await;
}

#[tokio::test]
async fn a_router_stopped_half_way_through_a_quorum_inbox_loses_none_and_gives_back_at_most_a_few()
{
    use dlq_operator::router::{sources::in_files, worker::run, RouterMetrics, RouterTarget};
    const N: usize = 3_000;
    let q = unique("router-drain");
    let dir = manifests(&[
        ("s.yaml", &secret_yaml("s", "guest", "guest", MGMT)),
        (
            "p.yaml",
            &policy_yaml("p", "  maxRetries: 3\n  tiers: [5m]\n"),
        ),
        (
            "d.yaml",
            &router_dlq_yaml(&q, "Quorum", "    prefetch: 1000\n"),
        ),
    ]);
    let out = cli(&["apply", "-f", &dir.path().display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let Some(RouterTarget::RabbitMq(target)) = in_files(&[dir.path().to_path_buf()])
        .expect("manifests")
        .pop()
    else {
        panic!("a RabbitMQ router target");
    };
    let (inbox, tier) = (format!("{q}.router"), format!("{q}.retry.5m"));
    let (_conn, ch) = dlq::confirm_channel().await;
    dead_letter_through(&ch, &q, N).await;
    // A quorum source dead-letters at least once, through a process of its own: the
    // inbox fills a moment after the rejects.
    let deadline = Instant::now() + Duration::from_secs(30);
    while (dlq::ready_now(&ch, &inbox).await as usize) < N && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(dlq::ready(&ch, &inbox).await as usize, N, "inbox filled");
    // Stopped with up to 1,000 messages in hand (the prefetch): they are finished, and
    // each original's ack must reach the quorum inbox before the channel closes.
    let stop = tokio_util::sync::CancellationToken::new();
    let router = tokio::spawn(run(*target, RouterMetrics::new(), stop.clone()));
    while (dlq::ready_now(&ch, &tier).await as usize) < N / 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    router.await.expect("router task");
    let left = dlq::ready(&ch, &inbox).await as usize;
    let moved = dlq::drain_ids(&ch, &tier).await;
    let mut distinct = moved.clone();
    distinct.dedup();
    eprintln!(
        "drain on a quorum inbox: {} moved ({} distinct), {left} left in the inbox, of {N}",
        moved.len(),
        distinct.len()
    );
    assert_eq!(moved.len(), distinct.len(), "a message was moved twice");
    // Every message is either moved or back in the inbox (none lost); one both moved and
    // back would be moved twice by the next router. Without the drain's pause
    // (worker::DRAIN_SETTLE_MS) up to hundreds came back (228 of 3,000 on 3.10.8); with
    // it, none in our runs — a few are tolerated, at least once being the guarantee.
    assert!(moved.len() + left >= N, "a message was lost");
    let back = moved.len() + left - N;
    assert!(back <= 10, "{back} moved messages came back to the inbox");
    cleanup(&q).await;
}
