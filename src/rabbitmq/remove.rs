//! Removal of a plan's objects ([`RabbitMq::remove`], `deletionPolicy: Delete`): the pure
//! steps decide what to delete and what blocks it ([`removal_targets`], [`busy_reason`],
//! [`removals`]); [`RabbitMq::remove_plan`] reads, checks and performs them.
//!
//! Order, so that no message is routed into an object about to go: every queue to delete
//! must be idle first (or nothing is written); then the policies, the source queue's first
//! (it stops dead-lettering to our exchange); then the exchanges (their bindings go with
//! them), unless bound to a queue that is not ours; then the queues; then, when nothing
//! blocked, the ownership records.

use std::collections::{BTreeMap, BTreeSet};

use super::management::{encode_segment as enc, BindingInfo, ExchangeInfo, PolicyInfo, QueueInfo};
use super::ownership::ForRemoval;
use super::{amqp, RabbitMq};
use crate::broker::{Action, BrokerError, DeleteOutcome, ObjectKind, Outcome, RemovalReport};
use crate::topology::{policy_name, DesiredTopology, QueueRole};

/// Columns read of the vhost's queues for a removal.
const QUEUE_COLUMNS: &str =
    "?columns=name,type,arguments,messages,messages_ready,messages_unacknowledged";

/// One step of a removal, in order ([`removals`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Removal<'q> {
    /// Delete policy (name).
    Policy(String),
    /// Delete exchange (name), its bindings with it.
    Exchange(String),
    /// Keep exchange `name`: it is bound to objects the operator does not own.
    KeepExchange {
        /// The exchange.
        name: String,
        /// Why it is kept.
        reason: String,
    },
    /// Delete a queue: a classic one only if empty and unused (the broker enforces it), a
    /// quorum one after a last check finds it idle.
    Queue(&'q QueueInfo),
}

/// The queues a removal of `plan` deletes, among the vhost's `queues`: the planned ones
/// but the source queue and those another owner's record holds, then the obsolete retry
/// tiers, then the dead-letter queues this resource retired (`records`).
pub fn removal_targets<'q>(
    plan: &DesiredTopology,
    queues: &'q [QueueInfo],
    records: &ForRemoval,
) -> Vec<&'q QueueInfo> {
    let queue_by_name: BTreeMap<&str, &QueueInfo> =
        queues.iter().map(|q| (q.name.as_str(), q)).collect();
    let mut targets: Vec<&QueueInfo> = plan
        .queues
        .iter()
        .filter(|q| q.role != QueueRole::Source)
        .filter(|q| !records.foreign_queue(&q.name))
        .filter_map(|q| queue_by_name.get(q.name.as_str()).copied())
        .collect();
    for name in plan
        .obsolete_tier_queues(queues.iter().map(|q| (q.name.as_str(), &q.arguments)))
        .iter()
        .chain(&records.retired)
    {
        if let Some(q) = queue_by_name.get(name.as_str()) {
            targets.push(q);
        }
    }
    targets
}

/// Why queue `q` must not be deleted now, or `None` when it is idle or gone: the messages
/// of its statistics (ready + unacknowledged, or the total) and `counts`, the ready
/// messages and consumers of an AMQP passive declare (`None`: the queue is gone).
pub fn busy_reason(q: &QueueInfo, counts: Option<(u32, u32)>) -> Option<String> {
    let stats = q
        .messages
        .unwrap_or(0)
        .max(q.messages_ready.unwrap_or(0) + q.messages_unacknowledged.unwrap_or(0));
    let (ready, consumers) = counts?;
    let messages = stats.max(u64::from(ready));
    if messages > 0 {
        Some(format!("queue {:?} holds {messages} message(s)", q.name))
    } else if consumers > 0 {
        Some(format!("queue {:?} has {consumers} consumer(s)", q.name))
    } else {
        None
    }
}

/// Why the source queue, which stays but loses its dead-letter route, blocks the removal:
/// `consumers` still attached would have their rejected messages dropped from now on.
pub fn source_blocker(source: &str, consumers: u32) -> Option<String> {
    (consumers > 0).then(|| {
        format!(
            "source queue {source:?} has {consumers} consumer(s), whose rejected messages would be dropped without the dead-letter route; stop them first"
        )
    })
}

