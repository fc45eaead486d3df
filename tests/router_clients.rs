//! The retry router (issue 17) with real clients that nobody here wrote, on the real
//! RabbitMQ: a Python pika consumer that rejects, a Node amqplib consumer that nacks, and a
//! Celery worker whose task raises `Reject(requeue=False)` each get their message back
//! after every tier's delay and then find it in the dead-letter queue with the header
//! contract (and in `dlq inspect`); a pika consumer's report of a non-retryable class goes
//! straight to the dead-letter queue; and 10,000 rejected messages all reach the
//! dead-letter queue while the router process is SIGKILLed and restarted mid-way.
//!
//! The clients are the scripts in tests/router_clients/ (Python from `.venv`, Node from
//! PATH with `npm ci` run there: .ci/run installs both). Each prints one JSON line per
//! delivery with its own timestamp and the `dlq-retry-count` header. The gaps between a
//! message's deliveries and the kill test's lost and duplicate counts are written to
//! stderr past the harness's capture, so that they show in the CI log.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::Value;

use common::clients::{free_port, node, python, router, scripts, Client, Seen};
use common::dlq::{confirm_channel, now_ms, ready_now};
use common::{cleanup, cli, manifests, mgmt_get, policy_yaml, secret_yaml, text, unique};

/// Writes a line to the process's stderr past the test harness's capture, so that the
/// measured figures show in the log of a passing run (the CI log).
macro_rules! figure {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// The local broker for pika and amqplib (vhost `/`).
const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2F";
/// The local broker as Celery's documentation writes it (vhost `/`).
const CELERY_BROKER: &str = "amqp://guest:guest@127.0.0.1:5672//";
/// Two tiers, 1 s then 2 s, and two retries: three deliveries, then the dead-letter queue.
const TWO_TIERS: &str = "  maxRetries: 2\n  backoff:\n    strategy: Exponential\n    initialDelay: 1s\n    multiplier: 2\n    maxDelay: 2s\n  tiers: [1s, 2s]\n";
/// The tiers of [`TWO_TIERS`] (ms).
const TIERS_MS: [f64; 2] = [1_000.0, 2_000.0];
/// How much later than its tier a message may come back (ms): generous, for a loaded
/// 2-core CI machine; the point is the order of magnitude, not a speed figure.
const MARGIN_MS: f64 = 4_000.0;
/// Messages of the kill test.
const KILL_MESSAGES: usize = 10_000;
/// Messages the router has moved (as its /metrics counts them) before it is SIGKILLed.
const KILL_AFTER_ROUTED: u64 = 2_000;

/// Removes the broker objects whose names start with the prefix when dropped, also when
/// the test panics (on a thread of its own with its own runtime: drop cannot await).
struct Objects(String);

impl Drop for Objects {
    fn drop(&mut self) {
        let prefix = self.0.clone();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().map(|rt| rt.block_on(cleanup(&prefix)))
        })
        .join();
    }
}

