//! The diff of an apply: from what is on the broker ([`Snapshot`], the ownership records
//! found, [`Facts`]) and the plan, the ordered writes that put the plan in place and the
//! report lines that need no write ([`diff`]). Pure: no I/O; the executor
//! (`RabbitMq::execute`) performs the writes.
//!
//! Rules, with their source (see also the module documentation of `rabbitmq`):
//! - Order: the ownership records first ("claim before write", `ownership`), then the
//!   plan's steps ([`DesiredTopology::steps`]: exchanges, the dead-letter route, the
//!   source queue's policy and queue, the retry tiers, the remaining bindings).
//! - An existing queue whose type or planned arguments differ, or whose own `x-<key>`
//!   argument overrides a key of our policy, is a conflict: never declared, deleted or
//!   recorded, and its policy is not written (RabbitMQ docs, "Queues: optional
//!   arguments"; "Policies": "Combining policy definitions and optional arguments").
//!   An exchange of another type is a conflict too.
//! - Our policy merges the keys of lower-priority policies that match the queue, except
//!   `expires` (`declared::NEVER_MERGED`: it deletes an unused queue with its messages), and
//!   is reported shadowed by a higher-or-equal one (RabbitMQ docs, "Policies": "Policy
//!   priorities").
//! - On RabbitMQ 4.x a quorum dead-letter queue's policy sets `delivery-limit: -1` when no
//!   policy sets one (`limits::no_default_delivery_limit`).
//! - A policy write that would lower `max-length` under the queue's depth with
//!   `overflow: drop-head` is not made: the broker would drop dead letters at once.
//! - The source queue's policy (which points it at the dead-letter exchange) is written
//!   only while the whole dead-letter route is usable; bindings skip unusable exchanges
//!   and queues.
//! - Obsolete retry tiers and dead-letter queues are retired only once what replaces them
//!   is usable ([`Diff::retire_tiers`], [`Diff::retire_dead_letter_queues`]).
//! - Under `queueSettings: Arguments` (docs/ARCHITECTURE.md, "A thousand queues per
//!   vhost") a queue to declare carries its policy's definition as arguments (the source
//!   and the router inbox only once the dead-letter route is usable), the policy is
//!   written only where `declared::policy_needed` says so, an argument that wins over
//!   any policy and differs is a conflict, and a number the spec raises above its
//!   argument is reported [`Outcome::Fixed`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value;

use super::declared;
use super::limits::no_default_delivery_limit;
use super::management::{PolicyInfo, QueueInfo};
use super::ownership::{self, Found, OwnerRecord};
use super::patterns::{json_equal, maps_equal, matching_policies, pattern_matches};
use super::snapshot::{Facts, Snapshot};
use crate::broker::{Action, ObjectKind, Outcome};
use crate::crd::QueueSettings;
use crate::topology::{
    BindingPlan, DesiredTopology, ExchangePlan, PolicyPlan, QueuePlan, QueueRole, Step,
};
use arguments::{declared_conflicts, declared_with_settings, raised_above_argument, settings_of};

/// `apply-to` of every operator-owned policy.
pub(super) const APPLY_TO: &str = "queues";

/// One write to the broker, in the order of [`Diff::entries`].
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Write an ownership record (created or updated; one report line counts them all).
    RecordOwner(OwnerRecord),
    /// Declare an exchange (durable, not auto-delete, not internal); reported created.
    DeclareExchange(ExchangePlan),
    /// Write an operator policy.
    PutPolicy(PolicyWrite),
    /// Declare a queue with its planned arguments; reported created, or a conflict when
    /// the broker refuses it (declared by someone else since the snapshot:
    /// [`Diff::queue_refused`]).
    DeclareQueue(QueuePlan),
    /// Create a binding; reported created.
    Bind(BindingPlan),
}

/// A policy to write ([`Write::PutPolicy`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyWrite {
    /// The policy as written: the plan's, with the merged definition.
    pub policy: PolicyPlan,
    /// [`Outcome::Created`] or [`Outcome::Updated`].
    pub outcome: Outcome,
    /// Reported instead of [`PolicyWrite::outcome`] once written: another policy takes
    /// (or may take) precedence on the queue.
    pub shadowed: Option<String>,
}

