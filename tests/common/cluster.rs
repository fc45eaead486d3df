//! The local 3-node RabbitMQ cluster of `scripts/rabbitmq-cluster.sh` for the fault tests
//! (tests/cluster_faults.rs, docs/RELIABILITY.md): its addresses from the `cluster.json`
//! that `DLQ_RABBITMQ_CLUSTER` names, the faults (kill, restart, partition, heal) through
//! the script, and the counting of message ids end to end.
//!
//! One test at a time uses the cluster (a lock held by [`Cluster`]); dropping it heals
//! every partition and restarts every node a test killed, so a failed test leaves three
//! running nodes to the next.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    QueueDeclareOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::BasicProperties;

/// Serialises the tests of one binary on the one cluster.
static LOCK: Mutex<()> = Mutex::new(());

/// One node as `cluster.json` lists it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Node {
    /// Erlang node name (`rabbit@10.77.0.11`): what the management API calls a queue's
    /// leader.
    pub name: String,
    /// `amqp://HOST:5672` without credentials.
    pub amqp: String,
    /// `http://HOST:15672`.
    pub management: String,
}

#[derive(serde::Deserialize)]
struct Described {
    version: String,
    script: PathBuf,
    nodes: Vec<Node>,
}

/// The running cluster, held by one test.
pub struct Cluster {
    /// `3.10` or `4.0`.
    pub version: String,
    script: PathBuf,
    /// The three nodes; node `n` (1-based, as the script counts) is `nodes[n - 1]`.
    pub nodes: Vec<Node>,
    down: Mutex<Vec<usize>>,
    _lock: MutexGuard<'static, ()>,
}

/// How a set of copies came out: message ids never seen, ids seen more than once (extra
/// copies counted), ids that were not sent.
#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    pub lost: usize,
    pub duplicated: usize,
    pub unexpected: usize,
}

