//! Deleting a DeadLetterQueue (the finalizer's cleanup), by `spec.deletionPolicy`
//! ([`cleanup`]): only what the resource recorded as created ([`recorded_part`]), never
//! a queue that still holds messages, never names another resource on the same broker
//! created.

use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::ResourceExt;

use crate::broker::RemovalReport;
use crate::controller::context::DeadLetterQueueContext;
use crate::controller::ownership;
use crate::controller::Error;
use crate::crd::{
    DeadLetterQueue, DeadLetterQueueStatus, DeletionPolicy, InvalidSpec, RetryPolicy,
    RetryPolicySpec, TopologyStatus,
};
use crate::manifest::object_key;
use crate::object::{api_resource, decode, status_of};
use crate::reconcile::{self, ReconcileError};
use crate::status::conditions::{self, ConditionStatus, Desired, READY, TOPOLOGY_READY};
use crate::status::{publish, Note};
use crate::topology::DesiredTopology;

use super::{others, read_references};

/// The finalizer's cleanup, by `spec.deletionPolicy`: `Retain` releases at once; so does
/// a resource that never created anything. `Delete` needs a valid spec and its Secret
/// (else the finalizer is released with a Warning, nothing deleted), then removes what
/// the resource recorded as created ([`Deletion::delete`]). Its backlog stays watched
/// until the finalizer is released (a blocked deletion still holds dead letters); the
/// monitor drops it once the object is gone from the watch.
pub(super) async fn cleanup(
    obj: &DynamicObject,
    ctx: &DeadLetterQueueContext,
) -> Result<Action, Error> {
    let d = Deletion::new(ctx, obj)?;
    // A resource being deleted no longer routes: its inbox keeps what arrives (nothing
    // is lost; with Retain the source still dead-letters there).
    ctx.sync_router(&object_key(&obj.metadata), None);
    let dlq = match decode::<DeadLetterQueue>(obj) {
        Ok(dlq) => dlq,
        Err(invalid) => return d.skipped(format!("spec does not decode ({invalid})")).await,
    };
    if dlq.spec.deletion_policy == DeletionPolicy::Retain {
        let note = "deletionPolicy Retain: broker objects kept".into();
        return d.release(Note::normal("Retained", "Delete", note)).await;
    }
    let Some(recorded) = d.current.topology.clone() else {
        // Never applied: nothing on the broker is ours, no need to reach it.
        let note = "nothing to delete: no broker object was ever created".into();
        return d
            .release(Note::normal("TopologyDeleted", "Delete", note))
            .await;
    };
    if let Err(invalid) = dlq.spec.validate() {
        return d.skipped(format!("invalid spec ({invalid})")).await;
    }
    let (policy, secret) = read_references(&ctx.shared, &d.ns, &dlq).await?;
    let Some(secret) = secret else {
        let note = format!(
            "Secret {} not found: finalizer released, broker objects not deleted{}",
            dlq.spec.broker.secret_ref.name, d.left_note
        );
        return d
            .release(Note::warning("SecretNotFound", "Delete", note))
            .await;
    };
    d.delete(&dlq, &recorded, policy, &secret).await
}

/// A deletion under way: the DeadLetterQueue, its status, and the queues it leaves (for
/// the notes of a deletion that deletes nothing).
struct Deletion<'a> {
    ctx: &'a DeadLetterQueueContext,
    obj: &'a DynamicObject,
    ns: String,
    current: DeadLetterQueueStatus,
    /// ` (queues: …)` naming the queues of `status.topology`, or empty.
    left_note: String,
}

impl<'a> Deletion<'a> {
    /// # Errors
    /// [`Error::NoNamespace`].
    fn new(ctx: &'a DeadLetterQueueContext, obj: &'a DynamicObject) -> Result<Self, Error> {
        let ns = obj.namespace().ok_or(Error::NoNamespace)?;
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
        Ok(Deletion {
            ctx,
            obj,
            ns,
            current,
            left_note,
        })
    }

