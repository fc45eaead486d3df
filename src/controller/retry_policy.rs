//! The RetryPolicy's observed state, computed purely from its spec (the RetryPolicy
//! controller only writes it): validation, nominal schedule, resolved tiers and worst-case
//! retry duration, with a `Ready` condition (`Valid` or `InvalidSpec` naming the fields).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::backoff::ResolvedPolicy;
use crate::controller::conditions::{self, Desired, READY};
use crate::crd::{RetryPolicy, RetryPolicyStatus};

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
        let mut status = current.clone();
        let generation = self.metadata.generation;
        let ready = match ResolvedPolicy::from_spec(&self.spec) {
            Ok(resolved) => {
                let (schedule, tiers, worst) = resolved.status_strings();
                status.schedule = schedule;
                status.tiers = tiers;
                status.worst_case_retry_duration = Some(worst);
                Desired {
                    type_: READY,
                    status: true,
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
                    status: false,
                    reason: "InvalidSpec",
                    message: invalid.to_string(),
                }
            }
        };
        conditions::set(&mut status.conditions, &ready, generation, now);
        status.observed_generation = generation;
        let changed = status != current;
        (status, changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RetryPolicySpec;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).expect("valid timestamp"))
    }

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
