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
//!   calls [`Observer::checkpoint`] before publishing each batch of copies (every earlier
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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use tracing::{info, warn, Instrument};

use crate::broker::BrokerError;
use crate::controller::conditions::{self, ConditionStatus, Desired, COMPLETE};
use crate::controller::context::Context;
use crate::controller::dead_letter_queue::{decode_valid, prepare, read_references};
use crate::controller::object::{api_resource, decode, status_of};
use crate::controller::{publish, Error, Note};
use crate::crd::{
    DeadLetterQueue, DeadLetterReplay, DeadLetterReplaySpec, DeadLetterReplayStatus, FieldError,
    InvalidSpec, ReplayPhase, ReplayTarget,
};
use crate::dlq::filter::Filter;
use crate::dlq::replay::{
    replay, Observer, Outcome, ReplayOptions, ReplayReport, Target, MAX_IN_FLIGHT,
};
use crate::manifest::object_key;
use crate::metrics::ReplayDelta;
use crate::reconcile::{Prepared, ReconcileError};

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

/// Status writes tried per checkpoint before the run is stopped (200 ms, 400 ms apart).
const WRITE_ATTEMPTS: u32 = 3;

// ------------------------------------------------------------------------ pure parts

/// What earlier runs of a replay left, read from its status when a run starts (zero for
/// a first run, and for a dry run, which changes nothing and starts over).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Base {
    /// Messages replayed by earlier runs (they left the dead-letter queues).
    pub replayed: u64,
    /// Copies earlier runs left in doubt (an operator crash, a broker error).
    pub in_doubt: u64,
}

impl Base {
    /// The base of the next run after one that replayed `replayed` messages and left
    /// `in_doubt` copies in doubt (a dry run stays at zero).
    pub fn then(self, replayed: u64, in_doubt: u64, dry_run: bool) -> Base {
        if dry_run {
            return Base::default();
        }
        Base {
            replayed: self.replayed.saturating_add(replayed),
            in_doubt: self.in_doubt.saturating_add(in_doubt),
        }
    }
}

/// How a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunPlan {
    /// Counts of earlier runs.
    pub base: Base,
    /// `spec.limit` minus what earlier runs replayed or left in doubt ([`remaining_limit`]).
    pub limit: Option<u64>,
    /// `true` when an earlier run of this replay started (phase `Running`).
    pub resumed: bool,
}

/// The plan of a run of a replay with `spec` whose status is `status`: a first run, or
/// a resumed one when the phase is `Running` (an operator stopped or died while it ran).
pub fn plan_run(status: &DeadLetterReplayStatus, spec: &DeadLetterReplaySpec) -> RunPlan {
    let resumed = status.phase == ReplayPhase::Running;
    let base = if resumed && !spec.dry_run {
        Base {
            replayed: status.replayed,
            in_doubt: status.in_doubt,
        }
    } else {
        Base::default()
    };
    RunPlan {
        base,
        limit: remaining_limit(spec.limit, base),
        resumed,
    }
}

/// What is left of `limit` after earlier runs: copies in doubt count as sent, so a
/// replay never sends more than `limit` (it may send fewer when a crash left copies in
/// doubt that had not reached the broker).
pub fn remaining_limit(limit: Option<u64>, base: Base) -> Option<u64> {
    limit.map(|l| l.saturating_sub(base.replayed.saturating_add(base.in_doubt)))
}

/// The counts of one run (the engine's report), reasons as written to status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Messages read.
    pub scanned: u64,
    /// Messages the filter took.
    pub matched: u64,
    /// Copies confirmed, originals removed (dry run: would be).
    pub replayed: u64,
    /// Matched, kept on purpose.
    pub skipped: u64,
    /// Matched, copy refused or unroutable (kept).
    pub failed: u64,
}

impl From<&ReplayReport> for Tally {
    fn from(r: &ReplayReport) -> Self {
        Tally {
            scanned: r.scanned,
            matched: r.matched,
            replayed: r.replayed,
            skipped: r.skipped_total(),
            failed: r.failed_total(),
        }
    }
}

impl Tally {
    /// What `self` adds to `earlier` (a report of the same run taken before).
    pub fn since(self, earlier: Tally) -> ReplayDelta {
        ReplayDelta {
            replayed: self.replayed.saturating_sub(earlier.replayed),
            skipped: self.skipped.saturating_sub(earlier.skipped),
            failed: self.failed.saturating_sub(earlier.failed),
        }
    }
}

/// `status.reasons` of a run: `skipped: <why>: N` then `failed: <why>: N`, in the
/// engine's order. The engine names its CLI flag; the resource's field is named instead.
/// Escaped ([`crate::printable::escape`]): a reason quotes the message (its original
/// queue, exchange, routing key) or the broker, and kubectl prints it to a terminal.
pub fn reasons(report: &ReplayReport) -> Vec<String> {
    let line = |kind: &str, why: &str, n: u64| {
        format!(
            "{kind}: {}: {n}",
            crate::printable::escape(&why.replace("--max-replays", "spec.maxReplays"))
        )
    };
    report
        .skipped
        .iter()
        .map(|(why, n)| line("skipped", why, *n))
        .chain(report.failed.iter().map(|(why, n)| line("failed", why, *n)))
        .collect()
}

/// Writes the counts of a run (`run`, with `reasons`) on top of `base` into `status`,
/// with `in_doubt_now` copies of this run in doubt. Messages replayed by earlier runs left
/// the dead-letter queues and were read and matched once; every message still there is
/// read again by this run and counted by it, so `scanned`, `matched` and `replayed` are
/// earlier runs' replayed plus this run's figures, and `skipped`, `failed` and `reasons`
/// are this run's (a skipped or failed message stays and is looked at again). `inDoubt`
/// is what earlier runs left plus `in_doubt_now`.
pub fn set_counts(
    status: &mut DeadLetterReplayStatus,
    base: Base,
    run: Tally,
    reasons: Vec<String>,
    in_doubt_now: u64,
) {
    status.scanned = base.replayed.saturating_add(run.scanned);
    status.matched = base.replayed.saturating_add(run.matched);
    status.replayed = base.replayed.saturating_add(run.replayed);
    status.skipped = run.skipped;
    status.failed = run.failed;
    status.in_doubt = base.in_doubt.saturating_add(in_doubt_now);
    status.reasons = reasons;
}

