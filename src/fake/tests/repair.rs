//! Repair on the fake broker: `dlq::repair::repair_with` is a replay of one message
//! with its edits; the rest stays.

use super::*;

/// The `message_id`s of the messages in `queue`, in order.
fn message_ids(broker: &FakeBroker, queue: &str) -> Vec<String> {
    broker
        .messages("/", queue)
        .iter()
        .map(|m| m.properties.message_id.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn repair_replays_one_message_with_its_edits_and_leaves_the_rest() {
    use crate::dlq::repair::{repair_with, RepairOutcome, Rewrite};
    let mut tagged = letter("orders", "timeout", HOUR, "b");
    if let Some(h) = tagged.properties.headers.as_mut() {
        h.insert("tenant".into(), HeaderValue::text("old"));
        h.insert("drop-me".into(), HeaderValue::I64(1));
    }
    let (broker, t) = applied(vec![
        letter("orders", "timeout", HOUR, "a"),
        tagged,
        letter("orders", "timeout", HOUR, "c"),
    ])
    .await;
    let mut rewrite = Rewrite::new()
        .with_json_body(r#"{"fixed": 1}"#)
        .expect("body");
    rewrite.set_header("tenant", &json!("new")).expect("set");
    rewrite.remove_header("drop-me").expect("remove");
    let cancel = CancellationToken::new();
    let report = repair_with(&broker, &t, "b", rewrite, NOW, &cancel)
        .await
        .expect("repair");
    assert_eq!(report.outcome, RepairOutcome::Repaired, "{report}");
    assert_eq!(report.repaired_at_ms, Some(NOW));
    assert_eq!(
        message_ids(&broker, "orders.dlq"),
        ["a", "c"],
        "only b left"
    );
    let copies = broker.messages("/", "orders");
    assert_eq!(copies.len(), 1);
    let copy = &copies[0];
    assert_eq!(copy.properties.message_id.as_deref(), Some("b"), "id kept");
    assert_eq!(copy.body, br#"{"fixed": 1}"#);
    assert_eq!(
        copy.properties.header("tenant"),
        Some(&HeaderValue::text("new"))
    );
    assert!(copy.properties.header("drop-me").is_none());
    assert_eq!(
        copy.properties.header(crate::dlq::REPAIRED_AT),
        Some(&HeaderValue::I64(NOW as i64))
    );
    assert_eq!(
        copy.properties.header(REPLAY_ID),
        Some(&HeaderValue::text(&report.replay_id))
    );
    assert!(
        copy.properties.header(RETRY_COUNT).is_none(),
        "retry state reset"
    );
    // The others are untouched.
    let a = &broker.messages("/", "orders.dlq")[0];
    assert_eq!(a.body, b"a");
    assert!(a.properties.header(crate::dlq::REPAIRED_AT).is_none());
}

/// The messages of `queue` without the broker's per-delivery `x-delivery-count` (a read
/// message given back counts a delivery).
fn contents(broker: &FakeBroker, queue: &str) -> Vec<Message> {
    let mut all = broker.messages("/", queue);
    for m in &mut all {
        if let Some(h) = m.properties.headers.as_mut() {
            h.remove("x-delivery-count");
        }
    }
    all
}

#[tokio::test]
async fn repair_of_an_unknown_id_changes_nothing_and_a_skip_or_refusal_keeps_the_original() {
    use crate::dlq::repair::{repair_with, RepairOutcome, Rewrite};
    let (broker, t) = applied(vec![
        letter("orders", "timeout", HOUR, "a"),
        letter("elsewhere", "timeout", HOUR, "other-queue"),
    ])
    .await;
    let before = contents(&broker, "orders.dlq");
    let cancel = CancellationToken::new();
    let rewrite = || Rewrite::new().with_json_body("{}").expect("body");
    let report = repair_with(&broker, &t, "missing", rewrite(), NOW, &cancel)
        .await
        .expect("repair");
    assert_eq!(report.outcome, RepairOutcome::NotFound, "{report}");
    assert_eq!(report.scanned, 2);
    assert_eq!(contents(&broker, "orders.dlq"), before, "nothing changed");
    assert!(broker.messages("/", "orders").is_empty());
    // The replay's own rule: another original queue is never sent to this source.
    let report = repair_with(&broker, &t, "other-queue", rewrite(), NOW, &cancel)
        .await
        .expect("repair");
    assert!(
        matches!(report.outcome, RepairOutcome::Skipped(ref why) if why.contains("original queue")),
        "{report}"
    );
    assert_eq!(contents(&broker, "orders.dlq"), before);
    // The broker refuses the copy: the original stays as it was.
    broker.refuse_publishes("/", "orders", true);
    let report = repair_with(&broker, &t, "a", rewrite(), NOW, &cancel)
        .await
        .expect("repair");
    assert!(
        matches!(report.outcome, RepairOutcome::Failed(_)),
        "{report}"
    );
    assert_eq!(contents(&broker, "orders.dlq"), before);
    assert!(broker.messages("/", "orders").is_empty());
}

#[tokio::test]
async fn repair_takes_the_first_of_messages_sharing_an_id() {
    use crate::dlq::repair::{repair_with, RepairOutcome, Rewrite};
    let mut second = letter("orders", "timeout", HOUR, "dup");
    second.body = b"second".to_vec();
    let (broker, t) = applied(vec![letter("orders", "timeout", HOUR, "dup"), second]).await;
    let report = repair_with(
        &broker,
        &t,
        "dup",
        Rewrite::new().with_body(b"fixed".to_vec()),
        NOW,
        &CancellationToken::new(),
    )
    .await
    .expect("repair");
    assert_eq!(report.outcome, RepairOutcome::Repaired);
    assert_eq!(
        ids(&broker, "orders.dlq"),
        ["second"],
        "the later one stays"
    );
    assert_eq!(ids(&broker, "orders"), ["fixed"]);
}

#[tokio::test]
async fn a_repair_that_never_reached_the_broker_says_no_copy_may_have_been_sent() {
    use crate::dlq::repair::{repair_with, Rewrite};
    let (broker, t) = applied(vec![letter("orders", "timeout", HOUR, "a")]).await;
    broker.set_fault(Some(Fault::Unreachable));
    let cancel = CancellationToken::new();
    let rewrite = Rewrite::new().with_json_body("{}").expect("body");
    let stop = repair_with(&broker, &t, "a", rewrite, NOW, &cancel)
        .await
        .expect_err("the broker is unreachable");
    assert!(
        matches!(stop.error, BrokerError::Unreachable { .. }),
        "{stop:?}"
    );
    assert!(!stop.found, "{stop:?}");
    assert_eq!(stop.note(), None);
    broker.set_fault(None);
    assert_eq!(message_ids(&broker, "orders.dlq"), ["a"], "nothing changed");
}
