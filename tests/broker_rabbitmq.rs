//! Tests of the RabbitMQ broker adapter against a real RabbitMQ (127.0.0.1:5672 and
//! management on :15672, guest/guest, vhost `/`). No mocks.
//!
//! Every test uses its own queue-name prefix (random suffix) and removes what it created.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::broker::{BrokerConnection, BrokerError, DeleteOutcome, ObjectKind, Outcome};
use dlq_operator::crd::{DeadLetterQueueSpec, RetryPolicySpec};
use dlq_operator::rabbitmq::{amqp, ownership, RabbitMq};
use dlq_operator::topology::{plan, DesiredTopology};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use serde_json::{json, Value};

const AMQP_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const MGMT_URI: &str = "http://127.0.0.1:15672";
const MGMT_API: &str = "http://127.0.0.1:15672/api";

fn secret(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
}

fn conn() -> BrokerConnection {
    BrokerConnection::from_secret_data(
        "rabbitmq",
        &secret(&[("uri", AMQP_URI), ("managementUri", MGMT_URI)]),
    )
    .expect("valid secret")
}

/// GETs of one apply of `t` where no obsolete tier exists: the vhost list, one per
/// planned exchange (and the source exchange), one per planned queue, the retry
/// exchange's record and, once it exists (not on the `first` apply), its bindings (the
/// possible obsolete tiers), the policies, one per bound exchange/queue pair, one ownership
/// record per planned queue and exchange, the dead-letter exchange's bindings (retired
/// dead-letter queues). An inbox left behind by router mode costs nothing here: it is
/// looked at only while its policy exists (src/rabbitmq/retire_inbox.rs).
/// Independent of how many other objects the vhost holds.
fn reads_per_apply(t: &DesiredTopology, first: bool) -> u64 {
    let pairs = t.binding_pairs();
    let snapshot = 1
        + t.exchanges.len()
        + usize::from(t.source_exchange.is_some())
        + t.queues.len()
        + 1
        + usize::from(!first)
        + 1
        + pairs.len();
    let ownership = t.exchanges.len() + t.queues.len();
    (snapshot + ownership + 1) as u64
}

fn unique(test: &str) -> String {
    let n: u32 = rand::random();
    format!("t-{test}-{}-{n:08x}", std::process::id())
}

fn spec(queue: &str, extra: Value) -> DeadLetterQueueSpec {
    let mut v = json!({
        "broker": {"secretRef": {"name": "rabbitmq"}},
        "source": {"queue": queue},
        "retryPolicyRef": {"name": "rp"},
    });
    if let (Some(obj), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        for (k, val) in extra {
            obj.insert(k.clone(), val.clone());
        }
    }
    serde_json::from_value(v).expect("spec")
}

fn resolved(tiers: &[&str]) -> ResolvedPolicy {
    let rp: RetryPolicySpec = serde_json::from_value(json!({
        "maxRetries": tiers.len(),
        "tiers": tiers,
    }))
    .expect("retry policy");
    ResolvedPolicy::from_spec(&rp).expect("resolved")
}

fn topo(queue: &str, tiers: &[&str]) -> DesiredTopology {
    plan("test/dlq", &spec(queue, json!({})), &resolved(tiers))
}

fn topo_classic(queue: &str, tiers: &[&str]) -> DesiredTopology {
    let classic = json!({"source": {"queue": queue, "queueType": "Classic"}});
    plan("test/dlq", &spec(queue, classic), &resolved(tiers))
}

/// Raw management API access for checks and cleanup (independent of the code under test).
struct Raw(reqwest::Client);

impl Raw {
    fn new() -> Self {
        Raw(reqwest::Client::new())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .0
            .get(format!("{MGMT_API}/{path}"))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .expect("GET");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn put(&self, path: &str, body: Value) -> u16 {
        self.0
            .put(format!("{MGMT_API}/{path}"))
            .basic_auth("guest", Some("guest"))
            .json(&body)
            .send()
            .await
            .expect("PUT")
            .status()
            .as_u16()
    }

    async fn delete(&self, path: &str) -> u16 {
        self.0
            .delete(format!("{MGMT_API}/{path}"))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .expect("DELETE")
            .status()
            .as_u16()
    }

    /// Deletes every queue, exchange and policy of vhost `/` whose name starts with
    /// `prefix` or `dlq-operator.<prefix>` (this test's own objects only).
    async fn cleanup(&self, prefix: &str) {
        let ours = |name: &str| {
            name.starts_with(prefix) || name.starts_with(&format!("dlq-operator.{prefix}"))
        };
        for (kind, list) in [
            ("queues", "queues/%2F?columns=name"),
            ("exchanges", "exchanges/%2F"),
            ("policies", "policies/%2F"),
        ] {
            let (_, v) = self.get(list).await;
            for item in v.as_array().cloned().unwrap_or_default() {
                let name = item["name"].as_str().unwrap_or_default().to_string();
                if ours(&name) {
                    let enc: String = percent_encoding::utf8_percent_encode(
                        &name,
                        percent_encoding::NON_ALPHANUMERIC,
                    )
                    .to_string();
                    self.delete(&format!("{kind}/%2F/{enc}")).await;
                }
            }
        }
        self.cleanup_records(prefix).await;
    }

    /// Deletes the ownership records of the objects named `prefix…` (as if they had been
    /// made by a version without records), keeping the objects.
    async fn cleanup_records(&self, prefix: &str) {
        let (_, params) = self.get("global-parameters").await;
        for p in params.as_array().cloned().unwrap_or_default() {
            let name = p["name"].as_str().unwrap_or_default();
            if name.starts_with(ownership::RECORD_PREFIX)
                && p["value"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(prefix))
            {
                self.delete(&format!("global-parameters/{name}")).await;
            }
        }
    }

    /// The ownership record of `kind` `name` in vhost `/` (its JSON value), if any.
    async fn owner_record(&self, kind: &str, name: &str) -> Option<Value> {
        let (status, v) = self
            .get(&format!(
                "global-parameters/{}",
                ownership::record_name("/", kind, name)
            ))
            .await;
        (status == 200).then(|| v["value"].clone())
    }

    async fn names(&self, list: &str) -> Vec<String> {
        let (_, v) = self.get(list).await;
        v.as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|i| i["name"].as_str().map(str::to_string))
            .collect()
    }

    async fn policy(&self, name: &str) -> Value {
        let (status, v) = self.get(&format!("policies/%2F/{name}")).await;
        assert_eq!(status, 200, "policy {name} should exist");
        v
    }
}

