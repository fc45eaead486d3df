//! The DeadLetterQueue controller's reconcile, in the stages of docs/ARCHITECTURE.md, "Reconcile stages":
//! read (resource, RetryPolicy, Secret) → validate and plan ([`reconcile::prepare`], pure) →
//! register the plan with the backlog monitor
//! ([`Targets::watch`](crate::controller::backlog::Targets::watch)) → apply to the broker
//! ([`reconcile::apply`]) → the PrometheusRule ([`alert_rules::apply`]) → status
//! ([`status_after`], pure; only the reconcile's part, written by server-side apply only
//! when it changed) and Events ([`events_for`], [`alert_rule_events`], pure).
//!
//! Deletion goes through the finalizer `dlqoperator.io/cleanup` ([`FINALIZER`]) and
//! `spec.deletionPolicy`: `Retain` releases at once; `Delete` removes the operator-owned
//! broker objects ([`Broker::remove`]) and keeps the finalizer, with a `DeletionBlocked`
//! condition and Event, while a queue to delete still holds messages.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::ResourceExt;

use crate::broker::{ApplyReport, Broker, ObjectKind, Outcome};
use crate::controller::conditions::{
    self, ConditionStatus, Desired, ALERT_RULES_READY, READY, TOPOLOGY_READY,
};
use crate::controller::context::{Context, DeadLetterQueueContext};
use crate::controller::object::{api_resource, decode, status_of};
use crate::controller::{alert_rules, ownership};
use crate::controller::{publish, Error, Note};
use crate::crd::{
    DeadLetterQueue, DeadLetterQueueStatus, DeletionPolicy, InvalidSpec, RetryPolicy,
    RetryPolicySpec, TopologyStatus,
};
use crate::manifest::object_key;
use crate::reconcile::{self, Prepared, ReconcileError};

/// Finalizer that holds a DeadLetterQueue until its `deletionPolicy` is carried out.
pub const FINALIZER: &str = "dlqoperator.io/cleanup";

/// How soon a resource whose PrometheusRule is not in place is reconciled again (at most).
pub const ALERT_RULES_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// Kind label of this controller's metrics.
pub const KIND: &str = "DeadLetterQueue";

/// Reconciles one DeadLetterQueue (the `reconcile` of the kube-runtime controller):
/// adds the finalizer, then applies or cleans up. Records the reconcile metrics.
///
/// # Errors
/// Kubernetes API errors, [`ReconcileError`]s (after writing them to status), and
/// [`Error::DeletionBlocked`]; the controller's error policy retries them with per-object
/// backoff (never for `InvalidSpec`).
pub async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<DeadLetterQueueContext>,
) -> Result<Action, Error> {
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.shared.client.clone(),
        &ns,
        &api_resource::<DeadLetterQueue>(),
    );
    crate::controller::instrumented(KIND, &obj.clone(), &ctx.shared, async {
        finalizer(&api, FINALIZER, obj, |event| async {
            match event {
                FinalizerEvent::Apply(o) => apply(&o, &ctx).await,
                FinalizerEvent::Cleanup(o) => cleanup(&o, &ctx).await,
            }
        })
        .await
        .map_err(|e| Error::Finalizer(Box::new(e)))
        .or_else(|e| {
            if e.is_removal_from_gone_object() {
                tracing::debug!("the object was gone before its finalizer was removed");
                Ok(Action::await_change())
            } else {
                Err(e)
            }
        })
    })
    .await
}

/// Every DeadLetterQueue the controller watches (empty before it started).
fn others(ctx: &DeadLetterQueueContext) -> Vec<Arc<DynamicObject>> {
    ctx.dead_letter_queues
        .get()
        .map(|store| store.state())
        .unwrap_or_default()
}

/// Decodes and validates the DeadLetterQueue `obj` (before anything it references is
/// read: an empty reference name is an invalid spec, not an API error).
pub(crate) fn decode_valid(obj: &DynamicObject) -> Result<DeadLetterQueue, ReconcileError> {
    let invalid = |source| ReconcileError::InvalidSpec {
        kind: "DeadLetterQueue",
        name: object_key(&obj.metadata),
        source,
    };
    let dlq = decode::<DeadLetterQueue>(obj).map_err(invalid)?;
    dlq.spec.validate().map_err(invalid)?;
    Ok(dlq)
}

