//! The backlog monitor's polls against the mock Kubernetes API
//! ([`MockApi`]: every call recorded) and the in-memory broker ([`FakeBroker`]): the
//! `RouterReady` condition and its Events through the real status writes, one listing
//! per poll, and no API call at all in a steady state.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

use kube::api::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::{json, Value};

use super::{Monitor, MonitorContext, Targets};
use crate::broker::message::{Headers, Message};
use crate::broker::BrokerTopology;
use crate::collector::Collector;
use crate::controller::mock_api::{Call, MockApi, API, NS};
use crate::crd::DeadLetterQueue;
use crate::fake::FakeBroker;
use crate::monitor::Params;
use crate::object::api_resource;
use crate::topology::DesiredTopology;

/// The status path of the fixture DeadLetterQueue `orders`.
const STATUS_PATH: &str =
    "/apis/dlqoperator.io/v1alpha1/namespaces/team-a/deadletterqueues/orders/status";

/// The DeadLetterQueue `orders` on queue `orders` with `router` as `spec.router`.
fn dead_letter_queue(router: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
        "metadata": {"name": "orders", "namespace": NS, "uid": "uid-orders", "generation": 1,
                     "resourceVersion": "1"},
        "spec": {"broker": {"secretRef": {"name": "rabbit"}},
                 "source": {"queue": "orders", "queueType": "Classic"},
                 "retryPolicyRef": {"name": "policy"},
                 "monitoring": {"interval": "10s", "threshold": 100},
                 "router": router}}))
    .expect("dynamic object")
}

/// The plan and monitoring parameters of `obj`.
fn planned(obj: &DynamicObject) -> (DesiredTopology, Params) {
    let dlq: DeadLetterQueue = crate::object::decode(obj).expect("decodes");
    let policy = crate::backoff::ResolvedPolicy::from_spec(
        &serde_json::from_value(json!({"maxRetries": 2, "tiers": ["5s"]})).expect("policy"),
    )
    .expect("resolves");
    let params = Params::from_spec(&dlq.spec.monitoring).expect("params");
    (
        crate::topology::plan("team-a/orders", &dlq.spec, &policy),
        params,
    )
}

/// A monitor over the mock API and `broker`, watching `obj` (served by the mock and in
/// the controller's store), its clock at `clock` seconds after the epoch.
fn monitor(
    api: &MockApi,
    broker: &FakeBroker,
    obj: &DynamicObject,
    clock: &Arc<AtomicI64>,
) -> Monitor {
    api.put(&format!("{API}/deadletterqueues/orders"), json!(obj));
    let mut shared = (*api.context(broker)).clone();
    let clock = clock.clone();
    shared.clock =
        Arc::new(move || crate::controller::test_support::at(clock.load(Ordering::SeqCst)));
    let shared = Arc::new(shared);
    let mut writer = Writer::<DynamicObject>::new(api_resource::<DeadLetterQueue>());
    writer.apply_watcher_event(&watcher::Event::Apply(obj.clone()));
    let store = Arc::new(OnceLock::new());
    let _ = store.set(writer.as_reader());
    let ctx = MonitorContext {
        recorder: shared.recorder(),
        shared,
        dead_letter_queues: store,
        dead_letter_replays: Arc::new(OnceLock::new()),
        retry_policies: Arc::new(OnceLock::new()),
        targets: Arc::new(Targets::default()),
    };
    Monitor {
        collector: Collector::new(ctx.shared.metrics.clone()),
        ctx,
        written: Default::default(),
        polled: Default::default(),
    }
}

/// Registers `obj` with the monitor as the reconcile does.
fn watch(m: &Monitor, broker: &FakeBroker, obj: &DynamicObject) {
    let (topology, params) = planned(obj);
    let dlq: DeadLetterQueue = crate::object::decode(obj).expect("decodes");
    m.ctx.targets.watch(
        obj,
        &topology,
        &params,
        Arc::new(broker.clone()),
        "team-a/rabbit@1".into(),
        dlq.spec,
    );
}

/// One poll at `t` s on the monitor's clock (whatever the interval), and the API calls
/// it made.
async fn poll(m: &mut Monitor, api: &MockApi, clock: &AtomicI64, t: i64) -> Vec<Call> {
    clock.store(t, Ordering::SeqCst);
    m.polled.clear();
    m.tick().await;
    api.take()
}

/// The status patches among `calls`, their bodies' `status`.
fn status_patches(calls: &[Call]) -> Vec<Value> {
    calls
        .iter()
        .filter(|c| c.0 == "PATCH" && c.1 == STATUS_PATH)
        .map(|c| c.2["status"].clone())
        .collect()
}

