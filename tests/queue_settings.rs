//! `spec.broker.queueSettings: Arguments` on a real RabbitMQ (127.0.0.1, guest/guest,
//! vhost `/`; docs/ARCHITECTURE.md, "A thousand queues per vhost"): settings declared as
//! queue arguments, a policy only where one is needed, one resource's edit touching only
//! its own queues, and resources of the `Policy` layout moving over without a gap in the
//! dead-letter route. Each test uses its own names and removes what it made.

mod common;

use std::time::{Duration, Instant};

use common::{cleanup, mgmt_get, passive_ready_count, publish_persistent, unique, AMQP};
use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::broker::{ApplyReport, BrokerConnection, ObjectKind, Outcome};
use dlq_operator::crd::{DeadLetterQueueSpec, RetryPolicySpec};
use dlq_operator::rabbitmq::RabbitMq;
use dlq_operator::topology::{plan, DesiredTopology};
use serde_json::{json, Value};

fn broker() -> RabbitMq {
    let secret = [
        ("uri".to_string(), AMQP.as_bytes().to_vec()),
        (
            "managementUri".to_string(),
            common::MGMT.as_bytes().to_vec(),
        ),
    ]
    .into_iter()
    .collect();
    let conn = BrokerConnection::from_secret_data("rabbitmq", &secret).expect("secret");
    RabbitMq::new(&conn).expect("client")
}

/// The plan of source queue `queue` (classic, tiers 5 s and 30 s) with `settings` and the dead-letter
/// queue's `retention`; `extra` is merged into `spec.deadLetter`.
fn topology(queue: &str, settings: &str, retention: &str, extra: Value) -> DesiredTopology {
    with_tiers(queue, settings, retention, extra, &["5s", "30s"])
}

/// As [`topology`], with retry tiers `tiers`.
fn with_tiers(
    queue: &str,
    settings: &str,
    retention: &str,
    extra: Value,
    tiers: &[&str],
) -> DesiredTopology {
    let mut dead_letter = json!({"retention": retention});
    if let (Some(d), Some(e)) = (dead_letter.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    let spec: DeadLetterQueueSpec = serde_json::from_value(json!({
        "broker": {"secretRef": {"name": "rabbitmq"}, "queueSettings": settings},
        "source": {"queue": queue, "queueType": "Classic"},
        "retryPolicyRef": {"name": "rp"},
        "deadLetter": dead_letter,
    }))
    .expect("spec");
    let rp: RetryPolicySpec =
        serde_json::from_value(json!({"maxRetries": tiers.len(), "tiers": tiers})).expect("rp");
    plan(
        &format!("test/{queue}"),
        &spec,
        &ResolvedPolicy::from_spec(&rp).expect("resolved"),
    )
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The arguments queue `name` was declared with.
async fn arguments(name: &str) -> Value {
    let q = mgmt_get(&format!("/api/queues/%2F/{}?columns=arguments", enc(name)))
        .await
        .unwrap_or_else(|| panic!("queue {name} exists"));
    q["arguments"].clone()
}

/// The operator's policies (`dlq-operator.<prefix>…`) on the broker, by name.
async fn our_policies(prefix: &str) -> Vec<(String, Value)> {
    let all = mgmt_get("/api/policies/%2F").await.unwrap_or(Value::Null);
    all.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            name.starts_with(&format!("dlq-operator.{prefix}"))
                .then(|| (name.to_string(), p["definition"].clone()))
        })
        .collect()
}

async fn apply(t: &DesiredTopology) -> ApplyReport {
    broker().apply(t).await.expect("apply")
}

fn assert_ready(report: &ApplyReport) {
    assert!(report.is_ready(), "{:#?}", report.actions);
}