impl Cluster {
    /// The cluster of `DLQ_RABBITMQ_CLUSTER`, or `None` after printing that `test` is
    /// skipped (the variable is unset: `scripts/rabbitmq-cluster.sh start` has not run;
    /// `.ci/run` sets it, and fails a run where a test is skipped).
    pub fn get(test: &str) -> Option<Cluster> {
        let Ok(path) = std::env::var("DLQ_RABBITMQ_CLUSTER") else {
            eprintln!(
                "SKIPPED {test}: DLQ_RABBITMQ_CLUSTER is not set (run `scripts/rabbitmq-cluster.sh start 3.10` and set it to /run/dlq-rabbitmq-cluster/cluster.json)"
            );
            return None;
        };
        let lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("DLQ_RABBITMQ_CLUSTER={path}: {e}"));
        let d: Described =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not cluster.json: {e}"));
        assert_eq!(d.nodes.len(), 3, "{path}: three nodes expected");
        let c = Cluster {
            version: d.version,
            script: d.script,
            nodes: d.nodes,
            down: Mutex::new(Vec::new()),
            _lock: lock,
        };
        c.script(&["wait"]);
        Some(c)
    }

    /// Runs the cluster script with `args`; panics with its output when it fails.
    fn script(&self, args: &[&str]) {
        let out = Command::new("bash")
            .arg(&self.script)
            .args(args)
            .output()
            .expect("run rabbitmq-cluster.sh");
        assert!(
            out.status.success(),
            "rabbitmq-cluster.sh {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// SIGKILLs node `n` (1-3).
    pub fn kill(&self, n: usize) {
        self.script(&["kill", &n.to_string()]);
        self.down.lock().unwrap_or_else(|e| e.into_inner()).push(n);
    }

    /// Starts node `n` again and waits for its management API.
    pub fn restart(&self, n: usize) {
        self.script(&["restart", &n.to_string()]);
        self.down
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| *m != n);
    }

    /// Cuts node `n` off from the other two (clients still reach it).
    pub fn partition(&self, n: usize) {
        self.script(&["partition", &n.to_string()]);
    }

    /// Removes every partition.
    pub fn heal(&self) {
        self.script(&["heal"]);
    }

    /// The AMQP URI of node `n` with guest/guest and vhost `/`.
    pub fn amqp(&self, n: usize) -> String {
        let host = self.nodes[n - 1].amqp.trim_start_matches("amqp://");
        format!("amqp://guest:guest@{host}/%2f")
    }

    /// The AMQP URIs of the nodes in `order` (1-based), one per line.
    pub fn amqp_list(&self, order: &[usize]) -> String {
        order
            .iter()
            .map(|n| self.amqp(*n))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The management URIs of the nodes in `order`, comma-separated.
    pub fn management_list(&self, order: &[usize]) -> String {
        order
            .iter()
            .map(|n| self.nodes[n - 1].management.clone())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A Secret `name` listing the nodes in `order` (1-based) for AMQP and management.
    pub fn secret_yaml(&self, name: &str, order: &[usize]) -> String {
        self.secret_yaml_with(name, &self.amqp_list(order), order)
    }

    /// A Secret `name` with AMQP URI(s) `amqp` (one per line) and the management APIs of
    /// the nodes in `order`.
    pub fn secret_yaml_with(&self, name: &str, amqp: &str, order: &[usize]) -> String {
        let indent = |s: String| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: default\nstringData:\n  uri: |\n{}  managementUri: |\n{}",
            indent(amqp.to_string()),
            indent(self.management_list(order).replace(", ", "\n"))
        )
    }

    /// GET `path` of node `n`'s management API (guest/guest): `None` on 404 or when the
    /// node does not answer.
    pub async fn mgmt_get(&self, n: usize, path: &str) -> Option<serde_json::Value> {
        let resp = reqwest::Client::new()
            .get(format!("{}{path}", self.nodes[n - 1].management))
            .basic_auth("guest", Some("guest"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.json().await.ok()
    }

    /// The node (1-3) that leads quorum queue `queue`, as node `ask` reports it.
    pub async fn leader_of(&self, ask: usize, queue: &str) -> Option<usize> {
        let q = self
            .mgmt_get(ask, &format!("/api/queues/%2F/{}", enc(queue)))
            .await?;
        let leader = q["leader"].as_str().or(q["node"].as_str())?;
        self.nodes
            .iter()
            .position(|n| n.name == leader)
            .map(|i| i + 1)
    }

    /// A connection to node `n` and a channel in confirm mode on it.
    pub async fn channel(&self, n: usize) -> (lapin::Connection, lapin::Channel) {
        let conn = lapin::Connection::connect(&self.amqp(n), Default::default())
            .await
            .unwrap_or_else(|e| panic!("AMQP to node {n}: {e}"));
        let ch = conn.create_channel().await.expect("channel");
        ch.confirm_select(Default::default())
            .await
            .expect("confirms");
        (conn, ch)
    }

    /// Removes the queues, exchanges, policies and ownership records named from `prefix`
    /// through node `n`.
    pub async fn cleanup(&self, n: usize, prefix: &str) {
        super::cleanup_via(&self.nodes[n - 1].management, prefix).await;
    }
}

impl Drop for Cluster {
    /// Heals and restarts what the test left broken (also when it panicked), then waits
    /// for the three nodes to run as one cluster again (a paused minority resumes by
    /// itself once healed).
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(&self.script).arg("heal").output();
        let down = std::mem::take(&mut *self.down.lock().unwrap_or_else(|e| e.into_inner()));
        for n in down {
            let _ = Command::new("bash")
                .arg(&self.script)
                .args(["restart", &n.to_string()])
                .output();
        }
        let _ = Command::new("bash").arg(&self.script).arg("wait").output();
    }
}

/// Percent-encodes a path segment.
pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Publishes one persistent message per id in `ids` to `queue` (default exchange) with
/// `headers`, 500 confirms in flight at a time; panics unless every one is confirmed with
/// an ack.
pub async fn publish_all(ch: &lapin::Channel, queue: &str, ids: &[String], headers: FieldTable) {
    for chunk in ids.chunks(500) {
        let mut pending = Vec::with_capacity(chunk.len());
        for id in chunk {
            pending.push(
                ch.basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    format!("{{\"id\":\"{id}\"}}").as_bytes(),
                    BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_message_id(ShortString::from(id.as_str()))
                        .with_headers(headers.clone()),
                )
                .await
                .expect("publish"),
            );
        }
        for p in pending {
            assert!(
                p.await.expect("confirm").is_ack(),
                "a publish to {queue} was nacked"
            );
        }
    }
}

/// Messages in `queue` (ready, from a passive declare on `ch`); `None` while it cannot be
/// read (the channel's node is gone).
pub async fn depth(ch: &lapin::Channel, queue: &str) -> Option<u32> {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .ok()
    .map(|q| q.message_count())
}

/// Waits up to `timeout` until `queue` holds at least `n` messages (read on `ch`), 100 ms
/// apart: the depth reached, or `None` on timeout.
pub async fn until_depth(
    ch: &lapin::Channel,
    queue: &str,
    n: u32,
    timeout: Duration,
) -> Option<u32> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(d) = depth(ch, queue).await.filter(|d| *d >= n) {
            return Some(d);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Takes every message of `queues` on `ch`'s connection and counts the copies of each
/// message id: each queue is consumed (auto-ack, on a channel of its own) until its depth
/// reads 0 after a pause of a second without deliveries.
pub async fn count_ids(ch: &lapin::Channel, queues: &[String]) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for q in queues {
        while depth(ch, q).await.unwrap_or_else(|| panic!("depth of {q}")) > 0 {
            take_ids(ch, q, &mut seen).await;
        }
    }
    seen
}

/// Consumes `queue` (auto-ack) on a new channel of `ch`'s connection until a second
/// passes without a delivery, counting each message id into `seen`.
async fn take_ids(ch: &lapin::Channel, queue: &str, seen: &mut BTreeMap<String, usize>) {
    let conn_ch = ch.clone();
    let taker = conn_ch
        .basic_consume(
            queue.into(),
            "count-ids".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("consume {queue}: {e}"));
    let mut taker = taker;
    let mut count = |d: Result<lapin::message::Delivery, lapin::Error>| {
        let d = d.unwrap_or_else(|e| panic!("delivery from {queue}: {e}"));
        let id = d
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default();
        *seen.entry(id).or_insert(0) += 1;
    };
    while let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(1), taker.next()).await {
        count(d);
    }
    conn_ch
        .basic_cancel("count-ids".into(), Default::default())
        .await
        .unwrap_or_else(|e| panic!("cancel the consumer of {queue}: {e}"));
    // Deliveries already sent (auto-acked) before the cancel: still counted.
    while let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(1), taker.next()).await {
        count(d);
    }
}

