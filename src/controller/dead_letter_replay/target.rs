//! Whether a replay can start: its DeadLetterQueue read and planned
//! ([`resolve::object_in_cluster`], as the DeadLetterQueue controller does), the broker answering, and every
//! queue the run reads or writes declared ([`target`]); else why not ([`Waiting`]).

use kube::api::{Api, DynamicObject};

use crate::controller::context::Context;
use crate::controller::{resolve_verdict, Error};
use crate::crd::{DeadLetterQueue, DeadLetterReplaySpec, ReplayTarget};
use crate::object::api_resource;
use crate::reconcile::{PlanError, Prepared, ReconcileError};
use crate::resolve;

use super::status::pending_reason;

/// Why a replay cannot start yet.
pub(super) struct Waiting {
    pub(super) reason: &'static str,
    pub(super) message: String,
    /// A broker error: retried with the per-object backoff instead of
    /// [`PENDING_RECHECK`](super::PENDING_RECHECK).
    pub(super) error: Option<ReconcileError>,
}

impl Waiting {
    fn on(reason: &'static str, message: String) -> Self {
        Waiting {
            reason,
            message,
            error: None,
        }
    }
}

/// Reads and plans the DeadLetterQueue of `spec` in `ns` ([`resolve::object_in_cluster`],
/// as the DeadLetterQueue controller does), and checks that the broker answers
/// and every dead-letter queue exists. `Ok(Err(_))`: why it cannot start yet.
pub(super) async fn target(
    ctx: &Context,
    ns: &str,
    spec: &DeadLetterReplaySpec,
) -> Result<Result<Prepared, Waiting>, Error> {
    let name = &spec.dead_letter_queue_ref.name;
    let dlq_key = format!("{ns}/{name}");
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &api_resource::<DeadLetterQueue>());
    let Some(obj) = api.get_opt(name).await? else {
        return Ok(Err(Waiting::on(
            "DeadLetterQueueNotFound",
            format!("spec.deadLetterQueueRef.name: DeadLetterQueue {dlq_key} not found"),
        )));
    };
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Err(Waiting::on(
            "DeadLetterQueueDeleting",
            format!("spec.deadLetterQueueRef.name: DeadLetterQueue {dlq_key} is being deleted"),
        )));
    }
    let waiting = |e: ReconcileError| Waiting {
        reason: pending_reason(&e),
        message: format!("DeadLetterQueue {dlq_key}: {e}"),
        // A broker error, the Secret's included (as before the errors were nested).
        error: matches!(
            e,
            ReconcileError::Broker(_) | ReconcileError::Plan(PlanError::Secret(_))
        )
        .then_some(e),
    };
    let prepared = match resolve::object_in_cluster(ctx.client.clone(), ns, &obj).await {
        Ok(resolved) => resolved.prepared,
        Err(e) => return Ok(Err(waiting(resolve_verdict(e)?))),
    };
    // The dead-letter queues are read; with the default target, the copies go to the
    // source queue by name (an absent one would make every copy unroutable: failed).
    let source = prepared.topology.routes.source_queue.as_str();
    let needed = prepared
        .topology
        .dead_letter_queues()
        .map(|q| (q, "dead-letter queue"))
        .chain((spec.target == ReplayTarget::OriginalQueue).then_some((source, "source queue")));
    let broker = match ctx.brokers.connect(&prepared.connection) {
        Ok(b) => b,
        Err(e) => return Ok(Err(waiting(ReconcileError::Broker(e)))),
    };
    for (queue, role) in needed {
        let found = broker
            .passive_queue_counts(&prepared.topology.vhost, queue)
            .await;
        match found {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Ok(Err(Waiting::on(
                    "DeadLetterQueueNotReady",
                    format!(
                        "DeadLetterQueue {dlq_key}: {role} {queue:?} does not exist on the broker yet (vhost {:?})",
                        prepared.topology.vhost
                    ),
                )))
            }
            Err(e) => return Ok(Err(waiting(ReconcileError::Broker(e)))),
        }
    }
    Ok(Ok(prepared))
}
