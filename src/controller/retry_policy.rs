//! The RetryPolicy controller: its observed state is computed purely from its spec
//! ([`RetryPolicy::desired_status`], [`status_for`]) — validation, nominal schedule,
//! resolved tiers and worst-case retry duration, with a `Ready` condition (`Valid` or
//! `InvalidSpec` naming the fields) — and written by server-side apply only when it
//! changed ([`reconcile`]). DeadLetterQueues that reference a policy are re-reconciled by
//! their own controller, which watches RetryPolicies.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use crate::backoff::ResolvedPolicy;
use crate::controller::context::RetryPolicyContext;
use crate::controller::Error;
use crate::crd::{InvalidSpec, RetryPolicy, RetryPolicySpec, RetryPolicyStatus};
use crate::object::{api_resource, decode, status_of};
use crate::status::conditions::{self, ConditionStatus, Desired, READY};
use crate::status::{publish, Note};

/// Kind label of this controller's metrics.
pub const KIND: &str = "RetryPolicy";

impl RetryPolicy {
    /// The status this RetryPolicy should have at time `now`, starting from its current
    /// status (so condition transition times are kept when nothing changed). Returns the
    /// status and whether it differs from the current one (write only then).
    ///
    /// A valid spec yields `Ready=True, reason=Valid` with `schedule`, `tiers` and
    /// `worstCaseRetryDuration` as canonical durations; an invalid one yields
    /// `Ready=False, reason=InvalidSpec` with every bad field in the message and empty
    /// computed fields.
    pub fn desired_status(&self, now: &Time) -> (RetryPolicyStatus, bool) {
        let current = self.status.clone().unwrap_or_default();
        status_for(&current, self.metadata.generation, Ok(&self.spec), now)
    }
}

/// The status of a RetryPolicy of `generation` whose spec is `spec` (or did not decode:
/// `Err` naming the field), from its `current` status at time `now`. Pure. Returns the
/// status and whether it differs from `current`.
pub fn status_for(
    current: &RetryPolicyStatus,
    generation: Option<i64>,
    spec: Result<&RetryPolicySpec, &InvalidSpec>,
    now: &Time,
) -> (RetryPolicyStatus, bool) {
    let mut status = current.clone();
    let resolved = spec
        .map_err(Clone::clone)
        .and_then(ResolvedPolicy::from_spec);
    let ready = match resolved {
        Ok(resolved) => {
            let (schedule, tiers, worst) = resolved.status_strings();
            status.schedule = schedule;
            status.tiers = tiers;
            status.worst_case_retry_duration = Some(worst);
            Desired {
                type_: READY,
                status: ConditionStatus::True,
                reason: "Valid",
                message: format!(
                    "{} retries over {} tier(s)",
                    resolved.max_retries,
                    resolved.tiers_ms.len()
                ),
            }
        }
        Err(invalid) => {
            status.schedule.clear();
            status.tiers.clear();
            status.worst_case_retry_duration = None;
            Desired {
                type_: READY,
                status: ConditionStatus::False,
                reason: "InvalidSpec",
                message: invalid.to_string(),
            }
        }
    };
    conditions::set(&mut status.conditions, &ready, generation, now);
    status.observed_generation = generation;
    let changed = status != *current;
    (status, changed)
}