/// Applies `plan` until its report says queue `queue` was deleted (an emptied obsolete
/// queue: the broker's statistics lag, so it is `draining` or `retired` for a while);
/// fails after 20 s or on any other outcome.
async fn apply_until_deleted(broker: &RabbitMq, plan: &DesiredTopology, queue: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report = broker.apply(plan).await.expect("apply");
        match report
            .find(ObjectKind::Queue, queue)
            .map(|a| a.outcome.clone())
        {
            Some(Outcome::Deleted) => break,
            Some(Outcome::Draining(_) | Outcome::Retired(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            other => panic!("expected {queue} deleted, got {other:?}"),
        }
    }
}

async fn publish(queue: &str, body: &[u8]) {
    publish_to("", queue, body).await
}

/// Publishes `body` to `exchange` with `routing_key` and waits for the publisher confirm.
async fn publish_to(exchange: &str, routing_key: &str, body: &[u8]) {
    let c = amqp::connect(&conn()).await.expect("amqp connect");
    let ch = c.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    ch.basic_publish(
        exchange.into(),
        routing_key.into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default().with_delivery_mode(2),
    )
    .await
    .expect("publish")
    .await
    .expect("publish done");
    c.close(200, "bye".into()).await.ok();
}

/// Ready messages of a queue right now (AMQP passive declare, no statistics lag).
async fn ready_count(queue: &str) -> Option<u32> {
    let c = amqp::connect(&conn()).await.expect("amqp connect");
    let ch = c.create_channel().await.expect("channel");
    let r = ch
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .ok()
        .map(|q| q.message_count());
    c.close(200, "bye".into()).await.ok();
    r
}

#[tokio::test]
async fn apply_creates_everything() {
    let q = unique("create");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let topology = topo(&q, &["1s", "2s"]);
    let report = broker.apply(&topology).await.expect("apply");

    // Every planned object is reported Created, after the ownership records of its
    // queues and exchanges (one line).
    let expected = topology.exchanges.len()
        + topology.policies.len()
        + topology.queues.len()
        + topology.bindings.len();
    assert_eq!(report.actions.len(), expected + 1, "{report}");
    let names = topology.exchanges.len() + topology.queues.len();
    assert_eq!(
        report.actions[0].to_string(),
        format!("ownership records for {names} names: created")
    );
    for a in &report.actions {
        assert_eq!(a.outcome, Outcome::Created, "{a}");
    }
    assert!(report.is_ready());
    assert_eq!(report.writes(), expected + 1);
    let record = raw
        .owner_record("queue", &format!("{q}.dlq"))
        .await
        .expect("the dead-letter queue's ownership record");
    assert_eq!(record["owner"], json!(topology.owner));
    assert_eq!(record["role"], "dead-letter queue");
    let record = raw
        .owner_record("exchange", &format!("{q}.retry"))
        .await
        .expect("the retry exchange's ownership record");
    assert_eq!(record["role"], "retry exchange");
    // And once per client, the broker's version (a quorum dead-letter queue's policy
    // depends on it).
    assert_eq!(
        broker.request_counts().reads,
        reads_per_apply(&topology, true) + 1
    );
    // One write per object, one per ownership record.
    assert_eq!(broker.request_counts().writes, (expected + names) as u64);
    assert_eq!(
        report
            .find(ObjectKind::Queue, &format!("{q}.dlq"))
            .map(|a| a.to_string()),
        Some(format!("queue {q}.dlq: created"))
    );

    // Check on the broker.
    let queues = raw.names("queues/%2F?columns=name").await;
    for name in [
        q.clone(),
        format!("{q}.dlq"),
        format!("{q}.retry.1s"),
        format!("{q}.retry.2s"),
    ] {
        assert!(queues.contains(&name), "queue {name} missing");
    }
    let (_, tier) = raw.get(&format!("queues/%2F/{q}.retry.2s")).await;
    assert_eq!(tier["type"], "quorum");
    assert_eq!(tier["arguments"]["x-message-ttl"], 2000);
    assert_eq!(tier["arguments"]["x-dead-letter-routing-key"], json!(q));
    let exchanges = raw.names("exchanges/%2F").await;
    assert!(exchanges.contains(&format!("{q}.dlx")));
    assert!(exchanges.contains(&format!("{q}.retry")));
    let source_policy = raw.policy(&format!("dlq-operator.{q}")).await;
    let def = &source_policy["definition"];
    assert_eq!(def["dead-letter-exchange"], json!(format!("{q}.dlx")));
    assert_eq!(def["dead-letter-routing-key"], json!(q));
    assert_eq!(def["delivery-limit"], 20);
    assert_eq!(def["dead-letter-strategy"], "at-least-once");
    assert_eq!(def["overflow"], "reject-publish");
    assert_eq!(source_policy["apply-to"], "queues");
    assert_eq!(source_policy["priority"], 100);
    let dlq_policy = raw.policy(&format!("dlq-operator.{q}.dlq")).await;
    assert_eq!(dlq_policy["definition"]["max-length"], 100_000);
    assert_eq!(dlq_policy["definition"]["message-ttl"], 604_800_000u64);

    let (_, bindings) = raw.get("bindings/%2F").await;
    let has = |src: &str, dst: &str, key: &str| {
        bindings.as_array().is_some_and(|bs| {
            bs.iter()
                .any(|b| b["source"] == src && b["destination"] == dst && b["routing_key"] == key)
        })
    };
    assert!(has(&format!("{q}.dlx"), &format!("{q}.dlq"), &q));
    assert!(has(&format!("{q}.retry"), &format!("{q}.retry.1s"), "1s"));
    assert!(has(&format!("{q}.retry"), &format!("{q}.retry.2s"), "2s"));

    raw.cleanup(&q).await;
}

#[tokio::test]
async fn second_apply_writes_nothing() {
    let q = unique("idem");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let topology = topo(&q, &["5s"]);
    broker.apply(&topology).await.expect("first apply");
    let before = broker.request_counts();
    let report = broker.apply(&topology).await.expect("second apply");
    let after = broker.request_counts();
    assert_eq!(after.writes, before.writes, "second apply wrote: {report}");
    assert_eq!(
        after.reads,
        before.reads + reads_per_apply(&topology, false)
    );
    assert!(!report.actions.is_empty());
    for a in &report.actions {
        assert_eq!(a.outcome, Outcome::InPlace, "{a}");
    }
    assert_eq!(report.writes(), 0);
    assert!(report.is_ready());
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn existing_queue_with_other_arguments_is_a_conflict_and_kept() {
    let q = unique("conflict");
    let raw = Raw::new();
    assert_eq!(
        raw.put(
            &format!("queues/%2F/{q}"),
            json!({"durable": true, "arguments": {"x-queue-type": "classic", "x-max-length": 1000}}),
        )
        .await,
        201
    );
    publish(&q, b"keep me").await;

    let broker = RabbitMq::new(&conn()).expect("client");
    let report = broker.apply(&topo(&q, &["1s"])).await.expect("apply");
    let action = report
        .find(ObjectKind::Queue, &q)
        .expect("source queue action");
    match &action.outcome {
        Outcome::Conflict(reason) => {
            assert!(reason.contains(&q), "{reason}");
            assert!(reason.contains("x-queue-type"), "{reason}");
            assert!(
                reason.contains("classic") && reason.contains("quorum"),
                "{reason}"
            );
        }
        other => panic!("expected a conflict, got {other}"),
    }
    assert!(!report.is_ready());
    // Our policy is not put on a queue we do not adopt (it would change its behaviour).
    assert!(matches!(
        report
            .find(ObjectKind::Policy, &format!("dlq-operator.{q}"))
            .map(|a| &a.outcome),
        Some(Outcome::Conflict(_))
    ));
    assert_eq!(
        raw.get(&format!("policies/%2F/dlq-operator.{q}")).await.0,
        404
    );
    // No binding to the conflicting queue was attempted.
    assert!(report
        .actions
        .iter()
        .all(|a| !(a.kind == ObjectKind::Binding && a.name.contains(&format!("-> {q} ")))));

    // The queue is untouched and still holds the message.
    let (status, info) = raw.get(&format!("queues/%2F/{q}")).await;
    assert_eq!(status, 200);
    assert_eq!(info["type"], "classic");
    assert_eq!(info["arguments"]["x-max-length"], 1000);
    assert_eq!(ready_count(&q).await, Some(1));

    // A queue argument that overrides a key of our policy is a conflict too.
    let q2 = unique("override");
    assert_eq!(
        raw.put(
            &format!("queues/%2F/{q2}"),
            json!({"durable": true, "arguments": {"x-queue-type": "quorum", "x-dead-letter-exchange": "elsewhere"}}),
        )
        .await,
        201
    );
    let report = broker.apply(&topo(&q2, &["1s"])).await.expect("apply");
    match &report.find(ObjectKind::Queue, &q2).expect("action").outcome {
        Outcome::Conflict(reason) => assert!(reason.contains("x-dead-letter-exchange"), "{reason}"),
        other => panic!("expected a conflict, got {other}"),
    }
    raw.cleanup(&q).await;
    raw.cleanup(&q2).await;
}

#[tokio::test]
async fn policy_shadowing_and_merging() {
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");

    // A higher-priority user policy on the source queue shadows ours.
    let q = unique("shadow");
    let high = format!("{q}-user-high");
    assert_eq!(
        raw.put(
            &format!("policies/%2F/{high}"),
            json!({"pattern": format!("^{q}$"), "definition": {"max-length": 5}, "priority": 500, "apply-to": "queues"}),
        )
        .await,
        201
    );
    let report = broker.apply(&topo(&q, &["1s"])).await.expect("apply");
    match &report
        .find(ObjectKind::Policy, &format!("dlq-operator.{q}"))
        .expect("policy action")
        .outcome
    {
        Outcome::Shadowed(reason) => {
            assert!(reason.contains(&high) && reason.contains("500"), "{reason}")
        }
        other => panic!("expected shadowed, got {other}"),
    }
    assert!(!report.is_ready());

    // A lower-priority one has its keys merged into ours (ours win on conflicts).
    let q2 = unique("merge");
    let low = format!("{q2}-user-low");
    assert_eq!(
        raw.put(
            &format!("policies/%2F/{low}"),
            json!({"pattern": format!("^{q2}"), "definition": {"max-length-bytes": 1_000_000, "dead-letter-exchange": "theirs"}, "priority": 1, "apply-to": "all"}),
        )
        .await,
        201
    );
    let topology = topo(&q2, &["1s"]);
    let report = broker.apply(&topology).await.expect("apply");
    assert!(report.is_ready(), "{report}");
    let p = raw.policy(&format!("dlq-operator.{q2}")).await;
    assert_eq!(p["definition"]["max-length-bytes"], 1_000_000);
    assert_eq!(
        p["definition"]["dead-letter-exchange"],
        json!(format!("{q2}.dlx"))
    );
    let p = raw.policy(&format!("dlq-operator.{q2}.dlq")).await;
    assert_eq!(p["definition"]["max-length-bytes"], 1_000_000);
    assert_eq!(p["definition"]["max-length"], 100_000);
    // Merged definitions are stable: a second apply writes nothing.
    let before = broker.request_counts().writes;
    broker.apply(&topology).await.expect("apply again");
    assert_eq!(broker.request_counts().writes, before);

    raw.delete(&format!("policies/%2F/{high}")).await;
    raw.delete(&format!("policies/%2F/{low}")).await;
    raw.cleanup(&q).await;
    raw.cleanup(&q2).await;
}

#[tokio::test]
async fn obsolete_tier_drains_then_is_deleted() {
    let q = unique("tiers");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    broker
        .apply(&topo_classic(&q, &["1s", "60s"]))
        .await
        .expect("apply with 60s tier");
    let old = format!("{q}.retry.1m");
    assert!(raw.names("queues/%2F?columns=name").await.contains(&old));
    publish(&old, b"waiting").await;

    let new_plan = topo_classic(&q, &["1s"]);
    let report = broker.apply(&new_plan).await.expect("apply without it");
    let unbound = report
        .actions
        .iter()
        .find(|a| a.kind == ObjectKind::Binding && a.name.contains(&old))
        .expect("binding action");
    assert_eq!(unbound.outcome, Outcome::Deleted);
    match &report
        .find(ObjectKind::Queue, &old)
        .expect("queue action")
        .outcome
    {
        Outcome::Draining(reason) => assert!(reason.contains("removed once empty"), "{reason}"),
        other => panic!("expected draining, got {other}"),
    }
    assert!(
        report.is_ready(),
        "draining does not block readiness: {report}"
    );
    assert_eq!(ready_count(&old).await, Some(1), "message kept");
    let (_, bindings) = raw.get("bindings/%2F").await;
    assert!(!bindings
        .as_array()
        .expect("bindings")
        .iter()
        .any(|b| b["destination"] == json!(old) && b["source"] == json!(format!("{q}.retry"))));

    // Empty it, then apply until the broker statistics catch up and it is deleted.
    assert_eq!(raw.delete(&format!("queues/%2F/{old}/contents")).await, 204);
    apply_until_deleted(&broker, &new_plan, &old).await;
    assert!(!raw.names("queues/%2F?columns=name").await.contains(&old));
    assert!(
        raw.owner_record("queue", &old).await.is_none(),
        "the deleted tier's ownership record goes with it"
    );
    // Once gone, nothing more is reported or written for it.
    let before = broker.request_counts().writes;
    let report = broker.apply(&new_plan).await.expect("apply");
    assert!(report.find(ObjectKind::Queue, &old).is_none());
    assert_eq!(broker.request_counts().writes, before);
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn obsolete_quorum_tier_is_unbound_and_retained_never_deleted() {
    let q = unique("qtiers");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    broker
        .apply(&topo(&q, &["1s", "60s"]))
        .await
        .expect("apply with 60s tier");
    let old = format!("{q}.retry.1m");
    publish(&old, b"waiting").await;
    let new_plan = topo(&q, &["1s"]);
    let report = broker.apply(&new_plan).await.expect("apply without it");
    match &report
        .find(ObjectKind::Queue, &old)
        .expect("queue action")
        .outcome
    {
        Outcome::Retained(reason) => assert!(reason.contains("quorum"), "{reason}"),
        other => panic!("expected retained, got {other}"),
    }
    assert!(report.is_ready(), "{report}");
    assert_eq!(ready_count(&old).await, Some(1), "message kept");
    // Even once empty it is kept, and re-applying writes nothing for it.
    assert_eq!(raw.delete(&format!("queues/%2F/{old}/contents")).await, 204);
    let before = broker.request_counts().writes;
    let report = broker.apply(&new_plan).await.expect("apply");
    assert!(matches!(
        report.find(ObjectKind::Queue, &old).map(|a| &a.outcome),
        Some(Outcome::Retained(_))
    ));
    assert_eq!(broker.request_counts().writes, before, "{report}");
    assert!(raw.names("queues/%2F?columns=name").await.contains(&old));
    // Deleted by a person, as the reason says: its ownership record goes with the next
    // apply (it used to stay for ever and refuse any later resource that plans the name).
    assert!(raw.owner_record("queue", &old).await.is_some());
    assert_eq!(raw.delete(&format!("queues/%2F/{old}")).await, 204);
    let report = broker
        .apply(&new_plan)
        .await
        .expect("apply after the deletion");
    assert!(report.find(ObjectKind::Queue, &old).is_none(), "{report}");
    assert!(raw.owner_record("queue", &old).await.is_none());
    let before = broker.request_counts().writes;
    broker.apply(&new_plan).await.expect("steady state");
    assert_eq!(broker.request_counts().writes, before);
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn user_queue_named_like_a_tier_is_never_touched() {
    let q = unique("lookalike");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let user = format!("{q}.retry.7s");
    assert_eq!(
        raw.put(
            &format!("queues/%2F/{user}"),
            json!({"durable": true, "arguments": {"x-queue-type": "classic"}}),
        )
        .await,
        201
    );
    let report = broker
        .apply(&topo_classic(&q, &["1s"]))
        .await
        .expect("apply");
    assert!(report.find(ObjectKind::Queue, &user).is_none(), "{report}");
    assert!(raw.names("queues/%2F?columns=name").await.contains(&user));
    // Planning a 7s tier over the user's queue is a conflict, and then the working 1s
    // tier is not retired: the old tiers serve until the new ones are in place.
    let report = broker
        .apply(&topo_classic(&q, &["7s"]))
        .await
        .expect("apply");
    assert!(matches!(
        report.find(ObjectKind::Queue, &user).map(|a| &a.outcome),
        Some(Outcome::Conflict(_))
    ));
    assert!(!report.is_ready());
    let old = format!("{q}.retry.1s");
    assert!(report.find(ObjectKind::Queue, &old).is_none(), "{report}");
    let (_, bindings) = raw.get("bindings/%2F").await;
    assert!(bindings
        .as_array()
        .expect("bindings")
        .iter()
        .any(|b| b["destination"] == json!(old) && b["source"] == json!(format!("{q}.retry"))));
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn delete_queue_if_empty_refuses_non_empty_classic_queue() {
    let q = unique("delete");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    assert_eq!(
        raw.put(
            &format!("queues/%2F/{q}"),
            json!({"durable": true, "arguments": {"x-queue-type": "classic"}}),
        )
        .await,
        201
    );
    publish(&q, b"x").await;
    assert!(matches!(
        broker.delete_queue_if_empty("/", &q).await.expect("delete"),
        DeleteOutcome::NotEmpty { messages } if messages >= 1
    ));
    assert_eq!(ready_count(&q).await, Some(1));
    raw.delete(&format!("queues/%2F/{q}/contents")).await;
    assert_eq!(
        broker.delete_queue_if_empty("/", &q).await.expect("delete"),
        DeleteOutcome::Deleted
    );
    assert_eq!(
        broker.delete_queue_if_empty("/", &q).await.expect("delete"),
        DeleteOutcome::Absent
    );
}

#[tokio::test]
async fn auth_failure_and_unreachable_never_leak_the_password() {
    let password = "s3cr3t-Wr0ng-pw";
    let bad = BrokerConnection::from_secret_data(
        "rabbitmq",
        &secret(&[
            ("uri", AMQP_URI),
            ("managementUri", MGMT_URI),
            ("password", password),
        ]),
    )
    .expect("secret");
    let check = |e: &BrokerError| {
        assert!(!e.to_string().contains(password), "{e}");
        assert!(!format!("{e:?}").contains(password), "{e:?}");
    };

    let err = RabbitMq::new(&bad)
        .expect("client")
        .queue_depths("/")
        .await
        .expect_err("wrong password");
    assert!(
        matches!(&err, BrokerError::AuthFailed { user, .. } if user == "guest"),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "auth_failed");
    check(&err);

    let err = amqp::connect(&bad).await.expect_err("wrong password");
    assert!(matches!(&err, BrokerError::AuthFailed { .. }), "{err:?}");
    check(&err);

    let down = BrokerConnection::from_secret_data(
        "rabbitmq",
        &secret(&[
            ("uri", &format!("amqp://guest:{password}@127.0.0.1:1/%2f")),
            ("managementUri", "http://127.0.0.1:1"),
        ]),
    )
    .expect("secret");
    let err = RabbitMq::new(&down)
        .expect("client")
        .queue_depths("/")
        .await
        .expect_err("down");
    assert!(matches!(&err, BrokerError::Unreachable { .. }), "{err:?}");
    assert!(err.is_transient());
    check(&err);
    let err = amqp::connect(&down).await.expect_err("down");
    assert!(matches!(&err, BrokerError::Unreachable { .. }), "{err:?}");
    check(&err);

    // A missing vhost is NotFound.
    let err = RabbitMq::new(&conn())
        .expect("client")
        .queue_depths("no-such-vhost-dlq-test")
        .await
        .expect_err("no vhost");
    assert!(matches!(&err, BrokerError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn queue_depths_reads_all_queues_in_one_call() {
    let q = unique("depth");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let topology = topo(&q, &["1s"]);
    broker.apply(&topology).await.expect("apply");
    publish(&format!("{q}.dlq"), b"dead").await;

    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let before = broker.request_counts();
        let depths = broker.queue_depths("/").await.expect("depths");
        let after = broker.request_counts();
        assert_eq!(after.reads, before.reads + 1);
        assert_eq!(after.writes, before.writes);
        for p in &topology.queues {
            assert!(depths.contains_key(&p.name), "{} missing", p.name);
        }
        let d = depths[&format!("{q}.dlq")];
        if d.messages == 1 {
            assert_eq!(d.ready + d.unacked, 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "depth not seen within 15 s: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    raw.cleanup(&q).await;
}

#[test]
fn secret_validation() {
    let err = |pairs: &[(&str, &str)]| {
        BrokerConnection::from_secret_data("rabbitmq", &secret(pairs)).expect_err("invalid")
    };
    let key_of = |e: BrokerError| match e {
        BrokerError::InvalidSecret { secret, key, .. } => {
            assert_eq!(secret, "rabbitmq");
            key
        }
        other => panic!("expected InvalidSecret, got {other:?}"),
    };
    assert_eq!(key_of(err(&[("managementUri", MGMT_URI)])), "uri");
    assert_eq!(key_of(err(&[("uri", AMQP_URI)])), "managementUri");
    let e = err(&[("uri", AMQP_URI), ("managementUri", "ftp://x:15672")]);
    assert_eq!(
        e.to_string(),
        r#"secret "rabbitmq": key "managementUri": not an http(s) URI"#
    );
    assert_eq!(e.metric_label(), "invalid_secret");
    assert_eq!(
        key_of(err(&[("uri", "http://x"), ("managementUri", MGMT_URI)])),
        "uri"
    );
    // A common mistake: the API path instead of the plugin's base URI.
    let e = err(&[
        ("uri", AMQP_URI),
        ("managementUri", "http://127.0.0.1:15672/api/"),
    ]);
    assert!(e.to_string().contains("without /api"), "{e}");
    let pem = "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n";
    assert_eq!(
        key_of(err(&[
            ("uri", AMQP_URI),
            ("managementUri", MGMT_URI),
            ("tls.crt", pem)
        ])),
        "tls.key"
    );
    assert_eq!(
        key_of(err(&[
            ("uri", AMQP_URI),
            ("managementUri", MGMT_URI),
            ("ca.crt", "not pem")
        ])),
        "ca.crt"
    );

    // Userinfo is percent-decoded; username/password keys override it; Debug redacts.
    let c = BrokerConnection::from_secret_data(
        "rabbitmq",
        &secret(&[
            ("uri", "amqps://app:p%40ss-w0rd@rabbit.example:5671/prod"),
            ("managementUri", "https://rabbit.example:15671"),
        ]),
    )
    .expect("valid");
    assert_eq!(c.username(), "app");
    let dbg = format!("{c:?}");
    assert!(
        !dbg.contains("p%40ss-w0rd") && !dbg.contains("p@ss-w0rd"),
        "{dbg}"
    );
    assert!(c.redacted_amqp_uri().contains("app:***@rabbit.example"));
    assert!(!c.redacted_amqp_uri().contains("w0rd"));
    assert!(!c.redacted_management_uri().contains("w0rd"));
    assert!(c.amqp_uses_tls() && c.management_uses_tls());

    let c = BrokerConnection::from_secret_data(
        "rabbitmq",
        &secret(&[
            ("uri", "amqp://app:old@rabbit:5672/%2f"),
            ("managementUri", "http://rabbit:15672"),
            ("username", "ops"),
            ("password", "hunter2-secret"),
        ]),
    )
    .expect("valid");
    assert_eq!(c.username(), "ops");
    assert!(!format!("{c:?}").contains("hunter2-secret"));
    assert!(!c.redacted_amqp_uri().contains("hunter2-secret"));
}

#[tokio::test]
async fn missing_source_exchange_and_unmanaged_source_queue_fail_clearly() {
    let q = unique("missing");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let missing_exchange = format!("{q}.orders");
    let topology = plan(
        "test/dlq",
        &spec(
            &q,
            json!({"source": {"queue": q, "exchange": missing_exchange, "manage": false}}),
        ),
        &resolved(&["1s"]),
    );
    let report = broker.apply(&topology).await.expect("apply");
    assert!(!report.is_ready());
    match &report
        .find(ObjectKind::Exchange, &missing_exchange)
        .expect("source exchange action")
        .outcome
    {
        Outcome::Failed(reason) => assert!(reason.contains("does not exist"), "{reason}"),
        other => panic!("expected failed, got {other}"),
    }
    assert_eq!(
        report
            .find(ObjectKind::Queue, &q)
            .map(|a| a.outcome.clone()),
        Some(Outcome::Failed(format!(
            "source queue {q} does not exist and spec.source.manage is false"
        )))
    );
    // Neither the exchange nor the source queue was declared, and no binding to them.
    assert!(!raw.names("exchanges/%2F").await.contains(&missing_exchange));
    assert!(!raw.names("queues/%2F?columns=name").await.contains(&q));
    assert!(report
        .actions
        .iter()
        .all(|a| !(a.kind == ObjectKind::Binding && a.name.starts_with(&missing_exchange))));
    raw.cleanup(&q).await;
}

/// Lowering a dead-letter queue's max-length below its depth with overflow DropHead would
/// drop dead letters at once: refused as a conflict, nothing written, nothing dropped.
#[tokio::test]
async fn shrinking_a_drop_head_dead_letter_queue_below_its_depth_is_refused() {
    let q = unique("shrink");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let with = |max: u64| {
        let extra = json!({"source": {"queue": q, "queueType": "Classic"},
            "deadLetter": {"maxLength": max, "overflow": "DropHead"}});
        plan("test/dlq", &spec(&q, extra), &resolved(&["1s"]))
    };
    broker.apply(&with(100)).await.expect("apply");
    let dlq = format!("{q}.dlq");
    for _ in 0..3 {
        publish(&dlq, b"dead letter").await;
    }
    // No waiting for the management statistics: they lag (or are absent for a new
    // queue), so the guard must not rely on them alone.
    let before = broker.request_counts().writes;
    let report = broker.apply(&with(1)).await.expect("apply");
    let policy = format!("dlq-operator.{dlq}");
    match &report
        .find(ObjectKind::Policy, &policy)
        .expect("policy action")
        .outcome
    {
        Outcome::Conflict(reason) => assert!(reason.contains("DropHead"), "{reason}"),
        other => panic!("expected conflict, got {other}"),
    }
    assert!(!report.is_ready());
    assert_eq!(broker.request_counts().writes, before, "nothing written");
    assert_eq!(ready_count(&dlq).await, Some(3), "no dead letter dropped");
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn an_endpoint_that_never_answers_times_out_instead_of_hanging() {
    // Accepts TCP connections and never says a word (no AMQP handshake).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let conn = BrokerConnection::from_secret_data(
        "rabbitmq",
        &secret(&[
            ("uri", &format!("amqp://guest:guest@127.0.0.1:{port}/")),
            ("managementUri", MGMT_URI),
        ]),
    )
    .expect("secret");
    let start = Instant::now();
    let err = amqp::passive_queue_counts(&conn, "/", "anything")
        .await
        .expect_err("no answer");
    let waited = start.elapsed();
    assert!(matches!(err, BrokerError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains("within 10 s"), "{err}");
    assert!(
        waited >= amqp::TIMEOUT && waited < amqp::TIMEOUT + Duration::from_secs(5),
        "gave up after {waited:?}"
    );
    silent.abort();
}

#[tokio::test]
async fn remove_refuses_while_the_source_queue_has_consumers() {
    let q = unique("rm-consumer");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let topology = topo(&q, &["1s"]);
    broker.apply(&topology).await.expect("apply");
    let connection = lapin::Connection::connect(AMQP_URI, lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = connection.create_channel().await.expect("channel");
    let _consumer = channel
        .basic_consume(
            q.as_str().into(),
            "app".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let report = broker.remove(&topology).await.expect("remove");
    assert!(!report.is_complete());
    assert!(
        report.blocked[0].contains(&format!("source queue {q:?} has 1 consumer(s)")),
        "{:?}",
        report.blocked
    );
    assert!(report.actions.is_empty(), "nothing removed");
    assert!(raw
        .names("exchanges/%2F")
        .await
        .contains(&format!("{q}.dlx")));
    let _ = connection.close(200, "bye".into()).await;
    // Consumer gone: removal goes through, the source queue stays.
    let report = broker.remove(&topology).await.expect("remove");
    assert!(report.is_complete(), "{:?}", report.blocked);
    let queues = raw.names("queues/%2F?columns=name").await;
    assert!(queues.contains(&q));
    assert!(!queues.contains(&format!("{q}.dlq")));
    raw.cleanup(&q).await;
}

/// With `prometheusUri`, depths come from the `rabbitmq_prometheus` plugin (one request
/// per vhost) and agree with the management API's; a `prometheusUri` nothing answers on
/// falls back to the management API.
#[tokio::test]
async fn depths_from_the_prometheus_plugin_agree_with_the_management_api() {
    let q = unique("prom-depth");
    let raw = Raw::new();
    assert_eq!(
        raw.put(&format!("queues/%2F/{q}"), json!({"durable": true}))
            .await,
        201
    );
    for i in 0..3 {
        publish(&q, format!("m{i}").as_bytes()).await;
    }
    let with_prometheus = |uri: &str| {
        BrokerConnection::from_secret_data(
            "rabbitmq",
            &secret(&[
                ("uri", AMQP_URI),
                ("managementUri", MGMT_URI),
                ("prometheusUri", uri),
            ]),
        )
        .expect("valid secret")
    };
    let prom = RabbitMq::new(&with_prometheus("http://127.0.0.1:15692")).expect("client");
    let required: std::collections::BTreeSet<String> = [q.clone()].into();
    let mgmt = RabbitMq::new(&conn()).expect("client");
    // Both lag by the statistics interval (5 s): wait until both see the 3 messages.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = prom
            .queue_depths_covering("/", &required)
            .await
            .expect("prometheus depths");
        let m = mgmt.queue_depths("/").await.expect("management depths");
        let (pd, md) = (p.get(&q).copied(), m.get(&q).copied());
        if pd.is_some_and(|d| d.messages == 3) && md.is_some_and(|d| d.messages == 3) {
            // The same counts (only the plugin's answer carries the consumers here).
            let counts = |d: Option<dlq_operator::broker::QueueDepth>| {
                d.map(|d| (d.messages, d.ready, d.unacked))
            };
            assert_eq!(counts(pd), counts(md), "same depth from both");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "depths never reached 3: prometheus {pd:?}, management {md:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let before = prom.request_counts().reads;
    prom.queue_depths("/").await.expect("depths");
    assert_eq!(
        prom.request_counts().reads - before,
        1,
        "one request per vhost"
    );

    // Nothing listens there: the management API answers instead.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let broken =
        RabbitMq::new(&with_prometheus(&format!("http://127.0.0.1:{port}"))).expect("client");
    let d = broken.queue_depths("/").await.expect("fell back");
    assert_eq!(d.get(&q).map(|d| d.messages), Some(3));
    raw.delete(&format!("queues/%2F/{q}")).await;
}

/// The consumer count of a router inbox comes with the one depth listing per vhost: from
/// the management API's listing with statistics when an inbox is to be counted (the cheap
/// `disable_stats` listing has none), and from the `rabbitmq_prometheus` answer (family
/// `queue_consumer_count`) with `prometheusUri`; both agree with the live consumer.
#[tokio::test]
async fn the_depth_listing_counts_the_consumers_of_the_queues_asked_for() {
    let q = unique("consumers");
    let raw = Raw::new();
    assert_eq!(
        raw.put(&format!("queues/%2F/{q}"), json!({"durable": true}))
            .await,
        201
    );
    publish(&q, b"waiting").await;
    let required: std::collections::BTreeSet<String> = [q.clone()].into();
    let mgmt = RabbitMq::new(&conn()).expect("client");
    let prom = RabbitMq::new(
        &BrokerConnection::from_secret_data(
            "rabbitmq",
            &secret(&[
                ("uri", AMQP_URI),
                ("managementUri", MGMT_URI),
                ("prometheusUri", "http://127.0.0.1:15692"),
            ]),
        )
        .expect("valid secret"),
    )
    .expect("client");
    // Counted from both sources (statistics lag by up to 5 s), one request each.
    let counted = |want: u64| {
        let (mgmt, prom, required) = (&mgmt, &prom, &required);
        let q = q.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let before = (mgmt.request_counts().reads, prom.request_counts().reads);
                let m = mgmt
                    .queue_depths_and_consumers("/", required, required)
                    .await
                    .expect("management listing");
                let p = prom
                    .queue_depths_and_consumers("/", required, required)
                    .await
                    .expect("prometheus listing");
                let after = (mgmt.request_counts().reads, prom.request_counts().reads);
                let (md, pd) = (m.get(&q).copied(), p.get(&q).copied());
                let seen = |d: Option<dlq_operator::broker::QueueDepth>| {
                    d.map(|d| (d.messages, d.consumers))
                };
                if seen(md) == Some((1, Some(want))) && seen(pd) == Some((1, Some(want))) {
                    assert_eq!(
                        (after.0 - before.0, after.1 - before.1),
                        (1, 1),
                        "one request per vhost"
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "never counted {want} consumer(s): management {md:?}, prometheus {pd:?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    counted(0).await;
    let connection = lapin::Connection::connect(AMQP_URI, lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = connection.create_channel().await.expect("channel");
    // The message is delivered to it, unacknowledged: still counted in the depth.
    let consumer = channel
        .basic_consume(
            q.as_str().into(),
            "router".into(),
            lapin::options::BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    counted(1).await;
    // Not asked for: the cheap listing, which has no count (unknown, not 0).
    let d = mgmt
        .queue_depths_covering("/", &required)
        .await
        .expect("depths");
    assert_eq!(d.get(&q).map(|d| d.consumers), Some(None));
    let _ = connection.close(200, "bye".into()).await;
    drop(consumer);
    counted(0).await;
    raw.delete(&format!("queues/%2F/{q}")).await;
}

/// The operator needs no more than the `policymaker` tag plus permissions on the vhost:
/// an apply under such a user creates everything (no admin-only endpoint is called), and a
/// vhost it cannot use is reported NotFound by name.
#[tokio::test]
async fn a_policymaker_user_can_apply_and_a_missing_vhost_is_named() {
    let q = unique("policymaker");
    let raw = Raw::new();
    let user = format!("{q}-user");
    assert!(
        [201, 204].contains(
            &raw.put(
                &format!("users/{user}"),
                json!({"password": "pm-secret", "tags": "policymaker"})
            )
            .await
        ),
        "create user"
    );
    assert!([201, 204].contains(
        &raw.put(
            &format!("permissions/%2F/{user}"),
            json!({"configure": ".*", "write": ".*", "read": ".*"})
        )
        .await
    ));
    let conn = BrokerConnection::from_secret_data(
        "rabbitmq",
        &secret(&[
            (
                "uri",
                &format!("amqp://{user}:pm-secret@127.0.0.1:5672/%2f"),
            ),
            ("managementUri", MGMT_URI),
        ]),
    )
    .expect("valid secret");
    let broker = RabbitMq::new(&conn).expect("client");
    let result = broker.apply(&topo(&q, &["1s"])).await;
    let missing = broker
        .ensure_vhost("no-such-vhost-dlq-test")
        .await
        .expect_err("missing vhost");
    raw.delete(&format!("users/{user}")).await;
    let report = result.expect("apply as policymaker");
    assert!(report.is_ready(), "{report}");
    assert!(
        matches!(&missing, BrokerError::NotFound { what } if what.contains("no-such-vhost-dlq-test")),
        "{missing:?}"
    );
    raw.cleanup(&q).await;
}

/// A plan of `owner` on source `queue` with `extra` spec fields and one 1 s tier.
fn topo_of(owner: &str, queue: &str, extra: Value) -> DesiredTopology {
    plan(owner, &spec(queue, extra), &resolved(&["1s"]))
}

#[tokio::test]
async fn a_second_owner_is_refused_by_the_record_on_the_broker_and_writes_nothing() {
    let q = unique("owned");
    let raw = Raw::new();
    let a = topo_of("team/a", &q, json!({}));
    RabbitMq::new(&conn())
        .expect("client")
        .apply(&a)
        .await
        .expect("apply a");
    let dlq_policy = format!("dlq-operator.{q}.dlq");
    let before = raw.policy(&dlq_policy).await;

    // Another resource, from another client (another `apply` run, another driver), on
    // the same source queue and with a dead-letter queue that drops dead letters.
    let dropping = json!({"deadLetter": {"maxLength": 3, "overflow": "DropHead"}});
    for (b, field, role) in [
        (
            topo_of("team/b", &q, dropping.clone()),
            "spec.source.queue",
            "its source queue",
        ),
        // Its source queue is a's dead-letter queue.
        (
            topo_of("team/b", &format!("{q}.dlq"), dropping.clone()),
            "spec.source.queue",
            "its dead-letter queue",
        ),
        // Its dead-letter exchange is a's.
        (
            topo_of(
                "team/b",
                &format!("{q}-other"),
                json!({"deadLetter": {"exchange": format!("{q}.dlx")}}),
            ),
            "spec.deadLetter.exchange",
            "its dead-letter exchange",
        ),
    ] {
        let broker = RabbitMq::new(&conn()).expect("client");
        match broker.apply(&b).await {
            Err(BrokerError::NameOwned { field: f, message }) => {
                assert_eq!(f, field, "{message}");
                assert!(message.contains("DeadLetterQueue team/a"), "{message}");
                assert!(message.contains(role), "{message}");
                assert!(
                    message.contains("release the names with `")
                        && message.contains("clear_global_parameter"),
                    "{message}"
                );
            }
            other => panic!("expected NameOwned, got {other:?}"),
        }
        assert_eq!(
            broker.request_counts().writes,
            0,
            "a refused apply writes nothing"
        );
    }
    assert_eq!(
        raw.policy(&dlq_policy).await["definition"],
        before["definition"]
    );
    assert!(
        !raw.names("queues/%2F?columns=name")
            .await
            .contains(&format!("{q}-other")),
        "nothing of the refused resource was declared"
    );

    // The owner itself, from a new client, is in place.
    let again = RabbitMq::new(&conn()).expect("client");
    let report = again.apply(&a).await.expect("apply a again");
    assert!(report.is_ready(), "{report}");
    assert_eq!(again.request_counts().writes, 0, "{report}");
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn names_without_a_record_are_recorded_by_their_first_apply() {
    // Topology made before ownership records existed: the next apply of its owner
    // records it, writes nothing else, and from then on another owner is refused.
    let q = unique("legacy");
    let raw = Raw::new();
    let a = topo_of("team/a", &q, json!({}));
    let broker = RabbitMq::new(&conn()).expect("client");
    broker.apply(&a).await.expect("apply");
    raw.cleanup_records(&q).await;
    assert!(raw.owner_record("queue", &q).await.is_none());

    let broker = RabbitMq::new(&conn()).expect("client");
    let report = broker.apply(&a).await.expect("apply after the upgrade");
    let names = a.queues.len() + a.exchanges.len();
    assert_eq!(
        report.actions[0].to_string(),
        format!("ownership records for {names} names: created")
    );
    assert_eq!(broker.request_counts().writes, names as u64, "{report}");
    assert_eq!(
        raw.owner_record("queue", &q)
            .await
            .map(|r| r["owner"].clone()),
        Some(json!("team/a"))
    );
    let b = topo_of("team/b", &q, json!({}));
    assert!(matches!(
        RabbitMq::new(&conn()).expect("client").apply(&b).await,
        Err(BrokerError::NameOwned { .. })
    ));
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn renaming_the_dead_letter_queue_unbinds_the_old_one_and_keeps_its_dead_letters() {
    let q = unique("rename");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let dlx = format!("{q}.dlx");
    let old = format!("{q}.dlq");
    let new = format!("{q}.dead");
    broker
        .apply(&topo_of("team/a", &q, json!({})))
        .await
        .expect("apply");
    // Two dead letters, as RabbitMQ dead-letters them: to the exchange with key q.
    publish_to(&dlx, &q, b"one").await;
    publish_to(&dlx, &q, b"two").await;
    assert_eq!(ready_count(&old).await, Some(2));

    let renamed = topo_of("team/a", &q, json!({"deadLetter": {"queue": new}}));
    let report = broker.apply(&renamed).await.expect("apply the rename");
    assert!(report.is_ready(), "{report}");
    assert_eq!(
        report
            .find(ObjectKind::Binding, &format!("{dlx} -> {old} [{q}]"))
            .map(|a| &a.outcome),
        Some(&Outcome::Deleted),
        "{report}"
    );
    match report.find(ObjectKind::Queue, &old).map(|a| &a.outcome) {
        Some(Outcome::Retired(reason)) => {
            assert!(reason.contains("2 dead letters left"), "{reason}");
            assert!(reason.contains(&format!("move them to {new}")), "{reason}");
        }
        other => panic!("expected retired, got {other:?}"),
    }
    // A new dead letter is stored once, in the new queue; the old ones stay.
    publish_to(&dlx, &q, b"three").await;
    assert_eq!(ready_count(&new).await, Some(1));
    assert_eq!(ready_count(&old).await, Some(2));
    // Still reported by later applies (the dead-letter exchange's record lists it), and
    // still under its policy (retention).
    let report = broker.apply(&renamed).await.expect("apply again");
    assert!(matches!(
        report.find(ObjectKind::Queue, &old).map(|a| &a.outcome),
        Some(Outcome::Retired(_))
    ));
    raw.policy(&format!("dlq-operator.{old}")).await;
    let record = raw
        .owner_record("exchange", &dlx)
        .await
        .expect("dlx record");
    assert_eq!(record["retired"], json!([old]));
    assert_eq!(
        raw.owner_record("queue", &old)
            .await
            .map(|r| r["role"].clone()),
        Some(json!("retired dead-letter queue"))
    );

    // A quorum queue is never deleted by the operator, even empty: once a person
    // deletes it, the next apply removes its policy and records and forgets it.
    assert_eq!(raw.delete(&format!("queues/%2F/{old}/contents")).await, 204);
    let report = broker.apply(&renamed).await.expect("apply after draining");
    match report.find(ObjectKind::Queue, &old).map(|a| &a.outcome) {
        Some(Outcome::Retired(reason)) => {
            assert!(reason.contains("rabbitmqctl delete_queue"), "{reason}")
        }
        other => panic!("expected retired, got {other:?}"),
    }
    assert_eq!(raw.delete(&format!("queues/%2F/{old}")).await, 204);
    let report = broker
        .apply(&renamed)
        .await
        .expect("apply after the deletion");
    assert_eq!(
        report
            .find(ObjectKind::Policy, &format!("dlq-operator.{old}"))
            .map(|a| &a.outcome),
        Some(&Outcome::Deleted),
        "{report}"
    );
    assert!(raw.owner_record("queue", &old).await.is_none());
    assert!(raw
        .owner_record("exchange", &dlx)
        .await
        .is_some_and(|r| r.get("retired").is_none()));
    let before = broker.request_counts().writes;
    let report = broker.apply(&renamed).await.expect("steady state");
    assert!(report.find(ObjectKind::Queue, &old).is_none(), "{report}");
    assert_eq!(broker.request_counts().writes, before, "{report}");
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn a_retired_classic_dead_letter_queue_is_deleted_once_empty_and_removed_with_the_rest() {
    let q = unique("retire");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let classic = |extra: Value| {
        let mut v = json!({"source": {"queue": q, "queueType": "Classic"}});
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        topo_of("team/a", &q, v)
    };
    let old = format!("{q}.dlq");
    broker.apply(&classic(json!({}))).await.expect("apply");
    publish_to(&format!("{q}.dlx"), &q, b"kept").await;
    let renamed = classic(json!({"deadLetter": {"queue": format!("{q}.dead")}}));
    broker.apply(&renamed).await.expect("apply the rename");

    // A removal waits for the retired queue too.
    let removal = broker.remove(&renamed).await.expect("remove");
    assert!(!removal.is_complete());
    assert!(
        removal.blocked.iter().any(|b| b.contains(&old)),
        "{:?}",
        removal.blocked
    );
    assert_eq!(ready_count(&old).await, Some(1));

    // Emptied, it is deleted by the next apply (statistics lag: retry a while).
    assert_eq!(raw.delete(&format!("queues/%2F/{old}/contents")).await, 204);
    apply_until_deleted(&broker, &renamed, &old).await;
    assert!(ready_count(&old).await.is_none());
    assert!(raw.owner_record("queue", &old).await.is_none());

    // A complete removal releases every ownership record of the resource.
    let removal = broker.remove(&renamed).await.expect("remove");
    assert!(removal.is_complete(), "{:?}", removal.blocked);
    for x in &renamed.exchanges {
        assert!(
            raw.owner_record("exchange", &x.name).await.is_none(),
            "{}",
            x.name
        );
    }
    for queue in &renamed.queues {
        assert!(
            raw.owner_record("queue", &queue.name).await.is_none(),
            "{}",
            queue.name
        );
    }
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn apply_checks_the_amqp_uri_and_names_it_when_it_does_not_connect() {
    // The management API is fine; only the AMQP address is wrong. Without the check the
    // apply said ready and the error came later, from `dlq inspect` or a consumer.
    let q = unique("amqpcheck");
    let raw = Raw::new();
    for uri in [
        "amqp://guest:guest@127.0.0.1:5999/%2f",
        "amqp://guest:guest@127.0.0.2:5999/%2f",
    ] {
        let bad = BrokerConnection::from_secret_data(
            "rabbitmq",
            &secret(&[("uri", uri), ("managementUri", MGMT_URI)]),
        )
        .expect("secret");
        let broker = RabbitMq::new(&bad).expect("client");
        match broker.apply(&topo(&q, &["1s"])).await {
            Err(e @ BrokerError::Unreachable { .. }) => {
                let text = e.to_string();
                assert!(text.contains(":5999"), "{text}");
                assert!(text.contains("Secret's `uri` key"), "{text}");
                assert!(!text.contains("guest:guest"), "{text}");
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
        assert_eq!(broker.request_counts().writes, 0, "nothing written");
    }
    assert!(!raw
        .names("queues/%2F?columns=name")
        .await
        .iter()
        .any(|n| n.starts_with(&q)));
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn an_obsolete_tier_another_owner_still_records_is_left_alone() {
    // Names released only in part: a takes over b's source queue, dead-letter queue,
    // exchanges and 1 s tier, but b's record of its 2 s tier stays. That tier is obsolete
    // for a's plan (one tier), yet not a's to unbind or delete.
    let q = unique("partial");
    let raw = Raw::new();
    let b = plan("team/b", &spec(&q, json!({})), &resolved(&["1s", "2s"]));
    RabbitMq::new(&conn())
        .expect("client")
        .apply(&b)
        .await
        .expect("apply b");
    let old = format!("{q}.retry.2s");
    for (kind, name) in b
        .queues
        .iter()
        .map(|x| ("queue", x.name.clone()))
        .chain(b.exchanges.iter().map(|x| ("exchange", x.name.clone())))
        .filter(|(_, n)| *n != old)
    {
        raw.delete(&format!(
            "global-parameters/{}",
            ownership::record_name("/", kind, &name)
        ))
        .await;
    }
    let a = plan("team/a", &spec(&q, json!({})), &resolved(&["1s"]));
    let broker = RabbitMq::new(&conn()).expect("client");
    let report = broker.apply(&a).await.expect("apply a");
    match report.find(ObjectKind::Queue, &old).map(|x| &x.outcome) {
        Some(Outcome::Retained(reason)) => {
            assert!(reason.contains("DeadLetterQueue team/b"), "{reason}");
            assert!(reason.contains("clear_global_parameter"), "{reason}");
        }
        other => panic!("expected retained, got {other:?}: {report}"),
    }
    assert!(
        !report.actions.iter().any(|x| x.kind == ObjectKind::Binding
            && x.name.contains(&old)
            && x.outcome == Outcome::Deleted),
        "{report}"
    );
    let (_, bindings) = raw.get(&format!("queues/%2F/{old}/bindings")).await;
    assert!(
        bindings
            .as_array()
            .expect("bindings")
            .iter()
            .any(|x| x["source"] == json!(format!("{q}.retry"))),
        "b's tier keeps its binding"
    );
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn the_source_queue_is_never_pointed_at_a_dead_letter_route_in_conflict() {
    // The break test's data loss: a dead-letter queue (or exchange) in conflict was
    // reported, but the source queue's policy was written all the same, pointing it at an
    // exchange bound to nothing (every dead letter dropped) or at someone else's fanout.
    let raw = Raw::new();
    let q = unique("route");
    assert_eq!(
        raw.put(
            &format!("queues/%2F/{q}.dlq"),
            json!({"durable": true, "arguments": {"x-queue-type": "classic"}}),
        )
        .await,
        201
    );
    let fan = format!("{q}-fan");
    assert_eq!(
        raw.put(
            &format!("exchanges/%2F/{fan}"),
            json!({"type": "fanout", "durable": true})
        )
        .await,
        201
    );
    for plan in [
        topo_of("team/a", &q, json!({})),
        topo_of(
            "team/a",
            &format!("{q}-x"),
            json!({"deadLetter": {"exchange": fan}}),
        ),
    ] {
        let source = plan.routes.source_queue.clone();
        let report = RabbitMq::new(&conn())
            .expect("client")
            .apply(&plan)
            .await
            .expect("apply");
        assert!(!report.is_ready(), "{report}");
        match report
            .find(ObjectKind::Policy, &format!("dlq-operator.{source}"))
            .map(|a| &a.outcome)
        {
            Some(Outcome::Conflict(reason)) => {
                assert!(reason.contains("would drop its dead letters"), "{reason}")
            }
            other => panic!("expected the source policy refused, got {other:?}: {report}"),
        }
        let (status, _) = raw
            .get(&format!("policies/%2F/dlq-operator.{source}"))
            .await;
        assert_eq!(status, 404, "source policy written: {report}");
    }
    // The foreign exchange is not recorded as the resource's.
    assert!(raw.owner_record("exchange", &fan).await.is_none());
    assert!(raw
        .owner_record("queue", &format!("{q}.dlq"))
        .await
        .is_none());
    raw.delete(&format!("exchanges/%2F/{fan}")).await;
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn a_source_exchange_another_resource_manages_is_refused() {
    // Binding b's source queue to a's dead-letter exchange (with a's routing key) would
    // deliver every dead letter of a to b's consumers.
    let raw = Raw::new();
    let q = unique("srcx");
    let a = topo_of("team/a", &q, json!({}));
    RabbitMq::new(&conn())
        .expect("client")
        .apply(&a)
        .await
        .expect("apply a");
    let other = format!("{q}-b");
    let b = topo_of(
        "team/b",
        &other,
        json!({"source": {"queue": other, "exchange": format!("{q}.dlx"), "routingKey": q}}),
    );
    let broker = RabbitMq::new(&conn()).expect("client");
    match broker.apply(&b).await {
        Err(BrokerError::NameOwned { field, message }) => {
            assert_eq!(field, "spec.source.exchange", "{message}");
            assert!(
                message.contains("DeadLetterQueue team/a's dead-letter exchange"),
                "{message}"
            );
        }
        other => panic!("expected NameOwned, got {other:?}"),
    }
    assert_eq!(broker.request_counts().writes, 0);
    let (_, bindings) = raw
        .get(&format!("exchanges/%2F/{q}.dlx/bindings/source"))
        .await;
    assert!(
        !bindings
            .as_array()
            .expect("bindings")
            .iter()
            .any(|x| x["destination"] == json!(other)),
        "no binding to b's source queue"
    );
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn a_retired_list_naming_another_resources_queue_touches_nothing() {
    // The dead-letter exchange's record lists b's (empty, classic) dead-letter queue as
    // retired, edited by hand: a's apply must neither delete that queue nor its policy or
    // record, only forget the entry.
    let raw = Raw::new();
    let q = unique("retlist");
    let classic = |owner: &str, queue: &str| {
        topo_of(
            owner,
            queue,
            json!({"source": {"queue": queue, "queueType": "Classic"}}),
        )
    };
    let a = classic("team/a", &q);
    let b_queue = format!("{q}-b");
    let b = classic("team/b", &b_queue);
    let broker = RabbitMq::new(&conn()).expect("client");
    broker.apply(&a).await.expect("apply a");
    broker.apply(&b).await.expect("apply b");
    let victim = format!("{b_queue}.dlq");
    let mut dlx = raw
        .owner_record("exchange", &format!("{q}.dlx"))
        .await
        .expect("a's dead-letter exchange record");
    dlx["retired"] = json!([victim]);
    assert_eq!(
        raw.put(
            &format!(
                "global-parameters/{}",
                ownership::record_name("/", "exchange", &format!("{q}.dlx"))
            ),
            json!({"value": dlx}),
        )
        .await,
        204
    );
    let report = broker.apply(&a).await.expect("apply a again");
    assert!(
        report.find(ObjectKind::Queue, &victim).is_none(),
        "{report}"
    );
    assert!(
        ready_count(&victim).await.is_some(),
        "b's dead-letter queue kept"
    );
    raw.policy(&format!("dlq-operator.{victim}")).await;
    assert_eq!(
        raw.owner_record("queue", &victim)
            .await
            .map(|r| r["owner"].clone()),
        Some(json!("team/b"))
    );
    assert!(raw
        .owner_record("exchange", &format!("{q}.dlx"))
        .await
        .is_some_and(|r| r.get("retired").is_none()));
    raw.cleanup(&q).await;
}

#[tokio::test]
async fn dead_letter_queues_carry_no_default_delivery_limit_on_rabbitmq_4() {
    // Differs by version: RabbitMQ 4.0-4.2 give a quorum queue with no delivery limit one
    // of 20, which made `dlq replay` read every dead-letter queue one message at a time;
    // the operator's dead-letter queue policy sets `delivery-limit: -1` (none) there. 3.x
    // has no default, and reads a negative limit as 0 (its policy validation refuses one):
    // nothing is added.
    let q = unique("nolimit");
    let raw = Raw::new();
    let broker = RabbitMq::new(&conn()).expect("client");
    let plan = topo(&q, &["1s"]);
    let report = broker.apply(&plan).await.expect("apply");
    assert!(report.is_ready(), "{report}");
    let version = broker.broker_version().await.expect("version");
    let four = version.starts_with('4');
    let dlq = format!("{q}.dlq");
    let definition = raw.policy(&format!("dlq-operator.{dlq}")).await["definition"].clone();
    if four {
        assert_eq!(
            definition["delivery-limit"],
            json!(-1),
            "{version}: {definition}"
        );
    } else {
        assert!(
            definition.get("delivery-limit").is_none(),
            "{version}: {definition}"
        );
    }
    // Read as unlimited on both (3.x: no default), so replay takes its fast path.
    let limits = broker.queue_limits("/", &dlq).await.expect("limits");
    assert_eq!(limits.delivery_limit, None, "{version}: {limits:?}");
    // Proven on the broker: 25 returns of a dead letter (past 4.0's default of 20) leave
    // it where it is.
    publish(&dlq, b"kept").await;
    let c = amqp::connect(&conn()).await.expect("amqp");
    let ch = c.create_channel().await.expect("channel");
    for i in 0..25 {
        let mut got = None;
        for _ in 0..100 {
            got = ch
                .basic_get(dlq.as_str().into(), Default::default())
                .await
                .expect("get");
            if got.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let m =
            got.unwrap_or_else(|| panic!("{version}: the dead letter is gone after {i} returns"));
        m.delivery
            .nack(lapin::options::BasicNackOptions {
                requeue: true,
                ..Default::default()
            })
            .await
            .expect("nack");
    }
    c.close(200, "bye".into()).await.ok();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ready_count(&dlq).await, Some(1), "{version}");
    raw.cleanup(&q).await;
}
