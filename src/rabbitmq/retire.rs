//! Queues an applied plan no longer wants, and how they leave without losing a message:
//!
//! - **Retry tiers** the RetryPolicy no longer plans (found by their signature,
//!   [`DesiredTopology::obsolete_tier_queues`]): unbound from the retry exchange, then
//!   deleted once empty (`if-empty`); quorum ones are kept (RabbitMQ 3.x cannot delete a
//!   quorum queue only-if-empty) for a person to delete. Their messages still return to
//!   the source queue when their TTL expires.
//! - **Dead-letter queues** no longer named by `spec.deadLetter.queue` or
//!   `partitionBy`: every binding from the resource's dead-letter exchange to a queue
//!   the plan does not have, and whose ownership record names this resource, is removed
//!   (otherwise each new dead letter would be stored twice); the queue keeps its policy
//!   (retention, limits) and is listed in the dead-letter exchange's record
//!   (`retired`), so every later apply reports it until it is empty and deleted
//!   (classic), or deleted by a person (quorum). A binding from the dead-letter
//!   exchange that someone else made (no record, or another owner's) is never touched.
//!
//! Both run only once the planned replacements are in place.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Method, StatusCode};

use super::management::{encode_segment as enc, BindingInfo, PolicyInfo, QueueInfo};
use super::ownership::{exchange_with_retired, Found, QUEUE, RETIRED_ROLE};
use super::RabbitMq;
use crate::broker::{Action, BrokerError, DeleteOutcome, ObjectKind, Outcome};
use crate::topology::{policy_name, DesiredTopology};

/// Why an obsolete quorum tier queue is kept.
const QUORUM_RETAINED: &str = "unbound, so no new retries enter it; its messages still return to the source queue. Kept because RabbitMQ cannot delete a quorum queue only-if-empty: delete it once its depth is 0";

/// "N message(s) left" for a draining tier queue.
fn messages_left(n: u64) -> String {
    let plural = if n == 1 { "" } else { "s" };
    format!("{n} message{plural} left; removed once empty")
}

/// Columns read of a binding.
const BINDING_COLUMNS: &str =
    "columns=source,destination,destination_type,routing_key,properties_key";

/// Columns read of a retired queue.
const QUEUE_COLUMNS: &str =
    "columns=name,type,arguments,messages,messages_ready,messages_unacknowledged";

impl RabbitMq {
    /// `DELETE` of binding `b` (by its properties key); a binding already gone counts
    /// as deleted. Returns the `binding … : deleted` action.
    async fn unbind(&self, vhost: &str, b: &BindingInfo) -> Result<Action, BrokerError> {
        let path = format!(
            "bindings/{}/e/{}/q/{}/{}",
            enc(vhost),
            enc(&b.source),
            enc(&b.destination),
            enc(&b.properties_key)
        );
        let answer = self.mgmt.send(Method::DELETE, &path, None).await?;
        if !answer.status.is_success() && answer.status != StatusCode::NOT_FOUND {
            return Err(self.mgmt.api_error(&Method::DELETE, &path, &answer));
        }
        Ok(Action {
            kind: ObjectKind::Binding,
            name: format!("{} -> {} [{}]", b.source, b.destination, b.routing_key),
            outcome: Outcome::Deleted,
        })
    }