/// Reads what `dlq` references. The RetryPolicy is `None` when absent, `Some(Err)` when it
/// does not decode.
pub(crate) async fn read_references(
    ctx: &Context,
    ns: &str,
    dlq: &DeadLetterQueue,
) -> Result<(Option<Result<RetryPolicy, InvalidSpec>>, Option<Secret>), kube::Error> {
    let rp_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &api_resource::<RetryPolicy>());
    let policy = rp_api
        .get_opt(&dlq.spec.retry_policy_ref.name)
        .await?
        .map(|o| decode::<RetryPolicy>(&o));
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(&dlq.spec.broker.secret_ref.name)
        .await?;
    Ok((policy, secret))
}

/// [`reconcile::prepare`] with a RetryPolicy that may not have decoded (its decoding
/// error is the RetryPolicy's `InvalidSpec`). `dlq` is already validated.
pub(crate) fn prepare(
    dlq: &DeadLetterQueue,
    policy: Option<&Result<RetryPolicy, InvalidSpec>>,
    secret: Option<&Secret>,
) -> Result<Prepared, ReconcileError> {
    match policy {
        Some(Err(invalid)) => Err(ReconcileError::InvalidSpec {
            kind: "RetryPolicy",
            name: format!(
                "{}/{}",
                crate::manifest::namespace_of(&dlq.metadata),
                dlq.spec.retry_policy_ref.name
            ),
            source: invalid.clone(),
        }),
        other => reconcile::prepare(dlq, other.and_then(|r| r.as_ref().ok()), secret),
    }
}

async fn apply(obj: &DynamicObject, ctx: &DeadLetterQueueContext) -> Result<Action, Error> {
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let key = object_key(&obj.metadata);
    let current: DeadLetterQueueStatus = status_of(obj);
    let mut prepared = None;
    // `None`: alert rules not looked at (invalid spec); `Some(None)`: alerting disabled.
    let mut alert_rules = None;
    let result = match decode_valid(obj) {
        Err(e) => Err(e),
        Ok(dlq) => {
            let (policy, secret) = read_references(&ctx.shared, &ns, &dlq).await?;
            match prepare(&dlq, policy.as_ref(), secret.as_ref()) {
                Err(e) => Err(e),
                Ok(p) => {
                    let result = match secret
                        .as_ref()
                        .map(|s| (s, ctx.shared.brokers.get(&ns, s, &p.connection)))
                    {
                        Some((s, Ok(broker))) => {
                            match name_conflict(ctx, &dlq, &current, &broker).await {
                                Some(conflict) => Err(conflict),
                                None => {
                                    let secret_key = format!(
                                        "{ns}/{}@{}",
                                        s.metadata.name.as_deref().unwrap_or_default(),
                                        s.metadata.resource_version.as_deref().unwrap_or_default()
                                    );
                                    ctx.backlog.watch(
                                        obj,
                                        &p.topology,
                                        &p.monitoring,
                                        broker.clone(),
                                        secret_key,
                                    );
                                    let applied = reconcile::apply(broker.as_ref(), &p).await;
                                    if let Err(ReconcileError::NameConflict { .. }) = &applied {
                                        // Another owner's record on the broker: its queues
                                        // are not this resource's to report on.
                                        ctx.backlog.remove(&key);
                                    }
                                    applied
                                }
                            }
                        }
                        Some((_, Err(e))) => Err(e.into()),
                        None => Err(ReconcileError::SecretNotFound(format!(
                            "{ns}/{}",
                            dlq.spec.broker.secret_ref.name
                        ))),
                    };
                    // Any AlertRulesReady (even False after a refused update) means a rule
                    // may exist.
                    let had_rules = current
                        .conditions
                        .iter()
                        .any(|c| c.type_ == ALERT_RULES_READY);
                    alert_rules = Some(
                        alert_rules::apply(&ctx.shared, &ns, &dlq, &p.monitoring, had_rules).await,
                    );
                    prepared = Some(p);
                    result
                }
            }
        }
    };
    let now = ctx.shared.now();
    let (mut status, _) = status_after(
        &current,
        obj.metadata.generation,
        &result,
        prepared.as_ref(),
        &now,
    );
    match &alert_rules {
        Some(Some(desired)) => {
            conditions::set(
                &mut status.conditions,
                desired,
                obj.metadata.generation,
                &now,
            );
        }
        Some(None) => status.conditions.retain(|c| c.type_ != ALERT_RULES_READY),
        None => {}
    }
    // Only the reconcile's part: the backlog fields belong to the monitor.
    if status.reconcile_part() != current.reconcile_part() {
        crate::controller::apply_status(
            &ctx.shared,
            &api_resource::<DeadLetterQueue>(),
            obj,
            &status.reconcile_part(),
        )
        .await?;
    }
    let mut notes = events_for(&current, &status, &result);
    notes.extend(alert_rule_events(&current, &status));
    for note in notes {
        publish(&ctx.recorder, obj, &api_resource::<DeadLetterQueue>(), note).await;
    }
    match result {
        Ok(_) => {
            ctx.backoff.reset(&key);
            // Rules not in place (e.g. the Prometheus Operator is installed later): look
            // again within a minute rather than at the next resync.
            let rules_pending = matches!(
                &alert_rules,
                Some(Some(d)) if d.status != ConditionStatus::True
            );
            Ok(Action::requeue(if rules_pending {
                ctx.resync.min(ALERT_RULES_RECHECK)
            } else {
                ctx.resync
            }))
        }
        Err(e) => Err(e.into()),
    }
}

