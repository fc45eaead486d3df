//! The DeadLetterQueue controller's reconcile, in the stages of docs/ARCHITECTURE.md, "Reconcile stages":
//! read (resource, RetryPolicy, Secret), validate and plan ([`resolve::object_in_cluster`]) →
//! register the plan with the backlog monitor
//! ([`Targets::watch`](crate::controller::backlog::Targets::watch)) → apply to the broker
//! ([`reconcile::apply`]) → the PrometheusRule ([`alert_rules::apply`]) → status
//! ([`status_after`], pure; only the reconcile's part, written by server-side apply only
//! when it changed) and Events ([`events_for`], [`alert_rule_events`], pure).
//!
//! Deletion goes through the finalizer `dlqoperator.io/cleanup` ([`FINALIZER`]) and
//! `spec.deletionPolicy` (`cleanup`): `Retain` releases at once; `Delete` removes the
//! operator-owned broker objects ([`BrokerTopology::remove`](crate::broker::BrokerTopology::remove)) and
//! keeps the finalizer, with a `DeletionBlocked` condition and Event, while a queue to
//! delete still holds messages.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::ResourceExt;

use crate::broker::ApplyReport;
use crate::controller::context::{Context, DeadLetterQueueContext};
use crate::controller::{alert_rules, ownership};
use crate::controller::{resolve_verdict, Error};
use crate::crd::{DeadLetterQueue, DeadLetterQueueStatus, RetryPolicy};
use crate::manifest::object_key;
use crate::object::{api_resource, status_of};
use crate::reconcile::{self, Prepared, ReconcileError};
use crate::resolve::{self, Resolved};
use crate::status::conditions::{self, ConditionStatus, Desired, ALERT_RULES_READY};
use crate::status::publish;

mod cleanup;
#[cfg(test)]
mod fast_tests;
mod status;

pub use cleanup::recorded_part;
pub use status::{alert_rule_events, events_for, status_after};

use cleanup::cleanup;

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

/// The RetryPolicy and Secret `dlq` references, read as every driver reads them
/// ([`resolve::Cluster`]'s [`References`](resolve::References)) but not resolved: the
/// deletion plans with what it finds (an invalid or missing RetryPolicy, or a missing
/// Secret, does not stop it the way it stops an apply).
///
/// # Errors
/// [`Error::Resolve`] when the API server cannot be read.
async fn read_references(
    ctx: &Context,
    ns: &str,
    dlq: &DeadLetterQueue,
) -> Result<(resolve::Found<RetryPolicy>, Option<Secret>), Error> {
    use resolve::References;
    let cluster = resolve::Cluster::new(ctx.client.clone());
    // A lookup fails only when the API server cannot be read (NoVerdict::Api);
    // resolve_verdict maps that, and any other answer, as the apply does.
    let api = |e| resolve_verdict(e).map_or_else(|e| e, Error::from);
    let policy = cluster
        .read_retry_policy(ns, &dlq.spec.retry_policy_ref.name)
        .await
        .map_err(api)?;
    let secret = cluster
        .read_secret(ns, &dlq.spec.broker.secret_ref.name)
        .await
        .map_err(api)?;
    Ok((policy, secret))
}

/// What one apply did: the broker apply's result, the plan (once planned), and the
/// `AlertRulesReady` condition (`None`: alert rules not looked at, the spec being invalid;
/// `Some(None)`: alerting disabled).
struct Applied {
    result: Result<ApplyReport, ReconcileError>,
    prepared: Option<Prepared>,
    alert_rules: Option<Option<Desired>>,
}

impl Applied {
    /// Nothing applied: `e` stopped the reconcile before the broker was reached.
    fn failed(e: ReconcileError) -> Self {
        Applied {
            result: Err(e),
            prepared: None,
            alert_rules: None,
        }
    }
}

/// The finalizer's apply, in stages: read, validate and plan ([`resolve::object_in_cluster`]),
/// apply to the broker and the PrometheusRule ([`apply_valid`]), then status
/// ([`write_status`]), Events, and the next reconcile ([`next_reconcile`]).
async fn apply(obj: &DynamicObject, ctx: &DeadLetterQueueContext) -> Result<Action, Error> {
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let current: DeadLetterQueueStatus = status_of(obj);
    let applied = match resolve::object_in_cluster(ctx.shared.client.clone(), &ns, obj).await {
        Err(e) => Applied::failed(resolve_verdict(e)?),
        Ok(resolved) => apply_valid(obj, ctx, &ns, resolved, &current).await,
    };
    let status = write_status(ctx, obj, &current, &applied).await?;
    let mut notes = events_for(&current, &status, &applied.result);
    notes.extend(alert_rule_events(&current, &status));
    for note in notes {
        publish(&ctx.recorder, obj, &api_resource::<DeadLetterQueue>(), note).await;
    }
    next_reconcile(ctx, obj, applied)
}

