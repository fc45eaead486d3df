//! The DeadLetterReplay controller: runs each replay once, in a background task, with the
//! replay engine of `dlq replay` ([`crate::dlq::replay::replay`]).
//!
//! The reconcile is short: it reads the replay and its DeadLetterQueue (the DeadLetterQueue
//! controller's own read + [`crate::reconcile::prepare`]), checks that the broker answers and
//! the dead-letter queues exist, then starts the run as a tokio task tracked in the
//! context ([`Replays`](crate::controller::context::Replays), by object UID), so that a
//! second reconcile does not start it twice. Status is written by server-side apply
//! (field manager `dlq-operator`); a run's writes carry the `resourceVersion` it last
//! wrote, so they never land on a re-created object of the same name.
//!
//! - **Finished** (`Succeeded`, `Partial`, `Failed`): nothing; a replay runs once.
//! - **Invalid spec** (validation, or a field that does not decode): `Failed`,
//!   `Complete=True, reason=InvalidSpec` naming the field, a Warning Event.
//! - **Not startable yet**: the DeadLetterQueue is missing, being deleted or invalid, its
//!   RetryPolicy or Secret is missing, the broker does not answer, a dead-letter queue (or,
//!   for the default target, the source queue) is not declared yet: `Pending`,
//!   `Complete=False` with the reason (`DeadLetterQueueNotFound`,
//!   `DeadLetterQueueDeleting`, `DeadLetterQueueInvalid`, `RetryPolicyNotFound`,
//!   `RetryPolicyInvalid`, `SecretNotFound`, `DeadLetterQueueNotReady`,
//!   `BrokerUnreachable`, …) and a Warning Event when it changes; looked at again after [`PENDING_RECHECK`] (broker errors: the
//!   controller's per-object backoff).
//! - **Run** (a background task): `Running` with `startTime` (kept from an earlier run) and
//!   `replayId` (the object's UID, stamped as `dlq-replay-id` on every copy). The engine
//!   calls [`Observer::checkpoint`](crate::dlq::replay::Observer::checkpoint) before publishing each batch of copies (every earlier
//!   copy settled): the task writes the counts then, with `inDoubt` raised by the batch,
//!   so a crash leaves at most that batch unaccounted for, and recorded. At the end:
//!   the phase from the outcome ([`final_phase`]), `completionTime`, `inDoubt` back to
//!   what earlier runs left, `reasons`, `Complete=True` with the phase as reason, a Normal
//!   or Warning Event and the metrics (`dlq_replayed_messages_total`).
//! - **Broker error during the run**: retried [`RUN_ATTEMPTS`] times in all, 5 s, 10 s,
//!   20 s apart, each attempt resuming where the last stopped; then `Partial` with the
//!   error in the condition's message.
//! - **Operator restart**: a `Running` replay without a task in this process is resumed
//!   ([`plan_run`]): same replay id, counts continued from status ([`set_counts`]),
//!   `limit` lowered by what earlier runs replayed or left in doubt.
//! - **Graceful shutdown** (SIGTERM, lost Lease): the stop flag is set, the engine settles
//!   the copies in flight and gives the rest back, and the exact counts are written with
//!   phase still `Running` (condition reason `Interrupted`), within `SHUTDOWN_GRACE`; the
//!   next leader resumes it.
//! - **Deleted while running**: no finalizer. The next status write is refused (404, or
//!   409 and another UID for a re-created object of the same name); the
//!   checkpoint then fails, the engine stops after settling its copies (nothing is lost:
//!   the rest stays in the dead-letter queue) and the task ends quietly.

mod job;
pub mod plan;
pub mod status;
mod target;

pub use plan::{
    in_doubt_after_error, options_for, plan_run, remaining_limit, Base, RunPlan, Tally,
};
pub use status::{
    broker_error_status, final_phase, finished_status, interrupted_status, invalid_status,
    pending_reason, pending_status, phase_name, reasons, rfc3339, running_status, set_counts,
    spec_changed_status, spec_changed_while_running, summary,
};

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use tracing::{info, Instrument};

use crate::controller::conditions::COMPLETE;
use crate::controller::context::DeadLetterReplayContext;
use crate::controller::object::{api_resource, decode, status_of};
use crate::controller::{publish, Error, Note};
use crate::crd::{DeadLetterReplay, DeadLetterReplayStatus, ReplayPhase};
use crate::manifest::object_key;

use job::Job;
use status::end;
use target::target;

/// Kind label of this controller's metrics.
pub const KIND: &str = "DeadLetterReplay";

/// How soon a `Pending` replay whose DeadLetterQueue, RetryPolicy or Secret is missing
/// (or whose dead-letter queues are not declared yet) is looked at again.
pub const PENDING_RECHECK: Duration = Duration::from_secs(10);

/// How often a running replay is reconciled: a replay whose task ended without
/// finishing (its status could not be written) is resumed then.
pub const RUNNING_RECHECK: Duration = Duration::from_secs(30);

/// Attempts of one run when the broker fails during it (the first and 3 retries), each
/// resuming where the last stopped; 5 s, 10 s and 20 s apart.
pub const RUN_ATTEMPTS: u32 = 4;

/// Pause before retry `n` (1 for the first) after a broker error: 5 s · 2^(n−1).
pub fn retry_delay(n: u32) -> Duration {
    Duration::from_secs(5u64.saturating_mul(1u64 << n.saturating_sub(1).min(16)))
}

/// Reconciles one DeadLetterReplay (module doc). Records the reconcile metrics.
///
/// # Errors
/// Kubernetes API errors, and broker errors before the start (after writing them to
/// status as `Pending`); retried with per-object backoff.
pub async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<DeadLetterReplayContext>,
) -> Result<Action, Error> {
    let inner = reconcile_inner(obj.clone(), ctx.clone());
    crate::controller::instrumented(KIND, &obj, &ctx.shared, inner).await
}

