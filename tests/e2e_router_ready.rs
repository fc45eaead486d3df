//! The `RouterReady` condition through a real Kubernetes API server (server-side apply
//! with the monitor's own field manager) and the real RabbitMQ: `dlq-operator run` (the
//! real binary, its retry routers embedded) writes `True` / `Consuming` once its router
//! consumes the inbox, exports `dlq_router_inbox_consumers`, and removes the condition when
//! router mode is turned off — `BacklogHigh` stays. Needs `DLQ_E2E_KUBECONFIG` (.ci/run
//! starts an API server); skipped by name without it.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use common::e2e::{client, dlqs, ensure_crds, namespace, ready, rps, wait_for, Operator};
use common::{cleanup, unique, AMQP};
use dlq_operator::crd::{DeadLetterQueue, RetryPolicy};
use dlq_operator::object::api_resource;

/// Status and reason of condition `type_` of `obj`, if present.
fn condition(obj: &DynamicObject, type_: &str) -> Option<(String, String)> {
    let c = obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason")))
}

/// Who manages `status.conditions` entries of `obj`: the managers whose field set names
/// `type_` under `f:status`.
fn managers_of(obj: &DynamicObject, type_: &str) -> Vec<String> {
    let key = format!("k:{{\"type\":\"{type_}\"}}");
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0["f:status"]["f:conditions"]
                    .as_object()
                    .is_some_and(|o| o.contains_key(&key))
            })
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}

#[tokio::test]
async fn router_ready_is_written_by_the_monitor_and_removed_when_router_mode_is_off() {
    const TEST: &str = "router_ready_is_written_by_the_monitor_and_removed_when_router_mode_is_off";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace(&client, "e2e-router-ready").await;
    let prefix = unique("e2e-rr");
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
    let spec = |router: bool| -> Value {
        json!({
            "broker": {"secretRef": {"name": "rabbit"}},
            "source": {"queue": q, "queueType": "Classic"},
            "retryPolicyRef": {"name": "policy"},
            "monitoring": {"interval": "1s", "threshold": 100},
            "router": {"enabled": router},
            "deletionPolicy": "Delete",
        })
    };
    let dlq = DynamicObject::new("work", &api_resource::<DeadLetterQueue>())
        .data(json!({"spec": spec(true)}));
    let api = dlqs(&client, &ns);
    api.create(&PostParams::default(), &dlq).await.expect("dlq");
    wait_for(Duration::from_secs(60), "Ready", &op, || async {
        ready(&api, "work").await.filter(|r| r.0 == "True")
    })
    .await;

    // The embedded router consumes the inbox: the broker counts it, the monitor says so.
    let consumers = format!("dlq_router_inbox_consumers{{name=\"work\",namespace=\"{ns}\"}} 1");
    wait_for(
        Duration::from_secs(60),
        "inbox consumer counted",
        &op,
        || async { op.metrics().await.contains(&consumers).then_some(()) },
    )
    .await;
    let obj = wait_for(Duration::from_secs(30), "RouterReady True", &op, || async {
        let obj = api.get("work").await.ok()?;
        (condition(&obj, "RouterReady") == Some(("True".into(), "Consuming".into()))).then_some(obj)
    })
    .await;
    assert_eq!(
        managers_of(&obj, "RouterReady"),
        ["dlq-operator-monitor"],
        "written under the monitor's own field manager"
    );
    assert_eq!(obj.data["status"]["depth"]["inbox"], 0);

    // Router mode off: the monitor's next apply leaves RouterReady out, and the API
    // server removes it (server-side apply); BacklogHigh and Ready stay.
    api.patch(
        "work",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"router": {"enabled": false}}})),
    )
    .await
    .expect("router mode off");
    let obj = wait_for(
        Duration::from_secs(60),
        "RouterReady removed",
        &op,
        || async {
            let obj = api.get("work").await.ok()?;
            condition(&obj, "RouterReady").is_none().then_some(obj)
        },
    )
    .await;
    assert!(condition(&obj, "BacklogHigh").is_some(), "{:?}", obj.data);
    assert!(condition(&obj, "Ready").is_some(), "{:?}", obj.data);
    let gone = format!("dlq_router_inbox_consumers{{name=\"work\",namespace=\"{ns}\"}}");
    wait_for(
        Duration::from_secs(30),
        "consumers series removed",
        &op,
        || async { (!op.metrics().await.contains(&gone)).then_some(()) },
    )
    .await;

    api.delete("work", &DeleteParams::default())
        .await
        .expect("delete");
    let _ = wait_for(Duration::from_secs(60), "deleted", &op, || async {
        api.get_opt("work")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    drop(op);
    cleanup(&prefix).await;
}
