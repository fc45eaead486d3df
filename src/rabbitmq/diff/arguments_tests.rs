//! The diff under `queueSettings: Arguments` (docs/ARCHITECTURE.md, "A thousand queues
//! per vhost"): settings declared as arguments, a policy only where one is needed.

use serde_json::json;

use super::tests::{facts, owners, plan_with, policy_info, policy_writes, report, DLQ, V3, V4};
use super::*;
use crate::topology::policy_name;

fn arguments_plan(extra: Value) -> DesiredTopology {
    let mut spec = json!({"broker": {"secretRef": {"name": "s"}, "queueSettings": "Arguments"}});
    if let (Some(obj), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        obj.extend(extra.clone());
    }
    plan_with(spec)
}

/// The queues a diff declares, by name, with the arguments they are declared with.
fn declared(diff: &Diff) -> BTreeMap<String, BTreeMap<String, Value>> {
    diff.writes()
        .filter_map(|w| match w {
            Write::DeclareQueue(q) => Some((q.name.clone(), q.declare_arguments())),
            _ => None,
        })
        .collect()
}

/// What the broker holds once `diff` (of a fresh vhost) was applied: its queues with
/// the arguments they were declared with, its exchanges and bindings, and no policy.
fn applied(plan: &DesiredTopology, diff: &Diff) -> Snapshot {
    let queues = declared(diff)
        .into_iter()
        .map(|(name, args)| {
            let kind = args["x-queue-type"]
                .as_str()
                .unwrap_or("classic")
                .to_string();
            serde_json::from_value(
                json!({"name": name, "type": kind, "arguments": args, "messages": 0}),
            )
            .expect("queue info")
        })
        .collect();
    let mut snap = super::tests::in_place(plan, V3);
    snap.queues = queues;
    snap.policies.clear();
    snap
}

/// [`applied`] of the diff of `plan` against a fresh vhost of RabbitMQ 3.10.
fn applied_fresh(plan: &DesiredTopology) -> Snapshot {
    let fresh = diff(plan, &Snapshot::default(), &owners(plan, false), &facts(V3));
    applied(plan, &fresh)
}

#[test]
fn a_fresh_vhost_gets_the_settings_as_arguments_and_no_policy() {
    for version in [V3, V4] {
        let plan = arguments_plan(json!({}));
        let diff = diff(
            &plan,
            &Snapshot::default(),
            &owners(&plan, false),
            &facts(version),
        );
        assert!(policy_writes(&diff).is_empty(), "{version}: {diff:#?}");
        let queues = declared(&diff);
        let source = &queues["orders"];
        assert_eq!(source["x-dead-letter-exchange"], json!("orders.dlx"));
        assert_eq!(source["x-dead-letter-routing-key"], json!("orders"));
        assert_eq!(source["x-dead-letter-strategy"], json!("at-least-once"));
        assert_eq!(source["x-overflow"], json!("reject-publish"));
        assert!(source["x-delivery-limit"].is_u64());
        let dlq = &queues[DLQ];
        for key in ["x-message-ttl", "x-max-length", "x-overflow"] {
            assert!(dlq.contains_key(key), "{version}: {key} missing in {dlq:?}");
        }
        let none_on_4 = (version == V4).then(|| json!(-1));
        assert_eq!(dlq.get("x-delivery-limit").cloned(), none_on_4, "{version}");
        // Tiers keep exactly their own arguments.
        let tier = &queues["orders.retry.5s"];
        assert_eq!(tier["x-message-ttl"], json!(5000));
        assert!(!tier.contains_key("x-delivery-limit"));
    }
}

#[test]
fn a_second_apply_writes_nothing_and_reports_no_policy() {
    let plan = arguments_plan(json!({}));
    let snap = applied_fresh(&plan);
    let again = diff(&plan, &snap, &owners(&plan, true), &facts(V3));
    assert_eq!(again.writes().count(), 0, "{again:#?}");
    assert!(super::tests::reports(&again)
        .iter()
        .all(|a| a.kind != ObjectKind::Policy));
}

