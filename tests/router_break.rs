//! The retry router under bad input and hostile conditions, on the real RabbitMQ:
//! - a route that refuses every copy (a full dead-letter queue): each message is tried
//!   again at most once a second, not once per idle worker slot;
//! - a message whose copy would not fit in one AMQP frame: kept in the inbox, the
//!   connection and every other message unharmed;
//! - malformed `x-death` headers (RabbitMQ 3.x crashes a queue that dead-letters them)
//!   and `CC`/`BCC` headers (a copy routed twice) are left out of copies;
//! - a queue named like the inbox that belongs to another DeadLetterQueue is never
//!   consumed, though its router runs;
//! - `-l` is refused and `--namespace` named with `--standalone`;
//! - manifests that become invalid while the router runs: routers kept, error logged once;
//! - SIGTERM in the middle of 5,000 rejects: nothing lost, nothing duplicated.

mod common;

use std::collections::BTreeSet;
use std::io::BufRead;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable, ShortString};
use lapin::BasicProperties;

use common::dlq::{confirm_channel, header, ready, ready_now, text as amqp_text};
use common::{cleanup, cli, manifests, policy_yaml, secret_yaml, text, unique};

/// `dlq-operator router --standalone -f DIR`, its stderr kept; SIGKILLed on drop.
struct Router {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Router {
    /// Starts the router of the manifests in `dir` with /metrics on 127.0.0.1:`port` and
    /// `extra` arguments.
    fn start(dir: &str, port: u16, extra: &[&str]) -> Router {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args([
                "router",
                "--standalone",
                "-f",
                dir,
                "--metrics-bind-address",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .env("RUST_LOG", "info,lapin=off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dlq-operator router");
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                lines.lock().expect("log").push(line);
            }
        });
        Router { child, log }
    }

    /// Everything it wrote to stderr so far.
    fn log(&self) -> String {
        self.log.lock().expect("log").join("\n")
    }