/// Compares the ids `seen` (copies per id) with the ids `sent`.
pub fn tally(sent: &[String], seen: &BTreeMap<String, usize>) -> Tally {
    let sent_set: std::collections::BTreeSet<&String> = sent.iter().collect();
    Tally {
        lost: sent.iter().filter(|id| !seen.contains_key(*id)).count(),
        duplicated: seen
            .iter()
            .filter(|(id, _)| sent_set.contains(id))
            .map(|(_, n)| n - 1)
            .sum(),
        unexpected: seen.keys().filter(|id| !sent_set.contains(id)).count(),
    }
}

/// `n` unique message ids from `prefix`.
pub fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:06}")).collect()
}

/// A consumer of `queue` on `conn` that rejects every delivery (requeue=false) until
/// `stop`, consuming again whenever its consumer ends (its queue's leader moved).
pub fn rejecting_consumer(
    conn: Arc<lapin::Connection>,
    queue: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let Ok(ch) = conn.create_channel().await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let _ = ch.basic_qos(500, BasicQosOptions::default()).await;
            let Ok(mut consumer) = ch
                .basic_consume(
                    queue.as_str().into(),
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
            else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(Duration::from_millis(300), consumer.next()).await {
                    Ok(Some(Ok(d))) => {
                        let _ = d.reject(BasicRejectOptions { requeue: false }).await;
                    }
                    Ok(_) => break,
                    Err(_) => {}
                }
            }
            let _ = ch.close(200, "bye".into()).await;
        }
    })
}