/// `Some(NameConflict)` when another DeadLetterQueue on the same broker and vhost owns
/// a name `dlq` (with status `mine`) claims ([`ownership`](crate::controller::ownership)).
/// Reads other Secrets and the brokers' cluster names only when names overlap.
async fn name_conflict(
    ctx: &DeadLetterQueueContext,
    dlq: &DeadLetterQueue,
    mine: &DeadLetterQueueStatus,
    broker: &crate::broker::rabbitmq::RabbitMq,
) -> Option<ReconcileError> {
    for owner in ownership::owner_of_overlap(dlq, mine, &others(ctx)) {
        if ownership::same_broker(&ctx.shared, dlq, broker, &owner.other).await {
            let c = &owner.claim;
            let what = if c.prefix {
                format!("{} {}*", c.kind, c.name)
            } else {
                format!("{} {:?}", c.kind, c.name)
            };
            return Some(ReconcileError::NameConflict {
                field: c.field,
                message: format!(
                    "{what} is already managed by DeadLetterQueue {} on the same broker and vhost; each queue and exchange belongs to one DeadLetterQueue",
                    object_key(&owner.other.metadata)
                ),
            });
        }
    }
    None
}

/// The status after one reconcile, from the current one (transition times of unchanged
/// conditions are kept). Pure. Returns the status and whether it differs from `current`
/// (write only then: a steady state writes nothing).
///
/// - `conditions`: `TopologyReady` and `Ready` from [`conditions::for_reconcile`]
///   (`TopologyApplied`, `ArgumentConflict`, `PolicyShadowed`, `ApplyFailed`, or the
///   error's reason such as `InvalidSpec` or `BrokerUnreachable`).
/// - `observedGeneration`: `generation`.
/// - `topology` and `tiers`: the plan's objects and resolved tiers once an apply reached
///   the broker; kept as they were when it did not (the objects are still there).
pub fn status_after(
    current: &DeadLetterQueueStatus,
    generation: Option<i64>,
    result: &Result<ApplyReport, ReconcileError>,
    prepared: Option<&Prepared>,
    now: &Time,
) -> (DeadLetterQueueStatus, bool) {
    let mut status = current.clone();
    for desired in conditions::for_reconcile(result) {
        conditions::set(&mut status.conditions, &desired, generation, now);
    }
    status.observed_generation = generation;
    if let (Ok(report), Some(p)) = (result, prepared) {
        // Only what is in place: an object in conflict (another's queue, other
        // arguments) is not ours, and a Delete must never touch it.
        let ours = |kind: ObjectKind, name: &str| {
            report.find(kind, name).is_some_and(|a| {
                matches!(
                    a.outcome,
                    Outcome::Created | Outcome::Updated | Outcome::InPlace
                )
            })
        };
        let planned = p.topology.status();
        status.topology = Some(TopologyStatus {
            exchanges: planned
                .exchanges
                .into_iter()
                .filter(|n| ours(ObjectKind::Exchange, n))
                .collect(),
            queues: planned
                .queues
                .into_iter()
                .filter(|n| ours(ObjectKind::Queue, n))
                .collect(),
            policies: planned
                .policies
                .into_iter()
                .filter(|n| ours(ObjectKind::Policy, n))
                .collect(),
        });
        status.tiers = p.policy.status_strings().1;
    }
    let changed = status != *current;
    (status, changed)
}

