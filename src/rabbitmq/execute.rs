//! An apply, step by step: read what is there, check, [`diff`], perform the
//! writes through the management API ([`RabbitMq::execute`]), then retire what the plan
//! no longer has (module `retire`).

use reqwest::Method;
use serde_json::json;

use super::diff::{self, Diff, Entry, Write, APPLY_TO};
use super::management::encode_segment as enc;
use super::snapshot::{Facts, Snapshot};
use super::RabbitMq;
use crate::broker::{Action, ApplyReport, BrokerError, ObjectKind, Outcome};
use crate::topology::DesiredTopology;

/// What one write did.
enum Written {
    /// Done; its report line, if it has one of its own (ownership records are counted in
    /// one line of the diff).
    Done(Option<Action>),
    /// The broker refused to declare queue `name` (declared by someone else since the
    /// snapshot, with other arguments): the conflict line.
    QueueRefused {
        /// The queue.
        name: String,
        /// Its report line.
        action: Action,
    },
}

impl RabbitMq {
    /// [`RabbitMq::apply`]'s body: [`RabbitMq::snapshot`], an AMQP connection check
    /// ([`RabbitMq::check_amqp`]), the ownership records ([`RabbitMq::check_claims`]:
    /// another owner's stops the apply before any write), the facts some rules need
    /// ([`RabbitMq::facts`]), the [`diff::diff`], its writes ([`RabbitMq::execute`]),
    /// then the retirement of obsolete retry tiers and dead-letter queues once their
    /// replacements are usable.
    ///
    /// # Errors
    /// As [`RabbitMq::apply`].
    pub(super) async fn apply_plan(
        &self,
        plan: &DesiredTopology,
    ) -> Result<ApplyReport, BrokerError> {
        let snap = self.snapshot(plan).await?;
        // The management API answered; consumers, inspection and replay need AMQP too.
        self.check_amqp(&plan.vhost).await?;
        let owners = self.check_claims(plan).await?;
        let facts = self.facts(plan, &snap).await?;
        let diff = diff::diff(plan, &snap, &owners, &facts);
        tracing::debug!(
            owner = %plan.owner,
            writes = diff.writes().count(),
            entries = diff.entries.len(),
            "apply: diff against the broker"
        );
        let (mut actions, diff) = self.execute(plan, diff).await?;
        self.retire(plan, &snap, &owners, &diff, &mut actions)
            .await?;
        Ok(ApplyReport { actions })
    }

    /// Performs the writes of `diff` in order and returns the report lines with the diff
    /// as left (a queue declare the broker refuses updates the entries after it,
    /// [`Diff::queue_refused`]).
    ///
    /// # Errors
    /// Transport and authentication errors, and [`BrokerError::Api`] for a write the
    /// broker refuses for another reason than a queue's inequivalent arguments.
    pub(super) async fn execute(
        &self,
        plan: &DesiredTopology,
        mut diff: Diff,
    ) -> Result<(Vec<Action>, Diff), BrokerError> {
        let mut actions = Vec::new();
        while let Some(entry) = diff.entries.pop_front() {
            match entry {
                Entry::Report(action) => actions.push(action),
                Entry::BindingInPlace(b) => actions.push(Action {
                    kind: ObjectKind::Binding,
                    name: binding_name(&b),
                    outcome: Outcome::InPlace,
                }),
                Entry::Write(write) => match self.write(&plan.vhost, write).await? {
                    Written::Done(action) => actions.extend(action),
                    Written::QueueRefused { name, action } => {
                        actions.push(action);
                        diff.queue_refused(plan, &name);
                    }
                },
            }
        }
        Ok((actions, diff))
    }