    /// Retires the obsolete retry tiers among `existing` (the snapshot's queues, with
    /// `bindings` of the unplanned ones): unbind, then delete once empty (and its
    /// ownership record with it), or report `draining` / `retained`. The tiers kept are
    /// listed in the retry exchange's record (`retired`, from `found`), so that the
    /// record of one a person deletes later goes too (it is no longer in `existing`).
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub(super) async fn retire_tiers(
        &self,
        plan: &DesiredTopology,
        existing: &[QueueInfo],
        bindings: &[BindingInfo],
        found: &Found,
        actions: &mut Vec<Action>,
    ) -> Result<(), BrokerError> {
        let vhost = plan.vhost.as_str();
        let retry_exchange = plan.routes.retry_exchange.as_str();
        let queue_by_name: BTreeMap<&str, &QueueInfo> =
            existing.iter().map(|q| (q.name.as_str(), q)).collect();
        let mut kept = BTreeSet::new();
        for name in
            plan.obsolete_tier_queues(existing.iter().map(|q| (q.name.as_str(), &q.arguments)))
        {
            // A tier another DeadLetterQueue's record still holds (its names were released
            // one by one, or only in part) is not ours to unbind or delete.
            if let Some(other) = self
                .owner_record(vhost, QUEUE, &name)
                .await?
                .filter(|r| r.owner != plan.owner)
            {
                actions.push(Action {
                    kind: ObjectKind::Queue,
                    outcome: Outcome::Retained(format!(
                        "an obsolete retry tier, but its ownership record names DeadLetterQueue {} ({}): left alone; release it with `rabbitmqctl clear_global_parameter {}` for {} to retire it",
                        other.owner,
                        other.role,
                        other.parameter(),
                        plan.owner
                    )),
                    name,
                });
                continue;
            }
            for b in bindings.iter().filter(|b| {
                b.source == retry_exchange && b.destination == name && b.destination_type == "queue"
            }) {
                actions.push(self.unbind(vhost, b).await?);
            }
            let outcome = self
                .retire_tier(vhost, &name, queue_by_name.get(name.as_str()).copied())
                .await?;
            if outcome != Outcome::Deleted {
                kept.insert(name.clone());
            }
            actions.push(Action {
                kind: ObjectKind::Queue,
                name,
                outcome,
            });
        }
        self.keep_retired_tiers(plan, existing, found, kept).await
    }

    /// One obsolete tier, already unbound: deleted once empty (a classic queue, by the
    /// broker's `if-empty`; its record with it), `draining` while it holds messages,
    /// `retained` when quorum.
    async fn retire_tier(
        &self,
        vhost: &str,
        name: &str,
        known: Option<&QueueInfo>,
    ) -> Result<Outcome, BrokerError> {
        let stats = known.and_then(|q| q.messages).unwrap_or(0);
        Ok(if known.and_then(|q| q.kind.as_deref()) == Some("quorum") {
            // No request: the broker cannot delete a quorum queue only-if-empty.
            Outcome::Retained(QUORUM_RETAINED.into())
        } else if stats > 0 {
            // Statistics say it holds messages: no write until they say otherwise.
            Outcome::Draining(messages_left(stats))
        } else {
            match self.delete_if_empty_known(vhost, name, known).await? {
                DeleteOutcome::Deleted | DeleteOutcome::Absent => {
                    self.delete_owner_record(vhost, QUEUE, name).await?;
                    Outcome::Deleted
                }
                DeleteOutcome::NotEmpty { messages } => Outcome::Draining(messages_left(messages)),
                DeleteOutcome::Unsupported { .. } => Outcome::Retained(QUORUM_RETAINED.into()),
            }
        })
    }

    /// Keeps the retry exchange's record listing the tiers `kept` now; a tier it listed
    /// that is gone from `existing` (deleted by a person) loses its ownership record, if
    /// that record is this resource's.
    async fn keep_retired_tiers(
        &self,
        plan: &DesiredTopology,
        existing: &[QueueInfo],
        found: &Found,
        kept: BTreeSet<String>,
    ) -> Result<(), BrokerError> {
        let Some((claim, listed)) = exchange_with_retired(found, &plan.routes.retry_exchange)
        else {
            return Ok(());
        };
        for name in listed.difference(&kept) {
            let gone = !existing.iter().any(|q| &q.name == name);
            if gone && self.records_queue_of(plan, name).await? {
                self.delete_owner_record(&plan.vhost, QUEUE, name).await?;
            }
        }
        if kept != listed {
            let mut record = claim.record(plan);
            record.retired = kept.into_iter().collect();
            self.put_owner_record(&record).await?;
        }
        Ok(())
    }