impl PolicyWrite {
    /// The report line once written.
    pub fn action(&self) -> Action {
        policy_action(&self.policy.name, self.outcome.clone(), &self.shadowed)
    }
}

/// One entry of a [`Diff`]: a write, or a report line that needs none.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// Nothing to write: reported as is.
    Report(Action),
    /// A binding already there: reported in place (dropped with its queue, like a
    /// [`Write::Bind`], when the queue's declare is refused).
    BindingInPlace(BindingPlan),
    /// A write to make.
    Write(Write),
}

/// What an apply writes and reports, in order, and which retirements follow.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// Writes and report lines, in apply order.
    pub entries: VecDeque<Entry>,
    /// Every planned retry tier is usable: obsolete tiers may be retired.
    pub retire_tiers: bool,
    /// The dead-letter exchange and every planned dead-letter queue are usable: the
    /// dead-letter queues the plan no longer has may be retired.
    pub retire_dead_letter_queues: bool,
}

impl Diff {
    /// The writes, in order (for tests and logs).
    pub fn writes(&self) -> impl Iterator<Item = &Write> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Write(w) => Some(w),
            Entry::Report(_) | Entry::BindingInPlace(_) => None,
        })
    }

    /// The broker refused to declare `queue` (declared by someone else since the
    /// snapshot, with other arguments): as for a conflict found in the snapshot, the
    /// entries left skip its bindings; a dead-letter queue holds back the source queue's
    /// policy write (reported as a conflict) and the retirement of dead-letter queues; a
    /// retry tier holds back the retirement of tiers.
    pub fn queue_refused(&mut self, plan: &DesiredTopology, queue: &str) {
        self.entries.retain(|e| match e {
            Entry::Write(Write::Bind(b)) | Entry::BindingInPlace(b) => b.queue != queue,
            Entry::Report(_) | Entry::Write(_) => true,
        });
        match plan.queues.iter().find(|q| q.name == queue).map(|q| q.role) {
            Some(role @ (QueueRole::DeadLetter { .. } | QueueRole::Inbox)) => {
                if role != QueueRole::Inbox {
                    self.retire_dead_letter_queues = false;
                }
                for entry in self.entries.iter_mut() {
                    if let Entry::Write(Write::PutPolicy(w)) = entry {
                        if w.policy.queue == plan.routes.source_queue {
                            let held = route_not_ready(plan, &w.policy.queue);
                            *entry =
                                Entry::Report(policy_action(&w.policy.name, held, &w.shadowed));
                        }
                    }
                }
            }
            Some(QueueRole::Retry { .. }) => self.retire_tiers = false,
            Some(QueueRole::Source) | None => {}
        }
    }
}

/// The diff of `plan` against what is there: `snap`, the ownership records `owners`
/// (read by `RabbitMq::check_claims`, so none is another owner's) and `facts`
/// ([`needs_broker_version`], [`ready_counts_needed`]). See the module documentation for
/// the rules.
pub fn diff(plan: &DesiredTopology, snap: &Snapshot, owners: &Found, facts: &Facts) -> Diff {
    let adoption = Adoption::of(plan, snap, owners, facts);
    let mut walk = Walk {
        plan,
        snap,
        facts,
        adoption: &adoption,
        unusable: BTreeSet::new(),
        unusable_queues: BTreeSet::new(),
        entries: owner_entries(plan, owners, &adoption),
    };
    walk.source_exchange();
    for step in plan.steps() {
        match step {
            Step::Exchange(x) => walk.exchange(x),
            Step::Policy(p) => walk.policy(p),
            Step::Queue(q) => walk.queue(q),
            Step::Binding(b) => walk.binding(b),
        }
    }
    walk.finish()
}

