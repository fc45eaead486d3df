//! The DeadLetterQueue and RetryPolicy controllers against a fake Kubernetes API (kube's
//! `tower-test` mock service, as in kube-rs `controller-rs`) and the real local RabbitMQ
//! (docs/DEVELOPMENT.md, "Testing"). Every API call is recorded and asserted: method, path and body.
//!
//! The fake answers GETs from an in-memory set of objects (404 for the rest), echoes
//! patched objects back, and accepts Events.

mod common;

use common::fake_api::{Call, FakeApi};

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::Client;
use serde_json::{json, Value};

use common::{cleanup, mgmt_get, unique, AMQP};
use dlq_operator::controller::context::{
    BrokerClients, Context, DeadLetterQueueContext, DeadLetterReplayContext, RetryPolicyContext,
};
use dlq_operator::controller::{
    dead_letter_queue, dead_letter_replay, error_policy, retry_policy, Error,
};
use dlq_operator::crd::DeadLetterQueue;
use dlq_operator::metrics::Metrics;
use dlq_operator::object::{api_resource, referencing};

const NS: &str = "team-a";
const DLQ_PATH: &str = "/apis/dlqoperator.io/v1alpha1/namespaces/team-a/deadletterqueues";
const RP_PATH: &str = "/apis/dlqoperator.io/v1alpha1/namespaces/team-a/retrypolicies";
const REPLAY_PATH: &str = "/apis/dlqoperator.io/v1alpha1/namespaces/team-a/deadletterreplays";
const SECRET_PATH: &str = "/api/v1/namespaces/team-a/secrets";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/team-a/events";
const RULE_PATH: &str = "/apis/monitoring.coreos.com/v1/namespaces/team-a/prometheusrules";

fn at(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).expect("valid timestamp"))
}

/// The shared context for the fake client with a fixed clock (t = 1_000_000 s).
fn shared(client: Client) -> Arc<Context> {
    let mut ctx = Context::new(
        client,
        "test-instance",
        Metrics::new(),
        Arc::new(BrokerClients::default()),
    );
    ctx.clock = Arc::new(|| at(1_000_000));
    Arc::new(ctx)
}

/// The DeadLetterQueue controller's context over [`shared`].
fn context(client: Client) -> Arc<DeadLetterQueueContext> {
    Arc::new(DeadLetterQueueContext::new(shared(client)))
}

/// The RetryPolicy controller's context over [`shared`].
fn policy_context(client: Client) -> Arc<RetryPolicyContext> {
    Arc::new(RetryPolicyContext::new(shared(client)))
}

/// The DeadLetterReplay controller's context over [`shared`].
fn replay_context(client: Client) -> Arc<DeadLetterReplayContext> {
    Arc::new(DeadLetterReplayContext::new(shared(client)))
}

/// Test fixture: a DeadLetterQueue as the API server would send it.
#[derive(Clone)]
struct DlqBuilder {
    name: String,
    spec: Value,
    generation: i64,
    finalizer: bool,
    deleting: bool,
    status: Option<Value>,
}

impl DlqBuilder {
    fn new(name: &str, queue: &str) -> Self {
        DlqBuilder {
            name: name.into(),
            spec: json!({
                "broker": {"secretRef": {"name": "rabbit"}},
                "source": {"queue": queue, "queueType": "Classic"},
                "retryPolicyRef": {"name": "policy"},
                "deadLetter": {"retention": "1h"},
            }),
            generation: 1,
            finalizer: false,
            deleting: false,
            status: None,
        }
    }
    fn spec(mut self, pointer: &str, value: Value) -> Self {
        *self.spec.pointer_mut(pointer).expect("spec field") = value;
        self
    }
    fn finalizer(mut self) -> Self {
        self.finalizer = true;
        self
    }
    fn deleting(mut self) -> Self {
        self.deleting = true;
        self
    }
    fn status(mut self, status: Value) -> Self {
        self.status = Some(status);
        self
    }
    fn build(&self) -> DynamicObject {
        let mut meta = json!({
            "name": self.name, "namespace": NS, "uid": format!("uid-{}", self.name),
            "generation": self.generation, "resourceVersion": "1",
        });
        if self.finalizer {
            meta["finalizers"] = json!([dead_letter_queue::FINALIZER]);
        }
        if self.deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        let mut obj = json!({
            "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
            "metadata": meta, "spec": self.spec,
        });
        if let Some(s) = &self.status {
            obj["status"] = s.clone();
        }
        serde_json::from_value(obj).expect("dynamic object")
    }
}

fn policy(spec: Value) -> Value {
    json!({"apiVersion": "dlqoperator.io/v1alpha1", "kind": "RetryPolicy",
           "metadata": {"name": "policy", "namespace": NS, "generation": 1, "resourceVersion": "7"},
           "spec": spec})
}

fn secret(uri: &str, management: &str, version: &str) -> Value {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::ByteString;
    let mut s = Secret::default();
    s.metadata.name = Some("rabbit".into());
    s.metadata.namespace = Some(NS.into());
    s.metadata.resource_version = Some(version.into());
    s.data = Some(BTreeMap::from([
        ("uri".to_string(), ByteString(uri.as_bytes().to_vec())),
        (
            "managementUri".to_string(),
            ByteString(management.as_bytes().to_vec()),
        ),
    ]));
    let mut v = serde_json::to_value(s).expect("secret json");
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Secret");
    v
}

/// A fake API holding the policy and a Secret for the local broker.
fn fake_with_references(policy_spec: Value) -> FakeApi {
    let fake = FakeApi::default();
    fake.put(&format!("{RP_PATH}/policy"), policy(policy_spec));
    fake.put(
        &format!("{SECRET_PATH}/rabbit"),
        secret(AMQP, common::MGMT, "1"),
    );
    fake
}

fn methods_and_paths(calls: &[Call]) -> Vec<(String, String)> {
    calls
        .iter()
        .map(|c| (c.method.clone(), c.path.clone()))
        .collect()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("condition {type_} in {status}"))
}

