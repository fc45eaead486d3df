//! The run of a replay, a background task ([`Job::run`]): `Running`, the engine with a
//! status write at each checkpoint ([`Checkpoints`]), retries after broker errors, the
//! final status, Events and metrics.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::broker::BrokerError;
use crate::controller::context::DeadLetterReplayContext;
use crate::controller::Error;
use crate::crd::{DeadLetterReplay, DeadLetterReplaySpec, DeadLetterReplayStatus, ReplayPhase};
use crate::dlq::replay::{replay_with, Observer, Outcome, ReplayOptions, ReplayReport};
use crate::manifest::object_key;
use crate::object::api_resource;
use crate::reconcile::{Prepared, ReconcileError};
use crate::status::conditions::COMPLETE;
use crate::status::{publish, Note};

use super::plan::{in_doubt_after_error, remaining_limit, Base, RunPlan, Tally};
use super::status::{
    broker_error_status, finished_status, interrupted_status, phase_name, reasons, running_status,
    set_counts,
};
use super::{retry_delay, RUN_ATTEMPTS};
use crate::lock::Locked;

/// Status writes tried per checkpoint before the run is stopped (after an error: 400 ms,
/// then 800 ms apart; a conflict is read again at once).
const WRITE_ATTEMPTS: u32 = 3;

/// Everything a run needs, moved into its task.
pub(super) struct Job {
    pub(super) ctx: Arc<DeadLetterReplayContext>,
    /// The DeadLetterReplay (status writes and Events are about it).
    pub(super) obj: Arc<DynamicObject>,
    /// The DeadLetterQueue's namespace and name (labels of the replay metrics).
    pub(super) dlq: (String, String),
    pub(super) spec: DeadLetterReplaySpec,
    pub(super) prepared: Prepared,
    pub(super) options: ReplayOptions,
    pub(super) plan: RunPlan,
    /// The status the reconcile read.
    pub(super) status: DeadLetterReplayStatus,
    /// Cancelled to stop the run (graceful shutdown).
    pub(super) stop: CancellationToken,
    /// The object's `resourceVersion` after the last write (guards every write).
    pub(super) resource_version: std::sync::Mutex<String>,
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
            let rv = self.resource_version.locked().clone();
            let written =
                crate::controller::apply_status_at(&self.ctx.shared, &ar, &self.obj, status, &rv)
                    .await;
            match written {
                Ok(rv) => {
                    *self.resource_version.locked() = rv;
                    return Ok(());
                }
                Err(Error::Kube(kube::Error::Api(s))) if s.code == 404 => {
                    return Err(WriteError::Gone)
                }
                Err(Error::Kube(kube::Error::Api(s))) if s.code == 409 => {
                    last.clear();
                    let api: Api<DynamicObject> = Api::namespaced_with(
                        self.ctx.shared.client.clone(),
                        crate::manifest::namespace_of(&self.obj.metadata),
                        &ar,
                    );
                    match api.get_opt(&self.obj.name_any()).await {
                        Ok(Some(o)) if o.metadata.uid == self.obj.metadata.uid => {
                            *self.resource_version.locked() =
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
            &self.ctx.recorder,
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
        let ms = crate::clock::epoch_ms(&self.ctx.shared.now());
        self.ctx
            .shared
            .metrics
            .record_replayed(&self.dlq.0, &self.dlq.1, delta, ms);
    }

    /// Sleeps `d`, or less when the run is stopped meanwhile.
    async fn pause(&self, d: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = self.stop.cancelled() => {}
        }
    }

    /// The run (module doc): `Running` ([`Job::start`]), then passes of the engine
    /// ([`Job::engine_pass`]) until one ends it: finished or stopped
    /// ([`Job::after_pass`]), or a broker error after the last of [`RUN_ATTEMPTS`]
    /// ([`Job::after_error`]). Returns whether the replay is over (final status written,
    /// or the object gone); `false` lets a later reconcile resume it.
    pub(super) async fn run(self) -> bool {
        let mut status = match self.start().await {
            Ok(status) => status,
            Err(over) => return over,
        };
        let mut base = self.plan.base;
        let mut attempt = 1;
        loop {
            let (result, seen) = self.engine_pass(base, &status).await;
            if seen.gone {
                info!(replay = %self.key(), "deleted while running: stopped (the rest stays in the dead-letter queue)");
                return true;
            }
            let retry = match result {
                Ok(report) => return self.after_pass(&status, base, seen, report).await,
                Err(error) => self.after_error(attempt, base, seen, error).await,
            };
            match retry {
                Retry::Again(next, next_base) => {
                    status = *next;
                    base = next_base;
                    attempt += 1;
                }
                Retry::Over(over) => return over,
            }
        }
    }

    /// Writes `Running` and records `Started` (or `Resumed`); returns the status written.
    /// `Err(over)` when the run cannot start: the object is gone (`true`), or the status
    /// cannot be written (`false`: retried at the next reconcile).
    async fn start(&self) -> Result<DeadLetterReplayStatus, bool> {
        let key = self.key();
        let uid = self.obj.metadata.uid.clone().unwrap_or_default();
        let status = running_status(
            &self.status,
            self.generation(),
            &uid,
            &self.plan,
            &self.ctx.shared.now(),
        );
        match self.write(&status).await {
            Ok(()) => {}
            Err(WriteError::Gone) => {
                info!(replay = %key, "deleted before it started");
                return Err(true);
            }
            Err(WriteError::Failed(e)) => {
                warn!(replay = %key, error = %e, "cannot write status Running: not started (retried at the next reconcile)");
                return Err(false);
            }
        }
        self.event(self.start_note(&uid)).await;
        Ok(status)
    }

    /// The `Started` Event of a first run (what it replays, how), or `Resumed` with what
    /// earlier runs did.
    fn start_note(&self, uid: &str) -> Note {
        let base = self.plan.base;
        let limit = self
            .plan
            .limit
            .map_or("no limit".to_string(), |l| format!("limit {l}"));
        if self.plan.resumed {
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
                    if self.spec.dry_run { "dry run" } else { "at least once" },
                    self.spec.filter,
                    self.spec
                        .rate
                        .map_or("unlimited".to_string(), |r| format!("{r} msg/s")),
                ),
            )
        }
    }