/// Manifests of Secret `s`, RetryPolicy `p` (`policy`: its spec body) and DeadLetterQueue
/// `d` in router mode for the classic queue `queue`, applied with `dlq-operator apply`:
/// the dir (keep it alive) and its path.
fn applied(queue: &str, policy: &str) -> (tempfile::TempDir, String) {
    let dlq = format!(
        "apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: d\n  namespace: default\nspec:\n  broker:\n    secretRef:\n      name: s\n  source:\n    queue: {queue}\n    queueType: Classic\n  retryPolicyRef:\n    name: p\n  router:\n    enabled: true\n"
    );
    let dir = manifests(&[
        ("s.yaml", &secret_yaml("s", "guest", "guest", common::MGMT)),
        ("p.yaml", &policy_yaml("p", policy)),
        ("d.yaml", &dlq),
    ]);
    let path = dir.path().display().to_string();
    let out = cli(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", text(&out));
    (dir, path)
}

/// The broker's version (management API), for the figures printed.
async fn broker_version() -> String {
    mgmt_get("/api/overview")
        .await
        .and_then(|o| o["rabbitmq_version"].as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// A header's value as text (long string) or number.
fn value(h: &FieldTable, name: &str) -> Option<String> {
    match h.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::LongLongInt(n) => Some(n.to_string()),
        AMQPValue::LongInt(n) => Some(n.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// A header that holds a number of ms since the epoch.
fn ms(h: &FieldTable, name: &str) -> u64 {
    value(h, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("header {name} should be a number: {h:?}"))
}

/// Publishes one persistent message with `id` to `queue` (default exchange), confirmed.
async fn publish_one(ch: &lapin::Channel, queue: &str, id: &str) {
    let confirm = ch
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            b"{\"order\":1}",
            BasicProperties::default()
                .with_message_id(id.into())
                .with_content_type("application/json".into())
                .with_delivery_mode(2),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "{id} not confirmed");
}

/// Waits up to `timeout` until `queue` holds `n` ready messages.
async fn wait_ready(ch: &lapin::Channel, queue: &str, n: u32, timeout: Duration) {
    let start = Instant::now();
    loop {
        let now = ready_now(ch, queue).await;
        if now == n {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "{queue} holds {now} messages after {timeout:?}, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `dlq-operator dlq inspect --standalone -f dir --name d -o json`, parsed.
fn inspect(dir: &str) -> Value {
    let out = cli(&[
        "dlq",
        "inspect",
        "--standalone",
        "-f",
        dir,
        "--name",
        "d",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "dlq inspect: {}", text(&out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("dlq inspect -o json: {e}: {}", text(&out)))
}

/// The gaps (ms) between the deliveries `seen`.
fn gaps(seen: &[Seen]) -> Vec<f64> {
    seen.windows(2).map(|w| w[1].t_ms - w[0].t_ms).collect()
}

/// What every client of the tier tests must have seen: message `id` delivered three times,
/// with `dlq-retry-count` absent, 1, 2, each time back after its tier's delay (at least
/// the tier, less than the tier + [`MARGIN_MS`]). Prints the gaps.
async fn assert_tiers(client: &str, seen: &[Seen], id: &str) {
    let counts: Vec<_> = seen.iter().map(|s| s.retry_count).collect();
    assert_eq!(counts, [None, Some(1), Some(2)], "{client}: {seen:?}");
    assert!(seen.iter().all(|s| s.id == id), "{client}: {seen:?}");
    let gaps = gaps(seen);
    figure!(
        "router tiers with {client} on RabbitMQ {}: back after {:.0} ms (tier 1s), then {:.0} ms (tier 2s)",
        broker_version().await,
        gaps[0],
        gaps[1]
    );
    for (gap, tier) in gaps.iter().zip(TIERS_MS) {
        assert!(
            *gap >= tier && *gap < tier + MARGIN_MS,
            "{client}: a gap of {gap:.0} ms for the tier of {tier} ms (all: {gaps:?})"
        );
    }
}

/// After [`assert_tiers`]: the message is the only one in `<queue>.dlq`, `dlq inspect`
/// lists it as MaxRetriesExceeded after 2 retries, and its headers carry the contract
/// (times between the first and the last delivery `seen`). Returns it (taken).
async fn assert_dead_lettered(
    dir: &str,
    queue: &str,
    seen: &[Seen],
) -> lapin::message::BasicGetMessage {
    let (_conn, ch) = confirm_channel().await;
    let dlq = format!("{queue}.dlq");
    wait_ready(&ch, &dlq, 1, Duration::from_secs(10)).await;
    let report = inspect(dir);
    assert_eq!(report["total"], 1, "{report}");
    assert_eq!(report["byReason"]["MaxRetriesExceeded"], 1, "{report}");
    assert_eq!(report["byRetryCount"]["2"], 1, "{report}");
    assert_eq!(report["byOriginalQueue"][queue], 1, "{report}");
    assert_eq!(
        report["sample"][0]["reason"], "MaxRetriesExceeded",
        "{report}"
    );
    // inspect gave the message back: take it.
    wait_ready(&ch, &dlq, 1, Duration::from_secs(10)).await;
    let dead = ch
        .basic_get(dlq.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
        .expect("the dead letter");
    let h = dead.delivery.properties.headers().clone().expect("headers");
    assert_eq!(
        value(&h, "dlq-reason").as_deref(),
        Some("MaxRetriesExceeded")
    );
    assert_eq!(value(&h, "dlq-retry-count").as_deref(), Some("2"));
    assert_eq!(value(&h, "dlq-original-queue").as_deref(), Some(queue));
    assert!(value(&h, "dlq-last-error").is_some_and(|e| e.contains("rejected")));
    let (first, last) = (ms(&h, "dlq-first-failed-at"), ms(&h, "dlq-last-failed-at"));
    // The router stamps each failure after the client's rejection, so after the client
    // noted the delivery; the last failure comes the tiers' delays after the first.
    assert!(first as f64 + 1.0 >= seen[0].t_ms, "{first} vs {seen:?}");
    assert!(last as f64 + 1.0 >= seen[2].t_ms, "{last} vs {seen:?}");
    assert!(last - first >= 3_000 && last <= now_ms(), "{first}..{last}");
    dead
}

#[tokio::test]
async fn a_pika_consumer_that_rejects_gets_each_tier_then_the_dead_letter_queue() {
    let test = "a_pika_consumer_that_rejects_gets_each_tier_then_the_dead_letter_queue";
    let Some(python) = python(test, "pika") else {
        return;
    };
    let q = unique("rc-pika");
    let _objects = Objects(q.clone());
    let (_dir, path) = applied(&q, TWO_TIERS);
    let _router = router(&path, 0, "warn,lapin=off");
    let mut command = Command::new(python);
    command
        .arg(scripts().join("pika_consumer.py"))
        .args([AMQP_URL, &q, "reject"]);
    let mut pika = Client::start("pika", command);
    pika.ready().await;
    let (_conn, ch) = confirm_channel().await;
    publish_one(&ch, &q, "pika-1").await;
    let seen = pika.deliveries(3, Duration::from_secs(20)).await;
    assert_tiers("pika (basic_reject requeue=False)", &seen, "pika-1").await;
    let dead = assert_dead_lettered(&path, &q, &seen).await;
    assert_eq!(dead.delivery.data, b"{\"order\":1}");
    assert_eq!(
        dead.delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some("pika-1")
    );
    assert_eq!(
        pika.unread(),
        Vec::<Value>::new(),
        "no delivery after the last"
    );
}

#[tokio::test]
async fn an_amqplib_consumer_that_nacks_gets_each_tier_then_the_dead_letter_queue() {
    let test = "an_amqplib_consumer_that_nacks_gets_each_tier_then_the_dead_letter_queue";
    if !node(test, "amqplib") {
        return;
    }
    let q = unique("rc-amqplib");
    let _objects = Objects(q.clone());
    let (_dir, path) = applied(&q, TWO_TIERS);
    let _router = router(&path, 0, "warn,lapin=off");
    let mut command = Command::new("node");
    command
        .arg(scripts().join("amqplib_consumer.js"))
        .args([AMQP_URL, &q])
        .current_dir(scripts());
    let mut amqplib = Client::start("amqplib", command);
    amqplib.ready().await;
    let (_conn, ch) = confirm_channel().await;
    publish_one(&ch, &q, "amqplib-1").await;
    let seen = amqplib.deliveries(3, Duration::from_secs(20)).await;
    assert_tiers("amqplib (nack requeue=false)", &seen, "amqplib-1").await;
    let dead = assert_dead_lettered(&path, &q, &seen).await;
    assert_eq!(
        dead.delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some("amqplib-1")
    );
    assert_eq!(
        amqplib.unread(),
        Vec::<Value>::new(),
        "no delivery after the last"
    );
}

/// A Celery command (`args`) of tests/router_clients/celery_app.py for `queue`.
fn celery(python: &std::path::Path, queue: &str, args: &[&str]) -> Command {
    let mut command = Command::new(python);
    command
        .args(args)
        .current_dir(scripts())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("DLQ_TEST_QUEUE", queue)
        .env("DLQ_TEST_BROKER", CELERY_BROKER);
    command
}

#[tokio::test]
async fn a_celery_task_that_raises_reject_gets_each_tier_then_the_dead_letter_queue() {
    let test = "a_celery_task_that_raises_reject_gets_each_tier_then_the_dead_letter_queue";
    let Some(python) = python(test, "celery") else {
        return;
    };
    let q = unique("rc-celery");
    let _objects = Objects(q.clone());
    // dlq-operator declares the source queue first; Celery declares it again (durable,
    // no arguments), which both brokers take as the same classic queue.
    let (_dir, path) = applied(&q, TWO_TIERS);
    let _router = router(&path, 0, "warn,lapin=off");
    let worker_args = [
        // Celery warns that CI runs it as root (harmless here: JSON serializer only). By
        // message: -W cannot name a category of a package not imported yet.
        "-W",
        "ignore:You're running the worker with superuser privileges",
        "-m",
        "celery",
        "-A",
        "celery_app",
        // No banner on stdout.
        "--quiet",
        "worker",
        "-P",
        "solo",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        // Celery logs each Reject with its traceback at WARNING.
        "--loglevel=ERROR",
    ];
    let mut worker = Client::start("celery", celery(&python, &q, &worker_args));
    worker.ready().await;
    // The task message, published by Celery itself (send_task).
    let sent = celery(&python, &q, &["celery_app.py", "send"])
        .output()
        .expect("run celery_app.py send");
    assert!(sent.status.success(), "celery send: {}", text(&sent));
    let sent: Value = serde_json::from_slice(&sent.stdout).expect("celery send prints JSON");
    let task_id = sent["task_id"].as_str().expect("task_id").to_string();
    let seen = worker.deliveries(3, Duration::from_secs(20)).await;
    assert_tiers("Celery (raise Reject(requeue=False))", &seen, &task_id).await;
    let dead = assert_dead_lettered(&path, &q, &seen).await;
    // Still a Celery task message (protocol 2 headers kept): it could be replayed.
    let h = dead.delivery.properties.headers().clone().expect("headers");
    assert_eq!(value(&h, "id").as_deref(), Some(task_id.as_str()));
    assert_eq!(value(&h, "task").as_deref(), Some("dlq_test.always_fails"));
    assert_eq!(
        dead.delivery
            .properties
            .correlation_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some(task_id.as_str())
    );
    assert_eq!(
        worker.unread(),
        Vec::<Value>::new(),
        "no delivery after the last"
    );
}

#[tokio::test]
async fn a_pika_consumer_report_with_a_non_retryable_class_goes_straight_to_the_dead_letter_queue()
{
    let test =
        "a_pika_consumer_report_with_a_non_retryable_class_goes_straight_to_the_dead_letter_queue";
    let Some(python) = python(test, "pika") else {
        return;
    };
    let q = unique("rc-report");
    let _objects = Objects(q.clone());
    let (_dir, path) = applied(&q, "  maxRetries: 3\n  tiers: [1s]\n");
    let _router = router(&path, 0, "warn,lapin=off");
    let mut command = Command::new(python);
    command
        .arg(scripts().join("pika_consumer.py"))
        .args([AMQP_URL, &q, "report"]);
    let mut pika = Client::start("pika", command);
    pika.ready().await;
    let (_conn, ch) = confirm_channel().await;
    publish_one(&ch, &q, "invalid-1").await;
    let seen = pika.deliveries(1, Duration::from_secs(20)).await;
    assert_eq!(seen[0].retry_count, None);
    let dlq = format!("{q}.dlq");
    wait_ready(&ch, &dlq, 1, Duration::from_secs(15)).await;
    let report = inspect(&path);
    assert_eq!(report["byReason"]["NonRetryable"], 1, "{report}");
    assert_eq!(report["byErrorClass"]["Validation"], 1, "{report}");
    wait_ready(&ch, &dlq, 1, Duration::from_secs(10)).await;
    let dead = ch
        .basic_get(dlq.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
        .expect("the dead letter");
    let h = dead.delivery.properties.headers().clone().expect("headers");
    assert_eq!(value(&h, "dlq-reason").as_deref(), Some("NonRetryable"));
    assert_eq!(value(&h, "dlq-error-class").as_deref(), Some("Validation"));
    assert_eq!(
        value(&h, "dlq-last-error").as_deref(),
        Some("field 'order' must be a positive integer")
    );
    assert_eq!(value(&h, "dlq-retry-count").as_deref(), Some("0"));
    assert_eq!(
        dead.delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some("invalid-1")
    );
    // No retry: past the 1 s tier, the consumer got nothing more and the tier is empty.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(pika.unread(), Vec::<Value>::new(), "no retry");
    assert_eq!(ready_now(&ch, &format!("{q}.retry.1s")).await, 0);
    assert_eq!(ready_now(&ch, &q).await, 0);
}

/// A lapin consumer of `queue` that rejects (requeue=false) every delivery, counting them,
/// until aborted.
async fn rejecting_consumer(
    conn: &lapin::Connection,
    queue: &str,
) -> (tokio::task::JoinHandle<()>, Arc<AtomicUsize>) {
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(500, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "kill-test-rejecter".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let task = tokio::spawn(async move {
        let _ch = ch;
        while let Some(Ok(d)) = consumer.next().await {
            counted.fetch_add(1, Ordering::Relaxed);
            if d.acker
                .reject(BasicRejectOptions { requeue: false })
                .await
                .is_err()
            {
                return;
            }
        }
    });
    (task, count)
}

/// Publishes `n` persistent messages `kill-00000`… to `queue`, pipelined, and asserts the
/// broker confirmed every one.
async fn publish_all(ch: &lapin::Channel, queue: &str, n: usize) {
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                format!("{{\"n\":{i}}}").as_bytes(),
                BasicProperties::default()
                    .with_message_id(format!("kill-{i:05}").into())
                    .with_delivery_mode(2),
            )
            .await
            .expect("publish");
        confirms.push(confirm);
    }
    let acked = futures::future::join_all(confirms)
        .await
        .into_iter()
        .filter(|c| matches!(c, Ok(c) if c.is_ack()))
        .count();
    assert_eq!(acked, n, "messages confirmed by the broker");
}

/// The sum of `dlq_router_messages_total` on the router's /metrics at `port` (0 while it
/// does not answer).
async fn routed(port: u16) -> u64 {
    let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else {
        return 0;
    };
    let body = resp.text().await.unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with("dlq_router_messages_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Waits (until `deadline`) for the router at `port` to have moved `n` messages.
async fn wait_routed(port: u16, n: u64, deadline: Instant) -> u64 {
    loop {
        let now = routed(port).await;
        if now >= n {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the router moved {now} messages, not {n}, in time"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (until `deadline`) until `<queue>.dlq` holds at least `n` messages while the
/// source, the inbox and the tier are empty, the same for 1.5 s (longer than the 1 s tier:
/// nothing is on its way); returns the dead-letter queue's count.
async fn wait_settled(ch: &lapin::Channel, queue: &str, n: u32, deadline: Instant) -> u32 {
    let (inbox, tier, dlq) = (
        format!("{queue}.router"),
        format!("{queue}.retry.1s"),
        format!("{queue}.dlq"),
    );
    let mut last = (u32::MAX, Instant::now());
    loop {
        let counts = [
            ready_now(ch, queue).await,
            ready_now(ch, &inbox).await,
            ready_now(ch, &tier).await,
            ready_now(ch, &dlq).await,
        ];
        let quiet = counts[..3] == [0, 0, 0] && counts[3] >= n;
        if !quiet || counts[3] != last.0 {
            last = (if quiet { counts[3] } else { u32::MAX }, Instant::now());
        } else if last.1.elapsed() >= Duration::from_millis(1_500) {
            return counts[3];
        }
        assert!(
            Instant::now() < deadline,
            "not settled in time: source, inbox, tier, dead-letter queue hold {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes the `n` messages of `queue`: their message ids and (reason, retry count) tallies.
async fn take_all(
    conn: &lapin::Connection,
    queue: &str,
    n: u32,
) -> (Vec<String>, BTreeMap<(String, String), usize>) {
    let ch = conn.create_channel().await.expect("channel");
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "kill-test-drain".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume the dead-letter queue");
    let (mut ids, mut tally) = (Vec::new(), BTreeMap::new());
    while ids.len() < n as usize {
        let d = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .unwrap_or_else(|_| panic!("{queue}: {} of {n} messages read", ids.len()))
            .expect("stream open")
            .expect("delivery");
        let p = &d.properties;
        ids.push(
            p.message_id()
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default(),
        );
        let h = p.headers().clone().unwrap_or_default();
        let key = (
            value(&h, "dlq-reason").unwrap_or_default(),
            value(&h, "dlq-retry-count").unwrap_or_default(),
        );
        *tally.entry(key).or_insert(0) += 1;
    }
    (ids, tally)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_rejected_messages_all_reach_the_dead_letter_queue_across_a_router_sigkill() {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(100);
    let q = unique("rc-kill");
    let _objects = Objects(q.clone());
    // One retry through a 1 s tier: every message passes the router twice.
    let (_dir, path) = applied(&q, "  maxRetries: 1\n  tiers: [1s]\n");
    let port = free_port();
    let mut first = router(&path, port, "warn,lapin=off");
    let (conn, ch) = confirm_channel().await;
    let (consumer, rejected) = rejecting_consumer(&conn, &q).await;
    publish_all(&ch, &q, KILL_MESSAGES).await;
    let at_kill = wait_routed(port, KILL_AFTER_ROUTED, deadline).await;
    first.kill();
    figure!(
        "kill test: router SIGKILLed after {at_kill} messages moved ({:?} in)",
        started.elapsed()
    );
    let _second = router(&path, port, "warn,lapin=off");
    let n = u32::try_from(KILL_MESSAGES).expect("fits");
    let in_dlq = wait_settled(&ch, &q, n, deadline).await;
    consumer.abort();
    let (ids, tally) = take_all(&conn, &format!("{q}.dlq"), in_dlq).await;
    let distinct: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    let expected: BTreeSet<String> = (0..KILL_MESSAGES).map(|i| format!("kill-{i:05}")).collect();
    let lost: Vec<&String> = expected
        .iter()
        .filter(|id| !distinct.contains(id.as_str()))
        .collect();
    let strangers = distinct
        .iter()
        .filter(|id| !expected.contains(**id))
        .count();
    let duplicates = ids.len() - distinct.len();
    figure!(
        "kill test: {KILL_MESSAGES} sent, {} lost, {duplicates} duplicates (RabbitMQ {}; {} deliveries rejected, {:?})",
        lost.len(),
        broker_version().await,
        rejected.load(Ordering::Relaxed),
        started.elapsed()
    );
    assert!(
        lost.is_empty(),
        "{} lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert_eq!(strangers, 0, "ids that were never sent");
    // At-least-once, with duplicates bounded: only the deliveries in the killed router's
    // hands (at most its prefetch, 100 by default) can have been copied and not acked.
    assert!(
        duplicates <= 100,
        "{duplicates} duplicates from one SIGKILL"
    );
    let expected_tally = BTreeMap::from([(
        ("MaxRetriesExceeded".to_string(), "1".to_string()),
        ids.len(),
    )]);
    assert_eq!(
        tally, expected_tally,
        "(dlq-reason, dlq-retry-count) of the dead letters"
    );
}