/// Whether the diff of `plan` against `snap` depends on the broker's version: a quorum
/// dead-letter queue's policy that no policy gives a `delivery-limit`.
pub fn needs_broker_version(plan: &DesiredTopology, snap: &Snapshot) -> bool {
    plan.policies.iter().any(|p| {
        let target = PolicyTarget::of(plan, snap, p, None);
        target.quorum_dead_letter && !target.definition.contains_key("delivery-limit")
    })
}

/// The existing queues whose ready count the diff of `plan` against `snap` needs: those
/// whose policy is to be written with `overflow: drop-head` (the statistics lag, or are
/// absent for a new queue). `facts` gives the broker's version.
pub fn ready_counts_needed(plan: &DesiredTopology, snap: &Snapshot, facts: &Facts) -> Vec<String> {
    plan.policies
        .iter()
        .filter(|p| {
            let target = PolicyTarget::of(plan, snap, p, facts.broker_version.as_deref());
            target.write.is_some() && target.drops_head() && snap.queue(&p.queue).is_some()
        })
        .map(|p| p.queue.clone())
        .collect()
}

/// The conflicts found in the snapshot, computed before any write so that our policy is
/// never put on a queue we will not adopt (it would change the behaviour of someone
/// else's queue, e.g. its overflow mode), nor a record written for it.
struct Adoption {
    /// Existing planned queues that cannot serve the plan, with why.
    conflicts: BTreeMap<String, Vec<String>>,
    /// Existing planned exchanges of another type.
    foreign_exchanges: BTreeSet<String>,
    /// Existing planned queues under the argument rules: the plan's layout is `Arguments`,
    /// or the queue was declared with its settings by this resource
    /// ([`declared_with_settings`]).
    declared: BTreeSet<String>,
}

impl Adoption {
    fn of(plan: &DesiredTopology, snap: &Snapshot, owners: &Found, facts: &Facts) -> Self {
        let version = facts.broker_version.as_deref();
        let conflicts = plan
            .queues
            .iter()
            .filter_map(|q| {
                let existing = snap.queue(&q.name)?;
                let policy = plan.policies.iter().find(|p| p.queue == q.name);
                let mut reasons = match policy {
                    Some(p) if declared_with_settings(plan, owners, existing, p) => {
                        let settings = settings_of(plan, snap, p, version);
                        declared_conflicts(existing, q, p, &settings)
                    }
                    _ => queue_conflicts(existing, q, policy),
                };
                if q.role == QueueRole::Inbox && !recorded(owners, &q.name) {
                    reasons.push(foreign_inbox(&q.name));
                }
                (!reasons.is_empty()).then(|| (q.name.clone(), reasons))
            })
            .collect();
        let foreign_exchanges = plan
            .exchanges
            .iter()
            .filter(|x| {
                snap.exchange(&x.name)
                    .is_some_and(|e| e.kind != x.kind.as_str())
            })
            .map(|x| x.name.clone())
            .collect();
        let declared = plan
            .policies
            .iter()
            .filter(|p| {
                snap.queue(&p.queue)
                    .is_some_and(|q| declared_with_settings(plan, owners, q, p))
            })
            .map(|p| p.queue.clone())
            .collect();
        Adoption {
            conflicts,
            foreign_exchanges,
            declared,
        }
    }

    /// Whether the plan takes over the object of `claim` (it is not in conflict).
    fn adopts(&self, claim: &ownership::Claim) -> bool {
        if claim.kind == ownership::EXCHANGE {
            !self.foreign_exchanges.contains(&claim.name)
        } else {
            !self.conflicts.contains_key(&claim.name)
        }
    }
}

/// The ownership record writes (never for an object in conflict), then their report
/// lines.
fn owner_entries(plan: &DesiredTopology, owners: &Found, adoption: &Adoption) -> VecDeque<Entry> {
    let records = ownership::records_to_write(plan, owners, |c| adoption.adopts(c));
    let created = records
        .iter()
        .filter(|(_, o)| *o == Outcome::Created)
        .count();
    let updated = records.len() - created;
    let lines = ownership::record_actions(created, updated);
    records
        .into_iter()
        .map(|(r, _)| Entry::Write(Write::RecordOwner(r)))
        .chain(lines.into_iter().map(Entry::Report))
        .collect()
}

