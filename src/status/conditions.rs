//! Status conditions following the Kubernetes API conventions ("API Conventions",
//! Typical status properties: `metav1.Condition`): `type`, `status` (`True` / `False` /
//! `Unknown`), a CamelCase `reason`, a human `message`, `observedGeneration`, and a
//! `lastTransitionTime` that changes only when `status` changes. Pure: the caller passes
//! the time, so a steady state produces no change and no status write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::broker::{ApplyReport, ObjectKind, Outcome};
use crate::reconcile::ReconcileError;

/// Condition type: the resource is fully in place.
pub const READY: &str = "Ready";
/// Condition type: the broker topology is in place.
pub const TOPOLOGY_READY: &str = "TopologyReady";

/// Condition type: the dead-letter backlog is high (docs/REFERENCE.md, docs/ARCHITECTURE.md "Monitoring and alerting"): `True` while the
/// backlog alert fires, `False` otherwise (reason `BacklogPending` while it is pending),
/// `Unknown` when the depths cannot be read.
pub const BACKLOG_HIGH: &str = "BacklogHigh";
/// Condition type of a DeadLetterQueue in router mode only, written by the backlog
/// monitor (docs/MONITORING.md, "The retry router from outside"): `True` (reason
/// `Consuming`) while a retry router consumes the inbox and its depth is at most
/// `spec.router.backlogThreshold`; `False` with reason `NoConsumer`, `InboxBackedUp` or
/// `InboxMissing`; `Unknown` when the depths or the consumer count cannot be read.
/// Absent outside router mode.
pub const ROUTER_READY: &str = "RouterReady";
/// Condition type written by the backlog monitor (docs/RELIABILITY.md): `True` (reason
/// `Reachable`) while the broker's queue depths can be read, its message naming the
/// address in use (which node, when the Secret lists several); `False` with the reason of
/// the failure (`BrokerUnreachable`, `BrokerAuthFailed`, …) and every address tried.
pub const BROKER_REACHABLE: &str = "BrokerReachable";
/// Condition type of a DeadLetterReplay: `True` once it is over (the reason is its final
/// phase, or `InvalidSpec`), `False` while pending or running (the reason says why).
pub const COMPLETE: &str = "Complete";
/// Condition type: the generated `PrometheusRule` is in place.
pub const ALERT_RULES_READY: &str = "AlertRulesReady";

/// A condition's `status` (API conventions: `True`, `False` or `Unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// It cannot be determined (e.g. the broker cannot be read).
    Unknown,
}