/// The status body of the one status patch in `calls`.
fn status_patch(calls: &[Call]) -> Value {
    let patches: Vec<&Call> = calls
        .iter()
        .filter(|c| c.method == "PATCH" && c.path.ends_with("/status"))
        .collect();
    assert_eq!(patches.len(), 1, "one status patch in {calls:#?}");
    let p = patches[0];
    assert!(
        p.query.contains("fieldManager=dlq-operator") && p.query.contains("force=true"),
        "server-side apply with our field manager: {}",
        p.query
    );
    assert_eq!(p.body["apiVersion"], "dlqoperator.io/v1alpha1");
    p.body["status"].clone()
}

/// Series updates of Events recorded before (kube's Recorder patches a repeated Event —
/// same object, type, reason and action — with `series.count` instead of creating one).
fn event_series_counts(calls: &[Call]) -> Vec<i64> {
    calls
        .iter()
        .filter(|c| c.method == "PATCH" && c.path.starts_with(&format!("{EVENTS_PATH}/")))
        .map(|c| c.body["series"]["count"].as_i64().unwrap_or(0))
        .collect()
}

fn events(calls: &[Call]) -> Vec<(String, String, String)> {
    calls
        .iter()
        .filter(|c| c.method == "POST" && c.path == EVENTS_PATH)
        .map(|c| {
            (
                c.body["type"].as_str().unwrap_or_default().to_string(),
                c.body["reason"].as_str().unwrap_or_default().to_string(),
                c.body["note"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn create_adds_finalizer_applies_topology_and_patches_status_then_steady_state_writes_nothing(
) {
    let q = unique("ctl-create");
    let fake = fake_with_references(json!({"maxRetries": 2, "tiers": ["5s", "30s"]}));
    let ctx = context(fake.client(NS));
    let builder = DlqBuilder::new("orders", &q);
    fake.put(&format!("{DLQ_PATH}/orders"), json!(builder.build()));

    // 1. No finalizer yet: the only call adds it (JSON patch guarded by a test op).
    let action = dead_letter_queue::reconcile(Arc::new(builder.build()), ctx.clone())
        .await
        .expect("finalizer added");
    assert_eq!(action, Action::await_change());
    let calls = fake.take();
    assert_eq!(
        methods_and_paths(&calls),
        [("PATCH".to_string(), format!("{DLQ_PATH}/orders"))]
    );
    assert_eq!(
        calls[0].body,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [dead_letter_queue::FINALIZER]}
        ])
    );
    assert!(
        ctx.shared.brokers.is_empty(),
        "no broker contact before the finalizer"
    );

    // 2. With the finalizer: read policy and Secret, apply on RabbitMQ, read and write
    //    the PrometheusRule (its CRD is served here: a stale one is in place), patch
    //    status, record the TopologyApplied and RulesApplied Events.
    let rule_path = format!("{RULE_PATH}/dlq-orders");
    fake.put(
        &rule_path,
        json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "dlq-orders", "namespace": NS}, "spec": {"groups": []}}),
    );
    let with_finalizer = builder.clone().finalizer();
    let action = dead_letter_queue::reconcile(Arc::new(with_finalizer.build()), ctx.clone())
        .await
        .expect("applied");
    assert_eq!(action, Action::requeue(ctx.resync));
    let calls = fake.take();
    assert_eq!(
        methods_and_paths(&calls),
        [
            ("GET".to_string(), format!("{RP_PATH}/policy")),
            ("GET".to_string(), format!("{SECRET_PATH}/rabbit")),
            ("GET".to_string(), rule_path.clone()),
            ("PATCH".to_string(), rule_path.clone()),
            ("PATCH".to_string(), format!("{DLQ_PATH}/orders/status")),
            ("POST".to_string(), EVENTS_PATH.to_string()),
            ("POST".to_string(), EVENTS_PATH.to_string()),
        ]
    );
    // The rule: server-side apply, owned by the resource, with the three alert rules.
    let rule = &calls[3];
    assert!(rule.query.contains("fieldManager=dlq-operator") && rule.query.contains("force=true"));
    assert_eq!(
        rule.body["metadata"]["ownerReferences"][0]["kind"],
        "DeadLetterQueue"
    );
    assert_eq!(
        rule.body["metadata"]["ownerReferences"][0]["name"],
        "orders"
    );
    assert_eq!(
        rule.body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "dlq-operator"
    );
    let alerts: Vec<&str> = rule.body["spec"]["groups"][0]["rules"]
        .as_array()
        .map(|rs| rs.iter().filter_map(|r| r["alert"].as_str()).collect())
        .unwrap_or_default();
    // Backlog (guarded: without a threshold series it cannot fire), absent and
    // broker-unreachable rules.
    assert_eq!(
        alerts,
        [
            "DeadLetterBacklogHigh",
            "DeadLetterMetricsAbsent",
            "DeadLetterBrokerUnreachable"
        ]
    );
    fake.put(&rule_path, rule.body.clone());
    let status = status_patch(&calls);
    let rules = condition(&status, "AlertRulesReady");
    assert_eq!(
        (rules["status"].as_str(), rules["reason"].as_str()),
        (Some("True"), Some("RulesApplied"))
    );
    assert!(
        status.get("depth").is_none() && status.get("backlogRatio").is_none(),
        "the reconcile does not write the monitor's fields: {status}"
    );
    assert_eq!(status["observedGeneration"], 1);
    for type_ in ["Ready", "TopologyReady"] {
        let c = condition(&status, type_);
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "TopologyApplied");
        assert_eq!(c["lastTransitionTime"], "1970-01-12T13:46:40Z");
        assert_eq!(c["observedGeneration"], 1);
    }
    assert_eq!(status["tiers"], json!(["5s", "30s"]));
    assert_eq!(
        status["topology"]["queues"],
        json!([
            format!("{q}.dlq"),
            q,
            format!("{q}.retry.5s"),
            format!("{q}.retry.30s")
        ])
    );
    let evs = events(&calls);
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[0].0, "Normal");
    assert_eq!(evs[0].1, "TopologyApplied");
    assert_eq!(
        (evs[1].0.as_str(), evs[1].1.as_str()),
        ("Normal", "RulesApplied")
    );
    assert!(
        evs[0].2.contains(&format!("queue {q}.dlq: created")),
        "{}",
        evs[0].2
    );
    assert_eq!(calls[5].body["regarding"]["name"], "orders");
    assert_eq!(
        calls[5].body["reportingController"],
        "dlqoperator.io/dlq-operator"
    );
    // The topology is really on the broker.
    for queue in [format!("{q}.dlq"), q.clone(), format!("{q}.retry.30s")] {
        assert!(
            mgmt_get(&format!("/api/queues/%2F/{queue}"))
                .await
                .is_some(),
            "{queue} declared"
        );
    }
    let broker_writes = ctx.shared.brokers.request_counts().writes;
    assert!(broker_writes > 0);

    // 3. Steady state: the same object with that status, reconciled three times: reads
    //    only, on the API and on the broker.
    let steady = with_finalizer.status(status);
    for _ in 0..3 {
        dead_letter_queue::reconcile(Arc::new(steady.build()), ctx.clone())
            .await
            .expect("steady");
    }
    let calls = fake.take();
    assert_eq!(
        calls.len(),
        9,
        "three reads (policy, Secret, rule) per reconcile: {calls:#?}"
    );
    assert!(
        calls.iter().all(|c| !c.is_write()),
        "no API write: {calls:#?}"
    );
    assert_eq!(
        ctx.shared.brokers.request_counts().writes,
        broker_writes,
        "no broker write in steady state"
    );
    assert_eq!(
        ctx.shared
            .metrics
            .reconcile_count("DeadLetterQueue", "success"),
        5
    );
    cleanup(&q).await;
}

