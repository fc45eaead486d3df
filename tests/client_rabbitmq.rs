//! The consumer helper against a real RabbitMQ (docs/ARCHITECTURE.md, "Message header contract"; docs/DEVELOPMENT.md, "Testing").
//!
//! Needs RabbitMQ at `DLQ_AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`);
//! fails (never silently passes) when it is unreachable. Every test declares its own
//! topology under a random name and deletes it at the end, also when it fails.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq_operator::backoff::{DeadLetterReason, ResolvedPolicy};
use dlq_operator::client::headers::{
    ERROR_CLASS, FIRST_FAILED_AT, LAST_DELAY_MS, LAST_ERROR, LAST_FAILED_AT, ORIGINAL_EXCHANGE,
    ORIGINAL_QUEUE, ORIGINAL_ROUTING_KEY, REASON, RETRY_COUNT,
};
use dlq_operator::client::{ClientError, Outcome, RetryHandler};
use dlq_operator::crd::{DeadLetterQueueSpec, ErrorClass, RetryPolicySpec};
use dlq_operator::topology::{plan, DesiredTopology, QueueRole};
use futures::FutureExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const BODY: &[u8] = b"{\"order\":42}\xff\x00 raw bytes";

fn amqp_url() -> String {
    std::env::var("DLQ_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

fn to_amqp(v: &Value) -> AMQPValue {
    match v {
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        other => AMQPValue::LongString(LongString::from(other.to_string())),
    }
}

fn table(args: &BTreeMap<String, Value>) -> FieldTable {
    let map: BTreeMap<ShortString, AMQPValue> = args
        .iter()
        .map(|(k, v)| (ShortString::from(k.as_str()), to_amqp(v)))
        .collect();
    FieldTable::from(map)
}

struct Fixture {
    _conn: Connection,
    /// Declares, publishes test input, reads queues.
    ch: Channel,
    topo: DesiredTopology,
    policy: ResolvedPolicy,
    extra_queues: Vec<String>,
}

impl Fixture {
    fn source(&self) -> &str {
        &self.topo.routes.source_queue
    }

    fn dlq(&self) -> String {
        self.topo
            .queues
            .iter()
            .find(|q| q.role == QueueRole::DeadLetter { class: None })
            .map(|q| q.name.clone())
            .expect("plan has a dead-letter queue")
    }

    async fn handler(&self) -> RetryHandler {
        let ch = self._conn.create_channel().await.expect("channel");
        RetryHandler::new(ch, self.topo.routes.clone(), self.policy.clone())
            .await
            .expect("handler")
            .with_rng(StdRng::seed_from_u64(7))
    }

    async fn publish(&self, message_id: &str) {
        let mut h = BTreeMap::new();
        h.insert(
            ShortString::from("tenant"),
            AMQPValue::LongString(LongString::from("acme")),
        );
        let props = BasicProperties::default()
            .with_message_id(message_id.into())
            .with_correlation_id("corr-1".into())
            .with_content_type("application/json".into())
            .with_headers(FieldTable::from(h));
        let confirm = self
            .ch
            .basic_publish(
                "".into(),
                self.source().into(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                BODY,
                props,
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack(), "test input not confirmed: {confirm:?}");
    }

    /// First message of `queue` within `timeout` (not acked).
    async fn get(&self, queue: &str, timeout: Duration) -> Option<Delivery> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self
                .ch
                .basic_get(queue.into(), BasicGetOptions { no_ack: false })
                .await
                .expect("basic.get");
            if let Some(m) = got {
                return Some(m.delivery);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn depth(&self, queue: &str) -> u32 {
        self.ch
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("passive declare")
            .message_count()
    }
}

/// Shallow-merges `extra` into the object `base`.
fn merged(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// Options of a test topology beyond the queue type.
#[derive(Clone, Default)]
struct Extra {
    /// Merged into the RetryPolicy spec.
    retry_policy: Option<Value>,
    /// Merged into the DeadLetterQueue spec's `deadLetter`.
    dead_letter: Option<Value>,
}

async fn setup(queue_type: &str, max_retries: u32, extra: Extra) -> Fixture {
    let suffix: u32 = rand::rng().random();
    let queue = format!("dlq-client-it-{}-{suffix:08x}", queue_type.to_lowercase());
    let dlq_spec: DeadLetterQueueSpec = serde_json::from_value(json!({
        "broker": {"secretRef": {"name": "rabbitmq"}},
        "source": {"queue": queue, "queueType": queue_type},
        "retryPolicyRef": {"name": "rp"},
        "deadLetter": extra.dead_letter.unwrap_or_else(|| json!({})),
    }))
    .expect("DeadLetterQueue spec");
    dlq_spec.validate().expect("valid DeadLetterQueue spec");
    let rp_spec: RetryPolicySpec = serde_json::from_value(merged(
        json!({
            "maxRetries": max_retries,
            "backoff": {"strategy": "Exponential", "initialDelay": "200ms", "multiplier": 2, "maxDelay": "400ms"},
        }),
        extra.retry_policy.unwrap_or_else(|| json!({})),
    ))
    .expect("RetryPolicy spec");
    let policy = ResolvedPolicy::from_spec(&rp_spec).expect("valid RetryPolicy spec");
    assert_eq!(policy.tiers_ms, vec![200, 400]);
    let topo = plan("test/client", &dlq_spec, &policy);

    let conn = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ at {} is required: {e}", amqp_url()));
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");

    for x in &topo.exchanges {
        ch.exchange_declare(
            x.name.as_str().into(),
            ExchangeKind::Custom(x.kind.as_str().to_string()),
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("exchange.declare");
    }
    for q in &topo.queues {
        let mut args = q.declare_arguments();
        if q.role == QueueRole::Source {
            // Policies cannot be set over AMQP: pass the source policy's keys as x- args.
            let policy = topo
                .policies
                .iter()
                .find(|p| p.queue == q.name)
                .expect("source policy");
            for (k, v) in &policy.definition {
                args.insert(format!("x-{k}"), v.clone());
            }
        }
        ch.queue_declare(
            q.name.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            table(&args),
        )
        .await
        .unwrap_or_else(|e| panic!("queue.declare {}: {e}", q.name));
    }
    for b in &topo.bindings {
        ch.queue_bind(
            b.queue.as_str().into(),
            b.exchange.as_str().into(),
            b.routing_key.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("queue.bind");
    }
    Fixture {
        _conn: conn,
        ch,
        topo,
        policy,
        extra_queues: Vec::new(),
    }
}

async fn teardown(fx: &Fixture) {
    // A failed test may have closed the fixture channel: use a fresh one.
    let Ok(ch) = fx._conn.create_channel().await else {
        return;
    };
    for q in fx
        .topo
        .queues
        .iter()
        .map(|q| &q.name)
        .chain(&fx.extra_queues)
    {
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    for x in &fx.topo.exchanges {
        let _ = ch
            .exchange_delete(x.name.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
}

/// Runs `scenario` against a fresh topology and always cleans up.
async fn with_topology<F>(queue_type: &str, max_retries: u32, scenario: F)
where
    F: for<'a> FnOnce(&'a mut Fixture) -> futures::future::BoxFuture<'a, ()>,
{
    with_topology_extra(queue_type, max_retries, Extra::default(), scenario).await;
}

async fn with_topology_extra<F>(queue_type: &str, max_retries: u32, extra: Extra, scenario: F)
where
    F: for<'a> FnOnce(&'a mut Fixture) -> futures::future::BoxFuture<'a, ()>,
{
    let mut fx = setup(queue_type, max_retries, extra).await;
    let result = AssertUnwindSafe(scenario(&mut fx)).catch_unwind().await;
    teardown(&fx).await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn header<'a>(d: &'a Delivery, name: &str) -> Option<&'a AMQPValue> {
    d.properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(name))
}

fn text(d: &Delivery, name: &str) -> Option<String> {
    match header(d, name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        _ => None,
    }
}

fn num(d: &Delivery, name: &str) -> Option<i64> {
    match header(d, name)? {
        AMQPValue::LongLongInt(n) => Some(*n),
        _ => None,
    }
}

fn assert_same_message(d: &Delivery, message_id: &str) {
    assert_eq!(d.data, BODY, "body must be untouched");
    assert_eq!(
        d.properties.message_id().as_ref().map(|s| s.as_str()),
        Some(message_id)
    );
    assert_eq!(
        d.properties.correlation_id().as_ref().map(|s| s.as_str()),
        Some("corr-1")
    );
    assert_eq!(
        d.properties.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(text(d, "tenant").as_deref(), Some("acme"));
}

const WAIT: Duration = Duration::from_secs(10);

async fn retries_then_dead_letters(fx: &mut Fixture) {
    let handler = fx.handler().await;
    let q = fx.source().to_string();
    fx.publish("msg-retry").await;

    let mut d = fx.get(&q, WAIT).await.expect("input message");
    let mut first_failed_at = None;
    for (attempt, tier, delay) in [(1u32, "200ms", 200u64), (2, "400ms", 400)] {
        let started = Instant::now();
        let outcome = handler
            .handle_failure(&d, ErrorClass::Timeout, "billing call timed out")
            .await
            .expect("retry published");
        assert_eq!(
            outcome,
            Outcome::Retried {
                attempt,
                tier: tier.to_string(),
                delay_ms: delay
            }
        );
        // The original was acked: the source queue is empty while the copy waits.
        assert_eq!(fx.depth(&q).await, 0);
        d = fx.get(&q, WAIT).await.expect("message back from its tier");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(delay),
            "came back after {waited:?}, tier is {delay} ms"
        );
        assert_same_message(&d, "msg-retry");
        assert_eq!(num(&d, RETRY_COUNT), Some(i64::from(attempt)));
        assert_eq!(num(&d, LAST_DELAY_MS), Some(delay as i64));
        assert_eq!(text(&d, ERROR_CLASS).as_deref(), Some("Timeout"));
        assert_eq!(
            text(&d, LAST_ERROR).as_deref(),
            Some("billing call timed out")
        );
        assert_eq!(text(&d, ORIGINAL_EXCHANGE).as_deref(), Some(""));
        assert_eq!(text(&d, ORIGINAL_ROUTING_KEY).as_deref(), Some(q.as_str()));
        assert_eq!(text(&d, ORIGINAL_QUEUE).as_deref(), Some(q.as_str()));
        assert_eq!(header(&d, REASON), None);
        assert_eq!(*d.properties.delivery_mode(), Some(2));
        let first = num(&d, FIRST_FAILED_AT).expect("first-failed-at");
        let last = num(&d, LAST_FAILED_AT).expect("last-failed-at");
        assert!(first <= last);
        // Set on the first failure, preserved afterwards.
        assert_eq!(*first_failed_at.get_or_insert(first), first);
    }

    // maxRetries (2) reached: dead-lettered.
    let outcome = handler
        .handle_failure(&d, ErrorClass::Timeout, "still timing out")
        .await
        .expect("dead letter published");
    assert_eq!(
        outcome,
        Outcome::DeadLettered {
            reason: DeadLetterReason::MaxRetriesExceeded
        }
    );
    let dead = fx.get(&fx.dlq(), WAIT).await.expect("dead letter");
    assert_same_message(&dead, "msg-retry");
    assert_eq!(text(&dead, REASON).as_deref(), Some("MaxRetriesExceeded"));
    assert_eq!(num(&dead, RETRY_COUNT), Some(2));
    assert_eq!(text(&dead, LAST_ERROR).as_deref(), Some("still timing out"));
    assert_eq!(num(&dead, FIRST_FAILED_AT), first_failed_at);
    assert_eq!(text(&dead, ORIGINAL_QUEUE).as_deref(), Some(q.as_str()));
    dead.ack(BasicAckOptions::default()).await.expect("ack");
    assert_eq!(fx.depth(&q).await, 0);
}

/// With an injected clock: the second failure is 400 ms after the first, and another
/// 400 ms tier would end past the 500 ms window.
async fn retry_window_is_enforced_with_an_injected_clock(fx: &mut Fixture) {
    let now = Arc::new(AtomicU64::new(1_000_000));
    let clock = {
        let now = Arc::clone(&now);
        move || now.load(Ordering::SeqCst)
    };
    let handler = fx.handler().await.with_clock(clock);
    let q = fx.source().to_string();
    fx.publish("msg-window").await;
    let d = fx.get(&q, WAIT).await.expect("input message");
    let outcome = handler
        .handle_failure(&d, ErrorClass::Overload, "busy")
        .await
        .expect("retry published");
    assert!(matches!(outcome, Outcome::Retried { attempt: 1, .. }));
    let d = fx.get(&q, WAIT).await.expect("back from the tier");
    assert_eq!(num(&d, FIRST_FAILED_AT), Some(1_000_000));
    assert_eq!(num(&d, LAST_FAILED_AT), Some(1_000_000));

    now.store(1_000_400, Ordering::SeqCst);
    let outcome = handler
        .handle_failure(&d, ErrorClass::Overload, "still busy")
        .await
        .expect("dead letter published");
    assert_eq!(
        outcome,
        Outcome::DeadLettered {
            reason: DeadLetterReason::RetryWindowExceeded
        }
    );
    // partitionBy: ErrorClass → the class's own dead-letter queue.
    let partition = format!("{}.overload", fx.dlq());
    let dead = fx
        .get(&partition, WAIT)
        .await
        .expect("partitioned dead letter");
    assert_same_message(&dead, "msg-window");
    assert_eq!(text(&dead, REASON).as_deref(), Some("RetryWindowExceeded"));
    assert_eq!(num(&dead, RETRY_COUNT), Some(1));
    assert_eq!(num(&dead, FIRST_FAILED_AT), Some(1_000_000));
    assert_eq!(num(&dead, LAST_FAILED_AT), Some(1_000_400));
    dead.ack(BasicAckOptions::default()).await.expect("ack");
    assert_eq!(fx.depth(&fx.dlq()).await, 0);
    assert_eq!(fx.depth(&q).await, 0);
}

async fn poison_goes_straight_to_the_dlq(fx: &mut Fixture) {
    let handler = fx.handler().await;
    let q = fx.source().to_string();
    fx.publish("msg-poison").await;
    let d = fx.get(&q, WAIT).await.expect("input message");
    let outcome = handler
        .handle_failure(&d, ErrorClass::Poison, "consumer panicked")
        .await
        .expect("dead letter published");
    assert_eq!(
        outcome,
        Outcome::DeadLettered {
            reason: DeadLetterReason::NonRetryable
        }
    );
    let dead = fx.get(&fx.dlq(), WAIT).await.expect("dead letter");
    assert_same_message(&dead, "msg-poison");
    assert_eq!(text(&dead, REASON).as_deref(), Some("NonRetryable"));
    assert_eq!(num(&dead, RETRY_COUNT), Some(0));
    assert_eq!(text(&dead, ERROR_CLASS).as_deref(), Some("Poison"));
    assert_eq!(
        text(&dead, ORIGINAL_ROUTING_KEY).as_deref(),
        Some(q.as_str())
    );
    dead.ack(BasicAckOptions::default()).await.expect("ack");
    assert_eq!(fx.depth(&q).await, 0);
    for tier in &fx.topo.routes.tiers {
        assert_eq!(fx.depth(&tier.queue).await, 0);
    }
}

async fn unroutable_and_nacked_copies_keep_the_original(fx: &mut Fixture) {
    let handler = fx.handler().await;
    let q = fx.source().to_string();
    let retry_x = fx.topo.routes.retry_exchange.clone();
    let tier = fx.topo.routes.tiers[0].clone();
    fx.ch
        .queue_unbind(
            tier.queue.as_str().into(),
            retry_x.as_str().into(),
            tier.name.as_str().into(),
            FieldTable::default(),
        )
        .await
        .expect("unbind tier");

    fx.publish("msg-unroutable").await;
    let d = fx.get(&q, WAIT).await.expect("input message");
    let err = handler
        .handle_failure(&d, ErrorClass::Timeout, "timed out")
        .await
        .expect_err("unroutable copy must fail");
    match &err {
        ClientError::Unroutable {
            exchange,
            routing_key,
        } => {
            assert_eq!(exchange, &retry_x);
            assert_eq!(routing_key, &tier.name);
        }
        other => panic!("expected Unroutable, got {other:?}"),
    }
    assert_eq!(err.metric_label(), "unroutable");
    // Not acked: requeued and redelivered, unchanged.
    let again = fx.get(&q, WAIT).await.expect("original requeued");
    assert!(again.redelivered);
    assert_same_message(&again, "msg-unroutable");
    assert_eq!(header(&again, RETRY_COUNT), None);
    assert_eq!(fx.depth(&tier.queue).await, 0);

    // A queue that refuses the copy (full, reject-publish) makes the broker nack it.
    let full = format!("{q}.full");
    fx.extra_queues.push(full.clone());
    let mut args = BTreeMap::new();
    args.insert("x-queue-type".to_string(), json!("classic"));
    args.insert("x-max-length".to_string(), json!(0));
    args.insert("x-overflow".to_string(), json!("reject-publish"));
    fx.ch
        .queue_declare(
            full.as_str().into(),
            QueueDeclareOptions::default(),
            table(&args),
        )
        .await
        .expect("declare full queue");
    fx.ch
        .queue_bind(
            full.as_str().into(),
            retry_x.as_str().into(),
            tier.name.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind full queue");
    let err = handler
        .handle_failure(&again, ErrorClass::Timeout, "timed out")
        .await
        .expect_err("nacked copy must fail");
    assert!(
        matches!(err, ClientError::NotConfirmed { .. }),
        "expected NotConfirmed, got {err:?}"
    );
    let third = fx.get(&q, WAIT).await.expect("original requeued again");
    assert_same_message(&third, "msg-unroutable");
    assert_eq!(header(&third, RETRY_COUNT), None);
    assert_eq!(fx.depth(&full).await, 0);
    // Nothing lost: one copy, in the source queue; it is ours to settle.
    third.ack(BasicAckOptions::default()).await.expect("ack");
    assert_eq!(fx.depth(&q).await, 0);
    assert_eq!(fx.depth(&fx.dlq()).await, 0);
}

#[tokio::test]
async fn classic_retries_then_dead_letters() {
    with_topology("Classic", 2, |fx| retries_then_dead_letters(fx).boxed()).await;
}

#[tokio::test]
async fn quorum_retries_then_dead_letters() {
    with_topology("Quorum", 2, |fx| retries_then_dead_letters(fx).boxed()).await;
}

fn window_and_partitions() -> Extra {
    Extra {
        retry_policy: Some(json!({"maxRetryDuration": "500ms"})),
        dead_letter: Some(json!({"partitionBy": "ErrorClass"})),
    }
}

#[tokio::test]
async fn classic_retry_window_and_partitioned_dlq() {
    with_topology_extra("Classic", 5, window_and_partitions(), |fx| {
        retry_window_is_enforced_with_an_injected_clock(fx).boxed()
    })
    .await;
}

#[tokio::test]
async fn quorum_retry_window_and_partitioned_dlq() {
    with_topology_extra("Quorum", 5, window_and_partitions(), |fx| {
        retry_window_is_enforced_with_an_injected_clock(fx).boxed()
    })
    .await;
}

#[tokio::test]
async fn classic_poison_is_not_retried() {
    with_topology("Classic", 2, |fx| {
        poison_goes_straight_to_the_dlq(fx).boxed()
    })
    .await;
}

#[tokio::test]
async fn quorum_poison_is_not_retried() {
    with_topology("Quorum", 2, |fx| {
        poison_goes_straight_to_the_dlq(fx).boxed()
    })
    .await;
}

#[tokio::test]
async fn classic_unconfirmed_copy_keeps_the_original() {
    with_topology("Classic", 2, |fx| {
        unroutable_and_nacked_copies_keep_the_original(fx).boxed()
    })
    .await;
}

#[tokio::test]
async fn quorum_unconfirmed_copy_keeps_the_original() {
    with_topology("Quorum", 2, |fx| {
        unroutable_and_nacked_copies_keep_the_original(fx).boxed()
    })
    .await;
}