    /// One pass of the engine over what is left (the limit less what `base` counts),
    /// writing the counts on top of `status` at each checkpoint. Returns the engine's
    /// report (`None`: earlier passes used up the limit) or its error, and what the
    /// observer saw.
    async fn engine_pass(
        &self,
        base: Base,
        status: &DeadLetterReplayStatus,
    ) -> (Result<Option<ReplayReport>, BrokerError>, Checkpoints<'_>) {
        let mut options = self.options.clone();
        options.limit = remaining_limit(self.spec.limit, base);
        let mut observer = Checkpoints {
            job: self,
            base,
            status: status.clone(),
            credited: Tally::default(),
            progress: Tally::default(),
            checkpoint: None,
            gone: false,
            write_error: None,
        };
        let now_ms = crate::clock::epoch_ms(&self.ctx.shared.now());
        let result = if options.limit == Some(0) {
            Ok(None)
        } else {
            match self.ctx.shared.brokers.connect(&self.prepared.connection) {
                Ok(broker) => replay_with(
                    broker.as_ref(),
                    &self.prepared.topology,
                    &options,
                    now_ms,
                    &self.stop,
                    &mut observer,
                )
                .await
                .map(Some),
                Err(e) => Err(e),
            }
        };
        (result, observer)
    }

    /// After a pass the engine ended (`report`; `None` when earlier passes used up the
    /// limit): its counts credited, then the interrupted status when the run was stopped,
    /// nothing more when a checkpoint could not be written, else the final status and its
    /// Event. Returns whether the replay is over.
    async fn after_pass(
        &self,
        status: &DeadLetterReplayStatus,
        base: Base,
        mut seen: Checkpoints<'_>,
        report: Option<ReplayReport>,
    ) -> bool {
        let key = self.key();
        let now = self.ctx.shared.now();
        let (tally, reasons, outcome) = match &report {
            Some(r) => (Tally::from(r), reasons(r), r.outcome),
            // The limit was used up by the attempts before.
            None => (
                Tally::default(),
                seen.status.reasons.clone(),
                Outcome::Succeeded,
            ),
        };
        self.credit(&mut seen.credited, tally);
        if self.stop.is_cancelled() {
            let next = interrupted_status(status, self.generation(), base, tally, reasons, &now);
            self.interrupted(&next).await;
            return false;
        }
        if let Some(e) = seen.write_error {
            warn!(replay = %key, error = %e, "status could not be written: stopped; resumed at the next reconcile");
            return false;
        }
        let next = finished_status(
            status,
            self.generation(),
            base,
            tally,
            reasons,
            outcome,
            self.spec.dry_run,
            &now,
        );
        match self.write(&next).await {
            Ok(()) => {}
            Err(WriteError::Gone) => return true,
            Err(WriteError::Failed(e)) => {
                warn!(replay = %key, error = %e, "cannot write the final status: resumed at the next reconcile");
                return false;
            }
        }
        let mut note = complete_message(&next);
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
        true
    }

