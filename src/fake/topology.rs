//! [`BrokerTopology`] of the [`FakeBroker`]: apply, remove, depths (module doc of
//! [`super`] for the rules kept).

use std::collections::{BTreeMap, BTreeSet};

use super::{FakeBinding, FakeBroker, FakePolicy, FakeQueue, State};
use crate::broker::{
    Action, ApplyReport, BrokerError, BrokerTopology, DeleteOutcome, ObjectKind, Outcome,
    QueueDepth, QueueLimits, RemovalReport, RequestCounts,
};
use crate::rabbitmq::ownership::{
    claims, conflict_message, record_actions, record_name, Claim, EXCHANGE, QUEUE,
};
use crate::rabbitmq::{json_equal, pattern_matches};
use crate::topology::{BindingPlan, DesiredTopology, PolicyPlan, QueuePlan, QueueRole, Step};

/// What an apply learned so far: objects the plan's bindings must skip.
#[derive(Default)]
struct Unusable {
    exchanges: BTreeSet<String>,
    queues: BTreeSet<String>,
}

/// `exchange -> queue [routing key]`, the name of a binding in a report.
fn binding_name(b: &BindingPlan) -> String {
    format!("{} -> {} [{}]", b.exchange, b.queue, b.routing_key)
}

/// Why existing queue `q` cannot serve `plan` (empty when it can): another type, a
/// planned argument missing or different, or an argument that overrides a key of the
/// plan's policy `policy` (queue arguments take precedence over policies).
fn queue_conflicts(q: &FakeQueue, plan: &QueuePlan, policy: Option<&PolicyPlan>) -> Vec<String> {
    let mut reasons = Vec::new();
    let want = plan.queue_type.argument();
    if q.kind != want {
        reasons.push(format!(
            "queue {:?} is a {} queue (x-queue-type), the plan wants {want}",
            plan.name, q.kind
        ));
    }
    for (key, value) in &plan.arguments {
        match q.arguments.get(key) {
            None => reasons.push(format!(
                "queue {:?} has no argument {key}, the plan wants {value}",
                plan.name
            )),
            Some(have) if !json_equal(have, value) => reasons.push(format!(
                "queue {:?} has argument {key}={have}, the plan wants {value}",
                plan.name
            )),
            Some(_) => {}
        }
    }
    for key in policy.map(|p| p.definition.keys()).into_iter().flatten() {
        let arg = format!("x-{key}");
        if let Some(have) = q
            .arguments
            .get(&arg)
            .filter(|_| !plan.arguments.contains_key(&arg))
        {
            reasons.push(format!(
                "queue {:?} has argument {arg}={have}, which overrides key {key} of the operator's policy",
                plan.name
            ));
        }
    }
    reasons
}

impl State {
    /// Refuses `plan` when another owner's record holds one of its names, or its source
    /// exchange is an operator-managed exchange.
    fn check_claims(&self, plan: &DesiredTopology) -> Result<(), BrokerError> {
        let taken: Vec<_> = claims(plan)
            .into_iter()
            .filter_map(|c| {
                let r = self
                    .records
                    .get(&record_name(&plan.vhost, c.kind, &c.name))?;
                (r.owner != plan.owner).then(|| (c, r.clone()))
            })
            .collect();
        if let Some((first, _)) = taken.first() {
            return Err(BrokerError::NameOwned {
                field: first.field,
                message: conflict_message(&taken),
            });
        }
        let source_exchange = plan.source_exchange.as_deref();
        if let Some(r) =
            source_exchange.and_then(|x| self.records.get(&record_name(&plan.vhost, EXCHANGE, x)))
        {
            return Err(BrokerError::NameOwned {
                field: "spec.source.exchange",
                message: format!(
                    "exchange {:?} is DeadLetterQueue {}'s {}: name the exchange your publishers use",
                    r.name, r.owner, r.role
                ),
            });
        }
        Ok(())
    }

