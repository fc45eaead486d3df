//! The facts of the maturity score as each driver reads them (docs/ARCHITECTURE.md,
//! "Maturity"): from a status and the cluster's objects ([`condition_true`],
//! [`policy_of`], [`replayed_in`]: `dlq-operator report`), from manifest files and a
//! depth reading ([`file_facts`]: `report` and `run --standalone`), and the controller
//! monitor's: the [`Facts`] of one DeadLetterQueue at a poll — its spec as the reconcile planned it, its
//! RetryPolicy as the controller's store has it now ([`policy_in`]), what the poll read,
//! its `AlertRulesReady` condition, its DeadLetterReplays — and `status.maturity`,
//! written only when it changed ([`maturity_status`]). The items and the score are
//! [`crate::maturity`]'s.

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;

use kube::runtime::reflector::ObjectRef;

use crate::crd::{DeadLetterQueueSpec, DepthStatus, MaturityStatus, RetryPolicy};
use crate::maturity::{self, Facts, Live, Maturity, Policy, Weights};
use crate::object::{decode, string_at};
use crate::resolve::manifests::Planned;
use crate::status::conditions::{ALERT_RULES_READY, READY};

/// The RetryPolicy `name` of `namespace` in `store` (the DeadLetterQueue controller's
/// store of RetryPolicies), as [`policy_of`] reads it: found and valid, and whether
/// it is Ready. `None` when it is missing, invalid, or the store is not set yet.
pub fn policy_in(
    store: Option<&Store<DynamicObject>>,
    namespace: &str,
    name: &str,
) -> Option<(RetryPolicy, bool)> {
    let obj = store?.get(
        &ObjectRef::new_with(name, crate::object::api_resource::<RetryPolicy>()).within(namespace),
    )?;
    policy_of(&obj)
}

/// `policy` (from [`policy_in`]) as [`maturity::Policy`].
pub fn as_policy(policy: Option<&(RetryPolicy, bool)>) -> Policy<'_> {
    match policy {
        Some((p, ready)) => Policy::Found {
            spec: &p.spec,
            ready: *ready,
        },
        None => Policy::Unusable,
    }
}

/// Whether `store` is set and has its first listing (a store filled by a watch is empty,
/// not missing objects, before that).
pub fn synced(store: Option<&Store<DynamicObject>>) -> bool {
    use futures::FutureExt;
    store.is_some_and(|s| {
        s.wait_until_ready()
            .now_or_never()
            .is_some_and(|r| r.is_ok())
    })
}

/// The DeadLetterQueues (`namespace/name`) of which a DeadLetterReplay in `store`
/// replayed at least one message ([`replayed_in`]).
pub fn replayed(store: Option<&Store<DynamicObject>>) -> HashSet<String> {
    match store {
        Some(store) => replayed_in(store.state().iter().map(|r| r.as_ref())),
        None => HashSet::new(),
    }
}

/// Whether the `AlertRulesReady` condition of `obj`'s status is `True` (the reconcile
/// applied its PrometheusRule).
pub fn alert_rules_applied(obj: &DynamicObject) -> bool {
    condition_true(obj, ALERT_RULES_READY)
}

/// What a poll saw of one DeadLetterQueue, beside its spec and RetryPolicy.
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