/// `RouterReady`'s status and reason in `status`, if present.
fn router_ready(status: &Value) -> Option<(String, String)> {
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "RouterReady")?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason")))
}

/// The Events posted among `calls`: (type, reason).
fn reasons(calls: &[Call]) -> Vec<(&str, &str)> {
    calls
        .iter()
        .filter(|c| c.0 == "POST" && c.1.contains("/events"))
        .map(|c| {
            let text = |k: &str| c.2[k].as_str().unwrap_or_default();
            (text("type"), text("reason"))
        })
        .collect()
}

/// The Events posted among `calls`: (type, reason, note).
fn events(calls: &[Call]) -> Vec<(String, String, String)> {
    calls
        .iter()
        .filter(|c| c.0 == "POST" && c.1.contains("/events"))
        .map(|c| {
            let text = |k: &str| c.2[k].as_str().unwrap_or_default().to_string();
            (text("type"), text("reason"), text("note"))
        })
        .collect()
}

#[tokio::test]
async fn router_ready_and_its_events_follow_the_inbox_with_no_write_in_a_steady_state() {
    let broker = FakeBroker::new();
    let api = MockApi::default().with_references();
    let clock = Arc::new(AtomicI64::new(1_000));
    let obj = dead_letter_queue(json!({"enabled": true, "backlogThreshold": 2}));
    broker
        .apply(&planned(&obj).0)
        .await
        .expect("topology on the fake broker");
    let mut m = monitor(&api, &broker, &obj, &clock);
    watch(&m, &broker, &obj);
    let nothing = Vec::<Call>::new();

    // No router yet: one listing; the backlog part is written, RouterReady not yet (a
    // router may still be connecting: the grace period).
    let reads = broker.request_counts().reads;
    let calls = poll(&mut m, &api, &clock, 1_000).await;
    assert_eq!(
        broker.request_counts().reads - reads,
        1,
        "one listing for the vhost"
    );
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "{calls:#?}");
    assert_eq!(router_ready(&patches[0]), None);
    assert_eq!(patches[0]["depth"]["inbox"], 0);
    assert!(events(&calls).is_empty());
    let metrics = m.ctx.shared.metrics.render();
    assert!(
        metrics.contains(r#"dlq_router_inbox_consumers{name="orders",namespace="team-a"} 0"#),
        "{metrics}"
    );
    assert_eq!(poll(&mut m, &api, &clock, 1_030).await, nothing, "grace");

    // No consumer for the grace period (60 s): NoConsumer, one write and one Warning.
    let calls = poll(&mut m, &api, &clock, 1_060).await;
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "{calls:#?}");
    assert_eq!(
        router_ready(&patches[0]),
        Some(("False".into(), "NoConsumer".into()))
    );
    let ev = events(&calls);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].0.as_str(), ev[0].1.as_str()),
        ("Warning", "NoConsumer")
    );
    assert!(
        ev[0].2.starts_with(
            "no retry router consumes orders.router; failed messages wait there, nothing is lost; start one:"
        ),
        "{}",
        ev[0].2
    );
    // Steady: not one API call.
    assert_eq!(poll(&mut m, &api, &clock, 1_061).await, nothing);

    // A failed message waits in the inbox: still NoConsumer, no new Event; the depth is
    // a figure, written at most once a minute.
    broker.publish(
        "/",
        "",
        "orders.router",
        Message::new(Headers::new(), b"m1"),
    );
    assert_eq!(poll(&mut m, &api, &clock, 1_062).await, nothing);

    // A router consumes: True, Consuming; a Normal Event.
    broker.set_consumers("/", "orders.router", 1);
    let calls = poll(&mut m, &api, &clock, 1_063).await;
    let patches = status_patches(&calls);
    assert_eq!(
        patches.iter().map(router_ready).collect::<Vec<_>>(),
        [Some(("True".into(), "Consuming".into()))]
    );
    assert_eq!(reasons(&calls), [("Normal", "RouterConsuming")]);
    assert_eq!(poll(&mut m, &api, &clock, 1_064).await, nothing, "steady");

    // It restarts: gone for a poll or two within the grace period, nothing is said.
    broker.set_consumers("/", "orders.router", 0);
    assert_eq!(poll(&mut m, &api, &clock, 1_065).await, nothing);
    assert_eq!(poll(&mut m, &api, &clock, 1_100).await, nothing);
    broker.set_consumers("/", "orders.router", 1);
    assert_eq!(poll(&mut m, &api, &clock, 1_110).await, nothing);

    // More than backlogThreshold (2) messages: InboxBackedUp, a Warning.
    for body in [b"m2", b"m3"] {
        broker.publish("/", "", "orders.router", Message::new(Headers::new(), body));
    }
    let calls = poll(&mut m, &api, &clock, 1_111).await;
    assert_eq!(
        status_patches(&calls)
            .iter()
            .map(router_ready)
            .collect::<Vec<_>>(),
        [Some(("False".into(), "InboxBackedUp".into()))]
    );
    assert_eq!(reasons(&calls), [("Warning", "InboxBackedUp")]);
    assert_eq!(poll(&mut m, &api, &clock, 1_112).await, nothing, "steady");

    // Router mode turned off: the condition goes (the monitor applies its part without
    // it), with no Event and no consumers series.
    let off = dead_letter_queue(json!({"enabled": false}));
    watch(&m, &broker, &off);
    let calls = poll(&mut m, &api, &clock, 1_113).await;
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "{calls:#?}");
    assert_eq!(router_ready(&patches[0]), None);
    assert!(patches[0]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "BacklogHigh")));
    assert!(events(&calls).is_empty());
    assert!(!m
        .ctx
        .shared
        .metrics
        .render()
        .contains("dlq_router_inbox_consumers{"));
    assert_eq!(poll(&mut m, &api, &clock, 1_114).await, nothing, "steady");
}