    /// Removes from the broker what `dlq` recorded as created (`recorded`), planned with
    /// its RetryPolicy (`policy`; the default policy's tiers when it is missing or
    /// invalid, the broker adapter also finding every other tier queue of the source by
    /// its signature) on the broker of `secret`. Blocked (finalizer kept) when the spec no
    /// longer plans what it created ([`recorded_part`]) or a queue still holds messages;
    /// skipped (finalizer released) when another resource on the same broker created
    /// some of these names.
    ///
    /// # Errors
    /// [`Error::DeletionBlocked`], the plan's or the broker's [`ReconcileError`], Kubernetes
    /// API errors.
    async fn delete(
        &self,
        dlq: &DeadLetterQueue,
        recorded: &TopologyStatus,
        policy: Option<Result<RetryPolicy, InvalidSpec>>,
        secret: &Secret,
    ) -> Result<Action, Error> {
        let policy = match policy {
            Some(Ok(p)) => p,
            Some(Err(_)) | None => {
                RetryPolicy::new(&dlq.spec.retry_policy_ref.name, RetryPolicySpec::default())
            }
        };
        let prepared = match reconcile::prepare(dlq, Some(&policy), Some(secret)) {
            Ok(p) => p,
            Err(e) => return self.cannot_delete(e).await,
        };
        let topology = match recorded_part(&prepared.topology, recorded) {
            Ok(t) => t,
            Err(message) => {
                let err = Error::DeletionBlocked(message.clone());
                return self.stopped("DeletionBlocked", message, err).await;
            }
        };
        let broker = self
            .ctx
            .shared
            .brokers
            .get(&self.ns, secret, &prepared.connection)
            .map_err(ReconcileError::from)?;
        // Another resource on the same broker has created some of these names (possible
        // across namespaces and Secrets): deleting them would take its topology away.
        let mut shared = Vec::new();
        for other in ownership::recorded_by_others(dlq, &others(self.ctx)) {
            if ownership::same_broker(&self.ctx.shared, dlq, broker.as_ref(), &other).await {
                shared.push(object_key(&other.metadata));
            }
        }
        if !shared.is_empty() {
            let why = format!(
                "names also in use by DeadLetterQueue {} on the same broker",
                shared.join(", ")
            );
            return self.skipped(why).await;
        }
        match broker.remove(&topology).await {
            Ok(report) => self.removed(&report).await,
            Err(e) => self.cannot_delete(ReconcileError::from(e)).await,
        }
    }

    /// After a removal: released with `TopologyDeleted` when it is complete, else blocked
    /// by the queues that still hold messages.
    async fn removed(&self, report: &RemovalReport) -> Result<Action, Error> {
        if report.is_complete() {
            let removed: Vec<String> = report.actions.iter().map(|a| a.to_string()).collect();
            let note = if removed.is_empty() {
                "nothing left on the broker".to_string()
            } else {
                removed.join("; ")
            };
            return self
                .release(Note::normal("TopologyDeleted", "Delete", note))
                .await;
        }
        let message = format!(
            "deletionPolicy Delete: not deleting, {}; the finalizer is kept until they are drained (or set deletionPolicy: Retain)",
            report.blocked.join("; ")
        );
        let err = Error::DeletionBlocked(message.clone());
        self.stopped("DeletionBlocked", message, err).await
    }

    /// Records `note` and releases the object (the finalizer's cleanup is done).
    async fn release(&self, note: Note) -> Result<Action, Error> {
        let ar = api_resource::<DeadLetterQueue>();
        crate::controller::release_with(&self.ctx.recorder, self.obj, &ar, note).await
    }

    /// Releases the object without deleting anything, with a `CleanupSkipped` Warning
    /// saying `why`.
    async fn skipped(&self, why: String) -> Result<Action, Error> {
        let note = format!(
            "{why}: finalizer released, broker objects not deleted{}",
            self.left_note
        );
        self.release(Note::warning("CleanupSkipped", "Delete", note))
            .await
    }

    /// [`Deletion::stopped`] by `e` (the plan or the broker failed).
    async fn cannot_delete(&self, e: ReconcileError) -> Result<Action, Error> {
        let (reason, message) = (e.reason(), format!("cannot delete broker objects: {e}"));
        self.stopped(reason, message, e.into()).await
    }