/// The score of `spec` with its `policy` after a poll that `seen` the resource at `now`
/// (for the metrics), and `status.maturity` to write, or `None` when it is what `current`
/// already says (so a steady state writes nothing). Pure. `retriesSeenTime` is set at the
/// first poll that finds a message in a retry tier, then kept.
pub fn maturity_status(
    current: Option<&MaturityStatus>,
    spec: &DeadLetterQueueSpec,
    policy: Policy<'_>,
    seen: &Seen<'_>,
    w: &Weights,
    now: &Time,
) -> (Maturity, Option<MaturityStatus>) {
    // A time that does not parse (a status edited by hand) is not a retry seen.
    let before = current
        .and_then(|c| c.retries_seen_time.clone())
        .filter(|t| t.parse::<k8s_openapi::jiff::Timestamp>().is_ok());
    let in_tiers = seen.depth.retries_waiting();
    let facts = Facts {
        spec,
        policy,
        live: Live {
            from_files: false,
            router_consuming: seen.router_consuming,
            retries_seen: before.is_some() || in_tiers,
            replayed: seen.replayed,
            alert_rules: seen.alert_rules,
        },
    };
    let m = maturity::evaluate(&facts, w);
    let retries_seen_time = before.or_else(|| in_tiers.then(|| now.0.to_string()));
    let next = m.status(w, retries_seen_time);
    let write = (current != Some(&next)).then_some(next);
    (m, write)
}

/// Whether condition `type_` of `obj`'s status is `True`.
pub fn condition_true(obj: &DynamicObject, type_: &str) -> bool {
    obj.data
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(serde_json::Value::as_str) == Some(type_)
                    && c.get("status").and_then(serde_json::Value::as_str) == Some("True")
            })
        })
}

/// The DeadLetterQueues (`namespace/name`) of which one of `replays` (DeadLetterReplay
/// objects) replayed at least one message: `status.replayed` > 0 and not a dry run (whose
/// `status.replayed` counts what would have been).
pub fn replayed_in<'a>(replays: impl IntoIterator<Item = &'a DynamicObject>) -> HashSet<String> {
    replays
        .into_iter()
        .filter(|r| {
            let dry_run = r.data.pointer("/spec/dryRun") == Some(&serde_json::Value::Bool(true));
            let replayed = r
                .data
                .pointer("/status/replayed")
                .and_then(serde_json::Value::as_u64);
            !dry_run && replayed.is_some_and(|n| n > 0)
        })
        .filter_map(|r| {
            let ns = r.metadata.namespace.as_deref()?;
            let name = string_at(r, "/spec/deadLetterQueueRef/name")?;
            Some(format!("{ns}/{name}"))
        })
        .collect()
}

/// A RetryPolicy object when it is valid (it decodes and resolves), with whether its
/// `Ready` condition is `True`; `None` when it is invalid.
pub fn policy_of(obj: &DynamicObject) -> Option<(RetryPolicy, bool)> {
    let p = decode::<RetryPolicy>(obj).ok()?;
    crate::backoff::ResolvedPolicy::from_spec(&p.spec).ok()?;
    Some((p, condition_true(obj, READY)))
}