#[tokio::test]
async fn policy_change_reconciles_dependents_and_replans_tiers() {
    let q = unique("ctl-policy");
    let fake = fake_with_references(json!({"maxRetries": 1, "tiers": ["5s"]}));
    let ctx = context(fake.client(NS));
    let dlq = DlqBuilder::new("orders", &q).finalizer();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(dlq.build()));
    dead_letter_queue::reconcile(Arc::new(dlq.build()), ctx.clone())
        .await
        .expect("first apply");
    let first = status_patch(&fake.take());
    assert_eq!(first["tiers"], json!(["5s"]));

    // The mapper of the RetryPolicy watch: only DeadLetterQueues of the same namespace
    // that reference the policy by name.
    let ar = api_resource::<DeadLetterQueue>();
    let other = DlqBuilder::new("other", "unrelated").spec("/retryPolicyRef/name", json!("p2"));
    let store = vec![Arc::new(dlq.build()), Arc::new(other.build())];
    let refs = referencing(&store, &ar, Some(NS), "/spec/retryPolicyRef/name", "policy");
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].name, "orders");
    let refs = referencing(
        &store,
        &ar,
        Some(NS),
        "/spec/broker/secretRef/name",
        "rabbit",
    );
    assert_eq!(refs.len(), 2, "both use the Secret");

    // The policy changes: the dependent's reconcile plans and creates the new tier.
    fake.put(
        &format!("{RP_PATH}/policy"),
        policy(json!({"maxRetries": 2, "tiers": ["5s", "1m"]})),
    );
    dead_letter_queue::reconcile(Arc::new(dlq.clone().status(first).build()), ctx.clone())
        .await
        .expect("re-plan");
    let calls = fake.take();
    let status = status_patch(&calls);
    assert_eq!(status["tiers"], json!(["5s", "1m"]));
    // The second TopologyApplied of this object is recorded as the Event's series.
    assert!(events(&calls).is_empty(), "{calls:#?}");
    assert_eq!(event_series_counts(&calls), [2]);
    assert!(mgmt_get(&format!("/api/queues/%2F/{q}.retry.1m"))
        .await
        .is_some());
    cleanup(&q).await;
}

#[tokio::test]
async fn retry_policy_status_is_written_once_and_invalid_spec_is_named() {
    let fake = FakeApi::default();
    let ctx = policy_context(fake.client(NS));
    let rp = policy(json!({"maxRetries": 3, "backoff": {"initialDelay": "2s"}}));
    fake.put(&format!("{RP_PATH}/policy"), rp.clone());
    let obj: DynamicObject = serde_json::from_value(rp.clone()).expect("dynamic");
    retry_policy::reconcile(Arc::new(obj), ctx.clone())
        .await
        .expect("status written");
    let calls = fake.take();
    assert_eq!(
        methods_and_paths(&calls),
        [
            ("PATCH".to_string(), format!("{RP_PATH}/policy/status")),
            ("POST".to_string(), EVENTS_PATH.to_string()),
        ]
    );
    let status = status_patch(&calls);
    assert_eq!(status["schedule"], json!(["2s", "4s", "8s"]));
    assert_eq!(status["tiers"], json!(["2s", "4s", "8s"]));
    assert_eq!(status["worstCaseRetryDuration"], "14s");
    assert_eq!(condition(&status, "Ready")["reason"], "Valid");

    // Unchanged: nothing written.
    let mut steady = rp.clone();
    steady["status"] = status;
    let obj: DynamicObject = serde_json::from_value(steady).expect("dynamic");
    retry_policy::reconcile(Arc::new(obj), ctx.clone())
        .await
        .expect("steady");
    assert!(fake.take().is_empty());

    // A field of the wrong type (stored by an older CRD): InvalidSpec naming it, with a
    // Warning Event; never a panic.
    let mut bad = rp;
    bad["spec"]["maxRetries"] = json!("three");
    bad["metadata"]["generation"] = json!(2);
    let obj: DynamicObject = serde_json::from_value(bad).expect("dynamic");
    retry_policy::reconcile(Arc::new(obj), ctx.clone())
        .await
        .expect("reported");
    let calls = fake.take();
    let status = status_patch(&calls);
    let ready = condition(&status, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("spec.maxRetries"),
        "{ready}"
    );
    assert_eq!(
        events(&calls),
        [(
            "Warning".to_string(),
            "InvalidSpec".to_string(),
            ready["message"].as_str().unwrap_or_default().to_string()
        )]
    );
}