    /// Writes the records of the claims the plan adopts (`adopted`), missing or with
    /// another role; their report lines.
    fn record_claims(
        &mut self,
        plan: &DesiredTopology,
        adopted: impl Fn(&Claim) -> bool,
    ) -> Vec<Action> {
        let (mut created, mut updated) = (0, 0);
        for claim in claims(plan).into_iter().filter(|c| adopted(c)) {
            let mut record = claim.record(plan);
            match self.records.get(&record.parameter()) {
                Some(e) if e.role == record.role => continue,
                Some(e) => {
                    record.retired = e.retired.clone();
                    updated += 1;
                }
                None => created += 1,
            }
            self.writes += 1;
            self.records.insert(record.parameter(), record);
        }
        record_actions(created, updated)
    }

    /// One step of an apply in `vhost`.
    fn apply_step(
        &mut self,
        plan: &DesiredTopology,
        step: Step<'_>,
        conflicts: &BTreeMap<String, Vec<String>>,
        unusable: &mut Unusable,
    ) -> Option<Action> {
        let v = self.vhosts.get_mut(&plan.vhost)?;
        let (kind, name, outcome) = match step {
            Step::Exchange(x) => {
                let outcome = match v.exchanges.get(&x.name) {
                    Some(k) if k == x.kind.as_str() => Outcome::InPlace,
                    Some(k) => {
                        unusable.exchanges.insert(x.name.clone());
                        Outcome::Conflict(format!(
                            "exchange {:?} exists with type {k}, the plan wants {}",
                            x.name,
                            x.kind.as_str()
                        ))
                    }
                    None => {
                        v.exchanges.insert(x.name.clone(), x.kind.as_str().into());
                        Outcome::Created
                    }
                };
                (ObjectKind::Exchange, x.name.clone(), outcome)
            }
            Step::Policy(p) => {
                let ready = !unusable
                    .exchanges
                    .contains(&plan.routes.dead_letter_exchange)
                    && plan
                        .dead_letter_queues()
                        .all(|q| !unusable.queues.contains(q));
                let outcome = apply_policy(v, plan, p, conflicts, ready);
                (ObjectKind::Policy, p.name.clone(), outcome)
            }
            Step::Queue(q) => {
                let outcome = match (v.queues.get(&q.name), conflicts.get(&q.name)) {
                    (None, _) if !q.declare => {
                        unusable.queues.insert(q.name.clone());
                        Outcome::Failed(format!(
                            "source queue {} does not exist and spec.source.manage is false",
                            q.name
                        ))
                    }
                    (None, _) => {
                        let queue = FakeQueue {
                            kind: q.queue_type.argument().to_string(),
                            arguments: q.declare_arguments(),
                            ..FakeQueue::default()
                        };
                        v.queues.insert(q.name.clone(), queue);
                        Outcome::Created
                    }
                    (Some(_), None) => Outcome::InPlace,
                    (Some(_), Some(reasons)) => {
                        unusable.queues.insert(q.name.clone());
                        Outcome::Conflict(format!(
                            "{}; left untouched (queue arguments are immutable and the queue is never deleted to fix this)",
                            reasons.join("; ")
                        ))
                    }
                };
                (ObjectKind::Queue, q.name.clone(), outcome)
            }
            Step::Binding(b) => {
                if unusable.exchanges.contains(&b.exchange) || unusable.queues.contains(&b.queue) {
                    return None;
                }
                let binding = FakeBinding {
                    exchange: b.exchange.clone(),
                    queue: b.queue.clone(),
                    routing_key: b.routing_key.clone(),
                };
                let outcome = if v.bindings.insert(binding) {
                    Outcome::Created
                } else {
                    Outcome::InPlace
                };
                (ObjectKind::Binding, binding_name(b), outcome)
            }
        };
        if matches!(outcome, Outcome::Created | Outcome::Updated) {
            self.writes += 1;
        }
        Some(Action {
            kind,
            name,
            outcome,
        })
    }