#[tokio::test]
async fn outside_router_mode_there_is_no_router_ready_condition() {
    let broker = FakeBroker::new();
    let api = MockApi::default().with_references();
    let obj = dead_letter_queue(json!({"enabled": false}));
    broker.apply(&planned(&obj).0).await.expect("topology");
    let clock = Arc::new(AtomicI64::new(1_000));
    let mut m = monitor(&api, &broker, &obj, &clock);
    watch(&m, &broker, &obj);
    let calls = poll(&mut m, &api, &clock, 1_000).await;
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "{calls:#?}");
    assert_eq!(router_ready(&patches[0]), None);
    assert!(patches[0]["depth"].get("inbox").is_none());
    assert!(events(&calls).is_empty());
}

/// `status.maturity.score` in a status patch.
fn maturity_score(status: &Value) -> f64 {
    status["maturity"]["score"]
        .as_f64()
        .expect("status.maturity.score")
}

/// The score of the items that hold, from their shares under the default weights, to 3
/// decimals as status writes it.
fn expected_score(items: &[crate::maturity::Item]) -> f64 {
    let w = crate::maturity::Weights::default();
    let sum: f64 = items.iter().map(|i| crate::maturity::share(*i, &w)).sum();
    (sum * 1000.0).round() / 1000.0
}