/// What a removal of `plan` deletes and keeps, in order, from what exists: our policies
/// (the source queue's first, then the others, then those of the retired dead-letter
/// queues), our exchanges (kept while bound to anything but the `targets`), then the
/// `targets`. Nothing another owner's record holds (`records`).
pub fn removals<'q>(
    plan: &DesiredTopology,
    records: &ForRemoval,
    targets: &[&'q QueueInfo],
    existing: (&[PolicyInfo], &[ExchangeInfo], &[BindingInfo]),
) -> Vec<Removal<'q>> {
    let (policies, exchanges, bindings) = existing;
    let mut ours: Vec<&crate::topology::PolicyPlan> = plan
        .policies
        .iter()
        .filter(|p| !records.foreign_queue(&p.queue))
        .collect();
    ours.sort_by_key(|p| p.queue != plan.routes.source_queue);
    let names = ours
        .iter()
        .map(|p| p.name.clone())
        .chain(records.retired.iter().map(|q| policy_name(q)));
    let mut out: Vec<Removal> = names
        .filter(|name| policies.iter().any(|e| &e.name == name))
        .map(Removal::Policy)
        .collect();
    let our_queues: BTreeSet<&str> = targets.iter().map(|q| q.name.as_str()).collect();
    for x in &plan.exchanges {
        if records.foreign_exchange(&x.name) || !exchanges.iter().any(|e| e.name == x.name) {
            continue;
        }
        let foreign: Vec<&str> = bindings
            .iter()
            .filter(|b| b.source == x.name)
            .filter(|b| {
                b.destination_type != "queue" || !our_queues.contains(b.destination.as_str())
            })
            .map(|b| b.destination.as_str())
            .collect();
        out.push(if foreign.is_empty() {
            Removal::Exchange(x.name.clone())
        } else {
            Removal::KeepExchange {
                name: x.name.clone(),
                reason: format!(
                    "still bound to {} that the operator does not own",
                    foreign.join(", ")
                ),
            }
        });
    }
    out.extend(targets.iter().map(|q| Removal::Queue(q)));
    out
}

/// The outcome of deleting classic queue `name` only if empty and unused, and what blocks
/// the removal when it stays.
pub fn classic_queue_outcome(name: &str, deleted: DeleteOutcome) -> (Outcome, Option<String>) {
    match deleted {
        DeleteOutcome::Deleted | DeleteOutcome::Absent => (Outcome::Deleted, None),
        DeleteOutcome::NotEmpty { messages } => {
            let reason = format!("queue {name:?} holds {messages} message(s)");
            (Outcome::Retained(reason.clone()), Some(reason))
        }
        DeleteOutcome::Unsupported { reason } => {
            let blocked = format!("queue {name:?}: {reason}");
            (Outcome::Retained(reason), Some(blocked))
        }
    }
}

impl RabbitMq {
    /// [`RabbitMq::remove`]'s body: the vhost's queues and this resource's ownership
    /// records, the [`removal_targets`], their checks ([`RabbitMq::blockers`]: any
    /// message or consumer stops the removal before a write), the policies, exchanges and
    /// bindings, the [`removals`] performed in order, then (nothing blocked) the release
    /// of the ownership records. A missing vhost is nothing to remove.
    ///
    /// # Errors
    /// As [`RabbitMq::remove`].
    pub(super) async fn remove_plan(
        &self,
        plan: &DesiredTopology,
    ) -> Result<RemovalReport, BrokerError> {
        let vhost = plan.vhost.as_str();
        let queues: Vec<QueueInfo> = match self.list("queues", vhost, QUEUE_COLUMNS).await {
            Err(BrokerError::NotFound { .. }) => return Ok(RemovalReport::default()),
            other => other?,
        };
        // Never what another DeadLetterQueue's ownership record holds; the dead-letter
        // queues this one retired are its own.
        let records = self.ownership_for_removal(plan).await?;
        let targets = removal_targets(plan, &queues, &records);
        let blocked = self.blockers(plan, &targets).await?;
        if !blocked.is_empty() {
            return Ok(RemovalReport {
                actions: Vec::new(),
                blocked,
            });
        }
        let policies: Vec<PolicyInfo> = self.list("policies", vhost, "").await?;
        let exchanges: Vec<ExchangeInfo> = self.list("exchanges", vhost, "").await?;
        let bindings: Vec<BindingInfo> = self.list("bindings", vhost, "").await?;
        let steps = removals(plan, &records, &targets, (&policies, &exchanges, &bindings));
        let report = self.execute_removal(vhost, steps).await?;
        // Once nothing is left to wait for, the names are free again.
        if report.blocked.is_empty() {
            self.release_ownership(plan, &records).await?;
        }
        Ok(report)
    }