    /// Retires the dead-letter queues `plan` no longer has (module documentation):
    /// unbinds ours from the dead-letter exchange, reports each retired queue, deletes
    /// it once empty (classic) with its policy and record, forgets it once gone, and keeps
    /// the dead-letter exchange's record (`retired`) current. `found` are the records
    /// read before the apply; `policies` the vhost's policies.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub(super) async fn retire_dead_letter_queues(
        &self,
        plan: &DesiredTopology,
        found: &Found,
        policies: &[PolicyInfo],
        actions: &mut Vec<Action>,
    ) -> Result<(), BrokerError> {
        let Some((dlx_claim, listed)) =
            exchange_with_retired(found, &plan.routes.dead_letter_exchange)
        else {
            return Ok(());
        };
        let planned: BTreeSet<&str> = plan.queues.iter().map(|q| q.name.as_str()).collect();
        let mut retired = listed.clone();
        retired.extend(self.unbind_unplanned(plan, &planned, actions).await?);
        retired.retain(|n| !planned.contains(n.as_str()));
        let mut gone = Vec::new();
        for name in &retired {
            // Only a queue whose own record still names this resource: a list edited by
            // hand, or a name released and taken by another resource since, is forgotten
            // without touching the queue.
            let ours = self.records_queue_of(plan, name).await?;
            if !ours || self.report_retired(plan, name, policies, actions).await? {
                gone.push(name.clone());
            }
        }
        for name in gone {
            retired.remove(&name);
        }
        if retired != listed {
            let mut record = dlx_claim.record(plan);
            record.retired = retired.into_iter().collect();
            self.put_owner_record(&record).await?;
        }
        Ok(())
    }

    /// Removes every binding from the dead-letter exchange to a queue that is not in
    /// `planned` and whose record names the plan's owner (marking that record
    /// [`RETIRED_ROLE`]); returns those queues.
    async fn unbind_unplanned(
        &self,
        plan: &DesiredTopology,
        planned: &BTreeSet<&str>,
        actions: &mut Vec<Action>,
    ) -> Result<Vec<String>, BrokerError> {
        let vhost = plan.vhost.as_str();
        let dlx = plan.routes.dead_letter_exchange.as_str();
        let bindings: Vec<BindingInfo> = self
            .get_opt(&format!(
                "exchanges/{}/{}/bindings/source?{BINDING_COLUMNS}",
                enc(vhost),
                enc(dlx)
            ))
            .await?
            .unwrap_or_default();
        let unplanned: BTreeSet<&str> = bindings
            .iter()
            .filter(|b| b.destination_type == "queue" && !planned.contains(b.destination.as_str()))
            .map(|b| b.destination.as_str())
            .collect();
        let mut retired = Vec::new();
        for name in unplanned {
            let Some(mut record) = self.owner_record(vhost, QUEUE, name).await? else {
                continue;
            };
            if record.owner != plan.owner {
                continue;
            }
            for b in bindings.iter().filter(|b| b.destination == name) {
                actions.push(self.unbind(vhost, b).await?);
            }
            if record.role != RETIRED_ROLE {
                record.role = RETIRED_ROLE.into();
                self.put_owner_record(&record).await?;
            }
            retired.push(name.to_string());
        }
        Ok(retired)
    }

    /// Reports retired dead-letter queue `name`: deleted (with its policy and record)
    /// when it is a classic queue found empty, `retired` with what is left otherwise.
    /// Returns `true` when the queue is gone (deleted now, or by someone before).
    async fn report_retired(
        &self,
        plan: &DesiredTopology,
        name: &str,
        policies: &[PolicyInfo],
        actions: &mut Vec<Action>,
    ) -> Result<bool, BrokerError> {
        let vhost = plan.vhost.as_str();
        let queue: Option<QueueInfo> = self
            .get_opt(&format!(
                "queues/{}/{}?{QUEUE_COLUMNS}",
                enc(vhost),
                enc(name)
            ))
            .await?;
        // The statistics lag (by `collect_statistics_interval`): ask the queue too.
        let mut held = queue.as_ref().and_then(|q| q.messages).unwrap_or(0);
        if queue.is_some() {
            if let Some((ready, _)) =
                super::amqp::passive_queue_counts(self.mgmt.connection(), vhost, name).await?
            {
                held = held.max(u64::from(ready));
            }
        }
        let quorum = queue.as_ref().and_then(|q| q.kind.as_deref()) == Some("quorum");
        let deleted = match &queue {
            None => true,
            Some(_) if quorum || held > 0 => false,
            Some(q) => match self.delete_if_empty_known(vhost, name, Some(q)).await? {
                DeleteOutcome::Deleted | DeleteOutcome::Absent => {
                    actions.push(Action {
                        kind: ObjectKind::Queue,
                        name: name.to_string(),
                        outcome: Outcome::Deleted,
                    });
                    true
                }
                DeleteOutcome::NotEmpty { .. } | DeleteOutcome::Unsupported { .. } => false,
            },
        };
        if deleted {
            let policy = policy_name(name);
            if policies.iter().any(|p| p.name == policy) {
                self.delete_path(&format!("policies/{}/{}", enc(vhost), enc(&policy)))
                    .await?;
                actions.push(Action {
                    kind: ObjectKind::Policy,
                    name: policy,
                    outcome: Outcome::Deleted,
                });
            }
            self.delete_owner_record(vhost, QUEUE, name).await?;
            return Ok(true);
        }
        actions.push(Action {
            kind: ObjectKind::Queue,
            name: name.to_string(),
            outcome: Outcome::Retired(retired_reason(plan, name, held, quorum)),
        });
        Ok(false)
    }
}