    /// Writes `next`, the status of a run stopped by shutdown (still `Running`, resumed
    /// by the next operator), with its `Interrupted` Event.
    async fn interrupted(&self, next: &DeadLetterReplayStatus) {
        let key = self.key();
        let written = self.write(next).await;
        if let Err(WriteError::Failed(e)) = &written {
            warn!(replay = %key, error = %e, "cannot write the interrupted status");
        }
        if written.is_ok() {
            let note = complete_message(next);
            self.event(Note::normal("Interrupted", "Replay", note))
                .await;
        }
        info!(replay = %key, replayed = next.replayed, "interrupted by shutdown");
    }

    /// After attempt `attempt` of the run failed with `error`: what it did for sure
    /// (settled copies) credited, what it left in doubt (the rest of its last checkpointed
    /// batch) counted, and the status written with its Event: still `Running` and retried
    /// after [`retry_delay`] with the next base, or `Partial` after [`RUN_ATTEMPTS`].
    async fn after_error(
        &self,
        attempt: u32,
        base: Base,
        mut seen: Checkpoints<'_>,
        error: BrokerError,
    ) -> Retry {
        let key = self.key();
        let progress = seen.progress;
        self.credit(&mut seen.credited, progress);
        let in_doubt = in_doubt_after_error(seen.checkpoint, progress);
        let mut after = seen.status;
        let kept_reasons = after.reasons.clone();
        set_counts(&mut after, base, progress, kept_reasons, in_doubt);
        let base = base.then(progress.replayed, in_doubt, self.spec.dry_run);
        let delay = retry_delay(attempt);
        let now = self.ctx.shared.now();
        let next = broker_error_status(&after, self.generation(), &error, attempt, delay, &now);
        warn!(replay = %key, attempt, error = %error, "replay attempt failed");
        match self.write(&next).await {
            Ok(()) => {}
            Err(WriteError::Gone) => return Retry::Over(true),
            Err(WriteError::Failed(e)) => {
                warn!(replay = %key, error = %e, "cannot write status after a broker error: resumed at the next reconcile");
                return Retry::Over(false);
            }
        }
        let message = complete_message(&next);
        if attempt >= RUN_ATTEMPTS {
            self.event(Note::warning("Partial", "Replay", message))
                .await;
            return Retry::Over(true);
        }
        let reason = ReconcileError::Broker(error).reason();
        self.event(Note::warning(reason, "Replay", message)).await;
        self.pause(delay).await;
        if self.stop.is_cancelled() {
            // Shutdown during the pause: the counts are written, phase Running.
            return Retry::Over(false);
        }
        Retry::Again(Box::new(next), base)
    }
}

/// What a run does after a failed attempt.
enum Retry {
    /// Another attempt, from this status (written) and base.
    Again(Box<DeadLetterReplayStatus>, Base),
    /// The run ends; whether the replay is over (see [`Job::run`]).
    Over(bool),
}

/// The message of the `Complete` condition of `status` (empty without one).
pub(super) fn complete_message(status: &DeadLetterReplayStatus) -> String {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == COMPLETE)
        .map(|c| c.message.clone())
        .unwrap_or_default()
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
