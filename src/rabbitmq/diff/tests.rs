//! The diff's rules on small snapshots: a fresh vhost, the same state again, and one
//! difference at a time.

use serde_json::json;

use super::*;
use crate::backoff::ResolvedPolicy;
use crate::crd::{DeadLetterQueueSpec, QueueType, RetryPolicySpec};
use crate::rabbitmq::management::{BindingInfo, ExchangeInfo};
use crate::rabbitmq::ownership::{claims, record_actions, RETIRED_ROLE};
use crate::topology::policy_name;

/// The plan of source queue `orders` with two retry tiers (5 s, 30 s); `extra` is merged
/// into the spec (e.g. `{"deadLetter": {...}}`).
pub(super) fn plan_with(extra: Value) -> DesiredTopology {
    let mut spec = json!({
        "source": {"queue": "orders"},
        "retryPolicyRef": {"name": "p"},
        "broker": {"secretRef": {"name": "s"}},
    });
    if let (Some(obj), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    let spec: DeadLetterQueueSpec = serde_json::from_value(spec).expect("spec");
    let retry: RetryPolicySpec =
        serde_json::from_value(json!({"tiers": ["5s", "30s"]})).expect("retry policy");
    let policy = ResolvedPolicy::from_spec(&retry).expect("resolved policy");
    crate::topology::plan("default/orders", &spec, &policy)
}

fn plan() -> DesiredTopology {
    plan_with(json!({}))
}

pub(super) const DLQ: &str = "orders.dlq";
pub(super) const V3: &str = "3.10.8";
pub(super) const V4: &str = "4.0.5";

pub(super) fn facts(version: &str) -> Facts {
    Facts {
        broker_version: Some(version.to_string()),
        ready: BTreeMap::new(),
    }
}

fn queue_info(name: &str, kind: &str, arguments: Value, messages: u64) -> QueueInfo {
    serde_json::from_value(json!({
        "name": name, "type": kind, "arguments": arguments, "messages": messages,
    }))
    .expect("queue info")
}

pub(super) fn policy_info(
    name: &str,
    pattern: &str,
    priority: i64,
    definition: Value,
) -> PolicyInfo {
    serde_json::from_value(json!({
        "name": name, "pattern": pattern, "apply-to": "queues",
        "priority": priority, "definition": definition,
    }))
    .expect("policy info")
}

pub(super) fn exchange_info(name: &str, kind: &str) -> ExchangeInfo {
    serde_json::from_value(json!({"name": name, "type": kind})).expect("exchange info")
}

/// What a broker of `version` holds once `plan` was applied to it.
pub(super) fn in_place(plan: &DesiredTopology, version: &str) -> Snapshot {
    let exchanges = plan
        .exchanges
        .iter()
        .map(|x| exchange_info(&x.name, x.kind.as_str()))
        .collect();
    let queues = plan
        .queues
        .iter()
        .map(|q| {
            queue_info(
                &q.name,
                q.queue_type.argument(),
                json!(q.declare_arguments()),
                0,
            )
        })
        .collect();
    let policies = plan
        .policies
        .iter()
        .map(|p| {
            let mut definition = p.definition.clone();
            let quorum_dlq = plan.dead_letter_queues().any(|q| q == p.queue)
                && plan
                    .queues
                    .iter()
                    .any(|q| q.queue_type == QueueType::Quorum);
            if quorum_dlq {
                no_default_delivery_limit(&mut definition, version);
            }
            policy_info(
                &p.name,
                &p.pattern,
                i64::from(p.priority),
                json!(definition),
            )
        })
        .collect();
    let bindings = plan
        .bindings
        .iter()
        .map(|b| {
            serde_json::from_value::<BindingInfo>(json!({
                "source": b.exchange, "destination": b.queue, "destination_type": "queue",
                "routing_key": b.routing_key, "properties_key": b.routing_key,
            }))
            .expect("binding info")
        })
        .collect();
    Snapshot {
        exchanges,
        queues,
        policies,
        bindings,
    }
}

/// Every claim of `plan` with its record: all recorded for `plan`'s owner, or none yet.
pub(super) fn owners(plan: &DesiredTopology, recorded: bool) -> Found {
    claims(plan)
        .into_iter()
        .map(|c| {
            let record = recorded.then(|| c.record(plan));
            (c, record)
        })
        .collect()
}

/// The entries a fresh vhost gets: every record, their line, then every step written.
fn fresh_entries(plan: &DesiredTopology) -> Vec<Entry> {
    let claims = claims(plan);
    let records = claims
        .iter()
        .map(|c| Entry::Write(Write::RecordOwner(c.record(plan))));
    let lines = record_actions(claims.len(), 0)
        .into_iter()
        .map(Entry::Report);
    let steps = plan.steps().into_iter().map(|s| {
        Entry::Write(match s {
            Step::Exchange(x) => Write::DeclareExchange(x.clone()),
            Step::Policy(p) => Write::PutPolicy(PolicyWrite {
                policy: p.clone(),
                outcome: Outcome::Created,
                shadowed: None,
            }),
            Step::Queue(q) => Write::DeclareQueue(q.clone()),
            Step::Binding(b) => Write::Bind(b.clone()),
        })
    });
    records.chain(lines).chain(steps).collect()
}

pub(super) fn reports(diff: &Diff) -> Vec<&Action> {
    diff.entries
        .iter()
        .filter_map(|e| match e {
            Entry::Report(a) => Some(a),
            Entry::BindingInPlace(_) | Entry::Write(_) => None,
        })
        .collect()
}

pub(super) fn report<'d>(diff: &'d Diff, kind: ObjectKind, name: &str) -> &'d Outcome {
    reports(diff)
        .into_iter()
        .find(|a| a.kind == kind && a.name == name)
        .map(|a| &a.outcome)
        .unwrap_or_else(|| panic!("no report line for {kind} {name}: {diff:#?}"))
}