/// The walk over the plan's steps, with the exchanges and queues found unusable so far
/// (bindings skip them; the source queue's policy and the retirements wait for them).
struct Walk<'a> {
    plan: &'a DesiredTopology,
    snap: &'a Snapshot,
    facts: &'a Facts,
    adoption: &'a Adoption,
    unusable: BTreeSet<String>,
    unusable_queues: BTreeSet<String>,
    entries: VecDeque<Entry>,
}

impl Walk<'_> {
    fn report(&mut self, kind: ObjectKind, name: &str, outcome: Outcome) {
        self.entries.push_back(Entry::Report(Action {
            kind,
            name: name.to_string(),
            outcome,
        }));
    }

    /// The source exchange is never declared: it must exist.
    fn source_exchange(&mut self) {
        let Some(sx) = &self.plan.source_exchange else {
            return;
        };
        if self.snap.exchange(sx).is_none() {
            self.unusable.insert(sx.clone());
            let why = format!(
                "source exchange {sx:?} does not exist in vhost {:?}; the operator never declares it (spec.source.exchange)",
                self.plan.vhost
            );
            self.report(ObjectKind::Exchange, sx, Outcome::Failed(why));
        }
    }

    fn exchange(&mut self, x: &ExchangePlan) {
        let outcome = match self.snap.exchange(&x.name) {
            None => {
                let write = Write::DeclareExchange(x.clone());
                self.entries.push_back(Entry::Write(write));
                return;
            }
            Some(e) if e.kind == x.kind.as_str() => Outcome::InPlace,
            Some(e) => {
                self.unusable.insert(x.name.clone());
                Outcome::Conflict(format!(
                    "exchange {:?} exists with type {}, the plan wants {}",
                    x.name,
                    e.kind,
                    x.kind.as_str()
                ))
            }
        };
        self.report(ObjectKind::Exchange, &x.name, outcome);
    }

    fn policy(&mut self, p: &PolicyPlan) {
        let arguments = self.plan.queue_settings == QueueSettings::Arguments;
        if arguments || self.adoption.declared.contains(&p.queue) {
            // A queue declared with its settings: report what its arguments hold back;
            // under `Policy` the policy is written whatever it holds back.
            let needed = self.declared_policy(p);
            if arguments && !needed {
                return;
            }
        }
        let target = PolicyTarget::of(
            self.plan,
            self.snap,
            p,
            self.facts.broker_version.as_deref(),
        );
        let shadowed = target.shadowed(p);
        let new_max = target.definition.get("max-length").and_then(Value::as_u64);
        let existing = self.snap.queue(&p.queue);
        let mut held = existing.and_then(|q| q.messages).unwrap_or(0);
        if target.write.is_some() && target.drops_head() && existing.is_some() {
            if let Some(ready) = self.facts.ready.get(&p.queue) {
                held = held.max(*ready);
            }
        }
        let drops = target.drops_head() && new_max.is_some_and(|max| held > max);
        let outcome = match target.write {
            // Lowering max-length below the current depth with overflow drop-head would
            // make the broker drop dead letters at once.
            Some(_) if drops => Outcome::Conflict(format!(
                "not written: queue {:?} holds {held} messages, more than the new max-length {}; with overflow DropHead RabbitMQ would drop the oldest at once. Drain or replay the queue first, or raise maxLength",
                p.queue,
                new_max.unwrap_or(0)
            )),
            Some(_) if self.adoption.conflicts.contains_key(&p.queue) => Outcome::Conflict(format!(
                "not written: queue {:?} exists with conflicting arguments",
                p.queue
            )),
            // The source queue is pointed at the dead-letter exchange only when the whole
            // route behind it is in place: otherwise every dead letter would be dropped,
            // or land in someone else's queues.
            Some(_) if p.queue == self.plan.routes.source_queue && !self.route_ready() => {
                route_not_ready(self.plan, &p.queue)
            }
            Some(outcome) => {
                let policy = PolicyPlan {
                    definition: target.definition,
                    ..p.clone()
                };
                let write = PolicyWrite {
                    policy,
                    outcome,
                    shadowed,
                };
                self.entries.push_back(Entry::Write(Write::PutPolicy(write)));
                return;
            }
            None => Outcome::InPlace,
        };
        let action = policy_action(&p.name, outcome, &shadowed);
        self.entries.push_back(Entry::Report(action));
    }

    /// Under `queueSettings: Arguments`: reports the numbers the spec raises above the
    /// arguments of `p`'s existing queue ([`Outcome::Fixed`]), and says whether `p` must
    /// be written ([`declared::policy_needed`]).
    fn declared_policy(&mut self, p: &PolicyPlan) -> bool {
        let version = self.facts.broker_version.as_deref();
        let settings = settings_of(self.plan, self.snap, p, version);
        let queue_type = queue_type_of(self.plan, self.snap, &p.queue);
        let existing = self.snap.queue(&p.queue);
        if let Some(q) = existing {
            if !self.adoption.conflicts.contains_key(&p.queue) {
                let fixed = declared::declared(&q.arguments, &settings, queue_type).fixed;
                let role = self.plan.queues.iter().find(|q| q.name == p.queue);
                let role = role.map_or(QueueRole::Source, |q| q.role);
                for (key, have, want) in fixed {
                    let why = raised_above_argument(&p.queue, role, &key, (&have, &want));
                    self.entries.push_back(Entry::Report(policy_action(
                        &p.name,
                        Outcome::Fixed(why),
                        &None,
                    )));
                }
            }
        }
        declared::policy_needed(p, &settings, existing, &self.snap.policies, queue_type)
    }

    /// The arguments to declare queue `q` with: the plan's, plus under
    /// `queueSettings: Arguments` its policy's settings — for the source queue and the
    /// router inbox only once the dead-letter route behind them is usable (else they are
    /// declared without, and get the policy once it is).
    fn declare_arguments(&self, q: &QueuePlan) -> QueuePlan {
        let mut q = q.clone();
        let Some(p) = self.plan.policies.iter().find(|p| p.queue == q.name) else {
            return q;
        };
        let routed = matches!(q.role, QueueRole::Source | QueueRole::Inbox);
        if self.plan.queue_settings == QueueSettings::Arguments && (!routed || self.route_ready()) {
            let version = self.facts.broker_version.as_deref();
            let settings = settings_of(self.plan, self.snap, p, version);
            q.arguments.extend(declared::arguments_of(&settings));
        }
        q
    }

    /// Whether the dead-letter exchange, every dead-letter queue of the plan and (router
    /// mode) the router inbox are usable so far, so that the source queue may be pointed
    /// at the route.
    fn route_ready(&self) -> bool {
        !self
            .unusable
            .contains(&self.plan.routes.dead_letter_exchange)
            && self
                .plan
                .dead_letter_queues()
                .chain(self.plan.routes.inbox.as_deref())
                .all(|q| !self.unusable_queues.contains(q))
    }

    fn queue(&mut self, q: &QueuePlan) {
        let outcome = match self.snap.queue(&q.name) {
            None if !q.declare => {
                self.unusable_queues.insert(q.name.clone());
                Outcome::Failed(format!(
                    "source queue {} does not exist and spec.source.manage is false",
                    q.name
                ))
            }
            None => {
                let declare = self.declare_arguments(q);
                self.entries
                    .push_back(Entry::Write(Write::DeclareQueue(declare)));
                return;
            }
            Some(_) => match self.adoption.conflicts.get(&q.name) {
                None => Outcome::InPlace,
                Some(reasons) => {
                    self.unusable_queues.insert(q.name.clone());
                    Outcome::Conflict(format!(
                        "{}; left untouched (queue arguments are immutable and the queue is never deleted to fix this)",
                        reasons.join("; ")
                    ))
                }
            },
        };
        self.report(ObjectKind::Queue, &q.name, outcome);
    }

    fn binding(&mut self, b: &BindingPlan) {
        if self.unusable.contains(&b.exchange) || self.unusable_queues.contains(&b.queue) {
            return;
        }
        let exists = self.snap.bindings.iter().any(|e| {
            e.destination_type == "queue"
                && e.source == b.exchange
                && e.destination == b.queue
                && e.routing_key == b.routing_key
        });
        self.entries.push_back(if exists {
            Entry::BindingInPlace(b.clone())
        } else {
            Entry::Write(Write::Bind(b.clone()))
        });
    }

    /// Obsolete retry tiers and dead-letter queues are retired only once what replaces
    /// them is in place: the old ones keep serving until the new ones do.
    fn finish(self) -> Diff {
        let in_place = |wanted: fn(&QueueRole) -> bool| {
            self.plan
                .queues
                .iter()
                .filter(|q| wanted(&q.role))
                .all(|q| !self.unusable_queues.contains(&q.name))
        };
        Diff {
            retire_tiers: in_place(|r| matches!(r, QueueRole::Retry { .. })),
            retire_dead_letter_queues: in_place(|r| matches!(r, QueueRole::DeadLetter { .. }))
                && !self
                    .unusable
                    .contains(&self.plan.routes.dead_letter_exchange),
            entries: self.entries,
        }
    }
}