/// Ends a reconcile for a replay that will not run (again): writes `status`, records
/// `note` as an Event, and waits for a change.
///
/// # Errors
/// The status write's Kubernetes API error.
async fn conclude(
    ctx: &DeadLetterReplayContext,
    ar: &ApiResource,
    obj: &DynamicObject,
    status: &DeadLetterReplayStatus,
    note: Note,
) -> Result<Action, Error> {
    crate::controller::apply_status(&ctx.shared, ar, obj, status).await?;
    publish(&ctx.recorder, obj, ar, note).await;
    Ok(Action::await_change())
}

async fn reconcile_inner(
    obj: Arc<DynamicObject>,
    ctx: Arc<DeadLetterReplayContext>,
) -> Result<Action, Error> {
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let current: DeadLetterReplayStatus = status_of(&obj);
    if current.phase.is_finished() {
        return Ok(Action::await_change());
    }
    let uid = obj.metadata.uid.clone().ok_or(Error::NoUid)?;
    if ctx.replays.is_over(&uid) {
        // Finished by this process; the cached copy may not show it yet.
        return Ok(Action::await_change());
    }
    if ctx.replays.is_running(&uid) {
        return Ok(Action::requeue(RUNNING_RECHECK));
    }
    let ar = api_resource::<DeadLetterReplay>();
    let generation = obj.metadata.generation;
    let key = object_key(&obj.metadata);
    if spec_changed_while_running(&current, generation) {
        let status = spec_changed_status(&current, generation, &ctx.shared.now());
        let note = format!(
            "DeadLetterReplay {key}: the spec changed while it ran; not resumed ({} replayed)",
            current.replayed
        );
        let note = Note::warning("SpecChanged", "Resume", note);
        return conclude(&ctx, &ar, &obj, &status, note).await;
    }
    let checked = decode::<DeadLetterReplay>(&obj).and_then(|r| {
        r.spec.validate()?;
        let plan = plan_run(&current, &r.spec);
        let options = options_for(&r.spec, &uid, plan.limit)?;
        Ok((r.spec, plan, options))
    });
    let (spec, plan, options) = match checked {
        Ok(checked) => checked,
        Err(invalid) => {
            let status = invalid_status(&current, generation, &invalid, &ctx.shared.now());
            let note = format!("DeadLetterReplay {key}: invalid spec: {invalid}");
            let note = Note::warning("InvalidSpec", "Validate", note);
            return conclude(&ctx, &ar, &obj, &status, note).await;
        }
    };
    let prepared = match target(&ctx.shared, &ns, &spec).await? {
        Ok(p) => p,
        Err(waiting) => {
            let now = ctx.shared.now();
            let (status, changed) =
                pending_status(&current, generation, waiting.reason, &waiting.message, &now);
            if changed {
                crate::controller::apply_status(&ctx.shared, &ar, &obj, &status).await?;
                let old = current.conditions.iter().find(|c| c.type_ == COMPLETE);
                if old.is_none_or(|c| c.reason != waiting.reason || c.message != waiting.message) {
                    let note = Note::warning(waiting.reason, "Start", waiting.message.clone());
                    publish(&ctx.recorder, &obj, &ar, note).await;
                }
            }
            return match waiting.error {
                Some(e) => Err(e.into()),
                None => Ok(Action::requeue(PENDING_RECHECK)),
            };
        }
    };
    ctx.backoff.reset(&key);
    if plan.limit == Some(0) {
        // A resumed replay whose earlier runs reached the limit: done, nothing to send.
        let now = ctx.shared.now();
        let mut status = current.clone();
        let message = format!(
            "limit of {} reached: {}",
            spec.limit.unwrap_or_default(),
            summary(&status, spec.dry_run)
        );
        end(
            &mut status,
            ReplayPhase::Succeeded,
            "Succeeded",
            message.clone(),
            generation,
            &now,
        );
        let note = Note::normal("Succeeded", "Replay", message);
        return conclude(&ctx, &ar, &obj, &status, note).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let job = Job {
        ctx: ctx.clone(),
        obj: obj.clone(),
        dlq: (ns.clone(), spec.dead_letter_queue_ref.name.clone()),
        spec,
        prepared,
        options,
        plan,
        status: current,
        stop: stop.clone(),
        resource_version: std::sync::Mutex::new(
            obj.metadata.resource_version.clone().unwrap_or_default(),
        ),
    };
    let span = tracing::info_span!("replay", namespace = %ns, name = %obj.name_any(), uid = %uid);
    if ctx.replays.start(&uid, stop, job.run().instrument(span)) {
        info!(replay = %key, "replay started");
    }
    Ok(Action::requeue(RUNNING_RECHECK))
}

/// Fixtures of the replay controller's unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::collections::BTreeMap;

    use crate::crd::DeadLetterReplaySpec;
    use crate::dlq::replay::{Outcome, ReplayReport};

    /// A spec from its JSON.
    pub fn spec(json: serde_json::Value) -> DeadLetterReplaySpec {
        serde_json::from_value(json).expect("spec")
    }

    /// An engine report with these counts (`skipped`/`failed`: reason and count).
    pub fn report(
        scanned: u64,
        matched: u64,
        replayed: u64,
        skipped: &[(&str, u64)],
        failed: &[(&str, u64)],
        outcome: Outcome,
    ) -> ReplayReport {
        let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        ReplayReport {
            resource: "shop/orders".into(),
            replay_id: "uid-1".into(),
            dry_run: false,
            outcome,
            total: scanned,
            scanned,
            matched,
            replayed,
            skipped: map(skipped),
            failed: map(failed),
        }
    }
}