#[test]
fn lowering_retention_is_one_policy_and_raising_it_is_fixed() {
    let plan = arguments_plan(json!({}));
    let snap = applied_fresh(&plan);
    let declared_ttl = snap.queue(DLQ).expect("dlq").arguments["x-message-ttl"].clone();
    let ms = declared_ttl.as_u64().expect("ttl");
    let with_retention =
        |ttl: u64| arguments_plan(json!({"deadLetter": {"retention": format!("{}s", ttl / 1000)}}));
    let lower = with_retention(ms / 2);
    let d = diff(&lower, &snap, &owners(&lower, true), &facts(V3));
    let writes = policy_writes(&d);
    assert_eq!(d.writes().count(), 1, "{d:#?}");
    assert_eq!(writes[0].policy.name, policy_name(DLQ));
    assert_eq!(writes[0].policy.definition["message-ttl"], json!(ms / 2));
    let higher = with_retention(ms * 2);
    let d = diff(&higher, &snap, &owners(&higher, true), &facts(V3));
    assert_eq!(d.writes().count(), 0, "{d:#?}");
    match report(&d, ObjectKind::Policy, &policy_name(DLQ)) {
        Outcome::Fixed(why) => {
            assert!(
                why.contains("x-message-ttl") && why.contains("spec.deadLetter.queue"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn queues_of_the_policy_layout_keep_their_policies_without_a_write() {
    for version in [V3, V4] {
        let before = plan_with(json!({}));
        let snap = super::tests::in_place(&before, version);
        let after = arguments_plan(json!({}));
        let d = diff(&after, &snap, &owners(&after, true), &facts(version));
        assert_eq!(d.writes().count(), 0, "{version}: {d:#?}");
        for p in &after.policies {
            assert_eq!(report(&d, ObjectKind::Policy, &p.name), &Outcome::InPlace);
        }
        // An edit of such a queue is still made in place, raising included.
        let edited = arguments_plan(json!({"deadLetter": {"retention": "30d"}}));
        let d = diff(&edited, &snap, &owners(&edited, true), &facts(version));
        let writes = policy_writes(&d);
        assert_eq!(writes.len(), 1, "{version}: {d:#?}");
        assert_eq!(
            writes[0].policy.definition["message-ttl"],
            json!(30 * 86_400_000u64)
        );
    }
}

#[test]
fn another_policy_that_lowers_a_value_is_masked_and_a_higher_one_reported() {
    let plan = arguments_plan(json!({}));
    let mut snap = applied_fresh(&plan);
    snap.policies = vec![policy_info(
        "cap",
        ".*",
        0,
        json!({"max-length": 1_000_000_000u64}),
    )];
    let d = diff(&plan, &snap, &owners(&plan, true), &facts(V3));
    assert_eq!(
        d.writes().count(),
        0,
        "a higher cap changes nothing: {d:#?}"
    );
    snap.policies = vec![policy_info(
        "short",
        "^orders\\.",
        0,
        json!({"message-ttl": 1000}),
    )];
    let d = diff(&plan, &snap, &owners(&plan, true), &facts(V3));
    let writes = policy_writes(&d);
    assert_eq!(writes.len(), 1, "{d:#?}");
    assert_eq!(writes[0].policy.queue, DLQ);
    assert_eq!(writes[0].shadowed, None);
    snap.policies = vec![policy_info(
        "short",
        "^orders\\.",
        500,
        json!({"message-ttl": 1000}),
    )];
    let d = diff(&plan, &snap, &owners(&plan, true), &facts(V3));
    let writes = policy_writes(&d);
    assert_eq!(writes.len(), 1, "{d:#?}");
    assert!(writes[0]
        .shadowed
        .as_deref()
        .is_some_and(|s| s.contains("short")));
}

#[test]
fn a_dead_letter_exchange_argument_of_another_value_is_a_conflict() {
    let plan = arguments_plan(json!({}));
    let mut snap = applied_fresh(&plan);
    for q in snap.queues.iter_mut().filter(|q| q.name == "orders") {
        q.arguments
            .insert("x-dead-letter-exchange".into(), json!(""));
    }
    let d = diff(&plan, &snap, &owners(&plan, true), &facts(V3));
    assert_eq!(d.writes().count(), 0, "{d:#?}");
    match report(&d, ObjectKind::Queue, "orders") {
        Outcome::Conflict(why) => assert!(why.contains("x-dead-letter-exchange"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_source_is_declared_without_its_route_while_the_route_is_not_usable() {
    let plan = arguments_plan(json!({}));
    let snap = Snapshot {
        exchanges: vec![super::tests::exchange_info("orders.dlx", "fanout")],
        ..Snapshot::default()
    };
    let d = diff(&plan, &snap, &owners(&plan, false), &facts(V3));
    let queues = declared(&d);
    assert!(
        !queues["orders"].contains_key("x-dead-letter-exchange"),
        "{queues:?}"
    );
    assert!(queues[DLQ].contains_key("x-message-ttl"));
    assert!(policy_writes(&d).iter().all(|p| p.policy.queue != "orders"));
}

#[test]
fn a_raised_delivery_limit_of_the_source_names_the_way_out_for_a_source() {
    let plan = arguments_plan(json!({}));
    let snap = applied_fresh(&plan);
    let declared_limit = snap.queue("orders").expect("source").arguments["x-delivery-limit"]
        .as_u64()
        .expect("a number");
    let raised =
        arguments_plan(json!({"source": {"queue": "orders", "deliveryLimit": declared_limit + 5}}));
    let d = diff(&raised, &snap, &owners(&raised, true), &facts(V3));
    assert_eq!(d.writes().count(), 0, "{d:#?}");
    match report(&d, ObjectKind::Policy, &policy_name("orders")) {
        Outcome::Fixed(why) => {
            assert!(
                why.contains(&format!("keep the value at or below {declared_limit}")),
                "{why}"
            );
            assert!(!why.contains("spec.deadLetter.queue"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn switching_back_to_policy_writes_the_policies_and_keeps_the_queues() {
    let plan = arguments_plan(json!({}));
    let snap = applied_fresh(&plan);
    let policy = plan_with(json!({}));
    let d = diff(&policy, &snap, &owners(&policy, true), &facts(V3));
    assert!(
        super::tests::reports(&d)
            .iter()
            .all(|a| !matches!(a.outcome, Outcome::Conflict(_))),
        "{d:#?}"
    );
    let written: Vec<&str> = policy_writes(&d)
        .iter()
        .map(|p| p.policy.queue.as_str())
        .collect();
    assert_eq!(written, vec![DLQ, "orders"], "{d:#?}");
    // Someone else's queue with such an argument (no record of ours) is still a conflict.
    let d = diff(&policy, &snap, &owners(&policy, false), &facts(V3));
    assert!(
        matches!(report(&d, ObjectKind::Queue, DLQ), Outcome::Conflict(_)),
        "{d:#?}"
    );
}
