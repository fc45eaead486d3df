//! The DeadLetterQueue controller's reconcile against a mock Kubernetes API (kube's
//! `tower-test` mock service, answered here from a few fixed objects, every call
//! recorded) and the in-memory broker ([`FakeBroker`]): no API server, no RabbitMQ.

use std::sync::Arc;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde_json::{json, Value};

use super::{reconcile, FINALIZER};
use crate::broker::BrokerTopology;
use crate::controller::context::DeadLetterQueueContext;
use crate::controller::mock_api::{Call, MockApi, NS, SECRET_PATH};
use crate::fake::{FakeBroker, Fault};

const DLQ_PATH: &str = "/apis/dlqoperator.io/v1alpha1/namespaces/team-a/deadletterqueues";
const RP_PATH: &str = "/apis/dlqoperator.io/v1alpha1/namespaces/team-a/retrypolicies";
const RULE_PATH: &str = "/apis/monitoring.coreos.com/v1/namespaces/team-a/prometheusrules";

/// A mock API serving the RetryPolicy `policy`, the Secret `rabbit` and a PrometheusRule
/// `dlq-orders`; the controller's context over it and `broker`.
fn setup(broker: &FakeBroker) -> (MockApi, Arc<DeadLetterQueueContext>) {
    let api = MockApi::default().with_references();
    api.put(
        &format!("{RULE_PATH}/dlq-orders"),
        json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "dlq-orders", "namespace": NS}, "spec": {"groups": []}}),
    );
    let ctx = Arc::new(DeadLetterQueueContext::new(api.context(broker)));
    (api, ctx)
}

/// The DeadLetterQueue `orders` on queue `orders` (finalizer in place), with `status`.
fn dead_letter_queue(status: Option<Value>) -> DynamicObject {
    let mut obj = json!({
        "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
        "metadata": {"name": "orders", "namespace": NS, "uid": "uid-orders", "generation": 1,
                     "resourceVersion": "1", "finalizers": [FINALIZER]},
        "spec": {"broker": {"secretRef": {"name": "rabbit"}},
                 "source": {"queue": "orders", "queueType": "Classic"},
                 "retryPolicyRef": {"name": "policy"}}});
    if let Some(s) = status {
        obj["status"] = s;
    }
    serde_json::from_value(obj).expect("dynamic object")
}

/// The body of the one status patch among `calls`, after checking it is the only one.
fn status_patch(calls: &[Call]) -> Value {
    let patches: Vec<&Call> = calls
        .iter()
        .filter(|c| c.0 == "PATCH" && c.1.ends_with("/status"))
        .collect();
    assert_eq!(patches.len(), 1, "one status patch in {calls:#?}");
    assert_eq!(patches[0].1, format!("{DLQ_PATH}/orders/status"));
    patches[0].2["status"].clone()
}

/// Status and reason of condition `type_` of `status`.
fn condition(status: &Value, type_: &str) -> (String, String) {
    let c = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_));
    let c = c.unwrap_or_else(|| panic!("condition {type_} in {status}"));
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"))
}

#[tokio::test]
async fn applies_the_topology_writes_ready_once_then_steady_state_writes_nothing() {
    let broker = FakeBroker::new();
    let (api, ctx) = setup(&broker);
    api.put(
        &format!("{DLQ_PATH}/orders"),
        json!(dead_letter_queue(None)),
    );
    let action = reconcile(Arc::new(dead_letter_queue(None)), ctx.clone())
        .await
        .expect("applied");
    assert_eq!(action, Action::requeue(ctx.resync));
    let calls = api.take();
    let status = status_patch(&calls);
    for type_ in ["Ready", "TopologyReady"] {
        assert_eq!(
            condition(&status, type_),
            ("True".into(), "TopologyApplied".into())
        );
    }
    assert_eq!(status["tiers"], json!(["5s", "30s"]));
    let reads: Vec<&str> = calls
        .iter()
        .filter(|c| c.0 == "GET")
        .map(|c| c.1.as_str())
        .collect();
    assert_eq!(
        reads[..2],
        [format!("{RP_PATH}/policy"), format!("{SECRET_PATH}/rabbit")]
    );
    // The topology is on the (fake) broker.
    let vhost = broker.vhost("/").expect("vhost /");
    for q in [
        "orders",
        "orders.dlq",
        "orders.retry.5s",
        "orders.retry.30s",
    ] {
        assert!(
            vhost.queues.contains_key(q),
            "queue {q} declared: {:?}",
            vhost.queues.keys()
        );
    }
    let writes = broker.request_counts().writes;
    assert!(writes > 0);
    // The rule as written is served from now on.
    let rule = calls
        .iter()
        .find(|c| c.0 == "PATCH" && c.1.starts_with(RULE_PATH))
        .expect("rule written");
    api.put(&rule.1, rule.2.clone());

    // Steady state: the same object with that status, reconciled twice: reads only.
    let steady = dead_letter_queue(Some(status));
    for _ in 0..2 {
        reconcile(Arc::new(steady.clone()), ctx.clone())
            .await
            .expect("steady");
    }
    let calls = api.take();
    assert!(
        !calls.is_empty() && calls.iter().all(|c| c.0 == "GET"),
        "no API write: {calls:#?}"
    );
    assert_eq!(
        broker.request_counts().writes,
        writes,
        "no broker write in steady state"
    );
    assert_eq!(
        ctx.shared
            .metrics
            .reconcile_count("DeadLetterQueue", "success"),
        3
    );
}

#[tokio::test]
async fn an_unreachable_broker_is_ready_false_broker_unreachable_with_nothing_written() {
    let broker = FakeBroker::new();
    broker.set_fault(Some(Fault::Unreachable));
    let (api, ctx) = setup(&broker);
    api.put(
        &format!("{DLQ_PATH}/orders"),
        json!(dead_letter_queue(None)),
    );
    let err = reconcile(Arc::new(dead_letter_queue(None)), ctx.clone())
        .await
        .expect_err("unreachable");
    assert_eq!(err.metric_label(), "unreachable");
    let calls = api.take();
    let status = status_patch(&calls);
    assert_eq!(
        condition(&status, "Ready"),
        ("False".into(), "BrokerUnreachable".into())
    );
    let warnings: Vec<&str> = calls
        .iter()
        .filter(|c| c.0 == "POST" && c.2["type"] == "Warning")
        .filter_map(|c| c.2["reason"].as_str())
        .collect();
    assert_eq!(warnings, ["BrokerUnreachable"]);
    broker.set_fault(None);
    assert!(broker.vhost("/").expect("vhost /").queues.is_empty());
    assert_eq!(broker.request_counts().writes, 0);
    assert_eq!(
        ctx.shared
            .metrics
            .reconcile_count("DeadLetterQueue", "unreachable"),
        1
    );
}