/// The `rabbitmqctl` command of a dynamic shovel (RabbitMQ docs, "Dynamic Shovels") that
/// moves every message of queue `from` to queue `to` in `vhost` over a direct connection
/// (`amqp:///<vhost>`), keeping their headers, and deletes itself once `from` is empty
/// (`src-delete-after: queue-length`). Tried on RabbitMQ 3.10.8.
pub(super) fn shovel_command(vhost: &str, from: &str, to: &str) -> String {
    let uri = format!("amqp:///{}", enc(vhost));
    let definition = serde_json::json!({
        "src-uri": uri,
        "src-queue": from,
        "dest-uri": uri,
        "dest-queue": to,
        "src-delete-after": "queue-length",
    });
    format!(
        "rabbitmqctl set_parameter -p '{}' shovel 'dlq-operator-move-{}' '{}'",
        vhost.replace('\'', "'\\''"),
        from.replace('\'', "'\\''"),
        definition.to_string().replace('\'', "'\\''")
    )
}

/// Why retired dead-letter queue `name` (holding `held` messages by the statistics) is
/// still there, and what to do.
fn retired_reason(plan: &DesiredTopology, name: &str, held: u64, quorum: bool) -> String {
    let current = plan.dead_letter_queues().next().unwrap_or_default();
    let why = format!(
        "no longer a dead-letter queue of {} (spec.deadLetter.queue or partitionBy changed), unbound from {}",
        plan.owner, plan.routes.dead_letter_exchange
    );
    let delete = format!(
        "delete it (`rabbitmqctl delete_queue {name}`: RabbitMQ cannot delete a quorum queue only-if-empty); the operator then removes its policy and ownership record"
    );
    let (left, them) = if held == 1 {
        ("1 dead letter left".to_string(), "it")
    } else {
        (format!("{held} dead letters left"), "them")
    };
    let shovel = shovel_command(&plan.vhost, name, current);
    match (held, quorum) {
        (0, true) => format!("{why}; empty: {delete}"),
        (0, false) => format!("{why}; deleted once empty"),
        (_, true) => format!(
            "{why}; {left}: move {them} to {current} (a shovel that removes itself when done: {shovel}), then {delete}"
        ),
        (_, false) => format!(
            "{why}; {left}: move {them} to {current} (a shovel that removes itself when done: {shovel}); deleted once empty"
        ),
    }
}
