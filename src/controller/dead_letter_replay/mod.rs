//! The DeadLetterReplay controller: runs each replay once, in a background task, with the
//! replay engine of `dlq replay` ([`crate::dlq::replay::replay_with`], run by [`job`]).
//!
//! The reconcile is short: it reads the replay and its DeadLetterQueue (resolved as the
//! DeadLetterQueue controller resolves it: [`crate::resolve::object_in_cluster`]), checks that the broker answers and
//! the dead-letter queues exist, then starts the run as a tokio task tracked in its
//! controller's context ([`Replays`](crate::controller::context::Replays), by object UID), so that a
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
//!   `BrokerUnreachable`, …) and a Warning Event when it changes; looked at again after
//!   [`PENDING_RECHECK`] (broker errors: the controller's per-object backoff).
//! - **Run** (a background task): `Running` with `startTime` (kept from an earlier run) and
//!   `replayId` (the object's UID, stamped as `dlq-replay-id` on every copy). The engine
//!   calls [`Observer::checkpoint`](crate::dlq::replay::Observer::checkpoint) before
//!   publishing each batch of copies (every earlier copy settled): the task writes the
//!   counts then, with `inDoubt` raised by the batch,
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
//! - **Graceful shutdown** (SIGTERM, lost Lease): the run's stop token is cancelled
//!   ([`Replays::shutdown`](crate::controller::context::Replays::shutdown)), the engine
//!   settles the copies in flight and gives the rest back, and the exact counts are
//!   written with phase still `Running` (condition reason `Interrupted`), within
//!   [`SHUTDOWN_GRACE`](crate::controller::SHUTDOWN_GRACE); the next leader resumes it.
//! - **Deleted while running**: no finalizer. The next status write is refused (404, or
//!   409 and another UID for a re-created object of the same name); the
//!   checkpoint then fails, the engine stops after settling its copies (nothing is lost:
//!   the rest stays in the dead-letter queue) and the task ends quietly.
//!
//! By stage: [`plan`] (how a run starts, pure), [`status`] (the statuses, pure), `target`
//! (what a replay reads, and whether it can start), `job` (the run task), and here the
//! reconcile.

#[cfg(test)]
mod fast_tests;
mod job;
pub mod plan;
pub mod status;
mod target;

pub use plan::{
    in_doubt_after_error, options_for, plan_run, remaining_limit, Base, RunPlan, Tally,
};
pub use status::{
    broker_error_status, final_phase, finished_status, interrupted_status, invalid_status,
    limit_reached_status, pending_reason, pending_status, phase_name, reasons, rfc3339,
    running_status, set_counts, spec_changed_status, spec_changed_while_running, summary,
};

use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::ResourceExt;
use tracing::{info, Instrument};

use crate::controller::context::DeadLetterReplayContext;
use crate::controller::Error;
use crate::crd::{DeadLetterReplay, DeadLetterReplaySpec, DeadLetterReplayStatus, InvalidSpec};
use crate::dlq::replay::ReplayOptions;
use crate::manifest::object_key;
use crate::object::{api_resource, decode, status_of};
use crate::reconcile::Prepared;
use crate::status::conditions::COMPLETE;
use crate::status::{publish, Note};

use job::{complete_message, Job};
use target::{target, Waiting};

/// Kind label of this controller's metrics.
pub const KIND: &str = "DeadLetterReplay";

/// How soon a `Pending` replay whose DeadLetterQueue, RetryPolicy or Secret is missing
/// (or whose dead-letter queues are not declared yet) is looked at again.
pub const PENDING_RECHECK: Duration = Duration::from_secs(10);

/// How often a running replay is reconciled: a replay whose task ended without
/// finishing (its status could not be written) is resumed then.
pub const RUNNING_RECHECK: Duration = Duration::from_secs(30);

/// Attempts of a run in all after broker errors: the engine's own
/// ([`RESUME_ATTEMPTS`](crate::dlq::replay::RESUME_ATTEMPTS)).
pub const RUN_ATTEMPTS: u32 = crate::dlq::replay::RESUME_ATTEMPTS;

/// Pause before retry `n` (1 for the first) after a broker error: the engine's
/// [`resume_delay`](crate::dlq::replay::resume_delay), 5 s · 2^(n−1).
pub fn retry_delay(n: u32) -> Duration {
    crate::dlq::replay::resume_delay(n)
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

/// The reconcile (module doc), stage by stage: skip what is finished or handled by this
/// process ([`in_process`]), end a replay whose spec changed while it ran, check the spec
/// ([`check`]), read what it replays ([`target()`]; else `Pending`, [`wait`]), end one
/// whose limit is reached, or start the run ([`start`]).
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
    if let Some(action) = in_process(&ctx, &uid) {
        return Ok(action);
    }
    let now = ctx.shared.now();
    if spec_changed_while_running(&current, obj.metadata.generation) {
        let status = spec_changed_status(&current, obj.metadata.generation, &now);
        let note = format!(
            "DeadLetterReplay {}: the spec changed while it ran; not resumed ({} replayed)",
            object_key(&obj.metadata),
            current.replayed
        );
        let note = Note::warning("SpecChanged", "Resume", note);
        return conclude(&ctx, &obj, &status, note).await;
    }
    let checked = match check(&obj, &current, &uid) {
        Ok(checked) => checked,
        Err(invalid) => {
            let status = invalid_status(&current, obj.metadata.generation, &invalid, &now);
            let note = format!(
                "DeadLetterReplay {}: invalid spec: {invalid}",
                object_key(&obj.metadata)
            );
            let note = Note::warning("InvalidSpec", "Validate", note);
            return conclude(&ctx, &obj, &status, note).await;
        }
    };
    let prepared = match target(&ctx.shared, &ns, &checked.spec).await? {
        Ok(p) => p,
        Err(waiting) => return wait(&ctx, &obj, &current, waiting).await,
    };
    ctx.backoff.reset(&object_key(&obj.metadata));
    if checked.plan.limit == Some(0) {
        // A resumed replay whose earlier runs reached the limit: done, nothing to send.
        let spec = &checked.spec;
        let status =
            limit_reached_status(&current, obj.metadata.generation, spec, &ctx.shared.now());
        let note = Note::normal("Succeeded", "Replay", complete_message(&status));
        return conclude(&ctx, &obj, &status, note).await;
    }
    start(&ctx, &obj, &ns, &uid, checked, prepared, current);
    Ok(Action::requeue(RUNNING_RECHECK))
}