#[tokio::test]
async fn invalid_spec_is_reported_without_any_broker_call_and_not_retried() {
    let fake = fake_with_references(json!({}));
    let ctx = context(fake.client(NS));
    // Out of range (the schema's maximum is 255 for a name; here: a retention of 0).
    let bad = DlqBuilder::new("orders", "never-declared")
        .spec("/deadLetter/retention", json!("0s"))
        .finalizer();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(bad.build()));
    let err = dead_letter_queue::reconcile(Arc::new(bad.build()), ctx.clone())
        .await
        .expect_err("invalid");
    assert!(err.is_permanent());
    assert_eq!(err.metric_label(), "invalid_spec");
    assert_eq!(
        error_policy(Arc::new(bad.build()), &err, ctx.clone()),
        Action::await_change()
    );
    let calls = fake.take();
    // References are read, the spec is rejected before any broker client exists.
    let status = status_patch(&calls);
    let ready = condition(&status, "Ready");
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(ready["message"]
        .as_str()
        .unwrap_or_default()
        .contains("spec.deadLetter.retention"));
    assert!(
        ctx.shared.brokers.is_empty(),
        "no broker client was even built"
    );
    assert_eq!(events(&calls)[0].1, "InvalidSpec");

    // A wrong type in the DeadLetterQueue itself: nothing is read at all.
    let undecodable = DlqBuilder::new("orders", "never-declared")
        .spec("/source/queueType", json!(7))
        .finalizer();
    let err = dead_letter_queue::reconcile(Arc::new(undecodable.build()), ctx.clone())
        .await
        .expect_err("invalid");
    assert!(err.is_permanent());
    let calls = fake.take();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(
        (calls[0].method.as_str(), calls[0].path.as_str()),
        ("PATCH", format!("{DLQ_PATH}/orders/status").as_str())
    );
    // The InvalidSpec Event again, as a series of the first one.
    assert_eq!(event_series_counts(&calls), [2]);
    let status = status_patch(&calls);
    assert!(condition(&status, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .contains("spec.source.queueType"));
    assert!(ctx.shared.brokers.is_empty());
}

#[tokio::test]
async fn missing_secret_and_missing_policy_are_conditions_with_backoff() {
    let fake = FakeApi::default();
    let ctx = context(fake.client(NS));
    let dlq = DlqBuilder::new("orders", "never-declared").finalizer();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(dlq.build()));

    let err = dead_letter_queue::reconcile(Arc::new(dlq.build()), ctx.clone())
        .await
        .expect_err("no policy");
    assert_eq!(err.metric_label(), "retry_policy_not_found");
    let calls = fake.take();
    let status = status_patch(&calls);
    let ready = condition(&status, "Ready");
    assert_eq!(ready["reason"], "RetryPolicyNotFound");
    assert!(ready["message"]
        .as_str()
        .unwrap_or_default()
        .contains("team-a/policy"));

    fake.put(&format!("{RP_PATH}/policy"), policy(json!({})));
    let err =
        dead_letter_queue::reconcile(Arc::new(dlq.clone().status(status).build()), ctx.clone())
            .await
            .expect_err("no secret");
    assert_eq!(err.metric_label(), "secret_not_found");
    let calls = fake.take();
    let ready = condition(&status_patch(&calls), "Ready").clone();
    assert_eq!(ready["reason"], "SecretNotFound");
    assert!(ready["message"]
        .as_str()
        .unwrap_or_default()
        .contains("team-a/rabbit"));
    assert_eq!(events(&calls)[0].1, "SecretNotFound");
    assert!(ctx.shared.brokers.is_empty());
    // Not permanent: retried with backoff.
    assert!(matches!(
        error_policy(Arc::new(dlq.build()), &err, ctx.clone()),
        a if a != Action::await_change()
    ));
}

#[tokio::test]
async fn broker_down_is_broker_unreachable_with_growing_backoff() {
    let fake = FakeApi::default();
    fake.put(&format!("{RP_PATH}/policy"), policy(json!({})));
    fake.put(
        &format!("{SECRET_PATH}/rabbit"),
        secret("amqp://guest:guest@127.0.0.1:1/", "http://127.0.0.1:1", "1"),
    );
    let ctx = context(fake.client(NS));
    let dlq = DlqBuilder::new("orders", "never-declared").finalizer();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(dlq.build()));
    let err = dead_letter_queue::reconcile(Arc::new(dlq.build()), ctx.clone())
        .await
        .expect_err("down");
    assert_eq!(err.metric_label(), "unreachable");
    let calls = fake.take();
    let status = status_patch(&calls);
    let ready = condition(&status, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "BrokerUnreachable");
    assert!(
        !ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("guest:guest"),
        "password redacted: {ready}"
    );
    assert_eq!(
        events(&calls)
            .iter()
            .map(|e| (e.0.as_str(), e.1.as_str()))
            .collect::<Vec<_>>(),
        [
            ("Warning", "BrokerUnreachable"),
            ("Warning", "PrometheusOperatorMissing")
        ]
    );
    // No PrometheusRule CRD in this fake cluster: said once, nothing else breaks.
    let rules = condition(&status, "AlertRulesReady");
    assert_eq!(rules["status"], "False");
    assert_eq!(rules["reason"], "PrometheusOperatorMissing");
    assert!(
        calls
            .iter()
            .all(|c| !(c.path.starts_with(RULE_PATH) && c.is_write())),
        "no write to a resource type the server does not serve: {calls:#?}"
    );
    // Per-object exponential backoff: each failure waits up to twice as long, capped.
    let obj = Arc::new(dlq.build());
    let mut limits = Vec::new();
    for _ in 0..8 {
        let action = error_policy(obj.clone(), &err, ctx.clone());
        let n = ctx.backoff.failures("team-a/orders");
        let limit = ctx.backoff.max_delay_ms(n);
        assert!(
            action != Action::await_change(),
            "a transient error is retried"
        );
        limits.push(limit);
    }
    assert_eq!(limits[..3], [5_000, 10_000, 20_000]);
    assert_eq!(limits[7], 300_000, "capped at 5 minutes");
    assert_eq!(
        ctx.shared
            .metrics
            .reconcile_count("DeadLetterQueue", "unreachable"),
        1
    );
}