#[tokio::test]
async fn maturity_is_written_when_it_changes_and_never_in_a_steady_state() {
    use crate::maturity::Item;
    let broker = FakeBroker::new();
    let api = MockApi::default().with_references();
    let clock = Arc::new(AtomicI64::new(1_000));
    // A classic source with a threshold, the default overflow and classification, no
    // growth rule, its PrometheusRule not (yet) applied, nothing seen.
    let obj = dead_letter_queue(json!({"enabled": false}));
    broker.apply(&planned(&obj).0).await.expect("topology");
    let mut m = monitor(&api, &broker, &obj, &clock);
    let mut replays = Writer::<DynamicObject>::new(api_resource::<crate::crd::DeadLetterReplay>());
    let _ = m.ctx.dead_letter_replays.set(replays.as_reader());
    // Its RetryPolicy `policy`, Ready (as the controller's store of RetryPolicies has it).
    let mut policies = Writer::<DynamicObject>::new(api_resource::<crate::crd::RetryPolicy>());
    let _ = m.ctx.retry_policies.set(policies.as_reader());
    let policy = |ready: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "dlqoperator.io/v1alpha1", "kind": "RetryPolicy",
            "metadata": {"name": "policy", "namespace": NS, "uid": "uid-policy"},
            "spec": {"maxRetries": 2},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Valid",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
        .expect("policy")
    };
    policies.apply_watcher_event(&watcher::Event::Apply(policy("True")));
    watch(&m, &broker, &obj);
    // Nothing is scored before both stores have their first listing.
    let calls = poll(&mut m, &api, &clock, 990).await;
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "the backlog part: {calls:#?}");
    assert!(patches[0].get("maturity").is_none(), "{:#?}", patches[0]);
    // The first listing (the watcher's Init, InitApply…, InitDone) has the policy.
    policies.apply_watcher_event(&watcher::Event::Init);
    policies.apply_watcher_event(&watcher::Event::InitApply(policy("True")));
    policies.apply_watcher_event(&watcher::Event::InitDone);
    replays.apply_watcher_event(&watcher::Event::InitDone);
    let holding = vec![
        Item::RetryPolicyReady,
        Item::NonRetryableClasses,
        Item::RetentionAndCapacity,
        Item::Threshold,
    ];

    let calls = poll(&mut m, &api, &clock, 1_000).await;
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "{calls:#?}");
    assert_eq!(maturity_score(&patches[0]), expected_score(&holding));
    let missing = patches[0]["maturity"]["missing"]
        .as_array()
        .expect("missing");
    assert_eq!(
        missing.len(),
        Item::ALL.len() - holding.len(),
        "{missing:?}"
    );
    assert!(patches[0]["maturity"].get("retriesSeenTime").is_none());
    let metrics = m.ctx.shared.metrics.render();
    assert!(
        metrics.contains(&format!(
            r#"dlq_maturity_score{{name="orders",namespace="team-a"}} {}"#,
            crate::maturity::evaluate(
                &crate::maturity::Facts {
                    spec: &crate::object::decode::<DeadLetterQueue>(&obj)
                        .expect("decodes")
                        .spec,
                    policy: crate::maturity::Policy::Found {
                        spec: &serde_json::from_value(json!({"maxRetries": 2})).expect("spec"),
                        ready: true,
                    },
                    live: crate::maturity::Live::default(),
                },
                &crate::maturity::Weights::default()
            )
            .score
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"dlq_maturity_area_score{area="deadLetter",name="orders",namespace="team-a"} 0.25"#
        ),
        "{metrics}"
    );
    let nothing = Vec::<Call>::new();
    assert_eq!(poll(&mut m, &api, &clock, 1_010).await, nothing, "steady");

    // A message waits in a retry tier: retries are live from now on, one write.
    broker.publish(
        "/",
        "",
        "orders.retry.5s",
        Message::new(Headers::new(), b"r1"),
    );
    let calls = poll(&mut m, &api, &clock, 1_011).await;
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "{calls:#?}");
    let mut holding = holding;
    holding.push(Item::LiveRetryPath);
    assert_eq!(maturity_score(&patches[0]), expected_score(&holding));
    assert_eq!(
        patches[0]["maturity"]["retriesSeenTime"],
        crate::controller::test_support::at(1_011).0.to_string()
    );
    // Only the maturity changed (the depth is a figure, written at most every minute).
    assert_eq!(patches[0]["depth"]["retry"]["5s"], 0, "{:#?}", patches[0]);
    assert_eq!(poll(&mut m, &api, &clock, 1_012).await, nothing, "steady");

    // Another resource's replay and a dry run of its own do not count; a replay of it that
    // replayed messages does.
    let replay = |name: &str, dlq: &str, dry_run: bool| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterReplay",
            "metadata": {"name": name, "namespace": NS, "uid": name},
            "spec": {"deadLetterQueueRef": {"name": dlq}, "dryRun": dry_run},
            "status": {"phase": "Succeeded", "replayed": 3}}))
        .expect("replay")
    };
    for r in [
        replay("other", "payments", false),
        replay("look", "orders", true),
    ] {
        replays.apply_watcher_event(&watcher::Event::Apply(r));
    }
    assert_eq!(
        poll(&mut m, &api, &clock, 1_013).await,
        nothing,
        "no replay of orders yet"
    );
    replays.apply_watcher_event(&watcher::Event::Apply(replay("fix-1", "orders", false)));
    let calls = poll(&mut m, &api, &clock, 1_013).await;
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "{calls:#?}");
    holding.push(Item::Replayed);
    assert_eq!(maturity_score(&patches[0]), expected_score(&holding));
    assert_eq!(poll(&mut m, &api, &clock, 1_014).await, nothing, "steady");

    // Its RetryPolicy is no longer Ready: the score drops at the next poll, no reconcile
    // needed.
    policies.apply_watcher_event(&watcher::Event::Apply(policy("False")));
    let calls = poll(&mut m, &api, &clock, 1_015).await;
    let patches = status_patches(&calls);
    assert_eq!(patches.len(), 1, "{calls:#?}");
    holding.retain(|i| *i != Item::RetryPolicyReady);
    assert_eq!(maturity_score(&patches[0]), expected_score(&holding));
    assert!(patches[0]["maturity"]["missing"]
        .as_array()
        .is_some_and(|m| m.iter().any(|s| s
            .as_str()
            .is_some_and(|s| s.contains("make RetryPolicy policy Ready")))));
    assert_eq!(poll(&mut m, &api, &clock, 1_016).await, nothing, "steady");
}