    /// Why the removal of `targets` must wait, one line per queue that holds messages or
    /// has consumers (statistics and an AMQP passive declare each), and for consumers on
    /// the source queue; empty when nothing blocks it.
    ///
    /// # Errors
    /// Transport and authentication errors (management API or AMQP).
    async fn blockers(
        &self,
        plan: &DesiredTopology,
        targets: &[&QueueInfo],
    ) -> Result<Vec<String>, BrokerError> {
        let mut blocked = Vec::new();
        for q in targets {
            blocked.extend(self.busy(&plan.vhost, q).await?);
        }
        let conn = self.mgmt.connection();
        let source = plan.routes.source_queue.as_str();
        if let Some((_, consumers)) = amqp::passive_queue_counts(conn, &plan.vhost, source).await? {
            blocked.extend(source_blocker(source, consumers));
        }
        Ok(blocked)
    }

    /// Why queue `q` must not be deleted now ([`busy_reason`]), from the statistics
    /// already in `q` and an AMQP passive declare.
    ///
    /// # Errors
    /// As [`amqp::passive_queue_counts`].
    async fn busy(&self, vhost: &str, q: &QueueInfo) -> Result<Option<String>, BrokerError> {
        let counts = amqp::passive_queue_counts(self.mgmt.connection(), vhost, &q.name).await?;
        Ok(busy_reason(q, counts))
    }

