//! The statuses of a replay (pure): `Pending` ([`pending_status`]), `Failed` for an
//! invalid spec ([`invalid_status`]), `Partial` for a spec changed while it ran
//! ([`spec_changed_status`]), `Running` ([`running_status`]), the end of a run
//! ([`finished_status`], [`interrupted_status`], [`broker_error_status`]), the counts
//! ([`set_counts`], [`reasons`]) and the one-line [`summary`].

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::broker::BrokerError;
use crate::crd::{DeadLetterReplaySpec, DeadLetterReplayStatus, InvalidSpec, ReplayPhase};
use crate::dlq::replay::{Outcome, ReplayReport};
use crate::reconcile::{PlanError, ReconcileError, ResourceKind};
use crate::status::conditions::{self, ConditionStatus, Desired, COMPLETE};

use super::plan::{Base, RunPlan, Tally};
use super::RUN_ATTEMPTS;

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

/// `Succeeded` for a resumed replay whose earlier runs reached `spec.limit`: nothing is
/// left to send. `Complete=True, reason=Succeeded` with the [`summary`], `completionTime`;
/// the counts stay.
pub fn limit_reached_status(
    current: &DeadLetterReplayStatus,
    generation: Option<i64>,
    spec: &DeadLetterReplaySpec,
    now: &Time,
) -> DeadLetterReplayStatus {
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
        message,
        generation,
        now,
    );
    status
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
        ReconcileError::Plan(PlanError::InvalidSpec {
            kind: ResourceKind::RetryPolicy,
            ..
        }) => "RetryPolicyInvalid",
        ReconcileError::Plan(PlanError::InvalidSpec { .. }) => "DeadLetterQueueInvalid",
        other => other.reason(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::dead_letter_replay::fixtures::{report, spec};
    use crate::controller::dead_letter_replay::plan::plan_run;
    use crate::controller::dead_letter_replay::retry_delay;
    use crate::controller::test_support::at;
    use crate::crd::FieldError;

    fn complete_of(s: &DeadLetterReplayStatus) -> (String, String, String) {
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == COMPLETE)
            .expect("Complete");
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

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
    fn a_resumed_replay_whose_limit_is_reached_ends_succeeded_with_its_counts() {
        let s = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}, "limit": 10}));
        let running = DeadLetterReplayStatus {
            phase: ReplayPhase::Running,
            scanned: 12,
            matched: 10,
            replayed: 8,
            in_doubt: 2,
            ..Default::default()
        };
        assert_eq!(plan_run(&running, &s).limit, Some(0));
        let done = limit_reached_status(&running, Some(1), &s, &at(50));
        assert_eq!(done.phase, ReplayPhase::Succeeded);
        assert_eq!((done.replayed, done.in_doubt), (8, 2), "the counts stay");
        assert!(done.completion_time.is_some());
        let (st, reason, message) = complete_of(&done);
        assert_eq!((st.as_str(), reason.as_str()), ("True", "Succeeded"));
        assert!(
            message.starts_with("limit of 10 reached: replayed 8 of 10"),
            "{message}"
        );
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

        let e = ReconcileError::Plan(PlanError::InvalidSpec {
            kind: ResourceKind::RetryPolicy,
            name: "shop/p".into(),
            source: invalid.clone(),
        });
        assert_eq!(pending_reason(&e), "RetryPolicyInvalid");
        let e = ReconcileError::Plan(PlanError::InvalidSpec {
            kind: ResourceKind::DeadLetterQueue,
            name: "shop/x".into(),
            source: invalid,
        });
        assert_eq!(pending_reason(&e), "DeadLetterQueueInvalid");
        assert_eq!(
            pending_reason(&ReconcileError::Plan(PlanError::SecretNotFound(
                "shop/s".into()
            ))),
            "SecretNotFound"
        );
    }
}
