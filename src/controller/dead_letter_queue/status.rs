//! The DeadLetterQueue's status and Events after a reconcile (pure): [`status_after`],
//! [`events_for`], [`alert_rule_events`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::events::EventType;

use crate::broker::{ApplyReport, ObjectKind, Outcome};
use crate::crd::{DeadLetterQueueStatus, TopologyStatus};
use crate::reconcile::{Prepared, ReconcileError};
use crate::status::conditions::{self, ALERT_RULES_READY, READY};
use crate::status::Note;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::{at, report};
    use crate::status::conditions::TOPOLOGY_READY;

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