/// The Events to record after a reconcile that moved the status from `before` to
/// `after`. Pure.
///
/// - `TopologyApplied` (Normal) when the apply wrote to the broker (the note lists what
///   was created, updated or deleted), or when `Ready` became `True`.
/// - `TierRetained` (Warning) when an obsolete quorum retry tier was unbound but kept
///   (RabbitMQ cannot delete it only-if-empty): delete it once empty.
/// - `DeadLetterQueueRetired` (Warning) when a dead-letter queue the spec no longer
///   names was unbound and is kept while it holds dead letters (or, quorum, until a
///   person deletes it).
/// - A Warning with the condition's reason (`ArgumentConflict`, `PolicyShadowed`,
///   `BrokerUnreachable`, `InvalidSpec`, `SecretNotFound`, …) when `Ready` is `False` and
///   its reason or message changed, so a persisting failure is not repeated on every
///   retry.
pub fn events_for(
    before: &DeadLetterQueueStatus,
    after: &DeadLetterQueueStatus,
    result: &Result<ApplyReport, ReconcileError>,
) -> Vec<Note> {
    let ready = |s: &DeadLetterQueueStatus| -> Option<Condition> {
        s.conditions.iter().find(|c| c.type_ == READY).cloned()
    };
    let (old, new) = (ready(before), ready(after));
    let mut notes = Vec::new();
    let Some(new) = new else { return notes };
    let became_ready = new.status == "True" && old.as_ref().is_none_or(|o| o.status != "True");
    let writes: Vec<String> = match result {
        Ok(report) => report
            .actions
            .iter()
            .filter(|a| {
                matches!(
                    a.outcome,
                    Outcome::Created | Outcome::Updated | Outcome::Deleted
                )
            })
            .map(|a| a.to_string())
            .collect(),
        Err(_) => Vec::new(),
    };
    if !writes.is_empty() || became_ready {
        let note = if writes.is_empty() {
            new.message.clone()
        } else {
            writes.join("; ")
        };
        notes.push(Note {
            type_: EventType::Normal,
            reason: "TopologyApplied".into(),
            action: "Apply".into(),
            note,
        });
    }
    let changed = old.as_ref().is_none_or(|o| {
        o.status != new.status || o.reason != new.reason || o.message != new.message
    });
    // An obsolete quorum tier the operator cannot delete safely, or a retired
    // dead-letter queue that still exists: a person must act.
    if let Ok(report) = result {
        for (reason, list) in [
            (
                "TierRetained",
                report.lines(|o| matches!(o, Outcome::Retained(_))),
            ),
            (
                "DeadLetterQueueRetired",
                report.lines(|o| matches!(o, Outcome::Retired(_))),
            ),
        ] {
            if !list.is_empty() && changed {
                notes.push(Note {
                    type_: EventType::Warning,
                    reason: reason.into(),
                    action: "Apply".into(),
                    note: list.join("; "),
                });
            }
        }
    }
    if new.status != "True" && changed {
        notes.push(Note {
            type_: EventType::Warning,
            reason: new.reason.clone(),
            action: "Apply".into(),
            note: new.message.clone(),
        });
    }
    notes
}

