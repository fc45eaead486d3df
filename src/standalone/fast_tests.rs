//! The standalone driver ([`apply_all`]) over manifests planned from the examples, against
//! the in-memory broker ([`FakeBroker`]): no RabbitMQ, no API server.

use std::path::{Path, PathBuf};

use super::*;
use crate::broker::BrokerTopology;
use crate::fake::{FakeBroker, Fault};

/// The example's RetryPolicy, DeadLetterQueue `order-events` and Secret, and its source
/// queue.
const EXAMPLE: &str = "examples/order-events.yaml";
const SECRET: &str = "examples/rabbitmq-secret.yaml";
const SOURCE: &str = "order-events";

/// A DeadLetterQueue `name` on `queue`, using the example's RetryPolicy and Secret.
fn dead_letter_queue(name: &str, queue: &str) -> String {
    format!(
        "apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  broker: {{secretRef: {{name: rabbitmq-local}}}}\n  source: {{queue: {queue}, queueType: Quorum}}\n  retryPolicyRef: {{name: order-events}}\n"
    )
}

/// The repository's file `rel`.
fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Plans `paths` (files of the repository or written ones).
fn planned(paths: &[PathBuf]) -> Vec<Planned> {
    load_and_plan(paths).expect("the manifests plan").1
}

/// Applies `planned` to `fake` once; the summary and the report's text.
async fn apply(fake: &FakeBroker, planned: &[Planned]) -> (Summary, String) {
    let mut out = Vec::new();
    let summary = apply_all(fake, planned, &mut out).await.expect("writes");
    (summary, String::from_utf8(out).expect("utf-8 report"))
}

#[tokio::test]
async fn first_apply_declares_everything_and_is_ready_then_a_second_writes_nothing() {
    let fake = FakeBroker::new();
    let plan = planned(&[repo(EXAMPLE), repo(SECRET)]);
    assert_eq!(plan.len(), 1);
    let topology = &plan[0].prepared.topology;

    let (summary, text) = apply(&fake, &plan).await;
    assert_eq!(
        summary,
        Summary {
            ready: 1,
            not_ready: 0
        },
        "{text}"
    );
    assert!(text.contains("=> ready ("), "{text}");
    assert!(!text.contains(" 0 created"), "objects were created: {text}");
    let vhost = fake.vhost("/").expect("vhost /");
    for q in &topology.queues {
        let declared = vhost.queues.get(&q.name);
        assert!(declared.is_some(), "queue {} declared: {text}", q.name);
    }
    for x in &topology.exchanges {
        assert!(vhost.exchanges.contains_key(&x.name), "exchange {}", x.name);
    }
    assert_eq!(vhost.queues[SOURCE].kind, "quorum");
    let record = fake
        .record("/", "queue", SOURCE)
        .expect("ownership recorded");
    assert_eq!(record.owner, "default/order-events");
    let after_first = fake.request_counts();
    assert!(after_first.writes > 0);

    let (summary, text) = apply(&fake, &plan).await;
    assert_eq!(
        summary,
        Summary {
            ready: 1,
            not_ready: 0
        },
        "{text}"
    );
    assert!(
        text.contains("0 created, 0 updated, 0 deleted"),
        "nothing changes on a second apply: {text}"
    );
    assert_eq!(
        fake.request_counts().writes,
        after_first.writes,
        "a second apply writes nothing"
    );
}

#[tokio::test]
async fn an_unreachable_broker_is_reported_not_ready_with_the_reason() {
    let fake = FakeBroker::new();
    fake.set_fault(Some(Fault::Unreachable));
    let plan = planned(&[repo(EXAMPLE), repo(SECRET)]);
    let (summary, text) = apply(&fake, &plan).await;
    assert_eq!(
        summary,
        Summary {
            ready: 0,
            not_ready: 1
        },
        "{text}"
    );
    assert!(text.contains("=> failed [BrokerUnreachable]"), "{text}");
    assert!(
        text.contains("0 DeadLetterQueue(s) ready, 1 not ready"),
        "{text}"
    );
    fake.set_fault(None);
    assert!(fake.vhost("/").expect("vhost").queues.is_empty());
    assert_eq!(fake.request_counts().writes, 0, "nothing written");
}

#[tokio::test]
async fn a_name_owned_by_another_resource_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, dead_letter_queue("other", SOURCE)).expect("write");
    // Both in one set of manifests: refused while planning.
    let both = load_and_plan(&[repo(EXAMPLE), repo(SECRET), other.clone()]);
    let err = both.expect_err("two resources claim one source queue");
    assert!(err.to_string().contains(SOURCE), "{err}");

    // Applied one after the other (as two runs of `apply -f`): the broker's ownership
    // record refuses the second.
    let fake = FakeBroker::new();
    let (first, _) = apply(&fake, &planned(&[repo(EXAMPLE), repo(SECRET)])).await;
    assert_eq!(first.ready, 1);
    let before = (
        fake.request_counts().writes,
        fake.vhost("/").expect("vhost").queues.len(),
    );
    // The second resource planned alone (the set check is what refused it above).
    let m = manifest::load_paths(&[repo(EXAMPLE), repo(SECRET), other]).expect("reads");
    let loaded = m
        .dead_letter_queues
        .iter()
        .find(|d| d.object.metadata.name.as_deref() == Some("other"))
        .expect("the second resource");
    let second = [crate::resolve::manifests::plan_loaded(&m, loaded).expect("plans alone")];
    let (summary, text) = apply(&fake, &second).await;
    assert_eq!(
        summary,
        Summary {
            ready: 0,
            not_ready: 1
        },
        "{text}"
    );
    assert!(text.contains("=> failed [NameConflict]"), "{text}");
    assert!(
        text.contains("default/order-events"),
        "names the owner: {text}"
    );
    let after = (
        fake.request_counts().writes,
        fake.vhost("/").expect("vhost").queues.len(),
    );
    assert_eq!(after, before, "nothing written for the refused resource");
    let record = fake.record("/", "queue", SOURCE).expect("record kept");
    assert_eq!(record.owner, "default/order-events");
}
