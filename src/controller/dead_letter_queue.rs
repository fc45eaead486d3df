//! The DeadLetterQueue controller's reconcile, in the stages of DESIGN.md §4b:
//! read (resource, RetryPolicy, Secret) → validate and plan ([`reconcile::prepare`], pure) →
//! apply to the broker ([`reconcile::apply`]) → status ([`status_after`], pure; written by
//! server-side apply only when it changed) and Events ([`events_for`], pure).
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

use crate::broker::{ApplyReport, Broker, Outcome};
use crate::controller::conditions::{self, Desired, READY, TOPOLOGY_READY};
use crate::controller::context::Context;
use crate::controller::object::{api_resource, decode, status_of};
use crate::controller::{publish, Error, Note};
use crate::crd::{
    DeadLetterQueue, DeadLetterQueueStatus, DeletionPolicy, InvalidSpec, RetryPolicy,
    RetryPolicySpec,
};
use crate::manifest::object_key;
use crate::reconcile::{self, Prepared, ReconcileError};

/// Finalizer that holds a DeadLetterQueue until its `deletionPolicy` is carried out.
pub const FINALIZER: &str = "dlqoperator.io/cleanup";

/// Kind label of this controller's metrics.
pub const KIND: &str = "DeadLetterQueue";

/// Reconciles one DeadLetterQueue (the `reconcile` of the kube-runtime controller):
/// adds the finalizer, then applies or cleans up. Records the reconcile metrics.
///
/// # Errors
/// Kubernetes API errors, [`ReconcileError`]s (after writing them to status), and
/// [`Error::DeletionBlocked`]; the controller's error policy retries them with per-object
/// backoff (never for `InvalidSpec`).
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ns, &api_resource::<DeadLetterQueue>());
    crate::controller::instrumented(KIND, &obj.clone(), &ctx, async {
        finalizer(&api, FINALIZER, obj, |event| async {
            match event {
                FinalizerEvent::Apply(o) => apply(&o, &ctx).await,
                FinalizerEvent::Cleanup(o) => cleanup(&o, &ctx).await,
            }
        })
        .await
        .map_err(|e| Error::Finalizer(Box::new(e)))
    })
    .await
}

/// Every DeadLetterQueue the controller watches (empty before it started).
fn others(ctx: &Context) -> Vec<Arc<DynamicObject>> {
    ctx.dead_letter_queues
        .get()
        .map(|store| store.state())
        .unwrap_or_default()
}

