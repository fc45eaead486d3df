//! The DeadLetterReplay controller's reconcile, run task included, against a mock
//! Kubernetes API (kube's `tower-test` mock service, answered from a few fixed objects,
//! every call recorded) and the in-memory broker ([`FakeBroker`]) holding the dead
//! letters: no API server, no RabbitMQ.

use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde_json::{json, Value};

use super::{reconcile, PENDING_RECHECK};
use crate::broker::message::{HeaderValue, Headers, Message};
use crate::broker::BrokerTopology;
use crate::client::headers::{ERROR_CLASS, LAST_FAILED_AT, ORIGINAL_QUEUE, RETRY_COUNT};
use crate::controller::context::DeadLetterReplayContext;
use crate::controller::mock_api::{MockApi, API, NS};
use crate::dlq::replay::NACKED;
use crate::fake::FakeBroker;

const UID: &str = "uid-replay";
const REPLAY_STATUS: &str =
    "/apis/dlqoperator.io/v1alpha1/namespaces/team-a/deadletterreplays/replay-1/status";

/// The `status` of every status PATCH of the replay `api` recorded, in order.
fn replay_statuses(api: &MockApi) -> Vec<Value> {
    let calls = api.calls();
    let patches = calls
        .iter()
        .filter(|c| c.0 == "PATCH" && c.1 == REPLAY_STATUS);
    patches.map(|c| c.2["status"].clone()).collect()
}

/// The DeadLetterQueue `orders` (source queue `orders`, classic) as JSON.
fn dead_letter_queue() -> Value {
    json!({
        "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
        "metadata": {"name": "orders", "namespace": NS, "uid": "uid-orders", "generation": 1,
                     "resourceVersion": "1"},
        "spec": {"broker": {"secretRef": {"name": "rabbit"}},
                 "source": {"queue": "orders", "queueType": "Classic"},
                 "retryPolicyRef": {"name": "policy"}}})
}

/// The DeadLetterReplay `replay-1` of DeadLetterQueue `orders` (no status yet).
fn replay() -> Value {
    json!({
        "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterReplay",
        "metadata": {"name": "replay-1", "namespace": NS, "uid": UID, "generation": 1,
                     "resourceVersion": "10"},
        "spec": {"deadLetterQueueRef": {"name": "orders"}}})
}

/// A mock API serving the replay, its DeadLetterQueue, the RetryPolicy `policy` and the
/// Secret `rabbit`; the replay controller's context over it and `broker`.
fn setup(broker: &FakeBroker) -> (MockApi, Arc<DeadLetterReplayContext>) {
    let api = MockApi::default().with_references();
    api.put(&format!("{API}/deadletterreplays/replay-1"), replay());
    api.put(
        &format!("{API}/deadletterqueues/orders"),
        dead_letter_queue(),
    );
    let ctx = Arc::new(DeadLetterReplayContext::new(api.context(broker)));
    (api, ctx)
}