/// Applies the resolved DeadLetterQueue (`obj`, in `ns`, with status `current`): its plan
/// to the broker ([`apply_topology`]), and its PrometheusRule.
async fn apply_valid(
    obj: &DynamicObject,
    ctx: &DeadLetterQueueContext,
    ns: &str,
    resolved: Resolved,
    current: &DeadLetterQueueStatus,
) -> Applied {
    let result = apply_topology(ctx, obj, ns, &resolved, current).await;
    let Resolved {
        dead_letter_queue: dlq,
        prepared,
        ..
    } = resolved;
    // Any AlertRulesReady (even False after a refused update) means a rule may exist.
    let had_rules = current
        .conditions
        .iter()
        .any(|c| c.type_ == ALERT_RULES_READY);
    let rules = alert_rules::apply(&ctx.shared, ns, &dlq, &prepared.monitoring, had_rules).await;
    Applied {
        result,
        prepared: Some(prepared),
        alert_rules: Some(rules),
    }
}

/// Applies the plan of the `resolved` DeadLetterQueue to the broker of its Secret, unless
/// another resource on it owns one of its names ([`name_conflict`]); registers the plan
/// (and the spec, for the maturity score) with the backlog monitor first, and takes it
/// back when the broker's ownership records name another owner.
async fn apply_topology(
    ctx: &DeadLetterQueueContext,
    obj: &DynamicObject,
    ns: &str,
    resolved: &Resolved,
    current: &DeadLetterQueueStatus,
) -> Result<ApplyReport, ReconcileError> {
    let (dlq, secret, p) = (
        &resolved.dead_letter_queue,
        &resolved.secret,
        &resolved.prepared,
    );
    let broker = ctx.shared.brokers.get(ns, secret, &p.connection)?;
    if let Some(conflict) = name_conflict(ctx, dlq, current, broker.as_ref()).await {
        return Err(conflict);
    }
    let secret_key = format!(
        "{ns}/{}@{}",
        secret.metadata.name.as_deref().unwrap_or_default(),
        secret
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    );
    ctx.backlog.watch(
        obj,
        &p.topology,
        &p.monitoring,
        broker.clone(),
        secret_key,
        dlq.spec.clone(),
    );
    let applied = reconcile::apply(broker.as_ref(), p).await;
    let key = object_key(&obj.metadata);
    match &applied {
        // Another owner's record on the broker: its queues are not this resource's to
        // report on, nor its inbox to consume.
        Err(ReconcileError::NameConflict { .. }) => {
            ctx.backlog.remove(&key);
            ctx.sync_router(&key, None);
        }
        // The inbox is in place (or being completed: a router started early waits and
        // retries until it is); a resource that left router mode stops its router.
        _ => ctx.sync_router(&key, crate::router::Target::of(p, &dlq.spec.router)),
    }
    applied
}

/// The status after `applied` ([`status_after`], and its `AlertRulesReady` condition),
/// written when the reconcile's part of it changed (the backlog fields belong to the
/// monitor). Returns it.
///
/// # Errors
/// The status write's Kubernetes API error.
async fn write_status(
    ctx: &DeadLetterQueueContext,
    obj: &DynamicObject,
    current: &DeadLetterQueueStatus,
    applied: &Applied,
) -> Result<DeadLetterQueueStatus, Error> {
    let now = ctx.shared.now();
    let generation = obj.metadata.generation;
    let (mut status, _) = status_after(
        current,
        generation,
        &applied.result,
        applied.prepared.as_ref(),
        &now,
    );
    match &applied.alert_rules {
        Some(Some(desired)) => {
            conditions::set(&mut status.conditions, desired, generation, &now);
        }
        Some(None) => status.conditions.retain(|c| c.type_ != ALERT_RULES_READY),
        None => {}
    }
    if status.reconcile_part() != current.reconcile_part() {
        let ar = api_resource::<DeadLetterQueue>();
        crate::controller::apply_status(&ctx.shared, &ar, obj, &status.reconcile_part()).await?;
    }
    Ok(status)
}

/// After an apply: the resync (sooner, [`ALERT_RULES_RECHECK`], while the PrometheusRule
/// is not in place, e.g. the Prometheus Operator is installed later) with the error
/// backoff reset, or the error, retried with backoff.
///
/// # Errors
/// The apply's [`ReconcileError`].
fn next_reconcile(
    ctx: &DeadLetterQueueContext,
    obj: &DynamicObject,
    applied: Applied,
) -> Result<Action, Error> {
    match applied.result {
        Ok(_) => {
            ctx.backoff.reset(&object_key(&obj.metadata));
            let rules_pending = matches!(
                &applied.alert_rules,
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
/// a name `dlq` (with status `mine`) claims ([`crate::controller::ownership`]).
/// Reads other Secrets and the brokers' cluster names only when names overlap.
async fn name_conflict(
    ctx: &DeadLetterQueueContext,
    dlq: &DeadLetterQueue,
    mine: &DeadLetterQueueStatus,
    broker: &dyn crate::broker::BrokerClient,
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