    /// Lines of its stderr that contain `needle`.
    fn count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .expect("log")
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// SIGTERM, then waits up to 30 s for it to exit.
    async fn terminate(&mut self) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the router did not stop within 30 s of SIGTERM:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes the broker objects of a test (prefix) on drop, also when it panics.
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

/// A TCP port free right now on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A DeadLetterQueue `name` in router mode for the classic `queue`, RetryPolicy `p`,
/// Secret `s`, with `extra` (indented by two) under `spec:` and `router` (indented by
/// four) under `spec.router:`.
fn router_dlq(name: &str, queue: &str, router: &str, extra: &str) -> String {
    format!(
        "apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  broker:\n    secretRef:\n      name: s\n  source:\n    queue: {queue}\n    queueType: Classic\n  retryPolicyRef:\n    name: p\n  router:\n    enabled: true\n{router}{extra}"
    )
}

/// Secret `s`, RetryPolicy `p` (`policy`: its spec body) and DeadLetterQueue `d`
/// ([`router_dlq`]) in a temp dir, applied: the dir (keep it alive) and its path.
fn applied(queue: &str, policy: &str, router: &str, extra: &str) -> (tempfile::TempDir, String) {
    let dir = manifests(&[
        ("s.yaml", &secret_yaml("s", "guest", "guest", common::MGMT)),
        ("p.yaml", &policy_yaml("p", policy)),
        ("d.yaml", &router_dlq("d", queue, router, extra)),
    ]);
    let path = dir.path().display().to_string();
    let out = cli(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", text(&out));
    (dir, path)
}

/// The sum of the samples of `metric` on the router's /metrics at `port` whose labels
/// contain `labels` (0 while it does not answer).
async fn metric(port: u16, metric: &str, labels: &str) -> f64 {
    let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else {
        return 0.0;
    };
    let body = resp.text().await.unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Publishes one message to `exchange` with `routing_key`, confirmed.
async fn publish(
    ch: &lapin::Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    props: BasicProperties,
) {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions::default(),
            body,
            props.with_delivery_mode(2),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "not confirmed: {confirm:?}");
}

/// Properties with `message_id` and `headers`.
fn props(id: &str, headers: FieldTable) -> BasicProperties {
    BasicProperties::default()
        .with_message_id(ShortString::from(id))
        .with_headers(headers)
}

/// Takes every message of `queue` now (acked) and returns their message ids, sorted.
async fn take_ids(ch: &lapin::Channel, queue: &str) -> Vec<String> {
    let mut ids = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        ids.push(
            m.delivery
                .properties
                .message_id()
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default(),
        );
    }
    ids.sort();
    ids
}

/// Waits up to `timeout` until `queue` holds at least `n` ready messages; returns them.
async fn wait_ready(ch: &lapin::Channel, queue: &str, n: u32, timeout: Duration) -> u32 {
    let deadline = Instant::now() + timeout;
    loop {
        let now = ready_now(ch, queue).await;
        if now >= n || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_message_whose_copy_is_refused_is_tried_again_at_most_once_a_second() {
    let q = unique("rb-refused");
    let _objects = Objects(q.clone());
    // A dead-letter queue that holds one message and refuses more (reject-publish), and
    // a router with many worker slots for three messages.
    let (_dir, path) = applied(
        &q,
        "  maxRetries: 1\n  tiers: [1s]\n",
        "    prefetch: 1000\n",
        "  deadLetter:\n    maxLength: 1\n",
    );
    let (conn, ch) = confirm_channel().await;
    for id in ["v-1", "v-2", "v-3"] {
        let h = header(&[("dlq-error-class", amqp_text("Validation"))]);
        publish(&ch, &format!("{q}.router"), &q, b"v", props(id, h)).await;
    }
    let port = free_port();
    let mut router = Router::start(&path, port, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(port, "dlq_router_publish_failures_total", "not_confirmed").await < 1.0 {
        assert!(Instant::now() < deadline, "{}", router.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let refused = metric(port, "dlq_router_publish_failures_total", "not_confirmed").await;
    let seconds = start.elapsed().as_secs_f64();
    assert!(router.terminate().await.success(), "{}", router.log());
    // Two messages refused, each tried again after a pause of 1 s: about 2 a second,
    // not one per idle worker slot.
    let bound = 2.0 * (seconds + 3.0);
    eprintln!("refused copies: {refused} in {seconds:.1} s (bound {bound:.0})");
    assert!(refused <= bound, "{refused} refusals in {seconds:.1} s");
    assert_eq!(ready(&ch, &format!("{q}.dlq")).await, 1);
    assert_eq!(ready(&ch, &format!("{q}.router")).await, 2, "both kept");
    let _ = conn.close(200, "bye".into()).await;
}

#[tokio::test]
async fn a_message_whose_copy_would_not_fit_in_one_frame_stays_and_the_others_move_once() {
    let q = unique("rb-frame");
    let _objects = Objects(q.clone());
    let (_dir, path) = applied(&q, "  maxRetries: 0\n  tiers: [1s]\n", "", "");
    let (conn, ch) = confirm_channel().await;
    let inbox = format!("{q}.router");
    for i in 0..20 {
        let id = format!("small-{i:02}");
        publish(&ch, "", &inbox, b"small", props(&id, FieldTable::default())).await;
    }
    // Headers that fill the frame but for 150 bytes: the broker takes the publish and
    // delivers it as it is, but the router's copy (its headers plus the contract's,
    // some 300 bytes) would be one frame larger than frame_max, which makes RabbitMQ
    // close the whole connection (FRAME_ERROR) with every other message in flight.
    let frame_max = conn.configuration().frame_max() as usize;
    // Content header frame: 7 + class, weight, body size (12) + flags (2), message id
    // (1 + 3), delivery mode (1), headers (4 + key 1 + 4 + type 1 + length 4) + end (1).
    let blob = "b".repeat(frame_max - 41 - 150);
    let big = header(&[("blob", amqp_text(&blob))]);
    publish(&ch, "", &inbox, b"big", props("big", big)).await;
    let port = free_port();
    let mut router = Router::start(&path, port, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(port, "dlq_router_publish_failures_total", "too_large").await < 2.0 {
        assert!(
            Instant::now() < deadline,
            "the router never refused the oversized copy itself (too_large); its log:\n{}",
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(router.terminate().await.success(), "{}", router.log());
    let dlq = format!("{q}.dlq");
    let expected: Vec<String> = (0..20).map(|i| format!("small-{i:02}")).collect();
    assert_eq!(ready(&ch, &dlq).await, 20, "{}", router.log());
    assert_eq!(
        take_ids(&ch, &dlq).await,
        expected,
        "each ordinary message once"
    );
    assert_eq!(
        router.count("session ended"),
        0,
        "the connection was lost:\n{}",
        router.log()
    );
    // The oversized one is still in the inbox, whole.
    assert_eq!(ready(&ch, &inbox).await, 1);
    let kept = ch
        .basic_get(inbox.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
        .expect("the oversized message was kept");
    let h = kept.delivery.properties.headers().clone().expect("headers");
    assert_eq!(
        h.inner().get("blob"),
        Some(&amqp_text(&blob)),
        "its headers unchanged"
    );
    let _ = conn.close(200, "bye".into()).await;
}

/// `x-death` values RabbitMQ never writes. RabbitMQ 3.x crashes the queue that
/// dead-letters such a message (`rabbit_dead_letter`: `function_clause` on an element
/// that is not a table, `badarith` on a `count` that is not a number), and a persistent
/// message crashes it again at each restart; 4.x ignores a client's `x-death`.
fn malformed_x_deaths(tier: &str) -> Vec<(&'static str, AMQPValue)> {
    let table = |pairs: &[(&str, AMQPValue)]| AMQPValue::FieldTable(header(pairs));
    vec![
        (
            "not-tables",
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::LongLongInt(1),
                AMQPValue::LongLongInt(2),
            ])),
        ),
        (
            "a-table-then-a-string",
            AMQPValue::FieldArray(FieldArray::from(vec![
                table(&[
                    ("queue", amqp_text("elsewhere")),
                    ("reason", amqp_text("rejected")),
                    ("count", AMQPValue::LongLongInt(1)),
                ]),
                amqp_text("not a table"),
            ])),
        ),
        (
            "count-as-text",
            AMQPValue::FieldArray(FieldArray::from(vec![table(&[
                ("queue", amqp_text(tier)),
                ("reason", amqp_text("expired")),
                ("count", amqp_text("7")),
            ])])),
        ),
    ]
}

#[tokio::test]
async fn a_malformed_x_death_does_not_crash_the_tier_it_is_retried_through() {
    let q = unique("rb-xdeath");
    let _objects = Objects(q.clone());
    let (_dir, path) = applied(&q, "  maxRetries: 2\n  tiers: [1s]\n", "", "");
    let (conn, ch) = confirm_channel().await;
    let tier = format!("{q}.retry.1s");
    let hostile = malformed_x_deaths(&tier);
    // Consumer reports (recipe b) of a retryable class, carrying the malformed header.
    for (id, x_death) in &hostile {
        let h = header(&[
            ("dlq-error-class", amqp_text("Timeout")),
            ("dlq-last-error", amqp_text("upstream timed out")),
            ("x-death", x_death.clone()),
        ]);
        publish(&ch, &format!("{q}.router"), &q, b"hostile", props(id, h)).await;
    }
    let _router = Router::start(&path, free_port(), &[]);
    // Each comes back to the source queue after the 1 s tier.
    let n = u32::try_from(hostile.len()).expect("fits");
    let back = wait_ready(&ch, &q, n, Duration::from_secs(20)).await;
    let tier_info = common::mgmt_get(&format!("/api/queues/%2F/{tier}")).await;
    assert_eq!(
        back,
        n,
        "messages back in {q} through {tier}; the tier: {}",
        tier_info
            .map(|t| t["state"].to_string())
            .unwrap_or_default()
    );
    let mut expected: Vec<String> = hostile.iter().map(|(id, _)| id.to_string()).collect();
    expected.sort();
    assert_eq!(take_ids(&ch, &q).await, expected);
    // The tier still works for the next message.
    let h = header(&[("dlq-error-class", amqp_text("Timeout"))]);
    publish(&ch, &format!("{q}.router"), &q, b"after", props("after", h)).await;
    assert_eq!(wait_ready(&ch, &q, 1, Duration::from_secs(20)).await, 1);
    let _ = conn.close(200, "bye".into()).await;
}

#[tokio::test]
async fn cc_and_bcc_headers_do_not_route_a_copy_into_a_second_tier() {
    let q = unique("rb-cc");
    let _objects = Objects(q.clone());
    let policy = "  maxRetries: 2\n  backoff:\n    strategy: Exponential\n    initialDelay: 1s\n    multiplier: 2\n    maxDelay: 2s\n  tiers: [1s, 2s]\n";
    let (_dir, path) = applied(&q, policy, "", "");
    let (conn, ch) = confirm_channel().await;
    let keys = |k: &[&str]| {
        AMQPValue::FieldArray(FieldArray::from(
            k.iter().map(|s| amqp_text(s)).collect::<Vec<_>>(),
        ))
    };
    // Sender-selected distribution: a consumer's report that kept a CC header, and one
    // with BCC. The copy goes to the retry exchange with routing key "1s"; with the
    // header kept it would also be routed by "2s", into the second tier.
    for (id, name) in [("with-cc", "CC"), ("with-bcc", "BCC")] {
        let h = header(&[
            ("dlq-error-class", amqp_text("Timeout")),
            (name, keys(&["2s", "1s"])),
        ]);
        publish(&ch, &format!("{q}.router"), &q, b"cc", props(id, h)).await;
    }
    let _router = Router::start(&path, free_port(), &[]);
    assert_eq!(wait_ready(&ch, &q, 2, Duration::from_secs(20)).await, 2);
    // Longer than the second tier: a copy routed there too would be back by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        take_ids(&ch, &q).await,
        vec!["with-bcc".to_string(), "with-cc".to_string()],
        "each message back once"
    );
    assert_eq!(ready_now(&ch, &format!("{q}.retry.2s")).await, 0);
    let _ = conn.close(200, "bye".into()).await;
}

#[tokio::test]
async fn a_router_never_consumes_a_queue_of_another_dead_letter_queue_named_like_its_inbox() {
    let q = unique("rb-owned");
    let _objects = Objects(q.clone());
    let policy = "  maxRetries: 2\n  tiers: [1s]\n";
    // DeadLetterQueue `f` of queue Q, applied without router mode: Q's tiers exist.
    let dir = manifests(&[
        ("s.yaml", &secret_yaml("s", "guest", "guest", common::MGMT)),
        ("p.yaml", &policy_yaml("p", policy)),
        (
            "f.yaml",
            &router_dlq("f", &q, "", "").replace("  router:\n    enabled: true\n", ""),
        ),
    ]);
    let path = dir.path().display().to_string();
    let out = cli(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", text(&out));
    // DeadLetterQueue `e` whose source queue is named `Q.router`, with work in it.
    let other = format!("{q}.router");
    let e = manifests(&[
        ("s.yaml", &secret_yaml("s", "guest", "guest", common::MGMT)),
        ("p.yaml", &policy_yaml("p", policy)),
        (
            "e.yaml",
            &router_dlq("e", &other, "", "").replace("  router:\n    enabled: true\n", ""),
        ),
    ]);
    let out = cli(&["apply", "-f", &e.path().display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let (conn, ch) = confirm_channel().await;
    publish(
        &ch,
        "",
        &other,
        b"e's work",
        props("e-1", FieldTable::default()),
    )
    .await;
    // `f` turns router mode on: its apply is refused (the name is e's) ...
    std::fs::write(dir.path().join("f.yaml"), router_dlq("f", &q, "", "")).expect("write");
    let out = cli(&["apply", "-f", &path]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("NameConflict"), "{}", text(&out));
    // ... and its router must not take e's messages either.
    let port = free_port();
    let router = Router::start(&path, port, &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while router.count("default/e") == 0 {
        assert!(
            Instant::now() < deadline,
            "no error naming the owner:\n{}",
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        metric(port, "dlq_router_consuming", "name=\"f\"").await,
        0.0
    );
    assert_eq!(ready(&ch, &other).await, 1, "{}", router.log());
    assert_eq!(ready_now(&ch, &q).await, 0);
    assert_eq!(ready_now(&ch, &format!("{q}.retry.1s")).await, 0);
    drop(router);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&other).await;
}

#[tokio::test]
async fn cluster_only_flags_are_refused_or_named_with_standalone() {
    let dir = manifests(&[("p.yaml", &policy_yaml("p", "  maxRetries: 1\n"))]);
    let path = dir.path().display().to_string();
    let out = cli(&["router", "--standalone", "-f", &path, "-l", "app=orders"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("-l/--selector") && t.contains("--standalone"),
        "{t}"
    );
    // --namespace may come from WATCH_NAMESPACE (set for the cluster mode): named, not
    // refused.
    let router = Router::start(&path, free_port(), &["--namespace", "team-a"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while router.count("is ignored with --standalone") == 0 {
        assert!(Instant::now() < deadline, "{}", router.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn manifests_that_become_invalid_keep_the_routers_and_are_reported_once() {
    let q = unique("rb-invalid");
    let _objects = Objects(q.clone());
    let (dir, path) = applied(&q, "  maxRetries: 1\n  tiers: [1s]\n", "", "");
    let port = free_port();
    let router = Router::start(&path, port, &["--resync", "1s"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric(port, "dlq_router_consuming", "name=\"d\"").await < 1.0 {
        assert!(Instant::now() < deadline, "{}", router.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let policy = dir.path().join("p.yaml");
    std::fs::write(&policy, policy_yaml("p", "  maxRetries: many\n")).expect("write");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let log = router.log();
    assert_eq!(router.count("spec.maxRetries"), 1, "one error:\n{log}");
    assert!(log.contains("p.yaml"), "{log}");
    assert_eq!(
        metric(port, "dlq_router_consuming", "name=\"d\"").await,
        1.0
    );
    // Fixed again: said once too.
    std::fs::write(
        &policy,
        policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n"),
    )
    .expect("write");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(router.count("valid again"), 1, "{}", router.log());
    assert_eq!(router.count("spec.maxRetries"), 1, "{}", router.log());
}

/// A lapin consumer of `queue` that rejects (requeue=false) every delivery, until aborted.
async fn rejecting_consumer(conn: &lapin::Connection, queue: &str) -> tokio::task::JoinHandle<()> {
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(500, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "rb-rejecter".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    tokio::spawn(async move {
        let _ch = ch;
        while let Some(Ok(d)) = consumer.next().await {
            if d.acker
                .reject(BasicRejectOptions { requeue: false })
                .await
                .is_err()
            {
                return;
            }
        }
    })
}

/// Publishes `n` persistent messages `burst-00000`… to `queue`, pipelined, all confirmed.
async fn publish_burst(ch: &lapin::Channel, queue: &str, n: usize) {
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                b"burst",
                BasicProperties::default()
                    .with_message_id(format!("burst-{i:05}").into())
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
    assert_eq!(acked, n, "confirmed by the broker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_in_a_burst_of_5000_rejects_drains_without_losing_or_duplicating() {
    const N: usize = 5_000;
    let q = unique("rb-burst");
    let _objects = Objects(q.clone());
    let (_dir, path) = applied(&q, "  maxRetries: 0\n  tiers: [1s]\n", "", "");
    let (conn, ch) = confirm_channel().await;
    let consumer = rejecting_consumer(&conn, &q).await;
    let port = free_port();
    let mut first = Router::start(&path, port, &[]);
    publish_burst(&ch, &q, N).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while metric(port, "dlq_router_messages_total", "dead_letter").await < 1_000.0 {
        assert!(Instant::now() < deadline, "{}", first.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let moved = metric(port, "dlq_router_messages_total", "dead_letter").await;
    let status = first.terminate().await;
    assert!(status.success(), "exit {status:?}:\n{}", first.log());
    eprintln!("SIGTERM after {moved} messages moved");
    // A second router finishes the inbox.
    let _second = Router::start(&path, free_port(), &[]);
    let dlq = format!("{q}.dlq");
    let n = u32::try_from(N).expect("fits");
    let mut settled = (0, Instant::now());
    loop {
        let counts = [
            ready_now(&ch, &q).await,
            ready_now(&ch, &format!("{q}.router")).await,
            ready_now(&ch, &dlq).await,
        ];
        if counts[2] != settled.0 {
            settled = (counts[2], Instant::now());
        }
        if counts[2] >= n && settled.1.elapsed() > Duration::from_millis(1_500) {
            break;
        }
        assert!(Instant::now() < deadline, "source, inbox, dlq: {counts:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.abort();
    let ids = take_ids(&ch, &dlq).await;
    let distinct: BTreeSet<&String> = ids.iter().collect();
    let lost = N - distinct.len();
    let duplicates = ids.len() - distinct.len();
    eprintln!("SIGTERM burst: {N} sent, {lost} lost, {duplicates} duplicates");
    assert_eq!((lost, duplicates), (0, 0));
    let _ = conn.close(200, "bye".into()).await;
}
