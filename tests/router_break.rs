//! The retry router under bad input and hostile conditions, on the real RabbitMQ:
//! - a route that refuses every copy (a full dead-letter queue): each message is tried
//!   again at most once a second, not once per idle worker slot;
//! - a message whose copy would not fit in one AMQP frame: kept in the inbox, the
//!   connection and every other message unharmed;

mod common;

use std::io::BufRead;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lapin::options::{BasicGetOptions, BasicPublishOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::BasicProperties;

use common::dlq::{confirm_channel, header, ready, text as amqp_text};
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