    /// One write of a diff, in `vhost`.
    ///
    /// # Errors
    /// As [`RabbitMq::execute`].
    async fn write(&self, vhost: &str, write: Write) -> Result<Written, BrokerError> {
        let v = enc(vhost);
        let created = |kind, name: &str| {
            Written::Done(Some(Action {
                kind,
                name: name.to_string(),
                outcome: Outcome::Created,
            }))
        };
        Ok(match write {
            Write::RecordOwner(record) => {
                self.put_owner_record(&record).await?;
                Written::Done(None)
            }
            Write::DeclareExchange(x) => {
                let body = json!({
                    "type": x.kind.as_str(),
                    "durable": true,
                    "auto_delete": false,
                    "internal": false,
                    "arguments": {}
                });
                let path = format!("exchanges/{v}/{}", enc(&x.name));
                self.mgmt
                    .write(Method::PUT, &path, Some(&body), None)
                    .await?;
                created(ObjectKind::Exchange, &x.name)
            }
            Write::PutPolicy(w) => {
                let p = &w.policy;
                let body = json!({
                    "pattern": p.pattern,
                    "definition": p.definition,
                    "priority": p.priority,
                    "apply-to": APPLY_TO
                });
                let path = format!("policies/{v}/{}", enc(&p.name));
                self.mgmt
                    .write(Method::PUT, &path, Some(&body), None)
                    .await?;
                Written::Done(Some(w.action()))
            }
            Write::DeclareQueue(q) => {
                let body = json!({
                    "durable": true,
                    "auto_delete": false,
                    "arguments": q.declare_arguments()
                });
                let path = format!("queues/{v}/{}", enc(&q.name));
                match self
                    .mgmt
                    .write(Method::PUT, &path, Some(&body), Some(&q.name))
                    .await
                {
                    Ok(()) => created(ObjectKind::Queue, &q.name),
                    // Declared by someone else since our read.
                    Err(BrokerError::ArgumentConflict { reason, .. }) => Written::QueueRefused {
                        action: Action {
                            kind: ObjectKind::Queue,
                            name: q.name.clone(),
                            outcome: Outcome::Conflict(reason),
                        },
                        name: q.name,
                    },
                    Err(e) => return Err(e),
                }
            }
            Write::Bind(b) => {
                let body = json!({ "routing_key": b.routing_key, "arguments": {} });
                let path = format!("bindings/{v}/e/{}/q/{}", enc(&b.exchange), enc(&b.queue));
                self.mgmt
                    .write(Method::POST, &path, Some(&body), None)
                    .await?;
                created(ObjectKind::Binding, &binding_name(&b))
            }
        })
    }

    /// Retires the obsolete retry tiers and the dead-letter queues `plan` no longer has,
    /// each only when `diff` says what replaces them is usable (module `retire`).
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    async fn retire(
        &self,
        plan: &DesiredTopology,
        snap: &Snapshot,
        owners: &super::ownership::Found,
        diff: &Diff,
        actions: &mut Vec<Action>,
    ) -> Result<(), BrokerError> {
        if diff.retire_tiers {
            self.retire_tiers(plan, &snap.queues, &snap.bindings, owners, actions)
                .await?;
        }
        if diff.retire_dead_letter_queues {
            self.retire_dead_letter_queues(plan, owners, &snap.policies, actions)
                .await?;
        }
        if diff.retire_dead_letter_queues {
            // Only once the source's policy points at the dead-letter route again.
            self.retire_inbox(plan, &snap.policies, actions).await?;
        }
        Ok(())
    }
}

/// The report name of a binding: `exchange -> queue [routing key]`.
fn binding_name(b: &crate::topology::BindingPlan) -> String {
    format!("{} -> {} [{}]", b.exchange, b.queue, b.routing_key)
}

impl RabbitMq {
    /// The [`Facts`] the diff of `plan` against `snap` needs: the broker's version when a
    /// rule depends on it (read once per client, [`RabbitMq::broker_version`]), then the
    /// ready count of each queue a drop-head rule must check (an AMQP passive declare
    /// each).
    ///
    /// # Errors
    /// As [`RabbitMq::broker_version`] and [`super::amqp::passive_queue_counts`].
    async fn facts(&self, plan: &DesiredTopology, snap: &Snapshot) -> Result<Facts, BrokerError> {
        let mut facts = Facts::default();
        if diff::needs_broker_version(plan, snap) {
            facts.broker_version = Some(self.broker_version().await?);
        }
        for queue in diff::ready_counts_needed(plan, snap, &facts) {
            if let Some((ready, _)) =
                super::amqp::passive_queue_counts(self.mgmt.connection(), &plan.vhost, &queue)
                    .await?
            {
                facts.ready.insert(queue, u64::from(ready));
            }
        }
        Ok(facts)
    }
}
