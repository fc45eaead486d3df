//! The fake's rules, and the broker-neutral dead-letter logic ([`crate::dlq`]) run
//! against it: no broker needed.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::broker::message::{HeaderValue, Headers};
use crate::broker::{BrokerTopology, DeadLetterOps, DeleteOutcome, ObjectKind, Outcome};
use crate::client::headers::{ERROR_CLASS, LAST_FAILED_AT, ORIGINAL_QUEUE, RETRY_COUNT};
use crate::dlq::browse::{inspect_with, InspectOptions};
use crate::dlq::filter::Filter;
use crate::dlq::purge::{purge_with, PurgeReport};
use crate::dlq::replay::{
    replay_with, Outcome as ReplayOutcome, ReplayOptions, ReplayReport, Target,
};
use crate::dlq::{DeadLetter, REPLAY_COUNT, REPLAY_ID};
use crate::rabbitmq::ownership::{OwnerRecord, QUEUE};
use crate::topology::DesiredTopology;

const NOW: u64 = 1_700_000_000_000;
const HOUR: u64 = 3_600_000;

/// The plan of DeadLetterQueue `default/<source>` (one retry tier of 1 s).
fn plan(source: &str) -> DesiredTopology {
    plan_with(json!({"queue": source}), "1s")
}

/// The plan of DeadLetterQueue `default/<source>` for `spec.source` `source` with one
/// retry tier of `tier`.
fn plan_with(source: serde_json::Value, tier: &str) -> DesiredTopology {
    let name = source["queue"].as_str().unwrap_or_default().to_string();
    let spec: crate::crd::DeadLetterQueueSpec = serde_json::from_value(json!({
        "broker": {"secretRef": {"name": "s"}},
        "source": source,
        "retryPolicyRef": {"name": "p"},
    }))
    .expect("spec");
    let rp: crate::crd::RetryPolicySpec =
        serde_json::from_value(json!({"maxRetries": 1, "tiers": [tier]})).expect("policy");
    let policy = crate::backoff::ResolvedPolicy::from_spec(&rp).expect("resolved");
    crate::topology::plan(&format!("default/{name}"), &spec, &policy)
}