/// Applies `dlq` once (finalizer already there) and returns its status.
async fn applied(fake: &FakeApi, ctx: &Arc<DeadLetterQueueContext>, dlq: &DlqBuilder) -> Value {
    fake.put(&format!("{DLQ_PATH}/{}", dlq.name), json!(dlq.build()));
    dead_letter_queue::reconcile(Arc::new(dlq.build()), ctx.clone())
        .await
        .expect("applied");
    status_patch(&fake.take())
}

fn finalizer_removed(calls: &[Call]) -> bool {
    calls.iter().any(|c| {
        c.method == "PATCH"
            && !c.path.ends_with("/status")
            && c.body.as_array().is_some_and(|ops| {
                ops.iter()
                    .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0")
            })
    })
}

#[tokio::test]
async fn delete_with_retain_releases_at_once_and_keeps_broker_objects() {
    let q = unique("ctl-retain");
    let fake = fake_with_references(json!({"maxRetries": 1, "tiers": ["5s"]}));
    let ctx = context(fake.client(NS));
    let dlq = DlqBuilder::new("orders", &q).finalizer();
    let status = applied(&fake, &ctx, &dlq).await;
    let before = ctx.shared.brokers.request_counts();

    let deleting = dlq.status(status).deleting();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(deleting.build()));
    let action = dead_letter_queue::reconcile(Arc::new(deleting.build()), ctx.clone())
        .await
        .expect("released");
    assert_eq!(action, Action::await_change());
    let calls = fake.take();
    assert_eq!(
        methods_and_paths(&calls),
        [
            ("POST".to_string(), EVENTS_PATH.to_string()),
            ("PATCH".to_string(), format!("{DLQ_PATH}/orders")),
        ]
    );
    assert_eq!(events(&calls)[0].1, "Retained");
    assert!(finalizer_removed(&calls), "{calls:#?}");
    assert_eq!(
        ctx.shared.brokers.request_counts(),
        before,
        "Retain never calls the broker"
    );
    assert!(mgmt_get(&format!("/api/queues/%2F/{q}.dlq"))
        .await
        .is_some());

    // The same release when the object is already gone (its CRD deleted, or the
    // finalizer removed by hand, under a stale cache): done, not a failed reconcile.
    fake.remove(&format!("{DLQ_PATH}/orders"));
    let action = dead_letter_queue::reconcile(Arc::new(deleting.build()), ctx.clone())
        .await
        .expect("an object that is gone needs nothing more");
    assert_eq!(action, Action::await_change());
    assert!(finalizer_removed(&fake.take()), "the removal was tried");
    assert_eq!(
        ctx.shared
            .metrics
            .reconcile_count("DeadLetterQueue", "finalizer_patch"),
        0
    );
    cleanup(&q).await;
}

#[tokio::test]
async fn delete_with_delete_removes_an_empty_topology_and_never_a_queue_with_messages() {
    let q = unique("ctl-delete");
    let fake = fake_with_references(json!({"maxRetries": 1, "tiers": ["5s"]}));
    let ctx = context(fake.client(NS));
    let dlq = DlqBuilder::new("orders", &q)
        .spec("/source/queueType", json!("Quorum"))
        .finalizer();
    let mut spec_delete = dlq.clone();
    spec_delete.spec["deletionPolicy"] = json!("Delete");
    let status = applied(&fake, &ctx, &spec_delete).await;

    // A message in the DLQ: nothing is deleted, the finalizer stays, Ready=False
    // DeletionBlocked with a Warning Event.
    common::publish_persistent(&format!("{q}.dlq"), 3).await;
    let deleting = spec_delete.clone().status(status.clone()).deleting();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(deleting.build()));
    let err = dead_letter_queue::reconcile(Arc::new(deleting.build()), ctx.clone())
        .await
        .expect_err("blocked");
    assert_eq!(err.metric_label(), "deletion_blocked");
    let calls = fake.take();
    assert!(!finalizer_removed(&calls), "finalizer kept: {calls:#?}");
    let blocked_status = status_patch(&calls);
    let ready = condition(&blocked_status, "Ready");
    assert_eq!(ready["reason"], "DeletionBlocked");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("queue \"{q}.dlq\" holds 3 message(s)")),
        "{ready}"
    );
    assert_eq!(events(&calls)[0].1, "DeletionBlocked");
    assert_eq!(
        common::passive_ready_count(AMQP, &format!("{q}.dlq")).await,
        3
    );
    for kept in [format!("{q}.dlx"), format!("{q}.retry")] {
        assert!(
            mgmt_get(&format!("/api/exchanges/%2F/{kept}"))
                .await
                .is_some(),
            "nothing removed while blocked: {kept}"
        );
    }

    // Drained: the next attempt removes everything but the source queue.
    common::mgmt_delete(&format!("/api/queues/%2F/{q}.dlq/contents")).await;
    let deleting = spec_delete.status(blocked_status).deleting();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(deleting.build()));
    dead_letter_queue::reconcile(Arc::new(deleting.build()), ctx.clone())
        .await
        .expect("deleted");
    let calls = fake.take();
    assert!(finalizer_removed(&calls), "{calls:#?}");
    assert_eq!(events(&calls)[0].1, "TopologyDeleted");
    for gone in [
        format!("/api/queues/%2F/{q}.dlq"),
        format!("/api/queues/%2F/{q}.retry.5s"),
        format!("/api/exchanges/%2F/{q}.dlx"),
        format!("/api/exchanges/%2F/{q}.retry"),
        format!("/api/policies/%2F/dlq-operator.{q}"),
    ] {
        assert!(mgmt_get(&gone).await.is_none(), "{gone} removed");
    }
    assert!(
        mgmt_get(&format!("/api/queues/%2F/{q}")).await.is_some(),
        "the source queue is never deleted"
    );
    cleanup(&q).await;
}