    /// Unbinds the retry tiers of this source queue that `plan` no longer has, then
    /// deletes each once empty (a quorum one is kept: RabbitMQ 3.x cannot delete it
    /// only-if-empty).
    fn retire_tiers(&mut self, plan: &DesiredTopology, actions: &mut Vec<Action>) {
        let Some(v) = self.vhosts.get_mut(&plan.vhost) else {
            return;
        };
        let obsolete =
            plan.obsolete_tier_queues(v.queues.iter().map(|(n, q)| (n.as_str(), &q.arguments)));
        for name in obsolete {
            let gone: Vec<FakeBinding> = v
                .bindings
                .iter()
                .filter(|b| b.exchange == plan.routes.retry_exchange && b.queue == name)
                .cloned()
                .collect();
            for b in gone {
                v.bindings.remove(&b);
                actions.push(Action {
                    kind: ObjectKind::Binding,
                    name: format!("{} -> {} [{}]", b.exchange, b.queue, b.routing_key),
                    outcome: Outcome::Deleted,
                });
            }
            let Some(q) = v.queues.get(&name) else {
                continue;
            };
            let outcome = if q.kind == "quorum" {
                Outcome::Retained("unbound; kept because a quorum queue cannot be deleted only-if-empty: delete it once its depth is 0".into())
            } else if !q.messages.is_empty() {
                let n = q.messages.len();
                Outcome::Draining(format!("{n} message(s) left; removed once empty"))
            } else {
                v.queues.remove(&name);
                self.records.remove(&record_name(&plan.vhost, QUEUE, &name));
                Outcome::Deleted
            };
            actions.push(Action {
                kind: ObjectKind::Queue,
                name,
                outcome,
            });
        }
    }
}

/// The outcome of policy step `p` in vhost `v`: written when missing or different (the
/// keys of lower-priority policies on the queue merged in), unless its queue conflicts
/// or, for the source queue, the dead-letter route is not `ready`; shadowed when another
/// policy of higher or equal priority matches the queue.
fn apply_policy(
    v: &mut super::FakeVhost,
    plan: &DesiredTopology,
    p: &PolicyPlan,
    conflicts: &BTreeMap<String, Vec<String>>,
    ready: bool,
) -> Outcome {
    let ours = i64::from(p.priority);
    let others: Vec<(&String, &FakePolicy)> = v
        .policies
        .iter()
        .filter(|(name, o)| {
            **name != p.name && pattern_matches(&o.pattern, &p.queue) != Some(false)
        })
        .collect();
    let shadow = others
        .iter()
        .filter(|(_, o)| o.priority >= ours)
        .max_by_key(|(_, o)| o.priority)
        .map(|(name, o)| format!("policy {name} (priority {}) takes precedence over {} (priority {ours}) on queue {:?}", o.priority, p.name, p.queue));
    let mut definition = p.definition.clone();
    for (_, o) in others.iter().filter(|(_, o)| o.priority < ours) {
        for (k, val) in &o.definition {
            if !crate::rabbitmq::NEVER_MERGED.contains(&k.as_str()) {
                definition.entry(k.clone()).or_insert_with(|| val.clone());
            }
        }
    }
    let wanted = FakePolicy {
        pattern: p.pattern.clone(),
        apply_to: "queues".into(),
        priority: ours,
        definition,
    };
    let same = |e: &FakePolicy| {
        e.pattern == wanted.pattern
            && e.priority == wanted.priority
            && e.apply_to == wanted.apply_to
            && e.definition.len() == wanted.definition.len()
            && e.definition
                .iter()
                .all(|(k, x)| wanted.definition.get(k).is_some_and(|y| json_equal(x, y)))
    };
    let write = match v.policies.get(&p.name) {
        None => Some(Outcome::Created),
        Some(e) if !same(e) => Some(Outcome::Updated),
        Some(_) => None,
    };
    let outcome = match write {
        Some(_) if conflicts.contains_key(&p.queue) => Outcome::Conflict(format!(
            "not written: queue {:?} exists with conflicting arguments",
            p.queue
        )),
        Some(_) if p.queue == plan.routes.source_queue && !ready => Outcome::Conflict(format!(
            "not written: the dead-letter route ({} and its dead-letter queues) is not in place (see the conflicts above); pointing {:?} at it would drop its dead letters",
            plan.routes.dead_letter_exchange, p.queue
        )),
        Some(outcome) => {
            v.policies.insert(p.name.clone(), wanted);
            outcome
        }
        None => Outcome::InPlace,
    };
    match shadow {
        Some(why) => Outcome::Shadowed(why),
        None => outcome,
    }
}

