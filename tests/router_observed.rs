//! The retry router seen from outside, against the real RabbitMQ: `dlq-operator run
//! --standalone` on a DeadLetterQueue in router mode reports its inbox's depth and
//! consumers (`dlq_router_inbox_consumers`, `dlq_queue_depth{role="inbox"}`, the status
//! line) and logs each change of its `RouterReady` verdict — `NoConsumer` once nothing has
//! consumed the inbox for the grace period (60 s; its messages wait), `Consuming` once a
//! consumer is there, whether a plain AMQP consumer or the embedded retry router.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::*;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;

/// `dlq-operator run --standalone -f dir` with `extra` flags, metrics on `port`, its
/// stderr lines; killed on drop.
struct Run(Child, Receiver<String>);

impl Run {
    fn start(dir: &std::path::Path, port: u16, extra: &[&str]) -> Run {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args(["run", "--standalone", "--metrics-bind-address"])
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .arg("-f")
            .arg(dir)
            .env("RUST_LOG", "info,lapin=off")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start run --standalone");
        let lines = stderr_lines(&mut child);
        Run(child, lines)
    }

    /// Waits up to `secs` s for a stderr line containing every one of `parts`; the line,
    /// or what was seen meanwhile.
    fn line(&self, secs: u64, parts: &[&str]) -> Result<String, Vec<String>> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.1.recv_timeout(left) {
                Ok(l) if parts.iter().all(|p| l.contains(p)) => return Ok(l),
                Ok(l) => seen.push(l),
                Err(_) => break,
            }
        }
        Err(seen)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// The value of the sample of `metric` whose line contains every `labels` part.
async fn scrape(port: u16, metric: &str, labels: &[&str]) -> Option<f64> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let text = reqwest::get(url).await.ok()?.text().await.ok()?;
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .find(|l| labels.iter().all(|p| l.contains(p)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Waits up to 30 s for `metric{labels}` to be `want`; the last value seen otherwise.
async fn wait_metric(
    port: u16,
    metric: &str,
    labels: &[&str],
    want: f64,
) -> Result<(), Option<f64>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while Instant::now() < deadline {
        last = scrape(port, metric, labels).await;
        if last == Some(want) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}

/// Manifests of DeadLetterQueue `default/d` in router mode on classic queue `q`, polled
/// every 300 ms.
fn router_manifests(q: &str) -> tempfile::TempDir {
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", "  maxRetries: 2\n  tiers: [1s]\n");
    let dlq = dlq_yaml(
        "d",
        q,
        "p",
        "s",
        "  router:\n    enabled: true\n  monitoring:\n    interval: 300ms\n    threshold: 100\n",
    )
    .replace(
        &format!("    queue: {q}\n"),
        &format!("    queue: {q}\n    queueType: Classic\n"),
    );
    manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))])
}

const OURS: [&str; 2] = ["namespace=\"default\"", "name=\"d\""];

#[tokio::test]
async fn a_router_inbox_without_consumer_is_reported_and_its_consumer_seen() {
    let q = unique("observed");
    let dir = router_manifests(&q);
    let inbox = format!("{q}.router");
    let port = free_port();
    let run = Run::start(dir.path(), port, &["--embedded-router=false"]);

    // No router: consumers 0, NoConsumer logged after the grace period (60 s), and the
    // message left in the inbox is seen waiting there.
    let zero = wait_metric(port, "dlq_router_inbox_consumers", &OURS, 0.0).await;
    let no_consumer = run.line(
        90,
        &[
            "default/d: RouterReady False (NoConsumer)",
            &format!(
                "no retry router consumes {inbox}; failed messages wait there, nothing is lost"
            ),
        ],
    );
    let conn = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_publish(
        "".into(),
        inbox.as_str().into(),
        BasicPublishOptions::default(),
        b"failed",
        BasicProperties::default(),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    let waiting = wait_metric(
        port,
        "dlq_queue_depth",
        &[OURS[0], OURS[1], "role=\"inbox\""],
        1.0,
    )
    .await;
    let status_line = run.line(30, &["default/d: source=", "inbox=1 consumers=0"]);

    // A consumer on the inbox (prefetch 1, never acks: the message stays counted).
    ch.basic_qos(1, BasicQosOptions::default())
        .await
        .expect("qos");
    let consumer = ch
        .basic_consume(
            inbox.as_str().into(),
            "stand-in-router".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let one = wait_metric(port, "dlq_router_inbox_consumers", &OURS, 1.0).await;
    let consuming = run.line(30, &["default/d: RouterReady True (Consuming)"]);
    let _ = conn.close(200, "bye".into()).await;
    drop(consumer);
    drop(run);

    // The embedded retry router (the default) is seen as the inbox's consumer.
    let port = free_port();
    let run = Run::start(dir.path(), port, &[]);
    let embedded = wait_metric(port, "dlq_router_inbox_consumers", &OURS, 1.0).await;
    let embedded_line = run.line(30, &["default/d: RouterReady True (Consuming)"]);
    drop(run);
    cleanup(&q).await;

    assert_eq!(zero, Ok(()), "dlq_router_inbox_consumers never 0");
    no_consumer.expect("NoConsumer logged");
    assert_eq!(waiting, Ok(()), "inbox depth never 1");
    status_line.expect("status line with the inbox and its consumers");
    assert_eq!(one, Ok(()), "the consumer was never counted");
    consuming.expect("Consuming logged");
    assert_eq!(embedded, Ok(()), "the embedded router was never counted");
    embedded_line.expect("Consuming logged with the embedded router");
}