    /// Deletion cannot go on: `Ready` and `TopologyReady` become `False` with
    /// `reason`/`message` (status written, and a Warning Event recorded, only when that
    /// changes them); returns `err`, which keeps the finalizer and retries with backoff.
    async fn stopped(
        &self,
        reason: &'static str,
        message: String,
        err: Error,
    ) -> Result<Action, Error> {
        let mut status = self.current.clone();
        let now = self.ctx.shared.now();
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
                self.obj.metadata.generation,
                &now,
            );
        }
        if status != self.current {
            let ar = api_resource::<DeadLetterQueue>();
            let shared = &self.ctx.shared;
            crate::controller::apply_status(shared, &ar, self.obj, &status.reconcile_part())
                .await?;
            let note = Note::warning(reason, "Delete", message);
            publish(&self.ctx.recorder, self.obj, &ar, note).await;
        }
        Err(err)
    }
}

/// The part of the `planned` topology a resource recorded as created (`recorded`, its
/// `status.topology`): the source queue, and the queues, exchanges and policies it
/// recorded. Only that: a spec edited after the objects were made (another source queue,
/// other dead-letter names) must neither redirect the deletion to someone else's objects
/// nor delete half and forget the rest. Pure.
///
/// # Errors
/// The `DeletionBlocked` message when the spec no longer plans the recorded source
/// queue, or a recorded queue (other than a retry tier, `<retry exchange>.…`) or
/// exchange.
pub fn recorded_part(
    planned: &DesiredTopology,
    recorded: &TopologyStatus,
) -> Result<DesiredTopology, String> {
    let mut topology = planned.clone();
    let source = topology.routes.source_queue.clone();
    let tier_prefix = format!("{}.", topology.routes.retry_exchange);
    let names: Vec<&str> = topology
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
        .filter(|n| !names.contains(&n.as_str()))
        .collect();
    if !recorded.queues.contains(&source) || !unplanned.is_empty() {
        return Err(format!(
            "deletionPolicy Delete: the spec no longer plans what this resource created (status.topology: queues {:?}, exchanges {:?}; now planned: {names:?}); revert spec.source.queue / spec.deadLetter, or set deletionPolicy: Retain",
            recorded.queues, recorded.exchanges
        ));
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
    Ok(topology)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan of a DeadLetterQueue on the source queue `source` (default policy).
    fn planned(source: &str) -> DesiredTopology {
        let dlq: DeadLetterQueue = serde_json::from_value(serde_json::json!({
            "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"broker": {"secretRef": {"name": "rabbit"}},
                     "source": {"queue": source, "queueType": "Classic"},
                     "retryPolicyRef": {"name": "p"}}}))
        .expect("dlq");
        let policy = RetryPolicy::new("p", RetryPolicySpec::default());
        let data = [
            ("uri", "amqp://guest:guest@127.0.0.1:5672/%2f"),
            ("managementUri", "http://127.0.0.1:15672"),
        ]
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                k8s_openapi::ByteString(v.as_bytes().to_vec()),
            )
        })
        .collect();
        let secret = Secret {
            data: Some(data),
            ..Default::default()
        };
        reconcile::prepare(&dlq, Some(&policy), Some(&secret))
            .expect("plan")
            .topology
    }

    #[test]
    fn a_deletion_touches_only_what_was_recorded_and_stops_when_the_spec_moved() {
        let plan = planned("orders");
        let recorded = plan.status();
        assert_eq!(recorded_part(&plan, &recorded).expect("same plan"), plan);
        // Recorded without its policies (e.g. never applied): they are not deleted.
        let no_policies = TopologyStatus {
            policies: Vec::new(),
            ..recorded.clone()
        };
        let part = recorded_part(&plan, &no_policies).expect("subset");
        assert!(part.policies.is_empty());
        assert_eq!(part.queues, plan.queues);
        // A retry tier the plan no longer has does not block.
        let mut with_old_tier = recorded.clone();
        with_old_tier
            .queues
            .push(format!("{}.99s", plan.routes.retry_exchange));
        assert!(recorded_part(&plan, &with_old_tier).is_ok());
        // The source queue moved: blocked, naming what was created.
        let moved = recorded_part(&planned("payments"), &recorded).expect_err("moved");
        assert!(
            moved.contains("the spec no longer plans what this resource created"),
            "{moved}"
        );
        assert!(moved.contains("\"orders\""), "{moved}");
    }
}