/// What the operator's policy for one queue must be, given the snapshot.
struct PolicyTarget<'s> {
    /// The plan's definition with the keys of the lower-priority matching policies
    /// merged in (and, on 4.x, no default delivery limit for a quorum dead-letter queue).
    definition: BTreeMap<String, Value>,
    /// Higher-or-equal priority policies that may match the queue, highest first.
    higher: Vec<&'s PolicyInfo>,
    /// The policy is missing ([`Outcome::Created`]) or differs ([`Outcome::Updated`]).
    write: Option<Outcome>,
    /// The policy is for a quorum dead-letter queue.
    quorum_dead_letter: bool,
}

impl<'s> PolicyTarget<'s> {
    /// `version`: the broker's version when known ([`Facts::broker_version`]); without
    /// it no delivery limit is added.
    fn of(
        plan: &DesiredTopology,
        snap: &'s Snapshot,
        p: &PolicyPlan,
        version: Option<&str>,
    ) -> Self {
        let queue_type = queue_type_of(plan, snap, &p.queue);
        let (higher, lower) = matching_policies(&snap.policies, p, queue_type);
        let mut definition = p.definition.clone();
        for other in &lower {
            for (k, val) in &other.definition {
                if !declared::NEVER_MERGED.contains(&k.as_str()) {
                    definition.entry(k.clone()).or_insert_with(|| val.clone());
                }
            }
        }
        let quorum_dead_letter =
            queue_type == "quorum" && plan.dead_letter_queues().any(|q| q == p.queue);
        if let (true, Some(version)) = (quorum_dead_letter, version) {
            no_default_delivery_limit(&mut definition, version);
        }
        let write = match snap.policies.iter().find(|e| e.name == p.name) {
            None => Some(Outcome::Created),
            Some(e)
                if e.pattern != p.pattern
                    || e.priority != i64::from(p.priority)
                    || e.apply_to != APPLY_TO
                    || !maps_equal(&e.definition, &definition) =>
            {
                Some(Outcome::Updated)
            }
            Some(_) => None,
        };
        PolicyTarget {
            definition,
            higher,
            write,
            quorum_dead_letter,
        }
    }