/// Copies of a run in doubt after the engine failed: those of the last checkpointed batch
/// (`(settled at the checkpoint, batch)`: replayed + failed, and the batch size) that no
/// later report shows settled (`progress`). Without a checkpoint, nothing was published
/// under this contract.
pub fn in_doubt_after_error(checkpoint: Option<(u64, u64)>, progress: Tally) -> u64 {
    match checkpoint {
        Some((settled_then, batch)) => {
            let settled_since = progress
                .replayed
                .saturating_add(progress.failed)
                .saturating_sub(settled_then);
            batch.saturating_sub(settled_since)
        }
        None => 0,
    }
}

/// The phase a run ends in: `Failed` when some message could not be replayed, else the
/// engine's outcome (`Partial` when it was interrupted).
pub fn final_phase(outcome: Outcome, failed: u64) -> ReplayPhase {
    if failed > 0 {
        return ReplayPhase::Failed;
    }
    match outcome {
        Outcome::Succeeded => ReplayPhase::Succeeded,
        Outcome::Partial => ReplayPhase::Partial,
        Outcome::Failed => ReplayPhase::Failed,
    }
}

/// The phase's name (also the `Complete` condition's reason once finished).
pub fn phase_name(phase: ReplayPhase) -> &'static str {
    match phase {
        ReplayPhase::Pending => "Pending",
        ReplayPhase::Running => "Running",
        ReplayPhase::Succeeded => "Succeeded",
        ReplayPhase::Partial => "Partial",
        ReplayPhase::Failed => "Failed",
    }
}

/// RFC 3339 (seconds, UTC) as Kubernetes writes times.
pub fn rfc3339(t: &Time) -> String {
    match serde_json::to_value(t) {
        Ok(serde_json::Value::String(s)) => s,
        _ => t.0.to_string(),
    }
}

/// Milliseconds since the Unix epoch of `t` (0 before it).
fn epoch_ms(t: &Time) -> u64 {
    u64::try_from(t.0.as_millisecond()).unwrap_or(0)
}

/// The `Complete` condition; its message escaped ([`crate::printable::escape`]): it may
/// quote the broker or messages, and `kubectl describe` prints it to a terminal.
fn complete(status: ConditionStatus, reason: &'static str, message: String) -> Desired {
    Desired {
        type_: COMPLETE,
        status,
        reason,
        message: crate::printable::escape(&message).into_owned(),
    }
}

/// `Pending` with `Complete=False, reason` from `current` (transition time kept when
/// the condition's status does not change). Returns whether anything changed.
pub fn pending_status(
    current: &DeadLetterReplayStatus,
    generation: Option<i64>,
    reason: &'static str,
    message: &str,
    now: &Time,
) -> (DeadLetterReplayStatus, bool) {
    let mut status = current.clone();
    status.phase = ReplayPhase::Pending;
    let desired = complete(ConditionStatus::False, reason, message.to_string());
    conditions::set(&mut status.conditions, &desired, generation, now);
    status.observed_generation = generation;
    let changed = status != *current;
    (status, changed)
}

/// `Failed` for an invalid spec: `Complete=True, reason=InvalidSpec` naming every bad
/// field, `completionTime`.
pub fn invalid_status(
    current: &DeadLetterReplayStatus,
    generation: Option<i64>,
    invalid: &InvalidSpec,
    now: &Time,
) -> DeadLetterReplayStatus {
    let mut status = current.clone();
    end(
        &mut status,
        ReplayPhase::Failed,
        "InvalidSpec",
        invalid.to_string(),
        generation,
        now,
    );
    status.observed_generation = generation;
    status
}

/// Ends a replay in `status`: `phase` (a finished one), `completionTime` = `now`,
/// `Complete=True` with `reason` and `message`.
fn end(
    status: &mut DeadLetterReplayStatus,
    phase: ReplayPhase,
    reason: &'static str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) {
    status.phase = phase;
    status.completion_time = Some(rfc3339(now));
    let desired = complete(ConditionStatus::True, reason, message);
    conditions::set(&mut status.conditions, &desired, generation, now);
}

/// `Partial` for a `Running` replay whose spec changed since it started (an API server
/// before 1.25 does not enforce the spec's immutability): it is not resumed with a
/// different spec. `Complete=True, reason=SpecChanged`, `completionTime`; the counts stay.
pub fn spec_changed_status(
    current: &DeadLetterReplayStatus,
    generation: Option<i64>,
    now: &Time,
) -> DeadLetterReplayStatus {
    let mut status = current.clone();
    let message = format!(
        "the spec changed (generation {} to {}) while the replay ran; it is not resumed with \
         another spec: {} replayed ({} in doubt). Create a new DeadLetterReplay",
        current.observed_generation.unwrap_or_default(),
        generation.unwrap_or_default(),
        current.replayed,
        current.in_doubt
    );
    end(
        &mut status,
        ReplayPhase::Partial,
        "SpecChanged",
        message,
        generation,
        now,
    );
    status.observed_generation = generation;
    status
}

/// Whether a replay with `current` status, now at `generation`, must be ended by
/// [`spec_changed_status`] instead of resumed.
pub fn spec_changed_while_running(
    current: &DeadLetterReplayStatus,
    generation: Option<i64>,
) -> bool {
    current.phase == ReplayPhase::Running
        && current.observed_generation.is_some()
        && current.observed_generation != generation
}

/// `Running` at the start of a run: `startTime` kept from an earlier run (else `now`),
/// `replayId`, `Complete=False, reason=Running`; counts as earlier runs left them.
pub fn running_status(
    current: &DeadLetterReplayStatus,
    generation: Option<i64>,
    replay_id: &str,
    plan: &RunPlan,
    now: &Time,
) -> DeadLetterReplayStatus {
    let mut status = current.clone();
    status.phase = ReplayPhase::Running;
    status.start_time = status.start_time.take().or_else(|| Some(rfc3339(now)));
    status.completion_time = None;
    status.replay_id = Some(replay_id.to_string());
    let message = if plan.resumed {
        format!(
            "resumed after {} replayed ({} in doubt)",
            plan.base.replayed, plan.base.in_doubt
        )
    } else {
        "replaying".to_string()
    };
    let desired = complete(ConditionStatus::False, "Running", message);
    conditions::set(&mut status.conditions, &desired, generation, now);
    status.observed_generation = generation;
    status
}