impl ConditionStatus {
    /// `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// The desired state of one condition, before timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Condition type (e.g. [`READY`]).
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// CamelCase reason (e.g. `TopologyApplied`, `ArgumentConflict`).
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

/// Sets `desired` in `conditions` for `generation` at time `now`; returns whether
/// anything changed (so the caller writes status only then).
///
/// `lastTransitionTime` is set to `now` only when the condition is new or its status
/// changes; a changed reason or message alone keeps the previous transition time.
pub fn set(
    conditions: &mut Vec<Condition>,
    desired: &Desired,
    generation: Option<i64>,
    now: &Time,
) -> bool {
    let status = desired.status.as_str();
    match conditions.iter_mut().find(|c| c.type_ == desired.type_) {
        Some(c) => {
            let transition = c.status != status;
            let changed = transition
                || c.reason != desired.reason
                || c.message != desired.message
                || c.observed_generation != generation;
            if changed {
                if transition {
                    c.last_transition_time = now.clone();
                }
                c.status = status.to_string();
                c.reason = desired.reason.to_string();
                c.message = desired.message.clone();
                c.observed_generation = generation;
            }
            changed
        }
        None => {
            conditions.push(Condition {
                type_: desired.type_.to_string(),
                status: status.to_string(),
                reason: desired.reason.to_string(),
                message: desired.message.clone(),
                observed_generation: generation,
                last_transition_time: now.clone(),
            });
            true
        }
    }
}

/// Removes the condition `type_` from `conditions`; returns whether it was there (so the
/// caller writes status only then).
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// `TopologyReady` and `Ready` for the result of one reconcile of a DeadLetterQueue.
///
/// Reasons: `TopologyApplied` when everything is in place; `ArgumentConflict`,
/// `PolicyShadowed`, `DeclaredArgument` or `ApplyFailed` from the first object that is
/// not (in that order of precedence); for an error, [`ReconcileError::reason`] (`InvalidSpec`,
/// `BrokerUnreachable`, …).
pub fn for_reconcile(result: &Result<ApplyReport, ReconcileError>) -> [Desired; 2] {
    let (status, reason, message) = match result {
        Ok(report) if report.is_ready() => {
            // Obsolete retry tiers and retired dead-letter queues do not block readiness,
            // but a person may have to act (retained quorum tiers, dead letters left in a
            // retired queue): say so where `kubectl get dlq -o yaml` shows it.
            let obsolete =
                report.lines(|o| matches!(o, Outcome::Draining(_) | Outcome::Retained(_)));
            let retired = report.lines(|o| matches!(o, Outcome::Retired(_)));
            let in_place = report
                .actions
                .iter()
                .filter(|a| a.kind != ObjectKind::Ownership)
                .filter(|a| {
                    matches!(
                        a.outcome,
                        Outcome::Created | Outcome::Updated | Outcome::InPlace
                    )
                })
                .count();
            let mut message = format!("all {in_place} broker objects in place");
            if !obsolete.is_empty() {
                message.push_str("; obsolete retry tiers: ");
                message.push_str(&obsolete.join("; "));
            }
            if !retired.is_empty() {
                message.push_str("; retired dead-letter queues: ");
                message.push_str(&retired.join("; "));
            }
            (true, "TopologyApplied", message)
        }
        Ok(report) => {
            let first =
                |want: fn(&Outcome) -> bool| report.actions.iter().find(|a| want(&a.outcome));
            let (reason, action) = if let Some(a) = first(|o| matches!(o, Outcome::Conflict(_))) {
                ("ArgumentConflict", a)
            } else if let Some(a) = first(|o| matches!(o, Outcome::Shadowed(_))) {
                ("PolicyShadowed", a)
            } else if let Some(a) = first(|o| matches!(o, Outcome::Fixed(_))) {
                ("DeclaredArgument", a)
            } else if let Some(a) = first(|o| matches!(o, Outcome::Failed(_))) {
                ("ApplyFailed", a)
            } else {
                // is_ready() is false only for the four outcomes above.
                return ready_pair(false, "ApplyFailed", "not ready".into());
            };
            (false, reason, action.to_string())
        }
        Err(e) => (false, e.reason(), e.to_string()),
    };
    ready_pair(status, reason, message)
}

fn ready_pair(status: bool, reason: &'static str, message: String) -> [Desired; 2] {
    [
        Desired {
            type_: TOPOLOGY_READY,
            status: status.into(),
            reason,
            message: message.clone(),
        },
        Desired {
            type_: READY,
            status: status.into(),
            reason,
            message,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::{at, report};

    #[test]
    fn transition_time_changes_only_with_status() {
        let mut conds = Vec::new();
        let ok = &for_reconcile(&Ok(report(vec![Outcome::Created])))[1];
        assert!(set(&mut conds, ok, Some(1), &at(100)));
        assert_eq!(conds[0].status, "True");
        assert_eq!(conds[0].last_transition_time, at(100));
        // Same state later: no change at all.
        let ok_again = &for_reconcile(&Ok(report(vec![Outcome::InPlace])))[1];
        assert!(!set(&mut conds, ok_again, Some(1), &at(200)));
        assert_eq!(conds[0].last_transition_time, at(100));
        // A conflict flips the status: new transition time and reason.
        let bad = &for_reconcile(&Ok(report(vec![
            Outcome::InPlace,
            Outcome::Conflict("x-queue-type differs".into()),
        ])))[1];
        assert!(set(&mut conds, bad, Some(2), &at(300)));
        assert_eq!(conds[0].status, "False");
        assert_eq!(conds[0].reason, "ArgumentConflict");
        assert!(conds[0].message.contains("x-queue-type differs"));
        assert_eq!(conds[0].observed_generation, Some(2));
        assert_eq!(conds[0].last_transition_time, at(300));
        // Same status, other reason: transition time kept.
        let shadowed = &for_reconcile(&Ok(report(vec![Outcome::Shadowed("policy p".into())])))[1];
        assert!(set(&mut conds, shadowed, Some(2), &at(400)));
        assert_eq!(conds[0].reason, "PolicyShadowed");
        assert_eq!(conds[0].last_transition_time, at(300));
        // Exactly the same desired state: nothing changes, nothing to write.
        assert!(!set(&mut conds, shadowed, Some(2), &at(500)));
        assert_eq!(conds.len(), 1);
        // Removing another type changes nothing; removing it, once.
        assert!(!remove(&mut conds, ROUTER_READY));
        assert!(remove(&mut conds, READY));
        assert!(conds.is_empty() && !remove(&mut conds, READY));
    }

    #[test]
    fn obsolete_tiers_are_named_in_the_ready_message() {
        let mut r = report(vec![
            Outcome::InPlace,
            Outcome::Retained("delete it once its depth is 0".into()),
        ]);
        r.actions[1].name = "orders.retry.15s".into();
        let [_, ready] = for_reconcile(&Ok(r));
        assert_eq!(ready.status, ConditionStatus::True);
        assert_eq!(
            ready.message,
            "all 1 broker objects in place; obsolete retry tiers: queue orders.retry.15s: retained: delete it once its depth is 0"
        );
    }

    #[test]
    fn retired_dead_letter_queues_are_named_and_ownership_records_are_not_objects() {
        let mut r = report(vec![
            Outcome::Created,
            Outcome::InPlace,
            Outcome::Deleted,
            Outcome::Retired("2 dead letters left".into()),
        ]);
        r.actions[0].kind = ObjectKind::Ownership;
        r.actions[0].name = "for 8 names".into();
        r.actions[2].kind = ObjectKind::Binding;
        r.actions[2].name = "orders.dlx -> orders.dlq [orders]".into();
        r.actions[3].name = "orders.dlq".into();
        let [_, ready] = for_reconcile(&Ok(r));
        assert_eq!(ready.status, ConditionStatus::True);
        assert_eq!(
            ready.message,
            "all 1 broker objects in place; retired dead-letter queues: queue orders.dlq: retired: 2 dead letters left"
        );
    }

    #[test]
    fn errors_carry_their_reason() {
        let err: Result<ApplyReport, ReconcileError> = Err(ReconcileError::Plan(
            crate::reconcile::PlanError::RetryPolicyNotFound("default/p".into()),
        ));
        let [topology, ready] = for_reconcile(&err);
        assert_eq!(topology.type_, TOPOLOGY_READY);
        assert_eq!(ready.type_, READY);
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "RetryPolicyNotFound");
        assert!(ready.message.contains("default/p"));
    }
}