#[tokio::test]
async fn delete_when_secret_is_gone_or_nothing_was_created_releases_with_an_event() {
    let fake = FakeApi::default();
    fake.put(&format!("{RP_PATH}/policy"), policy(json!({})));
    let ctx = context(fake.client(NS));
    let mut dlq = DlqBuilder::new("orders", "never-declared").finalizer();
    dlq.spec["deletionPolicy"] = json!("Delete");
    // Never applied (no status.topology): released without reaching any broker.
    let never = dlq.clone().deleting();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(never.build()));
    dead_letter_queue::reconcile(Arc::new(never.build()), ctx.clone())
        .await
        .expect("released");
    let calls = fake.take();
    assert!(finalizer_removed(&calls));
    assert_eq!(events(&calls)[0].1, "TopologyDeleted");

    // Applied once, but the Secret is gone now: released with a Warning naming it.
    let applied_once = dlq
        .status(json!({"topology": {"queues": ["x.dlq"], "exchanges": [], "policies": []}}))
        .deleting();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(applied_once.build()));
    dead_letter_queue::reconcile(Arc::new(applied_once.build()), ctx.clone())
        .await
        .expect("released");
    let calls = fake.take();
    assert!(finalizer_removed(&calls));
    let evs = events(&calls);
    assert_eq!(evs[0].0, "Warning");
    assert_eq!(evs[0].1, "SecretNotFound");
    assert!(evs[0].2.contains("x.dlq"), "{}", evs[0].2);
    assert!(ctx.shared.brokers.is_empty());
    fake.remove(&format!("{DLQ_PATH}/orders"));
}

#[tokio::test]
async fn errors_have_one_metric_label_each_and_stale_finalizer_patches_retry_at_once() {
    let e = Error::DeletionBlocked("x".into());
    assert_eq!(e.metric_label(), "deletion_blocked");
    assert!(!e.is_permanent());
    assert_eq!(Error::NoNamespace.metric_label(), "no_namespace");

    // A finalizer patch refused because the cached copy was stale: retried at once,
    // without growing the object's backoff; other API errors back off.
    let api_error = |code: u16| {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "message": "the server rejected our request", "reason": "Invalid", "code": code
        }))
        .expect("status");
        kube::Error::Api(Box::new(status))
    };
    let stale = Error::Finalizer(Box::new(kube::runtime::finalizer::Error::AddFinalizer(
        api_error(422),
    )));
    assert!(stale.is_stale_finalizer_patch());
    let forbidden = Error::Finalizer(Box::new(kube::runtime::finalizer::Error::AddFinalizer(
        api_error(403),
    )));
    assert!(!forbidden.is_stale_finalizer_patch());
    // Removing the finalizer of an object that is already gone is no failure.
    let gone = Error::Finalizer(Box::new(kube::runtime::finalizer::Error::RemoveFinalizer(
        api_error(404),
    )));
    assert!(gone.is_removal_from_gone_object());
    assert!(!stale.is_removal_from_gone_object());
    assert!(
        !Error::Finalizer(Box::new(kube::runtime::finalizer::Error::AddFinalizer(
            api_error(404)
        )))
        .is_removal_from_gone_object()
    );
    let ctx = context(FakeApi::default().client(NS));
    let obj = Arc::new(DlqBuilder::new("orders", "q").build());
    assert_eq!(
        error_policy(obj.clone(), &stale, ctx.clone()),
        Action::requeue(std::time::Duration::from_secs(1))
    );
    assert_eq!(ctx.backoff.failures("team-a/orders"), 0);
    error_policy(obj, &forbidden, ctx.clone());
    assert_eq!(ctx.backoff.failures("team-a/orders"), 1);
}