/// One line on what a run did (condition message and Event note).
pub fn summary(status: &DeadLetterReplayStatus, dry_run: bool) -> String {
    let verb = if dry_run {
        "dry run: would replay"
    } else {
        "replayed"
    };
    let mut s = format!(
        "{verb} {} of {} matching message(s) ({} scanned, {} skipped, {} failed",
        status.replayed, status.matched, status.scanned, status.skipped, status.failed
    );
    if status.in_doubt > 0 {
        s.push_str(&format!(
            ", {} in doubt after an interrupted run: possibly sent twice",
            status.in_doubt
        ));
    }
    s.push(')');
    s
}

/// The status at the end of a run on top of `base` that ended with `outcome` and the
/// counts `run`: phase ([`final_phase`]), `completionTime`, counts with nothing of this
/// run in doubt (every copy settled), `Complete=True` with the phase as reason.
#[allow(clippy::too_many_arguments)]
pub fn finished_status(
    running: &DeadLetterReplayStatus,
    generation: Option<i64>,
    base: Base,
    run: Tally,
    reasons: Vec<String>,
    outcome: Outcome,
    dry_run: bool,
    now: &Time,
) -> DeadLetterReplayStatus {
    let mut status = running.clone();
    set_counts(&mut status, base, run, reasons, 0);
    let phase = final_phase(outcome, status.failed);
    let mut message = summary(&status, dry_run);
    if phase == ReplayPhase::Partial {
        message = format!(
            "interrupted before the end: {message}; the rest is still in the dead-letter queue"
        );
    }
    end(
        &mut status,
        phase,
        phase_name(phase),
        message,
        generation,
        now,
    );
    status
}

/// The status after a graceful stop (shutdown, lost Lease) of a run: phase still
/// `Running` (the next operator resumes it), exact counts, `Complete=False,
/// reason=Interrupted`.
pub fn interrupted_status(
    running: &DeadLetterReplayStatus,
    generation: Option<i64>,
    base: Base,
    run: Tally,
    reasons: Vec<String>,
    now: &Time,
) -> DeadLetterReplayStatus {
    let mut status = running.clone();
    set_counts(&mut status, base, run, reasons, 0);
    status.phase = ReplayPhase::Running;
    let message = format!(
        "the operator stopped after {} replayed; the next operator resumes it",
        status.replayed
    );
    let desired = complete(ConditionStatus::False, "Interrupted", message);
    conditions::set(&mut status.conditions, &desired, generation, now);
    status
}

/// The status after attempt `attempt` of a run failed with `error` (what the run did
/// before, and the copies it left in doubt, already in `status`): still `Running` and
/// retried in `delay`, or — after [`RUN_ATTEMPTS`] — `Partial` with the error in the
/// message.
pub fn broker_error_status(
    status: &DeadLetterReplayStatus,
    generation: Option<i64>,
    error: &BrokerError,
    attempt: u32,
    delay: Duration,
    now: &Time,
) -> DeadLetterReplayStatus {
    let mut next = status.clone();
    let reason = ReconcileError::Broker(error.clone()).reason();
    let desired = if attempt >= RUN_ATTEMPTS {
        next.phase = ReplayPhase::Partial;
        next.completion_time = Some(rfc3339(now));
        complete(
            ConditionStatus::True,
            "Partial",
            format!(
                "stopped after {attempt} attempts, the last failed: {error}; {}; the rest is still in the dead-letter queue",
                summary(&next, false)
            ),
        )
    } else {
        next.phase = ReplayPhase::Running;
        complete(
            ConditionStatus::False,
            reason,
            format!(
                "attempt {attempt} of {RUN_ATTEMPTS} failed: {error}; retrying in {} s",
                delay.as_secs()
            ),
        )
    };
    conditions::set(&mut next.conditions, &desired, generation, now);
    next
}

/// The Pending reason for a DeadLetterQueue that cannot be planned: the reconcile core's
/// reason, with the invalid resource named (`DeadLetterQueueInvalid`, `RetryPolicyInvalid`:
/// this replay's own spec is fine).
pub fn pending_reason(e: &ReconcileError) -> &'static str {
    match e {
        ReconcileError::InvalidSpec {
            kind: "RetryPolicy",
            ..
        } => "RetryPolicyInvalid",
        ReconcileError::InvalidSpec { .. } => "DeadLetterQueueInvalid",
        other => other.reason(),
    }
}

/// The engine's options for `spec` (validated): filter, limit of this run, rate,
/// target, `maxReplays`, dry run, replay id, `maxInFlight` (default
/// [`MAX_IN_FLIGHT`]).
///
/// # Errors
/// [`InvalidSpec`] naming `spec.filter` when the filter does not parse.
pub fn options_for(
    spec: &DeadLetterReplaySpec,
    replay_id: &str,
    limit: Option<u64>,
) -> Result<ReplayOptions, InvalidSpec> {
    let filter = Filter::parse(&spec.filter).map_err(|e| {
        InvalidSpec(vec![FieldError {
            field: "spec.filter".into(),
            message: format!("{:?}: {}", e.term, e.reason),
        }])
    })?;
    Ok(ReplayOptions {
        filter,
        limit,
        rate: spec.rate.map(f64::from),
        dry_run: spec.dry_run,
        target: match spec.target {
            ReplayTarget::OriginalQueue => Target::OriginalQueue,
            ReplayTarget::OriginalExchange => Target::OriginalExchange,
        },
        max_replays: u64::from(spec.max_replays),
        replay_id: replay_id.to_string(),
        max_in_flight: spec.max_in_flight.map_or(MAX_IN_FLIGHT, |n| {
            usize::try_from(n).unwrap_or(MAX_IN_FLIGHT)
        }),
    })
}

// ------------------------------------------------------------------------ reconcile

/// Why a replay cannot start yet.
struct Waiting {
    reason: &'static str,
    message: String,
    /// A broker error: retried with the per-object backoff instead of [`PENDING_RECHECK`].
    error: Option<ReconcileError>,
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

/// Reconciles one DeadLetterReplay (module doc). Records the reconcile metrics.
///
/// # Errors
/// Kubernetes API errors, and broker errors before the start (after writing them to
/// status as `Pending`); retried with per-object backoff.
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    crate::controller::instrumented(KIND, &obj.clone(), &ctx, reconcile_inner(obj, ctx.clone()))
        .await
}

/// Ends a reconcile for a replay that will not run (again): writes `status`, records
/// `note` as an Event, and waits for a change.
///
/// # Errors
/// The status write's Kubernetes API error.
async fn conclude(
    ctx: &Context,
    ar: &ApiResource,
    obj: &DynamicObject,
    status: &DeadLetterReplayStatus,
    note: Note,
) -> Result<Action, Error> {
    crate::controller::apply_status(ctx, ar, obj, status).await?;
    publish(ctx, obj, ar, note).await;
    Ok(Action::await_change())
}