/// The Event for a change of `AlertRulesReady` from `before` to `after` (its status or
/// reason): Normal `RulesApplied`, or a Warning with its reason
/// (`PrometheusOperatorMissing`, `RulesApplyFailed`). Pure.
pub fn alert_rule_events(
    before: &DeadLetterQueueStatus,
    after: &DeadLetterQueueStatus,
) -> Vec<Note> {
    let rules = |s: &DeadLetterQueueStatus| -> Option<Condition> {
        s.conditions
            .iter()
            .find(|c| c.type_ == ALERT_RULES_READY)
            .cloned()
    };
    let Some(r) = rules(after) else {
        return Vec::new();
    };
    if rules(before).is_some_and(|o| o.status == r.status && o.reason == r.reason) {
        return Vec::new();
    }
    vec![if r.status == "True" {
        Note::normal(&r.reason, "Apply", r.message)
    } else {
        Note::warning(&r.reason, "Apply", r.message)
    }]
}

/// Deletion cannot go on: `Ready` and `TopologyReady` become `False` with
/// `reason`/`message` (status written, and a Warning Event recorded, only when that
/// changes them); returns `err`, which keeps the finalizer and retries with backoff.
async fn deletion_stopped(
    ctx: &DeadLetterQueueContext,
    obj: &DynamicObject,
    current: &DeadLetterQueueStatus,
    reason: &'static str,
    message: String,
    err: Error,
) -> Result<Action, Error> {
    let mut status = current.clone();
    let now = ctx.shared.now();
    for type_ in [TOPOLOGY_READY, READY] {
        let desired = Desired {
            type_,
            status: ConditionStatus::False,
            reason,
            message: message.clone(),
        };
        conditions::set(
            &mut status.conditions,
            &desired,
            obj.metadata.generation,
            &now,
        );
    }
    if status != *current {
        let ar = api_resource::<DeadLetterQueue>();
        crate::controller::apply_status(&ctx.shared, &ar, obj, &status.reconcile_part()).await?;
        publish(
            &ctx.recorder,
            obj,
            &ar,
            Note::warning(reason, "Delete", message),
        )
        .await;
    }
    Err(err)
}

/// Releases `obj` without deleting anything, with a `CleanupSkipped` Warning saying why.
async fn skipped(
    ctx: &DeadLetterQueueContext,
    obj: &DynamicObject,
    note: String,
) -> Result<Action, Error> {
    let note = Note::warning("CleanupSkipped", "Delete", note);
    crate::controller::release_with(&ctx.recorder, obj, &api_resource::<DeadLetterQueue>(), note)
        .await
}