#[tokio::test]
async fn missing_crd_is_waited_for_with_readyz_saying_why_then_shutdown_drains() {
    let fake = FakeApi::default();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let opts = dlq_operator::controller::Options {
        namespace: Some(NS.into()),
        selector: None,
        leader_election: false,
        lease_name: "unused".into(),
        lease_namespace: None,
        identity: "test".into(),
        lease_duration_s: 15,
        metrics_addr: format!("127.0.0.1:{port}").parse().expect("addr"),
        resync: std::time::Duration::from_secs(300),
        concurrency: 1,
        embedded_router: true,
        maturity_weights: Default::default(),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(dlq_operator::controller::run(
        fake.client(NS),
        opts,
        stop.clone(),
    ));
    let readyz = || async move {
        loop {
            if let Ok(r) = reqwest::get(format!("http://127.0.0.1:{port}/readyz")).await {
                return (r.status().as_u16(), r.text().await.unwrap_or_default());
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    // No CRD: the list answers 404; not ready, and /readyz says what to do.
    let mut waited = readyz().await;
    for _ in 0..100 {
        if waited.1.contains("not installed") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        waited = readyz().await;
    }
    assert_eq!(waited.0, 503);
    assert!(
        waited
            .1
            .contains("CRD deadletterqueues.dlqoperator.io is not installed")
            && waited.1.contains("kubectl create -f crds/"),
        "{waited:?}"
    );
    assert!(
        !run.is_finished(),
        "a missing CRD is waited for, not a crash"
    );
    let calls = fake.take();
    assert!(
        calls
            .iter()
            .all(|c| c.method == "GET" && c.path == DLQ_PATH),
        "only the CRD probe so far: {calls:#?}"
    );

    // The CRDs appear: ready within the probe interval (5 s).
    let list = |kind: &str| {
        json!({"apiVersion": "dlqoperator.io/v1alpha1", "kind": kind,
                                   "metadata": {"resourceVersion": "1"}, "items": []})
    };
    fake.put(DLQ_PATH, list("DeadLetterQueueList"));
    fake.put(RP_PATH, list("RetryPolicyList"));
    // The DeadLetterReplay CRD is waited for too, with the same probe.
    let mut waited = readyz().await;
    for _ in 0..200 {
        if waited.1.contains("deadletterreplays") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        waited = readyz().await;
    }
    assert_eq!(waited.0, 503);
    assert!(
        waited
            .1
            .contains("CRD deadletterreplays.dlqoperator.io is not installed"),
        "{waited:?}"
    );
    let probes: Vec<(String, String)> = fake
        .take()
        .iter()
        .map(|c| (c.path.clone(), c.query.clone()))
        .collect();
    for path in [DLQ_PATH, RP_PATH, REPLAY_PATH] {
        assert!(
            probes
                .iter()
                .any(|(p, q)| p == path && q.contains("limit=1")),
            "a list probe of {path}: {probes:#?}"
        );
    }
    fake.put(REPLAY_PATH, list("DeadLetterReplayList"));
    let mut status = readyz().await;
    for _ in 0..200 {
        if status.0 == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        status = readyz().await;
    }
    assert_eq!(status, (200, "ok".to_string()));

    // SIGTERM (the shutdown signal): controllers drain and run returns Ok.
    stop.cancel();
    let result = tokio::time::timeout(std::time::Duration::from_secs(20), run)
        .await
        .expect("stops within 20 s")
        .expect("task");
    assert!(result.is_ok(), "{result:?}");
}

/// A controller store holding `objects`, as the DeadLetterQueue watch fills it.
fn store_of(objects: &[DynamicObject]) -> kube::runtime::reflector::Store<DynamicObject> {
    let mut writer = kube::runtime::reflector::store::Writer::<DynamicObject>::new(api_resource::<
        DeadLetterQueue,
    >());
    for o in objects {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o.clone()));
    }
    writer.as_reader()
}

#[tokio::test]
async fn a_second_resource_on_the_same_source_queue_is_a_name_conflict_without_broker_calls() {
    let q = unique("ctl-conflict");
    let fake = fake_with_references(json!({"maxRetries": 1, "tiers": ["5s"]}));
    let ctx = context(fake.client(NS));
    let mut first = DlqBuilder::new("first", &q).finalizer();
    first.spec["deletionPolicy"] = json!("Delete");
    let mut second = DlqBuilder::new("second", &q).finalizer();
    second.spec["deletionPolicy"] = json!("Delete");
    let mut older = first.build();
    older.metadata.creation_timestamp = Some(at(100));
    let mut newer = second.build();
    newer.metadata.creation_timestamp = Some(at(200));
    let _ = ctx
        .dead_letter_queues
        .set(store_of(&[older.clone(), newer.clone()]));

    fake.put(&format!("{DLQ_PATH}/second"), json!(newer));
    let err = dead_letter_queue::reconcile(Arc::new(newer.clone()), ctx.clone())
        .await
        .expect_err("conflict");
    assert_eq!(err.metric_label(), "name_conflict");
    let calls = fake.take();
    let ready = condition(&status_patch(&calls), "Ready").clone();
    assert_eq!(ready["reason"], "NameConflict");
    assert_eq!(
        ready["message"],
        format!("spec.source.queue: queue \"{q}\" is already managed by DeadLetterQueue team-a/first on the same broker and vhost; each queue and exchange belongs to one DeadLetterQueue")
    );
    let counts = ctx.shared.brokers.request_counts();
    assert_eq!(
        (counts.reads, counts.writes),
        (0, 0),
        "no broker request for the newer one"
    );

    // The older one applies; deleting the newer (which never applied) touches nothing.
    fake.put(&format!("{DLQ_PATH}/first"), json!(older));
    dead_letter_queue::reconcile(Arc::new(older.clone()), ctx.clone())
        .await
        .expect("older applies");
    fake.take();
    let mut deleting = second.deleting().status(json!({"conditions": []})).build();
    deleting.metadata.creation_timestamp = Some(at(200));
    fake.put(&format!("{DLQ_PATH}/second"), json!(deleting));
    dead_letter_queue::reconcile(Arc::new(deleting), ctx.clone())
        .await
        .expect("released");
    assert!(
        mgmt_get(&format!("/api/queues/%2F/{q}.dlq"))
            .await
            .is_some(),
        "the older one's DLQ stays"
    );
    assert!(mgmt_get(&format!("/api/exchanges/%2F/{q}.dlx"))
        .await
        .is_some());
    cleanup(&q).await;
}

#[tokio::test]
async fn delete_after_the_source_queue_was_edited_touches_nothing() {
    let q = unique("ctl-edited");
    let other = unique("ctl-other");
    let fake = fake_with_references(json!({"maxRetries": 1, "tiers": ["5s"]}));
    let ctx = context(fake.client(NS));
    let mut dlq = DlqBuilder::new("orders", &q).finalizer();
    dlq.spec["deletionPolicy"] = json!("Delete");
    let status = applied(&fake, &ctx, &dlq).await;
    // Someone else's topology under the name the spec is edited to.
    let mut victim = DlqBuilder::new("victim", &other).finalizer();
    victim.spec["deletionPolicy"] = json!("Retain");
    applied(&fake, &ctx, &victim).await;

    // Only the dead-letter queue renamed: still blocked (deleting the rest and
    // forgetting the recorded dead-letter queue would orphan its messages).
    common::publish_persistent(&format!("{q}.dlq"), 1).await;
    let renamed = dlq
        .clone()
        .spec(
            "/deadLetter",
            json!({"retention": "1h", "queue": format!("{q}.dead")}),
        )
        .status(status.clone())
        .deleting();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(renamed.build()));
    let err = dead_letter_queue::reconcile(Arc::new(renamed.build()), ctx.clone())
        .await
        .expect_err("blocked");
    assert_eq!(err.metric_label(), "deletion_blocked");
    fake.take();
    assert!(mgmt_get(&format!("/api/exchanges/%2F/{q}.retry"))
        .await
        .is_some());
    assert_eq!(
        common::passive_ready_count(AMQP, &format!("{q}.dlq")).await,
        1
    );

    let edited = dlq
        .spec("/source/queue", json!(other))
        .status(status)
        .deleting();
    fake.put(&format!("{DLQ_PATH}/orders"), json!(edited.build()));
    let err = dead_letter_queue::reconcile(Arc::new(edited.build()), ctx.clone())
        .await
        .expect_err("blocked");
    assert_eq!(err.metric_label(), "deletion_blocked");
    let calls = fake.take();
    let ready = condition(&status_patch(&calls), "Ready").clone();
    assert_eq!(ready["reason"], "DeletionBlocked");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the spec no longer plans what this resource created"),
        "{ready}"
    );
    for kept in [
        format!("/api/queues/%2F/{other}.dlq"),
        format!("/api/exchanges/%2F/{other}.dlx"),
        format!("/api/queues/%2F/{q}.dlq"),
    ] {
        assert!(mgmt_get(&kept).await.is_some(), "{kept} kept");
    }
    common::mgmt_delete(&format!("/api/queues/%2F/{q}.dlq/contents")).await;
    cleanup(&q).await;
    cleanup(&other).await;
}