/// A dead letter of `source` with error class `class`, failed `age_ms` before [`NOW`].
fn letter(source: &str, class: &str, age_ms: u64, id: &str) -> Message {
    let headers: Headers = [
        (ERROR_CLASS, HeaderValue::text(class)),
        (ORIGINAL_QUEUE, HeaderValue::text(source)),
        (RETRY_COUNT, HeaderValue::I64(3)),
        (LAST_FAILED_AT, HeaderValue::I64((NOW - age_ms) as i64)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut m = Message::new(headers, id.as_bytes());
    m.properties.message_id = Some(id.to_string());
    m
}

/// An applied broker for `orders` with dead letters `letters` in `orders.dlq`.
async fn applied(letters: Vec<Message>) -> (FakeBroker, DesiredTopology) {
    let broker = FakeBroker::new();
    let t = plan("orders");
    let report = broker.apply(&t).await.expect("apply");
    assert!(report.is_ready(), "{report}");
    for m in letters {
        broker.publish("/", "", "orders.dlq", m);
    }
    (broker, t)
}

fn ids(broker: &FakeBroker, queue: &str) -> Vec<String> {
    broker
        .messages("/", queue)
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

fn options(filter: &[&str]) -> ReplayOptions {
    ReplayOptions {
        filter: Filter::parse(filter).expect("filter"),
        limit: None,
        rate: None,
        dry_run: false,
        target: Target::OriginalQueue,
        max_replays: 5,
        replay_id: "run-1".into(),
        max_in_flight: crate::dlq::replay::MAX_IN_FLIGHT,
        rewrite: None,
    }
}

const OPTS: InspectOptions = InspectOptions {
    max_messages: 100,
    sample_size: 2,
    preview_bytes: 64,
};

#[tokio::test]
async fn apply_declares_what_is_missing_and_a_second_apply_writes_nothing() {
    let (broker, t) = applied(Vec::new()).await;
    let v = broker.vhost("/").expect("vhost");
    for q in &t.queues {
        assert!(v.queues.contains_key(&q.name), "{} declared", q.name);
    }
    for x in &t.exchanges {
        assert!(v.exchanges.contains_key(&x.name), "{} declared", x.name);
    }
    assert_eq!(v.bindings.len(), t.bindings.len());
    assert!(
        broker.record("/", QUEUE, "orders.dlq").is_some(),
        "ownership recorded"
    );
    let again = broker.apply(&t).await.expect("apply");
    assert_eq!(again.writes(), 0, "{again}");
    assert!(
        again.actions.iter().all(|a| a.outcome == Outcome::InPlace),
        "{again}"
    );
}

#[tokio::test]
async fn apply_leaves_a_conflicting_queue_alone_and_refuses_another_owners_names() {
    let broker = FakeBroker::new();
    let t = plan("orders");
    broker.declare_queue("/", "orders.dlq", "classic", BTreeMap::new());
    let report = broker.apply(&t).await.expect("apply");
    let dlq = report
        .find(ObjectKind::Queue, "orders.dlq")
        .expect("dlq action");
    assert!(matches!(dlq.outcome, Outcome::Conflict(_)), "{report}");
    assert!(!report.is_ready());
    assert!(
        broker.record("/", QUEUE, "orders.dlq").is_none(),
        "not adopted"
    );
    assert_eq!(
        broker.queue("/", "orders.dlq").map(|q| q.kind),
        Some("classic".into())
    );

    let other = FakeBroker::new();
    other.put_record(OwnerRecord {
        owner: "default/payments".into(),
        vhost: "/".into(),
        kind: QUEUE.into(),
        name: "orders".into(),
        role: "source queue".into(),
        retired: Vec::new(),
    });
    match other.apply(&t).await {
        Err(BrokerError::NameOwned { field, message }) => {
            assert_eq!(field, "spec.source.queue");
            assert!(message.contains("default/payments"), "{message}");
        }
        r => panic!("{r:?}"),
    }
    assert!(
        other.vhost("/").expect("vhost").exchanges.is_empty(),
        "nothing written"
    );
    assert!(matches!(
        other.apply(&plan("x")).await,
        Ok(r) if r.is_ready()
    ));
    let missing = FakeBroker::new();
    let mut elsewhere = plan("orders");
    elsewhere.vhost = "nope".into();
    assert!(matches!(
        missing.apply(&elsewhere).await,
        Err(BrokerError::NotFound { .. })
    ));
}

#[tokio::test]
async fn an_obsolete_retry_tier_is_unbound_drained_then_deleted() {
    let broker = FakeBroker::new();
    let source = json!({"queue": "orders", "queueType": "Classic"});
    broker
        .apply(&plan_with(source.clone(), "1s"))
        .await
        .expect("apply");
    broker.publish(
        "/",
        "",
        "orders.retry.1s",
        Message::new(Headers::new(), b"r"),
    );
    let new = plan_with(source, "2s");
    let report = broker.apply(&new).await.expect("apply");
    let old = report
        .find(ObjectKind::Queue, "orders.retry.1s")
        .expect("old tier");
    assert!(
        matches!(&old.outcome, Outcome::Draining(why) if why.contains("1 message")),
        "{report}"
    );
    assert!(report.is_ready(), "draining does not block readiness");
    let v = broker.vhost("/").expect("vhost");
    assert!(
        !v.bindings.iter().any(|b| b.queue == "orders.retry.1s"),
        "unbound"
    );
    broker
        .lock()
        .queue_mut("/", "orders.retry.1s")
        .expect("tier")
        .messages
        .clear();
    let report = broker.apply(&new).await.expect("apply");
    let old = report
        .find(ObjectKind::Queue, "orders.retry.1s")
        .expect("old tier");
    assert_eq!(old.outcome, Outcome::Deleted);
    assert!(broker.queue("/", "orders.retry.1s").is_none());
    assert!(broker.queue("/", "orders.retry.2s").is_some());
}

#[tokio::test]
async fn remove_refuses_a_queue_with_messages_then_removes_everything_ours() {
    let (broker, t) = applied(vec![letter("orders", "timeout", HOUR, "a")]).await;
    let blocked = broker.remove(&t).await.expect("remove");
    assert!(!blocked.is_complete());
    assert!(
        blocked.blocked[0].contains("orders.dlq"),
        "{:?}",
        blocked.blocked
    );
    assert!(blocked.actions.is_empty());
    assert_eq!(ids(&broker, "orders.dlq"), ["a"], "nothing touched");

    let mut report = PurgeReport::default();
    let all = Filter::default();
    purge_with(
        &broker,
        &t,
        &all,
        false,
        NOW,
        &CancellationToken::new(),
        &mut report,
    )
    .await
    .expect("purge");
    broker.set_consumers("/", "orders", 1);
    let consumer = broker.remove(&t).await.expect("remove");
    assert!(
        consumer.blocked[0].contains("consumer"),
        "{:?}",
        consumer.blocked
    );
    broker.set_consumers("/", "orders", 0);
    let done = broker.remove(&t).await.expect("remove");
    assert!(done.is_complete(), "{:?}", done.blocked);
    let v = broker.vhost("/").expect("vhost");
    assert_eq!(
        v.queues.keys().collect::<Vec<_>>(),
        ["orders"],
        "the source queue stays"
    );
    assert!(v.exchanges.is_empty() && v.policies.is_empty());
    assert!(
        broker.record("/", QUEUE, "orders.dlq").is_none(),
        "names released"
    );
}

#[tokio::test]
async fn depths_deletion_and_injected_faults() {
    let (broker, _) = applied(vec![letter("orders", "timeout", HOUR, "a")]).await;
    let depths = broker.queue_depths("/").await.expect("depths");
    assert_eq!(depths["orders.dlq"].messages, 1);
    assert_eq!(depths["orders"].messages, 0);
    assert_eq!(
        broker.delete_queue_if_empty("/", "orders.dlq").await,
        Ok(DeleteOutcome::NotEmpty { messages: 1 })
    );
    assert_eq!(
        broker.delete_queue_if_empty("/", "orders").await,
        Ok(DeleteOutcome::Deleted)
    );
    assert_eq!(
        broker.delete_queue_if_empty("/", "orders").await,
        Ok(DeleteOutcome::Absent)
    );
    assert_eq!(broker.cluster_name().await.as_deref(), Ok("fake@localhost"));
    let counts = broker
        .passive_queue_counts("/", "orders.dlq")
        .await
        .expect("counts");
    assert_eq!(counts.map(|c| c.ready), Some(1));

    broker.set_fault(Some(Fault::Unreachable));
    let e = broker.queue_depths("/").await.expect_err("unreachable");
    assert!(e.is_transient(), "{e}");
    broker.set_fault(Some(Fault::AuthFailed));
    let e = inspect_with(
        &broker,
        &plan("orders"),
        OPTS,
        NOW,
        &CancellationToken::new(),
    )
    .await
    .expect_err("auth");
    assert_eq!(e.metric_label(), "auth_failed");
    broker.set_fault(None);
    assert_eq!(
        ids(&broker, "orders.dlq"),
        ["a"],
        "a failed call touches nothing"
    );
}

#[tokio::test]
async fn the_factory_hands_out_clients_of_one_broker() {
    let broker = FakeBroker::new();
    let data: BTreeMap<String, Vec<u8>> =
        [("uri", "amqp://h/%2f"), ("managementUri", "http://h:15672")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
    let conn = BrokerConnection::from_secret_data("s", &data).expect("conn");
    let factory: Arc<dyn BrokerFactory> = Arc::new(broker.clone());
    let client = factory.client(&conn).expect("client");
    client.apply(&plan("orders")).await.expect("apply");
    assert!(broker.queue("/", "orders.dlq").is_some(), "the same state");
    assert!(client.request_counts().writes > 0);
}

#[tokio::test]
async fn inspection_counts_and_gives_every_message_back_in_order() {
    let letters = vec![
        letter("orders", "timeout", HOUR, "a"),
        letter("orders", "timeout", 2 * HOUR, "b"),
        letter("orders", "validation", 3 * HOUR, "c"),
    ];
    let (broker, t) = applied(letters).await;
    let i = inspect_with(&broker, &t, OPTS, NOW, &CancellationToken::new())
        .await
        .expect("inspect");
    assert_eq!((i.total, i.scanned, i.interrupted), (3, 3, false));
    assert_eq!(i.by_error_class["Timeout"], 2);
    assert_eq!(i.oldest_age_ms, Some(3 * HOUR));
    assert_eq!(i.sample.len(), 2);
    assert_eq!(i.queues, ["orders.dlq"]);
    assert_eq!(ids(&broker, "orders.dlq"), ["a", "b", "c"]);

    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let i = inspect_with(&broker, &t, OPTS, NOW, &cancelled)
        .await
        .expect("inspect");
    assert!(i.interrupted && i.scanned == 0);
    let mut missing = plan("orders");
    missing
        .queues
        .iter_mut()
        .for_each(|q| q.name = format!("{}-gone", q.name));
    let e = inspect_with(&broker, &missing, OPTS, NOW, &CancellationToken::new())
        .await
        .expect_err("missing");
    assert!(matches!(e, BrokerError::NotFound { .. }), "{e}");
}

#[tokio::test]
async fn inspecting_a_quorum_queue_near_its_delivery_limit_never_drops_a_message() {
    let broker = FakeBroker::new();
    let t = plan("orders");
    broker.apply(&t).await.expect("apply");
    // A policy of the user's puts a delivery limit of 3 on the dead-letter queue.
    broker.put_policy(
        "/",
        "limit",
        FakePolicy {
            pattern: "^orders\\.dlq$".into(),
            apply_to: "queues".into(),
            priority: 0,
            definition: BTreeMap::from([("delivery-limit".to_string(), json!(3))]),
        },
    );
    for id in ["a", "b"] {
        broker.publish("/", "", "orders.dlq", letter("orders", "timeout", HOUR, id));
    }
    let mut rotated = 0;
    for _ in 0..30 {
        let i = inspect_with(&broker, &t, OPTS, NOW, &CancellationToken::new())
            .await
            .expect("inspect");
        assert_eq!(i.scanned, 2);
        rotated += i.rotated;
    }
    assert!(rotated > 0, "messages near the limit are rotated");
    assert_eq!(broker.dropped("/", "orders.dlq"), 0);
    let mut left = ids(&broker, "orders.dlq");
    left.sort();
    assert_eq!(left, ["a", "b"], "none lost, none duplicated");
    // Without the rule, a return past the limit drops the message, as RabbitMQ does.
    let limits = broker
        .lock()
        .queue_limits("/", "orders.dlq")
        .expect("limits");
    assert_eq!(limits.delivery_limit, Some(3));
    let mut taken = broker.take("/", "orders.dlq", limits).expect("take");
    let mut m = taken.unread.pop_front().expect("a message");
    let headers = m.properties.headers.get_or_insert_with(Default::default);
    headers.insert("x-delivery-count".into(), HeaderValue::I64(3));
    taken.requeue.push(m);
    broker.give_back(taken);
    assert_eq!(broker.dropped("/", "orders.dlq"), 1);
    assert_eq!(ids(&broker, "orders.dlq").len(), 1);
}

#[tokio::test]
async fn replay_sends_back_only_what_the_filter_takes_with_the_retry_state_reset() {
    let letters = vec![
        letter("orders", "timeout", HOUR, "a"),
        letter("orders", "validation", HOUR, "b"),
        letter("payments", "timeout", HOUR, "c"),
        letter("orders", "timeout", HOUR, "d"),
    ];
    let (broker, t) = applied(letters).await;
    let mut seen = 0;
    let mut progress = |_: &ReplayReport| seen += 1;
    let report = replay_with(
        &broker,
        &t,
        &options(&["class=timeout"]),
        NOW,
        &CancellationToken::new(),
        &mut progress,
    )
    .await
    .expect("replay");
    assert_eq!(report.outcome, ReplayOutcome::Succeeded, "{report:?}");
    assert_eq!(
        (
            report.total,
            report.scanned,
            report.matched,
            report.replayed
        ),
        (4, 4, 3, 2)
    );
    assert_eq!(
        report.skipped_total(),
        1,
        "another original queue: {:?}",
        report.skipped
    );
    assert!(seen >= 4);
    assert_eq!(ids(&broker, "orders"), ["a", "d"]);
    assert_eq!(ids(&broker, "orders.dlq"), ["b", "c"]);
    let copy = &broker.messages("/", "orders")[0];
    let d = DeadLetter::read("orders", &copy.properties, &copy.body, 0);
    assert_eq!((d.retry_count, d.replay_count), (0, 1));
    assert_eq!(d.headers[REPLAY_ID], "run-1");
    assert_eq!(d.message_id.as_deref(), Some("a"));

    // Run again with the same id: the copies failing again are not looped.
    for m in broker.messages("/", "orders") {
        broker.publish("/", "", "orders.dlq", m);
    }
    let again = replay_with(
        &broker,
        &t,
        &options(&["class=timeout"]),
        NOW,
        &CancellationToken::new(),
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(again.replayed, 0);
    assert_eq!(again.skipped["already replayed by this replay"], 2);
}

#[tokio::test]
async fn a_refused_publish_keeps_the_dead_letter() {
    let (broker, t) = applied(vec![
        letter("orders", "timeout", HOUR, "a"),
        letter("orders", "timeout", HOUR, "b"),
    ])
    .await;
    broker.refuse_publishes("/", "orders", true);
    let report = replay_with(
        &broker,
        &t,
        &options(&[]),
        NOW,
        &CancellationToken::new(),
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.outcome, ReplayOutcome::Failed);
    assert_eq!(report.failed[crate::dlq::replay::NACKED], 2);
    assert_eq!(report.replayed, 0);
    assert_eq!(
        ids(&broker, "orders.dlq"),
        ["a", "b"],
        "both still dead letters"
    );
    assert!(ids(&broker, "orders").is_empty());
    let kept = &broker.messages("/", "orders.dlq")[0];
    assert!(
        kept.properties.header(REPLAY_COUNT).is_none(),
        "the original, unchanged"
    );
}

#[tokio::test]
async fn a_replay_stops_on_cancel_and_on_a_failed_checkpoint_without_losing_a_message() {
    struct Failing;
    impl crate::dlq::replay::Observer for Failing {
        fn progress(&mut self, _: &ReplayReport) {}
        fn checkpoint<'a>(
            &'a mut self,
            _: &'a ReplayReport,
            _: u64,
        ) -> futures::future::BoxFuture<'a, Result<(), String>> {
            Box::pin(async { Err("status write refused".to_string()) })
        }
    }
    let (broker, t) = applied(vec![letter("orders", "timeout", HOUR, "a")]).await;
    let report = replay_with(
        &broker,
        &t,
        &options(&[]),
        NOW,
        &CancellationToken::new(),
        &mut Failing,
    )
    .await
    .expect("replay");
    assert_eq!(report.outcome, ReplayOutcome::Partial);
    assert_eq!((report.scanned, report.matched, report.replayed), (0, 0, 0));
    assert_eq!(ids(&broker, "orders.dlq"), ["a"]);

    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let mut on_progress = move |_: &ReplayReport| stop.cancel();
    broker.publish(
        "/",
        "",
        "orders.dlq",
        letter("orders", "timeout", HOUR, "b"),
    );
    let report = replay_with(&broker, &t, &options(&[]), NOW, &cancel, &mut on_progress)
        .await
        .expect("replay");
    assert_eq!(report.outcome, ReplayOutcome::Partial);
    assert_eq!(report.replayed, 1, "stopped after the first message");
    assert_eq!(ids(&broker, "orders"), ["a"]);
    assert_eq!(ids(&broker, "orders.dlq"), ["b"]);
}

#[tokio::test]
async fn replay_to_the_original_exchange_goes_only_where_it_reaches_the_source_queue_alone() {
    let mut a = letter("orders", "timeout", HOUR, "a");
    let headers = a.properties.headers.get_or_insert_with(Default::default);
    headers.insert("dlq-original-exchange".into(), HeaderValue::text("shop"));
    headers.insert(
        "dlq-original-routing-key".into(),
        HeaderValue::text("order.created"),
    );
    let (broker, t) = applied(vec![a]).await;
    broker.declare_exchange("/", "shop", "topic");
    broker.bind("/", "shop", "orders", "order.*");
    broker.declare_queue("/", "audit", "classic", BTreeMap::new());
    broker.bind("/", "shop", "audit", "#");
    let mut opts = options(&[]);
    opts.target = Target::OriginalExchange;
    let report = replay_with(
        &broker,
        &t,
        &opts,
        NOW,
        &CancellationToken::new(),
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.replayed, 0);
    assert!(
        report.skipped.keys().any(|k| k.contains("\"audit\"")),
        "{:?}",
        report.skipped
    );
    assert!(ids(&broker, "audit").is_empty());

    let v = broker.vhost("/").expect("vhost");
    let audit = v
        .bindings
        .iter()
        .find(|b| b.queue == "audit")
        .cloned()
        .expect("binding");
    drop(v);
    broker
        .lock()
        .vhosts
        .get_mut("/")
        .expect("vhost")
        .bindings
        .remove(&audit);
    opts.dry_run = true;
    let dry = replay_with(
        &broker,
        &t,
        &opts,
        NOW,
        &CancellationToken::new(),
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!((dry.replayed, dry.dry_run), (1, true));
    assert!(
        ids(&broker, "orders").is_empty(),
        "a dry run publishes nothing"
    );
    opts.dry_run = false;
    let done = replay_with(
        &broker,
        &t,
        &opts,
        NOW,
        &CancellationToken::new(),
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(done.replayed, 1);
    assert_eq!(ids(&broker, "orders"), ["a"]);
}

#[tokio::test]
async fn purge_removes_only_what_the_filter_takes() {
    let (broker, t) = applied(vec![
        letter("orders", "timeout", 3 * 24 * HOUR, "old"),
        letter("orders", "timeout", HOUR, "new"),
        Message::new(Headers::new(), b"ageless"),
    ])
    .await;
    let filter = Filter::default().older_than(24 * HOUR);
    let mut report = PurgeReport::default();
    purge_with(
        &broker,
        &t,
        &filter,
        true,
        NOW,
        &CancellationToken::new(),
        &mut report,
    )
    .await
    .expect("dry run");
    assert_eq!(
        (report.matched, report.removed, report.unknown_age),
        (1, 0, 1)
    );
    assert_eq!(ids(&broker, "orders.dlq").len(), 3);
    purge_with(
        &broker,
        &t,
        &filter,
        false,
        NOW,
        &CancellationToken::new(),
        &mut report,
    )
    .await
    .expect("purge");
    assert_eq!((report.scanned, report.matched, report.removed), (3, 1, 1));
    assert_eq!(ids(&broker, "orders.dlq"), ["new", "ageless"]);

    // Never on a dead-letter queue another DeadLetterQueue owns.
    broker.put_record(OwnerRecord {
        owner: "default/other".into(),
        vhost: "/".into(),
        kind: QUEUE.into(),
        name: "orders.dlq".into(),
        role: "dead-letter queue".into(),
        retired: Vec::new(),
    });
    let e = purge_with(
        &broker,
        &t,
        &Filter::default(),
        false,
        NOW,
        &CancellationToken::new(),
        &mut report,
    )
    .await
    .expect_err("owned");
    assert!(matches!(e, BrokerError::NameOwned { .. }), "{e}");
    assert_eq!(ids(&broker, "orders.dlq").len(), 2);
}

/// Repair (a replay of one message with its edits) on the fake broker.
mod repair;