/// Applies the DeadLetterQueue's topology (as its controller would) to `broker` and puts
/// `n` dead letters of `orders` (the header contract's headers) in `orders.dlq`.
async fn applied_with_letters(broker: &FakeBroker, n: usize) {
    let dlq: crate::crd::DeadLetterQueue =
        serde_json::from_value(dead_letter_queue()).expect("dlq");
    let rp: crate::crd::RetryPolicySpec =
        serde_json::from_value(json!({"maxRetries": 2, "tiers": ["5s", "30s"]})).expect("rp");
    let policy = crate::backoff::ResolvedPolicy::from_spec(&rp).expect("policy");
    let plan = crate::topology::plan(&format!("{NS}/orders"), &dlq.spec, &policy);
    assert!(broker.apply(&plan).await.expect("apply").is_ready());
    for i in 0..n {
        let headers: Headers = [
            (ERROR_CLASS, HeaderValue::text("Timeout")),
            (ORIGINAL_QUEUE, HeaderValue::text("orders")),
            (RETRY_COUNT, HeaderValue::I64(2)),
            (LAST_FAILED_AT, HeaderValue::I64(1_700_000_000_000)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut m = Message::new(headers, format!("m{i}").as_bytes());
        m.properties.message_id = Some(format!("m{i}"));
        broker.publish("/", "", "orders.dlq", m);
    }
    assert_eq!(broker.messages("/", "orders.dlq").len(), n);
}

/// Reconciles the replay once (it starts its run), then waits (up to 5 s) for the run
/// task to end it for good; the status PATCHes it wrote.
async fn run_to_the_end(api: &MockApi, ctx: &Arc<DeadLetterReplayContext>) -> Vec<Value> {
    let obj: DynamicObject = serde_json::from_value(replay()).expect("replay");
    let action = reconcile(Arc::new(obj), ctx.clone())
        .await
        .expect("started");
    assert_eq!(action, Action::requeue(super::RUNNING_RECHECK));
    let over = async {
        while !ctx.replays.is_over(UID) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), over)
        .await
        .expect("the run ended within 5 s");
    replay_statuses(api)
}

/// Status, reason and message of the `Complete` condition of `status`.
fn complete(status: &Value) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Complete"))
        .unwrap_or_else(|| panic!("condition Complete in {status}"));
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

fn bodies(broker: &FakeBroker, queue: &str) -> Vec<String> {
    let messages = broker.messages("/", queue);
    let body = |m: &Message| String::from_utf8_lossy(&m.body).into_owned();
    messages.iter().map(body).collect()
}

#[tokio::test]
async fn a_replay_moves_every_dead_letter_to_the_source_queue_and_succeeds() {
    let broker = FakeBroker::new();
    applied_with_letters(&broker, 3).await;
    let (api, ctx) = setup(&broker);
    let statuses = run_to_the_end(&api, &ctx).await;

    assert_eq!(bodies(&broker, "orders"), ["m0", "m1", "m2"]);
    assert!(
        bodies(&broker, "orders.dlq").is_empty(),
        "dead-letter queue drained"
    );
    let copy = &broker.messages("/", "orders")[0];
    let id = copy.properties.header(crate::dlq::REPLAY_ID);
    assert_eq!(
        id,
        Some(&HeaderValue::text(UID)),
        "stamped with the replay id"
    );

    let first = statuses.first().expect("a status written");
    assert_eq!(first["phase"], "Running");
    assert_eq!(first["replayId"], UID);
    let last = statuses.last().expect("final status");
    assert_eq!(last["phase"], "Succeeded", "{statuses:#?}");
    assert_eq!(
        (last["replayed"].as_u64(), last["failed"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(last["scanned"].as_u64(), Some(3));
    let (st, reason, message) = complete(last);
    assert_eq!((st.as_str(), reason.as_str()), ("True", "Succeeded"));
    assert!(message.starts_with("replayed 3 of 3"), "{message}");
    assert!(last["completionTime"].is_string());
}

#[tokio::test]
async fn a_refused_publish_keeps_the_dead_letters_and_the_replay_fails_with_the_reason() {
    let broker = FakeBroker::new();
    applied_with_letters(&broker, 2).await;
    broker.refuse_publishes("/", "orders", true);
    let (api, ctx) = setup(&broker);
    let statuses = run_to_the_end(&api, &ctx).await;

    assert_eq!(
        bodies(&broker, "orders.dlq"),
        ["m0", "m1"],
        "still dead letters"
    );
    assert!(bodies(&broker, "orders").is_empty());

    let last = statuses.last().expect("final status");
    assert_eq!(last["phase"], "Failed", "{statuses:#?}");
    assert_eq!(
        (last["replayed"].as_u64(), last["failed"].as_u64()),
        (Some(0), Some(2))
    );
    assert_eq!(last["reasons"], json!([format!("failed: {NACKED}: 2")]));
    let (st, reason, message) = complete(last);
    assert_eq!((st.as_str(), reason.as_str()), ("True", "Failed"));
    assert!(message.contains("2 failed"), "{message}");
}

#[tokio::test]
async fn a_dead_letter_queue_not_declared_yet_keeps_the_replay_pending() {
    let broker = FakeBroker::new();
    let (api, ctx) = setup(&broker);
    let obj: DynamicObject = serde_json::from_value(replay()).expect("replay");
    let action = reconcile(Arc::new(obj), ctx.clone())
        .await
        .expect("pending");
    assert_eq!(action, Action::requeue(PENDING_RECHECK));
    assert!(!ctx.replays.is_running(UID), "no run started");

    let statuses = replay_statuses(&api);
    assert_eq!(statuses.len(), 1, "{statuses:#?}");
    assert_eq!(statuses[0]["phase"], "Pending");
    let (st, reason, message) = complete(&statuses[0]);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "DeadLetterQueueNotReady")
    );
    assert!(message.contains("\"orders.dlq\""), "{message}");
}