/// What to do with the replay `uid` when this process already handles it: wait for a
/// change when a task of this process ended it (the cached copy may not show it yet),
/// look again after [`RUNNING_RECHECK`] while its task runs; `None` otherwise.
fn in_process(ctx: &DeadLetterReplayContext, uid: &str) -> Option<Action> {
    if ctx.replays.is_over(uid) {
        return Some(Action::await_change());
    }
    ctx.replays
        .is_running(uid)
        .then(|| Action::requeue(RUNNING_RECHECK))
}

/// A replay's checked spec, with the plan of its run and the engine's options.
struct Checked {
    spec: DeadLetterReplaySpec,
    plan: RunPlan,
    options: ReplayOptions,
}

/// Decodes and validates the replay `obj` (UID `uid`, status `current`) and plans its run
/// ([`plan_run`], [`options_for`]). Pure.
///
/// # Errors
/// [`InvalidSpec`] naming the fields that do not decode or are invalid.
fn check(
    obj: &DynamicObject,
    current: &DeadLetterReplayStatus,
    uid: &str,
) -> Result<Checked, InvalidSpec> {
    let replay = decode::<DeadLetterReplay>(obj)?;
    replay.spec.validate()?;
    let plan = plan_run(current, &replay.spec);
    let options = options_for(&replay.spec, uid, plan.limit)?;
    Ok(Checked {
        spec: replay.spec,
        plan,
        options,
    })
}

/// Ends a reconcile for a replay that will not run (again): writes `status`, records
/// `note` as an Event, and waits for a change.
///
/// # Errors
/// The status write's Kubernetes API error.
async fn conclude(
    ctx: &DeadLetterReplayContext,
    obj: &DynamicObject,
    status: &DeadLetterReplayStatus,
    note: Note,
) -> Result<Action, Error> {
    let ar = api_resource::<DeadLetterReplay>();
    crate::controller::apply_status(&ctx.shared, &ar, obj, status).await?;
    publish(&ctx.recorder, obj, &ar, note).await;
    Ok(Action::await_change())
}

/// A replay that cannot start yet (`waiting`): `Pending` with the reason, written (with a
/// Warning Event when the reason or message changed) only when the status changes;
/// looked at again after [`PENDING_RECHECK`], or with the per-object backoff after a
/// broker error.
///
/// # Errors
/// The status write's Kubernetes API error, or the broker error that keeps it waiting.
async fn wait(
    ctx: &DeadLetterReplayContext,
    obj: &DynamicObject,
    current: &DeadLetterReplayStatus,
    waiting: Waiting,
) -> Result<Action, Error> {
    let now = ctx.shared.now();
    let generation = obj.metadata.generation;
    let (status, changed) =
        pending_status(current, generation, waiting.reason, &waiting.message, &now);
    if changed {
        let ar = api_resource::<DeadLetterReplay>();
        crate::controller::apply_status(&ctx.shared, &ar, obj, &status).await?;
        let old = current.conditions.iter().find(|c| c.type_ == COMPLETE);
        if old.is_none_or(|c| c.reason != waiting.reason || c.message != waiting.message) {
            let note = Note::warning(waiting.reason, "Start", waiting.message.clone());
            publish(&ctx.recorder, obj, &ar, note).await;
        }
    }
    match waiting.error {
        Some(e) => Err(e.into()),
        None => Ok(Action::requeue(PENDING_RECHECK)),
    }
}

/// Starts the run of the replay `obj` (UID `uid`, in `ns`) as a task of the registry,
/// unless one runs already ([`Replays::start`](crate::controller::context::Replays::start)).
fn start(
    ctx: &Arc<DeadLetterReplayContext>,
    obj: &Arc<DynamicObject>,
    ns: &str,
    uid: &str,
    checked: Checked,
    prepared: Prepared,
    current: DeadLetterReplayStatus,
) {
    let Checked {
        spec,
        plan,
        options,
    } = checked;
    let span = tracing::info_span!("replay", namespace = %ns, name = %obj.name_any(), uid = %uid);
    let job = |stop| Job {
        ctx: ctx.clone(),
        obj: obj.clone(),
        dlq: (ns.to_string(), spec.dead_letter_queue_ref.name.clone()),
        spec,
        prepared,
        options,
        plan,
        status: current,
        stop,
        resource_version: std::sync::Mutex::new(
            obj.metadata.resource_version.clone().unwrap_or_default(),
        ),
    };
    if ctx
        .replays
        .start(uid, |stop| job(stop).run().instrument(span))
    {
        info!(replay = %object_key(&obj.metadata), "replay started");
    }
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
            resumed: 0,
            in_doubt: 0,
        }
    }
}