impl FakeBroker {
    /// [`BrokerTopology::apply`] under the lock.
    fn apply_now(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        let v = s.vhost(&plan.vhost)?;
        let conflicts: BTreeMap<String, Vec<String>> = plan
            .queues
            .iter()
            .filter_map(|q| {
                let existing = v.queues.get(&q.name)?;
                let policy = plan.policies.iter().find(|p| p.queue == q.name);
                let reasons = queue_conflicts(existing, q, policy);
                (!reasons.is_empty()).then(|| (q.name.clone(), reasons))
            })
            .collect();
        let foreign: BTreeSet<String> = plan
            .exchanges
            .iter()
            .filter(|x| {
                v.exchanges
                    .get(&x.name)
                    .is_some_and(|k| k != x.kind.as_str())
            })
            .map(|x| x.name.clone())
            .collect();
        let source_exchange_missing = plan
            .source_exchange
            .as_ref()
            .filter(|x| !v.exchanges.contains_key(*x))
            .cloned();
        s.check_claims(plan)?;
        let mut actions = s.record_claims(plan, |c| {
            if c.kind == EXCHANGE {
                !foreign.contains(&c.name)
            } else {
                !conflicts.contains_key(&c.name)
            }
        });
        let mut unusable = Unusable::default();
        if let Some(sx) = source_exchange_missing {
            unusable.exchanges.insert(sx.clone());
            actions.push(Action {
                kind: ObjectKind::Exchange,
                outcome: Outcome::Failed(format!(
                    "source exchange {sx:?} does not exist in vhost {:?}; the operator never declares it (spec.source.exchange)",
                    plan.vhost
                )),
                name: sx,
            });
        }
        for step in plan.steps() {
            actions.extend(s.apply_step(plan, step, &conflicts, &mut unusable));
        }
        let tiers_in_place = plan
            .queues
            .iter()
            .filter(|q| matches!(q.role, QueueRole::Retry { .. }))
            .all(|q| !unusable.queues.contains(&q.name));
        if tiers_in_place {
            s.retire_tiers(plan, &mut actions);
        }
        Ok(ApplyReport { actions })
    }

    /// [`BrokerTopology::remove`] under the lock.
    fn remove_now(&self, plan: &DesiredTopology) -> Result<RemovalReport, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        let vhost = plan.vhost.clone();
        let foreign = |s: &State, kind: &str, name: &str| {
            s.records
                .get(&record_name(&vhost, kind, name))
                .is_some_and(|r| r.owner != plan.owner)
        };
        let Some(v) = s.vhosts.get(&vhost) else {
            return Ok(RemovalReport::default());
        };
        let mut targets: Vec<String> = plan
            .queues
            .iter()
            .filter(|q| q.role != QueueRole::Source && v.queues.contains_key(&q.name))
            .map(|q| q.name.clone())
            .filter(|name| !foreign(&s, QUEUE, name))
            .collect();
        targets.extend(
            plan.obsolete_tier_queues(v.queues.iter().map(|(n, q)| (n.as_str(), &q.arguments))),
        );
        let mut blocked = Vec::new();
        for name in &targets {
            if let Some(q) = v.queues.get(name) {
                if !q.messages.is_empty() {
                    blocked.push(format!(
                        "queue {name:?} holds {} message(s)",
                        q.messages.len()
                    ));
                } else if q.consumers > 0 {
                    blocked.push(format!("queue {name:?} has {} consumer(s)", q.consumers));
                }
            }
        }
        let source = &plan.routes.source_queue;
        if let Some(consumers) = v.queues.get(source).map(|q| q.consumers).filter(|c| *c > 0) {
            blocked.push(format!(
                "source queue {source:?} has {consumers} consumer(s), whose rejected messages would be dropped without the dead-letter route; stop them first"
            ));
        }
        if !blocked.is_empty() {
            return Ok(RemovalReport {
                actions: Vec::new(),
                blocked,
            });
        }
        let actions = s.remove_objects(plan, &targets);
        Ok(RemovalReport {
            actions,
            blocked: Vec::new(),
        })
    }
}

