//! Helpers of the dead-letter operation tests (`dlq inspect`, `dlq replay`) on the local
//! RabbitMQ: a DeadLetterQueue's topology, publishing with confirms, draining.

use std::collections::BTreeMap;

use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;
use serde_json::json;

use super::{AMQP, MGMT};
use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::broker::BrokerConnection;
use dlq_operator::crd::{DeadLetterQueueSpec, RetryPolicySpec};
use dlq_operator::topology::{plan, DesiredTopology, QueueRole};

pub fn connection() -> BrokerConnection {
    let data: BTreeMap<String, Vec<u8>> = [("uri", AMQP), ("managementUri", MGMT)]
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
    BrokerConnection::from_secret_data("rabbitmq", &data).expect("secret")
}

/// The topology of a DeadLetterQueue for source queue `queue`; with `limit`, its
/// dead-letter queue is declared with that `x-delivery-limit`.
pub fn topology(queue: &str, limit: Option<u64>) -> DesiredTopology {
    let spec: DeadLetterQueueSpec = serde_json::from_value(json!({
        "broker": {"secretRef": {"name": "rabbitmq"}},
        "source": {"queue": queue},
        "retryPolicyRef": {"name": "rp"},
    }))
    .expect("spec");
    let rp: RetryPolicySpec =
        serde_json::from_value(json!({"maxRetries": 1, "tiers": ["1s"]})).expect("rp");
    let mut t = plan(
        "test/inspect",
        &spec,
        &ResolvedPolicy::from_spec(&rp).expect("policy"),
    );
    if let Some(limit) = limit {
        for q in &mut t.queues {
            if matches!(q.role, QueueRole::DeadLetter { .. }) {
                q.arguments.insert("x-delivery-limit".into(), json!(limit));
            }
        }
    }
    t
}

pub fn header(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

pub fn text(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v))
}

/// Publishes with a confirm to `queue` through the default exchange.
pub async fn publish(ch: &lapin::Channel, queue: &str, id: &str, headers: FieldTable) {
    let confirm = ch
        .basic_publish(
            "".into(),
            queue.into(),
            Default::default(),
            format!("body of {id}").as_bytes(),
            BasicProperties::default()
                .with_delivery_mode(2)
                .with_message_id(ShortString::from(id))
                .with_headers(headers),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "{id} not confirmed");
}

/// Takes every message of `queue` (acked) and returns their message ids, in queue order.
pub async fn ids_in_order(ch: &lapin::Channel, queue: &str) -> Vec<String> {
    ready(ch, queue).await;
    let mut ids = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
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
    ids
}

/// [`ids_in_order`], sorted.
pub async fn drain_ids(ch: &lapin::Channel, queue: &str) -> Vec<String> {
    let mut ids = ids_in_order(ch, queue).await;
    ids.sort();
    ids
}

/// Ready messages of `queue` right now (AMQP passive declare).
pub async fn ready_now(ch: &lapin::Channel, queue: &str) -> u32 {
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

/// Ready messages of `queue` once the count has settled: messages given back with
/// `basic.nack` (no reply in AMQP) or by a closed channel reach a quorum queue through its
/// Raft log a moment later, so the count is read until three reads 50 ms apart agree (at
/// most 5 s).
pub async fn ready(ch: &lapin::Channel, queue: &str) -> u32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut last = ready_now(ch, queue).await;
    let mut same = 0;
    while same < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = ready_now(ch, queue).await;
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Manifests of a Secret (local broker), a RetryPolicy and a DeadLetterQueue `d` for
/// source queue `queue` in a temp dir, applied with `dlq-operator apply`: the dir (keep it
/// alive) and its path.
pub fn applied_manifests(queue: &str) -> (tempfile::TempDir, String) {
    applied_manifests_with(queue, "")
}

/// [`applied_manifests`] with `extra` (YAML lines, indented by two) added to the
/// DeadLetterQueue's spec.
pub fn applied_manifests_with(queue: &str, extra: &str) -> (tempfile::TempDir, String) {
    let dir = super::manifests(&[
        ("s.yaml", &super::secret_yaml("s", "guest", "guest", MGMT)),
        (
            "p.yaml",
            &super::policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n"),
        ),
        ("d.yaml", &super::dlq_yaml("d", queue, "p", "s", extra)),
    ]);
    let path = dir.path().display().to_string();
    let out = super::cli(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", super::text(&out));
    (dir, path)
}

/// [`topology`] of `queue` (with `limit`), applied to the local broker.
pub async fn applied(queue: &str, limit: Option<u64>) -> DesiredTopology {
    let t = topology(queue, limit);
    dlq_operator::rabbitmq::RabbitMq::new(&connection())
        .expect("client")
        .apply(&t)
        .await
        .expect("apply");
    t
}

/// A connection to the local broker and a channel in confirm mode.
pub async fn confirm_channel() -> (lapin::Connection, lapin::Channel) {
    let conn = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    (conn, ch)
}

/// PUT a policy `name` for exactly `queue` (guest/guest): `definition`, priority 1000.
pub async fn policy(name: &str, queue: &str, definition: serde_json::Value) {
    let status = reqwest::Client::new()
        .put(format!("{}/api/policies/%2F/{name}", super::MGMT))
        .basic_auth("guest", Some("guest"))
        .json(
            &json!({"pattern": format!("^{queue}$"), "apply-to": "queues",
                      "priority": 1000, "definition": definition}),
        )
        .send()
        .await
        .expect("policy")
        .status();
    assert!(status.is_success(), "policy refused: {status}");
}

/// One message taken from a queue: message id, body, headers.
pub struct Taken {
    /// Its message_id (empty without one).
    pub id: String,
    /// Its body.
    pub body: Vec<u8>,
    /// Its headers.
    pub headers: FieldTable,
}

impl Taken {
    /// Header `name`.
    pub fn header(&self, name: &str) -> Option<&AMQPValue> {
        self.headers.inner().get(name)
    }

    /// Header `name` as text (a long string, else its debug form).
    pub fn text(&self, name: &str) -> Option<String> {
        match self.header(name)? {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into()),
            other => Some(format!("{other:?}")),
        }
    }
}

/// Takes every message of `queue` (acked), in order.
pub async fn take_all(ch: &lapin::Channel, queue: &str) -> Vec<Taken> {
    ready(ch, queue).await;
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        let p = &m.delivery.properties;
        out.push(Taken {
            id: p
                .message_id()
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default(),
            body: m.delivery.data.clone(),
            headers: p.headers().clone().unwrap_or_default(),
        });
    }
    out
}