/// A DeadLetterReplay as the API server would send it.
fn replay_object(name: &str, spec: Value, status: Option<Value>) -> DynamicObject {
    let mut obj = json!({
        "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterReplay",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "generation": 1, "resourceVersion": "1"},
        "spec": spec,
    });
    if let Some(s) = status {
        obj["status"] = s;
    }
    serde_json::from_value(obj).expect("dynamic object")
}

#[tokio::test]
async fn replay_waits_for_its_dead_letter_queue_and_fails_on_an_invalid_spec() {
    let fake = FakeApi::default();
    let ctx = replay_context(fake.client(NS));
    let spec = json!({"deadLetterQueueRef": {"name": "orders"}, "filter": ["class=Timeout"]});
    let r = replay_object("again", spec.clone(), None);
    fake.put(&format!("{REPLAY_PATH}/again"), json!(r));

    // No DeadLetterQueue: Pending, one Warning, looked at again after PENDING_RECHECK.
    let action = dead_letter_replay::reconcile(Arc::new(r), ctx.clone())
        .await
        .expect("waiting is not a failed reconcile");
    assert_eq!(action, Action::requeue(dead_letter_replay::PENDING_RECHECK));
    let calls = fake.take();
    assert_eq!(
        methods_and_paths(&calls),
        [
            ("GET".to_string(), format!("{DLQ_PATH}/orders")),
            ("PATCH".to_string(), format!("{REPLAY_PATH}/again/status")),
            ("POST".to_string(), EVENTS_PATH.to_string()),
        ]
    );
    let status = status_patch(&calls);
    assert_eq!(status["phase"], "Pending");
    let complete = condition(&status, "Complete");
    assert_eq!(complete["status"], "False");
    assert_eq!(complete["reason"], "DeadLetterQueueNotFound");
    assert_eq!(
        complete["message"],
        "spec.deadLetterQueueRef.name: DeadLetterQueue team-a/orders not found"
    );
    assert_eq!(
        events(&calls),
        [(
            "Warning".to_string(),
            "DeadLetterQueueNotFound".to_string(),
            "spec.deadLetterQueueRef.name: DeadLetterQueue team-a/orders not found".to_string()
        )]
    );

    // The same state again: the read only, no write, no Event.
    let pending = replay_object("again", spec.clone(), Some(status));
    dead_letter_replay::reconcile(Arc::new(pending.clone()), ctx.clone())
        .await
        .expect("pending");
    assert_eq!(
        methods_and_paths(&fake.take()),
        [("GET".to_string(), format!("{DLQ_PATH}/orders"))]
    );

    // The DeadLetterQueue appears, but not its RetryPolicy (nor its Secret).
    fake.put(
        &format!("{DLQ_PATH}/orders"),
        json!(DlqBuilder::new("orders", "never-declared").build()),
    );
    dead_letter_replay::reconcile(Arc::new(pending), ctx.clone())
        .await
        .expect("pending");
    let calls = fake.take();
    assert_eq!(
        methods_and_paths(&calls),
        [
            ("GET".to_string(), format!("{DLQ_PATH}/orders")),
            ("GET".to_string(), format!("{RP_PATH}/policy")),
            ("GET".to_string(), format!("{SECRET_PATH}/rabbit")),
            ("PATCH".to_string(), format!("{REPLAY_PATH}/again/status")),
            ("POST".to_string(), EVENTS_PATH.to_string()),
        ]
    );
    let complete = condition(&status_patch(&calls), "Complete").clone();
    assert_eq!(complete["reason"], "RetryPolicyNotFound");
    assert_eq!(
        complete["message"],
        "DeadLetterQueue team-a/orders: spec.retryPolicyRef.name: RetryPolicy team-a/policy not found"
    );
    assert_eq!(ctx.replays.len(), 0, "nothing started");

    // An invalid filter: Failed at once, naming the term; nothing else is read.
    let bad_spec = json!({"deadLetterQueueRef": {"name": "orders"},
                          "filter": ["class=Timeout", "age>=1h"]});
    let bad = replay_object("bad", bad_spec.clone(), None);
    fake.put(&format!("{REPLAY_PATH}/bad"), json!(bad));
    let action = dead_letter_replay::reconcile(Arc::new(bad), ctx.clone())
        .await
        .expect("invalid spec is reported, not retried");
    assert_eq!(action, Action::await_change());
    let calls = fake.take();
    assert_eq!(
        methods_and_paths(&calls),
        [
            ("PATCH".to_string(), format!("{REPLAY_PATH}/bad/status")),
            ("POST".to_string(), EVENTS_PATH.to_string()),
        ]
    );
    let status = status_patch(&calls);
    assert_eq!(status["phase"], "Failed");
    assert!(status["completionTime"].is_string(), "{status}");
    let complete = condition(&status, "Complete");
    assert_eq!(
        (&complete["status"], &complete["reason"]),
        (&json!("True"), &json!("InvalidSpec"))
    );
    assert!(
        complete["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("spec.filter[1]: "),
        "{complete}"
    );
    assert_eq!(events(&calls)[0].1, "InvalidSpec");

    // Finished: never looked at again.
    let failed = replay_object("bad", bad_spec, Some(status));
    let action = dead_letter_replay::reconcile(Arc::new(failed), ctx.clone())
        .await
        .expect("finished");
    assert_eq!(action, Action::await_change());
    assert!(fake.take().is_empty(), "a finished replay makes no call");
}