/// Decodes and validates the DeadLetterQueue `obj` (before anything it references is
/// read: an empty reference name is an invalid spec, not an API error).
fn decode_valid(obj: &DynamicObject) -> Result<DeadLetterQueue, ReconcileError> {
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
async fn read_references(
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
fn prepare(
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
        Some(Ok(p)) => reconcile::prepare(dlq, Some(p), secret),
        None => reconcile::prepare(dlq, None, secret),
    }
}

async fn apply(obj: &DynamicObject, ctx: &Context) -> Result<Action, Error> {
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let key = object_key(&obj.metadata);
    let current: DeadLetterQueueStatus = status_of(obj);
    let mut prepared = None;
    let result = match decode_valid(obj) {
        Err(e) => Err(e),
        Ok(dlq) => {
            let others = others(ctx);
            let (policy, secret) = read_references(ctx, &ns, &dlq).await?;
            let prepared_or_conflict = match name_conflict(&dlq, &others) {
                Some(conflict) => Err(conflict),
                None => prepare(&dlq, policy.as_ref(), secret.as_ref()),
            };
            match prepared_or_conflict {
                Err(e) => Err(e),
                Ok(p) => {
                    let result = match secret
                        .as_ref()
                        .map(|s| ctx.brokers.get(&ns, s, &p.connection))
                    {
                        Some(Ok(broker)) => reconcile::apply(broker.as_ref(), &p).await,
                        Some(Err(e)) => Err(e.into()),
                        None => Err(ReconcileError::SecretNotFound(key.clone())),
                    };
                    prepared = Some(p);
                    result
                }
            }
        }
    };
    let now = ctx.now();
    let (status, changed) = status_after(
        &current,
        obj.metadata.generation,
        &result,
        prepared.as_ref(),
        &now,
    );
    if changed {
        crate::controller::apply_status(ctx, &api_resource::<DeadLetterQueue>(), obj, &status)
            .await?;
    }
    for note in events_for(&current, &status, &result) {
        publish(ctx, obj, &api_resource::<DeadLetterQueue>(), note).await;
    }
    match result {
        Ok(_) => {
            ctx.backoff.reset(&key);
            Ok(Action::requeue(ctx.resync))
        }
        Err(e) => Err(e.into()),
    }
}

/// The queues and exchanges `spec` makes the operator manage (not the retry tiers, which
/// are named after the retry exchange), each with the field that names it.
fn claimed_names(dlq: &DeadLetterQueue) -> Vec<(&'static str, String, &'static str)> {
    let policy = crate::backoff::ResolvedPolicy::from_spec(&RetryPolicySpec::default());
    let Ok(policy) = policy else {
        return Vec::new();
    };
    let t = crate::topology::plan(&object_key(&dlq.metadata), &dlq.spec, &policy);
    let mut names: Vec<(&'static str, String, &'static str)> = t
        .queues
        .iter()
        .filter_map(|q| match q.role {
            crate::topology::QueueRole::Source => {
                Some(("queue", q.name.clone(), "spec.source.queue"))
            }
            crate::topology::QueueRole::DeadLetter { .. } => {
                Some(("queue", q.name.clone(), "spec.deadLetter.queue"))
            }
            crate::topology::QueueRole::Retry { .. } => None,
        })
        .collect();
    for x in &t.exchanges {
        let field = if x.name == t.routes.dead_letter_exchange {
            "spec.deadLetter.exchange"
        } else {
            "spec.source.queue"
        };
        names.push(("exchange", x.name.clone(), field));
    }
    // The source queue first, so two resources on one source are reported as such.
    names.sort_by_key(|(kind, _, field)| !(*kind == "queue" && *field == "spec.source.queue"));
    names
}

/// `Some(NameConflict)` when an older DeadLetterQueue of `others` (same namespace, same
/// broker Secret, same vhost) already manages a queue or exchange that `dlq` plans. Pure.
///
/// Each queue and exchange belongs to one DeadLetterQueue (as `apply -f` enforces across
/// files): two resources on one source queue, or one's dead-letter queue being another's
/// source, would overwrite each other's policies on every resync. The older resource
/// (creation time, then name) keeps it; the newer one gets `Ready=False,
/// reason=NameConflict` and no broker call. Resources in other namespaces are not
/// compared: their Secrets may name other brokers.
pub fn name_conflict(
    dlq: &DeadLetterQueue,
    others: &[Arc<DynamicObject>],
) -> Option<ReconcileError> {
    let mine = claimed_names(dlq);
    let ns = dlq.metadata.namespace.as_deref();
    let my_age = (
        dlq.metadata.creation_timestamp.clone().map(|t| t.0),
        dlq.metadata.name.clone().unwrap_or_default(),
    );
    for other in others {
        if other.metadata.namespace.as_deref() != ns || other.metadata.uid == dlq.metadata.uid {
            continue;
        }
        let Ok(other) = decode::<DeadLetterQueue>(other) else {
            continue;
        };
        if other.metadata.name == dlq.metadata.name
            || other.spec.broker.secret_ref.name != dlq.spec.broker.secret_ref.name
            || other.spec.broker.vhost != dlq.spec.broker.vhost
        {
            continue;
        }
        let their_age = (
            other.metadata.creation_timestamp.clone().map(|t| t.0),
            other.metadata.name.clone().unwrap_or_default(),
        );
        if their_age >= my_age {
            continue;
        }
        let theirs = claimed_names(&other);
        for (kind, name, field) in &mine {
            if theirs.iter().any(|(k, n, _)| k == kind && n == name) {
                return Some(ReconcileError::NameConflict {
                    field,
                    message: format!(
                        "{kind} {name:?} is already managed by DeadLetterQueue {} (same Secret and vhost); each queue and exchange belongs to one DeadLetterQueue",
                        object_key(&other.metadata)
                    ),
                });
            }
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
    if let (Ok(_), Some(p)) = (result, prepared) {
        status.topology = Some(p.topology.status());
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
    // An obsolete quorum tier the operator cannot delete safely: a person must act.
    if let Ok(report) = result {
        let retained: Vec<String> = report
            .actions
            .iter()
            .filter(|a| matches!(a.outcome, Outcome::Retained(_)))
            .map(|a| a.to_string())
            .collect();
        if !retained.is_empty() && changed {
            notes.push(Note {
                type_: EventType::Warning,
                reason: "TierRetained".into(),
                action: "Apply".into(),
                note: retained.join("; "),
            });
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

/// Sets `Ready` and `TopologyReady` to `False` with `reason`/`message` during deletion
/// and writes the status if that changed it (`true` then).
async fn deletion_condition(
    ctx: &Context,
    obj: &DynamicObject,
    current: &DeadLetterQueueStatus,
    reason: &'static str,
    message: &str,
) -> Result<bool, Error> {
    let mut status = current.clone();
    let now = ctx.now();
    for type_ in [TOPOLOGY_READY, READY] {
        let desired = Desired {
            type_,
            status: false,
            reason,
            message: message.to_string(),
        };
        conditions::set(
            &mut status.conditions,
            &desired,
            obj.metadata.generation,
            &now,
        );
    }
    if status == *current {
        return Ok(false);
    }
    crate::controller::apply_status(ctx, &api_resource::<DeadLetterQueue>(), obj, &status).await?;
    Ok(true)
}

/// The other DeadLetterQueues of `others` (any namespace, same vhost) that plan one of
/// the names `dlq` plans, each with the shared names (`queue "x"`).
fn sharing_names(
    dlq: &DeadLetterQueue,
    others: &[Arc<DynamicObject>],
) -> Vec<(DeadLetterQueue, Vec<String>)> {
    let mine = claimed_names(dlq);
    let mut out = Vec::new();
    for other in others {
        if other.metadata.uid == dlq.metadata.uid {
            continue;
        }
        let Ok(other) = decode::<DeadLetterQueue>(other) else {
            continue;
        };
        if other.spec.broker.vhost != dlq.spec.broker.vhost {
            continue;
        }
        let theirs = claimed_names(&other);
        let shared: Vec<String> = mine
            .iter()
            .filter(|(kind, name, _)| theirs.iter().any(|(k, n, _)| k == kind && n == name))
            .map(|(kind, name, _)| format!("{kind} {name:?}"))
            .collect();
        if !shared.is_empty() {
            out.push((other, shared));
        }
    }
    out
}

/// The sharing of [`sharing_names`] that is on the same broker as `ours`: same namespace
/// and Secret, or a Secret (read here) whose management endpoint is the same. A Secret
/// that cannot be read counts as the same broker (nothing is deleted on a guess).
async fn shared_on_same_broker(
    ctx: &Context,
    dlq: &DeadLetterQueue,
    ours: &crate::broker::BrokerConnection,
) -> Vec<String> {
    let ns = dlq.metadata.namespace.clone().unwrap_or_default();
    let mut shared = Vec::new();
    for (other, names) in sharing_names(dlq, &others(ctx)) {
        let other_ns = other.metadata.namespace.clone().unwrap_or_default();
        let same = if other_ns == ns
            && other.spec.broker.secret_ref.name == dlq.spec.broker.secret_ref.name
        {
            true
        } else {
            let secret = Api::<Secret>::namespaced(ctx.client.clone(), &other_ns)
                .get_opt(&other.spec.broker.secret_ref.name)
                .await;
            match secret {
                Ok(Some(s)) => crate::broker::BrokerConnection::from_secret_data(
                    &other.spec.broker.secret_ref.name,
                    &crate::manifest::secret_data(&s),
                )
                .map(|c| c.management_base() == ours.management_base())
                .unwrap_or(true),
                _ => true,
            }
        };
        if same {
            shared.push(format!(
                "{} ({})",
                names.join(", "),
                object_key(&other.metadata)
            ));
        }
    }
    shared
}

async fn cleanup(obj: &DynamicObject, ctx: &Context) -> Result<Action, Error> {
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let ar = api_resource::<DeadLetterQueue>();
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
            return crate::controller::release_with(
                ctx,
                obj,
                &ar,
                Note::warning("CleanupSkipped", "Delete", note),
            )
            .await;
        }
    };
    if dlq.spec.deletion_policy == DeletionPolicy::Retain {
        return crate::controller::release_with(
            ctx,
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
            ctx,
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
        return crate::controller::release_with(
            ctx,
            obj,
            &ar,
            Note::warning("CleanupSkipped", "Delete", note),
        )
        .await;
    }
    let (policy, secret) = read_references(ctx, &ns, &dlq).await?;
    let Some(secret) = secret else {
        let note = format!(
            "Secret {} not found: finalizer released, broker objects not deleted{left_note}",
            dlq.spec.broker.secret_ref.name
        );
        return crate::controller::release_with(
            ctx,
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
            let message = format!("cannot delete broker objects: {e}");
            if deletion_condition(ctx, obj, &current, e.reason(), &message).await? {
                publish(ctx, obj, &ar, Note::warning(e.reason(), "Delete", message)).await;
            }
            return Err(e.into());
        }
    };
    // Another resource plans some of these names on the same broker (possible across
    // namespaces): deleting them would take its topology — and its messages' route — away.
    let shared = shared_on_same_broker(ctx, &dlq, &prepared.connection).await;
    if !shared.is_empty() {
        let note = format!(
            "also managed by other DeadLetterQueues: {}; finalizer released, broker objects not deleted{left_note}",
            shared.join("; ")
        );
        return crate::controller::release_with(
            ctx,
            obj,
            &ar,
            Note::warning("CleanupSkipped", "Delete", note),
        )
        .await;
    }
    // Only what this resource recorded as created: a spec edited after the objects were
    // made (another source queue, other dead-letter names) must not redirect the deletion
    // to someone else's objects.
    let mut topology = prepared.topology.clone();
    let source = topology.routes.source_queue.clone();
    if !recorded.queues.contains(&source) {
        let message = format!(
            "deletionPolicy Delete: spec.source.queue is {source:?}, but the broker objects of this resource were created for {:?} (status.topology); revert spec.source.queue, or set deletionPolicy: Retain",
            recorded.queues
        );
        if deletion_condition(ctx, obj, &current, "DeletionBlocked", &message).await? {
            publish(
                ctx,
                obj,
                &ar,
                Note::warning("DeletionBlocked", "Delete", message.clone()),
            )
            .await;
        }
        return Err(Error::DeletionBlocked(message));
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
        .brokers
        .get(&ns, &secret, &prepared.connection)
        .map_err(ReconcileError::from)?;
    let report = match broker.remove(&topology).await {
        Ok(r) => r,
        Err(e) => {
            let e = ReconcileError::from(e);
            let message = format!("cannot delete broker objects: {e}");
            if deletion_condition(ctx, obj, &current, e.reason(), &message).await? {
                publish(ctx, obj, &ar, Note::warning(e.reason(), "Delete", message)).await;
            }
            return Err(e.into());
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
            ctx,
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
    if deletion_condition(ctx, obj, &current, "DeletionBlocked", &message).await? {
        publish(
            ctx,
            obj,
            &ar,
            Note::warning("DeletionBlocked", "Delete", message.clone()),
        )
        .await;
    }
    Err(Error::DeletionBlocked(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{Action as BrokerAction, ObjectKind};

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).expect("valid timestamp"))
    }

    fn report(outcomes: Vec<Outcome>) -> ApplyReport {
        ApplyReport {
            actions: outcomes
                .into_iter()
                .enumerate()
                .map(|(i, outcome)| BrokerAction {
                    kind: ObjectKind::Queue,
                    name: format!("q{i}"),
                    outcome,
                })
                .collect(),
        }
    }

    fn dynamic(name: &str, created: i64, spec: serde_json::Value) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
                "metadata": {"name": name, "namespace": "ns", "uid": name,
                             "creationTimestamp": at(created)},
                "spec": spec,
            }))
            .expect("object"),
        )
    }

    fn spec(queue: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut s = serde_json::json!({
            "broker": {"secretRef": {"name": "rabbit"}},
            "source": {"queue": queue},
            "retryPolicyRef": {"name": "p"},
        });
        if let (Some(o), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        s
    }

    #[test]
    fn the_older_resource_keeps_a_shared_name() {
        let older = dynamic("a", 10, spec("orders", serde_json::json!({})));
        let same_source = dynamic("b", 20, spec("orders", serde_json::json!({})));
        let dlq_is_source = dynamic(
            "c",
            30,
            spec(
                "payments",
                serde_json::json!({"deadLetter": {"queue": "orders"}}),
            ),
        );
        let elsewhere = dynamic(
            "d",
            40,
            spec(
                "orders",
                serde_json::json!({"broker": {"secretRef": {"name": "other"}}}),
            ),
        );
        let all = vec![
            older.clone(),
            same_source.clone(),
            dlq_is_source.clone(),
            elsewhere.clone(),
        ];
        let typed = |o: &Arc<DynamicObject>| decode::<DeadLetterQueue>(o).expect("decodes");
        assert!(
            name_conflict(&typed(&older), &all).is_none(),
            "the oldest keeps it"
        );
        let e = name_conflict(&typed(&same_source), &all).expect("conflict");
        assert_eq!(e.reason(), "NameConflict");
        assert!(
            e.to_string().starts_with(
                "spec.source.queue: queue \"orders\" is already managed by DeadLetterQueue ns/a"
            ),
            "{e}"
        );
        let e = name_conflict(&typed(&dlq_is_source), &all).expect("conflict");
        assert!(e.to_string().starts_with("spec.deadLetter.queue:"), "{e}");
        assert!(
            name_conflict(&typed(&elsewhere), &all).is_none(),
            "another Secret"
        );
    }

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

    #[test]
    fn a_retained_tier_is_a_warning_once() {
        let empty = DeadLetterQueueStatus::default();
        let result = Ok(report(vec![
            Outcome::InPlace,
            Outcome::Retained("delete it once its depth is 0".into()),
        ]));
        let (status, _) = status_after(&empty, Some(1), &result, None, &at(10));
        let notes = events_for(&empty, &status, &result);
        let reasons: Vec<&str> = notes.iter().map(|n| n.reason.as_str()).collect();
        assert_eq!(reasons, ["TopologyApplied", "TierRetained"]);
        assert_eq!(notes[1].type_, EventType::Warning);
        assert_eq!(
            notes[1].note,
            "queue q1: retained: delete it once its depth is 0"
        );
        let (again, changed) = status_after(&status, Some(1), &result, None, &at(20));
        assert!(!changed);
        assert!(events_for(&status, &again, &result).is_empty());
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