async fn cleanup(obj: &DynamicObject, ctx: &DeadLetterQueueContext) -> Result<Action, Error> {
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let ar = api_resource::<DeadLetterQueue>();
    // Its backlog stays watched until the finalizer is released (a blocked deletion still
    // holds dead letters); the monitor drops it once the object is gone from the watch.
    let current: DeadLetterQueueStatus = status_of(obj);
    let left = current
        .topology
        .as_ref()
        .map(|t| t.queues.join(", "))
        .unwrap_or_default();
    let left_note = if left.is_empty() {
        String::new()
    } else {
        format!(" (queues: {left})")
    };
    let dlq = match decode::<DeadLetterQueue>(obj) {
        Ok(d) => d,
        Err(invalid) => {
            let note = format!(
                "spec does not decode ({invalid}): finalizer released, broker objects not deleted{left_note}"
            );
            return skipped(ctx, obj, note).await;
        }
    };
    if dlq.spec.deletion_policy == DeletionPolicy::Retain {
        return crate::controller::release_with(
            &ctx.recorder,
            obj,
            &ar,
            Note::normal(
                "Retained",
                "Delete",
                "deletionPolicy Retain: broker objects kept".into(),
            ),
        )
        .await;
    }
    let Some(recorded) = current.topology.clone() else {
        // Never applied: nothing on the broker is ours, no need to reach it.
        return crate::controller::release_with(
            &ctx.recorder,
            obj,
            &ar,
            Note::normal(
                "TopologyDeleted",
                "Delete",
                "nothing to delete: no broker object was ever created".into(),
            ),
        )
        .await;
    };
    if let Err(invalid) = dlq.spec.validate() {
        let note = format!(
            "invalid spec ({invalid}): finalizer released, broker objects not deleted{left_note}"
        );
        return skipped(ctx, obj, note).await;
    }
    let (policy, secret) = read_references(&ctx.shared, &ns, &dlq).await?;
    let Some(secret) = secret else {
        let note = format!(
            "Secret {} not found: finalizer released, broker objects not deleted{left_note}",
            dlq.spec.broker.secret_ref.name
        );
        return crate::controller::release_with(
            &ctx.recorder,
            obj,
            &ar,
            Note::warning("SecretNotFound", "Delete", note),
        )
        .await;
    };
    // Without a usable RetryPolicy the tiers are those of the default policy; the
    // broker adapter also finds every other tier queue of this source by its signature.
    let policy = match policy {
        Some(Ok(p)) => p,
        _ => RetryPolicy::new(&dlq.spec.retry_policy_ref.name, RetryPolicySpec::default()),
    };
    let prepared = match reconcile::prepare(&dlq, Some(&policy), Some(&secret)) {
        Ok(p) => p,
        Err(e) => {
            let (reason, message) = (e.reason(), format!("cannot delete broker objects: {e}"));
            return deletion_stopped(ctx, obj, &current, reason, message, e.into()).await;
        }
    };
    // Only what this resource recorded as created: a spec edited after the objects were
    // made (another source queue, other dead-letter names) must neither redirect the
    // deletion to someone else's objects nor delete half and forget the rest.
    let mut topology = prepared.topology.clone();
    let source = topology.routes.source_queue.clone();
    let tier_prefix = format!("{}.", topology.routes.retry_exchange);
    let planned: Vec<&str> = topology
        .queues
        .iter()
        .map(|q| q.name.as_str())
        .chain(topology.exchanges.iter().map(|x| x.name.as_str()))
        .collect();
    let unplanned: Vec<&String> = recorded
        .queues
        .iter()
        .filter(|q| !q.starts_with(&tier_prefix))
        .chain(recorded.exchanges.iter())
        .filter(|n| !planned.contains(&n.as_str()))
        .collect();
    if !recorded.queues.contains(&source) || !unplanned.is_empty() {
        let message = format!(
            "deletionPolicy Delete: the spec no longer plans what this resource created (status.topology: queues {:?}, exchanges {:?}; now planned: {planned:?}); revert spec.source.queue / spec.deadLetter, or set deletionPolicy: Retain",
            recorded.queues, recorded.exchanges
        );
        let err = Error::DeletionBlocked(message.clone());
        return deletion_stopped(ctx, obj, &current, "DeletionBlocked", message, err).await;
    }
    topology
        .queues
        .retain(|q| q.name == source || recorded.queues.contains(&q.name));
    topology
        .exchanges
        .retain(|x| recorded.exchanges.contains(&x.name));
    topology
        .policies
        .retain(|p| recorded.policies.contains(&p.name));
    let broker = ctx
        .shared
        .brokers
        .get(&ns, &secret, &prepared.connection)
        .map_err(ReconcileError::from)?;
    // Another resource on the same broker has created some of these names (possible
    // across namespaces and Secrets): deleting them would take its topology away.
    let mut shared = Vec::new();
    for other in ownership::recorded_by_others(&dlq, &others(ctx)) {
        if ownership::same_broker(&ctx.shared, &dlq, &broker, &other).await {
            shared.push(object_key(&other.metadata));
        }
    }
    if !shared.is_empty() {
        let note = format!(
            "names also in use by DeadLetterQueue {} on the same broker: finalizer released, broker objects not deleted{left_note}",
            shared.join(", ")
        );
        return skipped(ctx, obj, note).await;
    }
    let report = match broker.remove(&topology).await {
        Ok(r) => r,
        Err(e) => {
            let e = ReconcileError::from(e);
            let (reason, message) = (e.reason(), format!("cannot delete broker objects: {e}"));
            return deletion_stopped(ctx, obj, &current, reason, message, e.into()).await;
        }
    };
    if report.is_complete() {
        let removed: Vec<String> = report.actions.iter().map(|a| a.to_string()).collect();
        let note = if removed.is_empty() {
            "nothing left on the broker".to_string()
        } else {
            removed.join("; ")
        };
        return crate::controller::release_with(
            &ctx.recorder,
            obj,
            &ar,
            Note::normal("TopologyDeleted", "Delete", note),
        )
        .await;
    }
    let message = format!(
        "deletionPolicy Delete: not deleting, {}; the finalizer is kept until they are drained (or set deletionPolicy: Retain)",
        report.blocked.join("; ")
    );
    let err = Error::DeletionBlocked(message.clone());
    deletion_stopped(ctx, obj, &current, "DeletionBlocked", message, err).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::{at, report};

    #[test]
    fn first_apply_writes_status_and_records_one_event() {
        let empty = DeadLetterQueueStatus::default();
        let result = Ok(report(vec![Outcome::Created, Outcome::InPlace]));
        let (status, changed) = status_after(&empty, Some(1), &result, None, &at(10));
        assert!(changed);
        assert_eq!(status.observed_generation, Some(1));
        let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [TOPOLOGY_READY, READY]);
        let notes = events_for(&empty, &status, &result);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, "TopologyApplied");
        assert_eq!(notes[0].note, "queue q0: created");

        // Same state again: no write, no event.
        let again = Ok(report(vec![Outcome::InPlace, Outcome::InPlace]));
        let (same, changed) = status_after(&status, Some(1), &again, None, &at(20));
        assert!(!changed);
        assert!(events_for(&status, &same, &again).is_empty());
    }

    /// A kept obsolete queue (`outcome`) is one Warning Event `reason` with `note`, then
    /// nothing while it stays.
    fn kept_queue_is_a_warning_once(outcome: Outcome, reason: &str, note: &str) {
        let empty = DeadLetterQueueStatus::default();
        let result = Ok(report(vec![Outcome::InPlace, outcome]));
        let (status, _) = status_after(&empty, Some(1), &result, None, &at(10));
        let notes = events_for(&empty, &status, &result);
        let reasons: Vec<&str> = notes.iter().map(|n| n.reason.as_str()).collect();
        assert_eq!(reasons, ["TopologyApplied", reason]);
        assert_eq!(notes[1].type_, EventType::Warning);
        assert_eq!(notes[1].note, note);
        let (again, changed) = status_after(&status, Some(1), &result, None, &at(20));
        assert!(!changed);
        assert!(events_for(&status, &again, &result).is_empty());
    }

    #[test]
    fn a_retained_tier_is_a_warning_once() {
        kept_queue_is_a_warning_once(
            Outcome::Retained("delete it once its depth is 0".into()),
            "TierRetained",
            "queue q1: retained: delete it once its depth is 0",
        );
    }

    #[test]
    fn a_retired_dead_letter_queue_is_a_warning_once() {
        kept_queue_is_a_warning_once(
            Outcome::Retired("3 dead letters left".into()),
            "DeadLetterQueueRetired",
            "queue q1: retired: 3 dead letters left",
        );
    }

    #[test]
    fn failure_is_a_warning_once_then_recovery_is_normal() {
        let empty = DeadLetterQueueStatus::default();
        let down: Result<ApplyReport, ReconcileError> = Err(ReconcileError::Broker(
            crate::broker::BrokerError::Unreachable {
                endpoint: "amqp://guest:***@127.0.0.1:1/".into(),
                reason: "connection refused".into(),
            },
        ));
        let (failed, _) = status_after(&empty, Some(1), &down, None, &at(10));
        let ready = failed
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
            .expect("Ready");
        assert_eq!(ready.reason, "BrokerUnreachable");
        let notes = events_for(&empty, &failed, &down);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].type_, EventType::Warning);
        assert_eq!(notes[0].reason, "BrokerUnreachable");
        // The same failure again: no new status, no new event.
        let (again, changed) = status_after(&failed, Some(1), &down, None, &at(20));
        assert!(!changed);
        assert!(events_for(&failed, &again, &down).is_empty());
        // Recovery without writes: Normal TopologyApplied, transition time moves.
        let ok = Ok(report(vec![Outcome::InPlace]));
        let (recovered, changed) = status_after(&again, Some(1), &ok, None, &at(30));
        assert!(changed);
        let notes = events_for(&again, &recovered, &ok);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, "TopologyApplied");
        let ready = recovered
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
            .expect("Ready");
        assert_eq!(ready.last_transition_time, at(30));
    }
}
