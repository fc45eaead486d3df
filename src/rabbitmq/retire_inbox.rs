//! The router inbox of a DeadLetterQueue that left router mode (docs/ROUTER.md,
//! "Switching router mode"): never deleted while it may hold a message.
//!
//! The apply that turns router mode off points the source queue back at the dead-letter
//! exchange first (its policy, written in place). This module then finds the old inbox
//! `<source>.router` by its ownership record (this resource's, role `router inbox`) and:
//! 1. the first time, marks its record `retired router inbox` and reports it `retired`:
//!    its messages still wait there (turn router mode on again to let the router drain
//!    it, or move them to the source queue with the shovel command given);
//! 2. on a later apply (so that no dead letter is still on its way from the source under
//!    the old policy), deletes it if it is a classic queue found empty (`if-empty`), then
//!    its exchange, policy and ownership records; a quorum inbox is kept for a person to
//!    delete (RabbitMQ 3.x cannot delete a quorum queue only-if-empty), after which the
//!    rest goes on the next apply.

use super::management::{encode_segment as enc, PolicyInfo, QueueInfo};
use super::ownership::{EXCHANGE, INBOX_ROLE, QUEUE};
use super::RabbitMq;
use crate::broker::{Action, BrokerError, DeleteOutcome, ObjectKind, Outcome};
use crate::topology::{policy_name, DesiredTopology};

/// Role recorded for an inbox whose resource left router mode.
pub const RETIRED_INBOX_ROLE: &str = "retired router inbox";

/// Columns read of the old inbox.
const QUEUE_COLUMNS: &str = "columns=name,type,messages,messages_ready,messages_unacknowledged";