/// Reconciles one RetryPolicy: writes its status when it changed, with a Warning Event
/// `InvalidSpec` when it becomes invalid and a Normal `Valid` one when it becomes valid.
///
/// # Errors
/// Kubernetes API errors (retried with per-object backoff).
pub async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<RetryPolicyContext>,
) -> Result<Action, Error> {
    crate::controller::instrumented(KIND, &obj.clone(), &ctx.shared, async {
        let current: RetryPolicyStatus = status_of(&obj);
        let decoded = decode::<RetryPolicy>(&obj);
        let spec = decoded.as_ref().map(|rp| &rp.spec);
        let now = ctx.shared.now();
        let (status, changed) = status_for(&current, obj.metadata.generation, spec, &now);
        if changed {
            let ar = api_resource::<RetryPolicy>();
            crate::controller::apply_status(&ctx.shared, &ar, &obj, &status).await?;
            let ready = |s: &RetryPolicyStatus| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == READY)
                    .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            };
            if let Some((st, reason, message)) = ready(&status) {
                if ready(&current) != Some((st.clone(), reason.clone(), message.clone())) {
                    let type_ = if st == "True" {
                        EventType::Normal
                    } else {
                        EventType::Warning
                    };
                    let note = Note {
                        type_,
                        reason,
                        action: "Validate".into(),
                        note: message,
                    };
                    publish(&ctx.recorder, &obj, &ar, note).await;
                }
            }
        }
        ctx.backoff
            .reset(&crate::manifest::object_key(&obj.metadata));
        Ok(Action::await_change())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::at;
    use crate::crd::RetryPolicySpec;

    fn policy(spec: serde_json::Value, generation: i64) -> RetryPolicy {
        let spec: RetryPolicySpec = serde_json::from_value(spec).expect("spec");
        let mut rp = RetryPolicy::new("orders", spec);
        rp.metadata.generation = Some(generation);
        rp
    }

    #[test]
    fn valid_policy_reports_schedule_tiers_and_worst_case() {
        let rp = policy(
            serde_json::json!({"maxRetries": 4, "tiers": ["5s", "15s", "60s", "300s"],
                "backoff": {"initialDelay": "5s", "multiplier": 3, "maxDelay": "300s"}}),
            1,
        );
        let (status, changed) = rp.desired_status(&at(10));
        assert!(changed);
        assert_eq!(status.schedule, ["5s", "15s", "45s", "2m15s"]);
        assert_eq!(status.tiers, ["5s", "15s", "1m", "5m"]);
        // 5s + 15s + 60s (for 45s) + 300s (for 135s).
        assert_eq!(status.worst_case_retry_duration.as_deref(), Some("6m20s"));
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.conditions[0].reason, "Valid");
        assert_eq!(status.conditions[0].status, "True");
    }

    #[test]
    fn steady_state_changes_nothing_and_invalid_spec_names_fields() {
        let mut rp = policy(serde_json::json!({"maxRetries": 2}), 1);
        let (status, _) = rp.desired_status(&at(10));
        rp.status = Some(status);
        let (again, changed) = rp.desired_status(&at(20));
        assert!(!changed, "steady state must not write");
        assert_eq!(again.conditions[0].last_transition_time, at(10));

        // An object written past the schema (e.g. by an older CRD): reported, not a panic.
        let undecodable = InvalidSpec(vec![crate::crd::FieldError {
            field: "spec.maxRetries".into(),
            message: "invalid type: string \"three\", expected u32".into(),
        }]);
        let current = rp.status.clone().unwrap_or_default();
        let (bad, changed) = status_for(&current, Some(2), Err(&undecodable), &at(25));
        assert!(changed);
        assert_eq!(bad.conditions[0].reason, "InvalidSpec");
        assert!(bad.conditions[0]
            .message
            .contains("spec.maxRetries: invalid type"));
        assert!(bad.schedule.is_empty());
        rp.spec.backoff.multiplier = 0.5;
        rp.metadata.generation = Some(2);
        let (bad, changed) = rp.desired_status(&at(30));
        assert!(changed);
        assert_eq!(bad.conditions[0].status, "False");
        assert_eq!(bad.conditions[0].reason, "InvalidSpec");
        assert!(bad.conditions[0]
            .message
            .contains("spec.backoff.multiplier"));
        assert_eq!(bad.conditions[0].last_transition_time, at(30));
        assert!(bad.tiers.is_empty() && bad.worst_case_retry_duration.is_none());
        assert_eq!(bad.observed_generation, Some(2));
    }
}