    /// Performs `steps` in order in `vhost`; a queue that cannot go yet is kept
    /// ([`Outcome::Retained`]) and blocks the report.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    async fn execute_removal(
        &self,
        vhost: &str,
        steps: Vec<Removal<'_>>,
    ) -> Result<RemovalReport, BrokerError> {
        let v = enc(vhost);
        let mut report = RemovalReport::default();
        for step in steps {
            let (kind, name, outcome) = match step {
                Removal::Policy(name) => {
                    self.delete_path(&format!("policies/{v}/{}", enc(&name)))
                        .await?;
                    (ObjectKind::Policy, name, Outcome::Deleted)
                }
                Removal::Exchange(name) => {
                    self.delete_path(&format!("exchanges/{v}/{}", enc(&name)))
                        .await?;
                    (ObjectKind::Exchange, name, Outcome::Deleted)
                }
                Removal::KeepExchange { name, reason } => {
                    (ObjectKind::Exchange, name, Outcome::Retained(reason))
                }
                Removal::Queue(q) => {
                    let (outcome, blocked) = self.remove_queue(vhost, q).await?;
                    report.blocked.extend(blocked);
                    (ObjectKind::Queue, q.name.clone(), outcome)
                }
            };
            report.actions.push(Action {
                kind,
                name,
                outcome,
            });
        }
        Ok(report)
    }

    /// Deletes queue `q`, nothing routing to it any more: a classic queue with
    /// `if-empty=true&if-unused=true` (the broker enforces it); a quorum queue (RabbitMQ
    /// 3.x cannot delete it only-if-empty) after a second passive declare finds no message
    /// and no consumer (see docs/ARCHITECTURE.md). Returns the outcome and what blocks the
    /// removal when it stays.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    async fn remove_queue(
        &self,
        vhost: &str,
        q: &QueueInfo,
    ) -> Result<(Outcome, Option<String>), BrokerError> {
        if q.kind.as_deref() != Some("quorum") {
            let deleted = self.delete_if_empty_known(vhost, &q.name, Some(q)).await?;
            return Ok(classic_queue_outcome(&q.name, deleted));
        }
        Ok(match self.busy(vhost, q).await? {
            Some(reason) => (Outcome::Retained(reason.clone()), Some(reason)),
            None => {
                self.delete_path(&format!("queues/{}/{}", enc(vhost), enc(&q.name)))
                    .await?;
                (Outcome::Deleted, None)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::ResolvedPolicy;
    use crate::crd::{DeadLetterQueueSpec, RetryPolicySpec};
    use crate::rabbitmq::ownership::{claims, OwnerRecord};
    use serde_json::{json, Value};

    fn plan() -> DesiredTopology {
        let spec: DeadLetterQueueSpec = serde_json::from_value(json!({
            "source": {"queue": "orders"},
            "retryPolicyRef": {"name": "p"},
            "broker": {"secretRef": {"name": "s"}},
        }))
        .expect("spec");
        let policy = ResolvedPolicy::from_spec(&RetryPolicySpec::default()).expect("policy");
        crate::topology::plan("default/orders", &spec, &policy)
    }

    fn queue(name: &str, kind: &str, arguments: Value, messages: u64) -> QueueInfo {
        serde_json::from_value(json!({
            "name": name, "type": kind, "arguments": arguments, "messages": messages,
        }))
        .expect("queue info")
    }

    /// Every planned queue as it was declared, and an obsolete 3 h tier.
    fn vhost_queues(plan: &DesiredTopology) -> Vec<QueueInfo> {
        let mut queues: Vec<QueueInfo> = plan
            .queues
            .iter()
            .map(|q| queue(&q.name, "quorum", json!(q.declare_arguments()), 0))
            .collect();
        let tier = json!({
            "x-message-ttl": 10_800_000,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "orders",
        });
        queues.push(queue("orders.retry.3h", "classic", tier, 0));
        queues
    }

    /// The records of every claim of `plan`, as `owner` wrote them; the dead-letter
    /// exchange's lists `retired`.
    fn records(plan: &DesiredTopology, owner: &str, retired: &[&str]) -> ForRemoval {
        let found = claims(plan)
            .into_iter()
            .map(|c| {
                let mut record: OwnerRecord = c.record(plan);
                record.owner = owner.to_string();
                if c.name == plan.routes.dead_letter_exchange {
                    record.retired = retired.iter().map(|s| s.to_string()).collect();
                }
                (c, Some(record))
            })
            .collect();
        ForRemoval::of(plan, found)
    }

    fn names(targets: &[&QueueInfo]) -> Vec<String> {
        targets.iter().map(|q| q.name.clone()).collect()
    }

    #[test]
    fn targets_are_ours_but_the_source_then_obsolete_tiers_then_retired_queues() {
        let plan = plan();
        let mut queues = vhost_queues(&plan);
        queues.push(queue("orders.old-dlq", "quorum", json!({}), 0));
        let ours = records(&plan, &plan.owner, &["orders.old-dlq", "gone"]);
        let targets = removal_targets(&plan, &queues, &ours);
        let mut want: Vec<String> = plan
            .queues
            .iter()
            .filter(|q| q.role != QueueRole::Source)
            .map(|q| q.name.clone())
            .collect();
        want.push("orders.retry.3h".into());
        want.push("orders.old-dlq".into());
        assert_eq!(names(&targets), want);
        // Another owner's names are never targets (their tiers are found by signature).
        let theirs = records(&plan, "default/other", &[]);
        let targets = removal_targets(&plan, &queues, &theirs);
        assert_eq!(names(&targets), ["orders.retry.3h"]);
    }

    #[test]
    fn a_queue_with_messages_or_consumers_blocks_and_a_gone_one_does_not() {
        let q = queue("orders.dlq", "quorum", json!({}), 0);
        assert_eq!(busy_reason(&q, Some((0, 0))), None);
        assert_eq!(busy_reason(&q, None), None);
        let why = busy_reason(&q, Some((3, 1))).expect("busy");
        assert_eq!(why, "queue \"orders.dlq\" holds 3 message(s)");
        let why = busy_reason(&q, Some((0, 2))).expect("busy");
        assert_eq!(why, "queue \"orders.dlq\" has 2 consumer(s)");
        // The statistics count too (unacknowledged messages are not in a passive declare).
        let stats = queue("orders.dlq", "quorum", json!({}), 5);
        assert!(busy_reason(&stats, Some((0, 0))).is_some_and(|w| w.contains("holds 5")));
        assert!(source_blocker("orders", 0).is_none());
        assert!(source_blocker("orders", 1).is_some_and(|w| w.contains("stop them first")));
    }

    fn policy(name: &str) -> PolicyInfo {
        serde_json::from_value(json!({"name": name, "pattern": "^x$"})).expect("policy")
    }

    fn binding(source: &str, destination: &str, kind: &str) -> BindingInfo {
        serde_json::from_value(json!({
            "source": source, "destination": destination, "destination_type": kind,
        }))
        .expect("binding")
    }

    #[test]
    fn removals_go_policies_source_first_then_exchanges_then_queues() {
        let plan = plan();
        let queues = vhost_queues(&plan);
        let ours = records(&plan, &plan.owner, &["orders.old-dlq"]);
        let targets = removal_targets(&plan, &queues, &ours);
        let mut policies: Vec<PolicyInfo> = plan.policies.iter().map(|p| policy(&p.name)).collect();
        policies.push(policy("dlq-operator.orders.old-dlq"));
        let exchanges: Vec<ExchangeInfo> = plan
            .exchanges
            .iter()
            .map(|x| serde_json::from_value(json!({"name": x.name, "type": "direct"})).expect("x"))
            .collect();
        let dlx = plan.routes.dead_letter_exchange.clone();
        let bindings = [
            binding(&dlx, "orders.dlq", "queue"),
            binding(&plan.routes.retry_exchange, "someone-elses", "queue"),
        ];
        let steps = removals(&plan, &ours, &targets, (&policies, &exchanges, &bindings));
        let source_policy = policy_name("orders");
        assert_eq!(steps[0], Removal::Policy(source_policy.clone()));
        let deleted: Vec<&String> = steps
            .iter()
            .filter_map(|s| match s {
                Removal::Policy(p) => Some(p),
                _ => None,
            })
            .collect();
        // Every planned policy once, and the retired queue's last (it no longer exists
        // as a queue here, but its policy does).
        assert_eq!(deleted.len(), plan.policies.len() + 1);
        assert_eq!(
            deleted.last().map(|s| s.as_str()),
            Some("dlq-operator.orders.old-dlq")
        );
        assert!(steps.contains(&Removal::Exchange(dlx)));
        assert!(steps.contains(&Removal::KeepExchange {
            name: plan.routes.retry_exchange.clone(),
            reason: "still bound to someone-elses that the operator does not own".into(),
        }));
        let queue_steps: Vec<&str> = steps
            .iter()
            .filter_map(|s| match s {
                Removal::Queue(q) => Some(q.name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(queue_steps, names(&targets));
        assert!(matches!(steps.last(), Some(Removal::Queue(_))));
        // Another owner's: nothing of theirs is touched.
        let theirs = records(&plan, "default/other", &[]);
        let steps = removals(&plan, &theirs, &[], (&policies, &exchanges, &bindings));
        assert!(steps.is_empty(), "{steps:?}");
    }

    #[test]
    fn a_classic_queue_that_is_not_empty_is_kept_and_blocks() {
        assert_eq!(
            classic_queue_outcome("q", DeleteOutcome::Absent),
            (Outcome::Deleted, None)
        );
        let (outcome, blocked) =
            classic_queue_outcome("q", DeleteOutcome::NotEmpty { messages: 2 });
        assert_eq!(
            outcome,
            Outcome::Retained("queue \"q\" holds 2 message(s)".into())
        );
        assert_eq!(blocked.as_deref(), Some("queue \"q\" holds 2 message(s)"));
        let (outcome, blocked) = classic_queue_outcome(
            "q",
            DeleteOutcome::Unsupported {
                reason: "not supported".into(),
            },
        );
        assert_eq!(outcome, Outcome::Retained("not supported".into()));
        assert_eq!(blocked.as_deref(), Some("queue \"q\": not supported"));
    }
}