impl State {
    /// Deletes the policies, exchanges (unless bound to a queue not in `targets`) and
    /// `targets` of `plan`, then its ownership records; the report lines.
    fn remove_objects(&mut self, plan: &DesiredTopology, targets: &[String]) -> Vec<Action> {
        let owned_by_other =
            |records: &BTreeMap<String, crate::rabbitmq::ownership::OwnerRecord>,
             kind: &str,
             name: &str| {
                records
                    .get(&record_name(&plan.vhost, kind, name))
                    .is_some_and(|r| r.owner != plan.owner)
            };
        let mut actions = Vec::new();
        let records = self.records.clone();
        let Some(v) = self.vhosts.get_mut(&plan.vhost) else {
            return actions;
        };
        let mut ours: Vec<&PolicyPlan> = plan
            .policies
            .iter()
            .filter(|p| !owned_by_other(&records, QUEUE, &p.queue))
            .collect();
        ours.sort_by_key(|p| p.queue != plan.routes.source_queue);
        for p in ours {
            if v.policies.remove(&p.name).is_some() {
                actions.push(Action {
                    kind: ObjectKind::Policy,
                    name: p.name.clone(),
                    outcome: Outcome::Deleted,
                });
            }
        }
        for x in &plan.exchanges {
            if owned_by_other(&records, EXCHANGE, &x.name) || !v.exchanges.contains_key(&x.name) {
                continue;
            }
            let foreign: Vec<&str> = v
                .bindings
                .iter()
                .filter(|b| b.exchange == x.name && !targets.contains(&b.queue))
                .map(|b| b.queue.as_str())
                .collect();
            let outcome = if foreign.is_empty() {
                v.exchanges.remove(&x.name);
                v.bindings.retain(|b| b.exchange != x.name);
                Outcome::Deleted
            } else {
                Outcome::Retained(format!(
                    "still bound to {} that the operator does not own",
                    foreign.join(", ")
                ))
            };
            actions.push(Action {
                kind: ObjectKind::Exchange,
                name: x.name.clone(),
                outcome,
            });
        }
        for name in targets {
            v.queues.remove(name);
            v.bindings.retain(|b| &b.queue != name);
            actions.push(Action {
                kind: ObjectKind::Queue,
                name: name.clone(),
                outcome: Outcome::Deleted,
            });
        }
        self.writes += actions.len() as u64;
        for c in claims(plan) {
            let key = record_name(&plan.vhost, c.kind, &c.name);
            if self
                .records
                .get(&key)
                .is_some_and(|r| r.owner == plan.owner)
            {
                self.records.remove(&key);
            }
        }
        actions
    }

    /// Depths and consumers of every queue of `vhost`.
    fn depths(&self, vhost: &str) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        Ok(self
            .vhost(vhost)?
            .queues
            .iter()
            .map(|(name, q)| {
                let n = q.messages.len() as u64;
                (
                    name.clone(),
                    QueueDepth {
                        messages: n,
                        ready: n,
                        unacked: 0,
                        consumers: Some(q.consumers),
                    },
                )
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl BrokerTopology for FakeBroker {
    async fn apply(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError> {
        self.apply_now(plan)
    }

    async fn remove(&self, plan: &DesiredTopology) -> Result<RemovalReport, BrokerError> {
        self.remove_now(plan)
    }

    async fn queue_depths(&self, vhost: &str) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        s.depths(vhost)
    }

    async fn queue_depths_covering(
        &self,
        vhost: &str,
        _required: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        s.depths(vhost)
    }

    /// Deletes the queue only when it holds no message and has no consumer (RabbitMQ's
    /// `if-empty` and `if-unused`).
    async fn delete_queue_if_empty(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<DeleteOutcome, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        let v = s.vhost_mut(vhost)?;
        let Some(q) = v.queues.get(name) else {
            return Ok(DeleteOutcome::Absent);
        };
        if !q.messages.is_empty() || q.consumers > 0 {
            return Ok(DeleteOutcome::NotEmpty {
                messages: (q.messages.len() as u64).max(1),
            });
        }
        v.queues.remove(name);
        v.bindings.retain(|b| b.queue != name);
        s.writes += 1;
        Ok(DeleteOutcome::Deleted)
    }

    async fn cluster_name(&self) -> Result<String, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        Ok(s.cluster_name.clone())
    }

    async fn queue_limits(&self, vhost: &str, name: &str) -> Result<QueueLimits, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        s.queue_limits(vhost, name)
    }

    fn address_in_use(&self) -> String {
        "the in-memory broker".to_string()
    }

    fn request_counts(&self) -> RequestCounts {
        let s = self.lock();
        RequestCounts {
            reads: s.reads,
            writes: s.writes,
        }
    }
}