async fn reconcile_inner(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
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
        let status = spec_changed_status(&current, generation, &ctx.now());
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
            let status = invalid_status(&current, generation, &invalid, &ctx.now());
            let note = format!("DeadLetterReplay {key}: invalid spec: {invalid}");
            let note = Note::warning("InvalidSpec", "Validate", note);
            return conclude(&ctx, &ar, &obj, &status, note).await;
        }
    };
    let prepared = match target(&ctx, &ns, &spec).await? {
        Ok(p) => p,
        Err(waiting) => {
            let now = ctx.now();
            let (status, changed) =
                pending_status(&current, generation, waiting.reason, &waiting.message, &now);
            if changed {
                crate::controller::apply_status(&ctx, &ar, &obj, &status).await?;
                let old = current.conditions.iter().find(|c| c.type_ == COMPLETE);
                if old.is_none_or(|c| c.reason != waiting.reason || c.message != waiting.message) {
                    let note = Note::warning(waiting.reason, "Start", waiting.message.clone());
                    publish(&ctx, &obj, &ar, note).await;
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
        let now = ctx.now();
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

/// Reads and plans the DeadLetterQueue of `spec` in `ns` (the DeadLetterQueue
/// controller's read, then [`crate::reconcile::prepare`]), and checks that the broker answers
/// and every dead-letter queue exists. `Ok(Err(_))`: why it cannot start yet.
async fn target(
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
        error: matches!(e, ReconcileError::Broker(_)).then_some(e),
    };
    let dlq = match decode_valid(&obj) {
        Ok(d) => d,
        Err(e) => return Ok(Err(waiting(e))),
    };
    let (policy, secret) = read_references(ctx, ns, &dlq).await?;
    let prepared = match prepare(&dlq, policy.as_ref(), secret.as_ref()) {
        Ok(p) => p,
        Err(e) => return Ok(Err(waiting(e))),
    };
    // The dead-letter queues are read; with the default target, the copies go to the
    // source queue by name (an absent one would make every copy unroutable: failed).
    let source = prepared.topology.routes.source_queue.as_str();
    let needed = prepared
        .topology
        .dead_letter_queues()
        .map(|q| (q, "dead-letter queue"))
        .chain((spec.target == ReplayTarget::OriginalQueue).then_some((source, "source queue")));
    for (queue, role) in needed {
        let found = crate::broker::rabbitmq::amqp::passive_queue_counts(
            &prepared.connection,
            &prepared.topology.vhost,
            queue,
        )
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

// ------------------------------------------------------------------------ the run

/// Everything a run needs, moved into its task.
struct Job {
    ctx: Arc<Context>,
    /// The DeadLetterReplay (status writes and Events are about it).
    obj: Arc<DynamicObject>,
    /// The DeadLetterQueue's namespace and name (labels of the replay metrics).
    dlq: (String, String),
    spec: DeadLetterReplaySpec,
    prepared: Prepared,
    options: ReplayOptions,
    plan: RunPlan,
    /// The status the reconcile read.
    status: DeadLetterReplayStatus,
    stop: Arc<AtomicBool>,
    /// The object's `resourceVersion` after the last write (guards every write).
    resource_version: std::sync::Mutex<String>,
}

/// Why a status write did not happen.
enum WriteError {
    /// The object is gone (404), or the name belongs to a re-created object (409, then
    /// another UID).
    Gone,
    /// Anything else, after [`WRITE_ATTEMPTS`].
    Failed(String),
}

impl Job {
    fn generation(&self) -> Option<i64> {
        self.obj.metadata.generation
    }

    fn key(&self) -> String {
        object_key(&self.obj.metadata)
    }

    /// Writes `status` at the object's last known `resourceVersion`
    /// ([`apply_status_at`](crate::controller::apply_status_at)). On a conflict the
    /// object is read again: the same object (another writer, e.g. a label edit) is
    /// written again at its new version; a re-created one (another UID) or none means
    /// this replay is gone.
    async fn write(&self, status: &DeadLetterReplayStatus) -> Result<(), WriteError> {
        let ar = api_resource::<DeadLetterReplay>();
        let mut last = String::new();
        for attempt in 0..WRITE_ATTEMPTS {
            if attempt > 0 && !last.is_empty() {
                tokio::time::sleep(Duration::from_millis(200 << attempt.min(8))).await;
            }
            let rv = self
                .resource_version
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let written =
                crate::controller::apply_status_at(&self.ctx, &ar, &self.obj, status, &rv).await;
            match written {
                Ok(rv) => {
                    *self
                        .resource_version
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = rv;
                    return Ok(());
                }
                Err(Error::Kube(kube::Error::Api(s))) if s.code == 404 => {
                    return Err(WriteError::Gone)
                }
                Err(Error::Kube(kube::Error::Api(s))) if s.code == 409 => {
                    last.clear();
                    let api: Api<DynamicObject> = Api::namespaced_with(
                        self.ctx.client.clone(),
                        crate::manifest::namespace_of(&self.obj.metadata),
                        &ar,
                    );
                    match api.get_opt(&self.obj.name_any()).await {
                        Ok(Some(o)) if o.metadata.uid == self.obj.metadata.uid => {
                            *self
                                .resource_version
                                .lock()
                                .unwrap_or_else(|p| p.into_inner()) =
                                o.metadata.resource_version.unwrap_or_default();
                        }
                        Ok(_) => return Err(WriteError::Gone),
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(e) => last = e.to_string(),
            }
        }
        if last.is_empty() {
            last = format!("the object kept changing ({WRITE_ATTEMPTS} conflicts)");
        }
        Err(WriteError::Failed(last))
    }

    async fn event(&self, note: Note) {
        publish(
            &self.ctx,
            &self.obj,
            &api_resource::<DeadLetterReplay>(),
            note,
        )
        .await;
    }

    /// Adds what a run did since `credited` to the metrics (never for a dry run).
    fn credit(&self, credited: &mut Tally, now: Tally) {
        if self.spec.dry_run {
            return;
        }
        let delta = now.since(*credited);
        *credited = now;
        let ms = epoch_ms(&self.ctx.now());
        self.ctx
            .metrics
            .record_replayed(&self.dlq.0, &self.dlq.1, delta, ms);
    }

    /// Sleeps `d`, or less when the stop flag is set meanwhile (checked every 100 ms).
    async fn pause(&self, d: Duration) {
        let until = tokio::time::Instant::now() + d;
        while !self.stop.load(Ordering::SeqCst) {
            let now = tokio::time::Instant::now();
            if now >= until {
                break;
            }
            tokio::time::sleep((until - now).min(Duration::from_millis(100))).await;
        }
    }

    /// The run (module doc): `Running`, the engine with checkpoints, retries after
    /// broker errors, the final status, Events and metrics.
    async fn run(self) -> bool {
        let key = self.key();
        let uid = self.obj.metadata.uid.clone().unwrap_or_default();
        let generation = self.generation();
        let dry_run = self.spec.dry_run;
        let mut base = self.plan.base;
        let mut status =
            running_status(&self.status, generation, &uid, &self.plan, &self.ctx.now());
        match self.write(&status).await {
            Ok(()) => {}
            Err(WriteError::Gone) => {
                info!(replay = %key, "deleted before it started");
                return true;
            }
            Err(WriteError::Failed(e)) => {
                warn!(replay = %key, error = %e, "cannot write status Running: not started (retried at the next reconcile)");
                return false;
            }
        }
        let limit = self
            .plan
            .limit
            .map_or("no limit".to_string(), |l| format!("limit {l}"));
        let note = if self.plan.resumed {
            Note::normal(
                "Resumed",
                "Replay",
                format!(
                    "resuming the replay of DeadLetterQueue {}/{} after {} replayed ({} in doubt); {limit}",
                    self.dlq.0, self.dlq.1, base.replayed, base.in_doubt
                ),
            )
        } else {
            Note::normal(
                "Started",
                "Replay",
                format!(
                    "replaying the dead-letter queues of DeadLetterQueue {}/{} ({}; filter {:?}; {limit}; rate {}; replay id {uid})",
                    self.dlq.0,
                    self.dlq.1,
                    if dry_run { "dry run" } else { "at least once" },
                    self.spec.filter,
                    self.spec
                        .rate
                        .map_or("unlimited".to_string(), |r| format!("{r} msg/s")),
                ),
            )
        };
        self.event(note).await;

        let mut attempt = 1;
        loop {
            let mut options = self.options.clone();
            options.limit = remaining_limit(self.spec.limit, base);
            let mut observer = Checkpoints {
                job: &self,
                base,
                status: status.clone(),
                credited: Tally::default(),
                progress: Tally::default(),
                checkpoint: None,
                gone: false,
                write_error: None,
            };
            let now_ms = epoch_ms(&self.ctx.now());
            let result = if options.limit == Some(0) {
                Ok(None)
            } else {
                replay(
                    &self.prepared.connection,
                    &self.prepared.topology,
                    &options,
                    now_ms,
                    &self.stop,
                    &mut observer,
                )
                .await
                .map(Some)
            };
            let Checkpoints {
                status: checkpointed,
                mut credited,
                progress,
                checkpoint,
                gone,
                write_error,
                ..
            } = observer;
            if gone {
                info!(replay = %key, "deleted while running: stopped (the rest stays in the dead-letter queue)");
                return true;
            }
            let now = self.ctx.now();
            match result {
                Ok(report) => {
                    let (tally, reasons, outcome) = match &report {
                        Some(r) => (Tally::from(r), reasons(r), r.outcome),
                        // The limit was used up by the attempts before.
                        None => (
                            Tally::default(),
                            checkpointed.reasons.clone(),
                            Outcome::Succeeded,
                        ),
                    };
                    self.credit(&mut credited, tally);
                    if self.stop.load(Ordering::SeqCst) {
                        let next =
                            interrupted_status(&status, generation, base, tally, reasons, &now);
                        let written = self.write(&next).await;
                        if let Err(WriteError::Failed(e)) = &written {
                            warn!(replay = %key, error = %e, "cannot write the interrupted status");
                        }
                        if written.is_ok() {
                            let note = next
                                .conditions
                                .iter()
                                .find(|c| c.type_ == COMPLETE)
                                .map(|c| c.message.clone())
                                .unwrap_or_default();
                            self.event(Note::normal("Interrupted", "Replay", note))
                                .await;
                        }
                        info!(replay = %key, replayed = next.replayed, "interrupted by shutdown");
                        return false;
                    }
                    if let Some(e) = write_error {
                        warn!(replay = %key, error = %e, "status could not be written: stopped; resumed at the next reconcile");
                        return false;
                    }
                    let next = finished_status(
                        &status, generation, base, tally, reasons, outcome, dry_run, &now,
                    );
                    let message = next
                        .conditions
                        .iter()
                        .find(|c| c.type_ == COMPLETE)
                        .map(|c| c.message.clone())
                        .unwrap_or_default();
                    match self.write(&next).await {
                        Ok(()) => {}
                        Err(WriteError::Gone) => return true,
                        Err(WriteError::Failed(e)) => {
                            warn!(replay = %key, error = %e, "cannot write the final status: resumed at the next reconcile");
                            return false;
                        }
                    }
                    let mut note = message;
                    if !next.reasons.is_empty() {
                        note.push_str("; ");
                        note.push_str(&next.reasons.join("; "));
                    }
                    let reason = phase_name(next.phase);
                    let note = if next.phase == ReplayPhase::Succeeded {
                        Note::normal(reason, "Replay", note)
                    } else {
                        Note::warning(reason, "Replay", note)
                    };
                    self.event(note).await;
                    info!(replay = %key, phase = reason, replayed = next.replayed, "replay finished");
                    return true;
                }
                Err(error) => {
                    // What this attempt did for sure (settled copies), and what it left in
                    // doubt: the rest of its last checkpointed batch.
                    self.credit(&mut credited, progress);
                    let in_doubt = in_doubt_after_error(checkpoint, progress);
                    let mut after = checkpointed;
                    let kept_reasons = after.reasons.clone();
                    set_counts(&mut after, base, progress, kept_reasons, in_doubt);
                    base = base.then(progress.replayed, in_doubt, dry_run);
                    let delay = retry_delay(attempt);
                    let next =
                        broker_error_status(&after, generation, &error, attempt, delay, &now);
                    warn!(replay = %key, attempt, error = %error, "replay attempt failed");
                    match self.write(&next).await {
                        Ok(()) => {}
                        Err(WriteError::Gone) => return true,
                        Err(WriteError::Failed(e)) => {
                            warn!(replay = %key, error = %e, "cannot write status after a broker error: resumed at the next reconcile");
                            return false;
                        }
                    }
                    let reason = ReconcileError::Broker(error.clone()).reason();
                    let message = next
                        .conditions
                        .iter()
                        .find(|c| c.type_ == COMPLETE)
                        .map(|c| c.message.clone())
                        .unwrap_or_default();
                    if attempt >= RUN_ATTEMPTS {
                        self.event(Note::warning("Partial", "Replay", message))
                            .await;
                        return true;
                    }
                    self.event(Note::warning(reason, "Replay", message)).await;
                    self.pause(delay).await;
                    if self.stop.load(Ordering::SeqCst) {
                        // Shutdown during the pause: the counts are written, phase Running.
                        return false;
                    }
                    status = next;
                    attempt += 1;
                }
            }
        }
    }
}

/// The engine's observer of a run: writes the counts at each checkpoint (module doc) and
/// keeps the last report's counts.
struct Checkpoints<'a> {
    job: &'a Job,
    base: Base,
    /// The status written at the last checkpoint (the run's `Running` status before).
    status: DeadLetterReplayStatus,
    /// This run's counts already added to the metrics.
    credited: Tally,
    /// The last report seen (every copy it counts is settled).
    progress: Tally,
    /// Settled copies (replayed + failed) and batch size at the last checkpoint written.
    checkpoint: Option<(u64, u64)>,
    /// The object was deleted (or re-created): stop, write nothing more.
    gone: bool,
    /// A checkpoint could not be written: stopped, the status still says `Running`.
    write_error: Option<String>,
}

impl Observer for Checkpoints<'_> {
    fn progress(&mut self, report: &ReplayReport) {
        self.progress = Tally::from(report);
    }

    fn checkpoint<'b>(
        &'b mut self,
        report: &'b ReplayReport,
        batch: u64,
    ) -> futures::future::BoxFuture<'b, Result<(), String>> {
        Box::pin(async move {
            let tally = Tally::from(report);
            self.progress = tally;
            self.job.credit(&mut self.credited, tally);
            set_counts(&mut self.status, self.base, tally, reasons(report), batch);
            match self.job.write(&self.status).await {
                Ok(()) => {
                    self.checkpoint = Some((tally.replayed.saturating_add(tally.failed), batch));
                    Ok(())
                }
                Err(WriteError::Gone) => {
                    self.gone = true;
                    Err(format!(
                        "DeadLetterReplay {} was deleted: stopping",
                        self.job.key()
                    ))
                }
                Err(WriteError::Failed(e)) => {
                    let e = format!(
                        "cannot write the status of DeadLetterReplay {}: {e}",
                        self.job.key()
                    );
                    self.write_error = Some(e.clone());
                    Err(e)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_replay_whose_spec_changed_ends_partial_instead_of_resuming() {
        let now = crate::controller::test_support::at(100);
        let mut running = DeadLetterReplayStatus {
            phase: ReplayPhase::Running,
            observed_generation: Some(1),
            replayed: 232,
            ..Default::default()
        };
        assert!(!spec_changed_while_running(&running, Some(1)));
        assert!(spec_changed_while_running(&running, Some(2)));
        let ended = spec_changed_status(&running, Some(2), &now);
        assert_eq!(ended.phase, ReplayPhase::Partial);
        assert_eq!(ended.replayed, 232);
        assert!(ended.completion_time.is_some());
        let c = &ended.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Complete", "True", "SpecChanged")
        );
        assert!(c.message.contains("generation 1 to 2"), "{}", c.message);
        running.phase = ReplayPhase::Pending;
        assert!(
            !spec_changed_while_running(&running, Some(2)),
            "a replay not started yet takes edits"
        );
    }
    use crate::controller::test_support::at;
    use std::collections::BTreeMap;

    fn spec(json: serde_json::Value) -> DeadLetterReplaySpec {
        serde_json::from_value(json).expect("spec")
    }

    fn report(
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

    fn complete_of(s: &DeadLetterReplayStatus) -> (String, String, String) {
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == COMPLETE)
            .expect("Complete");
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn phase_follows_the_outcome_and_failures() {
        assert_eq!(final_phase(Outcome::Succeeded, 0), ReplayPhase::Succeeded);
        assert_eq!(final_phase(Outcome::Partial, 0), ReplayPhase::Partial);
        assert_eq!(final_phase(Outcome::Failed, 2), ReplayPhase::Failed);
        // A failed copy fails the replay whatever stopped it.
        assert_eq!(final_phase(Outcome::Partial, 1), ReplayPhase::Failed);
        assert_eq!(final_phase(Outcome::Succeeded, 1), ReplayPhase::Failed);
    }

    #[test]
    fn first_run_and_resumed_run_plans() {
        let s = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}, "limit": 100}));
        let fresh = DeadLetterReplayStatus::default();
        assert_eq!(
            plan_run(&fresh, &s),
            RunPlan {
                base: Base::default(),
                limit: Some(100),
                resumed: false
            }
        );
        // Pending (never started) with stale figures: a first run.
        let pending = DeadLetterReplayStatus {
            replayed: 7,
            ..Default::default()
        };
        assert!(!plan_run(&pending, &s).resumed);
        // Running without a task: resumed from the status counts; the limit is lowered by
        // what was replayed and what is in doubt.
        let running = DeadLetterReplayStatus {
            phase: ReplayPhase::Running,
            replayed: 40,
            in_doubt: 5,
            scanned: 90,
            ..Default::default()
        };
        let p = plan_run(&running, &s);
        assert_eq!(
            p,
            RunPlan {
                base: Base {
                    replayed: 40,
                    in_doubt: 5
                },
                limit: Some(55),
                resumed: true
            }
        );
        // Limit already used up: 0, never negative.
        let over = DeadLetterReplayStatus {
            replayed: 98,
            in_doubt: 5,
            ..running.clone()
        };
        assert_eq!(plan_run(&over, &s).limit, Some(0));
        // No limit stays no limit.
        let unlimited = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}}));
        assert_eq!(plan_run(&running, &unlimited).limit, None);
        // A dry run changed nothing: it starts over.
        let dry = spec(
            serde_json::json!({"deadLetterQueueRef": {"name": "orders"}, "dryRun": true, "limit": 100}),
        );
        let p = plan_run(&running, &dry);
        assert!(p.resumed);
        assert_eq!((p.base, p.limit), (Base::default(), Some(100)));
        assert_eq!(Base::default().then(10, 2, true), Base::default());
        assert_eq!(
            Base {
                replayed: 1,
                in_doubt: 1
            }
            .then(10, 2, false),
            Base {
                replayed: 11,
                in_doubt: 3
            }
        );
    }

    #[test]
    fn counts_continue_from_earlier_runs_without_counting_a_message_twice() {
        // First run: 100 messages, 30 matching; 20 replayed before a graceful stop.
        let mut status = DeadLetterReplayStatus::default();
        let run1 = report(50, 20, 20, &[], &[], Outcome::Partial);
        set_counts(
            &mut status,
            Base::default(),
            Tally::from(&run1),
            reasons(&run1),
            0,
        );
        assert_eq!(
            (
                status.scanned,
                status.matched,
                status.replayed,
                status.in_doubt
            ),
            (50, 20, 20, 0)
        );
        // The resumed run reads the 80 messages left: 10 match, 1 skipped, 9 replayed.
        let base = Base {
            replayed: status.replayed,
            in_doubt: status.in_doubt,
        };
        let run2 = report(
            80,
            10,
            9,
            &[("already replayed 3 times (--max-replays)", 1)],
            &[],
            Outcome::Succeeded,
        );
        set_counts(&mut status, base, Tally::from(&run2), reasons(&run2), 0);
        assert_eq!(
            (
                status.scanned,
                status.matched,
                status.replayed,
                status.skipped,
                status.failed
            ),
            (100, 30, 29, 1, 0),
            "every message read once, every match once"
        );
        assert_eq!(
            status.reasons,
            ["skipped: already replayed 3 times (spec.maxReplays): 1"]
        );
        // At a checkpoint the batch about to be published is in doubt, on top of what
        // earlier runs left.
        let base = Base {
            replayed: 29,
            in_doubt: 3,
        };
        set_counts(&mut status, base, Tally::default(), vec![], 64);
        assert_eq!((status.replayed, status.in_doubt), (29, 67));
    }

    #[test]
    fn reasons_are_counted_lines_skipped_first() {
        let r = report(
            10,
            10,
            5,
            &[
                (
                    "original queue other is not this DeadLetterQueue's source queue orders",
                    2,
                ),
                ("already replayed 3 times (--max-replays)", 1),
            ],
            &[("the broker refused the copy (nack)", 2)],
            Outcome::Failed,
        );
        assert_eq!(
            reasons(&r),
            [
                "skipped: already replayed 3 times (spec.maxReplays): 1",
                "skipped: original queue other is not this DeadLetterQueue's source queue orders: 2",
                "failed: the broker refused the copy (nack): 2",
            ]
        );
    }

    #[test]
    fn reasons_and_condition_messages_quoting_messages_are_escaped() {
        let r = report(
            2,
            2,
            0,
            &[("original queue x\u{1b}]0;t\u{7}y\u{202e} is not …", 1)],
            &[("the broker refused the copy: \u{9b}2J", 1)],
            Outcome::Failed,
        );
        let lines = reasons(&r);
        assert_eq!(
            lines,
            [
                "skipped: original queue x\\u{1b}]0;t\\u{7}y\\u{202e} is not …: 1",
                "failed: the broker refused the copy: \\u{9b}2J: 1",
            ]
        );
        let c = complete(ConditionStatus::True, "Failed", lines.join("; "));
        assert!(!c.message.chars().any(char::is_control), "{}", c.message);
        assert!(!c.message.contains('\u{202e}'), "{}", c.message);
    }

    #[test]
    fn in_doubt_after_an_engine_error_is_the_unsettled_rest_of_the_last_batch() {
        let t = |replayed, failed| Tally {
            replayed,
            failed,
            ..Default::default()
        };
        // Checkpoint at 10 settled with a batch of 8; 5 settled since: 3 in doubt.
        assert_eq!(in_doubt_after_error(Some((10, 8)), t(14, 1)), 3);
        // All settled: none.
        assert_eq!(in_doubt_after_error(Some((10, 8)), t(18, 0)), 0);
        assert_eq!(in_doubt_after_error(Some((10, 8)), t(30, 0)), 0);
        // No checkpoint: nothing was published.
        assert_eq!(in_doubt_after_error(None, t(0, 0)), 0);
    }

    #[test]
    fn status_through_a_run_keeps_start_time_and_ends_complete() {
        let s = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}}));
        let plan = plan_run(&DeadLetterReplayStatus::default(), &s);
        let running = running_status(
            &DeadLetterReplayStatus::default(),
            Some(1),
            "uid-1",
            &plan,
            &at(100),
        );
        assert_eq!(running.phase, ReplayPhase::Running);
        assert_eq!(running.replay_id.as_deref(), Some("uid-1"));
        assert_eq!(running.start_time.as_deref(), Some("1970-01-01T00:01:40Z"));
        assert_eq!(complete_of(&running).1, "Running");

        let r = report(
            12,
            10,
            8,
            &[("already replayed 3 times (--max-replays)", 2)],
            &[],
            Outcome::Succeeded,
        );
        let done = finished_status(
            &running,
            Some(1),
            Base::default(),
            Tally::from(&r),
            reasons(&r),
            r.outcome,
            false,
            &at(200),
        );
        assert_eq!(done.phase, ReplayPhase::Succeeded);
        assert_eq!(
            done.completion_time.as_deref(),
            Some("1970-01-01T00:03:20Z")
        );
        assert_eq!(done.start_time, running.start_time);
        assert_eq!(done.in_doubt, 0);
        let (st, reason, message) = complete_of(&done);
        assert_eq!((st.as_str(), reason.as_str()), ("True", "Succeeded"));
        assert_eq!(
            message,
            "replayed 8 of 10 matching message(s) (12 scanned, 2 skipped, 0 failed)"
        );

        // A resumed run keeps the first start time and restores inDoubt to the base.
        let resumed_from = DeadLetterReplayStatus {
            in_doubt: 64,
            replayed: 100,
            ..running.clone()
        };
        let plan = plan_run(&resumed_from, &s);
        let again = running_status(&resumed_from, Some(1), "uid-1", &plan, &at(300));
        assert_eq!(again.start_time, running.start_time);
        assert_eq!(
            complete_of(&again).2,
            "resumed after 100 replayed (64 in doubt)"
        );
        let failed = finished_status(
            &again,
            Some(1),
            plan.base,
            Tally {
                scanned: 5,
                matched: 5,
                replayed: 4,
                skipped: 0,
                failed: 1,
            },
            vec!["failed: unroutable: no queue is bound for the route: 1".into()],
            Outcome::Failed,
            false,
            &at(400),
        );
        assert_eq!(failed.phase, ReplayPhase::Failed);
        assert_eq!((failed.replayed, failed.in_doubt), (104, 64));
        let (_, reason, message) = complete_of(&failed);
        assert_eq!(reason, "Failed");
        assert!(message.contains("64 in doubt"), "{message}");
    }

    #[test]
    fn graceful_stop_stays_running_with_exact_counts() {
        let s = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}}));
        let plan = plan_run(&DeadLetterReplayStatus::default(), &s);
        let running = running_status(
            &DeadLetterReplayStatus::default(),
            Some(1),
            "uid-1",
            &plan,
            &at(100),
        );
        let stopped = interrupted_status(
            &running,
            Some(1),
            Base::default(),
            Tally {
                scanned: 7,
                matched: 7,
                replayed: 7,
                skipped: 0,
                failed: 0,
            },
            vec![],
            &at(150),
        );
        assert_eq!(stopped.phase, ReplayPhase::Running);
        assert_eq!((stopped.replayed, stopped.in_doubt), (7, 0));
        assert!(stopped.completion_time.is_none());
        assert_eq!(complete_of(&stopped).1, "Interrupted");
        // The next operator resumes from it.
        let p = plan_run(&stopped, &s);
        assert!(p.resumed);
        assert_eq!(p.base.replayed, 7);
    }

    #[test]
    fn broker_errors_retry_then_end_partial() {
        let error = BrokerError::Unreachable {
            endpoint: "amqp://guest:***@127.0.0.1:1/".into(),
            reason: "connection refused".into(),
        };
        let running = DeadLetterReplayStatus {
            phase: ReplayPhase::Running,
            replayed: 3,
            ..Default::default()
        };
        let retry = broker_error_status(&running, Some(1), &error, 1, retry_delay(1), &at(10));
        assert_eq!(retry.phase, ReplayPhase::Running);
        let (st, reason, message) = complete_of(&retry);
        assert_eq!(
            (st.as_str(), reason.as_str()),
            ("False", "BrokerUnreachable")
        );
        assert!(
            message.starts_with(
                "attempt 1 of 4 failed: broker at amqp://guest:***@127.0.0.1:1/ is unreachable"
            ),
            "{message}"
        );
        assert!(message.ends_with("retrying in 5 s"), "{message}");
        assert_eq!([1, 2, 3].map(|n| retry_delay(n).as_secs()), [5, 10, 20]);
        let last = broker_error_status(
            &retry,
            Some(1),
            &error,
            RUN_ATTEMPTS,
            Duration::ZERO,
            &at(20),
        );
        assert_eq!(last.phase, ReplayPhase::Partial);
        assert!(last.completion_time.is_some());
        let (st, reason, message) = complete_of(&last);
        assert_eq!((st.as_str(), reason.as_str()), ("True", "Partial"));
        assert!(message.contains("connection refused"), "{message}");
        assert!(message.contains("replayed 3 of"), "{message}");
    }

    #[test]
    fn pending_and_invalid_statuses() {
        let empty = DeadLetterReplayStatus::default();
        let (p, changed) = pending_status(
            &empty,
            Some(1),
            "DeadLetterQueueNotFound",
            "spec.deadLetterQueueRef.name: DeadLetterQueue shop/x not found",
            &at(10),
        );
        assert!(changed);
        assert_eq!(p.phase, ReplayPhase::Pending);
        assert_eq!(complete_of(&p).0, "False");
        // Same again: nothing to write.
        let (_, changed) = pending_status(
            &p,
            Some(1),
            "DeadLetterQueueNotFound",
            "spec.deadLetterQueueRef.name: DeadLetterQueue shop/x not found",
            &at(20),
        );
        assert!(!changed);

        let invalid = InvalidSpec(vec![FieldError {
            field: "spec.filter[0]".into(),
            message: "unknown key".into(),
        }]);
        let f = invalid_status(&p, Some(1), &invalid, &at(30));
        assert_eq!(f.phase, ReplayPhase::Failed);
        assert!(f.phase.is_finished());
        let (st, reason, message) = complete_of(&f);
        assert_eq!((st.as_str(), reason.as_str()), ("True", "InvalidSpec"));
        assert_eq!(message, "spec.filter[0]: unknown key");

        let e = ReconcileError::InvalidSpec {
            kind: "RetryPolicy",
            name: "shop/p".into(),
            source: invalid.clone(),
        };
        assert_eq!(pending_reason(&e), "RetryPolicyInvalid");
        let e = ReconcileError::InvalidSpec {
            kind: "DeadLetterQueue",
            name: "shop/x".into(),
            source: invalid,
        };
        assert_eq!(pending_reason(&e), "DeadLetterQueueInvalid");
        assert_eq!(
            pending_reason(&ReconcileError::SecretNotFound("shop/s".into())),
            "SecretNotFound"
        );
    }

    #[test]
    fn options_follow_the_spec() {
        let s = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"},
            "filter": ["class=Timeout", "age>1h"], "rate": 20, "maxReplays": 2,
            "target": "OriginalExchange", "dryRun": true, "maxInFlight": 7}));
        let o = options_for(&s, "uid-1", Some(5)).expect("options");
        assert_eq!(o.max_in_flight, 7);
        assert_eq!(o.filter.terms.len(), 2);
        assert_eq!(o.limit, Some(5));
        assert_eq!(o.rate, Some(20.0));
        assert_eq!(o.max_replays, 2);
        assert_eq!(o.target, Target::OriginalExchange);
        assert!(o.dry_run);
        assert_eq!(o.replay_id, "uid-1");
        let default = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}}));
        let o = options_for(&default, "u", None).expect("options");
        assert_eq!(o.max_in_flight, MAX_IN_FLIGHT);
        let bad = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"},
            "filter": ["colour=red"]}));
        let err = options_for(&bad, "u", None).expect_err("bad filter");
        assert_eq!(err.0[0].field, "spec.filter");
    }

    #[test]
    fn metric_deltas_never_go_back() {
        let a = Tally {
            replayed: 5,
            skipped: 1,
            failed: 0,
            ..Default::default()
        };
        let b = Tally {
            replayed: 9,
            skipped: 1,
            failed: 2,
            ..Default::default()
        };
        assert_eq!(
            b.since(a),
            ReplayDelta {
                replayed: 4,
                skipped: 0,
                failed: 2
            }
        );
        assert_eq!(a.since(b), ReplayDelta::default());
    }
}