    /// The definition sets `overflow: drop-head`.
    fn drops_head(&self) -> bool {
        self.definition.get("overflow").and_then(Value::as_str) == Some("drop-head")
    }

    /// Why `p` is shadowed, if a higher-or-equal priority policy may match its queue.
    fn shadowed(&self, p: &PolicyPlan) -> Option<String> {
        let top = self.higher.first()?;
        let how = match pattern_matches(&top.pattern, &p.queue) {
            Some(_) => "takes",
            None => "may take (its pattern uses regular-expression features the operator cannot evaluate, so it is counted as matching)",
        };
        Some(format!(
            "policy {} (priority {}) {how} precedence over {} (priority {}) on queue {:?}",
            top.name, top.priority, p.name, p.priority, p.queue
        ))
    }
}

/// The type of queue `name`: as it exists, else as planned (`classic` when unknown).
fn queue_type_of<'a>(plan: &'a DesiredTopology, snap: &'a Snapshot, name: &str) -> &'a str {
    snap.queue(name)
        .and_then(|q| q.kind.as_deref())
        .unwrap_or_else(|| {
            plan.queues
                .iter()
                .find(|q| q.name == name)
                .map_or("classic", |q| q.queue_type.argument())
        })
}

/// Whether `owners` holds an ownership record for queue `name` (the apply's check has
/// made sure any such record is this resource's).
fn recorded(owners: &Found, name: &str) -> bool {
    owners
        .iter()
        .any(|(c, r)| c.kind == ownership::QUEUE && c.name == name && r.is_some())
}

