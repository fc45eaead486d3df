//! The diff's rules for queues under the argument rules (`spec.broker.queueSettings:
//! Arguments`, or a queue the resource declared so; docs/ARCHITECTURE.md, "A thousand
//! queues per vhost"): the settings a queue must have, when an existing argument is a
//! conflict, and the report of a number its argument holds back.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{queue_conflicts, queue_type_of, recorded};
use crate::crd::QueueSettings;
use crate::duration::format_ms;
use crate::rabbitmq::declared::{self, Combine};
use crate::rabbitmq::limits::no_default_delivery_limit;
use crate::rabbitmq::management::QueueInfo;
use crate::rabbitmq::ownership::Found;
use crate::rabbitmq::snapshot::Snapshot;
use crate::topology::{DesiredTopology, PolicyPlan, QueuePlan, QueueRole};

/// Whether the existing `queue` of `p` follows the argument rules: the plan's layout is
/// `Arguments`, or this resource's ownership record names the queue and it carries an
/// argument for a key of `p` — it was declared with its settings, under `Arguments`,
/// before the resource switched to `Policy` (a queue someone else declared with such an
/// argument is never recorded: it is a conflict under `Policy`).
pub(super) fn declared_with_settings(
    plan: &DesiredTopology,
    owners: &Found,
    queue: &QueueInfo,
    p: &PolicyPlan,
) -> bool {
    plan.queue_settings == QueueSettings::Arguments
        || (recorded(owners, &queue.name)
            && p.definition
                .keys()
                .any(|k| queue.arguments.contains_key(&format!("x-{k}"))))
}

/// The settings `p`'s queue must have under `queueSettings: Arguments`: the plan's
/// definition and, on RabbitMQ 4.x (`version`), no default delivery limit for a quorum
/// dead-letter queue (`limits::no_default_delivery_limit`). The keys of other policies
/// are not merged in: they apply by themselves next to the arguments.
pub(super) fn settings_of(
    plan: &DesiredTopology,
    snap: &Snapshot,
    p: &PolicyPlan,
    version: Option<&str>,
) -> BTreeMap<String, Value> {
    let mut settings = p.definition.clone();
    let quorum_dead_letter = queue_type_of(plan, snap, &p.queue) == "quorum"
        && plan.dead_letter_queues().any(|q| q == p.queue);
    if let (true, Some(version)) = (quorum_dead_letter, version) {
        no_default_delivery_limit(&mut settings, version);
    }
    settings
}

/// Why `key` of queue `queue` (of `role`) stays at its argument `have` although the spec
/// wants `want` (a number RabbitMQ applies as the lower of argument and policy), and the
/// way out for that kind of queue. Times (`message-ttl`) are shown as durations too.
pub(super) fn raised_above_argument(
    queue: &str,
    role: QueueRole,
    key: &str,
    (have, want): (&Value, &Value),
) -> String {
    let show = |v: &Value| match (key, v.as_u64()) {
        ("message-ttl" | "expires", Some(ms)) => format!("{ms} ms ({})", format_ms(ms)),
        _ => v.to_string(),
    };
    let way_out = match role {
        QueueRole::DeadLetter { .. } => format!(
            "to raise it, give the dead-letter queue a new name (spec.deadLetter.queue): the new queue is declared with the new value and {queue:?} is retired with its dead letters kept"
        ),
        QueueRole::Source | QueueRole::Inbox | QueueRole::Retry { .. } => format!(
            "keep the value at or below {}, or move the application to a new queue declared with the new value",
            show(have)
        ),
    };
    format!(
        "queue {queue:?} was declared with argument x-{key}={} (spec.broker.queueSettings: Arguments) and RabbitMQ applies the lower of an argument and a policy, so {key}={} cannot take effect in place; {way_out}",
        show(have),
        show(want)
    )
}

/// Why an existing queue cannot serve the plan under `queueSettings: Arguments`: another
/// type or a planned argument missing or different ([`queue_conflicts`] without a
/// policy), or an argument that differs from `settings` and wins over any policy
/// ([`Combine::Argument`]: the dead-letter exchange and routing key, the dead-letter
/// strategy, a classic queue's overflow).
pub(super) fn declared_conflicts(
    existing: &QueueInfo,
    plan: &QueuePlan,
    p: &PolicyPlan,
    settings: &BTreeMap<String, Value>,
) -> Vec<String> {
    let mut reasons = queue_conflicts(existing, plan, None);
    let queue_type = existing.kind.as_deref().unwrap_or("classic");
    let found = declared::declared(&existing.arguments, settings, queue_type);
    for (key, have, want) in found.fixed {
        if declared::combine(&key, queue_type) == Combine::Argument {
            reasons.push(format!(
                "queue {:?} has argument x-{key}={have}, which wins over any policy, so {key}={want} of {} cannot take effect: under spec.broker.queueSettings: Arguments the dead-letter exchange and routing key, router mode and a classic queue's overflow are fixed when the queue is declared; revert the change, or move to a new queue (a new spec.deadLetter.queue, or a new source queue)",
                plan.name, p.name
            ));
        }
    }
    reasons
}