impl RabbitMq {
    /// Retires the router inbox of `plan`'s resource when the plan has none (module
    /// documentation); `policies` are the vhost's policies. Does nothing in router mode,
    /// when the vhost has no policy of the inbox (never created, or forgotten), or when
    /// no inbox of this resource is recorded.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub(super) async fn retire_inbox(
        &self,
        plan: &DesiredTopology,
        policies: &[PolicyInfo],
        actions: &mut Vec<Action>,
    ) -> Result<(), BrokerError> {
        if plan.routes.inbox.is_some() {
            return Ok(());
        }
        let vhost = plan.vhost.as_str();
        let inbox = format!("{}.router", plan.routes.source_queue);
        // The inbox's policy lives until the inbox is forgotten ([`Self::forget_inbox`]):
        // without it there is nothing to retire, and an apply outside router mode makes
        // no request for the inbox at all.
        if !policies.iter().any(|p| p.name == policy_name(&inbox)) {
            return Ok(());
        }
        let Some(mut record) = self
            .owner_record(vhost, QUEUE, &inbox)
            .await?
            .filter(|r| r.owner == plan.owner)
        else {
            return Ok(());
        };
        if self.still_routed(plan, &inbox).await? {
            let reason = format!(
                "the router inbox of {}, which left router mode, but {} still dead-letters into it (a policy of higher priority, the queue's own arguments, or the broker's statistics do not show its new policy yet): kept",
                plan.owner, plan.routes.source_queue
            );
            actions.push(action(ObjectKind::Queue, &inbox, Outcome::Retired(reason)));
            return Ok(());
        }
        let queue: Option<QueueInfo> = self
            .get_opt(&format!(
                "queues/{}/{}?{QUEUE_COLUMNS}",
                enc(vhost),
                enc(&inbox)
            ))
            .await?;
        let held = self.held(vhost, &inbox, queue.as_ref()).await?;
        let quorum = queue.as_ref().and_then(|q| q.kind.as_deref()) == Some("quorum");
        if record.role == INBOX_ROLE {
            record.role = RETIRED_INBOX_ROLE.into();
            self.put_owner_record(&record).await?;
        } else if record.role == RETIRED_INBOX_ROLE {
            let gone = match &queue {
                None => true,
                Some(_) if quorum || held > 0 => false,
                Some(q) => matches!(
                    self.delete_if_empty_known(vhost, &inbox, Some(q)).await?,
                    DeleteOutcome::Deleted | DeleteOutcome::Absent
                ),
            };
            if gone {
                if queue.is_some() {
                    actions.push(action(ObjectKind::Queue, &inbox, Outcome::Deleted));
                }
                return self.forget_inbox(plan, &inbox, policies, actions).await;
            }
        } else {
            return Ok(());
        }
        if queue.is_some() {
            let reason = retired_reason(plan, &inbox, held, quorum);
            actions.push(action(ObjectKind::Queue, &inbox, Outcome::Retired(reason)));
        }
        Ok(())
    }

    /// Whether the source queue still dead-letters into `inbox` (through the default
    /// exchange), by its effective policy or its own arguments, or may (statistics not in
    /// yet): then the inbox must stay.
    async fn still_routed(&self, plan: &DesiredTopology, inbox: &str) -> Result<bool, BrokerError> {
        #[derive(serde::Deserialize)]
        struct Source {
            #[serde(default)]
            effective_policy_definition: Option<serde_json::Value>,
            #[serde(default)]
            arguments: Option<serde_json::Value>,
        }
        let source = &plan.routes.source_queue;
        let found: Option<Source> = self
            .get_opt(&format!(
                "queues/{}/{}?columns=effective_policy_definition,arguments",
                enc(&plan.vhost),
                enc(source)
            ))
            .await?;
        let Some(found) = found else {
            return Ok(false);
        };
        // The effective policy comes with the statistics: until they are in, it is not
        // known where the source dead-letters, so the inbox stays.
        if found.effective_policy_definition.is_none() {
            return Ok(true);
        }
        let routes_to_inbox = |v: &Option<serde_json::Value>, prefix: &str| {
            let get = |k: &str| {
                v.as_ref()
                    .and_then(|d| d.get(format!("{prefix}{k}")))
                    .and_then(serde_json::Value::as_str)
            };
            get("dead-letter-exchange") == Some("") && get("dead-letter-routing-key") == Some(inbox)
        };
        Ok(routes_to_inbox(&found.effective_policy_definition, "")
            || routes_to_inbox(&found.arguments, "x-"))
    }

    /// Messages in `name` by its statistics and, since they lag, a passive declare.
    async fn held(
        &self,
        vhost: &str,
        name: &str,
        queue: Option<&QueueInfo>,
    ) -> Result<u64, BrokerError> {
        let mut held = queue.and_then(|q| q.messages).unwrap_or(0);
        if queue.is_some() {
            if let Some((ready, _)) =
                super::amqp::passive_queue_counts(self.mgmt.connection(), vhost, name).await?
            {
                held = held.max(u64::from(ready));
            }
        }
        Ok(held)
    }

    /// Once the old inbox queue is gone: its exchange (if its record is this
    /// resource's), its policy, and both ownership records.
    async fn forget_inbox(
        &self,
        plan: &DesiredTopology,
        inbox: &str,
        policies: &[PolicyInfo],
        actions: &mut Vec<Action>,
    ) -> Result<(), BrokerError> {
        let vhost = plan.vhost.as_str();
        let exchange_ours = self
            .owner_record(vhost, EXCHANGE, inbox)
            .await?
            .is_some_and(|r| r.owner == plan.owner);
        if exchange_ours {
            let path = format!("exchanges/{}/{}", enc(vhost), enc(inbox));
            self.delete_path(&path).await?;
            actions.push(action(ObjectKind::Exchange, inbox, Outcome::Deleted));
            self.delete_owner_record(vhost, EXCHANGE, inbox).await?;
        }
        let policy = policy_name(inbox);
        if policies.iter().any(|p| p.name == policy) {
            self.delete_path(&format!("policies/{}/{}", enc(vhost), enc(&policy)))
                .await?;
            actions.push(action(ObjectKind::Policy, &policy, Outcome::Deleted));
        }
        self.delete_owner_record(vhost, QUEUE, inbox).await
    }
}

fn action(kind: ObjectKind, name: &str, outcome: Outcome) -> Action {
    Action {
        kind,
        name: name.to_string(),
        outcome,
    }
}

/// Why the old inbox `name` (holding `held` messages) is still there, and what to do.
fn retired_reason(plan: &DesiredTopology, name: &str, held: u64, quorum: bool) -> String {
    let why = format!(
        "the router inbox of {}, which left router mode (spec.router.enabled: false); {} dead-letters into {} again",
        plan.owner, plan.routes.source_queue, plan.routes.dead_letter_exchange
    );
    let source = plan.routes.source_queue.as_str();
    let left = if held == 1 {
        "1 message left".to_string()
    } else {
        format!("{held} messages left")
    };
    let delete = format!(
        "then delete it (`rabbitmqctl delete_queue {name}`: RabbitMQ cannot delete a quorum queue only-if-empty); the operator removes its exchange, policy and ownership records"
    );
    let shovel = super::retire::shovel_command(&plan.vhost, name, source);
    match (held, quorum) {
        (0, true) => format!("{why}; empty: {delete}"),
        (0, false) => format!("{why}; empty: removed by the next apply"),
        (_, true) => format!(
            "{why}; {left}: turn router mode on again to let the router drain it, or move them back to {source} ({shovel}), {delete}"
        ),
        (_, false) => format!(
            "{why}; {left}: turn router mode on again to let the router drain it, or move them back to {source} ({shovel}); removed once empty"
        ),
    }
}