/// Why an existing queue named like the router inbox is not taken over: every inbox the
/// operator creates has an ownership record (router mode is younger than the records),
/// so one without is someone else's queue, possibly holding their messages.
fn foreign_inbox(name: &str) -> String {
    format!(
        "queue {name:?} exists without an ownership record, so the operator did not create it: it is not taken over as the router inbox (its messages would be routed as failures); rename or remove it, or turn router mode off"
    )
}

/// The report line of policy `name`: `outcome`, or shadowed when `shadowed` says so.
fn policy_action(name: &str, outcome: Outcome, shadowed: &Option<String>) -> Action {
    Action {
        kind: ObjectKind::Policy,
        name: name.to_string(),
        outcome: shadowed.clone().map_or(outcome, Outcome::Shadowed),
    }
}

/// The conflict of the source queue's policy held back because the dead-letter route is
/// not usable.
fn route_not_ready(plan: &DesiredTopology, queue: &str) -> Outcome {
    Outcome::Conflict(format!(
        "not written: the dead-letter route ({} and its dead-letter queues, and the router inbox in router mode) is not in place (see the conflicts above); pointing {queue:?} at it would drop its dead letters",
        plan.routes.dead_letter_exchange
    ))
}

/// Why an existing queue cannot serve as `plan` (empty when it can): another type,
/// a planned argument missing or different, or an argument of its own that overrides a
/// key of our `policy` (queue arguments take precedence over policies).
pub(super) fn queue_conflicts(
    existing: &QueueInfo,
    plan: &QueuePlan,
    policy: Option<&PolicyPlan>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    let want_type = plan.queue_type.argument();
    let have_type = existing
        .kind
        .clone()
        .or_else(|| {
            existing
                .arguments
                .get("x-queue-type")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "classic".to_string());
    if have_type != want_type {
        reasons.push(format!(
            "queue {:?} is a {have_type} queue (x-queue-type), the plan wants {want_type}",
            plan.name
        ));
    }
    for (key, want) in &plan.arguments {
        match existing.arguments.get(key) {
            None => reasons.push(format!(
                "queue {:?} has no argument {key}, the plan wants {want}",
                plan.name
            )),
            Some(have) if !json_equal(have, want) => reasons.push(format!(
                "queue {:?} has argument {key}={have}, the plan wants {want}",
                plan.name
            )),
            Some(_) => {}
        }
    }
    if let Some(p) = policy {
        for key in p.definition.keys() {
            let arg = format!("x-{key}");
            if let Some(have) = existing.arguments.get(&arg) {
                if !plan.arguments.contains_key(&arg) {
                    reasons.push(format!(
                        "queue {:?} has argument {arg}={have}, which overrides key {key} of policy {} (queue arguments take precedence over policies)",
                        plan.name, p.name
                    ));
                }
            }
        }
    }
    reasons
}

mod arguments;
#[cfg(test)]
mod arguments_tests;
#[cfg(test)]
mod tests;