pub(super) fn policy_writes(diff: &Diff) -> Vec<&PolicyWrite> {
    diff.writes()
        .filter_map(|w| match w {
            Write::PutPolicy(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn binds_to(diff: &Diff, queue: &str) -> usize {
    diff.entries
        .iter()
        .filter(|e| match e {
            Entry::Write(Write::Bind(b)) | Entry::BindingInPlace(b) => b.queue == queue,
            Entry::Report(_) | Entry::Write(_) => false,
        })
        .count()
}

#[test]
fn a_fresh_vhost_gets_every_write_in_plan_order_records_first() {
    let plan = plan();
    let diff = diff(
        &plan,
        &Snapshot::default(),
        &owners(&plan, false),
        &facts(V3),
    );
    assert_eq!(Vec::from(diff.entries.clone()), fresh_entries(&plan));
    assert!(diff.retire_tiers && diff.retire_dead_letter_queues);
    // Exchanges first, then the dead-letter queue's policy before the queue itself.
    let order: Vec<String> = diff
        .writes()
        .filter_map(|w| match w {
            Write::DeclareExchange(x) => Some(x.name.clone()),
            Write::PutPolicy(p) => Some(p.policy.name.clone()),
            Write::DeclareQueue(q) => Some(q.name.clone()),
            Write::RecordOwner(_) | Write::Bind(_) => None,
        })
        .take(4)
        .collect();
    assert_eq!(
        order,
        ["orders.dlx", "orders.retry", "dlq-operator.orders.dlq", DLQ]
    );
}

#[test]
fn a_second_apply_of_the_same_state_writes_nothing() {
    for version in [V3, V4] {
        let plan = plan();
        let diff = diff(
            &plan,
            &in_place(&plan, version),
            &owners(&plan, true),
            &facts(version),
        );
        assert_eq!(diff.writes().count(), 0, "{version}: {diff:#?}");
        for a in reports(&diff) {
            assert_eq!(a.outcome, Outcome::InPlace, "{a}");
        }
        let objects = plan.exchanges.len() + plan.policies.len() + plan.queues.len();
        assert_eq!(reports(&diff).len(), objects);
        assert_eq!(diff.entries.len(), objects + plan.bindings.len());
        assert!(diff.retire_tiers && diff.retire_dead_letter_queues);
    }
}

#[test]
fn a_differing_operator_policy_is_one_put_policy() {
    let plan = plan();
    let mut snap = in_place(&plan, V3);
    let name = policy_name(DLQ);
    for p in snap.policies.iter_mut().filter(|p| p.name == name) {
        p.definition.insert("max-length".into(), json!(5));
    }
    let diff = diff(&plan, &snap, &owners(&plan, true), &facts(V3));
    let writes: Vec<&Write> = diff.writes().collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    let planned = plan
        .policies
        .iter()
        .find(|p| p.name == name)
        .expect("planned");
    assert_eq!(
        writes[0],
        &Write::PutPolicy(PolicyWrite {
            policy: planned.clone(),
            outcome: Outcome::Updated,
            shadowed: None,
        })
    );
}

#[test]
fn a_foreign_queue_with_other_arguments_is_a_conflict_and_nothing_is_written_for_it() {
    let plan = plan();
    let snap = Snapshot {
        queues: vec![queue_info(DLQ, "classic", json!({"x-max-length": 5}), 0)],
        ..Snapshot::default()
    };
    let diff = diff(&plan, &snap, &owners(&plan, false), &facts(V3));
    let Outcome::Conflict(why) = report(&diff, ObjectKind::Queue, DLQ) else {
        panic!("{diff:#?}");
    };
    assert!(
        why.contains("classic") && why.contains("left untouched"),
        "{why}"
    );
    let Outcome::Conflict(why) = report(&diff, ObjectKind::Policy, &policy_name(DLQ)) else {
        panic!("{diff:#?}");
    };
    assert!(why.contains("conflicting arguments"), "{why}");
    // No record, declare or binding for it; the source queue is not pointed at a route
    // that lacks its queue, and no dead-letter queue is retired.
    for w in diff.writes() {
        match w {
            Write::RecordOwner(r) => assert_ne!(r.name, DLQ),
            Write::DeclareQueue(q) => assert_ne!(q.name, DLQ),
            Write::PutPolicy(p) => assert_ne!(p.policy.queue, "orders", "{p:?}"),
            Write::Bind(b) => assert_ne!(b.queue, DLQ),
            Write::DeclareExchange(_) => {}
        }
    }
    let Outcome::Conflict(why) = report(&diff, ObjectKind::Policy, &policy_name("orders")) else {
        panic!("{diff:#?}");
    };
    assert!(why.contains("dead-letter route"), "{why}");
    assert!(!diff.retire_dead_letter_queues);
    assert!(diff.retire_tiers);
    let names = plan.exchanges.len() + plan.queues.len() - 1;
    assert_eq!(
        reports(&diff)[0].to_string(),
        format!("ownership records for {names} names: created")
    );
}

#[test]
fn a_dead_letter_exchange_of_another_type_holds_back_the_route() {
    let plan = plan();
    let snap = Snapshot {
        exchanges: vec![exchange_info("orders.dlx", "fanout")],
        ..Snapshot::default()
    };
    let diff = diff(&plan, &snap, &owners(&plan, false), &facts(V3));
    assert!(matches!(
        report(&diff, ObjectKind::Exchange, "orders.dlx"),
        Outcome::Conflict(why) if why.contains("fanout")
    ));
    assert!(matches!(
        report(&diff, ObjectKind::Policy, &policy_name("orders")),
        Outcome::Conflict(_)
    ));
    assert_eq!(binds_to(&diff, DLQ), 0);
    assert!(diff
        .writes()
        .all(|w| !matches!(w, Write::RecordOwner(r) if r.name == "orders.dlx")));
    // Its own queue and policy are still put in place.
    assert!(diff
        .writes()
        .any(|w| matches!(w, Write::DeclareQueue(q) if q.name == DLQ)));
    assert!(!diff.retire_dead_letter_queues);
}

#[test]
fn a_queue_declare_refused_at_run_time_holds_back_what_depends_on_it() {
    let plan = plan();
    let mut diff = diff(
        &plan,
        &Snapshot::default(),
        &owners(&plan, false),
        &facts(V3),
    );
    // The executor reached the dead-letter queue's declare, and the broker refused it.
    while let Some(entry) = diff.entries.pop_front() {
        if matches!(entry, Entry::Write(Write::DeclareQueue(ref q)) if q.name == DLQ) {
            break;
        }
    }
    diff.queue_refused(&plan, DLQ);
    assert_eq!(binds_to(&diff, DLQ), 0);
    assert!(matches!(
        report(&diff, ObjectKind::Policy, &policy_name("orders")),
        Outcome::Conflict(why) if why.contains("dead-letter route")
    ));
    assert!(policy_writes(&diff)
        .iter()
        .all(|p| p.policy.queue != "orders"));
    assert!(!diff.retire_dead_letter_queues && diff.retire_tiers);
    // A refused tier holds back the retirement of tiers, and its binding.
    let tier = plan.routes.tiers[0].queue.clone();
    assert_eq!(binds_to(&diff, &tier), 1);
    diff.queue_refused(&plan, &tier);
    assert_eq!(binds_to(&diff, &tier), 0);
    assert!(!diff.retire_tiers);
}

#[test]
fn a_quorum_dead_letter_queue_gets_no_default_delivery_limit_on_4x_only() {
    let plan = plan();
    let fresh = Snapshot::default();
    assert!(needs_broker_version(&plan, &fresh));
    let classic = plan_with(json!({"source": {"queue": "orders", "queueType": "Classic"}}));
    assert!(!needs_broker_version(&classic, &fresh));
    let limit_of = |version: &str| {
        let diff = diff(&plan, &fresh, &owners(&plan, false), &facts(version));
        let p = policy_writes(&diff)
            .into_iter()
            .find(|p| p.policy.queue == DLQ)
            .cloned()
            .expect("the dead-letter queue's policy");
        p.policy.definition.get("delivery-limit").cloned()
    };
    assert_eq!(limit_of(V4), Some(json!(-1)));
    assert_eq!(limit_of(V3), None);
    // A user's lower-priority policy that sets a limit keeps it: no version needed.
    let snap = Snapshot {
        policies: vec![policy_info(
            "ops",
            "^orders\\.dlq$",
            1,
            json!({"delivery-limit": 5}),
        )],
        ..Snapshot::default()
    };
    assert!(!needs_broker_version(&plan, &snap));
    let diff = diff(&plan, &snap, &owners(&plan, false), &facts(V4));
    let p = policy_writes(&diff)
        .into_iter()
        .find(|p| p.policy.queue == DLQ)
        .expect("the dead-letter queue's policy");
    assert_eq!(p.policy.definition["delivery-limit"], json!(5));
}

#[test]
fn a_drop_head_policy_below_the_depth_is_not_written() {
    let plan = plan_with(json!({"deadLetter": {"overflow": "DropHead", "maxLength": 10}}));
    let mut snap = in_place(&plan, V3);
    let name = policy_name(DLQ);
    for p in snap.policies.iter_mut().filter(|p| p.name == name) {
        p.definition.insert("max-length".into(), json!(100));
    }
    for q in snap.queues.iter_mut().filter(|q| q.name == DLQ) {
        q.messages = Some(3);
    }
    let mut f = facts(V3);
    assert_eq!(ready_counts_needed(&plan, &snap, &f), [DLQ]);
    // The statistics lag: the passive declare's count decides.
    f.ready.insert(DLQ.into(), 50);
    let held = diff(&plan, &snap, &owners(&plan, true), &f);
    assert_eq!(held.writes().count(), 0);
    assert!(matches!(
        report(&held, ObjectKind::Policy, &name),
        Outcome::Conflict(why) if why.contains("holds 50 messages") && why.contains("max-length 10")
    ));
    f.ready.insert(DLQ.into(), 5);
    let written = diff(&plan, &snap, &owners(&plan, true), &f);
    assert_eq!(policy_writes(&written).len(), 1);
    // Nothing to write, nothing to count.
    assert!(ready_counts_needed(&plan, &in_place(&plan, V3), &f).is_empty());
}

#[test]
fn higher_policies_shadow_ours_and_lower_ones_merge_into_it() {
    let plan = plan();
    let mut snap = in_place(&plan, V3);
    snap.policies.push(policy_info(
        "ops",
        "^orders\\.dlq$",
        500,
        json!({"max-length": 1}),
    ));
    snap.policies.push(policy_info(
        "defaults",
        "^orders",
        1,
        json!({"max-length": 7, "max-length-bytes": 1000, "expires": 20_000}),
    ));
    let diff = diff(&plan, &snap, &owners(&plan, true), &facts(V3));
    // The dead-letter queue's policy gains the lower policy's key it lacks (never
    // `expires`, which would delete the queue with its dead letters), is written, and is
    // reported shadowed by the higher one.
    let dlq_policy = policy_writes(&diff)
        .into_iter()
        .find(|p| p.policy.queue == DLQ)
        .cloned()
        .expect("written");
    assert_eq!(
        dlq_policy.policy.definition["max-length-bytes"],
        json!(1000)
    );
    assert_eq!(dlq_policy.policy.definition["max-length"], json!(100_000));
    assert!(!dlq_policy.policy.definition.contains_key("expires"));
    assert!(matches!(
        dlq_policy.action().outcome,
        Outcome::Shadowed(why) if why.contains("policy ops (priority 500) takes precedence")
    ));
    // Every other operator policy merges the same key ("^orders" matches them all).
    assert_eq!(policy_writes(&diff).len(), plan.policies.len());
}

#[test]
fn a_shadowed_policy_in_place_is_reported_shadowed_without_a_write() {
    let plan = plan();
    let mut snap = in_place(&plan, V3);
    snap.policies.push(policy_info(
        "ops",
        "^orders$",
        100,
        json!({"max-length": 1}),
    ));
    let diff = diff(&plan, &snap, &owners(&plan, true), &facts(V3));
    assert_eq!(diff.writes().count(), 0);
    assert!(matches!(
        report(&diff, ObjectKind::Policy, &policy_name("orders")),
        Outcome::Shadowed(_)
    ));
}

#[test]
fn a_missing_unmanaged_source_queue_fails_and_is_not_bound() {
    let plan = plan_with(json!({"source": {"queue": "orders", "manage": false, "exchange": "in"}}));
    let mut snap = Snapshot::default();
    snap.exchanges.push(exchange_info("in", "topic"));
    let diff = diff(&plan, &snap, &owners(&plan, false), &facts(V3));
    assert!(matches!(
        report(&diff, ObjectKind::Queue, "orders"),
        Outcome::Failed(why) if why.contains("spec.source.manage is false")
    ));
    assert!(diff
        .writes()
        .all(|w| !matches!(w, Write::DeclareQueue(q) if q.name == "orders")));
    assert_eq!(binds_to(&diff, "orders"), 0);
    // The source queue is not a tier nor a dead-letter queue: both retire.
    assert!(diff.retire_tiers && diff.retire_dead_letter_queues);
}

#[test]
fn a_missing_source_exchange_fails_and_its_binding_is_skipped() {
    let plan = plan_with(json!({"source": {"queue": "orders", "exchange": "in"}}));
    let fresh = Snapshot::default();
    let diff = diff(&plan, &fresh, &owners(&plan, false), &facts(V3));
    assert!(matches!(
        report(&diff, ObjectKind::Exchange, "in"),
        Outcome::Failed(why) if why.contains("never declares it")
    ));
    let from_in = |d: &Diff| {
        d.writes()
            .filter(|w| matches!(w, Write::Bind(b) if b.exchange == "in"))
            .count()
    };
    assert_eq!(from_in(&diff), 0);
    let snap = Snapshot {
        exchanges: vec![exchange_info("in", "topic")],
        ..Snapshot::default()
    };
    assert_eq!(
        from_in(&super::diff(
            &plan,
            &snap,
            &owners(&plan, false),
            &facts(V3)
        )),
        1
    );
}

#[test]
fn a_record_of_another_role_is_updated_and_keeps_its_retired_list() {
    let plan = plan();
    let mut found = owners(&plan, true);
    for (claim, record) in found.iter_mut() {
        if claim.name == DLQ {
            if let Some(r) = record.as_mut() {
                r.role = RETIRED_ROLE.into();
                r.retired = vec!["x".into()];
            }
        }
    }
    let diff = diff(&plan, &in_place(&plan, V3), &found, &facts(V3));
    let writes: Vec<&Write> = diff.writes().collect();
    let [Write::RecordOwner(r)] = writes.as_slice() else {
        panic!("{writes:?}");
    };
    assert_eq!(
        (r.name.as_str(), r.role.as_str()),
        (DLQ, "dead-letter queue")
    );
    assert_eq!(r.retired, ["x"]);
    assert_eq!(
        reports(&diff)[0].to_string(),
        "ownership records for 1 name: updated"
    );
}

fn tier_plan() -> QueuePlan {
    QueuePlan {
        name: "q.retry.5s".into(),
        role: QueueRole::Retry { delay_ms: 5000 },
        queue_type: QueueType::Quorum,
        arguments: [("x-message-ttl".to_string(), json!(5000))].into(),
        declare: true,
    }
}

fn existing(kind: &str, args: Value) -> QueueInfo {
    queue_info("q.retry.5s", kind, args, 0)
}

#[test]
fn queue_conflicts_name_type_and_arguments() {
    let plan = tier_plan();
    assert!(queue_conflicts(
        &existing("quorum", json!({"x-message-ttl": 5000.0})),
        &plan,
        None
    )
    .is_empty());
    let r = queue_conflicts(
        &existing("classic", json!({"x-message-ttl": 6000})),
        &plan,
        None,
    );
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(r[0].contains("x-queue-type") && r[1].contains("x-message-ttl"));
    let policy = PolicyPlan {
        name: "dlq-operator.q.retry.5s".into(),
        queue: "q.retry.5s".into(),
        pattern: "^q\\.retry\\.5s$".into(),
        priority: 100,
        definition: [("max-length".to_string(), json!(10))].into(),
    };
    let r = queue_conflicts(
        &existing("quorum", json!({"x-message-ttl": 5000, "x-max-length": 3})),
        &plan,
        Some(&policy),
    );
    assert!(r.len() == 1 && r[0].contains("x-max-length"), "{r:?}");
}