/// Waits up to `limit` for `queue` to hold `n` ready messages; returns the last count.
async fn wait_count(queue: &str, n: u32, limit: Duration) -> u32 {
    let start = Instant::now();
    loop {
        let count = passive_ready_count(AMQP, queue).await;
        if count == n || start.elapsed() > limit {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Publishes one message to `queue`, takes it back with `basic.get` and rejects it
/// without requeue, as a failing consumer does: the broker dead-letters it.
async fn reject_one(queue: &str) {
    publish_persistent(queue, 1).await;
    let conn = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let ch = conn.create_channel().await.expect("channel");
    let start = Instant::now();
    let delivery = loop {
        if let Some(d) = ch
            .basic_get(queue.into(), Default::default())
            .await
            .expect("basic.get")
        {
            break d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nothing in {queue}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    delivery
        .delivery
        .reject(lapin::options::BasicRejectOptions { requeue: false })
        .await
        .expect("reject");
    let _ = conn.close(200, "bye".into()).await;
}

#[tokio::test]
async fn settings_are_declared_as_arguments_and_one_edit_touches_only_its_queue() {
    let prefix = unique("qs-edit");
    let (a, b) = (format!("{prefix}-a"), format!("{prefix}-b"));
    let plan_a = topology(&a, "Arguments", "60s", json!({}));
    let plan_b = topology(&b, "Arguments", "60s", json!({}));
    assert_ready(&apply(&plan_a).await);
    assert_ready(&apply(&plan_b).await);
    assert!(our_policies(&prefix).await.is_empty(), "no policy at all");
    let source = arguments(&a).await;
    assert_eq!(source["x-dead-letter-exchange"], json!(format!("{a}.dlx")));
    assert_eq!(source["x-dead-letter-routing-key"], json!(a));
    assert_eq!(
        arguments(&format!("{b}.dlq")).await["x-message-ttl"],
        json!(60_000)
    );
    // The route works from birth: a rejected message reaches the dead-letter queue.
    reject_one(&a).await;
    assert_eq!(
        wait_count(&format!("{a}.dlq"), 1, Duration::from_secs(10)).await,
        1
    );
    let again = apply(&plan_a).await;
    assert_eq!(again.writes(), 0, "{:#?}", again.actions);

    // A's retention lowered to 1 s: one policy, on A's dead-letter queue only, and it
    // takes effect for what arrives from then on (a queue's TTL is stamped on a message
    // as it is enqueued); B's dead letters keep their 60 s.
    common::mgmt_delete(&format!(
        "/api/queues/%2F/{}/contents",
        enc(&format!("{a}.dlq"))
    ))
    .await;
    let lowered = apply(&topology(&a, "Arguments", "1s", json!({}))).await;
    assert_ready(&lowered);
    assert_eq!(lowered.writes(), 1, "{:#?}", lowered.actions);
    let policies = our_policies(&prefix).await;
    assert_eq!(policies.len(), 1, "{policies:?}");
    assert_eq!(policies[0].0, format!("dlq-operator.{a}.dlq"));
    assert_eq!(policies[0].1["message-ttl"], json!(1000));
    publish_persistent(&format!("{a}.dlq"), 1).await;
    publish_persistent(&format!("{b}.dlq"), 1).await;
    assert_eq!(
        wait_count(&format!("{a}.dlq"), 0, Duration::from_secs(15)).await,
        0
    );
    assert_eq!(passive_ready_count(AMQP, &format!("{b}.dlq")).await, 1);

    // Raised above the declared 60 s: reported with the way out, the queue keeps 60 s.
    let raised = apply(&topology(&a, "Arguments", "120s", json!({}))).await;
    assert!(!raised.is_ready());
    let fixed: Vec<&str> = raised
        .actions
        .iter()
        .filter_map(|x| match &x.outcome {
            Outcome::Fixed(why) => Some(why.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fixed.len(), 1, "{:#?}", raised.actions);
    assert!(fixed[0].contains("x-message-ttl=60000") && fixed[0].contains("spec.deadLetter.queue"));
    // The policy is kept in step with the spec (at or above the argument it changes nothing).
    assert_eq!(
        our_policies(&prefix).await[0].1["message-ttl"],
        json!(120_000)
    );
    cleanup(&prefix).await;
}

#[tokio::test]
async fn removing_one_resource_leaves_the_other_as_it_was() {
    let prefix = unique("qs-remove");
    let (a, b) = (format!("{prefix}-a"), format!("{prefix}-b"));
    let plan_a = topology(&a, "Arguments", "60s", json!({}));
    let plan_b = topology(&b, "Arguments", "60s", json!({}));
    apply(&plan_a).await;
    apply(&plan_b).await;
    let before = arguments(&format!("{b}.dlq")).await;
    let removal = broker().remove(&plan_a).await.expect("remove");
    assert!(removal.is_complete(), "{:?}", removal.blocked);
    assert!(
        mgmt_get(&format!("/api/queues/%2F/{}", enc(&format!("{a}.dlq"))))
            .await
            .is_none()
    );
    assert_eq!(arguments(&format!("{b}.dlq")).await, before);
    let again = apply(&plan_b).await;
    assert_eq!(again.writes(), 0, "{:#?}", again.actions);
    assert_ready(&again);
    cleanup(&prefix).await;
}

#[tokio::test]
async fn another_policy_that_shortens_retention_is_masked_or_reported_shadowed() {
    let prefix = unique("qs-foreign");
    let a = format!("{prefix}-a");
    let plan_a = topology(&a, "Arguments", "60s", json!({}));
    apply(&plan_a).await;
    let put = |priority: i64| {
        let a = a.clone();
        async move {
            let status = reqwest::Client::new()
                .put(format!(
                    "{}/api/policies/%2F/{}",
                    common::MGMT,
                    enc(&format!("{a}-foreign"))
                ))
                .basic_auth("guest", Some("guest"))
                .json(
                    &json!({"pattern": format!("^{a}\\.dlq$"), "apply-to": "queues",
                              "priority": priority, "definition": {"message-ttl": 1000}}),
                )
                .send()
                .await
                .expect("PUT policy")
                .status();
            assert!(status.is_success(), "{status}");
        }
    };
    // Lower priority: ours is written over it, with the spec's retention.
    put(0).await;
    let masked = apply(&plan_a).await;
    assert_ready(&masked);
    assert_eq!(masked.writes(), 1, "{:#?}", masked.actions);
    // Higher priority: reported shadowed, naming the other policy.
    put(500).await;
    let shadowed = apply(&plan_a).await;
    assert!(!shadowed.is_ready());
    assert!(
        shadowed.actions.iter().any(|x| matches!(&x.outcome,
        Outcome::Shadowed(why) if why.contains(&format!("{a}-foreign")))),
        "{:#?}",
        shadowed.actions
    );
    common::mgmt_delete(&format!(
        "/api/policies/%2F/{}",
        enc(&format!("{a}-foreign"))
    ))
    .await;
    cleanup(&prefix).await;
}

#[tokio::test]
async fn resources_of_the_policy_layout_move_over_without_a_gap() {
    let prefix = unique("qs-migrate");
    let a = format!("{prefix}-a");
    let old = topology(&a, "Policy", "60s", json!({}));
    assert_ready(&apply(&old).await);
    let policies = our_policies(&prefix).await;
    assert_eq!(
        policies.len(),
        2,
        "the current version's two policies: {policies:?}"
    );

    // The upgrade: the same resource under Arguments writes nothing, the route holds.
    let new = topology(&a, "Arguments", "60s", json!({}));
    let upgraded = apply(&new).await;
    assert_ready(&upgraded);
    assert_eq!(upgraded.writes(), 0, "{:#?}", upgraded.actions);
    assert_eq!(our_policies(&prefix).await, policies);
    reject_one(&a).await;
    assert_eq!(
        wait_count(&format!("{a}.dlq"), 1, Duration::from_secs(10)).await,
        1
    );

    // Queues declared from now on use arguments: a renamed dead-letter queue (the way
    // out of a fixed setting) gets its settings at declaration, the old one is retired
    // with its dead letter, and the route goes on into the new one.
    let renamed_dlq = format!("{a}.dead");
    let renamed = topology(&a, "Arguments", "120s", json!({"queue": renamed_dlq}));
    let report = apply(&renamed).await;
    assert!(
        report
            .actions
            .iter()
            .any(|x| matches!(x.outcome, Outcome::Retired(_))),
        "{:#?}",
        report.actions
    );
    assert_eq!(
        arguments(&renamed_dlq).await["x-message-ttl"],
        json!(120_000)
    );
    assert_eq!(passive_ready_count(AMQP, &format!("{a}.dlq")).await, 1);
    reject_one(&a).await;
    assert_eq!(
        wait_count(&renamed_dlq, 1, Duration::from_secs(10)).await,
        1
    );
    assert_eq!(
        passive_ready_count(AMQP, &format!("{a}.dlq")).await,
        1,
        "no copy in the old one"
    );
    cleanup(&prefix).await;
}

#[tokio::test]
async fn an_obsolete_tier_is_still_retired_after_its_retry_exchange_was_deleted_by_hand() {
    let prefix = unique("qs-tiers");
    let a = format!("{prefix}-a");
    assert_ready(&apply(&topology(&a, "Arguments", "60s", json!({}))).await);
    common::mgmt_delete(&format!(
        "/api/exchanges/%2F/{}",
        enc(&format!("{a}.retry"))
    ))
    .await;
    let changed = with_tiers(&a, "Arguments", "60s", json!({}), &["5s", "1m"]);
    let report = apply(&changed).await;
    let old_tier = format!("{a}.retry.30s");
    assert_eq!(
        report
            .find(ObjectKind::Queue, &old_tier)
            .map(|x| &x.outcome),
        Some(&Outcome::Deleted),
        "{:#?}",
        report.actions
    );
    assert!(mgmt_get(&format!("/api/queues/%2F/{}", enc(&old_tier)))
        .await
        .is_none());
    cleanup(&prefix).await;
}
