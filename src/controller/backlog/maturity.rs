//! The monitor's part of the maturity score (docs/ARCHITECTURE.md, "Maturity"): the
//! [`Facts`] of one DeadLetterQueue at a poll — what its reconcile resolved ([`Basis`]),
//! what the poll read, its `AlertRulesReady` condition, its DeadLetterReplays — and
//! `status.maturity`, written only when it changed ([`maturity_status`]). The items and
//! the score are [`crate::maturity`]'s.

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;

use crate::controller::conditions::{ALERT_RULES_READY, READY};
use crate::crd::{DeadLetterQueue, DepthStatus, MaturityStatus, RetryPolicy, RetryPolicySpec};
use crate::maturity::{self, report, Facts, Live, Maturity, Policy, Weights};

/// What the reconcile resolved of a DeadLetterQueue for its maturity: its spec and its
/// RetryPolicy.
#[derive(Debug, Clone, PartialEq)]
pub struct Basis {
    /// The DeadLetterQueue's spec, as validated.
    pub spec: crate::crd::DeadLetterQueueSpec,
    /// Its RetryPolicy's spec; `None` once the reconcile found it missing or invalid.
    pub policy: Option<RetryPolicySpec>,
    /// Whether the RetryPolicy's `Ready` condition is `True`.
    pub policy_ready: bool,
}

impl Basis {
    /// The basis of `dlq` with its (found and valid) RetryPolicy `policy`.
    pub fn of(dlq: &DeadLetterQueue, policy: &RetryPolicy) -> Self {
        let policy_ready = policy.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == READY && c.status == "True")
        });
        Basis {
            spec: dlq.spec.clone(),
            policy: Some(policy.spec.clone()),
            policy_ready,
        }
    }

    /// The RetryPolicy as [`maturity::Policy`].
    pub fn policy(&self) -> Policy<'_> {
        match &self.policy {
            Some(spec) => Policy::Found {
                spec,
                ready: self.policy_ready,
            },
            None => Policy::Unusable,
        }
    }
}

/// The DeadLetterQueues (`namespace/name`) of which a DeadLetterReplay in `store`
/// replayed at least one message ([`report::replayed_in`]).
pub fn replayed(store: Option<&Store<DynamicObject>>) -> HashSet<String> {
    match store {
        Some(store) => report::replayed_in(store.state().iter().map(|r| r.as_ref())),
        None => HashSet::new(),
    }
}

/// Whether the `AlertRulesReady` condition of `obj`'s status is `True` (the reconcile
/// applied its PrometheusRule).
pub fn alert_rules_applied(obj: &DynamicObject) -> bool {
    report::condition_true(obj, ALERT_RULES_READY)
}

/// What a poll saw of one DeadLetterQueue, beside its [`Basis`].
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// Its depths as read.
    pub depth: &'a DepthStatus,
    /// Router mode, and the inbox has a consumer.
    pub router_consuming: bool,
    /// A DeadLetterReplay of it replayed messages ([`replayed`]).
    pub replayed: bool,
    /// Its alert rules are applied ([`alert_rules_applied`]).
    pub alert_rules: bool,
}

/// The score of `basis` with what was `seen`; `retries_seen_before`: a message was seen in
/// a retry tier at an earlier poll (`status.maturity.retriesSeenTime`).
pub fn score(basis: &Basis, seen: &Seen<'_>, retries_seen_before: bool, w: &Weights) -> Maturity {
    let facts = Facts {
        spec: &basis.spec,
        policy: basis.policy(),
        live: Live {
            router_consuming: seen.router_consuming,
            retries_seen: retries_seen_before || seen.depth.retry.values().any(|&d| d > 0),
            replayed: seen.replayed,
            alert_rules: seen.alert_rules,
        },
    };
    maturity::evaluate(&facts, w)
}

/// The score after a poll that `seen` the resource at `now` (for the metrics), and
/// `status.maturity` to write, or `None` when it is what `current` already says (so a
/// steady state writes nothing). Pure. `retriesSeenTime` is set at the first poll that
/// finds a message in a retry tier, then kept.
pub fn maturity_status(
    current: Option<&MaturityStatus>,
    basis: &Basis,
    seen: &Seen<'_>,
    w: &Weights,
    now: &Time,
) -> (Maturity, Option<MaturityStatus>) {
    let before = current.and_then(|c| c.retries_seen_time.clone());
    let in_tiers = seen.depth.retry.values().any(|&d| d > 0);
    let retries_seen_time = before
        .clone()
        .or_else(|| in_tiers.then(|| now.0.to_string()));
    let m = score(basis, seen, before.is_some(), w);
    let next = m.status(w, retries_seen_time);
    let write = (current != Some(&next)).then_some(next);
    (m, write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::at;

    fn basis() -> Basis {
        Basis {
            spec: serde_json::from_value(serde_json::json!({
                "broker": {"secretRef": {"name": "s"}},
                "source": {"queue": "orders"},
                "retryPolicyRef": {"name": "p"}}))
            .expect("spec"),
            policy: Some(
                serde_json::from_value(serde_json::json!({"maxRetries": 1})).expect("policy"),
            ),
            policy_ready: true,
        }
    }

    fn seen(depth: &DepthStatus) -> Seen<'_> {
        Seen {
            depth,
            router_consuming: false,
            replayed: false,
            alert_rules: false,
        }
    }

    #[test]
    fn retries_seen_once_stay_seen_and_a_steady_state_writes_nothing() {
        let w = Weights::default();
        let b = basis();
        let empty = DepthStatus::default();
        let (_, first) = maturity_status(None, &b, &seen(&empty), &w, &at(0));
        let first = first.expect("nothing written yet: written");
        assert!(first.retries_seen_time.is_none());
        assert!(first
            .missing
            .iter()
            .any(|s| s.contains("no retry seen yet")));
        assert_eq!(
            maturity_status(Some(&first), &b, &seen(&empty), &w, &at(10)).1,
            None
        );

        let mut in_tier = DepthStatus::default();
        in_tier.retry.insert("5s".into(), 2);
        let (m, second) = maturity_status(Some(&first), &b, &seen(&in_tier), &w, &at(20));
        let second = second.expect("retries seen: written");
        assert_eq!(second.retries_seen_time, Some(at(20).0.to_string()));
        let gain = m.score
            - maturity::evaluate(
                &Facts {
                    spec: &b.spec,
                    policy: b.policy(),
                    live: Live::default(),
                },
                &w,
            )
            .score;
        assert!((gain - maturity::share(maturity::Item::LiveRetryPath, &w)).abs() < 1e-12);
        // The tier drained: still seen, nothing to write.
        assert_eq!(
            maturity_status(Some(&second), &b, &seen(&empty), &w, &at(30)).1,
            None
        );
        assert_eq!(
            maturity_status(Some(&second), &b, &seen(&in_tier), &w, &at(40)).1,
            None
        );
    }

    #[test]
    fn a_policy_turned_unusable_lowers_the_score() {
        let w = Weights::default();
        let b = basis();
        let empty = DepthStatus::default();
        let (_, before) = maturity_status(None, &b, &seen(&empty), &w, &at(0));
        let before = before.expect("written");
        let gone = Basis {
            policy: None,
            policy_ready: false,
            ..b
        };
        let (_, after) = maturity_status(Some(&before), &gone, &seen(&empty), &w, &at(5));
        let after = after.expect("changed: written");
        assert!(after.score < before.score, "{after:?} {before:?}");
        assert!(after
            .missing
            .iter()
            .any(|s| s.contains("create RetryPolicy p or fix it")));
    }
}
