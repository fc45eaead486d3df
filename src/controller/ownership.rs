//! One owner per broker name, in the cluster: the rule of [`crate::ownership`] (claims,
//! and who owns an overlap) over the watched DeadLetterQueues, and which of them share a
//! broker.
//!
//! Resources count as being on the same broker when they use the same Secret of the same
//! namespace, or when their brokers report the same cluster name (`GET /api/overview`);
//! a broker that cannot be asked counts as the same one, so a guess never leads to a
//! write or a delete ([`same_broker`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};

use crate::broker::BrokerClient;
use crate::controller::context::Context;
use crate::crd::{DeadLetterQueue, DeadLetterQueueStatus};
use crate::object::{decode, status_of};

pub use crate::ownership::{claims, Claim, Owner};

/// The watched objects `others` that decode as DeadLetterQueues, each with its status
/// (one that does not decode claims nothing: its own reconcile reports it).
fn decoded(others: &[Arc<DynamicObject>]) -> Vec<(DeadLetterQueue, DeadLetterQueueStatus)> {
    others
        .iter()
        .filter_map(|o| Some((decode::<DeadLetterQueue>(o).ok()?, status_of(o))))
        .collect()
}

/// The other resources of `others` (any namespace, same vhost) that own a name `dlq`
/// (with status `mine`) claims: [`crate::ownership::owner_of_overlap`] over the watched
/// objects. Pure.
pub fn owner_of_overlap(
    dlq: &DeadLetterQueue,
    mine: &DeadLetterQueueStatus,
    others: &[Arc<DynamicObject>],
) -> Vec<Owner> {
    crate::ownership::owner_of_overlap(dlq, mine, &decoded(others))
}

/// The other resources of `others` (same vhost) whose `status.topology` records a name
/// that `dlq` claims: deleting `dlq`'s objects could take theirs away
/// ([`crate::ownership::recorded_by_others`] over the watched objects). Pure.
pub fn recorded_by_others(
    dlq: &DeadLetterQueue,
    others: &[Arc<DynamicObject>],
) -> Vec<DeadLetterQueue> {
    crate::ownership::recorded_by_others(dlq, &decoded(others))
}

/// Whether `other` talks to the same broker as `dlq` (whose client is `mine`): same
/// namespace and Secret, or the same cluster name. Unknown counts as the same.
pub async fn same_broker(
    ctx: &Context,
    dlq: &DeadLetterQueue,
    mine: &dyn BrokerClient,
    other: &DeadLetterQueue,
) -> bool {
    let ns = crate::manifest::namespace_of(&dlq.metadata);
    let other_ns = crate::manifest::namespace_of(&other.metadata);
    let secret_name = &other.spec.broker.secret_ref.name;
    if ns == other_ns && *secret_name == dlq.spec.broker.secret_ref.name {
        return true;
    }
    let Ok(Some(secret)) = Api::<Secret>::namespaced(ctx.client.clone(), other_ns)
        .get_opt(secret_name)
        .await
    else {
        return true;
    };
    let Ok(conn) = crate::broker::BrokerConnection::from_secret_data(
        secret_name,
        &crate::manifest::secret_data(&secret),
    ) else {
        return true;
    };
    let Ok(theirs) = ctx.brokers.get(other_ns, &secret, &conn) else {
        return true;
    };
    match (mine.cluster_name().await, theirs.cluster_name().await) {
        (Ok(a), Ok(b)) => a == b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::at;
    use crate::manifest::object_key;

    fn dynamic(
        name: &str,
        created: i64,
        spec: serde_json::Value,
        recorded: &[&str],
    ) -> Arc<DynamicObject> {
        let mut o = serde_json::json!({
            "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                         "creationTimestamp": at(created)},
            "spec": spec,
        });
        if !recorded.is_empty() {
            o["status"] = serde_json::json!({"topology": {"queues": recorded}});
        }
        Arc::new(serde_json::from_value(o).expect("object"))
    }

    fn spec(queue: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut s = serde_json::json!({
            "broker": {"secretRef": {"name": "rabbit"}},
            "source": {"queue": queue},
            "retryPolicyRef": {"name": "p"},
        });
        if let (Some(o), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        s
    }

    fn typed(o: &Arc<DynamicObject>) -> DeadLetterQueue {
        decode::<DeadLetterQueue>(o).expect("decodes")
    }

    fn owners(o: &Arc<DynamicObject>, all: &[Arc<DynamicObject>]) -> Vec<String> {
        owner_of_overlap(&typed(o), &status_of(o), all)
            .into_iter()
            .map(|w| format!("{} {}", object_key(&w.other.metadata), w.claim.field))
            .collect()
    }

    #[test]
    fn the_older_keeps_a_name_nobody_recorded() {
        let a = dynamic("a", 10, spec("orders", serde_json::json!({})), &[]);
        let b = dynamic("b", 20, spec("orders", serde_json::json!({})), &[]);
        let all = vec![a.clone(), b.clone()];
        assert!(owners(&a, &all).is_empty());
        assert_eq!(owners(&b, &all), ["ns/a spec.source.queue"]);
    }

    #[test]
    fn the_one_that_recorded_it_keeps_it_even_when_younger() {
        // y (younger) created its source queue; o (older) is edited to use it as its
        // dead-letter queue: o must not take it over.
        let y = dynamic("y", 20, spec("young", serde_json::json!({})), &["young"]);
        let o = dynamic(
            "o",
            10,
            spec("old", serde_json::json!({"deadLetter": {"queue": "young"}})),
            &["old", "old.dlq"],
        );
        let all = vec![y.clone(), o.clone()];
        assert_eq!(owners(&o, &all), ["ns/y spec.deadLetter.queue"]);
        assert!(owners(&y, &all).is_empty());
    }

    #[test]
    fn retry_tiers_are_claimed_by_prefix() {
        let one = dynamic(
            "one",
            10,
            spec("q1", serde_json::json!({})),
            &["q1", "q1.retry.5s"],
        );
        let eight = dynamic(
            "eight",
            20,
            spec(
                "q8",
                serde_json::json!({"deadLetter": {"queue": "q1.retry.5s"}}),
            ),
            &[],
        );
        let all = vec![one.clone(), eight.clone()];
        assert_eq!(owners(&eight, &all), ["ns/one spec.deadLetter.queue"]);
        assert!(owners(&one, &all).is_empty());
    }

    #[test]
    fn other_vhosts_do_not_overlap() {
        let a = dynamic("a", 10, spec("orders", serde_json::json!({})), &[]);
        let b = dynamic(
            "b",
            20,
            spec(
                "orders",
                serde_json::json!({"broker": {"secretRef": {"name": "rabbit"}, "vhost": "other"}}),
            ),
            &[],
        );
        assert!(owners(&b, &[a, b.clone()]).is_empty());
    }
}