/// The facts of a DeadLetterQueue read from files (module doc), with what the broker
/// showed of it (`None`: its broker could not be read).
pub fn file_facts<'a>(
    planned: &'a Planned,
    observed: Option<&crate::collector::Observed>,
) -> Facts<'a> {
    let spec = &planned.object.spec;
    Facts {
        spec,
        policy: Policy::Found {
            spec: &planned.retry_policy.spec,
            ready: true,
        },
        live: Live {
            from_files: true,
            router_consuming: observed
                .and_then(|o| o.inbox.as_ref())
                .and_then(|i| i.consumers)
                .is_some_and(|c| c > 0),
            retries_seen: observed.is_some_and(|o| o.depth.retries_waiting()),
            replayed: false,
            alert_rules: spec.alerting.prometheus_rule.enabled,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::at;
    use crate::crd::RetryPolicySpec;

    fn spec() -> DeadLetterQueueSpec {
        serde_json::from_value(serde_json::json!({
            "broker": {"secretRef": {"name": "s"}},
            "source": {"queue": "orders"},
            "retryPolicyRef": {"name": "p"}}))
        .expect("spec")
    }

    fn policy() -> RetryPolicySpec {
        serde_json::from_value(serde_json::json!({"maxRetries": 1})).expect("policy")
    }

    fn ready(p: &RetryPolicySpec) -> Policy<'_> {
        Policy::Found {
            spec: p,
            ready: true,
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
        let (s, p) = (spec(), policy());
        let empty = DepthStatus::default();
        let (_, first) = maturity_status(None, &s, ready(&p), &seen(&empty), &w, &at(0));
        let first = first.expect("nothing written yet: written");
        assert!(first.retries_seen_time.is_none());
        assert!(first
            .missing
            .iter()
            .any(|m| m.contains("no retry seen yet")));
        let again = maturity_status(Some(&first), &s, ready(&p), &seen(&empty), &w, &at(10));
        assert_eq!(again.1, None);

        let mut in_tier = DepthStatus::default();
        in_tier.retry.insert("5s".into(), 2);
        let (m, second) =
            maturity_status(Some(&first), &s, ready(&p), &seen(&in_tier), &w, &at(20));
        let second = second.expect("retries seen: written");
        assert_eq!(second.retries_seen_time, Some(at(20).0.to_string()));
        let before = maturity::evaluate(
            &Facts {
                spec: &s,
                policy: ready(&p),
                live: Live::default(),
            },
            &w,
        );
        let gain = m.score - before.score;
        assert!((gain - maturity::share(maturity::Item::LiveRetryPath, &w)).abs() < 1e-12);
        // The tier drained: still seen, nothing to write.
        for (depth, t) in [(&empty, 30), (&in_tier, 40)] {
            let next = maturity_status(Some(&second), &s, ready(&p), &seen(depth), &w, &at(t));
            assert_eq!(next.1, None);
        }
        // A time edited into status by hand that is no time is no retry seen.
        let forged = MaturityStatus {
            retries_seen_time: Some("not a time".into()),
            ..second
        };
        let (_, fixed) = maturity_status(Some(&forged), &s, ready(&p), &seen(&empty), &w, &at(50));
        assert_eq!(fixed.map(|f| f.retries_seen_time), Some(None));
    }

    #[test]
    fn a_policy_gone_or_not_ready_lowers_the_score() {
        let w = Weights::default();
        let (s, p) = (spec(), policy());
        let empty = DepthStatus::default();
        let (_, before) = maturity_status(None, &s, ready(&p), &seen(&empty), &w, &at(0));
        let before = before.expect("written");
        let not_ready = Policy::Found {
            spec: &p,
            ready: false,
        };
        for (policy, says) in [
            (not_ready, "make RetryPolicy p Ready"),
            (Policy::Unusable, "create RetryPolicy p or fix it"),
        ] {
            let (_, after) = maturity_status(Some(&before), &s, policy, &seen(&empty), &w, &at(5));
            let after = after.expect("changed: written");
            assert!(after.score < before.score, "{after:?} {before:?}");
            assert!(after.missing.iter().any(|m| m.contains(says)), "{after:?}");
        }
    }

    #[test]
    fn a_policy_is_read_from_the_store_with_its_ready_condition() {
        use kube::runtime::reflector::store::Writer;
        use kube::runtime::watcher;
        let mut writer = Writer::<DynamicObject>::new(crate::object::api_resource::<RetryPolicy>());
        let rp = |name: &str, spec: serde_json::Value, ready: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "dlqoperator.io/v1alpha1", "kind": "RetryPolicy",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": spec,
                "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "r",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
            .expect("rp")
        };
        for obj in [
            rp("ok", serde_json::json!({"maxRetries": 2}), "True"),
            rp("pending", serde_json::json!({"maxRetries": 2}), "False"),
            rp(
                "invalid",
                serde_json::json!({"maxRetries": "many"}),
                "False",
            ),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(obj));
        }
        let store = writer.as_reader();
        let found = |name: &str| policy_in(Some(&store), "ns", name).map(|(_, ready)| ready);
        assert_eq!(found("ok"), Some(true));
        assert_eq!(found("pending"), Some(false));
        assert_eq!(found("invalid"), None);
        assert_eq!(found("missing"), None);
        assert_eq!(
            policy_in(None, "ns", "ok").map(|p| p.1),
            None,
            "no store yet"
        );
    }
}
