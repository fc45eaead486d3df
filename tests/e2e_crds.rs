//! The CRDs against a real Kubernetes API server (DESIGN.md §6): `.ci/run` starts a local
//! v1.20.2 (scripts/kube-apiserver.sh) and sets `DLQ_E2E_KUBECONFIG`; any cluster that
//! variable points at works. Without it the test reports itself as skipped, by name.
//!
//! Checked: the CRDs are accepted and become Established (v1.20 rejects non-structural
//! schemas and, e.g., `enum: [..., null]`); the server applies the schema's defaults; it
//! rejects out-of-range numbers and malformed durations by the schema. Objects are created
//! under unique names and deleted again; the CRDs are left in place (deleting a CRD
//! deletes every object of its kind in a real cluster).

mod common;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::json;

use common::e2e::client;
use dlq_operator::crd::{DeadLetterQueue, RetryPolicy};

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

#[tokio::test]
async fn crds_are_accepted_defaulted_and_enforced_by_a_real_api_server() {
    let Some(client) =
        client("crds_are_accepted_defaulted_and_enforced_by_a_real_api_server").await
    else {
        return;
    };
    common::e2e::ensure_crds(&client).await;

    // Minimal objects as a user writes them: the server fills in the schema defaults.
    let ns = "default";
    let rp_res = ApiResource::erase::<RetryPolicy>(&());
    let dlq_res = ApiResource::erase::<DeadLetterQueue>(&());
    let rps: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &rp_res);
    let dlqs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &dlq_res);
    let rp_name = unique("e2e-rp");
    let rp = DynamicObject::new(&rp_name, &rp_res).data(json!({"spec": {"maxRetries": 2}}));
    let created = rps
        .create(&PostParams::default(), &rp)
        .await
        .expect("create RetryPolicy");
    let spec = &created.data["spec"];
    assert_eq!(spec["backoff"]["initialDelay"], "1s", "{spec}");
    assert_eq!(spec["backoff"]["maxDelay"], "60s", "{spec}");
    assert_eq!(spec["backoff"]["strategy"], "Exponential", "{spec}");
    assert_eq!(spec["classification"]["default"], "Retry", "{spec}");

    let dlq_name = unique("e2e-dlq");
    let dlq = DynamicObject::new(&dlq_name, &dlq_res).data(json!({"spec": {
        "broker": {"secretRef": {"name": "rabbitmq"}},
        "source": {"queue": "e2e-orders"},
        "retryPolicyRef": {"name": rp_name},
    }}));
    let created = dlqs
        .create(&PostParams::default(), &dlq)
        .await
        .expect("create DeadLetterQueue");
    let spec = &created.data["spec"];
    assert_eq!(spec["broker"]["vhost"], "/", "{spec}");
    assert_eq!(spec["source"]["queueType"], "Quorum", "{spec}");
    assert_eq!(spec["deadLetter"]["retention"], "168h", "{spec}");
    assert_eq!(spec["deadLetter"]["maxLength"], 100000, "{spec}");
    assert_eq!(spec["deletionPolicy"], "Retain", "{spec}");
    // The typed client reads what the server stored.
    let typed: Api<DeadLetterQueue> = Api::namespaced(client.clone(), ns);
    let read = typed.get(&dlq_name).await.expect("typed get");
    assert_eq!(read.spec.source.queue, "e2e-orders");

    // The schema rejects what it can express.
    for (bad, field) in [
        (json!({"maxRetries": 101}), "spec.maxRetries"),
        (
            json!({"backoff": {"initialDelay": "5 minutes"}}),
            "spec.backoff.initialDelay",
        ),
        (
            json!({"backoff": {"multiplier": 0.5}}),
            "spec.backoff.multiplier",
        ),
        (
            json!({"backoff": {"strategy": "Sometimes"}}),
            "spec.backoff.strategy",
        ),
    ] {
        let obj = DynamicObject::new(&unique("e2e-bad"), &rp_res).data(json!({ "spec": bad }));
        match rps.create(&PostParams::default(), &obj).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(
                    status.message.contains(field),
                    "{field}: {}",
                    status.message
                );
            }
            other => panic!("{bad} accepted: {other:?}"),
        }
    }

    let _ = dlqs.delete(&dlq_name, &DeleteParams::default()).await;
    let _ = rps.delete(&rp_name, &DeleteParams::default()).await;
}
