//! The retry router inside the operator (`dlq-operator run`, the real binary) against a
//! real Kubernetes API server and the real RabbitMQ: a DeadLetterQueue in router mode, a
//! plain consumer that only rejects, the message through the tier into the dead-letter
//! queue, the router's metrics, and the router stopped when the resource is deleted.
//! Needs `DLQ_E2E_KUBECONFIG` (.ci/run starts an API server); skipped by name without it.

mod common;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::json;

use common::e2e::{client, dlqs, ensure_crds, namespace, ready, rps, wait_for, Operator};
use common::{cleanup, unique, AMQP};
use dlq_operator::crd::{DeadLetterQueue, RetryPolicy};
use dlq_operator::object::api_resource;

#[tokio::test]
async fn the_operator_runs_the_retry_router_of_a_dead_letter_queue_in_router_mode() {
    const TEST: &str = "the_operator_runs_the_retry_router_of_a_dead_letter_queue_in_router_mode";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace(&client, "e2e-router").await;
    let prefix = unique("e2e-router");
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    let q = format!("{prefix}-work");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "rabbit"},
        "stringData": {"uri": AMQP, "managementUri": common::MGMT}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let rp = DynamicObject::new("policy", &api_resource::<RetryPolicy>())
        .data(json!({"spec": {"maxRetries": 1, "tiers": ["1s"]}}));
    rps(&client, &ns)
        .create(&PostParams::default(), &rp)
        .await
        .expect("rp");
    let dlq = DynamicObject::new("work", &api_resource::<DeadLetterQueue>()).data(json!({"spec": {
        "broker": {"secretRef": {"name": "rabbit"}},
        "source": {"queue": q, "queueType": "Classic"},
        "retryPolicyRef": {"name": "policy"},
        "router": {"enabled": true},
        "deletionPolicy": "Delete",
    }}));
    let api = dlqs(&client, &ns);
    api.create(&PostParams::default(), &dlq).await.expect("dlq");
    wait_for(Duration::from_secs(60), "Ready", &op, || async {
        ready(&api, "work").await.filter(|r| r.0 == "True")
    })
    .await;
    let consuming = format!("dlq_router_consuming{{name=\"work\",namespace=\"{ns}\"}} 1");
    wait_for(Duration::from_secs(30), "router consuming", &op, || async {
        op.metrics().await.contains(&consuming).then_some(())
    })
    .await;

    // A plain consumer: rejects every delivery with requeue=false.
    let (conn, ch) = common::dlq::confirm_channel().await;
    let consumer_ch = conn.create_channel().await.expect("channel");
    let mut consumer = consumer_ch
        .basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    ch.basic_publish(
        "".into(),
        q.as_str().into(),
        BasicPublishOptions::default(),
        b"order",
        BasicProperties::default().with_message_id("e2e-1".into()),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    for _ in 0..2 {
        let d = tokio::time::timeout(Duration::from_secs(20), consumer.next())
            .await
            .expect("delivered within 20 s")
            .expect("stream")
            .expect("delivery");
        d.acker
            .reject(BasicRejectOptions { requeue: false })
            .await
            .expect("reject");
    }
    let dlq_name = format!("{q}.dlq");
    let dead = wait_for(Duration::from_secs(20), "dead letter", &op, || async {
        ch.basic_get(
            dlq_name.as_str().into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .ok()
        .flatten()
    })
    .await;
    let reason = dead
        .delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("dlq-reason").cloned());
    assert_eq!(
        reason,
        Some(AMQPValue::LongString("MaxRetriesExceeded".into()))
    );
    let metrics = op.metrics().await;
    for series in [
        format!("dlq_router_messages_total{{decision=\"retry\",name=\"work\",namespace=\"{ns}\",reason=\"\",tier=\"1s\"}} 1"),
        format!("dlq_router_messages_total{{decision=\"dead_letter\",name=\"work\",namespace=\"{ns}\",reason=\"MaxRetriesExceeded\",tier=\"\"}} 1"),
    ] {
        assert!(metrics.contains(&series), "{series} missing from:\n{metrics}");
    }
    drop(consumer);
    let _ = conn.close(200, "done".into()).await;

    // Deleted: the router stops and the topology goes (the inbox is empty and unused).
    api.delete("work", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(Duration::from_secs(60), "object gone", &op, || async {
        match api.get_opt("work").await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(!op
        .metrics()
        .await
        .contains("dlq_router_consuming{name=\"work\""));
    assert!(common::mgmt_get(&format!("/api/queues/%2F/{q}.router"))
        .await
        .is_none());
    drop(op);
    cleanup(&prefix).await;
}
